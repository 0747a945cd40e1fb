//! The listeners: one accept loop for plain TCP and TLS, one hyper connection task per socket,
//! the connection bounds of SPEC §14, graceful drain when `stop` turns true.
//!
//! Bounds, the same on the data plane and the admin port:
//! - at most `server.maxConnections` open connections per listener. A permit is taken *before*
//!   `accept` and held by the connection task, so past the limit new connections wait in the
//!   kernel's backlog; an `accept` that fails for want of file descriptors waits for one of ours
//!   to close (or 1 s) and tries again, it never stops the loop;
//! - the request head within `server.headerReadTimeoutMilliseconds` (TLS handshake included),
//!   no request in flight for `server.idleTimeoutMilliseconds`, a peer that takes no written byte
//!   for as long: see [`super::watchdog`];
//! - the whole body within `server.bodyReadTimeoutMilliseconds`: where the body is read
//!   (`server::read_body`), so the caller gets a 408 in its own dialect.
//!
//! The timeouts are read from the config in force when a connection is accepted (a reload applies
//! to new connections); `maxConnections` when the listener starts.
//!
//! The data plane's dialect POST routes go straight from hyper to [`super::handle`]; everything
//! else (models, health, Bedrock paths, 404/405) goes through the axum router. Skipping the router
//! for the hot routes saves its per-request work (route lookup, boxed handler future, extensions,
//! url params) — see docs/decisions/0003-hot-path.md. A request carrying `Origin` takes the
//! cross-site path first, whichever route it is for ([`super::cors`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use http::header::{HeaderValue, ORIGIN};
use http::{Method, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::watchdog::{ConnWatch, InFlight, SideWaker, Timeouts, Tracked, Watched};
use super::{cors, paths, Shared};

/// What a listener serves: an axum router, and for the data plane the direct dialect routes.
#[derive(Clone)]
pub struct App {
    router: TowerToHyperService<Router>,
    data_plane: Option<Arc<Shared>>,
}

impl App {
    pub fn data_plane(shared: Arc<Shared>) -> App {
        App {
            router: TowerToHyperService::new(super::router(shared.clone())),
            data_plane: Some(shared),
        }
    }

    pub fn admin(router: Router) -> App {
        App {
            router: TowerToHyperService::new(router),
            data_plane: None,
        }
    }

    /// Answers one request; `guard` keeps it in flight until its response body is done.
    fn call(&self, req: Request<Incoming>, guard: InFlight) -> Answer {
        if let Some(shared) = &self.data_plane {
            // Browsers send `Origin` on cross-site requests; API clients seldom do (one lookup).
            if let Some(origin) = req.headers().get(ORIGIN) {
                let origin = origin.clone();
                return self.cross_site(shared, origin, req, guard);
            }
        }
        self.dispatch(req, guard)
    }

    fn dispatch(&self, req: Request<Incoming>, guard: InFlight) -> Answer {
        if let Some(shared) = &self.data_plane {
            if req.method() == Method::POST {
                if let Some((path, dialect)) = paths::dialect_path(req.uri().path()) {
                    let shared = shared.clone();
                    let (parts, body) = req.into_parts();
                    let handled = super::handle(
                        shared,
                        path.into(),
                        dialect,
                        None,
                        false,
                        parts,
                        Body::new(body),
                    );
                    // `map`, not `async move { Ok(handled.await) }`: an async block keeps the future
                    // it awaits twice (as captured and as awaited), which doubled this per-request box
                    // to 3.9 KiB (docs/decisions/0003-hot-path.md, "Fourth pass").
                    return Box::pin(futures_util::FutureExt::map(handled, move |r| {
                        Ok(guard.track(r))
                    }));
                }
            }
        }
        let routed = hyper::service::Service::call(&self.router, req);
        Box::pin(futures_util::FutureExt::map(routed, move |r| {
            r.map(|r| guard.track(r))
        }))
    }

    /// A data-plane request with `Origin`: refused, a preflight answered, or served with CORS
    /// headers when `server.allowedOrigins` lists the origin.
    fn cross_site(
        &self,
        shared: &Arc<Shared>,
        origin: HeaderValue,
        req: Request<Incoming>,
        guard: InFlight,
    ) -> Answer {
        match cors::admit(shared, &origin, &req) {
            cors::Admit::Answer(resp) => Box::pin(std::future::ready(Ok(guard.track(resp)))),
            cors::Admit::Serve => {
                let served = self.dispatch(req, guard);
                Box::pin(async move {
                    let Ok(mut resp) = served.await;
                    cors::allow(resp.headers_mut(), origin);
                    Ok(resp)
                })
            }
        }
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

/// The service of one connection: the listener's [`App`] and the connection's watchdog.
struct ConnService {
    app: App,
    watch: Arc<ConnWatch>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: Request<Incoming>) -> Answer {
        let guard = self.watch.begin(req.version());
        self.app.call(req, guard)
    }
}

fn timeouts(shared: &Shared) -> Timeouts {
    let rt = shared.runtime.load();
    let server = &rt.config.server;
    Timeouts {
        header: server.header_read_timeout,
        idle: server.idle_timeout,
    }
}

/// Accepts on `listener` (TLS when `tls` is set) and serves `app` until `stop` turns true, then
/// stops accepting and lets open connections finish their requests.
pub fn serve(
    listener: TcpListener,
    app: App,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    let max = super::lifecycle::connection_cap(shared.runtime.load().config.server.max_connections);
    tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(max));
        // Notified when a connection ends: an accept that ran out of fds waits for it.
        let closed = Arc::new(Notify::new());
        let builder = builder();
        let mut failing = false;
        loop {
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => permit,
                _ = stop.wait_for(|s| *s) => break,
            };
            let Ok(permit) = permit else { break };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => break,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => {
                    failing = false;
                    tcp
                }
                Err(e) => {
                    drop(permit);
                    if accept_failed(e, &mut failing, &closed, &mut stop).await {
                        break;
                    }
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let t = timeouts(&shared);
            let (app, builder, tls, stop, closed) = (
                app.clone(),
                builder.clone(),
                tls.clone(),
                stop.clone(),
                closed.clone(),
            );
            tokio::spawn(async move {
                let watch = Arc::new(ConnWatch::new());
                match tls {
                    None => connection(&builder, tcp, app, t, stop, watch).await,
                    Some(acceptor) => {
                        // The handshake is part of the time the head has.
                        let handshake = tokio::time::timeout(t.header, acceptor.accept(tcp));
                        if let Ok(Ok(stream)) = handshake.await {
                            connection(&builder, stream, app, t, stop, watch).await;
                        }
                    }
                }
                drop(permit);
                closed.notify_one();
            });
        }
        drop(listener);
        // Every connection task gives its permit back when it ends: having them all is the drain.
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let _ = permits.acquire_many(all).await;
        Ok(())
    })
}

