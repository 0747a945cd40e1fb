//! After the commit point: forward the upstream body as it arrives (through the stream pipe, which
//! translates when formats differ), end a failed stream with an explicit error in the caller's
//! dialect, and finish the request (routing log) when the body ends or the caller goes away.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use sidetrack_dialects::{Dialect, Usage};
use smallvec::SmallVec;
use tokio::time::{Instant, Sleep};

use super::pipe::Pipe;

/// Called once when the relayed body ends (or is dropped).
pub trait OnFinish: Send + Unpin + 'static {
    fn finish(self, end: RelayEnd);
    /// Sees each chunk the caller is sent, in order (the response store collects an answer here).
    fn observe(&mut self, _chunk: &Bytes) {}
}

/// How the relayed body ended.
#[derive(Debug, Clone, Default)]
pub struct RelayEnd {
    pub mid_stream_error: bool,
    /// Why, when `mid_stream_error` (never includes content).
    pub detail: Option<&'static str>,
    pub usage: Option<Usage>,
    pub caller_gone: bool,
}

impl RelayEnd {
    /// The upstream sent an error event in the stream (the first reason given is kept).
    fn upstream_error_event(&mut self) {
        self.mid_stream_error = true;
        self.detail.get_or_insert("upstreamErrorEvent");
    }
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which limit the relay's timer stood for when it fired.
enum Expired {
    /// `requestTimeoutMilliseconds`.
    Deadline,
    /// `streamIdleTimeoutMilliseconds`.
    Idle,
}

/// While the upstream keeps frames coming, the request deadline is checked on every this many
/// polls (reading the clock on every frame cost more than relaying the frame).
const DEADLINE_CHECK_EVERY: u32 = 16;

/// Non-stream bodies are kept (by reference) up to this size so usage can be read at the end.
const MAX_CAPTURE: usize = 1024 * 1024;

/// `F` is what runs when the body ends (the server's routing-log step); generic rather than boxed so
/// the body and its finish step are one allocation.
pub struct RelayBody<F: OnFinish> {
    held: VecDeque<Bytes>,
    rest: Option<Incoming>,
    /// Streams go through a pipe; plain bodies pass as they are.
    pipe: Option<Box<Pipe>>,
    /// A chunk a pass-through pipe forwarded before reading it. The caller never waits for the
    /// pipe: what was forwarded is read once the upstream has nothing more for the moment and the
    /// bytes have been handed to the connection (see `behind`), or before the next chunk.
    unwatched: Option<Bytes>,
    /// The caller was sent bytes the pipe has not read yet (`unwatched`, or events the commit
    /// decision did not need to read).
    behind: bool,
    /// Returned `Pending` once so the connection flushes before the pipe catches up.
    yielded: bool,
    /// The caller's dialect (usage is read from a plain body in it).
    caller: Dialect,
    /// The attempt's one timer: at the request deadline, or sooner at the end of the silence a
    /// stream idle timeout allows (re-armed only when it fires early, not per chunk).
    deadline: Pin<Box<Sleep>>,
    /// The request deadline (`requestTimeoutMilliseconds`).
    request_deadline: Instant,
    /// `streamIdleTimeoutMilliseconds` (SPEC §11), for a stream whose hop sets it.
    idle: Option<Duration>,
    /// When the upstream last had a chunk for us: read once the upstream has nothing more for the
    /// moment (`fresh` says a chunk came since), never per chunk. Only with `idle`.
    last_chunk: Instant,
    fresh: bool,
    /// Polls so far, for checking the deadline every [`DEADLINE_CHECK_EVERY`].
    frames: u32,
    /// The waker the deadline's timer was last polled with.
    timer_waker: Option<std::task::Waker>,
    trailer: Option<Bytes>,
    /// A plain body's chunks (shared, not copied) and their total length; usually one chunk.
    capture: Option<(SmallVec<[Bytes; 2]>, usize)>,
    end: RelayEnd,
    on_finish: Option<F>,
}

impl<F: OnFinish> RelayBody<F> {
    pub fn new(
        held: Vec<Bytes>,
        rest: Incoming,
        pipe: Option<Box<Pipe>>,
        caller: Dialect,
        mut deadline: super::attempt::Timer,
        on_finish: F,
    ) -> RelayBody<F> {
        let request_deadline = deadline.deadline();
        let idle = pipe.as_ref().and_then(|p| p.idle_timeout());
        let last_chunk = match idle {
            Some(d) => {
                let now = Instant::now();
                if now + d < request_deadline {
                    deadline.as_mut().reset(now + d);
                }
                now
            }
            None => request_deadline,
        };
        let mut end = RelayEnd::default();
        let capture = match &pipe {
            None => Some((
                held.iter().cloned().collect(),
                held.iter().map(Bytes::len).sum(),
            )),
            Some(p) => {
                // An error event may already be among the held bytes (firstByte commit).
                if p.state().error.is_some() {
                    end.upstream_error_event();
                }
                None
            }
        };
        RelayBody {
            held: held.into(),
            rest: Some(rest),
            behind: pipe.as_ref().is_some_and(|p| p.passes_through()),
            pipe,
            unwatched: None,
            yielded: false,
            caller,
            deadline,
            request_deadline,
            idle,
            last_chunk,
            fresh: false,
            frames: 0,
            timer_waker: None,
            trailer: None,
            capture,
            end,
            on_finish: Some(on_finish),
        }
    }

