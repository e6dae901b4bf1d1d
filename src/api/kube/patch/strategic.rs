//! Strategic merge patch: maps merge and `null` deletes, lists merge by the strategy of their
//! field ([`smp_list_strategy`]), the `$patch`, `$retainKeys`, `$deleteFromPrimitiveList/` and
//! `$setElementOrder/` directives, and the order of merged lists.

use serde_json::{Map, Value};

use super::{PatchError, bad_request, canonical, go_fmt, go_type_name, invalid, json_eq};
use crate::store::json::remove_members;

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
    use crate::api::kube::patch::COMPARED;
    use serde_json::json;

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
}
