//! The retry controller's rules (SPEC §11, §6.5) as pure decisions: the jittered backoff, whether
//! a hop is attempted again, the per-destination retry budget, the request deadline and what fits
//! in it, the re-pick inside a priority group, when to hedge, and the retry hint the caller gets.
//!
//! Like [`crate::walk`], nothing here does I/O, sleeps or reads a clock: times are passed in as
//! `Instant`s or `Duration`s and randomness as a number in `[0, 1)` or a `draw` function, so every
//! rule is tested without a socket or a runtime. The gateway's loop asks these functions at each
//! step (policy functions; not yet wired into the gateway — see docs/retries.md).

use std::time::{Duration, Instant};

use crate::walk::{self, Standing};

/// What kind of attempt a request made: the routing log's `attempts[].kind` (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptKind {
    /// The first attempt on a hop (or on another member of a priority group).
    First,
    /// The same hop again after a matching outcome (`retry`).
    Retry,
    /// The next hop started while this one had not committed (`hedge`).
    Hedge,
}

impl AttemptKind {
    /// The label: `FIRST`, `RETRY`, `HEDGE`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptKind::First => "FIRST",
            AttemptKind::Retry => "RETRY",
            AttemptKind::Hedge => "HEDGE",
        }
    }
}

/// The full-jitter backoff before retry number `attempt_n` of a hop (0 for the first retry)
/// (SPEC §11 Retry): `rand01 × min(max, base · 2^n)`. The exponent saturates, so a large `n`
/// waits up to `max` and never overflows. `rand01` is a uniform draw in `[0, 1)`; values outside
/// `[0, 1]` are clamped and NaN counts as 0.
pub fn backoff(attempt_n: u32, base: Duration, max: Duration, rand01: f64) -> Duration {
    let factor = 1u32.checked_shl(attempt_n).unwrap_or(u32::MAX);
    let ceiling = base.saturating_mul(factor).min(max);
    let r = if rand01.is_nan() {
        0.0
    } else {
        rand01.clamp(0.0, 1.0)
    };
    ceiling.mul_f64(r)
}

/// Why a hop was not attempted again: the routing log's `attempts[].stoppedBy` (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoppedBy {
    /// The outcome does not match the hop's `retry.on` (a success, or an error not listed).
    NotRetryable,
    /// The hop's `retry.attempts` are all used (or it has none).
    AttemptsUsed,
    /// The destination's breaker does not let requests through.
    BreakerOpen,
    /// The destination's retry budget is spent ([`RetryBudget`]).
    RetryBudget,
    /// The request has made `maxAttempts` attempts: the walk **ends** with the last response
    /// (see [`StoppedBy::ends_walk`]).
    MaxAttempts,
    /// The upstream asked to wait longer than `maxBackoffMilliseconds`.
    RetryAfterTooLong,
    /// The wait plus the expected time to first byte does not fit before the request deadline.
    Deadline,
}

impl StoppedBy {
    /// The label, e.g. `retryBudget`, `maxAttempts`.
    pub fn as_str(self) -> &'static str {
        match self {
            StoppedBy::NotRetryable => "notRetryable",
            StoppedBy::AttemptsUsed => "attemptsUsed",
            StoppedBy::BreakerOpen => "breakerOpen",
            StoppedBy::RetryBudget => "retryBudget",
            StoppedBy::MaxAttempts => "maxAttempts",
            StoppedBy::RetryAfterTooLong => "retryAfterTooLong",
            StoppedBy::Deadline => "deadline",
        }
    }

    /// Whether the walk ends here instead of advancing to the next hop: only `maxAttempts`
    /// (SPEC §11 Attempt cap: "reaching it ends the walk with the last response"). A deadline
    /// that stops a retry advances; the next hop is then judged by [`fits_deadline`].
    pub fn ends_walk(self) -> bool {
        matches!(self, StoppedBy::MaxAttempts)
    }

    /// Every reason, for metric pre-registration and docs.
    pub const ALL: [StoppedBy; 7] = [
        StoppedBy::NotRetryable,
        StoppedBy::AttemptsUsed,
        StoppedBy::BreakerOpen,
        StoppedBy::RetryBudget,
        StoppedBy::MaxAttempts,
        StoppedBy::RetryAfterTooLong,
        StoppedBy::Deadline,
    ];
}

impl serde::Serialize for AttemptKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for StoppedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for StoppedBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Everything the retry decision reads after one attempt on a hop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryInputs {
    /// The outcome matched the hop's `retry.on` (default: its effective triggers).
    pub matched: bool,
    /// Retries already made on this hop.
    pub retries_made: u32,
    /// The hop's `retry.attempts` (default 0).
    pub attempts: u32,
    /// The destination's breaker lets a request through now.
    pub breaker_admits: bool,
    /// [`RetryBudget::allows_retry`] for the destination.
    pub budget_allows: bool,
    /// Attempts the request has made so far (hops + retries + hedges), this one included.
    pub attempts_so_far: u32,
    /// `defaults.maxAttempts`.
    pub max_attempts: u32,
    /// The upstream's `retry-after-ms`, parsed.
    pub retry_after_ms: Option<Duration>,
    /// The upstream's `Retry-After`, parsed.
    pub retry_after: Option<Duration>,
    /// The hop's `retry.maxBackoffMilliseconds`.
    pub max_backoff: Duration,
    /// Time left until the request deadline ([`remaining`]).
    pub remaining: Duration,
    /// The destination's expected time to first byte (its EWMA; unknown → zero).
    pub expected_ttfb: Duration,
    /// [`backoff`] for this retry.
    pub jittered: Duration,
}

/// The retry decision for one hop after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Attempt the same hop again after this wait.
    Retry { after: Duration },
    /// Do not retry: advance (or, for [`StoppedBy::MaxAttempts`], end the walk).
    Advance(StoppedBy),
}

