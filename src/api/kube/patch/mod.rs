//! The patch formats of the Kubernetes API besides server-side apply:
//!
//! * [`json_patch()`] (`json_patch.rs`): JSON patch (RFC 6902), under a budget of what it may build.
//! * [`strategic_merge_patch`] (`strategic.rs`): strategic merge patch, its directives and list
//!   strategies.
//!
//! Here: [`PatchError`], shared by both, and the value helpers they (and apply) share:
//! [`json_eq`], [`canonical`], and Go's names and printing of decoded values.
//!
//! JSON merge patch (RFC 7386) is the store's ([`crate::store::json::merge_patch`]), one function
//! for the API and the store.
//!
//! Pure functions over `serde_json::Value`. Every fallible function is atomic: on error the
//! document is left as it was. Error texts follow the wording of the API server (and of the
//! libraries it uses), so they read naturally inside a `Status` message.
//!
//! # Why these are hand-written
//! Strategic merge patch exists in no Rust crate (it follows the patch strategies of the core
//! kinds' Go types). JSON patch does: `json_patch::patch`, which kube brings in. It is not used
//! because it cannot keep what this engine keeps:
//! - The budget ([`json_patch()`]; SECURITY.md, "objects a patch builds past any limit"): a patch
//!   of a few kilobytes can copy a large subtree thousands of times or insert at the front of a
//!   long list again and again. Here each operation's growth, copy and shift is checked before the
//!   value is cloned or moved. The crate takes the whole list and clones a `copy`'s source as it
//!   applies it, with no hook in between; checking ahead of it, one operation per call, would mean
//!   resolving every pointer ourselves (the engine again) and losing its undo on error.
//! - Member order: its `remove` drops an object member with `Map::remove`, which under serde_json's
//!   `preserve_order` moves the last member into its place, so removing one key would reorder the
//!   object; here the others stay where they were, as they do through the API server.
//! - `test` compares numbers by value (`1` equals `1.0`, as the API server decodes both to the same
//!   number); the crate compares `Value`s, where they differ.

mod json_patch;
mod strategic;

use serde_json::Value;

pub use json_patch::json_patch;
pub use strategic::strategic_merge_patch;

/// Why a patch could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed: answer 400 (BadRequest).
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well formed but does not apply to this object: answer 422 (Invalid).
    #[error("{0}")]
    Invalid(String),
    /// Too many JSON patch operations: answer 413 (RequestEntityTooLarge).
    #[error("{0}")]
    TooLarge(String),
}

impl PatchError {
    /// The HTTP status code the API server answers this error with.
    pub fn http_status(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
            PatchError::TooLarge(_) => 413,
        }
    }

    /// The message, for `Status.message`.
    pub fn message(&self) -> &str {
        match self {
            PatchError::BadRequest(m) | PatchError::Invalid(m) | PatchError::TooLarge(m) => m,
        }
    }
}

fn invalid(msg: impl Into<String>) -> PatchError {
    PatchError::Invalid(msg.into())
}

fn bad_request(msg: impl Into<String>) -> PatchError {
    PatchError::BadRequest(msg.into())
}

// ---------------------------------------------------------------------------------------------
// JSON value helpers
// ---------------------------------------------------------------------------------------------

/// Deep equality of JSON values where numbers compare as numbers (`1 == 1.0`), objects compare
/// regardless of key order and arrays compare element by element.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    #[cfg(test)]
    COMPARED.with(|c| c.set(c.get() + 1));
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(i), Some(j)) = (x.as_i64(), y.as_i64()) {
                i == j
            } else if let (Some(i), Some(j)) = (x.as_u64(), y.as_u64()) {
                i == j
            } else {
                match (x.as_f64(), y.as_f64()) {
                    (Some(i), Some(j)) => i == j,
                    _ => false,
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
thread_local! {
    /// Values compared on this thread: what the tests of the cost of long lists count.
    static COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The name Go's JSON decoder gives a JSON type in its messages.
pub(super) fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value printed the way Go's `%v` prints the decoded `interface{}` (used in messages that
/// upstream builds that way, e.g. `map[name:x] does not contain declared merge key: uid`).
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys.iter().map(|k| format!("{}:{}", k, go_fmt(&m[*k]))).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// A value written so that two values are [`json_eq`] exactly when their texts are equal
/// (numbers as numbers, object keys sorted): the key of a set or a keyed list item in a hash map,
/// so that merging lists costs linear time rather than an item-by-item scan per item.
/// (Integers past 2^53 that equal a float only after rounding are the one case it tells apart.)
pub fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    out.push_str(&i.to_string());
                } else if let Some(u) = n.as_u64() {
                    out.push_str(&u.to_string());
                } else {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    if f.fract() == 0.0 && f.abs() < 9.0e15 {
                        out.push_str(&(f as i64).to_string());
                    } else {
                        out.push_str(&format!("{f:e}"));
                    }
                }
            }
            Value::Array(a) => {
                out.push('[');
                for (i, item) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(v, &mut out);
    out
}
