//! Issue 18, SPEC §13 `provider: vertex`: the service-account token flow against the mock's
//! token endpoint (one token request for many calls, refresh before expiry, a token-endpoint
//! failure is a CONNECTION_ERROR of that attempt and the walk falls back), Anthropic models on
//! Vertex (`rawPredict` / `streamRawPredict`) for Anthropic and OpenAI SDK callers with the
//! upstream's usage, a bearer token from the environment, Gemini models on Vertex
//! (`generateContent` / `streamGenerateContent` under `publishers/google`) for OpenAI and Gemini
//! callers, and config checks.
//!
//! The service account's key is a throwaway RSA key made for these tests only
//! (`tests/fixtures/vertex-test-key.pem`); it grants nothing anywhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sidetrack_config::{Config, ProviderKind, VertexAuth};
use sidetrack_gateway::Clock;
use sidetrack_mock::config::UsageConfig;
use sidetrack_mock::{Behaviour, MockConfig, TokenSettings};

use common::{behaviours, run_sdk, start_tuned, status, Env};

const KEY_PEM: &str = include_str!("fixtures/vertex-test-key.pem");

/// The fixture key's public half, as the mock takes it (base64 of the PKCS#1 DER).
fn public_key() -> String {
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from_pem_slice(KEY_PEM.as_bytes()).unwrap();
    let pair = ring::signature::RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
    base64::engine::general_purpose::STANDARD.encode(pair.public().as_ref())
}

/// A service-account JSON file for the fixture key (its `token_uri` is pointed at the mock when
/// the gateway starts, see [`start`]).
fn service_account_file(tag: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "sidetrack-vertex-{}-{tag}.json",
        std::process::id()
    ));
    let sa = json!({
        "type": "service_account",
        "project_id": "test-proj",
        "private_key_id": "test",
        "private_key": KEY_PEM,
        "client_email": "gateway@test-proj.iam.gserviceaccount.com",
        "token_uri": "http://127.0.0.1:9/token",
    });
    std::fs::write(&path, sa.to_string()).unwrap();
    path
}

fn vertex_target(credentials: &str) -> String {
    format!(
        r#"
  - name: vx
    provider: vertex
    baseUrl: "${{MOCK}}"
    project: test-proj
    region: us-east5
    {credentials}
    models: ["claude-*", "gemini-*"]"#
    )
}

/// The mock and a gateway; every service account's `token_uri` is the mock's `/token`.
async fn start(yaml: &str, mock: MockConfig) -> Env {
    let env = start_tuned(yaml, mock, Clock::real(), |cfg: &mut Config| {
        for t in &mut cfg.targets {
            if let Some(VertexAuth::ServiceAccount(sa)) = &mut t.vertex_auth {
                sa.token_uri = format!("{}/token", t.base_url);
            }
        }
    })
    .await;
    env.mock.set_token_settings(TokenSettings {
        public_key: Some(public_key()),
        ..TokenSettings::default()
    });
    env
}

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

fn message(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 32, "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn one_token_request_serves_twenty_concurrent_calls() {
    let sa = service_account_file("twenty");
    let yaml = format!(
        "targets:{}",
        vertex_target(&format!("credentials: {}", sa.display()))
    );
    let env = start(&yaml, MockConfig::default()).await;
    let calls = (0..20).map(|i| env.post("/v1/messages", message("claude-up", i % 2 == 0), &[]));
    let replies = futures_util::future::join_all(calls).await;
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert_eq!(env.mock.token_requests(), 1, "one token for twenty calls");
    assert_eq!(env.hits("claude-up"), 20);
    assert_eq!(env.mock.stats()["tokensIssued"], 1);
    // What Vertex was sent: the Anthropic body without `model`, with Vertex's version, the
    // issued bearer, at the model's rawPredict or streamRawPredict.
    let last = env.mock.last_request("claude-up").unwrap();
    let path = last["path"].as_str().unwrap();
    assert!(
        path.starts_with(
            "/v1/projects/test-proj/locations/us-east5/publishers/anthropic/models/claude-up:"
        ) && (path.ends_with(":rawPredict") || path.ends_with(":streamRawPredict")),
        "{path}"
    );
    assert!(last["body"].get("model").is_none());
    assert_eq!(last["body"]["anthropic_version"], "vertex-2023-10-16");
    let auth = last["headers"]["authorization"].as_str().unwrap();
    assert!(auth.starts_with("Bearer ya29.mock-"), "{auth}");
    // The streamed and unstreamed answers are Anthropic's, with the mock's text.
    let plain = replies.iter().find(|r| r.body.starts_with('{')).unwrap();
    assert_eq!(plain.json()["content"][0]["text"], "hello from claude-up");
    let streamed = replies.iter().find(|r| r.body.contains("event:")).unwrap();
    assert!(streamed.body.contains("message_stop"), "{}", streamed.body);
    let _ = std::fs::remove_file(sa);
}

