//! Arbitrary bytes as a client's side of one data-plane connection (HTTP/1 heads, bodies,
//! pipelining, an HTTP/2 preface): the gateway's connection service neither panics nor keeps the
//! connection past its bounds (checks::request_head). One gateway (upstreams refuse connections)
//! serves every input on a single-threaded runtime.
#![no_main]

#[path = "../checks.rs"]
mod checks;

use std::sync::OnceLock;

fn harness() -> &'static (tokio::runtime::Runtime, sidetrack_gateway::GatewayHandle) {
    static HARNESS: OnceLock<(tokio::runtime::Runtime, sidetrack_gateway::GatewayHandle)> =
        OnceLock::new();
    HARNESS.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let gw = rt.block_on(checks::gateway());
        (rt, gw)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (rt, gw) = harness();
    let _ = rt.block_on(checks::request_head(gw, data));
});
