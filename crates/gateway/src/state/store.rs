//! The response store (SPEC §12): complete answers in canonical form, so a stored answer can be
//! served in whatever dialect the caller speaks, streamed or not.
//!
//! Exact keys are held in process memory (an LRU bounded by entries and by bytes, with a time to
//! live) and, with `state.redis`, mirrored to Redis so every replica can serve every replica's
//! answers (fail-open).
//! - [`StoreKey::partition`] hashes what a semantic match must share exactly (scope, model,
//!   system prompt, tools, tool choice, output schema): the vector index
//!   ([`crate::state::vectors`]) keeps its entries per partition and maps a near match to an
//!   exact [`StoreKey`]. With the mirror, every vector is also appended to a capped Redis stream
//!   that every replica tails into its own index ([`Store::share_vector`]).
//! - [`Tier`] is what a synchronous backend offers; the Redis mirror sits behind the memory one.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use sidetrack_config::{Cache, CacheScope};
use sidetrack_dialects::canonical::{ChatRequest, ChatResponse, Part};

use crate::observe::metrics::Metrics;
use crate::state::redis::RedisState;
use crate::state::vectors::{Quantised, VectorIndex};

/// Whose answers a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    Principal(&'a str),
    Shared,
}

impl<'a> Scope<'a> {
    pub fn of(scope: CacheScope, principal: &'a str) -> Scope<'a> {
        match scope {
            CacheScope::Principal => Scope::Principal(principal),
            CacheScope::Shared => Scope::Shared,
        }
    }
}

/// The exact key of a question: scope + requested model + the canonical request minus transport
/// fields. The canonical form has no `stream_options`, `user` or metadata; `stream` is left out
/// here, and so is the canonical `model` (the requested model is keyed instead). The caller's
/// dialect plays no part: the same question through any endpoint is one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreKey {
    pub exact: [u8; 32],
    /// What a semantic match must share exactly (see the module docs).
    pub partition: [u8; 32],
}

/// Writes JSON into a hash.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Between fields: a byte no JSON text contains, so field boundaries cannot shift.
const SEPARATOR: &[u8] = &[0xff];

fn field<T: serde::Serialize>(h: &mut Sha256, v: &T) {
    // Serializing these plain types into a hash cannot fail.
    let _ = serde_json::to_writer(HashWriter(h), v);
    h.update(SEPARATOR);
}

impl StoreKey {
    /// The key of `request` asked for `model` within `scope`. Pure.
    pub fn of(scope: Scope<'_>, model: &str, request: &ChatRequest) -> StoreKey {
        let mut h = Sha256::new();
        match scope {
            Scope::Principal(name) => {
                h.update(b"p\xff");
                h.update(name.as_bytes());
            }
            Scope::Shared => h.update(b"s"),
        }
        h.update(SEPARATOR);
        h.update(model.as_bytes());
        h.update(SEPARATOR);
        field(&mut h, &request.system);
        field(&mut h, &request.tools);
        field(&mut h, &request.tool_choice);
        field(&mut h, &request.json_schema);
        let partition: [u8; 32] = h.finalize().into();
        let mut h = Sha256::new();
        h.update(partition);
        field(&mut h, &request.messages);
        field(&mut h, &request.max_tokens);
        field(&mut h, &request.temperature);
        field(&mut h, &request.top_p);
        field(&mut h, &request.stop);
        StoreKey {
            exact: h.finalize().into(),
            partition,
        }
    }
}

/// What an entry counts against `maxBytes`: its text, ids and arguments plus a fixed overhead per
/// entry and per part (the key, the map and LRU slots, the `Arc`).
pub fn entry_size(resp: &ChatResponse) -> usize {
    const PER_ENTRY: usize = 192;
    const PER_PART: usize = 64;
    let parts: usize = resp
        .content
        .iter()
        .map(|p| {
            PER_PART
                + match p {
                    Part::Text(t) => t.len(),
                    Part::ToolCall {
                        id,
                        name,
                        arguments,
                    } => id.len() + name.len() + arguments.len(),
                    Part::Image { media_type, data } => media_type.len() + data.len(),
                    Part::ToolResult {
                        call_id, content, ..
                    } => call_id.len() + content.len(),
                }
        })
        .sum();
    PER_ENTRY + resp.id.len() + resp.model.len() + parts
}

/// The store's bounds (`cache.maxEntries`, `cache.maxBytes`, `cache.ttlMilliseconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_entries: usize,
    pub max_bytes: usize,
    pub ttl: Duration,
}

