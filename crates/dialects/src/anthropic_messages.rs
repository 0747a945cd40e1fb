//! Anthropic Messages (`POST /v1/messages`), wire-formats.md §1.2 and §2.3: translation through
//! the canonical form, the stream decoder/encoder, and errors in Anthropic's shape.
//!
//! The Bedrock InvokeModel body for Anthropic models is this body without `model`/`stream` and
//! with `anthropic_version` ([`invoke_body`]); its stream payloads are these events
//! ([`StreamDecoder::push_event`]).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::canonical::{
    ChatRequest, ChatResponse, Message, Part, Role, StopReason, StreamEvent, Tool, ToolChoice,
    TranslateError,
};
use crate::errors::{status_for_error_type, GatewayErrorKind, RenderedError};
use crate::common::{
    classify_error, concat, normalize_messages, parse_any_error, raw_json, schema_text, terr,
    ErrorClass,
};
use crate::request::ParsedRequest;
use crate::sse::{self, SseEvent};
use crate::InputOutputUsage as WireUsage;
use crate::Usage;

pub const PATH: &str = "/v1/messages";

/// Anthropic requires `max_tokens`; this is sent when the canonical request has none.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// A caller's Messages body → the canonical form.
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let wire: WireRequest = serde_json::from_slice(req.body())
        .map_err(|e| terr(format!("anthropic-messages body: {e}")))?;
    let system = match wire.system.as_deref() {
        None => Vec::new(),
        Some(raw) => match raw.get().trim_start().as_bytes().first() {
            Some(b'"') => vec![serde_json::from_str::<String>(raw.get())
                .map_err(|e| terr(format!("anthropic-messages system: {e}")))?],
            Some(b'n') => Vec::new(),
            _ => blocks(raw, "system")?
                .into_iter()
                .map(|b| match b.kind.as_str() {
                    "text" => Ok(b.text.unwrap_or_default()),
                    other => Err(terr(format!(
                        "anthropic-messages system block `{other}` cannot be translated"
                    ))),
                })
                .collect::<Result<_, _>>()?,
        },
    };
    let mut messages = Vec::new();
    for (i, m) in wire.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(terr(format!(
                    "anthropic-messages messages[{i}]: role `{other}` cannot be translated"
                )))
            }
        };
        messages.push(Message {
            role,
            content: content_parts(&m.content, i)?,
        });
    }
    let mut tools = Vec::new();
    for (i, t) in wire.tools.iter().flatten().enumerate() {
        if let Some(kind) = t.kind.as_deref().filter(|k| *k != "custom") {
            return Err(terr(format!(
                "anthropic-messages tools[{i}]: server tool `{kind}` cannot be translated"
            )));
        }
        tools.push(Tool {
            name: t.name.clone(),
            description: t.description.clone(),
            parameters: schema_text(t.input_schema.as_deref()),
        });
    }
    let tool_choice = match &wire.tool_choice {
        None => None,
        Some(c) => Some(match c.kind.as_str() {
            "auto" => ToolChoice::Auto,
            "any" => ToolChoice::Any,
            "none" => ToolChoice::None,
            "tool" => ToolChoice::Tool(c.name.clone().unwrap_or_default()),
            other => {
                return Err(terr(format!(
                    "anthropic-messages tool_choice `{other}` is unknown"
                )))
            }
        }),
    };
    Ok(ChatRequest {
        model: req.model.clone(),
        system,
        messages: normalize_messages(messages),
        tools,
        tool_choice,
        max_tokens: wire.max_tokens,
        temperature: wire.temperature,
        top_p: wire.top_p,
        stop: wire.stop_sequences.unwrap_or_default(),
        stream: req.stream,
        json_schema: None,
    })
}

/// The canonical request → a Messages body (with `model` and `stream`). JSON-schema output has
/// no Messages field: that is a [`TranslateError`], so eligibility skips the destination.
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    render_body(req, true, None)
}

