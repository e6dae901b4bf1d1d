//! Which lists and maps are granular: the [`Schema`] a write is walked with, and the built-in
//! answers for ObjectMeta and the core kinds served.

use serde_json::{Value, json};

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

pub(super) static BUILTIN: BuiltinSchema = BuiltinSchema;

pub(super) fn builtin_list_type(kind: &str, path: &[&str]) -> ListType {
    match (kind, path) {
        (_, ["metadata", "finalizers"]) => ListType::Set,
        (_, ["metadata", "ownerReferences"]) => ListType::Map(vec!["uid".to_string()]),
        ("Namespace", ["status", "conditions"]) => ListType::Map(vec!["type".to_string()]),
        _ => ListType::Atomic,
    }
}

pub(super) fn builtin_map_type(kind: &str, path: &[&str]) -> MapType {
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

pub(super) fn builtin_empty_object(kind: &str) -> Value {
    match kind {
        "ConfigMap" | "Secret" => json!({"metadata": {}}),
        "Namespace" => json!({"metadata": {}, "spec": {}, "status": {}}),
        "Lease" => json!({"metadata": {}, "spec": {}}),
        "Event" => json!({"metadata": {}, "involvedObject": {}, "source": {}}),
        // Custom resources start from nothing.
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

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
}
