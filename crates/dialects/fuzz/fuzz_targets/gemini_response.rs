//! Gemini provider bodies: `parse_response` (rendered into every dialect), `response_usage`
//! and `parse_error`.
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
    if let Ok(resp) = gemini::parse_response(data) {
        for d in ALL {
            let _ = d.render_response(&resp);
        }
    }
    let _ = gemini::response_usage(data);
    for status in [200, 400, 429, 500, 503] {
        let _ = gemini::parse_error(status, data);
    }
});
