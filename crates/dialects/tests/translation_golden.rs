//! Golden files for translation (STYLE habit 9): one fixture per case under `tests/fixtures/`,
//! one snapshot per target dialect (`tests/snapshots/`). Every case also checks that going
//! A → canonical → B → canonical keeps the canonical form (text, tool calls, usage numbers), and
//! every stream encoder's output parses back with the same dialect's decoder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use bytes::Bytes;
use sidetrack_dialects::canonical::{
    ChatRequest, ChatResponse, Part, StopReason, StreamEvent, TranslateError,
};
use sidetrack_dialects::{
    anthropic_messages, gemini, openai_chat, openai_responses, Dialect, ParsedRequest, Usage,
};

const CREATED: u64 = 1_700_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum D {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

const ALL: [D; 4] = [D::Chat, D::Responses, D::Anthropic, D::Gemini];

impl D {
    fn name(self) -> &'static str {
        match self {
            D::Chat => "openai_chat",
            D::Responses => "openai_responses",
            D::Anthropic => "anthropic_messages",
            D::Gemini => "gemini",
        }
    }

    fn from_name(s: &str) -> D {
        ALL.into_iter()
            .find(|d| d.name() == s)
            .unwrap_or_else(|| panic!("fixture dialect `{s}`"))
    }

    fn dialect(self) -> Dialect {
        match self {
            D::Chat => Dialect::OpenAiChat,
            D::Responses => Dialect::OpenAiResponses,
            D::Anthropic => Dialect::AnthropicMessages,
            D::Gemini => Dialect::Gemini,
        }
    }

    fn to_canonical(self, body: &[u8]) -> Result<ChatRequest, TranslateError> {
        if self == D::Gemini {
            // The model and the streaming choice come from the path.
            let p = gemini::parse_request("gemini-2.5-flash", Bytes::copy_from_slice(body), true)
                .expect("fixture parses");
            return gemini::to_canonical(&p);
        }
        let p = ParsedRequest::parse_json_top(self.dialect(), Bytes::copy_from_slice(body))
            .expect("fixture parses");
        match self {
            D::Chat => openai_chat::to_canonical(&p),
            D::Responses => openai_responses::to_canonical(&p),
            D::Anthropic => anthropic_messages::to_canonical(&p),
            D::Gemini => unreachable!(),
        }
    }

    fn request_body(self, req: &ChatRequest) -> Result<Bytes, TranslateError> {
        match self {
            D::Chat => openai_chat::request_body(req),
            D::Responses => openai_responses::request_body(req),
            D::Anthropic => anthropic_messages::request_body(req),
            D::Gemini => gemini::request_body(req),
        }
    }

    fn parse_response(self, body: &[u8]) -> ChatResponse {
        match self {
            D::Chat => openai_chat::parse_response(body),
            D::Responses => openai_responses::parse_response(body),
            D::Anthropic => anthropic_messages::parse_response(body),
            D::Gemini => gemini::parse_response(body),
        }
        .expect("response parses")
    }

    fn render_response(self, resp: &ChatResponse) -> Bytes {
        match self {
            D::Chat => openai_chat::render_response_at(resp, CREATED),
            D::Responses => openai_responses::render_response_at(resp, CREATED),
            D::Anthropic => anthropic_messages::render_response(resp),
            D::Gemini => gemini::render_response(resp),
        }
    }

    fn response_usage(self, body: &[u8]) -> Option<Usage> {
        match self {
            D::Chat => openai_chat::response_usage(body),
            D::Responses => openai_responses::response_usage(body),
            D::Anthropic => anthropic_messages::response_usage(body),
            D::Gemini => gemini::response_usage(body),
        }
    }

    /// Decodes a whole stream, fed in pieces of `step` bytes.
    fn decode(self, bytes: &[u8], step: usize) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        match self {
            D::Chat => {
                let mut d = openai_chat::StreamDecoder::new();
                bytes.chunks(step).for_each(|c| out.extend(d.push(c)));
            }
            D::Responses => {
                let mut d = openai_responses::StreamDecoder::new();
                bytes.chunks(step).for_each(|c| out.extend(d.push(c)));
            }
            D::Anthropic => {
                let mut d = anthropic_messages::StreamDecoder::new();
                bytes.chunks(step).for_each(|c| out.extend(d.push(c)));
            }
            D::Gemini => {
                let mut d = gemini::StreamDecoder::new();
                bytes.chunks(step).for_each(|c| out.extend(d.push(c)));
                out.extend(d.finish());
            }
        }
        out
    }

    fn encode(self, events: &[StreamEvent]) -> String {
        let mut out = Vec::new();
        match self {
            D::Chat => {
                // The golden caller asked for usage (`stream_options.include_usage`).
                let mut e = openai_chat::StreamEncoder::new("chatcmpl-gw1", "caller-model")
                    .with_usage_chunk(true)
                    .with_created(CREATED);
                events
                    .iter()
                    .for_each(|ev| out.extend_from_slice(&e.encode(ev)));
            }
            D::Responses => {
                let mut e = openai_responses::StreamEncoder::new("resp_gw1", "caller-model")
                    .with_created(CREATED);
                events
                    .iter()
                    .for_each(|ev| out.extend_from_slice(&e.encode(ev)));
            }
            D::Anthropic => {
                let mut e = anthropic_messages::StreamEncoder::new("msg_gw1", "caller-model");
                events
                    .iter()
                    .for_each(|ev| out.extend_from_slice(&e.encode(ev)));
            }
            D::Gemini => {
                let mut e = gemini::StreamEncoder::new("gem_gw1", "caller-model");
                events
                    .iter()
                    .for_each(|ev| out.extend_from_slice(&e.encode(ev)));
            }
        }
        String::from_utf8(out).unwrap()
    }
}

