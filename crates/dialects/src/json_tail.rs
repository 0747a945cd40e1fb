//! Reading one top-level member of a JSON object (the answer's `usage`) without parsing the whole
//! object.
//!
//! Why: the gateway reads the usage of every non-streamed answer it relays, on the request's hot
//! path. A full `serde_json` parse tokenises every member of the answer (id, choices, content …)
//! to keep one small object near its end; that was most of the cost of
//! `Dialect::response_usage`. [`top_level_member`] finds the member's key with a vectorised byte
//! scan, then parses only the member and the members after it.
//!
//! It never guesses. It returns `None` whenever it cannot show that its answer is what the
//! caller's full parse would read, and then the caller runs that full parse. The full parse is a
//! `#[derive(Deserialize)]` struct that ignores the other members, or a `serde_json::Value`. For a
//! body whose bytes before the member that parse accepts, `Some(value)` means it would read the
//! same `value`:
//!
//! 1. The body starts with `{`, so its top level is an object.
//! 2. The bytes `"name"` occur exactly once, with `{` or `,` before them (whitespace aside). An
//!    unescaped quote that follows `{`, `,` or whitespace opens a string in valid JSON. Step 3
//!    reads that string followed by `:`, which makes it a key.
//! 3. `{` followed by the body from that key on parses, with serde_json, as one object followed
//!    only by whitespace: the member's value read as `T`, the members after it with values read as
//!    `Rest`. So the object that holds the member ends exactly where the body does, which makes it
//!    the top-level one. Its values sit one object deep, as in the full parse, so serde_json's
//!    nesting limit applies to them the same way. Its commas, colons and trailing bytes are checked
//!    by the same code.
//! 4. No other member of the top-level object has that name. The plain spelling occurs only once.
//!    Before it there is no `\u006?`/`\u007?` escape: any escaped spelling of a lower-case ASCII
//!    name contains one. After it, keys are read as borrowed `&str`, and that fails on any escape.
//!    So a derived struct, which errors on a duplicate field, and a `Value`, where the last
//!    duplicate wins, would both read this member.
//! 5. `T` is the caller's own type for the member and `Rest` the type the full parse reads the
//!    other members as (`IgnoredAny` for a derived struct, `Value` for a `Value`), so each value is
//!    accepted or rejected exactly as in the full parse.
//!
//! Not proved: that the bytes between the opening `{` and the member (the head) are valid JSON.
//! Checking that would take the parse this module avoids. The head is only checked to hold exactly
//! one more `{`/`[` than `}`/`]`, strings not told apart, as a member at depth 1 does. That rejects
//! the way a real answer could mislead the steps above: an answer cut off (the gateway reads usage
//! of a body whose upstream dropped mid-way) right after a nested object that has a `usage` member.
//! What remains is a body that the full parse rejects only because of its head, which cannot be
//! told from a valid one without that parse. Examples are garbage or a second JSON document in the
//! head or, for a `Value`, invalid UTF-8 or a number beyond `f64` in a head string or number.
//! For such a body this returns the member where the full parse returns nothing. No provider sends
//! such an answer, and the usage numbers are the upstream's own word either way.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeOwned, Deserializer as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

/// Bytes per step of the key scan. The per-step loop works on fixed-size arrays so it compiles
/// to vector compares (about one instruction per byte).
const CHUNK: usize = 32;

