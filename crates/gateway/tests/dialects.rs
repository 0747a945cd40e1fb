//! Issue 4 "must show": every caller dialect through the official SDKs, the three provider kinds,
//! and fallbacks that cross providers with the caller still getting its own dialect.
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, run_sdk, run_sdk_env, start, status, Env};
use sidetrack_mock::{Behaviour, MockConfig};

fn late_error(after: usize, error_type: &str) -> Behaviour {
    Behaviour {
        reply: Some("one two three four".into()),
        stream_chunks: Some(4),
        stream_error_after_chunks: Some(after),
        stream_error_type: Some(error_type.into()),
        ..Behaviour::default()
    }
}

const ANTHROPIC: &str = r#"
auth:
  keys:
    - { principal: app, key: sk-ant-test }
targets:
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: upstream-key, models: ["claude-*"] }
"#;

#[tokio::test]
async fn anthropic_sdk_messages_and_streams_with_both_auth_styles() {
    let env = start(ANTHROPIC, MockConfig::default()).await;
    let base = env.gw.base_url();
    for style in ["bearer", "x-api-key"] {
        let out = run_sdk(
            "anthropic_messages.py",
            &["message", &base, "claude-x", style, "sk-ant-test"],
        )
        .await;
        assert_eq!(out["error"], serde_json::Value::Null, "{style}: {out}");
        assert_eq!(out["text"], "hello from claude-x");
        assert_eq!(out["stop_reason"], "end_turn");
        let out = run_sdk(
            "anthropic_messages.py",
            &["stream", &base, "claude-x", style, "sk-ant-test"],
        )
        .await;
        assert_eq!(out["error"], serde_json::Value::Null, "{style}: {out}");
        assert_eq!(out["text"], "hello from claude-x");
    }
    assert_eq!(env.hits("claude-x"), 4);
    let sent = env.mock.last_request("claude-x").unwrap();
    assert_eq!(
        sent["auth"], "x-api-key",
        "upstream gets the target's key as x-api-key: {sent}"
    );
    let rec = env.record(1).await;
    assert_eq!(
        (rec.dialect, &*rec.principal),
        ("anthropic-messages", "app")
    );
    // A wrong key is refused in Anthropic's shape.
    let out = run_sdk(
        "anthropic_messages.py",
        &["message", &base, "claude-x", "bearer", "wrong"],
    )
    .await;
    assert_eq!(out["error"]["class"], "AuthenticationError", "{out}");
}

#[tokio::test]
async fn anthropic_sdk_sees_rate_limits_and_mid_stream_errors_as_its_own_errors() {
    let env = start(
        ANTHROPIC,
        behaviours(&[
            ("claude-limited", status(429)),
            ("claude-late", late_error(2, "overloaded_error")),
        ]),
    )
    .await;
    let base = env.gw.base_url();
    let out = run_sdk(
        "anthropic_messages.py",
        &["message", &base, "claude-limited", "bearer", "sk-ant-test"],
    )
    .await;
    assert_eq!(out["error"]["class"], "RateLimitError", "{out}");
    assert_eq!(out["error"]["status"], 429);
    let out = run_sdk(
        "anthropic_messages.py",
        &["stream", &base, "claude-late", "bearer", "sk-ant-test"],
    )
    .await;
    assert_eq!(out["error"]["class"], "APIStatusError", "{out}");
    assert_eq!(
        out["error"]["status"], 200,
        "raised from an in-stream error event"
    );
    assert_eq!(
        out["text"], "one two t",
        "the two chunks sent before the error reached the caller"
    );
    assert!(env.record(2).await.mid_stream_error);
}

