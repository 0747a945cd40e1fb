//! `provider: vertex` — Vertex AI. Anthropic models (`claude-*`) through `rawPredict` /
//! `streamRawPredict` in the Anthropic Messages format; every other model (publisher `google`,
//! `gemini-*`) through `generateContent` / `streamGenerateContent?alt=sse` in the Gemini format
//! (the body Google AI takes; Vertex adds optional fields such as `labels`, which pass through).
//!
//! Auth: `Authorization: Bearer` with a ready token from the environment (`accessToken`), or an
//! OAuth token got with the JWT bearer grant from a service account (`credentials`): an RS256 JWT
//! signed with the account's key (ring, already in the tree through rustls) is exchanged at the
//! account's `token_uri`. The token is cached per target, fetched by one request at a time for all
//! callers waiting on it, refreshed [`REFRESH_MARGIN`] before it expires, and never logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Uri};
use http_body_util::{BodyExt, Full, Limited};
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivatePkcs8KeyDer;
use serde_json::value::RawValue;
use sidetrack_config::{ServiceAccount, Target, VertexAuth};
use sidetrack_dialects::Dialect;
use tokio::time::Instant;

use super::{bearer, post, secret, BuildError, HttpClient, Outbound};

/// The `anthropic_version` Vertex documents for Anthropic models (sent in the body).
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The OAuth scope asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// A cached token is replaced this long before the `expires_in` it came with ends.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// The JWT's lifetime (Google's maximum).
const ASSERTION_LIFETIME_SECONDS: u64 = 3600;
/// The largest token-endpoint answer read.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

/// Who publishes a model on Vertex, which decides its endpoint and format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VertexPublisher {
    /// `claude-*`: `publishers/anthropic/models/{model}:rawPredict`, Anthropic Messages.
    Anthropic,
    /// Everything else (`gemini-*`): `publishers/google/models/{model}:generateContent`, Gemini.
    Google,
}

impl VertexPublisher {
    /// By the model name: `claude*` is Anthropic's, anything else Google's.
    pub fn of(model: &str) -> VertexPublisher {
        if model.starts_with("claude") {
            VertexPublisher::Anthropic
        } else {
            VertexPublisher::Google
        }
    }

    /// The wire format the publisher's models take.
    pub fn format(self) -> Dialect {
        match self {
            VertexPublisher::Anthropic => Dialect::AnthropicMessages,
            VertexPublisher::Google => Dialect::Gemini,
        }
    }
}

pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let target = out.target;
    let Some(token) = out.bearer.clone() else {
        return Err(BuildError(format!(
            "target `{}`: no Vertex token",
            target.name
        )));
    };
    let (Some(project), Some(region)) = (&target.project, &target.region) else {
        return Err(BuildError(format!(
            "target `{}`: a vertex target needs `project` and `region`",
            target.name
        )));
    };
    let stream = out.stream;
    let mut req = if out.format == Dialect::Gemini {
        // `/v1/projects/{p}/locations/{r}/publishers/google/models/{model}:generateContent`
        // (`:streamGenerateContent?alt=sse`): the Gemini path under the publisher's prefix.
        let prefix = format!(
            "v1/projects/{}/locations/{}/publishers/google",
            encode_segment(project),
            encode_segment(region),
        );
        let path = sidetrack_dialects::gemini::path(&prefix, out.model, stream);
        post(out, &path)?
    } else {
        let verb = if stream {
            "streamRawPredict"
        } else {
            "rawPredict"
        };
        let path = format!(
            "/v1/projects/{}/locations/{}/publishers/anthropic/models/{}:{verb}",
            encode_segment(project),
            encode_segment(region),
            encode_segment(out.model),
        );
        let body = vertex_body(&out.body).map_err(|e| {
            BuildError(format!(
                "target `{}`: the Anthropic body is not a JSON object: {e}",
                target.name
            ))
        })?;
        post(Outbound { body, ..out }, &path)?
    };
    let h = req.headers_mut();
    h.insert(
        ACCEPT,
        HeaderValue::from_static(if stream {
            "text/event-stream"
        } else {
            "application/json"
        }),
    );
    h.insert(AUTHORIZATION, token);
    Ok(req)
}

