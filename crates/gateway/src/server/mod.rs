//! The data-plane server: the route table and the phases of one request, in order.

pub(crate) mod boundary;
mod cache;
mod cors;
mod finish;
mod lifecycle;
mod listen;
pub mod paths;
mod respond;
mod tls;
mod watchdog;

pub use lifecycle::{start, GatewayHandle, GatewayOptions, ReloadFn};

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use http::{HeaderMap, StatusCode};
use http_body::Body as _;
use sidetrack_config::Config;
use sidetrack_dialects::{Dialect, GatewayErrorKind, ParsedRequest};

use crate::auth::{AuthError, KeyTable, Principal};
use crate::engine::{self, WalkInput};
use crate::observe::metrics::Metrics;
use crate::observe::RoutingLog;
use crate::providers::Upstreams;
use crate::routing::{self, Picker, Resolved, RouteInput};
use crate::state::idempotency as idem;
use crate::state::Health;
pub use respond::RequestCtx;

/// Everything derived from one loaded config. Swapped atomically on reload; a request keeps the
/// `Arc<Runtime>` it started with.
pub struct Runtime {
    pub config: Arc<Config>,
    pub upstreams: Upstreams,
    pub keys: KeyTable,
    /// The gateway's own credentials, kept out of what upstreams send back (SPEC §14).
    pub secrets: boundary::Secrets,
}

impl Runtime {
    pub fn new(config: Config) -> Runtime {
        let upstreams = Upstreams::new(&config);
        let keys = KeyTable::new(config.auth.as_ref());
        Runtime {
            secrets: boundary::Secrets::of(&config),
            config: Arc::new(config),
            upstreams,
            keys,
        }
    }
}

/// State that lives as long as the process, across config reloads.
pub struct Shared {
    pub runtime: ArcSwap<Runtime>,
    pub log: RoutingLog,
    pub ready: AtomicBool,
    /// Breakers and EWMAs per destination: survive reloads for destinations that still exist.
    pub health: Health,
    pub metrics: Arc<Metrics>,
    /// Round-robin, weighted and P2C draws.
    pub picker: Picker,
    /// Requests that reached the walk, and those answered by a fallback hop (dashboard rate).
    pub walked: AtomicU64,
    pub fell_back: AtomicU64,
    /// How `POST /admin/reload` gets a new config (the binary re-reads its file).
    pub reload: Option<ReloadFn>,
    /// Gateway rate limits per principal (shared through the state store when there is one).
    pub limiter: Arc<crate::state::limits::RateLimiter>,
    /// `Idempotency-Key`s: answers joined in flight and replayed (SPEC §12).
    pub idempotency: crate::state::idempotency::Idempotency,
    /// The response store (SPEC §12).
    pub store: crate::state::store::Store,
    /// The dashboard's bounded history and recent decisions (issue 19).
    pub dash: crate::admin::history::Dash,
}

impl Shared {
    /// Swaps in a new config; in-flight requests keep the one they started with.
    pub fn apply(&self, config: Config) {
        self.health.sync_config(&config);
        self.store.configure(&config.cache);
        self.runtime.store(Arc::new(Runtime::new(config)));
    }
}

/// The data-plane routes, each dialect path also under `/inference` (AgentCore's prefix).
pub fn router(shared: Arc<Shared>) -> Router {
    let mut router = Router::new();
    for (path, dialect) in paths::DIALECT_PATHS {
        router = router.route(
            path,
            post(move |State(shared): State<Arc<Shared>>, req: Request| {
                let (parts, body) = req.into_parts();
                handle(
                    shared,
                    Cow::Borrowed(path),
                    dialect,
                    None,
                    false,
                    parts,
                    body,
                )
            }),
        );
    }
    router
        .route("/model/{model_id}/{operation}", post(bedrock))
        .route("/inference/model/{model_id}/{operation}", post(bedrock))
        .route("/v1beta/models/{model_method}", post(gemini))
        .route("/v1/models/{model_method}", post(gemini))
        .route("/v1/models", get(list_models))
        .route("/inference/v1/models", get(list_models))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        // A data path asked with another method is the same 404 as an unknown path (a 405 from a
        // path that shares its prefix with `GET /v1/models` would say less).
        .method_not_allowed_fallback(not_found)
        .with_state(shared)
}

