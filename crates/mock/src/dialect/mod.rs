//! Wire framing, one module per dialect, each with the same four functions:
//!
//! | function | does |
//! |---|---|
//! | `parse_request(body)` | request facts the engine needs (model, stream, ...) or a 400 |
//! | `render_success(ctx, success)` | the non-streaming 2xx body |
//! | `render_stream(ctx, success)` | the streamed 2xx body (timing comes from [`crate::body`]) |
//! | `render_error(ctx, error)` | the dialect's error body for a status |
//!
//! Adding a dialect = adding a module and a [`Dialect`] variant.

pub mod openai_chat;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
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
    /// The model as requested (empty when the request could not be parsed).
    pub model: String,
    /// OpenAI chat `stream_options.include_usage`.
    pub include_stream_usage: bool,
}

/// The dialects the mock speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    OpenAiChat,
}

impl Dialect {
    /// The dialect served at `method path`, if any.
    pub fn for_route(method: &Method, path: &str) -> Option<Self> {
        match (method, path) {
            (&Method::POST, "/v1/chat/completions") => Some(Self::OpenAiChat),
            _ => None,
        }
    }

    pub fn parse_request(self, body: &[u8]) -> Result<(RequestFacts, Value), MockError> {
        match self {
            Self::OpenAiChat => openai_chat::parse_request(body),
        }
    }

    /// Frames the engine's outcome.
    pub fn respond(
        self,
        ctx: &RenderContext,
        outcome: &Outcome,
        stream: bool,
    ) -> Response<MockBody> {
        match (self, outcome) {
            (Self::OpenAiChat, Outcome::Error(e)) => openai_chat::render_error(ctx, e),
            (Self::OpenAiChat, Outcome::Success(s)) if stream => openai_chat::render_stream(ctx, s),
            (Self::OpenAiChat, Outcome::Success(s)) => openai_chat::render_success(ctx, s),
        }
    }

    pub fn render_error(self, ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
        match self {
            Self::OpenAiChat => openai_chat::render_error(ctx, error),
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
