//! The validated configuration model. Everything here has passed every rule of SPEC §4: targets
//! referenced by rules exist, priorities are unique, secrets are resolved, triggers are parsed.
//! The engine reads only these types, never the raw YAML structs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use sidetrack_resilience::{BreakerConfig, Triggers};

/// A resolved secret. `Debug` never prints the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was loaded from (for messages); `<inline>` for strings.
    pub source: String,
    pub server: Server,
    pub auth: Option<Auth>,
    pub state: Option<State>,
    pub idempotency: Idempotency,
    pub targets: Vec<Target>,
    /// Sorted by ascending priority (evaluation order).
    pub rules: Vec<Rule>,
    pub defaults: Defaults,
    pub logging: Logging,
    /// `cache` (SPEC §12); defaults (mode `off`) when omitted.
    pub cache: Cache,
}

/// Whether and when the response store answers (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Nothing stored, nothing served (the default).
    #[default]
    Off,
    /// Consulted only when the walk ends without success.
    LastResort,
    /// Consulted before the walk too.
    Always,
}

impl CacheMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Off => "off",
            CacheMode::LastResort => "lastResort",
            CacheMode::Always => "always",
        }
    }
}

/// Whose answers a request may be served (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheScope {
    /// Per principal: never crosses principals (the default).
    #[default]
    Principal,
    /// One store for every principal.
    Shared,
}

/// `cache` (SPEC §12).
#[derive(Debug, Clone, PartialEq)]
pub struct Cache {
    pub mode: CacheMode,
    /// `ttlMilliseconds`: default 86400000 (1 day), 1000..=31536000000.
    pub ttl: Duration,
    /// `maxEntries`: per process, LRU; default 100000, 1..=10000000.
    pub max_entries: usize,
    /// `maxBytes`: the store's whole size, and the largest single answer it keeps; default
    /// 256 MiB, 1024..=1 TiB.
    pub max_bytes: usize,
    pub scope: CacheScope,
    pub semantic: Option<Semantic>,
    /// Some mode is not `off` (top level or a rule): when false, requests skip the store with one
    /// test.
    pub in_use: bool,
}

pub const DEFAULT_CACHE_TTL_MS: u64 = 86_400_000;
pub const DEFAULT_CACHE_MAX_ENTRIES: usize = 100_000;
pub const DEFAULT_CACHE_MAX_BYTES: usize = 256 * 1024 * 1024;

impl Default for Cache {
    fn default() -> Self {
        Cache {
            mode: CacheMode::Off,
            ttl: Duration::from_millis(DEFAULT_CACHE_TTL_MS),
            max_entries: DEFAULT_CACHE_MAX_ENTRIES,
            max_bytes: DEFAULT_CACHE_MAX_BYTES,
            scope: CacheScope::Principal,
            semantic: None,
            in_use: false,
        }
    }
}

/// `cache.semantic` (SPEC §12): on an exact miss the last user turn is embedded through
/// `target`/`model` within `embedding_timeout` and the nearest stored question of the same
/// partition with cosine ≥ `similarity_threshold` answers (docs/cache.md, "Semantic lookup").
#[derive(Debug, Clone, PartialEq)]
pub struct Semantic {
    pub target: String,
    pub model: String,
    /// 0..=1, default 0.95.
    pub similarity_threshold: f64,
    /// 10..=60000, default 300.
    pub embedding_timeout: Duration,
}

impl Config {
    /// The cache mode of a request matched by `rule` (`None`: default routing): the rule's own
    /// `cache.mode`, else the top-level `cache.mode`.
    pub fn cache_mode(&self, rule: Option<&str>) -> CacheMode {
        if !self.cache.in_use {
            return CacheMode::Off;
        }
        rule.and_then(|name| self.rules.iter().find(|r| r.name == name))
            .and_then(|r| r.cache_mode)
            .unwrap_or(self.cache.mode)
    }
}

