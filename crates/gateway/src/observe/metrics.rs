//! Prometheus metrics (SPEC §7.2): every metric name the gateway exposes lives in this one module
//! (STYLE habit 13), so a dashboard author can find them all in one place.
//!
//! The engine calls the recording methods on [`Metrics`] with the strings it already has (the
//! routing log's vocabulary); labels that come from a small fixed set are turned into small enums or
//! `&'static str` here, so the hot path does not allocate for them and a typo cannot invent a new
//! series. `GET /metrics` serves [`Metrics::render`] with [`Metrics::CONTENT_TYPE`].
//!
//! Cost per call: one read-lock on the family's label map (`Family::get_or_create`; the write lock is
//! taken only the first time a label set is seen) plus an atomic add. Target/model labels are
//! copied into owned strings to look the series up. The two series touched by every request skip
//! that: a destination's handles live with its health ([`DestMetrics`]), and `requests_total`
//! handles are found by borrowed label values in a lock-free map ([`Metrics::request`]).
//!
//! Cardinality (SPEC §14 "Names and labels"): every per-destination series carries the model as a
//! label, and callers choose model names. Destinations the config names always have their own
//! label; the others (models that reach a target through its globs) have one while fewer than
//! `server.maxDynamicDestinations` do, and every later one is counted under `model="_other"`
//! ([`LabelBudget`]). So the number of series is bounded by the config, whatever callers send.

use std::borrow::Cow;
use std::fmt;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use sidetrack_resilience::walk::Skip;
use sidetrack_resilience::{BreakerState, ErrorKind, Outcome};

/// Latency buckets in seconds, 1 ms to 120 s: LLM calls range from cached millisecond answers to
/// minutes-long generations.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The `rule` label for requests served by default routing (the routing log's `ruleName: null`).
pub const DEFAULT_RULE: &str = "default";

/// The `model` label of every destination past `server.maxDynamicDestinations` (SPEC §14).
pub const OTHER_MODEL: &str = "_other";

/// The default of `server.maxDynamicDestinations` (until a config sets it).
const DEFAULT_MAX_DYNAMIC: usize = 1000;

/// The exposed metric names, exactly as they appear in the text exposition.
pub mod names {
    pub const REQUESTS_TOTAL: &str = "sidetrack_requests_total";
    pub const ATTEMPTS_TOTAL: &str = "sidetrack_attempts_total";
    pub const FALLBACKS_TOTAL: &str = "sidetrack_fallbacks_total";
    pub const SKIPS_TOTAL: &str = "sidetrack_skips_total";
    pub const BREAKER_STATE: &str = "sidetrack_breaker_state";
    pub const BREAKER_TRANSITIONS_TOTAL: &str = "sidetrack_breaker_transitions_total";
    pub const IN_FLIGHT_REQUESTS: &str = "sidetrack_in_flight_requests";
    pub const REQUEST_DURATION_SECONDS: &str = "sidetrack_request_duration_seconds";
    pub const TIME_TO_FIRST_BYTE_SECONDS: &str = "sidetrack_time_to_first_byte_seconds";
    pub const ATTEMPT_DURATION_SECONDS: &str = "sidetrack_attempt_duration_seconds";
    pub const TOKENS_TOTAL: &str = "sidetrack_tokens_total";
    pub const MID_STREAM_ERRORS_TOTAL: &str = "sidetrack_mid_stream_errors_total";
    pub const STATE_BACKEND_UP: &str = "sidetrack_state_backend_up";
    pub const ROUTING_LOG_DROPPED_TOTAL: &str = "sidetrack_routing_log_dropped_total";
    pub const IDEMPOTENT_REPLAYS_TOTAL: &str = "sidetrack_idempotent_replays_total";
    pub const RETRIES_TOTAL: &str = "sidetrack_retries_total";
    pub const RETRY_BUDGET_EXHAUSTED_TOTAL: &str = "sidetrack_retry_budget_exhausted_total";
    pub const HEDGES_TOTAL: &str = "sidetrack_hedges_total";
    pub const UPSTREAM_RESPONSES_TOTAL: &str = "sidetrack_upstream_responses_total";
    pub const CACHE_LOOKUPS_TOTAL: &str = "sidetrack_cache_lookups_total";
    /// SPEC §12 (a plain gauge: always exposed, unlike the labelled families).
    pub const CACHE_ENTRIES: &str = "sidetrack_cache_entries";
    pub const CACHE_MIRROR_DROPPED_TOTAL: &str = "sidetrack_cache_mirror_dropped_total";
    /// A plain gauge too: the entries of this replica's semantic vector index.
    pub const CACHE_VECTORS: &str = "sidetrack_cache_vectors";

    /// Every name above, in registration order.
    pub const ALL: [&str; 23] = [
        REQUESTS_TOTAL,
        ATTEMPTS_TOTAL,
        FALLBACKS_TOTAL,
        SKIPS_TOTAL,
        BREAKER_STATE,
        BREAKER_TRANSITIONS_TOTAL,
        IN_FLIGHT_REQUESTS,
        REQUEST_DURATION_SECONDS,
        TIME_TO_FIRST_BYTE_SECONDS,
        ATTEMPT_DURATION_SECONDS,
        TOKENS_TOTAL,
        MID_STREAM_ERRORS_TOTAL,
        STATE_BACKEND_UP,
        IDEMPOTENT_REPLAYS_TOTAL,
        ROUTING_LOG_DROPPED_TOTAL,
        RETRIES_TOTAL,
        RETRY_BUDGET_EXHAUSTED_TOTAL,
        HEDGES_TOTAL,
        UPSTREAM_RESPONSES_TOTAL,
        CACHE_LOOKUPS_TOTAL,
        CACHE_ENTRIES,
        CACHE_MIRROR_DROPPED_TOTAL,
        CACHE_VECTORS,
    ];
}

// ---------------------------------------------------------------------------------------------
// Label values from small fixed sets
// ---------------------------------------------------------------------------------------------

