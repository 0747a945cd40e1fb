//! Errors in every translating dialect: gateway-made (SPEC §6.3), translated upstream errors
//! (status kept, type mapped), mid-stream errors, tolerant parsing, and what cannot translate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bytes::Bytes;
use serde_json::Value;
use sidetrack_dialects::canonical::{ChatRequest, StreamEvent};
use sidetrack_dialects::sse::SseEvent;
use sidetrack_dialects::{
    anthropic_messages as am, openai_chat as oc, openai_responses as or, Dialect,
    GatewayErrorKind as K, ParsedRequest,
};

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[test]
fn anthropic_gateway_errors_follow_the_spec_table() {
    let cases = [
        (K::InvalidRequest, 400, "invalid_request_error"),
        (K::Unauthenticated, 401, "authentication_error"),
        (K::PermissionDenied, 403, "permission_error"),
        (K::NotFound, 404, "not_found_error"),
        (K::TooLarge, 413, "request_too_large"),
        (K::RateLimited, 429, "rate_limit_error"),
        (K::BadGateway, 502, "api_error"),
        (K::GatewayTimeout, 504, "timeout_error"),
        (K::Unavailable, 503, "api_error"),
    ];
    for (kind, status, ty) in cases {
        let e = am::render_error(kind, "why");
        assert_eq!(e.status, status, "{kind:?}");
        let v = json(&e.body);
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], ty, "{kind:?}");
        assert_eq!(v["error"]["message"], "why");
    }
    let e = or::render_error(K::GatewayTimeout, "slow");
    assert_eq!(e.status, 504);
    let v = json(&e.body);
    for key in ["message", "type", "param", "code"] {
        assert!(v["error"].get(key).is_some(), "{key}");
    }
}

#[test]
fn upstream_errors_keep_status_and_map_type() {
    // Anthropic overloaded (529) → OpenAI server_error/overloaded, still 529.
    for render in [oc::render_upstream_error, or::render_upstream_error] {
        let e = render(529, "overloaded_error", "Overloaded");
        assert_eq!(e.status, 529);
        let v = json(&e.body);
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["error"]["code"], "overloaded");
        assert_eq!(v["error"]["message"], "Overloaded");
        let e = render(429, "rate_limit_error", "slow down");
        assert_eq!(json(&e.body)["error"]["type"], "requests");
        assert_eq!(json(&e.body)["error"]["code"], "rate_limit_exceeded");
        let e = render(500, "api_error", "boom");
        assert_eq!(json(&e.body)["error"]["type"], "server_error");
    }
    let cases = [
        (529, "server_error", "overloaded_error"),
        (503, "server_is_overloaded", "overloaded_error"),
        (500, "server_error", "api_error"),
        (503, "service_unavailable_error", "api_error"),
        (429, "requests", "rate_limit_error"),
        (429, "insufficient_quota", "rate_limit_error"),
        (401, "invalid_request_error", "authentication_error"),
        (404, "invalid_request_error", "not_found_error"),
        (400, "invalid_request_error", "invalid_request_error"),
        (413, "invalid_request_error", "request_too_large"),
        (504, "server_error", "timeout_error"),
        (408, "timeout", "timeout_error"),
    ];
    for (status, from, to) in cases {
        let e = am::render_upstream_error(status, from, "m");
        assert_eq!(e.status, status);
        assert_eq!(json(&e.body)["error"]["type"], to, "{status} {from}");
    }
}

#[test]
fn provider_errors_parse_from_any_shape_and_junk() {
    let openai = br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    assert_eq!(
        oc::parse_error(429, openai),
        ("requests".into(), "Rate limit reached".into())
    );
    let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#;
    assert_eq!(
        am::parse_error(529, anthropic),
        ("overloaded_error".into(), "Overloaded".into())
    );
    let bedrock = br#"{"message":"Too many requests"}"#;
    assert_eq!(
        am::parse_error(429, bedrock),
        ("rate_limit_error".into(), "Too many requests".into())
    );
    let html = b"<html><body>502 Bad Gateway</body></html>";
    let (t, m) = or::parse_error(502, html);
    assert_eq!(t, "server_error");
    assert!(m.contains("502 Bad Gateway"));
    assert_eq!(
        am::parse_error(503, b""),
        ("api_error".into(), "upstream error (status 503)".into())
    );
    let null_type = br#"{"error":{"message":"bad","type":null,"code":"invalid_api_key"}}"#;
    assert_eq!(oc::parse_error(401, null_type).0, "invalid_api_key");
}

