//! Walking values by their schema: the fields a configuration sets, what changed between two
//! objects, the merge of a configuration into the live object, and the pruning of fields no one
//! owns any more.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, Node};
use super::path::{PathElement, path_to_string};
use super::schema::{ListType, MapType, Schema, builtin_empty_object, builtin_list_type, builtin_map_type};
use crate::api::kube::patch::json_eq;

#[derive(Default, Debug)]
pub(super) struct Comparison {
    pub(super) added: FieldSet,
    pub(super) modified: FieldSet,
    pub(super) removed: FieldSet,
}

/// The paths and schema lookups while walking a value.
pub(super) struct Walker<'a> {
    pub(super) kind: &'a str,
    pub(super) schema: &'a dyn Schema,
}

/// Where a walk is: the field path and the schema path (`"[]"` for list items).
#[derive(Default)]
pub(super) struct Cursor {
    fp: Vec<PathElement>,
    sp: Vec<String>,
}

impl Cursor {
    fn push(&mut self, pe: PathElement) {
        self.sp.push(match &pe {
            PathElement::Field(f) => f.clone(),
            _ => "[]".to_string(),
        });
        self.fp.push(pe);
    }

    fn pop(&mut self) {
        self.fp.pop();
        self.sp.pop();
    }

    fn sp(&self) -> Vec<&str> {
        self.sp.iter().map(String::as_str).collect()
    }

    fn here(&self) -> String {
        if self.fp.is_empty() { ".".to_string() } else { path_to_string(&self.fp) }
    }
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

impl Walker<'_> {
    fn list_type(&self, c: &Cursor) -> ListType {
        let sp = c.sp();
        self.schema.list_type(self.kind, &sp).unwrap_or_else(|| builtin_list_type(self.kind, &sp))
    }

    fn map_type(&self, c: &Cursor) -> MapType {
        if c.fp.is_empty() {
            return MapType::Struct;
        }
        let sp = c.sp();
        self.schema.map_type(self.kind, &sp).unwrap_or_else(|| builtin_map_type(self.kind, &sp))
    }

    pub(super) fn empty_object(&self) -> Value {
        self.schema.empty_object(self.kind).unwrap_or_else(|| builtin_empty_object(self.kind))
    }

    /// The path element of a list item.
    fn item_pe(lt: &ListType, item: &Value) -> Result<PathElement, ItemError> {
        match lt {
            ListType::Atomic => Err(ItemError::NotAssociative),
            ListType::Set => match item {
                Value::Object(_) => Err(ItemError::MapInSet),
                Value::Array(_) => Err(ItemError::ListInSet),
                v => Ok(PathElement::Value(v.clone())),
            },
            ListType::Map(keys) => {
                let Value::Object(m) = item else {
                    return Err(ItemError::NotAMap);
                };
                let mut out = Vec::new();
                for k in keys {
                    match m.get(k) {
                        Some(v) => out.push((k.clone(), v.clone())),
                        None => return Err(ItemError::MissingKey(k.clone())),
                    }
                }
                out.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(PathElement::Key(out))
            }
        }
    }

