//! OpenAPI v3: one document per group version, and the index of them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::components::{all_schemas, collect_refs, find_refs};
use super::hash::content_hash;
use super::operations::{Op, PRETTY, Param, gv_id, kind_paths, path_params};
use super::schema::{kind_schema_name, list_schema_name, r};
use crate::api::kube::discovery::DEFAULT_GIT_VERSION;
use crate::api::kube::served::Served;

fn v3_param(p: &Param) -> Value {
    json!({"name": p.name, "in": p.in_, "description": p.description,
           "schema": {"type": p.ty, "uniqueItems": true}})
}

fn v3_op(op: &Op, tag: &str) -> Value {
    let mut m = Map::new();
    m.insert("tags".into(), json!([tag]));
    m.insert("description".into(), op.description.clone().into());
    m.insert("operationId".into(), op.id.clone().into());
    if !op.params.is_empty() {
        m.insert("parameters".into(), op.params.iter().map(v3_param).collect());
    }
    if let Some((schema, types, required)) = &op.body {
        let content: Map<String, Value> =
            types.iter().map(|t| ((*t).to_owned(), json!({"schema": r(schema)}))).collect();
        let mut b = json!({"content": content});
        if *required {
            b["required"] = true.into();
        }
        m.insert("requestBody".into(), b);
    }
    let mut responses = Map::new();
    for (code, desc, schema) in &op.responses {
        let mut resp = json!({"description": desc});
        if let Some(sch) = schema {
            let mut types = vec!["application/json", "application/yaml"];
            if op.list {
                types.push("application/json;stream=watch");
            }
            let content: Map<String, Value> =
                types.into_iter().map(|t| (t.to_owned(), json!({"schema": r(sch)}))).collect();
            resp["content"] = Value::Object(content);
        }
        responses.insert((*code).into(), resp);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), op.action.into());
    m.insert("x-kubernetes-group-version-kind".into(), op.gvk.clone());
    Value::Object(m)
}

fn normalize_gv_path(path: &str) -> &str {
    let p = path.trim_start_matches('/');
    let p = p.strip_prefix("openapi/v3/").unwrap_or(p);
    p.split('?').next().unwrap_or(p).trim_end_matches('/')
}

/// The OpenAPI v3 document of one group version (`api/v1`,
/// `apis/agent-install.openshift.io/v1beta1`; a leading `/` or
/// `/openapi/v3/` and a `?hash=` are tolerated), or `None` if nothing is
/// served there.
pub fn v3_group_version(served: &[Served], crds: &[Value], path: &str) -> Option<Value> {
    let path = normalize_gv_path(path);
    let in_gv: Vec<&Served> = served.iter().filter(|s| s.openapi_v3_path() == path).collect();
    if in_gv.is_empty() {
        return None;
    }
    let all = all_schemas(served, crds);
    let mut paths = Map::new();
    let mut schemas = BTreeMap::new();
    for s in &in_gv {
        let (_, tag) = gv_id(s);
        for (p, ops) in kind_paths(s) {
            let mut item = Map::new();
            for op in &ops {
                item.insert(op.method.into(), v3_op(op, &tag));
            }
            let params = path_params(&p, &s.kind);
            let mut params = params;
            params.push(v3_param(&PRETTY));
            item.insert("parameters".into(), Value::Array(params));
            paths.insert(p, Value::Object(item));
        }
        collect_refs(&kind_schema_name(s), &all, &mut schemas);
        collect_refs(&list_schema_name(s), &all, &mut schemas);
    }
    let mut refs = BTreeSet::new();
    find_refs(&Value::Object(paths.clone()), &mut refs);
    for r in refs {
        collect_refs(&r, &all, &mut schemas);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": DEFAULT_GIT_VERSION.split('-').next().unwrap_or(DEFAULT_GIT_VERSION)},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
    }))
}

