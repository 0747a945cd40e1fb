//! Phase "finish": the routing log (SPEC §7.1), metrics (SPEC §7.2) and traces (SPEC §7.3).
//! docs/observability.md describes all three for operators.

pub mod metrics;
pub mod routing_log;
pub mod trace;

pub use routing_log::{
    AttemptRecord, RequestId, RequestOutcome, RoutingLog, RoutingRecord, ServedBy, SkipRecord,
    UsageRecord,
};
pub use trace::Traces;

/// Milliseconds with microsecond precision, as every duration in the routing log is written.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
