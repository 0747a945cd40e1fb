//! Per-destination health (SPEC §5.5, §5.8): one breaker, EWMAs and counters per target+model,
//! shared by every rule and every request that uses the destination. This is the in-memory
//! backend; it outlives config reloads (breaker state survives for destinations that still exist).
//!
//! Bounded (SPEC §14 "Names and labels"): destinations the config names are always kept; the
//! others — made for models that reach a target through its globs, so callers choose them — number
//! at most `server.maxDynamicDestinations`. Past it, the least recently used idle one (no request
//! on it, breaker closed, not switched off) makes room; when none is idle, the new destination
//! serves its request without being kept. Finding a destination that exists (every attempt) costs
//! what it did: two map lookups in a snapshot, plus one relaxed load to note its use.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use sidetrack_config::{BreakerPolicy, Config};
use sidetrack_resilience::retry::RetryBudget;
use sidetrack_resilience::{
    Admission, Breaker, BreakerConfig, BreakerState, Probe, SharedBreaker, Transition,
    UnhealthyCondition,
};

pub use super::clock::Clock;
use super::redis as store;
use super::redis::{unix_ms, RedisState};

use crate::observe::metrics::{DestMetrics, Metrics};

/// Weight of the newest time-to-first-byte sample (same α as the health score).
const TTFB_ALPHA: f64 = 0.3;

/// The breaker's settings from a target's policy.
pub fn breaker_config(p: &BreakerPolicy) -> BreakerConfig {
    p.settings.clone()
}

struct Inner {
    breaker: Breaker,
    last_transition: Option<(Transition, SystemTime)>,
    ttfb_ewma_ms: Option<f64>,
    /// Its retries and first attempts over the last 10 s (SPEC §11 Retry budget); made at the
    /// first attempt, so its clock starts then.
    budget: Option<RetryBudget>,
}

/// The health of one destination.
pub struct DestHealth {
    /// Its metric handles (no label lookups on the request path).
    pub metrics: DestMetrics,
    /// Shared with the routing records of requests it serves (no copy per request).
    pub target: Arc<str>,
    pub model: Arc<str>,
    /// `target/model`, ready for the `x-sidetrack-served-by` header.
    pub served_by: Option<http::HeaderValue>,
    inner: Mutex<Inner>,
    /// The time-to-first-byte EWMA in whole microseconds (0: unmeasured), readable without the
    /// lock: the deadline check reads it for every member of every hop.
    ttfb_micros: AtomicU64,
    disabled: AtomicBool,
    in_flight: AtomicU32,
    attempts: AtomicU64,
    successes: AtomicU64,
    failures: AtomicU64,
    skips: AtomicU64,
    /// Verdicts on their way to the shared store: while any is, the local state is ahead of the
    /// store and is not overwritten by what the sync loop reads.
    pending_shares: AtomicU32,
    /// The newest state those verdicts stored: the last one to finish adopts it (tasks finish in
    /// any order; adopting the last task's own, possibly older, result could undo a transition).
    newest_share: Mutex<Option<(u64, SharedBreaker)>>,
    /// The newest shared-state version adopted here.
    adopted_version: AtomicU64,
    /// [`Health`]'s insertion count when this destination was last looked up: the eviction order.
    last_used: AtomicU64,
}

/// What an attempt's outcome means for the destination's health (decided by the walk's rules).
pub use sidetrack_resilience::walk::Verdict;

/// Whether the walk may attempt a destination now.
pub enum Admit {
    /// Closed: go.
    Allowed,
    /// Half-open: this request is the one probe in flight.
    Probe(ProbeGuard),
    /// Open (or half-open with its probe taken): skip.
    Skip,
}

/// A half-open probe slot; released on drop if no verdict was recorded (e.g. the caller left).
pub struct ProbeGuard {
    dest: Arc<DestHealth>,
    probe: Option<Probe>,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        if let Some(p) = self.probe.take() {
            if let Ok(mut inner) = self.dest.inner.lock() {
                inner.breaker.release_probe(p);
            }
        }
    }
}

