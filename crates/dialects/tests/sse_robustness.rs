//! Pseudo-random and near-valid inputs into every parser and decoder of the SSE dialects (OpenAI
//! chat, OpenAI Responses, Anthropic Messages): none may panic. Besides random bytes and JSON
//! fragment soup, the fixtures under tests/fixtures are mutated (byte flips, truncations, splices,
//! and JSON-aware edits: a value replaced, removed, or swapped for a subtree of another fixture)
//! so the inputs get past the first byte into the translation code. The cargo-fuzz targets in
//! crates/dialects/fuzz go deeper; this runs in CI on stable.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use bytes::Bytes;
use serde_json::Value;
use sidetrack_dialects::canonical::{StopReason, StreamEvent};
use sidetrack_dialects::sse::{SseDecoder, SseEvent};
use sidetrack_dialects::{
    anthropic_messages, gemini, openai_chat, openai_responses, Dialect,
    StreamEventClass as Meaning, Usage,
};

/// splitmix64: small, fast, and deterministic, so a failure reproduces from its iteration number.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const ITERATIONS: usize = 10_000;

/// Runs `one` ITERATIONS times on one generator (seeded by `seed`), passing the iteration number.
fn run(seed: u64, mut one: impl FnMut(&mut SplitMix, usize)) {
    let mut rng = SplitMix(seed);
    for i in 0..ITERATIONS {
        one(&mut rng, i);
    }
}

const SSE_DIALECTS: [Dialect; 4] = [
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::AnthropicMessages,
    Dialect::Gemini,
];

const ALL_DIALECTS: [Dialect; 6] = [
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::AnthropicMessages,
    Dialect::BedrockInvoke,
    Dialect::BedrockConverse,
    Dialect::Gemini,
];

/// JSON-ish fragments of the three dialects' vocabularies.
const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"model\"",
    "\"m\"",
    "\"stream\"",
    "\"messages\"",
    "\"input\"",
    "\"instructions\"",
    "\"role\"",
    "\"user\"",
    "\"assistant\"",
    "\"system\"",
    "\"developer\"",
    "\"tool\"",
    "\"content\"",
    "\"text\"",
    "\"type\"",
    "\"image_url\"",
    "\"url\"",
    "\"data:image/png;base64,AAAA\"",
    "\"input_text\"",
    "\"output_text\"",
    "\"function_call\"",
    "\"function_call_output\"",
    "\"call_id\"",
    "\"arguments\"",
    "\"tools\"",
    "\"function\"",
    "\"parameters\"",
    "\"tool_calls\"",
    "\"tool_choice\"",
    "\"tool_use\"",
    "\"tool_result\"",
    "\"tool_use_id\"",
    "\"response_format\"",
    "\"json_schema\"",
    "\"schema\"",
    "\"max_tokens\"",
    "\"max_output_tokens\"",
    "\"choices\"",
    "\"delta\"",
    "\"finish_reason\"",
    "\"stop_reason\"",
    "\"usage\"",
    "\"prompt_tokens\"",
    "\"input_tokens\"",
    "\"output\"",
    "\"error\"",
    "\"message\"",
    "\"index\"",
    "\"content_block\"",
    "\"message_start\"",
    "\"content_block_delta\"",
    "\"response.output_text.delta\"",
    "\"response.completed\"",
    "1",
    "-1",
    "18446744073709551616",
    "1e400",
    "0.5",
    "null",
    "true",
    "\"\\ud800\"",
];

fn json_soup(rng: &mut SplitMix) -> Vec<u8> {
    let n = rng.below(40);
    let mut out = Vec::new();
    for _ in 0..n {
        out.extend_from_slice(rng.pick(PIECES).as_bytes());
    }
    out
}

/// The fixture files of one kind (`requests`, `responses`, `streams`), in a stable order.
fn fixtures(kind: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind);
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let files: Vec<_> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!files.is_empty(), "no {kind} fixtures");
    files
}

/// Characters that matter to JSON and SSE, for targeted byte replacements.
const SPECIAL: &[u8] = b"{}[]\",:\\ \n\r0123456789-+.eEtfnul";

