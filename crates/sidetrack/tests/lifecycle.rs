//! The binary's lifecycle as an operator drives it (issue 6, must-shows 5 and 6): hot reload on
//! SIGHUP and on a file change under load, a refused bad config, breaker state across reloads, and
//! the SIGTERM drain of open streams. Each test starts the real `sidetrack serve` against an
//! in-process mock provider on loopback ports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_mock::{Behaviour, MockConfig, MockServer};

mod common;

use common::{free_addr, temp_dir, BIN};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Replaces `path` in one step (write a sibling, rename over), as editors and ConfigMaps do, so
/// the file watcher never reads half a file.
fn write_atomically(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn mock_config(models: &[(&str, Behaviour)]) -> MockConfig {
    MockConfig {
        models: models
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        ..MockConfig::default()
    }
}

/// A gateway config: requests for model `app` go to mock model `serve_as`; `rules` and `top` add
/// rules and top-level sections.
fn gateway_yaml(
    gw: &Ports,
    mock: &str,
    serve_as: &str,
    watch: bool,
    rules: &str,
    top: &str,
) -> String {
    format!(
        r#"server:
  listen: {listen}
  admin: {admin}
  shutdownGraceMilliseconds: 10000
  watchConfig: {watch}
targets:
  - name: mock
    provider: openai
    baseUrl: {mock}/v1
    models: ["*"]
rules:
  - name: app
    priority: 10
    matchModels: ["app"]
    routeToTarget:
      staticRoute: {{ target: mock, model: {serve_as} }}
{rules}{top}logging:
  level: info
  routing: "off"
"#,
        listen = gw.data,
        admin = gw.admin,
    )
}

/// Valid YAML that fails validation: the rule names a target that does not exist.
fn invalid_yaml(gw: &Ports, mock: &str) -> String {
    gateway_yaml(gw, mock, "blue", true, "", "")
        .replace("target: mock, model", "target: nowhere, model")
}

#[derive(Clone, Copy)]
struct Ports {
    data: SocketAddr,
    admin: SocketAddr,
}

/// A running `sidetrack serve`, its stderr collected line by line. Killed when dropped (the test
/// failed) unless it already exited.
struct Gateway {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
    ports: Ports,
}

impl Gateway {
    fn start(config: PathBuf, ports: Ports, extra_args: &[&str]) -> Gateway {
        Gateway::launch(Command::new(BIN), &config, extra_args, ports)
    }

    /// Like [`Gateway::start`], with the process allowed one CPU (`taskset -c 0`, as a container
    /// limited to one CPU would be): sidetrack then runs its single-threaded runtime, which this
    /// checks.
    fn start_on_one_cpu(config: PathBuf, ports: Ports, extra_args: &[&str]) -> Gateway {
        let mut taskset = Command::new("taskset");
        taskset.args(["-c", "0", BIN]);
        let gw = Gateway::launch(taskset, &config, extra_args, ports);
        let threads = gw.threads();
        assert!(
            !threads.is_empty() && !threads.iter().any(|t| t.starts_with("tokio-rt-worker")),
            "one CPU: no runtime worker threads, the main thread runs every task ({threads:?})"
        );
        gw
    }

    /// Runs `cmd` (the binary, or a wrapper given the binary) with `serve --config CONFIG
    /// EXTRA_ARGS` and waits until it is ready.
    fn launch(mut cmd: Command, config: &Path, extra_args: &[&str], ports: Ports) -> Gateway {
        cmd.arg("serve")
            .arg("--config")
            .arg(config)
            .args(extra_args);
        let (child, stderr) = common::spawn_collecting_stderr(cmd);
        let gw = Gateway {
            child,
            stderr,
            ports,
        };
        gw.wait_until("/readyz answers 200", Duration::from_secs(15), || {
            http_get(gw.ports.data, "/readyz").is_some_and(|(s, _)| s == 200)
        });
        gw
    }

    /// The names of the process's threads.
    fn threads(&self) -> Vec<String> {
        let dir = format!("/proc/{}/task", self.child.id());
        std::fs::read_dir(dir)
            .map(|tasks| {
                tasks
                    .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .map(|name| name.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.ports.data)
    }

    fn logs(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    fn log_count(&self, needle: &str) -> usize {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Polls `cond` every 10 ms until it holds; fails the test after `limit`.
    fn wait_until(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; gateway stderr:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) for the process to exit and returns its exit code.
    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not exit; stderr:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A one-shot `GET` on a fresh connection: `(status, body)`, `None` if it cannot connect.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_raw(addr, "GET", path)
}

fn http_raw(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

fn chat_request(url: &str, model: &str, stream: bool) -> http::Request<Full<Bytes>> {
    let body = serde_json::json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    });
    http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// One non-streamed chat request: `(status, body)`, or a transport error as status 0.
async fn chat(client: &HttpClient, url: &str, model: &str) -> (u16, String) {
    match client.request(chat_request(url, model, false)).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            match resp.into_body().collect().await {
                Ok(b) => (status, String::from_utf8_lossy(&b.to_bytes()).into_owned()),
                Err(e) => (0, format!("body error: {e}")),
            }
        }
        Err(e) => (0, format!("request error: {e}")),
    }
}

/// Must-show 5: 20 reloads under steady load (SIGHUP and the file watcher, alternating the model
/// the route serves) and one invalid config in between: no request fails, every reload takes
/// effect, the invalid one is refused and the previous config keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_reloads_under_load_fail_no_request_and_an_invalid_config_is_refused() {
    let mock = MockServer::start(mock_config(&[
        ("blue", Behaviour::default()),
        ("green", Behaviour::default()),
    ]))
    .await
    .unwrap();
    let ports = Ports {
        data: free_addr(),
        admin: free_addr(),
    };
    let dir = temp_dir("lifecycle-reload-load");
    let path = dir.join("sidetrack.yaml");
    let mock_url = mock.base_url();
    let config_for = |model: &str| gateway_yaml(&ports, &mock_url, model, true, "", "");
    write_atomically(&path, &config_for("blue"));
    let gw = Gateway::start_on_one_cpu(path.clone(), ports, &[]);

    // Steady load: 4 client loops, bounded in count and time.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut loops = Vec::new();
    for _ in 0..4 {
        let (stop, sent, failures) = (stop.clone(), sent.clone(), failures.clone());
        let url = gw.url("/v1/chat/completions");
        loops.push(tokio::spawn(async move {
            let client = client();
            let deadline = Instant::now() + Duration::from_secs(60);
            for _ in 0..200_000 {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    break;
                }
                let (status, body) = chat(&client, &url, "app").await;
                sent.fetch_add(1, Ordering::Relaxed);
                if status != 200 {
                    failures.lock().unwrap().push(format!("{status}: {body}"));
                }
            }
        }));
    }

    let wait_for_traffic_on = |model: &str, since: u64, what: &str| {
        // At most 4 requests are in flight (one per loop), so 5 more hits mean at least one
        // request that started after `since` was read was routed to `model`.
        gw.wait_until(what, Duration::from_secs(10), || {
            mock.hits(model) >= since + 5
        });
    };
    wait_for_traffic_on("blue", 0, "traffic on blue before any reload");

    let started = Instant::now();
    let mut previous = "blue";
    for i in 1..=20 {
        let model = if i % 2 == 1 { "green" } else { "blue" };
        let before = mock.hits(model);
        write_atomically(&path, &config_for(model));
        // Every fifth reload comes from the watcher alone (it polls once a second); the rest are
        // SIGHUP, as an operator or a config-management tool sends it.
        if i % 5 != 0 {
            gw.signal("HUP");
        }
        wait_for_traffic_on(model, before, &format!("reload {i} to route to {model}"));

        if i == 10 {
            // The invalid config, once: refused (logged), and the previous one keeps serving.
            let rejected = gw.log_count("reload rejected");
            write_atomically(&path, &invalid_yaml(&ports, &mock_url));
            gw.signal("HUP");
            gw.wait_until(
                "the invalid config to be refused",
                Duration::from_secs(5),
                || gw.log_count("reload rejected") > rejected,
            );
            let still = mock.hits(model);
            wait_for_traffic_on(
                model,
                still,
                "traffic on the previous config after the refusal",
            );
        }
        previous = model;
    }
    let reload_time = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.unwrap();
    }

    let failures = failures.lock().unwrap().clone();
    let total = sent.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {total} requests failed during reloads, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(total > 100, "the load loops sent only {total} requests");
    let logs = gw.logs();
    assert!(
        gw.log_count("config reloaded") >= 20,
        "expected at least 20 reloads in the log:\n{logs}"
    );
    assert!(
        logs.contains("trigger=\"file change\"") || logs.contains("trigger=file change"),
        "the file watcher reloaded at least once:\n{logs}"
    );
    assert!(
        logs.contains("nowhere"),
        "the refusal names the problem:\n{logs}"
    );
    assert!(mock.hits("blue") > 0 && mock.hits("green") > 0);
    // Still serving, on the last config written.
    let last = chat(&client(), &gw.url("/v1/chat/completions"), "app").await;
    assert_eq!(last.0, 200, "{}", last.1);
    assert!(
        last.1.contains(&format!("hello from {previous}")),
        "{}",
        last.1
    );
    eprintln!(
        "{total} requests, 0 failed, 20 reloads + 1 refused in {:.1} s",
        reload_time.as_secs_f64()
    );
}

