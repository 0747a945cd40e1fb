//! `unhealthyCondition`: a CEL expression that decides whether an attempt is a counted breaker
//! failure (SPEC §5.5), instead of "matched its hop's triggers".
//!
//! Variables: `response.code` (int; 0 when there was no HTTP answer), `response.headers` (map of
//! lower-case header name → value), `error` (string: `CONNECTION_ERROR`, `FIRST_BYTE_TIMEOUT`,
//! `UNROUTABLE`, or `""` when the attempt got an answer). Example:
//! `response.code == 429 || response.code >= 500 || error == "CONNECTION_ERROR"`.

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
}

#[derive(Serialize)]
struct ResponseVar<'a> {
    code: i64,
    headers: HashMap<&'a str, &'a str>,
}

impl UnhealthyCondition {
    /// Parses the expression; the error says what is wrong with it (for `sidetrack check`).
    pub fn compile(source: &str) -> Result<UnhealthyCondition, String> {
        let program =
            cel::Program::compile(source).map_err(|e| format!("invalid CEL expression: {e}"))?;
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
        match self.program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "unhealthyCondition must be a boolean, got {other:?}"
            )),
            Err(e) => Err(format!("unhealthyCondition failed: {e}")),
        }
    }
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
        })
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
