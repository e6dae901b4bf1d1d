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
//!
//! Where the pool sits between agents and Agents: docs/design.md §4.1, §4.3.

pub mod clock;
pub mod events;
#[cfg(test)]
pub mod gate;
pub mod logs;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::errors::chain;
use crate::hosts::machine::{self, Context, Event};
use crate::hosts::{Host, HostKey, HostKind, HostStatus};
use crate::keylocks::Locked as _;
use crate::store::StoreError;
use crate::store::sqlite::SqliteStore;
pub use clock::{Clock, ManualClock, SystemClock};

const HOSTS: &str = "hosts";
const CLUSTERS: &str = "clusters";
/// The admin credentials installers reported, by cluster id.
const CREDENTIALS: &str = "credentials";

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
        ApiError::new(500, crate::errors::chain(&e).to_string())
    }
}

/// How [`Backend::unbind_host`] lets an installed host go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unbind<'a> {
    /// The reclaim agent runs on the node and reboots it into discovery (`ReclaimHost`).
    Reclaim,
    /// The node waits for a reboot into discovery by a person or a BMC (`UnbindHost`); `not_reclaimed`
    /// says why reclaim was not tried where that is worth telling the user.
    WaitForReboot { not_reclaimed: Option<&'a str> },
}

/// Why `UnbindHostInternal` refuses to unbind `host` (spec-controllers.md §1.6), before anything is done:
/// callers that would act on the host's cluster first (start the reclaim agent on it) ask this and do
/// nothing when it refuses. `infra_env_cluster` is the cluster the host's InfraEnv references, if any.
pub fn unbind_refusal(host: &Host, infra_env_cluster: Option<&str>) -> Option<ApiError> {
    let host_id = &host.id;
    if host.cluster_id.is_none() {
        return Some(ApiError::new(409, format!("Host {host_id} is already unbound")));
    }
    infra_env_cluster.map(|ie_cluster| {
        ApiError::new(
            409,
            format!("Cannot unbind Host {host_id}. InfraEnv {} is bound to Cluster {ie_cluster}", host.infra_env_id),
        )
    })
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

/// One of the admin credentials of a cluster that its installer reports (the files assisted-service's
/// `V2DownloadClusterCredentials` serves under these names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialFile {
    /// `kubeconfig`: the admin kubeconfig of the installed cluster.
    Kubeconfig,
    /// `kubeadmin-password`: the `kubeadmin` user's password.
    KubeadminPassword,
}

/// Largest admin kubeconfig taken: one with its client certificate, key and a CA bundle of a few
/// dozen certificates is well under this.
pub const MAX_KUBECONFIG_BYTES: usize = 64 << 10;
/// Largest kubeadmin password taken (the installer makes 23 characters).
pub const MAX_PASSWORD_BYTES: usize = 256;

impl CredentialFile {
    pub const ALL: [CredentialFile; 2] = [CredentialFile::Kubeconfig, CredentialFile::KubeadminPassword];

    pub fn name(self) -> &'static str {
        match self {
            CredentialFile::Kubeconfig => "kubeconfig",
            CredentialFile::KubeadminPassword => "kubeadmin-password",
        }
    }

    pub fn from_name(name: &str) -> Option<CredentialFile> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Checks an upload of this file and gives its text: a kubeconfig must be one a spoke client
    /// can be built from, of inline data only (`resources::kubeconfig::client_config`: no
    /// `exec`, no file paths, no proxy, no impersonation); a password must be printable ASCII
    /// without spaces. Both are bounded: they end up in Secrets and in every spoke client built.
    pub fn check(self, bytes: &[u8]) -> Result<String, ApiError> {
        let max = match self {
            CredentialFile::Kubeconfig => MAX_KUBECONFIG_BYTES,
            CredentialFile::KubeadminPassword => MAX_PASSWORD_BYTES,
        };
        let name = self.name();
        if bytes.is_empty() {
            return Err(ApiError::new(400, format!("{name} is empty")));
        }
        if bytes.len() > max {
            return Err(ApiError::new(
                413,
                format!("{name} is {} bytes, over the {max} this file may have", bytes.len()),
            ));
        }
        let text = std::str::from_utf8(bytes).map_err(|_| ApiError::new(400, format!("{name} is not UTF-8 text")))?;
        match self {
            CredentialFile::Kubeconfig => {
                // The same check every spoke client is built through: inline data only.
                crate::resources::kubeconfig::client_config(text.as_bytes())
                    .map_err(|e| ApiError::new(400, chain(&e).to_string()))?;
                Ok(text.to_string())
            }
            CredentialFile::KubeadminPassword => {
                let text = text.strip_suffix('\n').unwrap_or(text);
                if text.is_empty() || !text.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(ApiError::new(400, "kubeadmin-password must be printable ASCII without spaces"));
                }
                Ok(text.to_string())
            }
        }
    }
}

/// The admin credentials of a cluster, as its installer reported them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterCredentials {
    #[serde(default)]
    pub kubeconfig: Option<String>,
    #[serde(default)]
    pub kubeadmin_password: Option<String>,
}

impl ClusterCredentials {
    /// Both files are there: the cluster's admin Secrets can be made.
    pub fn complete(&self) -> bool {
        self.kubeconfig.is_some() && self.kubeadmin_password.is_some()
    }
}

/// What changed, for the controllers: the host and where its Agent lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostChange {
    pub host_id: String,
    pub infra_env_id: String,
    /// Where the host's Agent lives (empty for a record from before namespaces were kept).
    pub namespace: String,
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
    pub host_logs: Option<Arc<crate::pool::logs::HostLogs>>,
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

