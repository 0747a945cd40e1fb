//! Phase "walk the chain" (SPEC §5.3): for each hop — eligibility → breaker → pick destination →
//! translate → attempt → classify → record health → return or advance. The only retry loop in
//! sidetrack.

pub mod attempt;
mod body;
mod commit;
pub mod pipe;
pub mod relay;
mod send;
mod translate;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sidetrack_config::{BreakerMode, StreamCommit};
use sidetrack_dialects::ParsedRequest;
use sidetrack_resilience::walk::{self, Admitted, Ineligible, Skip, Standing, Step};
use sidetrack_resilience::{ConditionInput, ErrorKind, Outcome, UnhealthyCondition};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::observe::metrics::Metrics;
use crate::observe::{ms, AttemptRecord, SkipRecord};
use crate::providers::{self, Upstreams};
use crate::routing::{Dest, Hop, Picker, Plan};
use crate::state::{Admit, DestHealth, Health, ProbeGuard, Verdict};
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
    pub target: Arc<str>,
    pub model: Arc<str>,
    pub outcome: Outcome,
    /// True when the outcome matched the hop's triggers (the chain ran out).
    pub fired: bool,
    /// `None` when the outcome is a transport error or UNROUTABLE: the gateway renders the error.
    pub upstream: Option<Upstream>,
    /// The destination's health, so a failure after commit is counted against it.
    pub health: Arc<DestHealth>,
}

pub struct WalkInput<'a, 'p> {
    pub plan: &'a Plan<'p>,
    pub request: &'a ParsedRequest,
    pub upstreams: &'a Upstreams,
    pub deadline: Instant,
    pub stream_commit: StreamCommit,
    /// What an upstream answer may make the gateway hold (SPEC §14).
    pub bounds: attempt::Bounds,
    pub picker: &'a Picker,
    pub health: &'a Health,
    pub metrics: &'a Metrics,
    /// The caller's request headers (a few are forwarded, e.g. `anthropic-version`).
    pub caller_headers: &'a http::HeaderMap,
    /// The gateway's request id (names translated responses).
    pub request_id: &'a str,
}

/// A destination chosen for an attempt, with how it was admitted.
struct Chosen<'p, 'a> {
    dest: &'p Dest<'a>,
    health: Arc<DestHealth>,
    probe: Option<ProbeGuard>,
    /// How it was admitted (the routing log's `breaker`).
    admitted: Admitted,
}

/// A skip on one hop: the member's position, why, and for an untranslatable request, what.
type SkipNote = (usize, Skip, Option<String>);

/// Phase "eligibility": can this destination carry the request, by its declared `capabilities`?
fn ineligible(dest: &Dest<'_>, req: &ParsedRequest) -> Option<Ineligible> {
    let caps = &dest.target.capabilities;
    walk::ineligible(
        walk::Needs {
            tools: req.features.tools,
            json_schema: req.features.json_schema,
            estimated_prompt_tokens: req.features.estimated_prompt_tokens,
        },
        walk::Capabilities {
            tools: caps.tools,
            json_schema: caps.json_schema,
            context_window: caps.context_window,
        },
    )
}

/// Phases "breaker" and "pick destination" for one hop, by the rules in
/// [`sidetrack_resilience::walk`]: each member's standing, power of two choices among the
/// candidates, and — when nothing is admissible and this is the last hop that could be used — the
/// member whose breaker reopens soonest. Admission itself (taking a half-open probe slot) happens
/// here, against the shared breaker: a member that lost its probe slot to another request since
/// its standing was read is treated as open.
fn choose<'p, 'a>(
    hop: &'p Hop<'a>,
    input: &WalkInput<'_, '_>,
    last_remaining: bool,
    skipped: &mut Vec<SkipNote>,
) -> Option<Chosen<'p, 'a>> {
    let health: SmallVec<[Arc<DestHealth>; 2]> = hop
        .destinations
        .iter()
        .map(|d| input.health.get(&d.target.name, &d.model))
        .collect();
    let respect_breakers = input.plan.breaker_mode == BreakerMode::Enabled;
    let mut candidates: SmallVec<[usize; 4]> = SmallVec::new();
    let mut open: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, h) in health.iter().enumerate() {
        let member = walk::Member {
            disabled: h.is_disabled(),
            ineligible: ineligible(&hop.destinations[i], input.request),
            admissible: !respect_breakers || input.health.can_admit(h),
        };
        match walk::standing(member, respect_breakers) {
            Standing::Candidate => candidates.push(i),
            Standing::Open => open.push(i),
            Standing::Skipped(why) => skipped.push((i, why, None)),
        }
    }
    let chosen = |i: usize, probe: Option<ProbeGuard>, admitted: Admitted| Chosen {
        dest: &hop.destinations[i],
        health: health[i].clone(),
        probe,
        admitted,
    };
    while !candidates.is_empty() {
        let scores: SmallVec<[f64; 4]> = candidates.iter().map(|&i| health[i].score()).collect();
        let pos = walk::pick(&scores, |n| input.picker.below(n)).unwrap_or(0);
        let i = candidates[pos];
        if !respect_breakers {
            let state = input.health.state(&health[i]);
            return Some(chosen(i, None, Admitted::Unguarded(state)));
        }
        match input.health.admit(&health[i]) {
            Admit::Allowed => return Some(chosen(i, None, Admitted::Closed)),
            Admit::Probe(p) => return Some(chosen(i, Some(p), Admitted::Probe)),
            // Another request took the probe slot meanwhile.
            Admit::Skip => {
                candidates.remove(pos);
                open.push(i);
            }
        }
    }
    let reopening: SmallVec<[_; 4]> = open.iter().map(|&i| health[i].open_until()).collect();
    let forced = walk::forced(last_remaining, &reopening).map(|pos| open.remove(pos));
    for o in open {
        skipped.push((o, Skip::BreakerOpen, None));
    }
    // Forced attempts outside the probe slot: counted, but they do not move a half-open breaker.
    forced.map(|i| {
        let state = input.health.state(&health[i]);
        chosen(i, None, Admitted::Forced(state))
    })
}

