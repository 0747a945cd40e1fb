//! The response store at the request's phases (SPEC §12): whether a request uses it and under
//! which key (before the walk), answering from it (`always` before the walk, `lastResort` after a
//! walk that ended without success), and keeping a successful answer (at the commit for a whole
//! body, at the finish phase for a relayed one). With `cache.mode: off` everywhere none of this
//! runs: [`prepare`] returns after one test.
//!
//! Semantic lookup (`cache.semantic`): on an exact miss, the request's last user turn is embedded
//! through the configured embeddings destination — walked by the engine like any request, with
//! that destination's own breaker, within `embeddingTimeoutMilliseconds` — and the nearest stored
//! question of the same partition at or above `similarityThreshold` answers. Slow or failing
//! embeddings leave the lookup exact-only. A stored answer's question is embedded in a spawned
//! task (never on the response path) and kept in the vector index (and shared through Redis).

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::HeaderMap;
use sidetrack_config::{CacheMode, Config, Semantic};
use sidetrack_dialects::canonical::{ChatRequest, ChatResponse, Part, Role};
use sidetrack_dialects::collect::{stream_events, Collector};
use sidetrack_dialects::translate::Decode;
use sidetrack_dialects::{Dialect, ParsedRequest};

use crate::observe::metrics::CacheResult;
use crate::server::{Runtime, Shared};
use crate::state::store::{Scope, StoreKey};
use crate::state::vectors::{normalise, Quantised};

pub(super) static CACHE: HeaderName = HeaderName::from_static("x-sidetrack-cache");
static SERVED_BY: HeaderName = HeaderName::from_static("x-sidetrack-served-by");

/// The routing log's reason for an answer from the store.
pub(crate) const SERVED_FROM_CACHE: &str = "servedFromCache";

/// How one request uses the store: its mode and key (`None`: the store is bypassed).
pub(crate) struct CacheUse {
    pub mode: CacheMode,
    key: Option<StoreKey>,
    /// The caller asked for the usage chunk in an OpenAI chat stream.
    stream_usage: bool,
    /// `cache.maxBytes`: also the largest answer collected.
    max_bytes: usize,
    /// With `cache.semantic`: the question's text (its last user turn) and, once embedded, its
    /// vector (a lookup's vector is reused when the answer is stored).
    question: Option<Box<Question>>,
}

/// What semantic lookup embeds of a request.
#[derive(Clone)]
pub(crate) struct Question {
    text: Box<str>,
    vector: Option<Arc<[f32]>>,
    /// A lookup asked for the vector already (a request waits for at most one embedding).
    asked: bool,
}

/// An answer from the store, and whether a near question (not the exact one) found it.
pub(crate) struct Hit {
    pub answer: Arc<ChatResponse>,
    pub semantic: bool,
}

impl CacheUse {
    fn mode_label(&self) -> &'static str {
        self.mode.as_str()
    }

    /// The caller asked for the usage chunk in an OpenAI chat stream.
    pub(super) fn stream_usage(&self) -> bool {
        self.stream_usage
    }

    /// The collector for a relayed answer, when this request has a key.
    pub(super) fn collecting(&mut self, dialect: Dialect, stream: bool) -> Option<Box<Collecting>> {
        let key = self.key?;
        let mut c = Collecting::new(key, dialect, stream, self.max_bytes);
        c.question = self.question.take();
        Some(Box::new(c))
    }
}

/// The text of the last user turn (its text parts, joined), if it has any.
fn last_user_text(req: &ChatRequest) -> Option<Box<str>> {
    let turn = req.messages.iter().rev().find(|m| m.role == Role::User)?;
    let mut text = String::new();
    for p in &turn.content {
        if let Part::Text(t) = p {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(t);
        }
    }
    (!text.trim().is_empty()).then(|| text.into_boxed_str())
}

/// `cache-control: no-store` or `x-sidetrack-cache: off`: neither stored nor served.
fn opted_out(headers: &HeaderMap) -> bool {
    let no_store = headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|d| d.trim().eq_ignore_ascii_case("no-store"))
            })
        });
    no_store
        || headers
            .get(&CACHE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"off"))
}