#[tokio::test]
async fn the_token_is_refreshed_before_it_expires() {
    let sa = service_account_file("refresh");
    let yaml = format!(
        "targets:{}",
        vertex_target(&format!("credentials: {}", sa.display()))
    );
    let env = start(&yaml, MockConfig::default()).await;
    let ask = || env.post("/v1/messages", message("claude-up", false), &[]);
    // A token that lives no longer than the 5-minute margin is never reused.
    env.mock.set_token_settings(TokenSettings {
        expires_in: 300,
        public_key: Some(public_key()),
        ..TokenSettings::default()
    });
    assert_eq!(ask().await.status, 200);
    assert_eq!(ask().await.status, 200);
    assert_eq!(env.mock.token_requests(), 2, "each call refreshed");
    // 302 s: reusable for 2 s, then refreshed.
    env.mock.set_token_settings(TokenSettings {
        expires_in: 302,
        public_key: Some(public_key()),
        ..TokenSettings::default()
    });
    let fetched = Instant::now();
    assert_eq!(ask().await.status, 200);
    assert_eq!(ask().await.status, 200);
    assert!(
        fetched.elapsed() < Duration::from_secs(2),
        "too slow to tell"
    );
    assert_eq!(env.mock.token_requests(), 3, "reused within its life");
    tokio::time::sleep(Duration::from_millis(2100).saturating_sub(fetched.elapsed())).await;
    assert_eq!(ask().await.status, 200);
    assert_eq!(
        env.mock.token_requests(),
        4,
        "refreshed 300 s before expiry"
    );
    let _ = std::fs::remove_file(sa);
}

#[tokio::test]
async fn a_token_endpoint_failure_is_a_connection_error_and_the_walk_falls_back() {
    let sa = service_account_file("failure");
    let yaml = format!(
        r#"
targets:{}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["claude-*"] }}
rules:
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: {{ target: vx, model: claude-up }}
      fallback:
        targetFallback:
          - {{ target: claude, model: claude-up }}
"#,
        vertex_target(&format!("credentials: {}", sa.display()))
    );
    let env = start(&yaml, MockConfig::default()).await;
    let cases = [
        (
            TokenSettings {
                fail_status: Some(500),
                ..TokenSettings::default()
            },
            "500",
        ),
        (
            TokenSettings {
                bad_json: true,
                ..TokenSettings::default()
            },
            "non-JSON",
        ),
    ];
    for (n, (settings, says)) in cases.into_iter().enumerate() {
        env.mock.set_token_settings(settings);
        let r = env.post("/v1/messages", message("ask", false), &[]).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["content"][0]["text"], "hello from claude-up");
        let rec = env.record(n + 1).await;
        assert_eq!(Env::route(&rec), ["vx/claude-up", "claude/claude-up"]);
        assert_eq!(rec.attempts[0].error_kind, Some("CONNECTION_ERROR"));
        let detail = rec.attempts[0].detail.clone().unwrap();
        assert!(
            detail.starts_with("vertexToken") && detail.contains(says),
            "{detail}"
        );
        assert_eq!(rec.reason, "servedViaFallbackHop:1");
    }
    assert_eq!(env.mock.token_requests(), 2);
    assert_eq!(env.hits("claude-up"), 2, "Vertex itself was never called");
    // The endpoint recovers: the next request gets a token and is served by Vertex.
    env.mock.set_token_settings(TokenSettings::default());
    let r = env.post("/v1/messages", message("ask", false), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(Env::route(&env.record(3).await), ["vx/claude-up"]);
    let _ = std::fs::remove_file(sa);
}

