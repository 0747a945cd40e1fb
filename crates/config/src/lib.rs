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

mod agentcore;
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

/// How `sidetrack check` and `explain` load a config (the flags they add to SPEC §2).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// `--offline`: a missing `env:` variable is a warning (`FILE:LINE:COL: path: warning: ...`)
    /// instead of an error; the secret is then empty. `serve` never loads this way.
    pub offline: bool,
}

/// A config loaded by [`check_file`] / [`check_str`]: the model and its warnings.
#[derive(Debug)]
pub struct Checked {
    pub config: Config,
    /// Every warning, in file order (BASE's first, then the rule file's).
    pub warnings: Vec<ConfigError>,
    /// For each warning, the index (`Rule::index`) of the rule it concerns, if any.
    warning_rules: Vec<Option<usize>>,
}

impl Checked {
    /// The warnings about rule `index` (`Rule::index`): what `explain` prints for its route.
    pub fn warnings_for_rule(&self, index: usize) -> impl Iterator<Item = &ConfigError> {
        self.warnings
            .iter()
            .zip(&self.warning_rules)
            .filter(move |(_, r)| **r == Some(index))
            .map(|(w, _)| w)
    }
}

/// `sidetrack check FILE` / `check --rule RULE --config FILE`: loads `path` (and, with `rule`, one
/// AgentCore rule body or an array of them, checked as if they were the last of FILE's `rules`),
/// reading `env:` secrets from the process environment.
pub fn check_file(
    path: &Path,
    rule: Option<&Path>,
    options: CheckOptions,
) -> Result<Checked, ConfigErrors> {
    let (name, src) = read_source(path)?;
    let rule = match rule {
        Some(p) => Some(read_source(p)?),
        None => None,
    };
    let rule = rule.as_ref().map(|(n, s)| (s.as_str(), n.as_str()));
    check_str(&src, &name, rule, &process_env, options)
}

/// [`check_file`] on text: `rule` is `(text, name)` of the rule file.
pub fn check_str(
    src: &str,
    source_name: &str,
    rule: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
    options: CheckOptions,
) -> Result<Checked, ConfigErrors> {
    let mut base = located::parse(src, source_name)?;
    let mut remap = None;
    if let Some((rule_src, rule_name)) = rule {
        let doc = located::parse(rule_src, rule_name)?;
        let rules = agentcore::translate(&doc, rule_name)?;
        let base_rules = merge_rules(&mut base.value, &rules, source_name)?;
        remap = Some(Remap {
            base_name: source_name,
            base_rules,
            file: rule_name,
            doc,
            rules,
        });
    }
    let fix = |errors: ConfigErrors| match &remap {
        Some(r) => ConfigErrors(r.errors(errors.0)),
        None => errors,
    };
    let raw: raw::RawConfig = located::deserialize(&base, source_name).map_err(fix)?;
    let mut offline = Vec::new();
    let mut ctx = validate::Ctx::new(source_name, &base.positions, env);
    if options.offline {
        ctx = ctx.offline(&mut offline);
    }
    let config = validate::validate(raw, ctx, source_name).map_err(fix)?;
    let mut warnings = offline;
    warnings.extend(lint::warnings(&config, &base.positions, source_name));
    let warning_rules: Vec<Option<usize>> = warnings.iter().map(|w| rule_index(&w.path)).collect();
    let mut pairs: Vec<(ConfigError, Option<usize>)> = match &remap {
        Some(r) => r.errors(warnings).into_iter().zip(warning_rules).collect(),
        None => warnings.into_iter().zip(warning_rules).collect(),
    };
    // BASE's warnings first, then the rule file's; each in file order.
    pairs.sort_by_key(|(w, _)| (w.file != source_name, w.line, w.column));
    let (warnings, warning_rules) = pairs.into_iter().unzip();
    Ok(Checked {
        config,
        warnings,
        warning_rules,
    })
}

/// `rules[3].routeToTarget…` → 3.
fn rule_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("rules[")?;
    rest[..rest.find(']')?].parse().ok()
}

/// Appends the rule file's rules to BASE's `rules`; returns how many BASE had.
fn merge_rules(
    base: &mut serde_json::Value,
    rules: &[agentcore::TranslatedRule],
    source_name: &str,
) -> Result<usize, ConfigErrors> {
    let Some(root) = base.as_object_mut() else {
        return Err(ConfigError {
            file: source_name.to_owned(),
            line: 1,
            column: 1,
            path: String::new(),
            message: "expected a mapping at the top of the config".to_owned(),
        }
        .into());
    };
    let list = root
        .entry("rules")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    let Some(list) = list.as_array_mut() else {
        // BASE's own `rules` is malformed; let the ordinary load report it.
        return Ok(0);
    };
    let n = list.len();
    list.extend(rules.iter().map(|r| r.value.clone()));
    Ok(n)
}

/// Moves problems found in the merged config's `rules[n..]` back to the rule file.
struct Remap<'a> {
    base_name: &'a str,
    base_rules: usize,
    file: &'a str,
    doc: located::Located,
    rules: Vec<agentcore::TranslatedRule>,
}

impl Remap<'_> {
    fn errors(&self, errors: Vec<ConfigError>) -> Vec<ConfigError> {
        errors.into_iter().map(|e| self.error(e)).collect()
    }

    fn error(&self, mut e: ConfigError) -> ConfigError {
        e.message = self.message(&e.message);
        let Some(path) = self.file_path(&e.path) else {
            return e;
        };
        let pos = self.doc.positions.value(&path);
        ConfigError {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            path,
            message: e.message,
        }
    }

    /// The rule file's path for a merged path under one of its rules; `None` for BASE's paths.
    fn file_path(&self, path: &str) -> Option<String> {
        let i = rule_index(path)?;
        let rule = self.rules.get(i.checked_sub(self.base_rules)?)?;
        let rest = &path[path.find(']')? + 1..];
        Some(rule.file_path(rest.trim_start_matches('.')))
    }

    /// Paths quoted inside a message (`… already used by rules[0]`) are renamed the same way; a
    /// BASE rule is named with its file.
    fn message(&self, m: &str) -> String {
        let mut out = String::new();
        let mut rest = m;
        while let Some(at) = rest.find("rules[") {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "._[]".contains(c)))
                .unwrap_or(tail.len());
            let token = tail[..end].trim_end_matches('.');
            match self.file_path(token) {
                Some(p) => out.push_str(&format!(
                    "{}: {}",
                    self.file,
                    if p.is_empty() { "the rule" } else { &p }
                )),
                None => out.push_str(&format!("{}: {token}", self.base_name)),
            }
            rest = &tail[token.len()..];
        }
        out.push_str(rest);
        out
    }
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
