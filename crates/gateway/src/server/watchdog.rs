//! One connection's clock (SPEC §14): when its request head must have arrived, when it has been
//! idle too long, when its peer has stopped reading. hyper 1.x's own `header_read_timeout` starts
//! again as soon as a keep-alive connection goes idle, so it cannot tell "idle" from "slow head";
//! this watchdog keeps the three apart.
//!
//! The connection task races hyper's connection future against [`ConnWatch::expired`], polling
//! the latter only when its own timer fired ([`SideWaker`]). The request path only touches
//! atomics: [`ConnWatch::begin`] when hyper hands a request to the service, the [`InFlight`]
//! guard's drop when the response body is done, and [`Watched`] on each read and each blocked
//! write. Nothing tells the watchdog when a head begins or a write blocks: it looks again within
//! the bound such a change would start ([`ConnWatch::next_check`]), so the bound still ends on
//! time, and no timer is re-armed per request.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// "Not set" for the millisecond stamps below.
const NONE: u64 = u64::MAX;

/// The bounds one connection is held to (read from the config when it is accepted).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// `server.headerReadTimeoutMilliseconds`: from the connection's start (TLS handshake
    /// included), or from the first byte of a later request on a keep-alive HTTP/1 connection,
    /// to the end of the request head.
    pub header: Duration,
    /// `server.idleTimeoutMilliseconds`: no request in flight for this long closes the connection;
    /// so does a peer that has not taken a written byte for this long.
    pub idle: Duration,
}

/// The state the watchdog reads. Times are milliseconds since `started`.
pub struct ConnWatch {
    started: Instant,
    /// Requests handed to the service whose response body is not done yet.
    in_flight: AtomicU32,
    /// When `in_flight` last fell to 0 (the connection's start at first).
    idle_since: AtomicU64,
    /// When the bytes of a request head began to arrive with nothing in flight; `NONE` once the
    /// head is complete.
    head_since: AtomicU64,
    /// Since when a write has been waiting for the peer to read; `NONE` while writes go through.
    write_blocked_since: AtomicU64,
    /// HTTP/2 sends frames (PING, SETTINGS) between requests, so bytes on an idle HTTP/2
    /// connection do not start a head.
    http2: AtomicBool,
    /// Response bodies that gave hyper a frame and have not been polled again since: hyper holds
    /// them while the peer grants no room (an HTTP/2 window it never opens leaves the socket
    /// writable, so no write blocks).
    held: AtomicU32,
    /// Frames the response bodies have given, all told: progress.
    frames: AtomicU64,
    /// The watchdog's own note: since when (ms) bodies have been held with `frames` at
    /// `held_frames`; `NONE` while they move.
    held_since: AtomicU64,
    held_frames: AtomicU64,
}

impl ConnWatch {
    pub fn new() -> ConnWatch {
        ConnWatch {
            started: Instant::now(),
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            // The first head is due from the start.
            head_since: AtomicU64::new(0),
            write_blocked_since: AtomicU64::new(NONE),
            http2: AtomicBool::new(false),
            held: AtomicU32::new(0),
            frames: AtomicU64::new(0),
            held_since: AtomicU64::new(NONE),
            held_frames: AtomicU64::new(0),
        }
    }

