//! OpenAI chat (`/v1/chat/completions`) provider streams: `StreamDecoder::push` fed in pieces whose size is the first input
//! byte, every decoded event re-encoded by every dialect's encoder, and the same bytes through
//! `SseDecoder` into `classify_stream_event`, `stream_event_usage` and `stream_text`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::sse::SseDecoder;
use sidetrack_dialects::translate::Encode;
use sidetrack_dialects::{openai_chat, Dialect};

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
    let mut d = openai_chat::StreamDecoder::new();
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
            let _ = openai_chat::classify_stream_event(&ev);
            let _ = openai_chat::stream_event_usage(&ev);
        }
    }
    let _ = openai_chat::stream_text(&String::from_utf8_lossy(rest));
});
