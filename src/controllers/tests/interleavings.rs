//! The host lifecycle under seeded interleavings (issue 32, item 6): each scenario runs under many
//! seeds, each seed a different order of reconciles, change deliveries, agent polls and timers, and
//! every seed must end in the same state, the one the design names.
//!
//! How a run is made deterministic over real I/O (docs/design.md §7.6): the controllers' store is
//! wrapped in [`Gated`] and the backend has gates of its own ([`crate::pool::gate`]), so a reconcile
//! stops before each store or backend call. The scheduler ([`Sim::step`]) waits until every reconcile
//! is parked at a gate or finished, whatever real I/O that takes, then makes one seeded choice: let a
//! parked reconcile go on to its next gate, start a queued key (within the controller's workers),
//! deliver the next store or host change to the routing that queues keys, let one simulated agent
//! make one call, or, when nothing else can happen, move virtual time to the next timer.
//!
//! A seed that fails prints itself; it replays exactly with
//! `BOOTSTREAM_SIM_SEED=<seed> cargo nextest run --lib -E 'test(/interleavings::embedded::NAME$/)'`
//! (the seed runs after seed 0, the reference its end state is compared with;
//! `BOOTSTREAM_SIM_SEEDS=<n>` runs n seeds instead of the default; `BOOTSTREAM_SIM_TRACE=1` prints
//! the schedule of a failing seed).
//!
//! On the Kubernetes store (`kubernetes::`, fewer seeds) changes reach the controllers through
//! watches, at a time of their own: before each choice the run waits until the watches announced
//! every object at the resourceVersion the API server's store has, and takes the changes that
//! arrived in an order that does not depend on which watch was faster. What stays timing-dependent
//! there: the test API server's watch reads an object when it forwards its change, so two writes in
//! one step could reach the controllers as one event (the gated store splits the one step that made
//! two, `update_with_status`, in two).
//!
//! Those run on a real kube-apiserver and etcd as well (`real_hub::`, fewer seeds still, each in
//! a namespace of its own on the run's shared hub): the same awaiting of written versions, with the
//! changes announced by a cluster admin's watch of the namespace instead of the test server's store.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use serde_json::json;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::*;
use crate::controllers::infraenv::InfraEnvReconciler;
use crate::controllers::runtime::sim::Controllers;
use crate::controllers::runtime::{Key, Reconciler};
use crate::hosts::Host;
use crate::pool::HostChange;
use crate::pool::gate::enter;
use crate::resources::{AgentClusterInstall, BareMetalHost, ClusterDeployment};
use crate::store::{ChangeEvent, Deletion, Object, StoreError};

/// The controllers' store with an interleaving point before every call (see the module docs).
#[derive(Clone)]
pub(crate) struct Gated<S>(pub S);

impl<S: Store> Store for Gated<S> {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let _turn = enter("store.get").await;
        self.0.get(namespace, name).await
    }
    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let _turn = enter("store.list").await;
        self.0.list(namespace).await
    }
    async fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl FnMut(&K) -> T + Send,
    ) -> Result<Vec<T>, StoreError> {
        let _turn = enter("store.list").await;
        self.0.list_map(namespace, f).await
    }
    async fn list_referencing<K: Object>(
        &self,
        namespace: Option<&str>,
        relation: crate::resources::references::Ref,
        value: &str,
    ) -> Result<Vec<K>, StoreError> {
        let _turn = enter("store.list").await;
        self.0.list_referencing(namespace, relation, value).await
    }
    async fn any<K: Object>(&self, namespace: Option<&str>) -> Result<bool, StoreError> {
        let _turn = enter("store.list").await;
        self.0.any::<K>(namespace).await
    }
    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        let _turn = enter("store.get").await;
        self.0.get_by_uid(uid).await
    }
    async fn create<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let _turn = enter("store.create").await;
        self.0.create(obj).await
    }
    async fn update<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let _turn = enter("store.update").await;
        self.0.update(obj).await
    }
    async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let _turn = enter("store.update_status").await;
        self.0.update_status(obj).await
    }
    async fn update_with_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        if !self.0.writes_object_and_status_at_once() {
            // Two writes (Kubernetes): an interleaving point before each, and their change events
            // seen between them, however fast the watch is.
            let stored = self.update(obj).await?;
            let mut with_status = obj.clone();
            *with_status.meta_mut() = stored.meta().clone();
            return self.update_status(&with_status).await;
        }
        let _turn = enter("store.update").await;
        self.0.update_with_status(obj).await
    }
    fn writes_object_and_status_at_once(&self) -> bool {
        self.0.writes_object_and_status_at_once()
    }
    async fn delete<K: Object>(&self, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        let _turn = enter("store.delete").await;
        self.0.delete::<K>(namespace, name).await
    }
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.0.subscribe()
    }
    fn change_count(&self, resource: &str) -> Option<u64> {
        self.0.change_count(resource)
    }
    fn changes_since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        self.0.changes_since(resource, since)
    }
}

/// The Kubernetes deployment (as `on_kubernetes`), its controllers' store gated.
async fn kubernetes_world() -> World<Gated<KubeStore>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    SCENARIO_NS.with(|n| n.set("pool"));
    let api = SqliteStore::open_in_memory().unwrap();
    let server = ApiServer::start(api.clone()).await;
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac.yaml")).unwrap();
    let grants = crate::testkit::hub::service_account_grants(&rbac, "bootstream", "bootstream-controller").unwrap();
    server.enforce_rbac("controller", grants);
    let admin_rule = serde_json::from_value(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})).unwrap();
    server.enforce_rbac("admin", vec![crate::testkit::hub::Grant { namespace: None, rule: admin_rule }]);
    let store = KubeStore::start(server.client_as("controller").await, &Kind::ALL).await;
    let admin = KubeStore::start(server.client_as("admin").await, &[]).await;
    let settle = super::kube_settle(&store, &api);
    world(
        Gated(store),
        Gated(admin),
        Behind::Sqlite(api),
        SqliteStore::open_in_memory().unwrap(),
        Some(Arc::new(server)),
        Some(settle),
    )
    .await
}

/// The Kubernetes deployment on the real hub (as `on_real_hub`), its controllers' store gated.
async fn real_hub_world(label: &str) -> World<Gated<KubeStore>> {
    let (store, admin, api, settle) = super::real_hub_stores(label).await;
    world(Gated(store), Gated(admin), api, SqliteStore::open_in_memory().unwrap(), None, Some(settle)).await
}

/// The embedded deployment, its controllers' store gated.
async fn embedded_world() -> World<Gated<SqliteStore>> {
    SCENARIO_NS.with(|n| n.set("pool"));
    let store = SqliteStore::open_in_memory().unwrap();
    world(Gated(store.clone()), Gated(store.clone()), Behind::Sqlite(store.clone()), store, None, None).await
}

/// The Agent name (host id) of simulated host `index`: fixed, so that runs compare.
fn host_id(index: usize) -> String {
    format!("00000000-0000-4000-8000-{index:012}")
}

