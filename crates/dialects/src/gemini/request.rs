//! A caller's `GenerateContentRequest` → canonical ([`to_canonical`]) and canonical → a
//! `GenerateContentRequest` ([`request_body`]). Function arguments, parameter schemas and the
//! output schema are carried as raw JSON text, so their bytes (and key order) pass unchanged.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::canonical::{
    ChatRequest, JsonSchema, Message, Part, Role, Tool, ToolChoice, TranslateError,
};
use crate::common::{normalize_messages, raw_json, terr};
use crate::request::ParsedRequest;

use super::wire::{
    args_text, out_args, OutCall, OutContent, OutFunctionResponse, OutInline, OutPart, WContent,
};

/// The id given to the `n`-th function call of a conversation that names none (Gemini's
/// `functionCall.id` is optional; the canonical form pairs calls and results by id).
fn synthetic_id(n: usize) -> String {
    format!("call_{n}")
}

/// A caller's Gemini body → the canonical form. Function results pair with the earliest
/// unanswered call of the same name when they carry no id. `candidateCount` above 1, non-image
/// `inlineData`, `fileData`, code execution and built-in tools cannot be translated;
/// `safetySettings` never reach here (a guardrail, refused by `Dialect::to_canonical`).
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let wire: WRequest =
        serde_json::from_slice(req.body()).map_err(|e| terr(format!("gemini body: {e}")))?;
    let mut system = Vec::new();
    for p in wire.system_instruction.map(|s| s.parts).unwrap_or_default() {
        match p.text {
            Some(t) => system.push(t),
            None => return Err(terr("gemini systemInstruction: only text parts translate")),
        }
    }
    let mut messages = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut calls = 0usize;
    for (i, c) in wire.contents.into_iter().enumerate() {
        let role = match c.role.as_deref().unwrap_or("user") {
            "user" | "function" | "tool" => Role::User,
            "model" | "assistant" => Role::Assistant,
            other => {
                return Err(terr(format!(
                    "gemini contents[{i}]: role `{other}` is unknown"
                )))
            }
        };
        let mut content = Vec::new();
        for p in c.parts {
            if p.thought == Some(true) {
                continue; // reasoning is not carried across dialects
            }
            if let Some(t) = p.text {
                content.push(Part::Text(t));
            } else if let Some(fc) = p.function_call {
                let id = match fc.id {
                    Some(id) if !id.is_empty() => id,
                    _ => {
                        calls += 1;
                        synthetic_id(calls)
                    }
                };
                pending.push((fc.name.clone(), id.clone()));
                content.push(Part::ToolCall {
                    id,
                    name: fc.name,
                    arguments: args_text(fc.args.as_deref()),
                });
            } else if let Some(fr) = p.function_response {
                let call_id = match fr.id {
                    Some(id) if !id.is_empty() => {
                        pending.retain(|(_, p)| *p != id);
                        id
                    }
                    _ => match pending.iter().position(|(n, _)| *n == fr.name) {
                        Some(k) => pending.remove(k).1,
                        None => format!("call_{}", fr.name),
                    },
                };
                let (text, is_error) = result_text(fr.response.as_deref());
                content.push(Part::ToolResult {
                    call_id,
                    content: text,
                    is_error,
                });
            } else if let Some(d) = p.inline_data {
                if !d.mime_type.starts_with("image/") {
                    return Err(terr(format!(
                        "gemini contents[{i}]: inlineData `{}` cannot be translated; only images can",
                        d.mime_type
                    )));
                }
                content.push(Part::Image {
                    media_type: d.mime_type,
                    data: d.data,
                });
            } else {
                return Err(terr(format!(
                    "gemini contents[{i}]: a part other than text, functionCall, \
                     functionResponse or image inlineData cannot be translated"
                )));
            }
        }
        messages.push(Message { role, content });
    }
    let mut tools = Vec::new();
    for (i, raw) in wire.tools.into_iter().flatten().enumerate() {
        let keys: Map<String, Value> =
            serde_json::from_str(raw.get()).map_err(|e| terr(format!("gemini tools[{i}]: {e}")))?;
        if let Some(key) = keys.keys().find(|k| *k != "functionDeclarations") {
            return Err(terr(format!(
                "gemini tools[{i}]: built-in tool `{key}` cannot be translated"
            )));
        }
        let t: WToolGroup =
            serde_json::from_str(raw.get()).map_err(|e| terr(format!("gemini tools[{i}]: {e}")))?;
        for f in t.function_declarations.into_iter().flatten() {
            tools.push(Tool {
                name: f.name,
                description: f.description,
                parameters: schema_text(f.parameters_json_schema, f.parameters)
                    .unwrap_or_else(|| r#"{"type":"object","properties":{}}"#.to_owned()),
            });
        }
    }
    let tool_choice = match wire.tool_config.and_then(|c| c.function_calling_config) {
        None => None,
        Some(fc) => match fc.mode.as_deref().unwrap_or("AUTO") {
            "AUTO" | "MODE_UNSPECIFIED" | "VALIDATED" => Some(ToolChoice::Auto),
            "NONE" => Some(ToolChoice::None),
            "ANY" => match fc.allowed_function_names.as_deref() {
                Some([one]) => Some(ToolChoice::Tool(one.clone())),
                _ => Some(ToolChoice::Any),
            },
            other => {
                return Err(terr(format!(
                    "gemini functionCallingConfig mode `{other}` is unknown"
                )))
            }
        },
    };
    let g = wire.generation_config.unwrap_or_default();
    if g.candidate_count.is_some_and(|n| n > 1) {
        return Err(terr("gemini candidateCount above 1 cannot be translated"));
    }
    let json_schema =
        schema_text(g.response_json_schema, g.response_schema).map(|schema| JsonSchema {
            name: "response".into(),
            schema,
            strict: false,
        });
    if json_schema.is_none() && g.response_mime_type.as_deref() == Some("application/json") {
        return Err(terr(
            "gemini responseMimeType application/json without a schema cannot be translated",
        ));
    }
    Ok(ChatRequest {
        model: req.model.clone(),
        system,
        messages: normalize_messages(messages),
        tools,
        tool_choice,
        max_tokens: g.max_output_tokens,
        temperature: g.temperature,
        top_p: g.top_p,
        stop: g.stop_sequences.unwrap_or_default(),
        stream: req.stream,
        json_schema,
    })
}

