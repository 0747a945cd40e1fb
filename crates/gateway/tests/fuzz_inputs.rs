//! The gateway's fuzz properties (crates/gateway/fuzz/checks.rs) over a few thousand generated
//! inputs in every `cargo test`: seeds mutated by a fixed-seed generator (byte flips, inserted
//! tokens that matter to HTTP and percent-decoding, cuts, duplications, splices). cargo-fuzz
//! explores further; this keeps CI exercising the same code.
#![allow(clippy::unwrap_used)]

#[path = "../fuzz/checks.rs"]
mod checks;

/// xorshift64*: reproducible, no dependency.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b":",
    b" ",
    b"/",
    b"//",
    b"%",
    b"%2F",
    b"%3A",
    b"%zz",
    b"%f",
    b"%E2%82",
    b"\0",
    b"\xff\xfe",
    "é".as_bytes(),
    b"/model/",
    b"/inference",
    b"/converse",
    b"content-length: 99999999999999999999\r\n",
    b"content-length: 5\r\ncontent-length: 6\r\n",
    b"transfer-encoding: chunked\r\n",
    b"ffffffffffffffff\r\n",
    b"0\r\n\r\n",
    b"origin: https://app.example\r\n",
    b"origin: null\r\n",
    b"host: [::1\r\n",
    b"expect: 100-continue\r\n",
    b"connection: upgrade\r\nupgrade: h2c\r\n",
    b"HTTP/1.1",
    b"HTTP/2.0",
    b"{\"model\":",
];

fn mutate(g: &mut Gen, seeds: &[&str]) -> Vec<u8> {
    let mut v = g.pick(seeds).as_bytes().to_vec();
    for _ in 0..=g.below(4) {
        let at = g.below(v.len() + 1);
        match g.below(6) {
            0 if !v.is_empty() => {
                let i = g.below(v.len());
                v[i] ^= 1 << g.below(8);
            }
            1 => {
                let token = *g.pick(TOKENS);
                v.splice(at..at, token.iter().copied());
            }
            2 if !v.is_empty() => {
                let end = (at + g.below(16)).min(v.len());
                v.drain(at..end);
            }
            3 => v.truncate(at),
            4 => {
                let end = (at + g.below(32)).min(v.len());
                let piece = v[at..end].to_vec();
                v.splice(at..at, piece);
            }
            _ => {
                let other = g.pick(seeds).as_bytes();
                let from = g.below(other.len());
                v.splice(at..at, other[from..].iter().copied());
            }
        }
    }
    v
}

#[test]
fn request_paths_keep_their_properties_over_generated_inputs() {
    let mut g = Gen(0x5eed_0001);
    for seed in checks::PATH_SEEDS {
        checks::request_path(seed.as_bytes());
    }
    for _ in 0..20_000 {
        checks::request_path(&mutate(&mut g, checks::PATH_SEEDS));
    }
}

#[test]
fn the_admin_check_lets_nothing_foreign_pass_over_generated_inputs() {
    const SEEDS: &[&str] = &[
        "POST\n127.0.0.1:9090\nhttp://127.0.0.1:9090\napplication/json",
        "POST\nlocalhost:9090\nhttp://evil.example\napplication/json",
        "GET\n[::1]:9090\nhttps://[::1]:9090\ntext/plain",
        "POST\nevil.example:9090\nhttp://evil.example:9090\napplication/json; charset=utf-8",
        "DELETE\n10.0.0.5\nnull\napplication/x-www-form-urlencoded",
    ];
    let mut g = Gen(0x5eed_0002);
    for _ in 0..20_000 {
        checks::admin_request(&mutate(&mut g, SEEDS));
    }
}

#[tokio::test]
async fn request_heads_fed_to_the_data_plane_neither_panic_nor_hang() {
    let gw = checks::gateway().await;
    for seed in checks::HEAD_SEEDS {
        // Every seed is answered: the inputs reach the service, not just the parser.
        let answer = checks::request_head(&gw, seed.as_bytes()).await;
        assert!(!answer.is_empty(), "no answer to {seed:?}");
    }
    let mut g = Gen(0x5eed_0003);
    let mut answered = 0;
    for _ in 0..1_500 {
        let input = mutate(&mut g, checks::HEAD_SEEDS);
        answered += usize::from(!checks::request_head(&gw, &input).await.is_empty());
    }
    assert!(
        answered > 500,
        "only {answered} of 1500 inputs got an answer"
    );
}
