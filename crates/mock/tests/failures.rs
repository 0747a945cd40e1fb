//! The failures a retry controller must handle (issue 16): the first K requests failing, provider
//! error bodies per dialect, a late first content event, an idle gap mid-stream, a slow answer,
//! and the `cancelled` count of callers that went away. Every dialect, on real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use common::{
    decode_event_stream, hyper_client, post, post_json, sse_named_events, sse_payloads, CHAT,
    MESSAGES, RESPONSES,
};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sidetrack_mock::{MockConfig, MockServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

/// The wire formats, each with its request path and body for a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum D {
    Chat,
    Responses,
    Anthropic,
    BedrockInvoke,
    BedrockConverse,
}

const ALL: [D; 5] = [
    D::Chat,
    D::Responses,
    D::Anthropic,
    D::BedrockInvoke,
    D::BedrockConverse,
];

impl D {
    fn path(self, model: &str, stream: bool) -> String {
        match (self, stream) {
            (D::Chat, _) => CHAT.to_owned(),
            (D::Responses, _) => RESPONSES.to_owned(),
            (D::Anthropic, _) => MESSAGES.to_owned(),
            (D::BedrockInvoke, false) => format!("/model/{model}/invoke"),
            (D::BedrockInvoke, true) => format!("/model/{model}/invoke-with-response-stream"),
            (D::BedrockConverse, false) => format!("/model/{model}/converse"),
            (D::BedrockConverse, true) => format!("/model/{model}/converse-stream"),
        }
    }

    fn body(self, model: &str, stream: bool) -> Value {
        match self {
            D::Chat => json!({"model": model, "stream": stream,
                              "messages": [{"role": "user", "content": "hi"}]}),
            D::Responses => json!({"model": model, "stream": stream, "input": "hi"}),
            D::Anthropic => json!({"model": model, "max_tokens": 64, "stream": stream,
                                   "messages": [{"role": "user", "content": "hi"}]}),
            D::BedrockInvoke => json!({"anthropic_version": "bedrock-2023-05-31",
                                       "max_tokens": 64,
                                       "messages": [{"role": "user", "content": "hi"}]}),
            D::BedrockConverse => {
                json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]})
            }
        }
    }

    fn bedrock(self) -> bool {
        matches!(self, D::BedrockInvoke | D::BedrockConverse)
    }
}

async fn send(mock: &MockServer, d: D, model: &str, stream: bool) -> common::RawResponse {
    post_json(
        mock.addr(),
        &d.path(model, stream),
        &[],
        &d.body(model, stream),
    )
    .await
}

/// A streamed answer with the arrival time of the head and of every body frame.
struct Timed {
    status: u16,
    head: Duration,
    frames: Vec<(Duration, Bytes)>,
}

impl Timed {
    /// The scripted content chunks (`"AB"`, `"CD"`, ...) visible in the first `n` frames.
    fn chunks_in_first(&self, d: D, n: usize) -> Vec<&'static str> {
        let bytes: Vec<u8> = self.frames[..n]
            .iter()
            .flat_map(|(_, b)| b.to_vec())
            .collect();
        let text = readable(d, &bytes);
        CHUNKS
            .into_iter()
            .filter(|c| text.contains(&format!("\"{c}\"")))
            .collect()
    }

    /// Index of the first frame that shows the chunk.
    fn frame_of(&self, d: D, chunk: &str) -> usize {
        (1..=self.frames.len())
            .find(|&n| self.chunks_in_first(d, n).contains(&chunk))
            .map(|n| n - 1)
            .unwrap_or_else(|| panic!("{d:?}: chunk {chunk} never came"))
    }
}

const REPLY: &str = "ABCDEFGH";
const CHUNKS: [&str; 4] = ["AB", "CD", "EF", "GH"];

