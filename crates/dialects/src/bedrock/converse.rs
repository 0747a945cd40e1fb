//! The Bedrock Converse API (`POST /model/{modelId}/converse` and `/converse-stream`), both as a
//! caller dialect and as the format sidetrack sends to a `bedrock` provider
//! (wire-formats.md §4.4, §2.4).
//!
//! The body has no `model` (it is in the path) and no `stream` flag (the path decides). Fields
//! the canonical form cannot carry (`additionalModelRequestFields`, `promptVariables`,
//! `requestMetadata`, `performanceConfig`, cache points, reasoning blocks) are dropped on
//! translation; content it cannot carry at all (documents, videos, S3 images) makes the
//! translation fail, so the destination is ineligible. A `guardrailConfig` is never dropped: the
//! request is not translated at all (`Dialect::to_canonical` refuses it; routing skips such
//! destinations as `INELIGIBLE:guardrail`).

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::canonical::{
    ChatRequest, ChatResponse, Message, Part, Role, StopReason, StreamEvent, Tool, ToolChoice,
    TranslateError,
};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::json_tail;
use crate::request::ParsedRequest;
use crate::Usage;

use super::errors::{self as bedrock_errors, StreamKind};
use super::eventstream::{self, FrameDecoder};

pub use super::errors::{parse_error, render_upstream_error};

/// The path (after the base URL) for `model_id`; the id is percent-encoded as botocore does.
pub fn path(model_id: &str, stream: bool) -> String {
    let op = if stream {
        "converse-stream"
    } else {
        "converse"
    };
    format!("/model/{}/{op}", super::encode_model_id(model_id))
}

fn err(msg: impl Into<String>) -> TranslateError {
    TranslateError(msg.into())
}

fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| !v.is_null())
}

fn str_field(v: &Value, key: &str, what: &str) -> Result<String, TranslateError> {
    field(v, key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| err(format!("{what}: `{key}` must be a string")))
}

// ---------------------------------------------------------------------------------------------
// Request: Converse JSON → canonical
//
// Converse content blocks, tool specs and tool choices are unions: objects with exactly one key
// naming the member. They are read as `{member: raw JSON}` maps so tool inputs and schemas keep
// their text (key order included) through the translation.

type Union = BTreeMap<String, Box<RawValue>>;

#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    messages: Option<Vec<WireMessage>>,
    #[serde(default)]
    system: Option<Vec<Union>>,
    #[serde(default, rename = "inferenceConfig")]
    inference_config: Option<WireInferenceConfig>,
    #[serde(default, rename = "toolConfig")]
    tool_config: Option<WireToolConfig>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    content: Vec<Union>,
}

#[derive(Deserialize)]
struct WireInferenceConfig {
    #[serde(default, rename = "maxTokens")]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default, rename = "topP")]
    top_p: Option<f64>,
    #[serde(default, rename = "stopSequences")]
    stop_sequences: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct WireToolConfig {
    #[serde(default)]
    tools: Option<Vec<Union>>,
    #[serde(default, rename = "toolChoice")]
    tool_choice: Option<Union>,
}

#[derive(Deserialize)]
struct WireToolSpec {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "inputSchema")]
    input_schema: Option<Union>,
}

#[derive(Deserialize)]
struct WireImage {
    format: String,
    source: Union,
}

