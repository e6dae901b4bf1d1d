//! The Bare Metal Agent Controller (spec-controllers.md §5): pairs each BareMetalHost with the Agent its
//! machine became (by boot MAC), points the host at its InfraEnv's discovery image, fills the Agent's
//! spec from the host's annotations, and, when an Agent waits for a reboot into discovery after its
//! cluster went (`UnbindingPendingUserAction`), gives the host back to metal3 so that it boots the
//! discovery image again.
//!
//! A reconcile is a list of steps over the BMH and its Agent held in memory; a step may stop the chain.
//! What the steps changed is written at the end, each object once, against the resourceVersion it was
//! read at (a conflict means someone else wrote meanwhile: the next reconcile starts over).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::controllers::agent_conditions::BOUND;
use crate::pool::Clock;
use crate::resources::agent::{Agent, BMH_LABEL, ClusterDeploymentReference, InventoryDisk};
use crate::resources::metal3::*;
use crate::resources::references::Ref;
use crate::resources::{INFRAENV_NAME_LABEL, InfraEnv, PreprovisioningImage, find_condition};
use crate::store::{Store, StoreError};

use crate::controllers::runtime::{Action, Key, Reconciler, add_finalizer, has_finalizer, remove_finalizer};

use super::cooldown_left;

/// How long after an InfraEnv's image was (re)created before hosts are pointed at it, by default: an
/// InfraEnv is often edited several times in a row, and each new image would otherwise reprovision
/// every host.
pub const IMAGE_COOLDOWN: Duration = Duration::from_secs(60);
/// While waiting for metal3 to reach `deleting`.
const REQUEUE_WAITING: Duration = Duration::from_secs(10);
/// Between attempts to drain a node, and the most one attempt may take.
const DRAIN_ATTEMPT: Duration = Duration::from_secs(20);
const REASON_UNBINDING_PENDING_USER_ACTION: &str = "UnbindingPendingUserAction";
const REASON_INFRAENV_AVAILABLE: &str = crate::resources::REASON_INFRAENV_AVAILABLE;
/// What the installation disk is set to when root device hints match no disk of the host.
pub const DISK_NOT_FOUND_BY_HINTS: &str = "/dev/not-found-by-hints";
/// Agent progress stages after which metal3 must leave the host alone (non-converged flow).
const STAGES_DETACHING: [&str; 4] = ["Failed", "Rebooting", "Joined", "Done"];

pub struct BmacContext<S: Store> {
    pub store: S,
    pub clock: Arc<dyn Clock>,
    /// The converged flow: metal3 boots hosts into the ironic agent (PreprovisioningImage), and
    /// ironic's `start_assisted_install` deploy step starts the discovery agent.
    pub converged: bool,
    /// Pause BMHs that metal3 reports detached, keeping their status (`PAUSE_PROVISIONED_BMHS`).
    pub pause_provisioned: bool,
    /// [`IMAGE_COOLDOWN`] unless configured.
    pub image_cooldown: Duration,
    /// Where image URLs are signed: BareMetalHosts get URLs whose token does not expire (see
    /// [`BmacContext::host_image_url`]).
    pub url_signer: Option<Arc<crate::auth::urlsign::UrlSigner>>,
}

impl<S: Store> BmacContext<S> {
    /// The URL a BareMetalHost boots `infraenv`'s ISO from: the short form of the status URL (BMCs reading
    /// virtual media take short URLs only: Dell iDRAC at most 255 characters, no query string), with a
    /// token that does not expire. The status URL's token lasts 4 hours, but metal3 (or a BMC reading
    /// virtual media) may fetch the image again days later, and giving a provisioned host a new URL would
    /// deprovision and reboot it.
    fn host_image_url(&self, infraenv_id: &str, iso_url: &str) -> String {
        let Some(signer) = &self.url_signer else { return iso_url.to_string() };
        if let Some(short) = signer.shorten(iso_url, true, std::time::SystemTime::now()) {
            return short;
        }
        match crate::auth::urlsign::token_of_url(iso_url) {
            Some(token) => iso_url.replacen(token, &signer.sign_lasting(infraenv_id), 1),
            None => iso_url.to_string(),
        }
    }

