//! Carries one upstream stream to the caller: bytes in the upstream's format go in, bytes in the
//! caller's format come out, and what the stream has said so far (content, end, error, usage) is
//! kept for the commit decision and the routing log.
//!
//! Three ways through, chosen once per attempt:
//! - OpenAI chat to OpenAI chat: bytes pass unchanged; a cheap SSE classifier watches them (the hot
//!   path, no JSON tree per chunk).
//! - Same format otherwise: bytes pass unchanged; the format's canonical decoder watches them.
//! - Different formats: the upstream decoder turns bytes into canonical events and the caller's
//!   encoder renders them, event by event (no whole-response buffering).

use bytes::{Bytes, BytesMut};
use sidetrack_dialects::canonical::StreamEvent as Event;
use sidetrack_dialects::sse::SseDecoder;
use sidetrack_dialects::translate::{Decode, Encode};
use sidetrack_dialects::{openai_chat, Dialect, StreamEventClass, Usage};
use smallvec::SmallVec;

/// What a stream has said so far.
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    /// A content-bearing event (text, tool call, refusal, finish) has been seen.
    pub seen_content: bool,
    /// The stream's explicit end has been seen (`[DONE]`, `message_stop`, `messageStop`, …).
    pub seen_done: bool,
    /// The first in-stream error: the status its type stands for, and the type.
    pub error: Option<(u16, String)>,
    pub usage: Option<Usage>,
    /// The upstream's stream broke a bound or its framing (SPEC §14): the knob or event behind it.
    /// The pipe has stopped reading; the attempt fails (502) before the commit, and after it the
    /// caller's stream ends with the explicit error.
    pub protocol_failure: Option<&'static str>,
}

/// Why a stream stopped being read: an SSE line or event over `server.maxStreamEventBytes`.
const EVENT_TOO_LARGE: &str = "streamEventTooLarge";
/// An event-stream that does not decode (or declares a frame over the bound).
const UNDECODABLE: &str = "undecodableStream";

pub struct Pipe {
    upstream: Dialect,
    caller: Dialect,
    way: Way,
    state: StreamState,
    /// A chat pass-through decoder holds only whole events, so the next chunk starts an event
    /// and can be classified in place ([`Pipe::feed_until_decided`]).
    at_event_start: bool,
    /// Chunks classified in place before the commit and not yet given to the decoder: they are
    /// pushed into it (a copy) when it is next read, after the first bytes went out.
    unread: SmallVec<[Bytes; 2]>,
    /// With a usage chunk to keep from the caller: the bytes of an event not yet whole.
    strip: Option<BytesMut>,
    /// The caller's bytes so far end inside an event (an error tail must first end it).
    caller_mid_event: bool,
    /// The hop's `streamIdleTimeoutMilliseconds` (SPEC §11), which the relay enforces after the
    /// commit.
    idle_timeout: Option<std::time::Duration>,
}

/// Does `chunk` end with a blank line (the end of an SSE event)?
fn ends_an_event(chunk: &[u8]) -> bool {
    chunk.ends_with(b"\n\n") || chunk.ends_with(b"\r\n\r\n")
}

/// Is there a `[]` in `chunk`? (One `[` or two per chat chunk: cheaper than a substring search.)
fn has_empty_list(chunk: &[u8]) -> bool {
    memchr::memchr_iter(b'[', chunk).any(|i| chunk.get(i + 1) == Some(&b']'))
}

/// The positions just past each blank line (`\n\n` or `\r\n\r\n`) ending at or after `from`.
fn event_ends(buf: &[u8], from: usize) -> impl Iterator<Item = usize> + '_ {
    memchr::memchr_iter(b'\n', &buf[from..])
        .map(move |i| from + i)
        .filter(|&i| (i >= 1 && buf[i - 1] == b'\n') || (i >= 3 && &buf[i - 3..i] == b"\r\n\r"))
        .map(|i| i + 1)
}

/// Past this, an event that never ends (no blank line) is passed on as it is.
const MAX_CARRY: usize = 64 * 1024;