/// Writes a label enum as its `as_str()` (the derive would use the Rust variant name instead).
macro_rules! label_value_as_str {
    ($t:ty) => {
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

/// `attempts_total{outcome}`: the routing log's attempt outcome (resilience `Outcome::label`)
/// without its status code, so the label set stays fixed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    Success,
    Status,
    ConnectionError,
    FirstByteTimeout,
    Unroutable,
    Cancelled,
    FirstTokenTimeout,
    StreamIdleTimeout,
}

impl AttemptOutcome {
    /// How many outcomes there are (a destination's counters are indexed by the variant).
    pub const COUNT: usize = AttemptOutcome::StreamIdleTimeout as usize + 1;

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Success => "SUCCESS",
            AttemptOutcome::Status => "STATUS",
            AttemptOutcome::ConnectionError => "CONNECTION_ERROR",
            AttemptOutcome::FirstByteTimeout => "FIRST_BYTE_TIMEOUT",
            AttemptOutcome::Unroutable => "UNROUTABLE",
            AttemptOutcome::Cancelled => "CANCELLED",
            AttemptOutcome::FirstTokenTimeout => "FIRST_TOKEN_TIMEOUT",
            AttemptOutcome::StreamIdleTimeout => "STREAM_IDLE_TIMEOUT",
        }
    }
}

impl From<Outcome> for AttemptOutcome {
    fn from(o: Outcome) -> AttemptOutcome {
        match o {
            Outcome::Success(_) => AttemptOutcome::Success,
            Outcome::Status(_) => AttemptOutcome::Status,
            Outcome::Error(ErrorKind::ConnectionError) => AttemptOutcome::ConnectionError,
            Outcome::Error(ErrorKind::FirstByteTimeout) => AttemptOutcome::FirstByteTimeout,
            Outcome::Error(ErrorKind::Unroutable) => AttemptOutcome::Unroutable,
            Outcome::Cancelled => AttemptOutcome::Cancelled,
            Outcome::Error(ErrorKind::FirstTokenTimeout) => AttemptOutcome::FirstTokenTimeout,
            Outcome::Error(ErrorKind::StreamIdleTimeout) => AttemptOutcome::StreamIdleTimeout,
        }
    }
}
label_value_as_str!(AttemptOutcome);

/// `breaker_transitions_total{to}`: the state a breaker moved to (resilience `BreakerState::as_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerTo {
    Closed,
    HalfOpen,
    Open,
}

impl BreakerTo {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerTo::Closed => "CLOSED",
            BreakerTo::HalfOpen => "HALF_OPEN",
            BreakerTo::Open => "OPEN",
        }
    }
}

impl From<BreakerState> for BreakerTo {
    fn from(s: BreakerState) -> BreakerTo {
        match s {
            BreakerState::Closed => BreakerTo::Closed,
            BreakerState::HalfOpen { .. } => BreakerTo::HalfOpen,
            BreakerState::Open { .. } => BreakerTo::Open,
        }
    }
}
label_value_as_str!(BreakerTo);

/// `tokens_total{direction}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Input,
    Output,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
        }
    }
}
label_value_as_str!(Direction);

/// `requests_total{status_class}`: `"1xx"` … `"5xx"`; anything outside 100–599 is `"other"`.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    }
}

/// Borrow a `'static` copy of `s` when it is one of `known`, so common label values do not allocate;
/// otherwise own it. Used for labels that are mostly a fixed set with a parameterised tail
/// (`servedViaFallbackHop:<n>`).
fn interned(s: &str, known: &[&'static str]) -> Cow<'static, str> {
    match known.iter().find(|k| **k == s) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(s.to_owned()),
    }
}

const DIALECTS: &[&str] = &[
    "openai-chat",
    "openai-responses",
    "anthropic-messages",
    "bedrock-invoke",
    "bedrock-converse",
    "openai-embeddings",
    "gemini",
];
const REASONS: &[&str] = &[
    "servedByPrimary",
    "servedViaFallbackHop:1",
    "servedViaFallbackHop:2",
    "servedViaFallbackHop:3",
    "chainExhausted",
    "noEligibleDestination",
    "unroutable",
    "deadlineExceeded",
    "idempotentReplay",
    "servedFromCache",
];

fn rule_label(rule: &str) -> Cow<'static, str> {
    if rule.is_empty() {
        Cow::Borrowed(DEFAULT_RULE)
    } else {
        Cow::Owned(rule.to_owned())
    }
}

// ---------------------------------------------------------------------------------------------
// Label sets (field order = label order in the exposition)
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RequestLabels {
    pub dialect: Cow<'static, str>,
    pub rule: Cow<'static, str>,
    pub status_class: &'static str,
    pub reason: Cow<'static, str>,
}

/// `requests_total` handles by label set. Its label sets are few (dialects × rules × status
/// classes × reasons) and repeat, so it stops growing early.
type SeenRequests = hashbrown::HashMap<RequestLabels, Counter, foldhash::fast::RandomState>;

/// A [`RequestLabels`] of borrowed values, to look one up without building it. Same fields in the
/// same order, so it hashes as the owned set does (a `Cow<str>` hashes as its `str`).
#[derive(Hash)]
struct RequestKey<'a> {
    dialect: &'a str,
    rule: &'a str,
    status_class: &'static str,
    reason: &'a str,
}

impl hashbrown::Equivalent<RequestLabels> for RequestKey<'_> {
    fn equivalent(&self, owned: &RequestLabels) -> bool {
        self.dialect == owned.dialect
            && self.rule == owned.rule
            && self.status_class == owned.status_class
            && self.reason == owned.reason
    }
}

