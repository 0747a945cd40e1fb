//! Traces (SPEC §7.3): OpenTelemetry spans exported over OTLP/HTTP (protobuf) when
//! `logging.otlpEndpoint` is set. One span per request (kind SERVER, ended when the response body
//! ends) and one child span per attempt (kind CLIENT, ended when the attempt is classified), with
//! the GenAI semantic-convention attributes plus `sidetrack.*`. docs/observability.md lists them.
//!
//! Identity: the request span's trace id *is* the request id (`x-sidetrack-request-id`, the
//! routing log's `requestId`: a UUIDv7 in 32 hex digits), and its span id is the id's low 64 bits.
//! So an attempt span can name its parent from the request id alone while the request span is
//! still open (the walk never sees the request context), and an operator can paste a `requestId`
//! into the trace backend's search.
//!
//! Cost: when tracing is off, [`Traces::start`] returns `None` and nothing else runs — no clock
//! read, no attribute allocated. When on, a span is built once, complete, at its end (start time
//! recorded earlier), and handed to the SDK's batch processor: a bounded queue drained by the SDK's
//! own thread, which does the HTTP export. Nothing on the request path waits for the collector; a
//! full queue drops spans.

use std::cell::Cell;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
    TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;
use sidetrack_config::{ProviderKind, Target};

use super::{AttemptRecord, RequestOutcome, RoutingRecord};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The OTLP exporter's per-request timeout (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Traces::force_flush`] and [`Traces::shutdown`] wait for the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Attribute keys, every one the gateway writes (the GenAI semantic conventions plus ours).
pub mod keys {
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The older name of `gen_ai.provider.name`, still read by many backends.
    pub const GEN_AI_SYSTEM: &str = "gen_ai.system";
    pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
    pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
    pub const URL_PATH: &str = "url.path";
    pub const ERROR_TYPE: &str = "error.type";

    // request span
    pub const REQUEST_ID: &str = "sidetrack.request_id";
    pub const REASON: &str = "sidetrack.reason";
    pub const RULE: &str = "sidetrack.rule";
    pub const MATCH_TYPE: &str = "sidetrack.match_type";
    pub const FALLBACK_HOP: &str = "sidetrack.fallback_hop";
    pub const REQUEST_OUTCOME: &str = "sidetrack.request_outcome";
    pub const DIALECT: &str = "sidetrack.dialect";
    pub const PRINCIPAL: &str = "sidetrack.principal";
    pub const ATTEMPTS: &str = "sidetrack.attempts";
    pub const SKIPPED: &str = "sidetrack.skipped";
    pub const STREAMED: &str = "sidetrack.streamed";
    pub const MID_STREAM_ERROR: &str = "sidetrack.mid_stream_error";
    pub const TTFT_MS: &str = "sidetrack.ttft_ms";

    // attempt span (TARGET also on the request span: the target that served)
    pub const HOP: &str = "sidetrack.hop";
    pub const OUTCOME: &str = "sidetrack.outcome";
    pub const BREAKER: &str = "sidetrack.breaker";
    pub const TARGET: &str = "sidetrack.target";
    pub const DETAIL: &str = "sidetrack.detail";
    pub const FIRST_BYTE_MS: &str = "sidetrack.first_byte_ms";
}

/// The value of `gen_ai.operation.name`: every dialect sidetrack serves is a chat call.
pub const OPERATION: &str = "chat";

/// The gateway's tracer: off (no endpoint configured) or exporting to one OTLP/HTTP collector.
/// Cloning is cheap.
#[derive(Clone, Default)]
pub struct Traces {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

impl fmt::Debug for Traces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            None => f.write_str("Traces(off)"),
            Some(i) => write!(f, "Traces({})", sidetrack_config::redact_url(&i.endpoint)),
        }
    }
}

/// `{endpoint}/v1/traces`, unless the endpoint already names the traces path.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

impl Traces {
    /// Tracing off: every method is a no-op.
    pub fn off() -> Traces {
        Traces::default()
    }

    /// From `logging.otlpEndpoint`: off when unset.
    pub fn from_config(otlp_endpoint: Option<&str>) -> Result<Traces, String> {
        otlp_endpoint.map_or(Ok(Traces::off()), Traces::otlp)
    }