/// What a simulated agent does next, given its host's state: one call to the backend, as the agent
/// API makes it for the agent's poll (registration after a restart, the inventory reply, installation
/// progress, the reclaim agent's download reply).
#[derive(Debug, Clone)]
enum Poll {
    Register,
    Inventory,
    Progress(&'static str),
    ReclaimDownloaded,
    /// The installer on the bootstrap host reports one of the cluster's admin credentials.
    Credential(crate::pool::CredentialFile),
}

fn next_poll(host: &Host) -> Option<Poll> {
    use HostStatus::*;
    const STAGES: [&str; 3] = ["Writing image to disk", "Rebooting", "Done"];
    match host.status {
        // Binding and unbinding restart the agent; the reclaim agent reboots the host into discovery.
        Binding | Unbinding | ReclaimingRebooting => Some(Poll::Register),
        Discovering | DiscoveringUnbound => Some(Poll::Inventory),
        Installing | InstallingInProgress => {
            let at = STAGES.iter().position(|s| *s == host.progress.current_stage).map_or(0, |i| i + 1);
            STAGES.get(at).map(|s| Poll::Progress(s))
        }
        Reclaiming => Some(Poll::ReclaimDownloaded),
        _ => None,
    }
}

/// A simulated host: which InfraEnv's image it boots, and its inventory.
#[derive(Clone)]
struct SimHost {
    index: usize,
    infraenv: String,
}

/// The controllers of one process, their routing, the simulated agents, and virtual time, driven by
/// one seed.
struct Sim<S: Store> {
    w: World<S>,
    hub: Arc<Hub<S>>,
    images: Option<Arc<crate::image::Images<S>>>,
    ctl: Controllers,
    agents_c: usize,
    clusters_c: usize,
    infraenvs_c: Option<usize>,
    rng: fastrand::Rng,
    start: Instant,
    now: Instant,
    next_monitor: Instant,
    store_events: broadcast::Receiver<ChangeEvent>,
    host_events: broadcast::Receiver<HostChange>,
    /// On Kubernetes: the API server's own store's changes (what the watches must catch up with),
    /// the resourceVersion each object must be seen at, and the one the watches announced last.
    written: Option<broadcast::Receiver<ChangeEvent>>,
    expected: BTreeMap<(String, String, String), Option<String>>,
    announced: BTreeMap<(String, String, String), Option<String>>,
    pending_store: VecDeque<ChangeEvent>,
    pending_hosts: VecDeque<HostChange>,
    hosts: Vec<SimHost>,
    /// The host monitor's period (`run_host_controllers`' `monitor_every`).
    monitor_every: Duration,
    steps: usize,
    /// The choices made, folded: seeds that scheduled differently differ here.
    schedule: u64,
    trace: Vec<String>,
    /// Steps left before the process restarts (once), if a restart is planned.
    restart_in: Option<usize>,
}

const AGENT_WORKERS: usize = 4;

/// Agents reconciled by the agent controller of the simulation.
struct Agents<S: Store>(Arc<super::super::Hub<S>>);
impl<S: Store> Reconciler for Agents<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        agent::reconcile(&self.0.agents, &key.0, &key.1).await
    }
}
struct Clusters<S: Store>(Arc<super::super::Hub<S>>);
impl<S: Store> Reconciler for Clusters<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        cluster::reconcile(&self.0.clusters, &key.0, &key.1).await
    }
}

