//! The response store at the request's phases (SPEC §12): whether a request uses it and under
//! which key (before the walk), answering from it (`always` before the walk, `lastResort` after a
//! walk that ended without success), and keeping a successful answer (at the commit for a whole
//! body, at the finish phase for a relayed one). With `cache.mode: off` everywhere none of this
//! runs: [`prepare`] returns after one test.

use axum::body::Body;
use axum::response::Response;
use bytes::BytesMut;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::HeaderMap;
use sidetrack_config::{CacheMode, Config};
use sidetrack_dialects::canonical::ChatResponse;
use sidetrack_dialects::collect::{stream_events, Collector};
use sidetrack_dialects::translate::Decode;
use sidetrack_dialects::{Dialect, ParsedRequest};

use crate::observe::metrics::CacheResult;
use crate::server::Shared;
use crate::state::store::{Scope, StoreKey};

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
    pub(super) fn collecting(&self, dialect: Dialect, stream: bool) -> Option<Box<Collecting>> {
        let key = self.key?;
        Some(Box::new(Collecting::new(
            key,
            dialect,
            stream,
            self.max_bytes,
        )))
    }
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
    let key = if opted_out(headers) {
        None
    } else {
        // A request the canonical form cannot carry (a guardrail) is never keyed.
        parsed
            .dialect
            .to_canonical(parsed)
            .ok()
            .map(|req| StoreKey::of(Scope::of(cfg.cache.scope, principal), &parsed.model, &req))
    };
    Some(Box::new(CacheUse {
        mode,
        key,
        stream_usage: parsed.stream_usage == Some(true),
        max_bytes: cfg.cache.max_bytes,
    }))
}

/// Looks the request up, counting the lookup (`bypass` when it has no key).
pub(super) fn lookup(shared: &Shared, cache: &CacheUse) -> Option<std::sync::Arc<ChatResponse>> {
    let m = &shared.metrics;
    let Some(key) = cache.key else {
        m.cache_lookup(cache.mode_label(), CacheResult::Bypass);
        return None;
    };
    let hit = shared.store.get(&key);
    let result = if hit.is_some() {
        CacheResult::Hit
    } else {
        // A miss may have dropped an expired entry.
        m.cache_entries(shared.store.len());
        CacheResult::Miss
    };
    m.cache_lookup(cache.mode_label(), result);
    hit
}

/// Did the walk end without success (not a caller's 400)? Then the store may answer (SPEC §12).
pub(super) fn walk_failed(out: &crate::engine::WalkOutput) -> bool {
    out.deadline_exceeded || out.returned.as_ref().is_none_or(|r| r.fired)
}

/// With the Redis mirror (`state.redis`): the key whose stored answer should be brought into
/// memory before a lookup that will use it — `always` before the walk (`after_walk` `None`), any
/// mode after a failed walk. Without a mirror, or for a request that will not look, `None`.
pub(super) fn mirror_wanted(
    shared: &Shared,
    cache: Option<&CacheUse>,
    after_walk: Option<&crate::engine::WalkOutput>,
) -> Option<StoreKey> {
    let c = cache?;
    let key = c.key?;
    let wanted = match after_walk {
        None => c.mode == CacheMode::Always,
        Some(out) => walk_failed(out),
    };
    (wanted && shared.store.mirrored()).then_some(key)
}

/// Brings `key`'s answer from the mirror into memory, if Redis has it (fail-open).
pub(super) async fn fill_from_mirror(shared: &Shared, key: StoreKey) {
    // Boxed: the Redis call makes this future large, and only requests that look pay for it.
    if Box::pin(shared.store.fill_from_mirror(&key)).await {
        shared.metrics.cache_entries(shared.store.len());
    }
}

/// A stored answer as the caller's 200: a whole body, or — when the caller asked for a stream —
/// the answer replayed through the dialect's stream encoder (SSE or the Bedrock event stream).
pub(super) fn hit_response(
    answer: &ChatResponse,
    dialect: Dialect,
    streamed: bool,
    stream_usage: bool,
) -> Response {
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
    h.insert(CACHE.clone(), HeaderValue::from_static("hit"));
    h.insert(SERVED_BY.clone(), HeaderValue::from_static("cache"));
    r
}

/// Keeps a whole successful body (the commit of an answer that was read whole): parsed from the
/// caller's dialect (a stream's bytes through its decoder).
pub(super) fn store_body(
    shared: &Shared,
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
        put(shared, key, a);
    }
}

fn put(shared: &Shared, key: StoreKey, answer: ChatResponse) {
    if shared.store.put(key, answer) {
        shared.metrics.cache_entries(shared.store.len());
    }
}

/// A relayed answer on its way to the caller, collected to be kept when it ends well: the bytes
/// the caller gets, in the caller's dialect, read as they pass. Bounded by `cache.maxBytes`;
/// past it, nothing more is read and nothing is kept.
pub(crate) struct Collecting {
    key: StoreKey,
    dialect: Dialect,
    way: Way,
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
        self,
        shared: &Shared,
        ended_well: bool,
        usage: Option<sidetrack_dialects::Usage>,
    ) {
        if !ended_well {
            return;
        }
        let key = self.key;
        if let Some(answer) = self.finish(usage) {
            put(shared, key, answer);
        }
    }
}
