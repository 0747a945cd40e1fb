//! Route resolution (SPEC §5.2), gateway-made errors (SPEC §6.3) and the endpoints around them.
#![allow(clippy::unwrap_used)]

mod common;

use common::{start, Env};
use sidetrack_mock::MockConfig;

const CONFIG: &str = r#"
auth:
  keys:
    - { principal: team-a, key: key-a }
    - { principal: team-b, key: key-b, models: ["gpt-*", "exact-*"] }
targets:
  - name: alpha
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["gpt-*", "shared-model"]
  - name: beta
    provider: openai
    baseUrl: ${MOCK}/v1
    models: ["shared-*", "claude-x", "pinned-*"]
  - name: gamma
    provider: openai
    baseUrl: ${MOCK}/v1
rules:
  - name: team-a-only
    priority: 5
    matchModels: ["gpt-4*"]
    matchPrincipals: ["team-a"]
    routeToTarget:
      staticRoute: { target: beta, model: pinned-for-a }
  - name: exact
    priority: 10
    matchModels: { operator: StringEquals, values: ["exact-*"] }
    routeToTarget:
      staticRoute: { target: gamma }
"#;

async fn env() -> Env {
    start(CONFIG, MockConfig::default()).await
}

async fn chat_as(env: &Env, key: &str, model: &str) -> common::Reply {
    let auth = format!("Bearer {key}");
    env.post(
        "/v1/chat/completions",
        serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}),
        &[("authorization", &auth)],
    )
    .await
}

#[tokio::test]
async fn missing_or_wrong_key_is_401_in_openai_shape_and_never_reaches_upstream() {
    let env = env().await;
    let r = env.chat("gpt-4o", false).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = chat_as(&env, "nope", "gpt-4o").await;
    assert_eq!(r.status, 401);
    let rec = env.record(2).await;
    assert_eq!(rec.outcome, "REJECTED");
    assert_eq!(rec.reason, "gatewayRejected:invalidKey");
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn match_principals_selects_the_rule_and_the_pinned_model_is_sent() {
    let env = env().await;
    let r = chat_as(&env, "key-a", "gpt-4o").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("beta/pinned-for-a"));
    let sent = env.mock.last_request("pinned-for-a").unwrap();
    assert_eq!(
        sent["body"]["model"], "pinned-for-a",
        "only the model is rewritten"
    );
    assert_eq!(sent["body"]["messages"][0]["content"], "hi");
    let rec = env.record(1).await;
    assert_eq!(
        (rec.rule_name.as_deref(), rec.match_type),
        (Some("team-a-only"), Some("RULE"))
    );
    assert_eq!(&*rec.principal, "team-a");

    // team-b is outside the rule's principals: refused, not sent on by default routing (alpha
    // also lists gpt-*), so the rule's principal list cannot be bypassed.
    let r = chat_as(&env, "key-b", "gpt-4o").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["type"], "permission_error");
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "gatewayRejected:principalNotAllowed");
    // A model no principal-restricted rule covers still goes by default routing.
    let r = chat_as(&env, "key-b", "gpt-3").await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("alpha/gpt-3"));
    let rec = env.record(3).await;
    assert_eq!((rec.rule_name, rec.match_type), (None, Some("DEFAULT")));
}

#[tokio::test]
async fn string_equals_is_literal_and_an_unpinned_route_sends_the_callers_model() {
    let env = env().await;
    let r = chat_as(&env, "key-a", "exact-*").await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("gamma/exact-*"));
    assert_eq!(env.hits("exact-*"), 1);
    // `exact-1` is not literally `exact-*`: no rule, and no target lists it → 404.
    let r = chat_as(&env, "key-a", "exact-1").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "unroutable");
    assert_eq!(env.mock.total_hits(), 1);
}

