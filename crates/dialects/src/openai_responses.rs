//! OpenAI Responses (`POST /v1/responses`), wire-formats.md §1.1 and §2.2: translation through the
//! canonical form, the stream decoder/encoder (`event:` lines and `sequence_number`), errors in
//! OpenAI's shape.
//!
//! Responses is stateless here: `previous_response_id`/`conversation` cannot be translated, and
//! translated requests are sent with `store: false`.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::canonical::{
    ChatRequest, ChatResponse, JsonSchema, Message, Part, Role, StopReason, StreamEvent, Tool,
    ToolChoice, TranslateError,
};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::common::{
    classify_error, concat, data_url, normalize_messages, parse_any_error, parse_data_url,
    raw_json, schema_text, terr, unix_now, ErrorClass,
};
use crate::openai_chat::{self, error_status, openai_error_type};
use crate::request::ParsedRequest;
use crate::sse::{self, SseEvent};
use crate::InputOutputUsage as WireUsage;
use crate::Usage;

pub const PATH: &str = "/v1/responses";

/// A caller's Responses body → the canonical form.
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let wire: WireRequest = serde_json::from_slice(req.body())
        .map_err(|e| terr(format!("openai-responses body: {e}")))?;
    if wire.previous_response_id.is_some() || wire.conversation.is_some() {
        return Err(terr(
            "openai-responses `previous_response_id`/`conversation` (server-side state) cannot be translated",
        ));
    }
    let mut system: Vec<String> = wire.instructions.into_iter().collect();
    let mut messages = Vec::new();
    match wire.input.as_deref() {
        None => {}
        Some(raw) if raw.get().trim_start().starts_with('"') => {
            let t: String = serde_json::from_str(raw.get())
                .map_err(|e| terr(format!("openai-responses input: {e}")))?;
            messages.push(Message {
                role: Role::User,
                content: vec![Part::Text(t)],
            });
        }
        Some(raw) => {
            let items: Vec<WireItem> = serde_json::from_str(raw.get())
                .map_err(|e| terr(format!("openai-responses input: {e}")))?;
            for (i, item) in items.into_iter().enumerate() {
                input_item(item, i, &mut system, &mut messages)?;
            }
        }
    }
    let mut tools = Vec::new();
    for (i, t) in wire.tools.iter().flatten().enumerate() {
        if t.kind != "function" {
            return Err(terr(format!(
                "openai-responses tools[{i}]: tool type `{}` cannot be translated",
                t.kind
            )));
        }
        tools.push(Tool {
            name: t.name.clone().unwrap_or_default(),
            description: t.description.clone(),
            parameters: schema_text(t.parameters.as_deref()),
        });
    }
    let tool_choice = match &wire.tool_choice {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Any,
            "none" => ToolChoice::None,
            other => {
                return Err(terr(format!(
                    "openai-responses tool_choice `{other}` is unknown"
                )))
            }
        }),
        Some(v) => match (v["type"].as_str(), v["name"].as_str()) {
            (Some("function"), Some(name)) => Some(ToolChoice::Tool(name.to_owned())),
            _ => {
                return Err(terr(
                    "openai-responses tool_choice object cannot be translated (only {type:function,name})",
                ))
            }
        },
    };
    let json_schema = match wire.text.and_then(|t| t.format) {
        None => None,
        Some(f) => match f.kind.as_str() {
            "text" => None,
            "json_schema" => Some(JsonSchema {
                name: f.name.unwrap_or_default(),
                schema: schema_text(f.schema.as_deref()),
                strict: f.strict.unwrap_or(false),
            }),
            other => {
                return Err(terr(format!(
                    "openai-responses text.format `{other}` cannot be translated"
                )))
            }
        },
    };
    Ok(ChatRequest {
        model: req.model.clone(),
        system,
        messages: normalize_messages(messages),
        tools,
        tool_choice,
        max_tokens: wire.max_output_tokens,
        temperature: wire.temperature,
        top_p: wire.top_p,
        stop: Vec::new(),
        stream: req.stream,
        json_schema,
    })
}