impl Bounds {
    pub fn of(cache: &Cache) -> Bounds {
        Bounds {
            max_entries: cache.max_entries,
            max_bytes: cache.max_bytes,
            ttl: cache.ttl,
        }
    }
}

/// A backend of the store: what a synchronous tier offers. The Redis mirror ([`Store`]) is
/// consulted after a memory miss and written after a memory insert, under the state budget
/// (fail-open).
pub trait Tier: Send + Sync {
    fn get(&self, key: &StoreKey, now: Instant) -> Option<Arc<ChatResponse>>;
    /// Stores `value` (replacing an older answer); false when it is larger than the store.
    fn put(&self, key: StoreKey, value: Arc<ChatResponse>, now: Instant) -> bool;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Slot {
    value: Arc<ChatResponse>,
    size: usize,
    expires: Instant,
    /// Position in the LRU order.
    tick: u64,
}

struct Lru {
    map: HashMap<[u8; 32], Slot>,
    /// Least recently used first.
    order: BTreeMap<u64, [u8; 32]>,
    tick: u64,
    bytes: usize,
    bounds: Bounds,
}

impl Lru {
    fn remove(&mut self, key: &[u8; 32]) {
        if let Some(old) = self.map.remove(key) {
            self.order.remove(&old.tick);
            self.bytes -= old.size;
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Drops least recently used entries until both bounds hold.
    fn evict(&mut self) {
        while self.map.len() > self.bounds.max_entries || self.bytes > self.bounds.max_bytes {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(old) = self.map.remove(&key) {
                self.bytes -= old.size;
            }
        }
    }
}

/// The in-process tier: an LRU bounded by entries and bytes, each entry with its expiry.
pub struct MemoryTier {
    lru: Mutex<Lru>,
}

impl MemoryTier {
    pub fn new(bounds: Bounds) -> MemoryTier {
        MemoryTier {
            lru: Mutex::new(Lru {
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
                bytes: 0,
                bounds,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// New bounds (a config reload): evicts at once when they shrank. The TTL applies to answers
    /// stored from now on.
    pub fn set_bounds(&self, bounds: Bounds) {
        let mut lru = self.lock();
        if lru.bounds != bounds {
            lru.bounds = bounds;
            lru.evict();
        }
    }

    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The TTL answers stored now get.
    pub fn ttl(&self) -> Duration {
        self.lock().bounds.ttl
    }

    /// Stores `value` until `expires` (an answer filled from the mirror keeps its remaining life).
    pub fn put_until(
        &self,
        key: StoreKey,
        value: Arc<ChatResponse>,
        now: Instant,
        expires: Instant,
    ) -> bool {
        let size = entry_size(&value);
        let mut lru = self.lock();
        if size > lru.bounds.max_bytes || expires <= now {
            return false;
        }
        lru.remove(&key.exact);
        let tick = lru.next_tick();
        lru.order.insert(tick, key.exact);
        lru.bytes += size;
        lru.map.insert(
            key.exact,
            Slot {
                value,
                size,
                expires,
                tick,
            },
        );
        lru.evict();
        true
    }
}

impl Tier for MemoryTier {
    fn get(&self, key: &StoreKey, now: Instant) -> Option<Arc<ChatResponse>> {
        let mut lru = self.lock();
        let (expired, old_tick) = {
            let slot = lru.map.get(&key.exact)?;
            (slot.expires <= now, slot.tick)
        };
        if expired {
            lru.remove(&key.exact);
            return None;
        }
        let tick = lru.next_tick();
        lru.order.remove(&old_tick);
        lru.order.insert(tick, key.exact);
        let slot = lru.map.get_mut(&key.exact)?;
        slot.tick = tick;
        Some(slot.value.clone())
    }

    fn put(&self, key: StoreKey, value: Arc<ChatResponse>, now: Instant) -> bool {
        let ttl = self.ttl();
        self.put_until(key, value, now, now + ttl)
    }

    fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// How many mirror writes may be in flight at once (per process); past it a write is dropped
/// and counted (the answer is still kept in memory).
pub const MIRROR_WRITES_IN_FLIGHT: usize = 64;

/// The Redis mirror (`state.redis`): every stored answer is also written to
/// `{keyPrefix}cache:<hex exact key>` (serde_json of the canonical answer, `PX` = the TTL), and a
/// memory miss looks there before it counts as a miss. Fail-open: a slow or absent Redis is a
/// miss, never an error.
struct Mirror {
    redis: Arc<RedisState>,
    metrics: Arc<Metrics>,
    in_flight: Arc<AtomicUsize>,
    dropped: AtomicU64,
}

/// Lowercase hex of a key.
fn hex(bytes: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Gives back a mirror write's slot when the write ends (or its task is dropped).
struct WriteSlot(Arc<AtomicUsize>);

impl WriteSlot {
    /// One of `limit` slots counted in `count`, or `None` when all are taken.
    fn take(count: &Arc<AtomicUsize>, limit: usize) -> Option<WriteSlot> {
        if count.fetch_add(1, Ordering::AcqRel) >= limit {
            count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(WriteSlot(count.clone()))
    }
}

impl Mirror {
    /// A slot for one background write, or `None` (the write is dropped and counted) when
    /// [`MIRROR_WRITES_IN_FLIGHT`] are under way already.
    fn write_slot(&self) -> Option<WriteSlot> {
        let slot = WriteSlot::take(&self.in_flight, MIRROR_WRITES_IN_FLIGHT);
        if slot.is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.cache_mirror_dropped();
        }
        slot
    }
}

impl Drop for WriteSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many times a background write is tried while Redis does not answer it within the budget.
const WRITE_ATTEMPTS: u32 = 3;
/// How long a background write waits before it is tried again.
const WRITE_RETRY_GAP: Duration = Duration::from_millis(100);

/// Sends one background write (an answer's `SET`, a vector's `XADD`), trying it again
/// [`WRITE_RETRY_GAP`] later when Redis did not answer within its budget, up to
/// [`WRITE_ATTEMPTS`] in all: one call that overran on a busy machine would otherwise keep that
/// answer or vector from every other replica for good. Both commands may safely land twice (the
/// same key is set again; the same vector is inserted again under its key). The caller holds a
/// write slot throughout, so retries stay within [`MIRROR_WRITES_IN_FLIGHT`].
async fn write_through(redis: &RedisState, metrics: &Metrics, cmd: redis::Cmd) {
    for attempt in 1..=WRITE_ATTEMPTS {
        let sent = redis
            .call(|mut c| {
                let cmd = &cmd;
                async move { cmd.query_async::<redis::Value>(&mut c).await }
            })
            .await;
        metrics.state_backend_up(redis.is_up());
        if sent.is_ok() || attempt == WRITE_ATTEMPTS {
            return;
        }
        tokio::time::sleep(WRITE_RETRY_GAP).await;
    }
}

/// How often a replica reads new entries of the shared vector stream.
pub const VECTOR_TAIL_INTERVAL: Duration = Duration::from_millis(100);
/// How many stream entries one read takes at most (about 100 KB at 1,536 dimensions: well within
/// a read budget, so catching up on a long stream never makes Redis look down).
const VECTOR_TAIL_BATCH: usize = 64;
/// How many questions of stored answers may be embedding at once (per process); past it a
/// question is not embedded (its answer is still stored for exact lookups).
pub const EMBEDDINGS_IN_FLIGHT: usize = 64;

/// The store: the memory tier, and the Redis mirror behind it with `state.redis`; the vector
/// index of semantic lookup beside them.
pub struct Store {
    memory: MemoryTier,
    mirror: Option<Mirror>,
    vectors: Arc<VectorIndex>,
    /// The embeddings destination the index's vectors came from (a change empties the index).
    embeddings: Mutex<Option<(String, String)>>,
    /// Whether the task that tails the shared vector stream runs.
    tailing: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
    /// Store-time embeddings under way ([`EMBEDDINGS_IN_FLIGHT`] at most).
    embedding: Arc<AtomicUsize>,
}

impl Store {
    /// `redis`: the shared state store (`state.redis`), when there is one.
    pub fn new(cache: &Cache, redis: Option<Arc<RedisState>>, metrics: Arc<Metrics>) -> Store {
        let store = Store {
            memory: MemoryTier::new(Bounds::of(cache)),
            mirror: redis.map(|redis| Mirror {
                redis,
                metrics: metrics.clone(),
                in_flight: Arc::new(AtomicUsize::new(0)),
                dropped: AtomicU64::new(0),
            }),
            vectors: Arc::new(VectorIndex::new(cache.max_entries)),
            embeddings: Mutex::new(None),
            tailing: std::sync::atomic::AtomicBool::new(false),
            metrics,
            embedding: Arc::new(AtomicUsize::new(0)),
        };
        store.configure(cache);
        store
    }

    /// Follows a reloaded config's bounds (the vector index's too). A new embeddings destination
    /// empties the index: vectors of another model are not comparable.
    pub fn configure(&self, cache: &Cache) {
        self.memory.set_bounds(Bounds::of(cache));
        self.vectors.set_capacity(cache.max_entries);
        let now = cache
            .semantic
            .as_ref()
            .map(|s| (s.target.clone(), s.model.clone()));
        let mut current = self
            .embeddings
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *current != now {
            if current.is_some() {
                self.vectors.clear();
            }
            *current = now;
        }
        drop(current);
        self.metrics.cache_vectors(self.vectors.len());
        if cache.in_use && cache.semantic.is_some() {
            self.tail_vectors();
        }
    }

    /// A slot for one store-time embedding, or `None` when [`EMBEDDINGS_IN_FLIGHT`] are under
    /// way already. The slot is given back when dropped.
    pub fn embedding_slot(&self) -> Option<impl Drop + Send + 'static> {
        WriteSlot::take(&self.embedding, EMBEDDINGS_IN_FLIGHT)
    }

    /// The vector index of semantic lookup.
    pub fn vectors(&self) -> &VectorIndex {
        &self.vectors
    }

    /// Keeps `exact`'s question vector in this replica's index and, with the mirror, appends it
    /// to the shared stream `{keyPrefix}cache-vectors` (capped near `maxEntries` entries) in the
    /// background, for the other replicas (fail-open, bounded like the answer writes).
    pub fn share_vector(&self, key: &StoreKey, q: Quantised) {
        self.vectors.insert(key.partition, key.exact, &q);
        self.metrics.cache_vectors(self.vectors.len());
        let Some(m) = &self.mirror else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(slot) = m.write_slot() else {
            return;
        };
        let cap = self.memory.lock().bounds.max_entries;
        let (redis, metrics) = (m.redis.clone(), m.metrics.clone());
        let mut cmd = redis::cmd("XADD");
        cmd.arg(redis.vectors_key()).arg(&["MAXLEN", "~"][..]);
        cmd.arg(cap).arg("*");
        cmd.arg("o").arg(redis.origin);
        cmd.arg("p").arg(&key.partition[..]);
        cmd.arg("k").arg(&key.exact[..]);
        cmd.arg("v").arg(q.to_bytes());
        rt.spawn(async move {
            let _slot = slot;
            write_through(&redis, &metrics, cmd).await;
        });
    }

    /// With the mirror (`cache.semantic` set, some mode not `off`): starts, once, the task that
    /// reads the shared vector stream every [`VECTOR_TAIL_INTERVAL`] from its beginning and
    /// inserts the other replicas' vectors into this replica's index. It ends with the store.
    /// Redis down: it retries at the next tick.
    fn tail_vectors(&self) {
        let Some(m) = &self.mirror else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.tailing.swap(true, Ordering::AcqRel) {
            return;
        }
        let index = Arc::downgrade(&self.vectors);
        let (redis, metrics) = (m.redis.clone(), m.metrics.clone());
        rt.spawn(async move {
            let mut last = String::from("0-0");
            let mut tick = tokio::time::interval(VECTOR_TAIL_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if index.strong_count() == 0 {
                    return;
                }
                // Reads until the stream has nothing newer (a replica starting late catches up).
                loop {
                    let (k, from) = (redis.vectors_key(), last.clone());
                    let got = redis
                        .call(|mut c| async move {
                            redis::cmd("XREAD")
                                .arg("COUNT")
                                .arg(VECTOR_TAIL_BATCH)
                                .arg("STREAMS")
                                .arg(k)
                                .arg(from)
                                .query_async::<redis::Value>(&mut c)
                                .await
                        })
                        .await;
                    metrics.state_backend_up(redis.is_up());
                    let Ok(reply) = got else {
                        break;
                    };
                    let Some(index) = index.upgrade() else {
                        return;
                    };
                    let entries = stream_entries(reply);
                    let n = entries.len();
                    for e in entries {
                        last = e.id;
                        if let Some(v) = e.shared.filter(|v| v.origin != redis.origin) {
                            index.insert(v.partition, v.exact, &v.vector);
                        }
                    }
                    if n > 0 {
                        metrics.cache_vectors(index.len());
                    }
                    if n < VECTOR_TAIL_BATCH {
                        break;
                    }
                }
            }
        });
    }

    pub fn get(&self, key: &StoreKey) -> Option<Arc<ChatResponse>> {
        self.memory.get(key, Instant::now())
    }

    /// Is there a mirror to look into?
    pub fn mirrored(&self) -> bool {
        self.mirror.is_some()
    }

    /// No mirror, or Redis answering: a key missing here is really gone (a semantic match on
    /// it is stale and can be dropped from the index).
    pub fn authoritative(&self) -> bool {
        self.mirror.as_ref().is_none_or(|m| m.redis.is_up())
    }

    /// After a memory miss: looks the key up in the mirror (within the state budget) and, on a
    /// hit, keeps the answer in memory for the rest of its Redis lifetime. False on a miss, a
    /// bad entry, or an unavailable Redis (fail-open).
    pub async fn fill_from_mirror(&self, key: &StoreKey) -> bool {
        let Some(m) = &self.mirror else {
            return false;
        };
        if self.memory.get(key, Instant::now()).is_some() {
            return true;
        }
        let k = m.redis.cache_key(&hex(&key.exact));
        let got: Result<(Option<Vec<u8>>, i64), _> = m
            .redis
            .call(|mut c| async move { redis::pipe().get(&k).pttl(&k).query_async(&mut c).await })
            .await;
        m.metrics.state_backend_up(m.redis.is_up());
        let Ok((Some(raw), pttl)) = got else {
            return false;
        };
        let Ok(answer) = serde_json::from_slice::<ChatResponse>(&raw) else {
            return false;
        };
        // -1: no expiry (not written by us); -2: gone meanwhile.
        let Ok(left) = u64::try_from(pttl) else {
            return false;
        };
        let now = Instant::now();
        let left = Duration::from_millis(left).min(self.memory.ttl());
        self.memory
            .put_until(*key, Arc::new(answer), now, now + left)
    }

    /// Keeps `value` in memory and, with a mirror, writes it to Redis in the background.
    pub fn put(&self, key: StoreKey, value: ChatResponse) -> bool {
        let value = Arc::new(value);
        let kept = self.memory.put(key, value.clone(), Instant::now());
        if let Some(m) = &self.mirror {
            self.mirror_write(m, &key, &value);
        }
        kept
    }

    fn mirror_write(&self, m: &Mirror, key: &StoreKey, value: &Arc<ChatResponse>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(slot) = m.write_slot() else {
            return;
        };
        // Encoded in the task: the request path only clones an `Arc`.
        let value = value.clone();
        let exact = key.exact;
        let ttl = u64::try_from(self.memory.ttl().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let (redis, metrics) = (m.redis.clone(), m.metrics.clone());
        rt.spawn(async move {
            let _slot = slot;
            let Ok(encoded) = serde_json::to_vec(&*value) else {
                return;
            };
            let mut cmd = redis::cmd("SET");
            cmd.arg(redis.cache_key(&hex(&exact)))
                .arg(encoded)
                .arg("PX")
                .arg(ttl);
            write_through(&redis, &metrics, cmd).await;
        });
    }

    /// Mirror writes dropped because [`MIRROR_WRITES_IN_FLIGHT`] were already under way.
    pub fn mirror_writes_dropped(&self) -> u64 {
        self.mirror
            .as_ref()
            .map_or(0, |m| m.dropped.load(Ordering::Relaxed))
    }

    pub fn len(&self) -> usize {
        self.memory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One entry of the shared vector stream: its id (the read position) and, unless it is
/// malformed, the vector it carries.
struct StreamEntry {
    id: String,
    shared: Option<SharedVector>,
}

/// A replica's question vector as the stream carries it.
struct SharedVector {
    origin: u64,
    partition: [u8; 32],
    exact: [u8; 32],
    vector: Quantised,
}

/// The entries of an `XREAD` reply on one stream (malformed entries are skipped).
fn stream_entries(reply: redis::Value) -> Vec<StreamEntry> {
    use redis::Value;
    fn items(v: Value) -> Vec<Value> {
        match v {
            Value::Array(a) => a,
            // RESP3 answers XREAD with a map of stream → entries.
            Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => Vec::new(),
        }
    }
    fn bytes(v: &Value) -> Option<&[u8]> {
        match v {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.as_bytes()),
            _ => None,
        }
    }
    let mut out = Vec::new();
    // [[stream, [[id, [field, value, ...]], ...]]] (or the RESP3 map).
    let mut streams = items(reply);
    let entries = match streams.len() {
        0 => return out,
        1 => items(streams.pop().unwrap_or(Value::Nil)).pop(),
        _ => streams.pop(),
    };
    for entry in entries.map(items).unwrap_or_default() {
        let mut e = items(entry).into_iter();
        let (Some(id), Some(fields)) = (e.next(), e.next()) else {
            continue;
        };
        let Some(id) = bytes(&id).and_then(|b| std::str::from_utf8(b).ok().map(str::to_owned))
        else {
            continue;
        };
        let fields = items(fields);
        let (mut origin, mut partition, mut exact, mut vector) = (None, None, None, None);
        for pair in fields.chunks_exact(2) {
            let (Some(name), Some(value)) = (bytes(&pair[0]), bytes(&pair[1])) else {
                continue;
            };
            match name {
                b"o" => origin = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()),
                b"p" => partition = <[u8; 32]>::try_from(value).ok(),
                b"k" => exact = <[u8; 32]>::try_from(value).ok(),
                b"v" => vector = Some(Quantised::from_bytes(value)),
                _ => {}
            }
        }
        // A malformed entry still advances the read position.
        let shared = match (origin, partition, exact, vector) {
            (Some(origin), Some(partition), Some(exact), Some(vector)) => Some(SharedVector {
                origin,
                partition,
                exact,
                vector,
            }),
            _ => None,
        };
        out.push(StreamEntry { id, shared });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sidetrack_dialects::canonical::{Message, Role, StopReason};
    use sidetrack_dialects::{Dialect, Usage};

    fn question(text: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message {
                role: Role::User,
                content: vec![Part::Text(text.into())],
            }],
            max_tokens: Some(50),
            ..ChatRequest::default()
        }
    }

    fn answer(text: &str) -> ChatResponse {
        ChatResponse {
            id: "id".into(),
            model: "m".into(),
            content: vec![Part::Text(text.into())],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        }
    }

    fn key(n: u32) -> StoreKey {
        StoreKey::of(Scope::Shared, "m", &question(&n.to_string()))
    }

    fn bounds(max_entries: usize, max_bytes: usize) -> Bounds {
        Bounds {
            max_entries,
            max_bytes,
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_key_ignores_transport_fields_and_the_dialect() {
        let q = question("hi");
        let mut streamed = q.clone();
        streamed.stream = true;
        streamed.model = "other-name".into();
        let k = |r: &ChatRequest| StoreKey::of(Scope::Principal("alice"), "m", r);
        assert_eq!(k(&q), k(&streamed));
        // The same question through the OpenAI and the Anthropic endpoint.
        let parse = |d: Dialect, body: &'static str| {
            let p = d.parse_request(bytes::Bytes::from_static(body.as_bytes()), None, false);
            d.to_canonical(&p.unwrap()).unwrap()
        };
        let openai = parse(
            Dialect::OpenAiChat,
            r#"{"model":"m","max_tokens":50,"stream":true,"stream_options":{"include_usage":true},
                "user":"u1","metadata":{"a":"b"},"messages":[{"role":"user","content":"hi"}]}"#,
        );
        let anthropic = parse(
            Dialect::AnthropicMessages,
            r#"{"model":"m","max_tokens":50,"metadata":{"user_id":"x"},
                "messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
        );
        assert_eq!(k(&openai), k(&anthropic));
        assert_eq!(k(&openai), k(&q));
    }

    #[test]
    fn the_key_separates_scope_model_and_content() {
        let q = question("hi");
        let alice = StoreKey::of(Scope::Principal("alice"), "m", &q);
        assert_ne!(alice, StoreKey::of(Scope::Principal("bob"), "m", &q));
        assert_ne!(alice, StoreKey::of(Scope::Shared, "m", &q));
        assert_ne!(alice, StoreKey::of(Scope::Principal("alice"), "m2", &q));
        let other = StoreKey::of(Scope::Principal("alice"), "m", &question("ho"));
        assert_ne!(alice.exact, other.exact);
        assert_eq!(
            alice.partition, other.partition,
            "same system, tools, model"
        );
        let mut sys = q.clone();
        sys.system = vec!["be brief".into()];
        let sys = StoreKey::of(Scope::Principal("alice"), "m", &sys);
        assert_ne!(alice.partition, sys.partition);
        let mut hot = q.clone();
        hot.temperature = Some(0.5);
        assert_ne!(
            alice.exact,
            StoreKey::of(Scope::Principal("alice"), "m", &hot).exact
        );
    }

    #[test]
    fn lru_evicts_by_entries_least_recently_used_first() {
        let t = MemoryTier::new(bounds(2, 1 << 20));
        let now = Instant::now();
        assert!(t.put(key(1), Arc::new(answer("a")), now));
        assert!(t.put(key(2), Arc::new(answer("b")), now));
        assert!(t.get(&key(1), now).is_some(), "1 is now the most recent");
        assert!(t.put(key(3), Arc::new(answer("c")), now));
        assert_eq!(t.len(), 2);
        assert!(t.get(&key(2), now).is_none(), "2 was least recently used");
        assert!(t.get(&key(1), now).is_some());
        assert!(t.get(&key(3), now).is_some());
    }

    #[test]
    fn lru_evicts_by_bytes_and_skips_an_answer_larger_than_the_store() {
        let one = entry_size(&answer(&"x".repeat(1000)));
        let t = MemoryTier::new(bounds(100, one * 2 + 10));
        let now = Instant::now();
        for n in 1..=3 {
            assert!(t.put(key(n), Arc::new(answer(&"x".repeat(1000))), now));
        }
        assert_eq!(t.len(), 2);
        assert!(t.bytes() <= one * 2 + 10);
        assert!(t.get(&key(1), now).is_none());
        assert!(!t.put(key(9), Arc::new(answer(&"x".repeat(5000))), now));
        assert!(t.get(&key(9), now).is_none());
        assert_eq!(t.len(), 2, "a refused answer evicts nothing");
        // Shrinking the bounds evicts at once.
        t.set_bounds(bounds(1, one * 2 + 10));
        assert_eq!(t.len(), 1);
        assert!(t.get(&key(3), now).is_some());
    }

    #[test]
    fn a_newer_answer_replaces_an_older_one_and_entries_expire() {
        let t = MemoryTier::new(bounds(10, 1 << 20));
        let now = Instant::now();
        t.put(key(1), Arc::new(answer("old")), now);
        t.put(key(1), Arc::new(answer("new")), now);
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.get(&key(1), now).unwrap().content,
            vec![Part::Text("new".into())]
        );
        assert_eq!(t.bytes(), entry_size(&answer("new")));
        let later = now + Duration::from_secs(60);
        assert!(t.get(&key(1), later).is_none(), "expired at its TTL");
        assert_eq!((t.len(), t.bytes()), (0, 0));
    }

    #[tokio::test]
    async fn mirror_writes_are_bounded_and_the_excess_is_dropped_and_counted() {
        // A Redis that accepts connections and never answers: every write waits out its budget.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let redis = state(
            format!("redis://{}/0", silent.local_addr().unwrap()),
            Duration::from_millis(300),
        );
        let metrics = Arc::new(Metrics::new());
        let store = Store::new(&Cache::default(), Some(Arc::new(redis)), metrics.clone());
        let extra = 10;
        for n in 0..(MIRROR_WRITES_IN_FLIGHT + extra) as u32 {
            assert!(store.put(key(n), answer("a")), "memory keeps every answer");
        }
        assert_eq!(store.mirror_writes_dropped(), extra as u64);
        assert!(
            metrics
                .render()
                .contains(&format!("sidetrack_cache_mirror_dropped_total {extra}\n")),
            "exported as a metric"
        );
        // A vector shared meanwhile is kept locally; its Redis write is dropped and counted too.
        store.share_vector(&key(1), Quantised(vec![1i8; 8].into_boxed_slice()));
        assert_eq!(store.vectors().len(), 1);
        assert_eq!(store.mirror_writes_dropped(), extra as u64 + 1);
        assert_eq!(store.len(), MIRROR_WRITES_IN_FLIGHT + extra);
        // A lookup against the silent Redis is a miss within the budget (not one budget per
        // write queued ahead of it), not an error.
        let started = Instant::now();
        assert!(!store.fill_from_mirror(&key(u32::MAX)).await);
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn store_time_embeddings_are_bounded_and_slots_come_back() {
        let store = Store::new(&Cache::default(), None, Arc::new(Metrics::new()));
        let slots: Vec<_> = (0..EMBEDDINGS_IN_FLIGHT)
            .map(|_| store.embedding_slot().unwrap())
            .collect();
        assert!(store.embedding_slot().is_none(), "the bound holds");
        drop(slots);
        assert!(store.embedding_slot().is_some(), "given back when dropped");
    }

    #[test]
    fn stream_entries_are_read_from_an_xread_reply() {
        use redis::Value;
        let bulk = |b: &[u8]| Value::BulkString(b.to_vec());
        let entry = |id: &str, k: u8| {
            Value::Array(vec![
                bulk(id.as_bytes()),
                Value::Array(vec![
                    bulk(b"o"),
                    bulk(b"42"),
                    bulk(b"p"),
                    bulk(&[1; 32]),
                    bulk(b"k"),
                    bulk(&[k; 32]),
                    bulk(b"v"),
                    bulk(&[1, 255, 127]),
                ]),
            ])
        };
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"t:cache-vectors"),
            Value::Array(vec![
                entry("1-0", 2),
                // A malformed entry still moves the read position on, with nothing to insert.
                Value::Array(vec![
                    bulk(b"2-0"),
                    Value::Array(vec![bulk(b"k"), bulk(b"short")]),
                ]),
                entry("3-0", 3),
            ]),
        ])]);
        let got = stream_entries(reply);
        assert_eq!(got.len(), 3);
        let first = got[0].shared.as_ref().unwrap();
        assert_eq!((got[0].id.as_str(), first.origin), ("1-0", 42));
        assert_eq!(first.exact, [2; 32]);
        assert_eq!(first.partition, [1; 32]);
        assert_eq!(&*first.vector.0, &[1i8, -1, 127]);
        assert_eq!((got[1].id.as_str(), got[1].shared.is_none()), ("2-0", true));
        assert_eq!(got[2].shared.as_ref().unwrap().exact, [3; 32]);
        assert!(stream_entries(Value::Nil).is_empty());
    }

    #[test]
    fn an_answer_filled_from_the_mirror_keeps_its_remaining_life() {
        let t = MemoryTier::new(bounds(10, 1 << 20));
        let now = Instant::now();
        assert!(t.put_until(
            key(1),
            Arc::new(answer("a")),
            now,
            now + Duration::from_secs(5)
        ));
        assert!(t.get(&key(1), now + Duration::from_secs(4)).is_some());
        assert!(t.get(&key(1), now + Duration::from_secs(5)).is_none());
        assert!(
            !t.put_until(key(2), Arc::new(answer("a")), now, now),
            "already expired"
        );
    }

    /// A Redis stand-in on a loopback port: its first `refused` connections are closed as soon as
    /// they are accepted; later ones get `+OK` for every command, and the commands' names are sent
    /// to the returned channel. Also returns the count of connections accepted.
    async fn flaky_redis(
        refused: usize,
    ) -> (
        String,
        tokio::sync::mpsc::UnboundedReceiver<String>,
        Arc<AtomicUsize>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}/0", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                if count.fetch_add(1, Ordering::SeqCst) < refused {
                    continue; // dropped: closed
                }
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n @ 1..) = sock.read(&mut chunk).await {
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some((name, used)) = resp_command(&buf) {
                            buf.drain(..used);
                            let _ = tx.send(name);
                            let _ = sock.write_all(b"+OK\r\n").await;
                        }
                    }
                });
            }
        });
        (url, rx, accepted)
    }

    /// The name of the first whole RESP command in `buf`, and its length; `None` until one is whole.
    fn resp_command(buf: &[u8]) -> Option<(String, usize)> {
        fn line(buf: &[u8], at: usize) -> Option<(usize, usize)> {
            let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
            let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
            Some((n, end + 2))
        }
        let (args, mut at) = line(buf, 0)?;
        let mut name = String::new();
        for i in 0..args {
            let (len, start) = line(buf, at)?;
            let arg = buf.get(start..start + len)?;
            if i == 0 {
                name = String::from_utf8_lossy(arg).into_owned();
            }
            at = start + len + 2;
        }
        (buf.len() >= at).then_some((name, at))
    }

    /// A shared state store at `url`, each call within `budget`.
    fn state(url: String, budget: Duration) -> RedisState {
        RedisState::new(&sidetrack_config::Redis {
            url,
            key_prefix: "t:".into(),
            budget,
            sync_interval: Duration::from_secs(1),
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_background_write_that_redis_did_not_take_is_tried_again() {
        let (url, mut commands, accepted) = flaky_redis(1).await;
        let (redis, metrics) = (state(url, Duration::from_millis(500)), Metrics::new());
        let mut cmd = redis::cmd("XADD");
        cmd.arg("t:cache-vectors").arg("*").arg("v").arg(&b"x"[..]);
        write_through(&redis, &metrics, cmd).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "the first connection was closed"
        );
        let mut names = Vec::new();
        while let Ok(n) = commands.try_recv() {
            names.push(n);
        }
        assert_eq!(
            names.iter().filter(|n| n.as_str() == "XADD").count(),
            1,
            "{names:?}"
        );
        assert!(redis.is_up());
    }

    #[tokio::test]
    async fn a_background_write_gives_up_after_its_attempts() {
        let (url, mut commands, accepted) = flaky_redis(usize::MAX).await;
        let (redis, metrics) = (state(url, Duration::from_millis(500)), Metrics::new());
        write_through(&redis, &metrics, redis::cmd("SET")).await;
        assert_eq!(accepted.load(Ordering::SeqCst), WRITE_ATTEMPTS as usize);
        assert!(commands.try_recv().is_err());
        assert!(!redis.is_up());
    }
}
