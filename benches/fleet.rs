//! The fleet benchmark: N simulated hosts through register → known-unbound → bound → installed →
//! cluster deleted (unbound) → rebooted → known-unbound, against a release `bootstream serve`.
//!
//!     cargo bench --bench fleet -- [HOSTS] [HOSTS_PER_CLUSTER] [BOOT_SECONDS] [STAGE_SECONDS]
//!
//! BOOT_SECONDS (default 0) spreads the machines' first boot over that many seconds; STAGE_SECONDS
//! (default 0) is the time between a host's installation stages. `BOOTSTREAM_BIN=path` measures that
//! server binary instead of this checkout's.
//!
//! Prints the time of each phase, agent API latency percentiles (measured by the simulated agents)
//! and the server's peak RSS (VmHWM).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bootstream::simulate::{self, Stats, Target, Timing};
use serde_json::{Value, json};

const NS: &str = "bench";
/// The lifecycle phases, as the latency summary names them.
const PHASES: [&str; 3] = ["register", "bind-install", "unbind-reboot"];

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let hosts: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let per_cluster: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let boot_seconds: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let stage_seconds: f64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(hosts, per_cluster, boot_seconds, stage_seconds))
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat (state, field 3, comes first after the name);
    // clock ticks are 100 Hz.
    (ticks(11) + ticks(12)) / 100.0
}

/// The server, killed however the benchmark ends (an early error must not leave it running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_peak_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

async fn put(client: &reqwest::Client, url: String, doc: Value) -> anyhow::Result<()> {
    let r = client.put(url).json(&doc).send().await?;
    anyhow::ensure!(r.status().is_success(), "{}", r.text().await?);
    Ok(())
}

/// The parts of an Agent the benchmark looks at. Deserializing only these skips the rest of each
/// Agent (its inventory, twice) without building it: the benchmark shares the two cores with the
/// server it measures.
#[derive(serde::Deserialize)]
struct AgentList {
    items: Vec<AgentView>,
}

#[derive(serde::Deserialize)]
struct AgentView {
    metadata: NameView,
    #[serde(default)]
    spec: Option<SpecView>,
    #[serde(default)]
    status: Option<StatusView>,
}

#[derive(serde::Deserialize)]
struct NameView {
    name: String,
}

#[derive(serde::Deserialize)]
struct SpecView {
    #[serde(default, rename = "clusterDeploymentName")]
    cluster_deployment_name: Option<Value>,
}

#[derive(serde::Deserialize)]
struct StatusView {
    #[serde(default, rename = "debugInfo")]
    debug_info: Option<DebugInfoView>,
}

#[derive(serde::Deserialize)]
struct DebugInfoView {
    #[serde(default)]
    state: String,
}

/// The Agents, each as `{metadata.name, spec.clusterDeploymentName, status.debugInfo.state}`.
async fn agents(client: &reqwest::Client, server: &str) -> anyhow::Result<Vec<Value>> {
    let body = client
        .get(format!("{server}/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/agents"))
        .send()
        .await?
        .bytes()
        .await?;
    let list: AgentList = serde_json::from_slice(&body)?;
    Ok(list
        .items
        .into_iter()
        .map(|a| {
            let mut spec = json!({});
            if let Some(cd) = a.spec.and_then(|s| s.cluster_deployment_name).filter(|c| !c.is_null()) {
                spec["clusterDeploymentName"] = cd;
            }
            let state = a.status.and_then(|s| s.debug_info).map(|d| d.state).unwrap_or_default();
            json!({"metadata": {"name": a.metadata.name}, "spec": spec, "status": {"debugInfo": {"state": state}}})
        })
        .collect())
}

fn state(a: &Value) -> &str {
    a["status"]["debugInfo"]["state"].as_str().unwrap_or("")
}

/// Hosts by state, from the server's `/metrics` (cheap to poll, unlike the list of Agents).
async fn host_counts(
    client: &reqwest::Client,
    server: &str,
) -> anyhow::Result<std::collections::HashMap<String, usize>> {
    let text = client.get(format!("{server}/metrics")).send().await?.text().await?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("bootstream_hosts{status=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(state, n)| Some((state.to_string(), n.trim().parse().ok()?)))
        .collect())
}

