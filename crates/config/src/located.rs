//! YAML text → `serde_json::Value` plus the line:column of every key and value, and located serde
//! deserialization on top of it.
//!
//! Why a `Value` detour: serde alone knows *which field* failed (through `serde_path_to_error`) but
//! not *where* it is in the file; the YAML tree knows where but not what it means. Converting the
//! tree once and recording `path → position` on the way lets every later error — structural or
//! semantic — carry both. JSON is a subset of YAML 1.2, so JSON files take the same road.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use serde::de::DeserializeOwned;
use serde_json::{Map, Number, Value};
use serde_path_to_error::Segment;

use crate::error::{ConfigError, ConfigErrors};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

const START: Pos = Pos { line: 1, column: 1 };

/// Where each field path sits in the source. Paths look like `rules[2].routeToTarget.staticRoute`;
/// the root document is the empty path.
#[derive(Debug, Default)]
pub(crate) struct Positions {
    values: HashMap<String, Pos>,
    keys: HashMap<String, Pos>,
}

impl Positions {
    /// A problem (error or warning) of `file` at the value written at `path` (or its nearest
    /// written ancestor).
    pub fn problem(&self, file: &str, path: &str, message: String) -> ConfigError {
        let pos = self.value(path);
        ConfigError {
            file: file.to_owned(),
            line: pos.line,
            column: pos.column,
            path: path.to_owned(),
            message,
        }
    }

    /// The position of the value at `path`, or of its nearest written ancestor (a defaulted or
    /// missing field points at the mapping that should have held it).
    pub fn value(&self, path: &str) -> Pos {
        let mut p = path;
        loop {
            if let Some(pos) = self.values.get(p) {
                return *pos;
            }
            match parent(p) {
                Some(up) => p = up,
                None => return START,
            }
        }
    }

    /// Was a value written at exactly `path`?
    pub fn has(&self, path: &str) -> bool {
        self.values.contains_key(path)
    }

    /// The position of the key that introduces `path` (for "unknown key" errors), else the value.
    pub fn key(&self, path: &str) -> Pos {
        self.keys
            .get(path)
            .copied()
            .unwrap_or_else(|| self.value(path))
    }
}

/// `a.b[2].c` → `a.b[2]` → `a.b` → `a` → `` → None.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    if path.ends_with(']') {
        return path.rfind('[').map(|i| &path[..i]);
    }
    Some(path.rfind('.').map_or("", |i| &path[..i]))
}

pub(crate) fn join_key(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn join_index(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// A parsed document: its JSON value and where everything came from.
#[derive(Debug)]
pub(crate) struct Located {
    pub value: Value,
    pub positions: Positions,
}

fn error_at(file: &str, pos: Pos, path: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        file: file.to_string(),
        line: pos.line,
        column: pos.column,
        path: path.to_string(),
        message: message.into(),
    }
}

/// Parses YAML (or JSON) text. An empty document becomes an empty mapping.
pub(crate) fn parse(src: &str, file: &str) -> Result<Located, ConfigErrors> {
    let docs = MarkedYaml::load_from_str(src).map_err(|e| {
        let m = e.marker();
        let pos = Pos {
            line: m.line().max(1),
            column: m.col() + 1,
        };
        error_at(file, pos, "", format!("YAML syntax error: {}", e.info()))
    })?;
    if let Some(second) = docs.get(1) {
        return Err(error_at(
            file,
            pos_of(second),
            "",
            "expected a single YAML document, found a second one",
        )
        .into());
    }
    let mut positions = Positions::default();
    let mut errors = Vec::new();
    let value = match docs.first() {
        None => Value::Object(Map::new()),
        Some(doc) => {
            let mut conv = Converter {
                file,
                positions: &mut positions,
                errors: &mut errors,
            };
            match conv.convert(doc, "") {
                Value::Null => Value::Object(Map::new()),
                v => v,
            }
        }
    };
    if errors.is_empty() {
        Ok(Located { value, positions })
    } else {
        Err(ConfigErrors(errors))
    }
}

fn pos_of(node: &MarkedYaml<'_>) -> Pos {
    Pos {
        line: node.span.start.line().max(1),
        column: node.span.start.col() + 1,
    }
}

struct Converter<'a> {
    file: &'a str,
    positions: &'a mut Positions,
    errors: &'a mut Vec<ConfigError>,
}

