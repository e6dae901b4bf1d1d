//! The fleet benchmark: N simulated hosts through register → known-unbound → bound → installed →
//! cluster deleted (unbound) → rebooted → known-unbound, against a release bootstream, on one
//! backend, or several one after the other with their figures side by side:
//!
//! - `embedded`: `bootstream serve` (resources in SQLite, controllers in-process); the benchmark
//!   writes resources through its Kubernetes API;
//! - `kubernetes`: `bootstream controller --kubeconfig` against a hub's Kubernetes API server (this
//!   benchmark's binary run again as `--api-server-process DIR`: bootstream's `KubeApi` over a SQLite
//!   file, with `testkit::hub::ApiServer`'s request counts); the benchmark writes resources to the API
//!   server as a user with kubectl would, the agents talk to the controller;
//! - `real-hub`: the same controller against a real kube-apiserver 1.36 and etcd 3.6 (a private
//!   `testkit::realhub::RealHub`: the compatibility corpus's `kube/hub.sh`, `deploy/crds` and
//!   `deploy/rbac.yaml` applied, stopped at the end). The controller authenticates with a token of
//!   the `bootstream-controller` ServiceAccount, so it has deploy/rbac.yaml's rights and no more; the
//!   benchmark creates the namespaces and writes resources as the hub's cluster admin. Requests are
//!   counted twice: by the controller itself (its `bootstream_kube_requests_total`, client
//!   `controller`; `agents` there includes `agents/status`), and by kube-apiserver
//!   (`apiserver_request_total` from its `/metrics`, client `all clients`: the benchmark's and
//!   kube-apiserver's own loopback requests too, which it does not tell apart; a server-side apply is
//!   `apply` there). kube-apiserver's and etcd's CPU over the fleet's run and their RSS (peak, and at
//!   the end) stand where the test API server's do.
//!
//! ```text
//! cargo bench --bench fleet -- [HOSTS] [HOSTS_PER_CLUSTER] [BOOT_SECONDS] [STAGE_SECONDS]
//!     [--backend embedded|kubernetes|real-hub|both|all|A,B] [--shape pool|ztp] [--infraenvs I]
//!     [--bmhs B] [--no-floor] [--no-resume]
//! CARGO_TARGET_DIR=/work/wt-bench-target cargo bench --bench fleet -- 300 10 2 --backend both
//! CARGO_TARGET_DIR=/work/wt-bench-target cargo bench --bench fleet -- 300 10 2 --backend embedded,real-hub
//! CARGO_TARGET_DIR=/work/wt-bench-target cargo bench --bench fleet -- 350 --shape ztp --backend both
//! ```
//!
//! `both` is embedded and kubernetes, `all` the three. `real-hub` needs the compatibility corpus
//! (`BOOTSTREAM_COMPAT_DIR`, default `../shared`; see `testkit::realhub`).
//!
//! BOOT_SECONDS (default 0) spreads the machines' first boot over that many seconds; STAGE_SECONDS
//! (default 0) is the time between a host's installation stages. `BOOTSTREAM_BIN=path` measures that
//! server binary instead of this checkout's; the server reads its other settings from the environment
//! (`BOOTSTREAM_POLL_JITTER=0` measures it without jitter on the agents' polling interval).
//!
//! Shapes: `pool` (default) is one InfraEnv and clusters of HOSTS_PER_CLUSTER hosts binding every
//! host. `ztp` is the hub-scale shape: I InfraEnvs (default 3,500 at 10,000 hosts, proportional
//! below), each in its own namespace with one single-node cluster (ClusterDeployment +
//! AgentClusterInstall, one control-plane agent, user-managed networking) binding one of its hosts,
//! the other hosts staying in the free pool; plus B BareMetalHosts (default 1,000 at 10,000 hosts,
//! proportional below) on free-pool hosts, whose `bootMACAddress` is the simulated host's MAC and
//! whose `infraenvs.agent-install.openshift.io` label names its InfraEnv, which the Bare Metal Agent
//! Controller links to their Agents (`agent-install.openshift.io/bmh`).
//!
//! Prints, per backend: the time of each phase, agent API latency percentiles (measured by the
//! simulated agents), the server's peak RSS (VmHWM) and CPU, a timeline per second of the agents'
//! calls beside the server's `/metrics` and `/proc`; for Kubernetes and the real hub the API requests
//! by client, verb and resource, the controller's LISTs after its first sync and its watch restarts,
//! the API server's (kube-apiserver's and etcd's) CPU and RSS, and the controller's `bootstream_kube_*`
//! series when it has them; the machine's 1-minute load average at the start and end of each backend's
//! run (the other work on the machine). Then the resume measure (SIGTERM the server, start a new one
//! on the same data dir, time until it answers `/ready` and until it reflects a change to one Agent's
//! approval in that Agent's `RequirementsMet` condition), the nginx floor (`--no-floor` skips it) and
//! the side-by-side summary.

mod floor;
mod procs;
mod timeline;

// The same allocator as the bootstream binary, for the hub API server this binary runs as a process of
// its own (bootstream's Kubernetes API, as `serve` runs it): with glibc's, malloc and free were 40% of
// that process's CPU, a cost the product does not have.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bootstream::cli::simulate::{self, Stats, Target, Timing};
use bootstream::testkit::realhub::RealHub;
use futures_util::StreamExt;
use serde_json::{Value, json};

use procs::{ApiServerProcess, BENCH_TOKEN, Counts, Server};

/// The lifecycle phases, as the latency summary names them.
const PHASES: [&str; 3] = ["register", "bind-install", "unbind-reboot"];

/// The host states a bound host enters over the lifecycle, in order (the path of the host state
/// machine, docs/design.md §4.2, with the unreachable simulated spoke: no reclaim). The state
/// changes per host are counted from this path, not observed.
const BOUND_HOST_PATH: [&str; 13] = [
    "discovering-unbound",
    "known-unbound",
    "binding",
    "discovering",
    "known",
    "preparing-for-installation",
    "preparing-successful",
    "installing",
    "installing-in-progress",
    "installed",
    "unbinding-pending-user-action",
    "discovering-unbound",
    "known-unbound",
];
/// ... and a host that stays in the free pool.
const FREE_HOST_PATH: [&str; 2] = ["discovering-unbound", "known-unbound"];

#[derive(Clone, Copy, PartialEq, Debug)]
enum Backend {
    Embedded,
    /// The controller against bootstream's test API server (a process of this binary).
    Kubernetes,
    /// The controller against a real kube-apiserver and etcd (`testkit::realhub`).
    RealHub,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Kubernetes => "kubernetes",
            Backend::RealHub => "real-hub",
        }
    }

    /// Whether the controller runs against an API server (and its requests are counted).
    fn on_a_hub(self) -> bool {
        self != Backend::Embedded
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Pool,
    Ztp,
}

