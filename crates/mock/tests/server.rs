//! Listeners, connections, stats and the control API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{chat, hyper_client, post, read_body, request, RawConn, CHAT};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use sidetrack_mock::{Behaviour, MockConfig, MockServer};

async fn server(config: Value) -> MockServer {
    MockServer::start(serde_json::from_value::<MockConfig>(config).unwrap())
        .await
        .unwrap()
}

fn body(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn refused_connections_fail_the_client_and_count_nothing() {
    let mock = server(json!({"refuseConnections": true})).await;
    let result = hyper_client()
        .request(post(format!("{}{CHAT}", mock.base_url()), &body("m")))
        .await;
    assert!(
        result.is_err(),
        "expected a connection error, got {result:?}"
    );

    let mut conn = RawConn::connect(mock.addr()).await;
    assert!(conn.closed_by_server().await);
    assert_eq!(mock.total_hits(), 0);
}

#[tokio::test]
async fn refusing_at_runtime_kills_open_connections_and_can_be_undone() {
    let mock = server(json!({})).await;
    let mut pooled = RawConn::connect(mock.addr()).await;
    assert_eq!(
        pooled
            .send("POST", CHAT, &[], &body("m").to_string())
            .await
            .status,
        200
    );

    mock.set_refuse_connections(true);
    assert!(
        pooled.closed_by_server().await,
        "open keep-alive connection is reset"
    );
    let mut fresh = RawConn::connect(mock.addr()).await;
    assert!(fresh.closed_by_server().await, "new connection is reset");

    mock.set_refuse_connections(false);
    assert_eq!(chat(mock.addr(), &body("m")).await.status, 200);
    assert_eq!(mock.hits("m"), 2);
}

#[tokio::test]
async fn extra_listeners_serve_the_same_models_and_refuse_independently() {
    let mock = server(json!({
        "models": {"m": {"reply": "shared"}},
        "listeners": [
            {"listen": "127.0.0.1:0"},
            {"listen": "127.0.0.1:0", "refuseConnections": true},
        ],
    }))
    .await;
    let addrs = mock.addrs();
    assert_eq!(addrs.len(), 3);
    assert_eq!(addrs[0], mock.addr());
    for addr in &addrs[..2] {
        let res = chat(*addr, &body("m")).await;
        assert_eq!(res.json()["choices"][0]["message"]["content"], "shared");
    }
    assert!(RawConn::connect(addrs[2]).await.closed_by_server().await);
    assert_eq!(mock.hits("m"), 2);

    assert!(mock.set_listener_refuse_connections(2, false));
    assert_eq!(chat(addrs[2], &body("m")).await.status, 200);
    assert!(!mock.set_listener_refuse_connections(3, true));
}

#[tokio::test]
async fn keep_alive_serves_several_requests_on_one_connection() {
    let mock = server(json!({})).await;
    let mut conn = RawConn::connect(mock.addr()).await;
    let plain = conn.send("POST", CHAT, &[], &body("a").to_string()).await;
    assert_eq!(plain.status, 200);
    let stream = json!({"model": "a", "stream": true, "messages": []}).to_string();
    let streamed = conn.send("POST", CHAT, &[], &stream).await;
    assert!(streamed.complete);
    let again = conn.send("POST", CHAT, &[], &body("a").to_string()).await;
    assert_eq!(again.status, 200);
    assert_eq!(mock.hits("a"), 3);
}

#[tokio::test]
async fn http2_prior_knowledge_works() {
    let mock = server(json!({})).await;
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let stream = json!({"model": "h2", "stream": true, "messages": []});
    let res = client
        .request(post(format!("{}{CHAT}", mock.base_url()), &stream))
        .await
        .unwrap();
    assert_eq!(res.version(), http::Version::HTTP_2);
    let (data, errored) = read_body(res.into_body()).await;
    assert!(!errored);
    assert!(data.ends_with(b"data: [DONE]\n\n"));
}

#[tokio::test]
async fn stats_count_hits_per_model_and_endpoint_and_reset_zeroes_them() {
    let mock = server(json!({"models": {"m": {"status": 500}}})).await;
    for model in ["m", "m", "other"] {
        chat(mock.addr(), &body(model)).await;
    }
    assert_eq!(mock.hits("m"), 2);
    assert_eq!(mock.hits("other"), 1);
    assert_eq!(mock.hits("never"), 0);
    assert_eq!(mock.total_hits(), 3);

    let stats = request(mock.addr(), "GET", "/_mock/stats", "").await.json();
    assert_eq!(stats, mock.stats());
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["models"]["m"]["hits"], 2);
    assert_eq!(
        stats["models"]["m"]["endpoints"],
        json!({"/v1/chat/completions": 2})
    );
    assert_eq!(mock.total_hits(), 3, "control requests are not hits");

    let res = request(mock.addr(), "POST", "/_mock/reset", "").await;
    assert_eq!(res.status, 200);
    assert_eq!(
        mock.stats(),
        json!({"total": 0, "models": {}, "tokenRequests": 0, "tokensIssued": 0})
    );
    assert_eq!(mock.last_request("m"), None);
}

