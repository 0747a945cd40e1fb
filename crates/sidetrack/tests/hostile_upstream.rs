//! The hostile-world suite against the real binary (SPEC §14, issue 13 must-show 1): providers that
//! never end a line or an event, before and after the commit, in the same dialect and translated,
//! many at once. The gateway process's resident memory (read from /proc) stays under 300 MB with
//! the default bounds, every caller gets its answer (the fallback's, or the explicit error event),
//! and the gateway serves normally afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_mock::{Behaviour, Hostile, MockConfig, MockServer};

mod common;

use common::{free_addr, rss_kb, temp_dir, BIN};
/// The stated bound: the gateway's RSS with these upstreams and the default bounds.
const RSS_LIMIT_KB: u64 = 300 * 1024;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn hostile(kind: Hostile, after: usize) -> Behaviour {
    Behaviour {
        hostile: Some(kind),
        hostile_after_chunks: Some(after),
        ..Behaviour::default()
    }
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Posts `body` to `path` and reads the answer whole; returns the status and the body's last
/// 4 KiB (what was received in all is added to `received`).
async fn call(
    client: &HttpClient,
    url: String,
    body: serde_json::Value,
    received: &AtomicU64,
) -> (u16, String) {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut tail: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            received.fetch_add(data.len() as u64, Ordering::Relaxed);
            tail.extend_from_slice(&data);
            if tail.len() > 8192 {
                tail.drain(..tail.len() - 4096);
            }
        }
    }
    (status, String::from_utf8_lossy(&tail).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_lines_and_events_keep_the_gateway_small_and_serving() {
    let models = [
        ("line-late", hostile(Hostile::EndlessLine, 1)),
        ("event-late", hostile(Hostile::EndlessEvent, 1)),
        ("comment-late", hostile(Hostile::EndlessComment, 1)),
        ("line-early", hostile(Hostile::EndlessLine, 0)),
        ("good", Behaviour::default()),
    ];
    let mock = MockServer::start(MockConfig {
        models: models
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        ..MockConfig::default()
    })
    .await
    .unwrap();
    let (data, admin) = (free_addr(), free_addr());
    let dir = temp_dir("hostile-upstream");
    let config = dir.join("gateway.yaml");
    // Default bounds; the routing log on (to a file), as shipped.
    std::fs::write(
        &config,
        format!(
            r#"server: {{ listen: "{data}", admin: "{admin}" }}
targets:
  - {{ name: up, provider: openai, baseUrl: "{mock}/v1", models: ["*"] }}
rules:
  - name: early
    priority: 1
    matchModels: ["line-early"]
    routeToTarget:
      staticRoute: {{ target: up }}
      fallback: {{ targetFallback: [ {{ target: up, model: good }} ] }}
logging: {{ routing: "{log}" }}
"#,
            mock = mock.base_url(),
            log = dir.join("routing.log").display(),
        ),
    )
    .unwrap();
    let gw = Killed(
        Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = gw.0.id();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let base = format!("http://{data}");
    let ready = Instant::now();
    loop {
        let req = http::Request::get(format!("{base}/readyz"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        if client.request(req).await.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(20),
            "gateway did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let idle_kb = rss_kb(pid).unwrap();

    // Sample the gateway's RSS while the hostile calls run.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle_kb));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                if let Some(kb) = rss_kb(pid) {
                    peak.fetch_max(kb, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let received = Arc::new(AtomicU64::new(0));
    let chat = |model: &str| {
        serde_json::json!({"model": model, "stream": true,
                           "messages": [{"role": "user", "content": "hi"}]})
    };
    let messages = |model: &str| {
        serde_json::json!({"model": model, "stream": true, "max_tokens": 16,
                           "messages": [{"role": "user", "content": "hi"}]})
    };
    let mut calls = Vec::new();
    for (path, body, expect) in [
        ("/v1/chat/completions", chat("line-late"), "server_error"),
        ("/v1/chat/completions", chat("line-late"), "server_error"),
        ("/v1/chat/completions", chat("event-late"), "server_error"),
        ("/v1/chat/completions", chat("comment-late"), "server_error"),
        ("/v1/messages", messages("line-late"), "event: error"),
        ("/v1/messages", messages("event-late"), "event: error"),
        ("/v1/chat/completions", chat("line-early"), "[DONE]"),
        ("/v1/messages", messages("line-early"), "message_stop"),
    ] {
        let (client, received) = (client.clone(), received.clone());
        let url = format!("{base}{path}");
        calls.push(tokio::spawn(async move {
            let answer = call(&client, url, body, &received);
            let (status, tail) = tokio::time::timeout(Duration::from_secs(120), answer)
                .await
                .expect("the gateway ended the hostile stream");
            (status, tail, expect)
        }));
    }
    for c in calls {
        let (status, tail, expect) = c.await.unwrap();
        assert_eq!(status, 200);
        assert!(
            tail.contains(expect),
            "expected {expect:?} at the end: {tail:?}"
        );
        if expect == "server_error" {
            assert!(!tail.contains("[DONE]"), "never a fake end");
        }
    }
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let peak_kb = peak.load(Ordering::Relaxed);
    let got = received.load(Ordering::Relaxed);
    eprintln!(
        "gateway RSS idle {idle_kb} KiB, peak {peak_kb} KiB; callers received {} MiB",
        got >> 20
    );
    // The four same-dialect streams were each cut at the 8 MiB bound, after the callers got about
    // that much of the endless line or event (less what was held back, at most 64 KiB each;
    // translated callers get only whole events).
    assert!(
        got >= 4 * ((8 << 20) - (64 << 10)),
        "callers received {got} bytes"
    );
    assert!(
        peak_kb < RSS_LIMIT_KB,
        "gateway RSS peaked at {peak_kb} KiB (limit {RSS_LIMIT_KB} KiB)"
    );

    // Still up and serving.
    let (status, tail) = call(
        &client,
        format!("{base}/v1/chat/completions"),
        chat("good"),
        &AtomicU64::new(0),
    )
    .await;
    assert_eq!(status, 200);
    assert!(tail.contains("[DONE]"));
    let _ = std::fs::remove_dir_all(&dir);
}
