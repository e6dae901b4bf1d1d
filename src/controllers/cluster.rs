//! ClusterDeployment + AgentClusterInstall (spec-controllers.md §4): the backend cluster record of each
//! pair, a minimal installation flow over its bound agents, and deletion, which returns late-bound
//! agents to their InfraEnv and deletes those of an InfraEnv made for the cluster.

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::controllers::cluster_conditions::{self as conds, ClusterFacts, RoleCounts, SpecSync};
use crate::controllers::runtime::{Action, FinalizerEvent, Key, OnAdded, Reconciler, finalizer};
use crate::errors::chain;
use crate::hosts::machine::Event;
use crate::hosts::{Host, HostStatus};
use crate::pool::{Backend, Cluster, ClusterCredentials};
use crate::resources::agent::Agent;
use crate::resources::hive::{
    AgentClusterInstall, ClusterDeployment, ClusterImageSet, ClusterMetadata, ValidationResult,
};
use crate::resources::references::Ref;
use crate::resources::{INFRAENV_NAME_LABEL, InfraEnv, LocalObjectReference, Time, set_condition};
use crate::store::{Store, StoreError};

pub const CD_FINALIZER: &str = "clusterdeployments.agent-install.openshift.io/ai-deprovision";
pub const ACI_FINALIZER: &str = "agentclusterinstall.agent-install.openshift.io/ai-deprovision";

pub struct ClusterContext<S: Store> {
    pub store: S,
    pub backend: Arc<Backend>,
    /// Where the AgentClusterInstall's eventsURL points, and what signs it.
    pub service_base_url: String,
    pub url_signer: Option<Arc<crate::auth::urlsign::UrlSigner>>,
}

const REQUEUE_ON_ERROR: Duration = Duration::from_secs(10);

fn key(meta: &crate::resources::ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

impl<S: Store> Reconciler for ClusterContext<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        reconcile(self, &key.0, &key.1).await
    }
}

/// Reconciles the ClusterDeployment `ns/name` and its AgentClusterInstall.
pub async fn reconcile<S: Store>(ctx: &ClusterContext<S>, ns: &str, name: &str) -> Result<Action, StoreError> {
    let Some(cd) = ctx.store.get::<ClusterDeployment>(ns, name).await? else {
        return Ok(Action::Done);
    };
    if !cd.is_agent_platform() {
        return Ok(Action::Done);
    }
    let aci_name = cd.cluster_install_name().unwrap_or_default();
    let aci = if aci_name.is_empty() { None } else { ctx.store.get::<AgentClusterInstall>(ns, &aci_name).await? };
    finalizer(&ctx.store, CD_FINALIZER, OnAdded::Requeue, cd, |event| async move {
        match event {
            FinalizerEvent::Apply(cd) => reconcile_install(ctx, cd, aci).await,
            FinalizerEvent::Cleanup(cd) => {
                // Delete the install first; the ClusterDeployment goes once it is gone.
                let Some(aci) = aci else { return Ok(Action::Done) };
                if aci.metadata.deletion_timestamp.is_none() {
                    ctx.store.delete::<AgentClusterInstall>(ns, &aci_name).await?;
                }
                if let Some(aci) = ctx.store.get::<AgentClusterInstall>(ns, &aci_name).await? {
                    if aci.metadata.deletion_timestamp.is_some() {
                        reconcile_install(ctx, cd, Some(aci)).await?;
                    }
                    if ctx.store.get::<AgentClusterInstall>(ns, &aci_name).await?.is_some() {
                        tracing::info!(
                            "could not confirm clusterInstall {aci_name} deletion was successfuly completed"
                        );
                        return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
                    }
                }
                Ok(Action::Done)
            }
        }
    })
    .await
}

