//! `--floor LOG_FILE`: the minimal proxy plus the work SPEC asks of a gateway for every request, and
//! nothing else. It reads the request's `model` (a gateway routes on it), forwards the request,
//! reads the answer's `usage` (the routing record carries it), and appends one routing line per
//! request of the same fields and about the same length as sidetrack's (SPEC §7.1), written to a
//! file by a writer thread that takes the lines in batches, as sidetrack's routing log does.
//! No rules, no fallback, no breakers, no metrics, no headers of its own.
//!
//! It exists to show where the ceiling is for anything that does that work: bench/run measures it
//! beside the minimal proxy and sidetrack in the throughput and CPU arms. Both bodies are read
//! whole (the non-streamed requests of those arms; it is not meant for streams).
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::{connect::HttpConnector, Client, Error};
use std::borrow::Cow;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub type Upstream = Client<HttpConnector, Full<Bytes>>;

#[derive(serde::Deserialize)]
struct Top<'a> {
    #[serde(borrow)]
    model: Cow<'a, str>,
    #[serde(default)]
    stream: bool,
}

#[derive(serde::Deserialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

#[derive(serde::Deserialize)]
struct Answer {
    usage: Option<Usage>,
}

/// Lines waiting for the writer; pushing wakes it when the queue goes from empty to one line or
/// fills a batch, and it gathers for up to 100 ms before one write (as sidetrack's routing log).
#[derive(Clone)]
pub struct Log(Arc<(Mutex<Vec<String>>, Condvar)>);

const BATCH: usize = 256;

impl Log {
    pub fn start(path: &str) -> std::io::Result<Log> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        let log = Log(Arc::new((Mutex::new(Vec::with_capacity(BATCH)), Condvar::new())));
        let queue = log.0.clone();
        std::thread::Builder::new().name("floor-log".into()).spawn(move || {
            let mut batch = Vec::with_capacity(BATCH);
            let mut buf = Vec::with_capacity(256 * 1024);
            loop {
                {
                    let (lock, wake) = &*queue;
                    let mut pending = lock.lock().unwrap_or_else(|e| e.into_inner());
                    while pending.is_empty() {
                        pending = wake.wait(pending).unwrap_or_else(|e| e.into_inner());
                    }
                    let deadline = Instant::now() + Duration::from_millis(100);
                    while pending.len() < BATCH {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        pending = wake.wait_timeout(pending, left).unwrap_or_else(|e| e.into_inner()).0;
                    }
                    std::mem::swap(&mut *pending, &mut batch);
                }
                for line in batch.drain(..) {
                    buf.extend_from_slice(line.as_bytes());
                    buf.push(b'\n');
                }
                let _ = file.write_all(&buf);
                buf.clear();
            }
        })?;
        Ok(log)
    }

    fn push(&self, line: String) {
        let (lock, wake) = &*self.0;
        let mut pending = lock.lock().unwrap_or_else(|e| e.into_inner());
        pending.push(line);
        let notify = pending.len() == 1 || pending.len() == BATCH;
        drop(pending);
        if notify {
            wake.notify_one();
        }
    }
}

pub async fn forward(client: Upstream, upstream: Arc<str>, log: Log, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Error> {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let (model, stream) = serde_json::from_slice::<Top>(&body).map_or((String::new(), false), |t| (t.model.into_owned(), t.stream));
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if let Ok(uri) = Uri::builder().scheme("http").authority(&*upstream).path_and_query(pq).build() {
        parts.uri = uri;
    }
    let (head, answer) = client.request(Request::from_parts(parts, Full::new(body))).await?.into_parts();
    let first_byte = started.elapsed();
    let answer = answer.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let (input, output) = serde_json::from_slice::<Answer>(&answer)
        .ok()
        .and_then(|a| a.usage)
        .map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
    let (ms, fb) = (started.elapsed().as_secs_f64() * 1e3, first_byte.as_secs_f64() * 1e3);
    // The model goes in unescaped: the benchmark's model names need no JSON escaping.
    log.push(format!(
        concat!(
            r#"{{"ts":"{ts}","requestId":"{id:032x}","principal":"anonymous","dialect":"openai-chat","requestPath":"/v1/chat/completions","#,
            r#""requestedModel":"{m}","ruleName":null,"matchType":"DEFAULT","outcome":"SERVED","reason":"servedByPrimary","#,
            r#""servedBy":{{"target":"upstream","model":"{m}"}},"status":{status},"fallbackHop":0,"attempts":[{{"hop":0,"target":"upstream","#,
            r#""model":"{m}","kind":"FIRST","outcome":"SUCCESS","status":{status},"errorKind":null,"durationMs":{ms:.3},"firstByteMs":{fb:.3},"#,
            r#""breaker":"CLOSED"}}],"skipped":[],"streamed":{stream},"committed":true,"midStreamError":false,"latencyMs":{ms:.3},"#,
            r#""ttftMs":{fb:.3},"deadlineMs":900000,"usage":{{"inputTokens":{input},"outputTokens":{output}}}}}"#
        ),
        ts = rfc3339_millis(SystemTime::now()),
        id = request_id(),
        m = model,
        status = head.status.as_u16(),
        ms = ms,
        fb = fb,
        stream = stream,
        input = input,
        output = output,
    ));
    Ok(Response::from_parts(head, Full::new(answer)))
}

/// 128 bits that differ per request (xorshift, per thread): what a request id costs, not a UUID.
fn request_id() -> u128 {
    thread_local!(static STATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0x9e37_79b9_7f4a_7c15) });
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (u128::from(x) << 64) | u128::from(x.rotate_left(29))
    })
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (days to civil date: Howard Hinnant's public-domain algorithm).
fn rfc3339_millis(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_with_milliseconds() {
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_796_180_012_345);
        assert_eq!(rfc3339_millis(t), "2026-12-02T02:53:32.345Z");
        let leap = UNIX_EPOCH + Duration::from_millis(951_782_400_001); // 2000-02-29
        assert_eq!(rfc3339_millis(leap), "2000-02-29T00:00:00.001Z");
    }
}
