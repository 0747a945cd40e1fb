//! OpenAI Responses (`/v1/responses`) provider streams: `StreamDecoder::push` fed in pieces whose size is the first input
//! byte, every decoded event re-encoded by every dialect's encoder, and the same bytes through
//! `SseDecoder` into `classify_stream_event`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::sse::SseDecoder;
use sidetrack_dialects::translate::Encode;
use sidetrack_dialects::{openai_responses, Dialect};

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
    let mut d = openai_responses::StreamDecoder::new();
    let mut encoders: Vec<Box<dyn Encode>> =
        ALL.iter().map(|d| d.stream_encoder("id", "m", false)).collect();
    let mut sse = SseDecoder::new();
    for piece in rest.chunks(step) {
        for ev in d.push(piece) {
            for e in &mut encoders {
                let _ = e.encode(&ev);
            }
        }
        sse.push(piece);
        while let Some(ev) = sse.next_event() {
            let _ = openai_responses::classify_stream_event(&ev);
        }
    }
});
