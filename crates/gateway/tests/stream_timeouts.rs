//! SPEC §11 "Stream timeouts": `firstTokenTimeoutMilliseconds` and `streamIdleTimeoutMilliseconds`
//! against the real mock provider and a real gateway. Before the commit a timeout is an attempt
//! outcome (FIRST_TOKEN_TIMEOUT / STREAM_IDLE_TIMEOUT) that the default triggers fall back on;
//! after it, silence ends the caller's stream with the explicit error event and counts against the
//! destination's breaker.
//!
//! The YAML keys are parsed by the config crate's own change; until then these tests set the
//! parsed hop policies directly ([`common::start_tuned`]).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{behaviours, start_tuned, streamed_text, Env};
use sidetrack_config::{Config, HopPolicy, Route};
use sidetrack_gateway::Clock;
use sidetrack_mock::{Behaviour, MockConfig};

const CONFIG: &str = r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
    circuitBreaker: { consecutiveFailures: 1 }
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"], circuitBreaker: { consecutiveFailures: 1 } }
rules:
  - name: chain
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-slow }
      fallback:
        targetFallback:
          - { target: up, model: m-good }
  - name: alone
    priority: 20
    matchModels: ["alone"]
    routeToTarget:
      staticRoute: { target: up, model: m-slow }
  - name: stall
    priority: 30
    matchModels: ["stall"]
    routeToTarget:
      staticRoute: { target: up, model: m-stall }
      fallback:
        targetFallback:
          - { target: up, model: m-good }
  - name: claude-stall
    priority: 40
    matchModels: ["claude-ask"]
    routeToTarget:
      staticRoute: { target: claude, model: claude-stall }
"#;

/// Every hop of every rule gets these stream timeouts.
fn with_timeouts(
    first_token: Option<u64>,
    idle: Option<u64>,
) -> impl FnOnce(&mut Config) + 'static {
    move |cfg| {
        let set = |p: &mut HopPolicy| {
            p.first_token_timeout = first_token.map(Duration::from_millis);
            p.stream_idle_timeout = idle.map(Duration::from_millis);
        };
        for rule in &mut cfg.rules {
            let Route::Static(s) = &mut rule.route else {
                panic!("static routes only")
            };
            set(&mut s.primary_policy);
            for f in &mut s.fallbacks {
                set(&mut f.policy);
            }
        }
    }
}

async fn start(slow: Behaviour, stall: Behaviour, timeouts: impl FnOnce(&mut Config)) -> Env {
    let mock: MockConfig = behaviours(&[
        ("m-slow", slow),
        ("m-stall", stall.clone()),
        ("claude-stall", stall),
    ]);
    start_tuned(CONFIG, mock, Clock::real(), timeouts).await
}

fn slow_first_token(ms: u64) -> Behaviour {
    Behaviour {
        first_content_delay_milliseconds: Some(ms),
        ..Behaviour::default()
    }
}

/// Six content chunks, then (after `after` of them) a silence of `gap` ms.
fn stalls(after: usize, gap: u64) -> Behaviour {
    Behaviour {
        reply: Some("one two three four five six".into()),
        stream_chunks: Some(6),
        idle_after_chunks: Some(after),
        idle_gap_milliseconds: Some(gap),
        ..Behaviour::default()
    }
}

/// A model's `hits` in the mock's `/_mock/stats`.
fn stats(env: &Env, model: &str) -> u64 {
    env.mock.stats()["models"][model]["hits"].as_u64().unwrap()
}

