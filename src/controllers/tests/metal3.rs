//! BMAC and PreprovisioningImage scenarios of spec-controllers.md §10 (58–76), and the agent-controller
//! scenarios that involve a BareMetalHost (31, the BMH half of 38), against the real SQLite store and
//! backend. metal3 itself is played by the tests: they write the BMH status it would report.

use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use serde_json::{Value, json};

use super::*;
use crate::controllers::metal3::bmac::{self, BmacContext};
use crate::controllers::metal3::ppi::{self, PpiContext};
use crate::pool::Clock;
use crate::resources::metal3::*;
use crate::resources::{BareMetalHost, PreprovisioningImage, Time};

const ISO_URL: &str = "http://hub.example:8090/byapikey/token/4.16/x86_64/full.iso";

fn bmac_ctx<S: Store>(w: &World<S>, converged: bool) -> BmacContext<S> {
    let clock: Arc<dyn Clock> = w.clock.clone();
    BmacContext {
        store: w.store.clone(),
        clock,
        converged,
        pause_provisioned: true,
        image_cooldown: bmac::IMAGE_COOLDOWN,
        url_signer: None,
    }
}

fn ppi_ctx<S: Store>(w: &World<S>) -> PpiContext<S> {
    let clock: Arc<dyn Clock> = w.clock.clone();
    PpiContext { store: w.store.clone(), clock, image_cooldown: bmac::IMAGE_COOLDOWN, url_signer: None }
}

/// The MAC `crate::hosts::simulated::inventory(index)` gives the host's NIC.
fn mac(index: usize) -> String {
    format!("52:54:00:00:{:02x}:{:02x}", (index >> 8) & 0xff, index & 0xff)
}

impl<S: Store> World<S> {
    /// A BMH of the pool InfraEnv booting from the NIC of simulated host `index`.
    async fn bmh(&self, name: &str, index: usize, annotations: Value) -> BareMetalHost {
        self.apply(
            Kind::BareMetalHost,
            json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                   "metadata": {"name": name, "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: "pool"},
                                "annotations": annotations},
                   "spec": {"online": false, "bootMACAddress": mac(index),
                            "bmc": {"address": "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1",
                                    "credentialsName": format!("{name}-bmc")}}}),
        )
        .await;
        self.get_bmh(name).await
    }

    async fn get_bmh(&self, name: &str) -> BareMetalHost {
        self.store.get::<BareMetalHost>(ns(), name).await.unwrap().expect("the BMH exists")
    }

    /// metal3 reports the host in `state` (and `operational`, "OK" unless given).
    async fn metal3_reports(&self, name: &str, state: &str, operational: &str) {
        let mut b = self.get_bmh(name).await;
        let status = b.status.get_or_insert_default();
        status.provisioning = Some(ProvisionStatus { state: state.to_string(), ..Default::default() });
        status.operational_status = Some(operational.to_string());
        self.admin.update_status(&b).await.unwrap();
        self.settle().await;
    }

    /// The InfraEnv's image exists since `age` ago (what the InfraEnv controller reports).
    async fn image_created(&self, ie: &str, age: SignedDuration) {
        let mut infraenv = self.store.get::<InfraEnv>(ns(), ie).await.unwrap().unwrap();
        let created = self.clock.now().checked_sub(age).unwrap();
        let status = infraenv.status.get_or_insert_default();
        status.iso_download_url = ISO_URL.to_string();
        status.created_time = Some(Time(created));
        status.boot_artifacts = crate::resources::BootArtifacts {
            initrd: "http://hub.example:8090/images/initrd".into(),
            kernel: "http://hub.example:8090/boot-artifacts/kernel".into(),
            rootfs: "http://hub.example:8090/boot-artifacts/rootfs".into(),
            ..Default::default()
        };
        status.conditions = vec![crate::resources::Condition {
            type_: crate::resources::IMAGE_CREATED_CONDITION.into(),
            status: "True".into(),
            reason: crate::resources::REASON_INFRAENV_AVAILABLE.into(),
            message: crate::resources::MESSAGE_IMAGE_AVAILABLE.into(),
            last_transition_time: None,
            last_heartbeat_time: None,
            last_probe_time: None,
        }];
        let ironic = crate::content::ironic::enabled(&infraenv);
        infraenv.status.get_or_insert_default().ironic_agent = ironic;
        self.store.update_status(&infraenv).await.unwrap();
    }

    async fn run_bmac(&self, ctx: &BmacContext<S>, name: &str) -> Action {
        // Each reconcile stops after its first change; a few rounds reach the fixed point.
        let mut last = Action::Done;
        for _ in 0..6 {
            last = bmac::reconcile(ctx, ns(), name).await.unwrap();
        }
        last
    }
}

fn annotation(b: &BareMetalHost, key: &str) -> Option<String> {
    b.annotation(key).map(str::to_string)
}

async fn scenario_58_a_bmh_gets_the_infraenv_iso_once_the_image_is_old_enough<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    let image = b.spec.image.clone().expect("an image");
    assert_eq!((image.url.as_str(), image.format.as_deref()), (ISO_URL, Some("live-iso")));
    assert!(b.spec.online);
    assert_eq!(annotation(&b, INSPECT_ANNOTATION).as_deref(), Some("disabled"));
    assert_eq!(b.spec.automated_cleaning_mode.as_deref(), Some("disabled"));
    assert!(b.metadata.finalizers.unwrap_or_default().contains(&BMH_FINALIZER.to_string()));
    assert_eq!(b.metadata.labels.unwrap().get(BACKUP_LABEL).map(String::as_str), Some("true"));
}

async fn scenario_59_a_fresh_image_cools_down_before_the_bmh_gets_it<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_secs(20)).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "ready", "OK").await;
    match w.run_bmac(&ctx, "bmh-0").await {
        Action::RequeueAfter(d) => assert!(d <= Duration::from_secs(40) && d > Duration::from_secs(30), "{d:?}"),
        other => panic!("expected a requeue, got {other:?}"),
    }
    assert_eq!(w.get_bmh("bmh-0").await.spec.image, None);
    w.clock.advance(SignedDuration::from_secs(41));
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image.map(|i| i.url).as_deref(), Some(ISO_URL));
}

