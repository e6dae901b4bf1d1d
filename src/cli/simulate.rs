//! A fleet of simulated discovery agents: each host registers into an InfraEnv, sends its inventory,
//! polls for steps and runs them the way the real agent does (an `exit` restarts it, `install` walks
//! the installation stages until the host reboots into its new OS, `download-boot-artifacts` and
//! `reboot-for-reclaim` bring a reclaimed node back into discovery). An installed host whose agent
//! has been unbound and waits for a reboot (`unbinding-pending-user-action`) is rebooted into
//! discovery, as a person or the BMAC would.
//!
//! Used by `bootstream simulate` and by the fleet benchmark, which drives bind/unbind through the API.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};
use sha2::Digest;

use crate::keylocks::Locked as _;

#[derive(clap::Args, Debug, Clone)]
pub struct SimulateArgs {
    /// The server the machines boot from and report to (images and the agent API).
    #[arg(long, env = "BOOTSTREAM_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// Kubeconfig of the API the InfraEnv is read from, as `serve` writes it (DATA_DIR/kubeconfig;
    /// inline data only). Default: ./bootstream-data/kubeconfig if there is one, else --server.
    #[arg(long, env = "BOOTSTREAM_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The InfraEnv the hosts boot from, as NAMESPACE/NAME.
    #[arg(long)]
    pub infraenv: String,
    #[arg(long, default_value_t = 10)]
    pub hosts: usize,
    /// Multiplies the intervals the server asks for (next_instruction_seconds); 1 is real time.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    pub duration: Option<u64>,
    /// Seed for host ids, so that two runs with the same seed simulate the same machines.
    #[arg(long, default_value = "bootstream-sim")]
    pub seed: String,
    /// Seconds between installation stages (real time).
    #[arg(long, default_value_t = 0.0)]
    pub stage_seconds: f64,
    /// Seconds between checks whether an installed machine should be rebooted into discovery (real time).
    #[arg(long, default_value_t = 20.0)]
    pub reboot_check_seconds: f64,
    /// Seconds over which the machines power on (real time): each first registers after its own delay
    /// within it. 0 boots them all at once.
    #[arg(long, default_value_t = 0.0)]
    pub boot_seconds: f64,
    /// PEM CA bundle the machines trust for --server besides the system's, as a host's agent trusts the
    /// CA its discovery image carries (`serve --service-ca-cert`).
    #[arg(long, value_name = "PATH")]
    pub cacert: Option<std::path::PathBuf>,
}

/// Timing of a simulated fleet.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub time_scale: f64,
    pub stage_seconds: f64,
    pub reboot_check_seconds: f64,
    /// Seconds over which the fleet powers on (real time; see [`SimulateArgs::boot_seconds`]).
    pub boot_seconds: f64,
}

/// Latency samples per API operation, in microseconds, and per phase of a run (named by whoever
/// drives the fleet: the benchmark names its lifecycle phases).
#[derive(Default)]
pub struct Stats {
    samples: Mutex<HashMap<&'static str, Vec<u32>>>,
    phase: Mutex<&'static str>,
    by_phase: Mutex<HashMap<&'static str, Vec<u32>>>,
    errors: Mutex<HashMap<String, u64>>,
    /// When the first phase began: the timeline counts seconds from there.
    epoch: std::sync::OnceLock<Instant>,
    /// Per second since `epoch`: (calls that ended, calls over 50 ms, slowest call in µs).
    seconds: Mutex<Vec<(u32, u32, u32)>>,
}

/// A call slower than this counts as slow in the timeline (the fleet benchmark's p99 goal; the server's
/// histogram bucket `le="0.05"` counts the same way).
/// The stages a simulated installation reports, in order: the ones assisted-installer reports for a
/// worker, a subset of [`crate::hosts::machine::STAGES`].
pub const INSTALL_STAGES: [&str; 7] =
    ["Starting installation", "Installing", "Writing image to disk", "Rebooting", "Configuring", "Joined", "Done"];

pub const SLOW_CALL: Duration = Duration::from_millis(50);