enum Way {
    ChatPassthrough(SseDecoder),
    Watched(Box<dyn Decode>),
    Translated {
        decoder: Box<dyn Decode>,
        encoder: Box<dyn Encode>,
    },
}

impl Pipe {
    /// A pipe from an upstream speaking `upstream` to a caller speaking `caller`. `id` and `model`
    /// name the message in a translated stream; no upstream event may exceed `max_event` bytes.
    /// `strip_usage`: the gateway asked an OpenAI chat upstream for the usage chunk the caller did
    /// not ask for; it is read, and kept from the caller ([`Pipe::outgoing`]). `caller_usage`: the
    /// caller asked for usage in the stream (`stream_options.include_usage`); a translated OpenAI
    /// chat stream carries the usage chunk only then (SPEC §5.7).
    pub fn new(
        upstream: Dialect,
        caller: Dialect,
        id: &str,
        model: &str,
        max_event: usize,
        strip_usage: bool,
        caller_usage: bool,
    ) -> Pipe {
        let decoder = || {
            let mut d = upstream.stream_decoder();
            d.set_max_event_bytes(max_event);
            d
        };
        let way = if upstream == caller {
            match upstream {
                Dialect::OpenAiChat => Way::ChatPassthrough(SseDecoder::with_limit(max_event)),
                _ => Way::Watched(decoder()),
            }
        } else {
            Way::Translated {
                decoder: decoder(),
                encoder: caller.stream_encoder(id, model, caller_usage),
            }
        };
        Pipe {
            upstream,
            caller,
            way,
            state: StreamState::default(),
            at_event_start: true,
            unread: SmallVec::new(),
            strip: strip_usage.then(BytesMut::new),
            caller_mid_event: false,
            idle_timeout: None,
        }
    }

