//! `sidetrack check --rule FILE --config BASE`: a bare AgentCore Gateway rule body (the JSON that
//! `CreateGatewayRule` / `aws bedrock-agentcore-control create-gateway-rule` take, or what
//! `GetGatewayRule` returns) translated into one of our `rules` entries, with a map from every
//! translated field back to where it was written in FILE, so each problem is reported there.
//!
//! The shape accepted (docs/configuration.md, "AgentCore rule bodies"):
//! `{ priority, description?, conditions?: [ {matchModels: {anyOf: [{value, operator?}]}} |
//! {matchPrincipals: {anyOf: [{iamPrincipal: {arn, operator?}}]}} ], actions: [ {routeToTarget:
//! {staticRoute: {targetName, model?, fallback?}} | {weightedRoute: {trafficSplit: [{name,
//! weight, targetName, model?, fallback?}]}}} ] }`, where `fallback` is `{triggerOn?,
//! firstByteTimeoutMilliseconds?, circuitBreaker?: {mode}, targetFallback: [{targetName, model?,
//! triggerOn?, firstByteTimeoutMilliseconds?}]}` and may also sit beside `staticRoute`. A rule
//! already in our own shape (it has `routeToTarget` at the top) passes through unchanged. FILE may
//! hold one rule or an array of them.

use serde_json::{Map, Value};

use crate::error::{ConfigError, ConfigErrors};
use crate::located::{join_index, join_key, Located};

/// One rule of FILE in our shape, and where its fields were written.
pub(crate) struct TranslatedRule {
    pub value: Value,
    /// `(path in our rule, path in FILE)`: a problem at our path `p` is reported at the FILE path of
    /// the longest entry that is a prefix of `p`, plus the rest of `p`.
    pub map: Vec<(String, String)>,
    /// The rule's own path in FILE (`""` for a single rule, `[k]` in an array).
    pub root: String,
}

impl TranslatedRule {
    /// The FILE path of our rule-relative path `rel` (`""` is the rule itself).
    pub fn file_path(&self, rel: &str) -> String {
        let mut best: (&str, &str) = ("", &self.root);
        for (ours, theirs) in &self.map {
            let boundary = rel == ours
                || ours.is_empty()
                || (rel.starts_with(ours.as_str())
                    && matches!(rel.as_bytes().get(ours.len()), Some(b'.' | b'[')));
            if boundary && ours.len() >= best.0.len() {
                best = (ours, theirs);
            }
        }
        let rest = &rel[best.0.len()..];
        if best.1.is_empty() {
            rest.trim_start_matches('.').to_owned()
        } else {
            format!("{}{rest}", best.1)
        }
    }
}

/// Translates FILE's rule(s); every shape problem is reported at once, located in FILE.
pub(crate) fn translate(doc: &Located, file: &str) -> Result<Vec<TranslatedRule>, ConfigErrors> {
    let mut t = Translator {
        doc,
        file,
        errors: Vec::new(),
    };
    let mut out = Vec::new();
    match &doc.value {
        Value::Array(items) if !items.is_empty() => {
            for (k, item) in items.iter().enumerate() {
                if let Some(r) = t.rule(item, &join_index("", k)) {
                    out.push(r);
                }
            }
        }
        Value::Object(_) => {
            if let Some(r) = t.rule(&doc.value, "") {
                out.push(r);
            }
        }
        _ => t.err(
            "",
            "expected one rule (a JSON object with `priority` and `actions`) or an array of rules",
        ),
    }
    if t.errors.is_empty() {
        return Ok(out);
    }
    t.errors.sort_by_key(|e| (e.line, e.column));
    Err(ConfigErrors(t.errors))
}

struct Translator<'a> {
    doc: &'a Located,
    file: &'a str,
    errors: Vec<ConfigError>,
}

/// Keys of a rule that AgentCore's API returns or takes and that mean nothing for routing here.
const IGNORED_RULE_KEYS: &[&str] = &[
    "description",
    "clientToken",
    "gatewayArn",
    "gatewayIdentifier",
    "status",
    "createdAt",
    "updatedAt",
    "system",
];

