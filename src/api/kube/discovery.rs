//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}`,
//! `/api/v1`, `/apis/{group}/{version}`, and the aggregated discovery
//! (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) that kubectl ≥ 1.30
//! asks `/api` and `/apis` for first.
//!
//! Serving notes (for the router):
//! * `/api` and `/apis`: call [`negotiate`] on the request's `Accept` header;
//!   for [`DiscoveryFormat::Legacy`] serve [`api_versions`] / [`api_group_list`],
//!   otherwise [`aggregated_core`] / [`aggregated_apis`]. Always answer with
//!   [`DiscoveryFormat::content_type`] (client-go picks the decoder from the
//!   response `Content-Type`, not from the body), and `Vary: Accept`.
//! * Everything else is plain `application/json`.
//!
//! The unaggregated documents are k8s-openapi's meta/v1 types (`apiVersion` removed where
//! kube-apiserver writes none). The aggregated ones are built here: `apidiscovery.k8s.io` is not in
//! the OpenAPI document k8s-openapi is generated from, so the crate has no type for it.

use std::cmp::Ordering;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;
use serde_json::{Map, Value, json};

use super::served::Served;

/// Version the server reports on `/version`.
pub const DEFAULT_GIT_VERSION: &str = "v1.33.0-bootstream";

/// Which discovery document a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    /// Unaggregated: `APIVersions` / `APIGroupList` (plain JSON).
    Legacy,
    /// `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList` (kubectl ≥ 1.30).
    AggregatedV2,
    /// `apidiscovery.k8s.io/v2beta1` (same shape, older clients).
    AggregatedV2Beta1,
}

impl DiscoveryFormat {
    /// The `Content-Type` to answer with.
    pub fn content_type(self) -> &'static str {
        match self {
            DiscoveryFormat::Legacy => "application/json",
            DiscoveryFormat::AggregatedV2 => "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            DiscoveryFormat::AggregatedV2Beta1 => {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            }
        }
    }

    /// `apiVersion` of the aggregated list (`None` for legacy).
    pub fn api_version(self) -> Option<&'static str> {
        match self {
            DiscoveryFormat::Legacy => None,
            DiscoveryFormat::AggregatedV2 => Some("apidiscovery.k8s.io/v2"),
            DiscoveryFormat::AggregatedV2Beta1 => Some("apidiscovery.k8s.io/v2beta1"),
        }
    }
}

/// Picks the discovery format from an `Accept` header: the acceptable media
/// range with the highest `q` (earliest on ties) wins; an aggregated range is
/// `application/json` with `g=apidiscovery.k8s.io`, `v=v2|v2beta1` and
/// `as=APIGroupDiscoveryList`. Anything else (plain JSON, `*/*`, no header,
/// protobuf) gets the legacy document.
///
/// kubectl 1.32 sends
/// `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json`.
pub fn negotiate(accept: &str) -> DiscoveryFormat {
    let mut best: Option<(f32, DiscoveryFormat)> = None;
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let (mut g, mut v, mut as_, mut q) = (None, None, None, 1.0f32);
        for p in parts {
            let Some((k, val)) = p.split_once('=') else { continue };
            let val = val.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "g" => g = Some(val.to_owned()),
                "v" => v = Some(val.to_owned()),
                "as" => as_ = Some(val.to_owned()),
                "q" => q = val.parse().unwrap_or(0.0),
                _ => {}
            }
        }
        if q <= 0.0 {
            continue;
        }
        let json_like = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
        let format = if media == "application/json"
            && g.as_deref() == Some("apidiscovery.k8s.io")
            && as_.as_deref() == Some("APIGroupDiscoveryList")
        {
            match v.as_deref() {
                Some("v2") => Some(DiscoveryFormat::AggregatedV2),
                Some("v2beta1") => Some(DiscoveryFormat::AggregatedV2Beta1),
                _ => None,
            }
        } else if json_like && as_.is_none() {
            Some(DiscoveryFormat::Legacy)
        } else {
            None
        };
        if let Some(f) = format
            && best.is_none_or(|(bq, _)| q > bq)
        {
            best = Some((q, f));
        }
    }
    best.map(|(_, f)| f).unwrap_or(DiscoveryFormat::Legacy)
}

fn platform() -> String {
    let os = std::env::consts::OS;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        a => a,
    };
    format!("{os}/{arch}")
}

