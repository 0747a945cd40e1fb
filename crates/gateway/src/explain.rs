//! `sidetrack explain`: the route a request would take, with every hop's *effective* triggers and
//! timeouts, which of them are defaults, and the breaker policy of each destination.

use std::fmt::Write;

use sidetrack_config::{
    BreakerMode, BreakerPolicy, CacheMode, CacheScope, Config, HopPolicy, RetryBudgetPolicy, Route,
    StaticRoute, Target, DEFAULT_MAX_ATTEMPTS,
};

use crate::routing::{self, find_rule, Picker};

const DEFAULT_CONNECT_MS: u128 = 5000;

pub fn explain(cfg: &Config, model: &str, principal: &str, dialect: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "request: model `{model}`, principal `{principal}`, dialect {dialect}"
    );
    write_access(&mut out, cfg, model, principal);
    if let Some(plan) = routing::pinned(cfg, model) {
        let _ = writeln!(
            out,
            "route: PINNED (`target/model` names the target; rules are not consulted; the model is sent whatever the target's `models` list)"
        );
        for hop in &plan.hops {
            for d in &hop.destinations {
                write_hop(&mut out, 0, true, d.target, &d.model, &hop.policy, false);
            }
        }
        write_request_rules(&mut out, cfg);
        write_cache(&mut out, cfg, None);
        return out;
    }
    if !cfg.server.allow_pinning
        && model
            .split_once('/')
            .is_some_and(|(t, _)| cfg.target(t).is_some())
    {
        let _ = writeln!(
            out,
            "pinning: off (server.allowPinning: false) — `{model}` is an ordinary model name"
        );
    }
    if let Some(rule) = find_rule(cfg, model, principal) {
        let _ = writeln!(
            out,
            "route: RULE `{}` (priority {}, rules[{}])",
            rule.name, rule.priority, rule.index
        );
        write_rule(&mut out, cfg, &rule.route, model);
        write_request_rules(&mut out, cfg);
        write_cache(&mut out, cfg, Some(&rule.name));
        return out;
    }
    match routing::default_route(cfg, model, &Picker::default()) {
        Some(_) => {
            let _ = writeln!(
                out,
                "route: DEFAULT (no rule matched; targets whose `models` match, exact beats glob, round-robin among equals)"
            );
            for (_, t) in routing::default_candidates(cfg, model) {
                write_hop(
                    &mut out,
                    0,
                    true,
                    t,
                    model,
                    routing::default_policy(),
                    false,
                );
            }
            write_request_rules(&mut out, cfg);
            write_cache(&mut out, cfg, None);
        }
        None => {
            let _ = writeln!(out, "route: UNROUTABLE — no rule matches and no target lists this model; callers get 404");
        }
    }
    out
}

/// A rule's route: its chain, each priority group as a hop, or each weighted leg's own chain.
fn write_rule(out: &mut String, cfg: &Config, route: &Route, model: &str) {
    match route {
        Route::Static(s) => write_static(out, cfg, s, model, ""),
        Route::PriorityGroups(groups) => {
            let _ = writeln!(
                out,
                "  priority groups: each group is one hop; members are load-balanced"
            );
            let hops = routing::group_hops(cfg, groups, model);
            let count = hops.len();
            for (k, hop) in hops.iter().enumerate() {
                let (i, n) = (hop.index, hop.destinations.len());
                let _ = writeln!(out, "  hop {i} (priority group of {n}):");
                for d in &hop.destinations {
                    write_hop(
                        out,
                        i,
                        k + 1 == count,
                        d.target,
                        &d.model,
                        &hop.policy,
                        true,
                    );
                }
            }
        }
        Route::Weighted(w) => {
            let total: u32 = w.legs.iter().map(|l| l.weight).sum();
            if let Some(h) = &w.stickiness_header {
                let _ = writeln!(out, "  stickiness: same `{h}` header value → same leg");
            }
            for (i, leg) in w.legs.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "  leg {i}: weight {}/{} — walks its own chain:",
                    leg.weight, total
                );
                write_static(out, cfg, &leg.route, model, "  ");
            }
        }
    }
}

/// The index (`Rule::index`) of the rule a request for `model` from `principal` takes; `None` for
/// a pin or default routing. `sidetrack explain` prints that rule's `check` warnings.
pub fn route_rule(cfg: &Config, model: &str, principal: &str) -> Option<usize> {
    if routing::pinned(cfg, model).is_some() {
        return None;
    }
    find_rule(cfg, model, principal).map(|r| r.index)
}