#[tokio::test]
async fn an_unreachable_token_endpoint_is_a_connection_error() {
    let sa = service_account_file("unreachable");
    let yaml = format!(
        r#"
targets:{}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["claude-*"] }}
rules:
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: {{ target: vx, model: claude-up }}
      fallback:
        targetFallback:
          - {{ target: claude, model: claude-up }}
"#,
        vertex_target(&format!("credentials: {}", sa.display()))
    );
    let dead = common::dead_url();
    let env = start_tuned(&yaml, MockConfig::default(), Clock::real(), |cfg| {
        for t in &mut cfg.targets {
            if let Some(VertexAuth::ServiceAccount(sa)) = &mut t.vertex_auth {
                sa.token_uri = format!("{dead}/token");
            }
        }
    })
    .await;
    let r = env.post("/v1/messages", message("ask", true), &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["vx/claude-up", "claude/claude-up"]);
    assert_eq!(rec.attempts[0].error_kind, Some("CONNECTION_ERROR"));
    assert!(rec.attempts[0]
        .detail
        .as_deref()
        .unwrap()
        .starts_with("vertexToken: cannot reach"));
    let _ = std::fs::remove_file(sa);
}

/// The SDK callers' config: `claude-vx` is tried on Anthropic (503) and falls back to Vertex.
fn sdk_config(sa: &std::path::Path) -> String {
    format!(
        r#"
targets:{}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["claude-*"] }}
rules:
  - name: r
    priority: 10
    matchModels: ["claude-vx"]
    routeToTarget:
      staticRoute: {{ target: claude, model: claude-down }}
      fallback:
        targetFallback:
          - {{ target: vx, model: claude-up }}
"#,
        vertex_target(&format!("credentials: {}", sa.display()))
    )
}

#[tokio::test]
async fn anthropic_sdk_falls_back_from_anthropic_503_to_vertex_with_the_upstream_usage() {
    let sa = service_account_file("anthropic-sdk");
    let env = start(
        &sdk_config(&sa),
        behaviours(&[("claude-down", status(503)), ("claude-up", fixed_usage())]),
    )
    .await;
    let base = env.gw.base_url();
    let out = run_sdk(
        "anthropic_messages.py",
        &["usage_matrix", &base, "claude-vx", "bearer", "sk-test"],
    )
    .await;
    let m = &out["claude-vx"];
    assert_eq!(m["complete"], json!({"input": 17, "output": 9}));
    assert_eq!(m["stream"]["final"], json!({"input": 17, "output": 9}));
    for n in 1..=2 {
        let rec = env.record(n).await;
        assert_eq!(Env::route(&rec), ["claude/claude-down", "vx/claude-up"]);
        assert_eq!(rec.attempts[0].status, Some(503));
        let usage = rec.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (17, 9));
    }
    let paths: Vec<String> = env.mock.stats()["models"]["claude-up"]["endpoints"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert!(
        paths.iter().any(|p| p.ends_with(":rawPredict")),
        "{paths:?}"
    );
    assert!(
        paths.iter().any(|p| p.ends_with(":streamRawPredict")),
        "{paths:?}"
    );
    assert_eq!(env.mock.token_requests(), 1);
    let _ = std::fs::remove_file(sa);
}

#[tokio::test]
async fn openai_sdk_reaches_vertex_claude_translated() {
    let sa = service_account_file("openai-sdk");
    let yaml = format!(
        "targets:{}",
        vertex_target(&format!("credentials: {}", sa.display()))
    );
    let env = start(&yaml, behaviours(&[("claude-up", fixed_usage())])).await;
    let out = run_sdk(
        "openai_chat.py",
        &["usage_matrix", &env.gw.base_url(), "claude-up"],
    )
    .await;
    let m = &out["claude-up"];
    assert_eq!(
        m["complete"],
        json!({"input": 17, "output": 9, "total": 26})
    );
    assert_eq!(
        m["stream"],
        json!([{"input": 17, "output": 9, "total": 26, "choices": 0}])
    );
    let last = env.mock.last_request("claude-up").unwrap();
    assert_eq!(last["body"]["messages"][0]["role"], "user");
    assert!(last["body"].get("model").is_none());
    assert_eq!(last["body"]["anthropic_version"], "vertex-2023-10-16");
    let _ = std::fs::remove_file(sa);
}