/// The Bedrock InvokeModel body for an Anthropic model (wire-formats.md §4.3): the Messages body
/// without `model` and `stream`, with `anthropic_version` (e.g. `bedrock-2023-05-31`).
pub fn invoke_body(req: &ChatRequest, anthropic_version: &str) -> Result<Bytes, TranslateError> {
    render_body(req, false, Some(anthropic_version))
}

fn render_body(
    req: &ChatRequest,
    with_model_and_stream: bool,
    anthropic_version: Option<&str>,
) -> Result<Bytes, TranslateError> {
    if req.json_schema.is_some() {
        return Err(terr("anthropic-messages cannot carry json_schema output"));
    }
    let system = match req.system.as_slice() {
        [] => None,
        [one] => Some(OutSystem::Text(one)),
        many => Some(OutSystem::Blocks(
            many.iter().map(|t| OutBlock::Text { text: t }).collect(),
        )),
    };
    let mut messages = Vec::new();
    for m in &req.messages {
        let mut content = Vec::new();
        for p in &m.content {
            content.push(match p {
                Part::Text(t) => OutBlock::Text { text: t },
                Part::Image { media_type, data } => OutBlock::Image {
                    source: OutSource {
                        kind: "base64",
                        media_type,
                        data,
                    },
                },
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => OutBlock::ToolUse {
                    id,
                    name,
                    input: raw_json(arguments, "tool call arguments")?,
                },
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => OutBlock::ToolResult {
                    tool_use_id: call_id,
                    content,
                    is_error: *is_error,
                },
            });
        }
        messages.push(OutMessage {
            role: match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            content,
        });
    }
    let tools = req
        .tools
        .iter()
        .map(|t| {
            Ok(OutTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: raw_json(&t.parameters, "tool parameters")?,
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let body = OutRequest {
        anthropic_version,
        model: with_model_and_stream.then_some(req.model.as_str()),
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system,
        messages,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice: req.tool_choice.as_ref().map(|c| match c {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::Any => json!({"type": "any"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Tool(n) => json!({"type": "tool", "name": n}),
        }),
        temperature: req.temperature,
        top_p: req.top_p,
        stop_sequences: (!req.stop.is_empty()).then_some(&req.stop),
        stream: with_model_and_stream.then_some(req.stream),
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| terr(format!("rendering anthropic-messages body: {e}")))
}

/// A provider's non-stream `Message` (also Bedrock InvokeModel's answer) → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|e| terr(format!("anthropic-messages response: {e}")))?;
    let mut content = Vec::new();
    for b in wire.content {
        match b.kind.as_str() {
            "text" => content.push(Part::Text(b.text.unwrap_or_default())),
            "tool_use" => content.push(Part::ToolCall {
                id: b.id.unwrap_or_default(),
                name: b.name.unwrap_or_default(),
                arguments: b
                    .input
                    .map_or_else(|| "{}".to_owned(), |r| r.get().to_owned()),
            }),
            _ => {} // thinking, server tool blocks: dropped (docs/translation.md)
        }
    }
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: stop_from_wire(wire.stop_reason.as_deref()),
        usage: wire.usage.unwrap_or_default().canonical(),
    })
}

/// Canonical → the caller's non-stream `Message`.
pub fn render_response(resp: &ChatResponse) -> Bytes {
    let content: Vec<serde_json::Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(json!({"type": "text", "text": t})),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"type": "tool_use", "id": id, "name": name,
                "input": serde_json::from_str::<serde_json::Value>(arguments)
                    .ok()
                    .filter(serde_json::Value::is_object)
                    .unwrap_or_else(|| json!({}))})),
            _ => None,
        })
        .collect();
    let body = json!({
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_to_wire(resp.stop_reason),
        "stop_sequence": null,
        "usage": {
            "input_tokens": resp.usage.input_tokens,
            "output_tokens": resp.usage.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    });
    Bytes::from(body.to_string())
}

/// Usage of a non-stream `Message`.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    WireUsage::of_response(body)
}

pub(crate) fn stop_from_wire(reason: Option<&str>) -> StopReason {
    match reason {
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("tool_use") => StopReason::ToolUse,
        Some("refusal") => StopReason::ContentFilter,
        _ => StopReason::EndTurn, // end_turn, pause_turn, unknown
    }
}

