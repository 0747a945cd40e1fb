//! The data plane's cross-site rule (SPEC §14). A request carrying `Origin` comes from a browser
//! page; unless `server.allowedOrigins` lists that origin it gets 403 in the caller's dialect
//! (routing log reason `gatewayRejected:origin` for an inference request), so a page the user
//! happens to visit cannot spend the gateway's upstream credentials through a gateway on
//! localhost. A listed origin gets CORS: preflights answered, `x-sidetrack-*` and `retry-after`
//! exposed. Requests without `Origin` (SDKs, curl, servers) never come here.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use sidetrack_config::Server;
use sidetrack_dialects::{Dialect, GatewayErrorKind};

use super::paths::{self, DataPath};
use super::respond::{error_response, RequestCtx};
use super::Shared;

/// Response headers a page may read: the gateway's own and the retry hints.
const EXPOSED: &str = "x-sidetrack-request-id, x-sidetrack-served-by, x-sidetrack-attempts, \
                       x-sidetrack-fallback-hop, retry-after, retry-after-ms, x-should-retry, \
                       x-request-id, request-id";

/// Request headers a listed origin may send: what the OpenAI, Anthropic and AWS SDKs send from a
/// browser, and the gateway's own.
const ALLOWED_HEADERS: [&str; 5] = [
    "authorization",
    "content-type",
    "accept",
    "x-api-key",
    "idempotency-key",
];
const ALLOWED_PREFIXES: [&str; 7] = [
    "anthropic-", // anthropic-version, anthropic-beta, anthropic-dangerous-direct-browser-access
    "openai-",
    "x-stainless-",
    "x-sidetrack-",
    "x-amz-",
    "amz-sdk-",
    "x-goog-", // x-goog-api-key, x-goog-api-client (the google-genai SDKs)
];

/// What to do with a request that carries `Origin`.
pub enum Admit {
    /// Answered here: refused (403) or a preflight.
    Answer(Response),
    /// A listed origin: serve it, then add [`allow`]'s headers.
    Serve,
}

pub fn admit<B>(shared: &Arc<Shared>, origin: &HeaderValue, req: &http::Request<B>) -> Admit {
    let rt = shared.runtime.load();
    let server = &rt.config.server;
    if !origin.to_str().is_ok_and(|o| server.origin_allowed(o)) {
        return Admit::Answer(refuse(shared, server, origin, req));
    }
    if req.method() == Method::OPTIONS && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
    {
        return Admit::Answer(preflight(origin.clone(), req.headers()));
    }
    Admit::Serve
}

/// 403 in the dialect of the path; an inference request (a POST on a dialect or Bedrock path) is
/// also logged and counted as rejected.
fn refuse<B>(
    shared: &Arc<Shared>,
    server: &Server,
    origin: &HeaderValue,
    req: &http::Request<B>,
) -> Response {
    let shown = origin
        .to_str()
        .map(|o| o.get(..200).unwrap_or(o))
        .unwrap_or("(not text)");
    let msg = format!(
        "cross-site requests from origin `{shown}` are not allowed: \
         list it in server.allowedOrigins to allow it"
    );
    let inference = req.method() == Method::POST;
    let raw = req.uri().path();
    let logged = |dialect: Dialect, path: Cow<'static, str>| {
        RequestCtx::new(shared, dialect, path, server).reject(
            GatewayErrorKind::PermissionDenied,
            &msg,
            "origin",
        )
    };
    match paths::data_path(raw) {
        DataPath::Dialect(path, dialect) if inference => logged(dialect, Cow::Borrowed(path)),
        DataPath::Bedrock { operation, .. } => match paths::bedrock_operation(operation) {
            Some((dialect, _)) if inference => logged(dialect, Cow::Owned(raw.to_owned())),
            Some((dialect, _)) => {
                error_response(dialect, GatewayErrorKind::PermissionDenied, &msg, None)
            }
            None => error_response(
                Dialect::BedrockConverse,
                GatewayErrorKind::PermissionDenied,
                &msg,
                None,
            ),
        },
        DataPath::Dialect(_, dialect) => {
            error_response(dialect, GatewayErrorKind::PermissionDenied, &msg, None)
        }
        DataPath::Gemini { .. } if inference => logged(Dialect::Gemini, Cow::Owned(raw.to_owned())),
        DataPath::Gemini { .. } => error_response(
            Dialect::Gemini,
            GatewayErrorKind::PermissionDenied,
            &msg,
            None,
        ),
        DataPath::Other => error_response(
            Dialect::OpenAiChat,
            GatewayErrorKind::PermissionDenied,
            &msg,
            None,
        ),
    }
}

/// The answer to a listed origin's preflight: the methods, and those of the requested headers
/// that [`header_allowed`] accepts (a browser refuses the request when one it asked for is
/// missing).
fn preflight(origin: HeaderValue, headers: &HeaderMap) -> Response {
    let requested = headers
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let allowed: Vec<&str> = requested
        .split(',')
        .map(str::trim)
        .filter(|h| header_allowed(h))
        .collect();
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    let h = resp.headers_mut();
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
        if !v.is_empty() {
            h.insert(ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
    }
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    h.insert(
        VARY,
        HeaderValue::from_static(
            "origin, access-control-request-method, access-control-request-headers",
        ),
    );
    resp
}

/// May a listed origin send this request header?
pub fn header_allowed(name: &str) -> bool {
    let name = name.as_bytes();
    ALLOWED_HEADERS
        .iter()
        .any(|a| name.eq_ignore_ascii_case(a.as_bytes()))
        || ALLOWED_PREFIXES
            .iter()
            .any(|p| name.len() > p.len() && name[..p.len()].eq_ignore_ascii_case(p.as_bytes()))
}

/// The CORS headers of a listed origin's answer.
pub fn allow(h: &mut HeaderMap, origin: HeaderValue) {
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSED),
    );
    h.append(VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_headers_are_allowed_and_others_not() {
        for ok in [
            "Authorization",
            "content-type",
            "x-api-key",
            "anthropic-version",
            "anthropic-beta",
            "anthropic-dangerous-direct-browser-access",
            "x-stainless-os",
            "OpenAI-Organization",
            "idempotency-key",
            "x-sidetrack-pin",
            "x-amz-date",
            "amz-sdk-invocation-id",
            "x-goog-api-key",
            "X-Goog-Api-Client",
        ] {
            assert!(header_allowed(ok), "{ok}");
        }
        for no in [
            "cookie",
            "x-forwarded-for",
            "x-stainless-",
            "openai",
            "",
            "é-x",
        ] {
            assert!(!header_allowed(no), "{no}");
        }
    }

    #[test]
    fn a_preflight_lists_only_the_allowed_requested_headers() {
        let mut req = HeaderMap::new();
        req.insert(
            ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_static("authorization, content-type,x-stainless-lang, cookie"),
        );
        let resp = preflight(HeaderValue::from_static("https://app.example"), &req);
        assert_eq!(resp.status(), StatusCode::NO_CONTENT);
        let h = resp.headers();
        assert_eq!(
            h[ACCESS_CONTROL_ALLOW_HEADERS],
            "authorization, content-type, x-stainless-lang"
        );
        assert_eq!(h[ACCESS_CONTROL_ALLOW_ORIGIN], "https://app.example");
    }
}
