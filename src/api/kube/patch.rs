//! The patch formats of the Kubernetes API besides server-side apply: JSON patch (RFC 6902) and
//! strategic merge patch. JSON merge patch (RFC 7386) is the store's
//! ([`crate::store::json::merge_patch`]), one function for the API and the store.
//!
//! Pure functions over `serde_json::Value`. Every fallible function is atomic: on error the
//! document is left as it was. Error texts follow the wording of the API server (and of the
//! libraries it uses), so they read naturally inside a `Status` message.
//!
//! # Why these are hand-written
//! Strategic merge patch exists in no Rust crate (it follows the patch strategies of the core
//! kinds' Go types). JSON patch does: `json_patch::patch`, which kube brings in. It is not used
//! because it cannot keep what this engine keeps:
//! - The budget ([`json_patch`]; SECURITY.md, "objects a patch builds past any limit"): a patch
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

use crate::store::json::remove_members;
use serde_json::{Map, Value};

/// The most operations a JSON patch may hold (the API server's limit).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

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

// ---------------------------------------------------------------------------------------------
// JSON patch (RFC 6902)
// ---------------------------------------------------------------------------------------------

/// Applies a JSON patch (RFC 6902): `ops` is the array of operations (`add`, `remove`,
/// `replace`, `move`, `copy`, `test`). Paths are JSON pointers (RFC 6901, `~1` is `/`, `~0` is
/// `~`); `-` as the last token of an `add` (or of a `move`/`copy` destination) appends to an
/// array. All or nothing: on error `doc` is unchanged.
///
/// Malformed patches (not an array, an operation that is not an object) are
/// [`PatchError::BadRequest`]; more than [`MAX_JSON_PATCH_OPERATIONS`] operations is
/// [`PatchError::TooLarge`]; an operation that does not apply (missing path, failed `test`...)
/// is [`PatchError::Invalid`] with the API server's wording, e.g.
/// `testing value /spec/x failed: test failed`.
///
/// What the patch may build is bounded by `max_bytes`, the largest object the caller stores: the
/// document may not grow past twice that while the operations run (the result is checked
/// exactly by the caller), `copy` operations may copy at most `max_bytes` in all, and the
/// members and items operations shift inside objects and arrays are bounded too
/// ([`MAX_SHIFTED_ENTRIES`]). Past any of them: [`PatchError::TooLarge`]. So a patch's cost is
/// linear in its own size and the object's, whatever its operations.
pub fn json_patch(doc: &mut Value, ops: &Value, max_bytes: usize) -> Result<(), PatchError> {
    let Some(ops) = ops.as_array() else {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            go_type_name(ops)
        )));
    };
    if let Some(op) = ops.iter().find(|op| !op.is_object()) {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
            go_type_name(op)
        )));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {}, got {}",
            MAX_JSON_PATCH_OPERATIONS,
            ops.len()
        )));
    }
    let mut work = doc.clone();
    let mut budget = Budget {
        size: crate::api::kube::limits::json_len(&work),
        max_size: max_bytes.saturating_mul(2),
        copy_left: max_bytes,
        shifts_left: MAX_SHIFTED_ENTRIES,
        max_bytes,
    };
    for op in ops {
        apply_op(&mut work, op.as_object().expect("checked above"), &mut budget)?;
    }
    *doc = work;
    Ok(())
}

/// Object members and array items that the operations of one JSON patch may shift in all (each
/// insertion or removal in the middle of an array or an object moves those after it): about a
/// hundredth of a second of work, far beyond any patch a client makes, and what keeps thousands of
/// operations on the front of a long list from costing their product.
pub const MAX_SHIFTED_ENTRIES: usize = 4 << 20;

/// What is left of what one JSON patch may build and move (see [`json_patch`]).
struct Budget {
    /// The document's size as compact JSON, kept up to date as operations add and remove values
    /// (members' keys and punctuation estimated).
    size: usize,
    max_size: usize,
    copy_left: usize,
    shifts_left: usize,
    /// The caller's limit, for messages.
    max_bytes: usize,
}

impl Budget {
    fn grow(&mut self, added: usize, removed: usize) -> Result<(), PatchError> {
        self.size = (self.size + added).saturating_sub(removed);
        if self.size > self.max_size {
            return Err(PatchError::TooLarge(format!(
                "the JSON patch makes the object larger than {} bytes (the limit is {} bytes)",
                self.max_size, self.max_bytes
            )));
        }
        Ok(())
    }

    fn shift(&mut self, entries: usize) -> Result<(), PatchError> {
        self.shifts_left = self.shifts_left.checked_sub(entries).ok_or_else(|| {
            PatchError::TooLarge(format!(
                "the JSON patch shifts more than {MAX_SHIFTED_ENTRIES} members and items of its object in all"
            ))
        })?;
        Ok(())
    }

    /// The size of a value the patch brings (`added` from the patch itself, or copied), checked
    /// before it is cloned.
    fn size_of(&self, v: &Value) -> Result<usize, PatchError> {
        let room = self.max_size.saturating_sub(self.size);
        crate::api::kube::limits::json_len_within(v, room).ok_or_else(|| {
            PatchError::TooLarge(format!(
                "the JSON patch makes the object larger than {} bytes (the limit is {} bytes)",
                self.max_size, self.max_bytes
            ))
        })
    }
}

/// The bytes a member adds beside its value: its key, quotes, colon and comma (an estimate: keys
/// needing escapes are longer).
fn member_overhead(key: &str) -> usize {
    key.len() + 4
}

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

/// The tokens of a JSON pointer, `None` when it is not one (it does not start with `/`).
fn pointer_tokens(pointer: &str) -> Option<Vec<String>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let rest = pointer.strip_prefix('/')?;
    Some(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

/// An array index token: digits without a leading zero (RFC 6901).
fn parse_index(token: &str) -> Option<usize> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if token.len() > 1 && token.starts_with('0') {
        return None;
    }
    token.parse().ok()
}

fn resolve<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(parse_index(t)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn resolve_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => a.get_mut(parse_index(t)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The container holding the value `tokens` points at (`tokens` is not empty), if it is an
/// object or an array.
fn parent_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let parent = resolve_mut(doc, &tokens[..tokens.len() - 1])?;
    (parent.is_object() || parent.is_array()).then_some(parent)
}

fn op_str<'a>(op: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    op.get(field).and_then(Value::as_str)
}

