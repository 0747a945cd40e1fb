//! Issue 17 / SPEC §12 "Semantic": on an exact miss the question is embedded through the
//! configured embeddings destination (the real mock's deterministic vectors, in which texts
//! sharing most words are close) and the nearest stored question at or above the threshold
//! answers, with `x-sidetrack-cache: semantic-hit`. A dissimilar question misses; embeddings that
//! fail or are slower than `embeddingTimeoutMilliseconds` leave the store exact-only, never an
//! error.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{down, reply, start, Env, Reply};
use serde_json::json;
use sidetrack_mock::{Behaviour, MockConfig};

const EMB: &str = "emb-1";

fn config(mode: &str, timeout_ms: u64) -> String {
    format!(
        r#"
targets:
  - {{ name: oai, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["m-*"] }}
  - {{ name: emb, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["emb-*"] }}
cache:
  mode: {mode}
  semantic:
    embeddings: {{ target: emb, model: {EMB} }}
    similarityThreshold: 0.9
    embeddingTimeoutMilliseconds: {timeout_ms}
rules:
  - name: r
    priority: 1
    matchModels: ["m"]
    routeToTarget:
      staticRoute: {{ target: oai, model: m-a }}
"#
    )
}

/// Stored first. The mock's vectors: cosine of two bags of words = shared / √(n·m).
const STORED: &str = "please tell me the capital city of france today";
/// 8 of its 9 words: cosine 8/√72 ≈ 0.943 ≥ 0.9.
const NEAR: &str = "please tell me the capital of france today";
/// No word in common.
const FAR: &str = "how do volcanoes form under oceans";

async fn ask(env: &Env, q: &str) -> Reply {
    let body = json!({"model": "m", "max_tokens": 64,
                      "messages": [{"role": "user", "content": q}]});
    env.post("/v1/chat/completions", body, &[]).await
}