async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    if shared.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    }
}

async fn not_found(req: Request) -> Response {
    let msg = format!(
        "sidetrack has no endpoint {} {}",
        req.method(),
        req.uri().path()
    );
    respond::error_response(Dialect::OpenAiChat, GatewayErrorKind::NotFound, &msg, None)
}

async fn list_models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let rt = shared.runtime.load_full();
    let principal = match rt.keys.authenticate(&headers) {
        Ok(p) => p,
        Err(e) => {
            return respond::error_response(
                Dialect::OpenAiChat,
                GatewayErrorKind::Unauthenticated,
                auth_message(e),
                None,
            )
        }
    };
    let data: Vec<serde_json::Value> =
        routing::listed_models(&rt.config, &principal.name, principal.models.as_deref())
            .into_iter()
            .map(|(id, owner)| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
            .collect();
    let body = serde_json::json!({"object": "list", "data": data}).to_string();
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn auth_message(e: AuthError) -> &'static str {
    match e {
        AuthError::Missing => {
            "missing API key: send it as `Authorization: Bearer <key>`, `x-api-key` or \
             `x-goog-api-key`"
        }
        AuthError::Invalid => "invalid API key",
    }
}

/// `/model/{modelId}/{operation}`: routed on the raw path so an ARN's `%2F` stays inside the id;
/// the id is percent-decoded here (`:` and `%3A` both work).
async fn bedrock(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let raw = req.uri().path();
    // The route matched, so the split does too.
    let (raw_id, operation) = paths::bedrock_split(raw).unwrap_or_default();
    let Some((dialect, stream)) = paths::bedrock_operation(operation) else {
        let msg = format!("unknown Bedrock operation `{operation}`");
        return respond::error_response(
            Dialect::BedrockConverse,
            GatewayErrorKind::NotFound,
            &msg,
            None,
        );
    };
    let Some(model) = sidetrack_dialects::bedrock::decode_model_id(raw_id) else {
        let msg = "the model id in the path is not valid percent-encoding";
        return respond::error_response(dialect, GatewayErrorKind::InvalidRequest, msg, None);
    };
    let path = Cow::Owned(raw.to_owned());
    let (parts, body) = req.into_parts();
    handle(shared, path, dialect, Some(model), stream, parts, body).await
}

/// `/{v1beta|v1}/models/{model}:{method}` (SPEC §13, the google-genai SDKs): the model from the
/// path (percent-decoded), `generateContent` or `streamGenerateContent`; a stream is served as
/// server-sent events, which the caller asks for with `alt=sse` (the SDKs always do).
async fn gemini(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let raw = req.uri().path();
    let refuse = |kind, msg: &str| respond::error_response(Dialect::Gemini, kind, msg, None);
    let Some((raw_model, method)) = sidetrack_dialects::gemini::split_path(raw) else {
        let msg = format!("sidetrack has no endpoint POST {raw}");
        return refuse(GatewayErrorKind::NotFound, &msg);
    };
    let Some(stream) = sidetrack_dialects::gemini::operation_streams(method) else {
        let msg = format!("unknown Gemini method `{method}`");
        return refuse(GatewayErrorKind::NotFound, &msg);
    };
    let sse = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    if stream && !sse {
        let msg = "streamGenerateContent is served as server-sent events only: add `?alt=sse`";
        return refuse(GatewayErrorKind::InvalidRequest, msg);
    }
    let Some(model) = sidetrack_dialects::bedrock::decode_model_id(raw_model) else {
        let msg = "the model in the path is not valid percent-encoding";
        return refuse(GatewayErrorKind::InvalidRequest, msg);
    };
    let path = Cow::Owned(raw.to_owned());
    let (parts, body) = req.into_parts();
    handle(
        shared,
        path,
        Dialect::Gemini,
        Some(model),
        stream,
        parts,
        body,
    )
    .await
}

