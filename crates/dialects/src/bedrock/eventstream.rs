//! The AWS event-stream binary framing (`application/vnd.amazon.eventstream`) that
//! InvokeModelWithResponseStream and ConverseStream answer with (wire-formats.md §2.4).
//!
//! Encoding and frame parsing are done by `aws-smithy-eventstream`; this module adds the three
//! header sets Bedrock uses (event, exception, error), an incremental decoder that buffers partial
//! frames and refuses absurd lengths before waiting for them, and a flat [`Frame`] view.

use aws_smithy_eventstream::frame::{write_message_to, DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use aws_smithy_types::str_bytes::StrBytes;
use bytes::{Bytes, BytesMut};

/// The HTTP content type of an event-stream response body.
pub const CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// Prelude: total length, headers length, prelude CRC.
const PRELUDE_LEN: usize = 12;
/// Prelude plus the trailing message CRC.
const OVERHEAD: u32 = 16;
/// botocore's limits (`botocore/eventstream.py`): headers ≤ 128 KiB, payload ≤ 24 MiB. A frame
/// that declares more is refused at once instead of being buffered for.
const MAX_HEADERS_LEN: u32 = 128 * 1024;
const MAX_PAYLOAD_LEN: u32 = 24 * 1024 * 1024;

fn string_header(name: &'static str, value: &str) -> Header {
    Header::new(name, HeaderValue::String(StrBytes::from(value.to_owned())))
}

fn encode(headers: Vec<Header>, payload: Bytes) -> Bytes {
    let message = Message::new_from_parts(headers, payload);
    let mut out = BytesMut::with_capacity(message.payload().len() + 128);
    // Writing fails only for a header value over 32 767 bytes or a frame over 4 GiB; the names
    // and types Bedrock uses are short, so an empty result here means a caller bug.
    match write_message_to(&message, &mut out) {
        Ok(()) => out.freeze(),
        Err(_) => Bytes::new(),
    }
}

/// An `event` frame: `:event-type` (the union member, e.g. `chunk`, `contentBlockDelta`),
/// `:content-type: application/json`, `:message-type: event`.
pub fn event_frame(event_type: &str, payload: &[u8]) -> Bytes {
    encode(
        vec![
            string_header(":event-type", event_type),
            string_header(":content-type", "application/json"),
            string_header(":message-type", "event"),
        ],
        Bytes::copy_from_slice(payload),
    )
}

/// An `exception` frame with payload `{"message":…}`. `exception_type` must be the lowerCamel
/// union member name (`throttlingException`, `modelStreamErrorException`, …): botocore reports an
/// empty code for anything else (wire-formats.md §2.4).
pub fn exception_frame(exception_type: &str, message: &str) -> Bytes {
    let payload = serde_json::json!({ "message": message }).to_string();
    encode(
        vec![
            string_header(":exception-type", exception_type),
            string_header(":content-type", "application/json"),
            string_header(":message-type", "exception"),
        ],
        Bytes::from(payload),
    )
}

/// One decoded frame, flattened to the headers Bedrock uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `event`, `exception` or `error`.
    pub message_type: String,
    pub event_type: Option<String>,
    pub exception_type: Option<String>,
    /// `:error-code` of an `error` frame.
    pub error_code: Option<String>,
    /// `:error-message` of an `error` frame.
    pub error_message: Option<String>,
    pub payload: Bytes,
}

