//! Bedrock Runtime (restJson1): routing on the raw path, the JSON error of every operation, and the
//! `application/vnd.amazon.eventstream` framing of the streaming operations
//! (reference/wire-formats.md §1.3, §2.4, §4).
//!
//! Two dialect modules share this: [`invoke`] (InvokeModel and InvokeModelWithResponseStream with
//! Anthropic bodies) and [`converse`] (Converse and ConverseStream).

pub mod converse;
pub mod invoke;

use std::time::Duration;

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue as FrameHeaderValue, Message};
use bytes::Bytes;
use http::{HeaderValue, Response};
use serde::Serialize;

use super::{
    json_bytes, percent_decode, response, with_retry_after, Dialect, RenderContext, Route,
};
use crate::body::{self, MockBody};
use crate::engine::{lower_camel, MockError, StreamError, Success};

const REQUEST_ID_HEADER: &str = "x-amzn-requestid";
const ERROR_TYPE_HEADER: &str = "x-amzn-errortype";
pub(crate) const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// `/model/{modelId}/{operation}` on the raw path: the id is one raw segment (a `/` inside it must
/// be sent as `%2F`), percent-decoded afterwards (`%3A` and `:` give the same id).
pub(crate) fn route(raw_path: &str) -> Option<Route> {
    let (raw_id, operation) = raw_path.strip_prefix("/model/")?.split_once('/')?;
    let (dialect, path_stream) = match operation {
        "invoke" => match super::embeddings::bedrock_api(&percent_decode(raw_id)) {
            Some(api) => (Dialect::Embeddings(api), false),
            None => (Dialect::BedrockInvoke, false),
        },
        "invoke-with-response-stream" => (Dialect::BedrockInvoke, true),
        "converse" => (Dialect::BedrockConverse, false),
        "converse-stream" => (Dialect::BedrockConverse, true),
        _ => return None,
    };
    let model_id = percent_decode(raw_id);
    if model_id.is_empty() {
        return None;
    }
    Some(Route {
        dialect,
        endpoint: format!("/model/{{modelId}}/{operation}"),
        model_id: Some(model_id),
        path_stream,
        azure: false,
    })
}

/// A 400 `ValidationException` (a body that is not JSON).
pub(crate) fn validation_error(message: String) -> MockError {
    MockError {
        error_type: Some("ValidationException".to_owned()),
        message: Some(message),
        ..MockError::new(400)
    }
}

/// Non-2xx: `{"message": ...}` with `x-amzn-ErrorType: <ShapeName>` and `x-amzn-RequestId`.
pub fn render_error(ctx: &RenderContext, error: &MockError) -> Response<MockBody> {
    let shape = error
        .error_type
        .as_deref()
        .and_then(known_shape)
        .unwrap_or_else(|| shape_for_status(error.status));
    let body = ErrorBody {
        message: error
            .message
            .clone()
            .unwrap_or_else(|| shape_message(shape).to_owned()),
    };
    let mut res = bedrock_response(
        error.status,
        "application/json",
        ctx,
        body::full(json_bytes(&body)),
    );
    res.headers_mut()
        .insert(ERROR_TYPE_HEADER, HeaderValue::from_static(shape));
    with_retry_after(res, error.retry_after_seconds)
}

/// The exceptions of the Bedrock Runtime model: shape name, and whether it may appear inside an
/// InvokeModelWithResponseStream / ConverseStream stream.
const SHAPES: [(&str, bool, bool); 12] = [
    ("ValidationException", true, true),
    ("AccessDeniedException", false, false),
    ("ResourceNotFoundException", false, false),
    ("ModelTimeoutException", true, false),
    ("ModelErrorException", false, false),
    ("ModelStreamErrorException", true, true),
    ("ThrottlingException", true, true),
    ("ModelNotReadyException", false, false),
    ("ServiceQuotaExceededException", false, false),
    ("InternalServerException", true, true),
    ("ServiceUnavailableException", true, true),
    ("ConflictException", false, false),
];

/// `throttlingException` or `ThrottlingException` → `ThrottlingException`.
fn known_shape(name: &str) -> Option<&'static str> {
    let wanted = lower_camel(name);
    SHAPES
        .iter()
        .map(|(shape, _, _)| *shape)
        .find(|shape| lower_camel(shape) == wanted)
}

/// Bedrock's exception for an HTTP status (reference/wire-formats.md §1.3).
fn shape_for_status(status: u16) -> &'static str {
    match status {
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        409 => "ConflictException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        500..=599 => "InternalServerException",
        _ => "ValidationException",
    }
}

fn shape_message(shape: &str) -> &'static str {
    match shape {
        "ThrottlingException" => "Too many requests, please wait before trying again.",
        "AccessDeniedException" => {
            "You don't have access to the model with the specified model ID."
        }
        "ResourceNotFoundException" => {
            "Could not resolve the foundation model from the provided model identifier."
        }
        "ModelTimeoutException" => {
            "Model has timed out in processing the request. Try your request again."
        }
        "ModelErrorException" => "The model returned an error. Try your request again.",
        "ModelStreamErrorException" => "The model stream failed. Try your request again.",
        "ModelNotReadyException" => "The model is not ready to serve inference requests.",
        "ServiceQuotaExceededException" => {
            "Your request exceeds the service quota for your account."
        }
        "InternalServerException" => {
            "The system encountered an unexpected error during processing. Try your request again."
        }
        "ServiceUnavailableException" => "Bedrock is unable to process your request.",
        "ConflictException" => "The request conflicts with the current state of the resource.",
        _ => "Malformed input request, please reformat your input and try again.",
    }
}

