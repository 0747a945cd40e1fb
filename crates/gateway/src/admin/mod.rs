//! The admin plane (SPEC §3), on its own listener: destinations and their breakers, manual
//! disable/enable/reset, the effective config, reload, Prometheus metrics and the dashboard.
//!
//! Token or not, it answers only its own page (SPEC §14, [`same_origin_only`]): a page on another
//! site cannot post a form to it (CSRF) nor read it through a DNS name that it points at loopback
//! (DNS rebinding).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::header::{CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{json, Value};

use crate::server::Shared;

pub mod history;
mod views;

const DASHBOARD: &str = include_str!("dashboard.html");

pub fn router(shared: Arc<Shared>) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/admin/destinations", get(destinations))
        .route(
            "/admin/destinations/{target}/{model}/{action}",
            post(destination_action),
        )
        .route("/admin/routes", get(views::routes))
        .route("/admin/history", get(views::history))
        .route("/admin/decisions", get(views::decisions))
        .route("/admin/config", get(config))
        .route("/admin/reload", post(reload))
        .route_layer(middleware::from_fn_with_state(
            shared.clone(),
            require_token,
        ));
    Router::new()
        // The page itself is static and public; its data calls carry the token.
        .route("/", get(|| async { Html(DASHBOARD) }))
        .merge(protected)
        .layer(middleware::from_fn(same_origin_only))
        .with_state(shared)
}

/// 403 for a request that is not the admin page's own: a `Host` that is a DNS name other than
/// `localhost`, an `Origin` other than the page's, or a POST that is not `application/json`
/// (which an HTML form cannot send). Before the token check, so it holds without
/// `server.adminToken` too.
async fn same_origin_only(req: Request, next: Next) -> Response {
    if let Err(why) = same_origin(req.method(), req.uri(), req.headers()) {
        tracing::warn!(path = req.uri().path(), "admin request refused: {why}");
        return (StatusCode::FORBIDDEN, Json(json!({ "error": why }))).into_response();
    }
    next.run(req).await
}

/// The admin plane's cross-site rule, as a pure function:
/// - `Host` (or the URI's authority) must be `localhost` or an IP address (`127.0.0.1`, `[::1]`,
///   the address the admin port listens on or is reached through), any port. DNS rebinding needs
///   a DNS name in `Host` — a page can only reach an IP-literal host by its own origin, which is
///   then that host's — so every other DNS name fails; behind a reverse proxy, have it send the
///   upstream address as `Host`. A request with no host at all comes from no browser and passes.
/// - `Origin`, when sent, must be `http://` or `https://` followed by exactly that `Host` (ASCII
///   case aside); `null` and every other origin fail.
/// - Methods other than GET, HEAD and OPTIONS need `content-type: application/json` (parameters
///   after `;` allowed).
pub fn same_origin(method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), String> {
    let host = match headers.get(HOST) {
        Some(h) => Some(
            h.to_str()
                .map_err(|_| "the Host header is not text".to_owned())?,
        ),
        None => uri.authority().map(|a| a.as_str()),
    };
    if let Some(host) = host {
        if !host_allowed(host) {
            return Err(format!(
                "Host `{}` is a DNS name other than localhost; the admin plane answers only \
                 requests addressed to localhost or to an IP address",
                shorten(host)
            ));
        }
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let own = host.is_some_and(|host| {
            origin.to_str().is_ok_and(|o| {
                ["http://", "https://"].iter().any(|scheme| {
                    o.len() == scheme.len() + host.len()
                        && o[..scheme.len()].eq_ignore_ascii_case(scheme)
                        && o[scheme.len()..].eq_ignore_ascii_case(host)
                })
            })
        });
        if !own {
            let shown = origin.to_str().unwrap_or("(not text)");
            return Err(format!(
                "cross-site request refused: Origin `{}` is not this admin page's origin",
                shorten(shown)
            ));
        }
    }
    if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        let json = headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(format!(
                "admin {method} requests need `content-type: application/json`"
            ));
        }
    }
    Ok(())
}

fn shorten(s: &str) -> &str {
    // Header text that passed `to_str` is ASCII, so any index is a char boundary; `get` anyway.
    s.get(..100).unwrap_or(s)
}

/// Is `host` (a `Host` value: `name[:port]`, `[v6][:port]`) `localhost` or an IP address?
fn host_allowed(host: &str) -> bool {
    split_host(host).is_some_and(|(name, v6)| {
        name.eq_ignore_ascii_case("localhost")
            || if v6 {
                name.parse::<std::net::Ipv6Addr>().is_ok()
            } else {
                name.parse::<std::net::Ipv4Addr>().is_ok()
            }
    })
}

/// `name[:port]` or `[v6][:port]` → (name without brackets, whether it was bracketed). `None`
/// when malformed (a port that is not a number, a bracket left open).
fn split_host(host: &str) -> Option<(&str, bool)> {
    let (name, v6, port) = match host.strip_prefix('[') {
        Some(rest) => {
            let (v6, after) = rest.split_once(']')?;
            let port = if after.is_empty() {
                ""
            } else {
                after.strip_prefix(':')?
            };
            (v6, true, port)
        }
        None => {
            let (name, port) = host.split_once(':').unwrap_or((host, ""));
            (name, false, port)
        }
    };
    let port_ok = port.is_empty()
        || (port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok());
    (!name.is_empty() && port_ok).then_some((name, v6))
}

