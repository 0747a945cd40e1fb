//! One JSON line per request (SPEC §7.1), written off the request path by a background task.
//! No prompt or completion text ever enters a [`RoutingRecord`].

use std::borrow::Cow;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sidetrack_config::RoutingSink;
use tokio::sync::{mpsc, Notify};

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
    pub outcome: &'static str,
    pub status: Option<u16>,
    pub error_kind: Option<&'static str>,
    /// The knob or event behind a failure, e.g. `firstByteTimeoutMilliseconds`, `streamErrorEvent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
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
    pub why: String,
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
    /// SERVED | ERROR | REJECTED
    pub outcome: &'static str,
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
    pub usage: Option<UsageRecord>,
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

/// Where routing records go. Cloning is cheap; sending never blocks the request.
#[derive(Clone)]
pub struct RoutingLog {
    inner: Arc<Inner>,
}

enum Inner {
    Off,
    Channel {
        tx: mpsc::Sender<RoutingRecord>,
        dropped: AtomicU64,
    },
    Memory {
        records: Mutex<Vec<RoutingRecord>>,
        notify: Notify,
    },
}

impl RoutingLog {
    /// Starts the writer thread for `sink`.
    pub fn start(sink: &RoutingSink) -> std::io::Result<RoutingLog> {
        let writer: Box<dyn Write + Send> = match sink {
            RoutingSink::Off => {
                return Ok(RoutingLog {
                    inner: Arc::new(Inner::Off),
                })
            }
            RoutingSink::Stdout => Box::new(std::io::stdout()),
            RoutingSink::Stderr => Box::new(std::io::stderr()),
            RoutingSink::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        let (tx, rx) = mpsc::channel(16 * 1024);
        // A plain thread: writes to stdout or a file may block, and must never stall a runtime worker.
        std::thread::Builder::new()
            .name("routing-log".into())
            .spawn(move || write_lines(rx, writer))?;
        Ok(RoutingLog {
            inner: Arc::new(Inner::Channel {
                tx,
                dropped: AtomicU64::new(0),
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

    pub fn record(&self, rec: RoutingRecord) {
        match &*self.inner {
            Inner::Off => {}
            Inner::Channel { tx, dropped } => {
                if tx.try_send(rec).is_err() {
                    // The writer is behind by 16k lines: drop rather than stall requests.
                    let n = dropped.fetch_add(1, Ordering::Relaxed);
                    if n.is_power_of_two() {
                        tracing::warn!(
                            dropped = n + 1,
                            "routing log writer is behind; records dropped"
                        );
                    }
                }
            }
            Inner::Memory { records, notify } => {
                if let Ok(mut r) = records.lock() {
                    r.push(rec);
                }
                notify.notify_waiters();
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

    /// Waits until at least `n` records exist (memory sink only), or the timeout passes.
    pub async fn wait_for(&self, n: usize, timeout: std::time::Duration) -> Vec<RoutingRecord> {
        let Inner::Memory { records, notify } = &*self.inner else {
            return Vec::new();
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
        self.records()
    }
}

fn write_lines(mut rx: mpsc::Receiver<RoutingRecord>, out: Box<dyn Write + Send>) {
    let mut out = std::io::BufWriter::new(out);
    while let Some(rec) = rx.blocking_recv() {
        let mut write_one = |rec: &RoutingRecord| {
            if serde_json::to_writer(&mut out, rec).is_ok() {
                let _ = out.write_all(b"\n");
            }
        };
        write_one(&rec);
        while let Ok(more) = rx.try_recv() {
            write_one(&more);
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_request_id_serialises_as_its_string() {
        let id = RequestId::next();
        assert_eq!(serde_json::to_string(&id).ok(), Some(format!("\"{id}\"")));
        assert_eq!(format!("{id:?}"), format!("\"{id}\""));
    }
}
