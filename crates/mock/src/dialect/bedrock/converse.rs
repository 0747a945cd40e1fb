//! Bedrock Converse (`POST /model/{modelId}/converse`) and ConverseStream
//! (`POST /model/{modelId}/converse-stream`), reference/wire-formats.md §2.4 and §4.4.

use bytes::Bytes;
use http::Response;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::{
    bedrock_response, event_frame, exception_frame, latency_ms, stream_response, validation_error,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::dialect::{
    json_bytes, messages_chars, non_empty_array, raw_json, short_id, RenderContext,
};
use crate::engine::{MockError, RequestFacts, StreamError, Success, ToolCall, Usage};

/// The model id comes from the path, streaming from the operation; the body gives the prompt
/// length (`messages[].content[].text`, `system[].text`) and `toolConfig.tools`.
pub fn parse_request(
    model_id: &str,
    stream: bool,
    body: &[u8],
) -> Result<(RequestFacts, Value), MockError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        validation_error(format!(
            "Malformed input request: {e}, please reformat your input and try again."
        ))
    })?;
    let system = json.get("system").map_or(0, super::super::content_chars);
    let facts = RequestFacts {
        model: model_id.to_owned(),
        stream,
        include_stream_usage: false,
        prompt_chars: messages_chars(&json, "messages") + system,
        has_tools: non_empty_array(json.pointer("/toolConfig/tools")),
    };
    Ok((facts, json))
}

/// `{"output":{"message":{"role":"assistant","content":[{"text":…}]}},"stopReason":"end_turn",
/// "usage":{…},"metrics":{"latencyMs":…}}` (a `toolUse` block and `tool_use` for a tool call).
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let block = match &success.tool_call {
        Some(tool) => ContentBlock::ToolUse(ToolUseBlock {
            tool_use_id: tool_use_id(ctx),
            name: tool.name.clone(),
            input: raw_json(&tool.arguments),
        }),
        None => ContentBlock::Text(success.reply.clone()),
    };
    let out = ConverseOutput {
        output: OutputBody {
            message: MessageBody {
                role: "assistant",
                content: vec![block],
            },
        },
        stop_reason: stop_reason(success),
        usage: UsageBody::from(success.usage),
        metrics: Metrics {
            latency_ms: latency_ms(ctx, success, false),
        },
    };
    let bytes = Bytes::from(json_bytes(&out));
    let body = body::whole_answer(bytes, &success.ending);
    bedrock_response(success.status, "application/json", ctx, body)
}

/// `application/vnd.amazon.eventstream`: `messageStart`, (`contentBlockStart` for a tool call),
/// `contentBlockDelta` per content piece, `contentBlockStop`, `messageStop`, `metadata`.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = FrameEncoder {
        tool: success.tool_call.clone(),
        tool_use_id: tool_use_id(ctx),
        stop_reason: stop_reason(success),
        usage: success.usage,
        latency_ms: latency_ms(ctx, success, true),
    };
    let steps = body::stream_steps(&mut encoder, success);
    stream_response(ctx, success, body::scripted(steps))
}

fn tool_use_id(ctx: &RenderContext) -> String {
    short_id("tooluse_", ctx)
}

fn stop_reason(success: &Success) -> &'static str {
    if success.content_filtered {
        "guardrail_intervened"
    } else if success.tool_call.is_some() {
        "tool_use"
    } else {
        "end_turn"
    }
}

struct FrameEncoder {
    tool: Option<ToolCall>,
    tool_use_id: String,
    stop_reason: &'static str,
    usage: Usage,
    latency_ms: u64,
}

impl StreamEncoder for FrameEncoder {
    fn preamble(&mut self) -> Vec<Bytes> {
        let mut frames = vec![event_frame(
            "messageStart",
            &MessageStart { role: "assistant" },
        )];
        if let Some(tool) = &self.tool {
            frames.push(event_frame(
                "contentBlockStart",
                &ContentBlockStart {
                    content_block_index: 0,
                    start: BlockStart {
                        tool_use: ToolUseStart {
                            tool_use_id: self.tool_use_id.clone(),
                            name: tool.name.clone(),
                        },
                    },
                },
            ));
        }
        frames
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        let delta = if self.tool.is_some() {
            Delta::ToolUse {
                input: text.to_owned(),
            }
        } else {
            Delta::Text(text.to_owned())
        };
        vec![event_frame(
            "contentBlockDelta",
            &ContentBlockDelta {
                content_block_index: 0,
                delta,
            },
        )]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        vec![
            event_frame(
                "contentBlockStop",
                &ContentBlockStop {
                    content_block_index: 0,
                },
            ),
            event_frame(
                "messageStop",
                &MessageStop {
                    stop_reason: self.stop_reason,
                },
            ),
            event_frame(
                "metadata",
                &Metadata {
                    usage: UsageBody::from(self.usage),
                    metrics: Metrics {
                        latency_ms: self.latency_ms,
                    },
                },
            ),
        ]
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        vec![exception_frame(error, true)]
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ConverseOutput {
    output: OutputBody,
    stop_reason: &'static str,
    usage: UsageBody,
    metrics: Metrics,
}

#[derive(Serialize)]
struct OutputBody {
    message: MessageBody,
}

#[derive(Serialize)]
struct MessageBody {
    role: &'static str,
    content: Vec<ContentBlock>,
}

/// `{"text": ...}` or `{"toolUse": {...}}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum ContentBlock {
    Text(String),
    ToolUse(ToolUseBlock),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseBlock {
    tool_use_id: String,
    name: String,
    input: Box<RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageBody {
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
}

impl From<Usage> for UsageBody {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            total_tokens: u.total_tokens(),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Metrics {
    latency_ms: u64,
}

#[derive(Serialize)]
struct MessageStart {
    role: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContentBlockStart {
    content_block_index: u32,
    start: BlockStart,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart {
    tool_use: ToolUseStart,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart {
    tool_use_id: String,
    name: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContentBlockDelta {
    content_block_index: u32,
    delta: Delta,
}

/// `{"text": ...}` or `{"toolUse": {"input": ...}}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Delta {
    Text(String),
    ToolUse { input: String },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContentBlockStop {
    content_block_index: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    stop_reason: &'static str,
}

#[derive(Serialize)]
struct Metadata {
    usage: UsageBody,
    metrics: Metrics,
}
