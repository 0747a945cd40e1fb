//! Phase "send": the request goes out and the first response-body byte comes back within the
//! hop's first-byte timeout (or the request deadline, whichever is sooner). Headers alone do not
//! count: a first-byte timeout runs until the first body byte (SPEC §5.4). A streamed request's
//! first-token timeout (SPEC §11) runs from the send too, so it can also end this phase.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::response::Parts;
use hyper::body::Incoming;
use sidetrack_resilience::{walk, ErrorKind, Outcome};
use tokio::time::Instant;

use super::body::{next_data, within, Read, Timer};
use crate::providers::pool::SendError as ClientError;

/// An upstream that answered: its head, the first body chunk (`None` for an empty body), the
/// rest, and the attempt's timer, now set to the request deadline.
pub(super) struct Answered {
    pub parts: Parts,
    pub first: Option<Bytes>,
    pub body: Incoming,
    pub first_byte: Duration,
    pub timer: Timer,
}

/// Why the send phase failed: the outcome and the knob or event behind it.
pub(super) type SendFailure = (Outcome, &'static str);

/// A streamed request had no content event within `firstTokenTimeoutMilliseconds` of the send.
pub(super) const FIRST_TOKEN_TIMEOUT: SendFailure = (
    Outcome::Error(ErrorKind::FirstTokenTimeout),
    "firstTokenTimeoutMilliseconds",
);
/// A streamed answer fell silent for longer than `streamIdleTimeoutMilliseconds` before the commit.
pub(super) const STREAM_IDLE_TIMEOUT: SendFailure = (
    Outcome::Error(ErrorKind::StreamIdleTimeout),
    "streamIdleTimeoutMilliseconds",
);

/// Awaits `response` and its first body byte. `first_token_timeout` (a streamed request's, SPEC
/// §11) ends the wait as `FIRST_TOKEN_TIMEOUT` when it is sooner than the first-byte deadline.
pub(super) async fn send(
    response: impl Future<Output = Result<http::Response<Incoming>, ClientError>>,
    started: Instant,
    first_byte_timeout: Option<Duration>,
    first_token_timeout: Option<Duration>,
    deadline: Instant,
) -> Result<Answered, SendFailure> {
    let (first_byte_deadline, knob) =
        walk::first_byte_deadline(started, first_byte_timeout, deadline);
    let (wait_until, timed_out) = match first_token_timeout.map(|t| started + t) {
        Some(at) if at < first_byte_deadline => (at, FIRST_TOKEN_TIMEOUT),
        _ => (
            first_byte_deadline,
            (Outcome::Error(ErrorKind::FirstByteTimeout), knob),
        ),
    };
    let mut timer: Timer = Box::pin(tokio::time::sleep_until(wait_until));
    let resp = match within(&mut timer, response).await {
        None => return Err(timed_out),
        Some(Err(e)) => {
            let detail = if e.is_connect() {
                "connect"
            } else {
                "transport"
            };
            return Err((Outcome::Error(ErrorKind::ConnectionError), detail));
        }
        Some(Ok(r)) => r,
    };
    let (parts, mut body) = resp.into_parts();
    let first = match next_data(&mut body, &mut timer).await {
        Read::TimedOut => return Err(timed_out),
        Read::Failed => {
            return Err((
                Outcome::Error(ErrorKind::ConnectionError),
                "bodyBeforeFirstByte",
            ))
        }
        Read::End => None,
        Read::Data(d) => Some(d),
    };
    let first_byte = started.elapsed();
    // From the first byte on, the request deadline bounds the attempt.
    if wait_until != deadline {
        timer.as_mut().reset(deadline);
    }
    Ok(Answered {
        parts,
        first,
        body,
        first_byte,
        timer,
    })
}