#[tokio::test]
async fn openai_sdk_responses_create_plain_and_streamed() {
    let yaml = r#"
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["gpt-*"] }
"#;
    let env = start(yaml, MockConfig::default()).await;
    let base = env.gw.base_url();
    let out = run_sdk("openai_responses.py", &["create", &base, "gpt-r"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from gpt-r");
    assert_eq!(out["status"], "completed");
    let out = run_sdk("openai_responses.py", &["stream", &base, "gpt-r"]).await;
    assert_eq!(out["text"], "hello from gpt-r", "{out}");
    let events: Vec<&str> = out["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    let sent = env.mock.last_request("gpt-r").unwrap();
    assert_eq!(
        sent["path"], "/v1/responses",
        "same dialect: passed through to /responses"
    );
    assert_eq!(env.record(1).await.dialect, "openai-responses");
}

const CROSS: &str = r#"
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["gpt-*"] }
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: bedrock-key, models: ["us.*"] }
rules:
  - name: openai-to-anthropic
    priority: 1
    matchModels: ["chat"]
    routeToTarget:
      staticRoute: { target: oai, model: gpt-down }
      fallback: { targetFallback: [ { target: claude, model: claude-up } ] }
  - name: anthropic-to-bedrock
    priority: 2
    matchModels: ["claude-main"]
    routeToTarget:
      staticRoute: { target: claude, model: claude-down }
      fallback: { targetFallback: [ { target: aws, model: "us.anthropic.claude-haiku-4-5-v1:0" } ] }
"#;

fn cross_mock() -> MockConfig {
    behaviours(&[("gpt-down", status(503)), ("claude-down", status(503))])
}

