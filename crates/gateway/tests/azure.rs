//! `provider: azure` and per-target `headers` (SPEC §13), end to end: the official `openai` SDK as
//! the caller, a real gateway, the real mock speaking Azure's paths, auth and error shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Once;

use common::*;
use serde_json::{json, Value};
use sidetrack_mock::{Behaviour, MockConfig, UsageConfig};
use sidetrack_resilience::ErrorClass;

const AZURE_KEY: &str = "az-key-0123456789";
const HEADER_TOKEN: &str = "hdr-token-from-env-42";

/// The environment the configs below read, set once for the whole binary (before any load).
fn env_once() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var("SIDETRACK_TEST_HEADER_TOKEN", HEADER_TOKEN);
        std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
        std::env::set_var(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        );
    });
}

const FALLBACK: &str = r#"
targets:
  - name: openai-main
    provider: openai
    baseUrl: ${MOCK}/v1
    apiKey: sk-openai-0001
    headers: { x-tenant: acme-corp, x-api-token: env:SIDETRACK_TEST_HEADER_TOKEN }
  - name: azure-east
    provider: azure
    baseUrl: ${MOCK}
    apiKey: az-key-0123456789
    apiVersion: "2024-10-21"
rules:
  - name: to-azure
    priority: 10
    matchModels: ["gpt-4o", "text-embedding-3-small"]
    routeToTarget:
      staticRoute: { target: openai-main }
      fallback:
        triggerOn: { statusCodes: ["5XX"] }
        targetFallback:
          - target: azure-east
"#;

/// A mock where `models` answer 503 (the openai target's models; the Azure deployments have
/// other names, since the mock keys behaviours and hits by model).
fn openai_down(models: &[&str]) -> MockConfig {
    let mut cfg = behaviours(&[]);
    for m in models {
        cfg.models.insert((*m).to_owned(), status(503));
    }
    cfg
}

/// The last request the mock saw for `model` (`path`, `query`, `auth`, `headers`, `body`).
fn last(env: &Env, model: &str) -> Value {
    env.mock.last_request(model).unwrap()
}

#[tokio::test]
async fn openai_sdk_falls_back_from_openai_503_to_azure_with_azure_usage_streamed_and_not() {
    env_once();
    // The openai target answers 503 for `gpt-4o`; the Azure hop names its deployment.
    let yaml = FALLBACK.replace(
        "          - target: azure-east\n",
        "          - target: azure-east\n            model: gpt-4o-deploy\n",
    );
    let mut mock = openai_down(&["gpt-4o"]);
    mock.models.insert(
        "gpt-4o-deploy".into(),
        Behaviour {
            usage: Some(UsageConfig {
                prompt_tokens: 17,
                completion_tokens: 5,
            }),
            ..Behaviour::default()
        },
    );
    let env = start(&yaml, mock).await;
    let base = env.gw.base_url();
    let out = run_sdk("openai_chat.py", &["usage_matrix", &base, "gpt-4o"]).await;
    let m = &out["gpt-4o"];
    assert_eq!(
        m["complete"],
        json!({"input": 17, "output": 5, "total": 22}),
        "{out}"
    );
    assert_eq!(
        m["stream"],
        json!([{"input": 17, "output": 5, "total": 22, "choices": 0}]),
        "{out}"
    );

    // Both calls: openai first (503), then azure.
    for n in 1..=2 {
        let rec = env.record(n).await;
        assert_eq!(
            Env::route(&rec),
            ["openai-main/gpt-4o", "azure-east/gpt-4o-deploy"]
        );
        assert_eq!(rec.attempts[0].status, Some(503));
        assert_eq!(rec.attempts[1].status, Some(200));
        let usage = rec.usage.as_ref().unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (17, 5));
    }
    assert!(env.record(2).await.streamed);
    // The SDK keeps max_retries=2, but the gateway answered 200 both times: one hit each.
    assert_eq!(env.hits("gpt-4o"), 2);
    assert_eq!(env.hits("gpt-4o-deploy"), 2);

    // What Azure saw: the deployment URL with api-version, the key as `api-key`, no Bearer.
    let sent = last(&env, "gpt-4o-deploy");
    assert_eq!(
        sent["path"], "/openai/deployments/gpt-4o-deploy/chat/completions",
        "{sent}"
    );
    assert_eq!(sent["query"], "api-version=2024-10-21");
    assert_eq!(sent["auth"], "api-key");
    assert_eq!(sent["headers"]["api-key"], AZURE_KEY);
    assert!(sent["headers"].get("authorization").is_none(), "{sent}");
    // The openai target's own headers go to the openai target only.
    assert!(sent["headers"].get("x-tenant").is_none(), "{sent}");
    let openai_sent = last(&env, "gpt-4o");
    assert_eq!(openai_sent["headers"]["x-tenant"], "acme-corp");
    assert_eq!(openai_sent["headers"]["x-api-token"], HEADER_TOKEN);
    assert_eq!(
        openai_sent["headers"]["authorization"],
        "Bearer sk-openai-0001"
    );
}