/// One destination: a (target, model) pair.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DestinationLabels {
    pub target: String,
    pub model: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AttemptLabels {
    pub target: String,
    pub model: String,
    pub outcome: AttemptOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FallbackLabels {
    pub rule: Cow<'static, str>,
    pub hop: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SkipLabels {
    pub target: String,
    pub model: String,
    pub why: Cow<'static, str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TransitionLabels {
    pub target: String,
    pub model: String,
    pub to: BreakerTo,
}

/// `hedges_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HedgeResult {
    Won,
    Lost,
}

impl HedgeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            HedgeResult::Won => "won",
            HedgeResult::Lost => "lost",
        }
    }
}
label_value_as_str!(HedgeResult);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HedgeLabels {
    pub target: String,
    pub model: String,
    pub result: HedgeResult,
}

/// `cache_lookups_total{mode,result}` (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheResult {
    Hit,
    SemanticHit,
    Miss,
    /// Not consulted: `cache-control: no-store`, `x-sidetrack-cache: off`, or a request the
    /// store cannot key (e.g. one carrying a guardrail).
    Bypass,
}

impl CacheResult {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheResult::Hit => "hit",
            CacheResult::SemanticHit => "semantic_hit",
            CacheResult::Miss => "miss",
            CacheResult::Bypass => "bypass",
        }
    }
}
label_value_as_str!(CacheResult);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CacheLabels {
    pub mode: &'static str,
    pub result: CacheResult,
}

/// `upstream_responses_total{code}`: a status code (100–599, so the set is bounded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResponseLabels {
    pub target: String,
    pub model: String,
    pub code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TokenLabels {
    pub target: String,
    pub model: String,
    pub direction: Direction,
}

/// Which destinations have a `model` label of their own. A destination the config names
/// (`declared`) always does. Any other gets one while fewer than `max_dynamic` others have one, and
/// keeps it for the life of the process (its counters never vanish or restart); once the budget is
/// spent, new ones are counted under [`OTHER_MODEL`]. Consulted when a destination's handles are
/// made (once per destination) and by the by-name recording methods, never per attempt.
#[derive(Debug)]
struct LabelBudget {
    max_dynamic: usize,
    /// How many entries of `labelled` were admitted as dynamic (they count against the budget).
    dynamic: usize,
    /// target → models with a label of their own.
    labelled: hashbrown::HashMap<String, LabelledModels, foldhash::fast::RandomState>,
}

type LabelledModels = hashbrown::HashSet<String, foldhash::fast::RandomState>;

impl Default for LabelBudget {
    fn default() -> LabelBudget {
        LabelBudget {
            max_dynamic: DEFAULT_MAX_DYNAMIC,
            dynamic: 0,
            labelled: Default::default(),
        }
    }
}

impl LabelBudget {
    fn has(&self, target: &str, model: &str) -> bool {
        self.labelled.get(target).is_some_and(|m| m.contains(model))
    }

    /// Does `target`/`model` get its own label? Admits it if it may.
    fn admit(&mut self, target: &str, model: &str, declared: bool) -> bool {
        if self.has(target, model) {
            return true;
        }
        if !declared {
            if self.dynamic >= self.max_dynamic {
                return false;
            }
            self.dynamic += 1;
        }
        self.labelled
            .entry_ref(target)
            .or_default()
            .insert(model.to_owned());
        true
    }
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

// ---------------------------------------------------------------------------------------------
// The registry
// ---------------------------------------------------------------------------------------------

/// Every metric of SPEC §7.2 and the registry that renders them. Share it behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// The `requests` handles seen so far, found by borrowed label values ([`RequestKey`]).
    requests_seen: ArcSwap<SeenRequests>,
    attempts: Family<AttemptLabels, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
    skips: Family<SkipLabels, Counter>,
    breaker_state: Family<DestinationLabels, Gauge>,
    breaker_transitions: Family<TransitionLabels, Counter>,
    in_flight: Gauge,
    request_duration: Histogram,
    time_to_first_byte: HistogramFamily<DestinationLabels>,
    attempt_duration: HistogramFamily<DestinationLabels>,
    tokens: Family<TokenLabels, Counter>,
    mid_stream_errors: Family<DestinationLabels, Counter>,
    /// SPEC §11: retries made, retries the budget refused, hedges started (by won|lost), and
    /// every upstream answer by its status code.
    retries: Family<DestinationLabels, Counter>,
    retry_budget_exhausted: Family<DestinationLabels, Counter>,
    hedges: Family<HedgeLabels, Counter>,
    upstream_responses: Family<ResponseLabels, Counter>,
    /// SPEC §12: response store lookups by mode and result, and the entries it holds.
    cache_lookups: Family<CacheLabels, Counter>,
    cache_entries: Gauge,
    /// Writes to the Redis mirror of the response store dropped because too many were in flight.
    cache_mirror_dropped: Counter,
    /// Entries of the semantic vector index (this replica's, its own and those read from Redis).
    cache_vectors: Gauge,
    /// 1 while the shared state store (Redis) answers within its budget, 0 while serving on local
    /// state (SPEC §10). Set to 1 at start when a store is configured.
    state_backend_up: Gauge,
    /// Routing records the writer could not keep up with (a handle on the routing log's counter).
    routing_log_dropped: Counter,
    /// Duplicates answered from an `Idempotency-Key`'s answer, joined or stored (SPEC §12).
    idempotent_replays: Counter,
    /// The tracer (SPEC §7.3) rides along: every phase that records metrics already holds this
    /// struct, so spans reach the walk and the finish phase without another parameter.
    traces: crate::observe::Traces,
    /// Which destinations have a `model` label of their own (SPEC §14).
    labels: RwLock<LabelBudget>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// The `Content-Type` of [`Metrics::render`]: Prometheus text format 0.0.4.
    pub const CONTENT_TYPE: &'static str =
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

    pub fn new() -> Metrics {
        Metrics::for_log(&crate::observe::RoutingLog::off())
    }

