//! What crosses from an upstream to the caller (SPEC §14): which response headers, and what an
//! upstream error message may carry. The gateway's own credentials never reach a caller, an error
//! message is at most [`MAX_ERROR_MESSAGE`] bytes, and a `content-encoding` goes with a body only
//! while it still describes it.
//!
//! Everything here is off the success path except [`relayed`], a match on the header name.

use std::borrow::Cow;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_LENGTH};
use http::response::Parts;
use serde_json::Value;
use sidetrack_config::{Config, KeyMatch, ProviderKind};
use sidetrack_dialects::Dialect;

/// An upstream error message reaches the caller with at most this many bytes (SPEC §14).
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// What replaces one of the gateway's credentials in an upstream error.
pub const REDACTED: &str = "[redacted]";

/// Ends a message cut at [`MAX_ERROR_MESSAGE`] (counted inside the bound).
const TRUNCATED: &str = "…[truncated]";

/// Shorter values are not searched for: they would mangle every message and protect nothing a
/// guess could not find.
const MIN_SECRET_LEN: usize = 4;

/// Bedrock's upstream answer headers that describe the body's format.
static BEDROCK_CONTENT_TYPE: HeaderName = HeaderName::from_static("x-amzn-bedrock-content-type");
static AMZN_ERROR_TYPE: HeaderName = HeaderName::from_static("x-amzn-errortype");

/// Does the upstream response header `name` reach the caller? An allow-list (content type,
/// provider request ids, rate-limit and retry headers, Bedrock's `x-amzn-bedrock-*`): never
/// `Set-Cookie`, `Server`, hop-by-hop headers or anything not listed. `x-amzn-errortype` only for a
/// Bedrock caller (the answer is in its dialect); `content-encoding` and Bedrock's body content
/// type only when `unchanged_body` (the caller gets the upstream's bytes as they came).
pub fn relayed(name: &HeaderName, caller: Dialect, unchanged_body: bool) -> bool {
    let n = name.as_str();
    match n {
        "content-type"
        | "retry-after"
        | "retry-after-ms"
        | "x-request-id"
        | "request-id"
        | "x-amzn-requestid"
        | "x-amz-request-id"
        | "openai-processing-ms" => true,
        "content-encoding" | "x-amzn-bedrock-content-type" => unchanged_body,
        "x-amzn-errortype" => !caller.is_sse(),
        _ => {
            n.starts_with("x-ratelimit-")
                || n.starts_with("anthropic-ratelimit-")
                || n.starts_with("x-amzn-bedrock-")
        }
    }
}

/// Drops the headers that described a body the gateway has replaced (translated, re-rendered, or
/// made itself): its encoding, length and Bedrock content type.
pub fn body_rewritten(headers: &mut HeaderMap) {
    headers.remove(CONTENT_ENCODING);
    headers.remove(CONTENT_LENGTH);
    headers.remove(&BEDROCK_CONTENT_TYPE);
}

/// The gateway's own credentials, gathered once per loaded config (the `Runtime`): every target's
/// `apiKey`, `entraToken` and `headers` values, the AWS credentials Bedrock targets use (from the environment), `server.adminToken`,
/// the plain `auth.keys`, and a Redis password. Upstream error messages are searched for them.
#[derive(Default)]
pub struct Secrets {
    /// Each value, and its JSON-escaped spellings when they differ; longest first, so a secret
    /// that contains another is replaced whole.
    needles: Vec<Box<str>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.needles.len())
    }
}

impl Secrets {
    /// From a loaded config, reading AWS credentials from the process environment.
    pub fn of(config: &Config) -> Secrets {
        Secrets::with_env(config, &|k| std::env::var(k).ok())
    }

    /// [`Secrets::of`] with an injected environment lookup.
    pub fn with_env(config: &Config, env: &dyn Fn(&str) -> Option<String>) -> Secrets {
        let mut values: Vec<String> = Vec::new();
        values.extend(
            config
                .targets
                .iter()
                .flat_map(|t| {
                    t.api_key
                        .iter()
                        .chain(t.entra_token.iter())
                        .chain(t.headers.iter().map(|(_, v)| v))
                })
                .map(|k| k.expose().to_owned()),
        );
        values.extend(config.targets.iter().filter_map(|t| match &t.vertex_auth {
            Some(sidetrack_config::VertexAuth::AccessToken(k)) => Some(k.expose().to_owned()),
            _ => None,
        }));
        if config
            .targets
            .iter()
            .any(|t| t.provider == ProviderKind::Bedrock)
        {
            for var in [
                "AWS_BEARER_TOKEN_BEDROCK",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
            ] {
                values.extend(env(var));
            }
        }
        values.extend(
            config
                .server
                .admin_token
                .as_ref()
                .map(|t| t.expose().to_owned()),
        );
        if let Some(auth) = &config.auth {
            values.extend(auth.keys.iter().filter_map(|k| match &k.key {
                KeyMatch::Plain(s) => Some(s.expose().to_owned()),
                KeyMatch::Sha256(_) => None,
            }));
        }
        if let Some(redis) = config.state.as_ref().and_then(|s| s.redis.as_ref()) {
            values.extend(url_password(&redis.url).map(str::to_owned));
        }
        Secrets::from_values(values)
    }

