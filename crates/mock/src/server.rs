//! Listeners and connections: bind, accept (or refuse with a reset), serve HTTP/1.1 keep-alive and
//! HTTP/2 prior knowledge, shut down.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::config::{Behaviour, MockConfig};
use crate::handler;
use crate::state::Shared;

const DEFAULT_LISTEN: &str = "127.0.0.1:0";

/// A running mock provider. Dropping it stops it too; [`MockServer::shutdown`] also waits.
pub struct MockServer {
    shared: Arc<Shared>,
    addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MockServer {
    /// Binds the main listener (`listen`, or an ephemeral port on 127.0.0.1) and every extra
    /// listener, then serves in background tasks.
    pub async fn start(config: MockConfig) -> io::Result<MockServer> {
        config
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let main = (
            config.listen.as_deref().unwrap_or(DEFAULT_LISTEN),
            config.refuse_connections,
        );
        let extra = config
            .listeners
            .iter()
            .map(|l| (l.listen.as_str(), l.refuse_connections));

        let mut bound = Vec::new();
        for (listen, refuse) in std::iter::once(main).chain(extra) {
            let listener = TcpListener::bind(listen).await.map_err(|e| {
                io::Error::new(e.kind(), format!("mock: cannot listen on {listen}: {e}"))
            })?;
            bound.push((listener, refuse));
        }

        let (shutdown, _) = watch::channel(false);
        let mut switches = Vec::new();
        let mut addrs = Vec::new();
        let mut loops = Vec::new();
        for (listener, refuse) in bound {
            let (switch, refuse_rx) = watch::channel(refuse);
            addrs.push(listener.local_addr()?);
            switches.push((switch, refuse));
            loops.push((listener, refuse_rx));
        }
        let shared = Arc::new(Shared::new(config.models, switches));
        let tasks = loops
            .into_iter()
            .map(|(listener, refuse_rx)| {
                tokio::spawn(accept_loop(
                    listener,
                    refuse_rx,
                    shutdown.subscribe(),
                    shared.clone(),
                ))
            })
            .collect();
        Ok(MockServer {
            shared,
            addrs,
            shutdown,
            tasks,
        })
    }

    /// Address of the main listener.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Addresses of all listeners: the main one first, then `listeners` in config order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.addrs.clone()
    }

    /// `http://ADDR` of the main listener (an OpenAI target's baseUrl is this plus `/v1`; Anthropic
    /// and Bedrock targets use it as it is).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Requests that reached the handler for `model` (on any endpoint, any listener).
    pub fn hits(&self, model: &str) -> u64 {
        self.shared.hits(model)
    }

    /// Requests for `model` whose caller went away before the answer ended (the `cancelled` stat).
    pub fn cancelled(&self, model: &str) -> u64 {
        self.shared.cancelled(model)
    }

    pub fn total_hits(&self) -> u64 {
        self.shared.total_hits()
    }

    /// The same JSON as `GET /_mock/stats`.
    pub fn stats(&self) -> Value {
        self.shared.stats()
    }

    /// `{"path", "headers", "body"}` of the last request for `model`.
    pub fn last_request(&self, model: &str) -> Option<Value> {
        self.shared.last_request(model)
    }

    /// Replaces `model`'s behaviour (`"*"`: every unlisted model) and restarts its failure PRNG
    /// and its `failFirst` count.
    pub fn set_behaviour(&self, model: &str, behaviour: Behaviour) {
        self.shared.set_behaviour(model, behaviour);
    }

    /// Refuse (reset) connections on the main listener; turning it on also resets its open
    /// connections, so pooled keep-alive connections die too.
    pub fn set_refuse_connections(&self, on: bool) {
        self.shared.set_refuse(0, on);
    }

    /// Same as [`MockServer::set_refuse_connections`] for listener `index` in [`MockServer::addrs`]
    /// order. Returns false when there is no such listener.
    pub fn set_listener_refuse_connections(&self, index: usize, on: bool) -> bool {
        self.shared.set_refuse(index, on)
    }

    /// The token endpoint's knobs (`expires_in`, failures, signature check, extra accepted
    /// bearers); [`MockServer::reset`] restores the defaults.
    pub fn set_token_settings(&self, settings: crate::TokenSettings) {
        self.shared.set_token_settings(settings);
    }

    /// Requests the token endpoint (`POST /token`) received, good or not.
    pub fn token_requests(&self) -> u64 {
        self.shared.token_requests()
    }

    /// Zeroes stats, forgets last requests, and restores the start config's behaviours and
    /// refuse-connections settings.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// Stops accepting, aborts open connections, and waits for the listeners to close.
    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    refuse: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
    shared: Arc<Shared>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            // `wait_for` hands out a (non-Send) guard; drop it inside the branch future.
            () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let refusing = *refuse.borrow();
                    if refusing {
                        // Zero linger turns the close into an RST: the client sees a reset, not
                        // an orderly empty response.
                        let _ = stream.set_zero_linger();
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    connections.spawn(serve_connection(stream, refuse.clone(), shared.clone()));
                }
                Err(e) => {
                    // Usually out of file descriptors; back off instead of spinning.
                    tracing::warn!(error = %e, "mock: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

async fn serve_connection(
    stream: TcpStream,
    mut refuse: watch::Receiver<bool>,
    shared: Arc<Shared>,
) {
    let reset = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(ResettableStream {
        inner: stream,
        reset: reset.clone(),
    });
    let service = service_fn(move |req| handler::handle(shared.clone(), req));
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                // Includes the deliberate mid-body kills of dropAfterChunks.
                tracing::debug!(error = %e, "mock: connection ended with an error");
            }
        }
        () = async { let _ = refuse.wait_for(|on| *on).await; } => reset.store(true, Ordering::Relaxed),
    }
}

/// A TCP stream that closes with an RST instead of a FIN when `reset` is set before it drops.
struct ResettableStream {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.reset.load(Ordering::Relaxed) {
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
