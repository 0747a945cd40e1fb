//! The error class of an upstream error answer (SPEC §11 "Error classes"): what a provider's
//! status, error type/code and message say went wrong, as one of the five
//! [`ErrorClass`]es that `triggerOn.errors`, `retry.on.errors`, the routing log and CEL read.
//! The mapping table, with the provider sources it was written from, is docs/error-classes.md;
//! `tests/error_classes.rs` checks every row of it.
//!
//! One reader per dialect family (OpenAI chat and Responses share one), each taking the answer
//! as it arrives, plus [`of_parsed`] for an error already taken apart (a stream's error event,
//! `StreamEventClass::Error`, or what `parse_error` returned). The rules are the same in every
//! family except where a family's wire differs (Bedrock names the failure in `x-amzn-ErrorType`,
//! and its bare 503 is always `ServiceUnavailableException`).
//!
//! Bounds: a body over [`MAX_PARSED_BODY_BYTES`] is not parsed (its class is read from the
//! status alone); messages are matched on their first [`MESSAGE_SCAN_BYTES`] bytes, ASCII
//! case-insensitively. Nothing here panics on any input.

use sidetrack_resilience::ErrorClass;

use crate::bedrock::normalize_error_code;
use crate::common::ErrorFields;

/// Error bodies larger than this are not parsed for a class (provider error bodies are well
/// under 1 KiB; the gateway caps what it buffers anyway).
pub const MAX_PARSED_BODY_BYTES: usize = 64 * 1024;

/// How much of an error message is searched for the class patterns.
pub const MESSAGE_SCAN_BYTES: usize = 4 * 1024;

/// The dialect families whose error answers differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// OpenAI Chat Completions and Responses (and OpenAI-compatible providers).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Bedrock Converse and InvokeModel (restJson1 errors and event-stream exceptions).
    Bedrock,
    /// Google Gemini (`{"error":{"code","message","status"}}`).
    Gemini,
}

impl Family {
    pub fn of(dialect: crate::Dialect) -> Family {
        match dialect {
            crate::Dialect::OpenAiChat
            | crate::Dialect::OpenAiResponses
            | crate::Dialect::OpenAiEmbeddings => Family::OpenAi,
            crate::Dialect::AnthropicMessages => Family::Anthropic,
            crate::Dialect::BedrockInvoke | crate::Dialect::BedrockConverse => Family::Bedrock,
            crate::Dialect::Gemini => Family::Gemini,
        }
    }
}

/// An OpenAI (chat or Responses) error answer: `{"error":{"message","type","param","code"}}`.
pub fn openai(status: u16, body: &[u8]) -> Option<ErrorClass> {
    let f = fields(body);
    // Azure OpenAI names a content-filter block in `innererror.code` as well.
    let codes = [
        f.code.as_deref(),
        f.error_type.as_deref(),
        f.detail_code.as_deref(),
        None,
    ];
    classify(Family::OpenAi, status, codes, f.message.as_deref())
}

/// An Anthropic error answer: `{"type":"error","error":{"type","message","details"?}}`.
pub fn anthropic(status: u16, body: &[u8]) -> Option<ErrorClass> {
    let f = fields(body);
    let codes = [
        f.detail_code.as_deref(),
        f.error_type.as_deref(),
        f.code.as_deref(),
        None,
    ];
    classify(Family::Anthropic, status, codes, f.message.as_deref())
}

/// A Bedrock error answer: the shape named by `x-amzn-ErrorType` (`header_type`), else by the
/// body's `code`/`Code`/`__type` (botocore's order, as `bedrock::parse_error` reads them);
/// message from `message`/`Message`. An Anthropic-shaped body (InvokeModel passes Claude's errors through)
/// is read too.
pub fn bedrock(status: u16, header_type: Option<&str>, body: &[u8]) -> Option<ErrorClass> {
    let f = fields(body);
    fn nonempty(c: &Option<String>) -> Option<&str> {
        c.as_deref().filter(|c| !c.is_empty())
    }
    let body_code = nonempty(&f.code)
        .or(nonempty(&f.code_upper))
        .or(nonempty(&f.aws_type));
    let codes = [
        header_type.filter(|h| !h.is_empty()),
        body_code,
        f.detail_code.as_deref(),
        f.error_type.as_deref(),
    ];
    classify(Family::Bedrock, status, codes, f.message.as_deref())
}

/// A Gemini error answer: `{"error":{"code","message","status"}}`; the `status` name
/// (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`) decides first.
pub fn gemini(status: u16, body: &[u8]) -> Option<ErrorClass> {
    let f = fields(body);
    let codes = [f.google_status.as_deref(), f.code.as_deref(), None, None];
    classify(Family::Gemini, status, codes, f.message.as_deref())
}

