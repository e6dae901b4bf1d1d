//! What the embedded API server serves: one [`Served`] per (group, version,
//! kind), built from our CRDs or hand-declared for the few core kinds, plus
//! the printing metadata (short names, categories, printer columns) that the
//! upstream assisted-service / hive / metal3 CRDs carry.

use serde_json::{Value, json};

/// Verbs the API server grants every custom resource (same order as the
/// apiextensions discovery controller lists them).
pub const CRD_VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"];

/// Verbs of the `status` (and `scale`) subresource.
pub const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

/// One served resource of one group version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// API group; `""` for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Resource name used in URLs (`agents`).
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    /// Subresource names (`"status"`); their verbs come from
    /// [`Served::subresource_verbs`].
    pub subresources: Vec<String>,
    pub list_kind: String,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

impl Served {
    /// `"v1"` for the core group, `"group/version"` otherwise (the
    /// `apiVersion` of the objects).
    pub fn group_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// URL prefix of the group version: `/api/v1` or `/apis/{group}/{version}`.
    pub fn api_prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// Key of the group version in the OpenAPI v3 index: `api/v1` or
    /// `apis/{group}/{version}`.
    pub fn openapi_v3_path(&self) -> String {
        self.api_prefix()[1..].to_owned()
    }

    /// `plural.group` (the CRD's name); just `plural` for the core group.
    pub fn resource_name(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    pub fn has_subresource(&self, sub: &str) -> bool {
        self.subresources.iter().any(|s| s == sub)
    }

    /// Verbs of one of this resource's subresources.
    pub fn subresource_verbs(&self, sub: &str) -> Vec<String> {
        match sub {
            "finalize" => owned(&["update"]),
            _ => owned(SUBRESOURCE_VERBS),
        }
    }

    /// `(group, version, kind)` of what a subresource returns: the resource's
    /// own kind, except `scale` (autoscaling/v1 Scale).
    pub fn subresource_kind(&self, sub: &str) -> (String, String, String) {
        match sub {
            "scale" => ("autoscaling".into(), "v1".into(), "Scale".into()),
            _ => (self.group.clone(), self.version.clone(), self.kind.clone()),
        }
    }

    /// The `x-kubernetes-group-version-kind` object of this kind.
    pub fn gvk_json(&self) -> Value {
        json!({"group": self.group, "kind": self.kind, "version": self.version})
    }

    /// Same for the list kind.
    pub fn list_gvk_json(&self) -> Value {
        json!({"group": self.group, "kind": self.list_kind, "version": self.version})
    }
}

/// Every served version of a CRD (`apiextensions.k8s.io/v1`), storage version
/// first.
pub fn from_crd_versions(crd: &Value) -> Vec<Served> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let group = spec["group"].as_str().unwrap_or_default().to_owned();
    let kind = names["kind"].as_str().unwrap_or_default().to_owned();
    let plural = names["plural"].as_str().unwrap_or_default().to_owned();
    let singular = names["singular"].as_str().map(str::to_owned).unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names["listKind"].as_str().map(str::to_owned).unwrap_or_else(|| format!("{kind}List"));
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let short_names = strings(names.get("shortNames"));
    let categories = strings(names.get("categories"));
    let top_subresources = spec.get("subresources");

    let mut versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|a| a.iter().filter(|v| v["served"].as_bool().unwrap_or(true)).collect())
        .unwrap_or_default();
    versions.sort_by_key(|v| !v["storage"].as_bool().unwrap_or(false));

    versions
        .into_iter()
        .map(|v| {
            let subs = v.get("subresources").or(top_subresources);
            let mut subresources = Vec::new();
            if let Some(Value::Object(m)) = subs {
                for name in ["status", "scale"] {
                    if m.contains_key(name) {
                        subresources.push(name.to_owned());
                    }
                }
            }
            Served {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or_default().to_owned(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: singular.clone(),
                namespaced,
                short_names: short_names.clone(),
                categories: categories.clone(),
                verbs: owned(CRD_VERBS),
                subresources,
                list_kind: list_kind.clone(),
            }
        })
        .collect()
}

/// The served version of a CRD (its storage version when several are served).
///
/// # Panics
/// If the CRD serves no version.
pub fn from_crd(crd: &Value) -> Served {
    from_crd_versions(crd).into_iter().next().expect("CRD serves no version")
}

#[allow(clippy::too_many_arguments)]
fn core(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short_names: &[&str],
    verbs: &[&str],
    subresources: &[&str],
) -> Served {
    Served {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: owned(short_names),
        categories: Vec::new(),
        verbs: owned(verbs),
        subresources: owned(subresources),
        list_kind: format!("{kind}List"),
    }
}

/// A kind a test cluster adds to what the API serves (Nodes, Pods, DaemonSets, Machines, ...): the
/// verbs of a custom resource, no short names, categories or printer columns.
pub fn generic(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    subresources: &[&str],
) -> Served {
    core(group, version, kind, plural, namespaced, &[], CRD_VERBS, subresources)
}

/// core/v1 Secret (verbs as upstream).
pub fn secret() -> Served {
    core(
        "",
        "v1",
        "Secret",
        "secrets",
        true,
        &[],
        &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        &[],
    )
}

