//! Server-side apply and `metadata.managedFields`, after the API server's field manager
//! (structured-merge-diff): pure functions over `serde_json::Value`.
//!
//! * [`apply`]: a server-side apply (`PATCH` with `application/apply-patch+yaml`).
//! * [`record_update`]: every other write (create, update, any other patch) records what its
//!   manager changed.
//!
//! Ownership is tracked as sets of field paths, stored in each `managedFields` entry in the
//! FieldsV1 format (`f:<field>`, `k:<keys as JSON>`, `v:<value as JSON>`, `i:<index>`, and
//! `.` for the node itself when its children are listed too).
//!
//! How values are walked depends on a [`Schema`]: lists are atomic unless declared a set or a
//! map keyed by some fields; maps are structs (named fields) unless declared maps (arbitrary
//! keys, like labels) or atomic. [`BuiltinSchema`] knows ObjectMeta and the core kinds served;
//! a custom schema (e.g. from a CRD's `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`, `additionalProperties`) answers first and falls back to it.
//!
//! Hand-written because no Rust crate does the server's side of apply: kube-rs sends apply patches
//! and leaves the merge, the field sets and the conflicts to the API server, whose implementation
//! (structured-merge-diff) is Go only.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value, json};

use super::patch::json_eq;

/// The annotation client-side `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The most `Update` entries kept; older ones merge into an `ancient-changes` entry.
pub const MAX_UPDATE_MANAGERS: usize = 10;

// =============================================================================================
// Schema
// =============================================================================================

/// How a list's items are identified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Owned and replaced as a whole (`f:list: {}`): the default.
    Atomic,
    /// A set of scalars, each item owned on its own (`v:"item"`).
    Set,
    /// A list of objects identified by these key fields (`k:{"name":"x"}`).
    Map(Vec<String>),
}

/// How an object's members are tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// Named fields of a struct (the default): each member is tracked, the struct itself is
    /// not.
    Struct,
    /// A map with arbitrary keys (labels, ConfigMap data, `additionalProperties`): each key is
    /// tracked, and owns itself (`.`) when its value is an object with tracked members.
    Map,
    /// Owned and replaced as a whole.
    Atomic,
}

/// Declares list and map types by path. `path` lists the field names from the object's root,
/// with `"[]"` for the items of a list (e.g. `["spec", "ports", "[]", "protocols"]`).
/// Answering `None` falls back to [`BuiltinSchema`].
pub trait Schema {
    fn list_type(&self, kind: &str, path: &[&str]) -> Option<ListType> {
        let _ = (kind, path);
        None
    }
    fn map_type(&self, kind: &str, path: &[&str]) -> Option<MapType> {
        let _ = (kind, path);
        None
    }
    /// The object an update without a previous object (a create) is compared with: what the
    /// kind's empty object holds (for built-in types, the structs that are never omitted).
    /// Whatever it lacks and the new object has counts as added, node included (`.`).
    fn empty_object(&self, kind: &str) -> Option<Value> {
        let _ = kind;
        None
    }
}

/// ObjectMeta's lists and maps, and those of the core kinds served (ConfigMap, Secret,
/// Namespace, Lease, Event). Everything else: lists atomic, objects structs.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinSchema;

impl Schema for BuiltinSchema {}

static BUILTIN: BuiltinSchema = BuiltinSchema;

fn builtin_list_type(kind: &str, path: &[&str]) -> ListType {
    match (kind, path) {
        (_, ["metadata", "finalizers"]) => ListType::Set,
        (_, ["metadata", "ownerReferences"]) => ListType::Map(vec!["uid".to_string()]),
        ("Namespace", ["status", "conditions"]) => ListType::Map(vec!["type".to_string()]),
        _ => ListType::Atomic,
    }
}

fn builtin_map_type(kind: &str, path: &[&str]) -> MapType {
    match (kind, path) {
        (_, ["metadata", "labels" | "annotations"]) => MapType::Map,
        // OwnerReference and ObjectReference are atomic structs.
        (_, ["metadata", "ownerReferences", "[]"]) => MapType::Atomic,
        ("ConfigMap", ["data" | "binaryData"]) => MapType::Map,
        ("Secret", ["data" | "stringData"]) => MapType::Map,
        ("Event", ["involvedObject" | "related"]) => MapType::Atomic,
        _ => MapType::Struct,
    }
}

fn builtin_empty_object(kind: &str) -> Value {
    match kind {
        "ConfigMap" | "Secret" => json!({"metadata": {}}),
        "Namespace" => json!({"metadata": {}, "spec": {}, "status": {}}),
        "Lease" => json!({"metadata": {}, "spec": {}}),
        "Event" => json!({"metadata": {}, "involvedObject": {}, "source": {}}),
        // Custom resources start from nothing.
        _ => json!({}),
    }
}

// =============================================================================================
// Field paths and sets
// =============================================================================================

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
    static COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
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
    pub fn from_fields_v1_key(s: &str) -> Result<PathElement, String> {
        let (kind, rest) =
            s.split_once(':').ok_or_else(|| format!("parsing key {s:?}: path element must have a type prefix"))?;
        match kind {
            "f" => Ok(PathElement::Field(rest.to_string())),
            "v" => serde_json::from_str(rest).map(PathElement::Value).map_err(|e| format!("parsing key {s:?}: {e}")),
            "k" => match serde_json::from_str::<Value>(rest) {
                Ok(Value::Object(m)) if !m.is_empty() => {
                    let mut keys: Vec<(String, Value)> = m.into_iter().collect();
                    keys.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(PathElement::Key(keys))
                }
                Ok(_) => Err(format!("parsing key {s:?}: key must be a non-empty JSON object")),
                Err(e) => Err(format!("parsing key {s:?}: {e}")),
            },
            "i" => rest.parse().map(PathElement::Index).map_err(|e| format!("parsing key {s:?}: {e}")),
            _ => Err(format!("parsing key {s:?}: unknown path element type {kind:?}")),
        }
    }
}

