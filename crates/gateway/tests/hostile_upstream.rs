//! The hostile-world suite, upstream side (SPEC §14 "Upstream answers"): a provider that never
//! ends a line or an event, sends an event over the bound, garbage framing, an endless body or no
//! answer at all. Before the commit each is a 502 protocol failure that falls back (or reaches the
//! caller as a 502 in its dialect); after it the caller's stream ends with the explicit error.
//! Memory bounds under such upstreams are measured on the real binary
//! (crates/sidetrack/tests/hostile_upstream.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{behaviours, start, Env};
use serde_json::json;
use sidetrack_mock::{Behaviour, Hostile};

fn hostile(kind: Hostile, after: usize) -> Behaviour {
    Behaviour {
        hostile: Some(kind),
        hostile_after_chunks: Some(after),
        ..Behaviour::default()
    }
}

const CONFIG: &str = r#"
server:
  maxStreamEventBytes: 1048576
  maxResponseBytes: 65536
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: k, models: ["b-*"] }
rules:
  - name: fb
    priority: 1
    matchModels: ["m-fb-*"]
    routeToTarget:
      staticRoute: { target: up }
      fallback:
        firstByteTimeoutMilliseconds: 300
        targetFallback:
          - { target: up, model: m-good }
"#;

async fn env() -> Env {
    let mut list = Vec::new();
    for (name, kind) in [
        ("line", Hostile::EndlessLine),
        ("comment", Hostile::EndlessComment),
        ("event", Hostile::EndlessEvent),
        ("garbage", Hostile::Garbage),
        ("silent", Hostile::NoHeaders),
        ("body", Hostile::EndlessBody),
    ] {
        list.push((format!("m-fb-{name}"), hostile(kind, 0)));
        list.push((format!("m-{name}"), hostile(kind, 0)));
        list.push((format!("m-{name}-late"), hostile(kind, 1)));
        list.push((format!("b-{name}"), hostile(kind, 0)));
    }
    let huge = Behaviour {
        hostile_bytes: Some(2_000_000),
        ..hostile(Hostile::HugeEvent, 1)
    };
    list.push(("m-huge-late".to_owned(), huge));
    let list: Vec<(&str, Behaviour)> = list.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    start(CONFIG, behaviours(&list)).await
}

/// Bounded: before the bounds, these upstreams made the gateway hang (and grow) for good.
async fn chat(env: &Env, model: &str, stream: bool) -> common::Reply {
    let answer = tokio::time::timeout(Duration::from_secs(20), env.chat(model, stream));
    answer.await.expect("the gateway answered within 20 s")
}

async fn messages_call(env: &Env, model: &str, stream: bool) -> common::Reply {
    let post = env.post("/v1/messages", messages(model, stream), &[]);
    let answer = tokio::time::timeout(Duration::from_secs(20), post);
    answer.await.expect("the gateway answered within 20 s")
}