    /// Run by the watchdog at each look: bodies held with no frame given since the last look
    /// start (or keep) the held clock; any progress stops it.
    fn note_held(&self, now: u64) {
        let frames = self.frames.load(Relaxed);
        if self.held.load(Relaxed) > 0 && frames == self.held_frames.load(Relaxed) {
            if self.held_since.load(Relaxed) == NONE {
                self.held_since.store(now, Relaxed);
            }
        } else {
            self.held_frames.store(frames, Relaxed);
            self.held_since.store(NONE, Relaxed);
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// A request head arrived and goes to the service; the guard ends it.
    pub fn begin(self: &Arc<Self>, version: http::Version) -> InFlight {
        if version == http::Version::HTTP_2 {
            self.http2.store(true, Relaxed);
        }
        self.in_flight.fetch_add(1, Relaxed);
        self.head_since.store(NONE, Relaxed);
        InFlight(self.clone())
    }

    fn read_some(&self) {
        if self.in_flight.load(Relaxed) == 0
            && self.head_since.load(Relaxed) == NONE
            && !self.http2.load(Relaxed)
        {
            self.head_since.store(self.now_ms(), Relaxed);
        }
    }

    fn write_blocked(&self) {
        if self.write_blocked_since.load(Relaxed) == NONE {
            self.write_blocked_since.store(self.now_ms(), Relaxed);
        }
    }

    fn wrote(&self) {
        if self.write_blocked_since.load(Relaxed) != NONE {
            self.write_blocked_since.store(NONE, Relaxed);
        }
    }

    /// The nearest deadline in force, in ms since `started`.
    fn deadline(&self, t: Timeouts) -> Option<u64> {
        let (header, idle) = (millis(t.header), millis(t.idle));
        let blocked = self.write_blocked_since.load(Relaxed);
        let held = self.held_since.load(Relaxed);
        // The peer has taken nothing for `idle`: a write waits, or hyper holds a body's frame.
        let stalled = [blocked, held]
            .into_iter()
            .filter(|&s| s != NONE)
            .min()
            .map(|s| s.saturating_add(idle));
        if self.in_flight.load(Relaxed) > 0 {
            // A request in flight has its own bounds (body read, request deadline); only a peer
            // that stopped reading ends it here.
            return stalled;
        }
        let head = self.head_since.load(Relaxed);
        let mut due = self.idle_since.load(Relaxed).saturating_add(idle);
        if head != NONE {
            due = due.min(head.saturating_add(header));
        }
        Some(stalled.map_or(due, |s| s.min(due)))
    }

    /// When to look again (ms since `started`), or `None` when a bound has run out. A head or a
    /// blocked write may begin unannounced before the known deadline; looking again within the
    /// bound it would start (`header` when idle, `idle` when busy) still ends that bound on time.
    fn next_check(&self, t: Timeouts, now: u64) -> Option<u64> {
        let due = self.deadline(t);
        if due.is_some_and(|d| d <= now) {
            return None;
        }
        let within = if self.in_flight.load(Relaxed) > 0 {
            // Held bodies are noted only when the watchdog looks: look twice per bound.
            t.idle / 2
        } else {
            t.header.min(t.idle)
        };
        let soon = now.saturating_add(millis(within));
        Some(due.map_or(soon, |d| d.min(soon)))
    }

    /// Resolves when the connection has outlived a bound: its head is late, it has been idle too
    /// long, or its peer stopped reading. Dropping the connection then closes it.
    pub async fn expired(&self, t: Timeouts) {
        let sleep = tokio::time::sleep_until(self.started);
        let mut sleep = std::pin::pin!(sleep);
        loop {
            let now = self.now_ms();
            self.note_held(now);
            let Some(at) = self.next_check(t, now) else {
                return;
            };
            sleep
                .as_mut()
                .reset(self.started + Duration::from_millis(at));
            sleep.as_mut().await;
        }
    }
}

/// The waker of a connection's side futures (the watchdog, the stop signal): records that one of
/// them was woken and wakes the connection task, which then polls them. Polled on every wake of
/// a busy connection instead, they cost ~1,800 instructions per request (bench/instructions).
pub struct SideWaker {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl SideWaker {
    /// Woken at first, so the side futures are polled (and register) once.
    pub fn new() -> Arc<SideWaker> {
        Arc::new(SideWaker {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        })
    }

    /// Called on each poll of the connection task: keeps its waker, and says whether a side
    /// future was woken since the last call.
    pub fn take(&self, task: &std::task::Waker) -> bool {
        self.task.register(task);
        self.woken.swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

impl Wake for SideWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        self.task.wake();
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(NONE - 1)
}

/// One request in flight on a connection, from the service call until its response body is done
/// (or dropped).
pub struct InFlight(Arc<ConnWatch>);

impl InFlight {
    /// The response, its body carrying this guard.
    pub fn track(self, resp: Response) -> Response<Tracked> {
        resp.map(|body| Tracked {
            body,
            guard: self,
            gave: false,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let w = &self.0;
        if w.in_flight.fetch_sub(1, Relaxed) == 1 {
            w.idle_since.store(w.now_ms(), Relaxed);
        }
    }
}

/// A response body that ends its request's [`InFlight`] when hyper is done with it, and tells
/// the watchdog when hyper holds a frame it gave without asking for the next ([`ConnWatch::held`]).
pub struct Tracked {
    body: Body,
    guard: InFlight,
    /// Gave a frame and has not been polled since.
    gave: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if self.gave {
            self.guard.0.held.fetch_sub(1, Relaxed);
        }
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let watch = &this.guard.0;
        if std::mem::take(&mut this.gave) {
            watch.held.fetch_sub(1, Relaxed);
        }
        let r = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &r {
            this.gave = true;
            watch.held.fetch_add(1, Relaxed);
            watch.frames.fetch_add(1, Relaxed);
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket (after TLS), telling its [`ConnWatch`] when bytes arrive and when
/// writes block.
pub struct Watched<S> {
    io: S,
    watch: Arc<ConnWatch>,
}

impl<S> Watched<S> {
    pub fn new(io: S, watch: Arc<ConnWatch>) -> Watched<S> {
        Watched { io, watch }
    }

    fn wrote<T>(&self, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &r {
            Poll::Pending => self.watch.write_blocked(),
            Poll::Ready(_) => self.watch.wrote(),
        }
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.watch.read_some();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.wrote(r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header: Duration::from_millis(100),
        idle: Duration::from_millis(1000),
    };

    #[test]
    fn a_new_connection_owes_its_head_within_the_header_timeout() {
        let w = ConnWatch::new();
        assert_eq!(w.deadline(T), Some(100));
    }

    #[test]
    fn a_request_in_flight_has_no_deadline_until_its_body_is_done() {
        let w = Arc::new(ConnWatch::new());
        let guard = w.begin(http::Version::HTTP_11);
        assert_eq!(w.deadline(T), None);
        let second = w.begin(http::Version::HTTP_11);
        drop(guard);
        assert_eq!(w.deadline(T), None, "one request still in flight");
        drop(second);
        let idle = w.idle_since.load(Relaxed);
        assert_eq!(w.deadline(T), Some(idle + 1000), "idle, no head yet");
    }

    #[test]
    fn bytes_on_an_idle_http1_connection_start_a_head_but_not_on_http2() {
        let w = Arc::new(ConnWatch::new());
        drop(w.begin(http::Version::HTTP_11));
        w.read_some();
        let head = w.head_since.load(Relaxed);
        assert_ne!(head, NONE);
        assert_eq!(w.deadline(T), Some(head + 100));

        let h2 = Arc::new(ConnWatch::new());
        drop(h2.begin(http::Version::HTTP_2));
        h2.read_some();
        assert_eq!(h2.head_since.load(Relaxed), NONE, "a PING is not a head");
    }

    #[test]
    fn a_body_held_with_no_progress_is_a_stall_and_progress_resets_it() {
        let w = Arc::new(ConnWatch::new());
        let guard = w.begin(http::Version::HTTP_2);
        assert_eq!(w.deadline(T), None, "in flight, nothing held");
        w.held.store(1, Relaxed);
        w.frames.store(5, Relaxed);
        w.note_held(10); // frames moved since the last look (0 → 5): not held yet
        assert_eq!(w.deadline(T), None);
        w.note_held(20); // no frame since: held from now
        assert_eq!(w.deadline(T), Some(20 + 1000));
        w.note_held(500); // still held: the clock keeps its start
        assert_eq!(w.deadline(T), Some(20 + 1000));
        w.frames.store(6, Relaxed);
        w.note_held(600); // a frame went out: moving again
        assert_eq!(w.deadline(T), None);
        w.held.store(0, Relaxed);
        drop(guard);
    }

    #[test]
    fn the_watchdog_looks_again_within_the_bound_an_unannounced_change_would_start() {
        let w = Arc::new(ConnWatch::new());
        assert_eq!(w.next_check(T, 0), Some(100), "the first head's deadline");
        assert_eq!(w.next_check(T, 100), None, "late");
        let guard = w.begin(http::Version::HTTP_11);
        assert_eq!(
            w.next_check(T, 50),
            Some(550),
            "busy: a stall may begin, and held bodies are noted only when it looks: twice per bound"
        );
        drop(guard);
        let idle = w.idle_since.load(Relaxed);
        // Idle with no head yet: a head may begin any time, so look again within `header`.
        assert_eq!(w.next_check(T, idle), Some(idle + 100));
        assert_eq!(w.next_check(T, idle + 950), Some(idle + 1000));
        assert_eq!(w.next_check(T, idle + 1000), None, "idle too long");
    }

    #[test]
    fn a_blocked_write_bounds_even_a_request_in_flight() {
        let w = Arc::new(ConnWatch::new());
        let _guard = w.begin(http::Version::HTTP_11);
        w.write_blocked();
        let since = w.write_blocked_since.load(Relaxed);
        assert_eq!(w.deadline(T), Some(since + 1000));
        w.wrote();
        assert_eq!(w.deadline(T), None);
    }
}
