//! Embeddings (SPEC §12): OpenAI's `POST /v1/embeddings`, and Bedrock InvokeModel for the embedding
//! models — Titan Text Embeddings (`…titan-embed…`: `{"inputText"}` → `{"embedding",
//! "inputTextTokenCount"}`) and Cohere Embed (`…cohere.embed…`: `{"texts", "input_type"}` →
//! `{"embeddings": [[…]]}`), and Google AI's `POST /{v1beta|v1}/models/{model}:batchEmbedContents`
//! (`{"requests": [{"model", "content": {"parts": [{"text"}]}, "outputDimensionality"}]}` →
//! `{"embeddings": [{"values": […]}]}`, no usage; errors as Google frames them).
//!
//! Vectors are deterministic and texts that share most words are close: a text's vector is the
//! normalised sum of one pseudo-random unit vector per word (split on anything not alphanumeric,
//! lower-cased), each drawn from SplitMix64 seeded with the word's FNV-1a hash. Two texts of ten
//! distinct words sharing nine have a cosine near 0.9; unrelated texts near 0. Tokens: one per word.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::{HeaderValue, Response};
use serde_json::{json, Value};

use super::bedrock::{bedrock_response, validation_error};
use super::{openai_chat, parse_json, response, RenderContext};
use crate::body::{self, MockBody};
use crate::engine::{MockError, RequestFacts, Success};
use crate::prng::SplitMix64;

/// Mixed into every word's seed (so the vectors are the mock's own).
const SEED: u64 = 0x5EED_0E3B_ED00_0017;
/// OpenAI's default width (`text-embedding-3-small`, `ada-002`).
pub const OPENAI_DIMENSIONS: usize = 1536;
/// Titan Text Embeddings v2's default width (v1: 1536).
pub const TITAN_DIMENSIONS: usize = 1024;
/// Cohere Embed v3's width.
pub const COHERE_DIMENSIONS: usize = 1024;
/// `gemini-embedding-001`'s default width; Google's older `text-embedding-004` and
/// `embedding-001`: [`GOOGLE_LEGACY_DIMENSIONS`].
pub const GEMINI_DIMENSIONS: usize = 3072;
pub const GOOGLE_LEGACY_DIMENSIONS: usize = 768;
/// Google AI's limit on requests per `batchEmbedContents` call.
const GEMINI_MAX_REQUESTS: usize = 100;
/// The widest vector the mock draws.
const MAX_DIMENSIONS: usize = 16_384;
/// OpenAI's limit on texts per request; Cohere on Bedrock takes 96.
const OPENAI_MAX_INPUTS: usize = 2048;
const COHERE_MAX_TEXTS: usize = 96;

/// Which embedding API a request spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Titan,
    Cohere,
    /// Google AI's `:batchEmbedContents`.
    Gemini,
}

/// Whether a Bedrock model id names an embedding model, and which.
pub fn bedrock_api(model_id: &str) -> Option<Api> {
    if model_id.contains("titan-embed") {
        Some(Api::Titan)
    } else if model_id.contains("cohere.embed") {
        Some(Api::Cohere)
    } else {
        None
    }
}

/// One word's seed.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The unit vector of one word, added into `sum`.
fn add_word(sum: &mut [f64], word: &str) {
    let seed = SEED ^ fnv1a(word.to_lowercase().as_bytes());
    let mut norm = 0.0;
    let mut rng = SplitMix64::new(seed);
    for _ in 0..sum.len() {
        let x = rng.next_f64() * 2.0 - 1.0;
        norm += x * x;
    }
    let norm = norm.sqrt().max(f64::MIN_POSITIVE);
    let mut rng = SplitMix64::new(seed);
    for s in sum.iter_mut() {
        *s += (rng.next_f64() * 2.0 - 1.0) / norm;
    }
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// The deterministic unit vector of `text` (a text without words: the vector of the text as a
/// whole, so it is still a unit vector).
pub fn vector(text: &str, dims: usize) -> Vec<f32> {
    let mut sum = vec![0.0f64; dims];
    let mut any = false;
    for w in words(text) {
        add_word(&mut sum, w);
        any = true;
    }
    if !any {
        add_word(&mut sum, text);
    }
    let norm = sum.iter().map(|x| x * x).sum::<f64>().sqrt();
    let norm = if norm > 0.0 { norm } else { 1.0 };
    sum.iter().map(|x| (x / norm) as f32).collect()
}

/// Tokens of a text: one per word (at least one).
pub fn tokens(text: &str) -> u64 {
    (words(text).count() as u64).max(1)
}

fn openai_invalid(message: &str) -> MockError {
    MockError {
        error_type: Some("invalid_request_error".to_owned()),
        message: Some(message.to_owned()),
        ..MockError::new(400)
    }
}

/// What to embed: the texts, the width, and (OpenAI) base64 output.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    pub api: Api,
    pub texts: Vec<String>,
    pub dims: usize,
    pub base64: bool,
}

