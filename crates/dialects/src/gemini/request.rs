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
    WPart,
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
    let system = system_texts(wire.system_instruction)?;
    let messages = in_messages(wire.contents)?;
    let tools = in_tools(wire.tools)?;
    let tool_choice = in_tool_choice(wire.tool_config)?;
    let mut g = wire.generation_config.unwrap_or_default();
    let json_schema = in_json_schema(&mut g)?;
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

/// `systemInstruction` → the canonical system texts (only text parts translate).
fn system_texts(instruction: Option<WContent>) -> Result<Vec<String>, TranslateError> {
    let mut system = Vec::new();
    for p in instruction.map(|s| s.parts).unwrap_or_default() {
        match p.text {
            Some(t) => system.push(t),
            None => return Err(terr("gemini systemInstruction: only text parts translate")),
        }
    }
    Ok(system)
}

/// Pairs function results with their calls across a conversation: the calls not yet answered
/// (name, id) and how many calls were given a synthetic id.
#[derive(Default)]
struct Pairing {
    pending: Vec<(String, String)>,
    calls: usize,
}

impl Pairing {
    /// A call's id: its own, else the next synthetic one; the call now waits for its result.
    fn call_id(&mut self, name: &str, id: Option<String>) -> String {
        let id = match id {
            Some(id) if !id.is_empty() => id,
            _ => {
                self.calls += 1;
                synthetic_id(self.calls)
            }
        };
        self.pending.push((name.to_owned(), id.clone()));
        id
    }

    /// A result's call id: its own (answering that call), else the earliest unanswered call of
    /// the same name, else `call_{name}`.
    fn result_id(&mut self, name: &str, id: Option<String>) -> String {
        match id {
            Some(id) if !id.is_empty() => {
                self.pending.retain(|(_, p)| *p != id);
                id
            }
            _ => match self.pending.iter().position(|(n, _)| n == name) {
                Some(k) => self.pending.remove(k).1,
                None => format!("call_{name}"),
            },
        }
    }
}

/// `contents` → canonical messages (`function`/`tool` turns are the user's, `model` turns the
/// assistant's; thought parts are dropped).
fn in_messages(contents: Vec<WContent>) -> Result<Vec<Message>, TranslateError> {
    let mut messages = Vec::with_capacity(contents.len());
    let mut pairing = Pairing::default();
    for (i, c) in contents.into_iter().enumerate() {
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
            content.push(in_part(i, p, &mut pairing)?);
        }
        messages.push(Message { role, content });
    }
    Ok(messages)
}

/// One part of `contents[i]` → a canonical part: text, a function call or result, or an image.
fn in_part(i: usize, p: WPart, pairing: &mut Pairing) -> Result<Part, TranslateError> {
    if let Some(t) = p.text {
        Ok(Part::Text(t))
    } else if let Some(fc) = p.function_call {
        Ok(Part::ToolCall {
            id: pairing.call_id(&fc.name, fc.id),
            arguments: args_text(fc.args.as_deref()),
            name: fc.name,
        })
    } else if let Some(fr) = p.function_response {
        let call_id = pairing.result_id(&fr.name, fr.id);
        let (content, is_error) = result_text(fr.response.as_deref());
        Ok(Part::ToolResult {
            call_id,
            content,
            is_error,
        })
    } else if let Some(d) = p.inline_data {
        if !d.mime_type.starts_with("image/") {
            return Err(terr(format!(
                "gemini contents[{i}]: inlineData `{}` cannot be translated; only images can",
                d.mime_type
            )));
        }
        Ok(Part::Image {
            media_type: d.mime_type,
            data: d.data,
        })
    } else {
        Err(terr(format!(
            "gemini contents[{i}]: a part other than text, functionCall, \
             functionResponse or image inlineData cannot be translated"
        )))
    }
}