/// The retry decision (SPEC §11 Retry, Retry budget, Attempt cap, Deadline). In this order:
/// 1. the outcome must match `retry.on` → else `NotRetryable`;
/// 2. fewer than `attempts` retries made on the hop → else `AttemptsUsed`;
/// 3. fewer than `maxAttempts` attempts made by the request → else `MaxAttempts`;
/// 4. the breaker lets requests through → else `BreakerOpen`;
/// 5. the wait is the upstream's `retry-after-ms` (preferred) or `Retry-After` when one was sent,
///    else the jittered backoff; an upstream wait longer than `maxBackoffMilliseconds` →
///    `RetryAfterTooLong` (one exactly equal is honoured: it is a wait the backoff itself may reach);
/// 6. the wait and then the expected time to first byte must fit before the deadline
///    ([`fits_deadline`] on the time left after the wait) → else `Deadline`;
/// 7. the retry budget allows → else `RetryBudget`.
///
/// The budget is asked last so that `retry_budget_exhausted_total` counts only the retries the
/// budget alone refused.
pub fn decide_retry(i: RetryInputs) -> RetryDecision {
    let after = match retry_wait(&i) {
        Ok(after) => after,
        Err(stopped) => return RetryDecision::Advance(stopped),
    };
    if !i.budget_allows {
        return RetryDecision::Advance(StoppedBy::RetryBudget);
    }
    RetryDecision::Retry { after }
}

/// Steps 1–6 of [`decide_retry`]: the wait, or why there is none.
fn retry_wait(i: &RetryInputs) -> Result<Duration, StoppedBy> {
    if !i.matched {
        return Err(StoppedBy::NotRetryable);
    }
    if i.retries_made >= i.attempts {
        return Err(StoppedBy::AttemptsUsed);
    }
    if !attempt_allowed(i.attempts_so_far, i.max_attempts) {
        return Err(StoppedBy::MaxAttempts);
    }
    if !i.breaker_admits {
        return Err(StoppedBy::BreakerOpen);
    }
    let after = match upstream_hint(i.retry_after_ms, i.retry_after) {
        Some(hint) if hint > i.max_backoff => return Err(StoppedBy::RetryAfterTooLong),
        Some(hint) => hint,
        None => i.jittered,
    };
    match i.remaining.checked_sub(after) {
        Some(left) if fits_deadline(left, i.expected_ttfb) => Ok(after),
        _ => Err(StoppedBy::Deadline),
    }
}

/// The upstream's retry hint (SPEC §11): `retry-after-ms` when sent, else `Retry-After`.
pub fn upstream_hint(
    retry_after_ms: Option<Duration>,
    retry_after: Option<Duration>,
) -> Option<Duration> {
    retry_after_ms.or(retry_after)
}

/// Whether the request may start another attempt (hop, retry or hedge) (SPEC §11 Attempt cap):
/// fewer than `maxAttempts` made. The first attempt is always allowed, so a cap of 0 cannot refuse
/// every request.
pub fn attempt_allowed(attempts_so_far: u32, max_attempts: u32) -> bool {
    attempts_so_far == 0 || attempts_so_far < max_attempts
}

/// Seconds in the retry budget's window (SPEC §11: "over the last 10 s").
pub const BUDGET_WINDOW_SECS: u64 = 10;

/// A destination's retry budget (SPEC §11 Retry budget): counts of first attempts and retries in
/// a sliding window of ten one-second buckets.
///
/// Reading of the rule: a retry is allowed when the retries already recorded in the window
/// (the one being decided is not yet counted) are **strictly below** `ratio × first attempts in
/// the window + 10 × minPerSecond` ("stay under"). So `ratio: 0, minPerSecond: 0` allows no
/// retry, and the defaults (0.2, 5) allow 50 retries in 10 s to an idle destination plus one per
/// five first attempts. A first attempt is any attempt on this destination that is not a retry of
/// it — including a fallback or a hedge arriving from another destination.
///
/// The window is the current second and the nine before it (a bucket older than that is stale
/// and reset on reuse), so it covers between 9 and 10 s. Memory is fixed (ten buckets), nothing
/// allocates per event, and a long idle gap empties the window without any sweep.
///
/// A plain struct, not thread-safe by itself: the gateway keeps one per destination behind the
/// lock that already guards that destination's breaker (or a `Mutex` of its own).
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Second 0 of this budget's clock; `now` is read as whole seconds since it.
    epoch: Instant,
    buckets: [Bucket; BUDGET_WINDOW_SECS as usize],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The second (since `epoch`) this bucket counts; its counts are stale once it leaves the
    /// window.
    second: u64,
    first: u32,
    retries: u32,
}

impl RetryBudget {
    /// An empty budget whose clock starts at `epoch` (any instant not after the first event).
    pub fn new(epoch: Instant) -> Self {
        RetryBudget {
            epoch,
            buckets: [Bucket::default(); BUDGET_WINDOW_SECS as usize],
        }
    }

    /// A first attempt on the destination at `now`.
    pub fn record_first(&mut self, now: Instant) {
        let b = self.bucket(now);
        b.first = b.first.saturating_add(1);
    }

    /// A retry on the destination at `now`.
    pub fn record_retry(&mut self, now: Instant) {
        let b = self.bucket(now);
        b.retries = b.retries.saturating_add(1);
    }

    /// Whether a retry may be made at `now`: retries in the window < `ratio` × first attempts in
    /// the window + 10 × `min_per_second`. Negative or NaN knobs count as 0.
    pub fn allows_retry(&self, now: Instant, ratio: f64, min_per_second: f64) -> bool {
        let (first, retries) = self.counts(now);
        let knob = |v: f64| if v.is_nan() { 0.0 } else { v.max(0.0) };
        let limit =
            knob(ratio) * f64::from(first) + BUDGET_WINDOW_SECS as f64 * knob(min_per_second);
        f64::from(retries) < limit
    }

