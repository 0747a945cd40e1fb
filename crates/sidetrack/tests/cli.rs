//! The binary as a user runs it: `check` (must-show 11), `explain`, and `demo` (must-show 12).
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_sidetrack");

fn write(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sidetrack-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const BAD: &str = r#"targets:
  - name: a
    provider: openai
    baseUrl: http://127.0.0.1:9/v1
rules:
  - name: broken
    priority: 1
    routeToTarget:
      staticRoute: { target: a, model: m }
      fallback:
        triggerOn: { statusCodes: ["399"] }
        targetFallback:
          - { target: a, model: m }
          - { target: nowhere, model: x }
"#;

#[test]
fn check_prints_three_located_errors_and_exits_1() {
    let path = write("bad.yaml", BAD);
    let out = Command::new(BIN).arg("check").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let file = path.display().to_string();
    for l in &lines {
        assert!(l.starts_with(&format!("{file}:")), "{l}");
    }
    let find = |needle: &str| {
        lines
            .iter()
            .find(|l| l.contains(needle))
            .copied()
            .unwrap_or_else(|| panic!("no `{needle}` in {stdout}"))
    };
    // The status code: line 11, inside the flow sequence.
    let status = find("triggerOn.statusCodes[0]");
    assert!(status.starts_with(&format!("{file}:11:")), "{status}");
    assert!(status.contains("399"));
    // The repeated destination: line 13.
    let dup = find("targetFallback[0]");
    assert!(dup.starts_with(&format!("{file}:13:")), "{dup}");
    // The unknown target: line 14, pointing at `target`.
    let unknown = find("targetFallback[1].target");
    assert!(unknown.starts_with(&format!("{file}:14:")), "{unknown}");
    assert!(unknown.contains("nowhere"));
}

#[test]
fn check_accepts_the_shipped_examples() {
    for f in ["agentcore-rule.json", "openai-fallback.yaml", "full.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(f);
        let out = Command::new(BIN)
            .arg("check")
            .arg(&path)
            .env("OPENAI_API_KEY", "sk-test")
            .env("ANTHROPIC_API_KEY", "sk-ant-test")
            .env("BACKUP_API_KEY", "sk-test")
            .env("TEAM_A_KEY", "team-a-key")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{f}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn explain_marks_defaults_and_non_inheritance() {
    let path = write(
        "good.yaml",
        r#"targets:
  - { name: a, provider: openai, baseUrl: "http://127.0.0.1:9/v1", models: ["gpt-*"] }
  - { name: b, provider: openai, baseUrl: "http://127.0.0.1:9/v1", connectTimeoutMilliseconds: 800 }
rules:
  - name: chat
    priority: 10
    matchModels: ["gpt-*"]
    routeToTarget:
      staticRoute: { target: a }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"] }
        firstByteTimeoutMilliseconds: 2000
        targetFallback:
          - { target: b, model: backup }
"#,
    );
    let out = Command::new(BIN)
        .args(["explain", "--config"])
        .arg(&path)
        .args(["--model", "gpt-4o"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("RULE `chat`"), "{text}");
    assert!(text.contains("destination a/gpt-4o"), "{text}");
    assert!(
        text.contains("statusCodes [429, 5XX], errors []  [written"),
        "{text}"
    );
    assert!(
        text.contains("firstByteTimeoutMilliseconds: 2000  [written]"),
        "{text}"
    );
    assert!(text.contains("destination b/backup"), "{text}");
    assert!(text.contains("nothing is inherited"), "{text}");
    assert!(
        text.contains("firstByteTimeoutMilliseconds: none  [default"),
        "{text}"
    );
    assert!(
        text.contains("connectTimeoutMilliseconds: 800  [target setting]"),
        "{text}"
    );
    assert!(text.contains("consecutiveFailures 5*"), "{text}");
}

#[test]
fn demo_narrates_fallbacks_and_exits_cleanly_on_ctrl_c() {
    let mut child = Command::new(BIN)
        .args(["demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Watchdog: never let a hung demo hang the suite.
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    });
    let stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("until Ctrl-C") {
            break;
        }
    }
    assert!(seen.contains("servedByPrimary"), "{seen}");
    assert!(seen.contains("servedViaFallbackHop:1"), "{seen}");
    assert!(seen.contains("FIRST_BYTE_TIMEOUT"), "{seen}");
    assert!(seen.contains("CONNECTION_ERROR"), "{seen}");
    assert!(seen.contains("streamErrorEvent:overloaded_error"), "{seen}");
    assert!(seen.contains("chainExhausted"), "{seen}");
    assert!(seen.contains("x-should-retry: false"), "{seen}");
    // Breakers: opens, the primary is skipped with zero calls, then recovers through probes.
    assert!(seen.contains("consecutiveFailures=5"), "{seen}");
    assert!(seen.contains("(BREAKER_OPEN)"), "{seen}");
    assert!(seen.contains("calls that reached the primary: 0"), "{seen}");
    assert!(seen.contains("[breaker HALF_OPEN]"), "{seen}");
    assert!(
        seen.contains(
            "CLOSED, 0 consecutive failure(s) — last change: 3 half-open probes succeeded"
        ),
        "{seen}"
    );
    // The retry controller: a context-length fallback and a hedge.
    assert!(
        seen.contains("STATUS 400 CONTEXT_LENGTH_EXCEEDED"),
        "{seen}"
    );
    assert!(
        seen.contains("large-128k, reason `servedViaFallbackHop:1`"),
        "{seen}"
    );
    assert!(
        seen.contains("slow-model → CANCELLED (hedgeLost)"),
        "{seen}"
    );
    assert!(
        seen.contains("fast-model, reason `servedViaFallbackHop:1`"),
        "{seen}"
    );
    // The response store: answered normally, then from the store when everything is down, and a
    // novel question gets the walk's 503 with Retry-After.
    let store = &seen[seen.find("12. Rule `cached-answers`").expect(&seen)..];
    assert!(
        store.contains("faq-model, reason `servedByPrimary`"),
        "{store}"
    );
    assert!(
        store
            .contains("status 200 from the response store, reason `servedFromCache`, 2 attempt(s)"),
        "{store}"
    );
    assert!(
        store.contains("caller received: HTTP 200") && store.contains("x-sidetrack-cache: hit"),
        "{store}"
    );
    assert!(
        store.contains("status 503 from openai-backup/faq-backup, reason `chainExhausted`"),
        "{store}"
    );
    assert!(
        store.contains("caller received: HTTP 503 with Retry-After: 5"),
        "{store}"
    );
    // While serving: the background traffic runs, and the requests that did not go straight to
    // their primary are printed (the dead-host rule falls back within its first ten requests).
    let mut serving = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        serving.push_str(&line);
        serving.push('\n');
        if line.contains("model Some(\"legacy-chat\")") {
            break;
        }
    }
    assert!(
        serving.contains("A gentle background of traffic"),
        "{serving}"
    );
    assert!(
        serving.contains("reason `servedViaFallbackHop:1`"),
        "{serving}"
    );
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(0), "demo exits cleanly on Ctrl-C");
}

#[test]
fn check_prints_warnings_located_and_exits_0_on_warnings_only() {
    let path = write(
        "warn.yaml",
        r#"targets:
  - { name: a, provider: openai, baseUrl: "http://127.0.0.1:9/v1", models: ["gpt-*"] }
rules:
  - name: r
    priority: 1
    matchModels: ["x"]
    routeToTarget:
      staticRoute: { target: a, model: gpt-4o }
      fallback:
        triggerOn: { errors: [FIRST_BYTE_TIMEOUT] }
        targetFallback:
          - { target: a, model: gtp-4o-mini }
"#,
    );
    let out = Command::new(BIN).arg("check").arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let file = path.display().to_string();
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": warning: "))
        .collect();
    assert_eq!(warnings.len(), 4, "{stdout}");
    assert!(
        warnings.iter().all(|w| w.starts_with(&format!("{file}:"))),
        "{stdout}"
    );
    assert!(stdout.contains("gtp-4o-mini"), "{stdout}");
    assert!(stdout.trim_end().ends_with("ok, 4 warning(s)"), "{stdout}");
}

