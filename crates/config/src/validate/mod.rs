//! Raw structs → validated [`Config`]: every rule of SPEC §4, defaults applied, secrets resolved.
//!
//! Validation never stops at the first problem: each check pushes a located error onto the
//! context and the walk goes on with a placeholder, so `sidetrack check` prints them all at once.
//! Messages never include a secret's value.

mod rules;
mod targets;
#[cfg(test)]
pub(crate) use targets::RESERVED_HEADERS;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{ConfigError, ConfigErrors};
use crate::located::{join_index, join_key, Positions};
use crate::model::*;
use crate::raw::*;

/// How `env:NAME` secrets are looked up (the process environment, or a test's map).
pub(crate) type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(crate) struct Ctx<'a> {
    file: &'a str,
    positions: &'a Positions,
    env: EnvLookup<'a>,
    errors: Vec<ConfigError>,
    /// `check --offline`: a missing `env:` variable is recorded here as a warning instead of an
    /// error, and a placeholder secret stands in for it.
    offline: Option<&'a mut Vec<ConfigError>>,
}

impl<'a> Ctx<'a> {
    pub fn new(file: &'a str, positions: &'a Positions, env: EnvLookup<'a>) -> Self {
        Ctx {
            file,
            positions,
            env,
            errors: Vec::new(),
            offline: None,
        }
    }

    /// Missing `env:` variables become warnings pushed onto `warnings` (`check --offline`).
    pub fn offline(mut self, warnings: &'a mut Vec<ConfigError>) -> Self {
        self.offline = Some(warnings);
        self
    }

    /// Records a problem at the value written at `path` (or its nearest written ancestor).
    fn err(&mut self, path: &str, message: impl Into<String>) {
        let problem = self.positions.problem(self.file, path, message.into());
        self.errors.push(problem);
    }

    /// An integer that must lie in `lo..=hi`; `None` (after recording an error) otherwise.
    fn int_in(&mut self, v: i64, lo: i64, hi: i64, path: &str) -> Option<u64> {
        if v < lo || v > hi {
            self.err(path, format!("must be between {lo} and {hi} (got {v})"));
            return None;
        }
        u64::try_from(v).ok()
    }

    /// An integer with only a lower bound.
    fn at_least(&mut self, v: i64, lo: i64, path: &str) -> Option<u64> {
        if v < lo {
            self.err(path, format!("must be at least {lo} (got {v})"));
            return None;
        }
        u64::try_from(v).ok()
    }

    /// An integer that must be at least `lo` and fit the model's u32 fields.
    fn count(&mut self, v: i64, lo: i64, path: &str) -> Option<u32> {
        let n = self.at_least(v, lo, path)?;
        match u32::try_from(n) {
            Ok(n) => Some(n),
            Err(_) => {
                self.err(path, format!("must be at most {} (got {v})", u32::MAX));
                None
            }
        }
    }

    /// A strictly positive integer, e.g. a timeout or a byte limit.
    fn positive(&mut self, v: i64, path: &str) -> Option<u64> {
        if v <= 0 {
            self.err(path, format!("must be greater than 0 (got {v})"));
            return None;
        }
        u64::try_from(v).ok()
    }

    fn millis(&mut self, v: Option<i64>, lo: i64, hi: i64, default: u64, path: &str) -> Duration {
        let ms = match v {
            Some(v) => self.int_in(v, lo, hi, path).unwrap_or(default),
            None => default,
        };
        Duration::from_millis(ms)
    }

    fn not_blank(&mut self, s: &str, path: &str) -> bool {
        if s.trim().is_empty() {
            self.err(path, "must not be blank");
            return false;
        }
        true
    }

