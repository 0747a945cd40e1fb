//! One JSON line per request (SPEC §7.1), written off the request path by a background task.
//! No prompt or completion text ever enters a [`RoutingRecord`].

use std::borrow::Cow;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use sidetrack_config::RoutingSink;
use tokio::sync::Notify;

mod json;

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServedBy {
    pub target: Arc<str>,
    pub model: Arc<str>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    pub hop: usize,
    pub target: Arc<str>,
    pub model: Arc<str>,
    /// `FIRST`, `RETRY` or `HEDGE` (SPEC §11).
    pub kind: sidetrack_resilience::retry::AttemptKind,
    pub outcome: sidetrack_resilience::Outcome,
    pub status: Option<u16>,
    pub error_kind: Option<&'static str>,
    /// What the provider's error answer says went wrong (SPEC §11 "Error classes").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<sidetrack_resilience::ErrorClass>,
    /// The knob or event behind a failure, e.g. `firstByteTimeoutMilliseconds`, `streamErrorEvent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why a failed attempt's hop was not attempted again (SPEC §11), when it had a retry to use
    /// or a request-wide rule stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<sidetrack_resilience::retry::StoppedBy>,
    pub duration_ms: f64,
    pub first_byte_ms: Option<f64>,
    pub breaker: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SkipRecord {
    pub hop: usize,
    pub target: Arc<str>,
    pub model: Arc<str>,
    pub why: sidetrack_resilience::walk::Skip,
    /// What could not be translated, for `INELIGIBLE:translation`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoutingRecord {
    /// When the request ended; written as RFC 3339 with milliseconds (formatted by the writer, off
    /// the request path).
    #[serde(serialize_with = "rfc3339_millis")]
    pub ts: std::time::SystemTime,
    pub request_id: RequestId,
    pub principal: Arc<str>,
    pub dialect: &'static str,
    pub request_path: Cow<'static, str>,
    pub requested_model: Option<String>,
    pub rule_name: Option<String>,
    pub match_type: Option<&'static str>,
    pub outcome: RequestOutcome,
    pub reason: Cow<'static, str>,
    pub served_by: Option<ServedBy>,
    pub status: u16,
    pub fallback_hop: Option<usize>,
    pub attempts: Vec<AttemptRecord>,
    pub skipped: Vec<SkipRecord>,
    pub streamed: bool,
    pub committed: bool,
    pub mid_stream_error: bool,
    pub latency_ms: f64,
    pub ttft_ms: Option<f64>,
    /// The request's time budget (SPEC §11 Deadline), in milliseconds.
    pub deadline_ms: u64,
    pub usage: Option<UsageRecord>,
}

/// How a request ended (the routing log's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// A destination's successful answer went to the caller.
    Served,
    /// The caller got an error: an upstream's, or the gateway's after a walk (chain exhausted,
    /// nothing eligible, unroutable), or a failure after the commit.
    Error,
    /// The gateway refused the request before routing (auth, size, parse, access, rate limit).
    Rejected,
    /// The caller went away before the answer ended (SPEC §14).
    Cancelled,
}

impl RequestOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Served => "SERVED",
            RequestOutcome::Error => "ERROR",
            RequestOutcome::Rejected => "REJECTED",
            RequestOutcome::Cancelled => "CANCELLED",
        }
    }
}

impl Serialize for RequestOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for RequestOutcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A request id: a UUIDv7 (RFC 9562) — 48 bits of Unix milliseconds, so ids sort by time, and 74
/// random bits from the thread's CSPRNG (rand's ChaCha12 `ThreadRng`, reseeded from the OS; no
/// syscall, lock or allocation per id), so an id can be neither guessed nor used to count
/// requests (SPEC §14). Written as 32 lower-case hex digits without hyphens: the id is also the
/// request's trace id, whose W3C form that is (docs/decisions/0004-names-labels-and-selection.md). A value:
/// the context, the routing record and the response header each hold a copy.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId([u8; 32]);

impl RequestId {
    pub fn next() -> RequestId {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let random: [u8; 10] = rand::random();
        let id = uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid();
        let mut digits = [0u8; 32];
        id.simple().encode_lower(&mut digits);
        RequestId(digits)
    }

