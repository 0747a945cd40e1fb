//! `sidetrack check`'s warnings: settings that load and run but, as seed 000 found with AgentCore's
//! fallback, probably do not do what their author meant. Each is located like an error
//! (`FILE:LINE:COL: path: message`); none stops the config from loading.

use sidetrack_resilience::ErrorKind;

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
        if !p.triggers.statuses().iter().any(|m| m.matches(503)) {
            self.warn(
                &format!("{at}.triggerOn"),
                "a written triggerOn replaces the default and does not list 5XX: this hop's \
                 server errors (500, 502, 503…) go to the caller instead of falling back"
                    .to_owned(),
            );
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
