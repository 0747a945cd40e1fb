//! OpenAI Chat Completions (`POST /v1/chat/completions`), wire-formats.md §1.1 and §2.1.

use std::sync::LazyLock;

use bytes::Bytes;
use memchr::memmem::Finder;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::canonical::StreamEvent;
use crate::canonical::{
    ChatRequest, ChatResponse, JsonSchema, Message, Part, Role, StopReason, Tool, ToolChoice,
    TranslateError,
};
use crate::common::{
    classify_error, concat, data_url, normalize_messages, parse_any_error, parse_data_url,
    raw_json, schema_text, specific_error_type, terr, unix_now, ErrorClass,
};
use crate::errors::{status_for_error_type, GatewayErrorKind, RenderedError};
use crate::json_tail;
use crate::request::{ParseError, ParsedRequest};
use crate::sse::{self, SseEvent};
use crate::{Dialect, Usage};

pub const PATH: &str = "/v1/chat/completions";

/// Parses a caller body.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    ParsedRequest::parse_json_top(Dialect::OpenAiChat, body)
}

/// The body for an OpenAI-kind destination serving `model`.
pub fn render_request(req: &ParsedRequest, model: &str) -> Bytes {
    req.body_with_model(model)
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
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

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
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
fn choices_cannot_fail(data: &[u8]) -> bool {
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

/// Usage of a non-streamed response body (read from the end of the body when possible: see
/// `json_tail`).
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    json_tail::response_usage::<WireUsage>(body).map(WireUsage::canonical)
}

fn error_json(error_type: &str, code: Option<&str>, message: &str) -> serde_json::Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
}

/// A gateway-made error in OpenAI's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, error_type, code) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "invalid_request_error", None),
        GatewayErrorKind::Unauthenticated => (401, "authentication_error", Some("invalid_api_key")),
        GatewayErrorKind::PermissionDenied => (403, "permission_error", None),
        GatewayErrorKind::NotFound => (404, "not_found_error", Some("model_not_found")),
        GatewayErrorKind::TooLarge => (413, "invalid_request_error", Some("request_too_large")),
        GatewayErrorKind::RequestTimeout => (408, "invalid_request_error", Some("request_timeout")),
        GatewayErrorKind::RateLimited => (429, "rate_limit_error", Some("rate_limit_exceeded")),
        GatewayErrorKind::BadGateway => (502, "api_error", Some("upstream_connection_error")),
        GatewayErrorKind::GatewayTimeout => (504, "api_error", Some("upstream_timeout")),
        GatewayErrorKind::Unavailable => (503, "api_error", Some("no_eligible_destination")),
    };
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: Bytes::from(error_json(error_type, code, message).to_string()),
    }
}

/// The event that ends a committed stream after an upstream failure: `data: {"error":…}` and no
/// `[DONE]` — openai-python raises `openai.APIError` on it (wire-formats.md §2.1).
pub fn render_stream_error(message: &str) -> Bytes {
    sse::encode(None, &error_json("server_error", None, message).to_string())
}

// ---------------------------------------------------------------------------------------------
// Translation through the canonical form (SPEC §5.7, docs/translation.md). The same functions
// exist in `anthropic_messages` and `openai_responses`; the gateway picks a module by dialect.
// ---------------------------------------------------------------------------------------------

