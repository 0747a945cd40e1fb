//! `Idempotency-Key` (SPEC §12): one answer per key and principal.
//!
//! A key's slot is either in flight — the first request (the *lead*) is running and records the
//! answer it sends to its caller — or done, holding that answer until `idempotency.ttlMilliseconds`
//! pass. A duplicate that finds the slot in flight *joins* it: it gets the lead's status and
//! headers once they are known and the body from its first byte, following the lead live (a
//! streamed duplicate gets the whole stream). A duplicate that finds it done gets the stored
//! answer. A different body under the same key is refused (422). An answer that is not a success,
//! is cut, or outgrows `idempotency.maxAnswerBytes` is not kept: the slot is freed, so the next
//! duplicate really runs again (joined duplicates still get what the lead sent, or a cut body
//! when the answer outgrew the bound). A lead that stops before it has an answer to send (its
//! caller left, a rate limit) frees the slot, and one of its waiting duplicates leads instead.
//!
//! Bounds: `idempotency.maxEntries` keys and `idempotency.maxBytes` of stored answers per process,
//! least recently used evicted first; a recording in flight holds at most `maxAnswerBytes`.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::{Frame, SizeHint};
use sha2::{Digest, Sha256};
use sidetrack_config::Idempotency as Limits;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::state::redis::RedisState;

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set on every answer that was not produced for the request itself.
pub static REPLAY_HEADER: http::HeaderName =
    http::HeaderName::from_static("x-sidetrack-idempotent-replay");
/// The longest key accepted (SPEC §12).
pub const MAX_KEY_CHARS: usize = 255;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the request does next.
pub enum Begin {
    /// The key is not acceptable (empty, not visible ASCII, or over 255 characters): 400.
    BadKey(&'static str),
    /// The key was used with a different request: 422.
    Mismatch,
    /// Answer with this (a joined or a stored answer); the routing record says `idempotentReplay`.
    Replay(Response),
    /// This request runs; hand its response to [`Lead::capture`].
    Lead(Lead),
}

/// The process's keys, and — with `state.redis` — the replicas' (see [`remote`]).
#[derive(Default)]
pub struct Idempotency {
    inner: Arc<Mutex<Table>>,
    store: Option<Arc<RedisState>>,
}

type Key = (Arc<str>, Box<str>);

#[derive(Default)]
struct Table {
    slots: hashbrown::HashMap<Key, Slot>,
    /// Use order: tick → key (oldest first).
    order: BTreeMap<u64, Key>,
    tick: u64,
    /// Bytes of the stored (done) answers.
    bytes: usize,
}

struct Slot {
    fingerprint: [u8; 32],
    tick: u64,
    state: SlotState,
}

enum SlotState {
    InFlight(Arc<Flight>),
    Done {
        answer: Arc<Answer>,
        expires: Instant,
    },
}

/// An answer as its caller got it.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    chunks: Vec<Bytes>,
    len: usize,
}

/// A lead's answer while it is being sent.
struct Flight {
    rec: Mutex<Recording>,
    changed: watch::Sender<()>,
}

#[derive(Default)]
struct Recording {
    head: Option<(StatusCode, HeaderMap)>,
    chunks: Vec<Bytes>,
    len: usize,
    end: Option<End>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// The whole body was sent.
    Complete,
    /// The body was cut, outgrew the bound, or the lead stopped before it had an answer.
    Cut,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request's key and its fingerprint.
pub struct Keyed {
    key: Box<str>,
    fingerprint: [u8; 32],
}

/// The request's `Idempotency-Key` and fingerprint; `None` without the header (no work done),
/// `Err` for a key that is empty, not visible ASCII or over 255 characters.
pub fn fingerprint_of(
    header: Option<&http::HeaderValue>,
    dialect: sidetrack_dialects::Dialect,
    path: &str,
    body: &[u8],
) -> Option<Result<Box<Keyed>, &'static str>> {
    let value = header?;
    Some(match value.to_str() {
        Ok("") => Err("the Idempotency-Key header is empty"),
        Ok(k) if k.len() > MAX_KEY_CHARS => {
            Err("the Idempotency-Key header is longer than 255 characters")
        }
        // Boxed: the request's future holds this across its awaits.
        Ok(k) => Ok(Box::new(Keyed {
            key: k.into(),
            fingerprint: fingerprint(dialect.as_str(), path, body),
        })),
        Err(_) => Err("the Idempotency-Key header must be visible ASCII characters"),
    })
}