    /// Whether `url` carries a token of ours for `infraenv_id` that does not expire (short or long: BMHs
    /// given a long URL before short ones existed keep it).
    fn is_lasting_url(&self, infraenv_id: &str, url: &str) -> bool {
        let Some(signer) = &self.url_signer else { return false };
        let now = std::time::SystemTime::now();
        let claims = match crate::auth::urlsign::short_token_of_url(url) {
            Some(short) => signer.verify_short(short, now),
            None => match crate::auth::urlsign::token_of_url(url) {
                Some(token) => signer.verify_for(token, infraenv_id, now),
                None => return false,
            },
        };
        claims.is_ok_and(|c| c.infra_env_id == infraenv_id && c.exp.is_none())
    }
}

/// Where a step leaves the reconcile.
enum Step {
    Continue,
    Stop,
    RequeueAfter(Duration),
}

/// The objects one reconcile works on.
struct World {
    bmh: BareMetalHost,
    agent: Option<Agent>,
    infraenv: Option<InfraEnv>,
    /// The Agent is to be deleted (converged flow, `remove-agent-and-node-on-delete`).
    delete_agent: bool,
}

impl<S: Store> Reconciler for BmacContext<S> {
    type Error = StoreError;
    async fn reconcile(&self, key: &Key) -> Result<Action, StoreError> {
        reconcile(self, &key.0, &key.1).await
    }
}