async fn scenario_60_the_agent_with_the_boot_mac_gets_the_bmh_annotations<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let older = w.pool_host("pool", 0).await;
    w.clock.advance(SignedDuration::from_secs(1));
    // A second Agent with the same MAC, created later (the machine was re-registered): it wins.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let newer = w.pool_host("pool", 0).await;
    let mut a = w.agent(&older).await;
    a.spec.approved = false;
    w.store.update(&a).await.unwrap();
    w.bmh(
        "bmh-0",
        0,
        json!({ROLE_ANNOTATION: "master", HOSTNAME_ANNOTATION: "node-0.example.com", MCP_ANNOTATION: "infra",
               INSTALLER_ARGS_ANNOTATION: "[\"--append-karg\", \"nameserver=8.8.8.8\"]",
               IGNITION_OVERRIDES_ANNOTATION: "{\"ignition\": {\"version\": \"3.1.0\"}}",
               format!("{NODE_LABEL_PREFIX}topology.example.com/rack"): "r1",
               format!("{AGENT_LABEL_PREFIX}site"): "east", FENCING_SECRET_ANNOTATION: "node-0-fencing"}),
    )
    .await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let a = w.agent(&newer).await;
    assert!(a.spec.approved);
    assert_eq!(a.spec.role.as_deref(), Some("master"));
    assert_eq!(a.spec.hostname.as_deref(), Some("node-0.example.com"));
    assert_eq!(a.spec.machine_config_pool.as_deref(), Some("infra"));
    assert_eq!(a.spec.installer_args.as_deref(), Some("[\"--append-karg\", \"nameserver=8.8.8.8\"]"));
    assert_eq!(a.spec.ignition_config_overrides.as_deref(), Some("{\"ignition\": {\"version\": \"3.1.0\"}}"));
    assert_eq!(a.spec.fencing_credentials_secret_ref.as_deref(), Some("node-0-fencing"));
    assert_eq!(a.spec.node_labels.unwrap().get("topology.example.com/rack").map(String::as_str), Some("r1"));
    let labels = a.metadata.labels.unwrap();
    assert_eq!(labels.get(crate::resources::agent::BMH_LABEL).map(String::as_str), Some("bmh-0"));
    assert_eq!(labels.get("site").map(String::as_str), Some("east"));
    let old = w.agent(&older).await;
    assert!(!old.spec.approved, "the older Agent with the same MAC is not the BMH's");
    assert_eq!(old.spec.role, None);
}

async fn scenario_61_the_cluster_reference_annotation_binds_and_unbinds<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({CLUSTER_REFERENCE_ANNOTATION: format!("{}/c1", ns())})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let cd = w.agent(&id).await.spec.cluster_deployment_name.expect("bound by the annotation");
    assert_eq!((cd.namespace.as_str(), cd.name.as_str()), (ns(), "c1"));
    let mut b = w.get_bmh("bmh-0").await;
    b.annotations_mut().insert(CLUSTER_REFERENCE_ANNOTATION.into(), String::new());
    w.store.update(&b).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.agent(&id).await.spec.cluster_deployment_name, None);

    // An InfraEnv bound to a cluster owns the reference: the annotation is refused.
    w.infraenv("pool", Some("c2")).await;
    let mut b = w.get_bmh("bmh-0").await;
    b.annotations_mut().insert(CLUSTER_REFERENCE_ANNOTATION.into(), format!("{}/c1", ns()));
    w.store.update(&b).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.agent(&id).await.spec.cluster_deployment_name, None);
}

#[test]
fn scenario_62_root_device_hints_pick_the_installation_disk() {
    let disk = |id: &str, wwn: &str, drive: &str| {
        serde_json::from_value::<crate::resources::agent::InventoryDisk>(
            json!({"id": id, "path": id, "wwn": wwn, "driveType": drive, "sizeBytes": 200u64 << 30,
                   "installationEligibility": {"eligible": true}}),
        )
        .unwrap()
    };
    let disks = vec![
        disk("/dev/sda", "0x5000", "SSD"),
        disk("/dev/sdb", "0x6000", "FC"),
        disk("/dev/sdc", "0x6000", "FC"),
        disk("/dev/dm-0", "0x6000", "Multipath"),
    ];
    let hints = |v: Value| serde_json::from_value::<RootDeviceHints>(v).unwrap();
    assert_eq!(bmac::installation_disk(&disks, &hints(json!({"wwn": "0x9999"}))), bmac::DISK_NOT_FOUND_BY_HINTS);
    assert_eq!(bmac::installation_disk(&disks, &hints(json!({"wwn": "0x6000"}))), "/dev/dm-0");
    assert_eq!(bmac::installation_disk(&disks, &hints(json!({"deviceName": "/dev/sda"}))), "/dev/sda");
    assert_eq!(
        bmac::installation_disk(&disks, &hints(json!({"minSizeGigabytes": 500}))),
        bmac::DISK_NOT_FOUND_BY_HINTS
    );
    // Only eligible disks count.
    let mut ineligible = disks.clone();
    ineligible[0].installation_eligibility.as_mut().unwrap().eligible = Some(false);
    assert_eq!(
        bmac::installation_disk(&ineligible, &hints(json!({"deviceName": "/dev/sda"}))),
        bmac::DISK_NOT_FOUND_BY_HINTS
    );
}

async fn scenario_62_hints_that_match_nothing_set_the_not_found_disk_on_the_agent<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({})).await;
    let mut b = w.get_bmh("bmh-0").await;
    b.spec.root_device_hints = Some(RootDeviceHints { serial_number: Some("nope".into()), ..Default::default() });
    w.store.update(&b).await.unwrap();
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.agent(&id).await.spec.installation_disk_id.as_deref(), Some(bmac::DISK_NOT_FOUND_BY_HINTS));
}

async fn scenario_63_the_agent_inventory_becomes_hardware_details<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let id = w.pool_host("pool", 3).await;
    w.bmh("bmh-3", 3, json!({})).await;
    w.metal3_reports("bmh-3", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-3").await;
    let b = w.get_bmh("bmh-3").await;
    let details: Value =
        serde_json::from_str(&annotation(&b, HARDWARE_DETAILS_ANNOTATION).expect("hardware details")).unwrap();
    assert_eq!(details["hostname"], "sim-3");
    assert_eq!(details["nics"][0]["ip"], "10.0.0.3", "the prefix length is dropped");
    assert_eq!(details["nics"][0]["mac"], mac(3));
    assert_eq!(details["nics"][0]["speedGbps"], 9);
    assert_eq!(details["ramMebibytes"], 16384);
    assert_eq!(details["cpu"]["count"], 4);
    assert_eq!(details["storage"][0]["name"], "/dev/disk/by-path/pci-0000:03:00.0");
    assert_eq!(details["storage"][0]["rotational"], false);

    // With a hostname in the spec, that one (a fresh BMH: the annotation is written only once).
    let mut a = w.agent(&id).await;
    a.spec.hostname = Some("named.example.com".into());
    let details = bmac::hardware_details(&a);
    assert_eq!(details["hostname"], "named.example.com");
}

