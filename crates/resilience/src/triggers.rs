use std::fmt;

use crate::class::{ClassSet, ErrorClass};
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
    /// A name that is none of the error kinds (stream timeouts included) or error classes
    /// ([`TriggerName::parse`]).
    UnknownName(String),
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
            TriggerError::UnknownError(s) => {
                let names: Vec<&str> = ErrorKind::ALL.into_iter().map(ErrorKind::as_str).collect();
                write!(
                    f,
                    "unknown error `{s}` (expected one of {})",
                    names.join(", ")
                )
            }
            TriggerError::UnknownName(s) => {
                let names: Vec<&str> = TriggerName::all().map(TriggerName::as_str).collect();
                write!(
                    f,
                    "unknown error `{s}` (expected one of {})",
                    names.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for TriggerError {}

/// One entry of `triggerOn.errors` / `retry.on.errors`: an attempt's error outcome (a transport
/// failure or a stream timeout, [`ErrorKind`]) or an error class read from the provider's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerName {
    Kind(ErrorKind),
    Class(ErrorClass),
}

impl TriggerName {
    /// Every name, in the order [`Triggers`] displays them.
    pub fn all() -> impl Iterator<Item = TriggerName> {
        ErrorKind::ALL
            .into_iter()
            .map(TriggerName::Kind)
            .chain(ErrorClass::ALL.into_iter().map(TriggerName::Class))
    }

    /// The exact upper-case name (surrounding whitespace ignored).
    pub fn parse(s: &str) -> Result<TriggerName, TriggerError> {
        let t = s.trim();
        TriggerName::all()
            .find(|n| n.as_str() == t)
            .ok_or_else(|| TriggerError::UnknownName(s.to_string()))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TriggerName::Kind(k) => k.as_str(),
            TriggerName::Class(c) => c.as_str(),
        }
    }
}

impl fmt::Display for TriggerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcomes that make the walk advance past one hop (SPEC §5.3).
///
/// A hop without `triggerOn` gets [`Triggers::default_set`]; a written `triggerOn` replaces the
/// default entirely. Nothing is inherited from other hops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggers {
    statuses: Vec<StatusMatcher>,
    errors: ErrorSet,
    classes: ClassSet,
    is_default: bool,
}

impl Triggers {
    /// `5XX` + every [`ErrorKind`]: `CONNECTION_ERROR`, `FIRST_BYTE_TIMEOUT`, `UNROUTABLE`,
    /// `FIRST_TOKEN_TIMEOUT`, `STREAM_IDLE_TIMEOUT` (SPEC §11: "default triggers gain both"). 429
    /// is not included, and no error class is.
    pub fn default_set() -> Triggers {
        let mut errors = ErrorSet::default();
        for k in ErrorKind::ALL {
            errors.insert(k);
        }
        Triggers {
            statuses: vec![StatusMatcher::Class(5)],
            errors,
            classes: ClassSet::default(),
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
            classes: ClassSet::default(),
            is_default: false,
        }
    }

    /// An explicit `triggerOn` (or `retry.on`) whose `errors` may name error kinds (stream
    /// timeouts included) and error classes ([`TriggerName::parse`]).
    pub fn explicit_names(statuses: Vec<StatusMatcher>, names: &[TriggerName]) -> Triggers {
        let mut t = Triggers::explicit(statuses, &[]);
        for n in names {
            match *n {
                TriggerName::Kind(k) => t.errors.insert(k),
                TriggerName::Class(c) => t.classes.insert(c),
            }
        }
        t
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

    /// The error classes listed, in [`ErrorClass::ALL`] order.
    pub fn classes(&self) -> Vec<ErrorClass> {
        ErrorClass::ALL
            .into_iter()
            .filter(|c| self.classes.contains(*c))
            .collect()
    }

    /// Every entry of `errors`: kinds (stream timeouts included), then classes.
    pub fn names(&self) -> Vec<TriggerName> {
        TriggerName::all()
            .filter(|n| match *n {
                TriggerName::Kind(k) => self.errors.contains(k),
                TriggerName::Class(c) => self.classes.contains(c),
            })
            .collect()
    }

    /// Does this outcome make the walk advance? 2xx/3xx never do. Reads the status and kind
    /// only; [`Triggers::fires_with`] also reads the answer's error class.
    pub fn fires(&self, outcome: &Outcome) -> bool {
        match outcome {
            Outcome::Success(_) | Outcome::Cancelled => false,
            Outcome::Status(code) => self.statuses.iter().any(|m| m.matches(*code)),
            Outcome::Error(kind) => self.errors.contains(*kind),
        }
    }

    /// [`Triggers::fires`], or the answer's error class is listed (SPEC §11: "an outcome matches
    /// when its status or its class is listed"). A 2xx/3xx never fires, whatever class is passed.
    pub fn fires_with(&self, outcome: &Outcome, class: Option<ErrorClass>) -> bool {
        if outcome.is_success() {
            return false;
        }
        self.fires(outcome) || class.is_some_and(|c| self.classes.contains(c))
    }
}

impl fmt::Display for Triggers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let statuses: Vec<String> = self.statuses.iter().map(|s| s.to_string()).collect();
        let errors: Vec<&str> = self.names().into_iter().map(TriggerName::as_str).collect();
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
    fn default_triggers_have_both_stream_timeouts_and_no_class() {
        let t = Triggers::default_set();
        // SPEC §11: "Default triggers gain both."
        for k in [ErrorKind::FirstTokenTimeout, ErrorKind::StreamIdleTimeout] {
            assert!(t.fires(&Outcome::Error(k)), "{k} is a default trigger");
            assert!(t.fires_with(&Outcome::Error(k), None));
        }
        assert!(t.classes().is_empty());
        for c in ErrorClass::ALL {
            assert!(
                !t.fires_with(&Outcome::Status(400), Some(c)),
                "a 400 with {c} is not a default trigger"
            );
            assert!(
                t.fires_with(&Outcome::Status(503), Some(c)),
                "5XX still fires"
            );
        }
        assert_eq!(
            t.to_string(),
            "statusCodes [5XX], errors [CONNECTION_ERROR, FIRST_BYTE_TIMEOUT, UNROUTABLE, \
             FIRST_TOKEN_TIMEOUT, STREAM_IDLE_TIMEOUT]"
        );
    }

