//! SPEC §12 "Embeddings endpoint": `POST /v1/embeddings` served like chat — rules, fallback, the
//! routing log — by OpenAI-compatible and Bedrock (Titan, Cohere) targets, against the real mock.
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, cosine, floats, run_sdk, start, status, Env};
use serde_json::json;
use sidetrack_mock::MockConfig;

const TITAN: &str = "amazon.titan-embed-text-v2:0";
const COHERE: &str = "cohere.embed-english-v3";

const CONFIG: &str = r#"
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["emb-*", "text-embedding-*"] }
  - { name: aws, provider: bedrock, baseUrl: "${MOCK}", region: us-east-1, apiKey: bedrock-key, models: ["amazon.*", "cohere.*"] }
rules:
  - name: fallback-to-titan
    priority: 1
    matchModels: ["embed"]
    routeToTarget:
      staticRoute: { target: oai, model: emb-down }
      fallback:
        targetFallback:
          - { target: aws, model: amazon.titan-embed-text-v2:0 }
  - name: titan-only
    priority: 2
    matchModels: ["titan"]
    routeToTarget:
      staticRoute: { target: aws, model: amazon.titan-embed-text-v2:0 }
  - name: cohere
    priority: 3
    matchModels: ["cohere"]
    routeToTarget:
      staticRoute: { target: aws, model: cohere.embed-english-v3 }
"#;

