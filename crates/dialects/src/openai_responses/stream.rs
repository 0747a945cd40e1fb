//! Responses streams (`event:` lines and `sequence_number`): the commit-decision classification of
//! one event (SPEC §5.6) and the canonical stream decoder and encoder.

use bytes::Bytes;
use serde_json::json;

use crate::canonical::{StopReason, StreamEvent};
use crate::common::{classify_error, concat, unix_now};
use crate::openai_chat::error_status;
use crate::sse::{self, SseEvent};
use crate::Usage;

use super::response::{
    call_item, item_base, message_item, response_object, responses_error_code, status_of,
    stop_from_status,
};

/// What one upstream Responses SSE event means for the commit decision (SPEC §5.6).
pub fn classify_stream_event(ev: &SseEvent) -> crate::StreamEventClass {
    let v: serde_json::Value = serde_json::from_str(&ev.data).unwrap_or_default();
    let kind = v["type"]
        .as_str()
        .or(ev.event.as_deref())
        .unwrap_or_default();
    match kind {
        "response.created" | "response.in_progress" | "response.queued" => {
            crate::StreamEventClass::Preamble
        }
        "response.output_item.added" if v["item"]["type"] == "message" => {
            crate::StreamEventClass::Preamble
        }
        "response.content_part.added" => crate::StreamEventClass::Preamble,
        "response.completed" | "response.incomplete" => crate::StreamEventClass::Done,
        "error" | "response.failed" => {
            let err = if kind == "error" {
                &v
            } else {
                &v["response"]["error"]
            };
            let error_type = err["code"]
                .as_str()
                .or_else(|| err["type"].as_str().filter(|t| *t != "error"))
                .unwrap_or("server_error")
                .to_owned();
            crate::StreamEventClass::Error {
                status: error_status(&error_type, err["code"].as_str()),
                message: err["message"].as_str().unwrap_or_default().to_owned(),
                error_type,
            }
        }
        k if k.starts_with("response.") => crate::StreamEventClass::Content,
        _ => crate::StreamEventClass::Metadata,
    }
}

/// A provider's Responses SSE → canonical stream events. Each output text part and each
/// function call is one canonical block; a block stops at its `response.output_item.done`.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: sse::SseDecoder,
    /// (output_index, content_index or CALL) → (canonical block, stopped, saw arguments).
    blocks: Vec<((u64, u64), usize, bool, bool)>,
    next_block: usize,
    has_calls: bool,
    finished: bool,
}

const CALL: u64 = u64::MAX;

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

    fn block(&mut self, key: (u64, u64)) -> (usize, bool) {
        if let Some(b) = self.blocks.iter().find(|b| b.0 == key) {
            return (b.1, false);
        }
        let b = self.next_block;
        self.next_block += 1;
        self.blocks.push((key, b, false, false));
        (b, true)
    }

    fn event(&mut self, ev: &SseEvent, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&ev.data) else {
            return;
        };
        let kind = v["type"]
            .as_str()
            .or(ev.event.as_deref())
            .unwrap_or_default();
        let oi = v["output_index"].as_u64().unwrap_or(0);
        match kind {
            "response.created" => out.push(StreamEvent::Start {
                id: v["response"]["id"].as_str().unwrap_or_default().to_owned(),
                model: v["response"]["model"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                input_tokens: None,
            }),
            "response.output_item.added" if v["item"]["type"] == "function_call" => {
                self.has_calls = true;
                let (index, _) = self.block((oi, CALL));
                let item = &v["item"];
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                    name: item["name"].as_str().unwrap_or_default().to_owned(),
                });
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let ci = v["content_index"].as_u64().unwrap_or(0);
                let (index, _) = self.block((oi, ci));
                if let Some(t) = v["delta"].as_str().filter(|t| !t.is_empty()) {
                    out.push(StreamEvent::TextDelta {
                        index,
                        text: t.to_owned(),
                    });
                }
            }
            "response.function_call_arguments.delta" => self.arguments_delta(oi, &v, out),
            "response.output_item.done" => self.item_done(oi, &v, out),
            "response.completed" | "response.incomplete" => self.completed(&v, out),
            "error" | "response.failed" => {
                if let crate::StreamEventClass::Error {
                    status,
                    error_type,
                    message,
                } = classify_stream_event(ev)
                {
                    out.push(StreamEvent::Error {
                        status,
                        error_type,
                        message,
                    });
                }
                self.finished = true;
            }
            _ => {}
        }
    }

    /// A fragment of a function call's arguments (the call's block is marked as having had
    /// deltas, so `output_item.done` does not repeat them).
    fn arguments_delta(&mut self, oi: u64, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let (index, _) = self.block((oi, CALL));
        if let Some(b) = self.blocks.iter_mut().find(|b| b.0 == (oi, CALL)) {
            b.3 = true;
        }
        if let Some(a) = v["delta"].as_str().filter(|a| !a.is_empty()) {
            out.push(StreamEvent::ToolCallDelta {
                index,
                arguments: a.to_owned(),
            });
        }
    }

    /// An output item ends: its open blocks close; a call that streamed no argument deltas gets
    /// its whole arguments first.
    fn item_done(&mut self, oi: u64, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let args = v["item"]["arguments"].as_str().unwrap_or_default();
        for b in self.blocks.iter_mut().filter(|b| b.0 .0 == oi && !b.2) {
            if b.0 .1 == CALL && !b.3 && !args.is_empty() {
                out.push(StreamEvent::ToolCallDelta {
                    index: b.1,
                    arguments: args.to_owned(),
                });
            }
            b.2 = true;
            out.push(StreamEvent::BlockStop { index: b.1 });
        }
    }

    /// `response.completed` / `response.incomplete`: the `Stop` with the final usage.
    fn completed(&mut self, v: &serde_json::Value, out: &mut Vec<StreamEvent>) {
        let r = &v["response"];
        let usage = r.get("usage").filter(|u| u.is_object()).map(|u| Usage {
            input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
            output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        });
        out.push(StreamEvent::Stop {
            reason: stop_from_status(r["incomplete_details"]["reason"].as_str(), self.has_calls),
            usage,
        });
        self.finished = true;
    }
}

