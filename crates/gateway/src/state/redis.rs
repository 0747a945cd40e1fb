//! Shared breaker state through Redis (SPEC §10): every replica skips a destination that any
//! replica has seen failing.
//!
//! Each destination's shareable breaker state ([`SharedBreaker`]) is one Redis string (JSON with a
//! version). A verdict is applied to the *shared* state with a compare-and-set script (named with a
//! version, `sidetrack_breaker_cas_v2`, so a rolling upgrade never runs changed semantics under an
//! old name), then adopted locally.
//!
//! Push (SPEC §10, "within 50 ms"): when a write changes the state kind or the open-until time (a
//! transition), the same script publishes the new state on the channel `{keyPrefix}breaker` — in
//! the same atomic step as the write, so messages for one destination go out in version order.
//! Every replica holds one subscriber connection ([`Subscriber`]) and adopts a pushed state at
//! once unless it already holds that version or a newer one (see `adopt` in `health`). A background
//! task also pulls every known destination's shared state each `syncMilliseconds` — the safety net
//! for a missed message — and pulls at once after the subscriber (re)connects.
//!
//! Fail-open: every Redis call has a budget (`budgetMilliseconds`, default 50 ms). A slow or dead
//! Redis never fails a caller request: the replica keeps deciding on its local state, logs once,
//! exposes `sidetrack_state_backend_up 0`, and resynchronises when Redis answers again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use sidetrack_resilience::{SharedBreaker, SharedKind};
use tokio::sync::Mutex;

/// Compare-and-set on a versioned JSON value: writes ARGV[2] when the stored version equals
/// ARGV[1] (0 = absent) and returns 1; otherwise returns the stored value. A write that changes
/// the state kind (`s`) or the open-until time publishes ARGV[5] on channel ARGV[4].
const CAS_SCRIPT: &str = r#"
-- sidetrack_breaker_cas_v2
local cur = redis.call('GET', KEYS[1])
local ver = 0
local old = nil
if cur then
  old = cjson.decode(cur)
  ver = old['v']
end
if ver == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  local new = cjson.decode(ARGV[2])
  if (not old) or old['s'] ~= new['s'] or old['until'] ~= new['until'] then
    redis.call('PUBLISH', ARGV[4], ARGV[5])
  end
  return 1
end
return cur
"#;

/// How long connecting and subscribing may take before the subscriber backs off and retries.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Reconnect backoff of the subscriber: first wait and cap.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How soon a failed pull is retried (instead of at the next `syncMilliseconds` tick).
pub const PULL_RETRY: Duration = Duration::from_millis(200);
/// How often an idle subscriber connection is pinged (a silent network loss is found this way).
pub const SUBSCRIBER_PING: Duration = Duration::from_secs(1);

/// How long a shared breaker state lives without writes (a destination nobody uses ages out).
const STATE_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Stored {
    pub v: u64,
    /// `closed` | `open` | `half_open`
    s: char,
    until: u64,
    succ: u32,
    fail: u32,
    reopens: u32,
}

impl Stored {
    fn from_shared(v: u64, b: &SharedBreaker) -> Stored {
        let (s, until, succ) = match b.state {
            SharedKind::Closed => ('c', 0, 0),
            SharedKind::Open { until_unix_ms } => ('o', until_unix_ms, 0),
            SharedKind::HalfOpen { successes } => ('h', 0, successes),
        };
        Stored {
            v,
            s,
            until,
            succ,
            fail: b.consecutive_failures,
            reopens: b.reopens,
        }
    }

    pub fn shared(&self) -> SharedBreaker {
        let state = match self.s {
            'o' => SharedKind::Open {
                until_unix_ms: self.until,
            },
            'h' => SharedKind::HalfOpen {
                successes: self.succ,
            },
            _ => SharedKind::Closed,
        };
        SharedBreaker {
            state,
            consecutive_failures: self.fail,
            reopens: self.reopens,
        }
    }
}

