//! The canonical form every dialect translates through (SPEC §5.7). When the caller's dialect and
//! the destination's provider differ, the request is parsed into a [`ChatRequest`], rendered in the
//! provider's format, and the answer comes back through [`ChatResponse`] or a sequence of
//! [`StreamEvent`]s. When they match, none of this runs: bytes pass through.
//!
//! The form carries what every dialect can express: system text, multi-turn messages, tools and
//! tool calls/results, base64 images, stop sequences, max tokens, temperature/top_p, JSON-schema
//! output, streaming, usage. Anything a dialect has beyond that is dropped on translation (listed
//! per dialect in docs/translation.md); eligibility (SPEC §5.7) skips destinations that cannot
//! carry what a request uses.

use serde::{Deserialize, Serialize};

use crate::Usage;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ChatRequest {
    pub model: String,
    /// System instructions, in order (OpenAI `system`/`developer` messages, Anthropic `system`,
    /// Converse `system`, Responses `instructions`).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub stop: Vec<String>,
    pub stream: bool,
    /// Structured output: the JSON schema the answer must follow.
    pub json_schema: Option<JsonSchema>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Part {
    Text(String),
    /// A base64 image (`media_type` e.g. `image/png`).
    Image {
        media_type: String,
        data: String,
    },
    /// The assistant asking for a tool; `arguments` is the JSON text of the input object.
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    /// A tool's answer, sent back in a user turn (OpenAI: a `tool` message).
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the input, as JSON text.
    pub parameters: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolChoice {
    Auto,
    /// Must call some tool (OpenAI `required`, Anthropic `any`).
    Any,
    None,
    Tool(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchema {
    pub name: String,
    /// The schema, as JSON text.
    pub schema: String,
    pub strict: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopReason {
    /// Natural end (OpenAI `stop`, Anthropic `end_turn`).
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    ContentFilter,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    pub id: String,
    pub model: String,
    /// Text and tool calls, in order.
    pub content: Vec<Part>,
    pub stop_reason: StopReason,
    pub usage: Usage,
}

/// One event of a translated stream. A provider's stream decodes into these; a caller's encoder
/// renders them. Index numbers are per content block, starting at 0, in the order blocks open.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamEvent {
    /// The message begins (carries what the provider said about it so far).
    Start {
        id: String,
        model: String,
        input_tokens: Option<u64>,
    },
    TextDelta {
        index: usize,
        text: String,
    },
    /// A tool call block opens.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallDelta {
        index: usize,
        arguments: String,
    },
    /// A content block ends.
    BlockStop {
        index: usize,
    },
    /// The message ends, with why and the final usage (if known).
    Stop {
        reason: StopReason,
        usage: Option<Usage>,
    },
    /// Usage that arrives on its own (e.g. OpenAI's include_usage chunk, Converse `metadata`).
    Usage(Usage),
    /// The provider reported an error inside the stream.
    Error {
        status: u16,
        error_type: String,
        message: String,
    },
}

impl StreamEvent {
    /// The error a decoder reports when the upstream's stream broke a bound or its framing: a 502
    /// protocol failure (SPEC §14).
    pub fn protocol_failure(message: &str) -> StreamEvent {
        StreamEvent::Error {
            status: 502,
            error_type: "api_error".into(),
            message: message.to_owned(),
        }
    }
}

/// The message of a stream event or line over its bound.
pub const EVENT_TOO_LARGE: &str =
    "sidetrack: an upstream stream event exceeds server.maxStreamEventBytes";

/// Why a translation could not be done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateError(pub String);

impl std::fmt::Display for TranslateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TranslateError {}
