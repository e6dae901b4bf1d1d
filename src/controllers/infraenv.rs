//! The InfraEnv controller (spec-controllers.md §3): computes an InfraEnv's status — download URLs, boot
//! artifact URLs, the `ImageCreated` condition — from the InfraEnv and the world (pull secret, OS
//! images), by building the same image the download handlers serve.

use std::sync::Arc;
use std::time::Duration;

use crate::controllers::runtime::{Action, FinalizerEvent, Key, OnAdded, Reconciler, finalizer};
use crate::image::{ImageError, Images};
use crate::resources::{
    BootArtifacts, Condition, IMAGE_CREATED_CONDITION, INFRAENV_NAME_LABEL, InfraEnv, LabelSelector,
    MESSAGE_FAILED_TO_CREATE, MESSAGE_IMAGE_AVAILABLE, REASON_IMAGE_CREATION_ERROR, REASON_INFRAENV_AVAILABLE,
    REASON_MISSING_CLUSTER_DEPLOYMENT, Time, set_condition,
};
use crate::store::{Store, StoreError};

/// Retry delay for errors that may resolve by themselves (`defaultRequeueAfterPerRecoverableError`).
pub const RECOVERABLE_REQUEUE: Duration = Duration::from_secs(20);

/// The status `ie` should have, given the world as `images` sees it. Pure apart from reading the store
/// and the catalog; `now` is the time to stamp on changes.
pub async fn desired_status<S: Store>(
    images: &Images<S>,
    ie: &InfraEnv,
    now: Time,
) -> (crate::resources::InfraEnvStatus, Action) {
    let mut status = ie.status.clone().unwrap_or_default();
    let name = ie.metadata.name.clone().unwrap_or_default();
    status.agent_label_selector = Some(LabelSelector {
        match_labels: [(INFRAENV_NAME_LABEL.to_string(), name)].into_iter().collect(),
        match_expressions: vec![],
    });
    let condition = |status: &str, reason: &str, message: String| Condition {
        type_: IMAGE_CREATED_CONDITION.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: None,
        last_heartbeat_time: None,
        last_probe_time: None,
    };
    // Whether or not the image builds (spec-controllers.md §3.3 steps 4 and 5), with a token that
    // reads the InfraEnv's events only.
    if let Some(uid) = ie.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        let debug = status.debug_info.get_or_insert_with(Default::default);
        debug.events_url = crate::controllers::events_url::events_url(
            &debug.events_url,
            &images.config.base_url,
            crate::controllers::events_url::EventsOf::InfraEnv(uid),
            images.config.url_signer.as_deref(),
        );
    }
    let token = images.status_token(ie, std::time::SystemTime::now());
    match build(images, ie, token.as_ref().map(|(t, _)| t.as_str())).await {
        Ok(built) => {
            // A new token alone is not a new image: BareMetalHosts and PreprovisioningImages go by
            // createdTime, and would otherwise reprovision at every refresh.
            let same_url = crate::auth::urlsign::without_token(&status.iso_download_url)
                == crate::auth::urlsign::without_token(&built.urls.iso);
            if status.image_digest != built.digest || !same_url {
                status.created_time = Some(now.clone());
                status.image_digest = built.digest;
            }
            status.ironic_agent = crate::content::ironic::enabled(ie);
            status.iso_download_url = built.urls.iso;
            // Only when there is static network config, as assisted-service does.
            let debug = status.debug_info.get_or_insert_with(Default::default);
            debug.static_network_download_url =
                if built.static_network { built.urls.static_network_config.clone() } else { String::new() };
            if *debug == crate::resources::DebugInfo::default() {
                status.debug_info = None;
            }
            status.boot_artifacts = BootArtifacts {
                discovery_ignition_url: built.urls.discovery_ignition,
                initrd: built.urls.initrd,
                ipxe_script: built.urls.ipxe_script,
                kernel: built.urls.kernel,
                rootfs: built.urls.rootfs,
            };
            set_condition(
                &mut status.conditions,
                condition("True", REASON_INFRAENV_AVAILABLE, MESSAGE_IMAGE_AVAILABLE.to_string()),
                now,
            );
            // Signed URLs are signed again before they expire.
            let action = match token {
                Some((_, refresh_in)) => Action::RequeueAfter(refresh_in),
                None => Action::Done,
            };
            (status, action)
        }
        Err(err) => {
            let message = crate::errors::chain(&err);
            let (cond, action) = match &err {
                ImageError::MissingClusterDeployment(_) => {
                    (condition("Unknown", REASON_MISSING_CLUSTER_DEPLOYMENT, message.to_string()), Action::Done)
                }
                err if err.is_internal() => (
                    condition(
                        "False",
                        REASON_IMAGE_CREATION_ERROR,
                        format!("{MESSAGE_FAILED_TO_CREATE} due to an internal error: {message}"),
                    ),
                    Action::RequeueAfter(RECOVERABLE_REQUEUE),
                ),
                _ => (
                    condition("False", REASON_IMAGE_CREATION_ERROR, format!("{MESSAGE_FAILED_TO_CREATE}: {message}")),
                    Action::Done,
                ),
            };
            // No image: advertise no URLs (assisted-service clears them on ImageCreationError).
            status.iso_download_url.clear();
            status.created_time = None;
            status.image_digest.clear();
            status.ironic_agent = false;
            status.boot_artifacts = BootArtifacts::default();
            set_condition(&mut status.conditions, cond, now);
            (status, action)
        }
    }
}

