//! Issue 3 "must show": breakers per destination, the last-hop rule, DISABLED mode, shared state,
//! priority groups with P2C, weighted legs, and the admin switches. Breaker time runs on a manual
//! clock, so open windows are stepped through exactly while requests use real sockets.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{behaviours, start, start_with_clock, status, Env};
use sidetrack_gateway::Clock;
use sidetrack_mock::{Behaviour, MockConfig};

const CHAIN: &str = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
    circuitBreaker: { openMilliseconds: 1000, maxOpenMilliseconds: 3000 }
rules:
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback:
        TRIGGERS
        targetFallback:
          - { target: up, model: m-f }
"#;

fn chain(triggers: &str) -> String {
    CHAIN.replace("TRIGGERS", triggers)
}

async fn manual(yaml: &str, mock: MockConfig) -> Env {
    start_with_clock(yaml, mock, Clock::manual()).await
}

fn healthy_after(ms: u64) -> Behaviour {
    Behaviour {
        first_byte_delay_milliseconds: Some(ms),
        ..Behaviour::default()
    }
}

#[tokio::test]
async fn breaker_opens_skips_probes_one_at_a_time_closes_and_backs_off() {
    let env = manual(&chain(""), behaviours(&[("m-p", status(503))])).await;
    for _ in 0..5 {
        assert_eq!(env.chat("ask", false).await.status, 200);
    }
    assert_eq!((env.hits("m-p"), env.hits("m-f")), (5, 5));
    let d = env.destination("up", "m-p").await;
    assert_eq!(d["state"], "OPEN");
    assert_eq!(d["openRemainingMs"], 1000);
    assert!(d["lastTransition"]["reason"]
        .as_str()
        .unwrap()
        .contains("consecutiveFailures=5"));

    // Open: the primary gets zero traffic; the fallback serves in-request.
    for n in 6..=8 {
        assert_eq!(env.chat("ask", false).await.status, 200);
        let rec = env.record(n).await;
        assert_eq!(Env::route(&rec), ["up/m-f"]);
        assert_eq!(rec.skipped.len(), 1);
        assert_eq!(
            (&*rec.skipped[0].model, rec.skipped[0].why.as_str()),
            ("m-p", "BREAKER_OPEN")
        );
    }
    assert_eq!(env.hits("m-p"), 5, "zero hits while open");

    // Half-open after openMilliseconds: exactly one probe at a time.
    env.clock.advance(Duration::from_millis(1000));
    env.mock.set_behaviour("m-p", healthy_after(300));
    let probe = tokio::spawn({
        let base = env.gw.base_url();
        async move { post_chat(&base).await }
    });
    env.wait_hits("m-p", 6).await;
    let concurrent = env.chat("ask", false).await;
    assert_eq!(
        concurrent.header("x-sidetrack-served-by"),
        Some("up/m-f"),
        "probe slot taken: skipped"
    );
    assert_eq!(probe.await.unwrap(), "up/m-p");
    assert_eq!(env.hits("m-p"), 6);
    let recs = env.log.wait_for(10, Duration::from_secs(5)).await;
    assert!(recs
        .iter()
        .any(|r| r.attempts.first().is_some_and(|a| a.breaker == "HALF_OPEN")));
    assert_eq!(env.breaker("up", "m-p").await, "HALF_OPEN");

    // Two more probe successes (halfOpenProbes = 3) close it.
    env.mock.set_behaviour("m-p", Behaviour::default());
    for _ in 0..2 {
        assert_eq!(
            env.chat("ask", false).await.header("x-sidetrack-served-by"),
            Some("up/m-p")
        );
    }
    assert_eq!(env.breaker("up", "m-p").await, "CLOSED");

    // Open again; a failed probe re-opens for twice as long, then capped at maxOpenMilliseconds.
    env.mock.set_behaviour("m-p", status(503));
    for _ in 0..5 {
        env.chat("ask", false).await;
    }
    assert_eq!(env.destination("up", "m-p").await["openRemainingMs"], 1000);
    env.clock.advance(Duration::from_millis(1000));
    let hits = env.hits("m-p");
    env.chat("ask", false).await;
    assert_eq!(env.hits("m-p"), hits + 1, "one probe");
    let d = env.destination("up", "m-p").await;
    assert_eq!(
        (d["state"].as_str(), d["openRemainingMs"].as_u64()),
        (Some("OPEN"), Some(2000))
    );
    env.clock.advance(Duration::from_millis(1999));
    env.chat("ask", false).await;
    assert_eq!(env.hits("m-p"), hits + 1, "still open at 1999 ms");
    env.clock.advance(Duration::from_millis(1));
    env.chat("ask", false).await;
    assert_eq!(env.hits("m-p"), hits + 2);
    assert_eq!(
        env.destination("up", "m-p").await["openRemainingMs"],
        3000,
        "4000 capped at 3000"
    );
}

