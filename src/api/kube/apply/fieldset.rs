//! [`FieldSet`]: a set of field paths as a tree, its set operations, and its FieldsV1 form.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::path::{KeyError, PathElement};

/// A set of field paths, as a tree. A node is a member when the path to it is in the set;
/// a node may also have members below it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSet {
    pub(super) nodes: BTreeMap<PathElement, Node>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Node {
    pub(super) member: bool,
    pub(super) children: FieldSet,
}

static EMPTY_SET: FieldSet = FieldSet { nodes: BTreeMap::new() };

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds a path (the empty path, the whole object, is never tracked).
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else { return };
        let node = self.nodes.entry(first.clone()).or_default();
        if rest.is_empty() {
            node.member = true;
        } else {
            node.children.insert(rest);
        }
    }

    /// The members below `pe` (relative to it).
    pub(super) fn below(&self, pe: &PathElement) -> &FieldSet {
        self.nodes.get(pe).map_or(&EMPTY_SET, |n| &n.children)
    }

    pub(super) fn is_member(&self, pe: &PathElement) -> bool {
        self.nodes.get(pe).is_some_and(|n| n.member)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    pub(super) fn union_with(&mut self, other: &FieldSet) {
        for (pe, n) in &other.nodes {
            let mine = self.nodes.entry(pe.clone()).or_default();
            mine.member |= n.member;
            mine.children.union_with(&n.children);
        }
    }

    /// The members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, n) in &self.nodes {
            let member = n.member && !other.is_member(pe);
            let children = n.children.difference(other.below(pe));
            if member || !children.is_empty() {
                out.nodes.insert(pe.clone(), Node { member, children });
            }
        }
        out
    }

    /// The members of both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, n) in &self.nodes {
            let Some(o) = other.nodes.get(pe) else { continue };
            let member = n.member && o.member;
            let children = n.children.intersection(&o.children);
            if member || !children.is_empty() {
                out.nodes.insert(pe.clone(), Node { member, children });
            }
        }
        out
    }

    /// Every member path, in order (a node before what is below it).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for (pe, n) in &self.nodes {
            prefix.push(pe.clone());
            if n.member {
                out.push(prefix.clone());
            }
            n.children.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Keeps only what `keep` accepts among the top-level elements.
    pub(super) fn retain_top(&mut self, keep: impl Fn(&PathElement) -> bool) {
        self.nodes.retain(|pe, _| keep(pe));
    }

    /// Removes `path` and everything below it.
    pub(super) fn remove_subtree(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else { return };
        if rest.is_empty() {
            self.nodes.remove(first);
            return;
        }
        if let Some(n) = self.nodes.get_mut(first) {
            n.children.remove_subtree(rest);
            if !n.member && n.children.is_empty() {
                self.nodes.remove(first);
            }
        }
    }

    /// Removes the member `path` only (what is below it stays).
    pub(super) fn remove_member(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else { return };
        if let Some(n) = self.nodes.get_mut(first) {
            if rest.is_empty() {
                n.member = false;
            } else {
                n.children.remove_member(rest);
            }
            if !n.member && n.children.is_empty() {
                self.nodes.remove(first);
            }
        }
    }

    /// The FieldsV1 form (`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`), keys in the
    /// API server's order.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        for (pe, n) in &self.nodes {
            let mut inner = match n.children.to_fields_v1() {
                Value::Object(c) => c,
                _ => unreachable!("always an object"),
            };
            if n.member && !inner.is_empty() {
                let mut with_dot = Map::new();
                with_dot.insert(".".to_string(), json!({}));
                with_dot.append(&mut inner);
                inner = with_dot;
            }
            m.insert(pe.to_fields_v1_key(), Value::Object(inner));
        }
        Value::Object(m)
    }

    /// Parses the FieldsV1 form.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, FieldsV1Error> {
        let Value::Object(m) = v else {
            return Err(FieldsV1Error::NotAnObject);
        };
        let mut out = FieldSet::new();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::from_fields_v1_key(k)?;
            let Value::Object(cm) = child else {
                return Err(FieldsV1Error::MemberNotAnObject(k.clone()));
            };
            let children = FieldSet::from_fields_v1(child)?;
            let member = cm.is_empty() || cm.contains_key(".");
            let node = out.nodes.entry(pe).or_default();
            node.member |= member;
            node.children.union_with(&children);
        }
        Ok(out)
    }
}

/// A FieldsV1 document that is not a field set.
#[derive(Debug, thiserror::Error)]
pub enum FieldsV1Error {
    #[error("FieldsV1 must be a JSON object")]
    NotAnObject,
    #[error("parsing key {0:?}: value must be a JSON object")]
    MemberNotAnObject(String),
    #[error(transparent)]
    Key(#[from] KeyError),
}

#[cfg(test)]
mod tests {
    use super::super::path::{PathElement, path_to_string};
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trip() {
        let text = r#"{"f:metadata":{"f:finalizers":{".":{},"v:\"a\"":{}},"f:labels":{".":{},"f:app":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"u1\"}":{}}},"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{}}},"f:x":{}}}"#;
        let v: Value = serde_json::from_str(text).unwrap();
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert_eq!(serde_json::to_string(&set.to_fields_v1()).unwrap(), text);
        let paths: Vec<String> = set.paths().iter().map(|p| path_to_string(p)).collect();
        assert_eq!(
            paths,
            [
                ".metadata.finalizers",
                ".metadata.finalizers[=\"a\"]",
                ".metadata.labels",
                ".metadata.labels.app",
                ".metadata.ownerReferences",
                ".metadata.ownerReferences[uid=\"u1\"]",
                ".spec.ports[port=80,protocol=\"TCP\"]",
                ".spec.ports[port=80,protocol=\"TCP\"].name",
                ".spec.x",
            ]
        );
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:y": 1})).is_err());
    }

    #[test]
    fn fields_v1_key_order_is_the_api_servers() {
        let mut set = FieldSet::new();
        let k = |n: i64| PathElement::Key(vec![("port".into(), json!(n))]);
        let f = |s: &str| PathElement::Field(s.into());
        set.insert(&[f("spec"), f("ports"), k(8080)]);
        set.insert(&[f("spec"), f("ports"), k(80)]);
        set.insert(&[f("spec"), f("b")]);
        set.insert(&[f("spec"), f("a")]);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).unwrap(),
            r#"{"f:spec":{"f:a":{},"f:b":{},"f:ports":{"k:{\"port\":80}":{},"k:{\"port\":8080}":{}}}}"#
        );
    }
}