pub async fn reconcile<S: Store>(ctx: &BmacContext<S>, ns: &str, name: &str) -> Result<Action, StoreError> {
    let Some(bmh) = ctx.store.get::<BareMetalHost>(ns, name).await? else {
        return Ok(Action::Done);
    };
    let agent = find_agent(&ctx.store, &bmh).await?;
    let infraenv = match bmh.label(INFRAENV_NAME_LABEL) {
        Some(ie) => ctx.store.get::<InfraEnv>(ns, ie).await?,
        None => None,
    };
    let (bmh_before, agent_before) = (bmh.clone(), agent.clone());
    let mut w = World { bmh, agent, infraenv, delete_agent: false };

    let outcome = run_steps(ctx, &mut w).await?;

    if w.delete_agent
        && let Some(agent) = &w.agent
    {
        let agent_name = agent.metadata.name.clone().unwrap_or_default();
        match ctx.store.delete::<Agent>(ns, &agent_name).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    } else if let Some(agent) = &w.agent
        && agent_before.as_ref().is_none_or(|before| before.metadata != agent.metadata || before.spec != agent.spec)
    {
        ctx.store.update(agent).await?;
    }
    // The BMAC writes metadata and spec only; the status is metal3's.
    if w.bmh.metadata != bmh_before.metadata || w.bmh.spec != bmh_before.spec {
        match ctx.store.update(&w.bmh).await {
            Ok(_) => {}
            // The last finalizer went and the BMH with it.
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(match outcome {
        Step::RequeueAfter(d) => Action::RequeueAfter(d),
        Step::Continue | Step::Stop => Action::Done,
    })
}

/// spec-controllers.md §5.2, in order; the first step that stops ends the chain.
async fn run_steps<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Result<Step, StoreError> {
    if w.infraenv.is_some() {
        w.bmh.metadata.labels.get_or_insert_default().insert(BACKUP_LABEL.to_string(), "true".to_string());
    }
    macro_rules! step {
        ($e:expr) => {
            match $e {
                Step::Continue => {}
                other => return Ok(other),
            }
        };
    }
    step!(handle_finalizer(ctx, w).await);
    if agent_bound_reason(w.agent.as_ref()) == Some(REASON_UNBINDING_PENDING_USER_ACTION) {
        step!(reconcile_unbound_agent(ctx, w));
    }
    step!(handle_pause_and_detach(ctx, w));
    step!(reconcile_bmh(ctx, w).await?);
    if w.agent.is_none() {
        return Ok(Step::Stop);
    }
    step!(reconcile_agent_spec(w));
    step!(ensure_fencing_credentials(ctx, w).await?);
    if !ctx.converged {
        step!(reconcile_agent_inventory(w));
    }
    Ok(Step::Continue)
}

fn agent_bound_reason(agent: Option<&Agent>) -> Option<&str> {
    let status = agent?.status.as_ref()?;
    find_condition(&status.conditions, BOUND).map(|c| c.reason.as_str())
}

/// spec-controllers.md §5.1: the Agent of a BMH: the newest Agent of its namespace with an interface whose MAC is the
/// host's boot MAC.
async fn find_agent<S: Store>(store: &S, bmh: &BareMetalHost) -> Result<Option<Agent>, StoreError> {
    let Some(mac) = bmh.spec.boot_mac_address.as_deref().filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    let ns = bmh.metadata.namespace.as_deref().unwrap_or_default();
    let mut matching = Vec::new();
    for needle in mac_spellings(mac) {
        for agent in store.list_referencing::<Agent>(Some(ns), Ref::AgentMac, &needle).await? {
            if agent_has_mac(&agent, mac) && !matching.iter().any(|a: &Agent| a.metadata.uid == agent.metadata.uid) {
                matching.push(agent);
            }
        }
    }
    Ok(matching.into_iter().max_by_key(|a| a.metadata.creation_timestamp.as_ref().map(|t| t.0)))
}

/// The spellings a MAC address is found under in stored objects: agents report lower case, people
/// write BMHs in either. (The store's index holds values as written; callers compare exactly.)
fn mac_spellings(mac: &str) -> Vec<String> {
    let (lower, upper) = (mac.to_ascii_lowercase(), mac.to_ascii_uppercase());
    if lower == upper { vec![lower] } else { vec![lower, upper] }
}

pub fn agent_has_mac(agent: &Agent, mac: &str) -> bool {
    agent.status.as_ref().is_some_and(|s| {
        s.inventory.interfaces.iter().any(|i| i.mac_address.as_deref().is_some_and(|m| m.eq_ignore_ascii_case(mac)))
    })
}

/// spec-controllers.md §5.6: the BMH finalizer, and what deleting a BMH does to its Agent. The finalizer protocol of
/// [`crate::controllers::runtime::finalizer`], on the BMH held in memory: what this step changes is
/// written with the rest of the reconcile's changes, in one write.
async fn handle_finalizer<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Step {
    let has_finalizer = has_finalizer(&w.bmh.metadata, BMH_FINALIZER);
    if w.bmh.label(INFRAENV_NAME_LABEL).is_none() {
        remove_finalizer(&mut w.bmh.metadata, BMH_FINALIZER);
        return Step::Stop;
    }
    if w.bmh.metadata.deletion_timestamp.is_none() {
        add_finalizer(&mut w.bmh.metadata, BMH_FINALIZER);
        return Step::Continue;
    }
    let remove_agent = ctx.converged && w.bmh.annotation(REMOVE_AGENT_ON_DELETE_ANNOTATION).is_some();
    let cleanup = |bmh: &mut BareMetalHost| {
        let ann = bmh.annotations_mut();
        if remove_agent {
            ann.remove(DETACHED_ANNOTATION);
        }
        ann.remove(PAUSED_ANNOTATION);
    };
    if !has_finalizer {
        cleanup(&mut w.bmh);
        return Step::Stop;
    }
    if !remove_agent || w.agent.is_none() {
        cleanup(&mut w.bmh);
        remove_finalizer(&mut w.bmh.metadata, BMH_FINALIZER);
        return Step::Stop;
    }
    // Remove-agent mode: drain the node off its cluster, let metal3 deprovision the host (cleaning
    // `metadata`), wait until it is deleting the host, then delete the Agent and let the BMH go.
    if let Step::RequeueAfter(d) = drain(ctx, w).await {
        return Step::RequeueAfter(d);
    }
    {
        let ann = w.bmh.annotations_mut();
        ann.remove(DETACHED_ANNOTATION);
        ann.remove(PAUSED_ANNOTATION);
    }
    w.bmh.spec.automated_cleaning_mode = Some("metadata".to_string());
    if w.bmh.provisioning_state() != "deleting" {
        return Step::RequeueAfter(REQUEUE_WAITING);
    }
    w.delete_agent = true;
    remove_finalizer(&mut w.bmh.metadata, BMH_FINALIZER);
    Step::Stop
}

/// spec-controllers.md §5.6 `handleDrain`: one attempt at draining the spoke node of the BMH's Agent, if it is bound to
/// a cluster, with its progress in the BMH's drain annotations. Continue once the node is drained or
/// the `drain-timeout` has passed; otherwise try again in [`DRAIN_ATTEMPT`].
async fn drain<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Step {
    let Some(agent) = &w.agent else { return Step::Continue };
    let Some(cd) = agent.spec.cluster_deployment_name.clone() else { return Step::Continue };
    if matches!(w.bmh.annotation(DRAIN_STATUS_ANNOTATION), Some(DRAIN_SUCCEEDED | DRAIN_TIMED_OUT)) {
        return Step::Continue;
    }
    let now = ctx.clock.now();
    let started = match w.bmh.annotation(DRAIN_STARTED_AT_ANNOTATION).and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(t) => t,
        None => {
            w.bmh.annotations_mut().insert(DRAIN_STARTED_AT_ANNOTATION.to_string(), now.to_string());
            now
        }
    };
    let timeout = w.bmh.annotation(DRAIN_TIMEOUT_ANNOTATION).and_then(|t| match t.parse::<jiff::SignedDuration>() {
        Ok(d) => Some(d),
        Err(e) => {
            let error = crate::errors::chain(&e);
            tracing::warn!(bmh = ?w.bmh.metadata.name, timeout = t, %error, "ignoring an unreadable drain-timeout");
            None
        }
    });
    let mut set_status = |status: String| {
        w.bmh.annotations_mut().insert(DRAIN_STATUS_ANNOTATION.to_string(), status);
    };
    if timeout.is_some_and(|t| started.checked_add(t).is_ok_and(|until| until <= now)) {
        set_status(DRAIN_TIMED_OUT.to_string());
        return Step::Continue;
    }
    let node = agent
        .spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .or_else(|| agent.status.as_ref().map(|s| s.inventory.hostname.clone()))
        .unwrap_or_default();
    let attempt = async {
        let client = crate::controllers::spoke::for_cluster_required(&ctx.store, &cd.namespace, &cd.name).await?;
        client.drain_node(&node, now).await
    };
    match tokio::time::timeout(DRAIN_ATTEMPT, attempt).await {
        Ok(Ok(crate::controllers::spoke::Drain::Done)) => {
            set_status(DRAIN_SUCCEEDED.to_string());
            Step::Continue
        }
        Ok(Ok(crate::controllers::spoke::Drain::InProgress(_))) => {
            set_status(DRAIN_IN_PROGRESS.to_string());
            Step::RequeueAfter(DRAIN_ATTEMPT)
        }
        Ok(Err(e)) => {
            set_status(format!("failed to drain node: {}", crate::errors::chain(&e)));
            Step::RequeueAfter(DRAIN_ATTEMPT)
        }
        Err(_) => {
            set_status(format!("failed to drain node: no answer within {}s", DRAIN_ATTEMPT.as_secs()));
            Step::RequeueAfter(DRAIN_ATTEMPT)
        }
    }
}

/// spec-controllers.md §5.5: the Agent's cluster went and its host waits for a reboot into discovery: hand the BMH back
/// to metal3, which deprovisions it and (spec-controllers.md §5.3, on a later reconcile) boots the discovery image.
fn reconcile_unbound_agent<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Step {
    let clear_annotations = |bmh: &mut BareMetalHost| {
        let ann = bmh.annotations_mut();
        for key in
            [DETACHED_ANNOTATION, PAUSED_ANNOTATION, HARDWARE_DETAILS_ANNOTATION, SPOKE_BMH_MACHINE_CREATED_ANNOTATION]
        {
            ann.remove(key);
        }
    };
    if !ctx.converged {
        if w.bmh.annotation(DETACHED_ANNOTATION).is_none() {
            return Step::Continue;
        }
        clear_annotations(&mut w.bmh);
        w.bmh.spec.image = None;
        return Step::Stop;
    }
    match w.bmh.provisioning_state() {
        "provisioned" => {
            clear_annotations(&mut w.bmh);
            w.bmh.spec.custom_deploy = None;
            Step::Stop
        }
        "deprovisioning" => {
            clear_annotations(&mut w.bmh);
            Step::Stop
        }
        _ => {
            clear_annotations(&mut w.bmh);
            Step::Continue
        }
    }
}

/// spec-controllers.md §5.4: detach hosts whose installation no longer needs metal3, pause detached ones.
fn handle_pause_and_detach<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Step {
    if w.bmh.annotation(ALLOW_PROVISIONED_HOST_MANAGEMENT_ANNOTATION).is_some() {
        if ctx.converged && w.bmh.metadata.deletion_timestamp.is_none() {
            let ann = w.bmh.annotations_mut();
            ann.remove(DETACHED_ANNOTATION);
            ann.remove(PAUSED_ANNOTATION);
            return Step::Stop;
        }
        tracing::error!(
            bmh = ?w.bmh.metadata.name,
            "{ALLOW_PROVISIONED_HOST_MANAGEMENT_ANNOTATION} needs the converged flow; ignored"
        );
    }
    let stage = w.agent.as_ref().and_then(|a| a.status.as_ref()).map(|s| s.progress.current_stage.as_str());
    let detach = if ctx.converged {
        w.bmh.provisioning_state() == "provisioned"
    } else {
        stage.is_some_and(|s| STAGES_DETACHING.contains(&s))
    };
    if detach
        && agent_bound_reason(w.agent.as_ref()) != Some(REASON_UNBINDING_PENDING_USER_ACTION)
        && w.bmh.annotation(DETACHED_ANNOTATION).is_none()
    {
        let value = if ctx.converged && w.bmh.annotation(REMOVE_AGENT_ON_DELETE_ANNOTATION).is_some() {
            json!({"deleteAction": "delay"}).to_string()
        } else {
            BMAC_ANNOTATION_VALUE.to_string()
        };
        w.bmh.annotations_mut().insert(DETACHED_ANNOTATION.to_string(), value);
        return Step::Stop;
    }
    // Only while the BMAC keeps the host detached: once spec-controllers.md §5.5 gave the host back to metal3, metal3
    // may still report `detached` for a moment, and pausing then would stop it from ever noticing.
    if ctx.pause_provisioned
        && w.bmh.operational_status() == "detached"
        && w.bmh.annotation(DETACHED_ANNOTATION).is_some()
    {
        let status = serde_json::to_string(&w.bmh.status).unwrap_or_default();
        let ann = w.bmh.annotations_mut();
        ann.insert(STATUS_ANNOTATION.to_string(), status);
        ann.insert(PAUSED_ANNOTATION.to_string(), BMAC_ANNOTATION_VALUE.to_string());
    }
    if ctx.pause_provisioned
        && w.bmh.provisioning_state().is_empty()
        && w.bmh.annotation(PAUSED_ANNOTATION).is_some()
        && w.bmh.annotation(STATUS_ANNOTATION).is_some()
    {
        // metal3 restores the status from the annotation once the host is unpaused.
        w.bmh.annotations_mut().remove(PAUSED_ANNOTATION);
    }
    Step::Continue
}

/// spec-controllers.md §5.3 `create-fencing-credentials-secret`: the Agent's fencing credentials, written from the
/// BMH's BMC (address, the username and password of its credentials secret, and whether to verify the BMC's
/// certificate) into the secret `<agent>-fencing-credentials`, which the Agent then references. A
/// name given with `fencing-credentials-secret-name` wins.
async fn ensure_fencing_credentials<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Result<Step, StoreError> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let wanted = w.bmh.annotation(CREATE_FENCING_SECRET_ANNOTATION).is_some_and(|v| v != "false");
    let Some(agent) = w.agent.as_mut() else { return Ok(Step::Continue) };
    if !wanted || w.bmh.annotation(FENCING_SECRET_ANNOTATION).is_some() {
        return Ok(Step::Continue);
    }
    let ns = w.bmh.metadata.namespace.clone().unwrap_or_default();
    let Some(bmc) = w.bmh.spec.bmc.as_ref().filter(|b| !b.address.is_empty()) else {
        return Err(StoreError::Invalid(format!(
            "BareMetalHost {ns}/{}: fencing credentials need spec.bmc.address",
            w.bmh.metadata.name.as_deref().unwrap_or_default()
        )));
    };
    let credentials = ctx.store.get::<Secret>(&ns, &bmc.credentials_name).await?.ok_or_else(|| {
        StoreError::Invalid(format!("the BMC credentials secret {ns}/{} does not exist", bmc.credentials_name))
    })?;
    let field = |key: &str| {
        credentials.data.as_ref().and_then(|d| d.get(key)).cloned().ok_or_else(|| {
            StoreError::Invalid(format!("the BMC credentials secret {ns}/{} has no {key}", bmc.credentials_name))
        })
    };
    let verification = if bmc.disable_certificate_verification == Some(true) { "Disabled" } else { "Enabled" };
    let data: BTreeMap<String, ByteString> = [
        ("address".to_string(), ByteString(bmc.address.clone().into_bytes())),
        ("username".to_string(), field("username")?),
        ("password".to_string(), field("password")?),
        ("certificateVerification".to_string(), ByteString(verification.as_bytes().to_vec())),
    ]
    .into();
    let name = format!("{}-fencing-credentials", agent.metadata.name.as_deref().unwrap_or_default());
    match ctx.store.get::<Secret>(&ns, &name).await? {
        Some(mut live) if live.data.as_ref() != Some(&data) => {
            live.data = Some(data);
            ctx.store.update(&live).await?;
        }
        Some(_) => {}
        None => {
            let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "metal3.io/v1alpha1".into(),
                kind: "BareMetalHost".into(),
                name: w.bmh.metadata.name.clone().unwrap_or_default(),
                uid: w.bmh.metadata.uid.clone().unwrap_or_default(),
                ..Default::default()
            };
            let secret = Secret {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    owner_references: Some(vec![owner]),
                    ..Default::default()
                },
                data: Some(data),
                type_: Some("Opaque".into()),
                ..Default::default()
            };
            ctx.store.create(&secret).await?;
        }
    }
    agent.spec.fencing_credentials_secret_ref = Some(name);
    Ok(Step::Continue)
}