#[derive(Deserialize)]
struct WireToolUse {
    #[serde(rename = "toolUseId")]
    tool_use_id: String,
    name: String,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WireToolResult {
    #[serde(rename = "toolUseId")]
    tool_use_id: String,
    #[serde(default)]
    content: Vec<Union>,
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
struct WireName {
    name: String,
}

fn member<T: serde::de::DeserializeOwned>(raw: &RawValue, what: &str) -> Result<T, TranslateError> {
    serde_json::from_str(raw.get()).map_err(|e| err(format!("{what}: {e}")))
}

fn non_null(raw: &RawValue) -> Option<&RawValue> {
    (raw.get() != "null").then_some(raw)
}

/// The one member of a union (`None` when it is empty); extra keys are ignored.
fn only(u: &Union) -> Option<(&str, &RawValue)> {
    u.iter()
        .find_map(|(k, v)| non_null(v).map(|v| (k.as_str(), v)))
}

/// The canonical form of a Converse caller request.
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let wire: WireRequest = serde_json::from_slice(req.body())
        .map_err(|e| err(format!("bedrock-converse body: {e}")))?;
    let mut out = ChatRequest {
        model: req.model.clone(),
        stream: req.stream,
        ..ChatRequest::default()
    };
    for block in wire.system.iter().flatten() {
        match only(block) {
            Some(("text", raw)) => out.system.push(member(raw, "system text")?),
            Some(("cachePoint", _)) | None => {}
            Some((other, _)) => {
                return Err(err(format!("system block `{other}` cannot be translated")))
            }
        }
    }
    let messages = wire
        .messages
        .ok_or_else(|| err("bedrock-converse body: `messages` is required"))?;
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => return Err(err(format!("messages[{i}]: role `{other}` is unknown"))),
        };
        let mut content = Vec::with_capacity(m.content.len());
        for b in &m.content {
            if let Some(part) = block_to_canonical(b)? {
                content.push(part);
            }
        }
        out.messages.push(Message { role, content });
    }
    if let Some(cfg) = wire.inference_config {
        out.max_tokens = cfg.max_tokens;
        out.temperature = cfg.temperature;
        out.top_p = cfg.top_p;
        out.stop = cfg.stop_sequences.unwrap_or_default();
    }
    if let Some(tc) = wire.tool_config {
        for t in tc.tools.iter().flatten() {
            let Some(("toolSpec", raw)) = only(t) else {
                continue; // cachePoint and other non-tool entries
            };
            let spec: WireToolSpec = member(raw, "toolSpec")?;
            let schema = spec
                .input_schema
                .as_ref()
                .and_then(|s| s.get("json"))
                .and_then(|r| non_null(r))
                .map_or_else(|| r#"{"type":"object"}"#.to_owned(), |r| r.get().to_owned());
            out.tools.push(Tool {
                name: spec.name,
                description: spec.description,
                parameters: schema,
            });
        }
        out.tool_choice = match tc.tool_choice.as_ref().and_then(only) {
            None => None,
            Some(("auto", _)) => Some(ToolChoice::Auto),
            Some(("any", _)) => Some(ToolChoice::Any),
            Some(("tool", raw)) => Some(ToolChoice::Tool(
                member::<WireName>(raw, "toolChoice.tool")?.name,
            )),
            Some((other, _)) => return Err(err(format!("toolChoice `{other}` is unknown"))),
        };
    }
    Ok(out)
}

/// One content block; `None` for blocks that are hints only (cache points, reasoning).
fn block_to_canonical(b: &Union) -> Result<Option<Part>, TranslateError> {
    let Some((kind, raw)) = only(b) else {
        return Ok(None);
    };
    Ok(Some(match kind {
        "text" => Part::Text(member(raw, "text block")?),
        "image" => {
            let image: WireImage = member(raw, "image block")?;
            let data = match image.source.get("bytes").and_then(|r| non_null(r)) {
                Some(raw) => member::<String>(raw, "image source bytes")?,
                None => {
                    return Err(err(
                        "only images with inline `source.bytes` can be translated",
                    ))
                }
            };
            Part::Image {
                media_type: format!("image/{}", image.format),
                data,
            }
        }
        "toolUse" => {
            let tu: WireToolUse = member(raw, "toolUse block")?;
            Part::ToolCall {
                id: tu.tool_use_id,
                name: tu.name,
                arguments: tu
                    .input
                    .as_deref()
                    .and_then(non_null)
                    .map_or_else(|| "{}".to_owned(), |r| r.get().to_owned()),
            }
        }
        "toolResult" => {
            let tr: WireToolResult = member(raw, "toolResult block")?;
            let mut texts = Vec::with_capacity(tr.content.len());
            for item in &tr.content {
                match only(item) {
                    Some(("text", raw)) => texts.push(member::<String>(raw, "toolResult text")?),
                    Some(("json", raw)) => texts.push(raw.get().to_owned()),
                    None => {}
                    Some((other, _)) => {
                        return Err(err(format!(
                            "toolResult content `{other}` cannot be translated"
                        )))
                    }
                }
            }
            Part::ToolResult {
                call_id: tr.tool_use_id,
                content: texts.join("\n"),
                is_error: tr.status.as_deref() == Some("error"),
            }
        }
        "cachePoint" | "reasoningContent" => return Ok(None),
        other => return Err(err(format!("content block `{other}` cannot be translated"))),
    }))
}