    /// Lets the pipe read everything already forwarded (and anything it left for later); notes an
    /// upstream error event found there.
    fn catch_up(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let had_error = pipe.state().error.is_some();
        if let Some(chunk) = self.unwatched.take() {
            pipe.watch(&chunk);
        }
        pipe.catch_up();
        self.behind = false;
        self.read_state(had_error);
    }

    /// What the pipe learned from the bytes it just read: a protocol failure (an event over its
    /// bound, undecodable framing) stops reading the upstream and queues the explicit error; an
    /// upstream error event is noted.
    fn read_state(&mut self, had_error: bool) {
        let Some(pipe) = self.pipe.as_ref() else {
            return;
        };
        if let Some(why) = pipe.state().protocol_failure {
            if self.rest.is_some() {
                self.fail(
                    why,
                    "sidetrack: the upstream stream broke a bound or its framing",
                );
            }
        } else if !had_error && pipe.state().error.is_some() {
            self.end.upstream_error_event();
        }
    }

    /// Has the request deadline passed? While frames flow the clock is read every few polls; a
    /// body that waits for the upstream (`waiting`) polls the deadline's timer, which registers it
    /// to wake the body.
    fn past_deadline(&mut self, cx: &mut Context<'_>, waiting: bool) -> bool {
        if waiting {
            // The timer keeps the waker it was last polled with: poll it again only for a new
            // one (the connection's waker seldom changes), else just read whether it fired.
            if self
                .timer_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                return self.deadline.is_elapsed();
            }
            self.timer_waker = Some(cx.waker().clone());
            return self.deadline.as_mut().poll(cx).is_ready();
        }
        self.frames = self.frames.wrapping_add(1);
        self.frames.is_multiple_of(DEADLINE_CHECK_EVERY) && Instant::now() >= self.request_deadline
    }

    /// The timer fired: which limit passed? When the stream had chunks since the timer was armed
    /// (the silence is shorter than it looked), the timer is re-armed for the end of the current
    /// silence and nothing has passed.
    fn expired(&mut self) -> Option<Expired> {
        let now = Instant::now();
        let Some(idle) = self.idle.filter(|_| now < self.request_deadline) else {
            return Some(Expired::Deadline);
        };
        let silence_ends = self.last_chunk + idle;
        if now >= silence_ends {
            return Some(Expired::Idle);
        }
        self.deadline
            .as_mut()
            .reset(silence_ends.min(self.request_deadline));
        // Polled again on the next wait, so it wakes the body at its new time.
        self.timer_waker = None;
        None
    }

