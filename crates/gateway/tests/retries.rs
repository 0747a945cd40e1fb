//! Issue 16 / SPEC §11 and §6.5: the retry controller over real sockets and the real mock —
//! retries, group re-pick, the retry budget, the attempt cap, deadlines, error classes, hedging,
//! caller overrides and the caller retry hint. Each test asserts route order, per-model mock hits,
//! the final status and the routing log's reason and attempt fields.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{behaviours, start, status, Env};
use sidetrack_mock::{Behaviour, ErrorConfig, MockConfig};

const ONE_TARGET: &str = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
"#;

fn with_rules(rules: &str) -> String {
    format!("{ONE_TARGET}\nrules:\n{rules}")
}

fn fail_first(k: u64) -> Behaviour {
    Behaviour {
        fail_first: Some(k),
        ..Behaviour::default()
    }
}

fn slow(ms: u64) -> Behaviour {
    Behaviour {
        first_byte_delay_milliseconds: Some(ms),
        ..Behaviour::default()
    }
}

fn kinds(rec: &sidetrack_gateway::observe::RoutingRecord) -> Vec<&'static str> {
    rec.attempts.iter().map(|a| a.kind.as_str()).collect()
}

const SINGLE_RETRY: &str = r#"
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-flaky }
      fallback:
        retry: { attempts: 2, backoffMilliseconds: 10, maxBackoffMilliseconds: 50 }
"#;

#[tokio::test]
async fn a_transient_503_on_a_single_hop_route_is_retried_on_the_same_hop() {
    let env = start(
        &with_rules(SINGLE_RETRY),
        behaviours(&[("m-flaky", fail_first(1))]),
    )
    .await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-attempts"), Some("2"));
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(Env::route(&rec), ["up/m-flaky", "up/m-flaky"]);
    assert_eq!(kinds(&rec), ["FIRST", "RETRY"]);
    assert_eq!(rec.attempts[0].status, Some(503));
    assert_eq!(env.hits("m-flaky"), 2);
    assert_eq!(
        env.metric(r#"sidetrack_retries_total{target="up",model="m-flaky"}"#)
            .await,
        1.0
    );
    assert_eq!(
        env.metric(r#"sidetrack_upstream_responses_total{target="up",model="m-flaky",code="503"}"#)
            .await,
        1.0
    );
}

#[tokio::test]
async fn retries_stop_after_their_attempts_and_the_error_says_do_not_retry() {
    let env = start(
        &with_rules(SINGLE_RETRY),
        behaviours(&[("m-flaky", status(503))]),
    )
    .await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header("x-should-retry"),
        Some("false"),
        "the gateway retried: the SDK must not multiply that"
    );
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "chainExhausted");
    assert_eq!(kinds(&rec), ["FIRST", "RETRY", "RETRY"]);
    assert_eq!(
        rec.attempts[2].stopped_by.map(|s| s.as_str()),
        Some("attemptsUsed")
    );
    assert_eq!(env.hits("m-flaky"), 3);
}

#[tokio::test]
async fn an_upstream_retry_after_longer_than_max_backoff_is_not_waited_for() {
    // A 429 (not a breaker failure by default, so the breaker stays closed) with Retry-After 30.
    let flaky = Behaviour {
        status: Some(429),
        retry_after_seconds: Some(30),
        ..Behaviour::default()
    };
    let rules = SINGLE_RETRY.replace(
        "maxBackoffMilliseconds: 50 }",
        r#"maxBackoffMilliseconds: 50, on: { statusCodes: ["429", "5XX"] } }"#,
    );
    let env = start(&with_rules(&rules), behaviours(&[("m-flaky", flaky)])).await;
    let started = Instant::now();
    let r = env.chat("ask", false).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(r.status, 429);
    let rec = env.record(1).await;
    assert_eq!(kinds(&rec), ["FIRST"]);
    assert_eq!(
        rec.attempts[0].stopped_by.map(|s| s.as_str()),
        Some("retryAfterTooLong")
    );
    assert_eq!(env.hits("m-flaky"), 1);
}

const GROUP: &str = r#"
  - name: g
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      priorityGroups:
        - destinations: [ { target: up, model: m-bad }, { target: up, model: m-good } ]
        - destinations: [ { target: up, model: m-last } ]
"#;

