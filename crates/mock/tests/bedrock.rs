//! Bedrock InvokeModel / InvokeModelWithResponseStream / Converse / ConverseStream, checked on the
//! wire: event-stream frames decoded (CRC-checked) with aws-smithy-eventstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use common::{decode_event_stream, post_json, EventFrame, RawConn};
use serde_json::{json, Value};
use sidetrack_mock::{MockConfig, MockServer};

const MODEL: &str = "us.anthropic.claude-haiku-4-5-v1:0";
const MODEL_ENCODED: &str = "us.anthropic.claude-haiku-4-5-v1%3A0";
const SIGV4: (&str, &str) = (
    "authorization",
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc",
);

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

fn path(model: &str, operation: &str) -> String {
    format!("/model/{model}/{operation}")
}

fn invoke_body() -> Value {
    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "system": "be brief",
           "messages": [{"role": "user", "content": [{"type": "text", "text": "say hi please!"}]}]})
}

fn converse_body() -> Value {
    json!({"messages": [{"role": "user", "content": [{"text": "say hi please!"}]}],
           "system": [{"text": "be brief"}], "inferenceConfig": {"maxTokens": 64}})
}

/// The Anthropic events inside the `chunk` frames.
fn chunk_events(frames: &[EventFrame]) -> Vec<Value> {
    frames
        .iter()
        .map(|f| {
            assert_eq!(f.header(":message-type"), "event");
            assert_eq!(f.header(":event-type"), "chunk");
            assert_eq!(f.header(":content-type"), "application/json");
            assert_eq!(f.payload.as_object().unwrap().len(), 1, "only bytes");
            let bytes = STANDARD
                .decode(f.payload["bytes"].as_str().unwrap())
                .unwrap();
            serde_json::from_slice(&bytes).unwrap()
        })
        .collect()
}

#[tokio::test]
async fn invoke_answers_an_anthropic_message() {
    let mock = server(json!({"models": {MODEL: {"reply": "hi there"}}})).await;
    let res = post_json(
        mock.addr(),
        &path(MODEL_ENCODED, "invoke"),
        &[SIGV4],
        &invoke_body(),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("application/json"));
    let request_id = res.header("x-amzn-requestid").unwrap();
    assert_eq!(request_id.len(), 36, "a UUID: {request_id}");
    assert_eq!(res.header("x-amzn-bedrock-input-token-count"), Some("6"));
    assert_eq!(res.header("x-amzn-bedrock-output-token-count"), Some("2"));
    assert!(res.header("x-amzn-bedrock-invocation-latency").is_some());
    let body = res.json();
    assert!(body["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(body["type"], "message");
    assert_eq!(body["model"], MODEL);
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "hi there"}])
    );
    assert_eq!(body["stop_reason"], "end_turn");
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 6, "output_tokens": 2})
    );

    let last = mock.last_request(MODEL).unwrap();
    assert_eq!(last["model"], MODEL);
    assert_eq!(last["auth"], "sigv4");
    assert_eq!(last["path"], path(MODEL_ENCODED, "invoke"));
    assert_eq!(last["body"]["anthropic_version"], "bedrock-2023-05-31");
    assert_eq!(
        mock.stats()["models"][MODEL]["endpoints"]["/model/{modelId}/invoke"],
        1
    );
}

#[tokio::test]
async fn invoke_with_response_stream_wraps_anthropic_events_in_chunk_frames() {
    let mock = server(json!({"models": {MODEL: {"reply": "abcdefgh", "streamChunks": 2}}})).await;
    let res = post_json(
        mock.addr(),
        &path(MODEL_ENCODED, "invoke-with-response-stream"),
        &[SIGV4],
        &invoke_body(),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(
        res.header("content-type"),
        Some("application/vnd.amazon.eventstream")
    );
    assert_eq!(
        res.header("x-amzn-bedrock-content-type"),
        Some("application/json")
    );
    assert!(res.header("x-amzn-requestid").is_some());
    assert!(res.complete);
    let (frames, rest) = decode_event_stream(&res.body());
    assert_eq!(rest, 0);
    assert_eq!(frames.len(), res.frames.len(), "one message per HTTP chunk");
    let events = chunk_events(&frames);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "no ping on Bedrock"
    );
    assert_eq!(events[0]["message"]["model"], MODEL);
    assert_eq!(
        events[2]["delta"],
        json!({"type": "text_delta", "text": "abcd"})
    );
    assert_eq!(
        events[5]["usage"],
        json!({"input_tokens": 6, "output_tokens": 2})
    );
    let metrics = &events[6]["amazon-bedrock-invocationMetrics"];
    assert_eq!(metrics["inputTokenCount"], 6);
    assert_eq!(metrics["outputTokenCount"], 2);
    assert!(metrics["invocationLatency"].is_u64());
    assert!(metrics["firstByteLatency"].is_u64());
}

