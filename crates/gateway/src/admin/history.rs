//! The dashboard's memory (issue 19): per destination, the last 15 minutes of counters and breaker
//! states in fixed rings, and the last routing records.
//!
//! Both are bounded and never grow:
//! - [`History`]: [`SLOTS`] samples of [`Sample`] (32 bytes) per destination, one every
//!   [`SAMPLE_EVERY`], in a boxed array allocated once per destination (~5.8 KB each). Destinations
//!   are those of `Health::snapshot()`: the config's own plus at most
//!   `server.maxDynamicDestinations` others; a destination that leaves the snapshot (reload,
//!   eviction) leaves the history at the next sample.
//! - [`Decisions`]: the last [`DECISIONS`] routing records (they never hold prompt text).
//!
//! The history is fed off the request path: a task samples `Health::snapshot()` and keeps the
//! deltas of its counters. The decisions ring takes a copy of each finished record.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::observe::routing_log::{RequestOutcome, RoutingRecord};
use crate::state::breakers::Snapshot;
use crate::state::Health;

/// One sample every 5 s …
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// … for 15 minutes.
pub const SLOTS: usize = 180;
/// Routing records kept for the decisions feed.
pub const DECISIONS: usize = 200;

/// Breaker states, ordered by how bad they are (a slot keeps the worst it saw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Seen {
    #[default]
    Closed = 0,
    HalfOpen = 1,
    Open = 2,
}

impl Seen {
    fn from_label(s: &str) -> Seen {
        match s {
            "OPEN" => Seen::Open,
            "HALF_OPEN" => Seen::HalfOpen,
            _ => Seen::Closed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Seen::Closed => "CLOSED",
            Seen::HalfOpen => "HALF_OPEN",
            Seen::Open => "OPEN",
        }
    }
}

/// One slot: what happened to a destination since the previous sample.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// When it was taken, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Attempts sent, and how they ended, during the slot.
    pub requests: u32,
    pub successes: u32,
    pub failures: u32,
    /// The destination's time-to-first-byte EWMA at the sample (NaN: none yet).
    pub ttfb_ms: f32,
    /// The breaker state at the sample, and the worst one seen during the slot.
    pub state: Seen,
    pub worst: Seen,
    pub disabled: bool,
}

/// One destination's ring plus the counters of its previous sample (for deltas).
struct Series {
    slots: Box<[Sample; SLOTS]>,
    /// Where the next sample goes, and how many slots hold one.
    head: usize,
    len: usize,
    last: Counters,
}

#[derive(Clone, Copy, Default)]
struct Counters {
    attempts: u64,
    successes: u64,
    failures: u64,
    reopens: u32,
    transition_at: Option<SystemTime>,
    state: Seen,
}

impl Series {
    fn new(s: &Snapshot) -> Series {
        Series {
            slots: Box::new([Sample::default(); SLOTS]),
            head: 0,
            len: 0,
            last: counters(s),
        }
    }

    fn push(&mut self, s: &Snapshot, at_ms: u64) {
        let now = counters(s);
        let prev = self.last;
        let mut worst = now.state;
        // An opening since the previous sample, even if it is over already.
        let reopened = now.reopens > prev.reopens
            || (now.transition_at != prev.transition_at
                && s.last_transition
                    .as_ref()
                    .is_some_and(|(to, _, _)| to == "OPEN"));
        if reopened || prev.state == Seen::Open {
            // Open at the start of the slot, or opened during it.
            worst = worst.max(Seen::Open);
        }
        if prev.state == Seen::HalfOpen {
            worst = worst.max(Seen::HalfOpen);
        }
        let delta = |a: u64, b: u64| u32::try_from(a.saturating_sub(b)).unwrap_or(u32::MAX);
        self.slots[self.head] = Sample {
            at_ms,
            requests: delta(now.attempts, prev.attempts),
            successes: delta(now.successes, prev.successes),
            failures: delta(now.failures, prev.failures),
            ttfb_ms: s.ttfb_ewma_ms.map_or(f32::NAN, |v| v as f32),
            state: now.state,
            worst,
            disabled: s.disabled,
        };
        self.head = (self.head + 1) % SLOTS;
        self.len = (self.len + 1).min(SLOTS);
        self.last = now;
    }

    /// Oldest first.
    fn samples(&self) -> impl Iterator<Item = &Sample> {
        let start = (self.head + SLOTS - self.len) % SLOTS;
        (0..self.len).map(move |i| &self.slots[(start + i) % SLOTS])
    }
}

