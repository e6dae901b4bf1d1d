//! The inventory backend: host and cluster records of the agent API (what assisted-service keeps in
//! its database), and the operations on them that the agent API and the controllers call
//! (assisted's `bminventory` internal API): register, check in, inventory, progress, bind, unbind,
//! reclaim, refresh.
//!
//! Records live in memory, each host behind its own lock so that two requests about one host are
//! applied in order, and every change is written to SQLite (one transaction) before it is visible or
//! announced. Controllers learn about changes from [`Backend::subscribe`]. Only `checked_in_at` is kept
//! in memory between changes: losing it in a crash costs at most a refresh that sees an agent as
//! disconnected until it checks in again.

pub mod clock;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::hosts::machine::{self, Context, Event};
use crate::hosts::{Host, HostKind, HostStatus};
use crate::store::StoreError;
use crate::store::sqlite::SqliteStore;
pub use clock::{Clock, ManualClock, SystemClock};

const HOSTS: &str = "hosts";
const CLUSTERS: &str = "clusters";

/// An error of the internal API, with the HTTP status assisted-service answers it with.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }
    pub fn is_client_error(&self) -> bool {
        (400..500).contains(&self.status)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::new(500, e.to_string())
    }
}

/// A cluster record: what assisted creates for an AgentClusterInstall + ClusterDeployment pair.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Cluster {
    pub id: String,
    /// ClusterDeployment key (kube_key_namespace / kube_key_name in assisted).
    pub namespace: String,
    pub name: String,
    pub aci_name: String,
    pub openshift_version: String,
    pub cpu_architecture: String,
    /// `Cluster` (day 1) or `AddHostsCluster` (day 2: the ClusterDeployment is installed).
    pub kind: String,
    pub status: String,
    pub status_info: String,
    pub status_updated_at: Timestamp,
    pub install_started_at: Option<Timestamp>,
    pub install_completed_at: Option<Timestamp>,
}

impl Cluster {
    pub fn is_day2(&self) -> bool {
        self.kind == "AddHostsCluster"
    }
}

/// What changed, for the controllers: the host and where its Agent lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostChange {
    pub host_id: String,
    pub infra_env_id: String,
    /// The cluster the host is bound to after the change.
    pub cluster_id: Option<String>,
    /// The host was deleted.
    pub deleted: bool,
}

#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// `HOST_MAX_DISCONNECTION_TIME`.
    pub disconnection_timeout: SignedDuration,
    /// `ReclaimTimeout`.
    pub reclaim_timeout: SignedDuration,
    /// Where uploaded host logs are kept; a deregistered cluster's go with it.
    pub host_logs: Option<Arc<crate::hostlogs::HostLogs>>,
}

