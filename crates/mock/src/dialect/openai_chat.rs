//! OpenAI Chat Completions (`POST /v1/chat/completions`), framed like the real API
//! (reference/wire-formats.md §1.1 errors, §2.1 SSE).
//!
//! Field order of every body is fixed by the structs below, so the bytes are stable.

use bytes::Bytes;
use http::Response;
use serde::Serialize;
use serde_json::Value;

use super::{response, sse_data, with_retry_after, RenderContext};
use crate::body::{self, MockBody, StreamEncoder};
use crate::engine::{Ending, MockError, RequestFacts, Success, Usage};

const REQUEST_ID_HEADER: &str = "x-request-id";
const SERVICE_TIER: &str = "default";

/// Reads `model`, `stream`, `stream_options.include_usage` and the prompt length.
pub fn parse_request(body: &[u8]) -> Result<(RequestFacts, Value), MockError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        invalid_request(format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you \
             aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but \
             what was sent was not valid JSON.) ({e})"
        ))
    })?;
    let model = match json.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(invalid_request(
                "you must provide a model parameter".to_owned(),
            ))
        }
    };
    let facts = RequestFacts {
        model,
        stream: json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_stream_usage: json
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        prompt_chars: prompt_chars(&json),
    };
    Ok((facts, json))
}

/// Characters of text in `messages[].content` (a string, or parts with `text`).
fn prompt_chars(json: &Value) -> usize {
    let messages = json.get("messages").and_then(Value::as_array);
    let text_len = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
    messages
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content"))
        .map(|content| match content {
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text"))
                .map(text_len)
                .sum(),
            other => text_len(other),
        })
        .sum()
}

fn invalid_request(message: String) -> MockError {
    MockError {
        error_type: Some("invalid_request_error".to_owned()),
        message: Some(message),
        ..MockError::new(400)
    }
}

/// `application/json` `chat.completion` object. `dropAfterChunks` sends the first half of it, then
/// kills the connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let completion = Completion {
        id: &completion_id(ctx),
        object: "chat.completion",
        created: ctx.created,
        model: &ctx.model,
        choices: [Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: &success.reply,
                refusal: None,
                annotations: [],
            },
            logprobs: None,
            finish_reason: "stop",
        }],
        usage: UsageBody::from(success.usage),
        system_fingerprint: None,
        service_tier: SERVICE_TIER,
    };
    let bytes = Bytes::from(json_bytes(&completion));
    let body = match success.ending {
        Ending::DropAfter(_) => body::truncated(bytes),
        _ => body::full(bytes),
    };
    response(
        success.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body,
    )
}

/// `text/event-stream` of `chat.completion.chunk` events: the role chunk, one chunk per content
/// piece, the finish chunk, the usage chunk (only with `stream_options.include_usage`), `[DONE]`.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = ChunkEncoder {
        id: completion_id(ctx),
        created: ctx.created,
        model: ctx.model.clone(),
        include_usage: ctx.include_stream_usage,
        usage: success.usage,
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

/// `{"error":{"message","type","param","code"}}` with the type/code OpenAI uses for the status.
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    let (default_type, code, default_message) = error_defaults(error.status, &ctx.model);
    let body = ErrorEnvelope {
        error: ErrorBody {
            message: error.message.as_deref().unwrap_or(&default_message),
            r#type: error.error_type.as_deref().unwrap_or(default_type),
            param: None,
            code: if error.error_type.is_some() {
                None
            } else {
                code
            },
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

/// `(type, code, message)` of OpenAI's error for `status` (reference/wire-formats.md §1.1).
fn error_defaults(status: u16, model: &str) -> (&'static str, Option<&'static str>, String) {
    match status {
        400 => (
            "invalid_request_error",
            None,
            format!("Invalid request for model `{model}`."),
        ),
        401 => (
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided.".to_owned(),
        ),
        403 => (
            "invalid_request_error",
            None,
            format!("You are not allowed to use model `{model}`."),
        ),
        404 => (
            "invalid_request_error",
            Some("model_not_found"),
            format!("The model `{model}` does not exist or you do not have access to it."),
        ),
        429 => (
            "requests",
            Some("rate_limit_exceeded"),
            format!(
                "Rate limit reached for {model} on requests per min (RPM). Please try again later."
            ),
        ),
        503 => (
            "server_error",
            Some("server_is_overloaded"),
            "The server is overloaded or not ready yet.".to_owned(),
        ),
        500..=599 => ("server_error", None, stream_error_message("server_error")),
        _ => (
            "invalid_request_error",
            None,
            format!("Request for model `{model}` failed with status {status}."),
        ),
    }
}

fn stream_error_message(error_type: &str) -> String {
    match error_type {
        "server_error" => {
            "The server had an error while processing your request. Sorry about that!".to_owned()
        }
        "overloaded_error" => "Overloaded".to_owned(),
        other => format!("The stream failed with a {other}."),
    }
}

fn completion_id(ctx: &RenderContext) -> String {
    format!("chatcmpl-{}", ctx.unique)
}

/// Serializing these plain structs cannot fail; an empty object is a safe, visible fallback.
fn json_bytes(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

struct ChunkEncoder {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    usage: Usage,
}

impl ChunkEncoder {
    fn chunk(&self, choices: Vec<ChunkChoice<'_>>, usage: Option<UsageBody>) -> Bytes {
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            service_tier: SERVICE_TIER,
            system_fingerprint: None,
            choices,
            // `"usage": null` on every chunk but the last, only when usage was asked for.
            usage: self.include_usage.then_some(usage),
        };
        sse_data(&json_bytes(&chunk))
    }

    fn delta_chunk(&self, delta: Delta<'_>, finish_reason: Option<&'static str>) -> Bytes {
        self.chunk(
            vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason,
            }],
            None,
        )
    }
}

impl StreamEncoder for ChunkEncoder {
    fn preamble(&mut self) -> Vec<Bytes> {
        let delta = Delta {
            role: Some("assistant"),
            content: Some(""),
            refusal: Some(None),
        };
        vec![self.delta_chunk(delta, None)]
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        let delta = Delta {
            content: Some(text),
            ..Delta::default()
        };
        vec![self.delta_chunk(delta, None)]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        let mut events = vec![self.delta_chunk(Delta::default(), Some("stop"))];
        if self.include_usage {
            events.push(self.chunk(Vec::new(), Some(UsageBody::from(self.usage))));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        events
    }

    fn error(&mut self, error_type: &str) -> Vec<Bytes> {
        let body = ErrorEnvelope {
            error: ErrorBody {
                message: &stream_error_message(error_type),
                r#type: error_type,
                param: None,
                code: None,
            },
        };
        vec![sse_data(&json_bytes(&body))]
    }
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: UsageBody,
    system_fingerprint: Option<&'a str>,
    service_tier: &'static str,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
    refusal: Option<&'a str>,
    annotations: [(); 0],
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    service_tier: &'static str,
    system_fingerprint: Option<&'a str>,
    choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<UsageBody>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<&'a str>>,
}

#[derive(Serialize)]
struct UsageBody {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens(),
        }
    }
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    r#type: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}
