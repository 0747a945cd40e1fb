//! `rules[]`: priorities, matchers, and the three route shapes with their hops and triggers.

use std::time::Duration;

use sidetrack_resilience::{StatusMatcher, TriggerName, Triggers};

use super::Ctx;
use crate::located::{join_index, join_key};
use crate::model::*;
use crate::raw::*;

const MAX_PRIORITY: i64 = 1_000_000;
const MIN_FIRST_BYTE_TIMEOUT_MS: i64 = 50;
const MAX_FIRST_BYTE_TIMEOUT_MS: i64 = 900_000;
const MAX_STATUS_CODES: usize = 10;
/// `firstTokenTimeoutMilliseconds` / `streamIdleTimeoutMilliseconds` (SPEC §11).
const STREAM_TIMEOUT_RANGE: (i64, i64) = (50, 900_000);
/// `retry.attempts`: retries after the first attempt.
const MAX_RETRY_ATTEMPTS: i64 = 10;
const MAX_BACKOFF_MS: i64 = 60_000;
const DEFAULT_BACKOFF_MS: u64 = 100;
const MAX_MAX_BACKOFF_MS: i64 = 300_000;
const DEFAULT_MAX_BACKOFF_MS: u64 = 2000;
/// `hedge.afterMilliseconds`.
const HEDGE_AFTER_RANGE: (i64, i64) = (10, 900_000);

/// The per-hop keys (SPEC §5.3, §11) as written on one hop: `fallback` (the primary), a
/// `targetFallback` entry or a `priorityGroups` entry. Nothing is inherited between hops.
struct HopKeys<'a> {
    trigger_on: Option<&'a RawTriggerOn>,
    first_byte_timeout: Option<i64>,
    first_token_timeout: Option<i64>,
    stream_idle_timeout: Option<i64>,
    retry: Option<&'a RawRetry>,
    hedge: Option<&'a RawHedge>,
}

macro_rules! hop_keys {
    ($raw:expr) => {
        HopKeys {
            trigger_on: $raw.trigger_on.as_ref(),
            first_byte_timeout: $raw.first_byte_timeout_milliseconds,
            first_token_timeout: $raw.first_token_timeout_milliseconds,
            stream_idle_timeout: $raw.stream_idle_timeout_milliseconds,
            retry: $raw.retry.as_ref(),
            hedge: $raw.hedge.as_ref(),
        }
    };
}

pub(super) fn rules(ctx: &mut Ctx<'_>, raw: &[RawRule], targets: &[Target]) -> Vec<Rule> {
    let target_names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let mut out: Vec<Rule> = Vec::new();
    let mut seen_priorities: Vec<(i64, usize)> = Vec::new();
    let mut seen_names: Vec<(String, usize, bool)> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let path = join_index("rules", i);
        let priority_path = join_key(&path, "priority");
        let priority = ctx.int_in(r.priority, 1, MAX_PRIORITY, &priority_path);
        match seen_priorities.iter().find(|(p, _)| *p == r.priority) {
            Some((p, j)) => ctx.err(
                &priority_path,
                format!("priority {p} is already used by rules[{j}]; priorities must be unique"),
            ),
            None => seen_priorities.push((r.priority, i)),
        }

        let name = match &r.name {
            Some(n) => {
                ctx.not_blank(n, &join_key(&path, "name"));
                n.clone()
            }
            None => format!("rule-{}", r.priority),
        };
        // Two defaulted names collide only when their priorities do, which is reported above.
        let written = r.name.is_some();
        match seen_names.iter().find(|(n, _, _)| *n == name) {
            Some((n, j, other_written)) if written || *other_written => ctx.err(
                &join_key(&path, "name"),
                format!("rule name `{n}` is already used by rules[{j}]"),
            ),
            Some(_) => {}
            None => seen_names.push((name.clone(), i, written)),
        }

        let match_models = matcher(
            ctx,
            r.match_models.as_ref(),
            &join_key(&path, "matchModels"),
            MatchOperator::StringLike,
        );
        let match_principals = matcher(
            ctx,
            r.match_principals.as_ref(),
            &join_key(&path, "matchPrincipals"),
            MatchOperator::StringEquals,
        );
        let route = route(
            ctx,
            &r.route_to_target,
            &join_key(&path, "routeToTarget"),
            &target_names,
        );
        let cache_mode = r.cache.as_ref().and_then(|c| {
            let path = join_key(&join_key(&path, "cache"), "mode");
            ctx.one_of(&c.mode, super::CACHE_MODES, &path)
        });
        if let (Some(priority), Some(route)) = (priority, route) {
            out.push(Rule {
                name,
                priority: u32::try_from(priority).unwrap_or(u32::MAX),
                index: i,
                match_models,
                match_principals,
                route,
                cache_mode,
            });
        }
    }
    out.sort_by_key(|r| r.priority);
    out
}

