//! SPEC §12 "Embeddings endpoint" on `gemini` targets: `POST /v1/embeddings` translated to Google
//! AI's `:batchEmbedContents` and its answer back in OpenAI's shape, through rules and fallback,
//! against the real mock (which serves the same deterministic vectors on both endpoints).
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, cosine, floats, run_sdk, start, status, Env};
use serde_json::json;
use sidetrack_mock::MockConfig;

const GEM: &str = "gemini-embedding-001";

const CONFIG: &str = r#"
targets:
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", models: ["emb-*"] }
  - { name: gem, provider: gemini, baseUrl: "${MOCK}", apiKey: gem-key, models: ["gemini-*", "text-embedding-*"] }
rules:
  - name: openai-then-gemini
    priority: 1
    matchModels: ["to-gemini"]
    routeToTarget:
      staticRoute: { target: oai, model: emb-down }
      fallback: { targetFallback: [ { target: gem, model: gemini-embedding-001 } ] }
  - name: gemini-then-openai
    priority: 2
    matchModels: ["to-openai"]
    routeToTarget:
      staticRoute: { target: gem, model: gemini-flaky }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"] }
        targetFallback: [ { target: oai, model: emb-up } ]
  - name: gemini-only
    priority: 3
    matchModels: ["gemini-*", "text-embedding-*"]
    routeToTarget:
      staticRoute: { target: gem }
  - name: openai-only
    priority: 4
    matchModels: ["emb-*"]
    routeToTarget:
      staticRoute: { target: oai }
"#;