fn input_item(
    item: WireItem,
    i: usize,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), TranslateError> {
    let kind = item.kind.as_deref().unwrap_or("message");
    match kind {
        "message" => {
            let role = item.role.as_deref().unwrap_or("user");
            let parts = item_content(item.content.as_deref(), i)?;
            match role {
                "system" | "developer" => {
                    let mut text = String::new();
                    for p in parts {
                        match p {
                            Part::Text(t) => text.push_str(&t),
                            _ => {
                                return Err(terr(format!(
                                    "openai-responses input[{i}]: system content may only be text"
                                )))
                            }
                        }
                    }
                    system.push(text);
                }
                "user" => messages.push(Message {
                    role: Role::User,
                    content: parts,
                }),
                "assistant" => messages.push(Message {
                    role: Role::Assistant,
                    content: parts,
                }),
                other => {
                    return Err(terr(format!(
                        "openai-responses input[{i}]: role `{other}` cannot be translated"
                    )))
                }
            }
        }
        "function_call" => messages.push(Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall {
                id: item.call_id.unwrap_or_default(),
                name: item.name.unwrap_or_default(),
                arguments: item.arguments.unwrap_or_default(),
            }],
        }),
        "function_call_output" => {
            let content = match item.output.as_deref() {
                None => String::new(),
                Some(raw) if raw.get().trim_start().starts_with('"') => {
                    serde_json::from_str(raw.get())
                        .map_err(|e| terr(format!("openai-responses input[{i}].output: {e}")))?
                }
                Some(raw) => {
                    let mut text = String::new();
                    for p in item_content(Some(raw), i)? {
                        match p {
                            Part::Text(t) => text.push_str(&t),
                            _ => {
                                return Err(terr(format!(
                                "openai-responses input[{i}]: function_call_output may only be text"
                            )))
                            }
                        }
                    }
                    text
                }
            };
            messages.push(Message {
                role: Role::User,
                content: vec![Part::ToolResult {
                    call_id: item.call_id.unwrap_or_default(),
                    content,
                    is_error: false,
                }],
            });
        }
        // Reasoning is not carried across dialects (docs/translation.md).
        "reasoning" => {}
        other => {
            return Err(terr(format!(
                "openai-responses input[{i}]: item type `{other}` cannot be translated"
            )))
        }
    }
    Ok(())
}

fn item_content(raw: Option<&RawValue>, i: usize) -> Result<Vec<Part>, TranslateError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let bad = |e: serde_json::Error| terr(format!("openai-responses input[{i}].content: {e}"));
    if raw.get().trim_start().starts_with('"') {
        return Ok(vec![Part::Text(
            serde_json::from_str(raw.get()).map_err(bad)?,
        )]);
    }
    let parts: Vec<WirePart> = serde_json::from_str(raw.get()).map_err(bad)?;
    parts
        .into_iter()
        .map(|p| match p.kind.as_str() {
            "input_text" | "output_text" | "text" => Ok(Part::Text(p.text.unwrap_or_default())),
            "refusal" => Ok(Part::Text(p.refusal.unwrap_or_default())),
            "input_image" => match p.image_url {
                Some(url) => {
                    let (media_type, data) = parse_data_url(&url)?;
                    Ok(Part::Image { media_type, data })
                }
                None => Err(terr(format!(
                    "openai-responses input[{i}]: input_image without a data: image_url (file_id) cannot be translated"
                ))),
            },
            other => Err(terr(format!(
                "openai-responses input[{i}]: content part `{other}` cannot be translated"
            ))),
        })
        .collect()
}

