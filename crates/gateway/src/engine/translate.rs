//! Phase "translate": the request body in the destination's format.

use bytes::Bytes;
use sidetrack_dialects::canonical::TranslateError;
use sidetrack_dialects::{Dialect, ParsedRequest};

/// Same format as the caller: the caller's bytes with only the model replaced (Bedrock formats
/// carry the model in the path, so their bodies pass unchanged). Another format: through the
/// canonical form; what the target format cannot carry is a `TranslateError` (the destination is
/// then ineligible for this request).
pub fn request_body(
    format: Dialect,
    req: &ParsedRequest,
    model: &str,
) -> Result<Bytes, TranslateError> {
    if format == req.dialect {
        return Ok(match format {
            Dialect::BedrockInvoke | Dialect::BedrockConverse => req.body().clone(),
            _ => req.body_with_model(model),
        });
    }
    let mut canonical = req.dialect.to_canonical(req)?;
    canonical.model = model.to_owned();
    canonical.stream = req.stream;
    format.request_body(&canonical)
}
