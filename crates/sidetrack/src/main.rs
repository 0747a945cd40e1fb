//! The `sidetrack` binary: a thin shell over the crates (SPEC §2).

mod demo;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sidetrack_config::Config;
use sidetrack_gateway::RoutingLog;

/// jemalloc, not glibc's malloc: the blocks every request allocates over 1 KiB (its future, hyper's
/// 8 KiB read buffers) come from per-thread caches instead of glibc's sorted bins, which a burst of
/// connections leaves full of freed blocks. 8–11 % less CPU per request after such a burst, idle
/// RSS 9.8 MB instead of 8.0 (docs/decisions/0003-hot-path.md, "Thirteenth pass").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "sidetrack",
    version,
    about = "An LLM gateway that stays available when models fail"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Config file (else $SIDETRACK_CONFIG, else ./sidetrack.yaml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// On SIGTERM/SIGINT, keep accepting for this long while /readyz answers 503 (for load
        /// balancers that poll readiness), then close the listeners and drain. Counts against
        /// server.shutdownGraceMilliseconds. Default 0: close at once.
        #[arg(long, default_value_t = 0, value_name = "MS")]
        drain_delay_milliseconds: u64,
    },
    /// Built-in mock providers + a gateway + a narrated run; then keeps serving until Ctrl-C.
    Demo {
        /// Where the demo gateway listens after the narration.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where the admin plane (dashboard, /metrics) listens.
        #[arg(long, default_value = "127.0.0.1:9090")]
        admin: SocketAddr,
        /// Exit after the narration instead of serving.
        #[arg(long)]
        no_serve: bool,
    },
    /// Run the mock LLM provider.
    Mock {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        listen: Option<String>,
    },
    /// Validate a config; print every problem (and warning) as FILE:LINE:COL: path: message.
    /// Exit 0 when valid (warnings only), 1 when invalid.
    Check {
        /// The config file (or use --config).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The config file (BASE when --rule is given).
        #[arg(long)]
        config: Option<PathBuf>,
        /// An AgentCore rule body (JSON, as CreateGatewayRule takes it; one rule or an array),
        /// checked as if it were among the config's rules.
        #[arg(long, value_name = "FILE")]
        rule: Option<PathBuf>,
        /// Check without the config's secrets: a missing `env:` variable is a warning, not an error.
        #[arg(long)]
        offline: bool,
    },
    /// Print the route a request would take, and the warnings about that route.
    Explain {
        #[arg(long)]
        config: PathBuf,
        /// An AgentCore rule body added to the config's rules (as `check --rule`).
        #[arg(long, value_name = "FILE")]
        rule: Option<PathBuf>,
        /// Load without the config's secrets (as `check --offline`).
        #[arg(long)]
        offline: bool,
        #[arg(long)]
        model: String,
        #[arg(long, default_value = "anonymous")]
        principal: String,
        #[arg(long, default_value = "openai-chat")]
        dialect: String,
    },
}

/// Exit codes (SPEC §2): 0 success, 1 invalid input/config, 2 runtime failure.
const INVALID: u8 = 1;
const RUNTIME: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check {
            file,
            config,
            rule,
            offline,
        } => match file.or(config) {
            Some(file) => check(&file, rule.as_deref(), offline),
            None => fail(INVALID, "check needs a config file"),
        },
        Command::Explain {
            config,
            rule,
            offline,
            model,
            principal,
            dialect,
        } => explain(
            &config,
            rule.as_deref(),
            offline,
            &model,
            &principal,
            &dialect,
        ),
        Command::Serve {
            config,
            drain_delay_milliseconds,
        } => with_runtime(serve(
            config,
            Duration::from_millis(drain_delay_milliseconds),
        )),
        Command::Mock { config, listen } => with_runtime(mock(config, listen)),
        Command::Demo {
            listen,
            admin,
            no_serve,
        } => with_runtime(demo::run(listen, admin, no_serve)),
    }
}