struct Options {
    hosts: usize,
    per_cluster: usize,
    boot_seconds: f64,
    stage_seconds: f64,
    backends: Vec<Backend>,
    shape: Shape,
    infraenvs: usize,
    bmhs: usize,
    floor: bool,
    resume: bool,
}

fn options() -> anyhow::Result<Options> {
    let mut positional = Vec::new();
    let (mut backend, mut shape, mut infraenvs, mut bmhs) = ("both".to_string(), "pool".to_string(), None, None);
    let (mut floor, mut resume) = (true, true);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| anyhow::anyhow!("{name} needs a value"));
        match a.as_str() {
            "--backend" => backend = value("--backend")?,
            "--shape" => shape = value("--shape")?,
            "--infraenvs" => infraenvs = Some(value("--infraenvs")?.parse::<usize>()?),
            "--bmhs" => bmhs = Some(value("--bmhs")?.parse::<usize>()?),
            "--no-floor" => floor = false,
            "--no-resume" => resume = false,
            // cargo's own `--bench`, and whatever else a harness passes.
            a if a.starts_with('-') => {}
            _ => positional.push(a),
        }
    }
    let hosts: usize = positional.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let mut backends = Vec::new();
    for b in backend.split(',') {
        match b {
            "embedded" => backends.push(Backend::Embedded),
            "kubernetes" => backends.push(Backend::Kubernetes),
            "real-hub" => backends.push(Backend::RealHub),
            "both" => backends.extend([Backend::Embedded, Backend::Kubernetes]),
            "all" => backends.extend([Backend::Embedded, Backend::Kubernetes, Backend::RealHub]),
            b => anyhow::bail!("--backend {b}: embedded, kubernetes, real-hub, both, all, or a comma-separated list"),
        }
    }
    let shape = match shape.as_str() {
        "pool" => Shape::Pool,
        "ztp" => Shape::Ztp,
        s => anyhow::bail!("--shape {s}: pool or ztp"),
    };
    // The hub-scale proportions: 3,500 single-node clusters and 1,000 BareMetalHosts per 10,000 hosts.
    let infraenvs = infraenvs.unwrap_or((hosts * 35 / 100).max(1)).clamp(1, hosts);
    let bmhs = bmhs.unwrap_or(hosts / 10).min(hosts - infraenvs);
    Ok(Options {
        hosts,
        per_cluster: positional.get(1).and_then(|a| a.parse().ok()).unwrap_or(100),
        boot_seconds: positional.get(2).and_then(|a| a.parse().ok()).unwrap_or(0.0),
        stage_seconds: positional.get(3).and_then(|a| a.parse().ok()).unwrap_or(0.0),
        backends,
        shape,
        infraenvs,
        bmhs,
        floor,
        resume,
    })
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--api-server-process") {
        let dir = args.get(i + 1).ok_or_else(|| anyhow::anyhow!("--api-server-process DIR"))?;
        return procs::api_server_process(std::path::Path::new(dir));
    }
    let opts = options()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let mut reports = Vec::new();
        for &backend in &opts.backends {
            eprintln!("== {} backend", backend.name());
            reports.push(run(&opts, backend).await?);
        }
        // After the backends, on an idle machine, at the agents' concurrency (capped at the agents'
        // client pool size).
        // Without nginx on the machine, the summary still comes, without the floor.
        let floor = if opts.floor {
            floor::measure(opts.hosts.min(1024), 3.0)
                .await
                .inspect_err(|e| eprintln!("no nginx floor (is nginx installed?): {e:#}"))
                .ok()
        } else {
            None
        };
        print_summary(&opts, &reports, floor.as_ref());
        anyhow::Ok(())
    })
}

/// Where the InfraEnvs, clusters and BareMetalHosts of a run are.
struct Layout {
    /// (namespace, name, the machines that boot its image).
    infraenvs: Vec<(String, String, std::ops::Range<usize>)>,
    /// (namespace, name, machines bound to it).
    clusters: Vec<(String, String, Vec<usize>)>,
    /// (namespace, name, machine, InfraEnv name).
    bmhs: Vec<(String, String, usize, String)>,
}

const SEED: &str = "bench";

impl Layout {
    fn new(opts: &Options) -> Layout {
        let hosts = opts.hosts;
        match opts.shape {
            Shape::Pool => {
                let ns = "bench".to_string();
                let clusters = (0..hosts.div_ceil(opts.per_cluster))
                    .map(|c| {
                        let machines = (c * opts.per_cluster..((c + 1) * opts.per_cluster).min(hosts)).collect();
                        (ns.clone(), format!("c{c}"), machines)
                    })
                    .collect();
                Layout { infraenvs: vec![(ns, "pool".into(), 0..hosts)], clusters, bmhs: Vec::new() }
            }
            Shape::Ztp => {
                let n = opts.infraenvs;
                let infraenvs: Vec<_> = (0..n)
                    .map(|k| (format!("ztp-{k}"), "ie".to_string(), k * hosts / n..(k + 1) * hosts / n))
                    .collect();
                // Each InfraEnv's first machine is its single-node cluster's.
                let clusters =
                    infraenvs.iter().map(|(ns, _, r)| (ns.clone(), "sno".to_string(), vec![r.start])).collect();
                // BareMetalHosts on free-pool machines, spread evenly over them.
                let free: Vec<(usize, &str)> =
                    infraenvs.iter().flat_map(|(ns, _, r)| r.clone().skip(1).map(move |m| (m, ns.as_str()))).collect();
                let step = free.len() as f64 / opts.bmhs.max(1) as f64;
                let bmhs = (0..opts.bmhs)
                    .map(|b| {
                        let (m, ns) = free[(b as f64 * step) as usize];
                        (ns.to_string(), format!("bmh-{m}"), m, "ie".to_string())
                    })
                    .collect();
                Layout { infraenvs, clusters, bmhs }
            }
        }
    }

    fn bound_hosts(&self) -> usize {
        self.clusters.iter().map(|c| c.2.len()).sum()
    }
}

/// The MAC the simulated machine `index` reports (`hosts::simulated::inventory`).
fn mac_of(index: usize) -> String {
    let inventory = bootstream::hosts::simulated::inventory(index);
    inventory["interfaces"][0]["mac_address"].as_str().unwrap_or_default().to_string()
}

/// The server under test and how the benchmark reaches it.
struct Deployment {
    backend: Backend,
    bin: String,
    /// Its data directory; for Kubernetes also the API server's.
    dir: tempfile::TempDir,
    port: u16,
    server: Server,
    api_server: Option<ApiServerProcess>,
    /// The real hub (kube-apiserver and etcd), stopped when this is dropped, after the server.
    real_hub: Option<RealHub>,
    /// Where the benchmark writes and reads resources (the Kubernetes API), with `client`.
    api: String,
    client: reqwest::Client,
    token: String,
    /// How many times the server was started (names each controller's Lease identity).
    starts: u32,
}

