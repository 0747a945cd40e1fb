//! The behaviour engine: turns a model's [`Behaviour`], the facts of one request and one PRNG draw
//! into a [`Decision`]. Pure and dialect-free — the dialect modules only frame what it decides.

use std::time::Duration;

use crate::config::{Behaviour, ErrorConfig, Hostile, ToolCallConfig, UsageConfig};

/// Content chunks of a streamed reply when `streamChunks` is not set.
pub const DEFAULT_STREAM_CHUNKS: usize = 4;
/// Status of a failing `failureRate` draw when `status` is not set.
pub const DEFAULT_FAILURE_STATUS: u16 = 503;
/// OpenAI's in-stream error type when `streamErrorType` is not set (each dialect has its own
/// default: Anthropic `overloaded_error`, Bedrock `internalServerException`).
pub const DEFAULT_STREAM_ERROR_TYPE: &str = "server_error";

/// What a dialect's `parse_request` extracts from a request body.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestFacts {
    /// The requested model, answered back verbatim in the response.
    pub model: String,
    /// The caller asked for a stream.
    pub stream: bool,
    /// OpenAI chat `stream_options.include_usage`; dialects without the option ignore it.
    pub include_stream_usage: bool,
    /// Characters of prompt text, for the derived token usage.
    pub prompt_chars: usize,
    /// The request offers tools (a behaviour's `toolCall` answers only then).
    pub has_tools: bool,
}

/// Everything the server needs to answer one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Wait this long before sending the response headers.
    pub first_byte_delay: Duration,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Answer with the dialect's error body.
    Error(MockError),
    /// Answer 2xx with the reply (possibly cut short, see [`Ending`]).
    Success(Success),
}

/// An error response, before the dialect gives it its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct MockError {
    pub status: u16,
    /// Explicit error `type`; `None` lets the dialect pick the type that matches `status`.
    pub error_type: Option<String>,
    /// Explicit message; `None` lets the dialect pick the one that matches the type/status.
    pub message: Option<String>,
    /// Explicit OpenAI `code`; `None`: the status's usual code, or null when `error_type` is set.
    pub code: Option<String>,
    /// OpenAI `param`.
    pub param: Option<String>,
    pub retry_after_seconds: Option<u64>,
}

impl MockError {
    /// A scripted error of `status` carrying the behaviour's `error` fields.
    fn scripted(status: u16, b: &Behaviour) -> Self {
        let e = b.error.clone().unwrap_or_default();
        Self {
            error_type: e.error_type,
            message: e.message,
            code: e.code,
            param: e.param,
            retry_after_seconds: b.retry_after_seconds,
            ..Self::new(status)
        }
    }

    pub fn new(status: u16) -> Self {
        Self {
            status,
            error_type: None,
            message: None,
            code: None,
            param: None,
            retry_after_seconds: None,
        }
    }
}

/// A successful (2xx) answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Success {
    pub status: u16,
    /// The full reply text.
    pub reply: String,
    /// Answer with this tool call instead of `reply` (the behaviour has `toolCall` and the request
    /// offers tools).
    pub tool_call: Option<ToolCall>,
    /// The content chunks of a stream: `reply` split up, or the tool call's `arguments` split up.
    pub chunks: Vec<String>,
    /// Gap before every content chunk but the first (and before a failure taking a chunk's place).
    pub chunk_interval: Duration,
    /// Streams: gap between the preamble and the first content event (`firstContentDelay...`).
    pub first_content_delay: Duration,
    /// Streams: after this many content chunks, a silence of this length (`idleGap...`).
    pub idle_gap: Option<(usize, Duration)>,
    /// The provider's content filter stopped the answer (`contentFiltered`).
    pub content_filtered: bool,
    pub usage: Usage,
    pub ending: Ending,
    /// A hostile stream: after this many content chunks, the hostile part replaces the rest.
    pub hostile: Option<(Hostile, usize, u64)>,
}

/// A tool call to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// JSON text of an object.
    pub arguments: String,
}

/// Token usage to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Usage {
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// How a successful body ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Normally, with the dialect's terminator.
    Complete,
    /// The connection dies after this many content chunks (non-streaming: after part of the JSON).
    DropAfter(usize),
    /// The dialect's in-stream error event after this many content chunks; no terminator.
    /// Only for streams: a non-streaming request gets an error status instead.
    /// `error` is the behaviour's `error` with `streamErrorType` as its type when set.
    ErrorAfter { chunks: usize, error: StreamError },
}

