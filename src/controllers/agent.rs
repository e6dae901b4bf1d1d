//! The agent controller (spec-controllers.md §2): keeps an Agent and its backend host in step. The spec
//! flows to the host (binding, unbinding, approval, host parameters); the host flows back into the
//! status (state, inventory, progress, conditions), labels and disaster-recovery annotations.
//!
//! Binding, unbinding and reclaim as a whole: docs/design.md §5.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use crate::auth::AgentAuth;
use crate::controllers::agent_conditions::*;
use crate::controllers::events_url::{EventsOf, events_url};
use crate::controllers::runtime::{Action, FinalizerEvent, Key, OnAdded, Reconciler, finalizer};
use crate::controllers::spoke::{ReclaimAgentConfig, SpokeClient, SpokeError};
use crate::errors::chain;
use crate::hosts::{Host, HostKind, HostStatus};
use crate::keylocks::Locked as _;
use crate::pool::{ApiError, Backend, Unbind};
use crate::resources::agent::*;
use crate::resources::hive::{AgentClusterInstall, ClusterDeployment};
use crate::resources::{Condition, INFRAENV_NAME_LABEL, InfraEnv, Time, set_condition};
use crate::store::{Store, StoreError};

/// What the controller needs besides the store.
pub struct AgentContext<S: Store> {
    pub store: S,
    pub backend: Arc<Backend>,
    pub auth: AgentAuth,
    /// Where the reclaim agent on a spoke node reaches the agent API.
    pub service_base_url: String,
    /// The CA that verifies `service_base_url`'s certificate where no public CA signed it (`serve
    /// --service-ca-cert`): the reclaim agent gets it, as the discovery image's agent does.
    pub service_ca_cert_pem: Option<String>,
    pub agent_image: String,
    /// BareMetalHosts are managed here (the BMAC runs): an Agent whose BMH exists is returned to the
    /// pool by rebooting it through metal3 (spec-controllers.md §5.5), not by the reclaim agent.
    pub metal3: bool,
    /// The resourceVersions this controller's own writes produced, so that their change events do not
    /// queue the Agent again (see [`OwnWrites`]).
    pub own_writes: OwnWrites,
    /// Signs the Agents' logsURL (claim `cluster_id`), where URLs are signed.
    pub url_signer: Option<Arc<crate::auth::urlsign::UrlSigner>>,
}

/// The last resourceVersions the agent controller wrote, per Agent. A reconcile computes an Agent from
/// the Agent and the world; the change event of its own write would only run it again to find nothing
/// to do, and an Agent is written at nearly every change of its host, so that echo was half the
/// controller's work in a busy pool. Events with any other resourceVersion (a user's edit, another
/// controller's write) still queue the Agent.
#[derive(Default)]
pub struct OwnWrites(std::sync::Mutex<std::collections::HashMap<(String, String), Vec<String>>>);

/// Writes remembered per Agent: a reconcile makes at most two (object, then status, on Kubernetes),
/// and an echo that never comes (a watch that re-listed) must not make the list grow.
const OWN_WRITES_KEPT: usize = 4;

impl OwnWrites {
    fn record(&self, agent: &Agent) {
        let (Some(ns), Some(name), Some(rv)) =
            (&agent.metadata.namespace, &agent.metadata.name, &agent.metadata.resource_version)
        else {
            return;
        };
        let mut writes = self.0.locked();
        let rvs = writes.entry((ns.clone(), name.clone())).or_default();
        if rvs.len() == OWN_WRITES_KEPT {
            rvs.remove(0);
        }
        rvs.push(rv.clone());
    }

    /// Whether an event for `ns/name` at `resource_version` is the echo of one of this controller's
    /// last writes (answered once: the entry goes).
    pub fn is_echo(&self, ns: &str, name: &str, resource_version: Option<&str>) -> bool {
        let Some(rv) = resource_version else { return false };
        let mut writes = self.0.locked();
        let key = (ns.to_string(), name.to_string());
        let Some(rvs) = writes.get_mut(&key) else { return false };
        let Some(at) = rvs.iter().position(|w| w == rv) else { return false };
        rvs.remove(at);
        if rvs.is_empty() {
            writes.remove(&key);
        }
        true
    }
}

const REQUEUE_ON_ERROR: Duration = Duration::from_secs(10);

/// Why the spec could not be synced: input errors wait for the user, backend errors are retried.
/// The SpecSynced condition shows it with its causes.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Something of the Agent or of what it references that the user must fix.
    #[error("{0}")]
    Input(String),
    #[error("Fail to unmarshal installer args for host {host} in infraEnv {infra_env}")]
    InstallerArgs {
        host: String,
        infra_env: String,
        #[source]
        source: serde_json::Error,
    },
    /// Installer arguments assisted-service's check refuses.
    #[error(transparent)]
    InstallerArgsRefused(InstallerArgsError),
    /// `ignitionConfigOverrides` that are not an Ignition config bootstream can apply.
    #[error("invalid ignitionConfigOverrides for host {host} in infraEnv {infra_env}")]
    IgnitionOverrides {
        host: String,
        infra_env: String,
        #[source]
        source: crate::content::ignition::IgnitionError,
    },
    /// Something that failed on our side; retried.
    #[error("{0}")]
    Backend(String),
    #[error("failed to get clusterDeployment with name {name} in namespace {namespace}")]
    ClusterDeployment {
        name: String,
        namespace: String,
        #[source]
        source: StoreError,
    },
    /// A missing secret is the user's to fix; a store failure is retried.
    #[error("failed to get secret {namespace}/{name}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The host pool refused (a client error, the user's to fix) or failed.
    #[error(transparent)]
    Api(ApiError),
}

impl SyncError {
    /// The user's to fix: waits for a change instead of being retried.
    pub fn is_input(&self) -> bool {
        match self {
            SyncError::Input(_)
            | SyncError::InstallerArgs { .. }
            | SyncError::InstallerArgsRefused(_)
            | SyncError::IgnitionOverrides { .. } => true,
            SyncError::Secret { source, .. } => source.is_not_found(),
            SyncError::Api(e) => e.is_client_error(),
            SyncError::Backend(_) | SyncError::ClusterDeployment { .. } | SyncError::Store(_) => false,
        }
    }
}

