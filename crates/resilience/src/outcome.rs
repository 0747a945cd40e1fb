use std::fmt;

/// Transport-level failures an attempt can end in (SPEC §5.3). These are the names users write in
/// `triggerOn.errors` and read in the routing log's `errorKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Refused, reset, DNS, TLS or connect timeout: the request did not get an answer started.
    ConnectionError,
    /// Connected, but no response-body byte arrived within the hop's first-byte timeout.
    FirstByteTimeout,
    /// No target for the model, or the target does not serve it. No request was sent.
    Unroutable,
    /// A streamed request: no content event within the hop's `firstTokenTimeoutMilliseconds` of
    /// the send, before the commit (SPEC §11).
    FirstTokenTimeout,
    /// A streamed answer fell silent (no upstream chunk) for longer than the hop's
    /// `streamIdleTimeoutMilliseconds` before the commit (SPEC §11). After the commit the same
    /// silence ends the caller's stream with the explicit error instead (a mid-stream failure).
    StreamIdleTimeout,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::ConnectionError,
        ErrorKind::FirstByteTimeout,
        ErrorKind::Unroutable,
        ErrorKind::FirstTokenTimeout,
        ErrorKind::StreamIdleTimeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ConnectionError => "CONNECTION_ERROR",
            ErrorKind::FirstByteTimeout => "FIRST_BYTE_TIMEOUT",
            ErrorKind::Unroutable => "UNROUTABLE",
            ErrorKind::FirstTokenTimeout => "FIRST_TOKEN_TIMEOUT",
            ErrorKind::StreamIdleTimeout => "STREAM_IDLE_TIMEOUT",
        }
    }

    pub fn parse(s: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    fn bit(self) -> u8 {
        match self {
            ErrorKind::ConnectionError => 1,
            ErrorKind::FirstByteTimeout => 2,
            ErrorKind::Unroutable => 4,
            ErrorKind::FirstTokenTimeout => 8,
            ErrorKind::StreamIdleTimeout => 16,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one classification of an attempt (SPEC §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx/3xx answer. Never a trigger.
    Success(u16),
    /// A 4xx/5xx answer, or an error event before the first token (mapped to the status its error
    /// type carries, e.g. `overloaded_error` → 529).
    Status(u16),
    /// A transport failure; see [`ErrorKind`].
    Error(ErrorKind),
    /// The gateway dropped the attempt before it was decided: it lost a hedge race (SPEC §11).
    /// Never a trigger and never a breaker verdict.
    Cancelled,
}

impl Outcome {
    pub fn from_status(code: u16) -> Outcome {
        if code >= 400 {
            Outcome::Status(code)
        } else {
            Outcome::Success(code)
        }
    }

    /// The routing-log / metrics label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Success(_) => "SUCCESS",
            Outcome::Status(_) => "STATUS",
            Outcome::Error(k) => k.as_str(),
            Outcome::Cancelled => "CANCELLED",
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Success(c) | Outcome::Status(c) => Some(*c),
            Outcome::Error(_) | Outcome::Cancelled => None,
        }
    }

    pub fn error_kind(&self) -> Option<ErrorKind> {
        match self {
            Outcome::Error(k) => Some(*k),
            _ => None,
        }
    }

    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success(_))
    }
}

impl serde::Serialize for Outcome {
    /// As its label: the routing log's `attempts[].outcome`.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

impl PartialEq<&str> for Outcome {
    fn eq(&self, other: &&str) -> bool {
        self.label() == *other
    }
}

/// Bit set of [`ErrorKind`]s, used by [`crate::Triggers`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ErrorSet(u8);

impl ErrorSet {
    pub(crate) fn insert(&mut self, k: ErrorKind) {
        self.0 |= k.bit();
    }
    pub(crate) fn contains(self, k: ErrorKind) -> bool {
        self.0 & k.bit() != 0
    }
}
