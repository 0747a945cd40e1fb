//! Phase "commit": the one place where walk results and gateway errors become responses, with the
//! `x-sidetrack-*` headers, the caller retry hint, and the routing record. Every request ends with
//! exactly one record — answered, or abandoned by its caller (`CANCELLED`) — written by the finish
//! phase ([`super::finish`]). When an attempt's answer is decided is `engine/commit.rs`.

use axum::body::Body;
use axum::response::Response;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use sidetrack_config::{CallerRetryHint, Server};
use sidetrack_dialects::{Dialect, GatewayErrorKind};
use sidetrack_resilience::{retry, walk, ErrorKind, Outcome};
use tokio::time::Instant;

use super::finish::{finish_record, settle, Finish, CALLER_CANCELLED, CLIENT_CLOSED_REQUEST};
use crate::engine::relay::RelayBody;
use crate::engine::{Returned, Upstream, WalkOutput};
use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use crate::observe::metrics::InFlightGuard;
use crate::observe::{ms, RequestId, RequestOutcome, RoutingRecord, ServedBy, UsageRecord};
use crate::server::{boundary, Shared};
use crate::state::DestHealth;

static REQUEST_ID: HeaderName = HeaderName::from_static("x-sidetrack-request-id");
static SERVED_BY: HeaderName = HeaderName::from_static("x-sidetrack-served-by");
static ATTEMPTS: HeaderName = HeaderName::from_static("x-sidetrack-attempts");
static FALLBACK_HOP: HeaderName = HeaderName::from_static("x-sidetrack-fallback-hop");
static SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
static RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
static HEDGED: HeaderName = HeaderName::from_static("x-sidetrack-hedged");

/// What is known about a request as it moves through the phases. Dropped before it finished (the
/// caller went away and the server dropped the request's future), it writes the request's record
/// as `CANCELLED` / `callerCancelled`.
pub struct RequestCtx {
    shared: Arc<Shared>,
    /// Handed to the relayed body at the commit; `None` after.
    in_flight: Option<InFlightGuard>,
    pub started: Instant,
    pub request_id: RequestId,
    pub dialect: Dialect,
    pub path: Cow<'static, str>,
    /// Set once authenticated; the routing record says `anonymous` before that.
    pub principal: Option<Arc<str>>,
    pub requested_model: Option<String>,
    pub rule_name: Option<String>,
    pub match_type: Option<&'static str>,
    pub streamed: bool,
    /// The request's time budget in milliseconds (the routing log's `deadlineMs`).
    pub deadline_ms: u64,
    headers_on: bool,
    retry_hint: CallerRetryHint,
    /// The request span's start, when tracing is on (SPEC §7.3).
    trace_start: Option<SystemTime>,
    /// Tokens reserved under the principal's rate limit, settled with the real usage at the end.
    pub reservation: Option<crate::state::limits::Reservation>,
    /// The Idempotency-Key lead's flag for a stream that fails after the commit (SPEC §12).
    pub stream_failed: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// How the request uses the response store (SPEC §12); `None` when its mode is `off`.
    pub(crate) cache: Option<Box<super::cache::CacheUse>>,
    /// The record was written (or handed to the relayed body): nothing left for `Drop`.
    finished: bool,
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
        b = b.header(&REQUEST_ID, id);
    }
    b.body(Body::from(e.body)).unwrap_or_default()
}

impl RequestCtx {
    pub fn new(
        shared: &Arc<Shared>,
        dialect: Dialect,
        path: Cow<'static, str>,
        server: &Server,
    ) -> RequestCtx {
        RequestCtx {
            in_flight: Some(shared.metrics.in_flight()),
            trace_start: shared.metrics.traces().start(),
            shared: shared.clone(),
            started: Instant::now(),
            request_id: RequestId::next(),
            dialect,
            path,
            principal: None,
            requested_model: None,
            rule_name: None,
            match_type: None,
            streamed: false,
            deadline_ms: u64::try_from(server.request_timeout.as_millis()).unwrap_or(u64::MAX),
            headers_on: server.response_headers,
            retry_hint: server.caller_retry_hint,
            reservation: None,
            stream_failed: None,
            cache: None,
            finished: false,
        }
    }

