//! The hostile caller (SPEC §14; part of the "hostile-world" suite): heads, bodies and TLS
//! handshakes dribbled a byte at a time, idle keep-alive connections (HTTP/1 and HTTP/2), a caller
//! that stops reading, more connections than `server.maxConnections`, and browser pages on other
//! sites — against the data plane and the admin port. Real sockets,
//! a real gateway, the real mock provider; small timeouts keep the suite fast. Each test would
//! fail against a gateway without the bound it names (the connection would stay open, the
//! request would be served).
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{start, Env};
use sidetrack_mock::MockConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A gateway config with the given connection bounds (ms) and extra `server` lines.
fn config(header: u64, body: u64, idle: u64, server_extra: &str) -> String {
    format!(
        r#"
server:
  headerReadTimeoutMilliseconds: {header}
  bodyReadTimeoutMilliseconds: {body}
  idleTimeoutMilliseconds: {idle}
{server_extra}
targets:
  - {{ name: up, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["m-*"] }}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["claude-*"] }}
  - {{ name: aws, provider: bedrock, baseUrl: "${{MOCK}}", region: us-east-1, apiKey: k, models: ["us.*"] }}
"#
    )
}

async fn gateway(header: u64, body: u64, idle: u64, server_extra: &str) -> Env {
    start(
        &config(header, body, idle, server_extra),
        MockConfig::default(),
    )
    .await
}

/// Reads until the peer closes (EOF or reset), at most `limit`; returns how long it took and what
/// arrived before. Fails the test if the connection is still open after `limit`.
async fn closed_within(s: &mut (impl AsyncRead + Unpin), limit: Duration) -> (Duration, String) {
    let start = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (start.elapsed(), lossy(&got)),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the connection is still open after {limit:?}; received: {}",
                lossy(&got)
            ),
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One HTTP/1.1 response with a `content-length` body.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn read_response(s: &mut (impl AsyncRead + Unpin)) -> Raw {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before a response head: {}", lossy(&got));
        got.extend_from_slice(&buf[..n]);
    };
    let head = lossy(&got[..end]);
    let mut raw = Raw {
        status: head.split(' ').nth(1).unwrap().parse().unwrap(),
        head,
        body: String::new(),
    };
    let len: usize = match raw.status {
        204 | 304 => 0,
        _ => raw
            .header("content-length")
            .unwrap_or_else(|| panic!("no content-length in {}", raw.head))
            .parse()
            .unwrap(),
    };
    let mut body = got[end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed inside a response body");
        body.extend_from_slice(&buf[..n]);
    }
    raw.body = lossy(&body);
    raw
}

/// Sends `text` on a fresh connection (`connection: close`) and reads the response.
async fn exchange(addr: SocketAddr, text: &str) -> Raw {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(text.as_bytes()).await.unwrap();
    read_response(&mut s).await
}

fn get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n")
}

/// Writes `bytes` one at a time, `gap` apart, until done or the peer is gone; returns how many
/// went out.
fn dribble(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    bytes: Vec<u8>,
    gap: Duration,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        for (i, b) in bytes.iter().enumerate() {
            if wr.write_all(&[*b]).await.is_err() {
                return i;
            }
            tokio::time::sleep(gap).await;
        }
        bytes.len()
    })
}

/// A head that takes `bytes × 20 ms` to dribble: far longer than the header timeouts here.
fn long_head(path: &str) -> Vec<u8> {
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n").into_bytes();
    head.extend(std::iter::repeat_n(b'a', 200).chain(*b": b\r\n"));
    head
}

#[tokio::test]
async fn a_head_dribbled_byte_by_byte_is_cut_off_at_the_header_timeout_on_both_ports() {
    let env = gateway(300, 5_000, 5_000, "").await;
    for addr in [env.gw.addr, env.gw.admin_addr] {
        let (mut rd, wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let head = long_head("/v1/chat/completions");
        let total = head.len();
        let sender = dribble(wr, head, Duration::from_millis(20));
        let (took, _) = closed_within(&mut rd, Duration::from_secs(5)).await;
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "{addr}: closed after {took:?}, want ~300 ms"
        );
        let sent = sender.await.unwrap();
        assert!(
            sent < total,
            "{addr}: the head was still arriving ({sent}/{total} bytes)"
        );
    }
}

