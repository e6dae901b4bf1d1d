//! Agent and ClusterDeployment controller scenarios of spec-controllers.md §10 (25–40, 55–57), run against
//! the real SQLite store and backend, with a fake spoke API server where a scenario reaches the
//! installed cluster. Each test is named after its scenario.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::Hub;
use super::agent::{self, AgentContext};
use super::agent_conditions::*;
use super::cluster::{self, ClusterContext};
use super::runtime::Action;
use crate::hosts::{HostKind, HostStatus};
use crate::pool::{Backend, BackendConfig, ManualClock};
use crate::resources::agent::{Agent, DeprovisionInfo, SKIP_SPOKE_CLEANUP_ANNOTATION};
use crate::resources::{INFRAENV_NAME_LABEL, InfraEnv, Kind};
use crate::store::Store;
use crate::store::kube::KubeStore;
use crate::store::sqlite::SqliteStore;
use crate::testkit::hub::ApiServer;
use crate::testkit::realhub::RealHub;
use crate::testkit::spoke::SpokeCluster;

mod infraenv_feed;
mod interleavings;
mod metal3;

thread_local! {
    /// The namespace of the scenario running on this thread: "pool", or on the real hub, which tests
    /// share, one of the scenario's own.
    static SCENARIO_NS: std::cell::Cell<&'static str> = const { std::cell::Cell::new("pool") };
}

/// The namespace the scenario works in.
fn ns() -> &'static str {
    SCENARIO_NS.with(|n| n.get())
}

/// The hub as a scenario sees it: the controllers' store (SQLite, or a cluster through the Kubernetes
/// API), the store users apply their YAML to (the same SQLite store, or the one behind that API), and
/// the backend's host records (a local SQLite file in both deployments).
struct World<S: Store> {
    store: S,
    /// What other actors (metal3, users) write through: on Kubernetes, with their own permissions.
    admin: S,
    api: Behind,
    backend: Arc<Backend>,
    clock: Arc<ManualClock>,
    hub: Hub<S>,
    /// The Kubernetes API server of the Kubernetes variant, alive as long as the world.
    _cluster: Option<Arc<ApiServer>>,
    /// On Kubernetes: waits until the controllers' cache has what the API server has.
    settle: Option<Settle>,
}

/// What holds the resources behind the controllers' back: the store behind the API server (the
/// embedded store itself, or the test API server's), or a real API server.
#[derive(Clone)]
enum Behind {
    Sqlite(SqliteStore),
    /// kube-apiserver, written as its cluster admin; `observer` watches every kind in the scenario's
    /// namespace, as admin: what the API server announces.
    Hub {
        admin: kube::Client,
        observer: KubeStore,
    },
}

impl Behind {
    /// Creates or updates the object of a user's document, as `kubectl apply` would.
    async fn apply_document(&self, kind: Kind, doc: Value) -> Value {
        match self {
            Behind::Sqlite(s) => s.apply_document(kind, doc).await.expect("apply").0,
            Behind::Hub { admin, .. } => {
                let api: kube::Api<kube::core::DynamicObject> = if kind.namespaced() {
                    let namespace = doc["metadata"]["namespace"].as_str().unwrap_or(ns());
                    kube::Api::namespaced_with(admin.clone(), namespace, &api_resource(kind))
                } else {
                    kube::Api::all_with(admin.clone(), &api_resource(kind))
                };
                let name = doc["metadata"]["name"].as_str().expect("a name").to_string();
                let params = kube::api::PatchParams::apply("scenario-user").force();
                let applied = api
                    .patch(&name, &params, &kube::api::Patch::Apply(&doc))
                    .await
                    .unwrap_or_else(|e| panic!("applying {} {name}: {e}", kind.name()));
                serde_json::to_value(applied).unwrap()
            }
        }
    }

    /// Replaces the object (not its status), past any admission but the API server's own.
    async fn update<K: crate::store::Object>(&self, obj: &K) {
        match self {
            Behind::Sqlite(s) => drop(s.update(obj).await.unwrap()),
            Behind::Hub { observer, .. } => drop(observer.update(obj).await.unwrap()),
        }
    }

    /// Waits until what [`Behind::subscribe`] announces has caught up with the API server: a no-op
    /// where the announcements are the store's own (made as it commits).
    async fn caught_up(&self) {
        if let Behind::Hub { admin, observer } = self {
            observer.caught_up_with_cluster(admin, ns()).await;
        }
    }

    /// Every change the API server makes.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<crate::store::ChangeEvent> {
        match self {
            Behind::Sqlite(s) => s.subscribe(),
            Behind::Hub { observer, .. } => observer.subscribe(),
        }
    }
}

fn api_resource(kind: Kind) -> kube::core::ApiResource {
    let api_version = kind.api_version();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    kube::core::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.name().into(),
        plural: kind.plural().into(),
    }
}

type Settle = Arc<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// What [`World::settle`] waits for on Kubernetes: `store`'s watches to have brought it everything
/// `api` (the store behind the API server) holds.
fn kube_settle(store: &KubeStore, api: &SqliteStore) -> Settle {
    let (store, api) = (store.clone(), api.clone());
    Arc::new(move || {
        let (store, api) = (store.clone(), api.clone());
        Box::pin(async move { store.caught_up_with(&api).await })
    })
}

/// The embedded deployment: one SQLite store for everything.
async fn embedded() -> World<SqliteStore> {
    SCENARIO_NS.with(|n| n.set("pool"));
    let store = SqliteStore::open_in_memory().unwrap();
    world(store.clone(), store.clone(), Behind::Sqlite(store.clone()), store, None, None).await
}

/// The Kubernetes deployment: the controllers reach the resources through kube-rs and an API server;
/// host records stay in a SQLite store of their own.
async fn on_kubernetes() -> World<KubeStore> {
    SCENARIO_NS.with(|n| n.set("pool"));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = SqliteStore::open_in_memory().unwrap();
    let server = ApiServer::start(api.clone()).await;
    // The controllers have exactly the permissions the manifests users install give them.
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml")).unwrap();
    let grants = crate::testkit::hub::service_account_grants(&rbac, "bootstream", "bootstream-controller").unwrap();
    server.enforce_rbac("controller", grants);
    let admin_rule = serde_json::from_value(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})).unwrap();
    server.enforce_rbac("admin", vec![crate::testkit::hub::Grant { namespace: None, rule: admin_rule }]);
    let store = KubeStore::start(server.client_as("controller").await, &Kind::ALL).await;
    let admin = KubeStore::start(server.client_as("admin").await, &[]).await;
    let settle = kube_settle(&store, &api);
    world(
        store,
        admin,
        Behind::Sqlite(api),
        SqliteStore::open_in_memory().unwrap(),
        Some(Arc::new(server)),
        Some(settle),
    )
    .await
}

/// The Kubernetes deployment on a real kube-apiserver and etcd ([`RealHub`], shared by the tests of
/// a run), in a namespace of the scenario's own (`label` names it). The controllers use a token of
/// the ServiceAccount `deploy/rbac.yaml` binds, so they have exactly the permissions it grants; users
/// and metal3 write as the cluster admin.
async fn on_real_hub(label: &str) -> World<KubeStore> {
    let (store, admin, api, settle) = real_hub_stores(label).await;
    world(store, admin, api, SqliteStore::open_in_memory().unwrap(), None, Some(settle)).await
}

/// The stores of a scenario on the real hub: the controllers', the admin's, what is behind them, and
/// the wait for the controllers' cache to catch up.
async fn real_hub_stores(label: &str) -> (KubeStore, KubeStore, Behind, Settle) {
    let hub = RealHub::shared().await;
    let namespace: &'static str = Box::leak(hub.namespace(label).await.into_boxed_str());
    SCENARIO_NS.with(|n| n.set(namespace));
    let token = hub.service_account_token("bootstream-controller").await;
    let store = KubeStore::start_in(hub.client_as(&token).await, &Kind::ALL, Some(namespace)).await;
    let admin_client = hub.admin().await;
    let admin = KubeStore::start_in(admin_client.clone(), &[], Some(namespace)).await;
    let observer = KubeStore::start_in(admin_client.clone(), &Kind::ALL, Some(namespace)).await;
    let settle: Settle = {
        let (store, admin_client) = (store.clone(), admin_client.clone());
        Arc::new(move || {
            let (store, admin_client) = (store.clone(), admin_client.clone());
            Box::pin(async move { store.caught_up_with_cluster(&admin_client, namespace).await })
        })
    };
    (store, admin, Behind::Hub { admin: admin_client, observer }, settle)
}

async fn world<S: Store>(
    store: S,
    admin: S,
    api: Behind,
    records: SqliteStore,
    cluster: Option<Arc<ApiServer>>,
    settle: Option<Settle>,
) -> World<S> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let backend = Backend::load(records, clock.clone(), BackendConfig::default()).await.unwrap();
    let hub = Hub {
        agents: AgentContext {
            store: store.clone(),
            backend: backend.clone(),
            auth: crate::auth::AgentAuth::from_key([7; 32]),
            service_base_url: "http://hub.example:8090".into(),
            service_ca_cert_pem: None,
            agent_image: "quay.io/example/agent:v1".into(),
            metal3: true,
            own_writes: Default::default(),
            url_signer: None,
        },
        clusters: ClusterContext {
            store: store.clone(),
            backend: backend.clone(),
            service_base_url: "http://hub.example:8090".into(),
            url_signer: None,
        },
    };
    let w = World { store, admin, api, backend, clock, hub, _cluster: cluster, settle };
    w.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ps", "namespace": ns()},
                                  "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}),
    )
    .await;
    w.infraenv("pool", None).await;
    w
}

/// Each scenario named runs three times, with the same assertions: against the embedded store
/// (`embedded::NAME`), against bootstream's own Kubernetes API server through kube-rs
/// (`kubernetes::NAME`), and against a real kube-apiserver and etcd (`real_hub::NAME`, the run's
/// shared [`RealHub`], a namespace of the scenario's own). On both Kubernetes servers the controllers
/// have only what `deploy/rbac.yaml` grants them: a refused request fails the scenario.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $( #[tokio::test] async fn $name() { super::$name(super::embedded().await).await } )*
        }
        mod kubernetes {
            $( #[tokio::test] async fn $name() {
                let w = super::on_kubernetes().await;
                let cluster = w._cluster.clone().expect("the cluster");
                let usage = w.store.usage();
                let lists = usage.requests_of("list");
                super::$name(w).await;
                assert_eq!(cluster.refused(), Vec::<String>::new(), "requests deploy/rbac.yaml does not allow");
                // Everything the controllers read after their first lists comes from their cache.
                assert_eq!(usage.requests_of("list"), lists, "LISTs after the initial sync: {:?}", usage.requests());
            } )*
        }
        /// On a real kube-apiserver and etcd, the controllers with deploy/rbac.yaml's ServiceAccount.
        mod real_hub {
            $( #[tokio::test] async fn $name() {
                let w = super::on_real_hub(stringify!($name)).await;
                let usage = w.store.usage();
                let lists = usage.requests_of("list");
                super::$name(w).await;
                assert_eq!(usage.refused(), (Vec::<String>::new(), 0), "requests deploy/rbac.yaml does not allow");
                assert_eq!(usage.requests_of("list"), lists, "LISTs after the initial sync: {:?}", usage.requests());
            } )*
        }
    };
}
use on_both_stores;