    /// The request's routing record. Takes what the context collected (it is not needed after).
    fn record(
        &mut self,
        outcome: RequestOutcome,
        reason: impl Into<Cow<'static, str>>,
        status: u16,
    ) -> RoutingRecord {
        RoutingRecord {
            ts: SystemTime::now(),
            request_id: self.request_id,
            principal: self
                .principal
                .take()
                .unwrap_or_else(|| crate::auth::ANONYMOUS.into()),
            dialect: self.dialect.as_str(),
            request_path: std::mem::take(&mut self.path),
            requested_model: self.requested_model.take(),
            rule_name: self.rule_name.take(),
            match_type: self.match_type,
            outcome,
            reason: reason.into(),
            served_by: None,
            status,
            fallback_hop: None,
            attempts: Vec::new(),
            skipped: Vec::new(),
            streamed: self.streamed,
            committed: false,
            mid_stream_error: false,
            // Set where every record ends up, `finish::finish_record`, when the request ends.
            latency_ms: 0.0,
            ttft_ms: None,
            deadline_ms: self.deadline_ms,
            usage: None,
        }
    }

    /// Writes the routing record and the request metrics (SPEC §7: one line, one count per request).
    fn finish(&mut self, rec: RoutingRecord, served: Option<&DestHealth>) {
        self.finished = true;
        settle(&self.shared, self.reservation.take(), &rec);
        finish_record(&self.shared, self.started, self.trace_start, rec, served);
    }

    /// A gateway rejection before any routing (auth, size, parse, allow-list). Never a fallback.
    pub fn reject(mut self, kind: GatewayErrorKind, message: &str, why: &str) -> Response {
        let resp = error_response(self.dialect, kind, message, Some(self.request_id.as_str()));
        let rec = self.record(
            RequestOutcome::Rejected,
            format!("gatewayRejected:{why}"),
            resp.status().as_u16(),
        );
        self.finish(rec, None);
        resp
    }

    /// [`RequestCtx::reject`] for a refusal made by a phase function.
    pub(crate) fn refuse(self, r: super::Refusal) -> Response {
        self.reject(r.kind, &r.message, r.why)
    }

    /// Refused by the principal's gateway rate limit: 429 with `Retry-After`, never a fallback.
    pub fn rate_limited(mut self, retry_after: std::time::Duration) -> Response {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let msg = format!(
            "rate limit of principal `{}` reached; retry in {secs} s",
            self.principal.as_deref().unwrap_or(crate::auth::ANONYMOUS)
        );
        let mut resp = error_response(
            self.dialect,
            GatewayErrorKind::RateLimited,
            &msg,
            Some(self.request_id.as_str()),
        );
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        let rec = self.record(
            RequestOutcome::Rejected,
            "gatewayRejected:rateLimited",
            resp.status().as_u16(),
        );
        self.finish(rec, None);
        resp
    }

    /// A duplicate answered with its `Idempotency-Key`'s answer (SPEC §12): a record of its own,
    /// reason `idempotentReplay`, no attempts; the answer carries this request's id.
    pub fn replayed(mut self, mut resp: Response) -> Response {
        if resp.headers().contains_key(&REQUEST_ID) {
            if let Ok(id) = HeaderValue::from_str(self.request_id.as_str()) {
                resp.headers_mut().insert(REQUEST_ID.clone(), id);
            }
        }
        let status = resp.status().as_u16();
        let outcome = if status < 400 {
            RequestOutcome::Served
        } else {
            RequestOutcome::Error
        };
        self.shared.metrics.idempotent_replay();
        let rec = self.record(outcome, "idempotentReplay", status);
        self.finish(rec, None);
        resp
    }

    /// No rule and no target can serve the model.
    pub fn unroutable(mut self, message: &str) -> Response {
        let resp = error_response(
            self.dialect,
            GatewayErrorKind::NotFound,
            message,
            Some(self.request_id.as_str()),
        );
        let rec = self.record(RequestOutcome::Error, "unroutable", resp.status().as_u16());
        self.finish(rec, None);
        resp
    }

