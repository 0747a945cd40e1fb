//! The mock's configuration: listeners and one scripted [`Behaviour`] per model name.
//!
//! One serde policy for every struct (camelCase, unknown fields rejected), the same as the gateway's
//! own config, so a typo in a scenario fails loudly instead of silently meaning "healthy".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The model key whose behaviour applies to every model not listed by name.
pub const WILDCARD_MODEL: &str = "*";

/// Whole mock configuration (`sidetrack mock --config FILE`, or [`crate::MockServer::start`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MockConfig {
    /// Socket address of the main listener; `127.0.0.1:0` (an ephemeral port) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Accept and immediately reset every connection on the main listener (a dead host).
    #[serde(default, skip_serializing_if = "is_false")]
    pub refuse_connections: bool,
    /// Extra listeners serving the same models and sharing the same stats.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerConfig>,
    /// Behaviour per model name; `"*"` applies to unlisted models.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, Behaviour>,
}

/// One extra listener.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListenerConfig {
    /// Socket address to bind (port 0 picks an ephemeral port).
    pub listen: String,
    /// Accept and immediately reset every connection on this listener.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refuse_connections: bool,
}

/// What the mock does for one model. Every field is optional; the empty behaviour is a healthy model
/// that replies `hello from <model>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Behaviour {
    /// Reply text. Default `hello from <model>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// HTTP status. Non-2xx answers with the dialect's error body. With `failureRate` it is the
    /// status of failing draws only (default 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Adds `Retry-After: <seconds>` to error responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// Delay before the response headers are sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_delay_milliseconds: Option<u64>,
    /// Number of content chunks a streamed reply is split into. Default 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_chunks: Option<usize>,
    /// Gap between two content chunks. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_interval_milliseconds: Option<u64>,
    /// Answer 200, send this many content chunks, then kill the connection mid-body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_after_chunks: Option<usize>,
    /// Answer 200, send this many content chunks (0 = only the preamble), then the dialect's
    /// in-stream error event, and end the stream without its normal terminator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error_after_chunks: Option<usize>,
    /// `type` of the in-stream error. Default `server_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error_type: Option<String>,
    /// Probability (0..=1) that a request fails with `status` (default 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_rate: Option<f64>,
    /// Seed of the model's failure PRNG. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Token usage to report. Default: derived from the text lengths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageConfig>,
    /// When the request offers tools: answer with this tool call instead of the text reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCallConfig>,
    /// A broken or hostile provider (the gateway's bound tests): what the answer turns into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostile: Option<Hostile>,
    /// Streams: content chunks sent normally before the hostile part (default 0: right after the
    /// preamble).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostile_after_chunks: Option<usize>,
    /// Size of a `hugeEvent` event or of the `garbage` (default 16 MiB and 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostile_bytes: Option<u64>,
    /// A `content-encoding` header value added to every answer of this model, whatever the body is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    /// The first K requests for this model (counted since the behaviour was set, or since
    /// `POST /_mock/reset`) fail with `status` (default 503, also when `status` is 2xx) and
    /// `error`; later requests get the rest of the behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_first: Option<u64>,
    /// The provider error a failing answer carries: whole error bodies (status >= 400,
    /// `failFirst`, `failureRate`) and the in-stream error event (`streamErrorAfterChunks`;
    /// `streamErrorType`, when set, wins for the event's type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorConfig>,
    /// Streams: the head and the preamble (role chunk / `message_start` / `messageStart`) go out
    /// at once, then this wait before the first content event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_content_delay_milliseconds: Option<u64>,
    /// Streams: a silence of this length after `idleAfterChunks` content chunks, then the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_gap_milliseconds: Option<u64>,
    /// Content chunks sent before the `idleGapMilliseconds` silence. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_after_chunks: Option<usize>,
    /// A 200 answer stopped by the provider's content filter: OpenAI chat `finish_reason:
    /// "content_filter"`, Responses `status: "incomplete"` (`reason: "content_filter"`),
    /// Anthropic and Bedrock invoke `stop_reason: "refusal"`, Converse `guardrail_intervened`.
    /// On an Azure path: Azure's content-filter 400 instead (see `dialect::azure`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub content_filtered: bool,
}

/// A scripted provider error (`error`). Each dialect puts the fields where its provider does:
/// OpenAI `{"error": {"message", "type", "param", "code"}}`; Anthropic `{"type": "error",
/// "error": {"type", "message"}}` (`code` and `param` unused); Bedrock `x-amzn-ErrorType: <type>`
/// and `{"message"}` (`type` must name a Bedrock exception, else the status picks one).
/// Unset fields take the dialect's default for the status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorConfig {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// OpenAI's `param` (e.g. `messages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
}

/// What a hostile provider does (`hostile`). "Endless" bodies stop when the client goes away, and
/// in any case after [`crate::body::ENDLESS_CAP`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Hostile {
    /// Streams: one `data:` line that never ends.
    EndlessLine,
    /// Streams: one comment line (`: ...`) that never ends.
    EndlessComment,
    /// Streams: `data:` lines forever, never the blank line that would end the event.
    EndlessEvent,
    /// Streams: one complete event of `hostileBytes` bytes, then the normal rest of the stream.
    HugeEvent,
    /// Streams: `hostileBytes` of lines that are no SSE field and no event-stream frame, then the end.
    Garbage,
    /// Any request: a 200 JSON answer whose body never ends.
    EndlessBody,
    /// Any request: the connection is accepted and the request read, but no answer ever comes.
    NoHeaders,
}

/// A scripted tool call (`toolCall`), sent when the request has tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallConfig {
    /// The function/tool name.
    pub name: String,
    /// The arguments as JSON text; must be a JSON object (e.g. `{"city":"Paris"}`).
    pub arguments: String,
}

/// Fixed token usage to report instead of the derived one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageConfig {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl MockConfig {
    /// Checks every behaviour; the message names the offending field, e.g.
    /// `models.flaky.failureRate: must be between 0 and 1, got 1.5`.
    pub fn validate(&self) -> Result<(), String> {
        for (name, behaviour) in &self.models {
            behaviour
                .validate()
                .map_err(|e| format!("models.{name}.{e}"))?;
        }
        Ok(())
    }
}

impl Behaviour {
    /// Checks value ranges; the message starts with the camelCase field name.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(status) = self.status {
            if !(200..=599).contains(&status) {
                return Err(format!("status: must be between 200 and 599, got {status}"));
            }
        }
        if let Some(rate) = self.failure_rate {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("failureRate: must be between 0 and 1, got {rate}"));
            }
        }
        if let Some(status) = self.status.filter(|_| self.fail_first.is_some()) {
            if status < 400 && !(200..300).contains(&status) {
                return Err(format!(
                    "status: with failFirst it must be an error status (>= 400), got {status}"
                ));
            }
        }
        if self.stream_chunks == Some(0) {
            return Err("streamChunks: must be at least 1".to_owned());
        }
        if let Some(tool) = &self.tool_call {
            if tool.name.is_empty() {
                return Err("toolCall.name: must not be empty".to_owned());
            }
            match serde_json::from_str::<serde_json::Value>(&tool.arguments) {
                Ok(serde_json::Value::Object(_)) => {}
                _ => {
                    return Err(format!(
                        "toolCall.arguments: must be the JSON text of an object, got {:?}",
                        tool.arguments
                    ))
                }
            }
        }
        Ok(())
    }
}
