//! Issue 5 "must show" 7 (SPEC §7.3): OTLP traces, received by an in-test OTLP/HTTP collector.
//! A request that falls back once has one request span and two attempt spans, children of it in
//! the same trace, with the right outcomes and hops.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use common::{behaviours, start, status, Env};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A minimal OTLP/HTTP collector: records every body POSTed to `/v1/traces`.
struct Collector {
    url: String,
    bodies: Arc<Mutex<Vec<Bytes>>>,
}

impl Collector {
    async fn start() -> Collector {
        let bodies: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let app = Router::new()
            .route(
                "/v1/traces",
                post(
                    |State(b): State<Arc<Mutex<Vec<Bytes>>>>, body: Bytes| async move {
                        b.lock().unwrap().push(body);
                        // An empty ExportTraceServiceResponse: full success.
                        ([("content-type", "application/x-protobuf")], Bytes::new())
                    },
                ),
            )
            .with_state(bodies.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector { url, bodies }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Span> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| {
                ExportTraceServiceRequest::decode(b.clone())
                    .unwrap()
                    .resource_spans
            })
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
            .collect()
    }

    /// Flushes the gateway's exporter and waits (bounded) until at least `n` spans arrived.
    async fn wait_for(&self, env: &Env, n: usize) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            env.gw.flush_traces().await.unwrap();
            let spans = self.spans();
            if spans.len() >= n {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} spans, got {}: {spans:#?}",
                spans.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn str_attr<'a>(span: &'a Span, key: &str) -> &'a str {
    match attr(span, key) {
        Some(Value::StringValue(s)) => s,
        other => panic!("span `{}`: {key} is {other:?}", span.name),
    }
}

fn int_attr(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::IntValue(n)) => *n,
        other => panic!("span `{}`: {key} is {other:?}", span.name),
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn config(collector: &Collector) -> String {
    format!(
        r#"
targets:
  - name: up
    provider: openai
    baseUrl: ${{MOCK}}/v1
    models: ["m-*"]
logging:
  otlpEndpoint: {}
rules:
  - name: r
    priority: 10
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: {{ target: up, model: m-bad }}
      fallback:
        targetFallback:
          - {{ target: up, model: m-good }}
"#,
        collector.url
    )
}