/// The value of the top-level member `name` of the JSON object `body`, read as `T`, or `None` when
/// this cannot be shown cheaply. The caller must then fall back to its full parse (see the module
/// docs for what `Some` guarantees). `Rest` is how the caller's full parse reads the other
/// members: `serde::de::IgnoredAny` for a derived struct, `serde_json::Value` for a `Value`.
/// `name` is lower-case ASCII letters.
pub(crate) fn top_level_member<T, Rest>(body: &[u8], name: &str) -> Option<T>
where
    T: DeserializeOwned,
    Rest: DeserializeOwned,
{
    debug_assert!(!name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase()));
    if skip_ws(body).first() != Some(&b'{') {
        return None;
    }
    let Key::At { at, depth: 1 } = find_key(body, name.as_bytes()) else {
        return None;
    };
    let (head, from_key) = body.split_at(at);
    if !matches!(trim_ws_end(head).last(), Some(b'{' | b',')) {
        return None;
    }
    // `{` and the body from the key on is the top-level object without the members before the
    // key: parsed as an object, its values sit as deep as in the full parse and its commas,
    // braces and trailing bytes are checked by serde_json itself. It is copied to the stack when
    // small (the usual case), and read as `str` (one UTF-8 check instead of one per string; the
    // full parse reads bytes, so a region that is not UTF-8 is left to it).
    let mut stack = [0u8; 512];
    let mut heap = Vec::new();
    let object = match stack.get_mut(..=from_key.len()) {
        Some(object) => object,
        None => {
            heap.resize(from_key.len() + 1, 0);
            &mut heap[..]
        }
    };
    object[0] = b'{';
    object[1..].copy_from_slice(from_key);
    let object = std::str::from_utf8(object).ok()?;
    let mut de = serde_json::Deserializer::from_str(object);
    let value = (&mut de)
        .deserialize_map(FirstMember::<T, Rest>(name, PhantomData))
        .ok()?;
    de.end().ok()?;
    Some(value)
}

/// Reads an object whose first member is `name`, as `T`, and whose other members have plain keys
/// (borrowed `&str`, which fails on any escape) and values that read as `Rest`.
struct FirstMember<'n, T, Rest>(&'n str, PhantomData<fn() -> (T, Rest)>);

impl<'de, T: Deserialize<'de>, Rest: Deserialize<'de>> Visitor<'de> for FirstMember<'_, T, Rest> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object whose first member is `{}`", self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        if map.next_key::<&'de str>()? != Some(self.0) {
            return Err(serde::de::Error::custom("not the member looked for"));
        }
        let value = map.next_value::<T>()?;
        while map.next_key::<&'de str>()?.is_some() {
            map.next_value::<Rest>()?;
        }
        Ok(value)
    }
}

/// Where a key's plain spelling `"name"` occurs in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// Not at all, and no `\u006?`/`\u007?` escape anywhere.
    Nowhere,
    /// Exactly once, with no `\u006?`/`\u007?` escape before it.
    At {
        /// Offset of the opening quote.
        at: usize,
        /// `{` and `[` minus `}` and `]` bytes before it, strings not told apart: its depth in a
        /// body whose strings hold balanced brackets.
        depth: isize,
    },
    /// More than once, or after an escape that could spell it too.
    Unsure,
}

/// Scans `body` for the plain spelling `"name"` of a key and for escaped lower-case ASCII
/// letters (`\u006?`, `\u007?`: what any other spelling of the key would contain), counting
/// brackets before the key. `name` is lower-case ASCII letters.
///
/// For `usage`, the same answer as [`find_key_by_steps`] (a test compares them) by `memchr`'s
/// searches with a searcher built once: the first `"usage"`, another one from the byte after it
/// (occurrences may overlap), the backslashes before it (or anywhere, when there is none), then
/// the brackets before it. Other names take the one-pass scan.
pub(crate) fn find_key(body: &[u8], name: &[u8]) -> Key {
    static USAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));
    if name != b"usage" {
        return find_key_by_steps(body, name);
    }
    // `body[..end]` holds a backslash that starts `\u006?` or `\u007?`.
    let escaped_letter = |end: usize| {
        memchr::memchr_iter(b'\\', &body[..end])
            .any(|j| matches!(body[j + 1..], [b'u', b'0', b'0', b'6' | b'7', ..]))
    };
    match USAGE.find(body) {
        None if escaped_letter(body.len()) => Key::Unsure,
        None => Key::Nowhere,
        Some(at) => {
            if USAGE.find(&body[at + 1..]).is_some() || escaped_letter(at) {
                return Key::Unsure;
            }
            Key::At {
                at,
                depth: bracket_balance(&body[..at]),
            }
        }
    }
}

