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

// ---------------------------------------------------------------------------------------------
// Across replicas, through a real redis-server (`SIDETRACK_REDIS_SERVER`)
// ---------------------------------------------------------------------------------------------

/// A throwaway `redis-server` on a free loopback port.
struct Redis {
    port: u16,
    child: std::process::Child,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let bin = std::env::var("SIDETRACK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = std::process::Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} ({e})"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Redis { port, child }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn shared_config(redis: &Redis) -> String {
    format!(
        "state:\n  redis: {{ url: \"{}\", keyPrefix: \"idem{}:\" }}\n{CONFIG}",
        redis.url(),
        std::process::id()
    )
}

/// A second gateway (another replica) on the same mock and config.
async fn replica(
    env: &Env,
    yaml: &str,
) -> (
    sidetrack_gateway::GatewayHandle,
    sidetrack_gateway::RoutingLog,
) {
    let log = sidetrack_gateway::RoutingLog::memory();
    let src = yaml.replace("${MOCK}", &env.mock.base_url());
    let cfg = sidetrack_config::load_str(&src, "replica.yaml").unwrap();
    let options = sidetrack_gateway::GatewayOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        clock: sidetrack_gateway::Clock::real(),
        seed: Some(11),
        reload: None,
    };
    let gw = sidetrack_gateway::start(cfg, log.clone(), options)
        .await
        .unwrap();
    (gw, log)
}

async fn post_to(base: &str, idem: &str, body: serde_json::Value) -> (u16, Option<String>, String) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("authorization", "Bearer key-a")
        .header("idempotency-key", idem)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let replay = resp
        .headers()
        .get("x-sidetrack-idempotent-replay")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, replay, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_duplicates_split_over_two_replicas_make_one_upstream_call() {
    let redis = Redis::start();
    let yaml = shared_config(&redis);
    let env = start(
        &yaml,
        behaviours(&[
            ("m-slow", slow(400)),
            (
                "m-down",
                Behaviour {
                    status: Some(503),
                    first_byte_delay_milliseconds: Some(400),
                    ..Behaviour::default()
                },
            ),
        ]),
    )
    .await;
    let (b, b_log) = replica(&env, &yaml).await;
    let (a_url, b_url) = (env.gw.base_url(), b.base_url());

    // 20 duplicates, alternating between the replicas, all while the first is in flight.
    let calls = (0..20).map(|i| {
        let base = if i % 2 == 0 {
            a_url.clone()
        } else {
            b_url.clone()
        };
        tokio::spawn(async move { post_to(&base, "cross-1", body("m-slow", false, "hi")).await })
    });
    let replies: Vec<_> = join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        env.hits("m-slow"),
        1,
        "one upstream call across both replicas"
    );
    for (status, _, body) in &replies {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body, &replies[0].2, "every duplicate gets the same bytes");
    }
    assert_eq!(
        replies.iter().filter(|r| r.1.is_none()).count(),
        1,
        "one answer was made, 19 replayed"
    );
    // Later, on the replica that did not lead: the stored answer, no new call.
    let later = post_to(&b_url, "cross-1", body("m-slow", false, "hi")).await;
    assert_eq!(later.1.as_deref(), Some("true"));
    assert_eq!(later.2, replies[0].2);
    // A different body under the key, on either replica: 422.
    assert_eq!(
        post_to(&a_url, "cross-1", body("m-slow", false, "other"))
            .await
            .0,
        422
    );
    assert_eq!(
        post_to(&b_url, "cross-1", body("m-slow", false, "other"))
            .await
            .0,
        422
    );
    assert_eq!(env.hits("m-slow"), 1);
    // Replica B answered its half (and the later one) as replays, but for one it may have led.
    let b_recs = b_log.wait_for(12, std::time::Duration::from_secs(5)).await;
    let b_replays = b_recs
        .iter()
        .filter(|r| r.reason == "idempotentReplay")
        .count();
    assert!(b_replays >= 10, "{b_replays}");

    // A failure on one replica: the duplicates waiting on the other get it too, and nothing is
    // stored — the next duplicate calls upstream again.
    let calls = (0..6).map(|i| {
        let base = if i % 2 == 0 {
            a_url.clone()
        } else {
            b_url.clone()
        };
        tokio::spawn(async move { post_to(&base, "cross-2", body("m-down", false, "hi")).await })
    });
    let replies: Vec<_> = join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let first_calls = env.hits("m-down");
    assert!(replies.iter().all(|r| r.0 == 503));
    assert_eq!(
        replies.iter().filter(|r| r.1.is_none()).count(),
        1,
        "one request walked; the others got its failure"
    );
    let again = post_to(&b_url, "cross-2", body("m-down", false, "hi")).await;
    assert_eq!(again.0, 503);
    assert!(again.1.is_none(), "a failure is not replayed");
    assert!(env.hits("m-down") > first_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_marker_frees_the_key_when_its_lease_ends() {
    use sidetrack_gateway::state::idempotency::remote::redis_id;
    let redis = Redis::start();
    let yaml = shared_config(&redis);
    let env = start(&yaml, behaviours(&[])).await;
    // A replica that claimed the key and died: its marker (same request) with 600 ms left.
    let body_json = body("m-a", false, "hi");
    let fp = sidetrack_gateway::state::idempotency::fingerprint(
        "openai-chat",
        "/v1/chat/completions",
        body_json.to_string().as_bytes(),
    );
    let hex: String = fp.iter().map(|b| format!("{b:02x}")).collect();
    let key = format!(
        "idem{}:idem:{}",
        std::process::id(),
        redis_id("team-a", "crashed")
    );
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(format!("i{hex}00000000deadbeef"))
        .arg("PX")
        .arg(600)
        .query_async(&mut c)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let r = post_to(&env.gw.base_url(), "crashed", body_json).await;
    assert_eq!(r.0, 200, "{}", r.2);
    assert!(r.1.is_none(), "it ran itself once the lease ended");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(400),
        "it waited for the marker: {:?}",
        started.elapsed()
    );
    assert_eq!(env.hits("m-a"), 1);
}

/// A stream that fails after the commit (the caller got the gateway's mid-stream error event) is
/// a failure: it is not stored, and the next duplicate calls upstream again.
#[tokio::test]
async fn a_stream_that_fails_after_the_commit_is_not_replayed() {
    let broken = Behaviour {
        drop_after_chunks: Some(2),
        ..Behaviour::default()
    };
    let env = start(CONFIG, behaviours(&[("m-cut", broken)])).await;
    let first = post(&env, "key-a", "cut-1", body("m-cut", true, "hi")).await;
    assert_eq!(first.status, 200, "committed before it broke");
    assert!(first.body.contains("error"), "{}", first.body);
    let rec = env.record(1).await;
    assert!(rec.mid_stream_error);
    let again = post(&env, "key-a", "cut-1", body("m-cut", true, "hi")).await;
    assert_eq!(again.header("x-sidetrack-idempotent-replay"), None);
    assert_eq!(env.hits("m-cut"), 2, "the duplicate ran again");
}
