//! Providers: the only place outbound requests and HTTP clients are built. One file per provider
//! kind, each with the same functions (`build_request`, `classify_stream_event`).

mod openai;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sidetrack_config::{Config, ProviderKind, Target};
use sidetrack_dialects::sse::SseEvent;
use sidetrack_dialects::{ParsedRequest, StreamEvent};

pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

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

/// Why an outbound request could not be built (a config problem surfaced at request time).
#[derive(Debug)]
pub struct BuildError(pub String);

/// The upstream request for one attempt.
pub fn build_request(
    target: &Target,
    model: &str,
    req: &ParsedRequest,
) -> Result<http::Request<Full<Bytes>>, BuildError> {
    match target.provider {
        ProviderKind::OpenAi => openai::build_request(target, model, req),
        other => Err(BuildError(format!(
            "provider kind `{}` is not supported yet (arrives with multi-dialect support)",
            other.as_str()
        ))),
    }
}

/// What one event of this provider's stream means (preamble, content, error, done).
pub fn classify_stream_event(kind: ProviderKind, ev: &SseEvent) -> StreamEvent {
    match kind {
        ProviderKind::OpenAi | ProviderKind::Anthropic | ProviderKind::Bedrock => {
            openai::classify_stream_event(ev)
        }
    }
}