impl<S: Store> Sim<S> {
    /// A process starting over the world `w`: controllers, and everything queued once, as
    /// `run_host_controllers` does at start. With `infraenvs`, the InfraEnv controller runs too.
    async fn new(w: World<S>, seed: u64, infraenvs: bool, hosts: Vec<SimHost>) -> Sim<S> {
        let hub = Arc::new(Hub { agents: clone_agents(&w.hub.agents), clusters: clone_clusters(&w.hub.clusters) });
        let mut ctl = Controllers::new();
        let agents_c = ctl.add("agent", Arc::new(Agents(hub.clone())), AGENT_WORKERS);
        let clusters_c = ctl.add("clusterdeployment", Arc::new(Clusters(hub.clone())), 1);
        let (images, infraenvs_c) = if infraenvs {
            let dir = std::env::temp_dir().join(format!("bootstream-sim-{}", std::process::id()));
            let config = crate::image::ServiceConfig::new("http://hub.example:8090", dir);
            let images = crate::image::Images::new(
                w.store.clone(),
                crate::image::catalog::Catalog::new(vec![]),
                Arc::new(config),
            );
            let r = Arc::new(InfraEnvReconciler { images: images.clone(), backend: Some(w.backend.clone()) });
            (Some(images), Some(ctl.add("infraenv", r, crate::controllers::INFRAENV_WORKERS)))
        } else {
            (None, None)
        };
        let start = Instant::now();
        let monitor_every = Duration::from_secs(60);
        let store_events = w.store.subscribe();
        let host_events = w.backend.subscribe();
        // What the setup wrote must be announced by the API server's side before it is listened to:
        // announced only after, it would be awaited from the controllers' store, which may have
        // announced it before `store_events` listened (a real hub's two watches race).
        w.api.caught_up().await;
        let written = w.settle.is_some().then(|| w.api.subscribe());
        let mut sim = Sim {
            w,
            hub,
            images,
            ctl,
            agents_c,
            clusters_c,
            infraenvs_c,
            rng: fastrand::Rng::with_seed(seed),
            start,
            now: start,
            next_monitor: start + monitor_every,
            store_events,
            host_events,
            written,
            expected: BTreeMap::new(),
            announced: BTreeMap::new(),
            pending_store: VecDeque::new(),
            pending_hosts: VecDeque::new(),
            hosts,
            monitor_every,
            steps: 0,
            schedule: 0,
            trace: Vec::new(),
            restart_in: None,
        };
        if sim.written.is_some() {
            // What the setup wrote reaches the watches some time later: a start after it.
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let mut any = false;
                while let Ok(ev) = sim.store_events.try_recv() {
                    sim.announced.insert((ev.resource, ev.namespace, ev.name), ev.resource_version);
                    any = true;
                }
                if !any {
                    break;
                }
            }
        }
        sim.list_everything().await;
        sim
    }

    /// What a start queues: every Agent, ClusterDeployment (and InfraEnv).
    async fn list_everything(&mut self) {
        let store = &self.w.store;
        for a in store.list::<Agent>(None).await.unwrap() {
            self.ctl.queue(self.agents_c).push(super::super::key_of(&a.metadata));
        }
        for cd in store.list::<ClusterDeployment>(None).await.unwrap() {
            self.ctl.queue(self.clusters_c).push(super::super::key_of(&cd.metadata));
        }
        if let Some(c) = self.infraenvs_c {
            for ie in store.list::<InfraEnv>(None).await.unwrap() {
                self.ctl.queue(c).push(super::super::key_of(&ie.metadata));
            }
        }
    }

    /// The process restarts: reconciles are dropped where they stand, queues, timers and undelivered
    /// changes are lost, and everything is listed again.
    async fn restart(&mut self) {
        self.ctl.restart();
        self.pending_store.clear();
        self.pending_hosts.clear();
        self.store_events = self.w.store.subscribe();
        self.host_events = self.w.backend.subscribe();
        self.log("restart".into());
        self.list_everything().await;
    }

    fn log(&mut self, what: String) {
        if tracing_enabled() {
            for line in self.ctl.log.drain(..) {
                self.trace.push(format!("{} {line}", self.steps));
            }
            let t = (self.now - self.start).as_secs();
            self.trace.push(format!("{} t={t}s {what}", self.steps));
        }
    }

    /// Collects the changes the last step made. On Kubernetes they come through watches, at a time
    /// of their own: first every object written is awaited at the version the API server has, then
    /// the changes that arrived are taken in an order that does not depend on their arrival (the
    /// watches of different kinds race; each kind's own are in order).
    async fn collect_events(&mut self) {
        let mut arrived = Vec::new();
        // On a real API server the announcements of what was written come through a watch too.
        self.w.api.caught_up().await;
        if let Some(written) = self.written.as_mut() {
            loop {
                match written.try_recv() {
                    Ok(ev) => {
                        if self.w.store.change_count(&ev.resource).is_some() {
                            self.expected.insert((ev.resource, ev.namespace, ev.name), ev.resource_version);
                        }
                    }
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(e) => panic!("API server changes: {e}"),
                }
            }
            // A minute: a real API server's watches on a machine running the whole suite are slower
            // than the test server's; a change that never comes still fails the seed.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                loop {
                    match self.store_events.try_recv() {
                        Ok(ev) => {
                            let key = (ev.resource.clone(), ev.namespace.clone(), ev.name.clone());
                            self.announced.insert(key, ev.resource_version.clone());
                            arrived.push(ev);
                        }
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(e) => panic!("store changes: {e}"),
                    }
                }
                let behind: Vec<_> = self
                    .expected
                    .iter()
                    .filter(|(k, v)| self.announced.get(*k) != Some(*v))
                    .map(|(k, v)| (k, v, self.announced.get(k)))
                    .collect();
                if behind.is_empty() {
                    break;
                }
                assert!(Instant::now() < deadline, "the watches did not catch up with {behind:?}");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            arrived.sort_by(|a, b| a.resource.cmp(&b.resource));
        } else {
            loop {
                match self.store_events.try_recv() {
                    Ok(ev) => arrived.push(ev),
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(e) => panic!("store changes: {e}"),
                }
            }
        }
        self.pending_store.extend(arrived);
        loop {
            match self.host_events.try_recv() {
                Ok(ev) => self.pending_hosts.push_back(ev),
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(e) => panic!("host changes: {e}"),
            }
        }
    }

    /// The polls simulated agents can make now, by host.
    async fn polls(&self) -> Vec<(usize, Poll)> {
        let mut out = Vec::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let Some(host) = self.w.backend.host_of_agent(ns(), &host_id(h.index)).await else { continue };
            if host.infra_env_id != self.ie_uid_of(&h.infraenv).await.unwrap_or_default() {
                continue;
            }
            if let Some(p) = next_poll(&host) {
                out.push((i, p));
            } else if host.bootstrap
                && host.status == HostStatus::Installed
                && let Some(cid) = &host.cluster_id
            {
                let creds = self.w.backend.credentials(cid);
                if creds.kubeconfig.is_none() {
                    out.push((i, Poll::Credential(crate::pool::CredentialFile::Kubeconfig)));
                } else if creds.kubeadmin_password.is_none() {
                    out.push((i, Poll::Credential(crate::pool::CredentialFile::KubeadminPassword)));
                }
            }
        }
        out
    }

    async fn ie_uid_of(&self, name: &str) -> Option<String> {
        self.w.store.get::<InfraEnv>(ns(), name).await.ok().flatten().and_then(|ie| ie.metadata.uid)
    }

    async fn do_poll(&mut self, i: usize, poll: Poll) {
        let h = self.hosts[i].clone();
        let id = host_id(h.index);
        let b = self.w.backend.clone();
        let Some(ie) = self.w.store.get::<InfraEnv>(ns(), &h.infraenv).await.unwrap() else { return };
        let ie_uid = ie.metadata.uid.clone().unwrap_or_default();
        let key = crate::hosts::HostKey::new(&ie_uid, &id);
        let result = match poll.clone() {
            Poll::Register => {
                // The cluster of the InfraEnv's clusterRef, for hosts that are not late-bound.
                let bound = match &ie.spec.cluster_ref {
                    Some(r) => b.cluster_by_kube_key(&r.namespace, &r.name).await.map(|c| c.id),
                    None => None,
                };
                b.register_host(&ie_uid, ns(), &id, "v1", bound).await.map(|_| ())
            }
            Poll::Inventory => b.update_inventory(&key, crate::hosts::simulated::inventory(h.index).to_string()).await,
            Poll::Progress(stage) => b.update_progress(&key, stage, "").await.map(|_| ()),
            Poll::ReclaimDownloaded => b.reclaim_download_done(&key, true).await.map(|_| ()),
            Poll::Credential(file) => {
                let cid = b.host(&key).await.and_then(|h| h.cluster_id).unwrap_or_default();
                let value = match file {
                    crate::pool::CredentialFile::Kubeconfig => crate::cli::simulate::simulated_kubeconfig(&cid),
                    crate::pool::CredentialFile::KubeadminPassword => crate::cli::simulate::simulated_password(&cid),
                };
                b.put_credential(&cid, file, value).await
            }
        };
        self.log(format!("agent h{} {poll:?}: {:?}", h.index, result.err().map(|e| e.message)));
    }

    /// Routes one store change as the feeders of `run_host_controllers` and the InfraEnv controller do.
    async fn deliver_store(&mut self, ev: ChangeEvent) {
        self.log(format!("store change {} {}/{}", ev.resource, ev.namespace, ev.name));
        if let (Some(c), Some(images)) = (self.infraenvs_c, &self.images) {
            let keys = super::super::infraenvs_affected_by(images, &ev.resource, &ev.namespace, &ev.name).await;
            for key in keys.expect("routing a change to InfraEnvs") {
                self.ctl.queue(c).push(key);
            }
        }
        let queues = super::super::triggers::Queues {
            agents: Some(self.ctl.queue(self.agents_c).clone()),
            clusters: Some(self.ctl.queue(self.clusters_c).clone()),
            ..Default::default()
        };
        let failed = super::super::route_store_event(&self.w.store, &self.hub.agents.own_writes, &queues, &ev).await;
        assert!(failed.is_empty(), "routing {ev:?} failed");
    }

    /// Routes one host change as the host feeder of `run_host_controllers` (and the InfraEnv
    /// controller's) does.
    async fn deliver_host(&mut self, change: HostChange) {
        self.log(format!("host change h{} deleted={}", change.host_id, change.deleted));
        if let Some(c) = self.infraenvs_c
            && let Ok(Some(ie)) = self.w.store.get_by_uid::<InfraEnv>(&change.infra_env_id).await
            && ie.metadata.deletion_timestamp.is_some()
        {
            self.ctl.queue(c).push(super::super::key_of(&ie.metadata));
        }
        let (aq, cq) = (self.ctl.queue(self.agents_c).clone(), self.ctl.queue(self.clusters_c).clone());
        super::super::route_host_change(&self.w.store, &self.w.backend, &mut Default::default(), &aq, &cq, change)
            .await;
    }

    /// One step: waits for quiet, then one seeded choice. Returns false when nothing can happen
    /// before `until` (virtual time).
    async fn step(&mut self, until: Instant) -> bool {
        self.ctl.gates.quiet(Duration::from_secs(60)).await;
        self.ctl.settle_finished(self.now).await;
        self.collect_events().await;
        if self.restart_in == Some(0) {
            self.restart_in = None;
            self.restart().await;
            return true;
        }
        let next_timer = self.ctl.fire_due(self.now);
        enum Choice {
            Release(u64),
            Start(usize),
            Store,
            Host,
            Agent(usize, Poll),
        }
        let mut choices: Vec<Choice> = Vec::new();
        choices.extend(self.ctl.gates.parked().into_iter().map(|(id, _)| Choice::Release(id)));
        choices.extend(self.ctl.startable().into_iter().map(Choice::Start));
        if !self.pending_store.is_empty() {
            choices.push(Choice::Store);
        }
        if !self.pending_hosts.is_empty() {
            choices.push(Choice::Host);
        }
        choices.extend(self.polls().await.into_iter().map(|(i, p)| Choice::Agent(i, p)));
        if choices.is_empty() {
            assert!(self.ctl.idle(), "nothing to choose but the controllers are not idle");
            // Time moves to the next timer: a requeue, or the host monitor's next round.
            let Some(requeue) = next_timer.filter(|t| *t <= until) else { return false };
            if self.next_monitor <= requeue {
                self.advance_to(self.next_monitor);
                self.next_monitor += self.monitor_every;
                self.monitor().await;
            } else {
                self.advance_to(requeue);
            }
            return true;
        }
        self.steps += 1;
        if let Some(n) = self.restart_in.as_mut() {
            *n -= 1;
        }
        let parked = self.ctl.gates.parked();
        let pick = self.rng.usize(..choices.len());
        self.schedule = self.schedule.wrapping_mul(31).wrapping_add(pick as u64 * 1024 + choices.len() as u64);
        match choices.swap_remove(pick) {
            Choice::Release(id) => {
                if tracing_enabled() {
                    let at = parked.iter().find(|(p, _)| *p == id).map_or("", |(_, at)| *at);
                    let who = self.ctl.describe(id);
                    self.log(format!("{who} goes on from {at}"));
                }
                self.ctl.gates.release(id)
            }
            Choice::Start(c) => {
                let rng = &mut self.rng;
                self.ctl.start(c, |n| rng.usize(..n));
            }
            Choice::Store => {
                let ev = self.pending_store.pop_front().unwrap();
                self.deliver_store(ev).await;
            }
            Choice::Host => {
                let ev = self.pending_hosts.pop_front().unwrap();
                self.deliver_host(ev).await;
            }
            Choice::Agent(i, p) => self.do_poll(i, p).await,
        }
        true
    }

    fn advance_to(&mut self, t: Instant) {
        if t > self.now {
            let by = t - self.now;
            self.w.clock.advance(SignedDuration::try_from(by).unwrap());
            self.now = t;
        }
    }

    /// The host monitor's round; the simulated agents checked in since the last (they poll every
    /// few seconds).
    async fn monitor(&mut self) {
        for h in self.w.backend.hosts(|_| true).await {
            let _ = self.w.backend.touch(&h.key()).await;
        }
        let changed = self.w.backend.refresh_all().await;
        self.log(format!("monitor: {changed} changed"));
    }

    /// Runs until nothing is left to do but timers further than `horizon` away.
    async fn settle(&mut self, horizon: Duration) {
        let until = self.now + horizon;
        let limit = self.steps + 20_000;
        while self.step(until).await {
            assert!(self.steps < limit, "the simulation does not settle");
        }
        // Nothing runs: the last changes' deliveries were steps too.
        assert!(self.pending_store.is_empty() && self.pending_hosts.is_empty());
    }
}

