//! Providers: the only place outbound requests and HTTP clients are built. One file per provider
//! kind, each with the same function (`request`) that turns a body in the provider's format into
//! the HTTP request (URL, auth, headers, signing).

mod anthropic;
mod bedrock;
mod openai;

use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_config::{Config, ProviderKind, Target};
use sidetrack_dialects::Dialect;

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

static UA: http::HeaderValue =
    http::HeaderValue::from_static(concat!("sidetrack/", env!("CARGO_PKG_VERSION")));

/// One pooled keep-alive client per target (its connect timeout lives in the connector).
pub struct Upstreams {
    clients: Vec<HttpClient>,
}

impl Upstreams {
    pub fn new(cfg: &Config) -> Upstreams {
        Upstreams {
            clients: cfg
                .targets
                .iter()
                .map(|t| client(t.connect_timeout))
                .collect(),
        }
    }

    pub fn client(&self, target_index: usize) -> &HttpClient {
        &self.clients[target_index]
    }
}

fn client(connect_timeout: Duration) -> HttpClient {
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
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .build(https)
}

/// Why an outbound request could not be built (a config or credentials problem surfaced at
/// request time; classified UNROUTABLE).
#[derive(Debug)]
pub struct BuildError(pub String);

/// The wire format sidetrack speaks to a provider of `kind` for a caller of `caller`: the caller's
/// own format whenever the provider serves it (then the body passes through), else the provider's
/// main format (then the request is translated).
pub fn format_for(kind: ProviderKind, caller: Dialect) -> Dialect {
    match (kind, caller) {
        (ProviderKind::OpenAi, Dialect::OpenAiResponses) => Dialect::OpenAiResponses,
        (ProviderKind::OpenAi, _) => Dialect::OpenAiChat,
        (ProviderKind::Anthropic, _) => Dialect::AnthropicMessages,
        (ProviderKind::Bedrock, Dialect::BedrockInvoke) => Dialect::BedrockInvoke,
        (ProviderKind::Bedrock, _) => Dialect::BedrockConverse,
    }
}

/// What one attempt sends.
pub struct Outbound<'a> {
    pub target: &'a Target,
    pub model: &'a str,
    /// The format of `body` (from [`format_for`]).
    pub format: Dialect,
    pub body: Bytes,
    pub stream: bool,
    /// The caller's headers, for the few that are forwarded (`anthropic-version`, `anthropic-beta`).
    pub caller_headers: &'a HeaderMap,
}

/// The HTTP request for one attempt.
pub fn request(out: Outbound<'_>) -> Result<http::Request<Full<Bytes>>, BuildError> {
    match out.target.provider {
        ProviderKind::OpenAi => openai::request(out),
        ProviderKind::Anthropic => anthropic::request(out),
        ProviderKind::Bedrock => bedrock::request(out),
    }
}

fn post(url: String) -> http::request::Builder {
    http::Request::builder()
        .method(http::Method::POST)
        .uri(url)
        .header(http::header::USER_AGENT, UA.clone())
}

fn secret_header(target: &Target, value: String) -> Result<http::HeaderValue, BuildError> {
    let mut v = http::HeaderValue::try_from(value).map_err(|_| {
        BuildError(format!(
            "target `{}`: the key is not a valid header value",
            target.name
        ))
    })?;
    v.set_sensitive(true);
    Ok(v)
}

fn finish(
    target: &Target,
    builder: http::request::Builder,
    body: Bytes,
) -> Result<http::Request<Full<Bytes>>, BuildError> {
    builder.body(Full::new(body)).map_err(|e| {
        BuildError(format!(
            "target `{}`: bad upstream request: {e}",
            target.name
        ))
    })
}
