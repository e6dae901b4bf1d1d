//! Field paths: one [`PathElement`] per step, their order (structured-merge-diff's), how
//! conflicts print them, and their FieldsV1 keys.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// A field of an object: `f:name`, printed `.name`.
    Field(String),
    /// An item of a keyed list, by its key fields sorted by name: `k:{"uid":"x"}`, printed
    /// `[uid="x"]`.
    Key(Vec<(String, Value)>),
    /// An item of a set: `v:"x"`, printed `[="x"]`.
    Value(Value),
    /// An item of a list by position: `i:0`, printed `[0]` (only read, never produced).
    Index(usize),
}

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// A total order on JSON values (numbers numerically, then strings, booleans, lists, maps,
/// null), as structured-merge-diff orders them.
fn value_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i.cmp(&j),
            _ => {
                let (i, j) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                i.partial_cmp(&j).unwrap_or(Ordering::Equal)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = value_cmp(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xk: Vec<&String> = x.keys().collect();
            let mut yk: Vec<&String> = y.keys().collect();
            xk.sort();
            yk.sort();
            for (p, q) in xk.iter().zip(&yk) {
                let c = p.cmp(q).then_with(|| value_cmp(&x[*p], &y[*q]));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xk.len().cmp(&yk.len())
        }
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

#[cfg(test)]
thread_local! {
    /// Path elements compared on this thread: what the tests of the cost of long lists count.
    pub(super) static COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        use PathElement::*;
        #[cfg(test)]
        COMPARED.with(|c| c.set(c.get() + 1));
        let rank = |p: &PathElement| match p {
            Field(_) => 0,
            Key(_) => 1,
            Value(_) => 2,
            Index(_) => 3,
        };
        match (self, other) {
            (Field(a), Field(b)) => a.cmp(b),
            (Key(a), Key(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let c = ka.cmp(kb).then_with(|| value_cmp(va, vb));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (Value(a), Value(b)) => value_cmp(a, b),
            (Index(a), Index(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

/// A value the way structured-merge-diff prints it in paths (strings quoted).
fn value_to_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::String(s) => serde_json::to_string(s).expect("strings serialize"),
        Value::Array(a) => format!("[{}]", a.iter().map(value_to_string).collect::<Vec<_>>().join(",")),
        Value::Object(m) => m.iter().map(|(k, v)| format!("{k}={}", value_to_string(v))).collect(),
        other => other.to_string(),
    }
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(keys) => {
                let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={}", value_to_string(v))).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(v) => write!(f, "[={}]", value_to_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl PathElement {
    /// The FieldsV1 key: `f:name`, `k:{"uid":"x"}`, `v:"x"`, `i:0`.
    pub fn to_fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(keys) => {
                let mut m = Map::new();
                for (k, v) in keys {
                    m.insert(k.clone(), v.clone());
                }
                format!("k:{}", serde_json::to_string(&Value::Object(m)).expect("values serialize"))
            }
            PathElement::Value(v) => format!("v:{}", serde_json::to_string(v).expect("values serialize")),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a FieldsV1 key.
    pub fn from_fields_v1_key(s: &str) -> Result<PathElement, KeyError> {
        let error = |reason| KeyError { key: s.to_string(), reason };
        let (kind, rest) = s.split_once(':').ok_or_else(|| error(KeyReason::NoPrefix))?;
        match kind {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "v" => serde_json::from_str(rest).map(PathElement::Value).map_err(|e| error(KeyReason::Json(e))),
            "k" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) if !m.is_empty() => {
                    let mut keys: Vec<(String, Value)> = m.into_iter().collect();
                    keys.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(PathElement::Key(keys))
                }
                Ok(_) => Err(error(KeyReason::NotAnObject)),
                Err(e) => Err(error(KeyReason::Json(e))),
            },
            "i" => rest.parse().map(PathElement::Index).map_err(|e| error(KeyReason::Index(e))),
            _ => Err(error(KeyReason::UnknownType(kind.to_string()))),
        }
    }
}

/// A FieldsV1 key that is not a path element.
#[derive(Debug, thiserror::Error)]
#[error("parsing key {key:?}")]
pub struct KeyError {
    key: String,
    #[source]
    reason: KeyReason,
}

/// What is wrong with a FieldsV1 key.
#[derive(Debug, thiserror::Error)]
pub enum KeyReason {
    #[error("path element must have a type prefix")]
    NoPrefix,
    #[error("unknown path element type {0:?}")]
    UnknownType(String),
    #[error("key must be a non-empty JSON object")]
    NotAnObject,
    /// The value (`v:`) or the keys (`k:`) are not JSON.
    #[error(transparent)]
    Json(serde_json::Error),
    #[error(transparent)]
    Index(std::num::ParseIntError),
}

/// A path printed as the API server prints it in conflicts: `.spec.x`,
/// `.metadata.ownerReferences[uid="u"]`, `.metadata.finalizers[="f"]`.
pub fn path_to_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::chain;

    #[test]
    fn bad_keys_say_which_and_why() {
        let error = |key: &str| chain(&PathElement::from_fields_v1_key(key).unwrap_err()).to_string();
        assert_eq!(error("x"), r#"parsing key "x": path element must have a type prefix"#);
        assert_eq!(error("q:1"), r#"parsing key "q:1": unknown path element type "q""#);
        assert_eq!(error("k:{}"), r#"parsing key "k:{}": key must be a non-empty JSON object"#);
        assert_eq!(error("i:x"), r#"parsing key "i:x": invalid digit found in string"#);
        assert_eq!(error("v:nope"), r#"parsing key "v:nope": expected ident at line 1 column 2"#);
    }
}
