//! InvokeModel (Anthropic-on-Bedrock) caller bodies: parse_request, to_canonical, re-rendering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::bedrock::{self, invoke};
use sidetrack_dialects::Dialect;

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(p) = bedrock::parse_request(Dialect::BedrockInvoke, "m", body, false) {
        if let Ok(req) = invoke::to_canonical(&p) {
            let _ = invoke::request_body(&req);
        }
    }
    let _ = invoke::parse_response(data);
});
