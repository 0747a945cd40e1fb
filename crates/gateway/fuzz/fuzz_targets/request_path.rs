//! A data-plane path: classified without panic, the classification rebuilds the path, and a
//! Bedrock model id decodes and re-encodes to itself (checks::request_path).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::request_path(data));