fn clone_agents<S: Store>(a: &AgentContext<S>) -> AgentContext<S> {
    AgentContext {
        store: a.store.clone(),
        backend: a.backend.clone(),
        auth: crate::auth::AgentAuth::from_key([7; 32]),
        service_base_url: a.service_base_url.clone(),
        service_ca_cert_pem: a.service_ca_cert_pem.clone(),
        agent_image: a.agent_image.clone(),
        metal3: a.metal3,
        own_writes: Default::default(),
        url_signer: None,
    }
}

fn clone_clusters<S: Store>(c: &ClusterContext<S>) -> ClusterContext<S> {
    ClusterContext {
        store: c.store.clone(),
        backend: c.backend.clone(),
        service_base_url: c.service_base_url.clone(),
        url_signer: c.url_signer.clone(),
    }
}

fn tracing_enabled() -> bool {
    std::env::var_os("BOOTSTREAM_SIM_TRACE").is_some()
}

/// Virtual time a phase runs for once nothing but timers is left: the requeues of errors (10 s) and
/// of InfraEnvs waiting for hosts (60 s) come several times within it.
const HORIZON: Duration = Duration::from_secs(300);

impl<S: Store> World<S> {
    /// A host of InfraEnv `ie` with a fixed id, registered with its inventory, and its Agent
    /// (approved unless `approved` is false) reconciled.
    async fn sim_host(&self, ie: &str, index: usize, approved: bool) -> String {
        let ie_doc = self.store.get::<InfraEnv>(ns(), ie).await.unwrap().unwrap();
        let ie_uid = ie_doc.metadata.uid.clone().unwrap();
        let bound = match &ie_doc.spec.cluster_ref {
            Some(r) => self.backend.cluster_by_kube_key(&r.namespace, &r.name).await.map(|c| c.id),
            None => None,
        };
        let id = host_id(index);
        self.backend.register_host(&ie_uid, ns(), &id, "v1", bound).await.unwrap();
        let key = crate::hosts::HostKey::new(&ie_uid, &id);
        self.backend.update_inventory(&key, crate::hosts::simulated::inventory(index).to_string()).await.unwrap();
        // The agent API names the cluster of the InfraEnv's clusterRef in the Agents it creates.
        let mut spec = json!({"approved": approved});
        if let Some(r) = &ie_doc.spec.cluster_ref {
            spec["clusterDeploymentName"] = json!({"name": r.name, "namespace": r.namespace});
        }
        self.apply(
            Kind::Agent,
            json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
                   "metadata": {"name": id, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: ie}},
                   "spec": spec}),
        )
        .await;
        self.reconcile(&id).await;
        id
    }

    /// A host of the pool, bound to `cd` and installed on it (as `installed_host`, with a fixed id).
    async fn sim_installed_host(&self, cd: &str, index: usize) -> String {
        let id = self.sim_host("pool", index, true).await;
        self.set_cluster(&id, Some(cd)).await;
        self.register_again(&id).await;
        self.backend
            .update_inventory(&self.key(&id).await, crate::hosts::simulated::inventory(index).to_string())
            .await
            .unwrap();
        self.set_host(&id, HostStatus::Installed, "Done").await;
        self.reconcile(&id).await;
        id
    }

    /// A cluster `cd` installed on pool hosts `hosts`, as hive and the installer leave it.
    async fn installed_cluster(&self, cd: &str, hosts: std::ops::Range<usize>) {
        self.cluster_deployment(cd, true).await;
        for i in hosts {
            self.sim_installed_host(cd, i).await;
        }
        let mut cluster = self.backend.cluster_by_kube_key(ns(), cd).await.unwrap();
        cluster.status = "installed".into();
        self.backend.put_cluster(cluster.clone()).await.unwrap();
        let mut d = self.store.get::<ClusterDeployment>(ns(), cd).await.unwrap().unwrap();
        d.spec.installed = true;
        d.spec.cluster_metadata = Some(crate::resources::hive::ClusterMetadata {
            cluster_id: cluster.id.clone(),
            infra_id: cluster.id.clone(),
            admin_kubeconfig_secret_ref: crate::resources::LocalObjectReference {
                name: format!("{cd}-admin-kubeconfig"),
            },
            ..Default::default()
        });
        self.store.update(&d).await.unwrap();
        self.reconcile_cluster(cd).await;
    }

    /// The installed cluster `cd`'s API, with the nodes of `hosts`, reachable through its admin
    /// kubeconfig.
    async fn sim_spoke(&self, cd: &str, hosts: std::ops::Range<usize>) -> SpokeCluster {
        let mut nodes = Vec::new();
        for i in hosts {
            nodes.push(self.hostname(&host_id(i)).await);
        }
        self.spoke_with_nodes(cd, &nodes).await
    }

    /// A user (or GitOps) points the Agent of host `index` at `cd` (None: unbinds it).
    async fn user_sets_cluster(&self, index: usize, cd: Option<&str>) {
        let mut a = self.agent(&host_id(index)).await;
        a.spec.cluster_deployment_name =
            cd.map(|cd| serde_json::from_value(json!({"name": cd, "namespace": ns()})).unwrap());
        self.admin.update(&a).await.unwrap();
        self.settle().await;
    }
}