/// core/v1 Namespace, cluster-scoped (upstream verbs: no deletecollection).
/// Upstream's `finalize` and `status` subresources are not declared.
pub fn namespace() -> Served {
    core(
        "",
        "v1",
        "Namespace",
        "namespaces",
        false,
        &["ns"],
        &["create", "delete", "get", "list", "patch", "update", "watch"],
        &[],
    )
}

/// core/v1 Event, read-only here (get/list/watch) — `kubectl describe` lists
/// them with a field selector on `involvedObject`.
pub fn event() -> Served {
    core("", "v1", "Event", "events", true, &["ev"], &["get", "list", "watch"], &[])
}

/// coordination.k8s.io/v1 Lease (leader election), verbs as upstream.
pub fn lease() -> Served {
    core(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        true,
        &[],
        &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        &[],
    )
}

/// The hand-declared core kinds, in the order discovery lists them.
pub fn core_kinds() -> Vec<Served> {
    vec![event(), namespace(), secret(), lease()]
}

pub use crate::resources::printing::{PrinterColumn, Printing, UPSTREAM_CRDS, upstream_printing};

/// Test inputs: our generated CRDs and the upstream fixture CRDs, as JSON.
#[cfg(test)]
pub(crate) mod testdata {
    use serde_json::Value;
    use std::path::{Path, PathBuf};

    fn load_dir(dir: &Path) -> Vec<Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap();
                yaml_serde::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            })
            .collect()
    }

    /// deploy/crds/*.yaml of the bootstream tree.
    pub fn our_crds() -> Vec<Value> {
        load_dir(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/crds"))
    }

    /// The upstream assisted-service/hive/metal3 CRDs (the compatibility corpus).
    pub fn upstream_crds() -> Vec<Value> {
        load_dir(&crate::compat_path("fixtures/assisted/crds"))
    }
}

#[cfg(test)]
mod tests {
    use super::testdata::{our_crds, upstream_crds};
    use super::*;

    #[test]
    fn from_our_crds() {
        let crds = our_crds();
        assert_eq!(crds.len(), 8);
        let served: Vec<Served> = crds.iter().map(from_crd).collect();
        let agent = served.iter().find(|s| s.kind == "Agent").unwrap();
        assert_eq!(agent.group, "agent-install.openshift.io");
        assert_eq!(agent.version, "v1beta1");
        assert_eq!(agent.plural, "agents");
        assert_eq!(agent.singular, "agent");
        assert_eq!(agent.list_kind, "AgentList");
        assert!(agent.namespaced);
        assert_eq!(agent.subresources, vec!["status"]);
        assert_eq!(agent.group_version(), "agent-install.openshift.io/v1beta1");
        assert_eq!(agent.resource_name(), "agents.agent-install.openshift.io");
        let cis = served.iter().find(|s| s.kind == "ClusterImageSet").unwrap();
        assert!(!cis.namespaced);
        for s in &served {
            assert!(UPSTREAM_CRDS.contains(&s.resource_name().as_str()), "{}", s.resource_name());
        }
    }

    #[test]
    fn core() {
        let ns = namespace();
        assert!(!ns.namespaced);
        assert_eq!(ns.short_names, vec!["ns"]);
        assert_eq!(ns.group_version(), "v1");
        assert_eq!(ns.api_prefix(), "/api/v1");
        assert_eq!(event().short_names, vec!["ev"]);
        assert!(!event().has_verb("create"));
        assert_eq!(lease().api_prefix(), "/apis/coordination.k8s.io/v1");
    }

    /// The transcribed printing data equals what the upstream fixture CRDs say.
    #[test]
    fn upstream_printing_matches_fixtures() {
        let ups = upstream_crds();
        assert_eq!(ups.len(), 8);
        for crd in &ups {
            let name = crd["metadata"]["name"].as_str().unwrap();
            let p = upstream_printing(name).unwrap_or_else(|| panic!("no printing for {name}"));
            let names = &crd["spec"]["names"];
            let short: Vec<&str> = names["shortNames"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
                .unwrap_or_default();
            assert_eq!(short, p.short_names, "{name}");
            let cats: Vec<&str> = names["categories"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
                .unwrap_or_default();
            assert_eq!(cats, p.categories, "{name}");
            let versions = crd["spec"]["versions"].as_array().unwrap();
            assert_eq!(versions.len(), 1);
            let cols = versions[0].get("additionalPrinterColumns").cloned().unwrap_or(Value::Array(vec![]));
            assert_eq!(cols, p.columns_json(), "{name}");
        }
        assert!(upstream_printing("pods").is_none());
    }

    #[test]
    fn apply_printing() {
        let mut crd = our_crds().into_iter().find(|c| c["metadata"]["name"] == "baremetalhosts.metal3.io").unwrap();
        upstream_printing("baremetalhosts.metal3.io").unwrap().apply_to_crd(&mut crd);
        let s = from_crd(&crd);
        assert_eq!(s.short_names, vec!["bmh", "bmhost"]);
        assert_eq!(crd["spec"]["versions"][0]["additionalPrinterColumns"].as_array().unwrap().len(), 8);
    }
}
