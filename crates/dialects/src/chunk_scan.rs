//! Does an OpenAI chat stream chunk carry content? Answered by one pass over the chunk's bytes, for
//! the commit decision before the first token (`openai_chat::classify_stream_event_before_content`).
//!
//! Why: before the commit every event is read on the way to the caller's first token. The typed
//! parse of a content chunk (`serde_json` into the `Chunk` struct), with the key searches that
//! decided whether to parse, was most of the time the gateway added to time to first token
//! (docs/decisions/0003-hot-path.md, "Fourth pass").
//!
//! The pass follows JSON's strings (escapes included) and nesting. It reads what the typed parse
//! would read to decide — the top-level `choices` and `usage`; each choice's `delta` and
//! `finish_reason`; each delta's `content`, `refusal` and `tool_calls` — and skips every other
//! value. It answers [`Scan::Unsure`] (the caller then runs the typed parse) whenever the typed
//! parse could answer differently because of something it looked at:
//! - the top level is not one object followed only by whitespace;
//! - a key is spelled with an escape (a `\u0063ontent` is `content` to the parser);
//! - one of the keys above occurs twice in its object (the derived struct rejects that);
//! - one of their values has a type the struct does not take (`choices` not an array of objects,
//!   `delta` not an object or `null`, `content`/`refusal` not a string or `null`, `finish_reason`
//!   not a plain string or `null` — it is borrowed, so an escape in it fails the parse);
//! - `usage` is anything but `null` (its numbers are typed);
//! - the top level has an `error` member (an error event);
//! - nesting deeper than serde_json's limit.
//!
//! Not checked: that the skipped values are valid JSON (numbers and literals are read up to the
//! next delimiter, brackets are counted without matching their kinds). A chunk whose only fault
//! is a malformed value the gateway does not read is answered from the values it does read: a
//! token in such a chunk commits the stream, where the typed parse would have held it as
//! unreadable. The caller then receives the chunk the upstream sent, as it would after the commit.

/// What the pass can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// A choice has a non-empty `content` or `refusal`, a non-null `tool_calls` or a non-null
    /// `finish_reason`.
    Content,
    /// The chunk is read and none of the above is there.
    NoContent,
    /// Parse to know.
    Unsure,
}

/// Reads one event's data (the JSON text of a chunk).
pub fn scan(data: &[u8]) -> Scan {
    let mut c = Cursor { b: data, i: 0 };
    let mut content = false;
    let read = c.chunk(&mut content).and_then(|()| match c.peek() {
        None => Some(()),
        Some(_) => None, // trailing bytes
    });
    match read {
        None => Scan::Unsure,
        Some(()) if content => Scan::Content,
        Some(()) => Scan::NoContent,
    }
}

/// serde_json refuses nesting deeper than 128; stay below it.
const MAX_DEPTH: usize = 100;

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

/// `None` everywhere below means "unsure".
impl<'a> Cursor<'a> {
    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// A string, opening quote next: (is it empty, does it hold an escape).
    fn string(&mut self) -> Option<(bool, bool)> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let at = self.i + memchr::memchr2(b'"', b'\\', self.b.get(self.i..)?)?;
            if self.b[at] == b'"' {
                self.i = at + 1;
                return Some((at == start, escaped));
            }
            escaped = true;
            self.i = at + 2;
        }
    }

    /// `null` next (consumed): true; another value next: false (not consumed).
    fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        let rest = self.b.get(self.i..)?;
        if !rest.starts_with(b"null") || !rest.get(4).is_none_or(|b| is_delimiter(*b)) {
            return None;
        }
        self.i += 4;
        Some(true)
    }

    /// Skips any value.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => {
                            depth += 1;
                            if depth > MAX_DEPTH {
                                return None;
                            }
                        }
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            b'}' | b']' | b',' | b':' => None,
            _ => {
                let start = self.i;
                while self.b.get(self.i).is_some_and(|b| !is_delimiter(*b)) {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// `close` next (consumed): true; anything else: false (not consumed).
    fn closes(&mut self, close: u8) -> Option<bool> {
        let closed = self.peek()? == close;
        self.i += usize::from(closed);
        Some(closed)
    }

    /// After a member or an element: `,` (consumed, more follow) or `close` (consumed: the
    /// container ended, `true`).
    fn ended(&mut self, close: u8) -> Option<bool> {
        if self.closes(close)? {
            return Some(true);
        }
        self.eat(b',')?;
        Some(false)
    }

    /// An object, `{` next: `member` reads each value after its key (plain keys only).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.closes(b'}')? {
            return Some(());
        }
        loop {
            self.eat(b'"')?;
            let start = self.i;
            let len = memchr::memchr2(b'"', b'\\', self.b.get(start..)?)?;
            if self.b[start + len] != b'"' {
                return None; // an escaped key
            }
            self.i = start + len + 1;
            self.eat(b':')?;
            let b = self.b;
            member(self, &b[start..start + len])?;
            if self.ended(b'}')? {
                return Some(());
            }
        }
    }

    /// An array, `[` next: `element` reads each element.
    fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.closes(b']')? {
            return Some(());
        }
        loop {
            element(self)?;
            if self.ended(b']')? {
                return Some(());
            }
        }
    }

    /// The top-level object.
    fn chunk(&mut self, content: &mut bool) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            b"choices" => {
                seen.first(0)?;
                c.array(|c| c.choice(content))
            }
            b"usage" => {
                seen.first(1)?;
                c.null()?.then_some(())
            }
            // Possibly an error event: only the full classification reads those.
            b"error" => None,
            _ => c.skip(),
        })
    }

    fn choice(&mut self, content: &mut bool) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            b"delta" => {
                seen.first(0)?;
                if c.null()? {
                    return Some(());
                }
                c.delta(content)
            }
            b"finish_reason" => {
                seen.first(1)?;
                if !c.null()? {
                    let (_, escaped) = c.string()?;
                    if escaped {
                        return None;
                    }
                    *content = true;
                }
                Some(())
            }
            _ => c.skip(),
        })
    }

    fn delta(&mut self, content: &mut bool) -> Option<()> {
        let mut seen = Seen::default();
        self.object(|c, key| match key {
            b"content" | b"refusal" => {
                seen.first(usize::from(key[0] == b'r'))?;
                if !c.null()? {
                    let (empty, _) = c.string()?;
                    *content |= !empty;
                }
                Some(())
            }
            b"tool_calls" => {
                seen.first(2)?;
                if !c.null()? {
                    c.skip()?;
                    *content = true;
                }
                Some(())
            }
            _ => c.skip(),
        })
    }
}

