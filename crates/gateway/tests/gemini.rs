//! SPEC §13: the Gemini dialect as a caller (`/v1beta|/v1/models/{model}:generateContent`,
//! `:streamGenerateContent?alt=sse`) and as an upstream (`provider: gemini`), translated to and
//! from the other dialects with usage and finish reasons kept, tool calls both ways, and
//! `safetySettings` never dropped. Real mock, real gateway, real sockets; the google-genai SDK
//! cases run `tests/sdk/gemini_genai.py` (SIDETRACK_PYTHON with `google-genai`).
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, run_sdk_env, start, status, Env};
use serde_json::{json, Value};
use sidetrack_mock::Behaviour;

const ROUTES: &str = r#"
targets:
  - { name: gem, provider: gemini, baseUrl: "${MOCK}", apiKey: gem-key, models: ["gemini-*"] }
  - { name: ant, provider: anthropic, baseUrl: "${MOCK}", apiKey: ant-key, models: ["claude-*"] }
  - { name: oai, provider: openai, baseUrl: "${MOCK}/v1", apiKey: oai-key, models: ["gpt-*"] }
rules:
  - name: gemini-then-anthropic
    priority: 1
    matchModels: ["to-anthropic"]
    routeToTarget:
      staticRoute: { target: gem, model: gemini-down }
      fallback: { targetFallback: [ { target: ant, model: claude-up } ] }
  - name: gemini-then-openai
    priority: 2
    matchModels: ["to-openai"]
    routeToTarget:
      staticRoute: { target: gem, model: gemini-down }
      fallback: { targetFallback: [ { target: oai, model: gpt-up } ] }
  - name: openai-then-gemini
    priority: 3
    matchModels: ["to-gemini"]
    routeToTarget:
      staticRoute: { target: oai, model: gpt-down }
      fallback: { targetFallback: [ { target: gem, model: gemini-up } ] }
  - name: gemini-stream-error-then-openai
    priority: 4
    matchModels: ["stream-error-to-openai"]
    routeToTarget:
      staticRoute: { target: gem, model: gemini-stream-error }
      fallback: { targetFallback: [ { target: oai, model: gpt-up } ] }
  - name: gemini-only
    priority: 5
    matchModels: ["gemini-*"]
    routeToTarget:
      staticRoute: { target: gem }
  - name: openai-only
    priority: 6
    matchModels: ["gpt-*"]
    routeToTarget:
      staticRoute: { target: oai }
  - name: anthropic-only
    priority: 7
    matchModels: ["claude-*"]
    routeToTarget:
      staticRoute: { target: ant }
"#;

fn behaviour(v: Value) -> Behaviour {
    serde_json::from_value(v).unwrap()
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"promptTokens": prompt, "completionTokens": completion})
}

fn mock() -> sidetrack_mock::MockConfig {
    behaviours(&[
        ("gemini-down", status(503)),
        (
            "gemini-stream-error",
            behaviour(json!({"streamErrorAfterChunks": 0, "streamErrorType": "UNAVAILABLE"})),
        ),
        ("gpt-down", status(503)),
        (
            "claude-up",
            behaviour(json!({"reply": "from claude", "usage": usage(31, 7), "streamChunks": 3})),
        ),
        (
            "gpt-up",
            behaviour(json!({"reply": "from gpt", "usage": usage(41, 9), "streamChunks": 3})),
        ),
        (
            "gemini-up",
            behaviour(json!({"reply": "from gemini", "usage": usage(51, 11), "streamChunks": 3})),
        ),
        (
            "gemini-filtered",
            behaviour(json!({"reply": "partial", "contentFiltered": true, "usage": usage(5, 1)})),
        ),
        (
            "gemini-tool",
            behaviour(
                json!({"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                "usage": usage(60, 12)}),
            ),
        ),
        (
            "gpt-tool",
            behaviour(
                json!({"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
                "usage": usage(70, 13)}),
            ),
        ),
        (
            "claude-tool",
            behaviour(
                json!({"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
                "usage": usage(80, 14)}),
            ),
        ),
    ])
}

fn gen_body() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
           "generationConfig": {"maxOutputTokens": 64}})
}

fn tool_body() -> Value {
    json!({
        "contents": [{"role": "user", "parts": [{"text": "Weather?"}]}],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "weather",
            "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]}]
    })
}

