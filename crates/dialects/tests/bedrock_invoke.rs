//! InvokeModel (Anthropic-on-Bedrock) ⇄ canonical golden round trips and the chunked stream.
#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};
use sidetrack_dialects::bedrock::{self, eventstream, invoke};
use sidetrack_dialects::canonical::{
    ChatRequest, ChatResponse, Message, Part, Role, StopReason, StreamEvent, Tool, ToolChoice,
};
use sidetrack_dialects::{Dialect, GatewayErrorKind, Usage};

fn parse(body: &Value, stream: bool) -> ChatRequest {
    let p = bedrock::parse_request(
        Dialect::BedrockInvoke,
        "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        Bytes::from(body.to_string()),
        stream,
    )
    .unwrap();
    invoke::to_canonical(&p).unwrap()
}

fn body_json(req: &ChatRequest) -> Value {
    serde_json::from_slice(&invoke::request_body(req).unwrap()).unwrap()
}

#[test]
fn text_system_and_limits_round_trip() {
    let wire = json!({
        "anthropic_version": "bedrock-2023-05-31",
        "anthropic_beta": ["context-1m-2025-08-07"],
        "max_tokens": 256,
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
            {"role": "user", "content": [{"type": "text", "text": "more"}]}
        ],
        "temperature": 0.2,
        "top_p": 0.8,
        "stop_sequences": ["END"]
    });
    let req = parse(&wire, true);
    assert_eq!(
        req,
        ChatRequest {
            model: "us.anthropic.claude-3-5-haiku-20241022-v1:0".into(),
            system: vec!["be brief".into()],
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![Part::Text("hi".into())]
                },
                Message {
                    role: Role::Assistant,
                    content: vec![Part::Text("hello".into())]
                },
                Message {
                    role: Role::User,
                    content: vec![Part::Text("more".into())]
                },
            ],
            max_tokens: Some(256),
            temperature: Some(0.2),
            top_p: Some(0.8),
            stop: vec!["END".into()],
            stream: true,
            ..ChatRequest::default()
        }
    );
    let out = body_json(&req);
    assert_eq!(out["anthropic_version"], "bedrock-2023-05-31");
    assert!(out.get("model").is_none());
    assert!(out.get("stream").is_none());
    assert_eq!(out["max_tokens"], 256);
    assert_eq!(out["system"], "be brief");
    assert_eq!(out["stop_sequences"], json!(["END"]));
    assert_eq!(
        out["messages"][0],
        json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    );
    // Rendered body parses back to the same request.
    assert_eq!(parse(&out, true), req);
}

#[test]
fn tools_tool_results_and_images_round_trip() {
    let wire = json!({
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "weather?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": false}
            ]}
        ],
        "tools": [{"name": "weather", "description": "Weather by city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "tool", "name": "weather"}
    });
    let req = parse(&wire, false);
    assert_eq!(
        req.messages[0].content[1],
        Part::Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into()
        }
    );
    assert_eq!(
        req.messages[1].content[0],
        Part::ToolCall {
            id: "toolu_1".into(),
            name: "weather".into(),
            arguments: r#"{"city":"Paris"}"#.into()
        }
    );
    assert_eq!(
        req.messages[2].content[0],
        Part::ToolResult {
            call_id: "toolu_1".into(),
            content: "sunny".into(),
            is_error: false
        }
    );
    assert_eq!(
        req.tools,
        vec![Tool {
            name: "weather".into(),
            description: Some("Weather by city".into()),
            parameters: r#"{"properties":{"city":{"type":"string"}},"type":"object"}"#.into(),
        }]
    );
    assert_eq!(req.tool_choice, Some(ToolChoice::Tool("weather".into())));
    let out = body_json(&req);
    assert_eq!(out["tools"], wire["tools"]);
    assert_eq!(out["tool_choice"], wire["tool_choice"]);
    assert_eq!(out["messages"][0], wire["messages"][0]);
    assert_eq!(out["messages"][1], wire["messages"][1]);
    assert_eq!(parse(&out, false), req);
}

