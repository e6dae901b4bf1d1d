//! JSON patch (RFC 6902): the six operations on JSON pointers, all or nothing, and the [`Budget`]
//! that bounds what one patch may build, copy and shift before any value is cloned or moved.

use serde_json::{Map, Value};

use super::{PatchError, bad_request, go_type_name, invalid, json_eq};

/// The most operations a JSON patch may hold (the API server's limit).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

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
