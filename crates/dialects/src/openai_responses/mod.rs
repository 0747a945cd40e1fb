//! OpenAI Responses (`POST /v1/responses`), wire-formats.md §1.1 and §2.2: translation through the
//! canonical form, the stream decoder/encoder (`event:` lines and `sequence_number`), errors in
//! OpenAI's shape.
//!
//! Responses is stateless here: `previous_response_id`/`conversation` cannot be translated, and
//! translated requests are sent with `store: false`.

mod request;
mod response;
mod stream;

pub use request::{request_body, to_canonical};
pub use response::{
    parse_error, parse_response, render_error, render_response, render_response_at,
    render_stream_error, render_upstream_error, response_usage,
};
pub use stream::{classify_stream_event, StreamDecoder, StreamEncoder};

use bytes::Bytes;

use crate::request::{ParseError, ParsedRequest};
use crate::Dialect;

pub const PATH: &str = "/v1/responses";

/// Parses a caller body.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    ParsedRequest::parse_json_top(Dialect::OpenAiResponses, body)
}

/// The body for a destination of this dialect serving `model` (same-dialect forwarding).
pub fn render_request(req: &ParsedRequest, model: &str) -> Bytes {
    req.body_with_model(model)
}
