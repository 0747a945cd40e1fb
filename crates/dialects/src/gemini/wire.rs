//! The Gemini wire shapes, read and written with raw JSON for function arguments and schemas so
//! their text (and key order) passes unchanged.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::canonical::{Part, TranslateError};
use crate::common::raw_json;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct WContent {
    #[serde(default)]
    pub(super) role: Option<String>,
    #[serde(default)]
    pub(super) parts: Vec<WPart>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct WPart {
    #[serde(default)]
    pub(super) text: Option<String>,
    #[serde(default)]
    pub(super) thought: Option<bool>,
    #[serde(default)]
    pub(super) function_call: Option<WCall>,
    #[serde(default)]
    pub(super) function_response: Option<WFunctionResponse>,
    #[serde(default)]
    pub(super) inline_data: Option<WInline>,
}

#[derive(Deserialize)]
pub(super) struct WCall {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) args: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
pub(super) struct WFunctionResponse {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) response: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WInline {
    #[serde(default)]
    pub(super) mime_type: String,
    #[serde(default)]
    pub(super) data: String,
}

/// A function call's arguments as canonical JSON text (verbatim; absent or not an object: `{}`).
pub(super) fn args_text(args: Option<&RawValue>) -> String {
    match args {
        Some(a) if a.get().trim_start().starts_with('{') => a.get().to_owned(),
        _ => "{}".to_owned(),
    }
}

/// A response or request part as written.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum OutPart<'a> {
    Text {
        text: &'a str,
    },
    Call {
        #[serde(rename = "functionCall")]
        function_call: OutCall<'a>,
    },
    Response {
        #[serde(rename = "functionResponse")]
        function_response: OutFunctionResponse<'a>,
    },
    Inline {
        #[serde(rename = "inlineData")]
        inline_data: OutInline<'a>,
    },
}

#[derive(Serialize)]
pub(super) struct OutCall<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) args: Box<RawValue>,
}

#[derive(Serialize)]
pub(super) struct OutFunctionResponse<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(super) id: &'a str,
    pub(super) name: &'a str,
    pub(super) response: serde_json::Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct OutInline<'a> {
    pub(super) mime_type: &'a str,
    pub(super) data: &'a str,
}

#[derive(Serialize)]
pub(super) struct OutContent<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) role: Option<&'static str>,
    pub(super) parts: Vec<OutPart<'a>>,
}

/// A function call's canonical arguments as `args` (not JSON or not an object: `{}` when
/// `lenient`, else an error).
pub(super) fn out_args(arguments: &str, lenient: bool) -> Result<Box<RawValue>, TranslateError> {
    match raw_json(arguments, "tool call arguments") {
        Ok(r) if r.get().trim_start().starts_with('{') => Ok(r),
        Err(e) if !lenient => Err(e),
        _ => raw_json("{}", "tool call arguments"),
    }
}

/// A canonical text or tool-call part of an answer (results and images are not answer parts).
pub(super) fn answer_part(p: &Part) -> Option<OutPart<'_>> {
    match p {
        Part::Text(t) => Some(OutPart::Text { text: t }),
        Part::ToolCall {
            id,
            name,
            arguments,
        } => Some(OutPart::Call {
            function_call: OutCall {
                id,
                name,
                args: out_args(arguments, true).ok()?,
            },
        }),
        _ => None,
    }
}
