//! The config file exactly as written (SPEC §4): one serde policy — camelCase keys, unknown keys
//! rejected — and almost no meaning. Enumerations (`provider`, `operator`, `mode`, ...) and ranges
//! stay strings and wide integers here so that `validate` can report *every* bad value with its
//! path, instead of serde stopping at the first one. Defaults are applied in `validate`, not here.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub server: Option<RawServer>,
    pub auth: Option<RawAuth>,
    pub state: Option<RawState>,
    pub idempotency: Option<RawIdempotency>,
    #[serde(default)]
    pub targets: Vec<RawTarget>,
    #[serde(default)]
    pub rules: Vec<RawRule>,
    pub defaults: Option<RawDefaults>,
    pub logging: Option<RawLogging>,
    pub cache: Option<RawCache>,
}

/// `cache` (SPEC §12).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawCache {
    pub mode: Option<String>,
    pub ttl_milliseconds: Option<i64>,
    pub max_entries: Option<i64>,
    pub max_bytes: Option<i64>,
    pub scope: Option<String>,
    pub semantic: Option<RawSemantic>,
}

/// `cache.semantic` (SPEC §12).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawSemantic {
    pub embeddings: RawEmbeddingsDest,
    pub similarity_threshold: Option<f64>,
    pub embedding_timeout_milliseconds: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawEmbeddingsDest {
    pub target: String,
    pub model: String,
}

