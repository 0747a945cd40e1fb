//! Issue 17 follow-up / SPEC §12: the response store's Redis mirror. Two replicas share one real
//! `redis-server`: an answer stored through replica A is a `lastResort` hit on replica B when all
//! of B's providers are down; must-show 4: Redis killed mid-run fails no request (walk results and
//! local hits keep coming, `sidetrack_state_backend_up` goes 0), and once Redis is back the store
//! writes again (a new answer stored through A is a hit on B). Semantic lookup across replicas: a
//! question stored through A is a `semantic-hit` on B for a differently worded question, through
//! the shared vector stream.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{down, reply, start, streamed_text, Env, Reply};
use serde_json::json;
use sidetrack_mock::{Behaviour, MockConfig};

/// A throwaway `redis-server` on a free loopback port (`SIDETRACK_REDIS_SERVER`).
struct Redis {
    port: u16,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis { port, child: None };
        r.restart();
        r
    }

    fn restart(&mut self) {
        let bin = std::env::var("SIDETRACK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} ({e}): set SIDETRACK_REDIS_SERVER"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config(redis: &str, prefix: &str) -> String {
    format!(
        r#"
state:
  redis: {{ url: "{redis}", keyPrefix: "{prefix}", syncMilliseconds: 50, budgetMilliseconds: 100 }}
cache: {{ mode: lastResort, ttlMilliseconds: 600000 }}
targets:
  - {{ name: oai, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["m-*"] }}
rules:
  - name: r
    priority: 1
    matchModels: ["m"]
    routeToTarget:
      staticRoute: {{ target: oai, model: m-a }}
"#
    )
}

fn prefix(tag: &str) -> String {
    format!("t{}{tag}:", std::process::id())
}

/// A replica whose provider answers `m-a` with `b`.
async fn replica(yaml: &str, b: Behaviour) -> Env {
    let env = start(yaml, MockConfig::default()).await;
    env.mock.set_behaviour("m-a", b);
    env
}

async fn ask(env: &Env, q: &str, stream: bool) -> Reply {
    let body = json!({"model": "m", "max_tokens": 64, "stream": stream,
                      "messages": [{"role": "user", "content": q}]});
    env.post("/v1/chat/completions", body, &[]).await
}

fn assert_hit(r: &Reply, want: &str) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("hit"));
    assert_eq!(r.chat_text(), want);
}

/// The store entries under `prefix` in Redis, with their remaining lifetimes (ms).
async fn entries(redis: &str, prefix: &str) -> Vec<i64> {
    let client = redis::Client::open(redis).unwrap();
    let Ok(mut c) = client.get_multiplexed_async_connection().await else {
        return Vec::new();
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}cache:*"))
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    let mut ttls = Vec::new();
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        ttls.push(ttl);
    }
    ttls
}

/// Polls `cond` (bounded) until it holds.
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_stored_through_a_is_a_last_resort_hit_on_b() {
    let redis = Redis::start();
    let p = prefix("share");
    let yaml = config(&redis.url(), &p);
    let a = replica(&yaml, reply("answered on A")).await;
    // B's only provider has been down from the start: it never got an answer of its own.
    let b = replica(&yaml, down()).await;

    let r = ask(&b, "shared?", false).await;
    assert_eq!(r.status, 503, "nothing stored yet: the walk's answer");

    let r = ask(&a, "shared?", false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    eventually("A's answer is in Redis", || async {
        entries(&redis.url(), &p).await.len() == 1
    })
    .await;
    let ttls = entries(&redis.url(), &p).await;
    assert!(
        ttls[0] > 500_000 && ttls[0] <= 600_000,
        "PX is the TTL: {ttls:?}"
    );

    let r = ask(&b, "shared?", false).await;
    assert_hit(&r, "answered on A");
    let rec = b.record(2).await;
    assert_eq!(rec.reason, "servedFromCache");
    // Streamed too, now from B's own memory tier.
    let r = ask(&b, "shared?", true).await;
    assert_eq!(r.header("x-sidetrack-cache"), Some("hit"));
    assert_eq!(streamed_text(&r.body), "answered on A");
    assert_eq!(b.metric("sidetrack_cache_entries").await, 1.0);
    // A question nobody asked is the walk's 503 with its Retry-After.
    let r = ask(&b, "novel?", false).await;
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_no_request_and_the_mirror_resumes_after() {
    let mut redis = Redis::start();
    let p = prefix("outage");
    let yaml = config(&redis.url(), &p);
    let a = replica(&yaml, reply("from A")).await;
    let b = replica(&yaml, down()).await;

    ask(&a, "before?", false).await;
    eventually("the first answer is mirrored", || async {
        entries(&redis.url(), &p).await.len() == 1
    })
    .await;
    assert_hit(&ask(&b, "before?", false).await, "from A");

    redis.kill();
    // Mid-outage: A keeps answering from its provider (and keeps storing locally), B keeps
    // answering from its memory tier; a question B never saw is the walk's own 503.
    for i in 0..20 {
        let started = Instant::now();
        let r = ask(&a, &format!("during {i}?"), false).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.chat_text(), "from A");
        assert_hit(&ask(&b, "before?", false).await, "from A");
        let r = ask(&b, &format!("novel {i}?"), false).await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(r.header("retry-after").is_some());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a dead Redis costs at most its budget"
        );
    }
    for env in [&a, &b] {
        eventually("the backend is reported down", || async {
            env.metric("sidetrack_state_backend_up").await == 0.0
        })
        .await;
    }
    // A's local store still answers what it stored during the outage.
    a.mock.set_behaviour("m-a", down());
    assert_hit(&ask(&a, "during 3?", false).await, "from A");
    a.mock.set_behaviour("m-a", reply("after the outage"));

    redis.restart();
    for env in [&a, &b] {
        eventually("the backend is reported up again", || async {
            env.metric("sidetrack_state_backend_up").await == 1.0
        })
        .await;
    }
    let r = ask(&a, "after?", false).await;
    assert_eq!(r.chat_text(), "after the outage");
    // (Writes still being retried when Redis came back may land too: only this one is awaited.)
    eventually("the new answer is mirrored and found by B", || async {
        ask(&b, "after?", false).await.header("x-sidetrack-cache") == Some("hit")
    })
    .await;
    assert_hit(&ask(&b, "after?", false).await, "after the outage");
}

