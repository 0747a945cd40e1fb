//! OpenAI embeddings (`POST /v1/embeddings`, SPEC §12): the caller request, its translation to
//! Bedrock's embedding models (InvokeModel bodies of Titan Text Embeddings and Cohere Embed) and to
//! Google AI's `batchEmbedContents` ([`crate::gemini::embeddings`]), and their answers back in
//! OpenAI's shape ([`answer`]).
//!
//! Embeddings have no canonical chat form: a request goes to an OpenAI-compatible destination
//! byte-for-byte (only `model` rewritten) or to a Bedrock or Gemini one through [`request_body`];
//! every other format cannot carry it ([`TranslateError`]: the destination is
//! `INELIGIBLE:translation`).
//!
//! Titan takes one text per request: an `input` with more than one text is not fanned out, it makes
//! a Titan destination ineligible (Cohere takes up to [`COHERE_MAX_TEXTS`] texts).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use crate::canonical::TranslateError;
use crate::request::{ParseError, ParsedRequest};
use crate::{Dialect, Usage};

/// The most texts (or token arrays) one request may carry, as OpenAI's own limit.
pub const MAX_INPUTS: usize = 2048;
/// The most texts Cohere Embed on Bedrock takes in one call.
pub const COHERE_MAX_TEXTS: usize = 96;
/// The dimensions Titan Text Embeddings v2 accepts.
const TITAN_DIMENSIONS: [u64; 3] = [256, 512, 1024];

/// `input`: one text, texts, one token array, or token arrays.
#[derive(Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u64>),
    TokenLists(Vec<Vec<u64>>),
}

/// The members of the request this module reads (the rest pass through to OpenAI upstreams).
#[derive(Deserialize)]
struct Wire {
    input: Option<serde_json::Value>,
    dimensions: Option<serde_json::Value>,
    encoding_format: Option<serde_json::Value>,
}

/// The request as far as translation needs it.
pub(crate) struct Request {
    /// `None`: token arrays, which only an OpenAI upstream can read.
    pub(crate) texts: Option<Vec<String>>,
    pub(crate) dimensions: Option<u64>,
    base64: bool,
}

fn bad(field: &'static str, expected: &'static str) -> ParseError {
    ParseError::BadField { field, expected }
}

/// Reads and checks the members; errors say which one and what it must be.
pub(crate) fn read(body: &[u8]) -> Result<Request, ParseError> {
    let wire: Wire =
        serde_json::from_slice(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let input = wire.input.ok_or(bad("input", "present"))?;
    let expected =
        "a non-empty string, an array of at most 2048 non-empty strings, or token arrays";
    let input: Input = serde_json::from_value(input).map_err(|_| bad("input", expected))?;
    let texts = match input {
        Input::Text(t) => Some(vec![t]),
        Input::Texts(t) => Some(t),
        Input::Tokens(t) if !t.is_empty() => None,
        Input::TokenLists(t) if !t.is_empty() && t.iter().all(|l| !l.is_empty()) => {
            if t.len() > MAX_INPUTS {
                return Err(bad("input", expected));
            }
            None
        }
        _ => return Err(bad("input", expected)),
    };
    if let Some(t) = &texts {
        if t.is_empty() || t.len() > MAX_INPUTS || t.iter().any(String::is_empty) {
            return Err(bad("input", expected));
        }
    }
    let dimensions = match wire.dimensions {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|d| *d > 0)
                .ok_or(bad("dimensions", "a positive integer"))?,
        ),
    };
    let base64 = match wire.encoding_format.as_ref().map(|v| v.as_str()) {
        None | Some(Some("float")) => false,
        Some(Some("base64")) => true,
        _ => return Err(bad("encoding_format", "`float` or `base64`")),
    };
    Ok(Request {
        texts,
        dimensions,
        base64,
    })
}

