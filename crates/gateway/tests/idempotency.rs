//! Issue 17 / SPEC §12: `Idempotency-Key` over real sockets and the real mock — in-flight joining
//! (plain and streamed), replay after a success, 422 on a reused key, 400 on a long key, failures
//! stored nowhere, and keys kept per principal. Mock hits count the upstream calls.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{behaviours, start, Env, Reply};
use futures_util::future::join_all;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_mock::Behaviour;

const CONFIG: &str = r#"
auth:
  keys:
    - { principal: team-a, key: key-a }
    - { principal: team-b, key: key-b }
targets:
  - name: up
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["m-*"]
"#;

fn slow(ms: u64) -> Behaviour {
    Behaviour {
        first_byte_delay_milliseconds: Some(ms),
        ..Behaviour::default()
    }
}

fn body(model: &str, stream: bool, text: &str) -> serde_json::Value {
    serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]})
}

async fn post(env: &Env, key: &str, idem: &str, body: serde_json::Value) -> Reply {
    env.post(
        "/v1/chat/completions",
        body,
        &[
            ("authorization", &format!("Bearer {key}")),
            ("idempotency-key", idem),
        ],
    )
    .await
}

/// `n` duplicates: the first is sent, and once the gateway has it in flight the rest (the mock's
/// first-byte delay keeps it there; whichever registers the key first leads).
async fn duplicates(env: &Arc<Env>, model: &str, stream: bool, n: usize) -> Vec<Reply> {
    let first = {
        let env = env.clone();
        let model = model.to_owned();
        tokio::spawn(async move { post(&env, "key-a", "dup-1", body(&model, stream, "hi")).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while env.metric("sidetrack_in_flight_requests").await < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first never got in flight"
        );
        tokio::task::yield_now().await;
    }
    let rest = (1..n).map(|_| {
        let env = env.clone();
        let model = model.to_owned();
        tokio::spawn(async move { post(&env, "key-a", "dup-1", body(&model, stream, "hi")).await })
    });
    // Spawned now, while the first is in flight (the iterator is lazy).
    let rest: Vec<_> = rest.collect();
    let mut replies = vec![first.await.unwrap()];
    replies.extend(join_all(rest).await.into_iter().map(Result::unwrap));
    replies
}

#[tokio::test]
async fn twenty_concurrent_duplicates_make_one_upstream_call_and_get_one_answer() {
    let env = Arc::new(start(CONFIG, behaviours(&[("m-slow", slow(400))])).await);
    let replies = duplicates(&env, "m-slow", false, 20).await;
    assert_eq!(env.hits("m-slow"), 1, "one upstream call");
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.body, replies[0].body,
            "every duplicate gets the same bytes"
        );
    }
    let joined = replies
        .iter()
        .filter(|r| r.header("x-sidetrack-idempotent-replay") == Some("true"))
        .count();
    assert_eq!(joined, 19, "the 19 joined duplicates are marked as replays");
    assert!(replies[0].header("x-sidetrack-idempotent-replay").is_none());
    // Each request has its own record; the 19 joined ones say idempotentReplay with no attempts.
    let recs = env
        .log
        .wait_for(20, std::time::Duration::from_secs(10))
        .await;
    let replayed: Vec<_> = recs
        .iter()
        .filter(|r| r.reason == "idempotentReplay")
        .collect();
    assert_eq!(replayed.len(), 19);
    assert!(replayed
        .iter()
        .all(|r| r.attempts.is_empty() && r.status == 200));
    assert!(
        replayed.iter().all(|r| r.latency_ms >= 200.0),
        "they joined the first in flight (a stored answer would come at once)"
    );
    assert_eq!(env.metric("sidetrack_idempotent_replays_total").await, 19.0);
}

