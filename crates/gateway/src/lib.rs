//! The sidetrack gateway. Phases of one request (SPEC §5.1) and where they live:
//!
//! | phase | module |
//! |---|---|
//! | accept, dialect (by path), admit, parse | [`server`] |
//! | authenticate | [`auth`] |
//! | resolve route | [`routing`] |
//! | walk: eligibility → breaker → pick → translate → send → classify → return or advance | [`engine`] (rules: `sidetrack_resilience::walk`), [`providers`] |
//! | commit decision | [`engine`] (`commit`) |
//! | commit, stream | [`server`] (`respond`), [`engine::relay`] |
//! | finish: usage, limits, breakers after the end, routing log, metrics | [`server`] (`finish`), [`observe`] |
//! | shared state: breakers, rate limits, Redis | [`state`] |
//! | admin plane: destinations, metrics, dashboard | [`admin`] |

pub mod admin;
pub mod auth;
pub mod engine;
pub mod explain;
pub mod glob;
pub mod observe;
pub mod providers;
pub mod routing;
pub mod server;
pub mod state;

pub use observe::RoutingLog;
pub use server::{start, GatewayHandle, GatewayOptions, ReloadFn};
pub use state::Clock;