/// `rules[].cache`: the cache mode for the rule's requests.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRuleCache {
    pub mode: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawServer {
    pub listen: Option<String>,
    pub admin: Option<String>,
    pub tls: Option<RawTls>,
    pub max_request_bytes: Option<i64>,
    pub request_timeout_milliseconds: Option<i64>,
    pub shutdown_grace_milliseconds: Option<i64>,
    pub response_headers: Option<bool>,
    pub caller_retry_hint: Option<String>,
    pub stream_commit: Option<String>,
    pub watch_config: Option<bool>,
    pub admin_token: Option<String>,
    pub header_read_timeout_milliseconds: Option<i64>,
    pub body_read_timeout_milliseconds: Option<i64>,
    pub idle_timeout_milliseconds: Option<i64>,
    pub max_connections: Option<i64>,
    pub max_stream_event_bytes: Option<i64>,
    pub max_response_bytes: Option<i64>,
    pub max_dynamic_destinations: Option<i64>,
    pub allowed_origins: Option<Vec<String>>,
    pub allow_pinning: Option<bool>,
    pub caller_deadline: Option<bool>,
    pub caller_overrides: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawTls {
    pub cert_file: String,
    pub key_file: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawAuth {
    #[serde(default)]
    pub keys: Vec<RawApiKey>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawApiKey {
    pub principal: String,
    pub key: String,
    pub models: Option<Vec<String>>,
    pub limits: Option<RawLimits>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub requests_per_minute: Option<i64>,
    pub tokens_per_minute: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawState {
    pub redis: Option<RawRedis>,
}

/// `idempotency:` (SPEC §12): Idempotency-Key support is always on; these bound it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawIdempotency {
    pub ttl_milliseconds: Option<i64>,
    pub max_entries: Option<i64>,
    pub max_answer_bytes: Option<i64>,
    pub max_bytes: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRedis {
    pub url: String,
    pub key_prefix: Option<String>,
    pub budget_milliseconds: Option<u64>,
    pub sync_milliseconds: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawTarget {
    pub name: String,
    pub provider: String,
    pub base_url: Option<String>,
    pub region: Option<String>,
    pub api_key: Option<String>,
    pub models: Option<Vec<String>>,
    pub connect_timeout_milliseconds: Option<i64>,
    pub circuit_breaker: Option<RawBreaker>,
    pub capabilities: Option<RawCapabilities>,
    pub api_version: Option<String>,
    pub entra_token: Option<String>,
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// `provider: vertex`: the Google Cloud project.
    pub project: Option<String>,
    /// `provider: vertex`: `env:NAME`, the variable holding a service-account JSON file's path.
    pub credentials: Option<String>,
    /// `provider: vertex`: a ready OAuth bearer token (`env:NAME`).
    pub access_token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawCapabilities {
    pub tools: Option<bool>,
    pub json_schema: Option<bool>,
    pub context_window: Option<i64>,
}

/// SPEC §5.5 knobs; every one optional (`null` counts as not written).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawBreaker {
    pub consecutive_failures: Option<i64>,
    pub open_milliseconds: Option<i64>,
    pub max_open_milliseconds: Option<i64>,
    pub backoff_multiplier: Option<f64>,
    pub half_open_probes: Option<i64>,
    pub honor_retry_after: Option<bool>,
    pub health_threshold: Option<f64>,
    pub restore_health: Option<f64>,
    pub unhealthy_condition: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub circuit_breaker: Option<RawBreaker>,
    pub max_attempts: Option<i64>,
    pub retry_budget: Option<RawRetryBudget>,
}

/// `defaults.retryBudget` (SPEC §11).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRetryBudget {
    pub ratio: Option<f64>,
    pub min_per_second: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawLogging {
    pub level: Option<String>,
    pub routing: Option<String>,
    pub otlp_endpoint: Option<String>,
}

/// One entry of `rules`. `name` is optional and defaults to `rule-<priority>`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRule {
    pub name: Option<String>,
    pub priority: i64,
    pub match_models: Option<RawMatcher>,
    pub match_principals: Option<RawMatcher>,
    pub route_to_target: RawRouteToTarget,
    pub cache: Option<RawRuleCache>,
}

/// `matchModels` / `matchPrincipals`: a list of values (default operator), a single string, or
/// `{ operator, values }` (AgentCore's shape).
#[derive(Debug)]
pub(crate) struct RawMatcher {
    pub operator: Option<String>,
    pub values: Vec<String>,
    /// `{ operator, values }` form: the values live under `.values`, not directly at the key.
    pub written_as_map: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMatcherFull {
    operator: Option<String>,
    values: Vec<String>,
}

impl<'de> Deserialize<'de> for RawMatcher {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMatcher;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of strings or { operator, values }")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawMatcher, E> {
                Ok(RawMatcher {
                    operator: None,
                    values: vec![s.to_string()],
                    written_as_map: false,
                })
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawMatcher, A::Error> {
                let mut values = Vec::new();
                while let Some(v) = seq.next_element::<String>()? {
                    values.push(v);
                }
                Ok(RawMatcher {
                    operator: None,
                    values,
                    written_as_map: false,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawMatcher, A::Error> {
                let full = RawMatcherFull::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawMatcher {
                    operator: full.operator,
                    values: full.values,
                    written_as_map: true,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `routeToTarget`: exactly one of the three route kinds must be written (checked in `validate`).
/// `fallback` sits beside `staticRoute`, as in AgentCore's rule API.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRouteToTarget {
    pub static_route: Option<RawDestination>,
    pub fallback: Option<RawFallback>,
    pub priority_groups: Option<Vec<RawPriorityGroup>>,
    pub weighted_route: Option<RawWeightedRoute>,
}

/// `{ target, model }`; `model` omitted = send the caller's model.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawDestination {
    pub target: String,
    pub model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawFallback {
    pub trigger_on: Option<RawTriggerOn>,
    pub first_byte_timeout_milliseconds: Option<i64>,
    pub first_token_timeout_milliseconds: Option<i64>,
    pub stream_idle_timeout_milliseconds: Option<i64>,
    pub retry: Option<RawRetry>,
    pub hedge: Option<RawHedge>,
    pub circuit_breaker: Option<RawBreakerMode>,
    pub target_fallback: Option<Vec<RawFallbackTarget>>,
}

/// A hop's `retry` block (SPEC §11); every key optional, `on` omitted = the hop's triggers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub attempts: Option<i64>,
    pub backoff_milliseconds: Option<i64>,
    pub max_backoff_milliseconds: Option<i64>,
    pub on: Option<RawTriggerOn>,
}

/// A hop's `hedge` block (SPEC §11).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawHedge {
    pub after_milliseconds: i64,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawTriggerOn {
    pub status_codes: Option<Vec<RawStatusCode>>,
    pub errors: Option<Vec<String>>,
}

/// A status code written as a string (`"429"`, `"5XX"`) or an integer (`429`); kept as text.
#[derive(Debug)]
pub(crate) struct RawStatusCode(pub String);

impl<'de> Deserialize<'de> for RawStatusCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawStatusCode;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a status code such as \"429\", 503 or \"5XX\"")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawStatusCode, E> {
                Ok(RawStatusCode(s.to_string()))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawStatusCode, E> {
                Ok(RawStatusCode(n.to_string()))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawStatusCode, E> {
                Ok(RawStatusCode(n.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawBreakerMode {
    pub mode: Option<String>,
}

/// One `targetFallback` hop: a destination with its own (never inherited) trigger and timeout.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawFallbackTarget {
    pub target: String,
    pub model: Option<String>,
    pub trigger_on: Option<RawTriggerOn>,
    pub first_byte_timeout_milliseconds: Option<i64>,
    pub first_token_timeout_milliseconds: Option<i64>,
    pub stream_idle_timeout_milliseconds: Option<i64>,
    pub retry: Option<RawRetry>,
    pub hedge: Option<RawHedge>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawPriorityGroup {
    pub destinations: Vec<RawDestination>,
    pub trigger_on: Option<RawTriggerOn>,
    pub first_byte_timeout_milliseconds: Option<i64>,
    pub first_token_timeout_milliseconds: Option<i64>,
    pub stream_idle_timeout_milliseconds: Option<i64>,
    pub retry: Option<RawRetry>,
    pub hedge: Option<RawHedge>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawWeightedRoute {
    pub legs: Vec<RawLeg>,
    pub stickiness: Option<RawStickiness>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawLeg {
    pub target: String,
    pub model: Option<String>,
    pub weight: i64,
    pub fallback: Option<RawFallback>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawStickiness {
    pub header: String,
}