pub(crate) fn stop_to_wire(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "refusal",
    }
}

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
        self.sse.push(bytes);
        let mut out = Vec::new();
        while let Some(ev) = self.sse.next_event() {
            out.extend(self.push_event(&ev.data));
        }
        if self.sse.take_overflow() {
            out.push(StreamEvent::protocol_failure(
                crate::canonical::EVENT_TOO_LARGE,
            ));
        }
        out
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
        let block_of = |s: &Self, v: &serde_json::Value| {
            let i = v["index"].as_u64().unwrap_or(0);
            s.blocks.iter().find(|(a, _)| *a == i).and_then(|(_, c)| *c)
        };
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
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
            "content_block_start" => {
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
            "content_block_delta" => {
                if let Some(index) = block_of(self, &v) {
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
            "content_block_stop" => {
                if let Some(index) = block_of(self, &v) {
                    out.push(StreamEvent::BlockStop { index });
                }
            }
            "message_delta" => {
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
            "message_stop" => {
                out.push(StreamEvent::Stop {
                    reason: self.stop.unwrap_or(StopReason::EndTurn),
                    usage: Some(self.usage),
                });
                self.finished = true;
            }
            "error" => {
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
            _ => {} // ping and unknown events
        }
        out
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
            out.push(Self::ev(
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": self.id, "type": "message", "role": "assistant", "content": [],
                    "model": self.model, "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": self.usage.input_tokens, "output_tokens": 0}}}),
            ));
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
            StreamEvent::Stop { reason, usage } => {
                self.close_open(&mut out);
                if let Some(u) = usage {
                    self.usage = *u;
                }
                out.push(Self::ev(
                    "message_delta",
                    &json!({"type": "message_delta",
                        "delta": {"stop_reason": stop_to_wire(*reason), "stop_sequence": null},
                        "usage": {"input_tokens": self.usage.input_tokens,
                            "output_tokens": self.usage.output_tokens}}),
                ));
                out.push(Self::ev("message_stop", &json!({"type": "message_stop"})));
                self.finished = true;
            }
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
}

impl Default for StreamEncoder {
    fn default() -> Self {
        Self::new("", "")
    }
}

fn stream_error(error_type: &str, message: &str) -> Bytes {
    sse::encode(
        Some("error"),
        &json!({"type": "error", "error": {"type": error_type, "message": message}}).to_string(),
    )
}

/// Anthropic `error.type` for an error class.
pub(crate) fn anthropic_error_type(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::InvalidRequest => "invalid_request_error",
        ErrorClass::Authentication => "authentication_error",
        ErrorClass::Billing => "billing_error",
        ErrorClass::Permission => "permission_error",
        ErrorClass::NotFound => "not_found_error",
        ErrorClass::Timeout => "timeout_error",
        ErrorClass::Conflict => "conflict_error",
        ErrorClass::TooLarge => "request_too_large",
        ErrorClass::RateLimit => "rate_limit_error",
        ErrorClass::Overloaded => "overloaded_error",
        ErrorClass::Server => "api_error",
    }
}

fn error_body(error_type: &str, message: &str) -> Bytes {
    Bytes::from(
        json!({"type": "error", "error": {"type": error_type, "message": message},
            "request_id": null})
        .to_string(),
    )
}

/// A gateway-made error in Anthropic's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, error_type) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "invalid_request_error"),
        GatewayErrorKind::Unauthenticated => (401, "authentication_error"),
        GatewayErrorKind::PermissionDenied => (403, "permission_error"),
        GatewayErrorKind::NotFound => (404, "not_found_error"),
        GatewayErrorKind::TooLarge => (413, "request_too_large"),
        GatewayErrorKind::RequestTimeout => (408, "timeout_error"),
        GatewayErrorKind::RateLimited => (429, "rate_limit_error"),
        GatewayErrorKind::BadGateway => (502, "api_error"),
        GatewayErrorKind::GatewayTimeout => (504, "timeout_error"),
        GatewayErrorKind::Unavailable => (503, "api_error"),
    };
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: error_body(error_type, message),
    }
}

