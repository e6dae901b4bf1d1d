//! Ignition's parent/child config merge, on JSON values.
//!
//! The rules are those of coreos/ignition `config/merge`, which is what Ignition applies to
//! `ignition.config.merge` and what assisted-service applies to overrides:
//!
//! - objects (Go structs) merge field by field, recursively;
//! - scalars (Go primitives and pointers) are replaced by the child's value when the child
//!   sets one;
//! - `storage.files[].append`, filesystem/raid/luks `options` and filesystem `mountOptions`
//!   are concatenated (parent entries first);
//! - other lists of objects are merged by key — path, name, device, source, url, or a
//!   partition's number/label: an entry whose key is in both is merged, parent entries keep
//!   their order, child-only entries are appended;
//! - `storage.files`, `directories` and `links` share one key space (the path): a child entry
//!   of one kind drops the parent's entry of another kind at that path;
//! - a child HTTP header without a `value` deletes the parent's header of that name;
//! - lists of strings (`sshAuthorizedKeys`, user `groups`, `noProxy`, raid `devices`) are
//!   unions: parent entries, then the child's new ones.
//!
//! Working on `serde_json::Value`s (after the typed parse has checked the shapes) keeps one
//! implementation for every spec version, the way Ignition's reflection-based merge does. The
//! values must be free of `null`s, which the typed serialization produces for unset fields.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

/// The Ignition struct a JSON object stands for, as far as merging cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Root,
    Ignition,
    IgnitionConfig,
    Security,
    Tls,
    Resource,
    Passwd,
    Storage,
    File,
    Disk,
    Filesystem,
    Raid,
    Luks,
    Clevis,
    Systemd,
    Unit,
    /// Anything without lists that need special treatment.
    Plain,
}

fn field_kind(parent: Kind, field: &str) -> Kind {
    match (parent, field) {
        (Kind::Root, "ignition") => Kind::Ignition,
        (Kind::Root, "passwd") => Kind::Passwd,
        (Kind::Root, "storage") => Kind::Storage,
        (Kind::Root, "systemd") => Kind::Systemd,
        (Kind::Ignition, "config") => Kind::IgnitionConfig,
        (Kind::Ignition, "security") => Kind::Security,
        (Kind::IgnitionConfig, "merge" | "replace") => Kind::Resource,
        (Kind::Security, "tls") => Kind::Tls,
        (Kind::Tls, "certificateAuthorities") => Kind::Resource,
        (Kind::Storage, "files") => Kind::File,
        (Kind::Storage, "disks") => Kind::Disk,
        (Kind::Storage, "filesystems") => Kind::Filesystem,
        (Kind::Storage, "raid") => Kind::Raid,
        (Kind::Storage, "luks") => Kind::Luks,
        (Kind::File, "contents" | "append") => Kind::Resource,
        (Kind::Luks, "clevis") => Kind::Clevis,
        (Kind::Luks, "keyFile") => Kind::Resource,
        (Kind::Systemd, "units") => Kind::Unit,
        _ => Kind::Plain,
    }
}