/// A caller's chat-completions body → the canonical form.
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let wire: ChatWireRequest =
        serde_json::from_slice(req.body()).map_err(|e| terr(format!("openai-chat body: {e}")))?;
    if wire.n.is_some_and(|n| n > 1) {
        return Err(terr("openai-chat `n` > 1 cannot be translated"));
    }
    if wire.functions.is_some() || wire.function_call.is_some() {
        return Err(terr(
            "openai-chat legacy `functions`/`function_call` cannot be translated; use `tools`",
        ));
    }
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for (i, m) in wire.messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "developer" => system.push(chat_text_content(m.content.as_deref(), i)?),
            "user" => messages.push(Message {
                role: Role::User,
                content: chat_user_parts(m.content.as_deref(), i)?,
            }),
            "assistant" => {
                let mut content = Vec::new();
                if let Some(raw) = m.content.as_deref() {
                    for part in chat_user_parts(Some(raw), i)? {
                        match part {
                            Part::Text(t) => content.push(Part::Text(t)),
                            _ => {
                                return Err(terr(format!(
                                    "openai-chat messages[{i}]: assistant content may only be text"
                                )))
                            }
                        }
                    }
                }
                if let Some(r) = m.refusal.as_deref().filter(|r| !r.is_empty()) {
                    content.push(Part::Text(r.to_owned()));
                }
                for tc in m.tool_calls.iter().flatten() {
                    content.push(Part::ToolCall {
                        id: tc.id.clone(),
                        name: tc.function.name.clone(),
                        arguments: tc.function.arguments.clone(),
                    });
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => messages.push(Message {
                role: Role::User,
                content: vec![Part::ToolResult {
                    call_id: m.tool_call_id.clone().unwrap_or_default(),
                    content: chat_text_content(m.content.as_deref(), i)?,
                    is_error: false,
                }],
            }),
            other => {
                return Err(terr(format!(
                    "openai-chat messages[{i}]: role `{other}` cannot be translated"
                )))
            }
        }
    }
    let mut tools = Vec::new();
    for (i, t) in wire.tools.iter().flatten().enumerate() {
        let f = match (t.kind.as_str(), &t.function) {
            ("function", Some(f)) => f,
            (kind, _) => {
                return Err(terr(format!(
                    "openai-chat tools[{i}]: tool type `{kind}` cannot be translated"
                )))
            }
        };
        tools.push(Tool {
            name: f.name.clone(),
            description: f.description.clone(),
            parameters: schema_text(f.parameters.as_deref()),
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
                    "openai-chat tool_choice `{other}` is unknown"
                )))
            }
        }),
        Some(v) => match v["function"]["name"].as_str() {
            Some(name) => Some(ToolChoice::Tool(name.to_owned())),
            None => return Err(terr("openai-chat tool_choice object without function.name")),
        },
    };
    let stop = match &wire.stop {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| terr("openai-chat `stop` must be strings"))?,
        Some(_) => return Err(terr("openai-chat `stop` must be a string or an array")),
    };
    let json_schema = match &wire.response_format {
        None => None,
        Some(f) => match f.kind.as_str() {
            "text" => None,
            "json_schema" => {
                let s = f
                    .json_schema
                    .as_ref()
                    .ok_or_else(|| terr("openai-chat response_format.json_schema is missing"))?;
                Some(JsonSchema {
                    name: s.name.clone(),
                    schema: schema_text(s.schema.as_deref()),
                    strict: s.strict.unwrap_or(false),
                })
            }
            other => {
                return Err(terr(format!(
                    "openai-chat response_format `{other}` cannot be translated"
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
        max_tokens: wire.max_completion_tokens.or(wire.max_tokens),
        temperature: wire.temperature,
        top_p: wire.top_p,
        stop,
        stream: req.stream,
        json_schema,
    })
}

/// The canonical request → a chat-completions body for an OpenAI-kind provider. Streams ask for
/// `stream_options.include_usage` so the usage chunk arrives; `max_completion_tokens` carries the
/// limit (accepted by every current OpenAI model, unlike `max_tokens`).
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    let mut messages = Vec::new();
    for s in &req.system {
        messages.push(ChatOutMessage {
            role: "system",
            content: ChatOutContent::Text(s),
            tool_calls: None,
            tool_call_id: None,
        });
    }
    for m in &req.messages {
        match m.role {
            Role::User => {
                let mut parts: Vec<ChatOutPart<'_>> = Vec::new();
                for p in &m.content {
                    match p {
                        Part::ToolResult {
                            call_id, content, ..
                        } => {
                            flush_user_parts(&mut messages, &mut parts);
                            messages.push(ChatOutMessage {
                                role: "tool",
                                content: ChatOutContent::Text(content),
                                tool_calls: None,
                                tool_call_id: Some(call_id),
                            });
                        }
                        Part::Text(t) => parts.push(ChatOutPart::Text { text: t }),
                        Part::Image { media_type, data } => parts.push(ChatOutPart::ImageUrl {
                            image_url: ChatOutUrl {
                                url: data_url(media_type, data),
                            },
                        }),
                        Part::ToolCall { .. } => {
                            return Err(terr("a user turn cannot carry a tool call"))
                        }
                    }
                }
                flush_user_parts(&mut messages, &mut parts);
            }
            Role::Assistant => {
                let mut texts = Vec::new();
                let mut calls = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => texts.push(ChatOutPart::Text { text: t }),
                        Part::ToolCall {
                            id,
                            name,
                            arguments,
                        } => calls.push(ChatOutToolCall {
                            id,
                            kind: "function",
                            function: ChatOutFunctionCall { name, arguments },
                        }),
                        _ => {
                            return Err(terr(
                                "openai-chat assistant turns carry only text and tool calls",
                            ))
                        }
                    }
                }
                let content = match texts.len() {
                    0 => ChatOutContent::Null,
                    1 => match texts.pop() {
                        Some(ChatOutPart::Text { text }) => ChatOutContent::Text(text),
                        _ => ChatOutContent::Null,
                    },
                    _ => ChatOutContent::Parts(texts),
                };
                messages.push(ChatOutMessage {
                    role: "assistant",
                    content,
                    tool_calls: (!calls.is_empty()).then_some(calls),
                    tool_call_id: None,
                });
            }
        }
    }
    let tools = req
        .tools
        .iter()
        .map(|t| {
            Ok(ChatOutTool {
                kind: "function",
                function: ChatOutFunction {
                    name: &t.name,
                    description: t.description.as_deref(),
                    parameters: raw_json(&t.parameters, "tool parameters")?,
                },
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let response_format = req
        .json_schema
        .as_ref()
        .map(|s| {
            Ok::<_, TranslateError>(ChatOutFormat {
                kind: "json_schema",
                json_schema: ChatOutSchema {
                    name: &s.name,
                    schema: raw_json(&s.schema, "json_schema schema")?,
                    strict: s.strict,
                },
            })
        })
        .transpose()?;
    let body = ChatOutRequest {
        model: &req.model,
        messages,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice: req.tool_choice.as_ref().map(|c| match c {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Any => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Tool(n) => json!({"type": "function", "function": {"name": n}}),
        }),
        max_completion_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stop: (!req.stop.is_empty()).then_some(&req.stop),
        response_format,
        stream: req.stream,
        stream_options: req.stream.then(|| json!({"include_usage": true})),
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| terr(format!("rendering openai-chat body: {e}")))
}

fn flush_user_parts<'a>(messages: &mut Vec<ChatOutMessage<'a>>, parts: &mut Vec<ChatOutPart<'a>>) {
    if parts.is_empty() {
        return;
    }
    let content = match parts.as_slice() {
        [ChatOutPart::Text { text }] => ChatOutContent::Text(text),
        _ => ChatOutContent::Parts(std::mem::take(parts)),
    };
    parts.clear();
    messages.push(ChatOutMessage {
        role: "user",
        content,
        tool_calls: None,
        tool_call_id: None,
    });
}

/// A provider's non-stream chat completion → canonical.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    let wire: ChatWireResponse =
        serde_json::from_slice(body).map_err(|e| terr(format!("openai-chat response: {e}")))?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| terr("openai-chat response has no choices"))?;
    let mut content = Vec::new();
    if let Some(t) = choice.message.content.filter(|t| !t.is_empty()) {
        content.push(Part::Text(t));
    }
    if let Some(r) = choice.message.refusal.filter(|r| !r.is_empty()) {
        content.push(Part::Text(r));
    }
    for tc in choice.message.tool_calls.into_iter().flatten() {
        content.push(Part::ToolCall {
            id: tc.id,
            name: tc.function.name,
            arguments: tc.function.arguments,
        });
    }
    Ok(ChatResponse {
        id: wire.id,
        model: wire.model,
        content,
        stop_reason: finish_to_stop(choice.finish_reason.as_deref()),
        usage: wire.usage.map(WireUsage::canonical).unwrap_or_default(),
    })
}

/// Canonical → the caller's non-stream `chat.completion` object (`created` = now).
pub fn render_response(resp: &ChatResponse) -> Bytes {
    render_response_at(resp, unix_now())
}

/// [`render_response`] with a fixed `created` (tests and golden files).
pub fn render_response_at(resp: &ChatResponse, created: u64) -> Bytes {
    let text: String = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<serde_json::Value> = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments}})),
            _ => None,
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() && !calls.is_empty() { serde_json::Value::Null } else { json!(text) },
        "refusal": null,
        "annotations": [],
    });
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    let body = json!({
        "id": resp.id,
        "object": "chat.completion",
        "created": created,
        "model": resp.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": stop_to_finish(resp.stop_reason),
        }],
        "usage": usage_json(resp.usage),
        "system_fingerprint": null,
    });
    Bytes::from(body.to_string())
}

