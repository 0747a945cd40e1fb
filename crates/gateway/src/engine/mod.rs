//! Phase "walk the chain" (SPEC §5.3): for each hop — eligibility → breaker → pick destination →
//! translate → attempt → classify → record health → return or advance. The only retry loop in
//! sidetrack.

pub mod attempt;
mod body;
mod commit;
mod hedge;
pub mod pipe;
pub mod relay;
mod send;
mod translate;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Full;
use sidetrack_config::{BreakerMode, RetryBudgetPolicy, StreamCommit};
use sidetrack_dialects::{Dialect, ParsedRequest};
use sidetrack_resilience::retry::{self, AttemptKind, RetryDecision, RetryInputs, StoppedBy};
use sidetrack_resilience::walk::{self, Admitted, Ineligible, Skip, Standing};
use sidetrack_resilience::{ConditionInput, ErrorKind, Outcome, UnhealthyCondition};
use smallvec::SmallVec;
use tokio::time::Instant;

use crate::observe::metrics::Metrics;
use crate::observe::{ms, AttemptRecord, SkipRecord};
use crate::providers::{self, Upstreams};
use crate::routing::{Dest, Hop, Picker, Plan};
use crate::state::{Admit, DestHealth, Health, ProbeGuard, Verdict};
pub use attempt::Upstream;
pub(crate) use body::concat;

/// What the walk hands to the commit phase: the response to return (if any hop answered) and the
/// record of every attempt and skip.
#[derive(Default)]
pub struct WalkOutput {
    pub attempts: Vec<AttemptRecord>,
    pub skipped: Vec<SkipRecord>,
    pub returned: Option<Returned>,
    /// The request deadline passed before anything committed (SPEC §11: 504 `deadlineExceeded`).
    pub deadline_exceeded: bool,
    /// A hedge was started (`x-sidetrack-hedged: true`).
    pub hedged: bool,
    /// The gateway retried a hop (SPEC §6.5: its error then carries `x-should-retry: false`).
    pub retried: bool,
    /// An attempt was forced on an open breaker (the last-hop rule).
    pub forced: bool,
    /// When the walk returns no success: how long until the earliest open breaker on the route
    /// lets a request through (SPEC §6.5 `Retry-After`).
    pub earliest_reopen: Option<Duration>,
}

/// The hop whose result goes back to the caller.
pub struct Returned {
    pub hop: usize,
    pub target: Arc<str>,
    pub model: Arc<str>,
    pub outcome: Outcome,
    /// True when the outcome matched the hop's triggers (the chain ran out).
    pub fired: bool,
    /// The delay the answer asked for (`retry-after-ms`, `Retry-After`, …), if any.
    pub retry_after: Option<Duration>,
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
    /// `defaults.maxAttempts`: attempts per request, hops + retries + hedges (SPEC §11).
    pub max_attempts: u32,
    /// `defaults.retryBudget`.
    pub retry_budget: RetryBudgetPolicy,
    /// `x-sidetrack-fallback: off` (SPEC §11 Caller overrides): the primary only, no retries.
    pub fallback_off: bool,
}

/// A destination chosen for an attempt, with how it was admitted.
struct Chosen<'p, 'a> {
    /// Its position in the hop.
    index: usize,
    dest: &'p Dest<'a>,
    health: Arc<DestHealth>,
    probe: Option<ProbeGuard>,
    /// How it was admitted (the routing log's `breaker`).
    admitted: Admitted,
}

/// A skip on one hop: the member's position, why, and for an untranslatable request, what.
type SkipNote = (usize, Skip, Option<String>);

/// Phase "eligibility": can this destination carry the request, by its declared `capabilities`,
/// and enforce its guardrail (SPEC §11: only a destination sent the request in the format that
/// carried the guardrail, i.e. untranslated)?
fn ineligible(dest: &Dest<'_>, req: &ParsedRequest) -> Option<Ineligible> {
    let caps = &dest.target.capabilities;
    let guardrail = req.features.guardrail;
    walk::ineligible(
        walk::Needs {
            tools: req.features.tools,
            json_schema: req.features.json_schema,
            estimated_prompt_tokens: req.features.estimated_prompt_tokens,
            guardrail: guardrail.is_some(),
        },
        walk::Capabilities {
            tools: caps.tools,
            json_schema: caps.json_schema,
            context_window: caps.context_window,
            guardrail: walk::guardrail_carried(
                guardrail,
                providers::format_for_dest(dest.target, &dest.model, req.dialect),
            ),
        },
    )
}

