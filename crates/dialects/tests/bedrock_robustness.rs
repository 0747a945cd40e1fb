//! 10,000 pseudo-random inputs into every Bedrock parser and decoder: none may panic. The fuzz
//! targets in crates/dialects/fuzz go deeper; this runs in CI on stable.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use sidetrack_dialects::bedrock::{self, converse, eventstream, invoke};
use sidetrack_dialects::Dialect;

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
}

const ITERATIONS: usize = 10_000;

/// JSON-ish fragments, so random documents reach past the first byte of the parsers.
const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"messages\"",
    "\"role\"",
    "\"user\"",
    "\"assistant\"",
    "\"content\"",
    "\"text\"",
    "\"hi\"",
    "\"image\"",
    "\"format\"",
    "\"png\"",
    "\"source\"",
    "\"bytes\"",
    "\"toolUse\"",
    "\"toolUseId\"",
    "\"name\"",
    "\"input\"",
    "\"toolResult\"",
    "\"json\"",
    "\"status\"",
    "\"error\"",
    "\"system\"",
    "\"inferenceConfig\"",
    "\"maxTokens\"",
    "\"toolConfig\"",
    "\"tools\"",
    "\"toolSpec\"",
    "\"inputSchema\"",
    "\"toolChoice\"",
    "\"auto\"",
    "\"any\"",
    "\"tool\"",
    "\"max_tokens\"",
    "\"type\"",
    "\"tool_use\"",
    "\"tool_result\"",
    "\"tool_use_id\"",
    "\"anthropic_version\"",
    "\"output\"",
    "\"message\"",
    "\"stopReason\"",
    "\"usage\"",
    "\"inputTokens\"",
    "1",
    "-1",
    "1e400",
    "0.5",
    "null",
    "true",
    "\"\\ud800\"",
    "\"contentBlockIndex\"",
    "\"delta\"",
    "\"stop_reason\"",
];

fn json_soup(rng: &mut SplitMix) -> Vec<u8> {
    let n = rng.below(40);
    let mut out = Vec::new();
    for _ in 0..n {
        out.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
    }
    out
}

fn random_body(rng: &mut SplitMix) -> Vec<u8> {
    if rng.below(2) == 0 {
        rng.bytes(256)
    } else {
        json_soup(rng)
    }
}

/// A valid frame sequence with random event types and payloads, then a few random byte flips.
fn frame_soup(rng: &mut SplitMix) -> Vec<u8> {
    const TYPES: &[&str] = &[
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "chunk",
        "unknownThing",
    ];
    let mut out = Vec::new();
    for _ in 0..rng.below(6) {
        let payload = random_body(rng);
        if rng.below(8) == 0 {
            out.extend_from_slice(&eventstream::exception_frame(
                "throttlingException",
                &String::from_utf8_lossy(&payload),
            ));
        } else {
            out.extend_from_slice(&eventstream::event_frame(
                TYPES[rng.below(TYPES.len())],
                &payload,
            ));
        }
    }
    if !out.is_empty() && rng.below(2) == 0 {
        for _ in 0..=rng.below(3) {
            let i = rng.below(out.len());
            out[i] = rng.next() as u8;
        }
    }
    out
}

fn pushed_in_pieces<T>(rng: &mut SplitMix, data: &[u8], mut push: impl FnMut(&[u8]) -> T) {
    let step = rng.below(32) + 1;
    for piece in data.chunks(step) {
        push(piece);
    }
}

#[test]
fn random_bytes_never_panic_the_frame_decoder() {
    let mut rng = SplitMix(1);
    for _ in 0..ITERATIONS {
        let data = if rng.below(2) == 0 {
            rng.bytes(512)
        } else {
            frame_soup(&mut rng)
        };
        let mut d = eventstream::FrameDecoder::new();
        pushed_in_pieces(&mut rng, &data, |p| d.push(p));
    }
}

#[test]
fn random_bytes_never_panic_the_stream_decoders() {
    let mut rng = SplitMix(2);
    for _ in 0..ITERATIONS {
        let data = if rng.below(4) == 0 {
            rng.bytes(512)
        } else {
            frame_soup(&mut rng)
        };
        let mut c = converse::StreamDecoder::new();
        let mut ce = converse::StreamEncoder::new("id", "m");
        pushed_in_pieces(&mut rng, &data, |p| {
            for ev in c.push(p) {
                ce.encode(&ev);
            }
        });
        let mut i = invoke::StreamDecoder::new();
        let mut ie = invoke::StreamEncoder::new("id", "m");
        pushed_in_pieces(&mut rng, &data, |p| {
            for ev in i.push(p) {
                ie.encode(&ev);
            }
        });
    }
}

#[test]
fn random_bodies_never_panic_the_request_and_response_parsers() {
    let mut rng = SplitMix(3);
    for _ in 0..ITERATIONS {
        let body = random_body(&mut rng);
        for dialect in [Dialect::BedrockConverse, Dialect::BedrockInvoke] {
            let Ok(p) = bedrock::parse_request(dialect, "m", Bytes::from(body.clone()), false)
            else {
                continue;
            };
            if dialect == Dialect::BedrockConverse {
                if let Ok(req) = converse::to_canonical(&p) {
                    let _ = converse::request_body(&req);
                }
            } else if let Ok(req) = invoke::to_canonical(&p) {
                let _ = invoke::request_body(&req);
            }
        }
        if let Ok(r) = converse::parse_response(&body) {
            converse::render_response(&r);
        }
        if let Ok(r) = invoke::parse_response(&body) {
            invoke::render_response(&r);
        }
        let _ = converse::response_usage(&body);
        let _ = invoke::response_usage(&body);
        let text = String::from_utf8_lossy(&body);
        let _ = converse::parse_error(400, Some(&text), &body);
        let _ = converse::parse_error(400, None, &body);
        let _ = bedrock::decode_model_id(&text);
        assert_eq!(
            bedrock::decode_model_id(&bedrock::encode_model_id(&text)).as_deref(),
            Some(&*text)
        );
    }
}
