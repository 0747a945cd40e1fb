//! Anthropic Messages (`POST /v1/messages`), wire-formats.md §1.2 and §2.3: translation through
//! the canonical form, the stream decoder/encoder, and errors in Anthropic's shape.
//!
//! The Bedrock InvokeModel body for Anthropic models is this body without `model`/`stream` and
//! with `anthropic_version` ([`invoke_body`]); its stream payloads are these events
//! ([`StreamDecoder::push_event`]).

mod request;
mod response;
mod stream;

pub use request::{invoke_body, request_body, to_canonical};
pub use response::{
    parse_error, parse_response, render_error, render_response, render_stream_error,
    render_upstream_error, response_usage,
};
pub use stream::{classify_stream_event, StreamDecoder, StreamEncoder};

use bytes::Bytes;

use crate::request::{ParseError, ParsedRequest};
use crate::Dialect;

pub const PATH: &str = "/v1/messages";

/// Anthropic requires `max_tokens`; this is sent when the canonical request has none.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Parses a caller body.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    ParsedRequest::parse_json_top(Dialect::AnthropicMessages, body)
}

/// The body for a destination of this dialect serving `model` (same-dialect forwarding).
pub fn render_request(req: &ParsedRequest, model: &str) -> Bytes {
    req.body_with_model(model)
}
