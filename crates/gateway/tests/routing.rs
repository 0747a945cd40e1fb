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

    // team-b is outside the rule's principals: the rule does not match (conditions select, they
    // do not authorize — SPEC §5.2), and default routing sends gpt-4o to alpha, which lists gpt-*.
    let r = chat_as(&env, "key-b", "gpt-4o").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("alpha/gpt-4o"));
    let rec = env.record(2).await;
    assert_eq!((rec.rule_name, rec.match_type), (None, Some("DEFAULT")));
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(env.hits("gpt-4o"), 1);
    // A model no principal-restricted rule covers goes by default routing too.
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
async fn a_rule_sends_its_model_to_its_target_whatever_the_targets_globs_list() {
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
    assert_eq!(r.header("x-sidetrack-served-by"), Some("narrow/not-listed"));
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["narrow/not-listed"]);
    assert_eq!(rec.attempts[0].outcome, "SUCCESS");
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!((env.hits("not-listed"), env.hits("m-ok")), (1, 0));
    let sent = env.mock.last_request("not-listed").unwrap();
    assert_eq!(sent["body"]["model"], "not-listed");
}

/// Targets, keys and rules for the §5.2 cases below.
const SELECT: &str = r#"
auth:
  keys:
    - { principal: team-a, key: key-a }
    - { principal: team-b, key: key-b, models: ["gpt-*", "listed-*"] }
targets:
  - { name: oa, provider: openai, baseUrl: "${MOCK}/v1", models: ["gpt-4o*"] }
  - { name: other, provider: openai, baseUrl: "${MOCK}/v1", models: ["other-*"] }
  - { name: gpt-team, provider: openai, baseUrl: "${MOCK}/v1", models: ["listed-x"] }
rules:
  - name: a-first
    priority: 1
    matchModels: ["gpt-4o", "listed-a"]
    matchPrincipals: ["team-a"]
    routeToTarget:
      staticRoute: { target: other, model: other-a }
  - name: b-second
    priority: 2
    matchModels: ["gpt-4o"]
    matchPrincipals: ["team-b"]
    routeToTarget:
      staticRoute: { target: other, model: other-b }
"#;

#[tokio::test]
async fn a_principal_outside_a_rule_goes_on_to_the_next_rule_then_default_routing() {
    let env = start(SELECT, MockConfig::default()).await;
    let r = chat_as(&env, "key-a", "gpt-4o").await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("other/other-a"));
    // team-b: a-first leaves it out, b-second takes it.
    let r = chat_as(&env, "key-b", "gpt-4o").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("other/other-b"));
    assert_eq!(env.record(2).await.rule_name.as_deref(), Some("b-second"));
    // No rule for team-b and gpt-4o-mini: default routing.
    let r = chat_as(&env, "key-b", "gpt-4o-mini").await;
    assert_eq!(r.header("x-sidetrack-served-by"), Some("oa/gpt-4o-mini"));
    let rec = env.record(3).await;
    assert_eq!((rec.rule_name, rec.match_type), (None, Some("DEFAULT")));
    assert_eq!(
        (
            env.hits("other-a"),
            env.hits("other-b"),
            env.hits("gpt-4o-mini")
        ),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_pin_sends_its_model_unchanged_whatever_the_targets_globs_and_is_checked_by_its_model_part(
) {
    let env = start(SELECT, MockConfig::default()).await;
    // `other` lists only other-*: the pin is sent anyway, with the model part unchanged.
    let r = chat_as(&env, "key-a", "other/gpt-4o-mini").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("other/gpt-4o-mini"));
    let rec = env.record(1).await;
    assert_eq!(rec.match_type, Some("PINNED"));
    assert_eq!(rec.requested_model.as_deref(), Some("other/gpt-4o-mini"));
    let sent = env.mock.last_request("gpt-4o-mini").unwrap();
    assert_eq!(sent["body"]["model"], "gpt-4o-mini");
    // team-b: `oa/gpt-4o-mini` passes `gpt-*` by its model part.
    let r = chat_as(&env, "key-b", "oa/gpt-4o-mini").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("x-sidetrack-served-by"), Some("oa/gpt-4o-mini"));
    // A pin whose model part the allow-list does not admit is refused, even when the whole name
    // (`gpt-team/...`) matches one of its globs.
    for model in ["oa/claude-x", "gpt-team/claude-x"] {
        let r = chat_as(&env, "key-b", model).await;
        assert_eq!(r.status, 403, "{model}: {}", r.body);
        assert_eq!(r.json()["error"]["type"], "permission_error");
    }
    let recs = env.log.wait_for(4, std::time::Duration::from_secs(5)).await;
    assert_eq!(recs[2].reason, "gatewayRejected:modelNotAllowed");
    assert_eq!(recs[3].reason, "gatewayRejected:modelNotAllowed");
    assert_eq!(env.hits("claude-x"), 0);
    // Allowed is not routed: team-b may use `listed-a` (`listed-*`), but only team-a's rule routes
    // it and no target lists it, so team-b gets 404.
    let r = chat_as(&env, "key-b", "listed-a").await;
    assert_eq!(r.status, 404, "{}", r.body);
}

