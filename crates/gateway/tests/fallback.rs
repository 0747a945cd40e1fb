//! Issue 2 "must show" 1–10: the walk, triggers, timeouts and the commit point, against real
//! sockets, asserting route order, mock hit counts per model, final status and the log reason.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{behaviours, run_sdk, start, status, Env};
use sidetrack_mock::{Behaviour, MockConfig};

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

#[tokio::test]
async fn no_rule_healthy_upstream_is_served_by_primary_in_one_attempt() {
    let env = start(ONE_TARGET, MockConfig::default()).await;
    let r = env.chat("m-healthy", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "hello from m-healthy"
    );
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-healthy"));
    assert_eq!(r.header("x-sidetrack-attempts"), Some("1"));
    assert_eq!(r.header("x-sidetrack-fallback-hop"), Some("0"));
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(rec.match_type, Some("DEFAULT"));
    assert_eq!(rec.rule_name, None);
    assert_eq!(rec.outcome, "SERVED");
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.attempts[0].outcome, "SUCCESS");
    assert!(
        rec.usage.is_some_and(|u| u.output_tokens > 0),
        "usage is read from the response"
    );
    assert_eq!(env.hits("m-healthy"), 1);
}

const PRIMARY_400: &str = r#"
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-bad }
      fallback:
        TRIGGERS
        targetFallback:
          - { target: up, model: m-good }
"#;

#[tokio::test]
async fn a_400_is_not_a_default_trigger_and_passes_through_unchanged() {
    let env = start(
        &with_rules(&PRIMARY_400.replace("TRIGGERS", "")),
        behaviours(&[("m-bad", status(400))]),
    )
    .await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 400);
    let direct = r.json();
    assert_eq!(
        direct["error"]["type"], "invalid_request_error",
        "the upstream body, unchanged"
    );
    assert_eq!(
        r.header("x-should-retry"),
        None,
        "a single-hop error carries no retry hint"
    );
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(Env::route(&rec), ["up/m-bad"]);
    assert_eq!((env.hits("m-bad"), env.hits("m-good")), (1, 0));
}

#[tokio::test]
async fn written_trigger_on_4xx_moves_on_to_the_fallback() {
    let triggers = r#"triggerOn: { statusCodes: ["4XX", "5XX"], errors: [CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE] }"#;
    let env = start(
        &with_rules(&PRIMARY_400.replace("TRIGGERS", triggers)),
        behaviours(&[("m-bad", status(400))]),
    )
    .await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "hello from m-good"
    );
    assert_eq!(r.header("x-sidetrack-fallback-hop"), Some("1"));
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(Env::route(&rec), ["up/m-bad", "up/m-good"]);
    assert_eq!(rec.attempts[0].status, Some(400));
    assert_eq!((env.hits("m-bad"), env.hits("m-good")), (1, 1));
}

const CHAIN3: &str = r#"
  - name: three
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback:
        triggerOn: { statusCodes: ["4XX"] }
        targetFallback:
          - { target: up, model: m-f1 FB1 }
          - { target: up, model: m-f2 }
"#;

#[tokio::test]
async fn triggers_are_not_inherited_by_fallback_hops() {
    let mock = || behaviours(&[("m-p", status(400)), ("m-f1", status(400))]);
    // Fallback 1 has no triggerOn: its default (5XX, errors) does not include 4XX.
    let env = start(&with_rules(&CHAIN3.replace(" FB1", "")), mock()).await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 400);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-p", "up/m-f1"]);
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(
        (env.hits("m-p"), env.hits("m-f1"), env.hits("m-f2")),
        (1, 1, 0)
    );
    assert_eq!(
        r.header("x-should-retry"),
        Some("false"),
        "two hops walked: the SDK must not multiply them"
    );

    // Writing 4XX on fallback 1 lets the walk reach fallback 2.
    let fb1 = r#", triggerOn: { statusCodes: ["4XX"] }"#;
    let env = start(&with_rules(&CHAIN3.replace(" FB1", fb1)), mock()).await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-p", "up/m-f1", "up/m-f2"]);
    assert_eq!(rec.reason, "servedViaFallbackHop:2");
    assert_eq!(r.header("x-sidetrack-attempts"), Some("3"));
    assert_eq!(
        (env.hits("m-p"), env.hits("m-f1"), env.hits("m-f2")),
        (1, 1, 1)
    );
}

fn stalled(ms: u64) -> Behaviour {
    Behaviour {
        first_byte_delay_milliseconds: Some(ms),
        ..Behaviour::default()
    }
}

const STALL_RULE: &str = r#"
  - name: stall
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-slow }
      fallback:
        TIMEOUT
        targetFallback:
          - { target: up, model: m-fast }
"#;

