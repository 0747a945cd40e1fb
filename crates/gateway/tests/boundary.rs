//! SPEC §14 "What crosses from upstream to caller", "Credentials in URLs", "Abandoned requests" and
//! the estimate half of "Token limits", over real sockets: the real mock, and for what the mock
//! cannot script (cookies, echoed credentials, a connection watched for its close) a scripted raw
//! HTTP/1.1 upstream.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{behaviours, start, Env};
use sidetrack_mock::{Behaviour, MockConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

// ---- a scripted upstream ------------------------------------------------------------------------

/// What the scripted upstream does with one request.
enum Script {
    /// Writes these bytes (a whole HTTP/1.1 answer with `connection: close`) and closes.
    Answer(Vec<u8>),
    /// Writes these bytes (an answer's head and its first part, or nothing) and then waits for the
    /// gateway to close the connection, reporting [`Seen::Closed`].
    Hold(Vec<u8>),
}

#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// A request was read (its head and body).
    Request,
    /// The gateway closed a connection the upstream was holding open.
    Closed,
}

struct Scripted {
    url: String,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Scripted {
    /// Serves on loopback; `script` gets each request's whole text (head and body).
    async fn start(script: impl Fn(&str) -> Script + Send + Sync + 'static) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, seen) = mpsc::unbounded_channel();
        let script = Arc::new(script);
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    return;
                };
                let (script, tx) = (script.clone(), tx.clone());
                tokio::spawn(async move { serve(sock, &*script, &tx).await });
            }
        });
        Scripted { url, seen }
    }

    /// The next thing the upstream saw (bounded wait).
    async fn next(&mut self) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), self.seen.recv())
            .await
            .expect("the upstream saw nothing within 10 s")
            .unwrap()
    }
}

async fn serve(
    mut sock: TcpStream,
    script: &(dyn Fn(&str) -> Script + Send + Sync),
    tx: &mpsc::UnboundedSender<Seen>,
) {
    let Some(request) = read_request(&mut sock).await else {
        return;
    };
    let _ = tx.send(Seen::Request);
    match script(&request) {
        Script::Answer(bytes) => {
            let _ = sock.write_all(&bytes).await;
            let _ = sock.shutdown().await;
        }
        Script::Hold(bytes) => {
            let _ = sock.write_all(&bytes).await;
            let mut buf = [0u8; 1024];
            // Any read that ends (EOF or reset) means the gateway let go of the connection.
            while let Ok(n) = sock.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            let _ = tx.send(Seen::Closed);
        }
    }
}