fn apply_op(doc: &mut Value, op: &Map<String, Value>, budget: &mut Budget) -> Result<(), PatchError> {
    let kind = op_str(op, "op").unwrap_or("unknown");
    match kind {
        "add" | "remove" | "replace" | "move" | "copy" | "test" => {}
        other => return Err(invalid(format!("Unexpected kind: {other}"))),
    }
    let Some(path) = op_str(op, "path") else {
        return Err(invalid(format!(
            "{kind} operation failed to decode path: operation missing path field: {MISSING}"
        )));
    };
    let value = || op.get("value").ok_or_else(|| invalid(format!("{kind} operation, missing value field: {MISSING}")));
    let from = || {
        op_str(op, "from").ok_or_else(|| {
            invalid(format!("{kind} operation failed to decode from: operation, missing from field: {MISSING}"))
        })
    };
    match kind {
        "add" => {
            let v = value()?;
            let size = budget.size_of(v)?;
            op_add(doc, path, v.clone(), size, budget, |p| {
                format!("add operation does not apply: doc is missing path: \"{p}\": {MISSING}")
            })
        }
        "remove" => op_remove(doc, path, budget, true).map(|_| ()),
        "replace" => {
            let v = value()?;
            let size = budget.size_of(v)?;
            op_replace(doc, path, v.clone(), size, budget)
        }
        "move" => {
            let from = from()?;
            if from == path {
                // Moving a value onto itself changes nothing, but it must exist.
                return match pointer_tokens(from).and_then(|t| resolve(doc, &t).map(|_| ())) {
                    Some(()) => Ok(()),
                    None => Err(invalid(format!(
                        "move operation does not apply: doc is missing from path: {from}: {MISSING}"
                    ))),
                };
            }
            if path.starts_with(from) && path[from.len()..].starts_with('/') {
                return Err(invalid(format!(
                    "move operation does not apply: cannot move {from} into its own child {path}"
                )));
            }
            match pointer_tokens(from).filter(|t| !t.is_empty()) {
                Some(t) if resolve(doc, &t).is_some() => {}
                _ => {
                    return Err(invalid(format!(
                        "move operation does not apply: doc is missing from path: {from}: {MISSING}"
                    )));
                }
            }
            // The value moves whole, unmeasured (measuring it would cost its size at every move):
            // the document keeps its size, but for the keys.
            let v = op_remove(doc, from, budget, false)?;
            op_add(doc, path, v, 0, budget, |p| {
                format!("move operation does not apply: doc is missing destination path: {p}: {MISSING}")
            })
        }
        "copy" => {
            let from = from()?;
            let Some(source) = pointer_tokens(from).and_then(|t| resolve(doc, &t)) else {
                return Err(invalid(format!(
                    "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
                )));
            };
            // Measured before it is cloned: a copy of a copy of a copy... stops here.
            let size = crate::api::kube::limits::json_len_within(source, budget.copy_left).ok_or_else(|| {
                PatchError::TooLarge(format!("the JSON patch copies more than {} bytes in all", budget.max_bytes))
            })?;
            budget.copy_left -= size;
            let v = source.clone();
            op_add(doc, path, v, size, budget, |p| {
                format!("copy operation does not apply: doc is missing destination path: {p}: {MISSING}")
            })
        }
        "test" => {
            let expected = value()?;
            let Some(tokens) = pointer_tokens(path) else {
                return Err(invalid(format!("test operation does not apply: is missing path: {path}: {MISSING}")));
            };
            if !tokens.is_empty() && resolve(doc, &tokens[..tokens.len() - 1]).is_none() {
                return Err(invalid(format!("test operation does not apply: is missing path: {path}: {MISSING}")));
            }
            match resolve(doc, &tokens) {
                Some(actual) if json_eq(actual, expected) => Ok(()),
                _ => Err(invalid(format!("testing value {path} failed: test failed"))),
            }
        }
        _ => unreachable!("checked above"),
    }
}

/// Adds `v` (of `size` bytes) at `path`, replacing a member of the same name.
fn op_add(
    doc: &mut Value,
    path: &str,
    v: Value,
    size: usize,
    budget: &mut Budget,
    missing: impl Fn(&str) -> String,
) -> Result<(), PatchError> {
    let Some(tokens) = pointer_tokens(path) else {
        return Err(invalid(missing(path)));
    };
    if tokens.is_empty() {
        budget.size = 0;
        budget.grow(size, 0)?;
        *doc = v;
        return Ok(());
    }
    let last = tokens.last().expect("not empty");
    match parent_mut(doc, &tokens) {
        None => Err(invalid(missing(path))),
        Some(Value::Object(m)) => {
            let replaced = m.get(last.as_str()).map_or(0, |old| json_len_within_known(old) + member_overhead(last));
            budget.grow(size + member_overhead(last), replaced)?;
            m.insert(last.clone(), v);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" { Some(a.len()) } else { parse_index(last) };
            match idx {
                Some(i) if i <= a.len() => {
                    budget.shift(a.len() - i)?;
                    budget.grow(size + 1, 0)?;
                    a.insert(i, v);
                    Ok(())
                }
                Some(_) => Err(invalid(format!(
                    "error in add for path: '{path}': Unable to access invalid index: {last}: {INVALID_INDEX}"
                ))),
                None => Err(invalid(format!(
                    "error in add for path: '{path}': value was not a proper array index: '{last}'"
                ))),
            }
        }
        Some(_) => unreachable!("parent_mut returns containers"),
    }
}

/// The size of a value already in the document (bounded by the document's, which the budget
/// bounds).
fn json_len_within_known(v: &Value) -> usize {
    crate::api::kube::limits::json_len(v)
}

/// Removes the value at `path`; `measure`: the document shrinks by its size (a value that is
/// moved is not measured: the document keeps its size).
fn op_remove(doc: &mut Value, path: &str, budget: &mut Budget, measure: bool) -> Result<Value, PatchError> {
    let missing = || invalid(format!("remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"));
    let tokens = pointer_tokens(path).filter(|t| !t.is_empty()).ok_or_else(missing)?;
    let last = tokens.last().expect("not empty");
    let removed = match parent_mut(doc, &tokens) {
        None => return Err(missing()),
        Some(Value::Object(m)) => {
            if !m.contains_key(last.as_str()) {
                return Err(invalid(format!(
                    "error in remove for path: '{path}': Unable to remove nonexistent key: {last}: {MISSING}"
                )));
            }
            // Keeps the members' order: those after it shift (counted as all, an upper bound).
            budget.shift(m.len())?;
            let v = m.shift_remove(last.as_str()).expect("the key was just found");
            (v, member_overhead(last))
        }
        Some(Value::Array(a)) => match parse_index(last) {
            Some(i) if i < a.len() => {
                budget.shift(a.len() - i)?;
                (a.remove(i), 1)
            }
            _ => {
                return Err(invalid(format!(
                    "error in remove for path: '{path}': Unable to access invalid index: {last}: {INVALID_INDEX}"
                )));
            }
        },
        Some(_) => unreachable!("parent_mut returns containers"),
    };
    let (v, overhead) = removed;
    if measure {
        budget.grow(0, json_len_within_known(&v) + overhead)?;
    }
    Ok(v)
}

