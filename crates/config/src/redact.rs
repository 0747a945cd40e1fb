//! The effective configuration as JSON, every secret replaced by `"***"` (for `GET /admin/config`).
//! Keys and units match the config file, so the output reads like a fully-defaulted config.
//! [`redact_url`] is the one way a URL is shown, here and in logs (SPEC §14).

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::model::*;

const REDACTED: &str = "***";

impl Config {
    /// The effective config (defaults applied, `env:` resolved) with every secret — API keys,
    /// auth keys, the admin token, a Redis password, credentials in any URL — replaced by `"***"`.
    pub fn redacted_json(&self) -> Value {
        json!({
            "source": self.source,
            "server": server(&self.server),
            "auth": self.auth.as_ref().map(auth),
            "state": self.state.as_ref().map(|s| json!({
                "redis": s.redis.as_ref().map(|r| json!({
                    "url": redact_url(&r.url),
                    "keyPrefix": r.key_prefix,
                    "budgetMilliseconds": r.budget.as_millis() as u64,
                    "syncMilliseconds": r.sync_interval.as_millis() as u64,
                })),
            })),
            "idempotency": {
                "ttlMilliseconds": self.idempotency.ttl.as_millis() as u64,
                "maxEntries": self.idempotency.max_entries,
                "maxAnswerBytes": self.idempotency.max_answer_bytes,
                "maxBytes": self.idempotency.max_bytes,
            },
            "targets": self.targets.iter().map(target).collect::<Vec<_>>(),
            "rules": self.rules.iter().map(rule).collect::<Vec<_>>(),
            "defaults": {
                "circuitBreaker": breaker(&self.defaults.circuit_breaker),
                "maxAttempts": self.defaults.max_attempts,
                "retryBudget": {
                    "ratio": self.defaults.retry_budget.ratio,
                    "minPerSecond": self.defaults.retry_budget.min_per_second,
                },
            },
            "logging": {
                "level": self.logging.level,
                "routing": match &self.logging.routing {
                    RoutingSink::Stdout => "stdout".to_string(),
                    RoutingSink::Stderr => "stderr".to_string(),
                    RoutingSink::Off => "off".to_string(),
                    RoutingSink::File(p) => p.display().to_string(),
                },
                "otlpEndpoint": self.logging.otlp_endpoint.as_deref().map(redact_url),
            },
            "cache": cache(&self.cache),
        })
    }
}

fn millis(d: std::time::Duration) -> u128 {
    d.as_millis()
}

fn server(s: &Server) -> Value {
    json!({
        "listen": s.listen.to_string(),
        "admin": s.admin.to_string(),
        "tls": s.tls.as_ref().map(|t| json!({
            "certFile": t.cert_file.display().to_string(),
            "keyFile": t.key_file.display().to_string(),
        })),
        "maxRequestBytes": s.max_request_bytes,
        "requestTimeoutMilliseconds": millis(s.request_timeout),
        "shutdownGraceMilliseconds": millis(s.shutdown_grace),
        "responseHeaders": s.response_headers,
        "callerRetryHint": match s.caller_retry_hint {
            CallerRetryHint::Auto => "auto",
            CallerRetryHint::Off => "off",
        },
        "streamCommit": match s.stream_commit {
            StreamCommit::FirstToken => "firstToken",
            StreamCommit::FirstByte => "firstByte",
        },
        "watchConfig": s.watch_config,
        "adminToken": s.admin_token.as_ref().map(|_| REDACTED),
        "headerReadTimeoutMilliseconds": millis(s.header_read_timeout),
        "bodyReadTimeoutMilliseconds": millis(s.body_read_timeout),
        "idleTimeoutMilliseconds": millis(s.idle_timeout),
        "maxConnections": s.max_connections,
        "maxStreamEventBytes": s.max_stream_event_bytes,
        "maxResponseBytes": s.max_response_bytes,
        "maxDynamicDestinations": s.max_dynamic_destinations,
        "allowedOrigins": s.allowed_origins,
        "allowPinning": s.allow_pinning,
        "callerDeadline": s.caller_deadline,
        "callerOverrides": s.caller_overrides,
    })
}

fn auth(a: &Auth) -> Value {
    let keys: Vec<Value> = a
        .keys
        .iter()
        .map(|k| {
            json!({
                "principal": k.principal,
                "key": match k.key {
                    KeyMatch::Plain(_) => REDACTED,
                    KeyMatch::Sha256(_) => "sha256:***",
                },
                "models": k.models,
                "limits": k.limits.map(|l| json!({
                    "requestsPerMinute": l.requests_per_minute,
                    "tokensPerMinute": l.tokens_per_minute,
                })),
            })
        })
        .collect();
    json!({ "keys": keys })
}

/// Query parameters whose values are hidden when a URL is shown: any name containing one of these
/// (ASCII case ignored), e.g. `api_key`, `X-Amz-Signature`, `access_token`.
const SECRET_PARAMS: [&str; 6] = ["key", "token", "secret", "password", "sig", "credential"];