/// The stream as text: SSE as it is; Bedrock event-stream messages decoded (invoke `chunk`
/// payloads base64-decoded).
fn readable(d: D, bytes: &[u8]) -> String {
    if !d.bedrock() {
        return String::from_utf8(bytes.to_vec()).unwrap();
    }
    let (frames, _partial) = decode_event_stream(bytes);
    frames
        .iter()
        .map(|f| match f.payload["bytes"].as_str() {
            Some(b64) => String::from_utf8(STANDARD.decode(b64).unwrap()).unwrap(),
            None => f.payload.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn timed(addr: SocketAddr, d: D, model: &str) -> Timed {
    let started = Instant::now();
    let res = hyper_client()
        .request(post(
            format!("http://{addr}{}", d.path(model, true)),
            &d.body(model, true),
        ))
        .await
        .unwrap();
    let head = started.elapsed();
    let status = res.status().as_u16();
    let mut body = res.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            frames.push((started.elapsed(), data));
        }
    }
    Timed {
        status,
        head,
        frames,
    }
}

#[tokio::test]
async fn fail_first_fails_exactly_k_requests_per_model_in_every_dialect() {
    let mut models = serde_json::Map::new();
    for d in ALL {
        models.insert(format!("ff-{d:?}"), json!({"failFirst": 2, "status": 503}));
    }
    let mock = server(json!({ "models": models })).await;
    for d in ALL {
        let model = format!("ff-{d:?}");
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let res = send(&mock, d, &model, false).await;
            if res.status == 503 {
                // The dialect's own error shape.
                let body = res.json();
                match d {
                    D::Chat | D::Responses => assert_eq!(body["error"]["type"], "server_error"),
                    D::Anthropic => {
                        assert_eq!(body["type"], "error");
                        assert_eq!(body["error"]["type"], "api_error");
                    }
                    D::BedrockInvoke | D::BedrockConverse => {
                        assert_eq!(
                            res.header("x-amzn-errortype"),
                            Some("ServiceUnavailableException")
                        );
                        assert!(body["message"].is_string());
                    }
                }
            }
            statuses.push(res.status);
        }
        assert_eq!(statuses, [503, 503, 200, 200], "{d:?}");
        assert_eq!(mock.hits(&model), 4);
    }
}

#[tokio::test]
async fn fail_first_restarts_on_reset_and_on_a_new_behaviour_and_streams_fail_before_the_head() {
    let mock = server(json!({"models": {"flaky": {"failFirst": 1, "status": 429,
                                                   "retryAfterSeconds": 1}}}))
    .await;
    let statuses = |mock: &MockServer, n: usize| {
        let addr = mock.addr();
        async move {
            let mut out = Vec::new();
            for _ in 0..n {
                out.push(post_json(addr, CHAT, &[], &D::Chat.body("flaky", true)).await);
            }
            out
        }
    };
    let first = statuses(&mock, 2).await;
    assert_eq!(first[0].status, 429);
    assert_eq!(first[0].header("retry-after"), Some("1"));
    assert_eq!(first[0].json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(first[1].status, 200);
    assert!(sse_payloads(&first[1].body()).contains(&"[DONE]".to_owned()));

    // Reset: the count starts again.
    let reset = post_json(mock.addr(), "/_mock/reset", &[], &json!({})).await;
    assert_eq!(reset.status, 200);
    let again = statuses(&mock, 2).await;
    assert_eq!((again[0].status, again[1].status), (429, 200));

    // A new behaviour (control API) starts its own count; the default failing status is 503.
    let set = post_json(
        mock.addr(),
        "/_mock/models/flaky",
        &[],
        &json!({"failFirst": 3}),
    )
    .await;
    assert_eq!(set.status, 200);
    let statuses: Vec<u16> = statuses(&mock, 4).await.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 503, 200]);

    // `failFirst` with a non-error, non-2xx status is refused.
    let bad = post_json(
        mock.addr(),
        "/_mock/models/flaky",
        &[],
        &json!({"failFirst": 1, "status": 302}),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().starts_with("status:"));
}

