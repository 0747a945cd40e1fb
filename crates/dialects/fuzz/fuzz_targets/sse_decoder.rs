//! The SSE decoder on arbitrary bytes pushed in pieces whose size is the first input byte: no
//! panic, the same events as one push of the whole input, the same leftover, and every event
//! classified by each SSE dialect.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::sse::SseDecoder;
use sidetrack_dialects::{anthropic_messages, openai_chat, openai_responses};

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let mut split = SseDecoder::new();
    let mut got = Vec::new();
    for piece in rest.chunks(usize::from(step).max(1)) {
        split.push(piece);
        got.extend(std::iter::from_fn(|| split.next_event()));
    }
    let mut whole = SseDecoder::new();
    whole.push(rest);
    let want: Vec<_> = std::iter::from_fn(|| whole.next_event()).collect();
    assert_eq!(got, want, "events depend on how the input was split");
    assert_eq!(split.buffered_len(), whole.buffered_len());
    for ev in &got {
        let _ = openai_chat::classify_stream_event(ev);
        let _ = openai_chat::stream_event_usage(ev);
        let _ = openai_responses::classify_stream_event(ev);
        let _ = anthropic_messages::classify_stream_event(ev);
    }
});