    /// First attempts and retries recorded in the window that ends at `now`.
    pub fn counts(&self, now: Instant) -> (u32, u32) {
        let sec = self.second(now);
        self.buckets
            .iter()
            .filter(|b| in_window(b.second, sec))
            .fold((0u32, 0u32), |(f, r), b| {
                (f.saturating_add(b.first), r.saturating_add(b.retries))
            })
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_secs()
    }

    /// The bucket for `now`, emptied first if it still holds an older second.
    fn bucket(&mut self, now: Instant) -> &mut Bucket {
        let sec = self.second(now);
        let b = &mut self.buckets[(sec % BUDGET_WINDOW_SECS) as usize];
        if b.second != sec {
            *b = Bucket {
                second: sec,
                ..Bucket::default()
            };
        }
        b
    }
}

/// A bucket for second `bucket` is in the window ending at second `now`.
fn in_window(bucket: u64, now: u64) -> bool {
    bucket <= now && now - bucket < BUDGET_WINDOW_SECS
}

/// Longest caller deadline taken from a header: one day. Longer values are clamped to it (the
/// server's own `requestTimeoutMilliseconds` is always the earlier in practice).
pub const MAX_CALLER_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The caller's own time budget from its headers (SPEC §11 Deadline), `None` when it sent none
/// that parses: `x-sidetrack-timeout-ms` (whole milliseconds, ASCII digits) and
/// `x-stainless-timeout` (seconds as a decimal number, e.g. `600` or `12.5`). A value that does
/// not parse — and zero, a negative number, NaN or infinity — is ignored (0 is what several
/// clients send for "no timeout"); a value above [`MAX_CALLER_TIMEOUT`] is clamped to it. When
/// both headers parse, the shorter wins: the caller gives up at whichever comes first.
pub fn caller_timeout(
    x_sidetrack_timeout_ms: Option<&str>,
    x_stainless_timeout: Option<&str>,
) -> Option<Duration> {
    let ms = x_sidetrack_timeout_ms.and_then(parse_timeout_ms);
    let stainless = x_stainless_timeout.and_then(parse_timeout_secs);
    match (ms, stainless) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn parse_timeout_ms(v: &str) -> Option<Duration> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: the only failure left is overflow, i.e. absurdly long — clamp.
    let d = v
        .parse::<u64>()
        .map_or(MAX_CALLER_TIMEOUT, Duration::from_millis);
    positive_capped(d)
}

fn parse_timeout_secs(v: &str) -> Option<Duration> {
    let secs: f64 = v.trim().parse().ok()?;
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    let d = Duration::try_from_secs_f64(secs).unwrap_or(MAX_CALLER_TIMEOUT);
    positive_capped(d)
}

fn positive_capped(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then(|| d.min(MAX_CALLER_TIMEOUT))
}

/// The request deadline (SPEC §11 Deadline): the earlier of `now + server.requestTimeout` and,
/// when `honour` (`server.callerDeadline`), `now + ` the caller's timeout ([`caller_timeout`]).
/// `now` is when the request arrived.
pub fn caller_deadline(
    now: Instant,
    server_timeout: Duration,
    x_sidetrack_timeout_ms: Option<&str>,
    x_stainless_timeout: Option<&str>,
    honour: bool,
) -> Instant {
    let caller = if honour {
        caller_timeout(x_sidetrack_timeout_ms, x_stainless_timeout)
    } else {
        None
    };
    let budget = caller.map_or(server_timeout, |c| c.min(server_timeout));
    // An absurd server timeout cannot overflow the clock: it is capped like a caller's.
    now.checked_add(budget)
        .or_else(|| now.checked_add(MAX_CALLER_TIMEOUT))
        .unwrap_or(now)
}

