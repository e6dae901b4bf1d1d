//! The fields by which one object refers to another, per kind: what a store indexes so that "the
//! Agents of this ClusterDeployment" or "the BareMetalHost with this boot MAC" is a lookup, not a scan
//! of every object of the kind (a hub holds tens of thousands of Agents).
//!
//! Each reference is a path of JSON keys; `*` stands for every element of an array. The controllers
//! that follow each one:
//! - Agent `spec.clusterDeploymentName.name`: a ClusterDeployment's Agents (cluster controller);
//! - Agent `spec.ignitionEndpointTokenReference.name`: the Agents reading a Secret (agent controller);
//! - Agent label `infraenvs.agent-install.openshift.io`: an InfraEnv's Agents (agent controller);
//! - Agent `status.inventory.interfaces[*].macAddress`: the Agent of a BMH's boot MAC (BMAC);
//! - BareMetalHost `spec.bootMACAddress`: the BMH of an Agent's interfaces (BMAC);
//! - BareMetalHost label `infraenvs.agent-install.openshift.io`: an InfraEnv's BMHs (BMAC);
//! - InfraEnv `spec.pullSecretRef.name`: the InfraEnvs of a pull secret (InfraEnv controller).
//!
//! `Store::list_mentioning` finds objects by these values; a store without an index finds them by
//! text, which finds at least as much.

use serde_json::Value;

use super::{INFRAENV_NAME_LABEL, Kind};

type Path = &'static [&'static str];

/// The reference fields of `kind`.
pub fn fields(kind: Kind) -> &'static [Path] {
    match kind {
        Kind::Agent => &[
            &["spec", "clusterDeploymentName", "name"],
            &["spec", "ignitionEndpointTokenReference", "name"],
            &["metadata", "labels", INFRAENV_NAME_LABEL],
            &["status", "inventory", "interfaces", "*", "macAddress"],
        ],
        Kind::BareMetalHost => &[&["spec", "bootMACAddress"], &["metadata", "labels", INFRAENV_NAME_LABEL]],
        Kind::InfraEnv => &[&["spec", "pullSecretRef", "name"]],
        _ => &[],
    }
}

/// The values `obj` (of `kind`) holds in its reference fields, each once.
pub fn values(kind: Kind, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for path in fields(kind) {
        collect(obj, path, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

fn collect(v: &Value, path: &[&str], out: &mut Vec<String>) {
    match path.split_first() {
        None => {
            if let Some(s) = v.as_str().filter(|s| !s.is_empty()) {
                out.push(s.to_string());
            }
        }
        Some((&"*", rest)) => {
            for item in v.as_array().into_iter().flatten() {
                collect(item, rest, out);
            }
        }
        Some((key, rest)) => {
            if let Some(next) = v.get(*key) {
                collect(next, rest, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reference_field_is_read_and_nothing_else() {
        let agent = serde_json::json!({
            "metadata": {"name": "a", "labels": {INFRAENV_NAME_LABEL: "ie", "other": "x"}},
            "spec": {"clusterDeploymentName": {"name": "cd", "namespace": "ns"},
                     "ignitionEndpointTokenReference": {"name": "tok", "namespace": "ns"}, "hostname": "h"},
            "status": {"inventory": {"interfaces": [{"macAddress": "aa:bb"}, {"macAddress": "CC:DD"}, {}]}}});
        assert_eq!(values(Kind::Agent, &agent), ["CC:DD", "aa:bb", "cd", "ie", "tok"]);
        let bmh = serde_json::json!({"metadata": {"labels": {INFRAENV_NAME_LABEL: "ie"}},
                                     "spec": {"bootMACAddress": "AA:BB", "online": true}});
        assert_eq!(values(Kind::BareMetalHost, &bmh), ["AA:BB", "ie"]);
        assert_eq!(values(Kind::InfraEnv, &serde_json::json!({"spec": {"pullSecretRef": {"name": "ps"}}})), ["ps"]);
        assert!(values(Kind::Secret, &serde_json::json!({"metadata": {"name": "s"}})).is_empty());
    }
}
