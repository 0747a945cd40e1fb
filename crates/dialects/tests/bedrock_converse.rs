//! Converse ⇄ canonical golden round trips, stream codec and error shapes.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use serde_json::{json, Value};
use sidetrack_dialects::bedrock::{self, converse, eventstream};
use sidetrack_dialects::canonical::{
    ChatRequest, ChatResponse, JsonSchema, Message, Part, Role, StopReason, StreamEvent, Tool,
    ToolChoice,
};
use sidetrack_dialects::{Dialect, GatewayErrorKind, Usage};

fn parse(model: &str, body: &Value, stream: bool) -> ChatRequest {
    let p = bedrock::parse_request(
        Dialect::BedrockConverse,
        model,
        Bytes::from(body.to_string()),
        stream,
    )
    .unwrap();
    converse::to_canonical(&p).unwrap()
}

fn body_json(req: &ChatRequest) -> Value {
    serde_json::from_slice(&converse::request_body(req).unwrap()).unwrap()
}

#[test]
fn text_system_and_inference_config_round_trip() {
    let wire = json!({
        "messages": [
            {"role": "user", "content": [{"text": "hi"}]},
            {"role": "assistant", "content": [{"text": "hello"}]},
            {"role": "user", "content": [{"text": "more"}, {"cachePoint": {"type": "default"}}]}
        ],
        "system": [{"text": "be brief"}, {"text": "be kind"}],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]},
        "additionalModelRequestFields": {"top_k": 5}
    });
    let req = parse("us.anthropic.claude-3-5-haiku-20241022-v1:0", &wire, false);
    assert_eq!(
        req,
        ChatRequest {
            model: "us.anthropic.claude-3-5-haiku-20241022-v1:0".into(),
            system: vec!["be brief".into(), "be kind".into()],
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
            temperature: Some(0.5),
            top_p: Some(0.9),
            stop: vec!["END".into()],
            ..ChatRequest::default()
        }
    );
    // Back to the wire: no model, no stream flag, dropped hints gone.
    assert_eq!(
        body_json(&req),
        json!({
            "messages": [
                {"role": "user", "content": [{"text": "hi"}]},
                {"role": "assistant", "content": [{"text": "hello"}]},
                {"role": "user", "content": [{"text": "more"}]}
            ],
            "system": [{"text": "be brief"}, {"text": "be kind"}],
            "inferenceConfig": {"maxTokens": 256, "temperature": 0.5, "topP": 0.9, "stopSequences": ["END"]}
        })
    );
    assert!(parse("m", &wire, true).stream);
}

#[test]
fn tools_tool_results_and_images_round_trip() {
    let wire = json!({
        "messages": [
            {"role": "user", "content": [
                {"text": "what is in this picture, and the weather?"},
                {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}
            ]},
            {"role": "assistant", "content": [
                {"text": "Let me check."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "weather", "input": {"city": "Paris"}}}
            ]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "sunny"}]}},
                {"toolResult": {"toolUseId": "tooluse_2", "content": [{"json": {"t": 21}}], "status": "error"}}
            ]}
        ],
        "toolConfig": {
            "tools": [{"toolSpec": {"name": "weather", "description": "Weather by city",
                       "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}}}}],
            "toolChoice": {"tool": {"name": "weather"}}
        }
    });
    let req = parse("amazon.nova-pro-v1:0", &wire, false);
    assert_eq!(
        req.messages[0].content[1],
        Part::Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into()
        }
    );
    assert_eq!(
        req.messages[1].content[1],
        Part::ToolCall {
            id: "tooluse_1".into(),
            name: "weather".into(),
            arguments: r#"{"city":"Paris"}"#.into()
        }
    );
    assert_eq!(
        req.messages[2].content,
        vec![
            Part::ToolResult {
                call_id: "tooluse_1".into(),
                content: "sunny".into(),
                is_error: false
            },
            Part::ToolResult {
                call_id: "tooluse_2".into(),
                content: r#"{"t":21}"#.into(),
                is_error: true
            },
        ]
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
    assert_eq!(out["toolConfig"], wire["toolConfig"]);
    assert_eq!(out["messages"][0], wire["messages"][0]);
    assert_eq!(out["messages"][1], wire["messages"][1]);
    // A json tool result comes back as text; `status` only when it is an error.
    assert_eq!(
        out["messages"][2]["content"],
        json!([
            {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "sunny"}]}},
            {"toolResult": {"toolUseId": "tooluse_2", "content": [{"text": "{\"t\":21}"}], "status": "error"}}
        ])
    );
    // And the rendered body parses back to the same canonical request.
    let again = parse("amazon.nova-pro-v1:0", &out, false);
    assert_eq!(again, req);
}