    /// A secret: `env:NAME` is read from the environment now; anything else is taken literally
    /// (handy in tests; examples always use `env:`). Never echoes the value.
    fn secret(&mut self, written: &str, path: &str) -> Option<Secret> {
        let Some(name) = written.strip_prefix("env:") else {
            return self
                .not_blank(written, path)
                .then(|| Secret(written.to_string()));
        };
        let name = name.trim();
        if name.is_empty() {
            self.err(
                path,
                "`env:` needs a variable name, e.g. env:OPENAI_API_KEY",
            );
            return None;
        }
        match (self.env)(name) {
            Some(v) if !v.is_empty() => Some(Secret(v)),
            Some(_) => {
                self.err(
                    path,
                    format!("environment variable `{name}` is set but empty"),
                );
                None
            }
            None => {
                if let Some(warnings) = self.offline.as_deref_mut() {
                    warnings.push(self.positions.problem(
                        self.file,
                        path,
                        format!(
                            "warning: environment variable `{name}` is not set (checked \
                             --offline; `serve` needs it)"
                        ),
                    ));
                    return Some(Secret(String::new()));
                }
                self.err(path, format!("environment variable `{name}` is not set"));
                None
            }
        }
    }

    /// One of a fixed set of spellings; the error lists them.
    fn one_of<T: Copy>(&mut self, written: &str, choices: &[(&str, T)], path: &str) -> Option<T> {
        if let Some((_, v)) = choices.iter().find(|(name, _)| *name == written) {
            return Some(*v);
        }
        let names: Vec<String> = choices.iter().map(|(n, _)| format!("`{n}`")).collect();
        self.err(
            path,
            format!(
                "unknown value `{written}`; expected one of {}",
                names.join(", ")
            ),
        );
        None
    }

    /// Blank entries are mistakes in every list of names/globs we take.
    fn no_blank_entries(&mut self, values: &[String], path: &str) {
        for (i, v) in values.iter().enumerate() {
            if v.trim().is_empty() {
                self.err(&join_index(path, i), "must not be blank");
            }
        }
    }

    /// Returns the model, or every error in file order.
    fn finish(mut self, config: Config) -> Result<Config, ConfigErrors> {
        if self.errors.is_empty() {
            return Ok(config);
        }
        self.errors.sort_by_key(|e| (e.line, e.column));
        Err(ConfigErrors(self.errors))
    }
}

pub(crate) fn validate(
    raw: RawConfig,
    mut ctx: Ctx<'_>,
    source: &str,
) -> Result<Config, ConfigErrors> {
    let server = server(&mut ctx, raw.server.unwrap_or_default());
    let auth = raw.auth.map(|a| auth(&mut ctx, a));
    let state = raw.state.map(|s| state(&mut ctx, s));
    let idempotency = idempotency(&mut ctx, raw.idempotency.unwrap_or_default());
    let defaults_raw = raw.defaults.unwrap_or_default();
    let defaults = Defaults {
        circuit_breaker: targets::breaker(
            &mut ctx,
            &BreakerPolicy::default(),
            defaults_raw.circuit_breaker.as_ref(),
            "defaults.circuitBreaker",
        ),
        max_attempts: defaults_raw
            .max_attempts
            .and_then(|v| ctx.int_in(v, 1, MAX_ATTEMPTS_LIMIT, "defaults.maxAttempts"))
            .map_or(DEFAULT_MAX_ATTEMPTS, |n| {
                u32::try_from(n).unwrap_or(DEFAULT_MAX_ATTEMPTS)
            }),
        retry_budget: retry_budget(&mut ctx, defaults_raw.retry_budget.as_ref()),
    };
    let targets = targets::targets(&mut ctx, &raw.targets, &defaults.circuit_breaker);
    let rules = rules::rules(&mut ctx, &raw.rules, &targets);
    let logging = logging(&mut ctx, raw.logging.unwrap_or_default());
    let mut cache = cache(&mut ctx, raw.cache.unwrap_or_default(), &targets);
    cache.in_use = cache.mode != CacheMode::Off
        || rules
            .iter()
            .any(|r| r.cache_mode.is_some_and(|m| m != CacheMode::Off));
    let config = Config {
        source: source.to_string(),
        server,
        auth,
        state,
        idempotency,
        targets,
        rules,
        defaults,
        logging,
        cache,
    };
    ctx.finish(config)
}

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
const DEFAULT_ADMIN: &str = "127.0.0.1:9090";
const DEFAULT_MAX_REQUEST_BYTES: u64 = 32 * 1024 * 1024;
const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 15 * 60 * 1000;
const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 30_000;
const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 30_000;
const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
const DEFAULT_MAX_STREAM_EVENT_BYTES: u64 = 8 * 1024 * 1024;
const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 * 1024 * 1024;
const DEFAULT_MAX_DYNAMIC_DESTINATIONS: u64 = 1000;
/// Connection timeouts: 100 ms to 1 h.
const CONN_TIMEOUT_RANGE: (i64, i64) = (100, 3_600_000);

