//! Messages streams: the commit-decision classification of one event (SPEC §5.6) and the
//! canonical stream decoder and encoder.

use bytes::Bytes;
use serde_json::json;

use crate::canonical::{StopReason, StreamEvent};
use crate::common::{classify_error, concat};
use crate::errors::status_for_error_type;
use crate::sse::{self, SseEvent};
use crate::Usage;

use super::response::{anthropic_error_type, stop_from_wire, stop_to_wire, stream_error};

/// What one upstream Messages SSE event means for the commit decision (SPEC §5.6).
pub fn classify_stream_event(ev: &SseEvent) -> crate::StreamEventClass {
    let v: serde_json::Value = serde_json::from_str(&ev.data).unwrap_or_default();
    let kind = ev
        .event
        .as_deref()
        .or_else(|| v["type"].as_str())
        .unwrap_or_default();
    match kind {
        "message_start" | "ping" => crate::StreamEventClass::Preamble,
        "content_block_start" => {
            let b = &v["content_block"];
            if b["type"] == "text" && b["text"].as_str().unwrap_or_default().is_empty() {
                crate::StreamEventClass::Preamble
            } else {
                crate::StreamEventClass::Content
            }
        }
        "content_block_delta" | "content_block_stop" | "message_delta" => {
            crate::StreamEventClass::Content
        }
        "message_stop" => crate::StreamEventClass::Done,
        "error" => {
            let error_type = v["error"]["type"]
                .as_str()
                .unwrap_or("api_error")
                .to_owned();
            crate::StreamEventClass::Error {
                status: status_for_error_type(&error_type),
                message: v["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                error_type,
            }
        }
        _ => crate::StreamEventClass::Metadata,
    }
}

/// A provider's Messages SSE → canonical stream events. Anthropic block indexes are renumbered:
/// blocks the canonical form does not carry (thinking, server tools) are skipped.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: sse::SseDecoder,
    /// Anthropic index → canonical index (None: a skipped block).
    blocks: Vec<(u64, Option<usize>)>,
    next_block: usize,
    usage: Usage,
    stop: Option<StopReason>,
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

    /// One event's JSON payload (its `type` names the event). Bedrock's
    /// InvokeModelWithResponseStream chunks carry exactly these payloads.
    pub fn push_event(&mut self, data: &str) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            return out;
        };
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => self.message_start(&v, &mut out),
            "content_block_start" => self.content_block_start(&v, &mut out),
            "content_block_delta" => self.content_block_delta(&v, &mut out),
            "content_block_stop" => {
                if let Some(index) = self.block_of(&v) {
                    out.push(StreamEvent::BlockStop { index });
                }
            }
            "message_delta" => self.message_delta(&v),
            "message_stop" => {
                out.push(StreamEvent::Stop {
                    reason: self.stop.unwrap_or(StopReason::EndTurn),
                    usage: Some(self.usage),
                });
                self.finished = true;
            }
            "error" => self.error(&v, &mut out),
            _ => {} // ping and unknown events
        }
        out
    }

    /// `message_start`: the id, model and usage so far.
    fn message_start(&mut self, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let m = &v["message"];
        let input = m["usage"]["input_tokens"].as_u64();
        self.usage.input_tokens = input.unwrap_or(0);
        self.usage.output_tokens = m["usage"]["output_tokens"].as_u64().unwrap_or(0);
        out.push(StreamEvent::Start {
            id: m["id"].as_str().unwrap_or_default().to_owned(),
            model: m["model"].as_str().unwrap_or_default().to_owned(),
            input_tokens: input,
        });
    }

    /// `content_block_start`: text and tool_use blocks get a canonical index (others, such as
    /// thinking, are dropped); a tool call opens, and text already in the block is sent.
    fn content_block_start(&mut self, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let i = v["index"].as_u64().unwrap_or(0);
        let b = &v["content_block"];
        let canonical = match b["type"].as_str().unwrap_or_default() {
            "text" | "tool_use" => {
                let c = self.next_block;
                self.next_block += 1;
                Some(c)
            }
            _ => None,
        };
        self.blocks.push((i, canonical));
        if let Some(index) = canonical {
            if b["type"] == "tool_use" {
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: b["id"].as_str().unwrap_or_default().to_owned(),
                    name: b["name"].as_str().unwrap_or_default().to_owned(),
                });
            } else if let Some(t) = b["text"].as_str().filter(|t| !t.is_empty()) {
                out.push(StreamEvent::TextDelta {
                    index,
                    text: t.to_owned(),
                });
            }
        }
    }

    /// `content_block_delta`: text or tool-call argument JSON of a kept block.
    fn content_block_delta(&mut self, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        if let Some(index) = self.block_of(v) {
            let d = &v["delta"];
            match d["type"].as_str().unwrap_or_default() {
                "text_delta" => out.push(StreamEvent::TextDelta {
                    index,
                    text: d["text"].as_str().unwrap_or_default().to_owned(),
                }),
                "input_json_delta" => {
                    if let Some(p) = d["partial_json"].as_str().filter(|p| !p.is_empty()) {
                        out.push(StreamEvent::ToolCallDelta {
                            index,
                            arguments: p.to_owned(),
                        });
                    }
                }
                _ => {}
            }
        }
    }

    /// `message_delta`: the stop reason and the usage so far (held until `message_stop`).
    fn message_delta(&mut self, v: &serde_json::Value) {
        if let Some(r) = v["delta"]["stop_reason"].as_str() {
            self.stop = Some(stop_from_wire(Some(r)));
        }
        let u = &v["usage"];
        if let Some(o) = u["output_tokens"].as_u64() {
            self.usage.output_tokens = o;
        }
        if let Some(i) = u["input_tokens"].as_u64() {
            self.usage.input_tokens = i;
        }
    }

    /// An in-stream `error` event: an `Error`, and the stream ends.
    fn error(&mut self, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let error_type = v["error"]["type"]
            .as_str()
            .unwrap_or("api_error")
            .to_owned();
        out.push(StreamEvent::Error {
            status: status_for_error_type(&error_type),
            message: v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            error_type,
        });
        self.finished = true;
    }

    /// The canonical index of the block an event's `index` names, if it is kept.
    fn block_of(&self, v: &serde_json::Value) -> Option<usize> {
        let i = v["index"].as_u64().unwrap_or(0);
        self.blocks
            .iter()
            .find(|(a, _)| *a == i)
            .and_then(|(_, c)| *c)
    }
}