    /// The metrics of a gateway writing to `log` (whose dropped records they count).
    pub fn for_log(log: &crate::observe::RoutingLog) -> Metrics {
        let m = Metrics {
            registry: Registry::with_prefix("sidetrack"),
            requests: Family::default(),
            requests_seen: ArcSwap::default(),
            attempts: Family::default(),
            fallbacks: Family::default(),
            skips: Family::default(),
            breaker_state: Family::default(),
            breaker_transitions: Family::default(),
            in_flight: Gauge::default(),
            request_duration: latency_histogram(),
            time_to_first_byte: Family::new_with_constructor(latency_histogram),
            attempt_duration: Family::new_with_constructor(latency_histogram),
            tokens: Family::default(),
            mid_stream_errors: Family::default(),
            retries: Family::default(),
            retry_budget_exhausted: Family::default(),
            hedges: Family::default(),
            upstream_responses: Family::default(),
            cache_lookups: Family::default(),
            cache_entries: Gauge::default(),
            cache_mirror_dropped: Counter::default(),
            cache_vectors: Gauge::default(),
            state_backend_up: Gauge::default(),
            routing_log_dropped: log.dropped(),
            idempotent_replays: Counter::default(),
            traces: crate::observe::Traces::off(),
            labels: RwLock::default(),
        };
        m.registered()
    }

    /// The same metrics, with spans exported by `traces`.
    pub fn with_traces(mut self, traces: crate::observe::Traces) -> Metrics {
        self.traces = traces;
        self
    }

    /// A duplicate was answered from its `Idempotency-Key`'s answer (SPEC §12).
    pub fn idempotent_replay(&self) {
        self.idempotent_replays.inc();
    }

    /// The tracer: off unless `logging.otlpEndpoint` is set.
    pub fn traces(&self) -> &crate::observe::Traces {
        &self.traces
    }

    /// Registers every family. Names here are without the `sidetrack_` prefix (the registry adds
    /// it) and, for counters, without `_total` (the encoder adds it): see [`names`] for the result.
    fn registered(mut self) -> Metrics {
        let r = &mut self.registry;
        r.register(
            "requests",
            "Requests finished, by dialect, rule, status class and routing reason",
            self.requests.clone(),
        );
        r.register(
            "attempts",
            "Upstream attempts, by destination and outcome",
            self.attempts.clone(),
        );
        r.register(
            "fallbacks",
            "Fallbacks taken, by rule and the hop fallen back to",
            self.fallbacks.clone(),
        );
        r.register(
            "skips",
            "Destinations skipped during the walk, by why",
            self.skips.clone(),
        );
        r.register(
            "breaker_state",
            "Circuit breaker state (0 closed, 1 half-open, 2 open)",
            self.breaker_state.clone(),
        );
        r.register(
            "breaker_transitions",
            "Circuit breaker state changes, by the state entered",
            self.breaker_transitions.clone(),
        );
        r.register(
            "in_flight_requests",
            "Requests currently being handled",
            self.in_flight.clone(),
        );
        r.register(
            "state_backend_up",
            "1 while the shared state store (state.redis) answers within its budget; 0 while serving on local state",
            self.state_backend_up.clone(),
        );
        r.register(
            "idempotent_replays",
            "Duplicates answered from their Idempotency-Key's answer (joined in flight or stored)",
            self.idempotent_replays.clone(),
        );
        r.register(
            "routing_log_dropped",
            "Routing records dropped because the routing log writer was 16,384 records behind",
            self.routing_log_dropped.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Whole-request latency as the caller sees it",
            self.request_duration.clone(),
        );
        r.register(
            "time_to_first_byte_seconds",
            "Time from sending an attempt to its first response-body byte",
            self.time_to_first_byte.clone(),
        );
        r.register(
            "attempt_duration_seconds",
            "Duration of one upstream attempt",
            self.attempt_duration.clone(),
        );
        r.register(
            "tokens",
            "Tokens reported by upstream usage, by direction",
            self.tokens.clone(),
        );
        r.register(
            "mid_stream_errors",
            "Streams that failed after the commit point",
            self.mid_stream_errors.clone(),
        );
        r.register(
            "retries",
            "Retries of the same hop (SPEC §11), by destination",
            self.retries.clone(),
        );
        r.register(
            "retry_budget_exhausted",
            "Retries not made because the destination's retry budget was spent",
            self.retry_budget_exhausted.clone(),
        );
        r.register(
            "hedges",
            "Hedged attempts started, by the hedge's destination and whether it won or lost",
            self.hedges.clone(),
        );
        r.register(
            "upstream_responses",
            "Upstream HTTP answers, by destination and status code",
            self.upstream_responses.clone(),
        );
        r.register(
            "cache_lookups",
            "Response store lookups (SPEC §12), by cache mode and result",
            self.cache_lookups.clone(),
        );
        r.register(
            "cache_entries",
            "Answers held by this process's response store",
            self.cache_entries.clone(),
        );
        r.register(
            "cache_mirror_dropped",
            "Response store writes to Redis (answers and semantic vectors) dropped because too many were in flight",
            self.cache_mirror_dropped.clone(),
        );
        r.register(
            "cache_vectors",
            "Questions held by this process's semantic vector index (its own and other replicas')",
            self.cache_vectors.clone(),
        );
        self
    }

    /// One response store lookup (`mode`: `lastResort` or `always`).
    pub fn cache_lookup(&self, mode: &'static str, result: CacheResult) {
        self.cache_lookups
            .get_or_create(&CacheLabels { mode, result })
            .inc();
    }

    /// One response store write to Redis dropped (too many in flight).
    pub fn cache_mirror_dropped(&self) {
        self.cache_mirror_dropped.inc();
    }