/// Time left before `deadline` at `now` (zero once it has passed).
pub fn remaining(now: Instant, deadline: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

/// Deadline-aware eligibility (SPEC §11 Deadline): a hop fits when some time is left and its
/// expected time to first byte (EWMA; unknown → zero) does not exceed it. An expected time equal
/// to the remaining time fits ("exceeds" is strict); with nothing left nothing starts — the
/// deadline has passed and the request ends with `deadlineExceeded`. A hop that does not fit is
/// skipped as `INELIGIBLE:deadline` ([`crate::walk::Ineligible::Deadline`]).
pub fn fits_deadline(remaining: Duration, expected_ttfb: Duration) -> bool {
    !remaining.is_zero() && expected_ttfb <= remaining
}

/// The next member of a priority group to attempt (SPEC §11 Retry, §5.8), a position in
/// `standings`, or `None` when the walk leaves the group.
///
/// - A group tries each remaining healthy member once before the walk leaves it, even without
///   `retry`: while a [`Standing::Candidate`] member is not yet `tried`, one of them is picked by
///   power of two choices on `scores` ([`walk::pick_by`]); that is a first attempt on that member.
/// - For a retry (`retry == true`, after [`decide_retry`] said so) the same holds, and when every
///   candidate has been tried the pick is among all candidates — so a one-member group retries
///   that member.
///
/// `tried`, `standings` and `scores` are indexed alike (a shorter `tried` counts as not tried).
pub fn next_member(
    tried: &[bool],
    standings: &[Standing],
    scores: &[f64],
    retry: bool,
    draw: impl FnMut(usize) -> usize,
) -> Option<usize> {
    let candidate = |i: usize| standings[i] == Standing::Candidate;
    let untried = |i: usize| candidate(i) && !tried.get(i).copied().unwrap_or(false);
    let n_untried = (0..standings.len()).filter(|&i| untried(i)).count();
    if n_untried > 0 {
        return pick_among(standings.len(), n_untried, untried, scores, draw);
    }
    if retry {
        let n = (0..standings.len()).filter(|&i| candidate(i)).count();
        return pick_among(standings.len(), n, candidate, scores, draw);
    }
    None
}

/// P2C among the `n` members `0..len` for which `keep` holds, returned as a member index.
fn pick_among(
    len: usize,
    n: usize,
    keep: impl Fn(usize) -> bool,
    scores: &[f64],
    draw: impl FnMut(usize) -> usize,
) -> Option<usize> {
    let nth = |k: usize| (0..len).filter(|&i| keep(i)).nth(k);
    let score_of = |k: usize| nth(k).and_then(|i| scores.get(i).copied()).unwrap_or(0.0);
    walk::pick_by(n, score_of, draw).and_then(nth)
}

/// Whether to start the next hop as a hedge now (SPEC §11 Hedging): the hop has `hedge.after`
/// (`None`: no hedging), that much time has passed since its attempt started (the boundary
/// included: "by then"), it has not committed, the next hop is eligible (deadline included) and
/// its breaker is not open, and the request may make another attempt (a hedge counts toward
/// `maxAttempts`). The gateway asks at most once per attempt.
pub fn hedge_now(
    elapsed_since_attempt_start: Duration,
    after: Option<Duration>,
    committed: bool,
    next_hop_eligible_and_not_open: bool,
    attempts_so_far: u32,
    max_attempts: u32,
) -> bool {
    after.is_some_and(|after| elapsed_since_attempt_start >= after)
        && !committed
        && next_hop_eligible_and_not_open
        && attempt_allowed(attempts_so_far, max_attempts)
}

/// The caller retry hint for an error the gateway returns (SPEC §6.5, `callerRetryHint: auto`):
/// `(x-should-retry: false?, Retry-After)`.
///
/// - `x-should-retry: false` on every error returned after the gateway applied its own policy,
///   except an error from a route with a single hop, no skip and no retry
///   (`single_hop_no_skip_no_retry`), which passes through as the upstream sent it, and the
///   gateway's own rate limit (429), which never carries it.
/// - With it, the earliest moment a destination may come back — the earliest breaker reopening on
///   the route or an upstream `Retry-After`, whichever is sooner — when either is known. A
///   pass-through error keeps the upstream's own headers, and the gateway's 429 has its own
///   `Retry-After` (§6.3), so neither gets one from here.
pub fn retry_hint(
    single_hop_no_skip_no_retry: bool,
    gateway_rate_limit: bool,
    earliest_reopen: Option<Duration>,
    upstream_retry_after: Option<Duration>,
) -> (bool, Option<Duration>) {
    if single_hop_no_skip_no_retry || gateway_rate_limit {
        return (false, None);
    }
    let after = match (earliest_reopen, upstream_retry_after) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (true, after)
}

/// The two header values for a retry delay (SPEC §6.5), both rounded **up** so a caller never
/// comes back early: `Retry-After` in whole seconds and `retry-after-ms` in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfterValues {
    /// `Retry-After: <seconds>`.
    pub seconds: u64,
    /// `retry-after-ms: <milliseconds>`.
    pub millis: u64,
}