    /// The items of a non-atomic list with their path elements, the first of duplicates only
    /// (or an error on duplicates when `strict`).
    fn index_items<'v>(
        &self,
        lt: &ListType,
        items: &'v [Value],
        c: &Cursor,
        strict: bool,
    ) -> Result<Vec<(PathElement, &'v Value)>, ListError> {
        let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(items.len());
        // Duplicates found through a set, not by scanning what came before: a list of thousands
        // of items (finalizers) costs n log n.
        let mut seen: std::collections::BTreeSet<PathElement> = std::collections::BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let pe = Self::item_pe(lt, item).map_err(|reason| ListError::Item { at: c.here(), index: i, reason })?;
            if !seen.insert(pe.clone()) {
                if strict {
                    return Err(ListError::Duplicate { at: c.here(), key: pe });
                }
                continue;
            }
            out.push((pe, item));
        }
        Ok(out)
    }

    /// The fields a configuration sets (what an applier owns).
    pub(super) fn field_set(&self, v: &Value, strict: bool) -> Result<FieldSet, ListError> {
        let mut out = FieldSet::new();
        self.fs_walk(v, &mut Cursor::default(), &mut out, strict)?;
        Ok(out)
    }

    fn fs_walk(&self, v: &Value, c: &mut Cursor, out: &mut FieldSet, strict: bool) -> Result<(), ListError> {
        match v {
            Value::Object(m) => {
                let mt = self.map_type(c);
                if mt == MapType::Atomic {
                    out.insert(&c.fp);
                    return Ok(());
                }
                for (k, child) in m {
                    c.push(PathElement::Field(k.clone()));
                    self.fs_walk(child, c, out, strict)?;
                    let empty_map = child.as_object().is_some_and(Map::is_empty);
                    if child.is_null() || empty_map || mt == MapType::Map {
                        out.insert(&c.fp);
                    }
                    c.pop();
                }
            }
            Value::Array(a) => {
                let lt = self.list_type(c);
                if lt == ListType::Atomic {
                    out.insert(&c.fp);
                    return Ok(());
                }
                for (pe, item) in self.index_items(&lt, a, c, strict)? {
                    c.push(pe);
                    self.fs_walk(item, c, out, strict)?;
                    out.insert(&c.fp);
                    c.pop();
                }
            }
            _ => out.insert(&c.fp),
        }
        Ok(())
    }

    /// What changed from `lhs` to `rhs`.
    pub(super) fn compare(&self, lhs: &Value, rhs: &Value) -> Comparison {
        let mut out = Comparison::default();
        self.cmp_walk(Some(lhs), Some(rhs), &mut Cursor::default(), &mut out);
        out
    }

    fn cmp_leaf(l: Option<&Value>, r: Option<&Value>, c: &Cursor, out: &mut Comparison) {
        match (l, r) {
            (None, Some(_)) => out.added.insert(&c.fp),
            (Some(_), None) => out.removed.insert(&c.fp),
            (Some(a), Some(b)) if !json_eq(a, b) => out.modified.insert(&c.fp),
            _ => {}
        }
    }

    fn cmp_walk(&self, l: Option<&Value>, r: Option<&Value>, c: &mut Cursor, out: &mut Comparison) {
        // An unchanged subtree has nothing to report: skipped whole (a status write of an Agent
        // leaves its inventory as it was), without a path built for each of its fields.
        if let (Some(a), Some(b)) = (l, r)
            && json_eq(a, b)
        {
            return;
        }
        let both_empty = is_empty_container(l) && is_empty_container(r);
        let granular = match (l, r) {
            (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None) if !both_empty => {
                self.map_type(c) != MapType::Atomic
            }
            (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) if !both_empty => {
                self.list_type(c) != ListType::Atomic
            }
            _ => false,
        };
        if !granular {
            Self::cmp_leaf(l, r, c, out);
            return;
        }
        match (l, r) {
            (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) => {
                let lt = self.list_type(c);
                let la = l.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                let ra = r.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                let (Ok(li), Ok(ri)) = (self.index_items(&lt, la, c, false), self.index_items(&lt, ra, c, false))
                else {
                    // Items that cannot be told apart: compare the list as a whole.
                    Self::cmp_leaf(l, r, c, out);
                    return;
                };
                let r_by_pe: BTreeMap<&PathElement, &Value> = ri.iter().map(|(p, v)| (p, *v)).collect();
                let l_by_pe: BTreeMap<&PathElement, &Value> = li.iter().map(|(p, v)| (p, *v)).collect();
                for (pe, litem) in &li {
                    let ritem = r_by_pe.get(pe).copied();
                    c.push(pe.clone());
                    self.cmp_walk(Some(litem), ritem, c, out);
                    c.pop();
                }
                for (pe, ritem) in &ri {
                    if l_by_pe.contains_key(pe) {
                        continue;
                    }
                    c.push(pe.clone());
                    self.cmp_walk(None, Some(ritem), c, out);
                    c.pop();
                }
            }
            _ => {
                let empty = Map::new();
                let lm = l.and_then(Value::as_object).unwrap_or(&empty);
                let rm = r.and_then(Value::as_object).unwrap_or(&empty);
                // managedFields are bookkeeping of fields, never a field themselves.
                let in_metadata = c.fp.len() == 1 && c.fp[0] == PathElement::Field("metadata".into());
                let bookkeeping = |k: &str| in_metadata && k == "managedFields";
                for (k, lv) in lm {
                    if bookkeeping(k) {
                        continue;
                    }
                    c.push(PathElement::Field(k.clone()));
                    self.cmp_walk(Some(lv), rm.get(k), c, out);
                    c.pop();
                }
                for (k, rv) in rm {
                    if lm.contains_key(k) || bookkeeping(k) {
                        continue;
                    }
                    c.push(PathElement::Field(k.clone()));
                    self.cmp_walk(None, Some(rv), c, out);
                    c.pop();
                }
            }
        }
        if l.is_none() {
            out.added.insert(&c.fp);
        } else if r.is_none() {
            out.removed.insert(&c.fp);
        }
    }

    /// The applied configuration merged into the live object. `None`: absent (a `null` in the
    /// configuration removes the field).
    pub(super) fn merge(&self, l: Option<&Value>, r: &Value, c: &mut Cursor) -> Result<Option<Value>, ListError> {
        match (l, r) {
            (_, Value::Null) => Ok(None),
            (Some(Value::Object(lm)), Value::Object(rm)) if self.map_type(c) != MapType::Atomic => {
                let mut out = lm.clone();
                let mut removed = std::collections::HashSet::new();
                for (k, rv) in rm {
                    c.push(PathElement::Field(k.clone()));
                    let merged = self.merge(lm.get(k), rv, c)?;
                    c.pop();
                    match merged {
                        Some(v) => {
                            out.insert(k.clone(), v);
                        }
                        None => {
                            removed.insert(k.as_str());
                        }
                    }
                }
                // In one pass that keeps the order: one by one, each would shift those after it.
                if !removed.is_empty() {
                    out.retain(|k, _| !removed.contains(k.as_str()));
                }
                Ok(Some(Value::Object(out)))
            }
            (Some(Value::Array(la)), Value::Array(ra)) if self.list_type(c) != ListType::Atomic => {
                self.merge_list(la, ra, c).map(|v| Some(Value::Array(v)))
            }
            (_, Value::Object(rm)) => {
                // Nothing to merge with: the configuration's value, nulls dropped.
                let mut out = Map::new();
                for (k, rv) in rm {
                    c.push(PathElement::Field(k.clone()));
                    let merged = self.merge(None, rv, c)?;
                    c.pop();
                    if let Some(v) = merged {
                        out.insert(k.clone(), v);
                    }
                }
                Ok(Some(Value::Object(out)))
            }
            (_, other) => Ok(Some(other.clone())),
        }
    }

    /// Merges two associative lists as structured-merge-diff does: items are matched by their
    /// path element; the result keeps the live order, places the configuration's items in the
    /// configuration's order, and keeps live-only items near where they were.
    fn merge_list(&self, la: &[Value], ra: &[Value], c: &mut Cursor) -> Result<Vec<Value>, ListError> {
        let lt = self.list_type(c);
        let rhs = self.index_items(&lt, ra, c, true)?;
        // A live list the schema cannot index: the configuration's list wins.
        let lhs = self.index_items(&lt, la, c, false).unwrap_or_default();
        // Items looked up by path element in maps, not by scans: linear-logarithmic in the lists.
        let r_by_pe: BTreeMap<&PathElement, &Value> = rhs.iter().map(|(p, v)| (p, *v)).collect();
        let l_by_pe: BTreeMap<&PathElement, &Value> = lhs.iter().map(|(p, v)| (p, *v)).collect();
        let in_rhs = |pe: &PathElement| r_by_pe.contains_key(pe);
        let in_lhs = |pe: &PathElement| l_by_pe.get(pe).copied();
        let mut shared = rhs.iter().filter(|(p, _)| in_lhs(p).is_some()).map(|(p, _)| p);
        let mut next_shared = shared.next();
        let mut emitted: std::collections::BTreeSet<&PathElement> = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        let (mut li, mut ri) = (0, 0);
        let mut emit = |this: &Self,
                        c: &mut Cursor,
                        pe: &PathElement,
                        l: Option<&Value>,
                        r: Option<&Value>|
         -> Result<(), ListError> {
            c.push(pe.clone());
            let v = match r {
                Some(r) => this.merge(l, r, c)?,
                None => l.cloned(),
            };
            c.pop();
            out.extend(v);
            Ok(())
        };
        while li < lhs.len() || ri < rhs.len() {
            if li < lhs.len() && ri < rhs.len() {
                let (lpe, lv) = &lhs[li];
                let (rpe, rv) = &rhs[ri];
                if lpe == rpe {
                    emit(self, c, rpe, Some(lv), Some(rv))?;
                    emitted.insert(rpe);
                    li += 1;
                    ri += 1;
                    next_shared = shared.next();
                    continue;
                }
                if in_rhs(lpe) && next_shared.is_some_and(|n| n != lpe) {
                    // A shared item, but not the next one the configuration places.
                    li += 1;
                    continue;
                }
            }
            if li < lhs.len() {
                let (lpe, lv) = &lhs[li];
                if !in_rhs(lpe) {
                    emit(self, c, lpe, Some(lv), None)?;
                    li += 1;
                    continue;
                } else if emitted.contains(lpe) {
                    li += 1;
                }
            }
            if ri < rhs.len() {
                let (rpe, rv) = &rhs[ri];
                emit(self, c, rpe, in_lhs(rpe), Some(rv))?;
                emitted.insert(rpe);
                ri += 1;
                if next_shared == Some(rpe) {
                    next_shared = shared.next();
                }
            }
        }
        Ok(out)
    }

    /// Removes from `v` what `gone` names, except what `owned` still names below it; a map or
    /// list emptied this way goes too, unless it is owned itself.
    pub(super) fn prune(&self, v: &mut Value, gone: &FieldSet, owned: &FieldSet, c: &mut Cursor) {
        match v {
            Value::Object(m) => {
                if self.map_type(c) == MapType::Atomic {
                    return;
                }
                let mut removed = std::collections::HashSet::new();
                for (pe, node) in &gone.nodes {
                    let PathElement::Field(k) = pe else { continue };
                    let Some(child) = m.get_mut(k) else { continue };
                    c.push(pe.clone());
                    let keep = self.prune_child(child, node, owned, pe, c);
                    c.pop();
                    if !keep {
                        removed.insert(k.as_str());
                    }
                }
                // Removed in one pass that keeps the order (one by one, each removal would shift
                // the members after it).
                if !removed.is_empty() {
                    m.retain(|k, _| !removed.contains(k.as_str()));
                }
            }
            Value::Array(a) => {
                let lt = self.list_type(c);
                if lt == ListType::Atomic {
                    return;
                }
                let items = std::mem::take(a);
                for mut item in items {
                    if let Ok(pe) = Self::item_pe(&lt, &item)
                        && let Some(node) = gone.nodes.get(&pe)
                    {
                        c.push(pe.clone());
                        let keep = self.prune_child(&mut item, node, owned, &pe, c);
                        c.pop();
                        if !keep {
                            continue;
                        }
                    }
                    a.push(item);
                }
            }
            _ => {}
        }
    }

    /// Prunes one member of a container; false when it must go.
    fn prune_child(&self, child: &mut Value, node: &Node, owned: &FieldSet, pe: &PathElement, c: &mut Cursor) -> bool {
        let owned_below = owned.below(pe);
        let was_filled = !is_empty_container(Some(child)) && (child.is_object() || child.is_array());
        if node.member {
            match self.keep_owned(child, owned_below, c) {
                Some(kept) => *child = kept,
                None => return false,
            }
        } else {
            self.prune(child, &node.children, owned_below, c);
        }
        let emptied = was_filled && is_empty_container(Some(child));
        !emptied || owned.is_member(pe)
    }

    /// Only the parts of `v` that `owned` names (relative to `v`).
    fn keep_owned(&self, v: &Value, owned: &FieldSet, c: &mut Cursor) -> Option<Value> {
        if owned.is_empty() {
            return None;
        }
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, child) in m {
                    let pe = PathElement::Field(k.clone());
                    let Some(node) = owned.nodes.get(&pe) else { continue };
                    if node.member {
                        out.insert(k.clone(), child.clone());
                    } else {
                        c.push(pe);
                        let kept = self.keep_owned(child, &node.children, c);
                        c.pop();
                        if let Some(kept) = kept {
                            out.insert(k.clone(), kept);
                        }
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Value::Array(a) => {
                let lt = self.list_type(c);
                if lt == ListType::Atomic {
                    return None;
                }
                let mut out = Vec::new();
                for item in a {
                    let Ok(pe) = Self::item_pe(&lt, item) else { continue };
                    let Some(node) = owned.nodes.get(&pe) else { continue };
                    if node.member {
                        out.push(item.clone());
                    } else {
                        c.push(pe);
                        let kept = self.keep_owned(item, &node.children, c);
                        c.pop();
                        out.extend(kept);
                    }
                }
                (!out.is_empty()).then_some(Value::Array(out))
            }
            _ => None,
        }
    }
}

