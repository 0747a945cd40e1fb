//! The real-client matrix (issue 14): client libraries nobody here wrote — the Node `openai` SDK
//! (Chat Completions and Responses), the Node `@anthropic-ai/sdk` (Messages), Python LangChain
//! (`ChatOpenAI`, `ChatAnthropic`) and the Vercel AI SDK (`ai` with `@ai-sdk/openai` chat and
//! responses, `@ai-sdk/anthropic`) — streamed and not, each through a cross-provider fallback whose
//! serving hop is on every provider kind in turn. One process per client library runs all its
//! cases (tests/clients/) and prints one JSON document; each row is asserted here by name: the
//! text, the finish reason as the library reports it, the tool call, the usage the mock upstream
//! was configured to report, and the routing record (and served-by header where the library
//! exposes it) showing the fallback hop served.
//!
//! Node clients come from `tests/clients/node_modules` (`npm ci` there, done by `bash .ci/run`);
//! `SIDETRACK_NODE` picks the node binary (default `node` on PATH). LangChain comes from the
//! Python of the SDK tests (`SIDETRACK_PYTHON` or `.venv`).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;

use common::{start, Env};
use serde_json::{json, Value};
use sidetrack_mock::MockConfig;

/// One rule per provider kind of the serving hop; the primary is on another provider and answers
/// 503. A caller's model `via-KIND-…` names its case, so each routing record is found by it.
const CONFIG: &str = r#"
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", apiKey: k-oai }
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k-claude }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: k-aws }
rules:
  - name: to-openai
    priority: 1
    matchModels: ["via-openai-*"]
    routeToTarget:
      staticRoute: { target: claude, model: claude-down }
      fallback: { targetFallback: [ { target: oai, model: gpt-up } ] }
  - name: to-anthropic
    priority: 2
    matchModels: ["via-anthropic-*"]
    routeToTarget:
      staticRoute: { target: oai, model: gpt-down }
      fallback: { targetFallback: [ { target: claude, model: claude-up } ] }
  - name: to-bedrock
    priority: 3
    matchModels: ["via-bedrock-*"]
    routeToTarget:
      staticRoute: { target: claude, model: claude-down }
      fallback: { targetFallback: [ { target: aws, model: "us.anthropic.claude-up-v1:0" } ] }
"#;

/// What the serving hop of each provider kind answers: (kind, served-by, reply, input, output).
const UPSTREAMS: [(&str, &str, &str, u64, u64); 3] = [
    (
        "openai",
        "oai/gpt-up",
        "Sunny in Paris, says OpenAI.",
        21,
        13,
    ),
    (
        "anthropic",
        "claude/claude-up",
        "Sunny in Paris, says Claude.",
        31,
        17,
    ),
    (
        "bedrock",
        "aws/us.anthropic.claude-up-v1:0",
        "Sunny in Paris, says Bedrock.",
        41,
        19,
    ),
];

fn mock() -> MockConfig {
    let mut models = serde_json::Map::new();
    models.insert("gpt-down".into(), json!({"status": 503}));
    models.insert("claude-down".into(), json!({"status": 503}));
    for (_, served_by, reply, input, output) in UPSTREAMS {
        let model = served_by.split_once('/').unwrap().1;
        models.insert(
            model.into(),
            json!({
                "reply": reply,
                "streamChunks": 3,
                "usage": {"promptTokens": input, "completionTokens": output},
                "toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"celsius\"}"},
            }),
        );
    }
    serde_json::from_value(json!({ "models": models })).unwrap()
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `tests/clients/<script>` with `args`; returns its one JSON document.
async fn run_client(program: PathBuf, script: &str, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(&program)
        .arg(repo().join("tests/clients").join(script))
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e} (set SIDETRACK_NODE / SIDETRACK_PYTHON, or run `bash .ci/run`)",
                program.display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ERR_MODULE_NOT_FOUND") && !stderr.contains("ModuleNotFoundError"),
        "{script}: the real clients are not installed: run `bash .ci/run` once \
         (npm ci in tests/clients, pip install -r tests/sdk/requirements.txt)\n{stderr}"
    );
    assert!(
        out.status.success(),
        "{script} failed: {}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    let mut doc: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("bad {script} output {stdout}: {e}\nstderr: {stderr}"));
    // Kept for the failure message: what the library warned about.
    doc["stderr"] = json!(stderr);
    doc
}