impl<S: Store> World<S> {
    /// Applies a document the way the API does (validated and normalized first).
    async fn apply(&self, kind: Kind, doc: Value) -> Value {
        let (checked_kind, doc) = crate::resources::validate_document(&doc).expect("a valid document");
        assert_eq!(checked_kind, kind);
        let applied = self.api.apply_document(kind, doc).await;
        self.settle().await;
        applied
    }

    /// Waits until the controllers see every change made behind their back (through `api` or
    /// `admin`), as they would once their watches delivered it: a no-op on the embedded store.
    async fn settle(&self) {
        if let Some(settle) = &self.settle {
            settle().await;
        }
    }

    async fn infraenv(&self, name: &str, cluster_ref: Option<&str>) -> String {
        let mut spec = json!({"pullSecretRef": {"name": "ps"}});
        if let Some(cd) = cluster_ref {
            spec["clusterRef"] = json!({"name": cd, "namespace": ns()});
        }
        let doc = self
            .apply(
                Kind::InfraEnv,
                json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                       "metadata": {"name": name, "namespace": ns()}, "spec": spec}),
            )
            .await;
        doc["metadata"]["uid"].as_str().unwrap().to_string()
    }

    /// A ClusterDeployment with its AgentClusterInstall; with `reconciled`, also its backend cluster.
    async fn cluster_deployment(&self, name: &str, reconciled: bool) -> Option<String> {
        self.apply(
            Kind::ClusterDeployment,
            json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
                   "metadata": {"name": name, "namespace": ns()},
                   "spec": {"baseDomain": "example.com", "clusterName": name, "platform": {"agentBareMetal": {}},
                            "clusterInstallRef": {"group": "extensions.hive.openshift.io", "kind": "AgentClusterInstall",
                                                  "name": name, "version": "v1beta1"}}}),
        )
        .await;
        self.apply(
            Kind::AgentClusterInstall,
            json!({"apiVersion": "extensions.hive.openshift.io/v1beta1", "kind": "AgentClusterInstall",
                   "metadata": {"name": name, "namespace": ns()},
                   "spec": {"clusterDeploymentRef": {"name": name}, "networking": {},
                            "provisionRequirements": {"controlPlaneAgents": 3}}}),
        )
        .await;
        if reconciled { Some(self.reconcile_cluster(name).await) } else { None }
    }

    async fn reconcile_cluster(&self, name: &str) -> String {
        for _ in 0..5 {
            cluster::reconcile(&self.hub.clusters, ns(), name).await.unwrap();
        }
        self.backend.cluster_by_kube_key(ns(), name).await.map(|c| c.id).unwrap_or_default()
    }

    /// A host of InfraEnv `ie` that registered and sent its inventory, with its Agent reconciled.
    async fn pool_host(&self, ie: &str, index: usize) -> String {
        let ie_uid = self.ie_uid(ie).await;
        let id = uuid::Uuid::new_v4().to_string();
        self.backend.register_host(&ie_uid, ns(), &id, "v1", None).await.unwrap();
        self.backend
            .update_inventory(&self.key(&id).await, crate::hosts::simulated::inventory(index).to_string())
            .await
            .unwrap();
        self.apply(
            Kind::Agent,
            json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
                   "metadata": {"name": id, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: ie}},
                   "spec": {"approved": true}}),
        )
        .await;
        self.reconcile(&id).await;
        id
    }

    /// A host registered with InfraEnv `ie` made for ClusterDeployment `cd` (backend cluster `cid`), bound
    /// to it from the start, with its Agent reconciled.
    async fn host_of_cluster_infraenv(&self, ie: &str, cd: &str, cid: &str) -> String {
        let ie_uid = self.ie_uid(ie).await;
        let id = uuid::Uuid::new_v4().to_string();
        self.backend.register_host(&ie_uid, ns(), &id, "v1", Some(cid.to_string())).await.unwrap();
        self.apply(
            Kind::Agent,
            json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
                   "metadata": {"name": id, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: ie}},
                   "spec": {"approved": true, "clusterDeploymentName": {"name": cd, "namespace": ns()}}}),
        )
        .await;
        self.reconcile(&id).await;
        id
    }

    /// The key of the record of the Agent `id` of the test namespace.
    async fn key(&self, id: &str) -> crate::hosts::HostKey {
        self.backend.host_of_agent(ns(), id).await.expect("the host exists").key()
    }

    async fn ie_uid(&self, name: &str) -> String {
        self.store.get::<InfraEnv>(ns(), name).await.unwrap().expect("the InfraEnv exists").metadata.uid.unwrap()
    }

    /// The host's agent starts again (after an `exit` step or a reboot into discovery) and registers.
    async fn register_again(&self, id: &str) {
        self.backend.register_host(&self.ie_uid("pool").await, ns(), id, "v1", None).await.unwrap();
    }

    async fn reconcile(&self, name: &str) -> Action {
        loop {
            match agent::reconcile(&self.hub.agents, ns(), name).await.unwrap() {
                Action::RequeueAfter(d) if d.is_zero() => continue,
                other => return other,
            }
        }
    }

    async fn agent(&self, name: &str) -> Agent {
        self.store.get::<Agent>(ns(), name).await.unwrap().expect("the Agent exists")
    }

    async fn status(&self, id: &str) -> HostStatus {
        self.backend.host_of_agent(ns(), id).await.expect("the host exists").status
    }

    /// Points the Agent at `cd` (None: unbinds) and reconciles it.
    async fn set_cluster(&self, name: &str, cd: Option<&str>) -> Action {
        let mut a = self.agent(name).await;
        a.spec.cluster_deployment_name =
            cd.map(|cd| serde_json::from_value(json!({"name": cd, "namespace": ns()})).unwrap());
        self.store.update(&a).await.unwrap();
        self.reconcile(name).await
    }

    /// [`World::set_cluster`] written past admission, as on a hub without bootstream's webhook: into
    /// the store behind the API.
    async fn set_cluster_past_admission(&self, name: &str, cd: Option<&str>) -> Action {
        let mut a = self.agent(name).await;
        a.spec.cluster_deployment_name =
            cd.map(|cd| serde_json::from_value(json!({"name": cd, "namespace": ns()})).unwrap());
        self.api.update(&a).await;
        self.settle().await;
        self.reconcile(name).await
    }

    async fn set_host(&self, id: &str, status: HostStatus, stage: &str) {
        self.backend
            .update_host(&self.key(id).await, |h| {
                h.status = status;
                h.progress.current_stage = stage.to_string();
                Ok(())
            })
            .await
            .unwrap();
    }

    /// A host of the pool bound to `cd` and installed on it.
    async fn installed_host(&self, cd: &str, index: usize) -> String {
        let id = self.pool_host("pool", index).await;
        self.set_cluster(&id, Some(cd)).await;
        // Binding makes the agent restart: it registers again and sends its inventory.
        self.register_again(&id).await;
        self.backend
            .update_inventory(&self.key(&id).await, crate::hosts::simulated::inventory(index).to_string())
            .await
            .unwrap();
        self.set_host(&id, HostStatus::Installed, "Done").await;
        self.reconcile(&id).await;
        id
    }

    async fn hostname(&self, id: &str) -> String {
        self.backend.host_of_agent(ns(), id).await.unwrap().hostname()
    }

    /// A spoke cluster holding the host's node, reachable through the CD's admin kubeconfig secret.
    async fn spoke_for(&self, cd: &str, node: &str) -> SpokeCluster {
        self.spoke_with_nodes(cd, &[node.to_string()]).await
    }

    /// A spoke cluster holding `nodes`, reachable through the CD's admin kubeconfig secret.
    async fn spoke_with_nodes(&self, cd: &str, nodes: &[String]) -> SpokeCluster {
        let spoke = SpokeCluster::start().await;
        for node in nodes {
            spoke.put(
                &format!("/api/v1/nodes/{node}"),
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
            );
        }
        self.apply(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{cd}-admin-kubeconfig"), "namespace": ns()},
                   "stringData": {"kubeconfig": spoke.kubeconfig()}}),
        )
        .await;
        spoke
    }
}

/// A condition's status and reason.
fn cond(agent: &Agent, type_: &str) -> (&'static str, String) {
    let c = agent
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no {type_} condition"));
    let status = match c.status.as_str() {
        "True" => "True",
        "False" => "False",
        _ => "Unknown",
    };
    (status, c.reason.clone())
}

fn cond_message(agent: &Agent, type_: &str) -> String {
    agent.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == type_)).unwrap().message.clone()
}

fn deprovision(agent: &Agent) -> Option<DeprovisionInfo> {
    agent.status.as_ref().and_then(|s| s.deprovision_info.clone())
}

async fn scenario_25_agent_bind<S: Store>(w: World<S>) {
    let cid = w.cluster_deployment("c1", true).await.unwrap();
    let id = w.pool_host("pool", 0).await;
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
    w.set_cluster(&id, Some("c1")).await;
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    assert_eq!((host.status, host.cluster_id.as_deref()), (HostStatus::Binding, Some(cid.as_str())));
    assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

async fn scenario_26_agent_bind_waits_for_the_cluster_record_and_recovers<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", false).await;
    let id = w.pool_host("pool", 0).await;
    let action = w.set_cluster(&id, Some("c1")).await;
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(10)));
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, SPEC_SYNCED), ("False", REASON_BACKEND_ERROR.into()));
    assert!(
        cond_message(&agent, SPEC_SYNCED)
            .contains(&format!("failed to find cluster for clusterDeployment {}/c1", ns()))
    );
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
    let cid = w.reconcile_cluster("c1").await;
    w.reconcile(&id).await;
    assert_eq!(w.backend.host_of_agent(ns(), &id).await.unwrap().cluster_id, Some(cid));
    assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

