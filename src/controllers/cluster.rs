//! ClusterDeployment + AgentClusterInstall (spec-controllers.md §4): the backend cluster record of each
//! pair, a minimal installation flow over its bound agents, and deletion, which returns late-bound
//! agents to their InfraEnv and deletes those of an InfraEnv made for the cluster.

use std::sync::Arc;
use std::time::Duration;

use crate::controllers::runtime::{Action, FinalizerEvent, Key, OnAdded, Reconciler, finalizer};
use crate::hosts::machine::Event;
use crate::hosts::{Host, HostStatus};
use crate::pool::{Backend, Cluster};
use crate::resources::agent::Agent;
use crate::resources::hive::{AgentClusterInstall, ClusterDeployment, ClusterImageSet};
use crate::resources::{Condition, INFRAENV_NAME_LABEL, InfraEnv, Time, set_condition};
use crate::store::{Store, StoreError};

pub const CD_FINALIZER: &str = "clusterdeployments.agent-install.openshift.io/ai-deprovision";
pub const ACI_FINALIZER: &str = "agentclusterinstall.agent-install.openshift.io/ai-deprovision";

pub struct ClusterContext<S: Store> {
    pub store: S,
    pub backend: Arc<Backend>,
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
            FinalizerEvent::Apply(aci) => {
                let cluster = ensure_cluster(ctx, &cd, &aci).await?;
                let cluster = advance_installation(ctx, &mut cd, &aci, cluster).await?;
                update_aci_status(ctx, aci, &cluster).await?;
            }
            FinalizerEvent::Cleanup(_) => delete_install(ctx, &cd).await?,
        }
        Ok(Action::Done)
    })
    .await
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
) -> Result<Cluster, StoreError> {
    let (ns, name) = key(&cd.metadata);
    let installed = cd.spec.installed;
    let existing = ctx.backend.cluster_by_kube_key(&ns, &name).await;
    let now = ctx.backend.now();
    let mut cluster = match existing {
        Some(c) => c,
        None => {
            let version = match aci.image_set_name() {
                Some(set) => ctx
                    .store
                    .get::<ClusterImageSet>("", &set)
                    .await?
                    .map(|s| release_version(&s.spec.release_image))
                    .unwrap_or_default(),
                None => String::new(),
            };
            Cluster {
                id: uuid::Uuid::new_v4().to_string(),
                namespace: ns.clone(),
                name: name.clone(),
                aci_name: aci.metadata.name.clone().unwrap_or_default(),
                openshift_version: version,
                cpu_architecture: String::new(),
                kind: if installed { "AddHostsCluster" } else { "Cluster" }.to_string(),
                status: if installed { "adding-hosts" } else { "insufficient" }.to_string(),
                status_info: String::new(),
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
        cluster.status_updated_at = now;
    }
    ctx.backend.put_cluster(cluster).await.map_err(|e| StoreError::Backend(e.message))
}

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
    aci: &AgentClusterInstall,
    mut cluster: Cluster,
) -> Result<Cluster, StoreError> {
    if cluster.is_day2() {
        return Ok(cluster);
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
                ctx.backend.put_cluster(cluster.clone()).await.map_err(|e| StoreError::Backend(e.message))?;
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
                set_cluster_status(&mut cluster, "installed", "Cluster is installed", now);
                cluster.install_completed_at = Some(now);
                mark_installed(ctx, cd, &cluster).await?;
            }
        }
        _ => {}
    }
    // The cluster's record says it is preparing before its hosts move: a process that stops in
    // between finds it so at its start, and takes the hosts on from where they are.
    if cluster.status == "preparing-for-installation" {
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        assign_roles(ctx, &hosts, aci).await;
        fire_all(hosts, HostStatus::Known, Event::PrepareForInstallation).await;
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        fire_all(hosts, HostStatus::PreparingForInstallation, Event::PreparingSucceeded).await;
        let hosts = ctx.backend.cluster_hosts(&cluster.id).await;
        fire_all(hosts, HostStatus::PreparingSuccessful, Event::InstallHost).await;
        set_cluster_status(&mut cluster, "installing", "Installation in progress", now);
    }
    ctx.backend.put_cluster(cluster).await.map_err(|e| StoreError::Backend(e.message))
}

