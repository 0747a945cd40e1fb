//! Anthropic Messages (`POST /v1/messages`), framed like the real API
//! (reference/wire-formats.md §1.2 errors, §2.3 SSE — every event with its `event:` line).
//!
//! The message and stream-event types are shared with Bedrock InvokeModel, whose bodies are
//! Anthropic's (`super::bedrock::invoke`).

use bytes::Bytes;
use http::Response;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{
    content_chars, json_bytes, messages_chars, non_empty_array, parse_json, raw_json, response,
    short_id, sse_event, with_retry_after, RenderContext,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::engine::{MockError, RequestFacts, StreamError, Success, Usage};

const REQUEST_ID_HEADER: &str = "request-id";
/// The in-stream error type when `streamErrorType` is not set.
pub(crate) const DEFAULT_STREAM_ERROR_TYPE: &str = "overloaded_error";

/// Reads `model`, `stream`, `tools` and the prompt length (`messages` and `system`). Auth headers
/// (`x-api-key` or `Authorization: Bearer`) and `anthropic-version` are accepted, never required.
pub fn parse_request(body: &[u8]) -> Result<(RequestFacts, Value), MockError> {
    let json = parse_json(body, |e| {
        invalid_request(format!("The request body is not valid JSON: {e}"))
    })?;
    let model = match json.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(invalid_request("model: Field required".to_owned())),
    };
    let facts = RequestFacts {
        model,
        stream: json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_stream_usage: false,
        prompt_chars: prompt_chars(&json),
        has_tools: non_empty_array(json.get("tools")),
    };
    Ok((facts, json))
}

/// Characters of `messages[].content` and `system` (a string or text blocks).
pub(crate) fn prompt_chars(json: &Value) -> usize {
    messages_chars(json, "messages") + json.get("system").map_or(0, content_chars)
}

pub(crate) fn invalid_request(message: String) -> MockError {
    MockError {
        error_type: Some("invalid_request_error".to_owned()),
        message: Some(message),
        ..MockError::new(400)
    }
}

/// `application/json` `Message` with header `request-id`. `dropAfterChunks` sends the first half of
/// it, then kills the connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let bytes = Bytes::from(json_bytes(&message(ctx, success)));
    let body = body::whole_answer(bytes, &success.ending);
    response(
        success.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body,
    )
}

/// `text/event-stream`: `message_start`, `content_block_start`, `ping`, `content_block_delta` per
/// content piece, `content_block_stop`, `message_delta`, `message_stop` — each with its `event:`
/// line.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = SseEncoder(Events::new(ctx, success));
    let steps = body::stream_steps(&mut encoder, success);
    response(
        success.status,
        "text/event-stream",
        REQUEST_ID_HEADER,
        ctx,
        body::scripted(steps),
    )
}

/// `{"type":"error","error":{"type","message"},"request_id"}` with the type Anthropic uses for the
/// status.
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    let error_type = error
        .error_type
        .as_deref()
        .unwrap_or_else(|| error_type_for_status(error.status));
    let body = HttpErrorBody {
        r#type: "error",
        error: ErrorBody {
            r#type: error_type.to_owned(),
            message: error
                .message
                .clone()
                .unwrap_or_else(|| error_message(error_type, &ctx.model)),
        },
        request_id: &ctx.request_id,
    };
    let res = response(
        error.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body::full(json_bytes(&body)),
    );
    with_retry_after(res, error.retry_after_seconds)
}

/// Anthropic's `error.type` for an HTTP status (reference/wire-formats.md §1.2).
pub(crate) fn error_type_for_status(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        409 => "conflict_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

fn error_message(error_type: &str, model: &str) -> String {
    match error_type {
        "invalid_request_error" => format!("Invalid request for model {model}."),
        "authentication_error" => "invalid x-api-key".to_owned(),
        "billing_error" => "Your credit balance is too low to access the Anthropic API.".to_owned(),
        "permission_error" => {
            "Your API key does not have permission to use the specified resource.".to_owned()
        }
        "not_found_error" => format!("model: {model}"),
        "timeout_error" => "Request timed out".to_owned(),
        "conflict_error" => "Conflict".to_owned(),
        "request_too_large" => "Request exceeds the maximum allowed number of bytes.".to_owned(),
        "rate_limit_error" => {
            "This request would exceed the rate limit for your organization. Please try again \
             later."
                .to_owned()
        }
        "api_error" => "Internal server error".to_owned(),
        "overloaded_error" => "Overloaded".to_owned(),
        other => format!("The request failed with a {other}."),
    }
}

fn message_id(ctx: &RenderContext) -> String {
    short_id("msg_", ctx)
}

fn tool_use_id(ctx: &RenderContext) -> String {
    short_id("toolu_", ctx)
}

fn stop_reason(success: &Success) -> &'static str {
    if success.content_filtered {
        "refusal"
    } else if success.tool_call.is_some() {
        "tool_use"
    } else {
        "end_turn"
    }
}

/// The complete `Message` of a non-streaming answer.
pub(crate) fn message(ctx: &RenderContext, success: &Success) -> MessageBody {
    let block = match &success.tool_call {
        Some(tool) => Block::ToolUse {
            id: tool_use_id(ctx),
            name: tool.name.clone(),
            input: raw_json(&tool.arguments),
        },
        None => Block::Text {
            text: success.reply.clone(),
        },
    };
    MessageBody {
        id: message_id(ctx),
        r#type: "message",
        role: "assistant",
        model: ctx.model.clone(),
        content: vec![block],
        stop_reason: Some(stop_reason(success)),
        stop_sequence: None,
        usage: UsageBody::from(success.usage),
    }
}