// ---------------------------------------------------------------------------------------------
// Request: canonical → Converse JSON

#[derive(Serialize)]
struct OutRequest<'a> {
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<OutBlock<'a>>,
    #[serde(rename = "inferenceConfig", skip_serializing_if = "Option::is_none")]
    inference_config: Option<OutInferenceConfig<'a>>,
    #[serde(rename = "toolConfig", skip_serializing_if = "Option::is_none")]
    tool_config: Option<OutToolConfig<'a>>,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Vec<OutBlock<'a>>,
}

#[derive(Serialize)]
enum OutBlock<'a> {
    #[serde(rename = "text")]
    Text(&'a str),
    #[serde(rename = "image")]
    Image {
        format: &'static str,
        source: OutSource<'a>,
    },
    #[serde(rename = "toolUse")]
    ToolUse {
        #[serde(rename = "toolUseId")]
        tool_use_id: &'a str,
        name: &'a str,
        input: Box<RawValue>,
    },
    #[serde(rename = "toolResult")]
    ToolResult {
        #[serde(rename = "toolUseId")]
        tool_use_id: &'a str,
        content: Vec<OutBlock<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'static str>,
    },
}

#[derive(Serialize)]
struct OutSource<'a> {
    bytes: &'a str,
}

#[derive(Serialize)]
struct OutInferenceConfig<'a> {
    #[serde(rename = "maxTokens", skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(rename = "topP", skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(rename = "stopSequences", skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

#[derive(Serialize)]
struct OutToolConfig<'a> {
    tools: Vec<OutTool<'a>>,
    #[serde(rename = "toolChoice", skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "toolSpec")]
    tool_spec: OutToolSpec<'a>,
}

#[derive(Serialize)]
struct OutToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(rename = "inputSchema")]
    input_schema: OutSchema,
}

#[derive(Serialize)]
struct OutSchema {
    json: Box<RawValue>,
}

/// The Converse body for a canonical request. No `model` (it goes in the path, see [`path`]) and
/// no stream flag (the path decides). Consecutive same-role messages are merged and blank text
/// blocks dropped, because Converse rejects both.
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    if req.json_schema.is_some() {
        return Err(err(
            "JSON-schema output cannot be expressed in the Converse API",
        ));
    }
    let mut messages: Vec<OutMessage<'_>> = Vec::new();
    for m in &req.messages {
        let mut blocks = Vec::with_capacity(m.content.len());
        for p in &m.content {
            if let Some(b) = part_to_block(p)? {
                blocks.push(b);
            }
        }
        if blocks.is_empty() {
            continue;
        }
        let role = role_str(m.role);
        match messages.last_mut() {
            Some(prev) if prev.role == role => prev.content.extend(blocks),
            _ => messages.push(OutMessage {
                role,
                content: blocks,
            }),
        }
    }
    let system = req
        .system
        .iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| OutBlock::Text(s))
        .collect();
    let inference_config = (req.max_tokens.is_some()
        || req.temperature.is_some()
        || req.top_p.is_some()
        || !req.stop.is_empty())
    .then_some(OutInferenceConfig {
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stop_sequences: &req.stop,
    });
    let body = OutRequest {
        messages,
        system,
        inference_config,
        tool_config: tool_config(req)?,
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| err(format!("rendering bedrock-converse body: {e}")))
}

fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn image_format(media_type: &str) -> Result<&'static str, TranslateError> {
    match media_type.to_ascii_lowercase().as_str() {
        "image/png" => Ok("png"),
        "image/jpeg" | "image/jpg" => Ok("jpeg"),
        "image/gif" => Ok("gif"),
        "image/webp" => Ok("webp"),
        other => Err(err(format!(
            "image type `{other}` is not supported by Converse"
        ))),
    }
}

/// JSON text checked and kept verbatim; blank means `{}`.
fn raw_json(text: &str, what: &str) -> Result<Box<RawValue>, TranslateError> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    RawValue::from_string(text.to_owned()).map_err(|e| err(format!("{what} are not JSON: {e}")))
}

fn part_to_block(p: &Part) -> Result<Option<OutBlock<'_>>, TranslateError> {
    Ok(Some(match p {
        Part::Text(t) if t.trim().is_empty() => return Ok(None),
        Part::Text(t) => OutBlock::Text(t),
        Part::Image { media_type, data } => OutBlock::Image {
            format: image_format(media_type)?,
            source: OutSource { bytes: data },
        },
        Part::ToolCall {
            id,
            name,
            arguments,
        } => OutBlock::ToolUse {
            tool_use_id: id,
            name,
            input: raw_json(arguments, "tool call arguments")?,
        },
        Part::ToolResult {
            call_id,
            content,
            is_error,
        } => OutBlock::ToolResult {
            tool_use_id: call_id,
            content: vec![OutBlock::Text(content)],
            // `status` is only accepted by some model families; send it only when it matters.
            status: is_error.then_some("error"),
        },
    }))
}

