//! Controllers: reconcile functions over the [`Store`](crate::store::Store), and the small runtime that
//! runs them on changes (a de-duplicating work queue fed by the store's change feed, the catalog, and
//! requeue timers), in the manner of kube-rs's `Controller`.

pub mod agent;
pub mod agent_conditions;
pub mod cluster;
pub mod infraenv;
pub mod leader;
pub mod metal3;
pub mod spoke;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use tokio::sync::{Notify, broadcast};

use crate::image::Images;
use crate::pool::Backend;
use crate::resources::{InfraEnv, NMStateConfig};
use crate::store::{ChangeEvent, Store, resource_name};
use metal3::{bmac, ppi};

type Key = (String, String);

/// A controller's counters for `/metrics` (controller-runtime publishes the same): its queue depth,
/// how many reconciles it ran, and how long they took.
#[derive(Debug)]
pub struct ControllerStats {
    pub name: &'static str,
    queue: std::sync::Weak<WorkQueue>,
    pub reconciles: std::sync::atomic::AtomicU64,
    pub errors: std::sync::atomic::AtomicU64,
    pub reconcile_micros: std::sync::atomic::AtomicU64,
}

impl ControllerStats {
    /// Keys queued or being reconciled; none once the controller stopped.
    pub fn depth(&self) -> usize {
        self.queue.upgrade().map_or(0, |q| q.pending())
    }

    fn record(&self, took: Duration, ok: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.reconciles.fetch_add(1, Relaxed);
        self.reconcile_micros.fetch_add(took.as_micros() as u64, Relaxed);
        if !ok {
            self.errors.fetch_add(1, Relaxed);
        }
    }
}

/// Every controller started in this process.
static CONTROLLERS: std::sync::Mutex<Vec<Arc<ControllerStats>>> = std::sync::Mutex::new(Vec::new());

fn register_controller(name: &'static str, queue: &Arc<WorkQueue>) -> Arc<ControllerStats> {
    let stats = Arc::new(ControllerStats {
        name,
        queue: Arc::downgrade(queue),
        reconciles: Default::default(),
        errors: Default::default(),
        reconcile_micros: Default::default(),
    });
    let mut all = CONTROLLERS.lock().unwrap_or_else(|p| p.into_inner());
    // Controllers of stopped runs (tests start many) are forgotten.
    all.retain(|c| c.queue.strong_count() > 0);
    all.push(stats.clone());
    stats
}

/// The controllers running in this process.
pub fn controller_stats() -> Vec<Arc<ControllerStats>> {
    let all = CONTROLLERS.lock().unwrap_or_else(|p| p.into_inner());
    all.iter().filter(|c| c.queue.strong_count() > 0).cloned().collect()
}

/// Keys waiting to be reconciled, each at most once in the queue, and never reconciled by two
/// workers at once: a key pushed while a worker has it is queued again when that worker is done.
#[derive(Default)]
pub struct WorkQueue {
    inner: std::sync::Mutex<QueueState>,
    notify: Notify,
}

#[derive(Default)]
struct QueueState {
    queue: VecDeque<Key>,
    queued: BTreeSet<Key>,
    active: BTreeSet<Key>,
    dirty: BTreeSet<Key>,
}

impl WorkQueue {
    pub fn push(&self, key: Key) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.active.contains(&key) {
            g.dirty.insert(key);
        } else if g.queued.insert(key.clone()) {
            g.queue.push_back(key);
            self.notify.notify_one();
        }
    }
    async fn pop(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(k) = g.queue.pop_front() {
                    g.queued.remove(&k);
                    g.active.insert(k.clone());
                    if !g.queue.is_empty() {
                        self.notify.notify_one();
                    }
                    return k;
                }
            }
            notified.await;
        }
    }
    fn done(&self, key: &Key) {
        let requeue = {
            let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            g.active.remove(key);
            g.dirty.remove(key)
        };
        if requeue {
            self.push(key.clone());
        }
    }
    /// Keys queued or being reconciled (for tests and metrics).
    pub fn pending(&self) -> usize {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.queue.len() + g.active.len()
    }
}

