//! SPEC §11 "Guardrails and safety settings are never dropped": a Bedrock request carrying
//! `guardrailConfig` or `X-Amzn-Bedrock-Guardrail*` headers is served only by a destination sent
//! the caller's own format (and is forwarded there with its guardrail); every other destination is
//! skipped `INELIGIBLE:guardrail`. Real mock, real gateway, real sockets; boto3 for one case.
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, run_sdk_env, self_signed_cert, start, status, Env};
use serde_json::json;
use sidetrack_mock::MockConfig;

const ROUTES: &str = r#"
targets:
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: bedrock-key, models: ["us.*"] }
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", apiKey: oai-key, models: ["gpt-*"] }
rules:
  - name: bedrock-then-openai
    priority: 1
    matchModels: ["to-openai"]
    routeToTarget:
      staticRoute: { target: aws, model: "us.down-v1:0" }
      fallback: { targetFallback: [ { target: oai, model: gpt-up } ] }
  - name: bedrock-then-openai-then-bedrock
    priority: 2
    matchModels: ["to-bedrock"]
    routeToTarget:
      staticRoute: { target: aws, model: "us.down-v1:0" }
      fallback: { targetFallback: [ { target: oai, model: gpt-up }, { target: aws, model: "us.up-v1:0" } ] }
  - name: openai-only
    priority: 3
    matchModels: ["openai-only"]
    routeToTarget:
      staticRoute: { target: oai, model: gpt-up }
"#;

fn mock() -> MockConfig {
    behaviours(&[("us.down-v1:0", status(503))])
}

fn converse_body(guardrail: bool) -> serde_json::Value {
    let mut body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    if guardrail {
        body["guardrailConfig"] = json!({
            "guardrailIdentifier": "gr-abc123",
            "guardrailVersion": "DRAFT",
            "trace": "enabled"
        });
    }
    body
}

fn invoke_body() -> serde_json::Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
           "messages": [{"role": "user", "content": "hi"}]})
}

/// The routing record's skips as `target/model why`.
fn skips(rec: &sidetrack_gateway::observe::RoutingRecord) -> Vec<String> {
    rec.skipped
        .iter()
        .map(|s| format!("{}/{} {}", s.target, s.model, s.why))
        .collect()
}

#[tokio::test]
async fn a_guardrailed_converse_request_never_falls_back_to_another_format() {
    let env = start(ROUTES, mock()).await;
    let r = env
        .post("/model/to-openai/converse", converse_body(true), &[])
        .await;
    assert_eq!(r.status, 503, "the primary's error, not 200: {}", r.body);
    assert_eq!(
        r.header("x-amzn-errortype")
            .map(|t| t.starts_with("ServiceUnavailableException")),
        Some(true),
        "the primary's Bedrock error: {:?}",
        r.headers
    );
    assert_eq!(env.hits("gpt-up"), 0, "the OpenAI target saw nothing");
    assert_eq!(env.hits("us.down-v1:0"), 1);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["aws/us.down-v1:0"]);
    assert_eq!(skips(&rec), ["oai/gpt-up INELIGIBLE:guardrail"]);
    assert_eq!(
        env.metric(
            r#"sidetrack_skips_total{target="oai",model="gpt-up",why="INELIGIBLE:guardrail"}"#
        )
        .await,
        1.0
    );
    let line = serde_json::to_value(&rec).unwrap();
    assert_eq!(line["skipped"][0]["why"], "INELIGIBLE:guardrail", "{line}");
}

#[tokio::test]
async fn a_guardrailed_converse_request_is_served_by_a_bedrock_fallback_with_its_guardrail() {
    let env = start(ROUTES, mock()).await;
    let body = converse_body(true);
    let headers = [
        ("X-Amzn-Bedrock-GuardrailIdentifier", "gr-abc123"),
        ("X-Amzn-Bedrock-GuardrailVersion", "DRAFT"),
        ("X-Amzn-Bedrock-Trace", "ENABLED"),
    ];
    let r = env
        .post("/model/to-bedrock/converse", body.clone(), &headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["output"]["message"]["content"][0]["text"],
        "hello from us.up-v1:0"
    );
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["aws/us.down-v1:0", "aws/us.up-v1:0"]);
    assert_eq!(skips(&rec), ["oai/gpt-up INELIGIBLE:guardrail"]);
    assert_eq!(env.hits("gpt-up"), 0);

    let sent = env.mock.last_request("us.up-v1:0").unwrap();
    assert_eq!(sent["body"], body, "the body went through untouched");
    assert_eq!(
        sent["body"]["guardrailConfig"]["guardrailIdentifier"],
        "gr-abc123"
    );
    let h = &sent["headers"];
    assert_eq!(h["x-amzn-bedrock-guardrailidentifier"], "gr-abc123", "{h}");
    assert_eq!(h["x-amzn-bedrock-guardrailversion"], "DRAFT", "{h}");
    assert_eq!(h["x-amzn-bedrock-trace"], "ENABLED", "{h}");
    // The primary was sent them too.
    let primary = env.mock.last_request("us.down-v1:0").unwrap();
    assert_eq!(
        primary["headers"]["x-amzn-bedrock-guardrailidentifier"],
        "gr-abc123"
    );
}

