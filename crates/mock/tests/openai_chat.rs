//! OpenAI Chat Completions framing, checked on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{chat, sse_payloads, CHAT};
use serde_json::{json, Value};
use sidetrack_mock::{MockConfig, MockServer};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn non_streaming_body_has_the_real_shape() {
    let mock = server(json!({"models": {"m": {"reply": "hi there"}}})).await;
    let res = chat(
        mock.addr(),
        &json!({"model": "m", "messages": [{"role": "user", "content": "say hi please!"}]}),
    )
    .await;

    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert!(res.header("x-request-id").unwrap().starts_with("req_"));
    let body = res.json();
    let id = body["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    let created = body["created"].as_u64().unwrap();
    // Exact bytes: field order and every null/empty field as the real API sends them.
    let expected = format!(
        r#"{{"id":"{id}","object":"chat.completion","created":{created},"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"hi there","refusal":null,"annotations":[]}},"logprobs":null,"finish_reason":"stop"}}],"usage":{{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}},"system_fingerprint":null,"service_tier":"default"}}"#
    );
    assert_eq!(String::from_utf8(res.body()).unwrap(), expected);
    assert!(res.complete);
}

#[tokio::test]
async fn unknown_models_get_the_default_reply_or_the_wildcard() {
    let plain = server(json!({})).await;
    let res = chat(plain.addr(), &json!({"model": "gpt-x", "messages": []})).await;
    assert_eq!(
        res.json()["choices"][0]["message"]["content"],
        "hello from gpt-x"
    );
    assert_eq!(res.json()["model"], "gpt-x");

    let wild = server(json!({"models": {"*": {"reply": "wild"}}})).await;
    let res = chat(wild.addr(), &json!({"model": "any", "messages": []})).await;
    assert_eq!(res.json()["choices"][0]["message"]["content"], "wild");
}

#[tokio::test]
async fn configured_usage_is_reported() {
    let mock =
        server(json!({"models": {"m": {"usage": {"promptTokens": 11, "completionTokens": 7}}}}))
            .await;
    let res = chat(mock.addr(), &json!({"model": "m", "messages": []})).await;
    assert_eq!(
        res.json()["usage"],
        json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18})
    );
}

