//! The controller's Lease on the real Kubernetes hub: a controller that cannot start takes none (or
//! gives it back), so the next one leads at once; a Lease namespace it cannot use is an error
//! naming it, not a retry for ever. Each test works in a namespace of its own on the run's shared hub.

use super::blocking;
use crate::common;

use std::time::Duration;

use bootstream::testkit::realhub::{self, RealHub};
use common::controller::{Controller, ControllerFiles};
use serde_json::{Value, json};

/// The Lease `bootstream-controller` of `namespace`, as the cluster admin reads it (None: absent).
async fn lease(hub: &RealHub, namespace: &str) -> Option<Value> {
    let leases: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
        hub.admin().await,
        namespace,
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease")),
    );
    leases.get_opt("bootstream-controller").await.unwrap().map(|l| serde_json::to_value(l).unwrap())
}

/// deploy/rbac.yaml's leader-election Role and RoleBinding, in `namespace` instead of bootstream's:
/// what a user installing bootstream there gets.
async fn grant_leases_in(hub: &RealHub, namespace: &str) {
    let docs: Vec<Value> = realhub::manifests(&["rbac.yaml"])
        .into_iter()
        .filter(|d| d["metadata"]["name"] == "bootstream-leader-election")
        .map(|mut d| {
            d["metadata"]["namespace"] = json!(namespace);
            d
        })
        .collect();
    assert_eq!(docs.len(), 2, "the Role and the RoleBinding of deploy/rbac.yaml");
    realhub::apply_all(&hub.admin().await, &docs).await;
}

#[tokio::test]
async fn a_controller_that_fails_its_configuration_check_takes_no_lease() {
    let hub = RealHub::shared().await;
    let ns = hub.namespace("lease-config").await;
    grant_leases_in(&hub, &ns).await;
    let files = ControllerFiles::for_hub(&hub).await;
    let args = |identity: &str, url_key: &str| -> Vec<String> {
        let mut args = files.args();
        let at = args.iter().position(|a| a == "--url-signing-key").unwrap();
        args[at + 1] = url_key.to_string();
        args.extend(["--lease-namespace", &ns, "--identity", identity].map(String::from));
        args
    };

    // The URL-signing key's Secret is not mounted: the controller cannot sign image URLs.
    let missing = files.dir.path().join("not-mounted/url-signing.pem");
    let mut bad = Controller::start(&args("pod-bad", missing.to_str().unwrap()));
    let (status, bad) = blocking(move || (bad.exited(Duration::from_secs(60)), bad)).await.unwrap();
    let log = bad.log();
    assert!(status.is_some_and(|s| !s.success()), "the controller exits with an error: {status:?}\n{log}");
    assert!(log.contains("not-mounted/url-signing.pem"), "the error names the key file:\n{log}");
    // On its way out it held no Lease: none was taken, or it was given back.
    let held_by = lease(&hub, &ns).await.and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string));
    assert_eq!(held_by, None, "a controller that could not start left the Lease held\n{log}");

    // So the next controller leads at once rather than after the Lease's 15 s.
    let url_key = files.url_signing_key.to_str().unwrap().to_string();
    let good = Controller::start(&args("pod-good", &url_key));
    let (serving, good) =
        blocking(move || (good.listening("listening on http://", Duration::from_secs(60)), good)).await.unwrap();
    assert!(serving.is_some(), "the next controller leads:\n{}", good.log());
    let lease = lease(&hub, &ns).await.expect("the leader's Lease");
    assert_eq!(lease["spec"]["holderIdentity"], "pod-good");
    let log = good.log();
    assert!(!log.contains("403 Forbidden") && !log.contains("waiting for the leader"), "{log}");
}

#[tokio::test]
async fn a_controller_that_fails_after_taking_the_lease_gives_it_back() {
    let hub = RealHub::shared().await;
    let ns = hub.namespace("lease-release").await;
    grant_leases_in(&hub, &ns).await;
    let files = ControllerFiles::for_hub(&hub).await;
    let args = |identity: &str| -> Vec<String> {
        let mut args = files.args();
        args.extend(["--lease-namespace", &ns, "--identity", identity].map(String::from));
        args
    };

    // The host records are opened by the leader alone (they are one writer's): a damaged file is
    // found only once this process holds the Lease.
    let dir = tempfile::tempdir().unwrap();
    let data = Controller::data_dir(dir.path());
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("hosts.db"), b"this is not an SQLite database, and it is long enough to say so").unwrap();
    let mut broken = Controller::start_in(dir, &args("pod-broken"));
    let (status, broken) = blocking(move || (broken.exited(Duration::from_secs(60)), broken)).await.unwrap();
    let log = broken.log();
    assert!(status.is_some_and(|s| !s.success()), "the controller exits with an error: {status:?}\n{log}");
    assert!(
        log.contains("became the leader") && log.contains("opening the host records"),
        "it led, then failed on the records:\n{log}"
    );
    let lease_left = lease(&hub, &ns).await.expect("the Lease it took");
    assert_eq!(lease_left["spec"]["holderIdentity"], Value::Null, "it gave the Lease back on its way out\n{log}");

    let good = Controller::start(&args("pod-good"));
    let (serving, good) =
        blocking(move || (good.listening("listening on http://", Duration::from_secs(60)), good)).await.unwrap();
    assert!(serving.is_some(), "the next controller leads:\n{}", good.log());
    assert!(!good.log().contains("waiting for the leader"), "at once:\n{}", good.log());
}

/// Starts a controller whose Lease namespace is `namespace` and returns its log once it exited
/// (failing if it did not within 60 s, as the old controller, which retried for ever, did not).
async fn exits_saying(args: Vec<String>) -> String {
    let mut controller = Controller::start(&args);
    let (status, controller) =
        blocking(move || (controller.exited(Duration::from_secs(60)), controller)).await.unwrap();
    let log = controller.log();
    assert!(status.is_some_and(|s| !s.success()), "the controller exits with an error: {status:?}\n{log}");
    log
}

#[tokio::test]
async fn a_missing_lease_namespace_is_an_error_naming_it() {
    let hub = RealHub::shared().await;
    let missing = format!("no-such-namespace-{:08x}", fastrand::u32(..));

    // With the least privilege of deploy/rbac.yaml the API server refuses before it looks for the
    // namespace (RBAC first): the error names the namespace, the Role to bind there, and the flag.
    let files = ControllerFiles::for_hub(&hub).await;
    let mut args = files.args();
    args.extend(["--lease-namespace", &missing].map(String::from));
    let log = exits_saying(args).await;
    for what in [format!("in namespace \"{missing}\""), "bootstream-leader-election".into(), "--lease-namespace".into()]
    {
        assert!(log.contains(&what), "the error says {what:?}:\n{log}");
    }

    // Allowed to take Leases anywhere (a cluster admin's kubeconfig), the controller learns that the
    // namespace does not exist, and says so by name, with what to do.
    let mut args = files.args();
    let at = args.iter().position(|a| a == "--kubeconfig").unwrap();
    args[at + 1] = hub.kubeconfig.to_str().unwrap().to_string();
    args.extend(["--lease-namespace", &missing].map(String::from));
    let log = exits_saying(args).await;
    let said = format!("the Lease's namespace \"{missing}\" does not exist");
    assert!(log.contains(&said), "the error says {said:?}:\n{log}");
    assert!(log.contains(&format!("kubectl create namespace {missing}")), "and what to do:\n{log}");
    assert!(!log.contains("could not take the Lease; retrying"), "no retry of what waiting cannot fix:\n{log}");
}