async fn post_chat(base: &str) -> String {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let body = serde_json::json!({"model": "ask", "messages": []}).to_string();
    let req = http::Request::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    resp.headers()["x-sidetrack-served-by"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn retry_after_on_a_triggered_429_opens_at_once_for_that_long() {
    let limited = Behaviour {
        status: Some(429),
        retry_after_seconds: Some(2),
        ..Behaviour::default()
    };
    let env = manual(
        &chain(r#"triggerOn: { statusCodes: ["429", "5XX"] }"#)
            .replace("maxOpenMilliseconds: 3000", "maxOpenMilliseconds: 60000"),
        behaviours(&[("m-p", limited)]),
    )
    .await;
    assert_eq!(env.chat("ask", false).await.status, 200);
    let d = env.destination("up", "m-p").await;
    assert_eq!(d["state"], "OPEN", "one 429 with Retry-After opens it");
    assert_eq!(d["openRemainingMs"], 2000);
    env.chat("ask", false).await;
    assert_eq!(env.hits("m-p"), 1);
    env.clock.advance(Duration::from_secs(2));
    assert_eq!(env.breaker("up", "m-p").await, "HALF_OPEN");
}

#[tokio::test]
async fn unroutable_and_untriggered_client_errors_never_open_a_breaker() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
  - { name: narrow, provider: openai, baseUrl: "${MOCK}/v1", models: ["only-this"] }
rules:
  - name: bad-request
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-400 }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
  - name: unroutable
    priority: 2
    matchModels: ["other"]
    routeToTarget:
      staticRoute: { target: narrow, model: not-listed }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let env = manual(yaml, behaviours(&[("m-400", status(400))])).await;
    for _ in 0..10 {
        assert_eq!(env.chat("ask", false).await.status, 400);
        assert_eq!(env.chat("other", false).await.status, 200);
    }
    assert_eq!(env.hits("m-400"), 10, "never skipped");
    for (t, m) in [("up", "m-400"), ("narrow", "not-listed")] {
        let d = env.destination(t, m).await;
        assert_eq!(
            (d["state"].as_str(), d["consecutiveFailures"].as_u64()),
            (Some("CLOSED"), Some(0)),
            "{d}"
        );
    }
}

#[tokio::test]
async fn the_last_remaining_hop_is_attempted_even_when_open() {
    let env = manual(
        &chain(""),
        behaviours(&[("m-p", status(503)), ("m-f", status(503))]),
    )
    .await;
    for _ in 0..5 {
        assert_eq!(env.chat("ask", false).await.status, 503);
    }
    assert_eq!(
        (
            env.breaker("up", "m-p").await,
            env.breaker("up", "m-f").await
        ),
        ("OPEN".into(), "OPEN".into())
    );
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 503);
    assert_eq!(
        (env.hits("m-p"), env.hits("m-f")),
        (5, 6),
        "primary skipped, last hop attempted"
    );
    let rec = env.record(6).await;
    assert_eq!(Env::route(&rec), ["up/m-f"]);
    assert_eq!(rec.attempts[0].breaker, "OPEN");
    assert_eq!(rec.skipped[0].why, "BREAKER_OPEN");
}

