//! The fields by which one object refers to another, as named relations: what a store indexes so
//! that "the Agents of this ClusterDeployment" or "the BareMetalHost with this boot MAC" is a lookup
//! ([`crate::store::Store::list_referencing`]), not a scan of every object of the kind (a hub holds
//! tens of thousands of Agents). Each store keeps the index up to date at every write of an object,
//! from that object alone (constant work per write).
//!
//! A relation's value is the referenced object's name, or `namespace/name` where the reference
//! carries its own namespace. Two relations of InfraEnvs hold no reference but what one looks for
//! when something all of them may use changes: whether its image has the ironic agent (one value),
//! and a label its NMStateConfig selector requires ([`nmstate_selector_value`]). The controllers
//! that follow each one are listed at [`Ref`].
//!
//! Every value is bounded: names by the API's name rules, the NMStateConfig selector's by the rules
//! of a label (an InfraEnv whose selector requires a label no object can carry is indexed under
//! [`ANY_SELECTOR`], not under that label).

use serde_json::Value;

use super::{ENABLE_IRONIC_AGENT_ANNOTATION, INFRAENV_NAME_LABEL, Kind, LabelSelector};

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
    /// InfraEnv annotation `infraenv.agent-install.openshift.io/enable-ironic-agent: "true"`, indexed
    /// under the one value [`IRONIC_AGENT`]: the InfraEnvs the hub's image-customization Secret
    /// concerns (InfraEnv controller's trigger).
    InfraEnvIronicAgent,
    /// InfraEnv `spec.nmStateConfigLabelSelector`, indexed under one `key=value` its `matchLabels`
    /// requires, or [`ANY_SELECTOR`] (see [`nmstate_selector_value`]): the InfraEnvs an NMStateConfig
    /// with some labels may concern (InfraEnv controller's trigger).
    InfraEnvNmStateSelector,
}

/// The value of [`Ref::InfraEnvIronicAgent`].
pub const IRONIC_AGENT: &str = "true";

/// The value of [`Ref::InfraEnvNmStateSelector`] for a selector that requires no label pair the index
/// can name (only `matchExpressions`, or a `matchLabels` pair no object's labels can hold): such an
/// InfraEnv is checked for every NMStateConfig of its namespace. Not a `key=value`, so no label
/// lookup finds it by chance.
pub const ANY_SELECTOR: &str = "*";

impl Ref {
    pub const ALL: [Ref; 11] = [
        Ref::AgentClusterDeployment,
        Ref::AgentTokenSecret,
        Ref::AgentInfraEnv,
        Ref::AgentMac,
        Ref::BmhBootMac,
        Ref::BmhInfraEnv,
        Ref::InfraEnvPullSecret,
        Ref::ClusterDeploymentInstall,
        Ref::PpiInfraEnv,
        Ref::InfraEnvIronicAgent,
        Ref::InfraEnvNmStateSelector,
    ];

    /// The kind of the objects holding the reference.
    pub fn kind(self) -> Kind {
        match self {
            Ref::AgentClusterDeployment | Ref::AgentTokenSecret | Ref::AgentInfraEnv | Ref::AgentMac => Kind::Agent,
            Ref::BmhBootMac | Ref::BmhInfraEnv => Kind::BareMetalHost,
            Ref::InfraEnvPullSecret | Ref::InfraEnvIronicAgent | Ref::InfraEnvNmStateSelector => Kind::InfraEnv,
            Ref::ClusterDeploymentInstall => Kind::ClusterDeployment,
            Ref::PpiInfraEnv => Kind::PreprovisioningImage,
        }
    }

    /// Whether the value is `namespace/name` (the reference names a namespace of its own) rather than
    /// a name in the holder's namespace.
    pub fn carries_namespace(self) -> bool {
        self.paths().len() == 2
    }

