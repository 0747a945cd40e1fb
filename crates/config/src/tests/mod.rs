//! Whole-config tests: the SPEC §4 example, the AgentCore JSON example, defaults, redaction, the
//! public entry points. Per-rule validation tests live in `validation.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod validation;

use std::path::PathBuf;
use std::time::Duration;

use sidetrack_resilience::{ErrorKind, StatusMatcher};

use crate::*;

const SPEC_EXAMPLE: &str = include_str!("../../tests/fixtures/spec-example.yaml");
const AGENTCORE_JSON: &str = include_str!("../../../../examples/agentcore-rule.json");

/// The test environment: secrets resolve here, never through the process environment.
pub(super) fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-openai-secret".into()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-secret".into()),
        "TEAM_A_KEY" => Some("team-a-secret".into()),
        "SIDETRACK_ADMIN_TOKEN" => Some("admin-secret".into()),
        "EMPTY_VAR" => Some(String::new()),
        _ => None,
    }
}

pub(super) fn load(src: &str) -> Result<Config, ConfigErrors> {
    load_str_with_env(src, "t.yaml", &env)
}

/// Every error of `src`, rendered as `check` prints them.
pub(super) fn errors(src: &str) -> Vec<String> {
    match load(src) {
        Ok(_) => panic!("expected errors, the config loaded"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

/// The single error of `src`.
pub(super) fn one_error(src: &str) -> String {
    let e = errors(src);
    assert_eq!(e.len(), 1, "expected exactly one error, got {e:#?}");
    e.into_iter().next().unwrap()
}

#[test]
fn spec_example_loads_with_every_value() {
    let c = load(SPEC_EXAMPLE).unwrap();
    assert_eq!(c.source, "t.yaml");

    let s = &c.server;
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.admin.to_string(), "127.0.0.1:9090");
    let tls = s.tls.as_ref().unwrap();
    assert_eq!(tls.cert_file, PathBuf::from("cert.pem"));
    assert_eq!(tls.key_file, PathBuf::from("key.pem"));
    assert_eq!(s.max_request_bytes, 33_554_432);
    assert_eq!(s.request_timeout, Duration::from_millis(900_000));
    assert_eq!(s.shutdown_grace, Duration::from_millis(30_000));
    assert!(s.response_headers);
    assert_eq!(s.caller_retry_hint, CallerRetryHint::Auto);
    assert_eq!(s.stream_commit, StreamCommit::FirstToken);
    assert!(!s.watch_config);
    assert_eq!(s.admin_token.as_ref().unwrap().expose(), "admin-secret");

    let keys = &c.auth.as_ref().unwrap().keys;
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].principal, "team-a");
    assert!(matches!(&keys[0].key, KeyMatch::Plain(s) if s.expose() == "team-a-secret"));
    assert_eq!(
        keys[0].models.as_deref(),
        Some(&["gpt-*".to_string(), "claude-*".to_string()][..])
    );
    let limits = keys[0].limits.unwrap();
    assert_eq!(limits.requests_per_minute, Some(600));
    assert_eq!(limits.tokens_per_minute, Some(200_000));

    let redis = c.state.as_ref().unwrap().redis.as_ref().unwrap();
    assert_eq!(redis.url, "redis://127.0.0.1:6379/0");
    assert_eq!(redis.key_prefix, "sidetrack:");

    assert_eq!(c.targets.len(), 3);
    let openai = c.target("openai-main").unwrap();
    assert_eq!(openai.provider, ProviderKind::OpenAi);
    assert_eq!(openai.base_url, "https://api.openai.com/v1");
    assert_eq!(
        openai.api_key.as_ref().unwrap().expose(),
        "sk-openai-secret"
    );
    assert_eq!(openai.models, vec!["gpt-4.1*", "gpt-4o-mini"]);
    assert_eq!(openai.connect_timeout, Duration::from_millis(5000));
    assert_eq!(
        openai.capabilities,
        Capabilities {
            tools: Some(true),
            json_schema: Some(true),
            context_window: Some(128_000)
        }
    );
    let bedrock = c.target("bedrock-east").unwrap();
    assert_eq!(bedrock.provider, ProviderKind::Bedrock);
    assert_eq!(
        bedrock.base_url,
        "https://bedrock-runtime.us-east-1.amazonaws.com"
    );
    assert_eq!(bedrock.region.as_deref(), Some("us-east-1"));
    assert!(bedrock.api_key.is_none());
    assert_eq!(bedrock.capabilities, Capabilities::default());

    // `defaults.circuitBreaker` writes every knob but the two nulls.
    let written = vec![
        "consecutiveFailures",
        "openMilliseconds",
        "maxOpenMilliseconds",
        "backoffMultiplier",
        "halfOpenProbes",
        "honorRetryAfter",
        "restoreHealth",
    ];
    assert_eq!(c.defaults.circuit_breaker.overridden, written);
    assert_eq!(c.defaults.circuit_breaker.settings.health_threshold, None);
    assert_eq!(openai.circuit_breaker.settings.consecutive_failures, 5);

    // Rules come sorted by priority and remember their index in the file.
    let names: Vec<_> = c
        .rules
        .iter()
        .map(|r| (r.name.as_str(), r.priority, r.index))
        .collect();
    assert_eq!(
        names,
        vec![
            ("chat-resilient", 100, 0),
            ("cheap-tiers", 200, 1),
            ("canary", 300, 2)
        ]
    );

    let chat = &c.rules[0];
    let mm = chat.match_models.as_ref().unwrap();
    assert_eq!(
        (mm.operator, mm.values.clone()),
        (MatchOperator::StringLike, vec!["gpt-4.1*".into()])
    );
    let mp = chat.match_principals.as_ref().unwrap();
    assert_eq!(
        (mp.operator, mp.values.clone()),
        (MatchOperator::StringEquals, vec!["team-a".into()])
    );
    let Route::Static(r) = &chat.route else {
        panic!("static route expected")
    };
    assert_eq!(
        r.primary,
        DestinationRef {
            target: "openai-main".into(),
            model: Some("gpt-4.1".into())
        }
    );
    assert!(!r.primary_policy.triggers.is_default());
    assert_eq!(
        r.primary_policy.triggers.statuses(),
        &[StatusMatcher::Exact(429), StatusMatcher::Class(5)]
    );
    assert_eq!(
        r.primary_policy.triggers.errors(),
        [
            ErrorKind::ConnectionError,
            ErrorKind::FirstByteTimeout,
            ErrorKind::Unroutable
        ]
    );
    assert_eq!(
        r.primary_policy.first_byte_timeout,
        Some(Duration::from_millis(5000))
    );
    assert_eq!(r.breaker_mode, BreakerMode::Enabled);
    assert_eq!(r.fallbacks.len(), 2);
    let hop1 = &r.fallbacks[0];
    assert_eq!(hop1.destination.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(
        hop1.policy.triggers.errors(),
        vec![ErrorKind::ConnectionError, ErrorKind::FirstByteTimeout]
    );
    assert_eq!(
        hop1.policy.first_byte_timeout,
        Some(Duration::from_millis(8000))
    );
    // Nothing is inherited: hop 2 has the default triggers and no first-byte timeout.
    let hop2 = &r.fallbacks[1];
    assert_eq!(hop2.destination.target, "bedrock-east");
    assert!(hop2.policy.triggers.is_default());
    assert_eq!(hop2.policy.first_byte_timeout, None);

    let Route::PriorityGroups(groups) = &c.rules[1].route else {
        panic!("groups expected")
    };
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0].destinations.len(), 2);
    assert_eq!(groups[0].policy.triggers.statuses().len(), 2);
    assert!(groups[0].policy.triggers.errors().is_empty());
    assert!(groups[1].policy.triggers.is_default());

    let Route::Weighted(w) = &c.rules[2].route else {
        panic!("weighted expected")
    };
    assert_eq!(
        w.legs.iter().map(|l| l.weight).collect::<Vec<_>>(),
        vec![90, 10]
    );
    assert_eq!(w.legs[0].route.fallbacks.len(), 1);
    assert!(w.legs[0].route.primary_policy.triggers.is_default());
    assert!(w.legs[1].route.fallbacks.is_empty());
    assert_eq!(w.stickiness_header.as_deref(), Some("x-session-id"));

    assert_eq!(c.logging.level, "info");
    assert_eq!(c.logging.routing, RoutingSink::Stdout);
    assert_eq!(
        c.logging.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
}

