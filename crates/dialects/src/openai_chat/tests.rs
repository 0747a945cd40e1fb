use crate::json_tail;
use serde::de::IgnoredAny;

use super::response::{render_error, render_stream_error, WireUsage};
use super::stream::{
    choices_cannot_fail, classify_chunk_before_content, classify_stream_event,
    classify_stream_event_after_content, classify_stream_event_before_content, stream_event_usage,
    Chunk, StreamEncoder,
};
use crate::canonical::StopReason;
use crate::canonical::StreamEvent;
use crate::errors::GatewayErrorKind;
use crate::sse::{self, SseEvent};
use crate::Usage;

fn ev(data: &str) -> SseEvent {
    SseEvent {
        event: None,
        data: data.to_owned(),
    }
}

#[test]
fn classifies_preamble_content_done_and_errors() {
    let role = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#;
    assert_eq!(
        classify_stream_event(&ev(role)),
        crate::StreamEventClass::Preamble
    );
    let text =
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
    assert_eq!(
        classify_stream_event(&ev(text)),
        crate::StreamEventClass::Content
    );
    let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x"}]},"finish_reason":null}]}"#;
    assert_eq!(
        classify_stream_event(&ev(tool)),
        crate::StreamEventClass::Content
    );
    let fin = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    assert_eq!(
        classify_stream_event(&ev(fin)),
        crate::StreamEventClass::Content
    );
    let usage =
        r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
    assert_eq!(
        classify_stream_event(&ev(usage)),
        crate::StreamEventClass::Metadata
    );
    assert_eq!(
        stream_event_usage(&ev(usage)),
        Some(Usage {
            input_tokens: 5,
            output_tokens: 2
        })
    );
    assert_eq!(
        classify_stream_event(&ev("[DONE]")),
        crate::StreamEventClass::Done
    );
    let err =
        r#"{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}"#;
    assert_eq!(
        classify_stream_event(&ev(err)),
        crate::StreamEventClass::Error {
            status: 529,
            error_type: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
}

/// Every event of the fixture streams plus hand-written ones, with and without an event name.
fn stream_events() -> Vec<SseEvent> {
    let mut events = Vec::new();
    for sse in [
        include_str!("../../tests/fixtures/streams/text.openai_chat.sse"),
        include_str!("../../tests/fixtures/streams/tool_call.openai_chat.sse"),
    ] {
        let mut decoder = sse::SseDecoder::new();
        decoder.push(sse.as_bytes());
        while let Some(ev) = decoder.next_event() {
            events.push(ev);
        }
    }
    for data in [
        "[DONE]",
        "  [DONE]  ",
        "",
        "not json",
        r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#,
        r#"{"error":{"message":"m","code":"rate_limit_exceeded"}}"#,
        r#"{"x":1,"error":{"message":"m"}}"#,
        r#"{"error":"just a string"}"#,
        r#"{"error":{"message":1}}"#,
        r#"{"choices":[{"delta":{"content":"say \"error\":{}"}}]}"#,
        r#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
    ] {
        events.push(ev(data));
        events.push(SseEvent {
            event: Some("error".into()),
            data: data.to_owned(),
        });
    }
    events
}

#[test]
fn after_content_agrees_on_done_and_errors_and_parses_nothing_else() {
    for ev in stream_events() {
        let full = classify_stream_event(&ev);
        let after = classify_stream_event_after_content(&ev);
        match full {
            crate::StreamEventClass::Done | crate::StreamEventClass::Error { .. } => {
                assert_eq!(after, full, "{ev:?}")
            }
            _ => assert_eq!(after, crate::StreamEventClass::Metadata, "{ev:?}"),
        }
    }
}

#[test]
fn before_content_agrees_on_content_done_and_errors() {
    let mut events = stream_events();
    for data in [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#,
        r#"{"choices":[{"delta":{"content" : "x"}}]}"#,
        r#"{"choices":[{"delta":{"content":null,"refusal":"no"}}]}"#,
        r#"{"choices":[{"delta":{"refusal":""},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
        r#"{"choices":[{"delta":{"tool_calls":null}}]}"#,
        r#"{"choices":[{"delta":{"\u0063ontent":"x"}}]}"#,
        r#"{"choices":[{"delta":{"content":"","content":"x"}}]}"#,
        r#"{"choices":[{"delta":{"role":"assistant"},"logprobs":{"content":[]}}]}"#,
        r#"{"choices":[{"delta":{"content":"a \"content\":null b"}}]}"#,
        r#"{"choices":[{"delta":{"x":"\"content\""}}]}"#,
        r#"{"choices":[{"delta":{"content":nullx}}]}"#,
        r#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
    ] {
        events.push(ev(data));
    }
    for ev in events {
        let full = classify_stream_event(&ev);
        let before = classify_stream_event_before_content(&ev);
        match full {
            crate::StreamEventClass::Preamble | crate::StreamEventClass::Metadata => {
                assert_eq!(before, crate::StreamEventClass::Metadata, "{ev:?}")
            }
            _ => assert_eq!(before, full, "{ev:?}"),
        }
    }
    let preamble = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
    assert_eq!(
        crate::chunk_scan::scan(preamble.as_bytes()),
        crate::chunk_scan::Scan::NoContent,
        "a preamble is not parsed"
    );
}

#[test]
fn a_chunk_of_whole_events_is_decided_in_place() {
    let role = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#;
    let text = r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
    let err = r#"data: {"error":{"message":"Overloaded","type":"overloaded_error"}}"#;
    let decide = |events: &[&str]| {
        let chunk: String = events.iter().map(|e| format!("{e}\n\n")).collect();
        classify_chunk_before_content(chunk.as_bytes())
    };
    assert_eq!(decide(&[role]), Some(crate::StreamEventClass::Metadata));
    assert_eq!(
        decide(&[": keep-alive", role]),
        Some(crate::StreamEventClass::Metadata)
    );
    assert_eq!(
        decide(&[role, text]),
        Some(crate::StreamEventClass::Content)
    );
    assert_eq!(
        decide(&[role, "data: [DONE]"]),
        Some(crate::StreamEventClass::Done)
    );
    // The first deciding event wins; an error event before it is not read here.
    assert_eq!(decide(&[text, err]), Some(crate::StreamEventClass::Content));
    assert_eq!(decide(&[err, text]), None);
    // Only whole single-line events, no carriage returns.
    for chunk in [
        format!("{role}\n"),
        format!("{role}\r\n\r\n"),
        format!("event: error\n{err}\n\n"),
        format!("{role}\ndata: x\n\n"),
        format!("{role}\n\n{text}"),
        format!("id: 1\n\n{text}\n\n"),
    ] {
        assert_eq!(
            classify_chunk_before_content(chunk.as_bytes()),
            None,
            "{chunk}"
        );
    }
}

/// `stream_event_usage` as it was before the `json_tail` shortcut.
fn reference_stream_event_usage(ev: &SseEvent) -> Option<Usage> {
    if !ev.data.contains("\"usage\":{") && !ev.data.contains("\"usage\": {") {
        return None;
    }
    let chunk: Chunk<'_> = serde_json::from_str(&ev.data).ok()?;
    chunk.usage.map(|u| Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
    })
}

#[test]
fn stream_usage_agrees_with_the_full_chunk_parse() {
    let usage = r#""usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}"#;
    let choices = [
        None,
        Some(r#""choices":[]"#),
        Some(r#""choices" : [ ]"#),
        Some(r#""choices":[{"index":0,"delta":{},"finish_reason":null}]"#),
        // These make the typed `choices` fail, so the whole chunk has no usage.
        Some(r#""choices":[{"finish_reason":1}]"#),
        Some(r#""choices":[{"finish_reason":"a\"b"}]"#),
        Some(r#""choices":null"#),
        Some(r#""choices":{}"#),
        Some(r#""choic\u0065s":[{"finish_reason":1}]"#),
    ];
    let others = [
        r#""id":"chatcmpl-1","object":"chat.completion.chunk""#,
        r#""obfuscation":"x""#,
    ];
    let mut fast = 0;
    for before in choices {
        for after in choices {
            for other in others {
                for (a, b) in [(other, usage), (usage, other)] {
                    let members: Vec<&str> = [before, Some(a), Some(b), after]
                        .into_iter()
                        .flatten()
                        .collect();
                    let data = format!("{{{}}}", members.join(","));
                    let ev = ev(&data);
                    let got = stream_event_usage(&ev);
                    assert_eq!(got, reference_stream_event_usage(&ev), "{data}");
                    let shortcut = json_tail::top_level_member::<Option<WireUsage>, IgnoredAny>(
                        data.as_bytes(),
                        "usage",
                    );
                    fast += usize::from(shortcut.is_some() && choices_cannot_fail(data.as_bytes()));
                }
            }
        }
    }
    assert!(fast > 0);
    for ev in stream_events() {
        assert_eq!(
            stream_event_usage(&ev),
            reference_stream_event_usage(&ev),
            "{ev:?}"
        );
    }
    // What OpenAI sends last: the shortcut answers.
    let last = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"default","system_fingerprint":"fp","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7},"obfuscation":"abc"}"#;
    assert!(choices_cannot_fail(last.as_bytes()));
    assert_eq!(
        json_tail::top_level_member::<Option<WireUsage>, IgnoredAny>(last.as_bytes(), "usage")
            .flatten()
            .map(WireUsage::canonical),
        Some(Usage {
            input_tokens: 5,
            output_tokens: 2
        })
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

fn encoded_chunks(mut e: StreamEncoder, events: &[StreamEvent]) -> Vec<serde_json::Value> {
    let mut out = String::new();
    for ev in events {
        out.push_str(std::str::from_utf8(&e.encode(ev)).unwrap());
    }
    out.split("\n\n")
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn start() -> StreamEvent {
    StreamEvent::Start {
        id: "up".into(),
        model: "up-m".into(),
        input_tokens: Some(3),
    }
}

fn stop(reason: StopReason) -> StreamEvent {
    StreamEvent::Stop {
        reason,
        usage: Some(Usage {
            input_tokens: 3,
            output_tokens: 4,
        }),
    }
}

#[test]
fn the_role_chunk_has_null_content_before_a_tool_call_and_empty_before_text() {
    let tool = [
        start(),
        StreamEvent::ToolCallStart {
            index: 0,
            id: "call_1".into(),
            name: "f".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments: "{}".into(),
        },
        stop(StopReason::ToolUse),
    ];
    let c = encoded_chunks(StreamEncoder::new("c", "m"), &tool);
    let role = &c[0]["choices"][0]["delta"];
    assert_eq!(role["role"], "assistant");
    assert!(role["content"].is_null(), "{role}");
    assert!(role.get("content").is_some(), "content is there, as null");
    assert!(
        c.iter().all(|v| v["choices"][0]["delta"]["content"] != ""),
        "no empty text anywhere in a tool-call answer: {c:?}"
    );
    assert_eq!(c[0]["id"], "c");

    let text = [
        start(),
        StreamEvent::TextDelta {
            index: 0,
            text: "Hi".into(),
        },
        stop(StopReason::EndTurn),
    ];
    let c = encoded_chunks(StreamEncoder::new("", ""), &text);
    assert_eq!(c[0]["choices"][0]["delta"]["content"], "");
    assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(c[0]["id"], "up", "the upstream id still fills an empty one");
    assert_eq!(c[1]["choices"][0]["delta"]["content"], "Hi");
    // An empty answer still opens with the role chunk.
    let c = encoded_chunks(
        StreamEncoder::new("c", "m"),
        &[start(), stop(StopReason::EndTurn)],
    );
    assert_eq!(c[0]["choices"][0]["delta"]["content"], "");
    assert_eq!(c[1]["choices"][0]["finish_reason"], "stop");
}

#[test]
fn the_usage_chunk_is_sent_only_when_the_caller_asked() {
    let events = [
        start(),
        StreamEvent::TextDelta {
            index: 0,
            text: "Hi".into(),
        },
        stop(StopReason::EndTurn),
    ];
    let empty_choices = |c: &[serde_json::Value]| {
        c.iter()
            .filter(|v| v["choices"].as_array().is_some_and(Vec::is_empty))
            .cloned()
            .collect::<Vec<_>>()
    };
    let c = encoded_chunks(StreamEncoder::new("c", "m"), &events);
    assert!(empty_choices(&c).is_empty(), "{c:?}");
    let c = encoded_chunks(StreamEncoder::new("c", "m").with_usage_chunk(true), &events);
    let u = empty_choices(&c);
    assert_eq!(u.len(), 1, "{c:?}");
    assert_eq!(u[0]["usage"]["prompt_tokens"], 3);
    assert_eq!(u[0]["usage"]["completion_tokens"], 4);
}
