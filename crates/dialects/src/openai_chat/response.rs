//! Whole (non-streamed) chat completions: parsing a provider's, rendering the caller's, usage,
//! and errors in OpenAI's shape (SPEC §6.3, wire-formats.md §2.1).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::canonical::{ChatResponse, Part, StopReason, TranslateError};
use crate::common::{classify_error, parse_any_error, terr, unix_now, ErrorClass};
use crate::errors::{status_for_error_type, GatewayErrorKind, RenderedError};
use crate::json_tail;
use crate::sse::{self};
use crate::Usage;

use super::request::ChatWireToolCall;

#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) prompt_tokens: u64,
    #[serde(default)]
    pub(super) completion_tokens: u64,
}

#[derive(Deserialize)]
pub(super) struct ErrorEnvelope {
    pub(super) error: ErrorBody,
}

#[derive(Deserialize)]
pub(super) struct ErrorBody {
    #[serde(default)]
    pub(super) message: Option<String>,
    #[serde(default, rename = "type")]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) code: Option<serde_json::Value>,
}

/// Usage of a non-streamed response body (read from the end of the body when possible: see
/// `json_tail`).
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    json_tail::response_usage::<WireUsage>(body).map(WireUsage::canonical)
}

pub(super) fn error_json(error_type: &str, code: Option<&str>, message: &str) -> serde_json::Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
}

/// A gateway-made error in OpenAI's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, error_type, code) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "invalid_request_error", None),
        GatewayErrorKind::Unauthenticated => (401, "authentication_error", Some("invalid_api_key")),
        GatewayErrorKind::PermissionDenied => (403, "permission_error", None),
        GatewayErrorKind::NotFound => (404, "not_found_error", Some("model_not_found")),
        GatewayErrorKind::TooLarge => (413, "invalid_request_error", Some("request_too_large")),
        GatewayErrorKind::RequestTimeout => (408, "invalid_request_error", Some("request_timeout")),
        GatewayErrorKind::RateLimited => (429, "rate_limit_error", Some("rate_limit_exceeded")),
        GatewayErrorKind::BadGateway => (502, "api_error", Some("upstream_connection_error")),
        GatewayErrorKind::GatewayTimeout => (504, "api_error", Some("upstream_timeout")),
        GatewayErrorKind::Unavailable => (503, "api_error", Some("no_eligible_destination")),
        GatewayErrorKind::Unprocessable => {
            (422, "invalid_request_error", Some("idempotency_key_reused"))
        }
    };
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: Bytes::from(error_json(error_type, code, message).to_string()),
    }
}

/// The event that ends a committed stream after an upstream failure: `data: {"error":…}` and no
/// `[DONE]` — openai-python raises `openai.APIError` on it (wire-formats.md §2.1).
pub fn render_stream_error(message: &str) -> Bytes {
    sse::encode(None, &error_json("server_error", None, message).to_string())
}

// Translation through the canonical form (SPEC §5.7, docs/translation.md). The same functions
// exist in `anthropic_messages` and `openai_responses`; the gateway picks a module by dialect.

/// A provider's non-stream chat completion → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: ChatWireResponse =
        serde_json::from_slice(body).map_err(|e| terr(format!("openai-chat response: {e}")))?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| terr("openai-chat response has no choices"))?;
    let mut content = Vec::new();
    if let Some(t) = choice.message.content.filter(|t| !t.is_empty()) {
        content.push(Part::Text(t));
    }
    if let Some(r) = choice.message.refusal.filter(|r| !r.is_empty()) {
        content.push(Part::Text(r));
    }
    for tc in choice.message.tool_calls.into_iter().flatten() {
        content.push(Part::ToolCall {
            id: tc.id,
            name: tc.function.name,
            arguments: tc.function.arguments,
        });
    }
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: finish_to_stop(choice.finish_reason.as_deref()),
        usage: wire.usage.map(WireUsage::canonical).unwrap_or_default(),
    })
}

/// Canonical → the caller's non-stream `chat.completion` object (`created` = now).
pub fn render_response(resp: &ChatResponse) -> Bytes {
    render_response_at(resp, unix_now())
}

/// [`render_response`] with a fixed `created` (tests and golden files).
pub fn render_response_at(resp: &ChatResponse, created: u64) -> Bytes {
    let text: String = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<serde_json::Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments}})),
            _ => None,
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { serde_json::Value::Null } else { json!(text) },
        "refusal": null,
        "annotations": [],
    });
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    let body = json!({
        "id": resp.id,
        "object": "chat.completion",
        "created": created,
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": stop_to_finish(resp.stop_reason),
        }],
        "usage": usage_json(resp.usage),
        "system_fingerprint": null,
    });
    Bytes::from(body.to_string())
}

pub(super) fn usage_json(u: Usage) -> serde_json::Value {
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

/// OpenAI `finish_reason` → canonical stop reason.
pub(crate) fn finish_to_stop(reason: Option<&str>) -> StopReason {
    match reason {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

/// Canonical stop reason → OpenAI `finish_reason` (a stop sequence is `stop` in OpenAI).
pub(crate) fn stop_to_finish(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
}

/// The status an OpenAI error `(type, code)` stands for: a specific code wins over a generic
/// type (`server_error` + `overloaded` is 529, what Anthropic's `overloaded_error` maps to).
pub(crate) fn error_status(error_type: &str, code: Option<&str>) -> u16 {
    match code {
        Some("overloaded") => 529,
        Some(c) if status_for_error_type(c) != 500 => status_for_error_type(c),
        _ => status_for_error_type(error_type),
    }
}

/// A provider error body → (error type, message). Tolerant of any shape (OpenAI, Anthropic,
/// Bedrock `{"message"}`) and of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, |c| openai_error_type(c).0)
}

/// A translated upstream error in OpenAI's shape: the status is kept, the type is mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    let (t, code) = openai_error_type(classify_error(status, error_type));
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: Bytes::from(error_json(t, code, message).to_string()),
    }
}

/// OpenAI `(type, code)` for an error class.
pub(crate) fn openai_error_type(c: ErrorClass) -> (&'static str, Option<&'static str>) {
    match c {
        ErrorClass::InvalidRequest => ("invalid_request_error", None),
        ErrorClass::Authentication => ("authentication_error", Some("invalid_api_key")),
        ErrorClass::Billing => ("insufficient_quota", Some("billing_error")),
        ErrorClass::Permission => ("permission_error", None),
        ErrorClass::NotFound => ("not_found_error", None),
        ErrorClass::Timeout => ("server_error", Some("timeout")),
        ErrorClass::Conflict => ("invalid_request_error", Some("conflict")),
        ErrorClass::TooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorClass::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorClass::Overloaded => ("server_error", Some("overloaded")),
        ErrorClass::Server => ("server_error", None),
    }
}

#[derive(Deserialize)]
struct ChatWireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    choices: Vec<ChatWireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct ChatWireChoice {
    message: ChatWireAnswer,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatWireAnswer {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChatWireToolCall>>,
}

impl WireUsage {
    pub(super) fn canonical(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
        }
    }
}