/// How a list field merges.
#[derive(Debug, Clone, Copy)]
enum ListRule {
    /// Concatenate, keeping duplicates.
    Append,
    /// Merge entries by the string value of this field.
    KeyedBy(&'static str),
    /// Merge partitions by `number:<n>` or `label:<l>`.
    Partitions,
    /// Keyed by `name`; a child entry without `value` removes the parent's.
    Headers,
    /// Union of scalar values.
    Scalars,
}

fn list_rule(parent: Kind, field: &str) -> ListRule {
    match (parent, field) {
        (Kind::File, "append")
        | (Kind::Filesystem, "options" | "mountOptions")
        | (Kind::Raid, "options")
        | (Kind::Luks, "options") => ListRule::Append,
        (Kind::Resource, "httpHeaders") => ListRule::Headers,
        (Kind::IgnitionConfig, "merge") | (Kind::Tls, "certificateAuthorities") => ListRule::KeyedBy("source"),
        (Kind::Passwd, "users" | "groups")
        | (Kind::Storage, "raid" | "luks")
        | (Kind::Systemd, "units")
        | (Kind::Unit, "dropins") => ListRule::KeyedBy("name"),
        (Kind::Storage, "disks" | "filesystems") => ListRule::KeyedBy("device"),
        (Kind::Storage, "files" | "directories" | "links") => ListRule::KeyedBy("path"),
        (Kind::Disk, "partitions") => ListRule::Partitions,
        (Kind::Clevis, "tang") => ListRule::KeyedBy("url"),
        _ => ListRule::Scalars,
    }
}

/// The three storage lists whose entries share the path key space, in Ignition's field order.
const NODE_LISTS: [&str; 3] = ["directories", "files", "links"];

/// Merges `child` into `parent` (both whole configs as JSON objects).
pub(super) fn merge_configs(parent: &Map<String, Value>, child: &Map<String, Value>) -> Map<String, Value> {
    merge_object(parent, child, Kind::Root)
}

fn merge_object(parent: &Map<String, Value>, child: &Map<String, Value>, kind: Kind) -> Map<String, Value> {
    let mut result = parent.clone();
    for (field, child_value) in child {
        if child_value.is_null() || (kind == Kind::Storage && NODE_LISTS.contains(&field.as_str())) {
            continue;
        }
        let merged = match result.get(field) {
            None | Some(Value::Null) => child_value.clone(),
            Some(Value::Object(p)) => match child_value {
                Value::Object(c) => Value::Object(merge_object(p, c, field_kind(kind, field))),
                other => other.clone(),
            },
            Some(Value::Array(p)) => match child_value {
                Value::Array(c) => Value::Array(merge_list(p, c, list_rule(kind, field), field_kind(kind, field))),
                other => other.clone(),
            },
            Some(_) => child_value.clone(),
        };
        result.insert(field.clone(), merged);
    }
    if kind == Kind::Storage {
        merge_nodes(parent, child, &mut result);
    }
    result
}

fn merge_list(parent: &[Value], child: &[Value], rule: ListRule, item_kind: Kind) -> Vec<Value> {
    match rule {
        ListRule::Append => parent.iter().chain(child).cloned().collect(),
        ListRule::Scalars => merge_keyed(parent, child, scalar_key, item_kind, false),
        ListRule::KeyedBy(field) => merge_keyed(parent, child, |v| field_key(v, field), item_kind, false),
        ListRule::Partitions => merge_keyed(parent, child, partition_key, item_kind, false),
        ListRule::Headers => merge_keyed(parent, child, |v| field_key(v, "name"), item_kind, true),
    }
}

/// Keyed list merge: parent entries in order (merged with the child's entry of the same key,
/// the last one if the child repeats a key), then child entries with keys new to the parent.
fn merge_keyed(
    parent: &[Value],
    child: &[Value],
    key: impl Fn(&Value) -> String,
    item_kind: Kind,
    headers: bool,
) -> Vec<Value> {
    let child_by_key: HashMap<String, &Value> = child.iter().map(|c| (key(c), c)).collect();
    let parent_keys: HashSet<String> = parent.iter().map(&key).collect();
    let mut result = Vec::with_capacity(parent.len() + child.len());
    for p in parent {
        match child_by_key.get(&key(p)) {
            Some(c) => {
                if headers && c.get("value").is_none_or(Value::is_null) {
                    continue;
                }
                result.push(merge_item(p, c, item_kind));
            }
            None => result.push(p.clone()),
        }
    }
    result.extend(child.iter().filter(|c| !parent_keys.contains(&key(c))).cloned());
    result
}

fn merge_item(parent: &Value, child: &Value, kind: Kind) -> Value {
    match (parent, child) {
        (Value::Object(p), Value::Object(c)) => Value::Object(merge_object(p, c, kind)),
        _ => child.clone(),
    }
}

/// `storage.directories`, `files` and `links`, keyed by path across all three lists.
fn merge_nodes(parent: &Map<String, Value>, child: &Map<String, Value>, result: &mut Map<String, Value>) {
    let list = |m: &'_ Map<String, Value>, name: &str| -> Vec<Value> {
        m.get(name).and_then(Value::as_array).cloned().unwrap_or_default()
    };
    // Where each path lives in the child; a later list wins, as in Ignition.
    let mut child_index: HashMap<String, (&str, Value)> = HashMap::new();
    for name in NODE_LISTS {
        for entry in list(child, name) {
            child_index.insert(field_key(&entry, "path"), (name, entry));
        }
    }
    for name in NODE_LISTS {
        let parent_list = list(parent, name);
        let child_list = list(child, name);
        if !parent.contains_key(name) && !child.contains_key(name) {
            continue;
        }
        let kind = if name == "files" { Kind::File } else { Kind::Plain };
        let parent_keys: HashSet<String> = parent_list.iter().map(|p| field_key(p, "path")).collect();
        let mut merged = Vec::with_capacity(parent_list.len() + child_list.len());
        for p in &parent_list {
            match child_index.get(&field_key(p, "path")) {
                Some((list_name, c)) if *list_name == name => merged.push(merge_item(p, c, kind)),
                // Replaced by an entry of another kind; that list appends it.
                Some(_) => {}
                None => merged.push(p.clone()),
            }
        }
        merged.extend(child_list.into_iter().filter(|c| !parent_keys.contains(&field_key(c, "path"))));
        result.insert(name.to_owned(), Value::Array(merged));
    }
}

