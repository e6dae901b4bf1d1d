//! JSON document operations of the API machinery: merge patches (RFC 7386) and the three-way merge
//! `kubectl apply` does, so that re-applying a file changes what the file says and keeps what
//! controllers added (finalizers, labels, annotations).

use serde_json::{Map, Value};

/// Where `kubectl apply` keeps the configuration it applied last.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Applies a JSON merge patch (RFC 7386): objects merge recursively, `null` removes a member,
/// anything else (arrays included) replaces the target. Cannot fail. The one implementation in the
/// crate: the API server's merge patches (`api::kube::patch`), `kubectl apply`'s three-way merge
/// below and the admission defaults all use it.
///
/// Hand-written although `json_patch::merge` (through kube) does the same: that one removes members
/// with `Map::remove`, which under serde_json's `preserve_order` moves the last member into the
/// hole, so a patch that deletes a key would reorder the object users read back. Here the members
/// left keep their order, as they do through the API server.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object");
    remove_members(t, p.iter().filter(|(_, v)| v.is_null()).map(|(k, _)| k.as_str()));
    for (k, v) in p {
        if !v.is_null() {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Removes the members named, keeping the others' order, in one pass over the map (removing them
/// one by one would shift the members after each: quadratic in a patch of many nulls).
pub fn remove_members<'k>(target: &mut Map<String, Value>, keys: impl Iterator<Item = &'k str>) {
    let gone: std::collections::HashSet<&str> = keys.collect();
    match gone.len() {
        0 => {}
        1 => {
            let key = gone.into_iter().next().expect("one key");
            target.shift_remove(key);
        }
        _ => target.retain(|k, _| !gone.contains(k.as_str())),
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

    // RFC 7386, appendix A.

    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "b"}), json!({"b": "c"}), json!({"a": "b", "b": "c"})),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": "b", "b": "c"}), json!({"a": null}), json!({"b": "c"})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (json!({"a": {"b": "c"}}), json!({"a": {"b": "d", "c": null}}), json!({"a": {"b": "d"}})),
            (json!({"a": [{"b": "c"}]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (json!({"e": null}), json!({"a": 1}), json!({"e": null, "a": 1})),
            (json!([1, 2]), json!({"a": "b", "c": null}), json!({"a": "b"})),
            (json!({}), json!({"a": {"bb": {"ccc": null}}}), json!({"a": {"bb": {}}})),
        ];
        for (target, patch, want) in cases {
            let mut t = target.clone();
            merge_patch(&mut t, &patch);
            assert_eq!(t, want, "{target} + {patch}");
        }
    }

    #[test]
    fn merge_patch_keeps_key_order() {
        let mut t = json!({"a": 1, "b": 2, "c": 3});
        merge_patch(&mut t, &json!({"a": null, "d": 4}));
        assert_eq!(serde_json::to_string(&t).unwrap(), r#"{"b":2,"c":3,"d":4}"#);
    }
}