impl Deployment {
    async fn start(backend: Backend) -> anyhow::Result<Deployment> {
        // BOOTSTREAM_BIN runs another build (an earlier commit's) under the same load, for side-by-side runs.
        let bin = std::env::var("BOOTSTREAM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bootstream").to_string());
        let dir = tempfile::tempdir()?;
        if backend.on_a_hub() {
            // What a hub mounts from Secrets, shared with image server replicas: the key of the
            // agents' tokens and the URL-signing key.
            std::fs::write(dir.path().join("agent-auth.key"), uuid::Uuid::new_v4().as_bytes().repeat(2))?;
            bootstream::auth::urlsign::UrlSigner::load_or_create(dir.path(), &[])?;
        }
        let api_server = match backend {
            Backend::Kubernetes => Some(ApiServerProcess::start(dir.path())?),
            _ => None,
        };
        let real_hub = match backend {
            Backend::RealHub => {
                // A hub of its own (deploy/crds and deploy/rbac.yaml applied); the controller gets
                // what a pod of its ServiceAccount gets: a token of bootstream-controller, whose
                // rights are deploy/rbac.yaml's and no more.
                let hub = RealHub::private(true).await;
                let token = hub.service_account_token("bootstream-controller").await;
                std::fs::write(dir.path().join("controller.kubeconfig"), hub.kubeconfig_for(&token))?;
                Some(hub)
            }
            _ => None,
        };
        let port = procs::free_port_pair()?;
        let server = Server::start(server_command(backend, &bin, dir.path(), port, 1))?;
        let probe = simulate::client();
        procs::until_ready(&probe, &server.url, Duration::from_secs(120)).await?;
        let (api, token) = match (&api_server, &real_hub) {
            (Some(a), _) => (a.url.clone(), BENCH_TOKEN.to_string()),
            // The benchmark writes to the real hub as its cluster admin.
            (None, Some(h)) => (h.url.clone(), h.admin_token.clone()),
            // The resource API client sends the token the server made in its data directory (the
            // simulated hosts use their own client and the agent token).
            // `serve` serves its API on an HTTPS listener of its own (see `server_command`).
            (None, None) => (
                format!("https://127.0.0.1:{}", api_port(port)),
                std::fs::read_to_string(dir.path().join("api-token"))?.trim().to_string(),
            ),
        };
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {token}").parse()?);
        let mut client = reqwest::Client::builder();
        match (&api_server, &real_hub) {
            (Some(_), _) => {}
            (None, Some(h)) => {
                client = client.tls_certs_merge(reqwest::Certificate::from_pem_bundle(h.ca_pem.as_bytes())?)
            }
            (None, None) => {
                let ca = std::fs::read(dir.path().join("api-tls/tls.crt"))?;
                client = client.tls_certs_merge(reqwest::Certificate::from_pem_bundle(&ca)?);
            }
        }
        let client = client
            .default_headers(headers)
            .pool_max_idle_per_host(64)
            // A server that stops answering fails the run instead of hanging it.
            .timeout(Duration::from_secs(120))
            .build()?;
        Ok(Deployment { backend, bin, dir, port, server, api_server, real_hub, api, client, token, starts: 1 })
    }

    /// The requests the API server answered so far, by client, verb and resource. The test API server
    /// counts them per client token. The real hub counts them per verb and resource only
    /// (kube-apiserver's `apiserver_request_total`, client [`HUB_CLIENTS`]: every client, the
    /// benchmark's and kube-apiserver's own loopback clients too); the controller's own share is what it
    /// counts itself (its `bootstream_kube_requests_total`, client [`procs::CONTROLLER_TOKEN`]), since
    /// this controller process started: nothing while no controller runs (in the resume, between two).
    async fn counts(&mut self) -> anyhow::Result<Counts> {
        if let Some(a) = &mut self.api_server {
            return tokio::task::block_in_place(|| a.counts());
        }
        let Some(hub) = &self.real_hub else { return Ok(Vec::new()) };
        let text = self.client.get(format!("{}/metrics", hub.url)).send().await?.error_for_status()?.text().await?;
        let mut counts = hub_request_counts(&text);
        if let Ok(r) = self.client.get(format!("{}/metrics", self.server.url)).send().await {
            counts.extend(controller_request_counts(&r.text().await?));
        }
        Ok(counts)
    }

    /// The processes of the API server (and its store) beside the server under test: (what, pid).
    fn hub_processes(&self) -> Vec<(&'static str, u32)> {
        if let Some(a) = &self.api_server {
            return vec![("API server", a.pid())];
        }
        let Some(hub) = &self.real_hub else { return Vec::new() };
        let pid = |f: &str| std::fs::read_to_string(hub.dir.join(f)).ok().and_then(|p| p.trim().parse().ok());
        [("API server", "apiserver.pid"), ("etcd", "etcd.pid")]
            .into_iter()
            .filter_map(|(what, f)| Some((what, pid(f)?)))
            .collect()
    }
}

/// The client name of the real hub's own counts (all its clients together).
const HUB_CLIENTS: &str = "all clients";

/// kube-apiserver's `apiserver_request_total` (summed over scopes and components) as counts of
/// [`HUB_CLIENTS`] by verb and resource (`resource/subresource` for a subresource), the verbs named as
/// the controller names them (`POST` is create, `PUT` update, `APPLY` a server-side apply); requests
/// answered with an error under their code (`create 409`).
fn hub_request_counts(metrics: &str) -> Counts {
    let mut out: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else { continue };
        let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
        let Ok(n) = value.trim().parse::<f64>() else { continue };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|kv| kv.trim_start_matches(',').strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = match label("verb").as_str() {
            "POST" => "create".to_string(),
            "PUT" => "update".to_string(),
            v => v.to_lowercase(),
        };
        // A request answered with an error counts apart, under its code ("create 409"), so that the
        // verbs' counts are of requests that did what they asked.
        let code = label("code");
        let verb = if code.starts_with('2') || code.is_empty() { verb } else { format!("{verb} {code}") };
        let (resource, sub) = (label("resource"), label("subresource"));
        // A path that is no resource (`/readyz`) is in `subresource`.
        let resource = match (resource.is_empty(), sub.is_empty()) {
            (_, true) => resource,
            (true, false) => sub,
            (false, false) => format!("{resource}/{sub}"),
        };
        *out.entry((HUB_CLIENTS.to_string(), verb, resource)).or_default() += n as u64;
    }
    out.into_iter().collect()
}

/// The controller's own count of its requests (`bootstream_kube_requests_total{verb, resource}`).
fn controller_request_counts(metrics: &str) -> Counts {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("bootstream_kube_requests_total{verb=\""))
        .filter_map(|l| {
            let (verb, rest) = l.split_once("\",resource=\"")?;
            let (resource, n) = rest.split_once("\"} ")?;
            Some((
                (procs::CONTROLLER_TOKEN.to_string(), verb.to_string(), resource.to_string()),
                n.trim().parse().ok()?,
            ))
        })
        .collect()
}