#[test]
fn non_anthropic_bodies_are_not_translated() {
    let titan = json!({"inputText": "hi", "textGenerationConfig": {"maxTokenCount": 10}});
    let p = bedrock::parse_request(
        Dialect::BedrockInvoke,
        "amazon.titan-text-express-v1",
        Bytes::from(titan.to_string()),
        false,
    )
    .unwrap();
    assert!(invoke::to_canonical(&p).is_err());
    // But it parses as a request (for same-dialect pass-through), body untouched.
    assert_eq!(p.body(), &Bytes::from(titan.to_string()));
}

#[test]
fn responses_round_trip_with_stop_reasons() {
    for (wire_stop, stop) in [
        ("end_turn", StopReason::EndTurn),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("tool_use", StopReason::ToolUse),
    ] {
        let wire = json!({
            "id": "msg_bdrk_1", "type": "message", "role": "assistant",
            "model": "claude-3-5-haiku-20241022",
            "content": [
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}
            ],
            "stop_reason": wire_stop, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 4}
        });
        let resp = invoke::parse_response(wire.to_string().as_bytes()).unwrap();
        let want = ChatResponse {
            id: "msg_bdrk_1".into(),
            model: "claude-3-5-haiku-20241022".into(),
            content: vec![
                Part::Text("Calling.".into()),
                Part::ToolCall {
                    id: "toolu_1".into(),
                    name: "f".into(),
                    arguments: r#"{"a":1}"#.into(),
                },
            ],
            stop_reason: stop,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 4,
            },
        };
        assert_eq!(resp, want);
        assert_eq!(
            invoke::parse_response(&invoke::render_response(&resp)).unwrap(),
            want
        );
        assert_eq!(
            invoke::response_usage(wire.to_string().as_bytes()),
            Some(want.usage)
        );
    }
}

fn decode_all(bytes: &[u8], step: usize) -> Vec<StreamEvent> {
    let mut d = invoke::StreamDecoder::new();
    bytes.chunks(step.max(1)).flat_map(|c| d.push(c)).collect()
}

fn chunk_payloads(bytes: &[u8]) -> Vec<Value> {
    eventstream::FrameDecoder::new()
        .push(bytes)
        .unwrap()
        .into_iter()
        .map(|f| {
            assert_eq!(f.event_type.as_deref(), Some("chunk"));
            let outer: Value = serde_json::from_slice(&f.payload).unwrap();
            let raw = base64::engine::general_purpose::STANDARD
                .decode(outer["bytes"].as_str().unwrap())
                .unwrap();
            serde_json::from_slice(&raw).unwrap()
        })
        .collect()
}

#[test]
fn stream_encode_then_decode_gives_the_same_events() {
    let usage = Usage {
        input_tokens: 12,
        output_tokens: 7,
    };
    let events = vec![
        StreamEvent::Start {
            id: "msg_1".into(),
            model: "claude".into(),
            input_tokens: Some(12),
        },
        StreamEvent::TextDelta {
            index: 0,
            text: "Let me ".into(),
        },
        StreamEvent::TextDelta {
            index: 0,
            text: "check.".into(),
        },
        StreamEvent::BlockStop { index: 0 },
        StreamEvent::ToolCallStart {
            index: 1,
            id: "toolu_1".into(),
            name: "weather".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 1,
            arguments: "{\"city\":".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 1,
            arguments: "\"Paris\"}".into(),
        },
        StreamEvent::BlockStop { index: 1 },
        StreamEvent::Stop {
            reason: StopReason::ToolUse,
            usage: Some(usage),
        },
    ];
    let mut enc = invoke::StreamEncoder::new("msg_1", "claude");
    enc.set_latency(900, 120);
    let bytes: Vec<u8> = events.iter().flat_map(|e| enc.encode(e).to_vec()).collect();
    for step in [1, 13, bytes.len()] {
        assert_eq!(decode_all(&bytes, step), events, "step {step}");
    }
    let payloads = chunk_payloads(&bytes);
    let types: Vec<&str> = payloads
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        payloads.last().unwrap()["amazon-bedrock-invocationMetrics"],
        json!({"inputTokenCount": 12, "outputTokenCount": 7, "invocationLatency": 900, "firstByteLatency": 120})
    );
}

