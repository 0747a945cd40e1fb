//! `provider: bedrock` — Bedrock Runtime (Converse, or InvokeModel when the caller speaks it).
//! Auth: the target's `apiKey` or `AWS_BEARER_TOKEN_BEDROCK` as a bearer token (Bedrock API keys);
//! otherwise SigV4 with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use sidetrack_dialects::Dialect;

use super::{bearer, post, secret, BuildError, Outbound};

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    // The dialect modules own the paths (and botocore-style model-id encoding).
    let path = match out.format {
        Dialect::BedrockInvoke => sidetrack_dialects::bedrock::invoke::path(out.model, out.stream),
        _ => sidetrack_dialects::bedrock::converse::path(out.model, out.stream),
    };
    let (stream, credential) = (out.stream, out.endpoint.credential(out.target)?);
    let (target, body, caller) = (out.target, out.body.clone(), out.caller_headers);
    let mut req = post(out, &path)?;
    let h = req.headers_mut();
    // A caller's guardrail goes with it (SPEC §11). Eligibility sends a guardrailed request only
    // to a destination of the caller's own Bedrock format; set before signing, so SigV4 covers it.
    for name in sidetrack_dialects::request::BEDROCK_GUARDRAIL_HEADERS {
        if let Some(v) = caller.get(name) {
            h.insert(HeaderName::from_static(name), v.clone());
        }
    }
    h.insert(
        ACCEPT,
        HeaderValue::from_static(if stream {
            "application/vnd.amazon.eventstream"
        } else {
            "application/json"
        }),
    );
    if let Some(key) = credential {
        h.insert(AUTHORIZATION, key);
        return Ok(req);
    }
    let env_token = std::env::var("AWS_BEARER_TOKEN_BEDROCK")
        .ok()
        .filter(|t| !t.is_empty());
    if let Some(token) = env_token {
        let v = secret(bearer(&token)).ok_or_else(|| {
            BuildError("AWS_BEARER_TOKEN_BEDROCK is not a valid header value".into())
        })?;
        h.insert(AUTHORIZATION, v);
        return Ok(req);
    }
    sign_v4(
        &mut req,
        &body,
        target.region.as_deref().unwrap_or("us-east-1"),
        &target.name,
    )?;
    Ok(req)
}

fn env_credentials(target: &str) -> Result<Identity, BuildError> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) else {
        return Err(BuildError(format!(
            "target `{target}`: no Bedrock credentials (set apiKey, AWS_BEARER_TOKEN_BEDROCK, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
        )));
    };
    Ok(Credentials::new(id, secret, var("AWS_SESSION_TOKEN"), None, "environment").into())
}

/// Signs the request in place with SigV4 (service `bedrock`).
fn sign_v4(
    req: &mut http::Request<Full<Bytes>>,
    body: &[u8],
    region: &str,
    target: &str,
) -> Result<(), BuildError> {
    let fail = |e: &dyn std::fmt::Display| {
        BuildError(format!("target `{target}`: SigV4 signing failed: {e}"))
    };
    let identity = env_credentials(target)?;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| fail(&e))?
        .into();
    let uri = req.uri().to_string();
    let headers = req
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
    let signable = SignableRequest::new(
        req.method().as_str(),
        &uri,
        headers,
        SignableBody::Bytes(body),
    )
    .map_err(|e| fail(&e))?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| fail(&e))?.into_parts();
    instructions.apply_to_request_http1x(req);
    Ok(())
}