#[tokio::test]
async fn allow_list_denies_other_models_with_403() {
    let env = env().await;
    let r = chat_as(&env, "key-b", "claude-x").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["type"], "permission_error");
    assert_eq!(
        env.record(1).await.reason,
        "gatewayRejected:modelNotAllowed"
    );
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn default_routing_prefers_exact_entries_and_target_slash_model_pins() {
    let env = env().await;
    // alpha lists `shared-model` exactly; beta only by glob.
    for _ in 0..3 {
        let r = chat_as(&env, "key-a", "shared-model").await;
        assert_eq!(
            r.header("x-sidetrack-served-by"),
            Some("alpha/shared-model")
        );
    }
    let r = chat_as(&env, "key-a", "beta/shared-model").await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("beta/shared-model"));
    assert_eq!(env.record(4).await.match_type, Some("PINNED"));
    assert_eq!(
        env.mock.last_request("shared-model").unwrap()["body"]["model"],
        "shared-model"
    );
}

#[tokio::test]
async fn inference_prefix_serves_the_same_api() {
    let env = env().await;
    let r = env
        .post(
            "/inference/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o", "messages": []}),
            &[("authorization", "Bearer key-a")],
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        env.record(1).await.request_path,
        "/inference/v1/chat/completions"
    );
}

#[tokio::test]
async fn malformed_bodies_are_400_and_oversized_are_413() {
    let env = start(
        "server: { maxRequestBytes: 200 }\ntargets: [ { name: t, provider: openai, baseUrl: \"${MOCK}/v1\", models: [\"*\"] } ]",
        MockConfig::default(),
    )
    .await;
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"messages": []}),
            &[],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let big = "x".repeat(500);
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"model": "m", "messages": [big]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["code"], "request_too_large");
    let recs = env.log.wait_for(2, std::time::Duration::from_secs(5)).await;
    assert_eq!(recs[0].reason, "gatewayRejected:invalidRequest");
    assert_eq!(recs[1].reason, "gatewayRejected:tooLarge");
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn models_list_is_per_principal_and_health_endpoints_answer() {
    let env = env().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let get = |path: &str, key: &str| {
        let mut req = http::Request::get(format!("{}{path}", env.gw.base_url()));
        if !key.is_empty() {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        client.request(req.body(http_body_util::Empty::new()).unwrap())
    };
    use http_body_util::BodyExt;
    let resp = get("/v1/models", "key-b").await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(body["object"], "list");
    assert!(
        ids.contains(&"exact-*") || ids.is_empty() || !ids.contains(&"claude-x"),
        "{ids:?}"
    );
    assert!(
        !ids.contains(&"claude-x"),
        "team-b's allow-list excludes claude-x: {ids:?}"
    );
    assert!(
        !ids.contains(&"shared-model"),
        "outside team-b's allow-list: {ids:?}"
    );
    let resp = get("/v1/models", "key-a").await.unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"claude-x") && ids.contains(&"shared-model"),
        "{ids:?}"
    );
    assert_eq!(get("/v1/models", "").await.unwrap().status(), 401);
    assert_eq!(get("/healthz", "").await.unwrap().status(), 200);
    assert_eq!(get("/readyz", "").await.unwrap().status(), 200);
    let nf = get("/v2/nothing", "").await.unwrap();
    assert_eq!(nf.status(), 404);
}

#[tokio::test]
async fn a_destination_whose_target_does_not_list_the_model_is_unroutable_without_a_request() {
    let yaml = r#"
targets:
  - { name: narrow, provider: openai, baseUrl: "${MOCK}/v1", models: ["only-this"] }
  - { name: wide, provider: openai, baseUrl: "${MOCK}/v1" }
rules:
  - name: r
    priority: 1
    routeToTarget:
      staticRoute: { target: narrow, model: not-listed }
      fallback:
        targetFallback: [ { target: wide, model: m-ok } ]
"#;
    let env = start(yaml, MockConfig::default()).await;
    let r = env.chat("x", false).await;
    assert_eq!(r.status, 200);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["narrow/not-listed", "wide/m-ok"]);
    assert_eq!(rec.attempts[0].outcome, "UNROUTABLE");
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!((env.hits("not-listed"), env.hits("m-ok")), (0, 1));
}
