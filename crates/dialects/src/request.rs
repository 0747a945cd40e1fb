//! The parsed caller request, kept for the whole walk so every hop can re-render it.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use serde::de::{Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::Dialect;

/// The longest model name a caller may send, in bytes (SPEC §14 "Names and labels"): in the body's
/// `model` and in a Bedrock path's `{modelId}` alike. Longer names are refused before they reach
/// routing, the routing log, breaker entries or metric labels.
pub const MAX_MODEL_NAME_BYTES: usize = 256;

/// What the request uses, for eligibility checks (SPEC §5.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Features {
    pub tools: bool,
    pub json_schema: bool,
    /// A rough prompt size estimate (bytes / 4), for context-window eligibility.
    pub estimated_prompt_tokens: u64,
    /// The request carries a guardrail or safety setting (SPEC §11): the format whose untranslated
    /// request carries it. A destination enforces it only when it is sent the request in exactly
    /// that format (the caller's own, passed through); translation would drop it, so every other
    /// destination is `INELIGIBLE:guardrail`. Set by the Bedrock dialects for a non-null
    /// `guardrailConfig` in the body, and by [`ParsedRequest::note_guardrail_headers`] for the
    /// `X-Amzn-Bedrock-Guardrail*` headers, and by the Gemini dialect for a non-empty
    /// `safetySettings`. OpenAI chat, Responses and Anthropic Messages have no
    /// request-side guardrail field.
    pub guardrail: Option<Dialect>,
    /// An embeddings request (SPEC §12) asked for `encoding_format: base64`: a translated answer
    /// carries its vectors so.
    pub base64_embeddings: bool,
}

/// Whether `name` (a header name, any case) asks Bedrock for a guardrail:
/// `X-Amzn-Bedrock-GuardrailIdentifier`, `X-Amzn-Bedrock-GuardrailVersion` (any
/// `X-Amzn-Bedrock-Guardrail*`). `X-Amzn-Bedrock-Trace` alone sets no guardrail (it only asks
/// for the guardrail's trace) but is forwarded with them ([`BEDROCK_GUARDRAIL_HEADERS`]).
pub fn is_guardrail_header(name: &str) -> bool {
    const PREFIX: &str = "x-amzn-bedrock-guardrail";
    name.len() >= PREFIX.len()
        && name.as_bytes()[..PREFIX.len()].eq_ignore_ascii_case(PREFIX.as_bytes())
}

/// The caller headers a `bedrock` destination is sent when the caller sent them (lowercase):
/// InvokeModel's guardrail and its trace switch.
pub const BEDROCK_GUARDRAIL_HEADERS: [&str; 3] = [
    "x-amzn-bedrock-guardrailidentifier",
    "x-amzn-bedrock-guardrailversion",
    "x-amzn-bedrock-trace",
];

/// A caller request parsed once and kept: the original bytes plus what routing needs. Rendering for
/// a hop in the same dialect only rewrites the `model` value in place; everything else is sent
/// byte-for-byte, so no body size limits in-request fallback below `maxRequestBytes`.
#[derive(Clone)]
pub struct ParsedRequest {
    pub dialect: Dialect,
    pub model: String,
    pub stream: bool,
    pub features: Features,
    /// OpenAI chat `stream_options.include_usage`: `None` without `stream_options`, else its value
    /// (`false` when absent or not `true`).
    pub stream_usage: Option<bool>,
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
    /// The model name is longer than [`MAX_MODEL_NAME_BYTES`].
    ModelNameTooLong,
    /// A top-level key appears twice (SPEC §14 "Bodies"): which value counts would depend on the
    /// parser, and upstreams may read another one than routing did. Holds the key, cut to 64 bytes.
    DuplicateKey(String),
    /// More top-level members than [`MAX_TOP_LEVEL_MEMBERS`]: no request needs that many, and the
    /// repeat check would have to keep them all.
    TooManyMembers,
}

