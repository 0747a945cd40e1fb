//! `sidetrack explain`: the route a request would take, with every hop's *effective* triggers and
//! timeouts, which of them are defaults, and the breaker policy of each destination.

use std::fmt::Write;

use sidetrack_config::{BreakerMode, BreakerPolicy, Config, HopPolicy, Route, StaticRoute, Target};

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
                write_hop(&mut out, 0, d.target, &d.model, &hop.policy, false);
            }
        }
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
        return out;
    }
    match routing::default_route(cfg, model, &Picker::default()) {
        Some(_) => {
            let _ = writeln!(
                out,
                "route: DEFAULT (no rule matched; targets whose `models` match, exact beats glob, round-robin among equals)"
            );
            for (_, t) in routing::default_candidates(cfg, model) {
                write_hop(&mut out, 0, t, model, routing::default_policy(), false);
            }
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
            for hop in routing::group_hops(cfg, groups, model) {
                let (i, n) = (hop.index, hop.destinations.len());
                let _ = writeln!(out, "  hop {i} (priority group of {n}):");
                for d in &hop.destinations {
                    write_hop(out, i, d.target, &d.model, &hop.policy, true);
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
    for hop in routing::static_hops(cfg, s, model) {
        let i = hop.index;
        if i == 0 {
            let _ = writeln!(out, "{indent}  hop 0 (primary):");
        } else {
            let _ = writeln!(out, "{indent}  hop {i} (fallback {i}):");
        }
        for d in &hop.destinations {
            write_hop(out, i, d.target, &d.model, &hop.policy, true);
        }
    }
}

fn write_hop(out: &mut String, hop: usize, t: &Target, model: &str, p: &HopPolicy, in_rule: bool) {
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
}