/// Renders a delay as [`RetryAfterValues`] (`http::HeaderValue::from(u64)` takes each as is).
pub fn retry_after_values(d: Duration) -> RetryAfterValues {
    let ceil_div =
        |nanos: u128, unit: u128| u64::try_from(nanos.div_ceil(unit)).unwrap_or(u64::MAX);
    RetryAfterValues {
        seconds: ceil_div(d.as_nanos(), 1_000_000_000),
        millis: ceil_div(d.as_nanos(), 1_000_000),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::walk::{Ineligible, Skip};

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    // §11 Retry: "after min(maxBackoff, backoff · 2^n) with full jitter"
    #[test]
    fn backoff_is_full_jitter_under_a_doubling_ceiling_capped_at_max() {
        let (base, max) = (ms(100), ms(2000));
        // the ceiling doubles per retry: 100, 200, 400, 800, 1600, then max
        for (n, ceiling) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1600), (5, 2000)] {
            assert_eq!(backoff(n, base, max, 1.0), ms(ceiling), "n = {n}");
        }
        // full jitter: anywhere from zero to the ceiling
        assert_eq!(backoff(2, base, max, 0.0), Duration::ZERO);
        assert_eq!(backoff(2, base, max, 0.5), ms(200));
        assert_eq!(backoff(2, base, max, 0.25), ms(100));
    }

    #[test]
    fn backoff_never_overflows_and_bad_draws_are_clamped() {
        let (base, max) = (ms(100), ms(2000));
        for n in [31, 32, 63, 64, 1000, u32::MAX] {
            assert_eq!(backoff(n, base, max, 1.0), max, "n = {n}");
        }
        // a huge base saturates instead of panicking
        assert_eq!(backoff(40, Duration::MAX, max, 0.5), ms(1000));
        assert_eq!(backoff(3, base, max, f64::NAN), Duration::ZERO);
        assert_eq!(backoff(3, base, max, -1.0), Duration::ZERO);
        assert_eq!(backoff(3, base, max, 7.0), ms(800));
        assert_eq!(backoff(3, Duration::ZERO, max, 1.0), Duration::ZERO);
        // max below base: max wins from the first retry
        assert_eq!(backoff(0, base, ms(50), 1.0), ms(50));
    }

    fn inputs() -> RetryInputs {
        RetryInputs {
            matched: true,
            retries_made: 0,
            attempts: 2,
            breaker_admits: true,
            budget_allows: true,
            attempts_so_far: 1,
            max_attempts: 8,
            retry_after_ms: None,
            retry_after: None,
            max_backoff: ms(2000),
            remaining: ms(60_000),
            expected_ttfb: Duration::ZERO,
            jittered: ms(150),
        }
    }

    fn advance(s: StoppedBy) -> RetryDecision {
        RetryDecision::Advance(s)
    }

    // §11 Retry: a matching outcome attempts the same hop again after the jittered backoff
    #[test]
    fn a_matching_outcome_is_retried_after_the_jittered_backoff() {
        assert_eq!(
            decide_retry(inputs()),
            RetryDecision::Retry { after: ms(150) }
        );
        let i = RetryInputs {
            matched: false,
            ..inputs()
        };
        assert_eq!(decide_retry(i), advance(StoppedBy::NotRetryable));
    }

    // §11 Retry: "up to `attempts` more times (default 0)"
    #[test]
    fn a_hop_is_retried_at_most_attempts_times() {
        let zero = RetryInputs {
            attempts: 0,
            ..inputs()
        };
        assert_eq!(decide_retry(zero), advance(StoppedBy::AttemptsUsed));
        let last = RetryInputs {
            retries_made: 1,
            ..inputs()
        };
        assert!(matches!(decide_retry(last), RetryDecision::Retry { .. }));
        let used = RetryInputs {
            retries_made: 2,
            ..inputs()
        };
        assert_eq!(decide_retry(used), advance(StoppedBy::AttemptsUsed));
        assert!(!StoppedBy::AttemptsUsed.ends_walk());
    }

    // §11 Attempt cap: "maxAttempts bounds every attempt of one request; reaching it ends the walk"
    #[test]
    fn reaching_max_attempts_exactly_ends_the_walk() {
        let below = RetryInputs {
            attempts_so_far: 7,
            ..inputs()
        };
        assert!(matches!(decide_retry(below), RetryDecision::Retry { .. }));
        let at = RetryInputs {
            attempts_so_far: 8,
            ..inputs()
        };
        assert_eq!(decide_retry(at), advance(StoppedBy::MaxAttempts));
        assert!(StoppedBy::MaxAttempts.ends_walk());
        // the walk-level check: hops and hedges obey the same cap
        assert!(attempt_allowed(0, 8));
        assert!(attempt_allowed(7, 8));
        assert!(!attempt_allowed(8, 8));
        assert!(!attempt_allowed(9, 8));
        // the first attempt is always allowed, even under a cap of 0 or 1
        assert!(attempt_allowed(0, 0));
        assert!(attempt_allowed(0, 1));
        assert!(!attempt_allowed(1, 1));
    }

    // §11 Retry: "A retry is made only while the destination's breaker lets requests through."
    #[test]
    fn no_retry_while_the_breaker_refuses() {
        let i = RetryInputs {
            breaker_admits: false,
            ..inputs()
        };
        assert_eq!(decide_retry(i), advance(StoppedBy::BreakerOpen));
    }

    // §11 Retry budget: "over budget the walk advances without retrying (stoppedBy: retryBudget)"
    #[test]
    fn an_exhausted_budget_advances_and_is_asked_last() {
        let i = RetryInputs {
            budget_allows: false,
            ..inputs()
        };
        assert_eq!(decide_retry(i), advance(StoppedBy::RetryBudget));
        // a retry refused for another reason is not blamed on the budget
        let both = RetryInputs {
            budget_allows: false,
            breaker_admits: false,
            ..inputs()
        };
        assert_eq!(decide_retry(both), advance(StoppedBy::BreakerOpen));
        let deadline = RetryInputs {
            budget_allows: false,
            remaining: ms(100),
            ..inputs()
        };
        assert_eq!(decide_retry(deadline), advance(StoppedBy::Deadline));
    }

    // §11 Retry: "or after the upstream's retry-after-ms (preferred) or Retry-After when that is
    // shorter than maxBackoffMilliseconds and fits the deadline (longer: no retry, advance)"
    #[test]
    fn the_upstream_hint_replaces_the_backoff_when_shorter_than_max_backoff() {
        let ra = RetryInputs {
            retry_after: Some(ms(1000)),
            ..inputs()
        };
        assert_eq!(decide_retry(ra), RetryDecision::Retry { after: ms(1000) });
        // retry-after-ms is preferred over Retry-After, even when longer
        let both = RetryInputs {
            retry_after_ms: Some(ms(1500)),
            retry_after: Some(ms(1000)),
            ..inputs()
        };
        assert_eq!(decide_retry(both), RetryDecision::Retry { after: ms(1500) });
        assert_eq!(upstream_hint(Some(ms(1)), Some(ms(2))), Some(ms(1)));
        assert_eq!(upstream_hint(None, Some(ms(2))), Some(ms(2)));
        assert_eq!(upstream_hint(None, None), None);
        // a zero hint retries at once
        let zero = RetryInputs {
            retry_after_ms: Some(Duration::ZERO),
            ..inputs()
        };
        assert_eq!(
            decide_retry(zero),
            RetryDecision::Retry {
                after: Duration::ZERO
            }
        );
    }

    #[test]
    fn an_upstream_hint_longer_than_max_backoff_advances_and_one_equal_is_honoured() {
        let equal = RetryInputs {
            retry_after: Some(ms(2000)),
            ..inputs()
        };
        assert_eq!(
            decide_retry(equal),
            RetryDecision::Retry { after: ms(2000) }
        );
        let longer = RetryInputs {
            retry_after: Some(ms(2000) + MS),
            ..inputs()
        };
        assert_eq!(decide_retry(longer), advance(StoppedBy::RetryAfterTooLong));
        // the preferred header decides: a short Retry-After does not rescue a long retry-after-ms
        let ms_long = RetryInputs {
            retry_after_ms: Some(ms(5000)),
            retry_after: Some(ms(1000)),
            ..inputs()
        };
        assert_eq!(decide_retry(ms_long), advance(StoppedBy::RetryAfterTooLong));
        assert!(!StoppedBy::RetryAfterTooLong.ends_walk());
    }

    // §11 Deadline: "No attempt, retry or backoff starts that cannot fit"
    #[test]
    fn a_retry_whose_wait_and_first_byte_do_not_fit_the_deadline_advances() {
        // wait 150 + expected first byte 850 = 1000: exactly the time left fits
        let exact = RetryInputs {
            remaining: ms(1000),
            expected_ttfb: ms(850),
            ..inputs()
        };
        assert_eq!(decide_retry(exact), RetryDecision::Retry { after: ms(150) });
        let over = RetryInputs {
            remaining: ms(1000) - MS,
            ..exact
        };
        assert_eq!(decide_retry(over), advance(StoppedBy::Deadline));
        // a backoff that ends exactly at the deadline leaves nothing for the attempt
        let backoff_to_deadline = RetryInputs {
            remaining: ms(150),
            ..inputs()
        };
        assert_eq!(
            decide_retry(backoff_to_deadline),
            advance(StoppedBy::Deadline)
        );
        // the upstream's hint must fit too
        let hint = RetryInputs {
            retry_after: Some(ms(1000)),
            remaining: ms(900),
            ..inputs()
        };
        assert_eq!(decide_retry(hint), advance(StoppedBy::Deadline));
        // a passed deadline starts nothing
        let passed = RetryInputs {
            remaining: Duration::ZERO,
            jittered: Duration::ZERO,
            ..inputs()
        };
        assert_eq!(decide_retry(passed), advance(StoppedBy::Deadline));
        assert!(!StoppedBy::Deadline.ends_walk());
    }

    #[test]
    fn stopped_by_labels_are_the_routing_log_vocabulary() {
        let labels: Vec<&str> = StoppedBy::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            labels,
            [
                "notRetryable",
                "attemptsUsed",
                "breakerOpen",
                "retryBudget",
                "maxAttempts",
                "retryAfterTooLong",
                "deadline"
            ]
        );
        assert_eq!(StoppedBy::RetryBudget.to_string(), "retryBudget");
        let kinds: Vec<&str> = [AttemptKind::First, AttemptKind::Retry, AttemptKind::Hedge]
            .iter()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(kinds, ["FIRST", "RETRY", "HEDGE"]);
    }

    // §11 Retry budget: "retries in the last 10 s stay under ratio × first attempts in the last
    // 10 s + 10 × minPerSecond"
    #[test]
    fn the_budget_allows_retries_strictly_under_ratio_times_first_attempts_plus_the_floor() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(t0);
        // an idle destination: the floor alone, 10 × 0.5 = 5 retries
        for k in 0..5 {
            assert!(b.allows_retry(t0, 0.0, 0.5), "retry {k}");
            b.record_retry(t0);
        }
        assert!(!b.allows_retry(t0, 0.0, 0.5), "5 is not under 5");
        // 10 first attempts × 0.2 = 2 more
        for _ in 0..10 {
            b.record_first(t0);
        }
        assert_eq!(b.counts(t0), (10, 5));
        assert!(b.allows_retry(t0, 0.2, 0.5));
        b.record_retry(t0);
        assert!(b.allows_retry(t0, 0.2, 0.5));
        b.record_retry(t0);
        assert!(!b.allows_retry(t0, 0.2, 0.5), "7 is not under 2 + 5");
        // no floor and no ratio: never
        assert!(!RetryBudget::new(t0).allows_retry(t0, 0.0, 0.0));
        // negative or NaN knobs count as zero
        assert!(!RetryBudget::new(t0).allows_retry(t0, -1.0, f64::NAN));
        // the defaults (0.2, 5): 50 retries to an idle destination
        let mut d = RetryBudget::new(t0);
        let mut allowed = 0;
        while d.allows_retry(t0, 0.2, 5.0) {
            d.record_retry(t0);
            allowed += 1;
        }
        assert_eq!(allowed, 50);
    }

    #[test]
    fn the_budget_window_slides_over_ten_one_second_buckets() {
        let t0 = Instant::now();
        let at = |s: u64, m: u64| t0 + Duration::from_secs(s) + ms(m);
        let mut b = RetryBudget::new(t0);
        b.record_retry(at(0, 0));
        b.record_first(at(0, 999));
        b.record_retry(at(5, 0));
        assert_eq!(
            b.counts(at(9, 999)),
            (1, 2),
            "second 0 is still in the window"
        );
        // at second 10 the second-0 bucket has left the window
        assert_eq!(b.counts(at(10, 0)), (0, 1));
        assert_eq!(b.counts(at(14, 999)), (0, 1));
        assert_eq!(b.counts(at(15, 0)), (0, 0));
        // reusing a bucket slot (second 10 → slot 0) starts it empty
        b.record_retry(at(10, 0));
        assert_eq!(b.counts(at(10, 0)), (0, 2));
        // the floor refills as retries leave the window: 1/s floor = 10 per window
        let mut f = RetryBudget::new(t0);
        for _ in 0..10 {
            f.record_retry(at(0, 0));
        }
        assert!(!f.allows_retry(at(9, 0), 0.0, 1.0));
        assert!(f.allows_retry(at(10, 0), 0.0, 1.0));
    }

    #[test]
    fn a_long_idle_gap_empties_the_budget_window() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(t0);
        for s in 0..10 {
            let now = t0 + Duration::from_secs(s);
            b.record_first(now);
            b.record_retry(now);
        }
        assert_eq!(b.counts(t0 + Duration::from_secs(9)), (10, 10));
        // an hour later, every bucket is stale even though the slots were never reused
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.counts(later), (0, 0));
        assert!(b.allows_retry(later, 0.0, 0.1));
        // a gap that lands on the same slot (3600 % 10 == 0) still starts it empty
        b.record_retry(later);
        assert_eq!(b.counts(later), (0, 1));
        // an instant before the budget's epoch reads as second 0 and does not panic
        let before = RetryBudget::new(t0 + Duration::from_secs(5));
        assert_eq!(before.counts(t0), (0, 0));
    }

    // §11 Deadline: "the earlier of server.requestTimeoutMilliseconds and the caller's deadline"
    #[test]
    fn the_deadline_is_the_earlier_of_the_server_timeout_and_the_callers() {
        let now = Instant::now();
        let server = Duration::from_secs(900);
        assert_eq!(caller_deadline(now, server, None, None, true), now + server);
        assert_eq!(
            caller_deadline(now, server, Some("1500"), None, true),
            now + ms(1500)
        );
        assert_eq!(
            caller_deadline(now, server, None, Some("600"), true),
            now + Duration::from_secs(600)
        );
        // a caller deadline longer than the server's does not extend it
        assert_eq!(
            caller_deadline(now, server, Some("3600000"), None, true),
            now + server
        );
        // server.callerDeadline: false ignores both headers
        assert_eq!(
            caller_deadline(now, server, Some("1500"), Some("1"), false),
            now + server
        );
        // both headers: the shorter wins
        assert_eq!(
            caller_deadline(now, server, Some("1500"), Some("1.2"), true),
            now + ms(1200)
        );
        assert_eq!(
            caller_deadline(now, server, Some("800"), Some("1.2"), true),
            now + ms(800)
        );
    }

    // §11 Deadline: "x-stainless-timeout (seconds, a decimal number ...; a value that does not
    // parse is ignored)"
    #[test]
    fn caller_timeouts_parse_strictly_and_ignore_the_rest() {
        assert_eq!(caller_timeout(Some("250"), None), Some(ms(250)));
        assert_eq!(caller_timeout(Some(" 250 "), None), Some(ms(250)));
        assert_eq!(caller_timeout(None, Some("12.5")), Some(ms(12_500)));
        assert_eq!(caller_timeout(None, Some("0.001")), Some(ms(1)));
        assert_eq!(
            caller_timeout(None, Some("600")),
            Some(Duration::from_secs(600))
        );
        for bad in ["", "abc", "-5", "+5", "1.5", "1e3", "0", "00", "12ms"] {
            assert_eq!(caller_timeout(Some(bad), None), None, "ms {bad:?}");
        }
        for bad in [
            "", "abc", "-1", "0", "0.0", "NaN", "inf", "-inf", "1s", "1,5",
        ] {
            assert_eq!(caller_timeout(None, Some(bad)), None, "secs {bad:?}");
        }
        // an unparsable header does not hide the other
        assert_eq!(caller_timeout(Some("soon"), Some("2")), Some(ms(2000)));
        assert_eq!(caller_timeout(Some("2000"), Some("soon")), Some(ms(2000)));
        // absurdly long values are clamped, never overflow
        assert_eq!(
            caller_timeout(Some("99999999999999999999999"), None),
            Some(MAX_CALLER_TIMEOUT)
        );
        assert_eq!(
            caller_timeout(None, Some("1e300")),
            Some(MAX_CALLER_TIMEOUT)
        );
        let now = Instant::now();
        assert_eq!(
            caller_deadline(now, Duration::MAX, None, Some("1e300"), true),
            now + MAX_CALLER_TIMEOUT
        );
        // an absurd server timeout with no caller deadline does not panic either
        let _ = caller_deadline(now, Duration::MAX, None, None, true);
    }

    // §11 Deadline: "a hop whose expected time to first byte exceeds the remaining time is skipped
    // as INELIGIBLE:deadline"
    #[test]
    fn a_hop_fits_while_its_expected_first_byte_does_not_exceed_the_time_left() {
        assert!(fits_deadline(ms(1000), ms(999)));
        assert!(fits_deadline(ms(1000), ms(1000)), "equal does not exceed");
        assert!(!fits_deadline(ms(1000), ms(1001)));
        // unknown EWMA is zero: fits while any time is left
        assert!(fits_deadline(MS, Duration::ZERO));
        // a passed deadline starts nothing
        assert!(!fits_deadline(Duration::ZERO, Duration::ZERO));
        let now = Instant::now();
        assert_eq!(remaining(now, now + ms(5)), ms(5));
        assert_eq!(remaining(now + ms(5), now), Duration::ZERO);
        assert_eq!(
            Skip::Ineligible(Ineligible::Deadline).as_str(),
            "INELIGIBLE:deadline"
        );
        assert_eq!(
            Skip::Ineligible(Ineligible::Guardrail).as_str(),
            "INELIGIBLE:guardrail"
        );
    }

    fn draws(seq: &[usize]) -> impl FnMut(usize) -> usize + '_ {
        let mut it = seq.iter();
        move |n| {
            let d = *it.next().unwrap();
            assert!(d < n);
            d
        }
    }

    const C: Standing = Standing::Candidate;
    const OPEN: Standing = Standing::Open;

    // §11 Retry: "a group tries each remaining healthy member once before the walk leaves it, even
    // without retry"
    #[test]
    fn a_group_tries_each_healthy_member_once_before_the_walk_leaves_it() {
        let standings = [C, C, C];
        let scores = [1.0, 1.0, 1.0];
        let mut tried = [true, false, false];
        // two untried: P2C between positions 0 and 1 of the untried (members 1 and 2)
        assert_eq!(
            next_member(&tried, &standings, &scores, false, draws(&[1, 0])),
            Some(2)
        );
        tried[2] = true;
        // one untried: no draw needed
        assert_eq!(
            next_member(&tried, &standings, &scores, false, |_| unreachable!()),
            Some(1)
        );
        tried[1] = true;
        assert_eq!(
            next_member(&tried, &standings, &scores, false, |_| unreachable!()),
            None
        );
        // an open or skipped sibling is not healthy: the walk leaves
        let standings = [C, OPEN, Standing::Skipped(Skip::Disabled)];
        assert_eq!(
            next_member(&[true], &standings, &scores, false, |_| unreachable!()),
            None
        );
    }

    #[test]
    fn the_sibling_pick_is_p2c_on_scores_among_the_untried() {
        let standings = [C, C, C, C];
        // member 0 tried; the best untried score is member 3
        let scores = [9.0, 0.1, 0.2, 0.9];
        let tried = [true, false, false, false];
        // untried positions 0..3 are members 1, 2, 3; draws a = 0, b = (0 + 1 + 1) % 3 = 2
        assert_eq!(
            next_member(&tried, &standings, &scores, false, draws(&[0, 1])),
            Some(3)
        );
        // the tried member's high score never wins
        for a in 0..3 {
            for r in 0..2 {
                let m = next_member(&tried, &standings, &scores, false, draws(&[a, r]));
                assert_ne!(m, Some(0));
            }
        }
    }

    // §11 Retry: "a retry re-picks among the members not yet tried (a one-member group retries
    // that member)"
    #[test]
    fn a_retry_re_picks_untried_members_and_a_one_member_group_retries_its_member() {
        let scores = [0.5, 0.5];
        assert_eq!(
            next_member(&[true, false], &[C, C], &scores, true, |_| unreachable!()),
            Some(1)
        );
        // one member, already tried: a retry goes to it, the sibling sweep does not
        assert_eq!(
            next_member(&[true], &[C], &[0.5], true, |_| unreachable!()),
            Some(0)
        );
        assert_eq!(
            next_member(&[true], &[C], &[0.5], false, |_| unreachable!()),
            None
        );
        // every member tried: a retry re-picks among all candidates
        assert_eq!(
            next_member(&[true, true], &[C, C], &[0.1, 0.9], true, draws(&[0, 0])),
            Some(1)
        );
        // ...but never an open one
        assert_eq!(
            next_member(&[true, true], &[OPEN, C], &scores, true, |_| unreachable!()),
            Some(1)
        );
        assert_eq!(
            next_member(&[true], &[OPEN], &[0.5], true, |_| unreachable!()),
            None
        );
        // zero members
        assert_eq!(next_member(&[], &[], &[], true, |_| unreachable!()), None);
    }

    // §11 Hedging: "if the hop's attempt has not committed by then and the next hop is eligible
    // and not open, the next hop starts"; "A hedge counts toward maxAttempts"
    #[test]
    fn a_hedge_starts_after_the_delay_when_uncommitted_and_the_next_hop_can_take_it() {
        let after = Some(ms(300));
        assert!(!hedge_now(ms(299), after, false, true, 1, 8));
        assert!(hedge_now(ms(300), after, false, true, 1, 8), "by then");
        assert!(hedge_now(ms(2000), after, false, true, 1, 8));
        assert!(!hedge_now(ms(300), after, true, true, 1, 8), "committed");
        assert!(!hedge_now(ms(300), after, false, false, 1, 8), "next hop");
        assert!(hedge_now(ms(300), after, false, true, 7, 8));
        assert!(!hedge_now(ms(300), after, false, true, 8, 8), "maxAttempts");
        assert!(!hedge_now(ms(9999), None, false, true, 1, 8), "no hedge");
        assert!(hedge_now(
            Duration::ZERO,
            Some(Duration::ZERO),
            false,
            true,
            1,
            8
        ));
    }

    // §6.5: x-should-retry: false after the gateway's own policy; never on a plain single-hop
    // pass-through or on the gateway's own 429; Retry-After from breakers and upstream
    #[test]
    fn the_caller_retry_hint_follows_the_gateway_policy() {
        let five = Some(Duration::from_secs(5));
        let two = Some(Duration::from_secs(2));
        assert_eq!(retry_hint(false, false, None, None), (true, None));
        assert_eq!(retry_hint(false, false, five, None), (true, five));
        assert_eq!(retry_hint(false, false, None, two), (true, two));
        // the earliest moment a destination may come back
        assert_eq!(retry_hint(false, false, five, two), (true, two));
        assert_eq!(retry_hint(false, false, two, five), (true, two));
        // a single hop, no skip, no retry: passes through as sent
        assert_eq!(retry_hint(true, false, five, two), (false, None));
        // the gateway's own rate limit never carries x-should-retry
        assert_eq!(retry_hint(false, true, five, two), (false, None));
    }

    // §6.5: "Retry-After (whole seconds, rounded up) and retry-after-ms"
    #[test]
    fn retry_after_values_round_up_to_whole_seconds_and_milliseconds() {
        let v = |d| retry_after_values(d);
        assert_eq!(
            v(Duration::ZERO),
            RetryAfterValues {
                seconds: 0,
                millis: 0
            }
        );
        assert_eq!(
            v(ms(1)),
            RetryAfterValues {
                seconds: 1,
                millis: 1
            }
        );
        assert_eq!(
            v(ms(1000)),
            RetryAfterValues {
                seconds: 1,
                millis: 1000
            }
        );
        assert_eq!(
            v(ms(1001)),
            RetryAfterValues {
                seconds: 2,
                millis: 1001
            }
        );
        assert_eq!(
            v(Duration::from_nanos(2_500_000_001)),
            RetryAfterValues {
                seconds: 3,
                millis: 2501
            }
        );
        assert_eq!(v(Duration::MAX).seconds, Duration::MAX.as_secs());
        assert_eq!(v(Duration::MAX).millis, u64::MAX);
    }
}
