//! The error-class table of docs/error-classes.md (SPEC §11), read from the markdown itself and
//! checked row by row, so the docs and the readers cannot drift: each row's example answer goes
//! through `Dialect::error_class` (an answer) or through the dialect's own stream decoding and
//! `Dialect::error_class_of` (a stream row) and must give the row's class.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use sidetrack_dialects::bedrock::{converse, eventstream, invoke};
use sidetrack_dialects::canonical::StreamEvent;
use sidetrack_dialects::sse::SseEvent;
use sidetrack_dialects::{anthropic_messages, gemini, openai_chat, openai_responses};
use sidetrack_dialects::{Dialect, StreamEventClass};
use sidetrack_resilience::ErrorClass;

const DOC: &str = include_str!("../../../docs/error-classes.md");

#[derive(Debug)]
struct Row {
    line: usize,
    dialect: String,
    status: Option<u16>,
    header: Option<String>,
    class: Option<ErrorClass>,
    example: String,
}

fn none_if_dash(cell: &str) -> Option<&str> {
    let c = cell.trim().trim_matches('`');
    (c != "–" && c != "-").then_some(c)
}

fn table() -> Vec<Row> {
    let start = DOC
        .find("<!-- error-class-table:start -->")
        .expect("start marker");
    let end = DOC
        .find("<!-- error-class-table:end -->")
        .expect("end marker");
    let first_line = DOC[..start].lines().count() + 1;
    let mut rows = Vec::new();
    for (i, line) in DOC[start..end].lines().enumerate() {
        let line_no = first_line + i;
        if !line.starts_with('|') || line.starts_with("|---") || line.starts_with("| dialect") {
            continue;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        assert_eq!(
            cells.len(),
            7,
            "docs/error-classes.md:{line_no}: 7 cells (no `|` inside an example)"
        );
        let example = cells[6].trim();
        assert!(
            example.starts_with('`') && example.ends_with('`'),
            "docs/error-classes.md:{line_no}: the example is one code span"
        );
        let class = none_if_dash(cells[5]).map(|c| {
            ErrorClass::parse(c)
                .unwrap_or_else(|| panic!("docs/error-classes.md:{line_no}: unknown class `{c}`"))
        });
        rows.push(Row {
            line: line_no,
            dialect: cells[0].trim().to_owned(),
            status: none_if_dash(cells[1]).map(|s| s.parse().expect("status")),
            header: none_if_dash(cells[2]).map(str::to_owned),
            class,
            example: example[1..example.len() - 1].to_owned(),
        });
    }
    rows
}

/// A stream row's example through the dialect's own stream reading, then `error_class_of`.
fn stream_class(dialect: &str, example: &str) -> Option<ErrorClass> {
    let sse = |data: &str| SseEvent {
        event: None,
        data: data.to_owned(),
    };
    let (d, ev) = match dialect {
        "openai chat stream" => (
            Dialect::OpenAiChat,
            openai_chat::classify_stream_event(&sse(example)),
        ),
        "openai responses stream" => (
            Dialect::OpenAiResponses,
            openai_responses::classify_stream_event(&sse(example)),
        ),
        "anthropic stream" => (
            Dialect::AnthropicMessages,
            anthropic_messages::classify_stream_event(&sse(example)),
        ),
        "bedrock stream" => {
            let (exception, payload) = example.split_once(' ').expect("`member {json}`");
            let message = serde_json::from_str::<serde_json::Value>(payload).unwrap()["message"]
                .as_str()
                .unwrap()
                .to_owned();
            let frame = eventstream::exception_frame(exception, &message);
            // Both Bedrock stream decoders read exception frames; they must agree.
            let from_converse = converse::StreamDecoder::new().push(&frame);
            let from_invoke = invoke::StreamDecoder::new().push(&frame);
            assert_eq!(from_converse, from_invoke);
            let [StreamEvent::Error {
                status,
                error_type,
                message,
            }] = from_converse.as_slice()
            else {
                panic!("{example}: one error event, got {from_converse:?}");
            };
            return Dialect::BedrockConverse.error_class_of(*status, error_type, message);
        }
        "gemini stream" => {
            let mut d = gemini::StreamDecoder::new();
            let events = d.push(format!("data: {example}\n\n").as_bytes());
            let [StreamEvent::Error {
                status,
                error_type,
                message,
            }] = events.as_slice()
            else {
                panic!("{example}: one error event, got {events:?}");
            };
            return Dialect::Gemini.error_class_of(*status, error_type, message);
        }
        other => panic!("unknown stream dialect `{other}`"),
    };
    let StreamEventClass::Error {
        status,
        error_type,
        message,
    } = ev
    else {
        panic!("{example}: not an error event: {ev:?}");
    };
    d.error_class_of(status, &error_type, &message)
}

fn answer_dialects(dialect: &str) -> &'static [Dialect] {
    match dialect {
        "openai" => &[Dialect::OpenAiChat, Dialect::OpenAiResponses],
        "anthropic" => &[Dialect::AnthropicMessages],
        "bedrock" => &[Dialect::BedrockConverse, Dialect::BedrockInvoke],
        "gemini" => &[Dialect::Gemini],
        other => panic!("unknown dialect `{other}`"),
    }
}