fn counters(s: &Snapshot) -> Counters {
    Counters {
        attempts: s.attempts,
        successes: s.successes,
        failures: s.failures,
        reopens: s.reopens,
        transition_at: s.last_transition.as_ref().map(|(_, _, at)| *at),
        state: Seen::from_label(s.state.as_str()),
    }
}

/// Per-destination rings of [`SLOTS`] samples.
#[derive(Default)]
pub struct History {
    series: Mutex<HashMap<(String, String), Series>>,
    /// Set by [`History::sample_by_hand`]: the sampler task leaves the sampling to the caller.
    by_hand: AtomicBool,
}

impl History {
    /// Stops the periodic sampler from sampling (its first tick is [`SAMPLE_EVERY`] after the
    /// start): from now on only [`History::sample`] calls add samples. For tests that step the
    /// history with a manual clock.
    pub fn sample_by_hand(&self) {
        self.by_hand.store(true, Ordering::Relaxed);
    }

    /// Takes one sample of every destination `health` knows (the sampler task calls this every
    /// [`SAMPLE_EVERY`]; tests call it to step the history).
    pub fn sample(&self, health: &Health) {
        let snapshot = health.snapshot();
        let at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let Ok(mut series) = self.series.lock() else {
            return;
        };
        // Destinations gone from the snapshot leave the history.
        series.retain(|(t, m), _| snapshot.iter().any(|s| s.target == *t && s.model == *m));
        for s in &snapshot {
            let key = (s.target.clone(), s.model.clone());
            match series.get_mut(&key) {
                Some(ring) => ring.push(s, at_ms),
                None => {
                    // The first sample only sets the baseline; the counters so far are older
                    // than the window.
                    let mut ring = Series::new(s);
                    ring.push(s, at_ms);
                    series.insert(key, ring);
                }
            }
        }
    }

    /// Every destination's samples, oldest first, sorted by target and model.
    pub fn series(&self) -> Vec<(String, String, Vec<Sample>)> {
        let Ok(series) = self.series.lock() else {
            return Vec::new();
        };
        let mut out: Vec<_> = series
            .iter()
            .map(|((t, m), ring)| (t.clone(), m.clone(), ring.samples().copied().collect()))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Destinations held and the slots each holds (for the bound test).
    pub fn footprint(&self) -> (usize, usize) {
        self.series.lock().map_or((0, 0), |s| {
            (
                s.len(),
                s.values().map(|r| r.slots.len()).max().unwrap_or(0),
            )
        })
    }

    /// Samples every `every` until `stop` turns true.
    pub async fn run(
        shared: Arc<crate::server::Shared>,
        every: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let history = &shared.dash.history;
                    if !history.by_hand.load(Ordering::Relaxed) {
                        history.sample(&shared.health);
                    }
                }
                _ = stop.changed() => return,
            }
        }
    }
}

/// The sampler task of a gateway: [`History::run`] every [`SAMPLE_EVERY`] until shutdown.
pub fn spawn_sampler(
    shared: Arc<crate::server::Shared>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        History::run(shared, SAMPLE_EVERY, stop).await;
        Ok(())
    })
}

/// The last [`DECISIONS`] routing records.
#[derive(Default)]
pub struct Decisions {
    ring: Mutex<VecDeque<Arc<RoutingRecord>>>,
}

/// Which records `GET /admin/decisions` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    All,
    /// Answered by a hop after the first.
    Fallbacks,
    /// Ended in an error or were refused.
    Errors,
}

impl Decisions {
    /// Keeps a copy of `rec` (the oldest leaves when the ring is full).
    pub fn push(&self, rec: Arc<RoutingRecord>) {
        if let Ok(mut ring) = self.ring.lock() {
            if ring.len() == DECISIONS {
                ring.pop_front();
            }
            ring.push_back(rec);
        }
    }