/// The access check (SPEC §5.2): the principal's `auth.keys[].models`, against the model part of a
/// pin or the model as written. Rule conditions select; only this refuses (403).
fn write_access(out: &mut String, cfg: &Config, model: &str, principal: &str) {
    let Some(auth) = &cfg.auth else {
        return;
    };
    let keys: Vec<(usize, &sidetrack_config::ApiKey)> = auth
        .keys
        .iter()
        .enumerate()
        .filter(|(_, k)| k.principal == principal)
        .collect();
    if keys.is_empty() {
        let _ = writeln!(
            out,
            "access: no key in auth.keys has principal `{principal}` (callers without a valid key get 401)"
        );
        return;
    }
    let name = routing::access_name(cfg, model);
    let checked = if name == model {
        format!("`{model}`")
    } else {
        format!("`{name}` (the model part of the pin)")
    };
    for (i, k) in keys {
        match &k.models {
            None => {
                let _ = writeln!(out, "access: allowed (auth.keys[{i}] has no `models` list)");
            }
            Some(globs) if globs.iter().any(|g| crate::glob::glob_match(g, name)) => {
                let _ = writeln!(
                    out,
                    "access: allowed — {checked} matches auth.keys[{i}].models {globs:?}"
                );
            }
            Some(globs) => {
                let _ = writeln!(
                    out,
                    "access: DENIED (403 before any route) — {checked} matches none of auth.keys[{i}].models {globs:?}"
                );
            }
        }
    }
}

fn write_static(out: &mut String, cfg: &Config, s: &StaticRoute, model: &str, indent: &str) {
    let mode = match s.breaker_mode {
        BreakerMode::Enabled => "ENABLED (open destinations are skipped unless last)",
        BreakerMode::Disabled => "DISABLED (nothing is skipped by breakers on this route)",
    };
    let _ = writeln!(out, "{indent}  fallback.circuitBreaker.mode: {mode}");
    let hops = routing::static_hops(cfg, s, model);
    let count = hops.len();
    for (k, hop) in hops.iter().enumerate() {
        let i = hop.index;
        if i == 0 {
            let _ = writeln!(out, "{indent}  hop 0 (primary):");
        } else {
            let _ = writeln!(out, "{indent}  hop {i} (fallback {i}):");
        }
        for d in &hop.destinations {
            write_hop(
                out,
                i,
                k + 1 == count,
                d.target,
                &d.model,
                &hop.policy,
                true,
            );
        }
    }
}

/// One destination of hop `hop` (`last`: no hop after it) with its hop's effective keys.
pub(crate) fn write_hop(
    out: &mut String,
    hop: usize,
    last: bool,
    t: &Target,
    model: &str,
    p: &HopPolicy,
    in_rule: bool,
) {
    let serves = t.models.is_empty() || t.models.iter().any(|g| crate::glob::glob_match(g, model));
    let _ = writeln!(
        out,
        "      destination {}/{} (provider {}, {}){}",
        t.name,
        model,
        t.provider.as_str(),
        sidetrack_config::redact_url(&t.base_url),
        if serves {
            ""
        } else {
            "  ← not in the target's `models`; sent anyway (only default routing reads them)"
        }
    );
    let inherit = if in_rule && hop > 0 {
        "; nothing is inherited from earlier hops"
    } else {
        ""
    };
    let trig_note = if p.triggers.is_default() {
        format!("default — this hop has no triggerOn{inherit}")
    } else {
        "written (replaces the default)".to_owned()
    };
    let _ = writeln!(out, "        triggerOn: {}  [{trig_note}]", p.triggers);
    match p.first_byte_timeout {
        Some(d) => {
            let _ = writeln!(
                out,
                "        firstByteTimeoutMilliseconds: {}  [written]",
                d.as_millis()
            );
        }
        None => {
            let _ = writeln!(
                out,
                "        firstByteTimeoutMilliseconds: none  [default{inherit}]"
            );
        }
    }
    for (key, value, what) in [
        (
            "firstTokenTimeoutMilliseconds",
            p.first_token_timeout,
            "streamed requests: send → first content event",
        ),
        (
            "streamIdleTimeoutMilliseconds",
            p.stream_idle_timeout,
            "longest silence between upstream events",
        ),
    ] {
        match value {
            Some(d) => {
                let _ = writeln!(out, "        {key}: {} ({what})  [written]", d.as_millis());
            }
            None => {
                let _ = writeln!(out, "        {key}: none  [default{inherit}]");
            }
        }
    }
    write_retry(out, p, inherit);
    match (p.hedge, last) {
        (Some(h), false) => {
            let _ = writeln!(
                out,
                "        hedge: after {} ms without a commit the next hop starts too; the first to commit wins  [written]",
                h.after.as_millis()
            );
        }
        (Some(h), true) => {
            let _ = writeln!(
                out,
                "        hedge: after {} ms — but this is the last hop: nothing to hedge to, never fires  [written]",
                h.after.as_millis()
            );
        }
        (None, _) => {
            let _ = writeln!(out, "        hedge: none  [default{inherit}]");
        }
    }
    let c = t.connect_timeout.as_millis();
    let c_note = if c == DEFAULT_CONNECT_MS {
        "default"
    } else {
        "target setting"
    };
    let _ = writeln!(out, "        connectTimeoutMilliseconds: {c}  [{c_note}]");
    let _ = writeln!(
        out,
        "        circuitBreaker: {}",
        breaker(&t.circuit_breaker)
    );
}