/// Why an event stream could not be decoded. The stream cannot be resumed after one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid event stream: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// Incremental decoder: feed it bytes split anywhere, get whole frames back.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: BytesMut,
    inner: MessageFrameDecoder,
    /// The prelude at the front of `buf` (or already taken by `inner`) has been validated.
    prelude_checked: bool,
    failed: Option<DecodeError>,
    /// Frames declaring more than this many bytes are refused (0: only botocore's limits).
    limit: usize,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    /// Refuses, at its prelude, a frame that declares more than `limit` bytes.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Adds `bytes` and returns every frame completed by them.
    ///
    /// A corrupt frame (bad CRC, impossible lengths, bad headers) is an error and ends the stream:
    /// every later call returns the same error. Frames completed before the corrupt one in the
    /// same call are returned first (`Ok`), and the error on the next call; [`FrameDecoder::error`]
    /// shows it at once.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Frame>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.buf.extend_from_slice(bytes);
        let mut frames = Vec::new();
        match self.drain(&mut frames) {
            Ok(()) => Ok(frames),
            Err(e) => {
                self.failed = Some(e.clone());
                if frames.is_empty() {
                    Err(e)
                } else {
                    Ok(frames)
                }
            }
        }
    }

    /// The error that ended the stream, if one did.
    pub fn error(&self) -> Option<&DecodeError> {
        self.failed.as_ref()
    }

    /// Bytes received that are not yet part of a whole frame (including a consumed prelude).
    pub fn buffered_len(&self) -> usize {
        self.buf.len() + if self.prelude_checked { PRELUDE_LEN } else { 0 }
    }

    fn drain(&mut self, frames: &mut Vec<Frame>) -> Result<(), DecodeError> {
        loop {
            if !self.prelude_checked {
                if self.buf.len() < PRELUDE_LEN {
                    return Ok(());
                }
                check_prelude(&self.buf[..PRELUDE_LEN], self.limit)?;
                self.prelude_checked = true;
            }
            match self.inner.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(message)) => {
                    self.prelude_checked = false;
                    frames.push(to_frame(&message)?);
                }
                Ok(DecodedFrame::Incomplete) => return Ok(()),
                Err(e) => return Err(DecodeError(e.to_string())),
            }
        }
    }
}

/// Validates a prelude before waiting for the rest of its frame, so a corrupt length cannot make
/// the decoder buffer gigabytes.
fn check_prelude(prelude: &[u8], limit: usize) -> Result<(), DecodeError> {
    let word =
        |i: usize| u32::from_be_bytes([prelude[i], prelude[i + 1], prelude[i + 2], prelude[i + 3]]);
    let (total, headers, crc) = (word(0), word(4), word(8));
    let computed = crc32(&prelude[..8]);
    if computed != crc {
        return Err(DecodeError(format!(
            "prelude checksum mismatch (expected {computed:#010x}, frame says {crc:#010x})"
        )));
    }
    if total < OVERHEAD || headers > total - OVERHEAD {
        return Err(DecodeError(format!(
            "frame length {total} cannot hold {headers} header bytes"
        )));
    }
    if headers > MAX_HEADERS_LEN || total - OVERHEAD - headers > MAX_PAYLOAD_LEN {
        return Err(DecodeError(format!(
            "frame of {total} bytes exceeds the event-stream limits"
        )));
    }
    if limit > 0 && total as usize > limit {
        return Err(DecodeError(format!(
            "frame of {total} bytes exceeds server.maxStreamEventBytes ({limit})"
        )));
    }
    Ok(())
}

/// CRC-32/IEEE (as zlib), bitwise: only ever run over an 8-byte prelude here.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

fn to_frame(message: &Message) -> Result<Frame, DecodeError> {
    let mut frame = Frame {
        message_type: String::new(),
        event_type: None,
        exception_type: None,
        error_code: None,
        error_message: None,
        payload: message.payload().clone(),
    };
    let mut has_type = false;
    for header in message.headers() {
        let Ok(value) = header.value().as_string() else {
            continue; // Bedrock's headers are all strings; ignore other types.
        };
        let value = value.as_str().to_owned();
        match header.name().as_str() {
            ":message-type" => {
                frame.message_type = value;
                has_type = true;
            }
            ":event-type" => frame.event_type = Some(value),
            ":exception-type" => frame.exception_type = Some(value),
            ":error-code" => frame.error_code = Some(value),
            ":error-message" => frame.error_message = Some(value),
            _ => {}
        }
    }
    if !has_type {
        return Err(DecodeError("frame without a :message-type header".into()));
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn absurd_lengths_are_refused_without_waiting() {
        let mut prelude = Vec::new();
        prelude.extend_from_slice(&u32::MAX.to_be_bytes());
        prelude.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32(&prelude);
        prelude.extend_from_slice(&crc.to_be_bytes());
        let mut d = FrameDecoder::new();
        assert!(d.push(&prelude).is_err());
        assert!(d.push(b"").is_err());
    }
}