    /// The newest `limit` records that pass `only`, newest first.
    pub fn recent(&self, limit: usize, only: Only) -> Vec<Arc<RoutingRecord>> {
        let Ok(ring) = self.ring.lock() else {
            return Vec::new();
        };
        ring.iter()
            .rev()
            .filter(|r| match only {
                Only::All => true,
                Only::Fallbacks => r.fallback_hop.is_some_and(|h| h > 0),
                Only::Errors => {
                    matches!(r.outcome, RequestOutcome::Error | RequestOutcome::Rejected)
                }
            })
            .take(limit)
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.ring.lock().map_or(0, |r| r.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the dashboard keeps: [`History`] and [`Decisions`].
#[derive(Default)]
pub struct Dash {
    pub history: History,
    pub decisions: Decisions,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sidetrack_resilience::BreakerState;

    fn snap(attempts: u64, state: BreakerState) -> Snapshot {
        Snapshot {
            target: "t".into(),
            model: "m".into(),
            state,
            disabled: false,
            open_remaining: None,
            consecutive_failures: 0,
            health: 100.0,
            ttfb_ewma_ms: Some(12.5),
            in_flight: 0,
            attempts,
            successes: attempts,
            failures: 0,
            skips: 0,
            reopens: 0,
            last_transition: None,
        }
    }

    #[test]
    fn a_ring_never_holds_more_than_its_slots() {
        let mut ring = Series::new(&snap(0, BreakerState::Closed));
        let before = std::mem::size_of_val(&*ring.slots);
        for i in 1..=(3 * SLOTS as u64 + 7) {
            ring.push(&snap(i * 2, BreakerState::Closed), i);
            assert!(ring.len <= SLOTS);
        }
        assert_eq!(ring.len, SLOTS);
        assert_eq!(ring.slots.len(), SLOTS);
        assert_eq!(std::mem::size_of_val(&*ring.slots), before);
        let samples: Vec<_> = ring.samples().collect();
        assert_eq!(samples.len(), SLOTS);
        // Oldest first, and the newest is the last pushed; each slot holds its own delta.
        assert_eq!(samples[SLOTS - 1].at_ms, 3 * SLOTS as u64 + 7);
        assert_eq!(samples[0].at_ms, 3 * SLOTS as u64 + 7 - (SLOTS as u64 - 1));
        assert!(samples.iter().all(|s| s.requests == 2));
    }

    #[test]
    fn a_slot_keeps_the_worst_state_it_saw() {
        let open = BreakerState::Open {
            until: std::time::Instant::now(),
        };
        let half = BreakerState::HalfOpen {
            successes: 0,
            probe_in_flight: false,
        };
        let mut ring = Series::new(&snap(0, BreakerState::Closed));
        ring.push(&snap(0, open), 1);
        ring.push(&snap(0, half), 2);
        ring.push(&snap(1, BreakerState::Closed), 3);
        ring.push(&snap(1, BreakerState::Closed), 4);
        // Opened and closed again between two samples: the slot still shows the opening.
        let mut reopened = snap(2, BreakerState::Closed);
        reopened.reopens = 1;
        ring.push(&reopened, 5);
        let got: Vec<_> = ring.samples().map(|s| (s.state, s.worst)).collect();
        assert_eq!(
            got,
            [
                (Seen::Open, Seen::Open),
                (Seen::HalfOpen, Seen::Open),
                (Seen::Closed, Seen::HalfOpen),
                (Seen::Closed, Seen::Closed),
                (Seen::Closed, Seen::Open),
            ]
        );
    }

    #[test]
    fn the_decisions_ring_keeps_the_last_records_only() {
        let d = Decisions::default();
        let rec = RoutingRecord {
            ts: std::time::UNIX_EPOCH,
            request_id: crate::observe::RequestId::next(),
            principal: Arc::from("p"),
            dialect: "openai",
            request_path: "/v1/chat/completions".into(),
            requested_model: Some("m".into()),
            rule_name: None,
            match_type: Some("DEFAULT"),
            outcome: RequestOutcome::Served,
            reason: "servedByPrimary".into(),
            served_by: None,
            status: 200,
            fallback_hop: Some(1),
            attempts: Vec::new(),
            skipped: Vec::new(),
            streamed: false,
            committed: true,
            mid_stream_error: false,
            latency_ms: 1.0,
            ttft_ms: None,
            deadline_ms: 1,
            usage: None,
        };
        for _ in 0..(DECISIONS * 3) {
            d.push(Arc::new(rec.clone()));
        }
        assert_eq!(d.len(), DECISIONS);
        assert_eq!(d.recent(10_000, Only::All).len(), DECISIONS);
        assert_eq!(d.recent(10_000, Only::Fallbacks).len(), DECISIONS);
        assert!(d.recent(10_000, Only::Errors).is_empty());
    }
}