/// `None` (after recording an error) when written but unparsable; the default when omitted.
fn socket_addr(
    ctx: &mut Ctx<'_>,
    written: Option<&str>,
    default: &str,
    path: &str,
) -> Option<SocketAddr> {
    let Some(text) = written else {
        return default.parse().ok();
    };
    match text.trim().parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            ctx.err(
                path,
                format!("`{text}` is not a socket address (write IP:PORT, e.g. {default})"),
            );
            None
        }
    }
}

/// Two listeners collide on the same port when their IPs are equal or either is a wildcard.
fn listeners_collide(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

fn server(ctx: &mut Ctx<'_>, raw: RawServer) -> Server {
    let listen = socket_addr(ctx, raw.listen.as_deref(), DEFAULT_LISTEN, "server.listen");
    let admin = socket_addr(ctx, raw.admin.as_deref(), DEFAULT_ADMIN, "server.admin");
    if let (Some(listen), Some(admin)) = (listen, admin) {
        if listen.port() != 0 && listeners_collide(listen, admin) {
            ctx.err(
                "server.admin",
                format!("the admin listener {admin} must differ from server.listen {listen}"),
            );
        }
    }
    // Placeholders for unparsable addresses; the config is rejected anyway.
    let placeholder = SocketAddr::from(([127, 0, 0, 1], 0));
    let (listen, admin) = (listen.unwrap_or(placeholder), admin.unwrap_or(placeholder));
    let tls = raw.tls.map(|t| {
        ctx.not_blank(&t.cert_file, "server.tls.certFile");
        ctx.not_blank(&t.key_file, "server.tls.keyFile");
        Tls {
            cert_file: PathBuf::from(t.cert_file),
            key_file: PathBuf::from(t.key_file),
        }
    });
    let max_request_bytes = raw
        .max_request_bytes
        .and_then(|v| ctx.positive(v, "server.maxRequestBytes"))
        .unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
    let request_timeout = raw
        .request_timeout_milliseconds
        .and_then(|v| ctx.positive(v, "server.requestTimeoutMilliseconds"))
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS);
    let shutdown_grace = raw
        .shutdown_grace_milliseconds
        .and_then(|v| ctx.positive(v, "server.shutdownGraceMilliseconds"))
        .unwrap_or(DEFAULT_SHUTDOWN_GRACE_MS);
    let caller_retry_hint = raw
        .caller_retry_hint
        .and_then(|v| {
            let choices = [
                ("auto", CallerRetryHint::Auto),
                ("off", CallerRetryHint::Off),
            ];
            ctx.one_of(&v, &choices, "server.callerRetryHint")
        })
        .unwrap_or(CallerRetryHint::Auto);
    let stream_commit = raw
        .stream_commit
        .and_then(|v| {
            let choices = [
                ("firstToken", StreamCommit::FirstToken),
                ("firstByte", StreamCommit::FirstByte),
            ];
            ctx.one_of(&v, &choices, "server.streamCommit")
        })
        .unwrap_or(StreamCommit::FirstToken);
    let admin_token = raw
        .admin_token
        .and_then(|t| ctx.secret(&t, "server.adminToken"));
    let (lo, hi) = CONN_TIMEOUT_RANGE;
    let header_read_timeout = ctx.millis(
        raw.header_read_timeout_milliseconds,
        lo,
        hi,
        DEFAULT_HEADER_READ_TIMEOUT_MS,
        "server.headerReadTimeoutMilliseconds",
    );
    let body_read_timeout = ctx.millis(
        raw.body_read_timeout_milliseconds,
        lo,
        hi,
        DEFAULT_BODY_READ_TIMEOUT_MS,
        "server.bodyReadTimeoutMilliseconds",
    );
    let idle_timeout = ctx.millis(
        raw.idle_timeout_milliseconds,
        lo,
        hi,
        DEFAULT_IDLE_TIMEOUT_MS,
        "server.idleTimeoutMilliseconds",
    );
    let mut bounded = |v: Option<i64>, lo: i64, hi: i64, default: u64, path: &str| -> usize {
        let n = v
            .and_then(|v| ctx.int_in(v, lo, hi, path))
            .unwrap_or(default);
        usize::try_from(n).unwrap_or(usize::MAX)
    };
    let max_connections = bounded(
        raw.max_connections,
        1,
        1_000_000,
        DEFAULT_MAX_CONNECTIONS,
        "server.maxConnections",
    );
    let max_stream_event_bytes = bounded(
        raw.max_stream_event_bytes,
        4 * 1024,
        1 << 30,
        DEFAULT_MAX_STREAM_EVENT_BYTES,
        "server.maxStreamEventBytes",
    );
    let max_response_bytes = bounded(
        raw.max_response_bytes,
        64 * 1024,
        4 << 30,
        DEFAULT_MAX_RESPONSE_BYTES,
        "server.maxResponseBytes",
    );
    let max_dynamic_destinations = bounded(
        raw.max_dynamic_destinations,
        1,
        1_000_000,
        DEFAULT_MAX_DYNAMIC_DESTINATIONS,
        "server.maxDynamicDestinations",
    );
    let allowed_origins = raw.allowed_origins.unwrap_or_default();
    for (i, o) in allowed_origins.iter().enumerate() {
        let path = join_index("server.allowedOrigins", i);
        if o != "*" && !is_origin(o) {
            ctx.err(
                &path,
                format!("`{o}` is not an origin (scheme://host[:port], no path) or `*`"),
            );
        }
    }
    Server {
        listen,
        admin,
        tls,
        max_request_bytes: usize::try_from(max_request_bytes).unwrap_or(usize::MAX),
        request_timeout: Duration::from_millis(request_timeout),
        shutdown_grace: Duration::from_millis(shutdown_grace),
        response_headers: raw.response_headers.unwrap_or(true),
        caller_retry_hint,
        stream_commit,
        watch_config: raw.watch_config.unwrap_or(false),
        admin_token,
        header_read_timeout,
        body_read_timeout,
        idle_timeout,
        max_connections,
        max_stream_event_bytes,
        max_response_bytes,
        max_dynamic_destinations,
        allowed_origins,
        allow_pinning: raw.allow_pinning.unwrap_or(true),
        caller_deadline: raw.caller_deadline.unwrap_or(true),
        caller_overrides: raw.caller_overrides.unwrap_or(true),
    }
}