fn facts(model: String, texts: &[String]) -> RequestFacts {
    RequestFacts {
        model,
        stream: false,
        include_stream_usage: false,
        prompt_chars: texts.iter().map(|t| t.chars().count()).sum(),
        has_tools: false,
    }
}

fn dims_of(v: Option<&Value>, default: usize) -> Option<usize> {
    match v {
        None | Some(Value::Null) => Some(default),
        Some(v) => v
            .as_u64()
            .and_then(|d| usize::try_from(d).ok())
            .filter(|d| (1..=MAX_DIMENSIONS).contains(d)),
    }
}

/// `POST /v1/embeddings`: `model`, `input` (a string, strings, or token arrays: each token `t`
/// embeds as the word `t<id>`), `dimensions`, `encoding_format` (`float` | `base64`).
pub fn parse_openai(body: &[u8]) -> Result<(RequestFacts, Value, EmbedRequest), MockError> {
    let json = parse_json(body, |e| {
        openai_invalid(&format!(
            "We could not parse the JSON body of your request. ({e})"
        ))
    })?;
    let model = json
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| openai_invalid("you must provide a model parameter"))?
        .to_owned();
    let token_text = |t: &Value| -> Option<String> {
        let ids = t.as_array()?;
        let words: Option<Vec<String>> = ids
            .iter()
            .map(|i| i.as_u64().map(|i| format!("t{i}")))
            .collect();
        words.filter(|w| !w.is_empty()).map(|w| w.join(" "))
    };
    let texts: Option<Vec<String>> = match json.get("input") {
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            token_text(&Value::Array(items.clone())).map(|t| vec![t])
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned).or_else(|| token_text(i)))
            .collect(),
        _ => None,
    };
    let texts = texts
        .filter(|t| {
            !t.is_empty() && t.len() <= OPENAI_MAX_INPUTS && t.iter().all(|s| !s.is_empty())
        })
        .ok_or_else(|| openai_invalid("'$.input' is invalid. Please check the API reference."))?;
    let dims = dims_of(json.get("dimensions"), OPENAI_DIMENSIONS)
        .ok_or_else(|| openai_invalid("'dimensions' must be a positive integer."))?;
    let base64 = match json.get("encoding_format").and_then(Value::as_str) {
        None if json.get("encoding_format").is_none() => false,
        Some("float") => false,
        Some("base64") => true,
        _ => {
            return Err(openai_invalid(
                "'encoding_format' must be 'float' or 'base64'.",
            ))
        }
    };
    let facts = facts(model, &texts);
    let req = EmbedRequest {
        api: Api::OpenAi,
        texts,
        dims,
        base64,
    };
    Ok((facts, json, req))
}

/// Any embeddings request: OpenAI's body, or a Bedrock one for `model_id` (from the path).
pub fn parse(
    api: Api,
    model_id: &str,
    body: &[u8],
) -> Result<(RequestFacts, Value, EmbedRequest), MockError> {
    match api {
        Api::OpenAi => parse_openai(body),
        Api::Gemini => parse_gemini(model_id, body),
        _ => parse_bedrock(api, model_id, body),
    }
}

