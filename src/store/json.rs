//! JSON document operations of the API machinery: merge patches (RFC 7386) and the three-way merge
//! `kubectl apply` does, so that re-applying a file changes what the file says and keeps what
//! controllers added (finalizers, labels, annotations).

use serde_json::{Map, Value};

/// Where `kubectl apply` keeps the configuration it applied last.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Applies a JSON merge patch (RFC 7386) to `target`.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("made an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The merge patch that turns `old` into `new` (lists and scalars are replaced whole, as in RFC 7386).
pub fn diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for k in o.keys() {
                if !n.contains_key(k) {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) if ov == nv => {}
                    Some(ov @ Value::Object(_)) if nv.is_object() => {
                        let d = diff(ov, nv);
                        if d.as_object().is_some_and(|m| !m.is_empty()) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    _ => {
                        patch.insert(k.clone(), nv.clone());
                    }
                }
            }
            Value::Object(patch)
        }
        (_, n) => n.clone(),
    }
}

/// `kubectl apply`'s three-way merge: the changes from the last applied configuration to `new`
/// applied to the live object.
pub fn three_way(live: &Value, last_applied: Option<&Value>, new: &Value) -> Value {
    let empty = Value::Object(Map::new());
    let patch = diff(last_applied.unwrap_or(&empty), new);
    let mut merged = live.clone();
    merge_patch(&mut merged, &patch);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc7386_examples() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge_patch(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
        let mut t = json!("x");
        merge_patch(&mut t, &json!({"b": 1}));
        assert_eq!(t, json!({"b": 1}));
    }

    #[test]
    fn diff_then_patch_gives_new() {
        let old = json!({"a": 1, "b": {"c": 2, "d": [1]}, "e": 3});
        let new = json!({"a": 1, "b": {"c": 5, "d": [1, 2]}, "f": 4});
        let mut t = old.clone();
        merge_patch(&mut t, &diff(&old, &new));
        assert_eq!(t, new);
    }

    #[test]
    fn three_way_keeps_what_others_added_and_removes_what_the_file_dropped() {
        let live = json!({"metadata": {"labels": {"mine": "1", "dropped": "x", "controller": "y"}, "finalizers": ["f"]}, "spec": {"a": 1}});
        let last = json!({"metadata": {"labels": {"mine": "1", "dropped": "x"}}, "spec": {"a": 1}});
        let new = json!({"metadata": {"labels": {"mine": "2"}}, "spec": {"a": 1, "b": 2}});
        let merged = three_way(&live, Some(&last), &new);
        assert_eq!(
            merged,
            json!({"metadata": {"labels": {"mine": "2", "controller": "y"}, "finalizers": ["f"]}, "spec": {"a": 1, "b": 2}})
        );
    }
}