fn matcher(
    ctx: &mut Ctx<'_>,
    raw: Option<&RawMatcher>,
    path: &str,
    default_operator: MatchOperator,
) -> Option<Matcher> {
    let m = raw?;
    let operator = match &m.operator {
        Some(op) => {
            let choices = [
                ("StringLike", MatchOperator::StringLike),
                ("StringEquals", MatchOperator::StringEquals),
            ];
            ctx.one_of(op, &choices, &join_key(path, "operator"))
                .unwrap_or(default_operator)
        }
        None => default_operator,
    };
    // Like AgentCore: at least one non-blank value. A blank one among others never matches
    // anything (a request always names a model), so it is harmless and accepted.
    if m.values.iter().all(|v| v.trim().is_empty()) {
        let values_path = if m.written_as_map {
            join_key(path, "values")
        } else {
            path.to_string()
        };
        ctx.err(&values_path, "needs at least one non-blank value");
    }
    Some(Matcher {
        operator,
        values: m.values.clone(),
    })
}

fn route(ctx: &mut Ctx<'_>, r: &RawRouteToTarget, path: &str, targets: &[&str]) -> Option<Route> {
    let written: Vec<&str> = [
        ("staticRoute", r.static_route.is_some()),
        ("priorityGroups", r.priority_groups.is_some()),
        ("weightedRoute", r.weighted_route.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    match written.len() {
        0 => {
            ctx.err(
                path,
                "needs one of `staticRoute`, `priorityGroups` or `weightedRoute`",
            );
            return None;
        }
        1 => {}
        _ => {
            let list: Vec<String> = written.iter().map(|w| format!("`{w}`")).collect();
            ctx.err(
                path,
                format!("has {}; write exactly one route", list.join(" and ")),
            );
            return None;
        }
    }
    let fallback_path = join_key(path, "fallback");
    if r.fallback.is_some() && r.static_route.is_none() {
        ctx.err(
            &fallback_path,
            "`fallback` belongs beside `staticRoute`; priority groups carry their own `triggerOn` \
             and weighted legs their own `fallback`",
        );
    }

    if let Some(d) = &r.static_route {
        let primary_path = join_key(path, "staticRoute");
        let primary = destination(ctx, &d.target, d.model.as_deref(), &primary_path, targets);
        let mut seen = Seen::default();
        seen.add(ctx, &primary, &primary_path);
        let route = static_route(
            ctx,
            primary,
            r.fallback.as_ref(),
            &fallback_path,
            &mut seen,
            targets,
        );
        return Some(Route::Static(route));
    }
    if let Some(groups) = &r.priority_groups {
        return Some(Route::PriorityGroups(priority_groups(
            ctx,
            groups,
            &join_key(path, "priorityGroups"),
            targets,
        )));
    }
    r.weighted_route
        .as_ref()
        .map(|w| Route::Weighted(weighted(ctx, w, &join_key(path, "weightedRoute"), targets)))
}

/// The destinations already used in one route, to reject repeats. `(target, None)` — "the
/// caller's model" — is an identity of its own, distinct from every pinned model.
#[derive(Default)]
struct Seen {
    items: Vec<(DestinationRef, String)>,
}

impl Seen {
    fn add(&mut self, ctx: &mut Ctx<'_>, d: &DestinationRef, path: &str) {
        match self.items.iter().find(|(x, _)| x == d) {
            Some((_, first)) => ctx.err(
                path,
                format!(
                    "destination {} is already used in this route at {first}; every destination \
                     in a route must be distinct",
                    show(d)
                ),
            ),
            None => self.items.push((d.clone(), path.to_string())),
        }
    }
}

fn show(d: &DestinationRef) -> String {
    match &d.model {
        Some(m) => format!("{}/{m}", d.target),
        None => format!("{} (caller's model)", d.target),
    }
}

fn destination(
    ctx: &mut Ctx<'_>,
    target: &str,
    model: Option<&str>,
    path: &str,
    targets: &[&str],
) -> DestinationRef {
    let target_path = join_key(path, "target");
    if ctx.not_blank(target, &target_path) && !targets.contains(&target) {
        let known: Vec<String> = targets.iter().map(|t| format!("`{t}`")).collect();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        ctx.err(
            &target_path,
            format!("unknown target `{target}` (defined targets: {known})"),
        );
    }
    if let Some(m) = model {
        if m.trim().is_empty() {
            ctx.err(
                &join_key(path, "model"),
                "must not be blank; omit `model` to send the caller's model",
            );
        }
    }
    DestinationRef {
        target: target.to_string(),
        model: model.map(str::to_string),
    }
}

/// A static route (or one weighted leg): primary, its policy from `fallback`, then the hops.
fn static_route(
    ctx: &mut Ctx<'_>,
    primary: DestinationRef,
    fallback: Option<&RawFallback>,
    fallback_path: &str,
    seen: &mut Seen,
    targets: &[&str],
) -> StaticRoute {
    let Some(fb) = fallback else {
        return StaticRoute {
            primary,
            primary_policy: HopPolicy::new(Triggers::default_set(), None),
            breaker_mode: BreakerMode::Enabled,
            fallbacks: Vec::new(),
        };
    };
    let primary_policy = hop_policy(ctx, hop_keys!(fb), fallback_path);
    let breaker_mode = fb
        .circuit_breaker
        .as_ref()
        .and_then(|c| c.mode.as_deref())
        .and_then(|mode| {
            let choices = [
                ("ENABLED", BreakerMode::Enabled),
                ("DISABLED", BreakerMode::Disabled),
            ];
            ctx.one_of(
                mode,
                &choices,
                &format!("{fallback_path}.circuitBreaker.mode"),
            )
        })
        .unwrap_or(BreakerMode::Enabled);

    let hops_path = join_key(fallback_path, "targetFallback");
    let hops = fb.target_fallback.as_deref().unwrap_or_default();
    // SPEC §11: a `fallback` that sets primary-hop keys (`retry`, timeouts) may omit
    // `targetFallback`; the route is then a single hop. A written empty list is still a mistake.
    let primary_only = fb.target_fallback.is_none()
        && (fb.retry.is_some()
            || fb.first_byte_timeout_milliseconds.is_some()
            || fb.first_token_timeout_milliseconds.is_some()
            || fb.stream_idle_timeout_milliseconds.is_some());
    if hops.is_empty() && !primary_only {
        ctx.err(
            &hops_path,
            "a fallback needs at least one targetFallback, unless it sets primary-hop keys \
             (retry, firstByteTimeoutMilliseconds, firstTokenTimeoutMilliseconds, \
             streamIdleTimeoutMilliseconds)",
        );
    }
    let mut fallbacks = Vec::new();
    for (j, h) in hops.iter().enumerate() {
        let hop_path = join_index(&hops_path, j);
        let destination = destination(ctx, &h.target, h.model.as_deref(), &hop_path, targets);
        seen.add(ctx, &destination, &hop_path);
        let policy = hop_policy(ctx, hop_keys!(h), &hop_path);
        fallbacks.push(FallbackHop {
            destination,
            policy,
        });
    }
    StaticRoute {
        primary,
        primary_policy,
        breaker_mode,
        fallbacks,
    }
}

fn priority_groups(
    ctx: &mut Ctx<'_>,
    groups: &[RawPriorityGroup],
    path: &str,
    targets: &[&str],
) -> Vec<PriorityGroup> {
    if groups.is_empty() {
        ctx.err(path, "needs at least one group");
    }
    let mut seen = Seen::default();
    let mut out = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let group_path = join_index(path, g);
        let dests_path = join_key(&group_path, "destinations");
        if group.destinations.is_empty() {
            ctx.err(&dests_path, "needs at least one destination");
        }
        let mut destinations = Vec::new();
        for (k, d) in group.destinations.iter().enumerate() {
            let dest_path = join_index(&dests_path, k);
            let dest = destination(ctx, &d.target, d.model.as_deref(), &dest_path, targets);
            seen.add(ctx, &dest, &dest_path);
            destinations.push(dest);
        }
        let policy = hop_policy(ctx, hop_keys!(group), &group_path);
        out.push(PriorityGroup {
            destinations,
            policy,
        });
    }
    out
}

fn weighted(
    ctx: &mut Ctx<'_>,
    w: &RawWeightedRoute,
    path: &str,
    targets: &[&str],
) -> WeightedRoute {
    let legs_path = join_key(path, "legs");
    if w.legs.len() < 2 {
        ctx.err(
            &legs_path,
            format!("needs at least two legs (got {})", w.legs.len()),
        );
    }
    // Legs must go to different primaries; each leg's own chain must be distinct within itself
    // (a leg may fall back to another leg's primary: that is a different chain).
    let mut primaries = Seen::default();
    let mut legs = Vec::new();
    for (l, leg) in w.legs.iter().enumerate() {
        let leg_path = join_index(&legs_path, l);
        let weight = ctx
            .count(leg.weight, 1, &join_key(&leg_path, "weight"))
            .unwrap_or(1);
        let primary = destination(ctx, &leg.target, leg.model.as_deref(), &leg_path, targets);
        primaries.add(ctx, &primary, &leg_path);
        let mut seen = Seen::default();
        seen.add(ctx, &primary, &leg_path);
        let route = static_route(
            ctx,
            primary,
            leg.fallback.as_ref(),
            &join_key(&leg_path, "fallback"),
            &mut seen,
            targets,
        );
        legs.push(WeightedLeg { weight, route });
    }
    let stickiness_header = w.stickiness.as_ref().map(|s| {
        if !is_header_name(&s.header) {
            ctx.err(
                &join_key(path, "stickiness.header"),
                format!("`{}` is not a valid HTTP header name", s.header),
            );
        }
        s.header.clone()
    });
    WeightedRoute {
        legs,
        stickiness_header,
    }
}

/// RFC 9110 token characters.
fn is_header_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One hop's keys, all under `path`. Nothing is inherited: an omitted `triggerOn` is the
/// default set, an omitted timeout is none, an omitted `retry` is no retries, an omitted `hedge`
/// is no hedging.
fn hop_policy(ctx: &mut Ctx<'_>, keys: HopKeys<'_>, path: &str) -> HopPolicy {
    let triggers = triggers(
        ctx,
        keys.trigger_on,
        &join_key(path, "triggerOn"),
        "so this hop could never fall back; omit `triggerOn` to use the defaults",
    );
    let mut timeout = |v: Option<i64>, (lo, hi): (i64, i64), key: &str| {
        v.and_then(|v| ctx.int_in(v, lo, hi, &join_key(path, key)))
            .map(Duration::from_millis)
    };
    let first_byte_timeout = timeout(
        keys.first_byte_timeout,
        (MIN_FIRST_BYTE_TIMEOUT_MS, MAX_FIRST_BYTE_TIMEOUT_MS),
        "firstByteTimeoutMilliseconds",
    );
    let first_token_timeout = timeout(
        keys.first_token_timeout,
        STREAM_TIMEOUT_RANGE,
        "firstTokenTimeoutMilliseconds",
    );
    let stream_idle_timeout = timeout(
        keys.stream_idle_timeout,
        STREAM_TIMEOUT_RANGE,
        "streamIdleTimeoutMilliseconds",
    );
    let hedge = keys.hedge.and_then(|h| {
        let (lo, hi) = HEDGE_AFTER_RANGE;
        ctx.int_in(
            h.after_milliseconds,
            lo,
            hi,
            &join_key(path, "hedge.afterMilliseconds"),
        )
        .map(|ms| HedgePolicy {
            after: Duration::from_millis(ms),
        })
    });
    let retry = keys
        .retry
        .map(|r| retry_policy(ctx, r, &join_key(path, "retry")));
    HopPolicy {
        triggers,
        first_byte_timeout,
        first_token_timeout,
        stream_idle_timeout,
        retry,
        hedge,
    }
}

/// A hop's `retry` block at `path`, defaults applied.
fn retry_policy(ctx: &mut Ctx<'_>, r: &RawRetry, path: &str) -> RetryPolicy {
    let attempts = r
        .attempts
        .and_then(|v| ctx.int_in(v, 0, MAX_RETRY_ATTEMPTS, &join_key(path, "attempts")))
        .map_or(0, |n| u32::try_from(n).unwrap_or(0));
    let backoff_path = join_key(path, "backoffMilliseconds");
    let backoff = r
        .backoff_milliseconds
        .and_then(|v| ctx.int_in(v, 0, MAX_BACKOFF_MS, &backoff_path));
    let max_path = join_key(path, "maxBackoffMilliseconds");
    let max_backoff = r
        .max_backoff_milliseconds
        .and_then(|v| ctx.int_in(v, 0, MAX_MAX_BACKOFF_MS, &max_path));
    let (b, m) = (
        backoff.unwrap_or(DEFAULT_BACKOFF_MS),
        max_backoff.unwrap_or(DEFAULT_MAX_BACKOFF_MS),
    );
    // Checked only between values that passed their own range (or are defaults); reported at
    // the written key that breaks it (the max when written, else the base).
    let in_range = (r.backoff_milliseconds.is_none() || backoff.is_some())
        && (r.max_backoff_milliseconds.is_none() || max_backoff.is_some());
    if in_range && m < b {
        let at = if r.max_backoff_milliseconds.is_some() {
            &max_path
        } else {
            &backoff_path
        };
        ctx.err(
            at,
            format!("maxBackoffMilliseconds ({m}) must be at least backoffMilliseconds ({b})"),
        );
    }
    let on = r.on.as_ref().map(|on| {
        triggers(
            ctx,
            Some(on),
            &join_key(path, "on"),
            "so no outcome could retry; omit `on` to retry on the hop's triggers",
        )
    });
    RetryPolicy {
        attempts,
        backoff: Duration::from_millis(b),
        max_backoff: Duration::from_millis(m),
        on,
    }
}

/// A `triggerOn` (or `retry.on`) at `path`; `None` is the default set. `empty` ends the message
/// for a block that lists nothing.
fn triggers(ctx: &mut Ctx<'_>, raw: Option<&RawTriggerOn>, path: &str, empty: &str) -> Triggers {
    let Some(t) = raw else {
        return Triggers::default_set();
    };
    if t.status_codes.is_none() && t.errors.as_ref().is_none_or(|e| e.is_empty()) {
        ctx.err(path, format!("lists no statusCodes and no errors, {empty}"));
    }
    let mut statuses = Vec::new();
    if let Some(codes) = &t.status_codes {
        let codes_path = join_key(path, "statusCodes");
        if codes.is_empty() || codes.len() > MAX_STATUS_CODES {
            ctx.err(
                &codes_path,
                format!(
                    "needs 1 to {MAX_STATUS_CODES} status codes (got {})",
                    codes.len()
                ),
            );
        }
        for (k, code) in codes.iter().enumerate() {
            match StatusMatcher::parse(&code.0) {
                Ok(m) => statuses.push(m),
                Err(e) => ctx.err(&join_index(&codes_path, k), e.to_string()),
            }
        }
    }
    let mut errors = Vec::new();
    if let Some(names) = &t.errors {
        let errors_path = join_key(path, "errors");
        for (k, name) in names.iter().enumerate() {
            match TriggerName::parse(name) {
                Ok(n) => errors.push(n),
                Err(e) => ctx.err(&join_index(&errors_path, k), e.to_string()),
            }
        }
    }
    Triggers::explicit_names(statuses, &errors)
}
