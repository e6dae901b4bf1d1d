//! What a write tracks: never type meta or server-set metadata, and `status` depending on the
//! subresource written.

use super::fieldset::FieldSet;
use super::path::PathElement;
use super::walk::Comparison;

/// Which top-level fields a write tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Track {
    All,
    NoStatus,
    StatusOnly,
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
pub(super) fn filter_set(mut set: FieldSet, track: Track) -> FieldSet {
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

pub(super) fn filter_comparison(c: Comparison, track: Track) -> Comparison {
    Comparison {
        added: filter_set(c.added, track),
        modified: filter_set(c.modified, track),
        removed: filter_set(c.removed, track),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
    fn server_metadata_is_never_tracked() {
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "cm", "namespace": "d", "uid": "u", "resourceVersion": "3", "generation": 1,
            "creationTimestamp": "2020-01-01T00:00:00Z", "annotations": {"a": "b"}}});
        let obj = apply(None, &config, &req("kubectl", T0)).unwrap();
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:metadata":{"f:annotations":{"f:a":{}}}}"#);
    }
}
