//! OpenAI Chat Completions (`POST /v1/chat/completions`), framed like the real API
//! (reference/wire-formats.md §1.1 errors, §2.1 SSE).
//!
//! Field order of every body is fixed by the structs below, so the bytes are stable.

use bytes::Bytes;
use http::Response;
use serde::Serialize;
use serde_json::Value;

use super::{
    json_bytes, messages_chars, non_empty_array, response, short_id, sse_data, with_retry_after,
    RenderContext,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::engine::{
    MockError, RequestFacts, StreamError, Success, ToolCall, Usage, DEFAULT_STREAM_ERROR_TYPE,
};

pub(crate) const REQUEST_ID_HEADER: &str = "x-request-id";
const SERVICE_TIER: &str = "default";

/// Reads `model`, `stream`, `stream_options.include_usage`, `tools` and the prompt length.
pub fn parse_request(body: &[u8]) -> Result<(RequestFacts, Value), MockError> {
    let (json, model) = parse_json_and_model(body)?;
    let facts = RequestFacts {
        model,
        stream: json.get("stream").and_then(Value::as_bool).unwrap_or(false),
        include_stream_usage: json
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        prompt_chars: messages_chars(&json, "messages"),
        has_tools: non_empty_array(json.get("tools")) || non_empty_array(json.get("functions")),
    };
    Ok((facts, json))
}

/// The body as JSON and its non-empty `model`, or OpenAI's 400 (Chat Completions and Responses).
pub(crate) fn parse_json_and_model(body: &[u8]) -> Result<(Value, String), MockError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        invalid_request(format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you \
             aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but \
             what was sent was not valid JSON.) ({e})"
        ))
    })?;
    let model = match json.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(invalid_request(
                "you must provide a model parameter".to_owned(),
            ))
        }
    };
    Ok((json, model))
}

fn invalid_request(message: String) -> MockError {
    MockError {
        error_type: Some("invalid_request_error".to_owned()),
        message: Some(message),
        ..MockError::new(400)
    }
}

/// `application/json` `chat.completion` object (`message.tool_calls` and `finish_reason:
/// "tool_calls"` for a tool call). `dropAfterChunks` sends the first half of it, then kills the
/// connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let call_id = call_id(ctx);
    let tool_calls = success.tool_call.as_ref().map(|t| {
        [ToolCallBody {
            index: None,
            id: Some(&call_id),
            r#type: Some("function"),
            function: FunctionBody {
                name: Some(&t.name),
                arguments: &t.arguments,
            },
        }]
    });
    let completion = Completion {
        id: &completion_id(ctx),
        object: "chat.completion",
        created: ctx.created,
        model: &ctx.model,
        choices: [Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: tool_calls.is_none().then_some(success.reply.as_str()),
                refusal: None,
                annotations: [],
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_reason(success),
        }],
        usage: UsageBody::from(success.usage),
        system_fingerprint: None,
        service_tier: SERVICE_TIER,
    };
    let bytes = Bytes::from(json_bytes(&completion));
    let body = body::whole_answer(bytes, &success.ending);
    response(
        success.status,
        "application/json",
        REQUEST_ID_HEADER,
        ctx,
        body,
    )
}

/// `text/event-stream` of `chat.completion.chunk` events: the role chunk, one chunk per content
/// piece, the finish chunk, the usage chunk (only with `stream_options.include_usage`), `[DONE]`.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = ChunkEncoder {
        id: completion_id(ctx),
        created: ctx.created,
        model: ctx.model.clone(),
        include_usage: ctx.include_stream_usage,
        usage: success.usage,
        tool_call: success.tool_call.clone(),
        call_id: call_id(ctx),
        finish_reason: finish_reason(success),
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

/// `{"error":{"message","type","param","code"}}` with the type/code OpenAI uses for the status.
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    let (default_type, code, default_message) = error_defaults(error.status, &ctx.model);
    let body = ErrorEnvelope {
        error: ErrorBody {
            message: error.message.as_deref().unwrap_or(&default_message),
            r#type: error.error_type.as_deref().unwrap_or(default_type),
            param: error.param.as_deref(),
            code: match (&error.code, &error.error_type) {
                (Some(c), _) => Some(c),
                (None, Some(_)) => None,
                (None, None) => code,
            },
        },
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

/// `(type, code, message)` of OpenAI's error for `status` (reference/wire-formats.md §1.1).
fn error_defaults(status: u16, model: &str) -> (&'static str, Option<&'static str>, String) {
    match status {
        400 => (
            "invalid_request_error",
            None,
            format!("Invalid request for model `{model}`."),
        ),
        401 => (
            "invalid_request_error",
            Some("invalid_api_key"),
            "Incorrect API key provided.".to_owned(),
        ),
        403 => (
            "invalid_request_error",
            None,
            format!("You are not allowed to use model `{model}`."),
        ),
        404 => (
            "invalid_request_error",
            Some("model_not_found"),
            format!("The model `{model}` does not exist or you do not have access to it."),
        ),
        429 => (
            "requests",
            Some("rate_limit_exceeded"),
            format!(
                "Rate limit reached for {model} on requests per min (RPM). Please try again later."
            ),
        ),
        503 => (
            "server_error",
            Some("server_is_overloaded"),
            "The server is overloaded or not ready yet.".to_owned(),
        ),
        500..=599 => ("server_error", None, stream_error_message("server_error")),
        _ => (
            "invalid_request_error",
            None,
            format!("Request for model `{model}` failed with status {status}."),
        ),
    }
}

pub(crate) fn stream_error_message(error_type: &str) -> String {
    match error_type {
        "server_error" => {
            "The server had an error while processing your request. Sorry about that!".to_owned()
        }
        "overloaded_error" => "Overloaded".to_owned(),
        other => format!("The stream failed with a {other}."),
    }
}

fn completion_id(ctx: &RenderContext) -> String {
    format!("chatcmpl-{}", ctx.unique)
}

fn call_id(ctx: &RenderContext) -> String {
    short_id("call_", ctx)
}

fn finish_reason(success: &Success) -> &'static str {
    if success.content_filtered {
        "content_filter"
    } else if success.tool_call.is_some() {
        "tool_calls"
    } else {
        "stop"
    }
}

