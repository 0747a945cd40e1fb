//! TLS on the data-plane listener (`server.tls`). boto3 >= 1.44 refuses to send a Bedrock bearer
//! token over plain HTTP, so Bedrock-dialect callers need this.

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sidetrack_config::Tls;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

fn io_err(path: &Path, what: &str, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("{}: {what}: {e}", path.display()),
    )
}

/// Loads `server.tls` into an acceptor that offers HTTP/2 and HTTP/1.1.
pub fn acceptor(tls: &Tls) -> std::io::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert_file)
        .map_err(|e| io_err(&tls.cert_file, "cannot read certificates", e))?
        .collect::<Result<_, _>>()
        .map_err(|e| io_err(&tls.cert_file, "bad certificate", e))?;
    if certs.is_empty() {
        return Err(io_err(
            &tls.cert_file,
            "no certificate",
            "the file holds no PEM certificate",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key_file)
        .map_err(|e| io_err(&tls.key_file, "cannot read the private key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io_err(&tls.cert_file, "TLS setup", e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| io_err(&tls.cert_file, "certificate and key do not fit", e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` over TLS until `stop` turns true, then lets open connections finish.
pub fn serve(
    listener: TcpListener,
    app: Router,
    acceptor: TlsAcceptor,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let builder = Builder::new(TokioExecutor::new());
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((tcp, _)) = accepted else { continue };
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, app, builder) = (acceptor.clone(), app.clone(), builder.clone());
                    let watcher = graceful.watcher();
                    tokio::spawn(async move {
                        let Ok(stream) = acceptor.accept(tcp).await else { return };
                        let conn = builder
                            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(app))
                            .into_owned();
                        let _ = watcher.watch(conn).await;
                    });
                }
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        drop(listener);
        graceful.shutdown().await;
        Ok(())
    })
}
