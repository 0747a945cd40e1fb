//! Helpers shared by the translating dialect modules: translation errors, JSON and data-URL
//! plumbing, message normalisation, and the dialect-neutral error classification.

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::canonical::{Message, Part, TranslateError};

/// An OpenAI `tool_choice` given as a mode string (chat and Responses spell the modes alike);
/// `dialect` names the caller's format in the error.
pub(crate) fn openai_tool_choice_mode(
    dialect: &str,
    mode: &str,
) -> Result<crate::canonical::ToolChoice, TranslateError> {
    use crate::canonical::ToolChoice;
    Ok(match mode {
        "auto" => ToolChoice::Auto,
        "required" => ToolChoice::Any,
        "none" => ToolChoice::None,
        other => return Err(terr(format!("{dialect} tool_choice `{other}` is unknown"))),
    })
}

pub(crate) fn terr(msg: impl Into<String>) -> TranslateError {
    TranslateError(msg.into())
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(crate) fn concat(parts: Vec<Bytes>) -> Bytes {
    match parts.len() {
        0 => Bytes::new(),
        1 => parts.into_iter().next().unwrap_or_default(),
        _ => Bytes::from(parts.concat()),
    }
}

/// The canonical text of an optional JSON schema: absent or null → an empty object schema.
pub(crate) fn schema_text(raw: Option<&RawValue>) -> String {
    match raw.map(RawValue::get) {
        None | Some("null") => r#"{"type":"object","properties":{}}"#.to_owned(),
        Some(s) => s.to_owned(),
    }
}

/// JSON text checked and kept verbatim (key order matters to models reading schemas).
pub(crate) fn raw_json(text: &str, what: &str) -> Result<Box<RawValue>, TranslateError> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    RawValue::from_string(text.to_owned()).map_err(|e| terr(format!("{what} are not JSON: {e}")))
}

/// Splits `data:<media>;base64,<data>`. Any other URL cannot be translated (the canonical form
/// carries base64 images only).
pub(crate) fn parse_data_url(url: &str) -> Result<(String, String), TranslateError> {
    let not = || {
        let shown: String = url.chars().take(40).collect();
        terr(format!(
            "image URL `{shown}` is not a base64 data: URL; only base64 images can be translated"
        ))
    };
    let rest = url.strip_prefix("data:").ok_or_else(not)?;
    let (meta, data) = rest.split_once(',').ok_or_else(not)?;
    let media = meta.strip_suffix(";base64").ok_or_else(not)?;
    Ok((media.to_owned(), data.to_owned()))
}

pub(crate) fn data_url(media_type: &str, data: &str) -> String {
    format!("data:{media_type};base64,{data}")
}

/// The canonical message list: consecutive turns of one role merged (Anthropic requires
/// alternation and one user turn holds all tool results), empty text dropped from turns that
/// have other content, empty turns dropped.
pub(crate) fn normalize_messages(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages {
        match out.last_mut() {
            Some(last) if last.role == m.role => last.content.extend(m.content),
            _ => out.push(m),
        }
    }
    for m in &mut out {
        if m.content
            .iter()
            .any(|p| !matches!(p, Part::Text(t) if t.is_empty()))
        {
            m.content
                .retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
        }
    }
    out.retain(|m| !m.content.is_empty());
    out
}

/// What kind of failure an error is, whatever dialect named it. Status decides first (SDKs pick
/// the exception class by status); the type decides for in-stream errors and among 5xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    InvalidRequest,
    Authentication,
    Billing,
    Permission,
    NotFound,
    Timeout,
    Conflict,
    TooLarge,
    RateLimit,
    Overloaded,
    Server,
}

/// The more specific of an OpenAI error's `type` and `code`: OpenAI pairs a generic type with a
/// specific code (`server_error` + `server_is_overloaded`, `invalid_request_error` +
/// `invalid_api_key`), so the code wins unless it names nothing more than the type does.
pub(crate) fn specific_error_type<'a>(
    ty: Option<&'a str>,
    code: Option<&'a str>,
) -> Option<&'a str> {
    let ty = ty.filter(|t| !t.is_empty() && *t != "error");
    let code = code.filter(|c| !c.is_empty());
    match (ty, code) {
        (Some(t), Some(c))
            if class_of_type(c) != ErrorClass::Server && class_of_type(c) != class_of_type(t) =>
        {
            Some(c)
        }
        (Some(t), _) => Some(t),
        (None, c) => c,
    }
}

