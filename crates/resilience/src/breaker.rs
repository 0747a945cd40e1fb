//! The per-destination circuit breaker (SPEC §5.5): closed → open (skipped) → half-open (probing) →
//! closed.
//!
//! [`Breaker`] is a plain state machine. It owns no clock and no lock: every method that depends on
//! time takes `now: Instant`, so the engine passes the real time and tests pass made-up instants
//! without sleeping. The caller decides what a *counted failure* is (SPEC §5.5: an outcome that
//! matched its hop's triggers, or a mid-stream failure; never UNROUTABLE, never ineligible) and
//! reports only those through [`Breaker::on_failure`].
//!
//! Every state change is returned as a [`Transition`] that names the knob that fired, so the caller
//! can log and count it (SPEC §7) without re-deriving why.

use std::fmt;
use std::time::{Duration, Instant};

/// Weight of the newest sample in the health score (SPEC §5.5, §5.8).
pub const HEALTH_ALPHA: f64 = 0.3;
/// Health score of a destination that has never failed.
pub const HEALTH_MAX: f64 = 100.0;

/// The breaker knobs of SPEC §4 `circuitBreaker` / §5.5, already converted to Rust types.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerConfig {
    /// `consecutiveFailures`: counted failures in a row that open the breaker. 0 is treated as 1.
    pub consecutive_failures: u32,
    /// `openMilliseconds`: how long the first open lasts.
    pub open: Duration,
    /// `maxOpenMilliseconds`: cap on any open period, backoff and Retry-After alike.
    pub max_open: Duration,
    /// `backoffMultiplier`: each consecutive re-open lasts this much longer. Values below 1 (or not
    /// finite) are treated as 1.
    pub backoff_multiplier: f64,
    /// `halfOpenProbes`: probe successes needed to close. 0 is treated as 1.
    pub half_open_probes: u32,
    /// `honorRetryAfter`: a counted failure carrying a retry delay opens at once for that long.
    pub honor_retry_after: bool,
    /// `healthThreshold` (0–100): when set, open as soon as the health score falls below it.
    pub health_threshold: Option<f64>,
    /// `restoreHealth` (0–100): the health score given back when the breaker closes.
    pub restore_health: f64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: 5,
            open: Duration::from_secs(30),
            max_open: Duration::from_secs(300),
            backoff_multiplier: 2.0,
            half_open_probes: 3,
            honor_retry_after: true,
            health_threshold: None,
            restore_health: HEALTH_MAX,
        }
    }
}

impl BreakerConfig {
    fn failure_limit(&self) -> u32 {
        self.consecutive_failures.max(1)
    }

    fn probes_needed(&self) -> u32 {
        self.half_open_probes.max(1)
    }

    fn multiplier(&self) -> f64 {
        if self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0 {
            self.backoff_multiplier
        } else {
            1.0
        }
    }

    fn restored_health(&self) -> f64 {
        clamp_health(self.restore_health)
    }

    /// `open × multiplier^reopens`, capped at `max_open`.
    pub fn open_duration(&self, reopens: u32) -> Duration {
        let exponent = i32::try_from(reopens).unwrap_or(i32::MAX);
        let secs = self.open.as_secs_f64() * self.multiplier().powi(exponent);
        match Duration::try_from_secs_f64(secs) {
            Ok(d) => d.min(self.max_open),
            Err(_) => self.max_open,
        }
    }
}

/// Where a breaker is. `Copy`, so it can be put in a log line or a metric as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Requests flow; counted failures are being counted.
    Closed,
    /// Every request skips the destination until `until`.
    Open { until: Instant },
    /// Probing: one request at a time is let through; `successes` probes have succeeded so far.
    HalfOpen {
        successes: u32,
        probe_in_flight: bool,
    },
}

impl BreakerState {
    /// The routing-log / admin label: `CLOSED`, `HALF_OPEN` or `OPEN`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "CLOSED",
            BreakerState::HalfOpen { .. } => "HALF_OPEN",
            BreakerState::Open { .. } => "OPEN",
        }
    }

    /// The `breaker_state` gauge value: 0 closed, 1 half-open, 2 open (SPEC §7.2).
    pub fn gauge(&self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen { .. } => 1,
            BreakerState::Open { .. } => 2,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Proof that a request was admitted as a half-open probe. Hand it back to
/// [`Breaker::on_success`], [`Breaker::on_failure`] or [`Breaker::release_probe`].
///
/// A probe belongs to one half-open period: if the breaker re-opened meanwhile (for example on a
/// Retry-After from another request), a late verdict of that probe counts as an ordinary outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    epoch: u64,
}

