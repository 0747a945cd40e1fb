//! The caller's Responses body → canonical ([`to_canonical`]) and canonical → a Responses body
//! ([`request_body`], sent with `store: false`), with their wire shapes.

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
    input(wire.input.as_deref(), &mut system, &mut messages)?;
    let tools = wire_tools(wire.tools.as_deref())?;
    let tool_choice = wire_tool_choice(wire.tool_choice.as_ref())?;
    let json_schema = wire_json_schema(wire.text.and_then(|t| t.format))?;
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

/// `tools`: function tools only.
fn wire_tools(tools: Option<&[WireTool]>) -> Result<Vec<Tool>, TranslateError> {
    let mut out = Vec::new();
    for (i, t) in tools.into_iter().flatten().enumerate() {
        if t.kind != "function" {
            return Err(terr(format!(
                "openai-responses tools[{i}]: tool type `{}` cannot be translated",
                t.kind
            )));
        }
        out.push(Tool {
            name: t.name.clone().unwrap_or_default(),
            description: t.description.clone(),
            parameters: schema_text(t.parameters.as_deref()),
        });
    }
    Ok(out)
}

/// `tool_choice`: a mode string or `{"type":"function","name":…}`.
fn wire_tool_choice(
    choice: Option<&serde_json::Value>,
) -> Result<Option<ToolChoice>, TranslateError> {
    Ok(match choice {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(openai_tool_choice_mode("openai-responses", s)?),
        Some(v) => match (v["type"].as_str(), v["name"].as_str()) {
            (Some("function"), Some(name)) => Some(ToolChoice::Tool(name.to_owned())),
            _ => {
                return Err(terr(
                    "openai-responses tool_choice object cannot be translated (only {type:function,name})",
                ))
            }
        },
    })
}

/// `text.format`: `text` (none) or `json_schema`.
fn wire_json_schema(format: Option<WireFormat>) -> Result<Option<JsonSchema>, TranslateError> {
    Ok(match format {
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
    })
}

/// `input`: one string (a user message) or a list of items.
fn input(
    input: Option<&RawValue>,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), TranslateError> {
    match input {
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
                input_item(item, i, system, messages)?;
            }
        }
    }
    Ok(())
}

fn input_item(
    item: WireItem,
    i: usize,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), TranslateError> {
    let kind = item.kind.as_deref().unwrap_or("message");
    match kind {
        "message" => message_item(item, i, system, messages)?,
        "function_call" => messages.push(Message {
            role: Role::Assistant,
            content: vec![Part::ToolCall {
                id: item.call_id.unwrap_or_default(),
                name: item.name.unwrap_or_default(),
                arguments: item.arguments.unwrap_or_default(),
            }],
        }),
        "function_call_output" => messages.push(Message {
            role: Role::User,
            content: vec![Part::ToolResult {
                content: function_call_output(item.output.as_deref(), i)?,
                call_id: item.call_id.unwrap_or_default(),
                is_error: false,
            }],
        }),
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

/// A `message` item: system/developer text joins the system prompt; user and assistant content
/// become turns.
fn message_item(
    item: WireItem,
    i: usize,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), TranslateError> {
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
    Ok(())
}

/// A `function_call_output` item's `output`: a string, or text parts joined.
fn function_call_output(output: Option<&RawValue>, i: usize) -> Result<String, TranslateError> {
    Ok(match output {
        None => String::new(),
        Some(raw) if raw.get().trim_start().starts_with('"') => serde_json::from_str(raw.get())
            .map_err(|e| terr(format!("openai-responses input[{i}].output: {e}")))?,
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
    })
}

pub(super) fn item_content(raw: Option<&RawValue>, i: usize) -> Result<Vec<Part>, TranslateError> {
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
            Role::User => push_user_turn(&mut input, &m.content)?,
            Role::Assistant => push_assistant_turn(&mut input, &m.content)?,
        }
    }
    let tools = out_tools(&req.tools)?;
    let text = req.json_schema.as_ref().map(out_text).transpose()?;
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

/// A canonical user turn: text and images as `user` messages, each tool result as a
/// `function_call_output` item, in order.
fn push_user_turn<'a>(
    input: &mut Vec<OutItem<'a>>,
    content: &'a [Part],
) -> Result<(), TranslateError> {
    let mut parts = Vec::new();
    for p in content {
        match p {
            Part::Text(t) => parts.push(OutPart::InputText { text: t }),
            Part::Image { media_type, data } => parts.push(OutPart::InputImage {
                image_url: data_url(media_type, data),
                detail: "auto",
            }),
            Part::ToolResult {
                call_id, content, ..
            } => {
                flush(input, &mut parts, "user");
                input.push(OutItem::FunctionCallOutput {
                    kind: "function_call_output",
                    call_id,
                    output: content,
                });
            }
            Part::ToolCall { .. } => return Err(terr("a user turn cannot carry a tool call")),
        }
    }
    flush(input, &mut parts, "user");
    Ok(())
}

/// A canonical assistant turn: text as `assistant` messages, each tool call as a
/// `function_call` item, in order.
fn push_assistant_turn<'a>(
    input: &mut Vec<OutItem<'a>>,
    content: &'a [Part],
) -> Result<(), TranslateError> {
    let mut parts = Vec::new();
    for p in content {
        match p {
            Part::Text(t) => parts.push(OutPart::OutputText { text: t }),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => {
                flush(input, &mut parts, "assistant");
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
    flush(input, &mut parts, "assistant");
    Ok(())
}

/// Canonical tools → `tools` (function tools, parameters verbatim, `strict: false`).
fn out_tools(tools: &[Tool]) -> Result<Vec<OutTool<'_>>, TranslateError> {
    tools
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
        .collect()
}

/// A canonical JSON schema → `text.format` of type `json_schema`.
fn out_text(s: &JsonSchema) -> Result<OutText<'_>, TranslateError> {
    Ok(OutText {
        format: OutFormat {
            kind: "json_schema",
            name: &s.name,
            schema: raw_json(&s.schema, "json_schema schema")?,
            strict: s.strict,
        },
    })
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
pub(super) struct WireItem {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) role: Option<String>,
    #[serde(default)]
    pub(super) content: Option<Box<RawValue>>,
    #[serde(default)]
    pub(super) call_id: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) arguments: Option<String>,
    #[serde(default)]
    pub(super) output: Option<Box<RawValue>>,
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