/// A list whose items cannot be told apart by the list's type: the configuration does not fit
/// the object's structure.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// `at`: the list, as conflicts print paths (`.spec.ports`, `.` for the root).
    #[error("{at}: element {index}")]
    Item {
        at: String,
        index: usize,
        #[source]
        reason: ItemError,
    },
    #[error("{at}: duplicate entries for key {key}")]
    Duplicate { at: String, key: PathElement },
}

/// Why a list item has no path element (structured-merge-diff's wording).
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error("invalid indexing of non-associative list")]
    NotAssociative,
    #[error("associative list without keys has an element that's a map type")]
    MapInSet,
    #[error("associative list without keys has an element that's a list type")]
    ListInSet,
    #[error("associative list with keys may not have non-map elements")]
    NotAMap,
    #[error("associative list with keys has an element that omits key field {0:?} (and doesn't have default value)")]
    MissingKey(String),
}

#[cfg(test)]
mod tests {
    use super::super::path::COMPARED;
    use super::super::testing::*;

    #[test]
    fn apply_removing_a_field_removes_it() {
        let mut config = cm(json!({"a": "1", "b": "2"}));
        config["metadata"]["labels"] = json!({"x": "y"});
        let first = apply(None, &config, &req("kubectl", T0)).unwrap();
        let second = apply(Some(&first), &cm(json!({"a": "1"})), &req("kubectl", T1)).unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));
        // The labels map emptied by the removal goes too.
        assert!(second["metadata"].get("labels").is_none(), "{second:#}");
        assert_eq!(fields_text(&second, "kubectl", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        // Dropping everything leaves an object without data and without managedFields.
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}});
        let third = apply(Some(&second), &bare, &req("kubectl", T2)).unwrap();
        assert!(third.get("data").is_none(), "{third:#}");
        assert!(third["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn null_in_configuration_removes_and_owns() {
        let first = apply(None, &cm(json!({"a": "1", "b": "2"})), &req("alice", T0)).unwrap();
        let mut r = req("bob", T1);
        r.force = true;
        let second = apply(Some(&first), &cm(json!({"b": null})), &r).unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));
        assert_eq!(fields_text(&second, "bob", "Apply"), r#"{"f:data":{"f:b":{}}}"#);
        assert_eq!(fields_text(&second, "alice", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
    }

    #[test]
    fn numbers_compare_as_json_numbers() {
        let r = |now| Request::new("kubectl", "example.com/v1", "Widget", now);
        let w = |x: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": x}});
        let a = apply(None, &w(json!(1)), &r(T0)).unwrap();
        let other = apply(Some(&a), &w(json!(1.0)), &Request::new("other", "example.com/v1", "Widget", T1)).unwrap();
        assert!(entries(&other).len() == 2, "shared, not conflicting");
        let b = apply(Some(&a), &w(json!(1.0)), &r(T1)).unwrap();
        assert_eq!(entry(&b, "kubectl", "Apply")["time"], T0);
    }

    #[test]
    fn set_merge_order_follows_structured_merge_diff() {
        let with =
            |f: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "finalizers": f}});
        let live = apply(None, &with(json!(["a", "b", "c"])), &req("x", T0)).unwrap();
        let merged = apply(Some(&live), &with(json!(["d", "b"])), &req("y", T1)).unwrap();
        assert_eq!(merged["metadata"]["finalizers"], json!(["a", "d", "b", "c"]));
        let merged = apply(Some(&live), &with(json!(["c", "a"])), &req("y", T1)).unwrap();
        assert_eq!(merged["metadata"]["finalizers"], json!(["b", "c", "a"]));
    }

    #[test]
    fn long_sets_cost_n_log_n_comparisons() {
        // Thousands of finalizers: duplicates, changes and merges are found through ordered maps,
        // not by scanning the items seen so far (which was n²/2 comparisons: 8 million here).
        let n = 4000usize;
        let finalizers: Vec<Value> = (0..n).map(|i| json!(format!("example.com/f{i}"))).collect();
        let mut changed = finalizers.clone();
        changed.reverse();
        changed.push(json!("example.com/new"));
        let old = cm(json!({})).tap_finalizers(&finalizers);
        let mut new = cm(json!({})).tap_finalizers(&changed);
        let bound = 64 * n as u64 * (n as f64).log2() as u64;
        COMPARED.with(|c| c.set(0));
        record_update(Some(&old), &mut new, &req("m", "2024-01-01T00:00:00Z"));
        let applied = apply(Some(&old), &cm(json!({})).tap_finalizers(&changed), &req("a", "2024-01-01T00:00:00Z"));
        assert!(applied.is_ok(), "{applied:?}");
        let compared = COMPARED.with(|c| c.get());
        assert!(compared < bound, "{compared} comparisons for {n} finalizers (bound {bound})");
    }

    trait TapFinalizers {
        fn tap_finalizers(self, f: &[Value]) -> Value;
    }
    impl TapFinalizers for Value {
        fn tap_finalizers(mut self, f: &[Value]) -> Value {
            self["metadata"]["finalizers"] = Value::Array(f.to_vec());
            self
        }
    }
}