#[tokio::test]
async fn openai_caller_falls_back_to_an_anthropic_destination_and_gets_openai_shapes() {
    let env = start(CROSS, cross_mock()).await;
    let base = env.gw.base_url();
    let out = run_sdk("openai_chat.py", &["complete", &base, "chat"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from claude-up");
    assert_eq!(out["served_by"], "claude/claude-up");
    let out = run_sdk("openai_chat.py", &["stream", &base, "chat"]).await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from claude-up");
    assert_eq!((env.hits("gpt-down"), env.hits("claude-up")), (2, 2));
    let sent = env.mock.last_request("claude-up").unwrap();
    assert_eq!(
        sent["path"], "/v1/messages",
        "translated into an Anthropic request"
    );
    assert_eq!(sent["body"]["messages"][0]["role"], "user");
    assert!(
        sent["body"]["max_tokens"].as_u64().is_some(),
        "Anthropic needs max_tokens: {sent}"
    );
    let rec = env.record(2).await;
    assert_eq!(Env::route(&rec), ["oai/gpt-down", "claude/claude-up"]);
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert!(
        rec.usage.is_some_and(|u| u.output_tokens > 0),
        "usage survives translation: {rec:?}"
    );
}

#[tokio::test]
async fn anthropic_caller_falls_back_to_a_bedrock_destination_and_gets_anthropic_shapes() {
    let env = start(CROSS, cross_mock()).await;
    let base = env.gw.base_url();
    let out = run_sdk(
        "anthropic_messages.py",
        &["message", &base, "claude-main", "bearer", "any"],
    )
    .await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from us.anthropic.claude-haiku-4-5-v1:0");
    let out = run_sdk(
        "anthropic_messages.py",
        &["stream", &base, "claude-main", "bearer", "any"],
    )
    .await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from us.anthropic.claude-haiku-4-5-v1:0");
    assert_eq!(out["stop_reason"], "end_turn");
    let sent = env
        .mock
        .last_request("us.anthropic.claude-haiku-4-5-v1:0")
        .unwrap();
    assert!(
        sent["path"].as_str().unwrap().ends_with("/converse-stream"),
        "{sent}"
    );
    assert!(
        sent["path"].as_str().unwrap().contains("%3A"),
        "model id encoded in the path: {sent}"
    );
    assert_eq!(sent["auth"], "bearer");
    assert_eq!(
        (
            env.hits("claude-down"),
            env.hits("us.anthropic.claude-haiku-4-5-v1:0")
        ),
        (2, 2)
    );
}

#[tokio::test]
async fn a_tool_request_skips_a_destination_without_tools() {
    let yaml = r#"
targets:
  - { name: plain, provider: openai, baseUrl: "${MOCK}/v1", capabilities: { tools: false } }
  - { name: tooled, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, capabilities: { tools: true } }
rules:
  - name: tools
    priority: 1
    routeToTarget:
      staticRoute: { target: plain, model: m-plain }
      fallback: { targetFallback: [ { target: tooled, model: m-tools } ] }
"#;
    let tool = Behaviour {
        tool_call: Some(
            serde_json::from_value(
                serde_json::json!({"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
            )
            .unwrap(),
        ),
        ..Behaviour::default()
    };
    let env = start(yaml, behaviours(&[("m-tools", tool)])).await;
    let body = serde_json::json!({
        "model": "anything",
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    });
    let r = env.post("/v1/chat/completions", body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather", "{}", r.body);
    assert_eq!(call["function"]["arguments"], "{\"city\":\"Paris\"}");
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls");
    let rec = env.record(1).await;
    assert_eq!(rec.skipped.len(), 1);
    assert_eq!(
        (&*rec.skipped[0].target, rec.skipped[0].why.as_str()),
        ("plain", "INELIGIBLE:tools")
    );
    assert_eq!(Env::route(&rec), ["tooled/m-tools"]);
    assert_eq!((env.hits("m-plain"), env.hits("m-tools")), (0, 1));
    assert_eq!(
        env.breaker("plain", "m-plain").await,
        "CLOSED",
        "ineligible is not a failure"
    );
}

/// A self-signed certificate for `localhost`, written to a temp dir: (cert path, key path).
fn self_signed() -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("sidetrack-boto3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c.display().to_string(), k.display().to_string())
}

#[tokio::test]
async fn boto3_over_tls_with_a_bearer_token_invokes_converses_and_streams() {
    let (cert, key) = self_signed();
    let yaml = format!(
        r#"
server: {{ tls: {{ certFile: "{cert}", keyFile: "{key}" }} }}
auth:
  keys:
    - {{ principal: aws-app, key: bedrock-gateway-key }}
targets:
  - {{ name: aws, provider: bedrock, baseUrl: "${{MOCK}}", region: us-east-1, apiKey: upstream-key, models: ["us.*"] }}
"#
    );
    let env = start(
        &yaml,
        behaviours(&[
            ("us.anthropic.throttled-v1:0", status(429)),
            (
                "us.anthropic.cut-v1:0",
                Behaviour {
                    stream_chunks: Some(4),
                    drop_after_chunks: Some(2),
                    ..Behaviour::default()
                },
            ),
        ]),
    )
    .await;
    let endpoint = format!("https://localhost:{}", env.gw.addr.port());
    let token = [("AWS_BEARER_TOKEN_BEDROCK", "bedrock-gateway-key")];
    let model = "us.anthropic.claude-haiku-4-5-v1:0";
    for mode in ["invoke", "invoke_stream", "converse", "converse_stream"] {
        let out = run_sdk_env(
            "bedrock_runtime.py",
            &[mode, &endpoint, &cert, model],
            &token,
        )
        .await;
        assert_eq!(out["error"], serde_json::Value::Null, "{mode}: {out}");
        assert_eq!(out["text"], format!("hello from {model}"), "{mode}: {out}");
    }
    assert_eq!(env.hits(model), 4);
    assert_eq!(
        &*env.record(1).await.principal,
        "aws-app",
        "the bearer token authenticated the caller"
    );

    let out = run_sdk_env(
        "bedrock_runtime.py",
        &["converse", &endpoint, &cert, "us.anthropic.throttled-v1:0"],
        &token,
    )
    .await;
    assert_eq!(out["error"]["code"], "ThrottlingException", "{out}");
    assert_eq!(
        out["error"]["modeled"], true,
        "client.exceptions.ThrottlingException"
    );
    let out = run_sdk_env(
        "bedrock_runtime.py",
        &["converse_stream", &endpoint, &cert, "us.anthropic.cut-v1:0"],
        &token,
    )
    .await;
    assert_eq!(out["error"]["class"], "EventStreamError", "{out}");
    assert_eq!(out["error"]["code"], "modelStreamErrorException");

    let wrong = [("AWS_BEARER_TOKEN_BEDROCK", "nope")];
    let out = run_sdk_env(
        "bedrock_runtime.py",
        &["converse", &endpoint, &cert, model],
        &wrong,
    )
    .await;
    assert_eq!(out["error"]["code"], "AccessDeniedException", "{out}");
}