impl<S: Store> Reconciler for AgentContext<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        reconcile(self, &key.0, &key.1).await
    }
}

pub async fn reconcile<S: Store>(ctx: &AgentContext<S>, ns: &str, name: &str) -> Result<Action, StoreError> {
    let Some(agent) = ctx.store.get::<Agent>(ns, name).await? else {
        return Ok(Action::Done);
    };
    // spec-controllers.md §2.8: deletion and the finalizer.
    finalizer(&ctx.store, AGENT_FINALIZER, OnAdded::Requeue, agent, |event| async move {
        match event {
            FinalizerEvent::Apply(agent) => sync(ctx, agent).await,
            FinalizerEvent::Cleanup(agent) => cleanup(ctx, agent).await,
        }
    })
    .await
}

/// Keeps a live Agent and its host in step.
async fn sync<S: Store>(ctx: &AgentContext<S>, mut agent: Agent) -> Result<Action, StoreError> {
    let ns = agent.metadata.namespace.clone().unwrap_or_default();
    let name = agent.metadata.name.clone().unwrap_or_default();
    let (ns, name) = (ns.as_str(), name.as_str());
    // What the store holds: the status is written if it differs from this, whatever step changed it
    // (clearing the clean-up marker below is a change too).
    let stored_status = agent.status.clone();

    // spec-controllers.md §2.9: an Agent whose host record is gone (a restored backup) gets it back.
    // The record is the one of this Agent's namespace: an Agent never reaches a host of another.
    let Some(mut host) = ctx.backend.host_of_agent(ns, name).await else {
        return restore_host(ctx, agent).await;
    };
    let host_key = host.key();

    // spec-controllers.md §2.8: once an unbound host is back in the pool, remove its node from the cluster it left.
    let mut requeue: Option<Duration> = None;
    if let Some(info) = agent.status.as_ref().and_then(|s| s.deprovision_info.clone())
        && !matches!(
            host.status,
            HostStatus::Unbinding
                | HostStatus::UnbindingPendingUserAction
                | HostStatus::Reclaiming
                | HostStatus::ReclaimingRebooting
        )
    {
        match clean_unbound_spoke_node(ctx, &agent, &info).await {
            Ok(()) => agent.status.get_or_insert_default().deprovision_info = None,
            Err(e) => {
                let message = chain(&e).to_string();
                agent.status.get_or_insert_default().deprovision_info = Some(DeprovisionInfo { message, ..info });
                requeue = Some(REQUEUE_ON_ERROR);
            }
        }
    }

    let infraenv = match agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)) {
        Some(ie) => ctx.store.get::<InfraEnv>(ns, ie).await?,
        None => None,
    };

    // spec-controllers.md §2.3: labels, annotations and the InfraEnv owner. Written with the status at the end (one
    // write where the store can), or by the spec sync if it writes the Agent first.
    let desired = desired_metadata(&agent, &host, infraenv.as_ref());
    let metadata_changed = desired.metadata != agent.metadata;
    agent.metadata = desired.metadata;
    let version_before_sync = agent.metadata.resource_version.clone();

    let sync = sync_spec(ctx, &mut agent, &mut host, infraenv.as_ref()).await;
    if let Err(e) = &sync
        && !e.is_input()
    {
        requeue = Some(REQUEUE_ON_ERROR);
    }
    let metadata_unwritten = metadata_changed && agent.metadata.resource_version == version_before_sync;
    // Reread: binding and unbinding change the host.
    let host = ctx.backend.host(&host_key).await;
    update_status(ctx, agent, stored_status, host.as_ref(), &sync, metadata_unwritten).await?;
    Ok(requeue.map(Action::RequeueAfter).unwrap_or(Action::Done))
}