/// spec-controllers.md §5.3 `reconcileBMH`: the image the host boots.
async fn reconcile_bmh<S: Store>(ctx: &BmacContext<S>, w: &mut World) -> Result<Step, StoreError> {
    let Some(infraenv) = &w.infraenv else { return Ok(Step::Stop) };
    if w.bmh.annotation(DETACHED_ANNOTATION).is_some() {
        return Ok(Step::Continue);
    }
    if ctx.converged {
        if w.bmh.spec.custom_deploy.as_ref().is_none_or(|c| c.method != ASSISTED_DEPLOY_METHOD) {
            let ns = w.bmh.metadata.namespace.clone().unwrap_or_default();
            let name = w.bmh.metadata.name.clone().unwrap_or_default();
            let ppi_ready = ctx.store.get::<PreprovisioningImage>(&ns, &name).await?.is_some_and(|ppi| {
                ppi.status.as_ref().is_some_and(|s| {
                    s.conditions.iter().any(|c| {
                        c.type_ == super::PPI_READY_CONDITION
                            && c.status == "True"
                            && c.reason == REASON_INFRAENV_AVAILABLE
                    })
                })
            });
            if !ppi_ready {
                return Ok(Step::Stop);
            }
            w.bmh.spec.custom_deploy = Some(CustomDeploy { method: ASSISTED_DEPLOY_METHOD.to_string() });
        }
        return Ok(Step::Continue);
    }
    w.bmh.annotations_mut().entry(INSPECT_ANNOTATION.to_string()).or_insert_with(|| "disabled".to_string());
    w.bmh.spec.automated_cleaning_mode = Some("disabled".to_string());
    let status = infraenv.status.as_ref();
    let iso_url = status.map(|s| s.iso_download_url.as_str()).unwrap_or("");
    if iso_url.is_empty() {
        return Ok(Step::Stop);
    }
    let infraenv_id = infraenv.metadata.uid.as_deref().unwrap_or_default();
    // The same image under another token: nothing to do if the host's token lasts. Otherwise (a URL
    // from before tokens lasted, or unsigned URLs) a host that is not provisioned takes the new URL;
    // a provisioned one keeps its image (a new URL there would deprovision and reboot it).
    let not_provisioned = matches!(w.bmh.provisioning_state(), "ready" | "available");
    if let Some(image) = w.bmh.spec.image.as_mut()
        && crate::auth::urlsign::without_token(&image.url) == crate::auth::urlsign::without_token(iso_url)
    {
        if image.url == iso_url || ctx.is_lasting_url(infraenv_id, &image.url) {
            return Ok(Step::Continue);
        }
        if not_provisioned {
            image.url = ctx.host_image_url(infraenv_id, iso_url);
            return Ok(Step::Stop);
        }
        return Ok(Step::Continue);
    }
    if let Some(wait) = cooldown_left(infraenv, ctx.clock.now(), ctx.image_cooldown) {
        return Ok(Step::RequeueAfter(wait));
    }
    if !matches!(w.bmh.provisioning_state(), "ready" | "available") {
        // A host provisioned with the old image must be deprovisioned first; clearing the image
        // starts that, and also makes ironic drop its cached copy.
        w.bmh.spec.image = None;
        return Ok(Step::Stop);
    }
    w.bmh.spec.image = Some(BmhImage {
        url: ctx.host_image_url(infraenv_id, iso_url),
        format: Some("live-iso".to_string()),
        ..Default::default()
    });
    w.bmh.spec.online = true;
    Ok(Step::Stop)
}