    /// Exports to the OTLP/HTTP collector at `endpoint` (e.g. `http://127.0.0.1:4318`; spans are
    /// POSTed to `/v1/traces` as protobuf). The `OTEL_EXPORTER_OTLP_TRACES_HEADERS` /
    /// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`, `OTEL_SERVICE_NAME` and
    /// `OTEL_RESOURCE_ATTRIBUTES` environment variables are honoured.
    pub fn otlp(endpoint: &str) -> Result<Traces, String> {
        let url = traces_url(endpoint);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(ExportClient::new()?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| {
                // The exporter's message may quote the URL: shown without credentials.
                let e = e
                    .to_string()
                    .replace(&url, &sidetrack_config::redact_url(&url));
                format!("logging.otlpEndpoint: cannot build the OTLP exporter: {e}")
            })?;
        let mut resource =
            Resource::builder().with_attribute(KeyValue::new("service.version", VERSION));
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("sidetrack");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            // Every request is recorded: the request span is built when the request ends, after
            // its attempt spans, so a head sampler could not keep a trace whole. Sample in the
            // collector (tail sampling) instead.
            .with_sampler(Sampler::AlwaysOn)
            .with_id_generator(RequestIds::default())
            .with_resource(resource.build())
            .build();
        let scope = InstrumentationScope::builder("sidetrack")
            .with_version(VERSION)
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Traces {
            inner: Some(Arc::new(Inner {
                provider,
                tracer,
                endpoint: url,
            })),
        })
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// A span's start time, or `None` when tracing is off (then nothing else needs to happen).
    pub fn start(&self) -> Option<SystemTime> {
        self.inner.as_ref().map(|_| opentelemetry::time::now())
    }

    /// Records one attempt span, child of the request span of `request_id`, ending now (the
    /// attempt has just been classified).
    pub fn attempt(&self, start: SystemTime, request_id: &str, target: &Target, a: &AttemptRecord) {
        let Some(inner) = &self.inner else { return };
        let success = a.outcome.is_success();
        let provider = provider_name(target.provider);
        let mut attrs = Vec::with_capacity(16);
        attrs.push(KeyValue::new(keys::GEN_AI_OPERATION_NAME, OPERATION));
        attrs.push(KeyValue::new(keys::GEN_AI_PROVIDER_NAME, provider));
        attrs.push(KeyValue::new(keys::GEN_AI_SYSTEM, provider));
        attrs.push(KeyValue::new(keys::GEN_AI_REQUEST_MODEL, a.model.clone()));
        if success {
            attrs.push(KeyValue::new(keys::GEN_AI_RESPONSE_MODEL, a.model.clone()));
        }
        if let Ok(uri) = target.base_url.parse::<http::Uri>() {
            if let Some(host) = uri.host() {
                attrs.push(KeyValue::new(keys::SERVER_ADDRESS, host.to_owned()));
            }
            let port = uri.port_u16().or(match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            });
            if let Some(port) = port {
                attrs.push(KeyValue::new(keys::SERVER_PORT, i64::from(port)));
            }
        }
        if let Some(status) = a.status {
            attrs.push(KeyValue::new(
                keys::HTTP_RESPONSE_STATUS_CODE,
                i64::from(status),
            ));
        }
        let error = (!success).then(|| match (a.error_kind, a.status) {
            (Some(kind), _) => kind.to_owned(),
            (None, Some(status)) => status.to_string(),
            (None, None) => a.outcome.label().to_owned(),
        });
        if let Some(e) = &error {
            attrs.push(KeyValue::new(keys::ERROR_TYPE, e.clone()));
        }
        attrs.push(KeyValue::new(keys::HOP, a.hop as i64));
        attrs.push(KeyValue::new(keys::OUTCOME, a.outcome.label()));
        attrs.push(KeyValue::new(keys::BREAKER, a.breaker));
        attrs.push(KeyValue::new(keys::TARGET, a.target.clone()));
        if let Some(d) = &a.detail {
            attrs.push(KeyValue::new(keys::DETAIL, d.clone()));
        }
        if let Some(fb) = a.first_byte_ms {
            attrs.push(KeyValue::new(keys::FIRST_BYTE_MS, fb));
        }

