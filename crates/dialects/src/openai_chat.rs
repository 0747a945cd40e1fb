//! OpenAI Chat Completions (`POST /v1/chat/completions`), wire-formats.md §1.1 and §2.1.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::errors::{status_for_error_type, GatewayErrorKind, RenderedError};
use crate::request::{ParseError, ParsedRequest};
use crate::sse::{self, SseEvent};
use crate::{Dialect, StreamEvent, Usage};

pub const PATH: &str = "/v1/chat/completions";

/// Parses a caller body.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    ParsedRequest::parse_json_top(Dialect::OpenAiChat, body)
}

/// The body for an OpenAI-kind destination serving `model`.
pub fn render_request(req: &ParsedRequest, model: &str) -> Bytes {
    req.body_with_model(model)
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

/// What one upstream SSE event means for the commit decision.
pub fn classify_stream_event(ev: &SseEvent) -> StreamEvent {
    let data = ev.data.trim();
    if data.starts_with("[DONE]") {
        return StreamEvent::Done;
    }
    if ev.event.as_deref() == Some("error")
        || data.starts_with("{\"error\"")
        || data.contains("\"error\":{")
    {
        if let Ok(env) = serde_json::from_str::<ErrorEnvelope>(data) {
            let error_type = env
                .error
                .kind
                .or_else(|| env.error.code.and_then(|c| c.as_str().map(str::to_owned)))
                .unwrap_or_else(|| "server_error".to_owned());
            return StreamEvent::Error {
                status: status_for_error_type(&error_type),
                message: env.error.message.unwrap_or_default(),
                error_type,
            };
        }
    }
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
        return StreamEvent::Metadata;
    };
    let has_content = chunk.choices.iter().any(|c| {
        c.finish_reason.is_some()
            || c.delta.as_ref().is_some_and(|d| {
                d.content.as_deref().is_some_and(|s| !s.is_empty())
                    || d.refusal.as_deref().is_some_and(|s| !s.is_empty())
                    || d.tool_calls.is_some_and(|t| t.get() != "null")
            })
    });
    if has_content {
        StreamEvent::Content
    } else if chunk.choices.is_empty() && chunk.usage.is_some() {
        StreamEvent::Metadata
    } else {
        StreamEvent::Preamble
    }
}

/// Usage carried by one stream event (the `include_usage` chunk), if any.
pub fn stream_event_usage(ev: &SseEvent) -> Option<Usage> {
    if !ev.data.contains("\"usage\":{") && !ev.data.contains("\"usage\": {") {
        return None;
    }
    let chunk: Chunk<'_> = serde_json::from_str(&ev.data).ok()?;
    chunk.usage.map(|u| Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
    })
}

/// The text content carried by a whole OpenAI chat SSE body (for narration and tests).
pub fn stream_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Usage of a non-streamed response body.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Resp {
        usage: Option<WireUsage>,
    }
    let r: Resp = serde_json::from_slice(body).ok()?;
    r.usage.map(|u| Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
    })
}

fn error_json(error_type: &str, code: Option<&str>, message: &str) -> serde_json::Value {
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
        GatewayErrorKind::RateLimited => (429, "rate_limit_error", Some("rate_limit_exceeded")),
        GatewayErrorKind::BadGateway => (502, "api_error", Some("upstream_connection_error")),
        GatewayErrorKind::GatewayTimeout => (504, "api_error", Some("upstream_timeout")),
        GatewayErrorKind::Unavailable => (503, "api_error", Some("no_eligible_destination")),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_owned(),
        }
    }

    #[test]
    fn classifies_preamble_content_done_and_errors() {
        let role = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#;
        assert_eq!(classify_stream_event(&ev(role)), StreamEvent::Preamble);
        let text =
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        assert_eq!(classify_stream_event(&ev(text)), StreamEvent::Content);
        let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x"}]},"finish_reason":null}]}"#;
        assert_eq!(classify_stream_event(&ev(tool)), StreamEvent::Content);
        let fin = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(classify_stream_event(&ev(fin)), StreamEvent::Content);
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
        assert_eq!(classify_stream_event(&ev(usage)), StreamEvent::Metadata);
        assert_eq!(
            stream_event_usage(&ev(usage)),
            Some(Usage {
                input_tokens: 5,
                output_tokens: 2
            })
        );
        assert_eq!(classify_stream_event(&ev("[DONE]")), StreamEvent::Done);
        let err = r#"{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}"#;
        assert_eq!(
            classify_stream_event(&ev(err)),
            StreamEvent::Error {
                status: 529,
                error_type: "overloaded_error".into(),
                message: "Overloaded".into()
            }
        );
    }

    #[test]
    fn gateway_errors_have_all_four_keys() {
        let e = render_error(GatewayErrorKind::NotFound, "no route for model `x`");
        assert_eq!(e.status, 404);
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["error"]["type"], "not_found_error");
        assert!(v["error"].get("param").is_some());
        assert!(v["error"].get("code").is_some());
    }

    #[test]
    fn stream_error_is_a_data_line_with_an_error_object() {
        let b = render_stream_error("upstream connection lost");
        let s = std::str::from_utf8(&b).unwrap();
        assert!(s.starts_with("data: {\"error\":"));
        assert!(s.ends_with("\n\n"));
        assert!(!s.contains("[DONE]"));
    }
}