/// 1 to 4 byte-level edits: a byte flipped or replaced by a syntax character, a truncation, a
/// range of another input spliced in, a range deleted or duplicated.
fn mutate_bytes(rng: &mut SplitMix, base: &[u8], donors: &[Vec<u8>]) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..=rng.below(4) {
        let len = out.len();
        match rng.below(6) {
            0 if len > 0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                out[i] = *rng.pick(SPECIAL);
            }
            2 => out.truncate(rng.below(len + 1)),
            3 => {
                let donor = rng.pick(donors);
                let a = rng.below(donor.len() + 1);
                let b = a + rng.below(donor.len() - a + 1);
                let at = rng.below(len + 1);
                out.splice(at..at, donor[a..b].iter().copied());
            }
            4 => {
                let a = rng.below(len + 1);
                let b = a + rng.below(len - a + 1);
                out.drain(a..b);
            }
            _ => {
                let a = rng.below(len + 1);
                let b = a + rng.below((len - a).min(64) + 1);
                let copy = out[a..b].to_vec();
                let at = rng.below(len + 1);
                out.splice(at..at, copy);
            }
        }
    }
    out
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(o) => o.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// The `k`-th node of `v` in pre-order (`k < count_nodes(v)`).
fn nth_node(v: &mut Value, k: usize) -> &mut Value {
    /// The node, or how many nodes are still to skip after this subtree.
    fn walk(v: &mut Value, k: usize) -> Result<&mut Value, usize> {
        if k == 0 {
            return Ok(v);
        }
        let mut k = k - 1;
        let children: Vec<&mut Value> = match v {
            Value::Array(a) => a.iter_mut().collect(),
            Value::Object(o) => o.values_mut().collect(),
            _ => Vec::new(),
        };
        for c in children {
            match walk(c, k) {
                Ok(n) => return Ok(n),
                Err(left) => k = left,
            }
        }
        Err(k)
    }
    walk(v, k).unwrap()
}

/// Values that commonly break assumptions: wrong types, empties, extremes.
fn odd_value(rng: &mut SplitMix) -> Value {
    let text = rng.pick(PIECES).trim_matches('"').to_owned();
    match rng.below(14) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => Value::from(0),
        3 => Value::from(-1),
        // Usage counts at the edge: providers can send any u64 (totals saturate).
        4 => Value::from(u64::MAX),
        5 => Value::from(1.5e300),
        6 => Value::from(""),
        7 => Value::from(text),
        8 => Value::from("\u{0}\u{fffd}\u{1F600}"),
        9 => Value::Array(Vec::new()),
        10 => Value::Object(serde_json::Map::new()),
        11 => Value::Array(vec![Value::Null]),
        12 => serde_json::json!({ "type": text }),
        _ => Value::from("x".repeat(rng.below(300))),
    }
}

/// 1 to 3 JSON-aware edits of a parsed document: a node replaced by an odd value or by a subtree
/// of another document, an object key or array element removed, a key added or an element
/// duplicated.
fn mutate_json(rng: &mut SplitMix, base: &Value, donors: &[Value]) -> Value {
    let mut v = base.clone();
    for _ in 0..=rng.below(3) {
        let k = rng.below(count_nodes(&v));
        let replacement = match rng.below(4) {
            0 => Some(odd_value(rng)),
            1 => {
                let donor = rng.pick(donors);
                let j = rng.below(count_nodes(donor));
                let mut donor = donor.clone();
                Some(nth_node(&mut donor, j).clone())
            }
            _ => None,
        };
        let key = rng.pick(PIECES).trim_matches('"').to_owned();
        let extra = odd_value(rng);
        let i = rng.next() as usize;
        let node = nth_node(&mut v, k);
        match (replacement, node) {
            (Some(r), node) => *node = r,
            (None, Value::Array(a)) if !a.is_empty() => {
                let i = i % a.len();
                if rng.below(2) == 0 {
                    a.remove(i);
                } else {
                    let dup = a[i].clone();
                    a.insert(i, dup);
                }
            }
            (None, Value::Object(o)) if !o.is_empty() && rng.below(2) == 0 => {
                let key = o.keys().nth(i % o.len()).unwrap().clone();
                o.remove(&key);
            }
            (None, Value::Object(o)) => {
                o.insert(key, extra);
            }
            (None, node) => *node = extra,
        }
    }
    v
}

/// A body: random bytes, fragment soup, a fixture as is, byte-mutated, or JSON-mutated.
fn near_valid(rng: &mut SplitMix, raw: &[Vec<u8>], parsed: &[Value]) -> Vec<u8> {
    match rng.below(16) {
        0 => rng.bytes(256),
        1 => json_soup(rng),
        2 => rng.pick(raw).clone(),
        3..=8 => {
            let base = rng.pick(raw).clone();
            mutate_bytes(rng, &base, raw)
        }
        _ => {
            let base = rng.pick(parsed).clone();
            serde_json::to_vec(&mutate_json(rng, &base, parsed)).unwrap()
        }
    }
}

fn parsed(raw: &[Vec<u8>]) -> Vec<Value> {
    raw.iter()
        .map(|b| serde_json::from_slice(b).unwrap())
        .collect()
}