/// A URL as it may be shown (`/admin/config`, logs, messages): user info redacted
/// (`redis://user:pass@host/0` → `redis://user:***@host/0`; a user alone, which may be a token,
/// → `***@`), and the values of secret-looking query parameters ([`SECRET_PARAMS`]) replaced by
/// `***`. Borrowed when there is nothing to hide. Text without a scheme is read as
/// `host/path?query` (a mistyped URL shown in a `check` message).
pub fn redact_url(url: &str) -> Cow<'_, str> {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (path, query, fragment) = split_tail(tail);
    let secret_param = |p: &&str| {
        let name = p
            .split_once('=')
            .map_or(*p, |(n, _)| n)
            .to_ascii_lowercase();
        p.contains('=') && SECRET_PARAMS.iter().any(|s| name.contains(s))
    };
    let userinfo = authority.rsplit_once('@');
    let query_secret = query.is_some_and(|q| q.split('&').any(|p| secret_param(&p)));
    if userinfo.is_none() && !query_secret {
        return Cow::Borrowed(url);
    }
    let mut out = scheme.map_or_else(String::new, |s| format!("{s}://"));
    match userinfo {
        Some((info, host)) => {
            match info.split_once(':') {
                Some((user, _)) => out.push_str(&format!("{user}:{REDACTED}@")),
                None => out.push_str(&format!("{REDACTED}@")),
            }
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(q) = query {
        out.push('?');
        let params: Vec<Cow<'_, str>> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((name, _)) if secret_param(&p) => Cow::Owned(format!("{name}={REDACTED}")),
                _ => Cow::Borrowed(p),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Cow::Owned(out)
}

/// Does a URL carry user info (`scheme://user[:password]@host`)?
pub fn url_has_user_info(url: &str) -> bool {
    url.split_once("://").is_some_and(|(_, rest)| {
        rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())].contains('@')
    })
}

/// `/path?query#fragment` → its three parts.
fn split_tail(tail: &str) -> (&str, Option<&str>, Option<&str>) {
    let (before, fragment) = match tail.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (tail, None),
    };
    match before.split_once('?') {
        Some((path, query)) => (path, Some(query), fragment),
        None => (before, None, fragment),
    }
}

fn target(t: &Target) -> Value {
    json!({
        "name": t.name,
        "provider": t.provider.as_str(),
        "baseUrl": redact_url(&t.base_url),
        "region": t.region,
        "apiKey": t.api_key.as_ref().map(|_| REDACTED),
        "models": t.models,
        "connectTimeoutMilliseconds": millis(t.connect_timeout),
        "circuitBreaker": breaker(&t.circuit_breaker),
        "capabilities": {
            "tools": t.capabilities.tools,
            "jsonSchema": t.capabilities.json_schema,
            "contextWindow": t.capabilities.context_window,
        },
        "apiVersion": t.api_version,
        "entraToken": t.entra_token.as_ref().map(|_| REDACTED),
        // Names shown, values hidden: a header value is as secret as a key (SPEC §13).
        "headers": t.headers.iter().map(|(name, _)| (name.clone(), Value::from(REDACTED))).collect::<Map<String, Value>>(),
        "project": t.project,
        "credentials": match &t.vertex_auth {
            Some(VertexAuth::ServiceAccount(sa)) => Some(json!({
                "file": sa.file,
                "clientEmail": sa.client_email,
                "privateKey": REDACTED,
                "tokenUri": sa.token_uri,
            })),
            _ => None,
        },
        "accessToken": match &t.vertex_auth {
            Some(VertexAuth::AccessToken(_)) => Some(REDACTED),
            _ => None,
        },
    })
}

fn breaker(b: &BreakerPolicy) -> Value {
    json!({
        "consecutiveFailures": b.settings.consecutive_failures,
        "openMilliseconds": millis(b.settings.open),
        "maxOpenMilliseconds": millis(b.settings.max_open),
        "backoffMultiplier": b.settings.backoff_multiplier,
        "halfOpenProbes": b.settings.half_open_probes,
        "honorRetryAfter": b.settings.honor_retry_after,
        "healthThreshold": b.settings.health_threshold,
        "restoreHealth": b.settings.restore_health,
        "unhealthyCondition": b.unhealthy_condition,
        "overridden": b.overridden,
    })
}

fn matcher(m: &Matcher) -> Value {
    json!({
        "operator": match m.operator {
            MatchOperator::StringLike => "StringLike",
            MatchOperator::StringEquals => "StringEquals",
        },
        "values": m.values,
    })
}

