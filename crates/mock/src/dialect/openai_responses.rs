//! OpenAI Responses (`POST /v1/responses`), framed like the real API
//! (reference/wire-formats.md §1.1 errors — the same as Chat Completions —, §2.2 SSE: every event
//! with its `event:` line, `type` and an increasing `sequence_number`).
//!
//! The `Response` object carries every field the official SDK's `Response` model requires
//! (`parallel_tool_calls`, `tool_choice`, `tools`, `output`, ...).

use bytes::Bytes;
use http::Response;
use serde::Serialize;
use serde_json::Value;

use super::openai_chat::{parse_json_and_model, stream_error_message};
use super::{
    content_chars, json_bytes, non_empty_array, response, short_id, sse_event, text_len,
    RenderContext,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::engine::{
    MockError, RequestFacts, StreamError, Success, Usage, DEFAULT_STREAM_ERROR_TYPE,
};

const REQUEST_ID_HEADER: &str = "x-request-id";

/// Reads `model`, `stream`, `tools` and the prompt length (`input` and `instructions`).
pub fn parse_request(body: &[u8]) -> Result<(RequestFacts, Value), MockError> {
    let (json, model) = parse_json_and_model(body)?;
    let facts = RequestFacts {
        model,
        stream: json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_stream_usage: false,
        prompt_chars: prompt_chars(&json),
        has_tools: non_empty_array(json.get("tools")),
    };
    Ok((facts, json))
}

/// `input` (a string, or items whose `content` is a string or parts with `text`) and
/// `instructions`.
fn prompt_chars(json: &Value) -> usize {
    let input = match json.get("input") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|item| item.get("content"))
            .map(content_chars)
            .sum(),
        Some(other) => text_len(other),
        None => 0,
    };
    input + json.get("instructions").map_or(0, text_len)
}

/// `application/json` `response` object with one `message` output item (or one `function_call`
/// item for a tool call). `dropAfterChunks` sends the first half of it, then kills the connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let ids = Ids::new(ctx);
    let body = response_object(
        ctx,
        &ids,
        final_status(success),
        vec![ids.item(success, true)],
        Some(success.usage),
    );
    let bytes = Bytes::from(json_bytes(&body));
    let body = body::whole_answer(bytes, &success.ending);
    response(
        success.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body,
    )
}

/// `text/event-stream`: `response.created`, `response.in_progress`, `response.output_item.added`,
/// `response.content_part.added`, `response.output_text.delta` per content piece,
/// `response.output_text.done`, `response.content_part.done`, `response.output_item.done`,
/// `response.completed`. A tool call streams `response.function_call_arguments.delta`/`.done`
/// instead of the content part and text events.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = EventEncoder {
        ctx: ctx.clone(),
        ids: Ids::new(ctx),
        success: success.clone(),
        sequence_number: 0,
    };
    let steps = body::stream_steps(&mut encoder, success);
    response(
        success.status,
        "text/event-stream",
        REQUEST_ID_HEADER,
        ctx,
        body::scripted(steps),
    )
}

/// The same error bodies as Chat Completions.
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    super::openai_chat::render_error(ctx, error)
}

struct Ids {
    response: String,
    item: String,
    call: String,
}

impl Ids {
    fn new(ctx: &RenderContext) -> Self {
        Self {
            response: short_id("resp_", ctx),
            item: short_id("msg_", ctx),
            call: short_id("call_", ctx),
        }
    }

    /// The output item; `done` = complete with the whole text/arguments, else as first announced.
    fn item(&self, success: &Success, done: bool) -> OutputItem {
        let status = if done { "completed" } else { "in_progress" };
        match &success.tool_call {
            Some(tool) => OutputItem::FunctionCall {
                id: self.item.replacen("msg_", "fc_", 1),
                status,
                arguments: if done {
                    tool.arguments.clone()
                } else {
                    String::new()
                },
                call_id: self.call.clone(),
                name: tool.name.clone(),
            },
            None => OutputItem::Message {
                id: self.item.clone(),
                status,
                role: "assistant",
                content: if done {
                    vec![OutputText::new(&success.reply)]
                } else {
                    Vec::new()
                },
            },
        }
    }

    fn item_id(&self, success: &Success) -> String {
        match self.item(success, false) {
            OutputItem::FunctionCall { id, .. } | OutputItem::Message { id, .. } => id,
        }
    }
}