/// Host records the pool's lookups visited to answer a caller (`/metrics` `pool_records_visited`):
/// with [`crate::store::OBJECTS_READ`], what a change costs in reads. The monitor's periodic pass
/// over every host and `/metrics`' counts by state are not counted (a timer's and a scrape's work,
/// not a change's). Process-wide, as a server runs one pool.
pub static RECORDS_VISITED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn visited(n: usize) {
    RECORDS_VISITED.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

pub struct Backend {
    db: SqliteStore,
    clock: Arc<dyn Clock>,
    config: BackendConfig,
    /// In key order, so that an InfraEnv's hosts (keys that start with its id) are one range, found
    /// without visiting the fleet.
    hosts: Mutex<BTreeMap<HostKey, Slot>>,
    /// The record of each Agent, by the Agent's (namespace, name): a namespace holds at most one
    /// record per host id, since it can hold only one Agent of that name.
    agents: Mutex<HashMap<(String, String), HostKey>>,
    /// Creations and removals of the records behind one Agent name (namespace, host id) take
    /// turns, so that the one-record-per-Agent rule is checked and kept in one step. A lock per
    /// name, not one for all: a fleet registering at once must not wait for each other's writes.
    agent_locks: crate::keylocks::KeyLocks,
    /// The committed cluster records. Every host change reads its cluster here, so this lock is held
    /// only to copy or replace an entry, never across a write to the database.
    clusters: Mutex<HashMap<String, Cluster>>,
    /// Cluster ids by their ClusterDeployment's (namespace, name), kept with `clusters` (an id is
    /// indexed before its record is in `clusters` and removed after it is not), so that an Agent's or a ClusterDeployment's reconcile finds its
    /// cluster without visiting every cluster.
    cluster_ids: Mutex<HashMap<(String, String), std::collections::BTreeSet<String>>>,
    /// Serializes cluster writes: a record reaches the map only after the database has it, in the
    /// order the database got it.
    cluster_writes: tokio::sync::Mutex<()>,
    /// Hosts by cluster id, so that a cluster's hosts are found without visiting every host.
    members: Mutex<HashMap<String, std::collections::BTreeSet<HostKey>>>,
    /// Admin credentials by cluster id, apart from the cluster records that every host change reads.
    credentials: Mutex<HashMap<String, ClusterCredentials>>,
    changes: broadcast::Sender<HostChange>,
}

/// The hosts of `slots` that match `filter`, each read under its own lock (counted as visited).
async fn matching(slots: Vec<Slot>, filter: impl Fn(&Host) -> bool) -> Vec<Host> {
    visited(slots.len());
    let mut out = Vec::new();
    for slot in slots {
        if let Some(h) = slot.lock().await.as_ref()
            && filter(h)
        {
            out.push(h.clone());
        }
    }
    out
}

/// Removes `cluster` from the index of cluster ids by ClusterDeployment.
fn forget_cluster_id(ids: &mut HashMap<(String, String), std::collections::BTreeSet<String>>, cluster: &Cluster) {
    let key = (cluster.namespace.clone(), cluster.name.clone());
    if let Some(set) = ids.get_mut(&key) {
        set.remove(&cluster.id);
        if set.is_empty() {
            ids.remove(&key);
        }
    }
}

impl Backend {
    /// Loads the records kept in `db`.
    pub async fn load(
        db: SqliteStore,
        clock: Arc<dyn Clock>,
        config: BackendConfig,
    ) -> Result<Arc<Backend>, StoreError> {
        let mut hosts = BTreeMap::new();
        let mut agents = HashMap::new();
        for (record_key, body) in db.list_records(HOSTS).await? {
            match serde_json::from_str::<Host>(&body) {
                Ok(h) => {
                    let key = h.key();
                    // Records written before hosts were keyed by InfraEnv and host id were kept
                    // under the host id alone: moved to their key.
                    if record_key != record_key_of(&key) {
                        db.put_record(HOSTS, record_key_of(&key), body).await?;
                        db.delete_record(HOSTS, record_key).await?;
                    }
                    if !h.namespace.is_empty() {
                        agents.insert((h.namespace.clone(), h.id.clone()), key.clone());
                    }
                    hosts.insert(key, Arc::new(tokio::sync::Mutex::new(Some(h))));
                }
                Err(e) => tracing::error!(record = %record_key, "unreadable host record, ignored: {}", chain(&e)),
            }
        }
        let mut clusters = HashMap::new();
        for (id, body) in db.list_records(CLUSTERS).await? {
            match serde_json::from_str::<Cluster>(&body) {
                Ok(c) => {
                    clusters.insert(id, c);
                }
                Err(e) => tracing::error!(cluster = %id, "unreadable cluster record, ignored: {}", chain(&e)),
            }
        }
        let mut cluster_ids: HashMap<(String, String), std::collections::BTreeSet<String>> = HashMap::new();
        for (id, c) in &clusters {
            cluster_ids.entry((c.namespace.clone(), c.name.clone())).or_default().insert(id.clone());
        }
        let mut credentials = HashMap::new();
        for (id, body) in db.list_records(CREDENTIALS).await? {
            match serde_json::from_str::<ClusterCredentials>(&body) {
                Ok(c) => {
                    credentials.insert(id, c);
                }
                Err(e) => tracing::error!(cluster = %id, "unreadable credentials record, ignored: {}", chain(&e)),
            }
        }
        let mut members: HashMap<String, std::collections::BTreeSet<HostKey>> = HashMap::new();
        for (key, slot) in &hosts {
            if let Some(cid) = slot.try_lock().ok().and_then(|h| h.as_ref().and_then(|h| h.cluster_id.clone())) {
                members.entry(cid).or_default().insert(key.clone());
            }
        }
        Ok(Arc::new(Backend {
            db,
            clock,
            config,
            hosts: Mutex::new(hosts),
            agents: Mutex::new(agents),
            agent_locks: Default::default(),
            clusters: Mutex::new(clusters),
            cluster_ids: Mutex::new(cluster_ids),
            cluster_writes: tokio::sync::Mutex::new(()),
            members: Mutex::new(members),
            credentials: Mutex::new(credentials),
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

    fn slot(&self, key: &HostKey) -> Option<Slot> {
        self.hosts.locked().get(key).cloned()
    }

    fn context(&self, cluster: Option<&Cluster>) -> Context {
        let mut ctx = Context::new(self.clock.now());
        ctx.disconnection_timeout = self.config.disconnection_timeout;
        ctx.reclaim_timeout = self.config.reclaim_timeout;
        ctx.cluster_status = cluster.map(|c| c.status.clone());
        ctx
    }

    /// Writes a host's record with the events of its change, in one transaction.
    async fn persist(&self, host: &Host, events: Vec<crate::store::sqlite::EventRow>) -> Result<(), ApiError> {
        let body = serde_json::to_string(host).map_err(|e| ApiError::new(500, e.to_string()))?;
        self.db
            .put_record_with_events(HOSTS, record_key_of(&host.key()), body, events, events::HOST_EVENTS_KEPT)
            .await?;
        Ok(())
    }

    fn index(&self, key: &HostKey, old: Option<&str>, new: Option<&str>) {
        if old == new {
            return;
        }
        let mut m = self.members.locked();
        if let Some(old) = old
            && let Some(set) = m.get_mut(old)
        {
            set.remove(key);
        }
        if let Some(new) = new {
            m.entry(new.to_string()).or_default().insert(key.clone());
        }
    }

    fn announce(&self, host: &Host, deleted: bool) {
        let _ = self.changes.send(HostChange {
            host_id: host.id.clone(),
            infra_env_id: host.infra_env_id.clone(),
            namespace: host.namespace.clone(),
            cluster_id: host.cluster_id.clone(),
            deleted,
        });
    }

    pub async fn host(&self, key: &HostKey) -> Option<Host> {
        #[cfg(test)]
        let _turn = gate::enter("backend.host").await;
        let slot = self.slot(key)?;
        slot.lock().await.clone()
    }

    /// The record of the Agent `name` in `namespace` (an Agent is named by its host's id).
    pub async fn host_of_agent(&self, namespace: &str, name: &str) -> Option<Host> {
        #[cfg(test)]
        let _turn = gate::enter("backend.host_of_agent").await;
        let key = self.agents.locked().get(&(namespace.into(), name.into())).cloned()?;
        self.host(&key).await.filter(|h| h.namespace == namespace)
    }

    /// Whether the record `key` exists (answered without copying it: the agent API asks at every
    /// request).
    pub async fn has_host(&self, key: &HostKey) -> bool {
        #[cfg(test)]
        let _turn = gate::enter("backend.has_host").await;
        match self.slot(key) {
            Some(slot) => slot.lock().await.is_some(),
            None => false,
        }
    }

    /// Records the namespace of a record written before namespaces were kept (at start, before the
    /// controllers run). A namespace whose Agent name another record holds already is not taken.
    pub async fn set_namespace(&self, key: &HostKey, namespace: &str) -> Result<(), ApiError> {
        let _turn = self.agent_turn(namespace, &key.host_id).await;
        let agent = (namespace.to_string(), key.host_id.clone());
        if self.agents.locked().get(&agent).is_some_and(|k| k != key) {
            return Err(ApiError::new(
                409,
                format!("the Agent {namespace}/{} belongs to another host record", key.host_id),
            ));
        }
        self.mutate(key, |host, _| {
            host.namespace = namespace.to_string();
            Ok(())
        })
        .await?;
        self.agents.locked().insert(agent, key.clone());
        Ok(())
    }

    /// All hosts, or those matching `filter`.
    pub async fn hosts(&self, filter: impl Fn(&Host) -> bool) -> Vec<Host> {
        #[cfg(test)]
        let _turn = gate::enter("backend.hosts").await;
        let slots: Vec<Slot> = self.hosts.locked().values().cloned().collect();
        let mut out = matching(slots, filter).await;
        out.sort_by(|a, b| (&a.id, &a.infra_env_id).cmp(&(&b.id, &b.infra_env_id)));
        out
    }

    /// The hosts of InfraEnv `infra_env_id` that match `filter`, in host id order: one range of the
    /// host map, whatever the size of the fleet.
    pub async fn infra_env_hosts(&self, infra_env_id: &str, filter: impl Fn(&Host) -> bool) -> Vec<Host> {
        let from = HostKey::new(infra_env_id, "");
        let slots: Vec<Slot> = self
            .hosts
            .locked()
            .range(from..)
            .take_while(|(k, _)| k.infra_env_id == infra_env_id)
            .map(|(_, slot)| slot.clone())
            .collect();
        matching(slots, filter).await
    }

    /// How many hosts are in each state (every state listed, zeros included).
    pub async fn count_by_status(&self) -> Vec<(HostStatus, usize)> {
        let slots: Vec<Slot> = self.hosts.locked().values().cloned().collect();
        let mut counts: HashMap<HostStatus, usize> = HostStatus::ALL.iter().map(|s| (*s, 0)).collect();
        for slot in slots {
            if let Some(h) = slot.lock().await.as_ref() {
                *counts.entry(h.status).or_default() += 1;
            }
        }
        HostStatus::ALL.iter().map(|s| (*s, counts[s])).collect()
    }

    pub async fn host_count(&self) -> usize {
        self.hosts.locked().len()
    }

    /// Applies `change` to a host under its lock; persists and announces it if it changed anything.
    async fn mutate<T>(
        &self,
        key: &HostKey,
        change: impl FnOnce(&mut Host, &Context) -> Result<T, ApiError>,
    ) -> Result<(Host, T), ApiError> {
        self.mutate_noting(key, false, change).await
    }

    /// [`Self::mutate`]; `registered` when the change is a registration, which is recorded as an
    /// event (and so written) even when the record is otherwise the same.
    async fn mutate_noting<T>(
        &self,
        key: &HostKey,
        registered: bool,
        change: impl FnOnce(&mut Host, &Context) -> Result<T, ApiError>,
    ) -> Result<(Host, T), ApiError> {
        let slot = self.slot(key).ok_or_else(|| not_found(key))?;
        let mut guard = slot.lock().await;
        let Some(current) = guard.as_ref() else {
            return Err(not_found(key));
        };
        let cluster = match &current.cluster_id {
            Some(cid) => self.cluster(cid).await,
            None => None,
        };
        let ctx = self.context(cluster.as_ref());
        let mut host = current.clone();
        let out = change(&mut host, &ctx)?;
        if registered || !same_record(&mut host, current) {
            self.persist(&host, events::host_change(Some(current), &host, registered, ctx.now)).await?;
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
            self.index(key, current.cluster_id.as_deref(), host.cluster_id.as_deref());
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

    /// Registers a host (the agent's first call after boot, and again after every `exit`) with
    /// InfraEnv `infra_env_id` of `namespace`. `bound_cluster` is the cluster of the InfraEnv's
    /// clusterRef, for hosts that are not late-bound.
    ///
    /// A host id new to the InfraEnv is a new record, whatever other InfraEnvs hold under that id:
    /// another tenant's record is never read, changed or moved. Within one namespace (one tenant:
    /// it holds one Agent of that name) a machine that boots another InfraEnv's image moves to it
    /// (spec-controllers.md §3.11): its record there is replaced, unless it is bound to a cluster,
    /// which it must be unbound from first. Returns the host and the key of the record it
    /// replaced, if any.
    pub async fn register_host(
        &self,
        infra_env_id: &str,
        namespace: &str,
        host_id: &str,
        agent_version: &str,
        bound_cluster: Option<String>,
    ) -> Result<(Host, Option<HostKey>), ApiError> {
        let key = HostKey::new(infra_env_id, host_id);
        let register = |host: &mut Host, ctx: &Context| -> Result<(), ApiError> {
            Self::fire(host, &Event::RegisterHost { agent_version: agent_version.to_string() }, ctx)
                .map_err(|e| ApiError::new(409, format!("Cannot register host {host_id}: {}", e.message)))?;
            host.checked_in_at = Some(ctx.now);
            Ok(())
        };
        // A registration again (every agent start) takes no lock but the host's. If the record went
        // meanwhile (moved to another InfraEnv of its namespace), it is created anew below.
        if self.has_host(&key).await {
            match self.mutate_noting(&key, true, register).await {
                Err(e) if e.status == 404 => {}
                other => return Ok((other?.0, None)),
            }
        }
        let _turn = self.agent_turn(namespace, host_id).await;
        // Registered meanwhile by a retry of the same agent.
        if self.has_host(&key).await {
            return Ok((self.mutate_noting(&key, true, register).await?.0, None));
        }
        let agent = (namespace.to_string(), host_id.to_string());
        let other = self.agents.locked().get(&agent).cloned();
        let replaced = match other {
            Some(other) => match self.host(&other).await {
                Some(h) if h.cluster_id.is_some() => {
                    return Err(ApiError::new(
                        409,
                        format!(
                            "Cannot register host {host_id} with infra-env {infra_env_id}: it is bound to cluster {} \
                             through infra-env {} of namespace {namespace}; unbind its Agent first",
                            h.cluster_id.as_deref().unwrap_or_default(),
                            h.infra_env_id
                        ),
                    ));
                }
                Some(_) => {
                    self.remove_host(&other).await?;
                    Some(other)
                }
                None => None,
            },
            None => None,
        };
        if let Some(cid) = &bound_cluster {
            self.check_not_in_cluster(&key, cid)?;
        }
        let now = self.clock.now();
        let mut host = Host::new_registered(host_id, infra_env_id, bound_cluster.clone(), agent_version, now);
        host.namespace = namespace.to_string();
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
        self.insert_host(host.clone()).await?;
        Ok((host, replaced))
    }

    /// Persists a new record and makes it visible: the host map, the Agent index, the cluster's
    /// members, the change feed. The caller holds the record's Agent turn.
    async fn insert_host(&self, host: Host) -> Result<(), ApiError> {
        let key = host.key();
        let registered = events::host_change(None, &host, true, self.clock.now());
        self.persist(&host, registered).await?;
        let slot = Arc::new(tokio::sync::Mutex::new(Some(host.clone())));
        self.hosts.locked().insert(key.clone(), slot);
        if !host.namespace.is_empty() {
            self.agents.locked().insert((host.namespace.clone(), host.id.clone()), key.clone());
        }
        self.index(&key, None, host.cluster_id.as_deref());
        self.announce(&host, false);
        Ok(())
    }

    /// One machine joins a cluster once: a host id already among the cluster's hosts (through
    /// another InfraEnv) cannot be bound to it again.
    fn check_not_in_cluster(&self, key: &HostKey, cluster_id: &str) -> Result<(), ApiError> {
        let members = self.members.locked();
        match members.get(cluster_id).and_then(|m| m.iter().find(|k| k.host_id == key.host_id && *k != key)) {
            Some(other) => Err(ApiError::new(
                409,
                format!(
                    "Cannot bind host {} of infra-env {} to cluster {cluster_id}: the cluster already has host {other}",
                    key.host_id, key.infra_env_id
                ),
            )),
            None => Ok(()),
        }
    }

    /// An agent asked for its next steps: it is connected. The host's state is refreshed, so that a
    /// host that was disconnected comes back at once.
    pub async fn check_in(&self, key: &HostKey) -> Result<Host, ApiError> {
        let (host, ()) = self
            .mutate(key, |host, ctx| {
                host.checked_in_at = Some(ctx.now);
                let _ = machine::fire(host, &Event::RefreshHost, ctx);
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// A step reply that changes nothing about the host only says that its agent is there (the
    /// instructions request before it already refreshed the host).
    pub async fn touch(&self, key: &HostKey) -> Result<(), ApiError> {
        let slot = self.slot(key).ok_or_else(|| not_found(key))?;
        let mut guard = slot.lock().await;
        let host = guard.as_mut().ok_or_else(|| not_found(key))?;
        host.checked_in_at = Some(self.clock.now());
        Ok(())
    }

    /// The agent's inventory step reply.
    pub async fn update_inventory(&self, key: &HostKey, inventory: String) -> Result<(), ApiError> {
        // The agent sends its inventory at every poll (spec-controllers.md §1.4); one that has not changed only says
        // the host is still there.
        if let Some(slot) = self.slot(key) {
            let mut guard = slot.lock().await;
            if let Some(host) = guard.as_mut()
                && host.inventory.as_deref() == Some(inventory.as_str())
            {
                host.checked_in_at = Some(self.clock.now());
                return Ok(());
            }
        }
        let inventory = crate::hosts::InventoryText::parse(inventory)
            .map_err(|e| ApiError::new(400, format!("Failed to parse inventory of host {}: {e}", key.host_id)))?;
        self.mutate(key, |host, ctx| {
            host.checked_in_at = Some(ctx.now);
            host.inventory = Some(inventory);
            let _ = machine::fire(host, &Event::RefreshHost, ctx);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// The reply of a `download-boot-artifacts` step (spec-controllers.md §1.2 RebootingForReclaim /
    /// ReclaimHostFailed).
    pub async fn reclaim_download_done(&self, key: &HostKey, succeeded: bool) -> Result<Host, ApiError> {
        let event = if succeeded { Event::RebootingForReclaim } else { Event::ReclaimHostFailed };
        Ok(self.mutate(key, |host, ctx| Self::fire(host, &event, ctx)).await?.0)
    }

    /// Installation progress reported by the agent or the installer.
    pub async fn update_progress(&self, key: &HostKey, stage: &str, info: &str) -> Result<Host, ApiError> {
        let event = Event::HostProgressChanged { stage: stage.to_string(), info: info.to_string() };
        let (host, ()) = self
            .mutate(key, |host, ctx| {
                host.checked_in_at = Some(ctx.now);
                Self::fire(host, &event, ctx).map_err(|e| ApiError::new(400, e.message))
            })
            .await?;
        Ok(host)
    }

    /// The host's logs were uploaded (`V2UploadLogs`): the Agent gets its logsURL (spec-controllers.md §2.2).
    pub async fn logs_uploaded(&self, key: &HostKey, sha256: String) -> Result<Host, ApiError> {
        let (host, ()) = self
            .mutate(key, |host, ctx| {
                host.logs_collected_at = Some(ctx.now);
                host.logs_sha256 = sha256;
                host.logs_info = "completed".into();
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// `BindHostInternal` (spec-controllers.md §1.6).
    pub async fn bind_host(&self, key: &HostKey, cluster_id: &str, infra_env_arch: &str) -> Result<Host, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.bind_host").await;
        let host_id = &key.host_id;
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
        self.check_not_in_cluster(key, cluster_id)?;
        let (host, ()) = self
            .mutate(key, |host, ctx| {
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

    /// `UnbindHostInternal` (spec-controllers.md §1.6): `how` says whether the installed node is rebooted into
    /// discovery by the reclaim agent, or waits for a reboot (and why, where the caller decided against
    /// reclaim). `infra_env_cluster` is the cluster the host's InfraEnv references, if any.
    pub async fn unbind_host(
        &self,
        key: &HostKey,
        how: Unbind<'_>,
        infra_env_cluster: Option<&str>,
    ) -> Result<Host, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.unbind_host").await;
        let host_id = &key.host_id;
        let (host, ()) = self
            .mutate(key, |host, ctx| {
                if let Some(refused) = unbind_refusal(host, infra_env_cluster) {
                    return Err(refused);
                }
                let cid = host.cluster_id.clone().unwrap_or_default();
                let event = if matches!(how, Unbind::Reclaim) { Event::ReclaimHost } else { Event::UnbindHost };
                Self::fire(host, &event, ctx).map_err(|e| {
                    ApiError::new(500, format!("Failed to unbind host {host_id} from cluster {cid}: {}", e.message))
                })?;
                if let Unbind::WaitForReboot { not_reclaimed: Some(why) } = how
                    && host.status == HostStatus::UnbindingPendingUserAction
                {
                    host.not_reclaimed = why.to_string();
                }
                Ok(())
            })
            .await?;
        Ok(host)
    }

    /// Changes host parameters (the Agent spec mirrored to the host); `edit` returns whether it changed
    /// anything.
    pub async fn update_host(
        &self,
        key: &HostKey,
        edit: impl FnOnce(&mut Host) -> Result<(), ApiError>,
    ) -> Result<Host, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.update_host").await;
        Ok(self.mutate(key, |host, _| edit(host)).await?.0)
    }

    /// Fires an install-flow event on a host.
    pub async fn fire_event(&self, key: &HostKey, event: Event) -> Result<Host, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.fire_event").await;
        Ok(self.mutate(key, |host, ctx| Self::fire(host, &event, ctx)).await?.0)
    }

    /// `V2DeregisterHostInternal`: the host record goes (not found is fine).
    pub async fn deregister_host(&self, key: &HostKey) -> Result<(), ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.deregister_host").await;
        let Some(namespace) = self.host(key).await.map(|h| h.namespace) else { return Ok(()) };
        let _turn = self.agent_turn(&namespace, &key.host_id).await;
        self.remove_host(key).await
    }

    /// The turn of the records behind the Agent `host_id` of `namespace` (see `agent_locks`).
    async fn agent_turn(&self, namespace: &str, host_id: &str) -> crate::keylocks::KeyGuard<'_> {
        self.agent_locks.lock(format!("{namespace}/{host_id}")).await
    }

    /// Removes a record; the caller holds its Agent turn.
    async fn remove_host(&self, key: &HostKey) -> Result<(), ApiError> {
        let Some(slot) = self.slot(key) else { return Ok(()) };
        let mut guard = slot.lock().await;
        let Some(host) = guard.take() else { return Ok(()) };
        // Its events go with it, in the same transaction.
        self.db.delete_host_record(HOSTS, record_key_of(key), key.infra_env_id.clone(), key.host_id.clone()).await?;
        self.hosts.locked().remove(key);
        {
            let mut agents = self.agents.locked();
            let agent = (host.namespace.clone(), host.id.clone());
            if agents.get(&agent) == Some(key) {
                agents.remove(&agent);
            }
        }
        self.index(key, host.cluster_id.as_deref(), None);
        self.announce(&host, true);
        Ok(())
    }

    /// Restores a host record from what its Agent remembers (spec-controllers.md §2.9). `host.namespace` is the
    /// Agent's.
    pub async fn restore_host(&self, host: Host) -> Result<Host, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.restore_host").await;
        let _turn = self.agent_turn(&host.namespace, &host.id).await;
        let key = host.key();
        let agent = (host.namespace.clone(), host.id.clone());
        let holder = self.agents.locked().get(&agent).cloned();
        if self.has_host(&key).await || holder.is_some() {
            let existing = holder.unwrap_or(key);
            return Err(ApiError::new(
                400,
                format!("Host with ID {} already exists in infraEnv {}", existing.host_id, existing.infra_env_id),
            ));
        }
        self.insert_host(host.clone()).await?;
        Ok(host)
    }

    /// The monitors (spec-controllers.md §1.5): refreshes every host whose state depends on time — pool hosts, hosts
    /// being bound or reclaimed, and hosts of clusters. Returns how many changed.
    pub async fn refresh_all(&self) -> usize {
        let keys: Vec<HostKey> = self.hosts.locked().keys().cloned().collect();
        let mut changed = 0;
        for key in keys {
            let before = self.host(&key).await;
            let Some(before) = before else { continue };
            if !is_monitored(&before) {
                continue;
            }
            if let Ok((after, ())) = self
                .mutate(&key, |host, ctx| {
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
        self.clusters.locked()
    }

    pub async fn cluster(&self, id: &str) -> Option<Cluster> {
        #[cfg(test)]
        let _turn = gate::enter("backend.cluster").await;
        self.cluster_map().get(id).cloned()
    }

    pub async fn cluster_by_kube_key(&self, namespace: &str, name: &str) -> Option<Cluster> {
        #[cfg(test)]
        let _turn = gate::enter("backend.cluster_by_kube_key").await;
        let key = (namespace.to_string(), name.to_string());
        let id = self.cluster_ids.locked().get(&key).and_then(|ids| ids.first().cloned())?;
        self.cluster_map().get(&id).cloned()
    }

    /// Creates or replaces a cluster record.
    pub async fn put_cluster(&self, cluster: Cluster) -> Result<Cluster, ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.put_cluster").await;
        let _writing = self.cluster_writes.lock().await;
        let before = self.cluster_map().get(&cluster.id).cloned();
        if before.as_ref() == Some(&cluster) {
            return Ok(cluster);
        }
        let body = serde_json::to_string(&cluster).map_err(|e| ApiError::new(500, e.to_string()))?;
        let events = events::cluster_change(before.as_ref(), &cluster, self.clock.now());
        self.db.put_record_with_events(CLUSTERS, cluster.id.clone(), body, events, events::CLUSTER_EVENTS_KEPT).await?;
        // The index first: a reader that finds the id before the record is in the map finds no
        // cluster, as before this write.
        {
            let mut ids = self.cluster_ids.locked();
            if let Some(b) = &before
                && (b.namespace != cluster.namespace || b.name != cluster.name)
            {
                forget_cluster_id(&mut ids, b);
            }
            ids.entry((cluster.namespace.clone(), cluster.name.clone())).or_default().insert(cluster.id.clone());
        }
        self.cluster_map().insert(cluster.id.clone(), cluster.clone());
        Ok(cluster)
    }

    /// `DeregisterClusterInternal`: the record goes; its hosts stay (the Agents unbind them).
    pub async fn deregister_cluster(&self, id: &str) -> Result<(), ApiError> {
        #[cfg(test)]
        let _turn = gate::enter("backend.deregister_cluster").await;
        {
            let _writing = self.cluster_writes.lock().await;
            if self.cluster_map().contains_key(id) {
                // Its own events go with it; its hosts' stay with the hosts.
                self.db.delete_cluster_record(CLUSTERS, id.to_string()).await?;
                if let Some(gone) = self.cluster_map().remove(id) {
                    forget_cluster_id(&mut self.cluster_ids.locked(), &gone);
                }
            }
            if self.credentials.locked().contains_key(id) {
                self.db.delete_record(CREDENTIALS, id.to_string()).await?;
                self.credentials.locked().remove(id);
            }
        }
        if let Some(logs) = &self.config.host_logs {
            logs.remove_cluster(id).await;
        }
        Ok(())
    }

    /// Records one admin credential of cluster `cluster_id`, as its installer reported it (already
    /// checked with [`CredentialFile::check`]).
    pub async fn put_credential(&self, cluster_id: &str, file: CredentialFile, value: String) -> Result<(), ApiError> {
        let _writing = self.cluster_writes.lock().await;
        if !self.cluster_map().contains_key(cluster_id) {
            return Err(ApiError::new(404, format!("cluster {cluster_id} not found")));
        }
        let mut creds = self.credentials(cluster_id);
        match file {
            CredentialFile::Kubeconfig => creds.kubeconfig = Some(value),
            CredentialFile::KubeadminPassword => creds.kubeadmin_password = Some(value),
        }
        let body = serde_json::to_string(&creds).map_err(|e| ApiError::new(500, e.to_string()))?;
        self.db.put_record(CREDENTIALS, cluster_id.to_string(), body).await?;
        self.credentials.locked().insert(cluster_id.to_string(), creds);
        Ok(())
    }

    /// The admin credentials reported for cluster `cluster_id` so far.
    pub fn credentials(&self, cluster_id: &str) -> ClusterCredentials {
        self.credentials.locked().get(cluster_id).cloned().unwrap_or_default()
    }

    /// A page of the recorded events (`pool/events.rs`) that `query` selects.
    pub async fn events(
        &self,
        query: crate::store::sqlite::EventQuery,
    ) -> Result<crate::store::sqlite::EventPage, ApiError> {
        Ok(self.db.select_events(query).await?)
    }

    pub async fn cluster_hosts(&self, cluster_id: &str) -> Vec<Host> {
        #[cfg(test)]
        let _turn = gate::enter("backend.cluster_hosts").await;
        let keys: Vec<HostKey> =
            self.members.locked().get(cluster_id).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        visited(keys.len());
        let mut out = Vec::new();
        for key in keys {
            if let Some(h) = self.host(&key).await
                && h.cluster_id.as_deref() == Some(cluster_id)
            {
                out.push(h);
            }
        }
        out
    }
}

/// Where a host record is kept in the database.
fn record_key_of(key: &HostKey) -> String {
    format!("{}/{}", key.infra_env_id, key.host_id)
}

fn not_found(key: &HostKey) -> ApiError {
    ApiError::new(404, format!("Host {} not found in infra-env {}", key.host_id, key.infra_env_id))
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

/// Which hosts the monitors refresh (spec-controllers.md §1.5): the InfraEnv monitor's states, and every host of a
/// cluster.
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn backend() -> Arc<Backend> {
        let db = SqliteStore::open_in_memory().unwrap();
        Backend::load(db, Arc::new(SystemClock), BackendConfig::default()).await.unwrap()
    }

    const HOST: &str = "6f1b1b7e-0f4e-4b6a-9d57-0b8a3c1f2e11";

    fn cluster(id: &str, namespace: &str, name: &str) -> Cluster {
        Cluster {
            id: id.into(),
            namespace: namespace.into(),
            name: name.into(),
            aci_name: name.into(),
            openshift_version: "4.20".into(),
            cpu_architecture: "x86_64".into(),
            kind: "Cluster".into(),
            status: "insufficient".into(),
            status_info: String::new(),
            status_updated_at: Timestamp::UNIX_EPOCH,
            install_started_at: None,
            install_completed_at: None,
        }
    }

    /// An InfraEnv's hosts are its range of the host map: an InfraEnv whose id starts with another's
    /// is not in it, and the fleet around them is not visited.
    #[tokio::test]
    async fn an_infraenvs_hosts_are_exactly_its_own() {
        let backend = backend().await;
        let ids = ["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"];
        for (ie, ns) in [("ie1", "a"), ("ie10", "b"), ("ie0", "c"), ("ie2", "d")] {
            for id in ids {
                backend.register_host(ie, ns, id, "v1", None).await.unwrap();
            }
        }
        let hosts = backend.infra_env_hosts("ie1", |_| true).await;
        let keys: Vec<HostKey> = hosts.iter().map(Host::key).collect();
        assert_eq!(keys, ids.map(|id| HostKey::new("ie1", id)));
        assert_eq!(backend.infra_env_hosts("ie1", |h| h.id == ids[1]).await.len(), 1);
        assert!(backend.infra_env_hosts("ie", |_| true).await.is_empty());
        // The same answer as the whole-fleet filter it replaces.
        for ie in ["ie0", "ie1", "ie10", "ie2", "ie3"] {
            let by_range: Vec<HostKey> = backend.infra_env_hosts(ie, |_| true).await.iter().map(Host::key).collect();
            let by_scan: Vec<HostKey> = backend.hosts(|h| h.infra_env_id == ie).await.iter().map(Host::key).collect();
            assert_eq!(by_range, by_scan, "{ie}");
        }
    }

    /// A cluster is found by its ClusterDeployment through the index, which follows its writes and
    /// its deregistration, and is rebuilt at load.
    #[tokio::test]
    async fn a_cluster_is_found_by_its_cluster_deployment_after_each_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let backend = Backend::load(SqliteStore::open(&path).unwrap(), Arc::new(SystemClock), BackendConfig::default())
            .await
            .unwrap();
        backend.put_cluster(cluster("c1", "ns", "one")).await.unwrap();
        backend.put_cluster(cluster("c2", "ns", "two")).await.unwrap();
        backend.put_cluster(cluster("c3", "other", "one")).await.unwrap();
        let id = |ns: &str, name: &str| {
            let backend = backend.clone();
            let (ns, name) = (ns.to_string(), name.to_string());
            async move { backend.cluster_by_kube_key(&ns, &name).await.map(|c| c.id) }
        };
        assert_eq!(id("ns", "one").await.as_deref(), Some("c1"));
        assert_eq!(id("other", "one").await.as_deref(), Some("c3"));
        assert_eq!(id("ns", "three").await, None);
        // A record that names another ClusterDeployment leaves the old name.
        backend.put_cluster(cluster("c2", "ns", "three")).await.unwrap();
        assert_eq!(id("ns", "two").await, None);
        assert_eq!(id("ns", "three").await.as_deref(), Some("c2"));
        backend.deregister_cluster("c1").await.unwrap();
        assert_eq!(id("ns", "one").await, None);
        drop(backend);
        let reloaded =
            Backend::load(SqliteStore::open(&path).unwrap(), Arc::new(SystemClock), BackendConfig::default())
                .await
                .unwrap();
        assert_eq!(reloaded.cluster_by_kube_key("ns", "three").await.map(|c| c.id).as_deref(), Some("c2"));
        assert_eq!(reloaded.cluster_by_kube_key("other", "one").await.map(|c| c.id).as_deref(), Some("c3"));
        assert!(reloaded.cluster_by_kube_key("ns", "one").await.is_none());
    }

    /// Registrations of one machine id through InfraEnvs of two tenants and two InfraEnvs of one
    /// tenant, run in seeded random orders and concurrently: whatever the order, each tenant ends
    /// with its own records, a namespace holds one record of the id (its Agent's), and no record is
    /// ever found under another namespace's Agent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn registrations_of_one_machine_id_stay_within_their_tenants_in_any_order() {
        // (InfraEnv, namespace)
        let registrations = [("ie-a", "tenant-a"), ("ie-b", "tenant-b"), ("ie-b2", "tenant-b"), ("ie-a", "tenant-a")];
        for seed in 0..64u64 {
            let backend = backend().await;
            let mut order: Vec<usize> = (0..registrations.len()).collect();
            fastrand::Rng::with_seed(seed).shuffle(&mut order);
            let tasks: Vec<_> = order
                .iter()
                .map(|&i| {
                    let (backend, (ie, ns)) = (backend.clone(), registrations[i]);
                    tokio::spawn(async move { backend.register_host(ie, ns, HOST, "v1", None).await })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            }
            let a = backend.host_of_agent("tenant-a", HOST).await.expect("tenant A's host");
            assert_eq!(a.key(), HostKey::new("ie-a", HOST), "seed {seed}");
            let b = backend.host_of_agent("tenant-b", HOST).await.expect("tenant B's host");
            assert!(b.infra_env_id == "ie-b" || b.infra_env_id == "ie-b2", "seed {seed}: {b:?}");
            assert_eq!(b.namespace, "tenant-b");
            // One record per namespace: the one B's InfraEnv that registered last holds.
            let all = backend.hosts(|_| true).await;
            assert_eq!(all.len(), 2, "seed {seed}: {all:?}");
            assert!(backend.host_of_agent("tenant-c", HOST).await.is_none());
        }
    }

    /// A host bound to a cluster in one namespace is not moved by a registration through another
    /// InfraEnv of that namespace, and a cluster takes one machine id once.
    #[tokio::test]
    async fn a_bound_host_does_not_move_and_a_cluster_takes_a_machine_once() {
        let backend = backend().await;
        let now = backend.now();
        backend
            .put_cluster(Cluster {
                id: "c1".into(),
                namespace: "tenant-b".into(),
                name: "c1".into(),
                aci_name: "c1".into(),
                openshift_version: "4.20".into(),
                cpu_architecture: "x86_64".into(),
                kind: "Cluster".into(),
                status: "insufficient".into(),
                status_info: String::new(),
                status_updated_at: now,
                install_started_at: None,
                install_completed_at: None,
            })
            .await
            .unwrap();
        // A pool host whose inventory passed the validations.
        let known_unbound = |ie: &'static str, ns: &'static str| {
            let backend = backend.clone();
            async move {
                backend.register_host(ie, ns, HOST, "v1", None).await.unwrap();
                let key = HostKey::new(ie, HOST);
                let known = |h: &mut Host| {
                    h.status = HostStatus::KnownUnbound;
                    Ok(())
                };
                backend.update_host(&key, known).await.unwrap();
                key
            }
        };
        let b = known_unbound("ie-b", "tenant-b").await;
        backend.bind_host(&b, "c1", "x86_64").await.unwrap();

        let err = backend.register_host("ie-b2", "tenant-b", HOST, "v1", None).await.unwrap_err();
        assert_eq!(err.status, 409, "{err}");
        assert_eq!(backend.host(&b).await.unwrap().cluster_id.as_deref(), Some("c1"));

        // The same machine id through another tenant's InfraEnv is another host, which cannot join
        // c1 a second time.
        let a = known_unbound("ie-a", "tenant-a").await;
        let err = backend.bind_host(&a, "c1", "x86_64").await.unwrap_err();
        assert_eq!(err.status, 409, "{err}");
        assert_eq!(backend.cluster_hosts("c1").await.iter().map(Host::key).collect::<Vec<_>>(), vec![b]);
    }

    /// Every change of a host is an event written with it, in order; a host that flaps keeps its
    /// newest events only; a registration is recorded even when it changes nothing else; and a
    /// deregistered host's events go with it.
    #[tokio::test]
    async fn a_hosts_events_follow_its_changes_within_their_bound_and_go_with_it() {
        use crate::store::sqlite::EventQuery;
        let backend = backend().await;
        let key = HostKey::new("ie-a", HOST);
        let of_host = || EventQuery {
            infra_env_id: Some("ie-a".into()),
            host_ids: Some(vec![HOST.into()]),
            limit: 10_000,
            ..Default::default()
        };
        backend.register_host("ie-a", "tenant-a", HOST, "v1", None).await.unwrap();
        backend.register_host("ie-a", "tenant-a", HOST, "v1", None).await.unwrap();
        let page = backend.events(of_host()).await.unwrap();
        let names: Vec<&str> = page.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["host_registration_succeeded", "host_registration_succeeded"], "{page:?}");

        let flaps = 1000;
        for i in 0..flaps {
            let status = if i % 2 == 0 { HostStatus::KnownUnbound } else { HostStatus::DisconnectedUnbound };
            backend
                .update_host(&key, |h| {
                    h.status = status;
                    Ok(())
                })
                .await
                .unwrap();
        }
        let page = backend.events(of_host()).await.unwrap();
        assert_eq!(page.events.len(), events::HOST_EVENTS_KEPT.0 as usize);
        assert_eq!(page.count, events::HOST_EVENTS_KEPT.0 as u64);
        // In the order of the changes: each one starts where the one before ended, and the last is
        // the host's state.
        let transitions: Vec<(String, String)> = page
            .events
            .iter()
            .map(|e| {
                let rest = e.message.split_once("updated status from ").unwrap().1;
                let (from, to) = rest.split_once(" to ").unwrap();
                let to = to.split_once(" (").map_or(to, |(state, _info)| state);
                (from.to_string(), to.to_string())
            })
            .collect();
        for pair in transitions.windows(2) {
            assert_eq!(pair[0].1, pair[1].0, "{pair:?}");
        }
        let host = backend.host(&key).await.unwrap();
        assert_eq!(transitions.last().unwrap().1, host.status.as_str());

        // Another tenant's host of the same id has its own history.
        backend.register_host("ie-b", "tenant-b", HOST, "v1", None).await.unwrap();
        backend.deregister_host(&key).await.unwrap();
        assert!(backend.events(of_host()).await.unwrap().events.is_empty());
        let other = EventQuery { infra_env_id: Some("ie-b".into()), limit: 10, ..Default::default() };
        assert_eq!(backend.events(other).await.unwrap().events.len(), 1);
    }

    /// Records written under the host id alone, before hosts were keyed by InfraEnv too, are found
    /// and moved to their key at load.
    #[tokio::test]
    async fn records_under_the_old_key_are_moved_at_load() {
        let db = SqliteStore::open_in_memory().unwrap();
        let host = Host::new_registered(HOST, "ie-a", None, "v1", Timestamp::now());
        db.put_record(HOSTS, HOST.to_string(), serde_json::to_string(&host).unwrap()).await.unwrap();
        let backend = Backend::load(db.clone(), Arc::new(SystemClock), BackendConfig::default()).await.unwrap();
        let key = HostKey::new("ie-a", HOST);
        assert!(backend.has_host(&key).await);
        let records: Vec<String> = db.list_records(HOSTS).await.unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(records, vec![format!("ie-a/{HOST}")]);
        // Its namespace is learned at start (`AgentApi::restore_missing_agents`).
        assert!(backend.host_of_agent("tenant-a", HOST).await.is_none());
        backend.set_namespace(&key, "tenant-a").await.unwrap();
        assert_eq!(backend.host_of_agent("tenant-a", HOST).await.unwrap().key(), key);
    }
}