    /// Turns the walk's result into the caller's response (the commit point).
    /// `secrets`: the credentials of the config the request ran under, redacted from upstream
    /// error messages.
    pub fn commit(mut self, mut out: WalkOutput, secrets: &boundary::Secrets) -> Response {
        // SPEC §12: a walk that ended without success was looked up in the response store before
        // this (see `route_walk_commit`).
        let attempts = out.attempts.len();
        let hint = Hint::of(&out);
        if out.deadline_exceeded {
            return self.deadline_exceeded(out, hint);
        }
        let Some(returned) = out.returned.take() else {
            return self.no_destination(out.skipped, hint);
        };
        let Returned {
            hop,
            target,
            model,
            outcome,
            fired,
            retry_after,
            upstream,
            health,
        } = returned;
        self.count_walk(hop);
        let (mut resp, live, usage) =
            self.response_for(upstream, outcome, (&target, &model), secrets);
        let status = resp.status().as_u16();
        let hint = Hint {
            upstream_retry_after: retry_after,
            ..hint
        };
        self.decorate(
            resp.headers_mut(),
            Some(&health),
            (attempts, hop),
            status,
            hint,
        );

        let served = status < 400 && !fired;
        let reason = walk::reason(outcome, fired, hop, attempts).label();
        let outcome_of_request = if served {
            RequestOutcome::Served
        } else {
            RequestOutcome::Error
        };
        let mut rec = self.record(outcome_of_request, reason, status);
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
                self.finish(rec, Some(&health));
                resp
            }
            Some(live) => self.relay(resp, live, rec, health),
        }
    }

    /// A 200 from the response store in the caller's dialect (streamed when the caller asked for
    /// a stream), reason `servedFromCache`. `out`: the walk that ran before, if one did.
    pub(crate) fn served_from_cache(
        mut self,
        hit: &super::cache::Hit,
        out: WalkOutput,
    ) -> Response {
        let stream_usage = self.cache.take().is_some_and(|c| c.stream_usage());
        let mut resp = super::cache::hit_response(hit, self.dialect, self.streamed, stream_usage);
        if self.headers_on {
            let h = resp.headers_mut();
            if let Ok(id) = HeaderValue::from_str(self.request_id.as_str()) {
                h.insert(REQUEST_ID.clone(), id);
            }
            h.insert(ATTEMPTS.clone(), small_number(out.attempts.len()));
        }
        let mut rec = self.record(RequestOutcome::Served, super::cache::SERVED_FROM_CACHE, 200);
        rec.attempts = out.attempts;
        rec.skipped = out.skipped;
        rec.committed = true;
        rec.ttft_ms = Some(ms(self.started.elapsed()));
        self.finish(rec, None);
        resp
    }

    /// Nothing on the route could be attempted (all ineligible or switched off): 503.
    fn no_destination(mut self, skipped: Vec<crate::observe::SkipRecord>, hint: Hint) -> Response {
        let mut msg: Cow<'static, str> =
            "no destination of this route could be attempted (all ineligible or disabled)".into();
        // When nothing could take the request as it is, say what (our own text, no prompt).
        let untranslatable = |s: &crate::observe::SkipRecord| {
            s.why == walk::Skip::Ineligible(walk::Ineligible::Translation) && s.detail.is_some()
        };
        if !skipped.is_empty() && skipped.iter().all(untranslatable) {
            let detail = skipped[0].detail.as_deref().unwrap_or_default();
            msg = format!("{msg}: {detail}").into();
        }
        let mut resp = error_response(
            self.dialect,
            GatewayErrorKind::Unavailable,
            &msg,
            Some(self.request_id.as_str()),
        );
        self.decorate(resp.headers_mut(), None, (0, 0), 503, hint);
        let mut rec = self.record(RequestOutcome::Error, "noEligibleDestination", 503);
        rec.skipped = skipped;
        self.finish(rec, None);
        resp
    }

    /// The request deadline passed before anything committed (SPEC §11): 504 in the caller's
    /// dialect, reason `deadlineExceeded`.
    fn deadline_exceeded(mut self, out: WalkOutput, hint: Hint) -> Response {
        let msg = format!(
            "the request's deadline ({} ms) passed before any destination answered",
            self.deadline_ms
        );
        let mut resp = error_response(
            self.dialect,
            GatewayErrorKind::GatewayTimeout,
            &msg,
            Some(self.request_id.as_str()),
        );
        let status = resp.status().as_u16();
        let hop = out.returned.as_ref().map(|r| r.hop);
        let hint = Hint {
            upstream_retry_after: out.returned.as_ref().and_then(|r| r.retry_after),
            ..hint
        };
        let attempts = out.attempts.len();
        self.decorate(
            resp.headers_mut(),
            None,
            (attempts, hop.unwrap_or(0)),
            status,
            hint,
        );
        let mut rec = self.record(RequestOutcome::Error, DEADLINE_EXCEEDED, status);
        rec.fallback_hop = hop;
        rec.attempts = out.attempts;
        rec.skipped = out.skipped;
        self.finish(rec, None);
        resp
    }

    /// The dashboard's fallback rate and `sidetrack_fallbacks_total`.
    fn count_walk(&self, hop: usize) {
        self.shared.walked.fetch_add(1, Ordering::Relaxed);
        if hop > 0 {
            self.shared.fell_back.fetch_add(1, Ordering::Relaxed);
            self.shared
                .metrics
                .fallback(self.rule_name.as_deref().unwrap_or(""), hop);
        }
    }

    /// The caller's response for the returned hop's answer: the gateway's error when it got no
    /// HTTP answer, a whole body (an upstream error capped and redacted), or the head of a live
    /// body with what the relay needs; and the usage of a whole successful body.
    fn response_for(
        &self,
        upstream: Option<Upstream>,
        outcome: Outcome,
        (target, model): (&str, &str),
        secrets: &boundary::Secrets,
    ) -> (Response, Option<Live>, Option<sidetrack_dialects::Usage>) {
        match upstream {
            None => {
                let (kind, msg) = match outcome.error_kind() {
                    Some(ErrorKind::FirstByteTimeout) => (
                        GatewayErrorKind::GatewayTimeout,
                        format!("destination {target}/{model} sent no first byte in time"),
                    ),
                    // SPEC §11: the stream timeouts are rendered as the FIRST_BYTE_TIMEOUT row.
                    Some(ErrorKind::FirstTokenTimeout) => (
                        GatewayErrorKind::GatewayTimeout,
                        format!("destination {target}/{model} sent no content in time"),
                    ),
                    Some(ErrorKind::StreamIdleTimeout) => (
                        GatewayErrorKind::GatewayTimeout,
                        format!("destination {target}/{model} stream was idle too long"),
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
                (error_response(self.dialect, kind, &msg, None), None, None)
            }
            Some(Upstream::Buffered { mut parts, body }) => {
                let mut usage = None;
                let body = if parts.status.is_success() {
                    usage = self.dialect.response_usage(&body);
                    if let Some(cache) = self.cache.as_deref() {
                        let stream = is_stream_type(&parts);
                        super::cache::store_body(&self.shared, cache, self.dialect, stream, &body);
                    }
                    body
                } else if parts.status.as_u16() >= 400 {
                    // Capped, and the gateway's credentials redacted (no copy when there is none).
                    boundary::upstream_error(self.dialect, &mut parts, body, secrets)
                } else {
                    body
                };
                // Translated and re-rendered bodies have lost their encoding headers already; a
                // stream's held bytes came through the pipe, which may have re-encoded them.
                let unchanged = !is_stream_type(&parts);
                let resp = answer(parts, Body::from(body), self.dialect, unchanged);
                (resp, None, usage)
            }
            Some(Upstream::Live {
                parts,
                held,
                rest,
                pipe,
                deadline,
            }) => {
                let unchanged = pipe.as_ref().is_none_or(|p| !p.rewrites_bytes());
                let resp = answer(parts, Body::empty(), self.dialect, unchanged);
                (resp, Some((held, rest, pipe, deadline)), None)
            }
        }
    }

    /// The `x-sidetrack-*` headers (SPEC §6.4, §11) and the caller retry hint (SPEC §6.5).
    fn decorate(
        &self,
        h: &mut http::HeaderMap,
        health: Option<&DestHealth>,
        (attempts, hop): (usize, usize),
        status: u16,
        hint: Hint,
    ) {
        if self.headers_on {
            h.reserve(5);
            if let Ok(id) = HeaderValue::from_str(self.request_id.as_str()) {
                h.insert(REQUEST_ID.clone(), id);
            }
            if let Some(v) = health.and_then(|h| h.served_by.as_ref()) {
                h.insert(SERVED_BY.clone(), v.clone());
            }
            h.insert(ATTEMPTS.clone(), small_number(attempts));
            h.insert(FALLBACK_HOP.clone(), small_number(hop));
            if hint.hedged {
                h.insert(HEDGED.clone(), HeaderValue::from_static("true"));
            }
        }
        if self.retry_hint != CallerRetryHint::Auto || status < 400 {
            return;
        }
        let (no_retry, after) = retry::retry_hint(
            !hint.policy_applied,
            false,
            hint.earliest_reopen,
            hint.upstream_retry_after,
        );
        if no_retry {
            // The gateway already applied its policy; SDK retries would multiply upstream calls.
            h.insert(SHOULD_RETRY.clone(), HeaderValue::from_static("false"));
        }
        if let Some(after) = after {
            let v = retry::retry_after_values(after);
            h.insert(RETRY_AFTER, HeaderValue::from(v.seconds));
            h.insert(RETRY_AFTER_MS.clone(), HeaderValue::from(v.millis));
        }
    }

    /// A live answer: its body is relayed, and the relayed body writes the record when it ends —
    /// also when the caller goes away.
    fn relay(
        mut self,
        resp: Response,
        (held, rest, pipe, deadline): Live,
        rec: RoutingRecord,
        health: Arc<DestHealth>,
    ) -> Response {
        self.finished = true;
        let cache = self.cache.take().filter(|_| resp.status().is_success());
        let finish = Finish {
            cache: cache.and_then(|mut c| c.collecting(self.dialect, pipe.is_some())),
            shared: self.shared.clone(),
            started: self.started,
            trace_start: self.trace_start,
            rec,
            health,
            reservation: self.reservation.take(),
            in_flight: self.in_flight.take(),
            stream_failed: self.stream_failed.take(),
        };
        let body = RelayBody::new(held, rest, pipe, self.dialect, deadline, finish);
        let (parts, _) = resp.into_parts();
        Response::from_parts(parts, Body::new(body))
    }
}

/// The routing log's `reason` when the request deadline passed before the commit (SPEC §11).
pub(crate) const DEADLINE_EXCEEDED: &str = "deadlineExceeded";

/// What the caller retry hint (SPEC §6.5) and `x-sidetrack-hedged` read of the walk.
#[derive(Clone, Copy)]
struct Hint {
    /// The gateway applied its own policy: more than one attempt, a skip, a retry, a forced
    /// attempt on an open breaker, or the deadline. Only the error of a walk that was a single
    /// attempt with none of these (one hop's answer) passes through without
    /// `x-should-retry: false`.
    policy_applied: bool,
    earliest_reopen: Option<std::time::Duration>,
    upstream_retry_after: Option<std::time::Duration>,
    hedged: bool,
}

impl Hint {
    fn of(out: &WalkOutput) -> Hint {
        Hint {
            policy_applied: out.attempts.len() != 1
                || !out.skipped.is_empty()
                || out.retried
                || out.forced
                || out.deadline_exceeded,
            earliest_reopen: out.earliest_reopen,
            upstream_retry_after: None,
            hedged: out.hedged,
        }
    }
}

/// What the relay needs of a live answer: the bytes held before the commit, the rest of the
/// upstream body, the stream pipe, and the attempt's timer.
type Live = (
    Vec<bytes::Bytes>,
    hyper::body::Incoming,
    Option<Box<crate::engine::pipe::Pipe>>,
    crate::engine::attempt::Timer,
);

impl Drop for RequestCtx {
    /// The request's future was dropped before it answered: the caller disconnected (or the server
    /// gave up on the connection). Whatever the walk was doing was cancelled with the future (its
    /// upstream connection dropped); the request is still logged and counted. Costs a flag test
    /// for every request that finished normally.
    fn drop(&mut self) {
        if !self.finished {
            let rec = self.record(
                RequestOutcome::Cancelled,
                CALLER_CANCELLED,
                CLIENT_CLOSED_REQUEST,
            );
            self.finish(rec, None);
        }
    }
}

/// A header value for a count that is almost always a single digit (no formatting for those).
fn small_number(n: usize) -> HeaderValue {
    const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match DIGITS.get(n) {
        Some(d) => HeaderValue::from_static(d),
        None => HeaderValue::from(n),
    }
}

/// Is the answer a stream (server-sent events or Bedrock's event stream)?
fn is_stream_type(parts: &http::response::Parts) -> bool {
    parts.headers.get(CONTENT_TYPE).is_some_and(|v| {
        v.as_bytes().starts_with(b"text/event-stream")
            || v.as_bytes()
                .starts_with(b"application/vnd.amazon.eventstream")
    })
}

/// The caller's response for an upstream answer: its status and the headers on the allow-list of
/// [`boundary::relayed`] (the upstream's map, reused; the body sets its own length).
/// `unchanged_body`: the caller gets the upstream's bytes as they came, so their `content-encoding`
/// still describes them.
fn answer(
    parts: http::response::Parts,
    body: Body,
    caller: Dialect,
    unchanged_body: bool,
) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = parts.status;
    let mut headers = parts.headers;
    // Usually `content-length`, `date` and a few provider headers: only the names present are
    // looked up again.
    let dropped: smallvec::SmallVec<[HeaderName; 4]> = headers
        .keys()
        .filter(|k| !boundary::relayed(k, caller, unchanged_body))
        .cloned()
        .collect();
    for name in dropped {
        headers.remove(name);
    }
    *r.headers_mut() = headers;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_numbers_render_like_formatting_does() {
        for n in [0usize, 1, 9, 10, 11, 123] {
            assert_eq!(small_number(n).to_str().ok(), Some(n.to_string().as_str()));
        }
    }

    fn upstream_parts(headers: &[(&'static str, &'static str)]) -> http::response::Parts {
        let (mut parts, ()) = http::Response::new(()).into_parts();
        for (k, v) in headers {
            parts
                .headers
                .append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        parts
    }

    fn names(r: &Response) -> Vec<&str> {
        let mut names: Vec<&str> = r.headers().keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn only_allow_listed_upstream_headers_reach_the_caller() {
        let parts = upstream_parts(&[
            ("content-type", "application/json"),
            ("content-length", "12"),
            ("connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
            ("server", "envoy"),
            ("x-internal-route", "pod-7"),
            ("x-request-id", "abc"),
            ("x-ratelimit-remaining-requests", "9"),
            ("retry-after", "3"),
            ("content-encoding", "gzip"),
        ]);
        let r = answer(parts, Body::empty(), Dialect::OpenAiChat, true);
        assert_eq!(
            names(&r),
            [
                "content-encoding",
                "content-type",
                "retry-after",
                "x-ratelimit-remaining-requests",
                "x-request-id"
            ]
        );
    }

    #[test]
    fn a_rewritten_body_loses_its_encoding() {
        let parts = upstream_parts(&[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
            ("x-amzn-bedrock-content-type", "application/json"),
            ("x-amzn-bedrock-invocation-latency", "12"),
        ]);
        let r = answer(parts, Body::empty(), Dialect::OpenAiChat, false);
        assert_eq!(
            names(&r),
            ["content-type", "x-amzn-bedrock-invocation-latency"]
        );
    }
}
