//! Chat-completions streams: the commit-decision classification of one event (SPEC §5.6), usage
//! in a stream, and the canonical stream decoder and encoder.

use std::sync::LazyLock;

use bytes::Bytes;
use memchr::memmem::Finder;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::json;

use crate::canonical::StopReason;
use crate::canonical::StreamEvent;
use crate::common::{classify_error, concat, specific_error_type, unix_now};
use crate::json_tail;
use crate::sse::{self, SseEvent};
use crate::Usage;

use super::response::{
    error_json, error_status, finish_to_stop, openai_error_type, stop_to_finish, usage_json,
    ErrorEnvelope, WireUsage,
};

#[derive(Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<&'a str>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<&'a serde_json::value::RawValue>,
}

/// What one upstream SSE event means for the commit decision.
pub fn classify_stream_event(ev: &SseEvent) -> crate::StreamEventClass {
    if let Some(end) = stream_end(ev) {
        return end;
    }
    let data = ev.data.trim();
    let Ok(chunk) = serde_json::from_str::<Chunk<'_>>(data) else {
        return crate::StreamEventClass::Metadata;
    };
    let has_content = chunk.choices.iter().any(|c| {
        c.finish_reason.is_some()
            || c.delta.as_ref().is_some_and(|d| {
                d.content.as_deref().is_some_and(|s| !s.is_empty())
                    || d.refusal.as_deref().is_some_and(|s| !s.is_empty())
                    || d.tool_calls.is_some_and(|t| t.get() != "null")
            })
    });
    if has_content {
        crate::StreamEventClass::Content
    } else if chunk.choices.is_empty() && chunk.usage.is_some() {
        crate::StreamEventClass::Metadata
    } else {
        crate::StreamEventClass::Preamble
    }
}

/// [`classify_stream_event`] for a stream that has already carried content: once committed, the
/// gateway only needs to know whether an event ends the stream, so this answers `Done` and `Error`
/// exactly as [`classify_stream_event`] does and `Metadata` for every other event. It reports
/// content and preamble chunks as `Metadata` too, since it never parses a chunk. That saves a full
/// JSON parse of every content chunk on the hot path.
pub fn classify_stream_event_after_content(ev: &SseEvent) -> crate::StreamEventClass {
    stream_end(ev).unwrap_or(crate::StreamEventClass::Metadata)
}

/// [`classify_stream_event`] for a stream that has not carried content yet, as the commit decision
/// reads it: `Done` and `Error` exactly as [`classify_stream_event`] answers them; `Content` and
/// `Metadata` (`Preamble` is not told apart) from one pass over the chunk's bytes
/// ([`crate::chunk_scan`]), which falls back to the typed parse wherever that parse could answer
/// differently. The one difference, documented there: a chunk whose only fault is a malformed
/// value the pass does not read is answered from the values it does read.
pub fn classify_stream_event_before_content(ev: &SseEvent) -> crate::StreamEventClass {
    if let Some(end) = stream_end(ev) {
        return end;
    }
    match crate::chunk_scan::scan(ev.data.as_bytes()) {
        crate::chunk_scan::Scan::Content => crate::StreamEventClass::Content,
        crate::chunk_scan::Scan::NoContent => crate::StreamEventClass::Metadata,
        crate::chunk_scan::Scan::Unsure => match classify_stream_event(ev) {
            crate::StreamEventClass::Preamble => crate::StreamEventClass::Metadata,
            other => other,
        },
    }
}

/// The commit decision for one chunk of a pass-through stream, read in place (no SSE decoding, no
/// usage): the first event that decides it (`Content`, `Done`), or `Metadata` when none does, as
/// [`classify_stream_event_before_content`] would answer event by event. `None` when the chunk
/// must go through the SSE decoder and the full classification: it is not a run of whole
/// single-line events (`data: …` or comments, each ended by a blank line, no `\r`), or the
/// one-pass read is unsure of an event ([`crate::chunk_scan`]; error events always are).
///
/// This is what the gateway runs between an upstream's first chunk and the caller's first token,
/// so it touches as little code as it can (docs/decisions/0003-hot-path.md, "Fourth pass").
pub fn classify_chunk_before_content(chunk: &[u8]) -> Option<crate::StreamEventClass> {
    if memchr::memchr(b'\r', chunk).is_some() {
        return None;
    }
    let mut rest = chunk;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest)?;
        let line = &rest[..end];
        if line.is_empty() || rest.get(end + 1) != Some(&b'\n') {
            return None;
        }
        rest = &rest[end + 2..];
        if line[0] == b':' {
            continue; // a comment (keep-alive)
        }
        let value = line.strip_prefix(b"data:")?;
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if value.trim_ascii_start().starts_with(b"[DONE]") {
            return Some(crate::StreamEventClass::Done);
        }
        match crate::chunk_scan::scan(value) {
            crate::chunk_scan::Scan::Content => return Some(crate::StreamEventClass::Content),
            crate::chunk_scan::Scan::NoContent => {}
            crate::chunk_scan::Scan::Unsure => return None,
        }
    }
    Some(crate::StreamEventClass::Metadata)
}

