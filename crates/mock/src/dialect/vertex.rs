//! Vertex AI under `/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/…`.
//! Anthropic models (`publishers/anthropic`): `rawPredict` / `streamRawPredict`; the body is
//! Anthropic Messages without `model` (it is in the path) and with
//! `anthropic_version: vertex-2023-10-16`; the answers are Anthropic's. Google models
//! (`publishers/google`): `generateContent` / `streamGenerateContent` with Gemini bodies and
//! answers ([`super::gemini`]). The bearer check is the handler's ([`crate::google_token`]).

use serde_json::Value;

use super::{anthropic, percent_decode, Dialect, Route};
use crate::engine::{MockError, RequestFacts};

/// The `anthropic_version` Vertex requires in the body.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// `/v1/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict` (or
/// `:streamRawPredict`), `…/publishers/google/models/{model}:generateContent` (or
/// `:streamGenerateContent`).
pub fn route(raw_path: &str) -> Option<Route> {
    let rest = raw_path.strip_prefix("/v1/projects/")?;
    let mut segments = rest.split('/');
    let (_project, locations, _region, publishers, publisher, models, last) = (
        segments.next()?,
        segments.next()?,
        segments.next()?,
        segments.next()?,
        segments.next()?,
        segments.next()?,
        segments.next()?,
    );
    if segments.next().is_some()
        || locations != "locations"
        || publishers != "publishers"
        || models != "models"
    {
        return None;
    }
    let (model, verb) = last.rsplit_once(':')?;
    let (dialect, path_stream) = match (publisher, verb) {
        ("anthropic", "rawPredict") => (Dialect::VertexAnthropic, false),
        ("anthropic", "streamRawPredict") => (Dialect::VertexAnthropic, true),
        ("google", "generateContent") => (Dialect::VertexGemini, false),
        ("google", "streamGenerateContent") => (Dialect::VertexGemini, true),
        _ => return None,
    };
    if model.is_empty() {
        return None;
    }
    Some(Route {
        dialect,
        endpoint: raw_path.to_owned(),
        model_id: Some(percent_decode(model)),
        path_stream,
        azure: false,
    })
}

/// Rejects a body with `model` or without Vertex's `anthropic_version`; the rest is Anthropic's.
pub fn parse_request(
    model: &str,
    path_stream: bool,
    body: &[u8],
) -> Result<(RequestFacts, Value), MockError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        anthropic::invalid_request(format!("The request body is not valid JSON: {e}"))
    })?;
    if json.get("model").is_some() {
        return Err(anthropic::invalid_request(
            "model: Extra inputs are not permitted (the model is in the URL on Vertex)".to_owned(),
        ));
    }
    if json.get("anthropic_version").and_then(Value::as_str) != Some(ANTHROPIC_VERSION) {
        return Err(anthropic::invalid_request(format!(
            "anthropic_version: must be `{ANTHROPIC_VERSION}` on Vertex"
        )));
    }
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if stream != path_stream {
        return Err(anthropic::invalid_request(
            "stream: `stream: true` goes with streamRawPredict, and only with it".to_owned(),
        ));
    }
    let facts = RequestFacts {
        model: model.to_owned(),
        stream,
        include_stream_usage: false,
        prompt_chars: anthropic::prompt_chars(&json),
        has_tools: super::non_empty_array(json.get("tools")),
    };
    Ok((facts, json))
}