#[test]
fn mid_stream_errors_in_each_dialect() {
    let s = String::from_utf8(am::render_stream_error("lost").to_vec()).unwrap();
    assert_eq!(
        s,
        "event: error\ndata: {\"error\":{\"message\":\"lost\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n"
    );
    let s = String::from_utf8(or::render_stream_error("lost").to_vec()).unwrap();
    assert!(s.starts_with("event: error\ndata: {"));
    let line = s.lines().nth(1).unwrap().strip_prefix("data: ").unwrap();
    let v: Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["code"], "server_error");
    assert_eq!(v["message"], "lost");
    assert!(v["param"].is_null());
    assert_eq!(v["sequence_number"], 0);

    // Stateful: the encoder's error carries the running sequence number and ends the stream.
    let mut e = or::StreamEncoder::new("resp_1", "m").with_created(1);
    let mut all = e.encode(&StreamEvent::TextDelta {
        index: 0,
        text: "hi".into(),
    });
    let err = e.encode(&StreamEvent::Error {
        status: 529,
        error_type: "overloaded_error".into(),
        message: "Overloaded".into(),
    });
    let line = std::str::from_utf8(&err).unwrap().lines().nth(1).unwrap();
    let v: Value = serde_json::from_str(line.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(v["sequence_number"], 5); // created, in_progress, item, part, delta
    all = Bytes::from([all.to_vec(), err.to_vec()].concat());
    assert!(e
        .encode(&StreamEvent::Stop {
            reason: sidetrack_dialects::canonical::StopReason::EndTurn,
            usage: None
        })
        .is_empty());
    assert!(!String::from_utf8_lossy(&all).contains("response.completed"));

    // Anthropic caller: the type is mapped back into Anthropic's vocabulary.
    let mut e = am::StreamEncoder::new("msg_1", "m");
    let out = e.encode(&StreamEvent::Error {
        status: 429,
        error_type: "requests".into(),
        message: "slow".into(),
    });
    assert!(std::str::from_utf8(&out).unwrap().contains(
        "event: error\ndata: {\"error\":{\"message\":\"slow\",\"type\":\"rate_limit_error\"}"
    ));

    // OpenAI chat caller: data-only error, never [DONE].
    let mut e = oc::StreamEncoder::new("c", "m");
    let out = e.encode(&StreamEvent::Error {
        status: 529,
        error_type: "overloaded_error".into(),
        message: "Overloaded".into(),
    });
    let s = std::str::from_utf8(&out).unwrap();
    assert!(s.starts_with("data: {\"error\":"), "{s}");
    assert!(!s.contains("[DONE]"));
}