/// The fields of an in-stream error event; `None` lets the dialect pick its usual value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamError {
    pub error_type: Option<String>,
    pub code: Option<String>,
    pub message: Option<String>,
}

/// Decides the answer. `draw` is the model's next PRNG value in `[0, 1)`, present when the behaviour
/// has a `failureRate`. `fail_first` says the request is one of the model's first `failFirst`.
pub fn decide(
    behaviour: &Behaviour,
    request: &RequestFacts,
    draw: Option<f64>,
    fail_first: bool,
) -> Decision {
    let first_byte_delay =
        Duration::from_millis(behaviour.first_byte_delay_milliseconds.unwrap_or(0));
    Decision {
        first_byte_delay,
        outcome: outcome(behaviour, request, draw, fail_first),
    }
}

fn outcome(b: &Behaviour, request: &RequestFacts, draw: Option<f64>, fail_first: bool) -> Outcome {
    let failing_status = || {
        b.status
            .filter(|s| !(200..300).contains(s))
            .unwrap_or(DEFAULT_FAILURE_STATUS)
    };
    // A failureRate turns `status` into the status of failing draws; passing draws are healthy.
    // So does failFirst for the requests after the first K.
    let error_status = match (b.failure_rate, draw) {
        _ if fail_first => Some(failing_status()),
        (Some(rate), Some(x)) => (x < rate).then(|| b.status.unwrap_or(DEFAULT_FAILURE_STATUS)),
        _ if b.fail_first.is_some() => None,
        _ => b.status.filter(|s| !(200..300).contains(s)),
    };
    if let Some(status) = error_status {
        return Outcome::Error(MockError::scripted(status, b));
    }

    let ending = ending(b);
    if let (Ending::ErrorAfter { error, .. }, false) = (&ending, request.stream) {
        return Outcome::Error(MockError {
            error_type: error.error_type.clone(),
            ..MockError::scripted(status_of_error_type(error.error_type.as_deref()), b)
        });
    }

    let reply = b
        .reply
        .clone()
        .unwrap_or_else(|| default_reply(&request.model));
    let tool_call = match (&b.tool_call, request.has_tools) {
        (Some(ToolCallConfig { name, arguments }), true) => Some(ToolCall {
            name: name.clone(),
            arguments: arguments.clone(),
        }),
        _ => None,
    };
    let output_text = tool_call.as_ref().map_or(&reply, |t| &t.arguments);
    let usage = match b.usage {
        Some(UsageConfig {
            prompt_tokens,
            completion_tokens,
        }) => Usage {
            prompt_tokens,
            completion_tokens,
        },
        None => Usage {
            prompt_tokens: tokens_for_chars(request.prompt_chars),
            completion_tokens: tokens_for_chars(output_text.chars().count()),
        },
    };
    Outcome::Success(Success {
        status: b.status.filter(|s| (200..300).contains(s)).unwrap_or(200),
        chunks: split_reply(
            output_text,
            b.stream_chunks.unwrap_or(DEFAULT_STREAM_CHUNKS),
        ),
        reply,
        tool_call,
        chunk_interval: Duration::from_millis(b.chunk_interval_milliseconds.unwrap_or(0)),
        first_content_delay: Duration::from_millis(b.first_content_delay_milliseconds.unwrap_or(0)),
        idle_gap: b
            .idle_gap_milliseconds
            .map(|ms| (b.idle_after_chunks.unwrap_or(1), Duration::from_millis(ms))),
        usage,
        ending,
        content_filtered: b.content_filtered,
        hostile: b.hostile.map(|h| {
            let default_bytes = if h == Hostile::Garbage {
                1 << 20
            } else {
                16 << 20
            };
            (
                h,
                b.hostile_after_chunks.unwrap_or(0),
                b.hostile_bytes.unwrap_or(default_bytes),
            )
        }),
    })
}

