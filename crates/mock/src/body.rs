//! Response bodies: a whole body, or a scripted sequence of frames, pauses and a mid-body abort.
//!
//! Stream timing lives here once ([`stream_steps`]); dialects only say what bytes each event is
//! ([`StreamEncoder`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body as _, Frame};

use crate::config::Hostile;
use crate::engine::{Ending, StreamError, Success};

/// Error a body yields to make hyper abort the connection (no terminating chunk).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every mock response.
pub type MockBody = UnsyncBoxBody<Bytes, BodyError>;

/// One step of a scripted body.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// One HTTP body frame (one SSE event, one event-stream message, ...).
    Frame(Bytes),
    /// Wait before the next step.
    Pause(Duration),
    /// Yield a body error: hyper kills the connection mid-body.
    Abort,
    /// `unit` again and again, `left` bytes in all (a hostile provider's endless or huge part).
    Repeat { unit: Bytes, left: u64 },
}

/// The most an "endless" hostile body sends before it ends by itself (4 GiB): a test's gateway
/// must have cut it long before.
pub const ENDLESS_CAP: u64 = 4 << 30;

/// A frame of `n` bytes of `b`.
fn filled(b: u8, n: usize) -> Bytes {
    Bytes::from(vec![b; n])
}

/// The steps of a hostile stream's hostile part (after the preamble and the normal chunks).
pub fn hostile_steps(kind: Hostile, bytes: u64) -> Vec<Step> {
    let a64k = filled(b'a', 64 * 1024);
    match kind {
        Hostile::EndlessLine => vec![
            Step::Frame(Bytes::from_static(b"data: ")),
            Step::Repeat {
                unit: a64k,
                left: ENDLESS_CAP,
            },
        ],
        Hostile::EndlessComment => vec![
            Step::Frame(Bytes::from_static(b": ")),
            Step::Repeat {
                unit: a64k,
                left: ENDLESS_CAP,
            },
        ],
        Hostile::EndlessEvent => {
            let mut line = b"data: ".to_vec();
            line.extend(std::iter::repeat_n(b'a', 64 * 1024 - 7));
            line.push(b'\n');
            vec![Step::Repeat {
                unit: Bytes::from(line),
                left: ENDLESS_CAP,
            }]
        }
        Hostile::HugeEvent => vec![
            Step::Frame(Bytes::from_static(b"data: {\"huge\":\"")),
            Step::Repeat {
                unit: a64k,
                left: bytes,
            },
            Step::Frame(Bytes::from_static(b"\"}\n\n")),
        ],
        Hostile::Garbage => {
            let mut line: Vec<u8> = (0u8..=255)
                .filter(|b| !matches!(b, b'\n' | b'\r' | b':'))
                .collect();
            line.push(b'\n');
            vec![Step::Repeat {
                unit: Bytes::from(line),
                left: bytes,
            }]
        }
        Hostile::EndlessBody => vec![
            Step::Frame(Bytes::from_static(b"{\"id\":\"")),
            Step::Repeat {
                unit: a64k,
                left: ENDLESS_CAP,
            },
        ],
        // No body at all: the handler never answers.
        Hostile::NoHeaders => Vec::new(),
    }
}

/// Drop guard of one answer: counts the request as cancelled unless [`watched`] saw its body end
/// (or the handler finished otherwise and called [`CancelGuard::disarm`]).
pub(crate) struct CancelGuard {
    on_cancel: Option<Box<dyn FnOnce() + Send>>,
}