/// The node binary (`SIDETRACK_NODE`, default `node` on PATH), after checking the clients are
/// installed where the scripts import them from.
fn node() -> PathBuf {
    let modules = repo().join("tests/clients/node_modules");
    assert!(
        ["openai", "@anthropic-ai/sdk", "ai", "@ai-sdk/openai", "@ai-sdk/anthropic"]
            .iter()
            .all(|m| modules.join(m).exists()),
        "the real-client tests need the Node SDKs in {}: run `bash .ci/run` once (npm ci in tests/clients)",
        modules.display()
    );
    std::env::var_os("SIDETRACK_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}

/// What one case must report: by the case's kind, and whether it offered a tool.
struct Expect {
    /// The finish reason the library reports for a text answer and for a tool call.
    finish: (&'static str, &'static str),
    /// Cases (by mode) that offered a tool.
    tool_modes: &'static [&'static str],
    /// Every case reports the served-by header (false: only the routing record shows it).
    header_modes: &'static [&'static str],
}

/// Asserts every row of `out` (and that it has exactly `cases` rows), and the routing record of
/// each: the fallback hop served, and its usage is the upstream's.
async fn assert_rows(env: &Env, out: &Value, cases: usize, expect: &Expect) {
    let rows = out["cases"].as_array().unwrap();
    assert_eq!(rows.len(), cases, "{out:#}");
    let records = env
        .log
        .wait_for(cases, std::time::Duration::from_secs(10))
        .await;
    let mut failures = Vec::new();
    for row in rows {
        let name = row["case"].as_str().unwrap();
        if let Err(e) = check_row(row, &records, expect) {
            failures.push(format!("{name}: {e}\n    row: {row}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}\nclient stderr:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n"),
        out["stderr"].as_str().unwrap_or_default()
    );
}

fn check_row(
    row: &Value,
    records: &[sidetrack_gateway::observe::RoutingRecord],
    expect: &Expect,
) -> Result<(), String> {
    fn same(what: &str, got: &Value, want: Value) -> Result<(), String> {
        if *got == want {
            Ok(())
        } else {
            Err(format!("{what}: got {got}, want {want}"))
        }
    }
    if !row["error"].is_null() {
        return Err(format!("the client raised {}", row["error"]));
    }
    let kind = row["kind"].as_str().unwrap();
    let mode = row["case"].as_str().unwrap().split('/').nth(1).unwrap();
    let model = row["model"].as_str().unwrap();
    let (_, served_by, reply, input, output) = UPSTREAMS.into_iter().find(|u| u.0 == kind).unwrap();
    let tool = expect.tool_modes.contains(&mode);
    if tool {
        same("finish", &row["finish"], json!(expect.finish.1))?;
        same(
            "tool",
            &row["tool"],
            json!({"name": "get_weather", "args": {"city": "Paris", "unit": "celsius"}}),
        )?;
        if !(row["text"].is_null() || row["text"] == json!("")) {
            return Err(format!("text beside the tool call: {}", row["text"]));
        }
    } else {
        same("finish", &row["finish"], json!(expect.finish.0))?;
        if !row["tool"].is_null() {
            return Err(format!("a tool call in a text answer: {}", row["tool"]));
        }
        same("text", &row["text"], json!(reply))?;
    }
    same(
        "usage (client)",
        &row["usage"],
        json!({"input": input, "output": output}),
    )?;
    if expect.header_modes.contains(&mode) {
        same("x-sidetrack-served-by", &row["served_by"], json!(served_by))?;
    }
    if let Some(n) = row.get("usage_chunks") {
        same("usage chunks", n, json!(1))?;
    }
    let rec = records
        .iter()
        .find(|r| r.requested_model.as_deref() == Some(model))
        .ok_or_else(|| format!("no routing record for model {model}"))?;
    let got = rec
        .served_by
        .as_ref()
        .map(|s| format!("{}/{}", s.target, s.model));
    if got.as_deref() != Some(served_by) || rec.fallback_hop != Some(1) {
        return Err(format!(
            "routing record: served by {got:?} at hop {:?}, want {served_by} at hop 1",
            rec.fallback_hop
        ));
    }
    let usage = rec
        .usage
        .as_ref()
        .map(|u| (u.input_tokens, u.output_tokens));
    if usage != Some((input, output)) {
        return Err(format!(
            "routing record usage {usage:?}, want {:?}",
            (input, output)
        ));
    }
    Ok(())
}

#[tokio::test]
async fn node_openai_sdk_chat_and_responses_through_a_fallback_to_every_provider_kind() {
    let node = node();
    let env = start(CONFIG, mock()).await;
    let out = run_client(node, "openai.mjs", &[&env.gw.base_url()]).await;
    let expect = Expect {
        finish: ("stop", "tool_calls"),
        tool_modes: &["tool", "stream_tool"],
        header_modes: &["complete", "stream", "tool"],
    };
    // Chat finish reasons; the Responses rows report `status`, checked apart below.
    let (chat, responses): (Vec<Value>, Vec<Value>) = out["cases"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .partition(|r| r["case"].as_str().unwrap().starts_with("openai-chat/"));
    assert_eq!((chat.len(), responses.len()), (12, 12), "{out:#}");
    assert_rows(
        &env,
        &json!({ "cases": chat, "stderr": out["stderr"] }),
        12,
        &expect,
    )
    .await;
    let expect = Expect {
        finish: ("completed", "completed"),
        ..expect
    };
    assert_rows(
        &env,
        &json!({ "cases": responses, "stderr": out["stderr"] }),
        12,
        &expect,
    )
    .await;
}

#[tokio::test]
async fn node_anthropic_sdk_messages_through_a_fallback_to_every_provider_kind() {
    let node = node();
    let env = start(CONFIG, mock()).await;
    let out = run_client(node, "anthropic.mjs", &[&env.gw.base_url()]).await;
    let expect = Expect {
        finish: ("end_turn", "tool_use"),
        tool_modes: &["tool", "stream_tool"],
        header_modes: &["complete", "stream", "tool", "stream_tool"],
    };
    assert_rows(&env, &out, 12, &expect).await;
}

#[tokio::test]
async fn langchain_chat_openai_through_a_fallback_to_every_provider_kind() {
    let env = start(CONFIG, mock()).await;
    let base = env.gw.base_url();
    let out = run_client(common::python(), "langchain_chat.py", &["openai", &base]).await;
    let expect = Expect {
        finish: ("stop", "tool_calls"),
        tool_modes: &["tool", "stream_tool"],
        header_modes: &["complete", "stream", "tool", "stream_tool"],
    };
    assert_rows(&env, &out, 12, &expect).await;
}

#[tokio::test]
async fn langchain_chat_anthropic_through_a_fallback_to_every_provider_kind() {
    let env = start(CONFIG, mock()).await;
    let base = env.gw.base_url();
    let out = run_client(common::python(), "langchain_chat.py", &["anthropic", &base]).await;
    let expect = Expect {
        finish: ("end_turn", "tool_use"),
        tool_modes: &["tool", "stream_tool"],
        header_modes: &[],
    };
    assert_rows(&env, &out, 12, &expect).await;
}

#[tokio::test]
async fn vercel_ai_sdk_openai_chat_responses_and_anthropic_through_a_fallback_to_every_provider_kind(
) {
    let node = node();
    let env = start(CONFIG, mock()).await;
    let out = run_client(node, "ai_sdk.mjs", &[&env.gw.base_url()]).await;
    let expect = Expect {
        finish: ("stop", "tool-calls"),
        tool_modes: &["tool", "stream_tool"],
        header_modes: &["complete", "stream", "tool", "stream_tool"],
    };
    assert_rows(&env, &out, 36, &expect).await;
}