        let (trace_id, span_id) = ids(request_id);
        let parent = Context::new().with_remote_span_context(SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ));
        let mut span = SpanBuilder::from_name(format!("{OPERATION} {}", a.model))
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(&inner.tracer, &parent);
        if let Some(e) = error {
            let description = match &a.detail {
                Some(d) => format!("{e}: {d}"),
                None => e,
            };
            span.set_status(Status::Error {
                description: description.into(),
            });
        }
        span.end();
    }

    /// Records the request span, ending now (the response body has ended, or the gateway
    /// answered). `provider` is the kind of the target that served, when one did.
    pub fn request(&self, start: SystemTime, rec: &RoutingRecord, provider: Option<ProviderKind>) {
        let Some(inner) = &self.inner else { return };
        let failed = rec.outcome != RequestOutcome::Served;
        let error = failed.then(|| {
            if rec.mid_stream_error {
                "MID_STREAM_ERROR".to_owned()
            } else {
                rec.status.to_string()
            }
        });
        let attrs = request_attributes(rec, provider, error.as_deref());
        let name = match &rec.requested_model {
            Some(m) => format!("{OPERATION} {m}"),
            None => OPERATION.to_owned(),
        };
        let builder = SpanBuilder::from_name(name)
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attrs);
        let (trace_id, span_id) = ids(rec.request_id.as_str());
        let mut span = with_ids(trace_id, span_id, || {
            builder.start_with_context(&inner.tracer, &Context::new())
        });
        if let Some(e) = error {
            span.set_status(Status::Error {
                description: format!("{e}: {}", rec.reason).into(),
            });
        }
        span.end();
    }

    /// Exports every span recorded so far. Blocks the calling thread (up to 5 s): from async code
    /// use [`Traces::flush`].
    pub fn force_flush(&self) -> Result<(), String> {
        match &self.inner {
            None => Ok(()),
            Some(i) => i.provider.force_flush().map_err(|e| e.to_string()),
        }
    }

    /// Exports what is left and stops the exporter; spans recorded afterwards are dropped.
    /// Blocks the calling thread (up to 5 s): from async code use [`Traces::close`].
    pub fn shutdown(&self) -> Result<(), String> {
        match &self.inner {
            None => Ok(()),
            Some(i) => i
                .provider
                .shutdown_with_timeout(FLUSH_TIMEOUT)
                .map_err(|e| e.to_string()),
        }
    }

    /// [`Traces::force_flush`] off the async worker threads.
    pub async fn flush(&self) -> Result<(), String> {
        if !self.is_on() {
            return Ok(());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.force_flush())
            .await
            .map_err(|e| e.to_string())?
    }

    /// [`Traces::shutdown`] off the async worker threads.
    pub async fn close(&self) -> Result<(), String> {
        if !self.is_on() {
            return Ok(());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.shutdown())
            .await
            .map_err(|e| e.to_string())?
    }
}

/// The request span's attributes: GenAI semantic conventions, HTTP, and sidetrack's own.
fn request_attributes(
    rec: &RoutingRecord,
    provider: Option<ProviderKind>,
    error: Option<&str>,
) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(24);
    attrs.push(KeyValue::new(keys::GEN_AI_OPERATION_NAME, OPERATION));
    if let Some(p) = provider.map(provider_name) {
        attrs.push(KeyValue::new(keys::GEN_AI_PROVIDER_NAME, p));
        attrs.push(KeyValue::new(keys::GEN_AI_SYSTEM, p));
    }
    if let Some(m) = &rec.requested_model {
        attrs.push(KeyValue::new(keys::GEN_AI_REQUEST_MODEL, m.clone()));
    }
    if let Some(s) = &rec.served_by {
        attrs.push(KeyValue::new(keys::GEN_AI_RESPONSE_MODEL, s.model.clone()));
        attrs.push(KeyValue::new(keys::TARGET, s.target.clone()));
    }
    if let Some(u) = &rec.usage {
        attrs.push(KeyValue::new(
            keys::GEN_AI_USAGE_INPUT_TOKENS,
            saturating_i64(u.input_tokens),
        ));
        attrs.push(KeyValue::new(
            keys::GEN_AI_USAGE_OUTPUT_TOKENS,
            saturating_i64(u.output_tokens),
        ));
    }
    attrs.push(KeyValue::new(keys::HTTP_REQUEST_METHOD, "POST"));
    attrs.push(KeyValue::new(keys::URL_PATH, rec.request_path.clone()));
    attrs.push(KeyValue::new(
        keys::HTTP_RESPONSE_STATUS_CODE,
        i64::from(rec.status),
    ));
    if let Some(e) = error {
        attrs.push(KeyValue::new(keys::ERROR_TYPE, e.to_owned()));
    }
    attrs.push(KeyValue::new(keys::REQUEST_ID, rec.request_id.to_string()));
    attrs.push(KeyValue::new(keys::REASON, rec.reason.clone()));
    if let Some(r) = &rec.rule_name {
        attrs.push(KeyValue::new(keys::RULE, r.clone()));
    }
    if let Some(m) = rec.match_type {
        attrs.push(KeyValue::new(keys::MATCH_TYPE, m));
    }
    if let Some(h) = rec.fallback_hop {
        attrs.push(KeyValue::new(keys::FALLBACK_HOP, h as i64));
    }
    attrs.push(KeyValue::new(keys::REQUEST_OUTCOME, rec.outcome.as_str()));
    attrs.push(KeyValue::new(keys::DIALECT, rec.dialect));
    attrs.push(KeyValue::new(keys::PRINCIPAL, rec.principal.clone()));
    attrs.push(KeyValue::new(keys::ATTEMPTS, rec.attempts.len() as i64));
    attrs.push(KeyValue::new(keys::SKIPPED, rec.skipped.len() as i64));
    attrs.push(KeyValue::new(keys::STREAMED, rec.streamed));
    if rec.mid_stream_error {
        attrs.push(KeyValue::new(keys::MID_STREAM_ERROR, true));
    }
    if let Some(t) = rec.ttft_ms {
        attrs.push(KeyValue::new(keys::TTFT_MS, t));
    }

    attrs
}