fn usage_json(u: Usage) -> serde_json::Value {
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens.saturating_add(u.output_tokens),
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
    })
}

/// OpenAI `finish_reason` → canonical stop reason.
pub(crate) fn finish_to_stop(reason: Option<&str>) -> StopReason {
    match reason {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

/// Canonical stop reason → OpenAI `finish_reason` (a stop sequence is `stop` in OpenAI).
pub(crate) fn stop_to_finish(reason: StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
    }
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
        self.sse.push(bytes);
        let mut out = Vec::new();
        while let Some(ev) = self.sse.next_event() {
            self.event(&ev.data, &mut out);
        }
        if self.sse.take_overflow() {
            out.push(StreamEvent::protocol_failure(
                crate::canonical::EVENT_TOO_LARGE,
            ));
        }
        out
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
            if let Some(reason) = self.pending_stop.take() {
                out.push(StreamEvent::Stop {
                    reason,
                    usage: self.usage,
                });
            }
            self.finished = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            return;
        };
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            let error_type = specific_error_type(err["type"].as_str(), err["code"].as_str())
                .unwrap_or("server_error")
                .to_owned();
            out.push(StreamEvent::Error {
                status: error_status(&error_type, err["code"].as_str()),
                message: err["message"].as_str().unwrap_or_default().to_owned(),
                error_type,
            });
            self.finished = true;
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
            let delta = &choice["delta"];
            for key in ["content", "refusal"] {
                if let Some(t) = delta[key].as_str().filter(|t| !t.is_empty()) {
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
                        text: t.to_owned(),
                    });
                }
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
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
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.close_open(out);
                self.pending_stop = Some(finish_to_stop(Some(reason)));
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
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
            StreamEvent::Stop { reason, usage } => {
                if usage.is_some() {
                    self.usage = *usage;
                }
                out.push(self.chunk(json!({}), Some(stop_to_finish(*reason))));
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
}

