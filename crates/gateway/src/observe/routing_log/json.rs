//! The routing log's JSON lines, written by hand into a reused buffer on the writer thread.
//!
//! The same bytes as `serde_json` on the derived `Serialize` of [`RoutingRecord`] (field names,
//! order, number and string formats; the tests compare both on many records), at a fraction of
//! the cost: the keys are constant text, strings that need no escaping are copied as they are,
//! and the timestamp's date and time down to the second is formatted once per second.

use sidetrack_resilience::retry::AttemptKind;

use super::{AttemptRecord, RoutingRecord, SkipRecord};

/// The writer thread's state between records: the formatted second of the last timestamp.
#[derive(Default)]
pub(super) struct LineWriter {
    /// Seconds since the Unix epoch of `second`, and its `YYYY-MM-DDTHH:MM:SS.` text.
    cached: Option<(u64, [u8; 20])>,
}

impl LineWriter {
    /// Appends `rec` as one JSON object (no newline) to `out`.
    pub(super) fn write(&mut self, out: &mut Vec<u8>, rec: &RoutingRecord) {
        out.extend_from_slice(b"{\"ts\":\"");
        self.timestamp(out, rec.ts);
        out.extend_from_slice(b"\",\"requestId\":");
        string(out, rec.request_id.as_str());
        out.extend_from_slice(b",\"principal\":");
        string(out, &rec.principal);
        out.extend_from_slice(b",\"dialect\":");
        string(out, rec.dialect);
        out.extend_from_slice(b",\"requestPath\":");
        string(out, &rec.request_path);
        out.extend_from_slice(b",\"requestedModel\":");
        opt_string(out, rec.requested_model.as_deref());
        out.extend_from_slice(b",\"ruleName\":");
        opt_string(out, rec.rule_name.as_deref());
        out.extend_from_slice(b",\"matchType\":");
        opt_string(out, rec.match_type);
        out.extend_from_slice(b",\"outcome\":");
        string(out, rec.outcome.as_str());
        out.extend_from_slice(b",\"reason\":");
        string(out, &rec.reason);
        out.extend_from_slice(b",\"servedBy\":");
        match &rec.served_by {
            Some(s) => {
                out.extend_from_slice(b"{\"target\":");
                string(out, &s.target);
                out.extend_from_slice(b",\"model\":");
                string(out, &s.model);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"status\":");
        uint(out, u64::from(rec.status));
        out.extend_from_slice(b",\"fallbackHop\":");
        opt_uint(out, rec.fallback_hop.map(|h| h as u64));
        out.extend_from_slice(b",\"attempts\":");
        array(out, &rec.attempts, attempt);
        out.extend_from_slice(b",\"skipped\":");
        array(out, &rec.skipped, skip);
        out.extend_from_slice(b",\"streamed\":");
        boolean(out, rec.streamed);
        out.extend_from_slice(b",\"committed\":");
        boolean(out, rec.committed);
        out.extend_from_slice(b",\"midStreamError\":");
        boolean(out, rec.mid_stream_error);
        out.extend_from_slice(b",\"latencyMs\":");
        float(out, rec.latency_ms);
        out.extend_from_slice(b",\"ttftMs\":");
        opt_float(out, rec.ttft_ms);
        out.extend_from_slice(b",\"deadlineMs\":");
        uint(out, rec.deadline_ms);
        out.extend_from_slice(b",\"usage\":");
        match &rec.usage {
            Some(u) => {
                out.extend_from_slice(b"{\"inputTokens\":");
                uint(out, u.input_tokens);
                out.extend_from_slice(b",\"outputTokens\":");
                uint(out, u.output_tokens);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
    }

    /// RFC 3339 with milliseconds, as `humantime::format_rfc3339_millis` writes it; that
    /// formatter runs once per second of timestamps (and for any time before the epoch).
    fn timestamp(&mut self, out: &mut Vec<u8>, ts: std::time::SystemTime) {
        let Ok(since) = ts.duration_since(std::time::UNIX_EPOCH) else {
            out.extend_from_slice(humantime::format_rfc3339_millis(ts).to_string().as_bytes());
            return;
        };
        let secs = since.as_secs();
        let prefix = match self.cached {
            Some((s, prefix)) if s == secs => prefix,
            _ => {
                let whole = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
                let text = humantime::format_rfc3339_millis(whole).to_string();
                let Some(head) = text
                    .as_bytes()
                    .get(..20)
                    .and_then(|h| <[u8; 20]>::try_from(h).ok())
                else {
                    // A year past 9999 or some other shape: not cached.
                    out.extend_from_slice(
                        humantime::format_rfc3339_millis(ts).to_string().as_bytes(),
                    );
                    return;
                };
                self.cached = Some((secs, head));
                head
            }
        };
        out.extend_from_slice(&prefix);
        let millis = since.subsec_millis();
        out.extend_from_slice(&[
            b'0' + (millis / 100) as u8,
            b'0' + (millis / 10 % 10) as u8,
            b'0' + (millis % 10) as u8,
            b'Z',
        ]);
    }
}

/// `[item,item,…]`, each item written by `write`.
fn array<T>(out: &mut Vec<u8>, items: &[T], write: fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(b']');
}

fn attempt(out: &mut Vec<u8>, a: &AttemptRecord) {
    out.extend_from_slice(b"{\"hop\":");
    uint(out, a.hop as u64);
    out.extend_from_slice(b",\"target\":");
    string(out, &a.target);
    out.extend_from_slice(b",\"model\":");
    string(out, &a.model);
    // The kind's whole member at once: three constants, nothing to escape.
    out.extend_from_slice(match a.kind {
        AttemptKind::First => b",\"kind\":\"FIRST\",\"outcome\":",
        AttemptKind::Retry => b",\"kind\":\"RETRY\",\"outcome\":",
        AttemptKind::Hedge => b",\"kind\":\"HEDGE\",\"outcome\":",
    });
    string(out, a.outcome.label());
    out.extend_from_slice(b",\"status\":");
    opt_uint(out, a.status.map(u64::from));
    out.extend_from_slice(b",\"errorKind\":");
    opt_string(out, a.error_kind);
    if let Some(class) = a.error_class {
        out.extend_from_slice(b",\"errorClass\":");
        string(out, class.as_str());
    }
    if let Some(detail) = &a.detail {
        out.extend_from_slice(b",\"detail\":");
        string(out, detail);
    }
    if let Some(stopped) = a.stopped_by {
        out.extend_from_slice(b",\"stoppedBy\":");
        string(out, stopped.as_str());
    }
    out.extend_from_slice(b",\"durationMs\":");
    float(out, a.duration_ms);
    out.extend_from_slice(b",\"firstByteMs\":");
    opt_float(out, a.first_byte_ms);
    out.extend_from_slice(b",\"breaker\":");
    string(out, a.breaker);
    out.push(b'}');
}

fn skip(out: &mut Vec<u8>, s: &SkipRecord) {
    out.extend_from_slice(b"{\"hop\":");
    uint(out, s.hop as u64);
    out.extend_from_slice(b",\"target\":");
    string(out, &s.target);
    out.extend_from_slice(b",\"model\":");
    string(out, &s.model);
    out.extend_from_slice(b",\"why\":");
    string(out, s.why.as_str());
    if let Some(detail) = &s.detail {
        out.extend_from_slice(b",\"detail\":");
        string(out, detail);
    }
    out.push(b'}');
}

/// A JSON string: copied as it is when nothing in it needs escaping, else escaped by serde_json.
fn string(out: &mut Vec<u8>, s: &str) {
    if !needs_escape(s.as_bytes()) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// Whether any byte is a control character, `"` or `\\` (what serde_json escapes), eight bytes
/// at a time: a byte below `n` sets its top bit in `(w - n·0x01…) & !w & 0x80…`.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH != 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(<[u8; 8]>::try_from(word).unwrap_or_default());
        if below(w, 0x20)
            || below(w ^ (ONES * u64::from(b'"')), 1)
            || below(w ^ (ONES * u64::from(b'\\')), 1)
        {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn uint(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn opt_uint(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => uint(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

/// A number as serde_json writes an `f64` (shortest round-trip form; `null` if not finite).
fn float(out: &mut Vec<u8>, f: f64) {
    let _ = serde_json::to_writer(&mut *out, &f);
}

fn opt_float(out: &mut Vec<u8>, f: Option<f64>) {
    match f {
        Some(f) => float(out, f),
        None => out.extend_from_slice(b"null"),
    }
}

fn boolean(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::borrow::Cow;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use sidetrack_resilience::walk::{Ineligible, Skip};
    use sidetrack_resilience::Outcome;

    use super::super::{RequestId, RequestOutcome, ServedBy, UsageRecord};
    use super::*;

    const AWKWARD: [&str; 9] = [
        "plain",
        "",
        "quote \" inside",
        "back\\slash",
        "new\nline\ttab\r\u{8}\u{c}",
        "control \u{1} \u{1f} end",
        "del \u{7f} and ünïcödé ✓ 😀",
        "</script>",
        "\u{2028}\u{2029}",
    ];

    const FLOATS: [f64; 12] = [
        0.0,
        -0.0,
        1.0,
        0.001,
        1e-7,
        3.759,
        122.973,
        123_456_789.125,
        1e21,
        f64::NAN,
        f64::INFINITY,
        f64::MAX,
    ];

    use sidetrack_resilience::retry::{AttemptKind, StoppedBy};
    use sidetrack_resilience::ErrorClass;

    fn attempt(i: usize) -> AttemptRecord {
        AttemptRecord {
            hop: i * 7,
            target: Arc::from(AWKWARD[i % AWKWARD.len()]),
            model: Arc::from(AWKWARD[(i + 3) % AWKWARD.len()]),
            outcome: if i.is_multiple_of(2) {
                Outcome::Success(200)
            } else {
                Outcome::Status(503)
            },
            status: (!i.is_multiple_of(3)).then_some(200 + i as u16),
            error_kind: (i % 2 == 1).then_some("UPSTREAM_5XX"),
            detail: (i % 4 == 1).then(|| AWKWARD[(i + 5) % AWKWARD.len()].to_owned()),
            duration_ms: FLOATS[i % FLOATS.len()],
            first_byte_ms: (!i.is_multiple_of(5)).then_some(FLOATS[(i + 4) % FLOATS.len()]),
            breaker: ["CLOSED", "HALF_OPEN", "OPEN"][i % 3],
            kind: [AttemptKind::First, AttemptKind::Retry, AttemptKind::Hedge][i % 3],
            error_class: (i % 3 == 1).then_some(ErrorClass::ContextLengthExceeded),
            stopped_by: (i % 4 == 2).then_some(StoppedBy::RetryBudget),
        }
    }

    fn record(i: usize) -> RoutingRecord {
        let ts = match i % 5 {
            0 => UNIX_EPOCH,
            1 => SystemTime::now(),
            2 => UNIX_EPOCH + Duration::from_millis(1_764_608_443_000 + (i as u64 * 37) % 2_500),
            3 => UNIX_EPOCH + Duration::from_nanos(253_402_300_799_999_999), // 9999-12-31T23:59:59.999
            _ => UNIX_EPOCH + Duration::from_nanos(1_700_000_000_999_999_999),
        };
        let skips = [
            Skip::Disabled,
            Skip::BreakerOpen,
            Skip::Ineligible(Ineligible::Tools),
            Skip::Ineligible(Ineligible::Translation),
        ];
        RoutingRecord {
            ts,
            request_id: RequestId::next(),
            principal: Arc::from(AWKWARD[i % AWKWARD.len()]),
            dialect: ["openai-chat", "anthropic", "bedrock"][i % 3],
            request_path: if i.is_multiple_of(2) {
                Cow::Borrowed("/v1/chat/completions")
            } else {
                Cow::Owned(format!("/model/{}/converse", AWKWARD[i % AWKWARD.len()]))
            },
            requested_model: (i % 3 != 2).then(|| AWKWARD[(i + 1) % AWKWARD.len()].to_owned()),
            rule_name: (i % 2 == 1).then(|| AWKWARD[(i + 2) % AWKWARD.len()].to_owned()),
            match_type: (i % 4 != 3).then_some("DEFAULT"),
            outcome: [
                RequestOutcome::Served,
                RequestOutcome::Error,
                RequestOutcome::Rejected,
                RequestOutcome::Cancelled,
            ][i % 4],
            reason: if i.is_multiple_of(2) {
                Cow::Borrowed("servedByPrimary")
            } else {
                Cow::Owned(format!("fallback {}", AWKWARD[i % AWKWARD.len()]))
            },
            served_by: (i % 3 != 1).then(|| ServedBy {
                target: Arc::from(AWKWARD[(i + 4) % AWKWARD.len()]),
                model: Arc::from("m"),
            }),
            status: [200, 429, 502, 0, 65535][i % 5],
            fallback_hop: (!i.is_multiple_of(3)).then_some(i % 4),
            attempts: (0..i % 4).map(|k| attempt(i + k)).collect(),
            skipped: (0..i % 3)
                .map(|k| SkipRecord {
                    hop: k,
                    target: Arc::from(AWKWARD[(i + k) % AWKWARD.len()]),
                    model: Arc::from("skipped-model"),
                    why: skips[(i + k) % skips.len()],
                    detail: ((i + k).is_multiple_of(2))
                        .then(|| AWKWARD[(i + 6) % AWKWARD.len()].to_owned()),
                })
                .collect(),
            streamed: i.is_multiple_of(2),
            committed: i.is_multiple_of(3),
            mid_stream_error: i.is_multiple_of(7),
            latency_ms: FLOATS[(i + 1) % FLOATS.len()],
            ttft_ms: (i.is_multiple_of(2)).then_some(FLOATS[(i + 2) % FLOATS.len()]),
            deadline_ms: (i as u64) * 1000,
            usage: (i % 3 != 2).then_some(UsageRecord {
                input_tokens: i as u64 * 1_000_003,
                output_tokens: if i.is_multiple_of(5) {
                    u64::MAX
                } else {
                    i as u64
                },
            }),
        }
    }

    #[test]
    fn lines_are_the_bytes_serde_json_writes_for_the_record() {
        // One writer for all records, so its per-second cache sees repeats and changes of second.
        let mut lines = LineWriter::default();
        let mut buf = Vec::new();
        for i in 0..400 {
            let rec = record(i);
            buf.clear();
            lines.write(&mut buf, &rec);
            let expected = serde_json::to_vec(&rec).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&buf),
                String::from_utf8_lossy(&expected),
                "record {i}"
            );
        }
    }

    #[test]
    fn strings_needing_escapes_are_found_at_every_position() {
        for len in 0..40 {
            for at in 0..len {
                for special in [b'"', b'\\', 0u8, 0x1f, b'\n'] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = special;
                    let s = std::str::from_utf8(&bytes).unwrap();
                    assert!(needs_escape(bytes.as_slice()), "{s:?}");
                    let mut buf = Vec::new();
                    string(&mut buf, s);
                    assert_eq!(buf, serde_json::to_vec(s).unwrap());
                }
            }
            let plain: String = (0..len)
                .map(|i| [' ', '~', '\u{7f}', 'é', '!', '#', '[', ']'][i % 8])
                .collect();
            assert!(!needs_escape(plain.as_bytes()), "{plain:?}");
        }
    }

    #[test]
    fn the_cached_second_is_not_reused_for_another_second() {
        let mut lines = LineWriter::default();
        let mut buf = Vec::new();
        let base = UNIX_EPOCH + Duration::from_millis(1_764_608_443_999);
        for ts in [
            base,
            base + Duration::from_millis(1),
            base - Duration::from_secs(86_400),
        ] {
            buf.clear();
            lines.timestamp(&mut buf, ts);
            assert_eq!(
                std::str::from_utf8(&buf).unwrap(),
                humantime::format_rfc3339_millis(ts).to_string()
            );
        }
    }
}