/// The canonical request → a Responses body (`store: false`). Responses has no stop sequences:
/// a request with `stop` is a [`TranslateError`]. One system text becomes `instructions`;
/// several become leading `system` input messages.
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    if !req.stop.is_empty() {
        return Err(terr("openai-responses cannot carry stop sequences"));
    }
    let mut input = Vec::new();
    let instructions = match req.system.as_slice() {
        [] => None,
        [one] => Some(one.as_str()),
        many => {
            for s in many {
                input.push(OutItem::Message {
                    kind: "message",
                    role: "system",
                    content: OutContent::Text(s),
                });
            }
            None
        }
    };
    for m in &req.messages {
        match m.role {
            Role::User => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => parts.push(OutPart::InputText { text: t }),
                        Part::Image { media_type, data } => parts.push(OutPart::InputImage {
                            image_url: data_url(media_type, data),
                            detail: "auto",
                        }),
                        Part::ToolResult {
                            call_id, content, ..
                        } => {
                            flush(&mut input, &mut parts, "user");
                            input.push(OutItem::FunctionCallOutput {
                                kind: "function_call_output",
                                call_id,
                                output: content,
                            });
                        }
                        Part::ToolCall { .. } => {
                            return Err(terr("a user turn cannot carry a tool call"))
                        }
                    }
                }
                flush(&mut input, &mut parts, "user");
            }
            Role::Assistant => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => parts.push(OutPart::OutputText { text: t }),
                        Part::ToolCall {
                            id,
                            name,
                            arguments,
                        } => {
                            flush(&mut input, &mut parts, "assistant");
                            input.push(OutItem::FunctionCall {
                                kind: "function_call",
                                call_id: id,
                                name,
                                arguments,
                            });
                        }
                        _ => {
                            return Err(terr(
                                "openai-responses assistant turns carry only text and tool calls",
                            ))
                        }
                    }
                }
                flush(&mut input, &mut parts, "assistant");
            }
        }
    }
    let tools = req
        .tools
        .iter()
        .map(|t| {
            Ok(OutTool {
                kind: "function",
                name: &t.name,
                description: t.description.as_deref(),
                parameters: raw_json(&t.parameters, "tool parameters")?,
                // Responses defaults `strict` to true, which rejects ordinary schemas.
                strict: false,
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let text = req
        .json_schema
        .as_ref()
        .map(|s| {
            Ok::<_, TranslateError>(OutText {
                format: OutFormat {
                    kind: "json_schema",
                    name: &s.name,
                    schema: raw_json(&s.schema, "json_schema schema")?,
                    strict: s.strict,
                },
            })
        })
        .transpose()?;
    let body = OutRequest {
        model: &req.model,
        instructions,
        input,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice: req.tool_choice.as_ref().map(|c| match c {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Tool(n) => json!({"type": "function", "name": n}),
        }),
        max_output_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        text,
        stream: req.stream,
        store: false,
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| terr(format!("rendering openai-responses body: {e}")))
}

fn flush<'a>(input: &mut Vec<OutItem<'a>>, parts: &mut Vec<OutPart<'a>>, role: &'static str) {
    if parts.is_empty() {
        return;
    }
    let content = match parts.as_slice() {
        [OutPart::InputText { text }] | [OutPart::OutputText { text }] => OutContent::Text(text),
        _ => OutContent::Parts(std::mem::take(parts)),
    };
    parts.clear();
    input.push(OutItem::Message {
        kind: "message",
        role,
        content,
    });
}

/// A provider's non-stream Response object → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|e| terr(format!("openai-responses response: {e}")))?;
    let mut content = Vec::new();
    for item in wire.output {
        match item.kind.as_deref().unwrap_or_default() {
            "message" => {
                for p in item_content(item.content.as_deref(), 0)? {
                    if let Part::Text(t) = p {
                        content.push(Part::Text(t));
                    }
                }
            }
            "function_call" => content.push(Part::ToolCall {
                id: item.call_id.unwrap_or_default(),
                name: item.name.unwrap_or_default(),
                arguments: item.arguments.unwrap_or_default(),
            }),
            _ => {} // reasoning and built-in tool items: dropped
        }
    }
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: stop_from_status(
            wire.incomplete_details
                .as_ref()
                .and_then(|d| d["reason"].as_str()),
            has_calls,
        ),
        usage: wire.usage.unwrap_or_default().canonical(),
    })
}