#[tokio::test]
async fn error_knob_scripts_the_providers_real_error_bodies() {
    let mock = server(json!({"models": {
        "ctx": {"status": 400, "error": {"type": "invalid_request_error",
                "code": "context_length_exceeded", "param": "messages",
                "message": "This model's maximum context length is 128000 tokens."}},
        "quota": {"status": 429, "error": {"type": "insufficient_quota", "code": "insufficient_quota",
                  "message": "You exceeded your current quota."}},
        "rate": {"status": 429, "error": {"type": "tokens", "code": "rate_limit_exceeded"}},
        "filter": {"status": 400, "error": {"type": "invalid_request_error",
                   "code": "content_policy_violation", "message": "Your request was rejected."}},
        "long": {"status": 400, "error": {"type": "invalid_request_error",
                 "message": "prompt is too long: 210000 tokens > 200000 maximum"}},
        "overloaded": {"status": 529, "error": {"type": "overloaded_error"}},
        "bedrock-long": {"status": 400, "error": {"type": "ValidationException",
                         "message": "Input is too long for requested model."}},
        "bedrock-unknown": {"status": 429, "error": {"type": "rate_limit_exceeded"}},
    }}))
    .await;

    // OpenAI: all four keys, the scripted ones verbatim.
    for d in [D::Chat, D::Responses] {
        let res = send(&mock, d, "ctx", false).await;
        assert_eq!(res.status, 400);
        assert_eq!(
            res.json(),
            json!({"error": {"message": "This model's maximum context length is 128000 tokens.",
                             "type": "invalid_request_error", "param": "messages",
                             "code": "context_length_exceeded"}})
        );
    }
    let res = send(&mock, D::Chat, "quota", true).await;
    assert_eq!(res.status, 429);
    assert_eq!(
        res.json(),
        json!({"error": {"message": "You exceeded your current quota.",
                         "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}})
    );
    let res = send(&mock, D::Chat, "rate", false).await;
    assert_eq!(res.status, 429);
    let error = &res.json()["error"];
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("tokens"), &json!("rate_limit_exceeded"))
    );
    assert!(error["message"].as_str().unwrap().contains("Rate limit"));
    let res = send(&mock, D::Chat, "filter", false).await;
    assert_eq!(res.json()["error"]["code"], "content_policy_violation");

    // Anthropic: type + message; the envelope and request_id as always.
    let res = send(&mock, D::Anthropic, "long", false).await;
    assert_eq!(res.status, 400);
    let body = res.json();
    assert_eq!(body["type"], "error");
    assert_eq!(
        body["error"],
        json!({"type": "invalid_request_error",
               "message": "prompt is too long: 210000 tokens > 200000 maximum"})
    );
    assert!(body["request_id"].is_string());
    let res = send(&mock, D::Anthropic, "overloaded", false).await;
    assert_eq!(res.status, 529);
    assert_eq!(
        res.json()["error"],
        json!({"type": "overloaded_error", "message": "Overloaded"})
    );

    // Bedrock: the shape in x-amzn-ErrorType, the message in the body.
    for d in [D::BedrockInvoke, D::BedrockConverse] {
        let res = send(&mock, d, "bedrock-long", false).await;
        assert_eq!(res.status, 400);
        assert_eq!(res.header("x-amzn-errortype"), Some("ValidationException"));
        assert_eq!(
            res.json(),
            json!({"message": "Input is too long for requested model."})
        );
        // A type that is no Bedrock exception: the status picks the shape.
        let res = send(&mock, d, "bedrock-unknown", true).await;
        assert_eq!(res.status, 429);
        assert_eq!(res.header("x-amzn-errortype"), Some("ThrottlingException"));
    }
}

#[tokio::test]
async fn error_knob_shapes_the_in_stream_error_event_of_every_dialect() {
    let mock = server(json!({"models": {"*": {
        "reply": REPLY, "streamChunks": 4, "streamErrorAfterChunks": 1,
        "error": {"type": "ThrottlingException", "code": "rate_limit_exceeded",
                  "message": "slow down please"}}}}))
    .await;

    let res = send(&mock, D::Chat, "m", true).await;
    assert_eq!(res.status, 200);
    let payloads = sse_payloads(&res.body());
    assert_eq!(
        serde_json::from_str::<Value>(payloads.last().unwrap()).unwrap(),
        json!({"error": {"message": "slow down please", "type": "ThrottlingException",
                         "param": null, "code": "rate_limit_exceeded"}})
    );

    let res = send(&mock, D::Responses, "m", true).await;
    let (name, event) = sse_named_events(&res.body()).pop().unwrap();
    assert_eq!(name, "error");
    assert_eq!(event["code"], "rate_limit_exceeded");
    assert_eq!(event["message"], "slow down please");

    let res = send(&mock, D::Anthropic, "m", true).await;
    let (name, event) = sse_named_events(&res.body()).pop().unwrap();
    assert_eq!(name, "error");
    assert_eq!(
        event,
        json!({"type": "error", "error": {"type": "ThrottlingException", "message": "slow down please"}})
    );

    for d in [D::BedrockInvoke, D::BedrockConverse] {
        let res = send(&mock, d, "m", true).await;
        assert_eq!(res.status, 200);
        let (frames, partial) = decode_event_stream(&res.body());
        assert_eq!(partial, 0);
        let last = frames.last().unwrap();
        assert_eq!(last.header(":message-type"), "exception");
        assert_eq!(last.header(":exception-type"), "throttlingException");
        assert_eq!(last.payload, json!({"message": "slow down please"}));
    }

    // streamErrorType still wins for the event's type; a non-streamed request gets its status.
    mock.set_behaviour(
        "m",
        serde_json::from_value(json!({"streamErrorAfterChunks": 0,
            "streamErrorType": "overloaded_error", "error": {"message": "busy"}}))
        .unwrap(),
    );
    let res = send(&mock, D::Anthropic, "m", true).await;
    let (_, event) = sse_named_events(&res.body()).pop().unwrap();
    assert_eq!(
        event["error"],
        json!({"type": "overloaded_error", "message": "busy"})
    );
    let res = send(&mock, D::Anthropic, "m", false).await;
    assert_eq!(res.status, 529);
    assert_eq!(
        res.json()["error"],
        json!({"type": "overloaded_error", "message": "busy"})
    );
}

const DELAY: Duration = Duration::from_millis(600);
/// How much earlier than the late event the events before it must have arrived: they went out at
/// once, not after the wait (generous for a loaded machine).
const EARLY: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread")]
async fn first_content_delay_sends_the_preamble_at_once_then_waits_in_every_dialect() {
    let mock = server(json!({"models": {"*": {"reply": REPLY, "streamChunks": 4,
        "firstContentDelayMilliseconds": DELAY.as_millis() as u64}}}))
    .await;
    for d in ALL {
        let t = timed(mock.addr(), d, "us.anthropic.claude-haiku-4-5-v1:0").await;
        assert_eq!(t.status, 200, "{d:?}");
        let first = t.frame_of(d, "AB");
        assert!(first >= 1, "{d:?}: a preamble comes before the content");
        assert!(t.chunks_in_first(d, first).is_empty(), "{d:?}");
        let (at, _) = t.frames[first];
        assert!(at >= DELAY, "{d:?}: first content after {at:?}");
        let (preamble_at, _) = t.frames[first - 1];
        assert!(
            preamble_at + EARLY <= at && t.head + EARLY <= at,
            "{d:?}: head {:?} and preamble {preamble_at:?} must not wait for the content at {at:?}",
            t.head
        );
        // And the rest of the stream is whole.
        assert_eq!(t.chunks_in_first(d, t.frames.len()), CHUNKS, "{d:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_gap_silences_the_stream_after_n_chunks_in_every_dialect() {
    let mock = server(json!({"models": {"*": {"reply": REPLY, "streamChunks": 4,
        "idleGapMilliseconds": DELAY.as_millis() as u64, "idleAfterChunks": 2}}}))
    .await;
    for d in ALL {
        let t = timed(mock.addr(), d, "m").await;
        assert_eq!(t.status, 200, "{d:?}");
        let third = t.frame_of(d, "EF");
        assert_eq!(t.chunks_in_first(d, third), ["AB", "CD"], "{d:?}");
        let (at, _) = t.frames[third];
        let (second_at, _) = t.frames[t.frame_of(d, "CD")];
        assert!(at >= DELAY, "{d:?}");
        assert!(second_at + EARLY <= at, "{d:?}: {second_at:?} vs {at:?}");
        assert_eq!(t.chunks_in_first(d, t.frames.len()), CHUNKS, "{d:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_answer_is_first_byte_delay_on_a_non_streamed_request_in_every_dialect() {
    let mock = server(json!({"models": {"*": {"reply": REPLY,
        "firstByteDelayMilliseconds": DELAY.as_millis() as u64}}}))
    .await;
    for d in ALL {
        let res = send(&mock, d, "m", false).await;
        assert_eq!(res.status, 200, "{d:?}");
        assert!(res.time_to_head >= DELAY, "{d:?}: {:?}", res.time_to_head);
        assert!(res.complete);
        assert!(
            res.json().to_string().contains(REPLY),
            "{d:?}: the whole answer"
        );
    }
}

/// Polls `cancelled(model)` until it is `want` (bounded).
async fn wait_cancelled(mock: &MockServer, model: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = mock.cancelled(model);
        if got >= want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_goes_away_mid_stream_is_counted_as_cancelled() {
    let mock = server(json!({"models": {"*": {"reply": REPLY, "streamChunks": 4,
        "chunkIntervalMilliseconds": 200}}}))
    .await;
    for d in ALL {
        let model = format!("hedge-{d:?}");
        // A complete answer is not cancelled.
        let res = send(&mock, d, &model, true).await;
        assert!(res.complete, "{d:?}");
        assert_eq!(mock.cancelled(&model), 0, "{d:?}");

        // Read the head and the first frame, then hang up.
        let res = hyper_client()
            .request(post(
                format!("{}{}", mock.base_url(), d.path(&model, true)),
                &d.body(&model, true),
            ))
            .await
            .unwrap();
        let mut body = res.into_body();
        assert!(body.frame().await.unwrap().is_ok());
        drop(body);
        assert_eq!(wait_cancelled(&mock, &model, 1).await, 1, "{d:?}");
        assert_eq!(mock.hits(&model), 2);
    }
    let stats = mock.stats();
    assert_eq!(stats["models"]["hedge-Chat"]["cancelled"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_goes_away_before_a_slow_answer_is_counted_and_errors_are_not() {
    let mock = server(json!({"models": {
        "slow": {"firstByteDelayMilliseconds": 30000},
        "broken": {"status": 500},
    }}))
    .await;
    let body = D::Chat.body("slow", false).to_string();
    let mut conn = tokio::net::TcpStream::connect(mock.addr()).await.unwrap();
    let req = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    // Wait until the mock has the request, then hang up while it is still thinking.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.hits("slow") == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.hits("slow"), 1);
    assert_eq!(mock.cancelled("slow"), 0);
    drop(conn);
    assert_eq!(wait_cancelled(&mock, "slow", 1).await, 1);

    // Whole answers read to the end count nothing, errors included.
    let res = send(&mock, D::Chat, "broken", false).await;
    assert_eq!(res.status, 500);
    let res = send(&mock, D::Anthropic, "fine", false).await;
    assert_eq!(res.status, 200);
    let mut probe = tokio::net::TcpStream::connect(mock.addr()).await.unwrap();
    probe
        .write_all(b"GET /_mock/stats HTTP/1.1\r\nhost: mock\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = Vec::new();
    probe.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let stats: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(stats["models"]["slow"]["cancelled"], 1);
    assert_eq!(stats["models"]["broken"]["cancelled"], 0);
    assert_eq!(stats["models"]["fine"]["cancelled"], 0);
}

#[tokio::test]
async fn content_filtered_answers_carry_each_providers_filter_stop() {
    let mock = server(json!({"models": {"*": {"reply": REPLY, "contentFiltered": true}}})).await;

    let res = send(&mock, D::Chat, "m", false).await;
    assert_eq!(res.status, 200);
    assert_eq!(res.json()["choices"][0]["finish_reason"], "content_filter");
    let payloads = sse_payloads(&send(&mock, D::Chat, "m", true).await.body());
    let finish: Value = serde_json::from_str(&payloads[payloads.len() - 2]).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "content_filter");
    assert_eq!(payloads.last().unwrap(), "[DONE]");

    let body = send(&mock, D::Responses, "m", false).await.json();
    assert_eq!(body["status"], "incomplete");
    assert_eq!(
        body["incomplete_details"],
        json!({"reason": "content_filter"})
    );
    let (name, event) = sse_named_events(&send(&mock, D::Responses, "m", true).await.body())
        .pop()
        .unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(event["type"], "response.incomplete");
    assert_eq!(event["response"]["status"], "incomplete");

    assert_eq!(
        send(&mock, D::Anthropic, "m", false).await.json()["stop_reason"],
        "refusal"
    );
    let events = sse_named_events(&send(&mock, D::Anthropic, "m", true).await.body());
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "refusal");

    assert_eq!(
        send(&mock, D::BedrockConverse, "m", false).await.json()["stopReason"],
        "guardrail_intervened"
    );
    let res = send(&mock, D::BedrockConverse, "m", true).await;
    let (frames, _) = decode_event_stream(&res.body());
    let stop = frames
        .iter()
        .find(|f| f.header(":event-type") == "messageStop")
        .unwrap();
    assert_eq!(stop.payload["stopReason"], "guardrail_intervened");
    assert_eq!(
        send(&mock, D::BedrockInvoke, "m", false).await.json()["stop_reason"],
        "refusal"
    );

    // Without the knob: the usual stops.
    mock.set_behaviour("m", sidetrack_mock::Behaviour::default());
    assert_eq!(
        send(&mock, D::Chat, "m", false).await.json()["choices"][0]["finish_reason"],
        "stop"
    );
}