/// The phases of one request (SPEC §5.1), top to bottom. `path` is the request's path (the
/// routing log's `requestPath`), a static string for the literal dialect paths.
#[allow(
    clippy::manual_async_fn,
    reason = "an `async fn` would keep its arguments twice in its future"
)]
fn handle(
    shared: Arc<Shared>,
    path: Cow<'static, str>,
    dialect: Dialect,
    path_model: Option<String>,
    path_stream: bool,
    parts: http::request::Parts,
    body: Body,
) -> impl Future<Output = Response> {
    // A plain fn returning an `async` block: one copy of the arguments in the future, not two
    // (docs/decisions/0003-hot-path.md, "Small futures").
    async move {
        // accept
        let rt = shared.runtime.load_full();
        let server = &rt.config.server;
        let mut ctx = RequestCtx::new(&shared, dialect, path, server);
        let asks = CallerAsks::scan(&parts.headers);
        let budget = asks.budget(server);
        let deadline = ctx.started + budget;
        ctx.deadline_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);

        // authenticate
        let principal: Arc<Principal> = match authenticate(&rt, &parts.headers) {
            Ok(p) => p,
            Err(r) => return ctx.refuse(r),
        };
        ctx.principal = Some(principal.name.clone());

        // admit (size), then the body
        let sticky_header = sticky_header_value(&rt.config, &parts.headers);
        let body = match admitted_body(body, &parts.headers, server, ctx.started).await {
            Ok(b) => b,
            Err(r) => return ctx.refuse(r),
        };

        // parse
        let fingerprint = idem::fingerprint_of(asks.idempotency_key, dialect, &ctx.path, &body);
        let parsed = match parse(dialect, body, (path_model.as_deref(), path_stream), &asks) {
            Ok(p) => p,
            Err(r) => return ctx.refuse(r),
        };
        ctx.requested_model = Some(parsed.model.clone());
        ctx.streamed = parsed.stream;
        // access: the principal's allow-list, for every route (a pin is checked by its model part)
        if let Err(r) = authorize(&principal, &rt.config, &parsed.model) {
            return ctx.refuse(r);
        }
        // idempotency (SPEC §12): a duplicate is answered here; the first of its key runs.
        let lead = match fingerprint {
            None => None,
            Some(keyed) => match lead_or_answer(&shared, &rt, &principal, keyed, deadline).await {
                Ok(lead) => {
                    ctx.stream_failed = Some(lead.stream_failed());
                    Some(lead)
                }
                Err(other) => return ctx.idempotent(other),
            },
        };

        // admit (gateway rate limits): before any route is walked, so a refusal costs no upstream call
        if let Some(limits) = &principal.limits {
            match admit_limits(&shared, &principal, limits, &ctx, &parsed).await {
                Ok(reservation) => ctx.reservation = Some(reservation),
                Err(retry_after) => return ctx.rate_limited(retry_after),
            }
        }

        let asked = Asked {
            parsed: &parsed,
            principal: &principal,
            sticky: sticky_header.as_deref(),
            deadline,
            fallback_off: server.caller_overrides && asks.fallback_off,
        };
        let resp = route_walk_commit(&shared, &rt, ctx, &parts.headers, asked).await;
        idem::Lead::capture_opt(lead, resp)
    }
}

/// What the later phases need of the request, once it is admitted.
struct Asked<'r> {
    parsed: &'r ParsedRequest,
    principal: &'r Principal,
    sticky: Option<&'r str>,
    deadline: tokio::time::Instant,
    /// `x-sidetrack-fallback: off`, honoured.
    fallback_off: bool,
}