fn stop_from_status(incomplete_reason: Option<&str>, has_calls: bool) -> StopReason {
    match incomplete_reason {
        Some("max_output_tokens") => StopReason::MaxTokens,
        Some("content_filter") => StopReason::ContentFilter,
        _ if has_calls => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

/// `(status, incomplete reason)` of a finished response with this stop reason.
fn status_of(reason: StopReason) -> (&'static str, Option<&'static str>) {
    match reason {
        StopReason::MaxTokens => ("incomplete", Some("max_output_tokens")),
        StopReason::ContentFilter => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    }
}

fn usage_json(u: Usage) -> serde_json::Value {
    json!({
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// The Response object (every field the SDKs' `Response` model declares).
fn response_object(
    id: &str,
    model: &str,
    created: u64,
    status: &str,
    incomplete: Option<&str>,
    output: Vec<serde_json::Value>,
    usage: Option<Usage>,
) -> serde_json::Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": incomplete.map(|r| json!({"reason": r})),
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage.map(usage_json),
        "user": null,
        "metadata": {},
    })
}

fn item_base(id: &str) -> &str {
    id.strip_prefix("resp_").unwrap_or(id)
}

fn message_item(id: &str, status: &str, text: &str) -> serde_json::Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

fn call_item(id: &str, status: &str, call_id: &str, name: &str, args: &str) -> serde_json::Value {
    json!({"id": id, "type": "function_call", "status": status, "arguments": args,
        "call_id": call_id, "name": name})
}

/// Canonical → the caller's non-stream Response object (`created_at` = now).
pub fn render_response(resp: &ChatResponse) -> Bytes {
    render_response_at(resp, unix_now())
}

/// [`render_response`] with a fixed `created_at` (tests and golden files).
pub fn render_response_at(resp: &ChatResponse, created: u64) -> Bytes {
    let base = item_base(&resp.id);
    let output = resp
        .content
        .iter()
        .enumerate()
        .filter_map(|(n, p)| match p {
            Part::Text(t) => Some(message_item(&format!("msg_{base}_{n}"), "completed", t)),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(call_item(
                &format!("fc_{base}_{n}"),
                "completed",
                id,
                name,
                arguments,
            )),
            _ => None,
        })
        .collect();
    let (status, incomplete) = status_of(resp.stop_reason);
    let v = response_object(
        &resp.id,
        &resp.model,
        created,
        status,
        incomplete,
        output,
        Some(resp.usage),
    );
    Bytes::from(v.to_string())
}

/// Usage of a non-stream Response object.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    WireUsage::of_response(body)
}

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
        self.sse.push(bytes);
        let mut out = Vec::new();
        while let Some(ev) = self.sse.next_event() {
            self.event(&ev, &mut out);
        }
        if self.sse.take_overflow() {
            out.push(StreamEvent::protocol_failure(
                crate::canonical::EVENT_TOO_LARGE,
            ));
        }
        out
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
            "response.function_call_arguments.delta" => {
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
            "response.output_item.done" => {
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
            "response.completed" | "response.incomplete" => {
                let r = &v["response"];
                let usage = r.get("usage").filter(|u| u.is_object()).map(|u| Usage {
                    input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
                    output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
                });
                out.push(StreamEvent::Stop {
                    reason: stop_from_status(
                        r["incomplete_details"]["reason"].as_str(),
                        self.has_calls,
                    ),
                    usage,
                });
                self.finished = true;
            }
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
            self.ev("response.created", json!({"response": r.clone()}), &mut out);
            self.ev("response.in_progress", json!({"response": r}), &mut out);
        }
        match ev {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta { index, text } => {
                let n = self.item_for(*index, None, &mut out);
                if let ItemKind::Text(t) = &mut self.items[n].kind {
                    t.push_str(text);
                }
                let id = self.items[n].id.clone();
                self.ev(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": n, "content_index": 0,
                        "delta": text, "logprobs": []}),
                    &mut out,
                );
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                self.item_for(*index, Some((id, name)), &mut out);
            }
            StreamEvent::ToolCallDelta { index, arguments } => {
                let n = self.item_for(*index, Some(("", "")), &mut out);
                if let ItemKind::Call { args, .. } = &mut self.items[n].kind {
                    args.push_str(arguments);
                }
                let id = self.items[n].id.clone();
                self.ev(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": n, "delta": arguments}),
                    &mut out,
                );
            }
            StreamEvent::BlockStop { index } => {
                if self.open == Some(*index) {
                    self.close_open(&mut out);
                }
            }
            StreamEvent::Usage(u) => self.usage = Some(*u),
            StreamEvent::Stop { reason, usage } => {
                self.close_open(&mut out);
                if usage.is_some() {
                    self.usage = *usage;
                }
                let output = (0..self.items.len())
                    .map(|n| self.item_json(n, "completed"))
                    .collect();
                let (status, incomplete) = status_of(*reason);
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
                self.ev(kind, json!({"response": r}), &mut out);
                self.finished = true;
            }
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
}

