//! Gemini specifics beyond the golden round trips (translation_golden.rs): what refuses to
//! translate, finish reasons, prompt blocks, the held finish of a stream, and errors in Google's
//! shape both ways.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use serde_json::{json, Value};
use sidetrack_dialects::canonical::{ChatResponse, Part, StopReason, StreamEvent, ToolChoice};
use sidetrack_dialects::{gemini, Dialect, GatewayErrorKind, Usage};

fn parsed(body: &Value) -> sidetrack_dialects::ParsedRequest {
    Dialect::Gemini
        .parse_request(
            Bytes::from(body.to_string()),
            Some("gemini-2.5-flash"),
            false,
        )
        .unwrap()
}

#[test]
fn safety_settings_are_never_translated_away() {
    let p = parsed(&json!({
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    }));
    assert_eq!(p.features.guardrail, Some(Dialect::Gemini));
    let e = Dialect::Gemini.to_canonical(&p).unwrap_err();
    assert!(e.0.contains("safetySettings"), "{e}");
}

#[test]
fn untranslatable_requests_are_errors() {
    for body in [
        json!({"contents": [], "generationConfig": {"candidateCount": 2}}),
        json!({"contents": [{"parts": [{"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}]}]}),
        json!({"contents": [{"parts": [{"fileData": {"fileUri": "gs://b/o", "mimeType": "image/png"}}]}]}),
        json!({"contents": [], "tools": [{"googleSearch": {}}]}),
        json!({"contents": [], "generationConfig": {"responseMimeType": "application/json"}}),
    ] {
        assert!(
            Dialect::Gemini.to_canonical(&parsed(&body)).is_err(),
            "{body}"
        );
    }
}

#[test]
fn calls_without_ids_pair_with_their_results_by_name() {
    let c = Dialect::Gemini
        .to_canonical(&parsed(&json!({
            "contents": [
                {"role": "user", "parts": [{"text": "t"}]},
                {"role": "model", "parts": [
                    {"functionCall": {"name": "a", "args": {}}},
                    {"functionCall": {"name": "b", "args": {"x": 1}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "b", "response": {"error": "boom"}}},
                    {"functionResponse": {"name": "a", "response": {"output": "ok"}}}
                ]}
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}
        })))
        .unwrap();
    assert_eq!(c.tool_choice, Some(ToolChoice::Any));
    assert_eq!(
        c.messages[2].content,
        vec![
            Part::ToolResult {
                call_id: "call_2".into(),
                content: "boom".into(),
                is_error: true
            },
            Part::ToolResult {
                call_id: "call_1".into(),
                content: "ok".into(),
                is_error: false
            },
        ]
    );
}

#[test]
fn finish_reasons_and_prompt_blocks() {
    let answer = |reason: &str| {
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}],
               "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}})
        .to_string()
    };
    for (wire, want) in [
        ("STOP", StopReason::EndTurn),
        ("MAX_TOKENS", StopReason::MaxTokens),
        ("SAFETY", StopReason::ContentFilter),
        ("PROHIBITED_CONTENT", StopReason::ContentFilter),
        ("BLOCKLIST", StopReason::ContentFilter),
        ("RECITATION", StopReason::ContentFilter),
        ("OTHER", StopReason::EndTurn),
    ] {
        let r = gemini::parse_response(answer(wire).as_bytes()).unwrap();
        assert_eq!(r.stop_reason, want, "{wire}");
    }
    let blocked = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7}}"#;
    let r = gemini::parse_response(blocked).unwrap();
    assert_eq!(r.stop_reason, StopReason::ContentFilter);
    assert!(r.content.is_empty());
    assert_eq!(r.usage.input_tokens, 7);
    // A blocked prompt in a stream: one chunk, a content-filter stop.
    let mut d = gemini::StreamDecoder::new();
    let ev = d.push(&[b"data: ".as_slice(), blocked, b"\n\n"].concat());
    assert!(matches!(
        ev.last(),
        Some(StreamEvent::Stop {
            reason: StopReason::ContentFilter,
            ..
        })
    ));
    // The caller's answer says SAFETY for a filtered canonical answer.
    let out = gemini::render_response(&ChatResponse {
        id: "i".into(),
        model: "m".into(),
        content: vec![],
        stop_reason: StopReason::ContentFilter,
        usage: Usage::default(),
    });
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["candidates"][0]["finishReason"], "SAFETY");
}

#[test]
fn a_finish_without_usage_waits_for_it_or_for_the_end() {
    let mut d = gemini::StreamDecoder::new();
    let ev = d.push(
        b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"STOP\"}]}\n\n",
    );
    assert!(!ev.iter().any(|e| matches!(e, StreamEvent::Stop { .. })));
    let end = d.finish();
    assert_eq!(
        end,
        vec![StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: None
        }]
    );
    assert!(d.finish().is_empty());
}

