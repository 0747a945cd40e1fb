//! The admin plane (SPEC §3), on its own listener: destinations and their breakers, manual
//! disable/enable/reset, the effective config, reload, Prometheus metrics and the dashboard.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http::StatusCode;
use serde_json::{json, Value};

use crate::server::Shared;

const DASHBOARD: &str = include_str!("dashboard.html");

pub fn router(shared: Arc<Shared>) -> Router {
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/admin/destinations", get(destinations))
        .route(
            "/admin/destinations/{target}/{model}/{action}",
            post(destination_action),
        )
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
        .with_state(shared)
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