    /// The semantic vector index's entry count.
    pub fn cache_vectors(&self, n: usize) {
        self.cache_vectors.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The response store's entry count.
    pub fn cache_entries(&self, n: usize) {
        self.cache_entries.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// One finished request. `rule` is `""` for default routing (label `"default"`); `status` is
    /// reduced to its class.
    pub fn request(
        &self,
        dialect: &str,
        rule: &str,
        status: u16,
        reason: &str,
        duration: Duration,
    ) {
        let key = RequestKey {
            dialect,
            rule: if rule.is_empty() { DEFAULT_RULE } else { rule },
            status_class: status_class(status),
            reason,
        };
        if let Some(counter) = self.requests_seen.load().get(&key) {
            counter.inc();
        } else {
            let labels = RequestLabels {
                dialect: interned(dialect, DIALECTS),
                rule: rule_label(rule),
                status_class: key.status_class,
                reason: interned(reason, REASONS),
            };
            let counter = self.requests.get_or_create(&labels).clone();
            counter.inc();
            self.requests_seen.rcu(|seen| {
                let mut seen = SeenRequests::clone(seen);
                seen.insert(labels.clone(), counter.clone());
                seen
            });
        }
        self.request_duration.observe(duration.as_secs_f64());
    }

    /// Sets `server.maxDynamicDestinations`: how many destinations the config does not name may
    /// have a `model` label of their own. Lowering it takes no label away.
    pub fn set_max_dynamic_destinations(&self, max: usize) {
        if let Ok(mut b) = self.labels.write() {
            b.max_dynamic = max;
        }
    }

    /// The `model` label of `target`/`model`: the model itself if it has (or may now get) a label
    /// of its own, else [`OTHER_MODEL`]. `declared`: the config names this destination.
    fn model_label(&self, target: &str, model: &str, declared: bool) -> String {
        let known = self.labels.read().is_ok_and(|b| b.has(target, model));
        let own = known
            || self
                .labels
                .write()
                .is_ok_and(|mut b| b.admit(target, model, declared));
        if own {
            model.to_owned()
        } else {
            OTHER_MODEL.to_owned()
        }
    }

    /// One upstream attempt; `first_byte` is set when a response-body byte arrived.
    pub fn attempt(
        &self,
        target: &str,
        model: &str,
        outcome: Outcome,
        duration: Duration,
        first_byte: Option<Duration>,
    ) {
        self.destination(target, model, false)
            .attempt(outcome, duration, first_byte);
    }

    /// One destination's handles, looked up once and kept with the destination's health, so the
    /// request path records an attempt without building label sets or allocating. `declared`: the
    /// config names this destination (it always has its own `model` label); otherwise the label
    /// may be [`OTHER_MODEL`] (see [`LabelBudget`]).
    pub fn destination(&self, target: &str, model: &str, declared: bool) -> DestMetrics {
        let labels = DestinationLabels {
            target: target.to_owned(),
            model: self.model_label(target, model, declared),
        };
        // One state gauge per destination: `_other` stands for many, which have no one state.
        let breaker_state = (labels.model != OTHER_MODEL)
            .then(|| self.breaker_state.get_or_create(&labels).clone());
        DestMetrics {
            breaker_state,
            transitions_family: self.breaker_transitions.clone(),
            attempt_duration_family: self.attempt_duration.clone(),
            time_to_first_byte_family: self.time_to_first_byte.clone(),
            attempt_duration: OnceLock::new(),
            time_to_first_byte: OnceLock::new(),
            attempts_family: self.attempts.clone(),
            tokens_family: self.tokens.clone(),
            retries_family: self.retries.clone(),
            budget_family: self.retry_budget_exhausted.clone(),
            hedges_family: self.hedges.clone(),
            responses_family: self.upstream_responses.clone(),
            attempts: Default::default(),
            ok_responses: OnceLock::new(),
            tokens: Default::default(),
            labels,
        }
    }

    /// A request whose response came from fallback hop `hop` (≥ 1). `rule` as in [`Metrics::request`].
    pub fn fallback(&self, rule: &str, hop: usize) {
        let labels = FallbackLabels {
            rule: rule_label(rule),
            hop,
        };
        self.fallbacks.get_or_create(&labels).inc();
    }

    /// A destination skipped during the walk, and why (a fixed set: `BREAKER_OPEN`, `DISABLED`,
    /// `INELIGIBLE:<capability>`).
    pub fn skip(&self, target: &str, model: &str, why: Skip) {
        let labels = SkipLabels {
            target: target.to_owned(),
            model: self.model_label(target, model, false),
            why: Cow::Borrowed(why.as_str()),
        };
        self.skips.get_or_create(&labels).inc();
    }

    /// Sets a destination's breaker gauge: 0 closed, 1 half-open, 2 open. Nothing for a destination
    /// counted under `_other` (see [`Metrics::destination`]).
    pub fn breaker_state(&self, target: &str, model: &str, gauge: i64) {
        let labels = DestinationLabels {
            target: target.to_owned(),
            model: self.model_label(target, model, false),
        };
        if labels.model != OTHER_MODEL {
            self.breaker_state.get_or_create(&labels).set(gauge);
        }
    }

    /// A breaker changed state to `to`. Does not touch the gauge: call
    /// [`Metrics::breaker_state`] too (the engine knows the numeric state).
    pub fn breaker_transition(&self, target: &str, model: &str, to: BreakerState) {
        let labels = TransitionLabels {
            target: target.to_owned(),
            model: self.model_label(target, model, false),
            to: to.into(),
        };
        self.breaker_transitions.get_or_create(&labels).inc();
    }

    /// Whether the shared state store answered its last call in time.
    pub fn state_backend_up(&self, up: bool) {
        self.state_backend_up.set(i64::from(up));
    }

    /// Counts a request in flight until the returned guard is dropped.
    pub fn in_flight(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard {
            gauge: self.in_flight.clone(),
        }
    }

    /// A stream that failed after the commit point (SPEC §5.6).
    pub fn mid_stream_error(&self, target: &str, model: &str) {
        let labels = DestinationLabels {
            target: target.to_owned(),
            model: self.model_label(target, model, false),
        };
        self.mid_stream_errors.get_or_create(&labels).inc();
    }

    /// Usage reported by the upstream. Both directions are recorded (also when 0) so the series
    /// exist from a destination's first response.
    pub fn tokens(&self, target: &str, model: &str, input: u64, output: u64) {
        self.destination(target, model, false).tokens(input, output);
    }

    /// The Prometheus text exposition of every metric; serve it with [`Metrics::CONTENT_TYPE`].
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail; an Err could only come from a label encoder, and a
        // partial page is still more useful to a scraper than none.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// The metric handles of one destination (see [`Metrics::destination`]). Every series is created
/// on first use, so /metrics shows only what happened.
#[derive(Debug)]
pub struct DestMetrics {
    labels: DestinationLabels,
    /// `None` for a destination counted under `_other`.
    breaker_state: Option<Gauge>,
    transitions_family: Family<TransitionLabels, Counter>,
    attempt_duration_family: HistogramFamily<DestinationLabels>,
    time_to_first_byte_family: HistogramFamily<DestinationLabels>,
    attempt_duration: OnceLock<Histogram>,
    time_to_first_byte: OnceLock<Histogram>,
    attempts_family: Family<AttemptLabels, Counter>,
    tokens_family: Family<TokenLabels, Counter>,
    retries_family: Family<DestinationLabels, Counter>,
    budget_family: Family<DestinationLabels, Counter>,
    hedges_family: Family<HedgeLabels, Counter>,
    responses_family: Family<ResponseLabels, Counter>,
    attempts: [OnceLock<Counter>; AttemptOutcome::COUNT],
    /// `upstream_responses_total{code="200"}`, the one code on the healthy path.
    ok_responses: OnceLock<Counter>,
    tokens: [OnceLock<Counter>; 2],
}

impl DestMetrics {
    /// The `model` label this destination's series carry: its model, or [`OTHER_MODEL`].
    pub fn model_label(&self) -> &str {
        &self.labels.model
    }

    /// Same as [`Metrics::breaker_state`] for this destination.
    pub fn breaker_state(&self, gauge: i64) {
        if let Some(g) = &self.breaker_state {
            g.set(gauge);
        }
    }

    /// Same as [`Metrics::breaker_transition`] for this destination.
    pub fn breaker_transition(&self, to: BreakerState) {
        let labels = TransitionLabels {
            target: self.labels.target.clone(),
            model: self.labels.model.clone(),
            to: to.into(),
        };
        self.transitions_family.get_or_create(&labels).inc();
    }

    /// Same as [`Metrics::attempt`] for this destination.
    pub fn attempt(&self, outcome: Outcome, duration: Duration, first_byte: Option<Duration>) {
        let outcome = AttemptOutcome::from(outcome);
        self.attempts[outcome as usize]
            .get_or_init(|| {
                let labels = AttemptLabels {
                    target: self.labels.target.clone(),
                    model: self.labels.model.clone(),
                    outcome,
                };
                self.attempts_family.get_or_create(&labels).clone()
            })
            .inc();
        self.attempt_duration
            .get_or_init(|| {
                self.attempt_duration_family
                    .get_or_create(&self.labels)
                    .clone()
            })
            .observe(duration.as_secs_f64());
        if let Some(ttfb) = first_byte {
            self.time_to_first_byte
                .get_or_init(|| {
                    self.time_to_first_byte_family
                        .get_or_create(&self.labels)
                        .clone()
                })
                .observe(ttfb.as_secs_f64());
        }
    }

    /// A retry of this destination was made.
    pub fn retry(&self) {
        self.retries_family.get_or_create(&self.labels).inc();
    }

    /// A retry of this destination was refused by its retry budget.
    pub fn retry_budget_exhausted(&self) {
        self.budget_family.get_or_create(&self.labels).inc();
    }

    /// A hedge to this destination ended: it won (its answer went to the caller) or lost.
    pub fn hedge(&self, result: HedgeResult) {
        let labels = HedgeLabels {
            target: self.labels.target.clone(),
            model: self.labels.model.clone(),
            result,
        };
        self.hedges_family.get_or_create(&labels).inc();
    }

    /// An HTTP answer from this destination, by its status code.
    pub fn upstream_response(&self, code: u16) {
        let labels = || ResponseLabels {
            target: self.labels.target.clone(),
            model: self.labels.model.clone(),
            code,
        };
        if code == 200 {
            self.ok_responses
                .get_or_init(|| self.responses_family.get_or_create(&labels()).clone())
                .inc();
        } else {
            self.responses_family.get_or_create(&labels()).inc();
        }
    }

    /// Same as [`Metrics::tokens`] for this destination.
    pub fn tokens(&self, input: u64, output: u64) {
        for (i, (direction, n)) in [(Direction::Input, input), (Direction::Output, output)]
            .into_iter()
            .enumerate()
        {
            self.tokens[i]
                .get_or_init(|| {
                    let labels = TokenLabels {
                        target: self.labels.target.clone(),
                        model: self.labels.model.clone(),
                        direction,
                    };
                    self.tokens_family.get_or_create(&labels).clone()
                })
                .inc_by(n);
        }
    }
}

/// Holds one unit of `sidetrack_in_flight_requests`; decrements it when dropped.
#[derive(Debug)]
#[must_use = "the request counts as in flight only while the guard is alive"]
pub struct InFlightGuard {
    gauge: Gauge,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_attempt_outcome_has_its_counter_slot() {
        let outcomes = [Outcome::Success(200), Outcome::Status(500)]
            .into_iter()
            .chain(ErrorKind::ALL.map(Outcome::Error));
        for o in outcomes {
            let a = AttemptOutcome::from(o);
            assert!((a as usize) < AttemptOutcome::COUNT, "{o:?}");
            assert_eq!(a.as_str(), o.label());
        }
    }

    use super::*;

    fn open() -> BreakerState {
        BreakerState::Open {
            until: std::time::Instant::now(),
        }
    }

    fn half_open() -> BreakerState {
        BreakerState::HalfOpen {
            successes: 0,
            probe_in_flight: false,
        }
    }
    use sidetrack_resilience::walk::Ineligible;

    /// The value of the sample line whose name-and-labels part is exactly `series`.
    fn sample(text: &str, series: &str) -> Option<String> {
        text.lines().find_map(|line| {
            let (head, value) = line.rsplit_once(' ')?;
            (head == series).then(|| value.to_owned())
        })
    }

    fn value(m: &Metrics, series: &str) -> String {
        let text = m.render();
        match sample(&text, series) {
            Some(v) => v,
            None => panic!("no sample `{series}` in:\n{text}"),
        }
    }

    #[test]
    fn exposes_exactly_the_spec_names() {
        let m = Metrics::new();
        // Touch every labelled family so it has samples.
        m.request(
            "openai-chat",
            "",
            200,
            "servedByPrimary",
            Duration::from_millis(5),
        );
        m.attempt(
            "a",
            "m",
            Outcome::Success(200),
            Duration::from_millis(5),
            Some(Duration::from_millis(1)),
        );
        m.fallback("r", 1);
        m.skip("a", "m", Skip::Disabled);
        m.breaker_state("a", "m", 0);
        m.breaker_transition("a", "m", open());
        m.mid_stream_error("a", "m");
        m.tokens("a", "m", 1, 1);
        let d = m.destination("a", "m", true);
        d.retry();
        d.retry_budget_exhausted();
        d.hedge(HedgeResult::Won);
        d.upstream_response(503);
        m.cache_lookup("lastResort", CacheResult::Miss);
        let text = m.render();

        let mut typed: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .collect();
        typed.sort();
        let mut expected: Vec<(&str, &str)> = names::ALL
            .iter()
            .map(|n| {
                let kind = if n.ends_with("_seconds") {
                    "histogram"
                } else if n.ends_with("_total") {
                    "counter"
                } else {
                    "gauge"
                };
                (*n, kind)
            })
            .collect();
        expected.sort();
        assert_eq!(typed, expected, "{text}");

        // Every sample line belongs to one of the names (histograms add _bucket/_sum/_count).
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| b.ends_with("_seconds")))
                .unwrap_or(name);
            assert!(names::ALL.contains(&base), "unexpected series {name}");
        }
    }

