//! Test harness: the real mock provider and a real gateway on loopback sockets, with the routing
//! log captured in memory.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_gateway::observe::RoutingRecord;
use sidetrack_gateway::{Clock, GatewayHandle, GatewayOptions, RoutingLog};
use sidetrack_mock::{Behaviour, MockConfig, MockServer};

pub struct Env {
    pub clock: Clock,
    pub mock: MockServer,
    pub gw: GatewayHandle,
    pub log: RoutingLog,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    /// A whole OpenAI chat answer's first choice text ("" when there is none).
    pub fn chat_text(&self) -> String {
        self.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

pub fn behaviours(list: &[(&str, Behaviour)]) -> MockConfig {
    let models: BTreeMap<String, Behaviour> = list
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    MockConfig {
        models,
        ..MockConfig::default()
    }
}

pub fn status(code: u16) -> Behaviour {
    Behaviour {
        status: Some(code),
        ..Behaviour::default()
    }
}

/// A port with nothing listening on it.
pub fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

/// Starts the mock with `mock_cfg` and a gateway from `yaml`, where `${MOCK}` is the mock's base URL
/// and `${DEAD}` a refused port.
pub async fn start(yaml: &str, mock_cfg: MockConfig) -> Env {
    start_with_clock(yaml, mock_cfg, Clock::real()).await
}

/// Like [`start`], with breakers reading `clock` (a manual clock steps through open windows).
pub async fn start_with_clock(yaml: &str, mock_cfg: MockConfig, clock: Clock) -> Env {
    start_tuned(yaml, mock_cfg, clock, |_| {}).await
}

/// Like [`start_with_clock`], with the loaded config changed by `tune` before the gateway starts.
pub async fn start_tuned(
    yaml: &str,
    mock_cfg: MockConfig,
    clock: Clock,
    tune: impl FnOnce(&mut sidetrack_config::Config),
) -> Env {
    let mock = MockServer::start(mock_cfg).await.unwrap();
    let src = yaml
        .replace("${MOCK}", &mock.base_url())
        .replace("${DEAD}", &dead_url());
    let mut cfg = sidetrack_config::load_str(&src, "test.yaml").unwrap_or_else(|e| panic!("{e}"));
    tune(&mut cfg);
    let log = RoutingLog::memory();
    let options = GatewayOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        clock: clock.clone(),
        seed: Some(7),
        reload: None,
    };
    let gw = sidetrack_gateway::start(cfg, log.clone(), options)
        .await
        .unwrap();
    Env {
        mock,
        gw,
        log,
        clock,
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

impl Env {
    /// `POST /v1/embeddings` with `body`.
    pub async fn embed(&self, body: serde_json::Value) -> Reply {
        self.post("/v1/embeddings", body, &[]).await
    }

    pub async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = http::Request::post(format!("{}{path}", self.gw.base_url()))
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .client
            .request(req.body(Full::new(Bytes::from(body.to_string()))).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match resp.into_body().collect().await {
            Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
            Err(e) => format!("<body error: {e}>"),
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn chat(&self, model: &str, stream: bool) -> Reply {
        self.post(
            "/v1/chat/completions",
            serde_json::json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await
    }

    /// The `n`-th routing record (1-based), waiting for it to be written.
    pub async fn record(&self, n: usize) -> RoutingRecord {
        let recs = self.log.wait_for(n, Duration::from_secs(10)).await;
        assert!(
            recs.len() >= n,
            "expected {n} routing records, got {}",
            recs.len()
        );
        recs[n - 1].clone()
    }

    pub fn hits(&self, model: &str) -> u64 {
        self.mock.hits(model)
    }

    pub fn route(rec: &RoutingRecord) -> Vec<String> {
        rec.attempts
            .iter()
            .map(|a| format!("{}/{}", a.target, a.model))
            .collect()
    }
}

/// The Python with the official SDKs (installed by `.ci/run` into `.venv`).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SIDETRACK_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        venv.exists(),
        "the SDK tests need the official SDKs: run `bash .ci/run` once (it creates .venv) or set SIDETRACK_PYTHON"
    );
    venv
}

/// Runs `tests/sdk/<script>` with args; returns its JSON stdout.
pub async fn run_sdk(script: &str, args: &[&str]) -> serde_json::Value {
    run_sdk_env(script, args, &[]).await
}

/// Like [`run_sdk`], with extra environment variables for the script.
pub async fn run_sdk_env(script: &str, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/sdk")
        .join(script);
    let mut cmd = tokio::process::Command::new(python());
    cmd.arg(path).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sdk script failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("bad sdk output {stdout}: {e}"))
}

/// The mock answering `text`.
pub fn reply(text: &str) -> Behaviour {
    Behaviour {
        reply: Some(text.to_owned()),
        ..Behaviour::default()
    }
}

/// The mock answering 503 with `Retry-After: 7`.
pub fn down() -> Behaviour {
    Behaviour {
        status: Some(503),
        retry_after_seconds: Some(7),
        ..Behaviour::default()
    }
}

/// Cosine similarity of two vectors.
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

/// A JSON array of numbers as floats.
pub fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The text content of an OpenAI chat SSE body.
pub fn streamed_text(sse: &str) -> String {
    sidetrack_dialects::openai_chat::stream_text(sse)
}

impl Env {
    /// GET on the admin listener; returns status and body text.
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        self.admin("GET", path).await
    }

    pub async fn admin_post(&self, path: &str) -> (u16, String) {
        self.admin("POST", path).await
    }

    /// GET on the admin listener with `Authorization: Bearer <token>`.
    pub async fn admin_get_with(&self, path: &str, token: &str) -> (u16, String) {
        self.admin_req("GET", path, Some(token)).await
    }

    async fn admin(&self, method: &str, path: &str) -> (u16, String) {
        self.admin_req(method, path, None).await
    }

    async fn admin_req(&self, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.gw.admin_url()));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if method == "POST" {
            // The admin plane refuses other POSTs (SPEC §14).
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let resp = self.client.request(req).await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// One destination's entry in `GET /admin/destinations`.
    pub async fn destination(&self, target: &str, model: &str) -> serde_json::Value {
        let (status, body) = self.admin_get("/admin/destinations").await;
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["destinations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["target"] == target && d["model"] == model)
            .cloned()
            .unwrap_or_else(|| panic!("no destination {target}/{model} in {body}"))
    }

    pub async fn breaker(&self, target: &str, model: &str) -> String {
        self.destination(target, model).await["state"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The value of one exact Prometheus sample line (`name{labels}`), or 0 when absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.admin_get("/metrics").await;
        text.lines()
            .find_map(|l| {
                l.strip_prefix(series)
                    .and_then(|rest| rest.strip_prefix(' '))
            })
            .map(|v| v.trim().parse().unwrap())
            .unwrap_or(0.0)
    }

    /// Waits (bounded) until the mock has seen `n` hits for `model`.
    pub async fn wait_hits(&self, model: &str, n: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.mock.hits(model) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "mock never saw {n} hits on {model}"
            );
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A self-signed certificate for `localhost`, written to a fresh temp dir named after `tag`:
/// (cert path, key path). boto3 sends a Bedrock bearer token only over HTTPS.
pub fn self_signed_cert(tag: &str) -> (String, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("sidetrack-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c.display().to_string(), k.display().to_string())
}
