//! The CRDs generated from our types: `deploy/crds/` is current, every field of the upstream CRDs in
//! `../shared/fixtures/assisted/crds/` exists in ours with the same type, the schemas are structural, and
//! the upstream example objects survive a trip through our types.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use bootstream::resources::crds;
use serde_json::Value;

const SHARED_CRDS: &str = "fixtures/assisted/crds";
const EXAMPLES: &str = "fixtures/assisted/examples";

/// Differences from upstream that are accepted, as `Kind/version path` and the reason. Keep it empty
/// unless a difference cannot be avoided.
const ALLOWED_DIFFERENCES: &[(&str, &str)] = &[];

fn ours() -> BTreeMap<String, Value> {
    crds::all().into_iter().map(|crd| (crds::file_name(&crd), serde_json::to_value(&crd).unwrap())).collect()
}

fn shared() -> Vec<(String, Value)> {
    let mut out = vec![];
    for entry in std::fs::read_dir(common::shared(SHARED_CRDS)).unwrap() {
        let path = entry.unwrap().path();
        let v: Value = yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.push((path.file_name().unwrap().to_string_lossy().into_owned(), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(out.len(), 8, "the shared CRDs");
    out
}

#[test]
fn deploy_crds_are_what_bootstream_crds_generates() {
    let dir = Path::new("deploy/crds");
    let expected: BTreeMap<String, String> = crds::files().into_iter().collect();
    let mut problems = vec![];
    let mut present = vec![];
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        match expected.get(&name) {
            None => problems.push(format!("{name}: not a CRD we generate")),
            Some(text) if *text != std::fs::read_to_string(dir.join(&name)).unwrap() => {
                problems.push(format!("{name}: differs from the generated CRD"))
            }
            Some(_) => {}
        }
        present.push(name);
    }
    for name in expected.keys().filter(|n| !present.contains(n)) {
        problems.push(format!("{name}: missing"));
    }
    assert!(
        problems.is_empty(),
        "deploy/crds is not what the types generate; run `cargo run -- crds --out deploy/crds`:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn crds_subcommand_prints_every_crd() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bootstream")).arg("crds").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text, crds::all_yaml());
    let kinds: Vec<String> = yaml_serde::Deserializer::from_str(&text)
        .map(|de| {
            let v: Value = serde::Deserialize::deserialize(de).unwrap();
            v["spec"]["names"]["kind"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "InfraEnv",
            "NMStateConfig",
            "Agent",
            "ClusterDeployment",
            "AgentClusterInstall",
            "ClusterImageSet",
            "BareMetalHost",
            "PreprovisioningImage"
        ]
    );
}

#[test]
fn crds_subcommand_writes_one_file_per_crd() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bootstream"))
        .args(["crds", "--out"])
        .arg(dir.path().join("sub"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut names: Vec<String> = std::fs::read_dir(dir.path().join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = ours().into_keys().chain(["kustomization.yaml".to_string()]).collect();
    expected.sort();
    assert_eq!(names, expected);
    assert!(names.contains(&"agents.agent-install.openshift.io.yaml".to_string()));
}

/// The markers that change what a schema node accepts besides its `type`.
const MARKERS: &[&str] = &["x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"];

/// Walks `theirs` and records every path that `ours` lacks or types differently.
fn compare(path: &str, theirs: &Value, ours: &Value, problems: &mut Vec<String>) {
    let ty = |v: &Value| v.get("type").cloned().unwrap_or(Value::Null);
    if ty(theirs) != ty(ours) {
        problems.push(format!("{path}: type {} upstream, {} here", ty(theirs), ty(ours)));
    }
    for marker in MARKERS {
        let flag = |v: &Value| v.get(*marker) == Some(&Value::Bool(true));
        if flag(theirs) != flag(ours) {
            problems.push(format!("{path}: {marker} is {} upstream, {} here", flag(theirs), flag(ours)));
        }
    }
    if let Some(props) = theirs.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let sub_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
            match ours.get("properties").and_then(|p| p.get(name)) {
                Some(our_sub) => compare(&sub_path, sub, our_sub, problems),
                None => missing(&sub_path, sub, problems),
            }
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(sub) = theirs.get(key).filter(|s| s.is_object()) {
            let sub_path = format!("{path}{suffix}");
            match ours.get(key).filter(|s| s.is_object()) {
                Some(our_sub) => compare(&sub_path, sub, our_sub, problems),
                None => missing(&sub_path, sub, problems),
            }
        }
    }
}

/// A missing node and everything under it, so the list shows the whole extent of what is missing.
fn missing(path: &str, theirs: &Value, problems: &mut Vec<String>) {
    problems.push(format!("{path}: missing"));
    if let Some(props) = theirs.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            missing(&format!("{path}.{name}"), sub, problems);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(sub) = theirs.get(key).filter(|s| s.is_object()) {
            missing(&format!("{path}{suffix}"), sub, problems);
        }
    }
}

fn versions(crd: &Value) -> Vec<(String, bool, bool, bool)> {
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_string(),
                v["served"].as_bool().unwrap(),
                v["storage"].as_bool().unwrap(),
                v["subresources"].get("status").is_some(),
            )
        })
        .collect()
}