fn pool_hosts(range: std::ops::Range<usize>, ie: &str) -> Vec<SimHost> {
    range.map(|index| SimHost { index, infraenv: ie.to_string() }).collect()
}

/// Host states a settled world may show: the design names each as where a host rests (waiting for
/// nothing, or for a user).
fn resting(status: HostStatus) -> bool {
    use HostStatus::*;
    matches!(
        status,
        KnownUnbound
            | InsufficientUnbound
            | Known
            | Insufficient
            | Installed
            | AddedToExistingCluster
            | UnbindingPendingUserAction
            | Cancelled
            | Error
    )
}

/// The state that every seed must agree on, normalized (no uids, times or resourceVersions): each
/// simulated host's record, each Agent's cluster, conditions and clean-up marker, which objects
/// exist (and whether they are being deleted), and what each spoke holds and was asked to create.
async fn snapshot<S: Store>(sim: &Sim<S>, spokes: &[(&str, &SpokeCluster)]) -> BTreeMap<String, String> {
    let w = &sim.w;
    let mut out = BTreeMap::new();
    let ies: BTreeMap<String, String> = w
        .store
        .list::<InfraEnv>(None)
        .await
        .unwrap()
        .into_iter()
        .map(|ie| (ie.metadata.uid.clone().unwrap_or_default(), ie.metadata.name.clone().unwrap_or_default()))
        .collect();
    for h in w.backend.hosts(|_| true).await {
        let cluster = match &h.cluster_id {
            Some(cid) => w.backend.cluster(cid).await.map_or_else(|| format!("gone {cid}"), |c| c.name),
            None => "-".into(),
        };
        let ie = ies.get(&h.infra_env_id).cloned().unwrap_or_else(|| "(deleted InfraEnv)".into());
        out.insert(
            format!("host {} in {ie}", h.id),
            format!("{} cluster={cluster} stage={:?}", h.status, h.progress.current_stage),
        );
    }
    for a in w.store.list::<Agent>(None).await.unwrap() {
        let name = a.metadata.name.clone().unwrap_or_default();
        let conds: Vec<String> = a
            .status
            .as_ref()
            .map(|s| s.conditions.iter().map(|c| format!("{}={}/{}", c.type_, c.status, c.reason)).collect())
            .unwrap_or_default();
        out.insert(
            format!("agent {name}"),
            format!(
                "cd={:?} deleting={} finalizers={:?} deprovision={:?} {}",
                a.spec.cluster_deployment_name.as_ref().map(|r| r.name.clone()),
                a.metadata.deletion_timestamp.is_some(),
                a.metadata.finalizers,
                deprovision(&a).map(|d| (d.cluster_name, d.node_name)),
                conds.join(" ")
            ),
        );
    }
    for cd in w.store.list::<ClusterDeployment>(None).await.unwrap() {
        let name = cd.metadata.name.clone().unwrap_or_default();
        out.insert(
            format!("clusterdeployment {name}"),
            format!("installed={} deleting={}", cd.spec.installed, cd.metadata.deletion_timestamp.is_some()),
        );
        if let Some(c) = w.backend.cluster_by_kube_key(ns(), &name).await {
            out.insert(format!("cluster record {name}"), format!("{} {}", c.kind, c.status));
        }
    }
    for aci in w.store.list::<AgentClusterInstall>(None).await.unwrap() {
        let name = aci.metadata.name.clone().unwrap_or_default();
        out.insert(
            format!("agentclusterinstall {name}"),
            format!("deleting={}", aci.metadata.deletion_timestamp.is_some()),
        );
    }
    for ie in w.store.list::<InfraEnv>(None).await.unwrap() {
        let name = ie.metadata.name.clone().unwrap_or_default();
        let blocked = ie
            .status
            .as_ref()
            .and_then(|s| {
                s.conditions.iter().find(|c| c.type_ == crate::controllers::infraenv::DELETION_BLOCKED_CONDITION)
            })
            .map(|c| c.message.clone());
        out.insert(
            format!("infraenv {name}"),
            format!("deleting={} blocked={blocked:?}", ie.metadata.deletion_timestamp.is_some()),
        );
    }
    for (name, spoke) in spokes {
        let paths: Vec<String> = spoke.paths().iter().map(|p| without_uuids(p)).collect();
        out.insert(format!("spoke {name} objects"), paths.join(" "));
        let created: Vec<String> = spoke.requests().into_iter().filter(|r| r.contains("daemonsets")).collect();
        out.insert(format!("spoke {name} reclaim requests"), (!created.is_empty()).to_string());
    }
    out
}