impl CancelGuard {
    pub(crate) fn new(on_cancel: impl FnOnce() + Send + 'static) -> Self {
        Self {
            on_cancel: Some(Box::new(on_cancel)),
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.on_cancel = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(f) = self.on_cancel.take() {
            f();
        }
    }
}

/// `inner`, disarming `guard` once the body has ended (its last frame taken, or a deliberate
/// abort). Dropped earlier — the client went away — the guard fires.
pub(crate) fn watched(inner: MockBody, mut guard: CancelGuard) -> MockBody {
    if inner.is_end_stream() {
        guard.disarm();
    }
    Watched { inner, guard }.boxed_unsync()
}

struct Watched {
    inner: MockBody,
    guard: CancelGuard,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        let ended = match &polled {
            std::task::Poll::Ready(None | Some(Err(_))) => true,
            std::task::Poll::Ready(Some(Ok(_))) => this.inner.is_end_stream(),
            std::task::Poll::Pending => false,
        };
        if ended {
            this.guard.disarm();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// A whole body known up front.
pub fn full(bytes: impl Into<Bytes>) -> MockBody {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

/// A body that plays `steps` in order, producing each frame only when the previous pauses are over,
/// so the client sees every event as soon as it is scripted.
pub fn scripted(steps: Vec<Step>) -> MockBody {
    let steps: VecDeque<Step> = steps.into();
    let stream = futures_util::stream::unfold(steps, |mut steps| async move {
        loop {
            match steps.pop_front()? {
                Step::Frame(bytes) => return Some((Ok(Frame::data(bytes)), steps)),
                Step::Pause(d) => tokio::time::sleep(d).await,
                Step::Repeat { unit, left } => {
                    if left == 0 || unit.is_empty() {
                        continue;
                    }
                    let n = unit.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let rest = left - n as u64;
                    steps.push_front(Step::Repeat {
                        unit: unit.clone(),
                        left: rest,
                    });
                    return Some((Ok(Frame::data(unit.slice(..n))), steps));
                }
                Step::Abort => {
                    // hyper flushes what it buffered only when the body is pending; without this
                    // the abort would also discard the headers and the chunks before it.
                    tokio::task::yield_now().await;
                    let err: BodyError = "mock: dropAfterChunks: connection killed mid-body".into();
                    return Some((Err(err), VecDeque::new()));
                }
            }
        }
    });
    StreamBody::new(stream).boxed_unsync()
}

/// A whole (non-streamed) answer as its scripted ending asks: cut in half by `dropAfterChunks`,
/// else all of it. Every dialect's success renderer uses this.
pub fn whole_answer(bytes: Bytes, ending: &crate::engine::Ending) -> MockBody {
    match ending {
        crate::engine::Ending::DropAfter(_) => truncated(bytes),
        _ => full(bytes),
    }
}

/// Part of a non-streaming body, then a dead connection (`dropAfterChunks` on a non-stream request).
pub fn truncated(whole: Bytes) -> MockBody {
    let half = whole.slice(..whole.len() / 2);
    scripted(vec![Step::Frame(half), Step::Abort])
}

/// The events of one dialect's stream. Each returned `Bytes` becomes one body frame.
pub trait StreamEncoder {
    /// Events before any content (OpenAI chat: the role-only chunk).
    fn preamble(&mut self) -> Vec<Bytes>;
    /// Events carrying one content chunk.
    fn content(&mut self, text: &str) -> Vec<Bytes>;
    /// Events after the last content chunk, including the terminator (OpenAI chat: `[DONE]`).
    fn finish(&mut self) -> Vec<Bytes>;
    /// The in-stream error event (`streamErrorType` / `error`; unset fields: the dialect's usual
    /// values), which ends the stream.
    fn error(&mut self, error: &StreamError) -> Vec<Bytes>;
}

/// The steps of a streamed success: preamble, `first_content_delay`, content chunks separated by
/// `chunk_interval` (plus the `idle_gap` silence after its chunk count), then the finish events —
/// or, per [`Ending`], an abort or an error event in place of chunk N+1.
pub fn stream_steps(encoder: &mut impl StreamEncoder, success: &Success) -> Vec<Step> {
    let frames = |events: Vec<Bytes>| events.into_iter().map(Step::Frame);
    let cut_after = match (success.hostile, &success.ending) {
        (Some((_, n, _)), _) => Some(n),
        (None, Ending::Complete) => None,
        (None, Ending::DropAfter(n) | Ending::ErrorAfter { chunks: n, .. }) => Some(*n),
    };
    let pause = (!success.chunk_interval.is_zero()).then_some(Step::Pause(success.chunk_interval));

    let mut steps: Vec<Step> = frames(encoder.preamble()).collect();
    if !success.first_content_delay.is_zero() {
        steps.push(Step::Pause(success.first_content_delay));
    }
    let idle = |sent: usize| {
        success
            .idle_gap
            .filter(|(after, gap)| *after == sent && !gap.is_zero())
            .map(|(_, gap)| Step::Pause(gap))
    };
    steps.extend(idle(0));
    for (i, chunk) in success.chunks.iter().enumerate() {
        if cut_after == Some(i) {
            break;
        }
        if i > 0 {
            steps.extend(pause.clone());
        }
        steps.extend(frames(encoder.content(chunk)));
        steps.extend(idle(i + 1));
    }
    let sent = cut_after.map_or(success.chunks.len(), |n| n.min(success.chunks.len()));
    if sent > 0 && cut_after.is_some() {
        steps.extend(pause);
    }
    if let Some((kind, _, bytes)) = success.hostile {
        steps.extend(hostile_steps(kind, bytes));
        // A huge event is still a complete event: the stream goes on and ends normally after it.
        if kind == Hostile::HugeEvent {
            steps.extend(frames(encoder.finish()));
        }
        return steps;
    }
    match &success.ending {
        Ending::Complete => steps.extend(frames(encoder.finish())),
        Ending::DropAfter(_) => steps.push(Step::Abort),
        Ending::ErrorAfter { error, .. } => steps.extend(frames(encoder.error(error))),
    }
    steps
}