struct Built {
    urls: crate::image::ArtifactUrls,
    digest: String,
    static_network: bool,
}

/// Builds every artifact once (checking sizes and kernel arguments), without serving anything.
async fn build<S: Store>(images: &Images<S>, ie: &InfraEnv, token: Option<&str>) -> Result<Built, ImageError> {
    let content = images.content(ie).await?;
    let base = images.selected_base(ie)?;
    // The same verdict every download of the InfraEnv's files asks for.
    images.verdict(ie, &content, &base).await?;
    let kind = images.image_type(ie);
    let urls = images.urls_with_token(ie, &base, token);
    Ok(Built {
        urls,
        digest: Images::<S>::image_digest(&content, &base, kind),
        static_network: content.static_network.is_some(),
    })
}

pub const INFRAENV_FINALIZER: &str = "infraenv.agent-install.openshift.io/ai-deprovision";
/// The condition that names the hosts keeping a deleted InfraEnv.
pub const DELETION_BLOCKED_CONDITION: &str = "DeletionBlocked";

/// Reconciles one InfraEnv: fetches it, computes its status, writes it if it changed.
pub async fn reconcile<S: Store>(images: &Images<S>, namespace: &str, name: &str) -> Result<Action, StoreError> {
    reconcile_with(images, None, namespace, name).await
}

/// Whether a host goes at once with its InfraEnv (the teardown rule of spec-controllers.md §3.9, legacy
/// behavior): hosts in the pool (every host without a cluster: the *-unbound states, unbinding, and
/// reclaiming, which has left its cluster already) and installed ones. A host bound to a cluster and not
/// installed holds the InfraEnv until it is unbound, installed or deleted.
fn goes_with_infraenv(host: &crate::hosts::Host) -> bool {
    use crate::hosts::HostStatus::*;
    host.cluster_id.is_none() || matches!(host.status, Installed | AddedToExistingCluster)
}

/// How many holding hosts the DeletionBlocked message names; the rest are counted.
const HOLDING_HOSTS_NAMED: usize = 10;

/// Deletion of an InfraEnv: the hosts that may go with it go at once (their Agents are deleted, and the
/// Agents' finalizers deregister them); while a host bound and not installed remains, the InfraEnv
/// stays, with a condition naming those hosts. Done once the InfraEnv may go.
pub(crate) async fn cleanup<S: Store>(
    store: &S,
    backend: &crate::pool::Backend,
    ie: InfraEnv,
) -> Result<Action, StoreError> {
    let uid = ie.metadata.uid.clone().unwrap_or_default();
    let ns = ie.metadata.namespace.clone().unwrap_or_default();
    let (going, holding): (Vec<_>, Vec<_>) =
        backend.infra_env_hosts(&uid, |_| true).await.into_iter().partition(goes_with_infraenv);
    for h in going {
        match store.delete::<crate::resources::Agent>(&ns, &h.id).await {
            Ok(_) => {}
            // No Agent (or it went meanwhile): the record is deregistered here.
            Err(e) if e.is_not_found() => {
                let _ = backend.deregister_host(&h.key()).await;
            }
            Err(e) => return Err(e),
        }
    }
    if holding.is_empty() {
        // The remaining Agents (owned by the InfraEnv) are garbage-collected with it.
        return Ok(Action::Done);
    }
    let mut named: Vec<String> =
        holding.iter().take(HOLDING_HOSTS_NAMED).map(|h| format!("{} ({})", h.id, h.status)).collect();
    if holding.len() > HOLDING_HOSTS_NAMED {
        named.push(format!("and {} more", holding.len() - HOLDING_HOSTS_NAMED));
    }
    let mut ie = ie;
    let status = ie.status.get_or_insert_default();
    let changed = set_condition(
        &mut status.conditions,
        Condition {
            type_: DELETION_BLOCKED_CONDITION.into(),
            status: "True".into(),
            reason: "HostsBoundToCluster".into(),
            message: format!(
                "Failed to delete infraEnv, existing hosts are bound to a cluster and not installed: {}",
                named.join(", ")
            ),
            last_transition_time: None,
            last_heartbeat_time: None,
            last_probe_time: None,
        },
        Time(crate::resources::now_seconds()),
    );
    if changed {
        match store.update_status(&ie).await {
            Ok(_) | Err(StoreError::Conflict(_)) => {}
            Err(e) if e.is_not_found() => return Ok(Action::Done),
            Err(e) => return Err(e),
        }
    }
    Ok(Action::RequeueAfter(Duration::from_secs(60)))
}

