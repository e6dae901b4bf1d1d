//! The component schemas of a document: every kind's, and what they refer to.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::builtin::{core_schemas, meta_schemas};
use super::crd::{crd_kind_schema, crd_schema};
use super::schema::{V3_REF, is_core, kind_schema_name, list_schema, list_schema_name};
use crate::api::kube::served::Served;

/// Every schema of one served kind (kind, list, parts).
fn kind_schemas(s: &Served, crds: &[Value]) -> BTreeMap<String, Value> {
    if crd_schema(s, crds).is_some() || !is_core(s) {
        let mut m = BTreeMap::new();
        m.insert(kind_schema_name(s), crd_kind_schema(s, crds));
        m.insert(list_schema_name(s), list_schema(s, &kind_schema_name(s)));
        m
    } else {
        core_schemas(s)
    }
}

/// Adds `name` and everything it refers to (transitively) to `out`.
pub(super) fn collect_refs(name: &str, all: &BTreeMap<String, Value>, out: &mut BTreeMap<String, Value>) {
    if out.contains_key(name) {
        return;
    }
    let Some(schema) = all.get(name) else { return };
    out.insert(name.to_owned(), schema.clone());
    let mut refs = BTreeSet::new();
    find_refs(schema, &mut refs);
    for r in refs {
        collect_refs(&r, all, out);
    }
}

pub(super) fn find_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    if let Some(name) = x.as_str().and_then(|s| s.strip_prefix(V3_REF)) {
                        out.insert(name.to_owned());
                    }
                } else {
                    find_refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| find_refs(x, out)),
        _ => {}
    }
}

pub(super) fn all_schemas(served: &[Served], crds: &[Value]) -> BTreeMap<String, Value> {
    let mut all = meta_schemas();
    for s in served {
        all.extend(kind_schemas(s, crds));
    }
    all
}