/// The Anthropic Messages body as Vertex takes it: no `model` (it is in the URL) and
/// `anthropic_version: vertex-2023-10-16`.
fn vertex_body(body: &[u8]) -> Result<Bytes, serde_json::Error> {
    let mut fields: Vec<(String, &RawValue)> = Vec::new();
    let map: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(body)?;
    fields.reserve(map.len() + 1);
    for (k, v) in map {
        if k != "model" && k != "anthropic_version" {
            fields.push((k, v));
        }
    }
    let mut out = Vec::with_capacity(body.len() + 40);
    out.extend_from_slice(b"{\"anthropic_version\":\"");
    out.extend_from_slice(ANTHROPIC_VERSION.as_bytes());
    out.push(b'"');
    for (k, v) in fields {
        out.push(b',');
        serde_json::to_writer(&mut out, &k)?;
        out.push(b':');
        out.extend_from_slice(v.get().as_bytes());
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// A URL path segment: unreserved characters and `@` as written, the rest percent-encoded.
fn encode_segment(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'@');
    if s.bytes().all(plain) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.into()
}

/// One vertex target's credentials, built once per config.
pub enum Auth {
    /// `accessToken`: the header value, or why it cannot be one.
    Static(Result<HeaderValue, String>),
    /// `credentials`: the service account's token flow.
    Account(Box<Account>),
}

impl Auth {
    pub fn new(target: &Target) -> Option<Auth> {
        match target.vertex_auth.as_ref()? {
            VertexAuth::AccessToken(t) => {
                Some(Auth::Static(secret(bearer(t.expose())).ok_or_else(|| {
                    "vertex: the accessToken is not a valid header value".into()
                })))
            }
            VertexAuth::ServiceAccount(sa) => Some(Auth::Account(Box::new(Account::new(
                sa,
                target.connect_timeout,
            )))),
        }
    }

    /// The bearer header when it is ready without a request (a static token, or a cached token
    /// that is not due for refresh).
    pub fn ready(&self) -> Option<Result<HeaderValue, String>> {
        match self {
            Auth::Static(v) => Some(v.clone()),
            Auth::Account(a) => a.cached().map(Ok),
        }
    }

    /// The bearer header, fetching a token when none is cached. `Err` is a detail for the
    /// attempt's CONNECTION_ERROR.
    pub async fn get(&self, client: &HttpClient) -> Result<HeaderValue, String> {
        match self {
            Auth::Static(v) => v.clone(),
            Auth::Account(a) => a.token(client).await,
        }
    }
}

/// A service account's signing key, token endpoint and token cache.
pub struct Account {
    client_email: String,
    token_uri: Result<Uri, String>,
    key: Result<RsaKeyPair, String>,
    timeout: Duration,
    rng: SystemRandom,
    cache: RwLock<Option<Cached>>,
    /// Held by the one request fetching a token; the others wait for it and take its result.
    flight: tokio::sync::Mutex<Option<String>>,
    /// Token fetches finished (successful or not): a waiter that saw it change while waiting
    /// takes the fetch's result instead of fetching again.
    fetches: AtomicU64,
}

struct Cached {
    value: HeaderValue,
    refresh_at: Instant,
}

impl Account {
    fn new(sa: &ServiceAccount, timeout: Duration) -> Account {
        let key = PrivatePkcs8KeyDer::from_pem_slice(sa.private_key.expose().as_bytes())
            .map_err(|_| ())
            .and_then(|der| RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).map_err(|_| ()))
            .map_err(|()| {
                format!(
                    "vertexToken: the private key in `{}` is not an RSA PKCS#8 key",
                    sa.file
                )
            });
        let token_uri = sa
            .token_uri
            .parse::<Uri>()
            .map_err(|_| format!("vertexToken: `token_uri` in `{}` is not a URL", sa.file));
        Account {
            client_email: sa.client_email.clone(),
            token_uri,
            key,
            timeout,
            rng: SystemRandom::new(),
            cache: RwLock::new(None),
            flight: tokio::sync::Mutex::new(None),
            fetches: AtomicU64::new(0),
        }
    }

    fn cached(&self) -> Option<HeaderValue> {
        let cache = self.cache.read().ok()?;
        let c = cache.as_ref()?;
        (Instant::now() < c.refresh_at).then(|| c.value.clone())
    }

    /// Single flight: the first caller that finds no fresh token fetches one; callers arriving
    /// meanwhile wait on `flight` and take that fetch's token or its failure.
    async fn token(&self, client: &HttpClient) -> Result<HeaderValue, String> {
        let seen = self.fetches.load(Ordering::Acquire);
        let mut flight = self.flight.lock().await;
        if let Some(v) = self.cached() {
            return Ok(v);
        }
        if self.fetches.load(Ordering::Acquire) != seen {
            if let Some(failure) = flight.as_ref() {
                return Err(failure.clone());
            }
        }
        let result = tokio::time::timeout(self.timeout, self.fetch(client))
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "vertexToken: no answer from the token endpoint within {} ms",
                    self.timeout.as_millis()
                ))
            });
        *flight = result.as_ref().err().cloned();
        self.fetches.fetch_add(1, Ordering::Release);
        let (value, expires_in) = result?;
        let refresh_at = Instant::now() + expires_in.saturating_sub(REFRESH_MARGIN);
        if let Ok(mut cache) = self.cache.write() {
            *cache = Some(Cached {
                value: value.clone(),
                refresh_at,
            });
        }
        Ok(value)
    }

    /// One JWT bearer grant: the token header value and its lifetime.
    async fn fetch(&self, client: &HttpClient) -> Result<(HeaderValue, Duration), String> {
        let uri = self.token_uri.clone()?;
        let assertion = self.assertion()?;
        let form = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let mut req = http::Request::new(Full::new(Bytes::from(form)));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = uri;
        let h = req.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        h.insert(ACCEPT, HeaderValue::from_static("application/json"));
        let resp = client
            .request(req)
            .await
            .map_err(|e| format!("vertexToken: cannot reach the token endpoint: {e}"))?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_TOKEN_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| format!("vertexToken: reading the token answer: {e}"))?
            .to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).map_err(|_| {
            format!("vertexToken: the token endpoint answered {status} with a non-JSON body")
        })?;
        if !status.is_success() {
            // OAuth error codes (`invalid_grant`, …) are not secret; descriptions are not shown.
            let code = json
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("unknown");
            return Err(format!(
                "vertexToken: the token endpoint answered {status} ({})",
                code.chars().take(64).collect::<String>()
            ));
        }
        let token = json
            .get("access_token")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or("vertexToken: the token answer has no access_token")?;
        let expires_in = json
            .get("expires_in")
            .and_then(serde_json::Value::as_u64)
            .ok_or("vertexToken: the token answer has no expires_in")?;
        let value = secret(bearer(token))
            .ok_or("vertexToken: the access_token is not a valid header value")?;
        Ok((value, Duration::from_secs(expires_in)))
    }

    /// The signed JWT (RS256) asking for a cloud-platform token.
    fn assertion(&self) -> Result<String, String> {
        let key = self.key.as_ref().map_err(Clone::clone)?;
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| "vertexToken: the system clock is before 1970".to_string())?
            .as_secs();
        let aud = self.token_uri.as_ref().map_err(Clone::clone)?.to_string();
        let claims = serde_json::json!({
            "iss": self.client_email,
            "scope": SCOPE,
            "aud": aud,
            "iat": iat,
            "exp": iat + ASSERTION_LIFETIME_SECONDS,
        });
        let mut jwt = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(claims.to_string(), &mut jwt);
        let mut signature = vec![0; key.public().modulus_len()];
        key.sign(&RSA_PKCS1_SHA256, &self.rng, jwt.as_bytes(), &mut signature)
            .map_err(|_| "vertexToken: signing the assertion failed".to_string())?;
        jwt.push('.');
        URL_SAFE_NO_PAD.encode_string(&signature, &mut jwt);
        Ok(jwt)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_body_loses_model_and_gains_the_vertex_version() {
        let body = br#"{"model":"claude-x","max_tokens":5,"anthropic_version":"2023-06-01","messages":[{"role":"user","content":"hi"}]}"#;
        let out: serde_json::Value = serde_json::from_slice(&vertex_body(body).unwrap()).unwrap();
        assert!(out.get("model").is_none());
        assert_eq!(out["anthropic_version"], ANTHROPIC_VERSION);
        assert_eq!(out["max_tokens"], 5);
        assert_eq!(out["messages"][0]["content"], "hi");
        assert!(vertex_body(b"[1]").is_err());
    }

    #[test]
    fn publishers_by_model_name() {
        assert_eq!(
            VertexPublisher::of("claude-sonnet-4@20250514"),
            VertexPublisher::Anthropic
        );
        assert_eq!(
            VertexPublisher::of("gemini-2.5-pro"),
            VertexPublisher::Google
        );
        assert_eq!(VertexPublisher::Google.format(), Dialect::Gemini);
        assert_eq!(
            VertexPublisher::Anthropic.format(),
            Dialect::AnthropicMessages
        );
        assert_eq!(encode_segment("claude-3@2024"), "claude-3@2024");
        assert_eq!(encode_segment("a/b?c"), "a%2Fb%3Fc");
    }
}
