//! The PreprovisioningImage controller (spec-controllers.md §6): metal3 asks, per BareMetalHost, for an
//! image to boot the host into its ironic agent; this controller answers with the host's InfraEnv
//! image (ISO, or initrd + kernel + kernel parameters), after turning the ironic agent on for that
//! InfraEnv. The image build itself (spec-controllers.md §6.2's Ignition fragment) happens where every discovery image
//! is built, keyed on the InfraEnv's `enable-ironic-agent` annotation.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};

use crate::content::ironic::ENABLE_IRONIC_AGENT_ANNOTATION;
use crate::controllers::runtime::{Action, FinalizerEvent, Key, OnAdded, Reconciler, finalizer};
use crate::pool::Clock;
use crate::resources::metal3::*;
use crate::resources::{
    IMAGE_CREATED_CONDITION, INFRAENV_NAME_LABEL, InfraEnv, KernelArgumentOperation, PreprovisioningImage,
    REASON_IMAGE_CREATION_ERROR, find_condition, normalize_arch,
};
use crate::store::{Store, StoreError};

pub use super::PPI_READY_CONDITION as READY_CONDITION;
pub const ERROR_CONDITION: &str = "Error";
pub const REASON_UNSUPPORTED_IMAGE_FORMAT: &str = "UnsupportedImageFormat";
pub const REASON_INFRAENV_NOT_AVAILABLE: &str = "InfraEnvNotAvailable";
pub const REASON_INFRAENV_ARCH_MISMATCH: &str = "InfraEnvArchMismatch";
pub const REASON_IRONIC_AGENT_UPDATE_FAILURE: &str = "IronicAgentIgnitionUpdateFailure";
pub const REASON_WAITING_FOR_IMAGE: &str = "WaitingForInfraEnvImageToBeCreated";
pub const REASON_WAITING_FOR_COOLDOWN: &str = "WaitingForInfraEnvImageToCoolDown";
/// While the BMH that owns a PPI being deleted still needs its image for cleaning.
const REQUEUE_WAITING_FOR_BMH: Duration = Duration::from_secs(10);

pub struct PpiContext<S: Store> {
    pub store: S,
    pub clock: Arc<dyn Clock>,
    /// How old an InfraEnv image must be before it is published ([`super::bmac::IMAGE_COOLDOWN`]).
    pub image_cooldown: Duration,
    /// Where image URLs are signed: the ISO URL a PPI publishes is the short form of the InfraEnv's (BMCs
    /// take short URLs only), with the same expiry and refresh.
    pub url_signer: Option<Arc<crate::auth::urlsign::UrlSigner>>,
}

impl<S: Store> Reconciler for PpiContext<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        reconcile(self, &key.0, &key.1).await
    }
}

pub async fn reconcile<S: Store>(ctx: &PpiContext<S>, ns: &str, name: &str) -> Result<Action, StoreError> {
    let Some(ppi) = ctx.store.get::<PreprovisioningImage>(ns, name).await? else {
        return Ok(Action::Done);
    };
    finalizer(&ctx.store, PPI_FINALIZER, OnAdded::Apply, ppi, |event| async move {
        match event {
            FinalizerEvent::Apply(mut ppi) => {
                let before = ppi.status.clone();
                let (outcome, reboot_bmh) = image_status(ctx, &mut ppi).await?;
                if ppi.status != before {
                    ctx.store.update_status(&ppi).await?;
                }
                if reboot_bmh {
                    request_reboot(ctx, ns, name).await?;
                }
                Ok(outcome)
            }
            FinalizerEvent::Cleanup(ppi) => cleanup(ctx, ppi).await,
        }
    })
    .await
}