/// `dropAfterChunks` wins over `streamErrorAfterChunks` when it comes first or at the same chunk.
fn ending(b: &Behaviour) -> Ending {
    match (b.drop_after_chunks, b.stream_error_after_chunks) {
        (Some(drop), Some(err)) if drop <= err => Ending::DropAfter(drop),
        (Some(drop), None) => Ending::DropAfter(drop),
        (_, Some(chunks)) => {
            let e: ErrorConfig = b.error.clone().unwrap_or_default();
            Ending::ErrorAfter {
                chunks,
                error: StreamError {
                    error_type: b.stream_error_type.clone().or(e.error_type),
                    code: e.code,
                    message: e.message,
                },
            }
        }
        (None, None) => Ending::Complete,
    }
}

/// The reply of a model without a scripted `reply`.
pub fn default_reply(model: &str) -> String {
    format!("hello from {model}")
}

/// Status a non-streaming request gets when the behaviour scripts an in-stream error:
/// 529 for `overloaded_error` (Anthropic's overloaded status), a Bedrock stream exception's own
/// status (`throttlingException` 429, `modelStreamErrorException` 424, ...), 500 otherwise.
pub fn status_of_error_type(error_type: Option<&str>) -> u16 {
    match error_type.map(lower_camel).as_deref() {
        Some("overloaded_error") => 529,
        Some("throttlingException") => 429,
        Some("validationException") => 400,
        Some("modelTimeoutException") => 408,
        Some("modelStreamErrorException") => 424,
        Some("serviceUnavailableException") => 503,
        _ => 500,
    }
}

/// `ThrottlingException` → `throttlingException` (Bedrock shape name → event-stream member name).
pub fn lower_camel(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_lowercase().chain(chars).collect()
    })
}