#[tokio::test]
async fn converse_answers_the_converse_shape() {
    let mock = server(json!({"models": {MODEL: {"reply": "hi there"}}})).await;
    let res = post_json(
        mock.addr(),
        &path(MODEL, "converse"),
        &[SIGV4],
        &converse_body(),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(res.header("content-type"), Some("application/json"));
    let body = res.json();
    let latency = body["metrics"]["latencyMs"].as_u64().unwrap();
    assert_eq!(
        body,
        json!({"output": {"message": {"role": "assistant", "content": [{"text": "hi there"}]}},
               "stopReason": "end_turn",
               "usage": {"inputTokens": 6, "outputTokens": 2, "totalTokens": 8},
               "metrics": {"latencyMs": latency}})
    );
}

#[tokio::test]
async fn converse_stream_frames() {
    let mock = server(json!({"models": {MODEL: {"reply": "abcdefgh", "streamChunks": 2}}})).await;
    let res = post_json(
        mock.addr(),
        &path(MODEL_ENCODED, "converse-stream"),
        &[SIGV4],
        &converse_body(),
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(
        res.header("content-type"),
        Some("application/vnd.amazon.eventstream")
    );
    assert!(res.complete);
    let (frames, rest) = decode_event_stream(&res.body());
    assert_eq!(rest, 0);
    let types: Vec<&str> = frames.iter().map(|f| f.header(":event-type")).collect();
    assert_eq!(
        types,
        [
            "messageStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
    for f in &frames {
        assert_eq!(f.header(":message-type"), "event");
        assert_eq!(f.header(":content-type"), "application/json");
    }
    assert_eq!(frames[0].payload, json!({"role": "assistant"}));
    assert_eq!(
        frames[1].payload,
        json!({"contentBlockIndex": 0, "delta": {"text": "abcd"}})
    );
    assert_eq!(
        frames[2].payload,
        json!({"contentBlockIndex": 0, "delta": {"text": "efgh"}})
    );
    assert_eq!(frames[3].payload, json!({"contentBlockIndex": 0}));
    assert_eq!(frames[4].payload, json!({"stopReason": "end_turn"}));
    assert_eq!(
        frames[5].payload["usage"],
        json!({"inputTokens": 6, "outputTokens": 2, "totalTokens": 8})
    );
    assert!(frames[5].payload["metrics"]["latencyMs"].is_u64());
}

#[tokio::test]
async fn errors_carry_the_shape_name_header() {
    let cases = [
        (429, "ThrottlingException"),
        (400, "ValidationException"),
        (403, "AccessDeniedException"),
        (404, "ResourceNotFoundException"),
        (408, "ModelTimeoutException"),
        (424, "ModelErrorException"),
        (500, "InternalServerException"),
        (503, "ServiceUnavailableException"),
    ];
    let models: serde_json::Map<String, Value> = cases
        .iter()
        .map(|(status, _)| {
            (
                format!("m{status}"),
                json!({"status": status, "retryAfterSeconds": 2}),
            )
        })
        .collect();
    let mock = server(json!({ "models": models })).await;
    for (status, shape) in cases {
        for operation in [
            "invoke",
            "invoke-with-response-stream",
            "converse",
            "converse-stream",
        ] {
            let res = post_json(
                mock.addr(),
                &path(&format!("m{status}"), operation),
                &[SIGV4],
                &converse_body(),
            )
            .await;
            assert_eq!(res.status, status, "{operation}");
            assert_eq!(res.header("content-type"), Some("application/json"));
            assert_eq!(
                res.header("x-amzn-errortype"),
                Some(shape),
                "{status} {operation}"
            );
            assert!(res.header("x-amzn-requestid").is_some());
            assert_eq!(res.header("retry-after"), Some("2"));
            let body = res.json();
            assert_eq!(body.as_object().unwrap().len(), 1, "only message: {body}");
            assert!(body["message"].as_str().unwrap().len() > 10);
        }
    }
}

#[tokio::test]
async fn malformed_body_is_a_validation_exception_and_not_a_hit() {
    let mock = server(json!({})).await;
    let mut conn = RawConn::connect(mock.addr()).await;
    let res = conn
        .send("POST", &path(MODEL_ENCODED, "invoke"), &[], "{nope")
        .await;
    assert_eq!(res.status, 400);
    assert_eq!(res.header("x-amzn-errortype"), Some("ValidationException"));
    assert!(res.json()["message"]
        .as_str()
        .unwrap()
        .starts_with("Malformed input request"));
    assert_eq!(mock.total_hits(), 0);
}

#[tokio::test]
async fn in_stream_errors_are_exception_frames_with_lower_camel_types() {
    let mock = server(json!({"models": {
        "throttled": {"streamErrorAfterChunks": 1, "streamErrorType": "throttlingException"},
        "capital": {"streamErrorAfterChunks": 0, "streamErrorType": "ModelStreamErrorException"},
        "plain": {"streamErrorAfterChunks": 0},
        "openai-ish": {"streamErrorAfterChunks": 0, "streamErrorType": "overloaded_error"},
    }}))
    .await;
    let cases = [
        ("throttled", "throttlingException"),
        ("capital", "modelStreamErrorException"),
        ("plain", "internalServerException"),
        ("openai-ish", "internalServerException"),
    ];
    for (model, exception) in cases {
        for (operation, preamble) in [("invoke-with-response-stream", 2), ("converse-stream", 1)] {
            let res = post_json(
                mock.addr(),
                &path(model, operation),
                &[SIGV4],
                &converse_body(),
            )
            .await;
            assert_eq!(res.status, 200);
            assert!(res.complete, "the body ends cleanly after the exception");
            let (frames, rest) = decode_event_stream(&res.body());
            assert_eq!(rest, 0);
            let content = if model == "throttled" { 1 } else { 0 };
            assert_eq!(frames.len(), preamble + content + 1, "{model} {operation}");
            let last = frames.last().unwrap();
            assert_eq!(last.header(":message-type"), "exception");
            assert_eq!(
                last.header(":exception-type"),
                exception,
                "{model} {operation}"
            );
            assert_eq!(last.header(":content-type"), "application/json");
            assert!(last.payload["message"].is_string());
            assert!(!last.headers.contains_key(":event-type"));
        }
    }
    // Non-streaming: the exception's own status and shape.
    let res = post_json(
        mock.addr(),
        &path("throttled", "converse"),
        &[],
        &converse_body(),
    )
    .await;
    assert_eq!(res.status, 429);
    assert_eq!(res.header("x-amzn-errortype"), Some("ThrottlingException"));
}

#[tokio::test]
async fn drop_after_chunks_kills_the_event_stream() {
    let mock = server(json!({"models": {"cut": {"streamChunks": 6, "reply": "abcdefghijkl", "dropAfterChunks": 3}}})).await;
    for (operation, preamble) in [("invoke-with-response-stream", 2), ("converse-stream", 1)] {
        let res = post_json(
            mock.addr(),
            &path("cut", operation),
            &[SIGV4],
            &converse_body(),
        )
        .await;
        assert_eq!(res.status, 200);
        assert!(!res.complete, "{operation}: no terminating chunk");
        let (frames, rest) = decode_event_stream(&res.body());
        assert_eq!(rest, 0);
        assert_eq!(frames.len(), preamble + 3, "{operation}");
    }
    let res = post_json(
        mock.addr(),
        &path("cut", "converse"),
        &[SIGV4],
        &converse_body(),
    )
    .await;
    assert!(!res.complete);
}

#[tokio::test]
async fn model_ids_are_percent_decoded_after_routing_on_the_raw_path() {
    let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-haiku-4-5-v1:0";
    let mock = server(json!({"models": {
        MODEL: {"reply": "from the profile"},
        arn: {"reply": "from the arn"},
    }}))
    .await;
    // botocore encodes `:`; AnthropicBedrock leaves it raw. Both reach the same behaviour.
    for id in [MODEL_ENCODED, MODEL] {
        let res = post_json(
            mock.addr(),
            &path(id, "converse"),
            &[SIGV4],
            &converse_body(),
        )
        .await;
        assert_eq!(
            res.json()["output"]["message"]["content"][0]["text"],
            "from the profile"
        );
    }
    let bearer = ("authorization", "Bearer bedrock-api-key");
    let res = post_json(
        mock.addr(),
        &path(MODEL, "invoke"),
        &[bearer],
        &invoke_body(),
    )
    .await;
    assert_eq!(res.json()["content"][0]["text"], "from the profile");
    assert_eq!(mock.hits(MODEL), 3);
    assert_eq!(mock.last_request(MODEL).unwrap()["auth"], "bearer");
    let endpoints = &mock.stats()["models"][MODEL]["endpoints"];
    assert_eq!(
        *endpoints,
        json!({"/model/{modelId}/converse": 2, "/model/{modelId}/invoke": 1})
    );

    // An ARN: `/` must be `%2F` to stay inside the id.
    let encoded = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-haiku-4-5-v1%3A0";
    let res = post_json(
        mock.addr(),
        &path(encoded, "converse"),
        &[SIGV4],
        &converse_body(),
    )
    .await;
    assert_eq!(
        res.json()["output"]["message"]["content"][0]["text"],
        "from the arn"
    );
    let half = "arn:aws:bedrock:us-east-1:123456789012:inference-profile%2Fus.anthropic.claude-haiku-4-5-v1:0";
    let res = post_json(mock.addr(), &path(half, "invoke"), &[SIGV4], &invoke_body()).await;
    assert_eq!(res.json()["content"][0]["text"], "from the arn");
    assert_eq!(mock.hits(arn), 2);
    assert_eq!(mock.last_request(arn).unwrap()["model"], arn);

    // A raw `/` splits the path: not a Bedrock route.
    let res = post_json(
        mock.addr(),
        &path(arn, "converse"),
        &[SIGV4],
        &converse_body(),
    )
    .await;
    assert_eq!(res.status, 404);
    assert_eq!(mock.total_hits(), 5);
}

#[tokio::test]
async fn tool_calls_on_invoke_and_converse() {
    let mock = server(json!({"models": {MODEL: {"toolCall": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "streamChunks": 2}}})).await;
    let mut invoke = invoke_body();
    invoke["tools"] = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let mut converse = converse_body();
    converse["toolConfig"] =
        json!({"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {}}}}]});

    let body = post_json(mock.addr(), &path(MODEL, "invoke"), &[], &invoke)
        .await
        .json();
    assert_eq!(body["stop_reason"], "tool_use");
    assert_eq!(body["content"][0]["input"], json!({"city": "Paris"}));

    let body = post_json(mock.addr(), &path(MODEL, "converse"), &[], &converse)
        .await
        .json();
    assert_eq!(body["stopReason"], "tool_use");
    let tool_use = &body["output"]["message"]["content"][0]["toolUse"];
    assert!(tool_use["toolUseId"]
        .as_str()
        .unwrap()
        .starts_with("tooluse_"));
    assert_eq!(tool_use["name"], "get_weather");
    assert_eq!(tool_use["input"], json!({"city": "Paris"}));

    // Without toolConfig: text.
    let body = post_json(mock.addr(), &path(MODEL, "converse"), &[], &converse_body())
        .await
        .json();
    assert_eq!(body["stopReason"], "end_turn");

    let res = post_json(mock.addr(), &path(MODEL, "converse-stream"), &[], &converse).await;
    let (frames, _) = decode_event_stream(&res.body());
    let types: Vec<&str> = frames.iter().map(|f| f.header(":event-type")).collect();
    assert_eq!(
        types,
        [
            "messageStart",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata"
        ]
    );
    assert_eq!(frames[1].payload["start"]["toolUse"]["name"], "get_weather");
    let input: String = frames[2..4]
        .iter()
        .map(|f| {
            f.payload["delta"]["toolUse"]["input"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(input, "{\"city\":\"Paris\"}");
    assert_eq!(frames[5].payload["stopReason"], "tool_use");

    let res = post_json(
        mock.addr(),
        &path(MODEL, "invoke-with-response-stream"),
        &[],
        &invoke,
    )
    .await;
    let (frames, _) = decode_event_stream(&res.body());
    let events = chunk_events(&frames);
    assert_eq!(events[1]["content_block"]["type"], "tool_use");
    assert_eq!(events[2]["delta"]["type"], "input_json_delta");
    assert_eq!(events[4 + 1]["delta"]["stop_reason"], "tool_use");
}
