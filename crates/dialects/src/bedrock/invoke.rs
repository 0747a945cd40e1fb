//! Bedrock InvokeModel (`POST /model/{modelId}/invoke`) and InvokeModelWithResponseStream
//! (`/invoke-with-response-stream`) with the Anthropic-on-Bedrock body (wire-formats.md §4.3):
//! the Anthropic Messages JSON without `model`/`stream`, plus `"anthropic_version"`.
//!
//! Only that body is translated. Other model families' native InvokeModel bodies (Titan, Llama,
//! Mistral, Nova, …) are not: they are passed through byte-for-byte when both the caller and the
//! destination are Bedrock, and any translation of them fails with a [`TranslateError`] (so the
//! destination is ineligible).
//!
//! The stream is the event stream of [`super::eventstream`]: each Anthropic SSE event's JSON
//! travels base64-encoded as a `chunk` event, `{"bytes":"<base64>"}`, and the final
//! `message_stop` carries `amazon-bedrock-invocationMetrics`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::anthropic_messages;
use crate::canonical::{ChatRequest, ChatResponse, StreamEvent, TranslateError};
use crate::errors::{GatewayErrorKind, RenderedError};
use crate::request::ParsedRequest;
use crate::sse::SseDecoder;
use crate::Usage;

use super::errors::{self as bedrock_errors, StreamKind};
use super::eventstream::{self, FrameDecoder};

pub use super::errors::{parse_error, render_upstream_error};

/// The `anthropic_version` Bedrock documents for Anthropic bodies (and anthropic-python 0.x sends).
pub const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// Response header carrying the model output's content type (botocore's `contentType`).
pub const BEDROCK_CONTENT_TYPE_HEADER: &str = "X-Amzn-Bedrock-Content-Type";

/// The path (after the base URL) for `model_id`; the id is percent-encoded as botocore does.
pub fn path(model_id: &str, stream: bool) -> String {
    let op = if stream {
        "invoke-with-response-stream"
    } else {
        "invoke"
    };
    format!("/model/{}/{op}", super::encode_model_id(model_id))
}

/// The canonical form of an InvokeModel caller request with an Anthropic body. `anthropic_version`
/// and `anthropic_beta` are dropped (the canonical form has no place for them). A body that is not
/// in the Anthropic Messages format (no `messages` array) cannot be translated.
pub fn to_canonical(req: &ParsedRequest) -> Result<ChatRequest, TranslateError> {
    let top: BTreeMap<Cow<'_, str>, &RawValue> = serde_json::from_slice(req.body())
        .map_err(|e| TranslateError(format!("bedrock-invoke body: {e}")))?;
    if !top
        .get("messages")
        .is_some_and(|m| m.get().trim_start().starts_with('['))
    {
        return Err(TranslateError(
            "bedrock-invoke body is not the Anthropic Messages format; other model families' \
             bodies are only passed through to bedrock destinations"
                .into(),
        ));
    }
    anthropic_messages::to_canonical(req)
}

/// The InvokeModel body for an Anthropic model: no `model` (it goes in the path, see [`path`]),
/// no `stream` (the path decides), `"anthropic_version":"bedrock-2023-05-31"`.
pub fn request_body(req: &ChatRequest) -> Result<Bytes, TranslateError> {
    anthropic_messages::invoke_body(req, ANTHROPIC_VERSION)
}

/// An InvokeModel response (an Anthropic `Message`) in canonical form.
pub fn parse_response(body: &[u8]) -> Result<ChatResponse, TranslateError> {
    anthropic_messages::parse_response(body)
}

/// A canonical response as an InvokeModel (Anthropic `Message`) body.
pub fn render_response(resp: &ChatResponse) -> Bytes {
    anthropic_messages::render_response(resp)
}

/// Usage of a non-streamed InvokeModel response body.
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    anthropic_messages::response_usage(body)
}

/// InvokeModel states a response's token counts in these headers as well as in its body
/// (wire-formats.md, InvokeModel); botocore shows them in `ResponseMetadata.HTTPHeaders`.
pub const INPUT_TOKEN_COUNT_HEADER: &str = "x-amzn-bedrock-input-token-count";
pub const OUTPUT_TOKEN_COUNT_HEADER: &str = "x-amzn-bedrock-output-token-count";

/// The token-count headers of a non-streamed InvokeModel response with `usage`.
pub fn usage_headers(usage: Usage) -> [(&'static str, u64); 2] {
    [
        (INPUT_TOKEN_COUNT_HEADER, usage.input_tokens),
        (OUTPUT_TOKEN_COUNT_HEADER, usage.output_tokens),
    ]
}

/// A gateway-made error in Bedrock's shape (SPEC §6.3).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    bedrock_errors::render_error(kind, message)
}

/// The exception frame (`modelStreamErrorException`) that ends a committed response stream.
pub fn render_stream_error(message: &str) -> Bytes {
    bedrock_errors::render_stream_error(message)
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    bytes: Cow<'a, str>,
}

/// InvokeModelWithResponseStream bytes → canonical events: each `chunk` is base64-decoded and
/// read as the Anthropic stream event it carries; exception frames become `Error` with the status
/// the exception stands for; unknown event types and fields (the `p` padding) are ignored. A
/// stream that cannot be decoded yields one `Error` (status 502) and nothing after it.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    frames: FrameDecoder,
    inner: anthropic_messages::StreamDecoder,
    failed: bool,
}