/// A path printed as the API server prints it in conflicts: `.spec.x`,
/// `.metadata.ownerReferences[uid="u"]`, `.metadata.finalizers[="f"]`.
pub fn path_to_string(path: &[PathElement]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths, as a tree. A node is a member when the path to it is in the set;
/// a node may also have members below it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSet {
    nodes: BTreeMap<PathElement, Node>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Node {
    member: bool,
    children: FieldSet,
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
    fn below(&self, pe: &PathElement) -> &FieldSet {
        self.nodes.get(pe).map_or(&EMPTY_SET, |n| &n.children)
    }

    fn is_member(&self, pe: &PathElement) -> bool {
        self.nodes.get(pe).is_some_and(|n| n.member)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    fn union_with(&mut self, other: &FieldSet) {
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
    fn retain_top(&mut self, keep: impl Fn(&PathElement) -> bool) {
        self.nodes.retain(|pe, _| keep(pe));
    }

    /// Removes `path` and everything below it.
    fn remove_subtree(&mut self, path: &[PathElement]) {
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
    fn remove_member(&mut self, path: &[PathElement]) {
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
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(m) = v else {
            return Err("FieldsV1 must be a JSON object".to_string());
        };
        let mut out = FieldSet::new();
        for (k, child) in m {
            if k == "." {
                continue;
            }
            let pe = PathElement::from_fields_v1_key(k)?;
            let Value::Object(cm) = child else {
                return Err(format!("parsing key {k:?}: value must be a JSON object"));
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

// =============================================================================================
// Managed fields entries
// =============================================================================================

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn is_apply(&self) -> bool {
        self.operation == "Apply"
    }

    /// Entries with the same identity merge: manager, operation, subresource, and for updates
    /// the API version.
    fn same_identity(&self, manager: &str, apply: bool, api_version: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.is_apply() == apply
            && self.subresource.as_deref() == subresource
            && (apply || self.api_version == api_version)
    }

    /// The identity as the API server encodes it (JSON of the entry without time, fields and,
    /// for appliers, API version); conflicts are grouped and sorted by it.
    fn identifier(&self) -> String {
        let mut m = Map::new();
        if !self.manager.is_empty() {
            m.insert("manager".to_string(), json!(self.manager));
        }
        m.insert("operation".to_string(), json!(self.operation));
        if !self.is_apply() && !self.api_version.is_empty() {
            m.insert("apiVersion".to_string(), json!(self.api_version));
        }
        if let Some(s) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            m.insert("subresource".to_string(), json!(s));
        }
        Value::Object(m).to_string()
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".to_string(), json!(self.manager));
        m.insert("operation".to_string(), json!(self.operation));
        m.insert("apiVersion".to_string(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".to_string(), json!(t));
        }
        m.insert("fieldsType".to_string(), json!("FieldsV1"));
        m.insert("fieldsV1".to_string(), self.fields.to_fields_v1());
        if let Some(s) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            m.insert("subresource".to_string(), json!(s));
        }
        Value::Object(m)
    }

    fn from_json(i: usize, v: &Value) -> Result<ManagedEntry, String> {
        let Value::Object(m) = v else {
            return Err(format!("managed fields entry {i} is not an object"));
        };
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = s("operation");
        if operation != "Apply" && operation != "Update" {
            return Err("operation must be `Apply` or `Update`".to_string());
        }
        let api_version = s("apiVersion");
        if api_version.is_empty() {
            return Err("apiVersion must not be empty".to_string());
        }
        match s("fieldsType").as_str() {
            "FieldsV1" => {}
            "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
            other => return Err(format!("invalid fieldsType {other:?} in managed fields entry {i}")),
        }
        let fields = match m.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f).map_err(|e| format!("error decoding set: {e}"))?,
        };
        Ok(ManagedEntry {
            manager: s("manager"),
            operation,
            api_version,
            time: m.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: m.get("subresource").and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string),
            fields,
        })
    }
}

/// Reads `metadata.managedFields` of an object (absent: none). Entries with the same identity
/// merge, the later one winning, as upstream decodes them.
pub fn decode_managed_fields(obj: &Value) -> Result<Vec<ManagedEntry>, String> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => decode_entries(items),
        Some(_) => Err("metadata.managedFields must be a list".to_string()),
    }
}

fn decode_entries(items: &[Value]) -> Result<Vec<ManagedEntry>, String> {
    let mut out: Vec<ManagedEntry> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let e = ManagedEntry::from_json(i, item)?;
        out.retain(|o| !o.same_identity(&e.manager, e.is_apply(), &e.api_version, e.subresource.as_deref()));
        out.push(e);
    }
    Ok(out)
}

/// Writes the entries (those with an empty set dropped, sorted as upstream sorts them:
/// appliers first, then by time, manager, API version, subresource) into
/// `metadata.managedFields`, removing it when there are none.
fn encode_managed_fields(obj: &mut Value, mut entries: Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|p, q| {
        p.operation
            .cmp(&q.operation)
            .then_with(|| p.time.as_deref().unwrap_or("").cmp(q.time.as_deref().unwrap_or("")))
            .then_with(|| p.manager.cmp(&q.manager))
            .then_with(|| p.api_version.cmp(&q.api_version))
            .then_with(|| p.subresource.cmp(&q.subresource))
    });
    let Some(obj) = obj.as_object_mut() else { return };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.shift_remove("managedFields");
        }
        return;
    }
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let list: Vec<Value> = entries.iter().map(ManagedEntry::to_json).collect();
    meta.as_object_mut().expect("made an object").insert("managedFields".to_string(), Value::Array(list));
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(Value::Object(meta)) = o.get_mut("metadata") {
        meta.shift_remove("managedFields");
    }
    o
}

// =============================================================================================
// Requests, conflicts, errors
// =============================================================================================

/// Who writes, and how. Build with [`Request::new`] and adjust the public fields.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The field manager (`?fieldManager=`, or what the API server derives from the user agent).
    pub manager: &'a str,
    /// The resource's `group/version` (`v1`, `coordination.k8s.io/v1`).
    pub api_version: &'a str,
    /// The resource's kind (`ConfigMap`).
    pub kind: &'a str,
    /// The time of the write, RFC 3339 (`2024-01-02T03:04:05Z`).
    pub now: &'a str,
    /// `Some("status")` for a write to the status subresource.
    pub subresource: Option<&'a str>,
    /// Apply only: take conflicting fields from their other managers (`?force=true`).
    pub force: bool,
    /// The resource has a status subresource: writes to the main resource neither change nor
    /// own `status`, and writes to `/status` own only `status`.
    pub status_subresource: bool,
    /// Declares list and map types beyond the built-in ones.
    pub schema: &'a dyn Schema,
}

impl<'a> Request<'a> {
    pub fn new(manager: &'a str, api_version: &'a str, kind: &'a str, now: &'a str) -> Request<'a> {
        Request {
            manager,
            api_version,
            kind,
            now,
            subresource: None,
            force: false,
            status_subresource: false,
            schema: &BUILTIN,
        }
    }

    fn track(&self) -> Track {
        match self.subresource {
            Some("status") => Track::StatusOnly,
            Some(_) => Track::All,
            None if self.status_subresource => Track::NoStatus,
            None => Track::All,
        }
    }

    fn walker(&self) -> Walker<'a> {
        Walker { kind: self.kind, schema: self.schema }
    }
}

/// Which top-level fields a write tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Track {
    All,
    NoStatus,
    StatusOnly,
}

/// A field an apply would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    /// The other manager's operation, `Apply` or `Update`.
    pub operation: String,
    /// The other manager's API version (named in the message for updaters).
    pub api_version: String,
    pub subresource: Option<String>,
    /// The field, as the API server prints it: `.spec.x`.
    pub field: String,
    identifier: String,
}