#[test]
fn agentcore_rule_json_loads() {
    let c = load_str_with_env(AGENTCORE_JSON, "agentcore-rule.json", &env).unwrap();
    assert_eq!(c.rules.len(), 1);
    let rule = &c.rules[0];
    assert_eq!(rule.name, "chat-resilient");
    let mm = rule.match_models.as_ref().unwrap();
    assert_eq!(mm.operator, MatchOperator::StringLike);
    let Route::Static(r) = &rule.route else {
        panic!("static route expected")
    };
    assert_eq!(r.primary.target, "openai-main");
    assert_eq!(r.breaker_mode, BreakerMode::Enabled);
    assert_eq!(
        r.primary_policy.first_byte_timeout,
        Some(Duration::from_millis(5000))
    );
    assert_eq!(r.fallbacks.len(), 2);
    assert_eq!(
        r.fallbacks[0].policy.triggers.errors(),
        vec![ErrorKind::ConnectionError]
    );
}

#[test]
fn agentcore_json_errors_are_located_too() {
    let src = AGENTCORE_JSON.replace("\"claude-sonnet-4-5\"", "\"\"");
    let e = load_str_with_env(&src, "a.json", &env).unwrap_err();
    assert_eq!(
        e.to_string(),
        "a.json:45:24: rules[0].routeToTarget.fallback.targetFallback[0].model: must not be \
         blank; omit `model` to send the caller's model"
    );
}