/// Must-show 2: a two-member group with one member answering 503 — every request is served by
/// the group, never by the next group.
#[tokio::test]
async fn a_group_member_that_fails_is_never_the_only_one_tried() {
    let env = start(&with_rules(GROUP), behaviours(&[("m-bad", status(503))])).await;
    for _ in 0..100 {
        let r = env.chat("ask", false).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-good"));
        assert_eq!(r.header("x-sidetrack-fallback-hop"), Some("0"));
    }
    let recs = env.log.wait_for(100, Duration::from_secs(10)).await;
    assert_eq!(recs.len(), 100);
    assert!(recs.iter().all(|r| r.reason == "servedByPrimary"));
    assert_eq!(env.hits("m-good"), 100);
    assert_eq!(env.hits("m-last"), 0, "the next group is never needed");
    // Each request that picked m-bad first went on to m-good within the group.
    let repicked = recs.iter().filter(|r| r.attempts.len() == 2).count() as u64;
    assert_eq!(repicked, env.hits("m-bad"));
}

const STORM: &str = r#"
  - name: s
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-down }
      fallback:
        retry: { attempts: 3, backoffMilliseconds: 1, maxBackoffMilliseconds: 5 }
"#;

/// 50 concurrent callers, `EACH` requests each, all answered 503; returns the upstream attempts
/// per request.
async fn storm(env: Env) -> (std::sync::Arc<Env>, f64) {
    let env = std::sync::Arc::new(env);
    const CALLERS: usize = 50;
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                assert_eq!(env.chat("ask", false).await.status, 503);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let requests = (CALLERS * EACH) as f64;
    let attempts = env.hits("m-down") as f64;
    (env, attempts / requests)
}

const EACH: usize = 5;

/// Must-show 3: a destination failing 100% under 50 concurrent callers with `retry.attempts: 3`
/// and the default budget makes at most 1.3× as many upstream attempts as requests (not 4×).
#[tokio::test]
async fn a_retry_storm_is_held_by_the_budget_and_the_breaker() {
    let env = start(&with_rules(STORM), behaviours(&[("m-down", status(503))])).await;
    let (_, ratio) = storm(env).await;
    assert!(ratio <= 1.3, "{ratio} upstream attempts per request");
}

/// The budget alone (breaker off): retries stay under ratio × first attempts + 10 × floor.
#[tokio::test]
async fn with_the_breaker_off_the_retry_budget_alone_holds_the_storm() {
    let rules = STORM.replace(
        "        retry:",
        "        circuitBreaker: { mode: DISABLED }\n        retry:",
    );
    let yaml = format!(
        "{}\ndefaults:\n  retryBudget: {{ ratio: 0.1, minPerSecond: 1 }}\n",
        with_rules(&rules)
    );
    let env = start(&yaml, behaviours(&[("m-down", status(503))])).await;
    let (env, ratio) = storm(env).await;
    let requests = (50 * EACH) as f64;
    // 250 first attempts: at most 0.1 × 250 + 10 × 1 = 35 retries (a few in flight at once).
    assert!(ratio > 1.0, "retries were made: {ratio}");
    assert!(ratio * requests <= requests + 40.0, "{ratio}");
    let refused = env
        .metric(r#"sidetrack_retry_budget_exhausted_total{target="up",model="m-down"}"#)
        .await;
    assert!(refused > 0.0);
    let recs = env.log.wait_for(250, Duration::from_secs(10)).await;
    assert!(recs.iter().any(|r| r
        .attempts
        .iter()
        .any(|a| a.stopped_by.map(|s| s.as_str()) == Some("retryBudget"))));
}

const CHAIN3: &str = r#"
  - name: c
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-a }
      fallback:
        targetFallback:
          - { target: up, model: m-b }
          - { target: up, model: m-c }
"#;

#[tokio::test]
async fn max_attempts_ends_the_walk_with_the_last_response() {
    let env = common::start_tuned(
        &with_rules(CHAIN3),
        behaviours(&[("m-a", status(503)), ("m-b", status(502))]),
        sidetrack_gateway::Clock::real(),
        |cfg| cfg.defaults.max_attempts = 2,
    )
    .await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 502, "the last response");
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-a", "up/m-b"]);
    assert_eq!(
        rec.attempts[1].stopped_by.map(|s| s.as_str()),
        Some("maxAttempts")
    );
    assert_eq!(env.hits("m-c"), 0);
}

