//! What the binary's tests share: free loopback ports and a spawned `sidetrack` whose stderr is
//! collected line by line.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

pub const BIN: &str = env!("CARGO_BIN_EXE_sidetrack");

/// A loopback port nothing listens on right now.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Spawns `cmd` (a `sidetrack` command line) without colours or `RUST_LOG`, stdin and stdout
/// closed; returns the child and its stderr lines, collected as they come by a thread.
pub fn spawn_collecting_stderr(mut cmd: Command) -> (Child, Arc<Mutex<Vec<String>>>) {
    let mut child = cmd
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let pipe = child.stderr.take().unwrap();
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (child, stderr)
}

/// `VmRSS` of a process, in KiB (Linux).
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A fresh directory for one test's files, named for the test binary's process and `test`.
pub fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sidetrack-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