/// Steps 6–9 of spec-controllers.md §2.4. Returns the SpecSynced outcome.
async fn sync_spec<S: Store>(
    ctx: &AgentContext<S>,
    agent: &mut Agent,
    host: &mut Host,
    infraenv: Option<&InfraEnv>,
) -> Result<(), SyncError> {
    // Unbind: the Agent no longer names a cluster but the host is bound.
    match (&agent.spec.cluster_deployment_name, &host.cluster_id) {
        (None, Some(cid)) => {
            // An installing host stays where it is, whoever wrote the Agent (the admission rule of
            // spec-controllers.md §2.10, held here too for writes that bypass it); a day-2 host may be
            // released, and a cluster being deleted has cancelled its installation.
            if host.status.is_installing()
                && host.kind != HostKind::AddToExistingClusterHost
                && cluster_of_host_alive(ctx, cid).await?
            {
                return Err(SyncError::Input(AgentAdmissionError::ClusterDeploymentImmutable.to_string()));
            }
            return unbind(ctx, agent, host, infraenv).await;
        }
        (Some(cd_ref), cluster_id) => {
            let cd = match ctx.store.get::<ClusterDeployment>(&cd_ref.namespace, &cd_ref.name).await {
                Ok(Some(cd)) => cd,
                Ok(None) => {
                    return Err(SyncError::ClusterDeployment {
                        name: cd_ref.name.clone(),
                        namespace: cd_ref.namespace.clone(),
                        source: StoreError::not_found::<ClusterDeployment>(&cd_ref.name),
                    });
                }
                Err(source) => {
                    return Err(SyncError::ClusterDeployment {
                        name: cd_ref.name.clone(),
                        namespace: cd_ref.namespace.clone(),
                        source,
                    });
                }
            };
            let cd_name = cd.metadata.name.clone().unwrap_or_default();
            // An install not seen yet is no cluster being deleted: on a hub each kind comes through a
            // watch of its own, and the Agent's binding may come before its cluster's install does.
            // Retried (as a cluster record not made yet is, below), not the user's to fix.
            if cluster_id.is_none()
                && cd.metadata.deletion_timestamp.is_none()
                && let Some(aci) = cd.cluster_install_name()
                && ctx.store.get::<AgentClusterInstall>(&cd_ref.namespace, &aci).await?.is_none()
            {
                return Err(SyncError::Backend(format!(
                    "agentClusterInstall {}/{aci} of clusterDeployment {}/{cd_name} not found",
                    cd_ref.namespace, cd_ref.namespace
                )));
            }
            // A cluster being deleted takes no more hosts: its deletion is unbinding them.
            if cluster_id.is_none() && !cluster_alive(ctx, &cd_ref.namespace, &cd_name).await? {
                return Err(SyncError::Input(format!(
                    "clusterDeployment {}/{cd_name} is being deleted; the host is not bound to it",
                    cd_ref.namespace
                )));
            }
            let Some(cluster) = ctx.backend.cluster_by_kube_key(&cd_ref.namespace, &cd_name).await else {
                return Err(SyncError::Backend(format!(
                    "failed to find cluster for clusterDeployment {}/{}: record not found",
                    cd_ref.namespace, cd_name
                )));
            };
            match cluster_id {
                None => {
                    let arch = infraenv.map(|ie| ie.cpu_architecture()).unwrap_or_else(|| "x86_64".into());
                    *host = ctx.backend.bind_host(&host.key(), &cluster.id, &arch).await.map_err(SyncError::Api)?;
                    return Ok(());
                }
                Some(cid) if *cid != cluster.id => {
                    // Moving an installing host is unbinding it: held like the unbind above.
                    if host.status.is_installing() && cluster_of_host_alive(ctx, cid).await? {
                        return Err(SyncError::Input(AgentAdmissionError::ClusterDeploymentImmutable.to_string()));
                    }
                    return unbind(ctx, agent, host, infraenv).await;
                }
                Some(_) => {}
            }
        }
        (None, None) => {}
    }

    // Auto-approval (spec-controllers.md §2.3).
    if !agent.spec.approved && infraenv.and_then(|ie| ie.spec.agent_approval.as_ref()).is_some_and(|a| a.auto_approve) {
        agent.spec.approved = true;
        let status = agent.status.clone();
        *agent = ctx.store.update(&*agent).await.map_err(SyncError::Store)?;
        ctx.own_writes.record(agent);
        agent.status = status;
    }

    // spec-controllers.md §3.1: node labels the InfraEnv propagates.
    if let Some(ie) = infraenv
        && propagate_node_labels(agent, ie)
    {
        let status = agent.status.clone();
        *agent = ctx.store.update(&*agent).await.map_err(SyncError::Store)?;
        ctx.own_writes.record(agent);
        agent.status = status;
    }

    // spec-controllers.md §2.1: the spec pushed to the host.
    let spec = agent.spec.clone();
    let ignition_token = match &spec.ignition_endpoint_token_reference {
        None => String::new(),
        Some(r) => match ctx.store.get::<Secret>(&r.namespace, &r.name).await {
            Ok(Some(secret)) => match crate::resources::secret_value(&secret, IGNITION_TOKEN_KEY) {
                Some(token) => {
                    super::label_followed_secret(&ctx.store, &secret).await.map_err(SyncError::Store)?;
                    token
                }
                None => return Err(SyncError::Input(format!("secret {} did not contain key value", r.name))),
            },
            Ok(None) => {
                return Err(SyncError::Secret {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    source: StoreError::not_found::<Secret>(&r.name),
                });
            }
            Err(source) => {
                return Err(SyncError::Secret { namespace: r.namespace.clone(), name: r.name.clone(), source });
            }
        },
    };
    let ignition_headers = match spec.ignition_endpoint_http_headers.as_ref().filter(|h| !h.is_empty()) {
        None => String::new(),
        Some(h) => {
            serde_json::to_string(&h.iter().map(|(k, v)| serde_json::json!({"key": k, "value": v})).collect::<Vec<_>>())
                .expect("headers serialize")
        }
    };
    let installer_args = match spec.installer_args.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => String::new(),
        Some(text) => match serde_json::from_str::<Vec<String>>(text) {
            Ok(args) => {
                check_installer_args(&args).map_err(SyncError::InstallerArgsRefused)?;
                serde_json::to_string(&args).expect("strings serialize")
            }
            Err(source) => {
                return Err(SyncError::InstallerArgs {
                    host: host.id.clone(),
                    infra_env: host.infra_env_id.clone(),
                    source,
                });
            }
        },
    };
    let ignition_overrides = match spec.ignition_config_overrides.as_deref().filter(|s| !s.trim().is_empty()) {
        None => String::new(),
        Some(text) => {
            let invalid = |source| SyncError::IgnitionOverrides {
                host: host.id.clone(),
                infra_env: host.infra_env_id.clone(),
                source,
            };
            if text.len() > MAX_IGNITION_OVERRIDES_BYTES {
                return Err(SyncError::Input(format!(
                    "ignitionConfigOverrides of host {} is {} bytes, over the {MAX_IGNITION_OVERRIDES_BYTES} allowed",
                    host.id,
                    text.len()
                )));
            }
            crate::content::ignition::parse_config(text).map_err(invalid)?;
            text.to_string()
        }
    };
    let node_labels = spec
        .node_labels
        .as_ref()
        .filter(|m| !m.is_empty())
        .map(|m| serde_json::to_string(m).expect("labels serialize"))
        .unwrap_or_default();
    let params_allowed = host.status.accepts_host_parameters();
    *host = ctx
        .backend
        .update_host(&host.key(), |h| {
            h.approved = spec.approved;
            if params_allowed {
                if let Some(v) = spec.hostname.as_deref().filter(|v| !v.is_empty()) {
                    h.requested_hostname = v.to_string();
                }
                if let Some(v) = spec.role.as_deref().filter(|v| !v.is_empty()) {
                    h.role = v.to_string();
                }
                if let Some(v) = spec.machine_config_pool.as_deref().filter(|v| !v.is_empty()) {
                    h.machine_config_pool_name = v.to_string();
                }
                if let Some(v) = spec.installation_disk_path.as_deref().filter(|v| !v.is_empty()) {
                    h.installation_disk_path = v.to_string();
                } else if let Some(v) = spec.installation_disk_id.as_deref().filter(|v| !v.is_empty()) {
                    h.installation_disk_id = v.to_string();
                }
                h.node_labels = node_labels;
                h.ignition_endpoint_token = ignition_token;
                h.ignition_endpoint_http_headers = ignition_headers;
            }
            h.installer_args = installer_args;
            h.ignition_config_overrides = ignition_overrides;
            Ok(())
        })
        .await
        .map_err(SyncError::Api)?;

    // Day 2: an approved, ready host of an installed cluster installs on its own.
    if host.kind == HostKind::AddToExistingClusterHost && host.status == HostStatus::Known && host.approved {
        *host = ctx
            .backend
            .fire_event(&host.key(), crate::hosts::machine::Event::InstallHost)
            .await
            .map_err(SyncError::Api)?;
    }
    Ok(())
}

