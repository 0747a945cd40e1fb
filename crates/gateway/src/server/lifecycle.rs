//! Starting and stopping a gateway: the data-plane listener, the admin listener, shutdown, reload.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use sidetrack_config::Config;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::listen::{serve, serve_io, App};
use super::{Runtime, Shared};
use crate::observe::metrics::Metrics;
use crate::observe::{RoutingLog, Traces};
use crate::routing::Picker;
use crate::state::{Clock, Health};

/// Produces a freshly loaded config for `POST /admin/reload` (the binary re-reads its file).
pub type ReloadFn = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// How to start a gateway. The defaults take both addresses from the config.
#[derive(Default)]
pub struct GatewayOptions {
    /// Overrides `server.listen`.
    pub listen: Option<SocketAddr>,
    /// Overrides `server.admin`.
    pub admin: Option<SocketAddr>,
    /// The clock breakers read (tests step a manual clock through open windows).
    pub clock: Clock,
    /// Seeds the random draws (weighted legs, P2C) for reproducible runs.
    pub seed: Option<u64>,
    pub reload: Option<ReloadFn>,
}

/// A running gateway: the data-plane and admin listeners.
pub struct GatewayHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    /// Whether the data plane speaks TLS.
    pub tls: bool,
    pub shared: Arc<Shared>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<std::io::Result<()>>>,
}

impl GatewayHandle {
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr)
    }

    /// Swaps in a new config. Requests in flight keep the config they started with.
    pub fn reload(&self, config: Config) {
        self.shared.apply(config);
    }

    /// Serves one data-plane connection over `io` — an in-memory pipe — with the listener's
    /// bounds, until it closes (fuzz targets and tests feed raw request bytes through it).
    pub async fn serve_connection<S>(&self, io: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        serve_io(self.shared.clone(), io, self.shutdown.subscribe()).await;
    }

    /// Exports every span recorded so far to `logging.otlpEndpoint` (waits up to 5 s; a no-op
    /// when tracing is off). The exporter otherwise sends batches every few seconds.
    pub async fn flush_traces(&self) -> Result<(), String> {
        self.shared.metrics.traces().flush().await
    }

    /// Stops accepting, lets in-flight requests finish (bounded by `grace`), exports the spans
    /// still queued (up to 5 s more when tracing is on), writes the routing records still queued,
    /// then returns.
    pub async fn shutdown(mut self, grace: Duration) -> std::io::Result<()> {
        self.shared.ready.store(false, Ordering::Relaxed);
        let _ = self.shutdown.send(true);
        let mut result = Ok(());
        let deadline = tokio::time::Instant::now() + grace;
        for task in self.tasks.iter_mut() {
            match tokio::time::timeout_at(deadline, &mut *task).await {
                Ok(Ok(Err(e))) => result = Err(e),
                Ok(Err(e)) => result = Err(std::io::Error::other(e)),
                Ok(Ok(Ok(()))) => {}
                Err(_) => task.abort(),
            }
        }
        if let Err(e) = self.shared.metrics.traces().close().await {
            tracing::warn!("exporting the last spans at shutdown: {e}");
        }
        // Every request has finished (or been cut): write the routing records still queued.
        let log = self.shared.log.clone();
        let _ = tokio::task::spawn_blocking(move || log.close()).await;
        result
    }
}

async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}

/// Keeps the shared breaker states in step until shutdown (state.redis only): pushed transitions
/// plus a pull every `syncMilliseconds` (see `Health::keep_shared_state`).
fn sync_shared_state(
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        shared.health.keep_shared_state(stop).await;
        Ok(())
    })
}

/// Binds the data-plane and admin listeners and serves until shut down.
pub async fn start(
    config: Config,
    log: RoutingLog,
    options: GatewayOptions,
) -> std::io::Result<GatewayHandle> {
    let tls = config
        .server
        .tls
        .as_ref()
        .map(super::tls::acceptor)
        .transpose()?;
    let listener = bind(options.listen.unwrap_or(config.server.listen)).await?;
    let admin_listener = bind(options.admin.unwrap_or(config.server.admin)).await?;
    let addr = listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let traces = Traces::from_config(config.logging.otlp_endpoint.as_deref())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let metrics = Arc::new(Metrics::for_log(&log).with_traces(traces));
    let health = Health::new(options.clock, metrics.clone(), &config);
    let limiter = Arc::new(crate::state::limits::RateLimiter::new(health.store()));
    let idempotency = crate::state::idempotency::Idempotency::new(health.store());
    let store = crate::state::store::Store::new(&config.cache, health.store(), metrics.clone());
    let shared = Arc::new(Shared {
        health,
        runtime: ArcSwap::from_pointee(Runtime::new(config)),
        log,
        ready: AtomicBool::new(true),
        metrics,
        picker: options.seed.map(Picker::seeded).unwrap_or_default(),
        walked: AtomicU64::new(0),
        fell_back: AtomicU64::new(0),
        reload: options.reload,
        limiter,
        idempotency,
        store,
        dash: Default::default(),
    });
    warn_if_fds_run_out_first(shared.runtime.load().config.server.max_connections);
    let (tx, rx) = watch::channel(false);
    let mut tasks = vec![
        serve(
            listener,
            App::data_plane(shared.clone()),
            tls.clone(),
            shared.clone(),
            rx.clone(),
        ),
        serve(
            admin_listener,
            App::admin(crate::admin::router(shared.clone())),
            None,
            shared.clone(),
            rx.clone(),
        ),
    ];
    // Up until a shared store says otherwise; without one nothing can be down (a 0 here would read
    // as "down" to every dashboard and alert of a single-process gateway).
    shared.metrics.state_backend_up(true);
    tasks.push(crate::admin::history::spawn_sampler(
        shared.clone(),
        rx.clone(),
    ));
    if shared.health.sync_interval().is_some() {
        tasks.push(sync_shared_state(shared.clone(), rx));
    }
    Ok(GatewayHandle {
        addr,
        admin_addr,
        tls: tls.is_some(),
        shared,
        shutdown: tx,
        tasks,
    })
}

/// Connections one listener holds at most: `server.maxConnections`, capped so that caller
/// sockets can never take the descriptors the gateway needs — a third of the open-file limit (less
/// 64 for files, Redis and the like) per listener, leaving a third for upstream connections.
pub(crate) fn connection_cap(max_connections: usize) -> usize {
    match open_file_limit() {
        Some(limit) => {
            let share = usize::try_from(limit.saturating_sub(64) / 3).unwrap_or(usize::MAX);
            max_connections.min(share.max(16))
        }
        None => max_connections,
    }
}

/// Says so when the open-file limit caps `server.maxConnections` ([`connection_cap`]).
fn warn_if_fds_run_out_first(max_connections: usize) {
    let cap = connection_cap(max_connections);
    if cap < max_connections {
        tracing::warn!(
            open_file_limit = open_file_limit().unwrap_or(0),
            max_connections,
            connections_per_listener = cap,
            "the open-file limit caps server.maxConnections: each listener holds at most \
             connections_per_listener connections (past it new ones wait until others close); \
             raise the limit (ulimit -n, LimitNOFILE) to allow more"
        );
    }
}

/// The soft `RLIMIT_NOFILE` as Linux reports it in /proc/self/limits (`None` elsewhere).
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.strip_prefix("Max open files")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