#[tokio::test]
async fn first_byte_timeout_moves_on_quickly() {
    let yaml = with_rules(&STALL_RULE.replace("TIMEOUT", "firstByteTimeoutMilliseconds: 50"));
    let env = start(&yaml, behaviours(&[("m-slow", stalled(10_000))])).await;
    let t0 = Instant::now();
    let r = env.chat("ask", false).await;
    let took = t0.elapsed();
    assert_eq!(r.status, 200);
    assert!(
        took < Duration::from_secs(1),
        "fell back after the 50 ms timeout, took {took:?}"
    );
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow", "up/m-fast"]);
    assert_eq!(rec.attempts[0].outcome, "FIRST_BYTE_TIMEOUT");
    assert_eq!(rec.attempts[0].error_kind, Some("FIRST_BYTE_TIMEOUT"));
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("firstByteTimeoutMilliseconds")
    );
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!((env.hits("m-slow"), env.hits("m-fast")), (1, 1));
}

#[tokio::test]
async fn without_a_first_byte_timeout_the_caller_waits_for_the_primary() {
    let yaml = with_rules(&STALL_RULE.replace("TIMEOUT", ""));
    let env = start(&yaml, behaviours(&[("m-slow", stalled(1_200))])).await;
    let t0 = Instant::now();
    let r = env.chat("ask", false).await;
    assert!(t0.elapsed() >= Duration::from_millis(1_200));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "hello from m-slow"
    );
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!((env.hits("m-slow"), env.hits("m-fast")), (1, 0));
}

#[tokio::test]
async fn openai_sdk_stream_falls_back_on_first_byte_timeout() {
    let yaml = with_rules(&STALL_RULE.replace("TIMEOUT", "firstByteTimeoutMilliseconds: 50"));
    let env = start(&yaml, behaviours(&[("m-slow", stalled(10_000))])).await;
    let out = run_sdk("openai_chat.py", &["stream", &env.gw.base_url(), "ask"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from m-fast");
    let rec = env.record(1).await;
    // The gateway's own time, not the wall clock around the SDK process (whose start-up on a
    // loaded CI machine took over 5 s): far below the primary's 10 s stall.
    assert!(rec.latency_ms < 5_000.0, "{}", rec.latency_ms);
    assert!(rec.streamed);
    assert_eq!(Env::route(&rec), ["up/m-slow", "up/m-fast"]);
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert!(!rec.mid_stream_error);
    assert_eq!((env.hits("m-slow"), env.hits("m-fast")), (1, 1));
}

#[tokio::test]
async fn upstream_dying_mid_stream_reaches_the_sdk_as_an_api_error_without_done() {
    let cut = Behaviour {
        reply: Some("one two three four five six".into()),
        stream_chunks: Some(6),
        drop_after_chunks: Some(3),
        ..Behaviour::default()
    };
    let env = start(ONE_TARGET, behaviours(&[("m-cut", cut)])).await;

    // Raw bytes: partial content, then an explicit error event, and no [DONE].
    let r = env.chat("m-cut", true).await;
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("[DONE]"), "{}", r.body);
    assert_eq!(common::streamed_text(&r.body), "one two three");
    let last = r.body.trim_end().lines().last().unwrap();
    assert!(last.starts_with("data: {\"error\":"), "last line: {last}");
    let rec = env.record(1).await;
    assert!(rec.mid_stream_error);
    assert!(rec.committed);
    assert_eq!(rec.outcome, "ERROR");

    // The official SDK: the partial text, then openai.APIError (not a status error).
    let out = run_sdk("openai_chat.py", &["stream", &env.gw.base_url(), "m-cut"]).await;
    assert_eq!(out["error"]["class"], "APIError", "{out}");
    assert_eq!(out["error"]["is_status_error"], false);
    assert_eq!(
        out["text"], "one two three",
        "exactly the 3 chunks sent before the cut"
    );
    assert!(env.record(2).await.mid_stream_error);
    assert_eq!(env.hits("m-cut"), 2, "no fallback after commit");
}

const LATE_ERROR_RULE: &str = r#"
  - name: late
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-late }
      fallback:
        targetFallback:
          - { target: up, model: m-ok }
"#;

fn overloaded_late() -> MockConfig {
    behaviours(&[(
        "m-late",
        Behaviour {
            stream_error_after_chunks: Some(0),
            stream_error_type: Some("overloaded_error".into()),
            ..Behaviour::default()
        },
    )])
}

