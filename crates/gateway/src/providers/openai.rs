//! `provider: openai` — any OpenAI-compatible upstream. `baseUrl` includes `/v1`.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::HeaderValue;
use http_body_util::Full;
use sidetrack_dialects::Dialect;

use super::{finish, post, secret_header, BuildError, Outbound};

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let path = match out.format {
        Dialect::OpenAiResponses => "/responses",
        _ => "/chat/completions",
    };
    let mut b = post(format!("{}{path}", out.target.base_url))
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if out.stream {
        b = b.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    if let Some(key) = &out.target.api_key {
        b = b.header(
            AUTHORIZATION,
            secret_header(out.target, format!("Bearer {}", key.expose()))?,
        );
    }
    finish(out.target, b, out.body)
}