    /// Sets the longest silence allowed between upstream chunks after the commit.
    pub fn set_idle_timeout(&mut self, idle: Option<std::time::Duration>) {
        self.idle_timeout = idle;
    }

    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        self.idle_timeout
    }

    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// True when the caller gets the upstream's bytes unchanged (the pipe only watches them), so
    /// they can be forwarded before they are read ([`Pipe::watch`]).
    pub fn passes_through(&self) -> bool {
        !matches!(self.way, Way::Translated { .. })
    }

    /// Reads bytes the caller already got unchanged (a pass-through pipe), to learn what they said.
    pub fn watch(&mut self, chunk: &[u8]) {
        match &mut self.way {
            Way::ChatPassthrough(decoder) => {
                push_unread(decoder, &mut self.unread);
                decoder.push(chunk);
                read_chat(decoder, &mut self.state, false);
            }
            Way::Watched(decoder) => {
                for ev in decoder.push(chunk) {
                    watched(&mut self.state, &ev);
                }
                decoder_failure(&mut self.state, decoder.as_ref(), self.upstream);
            }
            Way::Translated { .. } => {}
        }
    }

    /// Before the commit: like [`Pipe::feed`], but a pass-through chat stream only learns what
    /// decides the commit (content, end or error), so little runs between the upstream's chunk and
    /// the caller's first token. A chunk of whole single-line events is decided in place
    /// ([`openai_chat::classify_chunk_before_content`]) and kept unread, outside the decoder;
    /// anything else is read through the decoder up to the first deciding event. What is left is
    /// read by the next [`Pipe::watch`] or [`Pipe::catch_up`] (usage, a later error event), which
    /// run after the bytes went out. The whole chunk is returned either way.
    pub fn feed_until_decided(&mut self, chunk: Bytes) -> Bytes {
        match &mut self.way {
            Way::ChatPassthrough(decoder) => {
                let in_place = if self.at_event_start {
                    openai_chat::classify_chunk_before_content(&chunk)
                } else {
                    None
                };
                match in_place {
                    Some(meaning) => {
                        classified(&mut self.state, meaning);
                        self.unread.push(chunk.clone());
                    }
                    None => {
                        // Events already decided in place are read again here; they decide nothing.
                        push_unread(decoder, &mut self.unread);
                        decoder.push(&chunk);
                        read_chat(decoder, &mut self.state, true);
                        self.at_event_start = decoder.at_event_start();
                    }
                }
                self.outgoing(chunk)
            }
            _ => self.feed(chunk),
        }
    }

    /// The bytes of a chat pass-through chunk the caller gets: all of them, unless the gateway
    /// asked for a usage chunk the caller did not ask for — then that event is left out. A chunk
    /// of whole events without `[]` (every content chunk) is passed as it is; others are cut at
    /// their last blank line (`\n\n` or `\r\n\r\n`), the usage event dropped, and the tail of
    /// an unfinished event kept for the next chunk (the caller could not read half an event
    /// sooner anyway). Only the new bytes are scanned each time.
    pub fn outgoing(&mut self, chunk: Bytes) -> Bytes {
        let Some(carry) = self.strip.as_mut() else {
            self.caller_mid_event = !ends_an_event(&chunk);
            return chunk;
        };
        if carry.is_empty() && ends_an_event(&chunk) && !has_empty_list(&chunk) {
            self.caller_mid_event = false;
            return chunk;
        }
        let from = carry.len().saturating_sub(3);
        carry.extend_from_slice(&chunk);
        let Some(end) = event_ends(carry, from).last() else {
            if carry.len() > MAX_CARRY {
                // An event that never ends: passed on as it is (the stream's own bound applies).
                self.caller_mid_event = true;
                return carry.split().freeze();
            }
            return Bytes::new();
        };
        let whole = carry.split_to(end);
        let mut out = BytesMut::with_capacity(whole.len());
        let mut start = 0;
        for end in event_ends(&whole, 0) {
            let event = &whole[start..end];
            if !is_usage_chunk(event) {
                out.extend_from_slice(event);
            }
            start = end;
        }
        self.caller_mid_event = false;
        out.freeze()
    }

    /// True when the caller does not get the upstream's bytes exactly as they came (translated, or
    /// a usage chunk left out): their `content-encoding` no longer describes them.
    pub fn rewrites_bytes(&self) -> bool {
        !self.passes_through() || self.strip.is_some()
    }

    /// What [`Pipe::outgoing`] still holds of an unfinished event, for the stream's clean end.
    pub fn take_carry(&mut self) -> Option<Bytes> {
        self.strip
            .as_mut()
            .filter(|c| !c.is_empty())
            .map(|c| c.split().freeze())
    }

    /// Reads whatever [`Pipe::feed_until_decided`] left in the decoder.
    pub fn catch_up(&mut self) {
        if let Way::ChatPassthrough(decoder) = &mut self.way {
            push_unread(decoder, &mut self.unread);
            read_chat(decoder, &mut self.state, false);
        }
    }

    /// Takes upstream bytes; returns the bytes for the caller.
    pub fn feed(&mut self, chunk: Bytes) -> Bytes {
        match &mut self.way {
            Way::ChatPassthrough(_) | Way::Watched(_) => {
                self.watch(&chunk);
                chunk
            }
            Way::Translated { decoder, encoder } => {
                let mut out = BytesMut::new();
                let events = decoder.push(&chunk);
                let failed = decoder.failed();
                let last = events.len().saturating_sub(1);
                for (i, ev) in events.iter().enumerate() {
                    watched(&mut self.state, ev);
                    match ev {
                        // The decoder's own protocol failure (its last event) is the gateway's
                        // mid-stream failure, not the upstream's error event.
                        Event::Error { message, .. } if failed && i == last => {
                            out.extend_from_slice(&gateway_stream_error(
                                self.caller,
                                encoder.as_mut(),
                                message,
                            ));
                        }
                        _ => out.extend_from_slice(&encoder.encode(ev)),
                    }
                }
                decoder_failure(&mut self.state, decoder.as_ref(), self.upstream);
                out.freeze()
            }
        }
    }

    /// The upstream's stream ended: what its decoder still held back (a ConverseStream `Stop`
    /// waiting for `metadata`) is read, and for a translated stream rendered for the caller.
    pub fn end(&mut self) -> Bytes {
        self.catch_up();
        match &mut self.way {
            Way::ChatPassthrough(_) => Bytes::new(),
            Way::Watched(decoder) => {
                for ev in decoder.finish() {
                    watched(&mut self.state, &ev);
                }
                Bytes::new()
            }
            Way::Translated { decoder, encoder } => {
                let mut out = BytesMut::new();
                for ev in decoder.finish() {
                    watched(&mut self.state, &ev);
                    out.extend_from_slice(&encoder.encode(&ev));
                }
                out.freeze()
            }
        }
    }

    /// The bytes that end the caller's stream with an explicit error after an upstream failure —
    /// `None` when the caller already received the upstream's own error event.
    ///
    /// After a protocol failure on a stream the caller gets unchanged, the caller already has part
    /// of the offending line or event: an SSE caller's error event then starts with a blank line,
    /// so that it stands as an event of its own at the end of the stream.
    pub fn error_tail(&mut self, message: &str) -> Option<Bytes> {
        self.catch_up();
        let cut_mid_event = self.passes_through()
            && (self.state.protocol_failure.is_some() || self.caller_mid_event);
        if self.state.error.is_some() && !cut_mid_event {
            return None;
        }
        self.state.error.get_or_insert((502, "api_error".into()));
        match &mut self.way {
            Way::Translated { encoder, .. } => {
                Some(gateway_stream_error(self.caller, encoder.as_mut(), message))
            }
            _ => {
                let tail = self.caller.render_stream_error(message);
                if cut_mid_event && self.caller.is_sse() {
                    let mut out = BytesMut::with_capacity(tail.len() + 2);
                    out.extend_from_slice(b"\n\n");
                    out.extend_from_slice(&tail);
                    return Some(out.freeze());
                }
                Some(tail)
            }
        }
    }
}