impl Stats {
    fn record(&self, op: &'static str, took: Duration) {
        let us = took.as_micros().min(u32::MAX as u128) as u32;
        self.samples.locked().entry(op).or_default().push(us);
        let phase = *self.phase.locked();
        self.by_phase.locked().entry(phase).or_default().push(us);
        let second = self.epoch.get_or_init(Instant::now).elapsed().as_secs() as usize;
        let mut seconds = self.seconds.locked();
        if seconds.len() <= second {
            seconds.resize(second + 1, (0, 0, 0));
        }
        let s = &mut seconds[second];
        s.0 += 1;
        s.1 += u32::from(took > SLOW_CALL);
        s.2 = s.2.max(us);
    }
    /// Per second since the first phase began: (calls that ended, calls over [`SLOW_CALL`], slowest ms).
    pub fn timeline(&self) -> Vec<(u32, u32, f64)> {
        let seconds = self.seconds.locked();
        seconds.iter().map(|&(n, slow, max)| (n, slow, max as f64 / 1000.0)).collect()
    }
    /// Calls that end from now on count toward `phase`.
    pub fn set_phase(&self, phase: &'static str) {
        self.epoch.get_or_init(Instant::now);
        *self.phase.locked() = phase;
    }
    /// (phase, count, p50 ms, p99 ms, max ms) of all operations, in the order the phases began.
    pub fn phase_summary(&self, order: &[&'static str]) -> Vec<(String, usize, f64, f64, f64)> {
        let by_phase = self.by_phase.locked();
        order
            .iter()
            .filter_map(|phase| {
                let mut v = by_phase.get(phase)?.clone();
                let (n, p50, p99, max) = percentiles(&mut v);
                Some((phase.to_string(), n, p50, p99, max))
            })
            .collect()
    }
    fn error(&self, what: String) {
        *self.errors.locked().entry(what).or_default() += 1;
    }
    /// (operation, count, p50 ms, p99 ms, max ms), all operations together last.
    pub fn summary(&self) -> Vec<(String, usize, f64, f64, f64)> {
        let samples = self.samples.locked();
        let mut all: Vec<u32> = Vec::new();
        let mut out = Vec::new();
        let mut ops: Vec<_> = samples.keys().copied().collect();
        ops.sort();
        for op in ops {
            let mut v = samples[op].clone();
            all.extend_from_slice(&v);
            let (n, p50, p99, max) = percentiles(&mut v);
            out.push((op.to_string(), n, p50, p99, max));
        }
        let (n, p50, p99, max) = percentiles(&mut all);
        out.push(("all".to_string(), n, p50, p99, max));
        out
    }
    pub fn errors(&self) -> HashMap<String, u64> {
        self.errors.locked().clone()
    }
}

/// (count, p50 ms, p99 ms, max ms) of samples in microseconds.
fn percentiles(v: &mut [u32]) -> (usize, f64, f64, f64) {
    v.sort_unstable();
    if v.is_empty() {
        return (0, 0.0, 0.0, 0.0);
    }
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize] as f64 / 1000.0;
    (v.len(), at(0.5), at(0.99), *v.last().unwrap() as f64 / 1000.0)
}

/// What a fleet needs to reach the agent API of one InfraEnv.
#[derive(Clone)]
pub struct Target {
    pub server: String,
    pub infra_env_id: String,
    pub token: String,
}

impl Target {
    /// Finds the InfraEnv (through the resource API, with `api_token`) and reads the agent token from
    /// its discovery Ignition (at the signed URL of its status), as a booted host would.
    pub async fn discover(
        client: &reqwest::Client,
        server: &str,
        infraenv: &str,
        api_token: Option<&str>,
    ) -> anyhow::Result<Target> {
        Target::discover_at(client, server, server, infraenv, api_token).await
    }

    /// [`Target::discover`] where the InfraEnv is read from a Kubernetes API server (`api`) other
    /// than the bootstream that serves the images and the agent API (`server`), as with
    /// `bootstream controller` on a hub.
    pub async fn discover_at(
        client: &reqwest::Client,
        api: &str,
        server: &str,
        infraenv: &str,
        api_token: Option<&str>,
    ) -> anyhow::Result<Target> {
        Target::discover_through(client, client, api, server, infraenv, api_token).await
    }