/// The request's fingerprint: the dialect, the path and the body bytes (SPEC §12).
/// (`header` is the request's `Idempotency-Key`, found by the server's one pass over the headers.)
pub fn fingerprint(dialect: &str, path: &str, body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(dialect.as_bytes());
    h.update([0]);
    h.update(path.as_bytes());
    h.update([0]);
    h.update(body);
    h.finalize().into()
}

impl Idempotency {
    pub fn new(store: Option<Arc<RedisState>>) -> Idempotency {
        Idempotency {
            inner: Arc::default(),
            store,
        }
    }

    /// Looks the request's key up (when it has one) and decides: replay, join, lead or refuse.
    /// Waits while the key's lead has not sent its head yet.
    /// `fingerprint`: from [`fingerprint_of`].
    pub async fn begin(
        &self,
        principal: &Arc<str>,
        fingerprint: Result<Box<Keyed>, &'static str>,
        limits: &Limits,
        deadline: Instant,
    ) -> Begin {
        let (key, fp) = match fingerprint {
            Err(why) => return Begin::BadKey(why),
            Ok(keyed) => (keyed.key, keyed.fingerprint),
        };
        let key = &*key;
        loop {
            let flight = match self.enter(principal, key, fp, limits) {
                Entered::Lead(lead) => match &self.store {
                    Some(store) if store.is_up() => {
                        return remote::lead(store, lead, principal, key, fp, deadline).await
                    }
                    _ => return Begin::Lead(lead),
                },
                Entered::Mismatch => return Begin::Mismatch,
                Entered::Stored(answer) => return Begin::Replay(replay_stored(&answer)),
                Entered::Join(flight) => flight,
            };
            if let Some(resp) = join(flight).await {
                return Begin::Replay(resp);
            }
            // The lead stopped before it had an answer: try again (and perhaps lead).
        }
    }

    fn enter(&self, principal: &Arc<str>, key: &str, fp: [u8; 32], limits: &Limits) -> Entered {
        let mut t = lock(&self.inner);
        let t = &mut *t;
        let k: Key = (principal.clone(), key.into());
        t.tick += 1;
        let tick = t.tick;
        if let Some(slot) = t.slots.get_mut(&k) {
            let live = match &slot.state {
                SlotState::InFlight(_) => true,
                SlotState::Done { expires, .. } => *expires > Instant::now(),
            };
            if live {
                if slot.fingerprint != fp {
                    return Entered::Mismatch;
                }
                t.order.remove(&slot.tick);
                slot.tick = tick;
                t.order.insert(tick, k);
                return match &slot.state {
                    SlotState::InFlight(f) => Entered::Join(f.clone()),
                    SlotState::Done { answer, .. } => Entered::Stored(answer.clone()),
                };
            }
            t.remove(&k);
        }
        let (changed, _) = watch::channel(());
        let flight = Arc::new(Flight {
            rec: Mutex::default(),
            changed,
        });
        t.slots.insert(
            k.clone(),
            Slot {
                fingerprint: fp,
                tick,
                state: SlotState::InFlight(flight.clone()),
            },
        );
        t.order.insert(tick, k.clone());
        t.evict(limits);
        Entered::Lead(Lead {
            table: self.inner.clone(),
            key: k,
            flight,
            max_answer_bytes: limits.max_answer_bytes,
            max_bytes: limits.max_bytes,
            max_entries: limits.max_entries,
            ttl: limits.ttl,
            done: false,
            remote: None,
            stream_failed: Arc::default(),
        })
    }

