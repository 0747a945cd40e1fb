//! The error-type table of docs/translation.md ("Errors"), row by row, in both directions:
//! an OpenAI upstream's error body → what an Anthropic caller sees, and an Anthropic upstream's
//! error body → what an OpenAI chat / Responses caller sees (and the Responses `error` event
//! code for the same failure in a stream). Status is always kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use sidetrack_dialects::canonical::StreamEvent;
use sidetrack_dialects::{
    anthropic_messages as am, openai_chat as oc, openai_responses as or, Dialect,
};

/// One table row. `openai_in` / `anthropic_in` are what each provider sends for this failure
/// (wire-formats.md §1.1 / §1.2); the rest is what the translated caller must get.
struct Row {
    status: u16,
    openai_in: (&'static str, Option<&'static str>),
    anthropic_in: &'static str,
    anthropic_out: &'static str,
    openai_out: (&'static str, Option<&'static str>),
    responses_code: &'static str,
}

const fn row(
    status: u16,
    openai_in: (&'static str, Option<&'static str>),
    anthropic_in: &'static str,
    anthropic_out: &'static str,
    openai_out: (&'static str, Option<&'static str>),
    responses_code: &'static str,
) -> Row {
    Row {
        status,
        openai_in,
        anthropic_in,
        anthropic_out,
        openai_out,
        responses_code,
    }
}

const INVALID: (&str, Option<&str>) = ("invalid_request_error", None);
const AUTH: (&str, Option<&str>) = ("authentication_error", Some("invalid_api_key"));
const BILLING: (&str, Option<&str>) = ("insufficient_quota", Some("billing_error"));
const PERMISSION: (&str, Option<&str>) = ("permission_error", None);
const NOT_FOUND: (&str, Option<&str>) = ("not_found_error", None);
const TIMEOUT: (&str, Option<&str>) = ("server_error", Some("timeout"));
const CONFLICT: (&str, Option<&str>) = ("invalid_request_error", Some("conflict"));
const TOO_LARGE: (&str, Option<&str>) = ("invalid_request_error", Some("request_too_large"));
const RATE: (&str, Option<&str>) = ("requests", Some("rate_limit_exceeded"));
const OVERLOADED: (&str, Option<&str>) = ("server_error", Some("overloaded"));
const SERVER: (&str, Option<&str>) = ("server_error", None);

fn table() -> Vec<Row> {
    let ir = "invalid_request_error";
    vec![
        // 400, 422, other 4xx / invalid_request_error
        row(400, (ir, None), ir, ir, INVALID, "invalid_prompt"),
        row(422, (ir, None), ir, ir, INVALID, "invalid_prompt"),
        row(418, (ir, None), ir, ir, INVALID, "invalid_prompt"),
        // 401 / authentication_error, invalid_api_key (OpenAI: invalid_request_error + code)
        row(
            401,
            (ir, Some("invalid_api_key")),
            "authentication_error",
            "authentication_error",
            AUTH,
            "server_error",
        ),
        // 402 / billing_error
        row(
            402,
            ("insufficient_quota", Some("billing_error")),
            "billing_error",
            "billing_error",
            BILLING,
            "server_error",
        ),
        // 403 / permission_error
        row(
            403,
            (ir, Some("unsupported_country_region_territory")),
            "permission_error",
            "permission_error",
            PERMISSION,
            "server_error",
        ),
        // 404 / not_found_error
        row(
            404,
            (ir, Some("model_not_found")),
            "not_found_error",
            "not_found_error",
            NOT_FOUND,
            "server_error",
        ),
        // 408, 504 / timeout_error
        row(
            408,
            ("server_error", Some("timeout")),
            "timeout_error",
            "timeout_error",
            TIMEOUT,
            "server_error",
        ),
        row(
            504,
            ("server_error", None),
            "timeout_error",
            "timeout_error",
            TIMEOUT,
            "server_error",
        ),
        // 409 / conflict_error
        row(
            409,
            (ir, Some("conflict")),
            "conflict_error",
            "conflict_error",
            CONFLICT,
            "server_error",
        ),
        // 413, or 400 + request_too_large
        row(
            413,
            (ir, None),
            "request_too_large",
            "request_too_large",
            TOO_LARGE,
            "invalid_prompt",
        ),
        row(
            400,
            (ir, Some("request_too_large")),
            "request_too_large",
            "request_too_large",
            TOO_LARGE,
            "invalid_prompt",
        ),
        // 429 / rate_limit_error, requests, tokens, insufficient_quota
        row(
            429,
            ("requests", Some("rate_limit_exceeded")),
            "rate_limit_error",
            "rate_limit_error",
            RATE,
            "rate_limit_exceeded",
        ),
        row(
            429,
            ("tokens", Some("rate_limit_exceeded")),
            "rate_limit_error",
            "rate_limit_error",
            RATE,
            "rate_limit_exceeded",
        ),
        row(
            429,
            ("insufficient_quota", Some("insufficient_quota")),
            "rate_limit_error",
            "rate_limit_error",
            RATE,
            "rate_limit_exceeded",
        ),
        // 529, or 5xx + overloaded_error / server_is_overloaded (the code beats the generic type)
        row(
            529,
            ("server_error", Some("overloaded")),
            "overloaded_error",
            "overloaded_error",
            OVERLOADED,
            "overloaded",
        ),
        row(
            503,
            ("server_error", Some("server_is_overloaded")),
            "overloaded_error",
            "overloaded_error",
            OVERLOADED,
            "overloaded",
        ),
        row(
            503,
            ("service_unavailable_error", Some("server_is_overloaded")),
            "overloaded_error",
            "overloaded_error",
            OVERLOADED,
            "overloaded",
        ),
        row(
            500,
            ("server_error", Some("overloaded")),
            "overloaded_error",
            "overloaded_error",
            OVERLOADED,
            "overloaded",
        ),
        // other 5xx / api_error, server_error
        row(
            500,
            ("server_error", None),
            "api_error",
            "api_error",
            SERVER,
            "server_error",
        ),
        row(
            502,
            ("server_error", None),
            "api_error",
            "api_error",
            SERVER,
            "server_error",
        ),
        row(
            503,
            ("service_unavailable_error", Some("slow_down")),
            "api_error",
            "api_error",
            SERVER,
            "server_error",
        ),
    ]
}