    pub fn as_str(&self) -> &str {
        // Always hex digits (ASCII), so this never falls back.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<&str> for RequestId {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

fn rfc3339_millis<S: serde::Serializer>(
    t: &std::time::SystemTime,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(*t))
}

/// Where routing records go. Cloning is cheap; recording never blocks the request.
#[derive(Clone)]
pub struct RoutingLog {
    inner: Arc<Inner>,
}

enum Inner {
    Off,
    Writer {
        queue: Arc<Queue>,
        /// Taken (and joined) by [`RoutingLog::close`].
        thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    },
    Memory {
        records: Mutex<Vec<RoutingRecord>>,
        notify: Notify,
    },
}

/// Records waiting for the writer thread. A request pushes its record under a short lock and wakes
/// the writer only when the queue goes from empty to one record or fills a batch; the writer then
/// gathers for up to [`GATHER`] before it serialises and writes the lot with one flush. Under load
/// that is one wake-up per batch, not per record; idle, the writer sleeps without timers. The
/// queue and the batch swap their buffers, so a steady state allocates nothing for queueing.
struct Queue {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// `sidetrack_routing_log_dropped_total`: records refused because the writer was
    /// [`QUEUE_CAPACITY`] behind (or the log was closed).
    dropped: Counter,
}

struct Pending {
    /// Shared with the dashboard's recent-decisions ring (no copy per request).
    records: Vec<Arc<RoutingRecord>>,
    closed: bool,
}

/// Records the writer takes in one go; reaching it wakes the writer at once.
const BATCH: usize = 256;
/// How long the writer waits for a batch to fill after the first record arrives: a line reaches
/// the file at most this much after its request ended. Each batch costs a wake-up of the writer
/// (on a busy gateway, a switch away from the runtime's thread), a write and a flush; at 2,000
/// requests/s, 100 ms makes that once per 200 records instead of once per 40 at 20 ms
/// (docs/decisions/0003-hot-path.md, "Thirteenth pass").
const GATHER: Duration = Duration::from_millis(100);
/// Records held at most while the writer is behind (a blocked stdout, a slow disk); past it they
/// are dropped and counted rather than stalling requests or growing without bound.
const QUEUE_CAPACITY: usize = 16 * 1024;

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, rec: Arc<RoutingRecord>) {
        let mut p = self.lock();
        if p.closed || p.records.len() >= QUEUE_CAPACITY {
            drop(p);
            let n = self.dropped.inc() + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "routing log writer is behind; records dropped (sidetrack_routing_log_dropped_total)"
                );
            }
            return;
        }
        p.records.push(rec);
        let wake = p.records.len() == 1 || p.records.len() == BATCH;
        drop(p);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Waits for records, gathers a batch, and swaps it into `batch` (which must be empty).
    /// Returns false once the log is closed: `batch` then holds the last records.
    fn next_batch(&self, batch: &mut Vec<Arc<RoutingRecord>>) -> bool {
        let mut p = self.lock();
        while p.records.is_empty() && !p.closed {
            p = self.wake.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        let deadline = Instant::now() + GATHER;
        while p.records.len() < BATCH && !p.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p = self
                .wake
                .wait_timeout(p, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        std::mem::swap(&mut p.records, batch);
        !p.closed
    }

    fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }
}

