//! `streamGenerateContent?alt=sse`: each SSE `data:` line is a whole `GenerateContentResponse`
//! holding the next parts; the last carries `finishReason` and the final `usageMetadata`; there
//! is no end marker. An `{"error": …}` chunk is an in-stream error.

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::canonical::{Part, StopReason, StreamEvent};
use crate::common::concat;
use crate::sse;
use crate::Usage;

use super::response::{
    error_json, out_response, part_of, status_name, stop_from_wire, WCandidate, WError, WResponse,
    WUsage,
};
use super::wire::{out_args, OutCall, OutPart};

fn empty_args() -> Box<RawValue> {
    serde_json::from_str("{}").unwrap_or_else(|_| unreachable!())
}

/// A provider's Gemini SSE → canonical stream events. Consecutive text parts form one text
/// block; each function call is a block of its own (its arguments arrive whole).
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: sse::SseDecoder,
    started: bool,
    /// The canonical index of the open text block.
    text_block: Option<usize>,
    next_block: usize,
    calls: usize,
    saw_call: bool,
    usage: Option<Usage>,
    /// A finish seen in a chunk without usage: sent with the next usage or at the end.
    held: Option<StopReason>,
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

    pub fn failed(&self) -> bool {
        self.sse.overflowed()
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        crate::sse::SseStream::push_sse(self, bytes)
    }

    /// The stream ended: a finish still waiting for its usage is sent now.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        match self.held.take() {
            Some(reason) if !self.finished => {
                self.finished = true;
                vec![StreamEvent::Stop {
                    reason,
                    usage: self.usage,
                }]
            }
            _ => Vec::new(),
        }
    }

    fn push_chunk(&mut self, data: &str, out: &mut Vec<StreamEvent>) {
        if self.finished {
            return;
        }
        let Ok(w) = serde_json::from_str::<WResponse>(data) else {
            return;
        };
        if let Some(e) = w.error {
            self.fail(e, out);
            return;
        }
        let has_usage = self.begin(w.usage_metadata, w.response_id, w.model_version, out);
        if let Some(reason) = self.held {
            if has_usage {
                self.held = None;
                self.stop(reason, out);
            }
            return;
        }
        let cand = w.candidates.into_iter().next();
        let blocked = cand.is_none() && w.prompt_feedback.is_some_and(|f| f.block_reason.is_some());
        let reason = cand.as_ref().and_then(|c| c.finish_reason.clone());
        self.parts(cand, out);
        if reason.is_none() && !blocked {
            return;
        }
        let reason = if blocked {
            StopReason::ContentFilter
        } else {
            stop_from_wire(reason.as_deref(), self.saw_call)
        };
        self.close_text(out);
        if has_usage {
            self.stop(reason, out);
        } else {
            self.held = Some(reason);
        }
    }

    /// An `{"error": …}` chunk: an in-stream error, and the stream is over.
    fn fail(&mut self, e: WError, out: &mut Vec<StreamEvent>) {
        let status = e.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
        out.push(StreamEvent::Error {
            status,
            error_type: e.status.unwrap_or_else(|| "INTERNAL".into()),
            message: e.message.unwrap_or_default(),
        });
        self.finished = true;
    }

    /// Records a chunk's usage and, on the first chunk, starts the stream; whether the chunk
    /// carried usage.
    fn begin(
        &mut self,
        usage: Option<WUsage>,
        id: String,
        model: String,
        out: &mut Vec<StreamEvent>,
    ) -> bool {
        let has_usage = usage.is_some();
        if let Some(u) = usage {
            self.usage = Some(u.canonical());
        }
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id,
                model,
                input_tokens: self.usage.map(|u| u.input_tokens),
            });
        }
        has_usage
    }

    /// The candidate's parts: text extends the open text block (opening one if needed); each
    /// function call is a whole block of its own.
    fn parts(&mut self, cand: Option<WCandidate>, out: &mut Vec<StreamEvent>) {
        for p in cand
            .and_then(|c| c.content)
            .map(|c| c.parts)
            .unwrap_or_default()
        {
            match part_of(p, &mut self.calls) {
                Some(Part::Text(t)) if !t.is_empty() => {
                    let index = self.text_index();
                    out.push(StreamEvent::TextDelta { index, text: t });
                }
                Some(Part::ToolCall {
                    id,
                    name,
                    arguments,
                }) => {
                    self.close_text(out);
                    self.saw_call = true;
                    let index = self.next_block;
                    self.next_block += 1;
                    out.push(StreamEvent::ToolCallStart { index, id, name });
                    out.push(StreamEvent::ToolCallDelta { index, arguments });
                    out.push(StreamEvent::BlockStop { index });
                }
                _ => {}
            }
        }
    }

    /// The open text block's index, opening one when none is open.
    fn text_index(&mut self) -> usize {
        match self.text_block {
            Some(i) => i,
            None => {
                let i = self.next_block;
                self.next_block += 1;
                self.text_block = Some(i);
                i
            }
        }
    }

    fn close_text(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(index) = self.text_block.take() {
            out.push(StreamEvent::BlockStop { index });
        }
    }

    fn stop(&mut self, reason: StopReason, out: &mut Vec<StreamEvent>) {
        out.push(StreamEvent::Stop {
            reason,
            usage: self.usage,
        });
        self.finished = true;
    }
}