/// What follows each plain occurrence of the searcher's quoted key that is followed by `:` (so
/// read as a key), from its value's first byte on (whitespace skipped). No parse.
fn member_values<'d>(
    data: &'d [u8],
    quoted_key: &'d Finder<'static>,
) -> impl Iterator<Item = &'d [u8]> {
    quoted_key.find_iter(data).filter_map(move |at| {
        let rest = json_tail::skip_ws(&data[at + quoted_key.needle().len()..]);
        match rest.split_first() {
            Some((b':', value)) => Some(json_tail::skip_ws(value)),
            _ => None,
        }
    })
}

/// The checks of [`classify_stream_event`] that need no parse of the chunk: `[DONE]`, and an
/// error event (marked by an `error` event name or an `"error":{…}` member, and parsed only then).
/// `None` for any other event.
fn stream_end(ev: &SseEvent) -> Option<crate::StreamEventClass> {
    let data = ev.data.trim();
    if data.starts_with("[DONE]") {
        return Some(crate::StreamEventClass::Done);
    }
    if ev.event.as_deref() == Some("error") || has_object_member(data.as_bytes(), &ERROR_KEY) {
        if let Ok(env) = serde_json::from_str::<ErrorEnvelope>(data) {
            let code = env.error.code.as_ref().and_then(|c| c.as_str());
            let error_type = specific_error_type(env.error.kind.as_deref(), code)
                .unwrap_or("server_error")
                .to_owned();
            return Some(crate::StreamEventClass::Error {
                status: error_status(&error_type, code),
                message: env.error.message.unwrap_or_default(),
                error_type,
            });
        }
    }
    None
}

/// Searchers for the quoted keys [`has_object_member`] looks for, built once: building a
/// `memmem` searcher costs more than searching one event with it.
static ERROR_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"error\""));

static USAGE_KEY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"usage\""));

/// A cheap pre-check run on every stream event before any JSON parse: does the searcher's quoted
/// key occur followed by `:` and an object, whitespace allowed? One `memmem` pass, no parse.
fn has_object_member(data: &[u8], quoted_key: &Finder<'static>) -> bool {
    member_values(data, quoted_key).any(|value| value.first() == Some(&b'{'))
}

/// Usage carried by one stream event (the `include_usage` chunk), if any.
///
/// The usage chunk's `usage` sits at its end, after `"choices":[]`. When `json_tail` can read it
/// from there and `choices` cannot make the full `Chunk` parse fail (the key is absent, or its
/// one plain occurrence holds `[]`), the chunk is not parsed whole. Otherwise it is. See
/// `json_tail` for what the shortcut guarantees.
pub fn stream_event_usage(ev: &SseEvent) -> Option<Usage> {
    if !has_object_member(ev.data.as_bytes(), &USAGE_KEY) {
        return None;
    }
    let data = ev.data.as_bytes();
    let usage = match json_tail::top_level_member::<Option<WireUsage>, IgnoredAny>(data, "usage") {
        Some(usage) if choices_cannot_fail(data) => usage,
        _ => serde_json::from_str::<Chunk<'_>>(&ev.data).ok()?.usage,
    };
    usage.map(WireUsage::canonical)
}

/// Whether `Chunk`'s typed `choices` field surely parses in a chunk whose `usage` was read by
/// `json_tail` (so no key before `usage` is spelled with escapes and none after it has any). True
/// when the plain spelling `"choices"` is nowhere, or occurs once and holds `[]`. If that
/// occurrence is not the top-level key, the top level has no `choices` at all.
pub(super) fn choices_cannot_fail(data: &[u8]) -> bool {
    match json_tail::find_key(data, b"choices") {
        json_tail::Key::Nowhere => true,
        json_tail::Key::At { at, .. } => {
            let mut rest = data.get(at + "\"choices\"".len()..).unwrap_or_default();
            for token in [b':', b'[', b']'] {
                match json_tail::skip_ws(rest).split_first() {
                    Some((&b, after)) if b == token => rest = after,
                    _ => return false,
                }
            }
            true
        }
        json_tail::Key::Unsure => false,
    }
}

