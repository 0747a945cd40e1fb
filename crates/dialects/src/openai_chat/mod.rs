//! OpenAI Chat Completions (`POST /v1/chat/completions`), wire-formats.md §1.1 and §2.1.

mod request;
mod response;
mod stream;
#[cfg(test)]
mod tests;

pub use request::{request_body, to_canonical};
pub(crate) use response::{error_status, openai_error_type};
pub use response::{
    parse_error, parse_response, render_error, render_response, render_response_at,
    render_stream_error, render_upstream_error, response_usage,
};
pub use stream::{
    classify_chunk_before_content, classify_stream_event, classify_stream_event_after_content,
    classify_stream_event_before_content, stream_event_usage, stream_text, StreamDecoder,
    StreamEncoder,
};

use bytes::Bytes;

use crate::request::{ParseError, ParsedRequest};
use crate::Dialect;

pub const PATH: &str = "/v1/chat/completions";

/// Parses a caller body.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    ParsedRequest::parse_json_top(Dialect::OpenAiChat, body)
}

/// The body for an OpenAI-kind destination serving `model`.
pub fn render_request(req: &ParsedRequest, model: &str) -> Bytes {
    req.body_with_model(model)
}