#[tokio::test]
async fn a_gemini_target_serves_the_mocks_vectors_in_openai_shape() {
    let env = start(CONFIG, MockConfig::default()).await;
    let texts = ["a b c d e f g h i j", "a b c d e f g h i k", "zz yy"];
    let r = env
        .embed(json!({"model": GEM, "input": texts, "dimensions": 64}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("gem/gemini-embedding-001")
    );
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["model"], GEM);
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["object"], "embedding");
        assert_eq!(d["index"], i);
        assert_eq!(floats(&d["embedding"]).len(), 64);
    }
    let vecs: Vec<Vec<f64>> = data.iter().map(|d| floats(&d["embedding"])).collect();
    assert!(cosine(&vecs[0], &vecs[1]) > 0.8);
    assert!(cosine(&vecs[0], &vecs[2]).abs() < 0.3);
    // Google states no token count: 0, as a Bedrock answer without one.
    assert_eq!(v["usage"], json!({"prompt_tokens": 0, "total_tokens": 0}));

    // The very vectors the mock serves on OpenAI's own endpoint (passed through untouched).
    let reference = env
        .embed(json!({"model": "emb-ref", "input": texts, "dimensions": 64}))
        .await;
    assert_eq!(reference.status, 200, "{}", reference.body);
    let reference = reference.json();
    for i in 0..3 {
        assert_eq!(
            data[i]["embedding"], reference["data"][i]["embedding"],
            "{i}"
        );
    }

    // What Google was sent: one request per text, the model as `models/…`, the key.
    assert_eq!(env.hits(GEM), 1);
    let sent = env.mock.last_request(GEM).unwrap();
    assert_eq!(
        sent["path"],
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    );
    assert_eq!(sent["auth"], "x-goog-api-key");
    let one = |t: &str| {
        json!({"model": "models/gemini-embedding-001",
               "content": {"parts": [{"text": t}]}, "outputDimensionality": 64})
    };
    assert_eq!(
        sent["body"],
        json!({"requests": [one(texts[0]), one(texts[1]), one(texts[2])]})
    );
    let rec = env.record(1).await;
    assert_eq!(rec.dialect, "openai-embeddings");
    assert_eq!(rec.reason, "servedByPrimary");
    assert_eq!(Env::route(&rec), ["gem/gemini-embedding-001"]);
    assert_eq!(rec.usage.map(|u| u.input_tokens), Some(0));

    // A single string, the model's default width (gemini-embedding-001: 3072; the older
    // text-embedding-004: 768).
    let r = env.embed(json!({"model": GEM, "input": "hello"})).await;
    assert_eq!(floats(&r.json()["data"][0]["embedding"]).len(), 3072);
    let r = env
        .embed(json!({"model": "text-embedding-004", "input": "hello"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(floats(&r.json()["data"][0]["embedding"]).len(), 768);
}

#[tokio::test]
async fn the_openai_sdk_decodes_base64_vectors_from_a_gemini_target() {
    let env = start(CONFIG, MockConfig::default()).await;
    let base = env.gw.base_url();
    let out = run_sdk(
        "openai_embeddings.py",
        &[
            &base,
            GEM,
            "one two three four five six seven eight nine ten",
            "one two three four five six seven eight nine eleven",
        ],
    )
    .await;
    assert_eq!(out["status"], 200);
    assert_eq!(out["served_by"], "gem/gemini-embedding-001");
    assert_eq!(out["lengths"], json!([3072, 3072]));
    assert_eq!(out["indexes"], json!([0, 1]));
    assert_eq!(out["model"], GEM);
    assert_eq!(out["prompt_tokens"], 0);
    assert!(out["cosine"].as_f64().unwrap() > 0.8, "{out}");
    // The SDK asked for base64; Google was asked for floats (it has no such option).
    let sent = env.mock.last_request(GEM).unwrap();
    assert!(sent["body"].get("encoding_format").is_none());
}

#[tokio::test]
async fn a_503_openai_primary_falls_back_to_gemini() {
    let env = start(CONFIG, behaviours(&[("emb-down", status(503))])).await;
    let r = env
        .embed(json!({"model": "to-gemini", "input": "the red fox sleeps"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("x-sidetrack-served-by"),
        Some("gem/gemini-embedding-001")
    );
    let v = r.json();
    assert_eq!(floats(&v["data"][0]["embedding"]).len(), 3072);
    assert_eq!(v["model"], GEM);
    let rec = env.record(1).await;
    assert_eq!(
        Env::route(&rec),
        ["oai/emb-down", "gem/gemini-embedding-001"]
    );
    assert_eq!(rec.attempts[0].status, Some(503));
    assert_eq!(rec.attempts[1].status, Some(200));
    assert_eq!(rec.reason, "servedViaFallbackHop:1");
    assert_eq!(rec.rule_name.as_deref(), Some("openai-then-gemini"));
    assert_eq!((env.hits("emb-down"), env.hits(GEM)), (1, 1));
}

#[tokio::test]
async fn a_gemini_429_or_500_falls_back_to_the_next_destination() {
    for code in [429, 500] {
        let env = start(CONFIG, behaviours(&[("gemini-flaky", status(code))])).await;
        let r = env
            .embed(json!({"model": "to-openai", "input": ["a", "b"]}))
            .await;
        assert_eq!(r.status, 200, "{code}: {}", r.body);
        assert_eq!(r.header("x-sidetrack-served-by"), Some("oai/emb-up"));
        let v = r.json();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["usage"]["prompt_tokens"], 2,
            "the OpenAI answer's own usage"
        );
        let rec = env.record(1).await;
        assert_eq!(
            Env::route(&rec),
            ["gem/gemini-flaky", "oai/emb-up"],
            "{code}"
        );
        assert_eq!(rec.attempts[0].status, Some(code));
        assert_eq!(rec.reason, "servedViaFallbackHop:1");
        assert_eq!(
            (env.hits("gemini-flaky"), env.hits("emb-up")),
            (1, 1),
            "{code}"
        );
        let sent = env.mock.last_request("gemini-flaky").unwrap();
        assert_eq!(
            sent["path"],
            "/v1beta/models/gemini-flaky:batchEmbedContents"
        );
    }
}

#[tokio::test]
async fn a_google_error_reaches_the_caller_in_openai_shape() {
    let env = start(CONFIG, behaviours(&[("gemini-bad", status(400))])).await;
    let r = env
        .embed(json!({"model": "gemini-bad", "input": "x"}))
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("invalid argument"),
        "{e}"
    );
    // Token arrays cannot be sent to Google: the destination is skipped, never called.
    let r = env.embed(json!({"model": GEM, "input": [[1, 2, 3]]})).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "no_eligible_destination");
    let rec = env.record(2).await;
    assert!(rec.attempts.is_empty());
    let detail = rec.skipped[0].detail.as_deref().unwrap();
    assert!(detail.contains("token-array"), "{detail}");
    assert_eq!(env.hits(GEM), 0);
}

/// Vertex's embeddings (`:predict`) are not served: a Vertex Gemini model shares the gemini
/// format, yet it must not be sent a `batchEmbedContents` body on a `generateContent` path.
#[tokio::test]
async fn a_vertex_gemini_model_stays_ineligible_for_embeddings() {
    let yaml = r#"
targets:
  - { name: vx, provider: vertex, baseUrl: "${MOCK}", project: p, region: us-east5, accessToken: tok, models: ["gemini-*"] }
rules:
  - name: vertex-only
    priority: 1
    matchModels: ["gemini-*"]
    routeToTarget:
      staticRoute: { target: vx }
"#;
    let env = start(yaml, MockConfig::default()).await;
    let r = env
        .embed(json!({"model": "gemini-embedding-001", "input": "x"}))
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], "no_eligible_destination");
    let rec = env.record(1).await;
    assert!(rec.attempts.is_empty());
    let detail = rec.skipped[0].detail.as_deref().unwrap();
    assert!(detail.contains("embeddings cannot be sent"), "{detail}");
    assert_eq!(env.mock.total_hits(), 0);
}
