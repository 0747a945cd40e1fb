//! SPEC §14 "Token limits": an OpenAI chat stream whose caller did not ask for usage is still
//! metered — the gateway asks the upstream for the usage chunk and keeps it from the caller — so
//! `tokensPerMinute` holds, and the routing log has the upstream's numbers.
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, start};
use serde_json::json;
use sidetrack_mock::{Behaviour, UsageConfig};

const CONFIG: &str = r#"
auth:
  keys:
    - { principal: metered, key: k-metered, limits: { tokensPerMinute: 1000 } }
    - { principal: free, key: k-free }
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
"#;

fn big() -> Behaviour {
    Behaviour {
        usage: Some(UsageConfig {
            prompt_tokens: 300,
            completion_tokens: 200,
        }),
        stream_chunks: Some(3),
        ..Behaviour::default()
    }
}

fn data_events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn a_stream_without_include_usage_is_metered_and_the_caller_gets_no_usage_chunk() {
    let env = start(CONFIG, behaviours(&[("m-big", big())])).await;
    let auth = [("authorization", "Bearer k-metered")];
    let req =
        json!({"model": "m-big", "stream": true, "messages": [{"role": "user", "content": "hi"}]});

    let r = env.post("/v1/chat/completions", req.clone(), &auth).await;
    assert_eq!(r.status, 200);
    assert!(r.body.ends_with("data: [DONE]\n\n"));
    let events = data_events(&r.body);
    assert!(
        events
            .iter()
            .all(|e| !e["choices"].as_array().unwrap().is_empty()),
        "no `choices: []` chunk for a caller that did not ask: {}",
        r.body
    );
    assert!(events
        .iter()
        .all(|e| e.get("usage").is_none_or(|u| u.is_null())));
    assert_eq!(common::streamed_text(&r.body), "hello from m-big");
    // The upstream was asked for usage, and the routing log has its numbers.
    let sent = env.mock.last_request("m-big").unwrap();
    assert_eq!(
        sent["body"]["stream_options"],
        json!({"include_usage": true})
    );
    let rec = env.record(1).await;
    let usage = rec.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (300, 200));

    // 500 tokens used of 1,000 a minute: one more fits, the third is refused.
    assert_eq!(
        env.post("/v1/chat/completions", req.clone(), &auth)
            .await
            .status,
        200
    );
    let r = env.post("/v1/chat/completions", req, &auth).await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.header("retry-after").is_some());
}

#[tokio::test]
async fn a_caller_that_asks_for_usage_gets_the_chunk_unchanged() {
    let env = start(CONFIG, behaviours(&[("m-big", big())])).await;
    let auth = [("authorization", "Bearer k-free")];
    for options in [
        json!({"include_usage": true}),
        json!({"include_usage": false}),
        json!({}),
    ] {
        let asked = options["include_usage"] == json!(true);
        let req = json!({"model": "m-big", "stream": true, "stream_options": options,
                         "messages": [{"role": "user", "content": "hi"}]});
        let r = env.post("/v1/chat/completions", req, &auth).await;
        assert_eq!(r.status, 200);
        let events = data_events(&r.body);
        let usage_chunks: Vec<_> = events
            .iter()
            .filter(|e| e["choices"].as_array().unwrap().is_empty())
            .collect();
        if asked {
            assert_eq!(usage_chunks.len(), 1, "{}", r.body);
            assert_eq!(usage_chunks[0]["usage"]["prompt_tokens"], 300);
        } else {
            assert!(usage_chunks.is_empty(), "{options}: {}", r.body);
        }
        // Whatever the caller wrote, the upstream was asked.
        let sent = env.mock.last_request("m-big").unwrap();
        assert_eq!(
            sent["body"]["stream_options"]["include_usage"], true,
            "{options}"
        );
        env.mock.reset();
    }
}
