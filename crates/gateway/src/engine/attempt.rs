//! Phases "attempt" and "classify": one outbound request to one destination, timed, read up to the
//! commit decision, and turned into exactly one [`Outcome`]. The phases in order: [`super::send`]
//! (out, and the first byte back), then by the kind of answer — an error read whole, a whole
//! answer translated ([`super::translate`]), a plain body passed on, or a stream held until
//! [`super::commit`] decides.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::response::Parts;
use http_body_util::Full;
use hyper::body::Incoming;
use sidetrack_config::StreamCommit;
use sidetrack_dialects::Dialect;
use sidetrack_resilience::{ErrorClass, Outcome};
use tokio::time::Instant;

pub use super::body::Timer;
use super::body::{concat, read_rest};
use super::commit::{self, Held};
use super::pipe::Pipe;
use super::send::{send, Answered};
use super::translate;
use crate::providers::HttpClient;

pub use super::commit::MAX_HELD_BYTES;
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

/// What an attempt needs besides the request itself.
pub struct AttemptSpec<'a> {
    /// The upstream's wire format and the caller's: the stream pipe translates between them.
    pub upstream: Dialect,
    pub caller: Dialect,
    /// Names a translated stream's message (`id`) and the model it reports.
    pub response_id: &'a str,
    pub model: &'a str,
    pub first_byte_timeout: Option<Duration>,
    /// `firstTokenTimeoutMilliseconds` (SPEC §11): from the send to the first content event,
    /// before the commit. `None` for a request that is not streamed.
    pub first_token_timeout: Option<Duration>,
    /// `streamIdleTimeoutMilliseconds` (SPEC §11): the longest silence between upstream chunks of
    /// a streamed answer, from its first byte on (before the commit a failed attempt, after it
    /// the caller's stream ends with the explicit error).
    pub stream_idle_timeout: Option<Duration>,
    /// The whole request's deadline (`requestTimeoutMilliseconds`).
    pub deadline: Instant,
    pub stream_commit: StreamCommit,
    pub bounds: Bounds,
    /// The gateway asked the upstream for a usage chunk the caller did not ask for (SPEC §14
    /// "Token limits"): the stream pipe keeps it from the caller.
    pub strip_usage: bool,
    /// The caller asked for usage in the stream (`ParsedRequest::stream_usage == Some(true)`).
    pub caller_usage: bool,
    /// An embeddings caller asked for base64 vectors (a translated answer is written so).
    pub base64_embeddings: bool,
}

/// A classified attempt: what policy needs — the outcome, and a 429/503's retry delay — is read
/// here once; the breaker, triggers, metrics and the routing log read these values.
pub struct Attempt {
    pub outcome: Outcome,
    /// The delay an error answer asked for (`Retry-After`, `retry-after-ms`,
    /// `x-ratelimit-reset-*`), when it gave one.
    pub retry_after: Option<Duration>,
    /// What the provider's error answer (or a stream's error event before the commit) says went
    /// wrong (SPEC §11 "Error classes"), read from the upstream's own dialect.
    pub class: Option<ErrorClass>,
    /// The knob or event behind a failure, for logs (e.g. `firstByteTimeoutMilliseconds`).
    pub detail: Option<String>,
    pub duration: Duration,
    pub first_byte: Option<Duration>,
    pub response: Option<Upstream>,
}

impl Attempt {
    /// An attempt that failed before anything was sent (no time taken, no answer).
    pub fn unsent(kind: sidetrack_resilience::ErrorKind, detail: String) -> Attempt {
        Attempt {
            outcome: Outcome::Error(kind),
            retry_after: None,
            class: None,
            detail: Some(detail),
            duration: Duration::ZERO,
            first_byte: None,
            response: None,
        }
    }
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

/// Runs one attempt up to its commit decision.
/// (A plain fn returning an `async` block rather than an `async fn`: an `async fn` keeps its
/// argument twice in its future, as passed and as the local it moves to. See
/// docs/decisions/0003-hot-path.md, "Small futures".)
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
pub fn run<'a>(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
    spec: AttemptSpec<'a>,
) -> impl Future<Output = Attempt> + 'a {
    // The client's response future (16 bytes) is made here, so the attempt's future holds it and
    // not the request (256 bytes); nothing is sent before the first poll.
    let response = client.request(request);
    async move {
        let started = Instant::now();
        let sent = send(
            response,
            started,
            spec.first_byte_timeout,
            spec.first_token_timeout,
            spec.deadline,
        )
        .await;
        let answered = match sent {
            Ok(a) => a,
            Err((outcome, detail)) => return failed(started, outcome, detail, None),
        };
        let first_byte = Some(answered.first_byte);
        let (outcome, detail, response, class) = match classify(answered, started, &spec).await {
            Ok(c) => c,
            Err((outcome, detail)) => return failed(started, outcome, detail, first_byte),
        };
        Attempt {
            outcome,
            retry_after: retry_after(outcome, response.parts()),
            class,
            detail,
            duration: started.elapsed(),
            first_byte,
            response: Some(response),
        }
    }
}

fn failed(
    started: Instant,
    outcome: Outcome,
    detail: &str,
    first_byte: Option<Duration>,
) -> Attempt {
    Attempt {
        outcome,
        retry_after: None,
        class: None,
        detail: Some(detail.to_owned()),
        duration: started.elapsed(),
        first_byte,
        response: None,
    }
}

