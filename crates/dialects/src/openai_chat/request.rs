//! The caller's chat-completions body → canonical ([`to_canonical`]) and canonical → a
//! chat-completions body for an OpenAI-kind provider ([`request_body`]), with their wire shapes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use crate::canonical::{
    ChatRequest, JsonSchema, Message, Part, Role, Tool, ToolChoice, TranslateError,
};
use crate::common::{
    data_url, normalize_messages, openai_tool_choice_mode, parse_data_url, raw_json, schema_text,
    terr,
};
use crate::request::ParsedRequest;

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
            "assistant" => messages.push(assistant_message(m, i)?),
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
    let tools = wire_tools(wire.tools.as_deref())?;
    let tool_choice = wire_tool_choice(wire.tool_choice.as_ref())?;
    let stop = wire_stop(wire.stop.as_ref())?;
    let json_schema = wire_json_schema(wire.response_format.as_ref())?;
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

/// An `assistant` message: its text (or refusal) and its tool calls.
fn assistant_message(m: &ChatWireMessage, i: usize) -> Result<Message, TranslateError> {
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
    Ok(Message {
        role: Role::Assistant,
        content,
    })
}

/// `tools`: function tools only.
fn wire_tools(tools: Option<&[ChatWireTool]>) -> Result<Vec<Tool>, TranslateError> {
    let mut out = Vec::new();
    for (i, t) in tools.into_iter().flatten().enumerate() {
        let f = match (t.kind.as_str(), &t.function) {
            ("function", Some(f)) => f,
            (kind, _) => {
                return Err(terr(format!(
                    "openai-chat tools[{i}]: tool type `{kind}` cannot be translated"
                )))
            }
        };
        out.push(Tool {
            name: f.name.clone(),
            description: f.description.clone(),
            parameters: schema_text(f.parameters.as_deref()),
        });
    }
    Ok(out)
}

/// `tool_choice`: a mode string or `{"function":{"name":…}}`.
fn wire_tool_choice(
    choice: Option<&serde_json::Value>,
) -> Result<Option<ToolChoice>, TranslateError> {
    Ok(match choice {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(openai_tool_choice_mode("openai-chat", s)?),
        Some(v) => match v["function"]["name"].as_str() {
            Some(name) => Some(ToolChoice::Tool(name.to_owned())),
            None => return Err(terr("openai-chat tool_choice object without function.name")),
        },
    })
}

/// `stop`: one string or an array of strings.
fn wire_stop(stop: Option<&serde_json::Value>) -> Result<Vec<String>, TranslateError> {
    Ok(match stop {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::String(s)) => vec![s.clone()],
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| terr("openai-chat `stop` must be strings"))?,
        Some(_) => return Err(terr("openai-chat `stop` must be a string or an array")),
    })
}

/// `response_format`: `text` (none) or `json_schema`.
fn wire_json_schema(format: Option<&ChatWireFormat>) -> Result<Option<JsonSchema>, TranslateError> {
    Ok(match format {
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
            Role::User => push_user_turn(&mut messages, &m.content)?,
            Role::Assistant => messages.push(assistant_turn(&m.content)?),
        }
    }
    let tools = out_tools(&req.tools)?;
    let response_format = req.json_schema.as_ref().map(out_format).transpose()?;
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

/// A canonical user turn: its text and images as one `user` message, each tool result as a
/// `tool` message of its own, in order.
fn push_user_turn<'a>(
    messages: &mut Vec<ChatOutMessage<'a>>,
    content: &'a [Part],
) -> Result<(), TranslateError> {
    let mut parts: Vec<ChatOutPart<'_>> = Vec::new();
    for p in content {
        match p {
            Part::ToolResult {
                call_id, content, ..
            } => {
                flush_user_parts(messages, &mut parts);
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
            Part::ToolCall { .. } => return Err(terr("a user turn cannot carry a tool call")),
        }
    }
    flush_user_parts(messages, &mut parts);
    Ok(())
}

/// A canonical assistant turn: one `assistant` message with its text and tool calls.
fn assistant_turn(content: &[Part]) -> Result<ChatOutMessage<'_>, TranslateError> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for p in content {
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
    Ok(ChatOutMessage {
        role: "assistant",
        content,
        tool_calls: (!calls.is_empty()).then_some(calls),
        tool_call_id: None,
    })
}

/// Canonical tools → `tools` (function tools, parameters verbatim).
fn out_tools(tools: &[Tool]) -> Result<Vec<ChatOutTool<'_>>, TranslateError> {
    tools
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
        .collect()
}

/// A canonical JSON schema → `response_format` of type `json_schema`.
fn out_format(s: &JsonSchema) -> Result<ChatOutFormat<'_>, TranslateError> {
    Ok(ChatOutFormat {
        kind: "json_schema",
        json_schema: ChatOutSchema {
            name: &s.name,
            schema: raw_json(&s.schema, "json_schema schema")?,
            strict: s.strict,
        },
    })
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
pub(super) struct ChatWireToolCall {
    #[serde(default)]
    pub(super) id: String,
    pub(super) function: ChatWireFunctionCall,
}

#[derive(Deserialize)]
pub(super) struct ChatWireFunctionCall {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) arguments: String,
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