    #[test]
    fn request_counts_by_class_and_default_rule() {
        let m = Metrics::new();
        m.request(
            "openai-chat",
            "",
            200,
            "servedByPrimary",
            Duration::from_millis(20),
        );
        m.request(
            "openai-chat",
            "",
            204,
            "servedByPrimary",
            Duration::from_millis(20),
        );
        m.request(
            "anthropic-messages",
            "chat-resilient",
            503,
            "chainExhausted",
            Duration::from_secs(3),
        );
        m.request(
            "openai-chat",
            "r",
            429,
            "gatewayRejected:rateLimited",
            Duration::ZERO,
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_requests_total{dialect="openai-chat",rule="default",status_class="2xx",reason="servedByPrimary"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_requests_total{dialect="anthropic-messages",rule="chat-resilient",status_class="5xx",reason="chainExhausted"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_requests_total{dialect="openai-chat",rule="r",status_class="4xx",reason="gatewayRejected:rateLimited"}"#
            ),
            "1"
        );
        assert_eq!(value(&m, "sidetrack_request_duration_seconds_count"), "4");
        assert_eq!(
            value(
                &m,
                r#"sidetrack_request_duration_seconds_bucket{le="0.001"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_request_duration_seconds_bucket{le="0.025"}"#
            ),
            "3"
        );
        assert_eq!(
            value(&m, r#"sidetrack_request_duration_seconds_bucket{le="2.5"}"#),
            "3"
        );
        assert_eq!(
            value(&m, r#"sidetrack_request_duration_seconds_bucket{le="5"}"#),
            "4"
        );
        assert_eq!(
            value(&m, r#"sidetrack_request_duration_seconds_bucket{le="120"}"#),
            "4"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_request_duration_seconds_bucket{le="+Inf"}"#
            ),
            "4"
        );
        assert_eq!(value(&m, "sidetrack_request_duration_seconds_sum"), "3.04");
    }

    #[test]
    fn request_counters_are_found_again_by_borrowed_labels() {
        let m = Metrics::new();
        let ms = Duration::from_millis(1);
        for _ in 0..3 {
            m.request("openai-chat", "", 200, "servedByPrimary", ms);
        }
        m.request("openai-chat", "team-rule", 503, "chainExhausted", ms);
        m.request("openai-chat", "team-rule", 503, "chainExhausted", ms);
        // One entry per label set: a key that hashed differently from its owned set would miss
        // every time and never be counted through the map.
        let seen = m.requests_seen.load();
        assert_eq!(seen.len(), 2);
        let key = RequestKey {
            dialect: "openai-chat",
            rule: DEFAULT_RULE,
            status_class: "2xx",
            reason: "servedByPrimary",
        };
        assert!(seen.get(&key).is_some());
        assert_eq!(
            value(
                &m,
                r#"sidetrack_requests_total{dialect="openai-chat",rule="default",status_class="2xx",reason="servedByPrimary"}"#
            ),
            "3"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_requests_total{dialect="openai-chat",rule="team-rule",status_class="5xx",reason="chainExhausted"}"#
            ),
            "2"
        );
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(101), "1xx");
        assert_eq!(status_class(200), "2xx");
        assert_eq!(status_class(302), "3xx");
        assert_eq!(status_class(499), "4xx");
        assert_eq!(status_class(529), "5xx");
        assert_eq!(status_class(0), "other");
        assert_eq!(status_class(600), "other");
    }

    #[test]
    fn attempt_counts_and_times() {
        let m = Metrics::new();
        m.attempt(
            "a",
            "m",
            Outcome::Success(200),
            Duration::from_millis(300),
            Some(Duration::from_millis(40)),
        );
        m.attempt(
            "a",
            "m",
            Outcome::Error(ErrorKind::FirstByteTimeout),
            Duration::from_secs(2),
            None,
        );
        m.attempt(
            "b",
            "m2",
            Outcome::Error(ErrorKind::ConnectionError),
            Duration::from_millis(3),
            None,
        );
        m.attempt(
            "b",
            "m2",
            Outcome::Status(503),
            Duration::from_millis(3),
            None,
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="a",model="m",outcome="SUCCESS"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="a",model="m",outcome="FIRST_BYTE_TIMEOUT"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="b",model="m2",outcome="CONNECTION_ERROR"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="b",model="m2",outcome="STATUS"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempt_duration_seconds_count{target="a",model="m"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempt_duration_seconds_bucket{target="a",model="m",le="0.5"}"#
            ),
            "1"
        );
        // Only the attempt that saw a first byte is in the TTFB histogram.
        assert_eq!(
            value(
                &m,
                r#"sidetrack_time_to_first_byte_seconds_count{target="a",model="m"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_time_to_first_byte_seconds_bucket{target="a",model="m",le="0.05"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_time_to_first_byte_seconds_bucket{target="a",model="m",le="0.025"}"#
            ),
            "0"
        );
        assert!(m
            .render()
            .lines()
            .all(|l| !l.starts_with(r#"sidetrack_time_to_first_byte_seconds_count{target="b""#)));
    }

    #[test]
    fn fallbacks_and_skips() {
        let m = Metrics::new();
        m.fallback("chat", 1);
        m.fallback("chat", 1);
        m.fallback("", 2);
        m.skip("a", "m", Skip::BreakerOpen);
        m.skip("a", "m", Skip::Ineligible(Ineligible::Tools));
        m.skip("a", "m", Skip::BreakerOpen);
        assert_eq!(
            value(&m, r#"sidetrack_fallbacks_total{rule="chat",hop="1"}"#),
            "2"
        );
        assert_eq!(
            value(&m, r#"sidetrack_fallbacks_total{rule="default",hop="2"}"#),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_skips_total{target="a",model="m",why="BREAKER_OPEN"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_skips_total{target="a",model="m",why="INELIGIBLE:tools"}"#
            ),
            "1"
        );
    }

    #[test]
    fn breaker_gauge_and_transitions() {
        let m = Metrics::new();
        m.breaker_state("a", "m", 2);
        m.breaker_transition("a", "m", open());
        assert_eq!(
            value(&m, r#"sidetrack_breaker_state{target="a",model="m"}"#),
            "2"
        );
        m.breaker_state("a", "m", 1);
        m.breaker_transition("a", "m", half_open());
        m.breaker_state("a", "m", 0);
        m.breaker_transition("a", "m", BreakerState::Closed);
        m.breaker_transition("a", "m", open());
        assert_eq!(
            value(&m, r#"sidetrack_breaker_state{target="a",model="m"}"#),
            "0"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_breaker_transitions_total{target="a",model="m",to="OPEN"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_breaker_transitions_total{target="a",model="m",to="HALF_OPEN"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_breaker_transitions_total{target="a",model="m",to="CLOSED"}"#
            ),
            "1"
        );
    }

    #[test]
    fn in_flight_guard_counts_while_alive() {
        let m = Metrics::new();
        assert_eq!(value(&m, "sidetrack_in_flight_requests"), "0");
        let a = m.in_flight();
        let b = m.in_flight();
        assert_eq!(value(&m, "sidetrack_in_flight_requests"), "2");
        drop(a);
        assert_eq!(value(&m, "sidetrack_in_flight_requests"), "1");
        drop(b);
        assert_eq!(value(&m, "sidetrack_in_flight_requests"), "0");
    }

    #[test]
    fn mid_stream_errors_and_tokens() {
        let m = Metrics::new();
        m.mid_stream_error("a", "m");
        m.tokens("a", "m", 120, 30);
        m.tokens("a", "m", 5, 0);
        assert_eq!(
            value(
                &m,
                r#"sidetrack_mid_stream_errors_total{target="a",model="m"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_tokens_total{target="a",model="m",direction="input"}"#
            ),
            "125"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_tokens_total{target="a",model="m",direction="output"}"#
            ),
            "30"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.mid_stream_error("we\"ird", "m\\1");
        assert_eq!(
            value(
                &m,
                r#"sidetrack_mid_stream_errors_total{target="we\"ird",model="m\\1"}"#
            ),
            "1"
        );
    }

    #[test]
    fn model_labels_past_the_dynamic_bound_are_other() {
        let m = Metrics::new();
        m.set_max_dynamic_destinations(2);
        let ms = Duration::from_millis(1);
        // Declared destinations do not count against the bound.
        for i in 0..5 {
            m.destination("t", &format!("declared-{i}"), true).attempt(
                Outcome::Success(200),
                ms,
                None,
            );
        }
        for model in ["a", "b", "c", "d", "a"] {
            m.destination("t", model, false)
                .attempt(Outcome::Success(200), ms, None);
        }
        m.skip("t", "e", Skip::BreakerOpen);
        m.mid_stream_error("t", "b");
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="t",model="declared-4",outcome="SUCCESS"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="t",model="a",outcome="SUCCESS"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_attempts_total{target="t",model="_other",outcome="SUCCESS"}"#
            ),
            "2"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_skips_total{target="t",model="_other",why="BREAKER_OPEN"}"#
            ),
            "1"
        );
        assert_eq!(
            value(
                &m,
                r#"sidetrack_mid_stream_errors_total{target="t",model="b"}"#
            ),
            "1"
        );
        let text = m.render();
        assert!(!text.contains("model=\"c\""), "{text}");
        assert!(!text.contains(r#"sidetrack_breaker_state{target="t",model="_other"}"#));
        // Raising the bound admits new names; lowering it takes no label away.
        m.set_max_dynamic_destinations(3);
        assert_eq!(m.destination("t", "c", false).model_label(), "c");
        m.set_max_dynamic_destinations(1);
        assert_eq!(m.destination("t", "b", false).model_label(), "b");
        assert_eq!(m.destination("t", "z", false).model_label(), OTHER_MODEL);
    }

    #[test]
    fn content_type_is_prometheus_text() {
        assert_eq!(
            Metrics::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }
}