impl Conflict {
    /// How the API server names the manager: `"kubectl"`, `"kubectl-edit" using v1`,
    /// `"m" with subresource "status" using v1`.
    pub fn manager_description(&self) -> String {
        let mut s = serde_json::to_string(&self.manager).expect("strings serialize");
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {}", serde_json::to_string(sub).expect("strings serialize")));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The conflicts of a refused apply: answer 409 (reason `Conflict`) with [`Conflicts::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// `Status.message`, worded as the API server words it.
    pub fn message(&self) -> String {
        let c = &self.0;
        if c.len() == 1 {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                c[0].manager_description(),
                c[0].field
            );
        }
        let mut lines = Vec::new();
        let mut last: Option<&str> = None;
        for conflict in c {
            if last != Some(conflict.identifier.as_str()) {
                lines.push(format!("conflicts with {}:", conflict.manager_description()));
                last = Some(&conflict.identifier);
            }
            lines.push(format!("- {}", conflict.field));
        }
        format!("Apply failed with {} conflicts: {}", c.len(), lines.join("\n"))
    }

    /// `Status.details.causes`: one `FieldManagerConflict` per field.
    pub fn causes(&self) -> Vec<Value> {
        self.0
            .iter()
            .map(|c| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager_description()),
                    "field": c.field,
                })
            })
            .collect()
    }

    /// The whole `Status` object the API server answers with (HTTP 409).
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "reason": "Conflict",
            "details": {"causes": self.causes()},
            "code": 409,
        })
    }
}

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409.
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The applied configuration is not acceptable (wrong type, managedFields set): 400.
    #[error("{0}")]
    BadRequest(String),
    /// The configuration does not fit the object's structure (list items without their keys,
    /// duplicates): 422.
    #[error("{0}")]
    Invalid(String),
    /// The stored managedFields cannot be read: 500.
    #[error("{0}")]
    Internal(String),
}

impl ApplyError {
    pub fn http_status(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::BadRequest(_) => 400,
            ApplyError::Invalid(_) => 422,
            ApplyError::Internal(_) => 500,
        }
    }
}

// =============================================================================================
// Walking values
// =============================================================================================

#[derive(Default, Debug)]
struct Comparison {
    added: FieldSet,
    modified: FieldSet,
    removed: FieldSet,
}

/// The paths and schema lookups while walking a value.
struct Walker<'a> {
    kind: &'a str,
    schema: &'a dyn Schema,
}

/// Where a walk is: the field path and the schema path (`"[]"` for list items).
#[derive(Default)]
struct Cursor {
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

    fn empty_object(&self) -> Value {
        self.schema.empty_object(self.kind).unwrap_or_else(|| builtin_empty_object(self.kind))
    }

