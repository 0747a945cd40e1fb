//! Semantic lookup benchmark (issue 17, must-show 3): fills sidetrack's vector index with random
//! unit vectors plus planted near-duplicates, then times lookups.
//!
//! `cargo run --release --manifest-path bench/Cargo.toml -p vectors -- [ENTRIES] [DIMS] [LOOKUPS] [COS]`
//! (defaults 100000 1536 10000 0.97; COS: the planted near-duplicates' cosine with their original). The index is the gateway's own module, compiled in unchanged.

#[path = "../../../crates/gateway/src/state/vectors.rs"]
#[allow(dead_code)]
mod vectors;

use std::time::{Duration, Instant};

use vectors::{Quantised, Rng, VectorIndex};

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// This process's resident memory in bytes (Linux; 0 elsewhere).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn key(n: usize) -> [u8; 32] {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&(n as u64).to_le_bytes());
    k
}

fn main() {
    let entries = arg(1, 100_000);
    let dims = arg(2, 1536);
    let lookups = arg(3, 10_000);
    let cos: f32 = std::env::args()
        .nth(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0.97);
    let threshold = 0.95f32;
    let partition = [7u8; 32];
    let mut rng = Rng(0x5eed);
    let index = VectorIndex::new(entries);
    // Every 10th entry is kept as a planted original; its near-duplicate (cosine ≈ COS) is a query.
    let mut planted: Vec<(usize, Vec<f32>)> = Vec::with_capacity(entries / 10 + 1);
    let before = rss();
    let fill = Instant::now();
    for n in 0..entries {
        let v = rng.unit(dims);
        index.insert(partition, key(n), &Quantised::of(&v));
        if n % 10 == 0 {
            planted.push((n, v));
        }
    }
    let fill = fill.elapsed();
    // The planted originals are kept as f32 for the queries: not the index's memory.
    let planted_bytes = planted.len() * (dims * 4 + 24 + 16);
    let measured = rss().saturating_sub(before).saturating_sub(planted_bytes);
    // Half the lookups are planted near-duplicates (should hit their original), half are fresh
    // random vectors (should miss).
    let mut times: Vec<Duration> = Vec::with_capacity(lookups);
    let (mut dup_asked, mut dup_found, mut false_hits) = (0usize, 0usize, 0usize);
    for i in 0..lookups {
        let (want, q) = if i % 2 == 0 {
            let (n, v) = &planted[(i / 2) % planted.len()];
            (Some(*n), rng.near(v, cos))
        } else {
            (None, rng.unit(dims))
        };
        let t = Instant::now();
        let found = index.nearest(&partition, &q, threshold);
        times.push(t.elapsed());
        match want {
            Some(n) => {
                dup_asked += 1;
                if found.first().map(|f| f.0) == Some(key(n)) {
                    dup_found += 1;
                }
            }
            None => false_hits += usize::from(!found.is_empty()),
        }
    }
    times.sort();
    let pct = |p: f64| times[((times.len() as f64 * p) as usize).min(times.len() - 1)];
    println!("entries {entries} x {dims} dims, {lookups} lookups, threshold {threshold}");
    println!("fill {:.1} s", fill.as_secs_f64());
    println!(
        "lookup p50 {:?}  p99 {:?}  max {:?}",
        pct(0.50),
        pct(0.99),
        times[times.len() - 1]
    );
    println!(
        "recall@1 of planted near-duplicates (cos ~{cos}): {dup_found}/{dup_asked} = {:.4}",
        dup_found as f64 / dup_asked as f64
    );
    println!("false hits on random queries: {false_hits}");
    println!(
        "bytes per entry: {} estimated, {} measured (resident memory growth over the fill)",
        VectorIndex::bytes_per_entry(dims),
        measured / entries.max(1)
    );
}