/// A schema as canonical text: a JSON-schema field verbatim, else Gemini's OpenAPI-style
/// `Schema` with its upper-case type names (`OBJECT`) in JSON schema's lower case (verbatim when
/// it has none).
fn schema_text(
    json_schema: Option<Box<RawValue>>,
    schema: Option<Box<RawValue>>,
) -> Option<String> {
    if let Some(s) = json_schema.filter(|s| s.get() != "null") {
        return Some(s.get().to_owned());
    }
    let s = schema.filter(|s| s.get() != "null")?;
    let mut v: Value = serde_json::from_str(s.get()).ok()?;
    Some(if lower_types(&mut v) {
        v.to_string()
    } else {
        s.get().to_owned()
    })
}

/// Lower-cases `type` names in place; whether any changed.
fn lower_types(v: &mut Value) -> bool {
    match v {
        Value::Object(o) => {
            let mut changed = false;
            for (k, x) in o.iter_mut() {
                match (k.as_str(), x) {
                    ("type", Value::String(s)) => {
                        if s.bytes().any(|b| b.is_ascii_uppercase()) {
                            *s = s.to_ascii_lowercase();
                            changed = true;
                        }
                    }
                    (_, x) => changed |= lower_types(x),
                }
            }
            changed
        }
        Value::Array(a) => a.iter_mut().fold(false, |c, x| lower_types(x) | c),
        _ => false,
    }
}

/// A function response object → canonical result text: `{"error": …}` alone is an error result;
/// `{"result"|"output": "text"}` alone is that text; anything else is its JSON text, verbatim.
fn result_text(response: Option<&RawValue>) -> (String, bool) {
    let Some(raw) = response else {
        return (String::new(), false);
    };
    if let Ok(o) = serde_json::from_str::<Map<String, Value>>(raw.get()) {
        if let (1, Some((k, v))) = (o.len(), o.iter().next()) {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            match k.as_str() {
                "error" => return (text, true),
                "result" | "output" if v.is_string() => return (text, false),
                _ => {}
            }
        }
    }
    (raw.get().to_owned(), false)
}