#[tokio::test]
async fn streamed_duplicates_get_the_whole_stream_from_its_first_event() {
    let stream = Behaviour {
        stream_chunks: Some(8),
        chunk_interval_milliseconds: Some(40),
        ..Behaviour::default()
    };
    let env = Arc::new(start(CONFIG, behaviours(&[("m-stream", stream)])).await);
    // The lead is read until its first bytes arrive, so the duplicates join mid-stream.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("{}/v1/chat/completions", env.gw.base_url()))
        .header("content-type", "application/json")
        .header("authorization", "Bearer key-a")
        .header("idempotency-key", "stream-1")
        .body(Full::new(Bytes::from(
            body("m-stream", true, "hi").to_string(),
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut lead_body = resp.into_body();
    let mut lead = Vec::new();
    while lead.is_empty() {
        let frame = lead_body.frame().await.unwrap().unwrap();
        if let Some(d) = frame.data_ref() {
            lead.extend_from_slice(d);
        }
    }
    let dups = (0..19).map(|_| {
        let env = env.clone();
        tokio::spawn(
            async move { post(&env, "key-a", "stream-1", body("m-stream", true, "hi")).await },
        )
    });
    let dups: Vec<_> = dups.collect();
    lead.extend_from_slice(&lead_body.collect().await.unwrap().to_bytes());
    let dups = join_all(dups).await;
    let lead = String::from_utf8(lead).unwrap();
    assert!(lead.contains("data: [DONE]"), "{lead}");
    assert_eq!(env.hits("m-stream"), 1, "one upstream call");
    for d in dups {
        let d = d.unwrap();
        assert_eq!(d.status, 200);
        assert_eq!(d.header("x-sidetrack-idempotent-replay"), Some("true"));
        assert_eq!(d.body, lead, "the whole stream, from its first event");
    }
    let recs = env
        .log
        .wait_for(20, std::time::Duration::from_secs(10))
        .await;
    let joined: Vec<_> = recs
        .iter()
        .filter(|r| r.reason == "idempotentReplay")
        .collect();
    assert_eq!(joined.len(), 19);
    assert!(joined.iter().all(|r| r.streamed && r.attempts.is_empty()));
}

#[tokio::test]
async fn a_duplicate_after_a_success_is_replayed_without_an_upstream_call() {
    let env = start(CONFIG, behaviours(&[])).await;
    let first = post(&env, "key-a", "after-1", body("m-a", false, "hi")).await;
    assert_eq!(first.status, 200);
    assert!(first.header("x-sidetrack-idempotent-replay").is_none());
    let again = post(&env, "key-a", "after-1", body("m-a", false, "hi")).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-sidetrack-idempotent-replay"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(env.hits("m-a"), 1);
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "idempotentReplay");
    assert!(rec.attempts.is_empty());
    assert_ne!(
        again.header("x-sidetrack-request-id"),
        first.header("x-sidetrack-request-id"),
        "the replay carries its own request id"
    );
}

#[tokio::test]
async fn the_same_key_with_a_different_body_is_422_in_the_callers_dialect() {
    let env = start(CONFIG, behaviours(&[])).await;
    let first = post(&env, "key-a", "k-422", body("m-a", false, "hi")).await;
    assert_eq!(first.status, 200);
    let other = post(&env, "key-a", "k-422", body("m-a", false, "something else")).await;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(other.json()["error"]["type"], "invalid_request_error");
    // Anthropic's dialect, same key, yet another path: 422 in Anthropic's shape.
    let anthropic = env
        .post(
            "/v1/messages",
            serde_json::json!({"model": "m-a", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            &[("x-api-key", "key-a"), ("idempotency-key", "k-422")],
        )
        .await;
    assert_eq!(anthropic.status, 422, "{}", anthropic.body);
    assert_eq!(anthropic.json()["type"], "error");
    assert_eq!(anthropic.json()["error"]["type"], "invalid_request_error");
    assert_eq!(env.hits("m-a"), 1);
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "gatewayRejected:idempotencyKeyReused");
}

#[tokio::test]
async fn a_key_over_255_characters_is_400_and_255_is_accepted() {
    let env = start(CONFIG, behaviours(&[])).await;
    let long = "k".repeat(256);
    let r = post(&env, "key-a", &long, body("m-a", false, "hi")).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("255"));
    assert_eq!(env.hits("m-a"), 0);
    let ok = post(&env, "key-a", &"k".repeat(255), body("m-a", false, "hi")).await;
    assert_eq!(ok.status, 200);
}

#[tokio::test]
async fn a_failure_stores_nothing_and_its_waiting_duplicates_get_the_same_failure() {
    let failing = Behaviour {
        status: Some(503),
        first_byte_delay_milliseconds: Some(400),
        ..Behaviour::default()
    };
    let env = Arc::new(start(CONFIG, behaviours(&[("m-down", failing)])).await);
    let replies = duplicates(&env, "m-down", false, 20).await;
    // Only the lead walked (its attempts are every upstream call; the default policy may retry).
    let recs = env
        .log
        .wait_for(20, std::time::Duration::from_secs(10))
        .await;
    let walked: Vec<_> = recs
        .iter()
        .filter(|r| r.reason != "idempotentReplay")
        .collect();
    assert_eq!(walked.len(), 1, "one request walked");
    let calls = walked[0].attempts.len() as u64;
    assert!(calls >= 1);
    assert_eq!(
        env.hits("m-down"),
        calls,
        "the waiting duplicates made no call of their own"
    );
    for r in &replies {
        assert_eq!(r.status, 503);
        assert_eq!(r.body, replies[0].body, "the same failure");
    }
    // Nothing stored: the next duplicate really calls upstream again.
    let again = post(&env, "key-a", "dup-1", body("m-down", false, "hi")).await;
    assert_eq!(again.status, 503);
    assert!(again.header("x-sidetrack-idempotent-replay").is_none());
    assert_eq!(env.hits("m-down"), 2 * calls);
}

#[tokio::test]
async fn keys_belong_to_their_principal() {
    let env = start(CONFIG, behaviours(&[])).await;
    let a = post(&env, "key-a", "shared-key", body("m-a", false, "hi")).await;
    let b = post(&env, "key-b", "shared-key", body("m-a", false, "hi")).await;
    assert_eq!((a.status, b.status), (200, 200));
    assert!(b.header("x-sidetrack-idempotent-replay").is_none());
    assert_ne!(a.body, b.body, "team-b's answer is its own");
    assert_eq!(env.hits("m-a"), 2, "two principals, two upstream calls");
}
