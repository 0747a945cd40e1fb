//! Providers: the only place outbound requests and HTTP clients are built. One file per provider
//! kind, each with the same function (`request`) that turns a body in the provider's format into
//! the HTTP request (URL, auth, headers, signing).

mod anthropic;
mod azure;
mod bedrock;
mod gemini;
mod openai;
pub mod pool;
pub mod vertex;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use sidetrack_config::{Config, ProviderKind, Target};
use sidetrack_dialects::Dialect;

pub use pool::HttpClient;

static UA: http::HeaderValue =
    http::HeaderValue::from_static(concat!("sidetrack/", env!("CARGO_PKG_VERSION")));

/// One pool of keep-alive connections per target (its connect timeout lives in the connector), and
/// the parts of its requests that never change.
pub struct Upstreams {
    targets: Vec<(HttpClient, Endpoint)>,
}

impl Upstreams {
    pub fn new(cfg: &Config) -> Upstreams {
        Upstreams {
            targets: cfg
                .targets
                .iter()
                .map(|t| (client(t.connect_timeout), Endpoint::new(t)))
                .collect(),
        }
    }

    pub fn client(&self, target_index: usize) -> &HttpClient {
        &self.targets[target_index].0
    }

    pub fn endpoint(&self, target_index: usize) -> &Endpoint {
        &self.targets[target_index].1
    }

    /// The bearer an attempt on this target must carry when its provider fetches one (Vertex):
    /// `Ok(None)` for other kinds; a cached token without waiting; otherwise one fetched now
    /// (one fetch for all the requests waiting on it). `Err` is the detail of the attempt's
    /// CONNECTION_ERROR (the token endpoint failed).
    pub async fn bearer(&self, target_index: usize) -> Result<Option<HeaderValue>, String> {
        let (client, endpoint) = &self.targets[target_index];
        let Some(auth) = &endpoint.vertex else {
            return Ok(None);
        };
        if let Some(ready) = auth.ready() {
            return ready.map(Some);
        }
        // The fetch's future is boxed: only requests that wait for a token pay for its size.
        Box::pin(auth.get(client)).await.map(Some)
    }
}

/// What every request to one target shares, built once per config so the request path neither
/// formats nor parses it: the URIs of the provider's fixed paths, the `Host` header and the
/// credential header value.
pub struct Endpoint {
    uris: Vec<(&'static str, Uri)>,
    /// Set for plain-HTTP targets only (HTTP/1); over TLS the client fills it in, since the
    /// connection may turn out to be HTTP/2, which carries the authority itself.
    host: Option<HeaderValue>,
    /// The provider's credential header value (sensitive); `Err` when the key cannot be a header.
    credential: Option<Result<HeaderValue, ()>>,
    /// The target's `headers` (SPEC §13), values marked sensitive; checked at load.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// `provider: vertex`: its token (static, or the service account's cached token flow).
    vertex: Option<vertex::Auth>,
}

impl Endpoint {
    fn new(target: &Target) -> Endpoint {
        let (paths, credential): (&[&'static str], fn(&str) -> String) = match target.provider {
            ProviderKind::OpenAi => (openai::PATHS, bearer),
            ProviderKind::Anthropic => (anthropic::PATHS, str::to_owned),
            ProviderKind::Bedrock => (&[], bearer),
            ProviderKind::Azure if target.api_key.is_some() => (azure::PATHS, str::to_owned),
            ProviderKind::Azure => (azure::PATHS, bearer),
            ProviderKind::Vertex => (&[], bearer),
            ProviderKind::Gemini => (&[], str::to_owned),
        };
        let uris = paths
            .iter()
            .filter_map(|p| Some((*p, join(&target.base_url, p).ok()?)))
            .collect();
        let host = target
            .base_url
            .parse::<Uri>()
            .ok()
            .filter(|u| u.scheme() == Some(&http::uri::Scheme::HTTP))
            .and_then(|u| HeaderValue::from_str(u.authority()?.as_str()).ok());
        let credential = target
            .api_key
            .as_ref()
            .or(target.entra_token.as_ref())
            .map(|k| secret(credential(k.expose())).ok_or(()));
        // Validated at load (token names, no control characters); anything else is skipped.
        let headers = target
            .headers
            .iter()
            .filter_map(|(name, value)| {
                Some((
                    HeaderName::from_bytes(name.as_bytes()).ok()?,
                    secret(value.expose().to_owned())?,
                ))
            })
            .collect();
        Endpoint {
            uris,
            host,
            credential,
            headers,
            vertex: vertex::Auth::new(target),
        }
    }

    /// The target's URI for `path`: prepared for the provider's fixed paths, built otherwise.
    fn uri(&self, target: &Target, path: &str) -> Result<Uri, BuildError> {
        match self.uris.iter().find(|(p, _)| *p == path) {
            Some((_, uri)) => Ok(uri.clone()),
            None => join(&target.base_url, path).map_err(|e| {
                BuildError(format!("target `{}`: bad upstream URL: {e}", target.name))
            }),
        }
    }

    fn credential(&self, target: &Target) -> Result<Option<HeaderValue>, BuildError> {
        match &self.credential {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v.clone())),
            Some(Err(())) => Err(BuildError(format!(
                "target `{}`: the key is not a valid header value",
                target.name
            ))),
        }
    }
}