    /// The path element of a list item.
    fn item_pe(lt: &ListType, item: &Value) -> Result<PathElement, String> {
        match lt {
            ListType::Atomic => Err("invalid indexing of non-associative list".to_string()),
            ListType::Set => match item {
                Value::Object(_) => Err("associative list without keys has an element that's a map type".to_string()),
                Value::Array(_) => Err("associative list without keys has an element that's a list type".to_string()),
                v => Ok(PathElement::Value(v.clone())),
            },
            ListType::Map(keys) => {
                let Value::Object(m) = item else {
                    return Err("associative list with keys may not have non-map elements".to_string());
                };
                let mut out = Vec::new();
                for k in keys {
                    match m.get(k) {
                        Some(v) => out.push((k.clone(), v.clone())),
                        None => {
                            return Err(format!(
                                "associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
                            ));
                        }
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
    ) -> Result<Vec<(PathElement, &'v Value)>, String> {
        let mut out: Vec<(PathElement, &Value)> = Vec::with_capacity(items.len());
        // Duplicates found through a set, not by scanning what came before: a list of thousands
        // of items (finalizers) costs n log n.
        let mut seen: std::collections::BTreeSet<PathElement> = std::collections::BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let pe = Self::item_pe(lt, item).map_err(|e| format!("{}: element {i}: {e}", c.here()))?;
            if !seen.insert(pe.clone()) {
                if strict {
                    return Err(format!("{}: duplicate entries for key {pe}", c.here()));
                }
                continue;
            }
            out.push((pe, item));
        }
        Ok(out)
    }

    /// The fields a configuration sets (what an applier owns).
    fn field_set(&self, v: &Value, strict: bool) -> Result<FieldSet, String> {
        let mut out = FieldSet::new();
        self.fs_walk(v, &mut Cursor::default(), &mut out, strict)?;
        Ok(out)
    }

    fn fs_walk(&self, v: &Value, c: &mut Cursor, out: &mut FieldSet, strict: bool) -> Result<(), String> {
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
    fn compare(&self, lhs: &Value, rhs: &Value) -> Comparison {
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
    fn merge(&self, l: Option<&Value>, r: &Value, c: &mut Cursor) -> Result<Option<Value>, String> {
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
    fn merge_list(&self, la: &[Value], ra: &[Value], c: &mut Cursor) -> Result<Vec<Value>, String> {
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
         -> Result<(), String> {
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
    fn prune(&self, v: &mut Value, gone: &FieldSet, owned: &FieldSet, c: &mut Cursor) {
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

/// Fields never tracked: type meta and the metadata the server sets.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// `set` without what is never tracked and without what this write does not track.
fn filter_set(mut set: FieldSet, track: Track) -> FieldSet {
    let f = |s: &str| PathElement::Field(s.to_string());
    set.remove_subtree(&[f("apiVersion")]);
    set.remove_subtree(&[f("kind")]);
    set.remove_member(&[f("metadata")]);
    for m in SERVER_METADATA {
        set.remove_subtree(&[f("metadata"), f(m)]);
    }
    let status = f("status");
    match track {
        Track::All => {}
        Track::NoStatus => set.retain_top(|pe| *pe != status),
        Track::StatusOnly => set.retain_top(|pe| *pe == status),
    }
    set
}

fn filter_comparison(c: Comparison, track: Track) -> Comparison {
    Comparison {
        added: filter_set(c.added, track),
        modified: filter_set(c.modified, track),
        removed: filter_set(c.removed, track),
    }
}

// =============================================================================================
// Update
// =============================================================================================

/// Records a write that is not an apply (create, update/PUT, JSON/merge/strategic patch) by
/// `req.manager`: `new` is the object about to be stored, `old` the stored one (`None` for a
/// create). Sets `new`'s `metadata.managedFields`:
///
/// * the fields the write added or changed become owned by the manager (one `Update` entry per
///   manager, API version and subresource; its time is `req.now` when it gained fields) and
///   leave every other manager's set; fields it removed leave every set;
/// * the managedFields the request itself carries are the starting point when they are
///   non-empty and valid (that is how clients such as kubectl's client-side-apply upgrade
///   rewrite them); an empty list, or a list of one empty entry, resets them; otherwise (absent
///   or invalid) the stored ones are. Writes to a subresource always start from the stored ones.
///
/// The router must still reimpose server-owned metadata (uid, resourceVersion...) itself.
pub fn record_update(old: Option<&Value>, new: &mut Value, req: &Request) {
    let track = req.track();
    let w = req.walker();
    let stored = || old.map(decode_managed_fields).transpose().ok().flatten().unwrap_or_default();
    let mut entries = if req.subresource.is_some() {
        stored()
    } else {
        match new.pointer("/metadata/managedFields") {
            Some(Value::Array(items)) if is_reset(items) => Vec::new(),
            Some(Value::Array(items)) => match decode_entries(items) {
                Ok(e) if !e.is_empty() => e,
                _ => stored(),
            },
            _ => stored(),
        }
    };
    // Compared in place: the walk passes over managedFields (copies of two whole Agents, inventory
    // and all, were a tenth of the API server's CPU at every write).
    let empty = w.empty_object();
    let cmp = filter_comparison(w.compare(old.unwrap_or(&empty), new), track);
    let changed = cmp.added.union(&cmp.modified);
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    if !changed.is_empty() {
        let pos = entries.iter().position(|e| e.same_identity(req.manager, false, req.api_version, req.subresource));
        let previous = pos.map(|i| entries.remove(i).fields).unwrap_or_default();
        entries.push(ManagedEntry {
            manager: req.manager.to_string(),
            operation: "Update".to_string(),
            api_version: req.api_version.to_string(),
            time: Some(req.now.to_string()),
            subresource: req.subresource.map(str::to_string),
            fields: changed.union(&previous),
        });
    }
    entries.retain(|e| !e.fields.is_empty());
    cap_update_managers(&mut entries);
    encode_managed_fields(new, entries);
}

/// `[]` or `[{}]`: the client asks for managedFields to be cleared.
fn is_reset(items: &[Value]) -> bool {
    match items {
        [] => true,
        [only] => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// Merges the oldest `Update` entries into `ancient-changes` (one per API version) while
/// there are more than [`MAX_UPDATE_MANAGERS`].
fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
    let count = entries.iter().filter(|e| !e.is_apply()).count();
    if count <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut updaters: Vec<usize> = (0..entries.len()).filter(|&i| !entries[i].is_apply()).collect();
    updaters.sort_by(|&a, &b| {
        let (p, q) = (&entries[a], &entries[b]);
        p.time
            .as_deref()
            .unwrap_or("")
            .cmp(q.time.as_deref().unwrap_or(""))
            .then_with(|| p.identifier().cmp(&q.identifier()))
    });
    let mut excess = count - MAX_UPDATE_MANAGERS;
    let mut first_of_version: BTreeMap<String, usize> = BTreeMap::new();
    let mut drop = Vec::new();
    for &i in &updaters {
        if excess == 0 {
            break;
        }
        let version = entries[i].api_version.clone();
        match first_of_version.get(&version) {
            None => {
                first_of_version.insert(version, i);
            }
            Some(&bucket) => {
                let (fields, time) = (entries[i].fields.clone(), entries[i].time.clone());
                let b = &mut entries[bucket];
                b.manager = "ancient-changes".to_string();
                b.subresource = None;
                b.fields = b.fields.union(&fields);
                b.time = time;
                drop.push(i);
                excess -= 1;
            }
        }
    }
    drop.sort_unstable();
    for i in drop.into_iter().rev() {
        entries.remove(i);
    }
}

// =============================================================================================
// Apply
// =============================================================================================

/// Server-side apply of `config` (the applied configuration, parsed from YAML or JSON) by
/// `req.manager` onto `live` (`None`: the apply creates the object). Returns the new object
/// with its managedFields, or why not.
///
/// * The applier owns exactly the fields of its configuration afterwards (entry `Apply`).
/// * A field whose value would change and that another manager owns is a conflict, unless
///   `req.force` (then the other manager loses it). Setting the value another manager already
///   set shares the field.
/// * Fields the applier owned before, left out now and owned by no one else, are removed from
///   the object (with the maps and lists this empties); owned by others, they stay.
/// * `apiVersion`, `kind` and server-set metadata are never tracked. With
///   `req.status_subresource`, `status` is ignored (main resource); for the `status`
///   subresource only `status` is applied.
/// * For manager `kubectl` (kubectl apply --server-side), as upstream: conflicts on fields
///   recorded with the same value in the client-side `last-applied-configuration` annotation
///   are forced, and an existing annotation is rewritten to the new configuration.
///
/// The entry's time moves to `req.now` only when the object or the entry changed.
pub fn apply(live: Option<&Value>, config: &Value, req: &Request) -> Result<Value, ApplyError> {
    let Value::Object(cfg_map) = config else {
        return Err(ApplyError::BadRequest(
            "error decoding YAML: the applied configuration must be an object".to_string(),
        ));
    };
    let cfg_version = cfg_map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let cfg_kind = cfg_map.get("kind").and_then(Value::as_str).unwrap_or("");
    if cfg_version != req.api_version || cfg_kind != req.kind {
        let (group, version) = cfg_version.rsplit_once('/').unwrap_or(("", cfg_version));
        return Err(ApplyError::BadRequest(format!("invalid object type: {group}/{version}, Kind={cfg_kind}")));
    }
    if config.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".to_string()));
    }
    let entries = match live {
        Some(l) => decode_managed_fields(l)
            .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?,
        None => Vec::new(),
    };
    let live_obj = live.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let track = req.track();
    let mut cfg = cfg_map.clone();
    match track {
        Track::All => {}
        Track::NoStatus => {
            cfg.shift_remove("status");
        }
        Track::StatusOnly => cfg.retain(|k, _| k == "status"),
    }
    let cfg = Value::Object(cfg);

    let first = apply_core(&live_obj, &cfg, entries.clone(), req, req.force, track);
    let (mut obj, entries) = match first {
        Err(CoreError::Conflicts(conflicts)) if req.manager == "kubectl" && !req.force => {
            match last_applied_allowed(&live_obj, req) {
                None => return Err(ApplyError::Conflicts(to_conflicts(&conflicts))),
                Some(allowed) => {
                    let left: Vec<(ManagedEntry, FieldSet)> = conflicts
                        .into_iter()
                        .map(|(e, s)| {
                            let rest = s.difference(&allowed);
                            (e, rest)
                        })
                        .filter(|(_, s)| !s.is_empty())
                        .collect();
                    if !left.is_empty() {
                        return Err(ApplyError::Conflicts(to_conflicts(&left)));
                    }
                    apply_core(&live_obj, &cfg, entries, req, true, track).map_err(CoreError::into_apply)?
                }
            }
        }
        other => other.map_err(CoreError::into_apply)?,
    };

    if req.manager == "kubectl" {
        let has = obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if has {
            let text = last_applied_text(config);
            if let Some(Value::Object(ann)) = obj.pointer_mut("/metadata/annotations") {
                ann.insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(text));
            }
        }
    }
    encode_managed_fields(&mut obj, entries);
    Ok(obj)
}

enum CoreError {
    Conflicts(Vec<(ManagedEntry, FieldSet)>),
    Invalid(String),
}

impl CoreError {
    fn into_apply(self) -> ApplyError {
        match self {
            CoreError::Conflicts(c) => ApplyError::Conflicts(to_conflicts(&c)),
            CoreError::Invalid(m) => ApplyError::Invalid(m),
        }
    }
}

/// The apply proper: merge, own, prune, then take the changed fields from the other managers.
fn apply_core(
    live: &Value,
    cfg: &Value,
    mut entries: Vec<ManagedEntry>,
    req: &Request,
    force: bool,
    track: Track,
) -> Result<(Value, Vec<ManagedEntry>), CoreError> {
    let w = req.walker();
    let mut merged =
        w.merge(Some(live), cfg, &mut Cursor::default()).map_err(CoreError::Invalid)?.unwrap_or_else(|| json!({}));
    let new_set = filter_set(w.field_set(cfg, true).map_err(CoreError::Invalid)?, track);

    let me = entries.iter().position(|e| e.same_identity(req.manager, true, req.api_version, req.subresource));
    let previous = me.map(|i| entries.remove(i));
    let last_set = previous.as_ref().map(|e| e.fields.clone()).unwrap_or_default();

    let mut owned = new_set.clone();
    for e in &entries {
        owned.union_with(&e.fields);
    }
    let gone = last_set.difference(&owned);
    if !gone.is_empty() {
        w.prune(&mut merged, &gone, &owned, &mut Cursor::default());
    }

    let cmp = filter_comparison(w.compare(live, &merged), track);
    let changed = cmp.added.union(&cmp.modified);
    let mut conflicts = Vec::new();
    for e in &entries {
        let c = e.fields.intersection(&changed);
        if !c.is_empty() {
            conflicts.push((e.clone(), c));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(CoreError::Conflicts(conflicts));
    }
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    entries.retain(|e| !e.fields.is_empty());

    // As the API server's field manager: an apply that leaves the object as it was keeps the
    // entry's time (a new entry has none).
    let object_changed = !json_eq(live, &merged);
    let time = match &previous {
        _ if object_changed => Some(req.now.to_string()),
        Some(p) => p.time.clone(),
        None => None,
    };
    entries.push(ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".to_string(),
        api_version: req.api_version.to_string(),
        time,
        subresource: req.subresource.map(str::to_string),
        fields: new_set,
    });
    Ok((merged, entries))
}

fn to_conflicts(raw: &[(ManagedEntry, FieldSet)]) -> Conflicts {
    let mut out: Vec<Conflict> = Vec::new();
    for (e, set) in raw {
        let identifier = e.identifier();
        for p in set.paths() {
            out.push(Conflict {
                manager: e.manager.clone(),
                operation: e.operation.clone(),
                api_version: e.api_version.clone(),
                subresource: e.subresource.clone(),
                field: path_to_string(&p),
                identifier: identifier.clone(),
            });
        }
    }
    // Grouped by manager identity (sorted), fields in path order within a manager.
    out.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    Conflicts(out)
}

/// The fields the client-side apply annotation of `live` recorded with the value they still
/// have: an apply by `kubectl` may take them over without conflict (upstream's
/// lastAppliedManager). `None` when there is no usable annotation.
fn last_applied_allowed(live: &Value, req: &Request) -> Option<FieldSet> {
    let text =
        live.pointer("/metadata/annotations")?.get(LAST_APPLIED_ANNOTATION)?.as_str().filter(|s| !s.is_empty())?;
    let last: Value = serde_json::from_str(text).ok()?;
    if !last.is_object() || last.get("apiVersion").and_then(Value::as_str) != Some(req.api_version) {
        return None;
    }
    let w = req.walker();
    let set = w.field_set(&last, false).ok()?;
    let cmp = w.compare(&last, live);
    Some(set.difference(&cmp.modified).difference(&cmp.added).difference(&cmp.removed))
}

/// The applied configuration as the annotation holds it: compact JSON, keys sorted, HTML
/// characters escaped and a final newline (Go's encoder), without the annotation itself.
fn last_applied_text(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(Value::Object(ann)) = c.pointer_mut("/metadata/annotations") {
        ann.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    let mut s = sorted(&c).to_string();
    s = s.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026");
    s = s.replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029");
    s.push('\n');
    s
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: &str = "2024-01-01T00:00:00Z";
    const T1: &str = "2024-01-01T00:01:00Z";
    const T2: &str = "2024-01-01T00:02:00Z";

    fn req<'a>(manager: &'a str, now: &'a str) -> Request<'a> {
        Request::new(manager, "v1", "ConfigMap", now)
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": data})
    }

    fn entries(obj: &Value) -> Vec<Value> {
        obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default()
    }

    fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> &'a Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["manager"] == manager && e["operation"] == operation))
            .unwrap_or_else(|| panic!("no {manager}/{operation} entry in {obj:#}"))
    }

    fn fields_text(obj: &Value, manager: &str, operation: &str) -> String {
        serde_json::to_string(&entry(obj, manager, operation)["fieldsV1"]).unwrap()
    }

    fn conflicts(r: Result<Value, ApplyError>) -> Conflicts {
        match r {
            Err(ApplyError::Conflicts(c)) => c,
            other => panic!("expected conflicts, got {other:?}"),
        }
    }

    #[test]
    fn fields_v1_docs_example_exact() {
        // The ConfigMap of the Kubernetes "Server-Side Apply" page, created by an apply.
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
            "data": {"key": "some value"},
        });
        let obj = apply(None, &config, &req("kubectl", "2010-10-10T00:00:00Z")).unwrap();
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2010-10-10T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}},
            }])
        );
        assert_eq!(
            serde_json::to_string(&obj["metadata"]["managedFields"][0]).unwrap(),
            r#"{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2010-10-10T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}}"#
        );
        assert_eq!(obj["data"], json!({"key": "some value"}));
        assert_eq!(obj["metadata"]["labels"], json!({"test-label": "test"}));
    }

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

    #[test]
    fn reapply_unchanged_changes_nothing() {
        let config = cm(json!({"a": "1"}));
        let first = apply(None, &config, &req("kubectl", T0)).unwrap();
        let second = apply(Some(&first), &config, &req("kubectl", T1)).unwrap();
        assert_eq!(second, first);
        assert_eq!(entry(&second, "kubectl", "Apply")["time"], T0);
    }

    #[test]
    fn apply_changing_a_value_bumps_time() {
        let first = apply(None, &cm(json!({"a": "1"})), &req("kubectl", T0)).unwrap();
        let second = apply(Some(&first), &cm(json!({"a": "2"})), &req("kubectl", T1)).unwrap();
        assert_eq!(second["data"], json!({"a": "2"}));
        assert_eq!(entry(&second, "kubectl", "Apply")["time"], T1);
        assert_eq!(entries(&second).len(), 1);
    }

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
    fn two_managers_share_a_field() {
        let first = apply(None, &cm(json!({"a": "1", "b": "2"})), &req("alice", T0)).unwrap();
        let second = apply(Some(&first), &cm(json!({"a": "1"})), &req("bob", T1)).unwrap();
        assert_eq!(second["data"], first["data"]);
        assert_eq!(fields_text(&second, "alice", "Apply"), r#"{"f:data":{"f:a":{},"f:b":{}}}"#);
        assert_eq!(fields_text(&second, "bob", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        // Alice gives a up: Bob still owns it, it stays.
        let third = apply(Some(&second), &cm(json!({"b": "2"})), &req("alice", T2)).unwrap();
        assert_eq!(third["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(fields_text(&third, "alice", "Apply"), r#"{"f:data":{"f:b":{}}}"#);
        // Bob changing the shared value now would not conflict (he alone owns it).
        let fourth = apply(Some(&third), &cm(json!({"a": "9"})), &req("bob", T2)).unwrap();
        assert_eq!(fourth["data"], json!({"a": "9", "b": "2"}));
    }

    #[test]
    fn conflict_message_and_causes_exact() {
        let first = apply(None, &cm(json!({"a": "1"})), &req("alice", T0)).unwrap();
        let c = conflicts(apply(Some(&first), &cm(json!({"a": "2"})), &req("bob", T1)));
        assert_eq!(c.message(), "Apply failed with 1 conflict: conflict with \"alice\": .data.a");
        assert_eq!(
            c.causes(),
            vec![json!({"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.a"})]
        );
        assert_eq!(c.status()["code"], 409);
        assert_eq!(c.status()["reason"], "Conflict");
        assert_eq!(c.status()["details"]["causes"][0]["field"], ".data.a");
    }

    #[test]
    fn conflicts_with_several_managers() {
        let o = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("zed", T0)).unwrap();
        let mut o2 = o.clone();
        o2["data"]["c"] = json!("1");
        record_update(Some(&o), &mut o2, &req("kubectl-edit", T1));
        let c = conflicts(apply(Some(&o2), &cm(json!({"a": "2", "b": "2", "c": "2"})), &req("kubectl", T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 3 conflicts: conflicts with \"kubectl-edit\" using v1:\n- .data.c\nconflicts with \"zed\":\n- .data.a\n- .data.b"
        );
        assert_eq!(c.causes().len(), 3);
        assert_eq!(c.causes()[0]["message"], "conflict with \"kubectl-edit\" using v1");
    }

    #[test]
    fn force_takes_ownership() {
        let first = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("alice", T0)).unwrap();
        let mut r = req("bob", T1);
        r.force = true;
        let second = apply(Some(&first), &cm(json!({"a": "2"})), &r).unwrap();
        assert_eq!(second["data"], json!({"a": "2", "b": "1"}));
        assert_eq!(fields_text(&second, "alice", "Apply"), r#"{"f:data":{"f:b":{}}}"#);
        assert_eq!(fields_text(&second, "bob", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        // Alice re-applying her old value now conflicts with Bob.
        let c = conflicts(apply(Some(&second), &cm(json!({"a": "1", "b": "1"})), &req("alice", T2)));
        assert_eq!(c.message(), "Apply failed with 1 conflict: conflict with \"bob\": .data.a");
    }

    #[test]
    fn update_then_apply_conflict() {
        let spec = |x: i64| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": x, "y": 1}});
        let r = |m: &'static str, now: &'static str| Request::new(m, "example.com/v1", "Widget", now);
        let created = apply(None, &spec(1), &r("kubectl", T0)).unwrap();
        let mut edited = created.clone();
        edited["spec"]["x"] = json!(5);
        record_update(Some(&created), &mut edited, &r("kubectl-edit", T1));
        assert_eq!(fields_text(&edited, "kubectl-edit", "Update"), r#"{"f:spec":{"f:x":{}}}"#);
        assert_eq!(fields_text(&edited, "kubectl", "Apply"), r#"{"f:spec":{"f:y":{}}}"#);
        let c = conflicts(apply(Some(&edited), &spec(2), &r("kubectl", T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using example.com/v1: .spec.x"
        );
        assert_eq!(c.causes()[0]["message"], "conflict with \"kubectl-edit\" using example.com/v1");
        // Applying the edited value shares it instead.
        let shared = apply(Some(&edited), &spec(5), &r("kubectl", T2)).unwrap();
        assert_eq!(fields_text(&shared, "kubectl", "Apply"), r#"{"f:spec":{"f:x":{},"f:y":{}}}"#);
        assert_eq!(fields_text(&shared, "kubectl-edit", "Update"), r#"{"f:spec":{"f:x":{}}}"#);
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
    fn status_subresource_ownership() {
        let r = |m: &'static str, sub: Option<&'static str>, now: &'static str| {
            let mut q = Request::new(m, "example.com/v1", "Widget", now);
            q.status_subresource = true;
            q.subresource = sub;
            q
        };
        let config = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 1}, "status": {"ready": true}});
        // The main resource ignores status.
        let obj = apply(None, &config, &r("kubectl", None, T0)).unwrap();
        assert!(obj.get("status").is_none());
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:spec":{"f:x":{}}}"#);
        // The status subresource applies status only.
        let config2 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 99}, "status": {"ready": true}});
        let obj2 = apply(Some(&obj), &config2, &r("controller", Some("status"), T1)).unwrap();
        assert_eq!(obj2["spec"], json!({"x": 1}));
        assert_eq!(obj2["status"], json!({"ready": true}));
        let e = entry(&obj2, "controller", "Apply");
        assert_eq!(e["subresource"], "status");
        assert_eq!(serde_json::to_string(&e["fieldsV1"]).unwrap(), r#"{"f:status":{"f:ready":{}}}"#);
        // An update through /status by another manager: conflicts name the subresource.
        let mut obj3 = obj2.clone();
        obj3["status"]["ready"] = json!(false);
        record_update(Some(&obj2), &mut obj3, &r("kubelet", Some("status"), T2));
        let u = entry(&obj3, "kubelet", "Update");
        assert_eq!(u["subresource"], "status");
        let c = conflicts(apply(Some(&obj3), &config2, &r("controller", Some("status"), T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kubelet\" with subresource \"status\" using example.com/v1: .status.ready"
        );
        // A main-resource update that carries status does not own it.
        let mut obj4 = obj3.clone();
        obj4["spec"]["x"] = json!(2);
        record_update(Some(&obj3), &mut obj4, &r("editor", None, T2));
        assert_eq!(fields_text(&obj4, "editor", "Update"), r#"{"f:spec":{"f:x":{}}}"#);
    }

    #[test]
    fn finalizers_are_a_set() {
        let with =
            |f: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "finalizers": f}});
        let a = apply(None, &with(json!(["example.com/a"])), &req("alice", T0)).unwrap();
        let b = apply(Some(&a), &with(json!(["example.com/b"])), &req("bob", T1)).unwrap();
        assert_eq!(b["metadata"]["finalizers"], json!(["example.com/a", "example.com/b"]));
        assert_eq!(fields_text(&b, "bob", "Apply"), r#"{"f:metadata":{"f:finalizers":{"v:\"example.com/b\"":{}}}}"#);
        // Alice drops hers: only hers goes.
        let c = apply(
            Some(&b),
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}),
            &req("alice", T2),
        )
        .unwrap();
        assert_eq!(c["metadata"]["finalizers"], json!(["example.com/b"]));
        // An update adding a finalizer: the list node is owned too when it was added.
        let mut d = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let old = d.clone();
        d["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
        record_update(Some(&old), &mut d, &req("kube-controller-manager", T0));
        assert_eq!(
            fields_text(&d, "kube-controller-manager", "Update"),
            r#"{"f:metadata":{"f:finalizers":{".":{},"v:\"kubernetes.io/pvc-protection\"":{}}}}"#
        );
    }

    #[test]
    fn owner_references_keyed_by_uid() {
        let owner = |uid: &str| json!({"apiVersion": "v1", "kind": "Pod", "name": uid, "uid": uid});
        let mut obj = cm(json!({"a": "1"}));
        let old = obj.clone();
        obj["metadata"]["ownerReferences"] = json!([owner("u1")]);
        record_update(Some(&old), &mut obj, &req("kube-controller-manager", T0));
        assert_eq!(
            fields_text(&obj, "kube-controller-manager", "Update"),
            r#"{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"u1\"}":{}}}}"#
        );
        let mut config = cm(json!({"a": "1"}));
        config["metadata"]["ownerReferences"] = json!([owner("u2")]);
        let applied = apply(Some(&obj), &config, &req("kubectl", T1)).unwrap();
        assert_eq!(applied["metadata"]["ownerReferences"], json!([owner("u1"), owner("u2")]));
        assert_eq!(
            fields_text(&applied, "kubectl", "Apply"),
            r#"{"f:data":{"f:a":{}},"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"u2\"}":{}}}}"#
        );
        // Changing u1 (an atomic item owned by the controller) conflicts.
        let mut changed = owner("u1");
        changed["name"] = json!("renamed");
        config["metadata"]["ownerReferences"] = json!([changed]);
        let c = conflicts(apply(Some(&applied), &config, &req("kubectl", T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kube-controller-manager\" using v1: .metadata.ownerReferences[uid=\"u1\"]"
        );
        // An item without its key is refused.
        config["metadata"]["ownerReferences"] = json!([{"name": "x"}]);
        let e = apply(Some(&applied), &config, &req("kubectl", T2)).unwrap_err();
        assert_eq!(e.http_status(), 422);
        assert!(e.to_string().contains("omits key field \"uid\""), "{e}");
    }

    #[test]
    fn keyed_lists_from_a_schema() {
        struct Ports;
        impl Schema for Ports {
            fn list_type(&self, _kind: &str, path: &[&str]) -> Option<ListType> {
                (path == ["spec", "ports"]).then(|| ListType::Map(vec!["port".into(), "protocol".into()]))
            }
            fn map_type(&self, _kind: &str, path: &[&str]) -> Option<MapType> {
                (path == ["spec", "selector"]).then_some(MapType::Map)
            }
        }
        let r = |m: &'static str, now: &'static str| {
            let mut q = Request::new(m, "example.com/v1", "Svc", now);
            q.schema = &Ports;
            q
        };
        let config = json!({"apiVersion": "example.com/v1", "kind": "Svc", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 80, "protocol": "TCP", "name": "http"}], "selector": {"app": {"deep": 1}}, "tags": ["a"]}});
        let obj = apply(None, &config, &r("kubectl", T0)).unwrap();
        assert_eq!(
            fields_text(&obj, "kubectl", "Apply"),
            r#"{"f:spec":{"f:ports":{"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{}}},"f:selector":{"f:app":{".":{},"f:deep":{}}},"f:tags":{}}}"#
        );
        // Another applier adds a port: the lists merge by key.
        let config2 = json!({"apiVersion": "example.com/v1", "kind": "Svc", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 443, "protocol": "TCP"}]}});
        let obj2 = apply(Some(&obj), &config2, &r("other", T1)).unwrap();
        assert_eq!(
            obj2["spec"]["ports"],
            json!([{"port": 80, "protocol": "TCP", "name": "http"}, {"port": 443, "protocol": "TCP"}])
        );
        // Duplicate keys in a configuration are refused.
        let dup = json!({"apiVersion": "example.com/v1", "kind": "Svc", "metadata": {"name": "s"},
            "spec": {"ports": [{"port": 1, "protocol": "TCP"}, {"port": 1, "protocol": "TCP"}]}});
        let e = apply(Some(&obj2), &dup, &r("other", T1)).unwrap_err();
        assert!(e.to_string().contains("duplicate entries for key [port=1,protocol=\"TCP\"]"), "{e}");
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
    fn record_update_on_create_marks_added_maps() {
        // kubectl create configmap cm --from-literal=a=1, with a label.
        let mut obj = cm(json!({"a": "1"}));
        obj["metadata"]["labels"] = json!({"app": "x"});
        record_update(None, &mut obj, &req("kubectl-create", T0));
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T0,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
            }])
        );
        // A custom resource starts from nothing: spec is added with its node.
        let mut w =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": 1}});
        record_update(None, &mut w, &Request::new("kubectl-create", "example.com/v1", "Widget", T0));
        assert_eq!(fields_text(&w, "kubectl-create", "Update"), r#"{"f:spec":{".":{},"f:x":{}}}"#);
        // A Namespace's spec exists in its empty object: no node.
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {"kubernetes.io/metadata.name": "n"}}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let mut r = Request::new("kubectl-create", "v1", "Namespace", T0);
        r.status_subresource = true;
        record_update(None, &mut ns, &r);
        assert_eq!(
            fields_text(&ns, "kubectl-create", "Update"),
            r#"{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/metadata.name":{}}},"f:spec":{"f:finalizers":{}}}"#
        );
    }

    #[test]
    fn record_update_moves_and_drops_ownership() {
        let created = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("kubectl", T0)).unwrap();
        let mut edited = created.clone();
        edited["data"] = json!({"a": "2"});
        record_update(Some(&created), &mut edited, &req("kubectl-edit", T1));
        assert_eq!(entries(&edited).len(), 1, "kubectl lost a (changed) and b (removed): {edited:#}");
        assert_eq!(fields_text(&edited, "kubectl-edit", "Update"), r#"{"f:data":{"f:a":{}}}"#);
        // A further update by the same manager merges into its entry and moves its time.
        let mut again = edited.clone();
        again["data"]["c"] = json!("3");
        record_update(Some(&edited), &mut again, &req("kubectl-edit", T2));
        let e = entry(&again, "kubectl-edit", "Update");
        assert_eq!(serde_json::to_string(&e["fieldsV1"]).unwrap(), r#"{"f:data":{"f:a":{},"f:c":{}}}"#);
        assert_eq!(e["time"], T2);
        // A no-op update changes nothing.
        let mut same = again.clone();
        record_update(Some(&again), &mut same, &req("someone", T2));
        assert_eq!(same, again);
    }

    #[test]
    fn record_update_honours_and_resets_request_managed_fields() {
        let created = apply(None, &cm(json!({"a": "1"})), &req("kubectl", T0)).unwrap();
        // Cleared with an empty list.
        let mut cleared = created.clone();
        cleared["metadata"]["managedFields"] = json!([]);
        record_update(Some(&created), &mut cleared, &req("kubectl-patch", T1));
        assert!(cleared["metadata"].get("managedFields").is_none(), "{cleared:#}");
        // Cleared with one empty entry.
        let mut cleared = created.clone();
        cleared["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&created), &mut cleared, &req("kubectl-patch", T1));
        assert!(cleared["metadata"].get("managedFields").is_none());
        // Rewritten (what kubectl's client-side-apply upgrade sends as a JSON patch).
        let mut rewritten = created.clone();
        rewritten["metadata"]["managedFields"] = json!([{
            "manager": "someone", "operation": "Update", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}},
        }]);
        record_update(Some(&created), &mut rewritten, &req("kubectl", T1));
        assert_eq!(rewritten["metadata"]["managedFields"].as_array().unwrap().len(), 1);
        assert_eq!(entry(&rewritten, "someone", "Update")["time"], T0);
        // Invalid ones are ignored: the stored ones stay.
        let mut bad = created.clone();
        bad["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Frob"}]);
        record_update(Some(&created), &mut bad, &req("kubectl", T1));
        assert_eq!(bad, created);
        // Ignored for subresources.
        let mut sub = created.clone();
        sub["metadata"]["managedFields"] = json!([]);
        let mut r = req("kubectl", T1);
        r.subresource = Some("status");
        record_update(Some(&created), &mut sub, &r);
        assert_eq!(sub, created);
    }

    #[test]
    fn client_side_apply_then_server_side_apply() {
        // kubectl apply (client side): created by kubectl-client-side-apply with the annotation.
        let mut config = cm(json!({"a": "1"}));
        let mut stored = config.clone();
        stored["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: last_applied_text(&config)});
        record_update(None, &mut stored, &req("kubectl-client-side-apply", T0));
        assert_eq!(
            fields_text(&stored, "kubectl-client-side-apply", "Update"),
            r#"{"f:data":{".":{},"f:a":{}},"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}}}"#
        );
        // kubectl apply --server-side changing a: allowed through the annotation, which is
        // rewritten to the new configuration.
        config["data"]["a"] = json!("2");
        let obj = apply(Some(&stored), &config, &req("kubectl", T1)).unwrap();
        assert_eq!(obj["data"], json!({"a": "2"}));
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        let text = obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str().unwrap();
        assert_eq!(
            text,
            "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"2\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm\",\"namespace\":\"default\"}}\n"
        );
        // Another manager gets no such allowance.
        let c = conflicts(apply(Some(&stored), &config, &req("other", T1)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
        );
        // A field changed since the last client-side apply still conflicts.
        let mut drifted = stored.clone();
        drifted["data"]["a"] = json!("5");
        record_update(Some(&stored), &mut drifted, &req("kubectl-client-side-apply", T1));
        let c = conflicts(apply(Some(&drifted), &config, &req("kubectl", T2)));
        assert_eq!(c.0.len(), 1);
    }

    #[test]
    fn apply_refusals() {
        let mut wrong = cm(json!({"a": "1"}));
        wrong["kind"] = json!("Secret");
        let e = apply(None, &wrong, &req("kubectl", T0)).unwrap_err();
        assert_eq!(e, ApplyError::BadRequest("invalid object type: /v1, Kind=Secret".into()));
        let e = apply(None, &json!({"apiVersion": "apps/v1", "kind": "ConfigMap"}), &req("kubectl", T0)).unwrap_err();
        assert_eq!(e.to_string(), "invalid object type: apps/v1, Kind=ConfigMap");
        let mut with_mf = cm(json!({}));
        with_mf["metadata"]["managedFields"] = json!([]);
        let e = apply(None, &with_mf, &req("kubectl", T0)).unwrap_err();
        assert_eq!(e, ApplyError::BadRequest("metadata.managedFields must be nil".into()));
        assert_eq!(e.http_status(), 400);
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
    fn server_metadata_is_never_tracked() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "cm", "namespace": "d", "uid": "u", "resourceVersion": "3", "generation": 1,
            "creationTimestamp": "2020-01-01T00:00:00Z", "annotations": {"a": "b"}}});
        let obj = apply(None, &config, &req("kubectl", T0)).unwrap();
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:metadata":{"f:annotations":{"f:a":{}}}}"#);
    }

