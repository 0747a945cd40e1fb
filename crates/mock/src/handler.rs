//! One HTTP request: the control API (`/_mock/...`) or a dialect endpoint.
//!
//! Dialect flow: parse → count the hit and pick the behaviour → engine decides → first-byte delay
//! → the dialect frames the outcome.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Map, Value};

use crate::body::{self, MockBody};
use crate::config::{Behaviour, Hostile};
use crate::dialect::{azure, embeddings, percent_decode, Dialect, RenderContext};
use crate::engine::{self, MockError};
use crate::state::Shared;

const CONTROL_PREFIX: &str = "/_mock/";

pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<MockBody>, Infallible> {
    let started = Instant::now();
    let (parts, incoming) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let body = match incoming.collect().await {
        Ok(collected) => collected.to_bytes(),
        // The client went away mid-request; whatever we answer goes nowhere.
        Err(_) => {
            return Ok(control_reply(
                StatusCode::BAD_REQUEST,
                json!({"error": "unreadable body"}),
            ))
        }
    };

    if let Some(rest) = path.strip_prefix(CONTROL_PREFIX) {
        return Ok(control(&shared, &parts.method, rest, &body));
    }
    if parts.method == Method::POST && path == "/token" {
        return Ok(shared.token_request(&body));
    }
    let mut ctx = RenderContext {
        request_id: format!("req_{}", shared.fresh_hex()),
        unique: shared.fresh_hex(),
        created: unix_now(),
        model: String::new(),
        include_stream_usage: false,
        started,
    };
    // Routing uses the raw path: a Bedrock model id with `%2F` stays one segment.
    let Some(route) = Dialect::for_route(&parts.method, &path) else {
        // Unknown routes answer like OpenAI does, the most common dialect.
        let error = MockError {
            error_type: Some("invalid_request_error".to_owned()),
            message: Some(format!("Invalid URL ({} {path})", parts.method)),
            ..MockError::new(404)
        };
        return Ok(Dialect::OpenAiChat.render_error(&ctx, &error));
    };
    let dialect = route.dialect;
    // Azure: its auth and `api-version` first; a deployment path names the model, so a body
    // without `model` (Azure needs none) is given the deployment's.
    let body = match (&route.model_id, route.azure) {
        (Some(deployment), true) => azure::with_model(body, deployment),
        _ => body,
    };
    if route.azure {
        if !azure::authorized(&parts.headers) {
            return Ok(azure::unauthorized(&ctx));
        }
        if route.model_id.is_some() && azure::api_version(parts.uri.query()).is_none() {
            return Ok(azure::missing_api_version(&ctx));
        }
    }
    // Vertex answers only a bearer its token endpoint issued.
    let vertex = matches!(dialect, Dialect::VertexAnthropic | Dialect::VertexGemini);
    if vertex && !shared.token_accepted(&parts.headers) {
        return Ok(crate::google_token::unauthenticated());
    }
    let google_ai = matches!(
        dialect,
        Dialect::Gemini | Dialect::Embeddings(embeddings::Api::Gemini)
    );
    if google_ai && !crate::dialect::gemini::has_key(&parts.headers) {
        ctx.model = route.model_id.unwrap_or_default();
        return Ok(dialect.render_error(&ctx, &crate::dialect::gemini::missing_key()));
    }

    let parsed = match dialect {
        Dialect::Embeddings(api) => {
            let model_id = route.model_id.as_deref().unwrap_or_default();
            embeddings::parse(api, model_id, &body).map(|(f, j, r)| (f, j, Some(r)))
        }
        _ => dialect
            .parse_request(&route, &body)
            .map(|(f, j)| (f, j, None)),
    };
    let (mut facts, json, embed) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            ctx.model = route.model_id.unwrap_or_default();
            return Ok(dialect.render_error(&ctx, &error));
        }
    };
    if let (true, Some(deployment)) = (route.azure, &route.model_id) {
        facts.model = deployment.clone();
    }
    let record = json!({
        "path": path,
        "query": parts.uri.query(),
        "model": facts.model,
        "auth": auth_scheme(&parts.headers),
        "headers": headers_json(&parts.headers),
        "body": json,
    });
    let admission = shared.admit(&facts.model, &route.endpoint, record);
    // Counts the request as cancelled if this future or the answer's body is dropped before the
    // body ended: the caller went away.
    let guard = {
        let shared = shared.clone();
        let model = facts.model.clone();
        body::CancelGuard::new(move || shared.count_cancelled(&model))
    };
    let decision = engine::decide(
        &admission.behaviour,
        &facts,
        admission.draw,
        admission.fail_first,
    );
    if !decision.first_byte_delay.is_zero() {
        tokio::time::sleep(decision.first_byte_delay).await;
    }
    ctx.model = facts.model.clone();
    ctx.include_stream_usage = facts.include_stream_usage;
    let behaviour = &admission.behaviour;
    let mut res = match (behaviour.hostile, &decision.outcome) {
        (Some(Hostile::NoHeaders), _) => {
            // Never answer; the client gives up first (bounded all the same).
            tokio::time::sleep(std::time::Duration::from_secs(600)).await;
            return Ok(control_reply(StatusCode::GATEWAY_TIMEOUT, json!({})));
        }
        (Some(Hostile::EndlessBody), engine::Outcome::Success(_)) => {
            let mut res =
                Response::new(body::scripted(body::hostile_steps(Hostile::EndlessBody, 0)));
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            res
        }
        (_, engine::Outcome::Success(success)) if route.azure && success.content_filtered => {
            azure::content_filtered(&ctx)
        }
        (_, engine::Outcome::Success(success)) => match &embed {
            Some(request) => embeddings::render_success(&ctx, success, request),
            None => dialect.respond(&ctx, &decision.outcome, facts.stream),
        },
        _ => dialect.respond(&ctx, &decision.outcome, facts.stream),
    };
    if let Some(v) = behaviour
        .content_encoding
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        res.headers_mut().insert(http::header::CONTENT_ENCODING, v);
    }
    Ok(res.map(|b| body::watched(b, guard)))
}

