//! The dashboard's JSON (issue 19): `GET /admin/routes`, `GET /admin/history` and
//! `GET /admin/decisions`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};
use sidetrack_config::{BreakerMode, Config, Route, StaticRoute};

use super::history::{Only, DECISIONS, SAMPLE_EVERY, SLOTS};
use crate::routing::{self, Hop};
use crate::server::Shared;

/// (target, model) → (breaker state, disabled), from one `Health::snapshot()`.
type States = HashMap<(String, String), (&'static str, bool)>;

/// Every rule as its chain: legs (one for static and priority-group routes, one per weighted
/// leg), each a list of hops, each hop its destinations with their live breaker state and the
/// hop's effective settings as `sidetrack explain` prints them.
pub async fn routes(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let states: States = shared
        .health
        .snapshot()
        .into_iter()
        .map(|s| ((s.target, s.model), (s.state.as_str(), s.disabled)))
        .collect();
    let rt = shared.runtime.load();
    let cfg = &rt.config;
    let rules: Vec<Value> = cfg
        .rules
        .iter()
        .map(|rule| {
            let (kind, legs) = match &rule.route {
                Route::Static(s) => ("static", vec![leg(cfg, &states, s, None)]),
                Route::PriorityGroups(groups) => {
                    let hops = routing::group_hops(cfg, groups, "*");
                    let n = hops.len();
                    let hops: Vec<Value> = hops
                        .iter()
                        .enumerate()
                        .map(|(k, h)| hop(&states, h, k + 1 == n, "group"))
                        .collect();
                    (
                        "priorityGroups",
                        vec![json!({"weight": null, "breakerMode": "ENABLED", "hops": hops})],
                    )
                }
                Route::Weighted(w) => (
                    "weighted",
                    w.legs
                        .iter()
                        .map(|l| leg(cfg, &states, &l.route, Some(l.weight)))
                        .collect(),
                ),
            };
            let values = |m: &Option<sidetrack_config::Matcher>| {
                m.as_ref().map(|m| m.values.clone()).unwrap_or_default()
            };
            json!({
                "name": rule.name,
                "priority": rule.priority,
                "index": rule.index,
                "matchModels": values(&rule.match_models),
                "matchPrincipals": values(&rule.match_principals),
                "kind": kind,
                "legs": legs,
            })
        })
        .collect();
    Json(json!({ "rules": rules }))
}

fn leg(cfg: &Config, states: &States, s: &StaticRoute, weight: Option<u32>) -> Value {
    let hops = routing::static_hops(cfg, s, "*");
    let n = hops.len();
    let hops: Vec<Value> = hops
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let kind = if h.index == 0 { "primary" } else { "fallback" };
            hop(states, h, k + 1 == n, kind)
        })
        .collect();
    let mode = match s.breaker_mode {
        BreakerMode::Enabled => "ENABLED",
        BreakerMode::Disabled => "DISABLED",
    };
    json!({"weight": weight, "breakerMode": mode, "hops": hops})
}

fn hop(states: &States, h: &Hop<'_>, last: bool, kind: &str) -> Value {
    let destinations: Vec<Value> = h
        .destinations
        .iter()
        .map(|d| {
            let mut settings = String::new();
            crate::explain::write_hop(
                &mut settings,
                h.index,
                last,
                d.target,
                &d.model,
                &h.policy,
                true,
            );
            let settings: Vec<&str> = settings.lines().map(str::trim).collect();
            let (state, disabled) = states
                .get(&(d.target.name.to_string(), d.model.to_string()))
                .copied()
                .unwrap_or(("UNKNOWN", false));
            json!({
                "target": d.target.name,
                "model": d.model,
                "state": state,
                "disabled": disabled,
                "settings": settings.join("\n"),
            })
        })
        .collect();
    json!({"index": h.index, "kind": kind, "destinations": destinations})
}

/// Per destination, its samples oldest first: `t` (ms since the epoch), requests, successes,
/// failures, `ttfbMs` (EWMA at the sample; null before any), `state` at the sample, `worst`
/// state seen in the slot, `disabled`.
pub async fn history(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let series: Vec<Value> = shared
        .dash
        .history
        .series()
        .into_iter()
        .map(|(target, model, samples)| {
            let samples: Vec<Value> = samples
                .iter()
                .map(|s| {
                    json!({
                        "t": s.at_ms,
                        "requests": s.requests,
                        "successes": s.successes,
                        "failures": s.failures,
                        "ttfbMs": (!s.ttfb_ms.is_nan()).then_some(s.ttfb_ms),
                        "state": s.state.as_str(),
                        "worst": s.worst.as_str(),
                        "disabled": s.disabled,
                    })
                })
                .collect();
            json!({"target": target, "model": model, "samples": samples})
        })
        .collect();
    Json(json!({
        "sampleEveryMs": SAMPLE_EVERY.as_millis() as u64,
        "slots": SLOTS,
        "destinations": series,
    }))
}

/// The newest routing records (at most [`DECISIONS`]), newest first; `only=fallbacks|errors`.
pub async fn decisions(
    State(shared): State<Arc<Shared>>,
    uri: http::Uri,
) -> Result<Json<Value>, (http::StatusCode, Json<Value>)> {
    let param = |name: &str| {
        uri.query()
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let bad = |msg: String| (http::StatusCode::BAD_REQUEST, Json(json!({ "error": msg })));
    let limit = match param("limit") {
        None => 50,
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| bad(format!("`limit={n}` is not a number")))?,
    }
    .min(DECISIONS);
    let only = match param("only") {
        None | Some("") | Some("all") => Only::All,
        Some("fallbacks") => Only::Fallbacks,
        Some("errors") => Only::Errors,
        Some(other) => {
            return Err(bad(format!(
                "unknown `only={other}` (all, fallbacks, errors)"
            )))
        }
    };
    let records = shared.dash.decisions.recent(limit, only);
    let records: Vec<Value> = records
        .iter()
        .filter_map(|r| serde_json::to_value(&**r).ok())
        .collect();
    Ok(Json(json!({ "capacity": DECISIONS, "records": records })))
}