    /// [`Target::discover_at`] with a client of its own for the API (`api_client`: its CA, its
    /// token).
    pub async fn discover_through(
        api_client: &reqwest::Client,
        client: &reqwest::Client,
        api: &str,
        server: &str,
        infraenv: &str,
        api_token: Option<&str>,
    ) -> anyhow::Result<Target> {
        let server = server.trim_end_matches('/').to_string();
        let api = api.trim_end_matches('/');
        let (ns, name) = infraenv.split_once('/').context("--infraenv must be NAMESPACE/NAME")?;
        let mut get =
            api_client.get(format!("{api}/apis/agent-install.openshift.io/v1beta1/namespaces/{ns}/infraenvs/{name}"));
        if let Some(t) = api_token {
            get = get.bearer_auth(t);
        }
        let ie: Value =
            get.send().await?.error_for_status().with_context(|| format!("InfraEnv {infraenv}"))?.json().await?;
        let id = ie["metadata"]["uid"].as_str().context("InfraEnv without uid")?.to_string();
        // The status URL's path and query (signed when the server signs image URLs), on `server`.
        let ign_path = ie["status"]["bootArtifacts"]["discoveryIgnitionURL"]
            .as_str()
            .and_then(|u| u.split_once("://"))
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(_, path)| format!("/{path}"))
            .unwrap_or_else(|| {
                format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign")
            });
        let ign: Value = client
            .get(format!("{server}{ign_path}"))
            .send()
            .await?
            .error_for_status()
            .context("discovery ignition")?
            .json()
            .await?;
        let token = agent_token(&ign).context("no PULL_SECRET_TOKEN in the discovery ignition's agent.service")?;
        Ok(Target { server, infra_env_id: id, token })
    }
}

/// The `PULL_SECRET_TOKEN` of the agent unit in a discovery Ignition.
pub fn agent_token(ign: &Value) -> Option<String> {
    let units = ign["systemd"]["units"].as_array()?;
    let unit = units.iter().find(|u| u["name"] == "agent.service")?;
    let contents = unit["contents"].as_str()?;
    let at = contents.find("PULL_SECRET_TOKEN=")? + "PULL_SECRET_TOKEN=".len();
    let token: String = contents[at..].chars().take_while(|c| !c.is_whitespace() && *c != '"').collect();
    (!token.is_empty()).then_some(token)
}