async fn scenario_64_a_bmh_is_detached_once_its_agent_is_past_writing_the_image<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.cluster_deployment("c1", true).await;
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, DETACHED_ANNOTATION), None, "not started: attached");

    for (stage, detached) in [("Writing image to disk", false), ("Rebooting", true)] {
        w.set_host(&id, HostStatus::InstallingInProgress, stage).await;
        w.reconcile(&id).await;
        w.run_bmac(&ctx, "bmh-0").await;
        let b = w.get_bmh("bmh-0").await;
        assert_eq!(annotation(&b, DETACHED_ANNOTATION).is_some(), detached, "at {stage}");
    }
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, DETACHED_ANNOTATION).as_deref(), Some(BMAC_ANNOTATION_VALUE));
    // A detached host ignores a new image.
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.status.as_mut().unwrap().iso_download_url = "http://hub.example:8090/new.iso".into();
    w.store.update_status(&ie).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image.map(|i| i.url).as_deref(), Some(ISO_URL));
    // metal3 reports it detached: the BMAC pauses it, keeping its status.
    w.metal3_reports("bmh-0", "provisioned", "detached").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(annotation(&b, PAUSED_ANNOTATION).as_deref(), Some(BMAC_ANNOTATION_VALUE));
    let saved: Value = serde_json::from_str(&annotation(&b, STATUS_ANNOTATION).unwrap()).unwrap();
    assert_eq!(saved["provisioning"]["state"], "provisioned");
}

/// Scenario 65 and spec-controllers.md §5.5 to the end: the cluster is deleted, the installed host waits for a reboot,
/// the BMAC gives the BMH back to metal3, metal3 deprovisions it and boots the ISO, and the host is
/// back in the pool.
async fn scenario_65_an_unbound_installed_host_is_rebooted_into_discovery_through_its_bmh<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.cluster_deployment("c1", true).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    let id = w.installed_host("c1", 0).await;
    w.run_bmac(&ctx, "bmh-0").await;
    w.metal3_reports("bmh-0", "provisioned", "detached").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    assert!(annotation(&b, DETACHED_ANNOTATION).is_some() && annotation(&b, PAUSED_ANNOTATION).is_some());
    assert!(annotation(&b, HARDWARE_DETAILS_ANNOTATION).is_some());

    // The cluster goes: the Agent is unbound and waits for a reboot (metal3 is there: no reclaim).
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    assert_eq!(cond(&w.agent(&id).await, BOUND), ("False", "UnbindingPendingUserAction".into()));

    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    for key in [DETACHED_ANNOTATION, PAUSED_ANNOTATION, HARDWARE_DETAILS_ANNOTATION] {
        assert_eq!(annotation(&b, key), None, "{key} stays");
    }
    // metal3 deprovisions the attached host with no image; then the ISO is set again.
    w.metal3_reports("bmh-0", "deprovisioning", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image, None);
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image.map(|i| i.url).as_deref(), Some(ISO_URL));
    // The machine boots the discovery ISO and its agent registers: back in the pool.
    w.register_again(&id).await;
    assert_eq!(w.status(&id).await, HostStatus::DiscoveringUnbound);
    w.backend.update_inventory(&w.key(&id).await, crate::hosts::simulated::inventory(0).to_string()).await.unwrap();
    assert_eq!(w.status(&id).await, HostStatus::KnownUnbound);
}

async fn scenario_65_a_bmh_that_is_not_detached_is_left_alone<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.cluster_deployment("c1", true).await;
    let id = w.installed_host("c1", 0).await;
    w.set_cluster(&id, None).await;
    assert_eq!(cond(&w.agent(&id).await, BOUND), ("False", "UnbindingPendingUserAction".into()));
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    let mut b = w.get_bmh("bmh-0").await;
    b.spec.image = Some(BmhImage { url: ISO_URL.into(), format: Some("live-iso".into()), ..Default::default() });
    w.store.update(&b).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image.map(|i| i.url).as_deref(), Some(ISO_URL));
}

/// A PPI for bmh-0 in the pool InfraEnv, owned by the BMH.
async fn ppi<S: Store>(w: &World<S>, formats: &[&str], arch: &str) -> PreprovisioningImage {
    let bmh = w.store.get::<BareMetalHost>(ns(), "bmh-0").await.unwrap();
    let owners = bmh
        .map(|b| {
            json!([{"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "name": "bmh-0",
                         "uid": b.metadata.uid.unwrap()}])
        })
        .unwrap_or(json!([]));
    w.apply(
        Kind::PreprovisioningImage,
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "PreprovisioningImage",
               "metadata": {"name": "bmh-0", "namespace": ns(), "labels": {INFRAENV_NAME_LABEL: "pool"},
                            "ownerReferences": owners},
               "spec": {"acceptFormats": formats, "architecture": arch}}),
    )
    .await;
    get_ppi(w).await
}

/// The PPI turns the ironic agent on for its InfraEnv, the InfraEnv controller makes the image with
/// it (old enough to have cooled down), and the PPI takes it.
async fn ironic_image_made<S: Store>(w: &World<S>) {
    run_ppi(w).await;
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    run_ppi(w).await;
}

async fn get_ppi<S: Store>(w: &World<S>) -> PreprovisioningImage {
    w.store.get::<PreprovisioningImage>(ns(), "bmh-0").await.unwrap().expect("the PPI exists")
}

async fn run_ppi<S: Store>(w: &World<S>) -> Action {
    let ctx = ppi_ctx(w);
    let mut last = Action::Done;
    for _ in 0..3 {
        last = ppi::reconcile(&ctx, ns(), "bmh-0").await.unwrap();
    }
    last
}

