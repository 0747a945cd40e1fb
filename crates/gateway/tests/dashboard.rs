//! The dashboard (SPEC §8) loaded in real headless Chromium: a destination opened by failures
//! shows as open.
#![allow(clippy::unwrap_used)]

mod common;

use common::{behaviours, start_with_clock, status};
use sidetrack_gateway::Clock;

/// Debian's Chromium (installed by `.ci/run`), or `SIDETRACK_CHROMIUM`.
fn chromium() -> String {
    let path = std::env::var("SIDETRACK_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        std::path::Path::new(&path).exists(),
        "the dashboard test needs Chromium: run `bash .ci/run` (it installs Debian's chromium) or set SIDETRACK_CHROMIUM"
    );
    path
}

/// Loads `url` headless and returns the DOM after the page's scripts ran (the virtual-time budget
/// lets the first poll of /admin/destinations land before the dump).
async fn dump_dom(url: &str) -> String {
    let profile = std::env::temp_dir().join(format!("sidetrack-chromium-{}", std::process::id()));
    let out = tokio::process::Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=3000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn row<'a>(dom: &'a str, target: &str, model: &str) -> &'a str {
    let needle = format!(r#"data-target="{target}" data-model="{model}""#);
    let alt = format!(r#"data-model="{model}" data-target="{target}""#);
    let start = dom
        .find(&needle)
        .or_else(|| dom.find(&alt))
        .unwrap_or_else(|| panic!("no row for {target}/{model} in:\n{dom}"));
    let from = dom[..start].rfind("<tr").unwrap();
    let to = start + dom[start..].find("</tr>").unwrap();
    &dom[from..to]
}

#[tokio::test]
async fn dashboard_shows_a_destination_opened_by_failures_as_open() {
    let yaml = r#"
targets:
  - { name: up, provider: openai, baseUrl: "${MOCK}/v1", models: ["m-*"] }
rules:
  - name: r
    priority: 1
    matchModels: ["ask"]
    routeToTarget:
      staticRoute: { target: up, model: m-p }
      fallback: { targetFallback: [ { target: up, model: m-f } ] }
"#;
    let env = start_with_clock(yaml, behaviours(&[("m-p", status(503))]), Clock::manual()).await;
    for _ in 0..6 {
        assert_eq!(env.chat("ask", false).await.status, 200);
    }
    assert_eq!(env.breaker("up", "m-p").await, "OPEN");

    let dom = dump_dom(&format!("{}/", env.gw.admin_url())).await;
    assert!(
        dom.contains(r#"data-loaded="1""#),
        "the page rendered its data:\n{dom}"
    );
    let open = row(&dom, "up", "m-p");
    assert!(open.contains("state-open"), "{open}");
    assert!(open.contains(">OPEN<"), "{open}");
    let closed = row(&dom, "up", "m-f");
    assert!(
        closed.contains("state-closed") && closed.contains(">CLOSED<"),
        "{closed}"
    );
    assert!(
        dom.contains("(6 fallbacks / 6 requests)"),
        "fallback rate shown:\n{dom}"
    );
}
