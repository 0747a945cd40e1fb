//! The `sidetrack` binary: a thin shell over the crates (SPEC §2).

mod demo;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sidetrack_config::Config;
use sidetrack_gateway::RoutingLog;

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
    /// Validate a config; print every problem as FILE:LINE:COL: path: message.
    Check { file: PathBuf },
    /// Print the route a request would take.
    Explain {
        #[arg(long)]
        config: PathBuf,
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
        Command::Check { file } => check(&file),
        Command::Explain {
            config,
            model,
            principal,
            dialect,
        } => explain(&config, &model, &principal, &dialect),
        Command::Serve { config } => with_runtime(serve(config)),
        Command::Mock { config, listen } => with_runtime(mock(config, listen)),
        Command::Demo {
            listen,
            admin,
            no_serve,
        } => with_runtime(demo::run(listen, admin, no_serve)),
    }
}

fn with_runtime(fut: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
fn check(file: &std::path::Path) -> ExitCode {
    match sidetrack_config::load_file(file) {
        Ok(_) => {
            println!("{}: ok", file.display());
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in errors.iter() {
                println!("{e}");
            }
            eprintln!("{}: {} problem(s)", file.display(), errors.len());
            ExitCode::from(INVALID)
        }
    }
}

#[allow(clippy::print_stdout)]
fn explain(file: &std::path::Path, model: &str, principal: &str, dialect: &str) -> ExitCode {
    if sidetrack_dialects_name_ok(dialect).is_none() {
        return fail(INVALID, &format!("unknown dialect `{dialect}` (openai-chat, openai-responses, anthropic-messages, bedrock-invoke, bedrock-converse)"));
    }
    match sidetrack_config::load_file(file) {
        Ok(cfg) => {
            print!(
                "{}",
                sidetrack_gateway::explain::explain(&cfg, model, principal, dialect)
            );
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
    ]
    .contains(&d)
    .then_some(())
}

fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("SIDETRACK_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("sidetrack.yaml"))
}

/// Features the config accepts (validated) but this build cannot run yet.
fn unsupported(cfg: &Config) -> Vec<&'static str> {
    let mut out = Vec::new();
    if cfg.state.as_ref().is_some_and(|s| s.redis.is_some()) {
        out.push("state.redis (shared state across replicas)");
    }
    if cfg.logging.otlp_endpoint.is_some() {
        out.push("logging.otlpEndpoint (OTLP traces)");
    }
    if cfg
        .auth
        .as_ref()
        .is_some_and(|a| a.keys.iter().any(|k| k.limits.is_some()))
    {
        out.push("auth.keys[].limits (gateway rate limits)");
    }
    out
}

async fn serve(config: Option<PathBuf>) -> ExitCode {
    let path = config_path(config);
    let cfg = match sidetrack_config::load_file(&path) {
        Ok(c) => c,
        Err(errors) => return fail(INVALID, &format!("invalid config:\n{errors}")),
    };
    init_tracing(&cfg.logging.level);
    let missing = unsupported(&cfg);
    if !missing.is_empty() {
        return fail(
            INVALID,
            &format!(
                "{}: not supported yet in this build: {}",
                path.display(),
                missing.join("; ")
            ),
        );
    }
    let log = match RoutingLog::start(&cfg.logging.routing) {
        Ok(l) => l,
        Err(e) => return fail(RUNTIME, &format!("cannot open the routing log: {e}")),
    };
    let grace = cfg.server.shutdown_grace;
    let reload_path = path.clone();
    let reload: sidetrack_gateway::ReloadFn = Box::new(move || {
        let cfg = sidetrack_config::load_file(&reload_path).map_err(|e| e.to_string())?;
        let missing = unsupported(&cfg);
        if missing.is_empty() {
            Ok(cfg)
        } else {
            Err(format!("not supported yet: {}", missing.join("; ")))
        }
    });
    let options = sidetrack_gateway::GatewayOptions {
        reload: Some(reload),
        ..Default::default()
    };
    let gw = match sidetrack_gateway::start(cfg, log, options).await {
        Ok(g) => g,
        Err(e) => return fail(RUNTIME, &e.to_string()),
    };
    tracing::info!(addr = %gw.addr, admin = %gw.admin_addr, config = %path.display(), "sidetrack serving");
    wait_for_shutdown(&gw, &path).await;
    tracing::info!("draining in-flight requests");
    match gw.shutdown(grace).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(RUNTIME, &format!("server error: {e}")),
    }
}

/// Waits for SIGTERM/SIGINT; reloads the config on SIGHUP (a bad config keeps the old one).
#[cfg(unix)]
async fn wait_for_shutdown(gw: &sidetrack_gateway::GatewayHandle, path: &std::path::Path) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return,
            _ = term.recv() => return,
            _ = hup.recv() => reload(gw, path),
        }
    }
}

#[cfg(not(unix))]
async fn wait_for_shutdown(_gw: &sidetrack_gateway::GatewayHandle, _path: &std::path::Path) {
    let _ = tokio::signal::ctrl_c().await;
}

fn reload(gw: &sidetrack_gateway::GatewayHandle, path: &std::path::Path) {
    match sidetrack_config::load_file(path) {
        Ok(cfg) => {
            let missing = unsupported(&cfg);
            if missing.is_empty() {
                gw.reload(cfg);
                tracing::info!(config = %path.display(), "config reloaded");
            } else {
                tracing::error!(config = %path.display(), "reload rejected, keeping the old config: not supported yet: {}", missing.join("; "));
            }
        }
        Err(errors) => {
            tracing::error!(config = %path.display(), "reload rejected, keeping the old config:\n{errors}");
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
