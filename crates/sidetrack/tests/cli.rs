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