/// Counts an attempt as in flight until dropped.
pub struct InFlight(Arc<DestHealth>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DestHealth {
    fn new(target: &str, model: &str, cfg: BreakerConfig, metrics: DestMetrics) -> DestHealth {
        DestHealth {
            metrics,
            target: target.into(),
            model: model.into(),
            served_by: http::HeaderValue::from_str(&format!("{target}/{model}")).ok(),
            inner: Mutex::new(Inner {
                breaker: Breaker::new(cfg),
                last_transition: None,
                ttfb_ewma_ms: None,
                budget: None,
            }),
            ttfb_micros: AtomicU64::new(0),
            disabled: AtomicBool::new(false),
            in_flight: AtomicU32::new(0),
            attempts: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            skips: AtomicU64::new(0),
            pending_shares: AtomicU32::new(0),
            newest_share: Mutex::new(None),
            adopted_version: AtomicU64::new(0),
            last_used: AtomicU64::new(0),
        }
    }

    /// Notes a use at `tick`. A store only when the tick moved: a destination in steady use does
    /// not write its cache line on every lookup.
    fn touch(&self, tick: u64) {
        if self.last_used.load(Ordering::Relaxed) != tick {
            self.last_used.store(tick, Ordering::Relaxed);
        }
    }

    /// May it be evicted? Nothing uses it (no attempt in flight, no probe, no verdict on its way to
    /// the shared store), its breaker is closed and it is not switched off: dropping it loses
    /// counters and EWMAs only, and the next request makes it again, closed.
    fn idle(&self, now: Instant) -> bool {
        !self.is_disabled()
            && self.in_flight.load(Ordering::Relaxed) == 0
            && self.pending_shares.load(Ordering::Acquire) == 0
            && self
                .inner
                .lock()
                .is_ok_and(|i| matches!(i.breaker.state(now), BreakerState::Closed))
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::Relaxed)
    }

    pub fn in_flight(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub fn note_skip(&self) {
        self.skips.fetch_add(1, Ordering::Relaxed);
    }

    /// P2C score (SPEC §5.8): favours health and low time to first byte, penalises in-flight
    /// requests. An unmeasured destination scores as if instant, so new members get tried.
    pub fn score(&self) -> f64 {
        let (health, ttfb) = match self.inner.lock() {
            Ok(i) => (i.breaker.health(), i.ttfb_ewma_ms.unwrap_or(0.0)),
            Err(_) => return 0.0,
        };
        let pending = f64::from(self.in_flight.load(Ordering::Relaxed));
        (health / 100.0) / ((1.0 + ttfb) * (1.0 + pending))
    }

    /// Its expected time to first byte (SPEC §11 Deadline): the EWMA, zero when unmeasured.
    pub fn expected_ttfb(&self) -> Duration {
        Duration::from_micros(self.ttfb_micros.load(Ordering::Relaxed))
    }

    /// When its open breaker lets a probe through (`None` unless open).
    pub(crate) fn open_until(&self) -> Option<Instant> {
        self.inner.lock().ok().and_then(|i| i.breaker.open_until())
    }
}

/// A read-only view for the admin API and the dashboard.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub target: String,
    pub model: String,
    pub state: BreakerState,
    pub disabled: bool,
    pub open_remaining: Option<Duration>,
    pub consecutive_failures: u32,
    pub health: f64,
    pub ttfb_ewma_ms: Option<f64>,
    pub in_flight: u32,
    pub attempts: u64,
    pub successes: u64,
    pub failures: u64,
    pub skips: u64,
    pub reopens: u32,
    pub last_transition: Option<(String, String, SystemTime)>,
}

/// String-keyed maps read on every request: a fast hasher (the keys are names from the config
/// and requested model names; the maps are never exposed to untrusted insertion patterns beyond
/// what the config and callers' model names already allow).
type FastMap<V> = HashMap<String, V, foldhash::fast::RandomState>;
type FastSet = HashSet<String, foldhash::fast::RandomState>;

/// The bound on destinations the config does not name (SPEC §14).
struct Bound {
    /// target → models the config names (see [`declared_destinations`]): never evicted.
    declared: FastMap<FastSet>,
    /// `server.maxDynamicDestinations`: how many others are kept.
    max_dynamic: usize,
}