/// Canonical stream events → the caller's Gemini SSE: one chunk per text delta, one per whole
/// function call (its argument fragments gathered until the block stops), and a last chunk with
/// `finishReason` and `usageMetadata`.
#[derive(Debug)]
pub struct StreamEncoder {
    id: String,
    model: String,
    usage: Usage,
    /// Open function calls: canonical index, id, name, arguments so far.
    calls: Vec<(usize, String, String, String)>,
    finished: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> Self {
        StreamEncoder {
            id: id.to_owned(),
            model: model.to_owned(),
            usage: Usage::default(),
            calls: Vec::new(),
            finished: false,
        }
    }

    fn chunk(&self, parts: Vec<OutPart<'_>>, finish: Option<StopReason>) -> Bytes {
        sse::encode(
            None,
            &out_response(parts, finish, self.usage, &self.model, &self.id),
        )
    }

    fn call_part<'a>(id: &'a str, name: &'a str, arguments: &str) -> OutPart<'a> {
        OutPart::Call {
            function_call: OutCall {
                id,
                name,
                args: out_args(arguments, true).unwrap_or_else(|_| empty_args()),
            },
        }
    }

    pub fn encode(&mut self, ev: &StreamEvent) -> Bytes {
        if self.finished {
            return Bytes::new();
        }
        match ev {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                if self.id.is_empty() {
                    self.id.clone_from(id);
                }
                if self.model.is_empty() {
                    self.model.clone_from(model);
                }
                self.usage.input_tokens = input_tokens.unwrap_or(0);
                Bytes::new()
            }
            StreamEvent::TextDelta { text, .. } => self.chunk(vec![OutPart::Text { text }], None),
            StreamEvent::ToolCallStart { index, id, name } => {
                self.calls
                    .push((*index, id.clone(), name.clone(), String::new()));
                Bytes::new()
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                if let Some(c) = self.calls.iter_mut().find(|c| c.0 == *index) {
                    c.3.push_str(arguments);
                }
                Bytes::new()
            }
            StreamEvent::BlockStop { index } => match self.calls.iter().position(|c| c.0 == *index)
            {
                Some(k) => {
                    let (_, id, name, args) = self.calls.remove(k);
                    self.chunk(vec![Self::call_part(&id, &name, &args)], None)
                }
                None => Bytes::new(),
            },
            StreamEvent::Usage(u) => {
                self.usage = *u;
                Bytes::new()
            }
            StreamEvent::Stop { reason, usage } => {
                if let Some(u) = usage {
                    self.usage = *u;
                }
                let mut out = Vec::new();
                for (_, id, name, args) in std::mem::take(&mut self.calls) {
                    out.push(self.chunk(vec![Self::call_part(&id, &name, &args)], None));
                }
                out.push(self.chunk(vec![OutPart::Text { text: "" }], Some(*reason)));
                self.finished = true;
                concat(out)
            }
            StreamEvent::Error {
                status,
                error_type,
                message,
            } => {
                self.finished = true;
                sse::encode(
                    None,
                    &error_json(*status, status_name(*status, error_type), message).to_string(),
                )
            }
        }
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
        self.push_chunk(&ev.data, out);
    }
}
