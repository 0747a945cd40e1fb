//! `provider: openai` — any OpenAI-compatible upstream. `baseUrl` includes `/v1`.

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderValue, Method};
use http_body_util::Full;
use sidetrack_config::Target;
use sidetrack_dialects::sse::SseEvent;
use sidetrack_dialects::{openai_chat, Dialect, ParsedRequest, StreamEvent};

use super::BuildError;

static UA: HeaderValue = HeaderValue::from_static(concat!("sidetrack/", env!("CARGO_PKG_VERSION")));

pub fn build_request(
    target: &Target,
    model: &str,
    req: &ParsedRequest,
) -> Result<http::Request<Full<Bytes>>, BuildError> {
    let (path, body) = match req.dialect {
        Dialect::OpenAiChat => ("/chat/completions", openai_chat::render_request(req, model)),
        other => {
            return Err(BuildError(format!(
                "translating {} requests to provider `openai` is not supported yet",
                other.as_str()
            )))
        }
    };
    let mut url = String::with_capacity(target.base_url.len() + path.len());
    url.push_str(&target.base_url);
    url.push_str(path);
    let mut builder = http::Request::builder()
        .method(Method::POST)
        .uri(url)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(USER_AGENT, UA.clone());
    if req.stream {
        builder = builder.header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    }
    if let Some(key) = &target.api_key {
        let mut v = HeaderValue::try_from(format!("Bearer {}", key.expose())).map_err(|_| {
            BuildError(format!(
                "target `{}`: apiKey is not a valid header value",
                target.name
            ))
        })?;
        v.set_sensitive(true);
        builder = builder.header(AUTHORIZATION, v);
    }
    builder.body(Full::new(body)).map_err(|e| {
        BuildError(format!(
            "target `{}`: bad upstream request: {e}",
            target.name
        ))
    })
}

pub fn classify_stream_event(ev: &SseEvent) -> StreamEvent {
    openai_chat::classify_stream_event(ev)
}