impl Bound {
    fn from_config(cfg: &Config) -> Bound {
        let mut declared: FastMap<FastSet> = FastMap::default();
        for (target, model) in declared_destinations(cfg) {
            declared.entry(target).or_default().insert(model);
        }
        Bound {
            declared,
            max_dynamic: cfg.server.max_dynamic_destinations,
        }
    }

    fn declares(&self, target: &str, model: &str) -> bool {
        self.declared
            .get(target)
            .is_some_and(|models| models.contains(model))
    }
}

/// Every destination's health, keyed by (target, model).
pub struct Health {
    clock: Clock,
    metrics: Arc<Metrics>,
    /// target → model → health: two borrowed-`&str` lookups in a snapshot, no allocation and no
    /// lock on the request path. A new destination (rare) swaps in a new snapshot.
    dests: ArcSwap<FastMap<FastMap<Arc<DestHealth>>>>,
    /// Serialises writers of `dests`.
    adding: Mutex<()>,
    /// Which destinations are declared, and how many others are kept.
    bound: RwLock<Bound>,
    /// Twice the destinations inserted so far: the clock of `DestHealth::last_used`.
    tick: AtomicU64,
    /// Breaker policy per target name (from the current config).
    policies: RwLock<HashMap<String, BreakerConfig>>,
    /// Compiled `unhealthyCondition` per target that sets one.
    conditions: ArcSwap<FastMap<Arc<UnhealthyCondition>>>,
    /// `state.redis`: the store replicas share breaker state through (SPEC §10).
    shared: Option<Arc<RedisState>>,
}