/// Roles for hosts left on auto-assign: the first control-plane-count hosts are masters.
async fn assign_roles<S: Store>(ctx: &ClusterContext<S>, hosts: &[Host], aci: &AgentClusterInstall) {
    let masters = aci.spec.provision_requirements.control_plane_agents.max(1) as usize;
    let mut have = hosts.iter().filter(|h| h.role == "master").count();
    let mut first = true;
    for h in hosts {
        let role = if h.role != "auto-assign" {
            h.role.clone()
        } else if have < masters {
            have += 1;
            "master".to_string()
        } else {
            "worker".to_string()
        };
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

/// What hive's install flow records on the ClusterDeployment when the cluster is up.
async fn mark_installed<S: Store>(
    ctx: &ClusterContext<S>,
    cd: &mut ClusterDeployment,
    cluster: &Cluster,
) -> Result<(), StoreError> {
    if cd.spec.installed {
        return Ok(());
    }
    cd.spec.installed = true;
    cd.set_cluster_metadata(&cluster.id, &format!("{}-admin-kubeconfig", cluster.name));
    *cd = ctx.store.update(&*cd).await?;
    Ok(())
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: None,
        last_heartbeat_time: None,
        last_probe_time: None,
    }
}

async fn update_aci_status<S: Store>(
    ctx: &ClusterContext<S>,
    mut aci: AgentClusterInstall,
    cluster: &Cluster,
) -> Result<(), StoreError> {
    let before = aci.status.clone();
    let now = Time(crate::resources::now_seconds());
    let status = aci.status.get_or_insert_default();
    let (req, completed, failed) = match cluster.status.as_str() {
        "insufficient" => (
            condition(
                "RequirementsMet",
                "False",
                "ClusterNotReady",
                "The cluster is not ready to begin the installation",
            ),
            condition("Completed", "False", "InstallationNotStarted", "The installation has not started"),
            condition("Failed", "False", "InstallationNotFailed", "The installation has not failed"),
        ),
        "ready" => (
            condition("RequirementsMet", "True", "ClusterIsReady", "The cluster is ready to begin the installation"),
            condition("Completed", "False", "InstallationNotStarted", "The installation has not started"),
            condition("Failed", "False", "InstallationNotFailed", "The installation has not failed"),
        ),
        "preparing-for-installation" | "installing" | "finalizing" => (
            condition("RequirementsMet", "True", "ClusterAlreadyInstalling", "The cluster requirements are met"),
            condition(
                "Completed",
                "False",
                "InstallationInProgress",
                &format!("The installation is in progress: {}", cluster.status_info),
            ),
            condition("Failed", "False", "InstallationNotFailed", "The installation has not failed"),
        ),
        "installed" | "adding-hosts" => (
            condition("RequirementsMet", "True", "ClusterInstallationStopped", "The cluster installation stopped"),
            condition(
                "Completed",
                "True",
                "InstallationCompleted",
                "The installation has completed: Cluster is installed",
            ),
            condition("Failed", "False", "InstallationNotFailed", "The installation has not failed"),
        ),
        _ => (
            condition("RequirementsMet", "True", "ClusterInstallationStopped", "The cluster installation stopped"),
            condition(
                "Completed",
                "False",
                "InstallationFailed",
                &format!("The installation has failed: {}", cluster.status_info),
            ),
            condition(
                "Failed",
                "True",
                "InstallationFailed",
                &format!("The installation failed: {}", cluster.status_info),
            ),
        ),
    };
    for c in [req, completed, failed] {
        set_condition(&mut status.conditions, c, now.clone());
    }
    status.debug_info.state = cluster.status.clone();
    status.debug_info.state_info = cluster.status_info.clone();
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
        ctx.backend.deregister_cluster(&cluster.id).await.map_err(|e| StoreError::Backend(e.message))?;
    } else {
        unbind_agents(ctx, cd).await?;
    }
    Ok(())
}

/// spec-controllers.md §4 `unbindAgents`.
async fn unbind_agents<S: Store>(ctx: &ClusterContext<S>, cd: &ClusterDeployment) -> Result<(), StoreError> {
    let (cd_ns, cd_name) = key(&cd.metadata);
    // Agents naming the ClusterDeployment mention its name; the few that do are checked below.
    for agent in ctx.store.list_mentioning::<Agent>(None, &format!("\"{cd_name}\"")).await? {
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