fn ppi_condition(p: &PreprovisioningImage, type_: &str) -> (String, String, String) {
    let c = p.status.as_ref().unwrap().conditions.iter().find(|c| c.type_ == type_).expect("the condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

async fn scenario_66_converged_a_ready_ppi_sets_the_assisted_deploy_method<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, true);
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.custom_deploy, None, "no PPI yet");
    ppi(&w, &["iso", "initrd"], "x86_64").await;
    w.image_created("pool", SignedDuration::from_mins(10)).await;
    // The PPI turns the ironic agent on: the image from before is not for it.
    run_ppi(&w).await;
    let waiting = ppi_condition(&get_ppi(&w).await, "Ready");
    assert_eq!((waiting.0.as_str(), waiting.2.as_str()), ("False", "Waiting for InfraEnv image to be created"));
    // The InfraEnv controller makes the image with the agent.
    w.image_created("pool", SignedDuration::from_secs(10)).await;
    run_ppi(&w).await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.custom_deploy, None, "PPI not ready (cooling down)");
    w.clock.advance(SignedDuration::from_mins(2));
    run_ppi(&w).await;
    assert_eq!(ppi_condition(&get_ppi(&w).await, "Ready").0, "True");
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(b.spec.custom_deploy.as_ref().map(|c| c.method.as_str()), Some(ASSISTED_DEPLOY_METHOD));
    assert_eq!(b.spec.image, None, "the converged flow sets no image");
    assert_eq!(annotation(&b, INSPECT_ANNOTATION), None);
}

async fn scenario_67_converged_an_unbound_host_is_deprovisioned_and_deployed_again<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, true);
    w.cluster_deployment("c1", true).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert!(w.get_bmh("bmh-0").await.spec.custom_deploy.is_some());
    // metal3 runs the deploy step, the agent starts, and the host is installed.
    let id = w.installed_host("c1", 0).await;
    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    assert!(b.spec.custom_deploy.is_some());
    assert!(annotation(&b, DETACHED_ANNOTATION).is_some(), "provisioned in the converged flow: detached");

    w.set_cluster(&id, None).await;
    assert_eq!(cond(&w.agent(&id).await, BOUND), ("False", "UnbindingPendingUserAction".into()));
    w.run_bmac(&ctx, "bmh-0").await;
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(b.spec.custom_deploy, None, "cleared: metal3 deprovisions");
    assert_eq!(annotation(&b, DETACHED_ANNOTATION), None);
    w.metal3_reports("bmh-0", "deprovisioning", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.custom_deploy, None, "untouched while deprovisioning");
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.custom_deploy.map(|c| c.method).as_deref(), Some(ASSISTED_DEPLOY_METHOD));
}

async fn scenario_68_converged_deleting_a_bmh_with_remove_agent_waits_for_metal3_then_deletes_the_agent<S: Store>(
    w: World<S>,
) {
    let ctx = bmac_ctx(&w, true);
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({REMOVE_AGENT_ON_DELETE_ANNOTATION: "true", DETACHED_ANNOTATION: "x"})).await;
    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    w.admin.delete::<BareMetalHost>(ns(), "bmh-0").await.unwrap();
    w.settle().await;
    assert!(matches!(w.run_bmac(&ctx, "bmh-0").await, Action::RequeueAfter(_)));
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(b.spec.automated_cleaning_mode.as_deref(), Some("metadata"));
    assert_eq!(annotation(&b, DETACHED_ANNOTATION), None);
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_some(), "the Agent stays until metal3 deletes");
    w.metal3_reports("bmh-0", "deleting", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert!(w.store.get::<BareMetalHost>(ns(), "bmh-0").await.unwrap().is_none(), "the finalizer went");
    let agent = w.store.get::<Agent>(ns(), &id).await.unwrap();
    assert!(agent.is_none_or(|a| a.metadata.deletion_timestamp.is_some()), "the Agent is being deleted");
}

/// A converged BMH in remove-agent mode whose Agent is installed in cluster c1, and that cluster's
/// spoke with the host's node running a workload pod, a DaemonSet pod, and a pod on another node.
async fn installed_remove_agent_bmh<S: Store>(w: &World<S>, extra: Value) -> (String, String, SpokeCluster) {
    let ctx = bmac_ctx(w, true);
    w.cluster_deployment("c1", true).await;
    let mut annotations = json!({REMOVE_AGENT_ON_DELETE_ANNOTATION: "true"});
    crate::store::json::merge_patch(&mut annotations, &extra);
    w.bmh("bmh-0", 0, annotations).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    let pod = |ns: &str, name: &str, node: &str, owner: Option<&str>| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                           "spec": {"nodeName": node}});
        if let Some(kind) = owner {
            p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": "x",
                                                        "uid": "u1", "controller": true}]);
        }
        spoke.put(&format!("/api/v1/namespaces/{ns}/pods/{name}"), p);
    };
    pod("app", "web-1", &node, Some("ReplicaSet"));
    pod("openshift-dns", "dns-1", &node, Some("DaemonSet"));
    pod("app", "web-2", "other-node", Some("ReplicaSet"));
    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    w.admin.delete::<BareMetalHost>(ns(), "bmh-0").await.unwrap();
    w.settle().await;
    (id, node, spoke)
}

async fn scenario_68_deleting_a_bmh_with_remove_agent_drains_its_node_first<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, true);
    let (id, node, spoke) = installed_remove_agent_bmh(&w, json!({})).await;
    // First attempt: cordoned, the workload pod evicted; its going is checked on the next attempt.
    assert!(matches!(bmac::reconcile(&ctx, ns(), "bmh-0").await.unwrap(), Action::RequeueAfter(_)));
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(annotation(&b, DRAIN_STATUS_ANNOTATION).as_deref(), Some(DRAIN_IN_PROGRESS));
    assert!(annotation(&b, DRAIN_STARTED_AT_ANNOTATION).is_some());
    assert_eq!(spoke.get(&format!("/api/v1/nodes/{node}")).unwrap()["spec"]["unschedulable"], true);
    assert!(spoke.get("/api/v1/namespaces/app/pods/web-1").is_none(), "the workload was evicted");
    assert!(spoke.get("/api/v1/namespaces/openshift-dns/pods/dns-1").is_some(), "DaemonSet pods stay");
    assert!(spoke.get("/api/v1/namespaces/app/pods/web-2").is_some(), "other nodes' pods stay");
    assert!(b.spec.automated_cleaning_mode.as_deref() != Some("metadata"), "deprovisioning waits for the drain");

    // Drained: deprovisioning goes on as without a cluster.
    assert!(matches!(bmac::reconcile(&ctx, ns(), "bmh-0").await.unwrap(), Action::RequeueAfter(_)));
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(annotation(&b, DRAIN_STATUS_ANNOTATION).as_deref(), Some(DRAIN_SUCCEEDED));
    assert_eq!(b.spec.automated_cleaning_mode.as_deref(), Some("metadata"));
    w.metal3_reports("bmh-0", "deleting", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert!(w.store.get::<BareMetalHost>(ns(), "bmh-0").await.unwrap().is_none(), "the finalizer went");
    let agent = w.store.get::<Agent>(ns(), &id).await.unwrap();
    assert!(agent.is_none_or(|a| a.metadata.deletion_timestamp.is_some()), "the Agent is being deleted");
}