impl Health {
    pub fn new(clock: Clock, metrics: Arc<Metrics>, cfg: &Config) -> Health {
        let shared = cfg
            .state
            .as_ref()
            .and_then(|s| s.redis.as_ref())
            .and_then(|r| match RedisState::new(r) {
                Ok(s) => Some(Arc::new(s)),
                Err(e) => {
                    tracing::error!("{e}; breaker state stays local");
                    None
                }
            });
        let h = Health {
            clock,
            metrics,
            dests: ArcSwap::default(),
            adding: Mutex::new(()),
            bound: RwLock::new(Bound::from_config(cfg)),
            tick: AtomicU64::new(0),
            policies: RwLock::default(),
            conditions: ArcSwap::default(),
            shared,
        };
        h.sync_config(cfg);
        h
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Applies a (re)loaded config: new policies for every target, and the destinations the config
    /// names up front (pinned routes, literal target models) registered so the admin API lists them.
    pub fn sync_config(&self, cfg: &Config) {
        let policies: HashMap<String, BreakerConfig> = cfg
            .targets
            .iter()
            .map(|t| (t.name.clone(), breaker_config(&t.circuit_breaker)))
            .collect();
        for d in self.all() {
            if let (Some(p), Ok(mut inner)) = (policies.get(&*d.target), d.inner.lock()) {
                inner.breaker.set_config(p.clone());
            }
        }
        if let Ok(mut w) = self.policies.write() {
            *w = policies;
        }
        // Validation already compiled each expression once; a failure here cannot happen.
        let conditions = cfg
            .targets
            .iter()
            .filter_map(|t| {
                let src = t.circuit_breaker.unhealthy_condition.as_deref()?;
                let c = UnhealthyCondition::compile(src).ok()?;
                Some((t.name.clone(), Arc::new(c)))
            })
            .collect();
        self.conditions.store(Arc::new(conditions));
        if let Ok(mut b) = self.bound.write() {
            *b = Bound::from_config(cfg);
        }
        self.metrics
            .set_max_dynamic_destinations(cfg.server.max_dynamic_destinations);
        for (target, model) in declared_destinations(cfg) {
            let _ = self.get(&target, &model);
        }
    }

    /// The target's `unhealthyCondition`, if it sets one.
    pub fn condition(&self, target: &str) -> Option<Arc<UnhealthyCondition>> {
        self.conditions.load().get(target).cloned()
    }

    /// The destination's health, created on first use (kept within the bound; see the module doc).
    pub fn get(&self, target: &str, model: &str) -> Arc<DestHealth> {
        if let Some(d) = self.find(target, model) {
            d.touch(self.tick.load(Ordering::Relaxed));
            return d;
        }
        self.insert(target, model, false)
    }

    /// The slow path of [`Health::get`]: makes the destination and, unless it is past the bound
    /// with nothing idle to evict, keeps it. `always`: keep it whatever the bound (an operator's
    /// admin call).
    fn insert(&self, target: &str, model: &str, always: bool) -> Arc<DestHealth> {
        let cfg = self
            .policies
            .read()
            .ok()
            .and_then(|p| p.get(target).cloned())
            .unwrap_or_default();
        let _adding = match self.adding.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some(d) = self.find(target, model) {
            return d; // added by another request meanwhile
        }
        let mut next = FastMap::clone(&self.dests.load());
        let (declared, keep, evicted) = match self.bound.read() {
            Ok(bound) => {
                let declared = bound.declares(target, model);
                let (keep, evicted) = if declared || always {
                    (true, 0)
                } else {
                    self.make_room(&mut next, &bound)
                };
                (declared, keep, evicted)
            }
            Err(_) => (false, true, 0),
        };
        let d = Arc::new(DestHealth::new(
            target,
            model,
            cfg,
            self.metrics.destination(target, model, declared),
        ));
        d.metrics.breaker_state(0);
        if keep {
            // Lookups note the current (even) tick; an insertion takes the odd one after it and
            // moves the clock on, so it counts as used after every earlier lookup and before every
            // later one.
            d.touch(self.tick.fetch_add(2, Ordering::Relaxed) + 1);
            next.entry(target.to_owned())
                .or_default()
                .insert(model.to_owned(), d.clone());
        }
        if keep || evicted > 0 {
            self.dests.store(Arc::new(next));
        }
        d
    }

    /// Evicts idle destinations the config does not name from `table`, least recently used first,
    /// until one more fits under `server.maxDynamicDestinations`. Returns whether it fits and how
    /// many were evicted.
    fn make_room(
        &self,
        table: &mut FastMap<FastMap<Arc<DestHealth>>>,
        bound: &Bound,
    ) -> (bool, usize) {
        let dynamic = |t: &str, m: &str| !bound.declares(t, m);
        let mut count = table
            .iter()
            .map(|(t, models)| models.keys().filter(|m| dynamic(t, m)).count())
            .sum::<usize>();
        let now = self.now();
        let mut evicted = 0;
        while count >= bound.max_dynamic {
            let victim = table
                .iter()
                .flat_map(|(t, models)| models.iter().map(move |(m, d)| (t, m, d)))
                .filter(|(t, m, d)| dynamic(t, m) && d.idle(now))
                .min_by_key(|(_, _, d)| d.last_used.load(Ordering::Relaxed))
                .map(|(t, m, _)| (t.clone(), m.clone()));
            let Some((t, m)) = victim else {
                return (false, evicted);
            };
            if let Some(models) = table.get_mut(&t) {
                models.remove(&m);
                if models.is_empty() {
                    table.remove(&t);
                }
            }
            count -= 1;
            evicted += 1;
        }
        (true, evicted)
    }

    /// Looks up a destination without creating it.
    pub fn find(&self, target: &str, model: &str) -> Option<Arc<DestHealth>> {
        self.dests.load().get(target)?.get(model).cloned()
    }

    /// Every destination known so far.
    fn all(&self) -> Vec<Arc<DestHealth>> {
        let d = self.dests.load();
        d.values().flat_map(|m| m.values().cloned()).collect()
    }

    /// May the walk attempt `d` at `now` ([`Health::now`])? Takes the half-open probe slot when
    /// that is what it gets.
    pub fn admit(&self, d: &Arc<DestHealth>, now: Instant) -> Admit {
        let (admission, transition) = match d.inner.lock() {
            Ok(mut i) => i.breaker.try_acquire(now),
            Err(_) => return Admit::Allowed,
        };
        if let Some(t) = transition {
            self.transitioned(d, t);
        }
        match admission {
            Admission::Allowed => Admit::Allowed,
            Admission::Probe(p) => Admit::Probe(ProbeGuard {
                dest: d.clone(),
                probe: Some(p),
            }),
            Admission::Skip => Admit::Skip,
        }
    }

    /// Notes a first attempt on `d` in its retry budget (any attempt that is not a retry of it:
    /// a fallback or hedge arriving from elsewhere too). [`Health::record`] does this for every
    /// recorded attempt; this is for one that ends unrecorded (a hedge's loser).
    pub fn note_first_attempt(&self, d: &DestHealth) {
        let now = self.now();
        if let Ok(mut i) = d.inner.lock() {
            i.budget
                .get_or_insert_with(|| RetryBudget::new(now))
                .record_first(now);
        }
    }

    /// Takes one retry from `d`'s budget if it allows one now: the check and the count happen
    /// under one lock, so concurrent requests cannot all pass the same check.
    pub fn take_retry(&self, d: &DestHealth, ratio: f64, min_per_second: f64) -> bool {
        let now = self.now();
        let Ok(mut i) = d.inner.lock() else {
            return false;
        };
        let b = i.budget.get_or_insert_with(|| RetryBudget::new(now));
        let allowed = b.allows_retry(now, ratio, min_per_second);
        if allowed {
            b.record_retry(now);
        }
        allowed
    }

    /// Does `d`'s retry budget allow one more retry now?
    pub fn retry_allowed(&self, d: &DestHealth, ratio: f64, min_per_second: f64) -> bool {
        let now = self.now();
        d.inner.lock().is_ok_and(|i| {
            i.budget
                .as_ref()
                .is_none_or(|b| b.allows_retry(now, ratio, min_per_second))
        })
    }

    /// Could `d` be admitted at `now` ([`Health::now`]): closed, or a free probe slot? Does not
    /// take the slot.
    pub fn can_admit(&self, d: &DestHealth, now: Instant) -> bool {
        d.inner
            .lock()
            .map(|i| i.breaker.can_admit(now))
            .unwrap_or(true)
    }

    pub fn state(&self, d: &DestHealth) -> BreakerState {
        let now = self.now();
        d.inner
            .lock()
            .map(|i| i.breaker.state(now))
            .unwrap_or(BreakerState::Closed)
    }

    /// Records an attempt's verdict (and its time to first byte on success), and — unless it was
    /// a retry, whose place in the budget was taken when it was decided — counts it as a first
    /// attempt in the destination's retry budget.
    pub fn record(
        &self,
        d: &Arc<DestHealth>,
        verdict: Verdict,
        probe: Option<ProbeGuard>,
        (first_byte, retry): (Option<Duration>, bool),
    ) {
        d.attempts.fetch_add(1, Ordering::Relaxed);
        let probe = probe.and_then(|mut g| g.probe.take());
        if verdict != Verdict::Neutral {
            self.share(d, verdict, probe.is_some());
        }
        let now = self.now();
        let transition = {
            let Ok(mut i) = d.inner.lock() else { return };
            if !retry {
                i.budget
                    .get_or_insert_with(|| RetryBudget::new(now))
                    .record_first(now);
            }
            match verdict {
                Verdict::Success => {
                    d.successes.fetch_add(1, Ordering::Relaxed);
                    if let Some(fb) = first_byte {
                        let sample = fb.as_secs_f64() * 1000.0;
                        let ewma = match i.ttfb_ewma_ms {
                            None => sample,
                            Some(prev) => TTFB_ALPHA * sample + (1.0 - TTFB_ALPHA) * prev,
                        };
                        i.ttfb_ewma_ms = Some(ewma);
                        let micros = (ewma * 1000.0).max(1.0) as u64;
                        d.ttfb_micros.store(micros, Ordering::Relaxed);
                    }
                    i.breaker.on_success(probe)
                }
                Verdict::Failure(retry_after) => {
                    d.failures.fetch_add(1, Ordering::Relaxed);
                    i.breaker.on_failure(now, probe, retry_after)
                }
                Verdict::Neutral => {
                    if let Some(p) = probe {
                        i.breaker.release_probe(p);
                    }
                    None
                }
            }
        };
        if let Some(t) = transition {
            self.transitioned(d, t);
        }
    }

    /// A failure after the commit point (mid-stream): always a counted failure (SPEC §5.5).
    pub fn record_mid_stream_failure(&self, d: &Arc<DestHealth>) {
        self.share(d, Verdict::Failure(None), false);
        let now = self.now();
        d.failures.fetch_add(1, Ordering::Relaxed);
        let t = d
            .inner
            .lock()
            .ok()
            .and_then(|mut i| i.breaker.on_failure(now, None, None));
        if let Some(t) = t {
            self.transitioned(d, t);
        }
    }

    fn transitioned(&self, d: &DestHealth, t: Transition) {
        transitioned(d, t);
    }

    /// Applies a verdict to the shared state too (in the background: a request never waits on the
    /// state store), then adopts what was stored.
    fn share(&self, d: &Arc<DestHealth>, verdict: Verdict, was_probe: bool) {
        self.share_with(d, move |b, now| {
            let probe = if was_probe {
                b.try_acquire(now).0.probe()
            } else {
                None
            };
            match verdict {
                Verdict::Success => b.on_success(probe),
                Verdict::Failure(retry_after) => b.on_failure(now, probe, retry_after),
                Verdict::Neutral => None,
            };
        });
    }

    /// Applies `change` to the shared state of `d` in the background (compare-and-set; a
    /// transition is pushed to the other replicas in the same step), then adopts what was stored.
    fn share_with(
        &self,
        d: &Arc<DestHealth>,
        change: impl Fn(&mut Breaker, Instant) + Send + Sync + 'static,
    ) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let (d, metrics) = (d.clone(), self.metrics.clone());
        let cfg = match d.inner.lock() {
            Ok(i) => i.breaker.config().clone(),
            Err(_) => return,
        };
        d.pending_shares.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(async move {
            let stored = store
                .update(&d.target, &d.model, |current| {
                    let (now, now_ms) = (Instant::now(), unix_ms());
                    let mut b = Breaker::new(cfg.clone());
                    if let Some(c) = current {
                        b.adopt(&c, now, now_ms);
                    }
                    change(&mut b, now);
                    b.export(now, now_ms)
                })
                .await;
            metrics.state_backend_up(store.is_up());
            let newest = match d.newest_share.lock() {
                Ok(mut slot) => {
                    if let Ok((version, shared)) = stored {
                        if slot.is_none_or(|(v, _)| v < version) {
                            *slot = Some((version, shared));
                        }
                    }
                    if d.pending_shares.fetch_sub(1, Ordering::AcqRel) == 1 {
                        slot.take()
                    } else {
                        None
                    }
                }
                Err(_) => {
                    d.pending_shares.fetch_sub(1, Ordering::AcqRel);
                    None
                }
            };
            // After a lost write the store may lack a verdict this replica counted: local state
            // stands until the resync merges it in.
            if let (false, Some((version, shared))) = (store.resync_pending(), newest) {
                adopt(&d, version, &shared);
            }
        });
    }