#[test]
fn tool_choice_variants() {
    let mut req = ChatRequest {
        messages: vec![Message {
            role: Role::User,
            content: vec![Part::Text("x".into())],
        }],
        tools: vec![Tool {
            name: "f".into(),
            description: None,
            parameters: String::new(),
        }],
        ..ChatRequest::default()
    };
    req.tool_choice = Some(ToolChoice::Any);
    assert_eq!(
        body_json(&req)["toolConfig"],
        json!({"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {}}}}], "toolChoice": {"any": {}}})
    );
    req.tool_choice = Some(ToolChoice::Auto);
    assert!(body_json(&req)["toolConfig"].get("toolChoice").is_none());
    // `none` without tool history: tools are left out.
    req.tool_choice = Some(ToolChoice::None);
    assert!(body_json(&req).get("toolConfig").is_none());
}

#[test]
fn merges_same_role_turns_and_refuses_json_schema() {
    let req = ChatRequest {
        messages: vec![
            Message {
                role: Role::User,
                content: vec![Part::Text("a".into())],
            },
            Message {
                role: Role::User,
                content: vec![Part::Text("b".into()), Part::Text(String::new())],
            },
        ],
        ..ChatRequest::default()
    };
    assert_eq!(
        body_json(&req)["messages"],
        json!([{"role": "user", "content": [{"text": "a"}, {"text": "b"}]}])
    );
    let with_schema = ChatRequest {
        json_schema: Some(JsonSchema {
            name: "x".into(),
            schema: "{}".into(),
            strict: true,
        }),
        ..req
    };
    assert!(converse::request_body(&with_schema).is_err());
}

#[test]
fn untranslatable_content_is_an_error() {
    let wire = json!({"messages": [{"role": "user", "content": [
        {"document": {"format": "pdf", "name": "d", "source": {"bytes": "AA=="}}}
    ]}]});
    let p = bedrock::parse_request(
        Dialect::BedrockConverse,
        "m",
        Bytes::from(wire.to_string()),
        false,
    )
    .unwrap();
    let e = converse::to_canonical(&p).unwrap_err();
    assert!(e.0.contains("document"), "{e}");
}

#[test]
fn responses_round_trip_with_every_stop_reason() {
    for (wire_stop, stop) in [
        ("end_turn", StopReason::EndTurn),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("tool_use", StopReason::ToolUse),
        ("content_filtered", StopReason::ContentFilter),
    ] {
        let wire = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"text": "Calling."},
                {"toolUse": {"toolUseId": "t1", "name": "f", "input": {"a": 1}}}
            ]}},
            "stopReason": wire_stop,
            "usage": {"inputTokens": 10, "outputTokens": 4, "totalTokens": 14},
            "metrics": {"latencyMs": 0}
        });
        let resp = converse::parse_response(wire.to_string().as_bytes()).unwrap();
        assert_eq!(
            resp,
            ChatResponse {
                id: String::new(),
                model: String::new(),
                content: vec![
                    Part::Text("Calling.".into()),
                    Part::ToolCall {
                        id: "t1".into(),
                        name: "f".into(),
                        arguments: r#"{"a":1}"#.into()
                    },
                ],
                stop_reason: stop,
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 4
                },
            }
        );
        let rendered: Value = serde_json::from_slice(&converse::render_response(&resp)).unwrap();
        assert_eq!(rendered, wire);
        assert_eq!(
            converse::response_usage(wire.to_string().as_bytes()),
            Some(Usage {
                input_tokens: 10,
                output_tokens: 4
            })
        );
    }
    assert_eq!(
        converse::parse_response(br#"{"output":{"message":{"role":"assistant","content":[]}},"stopReason":"guardrail_intervened"}"#)
            .unwrap()
            .stop_reason,
        StopReason::ContentFilter
    );
}

fn decode_all(bytes: &[u8], step: usize) -> Vec<StreamEvent> {
    let mut d = converse::StreamDecoder::new();
    let mut out: Vec<StreamEvent> = bytes.chunks(step.max(1)).flat_map(|c| d.push(c)).collect();
    out.extend(d.finish());
    out
}