/// Parses a caller body: `model` (required) as every JSON dialect, then `input` (≤ [`MAX_INPUTS`]
/// items, none empty; the whole body is already within `maxRequestBytes`), `dimensions` and
/// `encoding_format`. Never a stream.
pub fn parse_request(body: Bytes) -> Result<ParsedRequest, ParseError> {
    let mut parsed = ParsedRequest::parse_json_top(Dialect::OpenAiEmbeddings, body)?;
    let request = read(parsed.body())?;
    parsed.stream = false;
    parsed.stream_usage = None;
    parsed.features.base64_embeddings = request.base64;
    Ok(parsed)
}

/// Which Bedrock embedding family a model id names (a base id, an inference profile such as
/// `us.cohere.embed-v4:0`, or an ARN holding one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Titan,
    Cohere,
}

fn family(model: &str) -> Option<Family> {
    if model.contains("titan-embed") {
        Some(Family::Titan)
    } else if model.contains("cohere.embed") {
        Some(Family::Cohere)
    } else {
        None
    }
}

/// The request body for a destination of `format` and `model`: the caller's bytes for an OpenAI
/// embeddings upstream; an InvokeModel body for a Bedrock Titan or Cohere embedding model; a
/// `batchEmbedContents` body for Google AI (`Dialect::Gemini`); for anything else (or what the
/// model cannot take) a [`TranslateError`].
pub fn request_body(
    format: Dialect,
    req: &ParsedRequest,
    model: &str,
) -> Result<Bytes, TranslateError> {
    match format {
        Dialect::OpenAiEmbeddings => Ok(req.body_with_model(model)),
        Dialect::BedrockInvoke => bedrock_body(req, model),
        Dialect::Gemini => crate::gemini::embeddings::request_body(req, model),
        other => Err(TranslateError(format!(
            "embeddings cannot be sent in the {} format (only to OpenAI-compatible, Azure, \
             Bedrock Titan/Cohere and Google AI destinations)",
            other.as_str()
        ))),
    }
}

fn bedrock_body(req: &ParsedRequest, model: &str) -> Result<Bytes, TranslateError> {
    let request = read(req.body()).map_err(|e| TranslateError(e.to_string()))?;
    let Some(texts) = request.texts else {
        return Err(TranslateError(
            "token-array input can only be sent to an OpenAI-compatible destination".into(),
        ));
    };
    let body = match family(model) {
        Some(Family::Titan) => {
            let [text] = texts.as_slice() else {
                return Err(TranslateError(format!(
                    "Titan Text Embeddings takes one text per request; this one has {}",
                    texts.len()
                )));
            };
            match request.dimensions {
                None => json!({"inputText": text}),
                Some(d) if TITAN_DIMENSIONS.contains(&d) => {
                    json!({"inputText": text, "dimensions": d, "normalize": true})
                }
                Some(_) => {
                    return Err(TranslateError(
                        "Titan Text Embeddings takes dimensions 256, 512 or 1024 only".into(),
                    ))
                }
            }
        }
        Some(Family::Cohere) => {
            if texts.len() > COHERE_MAX_TEXTS {
                return Err(TranslateError(format!(
                    "Cohere Embed takes at most {COHERE_MAX_TEXTS} texts per request"
                )));
            }
            let mut body = json!({"texts": texts, "input_type": "search_document"});
            if let Some(d) = request.dimensions {
                if !model.contains("embed-v4") {
                    return Err(TranslateError(
                        "this Cohere Embed model has fixed dimensions".into(),
                    ));
                }
                body["output_dimension"] = json!(d);
            }
            body
        }
        None => {
            return Err(TranslateError(format!(
                "`{model}` is not a Bedrock embedding model (Titan Text Embeddings or Cohere Embed)"
            )))
        }
    };
    Ok(Bytes::from(body.to_string()))
}

/// Titan's answer.
#[derive(Deserialize)]
struct TitanAnswer {
    embedding: Vec<f32>,
    #[serde(rename = "inputTextTokenCount", default)]
    input_tokens: u64,
}