/// An error already taken apart: the `status`, `error_type` and `message` of a stream's error
/// event (`StreamEventClass::Error`, `StreamEvent::Error`) or of `parse_error`'s answer.
pub fn of_parsed(
    family: Family,
    status: u16,
    error_type: &str,
    message: &str,
) -> Option<ErrorClass> {
    classify(
        family,
        status,
        [Some(error_type), None, None, None],
        Some(message),
    )
}

fn fields(body: &[u8]) -> ErrorFields {
    if body.len() > MAX_PARSED_BODY_BYTES {
        return ErrorFields::default();
    }
    ErrorFields::parse(body)
}

/// What a type or code names on its own. `RateLimited` may still turn out to be a quota (see
/// [`classify`]).
fn class_of_code(code: &str) -> Option<ErrorClass> {
    let code = normalize_error_code(code.trim());
    const TABLE: &[(&str, ErrorClass)] = &[
        ("context_length_exceeded", ErrorClass::ContextLengthExceeded),
        ("content_filter", ErrorClass::ContentFiltered),
        ("content_policy_violation", ErrorClass::ContentFiltered),
        ("ResponsibleAIPolicyViolation", ErrorClass::ContentFiltered),
        ("insufficient_quota", ErrorClass::QuotaExhausted),
        ("billing_error", ErrorClass::QuotaExhausted),
        ("enforced_spend_limit_reached", ErrorClass::QuotaExhausted),
        ("ServiceQuotaExceededException", ErrorClass::QuotaExhausted),
        ("rate_limit_exceeded", ErrorClass::RateLimited),
        ("rate_limit_error", ErrorClass::RateLimited),
        ("requests", ErrorClass::RateLimited),
        ("tokens", ErrorClass::RateLimited),
        ("ThrottlingException", ErrorClass::RateLimited),
        ("overloaded_error", ErrorClass::Overloaded),
        ("overloaded", ErrorClass::Overloaded),
        ("server_is_overloaded", ErrorClass::Overloaded),
        ("ServiceUnavailableException", ErrorClass::Overloaded),
        ("ModelNotReadyException", ErrorClass::Overloaded),
        ("RESOURCE_EXHAUSTED", ErrorClass::RateLimited),
        ("UNAVAILABLE", ErrorClass::Overloaded),
    ];
    TABLE
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(code))
        .map(|(_, class)| *class)
}

const CONTEXT_WORDS: &[&str] = &[
    "context length",
    "context_length",
    "context window",
    "context limit",
    "maximum context",
    "max context",
    "prompt is too long",
    "input is too long",
    "too many input tokens",
    "input token count",
];

/// Words that make a rate-limit answer a quota. Narrow on purpose: real rate-limit messages
/// carry links with "quota" and "billing" in them (Azure's `aka.ms/oai/quotaincrease`, OpenAI's
/// `account/billing` on free-tier rate limits).
const QUOTA_WORDS: &[&str] = &[
    "exceeded your current quota",
    "quota exceeded",
    "credit balance",
    "spend limit",
    "usage limit",
    "per day",
];

/// A 400/403 answer that speaks of billing is a quota too (Anthropic's credit-balance 400 sends
/// the caller to "Plans & Billing").
const BILLING_WORDS: &[&str] = &["billing"];

const CONTENT_WORDS: &[&str] = &[
    "content management policy",
    "content filtering policy",
    "content policy",
    "content filter",
    "safety system",
];

fn any_of(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|n| haystack.contains(n))
}

/// A guardrail that acted (Bedrock), not a guardrail that is merely named (an unknown
/// guardrail id is a plain validation error).
fn guardrail_acted(m: &str) -> bool {
    m.contains("guardrail") && (m.contains("intervened") || m.contains("blocked"))
}