/// spec-controllers.md §5.3 `reconcileAgentSpec`: the BMH's annotations become the Agent's spec.
fn reconcile_agent_spec(w: &mut World) -> Step {
    let bmh = &w.bmh;
    let bmh_name = bmh.metadata.name.clone().unwrap_or_default();
    let infraenv_cluster_ref = w.infraenv.as_ref().and_then(|ie| ie.spec.cluster_ref.clone());
    let Some(agent) = w.agent.as_mut() else { return Step::Stop };
    let annotations = bmh.metadata.annotations.clone().unwrap_or_default();
    let copy = |key: &str, field: &mut Option<String>| {
        if let Some(v) = annotations.get(key) {
            *field = Some(v.clone());
        }
    };
    copy(ROLE_ANNOTATION, &mut agent.spec.role);
    copy(HOSTNAME_ANNOTATION, &mut agent.spec.hostname);
    copy(MCP_ANNOTATION, &mut agent.spec.machine_config_pool);
    copy(INSTALLER_ARGS_ANNOTATION, &mut agent.spec.installer_args);
    copy(IGNITION_OVERRIDES_ANNOTATION, &mut agent.spec.ignition_config_overrides);
    if let Some(secret) = annotations.get(FENCING_SECRET_ANNOTATION) {
        agent.spec.fencing_credentials_secret_ref = Some(secret.clone());
    }
    if let Some(reference) = annotations.get(CLUSTER_REFERENCE_ANNOTATION) {
        if infraenv_cluster_ref.is_some() {
            tracing::error!(
                bmh = %bmh_name,
                "{CLUSTER_REFERENCE_ANNOTATION} is set but the InfraEnv is bound to a cluster: ignored"
            );
        } else if reference.is_empty() {
            agent.spec.cluster_deployment_name = None;
        } else {
            match reference.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    agent.spec.cluster_deployment_name =
                        Some(ClusterDeploymentReference { name: name.to_string(), namespace: ns.to_string() });
                }
                _ => tracing::error!(
                    bmh = %bmh_name,
                    "{CLUSTER_REFERENCE_ANNOTATION} must be namespace/name, got {reference:?}: ignored"
                ),
            }
        }
    }
    let node_labels: BTreeMap<String, String> = annotations
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(NODE_LABEL_PREFIX).map(|k| (k.to_string(), v.clone())))
        .collect();
    if !node_labels.is_empty() {
        agent.spec.node_labels = Some(node_labels);
    }
    let labels = agent.metadata.labels.get_or_insert_default();
    for (k, v) in &annotations {
        if let Some(label) = k.strip_prefix(AGENT_LABEL_PREFIX) {
            labels.insert(label.to_string(), v.clone());
        }
    }
    labels.insert(BMH_LABEL.to_string(), bmh_name);
    agent.spec.approved = true;
    if let Some(hints) = &bmh.spec.root_device_hints {
        let disks = agent.status.as_ref().map(|s| s.inventory.disks.as_slice()).unwrap_or_default();
        agent.spec.installation_disk_id = Some(installation_disk(disks, hints));
    }
    Step::Continue
}

