//! Gemini provider streams (`:streamGenerateContent?alt=sse`): `StreamDecoder::push` fed in
//! pieces whose size is the first input byte, then `finish`, every decoded event re-encoded by
//! every dialect's encoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::translate::Encode;
use sidetrack_dialects::{gemini, Dialect};

const ALL: [Dialect; 6] = [
    Dialect::OpenAiChat,
    Dialect::OpenAiResponses,
    Dialect::AnthropicMessages,
    Dialect::BedrockInvoke,
    Dialect::BedrockConverse,
    Dialect::Gemini,
];

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let mut d = gemini::StreamDecoder::new();
    let mut encoders: Vec<Box<dyn Encode>> =
        ALL.iter().map(|d| d.stream_encoder("id", "m", true)).collect();
    let mut events = Vec::new();
    for piece in rest.chunks(step) {
        events.extend(d.push(piece));
    }
    events.extend(d.finish());
    for ev in events {
        for e in &mut encoders {
            let _ = e.encode(&ev);
        }
    }
});
