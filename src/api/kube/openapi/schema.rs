//! How the schemas are written: names, `$ref`s, the common parts of kinds and lists.

use serde_json::{Value, json};

use crate::api::kube::served::Served;

pub(super) const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";
pub(super) const V3_REF: &str = "#/components/schemas/";

pub(super) fn r(name: &str) -> Value {
    json!({"$ref": format!("{V3_REF}{name}")})
}

pub(super) fn ref_obj(name: &str, description: &str) -> Value {
    json!({"allOf": [r(name)], "default": {}, "description": description})
}

pub(super) fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

pub(super) fn gvk_ext(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

const API_VERSION_DESC: &str =
    "Versioned schema of this representation of an object (group/version), e.g. `agent-install.openshift.io/v1beta1`.";
const KIND_DESC: &str = "Kind of the object, in CamelCase (e.g. `Agent`).";
pub(super) const METADATA_DESC: &str = "Standard object metadata: name, namespace, labels, annotations, ...";
pub(super) const LIST_METADATA_DESC: &str = "Standard list metadata (resourceVersion, continue token).";

pub(super) fn type_meta_props() -> (Value, Value) {
    (string(API_VERSION_DESC), string(KIND_DESC))
}

/// Standard resource schema: apiVersion, kind, metadata + `props`.
pub(super) fn resource_schema(s: &Served, description: &str, props: Value, required: &[&str]) -> Value {
    let (api_version, kind) = type_meta_props();
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert("apiVersion".into(), api_version);
    p.insert("kind".into(), kind);
    p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
    let mut v = json!({
        "type": "object",
        "description": description,
        "properties": p,
        "x-kubernetes-group-version-kind": [s.gvk_json()],
    });
    if !required.is_empty() {
        v["required"] = json!(required);
    }
    v
}

pub(super) fn list_schema(s: &Served, item_schema: &str) -> Value {
    let (api_version, kind) = type_meta_props();
    json!({
        "type": "object",
        "description": format!("{} is a list of {}.", s.list_kind, s.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": api_version,
            "items": {"type": "array", "items": r(item_schema),
                      "description": format!("The {}.", s.plural)},
            "kind": kind,
            "metadata": ref_obj(&format!("{META}ListMeta"), LIST_METADATA_DESC),
        },
        "x-kubernetes-group-version-kind": [s.list_gvk_json()],
    })
}

/// Schema name the API server gives a kind: core `io.k8s.api.core.v1.Secret`,
/// `io.k8s.api.coordination.v1.Lease`, CRDs by reversed group
/// (`io.openshift.agent-install.v1beta1.InfraEnv`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() {
        return format!("io.k8s.api.core.{version}.{kind}");
    }
    if let Some(g) = group.strip_suffix(".k8s.io")
        && !g.contains('.')
    {
        return format!("io.k8s.api.{g}.{version}.{kind}");
    }
    let rev: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", rev.join("."))
}

pub(super) fn kind_schema_name(s: &Served) -> String {
    schema_name(&s.group, &s.version, &s.kind)
}

pub(super) fn list_schema_name(s: &Served) -> String {
    schema_name(&s.group, &s.version, &s.list_kind)
}

pub(super) fn is_core(s: &Served) -> bool {
    s.group.is_empty() || s.group.ends_with(".k8s.io") && !s.group.trim_end_matches(".k8s.io").contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names() {
        assert_eq!(
            schema_name("agent-install.openshift.io", "v1beta1", "InfraEnv"),
            "io.openshift.agent-install.v1beta1.InfraEnv"
        );
        assert_eq!(schema_name("", "v1", "Secret"), "io.k8s.api.core.v1.Secret");
        assert_eq!(schema_name("coordination.k8s.io", "v1", "Lease"), "io.k8s.api.coordination.v1.Lease");
        assert_eq!(schema_name("metal3.io", "v1alpha1", "BareMetalHost"), "io.metal3.v1alpha1.BareMetalHost");
    }
}
