//! bench-client: the measuring client of `bench/run`. Every mode talks HTTP/1.1 over its own TCP
//! connections (TCP_NODELAY) to 127.0.0.1 and prints one JSON object on stdout.
//!
//!   bench-client lat     ADDR[,ADDR...] PATH MODEL N [--for-secs S] [-H 'name: value']...
//!       N sequential non-streaming requests (or as many as fit in S seconds, at most N) on one
//!       keep-alive connection per address: latency p50/p99/mean, statuses, and the
//!       `x-sidetrack-served-by` and `x-sidetrack-attempts` values seen.
//!   bench-client sse     ADDR[,ADDR...] PATH MODEL N [--interval-ms MS] [-H ...]
//!       N sequential streamed requests on one connection per address; every SSE event is
//!       timestamped on arrival: time to first token, per-chunk gap, content-chunk count, chunks that
//!       arrived "buffered" (closer than half the mock's chunk interval to the previous one), gaps
//!       >= 30 ms.
//!
//! An address may name its own model as `ADDR@MODEL` (arms that differ only by model).
//! With several addresses, `lat` and `sse` interleave them request by request (the first address
//! of each cycle rotates), so every arm sees the same moments of a noisy machine; the output is
//! then `{"interleaved": K, "arms": {ADDR: <the one-address output>}}`.
//!   bench-client cpu     ADDR[,ADDR...] PATH MODEL RATE --pgid PGID[,PGID...] [--secs S]
//!       [--slice-secs L] [-H ...]
//!       CPU time per request at a fixed rate: 8 workers, each on its own keep-alive connection,
//!       send RATE requests/s in all to one address for L seconds (a slice), then to the next;
//!       every address gets S seconds in all, in slices whose order rotates each cycle, so every
//!       arm sees the same stretch of a noisy machine. Before and after each slice (after a short
//!       settle, so work an arm finishes late is its own) the CPU time of the address's process
//!       group (PGID, in the order of the addresses) is read from /proc/*/task/*/schedstat (ns).
//!   bench-client streams ADDR PATH MODEL N --pid PID[,PID...] [--secs S] [-H ...]
//!       N concurrent slow streams, one connection each; samples VmRSS of the PIDs every 50 ms.
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::client::conn::http1;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Sender = http1::SendRequest<Full<Bytes>>;
type Err = Box<dyn std::error::Error + Send + Sync>;

struct Opts {
    addr: String,
    path: String,
    model: String,
    n: usize,
    headers: Vec<(String, String)>,
    interval_ms: f64,
    pids: Vec<u32>,
    secs: u64,
    for_secs: Option<f64>,
    pgids: Vec<u32>,
    slice_secs: f64,
}

impl Opts {
    fn addrs(&self) -> Vec<&str> {
        self.addr.split(',').filter(|a| !a.is_empty()).collect()
    }
}

/// A comma-separated list of process (or process-group) ids.
fn ids(list: &str) -> Result<Vec<u32>, Err> {
    list.split(',').filter(|p| !p.is_empty()).map(|p| Ok(p.parse()?)).collect()
}

fn parse(args: &[String]) -> Result<Opts, Err> {
    let mut pos = Vec::new();
    let mut o = Opts {
        addr: String::new(),
        path: String::new(),
        model: String::new(),
        n: 0,
        headers: Vec::new(),
        interval_ms: 0.0,
        pids: Vec::new(),
        secs: 30,
        for_secs: None,
        pgids: Vec::new(),
        slice_secs: 1.0,
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let mut val = || -> Result<String, Err> {
            i += 1;
            args.get(i).cloned().ok_or_else(|| format!("{a} needs a value").into())
        };
        match a.as_str() {
            "-H" => {
                let h = val()?;
                let (k, v) = h.split_once(':').ok_or("header must be 'name: value'")?;
                o.headers.push((k.trim().to_string(), v.trim().to_string()));
            }
            "--interval-ms" => o.interval_ms = val()?.parse()?,
            "--secs" => o.secs = val()?.parse()?,
            "--for-secs" => o.for_secs = Some(val()?.parse()?),
            "--slice-secs" => o.slice_secs = val()?.parse()?,
            "--pgid" => o.pgids.extend(ids(&val()?)?),
            "--pid" => o.pids.extend(ids(&val()?)?),
            _ => pos.push(a.clone()),
        }
        i += 1;
    }
    if pos.len() != 4 {
        return Err("expected ADDR PATH MODEL N".into());
    }
    o.addr = pos[0].clone();
    o.path = pos[1].clone();
    o.model = pos[2].clone();
    o.n = pos[3].parse()?;
    Ok(o)
}

