//! The commit decision for a streamed answer (SPEC §5.6): when the attempt's outcome is known and
//! the answer may start going to the caller. `firstByte` commits on the first byte; `firstToken`
//! (the default) holds the stream's preamble until an event decides — content, the stream's end,
//! or an error event (then the attempt failed, and a fallback can still be taken). A stream that
//! breaks a bound or its framing, or says nothing decidable in [`MAX_HELD_BYTES`], fails as a 502
//! (SPEC §14). What happens at the commit (headers, the record, the relay) is
//! `server::respond::RequestCtx::commit`.

use std::time::Duration;

use bytes::Bytes;
use http::response::Parts;
use hyper::body::Incoming;
use sidetrack_config::StreamCommit;
use sidetrack_dialects::Dialect;
use sidetrack_resilience::{walk, ErrorClass, ErrorKind, Outcome};
use tokio::time::Instant;

use super::attempt::Upstream;
use super::body::{next_data, Read, Timer};
use super::pipe::{Pipe, StreamState};
use super::send::{SendFailure, FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT};

pub use sidetrack_resilience::walk::MAX_HELD_BYTES;

/// What the stream said so far decides the attempt ([`walk::commit_decision`]): its outcome and
/// the event behind a failure. `None`: not yet (keep holding).
pub(super) fn decide(
    commit: StreamCommit,
    status: u16,
    seen: &StreamState,
) -> Option<(Outcome, Option<String>)> {
    let rule = match commit {
        StreamCommit::FirstByte => walk::CommitRule::FirstByte,
        StreamCommit::FirstToken => walk::CommitRule::FirstToken,
    };
    let heard = walk::Heard {
        content: seen.seen_content,
        done: seen.seen_done,
        error: seen.error.as_ref().map(|(code, _)| *code),
    };
    let outcome = walk::commit_decision(rule, status, heard)?;
    // Under firstToken an error event is the outcome; the detail names its type.
    let detail = match (rule, &seen.error) {
        (walk::CommitRule::FirstToken, Some((_, error_type))) => {
            Some(format!("streamErrorEvent:{error_type}"))
        }
        _ => None,
    };
    Some((outcome, detail))
}

/// The timers of a held stream besides the request deadline (SPEC §11).
pub(super) struct Timeouts {
    /// Send + `firstTokenTimeoutMilliseconds`, when the request is streamed and sets it.
    pub first_token_at: Option<Instant>,
    /// `streamIdleTimeoutMilliseconds`: the longest silence between upstream chunks.
    pub idle: Option<Duration>,
    /// The request deadline.
    pub deadline: Instant,
}

impl Timeouts {
    /// When the attempt's one timer must fire next, and what it means then: the earliest of the
    /// request deadline, the first-token deadline and the end of the allowed silence after the
    /// last chunk (`last_chunk`).
    fn next(&self, last_chunk: Instant) -> (Instant, SendFailure) {
        let mut at = (self.deadline, REQUEST_DEADLINE);
        if let Some(t) = self.first_token_at.filter(|t| *t < at.0) {
            at = (t, FIRST_TOKEN_TIMEOUT);
        }
        if let Some(t) = self.idle.map(|d| last_chunk + d).filter(|t| *t < at.0) {
            at = (t, STREAM_IDLE_TIMEOUT);
        }
        at
    }
}

/// The request deadline passed while a stream was held.
const REQUEST_DEADLINE: SendFailure = (
    Outcome::Error(ErrorKind::FirstByteTimeout),
    "requestTimeoutMilliseconds",
);

/// How a held stream ended up.
pub(super) enum Held {
    /// Decided: the outcome, the event behind a failure, the live answer (held bytes first), and
    /// the class of an error event that decided it.
    Decided(Outcome, Option<String>, Upstream, Option<ErrorClass>),
    /// A protocol failure before the commit (SPEC §14): the knob or event, and what to tell the
    /// caller.
    ProtocolFailure(Parts, &'static str, &'static str),
    /// The stream broke off or timed out before anything decided.
    Failed(Outcome, &'static str),
}

/// Feeds the stream through `pipe` until [`decide`] says what it is, within the request deadline
/// and the stream timeouts (`timeouts`): a timeout before the decision fails the attempt. The
/// first-token timeout acts only until the commit: under `firstByte` the first byte commits, so it
/// never acts here.
#[allow(
    clippy::too_many_arguments,
    reason = "the phase's inputs, each used once"
)]
pub(super) async fn hold(
    parts: Parts,
    first: Bytes,
    mut body: Incoming,
    mut timer: Timer,
    mut pipe: Box<Pipe>,
    commit: StreamCommit,
    upstream: Dialect,
    timeouts: Timeouts,
) -> Held {
    let status = parts.status.as_u16();
    let mut read_len = first.len();
    // Read only when a stream idle timeout is set: the clock is not read per chunk otherwise.
    let mut last_chunk = match timeouts.idle {
        Some(_) => Instant::now(),
        None => timeouts.deadline,
    };
    let mut held = vec![pipe.feed_until_decided(first)];
    loop {
        let seen = pipe.state();
        if let Some(why) = seen.protocol_failure {
            let what = "an upstream stream event exceeds its bound or does not decode";
            return Held::ProtocolFailure(parts, why, what);
        }
        if let Some((outcome, detail)) = decide(commit, status, seen) {
            let class = match (&outcome, &seen.error) {
                (Outcome::Status(_), Some((code, error_type))) => {
                    upstream.error_class_of(*code, error_type, "")
                }
                _ => None,
            };
            // The relay reads the request deadline from the timer.
            if timer.deadline() != timeouts.deadline {
                timer.as_mut().reset(timeouts.deadline);
            }
            let response = Upstream::Live {
                parts,
                held,
                rest: body,
                pipe: Some(pipe),
                deadline: timer,
            };
            return Held::Decided(outcome, detail, response, class);
        }
        if read_len > MAX_HELD_BYTES {
            let what = "the upstream stream said nothing decidable in its first 64 KiB";
            return Held::ProtocolFailure(parts, "undecidedPreamble", what);
        }
        let (wake, timed_out) = timeouts.next(last_chunk);
        if timer.deadline() != wake {
            timer.as_mut().reset(wake);
        }
        match next_data(&mut body, &mut timer).await {
            Read::Data(d) => {
                if timeouts.idle.is_some() {
                    last_chunk = Instant::now();
                }
                read_len += d.len();
                let out = pipe.feed_until_decided(d);
                if !out.is_empty() {
                    held.push(out);
                }
            }
            Read::End | Read::Failed => {
                return Held::Failed(
                    Outcome::Error(ErrorKind::ConnectionError),
                    "streamEndedBeforeFirstToken",
                )
            }
            Read::TimedOut => return Held::Failed(timed_out.0, timed_out.1),
        }
    }
}

/// The caller's stream content type replaces the upstream's when the formats differ.
pub(super) fn set_stream_content_type(parts: &mut Parts, caller: Dialect) {
    let ct = http::HeaderValue::from_static(caller.stream_content_type());
    parts.headers.insert(http::header::CONTENT_TYPE, ct);
    parts.headers.remove("x-amzn-bedrock-content-type");
}
