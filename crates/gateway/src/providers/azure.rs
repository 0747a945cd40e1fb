//! `provider: azure` — Azure OpenAI. `baseUrl` is the resource (`https://<resource>.openai.azure.com`);
//! the destination's model is the deployment name. Chat and embeddings go to the deployment URLs
//! with the target's `api-version`; Responses to Azure's v1 API (`/openai/v1/responses`, which
//! takes no dated `api-version` and reads the deployment from the body's `model`). The bodies are
//! OpenAI's. Auth: `apiKey` as `api-key`, or `entraToken` as `Authorization: Bearer`.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use sidetrack_dialects::Dialect;

use super::{post, BuildError, Outbound};

/// The fixed path (its URI is prepared once per target); the deployment paths carry the model.
pub const PATHS: &[&str] = &["/openai/v1/responses"];

static API_KEY: HeaderName = HeaderName::from_static("api-key");

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let version = out.target.api_version.as_deref().unwrap_or_default();
    let path = match out.format {
        Dialect::OpenAiResponses => PATHS[0].to_owned(),
        Dialect::OpenAiEmbeddings => deployment_path(out.model, "embeddings", version),
        _ => deployment_path(out.model, "chat/completions", version),
    };
    let (stream, credential) = (out.stream, out.endpoint.credential(out.target)?);
    let key_header = out.target.api_key.is_some();
    let mut req = post(out, &path)?;
    let h = req.headers_mut();
    if stream {
        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    if let Some(credential) = credential {
        if key_header {
            h.insert(API_KEY.clone(), credential);
        } else {
            h.insert(AUTHORIZATION, credential);
        }
    }
    Ok(req)
}

/// `/openai/deployments/{deployment}/{operation}?api-version={version}`, the deployment
/// percent-encoded as one path segment (a caller's model must not reach another path).
fn deployment_path(deployment: &str, operation: &str, version: &str) -> String {
    let mut path = String::with_capacity(40 + deployment.len() + operation.len() + version.len());
    path.push_str("/openai/deployments/");
    for b in deployment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path.push('/');
    path.push_str(operation);
    path.push_str("?api-version=");
    path.push_str(version);
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_is_one_encoded_segment() {
        assert_eq!(
            deployment_path("gpt-4o.mini_1", "chat/completions", "2024-10-21"),
            "/openai/deployments/gpt-4o.mini_1/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            deployment_path("../x?y=1", "embeddings", "2024-10-21"),
            "/openai/deployments/..%2Fx%3Fy%3D1/embeddings?api-version=2024-10-21"
        );
    }
}