/// A ClusterDeployment whose AgentClusterInstall the controller has not seen yet is no cluster being
/// deleted: on a hub each kind has a watch of its own, and an Agent's binding can arrive before its
/// cluster's install (the fleet benchmark on kube-apiserver met it). The bind is retried, and made
/// once the install is there.
async fn agent_bind_waits_for_an_install_not_seen_yet<S: Store>(w: World<S>) {
    let id = w.pool_host("pool", 0).await;
    let ns = w.agent(&id).await.metadata.namespace.clone().unwrap_or_default();
    w.apply(
        Kind::ClusterDeployment,
        json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
               "metadata": {"name": "c1", "namespace": ns},
               "spec": {"baseDomain": "example.com", "clusterName": "c1", "platform": {"agentBareMetal": {}},
                        "clusterInstallRef": {"group": "extensions.hive.openshift.io", "kind": "AgentClusterInstall",
                                              "name": "c1", "version": "v1beta1"}}}),
    )
    .await;
    let action = w.set_cluster(&id, Some("c1")).await;
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(10)));
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, SPEC_SYNCED), ("False", REASON_BACKEND_ERROR.into()));
    let message = cond_message(&agent, SPEC_SYNCED);
    assert!(message.contains(&format!("agentClusterInstall {ns}/c1")), "{message}");
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
    let cid = w.cluster_deployment("c1", true).await.unwrap();
    w.reconcile(&id).await;
    assert_eq!(w.backend.host_of_agent(&ns, &id).await.unwrap().cluster_id, Some(cid));
    assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

async fn scenario_27_moving_an_agent_unbinds_it_first<S: Store>(w: World<S>) {
    w.cluster_deployment("a", true).await;
    w.cluster_deployment("b", true).await;
    let id = w.pool_host("pool", 0).await;
    w.set_cluster(&id, Some("a")).await;
    w.set_host(&id, HostStatus::Known, "").await;
    w.set_cluster(&id, Some("b")).await;
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    assert_eq!((host.status, host.cluster_id), (HostStatus::Unbinding, None));
}

async fn scenario_28_unbinding_a_day1_host_mid_installation_is_refused_a_day2_host_is_not<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let day1 = w.pool_host("pool", 0).await;
    w.set_cluster(&day1, Some("c1")).await;
    w.set_host(&day1, HostStatus::Installing, "").await;
    w.set_cluster(&day1, None).await;
    let agent = w.agent(&day1).await;
    assert_eq!(cond(&agent, SPEC_SYNCED), ("False", REASON_INPUT_ERROR.into()));
    assert!(cond_message(&agent, SPEC_SYNCED).ends_with(IMMUTABLE), "{}", cond_message(&agent, SPEC_SYNCED));
    assert_eq!(w.status(&day1).await, HostStatus::Installing);

    let day2 = w.pool_host("pool", 1).await;
    w.set_cluster(&day2, Some("c1")).await;
    w.backend
        .update_host(&w.key(&day2).await, |h| {
            h.kind = HostKind::AddToExistingClusterHost;
            h.status = HostStatus::Installing;
            Ok(())
        })
        .await
        .unwrap();
    w.set_cluster(&day2, None).await;
    assert_eq!(w.status(&day2).await, HostStatus::UnbindingPendingUserAction);
    assert_eq!(cond(&w.agent(&day2).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

/// Scenario 29, then the reclaim flow of spec-controllers.md §7 to its end: the reclaim agent's steps, the reboot into
/// discovery, and the spoke clean-up of spec-controllers.md §2.8 once the host is back.
async fn scenario_29_unbinding_an_installed_host_reclaims_it_through_the_spoke<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;

    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::Reclaiming);
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
    let info = deprovision(&agent).expect("deprovision info");
    assert_eq!((info.cluster_name.as_str(), info.node_name.as_str()), ("c1", node.as_str()));
    assert_eq!(info.message, "Waiting for host to unbind to do spoke cleanup");
    let ds = format!("/apis/apps/v1/namespaces/assisted-installer/daemonsets/{}-reclaim", node.replace('.', "-"));
    assert!(spoke.get(&ds).is_some(), "no reclaim DaemonSet; spoke has {:?}", spoke.paths());

    // The reclaim agent downloads the boot artifacts, then reboots the node into discovery.
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    let urls = crate::hosts::instructions::BootArtifactUrls {
        kernel_url: "http://hub.example/kernel".into(),
        initrd_url: "http://hub.example/initrd".into(),
        rootfs_url: "http://hub.example/rootfs".into(),
    };
    let steps = crate::hosts::instructions::next_steps(&host, Some(&urls), None);
    assert_eq!(steps.instructions[0].step_type, "download-boot-artifacts");
    w.backend.reclaim_download_done(&w.key(&id).await, true).await.unwrap();
    assert_eq!(w.status(&id).await, HostStatus::ReclaimingRebooting);
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some(), "no clean-up before the host is back");
    w.register_again(&id).await;
    assert_eq!(w.status(&id).await, HostStatus::DiscoveringUnbound);

    // Back in the pool: the node leaves the spoke (and its reclaim DaemonSet with it).
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none());
    assert!(spoke.get(&ds).is_none());
    assert_eq!(deprovision(&w.agent(&id).await), None);
    w.backend.update_inventory(&w.key(&id).await, crate::hosts::simulated::inventory(0).to_string()).await.unwrap();
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
}

async fn scenario_30_reclaim_falls_back_to_a_plain_unbind<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    // No admin kubeconfig.
    let a = w.installed_host("c1", 0).await;
    w.set_cluster(&a, None).await;
    assert_eq!(w.status(&a).await, HostStatus::UnbindingPendingUserAction);
    assert_eq!(cond(&w.agent(&a).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
    assert_eq!(cond(&w.agent(&a).await, BOUND), ("False", "UnbindingPendingUserAction".into()));
    // The spoke refuses the DaemonSet.
    let b = w.installed_host("c1", 1).await;
    let spoke = w.spoke_for("c1", &w.hostname(&b).await).await;
    spoke.fail("PATCH", "/apis/apps/v1/", 500);
    w.set_cluster(&b, None).await;
    assert_eq!(w.status(&b).await, HostStatus::UnbindingPendingUserAction);
    // The node is not in the spoke.
    let c = w.installed_host("c1", 2).await;
    w.set_cluster(&c, None).await;
    assert_eq!(w.status(&c).await, HostStatus::UnbindingPendingUserAction);
    assert_eq!(cond(&w.agent(&c).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

/// Issue 43: the reclaim agent reaches a hub whose certificate a private CA signed (`serve --service-ca-cert`): it
/// gets that CA, as the discovery image's agent does, and keeps verifying.
async fn the_reclaim_agent_gets_the_service_ca<S: Store>(mut w: World<S>) {
    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBprivate\n-----END CERTIFICATE-----\n";
    w.hub.agents.service_ca_cert_pem = Some(CA.into());
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::Reclaiming);
    let cm = spoke.get("/api/v1/namespaces/assisted-installer/configmaps/reclaim-config").expect("the CA ConfigMap");
    assert_eq!(cm["data"]["service-ca-cert.crt"], CA);
    let ds = spoke
        .get(&format!("/apis/apps/v1/namespaces/assisted-installer/daemonsets/{}-reclaim", node.replace('.', "-")))
        .expect("the reclaim DaemonSet");
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"-cacert=/etc/assisted-service/service-ca-cert.crt"), "{args:?}");
    assert!(args.contains(&"-insecure=false"), "{args:?}");
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/etc/assisted-service"), "{mounts:?}");
}

/// The requests that changed something on a spoke (anything but reads).
fn spoke_writes(spoke: &SpokeCluster) -> Vec<String> {
    spoke.requests().into_iter().filter(|r| !r.starts_with("GET ")).collect()
}

/// Issue 43: reclaim reboots a node into its InfraEnv's image, where the ironic agent runs instead of the
/// discovery agent: the node would never register again. It waits for a reboot instead, and says why.
async fn an_installed_host_of_an_ironic_agent_infraenv_is_not_reclaimed_and_says_why<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.metadata
        .annotations
        .get_or_insert_default()
        .insert(crate::content::ironic::ENABLE_IRONIC_AGENT_ANNOTATION.into(), "true".into());
    w.api.update(&ie).await;
    w.settle().await;

    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    assert_eq!(spoke_writes(&spoke), Vec::<String>::new(), "nothing is started on the spoke");
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
    assert_eq!(cond(&agent, BOUND), ("False", "UnbindingPendingUserAction".into()));
    assert_eq!(
        cond_message(&agent, BOUND),
        format!(
            "The agent is currently unbinding; Pending host reboot from infraenv image; not reclaimed: InfraEnv pool \
             boots the ironic agent ({}), which does not start the discovery agent; return the host through its \
             BareMetalHost, or reboot it into another InfraEnv's image",
            crate::content::ironic::ENABLE_IRONIC_AGENT_ANNOTATION
        )
    );

    // Rebooted into discovery by a person: the note goes with the wait.
    w.register_again(&id).await;
    w.reconcile(&id).await;
    assert_eq!(cond(&w.agent(&id).await, BOUND), ("False", "Unbound".into()));
    assert!(w.backend.host_of_agent(ns(), &id).await.unwrap().not_reclaimed.is_empty());
}

/// Issue 43: an unbind the pool refuses (the host's InfraEnv names its cluster) is refused before the reclaim
/// agent is started: nothing is written to the spoke.
async fn a_refused_unbind_writes_nothing_to_the_spoke<S: Store>(w: World<S>) {
    let cid = w.cluster_deployment("c1", true).await.unwrap();
    w.infraenv("c1-hosts", Some("c1")).await;
    let ie_uid = w.ie_uid("c1-hosts").await;
    let id = w.host_of_cluster_infraenv("c1-hosts", "c1", &cid).await;
    w.backend.update_inventory(&w.key(&id).await, crate::hosts::simulated::inventory(0).to_string()).await.unwrap();
    w.set_host(&id, HostStatus::Installed, "Done").await;
    w.reconcile(&id).await;
    let spoke = w.spoke_for("c1", &w.hostname(&id).await).await;

    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::Installed);
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, SPEC_SYNCED).0, "False");
    let message = cond_message(&agent, SPEC_SYNCED);
    assert!(message.contains(&format!("Cannot unbind Host {id}. InfraEnv {ie_uid} is bound to Cluster")), "{message}");
    assert_eq!(spoke_writes(&spoke), Vec::<String>::new(), "nothing is written to the spoke");
}

/// A FIFO that tells whether anything opened it for reading: a thread opens it for writing (which
/// waits for a reader), notes that a reader came, writes a token and closes it, as often as readers
/// come. A reader of the path (code that should not read it) gets a token instead of waiting.
struct WatchedFifo {
    path: std::path::PathBuf,
    opened: Arc<std::sync::atomic::AtomicBool>,
    released: Arc<std::sync::atomic::AtomicBool>,
    writer: std::thread::JoinHandle<()>,
}