/// Cohere's `embeddings`: a list of vectors, or by type (`{"float": [...]}`).
#[derive(Deserialize)]
#[serde(untagged)]
enum CohereVectors {
    Floats(Vec<Vec<f32>>),
    ByType { float: Vec<Vec<f32>> },
}

#[derive(Deserialize)]
struct CohereAnswer {
    embeddings: CohereVectors,
}

/// An upstream's whole embeddings answer (`raw`, in `format` as [`request_body`] chose it) in
/// OpenAI's shape: a Bedrock embedding model's ([`bedrock_answer`]; `input_tokens` is Bedrock's
/// token-count header) or Google AI's ([`crate::gemini::embeddings::answer`], no token count).
pub fn answer(
    format: Dialect,
    raw: &[u8],
    model: &str,
    input_tokens: Option<u64>,
    base64: bool,
) -> Result<Bytes, TranslateError> {
    match format {
        Dialect::Gemini => crate::gemini::embeddings::answer(raw, model, base64),
        _ => bedrock_answer(raw, model, input_tokens, base64),
    }
}

/// A Bedrock embedding model's whole answer (`raw`) in OpenAI's shape. `input_tokens` is Bedrock's
/// `x-amzn-bedrock-input-token-count` header, used when the body has no count (Cohere).
pub fn bedrock_answer(
    raw: &[u8],
    model: &str,
    input_tokens: Option<u64>,
    base64: bool,
) -> Result<Bytes, TranslateError> {
    let bad = |e: serde_json::Error| TranslateError(format!("not an embeddings answer: {e}"));
    let (vectors, tokens) = match family(model) {
        Some(Family::Titan) => {
            let a: TitanAnswer = serde_json::from_slice(raw).map_err(bad)?;
            let tokens = if a.input_tokens > 0 {
                a.input_tokens
            } else {
                input_tokens.unwrap_or(0)
            };
            (vec![a.embedding], tokens)
        }
        _ => {
            let a: CohereAnswer = serde_json::from_slice(raw).map_err(bad)?;
            let v = match a.embeddings {
                CohereVectors::Floats(v) | CohereVectors::ByType { float: v } => v,
            };
            (v, input_tokens.unwrap_or(0))
        }
    };
    Ok(render(&vectors, model, tokens, base64))
}

/// OpenAI's list of embeddings, each vector as numbers or (`base64`) as its little-endian `f32`
/// bytes in base64.
pub fn render(vectors: &[Vec<f32>], model: &str, prompt_tokens: u64, base64: bool) -> Bytes {
    let data: Vec<serde_json::Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    });
    Bytes::from(body.to_string())
}

