//! Issue 6 "must show" 1 and 2: replicas share breaker state through a real `redis-server`, and a
//! Redis outage never fails a caller request. Issue 14 "must show" 4 (SPEC §10): a transition on
//! one replica is pushed to the others (pub/sub), so with the periodic pull set to 10 s a breaker
//! opened on A is skipped by B 100 ms later; resets propagate the same way, and the push works
//! again after Redis restarts.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{behaviours, status, Env};
use sidetrack_gateway::{Clock, GatewayOptions, RoutingLog};
use sidetrack_mock::MockConfig;

/// A throwaway `redis-server` on a free loopback port (installed by `.ci/run`).
struct Redis {
    port: u16,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = Redis { port, child: None };
        r.restart();
        r
    }

    fn restart(&mut self) {
        let bin = std::env::var("SIDETRACK_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} ({e}): run `bash .ci/run`, which installs redis-server")
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn config(redis: &str) -> String {
    format!(
        r#"
state:
  redis: {{ url: "{redis}", keyPrefix: "t{pid}:", syncMilliseconds: 50, budgetMilliseconds: 50 }}
targets:
  - name: up
    provider: openai
    baseUrl: ${{MOCK}}/v1
    models: ["m-*"]
    circuitBreaker: {{ consecutiveFailures: 3, openMilliseconds: 60000 }}
rules:
  - name: r
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: {{ target: up, model: m-p }}
      fallback: {{ targetFallback: [ {{ target: up, model: m-f }} ] }}
"#,
        pid = std::process::id()
    )
}

/// A second gateway on the same mock and config (another replica).
async fn replica(env: &Env, yaml: &str) -> sidetrack_gateway::GatewayHandle {
    replica_with_log(env, yaml).await.0
}

/// [`replica`], with its routing log.
async fn replica_with_log(env: &Env, yaml: &str) -> (sidetrack_gateway::GatewayHandle, RoutingLog) {
    let log = RoutingLog::memory();
    let src = yaml.replace("${MOCK}", &env.mock.base_url());
    let cfg = sidetrack_config::load_str(&src, "replica.yaml").unwrap();
    let options = GatewayOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        clock: Clock::real(),
        seed: Some(11),
        reload: None,
    };
    let gw = sidetrack_gateway::start(cfg, log.clone(), options)
        .await
        .unwrap();
    (gw, log)
}

async fn get_json(url: &str) -> serde_json::Value {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let resp = client.get(url.parse().unwrap()).await.unwrap();
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null)
}

async fn metrics_text(admin: &str) -> String {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let resp = client
        .get(format!("{admin}/metrics").parse().unwrap())
        .await
        .unwrap();
    use http_body_util::BodyExt;
    String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

async fn state_of(admin: &str, model: &str) -> String {
    let v = get_json(&format!("{admin}/admin/destinations")).await;
    v["destinations"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["model"] == model))
        .and_then(|d| d["state"].as_str())
        .unwrap_or("?")
        .to_owned()
}

