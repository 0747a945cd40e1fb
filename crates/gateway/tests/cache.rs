//! Issue 17 / SPEC §12: the response store's exact keys, `lastResort` and `always`, against the
//! real mock provider and a real gateway: hits after every provider goes down (whole and streamed,
//! across dialects), misses with the walk's error and Retry-After, no-store, scope, TTL, and the
//! chaos run of must-show 2.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{down, reply, run_sdk, start, streamed_text, Env, Reply};
use serde_json::{json, Value};
use sidetrack_mock::{Behaviour, MockConfig};

/// Two providers in one chain: an OpenAI target (`m-a`) and its Anthropic fallback (`m-b`).
fn config(cache: &str) -> String {
    format!(
        r#"
targets:
  - {{ name: oai, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["m-*"] }}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["m-*"] }}
{cache}
rules:
  - name: r
    priority: 1
    matchModels: ["m"]
    routeToTarget:
      staticRoute: {{ target: oai, model: m-a }}
      fallback:
        targetFallback:
          - {{ target: claude, model: m-b }}
"#
    )
}

const LAST_RESORT: &str = "cache:\n  mode: lastResort\n";

/// Every provider answers 503 from now on.
fn all_down(env: &Env) {
    env.mock.set_behaviour("m-a", down());
    env.mock.set_behaviour("m-b", down());
}

fn question(q: &str, stream: bool) -> Value {
    json!({"model": "m", "max_tokens": 64, "stream": stream,
           "messages": [{"role": "user", "content": q}]})
}

async fn ask(env: &Env, q: &str, stream: bool, headers: &[(&str, &str)]) -> Reply {
    env.post("/v1/chat/completions", question(q, stream), headers)
        .await
}

/// The text of an answer, whole or streamed.
fn text(r: &Reply, stream: bool) -> String {
    if stream {
        streamed_text(&r.body)
    } else {
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

fn assert_hit(r: &Reply) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), Some("hit"));
    assert_eq!(r.header("x-sidetrack-served-by"), Some("cache"));
}

#[tokio::test]
async fn last_resort_answers_whole_and_streamed_after_every_provider_goes_down() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("the whole answer"));
    let r = ask(&env, "whole?", false, &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-cache"), None, "not from the store");
    env.mock.set_behaviour("m-a", reply("the streamed answer"));
    let r = ask(&env, "streamed?", true, &[]).await;
    assert_eq!(streamed_text(&r.body), "the streamed answer");
    env.record(2).await; // the streamed answer is kept when its body ends
    all_down(&env);

    for (q, want) in [
        ("whole?", "the whole answer"),
        ("streamed?", "the streamed answer"),
    ] {
        for stream in [false, true] {
            let r = ask(&env, q, stream, &[]).await;
            assert_hit(&r);
            assert_eq!(text(&r, stream), want, "{q} stream={stream}");
            if stream {
                assert!(r.body.ends_with("data: [DONE]\n\n"), "{}", r.body);
                assert_eq!(r.header("content-type"), Some("text/event-stream"));
            }
        }
    }
    let rec = env.record(3).await;
    assert_eq!(rec.reason, "servedFromCache");
    assert_eq!(rec.outcome, "SERVED");
    assert_eq!(rec.status, 200);
    assert_eq!(rec.attempts.len(), 2, "the walk ran first: both hops tried");
    assert_eq!(
        env.metric(r#"sidetrack_cache_lookups_total{mode="lastResort",result="hit"}"#)
            .await,
        4.0
    );
    assert_eq!(env.metric("sidetrack_cache_entries").await, 2.0);
    assert_eq!(
        env.metric(
            r#"sidetrack_requests_total{dialect="openai-chat",rule="r",status_class="2xx",reason="servedFromCache"}"#
        )
        .await,
        4.0
    );
}

#[tokio::test]
async fn a_question_stored_through_openai_is_a_hit_through_anthropic() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("stored via chat"));
    // The Anthropic SDK script asks `hi` with max_tokens 64: the same canonical question.
    let r = ask(&env, "hi", false, &[]).await;
    assert_eq!(r.status, 200);
    all_down(&env);

    let r = env
        .post(
            "/v1/messages",
            json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
            &[("anthropic-version", "2023-06-01")],
        )
        .await;
    assert_hit(&r);
    assert_eq!(r.json()["content"][0]["text"], "stored via chat");
    assert_eq!(r.json()["type"], "message");

    let base = env.gw.base_url();
    for mode in ["message", "stream"] {
        let out = run_sdk("anthropic_messages.py", &[mode, &base, "m", "bearer", "k"]).await;
        assert_eq!(out["error"], Value::Null, "{mode}: {out}");
        assert_eq!(out["text"], "stored via chat", "{mode}: {out}");
        assert_eq!(out["stop_reason"], "end_turn", "{mode}: {out}");
    }
    let rec = env.record(4).await;
    assert_eq!(
        (rec.dialect, rec.reason.as_ref()),
        ("anthropic-messages", "servedFromCache")
    );
}

