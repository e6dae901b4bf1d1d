//! bootstream on Kubernetes, run as users run it: `bootstream controller --kubeconfig` and
//! `bootstream serve --kube` as processes, against a Kubernetes API server (the loopback one of
//! `bootstream::testkit::hub`, holding the cluster's objects). A user's YAML goes into the cluster as
//! `kubectl apply` would put it; hosts talk to the controller's agent API; images come from the
//! stateless image server; a second controller waits for the Lease.

use super::{blocking, wait_for};
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bootstream::store::sqlite::SqliteStore;
use bootstream::testkit::hub::{ApiServer, service_account_grants};
use common::*;
use serde_json::{Value, json};

/// A bootstream process, its stdout lines arriving on a channel (so a test can wait for one with a
/// deadline, or check that none came).
struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    _data_dir: tempfile::TempDir,
}

impl Process {
    fn start(args: &[&str]) -> Process {
        let data_dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning bootstream");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Process { child, lines, _data_dir: data_dir }
    }

    /// The address from the "listening" line, once the process serves.
    fn listening(&self, within: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(within).ok()?;
        let addr = line.split("http://").nth(1)?.split_whitespace().next()?.to_string();
        Some(addr)
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn kubectl_apply(cluster: &SqliteStore, doc: Value) {
    let (kind, doc) = bootstream::resources::validate_document(&doc).expect("a valid document");
    cluster.apply_document(kind, doc).await.expect("apply");
}

/// What the user of the fleet namespace applies: a pull secret, an NMStateConfig and an InfraEnv
/// selecting it.
pub(super) fn fleet_documents() -> [Value; 3] {
    [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-secret", "namespace": "fleet"},
               "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"dXNlcjpwYXNz\"}}}"}}),
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "NMStateConfig",
               "metadata": {"name": "host-0", "namespace": "fleet", "labels": {"rack": "r1"}},
               "spec": {"config": {"interfaces": [{"name": "eth0", "type": "ethernet", "state": "up",
                                                   "mac-address": "02:00:00:80:12:01",
                                                   "ipv4": {"enabled": true, "dhcp": false,
                                                            "address": [{"ip": "192.168.126.10", "prefix-length": 24}]}}]},
                        "interfaces": [{"name": "eth0", "macAddress": "02:00:00:80:12:01"}]}}),
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
               "metadata": {"name": "pool", "namespace": "fleet"},
               "spec": {"pullSecretRef": {"name": "pull-secret"}, "sshAuthorizedKey": "ssh-ed25519 AAAA test",
                        "nmStateConfigLabelSelector": {"matchLabels": {"rack": "r1"}}}}),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_and_image_server_replicas_work_against_a_cluster() {
    let cluster = SqliteStore::open_in_memory().unwrap();
    let api = ApiServer::start(cluster.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    // Each process has its service account's permissions from deploy/rbac.yaml, nothing more.
    let rbac = std::fs::read_to_string(repo().join("deploy/rbac.yaml")).unwrap();
    let kubeconfig_of = |account: &str| {
        let grants = service_account_grants(&rbac, "bootstream", account).unwrap();
        api.enforce_rbac(account, grants);
        let path = dir.path().join(format!("{account}.kubeconfig"));
        std::fs::write(&path, api.kubeconfig_for(account)).unwrap();
        path.to_str().unwrap().to_string()
    };
    let (controller_kubeconfig, image_server_kubeconfig) =
        (kubeconfig_of("bootstream-controller"), kubeconfig_of("bootstream-image-server"));
    let key = dir.path().join("agent-auth.key");
    std::fs::write(&key, [42u8; 32]).unwrap();
    let key = key.to_str().unwrap().to_string();
    // One URL-signing key for the controller (which signs status URLs) and the image servers.
    bootstream::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[]).unwrap();
    let url_key = dir.path().join("url-signing.pem").to_str().unwrap().to_string();

    for doc in fleet_documents() {
        kubectl_apply(&cluster, doc).await;
    }

    // Without the shared key an image server refuses to start rather than sign tokens nobody accepts.
    let refused = Command::new(BIN)
        .args(["serve", "--kube", "--kubeconfig", &image_server_kubeconfig, "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--agent-auth-key"), "{refused:?}");
    // Nor without the shared URL-signing key (status URLs signed by the controller would not verify).
    let refused = Command::new(BIN)
        .args(["serve", "--kube", "--kubeconfig", &image_server_kubeconfig, "--listen", "127.0.0.1:0"])
        .args(["--agent-auth-key", &key, "--data-dir"])
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--url-signing-key"), "{refused:?}");

    // Behind one route: image paths go to the image servers, the rest to the controller.
    let common_args =
        ["--agent-auth-key", &key, "--url-signing-key", &url_key, "--base-url", "http://bootstream.hub.example"];
    let controller_args =
        [&["controller", "--kubeconfig", &controller_kubeconfig, "--lease-namespace", "bootstream"][..], &common_args]
            .concat();
    let leader = Process::start(&[&controller_args[..], &["--identity", "pod-a"]].concat());
    let controller = blocking(move || {
        let addr = leader.listening(Duration::from_secs(60)).expect("the controller serves");
        (leader, addr)
    });
    let replica =
        Process::start(&[&["serve", "--kube", "--kubeconfig", &image_server_kubeconfig][..], &common_args].concat());
    let (mut leader, controller) = controller.await.unwrap();
    let (replica, image_server) = blocking(move || {
        let addr = replica.listening(Duration::from_secs(60)).expect("the image server serves");
        (replica, addr)
    })
    .await
    .unwrap();

    // The controller reconciles the InfraEnv in the cluster: its status has the image URLs.
    let infraenv = wait_for("the InfraEnv's ISO URL", async || {
        let ie = cluster.get_document(bootstream::resources::Kind::InfraEnv, "fleet", "pool").await.unwrap()?;
        (ie["status"]["isoDownloadURL"].as_str().is_some_and(|u| !u.is_empty())).then_some(ie)
    })
    .await;
    let uid = infraenv["metadata"]["uid"].as_str().unwrap().to_string();
    let iso_url = infraenv["status"]["isoDownloadURL"].as_str().unwrap().to_string();
    let iso_path = format!("/{}", iso_url.split("://").nth(1).unwrap().split_once('/').unwrap().1);

    // Any replica serves the same image as the controller: the same bytes, the same ETag.
    let (c, r, path) = (controller.clone(), image_server.clone(), iso_path.clone());
    let (from_controller, from_replica) =
        blocking(move || (request(&c, "GET", &path, &[], b""), request(&r, "GET", &path, &[], b""))).await.unwrap();
    assert_eq!(from_replica.status, 200, "{}", from_replica.text());
    assert_eq!(from_controller.status, 200);
    assert_eq!(from_replica.body.get(0x8001..0x8006), Some(&b"CD001"[..]), "an ISO 9660 image");
    assert_eq!(sha256_hex(&from_replica.body), sha256_hex(&from_controller.body));
    assert_eq!(from_replica.header("etag"), from_controller.header("etag"));

    // The replica reads the InfraEnv's NMStateConfigs from the cluster: its static network config.
    // The URLs of the status are signed by the controller; the replica checks them with the same key.
    let path_of = |url: &serde_json::Value| {
        let url = url.as_str().unwrap_or_else(|| panic!("no URL in {infraenv:#}"));
        format!("/{}", url.split("://").nth(1).unwrap().split_once('/').unwrap().1)
    };
    let (r, path) = (image_server.clone(), path_of(&infraenv["status"]["debugInfo"]["staticNetworkDownloadURL"]));
    let static_network = blocking(move || request(&r, "GET", &path, &[], b"")).await.unwrap();
    assert_eq!(static_network.status, 200, "{}", static_network.text());
    assert!(static_network.body.len() > 100, "a static network archive");
    assert!(
        infraenv["status"]["debugInfo"]["staticNetworkDownloadURL"].as_str().is_some_and(|u| !u.is_empty()),
        "the controller saw the NMStateConfig too: {infraenv:#}"
    );

    // A host boots, reads its token from the discovery Ignition the replica serves, and registers
    // with the controller: its Agent appears in the cluster.
    let (c, r, id) = (controller.clone(), image_server.clone(), uid.clone());
    let ign_path = path_of(&infraenv["status"]["bootArtifacts"]["discoveryIgnitionURL"]);
    let (ignition, registered, resources_on_replica, agent_api_on_replica) = blocking(move || {
        let ign = request(&r, "GET", &ign_path, &[], b"");
        let ignition: Value = serde_json::from_slice(&ign.body).unwrap();
        let token = bootstream::cli::simulate::agent_token(&ignition).expect("the agent token");
        let body =
            json!({"host_id": "9e2a43c4-5a7a-4a53-9d0a-6d4f0a7f0c11", "discovery_agent_version": "v1"}).to_string();
        let path = format!("/api/assisted-install/v2/infra-envs/{id}/hosts");
        let registered = request(
            &c,
            "POST",
            &path,
            &[("X-Secret-Key", &token), ("Content-Type", "application/json")],
            body.as_bytes(),
        );
        let resources =
            request(&r, "GET", "/apis/agent-install.openshift.io/v1beta1/namespaces/fleet/infraenvs", &[], b"");
        let agent_api = request(&r, "POST", &path, &[("X-Secret-Key", &token)], body.as_bytes());
        (ignition, registered, resources, agent_api)
    })
    .await
    .unwrap();
    assert!(ignition["ignition"]["version"].is_string());
    assert_eq!(registered.status, 201, "{}", registered.text());
    wait_for("the host's Agent in the cluster", async || {
        cluster
            .get_document(bootstream::resources::Kind::Agent, "fleet", "9e2a43c4-5a7a-4a53-9d0a-6d4f0a7f0c11")
            .await
            .unwrap()
    })
    .await;
    // Its eventsURL is the controller's to serve (deploy/ingress.yaml sends /api/ there): a replica
    // has no host records, and says who has.
    let agent = wait_for("the Agent's eventsURL", async || {
        let a = cluster
            .get_document(bootstream::resources::Kind::Agent, "fleet", "9e2a43c4-5a7a-4a53-9d0a-6d4f0a7f0c11")
            .await
            .unwrap()?;
        a["status"]["debugInfo"]["eventsURL"].is_string().then_some(a)
    })
    .await;
    let events_path = path_of(&agent["status"]["debugInfo"]["eventsURL"]);
    assert!(events_path.contains("&api_key="), "{events_path}");
    let (c, r) = (controller.clone(), image_server.clone());
    let (on_controller, on_replica) =
        blocking(move || (request(&c, "GET", &events_path, &[], b""), request(&r, "GET", &events_path, &[], b"")))
            .await
            .unwrap();
    assert_eq!(on_controller.status, 200, "{}", on_controller.text());
    let events: Vec<Value> = serde_json::from_slice(&on_controller.body).unwrap();
    assert_eq!(events[0]["name"], "host_registration_succeeded", "{events:#?}");
    assert_eq!(on_replica.status, 404);
    assert!(on_replica.text().contains("bootstream controller"), "{}", on_replica.text());
    // The pull secret the controller follows carries the watch label, so its cache holds it; the
    // controller's /metrics shows what it holds and what it asked of the API server.
    let secret = cluster.get_document(bootstream::resources::Kind::Secret, "fleet", "pull-secret").await.unwrap();
    assert_eq!(secret.unwrap()["metadata"]["labels"][bootstream::resources::WATCH_LABEL], "true");
    let c = controller.clone();
    let metrics = wait_for("the controller's cache in /metrics", async || {
        let c = c.clone();
        let text = blocking(move || request(&c, "GET", "/metrics", &[], b"").text()).await.unwrap();
        let holds = ["infraenvs", "agents", "secrets", "nmstateconfigs"]
            .iter()
            .all(|r| text.contains(&format!("bootstream_kube_cache_objects{{resource=\"{r}\"}} 1\n")));
        holds.then_some(Value::String(text))
    })
    .await;
    let metrics = metrics.as_str().unwrap();
    for series in [
        "bootstream_kube_requests_total{verb=\"list\",resource=\"agents\"}",
        "bootstream_kube_requests_total{verb=\"watch\",resource=\"agents\"}",
        "bootstream_kube_requests_total{verb=\"create\",resource=\"agents\"}",
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    assert_eq!(resources_on_replica.status, 404);
    assert!(resources_on_replica.text().contains("kubectl"), "{}", resources_on_replica.text());
    assert_eq!(agent_api_on_replica.status, 404);
    assert!(agent_api_on_replica.text().contains("bootstream controller"), "{}", agent_api_on_replica.text());

    // The controller holds the Lease; a second one waits, and takes over when the first stops.
    let holder = |lease: &Value| lease["spec"]["holderIdentity"].as_str().map(str::to_string);
    let lease = cluster.get_raw("leases.coordination.k8s.io", "bootstream", "bootstream-controller").unwrap().unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("pod-a"));
    let standby = Process::start(&[&controller_args[..], &["--identity", "pod-b"]].concat());
    let standby = blocking(move || {
        assert!(standby.listening(Duration::from_secs(3)).is_none(), "the standby serves nothing while pod-a leads");
        standby
    })
    .await
    .unwrap();
    let stopped = blocking(move || leader.terminate()).await.unwrap();
    assert!(stopped.success(), "{stopped:?}");
    let standby = blocking(move || {
        assert!(standby.listening(Duration::from_secs(30)).is_some(), "pod-b took over once pod-a released the Lease");
        standby
    })
    .await
    .unwrap();
    let lease = cluster.get_raw("leases.coordination.k8s.io", "bootstream", "bootstream-controller").unwrap().unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("pod-b"));
    drop((standby, replica));
    assert_eq!(api.refused(), Vec::<String>::new(), "requests deploy/rbac.yaml does not allow");
}