/// Waits until `state` holds `hosts` hosts, then until the Agents say so too (`done`), and returns them.
async fn wait(
    client: &reqwest::Client,
    server: &str,
    state: &str,
    hosts: usize,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(1200);
    while host_counts(client, server).await?.get(state).copied().unwrap_or(0) < hosts {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {hosts} hosts {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        let list = agents(client, server).await?;
        if done(&list) {
            return Ok(list);
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for the Agents to be {state}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn run(hosts: usize, per_cluster: usize, boot_seconds: f64, stage_seconds: f64) -> anyhow::Result<()> {
    // BOOTSTREAM_BIN runs another build (an earlier commit's) under the same load, for side-by-side runs.
    let bin = std::env::var("BOOTSTREAM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bootstream").to_string());
    let dir = tempfile::tempdir()?;
    let mut child = KillOnDrop(
        Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line)?;
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().to_string();
    let server = format!("http://{addr}");
    let client = simulate::client();
    while client.get(format!("{server}/ready")).send().await.map(|r| !r.status().is_success()).unwrap_or(true) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ps = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-secret", "namespace": NS},
                    "stringData": {".dockerconfigjson": "{\"auths\":{\"x\":{\"auth\":\"dTpw\"}}}"}});
    put(&client, format!("{server}/api/v1/namespaces/{NS}/secrets/pull-secret"), ps).await?;
    let ie = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                    "metadata": {"name": "pool", "namespace": NS}, "spec": {"pullSecretRef": {"name": "pull-secret"}}});
    put(&client, format!("{server}/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/infraenvs/pool"), ie)
        .await?;
    let target = Target::discover(&client, &server, &format!("{NS}/pool")).await?;

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Agents poll every 60 s × 0.05 = 3 s; a person checks installed machines every 5 s.
    let timing = Timing { time_scale: 0.05, stage_seconds, reboot_check_seconds: 5.0, boot_seconds };
    let start = Instant::now();
    stats.set_phase(PHASES[0]);
    let tasks = simulate::start_fleet(&target, "bench", 0..hosts, timing, stats.clone(), stop.clone());

    let list = wait(&client, &server, "known-unbound", hosts, |l| {
        l.len() == hosts && l.iter().all(|a| state(a) == "known-unbound")
    })
    .await?;
    let t_pool = start.elapsed();
    stats.set_phase(PHASES[1]);

    let clusters = hosts.div_ceil(per_cluster);
    for c in 0..clusters {
        let name = format!("c{c}");
        let cd = json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"baseDomain": "example.com", "clusterName": name, "platform": {"agentBareMetal": {}},
                     "clusterInstallRef": {"group": "extensions.hive.openshift.io", "kind": "AgentClusterInstall", "name": name, "version": "v1beta1"}}});
        put(&client, format!("{server}/apis/hive.openshift.io/v1/namespaces/{NS}/clusterdeployments/{name}"), cd)
            .await?;
        let n = per_cluster.min(hosts - c * per_cluster);
        let aci = json!({"apiVersion": "extensions.hive.openshift.io/v1beta1", "kind": "AgentClusterInstall",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"clusterDeploymentRef": {"name": name}, "networking": {},
                     "provisionRequirements": {"controlPlaneAgents": 3.min(n), "workerAgents": n.saturating_sub(3)}}});
        put(
            &client,
            format!("{server}/apis/extensions.hive.openshift.io/v1beta1/namespaces/{NS}/agentclusterinstalls/{name}"),
            aci,
        )
        .await?;
    }
    let t_bind_start = start.elapsed();
    let names: Vec<String> = list.iter().map(|a| a["metadata"]["name"].as_str().unwrap().to_string()).collect();
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut binds = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let (client, server, n, sem) = (client.clone(), server.clone(), n.clone(), sem.clone());
        let cd = format!("c{}", i / per_cluster);
        binds.push(tokio::spawn(async move {
            let _p = sem.acquire().await;
            let patch = json!({"spec": {"approved": true, "clusterDeploymentName": {"name": cd, "namespace": NS}}});
            client
                .patch(format!("{server}/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/agents/{n}"))
                .header("content-type", "application/merge-patch+json")
                .body(patch.to_string())
                .send()
                .await
                .map(|r| r.status().is_success())
        }));
    }
    for b in binds {
        anyhow::ensure!(b.await?.unwrap_or(false), "a bind patch failed");
    }
    wait(&client, &server, "installed", hosts, |l| l.iter().filter(|a| state(a) == "installed").count() == hosts)
        .await?;
    let t_installed = start.elapsed();
    stats.set_phase(PHASES[2]);

    for c in 0..clusters {
        client
            .delete(format!("{server}/apis/hive.openshift.io/v1/namespaces/{NS}/clusterdeployments/c{c}"))
            .send()
            .await?;
    }
    wait(&client, &server, "known-unbound", hosts, |l| {
        l.len() == hosts
            && l.iter().all(|a| state(a) == "known-unbound" && a["spec"].get("clusterDeploymentName").is_none())
    })
    .await?;
    let t_done = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    let rss = rss_peak_mib(child.0.id());
    let server_cpu = cpu_seconds(&child.0.id().to_string());
    let agents_cpu = cpu_seconds("self");

    println!(
        "hosts {hosts}, {clusters} clusters of {per_cluster}, booted over {boot_seconds} s, {stage_seconds} s between install stages"
    );
    println!("register -> known-unbound        {:>8.1} s", t_pool.as_secs_f64());
    println!("bind -> installed                {:>8.1} s", (t_installed - t_bind_start).as_secs_f64());
    println!("cluster deleted -> known-unbound {:>8.1} s", (t_done - t_installed).as_secs_f64());
    println!("whole run                        {:>8.1} s", t_done.as_secs_f64());
    println!("server peak RSS                  {:>8.1} MiB", rss);
    println!("server CPU                       {:>8.1} s", server_cpu);
    println!("simulated agents CPU             {:>8.1} s", agents_cpu);
    println!("{:<14} {:>9} {:>9} {:>9} {:>9}", "OPERATION", "COUNT", "P50 MS", "P99 MS", "MAX MS");
    for (op, n, p50, p99, max) in stats.summary() {
        println!("{op:<14} {n:>9} {p50:>9.2} {p99:>9.2} {max:>9.2}");
    }
    println!("{:<14} {:>9} {:>9} {:>9} {:>9}", "PHASE", "CALLS", "P50 MS", "P99 MS", "MAX MS");
    for (phase, n, p50, p99, max) in stats.phase_summary(&PHASES) {
        println!("{phase:<14} {n:>9} {p50:>9.2} {p99:>9.2} {max:>9.2}");
    }
    for (e, n) in stats.errors() {
        println!("error {e}: {n}");
    }
    Ok(())
}