impl Default for StreamEncoder {
    fn default() -> Self {
        Self::new("", "")
    }
}

/// The status an OpenAI error `(type, code)` stands for: a specific code wins over a generic
/// type (`server_error` + `overloaded` is 529, what Anthropic's `overloaded_error` maps to).
pub(crate) fn error_status(error_type: &str, code: Option<&str>) -> u16 {
    match code {
        Some("overloaded") => 529,
        Some(c) if status_for_error_type(c) != 500 => status_for_error_type(c),
        _ => status_for_error_type(error_type),
    }
}

/// A provider error body → (error type, message). Tolerant of any shape (OpenAI, Anthropic,
/// Bedrock `{"message"}`) and of junk.
pub fn parse_error(status: u16, body: &[u8]) -> (String, String) {
    parse_any_error(status, body, |c| openai_error_type(c).0)
}

/// A translated upstream error in OpenAI's shape: the status is kept, the type is mapped.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    let (t, code) = openai_error_type(classify_error(status, error_type));
    RenderedError {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: Bytes::from(error_json(t, code, message).to_string()),
    }
}

/// OpenAI `(type, code)` for an error class.
pub(crate) fn openai_error_type(c: ErrorClass) -> (&'static str, Option<&'static str>) {
    match c {
        ErrorClass::InvalidRequest => ("invalid_request_error", None),
        ErrorClass::Authentication => ("authentication_error", Some("invalid_api_key")),
        ErrorClass::Billing => ("insufficient_quota", Some("billing_error")),
        ErrorClass::Permission => ("permission_error", None),
        ErrorClass::NotFound => ("not_found_error", None),
        ErrorClass::Timeout => ("server_error", Some("timeout")),
        ErrorClass::Conflict => ("invalid_request_error", Some("conflict")),
        ErrorClass::TooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorClass::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorClass::Overloaded => ("server_error", Some("overloaded")),
        ErrorClass::Server => ("server_error", None),
    }
}

// ---- wire shapes (tolerant: unknown fields ignored, nulls allowed) ------------------------------