    #[test]
    fn managed_fields_sorted_and_capped() {
        let mut obj = apply(None, &cm(json!({"a": "0"})), &req("applier", T0)).unwrap();
        for i in 0..12 {
            let mut next = obj.clone();
            next["data"][format!("k{i}")] = json!("v");
            let now = format!("2024-01-01T00:{:02}:00Z", i + 1);
            let manager = format!("m{i:02}");
            record_update(Some(&obj), &mut next, &req(&manager, &now));
            obj = next;
        }
        let list = entries(&obj);
        assert_eq!(list.len(), 11, "one applier and ten updaters");
        assert_eq!(list[0]["operation"], "Apply");
        let names: Vec<&str> = list[1..].iter().map(|e| e["manager"].as_str().unwrap()).collect();
        let mut want = vec!["ancient-changes".to_string()];
        want.extend((3..12).map(|i| format!("m{i:02}")));
        assert_eq!(names, want);
        let ancient = entry(&obj, "ancient-changes", "Update");
        assert_eq!(
            serde_json::to_string(&ancient["fieldsV1"]).unwrap(),
            r#"{"f:data":{"f:k0":{},"f:k1":{},"f:k2":{}}}"#
        );
        // Sorted by time among updaters.
        let times: Vec<&str> = list[1..].iter().map(|e| e["time"].as_str().unwrap()).collect();
        let mut sorted_times = times.clone();
        sorted_times.sort();
        assert_eq!(times, sorted_times);
    }

    #[test]
    fn atomic_maps_and_empty_maps() {
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R", "source": {"component": "c"}});
        let r = Request::new("kubectl", "v1", "Event", T0);
        let obj = apply(None, &ev, &r).unwrap();
        assert_eq!(
            fields_text(&obj, "kubectl", "Apply"),
            r#"{"f:involvedObject":{},"f:reason":{},"f:source":{"f:component":{}}}"#
        );
        let empty = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {}});
        let obj = apply(None, &empty, &Request::new("kubectl", "example.com/v1", "W", T0)).unwrap();
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:spec":{}}"#);
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