/// A model name routing, logs and metric labels can carry: at most [`MAX_MODEL_NAME_BYTES`]
/// bytes and no control characters (no model has them; in a metric label a carriage return would
/// pass unescaped and split the exposition's line for some readers).
pub fn check_model_name(model: &str) -> Result<(), ParseError> {
    if model.len() > MAX_MODEL_NAME_BYTES {
        return Err(ParseError::ModelNameTooLong);
    }
    if model.chars().any(char::is_control) {
        return Err(ParseError::BadField {
            field: "model",
            expected: "a name without control characters",
        });
    }
    Ok(())
}

/// The most top-level members a caller body may have (SPEC §14 "Bodies").
pub const MAX_TOP_LEVEL_MEMBERS: usize = 1024;

impl ParseError {
    /// The routing log's `gatewayRejected:<why>` for this error.
    pub fn why(&self) -> &'static str {
        match self {
            ParseError::ModelNameTooLong => "modelNameTooLong",
            ParseError::DuplicateKey(_) => "duplicateKey",
            ParseError::TooManyMembers => "tooManyMembers",
            _ => "invalidRequest",
        }
    }
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
            ParseError::ModelNameTooLong => write!(
                f,
                "the model name is longer than {MAX_MODEL_NAME_BYTES} bytes"
            ),
            ParseError::DuplicateKey(key) => {
                write!(f, "the request body repeats the top-level key `{key}`")
            }
            ParseError::TooManyMembers => write!(
                f,
                "the request body has more than {MAX_TOP_LEVEL_MEMBERS} top-level members"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// A caller body as text and its top-level members (see [`TopMembers`]): a body that is not UTF-8
/// or not JSON is `NotJson`, JSON that is not an object `NotAnObject`, an object that repeats a
/// top-level key `DuplicateKey`. Reads as `serde_json::from_str` does (value, then only
/// whitespace), so its errors and their messages are serde_json's.
pub(crate) fn parse_top(body: &[u8]) -> Result<(&str, TopMembers<'_>), ParseError> {
    let text = std::str::from_utf8(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let mut refused = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let read = TopMembersSeed {
        refused: &mut refused,
    }
    .deserialize(&mut de)
    .and_then(|top| de.end().map(|()| top));
    match read {
        Ok(top) => Ok((text, top)),
        Err(_) if refused.is_some() => Err(refused.unwrap_or(ParseError::NotAnObject)),
        Err(e) if e.classify() == serde_json::error::Category::Data => Err(ParseError::NotAnObject),
        Err(e) => Err(ParseError::NotJson(e.to_string())),
    }
}

impl ParsedRequest {
    /// Parses a JSON body whose top level carries `model` and optional `stream`, without building a
    /// tree of the whole document: the few top-level values routing reads stay raw slices of the
    /// input and every other value is only checked (see `TopMembers`).
    pub fn parse_json_top(dialect: Dialect, body: Bytes) -> Result<ParsedRequest, ParseError> {
        let (text, top) = parse_top(&body)?;
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
        // An escape is at most 6 bytes for 1 (`\u0041`), so a longer string is too long decoded
        // too: refused without decoding it.
        if raw_model.get().starts_with('"') && raw_model.get().len() > MAX_MODEL_NAME_BYTES * 6 + 2
        {
            return Err(ParseError::ModelNameTooLong);
        }
        let model: String =
            serde_json::from_str(raw_model.get()).map_err(|_| ParseError::BadField {
                field: "model",
                expected: "a string",
            })?;
        if model.trim().is_empty() {
            return Err(ParseError::MissingModel);
        }
        check_model_name(&model)?;
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
            guardrail: None,
            base64_embeddings: false,
        };
        // Read only when present (seldom): `{"include_usage": true, ...}`.
        let stream_usage = top.stream_options.map(|raw| {
            #[derive(serde::Deserialize)]
            struct Options {
                include_usage: Option<serde_json::Value>,
            }
            serde_json::from_str::<Options>(raw.get())
                .is_ok_and(|o| o.include_usage == Some(serde_json::Value::Bool(true)))
        });
        Ok(ParsedRequest {
            dialect,
            model,
            stream,
            features,
            stream_usage,
            body: Bytes::new(),
            model_span,
        })
    }

    /// An OpenAI chat body (`body`, this request's or derived from it) that asks the upstream for
    /// the usage chunk of a stream (`stream_options.include_usage: true`). The member is added in
    /// front when the caller sent no `stream_options` (no parse); an existing one is rewritten.
    pub fn asking_stream_usage(&self, body: Bytes) -> Bytes {
        const MEMBER: &[u8] = br#""stream_options":{"include_usage":true},"#;
        if self.stream_usage.is_none() {
            let Some(open) = body.iter().position(|b| *b == b'{') else {
                return body;
            };
            let mut out = BytesMut::with_capacity(body.len() + MEMBER.len());
            out.extend_from_slice(&body[..=open]);
            out.extend_from_slice(MEMBER);
            out.extend_from_slice(&body[open + 1..]);
            return out.freeze();
        }
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return body;
        };
        if let Some(o) = v.get_mut("stream_options").and_then(|o| o.as_object_mut()) {
            o.insert("include_usage".into(), serde_json::Value::Bool(true));
        } else if let Some(top) = v.as_object_mut() {
            top.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        Bytes::from(v.to_string())
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
            stream_usage: None,
            body,
            model_span: 0..0,
        }
    }

    /// Notes the caller's headers (`names`, any case) that ask for a Bedrock guardrail
    /// ([`is_guardrail_header`]). On a Bedrock caller the guardrail travels with the caller's own
    /// format; on any other dialect no destination is sent the request untranslated to Bedrock, so
    /// none can enforce it and every destination is `INELIGIBLE:guardrail` (never served
    /// unguarded). A guardrail already found in the body is kept.
    pub fn note_guardrail_headers<'n>(&mut self, mut names: impl Iterator<Item = &'n str>) {
        if self.features.guardrail.is_some() || !names.any(is_guardrail_header) {
            return;
        }
        self.features.guardrail = Some(match self.dialect {
            Dialect::BedrockConverse => Dialect::BedrockConverse,
            _ => Dialect::BedrockInvoke,
        });
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

/// The top-level members the dialects' `parse_request` read, as raw slices of the body.
///
/// It replaces a `BTreeMap<Cow<str>, &RawValue>` of every member, which cost an allocation or more
/// per member on every request. The top level must be a map, or serde reports a `Data` error. Keys
/// are decoded, escapes included, before they are matched and compared, so `"mod\u0065l"` is
/// `model`. A key that repeats ends the read ([`TopMembersSeed`]). Every other value is skipped with
/// `IgnoredAny`, which runs the same syntax check as reading a `&RawValue` (serde_json's
/// `ignore_value`), so errors and their messages are unchanged.
#[derive(Default)]
pub(crate) struct TopMembers<'a> {
    pub(crate) model: Option<&'a RawValue>,
    pub(crate) stream: Option<&'a RawValue>,
    pub(crate) tools: Option<&'a RawValue>,
    pub(crate) response_format: Option<&'a RawValue>,
    /// Bedrock Converse's tools.
    pub(crate) tool_config: Option<&'a RawValue>,
    /// Structured output in Bedrock InvokeModel's Anthropic body.
    pub(crate) output_format: Option<&'a RawValue>,
    /// OpenAI chat's `stream_options` (`include_usage`).
    pub(crate) stream_options: Option<&'a RawValue>,
    /// Bedrock's `guardrailConfig` (Converse; SPEC §11 guardrails).
    pub(crate) guardrail_config: Option<&'a RawValue>,
    /// Gemini's `generationConfig` (structured output).
    pub(crate) generation_config: Option<&'a RawValue>,
    /// Gemini's `safetySettings` (SPEC §11: a safety setting is never dropped).
    pub(crate) safety_settings: Option<&'a RawValue>,
}