/// SIGHUP with a broken file: logged and refused, the old config keeps serving; `POST
/// /admin/reload` refuses it the same way; the next good file is picked up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_with_an_invalid_config_keeps_the_old_one_serving() {
    let mock = MockServer::start(mock_config(&[
        ("blue", Behaviour::default()),
        ("green", Behaviour::default()),
    ]))
    .await
    .unwrap();
    let ports = Ports {
        data: free_addr(),
        admin: free_addr(),
    };
    let dir = temp_dir("lifecycle-sighup-invalid");
    let path = dir.join("sidetrack.yaml");
    let mock_url = mock.base_url();
    write_atomically(
        &path,
        &gateway_yaml(&ports, &mock_url, "blue", false, "", ""),
    );
    let gw = Gateway::start(path.clone(), ports, &[]);
    if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        let threads = gw.threads();
        assert!(
            threads.iter().any(|t| t.starts_with("tokio-rt-worker")),
            "more than one CPU: the multi-threaded runtime ({threads:?})"
        );
    }
    let c = client();
    let url = gw.url("/v1/chat/completions");
    let r = chat(&c, &url, "app").await;
    assert_eq!(r.0, 200);
    assert!(r.1.contains("hello from blue"), "{}", r.1);

    // Not even YAML.
    write_atomically(&path, "server: [this is not\n");
    gw.signal("HUP");
    gw.wait_until("the refusal in the log", Duration::from_secs(5), || {
        gw.log_count("reload rejected") >= 1
    });
    let r = chat(&c, &url, "app").await;
    assert_eq!(r.0, 200);
    assert!(r.1.contains("hello from blue"), "{}", r.1);

    // The admin API goes through the same loader and refuses it too.
    let (status, body) = http_raw(ports.admin, "POST", "/admin/reload").unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("\"reloaded\":false"), "{body}");
    assert_eq!(
        http_get(ports.data, "/readyz").map(|(s, _)| s),
        Some(200),
        "still ready"
    );

    // A good file again: picked up on the next SIGHUP.
    write_atomically(
        &path,
        &gateway_yaml(&ports, &mock_url, "green", false, "", ""),
    );
    gw.signal("HUP");
    gw.wait_until("the good config to load", Duration::from_secs(5), || {
        gw.log_count("config reloaded") >= 1
    });
    let r = chat(&c, &url, "app").await;
    assert_eq!(r.0, 200);
    assert!(r.1.contains("hello from green"), "{}", r.1);
    assert_eq!(mock.hits("green"), 1);
}