/// Steps 3–9 of spec-controllers.md §6.1: the status the PPI should have. Returns what to do next and whether the
/// owning BMH must be rebooted into a new image.
async fn image_status<S: Store>(
    ctx: &PpiContext<S>,
    ppi: &mut PreprovisioningImage,
) -> Result<(Action, bool), StoreError> {
    let ns = ppi.metadata.namespace.clone().unwrap_or_default();
    let now = Time(ctx.clock.now());
    let formats = ppi.spec.accept_formats.clone();
    if !formats.iter().any(|f| f == "iso" || f == "initrd") {
        fail(ppi, &now, true, REASON_UNSUPPORTED_IMAGE_FORMAT, "Unsupported image format");
        return Ok((Action::Done, false));
    }
    let label = ppi.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)).cloned().unwrap_or_default();
    let infraenv = if label.is_empty() { None } else { ctx.store.get::<InfraEnv>(&ns, &label).await? };
    let Some(infraenv) = infraenv.filter(|ie| ie.metadata.deletion_timestamp.is_none()) else {
        fail(
            ppi,
            &now,
            false,
            REASON_INFRAENV_NOT_AVAILABLE,
            &format!("InfraEnv {label}/{ns} is not found or is being deleted"),
        );
        return Ok((Action::Done, false));
    };
    let infraenv_arch = infraenv.spec.cpu_architecture.clone().unwrap_or_else(|| "x86_64".to_string());
    let ppi_arch = ppi.spec.architecture.clone().unwrap_or_default();
    if normalize_arch(&ppi_arch) != normalize_arch(&infraenv_arch) {
        fail(
            ppi,
            &now,
            true,
            REASON_INFRAENV_ARCH_MISMATCH,
            &format!(
                "PreprovisioningImage CPU architecture ({ppi_arch}) does not match InfraEnv CPU architecture ({infraenv_arch})"
            ),
        );
        return Ok((Action::Done, false));
    }
    if !crate::content::ironic::enabled(&infraenv) {
        // The InfraEnv's image gets the ironic agent; its change brings this PPI back (watch).
        let mut with_ironic = infraenv.clone();
        with_ironic
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ENABLE_IRONIC_AGENT_ANNOTATION.to_string(), "true".to_string());
        if let Err(e) = ctx.store.update(&with_ironic).await {
            fail(
                ppi,
                &now,
                true,
                REASON_IRONIC_AGENT_UPDATE_FAILURE,
                &format!("Could not add ironic agent to image: {e}"),
            );
            return Ok((Action::RequeueAfter(Duration::from_secs(10)), false));
        }
        return Ok((Action::Done, false));
    }
    // An image from before the ironic agent was turned on is no image for a PPI.
    let Some(status) = infraenv.status.as_ref().filter(|s| s.created_time.is_some() && s.ironic_agent) else {
        fail(ppi, &now, false, REASON_WAITING_FOR_IMAGE, "Waiting for InfraEnv image to be created");
        return Ok((Action::Done, false));
    };
    if let Some(wait) = super::cooldown_left(&infraenv, ctx.clock.now(), ctx.image_cooldown) {
        fail(ppi, &now, false, REASON_WAITING_FOR_COOLDOWN, "Waiting for InfraEnv image to cool down");
        return Ok((Action::RequeueAfter(wait), false));
    }

    let previous_url = ppi.status.as_ref().map(|s| s.image_url.clone()).unwrap_or_default();
    let generation = ppi.metadata.generation;
    let st = ppi.status.get_or_insert_default();
    st.architecture = infraenv_arch;
    if formats.iter().any(|f| f == "iso") {
        st.format = "iso".into();
        st.image_url = ctx
            .url_signer
            .as_ref()
            .and_then(|s| s.shorten(&status.iso_download_url, false, std::time::SystemTime::now()))
            .unwrap_or_else(|| status.iso_download_url.clone());
        st.kernel_url.clear();
        st.extra_kernel_params.clear();
    } else {
        st.format = "initrd".into();
        st.image_url = status.boot_artifacts.initrd.clone();
        st.kernel_url = status.boot_artifacts.kernel.clone();
        let mut params = format!("coreos.live.rootfs_url={} rd.bootif=0", status.boot_artifacts.rootfs);
        for arg in &infraenv.spec.kernel_arguments {
            if arg.operation == KernelArgumentOperation::Append {
                params.push(' ');
                params.push_str(&arg.value);
            }
        }
        st.extra_kernel_params = params;
    }
    let created = find_condition(&status.conditions, IMAGE_CREATED_CONDITION);
    let (ready, reason, message) = match created {
        Some(c) => (c.status.clone(), c.reason.clone(), c.message.clone()),
        None => ("Unknown".to_string(), "Unknown".to_string(), String::new()),
    };
    let error = if reason == REASON_IMAGE_CREATION_ERROR { "True" } else { "False" };
    set_condition(&mut st.conditions, READY_CONDITION, &ready, &reason, &message, generation, &now);
    set_condition(&mut st.conditions, ERROR_CONDITION, error, &reason, &message, generation, &now);
    let new_url = st.image_url.clone();
    // A refreshed token is the same image: no reboot for it.
    let reboot = !previous_url.is_empty()
        && crate::auth::urlsign::without_token(&previous_url) != crate::auth::urlsign::without_token(&new_url)
        && {
            let bmh = owning_bmh(ctx, ppi).await?;
            bmh.is_some_and(|b| b.provisioning_state() != "provisioned")
        };
    Ok((Action::Done, reboot))
}

