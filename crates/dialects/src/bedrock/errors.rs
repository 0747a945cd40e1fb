//! Bedrock's error shapes (wire-formats.md §1.3, SPEC §6.3), shared by the Converse and Invoke
//! dialects: restJson1 errors named by `x-amzn-ErrorType`, and lowerCamel exception frames inside
//! event streams.

use bytes::Bytes;
use serde::Deserialize;

use crate::errors::{GatewayErrorKind, RenderedError};

use super::eventstream;

/// The header botocore reads the error code from (it wins over the body).
pub const ERROR_TYPE_HEADER: &str = "x-amzn-ErrorType";

/// Bedrock Runtime's modeled exceptions and their statuses (botocore service-2.json).
const SHAPES: &[(&str, u16)] = &[
    ("ValidationException", 400),
    ("AccessDeniedException", 403),
    ("ResourceNotFoundException", 404),
    ("ModelTimeoutException", 408),
    ("ModelErrorException", 424),
    ("ModelStreamErrorException", 424),
    ("ThrottlingException", 429),
    ("ModelNotReadyException", 429),
    ("ServiceQuotaExceededException", 400),
    ("ConflictException", 400),
    ("InternalServerException", 500),
    ("ServiceUnavailableException", 503),
];

fn rendered(status: u16, shape: &str, message: &str) -> RenderedError {
    RenderedError {
        status,
        content_type: "application/json",
        headers: vec![(ERROR_TYPE_HEADER, shape.to_owned())],
        body: Bytes::from(serde_json::json!({ "message": message }).to_string()),
    }
}

/// A gateway-made error in Bedrock's shape (SPEC §6.3, Bedrock column).
pub fn render_error(kind: GatewayErrorKind, message: &str) -> RenderedError {
    let (status, shape) = match kind {
        GatewayErrorKind::InvalidRequest => (400, "ValidationException"),
        // Bedrock has no 401: a missing or bad credential is 403 AccessDenied.
        GatewayErrorKind::Unauthenticated => (403, "AccessDeniedException"),
        GatewayErrorKind::PermissionDenied => (403, "AccessDeniedException"),
        GatewayErrorKind::NotFound => (404, "ResourceNotFoundException"),
        GatewayErrorKind::TooLarge => (400, "ValidationException"),
        GatewayErrorKind::Unprocessable => (422, "ValidationException"),
        GatewayErrorKind::RequestTimeout => (408, "RequestTimeoutException"),
        GatewayErrorKind::RateLimited => (429, "ThrottlingException"),
        GatewayErrorKind::BadGateway => (503, "ServiceUnavailableException"),
        GatewayErrorKind::GatewayTimeout => (408, "ModelTimeoutException"),
        GatewayErrorKind::Unavailable => (503, "ServiceUnavailableException"),
    };
    rendered(status, shape, message)
}

/// The frame that ends a committed event stream after an upstream failure (SPEC §5.6).
pub fn render_stream_error(message: &str) -> Bytes {
    eventstream::exception_frame("modelStreamErrorException", message)
}

/// botocore's normalisation of an error code: `com.amazon.bedrock#ValidationException:http://…`
/// becomes `ValidationException`.
pub fn normalize_error_code(raw: &str) -> &str {
    let before_colon = raw.split(':').next().unwrap_or(raw);
    before_colon.rsplit('#').next().unwrap_or(before_colon)
}

/// The error code and message of a Bedrock error response, by botocore's rule: the
/// `x-amzn-ErrorType` header first, then body `code`/`Code`, then `__type`, else the status as
/// text; message from `message`/`Message`.
pub fn parse_error(status: u16, header_error_type: Option<&str>, body: &[u8]) -> (String, String) {
    #[derive(Deserialize, Default)]
    struct Body {
        code: Option<serde_json::Value>,
        #[serde(rename = "Code")]
        code_upper: Option<serde_json::Value>,
        #[serde(rename = "__type")]
        type_: Option<serde_json::Value>,
        message: Option<serde_json::Value>,
        #[serde(rename = "Message")]
        message_upper: Option<serde_json::Value>,
    }
    let parsed: Body = serde_json::from_slice(body).unwrap_or_default();
    let as_str = |v: &Option<serde_json::Value>| -> Option<String> {
        v.as_ref()
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let code = header_error_type
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .or_else(|| as_str(&parsed.code))
        .or_else(|| as_str(&parsed.code_upper))
        .or_else(|| as_str(&parsed.type_))
        .map(|c| normalize_error_code(&c).to_owned())
        .unwrap_or_else(|| status.to_string());
    let message = as_str(&parsed.message)
        .or_else(|| as_str(&parsed.message_upper))
        .unwrap_or_default();
    (code, message)
}

/// The Bedrock shape for an error type of any dialect (or a Bedrock shape name, in either case),
/// falling back to the status.
pub fn shape_for(status: u16, error_type: &str) -> &'static str {
    let code = normalize_error_code(error_type);
    if let Some((shape, _)) = SHAPES.iter().find(|(s, _)| s.eq_ignore_ascii_case(code)) {
        return shape;
    }
    match status {
        429 => "ThrottlingException",
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 | 504 => "ModelTimeoutException",
        424 => "ModelErrorException",
        502 | 503 | 529 => "ServiceUnavailableException",
        400..=499 => "ValidationException",
        _ => "InternalServerException",
    }
}

