//! The listeners: one accept loop for plain TCP and TLS, one hyper connection task per socket,
//! graceful drain when `stop` turns true.
//!
//! The data plane's dialect POST routes go straight from hyper to [`super::handle`]; everything
//! else (models, health, Bedrock paths, 404/405) goes through the axum router. Skipping the router
//! for the hot routes saves its per-request work (route lookup, boxed handler future, extensions,
//! url params) — see docs/decisions/0003-hot-path.md.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use axum::Router;
use http::{Method, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::Shared;

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

    pub fn router(router: Router) -> App {
        App {
            router: TowerToHyperService::new(router),
            data_plane: None,
        }
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for App {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: Request<Incoming>) -> Answer {
        if let Some(shared) = &self.data_plane {
            if req.method() == Method::POST {
                if let Some((path, dialect)) = super::dialect_path(req.uri().path()) {
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
                    return Box::pin(futures_util::FutureExt::map(handled, Ok));
                }
            }
        }
        Box::pin(hyper::service::Service::call(&self.router, req))
    }
}

/// Accepts on `listener` (TLS when `tls` is set) and serves `app` until `stop` turns true, then
/// stops accepting and lets open connections finish their requests.
pub fn serve(
    listener: TcpListener,
    app: App,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let builder = Builder::new(TokioExecutor::new());
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => break,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (app, builder, tls) = (app.clone(), builder.clone(), tls.clone());
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                match tls {
                    None => connection(builder, watcher, tcp, app).await,
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            connection(builder, watcher, stream, app).await;
                        }
                    }
                }
            });
        }
        drop(listener);
        graceful.shutdown().await;
        Ok(())
    })
}

async fn connection<S>(
    builder: Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    io: S,
    app: App,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), app);
    // A connection that ends in an error (peer reset, bad request line) concerns only that peer.
    let _ = watcher.watch(conn.into_owned()).await;
}

/// A failed `accept`: errors about one connection are skipped; anything else (out of file
/// descriptors, ...) is logged and retried after a pause, so a full fd table does not spin a core.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted
    ) {
        return;
    }
    tracing::error!(error = %e, "accept failed; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
