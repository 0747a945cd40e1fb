//! OpenAI Responses framing, checked on the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{post_json, sse_named_events, RawConn, RESPONSES};
use serde_json::{json, Value};
use sidetrack_mock::{MockConfig, MockServer};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

fn req(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "instructions": "be brief",
           "input": [{"role": "user", "content": [{"type": "input_text", "text": "say hi please!"}]}]})
}

const AUTH: (&str, &str) = ("authorization", "Bearer sk-test");

/// The fields the official SDK's `Response` model requires, plus the ones it reads.
fn assert_response_object(r: &Value, status: &str) {
    for key in [
        "id",
        "object",
        "created_at",
        "status",
        "model",
        "output",
        "parallel_tool_calls",
        "tool_choice",
        "tools",
        "error",
        "incomplete_details",
        "instructions",
        "metadata",
        "temperature",
        "top_p",
        "usage",
    ] {
        assert!(r.get(key).is_some(), "missing {key}: {r}");
    }
    assert!(r["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], status);
    assert_eq!(r["parallel_tool_calls"], true);
    assert_eq!(r["tool_choice"], "auto");
    assert_eq!(r["tools"], json!([]));
}

#[tokio::test]
async fn non_streaming_body_has_the_real_shape() {
    let mock = server(json!({"models": {"gpt": {"reply": "hi there"}}})).await;
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &req("gpt", false)).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert!(res.header("x-request-id").unwrap().starts_with("req_"));
    let body = res.json();
    assert_response_object(&body, "completed");
    assert_eq!(body["model"], "gpt");
    let item = &body["output"][0];
    let item_id = item["id"].as_str().unwrap();
    assert!(item_id.starts_with("msg_"));
    assert_eq!(
        *item,
        json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": "hi there", "annotations": [], "logprobs": []}]})
    );
    // 14 + 8 prompt characters → 6 tokens; "hi there" → 2.
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 6, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 8})
    );
    assert_eq!(mock.stats()["models"]["gpt"]["endpoints"][RESPONSES], 1);
    // Field order starts like the real API's.
    let text = String::from_utf8(res.body()).unwrap();
    assert!(text.starts_with(r#"{"id":"resp_"#), "{text}");
    assert!(text.contains(r#","object":"response","created_at":"#));
}

#[tokio::test]
async fn stream_framing_has_event_lines_and_increasing_sequence_numbers() {
    let mock = server(json!({"models": {"gpt": {"reply": "abcdefgh", "streamChunks": 2}}})).await;
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &req("gpt", true)).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("text/event-stream"));
    assert!(res.complete);
    let events = sse_named_events(&res.body());
    assert_eq!(res.frames.len(), events.len(), "one event per HTTP chunk");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str());
        assert_eq!(data["sequence_number"], i as u64);
    }
    assert_response_object(&events[0].1["response"], "in_progress");
    assert_eq!(events[0].1["response"]["usage"], Value::Null);
    let item_id = events[2].1["item"]["id"].as_str().unwrap();
    assert_eq!(events[2].1["item"]["status"], "in_progress");
    assert_eq!(events[2].1["item"]["content"], json!([]));
    assert_eq!(
        events[4].1,
        json!({"type": "response.output_text.delta", "sequence_number": 4, "item_id": item_id,
               "output_index": 0, "content_index": 0, "delta": "abcd", "logprobs": []})
    );
    assert_eq!(events[6].1["text"], "abcdefgh");
    assert_eq!(events[7].1["part"]["text"], "abcdefgh");
    assert_eq!(events[8].1["item"]["content"][0]["text"], "abcdefgh");
    let completed = &events[9].1["response"];
    assert_response_object(completed, "completed");
    assert_eq!(completed["id"], events[0].1["response"]["id"]);
    assert_eq!(completed["output"][0]["id"], item_id);
    assert_eq!(completed["usage"]["total_tokens"], 8);
}

#[tokio::test]
async fn in_stream_error_event() {
    let mock = server(json!({"models": {
        "late": {"streamErrorAfterChunks": 1},
        "typed": {"streamErrorAfterChunks": 0, "streamErrorType": "rate_limit_exceeded"},
    }}))
    .await;
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &req("late", true)).await;
    assert_eq!(res.status, 200);
    assert!(res.complete);
    let events = sse_named_events(&res.body());
    assert_eq!(events.len(), 4 + 1 + 1);
    assert!(!events.iter().any(|(n, _)| n == "response.completed"));
    assert_eq!(
        String::from_utf8(res.frames.last().unwrap().clone()).unwrap(),
        "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The server had an error while processing your request. Sorry about that!\",\"param\":null,\"sequence_number\":5}\n\n"
    );
    let events = sse_named_events(
        &post_json(mock.addr(), RESPONSES, &[AUTH], &req("typed", true))
            .await
            .body(),
    );
    assert_eq!(events.len(), 5);
    assert_eq!(events[4].1["code"], "rate_limit_exceeded");
    assert_eq!(events[4].1["sequence_number"], 4);
}

#[tokio::test]
async fn errors_use_the_openai_shape() {
    let mock =
        server(json!({"models": {"limited": {"status": 429, "retryAfterSeconds": 1}}})).await;
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &req("limited", true)).await;
    assert_eq!(res.status, 429);
    assert_eq!(res.header("retry-after"), Some("1"));
    assert!(res.header("x-request-id").is_some());
    assert_eq!(
        res.json()["error"],
        json!({"message": "Rate limit reached for limited on requests per min (RPM). Please try again later.",
               "type": "requests", "param": null, "code": "rate_limit_exceeded"})
    );
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &json!({"input": "x"})).await;
    assert_eq!(res.status, 400);
    assert_eq!(mock.total_hits(), 1);
}

#[tokio::test]
async fn drop_after_chunks_kills_the_stream() {
    let mock = server(json!({"models": {"cut": {"streamChunks": 5, "dropAfterChunks": 2}}})).await;
    let raw = RawConn::connect(mock.addr())
        .await
        .send("POST", RESPONSES, &[AUTH], &req("cut", true).to_string())
        .await;
    assert_eq!(raw.status, 200);
    assert!(!raw.complete);
    let events = sse_named_events(&raw.body());
    assert_eq!(events.len(), 4 + 2);
}

#[tokio::test]
async fn tool_call_is_a_function_call_item() {
    let mock = server(json!({"models": {"gpt": {"toolCall": {"name": "lookup", "arguments": "{\"q\":1}"}, "streamChunks": 3}}})).await;
    let mut body = req("gpt", false);
    body["tools"] = json!([{"type": "function", "name": "lookup", "parameters": {}}]);
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &body).await;
    let item = &res.json()["output"][0];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["name"], "lookup");
    assert_eq!(item["arguments"], "{\"q\":1}");
    assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
    assert!(item["id"].as_str().unwrap().starts_with("fc_"));

    body["stream"] = json!(true);
    let res = post_json(mock.addr(), RESPONSES, &[AUTH], &body).await;
    let events = sse_named_events(&res.body());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert_eq!(events[2].1["item"]["arguments"], "");
    let args: String = events[3..6]
        .iter()
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, "{\"q\":1}");
    assert_eq!(events[6].1["arguments"], "{\"q\":1}");
    assert_eq!(
        events[8].1["response"]["output"][0]["type"],
        "function_call"
    );
}