/// The request span and its attempt spans (in start order), checked to form one trace.
fn split(spans: &[Span]) -> (&Span, Vec<&Span>) {
    let requests: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(requests.len(), 1, "one request span: {spans:#?}");
    let request = requests[0];
    let mut attempts: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect();
    assert_eq!(
        attempts.len() + 1,
        spans.len(),
        "only request and attempt spans"
    );
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    assert!(
        request.parent_span_id.is_empty(),
        "the request span is a root"
    );
    for a in &attempts {
        assert_eq!(a.trace_id, request.trace_id, "same trace");
        assert_eq!(
            a.parent_span_id, request.span_id,
            "child of the request span"
        );
        assert!(a.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(a.end_time_unix_nano <= request.end_time_unix_nano);
    }
    (request, attempts)
}

#[tokio::test]
async fn a_request_that_falls_back_once_has_one_request_span_and_two_attempt_spans() {
    let collector = Collector::start().await;
    let env = start(&config(&collector), behaviours(&[("m-bad", status(503))])).await;
    let r = env.chat("ask", false).await;
    assert_eq!(r.status, 200);
    let rec = env.record(1).await;
    assert_eq!(rec.reason, "servedViaFallbackHop:1");

    let spans = collector.wait_for(&env, 3).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let (request, attempts) = split(&spans);
    assert_eq!(attempts.len(), 2);

    // The request span.
    assert_eq!(request.name, "chat ask");
    assert_eq!(
        hex(&request.trace_id),
        rec.request_id.as_str(),
        "trace id = request id"
    );
    assert_eq!(
        str_attr(request, "sidetrack.request_id"),
        rec.request_id.as_str()
    );
    assert_eq!(str_attr(request, "gen_ai.operation.name"), "chat");
    assert_eq!(str_attr(request, "gen_ai.request.model"), "ask");
    assert_eq!(str_attr(request, "gen_ai.response.model"), "m-good");
    assert_eq!(str_attr(request, "gen_ai.provider.name"), "openai");
    assert_eq!(
        str_attr(request, "sidetrack.reason"),
        "servedViaFallbackHop:1"
    );
    assert_eq!(str_attr(request, "sidetrack.rule"), "r");
    assert_eq!(int_attr(request, "sidetrack.fallback_hop"), 1);
    assert_eq!(int_attr(request, "http.response.status_code"), 200);
    let usage = rec.usage.unwrap();
    assert_eq!(
        int_attr(request, "gen_ai.usage.output_tokens"),
        usage.output_tokens as i64
    );
    assert_eq!(
        int_attr(request, "gen_ai.usage.input_tokens"),
        usage.input_tokens as i64
    );
    assert!(attr(request, "error.type").is_none());

    // The attempt spans: hop 0 answered 503, hop 1 served.
    let (first, second) = (attempts[0], attempts[1]);
    assert_eq!(first.name, "chat m-bad");
    assert_eq!(str_attr(first, "sidetrack.outcome"), "STATUS");
    assert_eq!(int_attr(first, "sidetrack.hop"), 0);
    assert_eq!(int_attr(first, "http.response.status_code"), 503);
    assert_eq!(str_attr(first, "error.type"), "503");
    assert_eq!(str_attr(first, "sidetrack.breaker"), "CLOSED");
    assert_eq!(str_attr(first, "gen_ai.request.model"), "m-bad");
    assert_eq!(
        first.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );

    assert_eq!(second.name, "chat m-good");
    assert_eq!(str_attr(second, "sidetrack.outcome"), "SUCCESS");
    assert_eq!(int_attr(second, "sidetrack.hop"), 1);
    assert_eq!(int_attr(second, "http.response.status_code"), 200);
    assert_eq!(str_attr(second, "sidetrack.breaker"), "CLOSED");
    assert_eq!(str_attr(second, "gen_ai.response.model"), "m-good");
    assert!(attr(second, "error.type").is_none());

    for a in [first, second] {
        assert_eq!(str_attr(a, "gen_ai.operation.name"), "chat");
        assert_eq!(str_attr(a, "gen_ai.provider.name"), "openai");
        assert_eq!(str_attr(a, "gen_ai.system"), "openai");
        assert_eq!(str_attr(a, "server.address"), "127.0.0.1");
        assert_eq!(str_attr(a, "sidetrack.target"), "up");
    }
    // The routing log and the trace tell the same story.
    let outcomes: Vec<&str> = rec.attempts.iter().map(|a| a.outcome.label()).collect();
    assert_eq!(outcomes, ["STATUS", "SUCCESS"]);
}

#[tokio::test]
async fn a_streamed_request_span_ends_with_the_body_and_carries_stream_usage() {
    let collector = Collector::start().await;
    let env = start(&config(&collector), behaviours(&[("m-bad", status(503))])).await;
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({
                "model": "ask",
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "user", "content": "hi"}],
            }),
            &[],
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("[DONE]"), "{}", r.body);
    let rec = env.record(1).await;
    let usage = rec.usage.expect("usage from the last stream event");

    let spans = collector.wait_for(&env, 3).await;
    let (request, attempts) = split(&spans);
    let outcomes: Vec<&str> = attempts
        .iter()
        .map(|a| str_attr(a, "sidetrack.outcome"))
        .collect();
    assert_eq!(outcomes, ["STATUS", "SUCCESS"]);
    // Usage arrives in the stream's last event: only a span ended with the body can carry it.
    assert_eq!(
        int_attr(request, "gen_ai.usage.output_tokens"),
        usage.output_tokens as i64
    );
    assert_eq!(int_attr(request, "sidetrack.fallback_hop"), 1);
    assert!(
        request.end_time_unix_nano > attempts[1].end_time_unix_nano,
        "the request span outlives the attempt (the stream is relayed after it is classified)"
    );
}

#[tokio::test]
async fn shutdown_exports_the_spans_still_queued() {
    let collector = Collector::start().await;
    let env = start(&config(&collector), behaviours(&[("m-bad", status(503))])).await;
    assert_eq!(env.chat("ask", false).await.status, 200);
    env.record(1).await;
    // No flush here: the batch (sent every 5 s by default) is still queued.
    let Env { gw, .. } = env;
    gw.shutdown(Duration::from_secs(5)).await.unwrap();
    assert_eq!(collector.spans().len(), 3, "shutdown flushed the batch");
}

#[tokio::test]
async fn a_gateway_rejection_is_a_request_span_with_no_attempts() {
    let collector = Collector::start().await;
    let env = start(&config(&collector), behaviours(&[])).await;
    let r = env
        .post(
            "/v1/chat/completions",
            serde_json::json!({"no": "model"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 400);
    let spans = collector.wait_for(&env, 1).await;
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.name, "chat");
    assert_eq!(str_attr(s, "sidetrack.request_outcome"), "REJECTED");
    assert_eq!(str_attr(s, "error.type"), "400");
    assert_eq!(
        s.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
}
