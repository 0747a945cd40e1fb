//! Issue 14, must-show 1: for every caller dialect × every provider kind, streamed and not, the
//! usage the caller's official SDK reports equals the upstream's, and so does the routing record's.
//!
//! One Python process per caller dialect runs every provider kind (a comma-separated model list);
//! every cell gets its own usage numbers (input 123+i, output 45+i) so a mix-up between cells, or
//! between input and output, cannot pass. The whole table is printed, then every failing cell is
//! named.
#![allow(clippy::unwrap_used)]

mod common;

use std::fmt::Write as _;
use std::time::Duration;

use common::{behaviours, run_sdk, run_sdk_env, self_signed_cert, start, Env};
use serde_json::Value;
use sidetrack_mock::{Behaviour, UsageConfig};

/// The caller dialects sidetrack serves (SPEC §3), each driven by the SDK its callers use.
#[derive(Clone, Copy, Debug)]
enum Caller {
    OpenAiChat,
    OpenAiResponses,
    AnthropicMessages,
    BedrockConverse,
    BedrockInvoke,
    Gemini,
}

const CALLERS: [Caller; 6] = [
    Caller::OpenAiChat,
    Caller::OpenAiResponses,
    Caller::AnthropicMessages,
    Caller::BedrockConverse,
    Caller::BedrockInvoke,
    Caller::Gemini,
];

/// Provider kind → the model its target serves.
const PROVIDERS: [(&str, &str); 4] = [
    ("openai", "gpt-usage"),
    ("anthropic", "claude-usage"),
    ("bedrock", "us.anthropic.usage-v1:0"),
    ("gemini", "gemini-usage"),
];

const TARGETS: &str = r#"
auth:
  keys:
    - { principal: sdk, key: sk-test }
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", apiKey: k, models: ["gpt-*"] }
  - { name: ant, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: k, models: ["us.*"] }
  - { name: gem, provider: gemini, baseUrl: "${MOCK}", apiKey: k, models: ["gemini-*"] }
"#;

/// (input, output) as the caller's client reported it, or what was wrong with the report.
type Reported = Result<(u64, u64), String>;

/// What the SDK script reported for one model: (non-streamed, streamed).
/// `input_up_front`: the upstream's own stream states the input tokens at its start.
fn reported(caller: Caller, cell: &Value, input_up_front: bool) -> (Reported, Reported) {
    let pair = |u: &Value, i: &str, o: &str| -> Reported {
        match (u[i].as_u64(), u[o].as_u64()) {
            (Some(i), Some(o)) => Ok((i, o)),
            _ => Err(format!("no {i}/{o} in {u}")),
        }
    };
    let one = |list: &Value, what: &str| -> Result<Value, String> {
        match list.as_array().map(Vec::as_slice) {
            Some([only]) if !only.is_null() => Ok(only.clone()),
            _ => Err(format!("expected one {what}, got {list}")),
        }
    };
    let (complete, stream) = (&cell["complete"], &cell["stream"]);
    match caller {
        Caller::OpenAiChat => (
            total_agrees(complete, "input", "output", "total")
                .and_then(|()| pair(complete, "input", "output")),
            one(stream, "usage chunk").and_then(|u| {
                if u["choices"] != 0 {
                    return Err(format!("usage on a chunk with choices: {u}"));
                }
                total_agrees(&u, "input", "output", "total")?;
                pair(&u, "input", "output")
            }),
        ),
        Caller::OpenAiResponses => (
            total_agrees(complete, "input", "output", "total")
                .and_then(|()| pair(complete, "input", "output")),
            one(stream, "response.completed usage").and_then(|u| {
                total_agrees(&u, "input", "output", "total")?;
                pair(&u, "input", "output")
            }),
        ),
        Caller::AnthropicMessages => (
            pair(complete, "input", "output"),
            anthropic_stream(stream, input_up_front),
        ),
        Caller::BedrockConverse => (
            total_agrees(complete, "inputTokens", "outputTokens", "totalTokens")
                .and_then(|()| pair(complete, "inputTokens", "outputTokens")),
            one(stream, "metadata usage").and_then(|u| {
                total_agrees(&u, "inputTokens", "outputTokens", "totalTokens")?;
                pair(&u, "inputTokens", "outputTokens")
            }),
        ),
        Caller::BedrockInvoke => (
            // InvokeModel also states the counts in headers (boto3: ResponseMetadata.HTTPHeaders).
            pair(complete, "input_tokens", "output_tokens").and_then(|body| {
                let h = &cell["headers"];
                let header = pair(
                    h,
                    "x-amzn-bedrock-input-token-count",
                    "x-amzn-bedrock-output-token-count",
                );
                match header {
                    Ok(header) if header == body => Ok(body),
                    _ => Err(format!("body usage {body:?}, token-count headers {h}")),
                }
            }),
            invoke_stream(stream, input_up_front),
        ),
        // Every chunk carries usageMetadata; the one with the finish reason has the final counts.
        Caller::Gemini => (
            total_agrees(complete, "input", "output", "total")
                .and_then(|()| pair(complete, "input", "output")),
            stream
                .as_array()
                .and_then(|c| c.iter().find(|u| !u["finish"].is_null()))
                .ok_or_else(|| format!("no chunk with a finish reason: {stream}"))
                .and_then(|u| {
                    total_agrees(u, "input", "output", "total")?;
                    pair(u, "input", "output")
                }),
        ),
    }
}