/// One HTTP/1.1 request (head and `content-length` body) as text.
async fn read_request(sock: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// A whole answer: status line, `headers`, `content-length`, `connection: close`, `body`.
fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Script {
    let mut out = format!("HTTP/1.1 {status} X\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    Script::Answer(out.into_bytes())
}

/// The head of an SSE answer read until close, and its events.
fn sse(events: &[&str]) -> Vec<u8> {
    let mut out = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for e in events {
        out.push_str(&format!("data: {e}\n\n"));
    }
    out.into_bytes()
}

fn chat_chunk(content: &str) -> String {
    serde_json::json!({
        "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}],
    })
    .to_string()
}

const COMPLETION: &str = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;

/// The model a request asked for (the scripted upstream answers by model name).
fn model_of(request: &str) -> String {
    let body = &request[request.find("\r\n\r\n").unwrap() + 4..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    v["model"].as_str().unwrap_or_default().to_owned()
}

/// Starts the scripted upstream and a gateway whose config has `${RAW}` for its URL.
async fn start_scripted(
    yaml: &str,
    script: impl Fn(&str) -> Script + Send + Sync + 'static,
) -> (Env, Scripted) {
    let raw = Scripted::start(script).await;
    let env = start(&yaml.replace("${RAW}", &raw.url), MockConfig::default()).await;
    (env, raw)
}

/// The sum of the samples of `name` whose labels contain `label` (e.g. `reason="x"`).
async fn metric_sum(env: &Env, name: &str, label: &str) -> f64 {
    let (_, text) = env.admin_get("/metrics").await;
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---- headers ------------------------------------------------------------------------------------

const UPSTREAM_KEY: &str = "sk-gw-upstream-0123456789";

const SCRIPTED: &str = r#"
targets:
  - { name: oa, provider: openai, baseUrl: "${RAW}", apiKey: sk-gw-upstream-0123456789, models: ["*"] }
  - { name: br, provider: bedrock, baseUrl: "${RAW}", apiKey: br-gw-upstream-0123456789, models: ["br-*"] }
rules:
  - priority: 1
    matchModels: ["br-*"]
    routeToTarget: { staticRoute: { target: br } }
  - priority: 2
    matchModels: ["*"]
    routeToTarget: { staticRoute: { target: oa } }
"#;

/// Upstream headers a gateway must not pass on, and ones it must.
const NOISY: &[(&str, &str)] = &[
    ("set-cookie", "session=upstream-cookie; Path=/"),
    ("server", "upstream-proxy/1.2"),
    ("x-internal-route", "pod-7.cluster.local"),
    ("x-request-id", "req-upstream-1"),
    ("openai-processing-ms", "12"),
    ("x-ratelimit-remaining-requests", "99"),
    ("anthropic-ratelimit-tokens-remaining", "1000"),
    ("retry-after", "7"),
];

fn noisy_script(request: &str) -> Script {
    let model = model_of(request);
    match model.as_str() {
        "ok" => answer(
            200,
            &[&[("content-type", "application/json")], NOISY].concat(),
            COMPLETION,
        ),
        "limited" => answer(
            429,
            &[&[("content-type", "application/json")], NOISY].concat(),
            r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
        ),
        _ => answer(404, &[], "{}"),
    }
}

fn assert_relayed_only_allowed(r: &common::Reply) {
    for name in ["set-cookie", "server", "x-internal-route"] {
        assert_eq!(r.header(name), None, "{name} must not be relayed");
    }
    assert_eq!(r.header("x-request-id"), Some("req-upstream-1"));
    assert_eq!(r.header("openai-processing-ms"), Some("12"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("99"));
    assert_eq!(
        r.header("anthropic-ratelimit-tokens-remaining"),
        Some("1000")
    );
    assert_eq!(r.header("retry-after"), Some("7"));
    // The gateway's own headers are added after the filter.
    assert!(r.header("x-sidetrack-request-id").is_some());
}

#[tokio::test]
async fn only_allow_listed_upstream_headers_reach_the_caller() {
    let (env, _raw) = start_scripted(SCRIPTED, noisy_script).await;
    let ok = env.chat("ok", false).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_relayed_only_allowed(&ok);

    let limited = env.chat("limited", false).await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert_relayed_only_allowed(&limited);

    // Translated (an Anthropic caller): the same allow-list.
    let translated = env
        .post(
            "/v1/messages",
            serde_json::json!({"model": "ok", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(translated.status, 200, "{}", translated.body);
    assert_relayed_only_allowed(&translated);
}

#[tokio::test]
async fn bedrock_headers_pass_in_bedrock_dialect() {
    let script = |request: &str| {
        if request.contains("br-fail") {
            answer(
                400,
                &[
                    ("content-type", "application/json"),
                    ("x-amzn-errortype", "ValidationException:http://internal/"),
                    ("x-amzn-requestid", "aws-req-2"),
                    ("set-cookie", "AWSALB=x"),
                ],
                r#"{"message":"bad input"}"#,
            )
        } else {
            answer(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-amzn-requestid", "aws-req-1"),
                    ("x-amzn-bedrock-invocation-latency", "321"),
                    ("x-amzn-bedrock-output-token-count", "2"),
                    ("set-cookie", "AWSALB=x"),
                ],
                r#"{"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3}}"#,
            )
        }
    };
    let (env, _raw) = start_scripted(SCRIPTED, script).await;
    let body = serde_json::json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
    let ok = env.post("/model/br-ok/converse", body.clone(), &[]).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-amzn-requestid"), Some("aws-req-1"));
    assert_eq!(ok.header("x-amzn-bedrock-invocation-latency"), Some("321"));
    assert_eq!(ok.header("x-amzn-bedrock-output-token-count"), Some("2"));
    assert_eq!(ok.header("set-cookie"), None);

    let failed = env.post("/model/br-fail/converse", body, &[]).await;
    assert_eq!(failed.status, 400, "{}", failed.body);
    assert_eq!(
        failed.header("x-amzn-errortype"),
        Some("ValidationException:http://internal/")
    );
    assert_eq!(failed.json()["message"], "bad input");
    assert_eq!(failed.header("set-cookie"), None);
}

// ---- content-encoding ---------------------------------------------------------------------------

const MOCKED: &str = r#"
targets:
  - { name: oa, provider: openai, baseUrl: "${MOCK}/v1", apiKey: k-upstream, models: ["*"] }
"#;

fn gzip_labelled(b: Behaviour) -> Behaviour {
    Behaviour {
        content_encoding: Some("gzip".into()),
        ..b
    }
}

#[tokio::test]
async fn content_encoding_goes_only_with_the_upstreams_own_bytes() {
    let mock = behaviours(&[
        ("labelled", gzip_labelled(Behaviour::default())),
        (
            // Half a JSON body, then the connection dies: untranslatable.
            "garbled",
            gzip_labelled(Behaviour {
                drop_after_chunks: Some(1),
                ..Behaviour::default()
            }),
        ),
    ]);
    let env = start(MOCKED, mock).await;

    // Same dialect: the caller gets the upstream's bytes, so their label stays.
    let same = env.chat("labelled", false).await;
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(same.header("content-encoding"), Some("gzip"));

    let messages = |model: &str| serde_json::json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    // Translated: a body the gateway wrote.
    let translated = env.post("/v1/messages", messages("labelled"), &[]).await;
    assert_eq!(translated.status, 200, "{}", translated.body);
    assert_eq!(translated.header("content-encoding"), None);
    assert_eq!(translated.json()["type"], "message");

    // The gateway's own 502 for an answer it could not translate.
    let bad = env.post("/v1/messages", messages("garbled"), &[]).await;
    assert_eq!(bad.status, 502, "{}", bad.body);
    assert_eq!(bad.header("content-encoding"), None);
    assert_eq!(bad.json()["error"]["type"], "api_error");
    let rec = env.record(3).await;
    assert_eq!(
        rec.attempts[0].detail.as_deref(),
        Some("untranslatableResponse")
    );
}

// ---- error messages -----------------------------------------------------------------------------

/// An upstream that answers 401 quoting the credential it was sent (as some proxies do), and one
/// with a 10 KiB message.
fn echoing_script(request: &str) -> Script {
    let model = model_of(request);
    let auth = request
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("authorization")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    let json = [("content-type", "application/json")];
    match model.as_str() {
        "echo-key" => {
            let body = serde_json::json!({"error": {
                "message": format!("Incorrect API key provided: {auth}. You can find your API key at https://example.invalid."),
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key",
            }});
            answer(401, &json, &body.to_string())
        }
        "long-error" => {
            let body = serde_json::json!({"error": {
                "message": "E".repeat(10 * 1024), "type": "invalid_request_error", "param": "messages", "code": null,
            }});
            answer(400, &json, &body.to_string())
        }
        _ => answer(404, &[], "{}"),
    }
}

#[tokio::test]
async fn the_gateways_upstream_key_in_an_error_is_redacted() {
    let (env, _raw) = start_scripted(SCRIPTED, echoing_script).await;

    let same = env.chat("echo-key", false).await;
    assert_eq!(same.status, 401, "{}", same.body);
    assert!(!same.body.contains(UPSTREAM_KEY), "{}", same.body);
    let e = &same.json()["error"];
    assert_eq!(
        e["message"],
        "Incorrect API key provided: Bearer [redacted]. You can find your API key at https://example.invalid."
    );
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["code"], "invalid_api_key");

    let translated = env
        .post(
            "/v1/messages",
            serde_json::json!({"model": "echo-key", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(translated.status, 401, "{}", translated.body);
    assert!(
        !translated.body.contains(UPSTREAM_KEY),
        "{}",
        translated.body
    );
    let v = translated.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Bearer [redacted]."),
        "{v}"
    );
}

#[tokio::test]
async fn a_10_kib_upstream_error_message_arrives_capped_at_4_kib() {
    let (env, _raw) = start_scripted(SCRIPTED, echoing_script).await;

    let same = env.chat("long-error", false).await;
    assert_eq!(same.status, 400);
    let e = &same.json()["error"];
    let m = e["message"].as_str().unwrap();
    assert!(m.len() <= 4096 && m.len() > 4000, "{}", m.len());
    assert!(m.starts_with("EEEE") && m.ends_with("[truncated]"), "{m}");
    assert_eq!(e["type"], "invalid_request_error");
    assert_eq!(e["param"], "messages");

    let translated = env
        .post(
            "/v1/messages",
            serde_json::json!({"model": "long-error", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(translated.status, 400);
    let m = translated.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(m.len() <= 4096 && m.starts_with("EEEE"), "{}", m.len());
}

// ---- URLs ---------------------------------------------------------------------------------------

#[tokio::test]
async fn admin_config_hides_credentials_in_urls() {
    let yaml = r#"
targets:
  - { name: oa, provider: openai, baseUrl: "${MOCK}/v1?api-version=2024-10-21&api_key=qs-secret-1&Signature=qs-secret-2" }
logging:
  otlpEndpoint: "http://127.0.0.1:9/v1/traces?token=qs-secret-3"
"#;
    let env = start(yaml, MockConfig::default()).await;
    let (status, body) = env.admin_get("/admin/config").await;
    assert_eq!(status, 200);
    for secret in ["qs-secret-1", "qs-secret-2", "qs-secret-3"] {
        assert!(!body.contains(secret), "{secret} shown: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let base = v["targets"][0]["baseUrl"].as_str().unwrap();
    assert!(
        base.ends_with("/v1?api-version=2024-10-21&api_key=***&Signature=***"),
        "{base}"
    );
    assert_eq!(
        v["logging"]["otlpEndpoint"],
        "http://127.0.0.1:9/v1/traces?token=***"
    );
}

#[test]
fn check_rejects_a_base_url_with_user_info() {
    let yaml = "targets:\n  - name: oa\n    provider: openai\n    baseUrl: https://user:hunter22@api.example.com/v1\n";
    let err = sidetrack_config::load_str(yaml, "gw.yaml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gw.yaml:4:14: targets[0].baseUrl: must not carry credentials"),
        "{err}"
    );
    assert!(!err.contains("hunter22"), "{err}");
}

// ---- abandoned requests -------------------------------------------------------------------------

/// A raw request on its own connection (so dropping the stream is the caller going away).
async fn raw_request(env: &Env, path: &str, body: &serde_json::Value) -> TcpStream {
    let addr = env.gw.addr;
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    sock.write_all(body.as_bytes()).await.unwrap();
    sock
}

async fn assert_cancelled_and_counted(env: &Env, committed: bool, status: u16) {
    let rec = env.record(1).await;
    assert_eq!(rec.outcome, "CANCELLED", "{rec:?}");
    assert_eq!(rec.reason, "callerCancelled");
    assert_eq!(rec.committed, committed);
    assert_eq!(rec.status, status);
    assert_eq!(rec.requested_model.as_deref(), Some("slow"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let counted = metric_sum(
            env,
            "sidetrack_requests_total",
            "reason=\"callerCancelled\"",
        )
        .await;
        let in_flight = env.metric("sidetrack_in_flight_requests").await;
        if counted == 1.0 && in_flight == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "requests_total{{callerCancelled}} = {counted}, in flight = {in_flight}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_caller_that_leaves_during_the_walk_cancels_the_attempt_and_is_logged() {
    // The upstream reads the request and never answers.
    let (env, mut raw) = start_scripted(SCRIPTED, |_| Script::Hold(Vec::new())).await;
    let body =
        serde_json::json!({"model": "slow", "messages": [{"role": "user", "content": "hi"}]});
    let caller = raw_request(&env, "/v1/chat/completions", &body).await;
    assert_eq!(raw.next().await, Seen::Request);
    drop(caller);
    assert_eq!(
        raw.next().await,
        Seen::Closed,
        "the in-flight attempt's connection is dropped"
    );
    assert_cancelled_and_counted(&env, false, 499).await;
}

#[tokio::test]
async fn a_caller_that_leaves_mid_stream_cancels_the_relay_and_is_logged() {
    let (env, mut raw) = start_scripted(SCRIPTED, |_| {
        Script::Hold(sse(&[&chat_chunk("one "), &chat_chunk("two ")]))
    })
    .await;
    let body = serde_json::json!({"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let mut caller = raw_request(&env, "/v1/chat/completions", &body).await;
    assert_eq!(raw.next().await, Seen::Request);
    // Read until the first content arrives: the stream is committed and relaying.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("two ") {
        let n = tokio::time::timeout(Duration::from_secs(10), caller.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "the gateway closed early");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    drop(caller);
    assert_eq!(
        raw.next().await,
        Seen::Closed,
        "the upstream stream is dropped"
    );
    assert_cancelled_and_counted(&env, true, 200).await;
}

#[tokio::test]
async fn a_request_that_completes_is_not_taken_for_an_abandoned_one() {
    let mock = behaviours(&[("plain", Behaviour::default())]);
    let env = start(MOCKED, mock).await;
    for (i, stream) in [false, true, false].into_iter().enumerate() {
        let r = env.chat("plain", stream).await;
        assert_eq!(r.status, 200);
        let rec = env.record(i + 1).await;
        assert_eq!(
            (rec.outcome.as_str(), &*rec.reason),
            ("SERVED", "servedByPrimary"),
            "{rec:?}"
        );
    }
}

// ---- token limits -------------------------------------------------------------------------------

#[tokio::test]
async fn a_stream_without_usage_settles_an_estimate_not_zero() {
    let yaml = r#"
auth:
  keys:
    - { principal: metered, key: caller-key-0001, limits: { tokensPerMinute: 400 } }
targets:
  - { name: oa, provider: openai, baseUrl: "${RAW}", apiKey: sk-gw-upstream-0123456789, models: ["*"] }
"#;
    // A complete stream that never reports usage.
    let (env, _raw) = start_scripted(yaml, |_| {
        Script::Answer(sse(&[&chat_chunk("hello"), "[DONE]"]))
    })
    .await;
    let auth = [("authorization", "Bearer caller-key-0001")];
    let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let first = env.post("/v1/chat/completions", body.clone(), &auth).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert!(first.body.contains("hello"));
    let rec = env.record(1).await;
    assert_eq!((rec.outcome.as_str(), rec.usage), ("SERVED", None));
    // The first reserved about 260 tokens (prompt estimate + 256); kept, a second does not fit.
    let second = env.post("/v1/chat/completions", body, &auth).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert!(second.header("retry-after").is_some());
}
