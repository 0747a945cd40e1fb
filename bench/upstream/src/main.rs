//! An upstream that is not the bottleneck: answers `POST /v1/chat/completions` from bytes rendered
//! before the first request. bench/run captures them from the running mock (`sidetrack mock`), so
//! the answers are byte for byte the mock's (which frames as OpenAI does); this server only replays
//! them, on one thread, with no JSON parsing.
//!
//! Usage: upstream LISTEN JSON_FILE JSON_CONTENT_TYPE SSE_FILE SSE_USAGE_FILE SSE_CONTENT_TYPE
//!
//! - a body without `"stream": true` gets JSON_FILE (content-length framing, as the mock);
//! - `"stream": true` gets SSE_FILE, or SSE_USAGE_FILE when the body also has
//!   `"include_usage": true` (sidetrack asks its OpenAI upstreams for usage on every stream);
//!   one body frame per event (chunked transfer framing, as the mock).
//!
//! The request is read whole (one frame in practice) and searched for those two keys, byte by byte.
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// A pre-rendered event stream: one frame per SSE event.
struct Events {
    parts: Rc<[Bytes]>,
    next: usize,
}

impl Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let i = self.next;
        self.next += 1;
        Poll::Ready(self.parts.get(i).map(|b| Ok(Frame::data(b.clone()))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.parts.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default() // no length: chunked, as the mock and OpenAI send streams
    }
}

enum Answer {
    Whole(Full<Bytes>),
    Stream(Events),
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Answer::Whole(b) => Pin::new(b).poll_frame(cx),
            Answer::Stream(e) => Pin::new(e).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Whole(b) => b.is_end_stream(),
            Answer::Stream(e) => e.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Whole(b) => b.size_hint(),
            Answer::Stream(e) => e.size_hint(),
        }
    }
}

struct Canned {
    json: Bytes,
    json_type: HeaderValue,
    sse: Rc<[Bytes]>,
    sse_usage: Rc<[Bytes]>,
    sse_type: HeaderValue,
}

/// Whether `"KEY"` is followed (after optional whitespace and a colon) by `true`.
fn key_is_true(body: &[u8], key: &[u8]) -> bool {
    let mut from = 0;
    while let Some(at) = find(&body[from..], key) {
        let mut i = from + at + key.len();
        while i < body.len() && matches!(body[i], b' ' | b'\t' | b'\r' | b'\n' | b':') {
            i += 1;
        }
        if body[i..].starts_with(b"true") {
            return true;
        }
        from += at + key.len();
    }
    false
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The SSE body split after each blank line, so each event is its own frame.
fn events(all: Bytes) -> Rc<[Bytes]> {
    let mut parts = Vec::new();
    let mut start = 0;
    while let Some(at) = find(&all[start..], b"\n\n") {
        let end = start + at + 2;
        parts.push(all.slice(start..end));
        start = end;
    }
    if start < all.len() {
        parts.push(all.slice(start..));
    }
    parts.into()
}

const REQUEST_ID: HeaderValue = HeaderValue::from_static("req_bench_upstream");

async fn answer(
    canned: Rc<Canned>,
    req: Request<Incoming>,
) -> Result<Response<Answer>, hyper::Error> {
    if req.method() != Method::POST || req.uri().path() != "/v1/chat/completions" {
        let mut r = Response::new(Answer::Whole(Full::new(Bytes::new())));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return Ok(r);
    }
    let body = req.into_body().collect().await?.to_bytes();
    let (answer, ctype) = if key_is_true(&body, b"\"stream\"") {
        let parts = if key_is_true(&body, b"\"include_usage\"") {
            &canned.sse_usage
        } else {
            &canned.sse
        };
        (
            Answer::Stream(Events {
                parts: parts.clone(),
                next: 0,
            }),
            canned.sse_type.clone(),
        )
    } else {
        (
            Answer::Whole(Full::new(canned.json.clone())),
            canned.json_type.clone(),
        )
    };
    let mut r = Response::new(answer);
    r.headers_mut().insert(CONTENT_TYPE, ctype);
    r.headers_mut().insert("x-request-id", REQUEST_ID);
    Ok(r)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, json, json_type, sse, sse_usage, sse_type] = args.as_slice() else {
        return Err("usage: upstream LISTEN JSON_FILE JSON_CONTENT_TYPE SSE_FILE SSE_USAGE_FILE SSE_CONTENT_TYPE".into());
    };
    let read = |p: &str| {
        std::fs::read(p)
            .map(Bytes::from)
            .map_err(|e| format!("{p}: {e}"))
    };
    let canned = Rc::new(Canned {
        json: read(json)?,
        json_type: HeaderValue::from_str(json_type)?,
        sse: events(read(sse)?),
        sse_usage: events(read(sse_usage)?),
        sse_type: HeaderValue::from_str(sse_type)?,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listen: &str = listen;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        loop {
            let (sock, _) = listener.accept().await?;
            sock.set_nodelay(true)?;
            let canned = canned.clone();
            tokio::task::spawn_local(async move {
                let svc = service_fn(move |req| answer(canned.clone(), req));
                let _ = http1::Builder::new()
                    .keep_alive(true)
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
        #[allow(unreachable_code)]
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