#[test]
fn every_row_of_the_docs_table_holds() {
    let rows = table();
    assert!(rows.len() >= 40, "the table was read: {} rows", rows.len());
    let mut failures = Vec::new();
    for r in &rows {
        let got: Vec<Option<ErrorClass>> = if r.dialect.ends_with(" stream") {
            vec![stream_class(&r.dialect, &r.example)]
        } else {
            let status = r.status.expect("an answer row has a status");
            answer_dialects(&r.dialect)
                .iter()
                .map(|d| d.error_class(status, r.header.as_deref(), r.example.as_bytes()))
                .collect()
        };
        for g in got {
            if g != r.class {
                failures.push(format!(
                    "docs/error-classes.md:{} ({}): want {:?}, got {:?}",
                    r.line, r.dialect, r.class, g
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Gemini reports safety blocks as 200 answers (`finishReason: SAFETY`), so its rows cover the
/// other four classes, an unclassed answer and stream errors.
#[test]
fn the_table_covers_gemini() {
    let rows = table();
    let classes: Vec<ErrorClass> = rows
        .iter()
        .filter(|r| r.dialect == "gemini")
        .filter_map(|r| r.class)
        .collect();
    for c in ErrorClass::ALL {
        assert_eq!(
            classes.contains(&c),
            c != ErrorClass::ContentFiltered,
            "gemini row for {c}"
        );
    }
    assert!(rows
        .iter()
        .any(|r| r.dialect == "gemini" && r.class.is_none()));
    assert!(rows.iter().any(|r| r.dialect == "gemini stream"));
}

#[test]
fn the_table_covers_every_class_for_every_family() {
    let rows = table();
    for family in ["openai", "anthropic", "bedrock"] {
        let classes: Vec<ErrorClass> = rows
            .iter()
            .filter(|r| r.dialect == family)
            .filter_map(|r| r.class)
            .collect();
        for c in ErrorClass::ALL {
            assert!(classes.contains(&c), "{family} has a row for {c}");
        }
        assert!(
            rows.iter()
                .any(|r| r.dialect == family && r.class.is_none()),
            "{family} has a row without a class"
        );
        assert!(
            rows.iter()
                .any(|r| r.dialect.starts_with(family) && r.dialect.ends_with(" stream")),
            "{family} has a stream row"
        );
    }
}

/// The gateway may classify from what `parse_error` already extracted (`error_class_of`) instead
/// of the raw body; for every answer row whose class is carried by the error type or the
/// message (not by a field `parse_error` drops), the two agree.
#[test]
fn classifying_parse_errors_answer_agrees_with_the_body() {
    for r in table() {
        if r.dialect.ends_with(" stream") {
            continue;
        }
        let status = r.status.unwrap();
        for d in answer_dialects(&r.dialect) {
            let (ty, message) = d.parse_error(status, r.header.as_deref(), r.example.as_bytes());
            let from_parsed = d.error_class_of(status, &ty, &message);
            let from_body = d.error_class(status, r.header.as_deref(), r.example.as_bytes());
            // `parse_error` keeps the OpenAI `type` over a `code` it does not translate, and
            // drops Anthropic's `details.error_code`: there the body reader knows more.
            if from_parsed != from_body {
                assert!(
                    from_parsed.is_none() || from_parsed == Some(ErrorClass::RateLimited),
                    "docs/error-classes.md:{} {d:?}: parsed {from_parsed:?} vs body {from_body:?}",
                    r.line
                );
            }
        }
    }
}

#[test]
fn classes_serialize_as_their_names() {
    assert_eq!(
        serde_json::to_string(&ErrorClass::ContextLengthExceeded).unwrap(),
        r#""CONTEXT_LENGTH_EXCEEDED""#
    );
    assert_eq!(
        serde_json::to_string(&[ErrorClass::QuotaExhausted, ErrorClass::Overloaded]).unwrap(),
        r#"["QUOTA_EXHAUSTED","OVERLOADED"]"#
    );
}
