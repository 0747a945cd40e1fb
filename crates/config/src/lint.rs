//! `sidetrack check`'s warnings: settings that load and run but, as seed 000 found with AgentCore's
//! fallback, probably do not do what their author meant. Each is located like an error
//! (`FILE:LINE:COL: path: message`); none stops the config from loading.

use sidetrack_resilience::{ConditionInput, ErrorKind, UnhealthyCondition};

use crate::error::ConfigError;
use crate::glob::glob_match;
use crate::located::Positions;
use crate::model::{Config, DestinationRef, HopPolicy, Route, StaticRoute};

/// Every warning for `config`, in file order.
pub(crate) fn warnings(config: &Config, positions: &Positions, file: &str) -> Vec<ConfigError> {
    let mut lint = Lint {
        config,
        positions,
        file,
        out: Vec::new(),
    };
    for rule in &config.rules {
        let at = format!("rules[{}].routeToTarget", rule.index);
        match &rule.route {
            Route::Static(s) => lint.chain(s, &at),
            Route::PriorityGroups(groups) => {
                for (g, group) in groups.iter().enumerate() {
                    let hop = format!("{at}.priorityGroups[{g}]");
                    lint.hop(&group.policy, &hop);
                    for (d, dest) in group.destinations.iter().enumerate() {
                        lint.destination(dest, &format!("{hop}.destinations[{d}]"));
                    }
                }
                let policies: Vec<&HopPolicy> = groups.iter().map(|g| &g.policy).collect();
                lint.moves_on_for_429(&policies, &at);
                // Before group g, every member of the earlier groups may have been tried once.
                let mut before = 0;
                let hops: Vec<(&HopPolicy, String, usize)> = groups
                    .iter()
                    .enumerate()
                    .map(|(g, group)| {
                        let hop = (&group.policy, format!("{at}.priorityGroups[{g}]"), before);
                        before += group.destinations.len();
                        hop
                    })
                    .collect();
                lint.retry_controller(&hops);
                // Every group but the last can move the walk on.
                for (g, group) in groups
                    .iter()
                    .enumerate()
                    .take(groups.len().saturating_sub(1))
                {
                    let hop = format!("{at}.priorityGroups[{g}]");
                    for dest in &group.destinations {
                        lint.counted_but_kept(&dest.target, &group.policy, &hop);
                    }
                }
            }
            Route::Weighted(w) => {
                for (l, leg) in w.legs.iter().enumerate() {
                    lint.chain(&leg.route, &format!("{at}.weightedRoute.legs[{l}]"));
                }
            }
        }
    }
    lint.out.sort_by_key(|e| (e.line, e.column));
    lint.out
}

struct Lint<'a> {
    config: &'a Config,
    positions: &'a Positions,
    file: &'a str,
    out: Vec<ConfigError>,
}