/// `text` with each UUID in it (the reclaim agent's token Secret is named after its InfraEnv's uid)
/// replaced by `<uid>`.
fn without_uuids(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while !rest.is_empty() {
        if rest.len() >= 36 && rest.is_char_boundary(36) && uuid::Uuid::parse_str(&rest[..36]).is_ok() {
            out.push_str("<uid>");
            rest = &rest[36..];
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The invariants every settled world keeps, whatever the scenario: hosts rest in a state the design
/// names; each Agent's Bound condition is its host's (spec-controllers.md §2.6); no object is left
/// half-deleted (a finalizer nobody removes) but those `deleting` names; no host id is in two
/// InfraEnvs.
async fn check_invariants<S: Store>(sim: &Sim<S>, deleting: &[&str]) {
    let w = &sim.w;
    let hosts = w.backend.hosts(|_| true).await;
    let mut ids = BTreeSet::new();
    for h in &hosts {
        assert!(resting(h.status), "host {} rests in {}, which the design names as a passage", h.id, h.status);
        assert!(ids.insert((h.namespace.clone(), h.id.clone())), "host {} is in two InfraEnvs", h.id);
    }
    for a in w.store.list::<Agent>(None).await.unwrap() {
        let name = a.metadata.name.clone().unwrap_or_default();
        if let Some(h) = w.backend.host_of_agent(ns(), &name).await {
            let want = crate::controllers::agent_conditions::bound(&h);
            assert_eq!(
                cond(&a, BOUND),
                (if want.status == "True" { "True" } else { "False" }, want.reason.clone()),
                "Agent {name}'s Bound condition, its host being {}",
                h.status
            );
        }
    }
    let mut marked = Vec::new();
    for a in w.store.list::<Agent>(None).await.unwrap() {
        if a.metadata.deletion_timestamp.is_some() {
            marked.push(format!("Agent {}", a.metadata.name.unwrap_or_default()));
        }
    }
    for cd in w.store.list::<ClusterDeployment>(None).await.unwrap() {
        if cd.metadata.deletion_timestamp.is_some() {
            marked.push(format!("ClusterDeployment {}", cd.metadata.name.unwrap_or_default()));
        }
    }
    for aci in w.store.list::<AgentClusterInstall>(None).await.unwrap() {
        if aci.metadata.deletion_timestamp.is_some() {
            marked.push(format!("AgentClusterInstall {}", aci.metadata.name.unwrap_or_default()));
        }
    }
    for ie in w.store.list::<InfraEnv>(None).await.unwrap() {
        if ie.metadata.deletion_timestamp.is_some() {
            marked.push(format!("InfraEnv {}", ie.metadata.name.unwrap_or_default()));
        }
    }
    for b in w.store.list::<BareMetalHost>(None).await.unwrap() {
        if b.metadata.deletion_timestamp.is_some() {
            marked.push(format!("BareMetalHost {}", b.metadata.name.unwrap_or_default()));
        }
    }
    marked.retain(|m| !deleting.contains(&m.as_str()));
    assert!(marked.is_empty(), "deleted, but held by a finalizer: {marked:?}");
}

thread_local! {
    static LAST_TRACE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The schedules of the processes of the last run (a restart starts another).
    static SCHEDULES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `scenario` under each seed (`BOOTSTREAM_SIM_SEED` alone (after seed 0), or `BOOTSTREAM_SIM_SEEDS` of them,
/// `seeds` by default), each on a runtime of its own; every seed must pass and end in the same
/// snapshot. A failing seed is printed with the command that replays it.
fn under_seeds<F, Fut>(test: &str, seeds: u64, scenario: F)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = BTreeMap<String, String>>,
{
    let only = std::env::var("BOOTSTREAM_SIM_SEED").ok().map(|s| s.parse::<u64>().expect("a seed"));
    let n = std::env::var("BOOTSTREAM_SIM_SEEDS").ok().map_or(seeds, |s| s.parse().expect("a number of seeds"));
    // A seed replayed alone is compared with seed 0, the reference.
    let seeds: Vec<u64> = match only {
        Some(0) => vec![0],
        Some(seed) => vec![0, seed],
        None => (0..n).collect(),
    };
    let replay =
        |seed: u64| format!("BOOTSTREAM_SIM_SEED={seed} cargo nextest run --lib -E 'test(/interleavings::{test}$/)'");
    let mut first: Option<(u64, BTreeMap<String, String>)> = None;
    let mut schedules = BTreeSet::new();
    let runs = seeds.len();
    for seed in seeds {
        SCHEDULES.with(|s| s.borrow_mut().clear());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(scenario(seed))));
        drop(rt);
        let got = match result {
            Ok(got) => got,
            Err(panic) => {
                eprintln!("seed {seed} failed; replay with: {}", replay(seed));
                if tracing_enabled() {
                    LAST_TRACE.with(|t| eprintln!("schedule:\n{}", t.borrow().join("\n")));
                }
                std::panic::resume_unwind(panic);
            }
        };
        match &first {
            None => first = Some((seed, got)),
            Some((s0, want)) if *want != got => {
                if tracing_enabled() {
                    LAST_TRACE.with(|t| eprintln!("schedule of seed {seed}:\n{}", t.borrow().join("\n")));
                }
                let mut diff = Vec::new();
                for k in want.keys().chain(got.keys()).collect::<BTreeSet<_>>() {
                    if want.get(k) != got.get(k) {
                        diff.push(format!(
                            "  {k}:\n    seed {s0}: {:?}\n    seed {seed}: {:?}",
                            want.get(k),
                            got.get(k)
                        ));
                    }
                }
                panic!(
                    "seed {seed} ends in another state than seed {s0}:\n{}\nreplay with: {}",
                    diff.join("\n"),
                    replay(seed)
                );
            }
            Some(_) => {}
        }
        if only.is_some() && tracing_enabled() {
            LAST_TRACE.with(|t| eprintln!("schedule of seed {seed}:\n{}", t.borrow().join("\n")));
        }
        schedules.insert(SCHEDULES.with(|s| s.borrow().clone()));
    }
    // The seeds did order things differently (a scheduler that ignored them would pass alone).
    assert!(runs < 2 || schedules.len() > runs / 2, "{} schedules for {runs} seeds", schedules.len());
}

impl<S: Store> Drop for Sim<S> {
    fn drop(&mut self) {
        SCHEDULES.with(|s| s.borrow_mut().push(self.schedule));
        if tracing_enabled() {
            let mut trace = std::mem::take(&mut self.trace);
            trace.append(&mut self.ctl.log);
            LAST_TRACE.with(|t| *t.borrow_mut() = trace);
        }
    }
}

async fn statuses<S: Store>(sim: &Sim<S>) -> Vec<HostStatus> {
    let mut out = Vec::new();
    for h in &sim.hosts {
        out.push(sim.w.backend.host_of_agent(ns(), &host_id(h.index)).await.expect("the host exists").status);
    }
    out
}

async fn agent_gone<S: Store>(sim: &Sim<S>, index: usize) -> bool {
    sim.w.store.get::<Agent>(ns(), &host_id(index)).await.unwrap().is_none()
        && sim.w.backend.host_of_agent(ns(), &host_id(index)).await.is_none()
}

async fn bound_reason<S: Store>(sim: &Sim<S>, index: usize) -> (&'static str, String) {
    cond(&sim.w.agent(&host_id(index)).await, BOUND)
}

// The scenarios. Each builds its world directly (as the scenario tests do), then starts a process
// over it and lets users act; the process runs under the seed.

async fn bind_and_install<S: Store>(w: World<S>, seed: u64, restart: bool) -> BTreeMap<String, String> {
    w.cluster_deployment("c1", true).await;
    for i in 0..3 {
        w.sim_host("pool", i, true).await;
    }
    let mut sim = Sim::new(w, seed, false, pool_hosts(0..3, "pool")).await;
    sim.settle(HORIZON).await;
    for i in 0..3 {
        sim.w.user_sets_cluster(i, Some("c1")).await;
    }
    if restart {
        sim.restart_in = Some(sim.rng.usize(..80));
    }
    sim.settle(HORIZON).await;
    assert_eq!(statuses(&sim).await, [HostStatus::Installed; 3]);
    let cd = sim.w.store.get::<ClusterDeployment>(ns(), "c1").await.unwrap().unwrap();
    assert!(cd.spec.installed, "the ClusterDeployment is installed");
    check_invariants(&sim, &[]).await;
    snapshot(&sim, &[]).await
}

async fn unbind_one<S: Store>(w: World<S>, seed: u64, reclaim: bool) -> BTreeMap<String, String> {
    w.installed_cluster("c1", 0..3).await;
    let spoke = if reclaim { Some(w.sim_spoke("c1", 0..3).await) } else { None };
    let node0 = w.hostname(&host_id(0)).await;
    let mut sim = Sim::new(w, seed, false, pool_hosts(0..3, "pool")).await;
    sim.settle(HORIZON).await;
    sim.w.user_sets_cluster(0, None).await;
    sim.settle(HORIZON).await;
    let s = statuses(&sim).await;
    assert_eq!(&s[1..], [HostStatus::Installed; 2]);
    match &spoke {
        Some(spoke) => {
            // Reclaimed: rebooted into discovery by the reclaim agent, back in the pool, and its node
            // gone from the cluster.
            assert_eq!(s[0], HostStatus::KnownUnbound);
            assert!(spoke.get(&format!("/api/v1/nodes/{node0}")).is_none(), "{:?}", spoke.paths());
            assert!(spoke.requests().iter().any(|r| r.contains("daemonsets")), "the reclaim agent ran");
        }
        None => {
            assert_eq!(s[0], HostStatus::UnbindingPendingUserAction);
            assert_eq!(bound_reason(&sim, 0).await, ("False", "UnbindingPendingUserAction".into()));
        }
    }
    check_invariants(&sim, &[]).await;
    let spokes: Vec<(&str, &SpokeCluster)> = spoke.iter().map(|s| ("c1", s)).collect();
    snapshot(&sim, &spokes).await
}

/// What deleting a cluster is asked to delete.
#[derive(Clone, Copy, PartialEq)]
enum Deleted {
    ClusterDeployment,
    InstallOnly,
}

/// Item 1 of issue 32: an installed late-bound cluster (hosts 0–2, its API reachable) with a host of an
/// InfraEnv made for it (host 3); deleting it never reclaims.
async fn delete_installed_cluster<S: Store>(
    w: World<S>,
    seed: u64,
    what: Deleted,
    restart: bool,
    bmh: bool,
) -> BTreeMap<String, String> {
    w.installed_cluster("c1", 0..3).await;
    let spoke = w.sim_spoke("c1", 0..3).await;
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(w.hostname(&host_id(i)).await);
    }
    if bmh {
        // metal3 manages the hosts: their Agents name their BareMetalHosts.
        for i in 0..3 {
            let name = format!("bmh-{i}");
            w.apply(
                Kind::BareMetalHost,
                json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                       "metadata": {"name": name, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: "pool"}},
                       "spec": {"online": true}}),
            )
            .await;
            let mut a = w.agent(&host_id(i)).await;
            a.metadata.labels.get_or_insert_default().insert(crate::resources::agent::BMH_LABEL.into(), name);
            w.store.update(&a).await.unwrap();
        }
    }
    w.infraenv("c1-hosts", Some("c1")).await;
    w.sim_host("c1-hosts", 3, false).await;
    let mut hosts = pool_hosts(0..3, "pool");
    hosts.extend(pool_hosts(3..4, "c1-hosts"));
    let mut sim = Sim::new(w, seed, false, hosts).await;
    sim.settle(HORIZON).await;
    match what {
        Deleted::ClusterDeployment => {
            sim.w.admin.delete::<ClusterDeployment>(ns(), "c1").await.unwrap();
            sim.w.settle().await;
        }
        Deleted::InstallOnly => {
            sim.w.admin.delete::<AgentClusterInstall>(ns(), "c1").await.unwrap();
            sim.w.settle().await;
        }
    }
    if restart {
        sim.restart_in = Some(sim.rng.usize(..80));
    }
    sim.settle(HORIZON).await;
    // The cluster goes on running: none of its nodes is rebooted (no reclaim agent) or removed.
    assert!(
        !spoke.requests().iter().any(|r| r.contains("daemonsets")),
        "a cluster deletion started the reclaim agent on the installed cluster: {:?}",
        spoke.requests()
    );
    for (i, node) in nodes.iter().enumerate() {
        assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some(), "node {node} removed from the running cluster");
        assert_eq!(sim.w.status(&host_id(i)).await, HostStatus::UnbindingPendingUserAction, "host {i}");
        assert_eq!(bound_reason(&sim, i).await, ("False", "UnbindingPendingUserAction".into()), "host {i}");
        assert_eq!(sim.w.agent(&host_id(i)).await.spec.cluster_deployment_name, None);
    }
    assert!(agent_gone(&sim, 3).await, "the Agent of the cluster's own InfraEnv is deleted with it");
    assert!(sim.w.store.get::<AgentClusterInstall>(ns(), "c1").await.unwrap().is_none());
    let cd_left = sim.w.store.get::<ClusterDeployment>(ns(), "c1").await.unwrap().is_some();
    assert_eq!(cd_left, what == Deleted::InstallOnly);
    check_invariants(&sim, &[]).await;
    snapshot(&sim, &[("c1", &spoke)]).await
}

