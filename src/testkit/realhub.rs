//! The real Kubernetes hub of the tests: kube-apiserver 1.36 and etcd 3.6 from the compatibility corpus
//! (`$BOOTSTREAM_COMPAT_DIR/kube/hub.sh`, `../shared` by default), with bootstream's CRDs and RBAC
//! manifests (`deploy/crds`, `deploy/rbac.yaml`) applied. It is the oracle for what the product's
//! own API server ([`super::hub`]) only imitates.
//!
//! One hub serves a whole test run. nextest runs every test in a process of its own, so a hub per
//! process would start (5 s, most of a core) for each of them; instead the processes share one, kept
//! in a folder of the machine's temporary directory named after this checkout:
//! - `lock` (held exclusively while a process starts the hub, joins it, or a reaper stops it),
//! - `users` (held shared by every process using the hub, for as long as it lives),
//! - `env`, `kubeconfig`, `admin-token` (written by hub.sh), `ready` (bootstream's manifests applied).
//!
//! The first process starts the hub and a reaper beside it; the reaper stops the hub once no process
//! has used it for [`IDLE_SECS`] seconds (the last test of a run has ended). Each test works in
//! a namespace of its own ([`RealHub::namespace`]), so tests running at once do not meet.
//! Without the corpus a test that needs the hub fails saying where it looked: it never skips.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use crate::keylocks::Locked as _;

/// How long the hub outlives its last user.
pub const IDLE_SECS: u32 = 20;

/// The namespace of bootstream's ServiceAccounts (as `deploy/kustomization.yaml` installs them).
pub const SYSTEM_NAMESPACE: &str = "bootstream";

/// The hub this process uses.
pub struct RealHub {
    pub url: String,
    /// A cluster admin's kubeconfig (system:masters), as a file for kubectl.
    pub kubeconfig: PathBuf,
    pub admin_token: String,
    /// The CA certificate (PEM) of the hub's serving certificate.
    pub ca_pem: String,
    /// hub.sh's folder (logs: apiserver.log, etcd.log).
    pub dir: PathBuf,
    keep: Keep,
}