/// The usage of an embeddings answer (`usage.prompt_tokens`; no output tokens).
pub fn response_usage(body: &[u8]) -> Option<Usage> {
    #[derive(Deserialize)]
    struct Answer {
        usage: Option<WireUsage>,
    }
    #[derive(Deserialize)]
    struct WireUsage {
        #[serde(default)]
        prompt_tokens: u64,
    }
    let usage = serde_json::from_slice::<Answer>(body).ok()?.usage?;
    Some(Usage {
        input_tokens: usage.prompt_tokens,
        output_tokens: 0,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(body: &str) -> Result<ParsedRequest, ParseError> {
        parse_request(Bytes::from(body.to_owned()))
    }

    #[test]
    fn requests_are_checked_with_clear_errors() {
        let ok = parse(r#"{"model":"e","input":"hello","encoding_format":"base64"}"#).unwrap();
        assert_eq!(ok.model, "e");
        assert!(ok.features.base64_embeddings);
        assert!(!ok.stream);
        assert!(parse(r#"{"model":"e","input":[[1,2],[3]]}"#).is_ok());
        assert_eq!(
            parse(r#"{"input":"x"}"#).err(),
            Some(ParseError::MissingModel)
        );
        for (body, field) in [
            (r#"{"model":"e"}"#, "input"),
            (r#"{"model":"e","input":""}"#, "input"),
            (r#"{"model":"e","input":[]}"#, "input"),
            (r#"{"model":"e","input":["a",""]}"#, "input"),
            (r#"{"model":"e","input":{"a":1}}"#, "input"),
            (r#"{"model":"e","input":"a","dimensions":0}"#, "dimensions"),
            (
                r#"{"model":"e","input":"a","dimensions":"8"}"#,
                "dimensions",
            ),
            (
                r#"{"model":"e","input":"a","encoding_format":"int8"}"#,
                "encoding_format",
            ),
        ] {
            match parse(body) {
                Err(ParseError::BadField { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        let many = format!(
            r#"{{"model":"e","input":[{}]}}"#,
            vec!["\"w\""; MAX_INPUTS + 1].join(",")
        );
        assert!(matches!(parse(&many), Err(ParseError::BadField { .. })));
        let most = format!(
            r#"{{"model":"e","input":[{}]}}"#,
            vec!["\"w\""; MAX_INPUTS].join(",")
        );
        assert!(parse(&most).is_ok());
    }

    #[test]
    fn titan_takes_one_text_and_cohere_takes_many() {
        let one = parse(r#"{"model":"e","input":["hi"],"dimensions":512}"#).unwrap();
        let titan = "amazon.titan-embed-text-v2:0";
        let body = request_body(Dialect::BedrockInvoke, &one, titan).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"inputText": "hi", "dimensions": 512, "normalize": true})
        );
        let two = parse(r#"{"model":"e","input":["a","b"]}"#).unwrap();
        let e = request_body(Dialect::BedrockInvoke, &two, titan).unwrap_err();
        assert!(e.0.contains("one text"), "{e}");
        let body = request_body(Dialect::BedrockInvoke, &two, "cohere.embed-english-v3").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"texts": ["a", "b"], "input_type": "search_document"})
        );
        let odd = parse(r#"{"model":"e","input":"a","dimensions":100}"#).unwrap();
        assert!(request_body(Dialect::BedrockInvoke, &odd, titan).is_err());
        assert!(request_body(Dialect::BedrockInvoke, &two, "anthropic.claude").is_err());
        assert!(request_body(Dialect::AnthropicMessages, &two, "m").is_err());
        let tokens = parse(r#"{"model":"e","input":[1,2]}"#).unwrap();
        assert!(request_body(Dialect::BedrockInvoke, &tokens, "cohere.embed-v4:0").is_err());
        let same = request_body(Dialect::OpenAiEmbeddings, &two, "other").unwrap();
        assert!(std::str::from_utf8(&same)
            .unwrap()
            .contains(r#""model":"other""#));
    }

    #[test]
    fn bedrock_answers_come_back_in_openai_shape() {
        let titan = br#"{"embedding":[0.5,-0.25],"inputTextTokenCount":7}"#;
        let out = bedrock_answer(titan, "amazon.titan-embed-text-v2:0", None, false).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["data"][0]["embedding"], json!([0.5, -0.25]));
        assert_eq!(v["usage"], json!({"prompt_tokens": 7, "total_tokens": 7}));
        assert_eq!(response_usage(&out).unwrap().input_tokens, 7);
        let cohere = br#"{"id":"x","embeddings":[[1.0],[2.0]],"texts":["a","b"]}"#;
        let out = bedrock_answer(cohere, "cohere.embed-english-v3", Some(3), true).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["data"][1]["index"], 1);
        let b64 = v["data"][1]["embedding"].as_str().unwrap();
        assert_eq!(STANDARD.decode(b64).unwrap(), 2.0f32.to_le_bytes());
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        let by_type = br#"{"embeddings":{"float":[[1.0]]}}"#;
        assert!(bedrock_answer(by_type, "cohere.embed-v4:0", None, false).is_ok());
        assert!(bedrock_answer(b"{}", "amazon.titan-embed-text-v2:0", None, false).is_err());
    }
}
