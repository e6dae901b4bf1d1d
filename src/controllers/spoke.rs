//! The installed cluster ("spoke") side of unbinding, through its admin kubeconfig and kube-rs:
//! starting the reclaim agent on a node (spec-controllers.md §7.2), removing a node that left the
//! cluster (spec-controllers.md §2.8 `removeSpokeResources`), and draining a node whose BareMetalHost is deleted
//! (spec-controllers.md §5.6).
//!
//! Objects are written with server-side apply, so every step is create-or-update and can be
//! repeated after a failure.

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Secret, ServiceAccount};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

pub const RECLAIM_NAMESPACE: &str = "assisted-installer";
pub const RECLAIM_NAME: &str = "node-reclaim";
const FIELD_MANAGER: &str = "bootstream";
const MACHINE_ANNOTATION: &str = "machine.openshift.io/machine";
const MACHINESET_LABEL: &str = "machine.openshift.io/cluster-api-machineset";
const BMH_ANNOTATION: &str = "metal3.io/BareMetalHost";

/// Why something could not be done on a spoke cluster; Display says what failed, the source why.
#[derive(Debug, thiserror::Error)]
pub enum SpokeError {
    /// The hub's objects that lead to the spoke could not be read.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("the admin kubeconfig of {namespace}/{name} is missing")]
    NoKubeconfig { namespace: String, name: String },
    #[error("secret {0} did not contain key kubeconfig")]
    NoKubeconfigKey(String),
    #[error("invalid spoke kubeconfig")]
    Kubeconfig(#[source] crate::resources::kubeconfig::KubeconfigError),
    #[error("invalid spoke kubeconfig")]
    Client(#[source] kube::Error),
    #[error("failed to find node {node}: not found")]
    NodeMissing { node: String },
    #[error("node {node} is managed by the machine API (machine {machine})")]
    MachineManaged { node: String, machine: String },
    #[error("failed to find node {node}")]
    NodeLookup {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SpokeError {
    let what = what.into();
    move |source| SpokeError::Api { what, source }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The name of the secret holding a ClusterDeployment's admin kubeconfig (spec-controllers.md §2.8).
pub fn kubeconfig_secret_name(cd_name: &str, admin_kubeconfig_secret_ref: Option<&str>) -> String {
    match admin_kubeconfig_secret_ref.filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => format!("{cd_name}-admin-kubeconfig"),
    }
}

/// A spoke client for a ClusterDeployment's cluster, from its admin kubeconfig secret; None when that
/// secret does not exist.
pub async fn for_cluster<S: crate::store::Store>(
    store: &S,
    cd_ns: &str,
    cd_name: &str,
) -> Result<Option<SpokeClient>, SpokeError> {
    let cd = store.get::<crate::resources::ClusterDeployment>(cd_ns, cd_name).await?;
    let secret_ref = cd.as_ref().and_then(|cd| cd.admin_kubeconfig_secret_name());
    let secret_name = kubeconfig_secret_name(cd_name, secret_ref.as_deref());
    let Some(secret) = store.get::<Secret>(cd_ns, &secret_name).await? else {
        return Ok(None);
    };
    let Some(kubeconfig) = secret.data.as_ref().and_then(|d| d.get("kubeconfig")) else {
        return Err(SpokeError::NoKubeconfigKey(secret_name));
    };
    SpokeClient::from_kubeconfig(&kubeconfig.0).await.map(Some)
}

/// [`for_cluster`], with a missing admin kubeconfig an error.
pub async fn for_cluster_required<S: crate::store::Store>(
    store: &S,
    cd_ns: &str,
    cd_name: &str,
) -> Result<SpokeClient, SpokeError> {
    for_cluster(store, cd_ns, cd_name)
        .await?
        .ok_or_else(|| SpokeError::NoKubeconfig { namespace: cd_ns.to_string(), name: cd_name.to_string() })
}

/// Where one drain attempt left a node.
#[derive(Debug, PartialEq, Eq)]
pub enum Drain {
    /// Cordoned, and nothing but DaemonSet and mirror pods left on it (or the node is gone).
    Done,
    /// Cordoned; these pods are still on it (being evicted, or refused by a disruption budget).
    InProgress(Vec<String>),
}

/// Pods being deleted for longer than this are not waited for: their node does not answer (kubectl
/// drain's skip-wait-for-delete-timeout as assisted uses it).
const UNREACHABLE_POD_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);

/// What the reclaim agent needs (spec-controllers.md §7.2).
#[derive(Clone, Debug)]
pub struct ReclaimAgentConfig {
    pub node_name: String,
    pub infra_env_id: String,
    pub host_id: String,
    pub service_base_url: String,
    pub agent_image: String,
    pub auth_token: String,
    pub skip_cert_verification: bool,
    pub ca_cert: Option<String>,
}

#[derive(Clone)]
pub struct SpokeClient {
    client: kube::Client,
}

fn gvk(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

impl SpokeClient {
    /// The client of the cluster an admin kubeconfig names. The kubeconfig comes from a tenant
    /// (its bootstrap host uploaded it, or someone wrote the Secret): it is taken as data only,
    /// through [`crate::resources::kubeconfig::client_config`], so that whatever it holds no
    /// program runs and no file of the hub is read. This is the only way a spoke client is made.
    pub async fn from_kubeconfig(kubeconfig: &[u8]) -> Result<SpokeClient, SpokeError> {
        let mut config = crate::resources::kubeconfig::client_config(kubeconfig).map_err(SpokeError::Kubeconfig)?;
        // An unreachable spoke must fail the unbind quickly (it falls back to a plain unbind).
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(20));
        let client = kube::Client::try_from(config).map_err(SpokeError::Client)?;
        Ok(SpokeClient { client })
    }

    fn dynamic(&self, res: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, res),
            None => Api::all_with(self.client.clone(), res),
        }
    }

    async fn apply<K>(&self, api: &Api<K>, name: &str, obj: Value, what: &str) -> Result<(), SpokeError>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
            .await
            .map(|_| ())
            .map_err(api_err(format!("failed to create or update {what} {name}")))
    }

