//! Issue 14: Bedrock streams across dialects — the usage of a ConverseStream upstream reaches every
//! caller dialect, and a connection lost mid-stream reaches a Bedrock caller as the documented
//! `modelStreamErrorException` whatever the upstream speaks.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sidetrack_dialects::bedrock::eventstream::{Frame, FrameDecoder};
use sidetrack_mock::config::UsageConfig;
use sidetrack_mock::Behaviour;

use common::{behaviours, start, Env};

const CONFIG: &str = r#"
targets:
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: bedrock-key, models: ["us.*"] }
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["gpt-*"] }
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"] }
"#;

const CONVERSE_MODEL: &str = "us.anthropic.usage-v1:0";

fn fixed_usage() -> Behaviour {
    Behaviour {
        reply: Some("one two three".into()),
        usage: Some(UsageConfig {
            prompt_tokens: 17,
            completion_tokens: 9,
        }),
        ..Behaviour::default()
    }
}

/// The raw bytes of a POST (an event stream is not text).
async fn post_raw(env: &Env, path: &str, body: Value) -> (u16, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("{}{path}", env.gw.base_url()))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

fn frames(bytes: &[u8]) -> Vec<Frame> {
    FrameDecoder::new().push(bytes).unwrap()
}

/// The `data:` JSON of each SSE event.
fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// The (input, output) tokens a caller's stream reports.
fn reported_usage(caller: &str, body: &[u8]) -> Option<(u64, u64)> {
    let pair = |u: &Value, i: &str, o: &str| Some((u[i].as_u64()?, u[o].as_u64()?));
    match caller {
        "openai-chat" => {
            let text = String::from_utf8_lossy(body);
            let usage: Vec<Value> = sse_data(&text)
                .into_iter()
                .filter(|v| v["usage"].is_object())
                .collect();
            assert!(usage.len() <= 1, "one usage chunk: {text}");
            let u = usage.first()?;
            assert_eq!(u["choices"], json!([]), "the usage chunk has no choices");
            pair(&u["usage"], "prompt_tokens", "completion_tokens")
        }
        "openai-responses" => {
            let text = String::from_utf8_lossy(body);
            let done = sse_data(&text)
                .into_iter()
                .find(|v| v["type"] == "response.completed")?;
            pair(&done["response"]["usage"], "input_tokens", "output_tokens")
        }
        "anthropic-messages" => {
            let text = String::from_utf8_lossy(body);
            let delta = sse_data(&text)
                .into_iter()
                .find(|v| v["type"] == "message_delta")?;
            pair(&delta["usage"], "input_tokens", "output_tokens")
        }
        "bedrock-converse" => {
            let f = frames(body)
                .into_iter()
                .find(|f| f.event_type.as_deref() == Some("metadata"))?;
            let v: Value = serde_json::from_slice(&f.payload).unwrap();
            pair(&v["usage"], "inputTokens", "outputTokens")
        }
        other => panic!("no reader for {other}"),
    }
}

/// Each caller dialect streams from a Bedrock ConverseStream upstream and reports the upstream's
/// usage (the invoke caller is covered in the pipe's unit tests: against a Bedrock destination it
/// is passed through to InvokeModelWithResponseStream, never translated from ConverseStream).
#[tokio::test]
async fn every_caller_dialect_reports_the_usage_of_a_converse_stream_upstream() {
    let env = start(CONFIG, behaviours(&[(CONVERSE_MODEL, fixed_usage())])).await;
    let messages = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            "openai-chat",
            "/v1/chat/completions".to_owned(),
            json!({"model": CONVERSE_MODEL, "stream": true, "messages": messages,
                   "stream_options": {"include_usage": true}}),
        ),
        (
            "openai-responses",
            "/v1/responses".to_owned(),
            json!({"model": CONVERSE_MODEL, "stream": true, "input": "hi"}),
        ),
        (
            "anthropic-messages",
            "/v1/messages".to_owned(),
            json!({"model": CONVERSE_MODEL, "stream": true, "max_tokens": 64, "messages": messages}),
        ),
        (
            "bedrock-converse",
            format!("/model/{CONVERSE_MODEL}/converse-stream"),
            json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
        ),
    ];
    for (n, (caller, path, body)) in cases.into_iter().enumerate() {
        let (status, bytes) = post_raw(&env, &path, body).await;
        assert_eq!(status, 200, "{caller}: {}", String::from_utf8_lossy(&bytes));
        let sent = env.mock.last_request(CONVERSE_MODEL).unwrap();
        assert!(
            sent["path"].as_str().unwrap().ends_with("/converse-stream"),
            "{caller}: the upstream speaks ConverseStream: {sent}"
        );
        assert_eq!(
            reported_usage(caller, &bytes),
            Some((17, 9)),
            "{caller}: {}",
            String::from_utf8_lossy(&bytes)
        );
        let rec = env.record(n + 1).await;
        let usage = rec.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (17, 9),
            "{caller}"
        );
    }
}

/// The mock's `message_delta` now carries `input_tokens` as the real API does (issue 14); the
/// gateway's Anthropic decoder reads both, so a translated caller and the routing log get them.
#[tokio::test]
async fn an_anthropic_upstreams_message_delta_usage_reaches_a_translated_caller() {
    let env = start(CONFIG, behaviours(&[("claude-usage", fixed_usage())])).await;
    let (status, bytes) = post_raw(
        &env,
        "/v1/chat/completions",
        json!({"model": "claude-usage", "stream": true, "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(reported_usage("openai-chat", &bytes), Some((17, 9)));
    let usage = env.record(1).await.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (17, 9));
}

/// A connection lost mid-stream ends a Bedrock caller's translated stream with the documented
/// `modelStreamErrorException` (wire-formats.md §2.4, SPEC §5.6), as on the same-dialect path.
#[tokio::test]
async fn a_connection_lost_mid_stream_reaches_a_bedrock_caller_as_model_stream_error() {
    let cut = Behaviour {
        reply: Some("one two three four".into()),
        stream_chunks: Some(4),
        drop_after_chunks: Some(2),
        ..Behaviour::default()
    };
    let env = start(
        CONFIG,
        behaviours(&[("gpt-cut", cut.clone()), ("us.anthropic.cut-v1:0", cut)]),
    )
    .await;
    let converse = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    let invoke = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                        "messages": [{"role": "user", "content": "hi"}]});
    for (model, operation, body) in [
        ("gpt-cut", "converse-stream", &converse),
        ("gpt-cut", "invoke-with-response-stream", &invoke),
        // The same-dialect path, for comparison.
        ("us.anthropic.cut-v1:0", "converse-stream", &converse),
    ] {
        let (status, bytes) =
            post_raw(&env, &format!("/model/{model}/{operation}"), body.clone()).await;
        assert_eq!(status, 200, "{model} {operation}");
        let got = frames(&bytes);
        assert!(
            got.iter().any(|f| f.message_type == "event"),
            "{model} {operation}: content came first"
        );
        let last = got.last().unwrap();
        assert_eq!(last.message_type, "exception", "{model} {operation}");
        assert_eq!(
            last.exception_type.as_deref(),
            Some("modelStreamErrorException"),
            "{model} {operation}: {:?}",
            String::from_utf8_lossy(&last.payload)
        );
    }
}