#[test]
fn crds_have_every_upstream_field_with_its_type() {
    let ours = ours();
    let mut problems = vec![];
    for (file, theirs) in shared() {
        let spec = &theirs["spec"];
        let name = format!("{}.{}.yaml", spec["names"]["plural"].as_str().unwrap(), spec["group"].as_str().unwrap());
        let Some(our) = ours.get(&name) else {
            problems.push(format!("{file}: no CRD {name} here"));
            continue;
        };
        for field in ["group", "scope"] {
            if spec[field] != our["spec"][field] {
                problems.push(format!("{file}: {field} {} upstream, {} here", spec[field], our["spec"][field]));
            }
        }
        for field in ["kind", "plural", "singular"] {
            if spec["names"][field] != our["spec"]["names"][field] {
                problems.push(format!(
                    "{file}: names.{field} {} upstream, {} here",
                    spec["names"][field], our["spec"]["names"][field]
                ));
            }
        }
        if versions(&theirs) != versions(our) {
            problems.push(format!(
                "{file}: versions (name, served, storage, status subresource) {:?} upstream, {:?} here",
                versions(&theirs),
                versions(our)
            ));
        }
        for version in spec["versions"].as_array().unwrap() {
            let v = version["name"].as_str().unwrap();
            let Some(our_version) = our["spec"]["versions"].as_array().unwrap().iter().find(|o| o["name"] == v) else {
                continue;
            };
            let mut found = vec![];
            compare("", &version["schema"]["openAPIV3Schema"], &our_version["schema"]["openAPIV3Schema"], &mut found);
            let kind = spec["names"]["kind"].as_str().unwrap();
            for p in found {
                // Entries read `path: what differs`; the allowlist names the path.
                let path = format!("{kind}/{v} {}", p.split(": ").next().unwrap());
                if !ALLOWED_DIFFERENCES.iter().any(|(allowed, _)| *allowed == path) {
                    problems.push(format!("{kind}/{v} {p}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{} differences from the upstream CRDs:\n  {}", problems.len(), problems.join("\n  "));
}

/// What a Kubernetes API server requires of a CRD schema (structural schemas): no references, every
/// node typed unless it is int-or-string or preserves unknown fields, `anyOf`/`oneOf`/`allOf` only as
/// value validations without types or properties of their own, no `nullable` or `additionalProperties`
/// clashes at the root.
fn check_structural(path: &str, v: &Value, problems: &mut Vec<String>) {
    let Some(o) = v.as_object() else {
        problems.push(format!("{path}: not a schema object"));
        return;
    };
    for key in ["$ref", "$schema", "definitions", "$defs", "not"] {
        if o.contains_key(key) {
            problems.push(format!("{path}: has {key}"));
        }
    }
    let int_or_string = o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !o.contains_key("type") && !int_or_string && !preserve {
        problems.push(format!("{path}: no type"));
    }
    if o.contains_key("properties") && o.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if o.get("type") == Some(&Value::String("array".into())) && !o.contains_key("items") {
        problems.push(format!("{path}: array without items"));
    }
    if let Some(t) = o.get("type")
        && !t.is_string()
    {
        problems.push(format!("{path}: type {t} is not one type"));
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for (i, branch) in o.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            // Value validations only; int-or-string nodes may name the two types.
            for forbidden in ["properties", "items", "additionalProperties", "nullable", "default", "description"] {
                if branch.get(forbidden).is_some() {
                    problems.push(format!("{path}.{key}[{i}]: has {forbidden}"));
                }
            }
            if branch.get("type").is_some() && !int_or_string {
                problems.push(format!("{path}.{key}[{i}]: has a type"));
            }
        }
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            check_structural(&format!("{path}.{name}"), sub, problems);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(sub) = o.get(key).filter(|s| s.is_object()) {
            check_structural(&format!("{path}{suffix}"), sub, problems);
        }
    }
}

#[test]
fn crd_schemas_are_structural() {
    let mut problems = vec![];
    for (name, crd) in ours() {
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            let root = format!("{name}/{}", version["name"].as_str().unwrap());
            if schema.get("nullable").is_some() || schema.get("x-kubernetes-preserve-unknown-fields").is_some() {
                problems.push(format!("{root}: nullable or preserve-unknown-fields at the root"));
            }
            if schema["type"] != "object" {
                problems.push(format!("{root}: the root is not an object"));
            }
            for field in ["spec", "status"] {
                if schema["properties"].get(field).and_then(|f| f.get("default")).is_some() {
                    problems.push(format!("{root}: {field} has a default"));
                }
            }
            check_structural(&root, schema, &mut problems);
        }
    }
    assert!(problems.is_empty(), "not structural:\n  {}", problems.join("\n  "));
}

/// Deserializes a document into `T` and serializes it back.
fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Result<Value, String> {
    let typed: T = serde_path_to_error::deserialize(doc).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// The paths where `after` differs from `before`.
fn diff(path: &str, before: &Value, after: &Value, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => diff(&format!("{path}.{k}"), v, w, out),
                    None => out.push(format!("{path}.{k}: lost")),
                }
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: added ({})", b[k]));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), v, w, out);
            }
        }
        _ if before != after => out.push(format!("{path}: {before} became {after}")),
        _ => {}
    }
}

