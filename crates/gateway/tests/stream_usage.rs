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

/// The chunks of an OpenAI chat stream with `choices: []`: the usage chunk.
fn usage_chunks(body: &str) -> Vec<serde_json::Value> {
    data_events(body)
        .into_iter()
        .filter(|e| e["choices"].as_array().unwrap().is_empty())
        .collect()
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
        let usage_chunks = usage_chunks(&r.body);
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

const TRANSLATED: &str = r#"
auth:
  keys:
    - { principal: free, key: k-free }
    - { principal: sdk, key: sk-test }
targets:
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"] }
"#;

/// SPEC §5.7: a translated OpenAI chat stream (here from an Anthropic upstream) carries the
/// `choices: []` usage chunk when, and only when, the caller asked with
/// `stream_options.include_usage: true` — OpenAI's own `chunk.choices[0]` would fail on it.
#[tokio::test]
async fn a_translated_chat_stream_has_the_usage_chunk_only_when_the_caller_asked() {
    let env = start(TRANSLATED, behaviours(&[("claude-big", big())])).await;
    let auth = [("authorization", "Bearer k-free")];
    for options in [
        Some(json!({"include_usage": true})),
        Some(json!({"include_usage": false})),
        Some(json!({})),
        None,
    ] {
        let asked = options
            .as_ref()
            .is_some_and(|o| o["include_usage"] == json!(true));
        let mut req = json!({"model": "claude-big", "stream": true,
                             "messages": [{"role": "user", "content": "hi"}]});
        if let Some(o) = &options {
            req["stream_options"] = o.clone();
        }
        let r = env.post("/v1/chat/completions", req, &auth).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(r.body.ends_with("data: [DONE]\n\n"), "{}", r.body);
        assert_eq!(common::streamed_text(&r.body), "hello from claude-big");
        let usage_chunks = usage_chunks(&r.body);
        if asked {
            assert_eq!(usage_chunks.len(), 1, "{}", r.body);
            assert_eq!(usage_chunks[0]["usage"]["prompt_tokens"], 300);
            assert_eq!(usage_chunks[0]["usage"]["completion_tokens"], 200);
        } else {
            assert!(usage_chunks.is_empty(), "{options:?}: {}", r.body);
        }
        let sent = env.mock.last_request("claude-big").unwrap();
        assert_eq!(sent["path"], "/v1/messages", "translated: {sent}");
        env.mock.reset();
    }
    // Usage is still recorded for the stream where the caller did not ask.
    let rec = env.record(4).await;
    let usage = rec.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (300, 200));
}

/// A translated tool-call answer opens like OpenAI's: `{"role":"assistant","content":null}`, and
/// no chunk carries an empty text (the Vercel AI SDK would make an empty text part of it).
#[tokio::test]
async fn a_translated_tool_call_stream_opens_with_null_content() {
    let tool = Behaviour {
        tool_call: Some(sidetrack_mock::ToolCallConfig {
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
        }),
        ..Behaviour::default()
    };
    let env = start(TRANSLATED, behaviours(&[("claude-tool", tool)])).await;
    let auth = [("authorization", "Bearer k-free")];
    let req = json!({"model": "claude-tool", "stream": true,
        "messages": [{"role": "user", "content": "weather?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]});
    let r = env.post("/v1/chat/completions", req, &auth).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let events = data_events(&r.body);
    let first = &events[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant", "{}", r.body);
    assert!(
        first.get("content").is_some_and(serde_json::Value::is_null),
        "{}",
        r.body
    );
    assert!(
        events
            .iter()
            .all(|e| e["choices"][0]["delta"]["content"] != json!("")),
        "{}",
        r.body
    );
    let call = events
        .iter()
        .find_map(|e| e["choices"][0]["delta"]["tool_calls"][0]["function"]["name"].as_str());
    assert_eq!(call, Some("get_weather"), "{}", r.body);
    assert!(
        r.body.contains("\"finish_reason\":\"tool_calls\""),
        "{}",
        r.body
    );
}

/// The official OpenAI Python SDK against a translated (Anthropic upstream) stream: its own
/// streaming example (`chunk.choices[0]` on every chunk) runs through without asking for usage,
/// and asking gets exactly one usage chunk with the upstream's numbers.
#[tokio::test]
async fn the_openai_sdk_reads_a_translated_stream_with_and_without_include_usage() {
    let env = start(TRANSLATED, behaviours(&[("claude-big", big())])).await;
    let base = env.gw.base_url();
    let out = common::run_sdk("openai_chat.py", &["stream_example", &base, "claude-big"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from claude-big", "{out}");
    let out = common::run_sdk("openai_chat.py", &["stream_usage", &base, "claude-big"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from claude-big", "{out}");
    assert_eq!(
        out["usage_chunks"],
        json!([{"prompt_tokens": 300, "completion_tokens": 200}]),
        "{out}"
    );
}
