//! Phase "admit": the gateway's own rate limits per principal (`auth.keys[].limits`), requests and
//! tokens per minute over a sliding 60 s window, shared through Redis when `state.redis` is set
//! (so a limit holds across replicas) and kept locally otherwise or while Redis is unreachable.
//!
//! Tokens are reserved before the call (an estimate: prompt bytes / 4 plus the requested maximum
//! output, or 256) and settled with the real usage when the request finishes. A rejection is a 429
//! with `Retry-After` in the caller's dialect and never triggers a fallback.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sidetrack_config::Limits;

use crate::state::redis::{unix_ms, RedisState};

const WINDOW: Duration = Duration::from_secs(60);

/// Admits or refuses a request under a sliding window (all in one script, so replicas never
/// over-admit). ARGV: now_ms, window_ms, max requests (0 = none), max tokens (0 = none),
/// tokens to reserve, entry id.
const ADMIT_SCRIPT: &str = r#"
-- sidetrack_ratelimit_admit_v1
local key = KEYS[1]
local now, win = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - win)
local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
local count, tokens, oldest = #entries / 2, 0, nil
for i = 1, #entries, 2 do
  tokens = tokens + (tonumber(string.match(entries[i], ':(%d+)$')) or 0)
  if not oldest then oldest = tonumber(entries[i + 1]) end
end
local max_req, max_tok, reserve = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if (max_req > 0 and count + 1 > max_req) or (max_tok > 0 and count > 0 and tokens + reserve > max_tok) then
  return {0, win - (now - (oldest or now))}
end
redis.call('ZADD', key, now, ARGV[6] .. ':' .. reserve)
redis.call('PEXPIRE', key, win)
return {1, 0}
"#;

/// Replaces a reservation with the tokens really used. ARGV: entry id, reserved, used.
const SETTLE_SCRIPT: &str = r#"
-- sidetrack_ratelimit_settle_v1
local old = ARGV[1] .. ':' .. ARGV[2]
local score = redis.call('ZSCORE', KEYS[1], old)
if score then
  redis.call('ZREM', KEYS[1], old)
  redis.call('ZADD', KEYS[1], score, ARGV[1] .. ':' .. ARGV[3])
end
return 1
"#;

/// A refusal: how long until the window has room again.
#[derive(Debug, Clone, Copy)]
pub struct Limited {
    pub retry_after: Duration,
}

/// An admitted request's reservation, to settle with the real usage.
#[derive(Debug, Clone)]
pub struct Reservation {
    principal: String,
    id: String,
    reserved: u64,
    tracks_tokens: bool,
}

#[derive(Default)]
struct Local {
    /// Per principal: (when, tokens) of each admitted request in the window.
    windows: HashMap<String, VecDeque<(Instant, u64)>>,
}

pub struct RateLimiter {
    store: Option<Arc<RedisState>>,
    local: Mutex<Local>,
    admit: redis::Script,
    settle: redis::Script,
}

impl RateLimiter {
    pub fn new(store: Option<Arc<RedisState>>) -> RateLimiter {
        RateLimiter {
            store,
            local: Mutex::default(),
            admit: redis::Script::new(ADMIT_SCRIPT),
            settle: redis::Script::new(SETTLE_SCRIPT),
        }
    }

    /// Admits a request of `principal` under `limits`, reserving `estimate` tokens.
    pub async fn admit(
        &self,
        principal: &str,
        limits: &Limits,
        id: &str,
        estimate: u64,
    ) -> Result<Reservation, Limited> {
        let max_req = limits.requests_per_minute.unwrap_or(0);
        let max_tok = limits.tokens_per_minute.unwrap_or(0);
        let reservation = Reservation {
            principal: principal.to_owned(),
            id: id.to_owned(),
            reserved: estimate,
            tracks_tokens: max_tok > 0,
        };
        if let Some(store) = self.store.as_ref().filter(|s| s.is_up()) {
            let key = store.limit_key(principal);
            let args = (
                unix_ms(),
                WINDOW.as_millis() as u64,
                max_req,
                max_tok,
                estimate,
                id.to_owned(),
            );
            let script = &self.admit;
            let answer: Result<(i64, i64), _> = store
                .call(|mut c| async move {
                    script
                        .key(key)
                        .arg(args.0)
                        .arg(args.1)
                        .arg(args.2)
                        .arg(args.3)
                        .arg(args.4)
                        .arg(args.5)
                        .invoke_async(&mut c)
                        .await
                })
                .await;
            match answer {
                Ok((1, _)) => return Ok(reservation),
                Ok((_, retry_ms)) => {
                    return Err(Limited {
                        retry_after: Duration::from_millis(retry_ms.max(1) as u64),
                    })
                }
                Err(_) => {} // fail-open: count locally while the store is away
            }
        }
        self.admit_local(principal, max_req, max_tok, estimate)
            .map(|()| reservation)
    }

    fn admit_local(
        &self,
        principal: &str,
        max_req: u64,
        max_tok: u64,
        estimate: u64,
    ) -> Result<(), Limited> {
        let now = Instant::now();
        let mut local = self.local.lock().map_err(|_| Limited {
            retry_after: Duration::from_secs(1),
        })?;
        let window = local.windows.entry(principal.to_owned()).or_default();
        while window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= WINDOW)
        {
            window.pop_front();
        }
        let tokens: u64 = window.iter().map(|(_, t)| t).sum();
        let over_requests = max_req > 0 && window.len() as u64 + 1 > max_req;
        let over_tokens = max_tok > 0 && !window.is_empty() && tokens + estimate > max_tok;
        if over_requests || over_tokens {
            let oldest = window.front().map(|(t, _)| *t).unwrap_or(now);
            return Err(Limited {
                retry_after: WINDOW.saturating_sub(now.duration_since(oldest)),
            });
        }
        window.push_back((now, estimate));
        Ok(())
    }

    /// Replaces the reservation with the tokens really used (in the background).
    pub fn settle(self: &Arc<Self>, r: Reservation, used: u64) {
        if !r.tracks_tokens || used == r.reserved {
            return;
        }
        if let Ok(mut local) = self.local.lock() {
            if let Some(w) = local.windows.get_mut(&r.principal) {
                if let Some(entry) = w.iter_mut().rev().find(|(_, t)| *t == r.reserved) {
                    entry.1 = used;
                }
            }
        }
        let Some(store) = self.store.clone().filter(|s| s.is_up()) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let key = store.limit_key(&r.principal);
            let script = &this.settle;
            let _: Result<i64, _> = store
                .call(|mut c| async move {
                    script
                        .key(key)
                        .arg(&r.id)
                        .arg(r.reserved)
                        .arg(used)
                        .invoke_async(&mut c)
                        .await
                })
                .await;
        });
    }
}