async fn connect(addr: &str) -> Result<Sender, Err> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// An address entry, `ADDR` or `ADDR@MODEL` (a per-arm model): the address and the model to send.
fn entry<'e>(o: &'e Opts, e: &'e str) -> (&'e str, &'e str) {
    match e.split_once('@') {
        Some((addr, model)) => (addr, model),
        None => (e, o.model.as_str()),
    }
}

fn request(o: &Opts, addr: &str, stream: bool) -> Result<Request<Full<Bytes>>, Err> {
    let (addr, model) = entry(o, addr);
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
        "stream": stream,
    });
    let mut b = Request::post(o.path.as_str())
        .header("host", addr)
        .header("content-type", "application/json");
    for (k, v) in &o.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    Ok(b.body(Full::new(Bytes::from(body.to_string())))?)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.total_cmp(b));
    let mean = if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
    json!({"n": v.len(), "p50": pct(&v, 50.0), "p99": pct(&v, 99.0), "max": v.last().copied().unwrap_or(f64::NAN), "mean": mean})
}

/// A keep-alive connection to `addr`, reopened when the server closed it.
async fn ready<'c>(conn: &'c mut Option<Sender>, addr: &str) -> Result<&'c mut Sender, Err> {
    let usable = match conn.as_mut() {
        Some(s) => s.ready().await.is_ok(),
        None => false,
    };
    if !usable {
        *conn = Some(connect(addr).await?);
    }
    conn.as_mut().ok_or_else(|| "no connection".into())
}

/// Runs `n` cycles (or as many as fit in `o.for_secs`, at most `n`) of one request per address,
/// in an order that rotates each cycle, and renders each address's results with `done`.
macro_rules! interleave {
    ($o:expr, $acc:ty, $one:ident, $done:ident) => {{
        let o = $o;
        let addrs = o.addrs();
        let mut arms: Vec<(Option<Sender>, $acc)> =
            addrs.iter().map(|_| (None, <$acc>::default())).collect();
        let started = Instant::now();
        let k = addrs.len();
        for i in 0..o.n {
            if o.for_secs.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
                break;
            }
            for j in 0..k {
                let a = (i + j) % k;
                let (conn, acc) = &mut arms[a];
                $one(o, addrs[a], conn, acc).await?;
            }
        }
        let mut out: Vec<Value> = arms.into_iter().map(|(_, acc)| $done(o, acc)).collect();
        if k == 1 {
            out.pop().ok_or_else(|| Err::from("no address"))
        } else {
            let arms: serde_json::Map<String, Value> =
                addrs.iter().map(|a| a.to_string()).zip(out).collect();
            Ok(json!({"interleaved": k, "arms": arms}))
        }
    }};
}

#[derive(Default)]
struct LatAcc {
    lats: Vec<f64>,
    statuses: serde_json::Map<String, Value>,
    served: serde_json::Map<String, Value>,
    attempts: serde_json::Map<String, Value>,
}

async fn lat_once(o: &Opts, addr: &str, conn: &mut Option<Sender>, acc: &mut LatAcc) -> Result<(), Err> {
    let req = request(o, addr, false)?;
    let t0 = Instant::now();
    let s = ready(conn, entry(o, addr).0).await?;
    let resp = s.send_request(req).await?;
    let status = resp.status().as_u16().to_string();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_string()
    };
    let (by, attempts) = (header("x-sidetrack-served-by"), header("x-sidetrack-attempts"));
    resp.into_body().collect().await?;
    acc.lats.push(t0.elapsed().as_secs_f64() * 1e6);
    bump(&mut acc.statuses, &status);
    bump(&mut acc.served, &by);
    bump(&mut acc.attempts, &attempts);
    Ok(())
}