fn fixtures(dir: &str) -> Vec<(String, D, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let stem = p.file_stem().unwrap().to_str().unwrap().to_owned();
            let (case, dialect) = stem.rsplit_once('.').unwrap();
            (format!("{case}.{dialect}"), D::from_name(dialect), p)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no fixtures in {}", root.display());
    out
}

/// Indents a JSON body without reordering its keys, so the snapshot shows the bytes as sent.
fn pretty(body: &[u8]) -> String {
    let text = std::str::from_utf8(body).unwrap();
    serde_json::from_str::<serde_json::Value>(text).expect("body is JSON");
    let mut out = String::new();
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().unwrap());
                } else {
                    depth += 1;
                    out.push('\n');
                    out.push_str(&"  ".repeat(depth));
                }
            }
            '}' | ']' => {
                depth -= 1;
                out.push('\n');
                out.push_str(&"  ".repeat(depth));
                out.push(c);
            }
            ',' => {
                out.push_str(",\n");
                out.push_str(&"  ".repeat(depth));
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

fn settings() -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s
}

/// What a translation to `target` is documented to change (docs/translation.md "dropped").
fn expected_after(mut c: ChatRequest, target: D) -> ChatRequest {
    match target {
        D::Anthropic => {
            c.max_tokens = c.max_tokens.or(Some(4096));
        }
        // Gemini has no name or strictness for the output schema.
        D::Gemini => {
            if let Some(s) = &mut c.json_schema {
                s.name = "response".into();
                s.strict = false;
            }
        }
        D::Chat | D::Responses => {
            for m in &mut c.messages {
                for p in &mut m.content {
                    if let Part::ToolResult { is_error, .. } = p {
                        *is_error = false;
                    }
                }
            }
        }
    }
    c
}

#[test]
fn request_fixtures_translate_to_every_dialect_and_back() {
    let _g = settings().bind_to_scope();
    for (case, source, path) in fixtures("requests") {
        let body = std::fs::read(&path).unwrap();
        let canonical = source
            .to_canonical(&body)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        insta::assert_debug_snapshot!(format!("req__{case}__canonical"), canonical);
        for target in ALL {
            let name = format!("req__{case}__to_{}", target.name());
            match target.request_body(&canonical) {
                Ok(out) => {
                    insta::assert_snapshot!(name.clone(), pretty(&out));
                    let mut back = target
                        .to_canonical(&out)
                        .unwrap_or_else(|e| panic!("{name}: rendered body does not parse: {e}"));
                    if target == D::Gemini {
                        // A Gemini body has neither: the path carries them.
                        back.model.clone_from(&canonical.model);
                        back.stream = canonical.stream;
                    }
                    assert_eq!(
                        back,
                        expected_after(canonical.clone(), target),
                        "{name}: canonical changed on the round trip"
                    );
                }
                Err(e) => insta::assert_snapshot!(name.clone(), format!("TranslateError: {e}")),
            }
        }
    }
}