#[test]
fn stream_encode_then_decode_gives_the_same_events() {
    let events = vec![
        StreamEvent::Start {
            id: String::new(),
            model: String::new(),
            input_tokens: None,
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
            id: "t1".into(),
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
            usage: Some(Usage {
                input_tokens: 12,
                output_tokens: 7,
            }),
        },
    ];
    let mut enc = converse::StreamEncoder::new("id", "model");
    let bytes: Vec<u8> = events.iter().flat_map(|e| enc.encode(e).to_vec()).collect();
    for step in [1, 7, 64, bytes.len()] {
        assert_eq!(decode_all(&bytes, step), events, "step {step}");
    }
    // A Stop without usage then a Usage encode the same frames, and decode the same way.
    let mut enc = converse::StreamEncoder::new("id", "model");
    let split_usage: Vec<u8> = events[..events.len() - 1]
        .iter()
        .chain([
            &StreamEvent::Stop {
                reason: StopReason::ToolUse,
                usage: None,
            },
            &StreamEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 7,
            }),
        ])
        .flat_map(|e| enc.encode(e).to_vec())
        .collect();
    assert_eq!(decode_all(&split_usage, 9), events);
    // Text blocks get no contentBlockStart, tool blocks do.
    let mut fd = eventstream::FrameDecoder::new();
    let types: Vec<String> = fd
        .push(&bytes)
        .unwrap()
        .into_iter()
        .map(|f| f.event_type.unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
}

#[test]
fn stop_with_usage_becomes_message_stop_then_metadata() {
    let mut enc = converse::StreamEncoder::new("id", "model");
    let mut bytes = enc
        .encode(&StreamEvent::Start {
            id: "x".into(),
            model: "m".into(),
            input_tokens: Some(3),
        })
        .to_vec();
    bytes.extend_from_slice(&enc.encode(&StreamEvent::TextDelta {
        index: 0,
        text: "Hi".into(),
    }));
    let usage = Usage {
        input_tokens: 3,
        output_tokens: 1,
    };
    bytes.extend_from_slice(&enc.encode(&StreamEvent::Stop {
        reason: StopReason::EndTurn,
        usage: Some(usage),
    }));
    // A later Usage does not repeat the metadata event.
    assert!(enc.encode(&StreamEvent::Usage(usage)).is_empty());
    let got = decode_all(&bytes, 5);
    assert_eq!(
        got[2..],
        [StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: Some(usage)
        }]
    );
}

/// Issue 14: the usage arrives in `metadata`, after `messageStop`; a caller's encoder closes its
/// stream on the `Stop`, so the `Stop` waits for the usage and carries it.
#[test]
fn the_stop_waits_for_metadata_and_carries_its_usage() {
    let frame = |t: &str, v: Value| eventstream::event_frame(t, v.to_string().as_bytes());
    let mut d = converse::StreamDecoder::new();
    assert_eq!(
        d.push(&frame("messageStart", json!({"role": "assistant"})))
            .len(),
        1
    );
    assert_eq!(
        d.push(&frame(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}})
        ))
        .len(),
        1
    );
    assert_eq!(
        d.push(&frame("contentBlockStop", json!({"contentBlockIndex": 0})))
            .len(),
        1
    );
    assert_eq!(
        d.push(&frame("messageStop", json!({"stopReason": "end_turn"}))),
        vec![],
        "held until metadata"
    );
    let usage = Usage {
        input_tokens: 11,
        output_tokens: 5,
    };
    assert_eq!(
        d.push(&frame(
            "metadata",
            json!({"usage": {"inputTokens": 11, "outputTokens": 5, "totalTokens": 16}, "metrics": {"latencyMs": 1}})
        )),
        vec![StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: Some(usage)
        }]
    );
    assert_eq!(d.finish(), vec![], "nothing left");

    // No metadata: the end of the stream releases the Stop, without usage.
    let mut d = converse::StreamDecoder::new();
    d.push(&frame("messageStop", json!({"stopReason": "max_tokens"})));
    assert_eq!(
        d.finish(),
        vec![StreamEvent::Stop {
            reason: StopReason::MaxTokens,
            usage: None
        }]
    );

    // An exception between them: the Stop first, then the error.
    let mut d = converse::StreamDecoder::new();
    d.push(&frame("messageStop", json!({"stopReason": "end_turn"})));
    let got = d.push(&eventstream::exception_frame("throttlingException", "slow"));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: None
        }
    );
    assert!(matches!(got[1], StreamEvent::Error { status: 429, .. }));
    assert_eq!(d.finish(), vec![]);
}