/// The AgentClusterInstall of a live ClusterDeployment: the backend cluster and its installation, or
/// once the install is being deleted, its cleanup.
async fn reconcile_install<S: Store>(
    ctx: &ClusterContext<S>,
    mut cd: ClusterDeployment,
    aci: Option<AgentClusterInstall>,
) -> Result<Action, StoreError> {
    let Some(aci) = aci else { return Ok(Action::Done) };
    finalizer(&ctx.store, ACI_FINALIZER, OnAdded::Requeue, aci, |event| async move {
        match event {
            FinalizerEvent::Apply(mut aci) => {
                let image_set = match image_set(ctx, &aci).await {
                    Ok(set) => set,
                    Err(e) => {
                        update_aci_status(ctx, aci, None, &Err(e)).await?;
                        return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
                    }
                };
                let cluster = ensure_cluster(ctx, &cd, &aci, image_set).await?;
                let (cluster, sync) = advance_installation(ctx, &mut cd, &mut aci, cluster).await?;
                let facts = cluster_facts(ctx, &aci, &cluster).await?;
                let requeue = sync.is_err() || cluster.status == "finalizing";
                update_aci_status(ctx, aci, Some((&cluster, facts)), &sync).await?;
                // A cluster waiting for its installer's credentials, or a failed sync, is looked at again.
                if requeue {
                    return Ok(Action::RequeueAfter(REQUEUE_ON_ERROR));
                }
            }
            FinalizerEvent::Cleanup(_) => delete_install(ctx, &cd).await?,
        }
        Ok(Action::Done)
    })
    .await
}

/// Why the AgentClusterInstall's spec could not be synced (its SpecSynced condition).
#[derive(Debug, thiserror::Error)]
pub enum ClusterSyncError {
    /// The user's to fix.
    #[error("{0}")]
    Input(String),
    /// Ours, or not yet there: retried.
    #[error("{0}")]
    Backend(String),
    /// The ClusterImageSet the AgentClusterInstall names could not be read: retried.
    #[error("failed to get cluster image set {name}")]
    ImageSet {
        name: String,
        #[source]
        source: StoreError,
    },
    /// A read or write of the store failed (not a lost race): retried.
    #[error(transparent)]
    Store(StoreError),
    /// A write that lost a race: the reconcile fails and runs again on what is there now, without
    /// a SpecSynced error for it.
    #[error(transparent)]
    Conflict(StoreError),
}

/// The ClusterImageSet the AgentClusterInstall names, if it names one (assisted's
/// `ensureClusterImageSetRef`: a missing one is a backend error, retried until it exists).
async fn image_set<S: Store>(
    ctx: &ClusterContext<S>,
    aci: &AgentClusterInstall,
) -> Result<Option<ClusterImageSet>, ClusterSyncError> {
    let Some(name) = aci.image_set_name() else { return Ok(None) };
    match ctx.store.get::<ClusterImageSet>("", &name).await {
        Ok(Some(set)) => Ok(Some(set)),
        Ok(None) => Err(ClusterSyncError::Backend(format!(
            "ClusterImageSet {name} not found. Please ensure the ClusterImageSet exists"
        ))),
        Err(source) => Err(ClusterSyncError::ImageSet { name, source }),
    }
}

/// The OpenShift version of a ClusterImageSet's release image (`quay.io/...:4.14.0-x86_64` ⇒ `4.14.0`).
fn release_version(release_image: &str) -> String {
    let tag = release_image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
    tag.split('-').next().unwrap_or("").to_string()
}

async fn ensure_cluster<S: Store>(
    ctx: &ClusterContext<S>,
    cd: &ClusterDeployment,
    aci: &AgentClusterInstall,
    image_set: Option<ClusterImageSet>,
) -> Result<Cluster, StoreError> {
    let (ns, name) = key(&cd.metadata);
    let installed = cd.spec.installed;
    let existing = ctx.backend.cluster_by_kube_key(&ns, &name).await;
    let now = ctx.backend.now();
    let mut cluster = match existing {
        Some(c) => c,
        None => {
            let version = image_set.map(|s| release_version(&s.spec.release_image)).unwrap_or_default();
            Cluster {
                id: uuid::Uuid::new_v4().to_string(),
                namespace: ns.clone(),
                name: name.clone(),
                aci_name: aci.metadata.name.clone().unwrap_or_default(),
                openshift_version: version,
                cpu_architecture: String::new(),
                kind: if installed { "AddHostsCluster" } else { "Cluster" }.to_string(),
                status: if installed { "adding-hosts" } else { "insufficient" }.to_string(),
                status_info: if installed { STATUS_INFO_ADDING_HOSTS } else { "" }.to_string(),
                status_updated_at: now,
                install_started_at: None,
                install_completed_at: None,
            }
        }
    };
    // An installed cluster takes more hosts as day 2 (assisted's TransformClusterToDay2).
    if installed && cluster.kind == "Cluster" && cluster.status == "installed" {
        cluster.kind = "AddHostsCluster".into();
        cluster.status = "adding-hosts".into();
        cluster.status_info = STATUS_INFO_ADDING_HOSTS.into();
        cluster.status_updated_at = now;
    }
    ctx.backend.put_cluster(cluster).await.map_err(StoreError::backend)
}