/// The disk root device hints pick among an Agent's disks (its status inventory): every hint given
/// must match, only disks eligible for installation count, and a multipath device is preferred over
/// the paths it is made of.
pub fn installation_disk(disks: &[InventoryDisk], hints: &RootDeviceHints) -> String {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let matches = |d: &&InventoryDisk| {
        let path = text(&d.path);
        d.eligible()
            && hints.device_name.as_ref().is_none_or(|n| *n == path || *n == text(&d.by_path))
            && hints.hctl.as_ref().is_none_or(|h| *h == text(&d.hctl))
            && hints.model.as_ref().is_none_or(|m| text(&d.model).contains(m.as_str()))
            && hints.vendor.as_ref().is_none_or(|v| text(&d.vendor).contains(v.as_str()))
            && hints.serial_number.as_ref().is_none_or(|s| *s == text(&d.serial))
            && hints.wwn.as_ref().is_none_or(|w| *w == text(&d.wwn))
            && hints.min_size_gigabytes.is_none_or(|gib| d.size_bytes.unwrap_or(0) >= gib << 30)
            && hints.rotational.is_none_or(|r| r == text(&d.drive_type).eq_ignore_ascii_case("HDD"))
    };
    let candidates: Vec<&InventoryDisk> = disks.iter().filter(matches).collect();
    candidates
        .iter()
        .find(|d| text(&d.drive_type).eq_ignore_ascii_case("Multipath"))
        .or(candidates.first())
        .map(|d| text(&d.id))
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| DISK_NOT_FOUND_BY_HINTS.to_string())
}