#[tokio::test]
async fn an_access_token_from_the_environment_is_sent_as_the_bearer() {
    std::env::set_var("SIDETRACK_TEST_VERTEX_TOKEN", "static-vertex-token-1");
    let yaml = format!(
        "targets:{}",
        vertex_target("accessToken: env:SIDETRACK_TEST_VERTEX_TOKEN")
    );
    let env = start(&yaml, MockConfig::default()).await;
    env.mock.set_token_settings(TokenSettings {
        accept: vec!["static-vertex-token-1".into()],
        ..TokenSettings::default()
    });
    let r = env
        .post("/v1/messages", message("claude-up", true), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let last = env.mock.last_request("claude-up").unwrap();
    assert_eq!(
        last["headers"]["authorization"],
        "Bearer static-vertex-token-1"
    );
    assert_eq!(env.mock.token_requests(), 0);
    // A bearer the mock does not know is refused like Vertex refuses it.
    env.mock.set_token_settings(TokenSettings::default());
    let r = env
        .post("/v1/messages", message("claude-up", false), &[])
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
}

/// Gemini models on Vertex: `gpt-down` (503 on OpenAI) falls back to `vx/gemini-2.5-flash`;
/// `safety` is tried on OpenAI, then Vertex's Claude, then Vertex's Gemini.
fn gemini_config(credentials: &str) -> String {
    format!(
        r#"
targets:{}
  - {{ name: oai, provider: openai, baseUrl: "${{MOCK}}/v1", apiKey: k, models: ["gpt-*"] }}
rules:
  - name: r
    priority: 10
    matchModels: ["to-vx-gemini"]
    routeToTarget:
      staticRoute: {{ target: oai, model: gpt-down }}
      fallback:
        targetFallback:
          - {{ target: vx, model: gemini-2.5-flash }}
  - name: safety
    priority: 9
    matchModels: ["safety"]
    routeToTarget:
      staticRoute: {{ target: oai, model: gpt-up }}
      fallback:
        targetFallback:
          - {{ target: vx, model: claude-up }}
          - {{ target: vx, model: gemini-2.5-flash }}
"#,
        vertex_target(credentials)
    )
}

fn gemini_mock() -> MockConfig {
    behaviours(&[
        ("gpt-down", status(503)),
        ("gpt-up", fixed_usage()),
        ("claude-up", fixed_usage()),
        (
            "gemini-2.5-flash",
            Behaviour {
                reply: Some("from vertex gemini".into()),
                usage: Some(UsageConfig {
                    prompt_tokens: 23,
                    completion_tokens: 5,
                }),
                stream_chunks: Some(3),
                ..Behaviour::default()
            },
        ),
    ])
}

fn gen_body() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
           "generationConfig": {"maxOutputTokens": 64}})
}