/// The port of `serve`'s API listener beside the main one on `port`.
fn api_port(port: u16) -> u16 {
    if port < u16::MAX { port + 1 } else { port - 1 }
}

/// The command that runs the server of `backend` on `port`, its data in `dir`; the `start`th time
/// (the controller's Lease identity says which).
fn server_command(backend: Backend, bin: &str, dir: &std::path::Path, port: u16, start: u32) -> Command {
    let mut c = Command::new(bin);
    let listen = format!("127.0.0.1:{port}");
    match backend {
        Backend::Embedded => {
            // The API's HTTPS listener on a port of its own, the same at every start.
            c.args(["serve", "--listen", &listen, "--data-dir"]).arg(dir);
            c.args(["--api-listen", &format!("127.0.0.1:{}", api_port(port))]);
        }
        Backend::Kubernetes | Backend::RealHub => {
            // The Lease's namespace needs no creating: the test API server takes objects in any
            // namespace, and the real hub's is deploy/rbac.yaml's.
            c.args(["controller", "--listen", &listen, "--lease-namespace", "bootstream"])
                .args(["--identity", &format!("bench-controller-{start}")])
                .arg("--kubeconfig")
                .arg(dir.join("controller.kubeconfig"))
                .arg("--data-dir")
                .arg(dir.join("controller"))
                .arg("--agent-auth-key")
                .arg(dir.join("agent-auth.key"))
                .arg("--url-signing-key")
                .arg(dir.join("url-signing.pem"));
        }
    }
    // The converged flow's images carry the ironic agent, which needs ironic's address (a hub has
    // it in metal3's config); nothing here calls it.
    c.args(["--ironic-base-url", "http://127.0.0.1:6385"]);
    c.env("RUST_LOG", "warn");
    c
}

/// Creates or updates the object at `url` (server-side apply, as `kubectl apply --server-side`),
/// and returns it as stored.
async fn put(client: &reqwest::Client, url: String, doc: Value) -> anyhow::Result<Value> {
    let body = doc.to_string();
    let r = send_idempotent(|| {
        client
            .patch(format!("{url}?fieldManager=fleet-bench&force=true"))
            .header("content-type", "application/apply-patch+yaml")
            .body(body.clone())
    })
    .await?;
    anyhow::ensure!(r.status().is_success(), "{}", r.text().await?);
    Ok(r.json().await?)
}

