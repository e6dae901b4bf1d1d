//! The proof that `bootstream serve` is a Kubernetes API server for its kinds: the real `kubectl`
//! drives a real server through `KUBECONFIG=<data dir>/kubeconfig`, exactly as a hub user would,
//! verb by verb (discovery and explain, create and apply, get in every output, watch, describe, edit,
//! patch, label, annotate, wait, delete), and so do kube-rs and Debian's Python client for list and
//! watch. Outputs are compared exactly where a user or a script reads them. `differential` runs the
//! same steps against the real kube-apiserver (`bootstream::testkit::realhub`) too and compares the
//! answers of both.
//!
//! Each test starts its own server (nextest runs each test in a process of its own) and works in
//! namespaces of its own. kubectl is the machine's (`/usr/bin/kubectl`: gcloud's dispatcher runs the
//! kubectl matching the server's minor version), the Python client `python3-kubernetes` (Debian's,
//! installed by `.ci/test`); a test missing either fails saying so.

mod auth_and_discovery;
mod clients;
mod differential;
mod get_and_watch;
mod lifecycle;
mod modify;
mod write;

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::Server;

/// The real kubectl, or a failure saying where it is expected.
pub fn kubectl_binary() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join("kubectl")).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin/kubectl")])
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "kubectl is not installed: these tests drive the real kubectl (on the project's machines it is \
             /usr/bin/kubectl, from the `kubectl` package of the Google Cloud CLI; any kubectl 1.32 on PATH will do)"
        )
    })
}

/// A `bootstream serve` and the kubectl of its user.
pub struct Kubectl {
    pub server: Server,
    /// kubectl's home and temporary directory: its discovery cache and the copies `edit` and `diff`
    /// leave live here, not in the invoking user's.
    home: tempfile::TempDir,
}

impl Kubectl {
    /// `bootstream serve` with unsigned image URLs (so that agent-API helpers can name `/byid/` paths).
    pub fn start() -> Kubectl {
        Kubectl::on(Server::start(&[]))
    }

    /// `bootstream serve` exactly as a user starts it (signed image URLs).
    pub fn start_as_user() -> Kubectl {
        Kubectl::on(Server::start_signed(&[]))
    }

    pub fn on(server: Server) -> Kubectl {
        Kubectl { server, home: tempfile::tempdir().unwrap() }
    }

    /// Kills the server and starts it again on its data directory (on new ports: `serve` writes the
    /// kubeconfig again).
    pub fn restart(self) -> Kubectl {
        let Kubectl { server, home } = self;
        let data_dir = server.kill();
        Kubectl { server: Server::spawn_signed_in(data_dir, &["--unsigned-image-urls"]), home }
    }

    /// The kubeconfig `serve` wrote.
    pub fn kubeconfig(&self) -> PathBuf {
        self.server.data_dir.path().join("kubeconfig")
    }

    /// A kubectl command with `KUBECONFIG` set to `kubeconfig`.
    pub fn command(&self, kubeconfig: &std::path::Path) -> Command {
        let mut command = Command::new(kubectl_binary());
        command
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", self.home.path())
            .env("TMPDIR", self.home.path())
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        command
    }

    /// kubectl with `args`, with `KUBECONFIG` set to `kubeconfig`.
    pub fn run_with(&self, kubeconfig: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = self
            .command(kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running kubectl: {e}"));
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(&self.kubeconfig(), args, None)
    }

    /// kubectl that must succeed: its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_in(args, None)
    }

    /// [`Kubectl::ok`] with `stdin` on standard input (`-f -`).
    pub fn ok_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run_with(&self.kubeconfig(), args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// kubectl that must fail: its standard error.
    pub fn fails(&self, args: &[&str]) -> String {
        self.fails_in(args, None)
    }

    pub fn fails_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run_with(&self.kubeconfig(), args, stdin);
        assert!(
            !out.status.success(),
            "kubectl {args:?} succeeded, expected a failure:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// `kubectl get KIND NAME -n NS -o json`.
    pub fn get_json(&self, kind: &str, ns: &str, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["get", kind, name, "-n", ns, "-o", "json"])).unwrap()
    }

    /// `kubectl get ... -o jsonpath=PATH`.
    pub fn jsonpath(&self, kind: &str, ns: &str, name: &str, path: &str) -> String {
        self.ok(&["get", kind, name, "-n", ns, "-o", &format!("jsonpath={path}")])
    }

    /// `kubectl create namespace NS`, then the pull secret of the assisted examples as `kubectl
    /// create secret generic` makes it (a protobuf body).
    pub fn namespace_with_pull_secret(&self, ns: &str) {
        assert_eq!(self.ok(&["create", "namespace", ns]), format!("namespace/{ns} created\n"));
        assert_eq!(
            self.ok(&[
                "create",
                "secret",
                "generic",
                "pull-secret",
                "-n",
                ns,
                &format!("--from-literal=.dockerconfigjson={PULL_SECRET}"),
                "--type=kubernetes.io/dockerconfigjson",
            ]),
            "secret/pull-secret created\n"
        );
    }
}

/// The pull secret of the assisted examples.
pub const PULL_SECRET: &str = r#"{"auths":{"cloud.openshift.com":{"auth":"dXNlcjpwYXNzd29yZAo=","email":"r@rr.com"}}}"#;

/// An InfraEnv document, as a user writes it.
pub fn infraenv(ns: &str, name: &str, extra_spec: &str) -> String {
    common::infraenv_yaml(ns, name, extra_spec)
}

/// Waits up to a minute for `check` to give a value.
pub fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An NMStateConfig for one host (its NIC `mac`), labelled `rack: r1`.
pub fn nmstateconfig(ns: &str, name: &str, mac: &str) -> String {
    format!(
        "apiVersion: agent-install.openshift.io/v1beta1\nkind: NMStateConfig\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    rack: r1\nspec:\n  config:\n    interfaces:\n    - name: eth0\n      type: ethernet\n      state: up\n      mac-address: {mac}\n      ipv4:\n        enabled: true\n        dhcp: true\n  interfaces:\n  - name: eth0\n    macAddress: {mac}\n"
    )
}
