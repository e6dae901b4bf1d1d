//! Controllers: reconcile functions over the [`Store`](crate::store::Store), run by the [`runtime`] on
//! changes: each controller's work queue is fed here, from the store's change feed, the catalog and the
//! host records, by mapping each change to the keys it concerns; what each controller watches in the
//! store, and how a change maps to its keys, is declared in `triggers.rs`.
//!
//! The runtime and the rules the controllers keep (binding, unbinding, deletion, reclaim): docs/design.md §5 and
//! §7.4.

pub mod agent;
pub mod agent_conditions;
pub mod cluster;
pub mod cluster_conditions;
pub mod events_url;
pub mod infraenv;
pub mod leader;
pub mod metal3;
pub mod runtime;
pub mod spoke;
#[cfg(test)]
mod tests;
pub(crate) mod triggers;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use tokio::sync::broadcast;

use crate::errors::chain;
use crate::image::Images;
use crate::keylocks::Locked as _;
use crate::pool::Backend;
use crate::resources::references::{self, Ref};
use crate::resources::{InfraEnv, NMStateConfig};
use crate::store::{ChangeEvent, Store, resource_name};
use metal3::{bmac, ppi};
use runtime::{ControllerMetrics, Key, WorkQueue};

/// Runs the InfraEnv controller over `queue` until the task is dropped; with a backend, InfraEnv
/// deletion follows the host teardown rule. `queue` is the caller's, so that others (the resource
/// API) may queue InfraEnvs and wait for their reconcile.
pub async fn run_infraenv_controller_with<S: Store>(
    images: Arc<Images<S>>,
    backend: Option<Arc<Backend>>,
    queue: Arc<WorkQueue>,
    metrics: Arc<ControllerMetrics>,
) {
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
        let metrics = metrics.clone();
        let retrying = Retrying::default();
        let retrying_events = Retrying::default();
        async move {
            loop {
                tokio::select! {
                    change = host_changes.recv() => {
                        if let Ok(c) = change {
                            on_host_change(&images.store, &queue, &retrying, c.infra_env_id).await;
                        }
                    }
                    ev = events.recv() => match ev {
                        Ok(ChangeEvent { resource, namespace, name, .. }) => {
                            match infraenvs_affected_by(&images, &resource, &namespace, &name).await {
                                Ok(keys) => keys.into_iter().for_each(|k| queue.push(k)),
                                Err(e) => {
                                    // Not "no InfraEnvs": routed again later (the event, as the
                                    // other controllers' triggers do; see `triggers`).
                                    tracing::warn!("routing the change of {resource} {namespace}/{name} to InfraEnvs: {}", chain(&e));
                                    retry_infraenv_event(images.clone(), queue.clone(), retrying_events.clone(), resource, namespace, name);
                                }
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            metrics.fell_behind("infraenv", missed);
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
    let reconciler = Arc::new(infraenv::InfraEnvReconciler { images, backend });
    tokio::join!(feeder, runtime::run("infraenv", queue, reconciler, INFRAENV_WORKERS, &metrics));
}

/// InfraEnvs reconciled at once: the resource API waits for the reconcile of each InfraEnv it writes
/// (its requests are side by side), and should not wait for one of a burst (hundreds of InfraEnvs
/// after a pull secret changed) to finish before its own starts.
const INFRAENV_WORKERS: usize = 4;

async fn enqueue_all<S: Store>(images: &Images<S>, queue: &WorkQueue) {
    enqueue_every::<S, InfraEnv>(&images.store, queue).await
}

/// A deleted InfraEnv waits for its hosts: when one of them changes, the InfraEnv (by its uid) is
/// queued if it is being deleted. A failed lookup is not "no InfraEnv": it is logged with its cause
/// and looked up again later ([`retry_host_change`]).
async fn on_host_change<S: Store>(store: &S, queue: &Arc<WorkQueue>, retrying: &Retrying, infra_env_id: String) {
    if let Err(e) = queue_if_deleted(store, queue, &infra_env_id).await {
        tracing::warn!("reading the InfraEnv {infra_env_id} of a host that changed: {}", chain(&e));
        retry_host_change(store.clone(), queue.clone(), retrying.clone(), infra_env_id);
    }
}

/// What a retry is pending for (InfraEnv uids for [`retry_host_change`], `resource/ns/name` for
/// [`retry_infraenv_event`]): one pending retry each, so the retries in flight are bounded by the
/// objects concerned, not by the events that arrive while the store fails. A retry clears its mark
/// before each lookup and sets it again only if that fails and no other retry has taken it
/// meanwhile: a failure after the last lookup always has a retry of its own.
type Retrying = Arc<std::sync::Mutex<HashSet<String>>>;

/// Queues the InfraEnv with uid `infra_env_id` if it is being deleted.
async fn queue_if_deleted<S: Store>(
    store: &S,
    queue: &WorkQueue,
    infra_env_id: &str,
) -> Result<(), crate::store::StoreError> {
    if let Some(ie) = store.get_by_uid::<InfraEnv>(infra_env_id).await?
        && ie.metadata.deletion_timestamp.is_some()
    {
        queue.push(key_of(&ie.metadata));
    }
    Ok(())
}

/// [`queue_if_deleted`] again after a delay (doubling up to a minute) until it succeeds. One retry
/// at a time per InfraEnv: it reads the InfraEnv when it runs, so it serves the host changes that
/// come meanwhile, and the retries in flight are bounded by the InfraEnvs, not by the host changes.
fn retry_host_change<S: Store>(store: S, queue: Arc<WorkQueue>, retrying: Retrying, infra_env_id: String) {
    retry_marked(retrying, infra_env_id.clone(), move || {
        let (store, queue, infra_env_id) = (store.clone(), queue.clone(), infra_env_id.clone());
        async move {
            match queue_if_deleted(&store, &queue, &infra_env_id).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("reading the InfraEnv {infra_env_id} of a host that changed: {}", chain(&e));
                    false
                }
            }
        }
    });
}

/// [`infraenvs_affected_by`] again after a delay (doubling up to a minute) until it succeeds, one
/// pending retry per changed object ([`Retrying`]).
fn retry_infraenv_event<S: Store>(
    images: Arc<Images<S>>,
    queue: Arc<WorkQueue>,
    retrying: Retrying,
    resource: String,
    namespace: String,
    name: String,
) {
    let mark = format!("{resource}/{namespace}/{name}");
    retry_marked(retrying, mark, move || {
        let (images, queue) = (images.clone(), queue.clone());
        let (resource, namespace, name) = (resource.clone(), namespace.clone(), name.clone());
        async move {
            match infraenvs_affected_by(&images, &resource, &namespace, &name).await {
                Ok(keys) => {
                    keys.into_iter().for_each(|k| queue.push(k));
                    true
                }
                Err(e) => {
                    tracing::warn!("routing the change of {resource} {namespace}/{name} to InfraEnvs: {}", chain(&e));
                    false
                }
            }
        }
    });
}

/// Runs `attempt` after a delay that doubles up to a minute until it answers true, unless a retry
/// marked `mark` is pending already ([`Retrying`]: the mark is cleared before each attempt and set
/// again after a failure only if no other retry took it meanwhile).
fn retry_marked<F, Fut>(retrying: Retrying, mark: String, mut attempt: F)
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    if !retrying.locked().insert(mark.clone()) {
        return;
    }
    tokio::spawn(async move {
        let mut delay = Duration::from_secs(1);
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(60));
            retrying.locked().remove(&mark);
            if attempt().await || !retrying.locked().insert(mark.clone()) {
                return;
            }
        }
    });
}

/// The InfraEnvs whose image a change to `resource` `namespace/name` may change: the InfraEnv itself,
/// those using a Secret as pull secret, those with the ironic agent when the image-customization secret
/// changes, and for an NMStateConfig those of its namespace whose selector matches it now or whose
/// image was built with it (a relabelled or deleted config leaves those). A failed lookup is an
/// error, never "none".
pub async fn infraenvs_affected_by<S: Store>(
    images: &Images<S>,
    resource: &str,
    namespace: &str,
    name: &str,
) -> Result<Vec<Key>, crate::store::StoreError> {
    let store = &images.store;
    if resource == resource_name::<InfraEnv>() {
        return Ok(vec![(namespace.to_string(), name.to_string())]);
    }
    let key = |ie: InfraEnv| (ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default());
    let mut keys = Vec::new();
    if resource == resource_name::<Secret>()
        && namespace == crate::content::ironic::ICC_SECRET_NAMESPACE
        && name == crate::content::ironic::ICC_SECRET_NAME
    {
        // The ironic configuration concerns every InfraEnv with the ironic agent, in any namespace:
        // those, by the index, not every InfraEnv of the hub.
        let enabled = store.list_referencing::<InfraEnv>(None, Ref::InfraEnvIronicAgent, references::IRONIC_AGENT);
        keys.extend(enabled.await?.into_iter().map(key));
    }
    if resource == resource_name::<NMStateConfig>() {
        // Not every selecting InfraEnv of the namespace: adding a cluster's hosts to a namespace of
        // hundreds of InfraEnvs would have rechecked them all at every host. Those the config is
        // selected by now, found by the index under its labels (or selecting by expressions only)
        // and checked against their whole selector, and those whose image has it (a relabelled or
        // deleted config leaves them). A config that cannot be read is an error (retried), not
        // "selected by none".
        if let Some(config) = store.get::<NMStateConfig>(namespace, name).await? {
            let no_labels = BTreeMap::new();
            let labels = config.metadata.labels.as_ref().unwrap_or(&no_labels);
            for value in references::nmstate_selector_lookups(labels) {
                let candidates =
                    store.list_referencing::<InfraEnv>(Some(namespace), Ref::InfraEnvNmStateSelector, &value).await?;
                let selected = candidates.into_iter().filter(|ie| {
                    let selector = ie.spec.nm_state_config_label_selector.as_ref().filter(|s| !s.is_empty());
                    selector.is_some_and(|s| s.matches(labels))
                });
                keys.extend(selected.map(key));
            }
        }
        keys.extend(images.infraenvs_built_with(namespace, name));
    } else if resource == resource_name::<Secret>() {
        // The InfraEnvs using it as pull secret, by the reference index.
        let using = store.list_referencing::<InfraEnv>(Some(namespace), Ref::InfraEnvPullSecret, name).await?;
        keys.extend(using.into_iter().map(key));
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// Everything the agent and cluster controllers work with.
pub struct Hub<S: Store> {
    pub agents: agent::AgentContext<S>,
    pub clusters: cluster::ClusterContext<S>,
}

/// The agent controller's reconciler: over the hub, which the feeders share.
struct Agents<S: Store>(Arc<Hub<S>>);

impl<S: Store> runtime::Reconciler for Agents<S> {
    type Error = crate::store::StoreError;
    async fn reconcile(&self, key: &Key) -> Result<runtime::Action, Self::Error> {
        agent::reconcile(&self.0.agents, &key.0, &key.1).await
    }
}

/// The ClusterDeployment controller's reconciler.
struct Clusters<S: Store>(Arc<Hub<S>>);

impl<S: Store> runtime::Reconciler for Clusters<S> {
    type Error = crate::store::StoreError;
    async fn reconcile(&self, key: &Key) -> Result<runtime::Action, Self::Error> {
        cluster::reconcile(&self.0.clusters, &key.0, &key.1).await
    }
}

/// Runs the agent and cluster controllers and the host monitor until the task is dropped.
pub async fn run_host_controllers<S: Store>(
    hub: Arc<Hub<S>>,
    agent_workers: usize,
    monitor_every: Duration,
    metrics: Arc<ControllerMetrics>,
) {
    let agent_queue = Arc::new(WorkQueue::default());
    let cluster_queue = Arc::new(WorkQueue::default());
    let store = hub.agents.store.clone();
    let backend = hub.agents.backend.clone();

    // Everything once at start: the state may have changed while we were not running.
    enqueue_every::<S, crate::resources::Agent>(&store, &agent_queue).await;
    enqueue_every::<S, crate::resources::ClusterDeployment>(&store, &cluster_queue).await;

    let store_feeder = {
        let (store, hub) = (store.clone(), hub.clone());
        let queues = triggers::Queues {
            agents: Some(agent_queue.clone()),
            clusters: Some(cluster_queue.clone()),
            ..Default::default()
        };
        let metrics = metrics.clone();
        let mut events = store.subscribe();
        async move {
            loop {
                match events.recv().await {
                    Ok(ev) => {
                        let failed = route_store_event(&store, &hub.agents.own_writes, &queues, &ev).await;
                        triggers::retry_later(store.clone(), queues.clone(), ev, failed);
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.fell_behind("store changes", missed);
                        enqueue_every::<S, crate::resources::Agent>(&store, queues.agents.as_ref().unwrap()).await;
                        enqueue_every::<S, crate::resources::ClusterDeployment>(
                            &store,
                            queues.clusters.as_ref().unwrap(),
                        )
                        .await;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    };
    let host_feeder = {
        let (store, backend, aq, cq) = (store.clone(), backend.clone(), agent_queue.clone(), cluster_queue.clone());
        let metrics = metrics.clone();
        let mut changes = backend.subscribe();
        async move {
            let mut namespaces = std::collections::HashMap::new();
            loop {
                let change = match changes.recv().await {
                    Ok(c) => c,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.fell_behind("host changes", missed);
                        enqueue_every::<S, crate::resources::Agent>(&store, &aq).await;
                        enqueue_every::<S, crate::resources::ClusterDeployment>(&store, &cq).await;
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                route_host_change(&store, &backend, &mut namespaces, &aq, &cq, change).await;
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
    let agents = runtime::run("agent", agent_queue, Arc::new(Agents(hub.clone())), agent_workers, &metrics);
    let clusters = runtime::run("clusterdeployment", cluster_queue, Arc::new(Clusters(hub)), 1, &metrics);
    tokio::join!(store_feeder, host_feeder, monitor, agents, clusters);
}

/// Which Agent and ClusterDeployment keys a host change concerns: the host's Agent, and its cluster's.
/// `namespaces` remembers the namespace of InfraEnvs looked up for records that have none.
async fn route_host_change<S: Store>(
    store: &S,
    backend: &Backend,
    namespaces: &mut std::collections::HashMap<String, String>,
    agents: &WorkQueue,
    clusters: &WorkQueue,
    change: crate::pool::HostChange,
) {
    // Records written before namespaces were kept (until the start fills them in) are found through
    // their InfraEnv.
    let ns = match namespaces.get(&change.infra_env_id) {
        _ if !change.namespace.is_empty() => change.namespace.clone(),
        Some(ns) => ns.clone(),
        None => match store.get_by_uid::<crate::resources::InfraEnv>(&change.infra_env_id).await {
            Ok(Some(ie)) => {
                let ns = ie.metadata.namespace.unwrap_or_default();
                namespaces.insert(change.infra_env_id.clone(), ns.clone());
                ns
            }
            // The InfraEnv is gone: its records go with it.
            Ok(None) => return,
            // Not routed (left to the next change of the host, or the next start); said, not hidden.
            Err(e) => {
                tracing::warn!("host {}: reading its InfraEnv {}: {}", change.host_id, change.infra_env_id, chain(&e));
                return;
            }
        },
    };
    agents.push((ns, change.host_id.clone()));
    if let Some(cid) = &change.cluster_id
        && let Some(c) = backend.cluster(cid).await
    {
        clusters.push((c.namespace, c.name));
    }
}

/// The metal3 controllers: the Bare Metal Agent Controller over BareMetalHosts and the
/// PreprovisioningImage controller (the latter in the converged flow only, as upstream registers it).
pub async fn run_metal3_controllers<S: Store>(
    bmac: Arc<bmac::BmacContext<S>>,
    ppi: Arc<ppi::PpiContext<S>>,
    metrics: Arc<ControllerMetrics>,
) {
    use crate::resources::{BareMetalHost, PreprovisioningImage};
    let bmh_queue = Arc::new(WorkQueue::default());
    let ppi_queue = Arc::new(WorkQueue::default());
    let converged = bmac.converged;
    let store = bmac.store.clone();
    let queues = triggers::Queues {
        bmhs: Some(bmh_queue.clone()),
        ppis: converged.then(|| ppi_queue.clone()),
        ..Default::default()
    };
    let enqueue_all = {
        let (store, bq, pq) = (store.clone(), bmh_queue.clone(), ppi_queue.clone());
        move || {
            let (store, bq, pq) = (store.clone(), bq.clone(), pq.clone());
            async move {
                enqueue_every::<S, BareMetalHost>(&store, &bq).await;
                if converged {
                    enqueue_every::<S, PreprovisioningImage>(&store, &pq).await;
                }
            }
        }
    };
    enqueue_all().await;
    let feeder = {
        let store = store.clone();
        let metrics = metrics.clone();
        let mut events = store.subscribe();
        async move {
            loop {
                match events.recv().await {
                    Ok(ev) => {
                        let failed = triggers::route(&store, None, triggers::METAL3_TRIGGERS, &queues, &ev).await;
                        triggers::retry_later(store.clone(), queues.clone(), ev, failed);
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        metrics.fell_behind("metal3", missed);
                        enqueue_all().await
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    };
    let bmhs = runtime::run("baremetalhost", bmh_queue, bmac, 1, &metrics);
    let ppis = runtime::run("preprovisioningimage", ppi_queue, ppi, 1, &metrics);
    tokio::join!(feeder, bmhs, ppis);
}

/// spec-controllers.md §2.4, §4: a Secret an InfraEnv or an Agent refers to is labelled for backup,
/// and with [`crate::resources::WATCH_LABEL`], which puts it in the watch of a controller running
/// against a cluster (a change to it then reaches the controller; an unlabelled one is read with a
/// GET each time). A no-op once both are there; a conflict is left to the next reconcile.
pub(crate) async fn label_followed_secret<S: Store>(
    store: &S,
    secret: &Secret,
) -> Result<(), crate::store::StoreError> {
    use crate::resources::{WATCH_LABEL, metal3::BACKUP_LABEL};
    let labels = secret.metadata.labels.as_ref();
    let has = |key: &str| labels.and_then(|l| l.get(key)).is_some_and(|v| v == "true");
    if has(WATCH_LABEL) && has(BACKUP_LABEL) {
        return Ok(());
    }
    let mut labelled = secret.clone();
    let labels = labelled.metadata.labels.get_or_insert_default();
    labels.insert(WATCH_LABEL.to_string(), "true".to_string());
    labels.insert(BACKUP_LABEL.to_string(), "true".to_string());
    match store.update(&labelled).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

fn key_of(meta: &crate::resources::ObjectMeta) -> Key {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

/// Queues the Agent and ClusterDeployment keys a store change concerns ([`triggers::HOST_TRIGGERS`]);
/// returns the triggers whose lookup failed, to route again ([`triggers::retry_later`]).
async fn route_store_event<S: Store>(
    store: &S,
    own_writes: &agent::OwnWrites,
    queues: &triggers::Queues,
    ev: &ChangeEvent,
) -> Vec<&'static triggers::Trigger> {
    triggers::route(store, Some(own_writes), triggers::HOST_TRIGGERS, queues, ev).await
}

/// Queues every K object, listing again (after a delay that doubles up to a minute, each failure
/// logged) until the list succeeds: a failed list is not "no objects".
async fn enqueue_every<S: Store, K: crate::store::Object>(store: &S, queue: &WorkQueue) {
    let mut delay = Duration::from_secs(1);
    loop {
        match store.list_map::<K, Key>(None, |o| key_of(o.meta())).await {
            Ok(keys) => return keys.into_iter().for_each(|k| queue.push(k)),
            Err(e) => {
                tracing::warn!("listing {} (again in {delay:?}): {}", resource_name::<K>(), chain(&e));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}