/// One pushed transition (the payload on `{keyPrefix}breaker`):
/// `{"o": <origin replica id>, "t": <target>, "m": <model>, "b": <stored state, with its version>}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Pushed<'a> {
    pub o: u64,
    #[serde(borrow)]
    pub t: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub m: std::borrow::Cow<'a, str>,
    pub b: Stored,
}

/// After an outage, two replicas' views of one destination are merged by severity: open beats
/// half-open beats closed (a later open-until beats an earlier one), and the larger failure counts
/// win — so a destination any replica saw failing stays skipped by all of them.
pub fn merge(a: SharedBreaker, b: SharedBreaker) -> SharedBreaker {
    fn rank(s: &SharedKind) -> (u8, u64) {
        match *s {
            SharedKind::Closed => (0, 0),
            SharedKind::HalfOpen { successes } => (1, u64::from(successes)),
            SharedKind::Open { until_unix_ms } => (2, until_unix_ms),
        }
    }
    let state = if rank(&a.state) >= rank(&b.state) {
        a.state
    } else {
        b.state
    };
    SharedBreaker {
        state,
        consecutive_failures: a.consecutive_failures.max(b.consecutive_failures),
        reopens: a.reopens.max(b.reopens),
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A Redis connection with a time budget and an up/down flag.
pub struct RedisState {
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    prefix: String,
    budget: Duration,
    pub sync_interval: Duration,
    up: AtomicBool,
    /// This replica's id on the push channel (its own messages are ignored).
    pub origin: u64,
    /// Set when a call fails: the next successful sync merges local state back in.
    resync: AtomicBool,
    /// Woken when Redis answers again after a failed call: the sync loop pulls (and merges) at
    /// once instead of at its next tick.
    pub recovered: tokio::sync::Notify,
    cas: redis::Script,
}

/// Why a Redis call did not happen (already logged once per outage).
#[derive(Debug)]
pub struct Unavailable;

impl RedisState {
    pub fn new(cfg: &sidetrack_config::Redis) -> Result<RedisState, String> {
        let client =
            redis::Client::open(cfg.url.as_str()).map_err(|e| format!("state.redis.url: {e}"))?;
        Ok(RedisState {
            client,
            conn: Mutex::new(None),
            prefix: cfg.key_prefix.clone(),
            budget: cfg.budget,
            sync_interval: cfg.sync_interval,
            // Unknown until the first call; reported as up so startup does not flap the gauge.
            up: AtomicBool::new(true),
            resync: AtomicBool::new(false),
            recovered: tokio::sync::Notify::new(),
            origin: rand::random(),
            cas: redis::Script::new(CAS_SCRIPT),
        })
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn limit_key(&self, principal: &str) -> String {
        format!("{}ratelimit:{}", self.prefix, principal)
    }

    /// An `Idempotency-Key`'s entry (`id`: a hash of principal and key).
    pub fn idempotency_key(&self, id: &str) -> String {
        format!("{}idem:{}", self.prefix, id)
    }

    /// A response store entry (`hex`: its exact key in hex).
    pub fn cache_key(&self, hex: &str) -> String {
        format!("{}cache:{}", self.prefix, hex)
    }

    /// The stream semantic vectors are shared through (SPEC §12).
    pub fn vectors_key(&self) -> String {
        format!("{}cache-vectors", self.prefix)
    }

    pub fn breaker_key(&self, target: &str, model: &str) -> String {
        format!("{}breaker:{}\u{1f}{}", self.prefix, target, model)
    }

    /// The channel breaker transitions are pushed on.
    pub fn channel(&self) -> String {
        format!("{}breaker", self.prefix)
    }

    /// Asks the next successful pull to merge local state back in (messages may have been missed).
    pub fn request_resync(&self) {
        self.resync.store(true, Ordering::Relaxed);
    }

    /// Marks the outcome of a call; returns true when the state flipped (log it once).
    fn mark(&self, ok: bool) -> bool {
        self.up.swap(ok, Ordering::Relaxed) != ok
    }

    /// The shared connection, made if there is none. The wait for another call's connect counts
    /// against the budget too: while Redis hangs, calls queued behind one connect give up after
    /// the budget instead of one budget per call ahead of them.
    async fn connection(&self) -> Result<MultiplexedConnection, Unavailable> {
        tokio::time::timeout(self.budget, async {
            let mut slot = self.conn.lock().await;
            if let Some(c) = slot.as_ref() {
                return Ok(c.clone());
            }
            let c = self
                .client
                .get_multiplexed_async_connection()
                .await
                .map_err(|_| Unavailable)?;
            *slot = Some(c.clone());
            Ok(c)
        })
        .await
        .map_err(|_| Unavailable)?
    }

    /// Runs one call within the budget; on failure drops the connection and reports Unavailable.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, Unavailable>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let result = match self.connection().await {
            Ok(conn) => match tokio::time::timeout(self.budget, f(conn)).await {
                Ok(Ok(v)) => Ok(v),
                _ => Err(Unavailable),
            },
            Err(e) => Err(e),
        };
        if result.is_err() {
            // Busy: another call is connecting anew, and that one replaces the connection.
            if let Ok(mut slot) = self.conn.try_lock() {
                *slot = None;
            }
        }
        self.note(result.is_ok());
        result
    }

    /// Is a merge of local state into the store due (a call failed since the last one)? While it
    /// is, a stored state may lack a verdict this replica lost and is not adopted over local state.
    pub fn resync_pending(&self) -> bool {
        self.resync.load(Ordering::Relaxed)
    }

    /// True once after an outage: the caller should merge its local state into the store.
    pub fn take_resync(&self) -> bool {
        self.is_up() && self.resync.swap(false, Ordering::Relaxed)
    }

    pub fn note(&self, ok: bool) {
        if !ok {
            self.resync.store(true, Ordering::Relaxed);
        }
        if self.mark(ok) {
            if ok {
                self.recovered.notify_one();
                tracing::warn!("state backend (Redis) is reachable again; resynchronising shared breaker state");
            } else {
                tracing::error!(
                    "state backend (Redis) unreachable or slower than {:?}; serving on local state until it is back",
                    self.budget
                );
            }
        }
    }

    /// The shared states of `keys` (absent keys → `None`).
    pub async fn load(
        &self,
        keys: &[String],
    ) -> Result<Vec<Option<(u64, SharedBreaker)>>, Unavailable> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.to_vec();
        let raw: Vec<Option<String>> = self
            .call(|mut c| async move { redis::cmd("MGET").arg(&keys).query_async(&mut c).await })
            .await?;
        Ok(raw
            .into_iter()
            .map(|r| {
                r.and_then(|s| serde_json::from_str::<Stored>(&s).ok())
                    .map(|st| (st.v, st.shared()))
            })
            .collect())
    }

    /// Applies `update` to the shared state of destination `target`/`model` atomically
    /// (compare-and-set, retried on conflict) and returns the version and state that were stored.
    /// A transition is pushed to the other replicas in the same step.
    pub async fn update(
        &self,
        target: &str,
        model: &str,
        update: impl Fn(Option<SharedBreaker>) -> SharedBreaker,
    ) -> Result<(u64, SharedBreaker), Unavailable> {
        let key = self.breaker_key(target, model);
        let channel = self.channel();
        let mut current = self.load(std::slice::from_ref(&key)).await?.pop().flatten();
        for _ in 0..8 {
            let (version, shared) = match current {
                Some((v, s)) => (v, Some(s)),
                None => (0, None),
            };
            let next = update(shared);
            let record = Stored::from_shared(version + 1, &next);
            let stored = serde_json::to_string(&record).map_err(|_| Unavailable)?;
            let pushed = serde_json::to_string(&Pushed {
                o: self.origin,
                t: target.into(),
                m: model.into(),
                b: record,
            })
            .map_err(|_| Unavailable)?;
            let ttl = STATE_TTL.as_millis() as u64;
            let (script, key_owned, channel) = (&self.cas, key.clone(), channel.clone());
            let answer: redis::Value = self
                .call(|mut c| async move {
                    script
                        .key(key_owned)
                        .arg(version)
                        .arg(stored)
                        .arg(ttl)
                        .arg(channel)
                        .arg(pushed)
                        .invoke_async(&mut c)
                        .await
                })
                .await?;
            match answer {
                redis::Value::Int(1) => return Ok((version + 1, next)),
                redis::Value::BulkString(bytes) => {
                    current = serde_json::from_slice::<Stored>(&bytes)
                        .ok()
                        .map(|st| (st.v, st.shared()));
                }
                _ => current = None,
            }
        }
        Err(Unavailable)
    }
}