    /// Keys held (in flight and stored), for tests.
    pub fn len(&self) -> usize {
        lock(&self.inner).slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

enum Entered {
    Lead(Lead),
    Join(Arc<Flight>),
    Stored(Arc<Answer>),
    Mismatch,
}

impl Table {
    fn remove(&mut self, k: &Key) {
        if let Some(slot) = self.slots.remove(k) {
            self.order.remove(&slot.tick);
            if let SlotState::Done { answer, .. } = slot.state {
                self.bytes -= answer.len;
            }
        }
    }

    /// Frees the slot of `k` if it is still `flight`'s.
    fn release(&mut self, k: &Key, flight: &Arc<Flight>) {
        let ours = self
            .slots
            .get(k)
            .is_some_and(|s| matches!(&s.state, SlotState::InFlight(f) if Arc::ptr_eq(f, flight)));
        if ours {
            self.remove(k);
        }
    }

    /// Least recently used keys go until both bounds hold.
    fn evict(&mut self, limits: &Limits) {
        while self.slots.len() > limits.max_entries || self.bytes > limits.max_bytes {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.slots.remove(&k) {
                if let SlotState::Done { answer, .. } = slot.state {
                    self.bytes -= answer.len;
                }
            }
        }
    }
}

/// The request that runs for its key. Dropped without [`Lead::capture`] (the request stopped
/// before it had an answer), it frees the key and wakes the waiting duplicates.
pub struct Lead {
    table: Arc<Mutex<Table>>,
    key: Key,
    flight: Arc<Flight>,
    max_answer_bytes: usize,
    max_bytes: usize,
    max_entries: usize,
    ttl: std::time::Duration,
    /// The answer ended (recorded and stored, or dropped): nothing left for `Drop`.
    done: bool,
    /// This lead holds the key's in-flight marker in Redis too.
    remote: Option<remote::Claim>,
    /// Set by the relay when the answer's stream failed after the commit (the caller got the
    /// gateway's mid-stream error event): such an answer ends like a cut one, never stored.
    stream_failed: Arc<std::sync::atomic::AtomicBool>,
}

impl Lead {
    /// The flag the relay sets when this answer's stream fails after the commit.
    pub fn stream_failed(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.stream_failed.clone()
    }

    /// Records `resp` as it goes to the caller: its head now, its body as the caller reads it.
    /// A failure frees the key at once (a retry really retries).
    pub fn capture(self, resp: Response) -> Response {
        let (parts, body) = resp.into_parts();
        {
            let mut rec = lock(&self.flight.rec);
            rec.head = Some((parts.status, parts.headers.clone()));
        }
        if !parts.status.is_success() {
            lock(&self.table).release(&self.key, &self.flight);
        }
        self.flight.changed.send_replace(());
        let length = http_body::Body::size_hint(&body).exact();
        let tee = Tee {
            inner: body,
            lead: self,
            length,
            sent: 0,
        };
        Response::from_parts(parts, Body::new(tee))
    }

    fn push(&mut self, data: &Bytes) -> bool {
        let mut rec = lock(&self.flight.rec);
        if rec.len + data.len() > self.max_answer_bytes {
            return false;
        }
        rec.len += data.len();
        rec.chunks.push(data.clone());
        drop(rec);
        self.flight.changed.send_replace(());
        true
    }

    fn end(&mut self, end: End) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let failed = self
            .stream_failed
            .load(std::sync::atomic::Ordering::Acquire);
        let end = if failed { End::Cut } else { end };
        let answer = {
            let mut rec = lock(&self.flight.rec);
            rec.end = Some(end);
            if let Some(claim) = self.remote.take() {
                claim.settle(&rec, end, self.max_answer_bytes, self.ttl);
            }
            match (&rec.head, end) {
                (Some((status, headers)), End::Complete) if status.is_success() => Some(Answer {
                    status: *status,
                    headers: headers.clone(),
                    chunks: rec.chunks.clone(),
                    len: rec.len,
                }),
                _ => None,
            }
        };
        {
            let mut t = lock(&self.table);
            match answer {
                Some(answer) if answer.len <= self.max_bytes => {
                    if let Some(slot) = t.slots.get_mut(&self.key) {
                        let ours = matches!(&slot.state, SlotState::InFlight(f) if Arc::ptr_eq(f, &self.flight));
                        if ours {
                            let len = answer.len;
                            slot.state = SlotState::Done {
                                answer: Arc::new(answer),
                                expires: Instant::now() + self.ttl,
                            };
                            t.bytes += len;
                            let limits = Limits {
                                ttl: self.ttl,
                                max_entries: self.max_entries,
                                max_answer_bytes: self.max_answer_bytes,
                                max_bytes: self.max_bytes,
                            };
                            t.evict(&limits);
                        }
                    }
                }
                _ => t.release(&self.key, &self.flight),
            }
        }
        self.flight.changed.send_replace(());
    }
}

impl Lead {
    /// [`Lead::capture`] when there is a lead; `resp` as it is otherwise.
    pub fn capture_opt(lead: Option<Box<Lead>>, resp: Response) -> Response {
        match lead {
            Some(lead) => (*lead).capture(resp),
            None => resp,
        }
    }
}

impl crate::server::RequestCtx {
    /// Answers a duplicate, or refuses its key (400 bad key, 422 reused with a different request).
    pub fn idempotent(self, begin: Begin) -> Response {
        use sidetrack_dialects::GatewayErrorKind;
        match begin {
            Begin::Replay(resp) => self.replayed(resp),
            Begin::BadKey(why) => {
                self.reject(GatewayErrorKind::InvalidRequest, why, "idempotencyKey")
            }
            Begin::Mismatch => self.reject(
                GatewayErrorKind::Unprocessable,
                "this Idempotency-Key was used with a different request",
                "idempotencyKeyReused",
            ),
            // Not called with these; answered as a plain 400 rather than panicking.
            Begin::Lead(_) => self.reject(
                GatewayErrorKind::InvalidRequest,
                "idempotency: nothing to answer",
                "idempotencyKey",
            ),
        }
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        self.end(End::Cut);
    }
}

/// The lead's body on its way to its caller, recorded for the duplicates.
struct Tee {
    inner: Body,
    lead: Lead,
    /// The body's length when known up front, and the bytes sent so far.
    length: Option<u64>,
    sent: u64,
}

impl Tee {
    /// All of it was sent: the server does not poll a body of known length past its last byte.
    fn whole(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner) || self.length == Some(self.sent)
    }
}