/// Largest `ignitionConfigOverrides` taken: the discovery Ignition archive's own limit.
const MAX_IGNITION_OVERRIDES_BYTES: usize = 256 << 10;
/// Largest installer argument list, and argument, taken (coreos-installer's whole command line).
const MAX_INSTALLER_ARGS: usize = 128;
const MAX_INSTALLER_ARG_BYTES: usize = 4096;

/// The coreos-installer flags an Agent's `installerArgs` may pass (assisted-service's
/// `pkg/validations.ValidateInstallerArgs`).
pub const ALLOWED_INSTALLER_FLAGS: &[&str] = &[
    "--append-karg",
    "--delete-karg",
    "-n",
    "--copy-network",
    "--network-dir",
    "--save-partlabel",
    "--save-partindex",
    "--image-url",
    "--image-file",
];

/// Installer arguments [`check_installer_args`] refuses, worded as assisted-service words them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallerArgsError {
    #[error("{0} installer arguments, over the {MAX_INSTALLER_ARGS} allowed")]
    TooMany(usize),
    #[error("an installer argument of {0} bytes, over the {MAX_INSTALLER_ARG_BYTES} allowed")]
    TooLong(usize),
    #[error("found unexpected flag {flag} for installer - allowed flags are [{}]", ALLOWED_INSTALLER_FLAGS.join(" "))]
    Flag { flag: String },
    #[error("found unexpected chars in value {0} for installer")]
    Chars(String),
}

/// assisted-service's check of installer arguments, with its messages: every flag one of
/// [`ALLOWED_INSTALLER_FLAGS`], every value of the characters its expression
/// `^[A-Za-z0-9@!#$%*()_+-=//.,";':{}\[\]]+$` takes (no spaces, quotes only as given; `+-=`
/// there is the range from `+` to `=`). Bounded too: the arguments reach the install command.
pub fn check_installer_args(args: &[String]) -> Result<(), InstallerArgsError> {
    if args.len() > MAX_INSTALLER_ARGS {
        return Err(InstallerArgsError::TooMany(args.len()));
    }
    for arg in args {
        if arg.len() > MAX_INSTALLER_ARG_BYTES {
            return Err(InstallerArgsError::TooLong(arg.len()));
        }
        if arg.starts_with('-') {
            if !ALLOWED_INSTALLER_FLAGS.contains(&arg.as_str()) {
                return Err(InstallerArgsError::Flag { flag: arg.clone() });
            }
            continue;
        }
        let allowed =
            |b: u8| b.is_ascii_alphanumeric() || b"@!#$%*()_/.,\";':{}[]".contains(&b) || (b'+'..=b'=').contains(&b);
        if arg.is_empty() || !arg.bytes().all(allowed) {
            return Err(InstallerArgsError::Chars(arg.clone()));
        }
    }
    Ok(())
}

/// spec-controllers.md §3.1 `propagate-node-labels`: the InfraEnv labels it names become the Agent's node labels; the
/// keys taken are remembered in an annotation, so that a label the InfraEnv no longer propagates (or no longer
/// has) is removed again, while node labels set by hand are left alone. Returns whether the Agent changed.
fn propagate_node_labels(agent: &mut Agent, ie: &InfraEnv) -> bool {
    let keys: Vec<&str> = ie
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROPAGATE_NODE_LABELS_ANNOTATION))
        .map(|list| list.split(',').map(str::trim).filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    let ie_labels = ie.metadata.labels.clone().unwrap_or_default();
    let wanted: BTreeMap<String, String> =
        keys.iter().filter_map(|k| ie_labels.get(*k).map(|v| (k.to_string(), v.clone()))).collect();
    let annotations = agent.metadata.annotations.clone().unwrap_or_default();
    let inherited: Vec<String> = annotations
        .get(INHERITED_NODE_LABELS_ANNOTATION)
        .map(|list| list.split(',').filter(|k| !k.is_empty()).map(str::to_string).collect())
        .unwrap_or_default();
    if wanted.is_empty() && inherited.is_empty() {
        return false;
    }
    let before = (agent.spec.node_labels.clone(), agent.metadata.annotations.clone());
    let labels = agent.spec.node_labels.get_or_insert_default();
    for k in &inherited {
        if !wanted.contains_key(k) {
            labels.remove(k);
        }
    }
    labels.extend(wanted.clone());
    if labels.is_empty() {
        agent.spec.node_labels = None;
    }
    let ann = agent.metadata.annotations.get_or_insert_default();
    if wanted.is_empty() {
        ann.remove(INHERITED_NODE_LABELS_ANNOTATION);
    } else {
        ann.insert(INHERITED_NODE_LABELS_ANNOTATION.to_string(), wanted.keys().cloned().collect::<Vec<_>>().join(","));
    }
    (agent.spec.node_labels.clone(), agent.metadata.annotations.clone()) != before
}