    fn from_values(values: Vec<String>) -> Secrets {
        let mut needles: Vec<Box<str>> = Vec::new();
        for v in values.into_iter().filter(|v| v.len() >= MIN_SECRET_LEN) {
            // A JSON body may spell the value escaped (`\"`, `\\`, control characters, `\/`).
            let quoted = serde_json::to_string(&v).unwrap_or_default();
            let escaped = quoted.get(1..quoted.len() - 1).unwrap_or_default();
            for spelling in [escaped.to_owned(), escaped.replace('/', "\\/"), v] {
                if !needles.iter().any(|n| **n == *spelling) {
                    needles.push(spelling.into());
                }
            }
        }
        needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        Secrets { needles }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// Does `text` contain any of the credentials?
    pub fn found_in(&self, text: &[u8]) -> bool {
        self.needles.iter().any(|n| contains(text, n.as_bytes()))
    }

    /// `text` with every credential replaced by [`REDACTED`]; borrowed when there is none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for n in &self.needles {
            if contains(out.as_bytes(), n.as_bytes()) {
                out = Cow::Owned(out.replace(&**n, REDACTED));
            }
        }
        out
    }
}

/// Substring search: the needle's first byte is looked for, then the rest compared.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return false;
    };
    if hay.len() < needle.len() {
        return false;
    }
    let last_start = hay.len() - needle.len();
    let mut from = 0;
    while let Some(i) = hay[from..=last_start].iter().position(|&b| b == first) {
        let at = from + i;
        if hay[at + 1..at + needle.len()] == *rest {
            return true;
        }
        from = at + 1;
        if from > last_start {
            break;
        }
    }
    false
}

/// The password of a `scheme://user:password@host` URL.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo.split_once(':').map(|(_, p)| p)
}

/// `message` cut to [`MAX_ERROR_MESSAGE`] bytes (on a character boundary, marked as cut).
pub fn cap_message(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_ERROR_MESSAGE {
        return Cow::Borrowed(message);
    }
    let mut end = MAX_ERROR_MESSAGE - TRUNCATED.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{TRUNCATED}", &message[..end]))
}