/// The canonical request → a `GenerateContentRequest` (no model, no stream flag: both go in
/// the URL). Tool parameters and the output schema are sent verbatim as `parametersJsonSchema`
/// and `responseJsonSchema`; a tool result is `{"result": text}` (`{"error": text}` for an
/// error) and names its call's function (found by id).
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    let mut names: Vec<(&str, &str)> = Vec::new();
    let mut contents = Vec::with_capacity(req.messages.len());
    for m in &req.messages {
        let mut parts = Vec::with_capacity(m.content.len());
        for p in &m.content {
            parts.push(match p {
                Part::Text(t) => OutPart::Text { text: t },
                Part::Image { media_type, data } => OutPart::Inline {
                    inline_data: OutInline {
                        mime_type: media_type,
                        data,
                    },
                },
                Part::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    names.push((id, name));
                    OutPart::Call {
                        function_call: OutCall {
                            id,
                            name,
                            args: out_args(arguments, false)?,
                        },
                    }
                }
                Part::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => {
                    let name = names
                        .iter()
                        .find(|(id, _)| id == call_id)
                        .map_or(call_id.as_str(), |(_, n)| n);
                    let key = if *is_error { "error" } else { "result" };
                    OutPart::Response {
                        function_response: OutFunctionResponse {
                            id: call_id,
                            name,
                            response: json!({ key: content }),
                        },
                    }
                }
            });
        }
        contents.push(OutContent {
            role: Some(match m.role {
                Role::User => "user",
                Role::Assistant => "model",
            }),
            parts,
        });
    }
    let system = (!req.system.is_empty()).then(|| OutContent {
        role: None,
        parts: req
            .system
            .iter()
            .map(|t| OutPart::Text { text: t })
            .collect(),
    });
    let decls = req
        .tools
        .iter()
        .map(|t| {
            Ok(OutDecl {
                name: &t.name,
                description: t.description.as_deref(),
                parameters_json_schema: raw_json(&t.parameters, "tool parameters")?,
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    let tool_config = req.tool_choice.as_ref().map(|c| {
        let fc = match c {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::Any => json!({"mode": "ANY"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Tool(n) => json!({"mode": "ANY", "allowedFunctionNames": [n]}),
        };
        json!({ "functionCallingConfig": fc })
    });
    let schema = match &req.json_schema {
        Some(s) => Some(raw_json(&s.schema, "json_schema")?),
        None => None,
    };
    let g = OutGeneration {
        temperature: req.temperature,
        top_p: req.top_p,
        max_output_tokens: req.max_tokens,
        stop_sequences: (!req.stop.is_empty()).then_some(&req.stop),
        response_mime_type: schema.is_some().then_some("application/json"),
        response_json_schema: schema,
    };
    let empty_g = g.temperature.is_none()
        && g.top_p.is_none()
        && g.max_output_tokens.is_none()
        && g.stop_sequences.is_none()
        && g.response_json_schema.is_none();
    let body = OutRequest {
        contents,
        system_instruction: system,
        tools: (!decls.is_empty()).then(|| {
            vec![OutToolGroup {
                function_declarations: decls,
            }]
        }),
        tool_config,
        generation_config: (!empty_g).then_some(g),
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| terr(format!("rendering gemini body: {e}")))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WRequest {
    #[serde(default)]
    contents: Vec<WContent>,
    #[serde(default)]
    system_instruction: Option<WContent>,
    #[serde(default)]
    tools: Option<Vec<Box<RawValue>>>,
    #[serde(default)]
    tool_config: Option<WToolConfig>,
    #[serde(default)]
    generation_config: Option<WGeneration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WToolGroup {
    #[serde(default)]
    function_declarations: Option<Vec<WDecl>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WDecl {
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Box<RawValue>>,
    #[serde(default)]
    parameters_json_schema: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WToolConfig {
    #[serde(default)]
    function_calling_config: Option<WCallingConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WCallingConfig {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    allowed_function_names: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WGeneration {
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    candidate_count: Option<u64>,
    #[serde(default)]
    response_mime_type: Option<String>,
    #[serde(default)]
    response_schema: Option<Box<RawValue>>,
    #[serde(default)]
    response_json_schema: Option<Box<RawValue>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutRequest<'a> {
    contents: Vec<OutContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<OutContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<OutToolGroup<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<OutGeneration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutToolGroup<'a> {
    function_declarations: Vec<OutDecl<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutDecl<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters_json_schema: Box<RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutGeneration<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stop_sequences: Option<&'a Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<Box<RawValue>>,
}