    /// Keeps the shared breaker state in step until `stop` (state.redis only): adopts pushed
    /// transitions as they arrive, pulls every destination each `syncMilliseconds` (the safety net)
    /// and at once after the push subscription (re)connects, since messages may have been missed,
    /// or Redis answers again after a failed call (a write, and so its push, may have been lost).
    pub async fn keep_shared_state(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let mut tick = tokio::time::interval(store.sync_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut ping = tokio::time::interval(store::SUBSCRIBER_PING);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sub = store::Subscriber::default();
        let mut down_logged = false;
        // A pull that failed is retried soon (not only at the next tick): the first call after a
        // restart of Redis fails on the old connection, and the resync must not wait 10 s for it.
        let mut retry_pull: Option<tokio::time::Instant> = None;
        loop {
            enum Step {
                Stop,
                Pull,
                Ping,
                Event(store::Event),
            }
            let step = tokio::select! {
                // Stopping, or the handle is gone.
                _ = stop.wait_for(|s| *s) => Step::Stop,
                _ = tick.tick() => Step::Pull,
                _ = store.recovered.notified() => Step::Pull,
                _ = sleep_until_some(retry_pull) => Step::Pull,
                _ = ping.tick(), if sub.is_subscribed() => Step::Ping,
                e = sub.next(&store) => Step::Event(e),
            };
            let event = match step {
                Step::Stop => return,
                Step::Pull => {
                    self.sync_shared().await;
                    retry_pull =
                        (!store.is_up()).then(|| tokio::time::Instant::now() + store::PULL_RETRY);
                    continue;
                }
                Step::Ping => match sub.ping(&store).await {
                    Some(e) => e,
                    None => continue,
                },
                Step::Event(e) => e,
            };
            match event {
                store::Event::Message(payload) => self.apply_pushed(&store, &payload),
                store::Event::Connected => {
                    if down_logged {
                        tracing::warn!(
                            "breaker transition push (Redis pub/sub) reconnected; resynchronising"
                        );
                        down_logged = false;
                    }
                    store.request_resync();
                    self.sync_shared().await;
                    retry_pull =
                        (!store.is_up()).then(|| tokio::time::Instant::now() + store::PULL_RETRY);
                }
                store::Event::Lost => {
                    if !down_logged {
                        tracing::error!("breaker transition push (Redis pub/sub) lost; reconnecting with backoff, periodic resync continues");
                        down_logged = true;
                    }
                    store.note(false);
                    self.metrics.state_backend_up(false);
                }
            }
        }
    }

    /// Adopts one pushed transition (another replica's; this replica's own are ignored). A message
    /// older than what this replica already holds is dropped by the version check in [`adopt`].
    fn apply_pushed(&self, store: &RedisState, payload: &[u8]) {
        let Ok(p) = serde_json::from_slice::<store::Pushed>(payload) else {
            tracing::warn!("ignoring a malformed breaker transition message");
            return;
        };
        if p.o == store.origin {
            return;
        }
        if let Some(d) = self.find(&p.t, &p.m) {
            adopt(&d, p.b.v, &p.b.shared());
        }
    }

    /// One pull of every known destination's shared state (the background sync loop calls this
    /// each `syncMilliseconds`). After an outage, destinations the store has lost are written back
    /// from local state, so replicas converge again.
    pub async fn sync_shared(&self) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let dests = self.all();
        let keys: Vec<String> = dests
            .iter()
            .map(|d| store.breaker_key(&d.target, &d.model))
            .collect();
        let loaded = store.load(&keys).await;
        self.metrics.state_backend_up(store.is_up());
        let Ok(loaded) = loaded else { return };
        if store.take_resync() {
            // Back after an outage: what each replica learned meanwhile is merged by severity.
            for d in &dests {
                // The store may have restarted empty: its version numbers start over.
                d.adopted_version.store(0, Ordering::Release);
                let local = d
                    .inner
                    .lock()
                    .ok()
                    .map(|i| i.breaker.export(Instant::now(), unix_ms()));
                let Some(local) = local else { continue };
                if let Ok((version, merged)) = store
                    .update(&d.target, &d.model, |current| {
                        current.map_or(local, |c| store::merge(c, local))
                    })
                    .await
                {
                    // A verdict counted meanwhile is on its way and adopts its own result.
                    if d.pending_shares.load(Ordering::Acquire) == 0 {
                        adopt(d, version, &merged);
                    }
                }
            }
            return;
        }
        for (d, shared) in dests.iter().zip(loaded) {
            if let Some((version, s)) = shared {
                if d.pending_shares.load(Ordering::Acquire) == 0 {
                    adopt(d, version, &s);
                }
            }
        }
    }

