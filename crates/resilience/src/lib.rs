//! Pure resilience policy for sidetrack.
//!
//! Nothing here does I/O or knows about HTTP bodies: the engine classifies an attempt once into an
//! [`Outcome`], and every consumer — fallback triggers, breakers, metrics, the routing log —
//! reads that value instead of looking at the response again.

mod breaker;
mod class;
mod condition;
mod outcome;
pub mod retry;
mod retry_after;
mod triggers;
pub mod walk;

pub use breaker::{
    Admission, Breaker, BreakerConfig, BreakerState, Probe, SharedBreaker, SharedKind, Transition,
    TripReason, HEALTH_ALPHA, HEALTH_MAX,
};
pub use class::ErrorClass;
pub use condition::{ConditionInput, UnhealthyCondition};
pub use outcome::{ErrorKind, Outcome};
pub use retry_after::{
    parse_go_duration, parse_http_date, parse_millis, parse_retry_after, parse_rfc3339,
    parse_seconds,
};
pub use triggers::{StatusMatcher, TriggerError, TriggerName, Triggers};
