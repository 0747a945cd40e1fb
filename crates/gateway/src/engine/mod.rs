//! Phase "walk the chain" (SPEC §5.3): for each hop — eligibility → breaker → pick destination →
//! translate → attempt → classify → return or advance. The only retry loop in sidetrack.

pub mod attempt;
pub mod relay;

use std::time::Duration;

use sidetrack_config::StreamCommit;
use sidetrack_dialects::ParsedRequest;
use sidetrack_resilience::{ErrorKind, Outcome};
use tokio::time::Instant;

use crate::observe::{ms, AttemptRecord, SkipRecord};
use crate::providers::{self, Upstreams};
use crate::routing::{Dest, Picker, Plan};
pub use attempt::Upstream;

/// What the walk hands to the commit phase: the response to return (if any hop answered) and the
/// record of every attempt and skip.
pub struct WalkOutput {
    pub attempts: Vec<AttemptRecord>,
    pub skipped: Vec<SkipRecord>,
    pub returned: Option<Returned>,
}

/// The hop whose result goes back to the caller.
pub struct Returned {
    pub hop: usize,
    pub target: String,
    pub model: String,
    pub outcome: Outcome,
    /// True when the outcome matched the hop's triggers (the chain ran out).
    pub fired: bool,
    /// `None` when the outcome is a transport error or UNROUTABLE: the gateway renders the error.
    pub upstream: Option<Upstream>,
}

pub struct WalkInput<'a> {
    pub plan: &'a Plan<'a>,
    pub request: &'a ParsedRequest,
    pub upstreams: &'a Upstreams,
    pub deadline: Instant,
    pub stream_commit: StreamCommit,
    pub picker: &'a Picker,
}

/// Picks the member of a hop to attempt. Single-destination hops are the common case; priority
/// groups rotate round-robin among their members until health-aware P2C arrives with breakers.
fn pick<'p, 'a>(hop: &'p [Dest<'a>], picker: &Picker) -> Option<&'p Dest<'a>> {
    match hop.len() {
        0 => None,
        1 => hop.first(),
        n => hop.get(picker.below(n)),
    }
}

pub async fn walk(input: WalkInput<'_>) -> WalkOutput {
    let mut out = WalkOutput {
        attempts: Vec::new(),
        skipped: Vec::new(),
        returned: None,
    };
    let hops = &input.plan.hops;
    for (pos, hop) in hops.iter().enumerate() {
        if Instant::now() >= input.deadline {
            break; // requestTimeoutMilliseconds: the last response (if any) is returned
        }
        let Some(dest) = pick(&hop.destinations, input.picker) else {
            continue;
        };
        let is_last = pos + 1 == hops.len();
        let triggers = &hop.policy.triggers;

        let attempt = if !dest.target_serves_model() {
            attempt::Attempt {
                outcome: Outcome::Error(ErrorKind::Unroutable),
                detail: Some(format!(
                    "target `{}` does not list model `{}`",
                    dest.target.name, dest.model
                )),
                duration: Duration::ZERO,
                first_byte: None,
                response: None,
            }
        } else {
            match providers::build_request(dest.target, &dest.model, input.request) {
                Ok(request) => {
                    attempt::run(attempt::AttemptSpec {
                        client: input.upstreams.client(dest.target_index),
                        request,
                        provider: dest.target.provider,
                        first_byte_timeout: hop.policy.first_byte_timeout,
                        deadline: input.deadline,
                        stream_commit: input.stream_commit,
                    })
                    .await
                }
                Err(e) => attempt::Attempt {
                    outcome: Outcome::Error(ErrorKind::Unroutable),
                    detail: Some(e.0),
                    duration: Duration::ZERO,
                    first_byte: None,
                    response: None,
                },
            }
        };

        let fired = triggers.fires(&attempt.outcome);
        out.attempts.push(AttemptRecord {
            hop: hop.index,
            target: dest.target.name.clone(),
            model: dest.model.to_string(),
            outcome: attempt.outcome.label(),
            status: attempt.outcome.status(),
            error_kind: attempt.outcome.error_kind().map(ErrorKind::as_str),
            detail: attempt.detail,
            duration_ms: ms(attempt.duration),
            first_byte_ms: attempt.first_byte.map(ms),
            breaker: "CLOSED",
        });
        let upstream = if fired {
            attempt.response.map(Upstream::into_buffered)
        } else {
            attempt.response
        };
        out.returned = Some(Returned {
            hop: hop.index,
            target: dest.target.name.clone(),
            model: dest.model.to_string(),
            outcome: attempt.outcome,
            fired,
            upstream,
        });
        if !fired || is_last {
            break;
        }
    }
    out
}