fn lat_done(_: &Opts, acc: LatAcc) -> Value {
    json!({"latency_us": summary(acc.lats), "status": acc.statuses, "served_by": acc.served, "attempts": acc.attempts})
}

async fn lat(o: &Opts) -> Result<Value, Err> {
    interleave!(o, LatAcc, lat_once, lat_done)
}

/// Counts one more occurrence of `k` in a JSON map of counters.
fn bump(m: &mut serde_json::Map<String, Value>, k: &str) {
    let n = m.get(k).and_then(Value::as_u64).unwrap_or(0);
    m.insert(k.to_string(), json!(n + 1));
}

/// Content text of one SSE `data:` payload, for the dialects the harness streams (OpenAI Chat).
fn content_of(data: &str) -> Option<bool> {
    if data.trim() == "[DONE]" {
        return None;
    }
    let v: Value = serde_json::from_str(data).ok()?;
    let c = v.pointer("/choices/0/delta/content")?.as_str()?;
    Some(!c.is_empty())
}

struct SseAcc {
    ttft: Vec<f64>,
    gaps: Vec<f64>,
    mean_gaps: Vec<f64>,
    chunks_min: usize,
    chunks_max: usize,
    buffered: usize,
    slow_gaps: usize,
    errors: usize,
    multi_frames: usize,
}

impl Default for SseAcc {
    fn default() -> SseAcc {
        SseAcc {
            ttft: Vec::new(),
            gaps: Vec::new(),
            mean_gaps: Vec::new(),
            chunks_min: usize::MAX,
            chunks_max: 0,
            buffered: 0,
            slow_gaps: 0,
            errors: 0,
            multi_frames: 0,
        }
    }
}

async fn sse_once(o: &Opts, addr: &str, conn: &mut Option<Sender>, acc: &mut SseAcc) -> Result<(), Err> {
    let req = request(o, addr, true)?;
    let t0 = Instant::now();
    let s = ready(conn, entry(o, addr).0).await?;
    let resp = s.send_request(req).await?;
    if !resp.status().is_success() {
        acc.errors += 1;
        resp.into_body().collect().await?;
        return Ok(());
    }
    let mut body = resp.into_body();
    let mut buf: Vec<u8> = Vec::new();
    let mut times: Vec<Instant> = Vec::new();
    // Frames are timestamped as the HTTP stack hands them over, and every frame already there is
    // taken (and timestamped) before any is parsed: otherwise a frame that arrived together with
    // earlier ones (a proxy that holds the preamble sends head, preamble and first token in one
    // write) would be stamped only after this client had parsed those, and the client's own
    // parsing would count as the arm's latency.
    let mut arrived: std::collections::VecDeque<(Bytes, Instant)> = std::collections::VecDeque::new();
    loop {
        if arrived.is_empty() {
            let Some(frame) = body.frame().await else { break };
            if let Ok(data) = frame?.into_data() {
                arrived.push_back((data, Instant::now()));
            }
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            while let std::task::Poll::Ready(Some(frame)) = std::pin::Pin::new(&mut body).poll_frame(&mut cx) {
                if let Ok(data) = frame?.into_data() {
                    arrived.push_back((data, Instant::now()));
                }
            }
        }
        let Some((data, now)) = arrived.pop_front() else { continue };
        buf.extend_from_slice(&data);
        let mut in_frame = 0;
        // Split complete events ("\n\n"; tolerate "\r\n\r\n").
        loop {
            let text = String::from_utf8_lossy(&buf).replace("\r\n", "\n");
            let Some(end) = text.find("\n\n") else {
                buf = text.into_bytes();
                break;
            };
            let event = text[..end].to_string();
            buf = text[end + 2..].as_bytes().to_vec();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect::<Vec<_>>()
                .join("\n");
            if content_of(&data) == Some(true) {
                times.push(now);
                in_frame += 1;
            }
        }
        if in_frame > 1 {
            acc.multi_frames += 1;
        }
    }
    if let Some(first) = times.first() {
        acc.ttft.push(first.duration_since(t0).as_secs_f64() * 1e6);
    }
    acc.chunks_min = acc.chunks_min.min(times.len());
    acc.chunks_max = acc.chunks_max.max(times.len());
    for w in times.windows(2) {
        let g = w[1].duration_since(w[0]).as_secs_f64() * 1e6;
        if o.interval_ms > 0.0 && g < o.interval_ms * 1000.0 / 2.0 {
            acc.buffered += 1;
        }
        if g >= 30_000.0 {
            acc.slow_gaps += 1;
        }
        acc.gaps.push(g);
    }
    if times.len() > 1 {
        let span = times[times.len() - 1].duration_since(times[0]).as_secs_f64() * 1e6;
        acc.mean_gaps.push(span / (times.len() - 1) as f64);
    }
    Ok(())
}