/// The answer of [`Breaker::try_acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: go ahead.
    Allowed,
    /// Half-open and no probe was in flight: this request is the probe.
    Probe(Probe),
    /// Open, or half-open with a probe already in flight: skip the destination (`BREAKER_OPEN`).
    Skip,
}

impl Admission {
    pub fn is_admitted(&self) -> bool {
        !matches!(self, Admission::Skip)
    }

    /// The probe to report the outcome with, if this admission is one.
    pub fn probe(&self) -> Option<Probe> {
        match self {
            Admission::Probe(p) => Some(*p),
            _ => None,
        }
    }
}

/// Why a breaker changed state, naming the knob that fired (STYLE habit 12).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TripReason {
    /// `consecutiveFailures` counted failures in a row.
    ConsecutiveFailures(u32),
    /// The health score fell below `healthThreshold`.
    HealthBelowThreshold { score: f64, threshold: f64 },
    /// A counted failure carried a retry delay (`honorRetryAfter`); the delay the upstream asked for,
    /// before the `maxOpenMilliseconds` cap.
    RetryAfter(Duration),
    /// A half-open probe failed.
    ProbeFailed,
    /// `halfOpenProbes` probes succeeded.
    ProbesSucceeded(u32),
    /// Closed by [`Breaker::reset`] (admin API).
    Reset,
    /// The open period ended; probing starts.
    OpenElapsed,
    /// Another replica changed the shared state (SPEC §10); this one adopted it.
    Shared,
}

impl fmt::Display for TripReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TripReason::ConsecutiveFailures(n) => {
                write!(f, "{n} consecutive failures (consecutiveFailures={n})")
            }
            TripReason::HealthBelowThreshold { score, threshold } => write!(
                f,
                "health score {score:.1} fell below {threshold} (healthThreshold={threshold})"
            ),
            TripReason::RetryAfter(d) => write!(
                f,
                "upstream asked to retry after {d:?} (honorRetryAfter=true)"
            ),
            TripReason::ProbeFailed => f.write_str("half-open probe failed"),
            TripReason::ProbesSucceeded(n) => {
                write!(f, "{n} half-open probes succeeded (halfOpenProbes={n})")
            }
            TripReason::Reset => f.write_str("reset"),
            TripReason::OpenElapsed => f.write_str("open period elapsed"),
            TripReason::Shared => f.write_str("state shared by another replica"),
        }
    }
}