/// Canonical stream events → the caller's Messages SSE, every event with its `event:` line:
/// `message_start`, `content_block_start` (a `ping` after the first), deltas,
/// `content_block_stop`, `message_delta` (stop reason, cumulative usage), `message_stop`.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    started: bool,
    pinged: bool,
    finished: bool,
    /// Canonical block index → Anthropic index; the block open now.
    blocks: Vec<(usize, u64)>,
    open: Option<usize>,
    usage: Usage,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> Self {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            started: false,
            pinged: false,
            finished: false,
            blocks: Vec::new(),
            open: None,
            usage: Usage::default(),
        }
    }

    fn ev(kind: &str, v: &serde_json::Value) -> Bytes {
        sse::encode(Some(kind), &v.to_string())
    }

    fn close_open(&mut self, out: &mut Vec<Bytes>) {
        if let Some(c) = self.open.take() {
            if let Some((_, a)) = self.blocks.iter().find(|(b, _)| *b == c) {
                out.push(Self::ev(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": a}),
                ));
            }
        }
    }

    /// Opens canonical block `c` (closing another open one) and returns its Anthropic index.
    fn open_block(&mut self, c: usize, block: serde_json::Value, out: &mut Vec<Bytes>) -> u64 {
        if let Some((_, a)) = self.blocks.iter().find(|(b, _)| *b == c) {
            return *a;
        }
        self.close_open(out);
        let a = self.blocks.len() as u64;
        self.blocks.push((c, a));
        self.open = Some(c);
        out.push(Self::ev(
            "content_block_start",
            &json!({"type": "content_block_start", "index": a, "content_block": block}),
        ));
        if !self.pinged {
            self.pinged = true;
            out.push(Self::ev("ping", &json!({"type": "ping"})));
        }
        a
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        if self.finished {
            return Bytes::new();
        }
        let mut out = Vec::new();
        if !self.started && !matches!(ev, StreamEvent::Error { .. }) {
            out.push(self.message_start(ev));
        }
        match ev {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta { index, text } => {
                let a = self.open_block(*index, json!({"type": "text", "text": ""}), &mut out);
                out.push(Self::ev(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": a,
                        "delta": {"type": "text_delta", "text": text}}),
                ));
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.open_block(
                    *index,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    &mut out,
                );
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                let a = self.open_block(
                    *index,
                    json!({"type": "tool_use", "id": "", "name": "", "input": {}}),
                    &mut out,
                );
                out.push(Self::ev(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": a,
                        "delta": {"type": "input_json_delta", "partial_json": arguments}}),
                ));
            }
            StreamEvent::BlockStop { index } => {
                if self.open == Some(*index) {
                    self.close_open(&mut out);
                }
            }
            StreamEvent::Usage(u) => self.usage = *u,
            StreamEvent::Stop { reason, usage } => self.stop(*reason, *usage, &mut out),
            StreamEvent::Error {
                status,
                error_type,
                message,
            } => {
                out.push(stream_error(
                    anthropic_error_type(classify_error(*status, error_type)),
                    message,
                ));
                self.finished = true;
            }
        }
        concat(out)
    }

    /// The first event (not an error): a `Start` fills an empty id and model and gives the input
    /// tokens; the `message_start` event.
    fn message_start(&mut self, ev: &StreamEvent) -> Bytes {
        self.started = true;
        if let StreamEvent::Start {
            id,
            model,
            input_tokens,
        } = ev
        {
            if self.id.is_empty() {
                self.id.clone_from(id);
            }
            if self.model.is_empty() {
                self.model.clone_from(model);
            }
            self.usage.input_tokens = input_tokens.unwrap_or(0);
        }
        Self::ev(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "content": [],
                "model": self.model, "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": 0}}}),
        )
    }

    /// The end: the open block closes, `message_delta` (stop reason, usage), `message_stop`.
    fn stop(&mut self, reason: StopReason, usage: Option<Usage>, out: &mut Vec<Bytes>) {
        self.close_open(out);
        if let Some(u) = usage {
            self.usage = u;
        }
        out.push(Self::ev(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_to_wire(reason), "stop_sequence": null},
                "usage": {"input_tokens": self.usage.input_tokens,
                    "output_tokens": self.usage.output_tokens}}),
        ));
        out.push(Self::ev("message_stop", &json!({"type": "message_stop"})));
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
        out.extend(self.push_event(&ev.data));
    }
}
