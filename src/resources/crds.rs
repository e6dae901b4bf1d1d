//! The CustomResourceDefinitions of our kinds, generated from the Rust types (`bootstream crds`), so that
//! a real Kubernetes hub can serve the same objects. `deploy/crds/` holds the committed output; the tests
//! in `tests/crds.rs` keep it current and compare it with the upstream CRDs in
//! `../shared/fixtures/assisted/crds/`.

use std::collections::HashSet;
use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceSubresources, JSONSchemaProps,
};
use kube::CustomResourceExt;
use serde_json::Value;

use super::{Agent, InfraEnv, NMStateConfig};
use super::{AgentClusterInstall, BareMetalHost, ClusterDeployment, ClusterImageSet, PreprovisioningImage};

/// Every CRD we define, in a fixed order.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        InfraEnv::crd(),
        NMStateConfig::crd(),
        Agent::crd(),
        ClusterDeployment::crd(),
        AgentClusterInstall::crd(),
        ClusterImageSet::crd(),
        BareMetalHost::crd(),
        PreprovisioningImage::crd(),
    ];
    for crd in &mut crds {
        adjust(crd);
    }
    crds
}

/// The file name of a CRD in `deploy/crds/`: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.{}.yaml", crd.spec.names.plural, crd.spec.group)
}

/// One CRD as a YAML document (without the `---` separator).
pub fn to_yaml(crd: &CustomResourceDefinition) -> String {
    yaml_serde::to_string(crd).expect("CRDs serialize to YAML")
}

/// All CRDs as one multi-document YAML stream.
pub fn all_yaml() -> String {
    all().iter().map(|crd| format!("---\n{}", to_yaml(crd))).collect()
}

/// Writes one file per CRD into `dir` (created if missing) and returns the file names written.
pub fn write_dir(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut names = vec![];
    for crd in all() {
        let name = file_name(&crd);
        std::fs::write(dir.join(&name), to_yaml(&crd))?;
        names.push(name);
    }
    Ok(names)
}

/// What the derive cannot express, and clean-ups that keep the schemas structural.
fn adjust(crd: &mut CustomResourceDefinition) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceSubresourceStatus;
    // NMStateConfig has a status subresource upstream although its schema has no status.
    if crd.spec.names.kind == "NMStateConfig" {
        for v in &mut crd.spec.versions {
            v.subresources.get_or_insert_with(CustomResourceSubresources::default).status =
                Some(CustomResourceSubresourceStatus(serde_json::json!({})));
        }
    }
    let foreign = k8s_descriptions();
    for v in &mut crd.spec.versions {
        if let Some(schema) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            let mut value = serde_json::to_value(&*schema).expect("schemas serialize");
            clean(&mut value, &foreign);
            // The fields every object has, as controller-gen writes them.
            if let Some(props) = value.get_mut("properties").and_then(Value::as_object_mut) {
                props.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
                props.insert("kind".into(), serde_json::json!({"type": "string"}));
                props.insert("metadata".into(), serde_json::json!({"type": "object"}));
            }
            *schema = serde_json::from_value::<JSONSchemaProps>(value).expect("cleaned schemas parse");
        }
    }
}

/// The descriptions k8s-openapi gives the Kubernetes types our resources embed (Time, Condition, EnvVar,
/// Taint, ObjectReference and what they contain). The CRDs leave them out: their descriptions are our
/// own doc comments only.
fn k8s_descriptions() -> HashSet<String> {
    use k8s_openapi::api::core::v1::{EnvVar, ObjectReference, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    let schemas = [
        generator.root_schema_for::<Time>(),
        generator.root_schema_for::<Condition>(),
        generator.root_schema_for::<EnvVar>(),
        generator.root_schema_for::<Taint>(),
        generator.root_schema_for::<ObjectReference>(),
    ];
    fn collect(v: &Value, out: &mut HashSet<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(d)) = o.get("description") {
                    out.insert(d.clone());
                }
                o.values().for_each(|c| collect(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| collect(c, out)),
            _ => {}
        }
    }
    let mut out = HashSet::new();
    for s in schemas {
        collect(&serde_json::to_value(s).expect("schemas serialize"), &mut out);
    }
    out
}

/// Walks a schema node and what it contains. Drops `default`: serde defaults make our parsing lenient,
/// they are not values the API server should write into objects (and a default that does not validate
/// gets the CRD rejected). Drops `nullable: false`, which says nothing, and the descriptions in
/// `foreign`.
fn clean(v: &mut Value, foreign: &HashSet<String>) {
    let Some(o) = v.as_object_mut() else { return };
    o.remove("default");
    if o.get("description").and_then(Value::as_str).is_some_and(|d| foreign.contains(d)) {
        o.remove("description");
    }
    if o.get("nullable") == Some(&Value::Bool(false)) {
        o.remove("nullable");
    }
    if let Some(props) = o.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(|p| clean(p, foreign));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = o.get_mut(key) {
            clean(sub, foreign);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = o.get_mut(key).and_then(Value::as_array_mut) {
            branches.iter_mut().for_each(|b| clean(b, foreign));
        }
    }
}