/// Before the walk: the request's mode (the rule's, else the top level) and key. `None` when the
/// mode is `off` — the only work then is [`Config::cache_mode`]'s one test.
pub(super) fn prepare(
    cfg: &Config,
    rule: Option<&str>,
    principal: &str,
    parsed: &ParsedRequest,
    headers: &HeaderMap,
) -> Option<Box<CacheUse>> {
    let mode = cfg.cache_mode(rule);
    if mode == CacheMode::Off {
        return None;
    }
    let (key, question) = if opted_out(headers) {
        (None, None)
    } else {
        // A request the canonical form cannot carry (a guardrail) is never keyed.
        match parsed.dialect.to_canonical(parsed) {
            Ok(req) => {
                let key = StoreKey::of(Scope::of(cfg.cache.scope, principal), &parsed.model, &req);
                let question = cfg.cache.semantic.as_ref().and_then(|_| {
                    last_user_text(&req).map(|text| {
                        Box::new(Question {
                            text,
                            vector: None,
                            asked: false,
                        })
                    })
                });
                (Some(key), question)
            }
            Err(_) => (None, None),
        }
    };
    Some(Box::new(CacheUse {
        mode,
        key,
        stream_usage: parsed.stream_usage == Some(true),
        max_bytes: cfg.cache.max_bytes,
        question,
    }))
}

/// Looks the request up and counts the lookup once (`bypass` when it has no key): the exact key
/// in memory, then (with `state.redis`) in the mirror, then — with `cache.semantic` — the
/// nearest stored question of the same partition.
pub(super) async fn lookup(shared: &Shared, rt: &Runtime, cache: &mut CacheUse) -> Option<Hit> {
    let m = &shared.metrics;
    let Some(key) = cache.key else {
        m.cache_lookup(cache.mode_label(), CacheResult::Bypass);
        return None;
    };
    let mut hit = exact(shared, &key).await.map(|answer| Hit {
        answer,
        semantic: false,
    });
    if hit.is_none() {
        if let (Some(sem), Some(q)) = (&rt.config.cache.semantic, cache.question.as_deref_mut()) {
            hit = semantic(shared, rt, sem, key, q).await.map(|answer| Hit {
                answer,
                semantic: true,
            });
        }
    }
    let result = match &hit {
        Some(h) if h.semantic => CacheResult::SemanticHit,
        Some(_) => CacheResult::Hit,
        None => {
            // A miss may have dropped an expired entry.
            m.cache_entries(shared.store.len());
            CacheResult::Miss
        }
    };
    m.cache_lookup(cache.mode_label(), result);
    hit
}

/// The exact key's answer: from memory, else from the mirror (brought into memory).
async fn exact(shared: &Shared, key: &StoreKey) -> Option<Arc<ChatResponse>> {
    if let Some(a) = shared.store.get(key) {
        return Some(a);
    }
    if shared.store.mirrored() && shared.store.fill_from_mirror(key).await {
        shared.metrics.cache_entries(shared.store.len());
        return shared.store.get(key);
    }
    None
}

/// The answer of the nearest stored question at or above the threshold, if the question could be
/// embedded in time. A match whose answer is gone is dropped from the index.
async fn semantic(
    shared: &Shared,
    rt: &Runtime,
    sem: &Semantic,
    key: StoreKey,
    q: &mut Question,
) -> Option<Arc<ChatResponse>> {
    let vector = match &q.vector {
        Some(v) => v.clone(),
        None if q.asked => return None,
        None => {
            q.asked = true;
            let v: Arc<[f32]> = embed(shared, rt, sem, &q.text).await?.into();
            q.vector = Some(v.clone());
            v
        }
    };
    let threshold = sem.similarity_threshold as f32;
    let found = shared
        .store
        .vectors()
        .nearest(&key.partition, &vector, threshold);
    for (exact_key, _) in found {
        let near = StoreKey {
            exact: exact_key,
            partition: key.partition,
        };
        if let Some(a) = exact(shared, &near).await {
            return Some(a);
        }
        if shared.store.authoritative() && shared.store.vectors().remove(&exact_key) {
            shared.metrics.cache_vectors(shared.store.vectors().len());
        }
    }
    None
}

/// The largest embeddings answer read.
const MAX_EMBEDDING_BYTES: usize = 4 << 20;

/// `text`'s unit vector from the embeddings destination of `cache.semantic`, or `None` when it
/// failed, answered something else, or took longer than `embeddingTimeoutMilliseconds`.
pub(super) async fn embed(
    shared: &Shared,
    rt: &Runtime,
    sem: &Semantic,
    text: &str,
) -> Option<Vec<f32>> {
    let walk = Box::pin(embed_walk(shared, rt, sem, text));
    tokio::time::timeout(sem.embedding_timeout, walk)
        .await
        .ok()
        .flatten()
}

