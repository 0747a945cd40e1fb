//! Whole `GenerateContentResponse`s: parsing a provider's, rendering the caller's, usage, finish
//! reasons, and errors in Google's shape (`{"error": {"code", "message", "status"}}`).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::canonical::{ChatResponse, Part, StopReason, TranslateError};
use crate::common::{classify_error, terr, ErrorClass};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::Usage;

use super::wire::{answer_part, args_text, OutContent, OutPart, WContent, WPart};

/// A provider's `GenerateContentResponse` → canonical: the first candidate's parts (thoughts
/// dropped), its finish reason, `usageMetadata`. A prompt blocked by `promptFeedback.blockReason`
/// (no candidate) is an empty answer stopped by the content filter.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let w: WResponse =
        serde_json::from_slice(body).map_err(|e| terr(format!("gemini response: {e}")))?;
    let mut content = Vec::new();
    let mut calls = 0usize;
    let cand = w.candidates.into_iter().next();
    let blocked = cand.is_none() && w.prompt_feedback.is_some_and(|f| f.block_reason.is_some());
    let reason = cand.as_ref().and_then(|c| c.finish_reason.clone());
    for p in cand
        .and_then(|c| c.content)
        .map(|c| c.parts)
        .unwrap_or_default()
    {
        content.extend(part_of(p, &mut calls));
    }
    let has_call = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop_reason = if blocked {
        StopReason::ContentFilter
    } else {
        stop_from_wire(reason.as_deref(), has_call)
    };
    Ok(ChatResponse {
        id: w.response_id,
        model: w.model_version,
        content,
        stop_reason,
        usage: w.usage_metadata.map(WUsage::canonical).unwrap_or_default(),
    })
}

/// One response part → a canonical part (text, function call); thoughts and others: none.
/// `calls` numbers function calls without an id.
pub(super) fn part_of(p: WPart, calls: &mut usize) -> Option<Part> {
    if p.thought == Some(true) {
        return None;
    }
    if let Some(t) = p.text {
        return Some(Part::Text(t));
    }
    let fc = p.function_call?;
    *calls += 1;
    Some(Part::ToolCall {
        id: fc
            .id
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("call_{calls}")),
        name: fc.name,
        arguments: args_text(fc.args.as_deref()),
    })
}

/// A `GenerateContentResponse` as read (every field optional).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct WResponse {
    #[serde(default)]
    pub(super) candidates: Vec<WCandidate>,
    #[serde(default)]
    pub(super) usage_metadata: Option<WUsage>,
    #[serde(default)]
    pub(super) model_version: String,
    #[serde(default)]
    pub(super) response_id: String,
    #[serde(default)]
    pub(super) prompt_feedback: Option<WFeedback>,
    /// An in-stream error chunk.
    #[serde(default)]
    pub(super) error: Option<WError>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WCandidate {
    #[serde(default)]
    pub(super) content: Option<WContent>,
    #[serde(default)]
    pub(super) finish_reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WFeedback {
    #[serde(default)]
    pub(super) block_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WError {
    #[serde(default)]
    pub(super) code: Option<u64>,
    #[serde(default)]
    pub(super) message: Option<String>,
    #[serde(default)]
    pub(super) status: Option<String>,
}

/// `usageMetadata`; output counts the candidates' and the thoughts' tokens (both billed as
/// output).
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(super) struct WUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
}

impl WUsage {
    pub(super) fn canonical(self) -> Usage {
        Usage {
            input_tokens: self.prompt_token_count,
            output_tokens: self
                .candidates_token_count
                .saturating_add(self.thoughts_token_count),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutUsage {
    prompt_token_count: u64,
    candidates_token_count: u64,
    total_token_count: u64,
}

pub(super) fn out_usage(u: Usage) -> OutUsage {
    OutUsage {
        prompt_token_count: u.input_tokens,
        candidates_token_count: u.output_tokens,
        total_token_count: u.input_tokens.saturating_add(u.output_tokens),
    }
}

/// A `GenerateContentResponse` as written (whole answer or one stream chunk).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutResponse<'a> {
    pub(super) candidates: [OutCandidate<'a>; 1],
    pub(super) usage_metadata: OutUsage,
    pub(super) model_version: &'a str,
    pub(super) response_id: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutCandidate<'a> {
    pub(super) content: OutContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) finish_reason: Option<&'static str>,
    pub(super) index: u32,
}

pub(super) fn out_response<'a>(
    parts: Vec<OutPart<'a>>,
    finish: Option<StopReason>,
    usage: Usage,
    model: &'a str,
    id: &'a str,
) -> String {
    let r = OutResponse {
        candidates: [OutCandidate {
            content: OutContent {
                role: Some("model"),
                parts,
            },
            finish_reason: finish.map(stop_to_wire),
            index: 0,
        }],
        usage_metadata: out_usage(usage),
        model_version: model,
        response_id: id,
    };
    serde_json::to_string(&r).unwrap_or_default()
}

/// Canonical → the caller's `GenerateContentResponse`.
pub fn render_response(resp: &ChatResponse) -> Bytes {
    let parts = resp.content.iter().filter_map(answer_part).collect();
    Bytes::from(out_response(
        parts,
        Some(resp.stop_reason),
        resp.usage,
        &resp.model,
        &resp.id,
    ))
}

/// Usage of a non-stream answer.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct OnlyUsage {
        usage_metadata: Option<WUsage>,
    }
    serde_json::from_slice::<OnlyUsage>(body)
        .ok()?
        .usage_metadata
        .map(WUsage::canonical)
}

