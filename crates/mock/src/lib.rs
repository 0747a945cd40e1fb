//! The mock LLM provider (SPEC §9): a real HTTP server whose behaviour is scripted per model name —
//! healthy, erroring, rate-limited, stalled, dying mid-stream, failing with an in-stream error,
//! or flaky with a seeded failure rate — and changeable at runtime.
//!
//! Used in-process by tests and `sidetrack demo` ([`MockServer`]) and as `sidetrack mock` ([`run`]).
//!
//! Layout, one job per file:
//! - [`config`]: [`MockConfig`] and [`Behaviour`].
//! - [`engine`]: behaviour + request facts + PRNG draw → [`engine::Decision`] (pure).
//! - [`dialect`]: one module per wire format with the same functions (`parse_request`,
//!   `render_success`, `render_stream`, `render_error`).
//! - [`body`]: response bodies and stream timing (pauses, mid-body kills).
//! - `state`: behaviours, stats, last requests; `handler`: routing and the control API;
//!   `server`: listeners and connections.
//!
//! Control API on every listener: `GET /_mock/stats`, `POST /_mock/models/{name}`,
//! `POST /_mock/reset`, `POST /_mock/token` (see docs/mock.md).

pub mod body;
pub mod config;
pub mod dialect;
pub mod engine;
pub mod google_token;
mod handler;
pub mod prng;
mod server;
mod state;

pub use config::{
    Behaviour, ErrorConfig, Hostile, ListenerConfig, MockConfig, ToolCallConfig, UsageConfig,
};
pub use google_token::TokenSettings;
pub use server::MockServer;

/// Runs the mock provider until Ctrl-C (`sidetrack mock`).
pub async fn run(config: MockConfig) -> std::io::Result<()> {
    let server = MockServer::start(config).await?;
    for addr in server.addrs() {
        tracing::info!(%addr, "mock provider listening");
    }
    tokio::signal::ctrl_c().await?;
    tracing::info!("mock provider shutting down");
    server.shutdown().await;
    Ok(())
}