#[test]
fn random_and_mutated_request_bodies_never_panic() {
    let raw = fixtures("requests");
    let json = parsed(&raw);
    run(11, |rng, _| {
        let body = near_valid(rng, &raw, &json);
        for dialect in SSE_DIALECTS {
            // The path model is read by Gemini only (its model is in the path).
            let Ok(p) = dialect.parse_request(Bytes::from(body.clone()), Some("m"), false) else {
                continue;
            };
            let _ = p.body_with_model("other-model");
            let canonical = match dialect {
                Dialect::OpenAiChat => openai_chat::to_canonical(&p),
                Dialect::OpenAiResponses => openai_responses::to_canonical(&p),
                Dialect::Gemini => gemini::to_canonical(&p),
                _ => anthropic_messages::to_canonical(&p),
            };
            if let Ok(req) = canonical {
                for target in ALL_DIALECTS {
                    let _ = target.request_body(&req);
                }
            }
        }
    });
}

#[test]
fn random_and_mutated_response_and_error_bodies_never_panic() {
    let raw = fixtures("responses");
    let json = parsed(&raw);
    run(12, |rng, _| {
        let body = near_valid(rng, &raw, &json);
        let parsed = [
            openai_chat::parse_response(&body),
            openai_responses::parse_response(&body),
            anthropic_messages::parse_response(&body),
            gemini::parse_response(&body),
        ];
        for resp in parsed.iter().flatten() {
            for target in ALL_DIALECTS {
                let _ = target.render_response(resp);
            }
        }
        let _ = openai_chat::response_usage(&body);
        let _ = openai_responses::response_usage(&body);
        let _ = anthropic_messages::response_usage(&body);
        let _ = gemini::response_usage(&body);
        let status = *rng.pick(&[0, 200, 400, 401, 413, 429, 500, 529, 599, u16::MAX]);
        let _ = openai_chat::parse_error(status, &body);
        let _ = openai_responses::parse_error(status, &body);
        let _ = anthropic_messages::parse_error(status, &body);
        let _ = gemini::parse_error(status, &body);
    });
}

/// The events (separated by a blank line) of every stream fixture, each with its `data:` payload
/// parsed when it is JSON.
fn stream_events(streams: &[Vec<u8>]) -> Vec<(Option<String>, Option<Value>, String)> {
    let mut out = Vec::new();
    for s in streams {
        let mut d = SseDecoder::new();
        d.push(s);
        while let Some(SseEvent { event, data }) = d.next_event() {
            out.push((event, serde_json::from_str(&data).ok(), data));
        }
    }
    out
}

/// A stream of 1 to 12 events drawn from all fixtures (any dialect, any order), some with their
/// JSON mutated, joined with `\n` or `\r\n` line ends.
fn event_soup(
    rng: &mut SplitMix,
    events: &[(Option<String>, Option<Value>, String)],
    donors: &[Value],
) -> Vec<u8> {
    let mut out = String::new();
    for _ in 0..=rng.below(12) {
        let (event, json, data) = rng.pick(events);
        let nl = if rng.below(4) == 0 { "\r\n" } else { "\n" };
        if let Some(e) = event {
            out.push_str(&format!("event: {e}{nl}"));
        }
        let data = match json {
            Some(v) if rng.below(2) == 0 => mutate_json(rng, v, donors).to_string(),
            _ => data.clone(),
        };
        out.push_str(&format!("data: {data}{nl}{nl}"));
    }
    out.into_bytes()
}

fn stream_input(
    rng: &mut SplitMix,
    streams: &[Vec<u8>],
    events: &[(Option<String>, Option<Value>, String)],
    donors: &[Value],
) -> Vec<u8> {
    match rng.below(8) {
        0 => rng.bytes(512),
        1 => rng.pick(streams).clone(),
        2..=4 => {
            let base = rng.pick(streams).clone();
            mutate_bytes(rng, &base, streams)
        }
        _ => event_soup(rng, events, donors),
    }
}

/// Splits at random points: pieces of 1 to 64 bytes.
fn random_pieces<'a>(rng: &mut SplitMix, data: &'a [u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = (rng.below(64) + 1).min(rest.len());
        let (piece, tail) = rest.split_at(n);
        out.push(piece);
        rest = tail;
    }
    out
}

#[test]
fn random_and_mutated_streams_never_panic_the_stream_decoders() {
    let streams = fixtures("streams");
    let events = stream_events(&streams);
    let donors: Vec<Value> = events.iter().filter_map(|(_, v, _)| v.clone()).collect();
    run(13, |rng, _| {
        let data = stream_input(rng, &streams, &events, &donors);
        for dialect in SSE_DIALECTS {
            // One encoder per decoder, drawn at random, keeps the run short; every pair is
            // covered across the iterations (the fuzz targets encode into all five).
            let mut decoder = dialect.stream_decoder();
            let mut encoder = rng.pick(&ALL_DIALECTS).stream_encoder("id", "m", true);
            for piece in random_pieces(rng, &data) {
                for ev in decoder.push(piece) {
                    let _ = encoder.encode(&ev);
                }
            }
        }
        let _ = openai_chat::stream_text(&String::from_utf8_lossy(&data));
    });
}

