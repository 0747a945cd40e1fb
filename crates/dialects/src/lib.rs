//! Pure wire formats for sidetrack: caller dialects, the SSE codec and error rendering.
//!
//! Every dialect module exposes the same functions (`parse_request`, `render_request`,
//! `classify_stream_event`, `render_error`, `render_stream_error`) so adding a dialect is filling in a
//! template. Nothing here does I/O.

pub mod anthropic_messages;
pub mod bedrock;
pub mod canonical;
mod chunk_scan;
pub mod collect;
pub(crate) mod common;
pub mod error_class;
pub mod errors;
pub mod gemini;
mod json_tail;
pub mod openai_chat;
pub mod openai_embeddings;
pub mod openai_responses;
pub mod request;
pub mod sse;
pub mod translate;

pub use errors::{status_for_error_type, GatewayErrorKind, RenderedError};
pub use request::{Features, ParseError, ParsedRequest};

/// The wire format a caller speaks (SPEC §1), chosen by the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    OpenAiChat,
    OpenAiResponses,
    AnthropicMessages,
    BedrockInvoke,
    BedrockConverse,
    /// `POST /v1/embeddings` (SPEC §12): not a chat dialect; see [`openai_embeddings`].
    OpenAiEmbeddings,
    /// Google Gemini `generateContent` (SPEC §13): see [`gemini`].
    Gemini,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAiChat => "openai-chat",
            Dialect::OpenAiResponses => "openai-responses",
            Dialect::AnthropicMessages => "anthropic-messages",
            Dialect::BedrockInvoke => "bedrock-invoke",
            Dialect::BedrockConverse => "bedrock-converse",
            Dialect::OpenAiEmbeddings => "openai-embeddings",
            Dialect::Gemini => "gemini",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        [
            Dialect::OpenAiChat,
            Dialect::OpenAiResponses,
            Dialect::AnthropicMessages,
            Dialect::BedrockInvoke,
            Dialect::BedrockConverse,
            Dialect::OpenAiEmbeddings,
            Dialect::Gemini,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// What one event of an upstream stream means for the commit decision (SPEC §5.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEventClass {
    /// Framing before any content: role-only chunk, `message_start`, `ping`, `response.created`.
    Preamble,
    /// Carries content (text, tool call, refusal) or a finish: the commit point for `firstToken`.
    Content,
    /// Usage or other metadata after content.
    Metadata,
    /// An in-stream error event. `status` is what the error type corresponds to (e.g. 529 for
    /// `overloaded_error`); before commit it is classified as `Outcome::Status(status)`.
    Error {
        status: u16,
        error_type: String,
        message: String,
    },
    /// The dialect's explicit end of stream (`data: [DONE]` for OpenAI chat).
    Done,
}

/// Token usage as reported by a response or stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Usage as Anthropic Messages and OpenAI Responses write it (`input_tokens`, `output_tokens`).
#[derive(serde::Deserialize, Default)]
pub(crate) struct InputOutputUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

impl InputOutputUsage {
    /// The `usage` object of a whole non-streamed answer (read from the end of the body when
    /// possible: see `json_tail`).
    pub(crate) fn of_response(body: &[u8]) -> Option<Usage> {
        json_tail::response_usage::<InputOutputUsage>(body).map(InputOutputUsage::canonical)
    }

    pub(crate) fn canonical(self) -> Usage {
        Usage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        }
    }
}
