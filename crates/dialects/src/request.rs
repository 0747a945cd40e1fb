//! The parsed caller request, kept for the whole walk so every hop can re-render it.

use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::Dialect;

/// What the request uses, for eligibility checks (SPEC §5.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    pub tools: bool,
    pub json_schema: bool,
    /// A rough prompt size estimate (bytes / 4), for context-window eligibility.
    pub estimated_prompt_tokens: u64,
}

/// A caller request parsed once and kept: the original bytes plus what routing needs. Rendering for
/// a hop in the same dialect only rewrites the `model` value in place; everything else is sent
/// byte-for-byte, so no body size limits in-request fallback below `maxRequestBytes`.
#[derive(Clone)]
pub struct ParsedRequest {
    pub dialect: Dialect,
    pub model: String,
    pub stream: bool,
    pub features: Features,
    body: Bytes,
    /// Byte range of the `model` value (including its quotes) inside `body`.
    model_span: Range<usize>,
}

impl fmt::Debug for ParsedRequest {
    // Never print the body: it holds prompt text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ParsedRequest")
            .field("dialect", &self.dialect)
            .field("model", &self.model)
            .field("stream", &self.stream)
            .field("features", &self.features)
            .field("bodyBytes", &self.body.len())
            .finish()
    }
}

/// Why a caller body could not be parsed. The message never includes body text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    NotJson(String),
    NotAnObject,
    MissingModel,
    BadField {
        field: &'static str,
        expected: &'static str,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::NotJson(e) => write!(f, "request body is not valid JSON: {e}"),
            ParseError::NotAnObject => f.write_str("request body must be a JSON object"),
            ParseError::MissingModel => {
                f.write_str("you must provide a model parameter (`model` is missing or empty)")
            }
            ParseError::BadField { field, expected } => write!(f, "`{field}` must be {expected}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// A caller body as text and its top level read as `T` (a reader of a JSON object): a body that
/// is not UTF-8 or not JSON is `NotJson`, JSON that is not an object `NotAnObject`.
pub(crate) fn parse_top<'b, T: Deserialize<'b>>(
    body: &'b [u8],
) -> Result<(&'b str, T), ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    match serde_json::from_str(text) {
        Ok(top) => Ok((text, top)),
        Err(e) if e.classify() == serde_json::error::Category::Data => Err(ParseError::NotAnObject),
        Err(e) => Err(ParseError::NotJson(e.to_string())),
    }
}

impl ParsedRequest {
    /// Parses a JSON body whose top level carries `model` and optional `stream`, without building a
    /// tree of the whole document: the few top-level values routing reads stay raw slices of the
    /// input and every other value is only checked (see `TopMembers`).
    pub fn parse_json_top(dialect: Dialect, body: Bytes) -> Result<ParsedRequest, ParseError> {
        let (text, top) = parse_top::<TopMembers<'_>>(&body)?;
        let request = Self::from_members(dialect, text, &top)?;
        Ok(ParsedRequest { body, ..request })
    }

    /// What routing needs from the top-level members `top` of `text` (the body, as text).
    fn from_members(
        dialect: Dialect,
        text: &str,
        top: &TopMembers<'_>,
    ) -> Result<ParsedRequest, ParseError> {
        let raw_model = top.model.ok_or(ParseError::MissingModel)?;
        let model: String =
            serde_json::from_str(raw_model.get()).map_err(|_| ParseError::BadField {
                field: "model",
                expected: "a string",
            })?;
        if model.trim().is_empty() {
            return Err(ParseError::MissingModel);
        }
        let start = raw_model.get().as_ptr() as usize - text.as_ptr() as usize;
        let model_span = start..start + raw_model.get().len();
        let stream = match top.stream {
            None => false,
            Some(raw) => match raw.get() {
                "true" => true,
                "false" | "null" => false,
                _ => {
                    return Err(ParseError::BadField {
                        field: "stream",
                        expected: "a boolean",
                    })
                }
            },
        };
        let tools = top
            .tools
            .is_some_and(|raw| !matches!(raw.get(), "null" | "[]"));
        let json_schema = top
            .response_format
            .is_some_and(|raw| raw.get().contains("\"json_schema\""));
        let features = Features {
            tools,
            json_schema,
            estimated_prompt_tokens: (text.len() as u64) / 4,
        };
        Ok(ParsedRequest {
            dialect,
            model,
            stream,
            features,
            body: Bytes::new(),
            model_span,
        })
    }

    /// A request whose model arrives in the URL path (Bedrock: `/model/{modelId}/...`) rather than
    /// the body. The body is kept as sent; there is no `model` value inside it to rewrite, so a
    /// same-dialect hop sends [`ParsedRequest::body`] and puts its model in the path instead of
    /// calling [`ParsedRequest::body_with_model`].
    pub fn with_path_model(
        dialect: Dialect,
        model: String,
        stream: bool,
        features: Features,
        body: Bytes,
    ) -> ParsedRequest {
        ParsedRequest {
            dialect,
            model,
            stream,
            features,
            body,
            model_span: 0..0,
        }
    }

    /// The original body as the caller sent it.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body to send upstream with `model` as the model: the original bytes when the model is
    /// unchanged, otherwise the original with only the model value replaced.
    pub fn body_with_model(&self, model: &str) -> Bytes {
        if model == self.model {
            return self.body.clone();
        }
        let quoted = serde_json::Value::String(model.to_owned()).to_string();
        let mut out = BytesMut::with_capacity(self.body.len() + quoted.len());
        out.extend_from_slice(&self.body[..self.model_span.start]);
        out.extend_from_slice(quoted.as_bytes());
        out.extend_from_slice(&self.body[self.model_span.end..]);
        out.freeze()
    }
}

/// The top-level members [`ParsedRequest::parse_json_top`] reads, as raw slices of the body.
///
/// It replaces a `BTreeMap<Cow<str>, &RawValue>` of every member, which cost an allocation or more
/// per member on every request, and reads the same way. The top level must be a map, or serde
/// reports a `Data` error. Keys are decoded, escapes included, before they are matched. A
/// repeated key keeps its last value. Every other value is skipped with `IgnoredAny`, which runs
/// the same syntax check as reading a `&RawValue` (serde_json's `ignore_value`), so errors and
/// their messages are unchanged.
#[derive(Default)]
struct TopMembers<'a> {
    model: Option<&'a RawValue>,
    stream: Option<&'a RawValue>,
    tools: Option<&'a RawValue>,
    response_format: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for TopMembers<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(TopMembersVisitor)
    }
}