/// A hop's effective `retry`: how often, how long between, on what.
fn write_retry(out: &mut String, p: &HopPolicy, inherit: &str) {
    let Some(r) = &p.retry else {
        let _ = writeln!(
            out,
            "        retry: none (attempts 0: this hop is tried once)  [default{inherit}]"
        );
        return;
    };
    let on = match &r.on {
        Some(t) => format!("on {t} (retry.on)"),
        None => format!("on the hop's triggers ({})", p.triggers),
    };
    let _ = writeln!(
        out,
        "        retry: attempts {}, backoffMilliseconds {}, maxBackoffMilliseconds {} (full jitter; an upstream Retry-After up to the max is honoured), {on}  [written]",
        r.attempts,
        r.backoff.as_millis(),
        r.max_backoff.as_millis(),
    );
}

/// The request-level rules of SPEC §11 that bound every walk: the attempt cap, the retry budget,
/// the deadline and the caller's overrides.
/// The response store's mode for the route (SPEC §12): the rule's own `cache.mode`, else the
/// top-level one.
fn write_cache(out: &mut String, cfg: &Config, rule: Option<&str>) {
    let own = rule
        .and_then(|name| cfg.rules.iter().find(|r| r.name == name))
        .and_then(|r| r.cache_mode);
    let mode = cfg.cache_mode(rule);
    let what = match mode {
        CacheMode::Off => "nothing is stored or served",
        CacheMode::LastResort => {
            "answers are stored; one is served only when the walk ends without success"
        }
        CacheMode::Always => "answers are stored; a stored one is served before any upstream call",
    };
    let from = match own {
        Some(_) => "rules[].cache.mode",
        None if cfg.cache.mode == CacheMode::Off => "default",
        None => "cache.mode",
    };
    let scope = match cfg.cache.scope {
        CacheScope::Principal => "per principal",
        CacheScope::Shared => "shared by every principal",
    };
    let _ = write!(out, "cache: {} — {what}", mode.as_str());
    if mode != CacheMode::Off {
        let _ = write!(out, "; scope {scope}, ttl {} ms", cfg.cache.ttl.as_millis());
        if let Some(sem) = &cfg.cache.semantic {
            let _ = write!(
                out,
                "; semantic: cosine ≥ {} via {}/{} within {} ms",
                sem.similarity_threshold,
                sem.target,
                sem.model,
                sem.embedding_timeout.as_millis()
            );
        }
    }
    let _ = writeln!(out, "  [{from}]");
}

