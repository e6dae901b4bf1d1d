//! Label and field selectors, as the API server parses and matches them (`?labelSelector=`,
//! `?fieldSelector=`).
//!
//! Label selectors take the whole grammar: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
//! `k` (exists), `!k` (does not exist), `k>N`, `k<N`, joined by commas. Field selectors take
//! `=`, `==` and `!=` over the fields the API server offers for every kind (`metadata.name`,
//! `metadata.namespace`) and, for Events, the `involvedObject.*` fields `kubectl describe` asks for;
//! anything else is refused the way the API server refuses it.

use serde_json::Value;

/// Why a label or field selector does not parse, in the API server's words (a 400's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of up to 63 characters.
fn check_key(key: &str) -> Result<(), SelectorError> {
    let name = key.rsplit_once('/').map_or(
        key,
        |(prefix, name)| {
            if prefix.is_empty() || prefix.len() > 253 { "" } else { name }
        },
    );
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label key {key:?}: a qualified name must be 63 characters or less"
        )))
    }
}

fn check_value(value: &str) -> Result<(), SelectorError> {
    let ok = value.is_empty()
        || (value.len() <= 63
            && value.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err(SelectorError(format!(
            "unable to parse requirement: invalid label value: {value:?}: must be 63 characters or less and consist of alphanumerics, '-', '_' or '.'"
        )))
    }
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(LabelSelector::default());
        }
        let mut reqs = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                return Err(SelectorError(format!("unable to parse requirement: found empty term in {text:?}")));
            }
            reqs.push(parse_requirement(term)?);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.0.iter().all(|r| {
            let value = labels.get(&r.key).and_then(Value::as_str);
            match (&r.op, value) {
                (Op::Equals(v), Some(x)) => x == v,
                (Op::Equals(_), None) => false,
                (Op::NotEquals(v), x) => x != Some(v.as_str()),
                (Op::In(vs), Some(x)) => vs.iter().any(|v| v == x),
                (Op::In(_), None) => false,
                (Op::NotIn(vs), x) => x.is_none_or(|x| !vs.iter().any(|v| v == x)),
                (Op::Exists, x) => x.is_some(),
                (Op::DoesNotExist, x) => x.is_none(),
                (Op::GreaterThan(n), Some(x)) => x.parse::<i64>().is_ok_and(|x| x > *n),
                (Op::LessThan(n), Some(x)) => x.parse::<i64>().is_ok_and(|x| x < *n),
                (Op::GreaterThan(_) | Op::LessThan(_), None) => false,
            }
        })
    }
}

fn parse_set(rest: &str, term: &str) -> Result<Vec<String>, SelectorError> {
    let inner =
        rest.trim().strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or_else(|| {
            SelectorError(format!("unable to parse requirement: {term:?}: a set must be in parentheses"))
        })?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    for v in &values {
        check_value(v)?;
    }
    Ok(values)
}

fn parse_requirement(term: &str) -> Result<Requirement, SelectorError> {
    if let Some(key) = term.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(Requirement { key: key.to_string(), op: Op::DoesNotExist });
    }
    // `k in (..)` and `k notin (..)`: the key ends at the first space.
    if let Some((key, rest)) = term.split_once(char::is_whitespace) {
        let rest = rest.trim_start();
        let (op, set) = if let Some(set) = rest.strip_prefix("notin") {
            ("notin", set)
        } else if let Some(set) = rest.strip_prefix("in") {
            ("in", set)
        } else {
            ("", rest)
        };
        if !op.is_empty() && set.trim_start().starts_with('(') {
            check_key(key)?;
            let values = parse_set(set, term)?;
            let op = if op == "in" { Op::In(values) } else { Op::NotIn(values) };
            return Ok(Requirement { key: key.to_string(), op });
        }
    }
    for (token, make) in [
        ("!=", (|v: String| Op::NotEquals(v)) as fn(String) -> Op),
        ("==", |v| Op::Equals(v)),
        ("=", |v| Op::Equals(v)),
    ] {
        if let Some((key, value)) = term.split_once(token) {
            let (key, value) = (key.trim(), value.trim());
            check_key(key)?;
            check_value(value)?;
            return Ok(Requirement { key: key.to_string(), op: make(value.to_string()) });
        }
    }
    for (token, greater) in [(">", true), ("<", false)] {
        if let Some((key, value)) = term.split_once(token) {
            let key = key.trim();
            check_key(key)?;
            let n: i64 = value.trim().parse().map_err(|_| {
                SelectorError(format!("unable to parse requirement: {term:?}: {value:?} is not an integer"))
            })?;
            let op = if greater { Op::GreaterThan(n) } else { Op::LessThan(n) };
            return Ok(Requirement { key: key.to_string(), op });
        }
    }
    check_key(term)?;
    Ok(Requirement { key: term.to_string(), op: Op::Exists })
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// `fields`: the field labels the kind supports besides `metadata.name` and `metadata.namespace`.
    pub fn parse(text: &str, fields: &[&str]) -> Result<FieldSelector, SelectorError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(FieldSelector::default());
        }
        let mut terms = Vec::new();
        for term in text.split(',') {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError(format!("invalid selector: '{text}'; can't understand '{term}'")));
            };
            let field = field.trim();
            if !["metadata.name", "metadata.namespace"].contains(&field) && !fields.contains(&field) {
                return Err(SelectorError(format!("field label not supported: {field}")));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The name an `metadata.name=` term pins, if any (a watch of one object).
    pub fn name(&self) -> Option<&str> {
        self.0.iter().find(|(f, eq, _)| f == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, want)| {
            let mut v = object;
            for part in field.split('.') {
                v = &v[part];
            }
            let have = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (have == *want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labeled(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_selectors_match_as_the_api_server_matches_them() {
        let obj = labeled(json!({"env": "prod", "tier": "web", "n": "5"}));
        for (sel, want) in [
            ("", true),
            ("env=prod", true),
            ("env==prod", true),
            ("env!=prod", false),
            ("env!=dev", true),
            ("missing!=x", true),
            ("env in (dev, prod)", true),
            ("env notin (dev,prod)", false),
            ("missing notin (a)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("env=prod,tier=db", false),
            ("env=prod,tier in (web)", true),
            ("n>4", true),
            ("n<5", false),
            ("agent-install.openshift.io/bmh", false),
        ] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&obj), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_refused() {
        for bad in ["env=prod,", "env in prod", "=x", "a b c", "env=pr od", "n>x", "-bad"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_take_the_metadata_fields_and_refuse_others() {
        let obj = labeled(json!({}));
        assert!(FieldSelector::parse("metadata.name=a", &[]).unwrap().matches(&obj));
        assert!(!FieldSelector::parse("metadata.name!=a", &[]).unwrap().matches(&obj));
        assert!(FieldSelector::parse("metadata.namespace==ns,metadata.name=a", &[]).unwrap().matches(&obj));
        assert_eq!(FieldSelector::parse("metadata.name=a", &[]).unwrap().name(), Some("a"));
        let refused = FieldSelector::parse("spec.approved=true", &[]).unwrap_err();
        assert_eq!(refused.0, "field label not supported: spec.approved");
        let event = json!({"involvedObject": {"name": "x", "kind": "Agent"}});
        let s = FieldSelector::parse(
            "involvedObject.name=x,involvedObject.kind=Agent",
            &["involvedObject.name", "involvedObject.kind"],
        );
        assert!(s.unwrap().matches(&event));
    }
}