#[tokio::test]
async fn responses_and_embeddings_reach_azures_own_paths() {
    env_once();
    let yaml = FALLBACK
        .replace(
            "          - target: azure-east\n",
            "          - target: azure-east\n            model: deploy-a\n",
        )
        .replace(
            "matchModels: [\"gpt-4o\", \"text-embedding-3-small\"]",
            "matchModels: [\"gpt-4o\"]",
        );
    let yaml = format!(
        "{yaml}  - name: emb\n    priority: 20\n    matchModels: [\"text-embedding-3-small\"]\n    routeToTarget:\n      staticRoute: {{ target: openai-main }}\n      fallback:\n        triggerOn: {{ statusCodes: [\"5XX\"] }}\n        targetFallback: [ {{ target: azure-east, model: emb-deploy }} ]\n"
    );
    let env = start(&yaml, openai_down(&["gpt-4o", "text-embedding-3-small"])).await;
    let base = env.gw.base_url();

    // Responses: Azure's v1 API, no dated api-version, the deployment in the body's `model`.
    let out = run_sdk("openai_responses.py", &["create", &base, "gpt-4o"]).await;
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["text"], "hello from deploy-a");
    let sent = env.mock.last_request("deploy-a").unwrap();
    assert_eq!(sent["path"], "/openai/v1/responses");
    assert_eq!(sent["query"], Value::Null);
    assert_eq!(sent["body"]["model"], "deploy-a");
    assert_eq!(sent["headers"]["api-key"], AZURE_KEY);
    let out = run_sdk("openai_responses.py", &["stream", &base, "gpt-4o"]).await;
    assert_eq!(out["text"], "hello from deploy-a", "{out}");
    assert!(out["events"]
        .as_array()
        .unwrap()
        .contains(&json!("response.completed")));

    // Embeddings: the deployment's embeddings URL with api-version.
    let out = run_sdk(
        "openai_embeddings.py",
        &[&base, "text-embedding-3-small", "one", "two"],
    )
    .await;
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["lengths"].as_array().unwrap().len(), 2);
    let sent = env.mock.last_request("emb-deploy").unwrap();
    assert_eq!(sent["path"], "/openai/deployments/emb-deploy/embeddings");
    assert_eq!(sent["query"], "api-version=2024-10-21");
    assert_eq!(env.hits("text-embedding-3-small"), 1);
}