/// A deterministic host id for machine `index` of a fleet.
pub fn host_id(seed: &str, index: usize) -> String {
    let digest = sha2::Sha256::digest(format!("{seed}/{index}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(b).into_uuid().to_string()
}

/// One simulated machine.
pub struct Machine {
    pub index: usize,
    pub id: String,
    client: reqwest::Client,
    target: Target,
    stats: Arc<Stats>,
    timing: Timing,
    /// The inventory step's output, the same at every reply, already encoded as the JSON string the
    /// reply carries (made once: the simulator shares the machine's CPU with the server it loads).
    inventory_json: String,
}

/// What woke an installed machine.
enum Wake {
    /// Rebooted into discovery (by a person or a BMC).
    Reboot,
    /// The reclaim agent started on it.
    Reclaim,
}

enum Next {
    /// The agent process restarts: register again.
    Register,
    /// The machine runs its installed OS; no agent until someone reboots it into discovery.
    Installed,
}

impl Machine {
    pub fn new(
        index: usize,
        id: String,
        client: reqwest::Client,
        target: Target,
        stats: Arc<Stats>,
        timing: Timing,
    ) -> Machine {
        Machine {
            inventory_json: serde_json::to_string(&crate::hosts::simulated::inventory(index).to_string())
                .expect("a string encodes"),
            index,
            id,
            client,
            target,
            stats,
            timing,
        }
    }

    fn url(&self, rest: &str) -> String {
        format!("{}/api/assisted-install/v2/infra-envs/{}/hosts{rest}", self.target.server, self.target.infra_env_id)
    }

    async fn call(&self, op: &'static str, req: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let start = Instant::now();
        let resp = req.header("X-Secret-Key", &self.target.token).send().await;
        self.stats.record(op, start.elapsed());
        let resp = resp.with_context(|| format!("{op}: request failed"))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            self.stats.error(format!("{op}: {status}"));
            return Err(anyhow::Error::new(StatusError { status }).context(format!("{op}: {status}: {body}")));
        }
        Ok(resp)
    }

    async fn sleep(&self, seconds: f64) {
        tokio::time::sleep(Duration::from_secs_f64((seconds * self.timing.time_scale).max(0.01))).await;
    }

    /// Runs the machine until `stop` is set.
    pub async fn run(&self, stop: Arc<AtomicBool>) {
        if self.timing.boot_seconds > 0.0 {
            // Firmware and boot take different times on each machine: its own point in the window,
            // from its (random) id.
            let fraction = u32::from_str_radix(&self.id[..8], 16).unwrap_or(0) as f64 / u32::MAX as f64;
            tokio::time::sleep(Duration::from_secs_f64(self.timing.boot_seconds * fraction)).await;
        }
        while !stop.load(Ordering::Relaxed) {
            let result = match self.boot_discovery(&stop).await {
                Ok(Next::Register) => Ok(()),
                Ok(Next::Installed) => match self.wait_for_reboot(&stop).await {
                    Ok(Wake::Reboot) => Ok(()),
                    // The reclaim agent on the node follows the steps until it reboots into discovery.
                    Ok(Wake::Reclaim) => self.follow_steps(&stop).await.map(|_| ()),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                tracing::debug!(host = %self.id, "{e:#}");
                self.sleep(5.0).await;
            }
        }
    }

    /// The discovery agent: register, then follow the steps until told to exit or installed.
    async fn boot_discovery(&self, stop: &AtomicBool) -> anyhow::Result<Next> {
        self.call(
            "register",
            self.client.post(self.url("")).json(&json!({"host_id": self.id, "discovery_agent_version": "simulated"})),
        )
        .await?;
        self.follow_steps(stop).await
    }

    /// The next-step runner: asks for instructions and answers each step, until told to exit. As the
    /// real agent's runner does, it runs the steps side by side and waits for the next request from
    /// the moment the instructions arrived, not from the moment its replies were answered.
    ///
    /// A service it cannot reach, or that fails (a restart, a 5xx), is asked again after a while, as
    /// the agent's next-step runner does: the agent process does not restart for it. (Registering
    /// again would tell the service the machine rebooted, which fails a host being installed.)
    async fn follow_steps(&self, stop: &AtomicBool) -> anyhow::Result<Next> {
        while !stop.load(Ordering::Relaxed) {
            let steps: Value = match self.instructions().await {
                Ok(steps) => steps,
                Err(e) if is_transient(&e) => {
                    tracing::debug!(host = %self.id, "{e:#}; asking again");
                    self.sleep(5.0).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let received = tokio::time::Instant::now();
            let mut replies = Vec::new();
            for step in steps["instructions"].as_array().cloned().unwrap_or_default() {
                let step_type = step["step_type"].as_str().unwrap_or("").to_string();
                let step_id = step["step_id"].as_str().unwrap_or("").to_string();
                let output = match step_type.as_str() {
                    "inventory" => self.inventory_json.clone(),
                    "ntp-synchronizer" => r#""{\"ntp_sources\":[]}""#.to_string(),
                    "install" => {
                        let args: Value =
                            step["args"][0].as_str().and_then(|a| serde_json::from_str(a).ok()).unwrap_or_default();
                        self.install(&args).await?;
                        return Ok(Next::Installed);
                    }
                    // The node reboots into the discovery image.
                    "reboot-for-reclaim" => return Ok(Next::Register),
                    _ => r#""""#.to_string(),
                };
                replies.push(async move { self.reply(&step_type, &step_id, 0, output).await });
            }
            for result in futures_util::future::join_all(replies).await {
                match result {
                    // The step is asked again at the next poll.
                    Err(e) if is_transient(&e) => tracing::debug!(host = %self.id, "{e:#}"),
                    other => other?,
                }
            }
            if steps["post_step_action"] == "exit" {
                return Ok(Next::Register);
            }
            let interval = steps["next_instruction_seconds"].as_f64().unwrap_or(60.0) * self.timing.time_scale;
            tokio::time::sleep_until(received + Duration::from_secs_f64(interval.max(0.01))).await;
        }
        Ok(Next::Register)
    }

    async fn instructions(&self) -> anyhow::Result<Value> {
        let resp = self.call("instructions", self.client.get(self.url(&format!("/{}/instructions", self.id)))).await?;
        Ok(resp.json().await?)
    }

    /// Replies to a step; `output_json` is the output already encoded as a JSON string.
    async fn reply(&self, step_type: &str, step_id: &str, exit_code: i32, output_json: String) -> anyhow::Result<()> {
        let quoted = |s: &str| serde_json::to_string(s).expect("a string encodes");
        let body = format!(
            r#"{{"step_type":{},"step_id":{},"exit_code":{exit_code},"output":{output_json}}}"#,
            quoted(step_type),
            quoted(step_id)
        );
        self.call(
            "step-reply",
            self.client
                .post(self.url(&format!("/{}/instructions", self.id)))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body),
        )
        .await
        .map(|_| ())
    }

    /// Writes the image and reboots; the installed node then reports the remaining stages (as the
    /// assisted-installer controller does for it). The bootstrap host's installer, which holds the
    /// new cluster's admin credentials, reports them before the host reboots.
    async fn install(&self, step: &Value) -> anyhow::Result<()> {
        for stage in INSTALL_STAGES {
            if self.timing.stage_seconds > 0.0 {
                tokio::time::sleep(Duration::from_secs_f64(self.timing.stage_seconds)).await;
            }
            // The installer runs from the installed disk, not from the discovery agent: when the
            // service cannot be reached it retries the report rather than starting over (a fresh
            // registration mid-installation would put the host in error, as a rebooted host).
            self.as_installer(|| async {
                self.call(
                    "progress",
                    self.client
                        .put(self.url(&format!("/{}/progress", self.id)))
                        .json(&json!({"current_stage": stage, "progress_info": ""})),
                )
                .await
                .map(drop)
            })
            .await?;
            if stage == "Writing image to disk"
                && step["role"] == "bootstrap"
                && let Some(cluster_id) = step["cluster_id"].as_str()
            {
                for (file, body) in [
                    ("kubeconfig", simulated_kubeconfig(cluster_id)),
                    ("kubeadmin-password", simulated_password(cluster_id)),
                ] {
                    self.as_installer(|| self.upload_credential(cluster_id, file, body.clone())).await?;
                }
            }
        }
        // The installer uploads the host's logs when it is done (`V2UploadLogs`), retrying as above.
        self.as_installer(|| async {
            let host: Value =
                self.call("host", self.client.get(self.url(&format!("/{}", self.id)))).await?.json().await?;
            if let Some(cluster_id) = host["cluster_id"].as_str() {
                self.upload_logs(cluster_id).await?;
            }
            Ok(())
        })
        .await
    }

    /// Runs `call` until it succeeds, every 0.5 s for up to a minute, as the installer retries its
    /// reports while the service cannot be reached.
    async fn as_installer<F, Fut>(&self, call: F) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        const RETRIES: u32 = 120;
        let mut attempts = 0;
        loop {
            match call().await {
                Ok(()) => return Ok(()),
                Err(e) if attempts < RETRIES => {
                    attempts += 1;
                    tracing::debug!(host = %self.id, "{e:#}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Reports one of the cluster's admin credentials (`kubeconfig`, `kubeadmin-password`).
    async fn upload_credential(&self, cluster_id: &str, file: &str, body: String) -> anyhow::Result<()> {
        let url = format!(
            "{}/api/assisted-install/v2/clusters/{cluster_id}/uploads/credentials?file_name={file}&infra_env_id={}&host_id={}",
            self.target.server, self.target.infra_env_id, self.id
        );
        self.call("credentials", self.client.put(url).header("connection", "close").body(body)).await.map(drop)
    }

    /// Uploads this machine's logs (a gzip-compressed text) as multipart/form-data.
    async fn upload_logs(&self, cluster_id: &str) -> anyhow::Result<()> {
        const BOUNDARY: &str = "bootstream-simulated-logs";
        let mut body = format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"upfile\"; filename=\"logs.gz\"\r\n\
             Content-Type: application/gzip\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&simulated_logs(&self.id));
        body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
        let url = format!(
            "{}/api/assisted-install/v2/clusters/{cluster_id}/logs?logs_type=host&infra_env_id={}&host_id={}",
            self.target.server, self.target.infra_env_id, self.id
        );
        // The installer is a process of its own that uploads once: its connection is not one the
        // (pooled) agent connections of other simulated machines should go on using.
        let req = self
            .client
            .post(url)
            .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
            .header("connection", "close")
            .body(body);
        self.call("logs", req).await.map(|_| ())
    }

    /// An installed machine: rebooted into discovery once its host waits for that, or running the
    /// reclaim agent once bootstream started one on it.
    async fn wait_for_reboot(&self, stop: &AtomicBool) -> anyhow::Result<Wake> {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs_f64(self.timing.reboot_check_seconds.max(0.01))).await;
            // The machine runs its installed OS: a check that fails (the service restarting) is made
            // again at the next round; it does not reboot the machine.
            let resp = match self
                .client
                .get(self.url(&format!("/{}", self.id)))
                .header("X-Secret-Key", &self.target.token)
                .send()
                .await
            {
                Ok(resp) => resp,
                Err(e) => {
                    tracing::debug!(host = %self.id, "reboot check: {e}");
                    continue;
                }
            };
            if resp.status() == reqwest::StatusCode::NOT_FOUND {
                return Ok(Wake::Reboot);
            }
            let Ok(host) = resp.json::<Value>().await else { continue };
            match host["status"].as_str() {
                Some("unbinding-pending-user-action") => return Ok(Wake::Reboot),
                Some("reclaiming" | "reclaiming-rebooting") => return Ok(Wake::Reclaim),
                _ => {}
            }
        }
        Ok(Wake::Reboot)
    }
}

/// An agent API answer that is not a success.
#[derive(Debug, thiserror::Error)]
#[error("HTTP {status}")]
struct StatusError {
    status: reqwest::StatusCode,
}

/// Whether a failed agent API call is worth repeating as it is: the service could not be reached or
/// answered 5xx (a restart, an overload), as opposed to an answer about the host (404, 401, 409...).
fn is_transient(e: &anyhow::Error) -> bool {
    match e.downcast_ref::<StatusError>() {
        Some(s) => s.status.is_server_error(),
        None => e.downcast_ref::<reqwest::Error>().is_some(),
    }
}

/// The admin kubeconfig of a simulated cluster. Its API server is a loopback port no one serves,
/// so that whatever tries to reach the cluster through it (a reclaim, a spoke clean-up) is refused
/// at once and falls back as it does for an unreachable cluster.
pub fn simulated_kubeconfig(cluster_id: &str) -> String {
    let token = hex::encode(&sha2::Sha256::digest(format!("token/{cluster_id}").as_bytes())[..16]);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster_id}\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: admin\n  context:\n    cluster: {cluster_id}\n    user: admin\ncurrent-context: admin\n"
    )
}

/// The kubeadmin password of a simulated cluster, in the installer's form (four groups of five).
pub fn simulated_password(cluster_id: &str) -> String {
    let alphabet = b"23456789abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ";
    let digest = sha2::Sha256::digest(format!("password/{cluster_id}").as_bytes());
    let chars: Vec<char> = digest.iter().take(20).map(|b| alphabet[*b as usize % alphabet.len()] as char).collect();
    chars.chunks(5).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join("-")
}

/// The logs a simulated host uploads: a gzip-compressed line naming the host.
pub fn simulated_logs(host_id: &str) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = writeln!(gz, "simulated installation logs of host {host_id}");
    gz.finish().unwrap_or_default()
}

/// A client suited to many concurrent agents on one server.
pub fn client() -> reqwest::Client {
    client_for(1024)
}

/// A client for `machines` agents: as many keep-alive connections as machines, as that many hosts
/// hold, one each. A connection more is opened when an agent's next call comes before its last
/// connection is back in the pool; without this cap such spares pile up (two connections per agent
/// at 10,000 agents, past the server's connection limit).
fn client_for(machines: usize) -> reqwest::Client {
    client_builder(machines).build().expect("HTTP client")
}

fn client_builder(machines: usize) -> reqwest::ClientBuilder {
    // The process may not have chosen a TLS provider yet (benchmarks and tests call this directly).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().pool_max_idle_per_host(machines.max(1)).timeout(Duration::from_secs(30))
}

/// [`client_for`] trusting the CA certificates in the PEM file `cacert` too.
fn client_trusting(cacert: &std::path::Path, machines: usize) -> anyhow::Result<reqwest::Client> {
    let pem = std::fs::read(cacert).with_context(|| format!("reading --cacert {}", cacert.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .with_context(|| format!("--cacert {}: not PEM certificates", cacert.display()))?;
    anyhow::ensure!(!certs.is_empty(), "--cacert {}: no certificate in it", cacert.display());
    Ok(client_builder(machines).tls_certs_merge(certs).build()?)
}

/// Starts `hosts` machines; returns their tasks.
pub fn start_fleet(
    target: &Target,
    seed: &str,
    hosts: std::ops::Range<usize>,
    timing: Timing,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    start_fleet_with(&client_for(hosts.len()), target, seed, hosts, timing, stats, stop)
}

/// Starts `hosts` machines talking to the agent API through `client` (one from [`client`], which may trust
/// more CAs); returns their tasks.
pub fn start_fleet_with(
    client: &reqwest::Client,
    target: &Target,
    seed: &str,
    hosts: std::ops::Range<usize>,
    timing: Timing,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    hosts
        .map(|i| {
            let m = Machine::new(i, host_id(seed, i), client.clone(), target.clone(), stats.clone(), timing);
            let stop = stop.clone();
            tokio::spawn(async move { m.run(stop).await })
        })
        .collect()
}

/// The API the InfraEnv is read from.
pub struct Api {
    pub server: String,
    /// Trusts the API's CA.
    pub http: reqwest::Client,
    pub token: Option<String>,
}

pub async fn run(args: SimulateArgs, api: Api) -> anyhow::Result<std::process::ExitCode> {
    let client = match &args.cacert {
        Some(path) => client_trusting(path, args.hosts)?,
        None => client_for(args.hosts),
    };
    let target =
        Target::discover_through(&api.http, &client, &api.server, &args.server, &args.infraenv, api.token.as_deref())
            .await?;
    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let timing = Timing {
        time_scale: args.time_scale,
        stage_seconds: args.stage_seconds,
        reboot_check_seconds: args.reboot_check_seconds,
        boot_seconds: args.boot_seconds,
    };
    let tasks = start_fleet_with(&client, &target, &args.seed, 0..args.hosts, timing, stats.clone(), stop.clone());
    eprintln!("{} simulated hosts booting from {} ({})", args.hosts, args.infraenv, target.infra_env_id);
    match args.duration {
        Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    println!("{:<14} {:>9} {:>9} {:>9} {:>9}", "OPERATION", "COUNT", "P50 MS", "P99 MS", "MAX MS");
    for (op, n, p50, p99, max) in stats.summary() {
        println!("{op:<14} {n:>9} {p50:>9.2} {p99:>9.2} {max:>9.2}");
    }
    for (e, n) in stats.errors() {
        println!("error {e}: {n}");
    }
    Ok(std::process::ExitCode::SUCCESS)
}
