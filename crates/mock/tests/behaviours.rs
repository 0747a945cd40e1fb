//! Scripted behaviours: errors, delays, mid-stream deaths, in-stream errors, seeded flakiness.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{chat, hyper_client, post, read_body, sse_payloads, RawConn, CHAT};
use serde_json::{json, Value};
use sidetrack_mock::prng::SplitMix64;
use sidetrack_mock::{MockConfig, MockServer};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

fn stream_req(model: &str) -> Value {
    json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn status_with_retry_after_uses_the_openai_error_shape() {
    let mock = server(json!({"models": {
        "limited": {"status": 429, "retryAfterSeconds": 2},
        "broken": {"status": 500},
    }}))
    .await;
    let res = chat(mock.addr(), &json!({"model": "limited", "messages": []})).await;
    assert_eq!(res.status, 429);
    assert_eq!(res.header("retry-after"), Some("2"));
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert!(res.header("x-request-id").is_some());
    let error = &res.json()["error"];
    assert_eq!(error["type"], "requests");
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert_eq!(error["param"], Value::Null);

    // A stream request gets the same pre-stream error, not SSE.
    let res = chat(mock.addr(), &stream_req("broken")).await;
    assert_eq!(res.status, 500);
    assert_eq!(res.header("retry-after"), None);
    assert_eq!(
        res.json()["error"],
        json!({"message": "The server had an error while processing your request. Sorry about that!",
               "type": "server_error", "param": null, "code": null})
    );
}

#[tokio::test]
async fn first_byte_delay_holds_the_headers() {
    let mock = server(json!({"models": {"slow": {"firstByteDelayMilliseconds": 150}}})).await;
    let res = chat(mock.addr(), &json!({"model": "slow", "messages": []})).await;
    assert_eq!(res.status, 200);
    assert!(
        res.time_to_head >= Duration::from_millis(150),
        "{:?}",
        res.time_to_head
    );
    // Counted when it arrived, before the delay.
    assert_eq!(mock.hits("slow"), 1);
}

#[tokio::test]
async fn chunk_interval_spaces_the_content_chunks() {
    let mock =
        server(json!({"models": {"m": {"streamChunks": 3, "chunkIntervalMilliseconds": 40}}}))
            .await;
    let started = std::time::Instant::now();
    let res = chat(mock.addr(), &stream_req("m")).await;
    assert!(res.complete);
    // Two gaps between three content chunks.
    assert!(started.elapsed() >= Duration::from_millis(80));
}

#[tokio::test(flavor = "multi_thread")]
async fn drop_after_chunks_kills_the_connection_after_exactly_n_chunks() {
    let mock = server(json!({"models": {"cut": {"streamChunks": 20, "reply": "abcdefghijklmnopqrstuvwxyz", "dropAfterChunks": 3}}})).await;

    // Through hyper's client: the body ends with an error.
    let res = hyper_client()
        .request(post(
            format!("{}{CHAT}", mock.base_url()),
            &stream_req("cut"),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (data, errored) = read_body(res.into_body()).await;
    assert!(errored, "body must end with an error");
    let payloads = sse_payloads(&data);
    assert_eq!(
        payloads.len(),
        1 + 3,
        "role chunk + 3 content chunks: {payloads:?}"
    );
    assert!(!payloads.iter().any(|p| p == "[DONE]"));
    assert!(!payloads
        .iter()
        .any(|p| p.contains("finish_reason\":\"stop")));

    // On the wire: no terminating chunk.
    let mut conn = RawConn::connect(mock.addr()).await;
    let raw = conn
        .send("POST", CHAT, &[], &stream_req("cut").to_string())
        .await;
    assert!(!raw.complete);
    assert_eq!(raw.frames.len(), 4);
}

#[tokio::test]
async fn drop_after_chunks_on_a_non_streaming_request_sends_part_of_the_json() {
    let mock = server(json!({"models": {"cut": {"dropAfterChunks": 1}}})).await;
    let res = hyper_client()
        .request(post(
            format!("{}{CHAT}", mock.base_url()),
            &json!({"model": "cut", "messages": []}),
        ))
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let (data, errored) = read_body(res.into_body()).await;
    assert!(errored);
    assert!(!data.is_empty());
    assert!(serde_json::from_slice::<Value>(&data).is_err());
}

#[tokio::test]
async fn stream_error_after_zero_chunks_sends_the_role_chunk_then_the_error() {
    let mock = server(json!({"models": {"late": {"streamErrorAfterChunks": 0, "streamErrorType": "overloaded_error"}}})).await;
    let res = chat(mock.addr(), &stream_req("late")).await;
    assert_eq!(res.status, 200);
    assert!(res.complete, "the stream ends cleanly, just without [DONE]");
    let payloads = sse_payloads(&res.body());
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    let role: Value = serde_json::from_str(&payloads[0]).unwrap();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        String::from_utf8(res.frames[1].clone()).unwrap(),
        "data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"param\":null,\"code\":null}}\n\n"
    );

    // Non-streaming: the status of the error type.
    let res = chat(mock.addr(), &json!({"model": "late", "messages": []})).await;
    assert_eq!(res.status, 529);
    assert_eq!(res.json()["error"]["type"], "overloaded_error");
}

#[tokio::test]
async fn stream_error_after_chunks_defaults_to_server_error() {
    let mock = server(json!({"models": {"late": {"streamErrorAfterChunks": 2}}})).await;
    let payloads = sse_payloads(&chat(mock.addr(), &stream_req("late")).await.body());
    assert_eq!(payloads.len(), 1 + 2 + 1);
    let error: Value = serde_json::from_str(&payloads[3]).unwrap();
    assert_eq!(error["error"]["type"], "server_error");
    let res = chat(mock.addr(), &json!({"model": "late", "messages": []})).await;
    assert_eq!(res.status, 500);
}

async fn statuses(mock: &MockServer, model: &str, n: usize) -> Vec<u16> {
    let mut conn = RawConn::connect(mock.addr()).await;
    let body = json!({"model": model, "messages": []}).to_string();
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(conn.send("POST", CHAT, &[], &body).await.status);
    }
    out
}

#[tokio::test]
async fn failure_rate_with_seed_is_deterministic() {
    let config = json!({"models": {"flaky": {"failureRate": 0.3, "status": 503, "seed": 7}}});
    let mock = server(config.clone()).await;
    let first = statuses(&mock, "flaky", 40).await;

    let mut g = SplitMix64::new(7);
    let expected: Vec<u16> = (0..40)
        .map(|_| if g.next_f64() < 0.3 { 503 } else { 200 })
        .collect();
    assert_eq!(first, expected);
    assert!(first.contains(&503) && first.contains(&200));

    mock.reset();
    assert_eq!(statuses(&mock, "flaky", 40).await, first, "after reset");
    let other = server(config).await;
    assert_eq!(statuses(&other, "flaky", 40).await, first, "another server");
}

#[tokio::test]
async fn failure_rate_defaults_to_503() {
    let mock = server(json!({"models": {"dead": {"failureRate": 1.0}}})).await;
    assert_eq!(statuses(&mock, "dead", 3).await, vec![503, 503, 503]);
}

/// Reads `body` until `n` bytes have come (or it ends); returns what came.
async fn read_at_least(mut body: hyper::body::Incoming, n: usize) -> Vec<u8> {
    use http_body_util::BodyExt;
    let mut got = Vec::new();
    while got.len() < n {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    got.extend_from_slice(&d);
                }
            }
            _ => break,
        }
    }
    got
}

