//! The schemas of custom resources, from their CRDs.

use serde_json::{Map, Value, json};

use super::schema::{META, METADATA_DESC, ref_obj, type_meta_props};
use crate::api::kube::served::Served;

/// The served version's `openAPIV3Schema` of the CRD that defines `s`.
pub(super) fn crd_schema<'a>(s: &Served, crds: &'a [Value]) -> Option<&'a Value> {
    crds.iter()
        .filter(|c| c["spec"]["group"] == s.group.as_str() && c["spec"]["names"]["kind"] == s.kind.as_str())
        .flat_map(|c| c["spec"]["versions"].as_array().into_iter().flatten())
        .find(|v| v["name"] == s.version.as_str())
        .and_then(|v| v.get("schema"))
        .and_then(|v| v.get("openAPIV3Schema"))
}

/// Walks a structural schema, applying `f` to every (sub)schema, children
/// first.
fn walk_schema(v: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(m) = v else { return };
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            walk_schema(p, f);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child @ Value::Object(_)) = m.get_mut(key) {
            walk_schema(child, f);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = m.get_mut(key) {
            for child in a {
                walk_schema(child, f);
            }
        }
    }
    f(m);
}

pub(super) fn crd_kind_schema(s: &Served, crds: &[Value]) -> Value {
    let Some(schema) = crd_schema(s, crds) else {
        return json!({"type": "object", "x-kubernetes-group-version-kind": [s.gvk_json()]});
    };
    let mut v = schema.clone();
    // Unfold the structural shorthands as the API server does.
    walk_schema(&mut v, &mut |m| {
        if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !m.contains_key("anyOf") {
            m.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
        }
        if m.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
            let (api_version, kind) = type_meta_props();
            let props = m.entry("properties").or_insert_with(|| json!({}));
            if let Value::Object(p) = props {
                p.insert("apiVersion".into(), api_version);
                p.insert("kind".into(), kind);
                p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
            }
            let req = m.entry("required").or_insert_with(|| json!([]));
            if let Value::Array(a) = req {
                for k in ["kind", "apiVersion"] {
                    if !a.iter().any(|x| x == k) {
                        a.push(k.into());
                    }
                }
            }
        }
    });
    let m = v.as_object_mut().unwrap();
    let (api_version, kind) = type_meta_props();
    let props = m.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(p) = props {
        p.insert("apiVersion".into(), api_version);
        p.insert("kind".into(), kind);
        p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
    }
    m.insert("x-kubernetes-group-version-kind".into(), json!([s.gvk_json()]));
    v
}
