//! `server.tls`: the data plane speaks HTTPS with a configured certificate.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use sidetrack_mock::MockConfig;

#[tokio::test]
async fn the_data_plane_serves_https_with_the_configured_certificate() {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let dir = std::env::temp_dir().join(format!("sidetrack-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let yaml = format!(
        "server:\n  tls: {{ certFile: {}, keyFile: {} }}\ntargets: [ {{ name: up, provider: openai, baseUrl: \"${{MOCK}}/v1\", models: [\"m-*\"] }} ]",
        cert_path.display(),
        key_path.display()
    );
    let env = common::start(&yaml, MockConfig::default()).await;
    assert!(env.gw.base_url().starts_with("https://"));

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let url = format!(
        "https://localhost:{}/v1/chat/completions",
        env.gw.addr.port()
    );
    let body = serde_json::json!({"model": "m-x", "messages": []}).to_string();
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&text).contains("hello from m-x"));
    assert_eq!(env.hits("m-x"), 1);
}
