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
const VERTEX_GLOBAL_BASE_URL: &str = "https://aiplatform.googleapis.com";
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
        ("azure", ProviderKind::Azure),
        ("vertex", ProviderKind::Vertex),
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
            let example = match provider {
                Some(ProviderKind::Vertex) => "a Google Cloud region (e.g. us-east5, or global)",
                _ => "an AWS region (e.g. us-east-1)",
            };
            ctx.err(
                &join_key(path, "region"),
                format!("`{region}` is not {example}"),
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
        (None, Some(ProviderKind::Azure)) => {
            ctx.err(
                &base_url_path,
                "an azure target needs `baseUrl` (https://<resource>.openai.azure.com)",
            );
            String::new()
        }
        (None, Some(ProviderKind::Vertex)) => match t.region.as_deref() {
            Some("global") => VERTEX_GLOBAL_BASE_URL.to_string(),
            Some(region) => format!("https://{region}-aiplatform.googleapis.com"),
            None => String::new(), // reported by `vertex` below
        },
        (None, Some(ProviderKind::Gemini)) => GEMINI_BASE_URL.to_string(),
        (None, None) => String::new(),
    };
    let (project, vertex_auth) = match provider {
        Some(ProviderKind::Vertex) => vertex(ctx, t, path),
        _ => {
            for (key, written) in [
                ("project", t.project.is_some()),
                ("credentials", t.credentials.is_some()),
                ("accessToken", t.access_token.is_some()),
            ] {
                if written {
                    ctx.err(&join_key(path, key), "only a vertex target takes this key");
                }
            }
            (None, None)
        }
    };

    let api_key = t
        .api_key
        .as_deref()
        .and_then(|k| ctx.secret(k, &join_key(path, "apiKey")));
    let (api_version, entra_token) = azure_keys(ctx, t, provider, path);
    let headers = headers(ctx, t.headers.as_ref(), path);
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
        api_version,
        entra_token,
        headers,
        project,
        vertex_auth,
    }
}

/// `apiVersion` and `entraToken`: azure's own keys (SPEC §13). An azure target needs
/// `apiVersion` and exactly one of `apiKey` / `entraToken`; other kinds take neither.
fn azure_keys(
    ctx: &mut Ctx<'_>,
    t: &RawTarget,
    provider: Option<ProviderKind>,
    path: &str,
) -> (Option<String>, Option<Secret>) {
    let version_path = join_key(path, "apiVersion");
    let entra_path = join_key(path, "entraToken");
    if provider != Some(ProviderKind::Azure) {
        if provider.is_some() {
            for (written, key_path) in [
                (t.api_version.is_some(), &version_path),
                (t.entra_token.is_some(), &entra_path),
            ] {
                if written {
                    ctx.err(key_path, "only an azure target takes this key");
                }
            }
        }
        return (None, None);
    }
    let api_version = match &t.api_version {
        None => {
            ctx.err(
                &version_path,
                "an azure target needs `apiVersion` (e.g. \"2024-10-21\")",
            );
            None
        }
        Some(v) if !api_version_ok(v) => {
            ctx.err(
                &version_path,
                format!("`{v}` is not an Azure OpenAI API version (YYYY-MM-DD, optionally with -preview)"),
            );
            None
        }
        Some(v) => Some(v.clone()),
    };
    let entra_token = t
        .entra_token
        .as_deref()
        .and_then(|k| ctx.secret(k, &entra_path));
    match (t.api_key.is_some(), t.entra_token.is_some()) {
        (true, true) => ctx.err(
            &entra_path,
            "give either `apiKey` (sent as `api-key`) or `entraToken` (sent as a Bearer token), not both",
        ),
        (false, false) => ctx.err(
            &join_key(path, "apiKey"),
            "an azure target needs `apiKey` (sent as `api-key`) or `entraToken` (a Microsoft Entra ID token)",
        ),
        _ => {}
    }
    (api_version, entra_token)
}

