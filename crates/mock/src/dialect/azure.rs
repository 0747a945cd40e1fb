//! Azure OpenAI (`provider: azure`): OpenAI's bodies at Azure's paths —
//! `POST /openai/deployments/{deployment}/chat/completions?api-version=…`,
//! `POST /openai/deployments/{deployment}/embeddings?api-version=…` and the v1 API's
//! `POST /openai/v1/responses` — with Azure's auth (`api-key`, or an Entra ID Bearer token) and
//! Azure's error shapes for a missing key, a missing `api-version` and a content-filter block.
//!
//! The deployment in the path names the model (the body's `model` is ignored, as Azure does);
//! behaviours are set per deployment name. `contentFiltered` on an Azure path answers Azure's
//! content-filter 400 instead of a filtered 200.

use bytes::Bytes;
use http::{HeaderMap, Response};
use serde_json::{json, Value};

use super::{embeddings, percent_decode, response, Dialect, RenderContext, Route};
use crate::body::{self, MockBody};

const DEPLOYMENTS: &str = "/openai/deployments/";
const RESPONSES: &str = "/openai/v1/responses";
const REQUEST_ID: &str = "apim-request-id";

/// The Azure endpoint at `raw_path`, if any.
pub fn route(raw_path: &str) -> Option<Route> {
    if raw_path == RESPONSES {
        return Some(Route {
            dialect: Dialect::OpenAiResponses,
            endpoint: raw_path.to_owned(),
            model_id: None,
            path_stream: false,
            azure: true,
        });
    }
    let (raw_id, operation) = raw_path.strip_prefix(DEPLOYMENTS)?.split_once('/')?;
    let dialect = match operation {
        "chat/completions" => Dialect::OpenAiChat,
        "embeddings" => Dialect::Embeddings(embeddings::Api::OpenAi),
        _ => return None,
    };
    let deployment = percent_decode(raw_id);
    if deployment.is_empty() {
        return None;
    }
    Some(Route {
        dialect,
        endpoint: format!("{DEPLOYMENTS}{{deployment}}/{operation}"),
        model_id: Some(deployment),
        path_stream: false,
        azure: true,
    })
}

/// Does the request carry Azure credentials (an `api-key`, or `Authorization: Bearer …`)?
pub fn authorized(headers: &HeaderMap) -> bool {
    let bearer = headers
        .get(http::header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "));
    bearer || headers.get("api-key").is_some_and(|v| !v.is_empty())
}

/// The `api-version` query value, if given.
pub fn api_version(query: Option<&str>) -> Option<&str> {
    query?
        .split('&')
        .find_map(|p| p.strip_prefix("api-version="))
        .filter(|v| !v.is_empty())
}

/// The body with `model` set to the deployment when it has none (Azure does not need one).
pub fn with_model(body: Bytes, deployment: &str) -> Bytes {
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(mut map)) if !map.contains_key("model") => {
            map.insert("model".into(), Value::String(deployment.to_owned()));
            Bytes::from(Value::Object(map).to_string())
        }
        _ => body,
    }
}

fn answer(status: u16, ctx: &RenderContext, value: Value) -> Response<MockBody> {
    response(
        status,
        "application/json",
        REQUEST_ID,
        ctx,
        body::full(value.to_string()),
    )
}

/// Azure's 401 for a request without a key or token.
pub fn unauthorized(ctx: &RenderContext) -> Response<MockBody> {
    answer(
        401,
        ctx,
        json!({"error": {
            "code": "401",
            "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."
        }}),
    )
}

/// Azure's 404 for a deployment path without `api-version`.
pub fn missing_api_version(ctx: &RenderContext) -> Response<MockBody> {
    answer(
        404,
        ctx,
        json!({"error": {"code": "404", "message": "Resource not found"}}),
    )
}

/// Azure's content-filter 400 (the prompt tripped the filter).
pub fn content_filtered(ctx: &RenderContext) -> Response<MockBody> {
    let safe = json!({"filtered": false, "severity": "safe"});
    answer(
        400,
        ctx,
        json!({"error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.",
            "type": null,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {
                    "hate": safe,
                    "self_harm": safe,
                    "sexual": safe,
                    "violence": {"filtered": true, "severity": "high"},
                    "jailbreak": {"filtered": false, "detected": false},
                }
            }
        }}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_queries() {
        let r = route("/openai/deployments/gpt%2Dx/chat/completions").unwrap();
        assert_eq!(r.dialect, Dialect::OpenAiChat);
        assert_eq!(r.model_id.as_deref(), Some("gpt-x"));
        assert!(route("/openai/deployments//chat/completions").is_none());
        assert!(route("/openai/deployments/d/completions").is_none());
        assert_eq!(route(RESPONSES).unwrap().dialect, Dialect::OpenAiResponses);
        assert_eq!(
            api_version(Some("a=1&api-version=2024-10-21")),
            Some("2024-10-21")
        );
        assert_eq!(api_version(Some("api-version=")), None);
        assert_eq!(api_version(None), None);
    }
}