/// Reads [`TopMembers`] and refuses a repeated top-level key or too many members, noting why in
/// `refused` (a serde error carries only a message; this is how [`parse_top`] tells it from a
/// non-object).
struct TopMembersSeed<'s> {
    refused: &'s mut Option<ParseError>,
}

impl<'de> DeserializeSeed<'de> for TopMembersSeed<'_> {
    type Value = TopMembers<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopMembersSeed<'_> {
    type Value = TopMembers<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopMembers<'de>, A::Error> {
        let refused = self.refused;
        let mut refuse = |why: ParseError| -> A::Error {
            *refused = Some(why);
            serde::de::Error::custom("the top-level members are refused")
        };
        let mut top = TopMembers::default();
        let mut others = SeenKeys::new();
        let mut members = 0;
        while let Some(key) = map.next_key::<TopKey<'de>>()? {
            members += 1;
            if members > MAX_TOP_LEVEL_MEMBERS {
                return Err(refuse(ParseError::TooManyMembers));
            }
            let (slot, name) = match key {
                TopKey::Model => (&mut top.model, "model"),
                TopKey::Stream => (&mut top.stream, "stream"),
                TopKey::Tools => (&mut top.tools, "tools"),
                TopKey::ResponseFormat => (&mut top.response_format, "response_format"),
                TopKey::ToolConfig => (&mut top.tool_config, "toolConfig"),
                TopKey::OutputFormat => (&mut top.output_format, "output_format"),
                TopKey::StreamOptions => (&mut top.stream_options, "stream_options"),
                TopKey::GuardrailConfig => (&mut top.guardrail_config, "guardrailConfig"),
                TopKey::GenerationConfig => (&mut top.generation_config, "generationConfig"),
                TopKey::SafetySettings => (&mut top.safety_settings, "safetySettings"),
                TopKey::Other(key) => {
                    if let Err(key) = others.insert(key) {
                        return Err(refuse(ParseError::DuplicateKey(shown_key(&key))));
                    }
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(refuse(ParseError::DuplicateKey(shown_key(name))));
            }
            *slot = Some(map.next_value()?);
        }
        Ok(top)
    }
}

