//! `unhealthyCondition`: a CEL expression that decides whether an attempt is a counted breaker
//! failure (SPEC §5.5), instead of "matched its hop's triggers".
//!
//! Variables: `response.code` (int; 0 when there was no HTTP answer), `response.headers` (map of
//! lower-case header name → value), `error` (string: `CONNECTION_ERROR`, `FIRST_BYTE_TIMEOUT`,
//! `UNROUTABLE`, or `""` when the attempt got an answer), and `error.class` (string: the error
//! class read from the provider's error answer, SPEC §11, e.g. `QUOTA_EXHAUSTED`; `""` when none).
//! Example: `response.code == 429 || response.code >= 500 || error == "CONNECTION_ERROR"`.
//!
//! `error` stays the string SPEC §5.5 defines, so `error.class` cannot be a member of it in CEL:
//! the expression is compiled with each `error.class` outside string literals read as the
//! variable `error_class`.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

/// A compiled condition. Compile once per config; evaluate per attempt.
pub struct UnhealthyCondition {
    source: String,
    program: cel::Program,
}

impl fmt::Debug for UnhealthyCondition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnhealthyCondition({:?})", self.source)
    }
}

/// What one attempt looked like, for the condition.
pub struct ConditionInput<'a> {
    pub code: Option<u16>,
    pub headers: Vec<(&'a str, &'a str)>,
    pub error: Option<&'a str>,
    /// The answer's error class (`ErrorClass::as_str`), when it has one.
    pub class: Option<&'a str>,
}

#[derive(Serialize)]
struct ResponseVar<'a> {
    code: i64,
    headers: HashMap<&'a str, &'a str>,
}

impl UnhealthyCondition {
    /// Parses the expression; the error says what is wrong with it (for `sidetrack check`).
    pub fn compile(source: &str) -> Result<UnhealthyCondition, String> {
        let program = cel::Program::compile(&class_member_as_variable(source))
            .map_err(|e| format!("invalid CEL expression: {e}"))?;
        Ok(UnhealthyCondition {
            source: source.to_owned(),
            program,
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// True when the attempt counts as unhealthy. A result that is not a boolean, or an evaluation
    /// error (e.g. a missing header used without `in`), is an error: the caller falls back to the
    /// trigger rule and logs it.
    pub fn evaluate(&self, input: &ConditionInput<'_>) -> Result<bool, String> {
        let mut ctx = cel::Context::default();
        let response = ResponseVar {
            code: input.code.map(i64::from).unwrap_or(0),
            headers: input.headers.iter().copied().collect(),
        };
        ctx.add_variable("response", response)
            .map_err(|e| e.to_string())?;
        ctx.add_variable("error", input.error.unwrap_or(""))
            .map_err(|e| e.to_string())?;
        ctx.add_variable("error_class", input.class.unwrap_or(""))
            .map_err(|e| e.to_string())?;
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "unhealthyCondition must be a boolean, got {other:?}"
            )),
            Err(e) => Err(format!("unhealthyCondition failed: {e}")),
        }
    }
}

/// `error.class` → `error_class`, outside string literals and where `error` is a whole name.
fn class_member_as_variable(source: &str) -> String {
    const MEMBER: &str = "error.class";
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' && i + 1 < bytes.len() {
                    out.push_str(&source[i..i + 2]);
                    i += 2;
                    continue;
                }
                if b == q {
                    quote = None;
                }
            }
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None => {
                let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
                let starts = source[i..].starts_with(MEMBER)
                    && (i == 0 || !ident(bytes[i - 1]))
                    && bytes.get(i + MEMBER.len()).is_none_or(|&c| !ident(c));
                if starts {
                    out.push_str("error_class");
                    i += MEMBER.len();
                    continue;
                }
            }
        }
        let len = source[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&source[i..i + len]);
        i += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(
        src: &str,
        code: Option<u16>,
        headers: &[(&str, &str)],
        error: Option<&str>,
    ) -> Result<bool, String> {
        UnhealthyCondition::compile(src)?.evaluate(&ConditionInput {
            code,
            headers: headers.to_vec(),
            error,
            class: None,
        })
    }

    #[test]
    fn reads_the_error_class() {
        let c = UnhealthyCondition::compile(
            r#"error.class == "QUOTA_EXHAUSTED" || (error == "" && response.code >= 500)"#,
        )
        .unwrap();
        let input = |class| ConditionInput {
            code: Some(429),
            headers: Vec::new(),
            error: None,
            class,
        };
        assert_eq!(c.evaluate(&input(Some("QUOTA_EXHAUSTED"))), Ok(true));
        assert_eq!(c.evaluate(&input(Some("RATE_LIMITED"))), Ok(false));
        assert_eq!(c.evaluate(&input(None)), Ok(false));
        // Inside a string literal, and as part of a longer name, it is left alone.
        assert_eq!(
            class_member_as_variable(r#"x == "error.class" || my_error.class_x"#),
            r#"x == "error.class" || my_error.class_x"#
        );
    }

    #[test]
    fn reads_code_headers_and_error() {
        let src = r#"response.code == 429 || response.code >= 500 || error == "CONNECTION_ERROR""#;
        assert_eq!(eval(src, Some(503), &[], None), Ok(true));
        assert_eq!(eval(src, Some(429), &[], None), Ok(true));
        assert_eq!(eval(src, Some(400), &[], None), Ok(false));
        assert_eq!(eval(src, None, &[], Some("CONNECTION_ERROR")), Ok(true));
        assert_eq!(eval(src, None, &[], Some("FIRST_BYTE_TIMEOUT")), Ok(false));
        let h =
            r#""x-overloaded" in response.headers && response.headers["x-overloaded"] == "yes""#;
        assert_eq!(
            eval(h, Some(200), &[("x-overloaded", "yes")], None),
            Ok(true)
        );
        assert_eq!(eval(h, Some(200), &[], None), Ok(false));
    }

    #[test]
    fn rejects_bad_syntax_and_non_boolean_results() {
        assert!(UnhealthyCondition::compile("response.code ==").is_err());
        assert!(eval("response.code", Some(500), &[], None).is_err());
    }
}
