//! `targets[]` and the circuit-breaker policy layers (built-in → `defaults` → target).

use std::time::Duration;

use super::Ctx;
use crate::located::{join_index, join_key};
use crate::model::*;
use crate::raw::{RawBreaker, RawTarget};
use crate::redact::{redact_url, url_has_user_info};

const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
const MAX_CONNECT_TIMEOUT_MS: i64 = 300_000;
const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The host root of Google AI: the gateway adds `/v1beta/models/{model}:…`.
const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com";

pub(super) fn targets(
    ctx: &mut Ctx<'_>,
    raw: &[RawTarget],
    breaker_defaults: &BreakerPolicy,
) -> Vec<Target> {
    if raw.is_empty() {
        ctx.err("targets", "at least one target is required");
    }
    let mut out: Vec<Target> = Vec::new();
    let mut first_index: Vec<(&str, usize)> = Vec::new();
    for (i, t) in raw.iter().enumerate() {
        let path = join_index("targets", i);
        let name_path = join_key(&path, "name");
        if ctx.not_blank(&t.name, &name_path) {
            if t.name.contains('/') {
                ctx.err(
                    &name_path,
                    "must not contain `/` (a model written `target/model` pins a target)",
                );
            }
            match first_index.iter().find(|(n, _)| *n == t.name) {
                Some((_, j)) => ctx.err(
                    &name_path,
                    format!(
                        "duplicate target name `{}` (first defined at targets[{j}])",
                        t.name
                    ),
                ),
                None => first_index.push((&t.name, i)),
            }
        }
        out.push(target(ctx, t, &path, breaker_defaults));
    }
    out
}

fn target(
    ctx: &mut Ctx<'_>,
    t: &RawTarget,
    path: &str,
    breaker_defaults: &BreakerPolicy,
) -> Target {
    let choices = [
        ("openai", ProviderKind::OpenAi),
        ("anthropic", ProviderKind::Anthropic),
        ("bedrock", ProviderKind::Bedrock),
        ("gemini", ProviderKind::Gemini),
    ];
    let provider = ctx.one_of(&t.provider, &choices, &join_key(path, "provider"));

    let base_url_path = join_key(path, "baseUrl");
    let written_base = t.base_url.as_deref().map(|u| {
        if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() <= "https://".len() {
            ctx.err(
                &base_url_path,
                format!("`{}` is not an http:// or https:// URL", redact_url(u)),
            );
        } else if url_has_user_info(u) {
            // It would be sent as part of `Host` and shown wherever the URL is.
            ctx.err(
                &base_url_path,
                format!(
                    "must not carry credentials (user info in `{}`); give the key as `apiKey`",
                    redact_url(u)
                ),
            );
        }
        u.trim_end_matches('/').to_string()
    });
    if let Some(region) = &t.region {
        let ok = !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            ctx.err(
                &join_key(path, "region"),
                format!("`{region}` is not an AWS region (e.g. us-east-1)"),
            );
        }
    }
    let base_url = match (written_base, provider) {
        (Some(u), _) => u,
        (None, Some(ProviderKind::OpenAi)) => OPENAI_BASE_URL.to_string(),
        (None, Some(ProviderKind::Anthropic)) => ANTHROPIC_BASE_URL.to_string(),
        (None, Some(ProviderKind::Bedrock)) => match &t.region {
            Some(region) => format!("https://bedrock-runtime.{region}.amazonaws.com"),
            None => {
                ctx.err(
                    &join_key(path, "region"),
                    "a bedrock target needs `region` or `baseUrl`",
                );
                String::new()
            }
        },
        (None, Some(ProviderKind::Gemini)) => GEMINI_BASE_URL.to_string(),
        (None, None) => String::new(),
    };

    let api_key = t
        .api_key
        .as_deref()
        .and_then(|k| ctx.secret(k, &join_key(path, "apiKey")));
    let models = match &t.models {
        Some(m) => {
            let models_path = join_key(path, "models");
            if m.is_empty() {
                ctx.err(
                    &models_path,
                    "empty list; omit `models` to let this target serve any model it is sent",
                );
            }
            ctx.no_blank_entries(m, &models_path);
            m.clone()
        }
        None => Vec::new(),
    };
    let connect_timeout = ctx.millis(
        t.connect_timeout_milliseconds,
        1,
        MAX_CONNECT_TIMEOUT_MS,
        DEFAULT_CONNECT_TIMEOUT_MS,
        &join_key(path, "connectTimeoutMilliseconds"),
    );
    let circuit_breaker = breaker(
        ctx,
        breaker_defaults,
        t.circuit_breaker.as_ref(),
        &join_key(path, "circuitBreaker"),
    );
    let capabilities = t
        .capabilities
        .as_ref()
        .map(|c| Capabilities {
            tools: c.tools,
            json_schema: c.json_schema,
            context_window: c
                .context_window
                .and_then(|v| ctx.positive(v, &format!("{path}.capabilities.contextWindow"))),
        })
        .unwrap_or_default();

    Target {
        name: t.name.clone(),
        provider: provider.unwrap_or(ProviderKind::OpenAi),
        base_url,
        region: t.region.clone(),
        api_key,
        models,
        connect_timeout,
        circuit_breaker,
        capabilities,
    }
}