/// Polls `cond` (bounded) until it holds.
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn post_to(base: &str) -> u16 {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let body = serde_json::json!({"model": "ask", "messages": []}).to_string();
    let req = http::Request::post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    client
        .request(req)
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_one_replica_is_skipped_by_the_other() {
    let redis = Redis::start();
    let yaml = config(&redis.url());
    let a = common::start(&yaml, behaviours(&[("m-p", status(503))])).await;
    let b = replica(&a, &yaml).await;
    for _ in 0..3 {
        assert_eq!(a.chat("ask", false).await.status, 200);
    }
    assert_eq!(a.breaker("up", "m-p").await, "OPEN");
    let b_admin = b.admin_url();
    eventually("replica B adopts the open breaker", || async {
        state_of(&b_admin, "m-p").await == "OPEN"
    })
    .await;
    let hits = a.hits("m-p");
    for _ in 0..10 {
        assert_eq!(post_to(&b.base_url()).await, 200);
    }
    assert_eq!(
        a.hits("m-p"),
        hits,
        "replica B never called the destination replica A opened"
    );
    assert!(metrics_text(&b_admin)
        .await
        .contains("sidetrack_state_backend_up 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_no_request_and_state_converges_after() {
    let mut redis = Redis::start();
    let yaml = config(&redis.url());
    let a = common::start(&yaml, MockConfig::default()).await;
    let b = replica(&a, &yaml).await;
    let (a_base, b_base) = (a.gw.base_url(), b.base_url());
    let (a_admin, b_admin) = (a.gw.admin_url(), b.admin_url());

    // Steady load on both replicas for the whole outage.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for base in [a_base.clone(), b_base.clone()] {
        let stop = stop.clone();
        load.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if post_to(&base).await == 200 {
                    ok += 1
                } else {
                    failed += 1
                }
            }
            (ok, failed)
        }));
    }

    redis.kill();
    eventually("replica A reports the backend down", || async {
        metrics_text(&a_admin)
            .await
            .contains("sidetrack_state_backend_up 0")
    })
    .await;
    // While Redis is down, replica A sees the primary fail and opens its breaker locally.
    a.mock.set_behaviour("m-p", status(503));
    eventually("replica A opens m-p on local state", || async {
        state_of(&a_admin, "m-p").await == "OPEN"
    })
    .await;
    a.mock
        .set_behaviour("m-p", sidetrack_mock::Behaviour::default());

    redis.restart();
    for admin in [&a_admin, &b_admin] {
        eventually("backend up again", || async {
            metrics_text(admin)
                .await
                .contains("sidetrack_state_backend_up 1")
        })
        .await;
    }
    eventually("replica B converges to A's open breaker", || async {
        state_of(&b_admin, "m-p").await == "OPEN"
    })
    .await;

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for h in load {
        let (ok, failed) = h.await.unwrap();
        assert_eq!(failed, 0, "no caller request failed because Redis did");
        total += ok;
    }
    assert!(total > 20, "the load ran throughout: {total} requests");
}