#[derive(Deserialize)]
struct ChatWireRequest {
    #[serde(default)]
    messages: Vec<ChatWireMessage>,
    #[serde(default)]
    tools: Option<Vec<ChatWireTool>>,
    #[serde(default)]
    tool_choice: Option<serde_json::Value>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    stop: Option<serde_json::Value>,
    #[serde(default)]
    response_format: Option<ChatWireFormat>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    functions: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    function_call: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct ChatWireMessage {
    role: String,
    #[serde(default)]
    content: Option<Box<RawValue>>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChatWireToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct ChatWirePart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    image_url: Option<ChatWireUrl>,
}

#[derive(Deserialize)]
struct ChatWireUrl {
    url: String,
}

#[derive(Deserialize)]
struct ChatWireToolCall {
    #[serde(default)]
    id: String,
    function: ChatWireFunctionCall,
}

#[derive(Deserialize)]
struct ChatWireFunctionCall {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct ChatWireTool {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    function: Option<ChatWireFunction>,
}

#[derive(Deserialize)]
struct ChatWireFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct ChatWireFormat {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    json_schema: Option<ChatWireSchema>,
}

#[derive(Deserialize)]
struct ChatWireSchema {
    #[serde(default)]
    name: String,
    #[serde(default)]
    schema: Option<Box<RawValue>>,
    #[serde(default)]
    strict: Option<bool>,
}

#[derive(Deserialize)]
struct ChatWireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    choices: Vec<ChatWireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct ChatWireChoice {
    message: ChatWireAnswer,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChatWireAnswer {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ChatWireToolCall>>,
}

impl WireUsage {
    fn canonical(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
        }
    }
}

#[derive(Serialize)]
struct ChatOutRequest<'a> {
    model: &'a str,
    messages: Vec<ChatOutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<ChatOutTool<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop: Option<&'a Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ChatOutFormat<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ChatOutMessage<'a> {
    role: &'static str,
    content: ChatOutContent<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<ChatOutToolCall<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum ChatOutContent<'a> {
    Text(&'a str),
    Parts(Vec<ChatOutPart<'a>>),
    Null,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ChatOutPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ChatOutUrl },
}

#[derive(Serialize)]
struct ChatOutUrl {
    url: String,
}

#[derive(Serialize)]
struct ChatOutToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatOutFunctionCall<'a>,
}

#[derive(Serialize)]
struct ChatOutFunctionCall<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ChatOutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatOutFunction<'a>,
}

#[derive(Serialize)]
struct ChatOutFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: Box<RawValue>,
}

#[derive(Serialize)]
struct ChatOutFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: ChatOutSchema<'a>,
}

#[derive(Serialize)]
struct ChatOutSchema<'a> {
    name: &'a str,
    schema: Box<RawValue>,
    strict: bool,
}

fn chat_text_content(raw: Option<&RawValue>, i: usize) -> Result<String, TranslateError> {
    let mut out = String::new();
    for p in chat_user_parts(raw, i)? {
        match p {
            Part::Text(t) => out.push_str(&t),
            _ => {
                return Err(terr(format!(
                    "openai-chat messages[{i}]: only text is allowed here"
                )))
            }
        }
    }
    Ok(out)
}