#[tokio::test]
async fn an_openai_target_serves_vectors_with_usage_and_a_routing_record() {
    let env = start(CONFIG, MockConfig::default()).await;
    let r = env
        .embed(json!({"model": "text-embedding-3-small", "input": ["the red fox", "sleeps"]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(floats(&v["data"][0]["embedding"]).len(), 1536);
    assert_eq!(v["usage"], json!({"prompt_tokens": 4, "total_tokens": 4}));
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("oai/text-embedding-3-small")
    );
    let rec = env.record(1).await;
    assert_eq!(rec.dialect, "openai-embeddings");
    assert_eq!(rec.request_path, "/v1/embeddings");
    assert_eq!(rec.reason, "servedByPrimary");
    assert!(!rec.streamed);
    assert_eq!(rec.usage.map(|u| u.input_tokens), Some(4));
    let sent = env.mock.last_request("text-embedding-3-small").unwrap();
    assert_eq!(sent["path"], "/v1/embeddings");

    // `dimensions` passes through; the same text gives the same vector.
    let r = env
        .embed(json!({"model": "emb-small", "input": "the red fox", "dimensions": 256}))
        .await;
    assert_eq!(floats(&r.json()["data"][0]["embedding"]).len(), 256);
    let again = env
        .embed(json!({"model": "emb-small", "input": "the red fox", "dimensions": 256}))
        .await;
    assert_eq!(r.json()["data"], again.json()["data"]);
    // The AgentCore prefix serves it too.
    let r = env
        .post(
            "/inference/v1/embeddings",
            json!({"model": "emb-small", "input": "x"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_503_openai_primary_falls_back_to_bedrock_titan() {
    let env = start(CONFIG, behaviours(&[("emb-down", status(503))])).await;
    let r = env
        .embed(
            json!({"model": "embed", "input": "the red fox sleeps", "encoding_format": "base64"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let b64 = v["data"][0]["embedding"].as_str().unwrap();
    // 1024 float32s = 4096 bytes = 5464 base64 characters (the SDK test decodes them).
    assert_eq!(
        b64.len(),
        4096_usize.div_ceil(3) * 4,
        "Titan's 1024 float32s, base64"
    );
    assert_eq!(v["usage"]["prompt_tokens"], 4);
    assert_eq!(v["model"], TITAN);
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("aws/amazon.titan-embed-text-v2:0")
    );
    let rec = env.record(1).await;
    assert_eq!(
        Env::route(&rec),
        ["oai/emb-down", format!("aws/{TITAN}").as_str()]
    );
    assert_eq!(rec.attempts[0].status, Some(503));
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(rec.rule_name.as_deref(), Some("fallback-to-titan"));
    assert_eq!((env.hits("emb-down"), env.hits(TITAN)), (1, 1));
    let sent = env.mock.last_request(TITAN).unwrap();
    assert_eq!(sent["path"], "/model/amazon.titan-embed-text-v2%3A0/invoke");
    assert_eq!(sent["body"], json!({"inputText": "the red fox sleeps"}));
    assert_eq!(sent["auth"], "bearer");
}

#[tokio::test]
async fn cohere_via_bedrock_embeds_every_text_in_one_call() {
    let env = start(CONFIG, MockConfig::default()).await;
    let r = env.embed(
        json!({"model": "cohere", "input": ["a b c d e f g h i j", "a b c d e f g h i k", "zz yy"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let vecs: Vec<Vec<f64>> = (0..3).map(|i| floats(&v["data"][i]["embedding"])).collect();
    assert!(vecs.iter().all(|x| x.len() == 1024));
    assert!(cosine(&vecs[0], &vecs[1]) > 0.8);
    assert!(cosine(&vecs[0], &vecs[2]).abs() < 0.3);
    assert_eq!(
        v["usage"]["prompt_tokens"], 22,
        "from x-amzn-bedrock-input-token-count"
    );
    assert_eq!(env.hits(COHERE), 1);
    let sent = env.mock.last_request(COHERE).unwrap();
    assert_eq!(sent["body"]["input_type"], "search_document");
    assert_eq!(sent["body"]["texts"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_bad_request_gets_an_openai_400_and_no_upstream_call() {
    let env = start(CONFIG, MockConfig::default()).await;
    let many: Vec<&str> = vec!["w"; 2049];
    for (body, field) in [
        (json!({"model": "emb-small"}), "input"),
        (json!({"model": "emb-small", "input": ""}), "input"),
        (json!({"model": "emb-small", "input": many}), "input"),
        (
            json!({"model": "emb-small", "input": "x", "encoding_format": "int8"}),
            "encoding_format",
        ),
        (json!({"input": "x"}), "model"),
    ] {
        let r = env.embed(body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error");
        assert!(e["message"].as_str().unwrap().contains(field), "{e}");
    }
    assert_eq!(env.mock.total_hits(), 0);
}

#[tokio::test]
async fn an_array_input_to_a_titan_only_route_is_ineligible_not_fanned_out() {
    let env = start(CONFIG, MockConfig::default()).await;
    // One text in an array is fine.
    let r = env
        .embed(json!({"model": "titan", "input": ["just one"]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(floats(&r.json()["data"][0]["embedding"]).len(), 1024);
    // Two texts: Titan takes one per call, so the destination is skipped, never called.
    let r = env
        .embed(json!({"model": "titan", "input": ["one", "two"]}))
        .await;
    // SPEC §5.3: nothing on the route could be attempted → 503 `noEligibleDestination`, and the
    // message says why.
    assert_eq!(r.status, 503, "{}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "no_eligible_destination", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("Titan Text Embeddings takes one text per request"),
        "{message}"
    );
    let rec = env.record(2).await;
    assert!(rec.attempts.is_empty());
    assert_eq!(rec.reason, "noEligibleDestination");
    assert_eq!(rec.skipped.len(), 1);
    let detail = rec.skipped[0].detail.as_deref().unwrap();
    assert!(detail.contains("one text per request"), "{detail}");
    assert_eq!(
        env.hits(TITAN),
        1,
        "only the single-text request reached Titan"
    );
}

#[tokio::test]
async fn the_openai_sdk_gets_close_vectors_for_close_texts() {
    let env = start(CONFIG, MockConfig::default()).await;
    let base = env.gw.base_url();
    let out = run_sdk(
        "openai_embeddings.py",
        &[
            &base,
            "text-embedding-3-small",
            "one two three four five six seven eight nine ten",
            "one two three four five six seven eight nine eleven",
        ],
    )
    .await;
    assert_eq!(out["status"], 200);
    assert_eq!(out["lengths"], json!([1536, 1536]));
    assert_eq!(out["indexes"], json!([0, 1]));
    assert_eq!(out["prompt_tokens"], 20);
    assert!(out["cosine"].as_f64().unwrap() > 0.8, "{out}");
    // Through the Titan fallback the SDK's default base64 is honoured too.
    env.mock.set_behaviour("emb-down", status(503));
    let out = run_sdk("openai_embeddings.py", &[&base, "embed", "hello there"]).await;
    assert_eq!(out["lengths"], json!([1024]));
    assert_eq!(out["served_by"], "aws/amazon.titan-embed-text-v2:0");
}

#[tokio::test]
async fn a_failing_embeddings_primary_opens_its_breaker_and_is_skipped() {
    let env = common::start_with_clock(
        CONFIG,
        behaviours(&[("emb-down", status(503))]),
        sidetrack_gateway::Clock::manual(),
    )
    .await;
    for _ in 0..5 {
        let r = env.embed(json!({"model": "embed", "input": "x"})).await;
        assert_eq!(r.status, 200);
    }
    assert_eq!(env.breaker("oai", "emb-down").await, "OPEN");
    let r = env.embed(json!({"model": "embed", "input": "x"})).await;
    assert_eq!(r.status, 200);
    let rec = env.record(6).await;
    assert_eq!(Env::route(&rec), [format!("aws/{TITAN}")]);
    assert_eq!(rec.skipped[0].model.as_ref(), "emb-down");
    assert_eq!((env.hits("emb-down"), env.hits(TITAN)), (5, 6));
}

#[tokio::test]
async fn failfirst_on_the_mock_fails_then_serves_embeddings() {
    let flaky = sidetrack_mock::Behaviour {
        status: Some(500),
        fail_first: Some(1),
        ..sidetrack_mock::Behaviour::default()
    };
    let env = start(CONFIG, behaviours(&[(TITAN, flaky)])).await;
    let r = env.embed(json!({"model": "titan", "input": "x"})).await;
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(
        r.json()["error"]["type"],
        "server_error",
        "Bedrock's error in OpenAI's shape"
    );
    let r = env.embed(json!({"model": "titan", "input": "x"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// A Bedrock destination without a key signs with SigV4, as chat does. Only this test of the
/// binary reads the AWS variables (the others' Bedrock target has an `apiKey`).
#[tokio::test]
async fn a_bedrock_embeddings_destination_without_a_key_signs_with_sigv4() {
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
    std::env::set_var(
        "AWS_SECRET_ACCESS_KEY",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    );
    let yaml = CONFIG.replace(", apiKey: bedrock-key", "");
    let env = start(&yaml, MockConfig::default()).await;
    let r = env
        .embed(json!({"model": "cohere", "input": "signed"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = env.mock.last_request(COHERE).unwrap();
    assert_eq!(sent["auth"], "sigv4");
    let auth = sent["headers"]["authorization"].as_str().unwrap();
    assert!(auth.contains("/us-east-1/bedrock/aws4_request"), "{auth}");
}
