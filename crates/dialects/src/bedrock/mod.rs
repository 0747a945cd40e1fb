//! AWS Bedrock Runtime as caller dialects and as the provider format (SPEC §3, docs/bedrock.md).
//!
//! - [`converse`]: `/model/{modelId}/converse` and `/converse-stream` (the Converse API).
//! - [`invoke`]: `/model/{modelId}/invoke` and `/invoke-with-response-stream` with the
//!   Anthropic-on-Bedrock body (wire-formats.md §4.3).
//! - [`eventstream`]: the binary `application/vnd.amazon.eventstream` framing both streams use.
//!
//! Bedrock requests carry the model in the path, not the body, and the path (not a `stream`
//! flag) says whether the answer streams; [`parse_request`] takes both from the router.

pub mod converse;
pub mod errors;
pub mod eventstream;
pub mod invoke;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::request::{parse_top, Features, ParseError, ParsedRequest};
use crate::Dialect;

pub use errors::{normalize_error_code, parse_error, render_upstream_error, ERROR_TYPE_HEADER};
pub use eventstream::CONTENT_TYPE as EVENT_STREAM_CONTENT_TYPE;

/// Parses a Bedrock caller body. `model_id` is the decoded `{modelId}` path capture (see
/// [`decode_model_id`]); `stream` is true for `/invoke-with-response-stream` and
/// `/converse-stream`; it is at most [`MAX_MODEL_NAME_BYTES`] long (SPEC §14; Bedrock's own limit
/// is 2048, but model ids and inference profile ARNs fit well within 256). The body must be a JSON object; it is kept byte-for-byte, and same-dialect
/// forwarding sends [`ParsedRequest::body`] with the model in the path. A top-level key that
/// repeats is refused, as in every dialect.
pub fn parse_request(
    dialect: Dialect,
    model_id: &str,
    body: Bytes,
    stream: bool,
) -> Result<ParsedRequest, ParseError> {
    if model_id.trim().is_empty() {
        return Err(ParseError::MissingModel);
    }
    crate::request::check_model_name(model_id)?;
    let (_, top) = parse_top(&body)?;
    let present = |raw: Option<&RawValue>| raw.is_some_and(|r| !matches!(r.get(), "null" | "[]"));
    let tools = match dialect {
        Dialect::BedrockConverse => top
            .tool_config
            .is_some_and(|raw| raw.get().contains("\"toolSpec\"")),
        _ => present(top.tools),
    };
    // Converse has no portable structured-output field; the Anthropic body's is `output_format`.
    let json_schema = dialect == Dialect::BedrockInvoke && present(top.output_format);
    // A guardrail in the body travels only with this very format (SPEC §11).
    let guardrail = top
        .guardrail_config
        .is_some_and(|raw| raw.get() != "null")
        .then_some(dialect);
    let features = Features {
        tools,
        json_schema,
        estimated_prompt_tokens: (body.len() as u64) / 4,
        guardrail,
        base64_embeddings: false,
    };
    Ok(ParsedRequest::with_path_model(
        dialect,
        model_id.to_owned(),
        stream,
        features,
        body,
    ))
}