/// The InfraEnv controller's reconciler: [`reconcile_with`] as the runtime runs it.
pub struct InfraEnvReconciler<S: Store> {
    pub images: Arc<Images<S>>,
    pub backend: Option<Arc<crate::pool::Backend>>,
}

impl<S: Store> Reconciler for InfraEnvReconciler<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        reconcile_with(&self.images, self.backend.as_deref(), &key.0, &key.1).await
    }
}

/// Reconciles one InfraEnv; with a backend it also owns the InfraEnv's deletion (finalizer).
pub async fn reconcile_with<S: Store>(
    images: &Images<S>,
    backend: Option<&crate::pool::Backend>,
    namespace: &str,
    name: &str,
) -> Result<Action, StoreError> {
    let started = std::time::Instant::now();
    let Some(ie) = images.store.get::<InfraEnv>(namespace, name).await? else {
        images.forget(namespace, name);
        return Ok(Action::Done);
    };
    let Some(backend) = backend else {
        if ie.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        return update_status(images, ie, (namespace, name), started).await;
    };
    // The finalizer is usually there already: the resource API writes it with the create.
    finalizer(&images.store, INFRAENV_FINALIZER, OnAdded::Apply, ie, |event| async move {
        match event {
            FinalizerEvent::Apply(ie) => update_status(images, ie, (namespace, name), started).await,
            FinalizerEvent::Cleanup(ie) => cleanup(&images.store, backend, ie).await,
        }
    })
    .await
}

/// Computes the InfraEnv's status and writes it if it changed.
async fn update_status<S: Store>(
    images: &Images<S>,
    ie: InfraEnv,
    (namespace, name): (&str, &str),
    started: std::time::Instant,
) -> Result<Action, StoreError> {
    // The pull secret, labelled so that a change to it reaches this controller (read errors show in
    // the status, from the image build).
    if let Ok(Some(secret)) =
        images.store.get::<k8s_openapi::api::core::v1::Secret>(namespace, &ie.spec.pull_secret_ref.name).await
        && let Err(e) = super::label_followed_secret(&images.store, &secret).await
    {
        tracing::warn!(infraenv = %format_args!("{namespace}/{name}"), "labelling the pull secret: {}", crate::errors::chain(&e));
    }
    let now = Time(crate::resources::now_seconds());
    let status_started = std::time::Instant::now();
    let (status, action) = desired_status(images, &ie, now).await;
    let status_micros = status_started.elapsed().as_micros() as u64;
    let changed = ie.status.as_ref() != Some(&status);
    let written = if changed {
        let mut updated = ie.clone();
        updated.status = Some(status);
        images.store.update_status(&updated).await.map(|_| ())
    } else {
        Ok(())
    };
    // For a slow reconcile: building its status (the discovery content when none is cached), and the
    // status write.
    tracing::debug!(
        infraenv = %format_args!("{namespace}/{name}"),
        status_micros,
        written = changed,
        micros = started.elapsed().as_micros() as u64,
        "reconciled InfraEnv"
    );
    match written {
        Ok(()) => Ok(action),
        // Someone changed it meanwhile; the change event brings us back with the new version.
        Err(StoreError::Conflict(_)) => Ok(Action::RequeueAfter(Duration::ZERO)),
        Err(e) if e.is_not_found() => Ok(Action::Done),
        Err(e) => Err(e),
    }
}