#[test]
fn upstream_examples_round_trip_through_our_types() {
    use bootstream::resources::{
        Agent, AgentClusterInstall, BareMetalHost, ClusterDeployment, ClusterImageSet, InfraEnv, NMStateConfig,
        PreprovisioningImage,
    };
    let mut files: Vec<_> = std::fs::read_dir(common::shared(EXAMPLES)).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut problems = vec![];
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let file = file.file_name().unwrap().to_string_lossy().into_owned();
        for (i, de) in yaml_serde::Deserializer::from_str(&text).enumerate() {
            let doc: Value = serde::Deserialize::deserialize(de).unwrap();
            if doc.is_null() {
                continue;
            }
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let after = match kind.as_str() {
                "InfraEnv" => round_trip::<InfraEnv>(&doc),
                "NMStateConfig" => round_trip::<NMStateConfig>(&doc),
                "Agent" => round_trip::<Agent>(&doc),
                "ClusterDeployment" => round_trip::<ClusterDeployment>(&doc),
                "AgentClusterInstall" => round_trip::<AgentClusterInstall>(&doc),
                "ClusterImageSet" => round_trip::<ClusterImageSet>(&doc),
                "BareMetalHost" => round_trip::<BareMetalHost>(&doc),
                "PreprovisioningImage" => round_trip::<PreprovisioningImage>(&doc),
                "Secret" => round_trip::<k8s_openapi::api::core::v1::Secret>(&doc),
                // Kinds we do not serve (Namespace, AgentClassification).
                _ => continue,
            };
            *seen.entry(kind.clone()).or_default() += 1;
            match after {
                Err(e) => problems.push(format!("{file}#{i} ({kind}): does not parse: {e}")),
                Ok(after) => {
                    let mut found = vec![];
                    diff("", &doc, &after, &mut found);
                    problems.extend(found.into_iter().map(|d| format!("{file}#{i} ({kind}): {d}")));
                }
            }
        }
    }
    assert!(problems.is_empty(), "examples that do not round-trip:\n  {}", problems.join("\n  "));
    for kind in ["InfraEnv", "NMStateConfig", "Agent", "ClusterDeployment", "AgentClusterInstall", "ClusterImageSet"] {
        assert!(seen.contains_key(kind), "no example of {kind} was checked: {seen:?}");
    }
}