/// `scheme://host[:port]` as browsers send it in `Origin` (no path, query or user info).
fn is_origin(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@', ' '])
}

fn auth(ctx: &mut Ctx<'_>, raw: RawAuth) -> Auth {
    if raw.keys.is_empty() {
        ctx.err(
            "auth.keys",
            "lists no keys; omit `auth` to run without authentication",
        );
    }
    let mut keys = Vec::new();
    for (i, k) in raw.keys.into_iter().enumerate() {
        let path = join_index("auth.keys", i);
        ctx.not_blank(&k.principal, &join_key(&path, "principal"));
        let key_path = join_key(&path, "key");
        let key = match k.key.strip_prefix("sha256:") {
            Some(hex) => sha256_hex(hex.trim()).map(KeyMatch::Sha256).or_else(|| {
                ctx.err(
                    &key_path,
                    "`sha256:` must be followed by 64 hex digits (the key's SHA-256)",
                );
                None
            }),
            None => ctx.secret(&k.key, &key_path).map(KeyMatch::Plain),
        };
        if let Some(models) = &k.models {
            let models_path = join_key(&path, "models");
            if models.is_empty() {
                ctx.err(
                    &models_path,
                    "an empty allow-list permits no model; omit `models` to allow every model",
                );
            }
            ctx.no_blank_entries(models, &models_path);
        }
        let limits = k.limits.map(|l| Limits {
            requests_per_minute: l
                .requests_per_minute
                .and_then(|v| ctx.positive(v, &format!("{path}.limits.requestsPerMinute"))),
            tokens_per_minute: l
                .tokens_per_minute
                .and_then(|v| ctx.positive(v, &format!("{path}.limits.tokensPerMinute"))),
        });
        if let Some(key) = key {
            keys.push(ApiKey {
                principal: k.principal,
                key,
                models: k.models,
                limits,
            });
        }
    }
    Auth { keys }
}

