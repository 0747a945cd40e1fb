//! Issue 5 "must show" 6: `/metrics` agrees with the routing log over a scripted run with
//! fallbacks, a breaker opening and mid-stream errors.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::{behaviours, start, status};
use sidetrack_mock::Behaviour;

/// `name{labels}` → value, for every sample line of a Prometheus text exposition.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn get(m: &BTreeMap<String, f64>, series: &str) -> f64 {
    m.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_agree_with_the_routing_log() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: chain
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let cut = Behaviour {
        stream_chunks: Some(6),
        drop_after_chunks: Some(2),
        ..Behaviour::default()
    };
    let env = start(yaml, behaviours(&[("m-p", status(503)), ("m-cut", cut)])).await;
    // 7 fallbacks (the 5th failure opens the breaker; 6 and 7 skip the primary), 3 mid-stream
    // errors, 4 plain requests, one of them streamed.
    for _ in 0..7 {
        assert_eq!(env.chat("ask", false).await.status, 200);
    }
    for _ in 0..3 {
        env.chat("m-cut", true).await;
    }
    for i in 0..4 {
        env.chat("m-ok", i == 0).await;
    }
    let recs = env
        .log
        .wait_for(14, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(recs.len(), 14);
    let (_, text) = env.admin_get("/metrics").await;
    let m = samples(&text);

    // requests_total by reason.
    let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
    for r in &recs {
        *by_reason.entry(r.reason.to_string()).or_default() += 1.0;
    }
    for (reason, n) in &by_reason {
        let total: f64 = m
            .iter()
            .filter(|(k, _)| {
                k.starts_with("sidetrack_requests_total{")
                    && k.contains(&format!("reason=\"{reason}\""))
            })
            .map(|(_, v)| v)
            .sum();
        assert_eq!(total, *n, "requests_total for reason {reason}");
    }
    // attempts_total per destination and outcome.
    let mut attempts: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for a in recs.iter().flat_map(|r| &r.attempts) {
        *attempts
            .entry((
                a.target.to_string(),
                a.model.to_string(),
                a.outcome.label().to_owned(),
            ))
            .or_default() += 1.0;
    }
    for ((t, mo, o), n) in &attempts {
        let series =
            format!("sidetrack_attempts_total{{target=\"{t}\",model=\"{mo}\",outcome=\"{o}\"}}");
        assert_eq!(get(&m, &series), *n, "{series}");
    }
    // fallbacks_total, skips_total, mid_stream_errors_total, breaker transitions, tokens.
    let fallbacks = recs
        .iter()
        .filter(|r| r.fallback_hop.unwrap_or(0) > 0)
        .count() as f64;
    assert_eq!(fallbacks, 7.0);
    assert_eq!(
        get(&m, r#"sidetrack_fallbacks_total{rule="chain",hop="1"}"#),
        fallbacks
    );
    let skips = recs
        .iter()
        .flat_map(|r| &r.skipped)
        .filter(|s| s.why == "BREAKER_OPEN")
        .count() as f64;
    assert_eq!(skips, 2.0);
    assert_eq!(
        get(
            &m,
            r#"sidetrack_skips_total{target="up",model="m-p",why="BREAKER_OPEN"}"#
        ),
        skips
    );
    let mid = recs.iter().filter(|r| r.mid_stream_error).count() as f64;
    assert_eq!(mid, 3.0);
    assert_eq!(
        get(
            &m,
            r#"sidetrack_mid_stream_errors_total{target="up",model="m-cut"}"#
        ),
        mid
    );
    assert_eq!(
        get(
            &m,
            r#"sidetrack_breaker_transitions_total{target="up",model="m-p",to="OPEN"}"#
        ),
        1.0
    );
    assert_eq!(
        get(&m, r#"sidetrack_breaker_state{target="up",model="m-p"}"#),
        2.0
    );
    let mut tokens: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for r in &recs {
        if let (Some(u), Some(s)) = (&r.usage, &r.served_by) {
            let e = tokens
                .entry((s.target.to_string(), s.model.to_string()))
                .or_default();
            e.0 += u.input_tokens as f64;
            e.1 += u.output_tokens as f64;
        }
    }
    assert!(!tokens.is_empty(), "usage was recorded");
    for ((t, mo), (input, output)) in &tokens {
        let i =
            format!("sidetrack_tokens_total{{target=\"{t}\",model=\"{mo}\",direction=\"input\"}}");
        let o =
            format!("sidetrack_tokens_total{{target=\"{t}\",model=\"{mo}\",direction=\"output\"}}");
        assert_eq!((get(&m, &i), get(&m, &o)), (*input, *output), "{t}/{mo}");
    }
    assert_eq!(get(&m, "sidetrack_in_flight_requests"), 0.0);
    assert_eq!(get(&m, "sidetrack_request_duration_seconds_count"), 14.0);
}

#[tokio::test]
async fn past_the_destination_bound_metrics_still_add_up_to_the_routing_log() {
    let yaml = r#"
server: { maxDynamicDestinations: 4 }
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
"#;
    let cut = Behaviour {
        stream_chunks: Some(6),
        drop_after_chunks: Some(2),
        ..Behaviour::default()
    };
    let env = start(yaml, behaviours(&[("m-cut-9", cut)])).await;
    // 10 names, some twice; the last one fails mid-stream.
    let names: Vec<String> = (0..10).map(|i| format!("m-{i}")).collect();
    for name in names.iter().chain(&names[..3]) {
        assert_eq!(env.chat(name, false).await.status, 200);
    }
    env.chat("m-cut-9", true).await;
    let recs = env
        .log
        .wait_for(14, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(recs.len(), 14);
    let (_, text) = env.admin_get("/metrics").await;
    let m = samples(&text);

    // Per model label: the first 4 names have their own; the rest are `_other`.
    let mut by_label: BTreeMap<String, f64> = BTreeMap::new();
    for a in recs.iter().flat_map(|r| &r.attempts) {
        let own = ["m-0", "m-1", "m-2", "m-3"].contains(&&*a.model);
        let label = if own {
            a.model.to_string()
        } else {
            "_other".into()
        };
        *by_label.entry(label).or_default() += 1.0;
    }
    assert_eq!(by_label.len(), 5);
    for (label, n) in &by_label {
        let series = format!(
            "sidetrack_attempts_total{{target=\"up\",model=\"{label}\",outcome=\"SUCCESS\"}}"
        );
        assert_eq!(get(&m, &series), *n, "{series}");
        let count =
            format!("sidetrack_attempt_duration_seconds_count{{target=\"up\",model=\"{label}\"}}");
        assert_eq!(get(&m, &count), *n, "{count}");
    }
    assert_eq!(
        get(
            &m,
            r#"sidetrack_mid_stream_errors_total{target="up",model="_other"}"#
        ),
        1.0
    );
    let output: f64 = recs
        .iter()
        .filter_map(|r| r.usage.as_ref())
        .map(|u| u.output_tokens as f64)
        .sum();
    let counted: f64 = m
        .iter()
        .filter(|(k, _)| {
            k.starts_with("sidetrack_tokens_total{") && k.ends_with("direction=\"output\"}")
        })
        .map(|(_, v)| v)
        .sum();
    assert_eq!(counted, output, "tokens add up across labels");
    assert!(
        m.keys().all(|k| !k.contains("model=\"m-4\"")),
        "no series for a name past the bound"
    );
}