async fn scenario_68_a_drain_that_keeps_failing_is_given_up_after_its_timeout<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, true);
    let (_id, _node, spoke) = installed_remove_agent_bmh(&w, json!({DRAIN_TIMEOUT_ANNOTATION: "5m"})).await;
    spoke.fail("POST", "/api/v1/namespaces/app/pods/web-1/eviction", 500);
    assert!(matches!(bmac::reconcile(&ctx, ns(), "bmh-0").await.unwrap(), Action::RequeueAfter(_)));
    let status = annotation(&w.get_bmh("bmh-0").await, DRAIN_STATUS_ANNOTATION).unwrap();
    assert!(status.starts_with("failed to drain node: failed to evict pod app/web-1"), "{status}");
    w.clock.advance(SignedDuration::from_mins(4));
    assert!(matches!(bmac::reconcile(&ctx, ns(), "bmh-0").await.unwrap(), Action::RequeueAfter(_)));
    assert!(w.get_bmh("bmh-0").await.spec.automated_cleaning_mode.as_deref() != Some("metadata"));
    w.clock.advance(SignedDuration::from_mins(2));
    bmac::reconcile(&ctx, ns(), "bmh-0").await.unwrap();
    let b = w.get_bmh("bmh-0").await;
    assert_eq!(annotation(&b, DRAIN_STATUS_ANNOTATION).as_deref(), Some(DRAIN_TIMED_OUT));
    assert_eq!(b.spec.automated_cleaning_mode.as_deref(), Some("metadata"));
}

async fn the_fencing_credentials_secret_is_written_from_the_bmc<S: Store>(w: World<S>) {
    use k8s_openapi::api::core::v1::Secret;
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({CREATE_FENCING_SECRET_ANNOTATION: "true"})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    // Without the BMC's credentials there is nothing to write: the reconcile fails and says why.
    let mut failed = None;
    for _ in 0..6 {
        if let Err(e) = bmac::reconcile(&ctx, ns(), "bmh-0").await {
            failed = Some(e);
            break;
        }
    }
    let err = failed.expect("the reconcile fails");
    assert!(
        err.to_string().contains(&format!("the BMC credentials secret {}/bmh-0-bmc does not exist", ns())),
        "{err}"
    );

    let bmc_secret = |password: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bmh-0-bmc", "namespace": ns()},
               "stringData": {"username": "admin", "password": password}})
    };
    w.apply(Kind::Secret, bmc_secret("s3cret")).await;
    w.run_bmac(&ctx, "bmh-0").await;
    let name = format!("{id}-fencing-credentials");
    assert_eq!(w.agent(&id).await.spec.fencing_credentials_secret_ref.as_deref(), Some(name.as_str()));
    let read = |s: &Secret, key: &str| String::from_utf8(s.data.as_ref().unwrap()[key].0.clone()).unwrap();
    let secret = w.store.get::<Secret>(ns(), &name).await.unwrap().expect("the fencing secret");
    assert_eq!(read(&secret, "address"), "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1");
    assert_eq!((read(&secret, "username"), read(&secret, "password")), ("admin".into(), "s3cret".into()));
    assert_eq!(read(&secret, "certificateVerification"), "Enabled");

    // A new BMC password reaches the fencing secret.
    w.apply(Kind::Secret, bmc_secret("n3w")).await;
    w.run_bmac(&ctx, "bmh-0").await;
    let secret = w.store.get::<Secret>(ns(), &name).await.unwrap().unwrap();
    assert_eq!(read(&secret, "password"), "n3w");
}

async fn deleting_a_bmh_without_remove_agent_keeps_the_agent<S: Store>(w: World<S>) {
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    let id = w.pool_host("pool", 0).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.run_bmac(&ctx, "bmh-0").await;
    w.admin.delete::<BareMetalHost>(ns(), "bmh-0").await.unwrap();
    w.settle().await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert!(w.store.get::<BareMetalHost>(ns(), "bmh-0").await.unwrap().is_none());
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_some_and(|a| a.metadata.deletion_timestamp.is_none()));
}

async fn scenario_69_a_ppi_turns_the_ironic_agent_on_for_its_infraenv<S: Store>(w: World<S>) {
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;
    let ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    assert!(crate::content::ironic::enabled(&ie));
    let p = get_ppi(&w).await;
    assert!(p.metadata.finalizers.unwrap().contains(&PPI_FINALIZER.to_string()));
}

async fn scenario_71_a_fresh_infraenv_image_makes_the_ppi_wait<S: Store>(w: World<S>) {
    ppi(&w, &["iso"], "x86_64").await;
    run_ppi(&w).await;
    assert_eq!(
        ppi_condition(&get_ppi(&w).await, "Ready"),
        ("False".into(), ppi::REASON_WAITING_FOR_IMAGE.into(), "Waiting for InfraEnv image to be created".into())
    );
    w.image_created("pool", SignedDuration::from_secs(15)).await;
    assert!(matches!(run_ppi(&w).await, Action::RequeueAfter(_)));
    let p = get_ppi(&w).await;
    assert_eq!(
        ppi_condition(&p, "Ready"),
        ("False".into(), ppi::REASON_WAITING_FOR_COOLDOWN.into(), "Waiting for InfraEnv image to cool down".into())
    );
    assert_eq!(ppi_condition(&p, "Error").0, "False");
    assert_eq!(p.status.unwrap().image_url, "");
}

