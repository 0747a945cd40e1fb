use std::fmt;

use crate::outcome::{ErrorSet, Outcome};
use crate::ErrorKind;

/// One entry of `triggerOn.statusCodes`: an exact code (`"429"`) or a class (`"5XX"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusMatcher {
    Exact(u16),
    /// The hundreds digit: 4 for `4XX`, 5 for `5XX`.
    Class(u16),
}

impl StatusMatcher {
    /// Parses `"503"`, `"4XX"` or `"5xx"`. Only 400–599 are valid: 2xx/3xx never trigger.
    pub fn parse(s: &str) -> Result<StatusMatcher, TriggerError> {
        let t = s.trim();
        if t.len() == 3 && t[1..].eq_ignore_ascii_case("XX") {
            return match &t[..1] {
                "4" => Ok(StatusMatcher::Class(4)),
                "5" => Ok(StatusMatcher::Class(5)),
                _ => Err(TriggerError::StatusOutOfRange(s.to_string())),
            };
        }
        match t.parse::<u16>() {
            Ok(code) if (400..=599).contains(&code) => Ok(StatusMatcher::Exact(code)),
            Ok(_) => Err(TriggerError::StatusOutOfRange(s.to_string())),
            Err(_) => Err(TriggerError::BadStatus(s.to_string())),
        }
    }

    pub fn matches(self, code: u16) -> bool {
        match self {
            StatusMatcher::Exact(c) => c == code,
            StatusMatcher::Class(h) => code / 100 == h,
        }
    }
}

impl fmt::Display for StatusMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusMatcher::Exact(c) => write!(f, "{c}"),
            StatusMatcher::Class(h) => write!(f, "{h}XX"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerError {
    BadStatus(String),
    StatusOutOfRange(String),
    UnknownError(String),
}

impl fmt::Display for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TriggerError::BadStatus(s) => {
                write!(
                    f,
                    "`{s}` is not a status code (write e.g. \"503\" or \"5XX\")"
                )
            }
            TriggerError::StatusOutOfRange(s) => write!(
                f,
                "status code `{s}` is outside 400-599 (only 4xx/5xx answers can trigger a fallback)"
            ),
            TriggerError::UnknownError(s) => write!(
                f,
                "unknown error `{s}` (expected CONNECTION_ERROR, FIRST_BYTE_TIMEOUT or UNROUTABLE)"
            ),
        }
    }
}

impl std::error::Error for TriggerError {}

/// The outcomes that make the walk advance past one hop (SPEC §5.3).
///
/// A hop without `triggerOn` gets [`Triggers::default_set`]; a written `triggerOn` replaces the
/// default entirely. Nothing is inherited from other hops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggers {
    statuses: Vec<StatusMatcher>,
    errors: ErrorSet,
    is_default: bool,
}

impl Triggers {
    /// `5XX` + `CONNECTION_ERROR` + `FIRST_BYTE_TIMEOUT` + `UNROUTABLE`. 429 is not included.
    pub fn default_set() -> Triggers {
        let mut errors = ErrorSet::default();
        for k in ErrorKind::ALL {
            errors.insert(k);
        }
        Triggers {
            statuses: vec![StatusMatcher::Class(5)],
            errors,
            is_default: true,
        }
    }

    /// An explicit `triggerOn`. Empty lists mean "nothing of that kind triggers".
    pub fn explicit(statuses: Vec<StatusMatcher>, errors: &[ErrorKind]) -> Triggers {
        let mut set = ErrorSet::default();
        for k in errors {
            set.insert(*k);
        }
        Triggers {
            statuses,
            errors: set,
            is_default: false,
        }
    }

    /// True when this hop had no `triggerOn` of its own.
    pub fn is_default(&self) -> bool {
        self.is_default
    }

    pub fn statuses(&self) -> &[StatusMatcher] {
        &self.statuses
    }

    pub fn errors(&self) -> Vec<ErrorKind> {
        ErrorKind::ALL
            .into_iter()
            .filter(|k| self.errors.contains(*k))
            .collect()
    }

    /// Does this outcome make the walk advance? 2xx/3xx never do.
    pub fn fires(&self, outcome: &Outcome) -> bool {
        match outcome {
            Outcome::Success(_) => false,
            Outcome::Status(code) => self.statuses.iter().any(|m| m.matches(*code)),
            Outcome::Error(kind) => self.errors.contains(*kind),
        }
    }
}

impl fmt::Display for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let statuses: Vec<String> = self.statuses.iter().map(|s| s.to_string()).collect();
        let errors: Vec<&str> = self.errors().into_iter().map(|k| k.as_str()).collect();
        write!(
            f,
            "statusCodes [{}], errors [{}]",
            statuses.join(", "),
            errors.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_triggers_are_5xx_and_all_errors_but_not_429_or_400() {
        let t = Triggers::default_set();
        assert!(t.fires(&Outcome::Status(503)));
        assert!(t.fires(&Outcome::Status(500)));
        assert!(!t.fires(&Outcome::Status(429)));
        assert!(!t.fires(&Outcome::Status(400)));
        assert!(!t.fires(&Outcome::Success(200)));
        for k in ErrorKind::ALL {
            assert!(t.fires(&Outcome::Error(k)));
        }
        assert!(t.is_default());
    }

    #[test]
    fn explicit_triggers_replace_the_default() {
        let t = Triggers::explicit(
            vec![StatusMatcher::Exact(429)],
            &[ErrorKind::ConnectionError],
        );
        assert!(t.fires(&Outcome::Status(429)));
        assert!(
            !t.fires(&Outcome::Status(503)),
            "5XX is not inherited from the default"
        );
        assert!(!t.fires(&Outcome::Error(ErrorKind::FirstByteTimeout)));
        assert!(t.fires(&Outcome::Error(ErrorKind::ConnectionError)));
        assert!(!t.is_default());
    }

    #[test]
    fn status_matchers_parse_codes_and_classes() {
        assert_eq!(StatusMatcher::parse("4XX"), Ok(StatusMatcher::Class(4)));
        assert_eq!(StatusMatcher::parse("5xx"), Ok(StatusMatcher::Class(5)));
        assert_eq!(StatusMatcher::parse("429"), Ok(StatusMatcher::Exact(429)));
        assert!(matches!(
            StatusMatcher::parse("399"),
            Err(TriggerError::StatusOutOfRange(_))
        ));
        assert!(matches!(
            StatusMatcher::parse("600"),
            Err(TriggerError::StatusOutOfRange(_))
        ));
        assert!(matches!(
            StatusMatcher::parse("3XX"),
            Err(TriggerError::StatusOutOfRange(_))
        ));
        assert!(matches!(
            StatusMatcher::parse("abc"),
            Err(TriggerError::BadStatus(_))
        ));
    }

    #[test]
    fn class_matcher_matches_only_its_hundreds() {
        assert!(StatusMatcher::Class(4).matches(404));
        assert!(!StatusMatcher::Class(4).matches(500));
    }
}