/// `YYYY-MM-DD` or `YYYY-MM-DD-preview` (checked loosely: digits and dashes in place).
fn api_version_ok(v: &str) -> bool {
    let date = v.strip_suffix("-preview").unwrap_or(v).as_bytes();
    date.len() == 10
        && date.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// At most this many `headers` on one target.
pub const MAX_TARGET_HEADERS: usize = 32;
/// The longest `headers` value (after `env:` is resolved).
pub const MAX_TARGET_HEADER_VALUE_BYTES: usize = 8 * 1024;

/// Header names a target's `headers` must not set: what the gateway itself sets for auth, framing
/// and signing (credentials, `host`, the body's length and type, hop-by-hop headers, SigV4's
/// `x-amz-*`, Anthropic's version). Matched ASCII case-insensitively; `x-amz-` as a prefix.
pub const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "api-key",
    "x-api-key",
    "x-goog-api-key",
    "anthropic-version",
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

fn reserved_header(name: &str) -> bool {
    RESERVED_HEADERS.contains(&name) || name.starts_with("x-amz-")
}

/// An RFC 9110 token (`tchar`s only, at least one).
fn header_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `headers:` — names checked and lower-cased, values resolved like `apiKey` (`env:NAME`).
fn headers(
    ctx: &mut Ctx<'_>,
    raw: Option<&std::collections::BTreeMap<String, String>>,
    path: &str,
) -> Vec<(String, Secret)> {
    let Some(raw) = raw else { return Vec::new() };
    let headers_path = join_key(path, "headers");
    if raw.len() > MAX_TARGET_HEADERS {
        ctx.err(
            &headers_path,
            format!(
                "{} headers; at most {MAX_TARGET_HEADERS} are allowed",
                raw.len()
            ),
        );
    }
    let mut out: Vec<(String, Secret)> = Vec::with_capacity(raw.len());
    for (name, written) in raw {
        let at = join_key(&headers_path, name);
        let lower = name.to_ascii_lowercase();
        if !header_token(name) {
            ctx.err(
                &at,
                format!("`{name}` is not a valid header name (RFC 9110 token characters only)"),
            );
            continue;
        }
        if reserved_header(&lower) {
            ctx.err(
                &at,
                format!("`{name}` is set by the gateway itself and cannot be configured (reserved: {}, x-amz-*)", RESERVED_HEADERS.join(", ")),
            );
            continue;
        }
        if out.iter().any(|(n, _)| *n == lower) {
            ctx.err(
                &at,
                format!("header `{name}` is given twice (names are case-insensitive)"),
            );
            continue;
        }
        let Some(value) = ctx.secret(written, &at) else {
            continue;
        };
        let v = value.expose();
        if v.len() > MAX_TARGET_HEADER_VALUE_BYTES {
            ctx.err(
                &at,
                format!(
                    "value is {} bytes; at most {MAX_TARGET_HEADER_VALUE_BYTES} are allowed",
                    v.len()
                ),
            );
            continue;
        }
        if v.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            // Never echo the value: it may be a secret.
            ctx.err(
                &at,
                "value holds a control character (CR, LF, NUL, ...) and cannot be a header value",
            );
            continue;
        }
        out.push((lower, value));
    }
    out
}

/// A vertex target's `project`, `region` and exactly one of `credentials` / `accessToken`.
fn vertex(ctx: &mut Ctx<'_>, t: &RawTarget, path: &str) -> (Option<String>, Option<VertexAuth>) {
    if t.region.is_none() {
        ctx.err(
            &join_key(path, "region"),
            "a vertex target needs `region` (e.g. us-east5, or global)",
        );
    }
    if t.api_key.is_some() {
        ctx.err(
            &join_key(path, "apiKey"),
            "a vertex target authenticates with `credentials` or `accessToken`, not `apiKey`",
        );
    }
    let project_path = join_key(path, "project");
    let project = match &t.project {
        None => {
            ctx.err(&project_path, "a vertex target needs `project`");
            None
        }
        Some(p) => {
            let ok = !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':');
            if !ok {
                ctx.err(
                    &project_path,
                    format!("`{p}` is not a Google Cloud project id"),
                );
            }
            Some(p.clone())
        }
    };
    let auth = match (&t.credentials, &t.access_token) {
        (Some(_), Some(_)) => {
            ctx.err(
                &join_key(path, "accessToken"),
                "give `credentials` or `accessToken`, not both",
            );
            None
        }
        (None, None) => {
            ctx.err(
                &join_key(path, "credentials"),
                "a vertex target needs `credentials: env:NAME` (a service-account JSON file's path) or `accessToken: env:NAME`",
            );
            None
        }
        (None, Some(token)) => ctx
            .secret(token, &join_key(path, "accessToken"))
            .map(VertexAuth::AccessToken),
        (Some(written), None) => {
            let at = join_key(path, "credentials");
            match ctx.secret(written, &at) {
                // `check --offline` with the variable unset: nothing to read.
                Some(file) if file.expose().is_empty() => None,
                Some(file) => match service_account(file.expose()) {
                    Ok(sa) => Some(VertexAuth::ServiceAccount(sa)),
                    Err(e) => {
                        ctx.err(&at, e);
                        None
                    }
                },
                None => None,
            }
        }
    };
    (project, auth)
}

/// Reads and checks a service-account JSON file. Messages name the file and the field, never a
/// value from it.
pub(crate) fn service_account(file: &str) -> Result<ServiceAccount, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read the service-account file `{file}`: {e}"))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        format!(
            "the service-account file `{file}` is not JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let field = |name: &str| -> Result<String, String> {
        match json.get(name).and_then(|v| v.as_str()) {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(format!(
                "the service-account file `{file}` has no `{name}` string"
            )),
        }
    };
    let kind = field("type")?;
    if kind != "service_account" {
        return Err(format!(
            "the file `{file}` is not a service-account key (`type` is `{kind}`, expected `service_account`)"
        ));
    }
    let client_email = field("client_email")?;
    let token_uri = field("token_uri")?;
    if !(token_uri.starts_with("https://") || token_uri.starts_with("http://")) {
        return Err(format!(
            "the service-account file `{file}`: `token_uri` is not an http(s) URL"
        ));
    }
    let private_key = field("private_key")?;
    if pkcs8_pem_body(&private_key).is_none() {
        return Err(format!(
            "the service-account file `{file}`: `private_key` is not a PKCS#8 PEM private key"
        ));
    }
    Ok(ServiceAccount {
        file: file.to_string(),
        client_email,
        private_key: Secret(private_key),
        token_uri,
    })
}

/// The base64 body of a `-----BEGIN PRIVATE KEY-----` PEM block (whitespace removed), if it is one.
fn pkcs8_pem_body(pem: &str) -> Option<String> {
    let start = pem.find(PEM_BEGIN)? + PEM_BEGIN.len();
    let end = pem[start..].find(PEM_END)? + start;
    let body: String = pem[start..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let base64 = body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=');
    (base64 && !body.is_empty()).then_some(body)
}

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

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