#[test]
fn random_and_mutated_streams_never_panic_the_sse_decoder_or_classifiers() {
    let streams = fixtures("streams");
    let events = stream_events(&streams);
    let donors: Vec<Value> = events.iter().filter_map(|(_, v, _)| v.clone()).collect();
    run(14, |rng, i| {
        let data = stream_input(rng, &streams, &events, &donors);
        let mut split = SseDecoder::new();
        let mut got = Vec::new();
        for piece in random_pieces(rng, &data) {
            split.push(piece);
            got.extend(std::iter::from_fn(|| split.next_event()));
        }
        let mut whole = SseDecoder::new();
        whole.push(&data);
        let want: Vec<_> = std::iter::from_fn(|| whole.next_event()).collect();
        assert_eq!(got, want, "iteration {i}: events depend on the split");
        for chunk in std::iter::once(&data[..]).chain(random_pieces(rng, &data)) {
            chunk_decision_agrees(chunk, i);
        }
        assert_eq!(split.buffered_len(), whole.buffered_len());
        for ev in &got {
            let full = openai_chat::classify_stream_event(ev);
            let before = openai_chat::classify_stream_event_before_content(ev);
            match &full {
                // The pre-commit pass answers from the values it reads: on valid JSON exactly as
                // the typed parse (a preamble is `Metadata` there); a malformed value it skips may
                // leave a token counted (see chunk_scan).
                Meaning::Preamble | Meaning::Metadata
                    if serde_json::from_str::<Value>(&ev.data).is_err() =>
                {
                    assert!(
                        matches!(before, Meaning::Metadata | Meaning::Content),
                        "iteration {i}: {ev:?}"
                    )
                }
                Meaning::Preamble | Meaning::Metadata => {
                    assert_eq!(before, Meaning::Metadata, "iteration {i}: {ev:?}")
                }
                _ => assert_eq!(before, full, "iteration {i}: {ev:?}"),
            }
            let _ = openai_chat::stream_event_usage(ev);
            let _ = openai_responses::classify_stream_event(ev);
            let _ = anthropic_messages::classify_stream_event(ev);
        }
    });
}

/// `openai_chat::classify_chunk_before_content` (the in-place pre-commit read of a chunk) answers,
/// when it answers, what decoding the chunk and classifying its events in order answers: the first
/// deciding event's meaning, else `Metadata`. The one allowed difference (see chunk_scan): a token
/// counted in a chunk with an event that is not valid JSON.
fn chunk_decision_agrees(chunk: &[u8], i: usize) {
    let Some(fast) = openai_chat::classify_chunk_before_content(chunk) else {
        return;
    };
    let mut decoder = SseDecoder::new();
    decoder.push(chunk);
    let mut malformed = false;
    let mut want = Meaning::Metadata;
    while let Some(ev) = decoder.next_event() {
        malformed |= ev.data.trim() != "[DONE]" && serde_json::from_str::<Value>(&ev.data).is_err();
        match openai_chat::classify_stream_event(&ev) {
            Meaning::Preamble | Meaning::Metadata => {}
            decided => {
                want = decided;
                break;
            }
        }
    }
    assert!(
        fast == want || (fast == Meaning::Content && malformed),
        "iteration {i}: {fast:?} vs {want:?} for {:?}",
        String::from_utf8_lossy(chunk)
    );
}

/// Found by this file: usage counts near u64::MAX (a provider can send any u64) overflowed
/// `total_tokens = input_tokens + output_tokens`; totals now saturate.
#[test]
fn usage_at_u64_max_renders_without_overflow() {
    // Gemini's output is candidates + thoughts: both near u64::MAX saturate too.
    let gem = br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":18446744073709551615,"candidatesTokenCount":18446744073709551615,"thoughtsTokenCount":5}}"#;
    assert_eq!(
        gemini::parse_response(gem).unwrap().usage.output_tokens,
        u64::MAX
    );
    assert_eq!(gemini::response_usage(gem).unwrap().output_tokens, u64::MAX);
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":18446744073709551615,"output_tokens":1}}"#;
    let resp = anthropic_messages::parse_response(body).unwrap();
    for dialect in ALL_DIALECTS {
        let _ = dialect.render_response(&resp);
        let mut e = dialect.stream_encoder("id", "m", true);
        let _ = e.encode(&StreamEvent::Start {
            id: "id".into(),
            model: "m".into(),
            input_tokens: None,
        });
        let _ = e.encode(&StreamEvent::Stop {
            reason: StopReason::EndTurn,
            usage: Some(Usage {
                input_tokens: u64::MAX,
                output_tokens: 1,
            }),
        });
    }
}