impl http_body::Body for Tee {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                this.lead.end(End::Complete);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.lead.end(End::Cut);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.sent += data.len() as u64;
                    if !this.lead.done && !this.lead.push(data) {
                        // Too large to keep: not stored, and the duplicates following it are cut.
                        this.lead.end(End::Cut);
                    }
                }
                if this.whole() {
                    this.lead.end(End::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tee {
    fn drop(&mut self) {
        // Dropped by the server once the last byte is written, or when the caller went away.
        let end = if self.whole() {
            End::Complete
        } else {
            End::Cut
        };
        self.lead.end(end);
    }
}

/// Waits for the lead's head; `None` when the lead stopped before it had one.
async fn join(flight: Arc<Flight>) -> Option<Response> {
    let mut rx = flight.changed.subscribe();
    loop {
        {
            let rec = lock(&flight.rec);
            if let Some((status, headers)) = &rec.head {
                let (status, headers) = (*status, headers.clone());
                drop(rec);
                return Some(replayed(status, headers, follow(flight)));
            }
            if rec.end.is_some() {
                return None;
            }
        }
        if rx.changed().await.is_err() {
            return None;
        }
    }
}

/// The lead's body from its first byte, then live until it ends.
fn follow(flight: Arc<Flight>) -> Body {
    let rx = flight.changed.subscribe();
    let chunks =
        futures_util::stream::unfold((flight, rx, 0usize), |(flight, mut rx, next)| async move {
            loop {
                let (chunk, end) = {
                    let rec = lock(&flight.rec);
                    (rec.chunks.get(next).cloned(), rec.end)
                };
                if let Some(c) = chunk {
                    return Some((Ok::<_, BoxError>(c), (flight, rx, next + 1)));
                }
                match end {
                    Some(End::Complete) => return None,
                    Some(End::Cut) => {
                        let cut: BoxError = "the answer being joined was cut".into();
                        return Some((Err(cut), (flight, rx, usize::MAX)));
                    }
                    None => {}
                }
                if next == usize::MAX || rx.changed().await.is_err() {
                    return None;
                }
            }
        });
    Body::from_stream(chunks)
}

fn replay_stored(answer: &Arc<Answer>) -> Response {
    let body = match answer.chunks.as_slice() {
        [] => Body::empty(),
        [one] => Body::from(one.clone()),
        many => {
            let many: Vec<Result<Bytes, BoxError>> = many.iter().cloned().map(Ok).collect();
            Body::from_stream(futures_util::stream::iter(many))
        }
    };
    replayed(answer.status, answer.headers.clone(), body)
}

fn replayed(status: StatusCode, mut headers: HeaderMap, body: Body) -> Response {
    headers.insert(REPLAY_HEADER.clone(), HeaderValue::from_static("true"));
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use http_body_util::BodyExt;

    fn keyed(key: &str, body: &[u8]) -> Result<Box<Keyed>, &'static str> {
        let value: HeaderValue = key.parse().unwrap();
        let dialect = sidetrack_dialects::Dialect::OpenAiChat;
        fingerprint_of(Some(&value), dialect, "/v1/chat/completions", body).unwrap()
    }

    async fn begin(store: &Idempotency, key: &str, body: &[u8]) -> Begin {
        let principal: Arc<str> = "p".into();
        store
            .begin(&principal, keyed(key, body), &Limits::default(), later())
            .await
    }

    fn later() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    fn ok(body: &'static str) -> Response {
        Response::new(Body::from(body))
    }

    async fn text(resp: Response) -> String {
        let b = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_success_is_replayed_and_a_different_body_is_refused() {
        let store = Idempotency::default();
        let Begin::Lead(lead) = begin(&store, "k", b"a").await else {
            panic!("first is the lead")
        };
        assert_eq!(text(lead.capture(ok("answer"))).await, "answer");
        let Begin::Replay(r) = begin(&store, "k", b"a").await else {
            panic!("replay")
        };
        assert_eq!(r.headers()[&REPLAY_HEADER], "true");
        assert_eq!(text(r).await, "answer");
        assert!(matches!(begin(&store, "k", b"b").await, Begin::Mismatch));
    }

    #[tokio::test]
    async fn a_failure_frees_the_key_and_a_dropped_lead_hands_over() {
        let store = Idempotency::default();
        let Begin::Lead(lead) = begin(&store, "k", b"a").await else {
            panic!()
        };
        let mut failed = ok("nope");
        *failed.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let _ = text(lead.capture(failed)).await;
        assert!(store.is_empty());
        let Begin::Lead(lead) = begin(&store, "k", b"a").await else {
            panic!("a failed key runs again")
        };
        // A lead that stops before it has an answer hands the key to a waiting duplicate.
        let store = Arc::new(store);
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move { begin(&store, "k", b"a").await })
        };
        tokio::task::yield_now().await;
        drop(lead);
        assert!(matches!(waiting.await.unwrap(), Begin::Lead(_)));
    }

    /// A body fed by hand: each `send` is one frame; dropping the sender ends it (`cut`: with an
    /// error).
    fn channel() -> (
        tokio::sync::mpsc::UnboundedSender<Result<Bytes, BoxError>>,
        Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        (tx, Body::from_stream(stream))
    }

    #[tokio::test]
    async fn a_joined_duplicate_gets_the_body_from_its_first_byte_then_follows_live() {
        let store = Arc::new(Idempotency::default());
        let Begin::Lead(lead) = begin(&store, "k", b"a").await else {
            panic!()
        };
        // A duplicate waits while the lead has no head yet.
        let waiting = {
            let store = store.clone();
            tokio::spawn(async move { begin(&store, "k", b"a").await })
        };
        let (tx, body) = channel();
        let mut sent = lead.capture(Response::new(body)).into_body();
        tx.send(Ok(Bytes::from_static(b"one "))).unwrap();
        assert_eq!(
            sent.frame().await.unwrap().unwrap().into_data().unwrap(),
            "one "
        );
        let Begin::Replay(joined) = waiting.await.unwrap() else {
            panic!("joined")
        };
        let Begin::Replay(late) = begin(&store, "k", b"a").await else {
            panic!("a later duplicate joins too")
        };
        let joined = tokio::spawn(text(joined));
        let late = tokio::spawn(text(late));
        tx.send(Ok(Bytes::from_static(b"two"))).unwrap();
        drop(tx);
        assert_eq!(text(Response::new(sent)).await, "two");
        assert_eq!(joined.await.unwrap(), "one two");
        assert_eq!(late.await.unwrap(), "one two");
        assert!(
            matches!(begin(&store, "k", b"a").await, Begin::Replay(_)),
            "stored"
        );
    }

    #[tokio::test]
    async fn a_cut_answer_cuts_its_joined_duplicates_and_is_not_stored() {
        let store = Idempotency::default();
        let Begin::Lead(lead) = begin(&store, "k", b"a").await else {
            panic!()
        };
        let (tx, body) = channel();
        let sent = lead.capture(Response::new(body));
        let Begin::Replay(joined) = begin(&store, "k", b"a").await else {
            panic!()
        };
        tx.send(Ok(Bytes::from_static(b"half"))).unwrap();
        tx.send(Err("upstream lost".into())).unwrap();
        assert!(sent.into_body().collect().await.is_err());
        assert!(
            joined.into_body().collect().await.is_err(),
            "the duplicate is cut too"
        );
        assert!(store.is_empty());
        assert!(matches!(begin(&store, "k", b"a").await, Begin::Lead(_)));
    }

    #[tokio::test]
    async fn keys_are_bounded_least_recently_used_first() {
        let store = Idempotency::default();
        let limits = Limits {
            max_entries: 2,
            ..Limits::default()
        };
        let principal: Arc<str> = "p".into();
        for k in ["a", "b", "c"] {
            let Begin::Lead(lead) = store
                .begin(&principal, keyed(k, b""), &limits, later())
                .await
            else {
                panic!()
            };
            let _ = text(lead.capture(ok("x"))).await;
        }
        assert_eq!(store.len(), 2);
        let again = store
            .begin(&principal, keyed("a", b""), &limits, later())
            .await;
        assert!(matches!(again, Begin::Lead(_)), "the oldest key went");
    }

    #[tokio::test]
    async fn an_answer_over_the_bound_is_not_stored() {
        let store = Idempotency::default();
        let limits = Limits {
            max_answer_bytes: 4,
            ..Limits::default()
        };
        let principal: Arc<str> = "p".into();
        let Begin::Lead(lead) = store
            .begin(&principal, keyed("k", b""), &limits, later())
            .await
        else {
            panic!()
        };
        assert_eq!(text(lead.capture(ok("too long"))).await, "too long");
        assert!(store.is_empty());
    }
}