#[test]
fn decodes_bedrock_chunks_with_padding_unknown_events_and_exceptions() {
    let b64 = |v: Value| base64::engine::general_purpose::STANDARD.encode(v.to_string());
    let mut bytes = Vec::new();
    let mut chunk = |v: Value| {
        let payload = json!({"bytes": b64(v), "p": "abcdefghijklmnopqrstuvwxyzABCDEF"});
        bytes.extend_from_slice(&eventstream::event_frame(
            "chunk",
            payload.to_string().as_bytes(),
        ));
    };
    chunk(
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude", "content": [], "stop_reason": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    );
    chunk(
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    chunk(
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
    );
    let mut bytes2 = eventstream::event_frame("somethingNew", b"{}").to_vec();
    bytes2.extend_from_slice(&eventstream::exception_frame(
        "modelTimeoutException",
        "too slow",
    ));
    bytes.extend_from_slice(&bytes2);
    assert_eq!(
        decode_all(&bytes, 4),
        vec![
            StreamEvent::Start {
                id: "msg_1".into(),
                model: "claude".into(),
                input_tokens: Some(5)
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "Hi".into()
            },
            StreamEvent::Error {
                status: 408,
                error_type: "modelTimeoutException".into(),
                message: "too slow".into()
            },
        ]
    );
}

#[test]
fn bad_chunk_payload_is_a_502_error() {
    let bytes = eventstream::event_frame("chunk", br#"{"bytes":"!!!not base64"}"#);
    let got = decode_all(&bytes, 100);
    assert!(matches!(
        got.as_slice(),
        [StreamEvent::Error { status: 502, .. }]
    ));
}

#[test]
fn errors_become_invoke_exception_members() {
    for (status, error_type, member) in [
        (504, "timeout_error", "modelTimeoutException"),
        (529, "overloaded_error", "serviceUnavailableException"),
        (429, "rate_limit_error", "throttlingException"),
        (424, "", "modelStreamErrorException"),
    ] {
        let mut enc = invoke::StreamEncoder::new("id", "m");
        let b = enc.encode(&StreamEvent::Error {
            status,
            error_type: error_type.into(),
            message: "x".into(),
        });
        let f = eventstream::FrameDecoder::new().push(&b).unwrap();
        assert_eq!(f[0].exception_type.as_deref(), Some(member), "{error_type}");
        assert!(enc
            .encode(&StreamEvent::TextDelta {
                index: 0,
                text: "late".into()
            })
            .is_empty());
    }
    let f = eventstream::FrameDecoder::new()
        .push(&invoke::render_stream_error("lost"))
        .unwrap();
    assert_eq!(
        f[0].exception_type.as_deref(),
        Some("modelStreamErrorException")
    );
    let e = invoke::render_error(GatewayErrorKind::Unauthenticated, "no key");
    assert_eq!(
        (e.status, e.headers[0].1.as_str()),
        (403, "AccessDeniedException")
    );
}

#[test]
fn paths_encode_the_model_id() {
    assert_eq!(
        invoke::path("arn:aws:bedrock:us-east-1:1:application-inference-profile/abc", true),
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Aapplication-inference-profile%2Fabc/invoke-with-response-stream"
    );
    assert_eq!(invoke::path("m", false), "/model/m/invoke");
}

/// A non-streamed InvokeModel response states its token counts in headers too; only InvokeModel.
#[test]
fn invoke_states_usage_in_token_count_headers() {
    let usage = Usage {
        input_tokens: 135,
        output_tokens: 57,
    };
    assert_eq!(
        Dialect::BedrockInvoke.usage_headers(usage),
        Some([
            ("x-amzn-bedrock-input-token-count", 135),
            ("x-amzn-bedrock-output-token-count", 57)
        ])
    );
    for d in [
        Dialect::OpenAiChat,
        Dialect::OpenAiResponses,
        Dialect::AnthropicMessages,
        Dialect::BedrockConverse,
    ] {
        assert_eq!(d.usage_headers(usage), None, "{d:?}");
    }
}
