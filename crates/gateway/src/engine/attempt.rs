//! Phases "attempt" and "classify": one outbound request to one destination, timed, read up to the
//! commit decision, and turned into exactly one [`Outcome`].

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::response::Parts;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use sidetrack_config::StreamCommit;
use sidetrack_dialects::Dialect;
use sidetrack_resilience::{ErrorKind, Outcome};
use tokio::time::{Instant, Sleep};

use super::pipe::Pipe;
use crate::providers::HttpClient;

/// `firstToken` reads at most this much of a stream without a decidable event; past it the
/// attempt is a protocol failure (SPEC §14).
pub const MAX_HELD_BYTES: usize = 64 * 1024;
/// Error bodies are read whole so the last one can be returned; they are small, but cap them.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// What an upstream may make the gateway hold (SPEC §14), from `server`.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// One stream event or line (`maxStreamEventBytes`).
    pub max_stream_event_bytes: usize,
    /// A non-stream answer read whole to be translated (`maxResponseBytes`).
    pub max_response_bytes: usize,
}

impl Bounds {
    pub fn of(server: &sidetrack_config::Server) -> Bounds {
        Bounds {
            max_stream_event_bytes: server.max_stream_event_bytes,
            max_response_bytes: server.max_response_bytes,
        }
    }
}

pub struct AttemptSpec<'a> {
    pub client: &'a HttpClient,
    pub request: http::Request<Full<Bytes>>,
    /// The upstream's wire format and the caller's: the stream pipe translates between them.
    pub upstream: Dialect,
    pub caller: Dialect,
    /// Names a translated stream's message (`id`) and the model it reports.
    pub response_id: &'a str,
    pub model: &'a str,
    pub first_byte_timeout: Option<Duration>,
    /// The whole request's deadline (`requestTimeoutMilliseconds`).
    pub deadline: Instant,
    pub stream_commit: StreamCommit,
    pub bounds: Bounds,
    /// The gateway asked the upstream for a usage chunk the caller did not ask for (SPEC §14
    /// "Token limits"): the stream pipe keeps it from the caller.
    pub strip_usage: bool,
    /// The caller asked for usage in the stream (`ParsedRequest::stream_usage == Some(true)`).
    pub caller_usage: bool,
}

/// A classified attempt.
pub struct Attempt {
    pub outcome: Outcome,
    /// The knob or event behind a failure, for logs (e.g. `firstByteTimeoutMilliseconds`).
    pub detail: Option<String>,
    pub duration: Duration,
    pub first_byte: Option<Duration>,
    pub response: Option<Upstream>,
}

/// What an attempt got back, if it got an HTTP answer.
pub enum Upstream {
    /// A whole body (error statuses; a failed stream's held bytes).
    Buffered { parts: Parts, body: Bytes },
    /// Headers and the bytes read so far; the rest is still arriving.
    Live {
        parts: Parts,
        held: Vec<Bytes>,
        rest: Incoming,
        /// Boxed: it is large, and an `Upstream` is moved several times on its way to the caller.
        pipe: Option<Box<Pipe>>,
        /// The attempt's timer, set to the request deadline: the relay bounds the rest with it.
        deadline: Timer,
    },
}

/// One timer per attempt: first set to the first-byte deadline, then to the request deadline, and
/// handed to the relay with a live answer. Each new timer is one more registration with the
/// runtime's timer wheel (and one removal); a timeout around every read made three or more per
/// streamed request (docs/decisions/0003-hot-path.md, "Fourth pass").
pub type Timer = Pin<Box<Sleep>>;