impl Translator<'_> {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        let e = self.doc.positions.problem(self.file, path, message.into());
        self.errors.push(e);
    }

    fn unknown_key(&mut self, path: &str, expected: &str) {
        let pos = self.doc.positions.key(path);
        self.errors.push(ConfigError {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            path: path.to_owned(),
            message: format!("unknown key in an AgentCore rule; expected {expected}"),
        });
    }

    /// An object, or an error saying what was expected.
    fn object<'v>(
        &mut self,
        v: &'v Value,
        path: &str,
        what: &str,
    ) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            _ => {
                self.err(path, format!("expected {what}"));
                None
            }
        }
    }

    fn array<'v>(&mut self, v: &'v Value, path: &str, what: &str) -> Option<&'v Vec<Value>> {
        match v {
            Value::Array(a) => Some(a),
            _ => {
                self.err(path, format!("expected {what}"));
                None
            }
        }
    }

    fn rule(&mut self, v: &Value, path: &str) -> Option<TranslatedRule> {
        let obj = self.object(v, path, "a rule object")?;
        if obj.contains_key("routeToTarget") {
            // Already our shape (SPEC §4's JSON form): field paths are the same on both sides.
            return Some(TranslatedRule {
                value: v.clone(),
                map: Vec::new(),
                root: path.to_owned(),
            });
        }
        let mut out = Map::new();
        let mut map = Vec::new();
        for (key, value) in obj {
            let at = join_key(path, key);
            match key.as_str() {
                "priority" | "name" => {
                    out.insert(key.clone(), value.clone());
                    map.push((key.clone(), at));
                }
                // GetGatewayRule's id names the rule in logs and `explain`.
                "ruleId" => {
                    if !obj.contains_key("name") {
                        out.insert("name".into(), value.clone());
                        map.push(("name".into(), at));
                    }
                }
                "conditions" => self.conditions(value, &at, &mut out, &mut map),
                "actions" => self.actions(value, &at, &mut out, &mut map),
                k if IGNORED_RULE_KEYS.contains(&k) => {}
                _ => self.unknown_key(
                    &at,
                    "`priority`, `conditions`, `actions` (and `description`)",
                ),
            }
        }
        if !obj.contains_key("priority") {
            self.err(
                path,
                "`priority` is missing (1-1000000, unique among all rules)",
            );
        }
        if !obj.contains_key("actions") {
            self.err(path, "`actions` is missing (one `routeToTarget` action)");
        }
        Some(TranslatedRule {
            value: Value::Object(out),
            map,
            root: path.to_owned(),
        })
    }

    fn conditions(
        &mut self,
        v: &Value,
        path: &str,
        out: &mut Map<String, Value>,
        map: &mut Vec<(String, String)>,
    ) {
        let Some(items) = self.array(v, path, "a list of conditions") else {
            return;
        };
        for (c, cond) in items.iter().enumerate() {
            let cpath = join_index(path, c);
            let Some(obj) = self.object(cond, &cpath, "a condition object") else {
                continue;
            };
            if obj.len() != 1 {
                self.err(
                    &cpath,
                    "a condition holds exactly one of `matchModels`, `matchPrincipals`",
                );
                continue;
            }
            for (key, value) in obj {
                let at = join_key(&cpath, key);
                let (ours, leaf, default_op) = match key.as_str() {
                    "matchModels" => ("matchModels", "value", "StringLike"),
                    "matchPrincipals" => ("matchPrincipals", "arn", "StringEquals"),
                    "matchPaths" => {
                        self.err(
                            &at,
                            "`matchPaths` selects HTTP targets by request path; sidetrack routes \
                             inference requests by model and principal only, so it cannot load \
                             this condition",
                        );
                        continue;
                    }
                    _ => {
                        self.unknown_key(&at, "`matchModels` or `matchPrincipals`");
                        continue;
                    }
                };
                if out.contains_key(ours) {
                    self.err(
                        &at,
                        format!("a second `{ours}` condition; write all its values in one `anyOf`"),
                    );
                    continue;
                }
                if let Some(m) = self.any_of(value, &at, ours, leaf, default_op, map) {
                    out.insert(ours.to_owned(), m);
                }
            }
        }
    }

    /// `{anyOf: [{value|iamPrincipal: {arn}, operator?}]}` → `{operator, values}`.
    fn any_of(
        &mut self,
        v: &Value,
        path: &str,
        ours: &str,
        leaf: &str,
        default_op: &str,
        map: &mut Vec<(String, String)>,
    ) -> Option<Value> {
        let obj = self.object(v, path, "`{ \"anyOf\": [ ... ] }`")?;
        for key in obj.keys().filter(|k| *k != "anyOf") {
            self.unknown_key(&join_key(path, key), "`anyOf`");
        }
        let any_path = join_key(path, "anyOf");
        let Some(entries) = obj.get("anyOf") else {
            self.err(path, "`anyOf` is missing");
            return None;
        };
        let entries = self.array(entries, &any_path, "a list of entries")?;
        map.push((ours.to_owned(), path.to_owned()));
        map.push((format!("{ours}.values"), any_path.clone()));
        let mut values = Vec::new();
        let mut operator: Option<(String, String)> = None;
        for (i, entry) in entries.iter().enumerate() {
            let epath = join_index(&any_path, i);
            // matchPrincipals entries wrap the ARN in `iamPrincipal`.
            let (inner, ipath) = match entry.get("iamPrincipal") {
                Some(p) if leaf == "arn" => (p, join_key(&epath, "iamPrincipal")),
                _ => (entry, epath.clone()),
            };
            let (value, vpath, op) = match inner {
                Value::String(_) => (inner.clone(), ipath.clone(), None),
                Value::Object(m) => {
                    for key in m.keys().filter(|k| *k != leaf && *k != "operator") {
                        self.unknown_key(&join_key(&ipath, key), &format!("`{leaf}`, `operator`"));
                    }
                    let Some(value) = m.get(leaf) else {
                        self.err(&ipath, format!("`{leaf}` is missing"));
                        continue;
                    };
                    let op = m.get("operator").map(|o| {
                        (
                            o.as_str().unwrap_or_default().to_owned(),
                            join_key(&ipath, "operator"),
                        )
                    });
                    (value.clone(), join_key(&ipath, leaf), op)
                }
                _ => {
                    self.err(&ipath, format!("expected an object with `{leaf}`"));
                    continue;
                }
            };
            let op = op.unwrap_or_else(|| (default_op.to_owned(), epath.clone()));
            let like = op.0 == "StringLike";
            match &operator {
                None => {
                    map.push((format!("{ours}.operator"), op.1.clone()));
                    operator = Some(op);
                }
                Some((first, _)) if *first != op.0 => self.err(
                    &op.1,
                    format!(
                        "`{}` here but `{first}` on an earlier entry: sidetrack applies one \
                         operator to all of a condition's values; split the entries into two rules",
                        op.0
                    ),
                ),
                Some(_) => {}
            }
            if like && value.as_str().is_some_and(|s| s.contains('?')) {
                self.err(
                    &vpath,
                    "`?` wildcards are not supported (sidetrack's globs know `*` only)",
                );
            }
            map.push((format!("{ours}.values[{}]", values.len()), vpath));
            values.push(value);
        }
        let mut m = Map::new();
        if let Some((op, _)) = operator {
            m.insert("operator".into(), Value::String(op));
        }
        m.insert("values".into(), Value::Array(values));
        Some(Value::Object(m))
    }

    fn actions(
        &mut self,
        v: &Value,
        path: &str,
        out: &mut Map<String, Value>,
        map: &mut Vec<(String, String)>,
    ) {
        let Some(items) = self.array(v, path, "a list of actions") else {
            return;
        };
        if items.is_empty() {
            self.err(path, "needs one `routeToTarget` action");
        }
        for (a, action) in items.iter().enumerate() {
            let apath = join_index(path, a);
            let Some(obj) = self.object(action, &apath, "an action object") else {
                continue;
            };
            for (key, value) in obj {
                let at = join_key(&apath, key);
                match key.as_str() {
                    "routeToTarget" if out.contains_key("routeToTarget") => self.err(
                        &at,
                        "a second `routeToTarget` action; a rule routes one way",
                    ),
                    "routeToTarget" => {
                        if let Some(r) = self.route(value, &at, map) {
                            out.insert("routeToTarget".into(), r);
                        }
                    }
                    "configurationBundle" => self.err(
                        &at,
                        "configuration bundles are an AgentCore feature sidetrack does not have; \
                         remove this action",
                    ),
                    _ => self.unknown_key(&at, "`routeToTarget`"),
                }
            }
        }
    }

    fn route(&mut self, v: &Value, path: &str, map: &mut Vec<(String, String)>) -> Option<Value> {
        let obj = self.object(v, path, "a `routeToTarget` object")?;
        map.push(("routeToTarget".into(), path.to_owned()));
        let mut out = Map::new();
        let mut fallback: Option<(&Value, String)> = None;
        if let Some(f) = obj.get("fallback") {
            fallback = Some((f, join_key(path, "fallback")));
        }
        for (key, value) in obj {
            let at = join_key(path, key);
            match key.as_str() {
                "fallback" => {}
                "staticRoute" => {
                    let Some(s) =
                        self.object(value, &at, "`{ \"targetName\": ..., \"model\": ... }`")
                    else {
                        continue;
                    };
                    if let Some(f) = s.get("fallback") {
                        if fallback.is_some() {
                            self.err(
                                &join_key(&at, "fallback"),
                                "`fallback` is written twice (inside and beside `staticRoute`)",
                            );
                        }
                        fallback = Some((f, join_key(&at, "fallback")));
                    }
                    let dest =
                        self.destination(s, &at, "routeToTarget.staticRoute", &["fallback"], map);
                    out.insert("staticRoute".into(), dest);
                }
                "weightedRoute" => {
                    if let Some(w) = self.weighted(value, &at, map) {
                        out.insert("weightedRoute".into(), w);
                    }
                }
                _ => self.unknown_key(&at, "`staticRoute`, `weightedRoute` or `fallback`"),
            }
        }
        if let Some((f, fpath)) = fallback {
            if !out.contains_key("staticRoute") {
                self.err(
                    &fpath,
                    "`fallback` beside `routeToTarget` belongs to a `staticRoute`; a weighted \
                     route's fallbacks go on each `trafficSplit` entry",
                );
            }
            out.insert(
                "fallback".into(),
                self.fallback(f, &fpath, "routeToTarget.fallback", map),
            );
        }
        Some(Value::Object(out))
    }

    /// `{targetName, model?}` (plus `extra` keys handled by the caller) → `{target, model?}`.
    fn destination(
        &mut self,
        obj: &Map<String, Value>,
        path: &str,
        ours: &str,
        extra: &[&str],
        map: &mut Vec<(String, String)>,
    ) -> Value {
        map.push((ours.to_owned(), path.to_owned()));
        let mut out = Map::new();
        for (key, value) in obj {
            let at = join_key(path, key);
            match key.as_str() {
                "targetName" => {
                    out.insert("target".into(), value.clone());
                    map.push((format!("{ours}.target"), at));
                }
                "model" => {
                    out.insert("model".into(), value.clone());
                    map.push((format!("{ours}.model"), at));
                }
                k if extra.contains(&k) => {}
                _ => self.unknown_key(&at, "`targetName`, `model`"),
            }
        }
        if !out.contains_key("target") {
            self.err(path, "`targetName` is missing");
        }
        Value::Object(out)
    }

    fn weighted(
        &mut self,
        v: &Value,
        path: &str,
        map: &mut Vec<(String, String)>,
    ) -> Option<Value> {
        let obj = self.object(v, path, "`{ \"trafficSplit\": [ ... ] }`")?;
        for key in obj.keys().filter(|k| *k != "trafficSplit") {
            self.unknown_key(&join_key(path, key), "`trafficSplit`");
        }
        let split_path = join_key(path, "trafficSplit");
        let Some(split) = obj.get("trafficSplit") else {
            self.err(path, "`trafficSplit` is missing");
            return None;
        };
        let split = self.array(split, &split_path, "a list of weighted targets")?;
        map.push(("routeToTarget.weightedRoute".into(), path.to_owned()));
        map.push((
            "routeToTarget.weightedRoute.legs".into(),
            split_path.clone(),
        ));
        let mut legs = Vec::new();
        for (i, leg) in split.iter().enumerate() {
            let lpath = join_index(&split_path, i);
            let Some(l) = self.object(leg, &lpath, "a weighted target object") else {
                continue;
            };
            let ours = format!("routeToTarget.weightedRoute.legs[{i}]");
            let mut out = match self.destination(
                l,
                &lpath,
                &ours,
                &["weight", "fallback", "name", "description", "metadata"],
                map,
            ) {
                Value::Object(m) => m,
                _ => Map::new(),
            };
            if let Some(w) = l.get("weight") {
                out.insert("weight".into(), w.clone());
                map.push((format!("{ours}.weight"), join_key(&lpath, "weight")));
            } else {
                self.err(&lpath, "`weight` is missing");
            }
            if let Some(f) = l.get("fallback") {
                let fpath = join_key(&lpath, "fallback");
                let fb = self.fallback(f, &fpath, &format!("{ours}.fallback"), map);
                out.insert("fallback".into(), fb);
            }
            legs.push(Value::Object(out));
        }
        let mut out = Map::new();
        out.insert("legs".into(), Value::Array(legs));
        Some(Value::Object(out))
    }

    /// A fallback block: the same keys as ours, except that `targetFallback` entries name their
    /// target `targetName`. Anything else is copied, so our own checks report it.
    fn fallback(
        &mut self,
        v: &Value,
        path: &str,
        ours: &str,
        map: &mut Vec<(String, String)>,
    ) -> Value {
        map.push((ours.to_owned(), path.to_owned()));
        let mut out = v.clone();
        let Some(hops) = out.get_mut("targetFallback").and_then(Value::as_array_mut) else {
            return out;
        };
        for (i, hop) in hops.iter_mut().enumerate() {
            let Some(h) = hop.as_object_mut() else {
                continue;
            };
            let hpath = format!("{path}.targetFallback[{i}]");
            map.push((format!("{ours}.targetFallback[{i}]"), hpath.clone()));
            if let Some(name) = h.remove("targetName") {
                if h.contains_key("target") {
                    self.err(&hpath, "write `targetName` or `target`, not both");
                }
                h.insert("target".into(), name);
                map.push((
                    format!("{ours}.targetFallback[{i}].target"),
                    format!("{hpath}.targetName"),
                ));
            }
        }
        out
    }
}
