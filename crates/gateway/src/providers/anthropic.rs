//! `provider: anthropic` — the Messages API. `baseUrl` is the host (`https://api.anthropic.com`).

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::HeaderValue;
use http_body_util::Full;

use super::{finish, post, secret_header, BuildError, Outbound};

/// Sent when the caller did not speak Anthropic (and so sent no `anthropic-version`).
const DEFAULT_VERSION: &str = "2023-06-01";

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let mut b = post(format!("{}/v1/messages", out.target.base_url))
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if out.stream {
        b = b.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    // An Anthropic caller's version and beta flags go through; others get the stable version.
    let version = out
        .caller_headers
        .get("anthropic-version")
        .cloned()
        .unwrap_or(HeaderValue::from_static(DEFAULT_VERSION));
    b = b.header("anthropic-version", version);
    if let Some(beta) = out.caller_headers.get("anthropic-beta") {
        b = b.header("anthropic-beta", beta.clone());
    }
    if let Some(key) = &out.target.api_key {
        b = b.header(
            "x-api-key",
            secret_header(out.target, key.expose().to_owned())?,
        );
    }
    finish(out.target, b, out.body)
}
