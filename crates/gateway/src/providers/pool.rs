//! The upstream connections of one target: keep-alive HTTP/1.1 connections and shared HTTP/2 ones
//! (ALPN decides, through the same rustls connector as before), opened on demand and reused.
//!
//! Why not hyper-util's legacy `Client`: for every HTTP/1.1 answer that still has a body to read
//! when its head arrives (all of them, for a proxy), it spawns a task that waits for the connection
//! to be free again and then puts it back in the pool, and it hashes the pool key on checkout and
//! on return. Here a connection goes back on the list as soon as its request is sent; it is simply
//! skipped while its answer is still being read (hyper's `SendRequest::is_ready`), so nothing is
//! spawned per request (docs/decisions/0003-hot-path.md, "Tenth pass"). Checkout takes the most
//! recently used connection that is ready, as the legacy client does, so a burst's extra
//! connections sink to the front of the list and expire there ("Twelfth pass").
//!
//! What is kept from the legacy client: the connector (TCP_NODELAY, keepalive, the connect
//! timeout, TLS with webpki roots, ALPN `h2` then `http/1.1`); `Host` set from the URL and the
//! origin-form path on HTTP/1.1; an unsent request tried again, once, on a new connection when a
//! kept connection turns out to be closed (the keep-alive race with a server that closed it while
//! idle), never after a fresh one; idle connections dropped after `idle_timeout`. One HTTP/2
//! connection is kept per host (requests that arrive together before the first is up each open
//! one, and all but one close after their answer). Bounds: at most [`MAX_PER_HOST`] connections
//! kept per host (more concurrent requests open connections that close after their answer) and
//! [`MAX_HOSTS`] hosts per target.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header::HOST, HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower_service::Service;

type Body = Full<Bytes>;

/// Connections kept per host (busy and idle); the legacy client's `pool_max_idle_per_host` was 256.
pub const MAX_PER_HOST: usize = 256;
/// Hosts kept per target (a target normally has one; Vertex adds its token endpoint).
pub const MAX_HOSTS: usize = 8;

/// One target's connections. Cloning is cheap (one `Arc`).
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    connector: HttpsConnector<HttpConnector>,
    hosts: Mutex<Vec<Host>>,
    idle_timeout: Duration,
    /// [`MAX_PER_HOST`], smaller in tests.
    max_per_host: usize,
}

struct Host {
    scheme: Scheme,
    authority: Authority,
    /// Oldest use first: a connection sent on goes to the back, and checkout looks from the back.
    conns: VecDeque<Conn>,
}

impl Host {
    fn is(&self, scheme: &Scheme, authority: &Authority) -> bool {
        self.scheme == *scheme && self.authority == *authority
    }
}

struct Conn {
    sender: Sender,
    /// When it last took a request, or was last seen still reading an answer; idle from then.
    last_used: Instant,
}

enum Sender {
    H1(http1::SendRequest<Body>),
    H2(http2::SendRequest<Body>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    /// Free for one more request: an HTTP/1.1 connection whose answer has been read, an HTTP/2
    /// one that is open.
    fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }
}