const KEY: (&str, &str) = ("x-goog-api-key", "caller-key");

async fn generate(env: &Env, model: &str, body: Value) -> common::Reply {
    env.post(
        &format!("/v1beta/models/{model}:generateContent"),
        body,
        &[KEY],
    )
    .await
}

async fn stream(env: &Env, model: &str, body: Value) -> common::Reply {
    env.post(
        &format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
        body,
        &[KEY],
    )
    .await
}

/// The `data:` chunks of a Gemini SSE body.
fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn chunk_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .flat_map(|c| {
            c["candidates"][0]["content"]["parts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

fn usage_of(v: &Value) -> (u64, u64, u64) {
    let u = &v["usageMetadata"];
    (
        u["promptTokenCount"].as_u64().unwrap(),
        u["candidatesTokenCount"].as_u64().unwrap(),
        u["totalTokenCount"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn a_gemini_caller_is_served_by_a_gemini_target_as_sent() {
    let env = start(ROUTES, mock()).await;
    let r = generate(&env, "gemini-up", gen_body()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "from gemini"
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(usage_of(&v), (51, 11, 62));
    // The upstream got the target's key in x-goog-api-key, the body as sent (no model in it).
    let seen = env.mock.last_request("gemini-up").unwrap();
    assert_eq!(seen["auth"], "x-goog-api-key");
    assert_eq!(seen["headers"]["x-goog-api-key"], "gem-key");
    assert_eq!(seen["body"], gen_body());
    assert_eq!(
        seen["path"], "/v1beta/models/gemini-up:generateContent",
        "{seen}"
    );
    let rec = env.record(1).await;
    assert_eq!(rec.dialect, "gemini");

    let r = stream(&env, "gemini-up", gen_body()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let c = chunks(&r.body);
    assert_eq!(chunk_text(&c), "from gemini");
    assert_eq!(c.last().unwrap()["candidates"][0]["finishReason"], "STOP");
    assert_eq!(usage_of(c.last().unwrap()), (51, 11, 62));
}

#[tokio::test]
async fn a_gemini_503_falls_back_to_anthropic_and_openai_in_gemini_shape() {
    let env = start(ROUTES, mock()).await;
    for (model, text, u) in [
        ("to-anthropic", "from claude", (31, 7, 38)),
        ("to-openai", "from gpt", (41, 9, 50)),
    ] {
        let r = generate(&env, model, gen_body()).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let v = r.json();
        assert_eq!(v["candidates"][0]["content"]["parts"][0]["text"], text);
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            usage_of(&v),
            u,
            "{model}: usage as the upstream reported it"
        );

        let r = stream(&env, model, gen_body()).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let c = chunks(&r.body);
        assert_eq!(chunk_text(&c), text, "{model}");
        let last = c.last().unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(usage_of(last), u, "{model}: streamed usage");
    }
    assert_eq!(env.hits("gemini-down"), 4);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["gem/gemini-down", "ant/claude-up"]);
}

#[tokio::test]
async fn an_openai_caller_falls_back_to_a_gemini_target() {
    let env = start(ROUTES, mock()).await;
    let r = env.chat("to-gemini", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "from gemini");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["prompt_tokens"], 51);
    assert_eq!(v["usage"]["completion_tokens"], 11);
    let seen = env.mock.last_request("gemini-up").unwrap();
    assert_eq!(seen["body"]["contents"][0]["parts"][0]["text"], "hi");

    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "to-gemini", "stream": true, "stream_options": {"include_usage": true},
                   "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(common::streamed_text(&r.body), "from gemini");
    let usage_chunk = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|c| c["usage"].is_object())
        .unwrap();
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 51);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 11);
    let seen = env.mock.last_request("gemini-up").unwrap();
    assert_eq!(
        seen["path"], "/v1beta/models/gemini-up:streamGenerateContent",
        "the query is not part of the recorded path: {seen}"
    );
}

/// A Gemini stream whose first chunk is an error (`UNAVAILABLE`) has sent no content: it is
/// classified as a 503 (`OVERLOADED`) before the commit and the request falls back.
#[tokio::test]
async fn an_in_stream_gemini_error_before_content_falls_back() {
    let env = start(ROUTES, mock()).await;
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "stream-error-to-openai", "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(common::streamed_text(&r.body), "from gpt", "{}", r.body);
    assert_eq!(env.hits("gemini-stream-error"), 1);
    let rec = env.record(1).await;
    assert_eq!(Env::route(&rec), ["gem/gemini-stream-error", "oai/gpt-up"]);
}

#[tokio::test]
async fn tool_calls_cross_between_gemini_and_openai_or_anthropic() {
    let env = start(ROUTES, mock()).await;
    // Gemini caller, OpenAI and Anthropic upstreams: the call comes back as a functionCall.
    for (model, city) in [("gpt-tool", "Rome"), ("claude-tool", "Oslo")] {
        let r = generate(&env, model, tool_body()).await;
        assert_eq!(r.status, 200, "{model}: {}", r.body);
        let v = r.json();
        let call = &v["candidates"][0]["content"]["parts"][0]["functionCall"];
        assert_eq!(call["name"], "get_weather", "{v}");
        assert_eq!(call["args"], json!({"city": city}));
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        let r = stream(&env, model, tool_body()).await;
        let c = chunks(&r.body);
        let call = c
            .iter()
            .find_map(|c| {
                c["candidates"][0]["content"]["parts"]
                    .as_array()?
                    .iter()
                    .find_map(|p| p.get("functionCall").cloned())
            })
            .unwrap_or_else(|| panic!("{model}: no functionCall in {}", r.body));
        assert_eq!(call["args"], json!({"city": city}));
    }
    // The declarations reached them as JSON schema (types lower-cased).
    let seen = env.mock.last_request("gpt-tool").unwrap();
    assert_eq!(
        seen["body"]["tools"][0]["function"]["parameters"]["properties"]["city"]["type"],
        "string"
    );
    let seen = env.mock.last_request("claude-tool").unwrap();
    assert_eq!(seen["body"]["tools"][0]["name"], "get_weather");

    // OpenAI and Anthropic callers, Gemini upstream: tool_calls / tool_use.
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let r = env
        .post(
            "/v1/chat/completions",
            json!({"model": "gemini-tool", "messages": [{"role": "user", "content": "Weather?"}],
                   "tools": tools}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], "{\"city\":\"Paris\"}");
    let seen = env.mock.last_request("gemini-tool").unwrap();
    assert_eq!(
        seen["body"]["tools"][0]["functionDeclarations"][0]["name"],
        "get_weather"
    );
    let r = env
        .post(
            "/v1/messages",
            json!({"model": "gemini-tool", "max_tokens": 64,
                   "messages": [{"role": "user", "content": "Weather?"}],
                   "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][0]["type"], "tool_use");
    assert_eq!(v["content"][0]["input"], json!({"city": "Paris"}));
    assert_eq!(v["usage"]["input_tokens"], 60);
    assert_eq!(v["usage"]["output_tokens"], 12);
}

#[tokio::test]
async fn safety_settings_make_other_formats_ineligible() {
    let env = start(ROUTES, mock()).await;
    let mut body = gen_body();
    body["safetySettings"] =
        json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_LOW_AND_ABOVE"}]);
    let r = generate(&env, "to-openai", body.clone()).await;
    assert_eq!(
        r.status, 503,
        "the primary's error, not a served answer: {}",
        r.body
    );
    assert_eq!(r.json()["error"]["status"], "UNAVAILABLE");
    assert_eq!(env.hits("gpt-up"), 0, "the OpenAI target saw nothing");
    let rec = env.record(1).await;
    let skips: Vec<String> = rec
        .skipped
        .iter()
        .map(|s| format!("{}/{} {}", s.target, s.model, s.why))
        .collect();
    assert_eq!(skips, ["oai/gpt-up INELIGIBLE:guardrail"]);
    // Served by Gemini, the settings travel with the body.
    let r = generate(&env, "gemini-up", body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let seen = env.mock.last_request("gemini-up").unwrap();
    assert_eq!(seen["body"]["safetySettings"], body["safetySettings"]);
    // No route that can carry them: no answer without them either.
    let r = generate(&env, "gpt-up", body).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(env.hits("gpt-up"), 0);
}

#[tokio::test]
async fn a_filtered_gemini_answer_is_content_filtered_for_other_callers() {
    let env = start(ROUTES, mock()).await;
    let r = env.chat("gemini-filtered", false).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["choices"][0]["finish_reason"], "content_filter");
    let r = generate(&env, "gemini-filtered", gen_body()).await;
    assert_eq!(r.json()["candidates"][0]["finishReason"], "SAFETY");
}

#[tokio::test]
async fn caller_keys_come_in_x_goog_api_key_and_errors_are_googles() {
    let yaml = format!("{ROUTES}auth:\n  keys:\n    - {{ key: caller-key, principal: genai }}\n");
    let env = start(&yaml, mock()).await;
    let r = generate(&env, "gemini-up", gen_body()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = env
        .post(
            "/v1/models/gemini-up:generateContent",
            gen_body(),
            &[("x-goog-api-key", "wrong")],
        )
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["status"], "UNAUTHENTICATED");
    let r = env
        .post("/v1/models/gemini-up:generateContent", gen_body(), &[])
        .await;
    assert_eq!(r.status, 401);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("x-goog-api-key"));
    // Unknown method, a stream without alt=sse, no route: Google-shaped refusals.
    let r = env
        .post("/v1beta/models/gemini-up:countTokens", gen_body(), &[KEY])
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["status"], "NOT_FOUND");
    let r = env
        .post(
            "/v1beta/models/gemini-up:streamGenerateContent",
            gen_body(),
            &[KEY],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["status"], "INVALID_ARGUMENT");
    let r = generate(&env, "nothing-routes-this", gen_body()).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        r.json()["error"],
        json!({"code": 404, "status": "NOT_FOUND", "message": r.json()["error"]["message"]})
    );
}

/// The Gemini routes answer POST only; any other method is the gateway's usual 404.
#[tokio::test]
async fn other_methods_on_gemini_paths_are_not_found() {
    use http_body_util::{BodyExt, Empty};
    let env = start(ROUTES, mock()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    for path in [
        "/v1/models/gemini-up",
        "/v1beta/models/gemini-up:generateContent",
    ] {
        let uri: http::Uri = format!("{}{path}", env.gw.base_url()).parse().unwrap();
        let resp = client.get(uri).await.unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(
            String::from_utf8_lossy(&body).contains("no endpoint GET"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn the_mock_requires_a_gemini_key() {
    let env = start(ROUTES, mock()).await;
    let client = reqwest_like(&env).await;
    assert_eq!(client.0, 403);
    assert_eq!(client.1["error"]["status"], "PERMISSION_DENIED");
}

/// A key-less request straight to the mock's Gemini endpoint.
async fn reqwest_like(env: &Env) -> (u16, Value) {
    use http_body_util::{BodyExt, Full};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http();
    let req = http::Request::post(format!(
        "{}/v1beta/models/gemini-up:generateContent",
        env.mock.base_url()
    ))
    .header("content-type", "application/json")
    .body(Full::new(bytes::Bytes::from(gen_body().to_string())))
    .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

/// The google-genai SDK (Python, `google-genai==3.6.1` in the SDK venv) pointed at the gateway
/// unchanged: `generate_content` and `generate_content_stream`, falling back from a Gemini 503,
/// with usage and finish reasons; a tool call (automatic function calling off); safety settings
/// that keep the request from an OpenAI fallback.
#[tokio::test]
async fn the_google_genai_sdk_talks_to_sidetrack() {
    let env = start(ROUTES, mock()).await;
    let base = env.gw.base_url();
    let out = run_sdk_env("gemini_genai.py", &["cases", &base, "caller-key"], &[]).await;
    assert_eq!(out["plain"]["text"], "from gemini", "{out}");
    assert_eq!(out["plain"]["finish"], "STOP");
    assert_eq!(out["plain"]["usage"], json!([51, 11, 62]));
    assert_eq!(out["to_anthropic"]["text"], "from claude");
    assert_eq!(out["to_anthropic"]["usage"], json!([31, 7, 38]));
    assert_eq!(out["to_openai_stream"]["text"], "from gpt");
    assert_eq!(out["to_openai_stream"]["finish"], "STOP");
    assert_eq!(out["to_openai_stream"]["usage"], json!([41, 9, 50]));
    assert_eq!(out["tool"]["name"], "get_weather");
    assert_eq!(out["tool"]["args"], json!({"city": "Rome"}));
    assert_eq!(out["safety"]["code"], 503);
    assert_eq!(
        env.hits("gpt-up"),
        1,
        "the safety request never reached OpenAI"
    );
}
