//! SPEC §14 "Names and labels", "Bodies" and "Request ids": what a caller can make the gateway
//! keep is bounded, a body means one thing, and a request id tells nothing.
//!
//! Regressions: a 20 MB model name became a destination and a metric label (+185 MB RSS, an
//! 839 MB `/metrics`); 5,000 names of 1 KB made `/metrics` 228 MB; a body with two `"model"` keys
//! was routed by one and forwarded with both; request ids were a per-process prefix and a counter.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use common::{behaviours, start, status, Env, Reply};
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use sidetrack_mock::MockConfig;

const ANY: &str = r#"
targets:
  - { name: t, provider: openai, baseUrl: "${MOCK}/v1", models: ["declared-m", "*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: k, models: ["us.*"] }
"#;

/// POSTs `body` as it is (duplicate keys survive), as JSON.
async fn post_raw(env: &Env, path: &str, body: impl Into<Bytes>) -> Reply {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("{}{path}", env.gw.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(body.into()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A 400 invalid-request answer in the dialect of `path`.
fn assert_invalid_request(path: &str, r: &Reply) {
    assert_eq!(r.status, 400, "{path}: {}", r.body);
    let v = r.json();
    if path.starts_with("/model/") {
        assert_eq!(
            r.header("x-amzn-errortype"),
            Some("ValidationException"),
            "{path}"
        );
        assert!(v["message"].is_string(), "{path}: {}", r.body);
    } else if path == "/v1/messages" {
        assert_eq!(v["type"], "error", "{path}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{path}");
    } else {
        assert_eq!(v["error"]["type"], "invalid_request_error", "{path}");
    }
}

/// `/metrics` as `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The destinations `GET /admin/destinations` lists, as `target/model`.
async fn table(env: &Env) -> BTreeSet<String> {
    let (status, body) = env.admin_get("/admin/destinations").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}/{}",
                d["target"].as_str().unwrap(),
                d["model"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_model_name_over_256_bytes_is_400_in_the_callers_dialect() {
    let env = start(ANY, MockConfig::default()).await;
    let long = "m".repeat(300);
    let bedrock_long = format!("us.{}", "m".repeat(297));
    let chat = |model: &str| {
        serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
            .to_string()
    };
    let cases: Vec<(String, String)> = vec![
        ("/v1/chat/completions".into(), chat(&long)),
        (
            "/v1/responses".into(),
            serde_json::json!({"model": long, "input": "hi"}).to_string(),
        ),
        (
            "/v1/messages".into(),
            serde_json::json!({"model": long, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        ),
        (
            format!("/model/{bedrock_long}/converse"),
            r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#.into(),
        ),
        (
            format!("/model/{bedrock_long}/invoke"),
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#.into(),
        ),
        // A megabyte of name is refused the same way, without being decoded or kept.
        ("/v1/chat/completions".into(), chat(&"x".repeat(1 << 20))),
    ];
    for (path, body) in &cases {
        let r = post_raw(&env, path, body.clone()).await;
        assert_invalid_request(path, &r);
        if !path.starts_with("/model/") {
            let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(message.contains("256 bytes"), "{message}");
        }
    }
    let recs = env.log.wait_for(cases.len(), Duration::from_secs(5)).await;
    assert_eq!(recs.len(), cases.len());
    for rec in &recs {
        assert_eq!(rec.reason, "gatewayRejected:modelNameTooLong");
        assert_eq!(rec.outcome, "REJECTED");
        assert_eq!(rec.requested_model, None, "a refused name is not logged");
    }
    assert_eq!(env.mock.total_hits(), 0);
    assert!(
        table(&env).await.iter().all(|d| d.len() < 300),
        "no destination was made for a refused name"
    );
    // 256 bytes is still a model name.
    let at = "m".repeat(256);
    let r = post_raw(&env, "/v1/chat/completions", chat(&at)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(env.hits(&at), 1);
    let at = format!("us.{}", "m".repeat(253));
    let r = post_raw(
        &env,
        &format!("/model/{at}/converse"),
        r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_body_that_repeats_a_top_level_key_is_400_in_every_dialect() {
    let env = start(ANY, MockConfig::default()).await;
    let msg = r#"[{"role":"user","content":"hi"}]"#;
    let converse_msg = r#"[{"role":"user","content":[{"text":"hi"}]}]"#;
    let cases: Vec<(&str, String)> = vec![
        // Routed by one `model`, forwarded with both, before.
        (
            "/v1/chat/completions",
            format!(r#"{{"model":"m-a","messages":{msg},"model":"m-b"}}"#),
        ),
        (
            "/v1/chat/completions",
            format!(r#"{{"model":"m-a","messages":{msg},"messages":[]}}"#),
        ),
        // Spelled differently, the same key once decoded.
        (
            "/v1/chat/completions",
            format!(r#"{{"model":"m-a","messages":{msg},"mod\u0065l":"m-b"}}"#),
        ),
        (
            "/v1/responses",
            r#"{"model":"m-a","input":"hi","input":"bye"}"#.into(),
        ),
        (
            "/v1/messages",
            format!(r#"{{"model":"m-a","max_tokens":8,"messages":{msg},"messages":{msg}}}"#),
        ),
        (
            "/model/us.m-a/converse",
            format!(r#"{{"messages":{converse_msg},"messages":{converse_msg}}}"#),
        ),
        (
            "/model/us.m-a/invoke",
            format!(
                r#"{{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"max_tokens":9,"messages":{msg}}}"#
            ),
        ),
    ];
    for (path, body) in &cases {
        let r = post_raw(&env, path, body.clone()).await;
        assert_invalid_request(path, &r);
        if !path.starts_with("/model/") {
            let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
            assert!(message.contains("repeats the top-level key"), "{message}");
        }
    }
    let recs = env.log.wait_for(cases.len(), Duration::from_secs(5)).await;
    assert_eq!(recs.len(), cases.len());
    assert!(
        recs.iter()
            .all(|r| r.reason == "gatewayRejected:duplicateKey"),
        "{:?}",
        recs.iter().map(|r| &r.reason).collect::<Vec<_>>()
    );
    assert_eq!(env.mock.total_hits(), 0, "nothing ambiguous went upstream");
    // The same key inside a nested object is not a top-level repeat.
    let r = post_raw(
        &env,
        "/v1/chat/completions",
        format!(r#"{{"model":"m-a","messages":{msg},"metadata":{{"k":"1","k":"2"}}}}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn request_ids_are_uuid_v7_distinct_and_the_same_in_header_and_log() {
    let env = start(ANY, MockConfig::default()).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = env.chat(&format!("m-{i}"), false).await;
        assert_eq!(r.status, 200);
        ids.push(r.header("x-sidetrack-request-id").unwrap().to_owned());
    }
    let recs = env.log.wait_for(20, Duration::from_secs(5)).await;
    let mut last_ms = 0;
    for (id, rec) in ids.iter().zip(&recs) {
        assert_eq!(rec.request_id.as_str(), id);
        assert_eq!(id.len(), 32, "{id}");
        let u = uuid::Uuid::parse_str(id).unwrap();
        assert_eq!(u.get_version_num(), 7, "{id}");
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{id}");
        let ms = u64::from_str_radix(&id[..12], 16).unwrap();
        assert!(ms >= last_ms, "ids are time-ordered: {ids:?}");
        last_ms = ms;
    }
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len());
    // No shared prefix beyond the timestamp, no counter: the random tails differ widely.
    let tail = |id: &str| u64::from_str_radix(&id[16..], 16).unwrap();
    for w in ids.windows(2) {
        assert_ne!(tail(&w[1]).wrapping_sub(tail(&w[0])), 1, "{w:?}");
    }
}

#[tokio::test]
async fn two_thousand_glob_matched_names_leave_metrics_and_the_health_table_bounded() {
    let env = start(ANY, MockConfig::default()).await;
    let r = env.chat("declared-m", false).await;
    assert_eq!(r.status, 200);
    let n = 2000;
    let statuses: Vec<u16> = futures_util::stream::iter(0..n)
        .map(|i| {
            let env = &env;
            async move { env.chat(&format!("m{i:04}"), false).await.status }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(statuses.iter().all(|s| *s == 200));
    assert_eq!(
        env.log.wait_for(n + 1, Duration::from_secs(30)).await.len(),
        n + 1
    );

    let (_, text) = env.admin_get("/metrics").await;
    assert!(
        text.len() < 5 * 1024 * 1024,
        "/metrics is {} bytes",
        text.len()
    );
    let m = samples(&text);
    let attempts: BTreeMap<&str, f64> = m
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("sidetrack_attempts_total{target=\"t\",model=\"")?;
            Some((rest.split('"').next()?, *v))
        })
        .collect();
    // declared-m, 1000 names with their own label, everything later under `_other`.
    assert_eq!(
        attempts.len(),
        1 + 1000 + 1,
        "model labels on attempts_total"
    );
    assert_eq!(attempts.get("declared-m"), Some(&1.0));
    assert_eq!(attempts.get("_other"), Some(&1000.0));
    assert_eq!(attempts.values().sum::<f64>(), (n + 1) as f64);
    for series in [
        "sidetrack_attempt_duration_seconds_count",
        "sidetrack_time_to_first_byte_seconds_count",
        "sidetrack_breaker_state",
    ] {
        let labels = m
            .keys()
            .filter(|k| k.starts_with(&format!("{series}{{target=\"t\"")))
            .count();
        assert!(labels <= 1002, "{series}: {labels} series");
    }
    let tokens = m
        .keys()
        .filter(|k| k.starts_with("sidetrack_tokens_total{target=\"t\""))
        .count();
    assert!(tokens <= 2 * 1002, "tokens_total: {tokens} series");

    let dests = table(&env).await;
    let dynamic = dests.iter().filter(|d| d.starts_with("t/m")).count();
    assert_eq!(dynamic, 1000, "undeclared destinations kept");
    assert!(
        dests.contains("t/declared-m"),
        "declared ones are never evicted"
    );
    assert!(
        dests.contains(&format!("t/m{:04}", n - 1)),
        "the newest is kept"
    );
}

/// A target whose first counted failure opens its breaker; `bad` answers 503.
fn small(max: usize) -> String {
    format!(
        r#"
server: {{ maxDynamicDestinations: {max} }}
targets:
  - {{ name: t, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["declared-m", "*"], circuitBreaker: {{ consecutiveFailures: 1 }} }}
"#
    )
}

#[tokio::test]
async fn past_the_bound_the_least_recently_used_idle_destination_makes_room() {
    let env = start(&small(3), behaviours(&[("bad", status(503))])).await;
    assert_eq!(env.chat("bad", false).await.status, 503); // its breaker is now open
    for model in ["d1", "d2", "d1", "declared-m", "d3"] {
        assert_eq!(env.chat(model, false).await.status, 200, "{model}");
    }
    // Full at bad, d1, d2: d3 evicted d2 (d1 was used after it; bad's breaker is open).
    let t = table(&env).await;
    let want: BTreeSet<String> = ["t/bad", "t/d1", "t/d3", "t/declared-m"]
        .map(String::from)
        .into();
    assert_eq!(t, want);
    // d2 comes back when asked for, in place of the least recently used idle one (d1).
    assert_eq!(env.chat("d2", false).await.status, 200);
    let want: BTreeSet<String> = ["t/bad", "t/d2", "t/d3", "t/declared-m"]
        .map(String::from)
        .into();
    assert_eq!(table(&env).await, want);

    // Labels: bad, d1 and d2 took the three; d3 is counted under `_other`, and d2 keeps its own
    // label although it was evicted and made again.
    let (_, text) = env.admin_get("/metrics").await;
    let m = samples(&text);
    let attempts = |model: &str, outcome: &str| {
        m.get(&format!(
            "sidetrack_attempts_total{{target=\"t\",model=\"{model}\",outcome=\"{outcome}\"}}"
        ))
        .copied()
        .unwrap_or(0.0)
    };
    assert_eq!(attempts("bad", "STATUS"), 1.0);
    assert_eq!(attempts("d1", "SUCCESS"), 2.0);
    assert_eq!(attempts("d2", "SUCCESS"), 2.0);
    assert_eq!(attempts("declared-m", "SUCCESS"), 1.0);
    assert_eq!(attempts("_other", "SUCCESS"), 1.0);
    assert_eq!(attempts("d3", "SUCCESS"), 0.0);
    assert!(
        !text.contains("sidetrack_breaker_state{target=\"t\",model=\"_other\"}"),
        "no single breaker state for many destinations"
    );
}

#[tokio::test]
async fn when_nothing_is_idle_a_new_destination_is_served_but_not_kept() {
    let env = start(&small(1), behaviours(&[("bad", status(503))])).await;
    assert_eq!(env.chat("bad", false).await.status, 503); // open: not idle
    for _ in 0..2 {
        let r = env.chat("d1", false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-sidetrack-served-by"), Some("t/d1"));
    }
    let want: BTreeSet<String> = ["t/bad", "t/declared-m"].map(String::from).into();
    assert_eq!(table(&env).await, want);
    let rec = env.record(3).await;
    assert_eq!(Env::route(&rec), ["t/d1"], "the log names the real model");
    let (_, text) = env.admin_get("/metrics").await;
    let m = samples(&text);
    assert_eq!(
        m.get(r#"sidetrack_attempts_total{target="t",model="_other",outcome="SUCCESS"}"#),
        Some(&2.0)
    );
}

/// Odd model names — quotes, backslashes, braces, `#`, non-ASCII — are served and leave
/// `/metrics` in the exposition format (every label value escaped, one sample a line) and the
/// routing log one JSON object a line; names with control characters are refused (a carriage
/// return passed unescaped into a label value and split the line for line readers).
#[tokio::test]
async fn odd_model_names_keep_metrics_and_the_routing_log_well_formed() {
    let env = start(ANY, MockConfig::default()).await;
    for name in ["new\nline", "tab\tand\rcr", "nul\u{0}byte"] {
        let body =
            serde_json::json!({"model": name, "messages": [{"role": "user", "content": "hi"}]});
        let r = env.post("/v1/chat/completions", body, &[]).await;
        assert_invalid_request("/v1/chat/completions", &r);
        assert!(r.body.contains("control characters"), "{}", r.body);
    }
    let r = post_raw(&env, "/model/a%0Db/converse", r#"{"messages":[]}"#).await;
    assert_invalid_request("/model/a%0Db/converse", &r);
    let names = [
        "a\"b",
        "back\\slash",
        "brace}{x=\"1\"}",
        "# HELP fake",
        "ünïcödé-模型",
        "with space and = sign",
    ];
    for name in names {
        let body =
            serde_json::json!({"model": name, "messages": [{"role": "user", "content": "hi"}]});
        let r = env.post("/v1/chat/completions", body, &[]).await;
        assert_eq!(r.status, 200, "{name:?}: {}", r.body);
    }
    let (status, text) = env.admin_get("/metrics").await;
    assert_eq!(status, 200);
    for line in text.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line.starts_with("# TYPE ") || line == "# EOF",
                "a comment line that is not the exposition's own: {line:?}"
            );
            continue;
        }
        // name{labels} value — the labels' quotes balance once escapes are taken out.
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line:?}");
        assert!(series.starts_with("sidetrack_"), "{line:?}");
        let unescaped = series.replace("\\\\", "").replace("\\\"", "");
        assert_eq!(unescaped.matches('"').count() % 2, 0, "{line:?}");
        assert!(!series.contains('\n') && !series.contains('\r'), "{line:?}");
    }
    // Each odd name is counted under its own (escaped) label.
    let attempts = samples(&text)
        .into_iter()
        .filter(|(k, _)| k.starts_with("sidetrack_attempts_total{") && k.contains("a\\\"b"))
        .count();
    assert_eq!(attempts, 1, "{text}");
    let recs = env
        .log
        .wait_for(4 + names.len(), Duration::from_secs(10))
        .await;
    let got: Vec<&str> = recs[4..]
        .iter()
        .filter_map(|r| r.requested_model.as_deref())
        .collect();
    assert_eq!(got, names);
    for rec in &recs {
        let line = serde_json::to_string(rec).unwrap();
        assert!(!line.contains('\n'), "one line per record");
    }
}
