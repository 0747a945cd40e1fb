//! The parsed caller request, kept for the whole walk so every hop can re-render it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
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

impl ParsedRequest {
    /// Parses a JSON body whose top level carries `model` and optional `stream`, without building a
    /// tree of the whole document: top-level values stay raw slices of the input.
    pub fn parse_json_top(dialect: Dialect, body: Bytes) -> Result<ParsedRequest, ParseError> {
        let text = std::str::from_utf8(&body).map_err(|e| ParseError::NotJson(e.to_string()))?;
        let top: BTreeMap<Cow<'_, str>, &RawValue> = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(e) if e.classify() == serde_json::error::Category::Data => {
                return Err(ParseError::NotAnObject)
            }
            Err(e) => return Err(ParseError::NotJson(e.to_string())),
        };
        let raw_model = top.get("model").ok_or(ParseError::MissingModel)?;
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
        let stream = match top.get("stream") {
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
            .get("tools")
            .is_some_and(|raw| !matches!(raw.get(), "null" | "[]"));
        let json_schema = top
            .get("response_format")
            .is_some_and(|raw| raw.get().contains("\"json_schema\""));
        let features = Features {
            tools,
            json_schema,
            estimated_prompt_tokens: (body.len() as u64) / 4,
        };
        Ok(ParsedRequest {
            dialect,
            model,
            stream,
            features,
            body,
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
