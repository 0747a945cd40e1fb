//! Server-sent events: an incremental decoder (bytes in, events out) and the frame encoder.
//!
//! The gateway forwards upstream bytes untouched; it runs this decoder beside the byte stream only
//! to learn what the events mean (preamble, content, error, done).

use bytes::{Buf, Bytes, BytesMut};

/// One decoded event. `data` lines are joined with `\n` as the SSE spec says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// A dialect's stream decoder over SSE. The one push loop every such decoder runs is
/// [`SseStream::push_sse`]: events to the dialect's handler, and the first overflow of the bound as
/// the canonical protocol failure.
pub(crate) trait SseStream {
    /// The decoder's SSE framing.
    fn sse(&mut self) -> &mut SseDecoder;

    /// One complete event, turned into canonical events.
    fn on_event(&mut self, ev: &SseEvent, out: &mut Vec<crate::canonical::StreamEvent>);

    fn push_sse(&mut self, bytes: &[u8]) -> Vec<crate::canonical::StreamEvent> {
        self.sse().push(bytes);
        let mut out = Vec::new();
        while let Some(ev) = self.sse().next_event() {
            self.on_event(&ev, &mut out);
        }
        if self.sse().take_overflow() {
            out.push(crate::canonical::StreamEvent::protocol_failure(
                crate::canonical::EVENT_TOO_LARGE,
            ));
        }
        out
    }
}

/// The default bound on one line or one event (`server.maxStreamEventBytes`, SPEC §14).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Incremental SSE decoder. Feed it chunks in any split; it yields complete events.
///
/// Bounded: a line, or an event's joined data, longer than its limit (default
/// [`DEFAULT_MAX_EVENT_BYTES`]) is an overflow — the buffered bytes are dropped, no event comes
/// any more, later input is ignored and [`SseDecoder::overflowed`] says so. An upstream that never
/// ends a line or an event cannot grow the decoder past its limit.
#[derive(Debug)]
pub struct SseDecoder {
    buf: BytesMut,
    /// How far `buf` has been scanned for a line end without finding one.
    scanned: usize,
    pending: SseEvent,
    has_fields: bool,
    limit: usize,
    overflowed: bool,
    /// The overflow has been reported by [`SseDecoder::take_overflow`].
    reported: bool,
}

impl Default for SseDecoder {
    fn default() -> SseDecoder {
        SseDecoder::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// A decoder whose lines and events may be at most `limit` bytes.
    pub fn with_limit(limit: usize) -> SseDecoder {
        SseDecoder {
            buf: BytesMut::new(),
            scanned: 0,
            pending: SseEvent::default(),
            has_fields: false,
            limit,
            overflowed: false,
            reported: false,
        }
    }

    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// A line or an event went past the limit: the decoder has stopped.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// True once, the first time it is asked after an overflow (a decoder reports it once).
    pub fn take_overflow(&mut self) -> bool {
        let first = self.overflowed && !self.reported;
        self.reported |= first;
        first
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if !self.overflowed {
            self.buf.extend_from_slice(chunk);
        }
    }

    /// Stops the decoder and frees what it held.
    fn overflow(&mut self) {
        self.overflowed = true;
        self.buf = BytesMut::new();
        self.pending = SseEvent::default();
        self.has_fields = false;
        self.scanned = 0;
    }

    /// Bytes received but not yet part of a complete event.
    pub fn buffered_len(&self) -> usize {
        self.buf.len()
    }

    /// Nothing of an event is pending: the next byte pushed starts one.
    pub fn at_event_start(&self) -> bool {
        self.buf.is_empty() && !self.has_fields
    }

    /// The next complete event, if one has fully arrived. Lines are found with `memchr` and read in
    /// place; the consumed bytes are dropped from the buffer once, not line by line (this runs on
    /// every event of every stream the gateway relays).
    pub fn next_event(&mut self) -> Option<SseEvent> {
        let mut start = 0;
        let event = loop {
            let from = start.max(self.scanned);
            let Some(rel) = memchr::memchr2(b'\n', b'\r', &self.buf[from..]) else {
                // An unfinished line: bounded together with the event it belongs to.
                if self.buf.len() - start + self.pending.data.len() > self.limit {
                    self.overflow();
                    return None;
                }
                self.scanned = self.buf.len();
                break None;
            };
            let end = from + rel;
            // A lone '\r' at the end of the buffer may be the first half of "\r\n": wait.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                self.scanned = end;
                break None;
            }
            let next = if self.buf[end..].starts_with(b"\r\n") {
                end + 2
            } else {
                end + 1
            };
            let line = &self.buf[start..end];
            start = next;
            self.scanned = next;
            if line.is_empty() {
                if self.has_fields {
                    self.has_fields = false;
                    break Some(std::mem::take(&mut self.pending));
                }
                continue;
            }
            field(&mut self.pending, &mut self.has_fields, line);
            if self.pending.data.len() > self.limit {
                self.overflow();
                return None;
            }
        };
        self.buf.advance(start);
        self.scanned -= start;
        event
    }
}