#[tokio::test]
async fn last_request_records_lowercase_headers_and_body() {
    let mock = server(json!({})).await;
    let mut conn = RawConn::connect(mock.addr()).await;
    let sent = json!({"model": "rewritten", "messages": [{"role": "user", "content": "x"}]});
    conn.send(
        "POST",
        CHAT,
        &[("Authorization", "Bearer sk-test"), ("X-Extra", "1")],
        &sent.to_string(),
    )
    .await;
    let last = mock.last_request("rewritten").unwrap();
    assert_eq!(last["path"], CHAT);
    assert_eq!(last["body"], sent);
    assert_eq!(last["headers"]["authorization"], "Bearer sk-test");
    assert_eq!(last["headers"]["x-extra"], "1");
    assert_eq!(last["model"], "rewritten");
    assert_eq!(last["auth"], "bearer");
    assert_eq!(mock.stats()["models"]["rewritten"]["lastRequest"], last);
}

#[tokio::test]
async fn behaviours_change_at_runtime_and_reset_restores_the_config() {
    let mock = server(json!({"models": {"m": {"reply": "original"}}})).await;
    let reply = |res: common::RawResponse| res.json()["choices"][0]["message"]["content"].clone();

    mock.set_behaviour(
        "m",
        Behaviour {
            status: Some(503),
            ..Behaviour::default()
        },
    );
    assert_eq!(chat(mock.addr(), &body("m")).await.status, 503);

    // Through the control API, on a model with an id-like name.
    let res = request(
        mock.addr(),
        "POST",
        "/_mock/models/anthropic.claude-v2%3A1",
        r#"{"reply": "patched"}"#,
    )
    .await;
    assert_eq!(res.status, 200);
    assert_eq!(
        reply(chat(mock.addr(), &body("anthropic.claude-v2:1")).await),
        "patched"
    );

    let res = request(
        mock.addr(),
        "POST",
        "/_mock/models/m",
        r#"{"replyy": "typo"}"#,
    )
    .await;
    assert_eq!(res.status, 400, "unknown fields are rejected");
    let res = request(
        mock.addr(),
        "POST",
        "/_mock/models/m",
        r#"{"failureRate": 2}"#,
    )
    .await;
    assert_eq!(res.status, 400);
    assert!(res.json()["error"]
        .as_str()
        .unwrap()
        .contains("failureRate"));

    mock.set_refuse_connections(true);
    mock.reset();
    assert_eq!(reply(chat(mock.addr(), &body("m")).await), "original");
    assert_eq!(
        reply(chat(mock.addr(), &body("anthropic.claude-v2:1")).await),
        "hello from anthropic.claude-v2:1"
    );
}

#[tokio::test]
async fn invalid_config_is_rejected_at_start() {
    let config: MockConfig =
        serde_json::from_value(json!({"models": {"m": {"status": 99}}})).unwrap();
    let err = MockServer::start(config).await.err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("models.m.status"), "{err}");
    assert!(serde_json::from_value::<MockConfig>(json!({"modles": {}})).is_err());

    for arguments in ["[1]", "{not json", ""] {
        let config: MockConfig = serde_json::from_value(
            json!({"models": {"m": {"toolCall": {"name": "f", "arguments": arguments}}}}),
        )
        .unwrap();
        let err = MockServer::start(config).await.err().unwrap();
        assert!(
            err.to_string().contains("models.m.toolCall.arguments"),
            "{err}"
        );
    }
    assert!(serde_json::from_value::<MockConfig>(
        json!({"models": {"m": {"toolCall": {"name": "f", "args": "{}"}}}})
    )
    .is_err());
}

#[tokio::test]
async fn shutdown_closes_listeners_and_connections() {
    let mock = server(json!({})).await;
    let addr = mock.addr();
    let mut conn = RawConn::connect(addr).await;
    assert_eq!(
        conn.send("POST", CHAT, &[], &body("m").to_string())
            .await
            .status,
        200
    );
    mock.shutdown().await;
    assert!(conn.closed_by_server().await);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn hits_count_before_the_delay_and_shutdown_aborts_stalled_requests() {
    let mock = server(json!({"models": {"stalled": {"firstByteDelayMilliseconds": 60000}}})).await;
    let stalled = tokio::spawn(
        hyper_client().request(post(format!("{}{CHAT}", mock.base_url()), &body("stalled"))),
    );
    // Stats come over other connections, answered while the first request stalls.
    while request(mock.addr(), "GET", "/_mock/stats", "").await.json()["models"]["stalled"]["hits"]
        != 1
    {
        tokio::task::yield_now().await;
    }
    mock.shutdown().await;
    assert!(
        stalled.await.unwrap().is_err(),
        "the stalled request dies with the server"
    );
}