/// `/version` (`version.Info`). `major`/`minor` are derived from
/// `git_version` (`v1.33.0-bootstream` → `"1"`, `"33"`); kubectl uses them
/// (and `gitVersion`) for its version-skew warning.
pub fn version_info(git_version: &str, git_commit: &str, build_date: &str) -> Value {
    let trimmed = git_version.trim_start_matches('v');
    let mut nums = trimmed.split(['.', '-', '+']);
    let major = nums.next().unwrap_or("1").to_owned();
    let minor = nums.next().unwrap_or("0").to_owned();
    let minor_n: u32 = minor.parse().unwrap_or(0);
    to_json(Info {
        emulation_major: Some(major.clone()),
        emulation_minor: Some(minor.clone()),
        min_compatibility_major: Some(major.clone()),
        min_compatibility_minor: Some(minor_n.saturating_sub(1).to_string()),
        major,
        minor,
        git_version: git_version.to_owned(),
        git_commit: git_commit.to_owned(),
        git_tree_state: "clean".to_owned(),
        build_date: build_date.to_owned(),
        go_version: String::new(),
        compiler: "rustc".to_owned(),
        platform: platform(),
    })
}

fn to_json(doc: impl serde::Serialize) -> Value {
    serde_json::to_value(doc).expect("a discovery document serializes")
}

/// Removes `apiVersion` where kube-apiserver writes none: k8s-openapi writes it on every type
/// that has one, nested or not, and kube-apiserver leaves it out of `/api`, `/api/v1`, and the
/// groups inside `/apis` (`kind` too there).
fn without_type_meta(mut doc: Value, keys: &[&str]) -> Value {
    if let Some(o) = doc.as_object_mut() {
        keys.iter().for_each(|k| drop(o.remove(*k)));
    }
    doc
}

/// `/api` (legacy): `APIVersions`.
pub fn api_versions(server_address: &str) -> Value {
    let versions = APIVersions {
        versions: vec!["v1".to_owned()],
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".to_owned(),
            server_address: server_address.to_owned(),
        }],
    };
    without_type_meta(to_json(versions), &["apiVersion"])
}

/// Orders versions the way the API server does: GA before beta before alpha,
/// higher numbers first, anything else after, alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (level, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, level, n.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, la, na)), Some((mb, lb, nb))) => lb.cmp(&la).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// Non-core groups in first-seen order, each with its versions sorted
/// preferred-first.
fn groups(served: &[Served]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for s in served.iter().filter(|s| !s.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == s.group) {
            Some((_, vs)) => {
                if !vs.contains(&s.version) {
                    vs.push(s.version.clone());
                }
            }
            None => out.push((s.group.clone(), vec![s.version.clone()])),
        }
    }
    for (_, vs) in &mut out {
        vs.sort_by(|a, b| compare_versions(a, b));
    }
    out
}

fn api_group_of(group: &str, versions: &[String]) -> APIGroup {
    let versions: Vec<GroupVersionForDiscovery> = versions
        .iter()
        .map(|v| GroupVersionForDiscovery { group_version: format!("{group}/{v}"), version: v.clone() })
        .collect();
    APIGroup {
        name: group.to_owned(),
        preferred_version: versions.first().cloned(),
        server_address_by_client_cidrs: None,
        versions,
    }
}

/// `/apis` (legacy): `APIGroupList` of every non-core group.
pub fn api_group_list(served: &[Served]) -> Value {
    let groups = groups(served).iter().map(|(g, vs)| api_group_of(g, vs)).collect();
    let mut list = to_json(APIGroupList { groups });
    if let Some(groups) = list.get_mut("groups").and_then(Value::as_array_mut) {
        for g in groups {
            *g = without_type_meta(std::mem::take(g), &["apiVersion", "kind"]);
        }
    }
    list
}

/// `/apis/{group}`: `APIGroup`, or `None` (404) for an unknown group.
pub fn api_group(served: &[Served], group: &str) -> Option<Value> {
    let (g, vs) = groups(served).into_iter().find(|(g, _)| g == group)?;
    Some(to_json(api_group_of(&g, &vs)))
}

fn in_gv<'a>(served: &'a [Served], group: &str, version: &str) -> Vec<&'a Served> {
    let mut v: Vec<&Served> = served.iter().filter(|s| s.group == group && s.version == version).collect();
    v.sort_by(|a, b| a.plural.cmp(&b.plural));
    v
}

fn insert_nonempty(m: &mut Map<String, Value>, key: &str, list: &[String]) {
    if !list.is_empty() {
        m.insert(key.into(), json!(list));
    }
}

fn nonempty(list: &[String]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.to_vec())
}