/// The endpoints the mock counted for `model`.
fn endpoints(env: &Env, model: &str) -> Vec<String> {
    env.mock.stats()["models"][model]["endpoints"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

const GEMINI_PATH: &str =
    "/v1/projects/test-proj/locations/us-east5/publishers/google/models/gemini-2.5-flash";

#[tokio::test]
async fn openai_sdk_falls_back_from_openai_503_to_vertex_gemini_with_the_upstream_usage() {
    let sa = service_account_file("gemini-openai-sdk");
    let env = start(
        &gemini_config(&format!("credentials: {}", sa.display())),
        gemini_mock(),
    )
    .await;
    let out = run_sdk(
        "openai_chat.py",
        &["usage_matrix", &env.gw.base_url(), "to-vx-gemini"],
    )
    .await;
    let m = &out["to-vx-gemini"];
    assert_eq!(
        m["complete"],
        json!({"input": 23, "output": 5, "total": 28})
    );
    assert_eq!(
        m["stream"],
        json!([{"input": 23, "output": 5, "total": 28, "choices": 0}])
    );
    for n in 1..=2 {
        let rec = env.record(n).await;
        assert_eq!(Env::route(&rec), ["oai/gpt-down", "vx/gemini-2.5-flash"]);
        assert_eq!(rec.attempts[0].status, Some(503));
        let usage = rec.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (23, 5));
    }
    // Google's publisher path, the Gemini body translated from the chat request, the bearer
    // the token endpoint issued (one token for both calls).
    let mut paths = endpoints(&env, "gemini-2.5-flash");
    paths.sort();
    assert_eq!(
        paths,
        [
            format!("{GEMINI_PATH}:generateContent"),
            format!("{GEMINI_PATH}:streamGenerateContent"),
        ]
    );
    let seen = env.mock.last_request("gemini-2.5-flash").unwrap();
    assert_eq!(seen["query"], "alt=sse");
    assert_eq!(seen["auth"], "bearer");
    assert_eq!(seen["body"]["contents"][0]["role"], "user");
    assert_eq!(seen["body"]["contents"][0]["parts"][0]["text"], "hi");
    assert!(seen["body"].get("model").is_none(), "{seen}");
    assert!(seen["body"].get("anthropic_version").is_none(), "{seen}");
    assert_eq!(env.mock.token_requests(), 1);
    let _ = std::fs::remove_file(sa);
}

/// The same request straight to the mock's Vertex path (with the bearer it accepts).
async fn direct(mock_base: &str, op: &str, body: &Value) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::post(format!("{mock_base}{GEMINI_PATH}:{op}"))
        .header("authorization", "Bearer vx-token")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// Every `"responseId":"…"` (the mock's fresh id per answer) replaced by one placeholder.
fn without_response_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("\"responseId\":\"") {
        let (head, tail) = rest.split_at(i + "\"responseId\":\"".len());
        out.push_str(head);
        out.push_str("ID");
        rest = &tail[tail.find('"').unwrap()..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn a_gemini_caller_is_served_by_vertex_gemini_byte_for_byte() {
    std::env::set_var("SIDETRACK_TEST_VERTEX_GEMINI_TOKEN", "vx-token");
    let env = start(
        &gemini_config("accessToken: env:SIDETRACK_TEST_VERTEX_GEMINI_TOKEN"),
        gemini_mock(),
    )
    .await;
    env.mock.set_token_settings(TokenSettings {
        accept: vec!["vx-token".into()],
        ..TokenSettings::default()
    });
    let key = [("x-goog-api-key", "caller-key")];
    let r = env
        .post(
            "/v1beta/models/gemini-2.5-flash:generateContent",
            gen_body(),
            &key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "from vertex gemini"
    );
    assert_eq!(v["usageMetadata"]["promptTokenCount"], 23);
    assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 5);
    let seen = env.mock.last_request("gemini-2.5-flash").unwrap();
    assert_eq!(seen["path"], format!("{GEMINI_PATH}:generateContent"));
    assert_eq!(seen["body"], gen_body(), "the caller's body as sent");
    assert_eq!(seen["headers"]["authorization"], "Bearer vx-token");
    assert!(
        seen["headers"].get("x-goog-api-key").is_none(),
        "the caller's key is not forwarded: {seen}"
    );
    let rec = env.record(1).await;
    assert_eq!(rec.dialect, "gemini");
    assert_eq!(Env::route(&rec), ["vx/gemini-2.5-flash"]);
    // Byte-compatible: what Vertex answers, but for the per-answer id.
    let upstream = direct(&env.mock.base_url(), "generateContent", &gen_body()).await;
    assert_eq!(
        without_response_ids(&r.body),
        without_response_ids(&upstream)
    );

    let r = env
        .post(
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            gen_body(),
            &key,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let seen = env.mock.last_request("gemini-2.5-flash").unwrap();
    assert_eq!(seen["path"], format!("{GEMINI_PATH}:streamGenerateContent"));
    assert_eq!(seen["query"], "alt=sse");
    let chunks: Vec<Value> = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["promptTokenCount"], 23);
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 5);
    let upstream = direct(
        &env.mock.base_url(),
        "streamGenerateContent?alt=sse",
        &gen_body(),
    )
    .await;
    assert_eq!(
        without_response_ids(&r.body),
        without_response_ids(&upstream)
    );
    assert_eq!(env.mock.token_requests(), 0);
}

#[tokio::test]
async fn safety_settings_reach_vertex_gemini_and_skip_other_formats() {
    let sa = service_account_file("gemini-safety");
    let env = start(
        &gemini_config(&format!("credentials: {}", sa.display())),
        gemini_mock(),
    )
    .await;
    let mut body = gen_body();
    body["safetySettings"] =
        json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_LOW_AND_ABOVE"}]);
    let r = env
        .post(
            "/v1beta/models/safety:generateContent",
            body.clone(),
            &[("x-goog-api-key", "caller-key")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["candidates"][0]["content"]["parts"][0]["text"],
        "from vertex gemini"
    );
    let rec = env.record(1).await;
    let skips: Vec<String> = rec
        .skipped
        .iter()
        .map(|s| format!("{}/{} {}", s.target, s.model, s.why))
        .collect();
    // OpenAI and Vertex's Claude would get a translated body without the settings; Vertex's
    // Gemini takes the caller's format.
    assert_eq!(
        skips,
        [
            "oai/gpt-up INELIGIBLE:guardrail",
            "vx/claude-up INELIGIBLE:guardrail"
        ]
    );
    assert_eq!(Env::route(&rec), ["vx/gemini-2.5-flash"]);
    assert_eq!((env.hits("gpt-up"), env.hits("claude-up")), (0, 0));
    let seen = env.mock.last_request("gemini-2.5-flash").unwrap();
    assert_eq!(seen["body"]["safetySettings"], body["safetySettings"]);
    assert_eq!(seen["body"], body);
    let _ = std::fs::remove_file(sa);
}

/// Straight to the mock's Vertex path: what it refuses.
#[tokio::test]
async fn the_mock_refuses_what_vertex_refuses() {
    let mock = sidetrack_mock::MockServer::start(MockConfig::default())
        .await
        .unwrap();
    mock.set_token_settings(TokenSettings {
        accept: vec!["t".into()],
        ..TokenSettings::default()
    });
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let url = format!(
        "{}/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x:rawPredict",
        mock.base_url()
    );
    let send = |auth: &'static str, body: Value| {
        let req = http::Request::post(&url)
            .header("authorization", auth)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let client = client.clone();
        async move {
            let resp = client.request(req).await.unwrap();
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let good = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 5,
                      "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(send("Bearer t", good.clone()).await.0, 200);
    assert_eq!(send("Bearer nope", good.clone()).await.0, 401);
    let mut with_model = good.clone();
    with_model["model"] = json!("claude-x");
    let (code, body) = send("Bearer t", with_model).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("model"), "{body}");
    let mut old_version = good;
    old_version["anthropic_version"] = json!("2023-06-01");
    assert_eq!(send("Bearer t", old_version).await.0, 400);
    // Google's publisher: Gemini bodies, the same bearer; other publishers and verbs are 404.
    let google = |tail: &str| {
        format!(
            "{}/v1/projects/p/locations/us-east5/publishers/{tail}",
            mock.base_url()
        )
    };
    let gem = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    for (url, auth, want) in [
        (
            google("google/models/gemini-x:generateContent"),
            "Bearer t",
            200,
        ),
        (
            google("google/models/gemini-x:streamGenerateContent"),
            "Bearer t",
            200,
        ),
        (
            google("google/models/gemini-x:generateContent"),
            "Bearer nope",
            401,
        ),
        (google("google/models/gemini-x:rawPredict"), "Bearer t", 404),
        (
            google("anthropic/models/claude-x:generateContent"),
            "Bearer t",
            404,
        ),
        (google("meta/models/llama:generateContent"), "Bearer t", 404),
    ] {
        let req = http::Request::post(&url)
            .header("authorization", auth)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(gem.to_string())))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{url} {auth}");
    }
    let v: Value = {
        let req = http::Request::post(google("google/models/gemini-x:generateContent"))
            .header("authorization", "Bearer t")
            .body(Full::new(Bytes::from(gem.to_string())))
            .unwrap();
        let body = client.request(req).await.unwrap().into_body();
        serde_json::from_slice(&body.collect().await.unwrap().to_bytes()).unwrap()
    };
    assert!(v["candidates"][0]["content"]["parts"].is_array(), "{v}");
    assert!(v["usageMetadata"]["totalTokenCount"].is_u64(), "{v}");
    // The token endpoint: a grant that is not a JWT bearer grant is refused, and counted.
    let req = http::Request::post(format!("{}/token", mock.base_url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(
            "grant_type=password&assertion=a.b.c",
        )))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status().as_u16(), 400);
    assert_eq!(mock.token_requests(), 1);
}

