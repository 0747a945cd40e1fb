//! Wire framing, one module per dialect, each with the same four functions:
//!
//! | function | does |
//! |---|---|
//! | `parse_request(body)` | request facts the engine needs (model, stream, tools, ...) or a 400 |
//! | `render_success(ctx, success)` | the non-streaming 2xx body |
//! | `render_stream(ctx, success)` | the streamed 2xx body (timing comes from [`crate::body`]) |
//! | `render_error(ctx, error)` | the dialect's error body for a status |
//!
//! Adding a dialect = adding a module, a [`Dialect`] variant and its route in [`Dialect::for_route`].

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod embeddings;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;
pub mod vertex;

use std::time::Instant;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::body::MockBody;
use crate::engine::{MockError, Outcome, RequestFacts};

/// Per-response values every dialect needs.
#[derive(Debug, Clone)]
pub struct RenderContext {
    /// Sent as the response's request-id header.
    pub request_id: String,
    /// Fresh hex characters for response ids (`chatcmpl-...`).
    pub unique: String,
    /// Unix seconds.
    pub created: u64,
    /// The model as requested (empty when the request could not be parsed). Bedrock: the decoded
    /// model id from the path.
    pub model: String,
    /// OpenAI chat `stream_options.include_usage`.
    pub include_stream_usage: bool,
    /// When the request arrived (Bedrock latency metrics).
    pub started: Instant,
}

impl RenderContext {
    /// Milliseconds since the request arrived.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The dialects the mock speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `POST /v1/chat/completions`.
    OpenAiChat,
    /// `POST /v1/responses`.
    OpenAiResponses,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /model/{modelId}/invoke` and `/invoke-with-response-stream` (Anthropic bodies).
    BedrockInvoke,
    /// `POST /model/{modelId}/converse` and `/converse-stream`.
    BedrockConverse,
    /// `POST /v1/embeddings`, `POST /model/{modelId}/invoke` for a Titan or Cohere embedding
    /// model id, and Google AI's `POST /{v1beta|v1}/models/{model}:batchEmbedContents` (see
    /// [`embeddings`]).
    Embeddings(embeddings::Api),
    /// Vertex AI, Anthropic models: `POST /v1/projects/{p}/locations/{r}/publishers/anthropic/
    /// models/{model}:rawPredict` and `:streamRawPredict` (Anthropic bodies without `model`).
    VertexAnthropic,
    /// Vertex AI, Google models: `POST /v1/projects/{p}/locations/{r}/publishers/google/models/
    /// {model}:generateContent` and `:streamGenerateContent` (Gemini bodies and answers).
    VertexGemini,
    /// `POST /{v1beta|v1}/models/{model}:generateContent` and `:streamGenerateContent`.
    Gemini,
}

/// A dialect endpoint matched by method and raw path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dialect: Dialect,
    /// Key of the endpoint counters in the stats: the path, or `/model/{modelId}/<operation>` for
    /// Bedrock (so `:` and `%3A` count as the same endpoint).
    pub endpoint: String,
    /// Bedrock: the percent-decoded model id of the path.
    pub model_id: Option<String>,
    /// Bedrock: the operation streams (`invoke-with-response-stream`, `converse-stream`).
    pub path_stream: bool,
    /// An Azure OpenAI path ([`azure`]): Azure's auth and error shapes apply. For a deployment
    /// path, `model_id` is the deployment.
    pub azure: bool,
}