fn tool_config(req: &ChatRequest) -> Result<Option<OutToolConfig<'_>>, TranslateError> {
    if req.tools.is_empty() {
        return Ok(None);
    }
    let tool_choice = match &req.tool_choice {
        None | Some(ToolChoice::Auto) => None,
        Some(ToolChoice::Any) => Some(json!({ "any": {} })),
        Some(ToolChoice::Tool(name)) => Some(json!({ "tool": { "name": name } })),
        Some(ToolChoice::None) => {
            // Converse cannot forbid tool use; leaving the tools out does, but Converse requires
            // a toolConfig when the history holds tool blocks.
            let has_tool_history = req.messages.iter().any(|m| {
                m.content
                    .iter()
                    .any(|p| matches!(p, Part::ToolCall { .. } | Part::ToolResult { .. }))
            });
            if has_tool_history {
                return Err(err(
                    "tool_choice `none` with tool calls in the history cannot be expressed in Converse",
                ));
            }
            return Ok(None);
        }
    };
    let tools = req
        .tools
        .iter()
        .map(|t| {
            Ok(OutTool {
                tool_spec: OutToolSpec {
                    name: &t.name,
                    description: t.description.as_deref(),
                    input_schema: OutSchema {
                        json: raw_json(&t.parameters, "tool parameters")?,
                    },
                },
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    Ok(Some(OutToolConfig { tools, tool_choice }))
}

// ---------------------------------------------------------------------------------------------
// Responses

pub(crate) fn stop_from_str(s: &str) -> StopReason {
    match s {
        "tool_use" => StopReason::ToolUse,
        "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

pub(crate) fn stop_str(r: StopReason) -> &'static str {
    match r {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ToolUse => "tool_use",
        StopReason::ContentFilter => "content_filtered",
    }
}

fn usage_from(v: Option<&Value>) -> Option<Usage> {
    let u = v?;
    if !u.is_object() {
        return None;
    }
    Some(Usage {
        input_tokens: field(u, "inputTokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: field(u, "outputTokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

fn usage_json(u: Usage) -> Value {
    json!({
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
        "totalTokens": u.input_tokens.saturating_add(u.output_tokens),
    })
}

/// A Converse response body in canonical form. Converse bodies carry neither an id nor the model
/// (the request id is a header, the model is in the path), so `id` and `model` are left empty for
/// the caller to fill in.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    #[derive(Deserialize)]
    struct Resp {
        output: Output,
        #[serde(default, rename = "stopReason")]
        stop_reason: Option<String>,
        #[serde(default)]
        usage: Option<Value>,
    }
    #[derive(Deserialize)]
    struct Output {
        message: OutputMessage,
    }
    #[derive(Deserialize)]
    struct OutputMessage {
        content: Vec<Union>,
    }
    let wire: Resp =
        serde_json::from_slice(body).map_err(|e| err(format!("bedrock-converse response: {e}")))?;
    let mut content = Vec::with_capacity(wire.output.message.content.len());
    for b in &wire.output.message.content {
        // Blocks a caller dialect cannot show (reasoning, citations, …) are skipped.
        if let Ok(Some(part @ (Part::Text(_) | Part::ToolCall { .. }))) = block_to_canonical(b) {
            content.push(part);
        }
    }
    Ok(ChatResponse {
        id: String::new(),
        model: String::new(),
        content,
        stop_reason: stop_from_str(wire.stop_reason.as_deref().unwrap_or("")),
        usage: usage_from(wire.usage.as_ref()).unwrap_or_default(),
    })
}

/// A canonical response as a Converse response body.
pub fn render_response(resp: &ChatResponse) -> Bytes {
    #[derive(Serialize)]
    struct Resp<'a> {
        output: Output<'a>,
        #[serde(rename = "stopReason")]
        stop_reason: &'static str,
        usage: Value,
        metrics: Value,
    }
    #[derive(Serialize)]
    struct Output<'a> {
        message: OutMessage<'a>,
    }
    let content = resp
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(OutBlock::Text(t)),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => Some(OutBlock::ToolUse {
                tool_use_id: id,
                name,
                input: raw_json(arguments, "tool call arguments")
                    .ok()
                    .filter(|r| r.get().trim_start().starts_with('{'))
                    .or_else(|| RawValue::from_string("{}".to_owned()).ok())?,
            }),
            _ => None,
        })
        .collect();
    let body = Resp {
        output: Output {
            message: OutMessage {
                role: "assistant",
                content,
            },
        },
        stop_reason: stop_str(resp.stop_reason),
        usage: usage_json(resp.usage),
        metrics: json!({"latencyMs": 0}),
    };
    // Serialising these types cannot fail (string keys, raw values already checked).
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

/// Usage of a non-streamed Converse response body. The top-level `usage` is read from the end of
/// the body when possible (`json_tail`; the other members are checked as `Value`s, as the full
/// parse reads them), else from the whole body as a `Value`.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    if let Some(usage) = json_tail::top_level_member::<Value, Value>(body, "usage") {
        // `null` is not an object, so it gives `None` here as `field` makes it in the full parse.
        return usage_from(Some(&usage));
    }
    full_response_usage(body)
}

/// The full parse behind [`response_usage`].
pub(crate) fn full_response_usage(body: &[u8]) -> Option<Usage> {
    let v: Value = serde_json::from_slice(body).ok()?;
    usage_from(field(&v, "usage"))
}

// ---------------------------------------------------------------------------------------------
// Streams

/// ConverseStream event-stream bytes → canonical events. `messageStart` gives a `Start` with an
/// empty id and model (the stream carries neither). The `Stop` of `messageStop` is held until the
/// `metadata` event after it, so that it carries the stream's usage (a caller's encoder closes its
/// stream on the `Stop`); a stream that ends without `metadata` gets it from
/// [`StreamDecoder::finish`], and an error frame in between releases it first. Exception frames
/// become `Error` with the status the exception stands for. Unknown event types and fields are
/// ignored. A stream that cannot be decoded yields one `Error` (status 502) and nothing after it.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    frames: FrameDecoder,
    failed: bool,
    /// The `messageStop`'s reason, waiting for `metadata`.
    pending_stop: Option<StopReason>,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Bounds one upstream frame (SPEC §14 `maxStreamEventBytes`).
    pub fn set_max_event_bytes(&mut self, n: usize) {
        self.frames.set_limit(n);
    }

    /// The stream could not be decoded (or broke its bound); nothing more is decoded.
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        if self.failed {
            return Vec::new();
        }
        let mut out = Vec::new();
        match self.frames.push(bytes) {
            Ok(frames) => {
                for f in &frames {
                    if let Err(e) = frame_to_events(f, &mut self.pending_stop, &mut out) {
                        self.failed = true;
                        out.push(StreamEvent::Error {
                            status: 502,
                            error_type: "malformedEvent".into(),
                            message: e.0,
                        });
                        return out;
                    }
                }
                if let Some(e) = self.frames.error() {
                    self.failed = true;
                    out.push(bedrock_errors::decode_failure(e));
                }
            }
            Err(e) => {
                self.failed = true;
                out.push(bedrock_errors::decode_failure(&e));
            }
        }
        out
    }

    /// The upstream's stream ended: a `Stop` still waiting for `metadata` comes out without usage.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        match self.pending_stop.take() {
            Some(reason) if !self.failed => vec![StreamEvent::Stop {
                reason,
                usage: None,
            }],
            _ => Vec::new(),
        }
    }
}