/// One state change, to be logged and counted (`breaker_transitions_total{to}`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: TripReason,
    /// How long the breaker stays open, when `to` is [`BreakerState::Open`].
    pub open_for: Option<Duration>,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} -> {}", self.from, self.to)?;
        if let Some(d) = self.open_for {
            write!(f, " for {d:?}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// The part of a breaker that replicas share through a state store (SPEC §10). Times are Unix
/// milliseconds so they mean the same on every host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedBreaker {
    pub state: SharedKind,
    pub consecutive_failures: u32,
    pub reopens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedKind {
    Closed,
    Open { until_unix_ms: u64 },
    HalfOpen { successes: u32 },
}

impl Default for SharedBreaker {
    fn default() -> Self {
        SharedBreaker {
            state: SharedKind::Closed,
            consecutive_failures: 0,
            reopens: 0,
        }
    }
}

/// The breaker of one destination (target + model).
///
/// Time-driven change (open → half-open) happens in [`Breaker::poll`], which
/// [`Breaker::try_acquire`] calls first; outcome reports act on the state as it stands.
#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    consecutive_failures: u32,
    health: f64,
    reopens: u32,
    probe_epoch: u64,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Breaker {
        let health = config.restored_health();
        Breaker {
            config,
            state: BreakerState::Closed,
            consecutive_failures: 0,
            health,
            reopens: 0,
            probe_epoch: 0,
        }
    }

    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// Swap the policy (config reload). The state is kept; new numbers apply from the next event.
    pub fn set_config(&mut self, config: BreakerConfig) {
        self.config = config;
    }

    /// The state as of `now`, without changing anything: an open breaker whose time has passed reads
    /// as half-open with no probe in flight (which is what [`Breaker::try_acquire`] will find).
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            BreakerState::Open { until } if now >= until => BreakerState::HalfOpen {
                successes: 0,
                probe_in_flight: false,
            },
            s => s,
        }
    }

    /// True when [`Breaker::try_acquire`] would admit a request now: closed, or half-open with no
    /// probe in flight. This is the P2C candidate test of SPEC §5.8.
    pub fn can_admit(&self, now: Instant) -> bool {
        matches!(
            self.state(now),
            BreakerState::Closed
                | BreakerState::HalfOpen {
                    probe_in_flight: false,
                    ..
                }
        )
    }

    /// Apply time: an open breaker whose period has passed becomes half-open.
    pub fn poll(&mut self, now: Instant) -> Option<Transition> {
        match self.state {
            BreakerState::Open { until } if now >= until => {
                let to = BreakerState::HalfOpen {
                    successes: 0,
                    probe_in_flight: false,
                };
                Some(self.move_to(to, TripReason::OpenElapsed, None))
            }
            _ => None,
        }
    }

    /// Ask to send a request. Closed → [`Admission::Allowed`]; open → [`Admission::Skip`];
    /// half-open → [`Admission::Probe`] when no probe is in flight (it is now), else `Skip`.
    /// The transition is the open → half-open change, when this call made it.
    pub fn try_acquire(&mut self, now: Instant) -> (Admission, Option<Transition>) {
        let transition = self.poll(now);
        let admission = match &mut self.state {
            BreakerState::Closed => Admission::Allowed,
            BreakerState::Open { .. } => Admission::Skip,
            BreakerState::HalfOpen {
                probe_in_flight, ..
            } => {
                if *probe_in_flight {
                    Admission::Skip
                } else {
                    *probe_in_flight = true;
                    self.probe_epoch = self.probe_epoch.wrapping_add(1);
                    Admission::Probe(Probe {
                        epoch: self.probe_epoch,
                    })
                }
            }
        };
        (admission, transition)
    }

    /// A successful attempt. Resets the consecutive-failure count and raises the health score; a
    /// probe success counts toward closing, and the `halfOpenProbes`-th one closes the breaker.
    pub fn on_success(&mut self, probe: Option<Probe>) -> Option<Transition> {
        self.record_health(HEALTH_MAX);
        self.consecutive_failures = 0;
        if !self.is_current_probe(probe) {
            return None;
        }
        let BreakerState::HalfOpen { successes, .. } = self.state else {
            return None;
        };
        let successes = successes.saturating_add(1);
        if successes >= self.config.probes_needed() {
            self.reopens = 0;
            self.health = self.config.restored_health();
            Some(self.move_to(
                BreakerState::Closed,
                TripReason::ProbesSucceeded(successes),
                None,
            ))
        } else {
            self.state = BreakerState::HalfOpen {
                successes,
                probe_in_flight: false,
            };
            None
        }
    }

    /// A counted failure (the caller has already decided it counts). `retry_after` is the delay the
    /// upstream asked for, if any (see [`crate::parse_retry_after`]).
    ///
    /// - Closed: opens on a retry delay (when honoured), on the `consecutiveFailures`-th failure in
    ///   a row, or when the health score falls below `healthThreshold` — checked in that order.
    /// - Half-open: a probe failure re-opens with backoff; a non-probe failure (a request admitted
    ///   before the breaker opened) re-opens only when it carries a retry delay.
    /// - Open: a retry delay that ends later than the current period extends it (no transition).
    ///
    /// A honoured retry delay sets the open period on its own (no backoff), capped at
    /// `maxOpenMilliseconds` so one header cannot blackhole a destination; a zero delay is no hint.
    pub fn on_failure(
        &mut self,
        now: Instant,
        probe: Option<Probe>,
        retry_after: Option<Duration>,
    ) -> Option<Transition> {
        self.record_health(0.0);
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        let retry_after = retry_after.filter(|d| self.config.honor_retry_after && !d.is_zero());
        let is_probe = self.is_current_probe(probe);

        match self.state {
            BreakerState::Closed => {
                self.reopens = 0;
                if let Some(asked) = retry_after {
                    let open_for = asked.min(self.config.max_open);
                    return Some(self.open(now, open_for, TripReason::RetryAfter(asked)));
                }
                if self.consecutive_failures >= self.config.failure_limit() {
                    let open_for = self.config.open_duration(0);
                    let reason = TripReason::ConsecutiveFailures(self.consecutive_failures);
                    return Some(self.open(now, open_for, reason));
                }
                match self.config.health_threshold {
                    Some(threshold) if self.health < threshold => {
                        let open_for = self.config.open_duration(0);
                        let reason = TripReason::HealthBelowThreshold {
                            score: self.health,
                            threshold,
                        };
                        Some(self.open(now, open_for, reason))
                    }
                    _ => None,
                }
            }
            BreakerState::HalfOpen { .. } => {
                let reason = match retry_after {
                    Some(asked) => TripReason::RetryAfter(asked),
                    None if is_probe => TripReason::ProbeFailed,
                    None => return None,
                };
                self.reopens = self.reopens.saturating_add(1);
                let open_for = match retry_after {
                    Some(asked) => asked.min(self.config.max_open),
                    None => self.config.open_duration(self.reopens),
                };
                Some(self.open(now, open_for, reason))
            }
            BreakerState::Open { until } => {
                if let Some(asked) = retry_after {
                    let later = deadline(now, asked.min(self.config.max_open));
                    if later > until {
                        self.state = BreakerState::Open { until: later };
                    }
                }
                None
            }
        }
    }

    /// A probe ended without a verdict (ineligible, cancelled, not counted): let the next request
    /// probe instead. Stale probes are ignored.
    pub fn release_probe(&mut self, probe: Probe) {
        if self.is_current_probe(Some(probe)) {
            if let BreakerState::HalfOpen {
                probe_in_flight, ..
            } = &mut self.state
            {
                *probe_in_flight = false;
            }
        }
    }

    /// Close the breaker and forget its history (admin `reset`): counts and backoff start over and
    /// the health score goes back to `restoreHealth`. The transition is `None` when it was closed.
    pub fn reset(&mut self) -> Option<Transition> {
        self.consecutive_failures = 0;
        self.reopens = 0;
        self.health = self.config.restored_health();
        if self.state == BreakerState::Closed {
            return None;
        }
        Some(self.move_to(BreakerState::Closed, TripReason::Reset, None))
    }

    /// The health score: EWMA (α = 0.3) of success = 100 / failure = 0, starting at 100.
    pub fn health(&self) -> f64 {
        self.health
    }

    /// Counted failures since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// When the current open period ends, if the breaker is open.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state {
            BreakerState::Open { until } => Some(until),
            _ => None,
        }
    }

    /// Consecutive re-opens since the breaker last closed (0 for the first open): the backoff
    /// exponent of the current or next open period.
    pub fn reopen_count(&self) -> u32 {
        self.reopens
    }

    /// The shareable part of the state. `now`/`now_unix_ms` are the same moment on the two clocks.
    pub fn export(&self, now: Instant, now_unix_ms: u64) -> SharedBreaker {
        let state = match self.state {
            BreakerState::Closed => SharedKind::Closed,
            BreakerState::Open { until } => SharedKind::Open {
                until_unix_ms: now_unix_ms.saturating_add(
                    u64::try_from(until.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX),
                ),
            },
            BreakerState::HalfOpen { successes, .. } => SharedKind::HalfOpen { successes },
        };
        SharedBreaker {
            state,
            consecutive_failures: self.consecutive_failures,
            reopens: self.reopens,
        }
    }

    /// Adopts a shared state. A local probe in flight stays in flight when the shared state is
    /// half-open too. Returns the transition when the state kind changed.
    pub fn adopt(
        &mut self,
        shared: &SharedBreaker,
        now: Instant,
        now_unix_ms: u64,
    ) -> Option<Transition> {
        self.consecutive_failures = shared.consecutive_failures;
        self.reopens = shared.reopens;
        let to = match shared.state {
            SharedKind::Closed => BreakerState::Closed,
            SharedKind::Open { until_unix_ms } => BreakerState::Open {
                until: deadline(
                    now,
                    Duration::from_millis(until_unix_ms.saturating_sub(now_unix_ms)),
                ),
            },
            SharedKind::HalfOpen { successes } => BreakerState::HalfOpen {
                successes,
                probe_in_flight: matches!(
                    self.state,
                    BreakerState::HalfOpen {
                        probe_in_flight: true,
                        ..
                    }
                ),
            },
        };
        let changed = self.state.as_str() != to.as_str();
        if !changed {
            self.state = to;
            return None;
        }
        if to == BreakerState::Closed {
            self.health = self.config.restored_health();
        }
        let open_for = match to {
            BreakerState::Open { until } => Some(until.saturating_duration_since(now)),
            _ => None,
        };
        Some(self.move_to(to, TripReason::Shared, open_for))
    }

    fn is_current_probe(&self, probe: Option<Probe>) -> bool {
        matches!(
            (probe, self.state),
            (
                Some(Probe { epoch }),
                BreakerState::HalfOpen {
                    probe_in_flight: true,
                    ..
                }
            ) if epoch == self.probe_epoch
        )
    }

    fn record_health(&mut self, sample: f64) {
        self.health = clamp_health(HEALTH_ALPHA * sample + (1.0 - HEALTH_ALPHA) * self.health);
    }

    fn open(&mut self, now: Instant, open_for: Duration, reason: TripReason) -> Transition {
        let to = BreakerState::Open {
            until: deadline(now, open_for),
        };
        self.move_to(to, reason, Some(open_for))
    }

    fn move_to(
        &mut self,
        to: BreakerState,
        reason: TripReason,
        open_for: Option<Duration>,
    ) -> Transition {
        let from = self.state;
        self.state = to;
        Transition {
            from,
            to,
            reason,
            open_for,
        }
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::new(BreakerConfig::default())
    }
}