async fn post_as(
    base: &str,
    path: &str,
    key: &str,
    body: serde_json::Value,
) -> (u16, http::HeaderMap, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let req = http::Request::post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {key}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    use http_body_util::BodyExt;
    let text =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    (status, headers, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_limit_holds_across_two_replicas() {
    let redis = Redis::start();
    let yaml = format!(
        r#"
state:
  redis: {{ url: "{url}", keyPrefix: "rl{pid}:" }}
auth:
  keys:
    - {{ principal: capped, key: capped-key, limits: {{ requestsPerMinute: 60 }} }}
targets:
  - {{ name: up, provider: openai, baseUrl: "${{MOCK}}/v1", models: ["m-*"] }}
  - {{ name: claude, provider: anthropic, baseUrl: "${{MOCK}}", apiKey: k, models: ["claude-*"] }}
"#,
        url = redis.url(),
        pid = std::process::id()
    );
    let a = common::start(&yaml, MockConfig::default()).await;
    let b = replica(&a, &yaml).await;
    let chat = serde_json::json!({"model": "m-x", "messages": []});
    for i in 0..60 {
        let base = if i % 2 == 0 {
            a.gw.base_url()
        } else {
            b.base_url()
        };
        let (status, _, body) =
            post_as(&base, "/v1/chat/completions", "capped-key", chat.clone()).await;
        assert_eq!(status, 200, "request {i}: {body}");
    }
    // The 61st, on either replica, in the caller's own dialect, with Retry-After.
    let (status, headers, body) = post_as(
        &b.base_url(),
        "/v1/chat/completions",
        "capped-key",
        chat.clone(),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    let messages = serde_json::json!({"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let (status, headers, body) =
        post_as(&a.gw.base_url(), "/v1/messages", "capped-key", messages).await;
    assert_eq!(status, 429, "{body}");
    assert!(headers.contains_key("retry-after"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("rate_limit_error"))
    );
    assert_eq!(
        a.mock.total_hits(),
        60,
        "no upstream attempt for the rejected requests"
    );
    let rec = a.record(31).await;
    assert_eq!(rec.reason, "gatewayRejected:rateLimited");
}

/// The state-backend contract: the same scenario must hold with state in memory and in Redis.
/// Breakers open after the configured failures, open destinations are skipped, an admin reset
/// closes them, and request and token limits refuse what exceeds them.
async fn backend_contract(state: &str, label: &str) {
    let yaml = format!(
        r#"
{state}
auth:
  keys:
    - {{ principal: free, key: k0 }}
    - {{ principal: capped, key: k1, limits: {{ requestsPerMinute: 5 }} }}
    - {{ principal: thrifty, key: k2, limits: {{ tokensPerMinute: 600 }} }}
targets:
  - name: up
    provider: openai
    baseUrl: ${{MOCK}}/v1
    models: ["m-*"]
    circuitBreaker: {{ consecutiveFailures: 2, openMilliseconds: 60000 }}
rules:
  - name: r
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: {{ target: up, model: m-p }}
      fallback: {{ targetFallback: [ {{ target: up, model: m-f }} ] }}
"#
    );
    let big = sidetrack_mock::Behaviour {
        usage: Some(sidetrack_mock::UsageConfig {
            prompt_tokens: 200,
            completion_tokens: 200,
        }),
        ..Default::default()
    };
    let env = common::start(&yaml, behaviours(&[("m-p", status(503)), ("m-big", big)])).await;
    let base = env.gw.base_url();
    let ask = serde_json::json!({"model": "ask", "messages": []});
    for _ in 0..2 {
        assert_eq!(
            post_as(&base, "/v1/chat/completions", "k0", ask.clone())
                .await
                .0,
            200,
            "{label}"
        );
    }
    let admin = env.gw.admin_url();
    eventually("breaker open", || async {
        state_of(&admin, "m-p").await == "OPEN"
    })
    .await;
    let hits = env.hits("m-p");
    assert_eq!(
        post_as(&base, "/v1/chat/completions", "k0", ask.clone())
            .await
            .0,
        200,
        "{label}"
    );
    assert_eq!(env.hits("m-p"), hits, "{label}: open destination skipped");
    assert_eq!(
        env.admin_post("/admin/destinations/up/m-p/reset").await.0,
        200
    );
    eventually("breaker closed", || async {
        state_of(&admin, "m-p").await == "CLOSED"
    })
    .await;

    // Requests per minute: the 6th of principal `capped` is refused.
    let plain = serde_json::json!({"model": "m-x", "messages": []});
    for i in 0..5 {
        assert_eq!(
            post_as(&base, "/v1/chat/completions", "k1", plain.clone())
                .await
                .0,
            200,
            "{label}: request {i}"
        );
    }
    let (status, headers, _) = post_as(&base, "/v1/chat/completions", "k1", plain.clone()).await;
    assert_eq!(status, 429, "{label}");
    assert!(headers.contains_key("retry-after"));
    // Tokens per minute (600): a request reserves an estimate (prompt bytes / 4 + 256 ≈ 260) and is
    // settled with its real usage (400 here). The first is admitted; by the third the window holds
    // more than 600 - 260 whether or not the second's settlement has landed yet.
    let big_req = serde_json::json!({"model": "m-big", "messages": []});
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(
            post_as(&base, "/v1/chat/completions", "k2", big_req.clone())
                .await
                .0,
        );
    }
    assert_eq!(statuses[0], 200, "{label}: {statuses:?}");
    assert!(
        statuses[2..].iter().all(|s| *s == 429),
        "{label}: the token budget is spent: {statuses:?}"
    );
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(env.hits("m-big") as usize, admitted, "{label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_contract_holds_in_memory() {
    backend_contract("", "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_contract_holds_in_redis() {
    let redis = Redis::start();
    let state = format!(
        "state:\n  redis: {{ url: \"{}\", keyPrefix: \"c{}:\" }}",
        redis.url(),
        std::process::id()
    );
    backend_contract(&state, "redis").await;
}

/// Two replicas, a primary that fails, and a periodic pull so slow (10 s) that only the push can
/// carry a transition within the test's time frames. The Redis budget is 500 ms: on a loaded test
/// machine a 50 ms budget drops writes (fail-open, by design), which would test the resync rather
/// than the push.
fn push_config(redis: &str, prefix: &str) -> String {
    config(redis)
        .replace("syncMilliseconds: 50", "syncMilliseconds: 10000")
        .replace("budgetMilliseconds: 50", "budgetMilliseconds: 500")
        .replace(
            &format!("keyPrefix: \"t{}:\"", std::process::id()),
            &format!("keyPrefix: \"{prefix}\""),
        )
}

/// How many connections are subscribed to `channel` (asked of Redis directly; 0 when it is down).
async fn subscribers(redis: &str, channel: &str) -> i64 {
    let Ok(client) = redis::Client::open(redis) else {
        return 0;
    };
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
        return 0;
    };
    let answer: redis::RedisResult<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await;
    answer.map(|(_, n)| n).unwrap_or(0)
}

/// Polls `cond` (bounded by `within`) until it holds.
async fn eventually_within<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Drives replica A until its breaker on the primary opens (3 counted failures).
async fn open_on_a(a: &Env) {
    for _ in 0..3 {
        assert_eq!(a.chat("ask", false).await.status, 200);
    }
    assert_eq!(a.breaker("up", "m-p").await, "OPEN");
}

fn pid_prefix(tag: &str) -> String {
    format!("{tag}{}-", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_on_a_is_skipped_by_b_100_ms_later_by_push() {
    let redis = Redis::start();
    let prefix = pid_prefix("push");
    let yaml = push_config(&redis.url(), &prefix);
    let a = common::start(&yaml, behaviours(&[("m-p", status(503))])).await;
    let (b, b_log) = replica_with_log(&a, &yaml).await;
    let channel = format!("{prefix}breaker");
    eventually("both replicas subscribed", || async {
        subscribers(&redis.url(), &channel).await == 2
    })
    .await;

    open_on_a(&a).await;
    // SPEC §10 / issue 14: "skipped by B 100 ms later" (the next pull is 10 s away).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let hits = a.hits("m-p");
    assert_eq!(post_to(&b.base_url()).await, 200);
    let rec = b_log.wait_for(1, Duration::from_secs(5)).await[0].clone();
    assert_eq!(
        Env::route(&rec),
        ["up/m-f"],
        "B's attempt went to the fallback"
    );
    assert_eq!(rec.skipped.len(), 1, "{:?}", rec.skipped);
    assert_eq!(
        (&*rec.skipped[0].model, rec.skipped[0].why.as_str()),
        ("m-p", "BREAKER_OPEN")
    );
    assert_eq!(
        a.hits("m-p"),
        hits,
        "no request from B reached the open primary"
    );
    assert_eq!(state_of(&b.admin_url(), "m-p").await, "OPEN");

    // The way back: an admin reset on A closes the breaker on B too, well before the next pull.
    let started = Instant::now();
    assert_eq!(
        a.admin_post("/admin/destinations/up/m-p/reset").await.0,
        200
    );
    let b_admin = b.admin_url();
    eventually_within("B adopts A's reset", Duration::from_secs(2), || async {
        state_of(&b_admin, "m-p").await == "CLOSED"
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(post_to(&b.base_url()).await, 200);
    let rec = b_log.wait_for(2, Duration::from_secs(5)).await[1].clone();
    assert_eq!(
        Env::route(&rec),
        ["up/m-p", "up/m-f"],
        "closed again on B: the primary is attempted"
    );
    assert_eq!(a.hits("m-p"), hits + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_push_resumes_after_redis_restarts() {
    let mut redis = Redis::start();
    let prefix = pid_prefix("again");
    let yaml = push_config(&redis.url(), &prefix);
    let a = common::start(&yaml, behaviours(&[("m-p", status(503))])).await;
    let (b, b_log) = replica_with_log(&a, &yaml).await;
    let channel = format!("{prefix}breaker");
    eventually("both replicas subscribed", || async {
        subscribers(&redis.url(), &channel).await == 2
    })
    .await;

    redis.kill();
    let (a_admin, b_admin) = (a.gw.admin_url(), b.admin_url());
    for admin in [&a_admin, &b_admin] {
        eventually("both replicas notice the lost subscription", || async {
            metrics_text(admin)
                .await
                .contains("sidetrack_state_backend_up 0")
        })
        .await;
    }
    redis.restart();
    eventually_within(
        "both replicas subscribed again",
        Duration::from_secs(15),
        || async { subscribers(&redis.url(), &channel).await == 2 },
    )
    .await;
    for admin in [&a_admin, &b_admin] {
        eventually_within(
            "both replicas report the backend up again",
            Duration::from_secs(10),
            || async {
                metrics_text(admin)
                    .await
                    .contains("sidetrack_state_backend_up 1")
            },
        )
        .await;
    }

    // The push again: B opens long before the 10 s pull could tell it (bounded, not 100 ms: right
    // after a restart the replicas are still resynchronising, and this machine is shared).
    open_on_a(&a).await;
    eventually_within(
        "B adopts A's open by push",
        Duration::from_secs(2),
        || async { state_of(&b_admin, "m-p").await == "OPEN" },
    )
    .await;
    let hits = a.hits("m-p");
    assert_eq!(post_to(&b.base_url()).await, 200);
    let rec = b_log.wait_for(1, Duration::from_secs(5)).await[0].clone();
    assert_eq!(Env::route(&rec), ["up/m-f"]);
    assert_eq!(
        rec.skipped
            .iter()
            .map(|s| (&*s.model, s.why.as_str()))
            .collect::<Vec<_>>(),
        [("m-p", "BREAKER_OPEN")]
    );
    assert_eq!(a.hits("m-p"), hits);
}

/// Destination `model`'s last transition on a replica: (state, when).
async fn last_transition(admin: &str, model: &str) -> Option<(String, std::time::SystemTime)> {
    let v = get_json(&format!("{admin}/admin/destinations")).await;
    let d = v["destinations"]
        .as_array()?
        .iter()
        .find(|d| d["model"] == model)?
        .clone();
    let t = &d["lastTransition"];
    Some((
        t["to"].as_str()?.to_owned(),
        humantime::parse_rfc3339(t["at"].as_str()?).ok()?,
    ))
}

/// Measures propagation: from A's transition to B applying it (both timestamps from the admin
/// API's `lastTransition.at`, millisecond resolution, one process so one clock), over 100 opens.
/// Run: `SIDETRACK_REDIS_SERVER=/usr/bin/redis-server cargo test -p sidetrack-gateway --release
/// --test shared_state -- --ignored --nocapture propagation_latency`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, not a check: prints p50/p99"]
async fn propagation_latency() {
    let redis = Redis::start();
    let prefix = pid_prefix("lat");
    let yaml = push_config(&redis.url(), &prefix);
    let a = common::start(&yaml, behaviours(&[("m-p", status(503))])).await;
    let b = replica(&a, &yaml).await;
    let channel = format!("{prefix}breaker");
    eventually("both replicas subscribed", || async {
        subscribers(&redis.url(), &channel).await == 2
    })
    .await;
    let (a_admin, b_admin) = (a.gw.admin_url(), b.admin_url());
    let mut samples = Vec::new();
    for _ in 0..100 {
        open_on_a(&a).await;
        let (_, at_a) = last_transition(&a_admin, "m-p").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        let at_b = loop {
            if let Some((to, at)) = last_transition(&b_admin, "m-p").await {
                if to == "OPEN" {
                    break at;
                }
            }
            assert!(Instant::now() < deadline, "B never opened");
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        samples.push(at_b.duration_since(at_a).unwrap_or_default());
        assert_eq!(
            a.admin_post("/admin/destinations/up/m-p/reset").await.0,
            200
        );
        eventually_within("B closes", Duration::from_secs(2), || async {
            state_of(&b_admin, "m-p").await == "CLOSED"
        })
        .await;
    }
    samples.sort();
    let p = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!(
        "propagation A→B over {} opens: p50 {:?}, p99 {:?}, max {:?}",
        samples.len(),
        p(0.50),
        p(0.99),
        samples[samples.len() - 1]
    );
    // The p99 depends on the machine's load (run it alone); the median must be far inside 50 ms.
    assert!(
        p(0.50) < Duration::from_millis(50),
        "SPEC §10: within 50 ms"
    );
}