impl Default for StreamEncoder {
    fn default() -> Self {
        Self::new("", "")
    }
}

/// The `code` of a Responses `error` event for an error class.
fn responses_error_code(c: ErrorClass) -> &'static str {
    match c {
        ErrorClass::RateLimit => "rate_limit_exceeded",
        ErrorClass::Overloaded => "overloaded",
        ErrorClass::InvalidRequest | ErrorClass::TooLarge => "invalid_prompt",
        _ => "server_error",
    }
}

/// A gateway-made error: the same JSON shape as chat completions (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    openai_chat::render_error(kind, message)
}

/// The event that ends a committed stream after an upstream failure: `event: error` with a
/// `type:"error"` payload (wire-formats.md §2.2). A [`StreamEncoder`] given a
/// `StreamEvent::Error` does the same with its running `sequence_number`.
pub fn render_stream_error(message: &str) -> Bytes {
    sse::encode(
        Some("error"),
        &json!({"type": "error", "code": "server_error", "message": message, "param": null,
            "sequence_number": 0})
        .to_string(),
    )
}

/// A provider error body → (error type, message), tolerant of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, |c| openai_error_type(c).0)
}

/// A translated upstream error in OpenAI's shape: status kept, type mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    openai_chat::render_upstream_error(status, error_type, message)
}

// ---- wire shapes ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    input: Option<Box<RawValue>>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    tools: Option<Vec<WireTool>>,
    #[serde(default)]
    tool_choice: Option<serde_json::Value>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    text: Option<WireText>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    conversation: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireItem {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Box<RawValue>>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    output: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WirePart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    image_url: Option<String>,
}

#[derive(Deserialize)]
struct WireTool {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WireText {
    #[serde(default)]
    format: Option<WireFormat>,
}

#[derive(Deserialize)]
struct WireFormat {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    schema: Option<Box<RawValue>>,
    #[serde(default)]
    strict: Option<bool>,
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    output: Vec<WireItem>,
    #[serde(default)]
    incomplete_details: Option<serde_json::Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Serialize)]
struct OutRequest<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    input: Vec<OutItem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<OutTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<OutText<'a>>,
    stream: bool,
    store: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutItem<'a> {
    Message {
        #[serde(rename = "type")]
        kind: &'static str,
        role: &'static str,
        content: OutContent<'a>,
    },
    FunctionCall {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        output: &'a str,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutContent<'a> {
    Text(&'a str),
    Parts(Vec<OutPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutPart<'a> {
    InputText {
        text: &'a str,
    },
    InputImage {
        image_url: String,
        detail: &'static str,
    },
    OutputText {
        text: &'a str,
    },
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: Box<RawValue>,
    strict: bool,
}

#[derive(Serialize)]
struct OutText<'a> {
    format: OutFormat<'a>,
}

#[derive(Serialize)]
struct OutFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    schema: Box<RawValue>,
    strict: bool,
}