fn write_request_rules(out: &mut String, cfg: &Config) {
    let d = &cfg.defaults;
    let mark = |default: bool| if default { "default" } else { "written" };
    let _ = writeln!(out, "request rules:");
    let _ = writeln!(
        out,
        "  maxAttempts: {} (every attempt of the request: hops, retries and hedges; then the last response is returned)  [{}]",
        d.max_attempts,
        mark(d.max_attempts == DEFAULT_MAX_ATTEMPTS)
    );
    let b = d.retry_budget;
    let _ = writeln!(
        out,
        "  retryBudget: ratio {}, minPerSecond {} — per destination, retries in the last 10 s stay under {} × first attempts + {}; over it the walk advances without retrying  [{}]",
        b.ratio,
        b.min_per_second,
        b.ratio,
        10.0 * b.min_per_second,
        mark(b == RetryBudgetPolicy::default())
    );
    let timeout = cfg.server.request_timeout.as_millis();
    if cfg.server.caller_deadline {
        // `x-sidetrack-timeout-ms` is a caller override too: it needs both switches.
        let headers = if cfg.server.caller_overrides {
            "x-sidetrack-timeout-ms / x-stainless-timeout"
        } else {
            "x-stainless-timeout"
        };
        let _ = writeln!(
            out,
            "  deadline: min(server.requestTimeoutMilliseconds {timeout}, the caller's {headers})  [server.callerDeadline: true]"
        );
    } else {
        let _ = writeln!(
            out,
            "  deadline: server.requestTimeoutMilliseconds {timeout}; the caller's deadline headers are ignored  [server.callerDeadline: false]"
        );
    }
    if cfg.server.caller_overrides {
        let _ = writeln!(
            out,
            "  callerOverrides: on — `x-sidetrack-fallback: off` (primary only, no retries) and `x-sidetrack-timeout-ms` are honoured  [server.callerOverrides: true]"
        );
    } else {
        let _ = writeln!(
            out,
            "  callerOverrides: off — `x-sidetrack-fallback` and `x-sidetrack-timeout-ms` are ignored  [server.callerOverrides: false]"
        );
    }
}

fn breaker(b: &BreakerPolicy) -> String {
    let mark = |name: &str| {
        if b.overridden.contains(&name) {
            ""
        } else {
            "*"
        }
    };
    let mut s = format!(
        "consecutiveFailures {}{}, openMilliseconds {}{}, backoffMultiplier {}{}, maxOpenMilliseconds {}{}, halfOpenProbes {}{}, honorRetryAfter {}{}",
        b.settings.consecutive_failures,
        mark("consecutiveFailures"),
        b.settings.open.as_millis(),
        mark("openMilliseconds"),
        b.settings.backoff_multiplier,
        mark("backoffMultiplier"),
        b.settings.max_open.as_millis(),
        mark("maxOpenMilliseconds"),
        b.settings.half_open_probes,
        mark("halfOpenProbes"),
        b.settings.honor_retry_after,
        mark("honorRetryAfter"),
    );
    if let Some(h) = b.settings.health_threshold {
        let _ = write!(s, ", healthThreshold {h}");
    }
    if let Some(c) = &b.unhealthy_condition {
        let _ = write!(s, ", unhealthyCondition `{c}`");
    }
    s.push_str("  (* = default)");
    s
}

#[cfg(test)]
mod tests {
    use super::explain;

    const CONFIG: &str = r#"
auth:
  keys:
    - { principal: team-a, key: key-a }
    - { principal: team-b, key: key-b, models: ["gpt-*"] }
targets:
  - { name: oa, provider: openai, baseUrl: "http://127.0.0.1:9/v1", models: ["gpt-4o*"] }
  - { name: other, provider: openai, baseUrl: "http://127.0.0.1:9/v1", models: ["other-*"] }
rules:
  - name: a-only
    priority: 1
    matchModels: ["gpt-4o"]
    matchPrincipals: ["team-a"]
    routeToTarget:
      staticRoute: { target: other, model: not-listed }
"#;

