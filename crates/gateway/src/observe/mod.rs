//! Phase "finish": the routing log (SPEC §7.1). Metrics and traces join here in later issues.

pub mod routing_log;

pub use routing_log::{AttemptRecord, RoutingLog, RoutingRecord, ServedBy, SkipRecord, UsageRecord};
