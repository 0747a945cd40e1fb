//! The properties the gateway's fuzz targets check, one function per target. Shared by the
//! targets in fuzz_targets/ and by crates/gateway/tests/fuzz_inputs.rs, which runs them over a
//! few thousand generated inputs in every `cargo test` (both include this file with `#[path]`).
#![allow(dead_code)]

use std::time::Duration;

use http::header::{HeaderValue, CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, Method, Uri};
use sidetrack_dialects::bedrock::{decode_model_id, encode_model_id};
use sidetrack_gateway::server::paths::{self, DataPath};
use sidetrack_gateway::{GatewayHandle, GatewayOptions, RoutingLog};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A data-plane path: its classification rebuilds it exactly, a Bedrock id segment decodes to an
/// id that encodes back to an equivalent segment, and any text survives encode → decode.
pub fn request_path(data: &[u8]) {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    match paths::data_path(path) {
        DataPath::Dialect(p, _) => assert_eq!(p, path),
        DataPath::Bedrock { raw_id, operation } => {
            assert!(!raw_id.is_empty() && !operation.is_empty(), "{path:?}");
            assert!(
                !raw_id.contains('/') && !operation.contains('/'),
                "{path:?}"
            );
            let rebuilt = format!("/model/{raw_id}/{operation}");
            assert!(
                path == rebuilt || path.strip_prefix("/inference") == Some(&rebuilt),
                "{path:?} is not {rebuilt:?}"
            );
            let _ = paths::bedrock_operation(operation);
            if let Some(id) = decode_model_id(raw_id) {
                let again = encode_model_id(&id);
                assert_eq!(decode_model_id(&again).as_deref(), Some(id.as_str()));
            }
        }
        DataPath::Gemini {
            raw_model,
            operation,
        } => {
            assert!(
                !raw_model.is_empty() && !raw_model.contains('/'),
                "{path:?}"
            );
            let rebuilt = format!("/models/{raw_model}:{operation}");
            assert!(
                path.strip_prefix("/v1beta") == Some(&rebuilt)
                    || path.strip_prefix("/v1") == Some(&rebuilt),
                "{path:?} is not {rebuilt:?}"
            );
        }
        DataPath::Other => {
            assert!(paths::dialect_path(path).is_none(), "{path:?}");
            assert!(paths::bedrock_split(path).is_none(), "{path:?}");
        }
    }
    assert_eq!(
        decode_model_id(&encode_model_id(path)).as_deref(),
        Some(path)
    );
}

/// The admin plane's cross-site check over `method\nhost\norigin\ncontent-type` (a missing or
/// invalid part leaves that header out): no panic, and whatever passes names no foreign origin
/// and writes nothing but JSON.
pub fn admin_request(data: &[u8]) {
    let mut parts = data.split(|b| *b == b'\n');
    let method = parts
        .next()
        .and_then(|m| Method::from_bytes(m).ok())
        .unwrap_or(Method::POST);
    let mut headers = HeaderMap::new();
    for name in [HOST, ORIGIN, CONTENT_TYPE] {
        if let Some(v) = parts.next().and_then(|v| HeaderValue::from_bytes(v).ok()) {
            headers.insert(name, v);
        }
    }
    let uri = Uri::from_static("/admin/config");
    if sidetrack_gateway::admin::same_origin(&method, &uri, &headers).is_err() {
        return;
    }
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap().to_ascii_lowercase();
        let host = text(HOST).unwrap().to_ascii_lowercase();
        assert!(
            origin == format!("http://{host}") || origin == format!("https://{host}"),
            "{origin} passed for host {host}"
        );
    }
    if let Some(host) = text(HOST) {
        let name = host.rsplit_once(':').map_or(host, |(n, _)| n);
        assert!(
            name.eq_ignore_ascii_case("localhost")
                || name.starts_with('[')
                || name.parse::<std::net::Ipv4Addr>().is_ok(),
            "{host} passed"
        );
    }
    if !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) {
        let ct = text(CONTENT_TYPE).unwrap().to_ascii_lowercase();
        assert!(ct.trim_start().starts_with("application/json"), "{ct}");
    }
}