/// The text of an Anthropic stream's `text_delta` events.
fn anthropic_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter(|v| v["delta"]["type"] == "text_delta")
        .map(|v| v["delta"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn no_first_token_in_time_falls_back_to_the_next_hop() {
    let env = start(
        slow_first_token(2000),
        Behaviour::default(),
        with_timeouts(Some(300), None),
    )
    .await;
    let t = Instant::now();
    let r = env.chat("ask", true).await;
    assert!(
        t.elapsed() < Duration::from_millis(1800),
        "the primary's 2 s wait was not sat out: {:?}",
        t.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(streamed_text(&r.body), "hello from m-good");
    assert!(r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow", "up/m-good"]);
    assert_eq!(rec.attempts[0].outcome, "FIRST_TOKEN_TIMEOUT");
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("firstTokenTimeoutMilliseconds")
    );
    assert_eq!(rec.attempts[1].outcome, "SUCCESS");
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert!(!rec.mid_stream_error);
    assert_eq!((env.hits("m-slow"), env.hits("m-good")), (1, 1));
    assert_eq!((stats(&env, "m-slow"), stats(&env, "m-good")), (1, 1));
}

#[tokio::test]
async fn a_first_token_timeout_on_the_last_hop_is_a_504_in_the_callers_dialect() {
    let env = start(
        slow_first_token(2000),
        Behaviour::default(),
        with_timeouts(Some(300), None),
    )
    .await;
    let r = env.chat("alone", true).await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "api_error", "{}", r.body);
    let rec = env.record(1).await;
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.attempts[0].outcome, "FIRST_TOKEN_TIMEOUT");
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(rec.status, 504);
    assert!(!rec.mid_stream_error, "nothing of the stream was sent");

    // Anthropic's dialect: 504 timeout_error.
    let body = serde_json::json!({
        "model": "alone", "max_tokens": 16, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]
    });
    let r = env.post("/v1/messages", body, &[]).await;
    assert_eq!(r.status, 504, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "timeout_error", "{}", r.body);
}

#[tokio::test]
async fn silence_before_the_first_content_falls_back_as_stream_idle_timeout() {
    // The preamble goes out at once, then 2 s of silence before any content: no commit yet.
    let env = start(
        stalls(0, 2000),
        Behaviour::default(),
        with_timeouts(None, Some(300)),
    )
    .await;
    let t = Instant::now();
    let r = env.chat("ask", true).await;
    assert!(
        t.elapsed() < Duration::from_millis(1800),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(streamed_text(&r.body), "hello from m-good");
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow", "up/m-good"]);
    assert_eq!(rec.attempts[0].outcome, "STREAM_IDLE_TIMEOUT");
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("streamIdleTimeoutMilliseconds")
    );
    assert!(!rec.mid_stream_error);
    assert_eq!((env.hits("m-slow"), env.hits("m-good")), (1, 1));
}

#[tokio::test]
async fn silence_after_the_commit_ends_the_openai_stream_with_the_error_event_and_counts() {
    let env = start(
        Behaviour::default(),
        stalls(3, 5000),
        with_timeouts(None, Some(300)),
    )
    .await;
    let t = Instant::now();
    let r = env.chat("stall", true).await;
    assert!(
        t.elapsed() < Duration::from_millis(4000),
        "the stall was cut, not waited out: {:?}",
        t.elapsed()
    );
    assert_eq!(r.status, 200);
    assert_eq!(streamed_text(&r.body), "one two three");
    assert!(!r.body.contains("[DONE]"), "{}", r.body);
    let last = r.body.trim_end().lines().last().unwrap();
    assert!(last.starts_with("data: {\"error\":"), "last line: {last}");
    let rec = env.record(1).await;
    assert_eq!(
        Env::route(&rec),
        ["up/m-stall"],
        "no fallback after the commit"
    );
    assert!(rec.committed);
    assert!(rec.mid_stream_error);
    assert_eq!(rec.outcome, "ERROR");
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("streamIdleTimeoutMilliseconds")
    );
    assert_eq!(env.hits("m-good"), 0);
    // A counted breaker failure: the metric, the destination's failures, and (threshold 1) open.
    assert_eq!(
        env.metric(r#"sidetrack_mid_stream_errors_total{target="up",model="m-stall"}"#)
            .await,
        1.0
    );
    let d = env.destination("up", "m-stall").await;
    assert_eq!(d["failures"], 1, "{d}");
    assert_eq!(env.breaker("up", "m-stall").await, "OPEN");
}

#[tokio::test]
async fn silence_after_the_commit_ends_the_anthropic_stream_with_its_error_event() {
    let env = start(
        Behaviour::default(),
        stalls(3, 5000),
        with_timeouts(None, Some(300)),
    )
    .await;
    let body = serde_json::json!({
        "model": "claude-ask", "max_tokens": 64, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]
    });
    let t = Instant::now();
    let r = env.post("/v1/messages", body, &[]).await;
    assert!(
        t.elapsed() < Duration::from_millis(4000),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.status, 200);
    assert_eq!(anthropic_text(&r.body), "one two three", "{}", r.body);
    assert!(!r.body.contains("message_stop"), "{}", r.body);
    let tail = r.body.trim_end();
    let last_event = &tail[tail.rfind("event: ").unwrap()..];
    assert!(last_event.starts_with("event: error"), "{last_event}");
    assert!(last_event.contains("\"type\":\"error\""), "{last_event}");
    let rec = env.record(1).await;
    assert!(rec.mid_stream_error);
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("streamIdleTimeoutMilliseconds")
    );
    assert_eq!(env.breaker("claude", "claude-stall").await, "OPEN");
}