impl WatchedFifo {
    fn new(path: std::path::PathBuf) -> WatchedFifo {
        use std::os::unix::ffi::OsStrExt;
        use std::sync::atomic::Ordering;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
        let (opened, released) = (Arc::new(std::sync::atomic::AtomicBool::new(false)), Arc::new(Default::default()));
        let writer = std::thread::spawn({
            let (path, opened, released): (_, _, Arc<std::sync::atomic::AtomicBool>) =
                (path.clone(), opened.clone(), Arc::clone(&released));
            move || {
                // Every open for reading gets a token (kube-rs reads a token file more than once).
                loop {
                    let file = std::fs::OpenOptions::new().write(true).open(&path);
                    if released.load(Ordering::SeqCst) {
                        return;
                    }
                    opened.store(true, Ordering::SeqCst);
                    if let Ok(mut f) = file {
                        let _ = std::io::Write::write_all(&mut f, b"stolen-token\n");
                    }
                }
            }
        });
        WatchedFifo { path, opened, released, writer }
    }

    /// Whether anything opened the FIFO; stops its thread.
    fn was_opened(self) -> bool {
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::atomic::Ordering;
        let opened = self.opened.load(Ordering::SeqCst);
        self.released.store(true, Ordering::SeqCst);
        let _reader = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&self.path).unwrap();
        self.writer.join().unwrap();
        opened
    }
}

/// Issue 41: an admin kubeconfig written into the cluster's Secret past the upload check (by an
/// admin, or a tenant allowed to write Secrets) that names a program or files of the hub: unbinding
/// an installed host runs nothing and reads nothing, and falls back to a plain unbind as for any
/// kubeconfig no spoke client can be made from.
async fn a_spoke_kubeconfig_that_names_a_program_or_hub_files_runs_and_reads_nothing<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("MARKER");
    let spoke = SpokeCluster::start().await;
    let fifo = |name: &str| WatchedFifo::new(dir.path().join(name));
    let exec = format!(
        "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: /bin/sh\n  args: [-c, \"touch {}\"]\n",
        marker.display()
    );
    // Each case: the cluster entry's lines after its server, the user entry's lines, and the FIFOs
    // they name.
    let cases: Vec<(String, String, Vec<WatchedFifo>)> = vec![
        (String::new(), exec, vec![]),
        {
            let token = fifo("token");
            (String::new(), format!("tokenFile: {}\n", token.path.display()), vec![token])
        },
        {
            let (cert, key) = (fifo("client.crt"), fifo("client.key"));
            let user = format!("client-certificate: {}\nclient-key: {}\n", cert.path.display(), key.path.display());
            (String::new(), user, vec![cert, key])
        },
        {
            let ca = fifo("ca.crt");
            (format!("certificate-authority: {}\n", ca.path.display()), "token: t\n".to_string(), vec![ca])
        },
    ];
    for (index, (cluster, user, fifos)) in cases.into_iter().enumerate() {
        let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: spoke\n  cluster:\n    server: {}\n{}users:\n- name: admin\n  user:\n{}\
             contexts:\n- name: admin\n  context:\n    cluster: spoke\n    user: admin\ncurrent-context: admin\n",
            spoke.url,
            indent(&cluster),
            indent(&user)
        );
        let id = w.installed_host("c1", index).await;
        let node = w.hostname(&id).await;
        spoke.put(
            &format!("/api/v1/nodes/{node}"),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
        );
        w.apply(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c1-admin-kubeconfig", "namespace": ns()},
                   "stringData": {"kubeconfig": kubeconfig}}),
        )
        .await;
        w.set_cluster(&id, None).await;
        assert!(!marker.exists(), "{user}: the hub ran the kubeconfig's command");
        for fifo in fifos {
            let path = fifo.path.clone();
            assert!(!fifo.was_opened(), "the hub opened {}", path.display());
        }
        assert!(spoke.requests().is_empty(), "{cluster}{user}: the spoke was reached: {:?}", spoke.requests());
        // No spoke client, no reclaim: a plain unbind, as for any kubeconfig no client is made from.
        assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction, "{cluster}{user}");
        assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
    }
}

/// A host unbound without reclaim, its spoke holding its node: the setting of scenarios 32–35.
async fn unbound_waiting_for_reboot<S: Store>(w: &World<S>) -> (String, String, SpokeCluster) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    spoke.fail("PATCH", "/apis/apps/v1/", 500);
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    assert!(deprovision(&w.agent(&id).await).is_some());
    (id, node, spoke)
}

async fn reboot_into_discovery<S: Store>(w: &World<S>, id: &str) {
    w.register_again(id).await;
    assert_eq!(w.status(id).await, HostStatus::DiscoveringUnbound);
}

async fn scenario_32_no_spoke_cleanup_while_the_host_is_unbinding<S: Store>(w: World<S>) {
    let (id, node, spoke) = unbound_waiting_for_reboot(&w).await;
    let before = spoke.requests().len();
    w.reconcile(&id).await;
    assert_eq!(spoke.requests().len(), before, "the spoke was contacted: {:?}", spoke.requests());
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some());
    assert!(deprovision(&w.agent(&id).await).is_some());
}

async fn scenario_33_skip_spoke_cleanup_clears_deprovision_info_without_the_spoke<S: Store>(w: World<S>) {
    let (id, node, spoke) = unbound_waiting_for_reboot(&w).await;
    let mut a = w.agent(&id).await;
    a.metadata.annotations.get_or_insert_default().insert(SKIP_SPOKE_CLEANUP_ANNOTATION.into(), "true".into());
    w.store.update(&a).await.unwrap();
    reboot_into_discovery(&w, &id).await;
    let before = spoke.requests().len();
    w.reconcile(&id).await;
    assert_eq!(deprovision(&w.agent(&id).await), None);
    assert_eq!(spoke.requests().len(), before);
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some());
}

async fn scenario_34_a_failed_spoke_cleanup_is_reported_and_retried<S: Store>(w: World<S>) {
    let (id, _node, spoke) = unbound_waiting_for_reboot(&w).await;
    spoke.fail("DELETE", "/api/v1/nodes/", 500);
    reboot_into_discovery(&w, &id).await;
    assert_eq!(w.reconcile(&id).await, Action::RequeueAfter(Duration::from_secs(10)));
    let info = deprovision(&w.agent(&id).await).expect("kept for the retry");
    assert!(info.message.contains("failed to delete node"), "{}", info.message);
}

async fn scenario_35_the_node_leaves_the_spoke_once_the_host_is_back<S: Store>(w: World<S>) {
    let (id, node, spoke) = unbound_waiting_for_reboot(&w).await;
    reboot_into_discovery(&w, &id).await;
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none());
    assert_eq!(deprovision(&w.agent(&id).await), None);
}

async fn scenario_36_deleting_an_agent_of_a_deleted_cluster_skips_the_spoke<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let spoke = w.spoke_for("c1", &w.hostname(&id).await).await;
    // The ClusterDeployment is being deleted (the finalizer holds it).
    w.admin.delete::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap();
    w.settle().await;
    w.store.delete::<Agent>(ns(), &id).await.unwrap();
    w.reconcile(&id).await;
    assert!(spoke.requests().is_empty(), "{:?}", spoke.requests());
    assert!(w.backend.host_of_agent(ns(), &id).await.is_none(), "the host is deregistered");
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none(), "the finalizer is removed");
}

async fn scenario_37_deleting_an_installed_agent_removes_its_node<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    w.store.delete::<Agent>(ns(), &id).await.unwrap();
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none());
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none());
}

async fn scenario_40_an_agent_without_its_host_gets_it_back<S: Store>(w: World<S>) {
    let id = w.pool_host("pool", 0).await;
    // A restored backup: the Agent without the state annotation, and no host record.
    let mut a = w.agent(&id).await;
    a.metadata.annotations = None;
    w.store.update(&a).await.unwrap();
    w.backend.deregister_host(&w.key(&id).await).await.unwrap();
    assert_eq!(w.reconcile(&id).await, Action::RequeueAfter(Duration::from_secs(60)));
    let host = w.backend.host_of_agent(ns(), &id).await.expect("recreated");
    assert_eq!((host.status, host.cluster_id), (HostStatus::KnownUnbound, None));
}

async fn scenario_55_deleting_the_install_unbinds_late_bound_agents<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    w.store.delete::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap();
    w.reconcile_cluster("c1").await;
    let agent = w.agent(&id).await;
    assert_eq!(agent.spec.cluster_deployment_name, None);
    w.reconcile(&id).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    assert!(w.store.get::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap().is_none());
}

async fn scenario_56_agents_of_an_infraenv_of_the_cluster_are_deleted<S: Store>(w: World<S>) {
    let cid = w.cluster_deployment("c1", true).await.unwrap();
    w.infraenv("c1-hosts", Some("c1")).await;
    let id = w.host_of_cluster_infraenv("c1-hosts", "c1", &cid).await;
    w.admin.delete::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap();
    w.settle().await;
    w.reconcile_cluster("c1").await;
    w.reconcile(&id).await;
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none());
    assert!(w.backend.host_of_agent(ns(), &id).await.is_none());
}

async fn scenario_57_preserve_on_delete_deletes_late_bound_agents<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let mut cd = w.store.get::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap().unwrap();
    cd.spec.preserve_on_delete = true;
    w.store.update(&cd).await.unwrap();
    let id = w.installed_host("c1", 0).await;
    w.store.delete::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap();
    w.reconcile_cluster("c1").await;
    w.reconcile(&id).await;
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none());
}

async fn pool_hosts_disconnect_after_three_minutes_through_the_backend_monitor<S: Store>(w: World<S>) {
    let id = w.pool_host("pool", 0).await;
    w.clock.advance(SignedDuration::from_secs(179));
    w.backend.refresh_all().await;
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
    w.clock.advance(SignedDuration::from_secs(2));
    w.backend.refresh_all().await;
    assert_eq!(w.status(&id).await, HostStatus::DisconnectedUnbound);
    w.reconcile(&id).await;
    assert_eq!(cond(&w.agent(&id).await, CONNECTED), ("False", "AgentIsDisconnected".into()));
    w.backend.check_in(&w.key(&id).await).await.unwrap();
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
}