/// spec-controllers.md §5.3 `reconcileAgentInventory`: the Agent's inventory as metal3 hardware details, written once.
fn reconcile_agent_inventory(w: &mut World) -> Step {
    let Some(agent) = &w.agent else { return Step::Continue };
    let Some(status) = &agent.status else { return Step::Continue };
    let inv = &status.inventory;
    let hardware_hostname =
        w.bmh.status.as_ref().and_then(|s| s.hardware.as_ref()).and_then(|h| h.hostname.as_deref()).unwrap_or("");
    if inv.interfaces.is_empty()
        || w.bmh.annotation(HARDWARE_DETAILS_ANNOTATION).is_some()
        || !hardware_hostname.is_empty()
    {
        return Step::Continue;
    }
    let details = hardware_details(agent);
    w.bmh.annotations_mut().insert(HARDWARE_DETAILS_ANNOTATION.to_string(), details.to_string());
    Step::Stop
}

/// metal3's HardwareDetails from an Agent's inventory.
pub fn hardware_details(agent: &Agent) -> Value {
    let Some(status) = &agent.status else { return json!({}) };
    let inv = &status.inventory;
    let strip_prefix = |ip: &str| ip.split('/').next().unwrap_or_default().to_string();
    let mut nics = Vec::new();
    for i in &inv.interfaces {
        let ips = i.ip_v6_addresses.iter().flatten().chain(i.ip_v4_addresses.iter().flatten());
        for ip in ips {
            nics.push(json!({
                "ip": strip_prefix(ip),
                "name": i.name,
                "model": i.vendor,
                "mac": i.mac_address,
                "speedGbps": i.speed_mbps.unwrap_or(0) / 1024,
            }));
        }
    }
    let storage: Vec<Value> = inv
        .disks
        .iter()
        .map(|d| {
            let by_path = d.by_path.as_deref().unwrap_or_default();
            json!({
                "name": if by_path.is_empty() { json!(d.path) } else { json!(by_path) },
                "hctl": d.hctl,
                "model": d.model,
                "sizeBytes": d.size_bytes,
                "serialNumber": d.serial,
                "wwn": d.wwn,
                "vendor": d.vendor,
                "rotational": d.drive_type.as_deref().is_some_and(|t| t.eq_ignore_ascii_case("HDD")),
            })
        })
        .collect();
    let hostname = agent.spec.hostname.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| inv.hostname.clone());
    let cpu = inv.cpu.clone().unwrap_or_default();
    let vendor = inv.system_vendor.clone().unwrap_or_default();
    json!({
        "nics": nics,
        "storage": storage,
        "ramMebibytes": inv.memory.as_ref().and_then(|m| m.physical_bytes).unwrap_or(0) >> 20,
        "cpu": {
            "flags": cpu.flags,
            "count": cpu.count,
            "model": cpu.model_name,
            "arch": cpu.architecture,
            "clockMegahertz": cpu.clock_megahertz,
        },
        "systemVendor": {
            "manufacturer": vendor.manufacturer,
            "productName": vendor.product_name,
            "serialNumber": vendor.serial_number,
        },
        "hostname": hostname,
    })
}