/// A key as the error message shows it: at most 64 bytes (a key can be megabytes long).
fn shown_key(key: &str) -> String {
    let mut end = key.len().min(64);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    key[..end].to_owned()
}

/// How many other keys [`SeenKeys`] keeps in place before it moves them to a hash set.
const INLINE_KEYS: usize = 16;

/// The top-level keys seen so far that [`TopMembers`] does not read. A body has a handful: they
/// are kept in place (borrowed from the body unless the key had an escape) and compared one by
/// one, with no allocation and no hashing. Past [`INLINE_KEYS`] they move to a hash set, so a body
/// of many keys is still checked in linear time.
struct SeenKeys<'de> {
    inline: [Cow<'de, str>; INLINE_KEYS],
    len: usize,
    spilled: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> SeenKeys<'de> {
    fn new() -> SeenKeys<'de> {
        SeenKeys {
            inline: [const { Cow::Borrowed("") }; INLINE_KEYS],
            len: 0,
            spilled: None,
        }
    }

    /// Adds `key`; gives it back if it was seen before.
    fn insert(&mut self, key: Cow<'de, str>) -> Result<(), Cow<'de, str>> {
        if let Some(set) = &mut self.spilled {
            if set.contains(&key) {
                return Err(key);
            }
            set.insert(key);
            return Ok(());
        }
        if self.inline[..self.len].contains(&key) {
            return Err(key);
        }
        if self.len < INLINE_KEYS {
            self.inline[self.len] = key;
            self.len += 1;
            return Ok(());
        }
        let mut set: HashSet<Cow<'de, str>> = self.inline.iter_mut().map(std::mem::take).collect();
        set.insert(key);
        self.spilled = Some(set);
        Ok(())
    }
}