/// The push side of shared state: one subscriber connection to `{keyPrefix}breaker`, reconnected
/// with backoff (100 ms doubling to 5 s) when it drops, and pinged when idle.
pub struct Subscriber {
    sink: Option<redis::aio::PubSubSink>,
    stream: Option<redis::aio::PubSubStream>,
    connecting: Option<tokio::task::JoinHandle<Option<SplitPubSub>>>,
    backoff: Duration,
    retry_at: tokio::time::Instant,
}

type SplitPubSub = (redis::aio::PubSubSink, redis::aio::PubSubStream);

/// What the subscriber has for its owner.
pub enum Event {
    /// A message arrived (its payload).
    Message(Vec<u8>),
    /// The subscription is (re)established: messages may have been missed, pull everything now.
    Connected,
    /// The subscription dropped or a (re)connect failed; the next try is scheduled.
    Lost,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
    }
}

impl Default for Subscriber {
    fn default() -> Self {
        Subscriber {
            sink: None,
            stream: None,
            connecting: None,
            backoff: RECONNECT_FIRST,
            retry_at: tokio::time::Instant::now(),
        }
    }
}

impl Subscriber {
    /// Waits for the next event: a message, or the outcome of a scheduled (re)connect.
    pub async fn next(&mut self, store: &RedisState) -> Event {
        use futures_util::StreamExt;
        match self.stream.as_mut() {
            Some(stream) => match stream.next().await {
                Some(msg) => Event::Message(msg.get_payload_bytes().to_vec()),
                None => self.lost(),
            },
            None => {
                // The attempt runs in its own task, so that this wait is cancel-safe: another
                // branch of the caller's select winning does not restart a slow connect.
                if self.connecting.is_none() {
                    tokio::time::sleep_until(self.retry_at).await;
                    let (client, channel) = (store.client.clone(), store.channel());
                    self.connecting = Some(tokio::spawn(async move {
                        let connect = async {
                            let mut pubsub = client.get_async_pubsub().await?;
                            pubsub.subscribe(channel).await?;
                            Ok::<_, redis::RedisError>(pubsub.split())
                        };
                        tokio::time::timeout(SUBSCRIBE_TIMEOUT, connect)
                            .await
                            .ok()
                            .and_then(Result::ok)
                    }));
                }
                let Some(task) = self.connecting.as_mut() else {
                    return self.lost();
                };
                let done = task.await;
                self.connecting = None;
                match done {
                    Ok(Some((sink, stream))) => {
                        self.sink = Some(sink);
                        self.stream = Some(stream);
                        self.backoff = RECONNECT_FIRST;
                        Event::Connected
                    }
                    _ => self.lost(),
                }
            }
        }
    }

    /// Pings the server when subscribed; a ping that fails within the budget drops the connection.
    pub async fn ping(&mut self, store: &RedisState) -> Option<Event> {
        let sink = self.sink.as_mut()?;
        match tokio::time::timeout(
            store.budget.max(SUBSCRIBE_TIMEOUT),
            sink.ping::<redis::Value>(),
        )
        .await
        {
            Ok(Ok(_)) => None,
            _ => Some(self.lost()),
        }
    }

    pub fn is_subscribed(&self) -> bool {
        self.sink.is_some()
    }

    fn lost(&mut self) -> Event {
        self.sink = None;
        self.stream = None;
        self.retry_at = tokio::time::Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(RECONNECT_MAX);
        Event::Lost
    }
}