/// The end of a translated stream after a failure of the gateway's own (the upstream's connection
/// lost, a bound or framing broken, a timeout): a 502 `api_error` through the caller's encoder,
/// which keeps an SSE caller's stream well formed; a Bedrock caller gets the frame the
/// same-dialect path sends, `modelStreamErrorException` (SPEC §5.6) — by its status alone, a 502
/// would map to `serviceUnavailableException`, which is what an upstream's own 502/503 event gives.
fn gateway_stream_error(caller: Dialect, encoder: &mut dyn Encode, message: &str) -> Bytes {
    let error = Event::Error {
        status: 502,
        error_type: "api_error".into(),
        message: message.to_owned(),
    };
    if caller.is_sse() {
        return encoder.encode(&error);
    }
    // The encoder ends its stream on the error; its own frame is not sent.
    drop(encoder.encode(&error));
    caller.render_stream_error(message)
}

/// One whole SSE event (its lines and the blank line): is it a chat chunk with `choices: []` and
/// a `usage` object?
fn is_usage_chunk(event: &[u8]) -> bool {
    if !has_empty_list(event) {
        return false;
    }
    let mut decoder = SseDecoder::new();
    decoder.push(event);
    decoder.next_event().is_some_and(|ev| {
        serde_json::from_str::<serde_json::Value>(&ev.data).is_ok_and(|v| {
            v["choices"].as_array().is_some_and(Vec::is_empty) && v["usage"].is_object()
        })
    })
}

fn push_unread(decoder: &mut SseDecoder, unread: &mut SmallVec<[Bytes; 2]>) {
    for chunk in unread.drain(..) {
        decoder.push(&chunk);
    }
}

/// Reads the complete events buffered in a chat pass-through decoder; with `until_decided`, stops
/// after the first that decides the commit.
fn read_chat(decoder: &mut SseDecoder, state: &mut StreamState, until_decided: bool) {
    while let Some(ev) = decoder.next_event() {
        if let Some(u) = openai_chat::stream_event_usage(&ev) {
            state.usage = Some(u);
        }
        // Before content only chunks that may carry it are parsed; after it only the end and
        // errors matter, and nothing is parsed.
        let meaning = if state.seen_content {
            openai_chat::classify_stream_event_after_content(&ev)
        } else {
            openai_chat::classify_stream_event_before_content(&ev)
        };
        classified(state, meaning);
        if until_decided && (state.seen_content || state.seen_done || state.error.is_some()) {
            return;
        }
    }
    if decoder.overflowed() {
        state.protocol_failure.get_or_insert(EVENT_TOO_LARGE);
    }
}