/// Why a request got no answer head.
#[derive(Debug)]
pub struct SendError {
    connect: bool,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl SendError {
    /// The connection could not be made (refused, DNS, connect timeout, TLS, handshake).
    pub fn is_connect(&self) -> bool {
        self.connect
    }

    fn connect(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SendError {
        SendError {
            connect: true,
            source: e.into(),
        }
    }

    fn transport(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SendError {
        SendError {
            connect: false,
            source: e.into(),
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.connect { "connect" } else { "send" };
        write!(f, "{what}: {}", self.source)
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The answer's head, or why there is none. Boxed, so a caller's future holds 16 bytes for it.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<Response<Incoming>, SendError>> + Send>>;

impl HttpClient {
    pub fn new(connector: HttpsConnector<HttpConnector>, idle_timeout: Duration) -> HttpClient {
        HttpClient {
            inner: Arc::new(Inner::new(connector, idle_timeout, MAX_PER_HOST)),
        }
    }

    /// Sends `req` (an absolute URL) on a kept connection, or on a new one. Nothing happens
    /// before the first poll.
    pub fn request(&self, req: Request<Body>) -> ResponseFuture {
        Box::pin(sending(self.inner.clone(), req))
    }

    /// Connections kept for `url`'s host, busy or idle (tests).
    #[cfg(test)]
    fn kept(&self, url: &Uri) -> usize {
        let (scheme, authority) = (url.scheme().cloned(), url.authority().cloned());
        let (scheme, authority) = (scheme.unwrap(), authority.unwrap());
        self.inner
            .lock()
            .iter()
            .find(|h| h.is(&scheme, &authority))
            .map_or(0, |h| h.conns.len())
    }
}

impl Inner {
    fn new(
        connector: HttpsConnector<HttpConnector>,
        idle_timeout: Duration,
        max_per_host: usize,
    ) -> Inner {
        Inner {
            connector,
            hosts: Mutex::new(Vec::new()),
            idle_timeout,
            max_per_host,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Host>> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn send(&self, mut req: Request<Body>) -> Result<Response<Incoming>, SendError> {
        let url = req.uri().clone();
        let (Some(scheme), Some(authority)) = (url.scheme().cloned(), url.authority().cloned())
        else {
            return Err(SendError::transport(format!("not an absolute URL: {url}")));
        };
        // After an unsent request on a kept connection, the next try opens a connection: so the
        // tries are at most two, whatever state the kept connections are in.
        let mut fresh = false;
        // One clock reading for the checkout and the return to the list (only the idle timeout
        // reads it, in seconds); read again after a connect, which may take a while.
        let mut now = Instant::now();
        loop {
            let kept = if fresh {
                None
            } else {
                self.checkout(&scheme, &authority, now)
            };
            let (sender, reused) = match kept {
                Some(s) => (s, true),
                None => {
                    let sender = self.connect_boxed(&url, &scheme, &authority).await?;
                    now = Instant::now();
                    (sender, false)
                }
            };
            let sent = match sender {
                Sender::H1(mut s) => {
                    origin_form(&mut req, &url);
                    let answer = s.try_send_request(req);
                    // Back on the list at once: it is skipped until its answer has been read.
                    self.keep(&scheme, &authority, Sender::H1(s), now);
                    answer.await
                }
                Sender::H2(mut s) => s.try_send_request(req).await,
            };
            match sent {
                Ok(resp) => return Ok(resp),
                Err(mut e) => match e.take_message() {
                    // Never written: a kept connection the server had closed. Try another.
                    Some(unsent) if reused => {
                        req = unsent;
                        *req.uri_mut() = url.clone();
                        fresh = true;
                    }
                    _ => return Err(SendError::transport(e.into_error())),
                },
            }
        }
    }

    /// The most recently sent-on connection that is ready for one more request: its buffers, its
    /// task and its socket are the likeliest to still be in the CPU's caches (taking the oldest
    /// instead walks every kept connection in turn, 256 of them after a burst). Closed and expired
    /// connections are dropped on the way, and from the front, where the least used ones gather.
    fn checkout(&self, scheme: &Scheme, authority: &Authority, now: Instant) -> Option<Sender> {
        let mut hosts = self.lock();
        let host = hosts.iter_mut().find(|h| h.is(scheme, authority))?;
        // Closed, or idle past the timeout (one still reading an answer is in use, not idle).
        let dead = |c: &Conn| {
            c.sender.is_closed()
                || (c.sender.is_ready()
                    && now.saturating_duration_since(c.last_used) >= self.idle_timeout)
        };
        let conns = &mut host.conns;
        while conns.front().is_some_and(dead) {
            conns.pop_front();
        }
        let mut at = conns.len();
        while at > 0 {
            at -= 1;
            if dead(&conns[at]) {
                conns.remove(at);
                continue;
            }
            let conn = &mut conns[at];
            if !conn.sender.is_ready() {
                // Still reading an answer: in use, not idle.
                conn.last_used = now;
                continue;
            }
            return match &conn.sender {
                // Shared: it stays on the list.
                Sender::H2(s) => {
                    let s = s.clone();
                    conn.last_used = now;
                    Some(Sender::H2(s))
                }
                // Taken; `keep` puts it back once its request is written.
                Sender::H1(_) => conns.remove(at).map(|c| c.sender),
            };
        }
        None
    }

    /// Keeps a connection for later requests, within the bounds.
    fn keep(&self, scheme: &Scheme, authority: &Authority, sender: Sender, now: Instant) {
        let mut hosts = self.lock();
        let at = match hosts.iter().position(|h| h.is(scheme, authority)) {
            Some(i) => i,
            None => {
                if hosts.len() >= MAX_HOSTS {
                    hosts.remove(0);
                }
                hosts.push(Host {
                    scheme: scheme.clone(),
                    authority: authority.clone(),
                    conns: VecDeque::new(),
                });
                hosts.len() - 1
            }
        };
        let conns = &mut hosts[at].conns;
        // One HTTP/2 connection per host: one made by a burst that arrived before the first was
        // up serves its own request and closes when that is done.
        let shared = |c: &Conn| matches!(&c.sender, Sender::H2(s) if !s.is_closed());
        if matches!(sender, Sender::H2(_)) && conns.iter().any(shared) {
            return;
        }
        if conns.len() < self.max_per_host {
            conns.push_back(Conn {
                sender,
                last_used: now,
            });
        }
        // else dropped: an HTTP/1.1 connection closes once its answer has been read.
    }

    /// [`Inner::connect`] on the heap, behind a virtual call: its state (the TLS handshake's
    /// among it) is kilobytes, and most requests take a kept connection. Inline, it made every
    /// request's send future 7.4 KiB, allocated and copied per request.
    fn connect_boxed<'a>(
        &'a self,
        url: &'a Uri,
        scheme: &'a Scheme,
        authority: &'a Authority,
    ) -> Pin<Box<dyn Future<Output = Result<Sender, SendError>> + Send + 'a>> {
        Box::pin(self.connect(url, scheme, authority))
    }

    /// Opens a connection: TCP (and TLS) through the connector, then the HTTP/2 handshake when
    /// ALPN chose `h2`, HTTP/1.1 otherwise. Its I/O runs in a task of its own.
    async fn connect(
        &self,
        url: &Uri,
        scheme: &Scheme,
        authority: &Authority,
    ) -> Result<Sender, SendError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::connect)?;
        let io = connector
            .call(url.clone())
            .await
            .map_err(SendError::connect)?;
        if io.connected().is_negotiated_h2() {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .handshake(io)
                .await
                .map_err(SendError::connect)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.keep(
                scheme,
                authority,
                Sender::H2(sender.clone()),
                Instant::now(),
            );
            Ok(Sender::H2(sender))
        } else {
            let (sender, conn) = http1::handshake(io).await.map_err(SendError::connect)?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            Ok(Sender::H1(sender))
        }
    }
}

/// The future [`HttpClient::request`] boxes for each request.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
fn sending(
    inner: Arc<Inner>,
    req: Request<Body>,
) -> impl Future<Output = Result<Response<Incoming>, SendError>> + Send {
    async move { inner.send(req).await }
}

/// The size of the future [`HttpClient::request`] boxes for each request (tests).
#[cfg(test)]
pub(crate) fn send_future_size(req: Request<Body>) -> usize {
    let client = super::client(Duration::from_secs(1));
    std::mem::size_of_val(&sending(client.inner.clone(), req))
}

/// HTTP/1.1 wants `Host` and the path alone on the request line.
fn origin_form(req: &mut Request<Body>, url: &Uri) {
    if !req.headers().contains_key(HOST) {
        if let Some(host) = host_header(url) {
            req.headers_mut().insert(HOST, host);
        }
    }
    let path = url
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *req.uri_mut() = Uri::from(path);
}

/// `host` or `host:port` when the port is not the scheme's default.
fn host_header(url: &Uri) -> Option<HeaderValue> {
    let host = url.host()?;
    let default = match url.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    match url.port_u16() {
        Some(port) if Some(port) != default => HeaderValue::try_from(format!("{host}:{port}")).ok(),
        _ => HeaderValue::from_str(host).ok(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use tokio::sync::watch;

    /// A local upstream answering `ok` to every request once `release` says so (at once when it
    /// starts released); counts the connections it accepted. With `tls`, it offers ALPN `h2` and
    /// `http/1.1` and serves either.
    struct Upstream {
        url: String,
        accepted: Arc<AtomicUsize>,
        release: watch::Sender<bool>,
        roots: Option<rustls::RootCertStore>,
    }

    async fn upstream(released: bool, tls: bool) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (release, rx) = watch::channel(released);
        let (acceptor, roots) = if tls {
            let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            let mut roots = rustls::RootCertStore::empty();
            roots.add(cert.cert.der().clone()).unwrap();
            let key = rustls_pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der())
                .unwrap();
            let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            (
                Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
                Some(roots),
            )
        } else {
            (None, None)
        };
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let nth = count.fetch_add(1, Ordering::SeqCst) + 1;
                let (rx, acceptor) = (rx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let mut rx = rx.clone();
                        async move {
                            let _ = rx.wait_for(|go| *go).await;
                            let mut resp = Response::new(Full::new(Bytes::from_static(b"ok")));
                            resp.headers_mut().insert("x-connection", nth.into());
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    });
                    let auto = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match acceptor {
                        Some(a) => {
                            let Ok(tls) = a.accept(tcp).await else { return };
                            let _ = auto.serve_connection(TokioIo::new(tls), svc).await;
                        }
                        None => {
                            let _ = auto.serve_connection(TokioIo::new(tcp), svc).await;
                        }
                    }
                });
            }
        });
        let scheme = if tls {
            "https://localhost"
        } else {
            "http://127.0.0.1"
        };
        Upstream {
            url: format!("{scheme}:{port}/v1/x"),
            accepted,
            release,
            roots,
        }
    }

    /// A pool trusting `roots` (the test upstream's certificate) or, without them, webpki's.
    fn pool(
        roots: Option<&rustls::RootCertStore>,
        idle: Duration,
        max_per_host: usize,
    ) -> HttpClient {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match roots {
            Some(roots) => builder.with_tls_config(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
            ),
            None => builder.with_webpki_roots(),
        };
        let https = builder
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        HttpClient {
            inner: Arc::new(Inner::new(https, idle, max_per_host)),
        }
    }

    /// `n` requests sent at once, each in a task of its own.
    fn at_once(
        client: &HttpClient,
        up: &Upstream,
        n: usize,
    ) -> Vec<tokio::task::JoinHandle<(http::Version, Bytes)>> {
        (0..n)
            .map(|_| {
                let (client, url) = (client.clone(), up.url.clone());
                tokio::spawn(async move { get(&client, &url).await })
            })
            .collect()
    }

    /// Which of the upstream's connections (1 for the first it accepted) answered one request.
    async fn served_by(client: &HttpClient, url: &str) -> usize {
        let resp = client.request(post(url)).await.unwrap();
        let nth = resp.headers()["x-connection"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        resp.into_body().collect().await.unwrap();
        nth
    }

    /// `n` requests at once on a held upstream, which answers them once it has accepted `n`
    /// connections: each request has a connection of its own. Their answers, in order.
    async fn burst(client: &HttpClient, up: &Upstream, n: usize) -> Vec<(http::Version, Bytes)> {
        let held = at_once(client, up, n);
        accepted(up, n).await;
        up.release.send(true).unwrap();
        let mut answers = Vec::new();
        for h in held {
            answers.push(h.await.unwrap());
        }
        answers
    }

    /// Until the upstream has accepted `n` connections.
    async fn accepted(up: &Upstream, n: usize) {
        while up.accepted.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    }

    fn post(url: &str) -> Request<Body> {
        let mut req = Request::new(Full::new(Bytes::from_static(b"{}")));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = url.parse().unwrap();
        req
    }

    async fn get(client: &HttpClient, url: &str) -> (http::Version, Bytes) {
        let resp = client.request(post(url)).await.unwrap();
        let version = resp.version();
        (
            version,
            resp.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    #[tokio::test]
    async fn one_kept_connection_serves_requests_one_after_another() {
        let up = upstream(true, false).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), MAX_PER_HOST);
        for _ in 0..5 {
            let (version, body) = get(&client, &up.url).await;
            assert_eq!((version, &body[..]), (http::Version::HTTP_11, &b"ok"[..]));
            // the connection's task notices the answer was read before the next checkout
            tokio::task::yield_now().await;
        }
        assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(client.kept(&up.url.parse().unwrap()), 1);
    }

    #[tokio::test]
    async fn a_busy_connection_is_skipped_and_no_more_than_the_bound_are_kept() {
        let up = upstream(false, false).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), 2);
        let held = at_once(&client, &up, 4);
        accepted(&up, 4).await;
        // four answers in flight: four connections, of which two are kept
        assert_eq!(client.kept(&up.url.parse().unwrap()), 2);
        up.release.send(true).unwrap();
        for h in held {
            assert_eq!(&h.await.unwrap().1[..], b"ok");
        }
        for _ in 0..3 {
            tokio::task::yield_now().await;
            get(&client, &up.url).await;
        }
        assert_eq!(
            up.accepted.load(Ordering::SeqCst),
            4,
            "the kept two serve what follows"
        );
        assert_eq!(client.kept(&up.url.parse().unwrap()), 2);
    }

    #[tokio::test]
    async fn the_most_recently_used_connection_is_taken_first() {
        let up = upstream(false, false).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), MAX_PER_HOST);
        // a burst of four leaves four connections kept, sent on in the order they were made
        burst(&client, &up, 4).await;
        tokio::task::yield_now().await;
        let first = served_by(&client, &up.url).await;
        for _ in 0..5 {
            tokio::task::yield_now().await;
            assert_eq!(
                served_by(&client, &up.url).await,
                first,
                "one after another, the requests stay on the connection just used"
            );
        }
        assert_eq!(up.accepted.load(Ordering::SeqCst), 4);
        assert_eq!(client.kept(&up.url.parse().unwrap()), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_past_its_timeout_is_dropped_not_reused() {
        let up = upstream(true, false).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), MAX_PER_HOST);
        get(&client, &up.url).await;
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(89)).await;
        get(&client, &up.url).await;
        assert_eq!(up.accepted.load(Ordering::SeqCst), 1, "89 s idle: reused");
        tokio::task::yield_now().await;
        tokio::time::advance(Duration::from_secs(91)).await;
        get(&client, &up.url).await;
        assert_eq!(
            up.accepted.load(Ordering::SeqCst),
            2,
            "91 s idle: a new connection"
        );
        assert_eq!(client.kept(&up.url.parse().unwrap()), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_does_not_fail_the_next_request() {
        let client = pool(None, Duration::from_secs(90), MAX_PER_HOST);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
        // answers one request per connection, then closes it without saying so
        let served = Arc::new(AtomicUsize::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let Ok((mut tcp, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let _ = tcp.read(&mut buf).await;
                let _ = tcp
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
                count.fetch_add(1, Ordering::SeqCst);
                drop(tcp);
            }
        });
        for _ in 0..3 {
            assert_eq!(&get(&client, &url).await.1[..], b"ok");
        }
        assert_eq!(served.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn an_http2_burst_before_the_first_connection_keeps_only_one() {
        let up = upstream(false, true).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), MAX_PER_HOST);
        for (version, _) in burst(&client, &up, 4).await {
            assert_eq!(version, http::Version::HTTP_2);
        }
        assert_eq!(client.kept(&up.url.parse().unwrap()), 1);
        get(&client, &up.url).await;
        assert_eq!(
            up.accepted.load(Ordering::SeqCst),
            4,
            "the kept one serves what follows"
        );
    }

    #[tokio::test]
    async fn tls_with_alpn_h2_shares_one_connection_between_concurrent_requests() {
        let up = upstream(false, true).await;
        let client = pool(up.roots.as_ref(), Duration::from_secs(90), MAX_PER_HOST);
        // the first request makes the connection; the rest, concurrent, share it
        let first = {
            let (client, url) = (client.clone(), up.url.clone());
            tokio::spawn(async move { get(&client, &url).await })
        };
        while up.accepted.load(Ordering::SeqCst) < 1 || client.kept(&up.url.parse().unwrap()) < 1 {
            tokio::task::yield_now().await;
        }
        let rest = at_once(&client, &up, 3);
        up.release.send(true).unwrap();
        for h in std::iter::once(first).chain(rest) {
            let (version, body) = h.await.unwrap();
            assert_eq!((version, &body[..]), (http::Version::HTTP_2, &b"ok"[..]));
        }
        assert_eq!(up.accepted.load(Ordering::SeqCst), 1);
        assert_eq!(client.kept(&up.url.parse().unwrap()), 1);
    }

    #[test]
    fn the_host_header_names_a_port_only_when_it_is_not_the_default() {
        let h = |u: &str| host_header(&u.parse().unwrap()).unwrap();
        assert_eq!(h("http://up.example/v1"), "up.example");
        assert_eq!(h("http://up.example:80/v1"), "up.example");
        assert_eq!(h("https://up.example:443/v1"), "up.example");
        assert_eq!(h("http://127.0.0.1:18090/v1"), "127.0.0.1:18090");
        assert_eq!(h("https://up.example:8443/v1"), "up.example:8443");
    }

    #[test]
    fn http1_requests_carry_the_origin_form_and_keep_a_host_they_were_given() {
        let url: Uri = "http://127.0.0.1:9/v1/chat/completions?x=1"
            .parse()
            .unwrap();
        let mut req = Request::new(Full::new(Bytes::new()));
        origin_form(&mut req, &url);
        assert_eq!(req.uri(), "/v1/chat/completions?x=1");
        assert_eq!(req.headers()[HOST], "127.0.0.1:9");
        let mut signed = Request::new(Full::new(Bytes::new()));
        signed
            .headers_mut()
            .insert(HOST, HeaderValue::from_static("signed.example"));
        origin_form(&mut signed, &url);
        assert_eq!(signed.headers()[HOST], "signed.example");
    }
}