/// Phases "resolve route", the store before the walk (`always`), "walk the chain" and
/// "commit and respond".
async fn route_walk_commit(
    shared: &Arc<Shared>,
    rt: &Runtime,
    mut ctx: RequestCtx,
    headers: &HeaderMap,
    asked: Asked<'_>,
) -> Response {
    let Asked {
        parsed,
        principal,
        sticky,
        deadline,
        fallback_off,
    } = asked;
    let server = &rt.config.server;
    let input = RouteInput {
        model: &parsed.model,
        principal: &principal.name,
        sticky,
    };
    let plan = match routing::resolve(&rt.config, &input, &shared.picker) {
        Resolved::Plan(plan) => plan,
        Resolved::Unroutable => {
            let msg = format!("no route for model `{}`", parsed.model);
            return ctx.unroutable(&msg);
        }
    };
    ctx.rule_name = plan.rule.map(str::to_owned);
    ctx.match_type = Some(plan.match_type.as_str());
    // the response store (SPEC §12): `always` answers a hit before the walk
    ctx.cache = cache::prepare(&rt.config, plan.rule, &principal.name, parsed, headers);
    if let Some(c) = ctx.cache.as_deref_mut() {
        if c.mode == sidetrack_config::CacheMode::Always {
            // Boxed: the embeddings walk and the Redis call make this future large, and only
            // requests that look pay for it.
            if let Some(hit) = Box::pin(cache::lookup(shared, rt, c)).await {
                return ctx.served_from_cache(&hit, engine::WalkOutput::default());
            }
        }
    }
    let out = engine::walk(WalkInput {
        plan: &plan,
        request: parsed,
        upstreams: &rt.upstreams,
        deadline,
        stream_commit: server.stream_commit,
        bounds: engine::attempt::Bounds::of(server),
        picker: &shared.picker,
        health: &shared.health,
        metrics: &shared.metrics,
        caller_headers: headers,
        request_id: ctx.request_id.as_str(),
        max_attempts: rt.config.defaults.max_attempts,
        retry_budget: rt.config.defaults.retry_budget,
        fallback_off,
    })
    .await;
    // A walk that ended without success (not a caller's 400) falls through to the store.
    if let Some(c) = ctx.cache.as_deref_mut() {
        if cache::walk_failed(&out) {
            if let Some(hit) = Box::pin(cache::lookup(shared, rt, c)).await {
                return ctx.served_from_cache(&hit, out);
            }
        }
    }
    ctx.commit(out, &rt.secrets)
}

/// Phase "parse": the body in the caller's dialect; a guardrail asked for in headers is routed
/// like one in the body (SPEC §11).
fn parse(
    dialect: Dialect,
    body: bytes::Bytes,
    (path_model, path_stream): (Option<&str>, bool),
    asks: &CallerAsks<'_>,
) -> Result<ParsedRequest, Refusal> {
    let mut parsed = dialect
        .parse_request(body, path_model, path_stream)
        .map_err(|e| Refusal {
            kind: GatewayErrorKind::InvalidRequest,
            message: e.to_string().into(),
            why: e.why(),
        })?;
    parsed.note_guardrail_headers(asks.guardrail.into_iter());
    Ok(parsed)
}

/// Phase "idempotency" (SPEC §12) for a keyed request: this request leads its key, or the
/// duplicate's answer (a replay, or a refusal of its key). Boxed: only keyed requests pay for the
/// (Redis-sized) future, and the lead is held across the walk by every request's future.
async fn lead_or_answer(
    shared: &Shared,
    rt: &Runtime,
    principal: &Principal,
    keyed: Result<Box<idem::Keyed>, &'static str>,
    deadline: tokio::time::Instant,
) -> Result<Box<idem::Lead>, idem::Begin> {
    let idem = &rt.config.idempotency;
    let begin = shared
        .idempotency
        .begin(&principal.name, keyed, idem, deadline);
    match Box::pin(begin).await {
        idem::Begin::Lead(lead) => Ok(Box::new(lead)),
        other => Err(other),
    }
}