/// `GET stats`, `POST models/{name}`, `POST reset`.
fn control(shared: &Shared, method: &Method, rest: &str, body: &Bytes) -> Response<MockBody> {
    match (method, rest) {
        (&Method::GET, "stats") => control_reply(StatusCode::OK, shared.stats()),
        (&Method::POST, "token") => match serde_json::from_slice::<crate::TokenSettings>(body) {
            Ok(settings) => {
                shared.set_token_settings(settings.clone());
                control_reply(StatusCode::OK, json!({"ok": true, "token": settings}))
            }
            Err(e) => control_reply(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
        },
        (&Method::POST, "reset") => {
            shared.reset();
            control_reply(StatusCode::OK, json!({"ok": true}))
        }
        (&Method::POST, _) if rest.starts_with("models/") => {
            let name = percent_decode(&rest["models/".len()..]);
            if name.is_empty() {
                return control_reply(
                    StatusCode::BAD_REQUEST,
                    json!({"error": "missing model name"}),
                );
            }
            let behaviour = serde_json::from_slice::<Behaviour>(body)
                .map_err(|e| e.to_string())
                .and_then(|b| b.validate().map(|()| b));
            match behaviour {
                Ok(b) => {
                    shared.set_behaviour(&name, b.clone());
                    control_reply(
                        StatusCode::OK,
                        json!({"ok": true, "model": name, "behaviour": b}),
                    )
                }
                Err(e) => control_reply(StatusCode::BAD_REQUEST, json!({"error": e})),
            }
        }
        (&Method::GET, _) if rest.starts_with("models/") => {
            let name = percent_decode(&rest["models/".len()..]);
            control_reply(
                StatusCode::OK,
                json!({"model": name, "behaviour": shared.behaviour(&name)}),
            )
        }
        _ => control_reply(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no control endpoint {method} {CONTROL_PREFIX}{rest}")}),
        ),
    }
}

fn control_reply(status: StatusCode, value: Value) -> Response<MockBody> {
    let mut res = Response::new(body::full(value.to_string()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

/// Header names are already lowercase in `http`; repeated headers are joined with `, `.
fn headers_json(headers: &HeaderMap) -> Value {
    let mut out = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match out.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value));
            }
        }
    }
    Value::Object(out)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How the request authenticated: `sigv4` (`Authorization: AWS4-HMAC-SHA256 ...`), `bearer`,
/// `x-api-key`, `api-key` (Azure), `x-goog-api-key`, `other`, or `none`.
fn auth_scheme(headers: &HeaderMap) -> &'static str {
    match headers
        .get(http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
    {
        Some(v) if v.starts_with(b"AWS4-HMAC-SHA256") => "sigv4",
        Some(v) if v.len() >= 7 && v[..7].eq_ignore_ascii_case(b"bearer ") => "bearer",
        Some(_) => "other",
        None if headers.contains_key("x-api-key") => "x-api-key",
        None if headers.contains_key("api-key") => "api-key",
        None if headers.contains_key("x-goog-api-key") => "x-goog-api-key",
        None => "none",
    }
}