/// Item 1, not yet installed: hosts bound to a cluster that has not started installing go back to
/// the pool when it is deleted.
async fn delete_cluster_before_install<S: Store>(w: World<S>, seed: u64) -> BTreeMap<String, String> {
    w.cluster_deployment("c2", true).await;
    for i in 0..2 {
        w.sim_host("pool", i, true).await;
        w.set_cluster(&host_id(i), Some("c2")).await;
        w.register_again(&host_id(i)).await;
        w.backend
            .update_inventory(&w.key(&host_id(i)).await, crate::hosts::simulated::inventory(i).to_string())
            .await
            .unwrap();
        w.reconcile(&host_id(i)).await;
    }
    let mut sim = Sim::new(w, seed, false, pool_hosts(0..2, "pool")).await;
    sim.settle(HORIZON).await;
    assert_eq!(statuses(&sim).await, [HostStatus::Known; 2], "bound, waiting for a third host");
    sim.w.admin.delete::<ClusterDeployment>(ns(), "c2").await.unwrap();
    sim.w.settle().await;
    sim.settle(HORIZON).await;
    assert_eq!(statuses(&sim).await, [HostStatus::KnownUnbound; 2]);
    for i in 0..2 {
        assert_eq!(bound_reason(&sim, i).await, ("False", "Unbound".into()));
    }
    assert!(sim.w.store.get::<ClusterDeployment>(ns(), "c2").await.unwrap().is_none());
    check_invariants(&sim, &[]).await;
    snapshot(&sim, &[]).await
}

/// Item 3 of issue 32: an InfraEnv with an unbound host (0), a host installed in c1 (1) and one bound
/// to c2, not installed (2). Its deletion deletes hosts 0 and 1 at once and waits for host 2; once a
/// user unbinds host 2, the InfraEnv goes.
async fn delete_infraenv_with_mixed_hosts<S: Store>(w: World<S>, seed: u64) -> BTreeMap<String, String> {
    w.infraenv("rack", None).await;
    w.cluster_deployment("c1", true).await;
    w.cluster_deployment("c2", true).await;
    w.sim_host("rack", 0, true).await;
    for (i, cd) in [(1, "c1"), (2, "c2")] {
        let id = w.sim_host("rack", i, true).await;
        w.set_cluster(&id, Some(cd)).await;
        let ie_uid = w.ie_uid("rack").await;
        w.backend.register_host(&ie_uid, ns(), &id, "v1", None).await.unwrap();
        w.backend.update_inventory(&w.key(&id).await, crate::hosts::simulated::inventory(i).to_string()).await.unwrap();
        w.reconcile(&id).await;
    }
    w.set_host(&host_id(1), HostStatus::Installed, "Done").await;
    w.reconcile(&host_id(1)).await;
    let mut sim = Sim::new(w, seed, true, pool_hosts(0..3, "rack")).await;
    sim.settle(HORIZON).await;
    sim.w.admin.delete::<InfraEnv>(ns(), "rack").await.unwrap();
    sim.w.settle().await;
    sim.settle(HORIZON).await;
    assert!(agent_gone(&sim, 0).await, "the unbound host goes at once");
    assert!(agent_gone(&sim, 1).await, "the installed host goes at once");
    assert_eq!(sim.w.status(&host_id(2)).await, HostStatus::Known, "the bound host stays");
    let ie = sim.w.store.get::<InfraEnv>(ns(), "rack").await.unwrap().expect("held by the bound host");
    let blocked = ie
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == crate::controllers::infraenv::DELETION_BLOCKED_CONDITION))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(blocked.contains(&host_id(2)), "the condition names the host that holds it: {blocked:?}");
    check_invariants(&sim, &["InfraEnv rack"]).await;
    let held = snapshot(&sim, &[]).await;
    sim.w.user_sets_cluster(2, None).await;
    sim.settle(HORIZON).await;
    assert!(agent_gone(&sim, 2).await);
    assert!(sim.w.store.get::<InfraEnv>(ns(), "rack").await.unwrap().is_none(), "the InfraEnv went with its last host");
    check_invariants(&sim, &[]).await;
    let mut out = snapshot(&sim, &[]).await;
    out.extend(held.into_iter().map(|(k, v)| (format!("held: {k}"), v)));
    out
}

