//! `provider: gemini` — Google AI's `generateContent`. `baseUrl` is the host root
//! (`https://generativelanguage.googleapis.com`); the model goes in the path
//! (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse` for a stream) and
//! the key in `x-goog-api-key`. The body is the Gemini dialect's (`sidetrack_dialects::gemini`),
//! which Vertex's Gemini models share. An OpenAI embeddings request goes to
//! `/v1beta/models/{model}:batchEmbedContents`.

use bytes::Bytes;
use http::header::ACCEPT;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;

use super::{post, BuildError, Outbound};

/// The API version in the path.
pub const VERSION: &str = "v1beta";

static API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    use sidetrack_dialects::gemini;
    let path = if out.embeddings {
        gemini::embeddings::path(VERSION, out.model)
    } else {
        gemini::path(VERSION, out.model, out.stream)
    };
    let (stream, credential) = (out.stream, out.endpoint.credential(out.target)?);
    let mut req = post(out, &path)?;
    let h = req.headers_mut();
    h.insert(
        ACCEPT,
        HeaderValue::from_static(if stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    if let Some(key) = credential {
        h.insert(API_KEY.clone(), key);
    }
    Ok(req)
}