fn load(yaml: &str, env: &[(&str, &str)]) -> Result<Config, String> {
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    sidetrack_config::load_str_with_env(yaml, "v.yaml", &lookup).map_err(|e| e.to_string())
}

#[test]
fn vertex_config_keys_are_checked_where_they_are_written() {
    let sa = service_account_file("config");
    let sa_path = sa.display().to_string();
    let target = |extra: &str| {
        format!("targets:\n  - name: vx\n    provider: vertex\n    region: us-east5\n{extra}")
    };
    // Good: env:NAME holds the path; the base URL defaults to the region's host.
    let c = load(
        &target("    project: p1\n    credentials: env:GOOGLE_APPLICATION_CREDENTIALS\n"),
        &[("GOOGLE_APPLICATION_CREDENTIALS", &sa_path)],
    )
    .unwrap();
    let t = &c.targets[0];
    assert_eq!(t.provider, ProviderKind::Vertex);
    assert_eq!(t.base_url, "https://us-east5-aiplatform.googleapis.com");
    assert_eq!(t.project.as_deref(), Some("p1"));
    match &t.vertex_auth {
        Some(VertexAuth::ServiceAccount(a)) => {
            assert_eq!(a.client_email, "gateway@test-proj.iam.gserviceaccount.com");
            assert!(
                !format!("{a:?}").contains("PRIVATE KEY"),
                "Debug hides the key"
            );
        }
        other => panic!("{other:?}"),
    }
    let global = load(
        "targets:\n  - name: vx\n    provider: vertex\n    region: global\n    project: p1\n    accessToken: t\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        global.targets[0].base_url,
        "https://aiplatform.googleapis.com"
    );

    let fails = |extra: &str, env: &[(&str, &str)], at: &str, says: &str| {
        let e = load(&target(extra), env).unwrap_err();
        assert!(e.contains(at) && e.contains(says), "{e}");
        assert!(!e.contains("BEGIN PRIVATE KEY"), "{e}");
        e
    };
    fails(
        "    credentials: env:X\n",
        &[("X", &sa_path)],
        "targets[0].project",
        "needs `project`",
    );
    fails(
        "    project: p1\n",
        &[],
        "targets[0].credentials",
        "accessToken",
    );
    fails(
        "    project: p1\n    credentials: env:X\n    accessToken: t\n",
        &[("X", &sa_path)],
        "targets[0].accessToken",
        "not both",
    );
    fails(
        "    project: p1\n    credentials: /surely/not/there.json\n",
        &[],
        "targets[0].credentials",
        "/surely/not/there.json",
    );
    // A file of the wrong kind, and one whose key is not PEM: the file is named, the key never.
    let bad =
        std::env::temp_dir().join(format!("sidetrack-vertex-{}-bad.json", std::process::id()));
    let bad_path = bad.display().to_string();
    std::fs::write(
        &bad,
        json!({"type": "authorized_user", "private_key": KEY_PEM}).to_string(),
    )
    .unwrap();
    fails(
        "    project: p1\n    credentials: env:X\n",
        &[("X", &bad_path)],
        "targets[0].credentials",
        "authorized_user",
    );
    let broken_key = KEY_PEM.replace("-----BEGIN PRIVATE KEY-----", "-----BEGIN KEY-----");
    std::fs::write(
        &bad,
        json!({"type": "service_account", "client_email": "a@b", "token_uri": "https://t/token",
               "private_key": broken_key})
        .to_string(),
    )
    .unwrap();
    let e = fails(
        "    project: p1\n    credentials: env:X\n",
        &[("X", &bad_path)],
        "targets[0].credentials",
        "private_key",
    );
    assert!(e.contains(&bad_path), "{e}");
    let body_line = KEY_PEM.lines().nth(1).unwrap();
    assert!(!e.contains(body_line), "{e}");
    // Vertex keys on another kind are errors.
    let e = load(
        "targets:\n  - name: o\n    provider: openai\n    project: p\n",
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("targets[0].project") && e.contains("only a vertex target"),
        "{e}"
    );
    let _ = std::fs::remove_file(bad);
    let _ = std::fs::remove_file(sa);
}
