//! Phase "commit": the one place where walk results and gateway errors become responses, with the
//! `x-sidetrack-*` headers, the caller retry hint, and the routing log record.

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use sidetrack_config::{CallerRetryHint, Server};
use sidetrack_dialects::{Dialect, GatewayErrorKind};
use sidetrack_resilience::{ErrorKind, Outcome};
use tokio::time::Instant;

use crate::engine::relay::{OnFinish, RelayBody, RelayEnd};
use crate::engine::{Returned, Upstream, WalkOutput};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use crate::health::DestHealth;
use crate::observe::metrics::InFlightGuard;
use crate::observe::{ms, RoutingRecord, ServedBy, UsageRecord};
use crate::server::Shared;

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "content-length",
];

/// What is known about a request as it moves through the phases.
pub struct RequestCtx {
    shared: Arc<Shared>,
    in_flight: InFlightGuard,
    pub started: Instant,
    pub request_id: String,
    pub dialect: Dialect,
    pub path: String,
    pub principal: String,
    pub requested_model: Option<String>,
    pub rule_name: Option<String>,
    pub match_type: Option<&'static str>,
    pub streamed: bool,
    headers_on: bool,
    retry_hint: CallerRetryHint,
    /// The request span's start, when tracing is on (SPEC §7.3).
    trace_start: Option<SystemTime>,
    /// Tokens reserved under the principal's rate limit, settled with the real usage at the end.
    pub reservation: Option<crate::limits::Reservation>,
}