async fn scenario_72_a_new_image_url_reboots_a_bmh_that_is_not_provisioned<S: Store>(w: World<S>) {
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;
    let p = get_ppi(&w).await;
    let st = p.status.clone().unwrap();
    assert_eq!((st.format.as_str(), st.image_url.as_str(), st.architecture.as_str()), ("iso", ISO_URL, "x86_64"));
    assert_eq!(
        ppi_condition(&p, "Ready"),
        ("True".into(), "InfraEnvAvailable".into(), crate::resources::MESSAGE_IMAGE_AVAILABLE.into())
    );
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, REBOOT_ANNOTATION), None, "the first image reboots nothing");

    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.status.as_mut().unwrap().iso_download_url = "http://hub.example:8090/new.iso".into();
    w.store.update_status(&ie).await.unwrap();
    run_ppi(&w).await;
    assert_eq!(get_ppi(&w).await.status.unwrap().image_url, "http://hub.example:8090/new.iso");
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, REBOOT_ANNOTATION).as_deref(), Some(r#"{"force": true}"#));

    // A provisioned host is not rebooted.
    let mut b = w.get_bmh("bmh-0").await;
    b.annotations_mut().remove(REBOOT_ANNOTATION);
    w.store.update(&b).await.unwrap();
    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.status.as_mut().unwrap().iso_download_url = "http://hub.example:8090/newer.iso".into();
    w.store.update_status(&ie).await.unwrap();
    run_ppi(&w).await;
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, REBOOT_ANNOTATION), None);
}

/// Signed URLs are signed again before they expire: a new token for the same image is not a new
/// image. A BMH that is not provisioned takes the new URL; a provisioned one keeps its image (a new
/// URL would deprovision it); a PPI takes it without rebooting anything.
async fn a_refreshed_url_token_is_not_a_new_image<S: Store>(w: World<S>) {
    let set_iso_url = async |url: &str| {
        let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
        ie.status.as_mut().unwrap().iso_download_url = url.into();
        w.store.update_status(&ie).await.unwrap();
    };
    let bmh_url = async || w.get_bmh("bmh-0").await.spec.image.map(|i| i.url);
    let ctx = bmac_ctx(&w, false);
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(bmh_url().await.as_deref(), Some(ISO_URL));

    let refreshed = ISO_URL.replace("/byapikey/token/", "/byapikey/token-2/");
    set_iso_url(&refreshed).await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(bmh_url().await, Some(refreshed.clone()), "a host that is not provisioned takes the new URL");

    w.metal3_reports("bmh-0", "provisioned", "OK").await;
    set_iso_url(&ISO_URL.replace("/byapikey/token/", "/byapikey/token-3/")).await;
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(bmh_url().await, Some(refreshed.clone()), "a provisioned host keeps its image and URL");

    // The PPI of a host that is not provisioned: a new token updates its URL and reboots nothing.
    w.metal3_reports("bmh-0", "available", "OK").await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;
    let before = get_ppi(&w).await.status.unwrap().image_url;
    let again = ISO_URL.replace("/byapikey/token/", "/byapikey/token-4/");
    set_iso_url(&again).await;
    run_ppi(&w).await;
    assert_ne!(before, again);
    assert_eq!(get_ppi(&w).await.status.unwrap().image_url, again);
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, REBOOT_ANNOTATION), None, "no reboot for a new token");
}

/// Where URLs are signed, a BareMetalHost boots from a short URL (BMCs take short URLs only) whose token
/// does not expire: the status URL's lasts 4 hours, but metal3 and BMCs fetch the image again days later.
/// Refreshed status tokens leave it alone; a host that was given an expiring URL before (not provisioned)
/// gets a lasting one; a host given a long lasting URL by an earlier version keeps it.
async fn a_bmh_boots_from_a_url_that_does_not_expire<S: Store>(w: World<S>) {
    use crate::auth::urlsign::{short_token_of_url, token_of_url, without_token};
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let signer = Arc::new(crate::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[]).unwrap());
    let ctx = BmacContext { url_signer: Some(signer.clone()), ..bmac_ctx(&w, false) };
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    let id = ie.metadata.uid.clone().unwrap();
    let status_url = |token: &str| format!("http://hub.example:8090/byapikey/{token}/4.16/x86_64/full.iso");
    let first = status_url(&signer.sign(&id, SystemTime::now()));
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.status.as_mut().unwrap().iso_download_url = first.clone();
    w.store.update_status(&ie).await.unwrap();

    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    w.run_bmac(&ctx, "bmh-0").await;
    let url = w.get_bmh("bmh-0").await.spec.image.unwrap().url;
    assert_eq!(without_token(&url), without_token(&first));
    let short = short_token_of_url(&url).unwrap_or_else(|| panic!("not a short URL: {url}"));
    assert!(url.starts_with("http://hub.example:8090/s/") && url.ends_with("/4.16/x86_64/full.iso"), "{url}");
    assert!(!url.contains('?') && url.len() <= 128 - 17, "{} characters: {url}", url.len());
    let in_a_year = SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
    let claims = signer.verify_short(short, in_a_year).unwrap();
    assert_eq!((claims.infra_env_id.as_str(), claims.exp), (id.as_str(), None), "the BMH's token expires");

    // A refreshed status token changes nothing, provisioned or not.
    for state in ["available", "provisioned"] {
        w.metal3_reports("bmh-0", state, "OK").await;
        let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
        ie.status.as_mut().unwrap().iso_download_url = status_url(&signer.sign(&id, SystemTime::now()));
        w.store.update_status(&ie).await.unwrap();
        w.run_bmac(&ctx, "bmh-0").await;
        assert_eq!(w.get_bmh("bmh-0").await.spec.image.unwrap().url, url, "{state}");
    }

    // A host given an expiring URL (by an earlier version) that is not provisioned gets a lasting one.
    w.metal3_reports("bmh-0", "available", "OK").await;
    let mut bmh = w.get_bmh("bmh-0").await;
    bmh.spec.image.as_mut().unwrap().url = first.clone();
    w.store.update(&bmh).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    let again = w.get_bmh("bmh-0").await.spec.image.unwrap().url;
    assert_ne!(again, first);
    assert_eq!(signer.verify_short(short_token_of_url(&again).unwrap(), in_a_year).unwrap().exp, None);

    // A long lasting URL an earlier version gave is the same image under a lasting token: kept, even where
    // the host is not provisioned (a new URL would make metal3 boot it again).
    let long_lasting = status_url(&signer.sign_lasting(&id));
    let mut bmh = w.get_bmh("bmh-0").await;
    bmh.spec.image.as_mut().unwrap().url = long_lasting.clone();
    w.store.update(&bmh).await.unwrap();
    w.run_bmac(&ctx, "bmh-0").await;
    assert_eq!(w.get_bmh("bmh-0").await.spec.image.unwrap().url, long_lasting);
    assert!(token_of_url(&long_lasting).is_some());
}

