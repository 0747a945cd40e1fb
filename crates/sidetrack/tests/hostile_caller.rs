//! The hostile caller against the real binary (SPEC §14; part of the "hostile-world" suite): a
//! `sidetrack serve` with 256 file descriptors, and twice as many idle sockets opened to it. The
//! open-file limit caps the connections each listener holds (a third of it, less 64), so the
//! gateway never runs out of descriptors; it closes the idle sockets by its header timeout as it
//! takes them from the backlog, and then serves a real request. (Before the connection bounds,
//! 300 idle sockets stopped `accept` for good: "Too many open files".)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sidetrack_mock::{MockConfig, MockServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::{free_addr, rss_kb, temp_dir, BIN};
const FD_LIMIT: usize = 256;

/// The gateway process, its stderr collected; killed when dropped.
struct Gateway {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    /// `sidetrack serve --config PATH` under `ulimit -n FD_LIMIT` (set by the shell, then `exec`).
    fn start(config: &std::path::Path) -> Gateway {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                r#"ulimit -n {FD_LIMIT} && exec "$0" serve --config "$1""#
            ))
            .arg(BIN)
            .arg(config);
        let (child, stderr) = common::spawn_collecting_stderr(cmd);
        Gateway { child, stderr }
    }

    fn logs(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a fresh connection (`connection: close`); the status, or `None` when the
/// connection fails or closes without a response.
async fn request(addr: SocketAddr, text: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(text.as_bytes()).await.ok()?;
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .ok()?
        .ok()?;
    String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twice_the_fd_limit_in_idle_sockets_is_closed_by_the_timeouts_and_the_gateway_serves_again()
{
    let mock = MockServer::start(MockConfig::default()).await.unwrap();
    let (data, admin) = (free_addr(), free_addr());
    let dir = temp_dir("hostile-caller");
    let config = dir.join("sidetrack.yaml");
    std::fs::write(
        &config,
        format!(
            r#"server:
  listen: {data}
  admin: {admin}
  headerReadTimeoutMilliseconds: 500
  idleTimeoutMilliseconds: 500
targets:
  - name: mock
    provider: openai
    baseUrl: {mock}/v1
    models: ["*"]
logging:
  level: info
  routing: "off"
"#,
            mock = mock.base_url()
        ),
    )
    .unwrap();
    let gw = Gateway::start(&config);
    let healthz = format!("GET /healthz HTTP/1.1\r\nhost: {data}\r\nconnection: close\r\n\r\n");
    let deadline = Instant::now() + Duration::from_secs(15);
    while request(data, &healthz).await != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the gateway did not start:\n{}",
            gw.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Twice the descriptors the gateway has, all idle: the kernel queues what it cannot accept.
    let started = Instant::now();
    let mut idle = Vec::new();
    for i in 0..2 * FD_LIMIT {
        // Past the backlog, a connect waits for the gateway to take queued ones.
        let s = tokio::time::timeout(Duration::from_secs(30), TcpStream::connect(data)).await;
        match s {
            Ok(Ok(s)) => idle.push(s),
            _ => panic!(
                "connection {i} not taken in 30 s: the gateway stopped accepting; stderr:\n{}",
                gw.logs()
            ),
        }
    }
    let closers: Vec<_> = idle
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                // Closed by the gateway: EOF or a reset. Still open after 30 s: a failure.
                tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
                    .await
                    .is_ok_and(|r| r.map_or(true, |n| n == 0))
            })
        })
        .collect();
    let mut closed = 0;
    for c in closers {
        closed += usize::from(c.await.unwrap());
    }
    let took = started.elapsed();
    // The stated bound for this flood: the gateway stays small (it was ~20 MB idle here).
    let rss = rss_kb(gw.child.id()).unwrap_or(0);
    assert!(
        rss < 100 * 1024,
        "gateway RSS {rss} KiB after the flood (limit 100 MiB)"
    );
    assert_eq!(
        closed,
        2 * FD_LIMIT,
        "idle sockets left open after 30 s; gateway stderr:\n{}",
        gw.logs()
    );
    // The open-file limit caps the connections each listener holds, so callers never take the
    // descriptors the gateway needs: it says so, and never runs out (before the cap, it did).
    assert!(
        gw.logs()
            .contains("the open-file limit caps server.maxConnections"),
        "{}",
        gw.logs()
    );
    assert!(!gw.logs().contains("accept failed"), "{}", gw.logs());

    // Serving again: a real request through to the mock.
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let chat = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {data}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(
        request(data, &chat).await,
        Some(200),
        "not serving after the flood ({took:?}); stderr:\n{}",
        gw.logs()
    );
    assert!(mock.total_hits() >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}