impl Config {
    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCommit {
    FirstToken,
    FirstByte,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallerRetryHint {
    Auto,
    Off,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr, // default 127.0.0.1:8080
    pub admin: SocketAddr,  // default 127.0.0.1:9090
    pub tls: Option<Tls>,
    pub max_request_bytes: usize,           // default 32 MiB
    pub request_timeout: Duration,          // default 15 min
    pub shutdown_grace: Duration,           // default 30 s
    pub response_headers: bool,             // default true
    pub caller_retry_hint: CallerRetryHint, // default Auto
    pub stream_commit: StreamCommit,        // default FirstToken
    pub watch_config: bool,                 // default false
    pub admin_token: Option<Secret>,
    /// Bounds (SPEC §14). The request head must arrive within this (default 10 s).
    pub header_read_timeout: Duration,
    /// The whole caller body must arrive within this, not just each gap (default 30 s).
    pub body_read_timeout: Duration,
    /// A keep-alive connection with no request in flight is closed after this (default 60 s).
    pub idle_timeout: Duration,
    /// Open connections per listener; past it new ones wait in the kernel's backlog (default 10000).
    pub max_connections: usize,
    /// An upstream stream event or line larger than this is a protocol failure (default 8 MiB).
    pub max_stream_event_bytes: usize,
    /// A non-stream upstream body that must be buffered larger than this is a protocol failure
    /// (default 32 MiB).
    pub max_response_bytes: usize,
    /// Destinations (and metric series) made for models that reach a target through its globs
    /// (default 1000); past it idle ones are evicted and the metric model label is `_other`.
    pub max_dynamic_destinations: usize,
    /// Browser origins allowed on the data plane (CORS answered for them); any other request
    /// carrying `Origin` gets 403. `*` allows every origin.
    pub allowed_origins: Vec<String>,
    /// `target/model` pins a target (default true); off, such a name is an ordinary model name.
    pub allow_pinning: bool,
    /// Honour the caller's deadline headers `x-sidetrack-timeout-ms` / `x-stainless-timeout`
    /// (SPEC §11, default true).
    pub caller_deadline: bool,
    /// Honour `x-sidetrack-fallback: off` and `x-sidetrack-timeout-ms` (SPEC §11, default true).
    pub caller_overrides: bool,
}

impl Server {
    /// Is a browser request from `origin` allowed on the data plane?
    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.allowed_origins
            .iter()
            .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
    }
}

#[derive(Debug, Clone)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Debug, Clone)]
pub struct Auth {
    pub keys: Vec<ApiKey>,
}

#[derive(Debug, Clone)]
pub enum KeyMatch {
    /// `env:NAME` resolved at load time (or, in tests, a literal).
    Plain(Secret),
    /// `sha256:<hex>`: the lowercase hex SHA-256 of the key, 32 bytes.
    Sha256([u8; 32]),
}

#[derive(Debug, Clone)]
pub struct ApiKey {
    pub principal: String,
    pub key: KeyMatch,
    /// Allow-list globs; `None` = every model.
    pub models: Option<Vec<String>>,
    pub limits: Option<Limits>,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct State {
    pub redis: Option<Redis>,
}

/// `idempotency:` (SPEC §12). Idempotency-Key support is always on; these are its bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// How long a successful answer is replayed (default 86400000 ms, 1000..=31536000000).
    pub ttl: std::time::Duration,
    /// Keys kept per process, least recently used evicted first (default 100000, 1..=10000000).
    pub max_entries: usize,
    /// An answer larger than this is not stored nor shared with waiting duplicates (default
    /// 8 MiB, 1 KiB..=1 GiB).
    pub max_answer_bytes: usize,
    /// All stored answers together (default 128 MiB, 1 KiB..=64 GiB); LRU eviction past it.
    pub max_bytes: usize,
}

impl Default for Idempotency {
    fn default() -> Idempotency {
        Idempotency {
            ttl: std::time::Duration::from_millis(86_400_000),
            max_entries: 100_000,
            max_answer_bytes: 8 << 20,
            max_bytes: 128 << 20,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Redis {
    pub url: String,
    pub key_prefix: String, // default "sidetrack:"
    /// Longest wait for one Redis call before serving on local state (default 50 ms, 1..=5000).
    pub budget: std::time::Duration,
    /// How often each replica pulls the shared breaker states (default 250 ms, 10..=60000).
    pub sync_interval: std::time::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
    Bedrock,
    /// Azure OpenAI (SPEC §13): OpenAI's wire format on Azure's deployment URLs.
    Azure,
    Vertex,
    /// Google AI Gemini (`generateContent`, `x-goog-api-key`).
    Gemini,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Azure => "azure",
            ProviderKind::Vertex => "vertex",
            ProviderKind::Gemini => "gemini",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub provider: ProviderKind,
    /// Always set after validation: for bedrock without `baseUrl` it is
    /// `https://bedrock-runtime.{region}.amazonaws.com`. No trailing slash.
    pub base_url: String,
    pub region: Option<String>,
    pub api_key: Option<Secret>,
    /// Globs this target serves. Empty = the field was omitted (serves any model it is sent).
    pub models: Vec<String>,
    pub connect_timeout: Duration, // default 5 s
    /// Per-target breaker overrides, already merged over `defaults.circuitBreaker`.
    pub circuit_breaker: BreakerPolicy,
    pub capabilities: Capabilities,
    /// `provider: azure`: the `api-version` query value of the deployment URLs (required there).
    pub api_version: Option<String>,
    /// `provider: azure`: a Microsoft Entra ID token, sent as `Authorization: Bearer` (the
    /// alternative to `apiKey`, which Azure takes as `api-key`).
    pub entra_token: Option<Secret>,
    /// `headers:` — extra request headers for every request to this target (SPEC §13), names
    /// lower-cased and checked, values resolved. Every value is treated as a secret.
    pub headers: Vec<(String, Secret)>,
    /// `provider: vertex`: the Google Cloud project (required there).
    pub project: Option<String>,
    /// `provider: vertex`: where its OAuth bearer token comes from (required there).
    pub vertex_auth: Option<VertexAuth>,
}

/// `provider: vertex`: a service account (JWT bearer grant) or a ready token.
#[derive(Debug, Clone)]
pub enum VertexAuth {
    ServiceAccount(ServiceAccount),
    AccessToken(Secret),
}

/// The fields of a service-account JSON file the token flow uses, checked at load.
#[derive(Debug, Clone)]
pub struct ServiceAccount {
    /// The file it was read from (for messages).
    pub file: String,
    pub client_email: String,
    /// The PEM (`-----BEGIN PRIVATE KEY-----`, PKCS#8). `Debug` never prints it.
    pub private_key: Secret,
    pub token_uri: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `None` = not declared (assume it can).
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub context_window: Option<u64>,
}

/// SPEC §5.5 knobs, with defaults applied. `overridden` lists the field names that the config wrote
/// (in `defaults.circuitBreaker` or on the target), so `explain` can mark the rest as defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// The breaker's own knobs, with their defaults (SPEC §5.5): one type, shared with the
    /// breaker that runs them (`sidetrack_resilience::BreakerConfig`).
    pub settings: BreakerConfig,
    pub unhealthy_condition: Option<String>, // CEL source, compiled by the engine
    pub overridden: Vec<&'static str>,
}

impl Default for BreakerPolicy {
    /// The built-in SPEC §5.5 defaults, with nothing marked as overridden.
    fn default() -> Self {
        BreakerPolicy {
            settings: BreakerConfig::default(),
            unhealthy_condition: None,
            overridden: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Defaults {
    pub circuit_breaker: BreakerPolicy,
    /// Attempts per request: hops + retries + hedges (SPEC §11, default 8, 1..=100).
    pub max_attempts: u32,
    /// Per-destination retry budget (SPEC §11).
    pub retry_budget: RetryBudgetPolicy,
}

/// `defaults.retryBudget`: a destination's retries in the last 10 s may reach
/// `ratio` × its first attempts in that window + 10 × `min_per_second`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetPolicy {
    /// Default 0.2, 0.0..=10.0.
    pub ratio: f64,
    /// Default 5, 0..=100000.
    pub min_per_second: f64,
}

impl Default for RetryBudgetPolicy {
    fn default() -> Self {
        RetryBudgetPolicy {
            ratio: 0.2,
            min_per_second: 5.0,
        }
    }
}

/// Attempts per request when `defaults.maxAttempts` is omitted.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingSink {
    Stdout,
    Stderr,
    File(PathBuf),
    Off,
}

#[derive(Debug, Clone)]
pub struct Logging {
    pub level: String,        // default "info"
    pub routing: RoutingSink, // default Stdout
    pub otlp_endpoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOperator {
    StringLike,
    StringEquals,
}

#[derive(Debug, Clone)]
pub struct Matcher {
    pub operator: MatchOperator,
    pub values: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Rule {
    /// As written, or `rule-<priority>` when the rule has no `name` (the name is optional).
    pub name: String,
    pub priority: u32,
    /// Index in the file's `rules` list (for messages: `rules[2]`).
    pub index: usize,
    pub match_models: Option<Matcher>, // default operator StringLike
    pub match_principals: Option<Matcher>, // default operator StringEquals
    pub route: Route,
    /// `cache.mode` of the rule: overrides the top-level `cache.mode` (SPEC §12).
    pub cache_mode: Option<CacheMode>,
}

#[derive(Debug, Clone)]
pub enum Route {
    Static(StaticRoute),
    PriorityGroups(Vec<PriorityGroup>),
    Weighted(WeightedRoute),
}

/// `target` + optional pinned `model` (None = send the caller's model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationRef {
    pub target: String,
    pub model: Option<String>,
}

/// Trigger/timeout/retry/hedge settings of one hop (SPEC §5.3, §11). Never inherited.
#[derive(Debug, Clone)]
pub struct HopPolicy {
    /// `Triggers::default_set()` when `triggerOn` was omitted (`is_default()` tells).
    pub triggers: Triggers,
    /// `None` = no first-byte timeout on this hop.
    pub first_byte_timeout: Option<Duration>,
    /// Streamed requests: send → first content event (`firstTokenTimeoutMilliseconds`).
    pub first_token_timeout: Option<Duration>,
    /// Longest silence between upstream stream events (`streamIdleTimeoutMilliseconds`).
    pub stream_idle_timeout: Option<Duration>,
    /// `retry`: the same hop again. `None` = no retries (attempts 0).
    pub retry: Option<RetryPolicy>,
    /// `hedge`: start the next hop if this one has not committed by then.
    pub hedge: Option<HedgePolicy>,
}

impl HopPolicy {
    /// A hop with these triggers and first-byte timeout and nothing else set.
    pub fn new(triggers: Triggers, first_byte_timeout: Option<Duration>) -> HopPolicy {
        HopPolicy {
            triggers,
            first_byte_timeout,
            first_token_timeout: None,
            stream_idle_timeout: None,
            retry: None,
            hedge: None,
        }
    }

    /// The outcomes that retry this hop: `retry.on`, else the hop's triggers.
    pub fn retry_on(&self) -> &Triggers {
        self.retry
            .as_ref()
            .and_then(|r| r.on.as_ref())
            .unwrap_or(&self.triggers)
    }
}

/// A hop's `retry` block (SPEC §11).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0..=10).
    pub attempts: u32,
    /// Base of the exponential backoff (default 100 ms, 0..=60000).
    pub backoff: Duration,
    /// Cap of one backoff, and the longest upstream Retry-After honoured (default 2000 ms,
    /// 0..=300000, at least `backoff`).
    pub max_backoff: Duration,
    /// `retry.on`; `None` = the hop's effective triggers.
    pub on: Option<Triggers>,
}

/// A hop's `hedge` block (SPEC §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HedgePolicy {
    /// `afterMilliseconds` (10..=900000).
    pub after: Duration,
}

#[derive(Debug, Clone)]
pub struct StaticRoute {
    pub primary: DestinationRef,
    /// The primary's policy (from `fallback.triggerOn` / `fallback.firstByteTimeoutMilliseconds`;
    /// defaults when there is no `fallback`).
    pub primary_policy: HopPolicy,
    pub breaker_mode: BreakerMode, // default Enabled
    pub fallbacks: Vec<FallbackHop>,
}

#[derive(Debug, Clone)]
pub struct FallbackHop {
    pub destination: DestinationRef,
    pub policy: HopPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerMode {
    Enabled,
    Disabled,
}

#[derive(Debug, Clone)]
pub struct PriorityGroup {
    pub destinations: Vec<DestinationRef>,
    pub policy: HopPolicy,
}

#[derive(Debug, Clone)]
pub struct WeightedRoute {
    pub legs: Vec<WeightedLeg>,
    pub stickiness_header: Option<String>,
}

#[derive(Debug, Clone)]
pub struct WeightedLeg {
    pub weight: u32,
    /// Each leg is a static route of its own (its own optional fallback block).
    pub route: StaticRoute,
}