    fn config(extra: &str) -> sidetrack_config::Config {
        sidetrack_config::load_str(&format!("{extra}{CONFIG}"), "t.yaml")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_cache_mode_of_the_route_is_shown() {
        let cfg = config("");
        let a = explain(&cfg, "gpt-4o", "team-a", "openai-chat");
        assert!(
            a.contains("cache: off — nothing is stored or served  [default]"),
            "{a}"
        );
        let cfg = config("cache:\n  mode: lastResort\n");
        let a = explain(&cfg, "gpt-4o", "team-a", "openai-chat");
        assert!(
            a.contains("cache: lastResort — answers are stored; one is served only when the walk ends without success; scope per principal, ttl 86400000 ms  [cache.mode]"),
            "{a}"
        );
        let cfg = config(
            "cache:\n  mode: always\n  semantic:\n    embeddings: { target: oa, model: emb }\n",
        );
        let a = explain(&cfg, "gpt-4o", "team-a", "openai-chat");
        assert!(
            a.contains(
                "ttl 86400000 ms; semantic: cosine ≥ 0.95 via oa/emb within 300 ms  [cache.mode]"
            ),
            "{a}"
        );
    }

    #[test]
    fn a_principal_outside_a_rule_is_explained_as_default_routing() {
        let cfg = config("");
        let a = explain(&cfg, "gpt-4o", "team-a", "openai-chat");
        assert!(a.contains("route: RULE `a-only`"), "{a}");
        assert!(a.contains("sent anyway"), "{a}");
        let b = explain(&cfg, "gpt-4o", "team-b", "openai-chat");
        assert!(b.contains("route: DEFAULT"), "{b}");
        assert!(b.contains("destination oa/gpt-4o"), "{b}");
        assert!(b.contains("access: allowed"), "{b}");
    }

    #[test]
    fn access_is_checked_by_a_pins_model_part_and_pins_can_be_off() {
        let cfg = config("");
        let ok = explain(&cfg, "oa/gpt-4o-mini", "team-b", "openai-chat");
        assert!(ok.contains("route: PINNED"), "{ok}");
        assert!(
            ok.contains("`gpt-4o-mini` (the model part of the pin) matches"),
            "{ok}"
        );
        let denied = explain(&cfg, "other/claude-x", "team-b", "openai-chat");
        assert!(denied.contains("access: DENIED"), "{denied}");
        let off = config("server: { allowPinning: false }\n");
        let text = explain(&off, "oa/gpt-4o-mini", "team-a", "openai-chat");
        assert!(text.contains("pinning: off"), "{text}");
        assert!(!text.contains("route: PINNED"), "{text}");
        assert!(text.contains("route: UNROUTABLE"), "{text}");
    }

    /// The request-level rules follow every routed answer (pin, rule, default), with their
    /// defaults marked; with `server.callerDeadline: false` the caller's headers are not used.
    #[test]
    fn request_rules_follow_every_route_kind() {
        let cfg = config(
            "server: { callerDeadline: false }\ndefaults: { retryBudget: { minPerSecond: 1 } }\n",
        );
        for (model, principal) in [
            ("oa/gpt-4o", "team-a"),
            ("gpt-4o", "team-a"),
            ("gpt-4o", "team-b"),
        ] {
            let text = explain(&cfg, model, principal, "openai-chat");
            assert!(
                text.contains(
                    "  maxAttempts: 8 (every attempt of the request: hops, retries and hedges; \
                     then the last response is returned)  [default]\n"
                ),
                "{text}"
            );
            assert!(
                text.contains(
                    "  retryBudget: ratio 0.2, minPerSecond 1 — per destination, retries in the \
                     last 10 s stay under 0.2 × first attempts + 10; over it the walk advances \
                     without retrying  [written]\n"
                ),
                "{text}"
            );
            assert!(
                text.contains(
                    "  deadline: server.requestTimeoutMilliseconds 900000; the caller's deadline \
                     headers are ignored  [server.callerDeadline: false]\n"
                ),
                "{text}"
            );
            assert!(
                text.contains("  callerOverrides: on — `x-sidetrack-fallback: off` (primary only, no retries) and `x-sidetrack-timeout-ms` are honoured  [server.callerOverrides: true]\n"),
                "{text}"
            );
            assert!(
                text.contains(
                    "        retry: none (attempts 0: this hop is tried once)  [default]\n"
                ),
                "{text}"
            );
            assert!(text.contains("        hedge: none  [default]\n"), "{text}");
        }
        let unroutable = explain(&cfg, "nothing-serves-this", "team-a", "openai-chat");
        assert!(!unroutable.contains("request rules:"), "{unroutable}");
    }

    /// Every hop's retry controller keys (SPEC §11) and the request-level rules, as written or
    /// defaulted, for a static chain: the whole text, so any change in it shows here.
    #[test]
    fn hops_show_their_retry_timeouts_and_hedge_and_the_request_rules() {
        let cfg = sidetrack_config::load_str(
            r#"
server: { requestTimeoutMilliseconds: 60000, callerOverrides: false }
defaults: { maxAttempts: 4 }
targets:
  - { name: oa, provider: openai, baseUrl: "http://127.0.0.1:9/v1" }
  - { name: cl, provider: anthropic, baseUrl: "http://127.0.0.1:9" }
rules:
  - name: chat
    priority: 1
    matchModels: ["gpt-x"]
    routeToTarget:
      staticRoute: { target: oa }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"], errors: [CONTEXT_LENGTH_EXCEEDED, FIRST_TOKEN_TIMEOUT] }
        firstTokenTimeoutMilliseconds: 8000
        streamIdleTimeoutMilliseconds: 30000
        retry: { attempts: 2, maxBackoffMilliseconds: 1000, on: { statusCodes: ["503"], errors: [OVERLOADED] } }
        hedge: { afterMilliseconds: 1500 }
        targetFallback:
          - target: cl
            model: claude-x
            retry: { attempts: 1 }
            hedge: { afterMilliseconds: 900 }
"#,
            "t.yaml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let text = explain(&cfg, "gpt-x", "anonymous", "openai-chat");
        assert_eq!(text, EXPECTED, "{text}");
    }

    const EXPECTED: &str = r#"request: model `gpt-x`, principal `anonymous`, dialect openai-chat
route: RULE `chat` (priority 1, rules[0])
  fallback.circuitBreaker.mode: ENABLED (open destinations are skipped unless last)
  hop 0 (primary):
      destination oa/gpt-x (provider openai, http://127.0.0.1:9/v1)
        triggerOn: statusCodes [429, 5XX], errors [FIRST_TOKEN_TIMEOUT, CONTEXT_LENGTH_EXCEEDED]  [written (replaces the default)]
        firstByteTimeoutMilliseconds: none  [default]
        firstTokenTimeoutMilliseconds: 8000 (streamed requests: send → first content event)  [written]
        streamIdleTimeoutMilliseconds: 30000 (longest silence between upstream events)  [written]
        retry: attempts 2, backoffMilliseconds 100, maxBackoffMilliseconds 1000 (full jitter; an upstream Retry-After up to the max is honoured), on statusCodes [503], errors [OVERLOADED] (retry.on)  [written]
        hedge: after 1500 ms without a commit the next hop starts too; the first to commit wins  [written]
        connectTimeoutMilliseconds: 5000  [default]
        circuitBreaker: consecutiveFailures 5*, openMilliseconds 30000*, backoffMultiplier 2*, maxOpenMilliseconds 300000*, halfOpenProbes 3*, honorRetryAfter true*  (* = default)
  hop 1 (fallback 1):
      destination cl/claude-x (provider anthropic, http://127.0.0.1:9)
        triggerOn: statusCodes [5XX], errors [CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT]  [default — this hop has no triggerOn; nothing is inherited from earlier hops]
        firstByteTimeoutMilliseconds: none  [default; nothing is inherited from earlier hops]
        firstTokenTimeoutMilliseconds: none  [default; nothing is inherited from earlier hops]
        streamIdleTimeoutMilliseconds: none  [default; nothing is inherited from earlier hops]
        retry: attempts 1, backoffMilliseconds 100, maxBackoffMilliseconds 2000 (full jitter; an upstream Retry-After up to the max is honoured), on the hop's triggers (statusCodes [5XX], errors [CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT])  [written]
        hedge: after 900 ms — but this is the last hop: nothing to hedge to, never fires  [written]
        connectTimeoutMilliseconds: 5000  [default]
        circuitBreaker: consecutiveFailures 5*, openMilliseconds 30000*, backoffMultiplier 2*, maxOpenMilliseconds 300000*, halfOpenProbes 3*, honorRetryAfter true*  (* = default)
request rules:
  maxAttempts: 4 (every attempt of the request: hops, retries and hedges; then the last response is returned)  [written]
  retryBudget: ratio 0.2, minPerSecond 5 — per destination, retries in the last 10 s stay under 0.2 × first attempts + 50; over it the walk advances without retrying  [default]
  deadline: min(server.requestTimeoutMilliseconds 60000, the caller's x-stainless-timeout)  [server.callerDeadline: true]
  callerOverrides: off — `x-sidetrack-fallback` and `x-sidetrack-timeout-ms` are ignored  [server.callerOverrides: false]
cache: off — nothing is stored or served  [default]
"#;
}