#[tokio::test]
async fn a_second_head_dribbled_on_a_keep_alive_connection_is_cut_off_at_the_header_timeout() {
    // Idle is long: only the header timeout, started by the second head's first byte, can end it.
    let env = gateway(300, 5_000, 10_000, "").await;
    let mut s = TcpStream::connect(env.gw.addr).await.unwrap();
    s.write_all(get("/healthz", "127.0.0.1").as_bytes())
        .await
        .unwrap();
    assert_eq!(read_response(&mut s).await.status, 200);
    let (mut rd, wr) = s.into_split();
    let sender = dribble(wr, long_head("/v1/messages"), Duration::from_millis(20));
    let (took, _) = closed_within(&mut rd, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "closed after {took:?}, want ~300 ms (the idle timeout is 10 s)"
    );
    sender.abort();
}

#[tokio::test]
async fn a_body_that_keeps_trickling_is_answered_408_in_the_callers_dialect_at_the_body_timeout() {
    let env = gateway(5_000, 400, 5_000, "").await;
    let cases = [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
        ("/model/us.m/converse", "bedrock"),
    ];
    for (n, (path, dialect)) in cases.into_iter().enumerate() {
        let (mut rd, mut wr) = TcpStream::connect(env.gw.addr).await.unwrap().into_split();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: 100000\r\n\r\n"
        );
        wr.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        // A byte every 20 ms: no gap is long, the whole body would take 2000 s.
        let sender = dribble(wr, vec![b' '; 100_000], Duration::from_millis(20));
        let r = tokio::time::timeout(Duration::from_secs(5), read_response(&mut rd))
            .await
            .unwrap_or_else(|_| panic!("{dialect}: no answer 5 s into a trickling body"));
        let took = started.elapsed();
        assert_eq!(r.status, 408, "{dialect}: {}", r.body);
        assert!(
            took >= Duration::from_millis(390) && took < Duration::from_secs(3),
            "{dialect}: answered after {took:?}, want ~400 ms"
        );
        let v = r.json();
        match dialect {
            "openai" => {
                assert_eq!(v["error"]["code"], "request_timeout", "{}", r.body);
                let msg = v["error"]["message"].as_str().unwrap();
                assert!(msg.contains("bodyReadTimeoutMilliseconds"), "{msg}");
            }
            "anthropic" => {
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "timeout_error", "{}", r.body);
            }
            _ => assert_eq!(
                r.header("x-amzn-errortype"),
                Some("RequestTimeoutException")
            ),
        }
        let rec = env.record(n + 1).await;
        assert_eq!(rec.reason, "gatewayRejected:bodyTimeout");
        assert_eq!(rec.status, 408);
        // The caller was still sending; the gateway does not wait for the rest.
        closed_within(&mut rd, Duration::from_secs(3)).await;
        sender.abort();
    }
    assert_eq!(env.mock.total_hits(), 0, "nothing reached the upstream");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_at_the_idle_timeout_not_the_header_timeout() {
    let env = gateway(200, 5_000, 800, "").await;
    for (addr, path) in [
        (env.gw.addr, "/healthz"),
        (env.gw.admin_addr, "/admin/config"),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(get(path, "127.0.0.1").as_bytes())
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.status, 200, "{addr}{path}");
        let (took, rest) = closed_within(&mut s, Duration::from_secs(5)).await;
        assert!(
            took >= Duration::from_millis(750) && took < Duration::from_secs(3),
            "{addr}: closed {took:?} after the response, want ~800 ms"
        );
        assert!(rest.is_empty(), "{rest}");
    }
}

/// `max` keep-alive connections that each completed a request on `path`.
async fn hold_connections(addr: SocketAddr, path: &str, max: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..max {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(get(path, "127.0.0.1").as_bytes())
            .await
            .unwrap();
        assert_eq!(read_response(&mut s).await.status, 200);
        held.push(s);
    }
    held
}

#[tokio::test]
async fn past_max_connections_new_ones_wait_until_one_closes_on_both_ports() {
    let env = gateway(10_000, 10_000, 10_000, "  maxConnections: 3").await;
    for (addr, path) in [
        (env.gw.addr, "/healthz"),
        (env.gw.admin_addr, "/admin/config"),
    ] {
        let mut held = hold_connections(addr, path, 3).await;
        // The kernel completes the handshake (backlog), the gateway does not take it yet.
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        waiting
            .write_all(get(path, "127.0.0.1").as_bytes())
            .await
            .unwrap();
        let mut buf = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(400), waiting.peek(&mut buf)).await;
        assert!(
            early.is_err(),
            "{addr}: a 4th connection was served past maxConnections 3"
        );
        // One goes: the waiting one is served, and the gateway keeps serving.
        drop(held.remove(0));
        let r = tokio::time::timeout(Duration::from_secs(5), read_response(&mut waiting))
            .await
            .unwrap_or_else(|_| panic!("{addr}: not served after a connection closed"));
        assert_eq!(r.status, 200);
        drop(held);
        drop(waiting);
        for _ in 0..3 {
            let r = exchange(addr, &get(path, "127.0.0.1")).await;
            assert_eq!(r.status, 200);
        }
    }
}

