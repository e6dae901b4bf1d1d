//! The fleet benchmark: N simulated hosts through register → known-unbound → bound → installed →
//! cluster deleted (unbound) → rebooted → known-unbound, against a release `bootstream serve`.
//!
//!     cargo bench --bench fleet -- [HOSTS] [HOSTS_PER_CLUSTER] [BOOT_SECONDS] [STAGE_SECONDS]
//!
//! BOOT_SECONDS (default 0) spreads the machines' first boot over that many seconds; STAGE_SECONDS
//! (default 0) is the time between a host's installation stages. `BOOTSTREAM_BIN=path` measures that
//! server binary instead of this checkout's; the server reads its other settings from the environment
//! (`BOOTSTREAM_POLL_JITTER=0` measures it without jitter on the agents' polling interval).
//!
//! Prints the time of each phase, agent API latency percentiles (measured by the simulated agents)
//! and the server's peak RSS (VmHWM), then a timeline: per second, the agents' calls and slow calls
//! beside what the server's `/metrics` and `/proc` say it was doing (its own view of the same calls,
//! CPU, store writer, controller queue), to show what a latency spike waited behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bootstream::cli::simulate::{self, Stats, Target, Timing};
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

/// What the server's `/metrics` says at one instant (counters are totals since it started).
#[derive(Clone, Copy, Default)]
struct ServerSample {
    /// Agent API calls answered, and those answered within 50 ms (server side: from the request's
    /// last byte to the response's).
    agent_calls: f64,
    agent_calls_fast: f64,
    writer_busy: f64,
    commit: f64,
    writes_waiting: f64,
    agent_queue: f64,
    runtime_queue: f64,
    resyncs: f64,
    transactions: f64,
    writes: f64,
    agent_reconciles: f64,
    /// Hosts binding (bound, not yet registered again) and installed.
    binding: f64,
    installed: f64,
    /// Seconds since the run began.
    at: f64,
    cpu: f64,
    bench_cpu: f64,
    /// CPU seconds of the server's async runtime threads (workers and blocking pool) and of its store writer.
    runtime_cpu: f64,
    writer_cpu: f64,
}

fn metric(line: &str) -> Option<(&str, f64)> {
    let (name, value) = line.rsplit_once(' ')?;
    Some((name, value.parse().ok()?))
}

/// CPU seconds of a process's threads by name: (async runtime, store writer). Tokio gives its workers
/// and its blocking pool the same name.
fn thread_cpu(pid: &str) -> (f64, f64) {
    let mut out = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).unwrap_or_default();
        let cpu = cpu_seconds(&format!("{pid}/task/{tid}"));
        match comm.trim() {
            "sqlite-writer" => out.1 += cpu,
            c if c.starts_with("tokio") => out.0 += cpu,
            _ => {}
        }
    }
    out
}

async fn server_sample(
    client: &reqwest::Client,
    server: &str,
    pid: &str,
    start: Instant,
) -> anyhow::Result<ServerSample> {
    let text = client.get(format!("{server}/metrics")).send().await?.text().await?;
    let (runtime_cpu, writer_cpu) = thread_cpu(pid);
    let mut s = ServerSample {
        at: start.elapsed().as_secs_f64(),
        cpu: cpu_seconds(pid),
        bench_cpu: cpu_seconds("self"),
        runtime_cpu,
        writer_cpu,
        ..Default::default()
    };
    for (name, v) in text.lines().filter_map(metric) {
        let agent_api = name.contains("handler=\"/v2/");
        match name {
            n if agent_api && n.starts_with("bootstream_http_request_duration_seconds_count") => s.agent_calls += v,
            n if agent_api
                && n.starts_with("bootstream_http_request_duration_seconds_bucket")
                && n.contains("le=\"0.05\"") =>
            {
                s.agent_calls_fast += v
            }
            "bootstream_store_writer_busy_seconds_total" => s.writer_busy = v,
            "bootstream_store_commit_seconds_total" => s.commit = v,
            "bootstream_store_writes_waiting" => s.writes_waiting = v,
            "bootstream_controller_queue_depth{controller=\"agent\"}" => s.agent_queue = v,
            "bootstream_runtime_global_queue_depth" => s.runtime_queue = v,
            "bootstream_controller_feed_resyncs_total" => s.resyncs = v,
            "bootstream_store_transactions_total" => s.transactions = v,
            "bootstream_controller_reconciles_total{controller=\"agent\"}" => s.agent_reconciles = v,
            "bootstream_hosts{status=\"binding\"}" => s.binding = v,
            "bootstream_hosts{status=\"installed\"}" => s.installed = v,
            "bootstream_store_writes_total" => s.writes = v,
            _ => {}
        }
    }
    Ok(s)
}