async fn infraenv_labels_named_for_propagation_become_node_labels<S: Store>(w: World<S>) {
    let propagate = |keys: &str| {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
               "metadata": {"name": "pool", "namespace": ns(), "labels": {"zone": "a", "rack": "r1", "other": "x"},
                            "annotations": {"infraenv.agent-install.openshift.io/propagate-node-labels": keys}},
               "spec": {"pullSecretRef": {"name": "ps"}}})
    };
    w.apply(Kind::InfraEnv, propagate("zone, rack")).await;
    let id = w.pool_host("pool", 0).await;
    let labels = |a: &Agent| a.spec.node_labels.clone().unwrap_or_default();
    let a = w.agent(&id).await;
    assert_eq!(labels(&a), [("rack".to_string(), "r1".to_string()), ("zone".into(), "a".into())].into());
    assert_eq!(
        a.metadata.annotations.as_ref().unwrap()["agent.agent-install.openshift.io/inherited-node-labels"],
        "rack,zone"
    );
    assert_eq!(w.backend.host_of_agent(ns(), &id).await.unwrap().node_labels, r#"{"rack":"r1","zone":"a"}"#);
    // A label set by hand stays; one the InfraEnv stops propagating goes.
    let mut a = w.agent(&id).await;
    a.spec.node_labels.as_mut().unwrap().insert("mine".into(), "yes".into());
    w.store.update(&a).await.unwrap();
    w.apply(Kind::InfraEnv, propagate("zone")).await;
    w.reconcile(&id).await;
    let a = w.agent(&id).await;
    assert_eq!(labels(&a), [("mine".to_string(), "yes".to_string()), ("zone".into(), "a".into())].into());
    assert_eq!(w.backend.host_of_agent(ns(), &id).await.unwrap().node_labels, r#"{"mine":"yes","zone":"a"}"#);
}

async fn the_ignition_endpoint_token_comes_from_the_referenced_secret<S: Store>(w: World<S>) {
    let id = w.pool_host("pool", 0).await;
    let set_ref = |name: Option<&str>| {
        let w = &w;
        let id = id.clone();
        let name = name.map(str::to_string);
        async move {
            let mut a = w.agent(&id).await;
            a.spec.ignition_endpoint_token_reference =
                name.map(|n| serde_json::from_value(json!({"namespace": ns(), "name": n})).unwrap());
            a.spec.ignition_endpoint_http_headers = Some([("X-Origin".to_string(), "hub".to_string())].into());
            w.store.update(&a).await.unwrap();
            w.reconcile(&id).await;
        }
    };
    w.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": ns()},
                                  "stringData": {"ignition-token": "s3cret"}}),
    )
    .await;
    w.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "empty", "namespace": ns()},
                                  "stringData": {"other": "x"}}),
    )
    .await;
    set_ref(Some("tok")).await;
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    assert_eq!(host.ignition_endpoint_token, "s3cret");
    assert_eq!(host.ignition_endpoint_http_headers, r#"[{"key":"X-Origin","value":"hub"}]"#);
    set_ref(Some("empty")).await;
    let a = w.agent(&id).await;
    assert_eq!(cond(&a, SPEC_SYNCED), ("False", REASON_INPUT_ERROR.into()));
    assert!(cond_message(&a, SPEC_SYNCED).ends_with("secret empty did not contain key value"));
    set_ref(None).await;
    assert_eq!(w.backend.host_of_agent(ns(), &id).await.unwrap().ignition_endpoint_token, "");
}

/// A host of cluster c1 mid-installation (Configuring), its node in a reachable spoke: the setting of
/// scenario 38.
async fn mid_installation_with_spoke<S: Store>(w: &World<S>) -> (String, String, SpokeCluster) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    w.set_host(&id, HostStatus::InstallingInProgress, "Configuring").await;
    w.reconcile(&id).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    (id, node, spoke)
}

async fn scenario_38_deleting_an_agent_mid_installation_with_approved_csrs_cleans_the_spoke<S: Store>(w: World<S>) {
    let (id, node, spoke) = mid_installation_with_spoke(&w).await;
    let mut a = w.agent(&id).await;
    a.status.get_or_insert_default().csr_status.approved_csrs = Some(vec![
        serde_json::from_value(json!({"name": "csr-1", "type": "client", "approvedAt": "2026-11-22T00:00:00Z"}))
            .unwrap(),
    ]);
    w.store.update_status(&a).await.unwrap();
    w.store.delete::<Agent>(ns(), &id).await.unwrap();
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none(), "{:?}", spoke.requests());
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none());
}

async fn scenario_54_deleting_the_install_cancels_a_running_installation_before_deregistering<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    w.set_host(&id, HostStatus::InstallingInProgress, "Writing image to disk").await;
    let mut cluster = w.backend.cluster_by_kube_key(ns(), "c1").await.unwrap();
    cluster.status = "installing".into();
    w.backend.put_cluster(cluster).await.unwrap();
    w.store.delete::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap();
    w.reconcile_cluster("c1").await;
    assert_eq!(w.status(&id).await, HostStatus::Cancelled, "cancelled before the cluster went");
    assert!(w.backend.cluster_by_kube_key(ns(), "c1").await.is_none(), "deregistered");
    // The agent is returned to the pool, and waits for a reboot.
    assert_eq!(w.agent(&id).await.spec.cluster_deployment_name, None);
    w.reconcile(&id).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
}

/// One reconcile of the ClusterDeployment `name` (the cluster's state moves at most one step).
async fn reconcile_cluster_once<S: Store>(w: &World<S>, name: &str) -> Action {
    // Boxed: on Kubernetes this future is too large for a test thread's stack inside a long scenario.
    Box::pin(cluster::reconcile(&w.hub.clusters, ns(), name)).await.unwrap()
}

fn aci_of<S: Store>(w: &World<S>, name: &str) -> impl Future<Output = crate::resources::AgentClusterInstall> {
    let (store, name) = (w.store.clone(), name.to_string());
    async move { store.get::<crate::resources::AgentClusterInstall>(ns(), &name).await.unwrap().expect("the ACI") }
}

/// The AgentClusterInstall's conditions as (type, status, reason, message), in their order.
async fn aci_conditions<S: Store>(w: &World<S>, name: &str) -> Vec<(String, String, String, String)> {
    let aci = aci_of(w, name).await;
    aci.status
        .map(|s| s.conditions.into_iter().map(|c| (c.type_, c.status, c.reason, c.message)).collect())
        .unwrap_or_default()
}

/// (status, reason, message) of one condition of the AgentClusterInstall.
async fn aci_cond<S: Store>(w: &World<S>, name: &str, type_: &str) -> (String, String, String) {
    aci_conditions(w, name)
        .await
        .into_iter()
        .find(|c| c.0 == type_)
        .map(|c| (c.1, c.2, c.3))
        .unwrap_or_else(|| panic!("no {type_} condition on ACI {name}"))
}

fn c3(status: &str, reason: &str, message: &str) -> (String, String, String) {
    (status.into(), reason.into(), message.into())
}

/// A pool host bound to `cd`, back from its restart with its inventory: known and approved.
async fn bound_known_host<S: Store>(w: &World<S>, cd: &str, index: usize) -> String {
    let id = w.pool_host("pool", index).await;
    w.set_cluster(&id, Some(cd)).await;
    w.register_again(&id).await;
    w.backend.update_inventory(&w.key(&id).await, crate::hosts::simulated::inventory(index).to_string()).await.unwrap();
    w.reconcile(&id).await;
    assert_eq!(w.status(&id).await, HostStatus::Known);
    id
}

async fn set_hold<S: Store>(w: &World<S>, name: &str, hold: bool) {
    let mut aci = aci_of(w, name).await;
    aci.spec.hold_installation = Some(hold);
    w.admin.update(&aci).await.unwrap();
    w.settle().await;
}