fn messages(model: &str, stream: bool) -> serde_json::Value {
    json!({"model": model, "stream": stream, "max_tokens": 64,
           "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn a_primary_that_never_ends_a_line_or_event_falls_back_before_the_commit() {
    let env = env().await;
    for (n, kind) in ["line", "comment", "event", "garbage"].iter().enumerate() {
        let model = format!("m-fb-{kind}");
        let started = Instant::now();
        let r = chat(&env, &model, true).await;
        assert_eq!(r.status, 200, "{kind}: {}", r.body);
        assert_eq!(
            common::streamed_text(&r.body),
            "hello from m-good",
            "{kind}"
        );
        assert!(r.body.ends_with("data: [DONE]\n\n"), "{kind}");
        assert!(started.elapsed() < Duration::from_secs(5), "{kind}");
        let rec = env.record(n + 1).await;
        assert_eq!(rec.reason, "servedViaFallbackHop:1", "{kind}");
        assert_eq!(
            Env::route(&rec),
            [format!("up/{model}"), "up/m-good".into()]
        );
        assert_eq!(rec.attempts[0].outcome, "STATUS");
        assert_eq!(rec.attempts[0].status, Some(502));
        assert_eq!(
            rec.attempts[0].detail.as_deref(),
            Some("undecidedPreamble"),
            "{kind}"
        );
        assert_eq!(env.hits(&model), 1);
    }
    assert_eq!(env.hits("m-good"), 4);
    // A primary that never answers is cut by its first-byte timeout and falls back too.
    let r = chat(&env, "m-fb-silent", true).await;
    assert_eq!(r.status, 200);
    let rec = env.record(5).await;
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(rec.attempts[0].error_kind, Some("FIRST_BYTE_TIMEOUT"));
}

#[tokio::test]
async fn without_a_fallback_the_caller_gets_a_502_in_its_dialect() {
    let env = env().await;
    // Same dialect (OpenAI chat to an OpenAI upstream).
    let r = chat(&env, "m-line", true).await;
    assert_eq!(r.status, 502, "{}", r.body);
    // OpenAI's own type for a 5xx (wire-formats.md §1).
    assert_eq!(r.json()["error"]["type"], "server_error");
    assert!(r.header("content-encoding").is_none());
    // Translated (Anthropic caller, OpenAI upstream): the same failure in Anthropic's shape.
    let r = messages_call(&env, "m-event", true).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "api_error");
    // A Bedrock caller gets Bedrock's shape: its 502 row, with the error type header.
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    let call = env.post("/model/m-line/converse-stream", body, &[]);
    let r = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r
        .header("x-amzn-errortype")
        .is_some_and(|t| t.starts_with("ServiceUnavailableException")));
    // A Bedrock event stream that does not decode (the mock's garbage is no frame at all).
    let r = chat(&env, "b-garbage", true).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let recs = env.log.wait_for(4, Duration::from_secs(10)).await;
    let details: Vec<_> = recs.iter().map(|r| r.attempts[0].detail.clone()).collect();
    assert_eq!(
        details,
        [
            Some("undecidedPreamble".to_owned()),
            Some("undecidedPreamble".to_owned()),
            Some("undecidedPreamble".to_owned()),
            Some("undecodableStream".to_owned())
        ]
    );
    let statuses: Vec<u16> = recs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [502, 502, 503, 502], "Bedrock's row says 503");
    assert!(recs.iter().all(|r| r.reason == "chainExhausted"));
}

#[tokio::test]
async fn an_endless_or_oversized_body_that_must_be_translated_is_a_502() {
    let env = env().await;
    let r = messages_call(&env, "m-body", false).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "api_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maxResponseBytes"));
    let rec = env.record(1).await;
    assert_eq!(rec.attempts[0].detail.as_deref(), Some("responseTooLarge"));
}

/// The SSE events of a body: (event name, data) pairs; the last may be partial.
fn events(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                }
            }
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn after_the_commit_the_stream_ends_with_the_explicit_error() {
    let env = env().await;
    for (n, model) in ["m-line-late", "m-event-late", "m-huge-late"]
        .iter()
        .enumerate()
    {
        let started = Instant::now();
        let r = chat(&env, model, true).await;
        assert_eq!(r.status, 200, "{model}");
        assert!(started.elapsed() < Duration::from_secs(5), "{model}");
        let evs = events(&r.body);
        assert!(
            evs.iter().any(|(_, d)| d.contains("\"content\":\"hel")),
            "{model}: the first chunk went out"
        );
        let last = &evs.last().unwrap().1;
        let err: serde_json::Value = serde_json::from_str(last).unwrap();
        assert_eq!(err["error"]["type"], "server_error", "{model}");
        assert!(err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sidetrack"));
        assert!(!r.body.contains("[DONE]"), "{model}: never a fake end");
        let rec = env.record(n + 1).await;
        assert!(rec.mid_stream_error && rec.committed, "{model}");
        assert_eq!(rec.status, 200);
    }
    // Translated: an Anthropic caller gets `event: error` last.
    let r = messages_call(&env, "m-line-late", true).await;
    assert_eq!(r.status, 200);
    let evs = events(&r.body);
    assert!(evs
        .iter()
        .any(|(n, _)| n.as_deref() == Some("content_block_delta")));
    let (name, data) = evs.last().unwrap();
    assert_eq!(name.as_deref(), Some("error"), "{}", r.body);
    assert!(data.contains("\"type\":\"error\""));
}