/// Each scenario under the default 200 seeds on the embedded store.
mod embedded {
    use super::*;

    const SEEDS: u64 = 200;

    #[test]
    fn bind_and_install() {
        under_seeds("embedded::bind_and_install", SEEDS, |seed| async move {
            super::bind_and_install(embedded_world().await, seed, false).await
        });
    }
    #[test]
    fn bind_and_install_with_a_restart() {
        under_seeds("embedded::bind_and_install_with_a_restart", SEEDS, |seed| async move {
            super::bind_and_install(embedded_world().await, seed, true).await
        });
    }
    #[test]
    fn unbind_one() {
        under_seeds("embedded::unbind_one", SEEDS, |seed| async move {
            super::unbind_one(embedded_world().await, seed, false).await
        });
    }
    #[test]
    fn unbind_one_reclaims() {
        under_seeds("embedded::unbind_one_reclaims", SEEDS, |seed| async move {
            super::unbind_one(embedded_world().await, seed, true).await
        });
    }
    #[test]
    fn delete_cluster_deployment() {
        under_seeds("embedded::delete_cluster_deployment", SEEDS, |seed| async move {
            super::delete_installed_cluster(embedded_world().await, seed, Deleted::ClusterDeployment, false, false)
                .await
        });
    }
    #[test]
    fn delete_install_only() {
        under_seeds("embedded::delete_install_only", SEEDS, |seed| async move {
            super::delete_installed_cluster(embedded_world().await, seed, Deleted::InstallOnly, false, false).await
        });
    }
    #[test]
    fn delete_cluster_deployment_with_a_restart() {
        under_seeds("embedded::delete_cluster_deployment_with_a_restart", SEEDS, |seed| async move {
            super::delete_installed_cluster(embedded_world().await, seed, Deleted::ClusterDeployment, true, false).await
        });
    }
    #[test]
    fn delete_cluster_deployment_of_bmh_managed_hosts() {
        under_seeds("embedded::delete_cluster_deployment_of_bmh_managed_hosts", SEEDS, |seed| async move {
            super::delete_installed_cluster(embedded_world().await, seed, Deleted::ClusterDeployment, false, true).await
        });
    }
    #[test]
    fn delete_cluster_before_install() {
        under_seeds("embedded::delete_cluster_before_install", SEEDS, |seed| async move {
            super::delete_cluster_before_install(embedded_world().await, seed).await
        });
    }
    #[test]
    fn delete_infraenv_with_mixed_hosts() {
        under_seeds("embedded::delete_infraenv_with_mixed_hosts", SEEDS, |seed| async move {
            super::delete_infraenv_with_mixed_hosts(embedded_world().await, seed).await
        });
    }
}

/// The same scenarios on the Kubernetes store (through kube-rs and the test API server, with the
/// controllers' RBAC), under fewer seeds: each runs an API server and watches.
mod kubernetes {
    use super::*;

    const SEEDS: u64 = 8;

    /// Runs `scenario` on a Kubernetes world under the seeds, checking that the controllers asked for
    /// nothing deploy/rbac.yaml does not grant.
    fn under_seeds_on_kubernetes<F, Fut>(test: &str, scenario: F)
    where
        F: Fn(World<Gated<KubeStore>>, u64) -> Fut + Copy,
        Fut: std::future::Future<Output = BTreeMap<String, String>>,
    {
        under_seeds(test, SEEDS, |seed| async move {
            let w = kubernetes_world().await;
            let cluster = w._cluster.clone().expect("the cluster");
            let out = scenario(w, seed).await;
            assert_eq!(cluster.refused(), Vec::<String>::new(), "requests deploy/rbac.yaml does not allow");
            out
        });
    }

    #[test]
    fn bind_and_install_with_a_restart() {
        under_seeds_on_kubernetes("kubernetes::bind_and_install_with_a_restart", |w, seed| {
            super::bind_and_install(w, seed, true)
        });
    }
    #[test]
    fn unbind_one_reclaims() {
        under_seeds_on_kubernetes("kubernetes::unbind_one_reclaims", |w, seed| super::unbind_one(w, seed, true));
    }
    #[test]
    fn delete_cluster_deployment() {
        under_seeds_on_kubernetes("kubernetes::delete_cluster_deployment", |w, seed| {
            super::delete_installed_cluster(w, seed, Deleted::ClusterDeployment, false, false)
        });
    }
    #[test]
    fn delete_install_only_with_a_restart() {
        under_seeds_on_kubernetes("kubernetes::delete_install_only_with_a_restart", |w, seed| {
            super::delete_installed_cluster(w, seed, Deleted::InstallOnly, true, false)
        });
    }
    #[test]
    fn delete_cluster_before_install() {
        under_seeds_on_kubernetes("kubernetes::delete_cluster_before_install", super::delete_cluster_before_install);
    }
    #[test]
    fn delete_infraenv_with_mixed_hosts() {
        under_seeds_on_kubernetes(
            "kubernetes::delete_infraenv_with_mixed_hosts",
            super::delete_infraenv_with_mixed_hosts,
        );
    }
}

/// The scenarios of `kubernetes` on a real kube-apiserver and etcd (the run's shared hub, a namespace
/// per seed), the controllers with deploy/rbac.yaml's ServiceAccount token, under fewer seeds still: each
/// seed's changes travel through etcd and real watches, whose timing is the real server's own.
mod real_hub {
    use super::*;

    const SEEDS: u64 = 4;

    /// Runs `scenario` on the real hub under the seeds; a request RBAC refused fails it.
    fn under_seeds_on_real_hub<F, Fut>(test: &str, scenario: F)
    where
        F: Fn(World<Gated<KubeStore>>, u64) -> Fut + Copy,
        Fut: std::future::Future<Output = BTreeMap<String, String>>,
    {
        under_seeds(test, SEEDS, |seed| async move {
            let w = real_hub_world(test).await;
            let usage = w.store.0.usage();
            let out = scenario(w, seed).await;
            assert_eq!(usage.refused(), (Vec::<String>::new(), 0), "requests deploy/rbac.yaml does not allow");
            out
        });
    }

    #[test]
    fn bind_and_install_with_a_restart() {
        under_seeds_on_real_hub("real_hub::bind_and_install_with_a_restart", |w, seed| {
            super::bind_and_install(w, seed, true)
        });
    }
    #[test]
    fn unbind_one_reclaims() {
        under_seeds_on_real_hub("real_hub::unbind_one_reclaims", |w, seed| super::unbind_one(w, seed, true));
    }
    #[test]
    fn delete_cluster_deployment() {
        under_seeds_on_real_hub("real_hub::delete_cluster_deployment", |w, seed| {
            super::delete_installed_cluster(w, seed, Deleted::ClusterDeployment, false, false)
        });
    }
    #[test]
    fn delete_install_only_with_a_restart() {
        under_seeds_on_real_hub("real_hub::delete_install_only_with_a_restart", |w, seed| {
            super::delete_installed_cluster(w, seed, Deleted::InstallOnly, true, false)
        });
    }
    #[test]
    fn delete_cluster_before_install() {
        under_seeds_on_real_hub("real_hub::delete_cluster_before_install", super::delete_cluster_before_install);
    }
    #[test]
    fn delete_infraenv_with_mixed_hosts() {
        under_seeds_on_real_hub("real_hub::delete_infraenv_with_mixed_hosts", super::delete_infraenv_with_mixed_hosts);
    }
}
