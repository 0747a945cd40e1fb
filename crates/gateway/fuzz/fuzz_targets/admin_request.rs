//! The admin plane's cross-site check over arbitrary method, Host, Origin and content type: no
//! panic, and nothing foreign passes (checks::admin_request).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::admin_request(data));
