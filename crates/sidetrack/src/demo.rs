//! `sidetrack demo`: the built-in mock provider, a gateway on the embedded example config, and a
//! narrated sequence of requests showing what sidetrack does when a model fails.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_gateway::observe::RoutingRecord;
use sidetrack_gateway::RoutingLog;
use sidetrack_mock::{Behaviour, MockConfig, MockServer};

use crate::{fail, DEMO_GRACE, RUNTIME};

/// Prints a narration line; a closed stdout (e.g. piped into `head`) must not crash the demo.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

const CONFIG: &str = include_str!("../../../examples/demo.yaml");

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

struct Demo {
    client: HttpClient,
    base: String,
    log: RoutingLog,
    seen: usize,
}

struct Reply {
    status: u16,
    should_retry: Option<String>,
    /// `x-sidetrack-cache`
    cache: Option<String>,
    retry_after: Option<String>,
    text: String,
}

impl Demo {
    async fn send(&mut self, model: &str, stream: bool) -> Result<(Reply, RoutingRecord), String> {
        self.ask(model, "Say hello", stream).await
    }

    async fn ask(
        &mut self,
        model: &str,
        question: &str,
        stream: bool,
    ) -> Result<(Reply, RoutingRecord), String> {
        let body = serde_json::json!({
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": question}],
        });
        let req = http::Request::post(format!("{}/v1/chat/completions", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let resp = self
            .client
            .request(req)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let should_retry = header("x-should-retry");
        let cache = header("x-sidetrack-cache");
        let retry_after = header("retry-after");
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.seen += 1;
        let records = self.log.wait_for(self.seen, Duration::from_secs(5)).await;
        let rec = records
            .get(self.seen - 1)
            .cloned()
            .ok_or("no routing record was written")?;
        Ok((
            Reply {
                status,
                should_retry,
                cache,
                retry_after,
                text,
            },
            rec,
        ))
    }
}

fn describe(rec: &RoutingRecord) -> String {
    let mut lines = Vec::new();
    for a in &rec.attempts {
        let what = match (a.status, a.error_kind) {
            (Some(s), _) => format!("{} {s}", a.outcome.label()),
            (None, Some(k)) => k.to_owned(),
            _ => a.outcome.label().to_owned(),
        };
        let why = a
            .detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let breaker = if a.breaker == "CLOSED" {
            String::new()
        } else {
            format!(" [breaker {}]", a.breaker)
        };
        let class = a.error_class.map(|c| format!(" {c}")).unwrap_or_default();
        let kind = match a.kind {
            sidetrack_resilience::retry::AttemptKind::First => String::new(),
            k => format!(" [{}]", k.as_str()),
        };
        lines.push(format!(
            "      attempt hop {}: {}/{} → {what}{class}{why} in {:.1} ms{breaker}{kind}",
            a.hop, a.target, a.model, a.duration_ms
        ));
    }
    let served = rec
        .served_by
        .as_ref()
        .map(|s| format!("{}/{}", s.target, s.model))
        .unwrap_or_else(|| {
            if rec.reason == "servedFromCache" {
                "the response store".into()
            } else {
                "nobody".into()
            }
        });
    lines.push(format!(
        "    ⇒ status {} from {served}, reason `{}`, {} attempt(s), {:.1} ms total",
        rec.status,
        rec.reason,
        rec.attempts.len(),
        rec.latency_ms
    ));
    lines.join("\n")
}

/// One narrated request: title, model, streamed?, mock behaviours to set first.
type Step = (
    &'static str,
    &'static str,
    bool,
    Vec<(&'static str, Behaviour)>,
);

fn status(code: u16) -> Behaviour {
    Behaviour {
        status: Some(code),
        ..Behaviour::default()
    }
}

pub async fn run(listen: SocketAddr, admin: SocketAddr, no_serve: bool) -> ExitCode {
    let mock = match MockServer::start(MockConfig::default()).await {
        Ok(m) => m,
        Err(e) => return fail(RUNTIME, &format!("cannot start the mock provider: {e}")),
    };
    // A port that nothing listens on: bind one, note it, let it go.
    let dead = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a,
        Err(e) => return fail(RUNTIME, &format!("cannot reserve a port: {e}")),
    };
    let src = CONFIG
        .replace("${MOCK_URL}", &mock.base_url())
        .replace("${DEAD_URL}", &format!("http://{dead}"));
    let cfg = match sidetrack_config::load_str(&src, "examples/demo.yaml") {
        Ok(c) => c,
        Err(e) => return fail(RUNTIME, &format!("embedded demo config is invalid:\n{e}")),
    };
    let log = RoutingLog::memory();
    let options = sidetrack_gateway::GatewayOptions {
        listen: Some(listen),
        admin: Some(admin),
        ..Default::default()
    };
    let gw = match sidetrack_gateway::start(cfg, log.clone(), options).await {
        Ok(g) => g,
        Err(e) => {
            return fail(
                RUNTIME,
                &format!("{e} (try --listen 127.0.0.1:0 --admin 127.0.0.1:0)"),
            )
        }
    };
    let mut demo = Demo {
        client: Client::builder(TokioExecutor::new()).build_http(),
        base: gw.base_url(),
        log,
        seen: 0,
    };

    say!(
        "sidetrack demo — gateway on {}, mock provider on {}",
        gw.base_url(),
        mock.base_url()
    );
    say!("route for `gpt-4o`: rule `resilient-chat` → openai-primary/gpt-4o, fallback openai-backup/gpt-4o-mini");
    say!("(first-byte timeout 300 ms on the primary; default triggers 5XX, CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT)\n");

    let steps: Vec<Step> = vec![
        ("1. A healthy primary answers.", "gpt-4o", false, vec![]),
        ("2. The primary starts answering 503: the same request falls back inside the call.", "gpt-4o", false, vec![("gpt-4o", status(503))]),
        (
            "3. The primary hangs (first byte after 10 s): firstByteTimeoutMilliseconds moves on after 300 ms.",
            "gpt-4o",
            false,
            vec![("gpt-4o", Behaviour { first_byte_delay_milliseconds: Some(10_000), ..Behaviour::default() })],
        ),
        ("4. A dead host (connection refused) behind rule `dead-host`.", "legacy-chat", false, vec![]),
        (
            "5. Streaming: the primary answers 200, then `overloaded_error` before any token. With streamCommit firstToken nothing was sent yet, so it still falls back.",
            "gpt-4o",
            true,
            vec![(
                "gpt-4o",
                Behaviour {
                    stream_error_after_chunks: Some(0),
                    stream_error_type: Some("overloaded_error".into()),
                    ..Behaviour::default()
                },
            )],
        ),
        (
            "6. Everything is down: the caller gets the last 503, marked `x-should-retry: false` so the SDK does not multiply the calls.",
            "gpt-4o",
            false,
            vec![("gpt-4o", status(503)), ("gpt-4o-mini", status(503))],
        ),
    ];
    for (title, model, stream, behaviours) in steps {
        for (m, b) in behaviours {
            mock.set_behaviour(m, b);
        }
        say!("{title}");
        match demo.send(model, stream).await {
            Ok((reply, rec)) => {
                say!("{}", describe(&rec));
                if reply.status < 400 {
                    let text = if stream {
                        sidetrack_dialects::openai_chat::stream_text(&reply.text)
                    } else {
                        serde_json::from_str::<serde_json::Value>(&reply.text)
                            .ok()
                            .and_then(|v| {
                                v["choices"][0]["message"]["content"]
                                    .as_str()
                                    .map(str::to_owned)
                            })
                            .unwrap_or_default()
                    };
                    say!(
                        "    caller received: {text:?}{}\n",
                        if stream {
                            " (as a normal SSE stream)"
                        } else {
                            ""
                        }
                    );
                } else {
                    say!(
                        "    caller received: HTTP {} with x-should-retry: {}\n",
                        reply.status,
                        reply.should_retry.as_deref().unwrap_or("(absent)")
                    );
                }
            }
            Err(e) => return fail(RUNTIME, &format!("demo request failed: {e}")),
        }
    }
    if let Err(e) = breaker_story(&mut demo, &mock, &gw).await {
        return fail(RUNTIME, &format!("demo request failed: {e}"));
    }
    if let Err(e) = controller_story(&mut demo, &mock).await {
        return fail(RUNTIME, &format!("demo request failed: {e}"));
    }
    if let Err(e) = cache_story(&mut demo, &mock).await {
        return fail(RUNTIME, &format!("demo request failed: {e}"));
    }
    mock.reset();

    if no_serve {
        let _ = gw.shutdown(DEMO_GRACE).await;
        return ExitCode::SUCCESS;
    }
    say!(
        "The mock is healthy again. sidetrack keeps serving on {} until Ctrl-C. Try:",
        gw.base_url()
    );
    say!(
        "  curl -s {}/v1/chat/completions -H 'content-type: application/json' \\",
        gw.base_url()
    );
    say!("       -d '{{\"model\":\"gpt-4o\",\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}'");
    say!(
        "  dashboard: {}/  (routes, destinations over time, recent decisions)",
        gw.admin_url()
    );
    say!(
        "  or point the OpenAI SDK at it: OpenAI(base_url=\"{}/v1\", api_key=\"unused\")",
        gw.base_url()
    );
    say!(
        "A gentle background of traffic keeps the dashboard moving (one request a second), and every \
         {} s the primary answers 503 for {} s. Requests that did not go straight to their primary are \
         printed below.",
        OUTAGE_EVERY.as_secs(),
        OUTAGE_FOR.as_secs()
    );
    let printer = tokio::spawn(print_new_records(demo.log.clone(), demo.seen));
    let traffic = tokio::spawn(background_traffic(
        demo.client.clone(),
        demo.base.clone(),
        mock.base_url(),
    ));
    let _ = tokio::signal::ctrl_c().await;
    printer.abort();
    traffic.abort();
    say!("\nstopping");
    let _ = gw.shutdown(DEMO_GRACE).await;
    mock.shutdown().await;
    ExitCode::SUCCESS
}

fn breaker_line(gw: &sidetrack_gateway::GatewayHandle, target: &str, model: &str) -> String {
    gw.shared
        .health
        .snapshot()
        .into_iter()
        .find(|s| s.target == target && s.model == model)
        .map(|s| {
            let open = s
                .open_remaining
                .map(|r| format!(", closes in {} ms", r.as_millis()))
                .unwrap_or_default();
            let why = s
                .last_transition
                .map(|(_, reason, _)| format!(" — last change: {reason}"))
                .unwrap_or_default();
            format!(
                "    breaker {target}/{model}: {}{open}, {} consecutive failure(s){why}",
                s.state.as_str(),
                s.consecutive_failures
            )
        })
        .unwrap_or_default()
}

/// Steps 7–9: the primary's breaker opens, the primary is skipped, then it recovers.
async fn breaker_story(
    demo: &mut Demo,
    mock: &MockServer,
    gw: &sidetrack_gateway::GatewayHandle,
) -> Result<(), String> {
    mock.set_behaviour("gpt-4o-mini", Behaviour::default());
    say!(
        "7. The primary fails a fifth time in a row (steps 2, 3, 5, 6 and now): its breaker opens."
    );
    let (_, rec) = demo.send("gpt-4o", false).await?;
    say!("{}", describe(&rec));
    say!("{}\n", breaker_line(gw, "openai-primary", "gpt-4o"));

    say!("8. While the breaker is open the primary is skipped — no call, no timeout, straight to the backup.");
    let hits = mock.hits("gpt-4o");
    let (_, rec) = demo.send("gpt-4o", false).await?;
    say!("{}", describe(&rec));
    for s in &rec.skipped {
        say!(
            "      skipped hop {}: {}/{} ({})",
            s.hop,
            s.target,
            s.model,
            s.why
        );
    }
    say!(
        "    calls that reached the primary: {}\n",
        mock.hits("gpt-4o") - hits
    );

    say!("9. The primary recovers. After openMilliseconds (2 s) the breaker lets one probe through at a time; three successes close it.");
    mock.set_behaviour("gpt-4o", Behaviour::default());
    tokio::time::sleep(std::time::Duration::from_millis(2_050)).await;
    for _ in 0..3 {
        let (_, rec) = demo.send("gpt-4o", false).await?;
        say!("{}", describe(&rec));
    }
    say!("{}\n", breaker_line(gw, "openai-primary", "gpt-4o"));
    Ok(())
}

/// Steps 10–11: error classes and hedging (SPEC §11).
async fn controller_story(demo: &mut Demo, mock: &MockServer) -> Result<(), String> {
    say!("10. Rule `long-context` falls back only on CONTEXT_LENGTH_EXCEEDED: small-8k answers 400 `context_length_exceeded`, so the request moves to large-128k. Any other 400 would go back to the caller.");
    mock.set_behaviour(
        "small-8k",
        Behaviour {
            status: Some(400),
            error: Some(sidetrack_mock::ErrorConfig {
                error_type: Some("invalid_request_error".into()),
                code: Some("context_length_exceeded".into()),
                message: Some("This model's maximum context length is 8192 tokens.".into()),
                ..Default::default()
            }),
            ..Behaviour::default()
        },
    );
    let (_, rec) = demo.send("summarise-report", false).await?;
    say!("{}\n", describe(&rec));

    say!("11. Rule `hedged`: slow-model takes 2 s to answer; after 300 ms the next hop starts too. The first good answer wins and the slow one is cut off (CANCELLED, hedgeLost).");
    mock.set_behaviour(
        "slow-model",
        Behaviour {
            first_byte_delay_milliseconds: Some(2_000),
            ..Behaviour::default()
        },
    );
    let (_, rec) = demo.send("quick-answer", false).await?;
    say!("{}\n", describe(&rec));
    Ok(())
}

/// The answer text of a whole OpenAI chat body.
fn answer_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v["choices"][0]["message"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Steps 12–14: everything is down and the response store answers (SPEC §12).
async fn cache_story(demo: &mut Demo, mock: &MockServer) -> Result<(), String> {
    const ASKED: &str = "What are your opening hours?";
    say!("12. Rule `cached-answers` has `cache: {{ mode: lastResort }}`: a question is answered normally, and the answer is kept.");
    let (reply, rec) = demo.ask("faq-bot", ASKED, false).await?;
    say!("{}", describe(&rec));
    say!("    caller received: {:?}\n", answer_text(&reply.text));

    say!("13. Every provider on the route answers 503 now. The same question is still answered: the walk runs, fails, and the stored answer is served.");
    let down = Behaviour {
        status: Some(503),
        retry_after_seconds: Some(5),
        ..Behaviour::default()
    };
    mock.set_behaviour("faq-model", down.clone());
    mock.set_behaviour("faq-backup", down);
    let (reply, rec) = demo.ask("faq-bot", ASKED, false).await?;
    say!("{}", describe(&rec));
    say!(
        "    caller received: HTTP {} {:?} with x-sidetrack-cache: {}\n",
        reply.status,
        answer_text(&reply.text),
        reply.cache.as_deref().unwrap_or("(absent)")
    );

    say!("14. A question nobody asked before has no stored answer: the caller gets the walk's 503 and when to retry.");
    let (reply, rec) = demo
        .ask("faq-bot", "Do you deliver on Sundays?", false)
        .await?;
    for s in &rec.skipped {
        say!(
            "      skipped hop {}: {}/{} ({})",
            s.hop,
            s.target,
            s.model,
            s.why
        );
    }
    say!("{}", describe(&rec));
    say!(
        "    caller received: HTTP {} with Retry-After: {}\n",
        reply.status,
        reply.retry_after.as_deref().unwrap_or("(absent)")
    );
    Ok(())
}

/// How often the background traffic's scripted outage comes, and how long it lasts.
const OUTAGE_EVERY: Duration = Duration::from_secs(90);
const OUTAGE_FOR: Duration = Duration::from_secs(20);

/// While the demo serves: one request a second through the gateway (mostly `gpt-4o`, now and then a
/// stream or another rule), and every [`OUTAGE_EVERY`] the primary answers 503 for [`OUTAGE_FOR`]
/// (set through the mock's control API), so someone watching the dashboard sees a breaker open,
/// probe and close. Errors are ignored: the demo's narration already ended.
async fn background_traffic(client: HttpClient, base: String, mock: String) {
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut n: u64 = 0;
    loop {
        tick.tick().await;
        n += 1;
        let phase = started.elapsed().as_secs() % OUTAGE_EVERY.as_secs();
        let behaviour = if phase >= OUTAGE_EVERY.as_secs() - OUTAGE_FOR.as_secs() {
            r#"{"status": 503}"#
        } else {
            "{}"
        };
        let _ = post(&client, &format!("{mock}/_mock/models/gpt-4o"), behaviour).await;
        let (model, stream) = match n % 10 {
            3 => ("gpt-4o", true),
            7 => ("summarise-report", false),
            9 => ("legacy-chat", false),
            _ => ("gpt-4o", false),
        };
        let body = serde_json::json!({
            "model": model,
            "stream": stream,
            "messages": [{"role": "user", "content": "Say hello"}],
        });
        let _ = post(
            &client,
            &format!("{base}/v1/chat/completions"),
            &body.to_string(),
        )
        .await;
    }
}

/// POSTs `body` as JSON and reads the answer to its end.
async fn post(client: &HttpClient, url: &str, body: &str) -> Result<(), String> {
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .map_err(|e| e.to_string())?;
    let resp = client.request(req).await.map_err(|e| e.to_string())?;
    resp.into_body()
        .collect()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Prints the routing records that did not go straight to their primary (fallbacks, errors, cache
/// answers), as they arrive; each wait copies only the new records.
async fn print_new_records(log: RoutingLog, mut seen: usize) {
    loop {
        let records = log.wait_since(seen, Duration::from_secs(3600)).await;
        seen += records.len();
        for rec in records.iter().filter(|r| r.reason != "servedByPrimary") {
            say!(
                "request {} model {:?}: status {}, reason `{}`",
                rec.request_id,
                rec.requested_model,
                rec.status,
                rec.reason
            );
            say!("{}", describe(rec));
        }
    }
}