/// A unique request id: a random per-process prefix and a counter, 32 hex digits (no syscall and
/// no lock per request, unlike drawing a random UUID each time).
fn next_request_id() -> String {
    use std::sync::atomic::AtomicU64;
    use std::sync::OnceLock;
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    format!(
        "{prefix:016x}{:016x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Renders a gateway-made error in the caller's dialect (SPEC §6.3).
pub fn error_response(
    dialect: Dialect,
    kind: GatewayErrorKind,
    message: &str,
    request_id: Option<&str>,
) -> Response {
    let e = dialect.render_error(kind, message);
    let mut b = Response::builder()
        .status(e.status)
        .header(CONTENT_TYPE, e.content_type);
    for (k, v) in e.headers {
        b = b.header(k, v);
    }
    if let Some(id) = request_id {
        b = b.header("x-sidetrack-request-id", id);
    }
    b.body(Body::from(e.body)).unwrap_or_default()
}

impl RequestCtx {
    pub fn new(shared: &Arc<Shared>, dialect: Dialect, path: &str, server: &Server) -> RequestCtx {
        RequestCtx {
            in_flight: shared.metrics.in_flight(),
            trace_start: shared.metrics.traces().start(),
            shared: shared.clone(),
            started: Instant::now(),
            request_id: next_request_id(),
            dialect,
            path: path.to_owned(),
            principal: crate::auth::ANONYMOUS.to_owned(),
            requested_model: None,
            rule_name: None,
            match_type: None,
            streamed: false,
            headers_on: server.response_headers,
            retry_hint: server.caller_retry_hint,
            reservation: None,
        }
    }

    fn record(&self, outcome: &'static str, reason: String, status: u16) -> RoutingRecord {
        RoutingRecord {
            ts: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            request_id: self.request_id.clone(),
            principal: self.principal.clone(),
            dialect: self.dialect.as_str(),
            request_path: self.path.clone(),
            requested_model: self.requested_model.clone(),
            rule_name: self.rule_name.clone(),
            match_type: self.match_type,
            outcome,
            reason,
            served_by: None,
            status,
            fallback_hop: None,
            attempts: Vec::new(),
            skipped: Vec::new(),
            streamed: self.streamed,
            committed: false,
            mid_stream_error: false,
            latency_ms: ms(self.started.elapsed()),
            ttft_ms: None,
            usage: None,
        }
    }

    /// Writes the routing record and the request metrics (SPEC §7: one line, one count per request).
    fn finish(&self, rec: RoutingRecord) {
        settle(&self.shared, self.reservation.clone(), &rec);
        finish_record(&self.shared, self.started, self.trace_start, rec);
    }

    /// A gateway rejection before any routing (auth, size, parse, allow-list). Never a fallback.
    pub fn reject(self, kind: GatewayErrorKind, message: &str, why: &str) -> Response {
        let resp = error_response(self.dialect, kind, message, Some(&self.request_id));
        let rec = self.record(
            "REJECTED",
            format!("gatewayRejected:{why}"),
            resp.status().as_u16(),
        );
        self.finish(rec);
        resp
    }

    /// Refused by the principal's gateway rate limit: 429 with `Retry-After`, never a fallback.
    pub fn rate_limited(self, retry_after: std::time::Duration) -> Response {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let msg = format!(
            "rate limit of principal `{}` reached; retry in {secs} s",
            self.principal
        );
        let mut resp = error_response(
            self.dialect,
            GatewayErrorKind::RateLimited,
            &msg,
            Some(&self.request_id),
        );
        put(resp.headers_mut(), "retry-after", &secs.max(1).to_string());
        let rec = self.record(
            "REJECTED",
            "gatewayRejected:rateLimited".into(),
            resp.status().as_u16(),
        );
        self.finish(rec);
        resp
    }

    /// No rule and no target can serve the model.
    pub fn unroutable(self, message: &str) -> Response {
        let resp = error_response(
            self.dialect,
            GatewayErrorKind::NotFound,
            message,
            Some(&self.request_id),
        );
        let rec = self.record("ERROR", "unroutable".into(), resp.status().as_u16());
        self.finish(rec);
        resp
    }

    /// Turns the walk's result into the caller's response (the commit point).
    pub fn commit(self, out: WalkOutput, deadline: Instant) -> Response {
        let attempts = out.attempts.len();
        let Some(returned) = out.returned else {
            let msg =
                "no destination of this route could be attempted (all ineligible or disabled)";
            let resp = error_response(
                self.dialect,
                GatewayErrorKind::Unavailable,
                msg,
                Some(&self.request_id),
            );
            let mut rec = self.record("ERROR", "noEligibleDestination".into(), 503);
            rec.skipped = out.skipped;
            self.finish(rec);
            return resp;
        };
        let Returned {
            hop,
            target,
            model,
            outcome,
            fired,
            upstream,
            health,
        } = returned;
        self.shared.walked.fetch_add(1, Ordering::Relaxed);
        if hop > 0 {
            self.shared.fell_back.fetch_add(1, Ordering::Relaxed);
            self.shared
                .metrics
                .fallback(self.rule_name.as_deref().unwrap_or(""), hop);
        }
        let reason = if matches!(outcome, Outcome::Error(ErrorKind::Unroutable)) && attempts == 1 {
            "unroutable".to_owned()
        } else if fired {
            "chainExhausted".to_owned()
        } else if hop == 0 {
            "servedByPrimary".to_owned()
        } else {
            format!("servedViaFallbackHop:{hop}")
        };

        let mut usage = None;
        let (mut resp, live) = match upstream {
            None => {
                let (kind, msg) = match outcome.error_kind() {
                    Some(ErrorKind::FirstByteTimeout) => (
                        GatewayErrorKind::GatewayTimeout,
                        format!("destination {target}/{model} sent no first byte in time"),
                    ),
                    Some(ErrorKind::Unroutable) => (
                        GatewayErrorKind::NotFound,
                        format!("destination {target}/{model} cannot serve this request"),
                    ),
                    _ => (
                        GatewayErrorKind::BadGateway,
                        format!("could not connect to destination {target}/{model}"),
                    ),
                };
                (error_response(self.dialect, kind, &msg, None), None)
            }
            Some(Upstream::Buffered { parts, body }) => {
                if parts.status.is_success() {
                    usage = self.dialect.response_usage(&body);
                }
                let mut r = Response::new(Body::from(body));
                *r.status_mut() = parts.status;
                copy_headers(&parts.headers, r.headers_mut());
                (r, None)
            }
            Some(Upstream::Live {
                parts,
                held,
                rest,
                pipe,
            }) => {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = parts.status;
                copy_headers(&parts.headers, r.headers_mut());
                (r, Some((held, rest, pipe)))
            }
        };
        let status = resp.status().as_u16();

        let h = resp.headers_mut();
        if self.headers_on {
            put(h, "x-sidetrack-request-id", &self.request_id);
            put(h, "x-sidetrack-served-by", &format!("{target}/{model}"));
            put(h, "x-sidetrack-attempts", &attempts.to_string());
            put(h, "x-sidetrack-fallback-hop", &hop.to_string());
        }
        let upstream_said_when = h.contains_key("retry-after") || h.contains_key("retry-after-ms");
        if self.retry_hint == CallerRetryHint::Auto
            && status >= 400
            && attempts >= 2
            && !upstream_said_when
        {
            // The chain already tried alternatives; SDK retries would multiply upstream calls.
            put(h, "x-should-retry", "false");
        }

        let mut rec = self.record(
            if status < 400 && !fired {
                "SERVED"
            } else {
                "ERROR"
            },
            reason,
            status,
        );
        rec.served_by = outcome.status().map(|_| ServedBy { target, model });
        rec.fallback_hop = Some(hop);
        rec.attempts = out.attempts;
        rec.skipped = out.skipped;
        rec.committed = true;
        rec.ttft_ms = Some(ms(self.started.elapsed()));
        rec.usage = usage.map(|u| UsageRecord {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        });

        match live {
            None => {
                self.finish(rec);
                resp
            }
            Some((held, rest, pipe)) => {
                let finish = Box::new(Finish {
                    shared: self.shared.clone(),
                    started: self.started,
                    trace_start: self.trace_start,
                    rec,
                    health,
                    reservation: self.reservation,
                    _in_flight: self.in_flight,
                });
                let body = RelayBody::new(held, rest, pipe, self.dialect, deadline, finish);
                let (parts, _) = resp.into_parts();
                Response::from_parts(parts, Body::new(body))
            }
        }
    }
}

fn put(h: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(HeaderName::from_static(name), v);
    }
}

fn copy_headers(from: &http::HeaderMap, to: &mut http::HeaderMap) {
    for (k, v) in from {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            to.append(k.clone(), v.clone());
        }
    }
    to.remove(CONTENT_LENGTH);
}