/// [`find_key`] by one pass of vectorised steps: what it answers for names other than `usage`,
/// and its reference in the tests.
pub(crate) fn find_key_by_steps(body: &[u8], name: &[u8]) -> Key {
    let Some(&first) = name.first() else {
        return Key::Unsure;
    };
    let mut found = None;
    // Bracket balance of `body[..start]` until the key is found.
    let mut depth = 0;
    let mut start = 0;
    loop {
        start = match found {
            None => next_candidate_step::<true>(body, start, first, &mut depth),
            Some(_) => next_candidate_step::<false>(body, start, first, &mut depth),
        };
        let step_end = (start + CHUNK).min(body.len());
        // Candidates are pairs of bytes: positions up to the last but one.
        let end = step_end.min(body.len().saturating_sub(1));
        if start >= end {
            break;
        }
        for j in start..end {
            match body[j] {
                b'"' if body[j + 1] == first => {
                    let rest = &body[j + 1..];
                    if rest.get(..name.len()) == Some(name) && rest.get(name.len()) == Some(&b'"') {
                        if found.is_some() {
                            return Key::Unsure;
                        }
                        found = Some((j, depth + bracket_balance(&body[start..j])));
                    }
                }
                b'\\'
                    if found.is_none()
                        && matches!(body[j + 1..], [b'u', b'0', b'0', b'6' | b'7', ..]) =>
                {
                    return Key::Unsure;
                }
                _ => {}
            }
        }
        if found.is_none() {
            depth += bracket_balance(&body[start..step_end]);
        }
        start = step_end;
    }
    match found {
        Some((at, depth)) => Key::At { at, depth },
        None => Key::Nowhere,
    }
}

/// The start of the first step of [`CHUNK`] positions, from `start` on, that may hold a candidate
/// for [`find_key`]: a quote followed by `first`, or a backslash followed by `u`. When no full
/// step is left, `start` itself if the rest may hold one, else the end of `body`. With `COUNT`,
/// adds the bracket balance of the steps it passes over to `depth`. A tight loop of branch-free
/// steps so that it vectorises.
fn next_candidate_step<const COUNT: bool>(
    body: &[u8],
    mut start: usize,
    first: u8,
    depth: &mut isize,
) -> usize {
    let has_candidate = |here: &[u8; CHUNK], next: &[u8; CHUNK]| {
        let mut any = 0u8;
        for (&a, &b) in here.iter().zip(next) {
            any |= (u8::from(a == b'"') & u8::from(b == first))
                | (u8::from(a == b'\\') & u8::from(b == b'u'));
        }
        any != 0
    };
    let step = |from: usize| -> Option<(&[u8; CHUNK], &[u8; CHUNK])> {
        let here = body.get(from..from + CHUNK)?.try_into().ok()?;
        let next = body.get(from + 1..from + 1 + CHUNK)?.try_into().ok()?;
        Some((here, next))
    };
    // Per-lane bracket counts, summed every 127 steps, before they could overflow.
    let mut lanes = [0i8; CHUNK];
    let mut counted = 0;
    while let Some((here, next)) = step(start) {
        if has_candidate(here, next) {
            break;
        }
        if COUNT {
            for (lane, &b) in lanes.iter_mut().zip(here) {
                *lane += bracket_weight(b);
            }
            counted += 1;
            if counted == 127 {
                *depth += lanes.iter().map(|&n| isize::from(n)).sum::<isize>();
                lanes = [0; CHUNK];
                counted = 0;
            }
        }
        start += CHUNK;
    }
    if COUNT {
        *depth += lanes.iter().map(|&n| isize::from(n)).sum::<isize>();
    }
    if step(start).is_some() {
        return start;
    }
    // The rest is shorter than a step: look at the last full step instead (it overlaps steps
    // already seen, which only costs a closer look when it holds a candidate). Without one, the
    // rest holds no key, so its brackets do not matter.
    match body.len().checked_sub(CHUNK + 1).and_then(step) {
        Some((here, next)) if !has_candidate(here, next) => body.len(),
        _ => start,
    }
}

/// +1 for `{` and `[`, -1 for `}` and `]`, else 0.
#[inline(always)]
fn bracket_weight(b: u8) -> i8 {
    // `[` | 0x20 is `{` and `]` | 0x20 is `}`; no other byte maps to either.
    i8::from(b | 0x20 == b'{') - i8::from(b | 0x20 == b'}')
}

