//! Issue 6 "must show" 4: a wrong key is 401 and a principal outside a rule's `matchPrincipals` or
//! its own allow-list is 403 — in each caller's dialect (Bedrock's own shape: 403
//! AccessDeniedException for both).
#![allow(clippy::unwrap_used)]

mod common;

use common::start;
use sidetrack_mock::MockConfig;

const CONFIG: &str = r#"
auth:
  keys:
    - { principal: team-a, key: key-a }
    - { principal: team-b, key: key-b, models: ["gpt-*", "claude-*", "us.*"] }
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["gpt-*", "o-*"] }
  - { name: claude, provider: anthropic, baseUrl: "${MOCK}", apiKey: k, models: ["claude-*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: k, models: ["us.*"] }
rules:
  - name: a-only
    priority: 1
    matchModels: ["gpt-private"]
    matchPrincipals: ["team-a"]
    routeToTarget:
      staticRoute: { target: oai, model: gpt-x }
"#;

/// (path, body) for one request in each dialect, for `model`.
fn requests(model: &str) -> Vec<(&'static str, String, serde_json::Value)> {
    vec![
        (
            "openai-chat",
            "/v1/chat/completions".into(),
            serde_json::json!({"model": model, "messages": []}),
        ),
        (
            "openai-responses",
            "/v1/responses".into(),
            serde_json::json!({"model": model, "input": "hi"}),
        ),
        (
            "anthropic-messages",
            "/v1/messages".into(),
            serde_json::json!({"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "bedrock-converse",
            format!("/model/{}/converse", model.replace(':', "%3A")),
            serde_json::json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
        ),
    ]
}

/// Checks one error answer's status and shape for its dialect.
fn assert_shape(
    dialect: &str,
    r: &common::Reply,
    status: u16,
    openai_type: &str,
    bedrock_type: &str,
) {
    let v = r.json();
    match dialect {
        "openai-chat" | "openai-responses" => {
            assert_eq!(r.status, status, "{dialect}: {}", r.body);
            assert_eq!(v["error"]["type"], openai_type, "{dialect}: {}", r.body);
        }
        "anthropic-messages" => {
            assert_eq!(r.status, status, "{dialect}: {}", r.body);
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], openai_type, "{dialect}: {}", r.body);
        }
        _ => {
            assert_eq!(r.status, 403, "{dialect}: {}", r.body);
            assert_eq!(
                r.header("x-amzn-errortype"),
                Some(bedrock_type),
                "{dialect}"
            );
            assert!(v["message"].is_string());
        }
    }
}

#[tokio::test]
async fn wrong_keys_are_401_in_every_dialect() {
    let env = start(CONFIG, MockConfig::default()).await;
    for (dialect, path, body) in requests("gpt-4o") {
        let r = env
            .post(&path, body, &[("authorization", "Bearer wrong")])
            .await;
        assert_shape(
            dialect,
            &r,
            401,
            "authentication_error",
            "AccessDeniedException",
        );
    }
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn principals_outside_rules_or_allow_lists_are_403_in_every_dialect() {
    let env = start(CONFIG, MockConfig::default()).await;
    // Outside a rule's matchPrincipals.
    for (dialect, path, body) in requests("gpt-private") {
        let r = env
            .post(&path, body, &[("authorization", "Bearer key-b")])
            .await;
        assert_shape(
            dialect,
            &r,
            403,
            "permission_error",
            "AccessDeniedException",
        );
    }
    // Outside the principal's own allow-list (o-* is not in team-b's models).
    for (dialect, path, body) in requests("o-1") {
        let r = env
            .post(&path, body, &[("authorization", "Bearer key-b")])
            .await;
        assert_shape(
            dialect,
            &r,
            403,
            "permission_error",
            "AccessDeniedException",
        );
    }
    assert_eq!(
        env.mock.total_hits(),
        0,
        "nothing refused reached an upstream"
    );
    // The same requests from team-a are allowed.
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-private", "messages": []}),
            &[("authorization", "Bearer key-a")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}
