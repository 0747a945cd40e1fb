//! Google Gemini (`POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent?alt=sse`, also under `/v1/`), framed like Google AI: whole
//! `GenerateContentResponse`s, SSE `data:` chunks without an end marker, usage in every chunk,
//! errors as `{"error":{"code","message","status"}}`. The key must come in `x-goog-api-key`
//! (checked by the handler, [`has_key`]).

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{
    json_bytes, non_empty_array, parse_json, percent_decode, raw_json, response, sse_data,
    text_len, with_retry_after, Dialect, RenderContext, Route,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::engine::{MockError, RequestFacts, StreamError, Success, Usage};

pub(crate) const REQUEST_ID_HEADER: &str = "x-request-id";
/// The in-stream error status when `streamErrorType` is not set.
const DEFAULT_STREAM_ERROR_STATUS: &str = "UNAVAILABLE";

/// `/{v1beta|v1}/models/{model}:{method}` → the route (model percent-decoded; the method says
/// whether it streams; `:batchEmbedContents` is an embeddings route, [`super::embeddings`]).
pub fn route(raw_path: &str) -> Option<Route> {
    let rest = raw_path
        .strip_prefix("/v1beta/models/")
        .or_else(|| raw_path.strip_prefix("/v1/models/"))?;
    let (model, method) = rest.rsplit_once(':')?;
    if model.is_empty() || model.contains('/') {
        return None;
    }
    let (dialect, path_stream) = match method {
        "generateContent" => (Dialect::Gemini, false),
        "streamGenerateContent" => (Dialect::Gemini, true),
        "batchEmbedContents" => (Dialect::Embeddings(super::embeddings::Api::Gemini), false),
        _ => return None,
    };
    Some(Route {
        dialect,
        endpoint: raw_path.to_owned(),
        model_id: Some(percent_decode(model)),
        path_stream,
        azure: false,
    })
}

/// Whether the request carries a key the way the google-genai SDKs send it.
pub fn has_key(headers: &HeaderMap) -> bool {
    headers
        .get("x-goog-api-key")
        .is_some_and(|v| !v.as_bytes().is_empty())
}

/// Google's answer to a request without a key.
pub fn missing_key() -> MockError {
    MockError {
        error_type: Some("PERMISSION_DENIED".to_owned()),
        message: Some("Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.".to_owned()),
        ..MockError::new(403)
    }
}

/// A 400 `INVALID_ARGUMENT`, as Google frames a request it cannot take.
pub(crate) fn invalid_argument(message: String) -> MockError {
    MockError {
        error_type: Some("INVALID_ARGUMENT".to_owned()),
        message: Some(message),
        ..MockError::new(400)
    }
}

/// The model from the path, streaming from the method; the body gives the prompt length
/// (`contents[].parts[].text`, `systemInstruction.parts[].text`) and function declarations.
pub fn parse_request(
    model_id: &str,
    stream: bool,
    body: &[u8],
) -> Result<(RequestFacts, Value), MockError> {
    let json = parse_json(body, |e| {
        invalid_argument(format!("Invalid JSON payload received. {e}"))
    })?;
    let parts_chars = |content: &Value| -> usize {
        content
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text"))
            .map(text_len)
            .sum()
    };
    let prompt_chars = json
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(parts_chars)
        .sum::<usize>()
        + json.get("systemInstruction").map_or(0, parts_chars);
    let has_tools = json
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| non_empty_array(t.get("functionDeclarations")));
    let facts = RequestFacts {
        model: model_id.to_owned(),
        stream,
        include_stream_usage: false,
        prompt_chars,
        has_tools,
    };
    Ok((facts, json))
}

/// `application/json` `GenerateContentResponse`. `dropAfterChunks` sends the first half of it,
/// then kills the connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let part = match &success.tool_call {
        Some(tool) => Part::call(&tool.name, &tool.arguments),
        None => Part::text(&success.reply),
    };
    let out = answer(ctx, vec![part], Some(finish_reason(success)), success.usage);
    let bytes = Bytes::from(json_bytes(&out));
    let body = body::whole_answer(bytes, &success.ending);
    response(
        success.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body,
    )
}

/// `text/event-stream`: one `data:` chunk per content piece (a tool call: one chunk with the
/// whole call, after its pieces), the last with `finishReason`; every chunk has `usageMetadata`
/// (the prompt's so far, the full counts on the last).
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = Chunks {
        ctx: ctx.clone(),
        success_usage: success.usage,
        finish: finish_reason(success),
        tool: success
            .tool_call
            .as_ref()
            .map(|t| (t.name.clone(), String::new())),
    };
    let steps = body::stream_steps(&mut encoder, success);
    response(
        success.status,
        "text/event-stream",
        REQUEST_ID_HEADER,
        ctx,
        body::scripted(steps),
    )
}