fn field_key(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn scalar_key(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn partition_key(value: &Value) -> String {
    match value.get("number").and_then(Value::as_i64) {
        Some(n) if n != 0 => format!("number:{n}"),
        _ => match value.get("label").and_then(Value::as_str) {
            Some(label) => format!("label:{label}"),
            None => String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(parent: Value, child: Value) -> Value {
        Value::Object(merge_configs(parent.as_object().unwrap(), child.as_object().unwrap()))
    }

    #[test]
    fn files_merge_by_path_and_fields_override() {
        let out = merged(
            json!({"storage": {"files": [
                {"path": "/a", "mode": 420, "contents": {"source": "data:,a", "compression": "gzip"}},
                {"path": "/b", "mode": 420}
            ]}}),
            json!({"storage": {"files": [
                {"path": "/a", "contents": {"source": "data:,A"}},
                {"path": "/c"}
            ]}}),
        );
        assert_eq!(
            out,
            json!({"storage": {"files": [
                {"path": "/a", "mode": 420, "contents": {"source": "data:,A", "compression": "gzip"}},
                {"path": "/b", "mode": 420},
                {"path": "/c"}
            ]}})
        );
    }

    #[test]
    fn node_kinds_share_paths() {
        let out = merged(
            json!({"storage": {"files": [{"path": "/x"}, {"path": "/y"}], "links": [{"path": "/z", "target": "/y"}]}}),
            json!({"storage": {"links": [{"path": "/x", "target": "/y"}], "directories": [{"path": "/z"}]}}),
        );
        assert_eq!(
            out,
            json!({"storage": {
                "files": [{"path": "/y"}],
                "links": [{"path": "/x", "target": "/y"}],
                "directories": [{"path": "/z"}]
            }})
        );
    }

    #[test]
    fn append_lists_concatenate_and_scalars_union() {
        let out = merged(
            json!({"storage": {"files": [{"path": "/a", "append": [{"source": "data:,1"}]}]},
                   "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2"], "groups": ["sudo"]}]}}),
            json!({"storage": {"files": [{"path": "/a", "append": [{"source": "data:,1"}]}]},
                   "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k2", "k3"]}, {"name": "x"}]}}),
        );
        assert_eq!(
            out,
            json!({"storage": {"files": [{"path": "/a", "append": [{"source": "data:,1"}, {"source": "data:,1"}]}]},
                   "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k1", "k2", "k3"], "groups": ["sudo"]}, {"name": "x"}]}})
        );
    }

    #[test]
    fn units_and_dropins_merge_by_name() {
        let out = merged(
            json!({"systemd": {"units": [{"name": "a.service", "enabled": true, "contents": "x",
                                         "dropins": [{"name": "1.conf", "contents": "1"}]}]}}),
            json!({"systemd": {"units": [{"name": "a.service", "enabled": false,
                                         "dropins": [{"name": "1.conf", "contents": "one"}, {"name": "2.conf", "contents": "2"}]}]}}),
        );
        assert_eq!(
            out,
            json!({"systemd": {"units": [{"name": "a.service", "enabled": false, "contents": "x",
                                         "dropins": [{"name": "1.conf", "contents": "one"}, {"name": "2.conf", "contents": "2"}]}]}})
        );
    }

    #[test]
    fn headers_without_value_are_removed() {
        let out = merged(
            json!({"ignition": {"config": {"merge": [{"source": "https://h/c", "httpHeaders": [
                {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}),
            json!({"ignition": {"config": {"merge": [{"source": "https://h/c", "httpHeaders": [
                {"name": "A"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}}),
        );
        assert_eq!(
            out,
            json!({"ignition": {"config": {"merge": [{"source": "https://h/c", "httpHeaders": [
                {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}})
        );
    }

    #[test]
    fn partitions_key_on_number_then_label() {
        let out = merged(
            json!({"storage": {"disks": [{"device": "/dev/sda", "partitions": [
                {"number": 1, "sizeMiB": 10}, {"label": "data", "sizeMiB": 5}]}]}}),
            json!({"storage": {"disks": [{"device": "/dev/sda", "wipeTable": true, "partitions": [
                {"number": 1, "sizeMiB": 20}, {"label": "data", "startMiB": 1}, {"number": 3}]}]}}),
        );
        assert_eq!(
            out,
            json!({"storage": {"disks": [{"device": "/dev/sda", "wipeTable": true, "partitions": [
                {"number": 1, "sizeMiB": 20}, {"label": "data", "sizeMiB": 5, "startMiB": 1}, {"number": 3}]}]}})
        );
    }

    #[test]
    fn proxy_scalars_and_no_proxy_union() {
        let out = merged(
            json!({"ignition": {"version": "3.1.0", "proxy": {"httpProxy": "http://a", "noProxy": ["x", "y"]}}}),
            json!({"ignition": {"version": "3.2.0", "proxy": {"httpProxy": "http://b", "noProxy": ["y", "z"]}}}),
        );
        assert_eq!(
            out,
            json!({"ignition": {"version": "3.2.0", "proxy": {"httpProxy": "http://b", "noProxy": ["x", "y", "z"]}}})
        );
    }
}