#[tokio::test]
async fn with_allow_pinning_off_a_slash_name_is_an_ordinary_model_name() {
    let yaml = format!("server: {{ allowPinning: false }}\n{SELECT}");
    let env = start(&yaml, MockConfig::default()).await;
    // `oa/gpt-4o-mini` pins nothing; no rule or target lists it: 404.
    let r = chat_as(&env, "key-a", "oa/gpt-4o-mini").await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(env.record(1).await.reason, "unroutable");
    // The allow-list now checks the whole name: `gpt-team/...` matches `gpt-*`, and a target
    // whose globs list slash names serves it by default routing.
    let yaml = format!(
        "server: {{ allowPinning: false }}\n{}",
        SELECT.replace(
            "models: [\"other-*\"]",
            "models: [\"other-*\", \"gpt-team/*\"]"
        )
    );
    let env = start(&yaml, MockConfig::default()).await;
    let r = chat_as(&env, "key-b", "gpt-team/claude-x").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("other/gpt-team/claude-x")
    );
    let rec = env.record(1).await;
    assert_eq!(rec.match_type, Some("DEFAULT"));
    assert_eq!(env.hits("gpt-team/claude-x"), 1);
    assert_eq!(env.hits("claude-x"), 0);
    // With pinning on (the default), the same name pins `gpt-team` and is checked as `claude-x`.
    let env = start(SELECT, MockConfig::default()).await;
    let r = chat_as(&env, "key-b", "gpt-team/claude-x").await;
    assert_eq!(r.status, 403, "{}", r.body);
}

#[tokio::test]
async fn models_list_follows_rule_fall_through_and_the_allow_list() {
    let env = start(SELECT, MockConfig::default()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let list = |key: &'static str| {
        let req = http::Request::get(format!("{}/v1/models", env.gw.base_url()))
            .header("authorization", format!("Bearer {key}"))
            .body(http_body_util::Empty::new())
            .unwrap();
        let fut = client.request(req);
        async move {
            use http_body_util::BodyExt;
            let body = fut.await.unwrap().into_body().collect().await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&body.to_bytes()).unwrap();
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["id"].as_str().unwrap().to_owned(),
                        m["owned_by"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let a = list("key-a").await;
    let b = list("key-b").await;
    let has = |l: &[(String, String)], id: &str, owner: &str| {
        l.iter().any(|(i, o)| i == id && o == owner)
    };
    // gpt-4o: a rule for each principal.
    assert!(has(&a, "gpt-4o", "sidetrack"), "{a:?}");
    assert!(has(&b, "gpt-4o", "sidetrack"), "{b:?}");
    // listed-a: only team-a's rule routes it (team-b falls through to nothing).
    assert!(has(&a, "listed-a", "sidetrack"), "{a:?}");
    assert!(!b.iter().any(|(i, _)| i == "listed-a"), "{b:?}");
    // listed-x: default routing to gpt-team, for both.
    assert!(has(&a, "listed-x", "gpt-team"), "{a:?}");
    assert!(has(&b, "listed-x", "gpt-team"), "{b:?}");
}