#[tokio::test]
async fn a_miss_returns_the_walks_error_with_retry_after() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    all_down(&env);
    for stream in [false, true] {
        let r = ask(&env, "never asked before", stream, &[]).await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.header("x-sidetrack-cache"), None);
        assert_eq!(r.header("retry-after"), Some("7"));
        assert_eq!(r.header("x-should-retry"), Some("false"));
    }
    assert_eq!(env.record(1).await.reason, "chainExhausted");
    assert_eq!(
        env.metric(r#"sidetrack_cache_lookups_total{mode="lastResort",result="miss"}"#)
            .await,
        2.0
    );
}

#[tokio::test]
async fn always_answers_a_hit_without_an_upstream_call() {
    let env = start(&config("cache:\n  mode: always\n"), MockConfig::default()).await;
    let first = ask(&env, "once", false, &[]).await;
    assert_eq!(first.status, 200);
    assert_eq!(env.mock.hits("m-a"), 1);
    for stream in [false, true] {
        let r = ask(&env, "once", stream, &[]).await;
        assert_hit(&r);
        assert_eq!(text(&r, stream), "hello from m-a");
    }
    assert_eq!(env.mock.hits("m-a"), 1, "hits made no upstream call");
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "servedFromCache");
    assert!(rec.attempts.is_empty());
    // A different question still walks.
    assert_eq!(ask(&env, "twice", false, &[]).await.status, 200);
    assert_eq!(env.mock.hits("m-a"), 2);
}

#[tokio::test]
async fn a_rule_turns_the_store_on_for_its_requests() {
    let yaml = config("").replace(
        "    matchModels: [\"m\"]\n",
        "    matchModels: [\"m\"]\n    cache: { mode: always }\n",
    );
    let env = start(&yaml, MockConfig::default()).await;
    ask(&env, "q", false, &[]).await;
    assert_hit(&ask(&env, "q", false, &[]).await);
    assert_eq!(env.mock.hits("m-a"), 1);
}

#[tokio::test]
async fn a_callers_400_does_not_fall_through_to_the_store() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    assert_eq!(ask(&env, "q", false, &[]).await.status, 200);
    env.mock.set_behaviour(
        "m-a",
        Behaviour {
            status: Some(400),
            ..Behaviour::default()
        },
    );
    let r = ask(&env, "q", false, &[]).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-cache"), None);
    assert_eq!(env.mock.hits("m-b"), 0, "a 400 is no trigger");
}

#[tokio::test]
async fn no_store_is_neither_stored_nor_served() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    let no_store = [("cache-control", "no-cache, no-store")];
    assert_eq!(ask(&env, "secret", false, &no_store).await.status, 200);
    assert_eq!(ask(&env, "kept", false, &[]).await.status, 200);
    all_down(&env);
    assert_eq!(
        ask(&env, "secret", false, &[]).await.status,
        503,
        "no-store kept nothing"
    );
    assert_eq!(
        ask(&env, "kept", false, &[("x-sidetrack-cache", "off")])
            .await
            .status,
        503,
        "x-sidetrack-cache: off serves nothing"
    );
    assert_eq!(
        ask(&env, "kept", false, &[("cache-control", "no-store")])
            .await
            .status,
        503
    );
    assert_hit(&ask(&env, "kept", false, &[]).await);
    assert_eq!(
        env.metric(r#"sidetrack_cache_lookups_total{mode="lastResort",result="bypass"}"#)
            .await,
        2.0
    );
}

