//! Anthropic Messages framing, checked on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{hyper_client, post_json, read_body, sse_named_events, RawConn, MESSAGES};
use serde_json::{json, Value};
use sidetrack_mock::{MockConfig, MockServer};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

fn req(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 64, "stream": stream,
           "system": "be brief", "messages": [{"role": "user", "content": "say hi please!"}]})
}

fn with_tools(mut body: Value) -> Value {
    body["tools"] = json!([{"name": "get_weather", "description": "w",
                            "input_schema": {"type": "object"}}]);
    body
}

const KEY: (&str, &str) = ("x-api-key", "sk-ant-test");
const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");

#[tokio::test]
async fn non_streaming_body_has_the_real_shape() {
    let mock = server(json!({"models": {"claude": {"reply": "hi there"}}})).await;
    let res = post_json(
        mock.addr(),
        MESSAGES,
        &[KEY, VERSION],
        &req("claude", false),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert!(res.header("request-id").unwrap().starts_with("req_"));
    let body = res.json();
    let id = body["id"].as_str().unwrap();
    assert!(id.starts_with("msg_"));
    // 14 + 8 prompt characters → 6 tokens; "hi there" → 2.
    let expected = format!(
        r#"{{"id":"{id}","type":"message","role":"assistant","model":"claude","content":[{{"type":"text","text":"hi there"}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{{"input_tokens":6,"output_tokens":2}}}}"#
    );
    assert_eq!(String::from_utf8(res.body()).unwrap(), expected);
    assert_eq!(mock.hits("claude"), 1);
    assert_eq!(mock.stats()["models"]["claude"]["endpoints"][MESSAGES], 1);
}

#[tokio::test]
async fn both_auth_headers_are_accepted_and_recorded() {
    let mock = server(json!({})).await;
    let bearer = ("authorization", "Bearer sk-ant-test");
    let res = post_json(mock.addr(), MESSAGES, &[bearer, VERSION], &req("c", false)).await;
    assert_eq!(res.status, 200);
    assert_eq!(mock.last_request("c").unwrap()["auth"], "bearer");
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("c", false)).await;
    assert_eq!(res.status, 200, "no anthropic-version needed");
    let last = mock.last_request("c").unwrap();
    assert_eq!(last["auth"], "x-api-key");
    assert_eq!(last["headers"]["x-api-key"], "sk-ant-test");
    let res = post_json(mock.addr(), MESSAGES, &[], &req("c", false)).await;
    assert_eq!(res.status, 200, "no auth required either");
    assert_eq!(mock.last_request("c").unwrap()["auth"], "none");
}

/// Every event has its `event:` line equal to `data.type`, one event per HTTP chunk.
#[tokio::test]
async fn stream_framing_is_exact() {
    let mock = server(json!({"models": {"c": {"reply": "abcdefgh", "streamChunks": 2}}})).await;
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("c", true)).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("text/event-stream"));
    assert!(res.header("request-id").is_some());
    assert!(res.complete);
    let events = sse_named_events(&res.body());
    assert_eq!(res.frames.len(), events.len(), "one event per HTTP chunk");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }
    let id = events[0].1["message"]["id"].as_str().unwrap();
    let frames: Vec<String> = res
        .frames
        .iter()
        .map(|f| String::from_utf8(f.clone()).unwrap())
        .collect();
    assert_eq!(
        frames[0],
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":6,\"output_tokens\":1}}}}}}\n\n"
        )
    );
    assert_eq!(frames[1], "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    assert_eq!(frames[2], "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    assert_eq!(frames[3], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"abcd\"}}\n\n");
    assert_eq!(frames[4], "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"efgh\"}}\n\n");
    assert_eq!(
        frames[5],
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    );
    assert_eq!(frames[6], "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":6,\"output_tokens\":2}}\n\n");
    assert_eq!(
        frames[7],
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
}

#[tokio::test]
async fn error_bodies_use_anthropics_types_per_status() {
    let mock = server(json!({"models": {
        "limited": {"status": 429, "retryAfterSeconds": 3},
        "overloaded": {"status": 529},
        "broken": {"status": 500},
        "unavailable": {"status": 503},
        "denied": {"status": 403},
        "missing": {"status": 404},
        "unauth": {"status": 401},
        "bad": {"status": 400},
    }}))
    .await;
    let cases = [
        ("limited", 429, "rate_limit_error"),
        ("overloaded", 529, "overloaded_error"),
        ("broken", 500, "api_error"),
        ("unavailable", 503, "api_error"),
        ("denied", 403, "permission_error"),
        ("missing", 404, "not_found_error"),
        ("unauth", 401, "authentication_error"),
        ("bad", 400, "invalid_request_error"),
    ];
    for (model, status, error_type) in cases {
        // A stream request gets the same pre-stream JSON error.
        let res = post_json(mock.addr(), MESSAGES, &[KEY], &req(model, true)).await;
        assert_eq!(res.status, status, "{model}");
        assert_eq!(res.header("content-type"), Some("application/json"));
        let request_id = res.header("request-id").unwrap().to_owned();
        let body = res.json();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], error_type, "{model}");
        assert!(body["error"]["message"].as_str().unwrap().len() > 3);
        assert_eq!(body["request_id"], request_id.as_str());
        let mut keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["error", "request_id", "type"]);
    }
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("limited", false)).await;
    assert_eq!(res.header("retry-after"), Some("3"));
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("overloaded", false)).await;
    assert_eq!(res.json()["error"]["message"], "Overloaded");
}