/// The text content carried by a whole OpenAI chat SSE body (for narration and tests).
pub fn stream_text(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// A provider's chat-completions SSE → canonical stream events.
///
/// OpenAI has no block boundaries: the text is one block and each `tool_calls[].index` another,
/// numbered in the order they appear; a block closes when the next one starts or at
/// `finish_reason`. The `Stop` is held until the usage chunk (`include_usage`) or `[DONE]`, so it
/// carries the final usage.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: sse::SseDecoder,
    started: bool,
    next_block: usize,
    text_block: Option<usize>,
    tool_blocks: Vec<(u64, usize)>,
    open: Option<usize>,
    pending_stop: Option<StopReason>,
    usage: Option<Usage>,
    finished: bool,
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bounds one upstream event (SPEC §14 `maxStreamEventBytes`).
    pub fn set_max_event_bytes(&mut self, n: usize) {
        self.sse.set_limit(n);
    }

    /// The stream broke its bound; nothing more is decoded.
    pub fn failed(&self) -> bool {
        self.sse.overflowed()
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        crate::sse::SseStream::push_sse(self, bytes)
    }

    fn close_open(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(index) = self.open.take() {
            out.push(StreamEvent::BlockStop { index });
        }
    }

    fn switch_to(&mut self, block: usize, out: &mut Vec<StreamEvent>) {
        if self.open != Some(block) {
            self.close_open(out);
            self.open = Some(block);
        }
    }

    fn event(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        let data = data.trim();
        if self.finished {
            return;
        }
        if data.starts_with("[DONE]") {
            self.done(out);
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            return;
        };
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            self.error(err, out);
            return;
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: v["id"].as_str().unwrap_or_default().to_owned(),
                model: v["model"].as_str().unwrap_or_default().to_owned(),
                input_tokens: None,
            });
        }
        if let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) {
            self.choice(choice, out);
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage_chunk(u, out);
        }
    }

    /// `data: [DONE]`: the held `Stop` goes out (with the usage seen so far), and the stream ends.
    fn done(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(reason) = self.pending_stop.take() {
            out.push(StreamEvent::Stop {
                reason,
                usage: self.usage,
            });
        }
        self.finished = true;
    }

    /// An in-stream `{"error":{…}}`: an `Error` event, and the stream ends.
    fn error(&mut self, err: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let error_type = specific_error_type(err["type"].as_str(), err["code"].as_str())
            .unwrap_or("server_error")
            .to_owned();
        out.push(StreamEvent::Error {
            status: error_status(&error_type, err["code"].as_str()),
            message: err["message"].as_str().unwrap_or_default().to_owned(),
            error_type,
        });
        self.finished = true;
    }

    /// The first choice's delta (text, refusal, tool calls) and its `finish_reason`.
    fn choice(&mut self, choice: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let delta = &choice["delta"];
        for key in ["content", "refusal"] {
            if let Some(t) = delta[key].as_str().filter(|t| !t.is_empty()) {
                self.text_delta(t, out);
            }
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            self.tool_call_delta(tc, out);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.close_open(out);
            self.pending_stop = Some(finish_to_stop(Some(reason)));
        }
    }

    /// Text (or refusal) in the one text block, opened on first use.
    fn text_delta(&mut self, text: &str, out: &mut Vec<StreamEvent>) {
        let block = match self.text_block {
            Some(b) => b,
            None => {
                let b = self.next_block;
                self.next_block += 1;
                self.text_block = Some(b);
                b
            }
        };
        self.switch_to(block, out);
        out.push(StreamEvent::TextDelta {
            index: block,
            text: text.to_owned(),
        });
    }

    /// One `tool_calls[]` entry: its block opens (`ToolCallStart`) the first time its `index` is
    /// seen; its argument fragment follows.
    fn tool_call_delta(&mut self, tc: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let k = tc["index"].as_u64().unwrap_or(0);
        let block = match self.tool_blocks.iter().find(|(i, _)| *i == k) {
            Some((_, b)) => *b,
            None => {
                let b = self.next_block;
                self.next_block += 1;
                self.tool_blocks.push((k, b));
                self.switch_to(b, out);
                out.push(StreamEvent::ToolCallStart {
                    index: b,
                    id: tc["id"]
                        .as_str()
                        .map_or_else(|| format!("call_{k}"), str::to_owned),
                    name: tc["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
                b
            }
        };
        if let Some(a) = tc["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        {
            self.switch_to(block, out);
            out.push(StreamEvent::ToolCallDelta {
                index: block,
                arguments: a.to_owned(),
            });
        }
    }

    /// The usage chunk: the final usage, and the held `Stop` goes out carrying it.
    fn usage_chunk(&mut self, u: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let usage = Usage {
            input_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        };
        self.usage = Some(usage);
        if let Some(reason) = self.pending_stop.take() {
            out.push(StreamEvent::Stop {
                reason,
                usage: Some(usage),
            });
        }
    }
}

/// Canonical stream events → the caller's chat-completions SSE.
///
/// Starts with the role chunk (`delta.role = "assistant"`), held back until the first event that
/// decides its `content`: `""` before text (or an empty answer), `null` before a tool call — as
/// OpenAI sends it (clients such as the Vercel AI SDK turn a `""` into an empty text part). Ends a
/// finished stream with the `finish_reason` chunk, then the usage chunk (`choices: []`) **only
/// if** the caller asked for it ([`StreamEncoder::with_usage_chunk`], from
/// `stream_options.include_usage`) and usage is known (a `Usage` event or a `Stop` carrying
/// usage), then `data: [DONE]`. An `Error` ends the stream with `data: {"error":…}` and no
/// `[DONE]`.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created: u64,
    started: bool,
    finished: bool,
    /// Canonical block index → `tool_calls[].index`.
    tool_index: Vec<(usize, usize)>,
    usage: Option<Usage>,
    /// The caller asked for the usage chunk (`stream_options.include_usage: true`).
    usage_chunk: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> Self {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            created: unix_now(),
            started: false,
            finished: false,
            tool_index: Vec::new(),
            usage: None,
            usage_chunk: false,
        }
    }

    /// Whether the stream ends with the usage chunk (`choices: []`): only when the caller asked
    /// with `stream_options.include_usage: true` (SPEC §5.7). Off by default, as at OpenAI.
    pub fn with_usage_chunk(mut self, on: bool) -> Self {
        self.usage_chunk = on;
        self
    }

    /// Fixes the `created` timestamp (tests and golden files).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = created;
        self
    }

    fn chunk(&self, delta: serde_json::Value, finish: Option<&str>) -> Bytes {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        sse::encode(None, &v.to_string())
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        if self.finished {
            return Bytes::new();
        }
        let mut out = Vec::new();
        if !self.started {
            self.role_chunk(ev, &mut out);
        }
        match ev {
            StreamEvent::Start { .. } | StreamEvent::BlockStop { .. } => {}
            StreamEvent::TextDelta { text, .. } => {
                out.push(self.chunk(json!({"content": text}), None));
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                let k = self.tool_index.len();
                self.tool_index.push((*index, k));
                out.push(self.chunk(
                    json!({"tool_calls": [{"index": k, "id": id, "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    None,
                ));
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                let k = self
                    .tool_index
                    .iter()
                    .find(|(b, _)| b == index)
                    .map_or(0, |(_, k)| *k);
                out.push(self.chunk(
                    json!({"tool_calls": [{"index": k, "function": {"arguments": arguments}}]}),
                    None,
                ));
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::Stop { reason, usage } => self.stop(*reason, *usage, &mut out),
            StreamEvent::Error {
                status,
                error_type,
                message,
            } => {
                let (t, code) = openai_error_type(classify_error(*status, error_type));
                out.push(sse::encode(None, &error_json(t, code, message).to_string()));
                self.finished = true;
            }
        }
        concat(out)
    }

    /// Before the first chunk: a `Start` fills an empty id and model; the role chunk goes out with
    /// the first event that decides its `content` (`""` before text or a stop, `null` before a
    /// tool call).
    fn role_chunk(&mut self, ev: &StreamEvent, out: &mut Vec<Bytes>) {
        if let StreamEvent::Start { id, model, .. } = ev {
            if self.id.is_empty() {
                self.id.clone_from(id);
            }
            if self.model.is_empty() {
                self.model.clone_from(model);
            }
        }
        // The role chunk waits for the event that decides its `content`.
        let content = match ev {
            StreamEvent::TextDelta { .. } | StreamEvent::Stop { .. } => Some(json!("")),
            StreamEvent::ToolCallStart { .. } | StreamEvent::ToolCallDelta { .. } => {
                Some(serde_json::Value::Null)
            }
            _ => None,
        };
        if let Some(content) = content {
            self.started = true;
            out.push(self.chunk(
                json!({"role": "assistant", "content": content, "refusal": null}),
                None,
            ));
        }
    }

    /// The end of a finished stream: the `finish_reason` chunk, the usage chunk (when asked for
    /// and known), `data: [DONE]`.
    fn stop(&mut self, reason: StopReason, usage: Option<Usage>, out: &mut Vec<Bytes>) {
        if usage.is_some() {
            self.usage = usage;
        }
        out.push(self.chunk(json!({}), Some(stop_to_finish(reason))));
        if let Some(u) = self.usage.filter(|_| self.usage_chunk) {
            let v = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_json(u),
            });
            out.push(sse::encode(None, &v.to_string()));
        }
        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        self.finished = true;
    }
}

impl Default for StreamEncoder {
    fn default() -> Self {
        Self::new("", "")
    }
}

impl crate::sse::SseStream for StreamDecoder {
    fn sse(&mut self) -> &mut crate::sse::SseDecoder {
        &mut self.sse
    }

    fn on_event(&mut self, ev: &crate::sse::SseEvent, out: &mut Vec<StreamEvent>) {
        self.event(&ev.data, out);
    }
}
