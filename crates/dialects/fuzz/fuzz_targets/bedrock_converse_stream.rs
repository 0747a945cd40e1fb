//! ConverseStream decoding: arbitrary bytes in pieces, and decoded events re-encoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::bedrock::converse;

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    let mut d = converse::StreamDecoder::new();
    let mut enc = converse::StreamEncoder::new("id", "m");
    for piece in rest.chunks(usize::from(step).max(1)) {
        for ev in d.push(piece) {
            let _ = enc.encode(&ev);
        }
    }
});