#[test]
fn stream_events_classify_for_the_commit_point() {
    use sidetrack_dialects::StreamEventClass as S;
    let ev = |event: &str, data: &str| SseEvent {
        event: Some(event.into()),
        data: data.into(),
    };
    let a = |e: &str, d: &str| am::classify_stream_event(&ev(e, d));
    assert_eq!(
        a("message_start", r#"{"type":"message_start","message":{}}"#),
        S::Preamble
    );
    assert_eq!(a("ping", r#"{"type":"ping"}"#), S::Preamble);
    assert_eq!(
        a(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
        ),
        S::Preamble
    );
    assert_eq!(
        a(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}"#
        ),
        S::Content
    );
    assert_eq!(
        a(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#
        ),
        S::Content
    );
    assert_eq!(a("message_stop", r#"{"type":"message_stop"}"#), S::Done);
    assert_eq!(
        a(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ),
        S::Error {
            status: 529,
            error_type: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
    let r = |e: &str, d: &str| or::classify_stream_event(&ev(e, d));
    assert_eq!(
        r(
            "response.created",
            r#"{"type":"response.created","response":{}}"#
        ),
        S::Preamble
    );
    assert_eq!(
        r(
            "response.output_item.added",
            r#"{"type":"response.output_item.added","item":{"type":"message"}}"#
        ),
        S::Preamble
    );
    assert_eq!(
        r(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"x"}"#
        ),
        S::Content
    );
    assert_eq!(
        r(
            "response.completed",
            r#"{"type":"response.completed","response":{}}"#
        ),
        S::Done
    );
    assert_eq!(
        r(
            "error",
            r#"{"type":"error","code":"rate_limit_exceeded","message":"slow","param":null,"sequence_number":3}"#
        ),
        S::Error {
            status: 429,
            error_type: "rate_limit_exceeded".into(),
            message: "slow".into()
        }
    );
    assert!(matches!(
        r(
            "response.failed",
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#
        ),
        S::Error { status: 500, .. }
    ));
}

fn parse(d: Dialect, body: &str) -> ParsedRequest {
    ParsedRequest::parse_json_top(d, Bytes::from(body.to_owned())).unwrap()
}

#[test]
fn what_cannot_be_translated_is_a_named_error() {
    let p = parse(
        Dialect::OpenAiChat,
        r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}"#,
    );
    let e = oc::to_canonical(&p).unwrap_err();
    assert!(e.0.contains("https://example.com/cat.png"), "{e}");
    let p = parse(
        Dialect::AnthropicMessages,
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}"#,
    );
    assert!(am::to_canonical(&p).unwrap_err().0.contains("url"));
    let p = parse(
        Dialect::OpenAiResponses,
        r#"{"model":"m","input":"hi","previous_response_id":"resp_1"}"#,
    );
    assert!(or::to_canonical(&p)
        .unwrap_err()
        .0
        .contains("previous_response_id"));
    let p = parse(
        Dialect::OpenAiChat,
        r#"{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert!(oc::to_canonical(&p).unwrap_err().0.contains("`n`"));
    let p = parse(
        Dialect::AnthropicMessages,
        r#"{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert!(am::to_canonical(&p).unwrap_err().0.contains("web_search"));
    let bad_args = ChatRequest {
        model: "m".into(),
        messages: vec![sidetrack_dialects::canonical::Message {
            role: sidetrack_dialects::canonical::Role::Assistant,
            content: vec![sidetrack_dialects::canonical::Part::ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: "{not json".into(),
            }],
        }],
        ..ChatRequest::default()
    };
    assert!(am::request_body(&bad_args).is_err());
}

#[test]
fn bedrock_invoke_body_is_the_messages_body_without_model_and_stream() {
    let p = parse(
        Dialect::OpenAiChat,
        r#"{"model":"gpt","stream":true,"messages":[{"role":"system","content":"be nice"},{"role":"user","content":"hi"}]}"#,
    );
    let c = oc::to_canonical(&p).unwrap();
    let v = json(&am::invoke_body(&c, "bedrock-2023-05-31").unwrap());
    assert_eq!(v["anthropic_version"], "bedrock-2023-05-31");
    assert!(v.get("model").is_none());
    assert!(v.get("stream").is_none());
    assert_eq!(v["max_tokens"], 4096);
    assert_eq!(v["system"], "be nice");
    let v = json(&am::request_body(&c).unwrap());
    assert_eq!(v["model"], "gpt");
    assert_eq!(v["stream"], true);
    assert!(v.get("anthropic_version").is_none());
}

#[test]
fn openai_chat_stream_requests_ask_for_usage() {
    let p = parse(
        Dialect::AnthropicMessages,
        r#"{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let c = am::to_canonical(&p).unwrap();
    let v = json(&oc::request_body(&c).unwrap());
    assert_eq!(v["stream_options"]["include_usage"], true);
    assert_eq!(v["max_completion_tokens"], 10);
    let v = json(&or::request_body(&c).unwrap());
    assert_eq!(v["stream"], true);
    assert_eq!(v["store"], false);
}