fn op_replace(doc: &mut Value, path: &str, v: Value, size: usize, budget: &mut Budget) -> Result<(), PatchError> {
    let Some(tokens) = pointer_tokens(path) else {
        return Err(invalid(format!("replace operation does not apply: doc is missing path: {path}: {MISSING}")));
    };
    if tokens.is_empty() {
        budget.size = 0;
        budget.grow(size, 0)?;
        *doc = v;
        return Ok(());
    }
    let last = tokens.last().expect("not empty");
    let missing_key = || invalid(format!("replace operation does not apply: doc is missing key: {path}: {MISSING}"));
    let slot = match parent_mut(doc, &tokens) {
        None => {
            return Err(invalid(format!("replace operation does not apply: doc is missing path: {path}: {MISSING}")));
        }
        Some(Value::Object(m)) => m.get_mut(last.as_str()),
        Some(Value::Array(a)) => parse_index(last).and_then(|i| a.get_mut(i)),
        Some(_) => unreachable!("parent_mut returns containers"),
    };
    let Some(slot) = slot else { return Err(missing_key()) };
    let old = json_len_within_known(slot);
    budget.grow(size, old)?;
    *slot = v;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

const BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";

/// How a list field merges under a strategic merge patch (its `patchStrategy` tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmpListStrategy {
    /// No strategy: the patch's list replaces the live one.
    Replace,
    /// `patchStrategy: merge` on a list of scalars: a set, union of live and patch.
    MergePrimitives,
    /// `patchStrategy: merge` with `patchMergeKey`: items with the same key merge.
    MergeByKey(&'static str),
}

/// The strategy of the list at `path` (field names from the object's root) for `kind`.
/// Only ObjectMeta's lists merge in the kinds served (plus Namespace status conditions);
/// every other list is replaced.
pub fn smp_list_strategy(kind: &str, path: &[&str]) -> SmpListStrategy {
    match (kind, path) {
        (_, ["metadata", "finalizers"]) => SmpListStrategy::MergePrimitives,
        (_, ["metadata", "ownerReferences"]) => SmpListStrategy::MergeByKey("uid"),
        ("Namespace", ["status", "conditions"]) => SmpListStrategy::MergeByKey("type"),
        _ => SmpListStrategy::Replace,
    }
}

/// Applies a strategic merge patch to an object of `kind` (ConfigMap, Secret, Namespace,
/// Lease, Event: the lists that merge are those of [`smp_list_strategy`]).
///
/// Maps merge recursively and `null` deletes, like a merge patch; lists replace unless their
/// strategy merges them. Directives: `$patch: replace|delete|merge` in maps (`merge` is a
/// no-op; `delete` removes the map) and in items of keyed lists (`replace` replaces the whole
/// list, `delete` removes the item with that key), `$deleteFromPrimitiveList/<field>`,
/// `$setElementOrder/<field>` and `$retainKeys`. Any other `$` key is an error. All or
/// nothing: on error `doc` is unchanged.
pub fn strategic_merge_patch(doc: &mut Value, patch: &Value, kind: &str) -> Result<(), PatchError> {
    let Value::Object(p) = patch else {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            go_type_name(patch)
        )));
    };
    let mut work = match doc {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let smp = Smp { kind };
    let mut path = Vec::new();
    if smp.merge_map(&mut work, p.clone(), &mut path)? == MapOutcome::Deleted {
        work = Map::new();
    }
    *doc = Value::Object(work);
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum MapOutcome {
    Kept,
    /// `$patch: delete`: the map goes away.
    Deleted,
}

struct Smp<'a> {
    kind: &'a str,
}

