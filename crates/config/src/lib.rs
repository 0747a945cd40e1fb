//! sidetrack configuration: YAML (or JSON) text → raw serde structs → validated [`model::Config`].
//!
//! The pipeline, one module per step:
//! 1. `located` parses YAML into a `serde_json::Value` and records the
//!    line:column of every key and value by field path (`rules[2].routeToTarget.staticRoute`).
//! 2. `raw` deserializes that value into structs mirroring SPEC §4 (camelCase, unknown keys
//!    rejected); a structural error carries its path and position.
//! 3. `validate` checks every SPEC §4 rule, collecting *all* problems, applies defaults and
//!    resolves `env:` secrets, producing the [`Config`] the engine reads.
//!
//! Every error prints as `FILE:LINE:COL: path.to.field: message` (see [`ConfigError`]).

mod error;
mod located;
pub mod model;
mod raw;
mod redact;
mod validate;

use std::path::Path;

pub mod glob;
mod lint;

pub use error::{ConfigError, ConfigErrors};
pub use model::*;
pub use redact::{redact_url, url_has_user_info};

/// Loads and validates a config file, reading `env:` secrets from the process environment.
/// A file that cannot be read becomes a single [`ConfigError`] without a position.
pub fn load_file(path: &Path) -> Result<Config, ConfigErrors> {
    load_file_with_env(path, &process_env)
}

/// [`load_file`] with an injected environment lookup (tests, `check` against another env).
pub fn load_file_with_env(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let (name, src) = read_source(path)?;
    load_str_with_env(&src, &name, env)
}

/// A config file's name (for messages) and text; one error without a position when it cannot be
/// read.
fn read_source(path: &Path) -> Result<(String, String), ConfigError> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(src) => Ok((name, src)),
        Err(e) => Err(ConfigError {
            file: name,
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the config file: {e}"),
        }),
    }
}

/// Loads and validates config text; `source_name` is used in messages and [`Config::source`].
pub fn load_str(src: &str, source_name: &str) -> Result<Config, ConfigErrors> {
    load_str_with_env(src, source_name, &process_env)
}

/// [`load_file`] that also returns `check`'s warnings ([`load_str_with_warnings`]).
pub fn load_file_with_warnings(path: &Path) -> Result<(Config, Vec<ConfigError>), ConfigErrors> {
    let (name, src) = read_source(path)?;
    load_str_with_warnings(&src, &name, &process_env)
}

/// Loads and validates config text like [`load_str_with_env`], and also returns the warnings of
/// `sidetrack check` (seed 000's pitfalls: settings that load but likely do not do what their
/// author meant), each located like an error.
pub fn load_str_with_warnings(
    src: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Vec<ConfigError>), ConfigErrors> {
    let (config, positions) = load_located(src, source_name, env)?;
    let warnings = lint::warnings(&config, &positions, source_name);
    Ok((config, warnings))
}

/// [`load_str`] with an injected lookup for `env:NAME` secrets, so tests need not touch the
/// process environment.
pub fn load_str_with_env(
    src: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    load_located(src, source_name, env).map(|(config, _)| config)
}

/// Parses, deserializes and validates config text; the validated config and where each field
/// path was written.
fn load_located(
    src: &str,
    source_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, located::Positions), ConfigErrors> {
    let located = located::parse(src, source_name)?;
    let raw: raw::RawConfig = located::deserialize(&located, source_name)?;
    let ctx = validate::Ctx::new(source_name, &located.positions, env);
    let config = validate::validate(raw, ctx, source_name)?;
    Ok((config, located.positions))
}

/// Deserializes YAML (or JSON) into any `T` with located errors: syntax errors, unknown keys
/// (with `deny_unknown_fields`), wrong types and missing fields all come back as
/// `FILE:LINE:COL: path: message`. An empty document deserializes as an empty mapping.
pub fn from_yaml_str<T: serde::de::DeserializeOwned>(
    src: &str,
    source_name: &str,
) -> Result<T, ConfigErrors> {
    located::from_str(src, source_name)
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests;