#[tokio::test]
async fn the_callers_deadline_ends_a_slow_walk_with_504_deadline_exceeded() {
    let env = start(&with_rules(CHAIN3), behaviours(&[("m-a", slow(3000))])).await;
    for header in [
        ("x-sidetrack-timeout-ms", "300"),
        ("x-stainless-timeout", "0.3"),
    ] {
        let started = Instant::now();
        let r = env
            .post(
                "/v1/chat/completions",
                serde_json::json!({"model": "ask", "messages": [{"role": "user", "content": "hi"}]}),
                &[header],
            )
            .await;
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{header:?}"
        );
        assert_eq!(r.status, 504, "{header:?}: {}", r.body);
        assert_eq!(r.json()["error"]["type"], "api_error");
        assert_eq!(r.header("x-should-retry"), Some("false"));
    }
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "deadlineExceeded");
    assert_eq!(rec.deadline_ms, 300);
    assert_eq!(
        env.hits("m-b"),
        0,
        "no fallback that cannot finish is started"
    );
    let rec2 = env.record(2).await;
    assert_eq!(rec2.deadline_ms, 300);
}

#[tokio::test]
async fn a_hop_slower_than_the_time_left_is_ineligible_deadline() {
    let env = start(
        &with_rules(CHAIN3),
        behaviours(&[("m-a", status(503)), ("m-b", slow(400))]),
    )
    .await;
    // Teach the gateway m-b's time to first byte (about 400 ms).
    for _ in 0..2 {
        let r = env.chat("m-b", false).await;
        assert_eq!(r.status, 200);
    }
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "ask", "messages": [{"role": "user", "content": "hi"}]}),
            &[("x-sidetrack-timeout-ms", "250")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-c"));
    let rec = env.record(3).await;
    assert_eq!(Env::route(&rec), ["up/m-a", "up/m-c"]);
    assert_eq!(rec.skipped.len(), 1);
    assert_eq!(rec.skipped[0].why.as_str(), "INELIGIBLE:deadline");
    assert_eq!(&*rec.skipped[0].model, "m-b");
    assert_eq!(env.hits("m-b"), 2, "only the warm-up requests");
}

fn context_error() -> Behaviour {
    Behaviour {
        status: Some(400),
        error: Some(ErrorConfig {
            error_type: Some("invalid_request_error".into()),
            code: Some("context_length_exceeded".into()),
            message: Some("This model's maximum context length is 8192 tokens.".into()),
            ..ErrorConfig::default()
        }),
        ..Behaviour::default()
    }
}

#[tokio::test]
async fn a_context_length_error_falls_back_but_another_400_does_not() {
    let rules = r#"
  - name: ctx
    priority: 10
    matchModels: ["ask-*"]
    routeToTarget:
      staticRoute: { target: up, model: m-small }
      fallback:
        triggerOn: { errors: [CONTEXT_LENGTH_EXCEEDED] }
        targetFallback:
          - { target: up, model: m-large }
"#;
    let env = start(
        &with_rules(rules),
        behaviours(&[("m-small", context_error())]),
    )
    .await;
    let r = env.chat("ask-long", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-large"));
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(
        rec.attempts[0].error_class.map(|c| c.as_str()),
        Some("CONTEXT_LENGTH_EXCEEDED")
    );
    // A plain 400 (no class) is not listed: it goes back to the caller.
    env.mock.set_behaviour("m-small", status(400));
    let r = env.chat("ask-long", false).await;
    assert_eq!(r.status, 400);
    let rec = env.record(2).await;
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.attempts[0].error_class, None);
    assert_eq!(env.hits("m-large"), 1);
}

const HEDGED: &str = r#"
  - name: h
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-slow }
      fallback:
        hedge: { afterMilliseconds: 300 }
        targetFallback:
          - { target: up, model: m-fast }
"#;

