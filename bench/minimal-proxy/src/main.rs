//! The "physical limit" baseline: accept HTTP/1.1, forward every request unchanged to one upstream
//! over a pooled keep-alive client (TCP_NODELAY on both sides), stream the answer back. No parsing.
//! Usage: minimal-proxy LISTEN_ADDR UPSTREAM_ADDR [--hold-first-token | --floor LOG_FILE] [--current-thread]
//!        (e.g. 127.0.0.1:18081 127.0.0.1:18080)
//!
//! It runs tokio's default multi-threaded runtime (`bench/run`'s baseline). `--current-thread`
//! runs the single-threaded one instead, which sidetrack picks on one CPU: docs/decisions/0003
//! ("Ninth pass") measures what that choice alone is worth to a proxy.
//!
//! `--hold-first-token` is the same baseline with a gateway's default commit rule added (SPEC §5.6
//! `firstToken`): an event stream's head and leading chunks are held until a chunk carries content,
//! then sent together. Its test for content is a byte search for a non-empty `"content":"…"`, which
//! is enough for the mock's OpenAI chat streams and for nothing else. It exists to show what that
//! rule costs by itself, so the gateway's own cost can be read apart from it.
//!
//! `--floor LOG_FILE` adds the per-request work SPEC requires of any gateway instead (`floor.rs`).
mod floor;
use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client, Error};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

type Upstream = Client<HttpConnector, Incoming>;

async fn forward(client: Upstream, upstream: Arc<str>, mut req: Request<Incoming>) -> Result<Response<Incoming>, Error> {
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    if let Ok(uri) = Uri::builder().scheme("http").authority(&*upstream).path_and_query(pq).build() {
        *req.uri_mut() = uri;
    }
    client.request(req).await
}

/// The held chunks, then the rest of the upstream body.
struct Held {
    held: VecDeque<Bytes>,
    rest: Incoming,
}

impl Body for Held {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.held.pop_front() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn size_hint(&self) -> SizeHint {
        if self.held.is_empty() { self.rest.size_hint() } else { SizeHint::default() }
    }
}

fn carries_content(chunk: &[u8]) -> bool {
    const KEY: &[u8] = b"\"content\":\"";
    chunk.windows(KEY.len() + 1).any(|w| w.starts_with(KEY) && w[KEY.len()] != b'"')
}

async fn forward_holding(client: Upstream, upstream: Arc<str>, req: Request<Incoming>) -> Result<Response<Held>, Error> {
    let (parts, mut rest) = forward(client, upstream, req).await?.into_parts();
    let stream = parts.headers.get(hyper::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut held = VecDeque::new();
    if stream {
        let mut size = 0;
        while size < 64 * 1024 {
            let Some(Ok(frame)) = http_body_util::BodyExt::frame(&mut rest).await else { break };
            let Ok(data) = frame.into_data() else { continue };
            size += data.len();
            let done = carries_content(&data) || data.windows(6).any(|w| w == b"[DONE]");
            held.push_back(data);
            if done {
                break;
            }
        }
    }
    Ok(Response::from_parts(parts, Held { held, rest }))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: minimal-proxy LISTEN UPSTREAM [--hold-first-token | --floor LOG_FILE] [--current-thread]".into());
    };
    let (mut mode, mut current) = (Mode::Plain, false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--hold-first-token" => mode = Mode::Hold,
            "--floor" => mode = Mode::Floor(floor::Log::start(&args.next().ok_or("--floor needs a log file")?)?),
            "--current-thread" => current = true,
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let mut rt = if current { tokio::runtime::Builder::new_current_thread() } else { tokio::runtime::Builder::new_multi_thread() };
    rt.enable_all().build()?.block_on(serve(listen, upstream, mode))
}

enum Mode {
    Plain,
    Hold,
    Floor(floor::Log),
}

async fn serve(listen: String, upstream: String, mode: Mode) -> Result<(), Box<dyn std::error::Error>> {
    let upstream: Arc<str> = upstream.into();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(2048)
        .build(connector.clone());
    // the floor sends the body it has read whole
    let buffered: floor::Upstream = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(2048)
        .build(connector);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    loop {
        let (sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        let (client, upstream) = (client.clone(), upstream.clone());
        let io = TokioIo::new(sock);
        match &mode {
            Mode::Hold => tokio::spawn(async move {
                let svc = service_fn(move |req| forward_holding(client.clone(), upstream.clone(), req));
                let _ = http1::Builder::new().serve_connection(io, svc).await;
            }),
            Mode::Floor(log) => {
                let (buffered, log) = (buffered.clone(), log.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| floor::forward(buffered.clone(), upstream.clone(), log.clone(), req));
                    let _ = http1::Builder::new().serve_connection(io, svc).await;
                })
            }
            Mode::Plain => tokio::spawn(async move {
                let svc = service_fn(move |req| forward(client.clone(), upstream.clone(), req));
                let _ = http1::Builder::new().serve_connection(io, svc).await;
            }),
        };
    }
}