/// `fut`'s output, or `None` when `timer` fires first.
async fn within<F: Future>(timer: &mut Timer, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

impl Upstream {
    pub fn parts(&self) -> &Parts {
        match self {
            Upstream::Buffered { parts, .. } | Upstream::Live { parts, .. } => parts,
        }
    }

    /// Drops the unread rest (and with it the connection) and keeps what was read.
    pub fn into_buffered(self) -> Upstream {
        match self {
            Upstream::Buffered { .. } => self,
            Upstream::Live { parts, held, .. } => Upstream::Buffered {
                parts,
                body: concat(held),
            },
        }
    }
}

fn concat(chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                b.extend_from_slice(&c);
            }
            b.freeze()
        }
    }
}

enum Read {
    Data(Bytes),
    End,
    Failed,
    TimedOut,
}

/// Next data frame (trailers skipped), bounded by `timer`.
async fn next_data(body: &mut Incoming, timer: &mut Timer) -> Read {
    loop {
        match within(timer, body.frame()).await {
            None => return Read::TimedOut,
            Some(None) => return Read::End,
            Some(Some(Err(_))) => return Read::Failed,
            Some(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if !data.is_empty() {
                        return Read::Data(data);
                    }
                }
            }
        }
    }
}

/// A streamed answer: server-sent events or the Bedrock event stream.
fn is_stream(parts: &Parts) -> bool {
    parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.starts_with("text/event-stream")
                || v.starts_with("application/vnd.amazon.eventstream")
        })
}

/// The first chunk and the rest of a body (bounded by `timer`), or `Err` with what was read once
/// more than `cap` bytes came (the rest is left unread).
async fn read_rest(
    first: Option<Bytes>,
    body: &mut Incoming,
    timer: &mut Timer,
    cap: usize,
) -> Result<Bytes, Bytes> {
    let mut held: Vec<Bytes> = first.into_iter().collect();
    let mut size: usize = held.iter().map(Bytes::len).sum();
    while size <= cap {
        match next_data(body, timer).await {
            Read::Data(d) => {
                size += d.len();
                held.push(d);
            }
            _ => return Ok(concat(held)),
        }
    }
    Err(concat(held))
}

/// A gateway-made 502 in the caller's dialect for an upstream answer it could not carry
/// (untranslatable, over a bound, undecodable): the upstream's status and body are replaced.
fn bad_gateway(mut parts: Parts, caller: Dialect, message: &str) -> Upstream {
    let r = caller.render_upstream_error(502, "api_error", message);
    let body = rendered(&mut parts, r);
    Upstream::Buffered { parts, body }
}

/// Puts an error the gateway rendered in place of the upstream's answer: its status, a JSON body
/// with the dialect's own error headers (Bedrock's `x-amzn-ErrorType`); returns the body.
fn rendered(parts: &mut Parts, r: sidetrack_dialects::RenderedError) -> Bytes {
    parts.status = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    set_json(parts);
    for (k, v) in r.headers {
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            parts.headers.insert(k, v);
        }
    }
    r.body
}

/// The body is now one the gateway wrote: JSON, without the upstream body's encoding or length.
fn set_json(parts: &mut Parts) {
    crate::server::boundary::body_rewritten(&mut parts.headers);
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
}

/// An upstream error in another format → the same error in the caller's dialect (status
/// preserved where the caller's dialect has it, type mapped, message capped; the commit redacts
/// credentials). `Retry-After` and request ids stay.
fn translate_error(
    mut parts: Parts,
    body: &[u8],
    upstream: Dialect,
    caller: Dialect,
) -> (Parts, Bytes) {
    let status = parts.status.as_u16();
    let header_type = parts
        .headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (error_type, message) = upstream.parse_error(status, header_type.as_deref(), body);
    let message = crate::server::boundary::cap_message(&message);
    let r = caller.render_upstream_error(status, &error_type, &message);
    parts.headers.remove("x-amzn-errortype");
    let body = rendered(&mut parts, r);
    (parts, body)
}

