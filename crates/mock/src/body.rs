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
use hyper::body::Frame;

use crate::engine::{Ending, Success};

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
    /// The in-stream error event of `error_type` (`streamErrorType`; `None`: the dialect's usual
    /// type), which ends the stream.
    fn error(&mut self, error_type: Option<&str>) -> Vec<Bytes>;
}

/// The steps of a streamed success: preamble, content chunks separated by `chunk_interval`, then the
/// finish events — or, per [`Ending`], an abort or an error event in place of chunk N+1.
pub fn stream_steps(encoder: &mut impl StreamEncoder, success: &Success) -> Vec<Step> {
    let frames = |events: Vec<Bytes>| events.into_iter().map(Step::Frame);
    let cut_after = match success.ending {
        Ending::Complete => None,
        Ending::DropAfter(n) | Ending::ErrorAfter { chunks: n, .. } => Some(n),
    };
    let pause = (!success.chunk_interval.is_zero()).then_some(Step::Pause(success.chunk_interval));

    let mut steps: Vec<Step> = frames(encoder.preamble()).collect();
    for (i, chunk) in success.chunks.iter().enumerate() {
        if cut_after == Some(i) {
            break;
        }
        if i > 0 {
            steps.extend(pause.clone());
        }
        steps.extend(frames(encoder.content(chunk)));
    }
    let sent = cut_after.map_or(success.chunks.len(), |n| n.min(success.chunks.len()));
    if sent > 0 && cut_after.is_some() {
        steps.extend(pause);
    }
    match &success.ending {
        Ending::Complete => steps.extend(frames(encoder.finish())),
        Ending::DropAfter(_) => steps.push(Step::Abort),
        Ending::ErrorAfter { error_type, .. } => {
            steps.extend(frames(encoder.error(error_type.as_deref())));
        }
    }
    steps
}