impl Converter<'_> {
    fn convert(&mut self, node: &MarkedYaml<'_>, path: &str) -> Value {
        self.positions.values.insert(path.to_string(), pos_of(node));
        match &node.data {
            YamlData::Value(s) => self.scalar(s, node, path),
            // Only produced when early parsing is off; keep the text as written.
            YamlData::Representation(text, _, _) => Value::String(text.to_string()),
            YamlData::Sequence(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.convert(item, &join_index(path, i)))
                    .collect(),
            ),
            YamlData::Mapping(map) => {
                let mut out = Map::new();
                for (k, v) in map.iter() {
                    let Some(key) = key_text(k) else {
                        self.errors.push(error_at(
                            self.file,
                            pos_of(k),
                            path,
                            "mapping keys must be plain strings",
                        ));
                        continue;
                    };
                    let child = join_key(path, &key);
                    self.positions.keys.insert(child.clone(), pos_of(k));
                    let value = self.convert(v, &child);
                    out.insert(key, value);
                }
                Value::Object(out)
            }
            // `!!str 123` and friends: the core-schema tags were applied by the parser already.
            YamlData::Tagged(_, inner) => self.convert(inner, path),
            YamlData::Alias(_) | YamlData::BadValue => {
                self.errors.push(error_at(
                    self.file,
                    pos_of(node),
                    path,
                    "unsupported YAML value",
                ));
                Value::Null
            }
        }
    }

    fn scalar(&mut self, s: &Scalar<'_>, node: &MarkedYaml<'_>, path: &str) -> Value {
        match s {
            Scalar::Null => Value::Null,
            Scalar::Boolean(b) => Value::Bool(*b),
            Scalar::Integer(i) => Value::Number((*i).into()),
            Scalar::FloatingPoint(f) => match Number::from_f64(f.into_inner()) {
                Some(n) => Value::Number(n),
                None => {
                    self.errors.push(error_at(
                        self.file,
                        pos_of(node),
                        path,
                        "infinite and NaN numbers are not supported",
                    ));
                    Value::Null
                }
            },
            Scalar::String(t) => Value::String(t.to_string()),
        }
    }
}

/// Mapping keys are field names: strings, or scalars we can spell as strings (`200: x`).
fn key_text(k: &MarkedYaml<'_>) -> Option<String> {
    match &k.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Some(i.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Some(b.to_string()),
        YamlData::Representation(text, _, _) => Some(text.to_string()),
        YamlData::Tagged(_, inner) => key_text(inner),
        _ => None,
    }
}

/// Deserializes a parsed document into `T`, turning the first structural error (unknown key, wrong
/// type, missing field) into a located [`ConfigError`].
pub(crate) fn deserialize<T: DeserializeOwned>(
    located: &Located,
    file: &str,
) -> Result<T, ConfigErrors> {
    serde_path_to_error::deserialize::<_, T>(located.value.clone()).map_err(|e| {
        let path = render_path(e.path());
        let raw = e.inner().to_string();
        ConfigErrors(vec![structural_error(
            &located.positions,
            file,
            &path,
            &raw,
        )])
    })
}

fn render_path(path: &serde_path_to_error::Path) -> String {
    let mut out = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => out = join_index(&out, *index),
            Segment::Map { key } | Segment::Enum { variant: key } => out = join_key(&out, key),
            Segment::Unknown => {}
        }
    }
    out
}

/// Rewrites serde's wording into ours and picks the position: an unknown key points at the key, a
/// missing field at the mapping that lacks it, anything else at the offending value.
fn structural_error(positions: &Positions, file: &str, path: &str, raw: &str) -> ConfigError {
    if let Some(rest) = raw.strip_prefix("unknown field `") {
        if let Some((name, tail)) = rest.split_once('`') {
            // serde_path_to_error may or may not have pushed the key onto the path already.
            let full = if path == name || path.ends_with(&format!(".{name}")) {
                path.to_string()
            } else {
                join_key(path, name)
            };
            let expected = tail.trim_start_matches(", ");
            let message = if expected.is_empty() {
                "unknown key".to_string()
            } else {
                format!("unknown key; {expected}")
            };
            return error_at(file, positions.key(&full), &full, message);
        }
    }
    if let Some(rest) = raw.strip_prefix("missing field `") {
        if let Some((name, _)) = rest.split_once('`') {
            let full = join_key(path, name);
            return error_at(
                file,
                positions.value(path),
                &full,
                "required key is missing",
            );
        }
    }
    error_at(file, positions.value(path), path, raw)
}