/// Across replicas (SPEC §12, `state.redis`): the first replica to `SET NX PX` the key's in-flight
/// marker leads; its lease (`LEASE`) is renewed while it runs, so a crashed replica's key frees
/// itself. When it ends, a success replaces the marker with the answer (for `ttlMilliseconds`); a
/// failure deletes the marker and leaves the failure for `FAILURE_HOLD` under the marker's token,
/// where only the duplicates that waited on it look. A replica that finds another's marker polls
/// every `POLL` until the answer is there (it replays it, whole — a stream from its first event, but
/// not live), the failure is (it answers with it), the key is free (it tries to lead), or its own
/// deadline passes (it runs itself). Redis slow or down: each replica keeps its keys locally
/// (fail-open, `sidetrack_state_backend_up`).
pub mod remote {
    use super::*;

    /// The in-flight marker's lease, renewed every third of it while the lead runs.
    pub const LEASE: std::time::Duration = std::time::Duration::from_secs(10);
    /// How often a waiting replica looks for the answer.
    pub const POLL: std::time::Duration = std::time::Duration::from_millis(20);
    /// How long a failure stays readable for the duplicates that waited on it.
    pub const FAILURE_HOLD: std::time::Duration = std::time::Duration::from_secs(10);

    /// Writes the answer over our marker (ARGV: marker, answer, ttl ms), or — ARGV[2] empty —
    /// deletes our marker and keeps the failure (ARGV[4]) under KEYS[2] for ARGV[5] ms.
    const SETTLE: &str = r#"
-- sidetrack_idempotency_settle_v1
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[2] ~= '' then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  else
    redis.call('DEL', KEYS[1])
    if ARGV[4] ~= '' then redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5]) end
  end