impl Smp<'_> {
    fn strategy(&self, path: &[String], field: &str) -> SmpListStrategy {
        let mut p: Vec<&str> = path.iter().map(String::as_str).collect();
        p.push(field);
        smp_list_strategy(self.kind, &p)
    }

    /// Merges `patch` into `original` (the map at `path`).
    fn merge_map(
        &self,
        original: &mut Map<String, Value>,
        mut patch: Map<String, Value>,
        path: &mut Vec<String>,
    ) -> Result<MapOutcome, PatchError> {
        if let Some(directive) = patch.shift_remove(DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => {
                    let mut fresh = Map::new();
                    if self.merge_map(&mut fresh, patch, path)? == MapOutcome::Deleted {
                        fresh = Map::new();
                    }
                    *original = fresh;
                    return Ok(MapOutcome::Kept);
                }
                Some("delete") => {
                    original.clear();
                    return Ok(MapOutcome::Deleted);
                }
                Some("merge") => {}
                _ => {
                    patch.insert(DIRECTIVE.to_string(), directive.clone());
                    return Err(invalid(format!(
                        "unknown patch type: {} in map: {}",
                        go_fmt(&directive),
                        go_fmt(&Value::Object(patch))
                    )));
                }
            }
        }

        if let Some(retain) = patch.shift_remove(RETAIN_KEYS) {
            let Some(retain) = retain.as_array() else {
                return Err(bad_request(BAD_RETAIN_KEYS));
            };
            let kept: std::collections::HashSet<&str> = retain.iter().filter_map(Value::as_str).collect();
            let keep = |k: &str| kept.contains(k);
            for (k, v) in &patch {
                if v.is_null() || k.starts_with(DELETE_FROM_PRIMITIVE_LIST) || k.starts_with(SET_ELEMENT_ORDER) {
                    continue;
                }
                if !keep(k) {
                    return Err(bad_request(BAD_RETAIN_KEYS));
                }
            }
            original.retain(|k, _| keep(k));
        }

        // $setElementOrder lists first: they merge their list and fix its order.
        let order_keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ELEMENT_ORDER)).cloned().collect();
        for key in order_keys {
            let order = patch.shift_remove(&key).expect("listed above");
            let field = &key[SET_ELEMENT_ORDER.len()..];
            let Value::Array(order) = order else {
                return Err(bad_request(BAD_SET_ELEMENT_ORDER));
            };
            if field.is_empty() {
                return Err(bad_request(BAD_SET_ELEMENT_ORDER));
            }
            self.set_element_order(original, &mut patch, field, &order, path)?;
        }

        // Deleted members first, in one pass (see `remove_members`): a deletion and a directive
        // on the same field cannot both be in one patch object.
        remove_members(
            original,
            patch.iter().filter(|(k, v)| v.is_null() && !k.starts_with('$')).map(|(k, _)| k.as_str()),
        );
        for (k, v) in patch {
            if let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                let Value::Array(gone) = v else {
                    return Err(bad_request(BAD_PRIMITIVE_LIST));
                };
                if field.is_empty() {
                    return Err(bad_request(BAD_PRIMITIVE_LIST));
                }
                if let Some(Value::Array(list)) = original.get_mut(field) {
                    let gone: std::collections::HashSet<String> = gone.iter().map(canonical).collect();
                    list.retain(|item| !gone.contains(&canonical(item)));
                }
                continue;
            }
            if k.starts_with('$') {
                return Err(bad_request(format!("unknown strategic merge patch directive: {k}")));
            }
            if v.is_null() {
                continue;
            }
            let strategy = self.strategy(path, &k);
            path.push(k.clone());
            let merged = match (original.get_mut(&k), v) {
                (Some(Value::Object(o)), Value::Object(p)) => {
                    let outcome = self.merge_map(o, p, path)?;
                    (outcome == MapOutcome::Deleted).then_some(None)
                }
                (Some(Value::Array(o)), Value::Array(p)) => {
                    let o = std::mem::take(o);
                    Some(Some(Value::Array(self.merge_list(o, p, strategy, path)?)))
                }
                (_, v) => Some(self.fresh(v, strategy, path)?),
            };
            path.pop();
            match merged {
                None => {}
                Some(None) => {
                    original.shift_remove(&k);
                }
                Some(Some(value)) => {
                    original.insert(k, value);
                }
            }
        }
        Ok(MapOutcome::Kept)
    }

    /// A patch value for a field the original lacks (or holds with another type): directives
    /// are processed against nothing. `None`: it deletes itself.
    fn fresh(&self, v: Value, strategy: SmpListStrategy, path: &mut Vec<String>) -> Result<Option<Value>, PatchError> {
        Ok(match v {
            Value::Object(p) => {
                let mut m = Map::new();
                match self.merge_map(&mut m, p, path)? {
                    MapOutcome::Deleted => None,
                    MapOutcome::Kept => Some(Value::Object(m)),
                }
            }
            Value::Array(p) => Some(Value::Array(self.merge_list(Vec::new(), p, strategy, path)?)),
            other => Some(other),
        })
    }

    fn merge_list(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: SmpListStrategy,
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        match strategy {
            SmpListStrategy::Replace => Ok(patch),
            SmpListStrategy::MergePrimitives => {
                if let Some(bad) = original.iter().chain(&patch).find(|v| v.is_array() || v.is_object()) {
                    return Err(invalid(if bad.is_array() {
                        "lists of lists are not supported".to_string()
                    } else {
                        format!(
                            "list element types are not identical: {}",
                            go_fmt(&Value::Array(original.iter().chain(&patch).cloned().collect()))
                        )
                    }));
                }
                let mut merged = original.clone();
                let mut present: std::collections::HashSet<String> = merged.iter().map(canonical).collect();
                for p in &patch {
                    if present.insert(canonical(p)) {
                        merged.push(p.clone());
                    }
                }
                Ok(enforce_order(merged, &patch, &original, None))
            }
            SmpListStrategy::MergeByKey(key) => {
                for item in original.iter().chain(&patch) {
                    if !item.is_object() {
                        return Err(invalid(format!(
                            "expected a map[string]interface {{}}, but received a {}",
                            go_type_name(item)
                        )));
                    }
                }
                let mut original = original;
                let mut plain = Vec::new();
                let mut replace = false;
                let mut deleted: std::collections::HashSet<String> = std::collections::HashSet::new();
                for item in patch {
                    let m = item.as_object().expect("checked");
                    match m.get(DIRECTIVE) {
                        None => plain.push(item),
                        Some(d) => match d.as_str() {
                            Some("delete") => {
                                let Some(kv) = m.get(key) else {
                                    return Err(no_merge_key(&item, key));
                                };
                                deleted.insert(canonical(kv));
                            }
                            Some("replace") => replace = true,
                            Some("merge") => {
                                return Err(invalid("merging lists cannot yet be specified in the patch"));
                            }
                            _ => {
                                return Err(invalid(format!(
                                    "unknown patch type: {} in map: {}",
                                    go_fmt(d),
                                    go_fmt(&item)
                                )));
                            }
                        },
                    }
                }
                if !deleted.is_empty() {
                    original.retain(|o| !o.get(key).is_some_and(|ov| deleted.contains(&canonical(ov))));
                }
                if replace {
                    // The list becomes the patch's plain items (their own directives processed).
                    let mut out = Vec::new();
                    for item in plain {
                        if let Some(v) = self.fresh(item, SmpListStrategy::Replace, path)? {
                            out.push(v);
                        }
                    }
                    return Ok(out);
                }
                for item in &plain {
                    if item.get(key).is_none() {
                        return Err(no_merge_key(item, key));
                    }
                }
                // Items by key (the first of equal keys, as a scan finds it); a deleted item is
                // a hole until the end, so that the others keep their places.
                let mut merged: Vec<Option<Value>> = original.iter().cloned().map(Some).collect();
                let mut by_key: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
                for (i, o) in original.iter().enumerate() {
                    if let Some(ov) = o.get(key) {
                        by_key.entry(canonical(ov)).or_insert(i);
                    }
                }
                for item in &plain {
                    let kv = canonical(item.get(key).expect("checked"));
                    let Value::Object(p) = item.clone() else { unreachable!("checked") };
                    match by_key.get(&kv).copied() {
                        Some(i) => {
                            let Some(Value::Object(o)) = &mut merged[i] else { unreachable!("checked") };
                            if self.merge_map(o, p, path)? == MapOutcome::Deleted {
                                merged[i] = None;
                                by_key.remove(&kv);
                            }
                        }
                        None => {
                            let mut m = Map::new();
                            if self.merge_map(&mut m, p, path)? == MapOutcome::Kept {
                                by_key.insert(kv, merged.len());
                                merged.push(Some(Value::Object(m)));
                            }
                        }
                    }
                }
                let merged = merged.into_iter().flatten().collect();
                Ok(enforce_order(merged, &plain, &original, Some(key)))
            }
        }
    }

    /// `$setElementOrder/<field>`: merges the patch's list for `field` (if any) into the
    /// original, then orders the items the order list names as it says, keeping the others
    /// where they were relative to them.
    fn set_element_order(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        field: &str,
        order: &[Value],
        path: &mut Vec<String>,
    ) -> Result<(), PatchError> {
        let strategy = self.strategy(path, field);
        let key = match strategy {
            SmpListStrategy::MergeByKey(k) => Some(k),
            _ => None,
        };
        let orig_list = match original.get(field) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => {
                return Err(invalid(format!("expected a []interface {{}}, but received a {}", go_type_name(other))));
            }
        };
        let patch_list = match patch.get(field) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(Value::Null) => None,
            Some(other) => {
                return Err(invalid(format!("expected a []interface {{}}, but received a {}", go_type_name(other))));
            }
        };
        if let Some(pl) = &patch_list {
            validate_order(pl, order, key)?;
        }
        path.push(field.to_string());
        let merged = match (orig_list.clone(), patch_list) {
            (None, None) => {
                path.pop();
                return Ok(());
            }
            (Some(o), None) => o,
            (o, Some(p)) => self.merge_list(o.unwrap_or_default(), p, strategy, path)?,
        };
        path.pop();
        patch.shift_remove(field);
        let ordered = enforce_order(merged, order, &orig_list.unwrap_or_default(), key);
        original.insert(field.to_string(), Value::Array(ordered));
        Ok(())
    }
}