/// `:batchEmbedContents` on `model_id` (from the path): every request names the same model
/// (`models/{model_id}`) and one text part; `outputDimensionality` must be the same for all.
pub fn parse_gemini(
    model_id: &str,
    body: &[u8],
) -> Result<(RequestFacts, Value, EmbedRequest), MockError> {
    let json = parse_json(body, |e| {
        super::gemini::invalid_argument(format!("Invalid JSON payload received. {e}"))
    })?;
    let requests = json
        .get("requests")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty() && r.len() <= GEMINI_MAX_REQUESTS)
        .ok_or_else(|| {
            super::gemini::invalid_argument(format!(
                "* BatchEmbedContentsRequest.requests: between 1 and {GEMINI_MAX_REQUESTS} requests are required"
            ))
        })?;
    let want = format!("models/{model_id}");
    let default = if model_id.contains("gemini-embedding") {
        GEMINI_DIMENSIONS
    } else {
        GOOGLE_LEGACY_DIMENSIONS
    };
    let mut texts = Vec::with_capacity(requests.len());
    let mut dims = None;
    for (i, r) in requests.iter().enumerate() {
        if r.get("model").and_then(Value::as_str) != Some(want.as_str()) {
            return Err(super::gemini::invalid_argument(format!(
                "* BatchEmbedContentsRequest.requests[{i}].model: the model of each request must match the batch's ({want})"
            )));
        }
        let text: Option<String> =
            r.pointer("/content/parts")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect()
                });
        let text = text.filter(|t| !t.is_empty()).ok_or_else(|| {
            super::gemini::invalid_argument(format!(
                "* BatchEmbedContentsRequest.requests[{i}].content: contains no text"
            ))
        })?;
        let d = dims_of(r.get("outputDimensionality"), default).ok_or_else(|| {
            super::gemini::invalid_argument(format!(
                "* BatchEmbedContentsRequest.requests[{i}].output_dimensionality: must be positive"
            ))
        })?;
        if dims.is_some_and(|prev| prev != d) {
            return Err(super::gemini::invalid_argument(
                "outputDimensionality must be the same for every request of the batch".into(),
            ));
        }
        dims = Some(d);
        texts.push(text);
    }
    let facts = facts(model_id.to_owned(), &texts);
    let req = EmbedRequest {
        api: Api::Gemini,
        texts,
        dims: dims.unwrap_or(default),
        base64: false,
    };
    Ok((facts, json, req))
}

/// InvokeModel on a Titan or Cohere embedding model (the model id from the path).
pub fn parse_bedrock(
    api: Api,
    model_id: &str,
    body: &[u8],
) -> Result<(RequestFacts, Value, EmbedRequest), MockError> {
    let json: Value = serde_json::from_slice(body).map_err(|e| {
        validation_error(format!(
            "Malformed input request: {e}, please reformat your input and try again."
        ))
    })?;
    let invalid = |m: &str| validation_error(format!("Malformed input request: {m}"));
    let (texts, dims) = if api == Api::Titan {
        let text = json
            .get("inputText")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| invalid("#: required key [inputText] not found or empty"))?;
        let default = if model_id.contains("text-v1") {
            OPENAI_DIMENSIONS
        } else {
            TITAN_DIMENSIONS
        };
        let dims = dims_of(json.get("dimensions"), default)
            .filter(|d| *d == default || [256, 512, 1024].contains(d))
            .ok_or_else(|| invalid("#/dimensions: must be 256, 512 or 1024"))?;
        (vec![text.to_owned()], dims)
    } else {
        let texts: Option<Vec<String>> = json.get("texts").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect()
        });
        let texts = texts
            .filter(|t| !t.is_empty() && t.len() <= COHERE_MAX_TEXTS)
            .ok_or_else(|| invalid("#/texts: expected 1 to 96 strings"))?;
        if json.get("input_type").and_then(Value::as_str).is_none() {
            return Err(invalid("#: required key [input_type] not found"));
        }
        let dims = dims_of(json.get("output_dimension"), COHERE_DIMENSIONS)
            .ok_or_else(|| invalid("#/output_dimension: must be a positive integer"))?;
        (texts, dims)
    };
    let facts = facts(model_id.to_owned(), &texts);
    let req = EmbedRequest {
        api,
        texts,
        dims,
        base64: false,
    };
    Ok((facts, json, req))
}