/// The lowerCamel `:exception-type` of an in-stream error: `streamErrorType` when it names a
/// Bedrock exception the operation's stream can carry, else `internalServerException`.
fn stream_exception(error_type: Option<&str>, converse: bool) -> (String, &'static str) {
    let shape = error_type
        .and_then(known_shape)
        .filter(|shape| {
            SHAPES.iter().any(|(s, in_invoke, in_converse)| {
                s == shape && if converse { *in_converse } else { *in_invoke }
            })
        })
        .unwrap_or("InternalServerException");
    (lower_camel(shape), shape_message(shape))
}

/// A response with `x-amzn-RequestId` (a UUID, like AWS's).
pub(crate) fn bedrock_response(
    status: u16,
    content_type: &'static str,
    ctx: &RenderContext,
    body: MockBody,
) -> Response<MockBody> {
    let hex: String = ctx
        .request_id
        .chars()
        .filter(char::is_ascii_hexdigit)
        .chain(std::iter::repeat('0'))
        .take(32)
        .collect();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let ctx = RenderContext {
        request_id: uuid,
        ..ctx.clone()
    };
    response(status, content_type, REQUEST_ID_HEADER, &ctx, body)
}

/// The 200 head of a streaming operation.
pub(crate) fn stream_response(
    ctx: &RenderContext,
    success: &Success,
    body: MockBody,
) -> Response<MockBody> {
    bedrock_response(success.status, EVENT_STREAM, ctx, body)
}

/// One event-stream message with string headers, CRCs included.
fn frame(headers: [(&'static str, String); 3], payload: Vec<u8>) -> Bytes {
    let headers = headers
        .into_iter()
        .map(|(name, value)| Header::new(name, FrameHeaderValue::String(value.into())))
        .collect();
    let mut out = Vec::new();
    match write_message_to(&Message::new_from_parts(headers, payload), &mut out) {
        Ok(()) => Bytes::from(out),
        // Only oversized headers or payloads fail; the mock's are small.
        Err(e) => {
            tracing::error!(error = %e, "mock: cannot frame an event-stream message");
            Bytes::new()
        }
    }
}

/// An `event` message: `:event-type`, `:content-type: application/json`, `:message-type: event`.
pub(crate) fn event_frame(event_type: &'static str, payload: &impl Serialize) -> Bytes {
    frame(
        [
            (":event-type", event_type.to_owned()),
            (":content-type", "application/json".to_owned()),
            (":message-type", "event".to_owned()),
        ],
        json_bytes(payload),
    )
}

/// An `exception` message with the lowerCamel `:exception-type` and `{"message": ...}`.
pub(crate) fn exception_frame(error: &StreamError, converse: bool) -> Bytes {
    let (exception_type, default_message) = stream_exception(error.error_type.as_deref(), converse);
    let message = error.message.as_deref().unwrap_or(default_message);
    frame(
        [
            (":exception-type", exception_type),
            (":content-type", "application/json".to_owned()),
            (":message-type", "exception".to_owned()),
        ],
        json_bytes(&ErrorBody {
            message: message.to_owned(),
        }),
    )
}

/// Latency to report: the time so far plus the scripted gaps still to come.
pub(crate) fn latency_ms(ctx: &RenderContext, success: &Success, stream: bool) -> u64 {
    let gaps = if stream {
        let n = u32::try_from(success.chunks.len().saturating_sub(1)).unwrap_or(u32::MAX);
        let idle = success.idle_gap.map_or(Duration::ZERO, |(_, gap)| gap);
        let total = success.chunk_interval * n + success.first_content_delay + idle;
        u64::try_from(total.as_millis()).unwrap_or(u64::MAX)
    } else {
        0
    };
    ctx.elapsed_ms().saturating_add(gaps)
}

#[derive(Serialize)]
struct ErrorBody {
    message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_decode_the_model_id() {
        let r = route("/model/us.anthropic.claude-haiku-4-5-v1%3A0/invoke")
            .unwrap_or_else(|| panic!("no route"));
        assert_eq!(r.dialect, Dialect::BedrockInvoke);
        assert_eq!(
            r.model_id.as_deref(),
            Some("us.anthropic.claude-haiku-4-5-v1:0")
        );
        assert_eq!(r.endpoint, "/model/{modelId}/invoke");
        let arn = route("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x-v1%3A0/converse-stream");
        let arn = arn.unwrap_or_else(|| panic!("no route"));
        assert_eq!(
            arn.model_id.as_deref(),
            Some("arn:aws:bedrock:us-east-1:1:inference-profile/us.x-v1:0")
        );
        assert!(arn.path_stream);
        assert_eq!(route("/model/a/b/invoke"), None, "a raw / splits the id");
        assert_eq!(route("/model//invoke"), None);
        assert_eq!(route("/model/m/other"), None);
    }

    #[test]
    fn shapes_and_stream_exceptions() {
        assert_eq!(
            known_shape("throttlingException"),
            Some("ThrottlingException")
        );
        assert_eq!(known_shape("overloaded_error"), None);
        assert_eq!(shape_for_status(529), "InternalServerException");
        assert_eq!(
            stream_exception(Some("ThrottlingException"), true).0,
            "throttlingException"
        );
        assert_eq!(
            stream_exception(Some("modelTimeoutException"), false).0,
            "modelTimeoutException"
        );
        assert_eq!(
            stream_exception(Some("modelTimeoutException"), true).0,
            "internalServerException"
        );
        assert_eq!(
            stream_exception(Some("server_error"), false).0,
            "internalServerException"
        );
        assert_eq!(stream_exception(None, false).0, "internalServerException");
    }
}