fn sse_done(_: &Opts, acc: SseAcc) -> Value {
    let slow_ttft = acc.ttft.iter().filter(|t| **t >= 30_000.0).count();
    json!({
        "ttft_us": summary(acc.ttft), "gap_us": summary(acc.gaps), "mean_gap_us": summary(acc.mean_gaps),
        "chunks_min": if acc.chunks_min == usize::MAX { 0 } else { acc.chunks_min }, "chunks_max": acc.chunks_max,
        "buffered": acc.buffered, "multi_event_frames": acc.multi_frames,
        "gaps_over_30ms": acc.slow_gaps, "ttft_over_30ms": slow_ttft, "errors": acc.errors,
    })
}

async fn sse(o: &Opts) -> Result<Value, Err> {
    interleave!(o, SseAcc, sse_once, sse_done)
}

fn rss_kb(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()))
        })
        .sum()
}

async fn streams(o: &Opts) -> Result<Value, Err> {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    let opened = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let rss_before = rss_kb(&o.pids);
    let deadline = Instant::now() + Duration::from_secs(o.secs);
    let mut tasks = Vec::new();
    for _ in 0..o.n {
        let req = request(o, &o.addr, true)?;
        let addr = o.addr.clone();
        let (opened, done, failed) = (opened.clone(), done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let run = async {
                let mut s = connect(&addr).await?;
                s.ready().await?;
                let resp = s.send_request(req).await?;
                if !resp.status().is_success() {
                    return Err::<(), Err>(format!("status {}", resp.status()).into());
                }
                let mut body = resp.into_body();
                let mut first = true;
                while let Some(f) = body.frame().await {
                    f?;
                    if first {
                        opened.fetch_add(1, Relaxed);
                        first = false;
                    }
                }
                Ok(())
            };
            match tokio::time::timeout_at(deadline.into(), run).await {
                Ok(Ok(())) => done.fetch_add(1, Relaxed),
                _ => failed.fetch_add(1, Relaxed),
            };
        }));
    }
    let (mut peak, mut at_all_open, mut max_open) = (0u64, 0u64, 0usize);
    let mut samples = 0;
    while Instant::now() < deadline && done.load(Relaxed) + failed.load(Relaxed) < o.n {
        let r = rss_kb(&o.pids);
        peak = peak.max(r);
        let now_open = opened.load(Relaxed) - done.load(Relaxed).min(opened.load(Relaxed));
        if now_open > max_open {
            max_open = now_open;
        }
        if now_open >= o.n && at_all_open == 0 {
            at_all_open = r;
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in tasks {
        t.abort();
    }
    Ok(json!({
        "rss_before_kb": rss_before, "rss_peak_kb": peak, "rss_all_open_kb": at_all_open,
        "max_concurrent_open": max_open, "completed": done.load(Relaxed), "failed": failed.load(Relaxed),
        "samples": samples,
    }))
}

/// CPU time (ns) of every thread of every process in process group `pgid`, from schedstat.
fn group_cpu_ns(pgid: u32) -> u64 {
    let Ok(procs) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // after "pid (comm) ": state, ppid, pgrp
        let pgrp = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<u32>().ok());
        if pgrp != Some(pgid) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in tasks.flatten() {
            let ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
            total += ns.unwrap_or(0);
        }
    }
    total
}