/// Sends an idempotent request (a merge patch, an apply), again after a transport error: a pooled
/// keep-alive connection the server closes as it idles out fails the request that reuses it, as
/// kubectl's client retries too. An HTTP error answer is returned as it is.
async fn send_idempotent(make: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    let mut tries = 0;
    loop {
        match make().send().await {
            Err(e) if tries < 3 && (e.is_request() || e.is_connect()) && !e.is_timeout() => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// Runs `f` over `items`, 32 at a time (a user's tooling applying many objects).
async fn in_parallel<T, F, Fut, R>(items: Vec<T>, f: F) -> anyhow::Result<Vec<R>>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = anyhow::Result<R>>,
{
    futures_util::stream::iter(items).map(f).buffer_unordered(32).collect::<Vec<_>>().await.into_iter().collect()
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
    metadata: MetaView,
    #[serde(default)]
    spec: SpecView,
    #[serde(default)]
    status: StatusView,
}

#[derive(serde::Deserialize)]
struct MetaView {
    name: String,
    namespace: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(serde::Deserialize, Default)]
struct SpecView {
    #[serde(default, rename = "clusterDeploymentName")]
    cluster_deployment_name: Option<Value>,
    #[serde(default)]
    approved: bool,
}

#[derive(serde::Deserialize, Default)]
struct StatusView {
    #[serde(default, rename = "debugInfo")]
    debug_info: DebugInfoView,
    #[serde(default)]
    conditions: Vec<ConditionView>,
}

#[derive(serde::Deserialize, Default)]
struct DebugInfoView {
    #[serde(default)]
    state: String,
}

#[derive(serde::Deserialize)]
struct ConditionView {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    reason: String,
}

impl AgentView {
    fn state(&self) -> &str {
        &self.status.debug_info.state
    }
    fn bound(&self) -> bool {
        self.spec.cluster_deployment_name.as_ref().is_some_and(|c| !c.is_null())
    }
    fn bmh(&self) -> Option<&str> {
        self.metadata.labels.get("agent-install.openshift.io/bmh").map(String::as_str)
    }
    fn condition_reason(&self, type_: &str) -> Option<&str> {
        self.status.conditions.iter().find(|c| c.type_ == type_).map(|c| c.reason.as_str())
    }
}

const AGENTS: &str = "apis/agent-install.openshift.io/v1beta1";

/// Every Agent, in every namespace.
async fn agents(d: &Deployment) -> anyhow::Result<Vec<AgentView>> {
    let body = d.client.get(format!("{}/{AGENTS}/agents", d.api)).send().await?.error_for_status()?.bytes().await?;
    Ok(serde_json::from_slice::<AgentList>(&body)?.items)
}

/// Hosts by state, from the server's `/metrics` (cheap to poll, unlike the list of Agents).
async fn host_counts(d: &Deployment) -> anyhow::Result<std::collections::HashMap<String, usize>> {
    let text = d.client.get(format!("{}/metrics", d.server.url)).send().await?.text().await?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("bootstream_hosts{status=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(state, n)| Some((state.to_string(), n.trim().parse().ok()?)))
        .collect())
}

/// Waits until `state` holds `hosts` hosts, then until the Agents say so too (`done`).
async fn wait(
    d: &Deployment,
    state: &str,
    hosts: usize,
    done: impl Fn(&[AgentView]) -> bool,
) -> anyhow::Result<Vec<AgentView>> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    while host_counts(d).await?.get(state).copied().unwrap_or(0) < hosts {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {hosts} hosts {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    loop {
        let list = agents(d).await?;
        if done(&list) {
            return Ok(list);
        }
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for the Agents to be {state}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What one backend's run measured.
#[derive(Default)]
struct Report {
    backend: &'static str,
    hosts: usize,
    bound: usize,
    /// (what, seconds).
    phases: Vec<(&'static str, f64)>,
    whole: f64,
    agent_calls: usize,
    p99_ms: f64,
    server_rss_mib: f64,
    server_cpu: f64,
    /// The API server's processes (the test API server; kube-apiserver and etcd), over the fleet's run.
    hub_processes: Vec<HubProcess>,
    /// The machine's 1-minute load average when the backend's run began and when its lifecycle ended
    /// (other work on the machine shows here).
    load: (f64, f64),
    agents_cpu: f64,
    /// API requests over the lifecycle (Kubernetes only), and the controller's LISTs from the
    /// fleet's start (its initial sync done) to the end.
    requests: Option<Counts>,
    controller_lists_after_sync: Option<u64>,
    /// The controller's watches that listed again (`bootstream_kube_watch_restarts_total`), at the end.
    watch_restarts: Option<u64>,
    resume: Option<Resume>,
    state_changes: usize,
    /// From the server's counters over the run: objects its store handed out and host records its
    /// pool visited, each per change its store fed to the controllers (what a change costs in reads:
    /// flat when each change reads only what it concerns).
    reads_per_change: (f64, f64),
}

/// One process of the hub: CPU seconds over the fleet's run, its peak RSS (VmHWM) and its RSS at the
/// lifecycle's end (VmRSS).
struct HubProcess {
    what: &'static str,
    cpu: f64,
    rss_peak_mib: f64,
    rss_mib: f64,
}

impl Report {
    /// The hub's process `what`.
    fn hub(&self, what: &str) -> Option<&HubProcess> {
        self.hub_processes.iter().find(|p| p.what == what)
    }

    /// The CPU seconds of every process of the hub.
    fn hub_cpu(&self) -> f64 {
        self.hub_processes.iter().map(|p| p.cpu).sum()
    }
}

/// The machine's 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// The new leader's resume, all in seconds.
struct Resume {
    /// SIGTERM to the process's end (it releases its Lease on the way).
    stop: f64,
    /// The new process's start to its listener answering `/ready`.
    ready: f64,
    /// A change to one Agent (its approval flipped, right after `/ready`) to the new process's
    /// writing it into that Agent's `RequirementsMet` condition.
    change: f64,
    /// The new process's requests to the API server over `ready` + `change` (Kubernetes only).
    requests: Option<Counts>,
}

async fn run(opts: &Options, backend: Backend) -> anyhow::Result<Report> {
    let layout = Layout::new(opts);
    let hosts = opts.hosts;
    let mut d = Deployment::start(backend).await?;
    let (api, client) = (d.api.clone(), d.client.clone());
    let after_start = d.counts().await?;
    let load_start = load_average();

    // A real hub takes objects only in namespaces that exist (the test API server in any).
    if backend == Backend::RealHub {
        let mut namespaces: Vec<&String> = layout.infraenvs.iter().map(|(ns, _, _)| ns).collect();
        namespaces.dedup();
        in_parallel(namespaces, |ns| {
            let (client, api) = (client.clone(), api.clone());
            async move {
                let doc = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                put(&client, format!("{api}/api/v1/namespaces/{ns}"), doc).await
            }
        })
        .await?;
    }

    // The InfraEnvs with their pull secrets, then the BareMetalHosts (as a ZTP pipeline applies
    // them, before the machines boot).
    in_parallel(layout.infraenvs.iter().collect(), |(ns, name, _)| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let ps = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-secret", "namespace": ns},
                            "stringData": {".dockerconfigjson": "{\"auths\":{\"x\":{\"auth\":\"dTpw\"}}}"}});
            put(&client, format!("{api}/api/v1/namespaces/{ns}/secrets/pull-secret"), ps).await?;
            let ie = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                            "metadata": {"name": name, "namespace": ns}, "spec": {"pullSecretRef": {"name": "pull-secret"}}});
            put(&client, format!("{api}/{AGENTS}/namespaces/{ns}/infraenvs/{name}"), ie).await
        }
    })
    .await?;
    eprintln!("{}: InfraEnvs applied", backend.name());
    in_parallel(layout.bmhs.iter().collect(), |(ns, name, machine, infraenv)| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let bmh = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "metadata": {"name": name, "namespace": ns, "labels": {"infraenvs.agent-install.openshift.io": infraenv}},
                "spec": {"online": true, "bootMACAddress": mac_of(*machine),
                         "bmc": {"address": format!("redfish-virtualmedia://192.0.2.1/redfish/v1/Systems/{machine}"),
                                 "credentialsName": format!("{name}-bmc-secret")}}});
            let bmh =
                put(&client, format!("{api}/apis/metal3.io/v1alpha1/namespaces/{ns}/baremetalhosts/{name}"), bmh).await?;
            // What metal3's baremetal-operator does for a BareMetalHost in the converged flow (there
            // is no metal3 here): a PreprovisioningImage of the same name, owned by it, which
            // bootstream's image controller then makes ready; the BMAC waits for that before it
            // links the host's Agent.
            let ppi = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "PreprovisioningImage",
                "metadata": {"name": name, "namespace": ns, "labels": {"infraenvs.agent-install.openshift.io": infraenv},
                             "ownerReferences": [{"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                                                  "name": name, "uid": bmh["metadata"]["uid"]}]},
                "spec": {"acceptFormats": ["iso"], "architecture": "x86_64"}});
            put(&client, format!("{api}/apis/metal3.io/v1alpha1/namespaces/{ns}/preprovisioningimages/{name}"), ppi).await
        }
    })
    .await?;
    eprintln!("{}: BareMetalHosts applied", backend.name());
    // Each InfraEnv's agent token, from its discovery Ignition, once the server has made its image
    // (the embedded API answers the apply after the reconcile; a controller takes its own time).
    let targets = in_parallel(layout.infraenvs.iter().collect(), |(ns, name, range)| {
        let d = &d;
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                match Target::discover_at(&d.client, &d.api, &d.server.url, &format!("{ns}/{name}"), Some(&d.token))
                    .await
                {
                    Ok(t) => return anyhow::Ok((t, range.clone())),
                    Err(e) if Instant::now() > deadline => return Err(e),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    })
    .await?;
    eprintln!("{}: agent tokens read; the fleet boots", backend.name());
    let before_fleet = d.counts().await?;

    // One sample of the server's metrics per second, for the timeline.
    let samples = Arc::new(std::sync::Mutex::new(Vec::<timeline::ServerSample>::new()));
    let sampler = {
        let (client, server, samples) = (client.clone(), d.server.url.clone(), samples.clone());
        let pid = d.server.pid().to_string();
        let start = Instant::now();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let s = timeline::server_sample(&client, &server, &pid, start).await.unwrap_or_default();
                samples.lock().unwrap().push(s);
            }
        })
    };
    // (server, the hub's processes in hub_processes' order, the benchmark with its simulated agents).
    let cpu_at = |d: &Deployment| {
        (
            procs::cpu_seconds(&d.server.pid().to_string()),
            d.hub_processes().iter().map(|(_, pid)| procs::cpu_seconds(&pid.to_string())).collect::<Vec<_>>(),
            procs::cpu_seconds("self"),
        )
    };
    let cpu_before = cpu_at(&d);

    let stats = Arc::new(Stats::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Agents poll every 60 s × 0.05 = 3 s; a person checks installed machines every 5 s.
    let timing = Timing {
        time_scale: 0.05,
        stage_seconds: opts.stage_seconds,
        reboot_check_seconds: 5.0,
        boot_seconds: opts.boot_seconds,
    };
    let start = Instant::now();
    stats.set_phase(PHASES[0]);
    let mut tasks = Vec::new();
    for (target, range) in &targets {
        tasks.extend(simulate::start_fleet(target, SEED, range.clone(), timing, stats.clone(), stop.clone()));
    }

    wait(&d, "known-unbound", hosts, |l| l.len() == hosts && l.iter().all(|a| a.state() == "known-unbound")).await?;
    let t_pool = start.elapsed();
    let mut phases = vec![("register -> known-unbound", t_pool.as_secs_f64())];
    let mut bmh_links = None;
    if !layout.bmhs.is_empty() {
        // The links are the BMAC's work after the pool is complete; a link that does not come within
        // two minutes is reported (as the number linked), not waited for.
        let deadline = Instant::now() + Duration::from_secs(120);
        let linked = loop {
            let linked = agents(&d).await?.iter().filter(|a| a.bmh().is_some()).count();
            if linked >= layout.bmhs.len() || Instant::now() > deadline {
                break linked;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        phases.push(("BareMetalHosts linked (after pool)", (start.elapsed() - t_pool).as_secs_f64()));
        bmh_links = Some(linked);
    }
    stats.set_phase(PHASES[1]);

    let t_bind_start = start.elapsed();
    in_parallel(layout.clusters.iter().collect(), |(ns, name, machines)| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let cd = json!({"apiVersion": "hive.openshift.io/v1", "kind": "ClusterDeployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"baseDomain": "example.com", "clusterName": name, "platform": {"agentBareMetal": {}},
                         "clusterInstallRef": {"group": "extensions.hive.openshift.io", "kind": "AgentClusterInstall", "name": name, "version": "v1beta1"}}});
            put(&client, format!("{api}/apis/hive.openshift.io/v1/namespaces/{ns}/clusterdeployments/{name}"), cd).await?;
            let n = machines.len();
            // A single-node cluster needs user-managed networking (admission refuses it otherwise).
            let networking = if n == 1 { json!({"userManagedNetworking": true}) } else { json!({}) };
            let aci = json!({"apiVersion": "extensions.hive.openshift.io/v1beta1", "kind": "AgentClusterInstall",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterDeploymentRef": {"name": name}, "networking": networking,
                         "provisionRequirements": {"controlPlaneAgents": 3.min(n), "workerAgents": n.saturating_sub(3)}}});
            put(&client, format!("{api}/apis/extensions.hive.openshift.io/v1beta1/namespaces/{ns}/agentclusterinstalls/{name}"), aci)
                .await
        }
    })
    .await?;
    // Approve and bind each cluster's machines (the Agent of a machine is named by its host id).
    let binds: Vec<(String, String, String)> = layout
        .clusters
        .iter()
        .flat_map(|(ns, name, machines)| {
            machines.iter().map(move |&m| (ns.clone(), name.clone(), simulate::host_id(SEED, m)))
        })
        .collect();
    in_parallel(binds, |(ns, cd, agent)| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let patch = json!({"spec": {"approved": true, "clusterDeploymentName": {"name": cd, "namespace": ns}}});
            let r = send_idempotent(|| {
                client
                    .patch(format!("{api}/{AGENTS}/namespaces/{ns}/agents/{agent}"))
                    .header("content-type", "application/merge-patch+json")
                    .body(patch.to_string())
            })
            .await?;
            anyhow::ensure!(r.status().is_success(), "binding {ns}/{agent}: {}", r.text().await?);
            Ok(())
        }
    })
    .await?;
    let bound = layout.bound_hosts();
    wait(&d, "installed", bound, |l| l.iter().filter(|a| a.state() == "installed").count() == bound).await?;
    let t_installed = start.elapsed();
    stats.set_phase(PHASES[2]);

    in_parallel(layout.clusters.iter().collect(), |(ns, name, _)| {
        let (client, api) = (client.clone(), api.clone());
        async move {
            let r = client
                .delete(format!("{api}/apis/hive.openshift.io/v1/namespaces/{ns}/clusterdeployments/{name}"))
                .send()
                .await?;
            anyhow::ensure!(r.status().is_success(), "deleting {ns}/{name}: {}", r.text().await?);
            Ok(())
        }
    })
    .await?;
    wait(&d, "known-unbound", hosts, |l| {
        l.len() == hosts && l.iter().all(|a| a.state() == "known-unbound" && !a.bound())
    })
    .await?;
    let t_done = start.elapsed();
    sampler.abort();
    // The agents go on polling through the resume below, as machines in the pool do (a pool host
    // whose agent went quiet would be disconnected, and its Agent's conditions say nothing of its
    // approval); its calls are left out of the figures, taken here.
    let summary = stats.summary();
    let phase_summary = stats.phase_summary(&PHASES);
    let errors = stats.errors();
    let timeline = stats.timeline();
    stats.set_phase("resume");
    let cpu_after = cpu_at(&d);
    let rss = procs::rss_peak_mib(d.server.pid());
    let hub_processes: Vec<HubProcess> = d
        .hub_processes()
        .into_iter()
        .zip(cpu_after.1.iter().zip(&cpu_before.1))
        .map(|((what, pid), (after, before))| HubProcess {
            what,
            cpu: after - before,
            rss_peak_mib: procs::rss_peak_mib(pid),
            rss_mib: procs::rss_mib(pid),
        })
        .collect();
    let load_end = load_average();
    let after_lifecycle = d.counts().await?;
    phases.push(("bind -> installed", (t_installed - t_bind_start).as_secs_f64()));
    phases.push(("cluster deleted -> known-unbound", (t_done - t_installed).as_secs_f64()));

    // The controller's own view of its Kubernetes requests and caches, when it has those series.
    let metrics = client.get(format!("{}/metrics", d.server.url)).send().await?.text().await?;
    let kube_series: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            ["bootstream_kube_requests_total", "bootstream_kube_cache_objects", "bootstream_kube_watch_restarts_total"]
                .iter()
                .any(|m| l.starts_with(m))
        })
        .collect();

    let watch_restarts = backend.on_a_hub().then(|| {
        kube_series
            .iter()
            .filter(|l| l.starts_with("bootstream_kube_watch_restarts_total"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
            .sum()
    });
    let resume = if opts.resume { Some(resume(&mut d).await?) } else { None };
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }

    // The server takes its polling jitter from the environment the benchmark runs in.
    let jitter = std::env::var("BOOTSTREAM_POLL_JITTER").unwrap_or_else(|_| "the default".into());
    let shape = match opts.shape {
        Shape::Pool => format!("{} clusters of {}", layout.clusters.len(), opts.per_cluster),
        Shape::Ztp => format!(
            "ztp: {} InfraEnvs, {} single-node clusters, {} BareMetalHosts",
            layout.infraenvs.len(),
            layout.clusters.len(),
            layout.bmhs.len()
        ),
    };
    println!("\n=== {} backend", backend.name());
    println!(
        "hosts {hosts}, {shape}, booted over {} s, {} s between install stages, poll jitter {jitter}",
        opts.boot_seconds, opts.stage_seconds
    );
    for (what, s) in &phases {
        println!("{what:<36} {s:>8.1} s");
    }
    if let Some(n) = bmh_links {
        println!("Agents linked to a BareMetalHost: {n} of {}", layout.bmhs.len());
    }
    println!("{:<36} {:>8.1} s", "whole run", t_done.as_secs_f64());
    println!("{:<14} {:>9} {:>9} {:>9} {:>9}", "OPERATION", "COUNT", "P50 MS", "P99 MS", "MAX MS");
    for (op, n, p50, p99, max) in &summary {
        println!("{op:<14} {n:>9} {p50:>9.2} {p99:>9.2} {max:>9.2}");
    }
    println!("{:<14} {:>9} {:>9} {:>9} {:>9}", "PHASE", "CALLS", "P50 MS", "P99 MS", "MAX MS");
    for (phase, n, p50, p99, max) in phase_summary {
        println!("{phase:<14} {n:>9} {p50:>9.2} {p99:>9.2} {max:>9.2}");
    }
    for (e, n) in errors {
        println!("error {e}: {n}");
    }
    let lifecycle = diff(&after_lifecycle, &before_fleet);
    if backend.on_a_hub() {
        println!("API requests to the API server by client, verb and resource:");
        // START: until the controller answered /ready (its watches and initial lists); SETUP: the
        // InfraEnvs (and BareMetalHosts) until their images are made; LIFECYCLE: from the fleet's
        // first boot to the end of the lifecycle, what the figures per host are of.
        println!(
            "{:<12} {:<9} {:<28} {:>9} {:>9} {:>9} {:>9}",
            "CLIENT", "VERB", "RESOURCE", "START", "SETUP", "LIFECYCLE", "PER HOST"
        );
        let started = diff(&after_start, &Vec::new());
        let setup = diff(&before_fleet, &after_start);
        let mut keys: Vec<_> = started.keys().chain(setup.keys()).chain(lifecycle.keys()).cloned().collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let n = |m: &BTreeMap<_, u64>| m.get(&k).copied().unwrap_or(0);
            let (st, s, l) = (n(&started), n(&setup), n(&lifecycle));
            println!(
                "{:<12} {:<9} {:<28} {st:>9} {s:>9} {l:>9} {:>9.2}",
                client_name(&k.0),
                k.1,
                k.2,
                l as f64 / hosts as f64
            );
        }
        if kube_series.is_empty() {
            println!("(the controller's /metrics has no bootstream_kube_* series)");
        }
        for l in &kube_series {
            println!("{l}");
        }
    }
    if let Some(r) = &resume {
        println!(
            "resume: SIGTERM -> exited {:.2} s; start -> /ready {:.2} s; approval flipped -> in the Agent's status {:.2} s",
            r.stop, r.ready, r.change
        );
        if let Some(req) = &r.requests {
            let by_verb = by_verb(req, procs::CONTROLLER_TOKEN);
            println!("resume: the new controller's requests until then: {by_verb:?}");
        }
    }
    timeline::print_timeline(&timeline, &samples.lock().unwrap(), [t_pool, t_bind_start, t_installed]);

    let controller_lists_after_sync = backend
        .on_a_hub()
        .then(|| by_verb(&after_lifecycle, procs::CONTROLLER_TOKEN).get("list").copied().unwrap_or(0))
        .map(|after| after - by_verb(&before_fleet, procs::CONTROLLER_TOKEN).get("list").copied().unwrap_or(0));
    let all = summary.last().cloned().unwrap_or_default();
    let reads_per_change = {
        let samples = samples.lock().unwrap();
        match (samples.first(), samples.last()) {
            (Some(a), Some(b)) if b.changes_fed > a.changes_fed => {
                let changes = b.changes_fed - a.changes_fed;
                ((b.objects_read - a.objects_read) / changes, (b.records_visited - a.records_visited) / changes)
            }
            _ => (f64::NAN, f64::NAN),
        }
    };
    Ok(Report {
        backend: backend.name(),
        hosts,
        bound,
        phases,
        whole: t_done.as_secs_f64(),
        agent_calls: all.1,
        p99_ms: all.3,
        server_rss_mib: rss,
        server_cpu: cpu_after.0 - cpu_before.0,
        hub_processes,
        load: (load_start, load_end),
        agents_cpu: cpu_after.2 - cpu_before.2,
        requests: backend.on_a_hub().then(|| lifecycle.into_iter().collect()),
        controller_lists_after_sync,
        watch_restarts,
        resume,
        state_changes: bound * BOUND_HOST_PATH.len() + (hosts - bound) * FREE_HOST_PATH.len(),
        reads_per_change,
    })
}