/// Runs one attempt up to its commit decision.
/// (A plain fn returning an `async` block rather than an `async fn`: an `async fn` keeps its
/// argument twice in its future, as passed and as the local it moves to. See
/// docs/decisions/0003-hot-path.md, "Small futures".)
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
pub fn run(spec: AttemptSpec<'_>) -> impl Future<Output = Attempt> + '_ {
    // The client's response future (16 bytes) is made here, so the attempt's future holds it and
    // not the request (256 bytes); nothing is sent before the first poll.
    let AttemptSpec {
        client, request, ..
    } = spec;
    let response = client.request(request);
    async move {
        let started = Instant::now();
        let fbt_deadline = spec.first_byte_timeout.map(|d| started + d);
        let first_byte_deadline = match fbt_deadline {
            Some(d) if d < spec.deadline => d,
            _ => spec.deadline,
        };
        let timeout_detail = || {
            if fbt_deadline.is_some_and(|d| d <= spec.deadline) {
                "firstByteTimeoutMilliseconds"
            } else {
                "requestTimeoutMilliseconds"
            }
        };
        let failed = |outcome: Outcome, detail: String, first_byte: Option<Duration>| Attempt {
            outcome,
            detail: Some(detail),
            duration: started.elapsed(),
            first_byte,
            response: None,
        };

        let mut timer: Timer = Box::pin(tokio::time::sleep_until(first_byte_deadline));
        let resp = match within(&mut timer, response).await {
            None => {
                return failed(
                    Outcome::Error(ErrorKind::FirstByteTimeout),
                    timeout_detail().into(),
                    None,
                )
            }
            Some(Err(e)) => {
                let detail = if e.is_connect() {
                    "connect"
                } else {
                    "transport"
                };
                return failed(
                    Outcome::Error(ErrorKind::ConnectionError),
                    detail.into(),
                    None,
                );
            }
            Some(Ok(r)) => r,
        };
        let (mut parts, mut body) = resp.into_parts();
        let status = parts.status.as_u16();

        // The first-byte timeout runs until the first body byte, not just the headers.
        let first = match next_data(&mut body, &mut timer).await {
            Read::TimedOut => {
                return failed(
                    Outcome::Error(ErrorKind::FirstByteTimeout),
                    timeout_detail().into(),
                    None,
                )
            }
            Read::Failed => {
                return failed(
                    Outcome::Error(ErrorKind::ConnectionError),
                    "bodyBeforeFirstByte".into(),
                    None,
                )
            }
            Read::End => None,
            Read::Data(d) => Some(d),
        };
        let first_byte = Some(started.elapsed());
        // From the first byte on, the request deadline bounds the attempt.
        if first_byte_deadline != spec.deadline {
            timer.as_mut().reset(spec.deadline);
        }
        let done = |outcome: Outcome, detail: Option<String>, response: Upstream| Attempt {
            outcome,
            detail,
            duration: started.elapsed(),
            first_byte,
            response: Some(response),
        };

        let translated = spec.upstream != spec.caller;
        if status >= 400 {
            // Read the whole (small) error body: if this hop triggers and is the last one used, the
            // caller gets exactly this response (translated into its dialect when formats differ).
            // An error body over the cap is cut there: only its message matters.
            let body = read_rest(first, &mut body, &mut timer, MAX_ERROR_BODY)
                .await
                .unwrap_or_else(|cut| cut);
            let (parts, body) = if translated {
                translate_error(parts, &body, spec.upstream, spec.caller)
            } else {
                (parts, body)
            };
            return done(
                Outcome::Status(status),
                None,
                Upstream::Buffered { parts, body },
            );
        }
        let stream = is_stream(&parts);
        if translated && !stream {
            // A whole answer in another format: read it, translate it, send it as one body.
            let cap = spec.bounds.max_response_bytes;
            let Ok(raw) = read_rest(first, &mut body, &mut timer, cap).await else {
                let message = format!(
                    "sidetrack: the upstream answer exceeds server.maxResponseBytes ({cap} bytes)"
                );
                return done(
                    Outcome::Status(502),
                    Some("responseTooLarge".into()),
                    bad_gateway(parts, spec.caller, &message),
                );
            };
            return match spec.upstream.parse_response(&raw) {
                Ok(mut resp) => {
                    // Converse answers carry neither id nor model: name them as the stream encoders do.
                    if resp.id.is_empty() {
                        resp.id = spec.response_id.to_owned();
                    }
                    if resp.model.is_empty() {
                        resp.model = spec.model.to_owned();
                    }
                    set_json(&mut parts);
                    for (name, n) in spec.caller.usage_headers(resp.usage).into_iter().flatten() {
                        let name = http::HeaderName::from_static(name);
                        parts.headers.insert(name, http::HeaderValue::from(n));
                    }
                    done(
                        Outcome::from_status(status),
                        None,
                        Upstream::Buffered {
                            parts,
                            body: spec.caller.render_response(&resp),
                        },
                    )
                }
                Err(e) => {
                    let message = format!("sidetrack could not translate the upstream answer: {e}");
                    done(
                        Outcome::Status(502),
                        Some("untranslatableResponse".into()),
                        bad_gateway(parts, spec.caller, &message),
                    )
                }
            };
        }

        let Some(first) = first else {
            return done(
                Outcome::from_status(status),
                None,
                Upstream::Buffered {
                    parts,
                    body: Bytes::new(),
                },
            );
        };
        if !stream {
            // A plain body: the first byte commits it; the rest streams through as it arrives.
            return done(
                Outcome::from_status(status),
                None,
                Upstream::Live {
                    parts,
                    held: vec![first],
                    rest: body,
                    pipe: None,
                    deadline: timer,
                },
            );
        }

        let mut pipe = Box::new(Pipe::new(
            spec.upstream,
            spec.caller,
            spec.response_id,
            spec.model,
            spec.bounds.max_stream_event_bytes,
            spec.strip_usage,
            spec.caller_usage,
        ));
        if translated {
            let ct = http::HeaderValue::from_static(spec.caller.stream_content_type());
            parts.headers.insert(http::header::CONTENT_TYPE, ct);
            parts.headers.remove("x-amzn-bedrock-content-type");
        }
        let mut read_len = first.len();
        let out = pipe.feed_until_decided(first);
        let mut held = vec![out];
        loop {
            // firstByte commits here; firstToken holds the preamble until an event decides: content,
            // the stream's end, or an error event (the attempt failed). A stream that breaks a bound
            // or its framing, or says nothing decidable in MAX_HELD_BYTES, fails as a 502 (§14).
            let seen = pipe.state();
            let protocol_failure = |why: &str, what: &str, parts: Parts| {
                let message = format!("sidetrack: {what}");
                let response = bad_gateway(parts, spec.caller, &message);
                done(Outcome::Status(502), Some(why.into()), response)
            };
            if let Some(why) = seen.protocol_failure {
                let what = "an upstream stream event exceeds its bound or does not decode";
                return protocol_failure(why, what, parts);
            }
            let decided = if spec.stream_commit == StreamCommit::FirstByte {
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
            };
            if let Some((outcome, detail)) = decided {
                let response = Upstream::Live {
                    parts,
                    held,
                    rest: body,
                    pipe: Some(pipe),
                    deadline: timer,
                };
                return done(outcome, detail, response);
            }
            if read_len > MAX_HELD_BYTES {
                let what = "the upstream stream said nothing decidable in its first 64 KiB";
                return protocol_failure("undecidedPreamble", what, parts);
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
                    return failed(
                        Outcome::Error(ErrorKind::ConnectionError),
                        "streamEndedBeforeFirstToken".into(),
                        first_byte,
                    )
                }
                Read::TimedOut => {
                    return failed(
                        Outcome::Error(ErrorKind::FirstByteTimeout),
                        "requestTimeoutMilliseconds".into(),
                        first_byte,
                    )
                }
            }
        }
    }
}