const CPU_WORKERS: usize = 8;

/// One worker of a slice: requests on its own connection at `per_sec`, until `until`.
async fn cpu_worker(
    o: Arc<Opts>,
    addr: String,
    mut conn: Option<Sender>,
    per_sec: f64,
    until: Instant,
) -> (Option<Sender>, u64, u64) {
    let (mut ok, mut other) = (0, 0);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if Instant::now() >= until {
            break;
        }
        let sent = async {
            let req = request(&o, &addr, false)?;
            let s = ready(&mut conn, entry(&o, &addr).0).await?;
            let resp = s.send_request(req).await?;
            let status = resp.status();
            resp.into_body().collect().await?;
            Ok::<_, Err>(status.is_success())
        };
        match sent.await {
            Ok(true) => ok += 1,
            Ok(false) => other += 1,
            Err(_) => {
                other += 1;
                conn = None;
            }
        }
    }
    (conn, ok, other)
}

async fn cpu(o: Opts) -> Result<Value, Err> {
    let o = Arc::new(o);
    let addrs: Vec<String> = o.addrs().iter().map(|a| a.to_string()).collect();
    if o.pgids.len() != addrs.len() {
        return Err("--pgid needs one process group per address".into());
    }
    let k = addrs.len();
    let per_sec = o.n as f64 / CPU_WORKERS as f64;
    let cycles = (o.secs as f64 / o.slice_secs).ceil().max(1.0) as usize;
    let mut conns: Vec<Vec<Option<Sender>>> = (0..k).map(|_| (0..CPU_WORKERS).map(|_| None).collect()).collect();
    // per arm: requests ok, other, cpu ns, seconds under load
    let mut acc = vec![(0u64, 0u64, 0u64, 0f64); k];
    for c in 0..cycles {
        for j in 0..k {
            let a = (c + j) % k;
            let before = group_cpu_ns(o.pgids[a]);
            let t0 = Instant::now();
            let until = t0 + Duration::from_secs_f64(o.slice_secs);
            let workers: Vec<_> = conns[a]
                .drain(..)
                .map(|conn| tokio::spawn(cpu_worker(o.clone(), addrs[a].clone(), conn, per_sec, until)))
                .collect();
            for w in workers {
                let (conn, ok, other) = w.await?;
                conns[a].push(conn);
                acc[a].0 += ok;
                acc[a].1 += other;
            }
            acc[a].3 += t0.elapsed().as_secs_f64();
            // work an arm finishes after its last answer (a log batch) is still its own
            tokio::time::sleep(Duration::from_millis(150)).await;
            acc[a].2 += group_cpu_ns(o.pgids[a]).saturating_sub(before);
        }
    }
    let arms: serde_json::Map<String, Value> = addrs
        .iter()
        .zip(acc)
        .map(|(a, (ok, other, ns, secs))| {
            let n = ok + other;
            let per = if n == 0 { f64::NAN } else { ns as f64 / 1e3 / n as f64 };
            (a.clone(), json!({"ok": ok, "other": other, "cpu_ns": ns, "cpu_us_per_request": per,
                "rps": n as f64 / secs, "slices": cycles}))
        })
        .collect();
    Ok(json!({"interleaved": k, "arms": arms}))
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = args.first().cloned() else {
        eprintln!("usage: bench-client lat|sse|cpu|streams ADDR PATH MODEL N [options]");
        return std::process::ExitCode::from(2);
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let out = rt.block_on(async {
        let o = parse(&args[1..])?;
        match mode.as_str() {
            "lat" => lat(&o).await,
            "sse" => sse(&o).await,
            "streams" => streams(&o).await,
            "cpu" => cpu(o).await,
            m => Err(format!("unknown mode {m}").into()),
        }
    });
    match out {
        Ok(v) => {
            println!("{v}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench-client {mode}: {e}");
            println!("{}", json!({"error": e.to_string()}));
            std::process::ExitCode::from(1)
        }
    }
}