/// Writes the routing record when a committed body ends, and counts a failure after commit against
/// the destination's breaker (SPEC §5.5).
struct Finish {
    shared: Arc<Shared>,
    started: Instant,
    trace_start: Option<SystemTime>,
    rec: RoutingRecord,
    health: Arc<DestHealth>,
    reservation: Option<crate::limits::Reservation>,
    /// The request stays in flight until its body ends.
    _in_flight: InFlightGuard,
}

impl OnFinish for Finish {
    fn finish(self: Box<Self>, end: RelayEnd) {
        let Finish {
            shared,
            started,
            trace_start,
            mut rec,
            health,
            reservation,
            _in_flight,
        } = *self;
        rec.mid_stream_error = end.mid_stream_error;
        rec.usage = end.usage.map(|u| UsageRecord {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        });
        if end.mid_stream_error && !end.caller_gone {
            rec.outcome = "ERROR";
            shared.health.record_mid_stream_failure(&health);
            shared
                .metrics
                .mid_stream_error(&health.target, &health.model);
        }
        settle(&shared, reservation, &rec);
        finish_record(&shared, started, trace_start, rec);
    }
}

/// Replaces a rate-limit token reservation with the tokens the request really used.
fn settle(shared: &Shared, reservation: Option<crate::limits::Reservation>, rec: &RoutingRecord) {
    if let Some(r) = reservation {
        let used = rec
            .usage
            .map(|u| u.input_tokens + u.output_tokens)
            .unwrap_or(0);
        shared.limiter.settle(r, used);
    }
}

/// The end of every request: metrics, token counts, the request span (it ends here, when the
/// response body has ended), then the routing log line.
fn finish_record(
    shared: &Shared,
    started: Instant,
    trace_start: Option<SystemTime>,
    mut rec: RoutingRecord,
) {
    let elapsed = started.elapsed();
    rec.latency_ms = ms(elapsed);
    let m = &shared.metrics;
    m.request(
        rec.dialect,
        rec.rule_name.as_deref().unwrap_or(""),
        rec.status,
        &rec.reason,
        elapsed,
    );
    if let (Some(u), Some(s)) = (&rec.usage, &rec.served_by) {
        // The destination answered, so its health (and metric handles) exist already.
        shared
            .health
            .get(&s.target, &s.model)
            .metrics
            .tokens(u.input_tokens, u.output_tokens);
    }
    if let Some(start) = trace_start {
        let provider = rec.served_by.as_ref().and_then(|s| {
            let rt = shared.runtime.load();
            let target = rt.config.targets.iter().find(|t| t.name == s.target);
            target.map(|t| t.provider)
        });
        m.traces().request(start, &rec, provider);
    }
    shared.log.record(rec);
}