/// `gen_ai.provider.name` for a target's provider kind.
pub fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::OpenAi => "openai",
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::Bedrock => "aws.bedrock",
        ProviderKind::Azure => "az.ai.openai",
        ProviderKind::Vertex => "gcp.vertex_ai",
        ProviderKind::Gemini => "gcp.gemini",
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The request span's trace and span ids, derived from the request id: a 32-hex-digit id is the
/// trace id and its low 64 bits the span id; anything else is hashed.
pub fn ids(request_id: &str) -> (TraceId, SpanId) {
    let parsed = (request_id.len() == 32)
        .then(|| u128::from_str_radix(request_id, 16).ok())
        .flatten();
    let n = parsed.filter(|n| *n != 0).unwrap_or_else(|| {
        let mut h = DefaultHasher::new();
        request_id.hash(&mut h);
        let hi = h.finish();
        0u8.hash(&mut h);
        (u128::from(hi) << 64) | u128::from(h.finish())
    });
    let low = (n as u64).max(1);
    (TraceId::from(n.max(1)), SpanId::from(low))
}

thread_local! {
    /// Ids the next span built on this thread takes instead of random ones (see [`with_ids`]).
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Runs `build` (one synchronous span build) with the given ids: the SDK draws a root span's ids
/// from its [`IdGenerator`] and takes none from the caller, so [`RequestIds`] reads them here.
fn with_ids<T>(trace_id: TraceId, span_id: SpanId, build: impl FnOnce() -> T) -> T {
    NEXT_TRACE_ID.set(Some(trace_id));
    NEXT_SPAN_ID.set(Some(span_id));
    let out = build();
    NEXT_TRACE_ID.set(None);
    NEXT_SPAN_ID.set(None);
    out
}

/// Random ids, except for the request span, whose ids come from the request id ([`with_ids`]).
#[derive(Debug, Default)]
struct RequestIds(RandomIdGenerator);

impl IdGenerator for RequestIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .take()
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID.take().unwrap_or_else(|| self.0.new_span_id())
    }
}

/// The OTLP exporter's HTTP client: the same hyper-util + rustls stack as the providers, on a
/// current-thread Tokio runtime of its own. The SDK's batch processor calls it from its own thread
/// (never a gateway worker), so exporting neither needs nor can stall the gateway's runtime, and a
/// flush at shutdown works from any context.
struct ExportClient {
    /// `Option` only so `Drop` can shut it down without blocking.
    rt: Option<tokio::runtime::Runtime>,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl fmt::Debug for ExportClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExportClient")
    }
}

impl ExportClient {
    fn new() -> Result<ExportClient, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the OTLP exporter's runtime: {e}"))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(5)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // No idle pool: connection tasks would sit unpolled between exports on this runtime.
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(https);
        Ok(ExportClient {
            rt: Some(rt),
            client,
        })
    }
}

impl Drop for ExportClient {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Response bodies are only read for the partial-success message: a small cap.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err("the OTLP export client runs on the SDK's batch thread only".into());
        }
        let rt = self.rt.as_ref().ok_or("the OTLP exporter is shut down")?;
        let request = request.map(Full::new);
        rt.block_on(async {
            let call = async {
                let resp = self.client.request(request).await?;
                let (parts, body) = resp.into_parts();
                let body = Limited::new(body, MAX_RESPONSE_BYTES)
                    .collect()
                    .await?
                    .to_bytes();
                Ok::<_, HttpError>(http::Response::from_parts(parts, body))
            };
            match tokio::time::timeout(EXPORT_TIMEOUT, call).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer from the collector in {EXPORT_TIMEOUT:?}").into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_request_id_is_the_trace_id() {
        let id = "0190f3a1b2c37d4e8f9a0b1c2d3e4f50";
        let (t, s) = ids(id);
        assert_eq!(t.to_string(), id);
        assert_eq!(s.to_string(), "8f9a0b1c2d3e4f50");
    }

    #[test]
    fn other_request_ids_hash_to_valid_ids() {
        let (t, s) = ids("not-a-uuid");
        assert_ne!(t, TraceId::INVALID);
        assert_ne!(s, SpanId::INVALID);
        assert_eq!(ids("not-a-uuid"), (t, s), "deterministic");
    }

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("https://c/otlp/v1/traces"),
            "https://c/otlp/v1/traces"
        );
    }

    #[test]
    fn off_does_nothing() {
        let t = Traces::off();
        assert!(t.start().is_none());
        assert!(t.force_flush().is_ok());
        assert!(t.shutdown().is_ok());
    }
}