#[test]
fn decodes_real_bedrock_shapes_with_padding_unknown_events_and_exceptions() {
    let mut bytes = Vec::new();
    let mut ev = |t: &str, v: Value| {
        bytes.extend_from_slice(&eventstream::event_frame(t, v.to_string().as_bytes()))
    };
    ev(
        "messageStart",
        json!({"role": "assistant", "p": "abcdefghijklmnopqrstuvwxyzABCDEF"}),
    );
    ev(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hmm"}}, "p": "ab"}),
    );
    ev("somethingNew", json!({"x": 1}));
    ev(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}, "p": "abc"}),
    );
    ev(
        "contentBlockStop",
        json!({"contentBlockIndex": 0, "p": "abcd"}),
    );
    ev("messageStop", json!({"stopReason": "max_tokens", "p": "a"}));
    ev(
        "metadata",
        json!({"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}, "metrics": {"latencyMs": 12}, "p": "x"}),
    );
    bytes.extend_from_slice(&eventstream::exception_frame(
        "throttlingException",
        "slow down",
    ));
    assert_eq!(
        decode_all(&bytes, 3),
        vec![
            StreamEvent::Start {
                id: String::new(),
                model: String::new(),
                input_tokens: None
            },
            StreamEvent::TextDelta {
                index: 0,
                text: "Hi".into()
            },
            StreamEvent::BlockStop { index: 0 },
            StreamEvent::Stop {
                reason: StopReason::MaxTokens,
                usage: Some(Usage {
                    input_tokens: 3,
                    output_tokens: 1
                })
            },
            StreamEvent::Error {
                status: 429,
                error_type: "throttlingException".into(),
                message: "slow down".into()
            },
        ]
    );
}

#[test]
fn exception_types_map_to_statuses() {
    for (t, status) in [
        ("throttlingException", 429),
        ("modelStreamErrorException", 424),
        ("internalServerException", 500),
        ("serviceUnavailableException", 503),
        ("validationException", 400),
        ("modelTimeoutException", 408),
    ] {
        let got = decode_all(&eventstream::exception_frame(t, "m"), 1000);
        assert_eq!(
            got,
            vec![StreamEvent::Error {
                status,
                error_type: t.into(),
                message: "m".into()
            }]
        );
    }
}

#[test]
fn corrupt_stream_yields_one_502_error_and_stops() {
    let mut bytes = eventstream::event_frame("messageStart", b"{}").to_vec();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    let mut d = converse::StreamDecoder::new();
    let got = d.push(&bytes);
    assert!(matches!(
        got.as_slice(),
        [StreamEvent::Error { status: 502, .. }]
    ));
    assert!(d
        .push(&eventstream::event_frame("messageStart", b"{}"))
        .is_empty());
}

#[test]
fn encoder_maps_errors_onto_converse_exception_members() {
    for (status, error_type, member) in [
        (529, "overloaded_error", "serviceUnavailableException"),
        (429, "rate_limit_error", "throttlingException"),
        (500, "api_error", "internalServerException"),
        (400, "invalid_request_error", "validationException"),
        // ConverseStream has no modelTimeoutException member.
        (504, "timeout_error", "modelStreamErrorException"),
    ] {
        let mut enc = converse::StreamEncoder::new("id", "m");
        let b = enc.encode(&StreamEvent::Error {
            status,
            error_type: error_type.into(),
            message: "x".into(),
        });
        let f = eventstream::FrameDecoder::new().push(&b).unwrap();
        assert_eq!(f[0].exception_type.as_deref(), Some(member), "{error_type}");
    }
    let f = eventstream::FrameDecoder::new()
        .push(&converse::render_stream_error("lost"))
        .unwrap();
    assert_eq!(f[0].message_type, "exception");
    assert_eq!(
        f[0].exception_type.as_deref(),
        Some("modelStreamErrorException")
    );
    assert_eq!(&f[0].payload[..], br#"{"message":"lost"}"#);
}

#[test]
fn gateway_errors_follow_the_bedrock_column() {
    for (kind, status, shape) in [
        (GatewayErrorKind::InvalidRequest, 400, "ValidationException"),
        (
            GatewayErrorKind::Unauthenticated,
            403,
            "AccessDeniedException",
        ),
        (
            GatewayErrorKind::PermissionDenied,
            403,
            "AccessDeniedException",
        ),
        (GatewayErrorKind::NotFound, 404, "ResourceNotFoundException"),
        (GatewayErrorKind::TooLarge, 400, "ValidationException"),
        (GatewayErrorKind::RateLimited, 429, "ThrottlingException"),
        (
            GatewayErrorKind::BadGateway,
            503,
            "ServiceUnavailableException",
        ),
        (
            GatewayErrorKind::GatewayTimeout,
            408,
            "ModelTimeoutException",
        ),
        (
            GatewayErrorKind::Unavailable,
            503,
            "ServiceUnavailableException",
        ),
    ] {
        let e = converse::render_error(kind, "why");
        assert_eq!(e.status, status, "{kind:?}");
        assert_eq!(e.content_type, "application/json");
        assert_eq!(e.headers, vec![("x-amzn-ErrorType", shape.to_owned())]);
        assert_eq!(&e.body[..], br#"{"message":"why"}"#);
    }
}

#[test]
fn upstream_errors_map_onto_bedrock_shapes() {
    for (status, error_type, want_status, shape) in [
        (429, "rate_limit_error", 429, "ThrottlingException"),
        (400, "invalid_request_error", 400, "ValidationException"),
        (401, "authentication_error", 403, "AccessDeniedException"),
        (403, "permission_error", 403, "AccessDeniedException"),
        (404, "not_found_error", 404, "ResourceNotFoundException"),
        (408, "timeout_error", 408, "ModelTimeoutException"),
        (504, "timeout_error", 408, "ModelTimeoutException"),
        (500, "api_error", 500, "InternalServerException"),
        (
            503,
            "service_unavailable_error",
            503,
            "ServiceUnavailableException",
        ),
        (529, "overloaded_error", 503, "ServiceUnavailableException"),
        (502, "", 503, "ServiceUnavailableException"),
        (413, "request_too_large", 400, "ValidationException"),
        (429, "ModelNotReadyException", 429, "ModelNotReadyException"),
        (424, "modelErrorException", 424, "ModelErrorException"),
    ] {
        let e = converse::render_upstream_error(status, error_type, "m");
        assert_eq!(
            (e.status, e.headers[0].1.as_str()),
            (want_status, shape),
            "{status} {error_type}"
        );
        assert_eq!(e.headers[0].0, "x-amzn-ErrorType");
    }
}

#[test]
fn parse_error_follows_botocore() {
    assert_eq!(
        converse::parse_error(
            429,
            Some("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            br#"{"message":"Too many requests, please wait before trying again."}"#
        ),
        (
            "ThrottlingException".into(),
            "Too many requests, please wait before trying again.".into()
        )
    );
    // Header wins over body.
    assert_eq!(
        converse::parse_error(
            400,
            Some("ValidationException"),
            br#"{"__type":"Other","Message":"x"}"#
        ),
        ("ValidationException".into(), "x".into())
    );
    assert_eq!(
        converse::parse_error(
            400,
            None,
            br#"{"__type":"com.amazon.bedrock#ValidationException","message":"bad"}"#
        ),
        ("ValidationException".into(), "bad".into())
    );
    assert_eq!(
        converse::parse_error(
            400,
            None,
            br#"{"code":"AccessDeniedException","__type":"X"}"#
        )
        .0,
        "AccessDeniedException"
    );
    assert_eq!(
        converse::parse_error(502, None, b"<html>"),
        ("502".into(), String::new())
    );
}

#[test]
fn paths_encode_the_model_id() {
    assert_eq!(
        converse::path("us.anthropic.claude-3-5-haiku-20241022-v1:0", true),
        "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
    );
    assert_eq!(converse::path("m", false), "/model/m/converse");
}

#[test]
fn tool_schemas_and_inputs_keep_their_text() {
    let wire = r#"{"messages":[{"role":"assistant","content":[{"toolUse":{"toolUseId":"t","name":"f","input":{"z":1,"a":2}}}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{"type":"object","required":["z"],"properties":{"z":{"type":"integer"}}}}}}]}}"#;
    let p = bedrock::parse_request(
        Dialect::BedrockConverse,
        "m",
        Bytes::from_static(wire.as_bytes()),
        false,
    )
    .unwrap();
    let req = converse::to_canonical(&p).unwrap();
    assert_eq!(
        req.tools[0].parameters,
        r#"{"type":"object","required":["z"],"properties":{"z":{"type":"integer"}}}"#
    );
    assert_eq!(
        req.messages[0].content[0],
        Part::ToolCall {
            id: "t".into(),
            name: "f".into(),
            arguments: r#"{"z":1,"a":2}"#.into()
        }
    );
    assert_eq!(&converse::request_body(&req).unwrap()[..], wire.as_bytes());
}