    /// The upstream was silent longer than `streamIdleTimeoutMilliseconds` after the commit: the
    /// caller's stream ends with the explicit error, a failure counted against the destination.
    fn idle_out(&mut self) {
        self.fail(
            "streamIdleTimeoutMilliseconds",
            "sidetrack: the upstream stream was idle longer than streamIdleTimeoutMilliseconds",
        );
    }

    /// `server.requestTimeoutMilliseconds` passed mid-body: a stream gets its error event (queued);
    /// a plain body can only be cut, with the error returned here.
    fn timed_out(&mut self) -> Option<BoxError> {
        self.fail(
            "requestTimeoutMilliseconds",
            "sidetrack: request timeout exceeded mid-stream",
        );
        if self.pipe.is_some() {
            return None;
        }
        self.finish();
        Some("request timeout exceeded mid-body".into())
    }

    /// The upstream stopped early: for a stream, queue the explicit error event.
    fn fail(&mut self, detail: &'static str, message: &str) {
        // The upstream goes first: catching up must not fail the stream a second time.
        self.rest = None;
        self.catch_up();
        self.end.mid_stream_error = true;
        self.end.detail.get_or_insert(detail);
        if let Some(p) = self.pipe.as_mut() {
            // Half an event the caller never got: dropped, so the error stands on its own.
            drop(p.take_carry());
            self.trailer = p.error_tail(message);
        }
    }

    /// One upstream chunk on its way to the caller: through the pipe (a stream) or as it is (a
    /// plain body, whose first bytes are kept to read usage from). `None`: nothing to send yet.
    fn forward(&mut self, data: Bytes) -> Option<Bytes> {
        let Some(pipe) = self.pipe.as_mut() else {
            if let Some((chunks, len)) = self.capture.as_mut() {
                *len += data.len();
                if *len <= MAX_CAPTURE {
                    chunks.push(data.clone());
                } else {
                    self.capture = None;
                }
            }
            return Some(data);
        };
        let had_error = pipe.state().error.is_some();
        let out = if pipe.passes_through() {
            // Forward now; the pipe reads it later (the previous chunk, if still unread, is read
            // first to keep the order).
            if let Some(previous) = self.unwatched.replace(data.clone()) {
                pipe.watch(&previous);
            }
            self.behind = true;
            pipe.outgoing(data)
        } else {
            pipe.feed(data)
        };
        self.read_state(had_error);
        (!out.is_empty()).then_some(out)
    }

    /// The upstream connection broke mid-body: a stream gets its error event (queued); a plain
    /// body can only be cut, with the error returned here.
    fn upstream_lost(&mut self) -> Option<BoxError> {
        self.fail(
            "upstreamConnectionLost",
            "sidetrack: upstream connection lost mid-stream",
        );
        if self.pipe.is_some() {
            return None;
        }
        self.finish();
        Some("upstream connection lost mid-body".into())
    }

    /// The upstream body ended: the pipe's last bytes are queued; a stream that ended without its
    /// explicit end (or an error event) gets the explicit error instead of `[DONE]`.
    fn upstream_ended(&mut self) {
        self.catch_up();
        if let Some(p) = self.pipe.as_mut() {
            let tail = p.end();
            if !tail.is_empty() {
                self.held.push_back(tail);
            }
        }
        let ended_cleanly = self
            .pipe
            .as_ref()
            .is_none_or(|p| p.state().seen_done || p.state().error.is_some());
        if ended_cleanly {
            self.rest = None;
            if let Some(p) = self.pipe.as_mut() {
                self.held.extend(p.take_carry());
            }
        } else {
            self.fail(
                "streamEndedWithoutDone",
                "sidetrack: upstream ended the stream early",
            );
        }
    }