/// Like [`config`], with `cache.semantic` through an embeddings target on each replica's mock.
fn semantic_config(redis: &str, prefix: &str) -> String {
    config(redis, prefix)
        .replace(
            "cache: { mode: lastResort, ttlMilliseconds: 600000 }",
            "cache:\n  mode: lastResort\n  ttlMilliseconds: 600000\n  semantic:\n    \
             embeddings: { target: emb, model: emb-1 }\n    similarityThreshold: 0.9\n    \
             embeddingTimeoutMilliseconds: 2000",
        )
        .replace(
            "targets:\n",
            "targets:\n  - { name: emb, provider: openai, baseUrl: \"${MOCK}/v1\", models: [\"emb-*\"] }\n",
        )
}

/// The entries of the shared vector stream under `prefix`.
async fn vector_stream_len(redis: &str, prefix: &str) -> i64 {
    let client = redis::Client::open(redis).unwrap();
    let Ok(mut c) = client.get_multiplexed_async_connection().await else {
        return 0;
    };
    redis::cmd("XLEN")
        .arg(format!("{prefix}cache-vectors"))
        .query_async(&mut c)
        .await
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_stored_through_a_is_a_semantic_hit_on_b() {
    let redis = Redis::start();
    let p = prefix("semantic");
    let yaml = semantic_config(&redis.url(), &p);
    assert!(yaml.contains("semantic:"), "{yaml}");
    let a = replica(&yaml, reply("Paris, from A.")).await;
    let b = replica(&yaml, down()).await;

    let r = ask(&a, "please tell me the capital city of france today", false).await;
    assert_eq!((r.status, r.chat_text().as_str()), (200, "Paris, from A."));
    eventually("A's vector is in the shared stream", || async {
        vector_stream_len(&redis.url(), &p).await >= 1
    })
    .await;
    eventually("B read A's vector into its index", || async {
        b.metric("sidetrack_cache_vectors").await == 1.0
    })
    .await;
    assert_eq!(
        b.metric("sidetrack_cache_entries").await,
        0.0,
        "B holds no answer yet"
    );

    // 8 of the 9 words: B embeds it on its own mock, finds A's question, and brings A's answer
    // from Redis by its exact key.
    let r = ask(&b, "please tell me the capital of france today", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.chat_text(), "Paris, from A.");
    assert_eq!(b.hits("m-a"), 1, "B's walk ran first (lastResort)");
    assert_eq!(b.hits("emb-1"), 1, "B embedded the question once");
    assert_eq!(
        b.metric(r#"sidetrack_cache_lookups_total{mode="lastResort",result="semantic_hit"}"#)
            .await,
        1.0
    );
    // A dissimilar question on B is the walk's 503.
    let r = ask(&b, "how do volcanoes form under oceans", false).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    // A did not read its own vector back from the stream twice.
    assert_eq!(a.metric("sidetrack_cache_vectors").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_lookup_fails_open_when_redis_dies() {
    let mut redis = Redis::start();
    let p = prefix("semantic-outage");
    let yaml = semantic_config(&redis.url(), &p);
    let a = replica(&yaml, reply("Paris, from A.")).await;
    let b = replica(&yaml, down()).await;
    ask(&a, "please tell me the capital city of france today", false).await;
    eventually("A's vector is in the shared stream", || async {
        vector_stream_len(&redis.url(), &p).await >= 1
    })
    .await;
    redis.kill();
    a.mock.set_behaviour("m-a", down());
    // A's own question and answer are local: still a semantic hit, Redis dead.
    let started = Instant::now();
    let r = ask(&a, "please tell me the capital of france today", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.chat_text(), "Paris, from A.");
    assert!(started.elapsed() < Duration::from_secs(2));
    // B: whatever its index holds, the answer is in Redis only: the walk's own 503, no error of
    // the store's.
    let r = ask(&b, "please tell me the capital of france today", false).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.header("x-sidetrack-cache"), None);
}
