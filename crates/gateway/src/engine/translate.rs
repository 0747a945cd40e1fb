//! Gateway-side translation, both ways: the request body in the destination's format (phase
//! "translate"), and an upstream's whole answer or error in the caller's dialect (stream
//! translation is the [`super::pipe::Pipe`]'s). Errors the gateway itself writes are rendered here
//! too, so an answer's body is replaced in one place.

use bytes::Bytes;
use http::response::Parts;
use sidetrack_dialects::canonical::TranslateError;
use sidetrack_dialects::{Dialect, ParsedRequest};

use super::attempt::Upstream;

/// Same format as the caller: the caller's bytes with only the model replaced (Bedrock formats
/// carry the model in the path, so their bodies pass unchanged). Another format: through the
/// canonical form; what the target format cannot carry is a `TranslateError` (the destination is
/// then ineligible for this request).
pub fn request_body(
    format: Dialect,
    req: &ParsedRequest,
    model: &str,
) -> Result<Bytes, TranslateError> {
    if req.dialect == Dialect::OpenAiEmbeddings {
        return sidetrack_dialects::openai_embeddings::request_body(format, req, model);
    }
    if format == req.dialect {
        return Ok(match format {
            Dialect::BedrockInvoke | Dialect::BedrockConverse | Dialect::Gemini => {
                req.body().clone()
            }
            _ => req.body_with_model(model),
        });
    }
    let mut canonical = req.dialect.to_canonical(req)?;
    canonical.model = model.to_owned();
    canonical.stream = req.stream;
    format.request_body(&canonical)
}

/// A gateway-made 502 in the caller's dialect for an upstream answer it could not carry
/// (untranslatable, over a bound, undecodable): the upstream's status and body are replaced.
pub(super) fn bad_gateway(mut parts: Parts, caller: Dialect, message: &str) -> Upstream {
    let r = caller.render_upstream_error(502, "api_error", message);
    let body = rendered(&mut parts, r);
    Upstream::Buffered { parts, body }
}

/// Puts an error the gateway rendered in place of the upstream's answer: its status, a JSON body
/// with the dialect's own error headers (Bedrock's `x-amzn-ErrorType`); returns the body.
fn rendered(parts: &mut Parts, r: sidetrack_dialects::RenderedError) -> Bytes {
    parts.status = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    set_json(parts);
    for (k, v) in r.headers {
        if let Ok(v) = http::HeaderValue::from_str(&v) {
            parts.headers.insert(k, v);
        }
    }
    r.body
}

/// The body is now one the gateway wrote: JSON, without the upstream body's encoding or length.
fn set_json(parts: &mut Parts) {
    crate::server::boundary::body_rewritten(&mut parts.headers);
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
}

/// An upstream error in another format → the same error in the caller's dialect (status
/// preserved where the caller's dialect has it, type mapped, message capped; the commit redacts
/// credentials). `Retry-After` and request ids stay.
pub(super) fn error_answer(
    mut parts: Parts,
    body: &[u8],
    upstream: Dialect,
    caller: Dialect,
) -> Upstream {
    let status = parts.status.as_u16();
    let header_type = parts
        .headers
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (error_type, message) = upstream.parse_error(status, header_type.as_deref(), body);
    let message = crate::server::boundary::cap_message(&message);
    let r = caller.render_upstream_error(status, &error_type, &message);
    parts.headers.remove("x-amzn-errortype");
    let body = rendered(&mut parts, r);
    Upstream::Buffered { parts, body }
}

/// A whole (non-stream) answer in another format, rendered in the caller's dialect; when it does
/// not parse, the gateway's 502 and why (`untranslatableResponse`). Converse answers carry neither id nor model: they are
/// named as the stream encoders name theirs.
pub(super) fn whole_answer(
    mut parts: Parts,
    raw: &[u8],
    upstream: Dialect,
    caller: Dialect,
    names: (&str, &str),
) -> (Upstream, Option<&'static str>) {
    match upstream.parse_response(raw) {
        Ok(mut resp) => {
            let (id, model) = names;
            if resp.id.is_empty() {
                resp.id = id.to_owned();
            }
            if resp.model.is_empty() {
                resp.model = model.to_owned();
            }
            set_json(&mut parts);
            for (name, n) in caller.usage_headers(resp.usage).into_iter().flatten() {
                let name = http::HeaderName::from_static(name);
                parts.headers.insert(name, http::HeaderValue::from(n));
            }
            let body = caller.render_response(&resp);
            (Upstream::Buffered { parts, body }, None)
        }
        Err(e) => {
            let message = format!("sidetrack could not translate the upstream answer: {e}");
            let response = bad_gateway(parts, caller, &message);
            (response, Some("untranslatableResponse"))
        }
    }
}

/// A Bedrock embedding model's or Google AI's (`upstream`) whole answer in OpenAI's embeddings
/// shape (SPEC §12); the token count comes from the body (Titan) or Bedrock's
/// `x-amzn-bedrock-input-token-count` (Cohere); Google states none (0). When it does not parse,
/// the gateway's 502 and why (`untranslatableResponse`).
pub(super) fn embeddings_answer(
    mut parts: Parts,
    raw: &[u8],
    (upstream, model): (Dialect, &str),
    base64: bool,
) -> (Upstream, Option<&'static str>) {
    use sidetrack_dialects::openai_embeddings;
    let tokens = parts
        .headers
        .get("x-amzn-bedrock-input-token-count")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    match openai_embeddings::answer(upstream, raw, model, tokens, base64) {
        Ok(body) => {
            set_json(&mut parts);
            (Upstream::Buffered { parts, body }, None)
        }
        Err(e) => {
            let message = format!("sidetrack could not translate the upstream answer: {e}");
            let response = bad_gateway(parts, Dialect::OpenAiEmbeddings, &message);
            (response, Some("untranslatableResponse"))
        }
    }
}