/// A top-level key, matched after decoding (so `"mod\u0065l"` is `model`). Other keys are kept
/// for the repeat check, borrowed from the body when they have no escape.
enum TopKey<'de> {
    Model,
    Stream,
    Tools,
    ResponseFormat,
    ToolConfig,
    OutputFormat,
    StreamOptions,
    GuardrailConfig,
    GenerationConfig,
    SafetySettings,
    Other(Cow<'de, str>),
}

impl TopKey<'_> {
    fn known(key: &str) -> Option<TopKey<'static>> {
        Some(match key {
            "model" => TopKey::Model,
            "stream" => TopKey::Stream,
            "tools" => TopKey::Tools,
            "response_format" => TopKey::ResponseFormat,
            "toolConfig" => TopKey::ToolConfig,
            "output_format" => TopKey::OutputFormat,
            "stream_options" => TopKey::StreamOptions,
            "guardrailConfig" => TopKey::GuardrailConfig,
            "generationConfig" => TopKey::GenerationConfig,
            "safetySettings" => TopKey::SafetySettings,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for TopKey<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TopKeyVisitor)
    }
}

struct TopKeyVisitor;

impl<'de> Visitor<'de> for TopKeyVisitor {
    type Value = TopKey<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, key: &'de str) -> Result<TopKey<'de>, E> {
        Ok(TopKey::known(key).unwrap_or(TopKey::Other(Cow::Borrowed(key))))
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<TopKey<'de>, E> {
        Ok(TopKey::known(key).unwrap_or_else(|| TopKey::Other(Cow::Owned(key.to_owned()))))
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

    /// Every top-level member in order, as a plain serde map visitor reads them.
    struct AllMembers<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

    impl<'de> Deserialize<'de> for AllMembers<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = AllMembers<'de>;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a map")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut all = Vec::new();
                    while let Some(entry) = map.next_entry()? {
                        all.push(entry);
                    }
                    Ok(AllMembers(all))
                }
            }
            d.deserialize_map(V)
        }
    }

    /// `parse_json_top` as it was before `TopMembers` (every member into a collection), plus the
    /// repeat check done afterwards on the whole list.
    fn reference_parse(dialect: Dialect, body: Bytes) -> Result<ParsedRequest, ParseError> {
        let text = std::str::from_utf8(&body).map_err(|e| ParseError::NotJson(e.to_string()))?;
        let all: AllMembers<'_> = match serde_json::from_str(text) {
            Ok(all) => all,
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(ParseError::NotAnObject)
            }
            Err(e) => return Err(ParseError::NotJson(e.to_string())),
        };
        for (i, (key, _)) in all.0.iter().enumerate() {
            if all.0[..i].iter().any(|(k, _)| k == key) {
                return Err(ParseError::DuplicateKey(shown_key(key)));
            }
        }
        let get = |name: &str| all.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        let members = TopMembers {
            model: get("model"),
            stream: get("stream"),
            tools: get("tools"),
            response_format: get("response_format"),
            tool_config: get("toolConfig"),
            output_format: get("output_format"),
            stream_options: get("stream_options"),
            guardrail_config: get("guardrailConfig"),
            generation_config: get("generationConfig"),
            safety_settings: get("safetySettings"),
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
            br#"{"model":"a","messages":[],"messages":[]}"#,
            br#"{"messages":[],"model":"a","mess\u0061ges":1}"#,
            br#"{"model":"a","toolConfig":{},"toolConfig":{}}"#,
            br#"{"model":"a","x":{"k":1,"k":2}}"#,
            br#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"model":"a"}"#,
            br#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"model":"a","b":0}"#,
            br#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"model":"a","p":0}"#,
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
    fn a_repeated_top_level_key_is_refused_whatever_it_is() {
        for (body, key) in [
            (r#"{"model":"a","model":"b"}"#, "model"),
            (r#"{"model":"a","mod\u0065l":"b"}"#, "model"),
            (r#"{"model":"a","stream":true,"stream":false}"#, "stream"),
            (r#"{"model":"a","messages":[],"messages":[1]}"#, "messages"),
            (r#"{"x\u00e9":1,"model":"a","xé":2}"#, "xé"),
        ] {
            assert_eq!(
                parse(body).unwrap_err(),
                ParseError::DuplicateKey(key.into()),
                "{body}"
            );
        }
        // Found where it repeats, before the rest is read.
        assert_eq!(
            parse(r#"{"model":"a","model":"b", broken"#).unwrap_err(),
            ParseError::DuplicateKey("model".into())
        );
        // More members than any request needs: refused, not all kept for the repeat check.
        let members = |n: usize| -> String {
            let keys: Vec<String> = (0..n).map(|i| format!(r#""k{i}":{i}"#)).collect();
            format!(r#"{{"model":"a",{}}}"#, keys.join(","))
        };
        assert!(parse(&members(MAX_TOP_LEVEL_MEMBERS - 1)).is_ok());
        assert_eq!(
            parse(&members(MAX_TOP_LEVEL_MEMBERS)).unwrap_err(),
            ParseError::TooManyMembers
        );
        assert_eq!(ParseError::TooManyMembers.why(), "tooManyMembers");
        // Many keys (past the in-place list) are still checked, the repeat found wherever it is.
        let many: Vec<String> = (0..1000).map(|i| format!(r#""k{i}":{i}"#)).collect();
        let ok = format!(r#"{{"model":"a",{}}}"#, many.join(","));
        assert!(parse(&ok).is_ok());
        let twice = format!(r#"{{"model":"a",{},"k3":0}}"#, many.join(","));
        assert_eq!(
            parse(&twice).unwrap_err(),
            ParseError::DuplicateKey("k3".into())
        );
        // Nested objects are not the top level.
        assert!(parse(r#"{"model":"a","metadata":{"k":1,"k":2}}"#).is_ok());
        // The key shown is cut to 64 bytes.
        let long = "é".repeat(100);
        let body = format!(r#"{{"model":"a","{long}":1,"{long}":2}}"#);
        match parse(&body).unwrap_err() {
            ParseError::DuplicateKey(k) => assert_eq!(k, "é".repeat(32)),
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_model_name_over_256_bytes_is_refused() {
        let at = "m".repeat(MAX_MODEL_NAME_BYTES);
        assert_eq!(parse(&format!(r#"{{"model":"{at}"}}"#)).unwrap().model, at);
        let over = "m".repeat(MAX_MODEL_NAME_BYTES + 1);
        assert_eq!(
            parse(&format!(r#"{{"model":"{over}"}}"#)).unwrap_err(),
            ParseError::ModelNameTooLong
        );
        // Counted in bytes of the decoded name: escapes do not count, multi-byte characters do.
        let escaped = "\\u0041".repeat(MAX_MODEL_NAME_BYTES);
        assert_eq!(
            parse(&format!(r#"{{"model":"{escaped}"}}"#)).unwrap().model,
            "A".repeat(MAX_MODEL_NAME_BYTES)
        );
        let wide = "é".repeat(MAX_MODEL_NAME_BYTES / 2 + 1);
        assert_eq!(
            parse(&format!(r#"{{"model":"{wide}"}}"#)).unwrap_err(),
            ParseError::ModelNameTooLong
        );
        // A very long one is refused without being decoded; a long non-string is still not a string.
        let huge = "m".repeat(1 << 20);
        assert_eq!(
            parse(&format!(r#"{{"model":"{huge}"}}"#)).unwrap_err(),
            ParseError::ModelNameTooLong
        );
        let array = format!(r#"{{"model":[{}1]}}"#, "1,".repeat(2000));
        assert!(matches!(
            parse(&array),
            Err(ParseError::BadField { field: "model", .. })
        ));
        assert_eq!(ParseError::ModelNameTooLong.why(), "modelNameTooLong");
        assert_eq!(ParseError::DuplicateKey("k".into()).why(), "duplicateKey");
        assert_eq!(ParseError::MissingModel.why(), "invalidRequest");
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
