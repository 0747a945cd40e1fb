//! The vector index of semantic lookup (SPEC §12): per partition (what a semantic match must share
//! exactly, [`crate::state::store::StoreKey::partition`]), the exact keys of stored answers with
//! the unit vector of their question.
//!
//! Lookup is a quantised scan, not a graph: every entry keeps a sign-bit code (one bit per
//! dimension, 192 bytes at 1,536 dimensions) and an 8-bit copy of its vector (one byte per
//! dimension). A query's code is compared with every code of its partition by Hamming distance
//! (XOR and popcount over `u64` words) to shortlist the [`SHORTLIST`] nearest, and those are
//! reranked by the cosine of the query against their 8-bit vectors. The nearest entry at or above
//! the threshold is the match. docs/cache.md has the numbers behind this choice.
//!
//! Bounded: at most `capacity` entries (`cache.maxEntries`) over all partitions; past it the
//! oldest entry goes first. An entry whose answer the store no longer holds is removed when a
//! lookup finds it ([`VectorIndex::remove`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{PoisonError, RwLock};

/// How many entries the first pass (Hamming distance over the first [`PREFIX_WORDS`] words of the
/// codes) keeps for the second (over the whole codes).
pub const FIRST_PASS: usize = 1024;

/// How many Hamming-nearest entries (whole codes) are reranked by cosine.
pub const SHORTLIST: usize = 128;

/// The first pass reads this many `u64` words of each code (128 bits: 16 bytes an entry, so the
/// pass over 100,000 entries reads 1.6 MB instead of 19.2 MB).
pub const PREFIX_WORDS: usize = 2;

/// At most this many matches at or above the threshold are returned, nearest first.
pub const MATCHES: usize = 4;

/// Scales `v` to unit length. False when it has no direction (all zero) or holds a NaN/∞.
pub fn normalise(v: &mut [f32]) -> bool {
    let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return false;
    }
    for x in v.iter_mut() {
        *x /= norm;
    }
    true
}

/// A vector quantised to one signed byte per dimension (its largest component becomes ±127).
/// Only its direction is kept: the cosine needs nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantised(pub Box<[i8]>);

impl Quantised {
    pub fn of(v: &[f32]) -> Quantised {
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let k = if max > 0.0 { 127.0 / max } else { 0.0 };
        Quantised(
            v.iter()
                .map(|x| (x * k).round().clamp(-127.0, 127.0) as i8)
                .collect(),
        )
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        self.0.iter().map(|&x| x as u8).collect()
    }

    pub fn from_bytes(b: &[u8]) -> Quantised {
        Quantised(b.iter().map(|&x| x as i8).collect())
    }

    pub fn dims(&self) -> usize {
        self.0.len()
    }

    /// Its sign bits in `words` `u64` words (bit `j` set when component `j` is positive).
    fn sign_code(&self, words: usize) -> Vec<u64> {
        let mut code = vec![0u64; words];
        for (j, &x) in self.0.iter().enumerate() {
            if x > 0 {
                code[j / 64] |= 1 << (j % 64);
            }
        }
        code
    }

    /// 1 / its length (0 for an all-zero vector).
    fn inv_norm(&self) -> f32 {
        let sq: i64 = self.0.iter().map(|&x| i64::from(x) * i64::from(x)).sum();
        if sq > 0 {
            1.0 / (sq as f32).sqrt()
        } else {
            0.0
        }
    }
}

/// One partition's entries, in parallel arrays (slot `i` of each belongs to one entry).
struct Partition {
    dims: usize,
    /// `u64` words per sign code.
    words: usize,
    keys: Vec<[u8; 32]>,
    /// The first [`PREFIX_WORDS`] words of every code, contiguous (the first pass reads only these).
    prefixes: Vec<u64>,
    codes: Vec<u64>,
    vectors: Vec<i8>,
    /// 1 / the length of the 8-bit vector.
    inv_norms: Vec<f32>,
    slots: HashMap<[u8; 32], usize>,
}