    #[test]
    fn a_listed_class_fires_on_its_class_and_nothing_else() {
        // SPEC §11: fall back on a context-length error but not on other 400s.
        let t = Triggers::explicit_names(
            Vec::new(),
            &[TriggerName::Class(ErrorClass::ContextLengthExceeded)],
        );
        let s400 = Outcome::Status(400);
        assert!(t.fires_with(&s400, Some(ErrorClass::ContextLengthExceeded)));
        assert!(!t.fires_with(&s400, None), "a plain 400 does not fire");
        assert!(!t.fires_with(&s400, Some(ErrorClass::ContentFiltered)));
        assert!(!t.fires(&s400), "fires() ignores classes");
        assert!(
            !t.fires_with(
                &Outcome::Success(200),
                Some(ErrorClass::ContextLengthExceeded)
            ),
            "2xx never fires"
        );
        assert!(
            !t.fires_with(&Outcome::Status(503), None),
            "5XX is not inherited"
        );
        assert!(!t.fires_with(&Outcome::Error(ErrorKind::ConnectionError), None));
        for k in [ErrorKind::FirstTokenTimeout, ErrorKind::StreamIdleTimeout] {
            assert!(!t.fires(&Outcome::Error(k)), "{k} is not inherited");
        }
        assert_eq!(t.classes(), vec![ErrorClass::ContextLengthExceeded]);
        assert!(!t.is_default());
    }

    #[test]
    fn status_or_class_fires() {
        let t = Triggers::explicit_names(
            vec![StatusMatcher::Exact(529)],
            &[
                TriggerName::Class(ErrorClass::RateLimited),
                TriggerName::Kind(ErrorKind::ConnectionError),
                TriggerName::Kind(ErrorKind::StreamIdleTimeout),
            ],
        );
        assert!(t.fires_with(&Outcome::Status(529), None));
        assert!(t.fires_with(&Outcome::Status(429), Some(ErrorClass::RateLimited)));
        assert!(!t.fires_with(&Outcome::Status(429), Some(ErrorClass::QuotaExhausted)));
        assert!(!t.fires_with(&Outcome::Status(429), None));
        assert!(t.fires_with(&Outcome::Error(ErrorKind::ConnectionError), None));
        assert!(!t.fires_with(&Outcome::Error(ErrorKind::FirstByteTimeout), None));
        assert!(t.fires(&Outcome::Error(ErrorKind::StreamIdleTimeout)));
        assert!(!t.fires(&Outcome::Error(ErrorKind::FirstTokenTimeout)));
        assert_eq!(
            t.to_string(),
            "statusCodes [529], errors [CONNECTION_ERROR, STREAM_IDLE_TIMEOUT, RATE_LIMITED]"
        );
        assert_eq!(
            t.errors(),
            vec![ErrorKind::ConnectionError, ErrorKind::StreamIdleTimeout]
        );
    }

    #[test]
    fn explicit_without_names_is_unchanged() {
        let t = Triggers::explicit(vec![StatusMatcher::Exact(429)], &[ErrorKind::Unroutable]);
        assert_eq!(
            t,
            Triggers::explicit_names(
                vec![StatusMatcher::Exact(429)],
                &[TriggerName::Kind(ErrorKind::Unroutable)]
            )
        );
        assert!(t.classes().is_empty());
        assert_eq!(t.to_string(), "statusCodes [429], errors [UNROUTABLE]");
    }

    #[test]
    fn trigger_names_parse_every_kind_timeout_and_class() {
        for n in TriggerName::all() {
            assert_eq!(TriggerName::parse(n.as_str()), Ok(n));
        }
        assert_eq!(TriggerName::all().count(), 10);
        assert_eq!(
            TriggerName::parse(" CONTEXT_LENGTH_EXCEEDED "),
            Ok(TriggerName::Class(ErrorClass::ContextLengthExceeded))
        );
        assert_eq!(
            TriggerName::parse("FIRST_TOKEN_TIMEOUT"),
            Ok(TriggerName::Kind(ErrorKind::FirstTokenTimeout))
        );
        assert_eq!(
            TriggerName::parse("STREAM_IDLE_TIMEOUT"),
            Ok(TriggerName::Kind(ErrorKind::StreamIdleTimeout))
        );
        assert_eq!(
            ErrorKind::parse("FIRST_TOKEN_TIMEOUT"),
            Some(ErrorKind::FirstTokenTimeout)
        );
        let e = TriggerName::parse("context_length_exceeded").unwrap_err();
        assert!(matches!(e, TriggerError::UnknownName(_)));
        let msg = e.to_string();
        for n in TriggerName::all() {
            assert!(msg.contains(n.as_str()), "{msg} lists {n}");
        }
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
