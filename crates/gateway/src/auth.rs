//! Phase "authenticate": caller key → principal (SPEC §4 `auth.keys`).
//!
//! Keys are compared by their SHA-256 digest (a map lookup), so a plain key and a `sha256:` key
//! are the same thing at request time and no comparison leaks timing about a key's prefix.

use std::collections::HashMap;
use std::sync::Arc;

use http::HeaderMap;
use sha2::{Digest, Sha256};
use sidetrack_config::{Auth, KeyMatch};

use crate::glob::glob_match;

pub const ANONYMOUS: &str = "anonymous";

#[derive(Debug, Clone)]
pub struct Principal {
    /// Shared with the routing record (no copy per request).
    pub name: Arc<str>,
    /// Model allow-list globs; `None` = any model.
    pub models: Option<Vec<String>>,
    /// Gateway rate limits for this principal.
    pub limits: Option<sidetrack_config::Limits>,
}

impl Principal {
    pub fn anonymous() -> Principal {
        Principal {
            name: ANONYMOUS.into(),
            models: None,
            limits: None,
        }
    }

    pub fn may_use(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|g| glob_match(g, model)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    Missing,
    Invalid,
}

/// Digest → principal, built once per config. Requests share its principals.
#[derive(Debug)]
pub struct KeyTable {
    enabled: bool,
    by_digest: HashMap<[u8; 32], Arc<Principal>>,
    anonymous: Arc<Principal>,
}

impl Default for KeyTable {
    fn default() -> KeyTable {
        KeyTable {
            enabled: false,
            by_digest: HashMap::new(),
            anonymous: Arc::new(Principal::anonymous()),
        }
    }
}

impl KeyTable {
    pub fn new(auth: Option<&Auth>) -> KeyTable {
        let Some(auth) = auth else {
            return KeyTable::default();
        };
        let by_digest = auth
            .keys
            .iter()
            .map(|k| {
                let digest = match &k.key {
                    KeyMatch::Plain(secret) => Sha256::digest(secret.expose().as_bytes()).into(),
                    KeyMatch::Sha256(d) => *d,
                };
                (
                    digest,
                    Arc::new(Principal {
                        name: k.principal.as_str().into(),
                        models: k.models.clone(),
                        limits: k.limits,
                    }),
                )
            })
            .collect();
        KeyTable {
            enabled: true,
            by_digest,
            ..KeyTable::default()
        }
    }

    /// The principal for a request: `Authorization: Bearer <key>`, `x-api-key: <key>` or
    /// `x-goog-api-key: <key>` (the google-genai SDKs), in that order.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        if !self.enabled {
            return Ok(self.anonymous.clone());
        }
        let key = presented_key(headers).ok_or(AuthError::Missing)?;
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.by_digest
            .get(&digest)
            .cloned()
            .ok_or(AuthError::Invalid)
    }
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
    }
    ["x-api-key", "x-goog-api-key"]
        .into_iter()
        .find_map(|name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|s| !s.is_empty())
        })
}
