//! `kubernetes.rs`'s lifecycle on a real kube-apiserver and etcd (a private hub: the Lease of
//! `bootstream` is cluster-wide state for this test), with the ServiceAccount tokens `deploy/rbac.yaml`
//! binds: the controller and an image-server replica as processes, an InfraEnv applied as its user
//! would, its image served alike by both, a host registering as an Agent, and a standby controller
//! taking the Lease over. A refused request in either process's log fails the test.

use super::{blocking, wait_for};
use crate::common;

use std::time::Duration;

use bootstream::testkit::realhub::{self, RealHub};
use common::controller::{Controller, ControllerFiles};
use common::*;
use serde_json::{Value, json};

fn resource(group: &str, version: &str, kind: &str) -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, version, kind))
}

/// The object as the cluster admin reads it (None: absent).
async fn get(hub: &RealHub, ar: &kube::core::ApiResource, ns: &str, name: &str) -> Option<Value> {
    let api: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(hub.admin().await, ns, ar);
    api.get_opt(name).await.unwrap().map(|o| serde_json::to_value(o).unwrap())
}

/// A log with nothing the API server refused.
fn assert_nothing_refused(who: &str, log: &str) {
    // kube-rs and the API server name a refusal by its reason (a bare "403" could be part of a port).
    for needle in ["Forbidden", "forbidden", "Unauthorized"] {
        assert!(!log.contains(needle), "{who} was refused a request ({needle}):\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_and_image_server_replicas_work_against_a_real_hub() {
    let hub = RealHub::private(true).await;
    let admin = hub.admin().await;
    realhub::apply_all(&admin, &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}})])
        .await;
    realhub::apply_all(&admin, &super::kubernetes::fleet_documents()).await;

    let files = ControllerFiles::for_hub(&hub).await;
    let image_server_kubeconfig = files.dir.path().join("image-server.kubeconfig");
    let token = hub.service_account_token("bootstream-image-server").await;
    std::fs::write(&image_server_kubeconfig, hub.kubeconfig_for(&token)).unwrap();
    let controller_args = |identity: &str| {
        let mut args = files.args();
        args.extend(["--lease-namespace", "bootstream", "--identity", identity].map(String::from));
        args
    };
    let mut replica_args = files.args();
    replica_args[0] = "serve".into();
    replica_args.insert(1, "--kube".into());
    replica_args[3] = image_server_kubeconfig.to_str().unwrap().into();

    let leader = Controller::start(&controller_args("pod-a"));
    let replica = Controller::start(&replica_args);
    let (leader, controller) = blocking(move || {
        let addr = leader.listening("listening on http://", Duration::from_secs(60));
        let addr = addr.unwrap_or_else(|| panic!("the controller serves:\n{}", leader.log()));
        (leader, addr)
    })
    .await
    .unwrap();
    let (replica, image_server) = blocking(move || {
        let addr = replica.listening("listening on http://", Duration::from_secs(60));
        let addr = addr.unwrap_or_else(|| panic!("the image server serves:\n{}", replica.log()));
        (replica, addr)
    })
    .await
    .unwrap();

    // The controller reconciles the InfraEnv in the cluster: its status has the image URLs.
    let infraenvs = resource("agent-install.openshift.io", "v1beta1", "InfraEnv");
    let infraenv = wait_for("the InfraEnv's ISO URL", async || {
        let ie = get(&hub, &infraenvs, "fleet", "pool").await?;
        ie["status"]["isoDownloadURL"].as_str().is_some_and(|u| !u.is_empty()).then_some(ie)
    })
    .await;
    let uid = infraenv["metadata"]["uid"].as_str().unwrap().to_string();
    let path_of = |url: &Value| {
        let url = url.as_str().unwrap_or_else(|| panic!("no URL in {infraenv:#}"));
        format!("/{}", url.split("://").nth(1).unwrap().split_once('/').unwrap().1)
    };
    assert!(
        infraenv["status"]["debugInfo"]["staticNetworkDownloadURL"].as_str().is_some_and(|u| !u.is_empty()),
        "the controller saw the NMStateConfig: {infraenv:#}"
    );

    // Any replica serves the same image as the controller: the same bytes, the same ETag.
    let (c, r, iso) = (controller.clone(), image_server.clone(), path_of(&infraenv["status"]["isoDownloadURL"]));
    let (from_controller, from_replica) =
        blocking(move || (request(&c, "GET", &iso, &[], b""), request(&r, "GET", &iso, &[], b""))).await.unwrap();
    assert_eq!(from_replica.status, 200, "{}", from_replica.text());
    assert_eq!(from_controller.status, 200);
    assert_eq!(from_replica.body.get(0x8001..0x8006), Some(&b"CD001"[..]), "an ISO 9660 image");
    assert_eq!(sha256_hex(&from_replica.body), sha256_hex(&from_controller.body));
    assert_eq!(from_replica.header("etag"), from_controller.header("etag"));

    // A host reads its token from the discovery Ignition the replica serves and registers with the
    // controller: its Agent appears in the cluster.
    let (c, r, id) = (controller.clone(), image_server.clone(), uid.clone());
    let ign_path = path_of(&infraenv["status"]["bootArtifacts"]["discoveryIgnitionURL"]);
    let registered = blocking(move || {
        let ign = request(&r, "GET", &ign_path, &[], b"");
        let ignition: Value = serde_json::from_slice(&ign.body).unwrap();
        let token = bootstream::cli::simulate::agent_token(&ignition).expect("the agent token");
        let body =
            json!({"host_id": "9e2a43c4-5a7a-4a53-9d0a-6d4f0a7f0c11", "discovery_agent_version": "v1"}).to_string();
        let path = format!("/api/assisted-install/v2/infra-envs/{id}/hosts");
        request(&c, "POST", &path, &[("X-Secret-Key", &token), ("Content-Type", "application/json")], body.as_bytes())
    })
    .await
    .unwrap();
    assert_eq!(registered.status, 201, "{}", registered.text());
    let agents = resource("agent-install.openshift.io", "v1beta1", "Agent");
    wait_for("the host's Agent in the cluster", async || {
        get(&hub, &agents, "fleet", "9e2a43c4-5a7a-4a53-9d0a-6d4f0a7f0c11").await
    })
    .await;
    let secrets = resource("", "v1", "Secret");
    let secret = get(&hub, &secrets, "fleet", "pull-secret").await.unwrap();
    assert_eq!(secret["metadata"]["labels"][bootstream::resources::WATCH_LABEL], "true");

    // The controller holds the Lease; a second one waits, and takes over when the first stops.
    let leases = resource("coordination.k8s.io", "v1", "Lease");
    let holder = async || {
        get(&hub, &leases, "bootstream", "bootstream-controller")
            .await
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(|h| Value::String(h.to_string())))
    };
    assert_eq!(holder().await, Some(json!("pod-a")));
    let standby = Controller::start(&controller_args("pod-b"));
    let mut leader = leader;
    let stopped = blocking(move || {
        std::thread::sleep(Duration::from_secs(3));
        let stopped = leader.terminate();
        (stopped, leader)
    });
    let (stopped, leader) = stopped.await.unwrap();
    assert!(stopped.success(), "{stopped:?}\n{}", leader.log());
    wait_for("pod-b to take the Lease over", async || holder().await.filter(|h| h == "pod-b")).await;
    let standby = blocking(move || {
        let serving = standby.listening("listening on http://", Duration::from_secs(30));
        assert!(serving.is_some(), "pod-b serves once it leads:\n{}", standby.log());
        standby
    })
    .await
    .unwrap();

    assert_nothing_refused("the controller pod-a", &leader.log());
    assert_nothing_refused("the controller pod-b", &standby.log());
    assert_nothing_refused("the image server", &replica.log());
}