/// spec-controllers.md §2.7: unbinds the host, with reclaim when the node can be rebooted into discovery by an agent we
/// start on it.
async fn unbind<S: Store>(
    ctx: &AgentContext<S>,
    agent: &mut Agent,
    host: &mut Host,
    infraenv: Option<&InfraEnv>,
) -> Result<(), SyncError> {
    let ie_cluster =
        infraenv.and_then(|ie| ie.spec.cluster_ref.as_ref()).map(|r| format!("{}/{}", r.namespace, r.name));
    // An unbind the pool refuses (the InfraEnv names a cluster) is refused before anything is written to the
    // spoke: upstream started the privileged reclaim DaemonSet there first and left it running.
    if let Some(refused) = crate::pool::unbind_refusal(host, ie_cluster.as_deref()) {
        return Err(SyncError::Api(refused));
    }
    let cluster = match &host.cluster_id {
        Some(cid) => ctx.backend.cluster(cid).await,
        None => None,
    };
    let mut how = Unbind::WaitForReboot { not_reclaimed: None };
    let not_reclaimed;
    let mut deprovision = None;
    // A cluster being deleted is left as it is ("the installed OCP cluster, if exists, will not be
    // affected by the deletion of the ClusterDeployment"): its hosts are unbound without reclaim and
    // their nodes stay. Whether the cluster's deletion or the user's edit unbinds the host, and whether
    // the cluster record is still there when it does, the host ends the same way.
    let alive = match &cluster {
        Some(c) => cluster_alive(ctx, &c.namespace, &c.name).await?,
        None => false,
    };
    if let Some(cluster) = cluster.filter(|c| alive && !c.name.is_empty() && !c.namespace.is_empty()) {
        // Reclaim is for installed nodes only: ReclaimHost has no rule for hosts mid-installation, where
        // a plain unbind is what works (spec-controllers.md §11).
        let installed = matches!(host.status, HostStatus::Installed | HostStatus::AddedToExistingCluster);
        let node_name = agent.spec.hostname.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| host.hostname());
        if installed && has_bare_metal_host(ctx, agent).await {
            tracing::info!(host = %host.id, "not reclaiming: the BareMetalHost returns the host to its InfraEnv");
        } else if installed && let Some(why) = no_discovery_agent(agent, infraenv) {
            // The node would leave its cluster for an image whose agent never registers, and come back only
            // through a BMC or a person after the reclaim timeout: better keep it where it is and say why.
            tracing::info!(host = %host.id, "not reclaiming: {why}");
            not_reclaimed = why;
            how = Unbind::WaitForReboot { not_reclaimed: Some(&not_reclaimed) };
        } else if installed {
            match run_reclaim_agent(ctx, &cluster.namespace, &cluster.name, host, &node_name).await {
                Ok(()) => how = Unbind::Reclaim,
                Err(e) => {
                    tracing::info!(host = %host.id, "not reclaiming, the host waits for a reboot: {}", chain(&e))
                }
            }
        }
        deprovision = Some(DeprovisionInfo {
            cluster_name: cluster.name.clone(),
            cluster_namespace: cluster.namespace.clone(),
            node_name,
            message: "Waiting for host to unbind to do spoke cleanup".to_string(),
        });
    }
    *host = ctx.backend.unbind_host(&host.key(), how, ie_cluster.as_deref()).await.map_err(SyncError::Api)?;
    let status = agent.status.get_or_insert_default();
    if deprovision.is_some() {
        status.deprovision_info = deprovision;
    }
    status.csr_status = Default::default();
    Ok(())
}

/// Why the host's InfraEnv image would not bring the node back into the pool, if it would not: reclaim reboots the
/// node into that image, and only an image whose discovery agent starts registers it again.
fn no_discovery_agent(agent: &Agent, infraenv: Option<&InfraEnv>) -> Option<String> {
    let Some(ie) = infraenv else {
        let name = agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL));
        return Some(format!(
            "not reclaimed: its InfraEnv {} is not found, so there is no discovery image to reboot it into",
            name.map(String::as_str).unwrap_or("(none labelled)")
        ));
    };
    crate::content::ironic::enabled(ie).then(|| {
        format!(
            "not reclaimed: InfraEnv {} boots the ironic agent ({}), which does not start the discovery agent; \
             return the host through its BareMetalHost, or reboot it into another InfraEnv's image",
            ie.metadata.name.as_deref().unwrap_or_default(),
            crate::content::ironic::ENABLE_IRONIC_AGENT_ANNOTATION
        )
    })
}

/// spec-controllers.md §2.7 `shouldReclaimOnUnbind`: with metal3, an Agent labelled with an existing BMH (or whose BMH
/// cannot be looked up) is left to the BMAC.
async fn has_bare_metal_host<S: Store>(ctx: &AgentContext<S>, agent: &Agent) -> bool {
    if !ctx.metal3 {
        return false;
    }
    let Some(bmh) = agent.metadata.labels.as_ref().and_then(|l| l.get(BMH_LABEL)) else { return false };
    let ns = agent.metadata.namespace.as_deref().unwrap_or_default();
    !matches!(ctx.store.get::<crate::resources::BareMetalHost>(ns, bmh).await, Ok(None))
}

/// The admin kubeconfig of a ClusterDeployment's cluster, as a spoke client.
async fn spoke_client<S: Store>(
    ctx: &AgentContext<S>,
    cd_ns: &str,
    cd_name: &str,
) -> Result<Option<SpokeClient>, SpokeError> {
    crate::controllers::spoke::for_cluster(&ctx.store, cd_ns, cd_name).await
}

/// spec-controllers.md §7.2: starts the reclaim agent on the node through the cluster's admin kubeconfig.
async fn run_reclaim_agent<S: Store>(
    ctx: &AgentContext<S>,
    cd_ns: &str,
    cd_name: &str,
    host: &Host,
    node_name: &str,
) -> Result<(), SpokeError> {
    let client = crate::controllers::spoke::for_cluster_required(&ctx.store, cd_ns, cd_name).await?;
    let cfg = ReclaimAgentConfig {
        node_name: node_name.to_string(),
        infra_env_id: host.infra_env_id.clone(),
        host_id: host.id.clone(),
        service_base_url: ctx.service_base_url.clone(),
        agent_image: ctx.agent_image.clone(),
        auth_token: ctx.auth.token(&host.infra_env_id),
        // As the discovery image's agent: bootstream never turns the agent's certificate check off.
        skip_cert_verification: false,
        ca_cert: ctx.service_ca_cert_pem.clone(),
    };
    client.ensure_reclaim_agent(&cfg).await
}

