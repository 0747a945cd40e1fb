//! The "physical limit" baseline: accept HTTP/1.1, forward every request unchanged to one upstream
//! over a pooled keep-alive client (TCP_NODELAY on both sides), stream the answer back. No parsing.
//! Usage: minimal-proxy LISTEN_ADDR UPSTREAM_ADDR   (e.g. 127.0.0.1:18081 127.0.0.1:18080)
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client, Error};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::Arc;
use std::time::Duration;

type Upstream = Client<HttpConnector, Incoming>;

async fn forward(client: Upstream, upstream: Arc<str>, mut req: Request<Incoming>) -> Result<Response<Incoming>, Error> {
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    if let Ok(uri) = Uri::builder().scheme("http").authority(&*upstream).path_and_query(pq).build() {
        *req.uri_mut() = uri;
    }
    client.request(req).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: minimal-proxy LISTEN UPSTREAM".into());
    };
    let upstream: Arc<str> = upstream.into();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Upstream = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(2048)
        .build(connector);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    loop {
        let (sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        let (client, upstream) = (client.clone(), upstream.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| forward(client.clone(), upstream.clone(), req));
            let _ = http1::Builder::new().serve_connection(TokioIo::new(sock), svc).await;
        });
    }
}