#[derive(Debug)]
enum ItemKind {
    Text(String),
    Call {
        call_id: String,
        name: String,
        args: String,
    },
}

#[derive(Debug)]
struct Item {
    block: usize,
    id: String,
    kind: ItemKind,
    done: bool,
}

/// Canonical stream events → the caller's Responses SSE: `response.created`,
/// `response.in_progress`, per block `output_item.added` (+ `content_part.added` for text),
/// deltas, the `.done` events, then `response.completed` (or `response.incomplete`). Every event
/// has its `event:` line and a running `sequence_number`.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    created: u64,
    seq: u64,
    started: bool,
    finished: bool,
    items: Vec<Item>,
    open: Option<usize>,
    usage: Option<Usage>,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> Self {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            created: unix_now(),
            seq: 0,
            started: false,
            finished: false,
            items: Vec::new(),
            open: None,
            usage: None,
        }
    }

    /// Fixes `created_at` (tests and golden files).
    pub fn with_created(mut self, created: u64) -> Self {
        self.created = created;
        self
    }

    fn ev(&mut self, kind: &str, mut v: serde_json::Value, out: &mut Vec<Bytes>) {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push(sse::encode(Some(kind), &v.to_string()));
    }

    fn item_json(&self, n: usize, status: &str) -> serde_json::Value {
        let it = &self.items[n];
        match &it.kind {
            ItemKind::Text(t) => message_item(&it.id, status, t),
            ItemKind::Call {
                call_id,
                name,
                args,
            } => call_item(&it.id, status, call_id, name, args),
        }
    }

    fn close_open(&mut self, out: &mut Vec<Bytes>) {
        let Some(block) = self.open.take() else {
            return;
        };
        let Some(n) = self.items.iter().position(|i| i.block == block) else {
            return;
        };
        let id = self.items[n].id.clone();
        match &self.items[n].kind {
            ItemKind::Text(t) => {
                let t = t.clone();
                self.ev(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "text": t,
                        "logprobs": []}),
                    out,
                );
                self.ev(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0,
                        "part": {"type": "output_text", "text": t, "annotations": [],
                            "logprobs": []}}),
                    out,
                );
            }
            ItemKind::Call { args, .. } => {
                let a = args.clone();
                self.ev(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": n, "arguments": a}),
                    out,
                );
            }
        }
        self.items[n].done = true;
        let item = self.item_json(n, "completed");
        self.ev(
            "response.output_item.done",
            json!({"output_index": n, "item": item}),
            out,
        );
    }

    /// The item for canonical `block`, opening it (and closing another) when new.
    fn item_for(
        &mut self,
        block: usize,
        call: Option<(&str, &str)>,
        out: &mut Vec<Bytes>,
    ) -> usize {
        if let Some(n) = self.items.iter().position(|i| i.block == block) {
            return n;
        }
        self.close_open(out);
        let n = self.items.len();
        let base = item_base(&self.id).to_owned();
        let (id, kind) = match call {
            Some((call_id, name)) => (
                format!("fc_{base}_{n}"),
                ItemKind::Call {
                    call_id: call_id.to_owned(),
                    name: name.to_owned(),
                    args: String::new(),
                },
            ),
            None => (format!("msg_{base}_{n}"), ItemKind::Text(String::new())),
        };
        self.items.push(Item {
            block,
            id: id.clone(),
            kind,
            done: false,
        });
        self.open = Some(block);
        let item = match call {
            Some(_) => self.item_json(n, "in_progress"),
            None => json!({"id": id, "type": "message", "status": "in_progress",
                "role": "assistant", "content": []}),
        };
        self.ev(
            "response.output_item.added",
            json!({"output_index": n, "item": item}),
            out,
        );
        if call.is_none() {
            self.ev(
                "response.content_part.added",
                json!({"item_id": id, "output_index": n, "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [],
                        "logprobs": []}}),
                out,
            );
        }
        n
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        if self.finished {
            return Bytes::new();
        }
        let mut out = Vec::new();
        if !self.started && !matches!(ev, StreamEvent::Error { .. }) {
            self.begin(ev, &mut out);
        }
        match ev {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta { index, text } => self.text_delta(*index, text, &mut out),
            StreamEvent::ToolCallStart { index, id, name } => {
                self.item_for(*index, Some((id, name)), &mut out);
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                self.arguments_delta(*index, arguments, &mut out);
            }
            StreamEvent::BlockStop { index } => {
                if self.open == Some(*index) {
                    self.close_open(&mut out);
                }
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::Stop { reason, usage } => self.stop(*reason, *usage, &mut out),
            StreamEvent::Error {
                status,
                error_type,
                message,
            } => {
                let code = responses_error_code(classify_error(*status, error_type));
                self.ev(
                    "error",
                    json!({"code": code, "message": message, "param": null}),
                    &mut out,
                );
                self.finished = true;
            }
        }
        concat(out)
    }

    /// The first event (not an error): a `Start` fills an empty id and model; then
    /// `response.created` and `response.in_progress`.
    fn begin(&mut self, ev: &StreamEvent, out: &mut Vec<Bytes>) {
        self.started = true;
        if let StreamEvent::Start { id, model, .. } = ev {
            if self.id.is_empty() {
                self.id.clone_from(id);
            }
            if self.model.is_empty() {
                self.model.clone_from(model);
            }
        }
        let r = response_object(
            &self.id,
            &self.model,
            self.created,
            "in_progress",
            None,
            Vec::new(),
            None,
        );
        self.ev("response.created", json!({"response": r.clone()}), out);
        self.ev("response.in_progress", json!({"response": r}), out);
    }

    /// Text for canonical `block`, in its message item (opened when new).
    fn text_delta(&mut self, block: usize, text: &str, out: &mut Vec<Bytes>) {
        let n = self.item_for(block, None, out);
        if let ItemKind::Text(t) = &mut self.items[n].kind {
            t.push_str(text);
        }
        let id = self.items[n].id.clone();
        self.ev(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": n, "content_index": 0,
                "delta": text, "logprobs": []}),
            out,
        );
    }

    /// Argument text for canonical `block`, in its function call item (opened when new).
    fn arguments_delta(&mut self, block: usize, arguments: &str, out: &mut Vec<Bytes>) {
        let n = self.item_for(block, Some(("", "")), out);
        if let ItemKind::Call { args, .. } = &mut self.items[n].kind {
            args.push_str(arguments);
        }
        let id = self.items[n].id.clone();
        self.ev(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": n, "delta": arguments}),
            out,
        );
    }

    /// The end: the open item closes, then `response.completed` (or `response.incomplete`) with
    /// every item and the usage.
    fn stop(&mut self, reason: StopReason, usage: Option<Usage>, out: &mut Vec<Bytes>) {
        self.close_open(out);
        if usage.is_some() {
            self.usage = usage;
        }
        let output = (0..self.items.len())
            .map(|n| self.item_json(n, "completed"))
            .collect();
        let (status, incomplete) = status_of(reason);
        let r = response_object(
            &self.id,
            &self.model,
            self.created,
            status,
            incomplete,
            output,
            Some(self.usage.unwrap_or_default()),
        );
        let kind = if status == "completed" {
            "response.completed"
        } else {
            "response.incomplete"
        };
        self.ev(kind, json!({"response": r}), out);
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
        self.event(ev, out);
    }
}
