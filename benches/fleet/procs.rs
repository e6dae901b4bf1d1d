//! The processes the benchmark runs and what `/proc` says of them: the bootstream server under
//! test (`serve`, or `controller` on a hub), and, for the Kubernetes backend, the hub's API server,
//! which is this benchmark's own binary run again with `--api-server-process DIR`, so that its CPU
//! is counted apart from the simulated agents'.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use bootstream::store::sqlite::SqliteStore;
use bootstream::testkit::hub::ApiServer;

/// The bearer tokens the API server tells its clients apart by (it authorizes every token: the
/// split is only for the counts).
pub const CONTROLLER_TOKEN: &str = "bootstream-controller";
pub const BENCH_TOKEN: &str = "fleet-bench";

/// CPU seconds (user + system) a process used so far (`pid` may be `self` or `PID/task/TID`).
pub fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat (state, field 3, comes first after the name).
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// CPU seconds of a process's threads by name: (async runtime, store writer). Tokio gives its workers
/// and its blocking pool the same name.
pub fn thread_cpu(pid: &str) -> (f64, f64) {
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

/// A process's peak RSS (VmHWM), in MiB.
pub fn rss_peak_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM:")
}

/// A process's RSS now (VmRSS), in MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

fn status_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// A loopback port free right now, for a server that must come back on the same address after a
/// restart (the agents and the signed URLs in the statuses name it).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A port free with the one after it, below the kernel's range of ephemeral ports: a fleet's
/// twenty thousand client sockets take ports of that range, so that the one after a free
/// ephemeral port is often taken by the time a server binds it.
pub fn free_port_pair() -> anyhow::Result<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let ephemeral_start = range.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()).unwrap_or(32768);
    let below = 10_000..ephemeral_start.saturating_sub(1).max(10_001);
    // Start somewhere else in the range each time (two benchmarks may run at once).
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos() as usize;
    let start = std::process::id() as usize ^ nanos;
    let span = below.len();
    for i in 0..span {
        let port = below.start + (start.wrapping_add(i) % span) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 1) {
            return Ok(port);
        }
    }
    anyhow::bail!("no two free ports below {ephemeral_start}")
}

/// A bootstream process, killed however the benchmark ends (an early error must not leave it running).
pub struct Server {
    child: Child,
    /// `http://ADDRESS` of its main listener.
    pub url: String,
}

impl Server {
    /// Runs `command` and waits until it prints that it listens. Its further output is read (and
    /// dropped) by a thread: a closed pipe would make its next print fail.
    pub fn start(mut command: Command) -> anyhow::Result<Server> {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let url = loop {
            let Some(line) = lines.next() else {
                anyhow::bail!("the server ended before it listened: {:?}", child.wait()?);
            };
            if let Some(addr) = line?.split("listening on http://").nth(1).and_then(|s| s.split_whitespace().next()) {
                break format!("http://{addr}");
            }
        };
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        Ok(Server { child, url })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, as Kubernetes stops a pod, and waits for the process to end.
    pub fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        Ok(self.child.wait()?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `url`/ready answers 200.
pub async fn until_ready(client: &reqwest::Client, url: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while client.get(format!("{url}/ready")).send().await.map(|r| !r.status().is_success()).unwrap_or(true) {
        anyhow::ensure!(Instant::now() < deadline, "{url} not ready within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Requests the API server answered, by (client token, verb, resource).
pub type Counts = Vec<((String, String, String), u64)>;

/// The hub's API server, in a process of its own. It answers `counts` lines on its stdin with its
/// request counts as one JSON line, and ends when its stdin closes (when the benchmark ends,
/// however it ends).
pub struct ApiServerProcess {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub url: String,
}

impl ApiServerProcess {
    pub fn start(dir: &Path) -> anyhow::Result<ApiServerProcess> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--api-server-process")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut url = String::new();
        stdout.read_line(&mut url)?;
        anyhow::ensure!(url.starts_with("http://"), "the API server process said {url:?}");
        Ok(ApiServerProcess { child, stdin, stdout, url: url.trim().to_string() })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn counts(&mut self) -> anyhow::Result<Counts> {
        writeln!(self.stdin, "counts")?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        Ok(serde_json::from_str(&line)?)
    }
}

impl Drop for ApiServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of `--api-server-process DIR`: bootstream's Kubernetes API over a SQLite file in DIR,
/// served on a loopback port; writes DIR/controller.kubeconfig, prints its URL, then answers
/// `counts` on stdin until stdin closes.
pub fn api_server_process(dir: &Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let server = rt.block_on(async {
        let store = SqliteStore::open(&dir.join("cluster.db"))?;
        anyhow::Ok(ApiServer::start(store).await)
    })?;
    server.count_requests_only();
    std::fs::write(dir.join("controller.kubeconfig"), server.kubeconfig_for(CONTROLLER_TOKEN))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", server.url)?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        if line?.trim() == "counts" {
            let counts: Counts = server
                .request_counts()
                .into_iter()
                .map(|((token, verb, resource), n)| ((token, verb.to_string(), resource), n))
                .collect();
            writeln!(out, "{}", serde_json::to_string(&counts)?)?;
            out.flush()?;
        }
    }
    Ok(())
}