/// The bracket balance of `bytes`: per-lane counts over [`CHUNK`]-byte steps, summed every 127
/// steps (before they could overflow), then the bytes left over.
fn bracket_balance(bytes: &[u8]) -> isize {
    let mut total = 0;
    for block in bytes.chunks(127 * CHUNK) {
        let mut lanes = [0i8; CHUNK];
        let mut steps = block.chunks_exact(CHUNK);
        for step in &mut steps {
            for (lane, &b) in lanes.iter_mut().zip(step) {
                *lane += bracket_weight(b);
            }
        }
        total += lanes.iter().map(|&n| isize::from(n)).sum::<isize>();
        total += steps
            .remainder()
            .iter()
            .map(|&b| isize::from(bracket_weight(b)))
            .sum::<isize>();
    }
    total
}

/// JSON whitespace, exactly as serde_json skips it.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\t' | b'\r')
}

pub(crate) fn skip_ws(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().take_while(|&&b| is_ws(b)).count();
    &bytes[n..]
}

fn trim_ws_end(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().rev().take_while(|&&b| is_ws(b)).count();
    &bytes[..bytes.len() - n]
}

/// The top-level `usage` of an answer exactly as `#[derive(Deserialize)] struct { usage:
/// Option<U> }` reads it (so `None` for a missing or `null` usage and for a body that does not
/// parse), through [`top_level_member`] when it can and the full parse when not.
pub(crate) fn response_usage<U: DeserializeOwned>(body: &[u8]) -> Option<U> {
    if let Some(usage) = top_level_member::<Option<U>, IgnoredAny>(body, "usage") {
        return usage;
    }
    full_response_usage(body)
}