/// Must-show 4: primary answering after 2 s, hedge after 300 ms → p50 under 400 ms over 20
/// requests; the losing connection is closed (the mock sees it go) and no late answer reaches
/// anyone.
#[tokio::test]
async fn a_hedge_answers_fast_and_the_loser_is_cut_off() {
    let env = start(&with_rules(HEDGED), behaviours(&[("m-slow", slow(2000))])).await;
    let mut took = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let r = env.chat("ask", false).await;
        took.push(started.elapsed());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-fast"));
        assert_eq!(r.header("x-sidetrack-hedged"), Some("true"));
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            "hello from m-fast"
        );
    }
    took.sort();
    assert!(took[10] < Duration::from_millis(400), "p50 {:?}", took[10]);
    let recs = env.log.wait_for(20, Duration::from_secs(10)).await;
    for rec in &recs {
        assert_eq!(rec.reason, "servedViaFallbackHop:1");
        assert_eq!(
            kinds(rec),
            ["HEDGE", "FIRST"],
            "the hedge won; the first was cut off"
        );
        let lost = rec.attempts.iter().find(|a| &*a.model == "m-slow").unwrap();
        assert_eq!(lost.outcome, "CANCELLED");
        assert_eq!(lost.detail.as_deref(), Some("hedgeLost"));
    }
    // Every losing request was dropped by the gateway before its answer (the mock counts it).
    let deadline = Instant::now() + Duration::from_secs(5);
    while env.mock.cancelled("m-slow") < 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(env.mock.cancelled("m-slow"), 20);
    assert_eq!(env.hits("m-fast"), 20);
    assert_eq!(
        env.metric(r#"sidetrack_hedges_total{target="up",model="m-fast",result="won"}"#)
            .await,
        20.0
    );
    // No breaker failure for the loser.
    assert_eq!(env.breaker("up", "m-slow").await, "CLOSED");
}

#[tokio::test]
async fn a_primary_that_answers_before_the_hedge_is_not_hedged() {
    let env = start(&with_rules(HEDGED), MockConfig::default()).await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-hedged"), None);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow"]);
    assert_eq!(env.hits("m-fast"), 0);
}

#[tokio::test]
async fn fallback_off_from_the_caller_tries_the_primary_only() {
    let env = start(&with_rules(CHAIN3), behaviours(&[("m-a", status(503))])).await;
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "ask", "messages": [{"role": "user", "content": "hi"}]}),
            &[("x-sidetrack-fallback", "off")],
        )
        .await;
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header("x-should-retry"),
        None,
        "one hop, one attempt: the upstream's answer as it is"
    );
    assert_eq!((env.hits("m-a"), env.hits("m-b")), (1, 0));
}

#[tokio::test]
async fn an_exhausted_chain_with_open_breakers_says_when_to_come_back() {
    let rules = r#"
  - name: o
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-a }
"#;
    let env = start(&with_rules(rules), behaviours(&[("m-a", status(503))])).await;
    // Open the breaker (default: 5 consecutive failures).
    for _ in 0..5 {
        env.chat("ask", false).await;
    }
    assert_eq!(env.breaker("up", "m-a").await, "OPEN");
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-should-retry"), Some("false"));
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&secs), "Retry-After {secs}");
    let ms: u64 = r.header("retry-after-ms").unwrap().parse().unwrap();
    assert!(ms <= secs * 1000 && ms > (secs - 1) * 1000);
}

/// Must-show 5: once the primary's breaker is open, the OpenAI and Anthropic SDKs at their default
/// `max_retries` make exactly one request per call, and the error tells them when to come back.
#[tokio::test]
async fn sdks_make_one_request_per_call_once_the_breaker_is_open() {
    let rules = r#"
  - name: o
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-a }
"#;
    let env = start(&with_rules(rules), behaviours(&[("m-a", status(503))])).await;
    for _ in 0..5 {
        env.chat("ask", false).await;
    }
    assert_eq!(env.breaker("up", "m-a").await, "OPEN");
    let base = env.gw.base_url();
    let mut records = 5;
    for sdk in ["openai", "anthropic"] {
        let hits = env.hits("m-a");
        let out = common::run_sdk("retry_hint.py", &[sdk, &base, "ask", "3"]).await;
        let calls = out.as_array().unwrap();
        assert_eq!(calls.len(), 3);
        for call in calls {
            assert_eq!(call["status"], 503, "{sdk}: {call}");
            assert_eq!(call["should_retry"], "false", "{sdk}: {call}");
            let secs: u64 = call["retry_after"].as_str().unwrap().parse().unwrap();
            assert!((1..=30).contains(&secs), "{sdk}: {call}");
            assert!(call["retry_after_ms"].as_str().is_some(), "{sdk}: {call}");
        }
        records += 3;
        let recs = env.log.wait_for(records, Duration::from_secs(10)).await;
        assert_eq!(recs.len(), records, "{sdk}: one request per call");
        assert_eq!(
            env.hits("m-a") - hits,
            3,
            "{sdk}: one upstream attempt per call"
        );
    }
}
