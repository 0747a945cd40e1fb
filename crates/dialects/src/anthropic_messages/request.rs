//! The caller's Messages body → canonical ([`to_canonical`]) and canonical → a Messages body
//! ([`request_body`]) or the Bedrock InvokeModel body ([`invoke_body`]), with their wire shapes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::canonical::{ChatRequest, Message, Part, Role, Tool, ToolChoice, TranslateError};
use crate::common::{normalize_messages, raw_json, schema_text, terr};
use crate::request::ParsedRequest;

use super::DEFAULT_MAX_TOKENS;

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
    let messages = req
        .messages
        .iter()
        .map(out_message)
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let tools = out_tools(&req.tools)?;
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

/// A canonical message → a Messages turn, part by part.
fn out_message(m: &Message) -> Result<OutMessage<'_>, TranslateError> {
    Ok(OutMessage {
        role: match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        },
        content: m
            .content
            .iter()
            .map(out_block)
            .collect::<Result<Vec<_>, TranslateError>>()?,
    })
}

/// A canonical part → a content block (tool call arguments kept verbatim as `input`).
fn out_block(p: &Part) -> Result<OutBlock<'_>, TranslateError> {
    Ok(match p {
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
    })
}

/// Canonical tools → `tools` (parameters verbatim as `input_schema`).
fn out_tools(tools: &[Tool]) -> Result<Vec<OutTool<'_>>, TranslateError> {
    tools
        .iter()
        .map(|t| {
            Ok(OutTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: raw_json(&t.parameters, "tool parameters")?,
            })
        })
        .collect()
}

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
pub(super) struct WireBlock {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    pub(super) source: Option<WireSource>,
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) input: Option<Box<RawValue>>,
    #[serde(default)]
    pub(super) tool_use_id: Option<String>,
    #[serde(default)]
    pub(super) content: Option<Box<RawValue>>,
    #[serde(default)]
    pub(super) is_error: Option<bool>,
}

#[derive(Deserialize)]
pub(super) struct WireSource {
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

pub(super) fn blocks(raw: &RawValue, what: &str) -> Result<Vec<WireBlock>, TranslateError> {
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