/// The first [`MESSAGE_SCAN_BYTES`] of a message, ASCII-lowercased (cut at a char boundary).
fn scan_prefix(message: &str) -> String {
    let mut end = message.len().min(MESSAGE_SCAN_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_ascii_lowercase()
}

/// The rules of docs/error-classes.md, in order: a type/code that names a class decides (a
/// rate-limit type whose message has a [`QUOTA_WORDS`] entry is `QUOTA_EXHAUSTED`); then the
/// status (402, 429, 529; 503 when the message says overloaded, or from Bedrock); then, for a
/// 400/403/413/422, the message (context length, content filter, guardrail, quota or billing).
/// `codes` are tried in order.
fn classify(
    family: Family,
    status: u16,
    codes: [Option<&str>; 4],
    message: Option<&str>,
) -> Option<ErrorClass> {
    let m = scan_prefix(message.unwrap_or_default());
    let quota_words = any_of(&m, QUOTA_WORDS);
    let rate_or_quota = || {
        if quota_words {
            ErrorClass::QuotaExhausted
        } else {
            ErrorClass::RateLimited
        }
    };
    for code in codes.into_iter().flatten() {
        match class_of_code(code) {
            Some(ErrorClass::RateLimited) => return Some(rate_or_quota()),
            Some(class) => return Some(class),
            None => {}
        }
    }
    match status {
        402 => return Some(ErrorClass::QuotaExhausted),
        429 => return Some(rate_or_quota()),
        529 => return Some(ErrorClass::Overloaded),
        503 if family == Family::Bedrock || m.contains("overloaded") => {
            return Some(ErrorClass::Overloaded)
        }
        400 | 403 | 413 | 422 => {}
        _ => return None,
    }
    if any_of(&m, CONTEXT_WORDS) {
        Some(ErrorClass::ContextLengthExceeded)
    } else if any_of(&m, CONTENT_WORDS) || guardrail_acted(&m) {
        Some(ErrorClass::ContentFiltered)
    } else if quota_words || any_of(&m, BILLING_WORDS) {
        Some(ErrorClass::QuotaExhausted)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_scan_is_bounded_and_safe_on_any_text() {
        // The pattern sits past the scanned prefix: not seen.
        let mut long = "x".repeat(MESSAGE_SCAN_BYTES);
        long.push_str("prompt is too long");
        assert_eq!(
            of_parsed(Family::Anthropic, 400, "invalid_request_error", &long),
            None
        );
        // Multi-byte characters straddling the cut do not panic.
        let wide = "é".repeat(MESSAGE_SCAN_BYTES);
        assert_eq!(of_parsed(Family::OpenAi, 400, "", &wide), None);
        assert_eq!(scan_prefix(&wide).len(), MESSAGE_SCAN_BYTES);
        // Case does not matter.
        assert_eq!(
            of_parsed(
                Family::Bedrock,
                400,
                "ValidationException",
                "INPUT IS TOO LONG"
            ),
            Some(ErrorClass::ContextLengthExceeded)
        );
    }

    #[test]
    fn odd_bodies_never_panic_and_fall_back_to_the_status() {
        let junk: &[&[u8]] = &[
            b"",
            b"\xff\xfe\x00garbage",
            b"{",
            b"null",
            b"[1,2]",
            br#"{"error":7}"#,
            br#"{"error":{"type":["x"],"code":{},"message":1}}"#,
        ];
        for body in junk {
            assert_eq!(openai(429, body), Some(ErrorClass::RateLimited));
            assert_eq!(anthropic(529, body), Some(ErrorClass::Overloaded));
            assert_eq!(bedrock(503, None, body), Some(ErrorClass::Overloaded));
            assert_eq!(openai(400, body), None);
            assert_eq!(bedrock(500, Some("\u{0}#:"), body), None);
        }
    }

    #[test]
    fn an_oversized_body_is_not_parsed() {
        let mut body = br#"{"error":{"type":"invalid_request_error","code":"context_length_exceeded","message":""#.to_vec();
        body.extend(std::iter::repeat_n(b'a', MAX_PARSED_BODY_BYTES));
        body.extend(br#""}}"#);
        assert_eq!(openai(400, &body), None);
        assert_eq!(openai(429, &body), Some(ErrorClass::RateLimited));
    }

    #[test]
    fn a_bare_503_is_overloaded_only_from_bedrock() {
        assert_eq!(openai(503, b""), None);
        assert_eq!(anthropic(503, b""), None);
        assert_eq!(bedrock(503, None, b""), Some(ErrorClass::Overloaded));
    }

    #[test]
    fn other_errors_have_no_class() {
        assert_eq!(openai(401, br#"{"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided"}}"#), None);
        assert_eq!(
            openai(
                500,
                br#"{"error":{"type":"server_error","message":"The server had an error"}}"#
            ),
            None
        );
        assert_eq!(anthropic(400, br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens"}}"#), None);
        assert_eq!(
            bedrock(
                400,
                Some("ValidationException"),
                br#"{"message":"The provided model identifier is invalid."}"#
            ),
            None
        );
        assert_eq!(
            bedrock(
                400,
                Some("ValidationException"),
                br#"{"message":"The guardrail identifier or version is not valid."}"#
            ),
            None
        );
    }
}
