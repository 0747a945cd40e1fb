//! `provider: anthropic` — the Messages API. `baseUrl` is the host (`https://api.anthropic.com`).

use bytes::Bytes;
use http::header::ACCEPT;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;

use super::{post, BuildError, Outbound};

/// The path requests go to (its URI is prepared once per target).
pub const PATHS: &[&str] = &["/v1/messages"];

static VERSION: HeaderName = HeaderName::from_static("anthropic-version");
static BETA: HeaderName = HeaderName::from_static("anthropic-beta");
static API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// Sent when the caller did not speak Anthropic (and so sent no `anthropic-version`).
const DEFAULT_VERSION: &str = "2023-06-01";

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let (stream, caller, credential) = (
        out.stream,
        out.caller_headers,
        out.endpoint.credential(out.target)?,
    );
    let mut req = post(out, PATHS[0])?;
    let h = req.headers_mut();
    if stream {
        h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    // An Anthropic caller's version and beta flags go through; others get the stable version.
    let version = caller
        .get(&VERSION)
        .cloned()
        .unwrap_or(HeaderValue::from_static(DEFAULT_VERSION));
    h.insert(VERSION.clone(), version);
    if let Some(beta) = caller.get(&BETA) {
        h.insert(BETA.clone(), beta.clone());
    }
    if let Some(key) = credential {
        h.insert(API_KEY.clone(), key);
    }
    Ok(req)
}