/// The gateway the request-head target talks to: every upstream refuses connections (port 9 on
/// loopback), bounds short so no input holds a connection for long.
pub const CONFIG: &str = r#"
server:
  headerReadTimeoutMilliseconds: 300
  bodyReadTimeoutMilliseconds: 300
  idleTimeoutMilliseconds: 300
  maxRequestBytes: 65536
  allowedOrigins: ["https://app.example"]
targets:
  - { name: oai, provider: openai, baseUrl: "http://127.0.0.1:9/v1", models: ["*"] }
  - { name: claude, provider: anthropic, baseUrl: "http://127.0.0.1:9", apiKey: k, models: ["claude-*"] }
  - { name: aws, provider: bedrock, baseUrl: "http://127.0.0.1:9", region: us-east-1, apiKey: k, models: ["us.*"] }
logging:
  routing: "off"
"#;

pub async fn gateway() -> GatewayHandle {
    let cfg = sidetrack_config::load_str(CONFIG, "fuzz.yaml").unwrap();
    let options = GatewayOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        ..GatewayOptions::default()
    };
    sidetrack_gateway::start(cfg, RoutingLog::off(), options)
        .await
        .unwrap()
}

/// `data` as everything a client sends on one data-plane connection, then (after a first answer
/// or 5 ms) a half-close: the connection service answers what it can and the connection ends —
/// by itself, by EOF, or by its bounds — without a panic. 10 s is far past every bound in [`CONFIG`]. Returns what the
/// gateway sent back.
pub async fn request_head(gw: &GatewayHandle, data: &[u8]) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let serve = gw.serve_connection(server);
    let talk = async move {
        let _ = client.write_all(data).await;
        // A moment for the answer before the half-close: hyper drops an answer still pending
        // when it reads EOF, which would leave the service path unexercised.
        let mut answer = vec![0u8; 4096];
        let first = tokio::time::timeout(Duration::from_millis(5), client.read(&mut answer));
        let n = first.await.ok().and_then(Result::ok).unwrap_or(0);
        answer.truncate(n);
        let _ = client.shutdown().await;
        let _ = client.read_to_end(&mut answer).await;
        answer
    };
    let both = async { tokio::join!(serve, talk) };
    let ended = tokio::time::timeout(Duration::from_secs(10), both).await;
    match ended {
        Ok(((), answer)) => answer,
        Err(_) => panic!(
            "a connection fed {:?} was still open after 10 s",
            String::from_utf8_lossy(data)
        ),
    }
}

/// Valid request heads (and a few near misses) that generated inputs start from.
pub const HEAD_SEEDS: &[&str] = &[
    "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 57\r\n\r\n{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
    "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 79\r\n\r\n{\"model\":\"claude-x\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
    "POST /model/us.m%3A0/converse HTTP/1.1\r\nhost: x\r\ncontent-length: 56\r\n\r\n{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"hi\"}]}]}",
    "POST /inference/model/arn%3Aaws%3Abedrock%2Fx/invoke-with-response-stream HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "OPTIONS /v1/responses HTTP/1.1\r\nhost: x\r\norigin: https://app.example\r\naccess-control-request-method: POST\r\naccess-control-request-headers: authorization, x-stainless-os\r\n\r\n",
    "POST /v1/responses HTTP/1.1\r\nhost: x\r\norigin: https://evil.example\r\ncontent-length: 2\r\n\r\n{}",
    "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n{}",
    "GET /healthz HTTP/1.0\r\n\r\nGET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
];

/// Paths that generated path inputs start from.
pub const PATH_SEEDS: &[&str] = &[
    "/v1/chat/completions",
    "/inference/v1/messages",
    "/model/us.anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream",
    "/inference/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x/invoke",
    "/model/%zz/converse",
    "/model/%E2%82%AC/invoke",
];