/// The full parse behind [`response_usage`].
pub(crate) fn full_response_usage<U: DeserializeOwned>(body: &[u8]) -> Option<U> {
    #[derive(Deserialize)]
    struct Answer<V> {
        usage: Option<V>,
    }
    serde_json::from_slice::<Answer<U>>(body).ok()?.usage
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::bedrock::{converse, invoke};
    use crate::{anthropic_messages, openai_chat, openai_responses, Usage};

    // The full parses each dialect ran before the fast path, kept verbatim in spirit as references.

    #[derive(Deserialize, Debug, PartialEq)]
    struct ChatUsage {
        #[serde(default)]
        prompt_tokens: u64,
        #[serde(default)]
        completion_tokens: u64,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct IoUsage {
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
    }

    fn reference_chat(body: &[u8]) -> Option<Usage> {
        #[derive(Deserialize)]
        struct Resp {
            usage: Option<ChatUsage>,
        }
        let r: Resp = serde_json::from_slice(body).ok()?;
        r.usage.map(|u| Usage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
        })
    }

    fn reference_input_output(body: &[u8]) -> Option<Usage> {
        #[derive(Deserialize)]
        struct R {
            usage: Option<IoUsage>,
        }
        let r: R = serde_json::from_slice(body).ok()?;
        r.usage.map(|u| Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        })
    }

    /// Every dialect's `response_usage` equals its full parse on `body`. Returns whether the fast
    /// path answered (for the derived-struct and the `Value` reading) rather than falling back.
    fn check(body: &[u8]) -> (bool, bool) {
        let shown = String::from_utf8_lossy(body);
        assert_eq!(
            openai_chat::response_usage(body),
            reference_chat(body),
            "openai-chat: {shown}"
        );
        let io = reference_input_output(body);
        assert_eq!(
            anthropic_messages::response_usage(body),
            io,
            "anthropic: {shown}"
        );
        assert_eq!(
            openai_responses::response_usage(body),
            io,
            "responses: {shown}"
        );
        assert_eq!(invoke::response_usage(body), io, "invoke: {shown}");
        assert_eq!(
            converse::response_usage(body),
            converse::full_response_usage(body),
            "converse: {shown}"
        );
        for name in [&b"usage"[..], b"choices"] {
            assert_eq!(
                find_key(body, name),
                find_key_by_steps(body, name),
                "find_key: {shown}"
            );
        }
        // The helper on its own: whenever it answers, it answers what the full parse reads.
        let derived = top_level_member::<Option<ChatUsage>, IgnoredAny>(body, "usage");
        if let Some(fast) = &derived {
            assert_eq!(
                fast.as_ref(),
                full_response_usage::<ChatUsage>(body).as_ref(),
                "derived: {shown}"
            );
        }
        let value = top_level_member::<Value, Value>(body, "usage");
        if let Some(fast) = &value {
            let full: Value = serde_json::from_slice(body).expect("fast path on invalid JSON");
            assert_eq!(Some(fast), full.get("usage"), "value: {shown}");
        }
        (derived.is_some(), value.is_some())
    }

    #[test]
    fn fixtures_take_the_fast_path_and_agree() {
        let bodies: [&[u8]; 7] = [
            include_bytes!("../tests/fixtures/responses/text.openai_chat.json"),
            include_bytes!("../tests/fixtures/responses/tool_call.openai_chat.json"),
            include_bytes!("../tests/fixtures/responses/text.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/responses/tool_call.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/responses/text.openai_responses.json"),
            include_bytes!("../tests/fixtures/responses/tool_call.openai_responses.json"),
            include_bytes!("../tests/fixtures/responses/max_tokens.openai_responses.json"),
        ];
        for body in bodies {
            assert_eq!(
                check(body),
                (true, true),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let converse = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":4,"totalTokens":14},"metrics":{"latencyMs":120}}"#;
        assert_eq!(check(converse), (true, true));
        assert_eq!(
            converse::response_usage(converse),
            Some(Usage {
                input_tokens: 10,
                output_tokens: 4
            })
        );
        // What the mock provider (and OpenAI) send: usage, then two more members.
        let chat = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"hello","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11},"system_fingerprint":null,"service_tier":"default"}"#;
        assert_eq!(check(chat), (true, true));
        assert_eq!(
            openai_chat::response_usage(chat),
            Some(Usage {
                input_tokens: 5,
                output_tokens: 6
            })
        );
    }

    #[test]
    fn adversarial_bodies_agree_with_the_full_parse() {
        // (body, whether the fast path may answer for it)
        let cases: &[(&str, bool)] = &[
            (
                r#"{"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
                true,
            ),
            (r#"  {"usage" :  null } "#, true),
            ("{\"a\":1,\n\"usage\"\t:\r\n{\"input_tokens\":3}\n}\n", true),
            (r#"{"a":"x\\","usage":{"prompt_tokens":1}}"#, true),
            (r#"{"a":"x\\\\","usage":{"prompt_tokens":1}}"#, true),
            // Inside strings, never a key.
            (r#"{"a":"say \"usage\":{\"prompt_tokens\":9}}"}"#, false),
            (r#"{"a\"usage":{"prompt_tokens":9}}"#, false),
            (r#"{"a":"\"usage\""}"#, false),
            (r#"{"a":["usage"],"b":{"c":"usage"}}"#, false),
            // Nested objects named usage, before or after the top-level one.
            (
                r#"{"choices":[{"usage":{"prompt_tokens":9}}],"usage":{"prompt_tokens":1}}"#,
                false,
            ),
            (
                r#"{"usage":{"prompt_tokens":1},"meta":{"usage":{"prompt_tokens":9}}}"#,
                false,
            ),
            (r#"{"meta":{"usage":{"prompt_tokens":9}}}"#, false),
            (r#"{"meta":{"usage":{"prompt_tokens":9},"x":1}}"#, false),
            (r#"[{"usage":{"prompt_tokens":9}}]"#, false),
            (r#"[{"prompt_tokens":9}]"#, false),
            // Duplicates: the derived struct fails, a Value keeps the last one.
            (
                r#"{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}"#,
                false,
            ),
            (
                r#"{"usag\u0065":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}"#,
                false,
            ),
            (
                r#"{"usage":{"prompt_tokens":1},"\u0075sage":{"prompt_tokens":2}}"#,
                false,
            ),
            (r#"{"\u0075sage":{"prompt_tokens":2}}"#, false),
            // Escapes that cannot spell `usage` do not matter.
            (
                r#"{"a":"caf\u00e9 \n\\u","usage":{"prompt_tokens":1}}"#,
                true,
            ),
            // Values the usage types reject, and members after it that do not parse.
            (r#"{"usage":{"prompt_tokens":-1}}"#, true),
            (r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#, true),
            (r#"{"usage":{"prompt_tokens":1.5,"inputTokens":"x"}}"#, true),
            (r#"{"usage":[4,5]}"#, true),
            (r#"{"usage":7}"#, true),
            (r#"{"usage":{"prompt_tokens":1}"#, false),
            (r#"{"usage":{"prompt_tokens":1},}"#, false),
            (r#"{"usage":{"prompt_tokens":1}}}"#, false),
            (r#"{"usage":{"prompt_tokens":1}} x"#, false),
            (r#"{"usage":{"prompt_tokens":1},"x":1e400}"#, true),
            (r#"{"usage":{"prompt_tokens":1},"x":01}"#, false),
            (r#"{"usage":{"prompt_tokens":1},"x\n":1}"#, false),
            (r#"{"usage":{"prompt_tokens":1},"\u0078":1}"#, false),
            (r#"{"usage":nul}"#, false),
            (r#"{"usage":{"prompt_tokens":1}x}"#, false),
            ("{\"usage\":{\"prompt_tokens\":1}\u{c}}", false),
            ("\u{feff}{\"usage\":{\"prompt_tokens\":1}}", false),
            (r#"{"usage"}"#, false),
            (r#"{"usage":}"#, false),
            (r#"{"usage""#, false),
            (r#"{"#, false),
            ("", false),
        ];
        for (body, may_answer) in cases {
            let (derived, _) = check(body.as_bytes());
            if !may_answer {
                assert!(!derived, "fast path answered for {body}");
            }
        }
        // Invalid UTF-8 from the member on: a derived struct skips it inside ignored strings,
        // `Value` does not.
        for body in [
            &b"{\"usage\":{\"prompt_tokens\":1,\"x\":\"\xff\"}}"[..],
            &b"{\"usage\":{\"prompt_tokens\":1},\"x\":\"\xff\"}"[..],
        ] {
            check(body);
        }
    }

    #[test]
    fn nesting_limit_is_counted_as_the_full_parse_counts_it() {
        // A member nested 126 deep parses inside the top-level object, 127 deep does not; a
        // standalone parse of the member would accept 127.
        for depth in [100, 126, 127, 128] {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            for body in [
                format!(r#"{{"usage":{{"inputTokens":1}},"metrics":{deep}}}"#),
                format!(r#"{{"usage":{{"inputTokens":1,"x":{deep}}}}}"#),
                format!(r#"{{"usage":{deep}}}"#),
            ] {
                check(body.as_bytes());
            }
        }
    }

    /// Builds bodies from pieces (every head is valid JSON, so every difference from the full
    /// parse would be a bug) and compares every dialect with its full parse.
    #[test]
    fn generated_bodies_agree_with_the_full_parse() {
        let heads = [
            "",
            r#""id":"x""#,
            r#""a":"x\\""#,
            r#""a":"say \"usage\": {}""#,
            r#""choices":[{"usage":{"prompt_tokens":7}}]"#,
            r#""usage":{"prompt_tokens":8}"#,
            r#""usag\u0065":{"prompt_tokens":9}"#,
            r#""k\"usage":1"#,
            r#""u":"\u00e9","n":[1,{"x":null}]"#,
        ];
        let colons = [":", " : ", "\n:\t"];
        let values = [
            r#"{"prompt_tokens":1,"completion_tokens":2}"#,
            r#"{"input_tokens":5,"output_tokens":6,"inputTokens":7,"outputTokens":8}"#,
            "null",
            "{}",
            "[3,4]",
            r#"{"prompt_tokens":-1}"#,
            r#"{"prompt_tokens":1,"prompt_tokens":2}"#,
            r#"{"inputTokens":"x","input_tokens":1.0}"#,
            r#"{"a":{"b":[1,2,{"c":"d"}]},"output_tokens":3}"#,
            "1",
            r#""s""#,
            r#"{"prompt_tokens":1}x"#,
            r#"{"prompt_tokens":1"#,
        ];
        let tails = [
            "}",
            "}\n",
            r#","x":null}"#,
            r#" , "system_fingerprint" : "fp" , "service_tier":"default" }"#,
            r#","meta":{"usage":{"prompt_tokens":3}}}"#,
            r#","usage":{"prompt_tokens":4}}"#,
            r#","usag\u0065":{"prompt_tokens":4}}"#,
            r#","x":1e400}"#,
            "}}",
            "",
            ",}",
            "} x",
            r#","a":[[[["#,
        ];
        let mut fast = 0;
        let mut total = 0;
        for head in heads {
            for colon in colons {
                for value in values {
                    for tail in tails {
                        let sep = if head.is_empty() { "" } else { "," };
                        let body = format!("{{{head}{sep}\"usage\"{colon}{value}{tail}");
                        let (derived, _) = check(body.as_bytes());
                        // The same object one level down must never be read as top-level.
                        let nested = format!("{{\"outer\":{body}}}");
                        assert!(!check(nested.as_bytes()).0, "{nested}");
                        let listed = format!("[{body}]");
                        assert!(!check(listed.as_bytes()).0, "{listed}");
                        fast += usize::from(derived);
                        total += 1;
                    }
                }
            }
        }
        // The shortcut must actually be taken for the ordinary shapes.
        assert!(fast * 10 > total, "fast path answered {fast} of {total}");
    }

    /// Bodies the full parse rejects only because of bytes before the member, which the shortcut
    /// does not read: the documented difference (the full parse reads nothing, the shortcut reads
    /// the member).
    #[test]
    fn invalid_bytes_before_the_member_are_not_checked() {
        let one = Some(Usage {
            input_tokens: 1,
            output_tokens: 0,
        });
        let body = br#"{"id":"x" "garbage",,"usage":{"prompt_tokens":1}}"#;
        assert_eq!(reference_chat(body), None);
        assert_eq!(openai_chat::response_usage(body), one);
        let body = b"{\"a\":\"\xff\",\"x\":1e400,\"usage\":{\"inputTokens\":1}}";
        assert_eq!(converse::full_response_usage(body), None);
        assert_eq!(converse::response_usage(body), one);
        // A derived struct does not look inside ignored strings, so there is no difference.
        let body = b"{\"a\":\"\xff\",\"usage\":{\"prompt_tokens\":1}}";
        assert_eq!(reference_chat(body), one);
        assert_eq!(openai_chat::response_usage(body), one);
    }

    /// An answer cut off right after a nested object with a `usage` member (say, a tool input) must
    /// not be read as if that object were the answer.
    #[test]
    fn truncated_answers_are_left_to_the_full_parse() {
        let whole = br#"{"id":"msg_1","type":"message","content":[{"type":"tool_use","id":"t","name":"f","input":{"usage":{"input_tokens":9}}}],"usage":{"input_tokens":1,"output_tokens":2}}"#;
        assert_eq!(check(whole), (false, false));
        for cut in 1..whole.len() {
            let (derived, value) = check(&whole[..cut]);
            assert!(
                !derived && !value,
                "{}",
                String::from_utf8_lossy(&whole[..cut])
            );
        }
        let plain = include_bytes!("../tests/fixtures/responses/text.openai_chat.json");
        let plain = plain.trim_ascii_end();
        for cut in 1..plain.len() {
            assert_eq!(check(&plain[..cut]), (false, false));
        }
    }

    /// Heads of every length up to several scan steps and past the lane-counter flush (127 steps),
    /// with brackets in structure and in strings.
    #[test]
    fn long_heads_are_counted_exactly() {
        let pieces = [
            r#"[1,[2,{"a":[]}]]"#,
            r#""text with [ and { inside""#,
            r#""and ] } closing""#,
            r#""plain \"quoted\" \\ text ""#,
            r#"{"k":"v"}"#,
        ];
        for n in (0..700).step_by(7) {
            let items: Vec<&str> = (0..n).map(|i| pieces[i % pieces.len()]).collect();
            let head = items.join(",");
            for usage in [r#"{"prompt_tokens":3}"#, "null"] {
                let body = format!(r#"{{"pad":[{head}],"usage":{usage},"x":1}}"#);
                let (derived, value) = check(body.as_bytes());
                // Strings with unbalanced brackets only cost the shortcut, never correctness.
                // Only a partial round ending on the second piece leaves `[` and `{` open in strings.
                let balanced = n % pieces.len() != 2;
                if balanced {
                    assert!(derived && value, "{n}");
                }
                let naive: isize = body[..body.find("\"usage\"").expect("usage")]
                    .bytes()
                    .map(|b| isize::from(bracket_weight(b)))
                    .sum();
                match find_key(body.as_bytes(), b"usage") {
                    Key::At { depth, .. } => assert_eq!(depth, naive, "{n}"),
                    other => panic!("{other:?} for {n}"),
                }
            }
        }
    }

    #[test]
    fn find_key_reports_unique_plain_spellings_only() {
        assert_eq!(
            find_key(br#"{"usage":1}"#, b"usage"),
            Key::At { at: 1, depth: 1 }
        );
        assert_eq!(find_key(br#"{"a":1}"#, b"usage"), Key::Nowhere);
        assert_eq!(find_key(br#"{"usage":1,"usage":2}"#, b"usage"), Key::Unsure);
        assert_eq!(find_key(br#"{"\u0061":1}"#, b"usage"), Key::Unsure);
        assert_eq!(
            find_key(br#"{"usage":"\u0061"}"#, b"usage"),
            Key::At { at: 1, depth: 1 }
        );
        // Far more brackets in one lane than an `i8` holds: the lane counters must be flushed.
        for n in [127 * CHUNK, 300 * CHUNK + 5] {
            let body = format!(r#"{{"a":"{}","usage":1}}"#, "[".repeat(n));
            let at = body.find(r#""usage""#).expect("usage");
            let depth = 1 + isize::try_from(n).expect("small");
            assert_eq!(find_key(body.as_bytes(), b"usage"), Key::At { at, depth });
        }
        // Occurrences on either side of a scan step boundary, and in the unscanned remainder.
        for pad in 0..80 {
            let body = format!(
                r#"{{"p":"{}","usage":1,"q":"{}"}}"#,
                "x".repeat(pad),
                "y".repeat(pad)
            );
            let at = body.find("\"usage\"").expect("usage");
            assert_eq!(
                find_key(body.as_bytes(), b"usage"),
                Key::At { at, depth: 1 }
            );
            let twice = format!(r#"{body}"usage""#);
            assert_eq!(find_key(twice.as_bytes(), b"usage"), Key::Unsure);
            let escaped = format!(r#"{{"p":"{}\u0067","usage":1}}"#, "x".repeat(pad));
            assert_eq!(find_key(escaped.as_bytes(), b"usage"), Key::Unsure);
        }
    }

    /// `find_key`'s searches answer what the one-pass scan answers, on bodies built from the bytes
    /// that matter (quotes, the name's letters, backslashes, `u00[67]`, brackets) at every length
    /// up to past two 127-step blocks, and on long heads.
    #[test]
    fn find_key_agrees_with_the_scan() {
        let pieces: [&[u8]; 14] = [
            b"\"",
            b"usage",
            b"usag",
            b"u",
            b"\\",
            b"\\u0065",
            b"\\u007",
            b"{",
            b"}",
            b"[",
            b"]",
            b" ",
            b"x",
            b"\"usage\"",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..4000 {
            let len = match round % 4 {
                0 => next() % 8,
                1 => next() % 40,
                2 => next() % 200,
                _ => next() % 2000,
            };
            let mut body = Vec::new();
            for _ in 0..len {
                body.extend_from_slice(pieces[(next() % pieces.len() as u64) as usize]);
            }
            assert_eq!(
                find_key(&body, b"usage"),
                find_key_by_steps(&body, b"usage"),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        for n in [
            0,
            1,
            31,
            32,
            33,
            127 * 32 - 1,
            127 * 32,
            127 * 32 + 1,
            300 * 32 + 5,
        ] {
            for fill in [b'{', b'[', b'}', b'x'] {
                let mut body = vec![fill; n];
                body.extend_from_slice(b"\"usage\":1}");
                assert_eq!(
                    find_key(&body, b"usage"),
                    find_key_by_steps(&body, b"usage")
                );
            }
        }
    }
}