fn no_merge_key(item: &Value, key: &str) -> PatchError {
    invalid(format!("map: {} does not contain declared merge key: {}", go_fmt(item), key))
}

/// Whether two list items are the same item: equal merge keys, or equal scalars.
fn same_item(a: &Value, b: &Value, key: Option<&str>) -> bool {
    match key {
        Some(k) => match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) => json_eq(x, y),
            _ => false,
        },
        None => json_eq(a, b),
    }
}

/// The identity of a list item for ordering: its merge key's value, or the item itself.
fn identity(item: &Value, key: Option<&str>) -> Option<String> {
    match key {
        Some(k) => item.get(k).map(canonical),
        None => Some(canonical(item)),
    }
}

/// Where each item identity first appears in `list`.
fn positions(list: &[Value], key: Option<&str>) -> std::collections::HashMap<String, usize> {
    let mut out = std::collections::HashMap::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        if let Some(id) = identity(item, key) {
            out.entry(id).or_insert(i);
        }
    }
    out
}

/// Orders a merged list: the items named in `wanted` come in `wanted`'s order, the others
/// (server-only items) keep their relative order from `server`; the two runs are interleaved
/// so that server-only items stay before the named items that followed them on the server.
/// Positions are looked up in maps: linear in the lists (and a sort).
fn enforce_order(merged: Vec<Value>, wanted: &[Value], server: &[Value], key: Option<&str>) -> Vec<Value> {
    let wanted_at = positions(wanted, key);
    let server_at = positions(server, key);
    let pos =
        |at: &std::collections::HashMap<String, usize>, v: &Value| identity(v, key).and_then(|id| at.get(&id).copied());
    // Each item with its place on the server.
    type Placed = Vec<(Option<usize>, Value)>;
    let (mut named, mut others): (Placed, Placed) =
        merged.into_iter().map(|v| (pos(&server_at, &v), v)).partition(|(_, v)| pos(&wanted_at, v).is_some());
    named.sort_by_cached_key(|(_, v)| pos(&wanted_at, v).unwrap_or(usize::MAX));
    others.sort_by_key(|(at, _)| at.unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(named.len() + others.len());
    let mut others = others.into_iter().peekable();
    let mut named = named.into_iter().peekable();
    loop {
        let take_other = match (others.peek(), named.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((a, _)), Some((b, _))) => matches!((a, b), (Some(a), Some(b)) if a < b),
        };
        let next = if take_other { others.next() } else { named.next() };
        out.extend(next.map(|(_, v)| v));
    }
    out
}