/// hyper's HTTP/1 + HTTP/2 server. No hyper timer: hyper's own `header_read_timeout` (on by
/// default once a timer is set) would also close keep-alive connections idle for longer than it;
/// [`super::watchdog`] keeps the head and idle bounds apart.
fn builder() -> Builder<TokioExecutor> {
    Builder::new(TokioExecutor::new())
}

/// Serves one connection on `io` (a socket, or an in-memory pipe in tests and fuzzing) until it
/// closes, a bound ends it, or `stop` turns true and its requests are done.
pub async fn connection<S>(
    builder: &Builder<TokioExecutor>,
    io: S,
    app: App,
    t: Timeouts,
    mut stop: watch::Receiver<bool>,
    watch: Arc<ConnWatch>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = ConnService {
        app,
        watch: watch.clone(),
    };
    let io = TokioIo::new(Watched::new(io, watch.clone()));
    let mut conn = std::pin::pin!(builder.serve_connection_with_upgrades(io, service));
    let mut stopping = std::pin::pin!(stop.wait_for(|s| *s));
    let mut expired = std::pin::pin!(watch.expired(t));
    let mut draining = false;
    // Not `select!`: that would poll the stop signal and the watchdog on every wake of the
    // connection; they are polled only when their own waker fired.
    let side = SideWaker::new();
    let side_waker = std::task::Waker::from(side.clone());
    std::future::poll_fn(|cx| {
        // Ended: closed by the peer, drained, or an error that concerns only this peer.
        if conn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        if side.take(cx.waker()) {
            let mut side_cx = Context::from_waker(&side_waker);
            if !draining && stopping.as_mut().poll(&mut side_cx).is_ready() {
                draining = true;
                conn.as_mut().graceful_shutdown();
                cx.waker().wake_by_ref();
            }
            // A bound ran out: dropping the connection closes the socket.
            if expired.as_mut().poll(&mut side_cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
}

/// Serves one data-plane connection over `io` with the listener's bounds (tests and fuzz targets
/// drive the service over an in-memory pipe).
pub async fn serve_io<S>(shared: Arc<Shared>, io: S, stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let t = timeouts(&shared);
    let app = App::data_plane(shared);
    connection(&builder(), io, app, t, stop, Arc::new(ConnWatch::new())).await;
}

/// A failed `accept`. Errors about one connection are skipped. Anything else (out of file
/// descriptors, out of kernel memory) leaves the pending connections in the backlog: the loop
/// waits until one of ours closes (or 1 s, for fds held elsewhere) and tries again, logging once
/// per run of failures. Returns whether `stop` turned true meanwhile.
async fn accept_failed(
    e: std::io::Error,
    failing: &mut bool,
    closed: &Notify,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted
    ) {
        return false;
    }
    if !*failing {
        *failing = true;
        tracing::error!(
            error = %e,
            "accept failed; new connections wait until one closes \
             (raise the open-file limit or lower server.maxConnections)"
        );
    }
    tokio::select! {
        () = closed.notified() => false,
        () = tokio::time::sleep(Duration::from_secs(1)) => false,
        _ = stop.wait_for(|s| *s) => true,
    }
}