fn clamp_health(h: f64) -> f64 {
    if h.is_nan() {
        HEALTH_MAX
    } else {
        h.clamp(0.0, HEALTH_MAX)
    }
}

/// `now + d`, shortened if that would overflow `Instant` (only for absurd configured durations).
fn deadline(now: Instant, mut d: Duration) -> Instant {
    loop {
        if let Some(t) = now.checked_add(d) {
            return t;
        }
        d /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn fail(b: &mut Breaker, now: Instant) -> Option<Transition> {
        b.on_failure(now, None, None)
    }

    /// Opens a default breaker with five counted failures at `t0`.
    fn opened(t0: Instant) -> Breaker {
        let mut b = Breaker::default();
        for _ in 0..4 {
            assert_eq!(fail(&mut b, t0), None);
        }
        let t = fail(&mut b, t0);
        assert!(t.is_some());
        b
    }

    fn probe(b: &mut Breaker, now: Instant) -> Probe {
        match b.try_acquire(now).0 {
            Admission::Probe(p) => p,
            other => panic!("expected a probe, got {other:?}"),
        }
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = BreakerConfig::default();
        assert_eq!(c.consecutive_failures, 5);
        assert_eq!(c.open, secs(30));
        assert_eq!(c.max_open, secs(300));
        assert_eq!(c.backoff_multiplier, 2.0);
        assert_eq!(c.half_open_probes, 3);
        assert!(c.honor_retry_after);
        assert_eq!(c.health_threshold, None);
        assert_eq!(c.restore_health, 100.0);
        assert_eq!(Breaker::default().health(), 100.0);
    }

    #[test]
    fn five_consecutive_failures_open_for_thirty_seconds() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        for i in 1..=4 {
            assert_eq!(fail(&mut b, t0), None, "failure {i} must not open");
            assert_eq!(b.state(t0), BreakerState::Closed);
            assert_eq!(b.try_acquire(t0).0, Admission::Allowed);
        }
        let t = fail(&mut b, t0).expect("fifth failure opens");
        assert_eq!(t.from, BreakerState::Closed);
        assert_eq!(
            t.to,
            BreakerState::Open {
                until: t0 + secs(30)
            }
        );
        assert_eq!(t.reason, TripReason::ConsecutiveFailures(5));
        assert_eq!(t.open_for, Some(secs(30)));
        assert_eq!(
            t.reason.to_string(),
            "5 consecutive failures (consecutiveFailures=5)"
        );
        assert_eq!(
            t.to_string(),
            "CLOSED -> OPEN for 30s: 5 consecutive failures (consecutiveFailures=5)"
        );
        assert_eq!(b.open_until(), Some(t0 + secs(30)));
        assert_eq!(b.reopen_count(), 0);
    }

    #[test]
    fn open_breaker_skips_until_its_time_passes() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        for dt in [0, 1, 29] {
            let now = t0 + secs(dt);
            assert_eq!(b.try_acquire(now), (Admission::Skip, None));
            assert_eq!(b.state(now).as_str(), "OPEN");
            assert!(!b.can_admit(now));
        }
        // Just before the end it is still open.
        let almost = t0 + secs(30) - Duration::from_millis(1);
        assert_eq!(b.try_acquire(almost).0, Admission::Skip);
    }

    #[test]
    fn half_open_admits_exactly_one_probe_at_a_time() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        assert_eq!(
            b.state(t30),
            BreakerState::HalfOpen {
                successes: 0,
                probe_in_flight: false
            }
        );
        assert!(b.can_admit(t30));

        let (adm, tr) = b.try_acquire(t30);
        let p = adm
            .probe()
            .expect("first request after the open period is a probe");
        let tr = tr.expect("the open -> half-open change is reported");
        assert_eq!(tr.reason, TripReason::OpenElapsed);
        assert_eq!(tr.to.as_str(), "HALF_OPEN");

        // While the probe is in flight everything else skips, as if open.
        for _ in 0..3 {
            assert_eq!(b.try_acquire(t30), (Admission::Skip, None));
        }
        assert!(!b.can_admit(t30));
        assert_eq!(b.on_success(Some(p)), None);
        // The next probe may go once the first reported.
        let _ = probe(&mut b, t30);
        assert_eq!(b.try_acquire(t30).0, Admission::Skip);
    }

    #[test]
    fn three_probe_successes_close_and_restore_health() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        for n in 1..=2 {
            let p = probe(&mut b, t30);
            assert_eq!(b.on_success(Some(p)), None);
            assert_eq!(
                b.state(t30),
                BreakerState::HalfOpen {
                    successes: n,
                    probe_in_flight: false
                }
            );
        }
        let p = probe(&mut b, t30);
        let t = b.on_success(Some(p)).expect("third probe success closes");
        assert_eq!(t.to, BreakerState::Closed);
        assert_eq!(t.reason, TripReason::ProbesSucceeded(3));
        assert_eq!(
            t.reason.to_string(),
            "3 half-open probes succeeded (halfOpenProbes=3)"
        );
        assert_eq!(b.health(), 100.0, "closing restores restoreHealth");
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.try_acquire(t30).0, Admission::Allowed);
    }

    #[test]
    fn probe_failure_reopens_for_twice_as_long_and_backoff_caps() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let mut now = t0 + secs(30);
        // 60, 120, 240, then capped at 300 (5 min) for every further re-open.
        for (reopens, expected) in [(1, 60), (2, 120), (3, 240), (4, 300), (5, 300), (6, 300)] {
            let p = probe(&mut b, now);
            let t = b
                .on_failure(now, Some(p), None)
                .expect("probe failure re-opens");
            assert_eq!(t.reason, TripReason::ProbeFailed);
            assert_eq!(t.from.as_str(), "HALF_OPEN");
            assert_eq!(t.open_for, Some(secs(expected)), "re-open #{reopens}");
            assert_eq!(b.open_until(), Some(now + secs(expected)));
            assert_eq!(b.reopen_count(), reopens);
            assert_eq!(b.try_acquire(now + secs(expected) - SEC).0, Admission::Skip);
            now += secs(expected);
        }
    }

    #[test]
    fn closing_resets_the_backoff_multiplier() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        let p = probe(&mut b, t30);
        b.on_failure(t30, Some(p), None); // re-open for 60 s
        let t90 = t30 + secs(60);
        for _ in 0..3 {
            let p = probe(&mut b, t90);
            b.on_success(Some(p));
        }
        assert_eq!(b.state(t90), BreakerState::Closed);
        assert_eq!(b.reopen_count(), 0);
        for _ in 0..4 {
            fail(&mut b, t90);
        }
        let t = fail(&mut b, t90).expect("opens again");
        assert_eq!(t.open_for, Some(secs(30)), "back to openMilliseconds");
    }

    #[test]
    fn any_success_resets_the_consecutive_count() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        for _ in 0..4 {
            assert_eq!(fail(&mut b, t0), None);
        }
        assert_eq!(b.on_success(None), None);
        assert_eq!(b.consecutive_failures(), 0);
        for _ in 0..4 {
            assert_eq!(fail(&mut b, t0), None);
        }
        assert_eq!(b.state(t0), BreakerState::Closed);
        assert_eq!(b.consecutive_failures(), 4);
        assert!(fail(&mut b, t0).is_some(), "the fifth in a row opens");
    }

    #[test]
    fn retry_after_opens_at_once_for_that_long() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        let t = b
            .on_failure(t0, None, Some(secs(12)))
            .expect("opens on the first failure");
        assert_eq!(t.reason, TripReason::RetryAfter(secs(12)));
        assert_eq!(t.open_for, Some(secs(12)));
        assert_eq!(b.open_until(), Some(t0 + secs(12)));
        assert_eq!(
            t.reason.to_string(),
            "upstream asked to retry after 12s (honorRetryAfter=true)"
        );
        assert_eq!(b.try_acquire(t0 + secs(11)).0, Admission::Skip);
        assert!(b.try_acquire(t0 + secs(12)).0.probe().is_some());
    }

    #[test]
    fn retry_after_is_capped_at_max_open_and_ignored_when_not_honoured() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        let t = b.on_failure(t0, None, Some(secs(3600))).expect("opens");
        assert_eq!(t.reason, TripReason::RetryAfter(secs(3600)));
        assert_eq!(t.open_for, Some(secs(300)));

        let mut b = Breaker::new(BreakerConfig {
            honor_retry_after: false,
            ..BreakerConfig::default()
        });
        assert_eq!(b.on_failure(t0, None, Some(secs(12))), None);
        assert_eq!(b.consecutive_failures(), 1, "still a counted failure");

        let mut b = Breaker::default();
        assert_eq!(
            b.on_failure(t0, None, Some(Duration::ZERO)),
            None,
            "a zero delay is no hint"
        );
    }

    #[test]
    fn retry_after_extends_an_open_breaker_and_reopens_a_half_open_one() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        // A late failure from a request admitted before opening: extends, never shortens.
        assert_eq!(b.on_failure(t0 + secs(1), None, Some(secs(5))), None);
        assert_eq!(b.open_until(), Some(t0 + secs(30)));
        assert_eq!(b.on_failure(t0 + secs(1), None, Some(secs(59))), None);
        assert_eq!(b.open_until(), Some(t0 + secs(60)));

        let t60 = t0 + secs(60);
        let p = probe(&mut b, t60);
        // A probe failure with a retry delay uses the delay, not the backoff.
        let t = b.on_failure(t60, Some(p), Some(secs(7))).expect("re-opens");
        assert_eq!(t.reason, TripReason::RetryAfter(secs(7)));
        assert_eq!(t.open_for, Some(secs(7)));
        assert_eq!(b.reopen_count(), 1);
    }

    #[test]
    fn non_probe_outcomes_do_not_move_a_half_open_breaker() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        let p = probe(&mut b, t30);
        // Late outcomes of requests admitted while closed (or a forced last hop).
        assert_eq!(b.on_failure(t30, None, None), None);
        assert_eq!(b.on_success(None), None);
        assert_eq!(
            b.state(t30),
            BreakerState::HalfOpen {
                successes: 0,
                probe_in_flight: true
            }
        );
        assert!(b.on_success(Some(p)).is_none());
    }

    #[test]
    fn stale_probes_count_as_ordinary_outcomes() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        let old = probe(&mut b, t30);
        // Another request's Retry-After re-opens while the probe is still out.
        assert!(b.on_failure(t30, None, Some(secs(10))).is_some());
        let t40 = t30 + secs(10);
        let current = probe(&mut b, t40);
        // The old probe's verdict arrives: it must not count for (or release) the new one.
        assert_eq!(b.on_success(Some(old)), None);
        b.release_probe(old);
        assert_eq!(b.try_acquire(t40).0, Admission::Skip);
        assert_eq!(
            b.state(t40),
            BreakerState::HalfOpen {
                successes: 0,
                probe_in_flight: true
            }
        );
        b.release_probe(current);
        assert!(b.try_acquire(t40).0.probe().is_some());
    }

    #[test]
    fn release_probe_lets_the_next_request_probe() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t30 = t0 + secs(30);
        let p = probe(&mut b, t30);
        assert_eq!(b.try_acquire(t30).0, Admission::Skip);
        b.release_probe(p);
        let p2 = probe(&mut b, t30);
        assert_ne!(p, p2);
        assert_eq!(
            b.state(t30),
            BreakerState::HalfOpen {
                successes: 0,
                probe_in_flight: true
            }
        );
    }

    #[test]
    fn health_threshold_opens_on_the_ewma() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig {
            health_threshold: Some(50.0),
            ..BreakerConfig::default()
        });
        // 100 → 70 → 49: the second failure falls below 50.
        assert_eq!(fail(&mut b, t0), None);
        assert!((b.health() - 70.0).abs() < 1e-9);
        let t = fail(&mut b, t0).expect("health 49 < 50 opens");
        match t.reason {
            TripReason::HealthBelowThreshold { score, threshold } => {
                assert!((score - 49.0).abs() < 1e-9);
                assert_eq!(threshold, 50.0);
            }
            other => panic!("unexpected reason {other:?}"),
        }
        assert_eq!(
            t.reason.to_string(),
            "health score 49.0 fell below 50 (healthThreshold=50)"
        );
        assert_eq!(t.open_for, Some(secs(30)));
    }

    #[test]
    fn health_is_an_ewma_of_successes_and_failures() {
        let mut b = Breaker::default();
        let t0 = Instant::now();
        fail(&mut b, t0);
        fail(&mut b, t0);
        assert!((b.health() - 49.0).abs() < 1e-9);
        b.on_success(None);
        assert!((b.health() - (0.3 * 100.0 + 0.7 * 49.0)).abs() < 1e-9);
        // Without a threshold, health alone never opens.
        assert_eq!(b.state(t0), BreakerState::Closed);
    }

    #[test]
    fn closing_restores_the_configured_health() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig {
            restore_health: 60.0,
            half_open_probes: 1,
            ..BreakerConfig::default()
        });
        assert_eq!(b.health(), 60.0);
        for _ in 0..5 {
            fail(&mut b, t0);
        }
        let t30 = t0 + secs(30);
        let p = probe(&mut b, t30);
        assert!(b.on_success(Some(p)).is_some());
        assert_eq!(b.health(), 60.0);
    }

    #[test]
    fn reset_closes_and_forgets() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let t = b.reset().expect("open -> closed");
        assert_eq!(t.reason, TripReason::Reset);
        assert_eq!(t.to, BreakerState::Closed);
        assert_eq!(b.state(t0), BreakerState::Closed);
        assert_eq!(b.health(), 100.0);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.reopen_count(), 0);
        assert_eq!(b.open_until(), None);
        assert_eq!(b.try_acquire(t0).0, Admission::Allowed);
        assert_eq!(b.reset(), None, "already closed");
    }

    #[test]
    fn labels_and_gauges() {
        let now = Instant::now();
        let states = [
            (BreakerState::Closed, "CLOSED", 0),
            (
                BreakerState::HalfOpen {
                    successes: 0,
                    probe_in_flight: false,
                },
                "HALF_OPEN",
                1,
            ),
            (BreakerState::Open { until: now }, "OPEN", 2),
        ];
        for (s, label, gauge) in states {
            assert_eq!(s.as_str(), label);
            assert_eq!(s.to_string(), label);
            assert_eq!(s.gauge(), gauge);
        }
    }

    #[test]
    fn odd_configs_do_not_panic() {
        let t0 = Instant::now();
        let c = BreakerConfig {
            consecutive_failures: 0,
            half_open_probes: 0,
            backoff_multiplier: f64::NAN,
            max_open: Duration::MAX,
            ..BreakerConfig::default()
        };
        assert_eq!(c.open_duration(1000), secs(30), "bad multiplier acts as 1");
        let mut b = Breaker::new(c);
        assert!(fail(&mut b, t0).is_some(), "0 failures acts as 1");
        let p = probe(&mut b, t0 + secs(30));
        assert!(b.on_success(Some(p)).is_some(), "0 probes acts as 1");

        let huge = BreakerConfig {
            backoff_multiplier: 1e300,
            ..BreakerConfig::default()
        };
        assert_eq!(huge.open_duration(u32::MAX), secs(300));
        let mut b = Breaker::new(BreakerConfig {
            max_open: Duration::MAX,
            ..BreakerConfig::default()
        });
        assert!(b.on_failure(t0, None, Some(Duration::MAX)).is_some());
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;

    #[test]
    fn export_then_adopt_carries_the_state_across_clocks() {
        let cfg = BreakerConfig::default();
        let t0 = Instant::now();
        let mut a = Breaker::new(cfg.clone());
        for _ in 0..5 {
            a.on_failure(t0, None, None);
        }
        let shared = a.export(t0, 1_000_000);
        assert_eq!(
            shared.state,
            SharedKind::Open {
                until_unix_ms: 1_030_000
            }
        );
        assert_eq!(shared.consecutive_failures, 5);

        // Another replica, whose monotonic clock started elsewhere, 10 s later in wall time.
        let t1 = Instant::now();
        let mut b = Breaker::new(cfg);
        let t = b.adopt(&shared, t1, 1_010_000).unwrap();
        assert_eq!(t.reason, TripReason::Shared);
        assert_eq!(b.open_until(), Some(t1 + Duration::from_millis(20_000)));
        assert_eq!(
            b.adopt(&shared, t1, 1_010_000),
            None,
            "no change, no transition"
        );
        let closed = SharedBreaker::default();
        assert_eq!(
            b.adopt(&closed, t1, 1_010_000).map(|t| t.to),
            Some(BreakerState::Closed)
        );
        assert_eq!(b.consecutive_failures(), 0);
    }
}