/// Phases "breaker" and "pick destination" for one hop, by the rules in
/// [`sidetrack_resilience::walk`]: each member's standing, power of two choices among the
/// candidates, and — when nothing is admissible and this is the last hop that could be used — the
/// member whose breaker reopens soonest. Admission itself (taking a half-open probe slot) happens
/// here, against the shared breaker: a member that lost its probe slot to another request since
/// its standing was read is treated as open.
///
/// Within a hop (SPEC §11): members already `tried` are chosen again only for a retry (`again`)
/// once every candidate was tried; the last-hop rule applies to the hop's first choice only. A
/// member whose expected time to first byte does not fit before the deadline is
/// `INELIGIBLE:deadline`.
fn choose<'p, 'a>(
    hop: &'p Hop<'a>,
    input: &WalkInput<'_, '_>,
    (last_remaining, first_choice): (bool, bool),
    (tried, again): (&[bool], bool),
    skipped: &mut Vec<SkipNote>,
) -> Option<Chosen<'p, 'a>> {
    let health: SmallVec<[Arc<DestHealth>; 2]> = hop
        .destinations
        .iter()
        .map(|d| input.health.get(&d.target.name, &d.model))
        .collect();
    let respect_breakers = input.plan.breaker_mode == BreakerMode::Enabled;
    let remaining = retry::remaining(Instant::now().into_std(), input.deadline.into_std());
    // One reading of the breakers' clock for this choice.
    let now = input.health.now();
    let mut candidates: SmallVec<[usize; 4]> = SmallVec::new();
    let mut open: SmallVec<[usize; 4]> = SmallVec::new();
    for (i, h) in health.iter().enumerate() {
        let late = !retry::fits_deadline(remaining, h.expected_ttfb());
        let member = walk::Member {
            disabled: h.is_disabled(),
            ineligible: ineligible(&hop.destinations[i], input.request)
                .or(late.then_some(Ineligible::Deadline)),
            admissible: !respect_breakers || input.health.can_admit(h, now),
        };
        match walk::standing(member, respect_breakers) {
            Standing::Candidate => candidates.push(i),
            Standing::Open => open.push(i),
            Standing::Skipped(why) => skipped.push((i, why, None)),
        }
    }
    // Members tried already on this hop: again only for a retry once no untried one is left.
    let untried: SmallVec<[usize; 4]> = candidates
        .iter()
        .copied()
        .filter(|&i| !tried.get(i).copied().unwrap_or(false))
        .collect();
    if !untried.is_empty() || !again {
        candidates = untried;
    }
    let chosen = |i: usize, probe: Option<ProbeGuard>, admitted: Admitted| Chosen {
        index: i,
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
        match input.health.admit(&health[i], now) {
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
    let forced =
        walk::forced(last_remaining && first_choice, &reopening).map(|pos| open.remove(pos));
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
fn later_hop_usable(hops: &[Hop<'_>], input: &WalkInput<'_, '_>) -> bool {
    !walk::last_remaining(
        hops.iter()
            .flat_map(|h| &h.destinations)
            .map(|d| member_usable(d, input)),
    )
}

/// The chain walk. A plain fn returning an `async` block, like [`attempt::run`] (one copy of
/// the input in the future, not two).
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
pub fn walk<'a, 'p>(input: WalkInput<'a, 'p>) -> impl Future<Output = WalkOutput> + use<'a, 'p> {
    async move {
        let mut w = Walker {
            input: &input,
            out: WalkOutput::default(),
            attempts_made: 0,
        };
        let all = &input.plan.hops;
        // `x-sidetrack-fallback: off`: the primary hop only (and no retries, see `retry_wait`).
        let hops = if input.fallback_off {
            &all[..all.len().min(1)]
        } else {
            &all[..]
        };
        let mut pos = 0;
        while pos < hops.len() {
            if Instant::now() >= input.deadline {
                w.out.deadline_exceeded = true;
                break;
            }
            match w.hop(hops, pos).await {
                HopEnd::Next(n) => pos = n,
                HopEnd::Done => break,
            }
        }
        if w.out.returned.as_ref().is_none_or(|r| r.fired) || w.out.deadline_exceeded {
            w.out.earliest_reopen = earliest_reopen(&input);
        }
        w.out
    }
}

/// How a hop ended: go on at this hop position, or the walk is over.
enum HopEnd {
    Next(usize),
    Done,
}

/// The walk's state across hops.
struct Walker<'i, 'a, 'p> {
    input: &'i WalkInput<'a, 'p>,
    out: WalkOutput,
    /// Attempts made by the request: hops, retries and hedges (SPEC §11 Attempt cap).
    attempts_made: u32,
}

impl<'a, 'p> Walker<'_, 'a, 'p> {
    /// Walks hop `pos`: its first attempt, retries and (in a priority group) the other members,
    /// until one answer is returned, the hop is used up, or a hedge moved the walk on.
    async fn hop(&mut self, hops: &'a [Hop<'p>], pos: usize) -> HopEnd {
        let input = self.input;
        let hop = &hops[pos];
        let is_last = pos + 1 == hops.len();
        let last_remaining = !later_hop_usable(&hops[pos + 1..], input);
        let mut tried: SmallVec<[bool; 4]> = smallvec::smallvec![false; hop.destinations.len()];
        let mut kind = AttemptKind::First;
        let mut retries_made = 0u32;
        loop {
            if !retry::attempt_allowed(self.attempts_made, input.max_attempts) {
                self.stop_last(StoppedBy::MaxAttempts);
                return HopEnd::Done;
            }
            let again = kind == AttemptKind::Retry;
            let Some(chosen) = self.pick(hop, last_remaining, &tried, again) else {
                return HopEnd::Next(pos + 1);
            };
            tried[chosen.index] = true;
            let hedge_to = hop.policy.hedge.filter(|_| !is_last && !input.fallback_off);
            let run = match hedge_to {
                // Boxed: the race holds two attempts, and unboxed it would double the size of
                // every request's future, hedged or not (docs/decisions/0003-hot-path.md).
                Some(h) => {
                    let race = hedge::race(self, (hop, chosen, kind), (&hops[pos + 1], h.after));
                    Box::pin(race).await
                }
                None => self.attempt(hop, chosen, kind).await,
            };
            let fired = match run {
                Ran::Untranslatable => continue,
                // A hedged pair is settled: its answer is returned, or both hops were used.
                Ran::Settled {
                    fired,
                    hedged: true,
                } if fired && pos + 2 < hops.len() => return HopEnd::Next(pos + 2),
                Ran::Settled { hedged: true, .. } => return HopEnd::Done,
                Ran::Settled { fired, .. } => fired,
            };
            match self.after_failure(hop, fired, retries_made, &tried) {
                After::Retry(wait) => {
                    tokio::time::sleep(wait).await;
                    retries_made += 1;
                    kind = AttemptKind::Retry;
                    self.out.retried = true;
                }
                After::NextMember => kind = AttemptKind::First,
                After::LeaveHop if is_last => return HopEnd::Done,
                After::LeaveHop => return HopEnd::Next(pos + 1),
                After::Done => return HopEnd::Done,
            }
        }
    }

    /// Phases "breaker" and "pick destination" on `hop` ([`choose`]); the hop's skips are logged
    /// at its first choice.
    fn pick(
        &mut self,
        hop: &'a Hop<'p>,
        last_remaining: bool,
        tried: &[bool],
        again: bool,
    ) -> Option<Chosen<'a, 'p>> {
        let input = self.input;
        let first_choice = !tried.contains(&true);
        let mut skips = Vec::new();
        let chosen = choose(
            hop,
            input,
            (last_remaining, first_choice),
            (tried, again),
            &mut skips,
        );
        if first_choice {
            for (i, why, detail) in skips {
                let member = &hop.destinations[i];
                record_skip(&mut self.out, input, hop, member, (why, detail));
            }
        }
        if let Some(c) = &chosen {
            self.out.forced |= matches!(c.admitted, Admitted::Forced(_));
        }
        chosen
    }

    /// What follows an attempt on `hop` that did not succeed (SPEC §11): retry it, try another
    /// member of the group, leave the hop, or end the walk. `retry.on` may list what the triggers
    /// do not (e.g. 429): such an answer is retried too, and returned when it is not.
    fn after_failure(
        &mut self,
        hop: &Hop<'_>,
        fired: bool,
        retries_made: u32,
        tried: &[bool],
    ) -> After {
        let input = self.input;
        let succeeded = self
            .out
            .returned
            .as_ref()
            .is_some_and(|r| r.outcome.is_success());
        if succeeded {
            return After::Done;
        }
        if Instant::now() >= input.deadline {
            // A trigger with no time left for anything after it: the deadline ends the walk.
            self.out.deadline_exceeded = fired;
            return After::Done;
        }
        match self.retry_decision(hop, retries_made) {
            RetryDecision::Retry { after } => After::Retry(after),
            RetryDecision::Advance(stopped) if !fired => {
                if stopped != StoppedBy::NotRetryable {
                    self.stop_last(stopped);
                }
                After::Done
            }
            RetryDecision::Advance(stopped) => {
                self.stop_last(stopped);
                // A priority group tries each healthy member once before the walk leaves it.
                let untried = tried
                    .iter()
                    .zip(&hop.destinations)
                    .any(|(t, d)| !t && member_usable(d, input));
                match (stopped.ends_walk(), untried) {
                    (true, _) => After::Done,
                    (false, true) => After::NextMember,
                    (false, false) => After::LeaveHop,
                }
            }
        }
    }

    /// One attempt on `chosen`, recorded; `Ran::Settled.fired` says whether it triggered.
    async fn attempt(&mut self, hop: &Hop<'_>, chosen: Chosen<'a, 'p>, kind: AttemptKind) -> Ran {
        let input = self.input;
        let started = self.begin(&chosen, kind);
        let in_flight = chosen.health.in_flight();
        let attempt = attempt_one(chosen.dest, hop, input).await;
        drop(in_flight);
        self.finish(hop, chosen, attempt, (kind, started))
    }

    /// An attempt starts: it counts toward `maxAttempts` and the destination's retry budget.
    /// Returns the attempt span's start (when tracing is on).
    fn begin(
        &mut self,
        chosen: &Chosen<'_, '_>,
        kind: AttemptKind,
    ) -> Option<std::time::SystemTime> {
        let input = self.input;
        self.attempts_made += 1;
        // A retry took its place in the budget when it was decided; a first attempt is counted
        // when it is recorded (`Health::record`).
        if kind == AttemptKind::Retry {
            chosen.health.metrics.retry();
        }
        input.metrics.traces().start() // None (and nothing else) when off
    }

    /// A finished attempt: recorded ([`Walker::settle`]), or — when the request cannot be put in
    /// the destination's format — a skip that does not count as an attempt.
    fn finish(
        &mut self,
        hop: &Hop<'_>,
        chosen: Chosen<'a, 'p>,
        attempt: Result<attempt::Attempt, String>,
        (kind, span_start): (AttemptKind, Option<std::time::SystemTime>),
    ) -> Ran {
        let Chosen {
            dest,
            health,
            probe,
            admitted,
            ..
        } = chosen;
        match attempt {
            Ok(a) => {
                let fired = self.settle(hop, (dest, health, admitted, probe), a, kind, span_start);
                Ran::Settled {
                    fired,
                    hedged: false,
                }
            }
            Err(untranslatable) => {
                drop(probe); // releases a probe slot it may hold: no verdict
                self.attempts_made = self.attempts_made.saturating_sub(1);
                let why = Skip::Ineligible(Ineligible::Translation);
                record_skip(
                    &mut self.out,
                    self.input,
                    hop,
                    dest,
                    (why, Some(untranslatable)),
                );
                Ran::Untranslatable
            }
        }
    }

    /// Phases "classify" (the triggers) and "record health" for a finished attempt, and the
    /// answer kept as the one to return. Returns whether the outcome fired the hop's triggers.
    fn settle(
        &mut self,
        hop: &Hop<'_>,
        (dest, health, admitted, probe): (&Dest<'_>, Arc<DestHealth>, Admitted, Option<ProbeGuard>),
        mut attempt: attempt::Attempt,
        kind: AttemptKind,
        span_start: Option<std::time::SystemTime>,
    ) -> bool {
        let input = self.input;
        let (fired, _) = walk::step(attempt.outcome, attempt.class, &hop.policy.triggers, false);
        if let Some(code) = attempt.outcome.status() {
            health.metrics.upstream_response(code);
        }
        let chosen = (dest, &health, admitted);
        let rec = record_attempt(input, hop, chosen, (&mut attempt, fired, kind), probe);
        if let Some(start) = span_start {
            // The attempt span ends here: the attempt is classified and recorded.
            let traces = input.metrics.traces();
            traces.attempt(start, input.request_id, dest.target, &rec);
        }
        self.out.attempts.push(rec);
        let upstream = if fired {
            attempt.response.map(Upstream::into_buffered)
        } else {
            attempt.response
        };
        self.out.returned = Some(Returned {
            hop: hop.index,
            target: health.target.clone(),
            model: health.model.clone(),
            outcome: attempt.outcome,
            fired,
            retry_after: attempt.retry_after,
            upstream,
            health,
        });
        fired
    }

    /// The retry decision for the hop's last attempt (SPEC §11), by [`retry::decide_retry`].
    fn retry_decision(&self, hop: &Hop<'_>, retries_made: u32) -> RetryDecision {
        let input = self.input;
        let Some(returned) = &self.out.returned else {
            return RetryDecision::Advance(StoppedBy::NotRetryable);
        };
        let class = self.out.attempts.last().and_then(|a| a.error_class);
        let policy = hop.policy.retry.as_ref().filter(|_| !input.fallback_off);
        let matched = hop.policy.retry_on().fires_with(&returned.outcome, class);
        let health = &returned.health;
        let (ratio, floor) = (input.retry_budget.ratio, input.retry_budget.min_per_second);
        let max_backoff = policy.map_or(Duration::ZERO, |p| p.max_backoff);
        let jittered = policy.map_or(Duration::ZERO, |p| {
            let rand01 = input.picker.below(1 << 20) as f64 / f64::from(1u32 << 20);
            retry::backoff(retries_made, p.backoff, p.max_backoff, rand01)
        });
        let decision = retry::decide_retry(RetryInputs {
            matched,
            retries_made,
            attempts: policy.map_or(0, |p| p.attempts),
            breaker_admits: input.plan.breaker_mode == BreakerMode::Disabled
                || input.health.can_admit(health, input.health.now()),
            budget_allows: true, // asked last, below, where the retry is also counted
            attempts_so_far: self.attempts_made,
            max_attempts: input.max_attempts,
            retry_after_ms: None,
            retry_after: returned.retry_after,
            max_backoff,
            remaining: retry::remaining(Instant::now().into_std(), input.deadline.into_std()),
            expected_ttfb: health.expected_ttfb(),
            jittered,
        });
        if let RetryDecision::Retry { .. } = decision {
            if !input.health.take_retry(health, ratio, floor) {
                health.metrics.retry_budget_exhausted();
                return RetryDecision::Advance(StoppedBy::RetryBudget);
            }
        }
        decision
    }

    /// Notes on the last attempt why its hop was not attempted again. "No retry configured" is
    /// the ordinary case and is not written.
    fn stop_last(&mut self, stopped: StoppedBy) {
        let Some(last) = self.out.attempts.last_mut() else {
            return;
        };
        if last.outcome.is_success() || last.outcome == Outcome::Cancelled {
            return;
        }
        if stopped != StoppedBy::AttemptsUsed || self.out.retried {
            last.stopped_by = Some(stopped);
        }
    }
}

/// What follows a failed attempt on a hop.
enum After {
    /// The same hop again after this wait.
    Retry(Duration),
    /// Another (untried) member of the group.
    NextMember,
    /// On to the next hop (or, on the last hop, the end of the walk with this answer).
    LeaveHop,
    /// The walk is over: this answer goes back.
    Done,
}

/// What running a chosen destination came to.
enum Ran {
    /// The request cannot be put in the destination's format: a skip, not an attempt.
    Untranslatable,
    /// Recorded; `fired`: the kept answer matched its hop's triggers. `hedged`: a hedge was raced
    /// and the pair is settled (the kept answer is the winner's, or the later hop's).
    Settled { fired: bool, hedged: bool },
}

/// Could `d` be chosen at all (not switched off, not ineligible)? Its breaker is asked by
/// [`choose`]. Also the test behind the last-hop rule ([`later_hop_usable`]).
fn member_usable(d: &Dest<'_>, input: &WalkInput<'_, '_>) -> bool {
    ineligible(d, input.request).is_none()
        && !input
            .health
            .find(&d.target.name, &d.model)
            .is_some_and(|x| x.is_disabled())
}

/// The earliest moment an open breaker on the route lets a request through again (SPEC §6.5).
fn earliest_reopen(input: &WalkInput<'_, '_>) -> Option<Duration> {
    let now = input.health.now();
    input
        .plan
        .hops
        .iter()
        .flat_map(|h| &h.destinations)
        .filter_map(|d| input.health.find(&d.target.name, &d.model)?.open_until())
        .map(|until| until.saturating_duration_since(now))
        .min()
}

/// Phase "record health" and the attempt's record: the verdict goes to the destination's breaker,
/// the outcome to its metrics, and the routing log gets the attempt.
fn record_attempt(
    input: &WalkInput<'_, '_>,
    hop: &Hop<'_>,
    (dest, health, admitted): (&Dest<'_>, &Arc<DestHealth>, Admitted),
    (attempt, fired, kind): (&mut attempt::Attempt, bool, AttemptKind),
    probe: Option<ProbeGuard>,
) -> AttemptRecord {
    let condition = input.health.condition(&dest.target.name);
    let retry = kind == AttemptKind::Retry;
    let verdict = verdict(attempt, fired, condition.as_deref());
    input
        .health
        .record(health, verdict, probe, (attempt.first_byte, retry));
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
        kind,
        error_class: attempt.class,
        stopped_by: None,
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
        class: attempt.class.map(sidetrack_resilience::ErrorClass::as_str),
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
    let format = providers::format_for_dest(dest.target, &dest.model, input.request.dialect);
    let (body, strip_usage) = outbound_body(format, dest, input)?;
    // A provider's token (Vertex) before the request: its endpoint failing is this attempt's
    // CONNECTION_ERROR, so the walk falls back.
    let bearer = match input.upstreams.bearer(dest.target_index).await {
        Ok(b) => b,
        Err(detail) => return Ok(attempt::Attempt::unsent(ErrorKind::ConnectionError, detail)),
    };
    // The request and the spec are built in a block that ends before the await: the attempt's
    // future then keeps the running attempt only, not also the request's build result or the spec.
    Ok({
        let request = match outbound_request(format, dest, input, body, bearer) {
            Ok(r) => r,
            Err(detail) => return Ok(attempt::Attempt::unsent(ErrorKind::Unroutable, detail)),
        };
        let spec = attempt_spec(format, dest, hop, input, strip_usage);
        attempt::run(input.upstreams.client(dest.target_index), request, spec)
    }
    .await)
}

/// Phase "translate": the request in the destination's `format`, and whether the gateway asked
/// for a usage chunk the caller did not (the stream pipe then keeps it from the caller). `Err`:
/// the format cannot carry the request.
fn outbound_body(
    format: Dialect,
    dest: &Dest<'_>,
    input: &WalkInput<'_, '_>,
) -> Result<(Bytes, bool), String> {
    let body = translate::request_body(format, input.request, &dest.model).map_err(|e| e.0)?;
    // Token limits and usage records need the usage of every stream: an OpenAI chat upstream is
    // asked for it, and it is kept from a caller that did not ask (SPEC §14).
    let chat = Dialect::OpenAiChat;
    let strip_usage = format == chat
        && input.request.dialect == chat
        && input.request.stream
        && input.request.stream_usage != Some(true);
    if strip_usage {
        return Ok((input.request.asking_stream_usage(body), true));
    }
    Ok((body, false))
}

/// The HTTP request for the destination (its provider's URL, auth and headers). `Err`: it cannot
/// be built (an unroutable destination).
fn outbound_request(
    format: Dialect,
    dest: &Dest<'_>,
    input: &WalkInput<'_, '_>,
    body: Bytes,
    bearer: Option<HeaderValue>,
) -> Result<http::Request<Full<Bytes>>, String> {
    providers::request(providers::Outbound {
        target: dest.target,
        endpoint: input.upstreams.endpoint(dest.target_index),
        model: &dest.model,
        format,
        body,
        stream: input.request.stream,
        embeddings: input.request.dialect == Dialect::OpenAiEmbeddings,
        caller_headers: input.caller_headers,
        bearer,
    })
    .map_err(|e| e.0)
}

/// What the attempt needs besides the request: the formats, the hop's timeouts, the request's
/// deadline and bounds, and the caller's stream usage and embeddings choices.
fn attempt_spec<'a>(
    format: Dialect,
    dest: &'a Dest<'_>,
    hop: &Hop<'_>,
    input: &'a WalkInput<'_, '_>,
    strip_usage: bool,
) -> attempt::AttemptSpec<'a> {
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
        base64_embeddings: input.request.features.base64_embeddings,
    }
}