/// Notes a decoder that stopped on a protocol failure (its 502 `Error` event was already read):
/// an SSE upstream's can only be an event over the bound; an event stream's, undecodable framing.
fn decoder_failure(state: &mut StreamState, decoder: &dyn Decode, upstream: Dialect) {
    if decoder.failed() && state.protocol_failure.is_none() {
        let why = if upstream.is_sse() {
            EVENT_TOO_LARGE
        } else {
            UNDECODABLE
        };
        state.protocol_failure = Some(why);
    }
}

fn classified(state: &mut StreamState, meaning: StreamEventClass) {
    match meaning {
        StreamEventClass::Content => state.seen_content = true,
        StreamEventClass::Done => state.seen_done = true,
        StreamEventClass::Error {
            status, error_type, ..
        } => {
            state.error.get_or_insert((status, error_type));
        }
        StreamEventClass::Preamble | StreamEventClass::Metadata => {}
    }
}

fn watched(state: &mut StreamState, ev: &Event) {
    match ev {
        Event::TextDelta { .. } | Event::ToolCallStart { .. } | Event::ToolCallDelta { .. } => {
            state.seen_content = true;
        }
        Event::Stop { usage, .. } => {
            state.seen_content = true;
            state.seen_done = true;
            if usage.is_some() {
                state.usage = *usage;
            }
        }
        Event::Usage(u) => state.usage = Some(*u),
        Event::Error {
            status, error_type, ..
        } => {
            state.error.get_or_insert((*status, error_type.clone()));
        }
        Event::Start { .. } | Event::BlockStop { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTENT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    const USAGE: &str =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    fn pipe(strip: bool) -> Pipe {
        let chat = Dialect::OpenAiChat;
        Pipe::new(chat, chat, "id", "m", 1 << 20, strip, !strip)
    }

    /// Feeds `whole` split at every position into two chunks; returns what the caller got.
    fn through(strip: bool, whole: &str) -> Vec<String> {
        (0..=whole.len())
            .map(|at| {
                let mut p = pipe(strip);
                let mut out = Vec::new();
                for part in [&whole[..at], &whole[at..]] {
                    out.extend_from_slice(&p.outgoing(Bytes::copy_from_slice(part.as_bytes())));
                }
                out.extend_from_slice(&p.take_carry().unwrap_or_default());
                String::from_utf8(out).unwrap_or_default()
            })
            .collect()
    }

    #[test]
    fn the_usage_chunk_the_caller_did_not_ask_for_is_left_out_wherever_it_is_split() {
        let whole = format!("{CONTENT}{USAGE}{DONE}");
        for got in through(true, &whole) {
            assert_eq!(got, format!("{CONTENT}{DONE}"));
        }
        for got in through(false, &whole) {
            assert_eq!(got, whole, "without strip every byte passes");
        }
        // Servers that end events with CRLF (sse-starlette and others).
        let crlf = |e: &str| e.replace('\n', "\r\n");
        let whole = format!("{}{}{}", crlf(CONTENT), crlf(USAGE), crlf(DONE));
        for got in through(true, &whole) {
            assert_eq!(got, format!("{}{}", crlf(CONTENT), crlf(DONE)));
        }
    }

    #[test]
    fn an_error_after_half_an_event_starts_with_a_blank_line() {
        let mut p = pipe(false);
        let half = Bytes::from_static(b"data: {\"choices\":[{\"delta\":{\"cont");
        assert_eq!(p.outgoing(half), "data: {\"choices\":[{\"delta\":{\"cont");
        let tail = p.error_tail("gone").unwrap();
        assert!(tail.starts_with(b"\n\ndata: {\"error\""), "{tail:?}");
        // At an event boundary, the error event comes as it is.
        let mut p = pipe(false);
        p.outgoing(Bytes::from_static(CONTENT.as_bytes()));
        assert!(p
            .error_tail("gone")
            .unwrap()
            .starts_with(b"data: {\"error\""));
    }

    fn frames(bytes: &[u8]) -> Vec<sidetrack_dialects::bedrock::eventstream::Frame> {
        sidetrack_dialects::bedrock::eventstream::FrameDecoder::new()
            .push(bytes)
            .unwrap()
    }

    /// Issue 14: an invoke caller on a ConverseStream upstream (as Bedrock sends it: `messageStop`,
    /// then `metadata` with the usage) gets the usage in its stream.
    #[test]
    fn an_invoke_caller_gets_the_usage_of_a_converse_stream() {
        use sidetrack_dialects::bedrock::converse;
        use sidetrack_dialects::canonical::StopReason;
        let mut upstream = converse::StreamEncoder::new("", "");
        let mut bytes = BytesMut::new();
        for ev in [
            Event::TextDelta {
                index: 0,
                text: "hi".into(),
            },
            Event::BlockStop { index: 0 },
            Event::Stop {
                reason: StopReason::EndTurn,
                usage: None,
            },
            Event::Usage(Usage {
                input_tokens: 17,
                output_tokens: 9,
            }),
        ] {
            bytes.extend_from_slice(&upstream.encode(&ev));
        }
        let mut p = Pipe::new(
            Dialect::BedrockConverse,
            Dialect::BedrockInvoke,
            "id",
            "m",
            1 << 20,
            false,
            false,
        );
        let mut out = p.feed(bytes.freeze()).to_vec();
        out.extend_from_slice(&p.end());
        // The caller's stream, read back as an invoke client reads it.
        let got = Dialect::BedrockInvoke.stream_decoder().push(&out);
        assert_eq!(
            got.last(),
            Some(&Event::Stop {
                reason: StopReason::EndTurn,
                usage: Some(Usage {
                    input_tokens: 17,
                    output_tokens: 9,
                }),
            }),
            "{got:?}"
        );
        assert!(p.state().seen_done);
    }

    /// A translated stream to a Bedrock caller that breaks its bound ends with the documented
    /// `modelStreamErrorException`; an upstream's own error event keeps its mapping.
    #[test]
    fn a_bedrock_caller_gets_model_stream_error_for_the_gateways_failures_only() {
        let mut p = Pipe::new(
            Dialect::OpenAiChat,
            Dialect::BedrockConverse,
            "id",
            "m",
            64,
            false,
            false,
        );
        let mut out = p.feed(Bytes::from_static(CONTENT.as_bytes())).to_vec();
        let long = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
            "x".repeat(100)
        );
        out.extend_from_slice(&p.feed(Bytes::from(long)));
        assert!(p.state().protocol_failure.is_some());
        let last = frames(&out).pop().unwrap();
        assert_eq!(
            last.exception_type.as_deref(),
            Some("modelStreamErrorException")
        );

        let mut p = Pipe::new(
            Dialect::AnthropicMessages,
            Dialect::BedrockConverse,
            "id",
            "m",
            1 << 20,
            false,
            false,
        );
        let event = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n";
        let out = p.feed(Bytes::from_static(event.as_bytes()));
        let last = frames(&out).pop().unwrap();
        assert_eq!(
            last.exception_type.as_deref(),
            Some("serviceUnavailableException")
        );
        assert!(
            p.error_tail("gone").is_none(),
            "the caller has the upstream's error"
        );
    }

    #[test]
    fn content_chunks_pass_as_they_are_and_other_empty_lists_stay() {
        let mut p = pipe(true);
        let chunk = Bytes::from_static(CONTENT.as_bytes());
        assert_eq!(
            p.outgoing(chunk.clone()).as_ptr(),
            chunk.as_ptr(),
            "no copy"
        );
        let tools = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}\n\n";
        assert_eq!(p.outgoing(Bytes::from_static(tools.as_bytes())), tools);
    }
}
