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
    /// Adds `content-encoding: <value>` to every answer (the body itself stays as it is), like a
    /// proxy that labels what it did not encode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
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
