//! Google's OAuth token endpoint as the Vertex token flow uses it (`POST /token`, the JWT bearer
//! grant), and the bearer check on the Vertex paths.
//!
//! The grant is checked the way Google does in outline: form `grant_type` is
//! `urn:ietf:params:oauth:grant-type:jwt-bearer`, the `assertion` is a three-part JWT whose
//! header says `RS256` and whose claims carry `iss`, the cloud-platform `scope`, `aud`, `iat` and
//! `exp` (at most an hour apart). With a public key set ([`TokenSettings::public_key`]) the
//! signature is verified too. Tokens it issues are the only bearers the Vertex paths accept, with
//! any listed in [`TokenSettings::accept`].

use std::collections::VecDeque;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::body::{self, MockBody};
use crate::dialect::percent_decode;

/// The grant type of a service-account token request.
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Issued tokens remembered for the bearer check (the oldest are forgotten first).
const MAX_ISSUED: usize = 1024;

/// The token endpoint's knobs (`POST /_mock/token`, camelCase JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenSettings {
    /// `expires_in` of issued tokens, seconds (default 3600).
    #[serde(default = "default_expires_in")]
    pub expires_in: u64,
    /// Answer every token request with this status and `{"error":"internal_failure"}`.
    #[serde(default)]
    pub fail_status: Option<u16>,
    /// Answer 200 with a body that is not JSON.
    #[serde(default)]
    pub bad_json: bool,
    /// The service account's public key, base64 of the PKCS#1 `RSAPublicKey` DER: when set, the
    /// assertion's RS256 signature is verified.
    #[serde(default)]
    pub public_key: Option<String>,
    /// Bearer tokens the Vertex paths accept besides the ones issued here.
    #[serde(default)]
    pub accept: Vec<String>,
}

fn default_expires_in() -> u64 {
    3600
}

impl Default for TokenSettings {
    fn default() -> Self {
        TokenSettings {
            expires_in: default_expires_in(),
            fail_status: None,
            bad_json: false,
            public_key: None,
            accept: Vec::new(),
        }
    }
}

#[derive(Default)]
pub(crate) struct TokenState {
    pub settings: TokenSettings,
    /// Token requests received (the `tokenRequests` stat), good or not.
    pub requests: u64,
    /// Tokens issued.
    pub issued_count: u64,
    issued: VecDeque<String>,
}

impl TokenState {
    pub fn accepts(&self, headers: &HeaderMap) -> bool {
        let Some(token) = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        self.issued.iter().any(|t| t == token) || self.settings.accept.iter().any(|t| t == token)
    }

    /// One token request: counted, checked, answered. `fresh` makes the token's random part.
    pub fn answer(&mut self, body: &[u8], fresh: &str) -> Response<MockBody> {
        self.requests += 1;
        if let Some(status) = self.settings.fail_status {
            return reply(status, json!({"error": "internal_failure"}).to_string());
        }
        if let Err(e) = check_grant(body, self.settings.public_key.as_deref()) {
            return reply(
                400,
                json!({"error": "invalid_grant", "error_description": e}).to_string(),
            );
        }
        if self.settings.bad_json {
            return reply(200, "<html>not a token</html>".to_owned());
        }
        let token = format!("ya29.mock-{fresh}");
        if self.issued.len() == MAX_ISSUED {
            self.issued.pop_front();
        }
        self.issued.push_back(token.clone());
        self.issued_count += 1;
        reply(
            200,
            json!({
                "access_token": token,
                "expires_in": self.settings.expires_in,
                "token_type": "Bearer",
            })
            .to_string(),
        )
    }
}

fn reply(status: u16, body: String) -> Response<MockBody> {
    let mut res = Response::new(body::full(body));
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    res
}

/// Google's 401 for a missing or unknown bearer on a Vertex path.
pub(crate) fn unauthenticated() -> Response<MockBody> {
    reply(
        401,
        json!({"error": {
            "code": 401,
            "message": "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            "status": "UNAUTHENTICATED",
        }})
        .to_string(),
    )
}

fn form_field<'a>(form: &'a str, name: &str) -> Option<&'a str> {
    form.split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Checks the form and the JWT; the error says what is wrong.
fn check_grant(body: &[u8], public_key: Option<&str>) -> Result<(), String> {
    let form = std::str::from_utf8(body).map_err(|_| "the form is not UTF-8".to_owned())?;
    let grant = form_field(form, "grant_type").map(percent_decode);
    if grant.as_deref() != Some(JWT_BEARER_GRANT) {
        return Err(format!("grant_type must be {JWT_BEARER_GRANT}"));
    }
    let assertion = percent_decode(form_field(form, "assertion").ok_or("no assertion".to_owned())?);
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err("the assertion is not a three-part JWT".to_owned());
    };
    let decode = |part: &str, what: &str| -> Result<Vec<u8>, String> {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| format!("the JWT {what} is not base64url"))
    };
    let header: Value = serde_json::from_slice(&decode(header, "header")?)
        .map_err(|_| "the JWT header is not JSON".to_owned())?;
    if header.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err("the JWT header's alg must be RS256".to_owned());
    }
    let claims_json: Value = serde_json::from_slice(&decode(claims, "claims")?)
        .map_err(|_| "the JWT claims are not JSON".to_owned())?;
    let text = |k: &str| claims_json.get(k).and_then(Value::as_str).unwrap_or("");
    if text("iss").is_empty() || text("aud").is_empty() {
        return Err("the JWT needs iss and aud".to_owned());
    }
    if !text("scope").split(' ').any(|s| s == SCOPE) {
        return Err("the JWT scope must include cloud-platform".to_owned());
    }
    let (iat, exp) = (
        claims_json.get("iat").and_then(Value::as_u64),
        claims_json.get("exp").and_then(Value::as_u64),
    );
    match (iat, exp) {
        (Some(iat), Some(exp)) if exp > iat && exp - iat <= 3600 => {}
        _ => return Err("the JWT needs iat and exp at most an hour apart".to_owned()),
    }
    let signature = decode(signature, "signature")?;
    if let Some(key) = public_key {
        let key = STANDARD
            .decode(key)
            .map_err(|_| "the mock's public key is not base64".to_owned())?;
        let signed = &assertion[..header_and_claims_len(&assertion)];
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| "the JWT signature does not verify".to_owned())?;
    }
    Ok(())
}

/// The length of `header.claims` (what the signature covers).
fn header_and_claims_len(jwt: &str) -> usize {
    jwt.rfind('.').unwrap_or(jwt.len())
}