/// The whole stream, byte for byte, one SSE event per HTTP chunk.
#[tokio::test]
async fn stream_framing_is_exact() {
    let mock = server(json!({"models": {"m": {"reply": "abcdefgh", "streamChunks": 2}}})).await;
    let res = chat(
        mock.addr(),
        &json!({"model": "m", "stream": true, "messages": []}),
    )
    .await;

    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("text/event-stream"));
    assert!(res.header("x-request-id").is_some());
    assert!(res.complete);
    let first: Value = serde_json::from_str(&sse_payloads(&res.frames[0])[0]).unwrap();
    let (id, created) = (
        first["id"].as_str().unwrap(),
        first["created"].as_u64().unwrap(),
    );
    let head = format!(
        r#"{{"id":"{id}","object":"chat.completion.chunk","created":{created},"model":"m","service_tier":"default","system_fingerprint":null,"choices":"#
    );
    let expected: Vec<String> = vec![
        format!("data: {head}[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("data: {head}[{{\"index\":0,\"delta\":{{\"content\":\"abcd\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("data: {head}[{{\"index\":0,\"delta\":{{\"content\":\"efgh\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"),
        format!("data: {head}[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}]}}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ];
    let frames: Vec<String> = res
        .frames
        .iter()
        .map(|f| String::from_utf8(f.clone()).unwrap())
        .collect();
    assert_eq!(frames, expected);
}

#[tokio::test]
async fn stream_with_include_usage_adds_the_usage_chunk_and_null_usage_elsewhere() {
    let mock =
        server(json!({"models": {"m": {"reply": "one two three four five", "streamChunks": 5}}}))
            .await;
    let res = chat(
        mock.addr(),
        &json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": [{"type": "text", "text": "12345678"}]}]}),
    )
    .await;
    let payloads = sse_payloads(&res.body());
    assert_eq!(res.frames.len(), payloads.len(), "one event per HTTP chunk");
    // role + 5 content + finish + usage + [DONE]
    assert_eq!(payloads.len(), 9);
    assert_eq!(payloads[8], "[DONE]");
    let chunks: Vec<Value> = payloads[..8]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    for c in &chunks[..7] {
        assert_eq!(c["usage"], Value::Null);
        assert!(c.as_object().unwrap().contains_key("usage"));
    }
    let content: String = chunks[1..6]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(content, "one two three four five");
    assert_eq!(chunks[6]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[7]["choices"], json!([]));
    assert_eq!(
        chunks[7]["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 6, "total_tokens": 8})
    );
}

#[tokio::test]
async fn default_stream_has_four_content_chunks() {
    let mock = server(json!({})).await;
    let res = chat(
        mock.addr(),
        &json!({"model": "abc", "stream": true, "messages": []}),
    )
    .await;
    let payloads = sse_payloads(&res.body());
    assert_eq!(payloads.len(), 1 + 4 + 1 + 1);
    assert!(
        !payloads[0].contains("\"usage\""),
        "no usage key without include_usage"
    );
}

#[tokio::test]
async fn malformed_json_and_missing_model_are_400s_and_not_hits() {
    let mock = server(json!({})).await;
    let res = common::request(mock.addr(), "POST", CHAT, "{not json").await;
    assert_eq!(res.status, 400);
    assert_eq!(res.json()["error"]["type"], "invalid_request_error");
    let error = res.json()["error"].clone();
    let mut keys: Vec<&String> = error.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, vec!["code", "message", "param", "type"]);

    let res = chat(mock.addr(), &json!({"messages": []})).await;
    assert_eq!(res.status, 400);
    assert_eq!(
        res.json()["error"]["message"],
        "you must provide a model parameter"
    );
    assert_eq!(mock.total_hits(), 0);
}

#[tokio::test]
async fn unknown_route_is_an_openai_404() {
    let mock = server(json!({})).await;
    let res = common::request(mock.addr(), "POST", "/v1/nope", "{}").await;
    assert_eq!(res.status, 404);
    assert_eq!(
        res.json()["error"]["message"],
        "Invalid URL (POST /v1/nope)"
    );
}

fn tool_request(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "weather?"}],
           "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})
}

#[tokio::test]
async fn tool_call_answers_with_tool_calls_when_the_request_has_tools() {
    let mock = server(json!({"models": {"m": {"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}}})).await;
    // Without tools: the text reply, unchanged.
    let res = chat(mock.addr(), &json!({"model": "m", "messages": []})).await;
    assert_eq!(
        res.json()["choices"][0]["message"]["content"],
        "hello from m"
    );
    assert!(res.json()["choices"][0]["message"]
        .get("tool_calls")
        .is_none());

    let res = chat(mock.addr(), &tool_request(false)).await;
    let choice = &res.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    let id = call["id"].as_str().unwrap();
    assert!(id.starts_with("call_"));
    assert_eq!(
        *call,
        json!({"id": id, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
    );
    // "{\"city\":\"Paris\"}" is 16 characters: 4 tokens.
    assert_eq!(res.json()["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn streamed_tool_call_sends_the_call_then_argument_pieces() {
    let mock = server(json!({"models": {"m": {"streamChunks": 2, "toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}}})).await;
    let res = chat(mock.addr(), &tool_request(true)).await;
    let payloads = sse_payloads(&res.body());
    assert_eq!(payloads.len(), 1 + 2 + 1 + 1);
    assert_eq!(payloads[4], "[DONE]");
    let chunks: Vec<Value> = payloads[..4]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    let first = &chunks[0]["choices"][0]["delta"];
    let id = first["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(
        *first,
        json!({"role": "assistant", "content": null, "refusal": null,
               "tool_calls": [{"index": 0, "id": id, "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]})
    );
    assert_eq!(
        chunks[1]["choices"][0]["delta"],
        json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]})
    );
    assert_eq!(
        chunks[2]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
        "\"Paris\"}"
    );
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "tool_calls");
}
