//! Shared breaker state through Redis (SPEC §10): every replica skips a destination that any
//! replica has seen failing.
//!
//! Each destination's shareable breaker state ([`SharedBreaker`]) is one Redis string (JSON with a
//! version). A verdict is applied to the *shared* state with a compare-and-set script (named with a
//! version, `sidetrack_breaker_cas_v1`, so a rolling upgrade never runs changed semantics under an
//! old name), then adopted locally. A background task pulls every known destination's shared state
//! each `syncMilliseconds`.
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
/// ARGV[1] (0 = absent) and returns 1; otherwise returns the stored value.
const CAS_SCRIPT: &str = r#"
-- sidetrack_breaker_cas_v1
local cur = redis.call('GET', KEYS[1])
local ver = 0
if cur then ver = cjson.decode(cur)['v'] end
if ver == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return cur
"#;

/// How long a shared breaker state lives without writes (a destination nobody uses ages out).
const STATE_TTL: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
struct Stored {
    v: u64,
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

    fn shared(&self) -> SharedBreaker {
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
    /// Set when a call fails: the next successful sync merges local state back in.
    resync: AtomicBool,
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
            cas: redis::Script::new(CAS_SCRIPT),
        })
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn limit_key(&self, principal: &str) -> String {
        format!("{}ratelimit:{}", self.prefix, principal)
    }

    pub fn breaker_key(&self, target: &str, model: &str) -> String {
        format!("{}breaker:{}\u{1f}{}", self.prefix, target, model)
    }

    /// Marks the outcome of a call; returns true when the state flipped (log it once).
    fn mark(&self, ok: bool) -> bool {
        self.up.swap(ok, Ordering::Relaxed) != ok
    }

    async fn connection(&self) -> Result<MultiplexedConnection, Unavailable> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let c = tokio::time::timeout(self.budget, self.client.get_multiplexed_async_connection())
            .await
            .map_err(|_| Unavailable)?
            .map_err(|_| Unavailable)?;
        *slot = Some(c.clone());
        Ok(c)
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
            *self.conn.lock().await = None;
        }
        self.note(result.is_ok());
        result
    }

    /// True once after an outage: the caller should merge its local state into the store.
    pub fn take_resync(&self) -> bool {
        self.is_up() && self.resync.swap(false, Ordering::Relaxed)
    }

    fn note(&self, ok: bool) {
        if !ok {
            self.resync.store(true, Ordering::Relaxed);
        }
        if self.mark(ok) {
            if ok {
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

    /// Applies `update` to the shared state of `key` atomically (compare-and-set, retried on
    /// conflict) and returns the version and state that were stored.
    pub async fn update(
        &self,
        key: &str,
        update: impl Fn(Option<SharedBreaker>) -> SharedBreaker,
    ) -> Result<(u64, SharedBreaker), Unavailable> {
        let mut current = self.load(&[key.to_owned()]).await?.pop().flatten();
        for _ in 0..8 {
            let (version, shared) = match current {
                Some((v, s)) => (v, Some(s)),
                None => (0, None),
            };
            let next = update(shared);
            let stored = serde_json::to_string(&Stored::from_shared(version + 1, &next))
                .map_err(|_| Unavailable)?;
            let ttl = STATE_TTL.as_millis() as u64;
            let (script, key_owned) = (&self.cas, key.to_owned());
            let answer: redis::Value = self
                .call(|mut c| async move {
                    script
                        .key(key_owned)
                        .arg(version)
                        .arg(stored)
                        .arg(ttl)
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