/// Where Bedrock's own status for a situation differs from the upstream's (SPEC §6.3).
fn bedrock_status(status: u16) -> u16 {
    match status {
        401 => 403,
        413 => 400,
        502 | 529 => 503,
        504 => 408,
        s => s,
    }
}

/// An upstream error of any dialect re-shaped for a Bedrock caller: status preserved (except
/// where Bedrock's differs: 401→403, 413→400, 502/529→503, 504→408), `x-amzn-ErrorType` set to
/// the mapped shape name, body `{"message":…}`.
pub fn render_upstream_error(status: u16, error_type: &str, message: &str) -> RenderedError {
    rendered(
        bedrock_status(status),
        shape_for(status, error_type),
        message,
    )
}

/// Which exception members a stream may carry: ConverseStream lacks `modelTimeoutException`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Converse,
    Invoke,
}

/// The lowerCamel exception member for an in-stream error of any dialect.
pub(crate) fn exception_member(kind: StreamKind, status: u16, error_type: &str) -> &'static str {
    match shape_for(status, error_type) {
        "ThrottlingException" => "throttlingException",
        "ValidationException" => "validationException",
        "InternalServerException" => "internalServerException",
        "ServiceUnavailableException" => "serviceUnavailableException",
        "ModelTimeoutException" if kind == StreamKind::Invoke => "modelTimeoutException",
        _ => "modelStreamErrorException",
    }
}

/// The status an exception frame's member stands for (classifies a pre-commit error frame).
pub fn exception_status(exception_type: &str) -> u16 {
    match normalize_error_code(exception_type)
        .to_ascii_lowercase()
        .as_str()
    {
        "throttlingexception" | "modelnotreadyexception" => 429,
        "modelstreamerrorexception" | "modelerrorexception" => 424,
        "internalserverexception" => 500,
        "serviceunavailableexception" => 503,
        "validationexception" | "servicequotaexceededexception" => 400,
        "modeltimeoutexception" => 408,
        "accessdeniedexception" => 403,
        "resourcenotfoundexception" => 404,
        _ => 500,
    }
}

/// The canonical error event for a decoded `exception` or `error` frame.
pub(crate) fn frame_error(frame: &eventstream::Frame) -> crate::canonical::StreamEvent {
    #[derive(Deserialize)]
    struct Payload {
        message: Option<String>,
        #[serde(rename = "Message")]
        message_upper: Option<String>,
    }
    if frame.message_type == "error" {
        let code = frame.error_code.clone().unwrap_or_default();
        return crate::canonical::StreamEvent::Error {
            status: exception_status(&code),
            error_type: code,
            message: frame.error_message.clone().unwrap_or_default(),
        };
    }
    let error_type = frame.exception_type.clone().unwrap_or_default();
    let message = serde_json::from_slice::<Payload>(&frame.payload)
        .ok()
        .and_then(|p| p.message.or(p.message_upper))
        .unwrap_or_default();
    crate::canonical::StreamEvent::Error {
        status: exception_status(&error_type),
        error_type,
        message,
    }
}

/// The canonical error event for a stream the gateway could not decode (the provider sent bytes
/// that are not a valid event stream): a bad gateway.
pub(crate) fn decode_failure(e: &eventstream::DecodeError) -> crate::canonical::StreamEvent {
    crate::canonical::StreamEvent::Error {
        status: 502,
        error_type: "eventStreamDecodeError".into(),
        message: e.to_string(),
    }
}