struct ChunkEncoder {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    usage: Usage,
    tool_call: Option<ToolCall>,
    call_id: String,
    finish_reason: &'static str,
}

impl ChunkEncoder {
    fn chunk(&self, choices: Vec<ChunkChoice<'_>>, usage: Option<UsageBody>) -> Bytes {
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            service_tier: SERVICE_TIER,
            system_fingerprint: None,
            choices,
            // `"usage": null` on every chunk but the last, only when usage was asked for.
            usage: self.include_usage.then_some(usage),
        };
        sse_data(&json_bytes(&chunk))
    }

    fn delta_chunk(&self, delta: Delta<'_>, finish_reason: Option<&'static str>) -> Bytes {
        self.chunk(
            vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason,
            }],
            None,
        )
    }
}

impl StreamEncoder for ChunkEncoder {
    /// The role chunk; for a tool call it also opens the call (id, name, empty arguments).
    fn preamble(&mut self) -> Vec<Bytes> {
        let delta = match &self.tool_call {
            None => Delta {
                role: Some("assistant"),
                content: Some(Some("")),
                refusal: Some(None),
                tool_calls: None,
            },
            Some(tool) => Delta {
                role: Some("assistant"),
                content: Some(None),
                refusal: Some(None),
                tool_calls: Some([ToolCallBody {
                    index: Some(0),
                    id: Some(&self.call_id),
                    r#type: Some("function"),
                    function: FunctionBody {
                        name: Some(&tool.name),
                        arguments: "",
                    },
                }]),
            },
        };
        vec![self.delta_chunk(delta, None)]
    }

    /// A content piece, or a piece of the tool call's arguments.
    fn content(&mut self, text: &str) -> Vec<Bytes> {
        let delta = if self.tool_call.is_some() {
            Delta {
                tool_calls: Some([ToolCallBody {
                    index: Some(0),
                    id: None,
                    r#type: None,
                    function: FunctionBody {
                        name: None,
                        arguments: text,
                    },
                }]),
                ..Delta::default()
            }
        } else {
            Delta {
                content: Some(Some(text)),
                ..Delta::default()
            }
        };
        vec![self.delta_chunk(delta, None)]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        let mut events = vec![self.delta_chunk(Delta::default(), Some(self.finish_reason))];
        if self.include_usage {
            events.push(self.chunk(Vec::new(), Some(UsageBody::from(self.usage))));
        }
        events.push(Bytes::from_static(b"data: [DONE]\n\n"));
        events
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        let error_type = error
            .error_type
            .as_deref()
            .unwrap_or(DEFAULT_STREAM_ERROR_TYPE);
        let default_message;
        let body = ErrorEnvelope {
            error: ErrorBody {
                message: match &error.message {
                    Some(m) => m,
                    None => {
                        default_message = stream_error_message(error_type);
                        &default_message
                    }
                },
                r#type: error_type,
                param: None,
                code: error.code.as_deref(),
            },
        };
        vec![sse_data(&json_bytes(&body))]
    }
}

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: UsageBody,
    system_fingerprint: Option<&'a str>,
    service_tier: &'static str,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Option<&'a str>,
    refusal: Option<&'a str>,
    annotations: [(); 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallBody<'a>; 1]>,
}

/// One entry of `tool_calls`: complete in a message; in stream deltas `index` is set and `id`,
/// `type`, `name` only in the first.
#[derive(Serialize)]
struct ToolCallBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    r#type: Option<&'static str>,
    function: FunctionBody<'a>,
}

#[derive(Serialize)]
struct FunctionBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    service_tier: &'static str,
    system_fingerprint: Option<&'a str>,
    choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<UsageBody>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallBody<'a>; 1]>,
}

#[derive(Serialize)]
struct UsageBody {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens(),
        }
    }
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    r#type: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}
