//! The fields by which one object refers to another, as named relations: what a store indexes so
//! that "the Agents of this ClusterDeployment" or "the BareMetalHost with this boot MAC" is a lookup
//! ([`crate::store::Store::list_referencing`]), not a scan of every object of the kind (a hub holds
//! tens of thousands of Agents). Each store keeps the index up to date at every write of an object,
//! from that object alone (constant work per write).
//!
//! A relation's value is the referenced object's name, or `namespace/name` where the reference
//! carries its own namespace. The controllers that follow each one are listed at [`Ref`].

use serde_json::Value;

use super::{INFRAENV_NAME_LABEL, Kind};

type Path = &'static [&'static str];

/// A reference from objects of one kind ([`Ref::kind`]) to another object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ref {
    /// Agent `spec.clusterDeploymentName` (`namespace/name`): a ClusterDeployment's Agents (cluster
    /// controller).
    AgentClusterDeployment,
    /// Agent `spec.ignitionEndpointTokenReference` (`namespace/name`): the Agents reading a Secret
    /// (agent controller's trigger).
    AgentTokenSecret,
    /// Agent label `infraenvs.agent-install.openshift.io`: an InfraEnv's Agents (agent controller's
    /// trigger).
    AgentInfraEnv,
    /// Agent `status.inventory.interfaces[*].macAddress`: the Agent of a BMH's boot MAC (BMAC).
    AgentMac,
    /// BareMetalHost `spec.bootMACAddress`: the BMH of an Agent's interfaces (BMAC).
    BmhBootMac,
    /// BareMetalHost label `infraenvs.agent-install.openshift.io`: an InfraEnv's BMHs (BMAC).
    BmhInfraEnv,
    /// InfraEnv `spec.pullSecretRef.name`: the InfraEnvs of a pull secret (InfraEnv controller's
    /// trigger).
    InfraEnvPullSecret,
    /// ClusterDeployment `spec.clusterInstallRef.name`: the ClusterDeployment of an
    /// AgentClusterInstall, also once that is gone (cluster controller's trigger).
    ClusterDeploymentInstall,
    /// PreprovisioningImage label `infraenvs.agent-install.openshift.io`: an InfraEnv's PPIs (PPI
    /// controller's trigger).
    PpiInfraEnv,
}

impl Ref {
    pub const ALL: [Ref; 9] = [
        Ref::AgentClusterDeployment,
        Ref::AgentTokenSecret,
        Ref::AgentInfraEnv,
        Ref::AgentMac,
        Ref::BmhBootMac,
        Ref::BmhInfraEnv,
        Ref::InfraEnvPullSecret,
        Ref::ClusterDeploymentInstall,
        Ref::PpiInfraEnv,
    ];

    /// The kind of the objects holding the reference.
    pub fn kind(self) -> Kind {
        match self {
            Ref::AgentClusterDeployment | Ref::AgentTokenSecret | Ref::AgentInfraEnv | Ref::AgentMac => Kind::Agent,
            Ref::BmhBootMac | Ref::BmhInfraEnv => Kind::BareMetalHost,
            Ref::InfraEnvPullSecret => Kind::InfraEnv,
            Ref::ClusterDeploymentInstall => Kind::ClusterDeployment,
            Ref::PpiInfraEnv => Kind::PreprovisioningImage,
        }
    }

    /// Whether the value is `namespace/name` (the reference names a namespace of its own) rather than
    /// a name in the holder's namespace.
    pub fn carries_namespace(self) -> bool {
        self.paths().len() == 2
    }