    /// The shared state store, if `state.redis` is configured (rate limits share it).
    pub fn store(&self) -> Option<Arc<RedisState>> {
        self.shared.clone()
    }

    /// The pull interval, when state is shared.
    pub fn sync_interval(&self) -> Option<Duration> {
        self.shared.as_ref().map(|s| s.sync_interval)
    }

    /// Admin: switch a destination off (always skipped) or back on. Creates it if the target exists
    /// in the config but the destination has not been used yet. Returns false for an unknown target.
    pub fn set_disabled(&self, target: &str, model: &str, disabled: bool) -> bool {
        if !self
            .policies
            .read()
            .map(|p| p.contains_key(target))
            .unwrap_or(false)
        {
            return false;
        }
        let d = match self.find(target, model) {
            Some(d) => d,
            None => self.insert(target, model, true),
        };
        d.disabled.store(disabled, Ordering::Relaxed);
        true
    }

    /// Admin: close the breaker — on every replica when state is shared (the reset is written to
    /// the store and pushed like any transition).
    pub fn reset(&self, target: &str, model: &str) -> bool {
        let Some(d) = self.find(target, model) else {
            return false;
        };
        let t = d.inner.lock().ok().and_then(|mut i| i.breaker.reset());
        if let Some(t) = t {
            self.transitioned(&d, t);
        }
        self.share_with(&d, |b, _| {
            b.reset();
        });
        true
    }