// --- admin plane: cross-site requests (no adminToken) -------------------------------------------

fn admin_post(path: &str, host: &str, extra: &str) -> String {
    format!("POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: 0\r\n{extra}\r\n")
}

#[tokio::test]
async fn the_admin_plane_refuses_forms_foreign_origins_and_foreign_hosts_without_a_token() {
    let env = gateway(5_000, 5_000, 5_000, "").await;
    assert_eq!(env.chat("m-a", false).await.status, 200);
    let admin = env.gw.admin_addr;
    let own = admin.to_string();
    let disable = "/admin/destinations/up/m-a/disable";

    let refused = [
        (
            "a form post",
            admin_post(
                disable,
                &own,
                "content-type: application/x-www-form-urlencoded\r\n",
            ),
        ),
        (
            "a text/plain post without origin",
            admin_post(disable, &own, "content-type: text/plain\r\n"),
        ),
        (
            "a foreign origin",
            admin_post(
                disable,
                &own,
                "content-type: application/json\r\norigin: http://evil.example\r\n",
            ),
        ),
        (
            "another local port's page",
            admin_post(
                disable,
                &own,
                &format!(
                    "content-type: application/json\r\norigin: http://127.0.0.1:{}\r\n",
                    admin.port() + 1
                ),
            ),
        ),
        (
            "a rebinding host",
            admin_post(
                disable,
                &format!("evil.example:{}", admin.port()),
                "content-type: application/json\r\n",
            ),
        ),
    ];
    for (what, req) in refused {
        let r = exchange(admin, &req).await;
        assert_eq!(r.status, 403, "{what}: {}", r.body);
        assert!(r.json()["error"].is_string(), "{what}: {}", r.body);
        assert_eq!(
            env.destination("up", "m-a").await["disabled"],
            false,
            "{what}"
        );
    }

    // DNS rebinding: the page's own origin, but a foreign name in Host, reading the config.
    let r = exchange(
        admin,
        &format!(
            "GET /admin/config HTTP/1.1\r\nhost: evil.example:{p}\r\norigin: http://evil.example:{p}\r\n\r\n",
            p = admin.port()
        ),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(!r.body.contains("targets"), "{}", r.body);
    let r = exchange(admin, &get("/admin/config", "rebind.example")).await;
    assert_eq!(r.status, 403, "{}", r.body);

    // The page's own same-origin JSON POST (what the dashboard sends) still works.
    let r = exchange(
        admin,
        &admin_post(
            disable,
            &own,
            &format!("content-type: application/json\r\norigin: http://{own}\r\n"),
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(env.destination("up", "m-a").await["disabled"], true);
    for host in [format!("localhost:{}", admin.port()), "[::1]:1".into()] {
        let r = exchange(admin, &get("/admin/config", &host)).await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }
}

// --- data plane: cross-site requests ------------------------------------------------------------

fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

const CHAT: &str = r#"{"model":"m-a","messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn a_foreign_origin_gets_403_in_the_callers_dialect_and_nothing_reaches_upstream() {
    let env = gateway(
        5_000,
        5_000,
        5_000,
        "  allowedOrigins: [\"https://app.example\"]",
    )
    .await;
    let foreign = "origin: https://evil.example\r\n";
    let messages =
        r#"{"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
    let converse = r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;

    let r = exchange(env.gw.addr, &post("/v1/chat/completions", CHAT, foreign)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["error"]["type"], "permission_error");
    assert!(r.header("access-control-allow-origin").is_none());
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "gatewayRejected:origin");
    assert_eq!(rec.status, 403);

    let r = exchange(env.gw.addr, &post("/v1/messages", messages, foreign)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "permission_error");

    // A router path (Bedrock) and a GET: the rule is not only on the hot routes.
    let r = exchange(
        env.gw.addr,
        &post("/model/us.m/converse", converse, foreign),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.header("x-amzn-errortype"), Some("AccessDeniedException"));
    let r = exchange(
        env.gw.addr,
        &format!("GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n{foreign}\r\n"),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);

    let recs = env.log.wait_for(3, Duration::from_secs(5)).await;
    assert_eq!(recs[2].reason, "gatewayRejected:origin");
    assert_eq!(recs[2].dialect, "bedrock-converse");
    assert_eq!(env.mock.total_hits(), 0, "nothing reached the upstream");

    // Without Origin (an SDK, curl) the same request is served.
    let r = exchange(env.gw.addr, &post("/v1/chat/completions", CHAT, "")).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn a_listed_origin_is_served_with_cors_and_its_preflight_answered() {
    let env = gateway(
        5_000,
        5_000,
        5_000,
        "  allowedOrigins: [\"https://app.example\"]",
    )
    .await;
    let r = exchange(
        env.gw.addr,
        &post(
            "/v1/chat/completions",
            CHAT,
            "origin: https://app.example\r\n",
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let exposed = r.header("access-control-expose-headers").unwrap();
    for h in [
        "x-sidetrack-request-id",
        "x-sidetrack-served-by",
        "retry-after",
    ] {
        assert!(exposed.contains(h), "{exposed}");
    }
    assert!(r.header("x-sidetrack-request-id").is_some());

    let preflight = |origin: &str| {
        format!(
            "OPTIONS /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\norigin: {origin}\r\n\
             access-control-request-method: POST\r\n\
             access-control-request-headers: authorization,content-type,x-stainless-os,anthropic-version,cookie\r\n\r\n"
        )
    };
    let r = exchange(env.gw.addr, &preflight("https://app.example")).await;
    assert_eq!(r.status, 204, "{}", r.head);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("POST"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("authorization, content-type, x-stainless-os, anthropic-version")
    );
    let r = exchange(env.gw.addr, &preflight("https://evil.example")).await;
    assert_eq!(r.status, 403, "{}", r.head);
    assert!(r.header("access-control-allow-origin").is_none());
}

// --- TLS and HTTP/2 --------------------------------------------------------------------------

#[tokio::test]
async fn a_tls_handshake_that_never_completes_is_cut_off_at_the_header_timeout() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("sidetrack-hostile-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let tls = format!(
        "  tls: {{ certFile: {}, keyFile: {} }}",
        cert_path.display(),
        key_path.display()
    );
    let env = gateway(300, 5_000, 5_000, &tls).await;
    let (mut rd, wr) = TcpStream::connect(env.gw.addr).await.unwrap().into_split();
    // The first bytes of a ClientHello record, then nothing more than a byte now and then.
    let sender = dribble(
        wr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".repeat(20),
        Duration::from_millis(20),
    );
    let (took, _) = closed_within(&mut rd, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(2),
        "closed after {took:?}, want ~300 ms"
    );
    sender.abort();
}

/// One HTTP/2 frame: (type, flags, stream id, payload).
async fn read_frame(s: &mut TcpStream) -> (u8, u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.unwrap();
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.unwrap();
    (head[3], head[4], stream, payload)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn an_idle_http2_connection_lasts_the_idle_timeout_even_when_the_client_pings() {
    let env = gateway(200, 5_000, 800, "").await;
    let mut s = TcpStream::connect(env.gw.addr).await.unwrap();
    // Preface, empty SETTINGS, and GET /healthz on stream 1 (HPACK: :method GET, :scheme http,
    // :path literal "/healthz", :authority literal "x").
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(0x4, 0, 0, &[]));
    let mut block = vec![0x82, 0x86, 0x04, 8];
    block.extend_from_slice(b"/healthz");
    block.extend_from_slice(&[0x01, 1, b'x']);
    hello.extend(frame(0x1, 0x5, 1, &block));
    s.write_all(&hello).await.unwrap();
    loop {
        let (kind, flags, stream, _) = read_frame(&mut s).await;
        if kind == 0x4 && flags & 1 == 0 {
            s.write_all(&frame(0x4, 1, 0, &[])).await.unwrap(); // SETTINGS ack
        }
        // The response ends with END_STREAM on stream 1 (HEADERS or DATA).
        if stream == 1 && (kind == 0x0 || kind == 0x1) && flags & 1 == 1 {
            break;
        }
    }
    let idle_from = Instant::now();
    // A PING between requests is not the start of a slow head.
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(&frame(0x6, 0, 0, &[7; 8])).await.unwrap();
    let mut got_ack = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut head = [0u8; 9];
        match tokio::time::timeout_at(deadline, s.read_exact(&mut head)).await {
            Ok(Ok(_)) => {
                let len = usize::from(head[2]) | usize::from(head[1]) << 8;
                let mut payload = vec![0u8; len];
                if s.read_exact(&mut payload).await.is_err() {
                    break;
                }
                got_ack |= head[3] == 0x6 && head[4] & 1 == 1;
            }
            Ok(Err(_)) => break,
            Err(_) => panic!("the idle HTTP/2 connection is still open after 5 s"),
        }
    }
    let took = idle_from.elapsed();
    assert!(got_ack, "the gateway answered the PING");
    assert!(
        took >= Duration::from_millis(750) && took < Duration::from_secs(3),
        "closed {took:?} after the response, want ~800 ms (the header timeout is 200 ms)"
    );
}

/// A gateway (idle timeout 500 ms) whose mock model `m-long` streams 100000 chunks a
/// millisecond apart: 100 s, unless the gateway gives up on a caller that takes nothing.
async fn long_stream_gateway() -> Env {
    let long = sidetrack_mock::Behaviour {
        stream_chunks: Some(100_000),
        chunk_interval_milliseconds: Some(1),
        ..sidetrack_mock::Behaviour::default()
    };
    start(
        &config(5_000, 5_000, 500, ""),
        common::behaviours(&[("m-long", long)]),
    )
    .await
}

#[tokio::test]
async fn a_caller_that_stops_reading_a_stream_is_cut_off_after_the_idle_timeout() {
    // A stream of 100000 chunks a millisecond apart: 100 s unless the gateway gives up on a
    // caller that takes nothing.
    let env = long_stream_gateway().await;
    // A pipe that holds 256 bytes: the caller's socket buffer, full in no time.
    let (mut client, server) = tokio::io::duplex(256);
    let serve = env.gw.serve_connection(server);
    tokio::pin!(serve);
    let body = r#"{"model":"m-long","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let talk = async {
        client
            .write_all(post("/v1/chat/completions", body, "").as_bytes())
            .await
            .unwrap();
        let mut status = [0u8; 12];
        client.read_exact(&mut status).await.unwrap();
        assert_eq!(&status, b"HTTP/1.1 200");
        Instant::now()
    };
    let stalled_from = tokio::select! {
        at = talk => at,
        () = &mut serve => panic!("the connection ended before the stream began"),
    };
    tokio::time::timeout(Duration::from_secs(5), serve)
        .await
        .expect("a caller that reads nothing still holds its connection after 5 s");
    let took = stalled_from.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "cut off {took:?} after the caller stopped reading, want ~500 ms"
    );
    drop(client);
    let rec = env.record(1).await;
    assert!(rec.streamed);
}