#[test]
fn stream_error_chunks_are_errors_with_their_status() {
    let mut d = gemini::StreamDecoder::new();
    let ev = d.push(b"data: {\"error\":{\"code\":503,\"message\":\"overloaded\",\"status\":\"UNAVAILABLE\"}}\n\n");
    assert_eq!(
        ev,
        vec![StreamEvent::Error {
            status: 503,
            error_type: "UNAVAILABLE".into(),
            message: "overloaded".into()
        }]
    );
    // And the encoder writes one for another dialect's error.
    let mut e = gemini::StreamEncoder::new("i", "m");
    let out = e.encode(&StreamEvent::Error {
        status: 529,
        error_type: "overloaded_error".into(),
        message: "busy".into(),
    });
    let text = std::str::from_utf8(&out).unwrap();
    let v: Value = serde_json::from_str(text.trim().strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(v["error"]["status"], "UNAVAILABLE");
    assert_eq!(v["error"]["code"], 529);
}

#[test]
fn gateway_errors_use_google_status_names() {
    for (kind, status, name) in [
        (GatewayErrorKind::InvalidRequest, 400, "INVALID_ARGUMENT"),
        (GatewayErrorKind::Unauthenticated, 401, "UNAUTHENTICATED"),
        (GatewayErrorKind::PermissionDenied, 403, "PERMISSION_DENIED"),
        (GatewayErrorKind::NotFound, 404, "NOT_FOUND"),
        (GatewayErrorKind::RateLimited, 429, "RESOURCE_EXHAUSTED"),
        (GatewayErrorKind::Unavailable, 503, "UNAVAILABLE"),
        (GatewayErrorKind::GatewayTimeout, 504, "DEADLINE_EXCEEDED"),
        (GatewayErrorKind::BadGateway, 502, "UNAVAILABLE"),
    ] {
        let r = Dialect::Gemini.render_error(kind, "msg");
        assert_eq!(r.status, status);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v,
            json!({"error": {"code": status, "message": "msg", "status": name}})
        );
    }
}

#[test]
fn upstream_errors_translate_both_ways() {
    // Another dialect's 429 to a Gemini caller.
    let r = Dialect::Gemini.render_upstream_error(429, "rate_limit_error", "slow down");
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(r.status, 429);
    // A Gemini 503 to an Anthropic caller: overloaded.
    let body =
        br#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#;
    let (ty, msg) = Dialect::Gemini.parse_error(503, None, body);
    assert_eq!(
        (ty.as_str(), msg.as_str()),
        ("UNAVAILABLE", "The model is overloaded.")
    );
    let r = Dialect::AnthropicMessages.render_upstream_error(503, &ty, &msg);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    let r = Dialect::OpenAiChat.render_upstream_error(400, "INVALID_ARGUMENT", "bad");
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

/// Gemini ⇄ Bedrock (Converse and InvokeModel) through the canonical form: the Gemini tool
/// fixture's request and a Gemini answer and stream come back unchanged from either Bedrock
/// format (the golden file covers the other dialects).
#[test]
fn gemini_round_trips_through_both_bedrock_formats() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let body = std::fs::read(dir.join("requests/tools_round_trip.gemini.json")).unwrap();
    let p = Dialect::Gemini
        .parse_request(Bytes::from(body), Some("gemini-2.5-flash"), false)
        .unwrap();
    let canonical = Dialect::Gemini.to_canonical(&p).unwrap();
    for d in [Dialect::BedrockConverse, Dialect::BedrockInvoke] {
        let out = d.request_body(&canonical).unwrap();
        let back = d
            .parse_request(out, Some("gemini-2.5-flash"), false)
            .map(|p| d.to_canonical(&p))
            .unwrap()
            .unwrap();
        let mut want = canonical.clone();
        if d == Dialect::BedrockInvoke {
            want.max_tokens = want.max_tokens.or(Some(4096)); // Anthropic requires it
        }
        assert_eq!(back, want, "{d:?}");
    }
    let answer = std::fs::read(dir.join("responses/tool_call.gemini.json")).unwrap();
    let resp = gemini::parse_response(&answer).unwrap();
    for d in [Dialect::BedrockConverse, Dialect::BedrockInvoke] {
        let back = d.parse_response(&d.render_response(&resp)).unwrap();
        assert_eq!(back.content, resp.content, "{d:?}");
        assert_eq!(back.usage, resp.usage, "{d:?}");
        assert_eq!(back.stop_reason, StopReason::ToolUse, "{d:?}");
        // And back into Gemini from the Bedrock answer: same parts and usage.
        let again = gemini::parse_response(&gemini::render_response(&back)).unwrap();
        assert_eq!(
            (again.content, again.usage),
            (resp.content.clone(), resp.usage)
        );
    }
    let sse = std::fs::read(dir.join("streams/tool_call.gemini.sse")).unwrap();
    let mut dec = gemini::StreamDecoder::new();
    let mut events = dec.push(&sse);
    events.extend(dec.finish());
    for d in [Dialect::BedrockConverse, Dialect::BedrockInvoke] {
        let mut enc = d.stream_encoder("id", "m", true);
        let bytes: Vec<u8> = events.iter().flat_map(|e| enc.encode(e).to_vec()).collect();
        let mut back_dec = d.stream_decoder();
        let mut back = back_dec.push(&bytes);
        back.extend(back_dec.finish());
        let stop = back.iter().find_map(|e| match e {
            StreamEvent::Stop { reason, usage } => Some((*reason, *usage)),
            _ => None,
        });
        assert_eq!(
            stop,
            Some((
                StopReason::ToolUse,
                Some(Usage {
                    input_tokens: 40,
                    output_tokens: 17
                })
            )),
            "{d:?}: {back:?}"
        );
        assert!(back.iter().any(
            |e| matches!(e, StreamEvent::ToolCallStart { name, .. } if name == "get_weather")
        ));
    }
}