fn rule(r: &Rule) -> Value {
    let route = match &r.route {
        Route::Static(s) => {
            let mut m = static_route(s);
            // AgentCore shape: `fallback` sits beside `staticRoute`.
            let fallback = m.remove("fallback").unwrap_or(Value::Null);
            json!({ "staticRoute": Value::Object(m), "fallback": fallback })
        }
        Route::PriorityGroups(groups) => json!({
            "priorityGroups": groups.iter().map(|g| {
                let mut v = policy(&g.policy);
                v.insert("destinations".into(), g.destinations.iter().map(destination).collect());
                Value::Object(v)
            }).collect::<Vec<_>>(),
        }),
        Route::Weighted(w) => json!({
            "weightedRoute": {
                "legs": w.legs.iter().map(|l| {
                    let mut m = static_route(&l.route);
                    m.insert("weight".into(), json!(l.weight));
                    Value::Object(m)
                }).collect::<Vec<_>>(),
                "stickiness": w.stickiness_header.as_ref().map(|h| json!({ "header": h })),
            },
        }),
    };
    json!({
        "name": r.name,
        "priority": r.priority,
        "matchModels": r.match_models.as_ref().map(matcher),
        "matchPrincipals": r.match_principals.as_ref().map(matcher),
        "routeToTarget": route,
        "cache": r.cache_mode.map(|m| json!({ "mode": m.as_str() })),
    })
}

fn cache(c: &Cache) -> Value {
    json!({
        "mode": c.mode.as_str(),
        "ttlMilliseconds": millis(c.ttl),
        "maxEntries": c.max_entries,
        "maxBytes": c.max_bytes,
        "scope": match c.scope {
            CacheScope::Principal => "principal",
            CacheScope::Shared => "shared",
        },
        "semantic": c.semantic.as_ref().map(|s| json!({
            "embeddings": { "target": s.target, "model": s.model },
            "similarityThreshold": s.similarity_threshold,
            "embeddingTimeoutMilliseconds": millis(s.embedding_timeout),
        })),
    })
}

fn destination(d: &DestinationRef) -> Value {
    json!({ "target": d.target, "model": d.model })
}

/// `statusCodes` + `errors` (kinds, stream timeouts and classes) of a trigger set.
fn trigger_set(t: &sidetrack_resilience::Triggers) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "statusCodes".into(),
        json!(t
            .statuses()
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()),
    );
    m.insert(
        "errors".into(),
        json!(t.names().iter().map(|n| n.as_str()).collect::<Vec<_>>()),
    );
    m
}

/// A hop's keys: `triggerOn` (always written out, with `default: true` when it was omitted), the
/// timeouts (`null` = none), `retry` (`null` = no retries; `on: null` = the hop's triggers) and
/// `hedge` (`null` = no hedging).
fn policy(p: &HopPolicy) -> Map<String, Value> {
    let mut m = Map::new();
    let mut trigger_on = trigger_set(&p.triggers);
    trigger_on.insert("default".into(), json!(p.triggers.is_default()));
    m.insert("triggerOn".into(), Value::Object(trigger_on));
    m.insert(
        "firstByteTimeoutMilliseconds".into(),
        json!(p.first_byte_timeout.map(millis)),
    );
    m.insert(
        "firstTokenTimeoutMilliseconds".into(),
        json!(p.first_token_timeout.map(millis)),
    );
    m.insert(
        "streamIdleTimeoutMilliseconds".into(),
        json!(p.stream_idle_timeout.map(millis)),
    );
    m.insert(
        "retry".into(),
        json!(p.retry.as_ref().map(|r| json!({
            "attempts": r.attempts,
            "backoffMilliseconds": millis(r.backoff),
            "maxBackoffMilliseconds": millis(r.max_backoff),
            "on": r.on.as_ref().map(|t| Value::Object(trigger_set(t))),
        }))),
    );
    m.insert(
        "hedge".into(),
        json!(p
            .hedge
            .map(|h| json!({ "afterMilliseconds": millis(h.after) }))),
    );
    m
}

/// `{ target, model, fallback: { triggerOn, firstByteTimeoutMilliseconds, circuitBreaker,
/// targetFallback } }` for a static route or a weighted leg.
fn static_route(s: &StaticRoute) -> Map<String, Value> {
    let mut fallback = policy(&s.primary_policy);
    fallback.insert(
        "circuitBreaker".into(),
        json!({ "mode": match s.breaker_mode {
            BreakerMode::Enabled => "ENABLED",
            BreakerMode::Disabled => "DISABLED",
        }}),
    );
    let hops: Vec<Value> = s
        .fallbacks
        .iter()
        .map(|h| {
            let mut m = policy(&h.policy);
            m.insert("target".into(), json!(h.destination.target));
            m.insert("model".into(), json!(h.destination.model));
            Value::Object(m)
        })
        .collect();
    fallback.insert("targetFallback".into(), Value::Array(hops));
    let mut m = Map::new();
    m.insert("target".into(), json!(s.primary.target));
    m.insert("model".into(), json!(s.primary.model));
    m.insert("fallback".into(), Value::Object(fallback));
    m
}