#[tokio::test]
async fn hostile_streams_never_end_their_line_or_event() {
    let mock = server(json!({"models": {
        "line": {"hostile": "endlessLine", "hostileAfterChunks": 1},
        "comment": {"hostile": "endlessComment"},
        "event": {"hostile": "endlessEvent"},
    }}))
    .await;
    let client = hyper_client();
    for (model, starts_with, newline_free) in [
        ("line", "data: ", true),
        ("comment", ": ", true),
        ("event", "data: ", false),
    ] {
        let res = client
            .request(post(
                format!("http://{}{CHAT}", mock.addr()),
                &stream_req(model),
            ))
            .await
            .unwrap();
        assert_eq!(res.status(), 200, "{model}");
        let got = read_at_least(res.into_body(), 2 << 20).await;
        assert!(got.len() >= 2 << 20, "{model}: the body went on past 2 MiB");
        let text = String::from_utf8_lossy(&got);
        // The preamble (and for `line` one content chunk) come as usual, then the hostile part.
        let events = text.matches("\n\n").count();
        let hostile = &text[text.rfind("\n\n").map_or(0, |i| i + 2)..];
        assert!(
            hostile.starts_with(starts_with),
            "{model}: {}",
            &hostile[..20]
        );
        if newline_free {
            assert!(!hostile.contains('\n'), "{model}: one line");
        } else {
            assert!(
                hostile.matches("\ndata: ").count() > 10,
                "{model}: many data lines"
            );
        }
        let expected_events = if model == "line" { 2 } else { 1 };
        assert_eq!(
            events, expected_events,
            "{model}: whole events before the hostile part"
        );
    }
}

#[tokio::test]
async fn a_huge_event_is_whole_and_the_stream_ends_normally() {
    let mock =
        server(json!({"models": {"huge": {"hostile": "hugeEvent", "hostileBytes": 3000000}}}))
            .await;
    let res = hyper_client()
        .request(post(
            format!("http://{}{CHAT}", mock.addr()),
            &stream_req("huge"),
        ))
        .await
        .unwrap();
    let (body, failed) = read_body(res.into_body()).await;
    assert!(!failed);
    let payloads = sse_payloads(&body);
    let lens: Vec<usize> = payloads.iter().map(String::len).collect();
    assert!(
        payloads
            .iter()
            .any(|p| p.len() > 3_000_000 && p.starts_with("{\"huge\":")),
        "{lens:?}"
    );
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn endless_bodies_no_headers_and_wrong_encodings() {
    let mock = server(json!({"models": {
        "endless": {"hostile": "endlessBody"},
        "silent": {"hostile": "noHeaders"},
        "gz": {"contentEncoding": "gzip"},
    }}))
    .await;
    let client = hyper_client();
    let uri = format!("http://{}{CHAT}", mock.addr());
    let req = |m: &str| post(uri.clone(), &json!({"model": m, "messages": []}));

    let res = client.request(req("endless")).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["content-type"], "application/json");
    let got = read_at_least(res.into_body(), 1 << 20).await;
    assert!(got.len() >= 1 << 20 && got.starts_with(b"{\"id\":\"aaa"));

    let silent =
        tokio::time::timeout(Duration::from_millis(300), client.request(req("silent"))).await;
    assert!(silent.is_err(), "no answer ever comes");

    // The header says gzip; the body is the plain JSON answer.
    let res = client.request(req("gz")).await.unwrap();
    assert_eq!(res.headers()["content-encoding"], "gzip");
    let (body, _) = read_body(res.into_body()).await;
    assert!(serde_json::from_slice::<Value>(&body).is_ok());
}
