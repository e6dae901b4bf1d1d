//! `metadata.managedFields`: its entries, read from and written to objects, and the cap on the
//! number of `Update` entries.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::fieldset::{FieldSet, FieldsV1Error};

/// The most `Update` entries kept; older ones merge into an `ancient-changes` entry.
pub const MAX_UPDATE_MANAGERS: usize = 10;

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
    pub(super) fn same_identity(
        &self,
        manager: &str,
        apply: bool,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.is_apply() == apply
            && self.subresource.as_deref() == subresource
            && (apply || self.api_version == api_version)
    }

    /// The identity as the API server encodes it (JSON of the entry without time, fields and,
    /// for appliers, API version); conflicts are grouped and sorted by it.
    pub(super) fn identifier(&self) -> String {
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

    fn from_json(i: usize, v: &Value) -> Result<ManagedEntry, ManagedFieldsError> {
        let Value::Object(m) = v else {
            return Err(ManagedFieldsError::EntryNotAnObject(i));
        };
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let operation = s("operation");
        if operation != "Apply" && operation != "Update" {
            return Err(ManagedFieldsError::Operation);
        }
        let api_version = s("apiVersion");
        if api_version.is_empty() {
            return Err(ManagedFieldsError::NoApiVersion);
        }
        match s("fieldsType").as_str() {
            "FieldsV1" => {}
            "" => return Err(ManagedFieldsError::NoFieldsType(i)),
            other => return Err(ManagedFieldsError::FieldsType(i, other.to_string())),
        }
        let fields = match m.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(f) => FieldSet::from_fields_v1(f).map_err(ManagedFieldsError::Set)?,
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
pub fn decode_managed_fields(obj: &Value) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => decode_entries(items),
        Some(_) => Err(ManagedFieldsError::NotAList),
    }
}

pub(super) fn decode_entries(items: &[Value]) -> Result<Vec<ManagedEntry>, ManagedFieldsError> {
    let mut out: Vec<ManagedEntry> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let e = ManagedEntry::from_json(i, item)?;
        out.retain(|o| !o.same_identity(&e.manager, e.is_apply(), &e.api_version, e.subresource.as_deref()));
        out.push(e);
    }
    Ok(out)
}

/// Stored managedFields that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManagedFieldsError {
    #[error("metadata.managedFields must be a list")]
    NotAList,
    #[error("managed fields entry {0} is not an object")]
    EntryNotAnObject(usize),
    #[error("operation must be `Apply` or `Update`")]
    Operation,
    #[error("apiVersion must not be empty")]
    NoApiVersion,
    #[error("missing fieldsType in managed fields entry {0}")]
    NoFieldsType(usize),
    #[error("invalid fieldsType {1:?} in managed fields entry {0}")]
    FieldsType(usize, String),
    #[error("error decoding set")]
    Set(#[source] FieldsV1Error),
}

/// Writes the entries (those with an empty set dropped, sorted as upstream sorts them:
/// appliers first, then by time, manager, API version, subresource) into
/// `metadata.managedFields`, removing it when there are none.
pub(super) fn encode_managed_fields(obj: &mut Value, mut entries: Vec<ManagedEntry>) {
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

pub(super) fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(Value::Object(meta)) = o.get_mut("metadata") {
        meta.shift_remove("managedFields");
    }
    o
}

/// Merges the oldest `Update` entries into `ancient-changes` (one per API version) while
/// there are more than [`MAX_UPDATE_MANAGERS`].
pub(super) fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
