//! Gateway-made errors (SPEC §6.3) and the error-type → status map used to classify in-stream
//! error events.

use bytes::Bytes;

/// Errors the gateway itself produces. Each dialect renders them in its own shape; none of them
/// ever triggers a fallback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayErrorKind {
    /// Malformed JSON, missing model, unsupported request.
    InvalidRequest,
    /// No or bad API key.
    Unauthenticated,
    /// The principal may not use this model or route.
    PermissionDenied,
    /// No route for the model, or an unknown path.
    NotFound,
    /// Body over `server.maxRequestBytes`.
    TooLarge,
    /// The caller's body did not arrive within `server.bodyReadTimeoutMilliseconds` (408).
    RequestTimeout,
    /// The gateway's own rate limit.
    RateLimited,
    /// The last attempt ended in CONNECTION_ERROR.
    BadGateway,
    /// The last attempt ended in FIRST_BYTE_TIMEOUT (or the request deadline passed).
    GatewayTimeout,
    /// No destination could be attempted at all (all ineligible or disabled).
    Unavailable,
    /// 422: an `Idempotency-Key` reused with a different request (SPEC §12).
    Unprocessable,
}

/// A rendered error response: status, content type, extra headers and body.
#[derive(Debug, Clone)]
pub struct RenderedError {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Bytes,
}

/// The HTTP status an in-stream error type stands for. Used to classify an error event that
/// arrives before the first token as if the provider had answered with that status.
pub fn status_for_error_type(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" | "invalid_api_key" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "requests"
        | "tokens"
        | "insufficient_quota" => 429,
        "timeout_error" => 504,
        // Google's status names (Gemini).
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "UNAUTHENTICATED" => 401,
        "PERMISSION_DENIED" => 403,
        "NOT_FOUND" => 404,
        "RESOURCE_EXHAUSTED" => 429,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        "service_unavailable_error" | "server_is_overloaded" | "slow_down" => 503,
        "overloaded_error" => 529,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_types_map_to_their_statuses() {
        assert_eq!(status_for_error_type("overloaded_error"), 529);
        assert_eq!(status_for_error_type("server_error"), 500);
        assert_eq!(status_for_error_type("rate_limit_error"), 429);
        assert_eq!(status_for_error_type("something_new"), 500);
    }
}
