//! Phase "resolve route" (SPEC §5.2): `target/model` pinning (unless `server.allowPinning` is
//! off), rules in priority order, default routing from `targets[].models`. Pure over the validated
//! config; the result borrows from it.
//!
//! Rule conditions select, they do not authorize: a rule whose `matchPrincipals` leaves the caller
//! out does not match, and resolution goes on to the next rule and to default routing. Access is
//! the principal's `auth.keys[].models` allow-list, checked against [`access_name`] before any
//! route is resolved. Targets' `models` globs are read by default routing only: a rule's
//! destination or a pin is sent its model whatever those globs say.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use sidetrack_config::{
    BreakerMode, Config, DestinationRef, HopPolicy, MatchOperator, Matcher, Route, StaticRoute,
    Target,
};
use sidetrack_resilience::{walk, Triggers};
use smallvec::{smallvec, SmallVec};

use crate::glob::{glob_match, is_glob};

/// How the route was chosen (routing log `matchType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchType {
    Rule,
    Default,
    Pinned,
}

impl MatchType {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchType::Rule => "RULE",
            MatchType::Default => "DEFAULT",
            MatchType::Pinned => "PINNED",
        }
    }
}

/// One destination as the walk sees it: a target and the model to send it.
#[derive(Debug, Clone)]
pub struct Dest<'a> {
    pub target_index: usize,
    pub target: &'a Target,
    pub model: Cow<'a, str>,
}

/// One hop of the chain with its own (never inherited) policy.
#[derive(Debug, Clone)]
pub struct Hop<'a> {
    pub index: usize,
    /// Usually one (a static route's hop); priority groups hold more.
    pub destinations: SmallVec<[Dest<'a>; 1]>,
    pub policy: Cow<'a, HopPolicy>,
}

#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub rule: Option<&'a str>,
    pub match_type: MatchType,
    pub breaker_mode: BreakerMode,
    pub hops: Vec<Hop<'a>>,
    /// For weighted routes: which leg was picked (0-based).
    pub leg: Option<usize>,
}

/// What a request brings to route resolution. The plan borrows the model from it.
pub struct RouteInput<'r> {
    pub model: &'r str,
    pub principal: &'r str,
    /// The stickiness header's value, looked up by the caller of [`resolve`] when asked.
    pub sticky: Option<&'r str>,
}

/// Shared counters for round-robin and weighted picks. Relaxed atomics: no lock on the hot path.
#[derive(Debug, Default)]
pub struct Picker {
    counter: AtomicU64,
}

impl Picker {
    /// A picker whose sequence of draws is fixed by `seed` (reproducible tests and benchmarks).
    pub fn seeded(seed: u64) -> Picker {
        Picker {
            counter: AtomicU64::new(seed),
        }
    }

    /// A well-spread number in `0..n` (n > 0).
    pub fn below(&self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn next(&self) -> u64 {
        // splitmix64 over a counter: cheap, uncontended beyond one atomic add, well spread.
        let mut z = self
            .counter
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The policy of a hop that no rule configured (pinned and default routes).
pub(crate) fn default_policy() -> &'static HopPolicy {
    static DEFAULT: std::sync::LazyLock<HopPolicy> =
        std::sync::LazyLock::new(|| HopPolicy::new(Triggers::default_set(), None));
    &DEFAULT
}

fn matcher_matches(m: &Matcher, value: &str) -> bool {
    m.values.iter().any(|v| match m.operator {
        MatchOperator::StringEquals => v == value,
        MatchOperator::StringLike => glob_match(v, value),
    })
}

fn dest<'a>(cfg: &'a Config, r: &'a DestinationRef, caller_model: &'a str) -> Option<Dest<'a>> {
    let target_index = cfg.targets.iter().position(|t| t.name == r.target)?;
    let model = Cow::Borrowed(r.model.as_deref().unwrap_or(caller_model));
    Some(Dest {
        target_index,
        target: &cfg.targets[target_index],
        model,
    })
}

/// A static route's chain: the primary, then each `targetFallback`, each a hop of its own policy.
pub fn static_hops<'a>(cfg: &'a Config, route: &'a StaticRoute, model: &'a str) -> Vec<Hop<'a>> {
    let mut hops = Vec::with_capacity(1 + route.fallbacks.len());
    if let Some(d) = dest(cfg, &route.primary, model) {
        hops.push(Hop {
            index: 0,
            destinations: smallvec![d],
            policy: Cow::Borrowed(&route.primary_policy),
        });
    }
    for (i, fb) in route.fallbacks.iter().enumerate() {
        if let Some(d) = dest(cfg, &fb.destination, model) {
            hops.push(Hop {
                index: i + 1,
                destinations: smallvec![d],
                policy: Cow::Borrowed(&fb.policy),
            });
        }
    }
    hops
}