async fn require_token(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    let rt = shared.runtime.load();
    if let Some(token) = &rt.config.server.admin_token {
        let presented = req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let ok =
            presented.is_some_and(|p| constant_time_eq(p.as_bytes(), token.expose().as_bytes()));
        if !ok {
            return (StatusCode::UNAUTHORIZED, Json(json!({"error": "admin token required (Authorization: Bearer <server.adminToken>)"})))
                .into_response();
        }
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    Response::builder()
        .header(
            http::header::CONTENT_TYPE,
            crate::observe::metrics::Metrics::CONTENT_TYPE,
        )
        .body(Body::from(shared.metrics.render()))
        .unwrap_or_default()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

async fn destinations(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let now = SystemTime::now();
    let list: Vec<Value> = shared
        .health
        .snapshot()
        .into_iter()
        .map(|s| {
            json!({
                "target": s.target,
                "model": s.model,
                "state": s.state.as_str(),
                "disabled": s.disabled,
                "openUntil": s.open_remaining.map(|r| rfc3339(now + r)),
                "openRemainingMs": s.open_remaining.map(|r| r.as_millis() as u64),
                "consecutiveFailures": s.consecutive_failures,
                "health": (s.health * 10.0).round() / 10.0,
                "ttfbEwmaMs": s.ttfb_ewma_ms.map(|v| (v * 1000.0).round() / 1000.0),
                "inFlight": s.in_flight,
                "attempts": s.attempts,
                "successes": s.successes,
                "failures": s.failures,
                "skips": s.skips,
                "reopens": s.reopens,
                "lastTransition": s.last_transition.map(|(to, reason, at)| json!({"to": to, "reason": reason, "at": rfc3339(at)})),
            })
        })
        .collect();
    Json(json!({
        "requests": shared.walked.load(Ordering::Relaxed),
        "fallbacks": shared.fell_back.load(Ordering::Relaxed),
        "destinations": list,
    }))
}

async fn destination_action(
    State(shared): State<Arc<Shared>>,
    Path((target, model, action)): Path<(String, String, String)>,
) -> Response {
    let found =
        match action.as_str() {
            "disable" => shared.health.set_disabled(&target, &model, true),
            "enable" => shared.health.set_disabled(&target, &model, false),
            "reset" => shared.health.reset(&target, &model),
            other => return (
                StatusCode::NOT_FOUND,
                Json(
                    json!({"error": format!("unknown action `{other}` (disable, enable, reset)")}),
                ),
            )
                .into_response(),
        };
    if !found {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no destination {target}/{model}")})),
        )
            .into_response();
    }
    tracing::info!(destination = %format!("{target}/{model}"), action, "admin action");
    Json(json!({"target": target, "model": model, "action": action, "ok": true})).into_response()
}

async fn config(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(shared.runtime.load().config.redacted_json())
}

async fn reload(State(shared): State<Arc<Shared>>) -> Response {
    let Some(reload) = &shared.reload else {
        return (
            StatusCode::NOT_IMPLEMENTED,
            Json(json!({"error": "this gateway was started without a config file to reload"})),
        )
            .into_response();
    };
    match reload() {
        Ok(cfg) => {
            shared.apply(cfg);
            tracing::info!("config reloaded via the admin API");
            Json(json!({"reloaded": true})).into_response()
        }
        Err(e) => {
            tracing::error!("reload rejected, keeping the old config: {e}");
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"reloaded": false, "error": e})),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: Method, pairs: &[(&str, &str)]) -> Result<(), String> {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        same_origin(&method, &Uri::from_static("/admin/config"), &headers)
    }

    #[test]
    fn localhost_and_ip_addresses_are_admin_hosts_and_dns_names_are_not() {
        for host in [
            "localhost",
            "LOCALHOST:9090",
            "127.0.0.1:1",
            "127.8.9.10",
            "[::1]:9090",
            "[::1]",
            "[::ffff:127.0.0.1]:9090",
            "10.0.0.5:9090",
            "10.0.0.5",
            "[fe80::1]:9090",
        ] {
            assert_eq!(check(Method::GET, &[("host", host)]), Ok(()), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:9090",
            "localhost.evil.example",
            "localhost.",
            "127.0.0.1.nip.io:9090",
            "0x7f000001",
            "127.1",
            "[::1",
            "[127.0.0.1]",
            "::1",
            "[::1]x",
            "localhost:x",
            "localhost:+80",
            "localhost:99999",
            ":9090",
            "",
        ] {
            assert!(check(Method::GET, &[("host", host)]).is_err(), "{host}");
        }
        assert_eq!(check(Method::GET, &[]), Ok(()), "no host: no browser");
    }

    #[test]
    fn only_the_pages_own_origin_passes() {
        let host = ("host", "127.0.0.1:9090");
        for origin in ["http://127.0.0.1:9090", "HTTPS://127.0.0.1:9090"] {
            assert_eq!(
                check(
                    Method::POST,
                    &[
                        host,
                        ("origin", origin),
                        ("content-type", "application/json")
                    ],
                ),
                Ok(())
            );
        }
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:9091",
            "http://127.0.0.1",
            "null",
            "http://127.0.0.1:9090/",
        ] {
            assert!(
                check(Method::GET, &[host, ("origin", origin)]).is_err(),
                "{origin}"
            );
        }
        assert!(check(Method::GET, &[("origin", "http://x")]).is_err());
    }

    #[test]
    fn writes_need_a_json_content_type() {
        let host = ("host", "localhost:9090");
        assert!(check(Method::POST, &[host]).is_err());
        for ct in [
            "application/x-www-form-urlencoded",
            "text/plain",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert!(
                check(Method::POST, &[host, ("content-type", ct)]).is_err(),
                "{ct}"
            );
        }
        for ct in ["application/json", "Application/JSON; charset=utf-8"] {
            assert_eq!(check(Method::POST, &[host, ("content-type", ct)]), Ok(()));
        }
        assert_eq!(check(Method::GET, &[host]), Ok(()));
    }
}