async fn embed_walk(shared: &Shared, rt: &Runtime, sem: &Semantic, text: &str) -> Option<Vec<f32>> {
    use crate::engine::attempt::Upstream;
    use http_body_util::BodyExt;
    let cfg = &*rt.config;
    let target = cfg.targets.iter().position(|t| t.name == sem.target)?;
    let plan =
        crate::routing::single_hop(cfg, crate::routing::MatchType::Pinned, target, &sem.model);
    let body = serde_json::to_vec(&serde_json::json!({"model": sem.model, "input": text})).ok()?;
    let request = Dialect::OpenAiEmbeddings
        .parse_request(Bytes::from(body), None, false)
        .ok()?;
    let headers = HeaderMap::new();
    let out = crate::engine::walk(crate::engine::WalkInput {
        plan: &plan,
        request: &request,
        upstreams: &rt.upstreams,
        deadline: tokio::time::Instant::now() + sem.embedding_timeout,
        stream_commit: cfg.server.stream_commit,
        bounds: crate::engine::attempt::Bounds::of(&cfg.server),
        picker: &shared.picker,
        health: &shared.health,
        metrics: &shared.metrics,
        caller_headers: &headers,
        request_id: "semantic-lookup",
        max_attempts: cfg.defaults.max_attempts,
        retry_budget: cfg.defaults.retry_budget,
        fallback_off: false,
    })
    .await;
    let returned = out.returned?;
    if returned.fired
        || !returned
            .outcome
            .status()
            .is_some_and(|s| (200..300).contains(&s))
    {
        return None;
    }
    let body = match returned.upstream? {
        Upstream::Buffered { body, .. } => body,
        Upstream::Live { mut held, rest, .. } => {
            let rest = http_body_util::Limited::new(rest, MAX_EMBEDDING_BYTES)
                .collect()
                .await
                .ok()?
                .to_bytes();
            held.push(rest);
            crate::engine::concat(held)
        }
    };
    #[derive(serde::Deserialize)]
    struct Answer {
        data: Vec<Datum>,
    }
    #[derive(serde::Deserialize)]
    struct Datum {
        embedding: Vec<f32>,
    }
    let mut v = serde_json::from_slice::<Answer>(&body)
        .ok()?
        .data
        .into_iter()
        .next()?
        .embedding;
    normalise(&mut v).then_some(v)
}

/// Did the walk end without success (not a caller's 400)? Then the store may answer (SPEC §12).
pub(super) fn walk_failed(out: &crate::engine::WalkOutput) -> bool {
    out.deadline_exceeded || out.returned.as_ref().is_none_or(|r| r.fired)
}

/// A stored answer as the caller's 200: a whole body, or — when the caller asked for a stream —
/// the answer replayed through the dialect's stream encoder (SSE or the Bedrock event stream).
pub(super) fn hit_response(
    hit: &Hit,
    dialect: Dialect,
    streamed: bool,
    stream_usage: bool,
) -> Response {
    let answer = &*hit.answer;
    let (content_type, body) = if streamed {
        let mut enc = dialect.stream_encoder(&answer.id, &answer.model, stream_usage);
        let mut out = BytesMut::new();
        for ev in stream_events(answer) {
            out.extend_from_slice(&enc.encode(&ev));
        }
        (dialect.stream_content_type(), out.freeze())
    } else {
        ("application/json", dialect.render_response(answer))
    };
    let mut r = Response::new(Body::from(body));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if !streamed {
        if let Some(usage) = dialect.usage_headers(answer.usage) {
            for (name, n) in usage {
                h.insert(name, HeaderValue::from(n));
            }
        }
    }
    let how = if hit.semantic { "semantic-hit" } else { "hit" };
    h.insert(CACHE.clone(), HeaderValue::from_static(how));
    h.insert(SERVED_BY.clone(), HeaderValue::from_static("cache"));
    r
}

/// Keeps a whole successful body (the commit of an answer that was read whole): parsed from the
/// caller's dialect (a stream's bytes through its decoder).
pub(super) fn store_body(
    shared: &Arc<Shared>,
    cache: &CacheUse,
    dialect: Dialect,
    stream: bool,
    body: &[u8],
) {
    let (Some(key), max) = (cache.key, cache.max_bytes) else {
        return;
    };
    let answer = if stream {
        let mut c = Collecting::stream(dialect, max);
        c.observe(body);
        c.finish(None)
    } else {
        dialect.parse_response(body).ok()
    };
    if let Some(a) = answer {
        put(shared, key, a, cache.question.clone());
    }
}