#[tokio::test]
async fn mode_disabled_attempts_the_failing_primary_every_time() {
    let env = manual(
        &chain("circuitBreaker: { mode: DISABLED }"),
        behaviours(&[("m-p", status(503))]),
    )
    .await;
    for _ in 0..10 {
        assert_eq!(env.chat("ask", false).await.status, 200);
    }
    assert_eq!(env.hits("m-p"), 10);
    assert_eq!(
        env.breaker("up", "m-p").await,
        "OPEN",
        "outcomes still update the shared state"
    );
}

#[tokio::test]
async fn rules_that_share_a_destination_share_its_breaker() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: a
    priority: 1
    matchModels: ["ask-a"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback: { targetFallback: [ { target: up, model: m-fa } ] }
  - name: b
    priority: 2
    matchModels: ["ask-b"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback: { targetFallback: [ { target: up, model: m-fb } ] }
"#;
    let env = manual(yaml, behaviours(&[("m-p", status(503))])).await;
    for _ in 0..5 {
        env.chat("ask-a", false).await;
    }
    let r = env.chat("ask-b", false).await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-fb"));
    assert_eq!(
        env.hits("m-p"),
        5,
        "rule b skipped the destination rule a opened"
    );
}

#[tokio::test]
async fn priority_groups_fail_over_in_request_and_probe_once_per_growing_window() {
    let yaml = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
    circuitBreaker: { openMilliseconds: 1000, backoffMultiplier: 2.0, maxOpenMilliseconds: 60000 }
rules:
  - name: tiers
    priority: 1
    matchModels: ["fast"]
    routeToTarget:
      priorityGroups:
        - destinations: [ { target: up, model: m-g1 } ]
        - destinations: [ { target: up, model: m-g2 } ]
"#;
    let env = manual(yaml, behaviours(&[("m-g1", status(503))])).await;
    let mut served = 0;
    let mut send = async |n: usize| {
        for _ in 0..n {
            assert_eq!(
                env.chat("fast", false).await.status,
                200,
                "no error reaches the caller"
            );
            served += 1;
        }
    };
    send(5).await;
    assert_eq!(env.hits("m-g1"), 5, "consecutiveFailures=5 to open");
    // Each window costs the failing member one attempt; windows are 1 s, 2 s, 4 s.
    let mut expected = 5;
    for window_ms in [1000u64, 2000, 4000] {
        send(3).await;
        assert_eq!(env.hits("m-g1"), expected, "open: skipped");
        env.clock.advance(Duration::from_millis(window_ms - 1));
        send(1).await;
        assert_eq!(
            env.hits("m-g1"),
            expected,
            "still open 1 ms before the window ends"
        );
        env.clock.advance(Duration::from_millis(1));
        send(2).await;
        expected += 1;
        assert_eq!(env.hits("m-g1"), expected, "exactly one probe per window");
    }
    assert_eq!(
        env.hits("m-g2") as usize,
        served,
        "group 2 served every request"
    );
}

#[tokio::test]
async fn p2c_sends_less_traffic_to_a_slow_member() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: lb
    priority: 1
    matchModels: ["fast"]
    routeToTarget:
      priorityGroups:
        - destinations: [ { target: up, model: m-quick }, { target: up, model: m-slow } ]
"#;
    // 10 ms vs 50 ms: far enough apart that a loaded machine's scheduling noise cannot swap them.
    let env = start(
        yaml,
        behaviours(&[
            ("m-quick", healthy_after(10)),
            ("m-slow", healthy_after(50)),
        ]),
    )
    .await;
    for _ in 0..200 {
        assert_eq!(env.chat("fast", false).await.status, 200);
    }
    let (quick, slow) = (env.hits("m-quick"), env.hits("m-slow"));
    assert_eq!(quick + slow, 200);
    assert!(
        quick >= 4 * slow,
        "5x slower member should get much less: quick {quick}, slow {slow}"
    );
    let d = env.destination("up", "m-slow").await;
    assert!(
        d["ttfbEwmaMs"].as_f64().unwrap()
            > env.destination("up", "m-quick").await["ttfbEwmaMs"]
                .as_f64()
                .unwrap()
    );
}

