//! `provider: openai` — any OpenAI-compatible upstream. `baseUrl` includes `/v1`.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::HeaderValue;
use http_body_util::Full;
use sidetrack_dialects::Dialect;

use super::{post, BuildError, Outbound};

/// The paths requests go to (their URIs are prepared once per target).
pub const PATHS: &[&str] = &["/chat/completions", "/responses", "/embeddings"];

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let path = match out.format {
        Dialect::OpenAiResponses => PATHS[1],
        Dialect::OpenAiEmbeddings => PATHS[2],
        _ => PATHS[0],
    };
    let (stream, credential) = (out.stream, out.endpoint.credential(out.target)?);
    let mut req = post(out, path)?;
    let h = req.headers_mut();
    if stream {
        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    if let Some(key) = credential {
        h.insert(AUTHORIZATION, key);
    }
    Ok(req)
}