/// What keeps the hub running while this value lives.
enum Keep {
    /// The run's shared hub: held shared while this process lives; the reaper waits for every holder
    /// to be gone.
    Shared(#[allow(dead_code)] File),
    /// A hub of this value's own ([`RealHub::private`]), stopped and removed on drop.
    Own(PathBuf),
}

impl Drop for RealHub {
    fn drop(&mut self) {
        if let Keep::Own(script) = &self.keep {
            let _ = Command::new("bash")
                .arg(script)
                .arg("stop")
                .arg(&self.dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The compatibility corpus's hub script, or a failure saying where it was looked for.
pub fn hub_script() -> PathBuf {
    let compat = std::env::var_os("BOOTSTREAM_COMPAT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let script = compat.join("kube/hub.sh");
    assert!(
        script.is_file(),
        "the real Kubernetes hub is missing: {} does not exist. These tests run against kube-apiserver and etcd \
         from the compatibility corpus (BOOTSTREAM_COMPAT_DIR, default ../shared, must hold kube/hub.sh); they \
         do not skip without it.",
        script.display()
    );
    script
}

/// The folder shared by every test process of this checkout.
fn shared_dir(script: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    env!("CARGO_MANIFEST_DIR").hash(&mut h);
    script.hash(&mut h);
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("bootstream-realhub-{uid}-{:016x}", h.finish()))
}

impl RealHub {
    /// The hub, started if no process of this run has started it yet. Blocks for the start (about
    /// 5 s, then the manifests); call it from a blocking context or through [`RealHub::shared`].
    pub fn shared_blocking() -> Arc<RealHub> {
        static HUB: OnceLock<Mutex<Option<Arc<RealHub>>>> = OnceLock::new();
        let mut held = HUB.get_or_init(Default::default).locked();
        if let Some(hub) = held.as_ref() {
            return hub.clone();
        }
        let hub = Arc::new(RealHub::join_or_start());
        *held = Some(hub.clone());
        hub
    }

    /// [`RealHub::shared_blocking`] from async code.
    pub async fn shared() -> Arc<RealHub> {
        tokio::task::spawn_blocking(RealHub::shared_blocking).await.expect("starting the real hub")
    }

    fn join_or_start() -> RealHub {
        let script = hub_script();
        let dir = shared_dir(&script);
        std::fs::create_dir_all(&dir).expect("the real hub's folder");
        let lock = File::create(dir.join("lock")).expect("the real hub's lock file");
        flock(&lock, libc::LOCK_EX, "locking the real hub's folder");
        let users = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("users"))
            .expect("the real hub's users file");
        // Shared before the start lock is let go: a reaper can only stop a hub nobody holds.
        flock(&users, libc::LOCK_SH, "joining the real hub");
        let applied = std::fs::read_to_string(dir.join("ready")).ok();
        if applied.is_none() || !ready(&dir) {
            start(&script, &dir);
        } else if applied.as_deref() != Some(&manifests_digest()) {
            // The manifests changed while the hub ran (an edit between two runs within the idle time).
            install_on(&dir);
        }
        let hub = RealHub::read(&dir, Keep::Shared(users));
        drop(lock);
        hub
    }

    /// A hub of the caller's own, stopped on drop: for a test that changes what is cluster-wide
    /// (admission webhooks, the manifests themselves) and must not reach other tests. With
    /// `manifests`, bootstream's CRDs and RBAC are applied as on the shared hub; without, it is bare.
    pub async fn private(manifests: bool) -> RealHub {
        let hub = tokio::task::spawn_blocking(RealHub::start_private).await.expect("starting a private hub");
        if manifests {
            install_manifests(&hub.url, &hub.admin_token, &hub.ca_pem).await;
        }
        hub
    }

    fn start_private() -> RealHub {
        let script = hub_script();
        let dir =
            std::env::temp_dir().join(format!("bootstream-ownhub-{}-{:016x}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&dir).expect("a private hub's folder");
        hub_sh_start(&script, &dir);
        RealHub::read(&dir, Keep::Own(script.clone()))
    }

    fn read(dir: &Path, keep: Keep) -> RealHub {
        let env = std::fs::read_to_string(dir.join("env")).expect("hub.sh's env file");
        let url = env
            .lines()
            .find_map(|l| l.strip_prefix("export BOOTSTREAM_HUB_URL="))
            .expect("BOOTSTREAM_HUB_URL in hub.sh's env file")
            .to_string();
        RealHub {
            url,
            kubeconfig: dir.join("kubeconfig"),
            admin_token: std::fs::read_to_string(dir.join("admin-token")).expect("admin-token").trim().to_string(),
            ca_pem: std::fs::read_to_string(dir.join("ca.crt")).expect("ca.crt"),
            dir: dir.to_path_buf(),
            keep,
        }
    }

    /// A kubeconfig (YAML text) for `token`, trusting the hub's CA.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        kubeconfig_yaml(&self.url, &self.ca_pem, token)
    }

    /// A kube-rs client authenticating with `token` (needs a tokio runtime).
    pub async fn client_as(&self, token: &str) -> kube::Client {
        client_for(&self.url, &self.ca_pem, token).await
    }

    /// A cluster admin's client.
    pub async fn admin(&self) -> kube::Client {
        self.client_as(&self.admin_token).await
    }

    /// A token of the ServiceAccount `name` of bootstream's namespace (one `deploy/rbac.yaml`
    /// creates), valid for an hour: what a pod of that ServiceAccount would be given.
    pub async fn service_account_token(&self, name: &str) -> String {
        let client = self.admin().await;
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": 3600}});
        let req = http::Request::post(format!("/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{name}/token"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let answer: Value = client.request(req).await.unwrap_or_else(|e| panic!("a token of {name}: {e}"));
        answer["status"]["token"].as_str().expect("a token in the TokenRequest's status").to_string()
    }

    /// A fresh namespace named after `label` (a test's own): tests that run at once never share one.
    pub async fn namespace(&self, label: &str) -> String {
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
            .take(40)
            .collect();
        let name = format!("{}-{:08x}", label.trim_matches('-'), fastrand::u32(..));
        let client = self.admin().await;
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let req = http::Request::post("/api/v1/namespaces")
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap();
        let _: Value = client.request(req).await.unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }
}

/// flock(2) on `file` (what the reaper's `flock` command takes too); released when the file closes.
fn flock(file: &File, op: libc::c_int, what: &str) {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: the descriptor is open for as long as `file` is borrowed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return;
        }
        let e = std::io::Error::last_os_error();
        assert!(e.kind() == std::io::ErrorKind::Interrupted, "{what}: {e}");
    }
}

/// Whether the hub of `dir` answers /readyz.
fn ready(dir: &Path) -> bool {
    let (Ok(env), Ok(token)) =
        (std::fs::read_to_string(dir.join("env")), std::fs::read_to_string(dir.join("admin-token")))
    else {
        return false;
    };
    let Some(url) = env.lines().find_map(|l| l.strip_prefix("export BOOTSTREAM_HUB_URL=")) else { return false };
    Command::new("curl")
        .args(["-sfk", "-m", "5", "-H", &format!("Authorization: Bearer {}", token.trim()), &format!("{url}/readyz")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts the hub under `dir` (stopping what is left of an earlier one), applies bootstream's
/// manifests, and starts the reaper. Called with the start lock held.
fn start(script: &Path, dir: &Path) {
    let _ = std::fs::remove_file(dir.join("ready"));
    let _ = Command::new("bash").arg(script).arg("stop").arg(dir).stdout(Stdio::null()).stderr(Stdio::null()).status();
    hub_sh_start(script, dir);
    let reaper = format!(
        r#"idle=0
while sleep 1; do
  if flock -n -x "$1/users" true; then idle=$((idle+1)); else idle=0; fi
  if [ "$idle" -ge {IDLE_SECS} ]; then
    exec 9>"$1/lock"; flock -x 9
    if flock -n -x "$1/users" true; then rm -f "$1/ready"; bash "$2" stop "$1"; exit 0; fi
    exec 9>&-; idle=0
  fi
done"#
    );
    let log = File::create(dir.join("reaper.log")).expect("the reaper's log");
    Command::new("setsid")
        .arg("-f")
        .arg("bash")
        .arg("-c")
        .arg(reaper)
        .arg("reaper")
        .arg(dir)
        .arg(script)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("the reaper's log"))
        .stderr(log)
        .status()
        .expect("starting the real hub's reaper");
    install_on(dir);
}

/// Applies bootstream's manifests to the hub of `dir` and marks it ready with their digest.
fn install_on(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let url = std::fs::read_to_string(dir.join("env")).expect("hub.sh's env file");
    let url = url.lines().find_map(|l| l.strip_prefix("export BOOTSTREAM_HUB_URL=")).expect("the hub's URL");
    let token = std::fs::read_to_string(dir.join("admin-token")).expect("admin-token");
    let ca = std::fs::read_to_string(dir.join("ca.crt")).expect("ca.crt");
    rt.block_on(install_manifests(url, token.trim(), &ca));
    std::fs::write(dir.join("ready"), manifests_digest()).expect("marking the real hub ready");
}

/// A digest of the manifests the hub gets, to tell whether a running hub has the current ones.
fn manifests_digest() -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for doc in manifests(&["crds", "rbac.yaml"]) {
        h.update(doc.to_string().as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `hub.sh start DIR`, in a session of its own: the processes outlive this test's process (and its
/// process group, which a test runner may kill); the reaper or a private hub's drop stops them.
fn hub_sh_start(script: &Path, dir: &Path) {
    let out = Command::new("setsid")
        .arg("-w")
        .arg("bash")
        .arg(script)
        .arg("start")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running hub.sh (bash and setsid are needed)");
    assert!(
        out.status.success(),
        "hub.sh start {} failed ({}):\n{}{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The YAML documents of `deploy/crds` and `deploy/rbac.yaml` in the order a user applies them.
pub fn manifests(files: &[&str]) -> Vec<Value> {
    use serde::Deserialize;
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut docs = Vec::new();
    for file in files {
        let path = deploy.join(file);
        let paths: Vec<PathBuf> = if path.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(&path)
                .expect("a deploy folder")
                .map(|e| e.expect("an entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
                .collect();
            v.sort();
            v
        } else {
            vec![path]
        };
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            for de in yaml_serde::Deserializer::from_str(&text) {
                let v = Value::deserialize(de).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                if !v.is_null() {
                    docs.push(v);
                }
            }
        }
    }
    docs
}

async fn install_manifests(url: &str, token: &str, ca: &str) {
    let client = client_for(url, ca, token).await;
    apply_all(&client, &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}})])
        .await;
    apply_all(&client, &manifests(&["crds"])).await;
    // The CRDs serve once established.
    for crd in manifests(&["crds"]) {
        let name = crd["metadata"]["name"].as_str().expect("a CRD's name").to_string();
        let api: kube::Api<kube::core::DynamicObject> = kube::Api::all_with(
            client.clone(),
            &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
            )),
        );
        for attempt in 0.. {
            let got = api.get(&name).await.expect("reading a CRD");
            let established = got.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            if established {
                break;
            }
            assert!(attempt < 300, "CRD {name} was not established in 30 s");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    apply_all(&client, &manifests(&["rbac.yaml"])).await;
}

/// A kube-rs client of the hub at `url` whose CA is `ca_pem`, authenticating with `token`.
async fn client_for(url: &str, ca_pem: &str, token: &str) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig_yaml(url, ca_pem, token)).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("a config");
    kube::Client::try_from(config).expect("a client of the real hub")
}

/// A kubeconfig (YAML text) for the hub at `url` whose CA is `ca_pem`, authenticating with `token`.
fn kubeconfig_yaml(url: &str, ca_pem: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {url}\n    \
         certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n\
         - name: hub\n  context:\n    cluster: hub\n    user: user\ncurrent-context: hub\n"
    )
}

/// Server-side applies each document (as `kubectl apply --server-side`), in bootstream's namespace
/// when it is namespaced and names none.
pub async fn apply_all(client: &kube::Client, docs: &[Value]) {
    let discovery = kube::Discovery::new(client.clone()).run().await.expect("the hub's discovery");
    for doc in docs {
        let (group, version) = match doc["apiVersion"].as_str().expect("an apiVersion").split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), doc["apiVersion"].as_str().unwrap().to_string()),
        };
        let kind = doc["kind"].as_str().expect("a kind");
        let gvk = kube::core::GroupVersionKind::gvk(&group, &version, kind);
        let (resource, caps) = discovery.resolve_gvk(&gvk).unwrap_or_else(|| panic!("the hub serves no {gvk:?}"));
        let name = doc["metadata"]["name"].as_str().expect("a name");
        let api: kube::Api<kube::core::DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
            let ns = doc["metadata"]["namespace"].as_str().unwrap_or(SYSTEM_NAMESPACE);
            kube::Api::namespaced_with(client.clone(), ns, &resource)
        } else {
            kube::Api::all_with(client.clone(), &resource)
        };
        let params = kube::api::PatchParams::apply("bootstream-tests").force();
        api.patch(name, &params, &kube::api::Patch::Apply(doc))
            .await
            .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The harness itself: the hub answers as the cluster admin, the controller's ServiceAccount
    /// gets a token that RBAC knows, and it may do what `deploy/rbac.yaml` grants and no more.
    #[test]
    fn without_the_corpus_a_test_of_the_real_hub_fails_saying_where_it_looked() {
        let empty = std::env::temp_dir().join(format!("bootstream-no-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        // SAFETY: nextest runs this test in a process of its own; no other thread reads the variable.
        unsafe { std::env::set_var("BOOTSTREAM_COMPAT_DIR", &empty) };
        let failed = std::panic::catch_unwind(hub_script).expect_err("no hub script in an empty corpus");
        unsafe { std::env::remove_var("BOOTSTREAM_COMPAT_DIR") };
        let message = failed.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("the real Kubernetes hub is missing"), "{message}");
        assert!(message.contains(&empty.join("kube/hub.sh").display().to_string()), "{message}");
        assert!(message.contains("do not skip"), "{message}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[tokio::test]
    async fn a_private_hub_is_bare_without_manifests_and_gone_after_drop() {
        let hub = RealHub::private(false).await;
        let dir = hub.dir.clone();
        let crds: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(hub.admin().await);
        assert!(crds.list(&Default::default()).await.unwrap().items.is_empty());
        let pid: i32 = std::fs::read_to_string(dir.join("apiserver.pid")).unwrap().trim().parse().unwrap();
        drop(hub);
        // SAFETY: signal 0 only probes.
        assert_ne!(unsafe { libc::kill(pid, 0) }, 0, "the private hub's kube-apiserver outlived it");
        assert!(!dir.exists());
    }

    #[tokio::test]
    async fn the_real_hub_serves_bootstreams_kinds_to_the_service_accounts_of_deploy_rbac() {
        let hub = RealHub::shared().await;
        let ns = hub.namespace("harness").await;
        let token = hub.service_account_token("bootstream-controller").await;
        let controller = hub.client_as(&token).await;
        let infraenvs: kube::Api<kube::core::DynamicObject> = kube::Api::namespaced_with(
            controller.clone(),
            &ns,
            &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "agent-install.openshift.io",
                "v1beta1",
                "InfraEnv",
            )),
        );
        assert!(infraenvs.list(&Default::default()).await.expect("the controller lists InfraEnvs").items.is_empty());
        // deploy/rbac.yaml gives the controller no right to create Namespaces.
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(controller);
        let refused = namespaces
            .create(&Default::default(), &serde_json::from_value(json!({"metadata": {"name": "nope"}})).unwrap())
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("forbidden"), "{refused}");
    }
}