impl RoutingLog {
    /// Starts the writer thread for `sink`.
    pub fn start(sink: &RoutingSink) -> std::io::Result<RoutingLog> {
        let writer: Box<dyn Write + Send> = match sink {
            RoutingSink::Off => return Ok(RoutingLog::off()),
            RoutingSink::Stdout => Box::new(std::io::stdout()),
            RoutingSink::Stderr => Box::new(std::io::stderr()),
            RoutingSink::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        RoutingLog::writing_to(writer)
    }

    /// A log whose writer thread writes JSON lines to `writer`.
    fn writing_to(writer: Box<dyn Write + Send>) -> std::io::Result<RoutingLog> {
        let queue = Arc::new(Queue {
            pending: Mutex::new(Pending {
                records: Vec::with_capacity(BATCH),
                closed: false,
            }),
            wake: Condvar::new(),
            dropped: Counter::default(),
        });
        // A plain thread: writes to stdout or a file may block, and must never stall a runtime
        // worker. Serialising happens there too, off the request path.
        let thread = std::thread::Builder::new()
            .name("routing-log".into())
            .spawn({
                let queue = queue.clone();
                move || {
                    yield_to_requests();
                    write_lines(&queue, writer)
                }
            })?;
        Ok(RoutingLog {
            inner: Arc::new(Inner::Writer {
                queue,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// An in-memory sink for tests and the demo narration.
    pub fn memory() -> RoutingLog {
        RoutingLog {
            inner: Arc::new(Inner::Memory {
                records: Mutex::new(Vec::new()),
                notify: Notify::new(),
            }),
        }
    }

    pub fn off() -> RoutingLog {
        RoutingLog {
            inner: Arc::new(Inner::Off),
        }
    }

    pub fn record(&self, rec: impl Into<Arc<RoutingRecord>>) {
        match &*self.inner {
            Inner::Off => {}
            Inner::Writer { queue, .. } => queue.push(rec.into()),
            Inner::Memory { records, notify } => {
                if let Ok(mut r) = records.lock() {
                    r.push(Arc::unwrap_or_clone(rec.into()));
                }
                notify.notify_waiters();
            }
        }
    }

    /// The count of records dropped because the writer was behind, for `/metrics` (a handle on
    /// the same counter; zero for the memory and off sinks, which never drop).
    pub fn dropped(&self) -> Counter {
        match &*self.inner {
            Inner::Writer { queue, .. } => queue.dropped.clone(),
            _ => Counter::default(),
        }
    }

    /// Writes every record queued so far and stops the writer (at shutdown, after the last
    /// request has finished). Records that arrive later are dropped and counted. Blocks until
    /// the writer is done; it holds at most [`QUEUE_CAPACITY`] records.
    pub fn close(&self) {
        if let Inner::Writer { queue, thread } = &*self.inner {
            queue.close();
            let handle = thread.lock().ok().and_then(|mut t| t.take());
            if let Some(handle) = handle {
                let _ = handle.join();
            }
        }
    }

    /// Records so far (memory sink only; empty otherwise).
    pub fn records(&self) -> Vec<RoutingRecord> {
        match &*self.inner {
            Inner::Memory { records, .. } => records.lock().map(|r| r.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The records after the first `n`, waiting up to `timeout` for at least one (memory sink
    /// only). Copies only the new records, so a long-running reader does not copy the whole log on
    /// every wake.
    pub async fn wait_since(&self, n: usize, timeout: std::time::Duration) -> Vec<RoutingRecord> {
        let Inner::Memory { records, .. } = &*self.inner else {
            return Vec::new();
        };
        self.wait_for_len(n + 1, timeout).await;
        records
            .lock()
            .map(|r| {
                r.get(n..)
                    .map(<[RoutingRecord]>::to_vec)
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }

    /// Waits until the memory sink holds at least `n` records, or `timeout`.
    async fn wait_for_len(&self, n: usize, timeout: std::time::Duration) {
        let Inner::Memory { records, notify } = &*self.inner else {
            return;
        };
        let wait = async {
            loop {
                let notified = notify.notified();
                if records.lock().map(|r| r.len()).unwrap_or(0) >= n {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }

    /// Waits until at least `n` records exist (memory sink only), or the timeout passes.
    pub async fn wait_for(&self, n: usize, timeout: std::time::Duration) -> Vec<RoutingRecord> {
        self.wait_for_len(n, timeout).await;
        self.records()
    }
}

/// How far below the request threads the writer runs (nice, relative to the process's own).
/// The writer is background work that shares the gateway's CPU: at normal priority a batch it is
/// serialising (up to 256 records) delays a request that arrives meanwhile, which shows in the
/// latency tail. +5 gives it a quarter of a saturated CPU's time against the runtime thread, and
/// it needs ~0.6 µs per record (3.5 % of a CPU at 60,000 requests/s), so it still keeps up.
const WRITER_NICE: i32 = 5;

/// Lowers the calling (writer) thread's priority by [`WRITER_NICE`]. Linux keeps the nice value
/// per thread, so only the writer moves; elsewhere `nice` would move the whole process, so it is
/// left alone. A failure (a sandbox forbidding it) leaves the writer at normal priority.
fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::nice(WRITER_NICE);
}

/// The writer thread: one serialisation pass into a reused buffer, one write and one flush per
/// batch.
fn write_lines(queue: &Queue, mut out: Box<dyn Write + Send>) {
    let mut lines = json::LineWriter::default();
    // Written out whenever it holds WRITE_AT bytes, so a long batch does not grow it further.
    const WRITE_AT: usize = 64 * 1024;
    let mut buf: Vec<u8> = Vec::with_capacity(WRITE_AT + 4096);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let open = queue.next_batch(&mut batch);
        for rec in batch.drain(..) {
            lines.write(&mut buf, &rec);
            buf.push(b'\n');
            if buf.len() >= WRITE_AT {
                let _ = out.write_all(&buf);
                buf.clear();
            }
        }
        let _ = out.write_all(&buf);
        let _ = out.flush();
        buf.clear();
        if !open {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value, from /proc/thread-self/stat (field 19).
    #[cfg(target_os = "linux")]
    fn own_nice() -> i32 {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let after_name = &stat[stat.rfind(')').unwrap() + 2..];
        after_name.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_writer_thread_alone_runs_below_the_request_threads() {
        let before = own_nice();
        let writer = std::thread::spawn(|| {
            let own = own_nice();
            yield_to_requests();
            (own, own_nice())
        })
        .join()
        .unwrap();
        assert_eq!(
            writer.1,
            (writer.0 + WRITER_NICE).min(19),
            "the writer's own nice value moves"
        );
        assert_eq!(
            own_nice(),
            before,
            "the thread that started it keeps its priority"
        );
    }

    #[test]
    fn request_ids_are_uuid_v7_in_32_hex_digits_time_ordered_and_random() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let ids: Vec<RequestId> = (0..1000).map(|_| RequestId::next()).collect();
        let after = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut seen = std::collections::HashSet::new();
        let mut last_ms = 0;
        for id in &ids {
            let s = id.as_str();
            assert_eq!(s.len(), 32, "{s}");
            assert!(s
                .bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            let u = uuid::Uuid::parse_str(s).unwrap();
            assert_eq!(u.get_version_num(), 7, "{s}");
            assert_eq!(u.get_variant(), uuid::Variant::RFC4122, "{s}");
            let ms = u64::from_str_radix(&s[..12], 16).unwrap();
            assert!(
                (before..=after).contains(&ms),
                "{ms} not in {before}..={after}"
            );
            assert!(ms >= last_ms, "time-ordered by millisecond");
            last_ms = ms;
            assert!(seen.insert(*id), "repeated id {s}");
        }
        // No counter: the random part of consecutive ids does not step by one, and its bits
        // vary (a counter or a fixed prefix would leave most of them equal).
        let random = |id: &RequestId| u128::from_str_radix(&id.as_str()[16..], 16).unwrap();
        let steps = ids
            .windows(2)
            .filter(|w| random(&w[1]).wrapping_sub(random(&w[0])) == 1)
            .count();
        assert_eq!(steps, 0);
        let differing_bits: u32 = ids
            .windows(2)
            .map(|w| (random(&w[0]) ^ random(&w[1])).count_ones())
            .sum();
        let mean = f64::from(differing_bits) / 999.0;
        assert!(
            (25.0..39.0).contains(&mean),
            "about half of 64 bits differ: {mean}"
        );
    }

    fn record(i: usize) -> RoutingRecord {
        RoutingRecord {
            ts: std::time::UNIX_EPOCH,
            request_id: RequestId::next(),
            principal: Arc::from("p"),
            dialect: "openai",
            request_path: Cow::Borrowed("/v1/chat/completions"),
            requested_model: Some(format!("m-{i}")),
            rule_name: None,
            match_type: Some("DEFAULT"),
            outcome: RequestOutcome::Served,
            reason: Cow::Borrowed("servedByPrimary"),
            served_by: None,
            status: 200,
            fallback_hop: None,
            attempts: Vec::new(),
            skipped: Vec::new(),
            streamed: false,
            committed: true,
            mid_stream_error: false,
            latency_ms: 1.0,
            ttft_ms: None,
            deadline_ms: 900_000,
            usage: None,
        }
    }

    /// A writer whose lines a test can read, and which can be held shut to play a stuck stdout.
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        gate: Arc<std::sync::RwLock<()>>,
        entered: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.entered
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let _open = self.gate.read().unwrap();
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn models(sink: &Sink) -> Vec<String> {
        let bytes = sink.bytes.lock().unwrap();
        std::str::from_utf8(&bytes)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["requestedModel"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[test]
    fn every_record_is_written_in_order_by_close() {
        let sink = Sink::default();
        let log = RoutingLog::writing_to(Box::new(sink.clone())).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        log.record(record(t * 1000 + i));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        log.close();
        let written = models(&sink);
        assert_eq!(written.len(), 4000);
        assert_eq!(log.dropped().get(), 0);
        // Each thread's records keep their order.
        for t in 0..4 {
            let mine: Vec<&String> = written
                .iter()
                .filter(|m| (m[2..].parse::<usize>().unwrap() / 1000) == t)
                .collect();
            let expected: Vec<String> = (0..1000).map(|i| format!("m-{}", t * 1000 + i)).collect();
            assert_eq!(mine, expected.iter().collect::<Vec<_>>());
        }
        // After close nothing more is accepted, and that is counted.
        log.record(record(9));
        assert_eq!(log.dropped().get(), 1);
    }

    #[test]
    fn a_stuck_writer_costs_counted_drops_past_the_queue_bound_not_memory() {
        let sink = Sink::default();
        let stuck = sink.gate.write().unwrap();
        let log = RoutingLog::writing_to(Box::new(sink.clone())).unwrap();
        // The first record's flush blocks the writer on the stuck sink...
        log.record(record(0));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sink.entered.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the writer never wrote");
            std::thread::sleep(Duration::from_millis(1));
        }
        // ... so the queue holds QUEUE_CAPACITY records and counts the rest as dropped.
        for i in 1..=QUEUE_CAPACITY + 100 {
            log.record(record(i));
        }
        assert_eq!(log.dropped().get(), 100);
        drop(stuck);
        log.close();
        assert_eq!(models(&sink).len(), 1 + QUEUE_CAPACITY);
    }

    #[test]
    fn a_request_id_serialises_as_its_string() {
        let id = RequestId::next();
        assert_eq!(serde_json::to_string(&id).ok(), Some(format!("\"{id}\"")));
        assert_eq!(format!("{id:?}"), format!("\"{id}\""));
    }
}
