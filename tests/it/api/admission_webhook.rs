//! The validating admission webhook, called as a Kubernetes API server calls it: AdmissionReviews
//! POSTed over HTTPS to `bootstream controller --webhook-listen` (running against the test hub, as
//! on a cluster), and to the controller's own listener. What is not a review gets a 4xx saying why;
//! bodies are bounded and must arrive in time, as on every route.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bootstream::store::sqlite::SqliteStore;
use bootstream::testkit::hub::ApiServer;
use common::*;
use serde_json::{Value, json};

/// A `bootstream controller`, its stdout lines arriving on a channel.
struct Controller {
    child: Child,
    lines: mpsc::Receiver<String>,
    _data_dir: tempfile::TempDir,
}

impl Controller {
    fn start(args: &[&str]) -> Controller {
        let data_dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .arg("controller")
            .args(args)
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--listen", "127.0.0.1:0", "--webhook-listen", "127.0.0.1:0", "--body-timeout", "2"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning bootstream controller");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Controller { child, lines, _data_dir: data_dir }
    }

    /// The URL of the next "listening" line within `within`, if it is the one that names `what`.
    fn listening(&self, what: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if line.starts_with("bootstream listening on ") && line.contains(what) {
                return line.split_whitespace().nth(3).map(str::to_string);
            }
        }
        None
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const UID: &str = "b6f3c2a1-4d5e-4f60-8a7b-9c0d1e2f3a4b";