/// A failure: the image fields are cleared and Ready is False, Error as given.
fn fail(ppi: &mut PreprovisioningImage, now: &Time, error: bool, reason: &str, message: &str) {
    let generation = ppi.metadata.generation;
    let st = ppi.status.get_or_insert_default();
    st.image_url.clear();
    st.kernel_url.clear();
    st.extra_kernel_params.clear();
    st.format.clear();
    st.architecture.clear();
    set_condition(&mut st.conditions, READY_CONDITION, "False", reason, message, generation, now);
    set_condition(
        &mut st.conditions,
        ERROR_CONDITION,
        if error { "True" } else { "False" },
        reason,
        message,
        generation,
        now,
    );
}

/// metav1 condition semantics: the transition time moves only when the status does.
fn set_condition(
    conditions: &mut Vec<MetaCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let new = MetaCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(old) => {
            let transition = if old.status == new.status { old.last_transition_time.clone() } else { now.clone() };
            *old = MetaCondition { last_transition_time: transition, ..new };
        }
        None => conditions.push(new),
    }
}

async fn owning_bmh<S: Store>(
    ctx: &PpiContext<S>,
    ppi: &PreprovisioningImage,
) -> Result<Option<BareMetalHost>, StoreError> {
    let ns = ppi.metadata.namespace.as_deref().unwrap_or_default();
    let Some(owner) = ppi.metadata.owner_references.as_ref().and_then(|o| o.iter().find(|o| o.kind == "BareMetalHost"))
    else {
        return Ok(None);
    };
    let bmh = ctx.store.get::<BareMetalHost>(ns, &owner.name).await?;
    Ok(bmh.filter(|b| b.metadata.uid.as_deref() == Some(owner.uid.as_str())))
}

/// Asks metal3 to reboot the PPI's BMH into its new image.
async fn request_reboot<S: Store>(ctx: &PpiContext<S>, ns: &str, name: &str) -> Result<(), StoreError> {
    let ppi = ctx.store.get::<PreprovisioningImage>(ns, name).await?;
    let Some(mut bmh) = (match &ppi {
        Some(p) => owning_bmh(ctx, p).await?,
        None => None,
    }) else {
        return Ok(());
    };
    bmh.annotations_mut().insert(REBOOT_ANNOTATION.to_string(), r#"{"force": true}"#.to_string());
    ctx.store.update(&bmh).await?;
    Ok(())
}

/// spec-controllers.md §6.1 step 1: the finalizer goes once the owning BMH no longer needs the image.
async fn cleanup<S: Store>(ctx: &PpiContext<S>, ppi: PreprovisioningImage) -> Result<Action, StoreError> {
    if let Some(bmh) = owning_bmh(ctx, &ppi).await? {
        let cleaning = bmh.spec.automated_cleaning_mode.as_deref().unwrap_or("metadata") != "disabled";
        let bmh_going = bmh.metadata.deletion_timestamp.is_some()
            && matches!(bmh.provisioning_state(), "powering off before delete" | "deleting");
        if cleaning && !bmh_going {
            return Ok(Action::RequeueAfter(REQUEUE_WAITING_FOR_BMH));
        }
    }
    Ok(Action::Done)
}