/// The BMHs a change to another object concerns (spec-controllers.md §5.1 watches): an Agent's BMH (by label, else by
/// MAC), an InfraEnv's BMHs (by label), a PreprovisioningImage's BMH (same name).
pub async fn bmhs_for_agent<S: Store>(store: &S, agent: &Agent) -> Result<Vec<String>, StoreError> {
    let ns = agent.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(bmh) = agent.metadata.labels.as_ref().and_then(|l| l.get(BMH_LABEL)) {
        return Ok(vec![bmh.clone()]);
    }
    let macs: Vec<String> = agent
        .status
        .as_ref()
        .map(|s| s.inventory.interfaces.iter().filter_map(|i| i.mac_address.clone()).collect())
        .unwrap_or_default();
    let mut names = Vec::new();
    for mac in &macs {
        for needle in mac_spellings(mac) {
            for b in store.list_referencing::<BareMetalHost>(Some(ns), Ref::BmhBootMac, &needle).await? {
                if b.spec.boot_mac_address.as_ref().is_some_and(|m| m.eq_ignore_ascii_case(mac))
                    && let Some(name) = b.metadata.name
                    && !names.contains(&name)
                {
                    names.push(name);
                }
            }
        }
    }
    Ok(names)
}

pub async fn bmhs_for_infraenv<S: Store>(store: &S, ns: &str, infraenv: &str) -> Result<Vec<String>, StoreError> {
    Ok(store
        .list_referencing::<BareMetalHost>(Some(ns), Ref::BmhInfraEnv, infraenv)
        .await?
        .into_iter()
        .filter(|b| b.label(INFRAENV_NAME_LABEL) == Some(infraenv))
        .filter_map(|b| b.metadata.name)
        .collect())
}
