//! What a data-plane path names, as pure functions: the literal dialect paths, and Bedrock's
//! `/model/{modelId}/{operation}` split on the raw path. The router, the direct hot route in
//! [`super::listen`] and the cross-site check all read paths through these, and the fuzz targets
//! in `crates/gateway/fuzz` drive them with arbitrary input.

use sidetrack_dialects::Dialect;

/// The literal data-plane paths and their dialects: `/v1/...`, and the same under AgentCore's
/// `/inference` prefix.
pub const DIALECT_PATHS: [(&str, Dialect); 8] = [
    ("/v1/chat/completions", Dialect::OpenAiChat),
    ("/inference/v1/chat/completions", Dialect::OpenAiChat),
    ("/v1/responses", Dialect::OpenAiResponses),
    ("/inference/v1/responses", Dialect::OpenAiResponses),
    ("/v1/messages", Dialect::AnthropicMessages),
    ("/inference/v1/messages", Dialect::AnthropicMessages),
    ("/v1/embeddings", Dialect::OpenAiEmbeddings),
    ("/inference/v1/embeddings", Dialect::OpenAiEmbeddings),
];

/// What a request path names on the data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath<'a> {
    /// One of [`DIALECT_PATHS`].
    Dialect(&'static str, Dialect),
    /// `[/inference]/model/{raw_id}/{operation}`: one non-empty raw (still percent-encoded) id
    /// segment, as the router's `/model/{model_id}/{operation}` route matches it.
    Bedrock { raw_id: &'a str, operation: &'a str },
    /// `/{v1beta|v1}/models/{raw_model}:{operation}`: the Gemini dialect (SPEC §13).
    Gemini {
        raw_model: &'a str,
        operation: &'a str,
    },
    /// Anything else (models list, health, 404).
    Other,
}

/// Classifies `path` (the raw path, without the query).
pub fn data_path(path: &str) -> DataPath<'_> {
    if let Some((p, d)) = dialect_path(path) {
        return DataPath::Dialect(p, d);
    }
    if let Some((raw_id, operation)) = bedrock_split(path) {
        return DataPath::Bedrock { raw_id, operation };
    }
    match sidetrack_dialects::gemini::split_path(path) {
        Some((raw_model, operation)) => DataPath::Gemini {
            raw_model,
            operation,
        },
        None => DataPath::Other,
    }
}

/// The entry of [`DIALECT_PATHS`] for `path`.
pub fn dialect_path(path: &str) -> Option<(&'static str, Dialect)> {
    DIALECT_PATHS.iter().find(|(p, _)| *p == path).copied()
}

/// `[/inference]/model/{raw_id}/{operation}` → `(raw_id, operation)`, each one non-empty segment
/// (an ARN's `/` arrives as `%2F`); the operation may be unknown ([`bedrock_operation`] decides).
pub fn bedrock_split(path: &str) -> Option<(&str, &str)> {
    let rest = path
        .strip_prefix("/inference")
        .unwrap_or(path)
        .strip_prefix("/model/")?;
    let (raw_id, operation) = rest.split_once('/')?;
    if raw_id.is_empty() || operation.is_empty() || operation.contains('/') {
        return None;
    }
    Some((raw_id, operation))
}

/// A Bedrock operation's dialect and whether it streams.
pub fn bedrock_operation(operation: &str) -> Option<(Dialect, bool)> {
    match operation {
        "invoke" => Some((Dialect::BedrockInvoke, false)),
        "invoke-with-response-stream" => Some((Dialect::BedrockInvoke, true)),
        "converse" => Some((Dialect::BedrockConverse, false)),
        "converse-stream" => Some((Dialect::BedrockConverse, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialect_paths_and_bedrock_paths_are_told_apart() {
        assert_eq!(
            data_path("/v1/messages"),
            DataPath::Dialect("/v1/messages", Dialect::AnthropicMessages)
        );
        assert_eq!(data_path("/v1/messages/"), DataPath::Other);
        assert_eq!(
            data_path("/inference/model/arn%3Aaws%2Fx/converse-stream"),
            DataPath::Bedrock {
                raw_id: "arn%3Aaws%2Fx",
                operation: "converse-stream"
            }
        );
        assert_eq!(
            data_path("/model/m/nope"),
            DataPath::Bedrock {
                raw_id: "m",
                operation: "nope"
            }
        );
        for other in [
            "/model//converse",
            "/model/m/",
            "/model/a/b/converse",
            "/model/m",
            "/inference",
            "/models/m/converse",
            "",
        ] {
            assert_eq!(data_path(other), DataPath::Other, "{other}");
        }
        assert_eq!(
            bedrock_operation("converse-stream"),
            Some((Dialect::BedrockConverse, true))
        );
        assert_eq!(bedrock_operation("Converse"), None);
        assert_eq!(
            data_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            DataPath::Gemini {
                raw_model: "gemini-2.5-flash",
                operation: "streamGenerateContent"
            }
        );
        assert_eq!(
            data_path("/v1/models/g:generateContent"),
            DataPath::Gemini {
                raw_model: "g",
                operation: "generateContent"
            }
        );
        assert_eq!(data_path("/v1/models"), DataPath::Other);
        assert_eq!(data_path("/v1beta/models/g"), DataPath::Other);
    }
}