#[tokio::test]
async fn malformed_requests_are_400s_and_not_hits() {
    let mock = server(json!({})).await;
    let res = common::request(mock.addr(), "POST", MESSAGES, "{nope").await;
    assert_eq!(res.status, 400);
    assert_eq!(res.json()["error"]["type"], "invalid_request_error");
    assert!(res.header("request-id").is_some());
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &json!({"messages": []})).await;
    assert_eq!(res.status, 400);
    assert_eq!(res.json()["error"]["message"], "model: Field required");
    assert_eq!(mock.total_hits(), 0);
}

#[tokio::test]
async fn in_stream_error_defaults_to_overloaded_and_ends_without_message_stop() {
    let mock = server(json!({"models": {
        "late": {"streamErrorAfterChunks": 1, "streamChunks": 3},
        "limited-late": {"streamErrorAfterChunks": 0, "streamErrorType": "rate_limit_error"},
    }}))
    .await;
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("late", true)).await;
    assert_eq!(res.status, 200);
    assert!(res.complete, "the body ends cleanly");
    let events = sse_named_events(&res.body());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "error"
        ]
    );
    assert_eq!(
        String::from_utf8(res.frames.last().unwrap().clone()).unwrap(),
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
    );

    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("limited-late", true)).await;
    let events = sse_named_events(&res.body());
    assert_eq!(events.len(), 4);
    assert_eq!(events[3].1["error"]["type"], "rate_limit_error");

    // Non-streaming: an error status with that type.
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("limited-late", false)).await;
    assert_eq!(res.status, 500);
    assert_eq!(res.json()["error"]["type"], "rate_limit_error");
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_after_chunks_kills_the_stream() {
    let mock = server(json!({"models": {"cut": {"streamChunks": 10, "reply": "abcdefghijklmnop", "dropAfterChunks": 2}}})).await;
    let res = hyper_client()
        .request(
            http::Request::post(format!("{}{MESSAGES}", mock.base_url()))
                .header("x-api-key", "k")
                .body(http_body_util::Full::new(bytes::Bytes::from(
                    req("cut", true).to_string(),
                )))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (data, errored) = read_body(res.into_body()).await;
    assert!(errored);
    let events = sse_named_events(&data);
    assert_eq!(events.len(), 3 + 2, "preamble + 2 deltas");
    assert!(!events.iter().any(|(n, _)| n == "message_stop"));

    let raw = RawConn::connect(mock.addr())
        .await
        .send("POST", MESSAGES, &[KEY], &req("cut", false).to_string())
        .await;
    assert!(
        !raw.complete,
        "non-streaming: part of the JSON, then a dead connection"
    );
}

#[tokio::test]
async fn tool_call_answers_with_a_tool_use_block() {
    let tool = json!({"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "streamChunks": 2});
    let mock = server(json!({"models": {"c": tool}})).await;

    // Without tools in the request: the text reply.
    let res = post_json(mock.addr(), MESSAGES, &[KEY], &req("c", false)).await;
    assert_eq!(res.json()["content"][0]["type"], "text");

    let res = post_json(mock.addr(), MESSAGES, &[KEY], &with_tools(req("c", false))).await;
    let body = res.json();
    assert_eq!(body["stop_reason"], "tool_use");
    let block = &body["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(block["name"], "get_weather");
    assert_eq!(block["input"], json!({"city": "Paris"}));

    let res = post_json(mock.addr(), MESSAGES, &[KEY], &with_tools(req("c", true))).await;
    let events = sse_named_events(&res.body());
    let start = &events[1].1["content_block"];
    assert_eq!(start["type"], "tool_use");
    assert_eq!(start["name"], "get_weather");
    assert_eq!(start["input"], json!({}));
    let partial: String = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(partial, "{\"city\":\"Paris\"}");
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "tool_use");
    // The real API repeats the input tokens in `message_delta` (LangChain's ChatAnthropic reads them).
    assert!(delta.1["usage"]["input_tokens"].is_u64(), "{}", delta.1);
    assert!(delta.1["usage"]["output_tokens"].is_u64(), "{}", delta.1);
}