/// Applies one non-empty line to the event being assembled.
fn field(pending: &mut SseEvent, has_fields: &mut bool, line: &[u8]) {
    if line[0] == b':' {
        return; // comment / keep-alive
    }
    let (name, value) = match memchr::memchr(b':', line) {
        Some(i) => {
            let v = &line[i + 1..];
            (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
        }
        None => (line, &[][..]),
    };
    // Valid UTF-8 is the norm: check it with the fast validator, fall back to lossy decoding.
    let value = match std::str::from_utf8(value) {
        Ok(v) => std::borrow::Cow::Borrowed(v),
        Err(_) => String::from_utf8_lossy(value),
    };
    match name {
        b"data" => {
            if *has_fields && !pending.data.is_empty() {
                pending.data.push('\n');
            }
            pending.data.push_str(&value);
            *has_fields = true;
        }
        b"event" => {
            pending.event = Some(value.into_owned());
            *has_fields = true;
        }
        _ => {} // id, retry: not used by LLM streams
    }
}

/// Encodes one event as SSE bytes: an optional `event:` line, `data:` lines, a blank line.
pub fn encode(event: Option<&str>, data: &str) -> Bytes {
    let mut out = String::with_capacity(data.len() + 32);
    if let Some(e) = event {
        out.push_str("event: ");
        out.push_str(e);
        out.push('\n');
    }
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut SseDecoder) -> Vec<SseEvent> {
        std::iter::from_fn(|| d.next_event()).collect()
    }

    #[test]
    fn decodes_events_split_at_every_byte() {
        let src = b"event: message_start\ndata: {\"a\":1}\n\n: keepalive\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
        let mut d = SseDecoder::new();
        let mut got = Vec::new();
        for b in src.iter() {
            d.push(&[*b]);
            got.extend(all(&mut d));
        }
        assert_eq!(
            got,
            vec![
                SseEvent {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "x\ny".into()
                },
                SseEvent {
                    event: None,
                    data: "[DONE]".into()
                },
            ]
        );
        assert_eq!(d.buffered_len(), 0);
    }

    #[test]
    fn incomplete_event_stays_buffered() {
        let mut d = SseDecoder::new();
        d.push(b"data: {\"partial\"");
        assert_eq!(d.next_event(), None);
        d.push(b":true}\n");
        assert_eq!(d.next_event(), None);
        d.push(b"\n");
        assert_eq!(d.next_event().unwrap().data, "{\"partial\":true}");
    }

    #[test]
    fn encode_round_trips() {
        let bytes = encode(Some("error"), "{\"x\":1}");
        assert_eq!(&bytes[..], b"event: error\ndata: {\"x\":1}\n\n");
        let mut d = SseDecoder::new();
        d.push(&bytes);
        assert_eq!(d.next_event().unwrap().event.as_deref(), Some("error"));
    }

    /// Feeds `piece` until the decoder overflows or `max_pushes` pieces went in; returns how many.
    fn pushes_until_overflow(d: &mut SseDecoder, piece: &[u8], max_pushes: usize) -> usize {
        for i in 1..=max_pushes {
            d.push(piece);
            while d.next_event().is_some() {}
            if d.overflowed() {
                return i;
            }
        }
        max_pushes
    }

    #[test]
    fn an_endless_line_comment_or_event_overflows_at_the_limit() {
        let a = vec![b'a'; 1000];
        let mut line = b"data: ".to_vec();
        line.extend_from_slice(&a);
        line.push(b'\n');
        for (start, piece) in [
            (&b"data: "[..], &a[..]), // one data line that never ends
            (&b": "[..], &a[..]),     // one comment line that never ends
            (&b""[..], &line[..]),    // data lines, never the blank line
        ] {
            let mut d = SseDecoder::with_limit(10_000);
            d.push(start);
            let n = pushes_until_overflow(&mut d, piece, 100);
            assert!((10..=12).contains(&n), "overflowed after {n} pieces");
            assert_eq!(d.buffered_len(), 0, "what it held is freed");
            assert!(d.take_overflow());
            assert!(!d.take_overflow(), "reported once");
            d.push(b"\n\ndata: late\n\n");
            assert_eq!(d.next_event(), None, "nothing decodes after an overflow");
        }
    }

    #[test]
    fn events_up_to_the_limit_pass_and_many_small_ones_never_overflow() {
        let mut d = SseDecoder::with_limit(100);
        let data = "x".repeat(100);
        d.push(format!("data: {data}\n\n").as_bytes());
        assert_eq!(d.next_event().map(|e| e.data), Some(data));
        for _ in 0..1000 {
            d.push(b"data: {\"k\":1}\n\n: ping\n\n");
            while d.next_event().is_some() {}
        }
        assert!(!d.overflowed());
        d.push(format!("data: {}\n\n", "y".repeat(101)).as_bytes());
        assert_eq!(d.next_event(), None);
        assert!(d.overflowed());
    }
}