/// Phase "admit (gateway rate limits)": a token reservation, or how long to wait. Boxed: the
/// store's script call makes this future large, and unboxed it would size every request's
/// future, limited or not.
async fn admit_limits(
    shared: &Shared,
    principal: &Principal,
    limits: &sidetrack_config::Limits,
    ctx: &RequestCtx,
    parsed: &ParsedRequest,
) -> Result<crate::state::limits::Reservation, std::time::Duration> {
    let estimate = parsed.features.estimated_prompt_tokens + 256;
    let admit = shared
        .limiter
        .admit(&principal.name, limits, ctx.request_id.as_str(), estimate);
    Box::pin(admit).await.map_err(|limited| limited.retry_after)
}

/// What the caller asks of the retry controller in its headers (SPEC §11), found in one pass over
/// the headers (a map lookup per name costs more than a scan of a request's few headers).
#[derive(Default)]
struct CallerAsks<'h> {
    /// `x-sidetrack-timeout-ms`
    timeout_ms: Option<&'h str>,
    /// `x-stainless-timeout`
    stainless_timeout: Option<&'h str>,
    /// `x-sidetrack-fallback: off`
    fallback_off: bool,
    /// An `X-Amzn-Bedrock-Guardrail*` header's name (SPEC §11 guardrails).
    guardrail: Option<&'h str>,
    /// `Idempotency-Key` (SPEC §12).
    idempotency_key: Option<&'h http::HeaderValue>,
}

impl<'h> CallerAsks<'h> {
    fn scan(headers: &'h HeaderMap) -> CallerAsks<'h> {
        let mut asks = CallerAsks::default();
        for (name, value) in headers {
            // Names in a `HeaderMap` are lower case; the length rules out most at once.
            match name.as_str() {
                "x-sidetrack-timeout-ms" => asks.timeout_ms = value.to_str().ok(),
                "x-stainless-timeout" => asks.stainless_timeout = value.to_str().ok(),
                "idempotency-key" => asks.idempotency_key = Some(value),
                "x-sidetrack-fallback" => {
                    asks.fallback_off = value.as_bytes().eq_ignore_ascii_case(b"off");
                }
                other if sidetrack_dialects::request::is_guardrail_header(other) => {
                    asks.guardrail = Some(other);
                }
                _ => {}
            }
        }
        asks
    }

    /// The request's time budget (SPEC §11 Deadline): `server.requestTimeoutMilliseconds`, or the
    /// caller's own deadline when it is sooner — `x-stainless-timeout` when
    /// `server.callerDeadline`, and `x-sidetrack-timeout-ms` when `server.callerOverrides` too.
    fn budget(&self, server: &sidetrack_config::Server) -> std::time::Duration {
        if !server.caller_deadline {
            return server.request_timeout;
        }
        let ms = self.timeout_ms.filter(|_| server.caller_overrides);
        match sidetrack_resilience::retry::caller_timeout(ms, self.stainless_timeout) {
            Some(caller) => caller.min(server.request_timeout),
            None => server.request_timeout,
        }
    }
}

/// Why a request is refused before routing: the error kind, the message, and the routing log's
/// `gatewayRejected:<why>`.
pub(crate) struct Refusal {
    pub kind: GatewayErrorKind,
    pub message: Cow<'static, str>,
    pub why: &'static str,
}

/// Phase "authenticate": the caller's key names a principal (or auth is off: `anonymous`).
fn authenticate(rt: &Runtime, headers: &HeaderMap) -> Result<Arc<Principal>, Refusal> {
    rt.keys.authenticate(headers).map_err(|e| Refusal {
        kind: GatewayErrorKind::Unauthenticated,
        message: auth_message(e).into(),
        why: if e == AuthError::Missing {
            "missingKey"
        } else {
            "invalidKey"
        },
    })
}

/// Phase "admit (size)" and the body: a declared length over `maxRequestBytes` is refused before
/// a byte is read; the body is read whole within its limit and `bodyReadTimeoutMilliseconds`.
async fn admitted_body(
    body: Body,
    headers: &HeaderMap,
    server: &sidetrack_config::Server,
    started: tokio::time::Instant,
) -> Result<bytes::Bytes, Refusal> {
    let limit = server.max_request_bytes;
    let too_big = || Refusal {
        kind: GatewayErrorKind::TooLarge,
        message: too_large(limit).into(),
        why: "tooLarge",
    };
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_big());
    }
    match read_body(body, limit, started + server.body_read_timeout).await {
        Ok(b) => Ok(b),
        Err(BodyError::TooLarge) => Err(too_big()),
        Err(BodyError::TimedOut) => Err(Refusal {
            kind: GatewayErrorKind::RequestTimeout,
            message: body_too_slow(server.body_read_timeout).into(),
            why: "bodyTimeout",
        }),
        Err(BodyError::Failed) => Err(Refusal {
            kind: GatewayErrorKind::InvalidRequest,
            message: "could not read the request body".into(),
            why: "badBody",
        }),
    }
}