fn total_agrees(u: &Value, i: &str, o: &str, t: &str) -> Result<(), String> {
    let sum = u[i].as_u64().unwrap_or(0) + u[o].as_u64().unwrap_or(0);
    if u[t].as_u64() == Some(sum) {
        Ok(())
    } else {
        Err(format!("{t} is not {i} + {o}: {u}"))
    }
}

/// Anthropic-form stream usage (Messages, and the InvokeModel chunks) read as the `anthropic` SDK
/// accumulates it: input from `message_start`, replaced by the last `message_delta`'s
/// `input_tokens` when it has one; output from the last `message_delta` (cumulative).
///
/// `message_start` must carry the exact input when the upstream's own stream reports it up front
/// (Anthropic Messages, Bedrock InvokeModel); an upstream that reports input only at its end
/// (OpenAI chat's usage chunk, ConverseStream's `metadata`) cannot be known then without holding
/// back the whole stream, so `message_start` says 0 and `message_delta` carries the input
/// (docs/translation.md, "Usage").
fn anthropic_usage(
    starts: &Value,
    deltas: &Value,
    input_up_front: bool,
    i: &str,
    o: &str,
) -> Reported {
    let start_in = starts
        .as_array()
        .and_then(|s| s.first())
        .map(|s| s[i].as_u64());
    let last = deltas.as_array().and_then(|d| d.last());
    let (Some(Some(start_in)), Some(last)) = (start_in, last) else {
        return Err(format!(
            "no message_start/message_delta usage: {starts} {deltas}"
        ));
    };
    let Some(output) = last[o].as_u64() else {
        return Err(format!("no output in message_delta: {deltas}"));
    };
    let input = last[i].as_u64().unwrap_or(start_in);
    let start_want = if input_up_front { input } else { 0 };
    if start_in != start_want {
        return Err(format!(
            "message_start input {start_in}, expected {start_want} (message_delta {deltas})"
        ));
    }
    Ok((input, output))
}

/// The `anthropic` SDK's final message usage, which must be what its events say.
fn anthropic_stream(s: &Value, input_up_front: bool) -> Reported {
    let from_events = anthropic_usage(
        &s["message_start"],
        &s["message_delta"],
        input_up_front,
        "input",
        "output",
    )?;
    let last = &s["final"];
    let final_usage = (last["input"].as_u64(), last["output"].as_u64());
    if final_usage != (Some(from_events.0), Some(from_events.1)) {
        return Err(format!(
            "final message usage {last}, events {from_events:?}"
        ));
    }
    Ok(from_events)
}

/// InvokeModelWithResponseStream: the Anthropic events' usage, and the final `message_stop`
/// chunk's `amazon-bedrock-invocationMetrics` must say the same.
fn invoke_stream(s: &Value, input_up_front: bool) -> Reported {
    let (i, o) = anthropic_usage(
        &s["message_start"],
        &s["message_delta"],
        input_up_front,
        "input_tokens",
        "output_tokens",
    )?;
    let metrics = &s["invocation_metrics"];
    let agrees = metrics.as_array().is_some_and(|m| {
        m.len() == 1
            && m[0]["inputTokenCount"].as_u64() == Some(i)
            && m[0]["outputTokenCount"].as_u64() == Some(o)
    });
    if !agrees || s["last"] != "message_stop" {
        return Err(format!(
            "({i}, {o}) but invocationMetrics {metrics} (last chunk {})",
            s["last"]
        ));
    }
    Ok((i, o))
}