/// See [`crate::from_yaml_str`].
pub(crate) fn from_str<T: DeserializeOwned>(src: &str, file: &str) -> Result<T, ConfigErrors> {
    let located = parse(src, file)?;
    deserialize(&located, file)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_key_and_value_positions() {
        let src = "server:\n  listen: 1.2.3.4:80\nrules:\n  - name: a\n    priority: 1\n";
        let l = parse(src, "f").unwrap();
        assert_eq!(
            l.positions.value("server.listen"),
            Pos {
                line: 2,
                column: 11
            }
        );
        assert_eq!(l.positions.key("server.listen"), Pos { line: 2, column: 3 });
        assert_eq!(
            l.positions.value("rules[0].priority"),
            Pos {
                line: 5,
                column: 15
            }
        );
        assert_eq!(l.positions.key("rules[0].name"), Pos { line: 4, column: 5 });
        // A missing field falls back to its nearest ancestor.
        assert_eq!(
            l.positions.value("server.admin"),
            Pos { line: 2, column: 3 }
        );
    }

    #[test]
    fn json_parses_with_positions() {
        let src = "{\n  \"a\": {\"b\": [1, \"x\"]},\n  \"c\":true\n}";
        let l = parse(src, "f.json").unwrap();
        assert_eq!(
            l.value,
            serde_json::json!({"a": {"b": [1, "x"]}, "c": true})
        );
        assert_eq!(l.positions.key("a"), Pos { line: 2, column: 3 });
        assert_eq!(
            l.positions.value("a.b[1]"),
            Pos {
                line: 2,
                column: 18
            }
        );
    }

    #[test]
    fn syntax_errors_are_located() {
        let err = parse("a: [1, 2\nb: 3\n", "bad.yaml").unwrap_err();
        assert_eq!(err.len(), 1);
        assert!(err.0[0].line >= 1);
        assert!(
            err.0[0].message.starts_with("YAML syntax error"),
            "{}",
            err.0[0].message
        );
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let err = parse("a: 1\na: 2\n", "dup.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "dup.yaml:2:1: YAML syntax error: duplicated key in mapping"
        );
    }

    #[test]
    fn empty_document_is_an_empty_mapping() {
        assert_eq!(parse("", "e").unwrap().value, serde_json::json!({}));
        assert_eq!(
            parse("# only a comment\n", "e").unwrap().value,
            serde_json::json!({})
        );
    }

    #[test]
    fn parent_paths() {
        assert_eq!(parent("a.b[2].c"), Some("a.b[2]"));
        assert_eq!(parent("a.b[2]"), Some("a.b"));
        assert_eq!(parent("a"), Some(""));
        assert_eq!(parent(""), None);
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Demo {
        #[allow(dead_code)]
        inner: Inner,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Inner {
        #[allow(dead_code)]
        count: u32,
        #[allow(dead_code)]
        items: Vec<String>,
    }

    #[test]
    fn unknown_key_points_at_the_key() {
        let src = "inner:\n  count: 1\n  items: []\n  colour: red\n";
        let err = from_str::<Demo>(src, "d.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "d.yaml:4:3: inner.colour: unknown key; expected `count` or `items`"
        );
    }

    #[test]
    fn missing_field_points_at_the_parent() {
        let err = from_str::<Demo>("inner:\n  count: 1\n", "d.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "d.yaml:2:3: inner.items: required key is missing"
        );
    }

    #[test]
    fn wrong_type_points_at_the_value() {
        let err =
            from_str::<Demo>("inner:\n  count: 1\n  items: [a, [b]]\n", "d.yaml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "d.yaml:3:14: inner.items[1]: invalid type: sequence, expected a string"
        );
    }
}