/// Access: the principal's `models` allow-list, checked for every route (SPEC §5.2; a pin by its
/// model part). Rules select; they do not authorize.
fn authorize(principal: &Principal, cfg: &Config, model: &str) -> Result<(), Refusal> {
    if principal.may_use(routing::access_name(cfg, model)) {
        return Ok(());
    }
    Err(Refusal {
        kind: GatewayErrorKind::PermissionDenied,
        message: format!("principal `{}` may not use model `{model}`", principal.name).into(),
        why: "modelNotAllowed",
    })
}

enum BodyError {
    TooLarge,
    Failed,
    /// Not all there by `server.bodyReadTimeoutMilliseconds` after the request began.
    TimedOut,
}

/// The caller's whole body, at most `limit` bytes, all of it by `deadline` (a body trickling in
/// forever holds a connection and a task, SPEC §14). A body that arrives in one frame (the usual
/// case: a chat request fits one read) is that frame, neither copied nor collected in a list.
async fn read_body(
    mut body: Body,
    limit: usize,
    deadline: tokio::time::Instant,
) -> Result<bytes::Bytes, BodyError> {
    use std::task::Poll;
    let mut len = 0;
    let mut first: Option<bytes::Bytes> = None;
    // The first frame and every later one, copied together once a second frame comes.
    let mut joined = bytes::BytesMut::new();
    // Polled (so registered with the timer) only when the body makes us wait: a body that is
    // already here costs no timer. In place, not boxed: no allocation.
    let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
    loop {
        let next = std::future::poll_fn(|cx| match std::pin::Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(Ok(frame)),
            Poll::Pending => timer.as_mut().poll(cx).map(|()| Err(BodyError::TimedOut)),
        });
        let Some(frame) = next.await? else {
            break;
        };
        let Ok(data) = frame.map_err(|_| BodyError::Failed)?.into_data() else {
            continue; // trailers
        };
        len += data.len();
        if len > limit {
            return Err(BodyError::TooLarge);
        }
        match &first {
            None => first = Some(data),
            Some(f) => {
                if joined.is_empty() {
                    joined.extend_from_slice(f);
                }
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(if joined.is_empty() {
        first.unwrap_or_default()
    } else {
        joined.freeze()
    })
}

fn body_too_slow(limit: std::time::Duration) -> String {
    format!(
        "the request body did not arrive within server.bodyReadTimeoutMilliseconds ({} ms)",
        limit.as_millis()
    )
}

fn too_large(limit: usize) -> String {
    format!("request body exceeds server.maxRequestBytes ({limit} bytes)")
}

/// The value of the first weighted route's stickiness header present on the request.
fn sticky_header_value(cfg: &Config, headers: &HeaderMap) -> Option<String> {
    cfg.rules.iter().find_map(|r| match &r.route {
        sidetrack_config::Route::Weighted(w) => w
            .stickiness_header
            .as_deref()
            .and_then(|h| headers.get(h))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn body(frames: &[&'static str]) -> Body {
        let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = frames
            .iter()
            .map(|f| Ok(http_body::Frame::data(Bytes::from_static(f.as_bytes()))))
            .collect();
        Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(
            frames,
        )))
    }

    fn later() -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(60)
    }

    /// Every request's future is boxed once (`App::dispatch`) and its upstream send once more
    /// (`HttpClient::request`): each is allocated, and the copy into the box writes every cache
    /// line of the future. Rare paths (a connect, a stream's hold, hedging, the store, Redis
    /// calls) are boxed where they are awaited so that these stay small
    /// (docs/decisions/0003-hot-path.md, "Small futures"). The bounds leave some room; a change
    /// that crosses one should box its rare path rather than raise the bound.
    #[tokio::test]
    async fn the_futures_every_request_allocates_stay_small() {
        let yaml = "server: { listen: 127.0.0.1:0, admin: 127.0.0.1:0 }\n\
                    targets: [{ name: t, provider: openai, baseUrl: http://127.0.0.1:9/v1 }]\n";
        let config = sidetrack_config::load_str(yaml, "t.yaml").unwrap();
        let gw = super::lifecycle::start(config, RoutingLog::off(), Default::default())
            .await
            .unwrap();
        let (parts, ()) = http::Request::post("/v1/chat/completions")
            .body(())
            .unwrap()
            .into_parts();
        let request = handle(
            gw.shared.clone(),
            "/v1/chat/completions".into(),
            Dialect::OpenAiChat,
            None,
            false,
            parts,
            Body::empty(),
        );
        let request_size = std::mem::size_of_val(&request);
        let upstream = http::Request::post("http://127.0.0.1:9/v1/chat/completions")
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let send_size = crate::providers::pool::send_future_size(upstream);
        assert!(request_size <= 4096, "request future {request_size} bytes");
        assert!(send_size <= 1536, "send future {send_size} bytes");
    }

    #[tokio::test]
    async fn a_body_is_read_whole_within_its_limit() {
        let one = Bytes::from_static(b"{\"model\":\"m\"}");
        let whole = read_body(Body::from(one.clone()), 100, later())
            .await
            .ok()
            .unwrap();
        assert_eq!(whole.as_ptr(), one.as_ptr(), "one frame is taken as it is");
        let whole = read_body(body(&["ab", "", "cd", "e"]), 5, later())
            .await
            .ok()
            .unwrap();
        assert_eq!(&whole[..], b"abcde");
        assert!(matches!(
            read_body(body(&["ab", "cd", "ef"]), 5, later()).await,
            Err(BodyError::TooLarge)
        ));
        assert!(matches!(
            read_body(body(&["abcdef"]), 5, later()).await,
            Err(BodyError::TooLarge)
        ));
        assert_eq!(
            &read_body(body(&[]), 5, later()).await.ok().unwrap()[..],
            b""
        );
    }

    #[tokio::test]
    async fn a_body_that_keeps_trickling_past_the_deadline_times_out() {
        // One byte every 20 ms, forever: no gap is long, the whole body is late.
        let trickle = futures_util::stream::unfold((), |()| async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            Some((
                Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from_static(b"x"))),
                (),
            ))
        });
        let body = Body::new(http_body_util::StreamBody::new(trickle));
        let started = tokio::time::Instant::now();
        let deadline = started + std::time::Duration::from_millis(150);
        let got = read_body(body, 1 << 20, deadline).await;
        assert!(matches!(got, Err(BodyError::TimedOut)));
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(150)
                && waited < std::time::Duration::from_secs(2),
            "{waited:?}"
        );
    }
}