struct TopMembersVisitor;

impl<'de> Visitor<'de> for TopMembersVisitor {
    type Value = TopMembers<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopMembers<'de>, A::Error> {
        let mut top = TopMembers::default();
        while let Some(key) = map.next_key::<TopKey>()? {
            let slot = match key {
                TopKey::Model => &mut top.model,
                TopKey::Stream => &mut top.stream,
                TopKey::Tools => &mut top.tools,
                TopKey::ResponseFormat => &mut top.response_format,
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        Ok(top)
    }
}

/// A top-level key, matched after decoding (so `"mod\u0065l"` is `model`) without keeping it.
enum TopKey {
    Model,
    Stream,
    Tools,
    ResponseFormat,
    Other,
}

impl<'de> Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TopKeyVisitor)
    }
}

struct TopKeyVisitor;

impl Visitor<'_> for TopKeyVisitor {
    type Value = TopKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<TopKey, E> {
        Ok(match key {
            "model" => TopKey::Model,
            "stream" => TopKey::Stream,
            "tools" => TopKey::Tools,
            "response_format" => TopKey::ResponseFormat,
            _ => TopKey::Other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ParsedRequest, ParseError> {
        ParsedRequest::parse_json_top(Dialect::OpenAiChat, Bytes::from(s.to_owned()))
    }

    #[test]
    fn parses_model_and_stream_and_keeps_bytes() {
        let src = r#"{ "messages": [{"role":"user","content":"hi"}], "model" : "gpt-4o", "stream": true }"#;
        let p = parse(src).unwrap();
        assert_eq!(p.model, "gpt-4o");
        assert!(p.stream);
        assert_eq!(p.body_with_model("gpt-4o"), Bytes::from(src.to_owned()));
    }

    #[test]
    fn rewrites_only_the_model_value() {
        let src = r#"{"model":"a\"b","messages":[],"metadata":{"model":"keep"}}"#;
        let p = parse(src).unwrap();
        assert_eq!(p.model, "a\"b");
        let out = p.body_with_model("other");
        assert_eq!(
            &out[..],
            br#"{"model":"other","messages":[],"metadata":{"model":"keep"}}"#
        );
    }

    #[test]
    fn rejects_bad_bodies_with_reasons() {
        assert!(matches!(parse("{"), Err(ParseError::NotJson(_))));
        assert_eq!(parse("[1]").unwrap_err(), ParseError::NotAnObject);
        assert_eq!(
            parse(r#"{"messages":[]}"#).unwrap_err(),
            ParseError::MissingModel
        );
        assert_eq!(
            parse(r#"{"model":" "}"#).unwrap_err(),
            ParseError::MissingModel
        );
        assert!(matches!(
            parse(r#"{"model":1}"#),
            Err(ParseError::BadField { field: "model", .. })
        ));
        assert!(matches!(
            parse(r#"{"model":"m","stream":"yes"}"#),
            Err(ParseError::BadField {
                field: "stream",
                ..
            })
        ));
    }

    /// `parse_json_top` as it was before `TopMembers`: every member into a map.
    fn reference_parse(dialect: Dialect, body: Bytes) -> Result<ParsedRequest, ParseError> {
        use std::borrow::Cow;
        use std::collections::BTreeMap;
        let (text, top) = parse_top::<BTreeMap<Cow<'_, str>, &RawValue>>(&body)?;
        let members = TopMembers {
            model: top.get("model").copied(),
            stream: top.get("stream").copied(),
            tools: top.get("tools").copied(),
            response_format: top.get("response_format").copied(),
        };
        let request = ParsedRequest::from_members(dialect, text, &members)?;
        Ok(ParsedRequest { body, ..request })
    }

    fn assert_same_as_reference(body: &[u8]) {
        let shown = String::from_utf8_lossy(body);
        let got = ParsedRequest::parse_json_top(Dialect::OpenAiChat, Bytes::copy_from_slice(body));
        let want = reference_parse(Dialect::OpenAiChat, Bytes::copy_from_slice(body));
        match (got, want) {
            (Ok(g), Ok(w)) => {
                assert_eq!(
                    (g.dialect, &g.model, g.stream, g.features, &g.body),
                    (w.dialect, &w.model, w.stream, w.features, &w.body),
                    "{shown}"
                );
                assert_eq!(g.model_span, w.model_span, "{shown}");
                assert_eq!(g.body_with_model("other"), w.body_with_model("other"));
            }
            (g, w) => assert_eq!(g.err(), w.err(), "{shown}"),
        }
    }

    #[test]
    fn agrees_with_the_full_map_parse() {
        let fixtures: [&[u8]; 12] = [
            include_bytes!("../tests/fixtures/requests/image.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/requests/image.openai_chat.json"),
            include_bytes!("../tests/fixtures/requests/json_schema.openai_chat.json"),
            include_bytes!("../tests/fixtures/requests/json_schema.openai_responses.json"),
            include_bytes!("../tests/fixtures/requests/plain_text.openai_chat.json"),
            include_bytes!("../tests/fixtures/requests/sampling.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/requests/sampling.openai_chat.json"),
            include_bytes!("../tests/fixtures/requests/system_multi_turn.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/requests/system_multi_turn.openai_responses.json"),
            include_bytes!("../tests/fixtures/requests/tools_round_trip.anthropic_messages.json"),
            include_bytes!("../tests/fixtures/requests/tools_round_trip.openai_chat.json"),
            include_bytes!("../tests/fixtures/requests/tools_round_trip.openai_responses.json"),
        ];
        for body in fixtures {
            assert_same_as_reference(body);
            // Every prefix: the syntax errors (and their positions) must match too.
            for cut in 0..body.len() {
                assert_same_as_reference(&body[..cut]);
            }
        }
        let cases: &[&[u8]] = &[
            br#"{"model":"a","model":"b"}"#,
            br#"{"model":"a","model":1}"#,
            br#"{"model":1,"model":"a"}"#,
            br#"{"mod\u0065l":"esc","stream":true}"#,
            br#"{"model":"a","str\u0065am":"x"}"#,
            br#"{"model":"a","stream":null,"tools":null,"response_format":null}"#,
            br#"{"model":"a","stream":false,"stream":true}"#,
            br#"{"model":"a","tools":[],"tools":[1]}"#,
            br#"{"model":"a","response_format":{"type":"json_schema"},"response_format":{}}"#,
            br#"{"model":"a\u00e9\"b","x":{"model":"nested"}}"#,
            br#"{"model":"\ud800"}"#,
            br#"{"model":"a","x":"\ud800"}"#,
            br#"{"model":"a","\ud800":1}"#,
            br#"{"model":"a","x":"bad \q escape"}"#,
            br#"{"model":"a","x":01}"#,
            br#"{"model":"a","x":1e400}"#,
            br#"{"model":"a","x":[1,2,}"#,
            br#"{"model":"a",}"#,
            br#"{"model":"a"} x"#,
            br#"{"model":"a"}   "#,
            br#"{"model":"a" "b":1}"#,
            br#"{"model" "a"}"#,
            br#"{1:2}"#,
            br#"{"model":"a","x":tru}"#,
            b"{\"model\":\"a\",\"x\":\"\x01\"}",
            b"{\"model\":\"a\",\"x\":\"\xff\"}",
            b"\xef\xbb\xbf{\"model\":\"a\"}",
            br#"[1]"#,
            br#"[}"#,
            br#""str""#,
            br#""unterminated"#,
            br#"1"#,
            br#"null"#,
            br#"true"#,
            br#""#,
            br#"   "#,
            br#"{}"#,
            br#"{"model":null}"#,
            br#"{"model":["a"]}"#,
            br#"{"model":"","stream":1}"#,
        ];
        for body in cases {
            assert_same_as_reference(body);
        }
        let deep = format!(
            r#"{{"model":"a","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_same_as_reference(deep.as_bytes());
        let deep_model = format!(
            r#"{{"x":1,"model":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_same_as_reference(deep_model.as_bytes());
    }

    #[test]
    fn detects_tools_and_json_schema() {
        let p = parse(r#"{"model":"m","tools":[{"type":"function"}],"response_format":{"type":"json_schema"}}"#)
            .unwrap();
        assert!(p.features.tools);
        assert!(p.features.json_schema);
        let p = parse(r#"{"model":"m","tools":[]}"#).unwrap();
        assert!(!p.features.tools);
    }
}