#[tokio::test]
async fn entra_token_is_sent_as_bearer_and_never_as_api_key() {
    env_once();
    let yaml = r#"
targets:
  - name: az
    provider: azure
    baseUrl: ${MOCK}
    entraToken: env:SIDETRACK_TEST_HEADER_TOKEN
    apiVersion: 2025-04-01-preview
    models: ["*"]
"#;
    let env = start(yaml, MockConfig::default()).await;
    let r = env.chat("dep", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = env.mock.last_request("dep").unwrap();
    assert_eq!(sent["auth"], "bearer");
    assert_eq!(
        sent["headers"]["authorization"],
        format!("Bearer {HEADER_TOKEN}")
    );
    assert!(sent["headers"].get("api-key").is_none(), "{sent}");
    assert_eq!(sent["query"], "api-version=2025-04-01-preview");
}

#[tokio::test]
async fn the_mock_refuses_azure_calls_without_a_key_or_api_version() {
    env_once();
    // Straight at the mock: its Azure paths are as strict as Azure.
    let mock = sidetrack_mock::MockServer::start(MockConfig::default())
        .await
        .unwrap();
    let client = reqwest_like(&mock.base_url());
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let (status, v) = client
        .post(
            "/openai/deployments/d/chat/completions?api-version=2024-10-21",
            &body,
            &[],
        )
        .await;
    assert_eq!(status, 401);
    assert_eq!(v["error"]["code"], "401");
    let (status, v) = client
        .post(
            "/openai/deployments/d/chat/completions",
            &body,
            &[("api-key", "k")],
        )
        .await;
    assert_eq!(status, 404, "{v}");
    // With both, a body without `model` is answered for the deployment.
    let (status, v) = client
        .post(
            "/openai/deployments/d/chat/completions?api-version=2024-10-21",
            &body,
            &[("api-key", "k")],
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "hello from d");
    assert_eq!(mock.hits("d"), 1);
}

/// A tiny HTTP/1 JSON client for the mock (the harness's client talks to the gateway).
struct Raw {
    base: String,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

fn reqwest_like(base: &str) -> Raw {
    Raw {
        base: base.to_owned(),
        client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http(),
    }
}

impl Raw {
    async fn post(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
        use http_body_util::BodyExt;
        let mut req = http::Request::post(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let res = self
            .client
            .request(
                req.body(http_body_util::Full::new(bytes::Bytes::from(
                    body.to_string(),
                )))
                .unwrap(),
            )
            .await
            .unwrap();
        let status = res.status().as_u16();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

const FILTERED: &str = r#"
targets:
  - name: azure-east
    provider: azure
    baseUrl: ${MOCK}
    apiKey: az-key-0123456789
    apiVersion: "2024-10-21"
  - name: openai-main
    provider: openai
    baseUrl: ${MOCK}/v1
    apiKey: sk-openai-0001
rules:
  - name: filtered
    priority: 10
    matchModels: ["gpt-4o"]
    routeToTarget:
      staticRoute: { target: azure-east, model: strict-deploy }
      fallback:
        triggerOn: TRIGGER
        targetFallback:
          - target: openai-main
            model: gpt-4o-mini
"#;

fn filtered_mock() -> MockConfig {
    behaviours(&[(
        "strict-deploy",
        Behaviour {
            content_filtered: true,
            ..Behaviour::default()
        },
    )])
}

#[tokio::test]
async fn azure_content_filter_is_content_filtered_and_falls_back_when_listed() {
    env_once();
    let yaml = FILTERED.replace("TRIGGER", "{ errors: [CONTENT_FILTERED] }");
    let env = start(&yaml, filtered_mock()).await;
    let out = run_sdk(
        "openai_chat.py",
        &["complete", &env.gw.base_url(), "gpt-4o"],
    )
    .await;
    assert_eq!(out["error"], Value::Null, "{out}");
    assert_eq!(out["text"], "hello from gpt-4o-mini");
    let rec = env.record(1).await;
    assert_eq!(
        Env::route(&rec),
        ["azure-east/strict-deploy", "openai-main/gpt-4o-mini"]
    );
    assert_eq!(rec.attempts[0].status, Some(400));
    assert_eq!(
        rec.attempts[0].error_class,
        Some(ErrorClass::ContentFiltered)
    );
}

#[tokio::test]
async fn azure_content_filter_does_not_fall_back_when_not_listed() {
    env_once();
    let yaml = FILTERED.replace("TRIGGER", "{ statusCodes: [\"5XX\"] }");
    let env = start(&yaml, filtered_mock()).await;
    let out = run_sdk(
        "openai_chat.py",
        &["complete", &env.gw.base_url(), "gpt-4o"],
    )
    .await;
    assert_eq!(out["error"]["status"], 400, "{out}");
    assert_eq!(out["error"]["class"], "BadRequestError");
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["azure-east/strict-deploy"]);
    assert_eq!(
        rec.attempts[0].error_class,
        Some(ErrorClass::ContentFiltered)
    );
    assert_eq!(env.hits("gpt-4o-mini"), 0);
}

#[tokio::test]
async fn bedrock_target_headers_are_signed_by_sigv4() {
    env_once();
    let yaml = r#"
targets:
  - name: br
    provider: bedrock
    region: us-east-1
    baseUrl: ${MOCK}
    headers: { x-tenant: acme-corp, x-api-token: env:SIDETRACK_TEST_HEADER_TOKEN }
    models: ["*"]
"#;
    let env = start(yaml, MockConfig::default()).await;
    let r = env.chat("amazon.nova-lite-v1:0", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = env.mock.last_request("amazon.nova-lite-v1:0").unwrap();
    assert_eq!(sent["auth"], "sigv4", "{sent}");
    assert_eq!(sent["headers"]["x-tenant"], "acme-corp");
    assert_eq!(sent["headers"]["x-api-token"], HEADER_TOKEN);
    let auth = sent["headers"]["authorization"].as_str().unwrap();
    let signed = auth
        .split("SignedHeaders=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let signed: Vec<&str> = signed.split(';').collect();
    assert!(signed.contains(&"x-tenant"), "{auth}");
    assert!(signed.contains(&"x-api-token"), "{auth}");
}

#[tokio::test]
async fn admin_config_shows_header_names_and_hides_values() {
    env_once();
    let env = start(FALLBACK, MockConfig::default()).await;
    let (status, body) = env.admin_get("/admin/config").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    let targets = v["targets"].as_array().unwrap();
    assert_eq!(
        targets[0]["headers"],
        json!({"x-api-token": "***", "x-tenant": "***"})
    );
    assert_eq!(targets[1]["provider"], "azure");
    assert_eq!(targets[1]["apiVersion"], "2024-10-21");
    assert_eq!(targets[1]["apiKey"], "***");
    for secret in [HEADER_TOKEN, "acme-corp", AZURE_KEY] {
        assert!(!body.contains(secret), "{secret} leaked: {body}");
    }
}

#[tokio::test]
async fn an_upstream_error_echoing_a_header_value_is_redacted() {
    env_once();
    // The openai target fails with a message that quotes the configured header value back.
    let yaml = r#"
targets:
  - name: o
    provider: openai
    baseUrl: ${MOCK}/v1
    apiKey: sk-openai-0001
    headers: { x-api-token: env:SIDETRACK_TEST_HEADER_TOKEN }
    models: ["*"]
"#;
    let mock = behaviours(&[(
        "echo",
        Behaviour {
            status: Some(400),
            error: Some(sidetrack_mock::ErrorConfig {
                message: Some(format!("bad token {HEADER_TOKEN} for tenant")),
                ..Default::default()
            }),
            ..Behaviour::default()
        },
    )]);
    let env = start(yaml, mock).await;
    let r = env.chat("echo", false).await;
    assert_eq!(r.status, 400);
    assert!(!r.body.contains(HEADER_TOKEN), "{}", r.body);
    assert!(r.body.contains("bad token"), "{}", r.body);
}

#[test]
fn config_errors_are_located() {
    env_once();
    let errs = |src: &str| match sidetrack_config::load_str(src, "a.yaml") {
        Ok(_) => panic!("loaded"),
        Err(e) => e.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
    };
    let e = errs("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    apiKey: k1234\n");
    assert_eq!(
        e,
        ["a.yaml:2:5: targets[0].apiVersion: an azure target needs `apiVersion` (e.g. \"2024-10-21\")"]
    );
    let e = errs("targets:\n  - name: az\n    provider: azure\n    baseUrl: https://r.openai.azure.com\n    apiKey: k1234\n    entraToken: t1234\n    apiVersion: \"2024-10-21\"\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("a.yaml:6:17: targets[0].entraToken: give either"),
        "{e:?}"
    );
    let e = errs("targets:\n  - name: o\n    provider: openai\n    headers: { api-key: abcd }\n");
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with(
            "a.yaml:4:25: targets[0].headers.api-key: `api-key` is set by the gateway itself"
        ),
        "{e:?}"
    );
}