fn client_name(token: &str) -> &str {
    match token {
        procs::CONTROLLER_TOKEN => "controller",
        BENCH_TOKEN => "benchmark",
        "" => "anonymous",
        other => other,
    }
}

/// `after - before`, per key.
fn diff(after: &Counts, before: &Counts) -> BTreeMap<(String, String, String), u64> {
    let before: BTreeMap<_, _> = before.iter().cloned().collect();
    after
        .iter()
        .map(|(k, n)| (k.clone(), n.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// One client's requests by verb.
fn by_verb(counts: &Counts, token: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((t, verb, _), n) in counts {
        if t == token {
            *out.entry(verb.clone()).or_default() += n;
        }
    }
    out
}

/// Stops the server (SIGTERM: a controller releases its Lease) and starts a new one on the same
/// data directory and port, then flips one Agent's approval and times until the new server has
/// written the change into the Agent's `RequirementsMet` condition.
async fn resume(d: &mut Deployment) -> anyhow::Result<Resume> {
    let list = agents(d).await?;
    // Not one linked to a BareMetalHost: the BMAC approves those again.
    let agent = list
        .iter()
        .find(|a| a.state() == "known-unbound" && a.bmh().is_none())
        .ok_or_else(|| anyhow::anyhow!("no Agent in the pool without a BareMetalHost"))?;
    let (ns, name, approved) = (agent.metadata.namespace.clone(), agent.metadata.name.clone(), agent.spec.approved);
    let t = Instant::now();
    let status = tokio::task::block_in_place(|| d.server.terminate())?;
    anyhow::ensure!(status.success(), "the server ended with {status}");
    let stop = t.elapsed().as_secs_f64();
    let before = d.counts().await?;
    d.starts += 1;
    let t = Instant::now();
    d.server = Server::start(server_command(d.backend, &d.bin, d.dir.path(), d.port, d.starts))?;
    procs::until_ready(&simulate::client(), &d.server.url, Duration::from_secs(600)).await?;
    let ready = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let url = format!("{}/{AGENTS}/namespaces/{ns}/agents/{name}", d.api);
    let r = d
        .client
        .patch(&url)
        .header("content-type", "application/merge-patch+json")
        .body(json!({"spec": {"approved": !approved}}).to_string())
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "flipping the approval: {}", r.text().await?);
    let want_not_approved = approved;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let a: AgentView = d.client.get(&url).send().await?.error_for_status()?.json().await?;
        if (a.condition_reason("RequirementsMet") == Some("AgentIsNotApproved")) == want_not_approved {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the new server did not reflect the approval");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let change = t.elapsed().as_secs_f64();
    let requests = if d.backend.on_a_hub() {
        let mut only_controller = diff(&d.counts().await?, &before);
        only_controller.retain(|k, _| k.0 == procs::CONTROLLER_TOKEN);
        Some(only_controller.into_iter().collect())
    } else {
        None
    };
    Ok(Resume { stop, ready, change, requests })
}

/// Both backends' figures side by side, and the floor.
fn print_summary(opts: &Options, reports: &[Report], floor: Option<&floor::Floor>) {
    println!("\n=== summary: {} hosts", opts.hosts);
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |label: &str, f: &dyn Fn(&Report) -> String| {
        rows.push((label.to_string(), reports.iter().map(f).collect()));
    };
    let us = |cpu: f64, n: usize| format!("{:.0}", cpu / n.max(1) as f64 * 1e6);
    row("hosts (bound)", &|r| format!("{} ({})", r.hosts, r.bound));
    row("load average at start, end", &|r| format!("{:.1}, {:.1}", r.load.0, r.load.1));
    for (i, (what, _)) in reports.first().map(|r| r.phases.clone()).unwrap_or_default().iter().enumerate() {
        row(&format!("{what} s"), &|r| r.phases.get(i).map(|p| format!("{:.1}", p.1)).unwrap_or_default());
    }
    row("whole run s", &|r| format!("{:.1}", r.whole));
    row("agent API calls", &|r| r.agent_calls.to_string());
    row("agent API p99 ms", &|r| format!("{:.2}", r.p99_ms));
    row("server peak RSS MiB", &|r| format!("{:.1}", r.server_rss_mib));
    row("server CPU s", &|r| format!("{:.2}", r.server_cpu));
    for what in ["API server", "etcd"] {
        row(&format!("{what} CPU s"), &|r| r.hub(what).map(|p| format!("{:.2}", p.cpu)).unwrap_or("-".into()));
        row(&format!("{what} peak RSS MiB"), &|r| {
            r.hub(what).map(|p| format!("{:.1}", p.rss_peak_mib)).unwrap_or("-".into())
        });
        row(&format!("{what} RSS at the end MiB"), &|r| {
            r.hub(what).map(|p| format!("{:.1}", p.rss_mib)).unwrap_or("-".into())
        });
    }
    row("simulated agents + driver CPU s", &|r| format!("{:.2}", r.agents_cpu));
    row("server CPU µs per agent call", &|r| us(r.server_cpu, r.agent_calls));
    row("server+API server(+etcd) CPU µs per call", &|r| us(r.server_cpu + r.hub_cpu(), r.agent_calls));
    row("server+API server(+etcd) CPU ms per host", &|r| {
        format!("{:.2}", (r.server_cpu + r.hub_cpu()) / r.hosts as f64 * 1e3)
    });
    row("agents CPU µs per call", &|r| us(r.agents_cpu, r.agent_calls));
    row("store objects read per change", &|r| format!("{:.2}", r.reads_per_change.0));
    row("pool host records visited per change", &|r| format!("{:.2}", r.reads_per_change.1));
    if let Some(f) = floor {
        let nginx = f.nginx_us_per_request();
        row("server CPU per call / nginx floor", &|r| {
            format!("{:.1}x", r.server_cpu / r.agent_calls.max(1) as f64 * 1e6 / nginx)
        });
        row("(server+API server) per call / floor", &|r| {
            format!("{:.1}x", (r.server_cpu + r.hub_cpu()) / r.agent_calls.max(1) as f64 * 1e6 / nginx)
        });
    }
    row("host state changes (nominal)", &|r| r.state_changes.to_string());
    // On the real hub the benchmark's requests are not told apart: kube-apiserver counts every client's
    // together ("all clients").
    for (who, token) in
        [("controller", procs::CONTROLLER_TOKEN), ("benchmark", BENCH_TOKEN), ("hub: all clients", HUB_CLIENTS)]
    {
        // A client's requests, or none when this backend does not count that client.
        let of = |r: &Report| r.requests.as_ref().map(|c| by_verb(c, token)).filter(|v| !v.is_empty());
        for verb in ["get", "list", "watch", "create", "update", "patch", "apply", "delete"] {
            row(&format!("{who} {} requests", verb.to_uppercase()), &|r| {
                of(r).map(|v| v.get(verb).copied().unwrap_or(0).to_string()).unwrap_or("-".into())
            });
        }
        row(&format!("{who} requests per host"), &|r| {
            of(r).map(|v| format!("{:.1}", v.values().sum::<u64>() as f64 / r.hosts as f64)).unwrap_or("-".into())
        });
        row(&format!("{who} requests per state change"), &|r| {
            of(r)
                .map(|v| format!("{:.2}", v.values().sum::<u64>() as f64 / r.state_changes as f64))
                .unwrap_or("-".into())
        });
    }
    row("controller LISTs after initial sync", &|r| {
        r.controller_lists_after_sync.map(|n| n.to_string()).unwrap_or("-".into())
    });
    row("controller watch restarts", &|r| r.watch_restarts.map(|n| n.to_string()).unwrap_or("-".into()));
    row("resume: SIGTERM -> exited s", &|r| r.resume.as_ref().map(|x| format!("{:.2}", x.stop)).unwrap_or("-".into()));
    row("resume: start -> /ready s", &|r| r.resume.as_ref().map(|x| format!("{:.2}", x.ready)).unwrap_or("-".into()));
    row("resume: change -> in status s", &|r| {
        r.resume.as_ref().map(|x| format!("{:.2}", x.change)).unwrap_or("-".into())
    });
    row("resume: SIGTERM -> change in status s", &|r| {
        r.resume.as_ref().map(|x| format!("{:.2}", x.stop + x.ready + x.change)).unwrap_or("-".into())
    });
    print!("{:<40}", "");
    for r in reports {
        print!(" {:>12}", r.backend);
    }
    println!();
    for (label, values) in rows {
        print!("{label:<40}");
        for v in values {
            print!(" {v:>12}");
        }
        println!();
    }
    if let Some(f) = floor {
        println!(
            "nginx floor: {} clients, {} requests in {:.1} s: nginx workers {:.1} µs CPU per request, client {:.1} µs per request; goal: server CPU per call <= 4x the floor = {:.0} µs",
            f.clients,
            f.requests,
            f.seconds,
            f.nginx_us_per_request(),
            f.client_us_per_request(),
            4.0 * f.nginx_us_per_request()
        );
    }
    println!(
        "host state changes: {} per bound host ({}), {} per free-pool host; from the state machine's path, not observed",
        BOUND_HOST_PATH.len(),
        BOUND_HOST_PATH.join(" -> "),
        FREE_HOST_PATH.len()
    );
}