/// `completed`, or `incomplete` when the content filter stopped the answer.
fn final_status(success: &Success) -> &'static str {
    if success.content_filtered {
        "incomplete"
    } else {
        "completed"
    }
}

fn response_object(
    ctx: &RenderContext,
    ids: &Ids,
    status: &'static str,
    output: Vec<OutputItem>,
    usage: Option<Usage>,
) -> ResponseObject {
    ResponseObject {
        id: ids.response.clone(),
        object: "response",
        created_at: ctx.created,
        status,
        background: false,
        error: None,
        incomplete_details: (status == "incomplete").then_some(IncompleteDetails {
            reason: "content_filter",
        }),
        instructions: None,
        max_output_tokens: None,
        model: ctx.model.clone(),
        output,
        parallel_tool_calls: true,
        previous_response_id: None,
        reasoning: Reasoning {
            effort: None,
            summary: None,
        },
        service_tier: "default",
        store: true,
        temperature: 1.0,
        text: TextConfig {
            format: TextFormat { r#type: "text" },
        },
        tool_choice: "auto",
        tools: [],
        top_p: 1.0,
        truncation: "disabled",
        usage: usage.map(UsageBody::from),
        user: None,
        metadata: Empty {},
    }
}

struct EventEncoder {
    ctx: RenderContext,
    ids: Ids,
    success: Success,
    sequence_number: u64,
}

impl EventEncoder {
    fn next(&mut self) -> u64 {
        let n = self.sequence_number;
        self.sequence_number += 1;
        n
    }

    fn sse(event: &Event) -> Bytes {
        sse_event(event.name(), &json_bytes(event))
    }

    fn is_tool(&self) -> bool {
        self.success.tool_call.is_some()
    }
}

impl StreamEncoder for EventEncoder {
    fn preamble(&mut self) -> Vec<Bytes> {
        let in_progress = response_object(&self.ctx, &self.ids, "in_progress", Vec::new(), None);
        let mut events = vec![
            Event::Created {
                sequence_number: self.next(),
                response: in_progress.clone(),
            },
            Event::InProgress {
                sequence_number: self.next(),
                response: in_progress,
            },
            Event::OutputItemAdded {
                sequence_number: self.next(),
                output_index: 0,
                item: self.ids.item(&self.success, false),
            },
        ];
        if !self.is_tool() {
            events.push(Event::ContentPartAdded {
                sequence_number: self.next(),
                item_id: self.ids.item_id(&self.success),
                output_index: 0,
                content_index: 0,
                part: OutputText::new(""),
            });
        }
        events.iter().map(Self::sse).collect()
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        let item_id = self.ids.item_id(&self.success);
        let event = if self.is_tool() {
            Event::FunctionCallArgumentsDelta {
                sequence_number: self.next(),
                item_id,
                output_index: 0,
                delta: text.to_owned(),
            }
        } else {
            Event::OutputTextDelta {
                sequence_number: self.next(),
                item_id,
                output_index: 0,
                content_index: 0,
                delta: text.to_owned(),
                logprobs: [],
            }
        };
        vec![Self::sse(&event)]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        let item_id = self.ids.item_id(&self.success);
        let mut events = Vec::new();
        match &self.success.tool_call {
            Some(tool) => {
                let arguments = tool.arguments.clone();
                events.push(Event::FunctionCallArgumentsDone {
                    sequence_number: self.next(),
                    item_id,
                    output_index: 0,
                    arguments,
                });
            }
            None => {
                let text = self.success.reply.clone();
                events.push(Event::OutputTextDone {
                    sequence_number: self.next(),
                    item_id: item_id.clone(),
                    output_index: 0,
                    content_index: 0,
                    text: text.clone(),
                    logprobs: [],
                });
                events.push(Event::ContentPartDone {
                    sequence_number: self.next(),
                    item_id,
                    output_index: 0,
                    content_index: 0,
                    part: OutputText::new(&text),
                });
            }
        }
        let item = self.ids.item(&self.success, true);
        events.push(Event::OutputItemDone {
            sequence_number: self.next(),
            output_index: 0,
            item: item.clone(),
        });
        let completed = response_object(
            &self.ctx,
            &self.ids,
            final_status(&self.success),
            vec![item],
            Some(self.success.usage),
        );
        let sequence_number = self.next();
        events.push(if self.success.content_filtered {
            Event::Incomplete {
                sequence_number,
                response: completed,
            }
        } else {
            Event::Completed {
                sequence_number,
                response: completed,
            }
        });
        events.iter().map(Self::sse).collect()
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        let code = error
            .code
            .as_deref()
            .or(error.error_type.as_deref())
            .unwrap_or(DEFAULT_STREAM_ERROR_TYPE);
        let event = Event::Error {
            code: code.to_owned(),
            message: error
                .message
                .clone()
                .unwrap_or_else(|| stream_error_message(code)),
            param: None,
            sequence_number: self.next(),
        };
        vec![Self::sse(&event)]
    }
}

/// One streamed event; serialized with `type` first (then `sequence_number`, except for `error`
/// whose field order follows the real API).
#[derive(Serialize)]
#[serde(tag = "type")]
enum Event {
    #[serde(rename = "response.created")]
    Created {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.in_progress")]
    InProgress {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        sequence_number: u64,
        output_index: u32,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        content_index: u32,
        part: OutputText,
    },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        content_index: u32,
        delta: String,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        delta: String,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        content_index: u32,
        text: String,
        logprobs: [(); 0],
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        arguments: String,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        sequence_number: u64,
        item_id: String,
        output_index: u32,
        content_index: u32,
        part: OutputText,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        sequence_number: u64,
        output_index: u32,
        item: OutputItem,
    },
    #[serde(rename = "response.completed")]
    Completed {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "response.incomplete")]
    Incomplete {
        sequence_number: u64,
        response: ResponseObject,
    },
    #[serde(rename = "error")]
    Error {
        code: String,
        message: String,
        param: Option<()>,
        sequence_number: u64,
    },
}