/// Runs the caller's SDK over every provider kind; returns its JSON report keyed by model.
async fn drive(caller: Caller, env: &Env, cert: &str) -> Value {
    let base = env.gw.base_url();
    let models = PROVIDERS.map(|(_, m)| m).join(",");
    let https = format!("https://localhost:{}", env.gw.addr.port());
    let token = [("AWS_BEARER_TOKEN_BEDROCK", "sk-test")];
    match caller {
        Caller::OpenAiChat => run_sdk("openai_chat.py", &["usage_matrix", &base, &models]).await,
        Caller::OpenAiResponses => {
            run_sdk("openai_responses.py", &["usage_matrix", &base, &models]).await
        }
        Caller::AnthropicMessages => {
            run_sdk(
                "anthropic_messages.py",
                &["usage_matrix", &base, &models, "bearer", "sk-test"],
            )
            .await
        }
        Caller::BedrockConverse => {
            let args = ["converse_usage", &https, cert, &models];
            run_sdk_env("bedrock_runtime.py", &args, &token).await
        }
        Caller::BedrockInvoke => {
            let args = ["invoke_usage", &https, cert, &models];
            run_sdk_env("bedrock_runtime.py", &args, &token).await
        }
        Caller::Gemini => {
            run_sdk(
                "gemini_genai.py",
                &["usage_matrix", &base, "sk-test", &models],
            )
            .await
        }
    }
}

/// The routing record's usage for `model`, streamed or not.
fn record_usage(env: &Env, model: &str, streamed: bool) -> Option<(u64, u64)> {
    let recs = env.log.records();
    let rec = recs
        .iter()
        .find(|r| r.requested_model.as_deref() == Some(model) && r.streamed == streamed)?;
    rec.usage
        .as_ref()
        .map(|u| (u.input_tokens, u.output_tokens))
}

#[tokio::test]
async fn every_caller_dialect_reports_the_upstreams_usage_from_every_provider_kind() {
    let (cert, key) = self_signed_cert("usage-matrix");
    let tls = format!("server: {{ tls: {{ certFile: \"{cert}\", keyFile: \"{key}\" }} }}\n");
    let mut table = String::from(
        "caller \\ provider  | mode     | upstream   | client     | record     | ok\n",
    );
    let mut failures = Vec::new();
    for (c, caller) in CALLERS.into_iter().enumerate() {
        let expected = |p: usize| {
            let i = (c * PROVIDERS.len() + p) as u64;
            (123 + i, 45 + i)
        };
        let models: Vec<(&str, Behaviour)> = PROVIDERS
            .iter()
            .enumerate()
            .map(|(p, (_, model))| {
                let (prompt_tokens, completion_tokens) = expected(p);
                let usage = UsageConfig {
                    prompt_tokens,
                    completion_tokens,
                };
                let b = Behaviour {
                    usage: Some(usage),
                    stream_chunks: Some(3),
                    ..Behaviour::default()
                };
                (*model, b)
            })
            .collect();
        let bedrock = matches!(caller, Caller::BedrockConverse | Caller::BedrockInvoke);
        let yaml = if bedrock {
            format!("{tls}{TARGETS}")
        } else {
            TARGETS.to_owned()
        };
        let env = start(&yaml, behaviours(&models)).await;
        let report = drive(caller, &env, &cert).await;
        // Two records per model: the non-streamed call and the stream.
        env.log
            .wait_for(2 * PROVIDERS.len(), Duration::from_secs(10))
            .await;
        for (p, (kind, model)) in PROVIDERS.iter().enumerate() {
            let want = expected(p);
            // The upstream speaks Anthropic Messages, or (to an InvokeModel caller) Bedrock
            // InvokeModel: its stream states the input in `message_start`.
            // A Gemini upstream's first chunk has the prompt count too.
            let input_up_front = *kind == "anthropic"
                || *kind == "gemini"
                || (*kind == "bedrock" && matches!(caller, Caller::BedrockInvoke));
            let (complete, streamed) = reported(caller, &report[*model], input_up_front);
            for (mode, got, is_stream) in
                [("complete", complete, false), ("stream", streamed, true)]
            {
                let record = record_usage(&env, model, is_stream);
                let ok = got.as_ref() == Ok(&want) && record == Some(want);
                let client = match &got {
                    Ok(u) => format!("{u:?}"),
                    Err(_) => "bad".to_owned(),
                };
                writeln!(
                    table,
                    "{:<28} | {mode:<8} | {:<10} | {client:<10} | {:<10} | {}",
                    format!("{caller:?}/{kind}"),
                    format!("{want:?}"),
                    record.map_or("none".to_owned(), |r| format!("{r:?}")),
                    if ok { "ok" } else { "FAIL" }
                )
                .unwrap();
                if !ok {
                    failures.push(format!(
                        "{caller:?} × {kind} ({mode}): upstream {want:?}, client {got:?}, record {record:?}"
                    ));
                }
            }
        }
    }
    eprintln!("{table}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