/// 64 hex digits (either case) → 32 bytes.
fn sha256_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

fn state(ctx: &mut Ctx<'_>, raw: RawState) -> State {
    let redis = raw.redis.and_then(|r| {
        // The URL may carry a password, so it may be written as `env:NAME` like any secret.
        let url = ctx.secret(&r.url, "state.redis.url")?;
        let url = url.0;
        if !["redis://", "rediss://", "unix://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            ctx.err(
                "state.redis.url",
                "must start with redis://, rediss:// or unix://",
            );
        }
        let budget = r.budget_milliseconds.unwrap_or(50);
        if !(1..=5000).contains(&budget) {
            ctx.err(
                "state.redis.budgetMilliseconds",
                format!("must be between 1 and 5000 (got {budget})"),
            );
        }
        let sync = r.sync_milliseconds.unwrap_or(250);
        if !(10..=60_000).contains(&sync) {
            ctx.err(
                "state.redis.syncMilliseconds",
                format!("must be between 10 and 60000 (got {sync})"),
            );
        }
        Some(Redis {
            url,
            key_prefix: r.key_prefix.unwrap_or_else(|| "sidetrack:".to_string()),
            budget: std::time::Duration::from_millis(budget),
            sync_interval: std::time::Duration::from_millis(sync),
        })
    });
    State { redis }
}

fn idempotency(ctx: &mut Ctx<'_>, raw: RawIdempotency) -> Idempotency {
    let d = Idempotency::default();
    let mut size = |v: Option<i64>, lo: i64, hi: i64, default: usize, path: &str| {
        v.and_then(|v| ctx.int_in(v, lo, hi, path))
            .and_then(|v| usize::try_from(v).ok())
            .unwrap_or(default)
    };
    let max_entries = size(
        raw.max_entries,
        1,
        10_000_000,
        d.max_entries,
        "idempotency.maxEntries",
    );
    let max_answer_bytes = size(
        raw.max_answer_bytes,
        1024,
        1 << 30,
        d.max_answer_bytes,
        "idempotency.maxAnswerBytes",
    );
    let max_bytes = size(
        raw.max_bytes,
        1024,
        64 << 30,
        d.max_bytes,
        "idempotency.maxBytes",
    );
    let ttl = ctx.millis(
        raw.ttl_milliseconds,
        1000,
        31_536_000_000,
        86_400_000,
        "idempotency.ttlMilliseconds",
    );
    Idempotency {
        ttl,
        max_entries,
        max_answer_bytes,
        max_bytes,
    }
}

fn logging(ctx: &mut Ctx<'_>, raw: RawLogging) -> Logging {
    let level = match raw.level {
        Some(l) => {
            let choices = [
                ("trace", "trace"),
                ("debug", "debug"),
                ("info", "info"),
                ("warn", "warn"),
                ("error", "error"),
            ];
            ctx.one_of(&l, &choices, "logging.level")
                .unwrap_or("info")
                .to_string()
        }
        None => "info".to_string(),
    };
    let routing = match raw.routing.as_deref().map(str::trim) {
        None | Some("stdout") => RoutingSink::Stdout,
        Some("stderr") => RoutingSink::Stderr,
        Some("off") => RoutingSink::Off,
        Some("") => {
            ctx.err(
                "logging.routing",
                "must be stdout, stderr, off or a file path",
            );
            RoutingSink::Stdout
        }
        Some(path) => RoutingSink::File(PathBuf::from(path)),
    };
    if let Some(endpoint) = &raw.otlp_endpoint {
        let shown = crate::redact::redact_url(endpoint);
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            ctx.err(
                "logging.otlpEndpoint",
                format!("`{shown}` is not an http:// or https:// URL"),
            );
        } else if crate::redact::url_has_user_info(endpoint) {
            ctx.err(
                "logging.otlpEndpoint",
                format!(
                    "must not carry credentials (user info in `{shown}`); send them as headers \
                     with OTEL_EXPORTER_OTLP_HEADERS"
                ),
            );
        }
    }
    Logging {
        level,
        routing,
        otlp_endpoint: raw.otlp_endpoint,
    }
}

