//! Phase "send": the request goes out and the first response-body byte comes back within the
//! hop's first-byte timeout (or the request deadline, whichever is sooner). Headers alone do not
//! count: a first-byte timeout runs until the first body byte (SPEC §5.4).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::response::Parts;
use hyper::body::Incoming;
use hyper_util::client::legacy::Error as ClientError;
use sidetrack_resilience::{walk, ErrorKind, Outcome};
use tokio::time::Instant;

use super::body::{next_data, within, Read, Timer};

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

/// Awaits `response` and its first body byte.
pub(super) async fn send(
    response: impl Future<Output = Result<http::Response<Incoming>, ClientError>>,
    started: Instant,
    first_byte_timeout: Option<Duration>,
    deadline: Instant,
) -> Result<Answered, SendFailure> {
    let (first_byte_deadline, knob) =
        walk::first_byte_deadline(started, first_byte_timeout, deadline);
    let timed_out = (Outcome::Error(ErrorKind::FirstByteTimeout), knob);
    let mut timer: Timer = Box::pin(tokio::time::sleep_until(first_byte_deadline));
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
    if first_byte_deadline != deadline {
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