/// Runs `workers` reconcile loops over `queue`.
pub async fn run_workers<F, Fut>(name: &'static str, queue: Arc<WorkQueue>, workers: usize, reconcile: F)
where
    F: Fn(Key) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<infraenv::Action, crate::store::StoreError>> + Send,
{
    let reconcile = Arc::new(reconcile);
    let stats = register_controller(name, &queue);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let queue = queue.clone();
        let reconcile = reconcile.clone();
        let stats = stats.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let key = queue.pop().await;
                let started = std::time::Instant::now();
                let result = reconcile(key.clone()).await;
                stats.record(started.elapsed(), result.is_ok());
                queue.done(&key);
                match result {
                    Ok(infraenv::Action::Done) => {}
                    Ok(infraenv::Action::RequeueAfter(d)) if d.is_zero() => queue.push(key),
                    Ok(infraenv::Action::RequeueAfter(d)) => requeue_later(&queue, key, d),
                    Err(e) => {
                        tracing::warn!(controller = name, namespace = %key.0, name = %key.1, "reconcile failed: {e}");
                        requeue_later(&queue, key, Duration::from_secs(10));
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Runs the InfraEnv controller until the task is dropped.
pub async fn run_infraenv_controller<S: Store>(images: Arc<Images<S>>) {
    run_infraenv_controller_with(images, None).await
}

/// The InfraEnv controller; with a backend, InfraEnv deletion follows the host teardown rule.
pub async fn run_infraenv_controller_with<S: Store>(images: Arc<Images<S>>, backend: Option<Arc<Backend>>) {
    let queue = Arc::new(WorkQueue::default());
    let mut events = images.store.subscribe();
    let mut catalog = images.catalog.subscribe();
    enqueue_all(&images, &queue).await;

    // Without a backend there are no hosts: a channel whose sender stays alive and never sends.
    let (_no_hosts, no_host_changes) = broadcast::channel(1);
    let mut host_changes = match &backend {
        Some(b) => b.subscribe(),
        None => no_host_changes,
    };
    let feeder = {
        let images = images.clone();
        let queue = queue.clone();
        async move {
            loop {
                tokio::select! {
                    change = host_changes.recv() => {
                        // A deleted InfraEnv waits for its hosts: look again when one changes.
                        if let Ok(c) = change
                            && let Ok(Some(ie)) = images.store.get_by_uid::<InfraEnv>(&c.infra_env_id).await
                            && ie.metadata.deletion_timestamp.is_some()
                        {
                            queue.push((ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default()));
                        }
                    }
                    ev = events.recv() => match ev {
                        Ok(ChangeEvent { resource, namespace, name, .. }) => {
                            for key in infraenvs_affected_by(&images, &resource, &namespace, &name).await {
                                queue.push(key);
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            fell_behind("infraenv", missed);
                            enqueue_all(&images, &queue).await
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    changed = catalog.changed() => {
                        if changed.is_err() { return; }
                        enqueue_all(&images, &queue).await;
                    }
                }
            }
        }
    };
    let stats = register_controller("infraenv", &queue);
    let worker = async {
        loop {
            let (ns, name) = queue.pop().await;
            let started = std::time::Instant::now();
            let result = infraenv::reconcile_with(&images, backend.as_deref(), &ns, &name).await;
            stats.record(started.elapsed(), result.is_ok());
            queue.done(&(ns.clone(), name.clone()));
            match result {
                Ok(infraenv::Action::Done) => {}
                Ok(infraenv::Action::RequeueAfter(d)) => requeue_later(&queue, (ns, name), d),
                Err(e) => {
                    tracing::warn!(namespace = %ns, name = %name, "reconcile failed: {e}");
                    requeue_later(&queue, (ns, name), Duration::from_secs(10));
                }
            }
        }
    };
    tokio::join!(feeder, worker);
}

/// Times a controller's change feed fell behind and the controller re-listed everything (`/metrics`).
pub static FEED_RESYNCS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A change feed dropped `missed` events: the controller re-lists its objects, which at fleet scale
/// is a burst of work worth knowing about.
fn fell_behind(feed: &str, missed: u64) {
    FEED_RESYNCS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::warn!(feed, missed, "change feed fell behind; re-listing every object");
}

fn requeue_later(queue: &Arc<WorkQueue>, key: Key, after: Duration) {
    let queue = queue.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        queue.push(key);
    });
}

async fn enqueue_all<S: Store>(images: &Images<S>, queue: &WorkQueue) {
    match images.store.list::<InfraEnv>(None).await {
        Ok(all) => {
            for ie in all {
                queue.push((ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default()));
            }
        }
        Err(e) => tracing::warn!("listing InfraEnvs: {e}"),
    }
}

/// The InfraEnvs whose image a change to `resource` `namespace/name` may change: the InfraEnv itself,
/// those using a Secret as pull secret, those with the ironic agent when the image-customization secret
/// changes, and for an NMStateConfig those of its namespace whose selector matches it now or whose
/// image was built with it (a relabelled or deleted config leaves those).
pub async fn infraenvs_affected_by<S: Store>(
    images: &Images<S>,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Vec<Key> {
    let store = &images.store;
    if resource == resource_name::<InfraEnv>() {
        return vec![(namespace.to_string(), name.to_string())];
    }
    let key = |ie: InfraEnv| (ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default());
    let mut keys = Vec::new();
    if resource == resource_name::<Secret>()
        && namespace == crate::content::ironic::ICC_SECRET_NAMESPACE
        && name == crate::content::ironic::ICC_SECRET_NAME
    {
        // The ironic configuration concerns every InfraEnv with the ironic agent, in any namespace.
        let all = store.list::<InfraEnv>(None).await.unwrap_or_default();
        keys.extend(all.into_iter().filter(crate::content::ironic::enabled).map(key));
    }
    if resource == resource_name::<NMStateConfig>() {
        // Not every selecting InfraEnv of the namespace: adding a cluster's hosts to a namespace of
        // hundreds of InfraEnvs would have rechecked them all at every host. Those the config is
        // selected by now, and those whose image has it (a relabelled or deleted config leaves them).
        let config = store.get::<NMStateConfig>(namespace, name).await;
        if let Err(e) = &config {
            tracing::warn!("reading NMStateConfig {namespace}/{name}: {e}");
        }
        let built_with: HashSet<String> =
            images.infraenvs_built_with(namespace, name).into_iter().map(|(_, n)| n).collect();
        let no_labels = BTreeMap::new();
        let concerned = |ie: &InfraEnv| {
            let Some(selector) = ie.spec.nm_state_config_label_selector.as_ref().filter(|s| !s.is_empty()) else {
                return false;
            };
            match &config {
                Ok(Some(c)) => selector.matches(c.metadata.labels.as_ref().unwrap_or(&no_labels)),
                Ok(None) => false,
                // Not known: every selecting InfraEnv, to be safe.
                Err(_) => true,
            }
        };
        // Looked at in place: a namespace may hold thousands of InfraEnvs, and hosts' NMStateConfigs
        // come by the hundred.
        let affected = store
            .list_map(Some(namespace), |ie: &InfraEnv| {
                let built = ie.metadata.name.as_ref().is_some_and(|n| built_with.contains(n));
                (built || concerned(ie)).then(|| key_of(&ie.metadata))
            })
            .await;
        match affected {
            Ok(affected) => keys.extend(affected.into_iter().flatten()),
            Err(e) => tracing::warn!("listing InfraEnvs of {namespace}: {e}"),
        }
    } else if resource == resource_name::<Secret>() {
        match store.list::<InfraEnv>(Some(namespace)).await {
            Ok(list) => keys.extend(list.into_iter().filter(|ie| ie.spec.pull_secret_ref.name == name).map(key)),
            Err(e) => tracing::warn!("listing InfraEnvs of {namespace}: {e}"),
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// Everything the agent and cluster controllers work with.
pub struct Hub<S: Store> {
    pub agents: agent::AgentContext<S>,
    pub clusters: cluster::ClusterContext<S>,
}

/// Runs the agent and cluster controllers and the host monitor until the task is dropped.
pub async fn run_host_controllers<S: Store>(hub: Arc<Hub<S>>, agent_workers: usize, monitor_every: Duration) {
    let agent_queue = Arc::new(WorkQueue::default());
    let cluster_queue = Arc::new(WorkQueue::default());
    let store = hub.agents.store.clone();
    let backend = hub.agents.backend.clone();

    // Everything once at start: the state may have changed while we were not running.
    for a in store.list::<crate::resources::Agent>(None).await.unwrap_or_default() {
        agent_queue.push(key_of(&a.metadata));
    }
    for cd in store.list::<crate::resources::ClusterDeployment>(None).await.unwrap_or_default() {
        cluster_queue.push(key_of(&cd.metadata));
    }

    let store_feeder = {
        let (store, hub, aq, cq) = (store.clone(), hub.clone(), agent_queue.clone(), cluster_queue.clone());
        let mut events = store.subscribe();
        async move {
            loop {
                match events.recv().await {
                    Ok(ev) => route_store_event(&store, &hub.agents.own_writes, &aq, &cq, ev).await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        fell_behind("store changes", missed);
                        for a in store.list::<crate::resources::Agent>(None).await.unwrap_or_default() {
                            aq.push(key_of(&a.metadata));
                        }
                        for cd in store.list::<crate::resources::ClusterDeployment>(None).await.unwrap_or_default() {
                            cq.push(key_of(&cd.metadata));
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    };
    let host_feeder = {
        let (store, backend, aq, cq) = (store.clone(), backend.clone(), agent_queue.clone(), cluster_queue.clone());
        let mut changes = backend.subscribe();
        async move {
            let mut namespaces: std::collections::HashMap<String, String> = Default::default();
            loop {
                let change = match changes.recv().await {
                    Ok(c) => c,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        fell_behind("host changes", missed);
                        for a in store.list::<crate::resources::Agent>(None).await.unwrap_or_default() {
                            aq.push(key_of(&a.metadata));
                        }
                        for cd in store.list::<crate::resources::ClusterDeployment>(None).await.unwrap_or_default() {
                            cq.push(key_of(&cd.metadata));
                        }
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                // Records written before namespaces were kept (until the start fills them in) are
                // found through their InfraEnv.
                let ns = match namespaces.get(&change.infra_env_id) {
                    _ if !change.namespace.is_empty() => change.namespace.clone(),
                    Some(ns) => ns.clone(),
                    None => match store.get_by_uid::<crate::resources::InfraEnv>(&change.infra_env_id).await {
                        Ok(Some(ie)) => {
                            let ns = ie.metadata.namespace.unwrap_or_default();
                            namespaces.insert(change.infra_env_id.clone(), ns.clone());
                            ns
                        }
                        _ => continue,
                    },
                };
                aq.push((ns, change.host_id.clone()));
                if let Some(cid) = &change.cluster_id
                    && let Some(c) = backend.cluster(cid).await
                {
                    cq.push((c.namespace, c.name));
                }
            }
        }
    };
    let monitor = {
        let backend = backend.clone();
        async move {
            loop {
                tokio::time::sleep(monitor_every).await;
                let changed = backend.refresh_all().await;
                if changed > 0 {
                    tracing::debug!(changed, "host monitor");
                }
            }
        }
    };
    let agents = {
        let hub = hub.clone();
        run_workers("agent", agent_queue.clone(), agent_workers, move |(ns, name)| {
            let hub = hub.clone();
            async move { agent::reconcile(&hub.agents, &ns, &name).await }
        })
    };
    let clusters = {
        let hub = hub.clone();
        run_workers("clusterdeployment", cluster_queue.clone(), 1, move |(ns, name)| {
            let hub = hub.clone();
            async move { cluster::reconcile(&hub.clusters, &ns, &name).await }
        })
    };
    tokio::join!(store_feeder, host_feeder, monitor, agents, clusters);
}

/// The metal3 controllers: the Bare Metal Agent Controller over BareMetalHosts and the
/// PreprovisioningImage controller (the latter in the converged flow only, as upstream registers it).
pub async fn run_metal3_controllers<S: Store>(bmac: Arc<bmac::BmacContext<S>>, ppi: Arc<ppi::PpiContext<S>>) {
    use crate::resources::{BareMetalHost, PreprovisioningImage};
    let bmh_queue = Arc::new(WorkQueue::default());
    let ppi_queue = Arc::new(WorkQueue::default());
    let converged = bmac.converged;
    let store = bmac.store.clone();
    let enqueue_all = {
        let (store, bq, pq) = (store.clone(), bmh_queue.clone(), ppi_queue.clone());
        move || {
            let (store, bq, pq) = (store.clone(), bq.clone(), pq.clone());
            async move {
                for b in store.list::<BareMetalHost>(None).await.unwrap_or_default() {
                    bq.push(key_of(&b.metadata));
                }
                if converged {
                    for p in store.list::<PreprovisioningImage>(None).await.unwrap_or_default() {
                        pq.push(key_of(&p.metadata));
                    }
                }
            }
        }
    };
    enqueue_all().await;
    let feeder = {
        let (store, bq, pq) = (store.clone(), bmh_queue.clone(), ppi_queue.clone());
        let mut events = store.subscribe();
        async move {
            loop {
                match events.recv().await {
                    Ok(ev) => route_metal3_event(&store, &bq, converged.then_some(&*pq), ev).await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        fell_behind("metal3", missed);
                        enqueue_all().await
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    };
    let bmhs = run_workers("baremetalhost", bmh_queue.clone(), 1, move |(ns, name)| {
        let bmac = bmac.clone();
        async move { bmac::reconcile(&bmac, &ns, &name).await }
    });
    let ppis = run_workers("preprovisioningimage", ppi_queue.clone(), 1, move |(ns, name)| {
        let ppi = ppi.clone();
        async move { ppi::reconcile(&ppi, &ns, &name).await }
    });
    tokio::join!(feeder, bmhs, ppis);
}

/// Which BareMetalHost and PreprovisioningImage keys a store change concerns (§5.1, §6 watches).
async fn route_metal3_event<S: Store>(store: &S, bmhs: &WorkQueue, ppis: Option<&WorkQueue>, ev: ChangeEvent) {
    use crate::resources::{Agent, BareMetalHost, PreprovisioningImage};
    let ChangeEvent { resource, namespace, name, .. } = ev;
    if resource == resource_name::<BareMetalHost>() {
        bmhs.push((namespace.clone(), name.clone()));
        // A PPI's reboot request and deletion depend on its BMH.
        if let Some(ppis) = ppis {
            ppis.push((namespace, name));
        }
    } else if resource == resource_name::<Agent>() {
        // Agents change all the time in a large pool; most namespaces have no BMH to tell.
        if !store.any::<BareMetalHost>(Some(&namespace)).await.unwrap_or(true) {
            return;
        }
        let Ok(Some(agent)) = store.get::<Agent>(&namespace, &name).await else { return };
        for bmh in bmac::bmhs_for_agent(store, &agent).await.unwrap_or_default() {
            bmhs.push((namespace.clone(), bmh));
        }
    } else if resource == resource_name::<InfraEnv>() {
        for bmh in bmac::bmhs_for_infraenv(store, &namespace, &name).await.unwrap_or_default() {
            bmhs.push((namespace.clone(), bmh));
        }
        if let Some(ppis) = ppis {
            for p in store.list::<PreprovisioningImage>(Some(&namespace)).await.unwrap_or_default() {
                if p.metadata.labels.as_ref().and_then(|l| l.get(crate::resources::INFRAENV_NAME_LABEL)) == Some(&name)
                {
                    ppis.push(key_of(&p.metadata));
                }
            }
        }
    } else if resource == resource_name::<PreprovisioningImage>() {
        // The BMAC waits for the PPI of the same name in the converged flow.
        bmhs.push((namespace.clone(), name.clone()));
        if let Some(ppis) = ppis {
            ppis.push((namespace, name));
        }
    }
}

fn key_of(meta: &crate::resources::ObjectMeta) -> Key {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// Which Agent and ClusterDeployment keys a store change concerns.
async fn route_store_event<S: Store>(
    store: &S,
    own_writes: &agent::OwnWrites,
    agents: &WorkQueue,
    clusters: &WorkQueue,
    ev: ChangeEvent,
) {
    let ChangeEvent { resource, namespace, name, status_only, resource_version } = ev;
    if resource == resource_name::<crate::resources::Agent>() {
        // The agent controller writes the status itself, and needs no event for what it wrote; the
        // cluster controller hears of agents through their hosts (binding, approval, progress), not
        // through Agent events.
        if !status_only && !own_writes.is_echo(&namespace, &name, resource_version.as_deref()) {
            agents.push((namespace, name));
        }
    } else if resource == resource_name::<crate::resources::ClusterDeployment>() {
        clusters.push((namespace, name));
    } else if resource == resource_name::<crate::resources::AgentClusterInstall>() {
        match store.get::<crate::resources::AgentClusterInstall>(&namespace, &name).await {
            Ok(Some(aci)) => clusters.push((namespace, aci.spec.cluster_deployment_ref.name)),
            // Gone: its ClusterDeployment may be waiting for that.
            _ => {
                for cd in store.list::<crate::resources::ClusterDeployment>(Some(&namespace)).await.unwrap_or_default()
                {
                    if cd.cluster_install_name().as_deref() == Some(name.as_str()) {
                        clusters.push(key_of(&cd.metadata));
                    }
                }
            }
        }
    } else if resource == resource_name::<Secret>() {
        // Agents read their ignition endpoint token from a Secret (§2.4 watches).
        let mention = format!("\"{name}\"");
        for a in store.list_mentioning::<crate::resources::Agent>(None, &mention).await.unwrap_or_default() {
            if a.spec
                .ignition_endpoint_token_reference
                .as_ref()
                .is_some_and(|r| r.namespace == namespace && r.name == name)
            {
                agents.push(key_of(&a.metadata));
            }
        }
    } else if resource == resource_name::<crate::resources::InfraEnv>() && !status_only {
        // Agents copy InfraEnv settings (auto-approval, labels).
        let mention = format!("\"{name}\"");
        for a in store.list_mentioning::<crate::resources::Agent>(Some(&namespace), &mention).await.unwrap_or_default()
        {
            if a.metadata.labels.as_ref().and_then(|l| l.get(crate::resources::INFRAENV_NAME_LABEL)) == Some(&name) {
                agents.push(key_of(&a.metadata));
            }
        }
    }
}