#[test]
fn response_fixtures_render_in_every_dialect_and_back() {
    let _g = settings().bind_to_scope();
    for (case, provider, path) in fixtures("responses") {
        let body = std::fs::read(&path).unwrap();
        let canonical = provider.parse_response(&body);
        assert_eq!(
            provider.response_usage(&body),
            Some(canonical.usage),
            "{case}"
        );
        for target in ALL {
            let name = format!("resp__{case}__to_{}", target.name());
            let out = target.render_response(&canonical);
            insta::assert_snapshot!(name.clone(), pretty(&out));
            let back = target.parse_response(&out);
            let mut expected = canonical.clone();
            if target == D::Chat && expected.stop_reason == StopReason::StopSequence {
                expected.stop_reason = StopReason::EndTurn;
            }
            assert_eq!(
                back, expected,
                "{name}: canonical changed on the round trip"
            );
            assert_eq!(target.response_usage(&out), Some(canonical.usage), "{name}");
        }
    }
}

/// What a stream says, independent of framing: blocks in order, stop reason, usage, error.
#[derive(Debug, PartialEq)]
struct Summary {
    blocks: Vec<Block>,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    error: Option<(u16, String)>,
}

#[derive(Debug, PartialEq)]
enum Block {
    Text(String),
    Call {
        id: String,
        name: String,
        args: String,
    },
}

fn summarize(events: &[StreamEvent]) -> Summary {
    let mut blocks: Vec<(usize, Block)> = Vec::new();
    let mut s = Summary {
        blocks: Vec::new(),
        stop: None,
        usage: None,
        error: None,
    };
    let mut started = false;
    let mut stopped: Vec<usize> = Vec::new();
    for ev in events {
        match ev {
            StreamEvent::Start { .. } => {
                assert!(!started, "two Start events");
                started = true;
            }
            StreamEvent::TextDelta { index, text } => {
                assert!(started, "content before Start");
                assert!(!stopped.contains(index), "delta after BlockStop");
                match blocks.iter_mut().find(|(i, _)| i == index) {
                    Some((_, Block::Text(t))) => t.push_str(text),
                    Some(_) => panic!("text delta into a tool block"),
                    None => blocks.push((*index, Block::Text(text.clone()))),
                }
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                assert!(started, "content before Start");
                blocks.push((
                    *index,
                    Block::Call {
                        id: id.clone(),
                        name: name.clone(),
                        args: String::new(),
                    },
                ));
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                assert!(!stopped.contains(index), "delta after BlockStop");
                match blocks.iter_mut().find(|(i, _)| i == index) {
                    Some((_, Block::Call { args, .. })) => args.push_str(arguments),
                    _ => panic!("arguments for an unknown tool block"),
                }
            }
            StreamEvent::BlockStop { index } => stopped.push(*index),
            StreamEvent::Usage(u) => s.usage = Some(*u),
            StreamEvent::Stop { reason, usage } => {
                s.stop = Some(*reason);
                if usage.is_some() {
                    s.usage = *usage;
                }
            }
            StreamEvent::Error {
                status, error_type, ..
            } => s.error = Some((*status, error_type.clone())),
        }
    }
    s.blocks = blocks.into_iter().map(|(_, b)| b).collect();
    s
}

#[test]
fn stream_fixtures_decode_in_any_split_and_reencode_in_every_dialect() {
    let _g = settings().bind_to_scope();
    for (case, provider, path) in fixtures("streams") {
        let bytes = std::fs::read(&path).unwrap();
        let events = provider.decode(&bytes, bytes.len());
        for step in [1, 7, 64] {
            assert_eq!(
                provider.decode(&bytes, step),
                events,
                "{case}: split {step}"
            );
        }
        insta::assert_debug_snapshot!(format!("stream__{case}__canonical"), events);
        let original = summarize(&events);
        for target in ALL {
            let name = format!("stream__{case}__to_{}", target.name());
            let sse = target.encode(&events);
            insta::assert_snapshot!(name.clone(), sse);
            // The encoder's output parses back with the same dialect's decoder.
            let back = summarize(&target.decode(sse.as_bytes(), 5));
            let mut expected = summarize(&events);
            if let Some((status, _)) = &original.error {
                // The error type is renamed into the target's vocabulary; the status survives.
                let (s, _) = back.error.clone().expect("error event survives");
                assert_eq!(s, *status, "{name}: error status");
                expected.error = back.error.clone();
            }
            if target == D::Chat && expected.stop == Some(StopReason::StopSequence) {
                expected.stop = Some(StopReason::EndTurn);
            }
            assert_eq!(back, expected, "{name}: stream meaning changed");
        }
    }
}