/// Priority groups: each group is one hop whose members are load-balanced (SPEC §5.8).
pub fn group_hops<'a>(
    cfg: &'a Config,
    groups: &'a [sidetrack_config::PriorityGroup],
    model: &'a str,
) -> Vec<Hop<'a>> {
    groups
        .iter()
        .enumerate()
        .map(|(i, g)| Hop {
            index: i,
            destinations: g
                .destinations
                .iter()
                .filter_map(|d| dest(cfg, d, model))
                .collect(),
            policy: Cow::Borrowed(&g.policy),
        })
        .collect()
}

/// What route resolution decided for one request.
pub enum Resolved<'a> {
    Plan(Plan<'a>),
    /// Nothing can serve the model.
    Unroutable,
}

/// Resolves the route for one request: a `target/model` pin (when pinning is allowed), else the
/// first rule whose conditions all match, else default routing.
pub fn resolve<'a>(cfg: &'a Config, input: &RouteInput<'a>, picker: &Picker) -> Resolved<'a> {
    if let Some(plan) = pinned(cfg, input.model) {
        return Resolved::Plan(plan);
    }
    if let Some(rule) = find_rule(cfg, input.model, input.principal) {
        let (hops, breaker_mode, leg) = match &rule.route {
            Route::Static(s) => (static_hops(cfg, s, input.model), s.breaker_mode, None),
            Route::PriorityGroups(groups) => (
                group_hops(cfg, groups, input.model),
                BreakerMode::Enabled,
                None,
            ),
            Route::Weighted(w) => {
                let weights: SmallVec<[u32; 4]> = w.legs.iter().map(|l| l.weight).collect();
                let total = walk::total_weight(&weights);
                let roll = match input.sticky {
                    Some(v) => {
                        let mut h = std::collections::hash_map::DefaultHasher::new();
                        v.hash(&mut h);
                        h.finish() % total
                    }
                    None => picker.next() % total,
                };
                let chosen = walk::pick_leg(&weights, roll);
                let leg = &w.legs[chosen];
                (
                    static_hops(cfg, &leg.route, input.model),
                    leg.route.breaker_mode,
                    Some(chosen),
                )
            }
        };
        return Resolved::Plan(Plan {
            rule: Some(rule.name.as_str()),
            match_type: MatchType::Rule,
            breaker_mode,
            hops,
            leg,
        });
    }
    match default_route(cfg, input.model, picker) {
        Some(plan) => Resolved::Plan(plan),
        None => Resolved::Unroutable,
    }
}

/// The first rule (ascending priority) whose conditions all match. A rule whose `matchPrincipals`
/// leaves the principal out simply does not match (conditions select; they do not authorize).
pub fn find_rule<'a>(
    cfg: &'a Config,
    model: &str,
    principal: &str,
) -> Option<&'a sidetrack_config::Rule> {
    cfg.rules
        .iter()
        .find(|rule| models_match(rule, model) && principals_match(rule, principal))
}

/// The name a principal's `models` allow-list is checked against (SPEC §5.2): the model part of a
/// pin (`oa/gpt-4o-mini` is checked as `gpt-4o-mini`, so it passes `gpt-4o*`), otherwise the
/// requested model as written. Only the model part of a pin: a glob such as `gpt-*` must not let
/// `gpt-team/any-model` through because the target's name happens to match it.
pub fn access_name<'m>(cfg: &Config, model: &'m str) -> &'m str {
    match pin(cfg, model) {
        Some((_, rest)) => rest,
        None => model,
    }
}

/// A rule without `matchModels` matches every model.
fn models_match(rule: &sidetrack_config::Rule, model: &str) -> bool {
    rule.match_models
        .as_ref()
        .is_none_or(|m| matcher_matches(m, model))
}

/// A rule without `matchPrincipals` matches every principal.
fn principals_match(rule: &sidetrack_config::Rule, principal: &str) -> bool {
    rule.match_principals
        .as_ref()
        .is_none_or(|m| matcher_matches(m, principal))
}

/// `target-name/model` names a target and a model: the target's index and the model part, when
/// `server.allowPinning` is on (the default) and the target exists.
fn pin<'m>(cfg: &Config, model: &'m str) -> Option<(usize, &'m str)> {
    if !cfg.server.allow_pinning {
        return None;
    }
    let (target, rest) = model.split_once('/')?;
    if rest.is_empty() {
        return None;
    }
    let target_index = cfg.targets.iter().position(|t| t.name == target)?;
    Some((target_index, rest))
}