impl Partition {
    fn new(dims: usize) -> Partition {
        Partition {
            dims,
            words: dims.div_ceil(64),
            keys: Vec::new(),
            prefixes: Vec::new(),
            codes: Vec::new(),
            vectors: Vec::new(),
            inv_norms: Vec::new(),
            slots: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn prefix_words(&self) -> usize {
        self.words.min(PREFIX_WORDS)
    }

    /// Writes or overwrites slot `i` (`i == len`: a new slot).
    fn set(&mut self, i: usize, exact: [u8; 32], q: &Quantised) {
        let w = self.words;
        let code = q.sign_code(w);
        let inv = q.inv_norm();
        let pw = self.prefix_words();
        if i == self.len() {
            self.keys.push(exact);
            self.prefixes.extend_from_slice(&code[..pw]);
            self.codes.extend_from_slice(&code);
            self.vectors.extend_from_slice(&q.0);
            self.inv_norms.push(inv);
        } else {
            self.keys[i] = exact;
            self.prefixes[i * pw..(i + 1) * pw].copy_from_slice(&code[..pw]);
            self.codes[i * w..(i + 1) * w].copy_from_slice(&code);
            self.vectors[i * self.dims..(i + 1) * self.dims].copy_from_slice(&q.0);
            self.inv_norms[i] = inv;
        }
        self.slots.insert(exact, i);
    }

    /// Removes slot `i` by moving the last slot into it.
    fn remove_slot(&mut self, i: usize) {
        let last = self.len() - 1;
        let (w, d, pw) = (self.words, self.dims, self.prefix_words());
        let gone = self.keys[i];
        self.slots.remove(&gone);
        if i != last {
            let moved = self.keys[last];
            self.keys[i] = moved;
            self.prefixes
                .copy_within(last * pw..(last + 1) * pw, i * pw);
            self.codes.copy_within(last * w..(last + 1) * w, i * w);
            self.vectors.copy_within(last * d..(last + 1) * d, i * d);
            self.inv_norms[i] = self.inv_norms[last];
            self.slots.insert(moved, i);
        }
        self.keys.truncate(last);
        self.prefixes.truncate(last * pw);
        self.codes.truncate(last * w);
        self.vectors.truncate(last * d);
        self.inv_norms.truncate(last);
    }

    /// The slots of the [`SHORTLIST`] codes nearest to `code` by Hamming distance: a first pass
    /// over the prefixes keeps about [`FIRST_PASS`] (a histogram of the distances gives the cut,
    /// no heap), a second over the whole codes of those keeps the nearest [`SHORTLIST`].
    fn shortlist(&self, code: &[u64]) -> Vec<u32> {
        let n = self.len();
        let pw = self.prefix_words();
        let mut candidates: Vec<u32> = if n <= FIRST_PASS || pw == self.words {
            (0..n as u32).collect()
        } else {
            SCRATCH.with(|scratch| {
                let mut d = scratch.borrow_mut();
                d.clear();
                if pw == PREFIX_WORDS {
                    let mut q = [0u64; PREFIX_WORDS];
                    q.copy_from_slice(&code[..PREFIX_WORDS]);
                    d.extend(
                        self.prefixes
                            .chunks_exact(PREFIX_WORDS)
                            .map(|c| prefix_distance(c, &q)),
                    );
                } else {
                    let q = &code[..pw];
                    d.extend(
                        self.prefixes
                            .chunks_exact(pw)
                            .map(|c| hamming(c, q).min(255) as u8),
                    );
                }
                let mut histogram = [0u32; 256];
                for &x in d.iter() {
                    histogram[usize::from(x)] += 1;
                }
                let mut cut = 0usize;
                let mut kept = 0usize;
                for (distance, &count) in histogram.iter().enumerate() {
                    kept += count as usize;
                    cut = distance;
                    if kept >= FIRST_PASS {
                        break;
                    }
                }
                let cut = cut as u8;
                let mut out = Vec::with_capacity(kept.min(2 * FIRST_PASS));
                for (i, &x) in d.iter().enumerate() {
                    if x <= cut {
                        out.push(i as u32);
                        // Ties at the cut beyond twice the pass size are left out.
                        if out.len() == 2 * FIRST_PASS {
                            break;
                        }
                    }
                }
                out
            })
        };
        if candidates.len() > SHORTLIST {
            let w = self.words;
            let mut scored: Vec<(u32, u32)> = candidates
                .iter()
                .map(|&i| {
                    let i = i as usize;
                    (hamming(&self.codes[i * w..(i + 1) * w], code), i as u32)
                })
                .collect();
            scored.select_nth_unstable(SHORTLIST - 1);
            candidates = scored[..SHORTLIST].iter().map(|&(_, i)| i).collect();
        }
        candidates
    }

    /// The cosine of entry `i` with a query quantised like the entries (`inv`: 1 / its length).
    /// Integer products and sums: the compiler vectorises them (a float sum it may not reorder).
    fn cosine(&self, i: usize, query: &Quantised, inv: f32) -> f32 {
        let v = &self.vectors[i * self.dims..(i + 1) * self.dims];
        let dot: i32 = v
            .iter()
            .zip(query.0.iter())
            .map(|(&a, &b)| i32::from(a) * i32::from(b))
            .sum();
        dot as f32 * self.inv_norms[i] * inv
    }
}

thread_local! {
    /// The first pass's distances (one byte an entry), kept between lookups on a thread.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The Hamming distance of two [`PREFIX_WORDS`]-word prefixes, capped at 255: the bit counts of
/// the words are summed per byte before one final reduction (a portable popcount that needs no
/// CPU feature).
#[inline]
fn prefix_distance(c: &[u64], q: &[u64; PREFIX_WORDS]) -> u8 {
    const M1: u64 = 0x5555_5555_5555_5555;
    const M2: u64 = 0x3333_3333_3333_3333;
    const M4: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    const H01: u64 = 0x0101_0101_0101_0101;
    let mut acc = 0u64;
    for (a, b) in c.iter().zip(q) {
        let mut x = a ^ b;
        x -= (x >> 1) & M1;
        x = (x & M2) + ((x >> 2) & M2);
        acc += (x + (x >> 4)) & M4;
    }
    // At most 3 × 64 = 192 bits: the byte sum cannot wrap.
    const _: () = assert!(PREFIX_WORDS <= 3);
    (acc.wrapping_mul(H01) >> 56) as u8
}

fn hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

struct Inner {
    partitions: HashMap<[u8; 32], Partition>,
    /// Each entry's partition and insertion number.
    entries: HashMap<[u8; 32], ([u8; 32], u64)>,
    /// Insertion order, oldest first (an entry removed since then leaves a stale item, skipped).
    order: VecDeque<(u64, [u8; 32])>,
    seq: u64,
    capacity: usize,
}

impl Inner {
    fn remove(&mut self, exact: &[u8; 32]) -> bool {
        let Some((partition, _)) = self.entries.remove(exact) else {
            return false;
        };
        if let Some(p) = self.partitions.get_mut(&partition) {
            if let Some(&i) = p.slots.get(exact) {
                p.remove_slot(i);
            }
            if p.len() == 0 {
                self.partitions.remove(&partition);
            }
        }
        true
    }

    fn evict(&mut self) {
        while self.entries.len() > self.capacity {
            let Some((seq, exact)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&exact).is_some_and(|e| e.1 == seq) {
                self.remove(&exact);
            }
        }
        // Stale order items (entries removed by lookups) are bounded by the live count.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order
                .retain(|(seq, k)| entries.get(k).is_some_and(|e| e.1 == *seq));
        }
    }
}

/// The index: partitions of (exact key, vector), bounded by `capacity` entries in all.
pub struct VectorIndex {
    inner: RwLock<Inner>,
}

impl VectorIndex {
    pub fn new(capacity: usize) -> VectorIndex {
        VectorIndex {
            inner: RwLock::new(Inner {
                partitions: HashMap::new(),
                entries: HashMap::new(),
                order: VecDeque::new(),
                seq: 0,
                capacity,
            }),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new capacity (a config reload): evicts the oldest at once when it shrank.
    pub fn set_capacity(&self, capacity: usize) {
        let mut inner = self.write();
        inner.capacity = capacity;
        inner.evict();
    }

    /// Drops every entry (the embeddings model changed: old vectors are not comparable).
    pub fn clear(&self) {
        let mut inner = self.write();
        inner.partitions.clear();
        inner.entries.clear();
        inner.order.clear();
    }

    /// Adds (or replaces) `exact`'s vector in `partition`. False when the vector's dimensions
    /// differ from the partition's (another embeddings model) or it is empty.
    pub fn insert(&self, partition: [u8; 32], exact: [u8; 32], q: &Quantised) -> bool {
        if q.dims() == 0 {
            return false;
        }
        let mut inner = self.write();
        if let Some((old_partition, _)) = inner.entries.get(&exact).copied() {
            if old_partition == partition {
                if let Some(p) = inner.partitions.get_mut(&partition) {
                    if p.dims != q.dims() {
                        return false;
                    }
                    if let Some(&i) = p.slots.get(&exact) {
                        p.set(i, exact, q);
                        return true;
                    }
                }
            }
            inner.remove(&exact);
        }
        let p = inner
            .partitions
            .entry(partition)
            .or_insert_with(|| Partition::new(q.dims()));
        if p.dims != q.dims() {
            return false;
        }
        let n = p.len();
        p.set(n, exact, q);
        inner.seq += 1;
        let seq = inner.seq;
        inner.entries.insert(exact, (partition, seq));
        inner.order.push_back((seq, exact));
        inner.evict();
        true
    }

    /// Removes `exact`'s entry (its answer is gone from the store).
    pub fn remove(&self, exact: &[u8; 32]) -> bool {
        self.write().remove(exact)
    }

    /// The entries of `partition` whose cosine with `query` (a unit vector) is at least
    /// `threshold`: up to [`MATCHES`], nearest first, with their cosine.
    pub fn nearest(
        &self,
        partition: &[u8; 32],
        query: &[f32],
        threshold: f32,
    ) -> Vec<([u8; 32], f32)> {
        let inner = self.read();
        let Some(p) = inner.partitions.get(partition) else {
            return Vec::new();
        };
        if p.dims != query.len() {
            return Vec::new();
        }
        let q = Quantised::of(query);
        let code = q.sign_code(p.words);
        let inv = q.inv_norm();
        let mut found: Vec<([u8; 32], f32)> = p
            .shortlist(&code)
            .into_iter()
            .filter_map(|i| {
                let i = i as usize;
                let c = p.cosine(i, &q, inv);
                (c >= threshold).then(|| (p.keys[i], c))
            })
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1));
        found.truncate(MATCHES);
        found
    }

    pub fn len(&self) -> usize {
        self.read().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held per entry at `dims` dimensions: the code, the 8-bit vector, its norm, the key
    /// in the partition's arrays, its slot map and the index's own maps (approximate: map slots
    /// counted at their payload size times 1.5 for spare capacity).
    pub fn bytes_per_entry(dims: usize) -> usize {
        let code = dims.div_ceil(64) * 8 + dims.div_ceil(64).min(PREFIX_WORDS) * 8;
        let vector = dims + 4 + 32;
        let maps = (32 + 8) * 3 / 2 + (32 + 32 + 8) * 3 / 2 + (8 + 32);
        code + vector + maps
    }
}

/// Deterministic pseudo-random numbers for tests and the benchmark (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Roughly normal (the sum of four uniforms, centred).
    pub fn gaussian(&mut self) -> f32 {
        let mut s = 0.0f32;
        for _ in 0..4 {
            s += (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        }
        s - 2.0
    }

    /// A random unit vector.
    pub fn unit(&mut self, dims: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dims).map(|_| self.gaussian()).collect();
        normalise(&mut v);
        v
    }

    /// A unit vector whose cosine with the unit vector `v` is about `cos`.
    pub fn near(&mut self, v: &[f32], cos: f32) -> Vec<f32> {
        let noise = self.unit(v.len());
        let s = (1.0 - cos * cos).max(0.0).sqrt();
        let mut out: Vec<f32> = v.iter().zip(&noise).map(|(a, b)| cos * a + s * b).collect();
        normalise(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&n.to_le_bytes());
        k
    }

    const P: [u8; 32] = [1; 32];
    const DIMS: usize = 256;

    #[test]
    fn a_planted_near_duplicate_is_found_among_random_vectors() {
        let mut rng = Rng(7);
        let idx = VectorIndex::new(100_000);
        let mut planted = Vec::new();
        for n in 0..5_000u32 {
            let v = rng.unit(DIMS);
            if n.is_multiple_of(500) {
                planted.push((n, v.clone()));
            }
            assert!(idx.insert(P, key(n), &Quantised::of(&v)));
        }
        for (n, v) in planted {
            let q = rng.near(&v, 0.97);
            let found = idx.nearest(&P, &q, 0.9);
            assert_eq!(found.first().map(|f| f.0), Some(key(n)), "planted {n}");
            assert!((found[0].1 - 0.97).abs() < 0.02, "{}", found[0].1);
        }
    }

    #[test]
    fn the_threshold_is_respected() {
        let mut rng = Rng(11);
        let idx = VectorIndex::new(100);
        let v = rng.unit(DIMS);
        idx.insert(P, key(1), &Quantised::of(&v));
        let q = rng.near(&v, 0.90);
        assert!(idx.nearest(&P, &q, 0.95).is_empty(), "0.90 < 0.95");
        assert_eq!(idx.nearest(&P, &q, 0.85).len(), 1);
        // An unrelated vector is far below any useful threshold.
        assert!(idx.nearest(&P, &rng.unit(DIMS), 0.5).is_empty());
        // The same vector is a match at threshold 1 minus the quantisation error.
        assert!(idx.nearest(&P, &v, 0.999).len() == 1);
    }

    #[test]
    fn partitions_are_isolated_and_dimensions_must_agree() {
        let mut rng = Rng(3);
        let idx = VectorIndex::new(100);
        let v = rng.unit(DIMS);
        idx.insert(P, key(1), &Quantised::of(&v));
        assert!(idx.nearest(&[2; 32], &v, 0.5).is_empty());
        assert_eq!(idx.nearest(&P, &v, 0.5).len(), 1);
        assert!(!idx.insert(P, key(2), &Quantised::of(&rng.unit(DIMS / 2))));
        assert!(idx.nearest(&P, &v[..DIMS / 2], 0.0).is_empty());
    }

    #[test]
    fn the_index_is_bounded_oldest_first_and_entries_can_be_removed_or_replaced() {
        let mut rng = Rng(5);
        let idx = VectorIndex::new(10);
        let vs: Vec<Vec<f32>> = (0..25).map(|_| rng.unit(DIMS)).collect();
        for (n, v) in vs.iter().enumerate() {
            // Spread over two partitions: the bound is over all of them.
            let p = if n.is_multiple_of(2) { P } else { [2; 32] };
            idx.insert(p, key(n as u32), &Quantised::of(v));
            assert!(idx.len() <= 10);
        }
        assert_eq!(idx.len(), 10);
        let p_of = |n: usize| if n.is_multiple_of(2) { P } else { [2; 32] };
        assert!(idx.nearest(&p_of(0), &vs[0], 0.99).is_empty(), "evicted");
        assert_eq!(idx.nearest(&p_of(24), &vs[24], 0.99)[0].0, key(24));
        // Removing (a stale entry) and replacing.
        assert!(idx.remove(&key(24)));
        assert!(idx.nearest(&p_of(24), &vs[24], 0.99).is_empty());
        assert_eq!(idx.nearest(&p_of(22), &vs[22], 0.99)[0].0, key(22));
        idx.insert(P, key(22), &Quantised::of(&vs[0]));
        assert!(idx.nearest(&P, &vs[22], 0.99).is_empty(), "replaced");
        assert_eq!(idx.nearest(&P, &vs[0], 0.99)[0].0, key(22));
        // Many removals and inserts leave no unbounded bookkeeping behind.
        for n in 100..2_000u32 {
            idx.insert(P, key(n), &Quantised::of(&vs[(n % 25) as usize]));
            idx.remove(&key(n));
        }
        let inner = idx.read();
        assert!(inner.order.len() <= 2 * inner.entries.len() + 65);
        drop(inner);
        idx.set_capacity(3);
        assert_eq!(idx.len(), 3);
    }

    #[test]
    fn quantised_bytes_round_trip() {
        let mut rng = Rng(9);
        let q = Quantised::of(&rng.unit(DIMS));
        assert_eq!(Quantised::from_bytes(&q.to_bytes()), q);
        assert!(q.0.iter().any(|&x| x.abs() == 127));
    }
}