/// spec-controllers.md §2.8 `cleanUnboundSpokeNode`.
async fn clean_unbound_spoke_node<S: Store>(
    ctx: &AgentContext<S>,
    agent: &Agent,
    info: &DeprovisionInfo,
) -> Result<(), SpokeError> {
    if has_annotation(agent, SKIP_SPOKE_CLEANUP_ANNOTATION) {
        return Ok(());
    }
    let client = match spoke_client(ctx, &info.cluster_namespace, &info.cluster_name).await? {
        Some(c) => c,
        None => {
            tracing::debug!(agent = ?agent.metadata.name, "no admin kubeconfig for {}/{}; skipping spoke cleanup", info.cluster_namespace, info.cluster_name);
            return Ok(());
        }
    };
    client.remove_spoke_resources(&info.node_name).await
}

fn has_annotation(agent: &Agent, key: &str) -> bool {
    agent.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

/// spec-controllers.md §2.8 `handleAgentFinalizer`: what an Agent being deleted leaves behind is cleaned up (spoke
/// node, host record); Done once the Agent may go.
async fn cleanup<S: Store>(ctx: &AgentContext<S>, mut agent: Agent) -> Result<Action, StoreError> {
    let name = agent.metadata.name.clone().unwrap_or_default();
    let ns = agent.metadata.namespace.clone().unwrap_or_default();
    let host = ctx.backend.host_of_agent(&ns, &name).await;
    let spoke_resources_exist = host.as_ref().is_some_and(|h| h.progress.current_stage == "Done")
        || agent.status.as_ref().is_some_and(|s| s.csr_status.approved_csrs.as_ref().is_some_and(|c| !c.is_empty()))
        || spoke_bmh_created(ctx, &agent).await?;
    if !has_annotation(&agent, SKIP_SPOKE_CLEANUP_ANNOTATION)
        && let Some(cd_ref) = agent.spec.cluster_deployment_name.clone()
        && spoke_resources_exist
    {
        let alive = cluster_alive(ctx, &cd_ref.namespace, &cd_ref.name).await? && infraenv_alive(ctx, &agent).await?;
        if alive {
            let node = agent
                .spec
                .hostname
                .clone()
                .filter(|h| !h.is_empty())
                .or(host.as_ref().map(Host::hostname))
                .unwrap_or_default();
            let result = match spoke_client(ctx, &cd_ref.namespace, &cd_ref.name).await {
                Ok(Some(client)) => client.remove_spoke_resources(&node).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                let status = agent.status.get_or_insert_default();
                set_condition(
                    &mut status.conditions,
                    condition(
                        CLEANUP,
                        "False",
                        "CleanupFailed",
                        &format!("failed to clean spoke cluster resources: {}", chain(&e)),
                    ),
                    Time(crate::resources::now_seconds()),
                );
                ctx.store.update_status(&agent).await?;
                return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
            }
        } else {
            tracing::info!(agent = %name, "skipping spoke resource removal for deleted cluster");
        }
    }
    if let Some(host) = &host
        && let Err(e) = ctx.backend.deregister_host(&host.key()).await
    {
        tracing::warn!(agent = %name, "failed to deregister host: {}", chain(&e));
        return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
    }
    tracing::debug!(namespace = %ns, agent = %name, "agent cleaned up; its finalizer goes");
    Ok(Action::Done)
}

/// Whether the BMAC created a Machine and BareMetalHost for this Agent on the spoke (spec-controllers.md §5.7): its
/// hub BMH carries the annotation saying so.
async fn spoke_bmh_created<S: Store>(ctx: &AgentContext<S>, agent: &Agent) -> Result<bool, StoreError> {
    let Some(bmh) = agent.metadata.labels.as_ref().and_then(|l| l.get(BMH_LABEL)) else { return Ok(false) };
    let ns = agent.metadata.namespace.as_deref().unwrap_or_default();
    Ok(ctx
        .store
        .get::<crate::resources::BareMetalHost>(ns, bmh)
        .await?
        .is_some_and(|b| b.annotation(crate::resources::metal3::SPOKE_BMH_MACHINE_CREATED_ANNOTATION).is_some()))
}

async fn cluster_alive<S: Store>(ctx: &AgentContext<S>, ns: &str, name: &str) -> Result<bool, StoreError> {
    let Some(cd) = ctx.store.get::<ClusterDeployment>(ns, name).await? else { return Ok(false) };
    if cd.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let Some(aci_name) = cd.cluster_install_name() else { return Ok(false) };
    Ok(ctx
        .store
        .get::<AgentClusterInstall>(ns, &aci_name)
        .await?
        .is_some_and(|aci| aci.metadata.deletion_timestamp.is_none()))
}

/// Whether the cluster a host is bound to (by its record's id) still exists and is not being deleted.
async fn cluster_of_host_alive<S: Store>(ctx: &AgentContext<S>, cluster_id: &str) -> Result<bool, StoreError> {
    match ctx.backend.cluster(cluster_id).await {
        Some(c) => cluster_alive(ctx, &c.namespace, &c.name).await,
        None => Ok(false),
    }
}

async fn infraenv_alive<S: Store>(ctx: &AgentContext<S>, agent: &Agent) -> Result<bool, StoreError> {
    let ns = agent.metadata.namespace.clone().unwrap_or_default();
    let Some(ie) = agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)) else { return Ok(false) };
    Ok(ctx.store.get::<InfraEnv>(&ns, ie).await?.is_some_and(|ie| ie.metadata.deletion_timestamp.is_none()))
}

