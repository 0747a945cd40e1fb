//! TLS on the data-plane listener (`server.tls`). boto3 >= 1.44 refuses to send a Bedrock bearer
//! token over plain HTTP, so Bedrock-dialect callers need this.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sidetrack_config::Tls;
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