/// `{"error":{"code","message","status"}}` with the status name Google uses for the HTTP status
/// (a behaviour's `error.type` overrides it).
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    let status = error
        .error_type
        .clone()
        .unwrap_or_else(|| status_name(error.status).to_owned());
    let body = ErrorEnvelope {
        error: ErrorBody {
            code: error.status,
            message: error
                .message
                .clone()
                .unwrap_or_else(|| default_message(error.status, &ctx.model)),
            status,
        },
    };
    let res = response(
        error.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body::full(json_bytes(&body)),
    );
    with_retry_after(res, error.retry_after_seconds)
}

/// Google's status name for an HTTP status.
fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

fn default_message(status: u16, model: &str) -> String {
    match status {
        429 => "Resource has been exhausted (e.g. check quota).".to_owned(),
        503 => "The model is overloaded. Please try again later.".to_owned(),
        404 => format!("models/{model} is not found for API version v1beta, or is not supported for generateContent."),
        500..=599 => "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting".to_owned(),
        _ => "Request contains an invalid argument.".to_owned(),
    }
}

fn finish_reason(success: &Success) -> &'static str {
    if success.content_filtered {
        "SAFETY"
    } else {
        "STOP"
    }
}

fn answer<'a>(
    ctx: &'a RenderContext,
    parts: Vec<Part>,
    finish_reason: Option<&'static str>,
    usage: Usage,
) -> GenerateContentResponse<'a> {
    GenerateContentResponse {
        candidates: vec![Candidate {
            content: Content {
                role: "model",
                parts,
            },
            finish_reason,
            index: 0,
        }],
        usage_metadata: UsageMetadata::from(usage),
        model_version: &ctx.model,
        response_id: &ctx.unique[..ctx.unique.len().min(22)],
    }
}

struct Chunks {
    ctx: RenderContext,
    success_usage: Usage,
    finish: &'static str,
    /// A tool call's name and its arguments gathered so far.
    tool: Option<(String, String)>,
}

impl Chunks {
    fn chunk(&self, parts: Vec<Part>, finish: Option<&'static str>, usage: Usage) -> Bytes {
        sse_data(&json_bytes(&answer(&self.ctx, parts, finish, usage)))
    }

    /// Usage before the end: the prompt only.
    fn prompt_usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.success_usage.prompt_tokens,
            completion_tokens: 0,
        }
    }
}

impl StreamEncoder for Chunks {
    fn preamble(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        match &mut self.tool {
            Some((_, args)) => {
                args.push_str(text);
                Vec::new()
            }
            None => vec![self.chunk(vec![Part::text(text)], None, self.prompt_usage())],
        }
    }

    fn finish(&mut self) -> Vec<Bytes> {
        let parts = match &self.tool {
            Some((name, args)) => vec![Part::call(name, args)],
            None => vec![Part::text("")],
        };
        vec![self.chunk(parts, Some(self.finish), self.success_usage)]
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        let status = error
            .error_type
            .clone()
            .unwrap_or_else(|| DEFAULT_STREAM_ERROR_STATUS.to_owned());
        let code = match status.as_str() {
            "RESOURCE_EXHAUSTED" => 429,
            "INVALID_ARGUMENT" => 400,
            "INTERNAL" => 500,
            "DEADLINE_EXCEEDED" => 504,
            _ => 503,
        };
        let body = ErrorEnvelope {
            error: ErrorBody {
                code,
                message: error
                    .message
                    .clone()
                    .unwrap_or_else(|| default_message(code, &self.ctx.model)),
                status,
            },
        };
        vec![sse_data(&json_bytes(&body))]
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerateContentResponse<'a> {
    candidates: Vec<Candidate>,
    usage_metadata: UsageMetadata,
    model_version: &'a str,
    response_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Content,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<&'static str>,
    index: u32,
}

#[derive(Serialize)]
struct Content {
    role: &'static str,
    parts: Vec<Part>,
}

/// `{"text": …}` or `{"functionCall": {"name", "args"}}` (Google AI sends no call id).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Part {
    #[serde(rename = "text")]
    Text(String),
    FunctionCall(FunctionCall),
}

#[derive(Serialize)]
struct FunctionCall {
    name: String,
    args: Box<RawValue>,
}

impl Part {
    fn text(t: &str) -> Part {
        Part::Text(t.to_owned())
    }

    fn call(name: &str, arguments: &str) -> Part {
        Part::FunctionCall(FunctionCall {
            name: name.to_owned(),
            args: raw_json(if arguments.trim().is_empty() {
                "{}"
            } else {
                arguments
            }),
        })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: u64,
    candidates_token_count: u64,
    total_token_count: u64,
}

impl From<Usage> for UsageMetadata {
    fn from(u: Usage) -> Self {
        Self {
            prompt_token_count: u.prompt_tokens,
            candidates_token_count: u.completion_tokens,
            total_token_count: u.total_tokens(),
        }
    }
}

#[derive(Serialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Serialize)]
struct ErrorBody {
    code: u16,
    message: String,
    status: String,
}