#[tokio::test]
async fn scope_principal_never_crosses_principals() {
    let auth = "auth:\n  keys:\n    - { principal: alice, key: key-a }\n    - { principal: bob, key: key-b }\n";
    for (scope, bob_sees_it) in [("principal", false), ("shared", true)] {
        let yaml = format!(
            "{auth}{}",
            config(&format!("{LAST_RESORT}  scope: {scope}\n"))
        );
        let env = start(&yaml, MockConfig::default()).await;
        let alice = [("authorization", "Bearer key-a")];
        let bob = [("authorization", "Bearer key-b")];
        assert_eq!(ask(&env, "mine", false, &alice).await.status, 200);
        all_down(&env);
        let r = ask(&env, "mine", false, &bob).await;
        assert_eq!(r.status == 200, bob_sees_it, "scope {scope}: {}", r.body);
        assert_hit(&ask(&env, "mine", false, &alice).await);
    }
}

#[tokio::test]
async fn an_answer_expires_at_its_ttl() {
    let env = start(
        &config("cache:\n  mode: lastResort\n  ttlMilliseconds: 1000\n"),
        MockConfig::default(),
    )
    .await;
    let stored = Instant::now();
    assert_eq!(ask(&env, "soon stale", false, &[]).await.status, 200);
    all_down(&env);
    assert_hit(&ask(&env, "soon stale", false, &[]).await);
    // A bounded poll: the entry must be gone after its TTL and before the deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = ask(&env, "soon stale", false, &[]).await;
        if r.status == 503 {
            assert!(stored.elapsed() >= Duration::from_millis(1000));
            break;
        }
        assert_hit(&r);
        assert!(Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_answer_cut_mid_stream_is_not_stored() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    env.mock.set_behaviour(
        "m-a",
        Behaviour {
            stream_error_after_chunks: Some(2),
            ..Behaviour::default()
        },
    );
    let r = ask(&env, "cut", true, &[]).await;
    assert_eq!(r.status, 200, "committed, then the error event");
    env.record(1).await;
    all_down(&env);
    assert_eq!(ask(&env, "cut", false, &[]).await.status, 503);
}

/// Must show 2: 200 requests over 50 distinct questions, every provider down for the second
/// half: every question seen in the first half is answered from the store (with its own answer);
/// novel ones get the walk's error with Retry-After.
#[tokio::test]
async fn chaos_every_seen_question_is_answered_from_the_store() {
    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    let seen = 30;
    for i in 0..100 {
        let q = i % seen;
        env.mock.set_behaviour("m-a", reply(&format!("answer {q}")));
        let stream = i % 2 == 1;
        let r = ask(&env, &format!("question {q}"), stream, &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(text(&r, stream), format!("answer {q}"));
        env.record(i + 1).await;
    }
    all_down(&env);
    let (mut hits, mut misses) = (0, 0);
    for i in 100..200 {
        let q = i % 50;
        let stream = i % 3 == 0;
        let r = ask(&env, &format!("question {q}"), stream, &[]).await;
        if q < seen {
            assert_hit(&r);
            assert_eq!(text(&r, stream), format!("answer {q}"));
            hits += 1;
        } else {
            assert_eq!(r.status, 503, "novel question {q}: {}", r.body);
            assert!(r.header("retry-after").is_some(), "novel question {q}");
            misses += 1;
        }
    }
    assert_eq!((hits, misses), (60, 40));
    assert_eq!(env.metric("sidetrack_cache_entries").await, 30.0);
}

/// A Bedrock caller that asked for a stream gets the stored answer as an event stream (binary
/// frames, each with its CRCs), read back here by the gateway's own ConverseStream decoder.
#[tokio::test]
async fn a_bedrock_stream_caller_gets_an_event_stream_hit() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use sidetrack_dialects::collect::Collector;
    use sidetrack_dialects::Dialect;

    let env = start(&config(LAST_RESORT), MockConfig::default()).await;
    env.mock.set_behaviour("m-a", reply("framed answer"));
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    all_down(&env);

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    let req = http::Request::post(format!("{}/model/m/converse-stream", env.gw.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-sidetrack-cache"], "hit");
    assert_eq!(
        resp.headers()["content-type"],
        "application/vnd.amazon.eventstream"
    );
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let mut decoder = Dialect::BedrockConverse.stream_decoder();
    let mut collector = Collector::new(1 << 20);
    for ev in decoder.push(&bytes).into_iter().chain(decoder.finish()) {
        collector.push(&ev);
    }
    assert!(!decoder.failed(), "well-framed");
    let answer = collector.finish().expect("a whole answer with its stop");
    assert_eq!(
        answer.content,
        vec![sidetrack_dialects::canonical::Part::Text(
            "framed answer".into()
        )]
    );
}