/// The events of one streamed message, shared by the SSE and the Bedrock event-stream framings.
pub(crate) struct Events {
    start: MessageBody,
    /// The opening block: empty text, or the tool_use block with `input: {}`.
    block: Block,
    stop_reason: &'static str,
    usage: Usage,
}

impl Events {
    pub(crate) fn new(ctx: &RenderContext, success: &Success) -> Self {
        let block = match &success.tool_call {
            Some(tool) => Block::ToolUse {
                id: tool_use_id(ctx),
                name: tool.name.clone(),
                input: raw_json("{}"),
            },
            None => Block::Text {
                text: String::new(),
            },
        };
        let start = MessageBody {
            id: message_id(ctx),
            r#type: "message",
            role: "assistant",
            model: ctx.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: UsageBody {
                input_tokens: success.usage.prompt_tokens,
                output_tokens: success.usage.completion_tokens.min(1),
            },
        };
        Self {
            start,
            block,
            stop_reason: stop_reason(success),
            usage: success.usage,
        }
    }

    /// `message_start`, `content_block_start`, then `ping` when `ping`.
    pub(crate) fn preamble(&self, ping: bool) -> Vec<StreamEvent> {
        let mut events = vec![
            StreamEvent::MessageStart {
                message: self.start.clone(),
            },
            StreamEvent::ContentBlockStart {
                index: 0,
                content_block: self.block.clone(),
            },
        ];
        if ping {
            events.push(StreamEvent::Ping);
        }
        events
    }

    /// `content_block_delta`: a `text_delta`, or an `input_json_delta` of a tool call.
    pub(crate) fn content(&self, text: &str) -> StreamEvent {
        let delta = match self.block {
            Block::ToolUse { .. } => BlockDelta::InputJsonDelta {
                partial_json: text.to_owned(),
            },
            Block::Text { .. } => BlockDelta::TextDelta {
                text: text.to_owned(),
            },
        };
        StreamEvent::ContentBlockDelta { index: 0, delta }
    }

    /// `content_block_stop`, `message_delta`, `message_stop` (with Bedrock's metrics when given).
    pub(crate) fn finish(&self, metrics: Option<InvocationMetrics>) -> Vec<StreamEvent> {
        vec![
            StreamEvent::ContentBlockStop { index: 0 },
            StreamEvent::MessageDelta {
                delta: MessageDeltaBody {
                    stop_reason: self.stop_reason,
                    stop_sequence: None,
                },
                usage: OutputUsage {
                    input_tokens: self.usage.prompt_tokens,
                    output_tokens: self.usage.completion_tokens,
                },
            },
            StreamEvent::MessageStop {
                invocation_metrics: metrics,
            },
        ]
    }

    /// The in-stream `error` event.
    pub(crate) fn error(error: &StreamError, model: &str) -> StreamEvent {
        let error_type = error
            .error_type
            .as_deref()
            .unwrap_or(DEFAULT_STREAM_ERROR_TYPE);
        StreamEvent::Error {
            error: ErrorBody {
                r#type: error_type.to_owned(),
                message: error
                    .message
                    .clone()
                    .unwrap_or_else(|| error_message(error_type, model)),
            },
        }
    }
}

struct SseEncoder(Events);

fn sse(event: &StreamEvent) -> Bytes {
    sse_event(event.name(), &json_bytes(event))
}

impl StreamEncoder for SseEncoder {
    fn preamble(&mut self) -> Vec<Bytes> {
        self.0.preamble(true).iter().map(sse).collect()
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        vec![sse(&self.0.content(text))]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        self.0.finish(None).iter().map(sse).collect()
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        vec![sse(&Events::error(error, &self.0.start.model))]
    }
}

/// One streamed event; serialized with `type` first.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum StreamEvent {
    MessageStart {
        message: MessageBody,
    },
    ContentBlockStart {
        index: u32,
        content_block: Block,
    },
    Ping,
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: OutputUsage,
    },
    MessageStop {
        #[serde(
            rename = "amazon-bedrock-invocationMetrics",
            skip_serializing_if = "Option::is_none"
        )]
        invocation_metrics: Option<InvocationMetrics>,
    },
    Error {
        error: ErrorBody,
    },
}

impl StreamEvent {
    /// The SSE `event:` name, equal to `type`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::MessageStart { .. } => "message_start",
            Self::ContentBlockStart { .. } => "content_block_start",
            Self::Ping => "ping",
            Self::ContentBlockDelta { .. } => "content_block_delta",
            Self::ContentBlockStop { .. } => "content_block_stop",
            Self::MessageDelta { .. } => "message_delta",
            Self::MessageStop { .. } => "message_stop",
            Self::Error { .. } => "error",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct MessageBody {
    id: String,
    r#type: &'static str,
    role: &'static str,
    model: String,
    content: Vec<Block>,
    stop_reason: Option<&'static str>,
    stop_sequence: Option<()>,
    usage: UsageBody,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Block {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Box<RawValue>,
    },
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum BlockDelta {
    TextDelta { text: String },
    InputJsonDelta { partial_json: String },
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct MessageDeltaBody {
    stop_reason: &'static str,
    stop_sequence: Option<()>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct UsageBody {
    input_tokens: u64,
    output_tokens: u64,
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct OutputUsage {
    input_tokens: u64,
    output_tokens: u64,
}

/// Bedrock's `amazon-bedrock-invocationMetrics` on the final `message_stop`.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InvocationMetrics {
    pub input_token_count: u64,
    pub output_token_count: u64,
    pub invocation_latency: u64,
    pub first_byte_latency: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ErrorBody {
    r#type: String,
    message: String,
}

#[derive(Serialize)]
struct HttpErrorBody<'a> {
    r#type: &'static str,
    error: ErrorBody,
    request_id: &'a str,
}