/// The retry delay an error answer asked for. Which outcomes may act on it is policy's
/// (`walk::verdict` passes it to the breaker for a counted 429/503 only).
fn retry_after(outcome: Outcome, parts: &Parts) -> Option<Duration> {
    if !matches!(outcome, Outcome::Status(_)) {
        return None;
    }
    let lookup = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    sidetrack_resilience::parse_retry_after(&lookup, std::time::SystemTime::now())
}

/// An answered attempt, classified: its outcome, the knob or event behind a failure, and what
/// goes to the caller if this hop's answer is returned. `Err`: the answer broke off before it
/// could be classified (no response to return).
type Classified =
    Result<(Outcome, Option<String>, Upstream, Option<ErrorClass>), (Outcome, &'static str)>;

/// Phase "classify", by the kind of answer.
async fn classify(answered: Answered, started: Instant, spec: &AttemptSpec<'_>) -> Classified {
    let Answered {
        parts,
        first,
        mut body,
        mut timer,
        ..
    } = answered;
    let status = parts.status.as_u16();
    let translated = spec.upstream != spec.caller;
    if status >= 400 {
        // Read the whole (small) error body: if this hop triggers and is the last one used, the
        // caller gets exactly this response (translated into its dialect when formats differ).
        // An error body over the cap is cut there: only its message matters.
        let body = read_rest(first, &mut body, &mut timer, MAX_ERROR_BODY)
            .await
            .unwrap_or_else(|cut| cut);
        let header_type = parts
            .headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok());
        let class = spec.upstream.error_class(status, header_type, &body);
        let response = if translated {
            translate::error_answer(parts, &body, spec.upstream, spec.caller)
        } else {
            Upstream::Buffered { parts, body }
        };
        return Ok((Outcome::Status(status), None, response, class));
    }
    let stream = is_stream(&parts);
    if translated && !stream {
        // A whole answer in another format: read it, translate it, send it as one body.
        let cap = spec.bounds.max_response_bytes;
        let Ok(raw) = read_rest(first, &mut body, &mut timer, cap).await else {
            let message = format!(
                "sidetrack: the upstream answer exceeds server.maxResponseBytes ({cap} bytes)"
            );
            let response = translate::bad_gateway(parts, spec.caller, &message);
            return Ok((
                Outcome::Status(502),
                Some("responseTooLarge".into()),
                response,
                None,
            ));
        };
        let names = (spec.response_id, spec.model);
        let answer = if spec.caller == Dialect::OpenAiEmbeddings {
            let dest = (spec.upstream, spec.model);
            translate::embeddings_answer(parts, &raw, dest, spec.base64_embeddings)
        } else {
            translate::whole_answer(parts, &raw, spec.upstream, spec.caller, names)
        };
        return Ok(match answer {
            (response, None) => (Outcome::from_status(status), None, response, None),
            (bad, Some(why)) => (Outcome::Status(502), Some(why.into()), bad, None),
        });
    }
    let Some(first) = first else {
        let response = Upstream::Buffered {
            parts,
            body: Bytes::new(),
        };
        return Ok((Outcome::from_status(status), None, response, None));
    };
    if !stream {
        // A plain body: the first byte commits it; the rest streams through as it arrives.
        let response = Upstream::Live {
            parts,
            held: vec![first],
            rest: body,
            pipe: None,
            deadline: timer,
        };
        return Ok((Outcome::from_status(status), None, response, None));
    }
    // Boxed: the stream's hold-and-decide state is a kilobyte, and inline it would size every
    // request's future, streamed or not (docs/decisions/0003-hot-path.md, "Small futures").
    Box::pin(stream_answer(parts, first, body, timer, started, spec)).await
}

/// A streamed answer: through the stream pipe, held until the commit decision.
async fn stream_answer(
    mut parts: Parts,
    first: Bytes,
    body: Incoming,
    timer: Timer,
    started: Instant,
    spec: &AttemptSpec<'_>,
) -> Classified {
    let mut pipe = Box::new(Pipe::new(
        spec.upstream,
        spec.caller,
        spec.response_id,
        spec.model,
        spec.bounds.max_stream_event_bytes,
        spec.strip_usage,
        spec.caller_usage,
    ));
    pipe.set_idle_timeout(spec.stream_idle_timeout);
    if spec.upstream != spec.caller {
        commit::set_stream_content_type(&mut parts, spec.caller);
    }
    match commit::hold(
        parts,
        first,
        body,
        timer,
        pipe,
        spec.stream_commit,
        spec.upstream,
        commit::Timeouts {
            first_token_at: spec.first_token_timeout.map(|t| started + t),
            idle: spec.stream_idle_timeout,
            deadline: spec.deadline,
        },
    )
    .await
    {
        Held::Decided(outcome, detail, response, class) => Ok((outcome, detail, response, class)),
        Held::ProtocolFailure(parts, why, what) => {
            let message = format!("sidetrack: {what}");
            let response = translate::bad_gateway(parts, spec.caller, &message);
            Ok((Outcome::Status(502), Some(why.into()), response, None))
        }
        Held::Failed(outcome, detail) => Err((outcome, detail)),
    }
}