/// Every served group version's v3 document, keyed by its index path
/// (`api/v1`, `apis/g/v`), with its hash — for caching.
pub fn v3_documents(served: &[Served], crds: &[Value]) -> BTreeMap<String, (Value, String)> {
    let mut out = BTreeMap::new();
    for s in served {
        let p = s.openapi_v3_path();
        if out.contains_key(&p) {
            continue;
        }
        if let Some(doc) = v3_group_version(served, crds, &p) {
            let h = content_hash(&doc);
            out.insert(p, (doc, h));
        }
    }
    out
}

/// `/openapi/v3`: `{"paths": {"apis/g/v": {"serverRelativeURL": "/openapi/v3/apis/g/v?hash=…"}}}`.
pub fn v3_index(served: &[Served], crds: &[Value]) -> Value {
    let paths: Map<String, Value> = v3_documents(served, crds)
        .into_iter()
        .map(|(p, (_, h))| {
            let url = format!("/openapi/v3/{p}?hash={h}");
            (p, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

#[cfg(test)]
mod tests {
    use super::super::schema::V3_REF;
    use super::super::setup;
    use super::*;

    #[test]
    fn index_lists_every_group_version() {
        let (s, crds) = setup();
        let idx = v3_index(&s, &crds);
        let paths = idx["paths"].as_object().unwrap();
        let mut want: Vec<String> = s.iter().map(|x| x.openapi_v3_path()).collect();
        want.sort();
        want.dedup();
        assert_eq!(paths.keys().cloned().collect::<Vec<_>>(), want);
        for (p, v) in paths {
            let url = v["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{p}?hash=")), "{url}");
            let doc = v3_group_version(&s, &crds, url).unwrap();
            assert_eq!(url.split("hash=").nth(1).unwrap(), content_hash(&doc));
        }
        // Stable.
        assert_eq!(v3_index(&s, &crds), idx);
        assert!(v3_group_version(&s, &crds, "apis/apps/v1").is_none());
    }

    fn resolve<'a>(doc: &'a Value, r: &str) -> &'a Value {
        &doc["components"]["schemas"][r.strip_prefix(V3_REF).unwrap()]
    }

    /// Every `$ref` of every document resolves inside it; every served kind
    /// has a schema with its GVK, and a PATCH operation that kubectl's
    /// field-validation check accepts.
    #[test]
    fn documents_are_self_contained_and_kubectl_ready() {
        let (s, crds) = setup();
        for (path, (doc, _)) in v3_documents(&s, &crds) {
            let mut refs = BTreeSet::new();
            find_refs(&doc, &mut refs);
            for r in &refs {
                assert!(doc["components"]["schemas"].get(r).is_some(), "{path}: dangling {r}");
            }
            for k in s.iter().filter(|k| k.openapi_v3_path() == path) {
                let gvk = k.gvk_json();
                let schemas = doc["components"]["schemas"].as_object().unwrap();
                let found: Vec<&String> = schemas
                    .iter()
                    .filter(|(_, v)| v["x-kubernetes-group-version-kind"].as_array().is_some_and(|a| a.contains(&gvk)))
                    .map(|(n, _)| n)
                    .collect();
                assert_eq!(found, vec![&kind_schema_name(k)], "{path} {}", k.kind);
                let sch = &schemas[&kind_schema_name(k)];
                assert_eq!(
                    resolve(&doc, sch["properties"]["metadata"]["allOf"][0]["$ref"].as_str().unwrap())["type"],
                    "object"
                );
                let list = &schemas[&list_schema_name(k)];
                assert_eq!(list["x-kubernetes-group-version-kind"][0]["kind"], k.list_kind.as_str());

                // kubectl's QueryParamVerifierV3: a PATCH op for the GVK listing fieldValidation.
                let patch_ops: Vec<&Value> = doc["paths"]
                    .as_object()
                    .unwrap()
                    .values()
                    .filter_map(|p| p.get("patch"))
                    .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
                    .collect();
                if k.has_verb("patch") {
                    assert!(!patch_ops.is_empty(), "{}", k.kind);
                    for op in patch_ops {
                        assert!(
                            op["parameters"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                            "{}",
                            k.kind
                        );
                        let content = op["requestBody"]["content"].as_object().unwrap();
                        assert!(content.contains_key("application/apply-patch+yaml"));
                        assert!(content.contains_key("application/merge-patch+json"));
                        assert!(content.contains_key("application/json-patch+json"));
                        assert_eq!(
                            content.contains_key("application/strategic-merge-patch+json"),
                            k.group.is_empty() || k.kind == "Lease"
                        );
                    }
                }
                // kubectl explain finds the GVK on one of these paths.
                let prefix = k.api_prefix();
                let candidates = [
                    format!("{prefix}/{}", k.plural),
                    format!("{prefix}/{}/{{name}}", k.plural),
                    format!("{prefix}/namespaces/{{namespace}}/{}", k.plural),
                    format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.plural),
                ];
                assert!(candidates.iter().any(|c| doc["paths"].get(c).is_some()), "{}", k.kind);
            }
        }
    }

    #[test]
    fn infraenv_document() {
        let (s, crds) = setup();
        let doc = v3_group_version(&s, &crds, "/openapi/v3/apis/agent-install.openshift.io/v1beta1?hash=x").unwrap();
        let ie = &doc["components"]["schemas"]["io.openshift.agent-install.v1beta1.InfraEnv"];
        assert_eq!(
            ie["x-kubernetes-group-version-kind"],
            json!([{"group": "agent-install.openshift.io", "kind": "InfraEnv", "version": "v1beta1"}])
        );
        assert!(ie["properties"]["spec"]["properties"].get("pullSecretRef").is_some());
        let paths = doc["paths"].as_object().unwrap();
        let item = &paths["/apis/agent-install.openshift.io/v1beta1/namespaces/{namespace}/infraenvs/{name}"];
        for m in ["get", "put", "patch", "delete"] {
            assert!(item.get(m).is_some(), "{m}");
        }
        assert!(
            paths.contains_key(
                "/apis/agent-install.openshift.io/v1beta1/namespaces/{namespace}/infraenvs/{name}/status"
            )
        );
        assert!(paths.contains_key("/apis/agent-install.openshift.io/v1beta1/infraenvs"));
        assert_eq!(item["patch"]["operationId"], "patchAgentInstallOpenshiftIoV1beta1NamespacedInfraEnv");
        let names: Vec<&str> =
            item["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["name", "namespace", "pretty"]);
        // Cluster-scoped kind: no namespace segment.
        let hive = v3_group_version(&s, &crds, "apis/hive.openshift.io/v1").unwrap();
        assert!(hive["paths"].get("/apis/hive.openshift.io/v1/clusterimagesets/{name}").is_some());
        // int-or-string unfolded.
        let txt = serde_json::to_string(&hive).unwrap();
        assert!(txt.contains(r#""anyOf":[{"type":"integer"},{"type":"string"}]"#));
    }

    #[test]
    fn core_document() {
        let (s, crds) = setup();
        let doc = v3_group_version(&s, &crds, "api/v1").unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.contains_key("/api/v1/namespaces/{namespace}/secrets/{name}"));
        assert!(paths.contains_key("/api/v1/namespaces/{name}"));
        assert!(paths.contains_key("/api/v1/namespaces"));
        let ev = &paths["/api/v1/namespaces/{namespace}/events/{name}"];
        assert!(ev.get("get").is_some() && ev.get("patch").is_none());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for n in [
            "io.k8s.api.core.v1.Secret",
            "io.k8s.api.core.v1.SecretList",
            "io.k8s.api.core.v1.Namespace",
            "io.k8s.api.core.v1.Event",
            "io.k8s.api.core.v1.ObjectReference",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        ] {
            assert!(schemas.contains_key(n), "{n}");
        }
        assert!(!schemas.contains_key("io.k8s.api.coordination.v1.Lease"));
        let lease = v3_group_version(&s, &crds, "apis/coordination.k8s.io/v1").unwrap();
        assert!(lease["components"]["schemas"].get("io.k8s.api.coordination.v1.LeaseSpec").is_some());
    }
}