/// Creates or updates the object at `url` (server-side apply, as `kubectl apply --server-side`).
async fn put(client: &reqwest::Client, url: String, doc: Value) -> anyhow::Result<()> {
    let r = client
        .patch(format!("{url}?fieldManager=fleet-bench&force=true"))
        .header("content-type", "application/apply-patch+yaml")
        .body(doc.to_string())
        .send()
        .await?;
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
    let probe = simulate::client();
    while probe.get(format!("{server}/ready")).send().await.map(|r| !r.status().is_success()).unwrap_or(true) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The resource API client sends the token the server made in its data directory (the simulated
    // hosts use their own client and the agent token).
    let token = std::fs::read_to_string(dir.path().join("api-token"))?.trim().to_string();
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse()?);
    let client = reqwest::Client::builder().default_headers(headers).pool_max_idle_per_host(64).build()?;
    let ps = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-secret", "namespace": NS},
                    "stringData": {".dockerconfigjson": "{\"auths\":{\"x\":{\"auth\":\"dTpw\"}}}"}});
    put(&client, format!("{server}/api/v1/namespaces/{NS}/secrets/pull-secret"), ps).await?;
    let ie = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                    "metadata": {"name": "pool", "namespace": NS}, "spec": {"pullSecretRef": {"name": "pull-secret"}}});
    put(&client, format!("{server}/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/infraenvs/pool"), ie)
        .await?;
    let target = Target::discover(&client, &server, &format!("{NS}/pool"), Some(&token)).await?;

    // One sample of the server's metrics per second, for the timeline.
    let samples = Arc::new(std::sync::Mutex::new(Vec::<ServerSample>::new()));
    let sampler = {
        let (client, server, samples) = (client.clone(), server.clone(), samples.clone());
        let pid = child.0.id().to_string();
        let start = Instant::now();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let s = server_sample(&client, &server, &pid, start).await.unwrap_or_default();
                samples.lock().unwrap().push(s);
            }
        })
    };

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
    sampler.abort();
    let rss = rss_peak_mib(child.0.id());
    let server_cpu = cpu_seconds(&child.0.id().to_string());
    let agents_cpu = cpu_seconds("self");

    // The server takes its polling jitter from the environment the benchmark runs in.
    let jitter = std::env::var("BOOTSTREAM_POLL_JITTER").unwrap_or_else(|_| "the default".into());
    println!(
        "hosts {hosts}, {clusters} clusters of {per_cluster}, booted over {boot_seconds} s, {stage_seconds} s between install stages, poll jitter {jitter}"
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
    print_timeline(&stats.timeline(), &samples.lock().unwrap(), [t_pool, t_bind_start, t_installed]);
    Ok(())
}

/// Per second: the agents' calls (all, over 50 ms, slowest) and, from the server (rates over the
/// actual time between two samples, as a slow `/metrics` answer stretches it): agent API calls over
/// 50 ms by the server's own clock; CPU as % of one core (server; its async runtime threads and store
/// writer; the benchmark); the store's transactions and writes per second, the writer's
/// busy and commit time (% of the time), writes waiting for it; the agent controller's queue; the
/// async runtime's shared queue; change-feed resyncs.
fn print_timeline(agents: &[(u32, u32, f64)], server: &[ServerSample], marks: [Duration; 3]) {
    println!(
        "{:>4} {:>6} {:>5} {:>7} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5} {:>6} {:>5} {:>5} {:>6} {:>6} {:>5} {:>5} {:>5} {:>4} {:>4}",
        "SEC",
        "CALLS",
        "SLOW",
        "MAX MS",
        "S.SLOW",
        "CPU%",
        "RT%",
        "WRT%",
        "BNCH%",
        "TX/S",
        "WRIT/S",
        "BUSY%",
        "COMT%",
        "W.WAIT",
        "QUEUE",
        "REC/S",
        "BIND",
        "INST",
        "RTQ",
        "RSYN"
    );
    let phase_mark = |sec: usize| marks.iter().position(|m| m.as_secs() as usize == sec);
    for sec in 1..server.len().max(agents.len()) {
        let (calls, slow, max) = agents.get(sec).copied().unwrap_or_default();
        let at = |i: usize| server.get(i).copied().unwrap_or_default();
        let (now, before) = (at(sec), at(sec - 1));
        let span = (now.at - before.at).max(0.001);
        let d = |f: fn(&ServerSample) -> f64| f(&now) - f(&before);
        let pct = |f: fn(&ServerSample) -> f64| d(f) / span * 100.0;
        let server_slow = d(|s| s.agent_calls) - d(|s| s.agent_calls_fast);
        let mark = match phase_mark(sec) {
            Some(0) => "  <- pool complete",
            Some(1) => "  <- binding starts",
            Some(2) => "  <- all installed",
            _ => "",
        };
        println!(
            "{sec:>4} {calls:>6} {slow:>5} {max:>7.1} {server_slow:>6.0} {:>5.0} {:>5.0} {:>5.0} {:>5.0} {:>5.0} {:>6.0} {:>5.0} {:>5.0} {:>6.0} {:>6.0} {:>5.0} {:>5.0} {:>5.0} {:>4.0} {:>4.0}{mark}",
            pct(|s| s.cpu),
            pct(|s| s.runtime_cpu),
            pct(|s| s.writer_cpu),
            pct(|s| s.bench_cpu),
            d(|s| s.transactions) / span,
            d(|s| s.writes) / span,
            pct(|s| s.writer_busy),
            pct(|s| s.commit),
            now.writes_waiting,
            now.agent_queue,
            d(|s| s.agent_reconciles) / span,
            now.binding,
            now.installed,
            now.runtime_queue,
            d(|s| s.resyncs),
        );
    }
}