/// Keeps an answer and, with `cache.semantic`, its question's vector: the lookup's when it was
/// embedded already, else embedded now in a spawned task (off the response path).
fn put(shared: &Arc<Shared>, key: StoreKey, answer: ChatResponse, question: Option<Box<Question>>) {
    if !shared.store.put(key, answer) {
        return;
    }
    shared.metrics.cache_entries(shared.store.len());
    let Some(q) = question else {
        return;
    };
    if let Some(v) = &q.vector {
        shared.store.share_vector(&key, Quantised::of(v));
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    // Bounded: a slow embeddings destination cannot pile up tasks (each also ends at the timeout).
    let Some(slot) = shared.store.embedding_slot() else {
        return;
    };
    let shared = shared.clone();
    handle.spawn(async move {
        let _slot = slot;
        let rt = shared.runtime.load_full();
        let Some(sem) = &rt.config.cache.semantic else {
            return;
        };
        if let Some(v) = embed(&shared, &rt, sem, &q.text).await {
            shared.store.share_vector(&key, Quantised::of(&v));
        }
    });
}

/// A relayed answer on its way to the caller, collected to be kept when it ends well: the bytes
/// the caller gets, in the caller's dialect, read as they pass. Bounded by `cache.maxBytes`;
/// past it, nothing more is read and nothing is kept.
pub(crate) struct Collecting {
    key: StoreKey,
    dialect: Dialect,
    way: Way,
    question: Option<Box<Question>>,
}

enum Way {
    Stream(Box<dyn Decode>, Collector),
    Body(BytesMut, usize),
    Spoiled,
}

impl Collecting {
    fn stream(dialect: Dialect, max_bytes: usize) -> Collecting {
        let mut decoder = dialect.stream_decoder();
        decoder.set_max_event_bytes(max_bytes);
        Collecting {
            key: StoreKey {
                exact: [0; 32],
                partition: [0; 32],
            },
            dialect,
            way: Way::Stream(decoder, Collector::new(max_bytes)),
            question: None,
        }
    }

    /// For the relay of a committed answer to a request with a key.
    pub(super) fn new(
        key: StoreKey,
        dialect: Dialect,
        stream: bool,
        max_bytes: usize,
    ) -> Collecting {
        let mut c = if stream {
            Collecting::stream(dialect, max_bytes)
        } else {
            Collecting {
                key,
                dialect,
                way: Way::Body(BytesMut::new(), max_bytes),
                question: None,
            }
        };
        c.key = key;
        c
    }

    /// Reads bytes the caller was sent.
    pub(super) fn observe(&mut self, chunk: &[u8]) {
        match &mut self.way {
            Way::Stream(decoder, collector) => {
                for ev in decoder.push(chunk) {
                    collector.push(&ev);
                }
                if !collector.usable() || decoder.failed() {
                    self.way = Way::Spoiled;
                }
            }
            Way::Body(buf, max) => {
                if buf.len() + chunk.len() > *max {
                    self.way = Way::Spoiled;
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            Way::Spoiled => {}
        }
    }

    /// The whole answer, if the bytes made one. `usage`: what the relay read of the upstream's
    /// stream (an OpenAI chat caller that did not ask for the usage chunk never saw it).
    fn finish(self, usage: Option<sidetrack_dialects::Usage>) -> Option<ChatResponse> {
        let mut answer = match self.way {
            Way::Stream(mut decoder, mut collector) => {
                for ev in decoder.finish() {
                    collector.push(&ev);
                }
                collector.finish()?
            }
            Way::Body(buf, _) => self.dialect.parse_response(&buf).ok()?,
            Way::Spoiled => return None,
        };
        if let Some(u) = usage {
            if answer.usage == sidetrack_dialects::Usage::default() {
                answer.usage = u;
            }
        }
        Some(answer)
    }

    /// The relayed answer ended: kept when it ended well (no error mid-stream, the caller stayed,
    /// a success status).
    pub(super) fn keep(
        mut self,
        shared: &Arc<Shared>,
        ended_well: bool,
        usage: Option<sidetrack_dialects::Usage>,
    ) {
        if !ended_well {
            return;
        }
        let (key, question) = (self.key, self.question.take());
        if let Some(answer) = self.finish(usage) {
            put(shared, key, answer, question);
        }
    }
}
