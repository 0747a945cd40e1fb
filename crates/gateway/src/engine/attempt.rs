//! Phases "attempt" and "classify": one outbound request to one destination, timed, read up to the
//! commit decision, and turned into exactly one [`Outcome`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::response::Parts;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use sidetrack_config::{ProviderKind, StreamCommit};
use sidetrack_dialects::sse::SseDecoder;
use sidetrack_dialects::{StreamEvent, Usage};
use sidetrack_resilience::{ErrorKind, Outcome};
use tokio::time::Instant;

use crate::providers::{self, HttpClient};

/// `firstToken` holds at most this much preamble; crossing it commits (SPEC §5.6).
pub const MAX_HELD_BYTES: usize = 64 * 1024;
/// Error bodies are read whole so the last one can be returned; they are small, but cap them.
const MAX_ERROR_BODY: usize = 1024 * 1024;

pub struct AttemptSpec<'a> {
    pub client: &'a HttpClient,
    pub request: http::Request<Full<Bytes>>,
    pub provider: ProviderKind,
    pub first_byte_timeout: Option<Duration>,
    /// The whole request's deadline (`requestTimeoutMilliseconds`).
    pub deadline: Instant,
    pub stream_commit: StreamCommit,
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
        scan: Option<StreamScan>,
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

/// Watches a provider's SSE stream beside the forwarded bytes: what has been seen so far.
pub struct StreamScan {
    decoder: SseDecoder,
    provider: ProviderKind,
    pub seen_content: bool,
    pub seen_done: bool,
    pub error: Option<(u16, String)>,
    pub usage: Option<Usage>,
}

impl StreamScan {
    fn new(provider: ProviderKind) -> StreamScan {
        StreamScan {
            decoder: SseDecoder::new(),
            provider,
            seen_content: false,
            seen_done: false,
            error: None,
            usage: None,
        }
    }

    /// Feeds bytes; returns true when a content-bearing (or terminal) event has been seen.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.decoder.push(chunk);
        while let Some(ev) = self.decoder.next_event() {
            if let Some(u) = sidetrack_dialects::openai_chat::stream_event_usage(&ev) {
                self.usage = Some(u);
            }
            match providers::classify_stream_event(self.provider, &ev) {
                StreamEvent::Content => self.seen_content = true,
                StreamEvent::Done => self.seen_done = true,
                StreamEvent::Error {
                    status, error_type, ..
                } => {
                    if self.error.is_none() {
                        self.error = Some((status, error_type));
                    }
                }
                StreamEvent::Preamble | StreamEvent::Metadata => {}
            }
        }
    }
}

enum Read {
    Data(Bytes),
    End,
    Failed,
    TimedOut,
}

/// Next data frame (trailers skipped), bounded by `until`.
async fn next_data(body: &mut Incoming, until: Instant) -> Read {
    loop {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => return Read::TimedOut,
            Ok(None) => return Read::End,
            Ok(Some(Err(_))) => return Read::Failed,
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if !data.is_empty() {
                        return Read::Data(data);
                    }
                }
            }
        }
    }
}

fn is_event_stream(parts: &Parts) -> bool {
    parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Runs one attempt up to its commit decision.
pub async fn run(spec: AttemptSpec<'_>) -> Attempt {
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

    let resp = match tokio::time::timeout_at(first_byte_deadline, spec.client.request(spec.request))
        .await
    {
        Err(_) => {
            return failed(
                Outcome::Error(ErrorKind::FirstByteTimeout),
                timeout_detail().into(),
                None,
            )
        }
        Ok(Err(e)) => {
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
        Ok(Ok(r)) => r,
    };
    let (parts, mut body) = resp.into_parts();
    let status = parts.status.as_u16();

    // The first-byte timeout runs until the first body byte, not just the headers.
    let first = match next_data(&mut body, first_byte_deadline).await {
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
    let done = |outcome: Outcome, detail: Option<String>, response: Upstream| Attempt {
        outcome,
        detail,
        duration: started.elapsed(),
        first_byte,
        response: Some(response),
    };

    if status >= 400 {
        // Read the whole (small) error body: if this hop triggers and is the last one used, the
        // caller gets exactly this response.
        let mut held: Vec<Bytes> = first.into_iter().collect();
        let mut size: usize = held.iter().map(Bytes::len).sum();
        while size < MAX_ERROR_BODY {
            match next_data(&mut body, spec.deadline).await {
                Read::Data(d) => {
                    size += d.len();
                    held.push(d);
                }
                _ => break,
            }
        }
        return done(
            Outcome::Status(status),
            None,
            Upstream::Buffered {
                parts,
                body: concat(held),
            },
        );
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
    if !is_event_stream(&parts) {
        // A plain body: the first byte commits it; the rest streams through as it arrives.
        return done(
            Outcome::from_status(status),
            None,
            Upstream::Live {
                parts,
                held: vec![first],
                rest: body,
                scan: None,
            },
        );
    }

    let mut scan = StreamScan::new(spec.provider);
    scan.feed(&first);
    let mut held = vec![first];
    let mut held_len = held[0].len();
    if spec.stream_commit == StreamCommit::FirstByte {
        return done(
            Outcome::from_status(status),
            None,
            Upstream::Live {
                parts,
                held,
                rest: body,
                scan: Some(scan),
            },
        );
    }
    // firstToken: hold the preamble until the first content-bearing event.
    loop {
        if let Some((code, error_type)) = scan.error.clone() {
            let detail = format!("streamErrorEvent:{error_type}");
            return done(
                Outcome::Status(code),
                Some(detail),
                Upstream::Live {
                    parts,
                    held,
                    rest: body,
                    scan: Some(scan),
                },
            );
        }
        if scan.seen_content || scan.seen_done || held_len > MAX_HELD_BYTES {
            return done(
                Outcome::from_status(status),
                None,
                Upstream::Live {
                    parts,
                    held,
                    rest: body,
                    scan: Some(scan),
                },
            );
        }
        match next_data(&mut body, spec.deadline).await {
            Read::Data(d) => {
                scan.feed(&d);
                held_len += d.len();
                held.push(d);
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