/// Issue 43: BMCs take short ISO URLs only (Dell iDRAC: at most 255 characters, no query string, a path
/// ending in `.iso`). Where URLs are signed, a PPI publishes the short form of the InfraEnv's ISO URL: at
/// most 128 characters with a 40-character base URL, expiring when the status URL's token does, and
/// refreshed with it without a reboot.
async fn a_ppi_publishes_a_short_iso_url_that_expires_with_the_status_one<S: Store>(w: World<S>) {
    use crate::auth::urlsign::{REFRESH_BEFORE, TOKEN_LIFETIME, short_token_of_url};
    use std::time::{Duration, SystemTime};
    const BASE: &str = "https://assisted-image.apps.hub1.example";
    assert_eq!(BASE.len(), 40);
    let dir = tempfile::tempdir().unwrap();
    let signer = Arc::new(crate::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[]).unwrap());
    let ctx = PpiContext { url_signer: Some(signer.clone()), ..ppi_ctx(&w) };
    let id = w.ie_uid("pool").await;
    let set_status_token = async |token: &str| {
        let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
        ie.status.as_mut().unwrap().iso_download_url = format!("{BASE}/byapikey/{token}/4.16/x86_64/full.iso");
        w.store.update_status(&ie).await.unwrap();
        for _ in 0..3 {
            ppi::reconcile(&ctx, ns(), "bmh-0").await.unwrap();
        }
        get_ppi(&w).await.status.unwrap().image_url
    };
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    w.bmh("bmh-0", 0, json!({})).await;
    w.metal3_reports("bmh-0", "available", "OK").await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;

    let now = SystemTime::now();
    let status_token = signer.sign(&id, now);
    let url = set_status_token(&status_token).await;
    assert!(url.len() <= 128, "{} characters: {url}", url.len());
    assert!(url.starts_with(&format!("{BASE}/s/")) && url.ends_with("/4.16/x86_64/full.iso"), "{url}");
    assert!(!url.contains(['?', '&', '#']), "{url}");
    let short = short_token_of_url(&url).unwrap();
    let claims = signer.verify_short(short, now).unwrap();
    assert_eq!(claims.infra_env_id, id);
    assert_eq!(claims.exp, signer.verify(&status_token, now).unwrap().exp, "expires with the status URL");
    assert!(signer.verify_short(short, now + TOKEN_LIFETIME + Duration::from_secs(1)).is_err());

    // The status token refreshed (an hour before it expires): a new short URL, the same image, no reboot.
    // (The move from the test's first base URL to BASE was a new image: its reboot request goes first.)
    let mut bmh = w.get_bmh("bmh-0").await;
    if let Some(a) = bmh.metadata.annotations.as_mut() {
        a.remove(REBOOT_ANNOTATION);
    }
    w.store.update(&bmh).await.unwrap();
    let refreshed = signer.sign(&id, now + TOKEN_LIFETIME - REFRESH_BEFORE);
    let again = set_status_token(&refreshed).await;
    assert_ne!(again, url);
    assert_eq!(
        signer.verify_short(short_token_of_url(&again).unwrap(), now).unwrap().exp,
        signer.verify(&refreshed, now).unwrap().exp
    );
    assert_eq!(annotation(&w.get_bmh("bmh-0").await, REBOOT_ANNOTATION), None, "no reboot for a new token");
}

async fn scenario_73_an_initrd_ppi_gets_kernel_and_parameters<S: Store>(w: World<S>) {
    let mut ie = w.store.get::<InfraEnv>(ns(), "pool").await.unwrap().unwrap();
    ie.spec.kernel_arguments = serde_json::from_value(json!([{"operation": "append", "value": "console=ttyS0"},
                                                             {"operation": "append", "value": "debug"}]))
    .unwrap();
    w.store.update(&ie).await.unwrap();
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["initrd"], "amd64").await;
    ironic_image_made(&w).await;
    let st = get_ppi(&w).await.status.unwrap();
    assert_eq!(st.format, "initrd");
    assert_eq!(st.image_url, "http://hub.example:8090/images/initrd");
    assert_eq!(st.kernel_url, "http://hub.example:8090/boot-artifacts/kernel");
    assert_eq!(
        st.extra_kernel_params,
        "coreos.live.rootfs_url=http://hub.example:8090/boot-artifacts/rootfs rd.bootif=0 console=ttyS0 debug"
    );
}

async fn scenario_75_a_ppi_for_another_architecture_is_refused<S: Store>(w: World<S>) {
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["iso"], "aarch64").await;
    run_ppi(&w).await;
    let p = get_ppi(&w).await;
    assert_eq!(
        ppi_condition(&p, "Ready"),
        (
            "False".into(),
            ppi::REASON_INFRAENV_ARCH_MISMATCH.into(),
            "PreprovisioningImage CPU architecture (aarch64) does not match InfraEnv CPU architecture (x86_64)".into()
        )
    );
    assert_eq!(ppi_condition(&p, "Error").0, "True");
}

async fn a_ppi_without_a_usable_infraenv_or_format_says_why<S: Store>(w: World<S>) {
    ppi(&w, &["qcow2"], "x86_64").await;
    run_ppi(&w).await;
    let p = get_ppi(&w).await;
    assert_eq!(
        ppi_condition(&p, "Ready"),
        ("False".into(), ppi::REASON_UNSUPPORTED_IMAGE_FORMAT.into(), "Unsupported image format".into())
    );
    assert_eq!(ppi_condition(&p, "Error").0, "True");

    let mut p = get_ppi(&w).await;
    p.spec.accept_formats = vec!["iso".into()];
    p.metadata.labels.as_mut().unwrap().insert(INFRAENV_NAME_LABEL.into(), "missing".into());
    w.store.update(&p).await.unwrap();
    run_ppi(&w).await;
    let p = get_ppi(&w).await;
    assert_eq!(
        ppi_condition(&p, "Ready"),
        (
            "False".into(),
            ppi::REASON_INFRAENV_NOT_AVAILABLE.into(),
            format!("InfraEnv missing/{} is not found or is being deleted", ns())
        )
    );
    assert_eq!(ppi_condition(&p, "Error").0, "False");
}