fn record_skip(
    out: &mut WalkOutput,
    input: &WalkInput<'_, '_>,
    hop: &Hop<'_>,
    d: &Dest<'_>,
    note: (Skip, Option<String>),
) {
    let (why, detail) = note;
    let health = input.health.get(&d.target.name, &d.model);
    health.note_skip();
    input.metrics.skip(&d.target.name, &d.model, why);
    out.skipped.push(SkipRecord {
        hop: hop.index,
        target: health.target.clone(),
        model: health.model.clone(),
        why,
        detail,
    });
}

/// Is there a later hop with at least one member that is neither switched off nor ineligible?
fn later_hop_usable(hops: &[Hop<'_>], health: &Health, req: &ParsedRequest) -> bool {
    !walk::last_remaining(hops.iter().flat_map(|h| &h.destinations).map(|d| {
        ineligible(d, req).is_none()
            && !health
                .find(&d.target.name, &d.model)
                .is_some_and(|x| x.is_disabled())
    }))
}

/// The chain walk. A plain fn returning an `async` block, like [`attempt::run`] (one copy of
/// the input in the future, not two).
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
pub fn walk<'a, 'p>(input: WalkInput<'a, 'p>) -> impl Future<Output = WalkOutput> + use<'a, 'p> {
    async move {
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
            let last_remaining = !later_hop_usable(&hops[pos + 1..], input.health, input.request);
            let mut skips = Vec::new();
            let chosen = choose(hop, &input, last_remaining, &mut skips);
            for (i, why, detail) in skips {
                record_skip(&mut out, &input, hop, &hop.destinations[i], (why, detail));
            }
            let Some(Chosen {
                dest,
                health,
                probe,
                admitted,
            }) = chosen
            else {
                continue;
            };
            let is_last = pos + 1 == hops.len();

            let span_start = input.metrics.traces().start(); // None (and nothing else) when off
            let in_flight = health.in_flight();
            let mut attempt = match attempt_one(dest, hop, &input).await {
                Ok(a) => a,
                Err(untranslatable) => {
                    drop(probe); // releases a probe slot it may hold: no verdict
                    let why = Skip::Ineligible(Ineligible::Translation);
                    record_skip(&mut out, &input, hop, dest, (why, Some(untranslatable)));
                    continue;
                }
            };
            drop(in_flight);

            let (fired, step) = walk::step(attempt.outcome, &hop.policy.triggers, is_last);
            let chosen = (dest, &health, admitted);
            let rec = record_attempt(&input, hop, chosen, &mut attempt, fired, probe);
            if let Some(start) = span_start {
                // The attempt span ends here: the attempt is classified and recorded.
                let traces = input.metrics.traces();
                traces.attempt(start, input.request_id, dest.target, &rec);
            }
            out.attempts.push(rec);
            let upstream = if fired {
                attempt.response.map(Upstream::into_buffered)
            } else {
                attempt.response
            };
            out.returned = Some(Returned {
                hop: hop.index,
                target: health.target.clone(),
                model: health.model.clone(),
                outcome: attempt.outcome,
                fired,
                upstream,
                health,
            });
            if step == Step::Return {
                break;
            }
        }
        out
    }
}

