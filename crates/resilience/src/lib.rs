//! Pure resilience policy for sidetrack.
//!
//! Nothing here does I/O or knows about HTTP bodies: the engine classifies an attempt once into an
//! [`Outcome`], and every consumer — fallback triggers, (later) breakers, metrics, the routing log —
//! reads that value instead of looking at the response again.

mod outcome;
mod triggers;

pub use outcome::{ErrorKind, Outcome};
pub use triggers::{StatusMatcher, TriggerError, Triggers};
