//! Event-stream framing: arbitrary bytes, pushed in pieces whose sizes come from the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::bedrock::eventstream::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let mut d = FrameDecoder::new();
    for piece in rest.chunks(usize::from(step).max(1)) {
        if d.push(piece).is_err() {
            break;
        }
    }
});