/// Phase "record health" and the attempt's record: the verdict goes to the destination's breaker,
/// the outcome to its metrics, and the routing log gets the attempt.
fn record_attempt(
    input: &WalkInput<'_, '_>,
    hop: &Hop<'_>,
    (dest, health, admitted): (&Dest<'_>, &Arc<DestHealth>, Admitted),
    attempt: &mut attempt::Attempt,
    fired: bool,
    probe: Option<ProbeGuard>,
) -> AttemptRecord {
    let condition = input.health.condition(&dest.target.name);
    let verdict = verdict(attempt, fired, condition.as_deref());
    input
        .health
        .record(health, verdict, probe, attempt.first_byte);
    health
        .metrics
        .attempt(attempt.outcome, attempt.duration, attempt.first_byte);
    AttemptRecord {
        hop: hop.index,
        target: health.target.clone(),
        model: health.model.clone(),
        outcome: attempt.outcome,
        status: attempt.outcome.status(),
        error_kind: attempt.outcome.error_kind().map(ErrorKind::as_str),
        detail: attempt.detail.take(),
        duration_ms: ms(attempt.duration),
        first_byte_ms: attempt.first_byte.map(ms),
        breaker: walk::attempt_breaker_label(admitted),
    }
}

/// Phase "record health": what the classified outcome means for the destination (SPEC §5.5), by
/// [`walk::verdict`]. The `unhealthyCondition` is evaluated here over the kept answer head; the
/// retry delay was read when the attempt was classified.
fn verdict(
    attempt: &attempt::Attempt,
    fired: bool,
    condition: Option<&UnhealthyCondition>,
) -> Verdict {
    let headers = attempt.response.as_ref().map(|r| &r.parts().headers);
    let condition = condition.map(|c| {
        c.evaluate(&condition_input(attempt, headers)).map_err(|e| {
            tracing::warn!("unhealthyCondition: {e}; using the hop's triggers instead");
        })
    });
    walk::verdict(attempt.outcome, fired, condition, attempt.retry_after)
}

fn condition_input<'a>(
    attempt: &attempt::Attempt,
    headers: Option<&'a http::HeaderMap>,
) -> ConditionInput<'a> {
    ConditionInput {
        code: attempt.outcome.status(),
        headers: headers
            .map(|h| {
                h.iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
                    .collect()
            })
            .unwrap_or_default(),
        error: attempt.outcome.error_kind().map(ErrorKind::as_str),
    }
}

/// Phases "translate" and "attempt" for one destination. A request the destination's format
/// cannot carry is an `Ineligible` skip, not an attempt. The target's `models` globs are not
/// consulted: a rule's destination or a pin is sent its model whatever they list (SPEC §5.2).
async fn attempt_one(
    dest: &Dest<'_>,
    hop: &Hop<'_>,
    input: &WalkInput<'_, '_>,
) -> Result<attempt::Attempt, String> {
    let format = providers::format_for(dest.target.provider, input.request.dialect);
    let mut body = translate::request_body(format, input.request, &dest.model).map_err(|e| e.0)?;
    // Token limits and usage records need the usage of every stream: an OpenAI chat upstream is
    // asked for it, and it is kept from a caller that did not ask (SPEC §14).
    let chat = sidetrack_dialects::Dialect::OpenAiChat;
    let strip_usage = format == chat
        && input.request.dialect == chat
        && input.request.stream
        && input.request.stream_usage != Some(true);
    if strip_usage {
        body = input.request.asking_stream_usage(body);
    }
    // The spec is built in a block that ends before the await: the attempt's future then keeps
    // the running attempt only, not also the request's build result or the spec.
    Ok({
        let request = match providers::request(providers::Outbound {
            target: dest.target,
            endpoint: input.upstreams.endpoint(dest.target_index),
            model: &dest.model,
            format,
            body,
            stream: input.request.stream,
            caller_headers: input.caller_headers,
        }) {
            Ok(r) => r,
            Err(e) => {
                return Ok(attempt::Attempt {
                    outcome: Outcome::Error(ErrorKind::Unroutable),
                    retry_after: None,
                    class: None,
                    detail: Some(e.0),
                    duration: Duration::ZERO,
                    first_byte: None,
                    response: None,
                })
            }
        };
        let client = input.upstreams.client(dest.target_index);
        attempt::run(
            client,
            request,
            attempt::AttemptSpec {
                upstream: format,
                caller: input.request.dialect,
                response_id: input.request_id,
                model: &dest.model,
                first_byte_timeout: hop.policy.first_byte_timeout,
                // SPEC §11: a first-token timeout applies to streamed requests only.
                first_token_timeout: hop
                    .policy
                    .first_token_timeout
                    .filter(|_| input.request.stream),
                stream_idle_timeout: hop.policy.stream_idle_timeout,
                deadline: input.deadline,
                stream_commit: input.stream_commit,
                bounds: input.bounds,
                strip_usage,
                caller_usage: input.request.stream_usage == Some(true),
            },
        )
    }
    .await)
}
