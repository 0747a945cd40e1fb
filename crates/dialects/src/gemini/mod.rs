//! Google Gemini `generateContent` (SPEC §13): the fifth caller dialect and the `gemini`
//! provider's format. `POST {root}/v1beta/models/{model}:generateContent` answers a whole
//! `GenerateContentResponse`; `:streamGenerateContent?alt=sse` answers SSE `data:` chunks, each a
//! `GenerateContentResponse`, with no end marker.
//!
//! Like Bedrock, the model is in the path and the operation (not a body flag) says whether the
//! answer streams; [`parse_request`] takes both from the router. A request with `safetySettings`
//! carries a safety setting (SPEC §11): it travels only to gemini-format destinations
//! (`features.guardrail = Some(Dialect::Gemini)`).

pub mod embeddings;
mod request;
mod response;
mod stream;
mod wire;

pub use request::{request_body, to_canonical};
pub use response::{
    parse_error, parse_response, render_error, render_response, render_stream_error,
    render_upstream_error, response_usage, status_name,
};
pub use stream::{StreamDecoder, StreamEncoder};

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::request::{parse_top, Features, ParseError, ParsedRequest};
use crate::Dialect;

/// The operation of a non-streamed answer.
pub const GENERATE: &str = "generateContent";
/// The operation of a streamed answer (with `?alt=sse`).
pub const STREAM_GENERATE: &str = "streamGenerateContent";

/// Parses a Gemini caller body; `model` is the path's `{model}` (without `models/`), `stream`
/// true for `:streamGenerateContent`. The body is kept byte-for-byte (same-format hops send it
/// as it is, with their model in the path).
pub fn parse_request(model: &str, body: Bytes, stream: bool) -> Result<ParsedRequest, ParseError> {
    let model = model.strip_prefix("models/").unwrap_or(model);
    if model.trim().is_empty() {
        return Err(ParseError::MissingModel);
    }
    crate::request::check_model_name(model)?;
    let (_, top) = parse_top(&body)?;
    let present = |raw: Option<&RawValue>| {
        raw.is_some_and(|r| !matches!(r.get().trim(), "null" | "[]" | "{}"))
    };
    let tools = top
        .tools
        .is_some_and(|raw| raw.get().contains("\"functionDeclarations\""));
    let json_schema = top.generation_config.is_some_and(|raw| {
        raw.get().contains("\"responseSchema\"") || raw.get().contains("\"responseJsonSchema\"")
    });
    // A safety setting is never dropped (SPEC §11): only this very format carries it.
    let guardrail = present(top.safety_settings).then_some(Dialect::Gemini);
    let features = Features {
        tools,
        json_schema,
        estimated_prompt_tokens: (body.len() as u64) / 4,
        guardrail,
        base64_embeddings: false,
    };
    Ok(ParsedRequest::with_path_model(
        Dialect::Gemini,
        model.to_owned(),
        stream,
        features,
        body,
    ))
}

/// The path of one call for `model` under `version` (`v1beta`): `/{version}/models/{model}:{op}`,
/// with `?alt=sse` for a stream. The model is percent-encoded as a path segment.
pub fn path(version: &str, model: &str, stream: bool) -> String {
    if stream {
        model_path(version, model, STREAM_GENERATE) + "?alt=sse"
    } else {
        model_path(version, model, GENERATE)
    }
}

/// `/{version}/models/{model}:{operation}`, the model percent-encoded as a path segment.
pub(crate) fn model_path(version: &str, model: &str, operation: &str) -> String {
    let model = crate::bedrock::encode_model_id(model);
    format!("/{version}/models/{model}:{operation}")
}

/// `/{v1beta|v1}/models/{model}:{operation}` → `(model (raw), operation)`.
pub fn split_path(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, op) = rest.rsplit_once(':')?;
    if model.is_empty() || model.contains('/') {
        return None;
    }
    Some((model, op))
}

/// An operation's streaming choice: `Some(false)` for `generateContent`, `Some(true)` for
/// `streamGenerateContent`.
pub fn operation_streams(op: &str) -> Option<bool> {
    match op {
        GENERATE => Some(false),
        STREAM_GENERATE => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_and_build() {
        assert_eq!(
            split_path("/v1beta/models/gemini-2.5-flash:generateContent"),
            Some(("gemini-2.5-flash", "generateContent"))
        );
        assert_eq!(
            split_path("/v1/models/g:streamGenerateContent"),
            Some(("g", "streamGenerateContent"))
        );
        assert_eq!(split_path("/v1/models/:generateContent"), None);
        assert_eq!(split_path("/v1/models/a/b:generateContent"), None);
        assert_eq!(split_path("/v2/models/g:generateContent"), None);
        assert_eq!(
            path("v1beta", "g-1", true),
            "/v1beta/models/g-1:streamGenerateContent?alt=sse"
        );
        assert_eq!(operation_streams("countTokens"), None);
    }

    #[test]
    fn safety_settings_set_the_guardrail_and_tools_are_seen() {
        let p = parse_request(
            "models/g",
            Bytes::from_static(
                br#"{"contents":[],"safetySettings":[{"category":"HARM_CATEGORY_HATE_SPEECH","threshold":"BLOCK_LOW_AND_ABOVE"}],"tools":[{"functionDeclarations":[]}]}"#,
            ),
            false,
        )
        .unwrap();
        assert_eq!(p.model, "g");
        assert_eq!(p.features.guardrail, Some(Dialect::Gemini));
        assert!(p.features.tools);
        let p = parse_request(
            "g",
            Bytes::from_static(br#"{"contents":[],"safetySettings":[]}"#),
            true,
        )
        .unwrap();
        assert_eq!(p.features.guardrail, None);
        assert!(p.stream);
    }
}
