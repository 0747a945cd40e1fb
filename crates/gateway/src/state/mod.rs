//! Shared state: everything the gateway keeps about destinations and principals across requests,
//! in memory and — with `state.redis` — shared with the other replicas (SPEC §10).
//!
//! - [`breakers`]: per-destination health — the breaker, EWMAs, counters — and keeping it in step
//!   with the other replicas (pushed transitions, periodic resync).
//! - [`limits`]: per-principal rate limits (`auth.keys[].limits`).
//! - [`redis`]: the Redis backend both use (a time budget per call, fail-open, `state_backend_up`).
//! - [`idempotency`]: `Idempotency-Key` — in-flight joining and replay of a key's answer.
//! - [`clock`]: the clock breakers read (a manual one in tests).
//!
//! - [`store`]: the response store (SPEC §12): complete answers, LRU in memory.
//! - [`vectors`]: the vector index of semantic lookup (SPEC §12).

pub mod breakers;
pub mod clock;
pub mod idempotency;
pub mod limits;
pub mod redis;
pub mod store;
pub mod vectors;

pub use breakers::{Admit, DestHealth, Health, ProbeGuard, Verdict};
pub use clock::Clock;