/// A reload keeps the breaker of a destination that is still configured: it stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_breaker_state_for_destinations_that_still_exist() {
    let mock = MockServer::start(mock_config(&[(
        "broken",
        Behaviour {
            status: Some(500),
            ..Behaviour::default()
        },
    )]))
    .await
    .unwrap();
    let ports = Ports {
        data: free_addr(),
        admin: free_addr(),
    };
    let dir = temp_dir("lifecycle-breaker-reload");
    let path = dir.join("sidetrack.yaml");
    let mock_url = mock.base_url();
    let breaker =
        "defaults:\n  circuitBreaker: { consecutiveFailures: 2, openMilliseconds: 60000 }\n";
    write_atomically(
        &path,
        &gateway_yaml(&ports, &mock_url, "broken", false, "", breaker),
    );
    let gw = Gateway::start(path.clone(), ports, &[]);
    let c = client();
    let url = gw.url("/v1/chat/completions");
    for _ in 0..2 {
        assert_eq!(chat(&c, &url, "app").await.0, 500);
    }
    let state = || {
        let (_, body) = http_get(ports.admin, "/admin/destinations").unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["destinations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["target"] == "mock" && d["model"] == "broken")
            .map(|d| d["state"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(state().as_deref(), Some("OPEN"));

    // A different config (one more rule) that still routes to mock/broken.
    let other = "  - name: other\n    priority: 20\n    matchModels: [\"other\"]\n    routeToTarget:\n      staticRoute: { target: mock, model: broken }\n";
    let yaml = gateway_yaml(&ports, &mock_url, "broken", false, other, breaker);
    write_atomically(&path, &yaml);
    gw.signal("HUP");
    gw.wait_until("the reload", Duration::from_secs(5), || {
        gw.log_count("config reloaded") >= 1
    });
    assert_eq!(
        state().as_deref(),
        Some("OPEN"),
        "the breaker survived the reload"
    );
    let (_, config) = http_get(ports.admin, "/admin/config").unwrap();
    assert!(config.contains("other"), "the new config is live: {config}");
}

/// Must-show 6: SIGTERM while 50 streams are open. `/readyz` turns 503 at once, new connections
/// are refused once the drain delay is over, every open stream still completes with `[DONE]`, and
/// the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_fifty_open_streams_and_refuses_new_connections() {
    // 20 chunks, 100 ms apart: each stream stays open about two seconds.
    let mock = MockServer::start(mock_config(&[(
        "slow",
        Behaviour {
            stream_chunks: Some(20),
            chunk_interval_milliseconds: Some(100),
            reply: Some("ABCDEFGHIJKLMNOPQRST".to_owned()),
            ..Behaviour::default()
        },
    )]))
    .await
    .unwrap();
    let ports = Ports {
        data: free_addr(),
        admin: free_addr(),
    };
    let dir = temp_dir("lifecycle-sigterm-drain");
    let path = dir.join("sidetrack.yaml");
    // The routing log as shipped (on), to a file: every drained stream's record must be in it
    // when the process has exited.
    let routing = dir.join("routing.jsonl");
    let _ = std::fs::remove_file(&routing);
    write_atomically(
        &path,
        &gateway_yaml(&ports, &mock.base_url(), "slow", false, "", "").replace(
            r#"routing: "off""#,
            &format!("routing: \"{}\"", routing.display()),
        ),
    );
    // A drain delay short enough that the streams are still open when the listener closes.
    let mut gw = Gateway::start_on_one_cpu(path, ports, &["--drain-delay-milliseconds", "300"]);

    let opened = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let c = client();
    let mut streams = Vec::new();
    for _ in 0..50 {
        let (c, url) = (c.clone(), gw.url("/v1/chat/completions"));
        let (opened, finished) = (opened.clone(), finished.clone());
        streams.push(tokio::spawn(async move {
            let resp = c.request(chat_request(&url, "app", true)).await;
            let resp = match resp {
                Ok(r) => r,
                Err(e) => return Err(format!("request error: {e}")),
            };
            opened.fetch_add(1, Ordering::SeqCst);
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await;
            finished.fetch_add(1, Ordering::SeqCst);
            match body {
                Ok(b) => Ok((status, String::from_utf8_lossy(&b.to_bytes()).into_owned())),
                Err(e) => Err(format!("body error after status {status}: {e}")),
            }
        }));
    }
    // All 50 have their response headers (the first token arrived): they are open streams.
    let deadline = Instant::now() + Duration::from_secs(10);
    while opened.load(Ordering::SeqCst) < 50 {
        assert!(
            Instant::now() < deadline,
            "only {} streams opened",
            opened.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "streams ended too early"
    );

    let signalled = Instant::now();
    gw.signal("TERM");

    // Readiness fails first, while the listener still accepts (the drain delay).
    let mut saw_503 = false;
    let mut refused_at = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match TcpStream::connect_timeout(&ports.data, Duration::from_millis(200)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                refused_at = Some(signalled.elapsed());
                break;
            }
            Err(_) => {}
            Ok(_) => {
                if let Some((503, body)) = http_get(ports.data, "/readyz") {
                    assert_eq!(body, "draining");
                    saw_503 = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused_at = refused_at.unwrap_or_else(|| {
        panic!(
            "new connections were still accepted 3 s after SIGTERM; stderr:\n{}",
            gw.logs()
        )
    });
    assert!(saw_503, "/readyz never answered 503 during the drain delay");
    let still_open = 50 - finished.load(Ordering::SeqCst);
    assert!(
        still_open > 0,
        "every stream had ended (completed or cut) before the listener closed"
    );

    for (i, s) in streams.into_iter().enumerate() {
        let (status, body) = s
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("stream {i}: {e}"));
        assert_eq!(status, 200, "stream {i}: {body}");
        assert!(
            body.trim_end().ends_with("data: [DONE]"),
            "stream {i} did not complete: {body}"
        );
        let events = body.lines().filter(|l| l.starts_with("data: ")).count();
        assert!(
            events >= 21,
            "stream {i} lost chunks ({events} events): {body}"
        );
        assert!(
            body.contains("\"T\""),
            "stream {i} lost its last chunk: {body}"
        );
    }
    let code = gw.wait_exit(Duration::from_secs(12));
    assert_eq!(code, Some(0), "exit code; stderr:\n{}", gw.logs());
    // The stderr reader may still be catching up with a process that has just exited.
    gw.wait_until("the drained line", Duration::from_secs(5), || {
        gw.log_count("drained") > 0
    });
    let records = std::fs::read_to_string(&routing).unwrap();
    let served = records
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["outcome"] == "SERVED" && v["streamed"] == true
        })
        .count();
    assert_eq!(
        served, 50,
        "one routing record per drained stream:\n{records}"
    );
    eprintln!(
        "refused {} ms after SIGTERM with {still_open} streams still open; all 50 completed; exit 0",
        refused_at.as_millis()
    );
}

/// Without a drain delay (the default) SIGINT closes the listener at once, and the open streams
/// still finish before the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_without_drain_delay_closes_the_listener_at_once_and_drains() {
    let mock = MockServer::start(mock_config(&[(
        "slow",
        Behaviour {
            stream_chunks: Some(10),
            chunk_interval_milliseconds: Some(100),
            ..Behaviour::default()
        },
    )]))
    .await
    .unwrap();
    let ports = Ports {
        data: free_addr(),
        admin: free_addr(),
    };
    let path = temp_dir("lifecycle-sigint-drain").join("sidetrack.yaml");
    write_atomically(
        &path,
        &gateway_yaml(&ports, &mock.base_url(), "slow", false, "", ""),
    );
    let mut gw = Gateway::start(path, ports, &[]);
    let c = client();
    let mut streams = Vec::new();
    for _ in 0..5 {
        let resp = c
            .request(chat_request(&gw.url("/v1/chat/completions"), "app", true))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        streams.push(tokio::spawn(resp.into_body().collect()));
    }
    gw.signal("INT");
    gw.wait_until("the listener to close", Duration::from_secs(2), || {
        matches!(
            TcpStream::connect_timeout(&ports.data, Duration::from_millis(200)),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
        )
    });
    assert!(
        streams.iter().any(|s| !s.is_finished()),
        "the streams should still be open when the listener closes"
    );
    for s in streams {
        let body = s.await.unwrap().unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    }
    assert_eq!(
        gw.wait_exit(Duration::from_secs(10)),
        Some(0),
        "{}",
        gw.logs()
    );
}