impl Lint<'_> {
    fn warn(&mut self, path: &str, message: String) {
        let problem = self
            .positions
            .problem(self.file, path, format!("warning: {message}"));
        self.out.push(problem);
    }

    /// A static route (or a weighted leg) at `at`: its primary under `staticRoute` + `fallback`,
    /// each `targetFallback` entry a hop of its own.
    fn chain(&mut self, s: &StaticRoute, at: &str) {
        let (primary, fallback) = if at.contains(".legs[") {
            (at.to_owned(), format!("{at}.fallback"))
        } else {
            (format!("{at}.staticRoute"), format!("{at}.fallback"))
        };
        self.destination(&s.primary, &primary);
        self.hop(&s.primary_policy, &fallback);
        for (i, hop) in s.fallbacks.iter().enumerate() {
            let path = format!("{fallback}.targetFallback[{i}]");
            self.destination(&hop.destination, &path);
            self.hop(&hop.policy, &path);
        }
        // Every hop but the last can move the walk on.
        let hops: Vec<(&DestinationRef, &HopPolicy, String)> =
            std::iter::once((&s.primary, &s.primary_policy, fallback.clone()))
                .chain(s.fallbacks.iter().enumerate().map(|(i, f)| {
                    (
                        &f.destination,
                        &f.policy,
                        format!("{fallback}.targetFallback[{i}]"),
                    )
                }))
                .collect();
        for (dest, policy, path) in hops.iter().take(hops.len() - 1) {
            self.counted_but_kept(&dest.target, policy, path);
        }
        let walk: Vec<(&HopPolicy, String, usize)> = hops
            .iter()
            .enumerate()
            .map(|(i, (_, policy, path))| (*policy, path.clone(), i))
            .collect();
        self.retry_controller(&walk);
        if !s.fallbacks.is_empty() {
            let policies: Vec<&HopPolicy> = std::iter::once(&s.primary_policy)
                .chain(s.fallbacks.iter().map(|f| &f.policy))
                .collect();
            self.moves_on_for_429(&policies, at);
        }
    }

    /// One hop's own policy, written at `at` (its `triggerOn` and timeout sit under it).
    fn hop(&mut self, p: &HopPolicy, at: &str) {
        if p.triggers.is_default() {
            return;
        }
        if p.triggers.errors().contains(&ErrorKind::FirstByteTimeout)
            && p.first_byte_timeout.is_none()
        {
            self.warn(
                &format!("{at}.triggerOn.errors"),
                "FIRST_BYTE_TIMEOUT is listed but this hop sets no firstByteTimeoutMilliseconds \
                 (nothing is inherited): it can only fire at the request timeout"
                    .to_owned(),
            );
        }
        for (timeout, set, key) in [
            (
                ErrorKind::FirstTokenTimeout,
                p.first_token_timeout.is_some(),
                "firstTokenTimeoutMilliseconds",
            ),
            (
                ErrorKind::StreamIdleTimeout,
                p.stream_idle_timeout.is_some(),
                "streamIdleTimeoutMilliseconds",
            ),
        ] {
            if p.triggers.errors().contains(&timeout) && !set {
                self.warn(
                    &format!("{at}.triggerOn.errors"),
                    format!(
                        "{timeout} is listed but this hop sets no {key} (nothing is inherited): \
                         it never fires"
                    ),
                );
            }
        }
        if !p.triggers.statuses().iter().any(|m| m.matches(503)) {
            self.warn(
                &format!("{at}.triggerOn"),
                "a written triggerOn replaces the default and does not list 5XX: this hop's \
                 server errors (500, 502, 503…) go to the caller instead of falling back"
                    .to_owned(),
            );
        }
    }

    /// SPEC §11 keys that cannot act: a `hedge` on the last hop (there is no next hop to start),
    /// and `retry.attempts` that `defaults.maxAttempts` leaves no room for. `hops` are a route's
    /// hops in walk order with their path and the attempts made before reaching them when every
    /// earlier destination is tried once.
    fn retry_controller(&mut self, hops: &[(&HopPolicy, String, usize)]) {
        let max = self.config.defaults.max_attempts;
        for (p, at, before) in hops {
            let Some(retry) = p.retry.as_ref().filter(|r| r.attempts > 0) else {
                continue;
            };
            let before = u32::try_from(*before).unwrap_or(u32::MAX);
            let room = max.saturating_sub(before.saturating_add(1));
            if retry.attempts > room {
                let whence = if before == 0 {
                    String::new()
                } else {
                    format!(" after the {before} attempt(s) of the hops before it")
                };
                self.warn(
                    &format!("{at}.retry.attempts"),
                    format!(
                        "{} retries are set but defaults.maxAttempts ({max}) leaves room for \
                         {room} of them{whence} (maxAttempts counts every attempt of a request: \
                         hops, retries and hedges)",
                        retry.attempts
                    ),
                );
            }
        }
        if let Some((p, at, _)) = hops.last() {
            if p.hedge.is_some() {
                self.warn(
                    &format!("{at}.hedge"),
                    "hedge is set on the last hop of this route: there is no next hop to start, \
                     so it never fires"
                        .to_owned(),
                );
            }
        }
    }

    /// A chain of several hops none of which moves on for a 429.
    fn moves_on_for_429(&mut self, hops: &[&HopPolicy], at: &str) {
        if hops.len() < 2
            || hops
                .iter()
                .any(|p| p.triggers.statuses().iter().any(|m| m.matches(429)))
        {
            return;
        }
        self.warn(
            at,
            "no hop of this route moves on for 429: a rate-limited destination's 429 goes to the \
             caller although the route has fallbacks (429 is not a default trigger; add \"429\" \
             to triggerOn.statusCodes)"
                .to_owned(),
        );
    }

    /// A hop whose target's `unhealthyCondition` counts answers or errors that the hop's triggers
    /// do not fall back on. Probed by evaluating the condition for every status 400-599 (no
    /// headers) and for CONNECTION_ERROR / FIRST_BYTE_TIMEOUT; a condition that only reads headers
    /// says false here and is not reported.
    fn counted_but_kept(&mut self, target: &str, p: &HopPolicy, at: &str) {
        let Some((t, target)) = self
            .config
            .targets
            .iter()
            .enumerate()
            .find(|(_, t)| t.name == target)
        else {
            return;
        };
        let Some(source) = &target.circuit_breaker.unhealthy_condition else {
            return;
        };
        let Ok(condition) = UnhealthyCondition::compile(source) else {
            return;
        };
        let counts = |code: Option<u16>, error: Option<&str>| {
            condition.evaluate(&ConditionInput {
                code,
                headers: Vec::new(),
                error,
                class: None,
            }) == Ok(true)
        };
        let statuses = p.triggers.statuses();
        let codes: Vec<u16> = (400..=599)
            .filter(|c| counts(Some(*c), None) && !statuses.iter().any(|m| m.matches(*c)))
            .collect();
        let errors = p.triggers.errors();
        let kinds: Vec<&str> = [ErrorKind::ConnectionError, ErrorKind::FirstByteTimeout]
            .into_iter()
            .filter(|k| counts(None, Some(k.as_str())) && !errors.contains(k))
            .map(ErrorKind::as_str)
            .collect();
        if codes.is_empty() && kinds.is_empty() {
            return;
        }
        let mut what = code_ranges(&codes);
        what.extend(kinds.iter().map(|k| (*k).to_owned()));
        let written = format!("targets[{t}].circuitBreaker.unhealthyCondition");
        let whence = if self.positions.has(&written) {
            written
        } else {
            "defaults.circuitBreaker.unhealthyCondition".to_owned()
        };
        let (path, triggers) = if p.triggers.is_default() {
            (
                at.to_owned(),
                "triggers (the default set: 5XX, CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT)",
            )
        } else {
            (format!("{at}.triggerOn"), "triggers (its triggerOn)")
        };
        self.warn(
            &path,
            format!(
                "target `{}`'s unhealthyCondition ({whence}) counts {} as breaker failures, but \
                 this hop's {triggers} do not fall back on them: such an answer goes back to the \
                 caller instead of moving the walk on, yet it counts toward opening the breaker, \
                 and once open the destination is skipped for every request — the breaker moves \
                 traffic away on failures the triggers were meant to keep here. List them in \
                 triggerOn, or leave them out of the condition",
                target.name,
                what.join(", ")
            ),
        );
    }

    /// A destination that names a model its target's `models` globs do not list: sent anyway
    /// (SPEC §5.2), but often a typo.
    fn destination(&mut self, d: &DestinationRef, at: &str) {
        let Some(model) = &d.model else {
            return;
        };
        let Some(target) = self.config.targets.iter().find(|t| t.name == d.target) else {
            return;
        };
        if target.models.is_empty() || target.models.iter().any(|g| glob_match(g, model)) {
            return;
        }
        self.warn(
            &format!("{at}.model"),
            format!(
                "target `{}` does not list model `{model}` in its models ({}): it is sent anyway \
                 (only default routing reads them); check for a typo",
                target.name,
                target.models.join(", ")
            ),
        );
    }
}

/// `[429, 500, 501, 502]` → `["429", "500-502"]`; a whole class reads `4XX` / `5XX`.
pub(crate) fn code_ranges(codes: &[u16]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < codes.len() {
        let start = codes[i];
        let mut end = start;
        while i + 1 < codes.len() && codes[i + 1] == end + 1 {
            i += 1;
            end = codes[i];
        }
        i += 1;
        let mut lo = start;
        // Whole classes inside the run print as 4XX / 5XX.
        while lo <= end {
            let class_end = lo - lo % 100 + 99;
            if lo.is_multiple_of(100) && class_end <= end {
                out.push(format!("{}XX", lo / 100));
                lo = class_end + 1;
                continue;
            }
            let stop = end.min(class_end);
            out.push(if lo == stop {
                lo.to_string()
            } else {
                format!("{lo}-{stop}")
            });
            lo = stop + 1;
        }
    }
    out
}
