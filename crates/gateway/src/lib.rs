//! The sidetrack gateway. Phases of one request (SPEC §5.1) and where they live:
//!
//! | phase | module |
//! |---|---|
//! | accept, dialect (by path), admit, parse | [`server`] |
//! | authenticate | [`auth`] |
//! | resolve route | [`routing`] |
//! | walk: pick → translate → attempt → classify → return or advance | [`engine`], [`providers`] |
//! | breaker, pick (P2C), record health | [`health`], [`engine`] |
//! | commit, stream | [`server`] (`respond`), [`engine::relay`] |
//! | admin plane: destinations, metrics, dashboard | [`admin`] |
//! | finish: routing log | [`observe`] |

pub mod admin;
pub mod auth;
pub mod engine;
pub mod explain;
pub mod glob;
pub mod health;
pub mod limits;
pub mod observe;
pub mod providers;
pub mod routing;
pub mod server;

pub use health::Clock;
pub use observe::RoutingLog;
pub use server::{start, GatewayHandle, GatewayOptions, ReloadFn};