/// Seed 000's pitfall with a breaker condition: `check` warns at the hop, `explain` prints the same
/// warning for the route it explains (and none for a route without pitfalls).
#[test]
fn check_and_explain_warn_about_an_unhealthy_condition_the_triggers_ignore() {
    let path = write(
        "cond.yaml",
        r#"defaults:
  circuitBreaker: { unhealthyCondition: "response.code == 429 || response.code >= 500" }
targets:
  - { name: a, provider: openai, baseUrl: "http://127.0.0.1:9/v1" }
  - { name: b, provider: openai, baseUrl: "http://127.0.0.1:9/v1" }
rules:
  - name: keeps-429
    priority: 1
    matchModels: ["gpt-*"]
    routeToTarget:
      staticRoute: { target: a }
      fallback:
        triggerOn: { statusCodes: ["5XX"] }
        targetFallback:
          - { target: b, model: backup }
  - name: fine
    priority: 2
    matchModels: ["claude-*"]
    routeToTarget:
      staticRoute: { target: a }
      fallback:
        triggerOn: { statusCodes: ["429", "5XX"] }
        targetFallback:
          - { target: b, model: backup }
"#,
    );
    let file = path.display().to_string();
    let out = Command::new(BIN).arg("check").arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let warning = stdout
        .lines()
        .find(|l| l.contains("unhealthyCondition"))
        .unwrap_or_else(|| panic!("no condition warning: {stdout}"));
    assert!(
        warning.starts_with(&format!(
            "{file}:13:20: rules[0].routeToTarget.fallback.triggerOn: warning: "
        )),
        "{warning}"
    );
    assert!(
        warning.contains("counts 429 as breaker failures"),
        "{warning}"
    );

    let explain = |model: &str| {
        let out = Command::new(BIN)
            .args(["explain", "--config"])
            .arg(&path)
            .args(["--model", model])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = explain("gpt-4o");
    assert!(text.contains("RULE `keeps-429`"), "{text}");
    // The moves-on-for-429 and the condition warnings of this route, exactly as `check` prints.
    assert!(text.contains("warnings (2):"), "{text}");
    assert!(text.contains(&format!("  {warning}")), "{text}");
    let text = explain("claude-x");
    assert!(text.contains("RULE `fine`"), "{text}");
    assert!(!text.contains("warning"), "{text}");
}

const BASE: &str = r#"targets:
  - { name: oa, provider: openai, baseUrl: "http://127.0.0.1:9/v1", apiKey: env:SIDETRACK_CLI_TEST_UNSET_KEY, models: ["gpt-*"] }
  - { name: bedrock, provider: bedrock, region: us-east-1, models: ["*"] }
rules:
  - name: chat
    priority: 50
    matchModels: ["gpt-*"]
    routeToTarget:
      staticRoute: { target: oa }
"#;

/// What `aws bedrock-agentcore-control create-gateway-rule` takes (conditions/actions wrappers).
const AGENTCORE_RULE: &str = r#"{
  "priority": 100,
  "description": "Nova with a fallback to its inference profile",
  "conditions": [
    { "matchModels": { "anyOf": [ { "value": "amazon.nova-micro-v1:0", "operator": "StringEquals" } ] } }
  ],
  "actions": [
    {
      "routeToTarget": {
        "staticRoute": {
          "targetName": "bedrock",
          "model": "amazon.nova-micro-v1:0",
          "fallback": {
            "triggerOn": { "statusCodes": ["429", "5XX"], "errors": ["CONNECTION_ERROR"] },
            "targetFallback": [ { "targetName": "bedrock", "model": "us.amazon.nova-micro-v1:0" } ]
          }
        }
      }
    }
  ]
}
"#;