/// `/api/v1` (`group == ""`) or `/apis/{group}/{version}`: `APIResourceList`,
/// with a `plural/sub` entry after each resource for each subresource.
/// `None` (404) for an unknown group version.
pub fn api_resource_list(served: &[Served], group: &str, version: &str) -> Option<Value> {
    let items = in_gv(served, group, version);
    if items.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for s in items {
        resources.push(APIResource {
            name: s.plural.clone(),
            singular_name: s.singular.clone(),
            namespaced: s.namespaced,
            kind: s.kind.clone(),
            verbs: s.verbs.clone(),
            short_names: nonempty(&s.short_names),
            categories: nonempty(&s.categories),
            storage_version_hash: Some(storage_version_hash(&s.group, &s.version, &s.kind)),
            group: None,
            version: None,
        });
        for sub in &s.subresources {
            let (g, v, k) = s.subresource_kind(sub);
            let elsewhere = g != s.group || v != s.version;
            resources.push(APIResource {
                name: format!("{}/{}", s.plural, sub),
                singular_name: String::new(),
                namespaced: s.namespaced,
                group: elsewhere.then(|| g.clone()),
                version: elsewhere.then_some(v),
                kind: k,
                verbs: s.subresource_verbs(sub),
                ..Default::default()
            });
        }
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    let list = to_json(APIResourceList { group_version, resources });
    // kube-apiserver's `/api/v1` says no apiVersion (its `/apis/...` lists do).
    Some(if group.is_empty() { without_type_meta(list, &["apiVersion"]) } else { list })
}

/// The API server's `storageVersionHash` of a resource: the first 8 bytes of the SHA-256 of
/// `group/version/kind` (of the version it is stored as: here the one served), in base64. Storage
/// migrators and some controllers' caches key on it.
fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

fn resource_discovery(s: &Served) -> Value {
    let mut m = Map::new();
    m.insert("resource".into(), s.plural.clone().into());
    m.insert("responseKind".into(), s.gvk_json());
    m.insert("scope".into(), if s.namespaced { "Namespaced" } else { "Cluster" }.into());
    m.insert("singularResource".into(), s.singular.clone().into());
    m.insert("verbs".into(), json!(s.verbs));
    insert_nonempty(&mut m, "shortNames", &s.short_names);
    insert_nonempty(&mut m, "categories", &s.categories);
    if !s.subresources.is_empty() {
        let subs: Vec<Value> = s
            .subresources
            .iter()
            .map(|sub| {
                let (g, v, k) = s.subresource_kind(sub);
                json!({
                    "subresource": sub,
                    "responseKind": {"group": g, "kind": k, "version": v},
                    "verbs": s.subresource_verbs(sub),
                })
            })
            .collect();
        m.insert("subresources".into(), Value::Array(subs));
    }
    Value::Object(m)
}

fn group_discovery(served: &[Served], group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| {
            let rs: Vec<Value> = in_gv(served, group, v).into_iter().map(resource_discovery).collect();
            json!({"version": v, "resources": rs, "freshness": "Current"})
        })
        .collect();
    let metadata = if group.is_empty() { json!({}) } else { json!({"name": group}) };
    json!({"metadata": metadata, "versions": vs})
}

fn discovery_list(format: DiscoveryFormat, items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format.api_version().unwrap_or("apidiscovery.k8s.io/v2"),
        "metadata": {},
        "items": items,
    })
}

/// `/api` (aggregated): one nameless group with core `v1`.
pub fn aggregated_core(served: &[Served], format: DiscoveryFormat) -> Value {
    let has_core = served.iter().any(|s| s.group.is_empty() && s.version == "v1");
    let items = if has_core { vec![group_discovery(served, "", &["v1".to_owned()])] } else { Vec::new() };
    discovery_list(format, items)
}

/// `/apis` (aggregated): every non-core group with all its resources.
pub fn aggregated_apis(served: &[Served], format: DiscoveryFormat) -> Value {
    let items = groups(served).iter().map(|(g, vs)| group_discovery(served, g, vs)).collect();
    discovery_list(format, items)
}

#[cfg(test)]
mod tests {
    use super::super::served::{self, testdata::our_crds};
    use super::*;

