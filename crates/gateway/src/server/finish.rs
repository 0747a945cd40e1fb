//! Phase "finish": the end of every request — answered, refused, or abandoned by its caller.
//! The rate-limit reservation is settled with the real usage, a failure after the commit is
//! counted against the destination's breaker, the request metrics and span are recorded, and the
//! one routing-log line is queued. For a relayed body this runs when the body ends
//! ([`Finish`], handed to the relay at the commit); otherwise at once from
//! [`super::respond::RequestCtx`].

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use crate::engine::relay::{OnFinish, RelayEnd};
use crate::observe::metrics::InFlightGuard;
use crate::observe::{ms, RequestOutcome, RoutingRecord, UsageRecord};
use crate::server::Shared;
use crate::state::limits::Reservation;
use crate::state::DestHealth;

/// The routing record's `outcome` and `reason`, and the status logged, for a request whose caller
/// went away (SPEC §14): 499 before any answer was sent, as nginx logs it.
pub(super) const CALLER_CANCELLED: &str = "callerCancelled";
pub(super) const CLIENT_CLOSED_REQUEST: u16 = 499;

/// Writes the routing record when a committed body ends, and counts a failure after commit against
/// the destination's breaker (SPEC §5.5).
pub(super) struct Finish {
    pub shared: Arc<Shared>,
    pub started: Instant,
    pub trace_start: Option<SystemTime>,
    pub rec: RoutingRecord,
    pub health: Arc<DestHealth>,
    pub reservation: Option<Reservation>,
    /// The request stays in flight until its body ends.
    pub in_flight: Option<InFlightGuard>,
    /// The answer collected for the response store (SPEC §12), when the request uses it.
    pub cache: Option<Box<super::cache::Collecting>>,
    /// Set when the stream fails after the commit, for the request's Idempotency-Key lead (SPEC
    /// §12: a failed answer is never stored or replayed).
    pub stream_failed: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl OnFinish for Finish {
    fn observe(&mut self, chunk: &bytes::Bytes) {
        if let Some(c) = self.cache.as_mut() {
            c.observe(chunk);
        }
    }

    fn finish(self, end: RelayEnd) {
        let Finish {
            shared,
            started,
            trace_start,
            mut rec,
            health,
            reservation,
            in_flight: _in_flight,
            cache,
            stream_failed: self_stream_failed,
        } = self;
        if let Some(c) = cache {
            // Only an answer that ended well is kept (never one cut mid-stream).
            let ended_well = !end.mid_stream_error && !end.caller_gone && rec.status < 300;
            c.keep(&shared, ended_well, end.usage);
        }
        rec.mid_stream_error = end.mid_stream_error;
        rec.usage = end.usage.map(|u| UsageRecord {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        });
        if end.caller_gone {
            // Abandoned mid-body: the upstream's connection went with the body (SPEC §14).
            rec.outcome = RequestOutcome::Cancelled;
            rec.reason = CALLER_CANCELLED.into();
        } else if end.mid_stream_error {
            if let Some(flag) = &self_stream_failed {
                flag.store(true, std::sync::atomic::Ordering::Release);
            }
            rec.outcome = RequestOutcome::Error;
            // The knob or event that ended the stream (e.g. `streamIdleTimeoutMilliseconds`) on
            // the served attempt's record, unless it already has one.
            let served = rec
                .attempts
                .iter_mut()
                .rev()
                .find(|a| a.target == health.target && a.model == health.model);
            if let (Some(a), Some(why)) = (served, end.detail) {
                a.detail.get_or_insert_with(|| why.to_owned());
            }
            shared.health.record_mid_stream_failure(&health);
            shared
                .metrics
                .mid_stream_error(&health.target, &health.model);
        }
        settle(&shared, reservation, &rec);
        finish_record(&shared, started, trace_start, rec, Some(&health));
    }
}

/// Replaces a rate-limit token reservation with the tokens the request really used. When an
/// answer was sent (or abandoned by its caller) without usage — a stream that reported none, a body
/// too large to read it from — the reservation stays as the estimate (prompt bytes / 4 plus the
/// requested or default output): never zero, or a limit would not hold for such streams (SPEC
/// §14). A request that produced nothing (refused, unroutable, an error answer) uses none.
pub(super) fn settle(shared: &Shared, reservation: Option<Reservation>, rec: &RoutingRecord) {
    let Some(r) = reservation else { return };
    let used = match rec.usage {
        Some(u) => u.input_tokens + u.output_tokens,
        None if rec.outcome == RequestOutcome::Cancelled || (rec.committed && rec.status < 400) => {
            return
        }
        None => 0,
    };
    shared.limiter.settle(r, used);
}

/// The end of every request: metrics, token counts, the request span (it ends here, when the
/// response body has ended), then the routing log line.
pub(super) fn finish_record(
    shared: &Shared,
    started: Instant,
    trace_start: Option<SystemTime>,
    mut rec: RoutingRecord,
    served: Option<&DestHealth>,
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
    if let (Some(u), Some(_), Some(h)) = (&rec.usage, &rec.served_by, served) {
        h.metrics.tokens(u.input_tokens, u.output_tokens);
    }
    if let Some(start) = trace_start {
        let provider = rec.served_by.as_ref().and_then(|s| {
            let rt = shared.runtime.load();
            let target = rt.config.targets.iter().find(|t| *t.name == *s.target);
            target.map(|t| t.provider)
        });
        m.traces().request(start, &rec, provider);
    }
    // One allocation shared by the log's writer and the dashboard's recent-decisions ring.
    let rec = Arc::new(rec);
    shared.dash.decisions.push(rec.clone());
    shared.log.record(rec);
}