#[tokio::test]
async fn weighted_legs_split_by_weight_and_stick_by_header() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: canary
    priority: 1
    matchModels: ["gpt-5"]
    routeToTarget:
      weightedRoute:
        legs:
          - { target: up, model: m-main, weight: 90 }
          - { target: up, model: m-canary, weight: 10 }
        stickiness: { header: x-session-id }
"#;
    let env = start(yaml, MockConfig::default()).await;
    for _ in 0..1000 {
        env.chat("gpt-5", false).await;
    }
    let main = env.hits("m-main");
    assert!((850..=950).contains(&main), "90% ± 5%: {main}/1000");
    assert_eq!(main + env.hits("m-canary"), 1000);
    let body = serde_json::json!({"model": "gpt-5", "messages": []});
    let mut legs = std::collections::BTreeSet::new();
    for session in 0..40 {
        let id = format!("session-{session}");
        let first = env
            .post(
                "/v1/chat/completions",
                body.clone(),
                &[("x-session-id", &id)],
            )
            .await;
        let leg = first.header("x-sidetrack-served-by").unwrap().to_owned();
        for _ in 0..5 {
            let again = env
                .post(
                    "/v1/chat/completions",
                    body.clone(),
                    &[("x-session-id", &id)],
                )
                .await;
            assert_eq!(
                again.header("x-sidetrack-served-by").unwrap(),
                leg,
                "same session, same leg"
            );
        }
        legs.insert(leg);
    }
    assert_eq!(legs.len(), 2, "sessions spread over both legs");
}