    /// One attempt at `kubectl drain --force --ignore-daemonsets --delete-emptydir-data`: cordons the
    /// node and asks for the eviction of every pod on it but DaemonSet and mirror pods. Evictions go
    /// through the API's eviction subresource, so disruption budgets hold: a refused eviction leaves
    /// the pod for the next attempt.
    pub async fn drain_node(&self, node_name: &str, now: jiff::Timestamp) -> Result<Drain, SpokeError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let cordon = json!({"spec": {"unschedulable": true}});
        match nodes.patch(node_name, &PatchParams::default(), &Patch::Merge(cordon)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Drain::Done),
            Err(e) => return Err(SpokeError::Api { what: format!("failed to cordon node {node_name}"), source: e }),
        }
        let all: Api<Pod> = Api::all(self.client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node_name}"));
        let pods = all.list(&on_node).await.map_err(api_err(format!("failed to list the pods of node {node_name}")))?;
        let mut left = Vec::new();
        for pod in pods.items {
            let meta = &pod.metadata;
            let daemon =
                meta.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
            let mirror = meta.annotations.as_ref().is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
            if daemon || mirror {
                continue;
            }
            let (ns, name) = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
            if let Some(deleting) = &meta.deletion_timestamp {
                if deleting.0.checked_add(UNREACHABLE_POD_GRACE).is_ok_and(|until| until > now) {
                    left.push(format!("{ns}/{name}"));
                }
                continue;
            }
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            match pods.evict(&name, &EvictParams::default()).await {
                Ok(_) => left.push(format!("{ns}/{name}")),
                Err(e) if is_not_found(&e) => {}
                // A disruption budget refuses for now.
                Err(kube::Error::Api(s)) if s.code == 429 => left.push(format!("{ns}/{name}")),
                Err(e) => return Err(SpokeError::Api { what: format!("failed to evict pod {ns}/{name}"), source: e }),
            }
        }
        Ok(if left.is_empty() { Drain::Done } else { Drain::InProgress(left) })
    }

    pub async fn node_exists(&self, node: &str) -> Result<bool, SpokeError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes.get_opt(node).await.map(|n| n.is_some()).map_err(api_err(format!("failed to get node {node}")))
    }

    /// Creates (or updates) the reclaim agent's objects, in spec-controllers.md §7.2 order.
    pub async fn ensure_reclaim_agent(&self, cfg: &ReclaimAgentConfig) -> Result<(), SpokeError> {
        // The node first: nothing is written on a spoke whose node is missing or managed by someone else.
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = match nodes.get_opt(&cfg.node_name).await {
            Ok(Some(n)) => n,
            Ok(None) => {
                return Err(SpokeError::NodeMissing { node: cfg.node_name.clone() });
            }
            Err(source) => return Err(SpokeError::NodeLookup { node: cfg.node_name.clone(), source }),
        };
        // A node of a Machine is the machine API's to replace or remove (the reclaim design): rebooting it
        // into discovery behind that provider's back would fight it.
        if let Some(machine) = node.metadata.annotations.as_ref().and_then(|a| a.get(MACHINE_ANNOTATION)) {
            // The spoke's text, bounded before it reaches a log line.
            let machine = machine.chars().take(253).collect();
            return Err(SpokeError::MachineManaged { node: cfg.node_name.clone(), machine });
        }
        let ns = RECLAIM_NAMESPACE;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        self.apply(
            &namespaces,
            ns,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
            "namespace",
        )
        .await?;
        let sas: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
        self.apply(
            &sas,
            RECLAIM_NAME,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": RECLAIM_NAME, "namespace": ns}}),
            "service account",
        )
        .await?;
        let roles = self.dynamic(&gvk("authorization.openshift.io", "v1", "Role", "roles"), Some(ns));
        self.apply(
            &roles,
            RECLAIM_NAME,
            json!({"apiVersion": "authorization.openshift.io/v1", "kind": "Role",
                   "metadata": {"name": RECLAIM_NAME, "namespace": ns},
                   "rules": [{"apiGroups": ["security.openshift.io"], "resources": ["securitycontextconstraints"],
                              "resourceNames": ["privileged"], "verbs": ["use"]}]}),
            "role",
        )
        .await?;
        let bindings = self.dynamic(&gvk("authorization.openshift.io", "v1", "RoleBinding", "rolebindings"), Some(ns));
        self.apply(
            &bindings,
            RECLAIM_NAME,
            json!({"apiVersion": "authorization.openshift.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": RECLAIM_NAME, "namespace": ns},
                   "roleRef": {"kind": "Role", "name": RECLAIM_NAME, "namespace": ns},
                   "subjects": [{"kind": "ServiceAccount", "name": RECLAIM_NAME, "namespace": ns}]}),
            "role binding",
        )
        .await?;
        let secret_name = format!("reclaim-{}-token", cfg.infra_env_id);
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        self.apply(
            &secrets,
            &secret_name,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": secret_name, "namespace": ns},
                   "stringData": {"auth-token": cfg.auth_token}}),
            "secret",
        )
        .await?;
        if let Some(ca) = &cfg.ca_cert {
            let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
            self.apply(
                &cms,
                "reclaim-config",
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "reclaim-config", "namespace": ns},
                       "data": {"service-ca-cert.crt": ca}}),
                "config map",
            )
            .await?;
        }
        let ds = reclaim_daemonset(cfg, node.metadata.uid.as_deref().unwrap_or_default());
        let name = ds["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let daemonsets: Api<DaemonSet> = Api::namespaced(self.client.clone(), ns);
        self.apply(&daemonsets, &name, ds, "daemonset").await
    }

    /// spec-controllers.md §2.8 `removeSpokeResources`: removes the node, through its Machine (and MachineSet) when it
    /// has one.
    pub async fn remove_spoke_resources(&self, node_name: &str) -> Result<(), SpokeError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let Some(node) = nodes.get_opt(node_name).await.map_err(api_err(format!("failed to get node {node_name}")))?
        else {
            return Ok(());
        };
        let delete_node = || async {
            match nodes.delete(node_name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(e) => Err(SpokeError::Api { what: format!("failed to delete node {node_name}"), source: e }),
            }
        };
        let machine_ref = node.metadata.annotations.as_ref().and_then(|a| a.get(MACHINE_ANNOTATION)).cloned();
        let Some((m_ns, m_name)) = machine_ref.as_deref().and_then(|r| r.split_once('/')) else {
            return delete_node().await;
        };
        let machines = self.dynamic(&gvk("machine.openshift.io", "v1beta1", "Machine", "machines"), Some(m_ns));
        let machine = match machines.get_opt(m_name).await {
            Ok(Some(m)) => m,
            Ok(None) => return delete_node().await,
            Err(e) => {
                return Err(SpokeError::Api { what: format!("failed to get machine {m_ns}/{m_name}"), source: e });
            }
        };
        machines
            .patch(
                m_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    "machine.openshift.io/delete-machine": "true",
                    "machine.openshift.io/exclude-node-draining": "true"}}})),
            )
            .await
            .map_err(api_err(format!("failed to annotate machine {m_ns}/{m_name}")))?;
        let machineset = machine.metadata.labels.as_ref().and_then(|l| l.get(MACHINESET_LABEL)).cloned();
        let machinesets =
            self.dynamic(&gvk("machine.openshift.io", "v1beta1", "MachineSet", "machinesets"), Some(m_ns));
        let machineset_exists = match &machineset {
            Some(ms) => machinesets
                .get_opt(ms)
                .await
                .map_err(api_err(format!("failed to get machineset {m_ns}/{ms}")))?
                .is_some(),
            None => false,
        };
        if machineset_exists {
            let ms = machineset.expect("checked above");
            machinesets
                .patch(
                    &ms,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {"metal3.io/autoscale-to-hosts": "true"}}})),
                )
                .await
                .map_err(api_err(format!("failed to annotate machineset {m_ns}/{ms}")))?;
            self.delete_bmh(&machine).await
        } else {
            self.delete_bmh(&machine).await?;
            match machines.delete(m_name, &DeleteParams::default()).await {
                Ok(_) => Ok(()),
                Err(e) if is_not_found(&e) => Ok(()),
                Err(e) => Err(SpokeError::Api { what: format!("failed to delete machine {m_ns}/{m_name}"), source: e }),
            }
        }
    }

    async fn delete_bmh(&self, machine: &DynamicObject) -> Result<(), SpokeError> {
        let Some(bmh) = machine.metadata.annotations.as_ref().and_then(|a| a.get(BMH_ANNOTATION)) else {
            return Ok(());
        };
        let Some((ns, name)) = bmh.split_once('/') else { return Ok(()) };
        let bmhs = self.dynamic(&gvk("metal3.io", "v1alpha1", "BareMetalHost", "baremetalhosts"), Some(ns));
        match bmhs.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(SpokeError::Api { what: format!("failed to delete baremetalhost {ns}/{name}"), source: e }),
        }
    }
}