end
return 1
"#;

    /// Extends our marker's lease (ARGV: marker, lease ms).
    const RENEW: &str = r#"
-- sidetrack_idempotency_renew_v1
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

    /// Our marker in Redis, renewed until the lead ends.
    pub struct Claim {
        store: Arc<RedisState>,
        key: String,
        marker: Vec<u8>,
        renew: tokio::task::JoinHandle<()>,
    }

    impl Claim {
        /// Stores a complete success, or frees the key (leaving a failure for its waiters).
        pub(super) fn settle(
            self,
            rec: &Recording,
            end: End,
            max: usize,
            ttl: std::time::Duration,
        ) {
            self.renew.abort();
            let head = rec.head.as_ref();
            let success = end == End::Complete && head.is_some_and(|(s, _)| s.is_success());
            let fits = rec.len <= max;
            let (answer, failure) = match head {
                Some((status, headers)) if fits => {
                    let bytes = encode(b'd', &self.marker[1..65], *status, headers, &rec.chunks);
                    if success {
                        (bytes, Vec::new())
                    } else if end == End::Complete {
                        (Vec::new(), bytes)
                    } else {
                        (Vec::new(), Vec::new())
                    }
                }
                _ => (Vec::new(), Vec::new()),
            };
            let fail_key = failure_key(&self.key, &self.marker);
            let Claim {
                store, key, marker, ..
            } = self;
            // Settled from a body's poll or drop; at shutdown there may be no runtime left (the
            // marker's lease then frees the key).
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            rt.spawn(async move {
                let script = redis::Script::new(SETTLE);
                let _: Result<i64, _> = store
                    .call(|mut c| async move {
                        script
                            .key(key)
                            .key(fail_key)
                            .arg(marker)
                            .arg(answer)
                            .arg(ttl.as_millis() as u64)
                            .arg(failure)
                            .arg(FAILURE_HOLD.as_millis() as u64)
                            .invoke_async(&mut c)
                            .await
                    })
                    .await;
            });
        }
    }

    fn failure_key(key: &str, marker: &[u8]) -> String {
        // The marker's token (after `i` and the 64 hex digits of the fingerprint).
        let token = std::str::from_utf8(marker.get(65..).unwrap_or_default()).unwrap_or_default();
        format!("{key}:failed:{token}")
    }

    fn hex(bytes: &[u8]) -> String {
        use std::fmt::Write;
        bytes
            .iter()
            .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
                let _ = write!(s, "{b:02x}");
                s
            })
    }

    /// `kind` (`d` done, `f` failed), the fingerprint (64 hex digits), the status (3 digits), the
    /// header block's length (8 hex digits), `name\0value\0`..., then the body.
    fn encode(
        kind: u8,
        fp: &[u8],
        status: StatusCode,
        headers: &HeaderMap,
        chunks: &[Bytes],
    ) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, value) in headers {
            block.extend_from_slice(name.as_str().as_bytes());
            block.push(0);
            block.extend_from_slice(value.as_bytes());
            block.push(0);
        }
        let body: usize = chunks.iter().map(Bytes::len).sum();
        let mut out = Vec::with_capacity(1 + 64 + 3 + 8 + block.len() + body);
        out.push(kind);
        out.extend_from_slice(fp);
        out.extend_from_slice(status.as_str().as_bytes());
        out.extend_from_slice(format!("{:08x}", block.len()).as_bytes());
        out.extend_from_slice(&block);
        for c in chunks {
            out.extend_from_slice(c);
        }
        out
    }

    fn decode(v: &[u8]) -> Option<Answer> {
        let status = StatusCode::from_bytes(v.get(65..68)?).ok()?;
        let len = usize::from_str_radix(std::str::from_utf8(v.get(68..76)?).ok()?, 16).ok()?;
        let block = v.get(76..76 + len)?;
        let mut headers = HeaderMap::new();
        let mut parts = block.split(|b| *b == 0);
        while let (Some(name), Some(value)) = (parts.next(), parts.next()) {
            if name.is_empty() {
                break;
            }
            let name = http::HeaderName::from_bytes(name).ok()?;
            headers.append(name, HeaderValue::from_bytes(value).ok()?);
        }
        let body = Bytes::copy_from_slice(v.get(76 + len..)?);
        Some(Answer {
            status,
            headers,
            len: body.len(),
            chunks: vec![body],
        })
    }

    /// What the key holds in Redis.
    enum Seen {
        /// Nothing (or Redis did not answer): try to lead.
        Free,
        InFlight {
            fp: Vec<u8>,
            marker: Vec<u8>,
        },
        Done {
            fp: Vec<u8>,
            answer: Answer,
        },
    }

    async fn look(store: &RedisState, key: &str) -> Result<Seen, Unavailable> {
        let key = key.to_owned();
        let v: Option<Vec<u8>> = store
            .call(|mut c| async move { redis::cmd("GET").arg(key).query_async(&mut c).await })
            .await?;
        Ok(match v {
            Some(v) if v.first() == Some(&b'i') && v.len() >= 65 => Seen::InFlight {
                fp: v[1..65].to_vec(),
                marker: v,
            },
            Some(v) if v.first() == Some(&b'd') && v.len() >= 65 => match decode(&v) {
                Some(answer) => Seen::Done {
                    fp: v[1..65].to_vec(),
                    answer,
                },
                None => Seen::Free,
            },
            _ => Seen::Free,
        })
    }

    /// This replica leads the key locally: lead across replicas too, replay another replica's
    /// answer, or wait for it. Local duplicates are joined to `lead` meanwhile, and get what it
    /// gets.
    pub(super) async fn lead(
        store: &Arc<RedisState>,
        mut lead: Lead,
        principal: &Arc<str>,
        key: &str,
        fp: [u8; 32],
        deadline: Instant,
    ) -> Begin {
        let rkey = store.idempotency_key(&redis_id(principal, key));
        let fp_hex = hex(&fp).into_bytes();
        let mut marker = Vec::with_capacity(1 + 64 + 16);
        marker.push(b'i');
        marker.extend_from_slice(&fp_hex);
        marker.extend_from_slice(hex(&rand::random::<u64>().to_be_bytes()).as_bytes());
        // The marker of another replica's lead we waited on (to find its failure).
        let mut waited_on: Option<Vec<u8>> = None;
        loop {
            if let Some(theirs) = waited_on.take() {
                // The lead we waited on is gone: its failure, if it left one, is ours too.
                if let Some(answer) = failure_left(store, &rkey, &theirs).await {
                    return Begin::Replay(lead.capture(replay_stored(&Arc::new(answer))));
                }
            }
            match set_marker(store, &rkey, &marker).await {
                Err(Unavailable) => return Begin::Lead(lead),
                Ok(true) => {
                    lead.remote = Some(claim(store, rkey, marker));
                    return Begin::Lead(lead);
                }
                Ok(false) => {}
            }
            match look(store, &rkey).await {
                Err(Unavailable) => return Begin::Lead(lead),
                Ok(Seen::Free) => continue,
                Ok(Seen::Done { fp: theirs, answer }) => {
                    if theirs != fp_hex {
                        return Begin::Mismatch;
                    }
                    return Begin::Replay(lead.capture(replay_stored(&Arc::new(answer))));
                }
                Ok(Seen::InFlight {
                    fp: theirs,
                    marker: m,
                }) => {
                    if theirs != fp_hex {
                        return Begin::Mismatch;
                    }
                    // Wait until it is done, gone or replaced.
                    match wait_out(store, &rkey, &m, deadline).await {
                        Waited::RunOurselves => return Begin::Lead(lead),
                        Waited::Changed => waited_on = Some(m),
                    }
                }
            }
        }
    }

    /// How waiting on another replica's in-flight marker ended.
    enum Waited {
        /// Our deadline would pass, or the store went away: run the request ourselves.
        RunOurselves,
        /// The marker is done, gone or replaced: look again.
        Changed,
    }

    /// Polls the key until the marker `m` is no longer there, within `deadline`.
    async fn wait_out(store: &Arc<RedisState>, rkey: &str, m: &[u8], deadline: Instant) -> Waited {
        loop {
            if Instant::now() + POLL >= deadline {
                return Waited::RunOurselves;
            }
            tokio::time::sleep(POLL).await;
            match look(store, rkey).await {
                Err(Unavailable) => return Waited::RunOurselves,
                Ok(Seen::InFlight { marker: now, .. }) if now == m => continue,
                Ok(_) => return Waited::Changed,
            }
        }
    }

    /// `SET key marker NX PX lease`: did this replica become the lead?
    async fn set_marker(
        store: &Arc<RedisState>,
        rkey: &str,
        marker: &[u8],
    ) -> Result<bool, Unavailable> {
        let (k, m) = (rkey.to_owned(), marker.to_vec());
        let set: Result<Option<String>, Unavailable> = store
            .call(|mut c| async move {
                redis::cmd("SET")
                    .arg(k)
                    .arg(m)
                    .arg("NX")
                    .arg("PX")
                    .arg(LEASE.as_millis() as u64)
                    .query_async(&mut c)
                    .await
            })
            .await;
        set.map(|s| s.is_some())
    }

    /// The failure another replica's lead (marker `theirs`) left for the duplicates that waited.
    async fn failure_left(store: &Arc<RedisState>, rkey: &str, theirs: &[u8]) -> Option<Answer> {
        let fkey = failure_key(rkey, theirs);
        let failed: Result<Option<Vec<u8>>, _> = store
            .call(|mut c| async move { redis::cmd("GET").arg(fkey).query_async(&mut c).await })
            .await;
        decode(&failed.ok()??)
    }

    /// The key's id in Redis (after `{keyPrefix}idem:`): a hash of the principal and the key.
    pub fn redis_id(principal: &str, key: &str) -> String {
        hex(&fingerprint(principal, "\u{1f}", key.as_bytes()))
    }

    fn claim(store: &Arc<RedisState>, key: String, marker: Vec<u8>) -> Claim {
        let renew = {
            let (store, key, marker) = (store.clone(), key.clone(), marker.clone());
            tokio::spawn(async move {
                let script = redis::Script::new(RENEW);
                loop {
                    tokio::time::sleep(LEASE / 3).await;
                    let (k, m) = (key.clone(), marker.clone());
                    let script = &script;
                    let _: Result<i64, _> = store
                        .call(|mut c| async move {
                            script
                                .key(k)
                                .arg(m)
                                .arg(LEASE.as_millis() as u64)
                                .invoke_async(&mut c)
                                .await
                        })
                        .await;
                }
            })
        };
        Claim {
            store: store.clone(),
            key,
            marker,
            renew,
        }
    }

    use crate::state::redis::Unavailable;
}