#[tokio::test]
async fn admin_disable_enable_and_reset_are_obeyed_and_visible() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: solo
    priority: 1
    matchModels: ["solo"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
  - name: pair
    priority: 2
    matchModels: ["pair"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let env = manual(yaml, MockConfig::default()).await;
    let (code, _) = env.admin_post("/admin/destinations/up/m-p/disable").await;
    assert_eq!(code, 200);
    assert_eq!(env.destination("up", "m-p").await["disabled"], true);

    // Disabled is skipped even as the last hop: 503 in the caller's dialect.
    let r = env.chat("solo", false).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["type"], "api_error");
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "noEligibleDestination");
    assert_eq!(rec.skipped[0].why, "DISABLED");
    let r = env.chat("pair", false).await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-f"));
    assert_eq!(env.hits("m-p"), 0);
    assert_eq!(
        env.metric(r#"sidetrack_skips_total{target="up",model="m-p",why="DISABLED"}"#)
            .await,
        2.0
    );

    env.admin_post("/admin/destinations/up/m-p/enable").await;
    assert_eq!(env.chat("solo", false).await.status, 200);
    assert_eq!(env.hits("m-p"), 1);

    // Reset closes an open breaker.
    env.mock.set_behaviour("m-p", status(503));
    for _ in 0..5 {
        env.chat("pair", false).await;
    }
    assert_eq!(env.breaker("up", "m-p").await, "OPEN");
    assert_eq!(
        env.metric(r#"sidetrack_breaker_state{target="up",model="m-p"}"#)
            .await,
        2.0
    );
    let (code, _) = env.admin_post("/admin/destinations/up/m-p/reset").await;
    assert_eq!(code, 200);
    assert_eq!(env.breaker("up", "m-p").await, "CLOSED");
    assert_eq!(
        env.metric(r#"sidetrack_breaker_state{target="up",model="m-p"}"#)
            .await,
        0.0
    );
    assert_eq!(
        env.metric(r#"sidetrack_breaker_transitions_total{target="up",model="m-p",to="OPEN"}"#)
            .await,
        1.0
    );
    assert_eq!(
        env.metric(r#"sidetrack_breaker_transitions_total{target="up",model="m-p",to="CLOSED"}"#)
            .await,
        1.0
    );
    assert_eq!(
        env.metric(r#"sidetrack_attempts_total{target="up",model="m-p",outcome="STATUS"}"#)
            .await,
        5.0
    );
    assert_eq!(
        env.admin_post("/admin/destinations/nope/x/disable").await.0,
        404
    );
}

#[tokio::test]
async fn unhealthy_condition_decides_what_counts_against_the_breaker() {
    let yaml = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
    circuitBreaker:
      consecutiveFailures: 3
      unhealthyCondition: 'response.code == 400 && "x-bad-key" in response.headers'
  - name: lenient
    provider: openai
    baseUrl: ${MOCK}/v1
    circuitBreaker: { consecutiveFailures: 3, unhealthyCondition: 'error == "CONNECTION_ERROR"' }
rules:
  - name: r
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-400 }
  - name: s
    priority: 2
    matchModels: ["other"]
    routeToTarget:
      staticRoute: { target: lenient, model: m-503 }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let env = manual(
        yaml,
        behaviours(&[("m-400", status(400)), ("m-503", status(503))]),
    )
    .await;
    // 400 is not a trigger, but the condition counts it... only with the header, which the mock
    // does not send: never counted.
    for _ in 0..4 {
        assert_eq!(env.chat("ask", false).await.status, 400);
    }
    assert_eq!(env.breaker("up", "m-400").await, "CLOSED");
    // 503 triggers the fallback, but the lenient condition only counts connection errors.
    for _ in 0..4 {
        assert_eq!(env.chat("other", false).await.status, 200);
    }
    assert_eq!(env.hits("m-503"), 4, "never skipped");
    assert_eq!(env.breaker("lenient", "m-503").await, "CLOSED");
}

#[tokio::test]
async fn unhealthy_condition_can_count_what_triggers_ignore() {
    let yaml = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    circuitBreaker: { consecutiveFailures: 3, unhealthyCondition: "response.code == 400" }
rules:
  - name: r
    priority: 1
    routeToTarget:
      staticRoute: { target: up, model: m-400 }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let env = manual(yaml, behaviours(&[("m-400", status(400))])).await;
    for _ in 0..3 {
        assert_eq!(
            env.chat("x", false).await.status,
            400,
            "400 is not a trigger: returned as-is"
        );
    }
    assert_eq!(
        env.breaker("up", "m-400").await,
        "OPEN",
        "but the condition counted it"
    );
    let r = env.chat("x", false).await;
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("up/m-f"),
        "open primary skipped"
    );
    assert_eq!(env.hits("m-400"), 3);
}

#[tokio::test]
async fn admin_token_guards_every_admin_call_but_the_page() {
    let env = start(
        "server: { adminToken: s3cret }\ntargets: [ { name: up, provider: openai, baseUrl: \"${MOCK}/v1\", models: [\"m-*\"] } ]",
        MockConfig::default(),
    )
    .await;
    for path in ["/admin/destinations", "/metrics", "/admin/config"] {
        assert_eq!(env.admin_get(path).await.0, 401, "{path}");
    }
    assert_eq!(
        env.admin_post("/admin/destinations/up/m-a/disable").await.0,
        401
    );
    assert_eq!(
        env.admin_get("/").await.0,
        200,
        "the dashboard page itself is static"
    );
    let (code, body) = env.admin_get_with("/admin/config", "s3cret").await;
    assert_eq!(code, 200);
    assert!(!body.contains("s3cret"), "secrets are redacted: {body}");
    assert!(body.contains("***"));
}