/// An upstream error answer on its way to the caller, in the caller's dialect (passed through, or
/// already translated). Returns the body to send: `body` itself — not copied — when it is at most
/// [`MAX_ERROR_MESSAGE`] bytes and holds none of the gateway's credentials (the common case);
/// otherwise the same error with every string capped and every credential replaced by
/// [`REDACTED`] (status, type and shape kept). A body that is not JSON is re-rendered in the
/// caller's dialect from its text; one the gateway cannot read (a `content-encoding`) is replaced
/// by a message saying so. A rewritten body loses the headers that described the old one.
pub fn upstream_error(caller: Dialect, parts: &mut Parts, body: Bytes, secrets: &Secrets) -> Bytes {
    let encoded = parts
        .headers
        .get(CONTENT_ENCODING)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if !encoded && body.len() <= MAX_ERROR_MESSAGE && !secrets.found_in(&body) {
        return body;
    }
    let status = parts.status.as_u16();
    let rewritten = if encoded {
        let message = format!(
            "upstream error (status {status}); its body was sent with a content-encoding and is \
             not shown"
        );
        render(caller, parts, &message, b"")
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(mut v) => {
                if !scrub(&mut v, secrets) {
                    return body; // large, but no string over the bound and no credential
                }
                Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
            }
            Err(_) => {
                // Not JSON (a proxy's HTML page, plain text): its text becomes the message.
                let text = String::from_utf8_lossy(&body);
                let message = secrets.redact(text.trim()).into_owned();
                render(caller, parts, &cap_message(&message), &body)
            }
        }
    };
    // Belt and braces: a credential spelled in a way the scrub did not reach never goes out.
    let out = if secrets.found_in(&rewritten) {
        render(
            caller,
            parts,
            &format!("upstream error (status {status})"),
            b"",
        )
    } else {
        rewritten
    };
    body_rewritten(&mut parts.headers);
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// Bedrock's error type header of an answer (the type of a Bedrock error lives there).
fn error_type(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(&AMZN_ERROR_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// `message` as an upstream error in `caller`'s shape, with the answer's status and the type read
/// from `original` (or its status). The status stays the answer's.
fn render(caller: Dialect, parts: &mut Parts, message: &str, original: &[u8]) -> Bytes {
    let status = parts.status.as_u16();
    let (error_type, _) = caller.parse_error(status, error_type(parts), original);
    let r = caller.render_upstream_error(status, &error_type, message);
    for (k, v) in r.headers {
        if !parts.headers.contains_key(k) {
            if let Ok(v) = HeaderValue::from_str(&v) {
                parts.headers.insert(k, v);
            }
        }
    }
    r.body
}

/// Caps every string of an error body and redacts credentials in strings and keys. True when
/// anything changed.
fn scrub(v: &mut Value, secrets: &Secrets) -> bool {
    match v {
        Value::String(s) => {
            let redacted = secrets.redact(s);
            let capped = cap_message(&redacted);
            if capped.len() == s.len() && matches!(redacted, Cow::Borrowed(_)) {
                return false;
            }
            *s = capped.into_owned();
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| scrub(item, secrets) | changed),
        Value::Object(map) => {
            let mut changed = false;
            if map.keys().any(|k| secrets.found_in(k.as_bytes())) {
                let old = std::mem::take(map);
                for (k, item) in old {
                    map.insert(secrets.redact(&k).into_owned(), item);
                }
                changed = true;
            }
            map.values_mut()
                .fold(changed, |changed, item| scrub(item, secrets) | changed)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(values: &[&str]) -> Secrets {
        Secrets::from_values(values.iter().map(|v| (*v).to_owned()).collect())
    }

    fn parts(status: u16, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Response::builder().status(status);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_allow_list_keeps_ids_limits_and_retry_headers_only() {
        let d = Dialect::OpenAiChat;
        for name in [
            "content-type",
            "x-request-id",
            "request-id",
            "x-amzn-requestid",
            "x-amz-request-id",
            "openai-processing-ms",
            "x-ratelimit-remaining-requests",
            "anthropic-ratelimit-tokens-reset",
            "retry-after",
            "retry-after-ms",
            "x-amzn-bedrock-invocation-latency",
            "x-amzn-bedrock-output-token-count",
        ] {
            assert!(relayed(&HeaderName::from_static(name), d, false), "{name}");
        }
        for name in [
            "set-cookie",
            "server",
            "date",
            "x-internal-route",
            "openai-organization",
            "via",
            "connection",
            "transfer-encoding",
            "content-length",
            "keep-alive",
            "x-should-retry",
            "x-amzn-errortype",
            "content-encoding",
            "x-amzn-bedrock-content-type",
        ] {
            assert!(!relayed(&HeaderName::from_static(name), d, false), "{name}");
        }
        let encoding = HeaderName::from_static("content-encoding");
        assert!(relayed(&encoding, d, true), "unchanged bytes keep it");
        let error_type = HeaderName::from_static("x-amzn-errortype");
        assert!(relayed(&error_type, Dialect::BedrockConverse, false));
        assert!(relayed(&error_type, Dialect::BedrockInvoke, false));
    }

    #[test]
    fn secrets_are_found_and_replaced_longest_first() {
        let s = secrets(&["sk-abc123", "sk-abc1234567", "ab"]);
        assert!(s.found_in(b"key sk-abc123 was wrong"));
        assert!(!s.found_in(b"key sk-abc12 was wrong"));
        assert!(!s.found_in(b"ab ab ab"), "too short to be searched for");
        assert_eq!(s.redact("a sk-abc1234567 b"), "a [redacted] b");
        assert_eq!(s.redact("sk-abc123/sk-abc123"), "[redacted]/[redacted]");
        assert!(matches!(s.redact("nothing here"), Cow::Borrowed(_)));
        assert!(contains(b"xxabc", b"abc") && !contains(b"ab", b"abc"));
        assert!(contains(b"aaab", b"aab") && !contains(b"", b"a"));
    }

    #[test]
    fn json_escaped_spellings_of_a_secret_are_found_too() {
        let s = secrets(&["wJalr/K7MDENG+bPxRfi"]);
        assert!(s.found_in(br#"{"message":"bad wJalr\/K7MDENG+bPxRfi"}"#));
    }

    #[test]
    fn messages_are_capped_on_a_character_boundary() {
        assert!(matches!(cap_message("short"), Cow::Borrowed(_)));
        let long = "é".repeat(5000);
        let capped = cap_message(&long);
        assert!(capped.len() <= MAX_ERROR_MESSAGE, "{}", capped.len());
        assert!(capped.ends_with(TRUNCATED));
        assert!(capped.starts_with("éé"));
    }

    #[test]
    fn a_short_clean_error_body_is_passed_as_it_is() {
        let body = Bytes::from_static(br#"{"error":{"message":"nope","type":"x"}}"#);
        let mut p = parts(400, &[("content-type", "application/json")]);
        let out = upstream_error(
            Dialect::OpenAiChat,
            &mut p,
            body.clone(),
            &secrets(&["sk-1234"]),
        );
        assert_eq!(out.as_ptr(), body.as_ptr(), "not copied");
    }

    #[test]
    fn a_credential_in_a_same_dialect_error_is_redacted_and_the_rest_kept() {
        let body = Bytes::from(
            r#"{"error":{"message":"Incorrect API key provided: sk-gw-1234.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
        );
        let mut p = parts(401, &[("content-encoding", "identity")]);
        let out = upstream_error(Dialect::OpenAiChat, &mut p, body, &secrets(&["sk-gw-1234"]));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["error"]["message"],
            "Incorrect API key provided: [redacted]."
        );
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "invalid_api_key");
        assert!(p.headers.get("content-encoding").is_none());
    }

    #[test]
    fn a_long_message_is_capped_keeping_type_and_status() {
        let msg = "x".repeat(10 * 1024);
        let body =
            serde_json::json!({"type":"error","error":{"type":"overloaded_error","message":msg}});
        let mut p = parts(529, &[]);
        let out = upstream_error(
            Dialect::AnthropicMessages,
            &mut p,
            Bytes::from(body.to_string()),
            &Secrets::default(),
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["error"]["type"], "overloaded_error");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(
            m.len() <= MAX_ERROR_MESSAGE && m.starts_with("xxxx"),
            "{}",
            m.len()
        );
        assert_eq!(p.status, 529);
    }

    #[test]
    fn a_long_text_body_is_rendered_in_the_callers_dialect() {
        let mut p = parts(502, &[("content-type", "text/html")]);
        let html = format!("<html>{}sk-gw-1234</html>", "y".repeat(8000));
        let out = upstream_error(
            Dialect::BedrockConverse,
            &mut p,
            Bytes::from(html),
            &secrets(&["sk-gw-1234"]),
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        let m = v["message"].as_str().unwrap();
        assert!(
            m.len() <= MAX_ERROR_MESSAGE && m.starts_with("<html>yyy"),
            "{m}"
        );
        assert!(!m.contains("sk-gw-1234"));
        assert_eq!(p.status, 502);
        assert_eq!(p.headers["content-type"], "application/json");
        assert!(p.headers.contains_key("x-amzn-errortype"));
    }

    #[test]
    fn an_encoded_error_body_is_not_shown() {
        let mut p = parts(500, &[("content-encoding", "gzip")]);
        let out = upstream_error(
            Dialect::OpenAiChat,
            &mut p,
            Bytes::from_static(b"\x1f\x8b\x08garbage"),
            &Secrets::default(),
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("content-encoding"));
        assert!(p.headers.get("content-encoding").is_none());
    }

    #[test]
    fn secrets_come_from_every_credential_of_the_config() {
        let yaml = "\
server: { adminToken: admin-token-1 }
auth:
  keys:
    - { principal: a, key: caller-key-1 }
    - { principal: b, key: \"sha256:0000000000000000000000000000000000000000000000000000000000000000\" }
state: { redis: { url: \"redis://u:redis-pass-1@127.0.0.1:6379/0\" } }
targets:
  - { name: o, provider: openai, apiKey: sk-target-1 }
  - { name: b, provider: bedrock, region: us-east-1, headers: { x-tenant: header-value-1 } }
  - { name: z, provider: azure, baseUrl: \"https://r.openai.azure.com\", entraToken: entra-token-1, apiVersion: \"2024-10-21\" }
";
        let cfg = sidetrack_config::load_str(yaml, "t.yaml").unwrap();
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("AKIAEXAMPLE1".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("aws-secret-1".to_owned()),
            _ => None,
        };
        let s = Secrets::with_env(&cfg, &env);
        for v in [
            "admin-token-1",
            "caller-key-1",
            "redis-pass-1",
            "sk-target-1",
            "AKIAEXAMPLE1",
            "aws-secret-1",
            "header-value-1",
            "entra-token-1",
        ] {
            assert_eq!(s.redact(v), REDACTED, "{v}");
        }
    }
}