    /// The path of the value; two paths: a `namespace/name` pair, both required.
    fn paths(self) -> &'static [Path] {
        match self {
            Ref::AgentClusterDeployment => {
                &[&["spec", "clusterDeploymentName", "namespace"], &["spec", "clusterDeploymentName", "name"]]
            }
            Ref::AgentTokenSecret => &[
                &["spec", "ignitionEndpointTokenReference", "namespace"],
                &["spec", "ignitionEndpointTokenReference", "name"],
            ],
            Ref::AgentInfraEnv | Ref::BmhInfraEnv | Ref::PpiInfraEnv => &[&["metadata", "labels", INFRAENV_NAME_LABEL]],
            Ref::AgentMac => &[&["status", "inventory", "interfaces", "*", "macAddress"]],
            Ref::BmhBootMac => &[&["spec", "bootMACAddress"]],
            Ref::InfraEnvPullSecret => &[&["spec", "pullSecretRef", "name"]],
            Ref::ClusterDeploymentInstall => &[&["spec", "clusterInstallRef", "name"]],
        }
    }

    /// The values `obj` holds in this relation, each once.
    pub fn values(self, obj: &Value) -> Vec<String> {
        let mut out = Vec::new();
        match self.paths() {
            [ns, name] => {
                let (mut nss, mut names) = (Vec::new(), Vec::new());
                collect(obj, ns, &mut nss);
                collect(obj, name, &mut names);
                if let ([ns], [name]) = (&nss[..], &names[..]) {
                    out.push(format!("{ns}/{name}"));
                }
            }
            paths => {
                for path in paths {
                    collect(obj, path, &mut out);
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The relations held by objects of `kind`.
pub fn relations(kind: Kind) -> impl Iterator<Item = Ref> {
    Ref::ALL.into_iter().filter(move |r| r.kind() == kind)
}

/// Every (relation, value) `obj` (of `kind`) holds: what a store indexes it under.
pub fn values(kind: Kind, obj: &Value) -> Vec<(Ref, String)> {
    relations(kind).flat_map(|r| r.values(obj).into_iter().map(move |v| (r, v))).collect()
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
                     "ignitionEndpointTokenReference": {"name": "tok", "namespace": "secrets"}, "hostname": "h"},
            "status": {"inventory": {"interfaces": [{"macAddress": "aa:bb"}, {"macAddress": "CC:DD"}, {}]}}});
        let owned = |v: &[(Ref, &str)]| v.iter().map(|(r, s)| (*r, s.to_string())).collect::<Vec<_>>();
        assert_eq!(
            values(Kind::Agent, &agent),
            owned(&[
                (Ref::AgentClusterDeployment, "ns/cd"),
                (Ref::AgentTokenSecret, "secrets/tok"),
                (Ref::AgentInfraEnv, "ie"),
                (Ref::AgentMac, "CC:DD"),
                (Ref::AgentMac, "aa:bb"),
            ])
        );
        // A reference without its namespace names nothing.
        let half = serde_json::json!({"spec": {"ignitionEndpointTokenReference": {"name": "tok"}}});
        assert!(Ref::AgentTokenSecret.values(&half).is_empty());
        let bmh = serde_json::json!({"metadata": {"labels": {INFRAENV_NAME_LABEL: "ie"}},
                                     "spec": {"bootMACAddress": "AA:BB", "online": true}});
        assert_eq!(values(Kind::BareMetalHost, &bmh), owned(&[(Ref::BmhBootMac, "AA:BB"), (Ref::BmhInfraEnv, "ie")]));
        assert_eq!(
            values(Kind::InfraEnv, &serde_json::json!({"spec": {"pullSecretRef": {"name": "ps"}}})),
            owned(&[(Ref::InfraEnvPullSecret, "ps")])
        );
        assert_eq!(
            values(Kind::ClusterDeployment, &serde_json::json!({"spec": {"clusterInstallRef": {"name": "aci"}}})),
            owned(&[(Ref::ClusterDeploymentInstall, "aci")])
        );
        let ppi = serde_json::json!({"metadata": {"labels": {INFRAENV_NAME_LABEL: "ie"}}});
        assert_eq!(values(Kind::PreprovisioningImage, &ppi), owned(&[(Ref::PpiInfraEnv, "ie")]));
        assert!(values(Kind::Secret, &serde_json::json!({"metadata": {"name": "s"}})).is_empty());
    }
}
