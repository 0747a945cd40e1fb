//! The sidetrack gateway. Phases of one request (SPEC §5.1) and where they live:
//!
//! | phase | module |
//! |---|---|
//! | accept, dialect (by path), admit, parse | [`server`] |
//! | authenticate | [`auth`] |
//! | resolve route | [`routing`] |
//! | walk: pick → translate → attempt → classify → return or advance | [`engine`], [`providers`] |
//! | commit, stream | [`server`] (`respond`), [`engine::relay`] |
//! | finish: routing log | [`observe`] |

pub mod auth;
pub mod engine;
pub mod explain;
pub mod glob;
pub mod observe;
pub mod providers;
pub mod routing;
pub mod server;

pub use observe::RoutingLog;
pub use server::{start, GatewayHandle};