#[tokio::test]
async fn error_event_before_first_token_falls_back_with_first_token_commit() {
    let env = start(&with_rules(LATE_ERROR_RULE), overloaded_late()).await;
    let r = env.chat("ask", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(common::streamed_text(&r.body), "hello from m-ok");
    assert!(r.body.trim_end().ends_with("data: [DONE]"));
    assert!(
        !r.body.contains("overloaded_error"),
        "nothing of the failed attempt reached the caller"
    );
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-late", "up/m-ok"]);
    assert_eq!(rec.attempts[0].outcome, "STATUS");
    assert_eq!(rec.attempts[0].status, Some(529));
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert!(!rec.mid_stream_error);
    assert_eq!((env.hits("m-late"), env.hits("m-ok")), (1, 1));
}

#[tokio::test]
async fn error_event_before_first_token_reaches_the_caller_with_first_byte_commit() {
    let yaml = format!(
        "server:\n  streamCommit: firstByte\n{}",
        with_rules(LATE_ERROR_RULE)
    );
    let env = start(&yaml, overloaded_late()).await;
    let r = env.chat("ask", true).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("\"overloaded_error\""), "{}", r.body);
    assert!(!r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-late"]);
    assert_eq!(rec.reason, "servedByPrimary");
    assert!(rec.mid_stream_error);
    assert_eq!((env.hits("m-late"), env.hits("m-ok")), (1, 0));
}

/// The relay hands pass-through chunks on before it reads them; an upstream error event that
/// arrives with or right after the content is still read (before the body ends), counted as a
/// mid-stream error, and not followed by a second, gateway-made error event.
#[tokio::test]
async fn an_upstream_error_event_after_content_is_relayed_once_and_counted() {
    let late = Behaviour {
        reply: Some("alpha beta".into()),
        stream_chunks: Some(2),
        stream_error_after_chunks: Some(2),
        ..Behaviour::default()
    };
    let env = start(ONE_TARGET, behaviours(&[("m-late2", late)])).await;
    let r = env.chat("m-late2", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(common::streamed_text(&r.body), "alpha beta");
    assert_eq!(
        r.body.matches("data: {\"error\":").count(),
        1,
        "the upstream's error event, and no gateway-made one after it: {}",
        r.body
    );
    assert!(r.body.contains("server_error"), "{}", r.body);
    assert!(!r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert!(rec.committed);
    assert!(rec.mid_stream_error);
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(env.hits("m-late2"), 1, "no fallback after commit");
}

#[tokio::test]
async fn the_request_timeout_cuts_a_committed_stream_with_an_error_event() {
    // 40 chunks 50 ms apart outlast a 300 ms request timeout by far.
    let slow = Behaviour {
        reply: Some("a ".repeat(40)),
        stream_chunks: Some(40),
        chunk_interval_milliseconds: Some(50),
        ..Behaviour::default()
    };
    let yaml = format!("server:\n  requestTimeoutMilliseconds: 300\n{ONE_TARGET}");
    let env = start(&yaml, behaviours(&[("m-slow", slow)])).await;
    let r = env.chat("m-slow", true).await;
    assert_eq!(r.status, 200, "committed before the deadline");
    let chunks = common::streamed_text(&r.body).matches('a').count();
    assert!(
        (1..40).contains(&chunks),
        "cut after {chunks} of 40 chunks: {}",
        r.body
    );
    assert_eq!(r.body.matches("data: {\"error\":").count(), 1, "{}", r.body);
    assert!(r.body.contains("request timeout"), "{}", r.body);
    assert!(!r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert!(rec.committed);
    assert!(rec.mid_stream_error);
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(env.hits("m-slow"), 1);
}

#[tokio::test]
async fn refused_connection_falls_back_with_connection_error() {
    let yaml = r#"
targets:
  - name: dead
    provider: openai
    baseUrl: ${DEAD}/v1
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
rules:
  - name: r
    priority: 1
    routeToTarget:
      staticRoute: { target: dead, model: m-x }
      fallback:
        targetFallback: [ { target: up, model: m-y } ]
"#;
    let env = start(yaml, MockConfig::default()).await;
    let r = env.chat("anything", false).await;
    assert_eq!(r.status, 200);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["dead/m-x", "up/m-y"]);
    assert_eq!(rec.attempts[0].outcome, "CONNECTION_ERROR");
    assert_eq!(rec.attempts[0].error_kind, Some("CONNECTION_ERROR"));
    assert_eq!(rec.attempts[0].status, None);
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(rec.match_type, Some("RULE"));
    assert_eq!(rec.rule_name.as_deref(), Some("r"));
    assert_eq!(env.hits("m-y"), 1);
}

#[tokio::test]
async fn exhausted_chain_is_not_retried_by_the_openai_sdk() {
    let rules = r#"
  - name: all-down
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-a }
      fallback:
        targetFallback:
          - { target: up, model: m-b }
          - { target: up, model: m-c }
"#;
    let env = start(
        &with_rules(rules),
        behaviours(&[
            ("m-a", status(503)),
            ("m-b", status(503)),
            ("m-c", status(503)),
        ]),
    )
    .await;
    let out = run_sdk("openai_chat.py", &["complete", &env.gw.base_url(), "ask"]).await;
    assert_eq!(out["error"]["class"], "InternalServerError", "{out}");
    assert_eq!(out["error"]["status"], 503);
    // One attempt per hop: the SDK (max_retries=2) obeyed x-should-retry: false.
    assert_eq!(
        (env.hits("m-a"), env.hits("m-b"), env.hits("m-c")),
        (1, 1, 1)
    );
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "chainExhausted");
    assert_eq!(rec.status, 503);
    assert_eq!(Env::route(&rec), ["up/m-a", "up/m-b", "up/m-c"]);
    assert_eq!(
        env.log.records().len(),
        1,
        "the gateway saw exactly one request"
    );
}

/// SPEC §5.8 with §11: members of a group share its traffic; a member that fails is followed by
/// its healthy sibling in the same request (issue 16: before, the request went to the next group
/// and the sibling was never tried), and only a group whose members all failed passes the request
/// on to the next group.
#[tokio::test]
async fn priority_groups_rotate_members_and_fall_to_the_next_group() {
    let rules = r#"
  - name: tiers
    priority: 10
    matchModels: ["fast"]
    routeToTarget:
      priorityGroups:
        - destinations: [ { target: up, model: m-g1a }, { target: up, model: m-g1b } ]
        - destinations: [ { target: up, model: m-g2 } ]
"#;
    // The breaker is held closed: how often P2C picks the failing member varies from run to run,
    // and a fifth failure would open its breaker, so the last request would skip the member
    // (its route then [g1a, g2]) instead of trying it; this test is about the rotation.
    let yaml = with_rules(rules).replace(
        "models: [\"m-*\"]",
        "models: [\"m-*\"]\n    circuitBreaker: { consecutiveFailures: 1000000 }",
    );
    let env = start(&yaml, behaviours(&[("m-g1b", status(503))])).await;
    for _ in 0..40 {
        assert_eq!(env.chat("fast", false).await.status, 200);
    }
    let (a, b, g2) = (env.hits("m-g1a"), env.hits("m-g1b"), env.hits("m-g2"));
    assert_eq!(a, 40, "every request is served by group 1's healthy member");
    assert!(b > 0, "both members of group 1 get traffic: {a}/{b}");
    assert_eq!(
        g2, 0,
        "group 2 is not needed while group 1 has a healthy member"
    );
    let recs = env.log.wait_for(40, Duration::from_secs(5)).await;
    assert!(recs
        .iter()
        .all(|r| r.status == 200 && r.reason == "servedByPrimary"));
    let repicked: Vec<_> = recs.iter().filter(|r| r.attempts.len() == 2).collect();
    assert_eq!(repicked.len() as u64, b);
    assert!(repicked
        .iter()
        .all(|r| Env::route(r) == ["up/m-g1b", "up/m-g1a"]));
    // Both members failing: the request moves on to group 2.
    env.mock.set_behaviour("m-g1a", status(503));
    let r = env.chat("fast", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("up/m-g2"));
    let rec = env.record(41).await;
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    let mut group1: Vec<String> = Env::route(&rec)[..2].to_vec();
    group1.sort();
    assert_eq!(group1, ["up/m-g1a", "up/m-g1b"]);
    assert_eq!(Env::route(&rec)[2], "up/m-g2");
}

#[tokio::test]
async fn request_timeout_bounds_the_whole_request_and_headers_can_be_turned_off() {
    let yaml = format!(
        "server:\n  requestTimeoutMilliseconds: 200\n  responseHeaders: false\n{}",
        with_rules(&STALL_RULE.replace("TIMEOUT", ""))
    );
    let env = start(&yaml, behaviours(&[("m-slow", stalled(10_000))])).await;
    let t0 = Instant::now();
    let r = env.chat("ask", false).await;
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["type"], "api_error");
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        None,
        "responseHeaders: false"
    );
    let rec = env.record(1).await;
    assert_eq!(
        Env::route(&rec),
        ["up/m-slow"],
        "no time left for the fallback"
    );
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("requestTimeoutMilliseconds")
    );
    // SPEC §11: a deadline that passes before the commit is `deadlineExceeded`.
    assert_eq!(rec.reason, "deadlineExceeded");
    assert_eq!(env.hits("m-fast"), 0);
}

#[tokio::test]
async fn an_error_event_that_exhausts_the_chain_reaches_the_caller_as_sent() {
    let env = start(
        ONE_TARGET,
        behaviours(&[("m-late", overloaded_late().models["m-late"].clone())]),
    )
    .await;
    let r = env.chat("m-late", true).await;
    assert_eq!(r.status, 200, "the upstream's own answer, unchanged");
    assert!(r.body.contains("\"overloaded_error\""), "{}", r.body);
    assert!(!r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "chainExhausted");
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(rec.attempts[0].status, Some(529));
    assert_eq!(env.hits("m-late"), 1);
}