/// assisted-service's status info of a day-2 cluster.
const STATUS_INFO_ADDING_HOSTS: &str = "cluster is adding hosts to existing OCP cluster";

fn set_cluster_status(cluster: &mut Cluster, status: &str, info: &str, now: jiff::Timestamp) {
    if cluster.status != status {
        cluster.status = status.to_string();
        cluster.status_updated_at = now;
    }
    cluster.status_info = info.to_string();
}

/// Day 1: once the required agents are bound, approved and known, every host is prepared and
/// installed; the cluster is installed when all its hosts are. Progress comes from the agents.
async fn advance_installation<S: Store>(
    ctx: &ClusterContext<S>,
    cd: &mut ClusterDeployment,
    aci: &mut AgentClusterInstall,
    mut cluster: Cluster,
) -> Result<(Cluster, Result<(), ClusterSyncError>), StoreError> {
    let mut sync = Ok(());
    if cluster.is_day2() {
        return Ok((cluster, sync));
    }
    let now = ctx.backend.now();
    let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
    let required = aci.required_agents();
    let fire_all = |hosts: Vec<Host>, from: HostStatus, event: Event| {
        let backend = ctx.backend.clone();
        async move {
            for h in hosts.into_iter().filter(|h| h.status == from) {
                if let Err(e) = backend.fire_event(&h.key(), event.clone()).await {
                    tracing::warn!(host = %h.id, "install flow: {}", crate::errors::chain(&e));
                }
            }
        }
    };
    match cluster.status.as_str() {
        "insufficient" | "ready" => {
            let ready = hosts.iter().filter(|h| h.status == HostStatus::Known && h.approved).count();
            let all_ready = !hosts.is_empty() && ready == hosts.len() && hosts.len() >= required.max(1);
            if all_ready && !aci.spec.hold_installation.unwrap_or(false) {
                set_cluster_status(
                    &mut cluster,
                    "preparing-for-installation",
                    "Preparing cluster for installation",
                    now,
                );
                cluster.install_started_at = Some(now);
                ctx.backend.put_cluster(cluster.clone()).await.map_err(StoreError::backend)?;
            } else {
                let (status, info) = if all_ready {
                    ("ready", "Cluster ready to be installed")
                } else {
                    ("insufficient", "Cluster is not ready for install")
                };
                set_cluster_status(&mut cluster, status, info, now);
            }
        }
        "installing" | "finalizing" => {
            if hosts.iter().any(|h| h.status == HostStatus::Error) {
                set_cluster_status(&mut cluster, "error", "cluster has hosts in error", now);
            } else if !hosts.is_empty() && hosts.iter().all(|h| h.status == HostStatus::Installed) {
                // Every host is up; the cluster is installed once its admin credentials, which its
                // installer reports, are in the ClusterDeployment's Secrets.
                let credentials = ctx.backend.credentials(&cluster.id);
                if !credentials.complete() {
                    set_cluster_status(&mut cluster, "finalizing", "Finalizing cluster installation", now);
                } else {
                    match mark_installed(ctx, cd, aci, &cluster, &credentials).await {
                        Ok(()) => {
                            set_cluster_status(&mut cluster, "installed", "Cluster is installed", now);
                            cluster.install_completed_at = Some(now);
                        }
                        Err(ClusterSyncError::Conflict(e)) => return Err(e),
                        Err(e) => {
                            set_cluster_status(&mut cluster, "finalizing", "Finalizing cluster installation", now);
                            sync = Err(e);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    // The cluster's record says it is preparing before its hosts move: a process that stops in
    // between finds it so at its start, and takes the hosts on from where they are.
    if cluster.status == "preparing-for-installation" {
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        assign_roles(ctx, &hosts, &*aci).await;
        fire_all(hosts, HostStatus::Known, Event::PrepareForInstallation).await;
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        fire_all(hosts, HostStatus::PreparingForInstallation, Event::PreparingSucceeded).await;
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        fire_all(hosts, HostStatus::PreparingSuccessful, Event::InstallHost).await;
        set_cluster_status(&mut cluster, "installing", "Installation in progress", now);
    }
    let cluster = ctx.backend.put_cluster(cluster).await.map_err(StoreError::backend)?;
    Ok((cluster, sync))
}

/// The role each host gets: its own, or for hosts left on auto-assign, master until there are as
/// many masters as the control plane needs, then worker.
fn planned_roles(hosts: &[Host], aci: &AgentClusterInstall) -> Vec<String> {
    let masters = aci.spec.provision_requirements.control_plane_agents.max(1) as usize;
    let mut have = hosts.iter().filter(|h| h.role == "master").count();
    hosts
        .iter()
        .map(|h| {
            if h.role != "auto-assign" {
                h.role.clone()
            } else if have < masters {
                have += 1;
                "master".to_string()
            } else {
                "worker".to_string()
            }
        })
        .collect()
}

/// Roles for hosts left on auto-assign ([`planned_roles`]); the first master is the bootstrap host.
async fn assign_roles<S: Store>(ctx: &ClusterContext<S>, hosts: &[Host], aci: &AgentClusterInstall) {
    let mut first = true;
    for (h, role) in hosts.iter().zip(planned_roles(hosts, aci)) {
        let bootstrap = first && role == "master";
        if bootstrap {
            first = false;
        }
        let _ = ctx
            .backend
            .update_host(&h.key(), |host| {
                host.suggested_role = role.clone();
                host.bootstrap = bootstrap;
                Ok(())
            })
            .await;
    }
}

/// The labels that put a Secret the controller made into the hub's backup (assisted-service's
/// `ensureSecretIsLabelled`), and that its watches select.
use crate::resources::WATCH_LABEL;
use crate::resources::metal3::BACKUP_LABEL;

/// Upstream's admin password secret user.
const KUBEADMIN_USER: &str = "kubeadmin";

/// The Secret names of a ClusterDeployment's admin credentials (assisted-service's
/// `<name>-admin-kubeconfig`, or the kubeconfig secret the ClusterDeployment already names, and
/// `<name>-admin-password`). Never from what an installer sent: always from the ClusterDeployment.
pub fn admin_secret_names(cd: &ClusterDeployment) -> (String, String) {
    let name = cd.metadata.name.clone().unwrap_or_default();
    let kubeconfig = cd.admin_kubeconfig_secret_name().unwrap_or_else(|| format!("{name}-admin-kubeconfig"));
    (kubeconfig, format!("{name}-admin-password"))
}

/// What assisted-service and Hive record when the cluster is up: the admin kubeconfig and password
/// Secrets, made from what the installer reported and owned by the ClusterDeployment, and the
/// cluster's metadata naming them on the AgentClusterInstall (assisted's `updateClusterMetadata`)
/// and on the ClusterDeployment, which is then installed (what Hive copies from the former).
async fn mark_installed<S: Store>(
    ctx: &ClusterContext<S>,
    cd: &mut ClusterDeployment,
    aci: &mut AgentClusterInstall,
    cluster: &Cluster,
    credentials: &ClusterCredentials,
) -> Result<(), ClusterSyncError> {
    let backend = |e: StoreError| {
        if e.is_conflict() { ClusterSyncError::Conflict(e) } else { ClusterSyncError::Store(e) }
    };
    let (kubeconfig_name, password_name) = admin_secret_names(cd);
    for name in [&kubeconfig_name, &password_name] {
        if !crate::resources::is_dns_subdomain(name) {
            return Err(ClusterSyncError::Input(format!(
                "the admin credentials Secret name {name:?} of ClusterDeployment {} is not a valid name",
                cd.metadata.name.as_deref().unwrap_or_default()
            )));
        }
    }
    let kubeconfig = credentials.kubeconfig.clone().unwrap_or_default();
    let password = credentials.kubeadmin_password.clone().unwrap_or_default();
    let kubeconfig_data: BTreeMap<String, ByteString> =
        [("kubeconfig".to_string(), ByteString(kubeconfig.into_bytes()))].into();
    let password_data: BTreeMap<String, ByteString> = [
        ("username".to_string(), ByteString(KUBEADMIN_USER.as_bytes().to_vec())),
        ("password".to_string(), ByteString(password.into_bytes())),
    ]
    .into();
    // The kubeconfig is always the installer's; an admin password Secret that exists is kept, as
    // assisted-service keeps it.
    ensure_credential_secret(ctx, cd, &kubeconfig_name, "kubeconfig", kubeconfig_data, true).await.map_err(backend)?;
    ensure_credential_secret(ctx, cd, &password_name, "kubeadmincreds", password_data, false).await.map_err(backend)?;

    let metadata = ClusterMetadata {
        cluster_id: cluster.id.clone(),
        infra_id: cluster.id.clone(),
        admin_kubeconfig_secret_ref: LocalObjectReference { name: kubeconfig_name.clone() },
        admin_password_secret_ref: Some(LocalObjectReference { name: password_name.clone() }),
        ..Default::default()
    };
    if aci.spec.cluster_metadata.as_ref() != Some(&metadata) {
        let status = aci.status.clone();
        aci.spec.cluster_metadata = Some(metadata.clone());
        *aci = ctx.store.update(&*aci).await.map_err(backend)?;
        aci.status = status;
    }
    if !cd.spec.installed || cd.spec.cluster_metadata.is_none() {
        let mut meta = cd.spec.cluster_metadata.clone().unwrap_or_default();
        if meta.cluster_id.is_empty() {
            meta.cluster_id = metadata.cluster_id.clone();
        }
        if meta.infra_id.is_empty() {
            meta.infra_id = metadata.infra_id.clone();
        }
        meta.admin_kubeconfig_secret_ref = metadata.admin_kubeconfig_secret_ref.clone();
        meta.admin_password_secret_ref = metadata.admin_password_secret_ref.clone();
        cd.spec.cluster_metadata = Some(meta);
        cd.spec.installed = true;
        *cd = ctx.store.update(&*cd).await.map_err(backend)?;
    }
    Ok(())
}

/// Creates the Secret `name` of the ClusterDeployment's namespace with `data`, labelled and owned as
/// assisted-service makes it (`createClusterCredentialSecret`); one that exists gets the backup
/// labels, and `data` too when `replace`.
async fn ensure_credential_secret<S: Store>(
    ctx: &ClusterContext<S>,
    cd: &ClusterDeployment,
    name: &str,
    secret_type: &str,
    data: BTreeMap<String, ByteString>,
    replace: bool,
) -> Result<(), StoreError> {
    let (ns, cd_name) = key(&cd.metadata);
    let backup = |labels: &mut BTreeMap<String, String>| {
        labels.insert(BACKUP_LABEL.to_string(), "true".to_string());
        labels.insert(WATCH_LABEL.to_string(), "true".to_string());
    };
    match ctx.store.get::<Secret>(&ns, name).await? {
        Some(mut live) => {
            let before = live.clone();
            backup(live.metadata.labels.get_or_insert_default());
            if replace {
                live.data = Some(data);
                live.string_data = None;
            }
            if live != before {
                ctx.store.update(&live).await?;
            }
        }
        None => {
            let mut labels = BTreeMap::from([
                ("hive.openshift.io/cluster-deployment-name".to_string(), cd_name.clone()),
                ("hive.openshift.io/secret-type".to_string(), secret_type.to_string()),
            ]);
            backup(&mut labels);
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(ns.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "hive.openshift.io/v1".into(),
                        kind: "ClusterDeployment".into(),
                        name: cd_name,
                        uid: cd.metadata.uid.clone().unwrap_or_default(),
                        block_owner_deletion: Some(true),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                data: Some(data),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            ctx.store.create(&secret).await?;
        }
    }
    Ok(())
}

/// The cluster validations bootstream evaluates, with assisted-service's ids and messages.
fn cluster_validations(hosts: &[Host], aci: &AgentClusterInstall) -> Vec<ValidationResult> {
    let result = |id: &str, ok: bool, message: String| ValidationResult {
        id: Some(id.to_string()),
        status: Some(if ok { "success" } else { "failure" }.to_string()),
        message: Some(message),
    };
    let ready = hosts.iter().all(|h| h.status == HostStatus::Known);
    let cp = aci.spec.provision_requirements.control_plane_agents.max(0) as usize;
    let planned = role_counts(&planned_roles(hosts, aci));
    let masters_ok = planned.masters == cp && (cp != 1 || planned.workers == 0);
    let masters_message = if masters_ok {
        "The cluster has the exact amount of dedicated control plane nodes.".to_string()
    } else if cp == 1 {
        "Single-node clusters must have a single control plane node and no workers.".to_string()
    } else {
        format!(
            "The cluster must have exactly {cp} dedicated control plane nodes. Add or remove hosts, or change their roles configurations to meet the requirement."
        )
    };
    vec![
        result(
            "all-hosts-are-ready-to-install",
            ready,
            if ready {
                "All hosts in the cluster are ready to install.".into()
            } else {
                "The cluster has hosts that are not ready to install.".into()
            },
        ),
        result("sufficient-masters-count", masters_ok, masters_message),
    ]
}

fn role_counts(roles: &[String]) -> RoleCounts {
    let mut counts = RoleCounts::default();
    for role in roles {
        match role.as_str() {
            "master" => counts.masters += 1,
            "arbiter" => counts.arbiters += 1,
            _ => counts.workers += 1,
        }
    }
    counts
}

/// What the AgentClusterInstall's conditions are computed from: the cluster record, its hosts and
/// (for a ready cluster) its Agents. Validations are evaluated before the installation and kept
/// in the status after (assisted-service stops refreshing them once it starts).
async fn cluster_facts<S: Store>(
    ctx: &ClusterContext<S>,
    aci: &AgentClusterInstall,
    cluster: &Cluster,
) -> Result<Observed, StoreError> {
    let p = &aci.spec.provision_requirements;
    let mut facts = ClusterFacts {
        status: cluster.status.clone(),
        status_info: cluster.status_info.clone(),
        hold: aci.spec.hold_installation.unwrap_or(false),
        expected: RoleCounts {
            masters: p.control_plane_agents.max(0) as usize,
            arbiters: p.arbiter_agents.max(0) as usize,
            workers: p.worker_agents.max(0) as usize,
        },
        ..Default::default()
    };
    let mut validations = None;
    if matches!(cluster.status.as_str(), "insufficient" | "ready" | "pending-for-input") {
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        let results = cluster_validations(&hosts, aci);
        facts.validation_failures = Some(
            results
                .iter()
                .filter(|v| v.status.as_deref() != Some("success"))
                .filter_map(|v| v.message.clone())
                .collect(),
        );
        validations = Some(results);
        if cluster.status == "ready" {
            facts.planned = role_counts(&planned_roles(&hosts, aci));
            facts.approved_ready_hosts = hosts.iter().filter(|h| h.status == HostStatus::Known && h.approved).count();
            facts.unsynced_agents = unsynced_agents(ctx, aci).await?;
        }
    } else {
        // Those of the last evaluation, if there was one.
        facts.validation_failures = aci.status.as_ref().and_then(|s| s.validations_info.as_ref()).map(|v| {
            v.values()
                .flatten()
                .filter(|r| r.status.as_deref() != Some("success"))
                .filter_map(|r| r.message.clone())
                .collect()
        });
    }
    Ok(Observed { facts, validations })
}

/// What the status of an AgentClusterInstall with a cluster record shows.
struct Observed {
    facts: ClusterFacts,
    /// The validations evaluated now; None to keep those the status has.
    validations: Option<Vec<ValidationResult>>,
}

/// Agents of the AgentClusterInstall's ClusterDeployment whose SpecSynced is False.
async fn unsynced_agents<S: Store>(ctx: &ClusterContext<S>, aci: &AgentClusterInstall) -> Result<usize, StoreError> {
    let ns = aci.metadata.namespace.clone().unwrap_or_default();
    let cd = aci.spec.cluster_deployment_ref.name.clone();
    let agents = ctx.store.list_referencing::<Agent>(None, Ref::AgentClusterDeployment, &format!("{ns}/{cd}")).await?;
    Ok(agents
        .iter()
        .filter(|a| a.spec.cluster_deployment_name.as_ref().is_some_and(|r| r.name == cd && r.namespace == ns))
        .filter(|a| {
            a.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == crate::controllers::agent_conditions::SPEC_SYNCED && c.status == "False")
            })
        })
        .count())
}

/// The AgentClusterInstall's status: the six conditions, the cluster's state and validations; or,
/// when its spec could not be synced (`cluster` None), SpecSynced saying why and the rest unknown.
async fn update_aci_status<S: Store>(
    ctx: &ClusterContext<S>,
    mut aci: AgentClusterInstall,
    cluster: Option<(&Cluster, Observed)>,
    sync: &Result<(), ClusterSyncError>,
) -> Result<(), StoreError> {
    let before = aci.status.clone();
    let now = Time(crate::resources::now_seconds());
    let status = aci.status.get_or_insert_default();
    let message = sync.as_ref().err().map(|e| chain(e).to_string()).unwrap_or_default();
    let spec_sync = match sync {
        Ok(()) => SpecSync::Ok,
        Err(ClusterSyncError::Input(_)) => SpecSync::Input(&message),
        Err(
            ClusterSyncError::Backend(_)
            | ClusterSyncError::ImageSet { .. }
            | ClusterSyncError::Store(_)
            | ClusterSyncError::Conflict(_),
        ) => SpecSync::Backend(&message),
    };
    let conditions = match &cluster {
        Some((cluster, Observed { facts, validations })) => {
            status.debug_info.state = cluster.status.clone();
            status.debug_info.state_info = cluster.status_info.clone();
            // As assisted-service's, with a token for the cluster that reads its events only; also
            // for a cluster first seen installed (a day-2 one), whose hosts' events are as useful.
            status.debug_info.events_url = crate::controllers::events_url::events_url(
                &status.debug_info.events_url,
                &ctx.service_base_url,
                crate::controllers::events_url::EventsOf::Cluster(&cluster.id),
                ctx.url_signer.as_deref(),
            );
            if let Some(v) = validations {
                status.validations_info = Some(BTreeMap::from([("hosts-data".to_string(), v.clone())]));
            }
            conds::conditions(spec_sync, Some(facts))
        }
        None => {
            status.debug_info.state.clear();
            status.debug_info.state_info.clear();
            status.debug_info.logs_url.clear();
            status.debug_info.events_url.clear();
            conds::conditions(spec_sync, None)
        }
    };
    for c in conditions {
        set_condition(&mut status.conditions, c, now.clone());
    }
    if aci.status != before {
        ctx.store.update_status(&aci).await?;
    }
    Ok(())
}

/// spec-controllers.md §4 `agentClusterInstallFinalizer`: cancel a running installation, return or delete the agents,
/// deregister the cluster (then the AgentClusterInstall may go).
async fn delete_install<S: Store>(ctx: &ClusterContext<S>, cd: &ClusterDeployment) -> Result<(), StoreError> {
    let (ns, name) = key(&cd.metadata);
    if let Some(cluster) = ctx.backend.cluster_by_kube_key(&ns, &name).await {
        if matches!(
            cluster.status.as_str(),
            "installing" | "preparing-for-installation" | "installing-pending-user-action" | "finalizing" | "error"
        ) {
            for h in ctx.backend.cluster_hosts(&cluster.id).await {
                if h.status.is_installing() || h.status == HostStatus::Installed || h.status == HostStatus::Error {
                    let _ = ctx.backend.fire_event(&h.key(), Event::CancelInstallation).await;
                }
            }
        }
        unbind_agents(ctx, cd).await?;
        ctx.backend.deregister_cluster(&cluster.id).await.map_err(StoreError::backend)?;
    } else {
        unbind_agents(ctx, cd).await?;
    }
    Ok(())
}

/// spec-controllers.md §4 `unbindAgents`.
async fn unbind_agents<S: Store>(ctx: &ClusterContext<S>, cd: &ClusterDeployment) -> Result<(), StoreError> {
    let (cd_ns, cd_name) = key(&cd.metadata);
    // The Agents naming the ClusterDeployment, by the reference index (checked again below).
    let value = format!("{cd_ns}/{cd_name}");
    for agent in ctx.store.list_referencing::<Agent>(None, Ref::AgentClusterDeployment, &value).await? {
        let Some(r) = &agent.spec.cluster_deployment_name else { continue };
        if r.namespace != cd_ns || r.name != cd_name {
            continue;
        }
        let (ns, name) = key(&agent.metadata);
        let delete = match agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)) {
            None => false,
            Some(ie) => match ctx.store.get::<InfraEnv>(&ns, ie).await {
                Ok(Some(ie)) => match &ie.spec.cluster_ref {
                    Some(c) => c.namespace == cd_ns && c.name == cd_name,
                    None => cd.spec.preserve_on_delete,
                },
                _ => false,
            },
        };
        if delete {
            match ctx.store.delete::<Agent>(&ns, &name).await {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        } else {
            // Retried on conflict: the agent controller writes these Agents all the time.
            for attempt in 0..5 {
                let Some(mut a) = ctx.store.get::<Agent>(&ns, &name).await? else { break };
                if a.spec.cluster_deployment_name.is_none() {
                    break;
                }
                a.spec.cluster_deployment_name = None;
                match ctx.store.update(&a).await {
                    Ok(_) => break,
                    Err(e) if e.is_conflict() && attempt < 4 => continue,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}