/// The keys of one object read so far, as bits.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    /// `None` when key number `n` was already seen.
    fn first(&mut self, n: usize) -> Option<()> {
        let bit = 1u8 << n;
        if self.0 & bit != 0 {
            return None;
        }
        self.0 |= bit;
        Some(())
    }
}

fn is_delimiter(b: u8) -> bool {
    matches!(b, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shapes_providers_send() {
        let role = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","service_tier":"default","system_fingerprint":null,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        assert_eq!(scan(role.as_bytes()), Scan::NoContent);
        let text = r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":{"content":[{"token":"Hel","logprob":-0.1,"bytes":[72,101,108]}]},"finish_reason":null}]}"#;
        assert_eq!(scan(text.as_bytes()), Scan::Content);
        let escaped = r#"{"choices":[{"delta":{"content":"\"quoted\" \\ \u00e9"}}]}"#;
        assert_eq!(scan(escaped.as_bytes()), Scan::Content);
        let tool = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}"#;
        assert_eq!(scan(tool.as_bytes()), Scan::Content);
        let fin = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(scan(fin.as_bytes()), Scan::Content);
        let azure = r#"{"choices":[],"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}"#;
        assert_eq!(scan(azure.as_bytes()), Scan::NoContent);
        assert_eq!(scan(b"  {\"choices\" : [ ] }  "), Scan::NoContent);
    }

    #[test]
    fn is_unsure_where_the_typed_parse_could_differ() {
        for data in [
            "",
            "not json",
            "[DONE]",
            r#"{"choices":[{"delta":{"\u0063ontent":"x"}}]}"#,
            r#"{"choices":[{"delta":{"content":"","content":"x"}}]}"#,
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"delta":{"content":nullx}}]}"#,
            r#"{"choices":[{"delta":{"content":1}}]}"#,
            r#"{"choices":[{"delta":[]}]}"#,
            r#"{"choices":[null]}"#,
            r#"{"choices":null}"#,
            r#"{"choices":[{"finish_reason":1}]}"#,
            r#"{"choices":[{"finish_reason":"a\"b"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"delta":{"content":"x"}}]} trailing"#,
            r#"{"choices":[{"delta":{"content":"x"}}]"#,
            r#"{"choices":[{"delta":{"content":"x}}]}"#,
            r#"{"a":1 "choices":[]}"#,
            r#"{"error":{"message":"m"},"choices":[{"delta":{"content":"x"}}]}"#,
        ] {
            assert_eq!(scan(data.as_bytes()), Scan::Unsure, "{data}");
        }
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(scan(deep.as_bytes()), Scan::Unsure);
    }

    #[test]
    fn key_spellings_inside_strings_are_not_keys() {
        let data = r#"{"choices":[{"delta":{"role":"assistant","x":"\"content\":\"hi\""}}]}"#;
        assert_eq!(scan(data.as_bytes()), Scan::NoContent);
        let nested = r#"{"choices":[{"delta":{"role":"assistant"},"logprobs":{"content":"x"}}]}"#;
        assert_eq!(scan(nested.as_bytes()), Scan::NoContent);
        let outside = r#"{"choices":[{"delta":{}}],"extra":{"delta":{"content":"x"}}}"#;
        assert_eq!(scan(outside.as_bytes()), Scan::NoContent);
    }
}