fn join(base: &str, path: &str) -> Result<Uri, http::uri::InvalidUri> {
    format!("{base}{path}").parse()
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// A credential as a header value, marked sensitive (never logged); `None` if it cannot be one.
fn secret(value: String) -> Option<HeaderValue> {
    let mut v = HeaderValue::try_from(value).ok()?;
    v.set_sensitive(true);
    Some(v)
}

pub(crate) fn client(connect_timeout: Duration) -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(60)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    HttpClient::new(https, Duration::from_secs(90))
}

/// Why an outbound request could not be built (a config or credentials problem surfaced at
/// request time; classified UNROUTABLE).
#[derive(Debug)]
pub struct BuildError(pub String);

/// The wire format sidetrack speaks to `target` for `model` and a caller of `caller` — the one
/// place a destination's format is decided (eligibility and the attempt both ask it). Vertex
/// depends on the model's publisher (Anthropic Messages for `claude-*`, Gemini otherwise); every
/// other provider on its kind only ([`format_for`]).
pub fn format_for_dest(target: &Target, model: &str, caller: Dialect) -> Dialect {
    match (target.provider, caller) {
        // Vertex's embeddings (`:predict`) are not served (SPEC §12): a format that refuses the
        // request makes the destination `INELIGIBLE:translation`.
        (ProviderKind::Vertex, Dialect::OpenAiEmbeddings) => Dialect::AnthropicMessages,
        (ProviderKind::Vertex, _) => vertex::VertexPublisher::of(model).format(),
        (kind, _) => format_for(kind, caller),
    }
}

/// The wire format sidetrack speaks to a provider of `kind` for a caller of `caller`: the caller's
/// own format whenever the provider serves it (then the body passes through), else the provider's
/// main format (then the request is translated). Vertex's depends on the model: use
/// [`format_for_dest`].
fn format_for(kind: ProviderKind, caller: Dialect) -> Dialect {
    match (kind, caller) {
        (ProviderKind::OpenAi, Dialect::OpenAiResponses) => Dialect::OpenAiResponses,
        // Embeddings (SPEC §12): OpenAI's own endpoint; Bedrock's embedding models through
        // InvokeModel (Titan, Cohere); Google AI's `batchEmbedContents` (a Gemini-format body,
        // `gemini::embeddings`); Anthropic has none (the request cannot be translated).
        (ProviderKind::OpenAi, Dialect::OpenAiEmbeddings) => Dialect::OpenAiEmbeddings,
        (ProviderKind::Bedrock, Dialect::OpenAiEmbeddings) => Dialect::BedrockInvoke,
        (ProviderKind::OpenAi, _) => Dialect::OpenAiChat,
        (ProviderKind::Anthropic, _) => Dialect::AnthropicMessages,
        (ProviderKind::Bedrock, Dialect::BedrockInvoke) => Dialect::BedrockInvoke,
        (ProviderKind::Bedrock, _) => Dialect::BedrockConverse,
        // Azure OpenAI speaks OpenAI's formats (its Responses through the v1 API).
        (ProviderKind::Azure, Dialect::OpenAiResponses) => Dialect::OpenAiResponses,
        (ProviderKind::Azure, Dialect::OpenAiEmbeddings) => Dialect::OpenAiEmbeddings,
        (ProviderKind::Azure, _) => Dialect::OpenAiChat,
        // By the model's publisher (`format_for_dest`); this arm is Anthropic's.
        (ProviderKind::Vertex, _) => Dialect::AnthropicMessages,
        // Chat, and embeddings through `batchEmbedContents` (the provider picks the operation).
        (ProviderKind::Gemini, _) => Dialect::Gemini,
    }
}

/// What one attempt sends.
pub struct Outbound<'a> {
    pub target: &'a Target,
    pub endpoint: &'a Endpoint,
    pub model: &'a str,
    /// The format of `body` (from [`format_for_dest`]).
    pub format: Dialect,
    pub body: Bytes,
    pub stream: bool,
    /// The caller asked for embeddings (`POST /v1/embeddings`): providers whose embeddings
    /// endpoint differs from their chat one by more than the format pick it by this.
    pub embeddings: bool,
    /// The caller's headers, for the few that are forwarded (`anthropic-version`, `anthropic-beta`;
    /// Bedrock's `x-amzn-bedrock-guardrailidentifier`, `-guardrailversion`, `-trace`).
    pub caller_headers: &'a HeaderMap,
    /// The `Authorization` value fetched before the request is built (Vertex's OAuth token).
    pub bearer: Option<HeaderValue>,
}

/// The HTTP request for one attempt.
pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    match out.target.provider {
        ProviderKind::OpenAi => openai::request(out),
        ProviderKind::Anthropic => anthropic::request(out),
        ProviderKind::Bedrock => bedrock::request(out),
        ProviderKind::Azure => azure::request(out),
        ProviderKind::Vertex => vertex::request(out),
        ProviderKind::Gemini => gemini::request(out),
    }
}

/// A POST of `out.body` to `path` on the target, with the headers every provider sends and the
/// target's own `headers` (room is reserved for the provider's own few). Providers add theirs
/// after this, so a header the provider sets for a request wins; Bedrock signs after, so SigV4
/// covers the target's headers.
fn post(out: Outbound<'_>, path: &str) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let mut req = http::Request::new(Full::new(out.body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = out.endpoint.uri(out.target, path)?;
    let h = req.headers_mut();
    h.reserve(8 + out.endpoint.headers.len());
    h.insert(http::header::USER_AGENT, UA.clone());
    for (name, value) in &out.endpoint.headers {
        h.insert(name.clone(), value.clone());
    }
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(host) = &out.endpoint.host {
        h.insert(http::header::HOST, host.clone());
    }
    Ok(req)
}