/// A `finishReason` → canonical. Gemini says `STOP` for function calls and stop sequences alike:
/// `has_call` tells a tool-use stop.
pub(super) fn stop_from_wire(reason: Option<&str>, has_call: bool) -> StopReason {
    match reason {
        Some("MAX_TOKENS") => StopReason::MaxTokens,
        Some(
            "SAFETY" | "PROHIBITED_CONTENT" | "BLOCKLIST" | "SPII" | "RECITATION" | "IMAGE_SAFETY",
        ) => StopReason::ContentFilter,
        _ if has_call => StopReason::ToolUse,
        _ => StopReason::EndTurn, // STOP, OTHER, MALFORMED_FUNCTION_CALL, LANGUAGE, unknown
    }
}

pub(super) fn stop_to_wire(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence | StopReason::ToolUse => "STOP",
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter => "SAFETY",
    }
}

/// Google's status name for an error class.
fn class_status(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::InvalidRequest | ErrorClass::TooLarge => "INVALID_ARGUMENT",
        ErrorClass::Authentication => "UNAUTHENTICATED",
        ErrorClass::Billing | ErrorClass::RateLimit => "RESOURCE_EXHAUSTED",
        ErrorClass::Permission => "PERMISSION_DENIED",
        ErrorClass::NotFound => "NOT_FOUND",
        ErrorClass::Timeout => "DEADLINE_EXCEEDED",
        ErrorClass::Conflict => "ABORTED",
        ErrorClass::Overloaded => "UNAVAILABLE",
        ErrorClass::Server => "INTERNAL",
    }
}

/// The Google status name an HTTP status and error type stand for (`RESOURCE_EXHAUSTED` for a
/// 429, `UNAVAILABLE` for a 503, …).
pub fn status_name(status: u16, error_type: &str) -> &'static str {
    match status {
        502 | 503 => "UNAVAILABLE",
        _ => class_status(classify_error(status, error_type)),
    }
}

pub(super) fn error_json(status: u16, name: &str, message: &str) -> Value {
    json!({"error": {"code": status, "message": message, "status": name}})
}

fn rendered(status: u16, name: &str, message: &str) -> RenderedError {
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: Bytes::from(error_json(status, name, message).to_string()),
    }
}

/// A gateway-made error in Google's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, name) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "INVALID_ARGUMENT"),
        GatewayErrorKind::Unauthenticated => (401, "UNAUTHENTICATED"),
        GatewayErrorKind::PermissionDenied => (403, "PERMISSION_DENIED"),
        GatewayErrorKind::NotFound => (404, "NOT_FOUND"),
        GatewayErrorKind::TooLarge => (413, "INVALID_ARGUMENT"),
        GatewayErrorKind::Unprocessable => (422, "FAILED_PRECONDITION"),
        GatewayErrorKind::RequestTimeout => (408, "DEADLINE_EXCEEDED"),
        GatewayErrorKind::RateLimited => (429, "RESOURCE_EXHAUSTED"),
        GatewayErrorKind::BadGateway => (502, "UNAVAILABLE"),
        GatewayErrorKind::GatewayTimeout => (504, "DEADLINE_EXCEEDED"),
        GatewayErrorKind::Unavailable => (503, "UNAVAILABLE"),
    };
    rendered(status, name, message)
}

/// The chunk that ends a committed stream after an upstream failure: an `error` object.
pub fn render_stream_error(message: &str) -> Bytes {
    crate::sse::encode(None, &error_json(500, "INTERNAL", message).to_string())
}

/// A provider error body → (error type, message): the type is Google's `status` name
/// (`RESOURCE_EXHAUSTED`), else the name for the HTTP status; other shapes are read as any
/// provider's.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let e = &v["error"];
    match (e["status"].as_str(), e["message"].as_str()) {
        (Some(s), m) => (
            s.to_owned(),
            m.map_or_else(
                || format!("upstream error (status {status})"),
                str::to_owned,
            ),
        ),
        _ => crate::common::parse_any_error(status, body, class_status),
    }
}

/// A translated upstream error in Google's shape: status kept, status name mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    rendered(status, status_name(status, error_type), message)
}