fn chat_user_parts(raw: Option<&RawValue>, i: usize) -> Result<Vec<Part>, TranslateError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let bad = |e: serde_json::Error| terr(format!("openai-chat messages[{i}].content: {e}"));
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => Ok(vec![Part::Text(
            serde_json::from_str(raw.get()).map_err(bad)?,
        )]),
        Some(b'n') => Ok(Vec::new()),
        _ => {
            let parts: Vec<ChatWirePart> = serde_json::from_str(raw.get()).map_err(bad)?;
            parts
                .into_iter()
                .map(|p| match p.kind.as_str() {
                    "text" => Ok(Part::Text(p.text.unwrap_or_default())),
                    "refusal" => Ok(Part::Text(p.refusal.unwrap_or_default())),
                    "image_url" => {
                        let url = p.image_url.map(|u| u.url).unwrap_or_default();
                        let (media_type, data) = parse_data_url(&url)?;
                        Ok(Part::Image { media_type, data })
                    }
                    other => Err(terr(format!(
                        "openai-chat messages[{i}]: content part `{other}` cannot be translated"
                    ))),
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_owned(),
        }
    }

    #[test]
    fn classifies_preamble_content_done_and_errors() {
        let role = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#;
        assert_eq!(
            classify_stream_event(&ev(role)),
            crate::StreamEventClass::Preamble
        );
        let text =
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        assert_eq!(
            classify_stream_event(&ev(text)),
            crate::StreamEventClass::Content
        );
        let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x"}]},"finish_reason":null}]}"#;
        assert_eq!(
            classify_stream_event(&ev(tool)),
            crate::StreamEventClass::Content
        );
        let fin = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(classify_stream_event(&ev(fin)), crate::StreamEventClass::Content);
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#;
        assert_eq!(
            classify_stream_event(&ev(usage)),
            crate::StreamEventClass::Metadata
        );
        assert_eq!(
            stream_event_usage(&ev(usage)),
            Some(Usage {
                input_tokens: 5,
                output_tokens: 2
            })
        );
        assert_eq!(
            classify_stream_event(&ev("[DONE]")),
            crate::StreamEventClass::Done
        );
        let err = r#"{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}"#;
        assert_eq!(
            classify_stream_event(&ev(err)),
            crate::StreamEventClass::Error {
                status: 529,
                error_type: "overloaded_error".into(),
                message: "Overloaded".into()
            }
        );
    }

    /// Every event of the fixture streams plus hand-written ones, with and without an event name.
    fn stream_events() -> Vec<SseEvent> {
        let mut events = Vec::new();
        for sse in [
            include_str!("../tests/fixtures/streams/text.openai_chat.sse"),
            include_str!("../tests/fixtures/streams/tool_call.openai_chat.sse"),
        ] {
            let mut decoder = sse::SseDecoder::new();
            decoder.push(sse.as_bytes());
            while let Some(ev) = decoder.next_event() {
                events.push(ev);
            }
        }
        for data in [
            "[DONE]",
            "  [DONE]  ",
            "",
            "not json",
            r#"{"error":{"message":"Overloaded","type":"overloaded_error"}}"#,
            r#"{"error":{"message":"m","code":"rate_limit_exceeded"}}"#,
            r#"{"x":1,"error":{"message":"m"}}"#,
            r#"{"error":"just a string"}"#,
            r#"{"error":{"message":1}}"#,
            r#"{"choices":[{"delta":{"content":"say \"error\":{}"}}]}"#,
            r#"{"choices":[{"delta":{"content":"hi"}}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
        ] {
            events.push(ev(data));
            events.push(SseEvent {
                event: Some("error".into()),
                data: data.to_owned(),
            });
        }
        events
    }

    #[test]
    fn after_content_agrees_on_done_and_errors_and_parses_nothing_else() {
        for ev in stream_events() {
            let full = classify_stream_event(&ev);
            let after = classify_stream_event_after_content(&ev);
            match full {
                crate::StreamEventClass::Done | crate::StreamEventClass::Error { .. } => {
                    assert_eq!(after, full, "{ev:?}")
                }
                _ => assert_eq!(after, crate::StreamEventClass::Metadata, "{ev:?}"),
            }
        }
    }

    #[test]
    fn before_content_agrees_on_content_done_and_errors() {
        let mut events = stream_events();
        for data in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content" : "x"}}]}"#,
            r#"{"choices":[{"delta":{"content":null,"refusal":"no"}}]}"#,
            r#"{"choices":[{"delta":{"refusal":""},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":null}}]}"#,
            r#"{"choices":[{"delta":{"\u0063ontent":"x"}}]}"#,
            r#"{"choices":[{"delta":{"content":"","content":"x"}}]}"#,
            r#"{"choices":[{"delta":{"role":"assistant"},"logprobs":{"content":[]}}]}"#,
            r#"{"choices":[{"delta":{"content":"a \"content\":null b"}}]}"#,
            r#"{"choices":[{"delta":{"x":"\"content\""}}]}"#,
            r#"{"choices":[{"delta":{"content":nullx}}]}"#,
            r#"{"choices":[{"delta":{}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        ] {
            events.push(ev(data));
        }
        for ev in events {
            let full = classify_stream_event(&ev);
            let before = classify_stream_event_before_content(&ev);
            match full {
                crate::StreamEventClass::Preamble | crate::StreamEventClass::Metadata => {
                    assert_eq!(before, crate::StreamEventClass::Metadata, "{ev:?}")
                }
                _ => assert_eq!(before, full, "{ev:?}"),
            }
        }
        let preamble = r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#;
        assert_eq!(
            crate::chunk_scan::scan(preamble.as_bytes()),
            crate::chunk_scan::Scan::NoContent,
            "a preamble is not parsed"
        );
    }

    #[test]
    fn a_chunk_of_whole_events_is_decided_in_place() {
        let role = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}"#;
        let text =
            r#"data: {"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let err = r#"data: {"error":{"message":"Overloaded","type":"overloaded_error"}}"#;
        let decide = |events: &[&str]| {
            let chunk: String = events.iter().map(|e| format!("{e}\n\n")).collect();
            classify_chunk_before_content(chunk.as_bytes())
        };
        assert_eq!(decide(&[role]), Some(crate::StreamEventClass::Metadata));
        assert_eq!(
            decide(&[": keep-alive", role]),
            Some(crate::StreamEventClass::Metadata)
        );
        assert_eq!(decide(&[role, text]), Some(crate::StreamEventClass::Content));
        assert_eq!(
            decide(&[role, "data: [DONE]"]),
            Some(crate::StreamEventClass::Done)
        );
        // The first deciding event wins; an error event before it is not read here.
        assert_eq!(decide(&[text, err]), Some(crate::StreamEventClass::Content));
        assert_eq!(decide(&[err, text]), None);
        // Only whole single-line events, no carriage returns.
        for chunk in [
            format!("{role}\n"),
            format!("{role}\r\n\r\n"),
            format!("event: error\n{err}\n\n"),
            format!("{role}\ndata: x\n\n"),
            format!("{role}\n\n{text}"),
            format!("id: 1\n\n{text}\n\n"),
        ] {
            assert_eq!(
                classify_chunk_before_content(chunk.as_bytes()),
                None,
                "{chunk}"
            );
        }
    }

    /// `stream_event_usage` as it was before the `json_tail` shortcut.
    fn reference_stream_event_usage(ev: &SseEvent) -> Option<Usage> {
        if !ev.data.contains("\"usage\":{") && !ev.data.contains("\"usage\": {") {
            return None;
        }
        let chunk: Chunk<'_> = serde_json::from_str(&ev.data).ok()?;
        chunk.usage.map(|u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        })
    }

    #[test]
    fn stream_usage_agrees_with_the_full_chunk_parse() {
        let usage = r#""usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}"#;
        let choices = [
            None,
            Some(r#""choices":[]"#),
            Some(r#""choices" : [ ]"#),
            Some(r#""choices":[{"index":0,"delta":{},"finish_reason":null}]"#),
            // These make the typed `choices` fail, so the whole chunk has no usage.
            Some(r#""choices":[{"finish_reason":1}]"#),
            Some(r#""choices":[{"finish_reason":"a\"b"}]"#),
            Some(r#""choices":null"#),
            Some(r#""choices":{}"#),
            Some(r#""choic\u0065s":[{"finish_reason":1}]"#),
        ];
        let others = [
            r#""id":"chatcmpl-1","object":"chat.completion.chunk""#,
            r#""obfuscation":"x""#,
        ];
        let mut fast = 0;
        for before in choices {
            for after in choices {
                for other in others {
                    for (a, b) in [(other, usage), (usage, other)] {
                        let members: Vec<&str> = [before, Some(a), Some(b), after]
                            .into_iter()
                            .flatten()
                            .collect();
                        let data = format!("{{{}}}", members.join(","));
                        let ev = ev(&data);
                        let got = stream_event_usage(&ev);
                        assert_eq!(got, reference_stream_event_usage(&ev), "{data}");
                        let shortcut = json_tail::top_level_member::<Option<WireUsage>, IgnoredAny>(
                            data.as_bytes(),
                            "usage",
                        );
                        fast +=
                            usize::from(shortcut.is_some() && choices_cannot_fail(data.as_bytes()));
                    }
                }
            }
        }
        assert!(fast > 0);
        for ev in stream_events() {
            assert_eq!(
                stream_event_usage(&ev),
                reference_stream_event_usage(&ev),
                "{ev:?}"
            );
        }
        // What OpenAI sends last: the shortcut answers.
        let last = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"default","system_fingerprint":"fp","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7},"obfuscation":"abc"}"#;
        assert!(choices_cannot_fail(last.as_bytes()));
        assert_eq!(
            json_tail::top_level_member::<Option<WireUsage>, IgnoredAny>(last.as_bytes(), "usage")
                .flatten()
                .map(WireUsage::canonical),
            Some(Usage {
                input_tokens: 5,
                output_tokens: 2
            })
        );
    }

    #[test]
    fn gateway_errors_have_all_four_keys() {
        let e = render_error(GatewayErrorKind::NotFound, "no route for model `x`");
        assert_eq!(e.status, 404);
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["error"]["type"], "not_found_error");
        assert!(v["error"].get("param").is_some());
        assert!(v["error"].get("code").is_some());
    }

    #[test]
    fn stream_error_is_a_data_line_with_an_error_object() {
        let b = render_stream_error("upstream connection lost");
        let s = std::str::from_utf8(&b).unwrap();
        assert!(s.starts_with("data: {\"error\":"));
        assert!(s.ends_with("\n\n"));
        assert!(!s.contains("[DONE]"));
    }

    fn encoded_chunks(mut e: StreamEncoder, events: &[StreamEvent]) -> Vec<serde_json::Value> {
        let mut out = String::new();
        for ev in events {
            out.push_str(std::str::from_utf8(&e.encode(ev)).unwrap());
        }
        out.split("\n\n")
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    fn start() -> StreamEvent {
        StreamEvent::Start {
            id: "up".into(),
            model: "up-m".into(),
            input_tokens: Some(3),
        }
    }

    fn stop(reason: StopReason) -> StreamEvent {
        StreamEvent::Stop {
            reason,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
            }),
        }
    }

    #[test]
    fn the_role_chunk_has_null_content_before_a_tool_call_and_empty_before_text() {
        let tool = [
            start(),
            StreamEvent::ToolCallStart {
                index: 0,
                id: "call_1".into(),
                name: "f".into(),
            },
            StreamEvent::ToolCallDelta {
                index: 0,
                arguments: "{}".into(),
            },
            stop(StopReason::ToolUse),
        ];
        let c = encoded_chunks(StreamEncoder::new("c", "m"), &tool);
        let role = &c[0]["choices"][0]["delta"];
        assert_eq!(role["role"], "assistant");
        assert!(role["content"].is_null(), "{role}");
        assert!(role.get("content").is_some(), "content is there, as null");
        assert!(
            c.iter().all(|v| v["choices"][0]["delta"]["content"] != ""),
            "no empty text anywhere in a tool-call answer: {c:?}"
        );
        assert_eq!(c[0]["id"], "c");

        let text = [
            start(),
            StreamEvent::TextDelta {
                index: 0,
                text: "Hi".into(),
            },
            stop(StopReason::EndTurn),
        ];
        let c = encoded_chunks(StreamEncoder::new("", ""), &text);
        assert_eq!(c[0]["choices"][0]["delta"]["content"], "");
        assert_eq!(c[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(c[0]["id"], "up", "the upstream id still fills an empty one");
        assert_eq!(c[1]["choices"][0]["delta"]["content"], "Hi");
        // An empty answer still opens with the role chunk.
        let c = encoded_chunks(
            StreamEncoder::new("c", "m"),
            &[start(), stop(StopReason::EndTurn)],
        );
        assert_eq!(c[0]["choices"][0]["delta"]["content"], "");
        assert_eq!(c[1]["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn the_usage_chunk_is_sent_only_when_the_caller_asked() {
        let events = [
            start(),
            StreamEvent::TextDelta {
                index: 0,
                text: "Hi".into(),
            },
            stop(StopReason::EndTurn),
        ];
        let empty_choices = |c: &[serde_json::Value]| {
            c.iter()
                .filter(|v| v["choices"].as_array().is_some_and(Vec::is_empty))
                .cloned()
                .collect::<Vec<_>>()
        };
        let c = encoded_chunks(StreamEncoder::new("c", "m"), &events);
        assert!(empty_choices(&c).is_empty(), "{c:?}");
        let c = encoded_chunks(StreamEncoder::new("c", "m").with_usage_chunk(true), &events);
        let u = empty_choices(&c);
        assert_eq!(u.len(), 1, "{c:?}");
        assert_eq!(u[0]["usage"]["prompt_tokens"], 3);
        assert_eq!(u[0]["usage"]["completion_tokens"], 4);
    }
}