async fn scenario_76_a_ppi_stays_while_its_bmh_still_needs_it_for_cleaning<S: Store>(w: World<S>) {
    w.bmh("bmh-0", 0, json!({})).await;
    let mut b = w.get_bmh("bmh-0").await;
    b.spec.automated_cleaning_mode = Some("metadata".into());
    w.store.update(&b).await.unwrap();
    w.image_created("pool", SignedDuration::from_mins(5)).await;
    ppi(&w, &["iso"], "x86_64").await;
    ironic_image_made(&w).await;
    w.admin.delete::<PreprovisioningImage>(ns(), "bmh-0").await.unwrap();
    w.settle().await;
    assert!(matches!(run_ppi(&w).await, Action::RequeueAfter(_)));
    assert!(w.store.get::<PreprovisioningImage>(ns(), "bmh-0").await.unwrap().is_some(), "the finalizer stays");
    // The BMH is being deleted and metal3 is deleting it: the image may go.
    let mut b = w.get_bmh("bmh-0").await;
    b.metadata.finalizers = Some(vec!["metal3.io/test".into()]);
    w.store.update(&b).await.unwrap();
    w.admin.delete::<BareMetalHost>(ns(), "bmh-0").await.unwrap();
    w.settle().await;
    w.metal3_reports("bmh-0", "deleting", "OK").await;
    run_ppi(&w).await;
    assert!(w.store.get::<PreprovisioningImage>(ns(), "bmh-0").await.unwrap().is_none());
}

async fn scenario_31_without_metal3_a_bmh_label_does_not_stop_reclaim<S: Store>(mut w: World<S>) {
    w.hub.agents.metal3 = false;
    w.cluster_deployment("c1", true).await;
    w.bmh("bmh-0", 0, json!({})).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let _spoke = w.spoke_for("c1", &node).await;
    let mut a = w.agent(&id).await;
    a.metadata.labels.get_or_insert_default().insert(crate::resources::agent::BMH_LABEL.into(), "bmh-0".into());
    w.store.update(&a).await.unwrap();
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::Reclaiming);
}

async fn scenario_30_with_metal3_an_agent_with_its_bmh_is_not_reclaimed<S: Store>(w: World<S>) {
    w.cluster_deployment("c1", true).await;
    w.bmh("bmh-0", 0, json!({})).await;
    let id = w.installed_host("c1", 0).await;
    let node = w.hostname(&id).await;
    let spoke = w.spoke_for("c1", &node).await;
    bmac::reconcile(&bmac_ctx(&w, false), ns(), "bmh-0").await.unwrap();
    bmac::reconcile(&bmac_ctx(&w, false), ns(), "bmh-0").await.unwrap();
    let a = w.agent(&id).await;
    assert_eq!(a.metadata.labels.unwrap().get(crate::resources::agent::BMH_LABEL).map(String::as_str), Some("bmh-0"));
    w.set_cluster(&id, None).await;
    assert_eq!(w.status(&id).await, HostStatus::UnbindingPendingUserAction);
    assert!(spoke.paths().iter().all(|p| !p.contains("daemonsets")), "no reclaim agent: {:?}", spoke.paths());
    assert_eq!(cond(&w.agent(&id).await, SPEC_SYNCED), ("True", REASON_SYNC_OK.into()));
}

async fn scenario_38_deleting_an_agent_whose_bmh_made_spoke_objects_cleans_the_spoke<S: Store>(w: World<S>) {
    let (id, node, spoke) = mid_installation_with_spoke(&w).await;
    w.bmh("bmh-0", 0, json!({SPOKE_BMH_MACHINE_CREATED_ANNOTATION: "2026-11-24T10:00:00Z"})).await;
    let mut a = w.agent(&id).await;
    a.metadata.labels.get_or_insert_default().insert(crate::resources::agent::BMH_LABEL.into(), "bmh-0".into());
    w.store.update(&a).await.unwrap();
    w.store.delete::<Agent>(ns(), &id).await.unwrap();
    w.reconcile(&id).await;
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none(), "{:?}", spoke.requests());
    assert!(w.store.get::<Agent>(ns(), &id).await.unwrap().is_none());
}

on_both_stores! {
    the_fencing_credentials_secret_is_written_from_the_bmc,
    scenario_68_deleting_a_bmh_with_remove_agent_drains_its_node_first,
    scenario_68_a_drain_that_keeps_failing_is_given_up_after_its_timeout,
    scenario_58_a_bmh_gets_the_infraenv_iso_once_the_image_is_old_enough,
    scenario_59_a_fresh_image_cools_down_before_the_bmh_gets_it,
    scenario_60_the_agent_with_the_boot_mac_gets_the_bmh_annotations,
    scenario_61_the_cluster_reference_annotation_binds_and_unbinds,
    scenario_62_hints_that_match_nothing_set_the_not_found_disk_on_the_agent,
    scenario_63_the_agent_inventory_becomes_hardware_details,
    scenario_64_a_bmh_is_detached_once_its_agent_is_past_writing_the_image,
    scenario_65_an_unbound_installed_host_is_rebooted_into_discovery_through_its_bmh,
    scenario_65_a_bmh_that_is_not_detached_is_left_alone,
    scenario_66_converged_a_ready_ppi_sets_the_assisted_deploy_method,
    scenario_67_converged_an_unbound_host_is_deprovisioned_and_deployed_again,
    scenario_68_converged_deleting_a_bmh_with_remove_agent_waits_for_metal3_then_deletes_the_agent,
    deleting_a_bmh_without_remove_agent_keeps_the_agent,
    scenario_69_a_ppi_turns_the_ironic_agent_on_for_its_infraenv,
    scenario_71_a_fresh_infraenv_image_makes_the_ppi_wait,
    scenario_72_a_new_image_url_reboots_a_bmh_that_is_not_provisioned,
    a_refreshed_url_token_is_not_a_new_image,
    a_bmh_boots_from_a_url_that_does_not_expire,
    a_ppi_publishes_a_short_iso_url_that_expires_with_the_status_one,
    scenario_73_an_initrd_ppi_gets_kernel_and_parameters,
    scenario_75_a_ppi_for_another_architecture_is_refused,
    a_ppi_without_a_usable_infraenv_or_format_says_why,
    scenario_76_a_ppi_stays_while_its_bmh_still_needs_it_for_cleaning,
    scenario_31_without_metal3_a_bmh_label_does_not_stop_reclaim,
    scenario_30_with_metal3_an_agent_with_its_bmh_is_not_reclaimed,
    scenario_38_deleting_an_agent_whose_bmh_made_spoke_objects_cleans_the_spoke,
}
