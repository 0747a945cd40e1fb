//! OpenAI chat (`/v1/chat/completions`) caller bodies: `Dialect::parse_request` (`ParsedRequest::parse_json_top`), the model
//! rewrite, `to_canonical`, and rendering what parsed into every dialect.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
    let body = bytes::Bytes::copy_from_slice(data);
    let Ok(p) = Dialect::OpenAiChat.parse_request(body, None, false) else {
        return;
    };
    let _ = p.body_with_model("other-model");
    if let Ok(req) = openai_chat::to_canonical(&p) {
        for d in ALL {
            let _ = d.request_body(&req);
        }
    }
});
