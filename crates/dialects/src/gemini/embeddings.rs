//! OpenAI embeddings (SPEC §12) on Google AI: `POST {root}/v1beta/models/{model}:batchEmbedContents`
//! with one `EmbedContentRequest` per input text (`{"model": "models/{model}", "content":
//! {"parts": [{"text"}]}}`, OpenAI's `dimensions` as `outputDimensionality`), answered by
//! `{"embeddings": [{"values": [...]}, ...]}` in request order.
//!
//! Google's answer carries no token count: the OpenAI answer reports `prompt_tokens: 0`, as a
//! Bedrock embeddings answer does when Bedrock states no count. Token arrays (OpenAI's other
//! `input` form) cannot be sent, and at most [`MAX_TEXTS`] texts go in one call: such a request
//! makes a gemini destination `INELIGIBLE:translation`, like Titan with more than one text.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::canonical::TranslateError;
use crate::request::ParsedRequest;

/// The operation of an embeddings call.
pub const BATCH_EMBED: &str = "batchEmbedContents";
/// The most requests Google AI takes in one `batchEmbedContents` call.
pub const MAX_TEXTS: usize = 100;

/// The path of an embeddings call for `model` under `version` (`v1beta`); the model is
/// percent-encoded as a path segment, as for `generateContent`.
pub fn path(version: &str, model: &str) -> String {
    super::model_path(version, model, BATCH_EMBED)
}

#[derive(Serialize)]
struct Batch<'a> {
    requests: Vec<EmbedRequest<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EmbedRequest<'a> {
    model: &'a str,
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_dimensionality: Option<u64>,
}

#[derive(Serialize)]
struct Content<'a> {
    parts: [Part<'a>; 1],
}

#[derive(Serialize)]
struct Part<'a> {
    text: &'a str,
}

/// The `batchEmbedContents` body of an OpenAI embeddings request for `model` (one request per
/// text, in order).
pub(crate) fn request_body(req: &ParsedRequest, model: &str) -> Result<Bytes, TranslateError> {
    let request =
        crate::openai_embeddings::read(req.body()).map_err(|e| TranslateError(e.to_string()))?;
    let Some(texts) = request.texts else {
        return Err(TranslateError(
            "token-array input can only be sent to an OpenAI-compatible destination".into(),
        ));
    };
    if texts.len() > MAX_TEXTS {
        return Err(TranslateError(format!(
            "Google AI embeds at most {MAX_TEXTS} texts per request; this one has {}",
            texts.len()
        )));
    }
    let name = format!("models/{}", model.strip_prefix("models/").unwrap_or(model));
    let batch = Batch {
        requests: texts
            .iter()
            .map(|text| EmbedRequest {
                model: &name,
                content: Content {
                    parts: [Part { text }],
                },
                output_dimensionality: request.dimensions,
            })
            .collect(),
    };
    serde_json::to_vec(&batch)
        .map(Bytes::from)
        .map_err(|e| TranslateError(e.to_string()))
}

#[derive(Deserialize)]
struct Answer {
    embeddings: Vec<Embedding>,
}

#[derive(Deserialize)]
struct Embedding {
    values: Vec<f32>,
}

/// Google's whole `batchEmbedContents` answer (`raw`) in OpenAI's shape (`index` = request
/// order; `prompt_tokens: 0`, Google states none). An answer without vectors is an error.
pub fn answer(raw: &[u8], model: &str, base64: bool) -> Result<Bytes, TranslateError> {
    let a: Answer = serde_json::from_slice(raw)
        .map_err(|e| TranslateError(format!("not an embeddings answer: {e}")))?;
    if a.embeddings.is_empty() {
        return Err(TranslateError(
            "not an embeddings answer: no embeddings".into(),
        ));
    }
    let vectors: Vec<Vec<f32>> = a.embeddings.into_iter().map(|e| e.values).collect();
    Ok(crate::openai_embeddings::render(&vectors, model, 0, base64))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use serde_json::{json, Value};

    use super::*;
    use crate::Dialect;

    fn parse(body: &str) -> ParsedRequest {
        crate::openai_embeddings::parse_request(Bytes::from(body.to_owned())).unwrap()
    }

    fn body_of(body: &str, model: &str) -> Value {
        let req = parse(body);
        let out = crate::openai_embeddings::request_body(Dialect::Gemini, &req, model).unwrap();
        assert!(
            out.starts_with(br#"{"requests":["#),
            "{}",
            String::from_utf8_lossy(&out)
        );
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn one_request_per_text_with_the_model_and_dimensions() {
        let v = body_of(r#"{"model":"e","input":"hello"}"#, "gemini-embedding-001");
        assert_eq!(
            v,
            json!({"requests": [{"model": "models/gemini-embedding-001",
                                 "content": {"parts": [{"text": "hello"}]}}]})
        );
        let v = body_of(
            r#"{"model":"e","input":["a","b c"],"dimensions":256}"#,
            "models/text-embedding-004",
        );
        let one = |t: &str| {
            json!({"model": "models/text-embedding-004",
                   "content": {"parts": [{"text": t}]}, "outputDimensionality": 256})
        };
        assert_eq!(v, json!({"requests": [one("a"), one("b c")]}));
        assert_eq!(
            path("v1beta", "gemini-embedding-001"),
            "/v1beta/models/gemini-embedding-001:batchEmbedContents"
        );
    }

    #[test]
    fn token_arrays_and_oversized_batches_cannot_be_sent() {
        let tokens = parse(r#"{"model":"e","input":[[1,2],[3]]}"#);
        let e = crate::openai_embeddings::request_body(Dialect::Gemini, &tokens, "g").unwrap_err();
        assert!(e.0.contains("token-array"), "{e}");
        let many = format!(
            r#"{{"model":"e","input":[{}]}}"#,
            vec!["\"w\""; MAX_TEXTS + 1].join(",")
        );
        let e = crate::openai_embeddings::request_body(Dialect::Gemini, &parse(&many), "g")
            .unwrap_err();
        assert!(e.0.contains("at most 100"), "{e}");
        let most = format!(
            r#"{{"model":"e","input":[{}]}}"#,
            vec!["\"w\""; MAX_TEXTS].join(",")
        );
        assert!(
            crate::openai_embeddings::request_body(Dialect::Gemini, &parse(&most), "g").is_ok()
        );
    }

    #[test]
    fn answers_come_back_as_an_openai_list_in_order() {
        let raw = br#"{"embeddings":[{"values":[0.5,-0.25]},{"values":[1.0,2.0]}]}"#;
        let out = answer(raw, "gemini-embedding-001", false).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["model"], "gemini-embedding-001");
        assert_eq!(v["data"][0]["index"], 0);
        assert_eq!(v["data"][0]["embedding"], json!([0.5, -0.25]));
        assert_eq!(v["data"][1]["index"], 1);
        assert_eq!(v["data"][1]["embedding"], json!([1.0, 2.0]));
        assert_eq!(v["usage"], json!({"prompt_tokens": 0, "total_tokens": 0}));
        let out = answer(raw, "g", true).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let b64 = v["data"][1]["embedding"].as_str().unwrap();
        let want: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(STANDARD.decode(b64).unwrap(), want);
    }

    #[test]
    fn a_malformed_answer_is_an_error() {
        for raw in [
            &b"{}"[..],
            br#"{"embeddings":[]}"#,
            br#"{"embeddings":[{"value":[1.0]}]}"#,
            br#"{"embeddings":[{"values":["x"]}]}"#,
            b"not json",
        ] {
            assert!(
                answer(raw, "g", false).is_err(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}