fn openai_body(status: u16, (ty, code): (&str, Option<&str>)) -> Vec<u8> {
    json!({"error": {"message": format!("upstream {status}"), "type": ty, "param": null, "code": code}})
        .to_string()
        .into_bytes()
}

fn anthropic_body(ty: &str) -> Vec<u8> {
    json!({"type": "error", "error": {"type": ty, "message": "upstream"}, "request_id": "req_1"})
        .to_string()
        .into_bytes()
}

fn body_json(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[test]
fn openai_upstream_errors_reach_anthropic_callers_per_the_table() {
    for (i, r) in table().iter().enumerate() {
        for upstream in [Dialect::OpenAiChat, Dialect::OpenAiResponses] {
            let (ty, msg) =
                upstream.parse_error(r.status, None, &openai_body(r.status, r.openai_in));
            assert_eq!(msg, format!("upstream {}", r.status), "row {i}");
            let e = Dialect::AnthropicMessages.render_upstream_error(r.status, &ty, &msg);
            assert_eq!(e.status, r.status, "row {i}");
            let v = body_json(&e.body);
            assert_eq!(v["type"], "error", "row {i}");
            assert_eq!(
                v["error"]["type"], r.anthropic_out,
                "row {i}: {} {:?} from {upstream:?} (parsed as {ty})",
                r.status, r.openai_in
            );
        }
    }
}

#[test]
fn anthropic_upstream_errors_reach_openai_callers_per_the_table() {
    for (i, r) in table().iter().enumerate() {
        let (ty, msg) =
            Dialect::AnthropicMessages.parse_error(r.status, None, &anthropic_body(r.anthropic_in));
        assert_eq!(msg, "upstream");
        for caller in [Dialect::OpenAiChat, Dialect::OpenAiResponses] {
            let e = caller.render_upstream_error(r.status, &ty, &msg);
            assert_eq!(e.status, r.status, "row {i}");
            let v = body_json(&e.body);
            let want_code = r.openai_out.1.map_or(Value::Null, Value::from);
            assert_eq!(
                (&v["error"]["type"], &v["error"]["code"]),
                (&Value::from(r.openai_out.0), &want_code),
                "row {i}: {} {} to {caller:?}",
                r.status,
                r.anthropic_in
            );
            for key in ["message", "type", "param", "code"] {
                assert!(v["error"].get(key).is_some(), "row {i}: {key}");
            }
        }
    }
}

/// The same classes as in-stream errors (status 200 on the wire, the type decides): the
/// Responses `error` event code and the Anthropic `event: error` type.
#[test]
fn in_stream_errors_map_per_the_table() {
    for (i, r) in table().iter().enumerate() {
        let ev = StreamEvent::Error {
            status: r.status,
            error_type: r.anthropic_in.to_owned(),
            message: "m".into(),
        };
        let out = or::StreamEncoder::new("resp_1", "m").encode(&ev);
        let text = String::from_utf8(out.to_vec()).unwrap();
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        assert_eq!(
            body_json(data.as_bytes())["code"],
            r.responses_code,
            "row {i}: {text}"
        );
    }
    // An OpenAI chat stream that fails with a generic type and a specific code, decoded and
    // re-encoded for an Anthropic caller: the code decides.
    let mut dec = oc::StreamDecoder::new();
    let events = dec.push(
        b"data: {\"error\":{\"message\":\"busy\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_is_overloaded\"}}\n\n",
    );
    let err = events
        .iter()
        .find(|e| matches!(e, StreamEvent::Error { .. }))
        .expect("an error event");
    let out = am::StreamEncoder::new("msg_1", "m").encode(err);
    let text = String::from_utf8(out.to_vec()).unwrap();
    assert!(text.contains("\"overloaded_error\""), "{text}");
    // The pre-commit classification agrees: the status it stands for is 503, not 500.
    let class = oc::classify_stream_event(&sidetrack_dialects::sse::SseEvent {
        event: None,
        data: r#"{"error":{"message":"busy","type":"server_error","code":"server_is_overloaded"}}"#
            .into(),
    });
    assert!(
        matches!(
            class,
            sidetrack_dialects::StreamEventClass::Error { status: 503, .. }
        ),
        "{class:?}"
    );
}