/// The patch's items must appear in the order list, in the same relative order.
fn validate_order(patch_list: &[Value], order: &[Value], key: Option<&str>) -> Result<(), PatchError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let relevant: Vec<&Value> = patch_list.iter().filter(|v| v.get(DIRECTIVE).is_none()).collect();
    let mut oi = 0;
    for item in relevant {
        if let Some(k) = key
            && item.get(k).is_none()
        {
            return Err(no_merge_key(item, k));
        }
        while oi < order.len() && !same_item(&order[oi], item, key) {
            oi += 1;
        }
        if oi >= order.len() {
            return Err(invalid(format!(
                "The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n",
                go_fmt(&Value::Array(patch_list.to_vec())),
                go_fmt(&Value::Array(order.to_vec()))
            )));
        }
        oi += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jp(doc: Value, ops: Value) -> Result<Value, PatchError> {
        let mut d = doc;
        json_patch(&mut d, &ops, crate::api::kube::limits::DEFAULT_MAX_OBJECT_BYTES).map(|()| d)
    }

    // RFC 6902, appendix A.

    #[test]
    fn rfc6902_a1_add_object_member() {
        let r = jp(json!({"foo": "bar"}), json!([{"op": "add", "path": "/baz", "value": "qux"}]));
        assert_eq!(r.unwrap(), json!({"baz": "qux", "foo": "bar"}));
    }

    #[test]
    fn rfc6902_a2_add_array_element() {
        let r = jp(json!({"foo": ["bar", "baz"]}), json!([{"op": "add", "path": "/foo/1", "value": "qux"}]));
        assert_eq!(r.unwrap(), json!({"foo": ["bar", "qux", "baz"]}));
    }

    #[test]
    fn rfc6902_a3_remove_object_member() {
        let r = jp(json!({"baz": "qux", "foo": "bar"}), json!([{"op": "remove", "path": "/baz"}]));
        assert_eq!(r.unwrap(), json!({"foo": "bar"}));
    }

    #[test]
    fn rfc6902_a4_remove_array_element() {
        let r = jp(json!({"foo": ["bar", "qux", "baz"]}), json!([{"op": "remove", "path": "/foo/1"}]));
        assert_eq!(r.unwrap(), json!({"foo": ["bar", "baz"]}));
    }

    #[test]
    fn rfc6902_a5_replace() {
        let r = jp(json!({"baz": "qux", "foo": "bar"}), json!([{"op": "replace", "path": "/baz", "value": "boo"}]));
        assert_eq!(r.unwrap(), json!({"baz": "boo", "foo": "bar"}));
    }

    #[test]
    fn rfc6902_a6_move_value() {
        let r = jp(
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
        );
        assert_eq!(r.unwrap(), json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}));
    }

    #[test]
    fn rfc6902_a7_move_array_element() {
        let r = jp(
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
        );
        assert_eq!(r.unwrap(), json!({"foo": ["all", "cows", "eat", "grass"]}));
    }

    #[test]
    fn rfc6902_a8_test_success() {
        let doc = json!({"baz": "qux", "foo": ["a", 2, "c"]});
        let r = jp(
            doc.clone(),
            json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}]),
        );
        assert_eq!(r.unwrap(), doc);
    }

    #[test]
    fn rfc6902_a9_test_error() {
        let e = jp(json!({"baz": "qux"}), json!([{"op": "test", "path": "/baz", "value": "bar"}])).unwrap_err();
        assert_eq!(e, PatchError::Invalid("testing value /baz failed: test failed".into()));
        assert_eq!(e.http_status(), 422);
    }

    #[test]
    fn rfc6902_a10_add_nested_member_object() {
        let r = jp(json!({"foo": "bar"}), json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]));
        assert_eq!(r.unwrap(), json!({"foo": "bar", "child": {"grandchild": {}}}));
    }

    #[test]
    fn rfc6902_a11_ignore_unrecognized_members() {
        let r = jp(json!({"foo": "bar"}), json!([{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}]));
        assert_eq!(r.unwrap(), json!({"foo": "bar", "baz": "qux"}));
    }

    #[test]
    fn rfc6902_a12_add_to_nonexistent_target() {
        let e = jp(json!({"foo": "bar"}), json!([{"op": "add", "path": "/baz/bat", "value": "qux"}])).unwrap_err();
        assert_eq!(e.message(), "add operation does not apply: doc is missing path: \"/baz/bat\": missing value");
    }

    #[test]
    fn rfc6902_a14_escape_ordering() {
        let doc = json!({"/": 9, "~1": 10});
        assert!(jp(doc.clone(), json!([{"op": "test", "path": "/~01", "value": 10}])).is_ok());
        assert!(jp(doc, json!([{"op": "test", "path": "/~1", "value": 9}])).is_ok());
    }

    #[test]
    fn rfc6902_a15_strings_are_not_numbers() {
        let e = jp(json!({"/": 9, "~1": 10}), json!([{"op": "test", "path": "/~01", "value": "10"}])).unwrap_err();
        assert_eq!(e.message(), "testing value /~01 failed: test failed");
    }

    #[test]
    fn rfc6902_a16_add_array_value() {
        let r = jp(json!({"foo": ["bar"]}), json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]));
        assert_eq!(r.unwrap(), json!({"foo": ["bar", ["abc", "def"]]}));
    }

    #[test]
    fn json_patch_is_atomic() {
        let mut doc = json!({"a": 1});
        let ops = json!([
            {"op": "add", "path": "/b", "value": 2},
            {"op": "remove", "path": "/missing"},
        ]);
        let e = json_patch(&mut doc, &ops, 1 << 20).unwrap_err();
        assert_eq!(
            e.message(),
            "error in remove for path: '/missing': Unable to remove nonexistent key: missing: missing value"
        );
        assert_eq!(doc, json!({"a": 1}));
    }

    #[test]
    fn json_patch_numbers_compare_as_numbers() {
        assert!(jp(json!({"n": 1}), json!([{"op": "test", "path": "/n", "value": 1.0}])).is_ok());
        assert!(
            jp(
                json!({"o": {"a": [1, {"b": 2}]}}),
                json!([{"op": "test", "path": "/o", "value": {"a": [1.0, {"b": 2}]}}])
            )
            .is_ok()
        );
    }

    #[test]
    fn json_patch_error_messages() {
        let doc = json!({"spec": {"list": [1, 2]}});
        let msg = |ops: Value| jp(doc.clone(), ops).unwrap_err().message().to_string();
        assert_eq!(
            msg(json!([{"op": "replace", "path": "/spec/x", "value": 1}])),
            "replace operation does not apply: doc is missing key: /spec/x: missing value"
        );
        assert_eq!(
            msg(json!([{"op": "replace", "path": "/nope/x", "value": 1}])),
            "replace operation does not apply: doc is missing path: /nope/x: missing value"
        );
        assert_eq!(
            msg(json!([{"op": "remove", "path": "/nope/x"}])),
            "remove operation does not apply: doc is missing path: \"/nope/x\": missing value"
        );
        assert_eq!(
            msg(json!([{"op": "remove", "path": "/spec/list/5"}])),
            "error in remove for path: '/spec/list/5': Unable to access invalid index: 5: invalid index referenced"
        );
        assert_eq!(
            msg(json!([{"op": "add", "path": "/spec/list/3", "value": 0}])),
            "error in add for path: '/spec/list/3': Unable to access invalid index: 3: invalid index referenced"
        );
        assert_eq!(
            msg(json!([{"op": "move", "from": "/spec/y", "path": "/z"}])),
            "move operation does not apply: doc is missing from path: /spec/y: missing value"
        );
        assert_eq!(
            msg(json!([{"op": "copy", "from": "/spec/y", "path": "/z"}])),
            "copy operation does not apply: doc is missing from path: /spec/y: missing value"
        );
        assert_eq!(
            msg(json!([{"op": "test", "path": "/a/b", "value": 1}])),
            "test operation does not apply: is missing path: /a/b: missing value"
        );
        assert_eq!(msg(json!([{"op": "frob", "path": "/a"}])), "Unexpected kind: frob");
        assert_eq!(msg(json!([{"op": "add", "path": "/a"}])), "add operation, missing value field: missing value");
        assert_eq!(
            msg(json!([{"op": "move", "from": "/spec", "path": "/spec/list/0"}])),
            "move operation does not apply: cannot move /spec into its own child /spec/list/0"
        );
    }

    #[test]
    fn json_patch_copy_append_and_root() {
        let r = jp(
            json!({"a": {"b": 1}, "l": [1]}),
            json!([
                {"op": "copy", "from": "/a", "path": "/c"},
                {"op": "add", "path": "/l/-", "value": 2},
                {"op": "add", "path": "/l/0", "value": 0},
                {"op": "replace", "path": "/c/b", "value": 5},
            ]),
        );
        assert_eq!(r.unwrap(), json!({"a": {"b": 1}, "l": [0, 1, 2], "c": {"b": 5}}));
        let r = jp(json!({"a": 1}), json!([{"op": "replace", "path": "", "value": {"b": 2}}]));
        assert_eq!(r.unwrap(), json!({"b": 2}));
        // "-" only appends; leading zeros are not indexes.
        assert!(jp(json!({"l": [1]}), json!([{"op": "replace", "path": "/l/-", "value": 2}])).is_err());
        assert!(jp(json!({"l": [1, 2]}), json!([{"op": "remove", "path": "/l/01"}])).is_err());
    }

    #[test]
    fn json_patch_bad_documents() {
        let mut d = json!({});
        let e = json_patch(&mut d, &json!({"op": "add"}), 1 << 20).unwrap_err();
        assert_eq!(
            e,
            PatchError::BadRequest("json: cannot unmarshal object into Go value of type jsonpatch.Patch".into())
        );
        let e = json_patch(&mut d, &json!(["add"]), 1 << 20).unwrap_err();
        assert_eq!(e.http_status(), 400);
        let many = Value::Array(vec![json!({"op": "test", "path": "", "value": {}}); MAX_JSON_PATCH_OPERATIONS + 1]);
        let e = json_patch(&mut d, &many, 1 << 20).unwrap_err();
        assert_eq!(e.message(), "The allowed maximum operations in a JSON patch is 10000, got 10001");
        assert_eq!(e.http_status(), 413);
    }

    #[test]
    fn json_patch_kubectl_csa_upgrade_shape() {
        // kubectl's managedFields upgrade: two replaces.
        let mut d = json!({"metadata": {"resourceVersion": "5", "managedFields": [{"manager": "a"}]}});
        let ops = json!([
            {"op": "replace", "path": "/metadata/managedFields", "value": [{"manager": "kubectl"}]},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"},
        ]);
        json_patch(&mut d, &ops, 1 << 20).unwrap();
        assert_eq!(d["metadata"]["managedFields"][0]["manager"], "kubectl");
    }

    // Strategic merge patch.

    fn smp(doc: Value, patch: Value, kind: &str) -> Result<Value, PatchError> {
        let mut d = doc;
        strategic_merge_patch(&mut d, &patch, kind).map(|()| d)
    }

    #[test]
    fn smp_maps_merge_and_null_deletes() {
        let r = smp(
            json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "data": {"k": "v"}}),
            json!({"metadata": {"labels": {"a": null, "c": "3"}}, "data": {"k2": "v2"}, "absent": null}),
            "ConfigMap",
        );
        assert_eq!(
            r.unwrap(),
            json!({"metadata": {"name": "x", "labels": {"b": "2", "c": "3"}}, "data": {"k": "v", "k2": "v2"}})
        );
    }

    #[test]
    fn smp_other_lists_replace() {
        let r = smp(
            json!({"spec": {"finalizers": ["kubernetes"]}}),
            json!({"spec": {"finalizers": ["other"]}}),
            "Namespace",
        );
        assert_eq!(r.unwrap(), json!({"spec": {"finalizers": ["other"]}}));
    }

    #[test]
    fn smp_finalizers_merge_as_a_set() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        // New items come before the server's (upstream's order when no order list is sent).
        let r = smp(doc.clone(), json!({"metadata": {"finalizers": ["c", "a"]}}), "Secret").unwrap();
        assert_eq!(r, json!({"metadata": {"finalizers": ["c", "a", "b"]}}));
        let r = smp(
            doc.clone(),
            json!({"metadata": {"$setElementOrder/finalizers": ["a", "b", "c"], "finalizers": ["c"]}}),
            "Secret",
        )
        .unwrap();
        assert_eq!(r, json!({"metadata": {"finalizers": ["a", "b", "c"]}}));
        let r = smp(doc, json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zz"]}}), "Secret").unwrap();
        assert_eq!(r, json!({"metadata": {"finalizers": ["b"]}}));
    }

    #[test]
    fn smp_set_element_order_primitives_upstream_case() {
        // Live [1,4,2], patch adds 3 with order [3,1,2]: the live-only 4 stays between 1 and 2.
        let r = smp(
            json!({"metadata": {"finalizers": ["1", "4", "2"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["3", "1", "2"], "finalizers": ["3"]}}),
            "ConfigMap",
        );
        assert_eq!(r.unwrap(), json!({"metadata": {"finalizers": ["3", "1", "4", "2"]}}));
        let r = smp(
            json!({"metadata": {"finalizers": ["1", "2", "3"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["2", "1"], "$deleteFromPrimitiveList/finalizers": ["3"]}}),
            "ConfigMap",
        );
        assert_eq!(r.unwrap(), json!({"metadata": {"finalizers": ["2", "1"]}}));
    }

    #[test]
    fn smp_owner_references_merge_by_uid() {
        let doc = json!({"metadata": {"ownerReferences": [
            {"uid": "1", "kind": "A", "name": "a"},
            {"uid": "2", "kind": "B", "name": "b", "controller": true},
        ]}});
        let r = smp(
            doc.clone(),
            json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": null, "name": "b2"}, {"uid": "3", "kind": "C", "name": "c"}]}}),
            "ConfigMap",
        )
        .unwrap();
        assert_eq!(
            r,
            json!({"metadata": {"ownerReferences": [
                {"uid": "1", "kind": "A", "name": "a"},
                {"uid": "2", "kind": "B", "name": "b2"},
                {"uid": "3", "kind": "C", "name": "c"},
            ]}})
        );
        let r = smp(doc.clone(), json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": "1"}]}}), "Lease")
            .unwrap();
        assert_eq!(
            r,
            json!({"metadata": {"ownerReferences": [{"uid": "2", "kind": "B", "name": "b", "controller": true}]}})
        );
        let r = smp(
            doc.clone(),
            json!({"metadata": {"ownerReferences": [{"$patch": "replace"}, {"uid": "9", "name": "z"}]}}),
            "Lease",
        )
        .unwrap();
        assert_eq!(r, json!({"metadata": {"ownerReferences": [{"uid": "9", "name": "z"}]}}));
        let e = smp(doc.clone(), json!({"metadata": {"ownerReferences": [{"name": "no-uid"}]}}), "Lease").unwrap_err();
        assert_eq!(e.message(), "map: map[name:no-uid] does not contain declared merge key: uid");
        let e =
            smp(doc, json!({"metadata": {"ownerReferences": [{"$patch": "merge", "uid": "1"}]}}), "Lease").unwrap_err();
        assert_eq!(e.message(), "merging lists cannot yet be specified in the patch");
    }

    #[test]
    fn smp_set_element_order_keyed_upstream_case() {
        let r = smp(
            json!({"metadata": {"ownerReferences": [{"uid": "1", "other": "a"}, {"uid": "2", "value": "2", "other": "b"}]}}),
            json!({"metadata": {
                "$setElementOrder/ownerReferences": [{"uid": "3"}, {"uid": "1"}, {"uid": "2"}],
                "ownerReferences": [{"uid": "3", "value": "3"}],
            }}),
            "ConfigMap",
        );
        assert_eq!(
            r.unwrap(),
            json!({"metadata": {"ownerReferences": [
                {"uid": "3", "value": "3"},
                {"uid": "1", "other": "a"},
                {"uid": "2", "value": "2", "other": "b"},
            ]}})
        );
    }

    #[test]
    fn smp_patch_directive_on_maps() {
        let doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1"}});
        let r =
            smp(doc.clone(), json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}), "ConfigMap").unwrap();
        assert_eq!(r, json!({"metadata": {"labels": {"c": "3"}}, "data": {"x": "1"}}));
        let r = smp(doc.clone(), json!({"metadata": {"labels": {"$patch": "delete"}}}), "ConfigMap").unwrap();
        assert_eq!(r, json!({"metadata": {}, "data": {"x": "1"}}));
        let r = smp(doc.clone(), json!({"data": {"$patch": "merge", "y": "2"}}), "ConfigMap").unwrap();
        assert_eq!(r, json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "data": {"x": "1", "y": "2"}}));
        let e = smp(doc.clone(), json!({"data": {"$patch": "frob", "a": 1}}), "ConfigMap").unwrap_err();
        assert_eq!(e.message(), "unknown patch type: frob in map: map[$patch:frob a:1]");
        let e = smp(doc.clone(), json!({"data": {"$frob": 1}}), "ConfigMap").unwrap_err();
        assert_eq!(e, PatchError::BadRequest("unknown strategic merge patch directive: $frob".into()));
        // Atomic: the failed patch left nothing behind.
        let mut d = doc.clone();
        assert!(
            strategic_merge_patch(&mut d, &json!({"data": {"y": "2"}, "metadata": {"$bad": 1}}), "ConfigMap").is_err()
        );
        assert_eq!(d, doc);
    }

    #[test]
    fn smp_retain_keys() {
        let doc = json!({"data": {"a": "1", "b": "2", "c": "3"}});
        let r = smp(doc.clone(), json!({"data": {"$retainKeys": ["a", "b"], "b": "x"}}), "ConfigMap").unwrap();
        assert_eq!(r, json!({"data": {"a": "1", "b": "x"}}));
        let e = smp(doc.clone(), json!({"data": {"$retainKeys": ["a"], "b": "x"}}), "ConfigMap").unwrap_err();
        assert_eq!(e, PatchError::BadRequest("invalid patch format of retainKeys".into()));
        let e = smp(doc, json!({"data": {"$retainKeys": "a"}}), "ConfigMap").unwrap_err();
        assert_eq!(e.http_status(), 400);
    }

    #[test]
    fn smp_kubectl_client_side_apply_patch() {
        // What kubectl apply sends for a ConfigMap whose key "a" was dropped and "b" changed.
        let doc = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{old}\n"}},
            "data": {"a": "1", "b": "1"},
        });
        let patch = json!({
            "data": {"a": null, "b": "2"},
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{new}\n"}},
        });
        let r = smp(doc, patch, "ConfigMap").unwrap();
        assert_eq!(r["data"], json!({"b": "2"}));
        assert_eq!(r["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"], "{new}\n");
    }

    #[test]
    fn smp_new_fields_have_directives_processed() {
        let r = smp(
            json!({"metadata": {"name": "x"}}),
            json!({"metadata": {"labels": {"a": "1", "b": null}, "finalizers": ["f"], "ownerReferences": [{"uid": "1"}]}}),
            "Secret",
        );
        assert_eq!(
            r.unwrap(),
            json!({"metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"], "ownerReferences": [{"uid": "1"}]}})
        );
    }

    #[test]
    fn smp_namespace_status_conditions_by_type() {
        let r = smp(
            json!({"status": {"phase": "Active", "conditions": [{"type": "A", "status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "B", "status": "False"}, {"type": "A", "status": "False"}]}}),
            "Namespace",
        );
        assert_eq!(
            r.unwrap(),
            json!({"status": {"phase": "Active", "conditions": [{"type": "B", "status": "False"}, {"type": "A", "status": "False"}]}})
        );
    }

    #[test]
    fn smp_rejects_non_object_patch() {
        let mut d = json!({});
        assert_eq!(strategic_merge_patch(&mut d, &json!([1]), "ConfigMap").unwrap_err().http_status(), 400);
    }
    #[test]
    fn long_lists_merge_in_linear_comparisons() {
        // A strategic merge patch of thousands of finalizers and owner references: items are
        // found through maps, not by scanning the list for each (n² comparisons before).
        let n = 4000usize;
        let finalizers: Vec<Value> = (0..n).map(|i| json!(format!("example.com/f{i}"))).collect();
        let owners: Vec<Value> = (0..n).map(|i| json!({"uid": format!("u{i}"), "name": format!("o{i}")})).collect();
        let doc = json!({"metadata": {"name": "x", "finalizers": finalizers, "ownerReferences": owners}});
        let mut reversed_f = finalizers.clone();
        reversed_f.reverse();
        let mut reversed_o = owners.clone();
        reversed_o.reverse();
        let patch = json!({"metadata": {
            "finalizers": reversed_f.iter().chain(&[json!("example.com/new")]).cloned().collect::<Vec<_>>(),
            "$setElementOrder/finalizers": reversed_f.iter().chain(&[json!("example.com/new")]).cloned().collect::<Vec<_>>(),
            "ownerReferences": reversed_o.iter().map(|o| json!({"uid": o["uid"], "name": "renamed"})).collect::<Vec<_>>(),
            "$deleteFromPrimitiveList/finalizers": (0..n / 2).map(|i| json!(format!("example.com/f{i}"))).collect::<Vec<_>>(),
        }});
        COMPARED.with(|c| c.set(0));
        let patched = smp(doc, patch, "ConfigMap").unwrap();
        let compared = COMPARED.with(|c| c.get());
        assert!(compared < 8 * n as u64, "{compared} comparisons for {n} items");
        assert_eq!(patched["metadata"]["ownerReferences"].as_array().unwrap().len(), n);
        assert!(patched["metadata"]["ownerReferences"].as_array().unwrap().iter().all(|o| o["name"] == "renamed"));
        let f = patched["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(f.len(), n + 1 - n / 2, "half deleted, one added");
        assert_eq!(f[0], json!(format!("example.com/f{}", n - 1)), "in the order asked for");
    }

    #[test]
    fn a_json_patch_builds_nothing_past_its_budget() {
        // 18 copies of a value into itself double it 18 times: 280 MB from a 1 KB object. The
        // copies stop at the budget, before the value is cloned.
        let doc = json!({"note": ["x".repeat(1000)]});
        let ops: Vec<Value> = (0..18).map(|_| json!({"op": "copy", "from": "/note", "path": "/note/-"})).collect();
        let mut d = doc.clone();
        let e = json_patch(&mut d, &Value::Array(ops), 1 << 20).unwrap_err();
        assert_eq!(e.http_status(), 413, "{e}");
        assert_eq!(d, doc, "all or nothing");
        // Adds that grow the object past twice the limit stop too, whatever the copies.
        let big = "y".repeat(300 << 10);
        let ops: Vec<Value> = (0..10).map(|i| json!({"op": "add", "path": format!("/k{i}"), "value": big})).collect();
        let e = json_patch(&mut d, &Value::Array(ops), 1 << 20).unwrap_err();
        assert!(e.message().contains("larger than 2097152 bytes"), "{e}");
        // Removing and adding back stays within it: the size follows the operations.
        let mut ops = Vec::new();
        for i in 0..20 {
            ops.push(json!({"op": "add", "path": "/big", "value": big}));
            ops.push(json!({"op": "remove", "path": "/big"}));
            ops.push(json!({"op": "add", "path": format!("/small{i}"), "value": i}));
        }
        json_patch(&mut d, &Value::Array(ops), 1 << 20).unwrap();
        // Thousands of removals from the front of a long list shift it each time: bounded.
        let mut d = json!({"l": (0..200_000).collect::<Vec<_>>()});
        let ops: Vec<Value> = (0..10_000).map(|_| json!({"op": "remove", "path": "/l/0"})).collect();
        let e = json_patch(&mut d, &Value::Array(ops), 4 << 20).unwrap_err();
        assert!(e.message().contains("shifts more than"), "{e}");
    }
}
