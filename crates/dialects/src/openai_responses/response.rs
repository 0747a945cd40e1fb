//! Whole (non-streamed) Responses answers: parsing a provider's, rendering the caller's, usage,
//! and errors in OpenAI's shape.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::canonical::{ChatResponse, Part, StopReason, TranslateError};
use crate::common::{parse_any_error, terr, unix_now, ErrorClass};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::openai_chat::{self, openai_error_type};
use crate::sse::{self};
use crate::InputOutputUsage as WireUsage;
use crate::Usage;

use super::request::{item_content, WireItem};

/// A provider's non-stream Response object → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|e| terr(format!("openai-responses response: {e}")))?;
    let mut content = Vec::new();
    for item in wire.output {
        match item.kind.as_deref().unwrap_or_default() {
            "message" => {
                for p in item_content(item.content.as_deref(), 0)? {
                    if let Part::Text(t) = p {
                        content.push(Part::Text(t));
                    }
                }
            }
            "function_call" => content.push(Part::ToolCall {
                id: item.call_id.unwrap_or_default(),
                name: item.name.unwrap_or_default(),
                arguments: item.arguments.unwrap_or_default(),
            }),
            _ => {} // reasoning and built-in tool items: dropped
        }
    }
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: stop_from_status(
            wire.incomplete_details
                .as_ref()
                .and_then(|d| d["reason"].as_str()),
            has_calls,
        ),
        usage: wire.usage.unwrap_or_default().canonical(),
    })
}

pub(super) fn stop_from_status(incomplete_reason: Option<&str>, has_calls: bool) -> StopReason {
    match incomplete_reason {
        Some("max_output_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        _ if has_calls => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

/// `(status, incomplete reason)` of a finished response with this stop reason.
pub(super) fn status_of(reason: StopReason) -> (&'static str, Option<&'static str>) {
    match reason {
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

fn usage_json(u: Usage) -> serde_json::Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// The Response object (every field the SDKs' `Response` model declares).
pub(super) fn response_object(
    id: &str,
    model: &str,
    created: u64,
    status: &str,
    incomplete: Option<&str>,
    output: Vec<serde_json::Value>,
    usage: Option<Usage>,
) -> serde_json::Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": incomplete.map(|r| json!({"reason": r})),
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage.map(usage_json),
        "user": null,
        "metadata": {},
    })
}

pub(super) fn item_base(id: &str) -> &str {
    id.strip_prefix("resp_").unwrap_or(id)
}

pub(super) fn message_item(id: &str, status: &str, text: &str) -> serde_json::Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

pub(super) fn call_item(
    id: &str,
    status: &str,
    call_id: &str,
    name: &str,
    args: &str,
) -> serde_json::Value {
    json!({"id": id, "type": "function_call", "status": status, "arguments": args,
        "call_id": call_id, "name": name})
}

/// Canonical → the caller's non-stream Response object (`created_at` = now).
pub fn render_response(resp: &ChatResponse) -> Bytes {
    render_response_at(resp, unix_now())
}

/// [`render_response`] with a fixed `created_at` (tests and golden files).
pub fn render_response_at(resp: &ChatResponse, created: u64) -> Bytes {
    let base = item_base(&resp.id);
    let output = resp
        .content
        .iter()
        .enumerate()
        .filter_map(|(n, p)| match p {
            Part::Text(t) => Some(message_item(&format!("msg_{base}_{n}"), "completed", t)),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(call_item(
                &format!("fc_{base}_{n}"),
                "completed",
                id,
                name,
                arguments,
            )),
            _ => None,
        })
        .collect();
    let (status, incomplete) = status_of(resp.stop_reason);
    let v = response_object(
        &resp.id,
        &resp.model,
        created,
        status,
        incomplete,
        output,
        Some(resp.usage),
    );
    Bytes::from(v.to_string())
}

/// Usage of a non-stream Response object.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    WireUsage::of_response(body)
}

/// The `code` of a Responses `error` event for an error class.
pub(super) fn responses_error_code(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::RateLimit => "rate_limit_exceeded",
        ErrorClass::Overloaded => "overloaded",
        ErrorClass::InvalidRequest | ErrorClass::TooLarge => "invalid_prompt",
        _ => "server_error",
    }
}

/// A gateway-made error: the same JSON shape as chat completions (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    openai_chat::render_error(kind, message)
}

/// The event that ends a committed stream after an upstream failure: `event: error` with a
/// `type:"error"` payload (wire-formats.md §2.2). A [`StreamEncoder`] given a
/// `StreamEvent::Error` does the same with its running `sequence_number`.
pub fn render_stream_error(message: &str) -> Bytes {
    sse::encode(
        Some("error"),
        &json!({"type": "error", "code": "server_error", "message": message, "param": null,
            "sequence_number": 0})
        .to_string(),
    )
}

/// A provider error body → (error type, message), tolerant of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, |c| openai_error_type(c).0)
}

/// A translated upstream error in OpenAI's shape: status kept, type mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    openai_chat::render_upstream_error(status, error_type, message)
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    output: Vec<WireItem>,
    #[serde(default)]
    incomplete_details: Option<serde_json::Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
}