    pub fn snapshot(&self) -> Vec<Snapshot> {
        let now = self.now();
        let mut out: Vec<Snapshot> = self
            .all()
            .into_iter()
            .filter_map(|d| {
                let i = d.inner.lock().ok()?;
                let state = i.breaker.state(now);
                Some(Snapshot {
                    target: d.target.to_string(),
                    model: d.model.to_string(),
                    state,
                    disabled: d.is_disabled(),
                    open_remaining: match state {
                        BreakerState::Open { until } => Some(until.saturating_duration_since(now)),
                        _ => None,
                    },
                    consecutive_failures: i.breaker.consecutive_failures(),
                    health: i.breaker.health(),
                    ttfb_ewma_ms: i.ttfb_ewma_ms,
                    in_flight: d.in_flight.load(Ordering::Relaxed),
                    attempts: d.attempts.load(Ordering::Relaxed),
                    successes: d.successes.load(Ordering::Relaxed),
                    failures: d.failures.load(Ordering::Relaxed),
                    skips: d.skips.load(Ordering::Relaxed),
                    reopens: i.breaker.reopen_count(),
                    last_transition: i
                        .last_transition
                        .as_ref()
                        .map(|(t, at)| (t.to.as_str().to_owned(), t.reason.to_string(), *at)),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.target, &a.model).cmp(&(&b.target, &b.model)));
        out
    }
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn transitioned(d: &DestHealth, t: Transition) {
    tracing::warn!(target: "sidetrack::breaker", destination = %format!("{}/{}", d.target, d.model), "breaker {t}");
    d.metrics.breaker_transition(t.to);
    d.metrics.breaker_state(i64::from(t.to.gauge()));
    if let Ok(mut i) = d.inner.lock() {
        i.last_transition = Some((t, SystemTime::now()));
    }
}

/// Adopts a shared breaker state into the local one (logging and counting a change of state),
/// unless this replica already adopted the same or a newer version.
fn adopt(d: &DestHealth, version: u64, shared: &SharedBreaker) {
    if d.adopted_version.fetch_max(version, Ordering::AcqRel) >= version {
        return;
    }
    let t = d
        .inner
        .lock()
        .ok()
        .and_then(|mut i| i.breaker.adopt(shared, Instant::now(), unix_ms()));
    if let Some(t) = t {
        transitioned(d, t);
    }
}

/// Destinations a config names explicitly: pinned route destinations and literal target models.
fn declared_destinations(cfg: &Config) -> Vec<(String, String)> {
    use sidetrack_config::{DestinationRef, Route, StaticRoute};
    let mut out = Vec::new();
    let mut add = |d: &DestinationRef| {
        if let Some(m) = &d.model {
            out.push((d.target.clone(), m.clone()));
        }
    };
    fn each_static(s: &StaticRoute, add: &mut dyn FnMut(&DestinationRef)) {
        add(&s.primary);
        for f in &s.fallbacks {
            add(&f.destination);
        }
    }
    for r in &cfg.rules {
        match &r.route {
            Route::Static(s) => each_static(s, &mut add),
            Route::PriorityGroups(groups) => groups
                .iter()
                .flat_map(|g| &g.destinations)
                .for_each(&mut add),
            Route::Weighted(w) => w.legs.iter().for_each(|l| each_static(&l.route, &mut add)),
        }
    }
    for t in &cfg.targets {
        for m in t.models.iter().filter(|m| !crate::glob::is_glob(m)) {
            out.push((t.name.clone(), m.clone()));
        }
    }
    out
}
