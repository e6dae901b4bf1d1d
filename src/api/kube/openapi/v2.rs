//! OpenAPI v2 (swagger 2.0): the v3 schemas and operations, converted.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::components::{all_schemas, collect_refs};
use super::crd::crd_schema;
use super::operations::{Op, PRETTY, gv_id, kind_paths, path_params};
use super::schema::{META, V3_REF, kind_schema_name, list_schema_name};
use crate::api::kube::discovery::DEFAULT_GIT_VERSION;
use crate::api::kube::served::Served;

const V2_REF: &str = "#/definitions/";

fn to_v2_schema(v: &Value, strip_crd: bool) -> Value {
    match v {
        Value::Object(m) => {
            // {allOf: [{$ref}], ...} → {$ref, description}
            if let Some(Value::Array(all)) = m.get("allOf")
                && all.len() == 1
                && all[0].get("$ref").is_some()
            {
                let mut out = Map::new();
                let target = all[0]["$ref"].as_str().unwrap_or_default().replacen(V3_REF, V2_REF, 1);
                out.insert("$ref".into(), target.into());
                if let Some(d) = m.get("description") {
                    out.insert("description".into(), d.clone());
                }
                return Value::Object(out);
            }
            let mut out = Map::new();
            for (k, x) in m {
                if strip_crd
                    && matches!(
                        k.as_str(),
                        "nullable" | "anyOf" | "oneOf" | "allOf" | "not" | "x-kubernetes-validations"
                    )
                {
                    continue;
                }
                let conv = if k == "properties" {
                    Value::Object(
                        x.as_object()
                            .map(|p| p.iter().map(|(n, s)| (n.clone(), to_v2_schema(s, strip_crd))).collect())
                            .unwrap_or_default(),
                    )
                } else if k == "$ref" {
                    x.as_str().map(|s| s.replacen(V3_REF, V2_REF, 1).into()).unwrap_or(x.clone())
                } else {
                    to_v2_schema(x, strip_crd)
                };
                out.insert(k.clone(), conv);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| to_v2_schema(x, strip_crd)).collect()),
        other => other.clone(),
    }
}

fn v2_op(op: &Op, tag: &str) -> Value {
    let mut m = Map::new();
    m.insert("tags".into(), json!([tag]));
    m.insert("description".into(), op.description.clone().into());
    m.insert("operationId".into(), op.id.clone().into());
    let consumes: Vec<&str> = match &op.body {
        Some((_, types, _)) if op.method == "patch" => types.clone(),
        _ => vec!["*/*"],
    };
    m.insert("consumes".into(), json!(consumes));
    let mut produces = vec!["application/json", "application/yaml"];
    if op.list {
        produces.push("application/json;stream=watch");
    }
    m.insert("produces".into(), json!(produces));
    m.insert("schemes".into(), json!(["https"]));
    let mut params: Vec<Value> = Vec::new();
    if let Some((schema, _, required)) = &op.body {
        params.push(json!({"name": "body", "in": "body", "required": required,
                           "schema": {"$ref": format!("{V2_REF}{schema}")}}));
    }
    for p in &op.params {
        params.push(
            json!({"name": p.name, "in": p.in_, "type": p.ty, "uniqueItems": true, "description": p.description}),
        );
    }
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    let mut responses = Map::new();
    for (code, desc, schema) in &op.responses {
        let mut resp = json!({"description": desc});
        if let Some(sch) = schema {
            resp["schema"] = json!({"$ref": format!("{V2_REF}{sch}")});
        }
        responses.insert((*code).into(), resp);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), op.action.into());
    m.insert("x-kubernetes-group-version-kind".into(), op.gvk.clone());
    Value::Object(m)
}

/// `/openapi/v2` (swagger 2.0) covering every served kind.
pub fn v2(served: &[Served], crds: &[Value]) -> Value {
    let all = all_schemas(served, crds);
    let crd_names: BTreeSet<String> =
        served.iter().filter(|s| crd_schema(s, crds).is_some()).map(kind_schema_name).collect();
    let mut paths = Map::new();
    let mut used = BTreeMap::new();
    for s in served {
        let (_, tag) = gv_id(s);
        for (p, ops) in kind_paths(s) {
            let mut item = Map::new();
            for op in &ops {
                item.insert(op.method.into(), v2_op(op, &tag));
            }
            let mut params: Vec<Value> = path_params(&p, &s.kind)
                .into_iter()
                .map(|mut v| {
                    let m = v.as_object_mut().unwrap();
                    m.remove("schema");
                    m.insert("type".into(), "string".into());
                    m.insert("uniqueItems".into(), true.into());
                    v
                })
                .collect();
            params.push(json!({"name": "pretty", "in": "query", "type": "string", "uniqueItems": true,
                               "description": PRETTY.description}));
            item.insert("parameters".into(), Value::Array(params));
            paths.insert(p, Value::Object(item));
        }
        collect_refs(&kind_schema_name(s), &all, &mut used);
        collect_refs(&list_schema_name(s), &all, &mut used);
    }
    for name in [format!("{META}Status"), format!("{META}DeleteOptions"), format!("{META}Patch")] {
        collect_refs(&name, &all, &mut used);
    }
    let definitions: Map<String, Value> = used
        .into_iter()
        .map(|(k, v)| {
            let strip = crd_names.contains(&k);
            (k, to_v2_schema(&v, strip))
        })
        .collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": DEFAULT_GIT_VERSION.split('-').next().unwrap_or(DEFAULT_GIT_VERSION)},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

#[cfg(test)]
mod tests {
    use super::super::setup;
    use super::*;

    #[test]
    fn swagger_v2() {
        let (s, crds) = setup();
        let doc = v2(&s, &crds);
        assert_eq!(doc["swagger"], "2.0");
        let defs = doc["definitions"].as_object().unwrap();
        let agent = &defs["io.openshift.agent-install.v1beta1.Agent"];
        assert_eq!(agent["x-kubernetes-group-version-kind"][0]["kind"], "Agent");
        assert_eq!(
            agent["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let txt = serde_json::to_string(&doc).unwrap();
        assert!(!txt.contains("#/components/"));
        assert!(!txt.contains("\"nullable\""));
        let mut refs = BTreeSet::new();
        fn walk(v: &Value, out: &mut BTreeSet<String>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, x)| {
                    if k == "$ref" {
                        out.insert(x.as_str().unwrap().trim_start_matches(V2_REF).to_owned());
                    } else {
                        walk(x, out)
                    }
                }),
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        walk(&doc, &mut refs);
        for r in refs {
            assert!(defs.contains_key(&r), "dangling {r}");
        }
        let patch = &doc["paths"]["/apis/metal3.io/v1alpha1/namespaces/{namespace}/baremetalhosts/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    }
}
