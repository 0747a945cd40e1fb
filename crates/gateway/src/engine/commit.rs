//! The commit decision for a streamed answer (SPEC §5.6): when the attempt's outcome is known and
//! the answer may start going to the caller. `firstByte` commits on the first byte; `firstToken`
//! (the default) holds the stream's preamble until an event decides — content, the stream's end,
//! or an error event (then the attempt failed, and a fallback can still be taken). A stream that
//! breaks a bound or its framing, or says nothing decidable in [`MAX_HELD_BYTES`], fails as a 502
//! (SPEC §14). What happens at the commit (headers, the record, the relay) is
//! `server::respond::RequestCtx::commit`.

use bytes::Bytes;
use http::response::Parts;
use hyper::body::Incoming;
use sidetrack_config::StreamCommit;
use sidetrack_dialects::Dialect;
use sidetrack_resilience::{ErrorKind, Outcome};

use super::attempt::Upstream;
use super::body::{next_data, Read, Timer};
use super::pipe::{Pipe, StreamState};

/// `firstToken` reads at most this much of a stream without a decidable event; past it the
/// attempt is a protocol failure (SPEC §14).
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// What the stream said so far decides the attempt: its outcome and the event behind a failure.
/// `None`: not yet (keep holding).
pub(super) fn decide(
    commit: StreamCommit,
    status: u16,
    seen: &StreamState,
) -> Option<(Outcome, Option<String>)> {
    if commit == StreamCommit::FirstByte {
        Some((Outcome::from_status(status), None))
    } else if let Some((code, error_type)) = &seen.error {
        Some((
            Outcome::Status(*code),
            Some(format!("streamErrorEvent:{error_type}")),
        ))
    } else if seen.seen_content || seen.seen_done {
        Some((Outcome::from_status(status), None))
    } else {
        None
    }
}

/// How a held stream ended up.
pub(super) enum Held {
    /// Decided: the outcome, the event behind a failure, and the live answer (held bytes first).
    Decided(Outcome, Option<String>, Upstream),
    /// A protocol failure before the commit (SPEC §14): the knob or event, and what to tell the
    /// caller.
    ProtocolFailure(Parts, &'static str, &'static str),
    /// The stream broke off or timed out before anything decided.
    Failed(Outcome, &'static str),
}

/// Feeds the stream through `pipe` until [`decide`] says what it is.
pub(super) async fn hold(
    parts: Parts,
    first: Bytes,
    mut body: Incoming,
    mut timer: Timer,
    mut pipe: Box<Pipe>,
    commit: StreamCommit,
) -> Held {
    let status = parts.status.as_u16();
    let mut read_len = first.len();
    let mut held = vec![pipe.feed_until_decided(first)];
    loop {
        let seen = pipe.state();
        if let Some(why) = seen.protocol_failure {
            let what = "an upstream stream event exceeds its bound or does not decode";
            return Held::ProtocolFailure(parts, why, what);
        }
        if let Some((outcome, detail)) = decide(commit, status, seen) {
            let response = Upstream::Live {
                parts,
                held,
                rest: body,
                pipe: Some(pipe),
                deadline: timer,
            };
            return Held::Decided(outcome, detail, response);
        }
        if read_len > MAX_HELD_BYTES {
            let what = "the upstream stream said nothing decidable in its first 64 KiB";
            return Held::ProtocolFailure(parts, "undecidedPreamble", what);
        }
        match next_data(&mut body, &mut timer).await {
            Read::Data(d) => {
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
            Read::TimedOut => {
                return Held::Failed(
                    Outcome::Error(ErrorKind::FirstByteTimeout),
                    "requestTimeoutMilliseconds",
                )
            }
        }
    }
}

/// The caller's stream content type replaces the upstream's when the formats differ.
pub(super) fn set_stream_content_type(parts: &mut Parts, caller: Dialect) {
    let ct = http::HeaderValue::from_static(caller.stream_content_type());
    parts.headers.insert(http::header::CONTENT_TYPE, ct);
    parts.headers.remove("x-amzn-bedrock-content-type");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(f: impl FnOnce(&mut StreamState)) -> StreamState {
        let mut s = StreamState::default();
        f(&mut s);
        s
    }

    #[test]
    fn first_byte_commits_at_once_whatever_the_stream_said() {
        let nothing = StreamState::default();
        assert_eq!(
            decide(StreamCommit::FirstByte, 200, &nothing),
            Some((Outcome::Success(200), None))
        );
        let error = seen(|s| s.error = Some((529, "overloaded_error".into())));
        assert_eq!(
            decide(StreamCommit::FirstByte, 200, &error),
            Some((Outcome::Success(200), None))
        );
    }

    #[test]
    fn first_token_holds_until_content_the_end_or_an_error_event() {
        let commit = StreamCommit::FirstToken;
        assert_eq!(decide(commit, 200, &StreamState::default()), None);
        let content = seen(|s| s.seen_content = true);
        assert_eq!(
            decide(commit, 200, &content),
            Some((Outcome::Success(200), None))
        );
        let done = seen(|s| s.seen_done = true);
        assert_eq!(
            decide(commit, 200, &done),
            Some((Outcome::Success(200), None))
        );
        // An error event before any content is the attempt's outcome: a fallback can follow.
        let error = seen(|s| {
            s.seen_content = true;
            s.error = Some((529, "overloaded_error".into()));
        });
        assert_eq!(
            decide(commit, 200, &error),
            Some((
                Outcome::Status(529),
                Some("streamErrorEvent:overloaded_error".into())
            ))
        );
    }
}