/// `tools` → canonical tools: only `functionDeclarations` translate, not built-in tools.
fn in_tools(groups: Option<Vec<Box<RawValue>>>) -> Result<Vec<Tool>, TranslateError> {
    let mut tools = Vec::new();
    for (i, raw) in groups.into_iter().flatten().enumerate() {
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
    Ok(tools)
}

/// `toolConfig.functionCallingConfig` → the canonical tool choice (`ANY` with exactly one
/// allowed function forces that function).
fn in_tool_choice(config: Option<WToolConfig>) -> Result<Option<ToolChoice>, TranslateError> {
    let Some(fc) = config.and_then(|c| c.function_calling_config) else {
        return Ok(None);
    };
    Ok(Some(match fc.mode.as_deref().unwrap_or("AUTO") {
        "AUTO" | "MODE_UNSPECIFIED" | "VALIDATED" => ToolChoice::Auto,
        "NONE" => ToolChoice::None,
        "ANY" => match fc.allowed_function_names.as_deref() {
            Some([one]) => ToolChoice::Tool(one.clone()),
            _ => ToolChoice::Any,
        },
        other => {
            return Err(terr(format!(
                "gemini functionCallingConfig mode `{other}` is unknown"
            )))
        }
    }))
}

/// The output schema of `generationConfig` (taken out of it), after refusing what cannot be
/// translated: more than one candidate, or JSON output without a schema.
fn in_json_schema(g: &mut WGeneration) -> Result<Option<JsonSchema>, TranslateError> {
    if g.candidate_count.is_some_and(|n| n > 1) {
        return Err(terr("gemini candidateCount above 1 cannot be translated"));
    }
    let json_schema =
        schema_text(g.response_json_schema.take(), g.response_schema.take()).map(|schema| {
            JsonSchema {
                name: "response".into(),
                schema,
                strict: false,
            }
        });
    if json_schema.is_none() && g.response_mime_type.as_deref() == Some("application/json") {
        return Err(terr(
            "gemini responseMimeType application/json without a schema cannot be translated",
        ));
    }
    Ok(json_schema)
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
    let body = OutRequest {
        contents: out_contents(&req.messages)?,
        system_instruction: out_system(&req.system),
        tools: out_tools(&req.tools)?,
        tool_config: out_tool_config(req.tool_choice.as_ref()),
        generation_config: out_generation(req)?,
    };
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|e| terr(format!("rendering gemini body: {e}")))
}

/// Canonical messages → `contents` (assistant turns are `model` turns).
fn out_contents(messages: &[Message]) -> Result<Vec<OutContent<'_>>, TranslateError> {
    // (call id, function name) of each call so far: a result names its call's function.
    let mut names: Vec<(&str, &str)> = Vec::new();
    let mut contents = Vec::with_capacity(messages.len());
    for m in messages {
        let mut parts = Vec::with_capacity(m.content.len());
        for p in &m.content {
            parts.push(out_part(p, &mut names)?);
        }
        contents.push(OutContent {
            role: Some(match m.role {
                Role::User => "user",
                Role::Assistant => "model",
            }),
            parts,
        });
    }
    Ok(contents)
}

/// One canonical part → a request part; a call is recorded in `names`, a result looks its
/// function's name up there (its call id when the call is not found).
fn out_part<'a>(
    p: &'a Part,
    names: &mut Vec<(&'a str, &'a str)>,
) -> Result<OutPart<'a>, TranslateError> {
    Ok(match p {
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
    })
}

/// The system texts → `systemInstruction` (none when there are none).
fn out_system(system: &[String]) -> Option<OutContent<'_>> {
    (!system.is_empty()).then(|| OutContent {
        role: None,
        parts: system.iter().map(|t| OutPart::Text { text: t }).collect(),
    })
}

/// Canonical tools → one `functionDeclarations` group (none when there are no tools).
fn out_tools(tools: &[Tool]) -> Result<Option<Vec<OutToolGroup<'_>>>, TranslateError> {
    let decls = tools
        .iter()
        .map(|t| {
            Ok(OutDecl {
                name: &t.name,
                description: t.description.as_deref(),
                parameters_json_schema: raw_json(&t.parameters, "tool parameters")?,
            })
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    Ok((!decls.is_empty()).then(|| {
        vec![OutToolGroup {
            function_declarations: decls,
        }]
    }))
}

/// The canonical tool choice → `toolConfig` (a forced function is `ANY` allowing only it).
fn out_tool_config(choice: Option<&ToolChoice>) -> Option<Value> {
    choice.map(|c| {
        let fc = match c {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::Any => json!({"mode": "ANY"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Tool(n) => json!({"mode": "ANY", "allowedFunctionNames": [n]}),
        };
        json!({ "functionCallingConfig": fc })
    })
}

/// Sampling, limits, stops and the output schema → `generationConfig` (none when all are unset).
fn out_generation(req: &ChatRequest) -> Result<Option<OutGeneration<'_>>, TranslateError> {
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
    let empty = g.temperature.is_none()
        && g.top_p.is_none()
        && g.max_output_tokens.is_none()
        && g.stop_sequences.is_none()
        && g.response_json_schema.is_none();
    Ok((!empty).then_some(g))
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