/// The breaker knobs in SPEC order; `overridden` is kept in this order.
const KNOBS: [&str; 9] = [
    "consecutiveFailures",
    "openMilliseconds",
    "maxOpenMilliseconds",
    "backoffMultiplier",
    "halfOpenProbes",
    "honorRetryAfter",
    "healthThreshold",
    "restoreHealth",
    "unhealthyCondition",
];

fn mark(overridden: &mut Vec<&'static str>, knob: &'static str) {
    if !overridden.contains(&knob) {
        overridden.push(knob);
        overridden.sort_by_key(|k| KNOBS.iter().position(|n| n == k));
    }
}

fn percent(ctx: &mut Ctx<'_>, v: f64, path: &str) -> Option<f64> {
    if !(0.0..=100.0).contains(&v) {
        ctx.err(path, format!("must be between 0 and 100 (got {v})"));
        return None;
    }
    Some(v)
}

/// Applies one written breaker layer over `base`, validating each knob at `path.<knob>` and
/// recording written knobs in `overridden`.
pub(super) fn breaker(
    ctx: &mut Ctx<'_>,
    base: &BreakerPolicy,
    raw: Option<&RawBreaker>,
    path: &str,
) -> BreakerPolicy {
    let mut p = base.clone();
    let Some(raw) = raw else { return p };
    let at = |knob: &str| join_key(path, knob);

    if let Some(v) = raw.consecutive_failures {
        mark(&mut p.overridden, "consecutiveFailures");
        if let Some(n) = ctx.count(v, 1, &at("consecutiveFailures")) {
            p.settings.consecutive_failures = n;
        }
    }
    if let Some(v) = raw.open_milliseconds {
        mark(&mut p.overridden, "openMilliseconds");
        if let Some(ms) = ctx.at_least(v, 1, &at("openMilliseconds")) {
            p.settings.open = Duration::from_millis(ms);
        }
    }
    if let Some(v) = raw.max_open_milliseconds {
        mark(&mut p.overridden, "maxOpenMilliseconds");
        if let Some(ms) = ctx.at_least(v, 1, &at("maxOpenMilliseconds")) {
            p.settings.max_open = Duration::from_millis(ms);
        }
    }
    if (raw.open_milliseconds.is_some() || raw.max_open_milliseconds.is_some())
        && p.settings.max_open < p.settings.open
    {
        let knob = if raw.max_open_milliseconds.is_some() {
            "maxOpenMilliseconds"
        } else {
            "openMilliseconds"
        };
        ctx.err(
            &at(knob),
            format!(
                "maxOpenMilliseconds ({}) must be at least openMilliseconds ({})",
                p.settings.max_open.as_millis(),
                p.settings.open.as_millis()
            ),
        );
    }
    if let Some(v) = raw.backoff_multiplier {
        mark(&mut p.overridden, "backoffMultiplier");
        if v.is_finite() && v >= 1.0 {
            p.settings.backoff_multiplier = v;
        } else {
            ctx.err(
                &at("backoffMultiplier"),
                format!("must be at least 1.0 (got {v})"),
            );
        }
    }
    if let Some(v) = raw.half_open_probes {
        mark(&mut p.overridden, "halfOpenProbes");
        if let Some(n) = ctx.count(v, 1, &at("halfOpenProbes")) {
            p.settings.half_open_probes = n;
        }
    }
    if let Some(v) = raw.honor_retry_after {
        mark(&mut p.overridden, "honorRetryAfter");
        p.settings.honor_retry_after = v;
    }
    if let Some(v) = raw.health_threshold {
        mark(&mut p.overridden, "healthThreshold");
        if let Some(v) = percent(ctx, v, &at("healthThreshold")) {
            p.settings.health_threshold = Some(v);
        }
    }
    if let Some(v) = raw.restore_health {
        mark(&mut p.overridden, "restoreHealth");
        if let Some(v) = percent(ctx, v, &at("restoreHealth")) {
            p.settings.restore_health = v;
        }
    }
    if let Some(v) = &raw.unhealthy_condition {
        mark(&mut p.overridden, "unhealthyCondition");
        if ctx.not_blank(v, &at("unhealthyCondition")) {
            match sidetrack_resilience::UnhealthyCondition::compile(v) {
                Ok(_) => p.unhealthy_condition = Some(v.clone()),
                Err(e) => ctx.err(&at("unhealthyCondition"), e),
            }
        }
    }
    p
}