fn index_of(v: &Value) -> Result<usize, TranslateError> {
    field(v, "contentBlockIndex")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| err("event without a valid `contentBlockIndex`"))
}

fn frame_to_events(
    f: &eventstream::Frame,
    pending_stop: &mut Option<StopReason>,
    out: &mut Vec<StreamEvent>,
) -> Result<(), TranslateError> {
    match f.message_type.as_str() {
        "event" => {}
        "exception" | "error" => {
            error_frame(f, pending_stop, out);
            return Ok(());
        }
        _ => return Ok(()),
    }
    let Some(event_type) = f.event_type.as_deref() else {
        return Ok(());
    };
    if !matches!(
        event_type,
        "messageStart"
            | "contentBlockStart"
            | "contentBlockDelta"
            | "contentBlockStop"
            | "messageStop"
            | "metadata"
    ) {
        return Ok(()); // unknown members are skipped, as botocore does
    }
    let v: Value = serde_json::from_slice(&f.payload)
        .map_err(|e| err(format!("`{event_type}` payload is not valid JSON: {e}")))?;
    payload_to_events(event_type, &v, pending_stop, out)
}

/// An `exception` or `error` frame: a held `Stop` goes out first (the message had ended; what
/// went wrong after it still reaches the caller), then the error.
fn error_frame(
    f: &eventstream::Frame,
    pending_stop: &mut Option<StopReason>,
    out: &mut Vec<StreamEvent>,
) {
    if let Some(reason) = pending_stop.take() {
        out.push(StreamEvent::Stop {
            reason,
            usage: None,
        });
    }
    out.push(bedrock_errors::frame_error(f));
}

/// One known event's JSON payload → canonical events. `messageStop` is held until `metadata`
/// brings the usage.
fn payload_to_events(
    event_type: &str,
    v: &Value,
    pending_stop: &mut Option<StopReason>,
    out: &mut Vec<StreamEvent>,
) -> Result<(), TranslateError> {
    match event_type {
        "messageStart" => out.push(StreamEvent::Start {
            id: String::new(),
            model: String::new(),
            input_tokens: None,
        }),
        "contentBlockStart" => {
            let index = index_of(v)?;
            if let Some(tu) = field(v, "start").and_then(|s| field(s, "toolUse")) {
                out.push(StreamEvent::ToolCallStart {
                    index,
                    id: str_field(tu, "toolUseId", "contentBlockStart.toolUse")?,
                    name: str_field(tu, "name", "contentBlockStart.toolUse")?,
                });
            }
        }
        "contentBlockDelta" => content_block_delta(v, out)?,
        "contentBlockStop" => out.push(StreamEvent::BlockStop {
            index: index_of(v)?,
        }),
        "messageStop" => {
            *pending_stop = Some(stop_from_str(
                field(v, "stopReason").and_then(Value::as_str).unwrap_or(""),
            ));
        }
        "metadata" => {
            let usage = usage_from(field(v, "usage"));
            match pending_stop.take() {
                Some(reason) => out.push(StreamEvent::Stop { reason, usage }),
                None => out.extend(usage.map(StreamEvent::Usage)),
            }
        }
        _ => {}
    }
    Ok(())
}