/// `defaults.maxAttempts` upper bound (SPEC §11).
const MAX_ATTEMPTS_LIMIT: i64 = 100;
const MAX_BUDGET_RATIO: f64 = 10.0;
const MAX_BUDGET_MIN_PER_SECOND: f64 = 100_000.0;

/// `defaults.retryBudget`: `ratio` 0.0..=10.0 (default 0.2), `minPerSecond` 0..=100000 (default 5).
fn retry_budget(ctx: &mut Ctx<'_>, raw: Option<&RawRetryBudget>) -> RetryBudgetPolicy {
    let default = RetryBudgetPolicy::default();
    let Some(raw) = raw else {
        return default;
    };
    let mut number = |v: Option<f64>, hi: f64, fallback: f64, path: &str| match v {
        Some(v) if !(0.0..=hi).contains(&v) => {
            ctx.err(path, format!("must be between 0 and {hi} (got {v})"));
            fallback
        }
        Some(v) => v,
        None => fallback,
    };
    RetryBudgetPolicy {
        ratio: number(
            raw.ratio,
            MAX_BUDGET_RATIO,
            default.ratio,
            "defaults.retryBudget.ratio",
        ),
        min_per_second: number(
            raw.min_per_second,
            MAX_BUDGET_MIN_PER_SECOND,
            default.min_per_second,
            "defaults.retryBudget.minPerSecond",
        ),
    }
}

/// `cache.mode` and `rules[].cache.mode` spellings.
pub(super) const CACHE_MODES: &[(&str, CacheMode)] = &[
    ("off", CacheMode::Off),
    ("lastResort", CacheMode::LastResort),
    ("always", CacheMode::Always),
];

/// `cache` (SPEC §12): every key optional; `semantic` is checked (its target must exist) but not
/// acted on yet.
fn cache(ctx: &mut Ctx<'_>, raw: RawCache, targets: &[Target]) -> Cache {
    let default = Cache::default();
    let mode = raw
        .mode
        .and_then(|m| ctx.one_of(&m, CACHE_MODES, "cache.mode"))
        .unwrap_or(default.mode);
    let ttl = raw
        .ttl_milliseconds
        .and_then(|v| ctx.int_in(v, 1000, 31_536_000_000, "cache.ttlMilliseconds"))
        .map_or(default.ttl, Duration::from_millis);
    let mut size = |v: Option<i64>, lo: i64, hi: i64, fallback: usize, path: &str| {
        v.and_then(|v| ctx.int_in(v, lo, hi, path))
            .map_or(fallback, |n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    let max_entries = size(
        raw.max_entries,
        1,
        10_000_000,
        default.max_entries,
        "cache.maxEntries",
    );
    let max_bytes = size(
        raw.max_bytes,
        1024,
        1 << 40,
        default.max_bytes,
        "cache.maxBytes",
    );
    let scope = raw
        .scope
        .and_then(|s| {
            let choices = [
                ("principal", CacheScope::Principal),
                ("shared", CacheScope::Shared),
            ];
            ctx.one_of(&s, &choices, "cache.scope")
        })
        .unwrap_or(default.scope);
    let semantic = raw.semantic.map(|s| {
        let e = &s.embeddings;
        if ctx.not_blank(&e.target, "cache.semantic.embeddings.target")
            && !targets.iter().any(|t| t.name == e.target)
        {
            ctx.err(
                "cache.semantic.embeddings.target",
                format!("no target named `{}`", e.target),
            );
        }
        ctx.not_blank(&e.model, "cache.semantic.embeddings.model");
        let threshold = match s.similarity_threshold {
            Some(v) if !(0.0..=1.0).contains(&v) => {
                ctx.err(
                    "cache.semantic.similarityThreshold",
                    format!("must be between 0 and 1 (got {v})"),
                );
                0.95
            }
            Some(v) => v,
            None => 0.95,
        };
        Semantic {
            target: e.target.clone(),
            model: e.model.clone(),
            similarity_threshold: threshold,
            embedding_timeout: ctx.millis(
                s.embedding_timeout_milliseconds,
                10,
                60_000,
                300,
                "cache.semantic.embeddingTimeoutMilliseconds",
            ),
        }
    });
    Cache {
        mode,
        ttl,
        max_entries,
        max_bytes,
        scope,
        semantic,
        in_use: false,
    }
}