impl StreamDecoder {
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Bounds one upstream frame (SPEC §14 `maxStreamEventBytes`).
    pub fn set_max_event_bytes(&mut self, n: usize) {
        self.frames.set_limit(n);
    }

    /// The stream could not be decoded (or broke its bound); nothing more is decoded.
    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        if self.failed {
            return Vec::new();
        }
        let mut out = Vec::new();
        let frames = match self.frames.push(bytes) {
            Ok(frames) => frames,
            Err(e) => {
                self.failed = true;
                out.push(bedrock_errors::decode_failure(&e));
                return out;
            }
        };
        for f in &frames {
            match f.message_type.as_str() {
                "exception" | "error" => out.push(bedrock_errors::frame_error(f)),
                "event" if f.event_type.as_deref() == Some("chunk") => match chunk_json(&f.payload)
                {
                    Ok(data) => out.extend(self.inner.push_event(&data)),
                    Err(message) => {
                        self.failed = true;
                        out.push(StreamEvent::Error {
                            status: 502,
                            error_type: "malformedEvent".into(),
                            message,
                        });
                        return out;
                    }
                },
                _ => {} // unknown event types are skipped, as botocore does
            }
        }
        if let Some(e) = self.frames.error() {
            self.failed = true;
            out.push(bedrock_errors::decode_failure(e));
        }
        out
    }
}

/// The model JSON inside a `chunk` payload `{"bytes":"<base64>"}`.
fn chunk_json(payload: &[u8]) -> Result<String, String> {
    let chunk: Chunk<'_> =
        serde_json::from_slice(payload).map_err(|e| format!("chunk payload: {e}"))?;
    let raw = BASE64
        .decode(chunk.bytes.as_bytes())
        .map_err(|e| format!("chunk bytes are not base64: {e}"))?;
    String::from_utf8(raw).map_err(|_| "chunk bytes are not UTF-8".to_owned())
}

/// Canonical events → InvokeModelWithResponseStream frames: the Anthropic stream events (from
/// [`anthropic_messages::StreamEncoder`], without `ping`) each wrapped as a `chunk` frame; the
/// final `message_stop` gets `amazon-bedrock-invocationMetrics`. Errors become exception frames
/// with the matching member (`throttlingException`, `modelTimeoutException`, …).
#[derive(Debug)]
pub struct StreamEncoder {
    inner: anthropic_messages::StreamEncoder,
    sse: SseDecoder,
    usage: Usage,
    invocation_latency_ms: u64,
    first_byte_latency_ms: u64,
    finished: bool,
}

impl StreamEncoder {
    pub fn new(id: &str, model: &str) -> StreamEncoder {
        StreamEncoder {
            inner: anthropic_messages::StreamEncoder::new(id, model),
            // It reads only the gateway's own rendering of events already bounded upstream.
            sse: SseDecoder::with_limit(usize::MAX),
            usage: Usage::default(),
            invocation_latency_ms: 0,
            first_byte_latency_ms: 0,
            finished: false,
        }
    }

    /// Latencies reported in `amazon-bedrock-invocationMetrics` (0 unless set; this crate has no
    /// clock).
    pub fn set_latency(&mut self, invocation_latency_ms: u64, first_byte_latency_ms: u64) {
        self.invocation_latency_ms = invocation_latency_ms;
        self.first_byte_latency_ms = first_byte_latency_ms;
    }

    pub fn encode(&mut self, event: &StreamEvent) -> Bytes {
        if self.finished {
            return Bytes::new();
        }
        if let StreamEvent::Error {
            status,
            error_type,
            message,
        } = event
        {
            self.finished = true;
            return eventstream::exception_frame(
                bedrock_errors::exception_member(StreamKind::Invoke, *status, error_type),
                message,
            );
        }
        self.sse.push(&self.inner.encode(event));
        let mut out = BytesMut::new();
        while let Some(ev) = self.sse.next_event() {
            if ev.event.as_deref() == Some("ping") {
                continue; // Bedrock does not relay pings
            }
            let payload = match ev.event.as_deref() {
                Some("message_start") | Some("message_delta") => {
                    self.track_usage(&ev.data);
                    ev.data
                }
                Some("message_stop") => {
                    self.finished = true;
                    self.with_metrics(&ev.data)
                }
                _ => ev.data,
            };
            let chunk = json!({ "bytes": BASE64.encode(payload.as_bytes()) }).to_string();
            out.extend_from_slice(&eventstream::event_frame("chunk", chunk.as_bytes()));
        }
        out.freeze()
    }

    fn track_usage(&mut self, data: &str) {
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return;
        };
        let usage = if v["type"] == "message_start" {
            &v["message"]["usage"]
        } else {
            &v["usage"]
        };
        if let Some(n) = usage["input_tokens"].as_u64() {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage["output_tokens"].as_u64() {
            self.usage.output_tokens = n;
        }
    }

    fn with_metrics(&self, data: &str) -> String {
        let mut v: Value = serde_json::from_str(data)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({"type": "message_stop"}));
        v["amazon-bedrock-invocationMetrics"] = json!({
            "inputTokenCount": self.usage.input_tokens,
            "outputTokenCount": self.usage.output_tokens,
            "invocationLatency": self.invocation_latency_ms,
            "firstByteLatency": self.first_byte_latency_ms,
        });
        v.to_string()
    }
}