#[tokio::test]
async fn the_guardrail_header_alone_on_invoke_model_makes_other_formats_ineligible_and_is_forwarded(
) {
    let env = start(ROUTES, mock()).await;
    let headers = [("X-Amzn-Bedrock-GuardrailIdentifier", "gr-only")];
    let r = env
        .post("/model/to-bedrock/invoke", invoke_body(), &headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["content"][0]["text"], "hello from us.up-v1:0");
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["aws/us.down-v1:0", "aws/us.up-v1:0"]);
    assert_eq!(skips(&rec), ["oai/gpt-up INELIGIBLE:guardrail"]);
    assert_eq!(env.hits("gpt-up"), 0);
    let sent = env.mock.last_request("us.up-v1:0").unwrap();
    assert!(
        sent["path"].as_str().unwrap().ends_with("/invoke"),
        "{sent}"
    );
    assert_eq!(
        sent["headers"]["x-amzn-bedrock-guardrailidentifier"],
        "gr-only"
    );
    assert_eq!(
        sent["headers"]["x-amzn-bedrock-trace"],
        serde_json::Value::Null
    );
    assert_eq!(sent["body"], invoke_body());

    // Without the header the same request falls back to OpenAI as before.
    let r = env
        .post("/model/to-openai/invoke", invoke_body(), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(env.hits("gpt-up"), 1);
}

#[tokio::test]
async fn a_request_without_a_guardrail_is_unaffected() {
    let env = start(ROUTES, mock()).await;
    // The trace switch alone asks for no guardrail.
    let r = env
        .post(
            "/model/to-openai/converse",
            converse_body(false),
            &[("X-Amzn-Bedrock-Trace", "ENABLED")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["output"]["message"]["content"][0]["text"],
        "hello from gpt-up"
    );
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["aws/us.down-v1:0", "oai/gpt-up"]);
    assert!(rec.skipped.is_empty(), "{:?}", rec.skipped);
    let sent = env.mock.last_request("gpt-up").unwrap();
    assert_eq!(sent["path"], "/v1/chat/completions", "translated as before");
    // `guardrailConfig: null` is no guardrail either.
    let mut body = converse_body(false);
    body["guardrailConfig"] = serde_json::Value::Null;
    let r = env.post("/model/to-openai/converse", body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(env.hits("gpt-up"), 2);
}

#[tokio::test]
async fn when_no_destination_can_enforce_the_guardrail_the_caller_gets_the_every_hop_skipped_answer(
) {
    let env = start(ROUTES, mock()).await;
    let r = env
        .post("/model/openai-only/converse", converse_body(true), &[])
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("no destination of this route could be attempted"),
        "{}",
        r.body
    );
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "noEligibleDestination");
    assert!(rec.attempts.is_empty());
    assert_eq!(skips(&rec), ["oai/gpt-up INELIGIBLE:guardrail"]);
    assert_eq!(env.mock.total_hits(), 0);

    // A Bedrock guardrail header on another dialect cannot reach Bedrock untranslated: no
    // destination can enforce it, so none is tried (OpenAI's answer would be unguarded).
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "to-openai", "messages": [{"role": "user", "content": "hi"}]}),
            &[("x-amzn-bedrock-guardrailidentifier", "gr-abc123")],
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.json()["error"]["message"].is_string(),
        "OpenAI shape: {}",
        r.body
    );
    let rec = env.record(2).await;
    assert_eq!(rec.reason, "noEligibleDestination");
    assert_eq!(
        skips(&rec),
        [
            "aws/us.down-v1:0 INELIGIBLE:guardrail",
            "oai/gpt-up INELIGIBLE:guardrail"
        ]
    );
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn boto3_converse_and_invoke_with_a_guardrail_reach_only_bedrock_with_it() {
    let (cert, key) = self_signed_cert("guardrail");
    let yaml =
        format!("server: {{ tls: {{ certFile: \"{cert}\", keyFile: \"{key}\" }} }}\n{ROUTES}");
    let env = start(&yaml, mock()).await;
    let endpoint = format!("https://localhost:{}", env.gw.addr.port());
    let token = [("AWS_BEARER_TOKEN_BEDROCK", "any-token")];

    let out = run_sdk_env(
        "bedrock_guardrail.py",
        &["converse", &endpoint, &cert, "to-bedrock"],
        &token,
    )
    .await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from us.up-v1:0");
    let sent = env.mock.last_request("us.up-v1:0").unwrap();
    assert_eq!(
        sent["body"]["guardrailConfig"],
        json!({"guardrailIdentifier": "gr-test", "guardrailVersion": "1", "trace": "enabled"})
    );

    let out = run_sdk_env(
        "bedrock_guardrail.py",
        &["converse", &endpoint, &cert, "to-openai"],
        &token,
    )
    .await;
    assert_eq!(out["error"]["code"], "ServiceUnavailableException", "{out}");
    assert_eq!(out["error"]["status"], 503, "{out}");

    let out = run_sdk_env(
        "bedrock_guardrail.py",
        &["invoke", &endpoint, &cert, "to-bedrock"],
        &token,
    )
    .await;
    assert_eq!(out["error"], serde_json::Value::Null, "{out}");
    assert_eq!(out["text"], "hello from us.up-v1:0");
    let sent = env.mock.last_request("us.up-v1:0").unwrap();
    let h = &sent["headers"];
    assert_eq!(h["x-amzn-bedrock-guardrailidentifier"], "gr-test", "{h}");
    assert_eq!(h["x-amzn-bedrock-guardrailversion"], "1", "{h}");
    assert_eq!(h["x-amzn-bedrock-trace"], "ENABLED", "{h}");

    assert_eq!(
        env.hits("gpt-up"),
        0,
        "OpenAI never saw a guardrailed request"
    );
    for n in 1..=3 {
        let rec = env.record(n).await;
        assert_eq!(
            skips(&rec),
            ["oai/gpt-up INELIGIBLE:guardrail"],
            "record {n}"
        );
    }
}