#[tokio::test]
async fn chunks_closer_than_the_idle_timeout_are_never_cut() {
    // Six chunks 150 ms apart (about a second in all) under a 400 ms idle timeout: the timer
    // follows the chunks.
    let paced = Behaviour {
        reply: Some("one two three four five six".into()),
        stream_chunks: Some(6),
        chunk_interval_milliseconds: Some(150),
        ..Behaviour::default()
    };
    let env = start(
        Behaviour::default(),
        paced,
        with_timeouts(Some(300), Some(400)),
    )
    .await;
    let r = env.chat("stall", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(streamed_text(&r.body), "one two three four five six");
    assert!(r.body.contains("[DONE]"));
    let rec = env.record(1).await;
    assert!(!rec.mid_stream_error);
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.attempts[0].outcome, "SUCCESS");
}

#[tokio::test]
async fn a_non_streamed_request_ignores_the_first_token_timeout() {
    let slow = Behaviour {
        first_byte_delay_milliseconds: Some(600),
        ..Behaviour::default()
    };
    let env = start(slow, Behaviour::default(), with_timeouts(Some(200), None)).await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "hello from m-slow"
    );
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow"]);
    assert_eq!(rec.attempts[0].outcome, "SUCCESS");
    assert_eq!(env.hits("m-good"), 0);
}

#[tokio::test]
async fn without_the_keys_slow_first_tokens_and_silences_are_served() {
    let env = start(
        slow_first_token(600),
        stalls(3, 600),
        with_timeouts(None, None),
    )
    .await;
    let r = env.chat("ask", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(streamed_text(&r.body), "hello from m-slow");
    let r = env.chat("stall", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(streamed_text(&r.body), "one two three four five six");
    assert!(r.body.contains("[DONE]"));
    for n in 1..=2 {
        let rec = env.record(n).await;
        assert_eq!(rec.attempts.len(), 1);
        assert_eq!(rec.attempts[0].outcome, "SUCCESS");
        assert!(!rec.mid_stream_error);
    }
    assert_eq!(env.hits("m-good"), 0);
}

#[tokio::test]
async fn a_stream_with_no_byte_at_all_times_out_on_the_first_token() {
    // Nothing at all (not even the head) for 2 s: the first-token timer runs from the send.
    let silent = Behaviour {
        first_byte_delay_milliseconds: Some(2000),
        ..Behaviour::default()
    };
    let env = start(silent, Behaviour::default(), with_timeouts(Some(300), None)).await;
    let r = env.chat("ask", true).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(streamed_text(&r.body), "hello from m-good");
    let rec = env.record(1).await;
    assert_eq!(rec.attempts[0].outcome, "FIRST_TOKEN_TIMEOUT");
    assert_eq!(rec.attempts[0].first_byte_ms, None);
}

#[tokio::test]
async fn under_first_byte_commit_the_first_token_timeout_does_not_act_after_the_commit() {
    // `server.streamCommit: firstByte`: the preamble's first byte commits the primary, so a slow
    // first token is the primary's to serve (the first-token timeout acts only before the commit).
    let yaml = format!("server:\n  streamCommit: firstByte\n{CONFIG}");
    let mock = behaviours(&[("m-slow", slow_first_token(700))]);
    let env = start_tuned(&yaml, mock, Clock::real(), with_timeouts(Some(300), None)).await;
    let r = env.chat("ask", true).await;
    assert_eq!(r.status, 200);
    assert_eq!(streamed_text(&r.body), "hello from m-slow");
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["up/m-slow"]);
    assert_eq!(rec.attempts[0].outcome, "SUCCESS");
    assert!(!rec.mid_stream_error);
    assert_eq!(env.hits("m-good"), 0);
}