/// The class an error type (or code) names on its own, whatever the status.
fn class_of_type(error_type: &str) -> ErrorClass {
    match error_type {
        "invalid_request_error"
        | "ValidationException"
        | "INVALID_ARGUMENT"
        | "FAILED_PRECONDITION" => ErrorClass::InvalidRequest,
        "authentication_error" | "invalid_api_key" | "UNAUTHENTICATED" => {
            ErrorClass::Authentication
        }
        "PERMISSION_DENIED" => ErrorClass::Permission,
        "NOT_FOUND" => ErrorClass::NotFound,
        "DEADLINE_EXCEEDED" => ErrorClass::Timeout,
        "RESOURCE_EXHAUSTED" => ErrorClass::RateLimit,
        "UNAVAILABLE" => ErrorClass::Overloaded,
        "billing_error" => ErrorClass::Billing,
        "permission_error" | "AccessDeniedException" => ErrorClass::Permission,
        "not_found_error" | "ResourceNotFoundException" => ErrorClass::NotFound,
        "timeout_error" | "ModelTimeoutException" => ErrorClass::Timeout,
        "conflict_error" => ErrorClass::Conflict,
        "request_too_large" => ErrorClass::TooLarge,
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "requests"
        | "tokens"
        | "insufficient_quota"
        | "ThrottlingException" => ErrorClass::RateLimit,
        "overloaded_error" | "overloaded" | "server_is_overloaded" => ErrorClass::Overloaded,
        _ => ErrorClass::Server,
    }
}

pub(crate) fn classify_error(status: u16, error_type: &str) -> ErrorClass {
    let by_type = class_of_type(error_type);
    match status {
        400 | 422 if by_type == ErrorClass::TooLarge => ErrorClass::TooLarge,
        400 | 422 => ErrorClass::InvalidRequest,
        401 => ErrorClass::Authentication,
        402 => ErrorClass::Billing,
        403 => ErrorClass::Permission,
        404 => ErrorClass::NotFound,
        408 | 504 => ErrorClass::Timeout,
        409 => ErrorClass::Conflict,
        413 => ErrorClass::TooLarge,
        429 => ErrorClass::RateLimit,
        529 => ErrorClass::Overloaded,
        500..=599 if by_type == ErrorClass::Overloaded => ErrorClass::Overloaded,
        500..=599 => ErrorClass::Server,
        405..=499 => ErrorClass::InvalidRequest,
        _ => by_type,
    }
}

/// The fields of a provider error body, from any provider's shape: `error.{type, code, message}`
/// (OpenAI, Anthropic; also a top-level object without `error`), Anthropic's
/// `error.details.error_code`, Bedrock's `Code`, `__type` and `message`/`Message`, or `error` as a
/// string.
/// Junk and other shapes give empty fields. [`parse_any_error`] and the error-class reader
/// (`crate::error_class`) both start here.
#[derive(Debug, Default)]
pub(crate) struct ErrorFields {
    pub(crate) error_type: Option<String>,
    pub(crate) code: Option<String>,
    /// Bedrock's `Code` (botocore reads it after `code`).
    pub(crate) code_upper: Option<String>,
    pub(crate) detail_code: Option<String>,
    pub(crate) aws_type: Option<String>,
    /// Google's `error.status` (`RESOURCE_EXHAUSTED`).
    pub(crate) google_status: Option<String>,
    pub(crate) message: Option<String>,
}

impl ErrorFields {
    pub(crate) fn parse(body: &[u8]) -> ErrorFields {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
        let err = match v.get("error") {
            Some(e) if e.is_object() => e,
            _ => &v,
        };
        let text = |x: Option<&serde_json::Value>| x.and_then(|t| t.as_str()).map(str::to_owned);
        ErrorFields {
            error_type: text(err.get("type")),
            code: text(err.get("code")),
            code_upper: text(err.get("Code")),
            // Anthropic's `details.error_code`; Azure OpenAI's `innererror.code`.
            detail_code: text(err.get("details").and_then(|d| d.get("error_code")))
                .or_else(|| text(err.get("innererror").and_then(|d| d.get("code")))),
            aws_type: text(v.get("__type")),
            google_status: text(err.get("status")),
            message: text(err.get("message").or_else(|| err.get("Message")))
                .or_else(|| text(v.get("error"))),
        }
    }

    /// The type the translation tables read: the more specific of `type` and `code`, else
    /// `__type`.
    pub(crate) fn specific_type(&self) -> Option<&str> {
        specific_error_type(self.error_type.as_deref(), self.code.as_deref())
            .or(self.aws_type.as_deref())
    }
}

/// Reads `(type, message)` from any provider error body; unknown shapes get the type this
/// dialect uses for the status and the body text (cut to 300 characters) as message.
pub(crate) fn parse_any_error(
    status: u16,
    body: &[u8],
    default_type: impl Fn(ErrorClass) -> &'static str,
) -> (String, String) {
    let fallback_type = || default_type(classify_error(status, "")).to_owned();
    let fields = ErrorFields::parse(body);
    let message = match fields.message.as_deref() {
        Some(m) => m.to_owned(),
        None => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                format!("upstream error (status {status})")
            } else {
                text.chars().take(300).collect()
            }
        }
    };
    (
        fields
            .specific_type()
            .map_or_else(fallback_type, str::to_owned),
        message,
    )
}