fn review(operation: &str, resource: (&str, &str, &str), sub: Option<&str>, object: Value, old: Value) -> Value {
    let (group, version, plural) = resource;
    let name = if object.is_null() { &old } else { &object }["metadata"]["name"].clone();
    let mut request = json!({
        "uid": UID, "operation": operation,
        "kind": {"group": group, "version": version, "kind": object["kind"]},
        "resource": {"group": group, "version": version, "resource": plural},
        "requestKind": {"group": group, "version": version, "kind": object["kind"]},
        "requestResource": {"group": group, "version": version, "resource": plural},
        "name": name, "namespace": "fleet",
        "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"},
    });
    if let Some(sub) = sub {
        request["subResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

const INFRAENVS: (&str, &str, &str) = ("agent-install.openshift.io", "v1beta1", "infraenvs");
const AGENTS: (&str, &str, &str) = ("agent-install.openshift.io", "v1beta1", "agents");

/// An object as the API server shows it to admission: server metadata, fields of a newer CRD.
fn stored(kind: &str, name: &str, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": kind,
           "metadata": {"name": name, "namespace": "fleet", "uid": "0d5c2b8e-7f3a-4c1d-9e6b-2a4f8c0d1e3b",
                        "resourceVersion": "4711", "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z",
                        "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}]},
           "spec": spec, "status": status})
}

/// POST over HTTPS trusting only `ca`: (status, body).
async fn post(client: &reqwest::Client, url: &str, content_type: &str, body: Vec<u8>) -> (u16, String) {
    let resp = client
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e:?}"));
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn answer(client: &reqwest::Client, url: &str, review: &Value) -> Value {
    let (status, body) = post(client, url, "application/json", review.to_string().into_bytes()).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (answer["apiVersion"].as_str(), answer["kind"].as_str()),
        (Some("admission.k8s.io/v1"), Some("AdmissionReview"))
    );
    assert_eq!(answer["response"]["uid"], UID, "the uid is echoed");
    answer["response"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_answers_the_api_servers_admission_reviews() {
    let cluster = SqliteStore::open_in_memory().unwrap();
    let api = ApiServer::start(cluster.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, api.kubeconfig()).unwrap();
    let key = dir.path().join("agent-auth.key");
    std::fs::write(&key, [7u8; 32]).unwrap();
    bootstream::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[]).unwrap();
    let certs = make_certs(dir.path(), "webhook");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (kubeconfig, key, url_key) = (s(&kubeconfig), s(&key), s(&dir.path().join("url-signing.pem")));
    let (cert, cert_key) = (s(&certs.cert), s(&certs.key));
    let args = |identity: &'static str| -> Vec<String> {
        [
            "--kubeconfig",
            &kubeconfig,
            "--lease-namespace",
            "bootstream",
            "--identity",
            identity,
            "--agent-auth-key",
            &key,
            "--url-signing-key",
            &url_key,
            "--base-url",
            "http://bootstream.hub.example",
            "--webhook-tls-cert",
            &cert,
            "--webhook-tls-key",
            &cert_key,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let leader_args = args("pod-a");
    let leader = Controller::start(&leader_args.iter().map(String::as_str).collect::<Vec<_>>());
    let (leader, webhook) = tokio::task::spawn_blocking(move || {
        let url = leader.listening("for admission reviews", Duration::from_secs(60)).expect("the webhook serves");
        (leader, url)
    })
    .await
    .unwrap();
    assert!(webhook.starts_with("https://"), "{webhook}");
    let validate = format!("{webhook}/admission/validate?timeout=10s");

    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&certs.ca).unwrap()).unwrap();
    let client = reqwest::Client::builder().tls_certs_only([ca]).build().unwrap();

    // A create that passes: allowed.
    let cluster_ref = json!({"name": "c1", "namespace": "fleet"});
    let infraenv =
        stored("InfraEnv", "pool", json!({"pullSecretRef": {"name": "ps"}, "clusterRef": cluster_ref}), json!({}));
    let r = answer(&client, &validate, &review("CREATE", INFRAENVS, None, infraenv.clone(), Value::Null)).await;
    assert_eq!(r, json!({"uid": UID, "allowed": true}));

    // Fields of a newer CRD than bootstream's are not a reason to refuse.
    let mut newer = infraenv.clone();
    newer["spec"]["aFieldOfANewerCRD"] = json!({"x": 1});
    let r = answer(&client, &validate, &review("CREATE", INFRAENVS, None, newer, Value::Null)).await;
    assert_eq!(r["allowed"], true, "{r}");

    // An immutable field changed: denied, in assisted-service's words.
    let mut moved = infraenv.clone();
    moved["spec"]["clusterRef"]["name"] = json!("c2");
    let r = answer(&client, &validate, &review("UPDATE", INFRAENVS, None, moved, infraenv.clone())).await;
    assert_eq!(
        r,
        json!({"uid": UID, "allowed": false, "status": {"status": "Failure", "code": 400, "reason": "BadRequest",
               "message": "Attempted to change Spec.ClusterRef which is immutable after InfraEnv creation."}})
    );

    // An installing Agent taken off its cluster: denied as a write of the Agent; a controller's
    // write of its status (the status subresource) is not judged by the spec's rules.
    let installing = json!({"debugInfo": {"state": "installing-in-progress"}});
    let bound =
        stored("Agent", "host-0", json!({"approved": true, "clusterDeploymentName": cluster_ref}), installing.clone());
    let mut unbound = bound.clone();
    unbound["spec"].as_object_mut().unwrap().remove("clusterDeploymentName");
    let r = answer(&client, &validate, &review("UPDATE", AGENTS, None, unbound.clone(), bound.clone())).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(
        r["status"]["message"],
        "Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation."
    );
    let mut reported = bound.clone();
    reported["status"]["debugInfo"]["state"] = json!("installed");
    let r = answer(&client, &validate, &review("UPDATE", AGENTS, Some("status"), reported, bound.clone())).await;
    assert_eq!(r, json!({"uid": UID, "allowed": true}));
    // The deletion of anything is allowed.
    let r = answer(&client, &validate, &review("DELETE", AGENTS, None, Value::Null, bound)).await;
    assert_eq!(r["allowed"], true);

    // Allowed with what the user should know.
    let mut ntp = infraenv.clone();
    ntp["spec"]["ntpSources"] = json!(["ntp.example.com"]);
    let r = answer(&client, &validate, &review("CREATE", INFRAENVS, None, ntp, Value::Null)).await;
    assert_eq!(r["allowed"], true);
    assert!(r["warnings"][0].as_str().unwrap().starts_with("spec.ntpSources is not supported"), "{r}");

    // A resource bootstream does not model is not judged: allowed.
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "fleet"},
                           "data": {"anything": "at all"}});
    let r = answer(&client, &validate, &review("CREATE", ("", "v1", "configmaps"), None, configmap, Value::Null)).await;
    assert_eq!(r, json!({"uid": UID, "allowed": true}));

    // What is not a review: 4xx saying why.
    let (status, body) =
        post(&client, &validate, "application/json", b"{\"apiVersion\": \"admission.k8s.io/v1\", ".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not JSON"), "{body}");
    let mut v1beta1 = review("CREATE", INFRAENVS, None, infraenv.clone(), Value::Null);
    v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let (status, body) = post(&client, &validate, "application/json", v1beta1.to_string().into_bytes()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("admissionReviewVersions: [v1]"), "{body}");
    let (status, body) = post(
        &client,
        &validate,
        "application/json",
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no request"), "{body}");
    let good = review("CREATE", INFRAENVS, None, infraenv.clone(), Value::Null).to_string().into_bytes();
    let (status, body) = post(&client, &validate, "application/yaml", good.clone()).await;
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("application/json"), "{body}");
    let resp = client.get(&validate).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.headers()["allow"].to_str().unwrap()), (405, "POST"));
    // The webhook's port serves nothing else.
    let resp = client.get(format!("{webhook}/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    assert!(resp.text().await.unwrap().contains("only admission reviews"));

    // The controller's own listener (plain HTTP here) serves the same route once it leads, with the
    // route's body limit and the server's body deadline.
    let (leader, addr) = tokio::task::spawn_blocking(move || {
        let url = leader.listening("(base URL", Duration::from_secs(60)).expect("the controller leads and serves");
        (leader, url.trim_start_matches("http://").to_string())
    })
    .await
    .unwrap();
    let a = addr.clone();
    let (plain, too_large, trickled, metrics) = tokio::task::spawn_blocking(move || {
        let plain = request(&a, "POST", "/admission/validate", &[("Content-Type", "application/json")], &good);
        // 7 MiB announced: refused from the head, before a byte of it is read.
        let mut conn = Conn::open(&a);
        let too_large = conn
            .exchange(b"POST /admission/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 7340032\r\n\r\n")
            .unwrap();
        // A body that trickles: 408 at the body timeout (2 s here).
        let mut conn = Conn::open(&a);
        conn.send(b"POST /admission/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"apiVersion\"").unwrap();
        let started = Instant::now();
        let trickled = conn.read_response().unwrap();
        let waited = started.elapsed();
        let metrics = request(&a, "GET", "/metrics", &[], b"");
        (plain, too_large, (trickled, waited), metrics)
    })
    .await
    .unwrap();
    assert_eq!(plain.status, 200, "{}", plain.text());
    assert_eq!(serde_json::from_slice::<Value>(&plain.body).unwrap()["response"], json!({"uid": UID, "allowed": true}));
    assert_eq!(too_large.status, 413, "{}", too_large.text());
    assert_eq!(trickled.0.status, 408, "{}", trickled.0.text());
    assert!(trickled.1 < Duration::from_secs(8), "answered at the body timeout (2 s), not later: {:?}", trickled.1);
    assert!(metrics.text().contains("handler=\"/admission/validate\""), "the route is counted under its label");

    // A standby controller answers reviews too, while it waits for the Lease: the decision needs
    // nothing a leader has, and the webhook must answer whichever pod the Service picks.
    let standby_args = args("pod-b");
    let standby = Controller::start(&standby_args.iter().map(String::as_str).collect::<Vec<_>>());
    let (standby, standby_webhook) = tokio::task::spawn_blocking(move || {
        let url =
            standby.listening("for admission reviews", Duration::from_secs(60)).expect("the standby's webhook serves");
        (standby, url)
    })
    .await
    .unwrap();
    let r = answer(
        &client,
        &format!("{standby_webhook}/admission/validate"),
        &review("CREATE", INFRAENVS, None, infraenv.clone(), Value::Null),
    )
    .await;
    assert_eq!(r["allowed"], true);
    let standby = tokio::task::spawn_blocking(move || {
        assert!(standby.listening("(base URL", Duration::from_secs(2)).is_none(), "the standby does not lead");
        standby
    })
    .await
    .unwrap();
    let lease = cluster.get_raw("leases.coordination.k8s.io", "bootstream", "bootstream-controller").unwrap().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "pod-a");
    drop((leader, standby));
}
