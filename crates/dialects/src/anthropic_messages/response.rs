//! Whole (non-streamed) Messages answers: parsing a provider's, rendering the caller's, usage,
//! and errors in Anthropic's shape.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::canonical::{ChatResponse, Part, StopReason, TranslateError};
use crate::common::{classify_error, parse_any_error, terr, ErrorClass};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::sse::{self};
use crate::InputOutputUsage as WireUsage;
use crate::Usage;

use super::request::WireBlock;

/// A provider's non-stream `Message` (also Bedrock InvokeModel's answer) → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|e| terr(format!("anthropic-messages response: {e}")))?;
    let mut content = Vec::new();
    for b in wire.content {
        match b.kind.as_str() {
            "text" => content.push(Part::Text(b.text.unwrap_or_default())),
            "tool_use" => content.push(Part::ToolCall {
                id: b.id.unwrap_or_default(),
                name: b.name.unwrap_or_default(),
                arguments: b
                    .input
                    .map_or_else(|| "{}".to_owned(), |r| r.get().to_owned()),
            }),
            _ => {} // thinking, server tool blocks: dropped (docs/translation.md)
        }
    }
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: stop_from_wire(wire.stop_reason.as_deref()),
        usage: wire.usage.unwrap_or_default().canonical(),
    })
}

/// Canonical → the caller's non-stream `Message`.
pub fn render_response(resp: &ChatResponse) -> Bytes {
    let content: Vec<serde_json::Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(json!({"type": "text", "text": t})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"type": "tool_use", "id": id, "name": name,
                "input": serde_json::from_str::<serde_json::Value>(arguments)
                    .ok()
                    .filter(serde_json::Value::is_object)
                    .unwrap_or_else(|| json!({}))})),
            _ => None,
        })
        .collect();
    let body = json!({
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_to_wire(resp.stop_reason),
        "stop_sequence": null,
        "usage": {
            "input_tokens": resp.usage.input_tokens,
            "output_tokens": resp.usage.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    });
    Bytes::from(body.to_string())
}

/// Usage of a non-stream `Message`.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    WireUsage::of_response(body)
}

pub(crate) fn stop_from_wire(reason: Option<&str>) -> StopReason {
    match reason {
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("tool_use") => StopReason::ToolUse,
        Some("refusal") => StopReason::ContentFilter,
        _ => StopReason::EndTurn, // end_turn, pause_turn, unknown
    }
}

pub(crate) fn stop_to_wire(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "refusal",
    }
}

pub(super) fn stream_error(error_type: &str, message: &str) -> Bytes {
    sse::encode(
        Some("error"),
        &json!({"type": "error", "error": {"type": error_type, "message": message}}).to_string(),
    )
}

/// Anthropic `error.type` for an error class.
pub(crate) fn anthropic_error_type(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::InvalidRequest => "invalid_request_error",
        ErrorClass::Authentication => "authentication_error",
        ErrorClass::Billing => "billing_error",
        ErrorClass::Permission => "permission_error",
        ErrorClass::NotFound => "not_found_error",
        ErrorClass::Timeout => "timeout_error",
        ErrorClass::Conflict => "conflict_error",
        ErrorClass::TooLarge => "request_too_large",
        ErrorClass::RateLimit => "rate_limit_error",
        ErrorClass::Overloaded => "overloaded_error",
        ErrorClass::Server => "api_error",
    }
}

fn error_body(error_type: &str, message: &str) -> Bytes {
    Bytes::from(
        json!({"type": "error", "error": {"type": error_type, "message": message},
            "request_id": null})
        .to_string(),
    )
}

/// A gateway-made error in Anthropic's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, error_type) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "invalid_request_error"),
        GatewayErrorKind::Unauthenticated => (401, "authentication_error"),
        GatewayErrorKind::PermissionDenied => (403, "permission_error"),
        GatewayErrorKind::NotFound => (404, "not_found_error"),
        GatewayErrorKind::TooLarge => (413, "request_too_large"),
        GatewayErrorKind::Unprocessable => (422, "invalid_request_error"),
        GatewayErrorKind::RequestTimeout => (408, "timeout_error"),
        GatewayErrorKind::RateLimited => (429, "rate_limit_error"),
        GatewayErrorKind::BadGateway => (502, "api_error"),
        GatewayErrorKind::GatewayTimeout => (504, "timeout_error"),
        GatewayErrorKind::Unavailable => (503, "api_error"),
    };
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: error_body(error_type, message),
    }
}

/// The event that ends a committed stream after an upstream failure (wire-formats.md §2.3).
pub fn render_stream_error(message: &str) -> Bytes {
    stream_error("api_error", message)
}

/// A provider error body → (error type, message), tolerant of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, anthropic_error_type)
}

/// A translated upstream error in Anthropic's shape: status kept, type mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: error_body(
            anthropic_error_type(classify_error(status, error_type)),
            message,
        ),
    }
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Vec<WireBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}