/// The 2xx answer of `req` (the behaviour's status; its reply text and chunks do not apply).
pub fn render_success(
    ctx: &RenderContext,
    success: &Success,
    req: &EmbedRequest,
) -> Response<MockBody> {
    let vectors: Vec<Vec<f32>> = req.texts.iter().map(|t| vector(t, req.dims)).collect();
    let tokens: u64 = req.texts.iter().map(|t| tokens(t)).sum();
    match req.api {
        Api::OpenAi => {
            let data: Vec<Value> = vectors
                .iter()
                .enumerate()
                .map(|(index, v)| {
                    let embedding = if req.base64 {
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
                "model": ctx.model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            });
            response(
                success.status,
                "application/json",
                openai_chat::REQUEST_ID_HEADER,
                ctx,
                body::full(body.to_string()),
            )
        }
        Api::Gemini => {
            let embeddings: Vec<Value> = vectors.iter().map(|v| json!({"values": v})).collect();
            response(
                success.status,
                "application/json",
                super::gemini::REQUEST_ID_HEADER,
                ctx,
                body::full(json!({"embeddings": embeddings}).to_string()),
            )
        }
        Api::Titan | Api::Cohere => {
            let body = if req.api == Api::Titan {
                json!({"embedding": vectors[0], "inputTextTokenCount": tokens})
            } else {
                json!({
                    "id": ctx.request_id,
                    "embeddings": vectors,
                    "texts": req.texts,
                    "response_type": "embeddings_floats",
                })
            };
            let mut res = bedrock_response(
                success.status,
                "application/json",
                ctx,
                body::full(body.to_string()),
            );
            res.headers_mut().insert(
                "x-amzn-bedrock-input-token-count",
                HeaderValue::from(tokens),
            );
            res
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let dot: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let n = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        dot / (n(a) * n(b))
    }

    #[test]
    fn texts_sharing_most_words_are_close_and_unrelated_ones_are_not() {
        let a = "the quick brown fox jumps over a lazy sleeping dog";
        let b = "the quick brown fox jumps over a lazy sleeping cat";
        let c = "quarterly revenue grew while operating margins narrowed across every region";
        for dims in [OPENAI_DIMENSIONS, TITAN_DIMENSIONS, 256] {
            let (va, vb, vc) = (vector(a, dims), vector(b, dims), vector(c, dims));
            assert_eq!(va.len(), dims);
            assert!((cosine(&va, &va) - 1.0).abs() < 1e-5);
            let near = cosine(&va, &vb);
            let far = cosine(&va, &vc);
            assert!(near > 0.8, "{dims}: shared 9 of 10 words: {near}");
            assert!(far.abs() < 0.3, "{dims}: unrelated: {far}");
        }
        // Deterministic, case-insensitive per word, unit length.
        assert_eq!(vector(a, 64), vector(&a.to_uppercase(), 64));
        let norm: f64 = vector("", 64).iter().map(|x| f64::from(*x).powi(2)).sum();
        assert!((norm - 1.0).abs() < 1e-5);
    }

    #[test]
    fn requests_are_read_per_api() {
        let (f, _, r) =
            parse_openai(br#"{"model":"e","input":["a b","c"],"dimensions":8}"#).unwrap();
        assert_eq!((f.model.as_str(), r.dims, r.texts.len()), ("e", 8, 2));
        assert!(parse_openai(br#"{"model":"e","input":""}"#).is_err());
        assert!(parse_openai(br#"{"model":"e","input":"a","encoding_format":"x"}"#).is_err());
        let (_, _, r) = parse_openai(br#"{"model":"e","input":[1,2,3]}"#).unwrap();
        assert_eq!(r.texts, ["t1 t2 t3"]);
        let titan = "amazon.titan-embed-text-v2:0";
        let (_, _, r) = parse_bedrock(Api::Titan, titan, br#"{"inputText":"hi"}"#).unwrap();
        assert_eq!(r.dims, TITAN_DIMENSIONS);
        assert!(parse_bedrock(Api::Titan, titan, br#"{"inputText":"hi","dimensions":7}"#).is_err());
        let body = br#"{"texts":["a","b"],"input_type":"search_document"}"#;
        let (_, _, r) = parse_bedrock(Api::Cohere, "cohere.embed-english-v3", body).unwrap();
        assert_eq!((r.texts.len(), r.dims), (2, COHERE_DIMENSIONS));
        let body = br#"{"requests":[{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"a"}]},"outputDimensionality":8},{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"b c"}]},"outputDimensionality":8}]}"#;
        let (f, _, r) = parse_gemini("gemini-embedding-001", body).unwrap();
        assert_eq!((f.model.as_str(), r.dims), ("gemini-embedding-001", 8));
        assert_eq!(r.texts, ["a", "b c"]);
        let (_, _, r) = parse_gemini(
            "text-embedding-004",
            br#"{"requests":[{"model":"models/text-embedding-004","content":{"parts":[{"text":"a"}]}}]}"#,
        )
        .unwrap();
        assert_eq!(r.dims, GOOGLE_LEGACY_DIMENSIONS);
        let other = br#"{"requests":[{"model":"models/x","content":{"parts":[{"text":"a"}]}}]}"#;
        assert_eq!(
            parse_gemini("gemini-embedding-001", other)
                .unwrap_err()
                .status,
            400
        );
        assert!(parse_gemini("g", br#"{"requests":[]}"#).is_err());
        assert!(parse_bedrock(
            Api::Cohere,
            "cohere.embed-english-v3",
            br#"{"texts":["a"]}"#
        )
        .is_err());
    }
}