impl Event {
    /// The SSE `event:` name, equal to `type`.
    fn name(&self) -> &'static str {
        match self {
            Self::Created { .. } => "response.created",
            Self::InProgress { .. } => "response.in_progress",
            Self::OutputItemAdded { .. } => "response.output_item.added",
            Self::ContentPartAdded { .. } => "response.content_part.added",
            Self::OutputTextDelta { .. } => "response.output_text.delta",
            Self::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Self::OutputTextDone { .. } => "response.output_text.done",
            Self::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Self::ContentPartDone { .. } => "response.content_part.done",
            Self::OutputItemDone { .. } => "response.output_item.done",
            Self::Completed { .. } => "response.completed",
            Self::Incomplete { .. } => "response.incomplete",
            Self::Error { .. } => "error",
        }
    }
}

#[derive(Clone, Serialize)]
struct IncompleteDetails {
    reason: &'static str,
}

#[derive(Clone, Serialize)]
struct ResponseObject {
    id: String,
    object: &'static str,
    created_at: u64,
    status: &'static str,
    background: bool,
    error: Option<()>,
    incomplete_details: Option<IncompleteDetails>,
    instructions: Option<()>,
    max_output_tokens: Option<()>,
    model: String,
    output: Vec<OutputItem>,
    parallel_tool_calls: bool,
    previous_response_id: Option<()>,
    reasoning: Reasoning,
    service_tier: &'static str,
    store: bool,
    temperature: f64,
    text: TextConfig,
    tool_choice: &'static str,
    tools: [(); 0],
    top_p: f64,
    truncation: &'static str,
    usage: Option<UsageBody>,
    user: Option<()>,
    metadata: Empty,
}

#[derive(Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem {
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText>,
    },
    FunctionCall {
        id: String,
        status: &'static str,
        arguments: String,
        call_id: String,
        name: String,
    },
}

#[derive(Clone, Serialize)]
struct OutputText {
    r#type: &'static str,
    text: String,
    annotations: [(); 0],
    logprobs: [(); 0],
}

impl OutputText {
    fn new(text: &str) -> Self {
        Self {
            r#type: "output_text",
            text: text.to_owned(),
            annotations: [],
            logprobs: [],
        }
    }
}

#[derive(Clone, Serialize)]
struct Reasoning {
    effort: Option<()>,
    summary: Option<()>,
}

#[derive(Clone, Serialize)]
struct TextConfig {
    format: TextFormat,
}

#[derive(Clone, Serialize)]
struct TextFormat {
    r#type: &'static str,
}

#[derive(Clone, Serialize)]
struct Empty {}

#[derive(Clone, Copy, Serialize)]
struct UsageBody {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Clone, Copy, Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Clone, Copy, Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.prompt_tokens,
            input_tokens_details: CachedTokens { cached_tokens: 0 },
            output_tokens: u.completion_tokens,
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: 0,
            },
            total_tokens: u.total_tokens(),
        }
    }
}