/// spec-controllers.md §2.9 `restoreHostByAgent`.
async fn restore_host<S: Store>(ctx: &AgentContext<S>, agent: Agent) -> Result<Action, StoreError> {
    let ns = agent.metadata.namespace.clone().unwrap_or_default();
    let name = agent.metadata.name.clone().unwrap_or_default();
    let Some(ie_name) = agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)).cloned() else {
        tracing::warn!(agent = %name, "Missing InfraEnv name label");
        return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
    };
    let Some(ie) = ctx.store.get::<InfraEnv>(&ns, &ie_name).await? else {
        return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
    };
    let cluster_id = match &agent.spec.cluster_deployment_name {
        Some(r) => ctx.backend.cluster_by_kube_key(&r.namespace, &r.name).await.map(|c| c.id),
        None => None,
    };
    let annotations = agent.metadata.annotations.clone().unwrap_or_default();
    let created = agent.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_else(crate::resources::now_seconds);
    let mut host =
        Host::new_registered(&name, ie.metadata.uid.as_deref().unwrap_or_default(), cluster_id.clone(), "", created);
    host.namespace = ns.clone();
    host.checked_in_at = Some(created);
    host.status = annotations.get(STATE_ANNOTATION).and_then(|s| s.parse().ok()).unwrap_or(if cluster_id.is_some() {
        HostStatus::Known
    } else {
        HostStatus::KnownUnbound
    });
    if let Some(role) = annotations.get(ROLE_ANNOTATION) {
        host.role = role.clone();
        host.suggested_role = role.clone();
    }
    host.inventory = annotations.get(INVENTORY_ANNOTATION).cloned().map(Into::into);
    host.validations_info = annotations.get(VALIDATIONS_INFO_ANNOTATION).cloned();
    if let Some(stage) = annotations.get(CURRENT_STAGE_ANNOTATION) {
        host.progress.current_stage = stage.clone();
    }
    host.approved = agent.spec.approved;
    if let Err(e) = ctx.backend.restore_host(host).await {
        // The Agent's host registered (or moved here) meanwhile: nothing to restore.
        if ctx.backend.host_of_agent(&ns, &name).await.is_some() {
            return Ok(Action::RequeueAfter(Duration::ZERO));
        }
        let mut agent = agent;
        let status = agent.status.get_or_insert_default();
        set_condition(
            &mut status.conditions,
            condition(
                SPEC_SYNCED,
                "False",
                REASON_INPUT_ERROR,
                &format!("{MESSAGE_SYNC_INPUT_ERROR}{}. Cannot restore.", e.message),
            ),
            Time(crate::resources::now_seconds()),
        );
        ctx.store.update_status(&agent).await?;
    }
    Ok(Action::RequeueAfter(Duration::from_secs(60)))
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: None,
        last_heartbeat_time: None,
        last_probe_time: None,
    }
}

struct DesiredMetadata {
    metadata: crate::resources::ObjectMeta,
}

/// spec-controllers.md §2.3: labels and annotations the controller maintains.
fn desired_metadata(agent: &Agent, host: &Host, infraenv: Option<&InfraEnv>) -> DesiredMetadata {
    let mut meta = agent.metadata.clone();
    let labels = meta.labels.get_or_insert_default();
    if let Some(ie) = infraenv {
        labels.insert(INFRAENV_NAME_LABEL.to_string(), ie.metadata.name.clone().unwrap_or_default());
        let owners = meta.owner_references.get_or_insert_default();
        let uid = ie.metadata.uid.clone().unwrap_or_default();
        if !owners.iter().any(|o| o.uid == uid) {
            owners.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "agent-install.openshift.io/v1beta1".into(),
                kind: "InfraEnv".into(),
                name: ie.metadata.name.clone().unwrap_or_default(),
                uid,
                ..Default::default()
            });
        }
    }
    let labels = meta.labels.get_or_insert_default();
    labels.insert(
        CD_NAMESPACE_LABEL.to_string(),
        agent.spec.cluster_deployment_name.as_ref().map(|r| r.namespace.clone()).unwrap_or_default(),
    );
    if let Some(inv) = host.parsed_inventory() {
        let mut put = |key: &str, value: String| {
            let v = sanitize_label_value(&value);
            if valid_label_value(&v) {
                labels.insert(format!("inventory.agent-install.openshift.io/{key}"), v);
            }
        };
        put("storage-hasnonrotationaldisk", inv.disks.iter().any(|d| d.drive_type == "SSD").to_string());
        put("cpu-architecture", inv.cpu.architecture.clone());
        put("cpu-virtenabled", inv.cpu.flags.iter().any(|f| f == "vmx" || f == "svm").to_string());
        put("host-manufacturer", inv.system_vendor.manufacturer.clone());
        put("host-productname", inv.system_vendor.product_name.clone());
        put("host-isvirtual", inv.system_vendor.virtual_.to_string());
    }
    let ann = meta.annotations.get_or_insert_default();
    ann.insert(STATE_ANNOTATION.to_string(), host.status.as_str().to_string());
    ann.insert(ROLE_ANNOTATION.to_string(), host.role.clone());
    ann.insert(INVENTORY_VERSION_ANNOTATION.to_string(), "0.1".to_string());
    match &host.inventory {
        Some(inv) => ann.insert(INVENTORY_ANNOTATION.to_string(), inv.to_string()),
        None => ann.remove(INVENTORY_ANNOTATION),
    };
    match &host.validations_info {
        Some(v) => ann.insert(VALIDATIONS_INFO_ANNOTATION.to_string(), v.clone()),
        None => ann.remove(VALIDATIONS_INFO_ANNOTATION),
    };
    if host.progress.current_stage.is_empty() {
        ann.remove(CURRENT_STAGE_ANNOTATION);
    } else {
        ann.insert(CURRENT_STAGE_ANNOTATION.to_string(), host.progress.current_stage.clone());
    }
    DesiredMetadata { metadata: meta }
}

fn sanitize_label_value(v: &str) -> String {
    v.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

fn valid_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric()) && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