/// Runs `fut` on tokio: the multi-threaded runtime (one worker per CPU), or the single-threaded
/// one when the process may use only one CPU (CPU affinity or a cgroup quota, as
/// `available_parallelism` reads them). With one CPU a second worker could not run anyway, and the
/// single-threaded scheduler spends less per task wake-up (no work-stealing queues, no cross-thread
/// parking): `bench/ab` measured ~18 % more requests/s at 32 connections on one pinned CPU
/// (docs/decisions/0003, "Ninth pass").
fn with_runtime(fut: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    let one_cpu = std::thread::available_parallelism().is_ok_and(|n| n.get() == 1);
    let mut builder = if one_cpu {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    match builder.enable_all().build() {
        Ok(rt) => rt.block_on(fut),
        Err(e) => fail(RUNTIME, &format!("cannot start the async runtime: {e}")),
    }
}

#[allow(clippy::print_stderr)]
fn fail(code: u8, msg: &str) -> ExitCode {
    eprintln!("sidetrack: {msg}");
    ExitCode::from(code)
}

fn init_tracing(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("{level},hyper=warn,h2=warn"))
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn check(file: &std::path::Path, rule: Option<&std::path::Path>, offline: bool) -> ExitCode {
    let options = sidetrack_config::CheckOptions { offline };
    let name = match rule {
        Some(r) => format!("{} (with {})", file.display(), r.display()),
        None => file.display().to_string(),
    };
    match sidetrack_config::check_file(file, rule, options) {
        Ok(checked) => {
            let warnings = checked.warnings;
            for w in &warnings {
                println!("{w}");
            }
            match warnings.len() {
                0 => println!("{name}: ok"),
                n => println!("{name}: ok, {n} warning(s)"),
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in errors.iter() {
                println!("{e}");
            }
            eprintln!("{name}: {} problem(s)", errors.len());
            ExitCode::from(INVALID)
        }
    }
}

#[allow(clippy::print_stdout)]
fn explain(
    file: &std::path::Path,
    rule: Option<&std::path::Path>,
    offline: bool,
    model: &str,
    principal: &str,
    dialect: &str,
) -> ExitCode {
    if sidetrack_dialects_name_ok(dialect).is_none() {
        return fail(INVALID, &format!("unknown dialect `{dialect}` (openai-chat, openai-responses, anthropic-messages, bedrock-invoke, bedrock-converse, openai-embeddings)"));
    }
    let options = sidetrack_config::CheckOptions { offline };
    match sidetrack_config::check_file(file, rule, options) {
        Ok(checked) => {
            let cfg = &checked.config;
            print!(
                "{}",
                sidetrack_gateway::explain::explain(cfg, model, principal, dialect)
            );
            // The same warnings `check` prints, for the rule this request takes.
            let route = sidetrack_gateway::explain::route_rule(cfg, model, principal);
            let warnings: Vec<String> = route
                .map(|i| {
                    checked
                        .warnings_for_rule(i)
                        .map(ToString::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if !warnings.is_empty() {
                println!("warnings ({}):", warnings.len());
                for w in &warnings {
                    println!("  {w}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(errors) => fail(INVALID, &errors.to_string()),
    }
}

fn sidetrack_dialects_name_ok(d: &str) -> Option<()> {
    [
        "openai-chat",
        "openai-responses",
        "anthropic-messages",
        "bedrock-invoke",
        "bedrock-converse",
        "openai-embeddings",
    ]
    .contains(&d)
    .then_some(())
}

fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("SIDETRACK_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("sidetrack.yaml"))
}

async fn serve(config: Option<PathBuf>, drain_delay: Duration) -> ExitCode {
    let path = config_path(config);
    let cfg = match load_for_serve(&path) {
        Ok(c) => c,
        Err(LoadError::Invalid(errors)) => {
            return fail(INVALID, &format!("invalid config:\n{errors}"))
        }
    };
    init_tracing(&cfg.logging.level);
    // Handlers go in before the listeners bind: once /readyz answers, SIGTERM and SIGHUP are ours
    // (a SIGHUP that arrived before would otherwise kill the process with the default action).
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return fail(RUNTIME, &format!("cannot install signal handlers: {e}")),
    };
    let log = match RoutingLog::start(&cfg.logging.routing) {
        Ok(l) => l,
        Err(e) => return fail(RUNTIME, &format!("cannot open the routing log: {e}")),
    };
    let reload_path = path.clone();
    // `POST /admin/reload` loads through the same function as SIGHUP and the file watcher.
    let reload: sidetrack_gateway::ReloadFn =
        Box::new(move || load_for_serve(&reload_path).map_err(|e| e.to_string()));
    let options = sidetrack_gateway::GatewayOptions {
        reload: Some(reload),
        ..Default::default()
    };
    let gw = match sidetrack_gateway::start(cfg, log, options).await {
        Ok(g) => g,
        Err(e) => return fail(RUNTIME, &e.to_string()),
    };
    tracing::info!(addr = %gw.addr, admin = %gw.admin_addr, config = %path.display(), "sidetrack serving");
    let watcher = tokio::spawn(watch_config(gw.shared.clone(), path.clone()));
    loop {
        match signals.next().await {
            Signal::Reload => reload_from_file(&gw.shared, &path, "SIGHUP"),
            Signal::Stop(name) => {
                tracing::info!(signal = name, "shutting down");
                break;
            }
        }
    }
    watcher.abort();
    // The grace in force now: a reload may have changed it.
    let grace = gw.shared.runtime.load().config.server.shutdown_grace;
    drain(gw, grace, drain_delay, &mut signals).await
}

/// Why a config file cannot be (re)loaded.
enum LoadError {
    Invalid(sidetrack_config::ConfigErrors),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Invalid(errors) => write!(f, "{errors}"),
        }
    }
}

/// Loads and validates the config file the way `serve` needs it: at start, on SIGHUP, on a file
/// change (`server.watchConfig`) and for `POST /admin/reload`.
fn load_for_serve(path: &std::path::Path) -> Result<Config, LoadError> {
    sidetrack_config::load_file(path).map_err(LoadError::Invalid)
}

/// Re-reads the config file and swaps it in atomically; a bad file is logged and the old config
/// keeps serving. Settings bound at start (listeners, TLS, routing log) need a restart.
fn reload_from_file(
    shared: &sidetrack_gateway::server::Shared,
    path: &std::path::Path,
    trigger: &str,
) {
    match load_for_serve(path) {
        Ok(cfg) => {
            let old = shared.runtime.load().config.clone();
            let fixed = restart_only_changes(&old, &cfg);
            shared.apply(cfg);
            tracing::info!(config = %path.display(), trigger, "config reloaded");
            if !fixed.is_empty() {
                tracing::warn!(
                    "changed settings that only take effect after a restart: {}",
                    fixed.join(", ")
                );
            }
        }
        Err(e) => {
            tracing::error!(config = %path.display(), trigger, "reload rejected, keeping the old config:\n{e}");
        }
    }
}

/// Settings that are read once at start and that a reload therefore cannot change.
fn restart_only_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    if old.server.listen != new.server.listen {
        out.push("server.listen");
    }
    if old.server.admin != new.server.admin {
        out.push("server.admin");
    }
    let tls = |c: &Config| {
        c.server
            .tls
            .as_ref()
            .map(|t| (t.cert_file.clone(), t.key_file.clone()))
    };
    if tls(old) != tls(new) {
        out.push("server.tls");
    }
    if old.logging.level != new.logging.level {
        out.push("logging.level");
    }
    if format!("{:?}", old.logging.routing) != format!("{:?}", new.logging.routing) {
        out.push("logging.routing");
    }
    if old.logging.otlp_endpoint != new.logging.otlp_endpoint {
        out.push("logging.otlpEndpoint");
    }
    out
}

/// How often `server.watchConfig` looks at the file.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies one version of the config file without reading it: modification time, length
/// and (on Unix) the inode, so an atomic rename over the file counts as a change. `None` while the
/// file cannot be read. Follows symlinks, as a Kubernetes ConfigMap mount needs.
fn file_stamp(path: &std::path::Path) -> Option<(std::time::SystemTime, u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some((meta.modified().ok()?, meta.len(), inode))
}

/// `server.watchConfig`: polls the file every second and reloads when it changed. The setting is
/// read from the live config on every tick, so a reload can switch watching on or off.
async fn watch_config(shared: std::sync::Arc<sidetrack_gateway::server::Shared>, path: PathBuf) {
    let mut last = file_stamp(&path);
    let mut tick = tokio::time::interval(WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = file_stamp(&path);
        if now == last {
            continue;
        }
        // Remember the version before reading it: a write that lands during the read shows up as
        // one more change on the next tick.
        last = now;
        if shared.runtime.load().config.server.watch_config {
            reload_from_file(&shared, &path, "file change");
        }
    }
}

/// Graceful shutdown (SPEC §2): `/readyz` answers 503 at once; the listeners keep accepting for
/// `drain_delay` (so load balancers that poll readiness stop sending), then close, and in-flight
/// requests and streams get the rest of `server.shutdownGraceMilliseconds` to finish. A second
/// SIGTERM/SIGINT stops waiting.
async fn drain(
    gw: sidetrack_gateway::GatewayHandle,
    grace: Duration,
    drain_delay: Duration,
    signals: &mut Signals,
) -> ExitCode {
    let started = tokio::time::Instant::now();
    gw.shared
        .ready
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let delay = drain_delay.min(grace);
    if !delay.is_zero() {
        tracing::info!(
            delay_ms = delay.as_millis() as u64,
            "readiness is 503; still accepting during the drain delay"
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = signals.next_stop() => {
                tracing::warn!("second signal: exiting without draining");
                return ExitCode::SUCCESS;
            }
        }
    }
    let remaining = grace.saturating_sub(started.elapsed());
    tracing::info!(
        grace_ms = remaining.as_millis() as u64,
        "closing the listeners; draining in-flight requests"
    );
    let result = tokio::select! {
        r = gw.shutdown(remaining) => r,
        _ = signals.next_stop() => {
            tracing::warn!("second signal: exiting without waiting for in-flight requests");
            return ExitCode::SUCCESS;
        }
    };
    let took = started.elapsed();
    if took >= grace {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "shutdown grace elapsed; requests still in flight were cut"
        );
    } else {
        tracing::info!(took_ms = took.as_millis() as u64, "drained; exiting");
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(RUNTIME, &format!("server error: {e}")),
    }
}

enum Signal {
    Reload,
    Stop(&'static str),
}

/// SIGTERM, SIGINT and SIGHUP as one stream of events.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    #[cfg(unix)]
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Stop("SIGTERM"),
            _ = self.int.recv() => Signal::Stop("SIGINT"),
            _ = self.hup.recv() => Signal::Reload,
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> Signal {
        let _ = tokio::signal::ctrl_c().await;
        Signal::Stop("Ctrl-C")
    }

    /// The next SIGTERM/SIGINT; SIGHUP is ignored once shutting down.
    async fn next_stop(&mut self) {
        loop {
            if let Signal::Stop(_) = self.next().await {
                return;
            }
        }
    }
}

async fn mock(config: Option<PathBuf>, listen: Option<String>) -> ExitCode {
    init_tracing("info");
    let mut cfg = match config {
        None => sidetrack_mock::MockConfig::default(),
        Some(path) => {
            let src = match std::fs::read_to_string(&path) {
                Ok(s) => s,
                Err(e) => return fail(INVALID, &format!("{}: {e}", path.display())),
            };
            match sidetrack_config::from_yaml_str::<sidetrack_mock::MockConfig>(
                &src,
                &path.display().to_string(),
            ) {
                Ok(c) => c,
                Err(errors) => return fail(INVALID, &format!("invalid mock config:\n{errors}")),
            }
        }
    };
    if let Some(l) = listen {
        cfg.listen = Some(l);
    }
    match sidetrack_mock::run(cfg).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(RUNTIME, &format!("mock provider failed: {e}")),
    }
}

/// Shared by `serve` and `demo`: how long to wait for in-flight work on Ctrl-C.
pub(crate) const DEMO_GRACE: Duration = Duration::from_secs(5);
