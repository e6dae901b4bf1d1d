//! deploy/ on a real Kubernetes hub (kube-apiserver 1.36, `bootstream::testkit::realhub`), driven by
//! the real kubectl as README tells users: the manifests apply with no warning and no error, and the
//! admission webhook of deploy/webhook.yaml, pointed at a real `bootstream controller`, is called by
//! the API server, refuses what bootstream refuses, and behaves as README says while the controller
//! is down. Each test has a hub of its own (both change what is cluster-wide).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use bootstream::testkit::realhub::{self, RealHub};
use common::controller::{Controller, ControllerFiles};
use serde_json::{Value, json};

/// The real kubectl as the hub's cluster admin, its caches in a folder of the test's.
struct Kubectl {
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Kubectl {
    fn new(hub: &RealHub) -> Kubectl {
        Kubectl { kubeconfig: hub.kubeconfig.clone(), home: tempfile::tempdir().unwrap() }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(crate::kubectl::kubectl_binary())
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.home.path())
            .env("TMPDIR", self.home.path())
            .current_dir(common::repo())
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        if let Some(text) = stdin {
            child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// `kubectl ARGS`, which must succeed and say nothing on stderr (no warning either).
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stderr.is_empty(), "kubectl {args:?}: {}\n{stdout}{stderr}", out.status);
        stdout.into_owned()
    }

    /// `kubectl ARGS`, which must fail; its stderr.
    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "kubectl {args:?} succeeded: {}{stderr}", String::from_utf8_lossy(&out.stdout));
        stderr
    }
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new(common::tool("openssl")).args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The path of `to` relative to `from` (kustomize takes only relative paths to other kustomizations).
fn relative(from: &Path, to: &Path) -> String {
    let up = from.components().count() - 1;
    format!("{}{}", "../".repeat(up), to.strip_prefix("/").unwrap().display())
}