/// Waits (bounded) until the vector index holds `n` questions (the store's embedding runs in a
/// spawned task after the answer is kept).
async fn wait_vectors(env: &Env, n: f64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while env.metric("sidetrack_cache_vectors").await < n {
        assert!(
            Instant::now() < deadline,
            "the index never held {n} vectors"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn lookups(env: &Env, mode: &str, result: &str) -> f64 {
    env.metric(&format!(
        r#"sidetrack_cache_lookups_total{{mode="{mode}",result="{result}"}}"#
    ))
    .await
}

#[tokio::test]
async fn last_resort_serves_a_near_question_and_not_a_dissimilar_one() {
    let env = start(&config("lastResort", 2000), MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("Paris."));
    let r = ask(&env, STORED).await;
    assert_eq!((r.status, r.chat_text().as_str()), (200, "Paris."));
    wait_vectors(&env, 1.0).await;
    assert_eq!(env.hits(EMB), 1, "the stored question was embedded once");
    env.mock.set_behaviour("m-a", down());

    // (a) differently worded, most words shared: the stored answer, marked semantic.
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.header("x-sidetrack-served-by"), Some("cache"));
    assert_eq!(r.chat_text(), "Paris.");
    assert_eq!(env.hits("m-a"), 2, "lastResort: the walk ran first");
    assert_eq!(env.hits(EMB), 2, "the near question was embedded");
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "servedFromCache");
    assert_eq!(lookups(&env, "lastResort", "semantic_hit").await, 1.0);
    // Streamed, and through the Anthropic endpoint: the same partition, rendered in the dialect.
    let body = json!({"model": "m", "max_tokens": 64, "stream": true,
                      "messages": [{"role": "user", "content": NEAR}]});
    let r = env.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(common::streamed_text(&r.body), "Paris.");
    let body = json!({"model": "m", "max_tokens": 64,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": NEAR}]}]});
    let r = env.post("/v1/messages", body, &[("x-api-key", "k")]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.json()["content"][0]["text"], "Paris.");
    assert_eq!(lookups(&env, "lastResort", "semantic_hit").await, 3.0);

    // (b) dissimilar: a miss, the walk's own error.
    let r = ask(&env, FAR).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    assert_eq!(env.hits(EMB), 5);
    assert_eq!(lookups(&env, "lastResort", "miss").await, 1.0);
    assert_eq!(lookups(&env, "lastResort", "semantic_hit").await, 3.0);
    // The exact question is still an exact hit (no embedding needed).
    let r = ask(&env, STORED).await;
    assert_eq!(r.header("x-sidetrack-cache"), Some("hit"));
    assert_eq!(env.hits(EMB), 5);
}

#[tokio::test]
async fn always_answers_a_near_question_before_the_walk_and_reuses_the_lookup_vector() {
    let env = start(&config("always", 2000), MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("Paris, always."));
    let r = ask(&env, STORED).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    wait_vectors(&env, 1.0).await;
    assert_eq!(
        env.hits(EMB),
        1,
        "the miss's vector was kept with the answer: no second embedding"
    );
    assert_eq!(lookups(&env, "always", "miss").await, 1.0);

    // Providers still up: a semantic hit makes no upstream chat call.
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.chat_text(), "Paris, always.");
    assert_eq!(env.hits("m-a"), 1, "no walk");
    assert_eq!(env.hits(EMB), 2);
    assert_eq!(lookups(&env, "always", "semantic_hit").await, 1.0);

    // A dissimilar question walks and gets the provider's answer.
    env.mock.set_behaviour("m-a", reply("Magma."));
    let r = ask(&env, FAR).await;
    assert_eq!((r.status, r.chat_text().as_str()), (200, "Magma."));
    assert_eq!(r.header("x-sidetrack-cache"), None);
    assert_eq!(env.hits("m-a"), 2);
}

#[tokio::test]
async fn embeddings_down_leaves_the_store_exact_only_and_never_errs() {
    let env = start(&config("lastResort", 2000), MockConfig::default()).await;
    env.mock.set_behaviour(EMB, down());
    env.mock.set_behaviour("m-a", reply("Paris."));
    let r = ask(&env, STORED).await;
    assert_eq!((r.status, r.chat_text().as_str()), (200, "Paris."));
    env.wait_hits(EMB, 1).await; // the store's embedding was tried, and failed
    assert_eq!(env.metric("sidetrack_cache_vectors").await, 0.0);
    env.mock.set_behaviour("m-a", down());
    let r = ask(&env, STORED).await;
    assert_eq!(
        r.header("x-sidetrack-cache"),
        Some("hit"),
        "exact still works"
    );
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 503, "the walk's error: {}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    assert!(r.header("retry-after").is_some());
    assert_eq!(env.hits(EMB), 2, "the lookup tried to embed");
    assert_eq!(lookups(&env, "lastResort", "miss").await, 1.0);
    assert_eq!(lookups(&env, "lastResort", "semantic_hit").await, 0.0);
    // Embeddings back: a new stored question becomes a semantic match again. Its own breaker:
    // the chat destination's failures do not hold the embeddings destination back.
    env.mock.set_behaviour(EMB, Behaviour::default());
    env.mock.set_behaviour("m-a", reply("Berlin."));
    let r = ask(&env, "please tell me the capital city of germany today").await;
    assert_eq!(r.status, 200);
    wait_vectors(&env, 1.0).await;
    env.mock.set_behaviour("m-a", down());
    let r = ask(&env, "please tell me the capital of germany today").await;
    assert_eq!(r.header("x-sidetrack-cache"), Some("semantic-hit"));
    assert_eq!(r.chat_text(), "Berlin.");
}

#[tokio::test]
async fn embeddings_slower_than_the_timeout_leave_the_store_exact_only() {
    let env = start(&config("always", 200), MockConfig::default()).await;
    let slow = Behaviour {
        first_byte_delay_milliseconds: Some(3000),
        ..Behaviour::default()
    };
    env.mock.set_behaviour(EMB, slow);
    env.mock.set_behaviour("m-a", reply("Paris."));
    let started = Instant::now();
    let r = ask(&env, STORED).await;
    assert_eq!((r.status, r.chat_text().as_str()), (200, "Paris."));
    // The lookup gave up on the embedding after 200 ms, not after its 3 s.
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-cache"), None, "no semantic match");
    assert_eq!(env.hits("m-a"), 2, "walked");
    assert!(started.elapsed() < Duration::from_millis(2000));
    let r = ask(&env, STORED).await;
    assert_eq!(r.header("x-sidetrack-cache"), Some("hit"));
    assert_eq!(lookups(&env, "always", "semantic_hit").await, 0.0);
    assert_eq!(env.metric("sidetrack_cache_vectors").await, 0.0);
    // Two lookups with embeddings each, and two stored answers embedded again in the background.
    env.wait_hits(EMB, 4).await;
    // A failed walk after a failed embedding: the lookup after the walk does not wait for a
    // second embedding (a request waits for at most one).
    env.mock.set_behaviour("m-a", down());
    let started = Instant::now();
    let r = ask(&env, FAR).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(started.elapsed() < Duration::from_millis(2000));
    assert_eq!(env.hits(EMB), 5, "one embedding for this request");
    assert_eq!(lookups(&env, "always", "miss").await, 4.0);
}

#[tokio::test]
async fn cache_off_makes_no_embedding_call() {
    let yaml = config("lastResort", 300).replace("mode: lastResort", "mode: off");
    let env = start(&yaml, MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("Paris."));
    let r = ask(&env, STORED).await;
    assert_eq!(r.status, 200);
    env.mock.set_behaviour("m-a", down());
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 503);
    assert_eq!(env.hits(EMB), 0);
    assert_eq!(env.metric("sidetrack_cache_vectors").await, 0.0);
}

#[tokio::test]
async fn a_match_whose_answer_was_evicted_is_a_miss_and_leaves_the_index() {
    // maxBytes lets the store hold one short answer beside nothing much else; the index (bounded
    // by maxEntries) still holds the evicted answer's question until a lookup finds it.
    let yaml = config("lastResort", 2000).replace(
        "  mode: lastResort\n",
        "  mode: lastResort\n  maxBytes: 1024\n",
    );
    let env = start(&yaml, MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("Paris."));
    ask(&env, STORED).await;
    wait_vectors(&env, 1.0).await;
    env.mock.set_behaviour("m-a", reply(&"lava ".repeat(120)));
    let r = ask(&env, FAR).await;
    assert_eq!(r.status, 200);
    wait_vectors(&env, 2.0).await;
    assert_eq!(
        env.metric("sidetrack_cache_entries").await,
        1.0,
        "the long answer evicted the first"
    );
    env.mock.set_behaviour("m-a", down());
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    assert_eq!(lookups(&env, "lastResort", "miss").await, 1.0);
    assert_eq!(
        env.metric("sidetrack_cache_vectors").await,
        1.0,
        "the stale question was dropped"
    );
}

#[tokio::test]
async fn the_index_is_bounded_by_max_entries() {
    let yaml = config("lastResort", 2000).replace(
        "  mode: lastResort\n",
        "  mode: lastResort\n  maxEntries: 1\n",
    );
    let env = start(&yaml, MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("Paris."));
    ask(&env, STORED).await;
    wait_vectors(&env, 1.0).await;
    ask(&env, FAR).await;
    env.mock.set_behaviour("m-a", down());
    // Once the second question's vector is in (a near form of it hits)...
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = ask(&env, "how do volcanoes form under the oceans").await;
        if r.header("x-sidetrack-cache") == Some("semantic-hit") {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "the second question never matched"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...the index holds one question: the first one went when the second came.
    assert_eq!(env.metric("sidetrack_cache_vectors").await, 1.0);
    assert_eq!(env.metric("sidetrack_cache_entries").await, 1.0);
    let r = ask(&env, NEAR).await;
    assert_eq!(r.status, 503, "the first question is gone: {}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
}