/// Step 10: the status from the host and the sync outcome, written if it differs from `before` (the
/// stored status); with the metadata too when `metadata_unwritten`.
async fn update_status<S: Store>(
    ctx: &AgentContext<S>,
    mut agent: Agent,
    before: Option<crate::resources::agent::AgentStatus>,
    host: Option<&Host>,
    sync: &Result<(), SyncError>,
    metadata_unwritten: bool,
) -> Result<(), StoreError> {
    let now = Time(crate::resources::now_seconds());
    let status = agent.status.get_or_insert_default();
    for c in agent_conditions(host, sync, agent.spec.approved) {
        set_condition(&mut status.conditions, c, now.clone());
    }
    match host {
        Some(h) => {
            status.debug_info.state = h.status.as_str().to_string();
            status.debug_info.state_info = h.status_info.clone();
            status.bootstrap = h.bootstrap;
            status.role = if h.role == "auto-assign" && !h.suggested_role.is_empty() {
                h.suggested_role.clone()
            } else {
                h.role.clone()
            };
            // A host's inventory is cleared when it is bound or unbound and comes again when its agent
            // reports; meanwhile the Agent keeps the last one it had (as upstream does): the BMAC finds a
            // host waiting for a reboot into discovery by the MACs in it.
            if let Some(inventory) = h.parsed_inventory() {
                status.inventory = AgentInventory::from_host(inventory, h);
            }
            status.progress = AgentProgress::from_host(h);
            status.validations_info = h.validations_info.as_deref().and_then(|v| serde_json::from_str(v).ok());
            status.installation_disk_id = h.installation_disk_id.clone();
            status.kind = h.kind.as_str().to_string();
            // spec-controllers.md §2.2, signed with a token that reads events only.
            status.debug_info.events_url = events_url(
                &status.debug_info.events_url,
                &ctx.service_base_url,
                EventsOf::Host { host_id: &h.id, infra_env_id: &h.infra_env_id },
                ctx.url_signer.as_deref(),
            );
            // Set once, when the installer has uploaded the host's logs (spec-controllers.md §2.2).
            if status.debug_info.logs_url.is_empty()
                && h.logs_collected_at.is_some()
                && let Some(cluster_id) = &h.cluster_id
            {
                let api_key = ctx.url_signer.as_ref().map(|s| format!("&api_key={}", s.sign_cluster(cluster_id)));
                status.debug_info.logs_url = format!(
                    "{}/api/assisted-install/v2/clusters/{cluster_id}/logs?host_id={}&logs_type=host{}",
                    ctx.service_base_url,
                    h.id,
                    api_key.unwrap_or_default()
                );
            }
        }
        None => {
            status.debug_info.state.clear();
            status.debug_info.state_info.clear();
        }
    }
    let written = match (metadata_unwritten, agent.status != before) {
        (true, true) if ctx.store.writes_object_and_status_at_once() => ctx.store.update_with_status(&agent).await?,
        (true, true) => {
            // Two writes and two change events, both this controller's own.
            let stored = ctx.store.update(&agent).await?;
            ctx.own_writes.record(&stored);
            agent.metadata = stored.metadata;
            ctx.store.update_status(&agent).await?
        }
        (true, false) => ctx.store.update(&agent).await?,
        (false, true) => ctx.store.update_status(&agent).await?,
        (false, false) => return Ok(()),
    };
    ctx.own_writes.record(&written);
    Ok(())
}

/// spec-controllers.md §2.5–spec-controllers.md §2.6: the six conditions of an Agent.
pub fn agent_conditions(host: Option<&Host>, sync: &Result<(), SyncError>, approved: bool) -> Vec<Condition> {
    let synced = match sync {
        Ok(()) => condition(SPEC_SYNCED, "True", REASON_SYNC_OK, MESSAGE_SYNC_OK),
        Err(e) if e.is_input() => {
            condition(SPEC_SYNCED, "False", REASON_INPUT_ERROR, &format!("{MESSAGE_SYNC_INPUT_ERROR}{}", chain(e)))
        }
        Err(e) => {
            condition(SPEC_SYNCED, "False", REASON_BACKEND_ERROR, &format!("{MESSAGE_SYNC_BACKEND_ERROR}{}", chain(e)))
        }
    };
    let Some(host) = host else {
        let mut out = vec![synced];
        for t in [INSTALLED, CONNECTED, REQUIREMENTS_MET, VALIDATED, BOUND] {
            out.push(condition(t, "Unknown", REASON_NOT_AVAILABLE, MESSAGE_NOT_AVAILABLE));
        }
        return out;
    };
    from_host(host, approved, synced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_synced(error: SyncError) -> (String, String) {
        let c = agent_conditions(None, &Err(error), false).into_iter().find(|c| c.type_ == SPEC_SYNCED).unwrap();
        (c.reason, c.message)
    }

    #[test]
    fn spec_synced_shows_what_failed_and_why_and_who_must_act() {
        let missing_cd = SyncError::ClusterDeployment {
            name: "cd".into(),
            namespace: "ns".into(),
            source: StoreError::not_found::<ClusterDeployment>("cd"),
        };
        assert_eq!(
            spec_synced(missing_cd),
            (
                REASON_BACKEND_ERROR.to_string(),
                format!(
                    "{MESSAGE_SYNC_BACKEND_ERROR}failed to get clusterDeployment with name cd in namespace ns: \
                     clusterdeployments.hive.openshift.io \"cd\" not found"
                )
            )
        );
        let secret = |source| SyncError::Secret { namespace: "ns".into(), name: "token".into(), source };
        assert_eq!(
            spec_synced(secret(StoreError::not_found::<Secret>("token"))),
            (
                REASON_INPUT_ERROR.to_string(),
                format!("{MESSAGE_SYNC_INPUT_ERROR}failed to get secret ns/token: secrets \"token\" not found")
            )
        );
        let (reason, message) = spec_synced(secret(StoreError::backend(std::io::Error::other("disk full"))));
        assert_eq!(reason, REASON_BACKEND_ERROR);
        assert_eq!(message, format!("{MESSAGE_SYNC_BACKEND_ERROR}failed to get secret ns/token: store: disk full"));
        let args = serde_json::from_str::<Vec<String>>("[1]").unwrap_err();
        let (reason, message) =
            spec_synced(SyncError::InstallerArgs { host: "h".into(), infra_env: "ie".into(), source: args });
        assert_eq!(reason, REASON_INPUT_ERROR);
        assert!(
            message.starts_with(&format!(
                "{MESSAGE_SYNC_INPUT_ERROR}Fail to unmarshal installer args for host h in infraEnv ie: invalid type"
            )),
            "{message}"
        );
    }
}
