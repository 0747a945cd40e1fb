use std::fmt;

/// What a provider's error answer says went wrong, read from its status and type/code/message in
/// any dialect (SPEC §11 "Error classes"; the mapping table is docs/error-classes.md). Users write
/// these names in `triggerOn.errors` and `retry.on.errors`, and read them in the routing log's
/// `attempts[].errorClass` and in CEL's `error.class`.
///
/// Most error answers have no class: only these five are told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The prompt (plus the requested output) does not fit the model's context window.
    ContextLengthExceeded,
    /// The provider's content filter, policy check or guardrail refused the request.
    ContentFiltered,
    /// A short-term rate limit (requests or tokens per minute): waiting helps.
    RateLimited,
    /// Credit, billing, spend limit or a daily quota is used up: waiting minutes does not help.
    QuotaExhausted,
    /// The provider (or the model) has no capacity right now, for everyone.
    Overloaded,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 5] = [
        ErrorClass::ContextLengthExceeded,
        ErrorClass::ContentFiltered,
        ErrorClass::RateLimited,
        ErrorClass::QuotaExhausted,
        ErrorClass::Overloaded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ContextLengthExceeded => "CONTEXT_LENGTH_EXCEEDED",
            ErrorClass::ContentFiltered => "CONTENT_FILTERED",
            ErrorClass::RateLimited => "RATE_LIMITED",
            ErrorClass::QuotaExhausted => "QUOTA_EXHAUSTED",
            ErrorClass::Overloaded => "OVERLOADED",
        }
    }

    /// The exact upper-case name, as [`ErrorClass::as_str`] writes it.
    pub fn parse(s: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == s)
    }

    fn bit(self) -> u8 {
        match self {
            ErrorClass::ContextLengthExceeded => 1,
            ErrorClass::ContentFiltered => 2,
            ErrorClass::RateLimited => 4,
            ErrorClass::QuotaExhausted => 8,
            ErrorClass::Overloaded => 16,
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorClass {
    /// As its name: the routing log's `attempts[].errorClass`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Bit set of [`ErrorClass`]es, used by [`crate::Triggers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ClassSet(u8);

impl ClassSet {
    pub(crate) fn insert(&mut self, c: ErrorClass) {
        self.0 |= c.bit();
    }
    pub(crate) fn contains(self, c: ErrorClass) -> bool {
        self.0 & c.bit() != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_exact() {
        for c in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        assert_eq!(
            ErrorClass::parse("CONTEXT_LENGTH_EXCEEDED"),
            Some(ErrorClass::ContextLengthExceeded)
        );
        assert_eq!(ErrorClass::parse("context_length_exceeded"), None);
        assert_eq!(ErrorClass::parse("RATE_LIMIT"), None);
        assert_eq!(ErrorClass::parse(""), None);
    }

    #[test]
    fn bits_are_distinct() {
        let mut seen = ClassSet::default();
        for c in ErrorClass::ALL {
            assert!(!seen.contains(c), "{c} shares a bit");
            seen.insert(c);
            assert!(seen.contains(c));
        }
    }
}