    fn finish(&mut self) {
        self.catch_up();
        if let Some(f) = self.on_finish.take() {
            let mut end = std::mem::take(&mut self.end);
            end.usage = match (&self.pipe, self.capture.take()) {
                (Some(p), _) => p.state().usage,
                (None, Some((chunks, _))) => match chunks.as_slice() {
                    // Most JSON answers arrive in one frame: read it in place, no copy.
                    [one] => self.caller.response_usage(one),
                    many => self.caller.response_usage(&many.concat()),
                },
                _ => None,
            };
            f.finish(end);
        }
    }
}

impl<F: OnFinish> RelayBody<F> {
    /// A chunk for the caller, shown to the finish step first.
    #[allow(clippy::type_complexity, reason = "the `poll_frame` return type")]
    fn send(&mut self, b: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(f) = self.on_finish.as_mut() {
            f.observe(&b);
        }
        // The last frame: the server will not poll again (`is_end_stream`), so the body's end is
        // settled now — before whatever wraps this body sees its end (an Idempotency-Key lead
        // must know whether the stream failed).
        if self.is_end_stream() {
            self.finish();
        }
        Poll::Ready(Some(Ok(Frame::data(b))))
    }
}

impl<F: OnFinish> Drop for RelayBody<F> {
    fn drop(&mut self) {
        if self.on_finish.is_some() {
            // A body of known length is dropped by the server once its last byte is written,
            // without a last poll: the upstream's body having ended is not the caller leaving.
            let rest_unread = self.rest.as_ref().is_some_and(|r| !r.is_end_stream());
            if rest_unread || !self.held.is_empty() || self.trailer.is_some() {
                self.end.caller_gone = true;
            }
            self.finish();
        }
    }
}

impl<F: OnFinish> Body for RelayBody<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if std::mem::take(&mut this.yielded) {
            this.catch_up();
        }
        loop {
            if let Some(b) = this.held.pop_front().or_else(|| this.trailer.take()) {
                return this.send(b);
            }
            if this.rest.is_none() {
                this.finish();
                return Poll::Ready(None);
            }
            if this.past_deadline(cx, false) {
                if let Some(end) = this.timed_out() {
                    return Poll::Ready(Some(Err(end)));
                }
                continue;
            }
            let Some(rest) = this.rest.as_mut() else {
                continue;
            };
            match Pin::new(rest).poll_frame(cx) {
                Poll::Pending => {
                    if this.idle.is_some() && std::mem::take(&mut this.fresh) {
                        this.last_chunk = Instant::now();
                    }
                    if this.past_deadline(cx, true) {
                        match this.expired() {
                            Some(Expired::Deadline) => {
                                if let Some(end) = this.timed_out() {
                                    return Poll::Ready(Some(Err(end)));
                                }
                            }
                            Some(Expired::Idle) => this.idle_out(),
                            None => {}
                        }
                        continue;
                    }
                    if this.behind {
                        // Let the connection send what it has first; catch up on the next poll.
                        this.yielded = true;
                        cx.waker().wake_by_ref();
                    }
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => {
                    this.fresh = true;
                    if let Some(out) = frame.into_data().ok().and_then(|d| this.forward(d)) {
                        return this.send(out);
                    }
                }
                Poll::Ready(Some(Err(_))) => {
                    if let Some(end) = this.upstream_lost() {
                        return Poll::Ready(Some(Err(end)));
                    }
                }
                Poll::Ready(None) => this.upstream_ended(),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.held.is_empty() && self.trailer.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self.held.iter().map(|b| b.len() as u64).sum();
        match (&self.rest, &self.pipe) {
            (None, _) if self.trailer.is_none() => SizeHint::with_exact(held),
            (Some(rest), None) => match rest.size_hint().exact() {
                Some(n) => SizeHint::with_exact(held + n),
                None => SizeHint::default(),
            },
            _ => SizeHint::default(),
        }
    }
}