#[tokio::test]
async fn deploy_applies_to_a_bare_hub_as_readme_says_with_no_warning() {
    let hub = RealHub::private(false).await;
    let kubectl = Kubectl::new(&hub);
    let dir = tempfile::tempdir().unwrap();

    // README "On a Kubernetes hub", step by step (the image edit aside).
    kubectl.ok(&["create", "namespace", "bootstream"], None);
    std::fs::write(dir.path().join("agent-auth.key"), [7u8; 32]).unwrap();
    let secret = |name: &str, file: &str| {
        let from = format!("--from-file={}", dir.path().join(file).display());
        kubectl.ok(&["-n", "bootstream", "create", "secret", "generic", name, &from], None);
    };
    secret("bootstream-agent-auth", "agent-auth.key");
    openssl(
        &["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "url-signing.pem"],
        dir.path(),
    );
    secret("bootstream-url-signing", "url-signing.pem");
    // No warning (the CRDs' integer formats are ones the API server knows), no error, exit 0.
    kubectl.ok(&["apply", "-k", "deploy/"], None);

    // Every object of deploy/ is there (the Deployments stay Pending: the hub has no nodes).
    let rendered = kubectl.ok(&["kustomize", "deploy/"], None);
    let expected: Vec<(String, String)> = yaml_documents(&rendered)
        .iter()
        .map(|d| (d["kind"].as_str().unwrap().to_string(), d["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    assert!(expected.len() > 20, "{expected:?}");
    let got: Value = serde_json::from_str(&kubectl.ok(&["get", "-f", "-", "-o", "json"], Some(&rendered))).unwrap();
    let got: Vec<(String, String)> = got["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["kind"].as_str().unwrap().to_string(), d["metadata"]["name"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(got, expected, "every object of deploy/ was accepted");
    let crds = kubectl.ok(&["get", "crd", "-o", "name"], None);
    assert_eq!(crds.lines().count(), 8, "{crds}");

    // Prometheus Operator scraping is the component deploy/monitoring: on a hub without the operator's
    // CRDs it fails with kubectl's own words, which README quotes; everything else still applies.
    let overlay = dir.path().join("with-monitoring");
    std::fs::create_dir(&overlay).unwrap();
    let deploy = common::repo().join("deploy");
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- {}\ncomponents:\n- {}\n",
            relative(&overlay, &deploy),
            relative(&overlay, &deploy.join("monitoring"))
        ),
    )
    .unwrap();
    let refused = kubectl.fails(&["apply", "-k", overlay.to_str().unwrap()], None);
    assert!(
        refused.contains(r#"no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1""#),
        "{refused}"
    );
    assert!(!refused.contains("Warning"), "{refused}");
}

fn yaml_documents(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    yaml_serde::Deserializer::from_str(text)
        .map(|de| Value::deserialize(de).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// deploy/webhook.yaml's ValidatingWebhookConfiguration, calling `https://ADDR/admission/validate`
/// (the controller's --webhook-listen) and trusting `ca_pem`, as JSON for `kubectl apply -f -`. The
/// rules, failure policy and timeout are deploy/'s own.
fn webhook_configuration(addr: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let mut config = realhub::manifests(&["webhook.yaml"])
        .into_iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("deploy/webhook.yaml's ValidatingWebhookConfiguration");
    let webhooks = config["webhooks"].as_array_mut().unwrap();
    assert_eq!(webhooks.len(), 1);
    assert_eq!(webhooks[0]["clientConfig"]["service"]["path"], "/admission/validate");
    webhooks[0]["clientConfig"] = json!({
        "url": format!("https://{addr}/admission/validate"),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
    });
    // The CA comes with the configuration here, not from OpenShift's service CA.
    config["metadata"]["annotations"].as_object_mut().unwrap().remove("service.beta.openshift.io/inject-cabundle");
    serde_json::to_string(&config).unwrap()
}

/// A controller with the webhook on, and the address of its webhook once it leads.
async fn start_controller(files: &ControllerFiles, certs: &common::Certs, identity: &str) -> (Controller, String) {
    let mut args = files.args();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    args.extend([
        "--webhook-listen".into(),
        "127.0.0.1:0".into(),
        "--webhook-tls-cert".into(),
        s(&certs.cert),
        "--webhook-tls-key".into(),
        s(&certs.key),
        "--identity".into(),
        identity.into(),
    ]);
    let controller = Controller::start(&args);
    tokio::task::spawn_blocking(move || {
        let webhook = controller.listening("for admission reviews", Duration::from_secs(60));
        let webhook = webhook.unwrap_or_else(|| panic!("the webhook listens:\n{}", controller.log()));
        // It leads (its agent API listens), so the controllers run while the test writes.
        let leads = controller.line("listening on http://", Duration::from_secs(60));
        assert!(leads.is_some(), "the controller leads:\n{}", controller.log());
        (controller, webhook)
    })
    .await
    .unwrap()
}

const DENIED: &str =
    r#"admission webhook "resources.admission.bootstream.agent-install.openshift.io" denied the request: "#;
const CLUSTER_REF_IMMUTABLE: &str = "Attempted to change Spec.ClusterRef which is immutable after InfraEnv creation.";
const AGENT_CLUSTER_IMMUTABLE: &str =
    "Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation.";

#[tokio::test]
async fn the_api_server_calls_the_controllers_webhook_and_refuses_writes_while_it_is_down() {
    let hub = RealHub::private(true).await;
    let kubectl = Kubectl::new(&hub);
    let files = ControllerFiles::for_hub(&hub).await;
    let certs = common::make_certs(files.dir.path(), "webhook");
    let ca_pem = std::fs::read_to_string(&certs.ca).unwrap();
    let (mut controller, webhook) = start_controller(&files, &certs, "pod-a").await;
    kubectl.ok(&["apply", "-f", "-"], Some(&webhook_configuration(&webhook, &ca_pem)));

    kubectl.ok(&["create", "namespace", "fleet"], None);
    let objects = r#"
apiVersion: v1
kind: Secret
metadata: {name: pull-secret, namespace: fleet}
stringData: {.dockerconfigjson: '{"auths":{"quay.io":{"auth":"dXNlcjpwYXNz"}}}'}
---
apiVersion: agent-install.openshift.io/v1beta1
kind: InfraEnv
metadata: {name: pool, namespace: fleet}
spec:
  pullSecretRef: {name: pull-secret}
  clusterRef: {name: c, namespace: fleet}
---
apiVersion: agent-install.openshift.io/v1beta1
kind: Agent
metadata: {name: host-0, namespace: fleet}
spec:
  approved: true
  clusterDeploymentName: {name: c, namespace: fleet}
"#;
    kubectl.ok(&["apply", "-f", "-"], Some(objects));
    // The host installs (as the controller reports it: a status write, which the webhook is not sent).
    let installing = r#"{"status":{"debugInfo":{"state":"installing"}}}"#;
    kubectl.ok(
        &["-n", "fleet", "patch", "agent", "host-0", "--subresource=status", "--type=merge", "-p", installing],
        None,
    );

    // Refused by bootstream's rules, in kubectl, with bootstream's (assisted-service's) words.
    let move_infraenv = [
        "-n",
        "fleet",
        "patch",
        "infraenv",
        "pool",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterRef":{"name":"d","namespace":"fleet"}}}"#,
    ];
    let refused = kubectl.fails(&move_infraenv, None);
    assert!(refused.contains(&format!("{DENIED}{CLUSTER_REF_IMMUTABLE}")), "{refused}");
    let move_agent = [
        "-n",
        "fleet",
        "patch",
        "agent",
        "host-0",
        "--type=merge",
        "-p",
        r#"{"spec":{"clusterDeploymentName":{"name":"d","namespace":"fleet"}}}"#,
    ];
    let refused = kubectl.fails(&move_agent, None);
    assert!(refused.contains(&format!("{DENIED}{AGENT_CLUSTER_IMMUTABLE}")), "{refused}");
    // What the rules allow goes through the webhook.
    kubectl.ok(&["-n", "fleet", "label", "infraenv", "pool", "rack=r1"], None);
    kubectl.ok(&["-n", "fleet", "label", "agent", "host-0", "rack=r1"], None);
    let log = controller.log();
    assert!(!log.contains("403 Forbidden") && !log.contains("forbidden"), "deploy/rbac.yaml lacks a right:\n{log}");

    // The controller stops: README says writes of those kinds are refused, "failed calling webhook".
    assert!(controller.terminate().success(), "{}", controller.log());
    for kind in ["infraenv/pool", "agent/host-0"] {
        let refused = kubectl.fails(&["-n", "fleet", "label", kind, "down=yes"], None);
        assert!(
            refused.contains(r#"failed calling webhook "resources.admission.bootstream.agent-install.openshift.io""#),
            "{refused}"
        );
    }
    // README's way out when the controller cannot come back: remove the webhook, write...
    kubectl.ok(&["delete", "validatingwebhookconfiguration", "bootstream"], None);
    kubectl.ok(&["-n", "fleet", "label", "infraenv", "pool", "down=yes"], None);
    // ...and apply deploy/'s webhook again once it is back: bootstream's rules hold again.
    let (controller, webhook) = start_controller(&files, &certs, "pod-b").await;
    kubectl.ok(&["apply", "-f", "-"], Some(&webhook_configuration(&webhook, &ca_pem)));
    let refused = kubectl.fails(&move_infraenv, None);
    assert!(refused.contains(&format!("{DENIED}{CLUSTER_REF_IMMUTABLE}")), "{refused}");
    let refused = kubectl.fails(&move_agent, None);
    assert!(refused.contains(&format!("{DENIED}{AGENT_CLUSTER_IMMUTABLE}")), "{refused}");
    let log = controller.log();
    assert!(!log.contains("403 Forbidden") && !log.contains("forbidden"), "deploy/rbac.yaml lacks a right:\n{log}");
}