/// Roughly four characters per token, rounded up.
pub fn tokens_for_chars(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// Splits `text` into `n` pieces of near-equal character counts (fewer when the text has fewer
/// than `n` characters: one character each; none for an empty text).
pub fn split_reply(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len();
    let k = n.max(1).min(len);
    (0..k)
        .map(|i| chars[i * len / k..(i + 1) * len / k].iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(stream: bool) -> RequestFacts {
        RequestFacts {
            model: "m".to_owned(),
            stream,
            include_stream_usage: false,
            prompt_chars: 9,
            has_tools: false,
        }
    }

    fn success(d: Decision) -> Success {
        match d.outcome {
            Outcome::Success(s) => s,
            Outcome::Error(e) => panic!("expected success, got {e:?}"),
        }
    }

    fn error(d: Decision) -> MockError {
        match d.outcome {
            Outcome::Error(e) => e,
            Outcome::Success(s) => panic!("expected error, got {s:?}"),
        }
    }

    #[test]
    fn empty_behaviour_is_healthy() {
        let s = success(decide(&Behaviour::default(), &facts(false), None, false));
        assert_eq!(s.status, 200);
        assert_eq!(s.reply, "hello from m");
        assert_eq!(s.chunks.len(), 4);
        assert_eq!(s.chunks.concat(), "hello from m");
        assert_eq!(
            s.usage,
            Usage {
                prompt_tokens: 3,
                completion_tokens: 3
            }
        );
        assert_eq!(s.ending, Ending::Complete);
    }

    #[test]
    fn split_is_even_and_lossless() {
        assert_eq!(split_reply("abcdefg", 3), vec!["ab", "cd", "efg"]);
        assert_eq!(split_reply("héllo", 2), vec!["hé", "llo"]);
        assert_eq!(split_reply("ab", 5), vec!["a", "b"]);
        assert!(split_reply("", 4).is_empty());
    }

    #[test]
    fn non_2xx_status_is_an_error_with_retry_after() {
        let b = Behaviour {
            status: Some(429),
            retry_after_seconds: Some(2),
            ..Behaviour::default()
        };
        let e = error(decide(&b, &facts(true), None, false));
        assert_eq!(e.status, 429);
        assert_eq!(e.retry_after_seconds, Some(2));
        assert_eq!(e.error_type, None);
    }

    #[test]
    fn failure_rate_uses_the_draw_and_defaults_to_503() {
        let b = Behaviour {
            failure_rate: Some(0.3),
            ..Behaviour::default()
        };
        assert_eq!(
            error(decide(&b, &facts(false), Some(0.29), false)).status,
            503
        );
        success(decide(&b, &facts(false), Some(0.3), false));
    }

    #[test]
    fn stream_error_on_a_non_streaming_request_is_a_status() {
        let b = Behaviour {
            stream_error_after_chunks: Some(0),
            stream_error_type: Some("overloaded_error".to_owned()),
            ..Behaviour::default()
        };
        let e = error(decide(&b, &facts(false), None, false));
        assert_eq!(e.status, 529);
        assert_eq!(e.error_type.as_deref(), Some("overloaded_error"));
        let s = success(decide(&b, &facts(true), None, false));
        assert_eq!(
            s.ending,
            Ending::ErrorAfter {
                chunks: 0,
                error: StreamError {
                    error_type: Some("overloaded_error".to_owned()),
                    ..StreamError::default()
                }
            }
        );
    }

    #[test]
    fn tool_call_answers_only_when_the_request_has_tools() {
        let b = Behaviour {
            tool_call: Some(ToolCallConfig {
                name: "get_weather".to_owned(),
                arguments: r#"{"city":"Paris"}"#.to_owned(),
            }),
            stream_chunks: Some(2),
            ..Behaviour::default()
        };
        assert_eq!(
            success(decide(&b, &facts(true), None, false)).tool_call,
            None
        );
        let with_tools = RequestFacts {
            has_tools: true,
            ..facts(true)
        };
        let s = success(decide(&b, &with_tools, None, false));
        assert_eq!(s.tool_call.unwrap().name, "get_weather");
        assert_eq!(s.chunks, vec![r#"{"city":"#, r#""Paris"}"#]);
        assert_eq!(s.usage.completion_tokens, 4);
    }

    #[test]
    fn bedrock_exception_names_have_their_status() {
        assert_eq!(status_of_error_type(Some("throttlingException")), 429);
        assert_eq!(status_of_error_type(Some("ThrottlingException")), 429);
        assert_eq!(status_of_error_type(Some("modelStreamErrorException")), 424);
        assert_eq!(status_of_error_type(Some("server_error")), 500);
        assert_eq!(status_of_error_type(None), 500);
    }

    #[test]
    fn fail_first_fails_with_the_error_status_then_defers_to_the_rest() {
        let b = Behaviour {
            fail_first: Some(2),
            status: Some(429),
            error: Some(ErrorConfig {
                code: Some("rate_limit_exceeded".to_owned()),
                ..ErrorConfig::default()
            }),
            ..Behaviour::default()
        };
        let e = error(decide(&b, &facts(true), None, true));
        assert_eq!(e.status, 429);
        assert_eq!(e.code.as_deref(), Some("rate_limit_exceeded"));
        // Past the first K the status no longer fails the request.
        assert_eq!(success(decide(&b, &facts(true), None, false)).status, 200);
        // A 2xx or unset status fails with 503.
        let b = Behaviour {
            fail_first: Some(1),
            ..Behaviour::default()
        };
        assert_eq!(error(decide(&b, &facts(false), None, true)).status, 503);
        // failureRate still applies after the first K.
        let b = Behaviour {
            fail_first: Some(1),
            failure_rate: Some(1.0),
            ..Behaviour::default()
        };
        assert_eq!(
            error(decide(&b, &facts(false), Some(0.5), false)).status,
            503
        );
    }

    #[test]
    fn stream_error_type_wins_over_the_error_type() {
        let b = Behaviour {
            stream_error_after_chunks: Some(1),
            stream_error_type: Some("overloaded_error".to_owned()),
            error: Some(ErrorConfig {
                error_type: Some("api_error".to_owned()),
                message: Some("busy".to_owned()),
                ..ErrorConfig::default()
            }),
            ..Behaviour::default()
        };
        match success(decide(&b, &facts(true), None, false)).ending {
            Ending::ErrorAfter { error, .. } => {
                assert_eq!(error.error_type.as_deref(), Some("overloaded_error"));
                assert_eq!(error.message.as_deref(), Some("busy"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn drop_wins_when_it_comes_first() {
        let b = Behaviour {
            drop_after_chunks: Some(1),
            stream_error_after_chunks: Some(2),
            ..Behaviour::default()
        };
        assert_eq!(
            success(decide(&b, &facts(true), None, false)).ending,
            Ending::DropAfter(1)
        );
    }
}