/// Percent-decodes a raw `{modelId}` path segment (`%3A` → `:`, `%2F` → `/`). Route on the raw
/// path first so `%2F` stays inside one segment. `None` for a bad escape or non-UTF-8 result.
pub fn decode_model_id(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hi = (hex[0] as char).to_digit(16)?;
            let lo = (hex[1] as char).to_digit(16)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Percent-encodes a model id for a path segment sent to AWS: everything but the RFC 3986
/// unreserved characters (`A-Z a-z 0-9 - . _ ~`), as botocore does (`:` → `%3A`, `/` → `%2F`).
pub fn encode_model_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len() + 8);
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::MAX_MODEL_NAME_BYTES;

    #[test]
    fn model_ids_decode_and_encode_like_botocore() {
        let arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0";
        let encoded = encode_model_id(arn);
        assert_eq!(
            encoded,
            "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-haiku-20241022-v1%3A0"
        );
        assert_eq!(decode_model_id(&encoded).as_deref(), Some(arn));
        assert_eq!(
            decode_model_id("us.anthropic.claude-v1:0").as_deref(),
            Some("us.anthropic.claude-v1:0")
        );
        assert_eq!(decode_model_id("a%3a0").as_deref(), Some("a:0"));
        assert_eq!(decode_model_id("bad%2"), None);
        assert_eq!(decode_model_id("bad%zz"), None);
        assert_eq!(decode_model_id("%FF"), None);
    }

    #[test]
    fn parse_request_takes_model_and_stream_from_the_path() {
        let body = Bytes::from_static(br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"f","inputSchema":{"json":{}}}}]}}"#);
        let p = parse_request(
            Dialect::BedrockConverse,
            "amazon.nova-lite-v1:0",
            body.clone(),
            true,
        )
        .unwrap();
        assert_eq!(p.model, "amazon.nova-lite-v1:0");
        assert!(p.stream);
        assert!(p.features.tools);
        assert_eq!(p.body(), &body);
        assert_eq!(
            parse_request(Dialect::BedrockConverse, "", body, false).unwrap_err(),
            ParseError::MissingModel
        );
        assert_eq!(
            parse_request(
                Dialect::BedrockInvoke,
                "m",
                Bytes::from_static(b"[]"),
                false
            )
            .unwrap_err(),
            ParseError::NotAnObject
        );
    }

    #[test]
    fn a_long_model_id_or_a_repeated_key_is_refused() {
        let body = Bytes::from_static(br#"{"messages":[]}"#);
        let id = "m".repeat(MAX_MODEL_NAME_BYTES);
        assert!(parse_request(Dialect::BedrockConverse, &id, body.clone(), false).is_ok());
        let id = "m".repeat(MAX_MODEL_NAME_BYTES + 1);
        assert_eq!(
            parse_request(Dialect::BedrockConverse, &id, body, false).unwrap_err(),
            ParseError::ModelNameTooLong
        );
        let twice = Bytes::from_static(br#"{"messages":[],"system":[],"messages":[]}"#);
        assert_eq!(
            parse_request(Dialect::BedrockConverse, "m", twice, false).unwrap_err(),
            ParseError::DuplicateKey("messages".into())
        );
        let twice = Bytes::from_static(br#"{"tools":[{"name":"f"}],"tools":null}"#);
        assert_eq!(
            parse_request(Dialect::BedrockInvoke, "m", twice, false).unwrap_err(),
            ParseError::DuplicateKey("tools".into())
        );
    }

    #[test]
    fn a_guardrail_in_the_body_or_the_headers_is_noted_with_the_format_that_carries_it() {
        let with = Bytes::from_static(
            br#"{"messages":[],"guardrailConfig":{"guardrailIdentifier":"gr-1","guardrailVersion":"1"}}"#,
        );
        let p = parse_request(Dialect::BedrockConverse, "m", with.clone(), false).unwrap();
        assert_eq!(p.features.guardrail, Some(Dialect::BedrockConverse));
        assert_eq!(p.body(), &with, "kept byte-for-byte");
        let null = Bytes::from_static(br#"{"messages":[],"guardrailConfig":null}"#);
        let p = parse_request(Dialect::BedrockConverse, "m", null, false).unwrap();
        assert_eq!(p.features.guardrail, None);
        let twice = Bytes::from_static(br#"{"guardrailConfig":{},"guardrailConfig":null}"#);
        assert_eq!(
            parse_request(Dialect::BedrockConverse, "m", twice, false).unwrap_err(),
            ParseError::DuplicateKey("guardrailConfig".into())
        );

        let plain = Bytes::from_static(br#"{"messages":[]}"#);
        let mut p = parse_request(Dialect::BedrockInvoke, "m", plain.clone(), false).unwrap();
        p.note_guardrail_headers(["content-type", "x-amzn-bedrock-trace"].into_iter());
        assert_eq!(
            p.features.guardrail, None,
            "the trace switch alone is no guardrail"
        );
        p.note_guardrail_headers(["X-Amzn-Bedrock-GuardrailIdentifier"].into_iter());
        assert_eq!(p.features.guardrail, Some(Dialect::BedrockInvoke));
        let mut p = parse_request(Dialect::BedrockConverse, "m", plain, false).unwrap();
        p.note_guardrail_headers(["x-amzn-bedrock-guardrailversion"].into_iter());
        assert_eq!(p.features.guardrail, Some(Dialect::BedrockConverse));

        // Another dialect cannot pass a Bedrock guardrail through: it names InvokeModel, a format
        // that dialect is never sent in, so no destination can take it.
        let mut p = crate::ParsedRequest::parse_json_top(
            Dialect::OpenAiChat,
            Bytes::from_static(br#"{"model":"m","messages":[],"guardrailConfig":{}}"#),
        )
        .unwrap();
        assert_eq!(
            p.features.guardrail, None,
            "no guardrail field in OpenAI chat"
        );
        p.note_guardrail_headers(["x-amzn-bedrock-guardrailidentifier"].into_iter());
        assert_eq!(p.features.guardrail, Some(Dialect::BedrockInvoke));
    }

    #[test]
    fn a_guardrailed_request_is_never_translated() {
        let body = Bytes::from_static(
            br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"guardrailConfig":{"guardrailIdentifier":"gr-1","guardrailVersion":"1"}}"#,
        );
        let p = parse_request(Dialect::BedrockConverse, "m", body, false).unwrap();
        let e = Dialect::BedrockConverse.to_canonical(&p).unwrap_err();
        assert!(e.0.contains("guardrail"), "{e}");
        let plain =
            Bytes::from_static(br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#);
        let mut p = parse_request(Dialect::BedrockConverse, "m", plain, false).unwrap();
        assert!(Dialect::BedrockConverse.to_canonical(&p).is_ok());
        p.note_guardrail_headers(["x-amzn-bedrock-guardrailidentifier"].into_iter());
        assert!(Dialect::BedrockConverse.to_canonical(&p).is_err());
    }
}