#[test]
fn every_encoder_parses_back_with_its_own_decoder() {
    let usage = Usage {
        input_tokens: 11,
        output_tokens: 22,
    };
    let events = vec![
        StreamEvent::Start {
            id: "up-1".into(),
            model: "up-model".into(),
            input_tokens: Some(11),
        },
        StreamEvent::TextDelta {
            index: 0,
            text: "Let me look ".into(),
        },
        StreamEvent::TextDelta {
            index: 0,
            text: "that up. \"quoted\"\nnew line".into(),
        },
        StreamEvent::BlockStop { index: 0 },
        StreamEvent::ToolCallStart {
            index: 1,
            id: "call_a".into(),
            name: "search".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 1,
            arguments: "{\"q\":".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 1,
            arguments: "\"rust\"}".into(),
        },
        StreamEvent::BlockStop { index: 1 },
        StreamEvent::ToolCallStart {
            index: 2,
            id: "call_b".into(),
            name: "clock".into(),
        },
        StreamEvent::ToolCallDelta {
            index: 2,
            arguments: "{}".into(),
        },
        StreamEvent::BlockStop { index: 2 },
        StreamEvent::Usage(usage),
        StreamEvent::Stop {
            reason: StopReason::ToolUse,
            usage: None,
        },
    ];
    for d in ALL {
        let sse = d.encode(&events);
        for step in [1, 3, sse.len()] {
            let back = d.decode(sse.as_bytes(), step);
            assert_eq!(summarize(&back), summarize(&events), "{}", d.name());
        }
    }
    // Anthropic keeps block boundaries exactly, so the events come back identical (with the
    // encoder's caller-facing id and model).
    let back = D::Anthropic.decode(D::Anthropic.encode(&events).as_bytes(), 2);
    let mut expected: Vec<StreamEvent> = events
        .iter()
        .filter(|e| !matches!(e, StreamEvent::Usage(_)))
        .cloned()
        .collect();
    expected[0] = StreamEvent::Start {
        id: "msg_gw1".into(),
        model: "caller-model".into(),
        input_tokens: Some(11),
    };
    if let Some(StreamEvent::Stop { usage: u, .. }) = expected.last_mut() {
        *u = Some(usage);
    }
    assert_eq!(back, expected);
}

#[test]
fn openai_chat_stream_without_usage_has_no_usage_chunk() {
    let events = vec![
        StreamEvent::Start {
            id: "x".into(),
            model: "m".into(),
            input_tokens: None,
        },
        StreamEvent::TextDelta {
            index: 0,
            text: "hi".into(),
        },
        StreamEvent::Stop {
            reason: StopReason::MaxTokens,
            usage: None,
        },
    ];
    let sse = D::Chat.encode(&events);
    assert!(!sse.contains("\"usage\""), "{sse}");
    assert!(sse.contains("\"finish_reason\":\"length\""));
    assert!(sse.ends_with("data: [DONE]\n\n"));
    let first = sse.lines().next().unwrap();
    assert!(first.contains("\"role\":\"assistant\""), "{first}");
}

#[test]
fn anthropic_stream_events_all_carry_event_lines() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/streams/tool_call.openai_chat.sse"),
    )
    .unwrap();
    let sse = D::Anthropic.encode(&D::Chat.decode(&bytes, 13));
    for frame in sse.split("\n\n").filter(|f| !f.is_empty()) {
        let mut lines = frame.lines();
        let event = lines.next().unwrap().strip_prefix("event: ").unwrap();
        let data: serde_json::Value =
            serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["type"], event);
    }
}

#[test]
fn responses_stream_sequence_numbers_count_up_from_zero() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/streams/overloaded.anthropic_messages.sse"),
    )
    .unwrap();
    let sse = D::Responses.encode(&D::Anthropic.decode(&bytes, 9));
    let seqs: Vec<u64> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| {
            serde_json::from_str::<serde_json::Value>(d).unwrap()["sequence_number"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    assert!(sse.contains("event: error\n"));
    assert!(!sse.contains("response.completed"));
}