impl Default for BackendConfig {
    fn default() -> BackendConfig {
        BackendConfig {
            disconnection_timeout: SignedDuration::from_mins(3),
            reclaim_timeout: SignedDuration::from_mins(60),
            host_logs: None,
        }
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Host>>>;

pub struct Backend {
    db: SqliteStore,
    clock: Arc<dyn Clock>,
    config: BackendConfig,
    hosts: Mutex<HashMap<String, Slot>>,
    /// The committed cluster records. Every host change reads its cluster here, so this lock is held
    /// only to copy or replace an entry, never across a write to the database.
    clusters: Mutex<HashMap<String, Cluster>>,
    /// Serializes cluster writes: a record reaches the map only after the database has it, in the
    /// order the database got it.
    cluster_writes: tokio::sync::Mutex<()>,
    /// Host ids by cluster id, so that a cluster's hosts are found without visiting every host.
    members: Mutex<HashMap<String, std::collections::BTreeSet<String>>>,
    changes: broadcast::Sender<HostChange>,
}

impl Backend {
    /// Loads the records kept in `db`.
    pub async fn load(
        db: SqliteStore,
        clock: Arc<dyn Clock>,
        config: BackendConfig,
    ) -> Result<Arc<Backend>, StoreError> {
        let mut hosts = HashMap::new();
        for (id, body) in db.list_records(HOSTS).await? {
            match serde_json::from_str::<Host>(&body) {
                Ok(h) => {
                    hosts.insert(id, Arc::new(tokio::sync::Mutex::new(Some(h))));
                }
                Err(e) => tracing::error!(host = %id, "unreadable host record, ignored: {e}"),
            }
        }
        let mut clusters = HashMap::new();
        for (id, body) in db.list_records(CLUSTERS).await? {
            match serde_json::from_str::<Cluster>(&body) {
                Ok(c) => {
                    clusters.insert(id, c);
                }
                Err(e) => tracing::error!(cluster = %id, "unreadable cluster record, ignored: {e}"),
            }
        }
        let mut members: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        for (id, slot) in &hosts {
            if let Some(cid) = slot.try_lock().ok().and_then(|h| h.as_ref().and_then(|h| h.cluster_id.clone())) {
                members.entry(cid).or_default().insert(id.clone());
            }
        }
        Ok(Arc::new(Backend {
            db,
            clock,
            config,
            hosts: Mutex::new(hosts),
            clusters: Mutex::new(clusters),
            cluster_writes: tokio::sync::Mutex::new(()),
            members: Mutex::new(members),
            changes: broadcast::channel(65536).0,
        }))
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn config(&self) -> &BackendConfig {
        &self.config
    }

    pub fn subscribe(&self) -> broadcast::Receiver<HostChange> {
        self.changes.subscribe()
    }

    fn slot(&self, id: &str) -> Option<Slot> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    fn context(&self, cluster: Option<&Cluster>) -> Context {
        let mut ctx = Context::new(self.clock.now());
        ctx.disconnection_timeout = self.config.disconnection_timeout;
        ctx.reclaim_timeout = self.config.reclaim_timeout;
        ctx.cluster_status = cluster.map(|c| c.status.clone());
        ctx
    }

    async fn persist(&self, host: &Host) -> Result<(), ApiError> {
        let body = serde_json::to_string(host).map_err(|e| ApiError::new(500, e.to_string()))?;
        self.db.put_record(HOSTS, host.id.clone(), body).await?;
        Ok(())
    }

    fn index(&self, id: &str, old: Option<&str>, new: Option<&str>) {
        if old == new {
            return;
        }
        let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = old
            && let Some(set) = m.get_mut(old)
        {
            set.remove(id);
        }
        if let Some(new) = new {
            m.entry(new.to_string()).or_default().insert(id.to_string());
        }
    }

    fn announce(&self, host: &Host, deleted: bool) {
        let _ = self.changes.send(HostChange {
            host_id: host.id.clone(),
            infra_env_id: host.infra_env_id.clone(),
            cluster_id: host.cluster_id.clone(),
            deleted,
        });
    }

    pub async fn host(&self, id: &str) -> Option<Host> {
        let slot = self.slot(id)?;
        slot.lock().await.clone()
    }

    /// Whether host `id` exists and belongs to InfraEnv `infra_env_id` (answered without copying the
    /// record: the agent API asks at every request).
    pub async fn is_host_of(&self, id: &str, infra_env_id: &str) -> bool {
        match self.slot(id) {
            Some(slot) => slot.lock().await.as_ref().is_some_and(|h| h.infra_env_id == infra_env_id),
            None => false,
        }
    }

    /// All hosts, or those matching `filter`.
    pub async fn hosts(&self, filter: impl Fn(&Host) -> bool) -> Vec<Host> {
        let slots: Vec<Slot> = self.hosts.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut out = Vec::new();
        for slot in slots {
            if let Some(h) = slot.lock().await.as_ref()
                && filter(h)
            {
                out.push(h.clone());
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// How many hosts are in each state (every state listed, zeros included).
    pub async fn count_by_status(&self) -> Vec<(HostStatus, usize)> {
        let slots: Vec<Slot> = self.hosts.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut counts: HashMap<HostStatus, usize> = HostStatus::ALL.iter().map(|s| (*s, 0)).collect();
        for slot in slots {
            if let Some(h) = slot.lock().await.as_ref() {
                *counts.entry(h.status).or_default() += 1;
            }
        }
        HostStatus::ALL.iter().map(|s| (*s, counts[s])).collect()
    }

    pub async fn host_count(&self) -> usize {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Applies `change` to a host under its lock; persists and announces it if it changed anything.
    async fn mutate<T>(
        &self,
        id: &str,
        change: impl FnOnce(&mut Host, &Context) -> Result<T, ApiError>,
    ) -> Result<(Host, T), ApiError> {
        let slot = self.slot(id).ok_or_else(|| ApiError::new(404, format!("Host {id} not found")))?;
        let mut guard = slot.lock().await;
        let Some(current) = guard.as_ref() else {
            return Err(ApiError::new(404, format!("Host {id} not found")));
        };
        let cluster = match &current.cluster_id {
            Some(cid) => self.cluster(cid).await,
            None => None,
        };
        let ctx = self.context(cluster.as_ref());
        let mut host = current.clone();
        let out = change(&mut host, &ctx)?;
        if !same_record(&mut host, current) {
            self.persist(&host).await?;
            let announce = host.status != current.status
                || host.cluster_id != current.cluster_id
                || host.inventory != current.inventory
                || host.progress != current.progress
                || host.status_info != current.status_info
                || host.role != current.role
                || host.approved != current.approved
                || host.kind != current.kind
                || host.validations_info != current.validations_info
                || host.logs_collected_at != current.logs_collected_at;
            self.index(&host.id, current.cluster_id.as_deref(), host.cluster_id.as_deref());
            *guard = Some(host.clone());
            if announce {
                self.announce(&host, false);
            }
        } else if let Some(kept) = guard.as_mut() {
            // Only the check-in time moved: kept in memory (see the module docs).
            kept.checked_in_at = host.checked_in_at;
        }
        Ok((host, out))
    }

    fn fire(host: &mut Host, event: &Event, ctx: &Context) -> Result<(), ApiError> {
        machine::fire(host, event, ctx).map(|_| ()).map_err(|e| ApiError::new(409, e.to_string()))
    }

    /// Registers a host (the agent's first call after boot, and again after every `exit`).
    /// `bound_cluster` is the cluster of the InfraEnv's clusterRef, for hosts that are not late-bound.
    /// Returns the host and whether an existing host record of another InfraEnv was replaced.
    pub async fn register_host(
        &self,
        infra_env_id: &str,
        host_id: &str,
        agent_version: &str,
        bound_cluster: Option<String>,
    ) -> Result<(Host, bool), ApiError> {
        let now = self.clock.now();
        let existing = self.host(host_id).await;
        if let Some(h) = &existing
            && h.infra_env_id == infra_env_id
        {
            let (host, ()) = self
                .mutate(host_id, |host, ctx| {
                    Self::fire(host, &Event::RegisterHost { agent_version: agent_version.to_string() }, ctx)
                        .map_err(|e| ApiError::new(409, format!("Cannot register host {host_id}: {}", e.message)))?;
                    host.checked_in_at = Some(ctx.now);
                    Ok(())
                })
                .await?;
            return Ok((host, false));
        }
        // New here: a host that moved from another InfraEnv starts over.
        let moved = existing.is_some();
        if moved {
            self.deregister_host(host_id).await?;
        }
        let mut host = Host::new_registered(host_id, infra_env_id, bound_cluster.clone(), agent_version, now);
        let cluster = match &bound_cluster {
            Some(cid) => self.cluster(cid).await,
            None => None,
        };
        machine::fire_new(
            &mut host,
            &Event::RegisterHost { agent_version: agent_version.to_string() },
            &self.context(cluster.as_ref()),
        )
        .map_err(|e| ApiError::new(409, e.to_string()))?;
        host.checked_in_at = Some(now);
        self.persist(&host).await?;
        let slot = Arc::new(tokio::sync::Mutex::new(Some(host.clone())));
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).insert(host_id.to_string(), slot);
        self.index(host_id, None, host.cluster_id.as_deref());
        self.announce(&host, false);
        Ok((host, moved))
    }

    /// An agent asked for its next steps: it is connected. The host's state is refreshed, so that a
    /// host that was disconnected comes back at once.
    pub async fn check_in(&self, host_id: &str) -> Result<Host, ApiError> {
        let (host, ()) = self
            .mutate(host_id, |host, ctx| {
                host.checked_in_at = Some(ctx.now);
                let _ = machine::fire(host, &Event::RefreshHost, ctx);
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// A step reply that changes nothing about the host only says that its agent is there (the
    /// instructions request before it already refreshed the host).
    pub async fn touch(&self, host_id: &str) -> Result<(), ApiError> {
        let slot = self.slot(host_id).ok_or_else(|| ApiError::new(404, format!("Host {host_id} not found")))?;
        let mut guard = slot.lock().await;
        let host = guard.as_mut().ok_or_else(|| ApiError::new(404, format!("Host {host_id} not found")))?;
        host.checked_in_at = Some(self.clock.now());
        Ok(())
    }

    /// The agent's inventory step reply.
    pub async fn update_inventory(&self, host_id: &str, inventory: String) -> Result<(), ApiError> {
        // The agent sends its inventory at every poll (§1.4); one that has not changed only says the
        // host is still there.
        if let Some(slot) = self.slot(host_id) {
            let mut guard = slot.lock().await;
            if let Some(host) = guard.as_mut()
                && host.inventory.as_deref() == Some(inventory.as_str())
            {
                host.checked_in_at = Some(self.clock.now());
                return Ok(());
            }
        }
        let inventory = crate::hosts::InventoryText::parse(inventory)
            .map_err(|e| ApiError::new(400, format!("Failed to parse inventory of host {host_id}: {e}")))?;
        self.mutate(host_id, |host, ctx| {
            host.checked_in_at = Some(ctx.now);
            host.inventory = Some(inventory);
            let _ = machine::fire(host, &Event::RefreshHost, ctx);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// The reply of a `download-boot-artifacts` step (§1.2 RebootingForReclaim / ReclaimHostFailed).
    pub async fn reclaim_download_done(&self, host_id: &str, succeeded: bool) -> Result<Host, ApiError> {
        let event = if succeeded { Event::RebootingForReclaim } else { Event::ReclaimHostFailed };
        Ok(self.mutate(host_id, |host, ctx| Self::fire(host, &event, ctx)).await?.0)
    }

    /// Installation progress reported by the agent or the installer.
    pub async fn update_progress(&self, host_id: &str, stage: &str, info: &str) -> Result<Host, ApiError> {
        let event = Event::HostProgressChanged { stage: stage.to_string(), info: info.to_string() };
        let (host, ()) = self
            .mutate(host_id, |host, ctx| {
                host.checked_in_at = Some(ctx.now);
                Self::fire(host, &event, ctx).map_err(|e| ApiError::new(400, e.message))
            })
            .await?;
        Ok(host)
    }

    /// The host's logs were uploaded (`V2UploadLogs`): the Agent gets its logsURL (§2.2).
    pub async fn logs_uploaded(&self, host_id: &str, sha256: String) -> Result<Host, ApiError> {
        let (host, ()) = self
            .mutate(host_id, |host, ctx| {
                host.logs_collected_at = Some(ctx.now);
                host.logs_sha256 = sha256;
                host.logs_info = "completed".into();
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// `BindHostInternal` (§1.6).
    pub async fn bind_host(&self, host_id: &str, cluster_id: &str, infra_env_arch: &str) -> Result<Host, ApiError> {
        let cluster = self
            .cluster(cluster_id)
            .await
            .ok_or_else(|| ApiError::new(400, format!("Cluster {cluster_id} not found")))?;
        if !cluster.cpu_architecture.is_empty()
            && cluster.cpu_architecture != "multi"
            && crate::resources::normalize_arch(&cluster.cpu_architecture)
                != crate::resources::normalize_arch(infra_env_arch)
        {
            return Err(ApiError::new(
                400,
                format!(
                    "Cannot bind host {host_id}: cluster {cluster_id} CPU architecture {} does not match the InfraEnv's {infra_env_arch}",
                    cluster.cpu_architecture
                ),
            ));
        }
        if !accepts_hosts(&cluster) {
            return Err(ApiError::new(
                409,
                format!(
                    "Cluster {cluster_id} is in {} state, host can be bound only if cluster is not installing",
                    cluster.status
                ),
            ));
        }
        let (host, ()) = self
            .mutate(host_id, |host, ctx| {
                if let Some(cid) = &host.cluster_id {
                    return Err(ApiError::new(409, format!("Host {host_id} is already bound to cluster {cid}")));
                }
                Self::fire(host, &Event::BindHost { cluster_id: cluster_id.to_string() }, ctx)
                    .map_err(|e| ApiError::new(500, e.message))?;
                if cluster.is_day2() {
                    host.kind = HostKind::AddToExistingClusterHost;
                }
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// `UnbindHostInternal` (§1.6): `reclaim` asks for the installed node to be rebooted into discovery
    /// by the reclaim agent. `infra_env_cluster` is the cluster the host's InfraEnv references, if any.
    pub async fn unbind_host(
        &self,
        host_id: &str,
        reclaim: bool,
        infra_env_cluster: Option<&str>,
    ) -> Result<Host, ApiError> {
        let (host, ()) = self
            .mutate(host_id, |host, ctx| {
                let Some(cid) = host.cluster_id.clone() else {
                    return Err(ApiError::new(409, format!("Host {host_id} is already unbound")));
                };
                if let Some(ie_cluster) = infra_env_cluster {
                    return Err(ApiError::new(
                        409,
                        format!(
                            "Cannot unbind Host {host_id}. InfraEnv {} is bound to Cluster {ie_cluster}",
                            host.infra_env_id
                        ),
                    ));
                }
                let event = if reclaim { Event::ReclaimHost } else { Event::UnbindHost };
                Self::fire(host, &event, ctx).map_err(|e| {
                    ApiError::new(500, format!("Failed to unbind host {host_id} from cluster {cid}: {}", e.message))
                })
            })
            .await?;
        Ok(host)
    }

    /// Changes host parameters (the Agent spec mirrored to the host); `edit` returns whether it changed
    /// anything.
    pub async fn update_host(
        &self,
        host_id: &str,
        edit: impl FnOnce(&mut Host) -> Result<(), ApiError>,
    ) -> Result<Host, ApiError> {
        Ok(self.mutate(host_id, |host, _| edit(host)).await?.0)
    }

    /// Fires an install-flow event on a host.
    pub async fn fire_event(&self, host_id: &str, event: Event) -> Result<Host, ApiError> {
        Ok(self.mutate(host_id, |host, ctx| Self::fire(host, &event, ctx)).await?.0)
    }

    /// `V2DeregisterHostInternal`: the host record goes (not found is fine).
    pub async fn deregister_host(&self, host_id: &str) -> Result<(), ApiError> {
        let Some(slot) = self.slot(host_id) else { return Ok(()) };
        let mut guard = slot.lock().await;
        let Some(host) = guard.take() else { return Ok(()) };
        self.db.delete_record(HOSTS, host_id.to_string()).await?;
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).remove(host_id);
        self.index(host_id, host.cluster_id.as_deref(), None);
        self.announce(&host, true);
        Ok(())
    }

    /// Restores a host record from what its Agent remembers (§2.9).
    pub async fn restore_host(&self, host: Host) -> Result<Host, ApiError> {
        if let Some(existing) = self.host(&host.id).await {
            return Err(ApiError::new(
                400,
                format!("Host with ID {} already exists in infraEnv {}", existing.id, existing.infra_env_id),
            ));
        }
        self.persist(&host).await?;
        let slot = Arc::new(tokio::sync::Mutex::new(Some(host.clone())));
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).insert(host.id.clone(), slot);
        self.index(&host.id, None, host.cluster_id.as_deref());
        self.announce(&host, false);
        Ok(host)
    }

    /// The monitors (§1.5): refreshes every host whose state depends on time — pool hosts, hosts
    /// being bound or reclaimed, and hosts of clusters. Returns how many changed.
    pub async fn refresh_all(&self) -> usize {
        let ids: Vec<String> = self.hosts.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        let mut changed = 0;
        for id in ids {
            let before = self.host(&id).await;
            let Some(before) = before else { continue };
            if !is_monitored(&before) {
                continue;
            }
            if let Ok((after, ())) = self
                .mutate(&id, |host, ctx| {
                    let _ = machine::fire(host, &Event::RefreshHost, ctx);
                    Ok(())
                })
                .await
                && after.status != before.status
            {
                changed += 1;
            }
        }
        changed
    }

    // ---- clusters ----

    fn cluster_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Cluster>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub async fn cluster(&self, id: &str) -> Option<Cluster> {
        self.cluster_map().get(id).cloned()
    }

    pub async fn cluster_by_kube_key(&self, namespace: &str, name: &str) -> Option<Cluster> {
        self.cluster_map().values().find(|c| c.namespace == namespace && c.name == name).cloned()
    }

    /// Creates or replaces a cluster record.
    pub async fn put_cluster(&self, cluster: Cluster) -> Result<Cluster, ApiError> {
        let _writing = self.cluster_writes.lock().await;
        if self.cluster_map().get(&cluster.id) == Some(&cluster) {
            return Ok(cluster);
        }
        let body = serde_json::to_string(&cluster).map_err(|e| ApiError::new(500, e.to_string()))?;
        self.db.put_record(CLUSTERS, cluster.id.clone(), body).await?;
        self.cluster_map().insert(cluster.id.clone(), cluster.clone());
        Ok(cluster)
    }

    /// `DeregisterClusterInternal`: the record goes; its hosts stay (the Agents unbind them).
    pub async fn deregister_cluster(&self, id: &str) -> Result<(), ApiError> {
        {
            let _writing = self.cluster_writes.lock().await;
            if self.cluster_map().contains_key(id) {
                self.db.delete_record(CLUSTERS, id.to_string()).await?;
                self.cluster_map().remove(id);
            }
        }
        if let Some(logs) = &self.config.host_logs {
            logs.remove_cluster(id).await;
        }
        Ok(())
    }

    pub async fn cluster_hosts(&self, cluster_id: &str) -> Vec<Host> {
        let ids: Vec<String> = self
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(cluster_id)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let mut out = Vec::new();
        for id in ids {
            if let Some(h) = self.host(&id).await
                && h.cluster_id.as_deref() == Some(cluster_id)
            {
                out.push(h);
            }
        }
        out
    }
}

/// Host records equal apart from the check-in time (compared without copying either: this runs
/// at every poll of every agent).
fn same_record(a: &mut Host, b: &Host) -> bool {
    let checked_in_at = std::mem::replace(&mut a.checked_in_at, b.checked_in_at);
    let same = *a == *b;
    a.checked_in_at = checked_in_at;
    same
}

/// Clusters accept new hosts until their installation starts, and again once installed (day 2).
fn accepts_hosts(cluster: &Cluster) -> bool {
    matches!(cluster.status.as_str(), "insufficient" | "ready" | "pending-for-input" | "adding-hosts" | "installed")
}

/// Which hosts the monitors refresh (§1.5): the InfraEnv monitor's states, and every host of a cluster.
fn is_monitored(host: &Host) -> bool {
    use HostStatus::*;
    host.cluster_id.is_some()
        || matches!(
            host.status,
            Binding
                | DisconnectedUnbound
                | DiscoveringUnbound
                | InsufficientUnbound
                | KnownUnbound
                | Reclaiming
                | ReclaimingRebooting
        )
}
