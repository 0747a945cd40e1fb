//! Server-sent events: an incremental decoder (bytes in, events out) and the frame encoder.
//!
//! The gateway forwards upstream bytes untouched; it runs this decoder beside the byte stream only
//! to learn what the events mean (preamble, content, error, done).

use bytes::{Bytes, BytesMut};

/// One decoded event. `data` lines are joined with `\n` as the SSE spec says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Incremental SSE decoder. Feed it chunks in any split; it yields complete events.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: BytesMut,
    /// How far `buf` has been scanned for a line end without finding one.
    scanned: usize,
    pending: SseEvent,
    has_fields: bool,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes received but not yet part of a complete event.
    pub fn buffered_len(&self) -> usize {
        self.buf.len()
    }

    /// The next complete event, if one has fully arrived.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let nl = self.buf[self.scanned..]
                .iter()
                .position(|b| *b == b'\n' || *b == b'\r');
            let Some(rel) = nl else {
                self.scanned = self.buf.len();
                return None;
            };
            let end = self.scanned + rel;
            // A lone '\r' at the end of the buffer may be the first half of "\r\n": wait.
            if self.buf[end] == b'\r' && end + 1 == self.buf.len() {
                self.scanned = end;
                return None;
            }
            let line = self.buf.split_to(end);
            let skip = if self.buf.starts_with(b"\r\n") { 2 } else { 1 };
            let _ = self.buf.split_to(skip);
            self.scanned = 0;
            if line.is_empty() {
                if self.has_fields {
                    self.has_fields = false;
                    return Some(std::mem::take(&mut self.pending));
                }
                continue;
            }
            self.field(&line);
        }
    }

    fn field(&mut self, line: &[u8]) {
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let (name, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => {
                if self.has_fields && !self.pending.data.is_empty() {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(&value);
                self.has_fields = true;
            }
            b"event" => {
                self.pending.event = Some(value.into_owned());
                self.has_fields = true;
            }
            _ => {} // id, retry: not used by LLM streams
        }
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
}
