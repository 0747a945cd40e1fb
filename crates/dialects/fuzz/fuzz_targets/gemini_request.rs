//! Gemini (`:generateContent`) caller bodies: `Dialect::parse_request` with a path model,
//! `to_canonical`, and rendering what parsed into every dialect.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
    let body = bytes::Bytes::copy_from_slice(data);
    let Ok(p) = Dialect::Gemini.parse_request(body, Some("gemini-2.5-flash"), false) else {
        return;
    };
    if let Ok(req) = gemini::to_canonical(&p) {
        for d in ALL {
            let _ = d.request_body(&req);
        }
    }
});
