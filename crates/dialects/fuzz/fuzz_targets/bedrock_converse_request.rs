//! Converse caller bodies: parse_request, to_canonical, and re-rendering what parsed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sidetrack_dialects::bedrock::{self, converse};
use sidetrack_dialects::Dialect;

fuzz_target!(|data: &[u8]| {
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(p) = bedrock::parse_request(Dialect::BedrockConverse, "m", body, false) {
        if let Ok(req) = converse::to_canonical(&p) {
            let _ = converse::request_body(&req);
        }
    }
    if let Ok(resp) = converse::parse_response(data) {
        let _ = converse::render_response(&resp);
    }
    let _ = converse::parse_error(400, None, data);
});