/// The event that ends a committed stream after an upstream failure (wire-formats.md §2.3).
pub fn render_stream_error(message: &str) -> Bytes {
    stream_error("api_error", message)
}

/// A provider error body → (error type, message), tolerant of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, anthropic_error_type)
}

/// A translated upstream error in Anthropic's shape: status kept, type mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: error_body(
            anthropic_error_type(classify_error(status, error_type)),
            message,
        ),
    }
}

// ---- wire shapes ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    system: Option<Box<RawValue>>,
    #[serde(default)]
    messages: Vec<WireMessage>,
    #[serde(default)]
    tools: Option<Vec<WireTool>>,
    #[serde(default)]
    tool_choice: Option<WireToolChoice>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    content: Box<RawValue>,
}

#[derive(Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    source: Option<WireSource>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    content: Option<Box<RawValue>>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct WireSource {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Deserialize)]
struct WireTool {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WireToolChoice {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Vec<WireBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

fn blocks(raw: &RawValue, what: &str) -> Result<Vec<WireBlock>, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|e| terr(format!("anthropic-messages {what}: {e}")))
}

fn content_parts(raw: &RawValue, i: usize) -> Result<Vec<Part>, TranslateError> {
    if raw.get().trim_start().starts_with('"') {
        let t: String = serde_json::from_str(raw.get())
            .map_err(|e| terr(format!("anthropic-messages messages[{i}].content: {e}")))?;
        return Ok(vec![Part::Text(t)]);
    }
    let mut out = Vec::new();
    for b in blocks(raw, &format!("messages[{i}].content"))? {
        match b.kind.as_str() {
            "text" => out.push(Part::Text(b.text.unwrap_or_default())),
            "image" => {
                let src = b
                    .source
                    .ok_or_else(|| terr("anthropic-messages image block without source"))?;
                if src.kind != "base64" {
                    return Err(terr(format!(
                        "anthropic-messages image source `{}` cannot be translated; only base64 images can",
                        src.kind
                    )));
                }
                out.push(Part::Image {
                    media_type: src.media_type.unwrap_or_default(),
                    data: src.data.unwrap_or_default(),
                });
            }
            "tool_use" => out.push(Part::ToolCall {
                id: b.id.unwrap_or_default(),
                name: b.name.unwrap_or_default(),
                arguments: b
                    .input
                    .map_or_else(|| "{}".to_owned(), |r| r.get().to_owned()),
            }),
            "tool_result" => out.push(Part::ToolResult {
                call_id: b.tool_use_id.unwrap_or_default(),
                content: tool_result_text(b.content.as_deref(), i)?,
                is_error: b.is_error.unwrap_or(false),
            }),
            // Reasoning is not carried across dialects (docs/translation.md).
            "thinking" | "redacted_thinking" => {}
            other => {
                return Err(terr(format!(
                    "anthropic-messages messages[{i}]: content block `{other}` cannot be translated"
                )))
            }
        }
    }
    Ok(out)
}

fn tool_result_text(raw: Option<&RawValue>, i: usize) -> Result<String, TranslateError> {
    let Some(raw) = raw else {
        return Ok(String::new());
    };
    if raw.get().trim_start().starts_with('"') {
        return serde_json::from_str(raw.get())
            .map_err(|e| terr(format!("anthropic-messages messages[{i}] tool_result: {e}")));
    }
    let mut out = String::new();
    for b in blocks(raw, "tool_result content")? {
        match b.kind.as_str() {
            "text" => out.push_str(&b.text.unwrap_or_default()),
            other => {
                return Err(terr(format!(
                    "anthropic-messages messages[{i}]: tool_result `{other}` content cannot be translated"
                )))
            }
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct OutRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    anthropic_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<OutSystem<'a>>,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<OutTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<&'a Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutSystem<'a> {
    Text(&'a str),
    Blocks(Vec<OutBlock<'a>>),
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Vec<OutBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: OutSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Box<RawValue>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize)]
struct OutSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct OutTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: Box<RawValue>,
}