#[test]
fn check_rule_loads_an_agentcore_rule_body_against_a_base_config() {
    let base = write("base.yaml", BASE);
    let rule = write("rule.json", AGENTCORE_RULE);
    let out = Command::new(BIN)
        .args(["check", "--rule"])
        .arg(&rule)
        .arg("--config")
        .arg(&base)
        .env("SIDETRACK_CLI_TEST_UNSET_KEY", "sk-test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.trim_end().ends_with(": ok"), "{stdout}");

    // `explain` walks the rule from the file: its pinned model, its fallback hop.
    let out = Command::new(BIN)
        .args(["explain", "--offline", "--rule"])
        .arg(&rule)
        .arg("--config")
        .arg(&base)
        .args(["--model", "amazon.nova-micro-v1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("route: RULE `rule-100`"), "{text}");
    assert!(
        text.contains("destination bedrock/us.amazon.nova-micro-v1:0"),
        "{text}"
    );
}

#[test]
fn check_rule_locates_a_bad_agentcore_rule_in_the_rule_file() {
    let base = write("base2.yaml", BASE);
    let rule = write(
        "bad-rule.json",
        r#"{
  "priority": 50,
  "conditions": [ { "matchModels": { "anyOf": [ { "value": "nova*" } ] } } ],
  "actions": [
    { "routeToTarget": { "staticRoute": { "targetName": "nowhere",
        "fallback": { "triggerOn": { "statusCodes": ["399"] },
                      "targetFallback": [ { "targetName": "bedrock", "model": "x" } ] } } } }
  ]
}
"#,
    );
    let out = Command::new(BIN)
        .args(["check", "--offline", "--rule"])
        .arg(&rule)
        .arg("--config")
        .arg(&base)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let r = rule.display().to_string();
    let b = base.display().to_string();
    let errors: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.contains(": warning: "))
        .collect();
    assert_eq!(errors.len(), 3, "{stdout}");
    // The priority collides with BASE's rule: reported in the rule file, naming BASE's rule.
    assert!(
        errors[0].starts_with(&format!(
            "{r}:2:15: priority: priority 50 is already used by {b}: rules[0]"
        )),
        "{stdout}"
    );
    assert!(
        errors[1].starts_with(&format!(
            "{r}:5:57: actions[0].routeToTarget.staticRoute.targetName: unknown target `nowhere`"
        )),
        "{stdout}"
    );
    assert!(
        errors[2].starts_with(&format!(
            "{r}:6:54: actions[0].routeToTarget.staticRoute.fallback.triggerOn.statusCodes[0]: status code `399`"
        )),
        "{stdout}"
    );
}

#[test]
fn check_offline_turns_a_missing_env_secret_into_a_warning() {
    let path = write("offline.yaml", BASE);
    let file = path.display().to_string();
    let run = |offline: bool| {
        let mut cmd = Command::new(BIN);
        cmd.arg("check");
        if offline {
            cmd.arg("--offline");
        }
        let out = cmd
            .arg(&path)
            .env_remove("SIDETRACK_CLI_TEST_UNSET_KEY")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    let (code, stdout) = run(false);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(
        stdout.trim_end(),
        format!(
            "{file}:2:77: targets[0].apiKey: environment variable `SIDETRACK_CLI_TEST_UNSET_KEY` is not set"
        )
    );
    let (code, stdout) = run(true);
    assert_eq!(code, Some(0), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "{file}:2:77: targets[0].apiKey: warning: environment variable `SIDETRACK_CLI_TEST_UNSET_KEY` is not set"
        )),
        "{stdout}"
    );
    assert_eq!(lines[1], format!("{file}: ok, 1 warning(s)"));
}
