//! `bootstream controller` as a process against the real Kubernetes hub
//! (`bootstream::testkit::realhub`), with what a pod of `deploy/controller.yaml` is given: a
//! kubeconfig for a token of the `bootstream-controller` ServiceAccount, the shared agent-auth and
//! URL-signing keys, a data folder. Its stdout lines arrive on a channel (the "listening" lines say
//! where it serves); its log (stderr) goes to a file the test reads.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bootstream::testkit::realhub::RealHub;

use super::BIN;

/// What the controller processes of one test share: a folder holding the kubeconfig, the keys.
pub struct ControllerFiles {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub agent_auth_key: PathBuf,
    pub url_signing_key: PathBuf,
}

impl ControllerFiles {
    /// A kubeconfig for a fresh token of the `bootstream-controller` ServiceAccount of `hub`, and the keys.
    pub async fn for_hub(hub: &RealHub) -> ControllerFiles {
        let dir = tempfile::tempdir().unwrap();
        let token = hub.service_account_token("bootstream-controller").await;
        let kubeconfig = dir.path().join("controller.kubeconfig");
        std::fs::write(&kubeconfig, hub.kubeconfig_for(&token)).unwrap();
        let agent_auth_key = dir.path().join("agent-auth.key");
        std::fs::write(&agent_auth_key, [42u8; 32]).unwrap();
        bootstream::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[]).unwrap();
        let url_signing_key = dir.path().join("url-signing.pem");
        ControllerFiles { dir, kubeconfig, agent_auth_key, url_signing_key }
    }

    /// The arguments every controller gets (`extra` adds to them): the kubeconfig and both keys.
    pub fn args(&self) -> Vec<String> {
        let s = |p: &Path| p.to_str().unwrap().to_string();
        vec![
            "controller".into(),
            "--kubeconfig".into(),
            s(&self.kubeconfig),
            "--agent-auth-key".into(),
            s(&self.agent_auth_key),
            "--url-signing-key".into(),
            s(&self.url_signing_key),
            "--base-url".into(),
            "http://bootstream.hub.example".into(),
        ]
    }
}

/// A running `bootstream controller`.
pub struct Controller {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
    _data_dir: tempfile::TempDir,
}

impl Controller {
    /// Starts `bootstream <args>` with a fresh data folder and `--listen 127.0.0.1:0`.
    pub fn start(args: &[String]) -> Controller {
        Controller::start_in(tempfile::tempdir().unwrap(), args)
    }

    /// [`Controller::start`] with `--data-dir` [`Controller::data_dir`] of `dir` (prepared by the test).
    pub fn start_in(dir: tempfile::TempDir, args: &[String]) -> Controller {
        let data_dir = dir;
        let log = data_dir.path().join("controller.log");
        let mut child = Command::new(BIN)
            .args(args)
            .arg("--data-dir")
            .arg(Controller::data_dir(data_dir.path()))
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "info")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawning bootstream controller");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Controller { child, lines, log, _data_dir: data_dir }
    }

    /// The controller's `--data-dir` in the folder `dir` of [`Controller::start_in`].
    pub fn data_dir(dir: &Path) -> PathBuf {
        dir.join("data")
    }

    /// The next stdout line containing `what`, within `within`; None if none came (or it exited).
    pub fn line(&self, what: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// The address (`host:port`) of the next "listening on SCHEME://ADDR ..." line containing `what`.
    pub fn listening(&self, what: &str, within: Duration) -> Option<String> {
        let line = self.line(what, within)?;
        Some(line.split("://").nth(1)?.split_whitespace().next()?.to_string())
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap()).into_owned()
    }

    /// How the process ended, if it did within `within`.
    pub fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops it as Kubernetes stops a pod (SIGTERM) and waits for it.
    pub fn terminate(&mut self) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.exited(Duration::from_secs(30)).expect("the controller stops within 30 s of SIGTERM")
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