/// `contentBlockDelta`: text, or a fragment of a tool call's input (a string, or JSON as text).
fn content_block_delta(v: &Value, out: &mut Vec<StreamEvent>) -> Result<(), TranslateError> {
    let index = index_of(v)?;
    let Some(delta) = field(v, "delta") else {
        return Ok(());
    };
    if let Some(text) = field(delta, "text").and_then(Value::as_str) {
        out.push(StreamEvent::TextDelta {
            index,
            text: text.to_owned(),
        });
    } else if let Some(input) = field(delta, "toolUse").and_then(|t| field(t, "input")) {
        let arguments = match input {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(StreamEvent::ToolCallDelta { index, arguments });
    }
    Ok(())
}

/// Canonical events → ConverseStream frames as Bedrock sends them: `messageStart`, text deltas
/// without a `contentBlockStart`, tool blocks with one, `contentBlockStop`, `messageStop`, then
/// `metadata` with usage. Errors become exception frames with the matching ConverseStream member.
#[derive(Debug)]
pub struct StreamEncoder {
    started: bool,
    metadata_sent: bool,
    /// An exception frame ends the stream; nothing is encoded after it.
    failed: bool,
}

impl StreamEncoder {
    /// `id` and `model` are accepted for symmetry with the other dialects; ConverseStream frames
    /// carry neither.
    pub fn new(_id: &str, _model: &str) -> StreamEncoder {
        StreamEncoder {
            started: false,
            metadata_sent: false,
            failed: false,
        }
    }

    pub fn encode(&mut self, event: &StreamEvent) -> Bytes {
        if self.failed {
            return Bytes::new();
        }
        let mut out = BytesMut::new();
        let frame = |out: &mut BytesMut, event_type: &str, payload: Value| {
            out.extend_from_slice(&eventstream::event_frame(
                event_type,
                payload.to_string().as_bytes(),
            ));
        };
        if !self.started && !matches!(event, StreamEvent::Error { .. }) {
            self.started = true;
            frame(&mut out, "messageStart", json!({"role": "assistant"}));
            if matches!(event, StreamEvent::Start { .. }) {
                return out.freeze();
            }
        }
        match event {
            StreamEvent::Start { .. } => {}
            StreamEvent::TextDelta { index, text } => frame(
                &mut out,
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"text": text}}),
            ),
            StreamEvent::ToolCallStart { index, id, name } => frame(
                &mut out,
                "contentBlockStart",
                json!({"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}),
            ),
            StreamEvent::ToolCallDelta { index, arguments } => frame(
                &mut out,
                "contentBlockDelta",
                json!({"contentBlockIndex": index, "delta": {"toolUse": {"input": arguments}}}),
            ),
            StreamEvent::BlockStop { index } => frame(
                &mut out,
                "contentBlockStop",
                json!({ "contentBlockIndex": index }),
            ),
            StreamEvent::Stop { reason, usage } => {
                frame(
                    &mut out,
                    "messageStop",
                    json!({"stopReason": stop_str(*reason)}),
                );
                if let Some(u) = usage {
                    self.metadata_sent = true;
                    frame(
                        &mut out,
                        "metadata",
                        json!({"usage": usage_json(*u), "metrics": {"latencyMs": 0}}),
                    );
                }
            }
            StreamEvent::Usage(u) => {
                if !self.metadata_sent {
                    self.metadata_sent = true;
                    frame(
                        &mut out,
                        "metadata",
                        json!({"usage": usage_json(*u), "metrics": {"latencyMs": 0}}),
                    );
                }
            }
            StreamEvent::Error {
                status,
                error_type,
                message,
            } => {
                self.failed = true;
                out.extend_from_slice(&eventstream::exception_frame(
                    bedrock_errors::exception_member(StreamKind::Converse, *status, error_type),
                    message,
                ));
            }
        }
        out.freeze()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A gateway-made error in Bedrock's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    bedrock_errors::render_error(kind, message)
}

/// The exception frame (`modelStreamErrorException`) that ends a committed ConverseStream.
pub fn render_stream_error(message: &str) -> Bytes {
    bedrock_errors::render_stream_error(message)
}