#[test]
fn the_same_config_as_yaml_and_json_is_equal() {
    let yaml = "targets:\n  - name: a\n    provider: openai\nrules:\n  - priority: 5\n    \
                routeToTarget:\n      staticRoute: { target: a }\n";
    let json = r#"{"targets":[{"name":"a","provider":"openai"}],
                   "rules":[{"priority":5,"routeToTarget":{"staticRoute":{"target":"a"}}}]}"#;
    let a = load(yaml).unwrap().redacted_json();
    let b = load(json).unwrap().redacted_json();
    assert_eq!(a, b);
}

#[test]
fn minimal_config_gets_every_default() {
    let c = load("targets:\n  - name: a\n    provider: openai\n").unwrap();
    let s = &c.server;
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.admin.to_string(), "127.0.0.1:9090");
    assert!(s.tls.is_none());
    assert_eq!(s.max_request_bytes, 32 * 1024 * 1024);
    assert_eq!(s.request_timeout, Duration::from_secs(15 * 60));
    assert_eq!(s.shutdown_grace, Duration::from_secs(30));
    assert!(s.response_headers);
    assert_eq!(s.caller_retry_hint, CallerRetryHint::Auto);
    assert_eq!(s.stream_commit, StreamCommit::FirstToken);
    assert!(!s.watch_config);
    assert!(s.admin_token.is_none());
    assert!(c.auth.is_none());
    assert!(c.state.is_none());
    assert!(c.rules.is_empty());
    let t = &c.targets[0];
    assert_eq!(t.base_url, "https://api.openai.com/v1");
    assert!(t.models.is_empty());
    assert_eq!(t.connect_timeout, Duration::from_secs(5));
    assert_eq!(t.circuit_breaker, BreakerPolicy::default());
    assert_eq!(c.defaults.circuit_breaker, BreakerPolicy::default());
    assert_eq!(c.logging.level, "info");
    assert_eq!(c.logging.routing, RoutingSink::Stdout);
    assert!(c.logging.otlp_endpoint.is_none());
}

#[test]
fn built_in_breaker_defaults_match_spec() {
    let b = BreakerPolicy::default();
    assert_eq!(b.settings.consecutive_failures, 5);
    assert_eq!(b.settings.open, Duration::from_secs(30));
    assert_eq!(b.settings.max_open, Duration::from_secs(300));
    assert_eq!(b.settings.backoff_multiplier, 2.0);
    assert_eq!(b.settings.half_open_probes, 3);
    assert!(b.settings.honor_retry_after);
    assert_eq!(b.settings.health_threshold, None);
    assert_eq!(b.settings.restore_health, 100.0);
    assert!(b.overridden.is_empty());
}

#[test]
fn breaker_layers_merge_and_record_what_was_written() {
    let src = "\
defaults:
  circuitBreaker: { openMilliseconds: 10000, healthThreshold: 40 }
targets:
  - name: a
    provider: openai
    circuitBreaker: { consecutiveFailures: 2, restoreHealth: 80 }
  - name: b
    provider: openai
";
    let c = load(src).unwrap();
    let d = &c.defaults.circuit_breaker;
    assert_eq!(d.settings.open, Duration::from_secs(10));
    assert_eq!(d.overridden, vec!["openMilliseconds", "healthThreshold"]);
    let a = &c.targets[0].circuit_breaker;
    assert_eq!(a.settings.consecutive_failures, 2);
    assert_eq!(
        a.settings.open,
        Duration::from_secs(10),
        "inherited from defaults"
    );
    assert_eq!(a.settings.health_threshold, Some(40.0));
    assert_eq!(a.settings.restore_health, 80.0);
    assert_eq!(
        a.settings.max_open,
        Duration::from_secs(300),
        "built-in default"
    );
    assert_eq!(
        a.overridden,
        vec![
            "consecutiveFailures",
            "openMilliseconds",
            "healthThreshold",
            "restoreHealth"
        ]
    );
    assert_eq!(&c.targets[1].circuit_breaker, d);
}

