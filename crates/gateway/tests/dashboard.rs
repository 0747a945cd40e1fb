//! The dashboard (SPEC §8) loaded in real headless Chromium: a destination opened by failures
//! shows as open, and a click on Disable goes through the admin plane's cross-site rule (§14).
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

/// Headless Chromium driven over the DevTools protocol (`--remote-debugging-pipe`: JSON messages
/// ending in NUL on fds 3 and 4, which `sh` connects to two FIFOs): enough to load a page and
/// evaluate a script in it. Blocking; run it off the async runtime.
struct Browser {
    child: std::process::Child,
    to: std::fs::File,
    from: std::io::BufReader<std::fs::File>,
    next_id: u64,
    dir: std::path::PathBuf,
}

impl Browser {
    fn launch() -> Browser {
        let dir = std::env::temp_dir().join(format!(
            "sidetrack-cdp-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (to, from) = (dir.join("to-browser"), dir.join("from-browser"));
        for fifo in [&to, &from] {
            let made = std::process::Command::new("mkfifo")
                .arg(fifo)
                .status()
                .unwrap();
            assert!(made.success(), "mkfifo {}", fifo.display());
        }
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(concat!(
                r#"exec "$0" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "#,
                r#"--disable-background-networking --disable-component-update --disable-sync "#,
                r#"--user-data-dir="$1" --remote-debugging-pipe about:blank 3<"$2" 4>"$3""#
            ))
            .arg(chromium())
            .arg(dir.join("profile"))
            .arg(&to)
            .arg(&from)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // `sh` opens fd 3 (waits for this writer), then fd 4 (waits for this reader).
        let to = std::fs::OpenOptions::new().write(true).open(&to).unwrap();
        let from = std::io::BufReader::new(std::fs::File::open(&from).unwrap());
        Browser {
            child,
            to,
            from,
            next_id: 0,
            dir,
        }
    }

    /// Sends one command and returns its `result` (or its `error`), skipping events.
    fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
        session: Option<&str>,
    ) -> Result<serde_json::Value, serde_json::Value> {
        use std::io::{BufRead, Write};
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = serde_json::json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut buf = Vec::new();
            let n = self.from.read_until(0, &mut buf).unwrap();
            assert!(n > 0, "chromium closed the pipe");
            buf.pop();
            let reply: serde_json::Value = serde_json::from_slice(&buf).unwrap();
            if reply["id"] == id {
                return match reply.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(reply["result"].clone()),
                };
            }
        }
    }

    /// Opens `url` in a new tab and evaluates `script` (an expression, awaited if a promise) in
    /// it; returns the value, or panics with the page's exception.
    fn eval_in(&mut self, url: &str, script: &str) -> serde_json::Value {
        let target = self
            .call(
                "Target.createTarget",
                serde_json::json!({"url": "about:blank"}),
                None,
            )
            .unwrap();
        let attached = self
            .call(
                "Target.attachToTarget",
                serde_json::json!({"targetId": target["targetId"], "flatten": true}),
                None,
            )
            .unwrap();
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        let eval = |b: &mut Browser, expr: &str| {
            b.call(
                "Runtime.evaluate",
                serde_json::json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
                Some(&session),
            )
        };
        self.call(
            "Page.navigate",
            serde_json::json!({"url": url}),
            Some(&session),
        )
        .unwrap();
        // Until the page has loaded (an evaluation during the navigation may lose its context).
        let loaded = format!(
            "document.readyState === 'complete' && location.href === {}",
            serde_json::Value::from(url)
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while eval(self, &loaded).map_or(true, |r| r["result"]["value"] != true) {
            assert!(std::time::Instant::now() < deadline, "{url} never loaded");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = eval(self, script).unwrap_or_else(|e| panic!("evaluate: {e}"));
        if let Some(e) = out.get("exceptionDetails") {
            panic!("the page script failed: {e}");
        }
        out["result"]["value"].clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Clicks a row's Disable button in the dashboard, as an operator does: the page's POST (JSON
/// content type, its own Origin) passes the admin plane's cross-site rule (SPEC §14) and the
/// destination is disabled.
#[tokio::test]
async fn clicking_disable_in_the_dashboard_disables_the_destination() {
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
    let env = start_with_clock(yaml, behaviours(&[]), Clock::manual()).await;
    assert_eq!(env.chat("ask", false).await.status, 200);
    assert_eq!(env.destination("up", "m-p").await["disabled"], false);

    let url = format!("{}/", env.gw.admin_url());
    let script = r#"(async () => {
      const until = async (what, cond) => {
        for (let i = 0; i < 400; i++) {
          const v = cond();
          if (v) return v;
          await new Promise(r => setTimeout(r, 25));
        }
        throw new Error("timed out waiting for " + what + "; status: " +
                        document.getElementById("status").textContent);
      };
      await until("the first render", () => document.body.dataset.loaded === "1");
      const row = await until("the row",
        () => document.querySelector('tr[data-target="up"][data-model="m-p"]'));
      row.querySelector('button[data-action="disable"]').click();
      const status = await until("the action's status", () => {
        const t = document.getElementById("status").textContent;
        return /done|failed/.test(t) && t;
      });
      await until("the row to show DISABLED",
        () => row.querySelector("td.state").textContent === "DISABLED" || /failed/.test(status));
      return status;
    })()"#;
    let clicked = tokio::task::spawn_blocking(move || Browser::launch().eval_in(&url, script));
    let status = tokio::time::timeout(std::time::Duration::from_secs(60), clicked)
        .await
        .expect("chromium did not finish in 60 s")
        .unwrap();
    assert_eq!(status, "disable up / m-p: done");
    assert_eq!(env.destination("up", "m-p").await["disabled"], true);
}