    /// The path of the value; two paths: a `namespace/name` pair, both required. No path for the
    /// relations whose value is worked out from the object ([`Ref::values`]).
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
            Ref::InfraEnvIronicAgent | Ref::InfraEnvNmStateSelector => &[],
        }
    }

    /// The values `obj` holds in this relation, each once.
    pub fn values(self, obj: &Value) -> Vec<String> {
        let mut out = Vec::new();
        match self {
            Ref::InfraEnvIronicAgent => {
                let annotation =
                    obj.pointer("/metadata/annotations").and_then(|a| a.get(ENABLE_IRONIC_AGENT_ANNOTATION));
                if annotation.and_then(Value::as_str) == Some("true") {
                    out.push(IRONIC_AGENT.to_string());
                }
                return out;
            }
            Ref::InfraEnvNmStateSelector => {
                let Some(selector) = obj.pointer("/spec/nmStateConfigLabelSelector").filter(|s| !s.is_null()) else {
                    return out;
                };
                // One that does not read as a selector is checked at every change, to be safe.
                let value = match serde_json::from_value::<LabelSelector>(selector.clone()) {
                    Ok(selector) => nmstate_selector_value(&selector),
                    Err(_) => Some(ANY_SELECTOR.to_string()),
                };
                return value.into_iter().collect();
            }
            _ => {}
        }
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

/// The [`Ref::InfraEnvNmStateSelector`] value of an InfraEnv with `selector`: None when it selects
/// nothing (empty, as assisted-service reads it); else the first `key=value` of its `matchLabels`
/// that a label can be, which every NMStateConfig it selects carries (one pair is enough: each must
/// hold, and one value per InfraEnv reads it once per NMStateConfig change); else [`ANY_SELECTOR`].
pub fn nmstate_selector_value(selector: &LabelSelector) -> Option<String> {
    if selector.is_empty() {
        return None;
    }
    let pair = selector.match_labels.iter().find(|(k, v)| is_label_key(k) && is_label_value(v));
    Some(pair.map_or_else(|| ANY_SELECTOR.to_string(), |(k, v)| label_pair(k, v)))
}

/// The [`Ref::InfraEnvNmStateSelector`] values under which the InfraEnvs an object with `labels`
/// may concern are indexed: one per label a label can be, and [`ANY_SELECTOR`]. An InfraEnv found
/// is then checked against its whole selector.
pub fn nmstate_selector_lookups(labels: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let pairs = labels.iter().filter(|(k, v)| is_label_key(k) && is_label_value(v)).map(|(k, v)| label_pair(k, v));
    pairs.chain([ANY_SELECTOR.to_string()]).collect()
}

fn label_pair(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// A label key as Kubernetes validates one: `[prefix/]name`, the prefix a DNS subdomain of at most
/// 253 characters, the name at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both ends.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let subdomain = |p: &str| {
        p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    };
    !name.is_empty() && is_label_value(name) && prefix.is_none_or(subdomain)
}

/// A label value as Kubernetes validates one: empty, or at most 63 alphanumerics, `-`, `_` and `.`,
/// alphanumeric at both ends.
fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_none_or(u8::is_ascii_alphanumeric)
        && b.last().is_none_or(u8::is_ascii_alphanumeric)
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

    #[test]
    fn infraenvs_are_indexed_by_the_ironic_agent_and_by_one_label_their_selector_requires() {
        let ie = |annotation: &str, selector: Value| {
            serde_json::json!({"metadata": {"annotations": {ENABLE_IRONIC_AGENT_ANNOTATION: annotation}},
                               "spec": {"nmStateConfigLabelSelector": selector}})
        };
        let ironic = |v: &Value| Ref::InfraEnvIronicAgent.values(v);
        let nmstate = |v: &Value| Ref::InfraEnvNmStateSelector.values(v);
        assert_eq!(ironic(&ie("true", Value::Null)), [IRONIC_AGENT]);
        assert!(ironic(&ie("false", Value::Null)).is_empty());
        assert!(ironic(&serde_json::json!({"metadata": {}})).is_empty());
        // No selector, or an empty one, selects nothing: not indexed.
        assert!(nmstate(&ie("", Value::Null)).is_empty());
        assert!(nmstate(&ie("", serde_json::json!({}))).is_empty());
        assert_eq!(nmstate(&ie("", serde_json::json!({"matchLabels": {"b": "2", "a": "1"}}))), ["a=1"]);
        let exprs = serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]});
        assert_eq!(nmstate(&ie("", exprs)), [ANY_SELECTOR]);
        // A pair no label can be is not a value (unbounded); the next one is, or the wildcard.
        let long = "x".repeat(64);
        let odd = serde_json::json!({"matchLabels": {"a b": "1", "c": long, "d/e/f": "2", "z.io/k": "v"}});
        assert_eq!(nmstate(&ie("", odd)), ["z.io/k=v"]);
        assert_eq!(nmstate(&ie("", serde_json::json!({"matchLabels": {"k": long}}))), [ANY_SELECTOR]);
        assert_eq!(nmstate(&ie("", serde_json::json!({"matchLabels": 7}))), [ANY_SELECTOR]);
        let labels = [("a", "1"), ("bad key", "2"), ("c", "")].map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(nmstate_selector_lookups(&labels.into()), ["a=1", "c=", ANY_SELECTOR]);
    }
}
