//! State shared by every listener and connection: current behaviours, failure PRNGs, stats, the
//! last request per model, and the refuse-connections switches.
//!
//! One std mutex, held only for map updates — never across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use tokio::sync::watch;

use crate::config::{Behaviour, WILDCARD_MODEL};
use crate::prng::SplitMix64;

pub(crate) struct Shared {
    initial_models: BTreeMap<String, Behaviour>,
    state: Mutex<State>,
    /// One switch per listener, in [`crate::MockServer::addrs`] order, with its start value.
    refuse: Vec<(watch::Sender<bool>, bool)>,
    ids: AtomicU64,
    id_base: u64,
}

#[derive(Default)]
struct State {
    behaviours: BTreeMap<String, Behaviour>,
    /// Per requested model name, created from the behaviour's seed on first draw.
    prngs: HashMap<String, SplitMix64>,
    total: u64,
    models: BTreeMap<String, ModelStats>,
    /// Per requested model name: requests failed by `failFirst` since the behaviour was set.
    failed_first: HashMap<String, u64>,
    /// The Google token endpoint (Vertex): settings, counts, issued tokens.
    token: crate::google_token::TokenState,
}

#[derive(Default)]
struct ModelStats {
    hits: u64,
    /// Requests whose caller went away before the answer ended.
    cancelled: u64,
    endpoints: BTreeMap<String, u64>,
    last_request: Option<Value>,
}

/// What [`Shared::admit`] hands the engine.
pub(crate) struct Admission {
    pub behaviour: Behaviour,
    /// The model's next PRNG value, when its behaviour has a `failureRate`.
    pub draw: Option<f64>,
    /// The request is one of the model's first `failFirst` and fails.
    pub fail_first: bool,
}

impl Shared {
    pub fn new(
        models: BTreeMap<String, Behaviour>,
        refuse: Vec<(watch::Sender<bool>, bool)>,
    ) -> Self {
        let id_base = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self {
            state: Mutex::new(State {
                behaviours: models.clone(),
                ..State::default()
            }),
            initial_models: models,
            refuse,
            ids: AtomicU64::new(0),
            id_base,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a harmful way.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a hit for `model` on `endpoint`, records the request (`{"path", "model", "auth",
    /// "headers", "body"}`), and returns the behaviour to apply with this request's failure draw.
    pub fn admit(&self, model: &str, endpoint: &str, request: Value) -> Admission {
        let mut state = self.lock();
        state.total += 1;
        let stats = state.models.entry(model.to_owned()).or_default();
        stats.hits += 1;
        *stats.endpoints.entry(endpoint.to_owned()).or_default() += 1;
        stats.last_request = Some(request);

        let behaviour = resolve(&state.behaviours, model);
        let draw = behaviour.failure_rate.map(|_| {
            let seed = behaviour.seed.unwrap_or(0);
            state
                .prngs
                .entry(model.to_owned())
                .or_insert_with(|| SplitMix64::new(seed))
                .next_f64()
        });
        let fail_first = behaviour.fail_first.is_some_and(|k| {
            let failed = state.failed_first.entry(model.to_owned()).or_default();
            let fail = *failed < k;
            *failed += u64::from(fail);
            fail
        });
        Admission {
            behaviour,
            draw,
            fail_first,
        }
    }

    pub fn set_behaviour(&self, model: &str, behaviour: Behaviour) {
        let mut state = self.lock();
        state.behaviours.insert(model.to_owned(), behaviour);
        // A new behaviour restarts its failure sequence; `*` may stand for any model.
        if model == WILDCARD_MODEL {
            state.prngs.clear();
            state.failed_first.clear();
        } else {
            state.prngs.remove(model);
            state.failed_first.remove(model);
        }
    }

    /// The behaviour a request for `model` gets now.
    pub fn behaviour(&self, model: &str) -> Behaviour {
        resolve(&self.lock().behaviours, model)
    }

    pub fn reset(&self) {
        let mut state = self.lock();
        *state = State {
            behaviours: self.initial_models.clone(),
            ..State::default()
        };
        drop(state);
        for (switch, initial) in &self.refuse {
            switch.send_replace(*initial);
        }
    }

    /// Turns refusing on or off for listener `index`; false when there is no such listener.
    pub fn set_refuse(&self, index: usize, on: bool) -> bool {
        self.refuse
            .get(index)
            .map(|(switch, _)| switch.send_replace(on))
            .is_some()
    }

    pub fn hits(&self, model: &str) -> u64 {
        self.lock().models.get(model).map_or(0, |m| m.hits)
    }

    /// Counts a request for `model` whose caller went away before the answer ended.
    pub fn count_cancelled(&self, model: &str) {
        self.lock()
            .models
            .entry(model.to_owned())
            .or_default()
            .cancelled += 1;
    }

    pub fn cancelled(&self, model: &str) -> u64 {
        self.lock().models.get(model).map_or(0, |m| m.cancelled)
    }

    pub fn total_hits(&self) -> u64 {
        self.lock().total
    }

    pub fn last_request(&self, model: &str) -> Option<Value> {
        self.lock()
            .models
            .get(model)
            .and_then(|m| m.last_request.clone())
    }

    /// `{"total": N, "models": {"<model>": {"hits", "cancelled", "endpoints", "lastRequest"}}}`.
    pub fn stats(&self) -> Value {
        let state = self.lock();
        let models: Map<String, Value> = state
            .models
            .iter()
            .map(|(name, m)| {
                let stats = json!({
                    "hits": m.hits,
                    "cancelled": m.cancelled,
                    "endpoints": m.endpoints,
                    "lastRequest": m.last_request,
                });
                (name.clone(), stats)
            })
            .collect();
        json!({
            "total": state.total,
            "models": models,
            "tokenRequests": state.token.requests,
            "tokensIssued": state.token.issued_count,
        })
    }

    /// One request to the token endpoint (`POST /token`).
    pub fn token_request(&self, body: &[u8]) -> http::Response<crate::body::MockBody> {
        let fresh = self.fresh_hex();
        self.lock().token.answer(body, &fresh)
    }

    /// The request carries a bearer the token endpoint issued (or one it was told to accept).
    pub fn token_accepted(&self, headers: &http::HeaderMap) -> bool {
        self.lock().token.accepts(headers)
    }

    pub fn set_token_settings(&self, settings: crate::google_token::TokenSettings) {
        self.lock().token.settings = settings;
    }

    pub fn token_requests(&self) -> u64 {
        self.lock().token.requests
    }

    /// 32 fresh hex characters for ids.
    pub fn fresh_hex(&self) -> String {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut g = SplitMix64::new(self.id_base ^ n.rotate_left(32));
        format!("{:016x}{:016x}", g.next_u64(), g.next_u64())
    }
}

fn resolve(behaviours: &BTreeMap<String, Behaviour>, model: &str) -> Behaviour {
    behaviours
        .get(model)
        .or_else(|| behaviours.get(WILDCARD_MODEL))
        .cloned()
        .unwrap_or_default()
}