/// The reclaim DaemonSet of spec-controllers.md §7.2: the next-step runner, pinned to the node and owned by it.
pub fn reclaim_daemonset(cfg: &ReclaimAgentConfig, node_uid: &str) -> Value {
    let name = format!("{}-reclaim", cfg.node_name.replace('.', "-"));
    let mut args = vec![
        format!("-url={}", cfg.service_base_url),
        format!("-infra-env-id={}", cfg.infra_env_id),
        format!("-host-id={}", cfg.host_id),
        format!("-agent-version={}", cfg.agent_image),
        format!("-insecure={}", cfg.skip_cert_verification),
        "-with-journal-logging=false".to_string(),
        "-with-stdout-logging=true".to_string(),
    ];
    let mut volumes = vec![json!({"name": "host", "hostPath": {"path": "/"}})];
    let mut mounts = vec![json!({"name": "host", "mountPath": "/host"})];
    if cfg.ca_cert.is_some() {
        args.push("-cacert=/etc/assisted-service/service-ca-cert.crt".into());
        volumes.push(json!({"name": "ca-cert", "configMap": {"name": "reclaim-config"}}));
        mounts.push(json!({"name": "ca-cert", "mountPath": "/etc/assisted-service"}));
    }
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {
            "name": name, "namespace": RECLAIM_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": cfg.node_name, "uid": node_uid}],
        },
        "spec": {
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": cfg.node_name},
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "hostPID": true,
                    "serviceAccountName": RECLAIM_NAME,
                    "containers": [{
                        "name": name,
                        "image": cfg.agent_image,
                        "command": ["next_step_runner"],
                        "args": args,
                        "securityContext": {"privileged": true},
                        "env": [{"name": "PULL_SECRET_TOKEN",
                                 "valueFrom": {"secretKeyRef": {"name": format!("reclaim-{}-token", cfg.infra_env_id),
                                                                "key": "auth-token"}}}],
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::spoke::SpokeCluster;

    const NS_PATH: &str = "/api/v1/namespaces/assisted-installer";

    fn config(node: &str) -> ReclaimAgentConfig {
        ReclaimAgentConfig {
            node_name: node.to_string(),
            infra_env_id: "ie-1".into(),
            host_id: "host-1".into(),
            service_base_url: "http://hub.example:8090".into(),
            agent_image: "quay.io/example/agent:v1".into(),
            auth_token: "agent-token".into(),
            skip_cert_verification: false,
            ca_cert: None,
        }
    }

    async fn spoke_with_node(node: &str, annotations: Value) -> (SpokeCluster, SpokeClient) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let spoke = SpokeCluster::start().await;
        spoke.put(
            &format!("/api/v1/nodes/{node}"),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "annotations": annotations}}),
        );
        let client = SpokeClient::from_kubeconfig(spoke.kubeconfig().as_bytes()).await.expect("kubeconfig");
        (spoke, client)
    }

    #[tokio::test]
    async fn scenario_29_reclaim_objects_are_ensured_on_the_spoke() {
        let (spoke, client) = spoke_with_node("worker-0.example", json!({})).await;
        client.ensure_reclaim_agent(&config("worker-0.example")).await.expect("reclaim agent");
        let node_uid = spoke.get("/api/v1/nodes/worker-0.example").unwrap()["metadata"]["uid"].clone();
        let ds_path = "/apis/apps/v1/namespaces/assisted-installer/daemonsets/worker-0-example-reclaim".to_string();
        for path in [
            NS_PATH.to_string(),
            format!("{NS_PATH}/serviceaccounts/node-reclaim"),
            "/apis/authorization.openshift.io/v1/namespaces/assisted-installer/roles/node-reclaim".into(),
            "/apis/authorization.openshift.io/v1/namespaces/assisted-installer/rolebindings/node-reclaim".into(),
            format!("{NS_PATH}/secrets/reclaim-ie-1-token"),
            ds_path.clone(),
        ] {
            assert!(spoke.get(&path).is_some(), "{path} missing; have {:?}", spoke.paths());
        }
        let ds = spoke.get(&ds_path).unwrap();
        assert_eq!(ds["metadata"]["ownerReferences"][0]["uid"], node_uid);
        assert_eq!(ds["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"], "worker-0.example");
        assert_eq!(
            ds["spec"]["template"]["spec"]["containers"][0]["args"][0], "-url=http://hub.example:8090",
            "{ds:#}"
        );
        // The API server folds stringData into data.
        assert_eq!(
            spoke.get(&format!("{NS_PATH}/secrets/reclaim-ie-1-token")).unwrap()["data"]["auth-token"],
            "YWdlbnQtdG9rZW4="
        );
        // The namespace comes first and the DaemonSet last (spec-controllers.md §7.2), all as server-side apply.
        let patches: Vec<String> = spoke.requests().into_iter().filter(|r| r.starts_with("PATCH")).collect();
        assert_eq!(patches.first().map(String::as_str), Some(format!("PATCH {NS_PATH}").as_str()));
        assert_eq!(patches.last(), Some(&format!("PATCH {ds_path}")));
        // Create-or-update: a second run succeeds and changes nothing but versions.
        client.ensure_reclaim_agent(&config("worker-0.example")).await.expect("second run");
        assert_eq!(spoke.paths().len(), 7);
    }

    #[tokio::test]
    async fn scenario_30_reclaim_fails_without_the_node_or_when_the_spoke_refuses() {
        let (spoke, client) = spoke_with_node("worker-0", json!({})).await;
        let err = client.ensure_reclaim_agent(&config("worker-1")).await.unwrap_err();
        assert!(matches!(err, SpokeError::NodeMissing { .. }), "{err}");
        spoke.fail("PATCH", "/apis/apps/v1/", 500);
        let err = client.ensure_reclaim_agent(&config("worker-0")).await.unwrap_err();
        assert!(err.to_string().contains("failed to create or update daemonset worker-0-reclaim"), "{err}");
        let unreachable =
            SpokeClient::from_kubeconfig(spoke.kubeconfig().replace(&spoke.url, "http://127.0.0.1:9").as_bytes())
                .await
                .unwrap();
        assert!(unreachable.ensure_reclaim_agent(&config("worker-0")).await.is_err());
        assert!(SpokeClient::from_kubeconfig(b"not: a kubeconfig: at all").await.is_err());
    }

    #[tokio::test]
    async fn scenario_37_a_node_without_a_machine_is_deleted_with_its_reclaim_agent() {
        let (spoke, client) = spoke_with_node("worker-0", json!({})).await;
        client.ensure_reclaim_agent(&config("worker-0")).await.unwrap();
        client.remove_spoke_resources("worker-0").await.expect("removal");
        assert!(spoke.get("/api/v1/nodes/worker-0").is_none());
        assert!(
            spoke.get("/apis/apps/v1/namespaces/assisted-installer/daemonsets/worker-0-reclaim").is_none(),
            "the DaemonSet goes with its Node"
        );
        // A node already gone is not an error.
        client.remove_spoke_resources("worker-0").await.expect("second removal");
    }

    const MACHINES: &str = "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api";
    const BMH: &str = "/apis/metal3.io/v1alpha1/namespaces/openshift-machine-api/baremetalhosts/bmh-0";

    async fn node_with_machine(machineset: Option<&str>) -> (SpokeCluster, SpokeClient) {
        let (spoke, client) =
            spoke_with_node("worker-0", json!({"machine.openshift.io/machine": "openshift-machine-api/m-0"})).await;
        let mut machine = json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m-0", "namespace": "openshift-machine-api",
                         "annotations": {"metal3.io/BareMetalHost": "openshift-machine-api/bmh-0"}}});
        if let Some(ms) = machineset {
            machine["metadata"]["labels"] = json!({"machine.openshift.io/cluster-api-machineset": ms});
            spoke.put(
                &format!("{MACHINES}/machinesets/{ms}"),
                json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
                       "metadata": {"name": ms, "namespace": "openshift-machine-api"}}),
            );
        }
        spoke.put(&format!("{MACHINES}/machines/m-0"), machine);
        spoke.put(
            BMH,
            json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                              "metadata": {"name": "bmh-0", "namespace": "openshift-machine-api"}}),
        );
        (spoke, client)
    }

    #[tokio::test]
    async fn scenario_39_a_machine_without_machineset_is_deleted_with_its_bmh() {
        let (spoke, client) = node_with_machine(None).await;
        client.remove_spoke_resources("worker-0").await.expect("removal");
        assert!(spoke.get(BMH).is_none());
        assert!(spoke.get(&format!("{MACHINES}/machines/m-0")).is_none());
    }

    #[tokio::test]
    async fn scenario_39_a_machineset_scales_down_to_the_remaining_hosts() {
        let (spoke, client) = node_with_machine(Some("workers")).await;
        client.remove_spoke_resources("worker-0").await.expect("removal");
        let machine = spoke.get(&format!("{MACHINES}/machines/m-0")).expect("the machine stays");
        assert_eq!(machine["metadata"]["annotations"]["machine.openshift.io/delete-machine"], "true");
        assert_eq!(machine["metadata"]["annotations"]["machine.openshift.io/exclude-node-draining"], "true");
        let ms = spoke.get(&format!("{MACHINES}/machinesets/workers")).unwrap();
        assert_eq!(ms["metadata"]["annotations"]["metal3.io/autoscale-to-hosts"], "true");
        assert!(spoke.get(BMH).is_none());
    }
}