/// Item 5 of issue 32: the AgentClusterInstall carries assisted-service's six conditions through the
/// whole installation, and once it is done, the admin kubeconfig and password Secrets the installer
/// reported, referenced from the ClusterDeployment's and the AgentClusterInstall's clusterMetadata.
async fn an_installation_reports_six_conditions_and_ends_with_the_admin_secrets<S: Store>(w: World<S>) {
    use crate::controllers::cluster_conditions::*;
    w.cluster_deployment("c1", false).await;
    set_hold(&w, "c1", true).await;
    w.reconcile_cluster("c1").await;
    let types: Vec<String> = aci_conditions(&w, "c1").await.into_iter().map(|c| c.0).collect();
    assert_eq!(types, [SPEC_SYNCED, REQUIREMENTS_MET, VALIDATED, COMPLETED, FAILED, STOPPED]);
    assert_eq!(aci_cond(&w, "c1", SPEC_SYNCED).await, c3("True", "SyncOK", "SyncOK"));
    assert_eq!(
        aci_cond(&w, "c1", REQUIREMENTS_MET).await,
        c3("False", "ClusterNotReady", "The cluster is not ready to begin the installation")
    );
    assert_eq!(
        aci_cond(&w, "c1", VALIDATED).await,
        c3(
            "False",
            "ValidationsFailing",
            "The cluster's validations are failing: The cluster must have exactly 3 dedicated control plane nodes. Add or remove hosts, or change their roles configurations to meet the requirement."
        )
    );
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("False", "InstallationNotStarted", "The installation has not yet started")
    );
    assert_eq!(
        aci_cond(&w, "c1", FAILED).await,
        c3("False", "InstallationNotFailed", "The installation has not failed")
    );
    let not_stopped = c3("False", "InstallationNotStopped", "The installation is waiting to start or in progress");
    assert_eq!(aci_cond(&w, "c1", STOPPED).await, not_stopped);

    // Three hosts, known and approved: ready, and held.
    let hosts =
        [bound_known_host(&w, "c1", 0).await, bound_known_host(&w, "c1", 1).await, bound_known_host(&w, "c1", 2).await];
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(aci_of(&w, "c1").await.status.unwrap().debug_info.state, "ready");
    assert_eq!(
        aci_cond(&w, "c1", REQUIREMENTS_MET).await,
        c3("True", "ClusterIsReady", "The cluster is ready to begin the installation")
    );
    assert_eq!(
        aci_cond(&w, "c1", VALIDATED).await,
        c3("True", "ValidationsPassing", "The cluster's validations are passing")
    );
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("False", "InstallationOnHold", "The installation is on hold. To unhold set holdInstallation to false")
    );

    // Released: the installation starts.
    set_hold(&w, "c1", false).await;
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(aci_of(&w, "c1").await.status.unwrap().debug_info.state, "installing");
    let installing = c3("True", "ClusterAlreadyInstalling", "The cluster requirements are met");
    assert_eq!(aci_cond(&w, "c1", REQUIREMENTS_MET).await, installing);
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("False", "InstallationInProgress", "The installation is in progress: Installation in progress")
    );
    assert_eq!(aci_cond(&w, "c1", STOPPED).await, not_stopped);

    // Every host is up, but the installer has not reported the credentials yet: finalizing.
    for id in &hosts {
        w.set_host(id, HostStatus::Installed, "Done").await;
    }
    assert_eq!(reconcile_cluster_once(&w, "c1").await, Action::RequeueAfter(Duration::from_secs(10)));
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("False", "InstallationInProgress", "The installation is in progress: Finalizing cluster installation")
    );
    assert!(w.store.get::<k8s_openapi::api::core::v1::Secret>(ns(), "c1-admin-kubeconfig").await.unwrap().is_none());
    let cd = w.store.get::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap().unwrap();
    assert!(!cd.spec.installed);

    // The installer reports them: the cluster is installed, its Secrets made and referenced.
    let cluster = w.backend.cluster_by_kube_key(ns(), "c1").await.unwrap();
    let kubeconfig = crate::cli::simulate::simulated_kubeconfig(&cluster.id);
    let password = crate::cli::simulate::simulated_password(&cluster.id);
    w.backend.put_credential(&cluster.id, crate::pool::CredentialFile::Kubeconfig, kubeconfig.clone()).await.unwrap();
    w.backend
        .put_credential(&cluster.id, crate::pool::CredentialFile::KubeadminPassword, password.clone())
        .await
        .unwrap();
    assert_eq!(reconcile_cluster_once(&w, "c1").await, Action::Done);
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("True", "InstallationCompleted", "The installation has completed: Cluster is installed")
    );
    assert_eq!(
        aci_cond(&w, "c1", STOPPED).await,
        c3("True", "InstallationCompleted", "The installation has stopped because it completed successfully")
    );
    assert_eq!(
        aci_cond(&w, "c1", REQUIREMENTS_MET).await,
        c3("True", "ClusterInstallationStopped", "The cluster installation stopped")
    );
    assert_eq!(
        aci_cond(&w, "c1", FAILED).await,
        c3("False", "InstallationNotFailed", "The installation has not failed")
    );

    let cd = w.store.get::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap().unwrap();
    assert!(cd.spec.installed);
    let meta = cd.spec.cluster_metadata.clone().expect("clusterMetadata on the ClusterDeployment");
    assert_eq!((meta.cluster_id.as_str(), meta.infra_id.as_str()), (cluster.id.as_str(), cluster.id.as_str()));
    assert_eq!(meta.admin_kubeconfig_secret_ref.name, "c1-admin-kubeconfig");
    assert_eq!(meta.admin_password_secret_ref.as_ref().map(|r| r.name.as_str()), Some("c1-admin-password"));
    assert_eq!(aci_of(&w, "c1").await.spec.cluster_metadata, Some(meta), "the ACI names the same");

    let secret = |name: &'static str| {
        let store = w.store.clone();
        async move { store.get::<k8s_openapi::api::core::v1::Secret>(ns(), name).await.unwrap().expect(name) }
    };
    let data = |s: &k8s_openapi::api::core::v1::Secret, key: &str| {
        String::from_utf8(s.data.as_ref().unwrap()[key].0.clone()).unwrap()
    };
    let k = secret("c1-admin-kubeconfig").await;
    assert_eq!(data(&k, "kubeconfig"), kubeconfig);
    let p = secret("c1-admin-password").await;
    assert_eq!((data(&p, "username"), data(&p, "password")), ("kubeadmin".to_string(), password));
    for (s, kind) in [(&k, "kubeconfig"), (&p, "kubeadmincreds")] {
        let labels = s.metadata.labels.clone().unwrap();
        assert_eq!(labels["cluster.open-cluster-management.io/backup"], "true");
        assert_eq!(labels["hive.openshift.io/cluster-deployment-name"], "c1");
        assert_eq!(labels["hive.openshift.io/secret-type"], kind);
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("ClusterDeployment", "c1"));
        assert_eq!(Some(&owner.uid), cd.metadata.uid.as_ref());
    }

    // Installed, the cluster takes more hosts (day 2).
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(aci_cond(&w, "c1", REQUIREMENTS_MET).await, installing);
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3(
            "True",
            "InstallationCompleted",
            "The installation has completed: cluster is adding hosts to existing OCP cluster"
        )
    );
    assert_eq!(
        aci_cond(&w, "c1", VALIDATED).await,
        c3("True", "ValidationsPassing", "The cluster's validations are passing")
    );
}

/// A failed and a cancelled installation stop with assisted-service's reasons.
async fn a_failed_or_cancelled_installation_says_it_stopped_and_why<S: Store>(w: World<S>) {
    use crate::controllers::cluster_conditions::*;
    w.cluster_deployment("c1", true).await;
    let hosts =
        [bound_known_host(&w, "c1", 0).await, bound_known_host(&w, "c1", 1).await, bound_known_host(&w, "c1", 2).await];
    reconcile_cluster_once(&w, "c1").await;
    w.set_host(&hosts[1], HostStatus::Error, "Writing image to disk").await;
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(
        aci_cond(&w, "c1", FAILED).await,
        c3("True", "InstallationFailed", "The installation failed: cluster has hosts in error")
    );
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("False", "InstallationFailed", "The installation has failed: cluster has hosts in error")
    );
    assert_eq!(
        aci_cond(&w, "c1", STOPPED).await,
        c3("True", "InstallationFailed", "The installation has stopped due to error")
    );
    assert_eq!(
        aci_cond(&w, "c1", REQUIREMENTS_MET).await,
        c3("True", "ClusterInstallationStopped", "The cluster installation stopped")
    );
    let mut cluster = w.backend.cluster_by_kube_key(ns(), "c1").await.unwrap();
    cluster.status = "cancelled".into();
    cluster.status_info = "Canceled cluster installation".into();
    w.backend.put_cluster(cluster).await.unwrap();
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(
        aci_cond(&w, "c1", STOPPED).await,
        c3("True", "InstallationCancelled", "The installation has stopped because it was cancelled")
    );
    assert_eq!(
        aci_cond(&w, "c1", FAILED).await,
        c3("False", "InstallationNotFailed", "The installation has not failed")
    );
    assert_eq!(
        aci_cond(&w, "c1", COMPLETED).await,
        c3("Unknown", "UnknownStatus", "The installation status is currently not recognized: cancelled")
    );
}

/// An AgentClusterInstall whose ClusterImageSet does not exist cannot be synced: SpecSynced says so,
/// the other five are not available, and it is synced once the ClusterImageSet is there.
async fn an_install_without_its_cluster_image_set_is_not_synced_until_it_exists<S: Store>(w: World<S>) {
    use crate::controllers::cluster_conditions::*;
    w.cluster_deployment("c1", false).await;
    let mut aci = aci_of(&w, "c1").await;
    aci.spec.image_set_ref = Some(crate::resources::LocalObjectReference { name: "openshift-v4.20.0".into() });
    // The reference is immutable once set (admission refuses the change): written into the store.
    w.api.update(&aci).await;
    w.settle().await;
    // The finalizers first, then the sync.
    let mut action = Action::Done;
    for _ in 0..3 {
        action = reconcile_cluster_once(&w, "c1").await;
    }
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(10)));
    assert_eq!(
        aci_cond(&w, "c1", SPEC_SYNCED).await,
        c3(
            "False",
            "BackendError",
            "The Spec could not be synced due to backend error: ClusterImageSet openshift-v4.20.0 not found. Please ensure the ClusterImageSet exists"
        )
    );
    for type_ in [VALIDATED, REQUIREMENTS_MET, COMPLETED, FAILED, STOPPED] {
        assert_eq!(
            aci_cond(&w, "c1", type_).await,
            c3("Unknown", "NotAvailable", "Information not available"),
            "{type_}"
        );
    }
    assert!(w.backend.cluster_by_kube_key(ns(), "c1").await.is_none(), "no cluster record without its release");
    w.apply(
        Kind::ClusterImageSet,
        json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterImageSet", "metadata": {"name": "openshift-v4.20.0"},
               "spec": {"releaseImage": "quay.io/openshift-release-dev/ocp-release:4.20.0-x86_64"}}),
    )
    .await;
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(aci_cond(&w, "c1", SPEC_SYNCED).await, c3("True", "SyncOK", "SyncOK"));
    assert_eq!(w.backend.cluster_by_kube_key(ns(), "c1").await.unwrap().openshift_version, "4.20.0");
}

