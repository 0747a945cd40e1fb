//! Reading an upstream body within the attempt's one timer: the next data frame, the rest of a
//! body up to a cap, and joining what was read.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Sleep;

/// One timer per attempt: first set to the first-byte deadline, then to the request deadline, and
/// handed to the relay with a live answer. Each new timer is one more registration with the
/// runtime's timer wheel (and one removal); a timeout around every read made three or more per
/// streamed request (docs/decisions/0003-hot-path.md, "Fourth pass").
pub type Timer = Pin<Box<Sleep>>;

/// `fut`'s output, or `None` when `timer` fires first.
pub(super) async fn within<F: Future>(timer: &mut Timer, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

pub(super) enum Read {
    Data(Bytes),
    End,
    Failed,
    TimedOut,
}

/// Next data frame (trailers skipped), bounded by `timer`.
pub(super) async fn next_data(body: &mut Incoming, timer: &mut Timer) -> Read {
    loop {
        match within(timer, body.frame()).await {
            None => return Read::TimedOut,
            Some(None) => return Read::End,
            Some(Some(Err(_))) => return Read::Failed,
            Some(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if !data.is_empty() {
                        return Read::Data(data);
                    }
                }
            }
        }
    }
}

/// The first chunk and the rest of a body (bounded by `timer`), or `Err` with what was read once
/// more than `cap` bytes came (the rest is left unread).
pub(super) async fn read_rest(
    first: Option<Bytes>,
    body: &mut Incoming,
    timer: &mut Timer,
    cap: usize,
) -> Result<Bytes, Bytes> {
    let mut held: Vec<Bytes> = first.into_iter().collect();
    let mut size: usize = held.iter().map(Bytes::len).sum();
    while size <= cap {
        match next_data(body, timer).await {
            Read::Data(d) => {
                size += d.len();
                held.push(d);
            }
            _ => return Ok(concat(held)),
        }
    }
    Err(concat(held))
}

/// The chunks as one buffer (no copy for zero or one chunk).
pub(crate) fn concat(chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                b.extend_from_slice(&c);
            }
            b.freeze()
        }
    }
}