#[tokio::test]
async fn an_http2_caller_that_grants_no_window_is_cut_off_after_the_idle_timeout() {
    // A stream of 100000 chunks a millisecond apart, to a caller whose stream window is 1 KiB and
    // who never reads (so never opens it) while its connection keeps answering PINGs: the socket
    // stays writable, hyper holds the body's frames, and only the watchdog can end it.
    let env = long_stream_gateway().await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .http2_initial_stream_window_size(1024)
        .http2_keep_alive_interval(Duration::from_millis(100))
        .http2_keep_alive_while_idle(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let body = r#"{"model":"m-long","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = http::Request::post(format!("http://{}/v1/chat/completions", env.gw.addr))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let stalled_from = Instant::now();
    // Hold the body unread for well past the idle timeout, then read what there is.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut body = resp.into_body();
    let mut got = 0usize;
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(frame) = http_body_util::BodyExt::frame(&mut body).await {
            match frame {
                Ok(f) => got += f.data_ref().map_or(0, bytes::Bytes::len),
                Err(_) => return false,
            }
        }
        true
    })
    .await
    .expect("the gateway still streams to a caller that granted nothing for 2.5 s");
    assert!(
        !ended,
        "the stream ends with the connection cut, not cleanly"
    );
    assert!(got < 64 * 1024, "{got} bytes: only what the window allowed");
    let rec = env.record(1).await;
    assert!(rec.streamed && rec.committed);
    assert!(stalled_from.elapsed() < Duration::from_secs(8));
}