impl Dialect {
    /// The endpoint served at `method raw_path`, if any. `raw_path` is the path as sent (not
    /// percent-decoded), so a Bedrock model id with `%2F` stays one segment.
    pub fn for_route(method: &Method, raw_path: &str) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        let plain = |dialect| {
            Some(Route {
                dialect,
                endpoint: raw_path.to_owned(),
                model_id: None,
                path_stream: false,
                azure: false,
            })
        };
        match raw_path {
            "/v1/chat/completions" => plain(Self::OpenAiChat),
            "/v1/responses" => plain(Self::OpenAiResponses),
            "/v1/messages" => plain(Self::Anthropic),
            "/v1/embeddings" => plain(Self::Embeddings(embeddings::Api::OpenAi)),
            _ if raw_path.starts_with("/openai/") => azure::route(raw_path),
            _ if raw_path.starts_with("/v1/projects/") => vertex::route(raw_path),
            _ => bedrock::route(raw_path).or_else(|| gemini::route(raw_path)),
        }
    }

    pub fn parse_request(
        self,
        route: &Route,
        body: &[u8],
    ) -> Result<(RequestFacts, Value), MockError> {
        let model_id = route.model_id.as_deref().unwrap_or_default();
        match self {
            Self::OpenAiChat => openai_chat::parse_request(body),
            Self::OpenAiResponses => openai_responses::parse_request(body),
            Self::Anthropic => anthropic::parse_request(body),
            Self::BedrockInvoke => {
                bedrock::invoke::parse_request(model_id, route.path_stream, body)
            }
            Self::BedrockConverse => {
                bedrock::converse::parse_request(model_id, route.path_stream, body)
            }
            Self::Embeddings(api) => {
                embeddings::parse(api, model_id, body).map(|(facts, json, _)| (facts, json))
            }
            Self::VertexAnthropic => vertex::parse_request(model_id, route.path_stream, body),
            Self::Gemini | Self::VertexGemini => {
                gemini::parse_request(model_id, route.path_stream, body)
            }
        }
    }

    /// Frames the engine's outcome.
    pub fn respond(
        self,
        ctx: &RenderContext,
        outcome: &Outcome,
        stream: bool,
    ) -> Response<MockBody> {
        let success = match outcome {
            Outcome::Error(e) => return self.render_error(ctx, e),
            Outcome::Success(s) => s,
        };
        match (self, stream) {
            (Self::OpenAiChat, true) => openai_chat::render_stream(ctx, success),
            (Self::OpenAiChat, false) => openai_chat::render_success(ctx, success),
            (Self::OpenAiResponses, true) => openai_responses::render_stream(ctx, success),
            (Self::OpenAiResponses, false) => openai_responses::render_success(ctx, success),
            (Self::Anthropic, true) => anthropic::render_stream(ctx, success),
            (Self::Anthropic, false) => anthropic::render_success(ctx, success),
            (Self::BedrockInvoke, true) => bedrock::invoke::render_stream(ctx, success),
            (Self::BedrockInvoke, false) => bedrock::invoke::render_success(ctx, success),
            (Self::BedrockConverse, true) => bedrock::converse::render_stream(ctx, success),
            (Self::BedrockConverse, false) => bedrock::converse::render_success(ctx, success),
            // The vectors need the texts: the handler answers embeddings itself.
            (Self::Embeddings(_), _) => openai_chat::render_success(ctx, success),
            (Self::VertexAnthropic, true) => anthropic::render_stream(ctx, success),
            (Self::VertexAnthropic, false) => anthropic::render_success(ctx, success),
            (Self::Gemini | Self::VertexGemini, true) => gemini::render_stream(ctx, success),
            (Self::Gemini | Self::VertexGemini, false) => gemini::render_success(ctx, success),
        }
    }

    pub fn render_error(self, ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
        match self {
            Self::OpenAiChat
            | Self::OpenAiResponses
            | Self::Embeddings(embeddings::Api::OpenAi) => openai_chat::render_error(ctx, error),
            Self::Anthropic => anthropic::render_error(ctx, error),
            Self::BedrockInvoke
            | Self::BedrockConverse
            | Self::Embeddings(embeddings::Api::Titan | embeddings::Api::Cohere) => {
                bedrock::render_error(ctx, error)
            }
            Self::VertexAnthropic => anthropic::render_error(ctx, error),
            Self::Gemini | Self::VertexGemini | Self::Embeddings(embeddings::Api::Gemini) => {
                gemini::render_error(ctx, error)
            }
        }
    }
}

/// A response with `content-type`, the request id header and the given body.
pub(crate) fn response(
    status: u16,
    content_type: &'static str,
    request_id_header: &'static str,
    ctx: &RenderContext,
    body: MockBody,
) -> Response<MockBody> {
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = res.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if let Ok(v) = HeaderValue::from_str(&ctx.request_id) {
        headers.insert(request_id_header, v);
    }
    res
}

/// Adds `Retry-After: <seconds>` when set.
pub(crate) fn with_retry_after(
    mut res: Response<MockBody>,
    seconds: Option<u64>,
) -> Response<MockBody> {
    if let Some(s) = seconds {
        res.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    res
}

/// One `data: <payload>\n\n` server-sent event.
pub(crate) fn sse_data(payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One `event: <name>\ndata: <payload>\n\n` server-sent event.
pub(crate) fn sse_event(name: &str, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(name.len() + payload.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&sse_data(payload));
    Bytes::from(out)
}

/// Serializing the dialects' plain structs cannot fail; an empty object is a safe, visible
/// fallback.
pub(crate) fn json_bytes(value: &impl Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

/// A tool call's arguments as a JSON value written verbatim (`{}` if they are not valid JSON:
/// behaviours set in-process are not validated).
pub(crate) fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned())
        .or_else(|_| RawValue::from_string("{}".to_owned()))
        .unwrap_or_default()
}

/// `<prefix><24 hex characters>`: ids for messages, items and tool calls.
pub(crate) fn short_id(prefix: &str, ctx: &RenderContext) -> String {
    format!("{prefix}{}", &ctx.unique[..ctx.unique.len().min(24)])
}

/// Parses the body as JSON, or the dialect's 400 with `bad_json(parse error)`.
pub(crate) fn parse_json(
    body: &[u8],
    bad_json: impl FnOnce(String) -> MockError,
) -> Result<Value, MockError> {
    serde_json::from_slice(body).map_err(|e| bad_json(e.to_string()))
}

/// Characters of a string value.
pub(crate) fn text_len(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

/// Characters of text in a content field: a string, or parts/blocks with `text`.
pub(crate) fn content_chars(content: &Value) -> usize {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text"))
            .map(text_len)
            .sum(),
        other => text_len(other),
    }
}

/// Characters of text in every `messages[].content` (plus `extra`, e.g. a system prompt).
pub(crate) fn messages_chars(json: &Value, messages_key: &str) -> usize {
    json.get(messages_key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content"))
        .map(content_chars)
        .sum()
}

/// The field holds a non-empty array.
pub(crate) fn non_empty_array(v: Option<&Value>) -> bool {
    v.and_then(Value::as_array).is_some_and(|a| !a.is_empty())
}

/// Decodes `%XX` escapes (model ids may contain `:` or `/`); invalid escapes stay as they are.
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Ab%2Fc"), "a:b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
