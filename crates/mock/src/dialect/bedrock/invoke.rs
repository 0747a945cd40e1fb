//! Bedrock InvokeModel (`POST /model/{modelId}/invoke`) and InvokeModelWithResponseStream
//! (`POST /model/{modelId}/invoke-with-response-stream`) with Anthropic-on-Bedrock bodies
//! (reference/wire-formats.md §4.3): the answer is an Anthropic `Message`; the stream wraps each
//! Anthropic stream event as a `chunk` event `{"bytes":"<base64 of the event JSON>"}`, and the final
//! `message_stop` carries `amazon-bedrock-invocationMetrics`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Response};
use serde::Serialize;
use serde_json::Value;

use super::{
    bedrock_response, event_frame, exception_frame, latency_ms, stream_response, validation_error,
};
use crate::body::{self, MockBody, StreamEncoder};
use crate::dialect::anthropic::{self, Events, InvocationMetrics, StreamEvent};
use crate::dialect::{json_bytes, non_empty_array, RenderContext};
use crate::engine::{MockError, RequestFacts, StreamError, Success};

/// The model id comes from the path, streaming from the operation; the body gives the prompt
/// length and `tools`. Any JSON body is accepted (no `anthropic_version` check).
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
    let facts = RequestFacts {
        model: model_id.to_owned(),
        stream,
        include_stream_usage: false,
        prompt_chars: anthropic::prompt_chars(&json),
        has_tools: non_empty_array(json.get("tools")),
    };
    Ok((facts, json))
}

/// `application/json` Anthropic `Message`, with the `x-amzn-bedrock-*-token-count` and
/// `-invocation-latency` headers. `dropAfterChunks` sends the first half, then kills the connection.
pub fn render_success(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let bytes = Bytes::from(json_bytes(&anthropic::message(ctx, success)));
    let body = body::whole_answer(bytes, &success.ending);
    let mut res = bedrock_response(success.status, "application/json", ctx, body);
    let headers = res.headers_mut();
    for (name, value) in [
        (
            "x-amzn-bedrock-input-token-count",
            success.usage.prompt_tokens,
        ),
        (
            "x-amzn-bedrock-output-token-count",
            success.usage.completion_tokens,
        ),
        (
            "x-amzn-bedrock-invocation-latency",
            latency_ms(ctx, success, false),
        ),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    res
}

/// `application/vnd.amazon.eventstream` of `chunk` events (`message_start`, `content_block_start`,
/// `content_block_delta` per content piece, `content_block_stop`, `message_delta`, `message_stop`),
/// header `x-amzn-bedrock-content-type: application/json`.
pub fn render_stream(ctx: &RenderContext, success: &Success) -> Response<MockBody> {
    let mut encoder = ChunkEncoder {
        events: Events::new(ctx, success),
        metrics: InvocationMetrics {
            input_token_count: success.usage.prompt_tokens,
            output_token_count: success.usage.completion_tokens,
            invocation_latency: latency_ms(ctx, success, true),
            first_byte_latency: ctx.elapsed_ms(),
        },
    };
    let steps = body::stream_steps(&mut encoder, success);
    let mut res = stream_response(ctx, success, body::scripted(steps));
    res.headers_mut().insert(
        "x-amzn-bedrock-content-type",
        HeaderValue::from_static("application/json"),
    );
    res
}

struct ChunkEncoder {
    events: Events,
    metrics: InvocationMetrics,
}

/// `{"bytes":"<base64>"}` of one Anthropic event, as a `chunk` event message.
fn chunk(event: &StreamEvent) -> Bytes {
    event_frame(
        "chunk",
        &PayloadPart {
            bytes: STANDARD.encode(json_bytes(event)),
        },
    )
}

impl StreamEncoder for ChunkEncoder {
    /// Bedrock sends no `ping`.
    fn preamble(&mut self) -> Vec<Bytes> {
        self.events.preamble(false).iter().map(chunk).collect()
    }

    fn content(&mut self, text: &str) -> Vec<Bytes> {
        vec![chunk(&self.events.content(text))]
    }

    fn finish(&mut self) -> Vec<Bytes> {
        self.events
            .finish(Some(self.metrics))
            .iter()
            .map(chunk)
            .collect()
    }

    fn error(&mut self, error: &StreamError) -> Vec<Bytes> {
        vec![exception_frame(error, false)]
    }
}

#[derive(Serialize)]
struct PayloadPart {
    bytes: String,
}
