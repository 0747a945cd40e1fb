//! Issue 6 "must show" 4: a wrong key is 401 and a principal outside its own allow-list is 403 — in
//! each caller's dialect (Bedrock's own shape: 403 AccessDeniedException for both). A principal
//! outside a rule's `matchPrincipals` is not refused: rule conditions select, they do not authorize
//! (SPEC §5.2), so it falls through to default routing.
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
            format!(
                "/model/{}/converse",
                model.replace(':', "%3A").replace('/', "%2F")
            ),
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
async fn principals_outside_their_allow_list_are_403_in_every_dialect() {
    let env = start(CONFIG, MockConfig::default()).await;
    // o-* is not in team-b's models; as a pin, the model part is what is checked.
    for model in ["o-1", "oai/o-1"] {
        for (dialect, path, body) in requests(model) {
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
    }
    assert_eq!(
        env.mock.total_hits(),
        0,
        "nothing refused reached an upstream"
    );
    let recs = env.log.wait_for(8, std::time::Duration::from_secs(5)).await;
    assert_eq!(recs.len(), 8);
    assert!(recs
        .iter()
        .all(|r| r.reason == "gatewayRejected:modelNotAllowed"));
    // team-a has no allow-list.
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "o-1", "messages": []}),
            &[("authorization", "Bearer key-a")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_principal_outside_a_rules_principals_falls_through_to_default_routing_in_every_dialect()
{
    let env = start(CONFIG, MockConfig::default()).await;
    // team-b is outside `a-only`'s matchPrincipals: the rule does not match, and default routing
    // sends `gpt-private` (in team-b's allow-list) to `oai`, whose `gpt-*` lists it.
    for (i, (dialect, path, body)) in requests("gpt-private").into_iter().enumerate() {
        let r = env
            .post(&path, body, &[("authorization", "Bearer key-b")])
            .await;
        assert_eq!(r.status, 200, "{dialect}: {}", r.body);
        assert_eq!(
            r.header("x-sidetrack-served-by"),
            Some("oai/gpt-private"),
            "{dialect}"
        );
        let rec = env.record(i + 1).await;
        assert_eq!(
            (rec.rule_name.as_deref(), rec.match_type),
            (None, Some("DEFAULT")),
            "{dialect}"
        );
    }
    assert_eq!(env.hits("gpt-private"), 4);
    assert_eq!(env.hits("gpt-x"), 0);
    // team-a matches the rule, which sends `gpt-x`.
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-private", "messages": []}),
            &[("authorization", "Bearer key-a")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("oai/gpt-x"));
    assert_eq!(env.record(5).await.rule_name.as_deref(), Some("a-only"));
}