/// Item 5 of issue 32: the Agent's ignition token (from its secret), Ignition overrides and
/// installer arguments reach the host's install step; invalid overrides or arguments are refused
/// with SpecSynced saying which, and the host keeps what it had.
async fn ignition_token_overrides_and_installer_args_reach_the_install_step<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = bound_known_host(&w, "c1", 0).await;
    w.apply(
        Kind::Secret,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": ns()},
               "stringData": {"ignition-token": "s3cret"}}),
    )
    .await;
    let overrides = r#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/motd","contents":{"source":"data:,hi"}}]}}"#;
    let edit = |args: Option<&'static str>, ign: Option<&'static str>| {
        let (w, id) = (&w, id.clone());
        async move {
            let mut a = w.agent(&id).await;
            a.spec.installer_args = args.map(str::to_string);
            a.spec.ignition_config_overrides = ign.map(str::to_string);
            a.spec.ignition_endpoint_token_reference =
                Some(serde_json::from_value(json!({"namespace": ns(), "name": "tok"})).unwrap());
            a.spec.ignition_endpoint_http_headers = Some([("X-Origin".to_string(), "hub".to_string())].into());
            w.store.update(&a).await.unwrap();
            w.reconcile(&id).await;
            w.agent(&id).await
        }
    };
    let a = edit(Some(r#"["--append-karg", "ip=eth0:dhcp", "--save-partlabel", "data*"]"#), Some(overrides)).await;
    assert_eq!(cond(&a, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));

    // Refused: a flag coreos-installer's allowed list lacks, a value with a space, an Ignition
    // version bootstream cannot apply, JSON that is no Ignition config.
    for (args, ign, message) in [
        (
            Some(r#"["--console", "ttyS0"]"#),
            None,
            "found unexpected flag --console for installer - allowed flags are [--append-karg --delete-karg -n --copy-network --network-dir --save-partlabel --save-partindex --image-url --image-file]",
        ),
        (Some(r#"["--append-karg", "a b"]"#), None, "found unexpected chars in value a b for installer"),
        (None, Some(r#"{"ignition":{"version":"2.2.0"}}"#), "supported versions are 3.1.0 and 3.2.0"),
        (None, Some("{not json"), "is not valid JSON"),
    ] {
        let a = edit(args, ign).await;
        assert_eq!(cond(&a, SPEC_SYNCED), ("False", REASON_INPUT_ERROR.into()), "{args:?} {ign:?}");
        let m = cond_message(&a, SPEC_SYNCED);
        assert!(m.starts_with("The Spec could not be synced due to an input error: "), "{m}");
        assert!(m.contains(message), "{m} lacks {message}");
        let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
        assert_eq!(host.installer_args, r#"["--append-karg","ip=eth0:dhcp","--save-partlabel","data*"]"#);
        assert_eq!(host.ignition_config_overrides, overrides, "the host keeps what it had");
    }
    let a = edit(Some(r#"["--append-karg", "ip=eth0:dhcp", "--save-partlabel", "data*"]"#), Some(overrides)).await;
    assert_eq!(cond(&a, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));

    // The installation starts (a single-host cluster): the install step carries all three.
    let mut aci = aci_of(&w, "c1").await;
    aci.spec.provision_requirements.control_plane_agents = 1;
    w.admin.update(&aci).await.unwrap();
    w.settle().await;
    reconcile_cluster_once(&w, "c1").await;
    assert_eq!(w.status(&id).await, HostStatus::Installing);
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    let steps = crate::hosts::instructions::next_steps(&host, None, Some("4.20.0"));
    let install = steps.instructions.iter().find(|s| s.step_type == "install").expect("an install step");
    let args: Value = serde_json::from_str(&install.args[0]).unwrap();
    assert_eq!(args["installer_args"], r#"["--append-karg","ip=eth0:dhcp","--save-partlabel","data*"]"#);
    assert_eq!(args["ignition_config_overrides"], overrides);
    assert_eq!(args["ignition_endpoint_token"], "s3cret");
    assert_eq!(
        args["ignition_endpoint_http_headers"],
        json!([{"key": "X-Origin", "value": "hub"}, {"key": "Authorization", "value": "Bearer s3cret"}])
    );
    assert_eq!(args["role"], "bootstrap");
}

/// The message an installing host is held with (the admission webhook's wording).
const IMMUTABLE: &str = "Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation.";

/// A write that bypasses admission (a hub without the webhook, another controller) neither moves nor
/// unbinds an installing host: the agent controller holds it and says why.
async fn an_installing_host_is_held_whoever_writes_its_agent<S: Store>(w: World<S>) {
    let a = w.cluster_deployment("a", true).await.unwrap();
    w.cluster_deployment("b", true).await;
    let id = w.pool_host("pool", 0).await;
    w.set_cluster(&id, Some("a")).await;
    w.set_host(&id, HostStatus::InstallingInProgress, "Writing image to disk").await;
    for target in [Some("b"), None] {
        w.set_cluster_past_admission(&id, target).await;
        let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
        assert_eq!((host.status, host.cluster_id.as_deref()), (HostStatus::InstallingInProgress, Some(a.as_str())));
        let agent = w.agent(&id).await;
        assert_eq!(cond(&agent, SPEC_SYNCED), ("False", REASON_INPUT_ERROR.into()), "{target:?}");
        assert!(cond_message(&agent, SPEC_SYNCED).ends_with(IMMUTABLE), "{}", cond_message(&agent, SPEC_SYNCED));
        assert_eq!(cond(&agent, BOUND), ("True", "Bound".into()));
    }
    // Pointed back at its cluster, the Agent is in sync again.
    w.set_cluster_past_admission(&id, Some("a")).await;
    assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

/// The InfraEnv's clusterRef and cpuArchitecture changed past admission (a hub without the webhook):
/// an installing host of it is neither unbound nor moved, and its agent registering again (a wrong
/// boot order sends it back to discovery) is not bound to the cluster the InfraEnv now names.
async fn an_infraenv_edited_past_admission_moves_no_installing_host<S: Store>(w: World<S>) {
    let a = w.cluster_deployment("a", true).await.unwrap();
    w.cluster_deployment("b", true).await;
    let id = w.pool_host("pool", 0).await;
    w.set_cluster(&id, Some("a")).await;
    w.set_host(&id, HostStatus::InstallingInProgress, "Rebooting").await;
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.spec.cluster_ref = Some(serde_json::from_value(json!({"name": "b", "namespace": ns()})).unwrap());
    ie.spec.cpu_architecture = Some("arm64".into());
    if w._cluster.is_some() {
        let refused = w.admin.update(&ie).await.unwrap_err();
        w.settle().await;
        assert!(refused.to_string().contains("immutable after InfraEnv creation"), "{refused}");
    }
    w.api.update(&ie).await;
    w.settle().await;
    w.reconcile(&id).await;
    w.register_again(&id).await;
    w.reconcile(&id).await;
    let host = w.backend.host_of_agent(ns(), &id).await.unwrap();
    assert_eq!((host.status, host.cluster_id.as_deref()), (HostStatus::InstallingPendingUserAction, Some(a.as_str())));
    let agent = w.agent(&id).await;
    assert_eq!(agent.spec.cluster_deployment_name.as_ref().map(|r| r.name.as_str()), Some("a"));
    assert_eq!(cond(&agent, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

/// Three installed hosts of c1 whose nodes are in a spoke reachable through c1's admin kubeconfig.
async fn installed_cluster_with_spoke<S: Store>(w: &World<S>) -> (Vec<String>, Vec<String>, SpokeCluster) {
    w.cluster_deployment("c1", true).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(w.installed_host("c1", i).await);
    }
    let mut nodes = Vec::new();
    for id in &ids {
        nodes.push(w.hostname(id).await);
    }
    let spoke = w.spoke_with_nodes("c1", &nodes).await;
    (ids, nodes, spoke)
}

/// Deleting a cluster (its ClusterDeployment, or only its AgentClusterInstall) leaves the installed
/// cluster as it is, whichever controller gets to an Agent first: the first Agent is reconciled by the
/// agent controller between the cluster controller's clearing of its reference and the deregistration
/// of the cluster record (the order that used to start a reclaim on the running cluster), the others
/// after it.
async fn deleting_a_cluster_never_reclaims_in_any_order<S: Store>(w: &World<S>, only_the_install: bool) {
    let (ids, nodes, spoke) = installed_cluster_with_spoke(w).await;
    if only_the_install {
        w.admin.delete::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap();
        w.settle().await;
    } else {
        w.admin.delete::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap();
        w.settle().await;
    }
    // What the cluster controller's unbindAgents does first, then the agent controller at once.
    let mut first = w.agent(&ids[0]).await;
    first.spec.cluster_deployment_name = None;
    w.admin.update(&first).await.unwrap();
    w.settle().await;
    assert!(w.backend.cluster_by_kube_key(ns(), "c1").await.is_some(), "the cluster record is still there");
    w.reconcile(&ids[0]).await;
    w.reconcile_cluster("c1").await;
    assert!(w.backend.cluster_by_kube_key(ns(), "c1").await.is_none(), "deregistered");
    for id in &ids {
        w.reconcile(id).await;
    }
    for id in &ids {
        assert_eq!(w.status(id).await, HostStatus::UnbindingPendingUserAction, "{id}");
        let agent = w.agent(id).await;
        assert_eq!(agent.spec.cluster_deployment_name, None);
        assert_eq!(cond(&agent, BOUND), ("False", "UnbindingPendingUserAction".into()));
        assert_eq!(cond(&agent, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
        assert_eq!(deprovision(&agent), None, "the deleted cluster's nodes are left alone");
    }
    let requests = spoke.requests();
    assert!(requests.iter().all(|r| !r.contains("daemonsets") && !r.starts_with("DELETE")), "{requests:#?}");
    for node in &nodes {
        assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some(), "{node} stays in its cluster");
    }
    // Rebooted into discovery by someone, the hosts are back in the pool; the cluster is still untouched.
    for id in &ids {
        reboot_into_discovery(w, id).await;
        w.reconcile(id).await;
    }
    assert_eq!(spoke.requests(), requests);
}

async fn deleting_a_cluster_deployment_never_reclaims_in_any_order<S: Store>(w: World<S>) {
    deleting_a_cluster_never_reclaims_in_any_order(&w, false).await;
    assert!(w.store.get::<crate::resources::ClusterDeployment>(ns(), "c1").await.unwrap().is_none());
}

async fn deleting_only_the_install_never_reclaims_in_any_order<S: Store>(w: World<S>) {
    deleting_a_cluster_never_reclaims_in_any_order(&w, true).await;
    assert!(w.store.get::<crate::resources::AgentClusterInstall>(ns(), "c1").await.unwrap().is_none());
}

/// The reclaim design: a node a machine API provider manages (its Machine named in an annotation) is
/// not rebooted behind the provider's back; its host waits for someone to return it, and its node is
/// removed through the Machine once it is back.
async fn reclaim_leaves_a_node_of_the_machine_api_alone<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    spoke.put(
        &format!("/api/v1/nodes/{node}"),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
               "annotations": {"machine.openshift.io/machine": "openshift-machine-api/c1-worker-0"}}}),
    );
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    let agent = w.agent(&id).await;
    assert_eq!(cond(&agent, BOUND), ("False", "UnbindingPendingUserAction".into()));
    assert_eq!(cond(&agent, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
    let requests = spoke.requests();
    assert_eq!(requests, [format!("GET /api/v1/nodes/{node}")], "only the node was read");
    let info = deprovision(&agent).expect("the node is removed once the host is back");
    assert_eq!(info.node_name, node);
}

/// InfraEnv teardown: hosts without a cluster (free, unbinding, reclaiming) and installed hosts go at
/// once; only a host bound and not installed holds the InfraEnv, and the condition names it alone.
async fn deleting_an_infraenv_takes_its_free_and_installed_hosts_at_once<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    let free = w.pool_host("pool", 0).await;
    let installed = w.installed_host("c1", 1).await;
    let reclaiming = w.installed_host("c1", 2).await;
    w.backend
        .update_host(&w.key(&reclaiming).await, |h| {
            h.status = HostStatus::Reclaiming;
            h.cluster_id = None;
            Ok(())
        })
        .await
        .unwrap();
    let held = w.pool_host("pool", 3).await;
    w.set_cluster(&held, Some("c1")).await;
    w.set_host(&held, HostStatus::Known, "").await;

    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    if super::runtime::add_finalizer(&mut ie.metadata, super::infraenv::INFRAENV_FINALIZER) {
        w.store.update(&ie).await.unwrap();
    }
    w.admin.delete::<InfraEnv>(ns(), "pool").await.unwrap();
    w.settle().await;
    let ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().expect("held by its finalizer");
    let action = super::infraenv::cleanup(&w.store, &w.backend, ie).await.unwrap();
    assert_eq!(action, Action::RequeueAfter(Duration::from_secs(60)));
    for id in [&free, &installed, &reclaiming] {
        w.reconcile(id).await;
        assert!(w.store.get::<Agent>(ns(), id).await.unwrap().is_none(), "{id} went with the InfraEnv");
        assert!(w.backend.host_of_agent(ns(), id).await.is_none(), "{id} is deregistered");
    }
    assert!(w.backend.host_of_agent(ns(), &held).await.is_some());
    let ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    let blocked = ie.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == "DeletionBlocked").unwrap();
    assert_eq!(
        blocked.message,
        format!("Failed to delete infraEnv, existing hosts are bound to a cluster and not installed: {held} (known)")
    );

    // Released, the last host goes too, and so may the InfraEnv.
    w.set_cluster(&held, None).await;
    let ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    assert_eq!(super::infraenv::cleanup(&w.store, &w.backend, ie).await.unwrap(), Action::Done);
    w.reconcile(&held).await;
    assert!(w.backend.host_of_agent(ns(), &held).await.is_none());
}

/// The agent controller's own writes do not queue the Agent again; anyone else's do.
async fn an_agents_own_write_does_not_queue_it_again<S: Store>(w: World<S>) {
    let id = w.pool_host("pool", 0).await;
    let mut events = w.store.subscribe();
    settle(&mut events).await;
    // The host changes: the reconcile writes the Agent (its state annotation and status).
    w.register_again(&id).await;
    w.reconcile(&id).await;
    let queues = host_queues();
    let agents = queues.agents.clone().unwrap();
    let own = settle(&mut events).await;
    assert!(!own.is_empty(), "the reconcile wrote the Agent");
    for ev in own {
        super::route_store_event(&w.store, &w.hub.agents.own_writes, &queues, &ev).await;
    }
    assert_eq!(agents.pending(), 0, "the echo of the controller's own write queued the Agent");

    // A user's edit of the same Agent queues it.
    let mut a = w.agent(&id).await;
    a.metadata.labels.get_or_insert_default().insert("team".into(), "blue".into());
    w.store.update(&a).await.unwrap();
    for ev in settle(&mut events).await {
        super::route_store_event(&w.store, &w.hub.agents.own_writes, &queues, &ev).await;
    }
    assert_eq!(agents.pending(), 1);
}

/// A change of `kind` `namespace/name`, as a store announces it.
fn change(kind: Kind, namespace: &str, name: &str, status_only: bool) -> crate::store::ChangeEvent {
    crate::store::ChangeEvent {
        resource: kind.resource(),
        namespace: namespace.into(),
        name: name.into(),
        status_only,
        resource_version: Some("1".into()),
    }
}

/// An Agent (without a host) with the InfraEnv label `ie` and, given, an ignition-token Secret.
async fn bare_agent<S: Store>(w: &World<S>, name: &str, ie: &str, token: Option<&str>) {
    let mut spec = json!({"approved": false});
    if let Some(t) = token {
        spec["ignitionEndpointTokenReference"] = json!({"namespace": ns(), "name": t});
    }
    w.apply(
        Kind::Agent,
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
               "metadata": {"name": name, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: ie}}, "spec": spec}),
    )
    .await;
}

/// Each trigger of the Agent and ClusterDeployment controllers queues exactly the objects that
/// reference the changed one (by the reference index), and none for a namesake in another namespace.
async fn each_change_queues_exactly_the_objects_that_reference_it<S: Store>(w: World<S>) {
    bare_agent(&w, "a1", "ie1", Some("tok")).await;
    bare_agent(&w, "a2", "ie2", Some("other")).await;
    bare_agent(&w, "a3", "ie1", None).await;
    // A ClusterDeployment whose AgentClusterInstall does not exist (any more).
    w.apply(
        Kind::ClusterDeployment,
        json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
               "metadata": {"name": "cd-orphan", "namespace": ns()},
               "spec": {"baseDomain": "example.com", "clusterName": "c", "platform": {"agentBareMetal": {}},
                        "clusterInstallRef": {"group": "extensions.hive.openshift.io", "kind": "AgentClusterInstall",
                                              "name": "gone", "version": "v1beta1"}}}),
    )
    .await;
    w.cluster_deployment("cd1", false).await;
    let queues = host_queues();
    let route = |ev: crate::store::ChangeEvent| {
        let (w, queues) = (&w, &queues);
        async move {
            let failed = super::route_store_event(&w.store, &w.hub.agents.own_writes, queues, &ev).await;
            assert!(failed.is_empty(), "{ev:?}");
            let keys = |q: &Option<std::sync::Arc<super::runtime::WorkQueue>>| {
                let mut k: Vec<String> = q.as_ref().unwrap().drain().into_iter().map(|(_, n)| n).collect();
                k.sort();
                k
            };
            (keys(&queues.agents), keys(&queues.clusters))
        }
    };
    let none = Vec::<String>::new();
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // Secret → the Agents reading their ignition token from it.
    assert_eq!(route(change(Kind::Secret, ns(), "tok", false)).await, (names(&["a1"]), none.clone()));
    assert_eq!(route(change(Kind::Secret, "elsewhere", "tok", false)).await, (none.clone(), none.clone()));
    assert_eq!(route(change(Kind::Secret, ns(), "unused", false)).await, (none.clone(), none.clone()));
    // InfraEnv → its Agents (by label), not on a status-only change.
    assert_eq!(route(change(Kind::InfraEnv, ns(), "ie1", false)).await, (names(&["a1", "a3"]), none.clone()));
    assert_eq!(route(change(Kind::InfraEnv, ns(), "ie1", true)).await, (none.clone(), none.clone()));
    assert_eq!(route(change(Kind::InfraEnv, "elsewhere", "ie1", false)).await, (none.clone(), none.clone()));
    // AgentClusterInstall → its ClusterDeployment; once gone, the ClusterDeployment naming it.
    assert_eq!(route(change(Kind::AgentClusterInstall, ns(), "cd1", true)).await, (none.clone(), names(&["cd1"])));
    assert_eq!(
        route(change(Kind::AgentClusterInstall, ns(), "gone", false)).await,
        (none.clone(), names(&["cd-orphan"]))
    );
    assert_eq!(
        route(change(Kind::AgentClusterInstall, "elsewhere", "gone", false)).await,
        (none.clone(), none.clone())
    );
    // The object itself.
    assert_eq!(route(change(Kind::ClusterDeployment, ns(), "cd1", false)).await, (none.clone(), names(&["cd1"])));
    assert_eq!(route(change(Kind::Agent, ns(), "a2", false)).await, (names(&["a2"]), none.clone()));
    assert_eq!(route(change(Kind::Agent, ns(), "a2", true)).await, (none.clone(), none.clone()));
    // A reference that moves leaves the index: a2 now reads its token from "tok" too.
    let mut a2: crate::resources::Agent = w.store.get(ns(), "a2").await.unwrap().unwrap();
    a2.spec.ignition_endpoint_token_reference =
        serde_json::from_value(json!({"namespace": ns(), "name": "tok"})).unwrap();
    w.store.update(&a2).await.unwrap();
    assert_eq!(route(change(Kind::Secret, ns(), "tok", false)).await, (names(&["a1", "a2"]), none.clone()));
    assert_eq!(route(change(Kind::Secret, ns(), "other", false)).await, (none.clone(), none));
}

/// Fresh queues for the Agent and ClusterDeployment controllers.
fn host_queues() -> super::triggers::Queues {
    super::triggers::Queues {
        agents: Some(Default::default()),
        clusters: Some(Default::default()),
        ..Default::default()
    }
}

/// The change events that arrive until none has for a while: a watch delivers them some time after
/// the write, where the SQLite store has them at once.
async fn settle(
    events: &mut tokio::sync::broadcast::Receiver<crate::store::ChangeEvent>,
) -> Vec<crate::store::ChangeEvent> {
    let mut got = Vec::new();
    while let Ok(Ok(ev)) = tokio::time::timeout(Duration::from_millis(300), events.recv()).await {
        got.push(ev);
    }
    got
}

on_both_stores! {
    scenario_25_agent_bind,
    scenario_26_agent_bind_waits_for_the_cluster_record_and_recovers,
    agent_bind_waits_for_an_install_not_seen_yet,
    scenario_27_moving_an_agent_unbinds_it_first,
    scenario_28_unbinding_a_day1_host_mid_installation_is_refused_a_day2_host_is_not,
    scenario_29_unbinding_an_installed_host_reclaims_it_through_the_spoke,
    scenario_30_reclaim_falls_back_to_a_plain_unbind,
    an_installed_host_of_an_ironic_agent_infraenv_is_not_reclaimed_and_says_why,
    a_refused_unbind_writes_nothing_to_the_spoke,
    the_reclaim_agent_gets_the_service_ca,
    a_spoke_kubeconfig_that_names_a_program_or_hub_files_runs_and_reads_nothing,
    scenario_32_no_spoke_cleanup_while_the_host_is_unbinding,
    scenario_33_skip_spoke_cleanup_clears_deprovision_info_without_the_spoke,
    scenario_34_a_failed_spoke_cleanup_is_reported_and_retried,
    scenario_35_the_node_leaves_the_spoke_once_the_host_is_back,
    scenario_36_deleting_an_agent_of_a_deleted_cluster_skips_the_spoke,
    scenario_37_deleting_an_installed_agent_removes_its_node,
    scenario_40_an_agent_without_its_host_gets_it_back,
    scenario_55_deleting_the_install_unbinds_late_bound_agents,
    scenario_56_agents_of_an_infraenv_of_the_cluster_are_deleted,
    scenario_57_preserve_on_delete_deletes_late_bound_agents,
    pool_hosts_disconnect_after_three_minutes_through_the_backend_monitor,
    infraenv_labels_named_for_propagation_become_node_labels,
    the_ignition_endpoint_token_comes_from_the_referenced_secret,
    scenario_38_deleting_an_agent_mid_installation_with_approved_csrs_cleans_the_spoke,
    scenario_54_deleting_the_install_cancels_a_running_installation_before_deregistering,
    an_agents_own_write_does_not_queue_it_again,
    each_change_queues_exactly_the_objects_that_reference_it,
    an_installing_host_is_held_whoever_writes_its_agent,
    an_infraenv_edited_past_admission_moves_no_installing_host,
    deleting_a_cluster_deployment_never_reclaims_in_any_order,
    deleting_only_the_install_never_reclaims_in_any_order,
    reclaim_leaves_a_node_of_the_machine_api_alone,
    deleting_an_infraenv_takes_its_free_and_installed_hosts_at_once,
    an_installation_reports_six_conditions_and_ends_with_the_admin_secrets,
    a_failed_or_cancelled_installation_says_it_stopped_and_why,
    an_install_without_its_cluster_image_set_is_not_synced_until_it_exists,
    ignition_token_overrides_and_installer_args_reach_the_install_step,
}