/// `target-name/model` pins that target (checked before rules: an explicit pin wins). With
/// `server.allowPinning: false` there are no pins: such a name is an ordinary model name.
pub fn pinned<'a>(cfg: &'a Config, model: &'a str) -> Option<Plan<'a>> {
    let (target_index, rest) = pin(cfg, model)?;
    Some(single_hop(cfg, MatchType::Pinned, target_index, rest))
}

/// Does target `t` list `model` in its `models`: as a literal entry (`exact`) or through a glob?
fn lists(t: &Target, model: &str, exact: bool) -> bool {
    t.models.iter().any(|g| {
        if exact {
            g == model && !is_glob(g)
        } else {
            is_glob(g) && glob_match(g, model)
        }
    })
}

/// The targets default routing chooses among for `model`, with their indexes: those that list it
/// as a literal entry, or — when none does — those whose globs match it. Targets without `models`
/// take no part.
pub fn default_candidates<'c>(
    cfg: &'c Config,
    model: &'c str,
) -> impl Iterator<Item = (usize, &'c Target)> + Clone + 'c {
    let exact = cfg.targets.iter().any(|t| lists(t, model, true));
    cfg.targets
        .iter()
        .enumerate()
        .filter(move |(_, t)| lists(t, model, exact))
}

/// Default routing: round-robin among [`default_candidates`].
pub fn default_route<'a>(cfg: &'a Config, model: &'a str, picker: &Picker) -> Option<Plan<'a>> {
    let candidates = default_candidates(cfg, model);
    // Counted, then the drawn one found again: no list per request.
    let n = candidates.clone().count();
    if n == 0 {
        return None;
    }
    let k = (picker.next() % n as u64) as usize;
    let (target_index, _) = candidates.into_iter().nth(k)?;
    Some(single_hop(cfg, MatchType::Default, target_index, model))
}

/// A one-hop plan with the default triggers and no first-byte timeout (pinned and default routing,
/// and the embeddings destination of semantic lookup).
pub fn single_hop<'a>(
    cfg: &'a Config,
    match_type: MatchType,
    target_index: usize,
    model: &'a str,
) -> Plan<'a> {
    Plan {
        rule: None,
        match_type,
        breaker_mode: BreakerMode::Enabled,
        hops: vec![Hop {
            index: 0,
            destinations: smallvec![Dest {
                target_index,
                target: &cfg.targets[target_index],
                model: Cow::Borrowed(model),
            }],
            policy: Cow::Borrowed(default_policy()),
        }],
        leg: None,
    }
}

/// Models a principal can name, for `GET /v1/models`: the literal (non-glob) entries of rules'
/// `matchModels` and targets' `models` that the principal's allow-list admits and that resolve to
/// a route for it, as [`resolve`] would (a pin, a rule whose conditions match it, or default
/// routing), each with who serves it: `sidetrack` for a rule, else the target.
pub fn listed_models(
    cfg: &Config,
    principal: &str,
    allow: Option<&[String]>,
) -> Vec<(String, String)> {
    let rule_names = cfg
        .rules
        .iter()
        .filter_map(|r| r.match_models.as_ref())
        .flat_map(|m| &m.values);
    let target_names = cfg.targets.iter().flat_map(|t| &t.models);
    let mut out: Vec<(String, String)> = Vec::new();
    for id in rule_names.chain(target_names) {
        if is_glob(id) || out.iter().any(|(m, _)| m == id) {
            continue;
        }
        let name = access_name(cfg, id);
        if allow.is_some_and(|a| !a.iter().any(|g| glob_match(g, name))) {
            continue;
        }
        if let Some(owner) = served_by(cfg, id, principal) {
            out.push((id.clone(), owner.to_owned()));
        }
    }
    out
}

/// Who would serve `model` for `principal`, following [`resolve`]'s order without drawing: the
/// pinned target, `sidetrack` for a rule, or the first target default routing could pick.
fn served_by<'a>(cfg: &'a Config, model: &str, principal: &str) -> Option<&'a str> {
    if let Some((target_index, _)) = pin(cfg, model) {
        return Some(&cfg.targets[target_index].name);
    }
    if find_rule(cfg, model, principal).is_some() {
        return Some("sidetrack");
    }
    [true, false].into_iter().find_map(|exact| {
        cfg.targets
            .iter()
            .find(|t| lists(t, model, exact))
            .map(|t| t.name.as_str())
    })
}