    fn all() -> Vec<Served> {
        let mut v = served::core_kinds();
        v.extend(our_crds().iter().map(served::from_crd));
        v
    }

    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(KUBECTL_ACCEPT), DiscoveryFormat::AggregatedV2);
        assert_eq!(negotiate("application/json"), DiscoveryFormat::Legacy);
        assert_eq!(negotiate(""), DiscoveryFormat::Legacy);
        assert_eq!(negotiate("*/*"), DiscoveryFormat::Legacy);
        assert_eq!(
            negotiate("application/json; as=APIGroupDiscoveryList;v=v2beta1;g=apidiscovery.k8s.io"),
            DiscoveryFormat::AggregatedV2Beta1
        );
        assert_eq!(
            negotiate("application/json;q=0.9,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"),
            DiscoveryFormat::AggregatedV2
        );
        assert_eq!(
            negotiate("application/json,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5"),
            DiscoveryFormat::Legacy
        );
        assert_eq!(
            DiscoveryFormat::AggregatedV2.content_type(),
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        );
    }

    #[test]
    fn version() {
        let v = version_info(DEFAULT_GIT_VERSION, "abc", "2025-01-01T00:00:00Z");
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "33");
        assert_eq!(v["gitVersion"], "v1.33.0-bootstream");
    }

    #[test]
    fn version_order() {
        let mut v = vec!["v1alpha1", "foo", "v1beta1", "v2", "v1", "v1beta2"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }

    #[test]
    fn legacy_documents() {
        let s = all();
        let groups = api_group_list(&s);
        let names: Vec<&str> =
            groups["groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            vec![
                "coordination.k8s.io",
                "extensions.hive.openshift.io",
                "agent-install.openshift.io",
                "metal3.io",
                "hive.openshift.io"
            ]
        );
        let g = api_group(&s, "metal3.io").unwrap();
        assert_eq!(g["kind"], "APIGroup");
        assert_eq!(g["preferredVersion"]["groupVersion"], "metal3.io/v1alpha1");
        assert!(api_group(&s, "apps").is_none());

        let rl = api_resource_list(&s, "agent-install.openshift.io", "v1beta1").unwrap();
        let rs = rl["resources"].as_array().unwrap();
        let names: Vec<&str> = rs.iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            vec!["agents", "agents/status", "infraenvs", "infraenvs/status", "nmstateconfigs", "nmstateconfigs/status"]
        );
        assert_eq!(rs[1]["verbs"], json!(["get", "patch", "update"]));
        assert_eq!(rs[1]["kind"], "Agent");
        assert_eq!(rs[0]["singularName"], "agent");

        let core = api_resource_list(&s, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        let ns = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "namespaces").unwrap();
        assert_eq!(ns["namespaced"], false);
        assert_eq!(ns["shortNames"], json!(["ns"]));
        assert!(api_resource_list(&s, "apps", "v1").is_none());
        assert_eq!(api_versions("127.0.0.1:6443")["versions"], json!(["v1"]));
    }

    #[test]
    fn aggregated_documents() {
        let s = all();
        let f = DiscoveryFormat::AggregatedV2;
        let core = aggregated_core(&s, f);
        assert_eq!(core["kind"], "APIGroupDiscoveryList");
        assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
        let items = core["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"], json!({}));
        let v1 = &items[0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        assert_eq!(v1["freshness"], "Current");
        let ns = v1["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "namespaces").unwrap();
        assert_eq!(ns["scope"], "Cluster");
        assert_eq!(ns["responseKind"], json!({"group": "", "version": "v1", "kind": "Namespace"}));

        let apis = aggregated_apis(&s, f);
        let items = apis["items"].as_array().unwrap();
        assert_eq!(items.len(), 5);
        let ai = items.iter().find(|i| i["metadata"]["name"] == "agent-install.openshift.io").unwrap();
        let agents = &ai["versions"][0]["resources"][0];
        assert_eq!(agents["resource"], "agents");
        assert_eq!(agents["scope"], "Namespaced");
        assert_eq!(agents["singularResource"], "agent");
        assert_eq!(
            agents["subresources"],
            json!([{"subresource": "status",
                    "responseKind": {"group": "agent-install.openshift.io", "version": "v1beta1", "kind": "Agent"},
                    "verbs": ["get", "patch", "update"]}])
        );
        let hive = items.iter().find(|i| i["metadata"]["name"] == "hive.openshift.io").unwrap();
        let cis = hive["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "clusterimagesets")
            .unwrap();
        assert_eq!(cis["scope"], "Cluster");
        assert_eq!(
            aggregated_apis(&s, DiscoveryFormat::AggregatedV2Beta1)["apiVersion"],
            "apidiscovery.k8s.io/v2beta1"
        );
    }
}
