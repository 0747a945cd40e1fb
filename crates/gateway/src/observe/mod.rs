//! Phase "finish": the routing log (SPEC §7.1). Metrics and traces join here in later issues.

pub mod metrics;
pub mod routing_log;

pub use routing_log::{
    AttemptRecord, RoutingLog, RoutingRecord, ServedBy, SkipRecord, UsageRecord,
};

/// Milliseconds with microsecond precision, as every duration in the routing log is written.
pub fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}