#[test]
fn redacted_json_hides_every_secret() {
    let src = SPEC_EXAMPLE.replace(
        "redis://127.0.0.1:6379/0",
        "redis://user:redis-secret@127.0.0.1:6379/0",
    );
    let c = load(&src).unwrap();
    let v = c.redacted_json();
    let text = v.to_string();
    for secret in [
        "sk-openai-secret",
        "sk-ant-secret",
        "team-a-secret",
        "admin-secret",
        "redis-secret",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert_eq!(v["server"]["adminToken"], "***");
    assert_eq!(v["auth"]["keys"][0]["key"], "***");
    assert_eq!(v["targets"][0]["apiKey"], "***");
    assert_eq!(v["targets"][2]["apiKey"], serde_json::Value::Null);
    assert_eq!(
        v["state"]["redis"]["url"],
        "redis://user:***@127.0.0.1:6379/0"
    );
    // The effective values are there, in the config's own names.
    assert_eq!(
        v["targets"][2]["baseUrl"],
        "https://bedrock-runtime.us-east-1.amazonaws.com"
    );
    assert_eq!(
        v["rules"][0]["routeToTarget"]["staticRoute"]["target"],
        "openai-main"
    );
    let fb = &v["rules"][0]["routeToTarget"]["fallback"];
    assert_eq!(fb["targetFallback"][1]["triggerOn"]["default"], true);
    assert_eq!(
        fb["targetFallback"][1]["firstByteTimeoutMilliseconds"],
        serde_json::Value::Null
    );
    assert_eq!(v["server"]["requestTimeoutMilliseconds"], 900_000);
    // Debug never prints a secret either.
    assert!(!format!("{c:?}").contains("sk-openai-secret"));
}

/// `GET /admin/config` shows the retry controller's keys (SPEC §11), effective and defaulted.
#[test]
fn redacted_json_shows_the_retry_controllers_keys() {
    let src = "server: { callerDeadline: false }\n\
               defaults: { maxAttempts: 5, retryBudget: { ratio: 0.5 } }\n\
               targets: [ { name: a, provider: openai }, { name: b, provider: openai } ]\n\
               rules:\n  - priority: 1\n    routeToTarget:\n      staticRoute: { target: a }\n      \
               fallback:\n        triggerOn: { errors: [CONTEXT_LENGTH_EXCEEDED, FIRST_TOKEN_TIMEOUT] }\n        \
               firstTokenTimeoutMilliseconds: 8000\n        streamIdleTimeoutMilliseconds: 30000\n        \
               retry: { attempts: 2, on: { statusCodes: [\"429\"], errors: [CONNECTION_ERROR] } }\n        \
               hedge: { afterMilliseconds: 1500 }\n        targetFallback: [ { target: b, retry: {} } ]\n";
    let v = load(src).unwrap().redacted_json();
    assert_eq!(v["server"]["callerDeadline"], false);
    assert_eq!(v["server"]["callerOverrides"], true);
    assert_eq!(v["defaults"]["maxAttempts"], 5);
    assert_eq!(
        v["defaults"]["retryBudget"],
        serde_json::json!({ "ratio": 0.5, "minPerSecond": 5.0 })
    );
    let fb = &v["rules"][0]["routeToTarget"]["fallback"];
    assert_eq!(
        fb["triggerOn"],
        serde_json::json!({
            "statusCodes": [],
            "errors": ["FIRST_TOKEN_TIMEOUT", "CONTEXT_LENGTH_EXCEEDED"],
            "default": false,
        })
    );
    assert_eq!(fb["firstTokenTimeoutMilliseconds"], 8000);
    assert_eq!(fb["streamIdleTimeoutMilliseconds"], 30000);
    assert_eq!(
        fb["retry"],
        serde_json::json!({
            "attempts": 2,
            "backoffMilliseconds": 100,
            "maxBackoffMilliseconds": 2000,
            "on": { "statusCodes": ["429"], "errors": ["CONNECTION_ERROR"] },
        })
    );
    assert_eq!(
        fb["hedge"],
        serde_json::json!({ "afterMilliseconds": 1500 })
    );
    let hop = &fb["targetFallback"][0];
    assert_eq!(hop["retry"]["on"], serde_json::Value::Null);
    assert_eq!(hop["hedge"], serde_json::Value::Null);
    assert_eq!(
        hop["firstTokenTimeoutMilliseconds"],
        serde_json::Value::Null
    );
}

#[test]
fn urls_are_shown_without_credentials() {
    for (url, shown) in [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        (
            "redis://user:pw@127.0.0.1:6379/0",
            "redis://user:***@127.0.0.1:6379/0",
        ),
        ("redis://:pw@127.0.0.1:6379", "redis://:***@127.0.0.1:6379"),
        ("https://ghp_token@host/x", "https://***@host/x"),
        ("https://a:b@c:d@host?e", "https://a:***@host?e"),
        (
            "https://h/v1?api-version=1&api_key=s1&X-Amz-Signature=s2&Access_Token=s3&pass=ok",
            "https://h/v1?api-version=1&api_key=***&X-Amz-Signature=***&Access_Token=***&pass=ok",
        ),
        (
            "http://h?PASSWORD=x&client_secret=y&credentials=z&sig=w#frag",
            "http://h?PASSWORD=***&client_secret=***&credentials=***&sig=***#frag",
        ),
        ("http://h?key", "http://h?key"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ] {
        assert_eq!(redact_url(url), shown, "{url}");
    }
    assert!(matches!(
        redact_url("https://h/v1?x=1"),
        std::borrow::Cow::Borrowed(_)
    ));
    assert!(url_has_user_info("http://u@h"));
    assert!(!url_has_user_info("http://h/@x"));
    assert!(!url_has_user_info("http://h?u=a@b"));
}

#[test]
fn redacted_json_hides_credentials_in_every_url() {
    let src = "\
state: { redis: { url: \"redis://:rpw@r:6379/0?password=rpw2\" } }
targets:
  - { name: a, provider: openai, baseUrl: \"https://h/v1?api_key=qs1&v=2\" }
logging: { otlpEndpoint: \"http://c:4318?token=qs2\" }
";
    let v = load(src).unwrap().redacted_json();
    let text = v.to_string();
    for secret in ["rpw", "qs1", "qs2"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert_eq!(v["targets"][0]["baseUrl"], "https://h/v1?api_key=***&v=2");
    assert_eq!(v["logging"]["otlpEndpoint"], "http://c:4318?token=***");
    assert_eq!(
        v["state"]["redis"]["url"],
        "redis://:***@r:6379/0?password=***"
    );
}

#[test]
fn sha256_keys_are_redacted_and_decoded() {
    let hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let src = format!(
        "auth:\n  keys:\n    - principal: p\n      key: sha256:{hex}\ntargets:\n  - name: a\n    provider: openai\n"
    );
    let c = load(&src).unwrap();
    let KeyMatch::Sha256(bytes) = &c.auth.as_ref().unwrap().keys[0].key else {
        panic!("sha256")
    };
    assert_eq!(bytes[0], 0x9f);
    assert_eq!(bytes[31], 0x08);
    assert_eq!(c.redacted_json()["auth"]["keys"][0]["key"], "sha256:***");
}

#[test]
fn literal_secrets_are_accepted() {
    let c = load("targets:\n  - name: a\n    provider: openai\n    apiKey: sk-literal\n").unwrap();
    assert_eq!(
        c.targets[0].api_key.as_ref().unwrap().expose(),
        "sk-literal"
    );
}

#[test]
fn load_file_reads_the_spec_example_and_reports_unreadable_files() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spec-example.yaml");
    let c = load_file_with_env(&path, &env).unwrap();
    assert_eq!(c.source, path.display().to_string());

    let missing = PathBuf::from("/definitely/not/here.yaml");
    let e = load_file(&missing).unwrap_err();
    assert_eq!(e.len(), 1);
    let text = e.to_string();
    assert!(
        text.starts_with("/definitely/not/here.yaml: cannot read the config file: "),
        "{text}"
    );
}

#[test]
fn load_str_uses_the_process_environment() {
    // PATH is set in every test process; a missing variable is reported by name.
    let ok = "targets:\n  - name: a\n    provider: openai\n    apiKey: env:PATH\n";
    assert!(load_str(ok, "p.yaml").is_ok());
    let bad = "targets:\n  - name: a\n    provider: openai\n    apiKey: env:SIDETRACK_TEST_SURELY_UNSET_1234\n";
    assert_eq!(
        load_str(bad, "p.yaml").unwrap_err().to_string(),
        "p.yaml:4:13: targets[0].apiKey: environment variable `SIDETRACK_TEST_SURELY_UNSET_1234` is not set"
    );
}

#[test]
fn from_yaml_str_is_generic_and_located() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Mock {
        listen: String,
        #[serde(default)]
        models: std::collections::BTreeMap<String, Behaviour>,
    }
    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Behaviour {
        status: Option<u16>,
        retry_after_seconds: Option<u64>,
    }
    let m: Mock = from_yaml_str(
        "listen: 127.0.0.1:9001\nmodels:\n  limited: { status: 429, retryAfterSeconds: 2 }\n",
        "mock.yaml",
    )
    .unwrap();
    assert_eq!(
        m.models["limited"],
        Behaviour {
            status: Some(429),
            retry_after_seconds: Some(2)
        }
    );

    let e = from_yaml_str::<Mock>(
        "listen: x\nmodels:\n  broken: { status: 500, colour: red }\n",
        "mock.yaml",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "mock.yaml:3:26: models.broken.colour: unknown key; expected `status` or `retryAfterSeconds`"
    );
}

#[test]
fn config_errors_display_one_per_line() {
    let e = ConfigErrors(vec![
        ConfigError {
            file: "f".into(),
            line: 1,
            column: 2,
            path: "a.b".into(),
            message: "x".into(),
        },
        ConfigError {
            file: "f".into(),
            line: 3,
            column: 4,
            path: String::new(),
            message: "y".into(),
        },
    ]);
    assert_eq!(e.to_string(), "f:1:2: a.b: x\nf:3:4: y");
    let _: &dyn std::error::Error = &e;
}

/// `check`'s warnings (seed 000's pitfalls), located like errors; a config with none has none.
#[test]
fn check_warns_about_seed_000_pitfalls_where_they_are_written() {
    let src = r#"targets:
  - { name: oa, provider: openai, baseUrl: "http://127.0.0.1:1/v1", models: ["gpt-*"] }
  - { name: cl, provider: anthropic, baseUrl: "http://127.0.0.1:1", apiKey: k, models: ["claude-*"] }
rules:
  - name: r
    priority: 1
    matchModels: ["x"]
    routeToTarget:
      staticRoute: { target: oa, model: gtp-4o }
      fallback:
        triggerOn: { statusCodes: ["429"], errors: [FIRST_BYTE_TIMEOUT] }
        targetFallback:
          - { target: cl, model: claude-sonnet-4-5 }
  - name: no-429
    priority: 2
    matchModels: ["y"]
    routeToTarget:
      staticRoute: { target: oa, model: gpt-4o }
      fallback:
        targetFallback:
          - { target: cl, model: claude-haiku-4-5 }
  - name: fine
    priority: 3
    matchModels: ["z"]
    routeToTarget:
      staticRoute: { target: oa, model: gpt-4o }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"], errors: [FIRST_BYTE_TIMEOUT] }
        firstByteTimeoutMilliseconds: 5000
        targetFallback:
          - { target: cl, model: claude-haiku-4-5 }
"#;
    let (_, warnings) = load_str_with_warnings(src, "w.yaml", &env).unwrap();
    let shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    let expect = [
        (
            "w.yaml:9:41: rules[0].routeToTarget.staticRoute.model: warning:",
            "does not list model `gtp-4o`",
        ),
        (
            "w.yaml:11:20: rules[0].routeToTarget.fallback.triggerOn: warning:",
            "does not list 5XX",
        ),
        (
            "w.yaml:11:52: rules[0].routeToTarget.fallback.triggerOn.errors: warning:",
            "FIRST_BYTE_TIMEOUT",
        ),
        (
            "w.yaml:18:7: rules[1].routeToTarget: warning:",
            "moves on for 429",
        ),
    ];
    assert_eq!(shown.len(), expect.len(), "{shown:#?}");
    for (got, (start, says)) in shown.iter().zip(expect) {
        assert!(got.starts_with(start) && got.contains(says), "{got}");
    }
    // The spec's own example: every pitfall avoided (its routes list 429 and 5XX, set timeouts).
    let (_, none) = load_str_with_warnings(SPEC_EXAMPLE, "s.yaml", &env).unwrap();
    let none: Vec<String> = none.iter().map(ToString::to_string).collect();
    assert!(
        none.iter().all(|w| !w.contains("FIRST_BYTE_TIMEOUT")),
        "{none:#?}"
    );
}

/// SPEC §11 keys that cannot act are warned where they are written: a hedge on the last hop,
/// retries that `defaults.maxAttempts` leaves no room for, a stream-timeout trigger without its
/// timeout. The same keys where they can act are not warned.
#[test]
fn check_warns_about_retry_controller_keys_that_cannot_act() {
    let src = r#"defaults: { maxAttempts: 3 }
targets:
  - { name: a, provider: openai }
  - { name: b, provider: openai }
rules:
  - priority: 1
    routeToTarget:
      staticRoute: { target: a }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"] }
        retry: { attempts: 2 }
        hedge: { afterMilliseconds: 100 }
        targetFallback:
          - target: b
            retry: { attempts: 2 }
            hedge: { afterMilliseconds: 100 }
  - priority: 2
    routeToTarget:
      priorityGroups:
        - destinations: [ { target: a, model: x }, { target: b, model: x } ]
        - destinations: [ { target: a, model: y } ]
          retry: { attempts: 1 }
          triggerOn: { statusCodes: ["429", "5XX"], errors: [FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT] }
          streamIdleTimeoutMilliseconds: 1000
"#;
    let (_, warnings) = load_str_with_warnings(src, "r.yaml", &env).unwrap();
    let shown: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        vec![
            "r.yaml:15:32: rules[0].routeToTarget.fallback.targetFallback[0].retry.attempts: \
             warning: 2 retries are set but defaults.maxAttempts (3) leaves room for 1 of them \
             after the 1 attempt(s) of the hops before it (maxAttempts counts every attempt of a \
             request: hops, retries and hedges)",
            "r.yaml:16:20: rules[0].routeToTarget.fallback.targetFallback[0].hedge: warning: \
             hedge is set on the last hop of this route: there is no next hop to start, so it \
             never fires",
            "r.yaml:22:30: rules[1].routeToTarget.priorityGroups[1].retry.attempts: warning: 1 \
             retries are set but defaults.maxAttempts (3) leaves room for 0 of them after the 2 \
             attempt(s) of the hops before it (maxAttempts counts every attempt of a request: \
             hops, retries and hedges)",
            "r.yaml:23:61: rules[1].routeToTarget.priorityGroups[1].triggerOn.errors: warning: \
             FIRST_TOKEN_TIMEOUT is listed but this hop sets no firstTokenTimeoutMilliseconds \
             (nothing is inherited): it never fires",
        ]
    );
}

/// An `unhealthyCondition` that counts what a hop's triggers keep (issue 14 must-show 5): warned
/// at the hop that keeps it, naming the codes and where the condition is written; the last hop
/// (nothing to move on to) and a hop that falls back on everything counted are not warned.
#[test]
fn check_warns_when_unhealthy_condition_counts_what_the_triggers_keep() {
    let src = r#"defaults:
  circuitBreaker: { unhealthyCondition: "response.code == 429 || response.code >= 500" }
targets:
  - name: oa
    provider: openai
    baseUrl: "http://127.0.0.1:1/v1"
    circuitBreaker:
      unhealthyCondition: "response.code == 429 || response.code >= 500 || error == 'CONNECTION_ERROR'"
  - { name: cl, provider: anthropic, baseUrl: "http://127.0.0.1:1", apiKey: k }
rules:
  - name: keeps-429
    priority: 1
    routeToTarget:
      staticRoute: { target: oa, model: m1 }
      fallback:
        triggerOn: { statusCodes: ["5XX", "408"] }
        targetFallback:
          - { target: cl, model: m2, triggerOn: { statusCodes: ["5XX"] } }
  - name: default-triggers
    priority: 2
    routeToTarget:
      staticRoute: { target: cl, model: m3 }
      fallback:
        targetFallback:
          - { target: oa, model: m4 }
  - name: all-covered
    priority: 3
    routeToTarget:
      staticRoute: { target: cl, model: m5 }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"] }
        targetFallback:
          - { target: oa, model: m6 }
"#;
    let (_, warnings) = load_str_with_warnings(src, "u.yaml", &env).unwrap();
    let shown: Vec<String> = warnings
        .iter()
        .map(ToString::to_string)
        .filter(|w| w.contains("unhealthyCondition"))
        .collect();
    assert_eq!(shown.len(), 2, "{shown:#?}");
    // The primary of rule 0: the target's own condition counts 429 and CONNECTION_ERROR, which
    // its triggerOn (5XX, 408) does not list. Its fallback hop is last and not warned.
    assert!(
        shown[0].starts_with("u.yaml:16:20: rules[0].routeToTarget.fallback.triggerOn: warning:"),
        "{}",
        shown[0]
    );
    assert!(
        shown[0].contains("`oa`'s unhealthyCondition (targets[0].circuitBreaker.unhealthyCondition) counts 429, CONNECTION_ERROR"),
        "{}",
        shown[0]
    );
    assert!(shown[0].contains("goes back to the caller"), "{}", shown[0]);
    // Rule 1's primary uses the defaults' condition and the default triggers (no 429).
    assert!(
        shown[1].starts_with("u.yaml:24:9: rules[1].routeToTarget.fallback: warning:"),
        "{}",
        shown[1]
    );
    assert!(
        shown[1].contains("(defaults.circuitBreaker.unhealthyCondition) counts 429 ")
            && shown[1].contains("the default set"),
        "{}",
        shown[1]
    );
}

#[test]
fn code_ranges_print_runs_and_classes() {
    assert_eq!(crate::lint::code_ranges(&[429]), ["429"]);
    let five: Vec<u16> = (500..=599).collect();
    assert_eq!(crate::lint::code_ranges(&five), ["5XX"]);
    let mut mixed: Vec<u16> = vec![408, 409, 410];
    mixed.extend(429..=599);
    assert_eq!(
        crate::lint::code_ranges(&mixed),
        ["408-410", "429-499", "5XX"]
    );
}

const RULE_BASE: &str = r#"targets:
  - { name: oa, provider: openai, baseUrl: "http://127.0.0.1:1/v1", apiKey: env:NOT_SET_ANYWHERE }
  - { name: cl, provider: anthropic, baseUrl: "http://127.0.0.1:1", apiKey: k }
rules:
  - { name: base, priority: 10, matchModels: ["gpt-*"], routeToTarget: { staticRoute: { target: oa } } }
"#;

fn check_rule(rule: &str, offline: bool) -> Result<Checked, ConfigErrors> {
    check_str(
        RULE_BASE,
        "base.yaml",
        Some((rule, "rule.json")),
        &env,
        CheckOptions { offline },
    )
}

/// An AgentCore rule array maps onto our model: conditions' anyOf entries, principals' ARNs, a
/// weighted route's trafficSplit with per-leg fallbacks (`targetName` → `target`), `fallback`
/// beside `staticRoute`, `ruleId` as the name; the API's bookkeeping keys are ignored.
#[test]
fn agentcore_rule_bodies_map_onto_rules() {
    let rules = r#"[
  { "ruleId": "r-1", "priority": 20, "status": "ACTIVE", "description": "d",
    "conditions": [
      { "matchModels": { "anyOf": [ { "value": "claude-*" }, { "value": "sonnet*" } ] } },
      { "matchPrincipals": { "anyOf": [ { "iamPrincipal": { "arn": "team-a" } } ] } } ],
    "actions": [ { "routeToTarget": {
      "staticRoute": { "targetName": "cl", "model": "claude-sonnet-4-5" },
      "fallback": { "triggerOn": { "statusCodes": ["429", "5XX"] },
                    "targetFallback": [ { "targetName": "oa", "model": "gpt-4o", "firstByteTimeoutMilliseconds": 900 } ] } } } ] },
  { "priority": 30,
    "actions": [ { "routeToTarget": { "weightedRoute": { "trafficSplit": [
      { "name": "a", "weight": 90, "targetName": "oa", "model": "m1",
        "fallback": { "targetFallback": [ { "targetName": "cl", "model": "m2" } ] } },
      { "name": "b", "weight": 10, "targetName": "cl", "model": "m3" } ] } } } ] }
]"#;
    let checked = check_rule(rules, true).unwrap();
    let c = &checked.config;
    assert_eq!(c.rules.len(), 3);
    let r = &c.rules[1];
    assert_eq!((r.name.as_str(), r.priority, r.index), ("r-1", 20, 1));
    let m = r.match_models.as_ref().unwrap();
    assert_eq!(m.operator, MatchOperator::StringLike);
    assert_eq!(m.values, ["claude-*", "sonnet*"]);
    let p = r.match_principals.as_ref().unwrap();
    assert_eq!(p.operator, MatchOperator::StringEquals);
    assert_eq!(p.values, ["team-a"]);
    let Route::Static(s) = &r.route else {
        panic!("static route expected")
    };
    assert_eq!(s.primary.target, "cl");
    assert_eq!(s.fallbacks[0].destination.target, "oa");
    assert_eq!(
        s.fallbacks[0].policy.first_byte_timeout,
        Some(Duration::from_millis(900))
    );
    let Route::Weighted(w) = &c.rules[2].route else {
        panic!("weighted route expected")
    };
    assert_eq!(w.legs[0].weight, 90);
    assert_eq!(
        w.legs[0].route.fallbacks[0].destination.model.as_deref(),
        Some("m2")
    );
    assert_eq!(c.rules[2].name, "rule-30");
    // --offline: BASE's missing secret is a warning located in BASE.
    assert!(checked.warnings[0].to_string().starts_with(
        "base.yaml:2:77: targets[0].apiKey: warning: environment variable `NOT_SET_ANYWHERE`"
    ));
}

/// Shape problems of the AgentCore body are located in the rule file, all at once; so are
/// validation problems and warnings, with our paths turned back into the file's.
#[test]
fn agentcore_rule_problems_are_located_in_the_rule_file() {
    let bad = r#"{
  "priority": 10,
  "conditions": [ { "matchPaths": { "anyOf": ["/x/*"] } },
                  { "matchModels": { "anyOf": [ { "value": "a?" }, { "value": "b", "operator": "StringEquals" } ] } } ],
  "actions": [ { "configurationBundle": {} }, { "routeToTarget": { "staticRoute": { "model": "m" }, "extra": 1 } } ]
}"#;
    let shown: Vec<String> = check_rule(bad, true)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    let expect = [
        "rule.json:3:35: conditions[0].matchPaths: `matchPaths`",
        "rule.json:4:60: conditions[1].matchModels.anyOf[0].value: `?` wildcards",
        "rule.json:4:96: conditions[1].matchModels.anyOf[1].operator: `StringEquals` here but `StringLike`",
        "rule.json:5:41: actions[0].configurationBundle: configuration bundles",
        "rule.json:5:83: actions[1].routeToTarget.staticRoute: `targetName` is missing",
        "rule.json:5:101: actions[1].routeToTarget.extra: unknown key",
    ];
    assert_eq!(shown.len(), expect.len(), "{shown:#?}");
    for (got, want) in shown.iter().zip(expect) {
        assert!(got.starts_with(want), "{shown:#?}\n  wanted {want}");
    }
    // Valid shape, but a priority BASE already uses, and a pitfall (triggerOn without 5XX).
    let conflict = r#"{ "priority": 10, "actions": [ { "routeToTarget": { "staticRoute": {
    "targetName": "oa", "model": "m",
    "fallback": { "triggerOn": { "statusCodes": ["429"] }, "targetFallback": [ { "targetName": "cl" } ] } } } } ] }"#;
    let e = check_rule(conflict, true).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rule.json:1:15: priority: priority 10 is already used by base.yaml: rules[0]; priorities must be unique"
    );
    let ok = conflict.replace("\"priority\": 10", "\"priority\": 11");
    let checked = check_rule(&ok, true).unwrap();
    let rule_warnings: Vec<String> = checked
        .warnings_for_rule(1)
        .map(ToString::to_string)
        .collect();
    assert_eq!(rule_warnings.len(), 1, "{rule_warnings:#?}");
    assert!(
        rule_warnings[0].starts_with(
            "rule.json:3:32: actions[0].routeToTarget.staticRoute.fallback.triggerOn: warning: a written triggerOn"
        ),
        "{}",
        rule_warnings[0]
    );
    // Without --offline BASE's missing secret stays an error.
    assert!(check_rule(&ok, false)
        .unwrap_err()
        .to_string()
        .contains("`NOT_SET_ANYWHERE` is not set"));
}
