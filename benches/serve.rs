//! The image path side by side with its peers, in one run on one machine:
//! - bootstream serving an InfraEnv's customized full ISO, minimal ISO and PXE initrd (Ignition and
//!   static-network ramdisk spliced in as they stream), and nginx (`sendfile on`) serving pre-built
//!   copies of exactly the same bytes, under the same loopback load of 1, 8 and 64 clients;
//! - what `coreos-installer iso ignition embed` costs to build such a copy, per InfraEnv;
//! - time to first byte: a cached InfraEnv (beside nginx's) and a new one with 100 NMStateConfigs
//!   (beside the coreos-installer copy it replaces);
//! - private and kernel socket memory with 1,000 slow clients downloading (beside nginx);
//! - start-up with 5 base images (beside nginx's start-up with the 5 files).
//!
//! `cargo bench --bench serve -- [ROOTFS_MIB] [SECONDS] [ROUNDS]` (defaults 1024, 4, 3). Needs nginx
//! (`apt-get install nginx-light`) and coreos-installer on PATH; with gnuplot (`gnuplot-nox`) it also
//! draws `target/bench-serve/throughput.png` with `benches/throughput.gp`. Generated base ISOs are
//! kept in `target/bench-serve/` between runs. Servers take turns within each measurement round;
//! figures are medians of the rounds.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const NS: &str = "bench";

static BEGAN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Prints how far the bench is, with the time since it started.
fn phase(what: &str) {
    eprintln!("[{:6.1} s] {what}", BEGAN.get_or_init(Instant::now).elapsed().as_secs_f64());
}
const VERSION: &str = "4.20";

struct Server {
    name: &'static str,
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master then stops its workers (SIGKILL would leave them running).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The server's processes: itself and its children (nginx's workers).
    fn pids(&self) -> Vec<u32> {
        let root = self.child.id();
        let mut pids = vec![root];
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
                if stat_fields(pid).is_some_and(|f| f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(root)) {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// CPU seconds (user + system) its processes have used.
    fn cpu_seconds(&self) -> f64 {
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        self.pids()
            .into_iter()
            .filter_map(stat_fields)
            .map(|f| {
                // After the command: state(0) ppid(1) ... utime(11) stime(12).
                let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
                (n(11) + n(12)) / ticks
            })
            .sum()
    }

    /// Private anonymous memory (`RssAnon`) of all its processes, in bytes. Mapped page cache is
    /// shared with every other reader of the file and does not count.
    fn rss_anon(&self) -> u64 {
        self.pids().into_iter().filter_map(|pid| status_kib(pid, "RssAnon:")).sum::<u64>() * 1024
    }
}

/// The fields of /proc/PID/stat after the command name.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// A `kB` field of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(field)).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU seconds the whole machine has been busy (user, nice, system, irq and softirq of every CPU;
/// not idle, iowait or steal), and of those the softirq seconds (`/proc/stat`).
fn machine_cpu_seconds() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .map(|l| l.split_whitespace().filter_map(|v| v.parse().ok()).collect())
        .unwrap_or_default();
    let n = |i: usize| f.get(i).copied().unwrap_or(0.0);
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // user(0) nice(1) system(2) idle(3) iowait(4) irq(5) softirq(6) steal(7)
    ((n(0) + n(1) + n(2) + n(5) + n(6)) / ticks, n(6) / ticks)
}

/// TCP segments the machine has sent (`OutSegs` of `/proc/net/snmp`): on loopback, the server's
/// data segments and the client's acknowledgements.
fn tcp_segments_sent() -> u64 {
    let text = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = text.lines().filter_map(|l| l.strip_prefix("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "OutSegs")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Drops `path` from the page cache and reads it again from start to end.
fn recache(path: &Path) -> Result<()> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // Dirty pages (the copies just written) are not dropped: written back first.
    file.sync_data().with_context(|| format!("syncing {}", path.display()))?;
    // SAFETY: the descriptor is open; fadvise only advises.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut buf = vec![0u8; 16 << 20];
    while file.read(&mut buf)? > 0 {}
    Ok(())
}

/// Memory of all TCP sockets of the machine (`/proc/net/sockstat`, `TCP: ... mem PAGES`), in bytes.
fn tcp_socket_memory() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    let pages = text
        .lines()
        .find_map(|l| l.strip_prefix("TCP:"))
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.iter().position(|w| *w == "mem").and_then(|i| f.get(i + 1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// What a [`Conn`] talks over: plain TCP, or TLS to the API's own listener.
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

/// A keep-alive HTTP/1.1 connection for API calls (responses carry Content-Length).
struct Conn {
    addr: String,
    stream: Option<Box<dyn Stream>>,
    buf: Vec<u8>,
    /// `Authorization` header line for the resource API, if any.
    auth: String,
    /// TLS to the server's API listener, trusting its certificate.
    tls: Option<tokio_rustls::TlsConnector>,
}

impl Conn {
    fn new(addr: &str) -> Conn {
        Conn { addr: addr.to_string(), stream: None, buf: Vec::new(), auth: String::new(), tls: None }
    }

    /// A connection to the server's API (its HTTPS listener, named in DATA_DIR/kubeconfig) that
    /// sends the server's API token (from its data directory).
    fn to_api_of(data_dir: &Path) -> Result<Conn> {
        let token = std::fs::read_to_string(data_dir.join("api-token")).context("the server's API token")?;
        let kubeconfig = std::fs::read_to_string(data_dir.join("kubeconfig")).context("the server's kubeconfig")?;
        let addr = kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: https://"))
            .context("no https server in the kubeconfig")?
            .to_string();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem::parse_many(std::fs::read(data_dir.join("api-tls/tls.crt"))?)? {
            roots.add(rustls::pki_types::CertificateDer::from(cert.into_contents()))?;
        }
        let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        Ok(Conn {
            auth: format!("Authorization: Bearer {}\r\n", token.trim()),
            tls: Some(tokio_rustls::TlsConnector::from(Arc::new(config))),
            ..Conn::new(&addr)
        })
    }

    async fn request(&mut self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>)> {
        match self.try_request(method, path, body).await {
            Ok(r) => Ok(r),
            // The server may close an idle keep-alive connection: one retry on a fresh one.
            Err(_) => {
                self.stream = None;
                self.try_request(method, path, body).await
            }
        }
    }

    async fn try_request(&mut self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>)> {
        if self.stream.is_none() {
            let tcp = TcpStream::connect(&self.addr).await?;
            self.stream = Some(match &self.tls {
                Some(tls) => {
                    let host = self.addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(&self.addr).to_string();
                    let name = rustls::pki_types::ServerName::try_from(host)?;
                    Box::new(tls.connect(name, tcp).await?)
                }
                None => Box::new(tcp),
            });
            self.buf.clear();
        }
        let s = self.stream.as_mut().unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            self.auth,
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        let (status, length, head_len) = loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let (status, length) = parse_head(&self.buf[..end + 4])?;
                break (status, length, end + 4);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                bail!("connection closed");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        };
        let length = length.context("no content-length")? as usize;
        while self.buf.len() < head_len + length {
            let mut chunk = [0u8; 64 * 1024];
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                bail!("connection closed in the body");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        let body = self.buf[head_len..head_len + length].to_vec();
        self.buf.drain(..head_len + length);
        Ok((status, body))
    }
}

/// Status and Content-Length of a response head.
fn parse_head(head: &[u8]) -> Result<(u16, Option<u64>)> {
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).context("no status line")?;
    let length = text.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    Ok((status, length))
}

/// Reads a response head from `s`; returns status, Content-Length and how many body bytes came with it.
async fn read_head(s: &mut TcpStream, buf: &mut [u8]) -> Result<(u16, u64, usize)> {
    let mut have = 0;
    loop {
        let n = s.read(&mut buf[have..]).await?;
        if n == 0 {
            bail!("connection closed in the headers");
        }
        have += n;
        if let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
            let (status, length) = parse_head(&buf[..end + 4])?;
            return Ok((status, length.context("no content-length")?, have - end - 4));
        }
        if have == buf.len() {
            bail!("response head too large");
        }
    }
}

/// `clients` connections downloading `path` over and over until `seconds` pass; bytes received.
async fn load(addr: &str, path: &str, clients: usize, seconds: f64) -> Result<u64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (addr, path) = (addr.to_string(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            let mut s = TcpStream::connect(&addr).await?;
            let mut buf = vec![0u8; 256 * 1024];
            let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            'requests: while tokio::time::Instant::now() < deadline {
                s.write_all(request.as_bytes()).await?;
                let (status, length, extra) = read_head(&mut s, &mut buf[..16 * 1024]).await?;
                if status != 200 {
                    bail!("unexpected status {status}");
                }
                let mut left = length - extra as u64;
                got += extra as u64;
                while left > 0 {
                    let want = buf.len().min(left as usize);
                    let n = tokio::select! {
                        n = s.read(&mut buf[..want]) => n?,
                        _ = tokio::time::sleep_until(deadline) => break 'requests,
                    };
                    if n == 0 {
                        bail!("connection closed in the body");
                    }
                    left -= n as u64;
                    got += n as u64;
                }
            }
            Ok::<u64, anyhow::Error>(got)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total)
}

/// Time from sending a GET on a fresh connection to the first byte of a 200 response; the
/// connection is then dropped (the client goes away, as a cancelled download).
async fn first_byte(addr: &str, path: &str) -> Result<Duration> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let started = Instant::now();
    s.write_all(request.as_bytes()).await?;
    let mut head = [0u8; 12];
    let n = s.read(&mut head).await?;
    let took = started.elapsed();
    let mut have = n;
    while have < 12 {
        let n = s.read(&mut head[have..]).await?;
        if n == 0 {
            bail!("closed before the status line");
        }
        have += n;
    }
    if &head[9..12] != b"200" {
        bail!("GET {path}: {}", String::from_utf8_lossy(&head));
    }
    Ok(took)
}

fn median(v: &mut [f64]) -> f64 {
    percentile(v, 0.5)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[((v.len() - 1) as f64 * p).round() as usize] }
}

fn bootstream_bin() -> String {
    std::env::var("BOOTSTREAM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bootstream").to_string())
}

/// Starts `bootstream serve` with `images` (version, path) and the data directory `data`.
fn start_bootstream(data: &Path, images: &[(String, PathBuf)]) -> Result<Server> {
    let mut cmd = Command::new(bootstream_bin());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data);
    for (version, path) in images {
        cmd.arg("--os-image").arg(format!("{version}:x86_64:{}", path.display()));
    }
    let mut child = cmd
        .env("RUST_LOG", std::env::var("SERVE_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting bootstream")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line)?;
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).context("listening line")?;
    Ok(Server { name: "bootstream", child, addr: addr.to_string() })
}

/// Polls `/ready` until it answers 200.
async fn wait_ready(addr: &str, every: Duration, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if Conn::new(addr).request("GET", "/ready", None).await.map(|r| r.0).unwrap_or(0) == 200 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("bootstream never became ready");
        }
        tokio::time::sleep(every).await;
    }
}

/// Starts nginx (`sendfile on`) serving the directory `www`.
fn start_nginx(work: &Path, www: &Path) -> Result<Server> {
    start_nginx_named(work, www, "nginx", "")
}

/// [`start_nginx`] with its configuration, pid and log files named `name` in `work`, and
/// `listen_options` after its address (such as `reuseport`).
fn start_nginx_named(work: &Path, www: &Path, name: &'static str, listen_options: &str) -> Result<Server> {
    let port = free_port();
    let w = work.display();
    let conf = format!(
        "worker_processes auto;\ndaemon off;\npid {w}/{name}.pid;\nerror_log {w}/{name}-error.log;\n\
         worker_rlimit_nofile 20000;\nevents {{ worker_connections 8192; }}\n\
         http {{\n  sendfile on;\n  tcp_nopush on;\n  access_log off;\n  keepalive_requests 1000000;\n\
           default_type application/octet-stream;\n\
           client_body_temp_path {w}/tmp-body;\n  proxy_temp_path {w}/tmp-proxy;\n  fastcgi_temp_path {w}/tmp-fcgi;\n\
           uwsgi_temp_path {w}/tmp-uwsgi;\n  scgi_temp_path {w}/tmp-scgi;\n\
           server {{ listen 127.0.0.1:{port} {listen_options}; root {}; }}\n}}\n",
        www.display()
    );
    let conf_path = work.join(format!("{name}.conf"));
    std::fs::write(&conf_path, conf)?;
    let child = Command::new("nginx")
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(work)
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting nginx (apt-get install nginx-light)")?;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        if Instant::now() > deadline {
            bail!("nginx did not start; see {w}/{name}-error.log");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(Server { name, child, addr })
}

/// Puts every thread of `pid` on the CPUs of `list` (as `taskset -a -p -c`).
fn pin(pid: u32, list: &str) -> Result<()> {
    let out = Command::new("taskset").args(["-a", "-p", "-c", list, &pid.to_string()]).output().context("taskset")?;
    if !out.status.success() {
        bail!("taskset {pid}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// A static network config for host `i`, labelled `set`.
fn nmstate(i: usize, set: &str) -> Value {
    let mac = format!("02:00:00:{:02x}:{:02x}:{:02x}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
    json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "NMStateConfig",
           "metadata": {"name": format!("host-{i}"), "namespace": NS, "labels": {"set": set}},
           "spec": {"config": {"interfaces": [{"name": "eth0", "type": "ethernet", "state": "up", "mac-address": mac,
                        "ipv4": {"enabled": true, "dhcp": false,
                                 "address": [{"ip": format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff), "prefix-length": 8}]}},
                        ],
                        "dns-resolver": {"config": {"server": ["10.0.0.1"]}},
                        "routes": {"config": [{"destination": "0.0.0.0/0", "next-hop-address": "10.0.0.1", "next-hop-interface": "eth0"}]}},
                    "interfaces": [{"name": "eth0", "macAddress": mac}]}})
}

fn infraenv(name: &str, set: &str) -> Value {
    json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"pullSecretRef": {"name": "ps"}, "sshAuthorizedKey": "ssh-ed25519 AAAA bench",
                    "nmStateConfigLabelSelector": {"matchLabels": {"set": set}}}})
}

const IE_PATH: &str = "/apis/agent-install.openshift.io/v1beta1/namespaces/bench/infraenvs";
const NMSTATE_PATH: &str = "/apis/agent-install.openshift.io/v1beta1/namespaces/bench/nmstateconfigs";

/// The server's counters of its store's writer, checkpointer and controllers (from `/metrics`), by
/// series: what a slow create waited behind.
async fn server_work(api: &mut Conn) -> Result<BTreeMap<String, f64>> {
    let (status, body) = api.request("GET", "/metrics", None).await?;
    if status != 200 {
        bail!("GET /metrics: {status}");
    }
    Ok(String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with("bootstream_store_") || l.starts_with("bootstream_controller_reconcile"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(series, v)| Some((series.to_string(), v.parse().ok()?))))
        .collect())
}

/// Prints how much each of the server's counters grew between `before` and `after`.
fn print_server_work(during: &str, before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) {
    eprintln!("server work during {during}:");
    for (series, v) in after {
        let grew = v - before.get(series).copied().unwrap_or(0.0);
        if grew != 0.0 && !series.ends_with("_sum") {
            eprintln!("  {series} +{grew:.3}");
        }
    }
}

async fn create(api: &mut Conn, path: &str, object: &Value) -> Result<Value> {
    let (status, body) = api.request("POST", path, Some(object)).await?;
    if status >= 300 {
        bail!("POST {path}: {status} {}", String::from_utf8_lossy(&body));
    }
    Ok(serde_json::from_slice(&body)?)
}

/// Path and query of a URL.
fn path_of(url: &str) -> String {
    format!("/{}", url.split("://").nth(1).unwrap().split_once('/').unwrap().1)
}

/// Whole body of a GET (one connection).
async fn download(addr: &str, path: &str) -> Result<Vec<u8>> {
    let (status, body) = Conn::new(addr).request("GET", path, None).await?;
    if status != 200 {
        bail!("GET {path}: {status}");
    }
    Ok(body)
}

/// Generates (once) a live ISO with a `mib` MiB incompressible rootfs drawn from `seed`.
fn base_iso(work: &Path, mib: usize, seed: u64) -> Result<PathBuf> {
    // The name says the layout: bump it when `large_sample_iso_bytes` changes.
    let path = work.join(format!("base-{mib}m-{seed}-v2.iso"));
    if !path.exists() {
        let started = Instant::now();
        let bytes = bootstream::formats::sample::large_sample_iso_bytes_seeded(mib << 20, seed)?;
        let tmp = work.join("base.tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)?;
        eprintln!("generated {} in {:.1} s", path.display(), started.elapsed().as_secs_f64());
    }
    Ok(path)
}

struct Artifact {
    name: &'static str,
    /// Its path on bootstream and on nginx.
    paths: [String; 2],
    len: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rootfs_mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4.0);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    // SERVE_BENCH_ONLY=throughput,ttfb,memory,startup runs only those parts (all by default).
    let only = std::env::var("SERVE_BENCH_ONLY").unwrap_or_default();
    let runs = |part: &str| only.is_empty() || only.split(',').any(|p| p.trim() == part);
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-serve");
    BEGAN.get_or_init(Instant::now);
    std::fs::create_dir_all(&work)?;

    let base = base_iso(&work, rootfs_mib, 0x6f0c)?;
    let base_len = std::fs::metadata(&base)?.len();
    phase("base ISO ready");

    // bootstream with one InfraEnv: pull secret, SSH key, 8 static network configs.
    let data = work.join("data");
    let _ = std::fs::remove_dir_all(&data);
    let bootstream = start_bootstream(&data, &[(VERSION.to_string(), base.clone())])?;
    let addr = bootstream.addr.clone();
    wait_ready(&addr, Duration::from_millis(20), Duration::from_secs(120)).await?;
    let mut api = Conn::to_api_of(&data)?;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ps", "namespace": NS},
                        "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"dXNlcjpwYXNz\"}}}"}});
    create(&mut api, &format!("/api/v1/namespaces/{NS}/secrets"), &secret).await?;
    for i in 0..8 {
        create(&mut api, NMSTATE_PATH, &nmstate(i, "pool")).await?;
    }
    create(&mut api, IE_PATH, &infraenv("pool", "pool")).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let (_, body) = api.request("GET", &format!("{IE_PATH}/pool"), None).await?;
        let v: Value = serde_json::from_slice(&body)?;
        if v["status"]["isoDownloadURL"].as_str().is_some_and(|u| !u.is_empty()) {
            break v;
        }
        if Instant::now() > deadline {
            bail!("the InfraEnv got no image: {v}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let iso_path = path_of(status["status"]["isoDownloadURL"].as_str().unwrap());
    let initrd_path = path_of(status["status"]["bootArtifacts"]["initrd"].as_str().context("initrd URL")?);
    let minimal_path = iso_path.replace("/full.iso", "/minimal.iso");
    if minimal_path == iso_path {
        bail!("no /full.iso in {iso_path}");
    }
    phase("bootstream ready, InfraEnv has its image");

    // nginx serves copies of exactly the bytes bootstream serves.
    let www = work.join("www");
    let _ = std::fs::remove_dir_all(&www);
    std::fs::create_dir_all(&www)?;
    let mut artifacts = Vec::new();
    for (name, path, file) in [
        ("full ISO", &iso_path, "discovery.iso"),
        ("minimal ISO", &minimal_path, "minimal.iso"),
        ("PXE initrd", &initrd_path, "initrd.img"),
    ] {
        let bytes = download(&addr, path).await.with_context(|| name)?;
        std::fs::write(www.join(file), &bytes)?;
        artifacts.push(Artifact { name, paths: [path.clone(), format!("/{file}")], len: bytes.len() as u64 });
    }

    // What coreos-installer costs to make a copy with the same Ignition (per InfraEnv).
    let ign = download(
        &addr,
        &path_of(status["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().context("Ignition URL")?),
    )
    .await?;
    let ign_path = work.join("discovery.ign");
    std::fs::write(&ign_path, &ign)?;
    let copy = work.join("coreos-installer-copy.iso");
    let mut embed_seconds = Vec::new();
    for _ in 0..rounds {
        let _ = std::fs::remove_file(&copy);
        let started = Instant::now();
        let out = Command::new("coreos-installer")
            .args(["iso", "ignition", "embed", "-i"])
            .arg(&ign_path)
            .arg("-o")
            .arg(&copy)
            .arg(&base)
            .output()
            .context("running coreos-installer")?;
        if !out.status.success() {
            bail!("coreos-installer: {}", String::from_utf8_lossy(&out.stderr));
        }
        embed_seconds.push(started.elapsed().as_secs_f64());
    }
    let copy_len = std::fs::metadata(&copy)?.len();
    let _ = std::fs::remove_file(&copy);
    let embed = median(&mut embed_seconds);
    phase("copies for nginx downloaded, coreos-installer measured");

    // Both servers' files in the same page-cache state. sendfile moves page-cache folios, and a file
    // written in one go, or read in order, sits in large folios, while one that was partly evicted
    // and read back piecemeal sits in small ones: here that alone moved a server's throughput by
    // 20%. So each served file is dropped from the cache and read again in order.
    let mut served = vec![base.clone()];
    for dir in [data.join("minimal"), www.clone()] {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            served.push(entry?.path());
        }
    }
    for path in &served {
        recache(path)?;
    }
    phase("served files read into the page cache afresh");

    let nginx = start_nginx(&work, &www)?;
    let servers = [&bootstream, &nginx];
    // SERVE_BENCH_AA=1: the throughput part measures nginx against a second nginx serving the same
    // files in bootstream's place. The spread of those ratios around 1 is what this harness can tell
    // apart on this machine: a difference inside it is no difference.
    // SERVE_BENCH_AA=reuseport: the second nginx listens with `reuseport`, so that the kernel deals
    // connections to both its workers evenly (without it, one worker takes most of a burst).
    let second_nginx = match std::env::var("SERVE_BENCH_AA").as_deref() {
        Ok("1") => Some(start_nginx_named(&work, &www, "nginx-second", "")?),
        Ok("reuseport") => Some(start_nginx_named(&work, &www, "nginx-reuseport", "reuseport")?),
        Ok(other) => bail!("SERVE_BENCH_AA={other}: 1 or reuseport"),
        Err(_) => None,
    };
    let (measured, measured_paths): ([&Server; 2], Vec<[String; 2]>) = match &second_nginx {
        Some(second) => {
            ([second, &nginx], artifacts.iter().map(|a| [a.paths[1].clone(), a.paths[1].clone()]).collect())
        }
        None => (servers, artifacts.iter().map(|a| a.paths.clone()).collect()),
    };
    // SERVE_BENCH_PIN=1: the servers on CPU 0, the client (this process) on CPU 1. On loopback the
    // receiving side's TCP work runs in softirq context on the sending CPU and is charged to whoever
    // runs there; pinned, both servers get the same treatment and the client cannot take their CPU.
    let pinned = std::env::var("SERVE_BENCH_PIN").is_ok_and(|v| v == "1");
    if pinned {
        for s in servers.iter().chain(&second_nginx.as_ref()) {
            for pid in s.pids() {
                pin(pid, "0")?;
            }
        }
        pin(std::process::id(), "1")?;
        println!("\npinned: servers on CPU 0, the client on CPU 1");
    }
    println!("## Machine\n{}", machine());
    println!(
        "\nbase ISO {:.2} GiB; {seconds} s per measurement, {rounds} rounds, servers alternating",
        base_len as f64 / (1u64 << 30) as f64
    );

    // Throughput and CPU per GB.
    println!("\n## Throughput and server CPU per GB\n");
    let measured_name = measured[0].name;
    if second_nginx.is_some() {
        println!(
            "A/A (SERVE_BENCH_AA): a second nginx ({measured_name}), serving the same files, in bootstream's place\n"
        );
    }
    println!(
        "| artifact | clients | nginx GB/s | {measured_name} GB/s | ratio | nginx CPU-s/GB | {measured_name} CPU-s/GB | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut plot: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut machine_rows = Vec::new();
    for (a, paths) in artifacts.iter().zip(&measured_paths).filter(|_| runs("throughput")) {
        for clients in [1usize, 8, 64] {
            let mut gbps = [Vec::new(), Vec::new()];
            let mut cpu = [Vec::new(), Vec::new()];
            let mut machine = [Vec::new(), Vec::new()];
            let mut softirq = [Vec::new(), Vec::new()];
            let mut segments = [Vec::new(), Vec::new()];
            for round in 0..rounds {
                for turn in 0..2 {
                    let i = (turn + round) % 2;
                    let s = measured[i];
                    let before = s.cpu_seconds();
                    let machine_before = machine_cpu_seconds();
                    let segments_before = tcp_segments_sent();
                    let started = Instant::now();
                    let bytes = load(&s.addr, &paths[i], clients, seconds).await.with_context(|| s.name)?;
                    let took = started.elapsed().as_secs_f64();
                    let used = s.cpu_seconds() - before;
                    let machine_after = machine_cpu_seconds();
                    let segments_after = tcp_segments_sent();
                    let gb = bytes as f64 / 1e9;
                    gbps[i].push(gb / took);
                    cpu[i].push(used / gb);
                    machine[i].push((machine_after.0 - machine_before.0) / gb);
                    softirq[i].push((machine_after.1 - machine_before.1) / gb);
                    segments[i].push(segments_after.saturating_sub(segments_before) as f64 / gb);
                }
            }
            let (b_g, n_g) = (median(&mut gbps[0]), median(&mut gbps[1]));
            let (b_c, n_c) = (median(&mut cpu[0]), median(&mut cpu[1]));
            let (b_m, n_m) = (median(&mut machine[0]), median(&mut machine[1]));
            let (b_s, n_s) = (median(&mut softirq[0]), median(&mut softirq[1]));
            let (b_t, n_t) = (median(&mut segments[0]), median(&mut segments[1]));
            machine_rows.push(format!(
                "| {} | {clients} | {n_m:.3} | {b_m:.3} | {:.2} | {n_s:.3} | {b_s:.3} | {n_t:.0} | {b_t:.0} |",
                a.name,
                b_m / n_m
            ));
            println!(
                "| {} ({:.0} MiB) | {clients} | {n_g:.2} | {b_g:.2} | {:.2} | {n_c:.3} | {b_c:.3} | {:.2} |",
                a.name,
                a.len as f64 / (1u64 << 20) as f64,
                b_g / n_g,
                b_c / n_c
            );
            plot.entry(clients).or_default().extend([n_g, b_g]);
        }
        phase(&format!("{} measured", a.name));
    }
    if !machine_rows.is_empty() {
        // On loopback the receiving side's TCP work runs in softirq context on whichever CPU sent the
        // packet, and is charged to whatever process ran there: which server pays for how much of the
        // client's receiving is an artifact of the placement. The whole machine's CPU counts it once.
        println!("\n## Whole-machine CPU per GB (servers, the client and softirq work wherever it ran)\n");
        println!(
            "| artifact | clients | with nginx CPU-s/GB | with {measured_name} CPU-s/GB | ratio | softirq with nginx | softirq with {measured_name} | TCP segments per GB with nginx | with {measured_name} |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        for row in &machine_rows {
            println!("{row}");
        }
    }
    println!(
        "\ncoreos-installer iso ignition embed: {embed:.2} s (median of {rounds}) and {:.2} GiB of disk per InfraEnv",
        copy_len as f64 / (1u64 << 30) as f64
    );
    // The plot is of bootstream beside nginx; an A/A run has none to draw.
    if runs("throughput") && second_nginx.is_none() {
        draw_plot(&work, &plot)?;
    }
    if runs("ttfb") {
        time_to_first_byte(&servers, &artifacts[0].paths, &mut api, &addr, embed).await?;
    }
    if runs("memory") {
        slow_downloads(&servers, &artifacts[0].paths).await?;
    }
    drop(second_nginx);
    drop(nginx);
    drop(bootstream);
    if runs("startup") {
        startup(&work, rootfs_mib, rounds).await?;
    }
    phase("done");
    Ok(())
}

/// Time to first byte of a cached InfraEnv's ISO (beside nginx's) and of new InfraEnvs' (beside the
/// coreos-installer copy that takes `embed` seconds).
async fn time_to_first_byte(
    servers: &[&Server; 2],
    paths: &[String; 2],
    api: &mut Conn,
    addr: &str,
    embed: f64,
) -> Result<()> {
    // A cached InfraEnv's ISO, beside nginx's, on fresh connections, alternating.
    let samples = 1000;
    let mut ttfb = [Vec::new(), Vec::new()];
    for k in 0..samples {
        for turn in 0..2 {
            let i = (turn + k) % 2;
            let t = first_byte(&servers[i].addr, &paths[i]).await?;
            ttfb[i].push(t.as_secs_f64() * 1e3);
        }
    }
    let (b50, b99) = (percentile(&mut ttfb[0], 0.5), percentile(&mut ttfb[0], 0.99));
    let (n50, n99) = (percentile(&mut ttfb[1], 0.5), percentile(&mut ttfb[1], 0.99));
    phase("warm time to first byte measured");

    // A new InfraEnv with 100 NMStateConfigs of its own: its ISO requested as soon as it exists, before
    // anything of it is cached (the controller starts building it at the same moment).
    // SERVE_BENCH_NEW sets how many (300 by default: the p99 is then the 4th slowest, not the 2nd).
    let new_infraenvs: usize = std::env::var("SERVE_BENCH_NEW").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let work_before = server_work(api).await?;
    for k in 0..new_infraenvs {
        for h in 0..100 {
            create(api, NMSTATE_PATH, &nmstate(1000 + k * 100 + h, &format!("new-{k}"))).await?;
        }
    }
    phase(&format!("{} NMStateConfigs created", new_infraenvs * 100));
    print_server_work("the NMStateConfigs' creates", &work_before, &server_work(api).await?);
    // SERVE_BENCH_PERF_COLD=FILE records the server with `perf record -g` while the new InfraEnvs are
    // measured, and only then.
    let perf = match std::env::var_os("SERVE_BENCH_PERF_COLD") {
        Some(out) => {
            let perf = Command::new("perf")
                .args(["record", "--call-graph=dwarf,32768", "-F", "1999", "-o"])
                .arg(out)
                .arg("-p")
                .arg(servers[0].child.id().to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting perf record")?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            Some(perf)
        }
        None => None,
    };
    // Two measures: the GET alone, and from sending the create to the image's first byte. The
    // controller starts building the content when the InfraEnv is created; whether the GET finds it
    // built depends on the race, so the second measure is the one a user waits for.
    let (mut cold, mut created_to_first) = (Vec::new(), Vec::new());
    let work_before = server_work(api).await?;
    for k in 0..new_infraenvs {
        let creating = Instant::now();
        let ie = create(api, IE_PATH, &infraenv(&format!("new-{k}"), &format!("new-{k}"))).await?;
        let answered = creating.elapsed().as_secs_f64() * 1e3;
        let id = ie["metadata"]["uid"].as_str().context("uid")?;
        // The ISO URL of the created InfraEnv's status (signed): the create answers with it.
        let path = path_of(ie["status"]["isoDownloadURL"].as_str().with_context(|| format!("no ISO URL: {ie}"))?);
        let ms = first_byte(addr, &path).await?.as_secs_f64() * 1e3;
        let total = creating.elapsed().as_secs_f64() * 1e3;
        if total > 4.0 {
            // With SERVE_BENCH_SERVER_LOG=bootstream::image=debug the server logs each build's time by uid.
            eprintln!(
                "slow new InfraEnv {k} {id}: created to first byte {total:.2} ms, of which the create's answer {answered:.2} ms and the GET {ms:.2} ms"
            );
        }
        cold.push(ms);
        created_to_first.push(total);
        // Let the controller finish this one before the next.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(mut perf) = perf {
        unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
        perf.wait()?;
    }
    print_server_work("the new InfraEnvs", &work_before, &server_work(api).await?);
    let first_cold = created_to_first[0];
    let (c50, c99) = (percentile(&mut cold, 0.5), percentile(&mut cold, 0.99));
    let (t50, t99) = (percentile(&mut created_to_first, 0.5), percentile(&mut created_to_first, 0.99));
    eprintln!(
        "new InfraEnvs, created to first byte: the first {first_cold:.2} ms (it also lists the {} NMStateConfigs), the slowest five {:?} ms",
        new_infraenvs * 100,
        created_to_first.iter().rev().take(5).map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>()
    );
    phase("cold time to first byte measured");

    // As a user adds a cluster's hosts: each new InfraEnv's 100 NMStateConfigs created just before it,
    // in the namespace that already holds all of the above. Timed from the InfraEnv's create.
    let late_infraenvs = new_infraenvs.min(100);
    let mut late = Vec::new();
    for k in 0..late_infraenvs {
        for h in 0..100 {
            create(api, NMSTATE_PATH, &nmstate(1000 + (new_infraenvs + k) * 100 + h, &format!("late-{k}"))).await?;
        }
        let creating = Instant::now();
        let ie = create(api, IE_PATH, &infraenv(&format!("late-{k}"), &format!("late-{k}"))).await?;
        let path = path_of(ie["status"]["isoDownloadURL"].as_str().with_context(|| format!("no ISO URL: {ie}"))?);
        first_byte(addr, &path).await?;
        late.push(creating.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (l50, l99) = (percentile(&mut late, 0.5), percentile(&mut late, 0.99));
    phase("new InfraEnvs after their NMStateConfigs measured");
    println!("\n## Time to first byte (ms; request sent on a fresh connection → first response byte)\n");
    println!("| case | samples | p50 | p99 | peer | peer p50 | peer p99 | ratio p50 | ratio p99 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| cached InfraEnv, full ISO | {samples} | {b50:.3} | {b99:.3} | nginx | {n50:.3} | {n99:.3} | {:.2} | {:.2} |",
        b50 / n50,
        b99 / n99
    );
    println!(
        "| new InfraEnv, 100 NMStateConfigs: GET | {new_infraenvs} | {c50:.2} | {c99:.2} | coreos-installer copy | {:.0} | – | {:.0}× sooner | {:.0}× sooner |",
        embed * 1e3,
        embed * 1e3 / c50,
        embed * 1e3 / c99
    );
    println!(
        "| new InfraEnv, 100 NMStateConfigs: create + GET | {new_infraenvs} | {t50:.2} | {t99:.2} | coreos-installer copy | {:.0} | – | {:.0}× sooner | {:.0}× sooner |",
        embed * 1e3,
        embed * 1e3 / t50,
        embed * 1e3 / t99
    );
    println!(
        "| new InfraEnv created right after its 100 NMStateConfigs: create + GET | {late_infraenvs} | {l50:.2} | {l99:.2} | coreos-installer copy | {:.0} | – | {:.0}× sooner | {:.0}× sooner |",
        embed * 1e3,
        embed * 1e3 / l50,
        embed * 1e3 / l99
    );
    Ok(())
}

/// Private and socket memory with 1,000 slow clients downloading the full ISO, from each server.
async fn slow_downloads(servers: &[&Server; 2], paths: &[String; 2]) -> Result<()> {
    println!("\n## 1,000 slow downloads (each reads 16 KiB every 250 ms)\n");
    println!(
        "| server | RssAnon idle | RssAnon with 1,000 | per download | TCP socket memory (both ends) idle → with 1,000 | per download |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, s) in servers.iter().enumerate() {
        let m = slow_clients(s, &paths[i], 1000).await?;
        println!(
            "| {} | {:.1} MiB | {:.1} MiB | {:.1} KiB | {:.0} → {:.0} MiB | {:.0} KiB |",
            s.name,
            m.rss_idle as f64 / 1048576.0,
            m.rss_loaded as f64 / 1048576.0,
            (m.rss_loaded as f64 - m.rss_idle as f64) / 1000.0 / 1024.0,
            m.sock_idle as f64 / 1048576.0,
            m.sock_loaded as f64 / 1048576.0,
            (m.sock_loaded as f64 - m.sock_idle as f64) / 1000.0 / 1024.0,
        );
    }
    phase("1,000 slow clients measured");
    Ok(())
}

/// Start-up with 5 base images: first start (digests computed) and restarts, beside nginx's.
async fn startup(work: &Path, rootfs_mib: usize, rounds: usize) -> Result<()> {
    let images: Vec<(String, PathBuf)> =
        (1..=5u64).map(|s| Ok((format!("4.{}", 15 + s), base_iso(work, rootfs_mib, s)?))).collect::<Result<_>>()?;
    phase("5 base images ready");
    let startup_data = work.join("data-startup");
    let _ = std::fs::remove_dir_all(&startup_data);
    let mut starts = Vec::new();
    for _ in 0..=rounds {
        let started = Instant::now();
        let s = start_bootstream(&startup_data, &images)?;
        wait_ready(&s.addr, Duration::from_millis(2), Duration::from_secs(300)).await?;
        let took = started.elapsed().as_secs_f64();
        let (_, report) = Conn::new(&s.addr).request("GET", "/ready", None).await?;
        let ready = String::from_utf8_lossy(&report).lines().filter(|l| l.contains(" ready ")).count();
        if ready != 5 {
            bail!("{ready} of 5 images ready:\n{}", String::from_utf8_lossy(&report));
        }
        starts.push(took);
    }
    let first_start = starts.remove(0);
    let restart = median(&mut starts);
    let www5 = work.join("www5");
    let _ = std::fs::remove_dir_all(&www5);
    std::fs::create_dir_all(&www5)?;
    for (v, p) in &images {
        std::fs::hard_link(p, www5.join(format!("{v}.iso")))?;
    }
    let mut nginx_starts = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let n = start_nginx(work, &www5)?;
        nginx_starts.push(started.elapsed().as_secs_f64());
        drop(n);
    }
    println!("\n## Start-up with 5 base images of {rootfs_mib} MiB of rootfs (page cache warm)\n");
    println!("| case | seconds |\n|---|---|");
    println!("| bootstream, first start (no digests recorded: SHA-256 of every image) | {first_start:.3} |");
    println!("| bootstream, restart (median of {rounds}; spawn → `/ready` 200 with all 5 ready) | {restart:.3} |");
    println!(
        "| nginx serving the 5 files (median of {rounds}; spawn → accepting) | {:.3} |",
        median(&mut nginx_starts)
    );
    phase("start-up measured");
    Ok(())
}

struct SlowLoad {
    rss_idle: u64,
    rss_loaded: u64,
    sock_idle: u64,
    sock_loaded: u64,
}

/// 1,000 clients each downloading `path` slowly; memory measured once all are under way.
async fn slow_clients(server: &Server, path: &str, n: usize) -> Result<SlowLoad> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_idle, sock_idle) = (server.rss_anon(), tcp_socket_memory());
    let started = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (addr, path, started, stop) = (server.addr.clone(), path.to_string(), started.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await?;
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
            let mut buf = vec![0u8; 16 * 1024];
            let (status, _, _) = read_head(&mut s, &mut buf).await?;
            if status != 200 {
                bail!("status {status}");
            }
            started.fetch_add(1, Ordering::Relaxed);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if s.read(&mut buf).await? == 0 {
                    bail!("closed in the body");
                }
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while started.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline || tasks.iter().any(|t| t.is_finished()) {
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.await??;
            }
            bail!("{}: only {} of {n} downloads started", server.name, started.load(Ordering::Relaxed));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Steady state: every socket's buffers have filled up to what the slow reader lets through.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (rss_loaded, sock_loaded) = (server.rss_anon(), tcp_socket_memory());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(SlowLoad { rss_idle, rss_loaded, sock_idle, sock_loaded })
}

/// Writes the throughput table and draws it with `benches/throughput.gp` when gnuplot is installed.
fn draw_plot(work: &Path, plot: &BTreeMap<usize, Vec<f64>>) -> Result<()> {
    let data = work.join("throughput.dat");
    let mut f = std::fs::File::create(&data)?;
    writeln!(f, "# clients nginx-iso bootstream-iso nginx-minimal bootstream-minimal nginx-initrd bootstream-initrd")?;
    for (clients, v) in plot {
        let cols: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
        writeln!(f, "{clients} {}", cols.join(" "))?;
    }
    let png = work.join("throughput.png");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/throughput.gp");
    match Command::new("gnuplot")
        .arg("-e")
        .arg(format!("data='{}'; out='{}'; machine='{}'", data.display(), png.display(), machine()))
        .arg(&script)
        .status()
    {
        Ok(s) if s.success() => eprintln!("plot: {}", png.display()),
        Ok(s) => eprintln!("gnuplot failed ({s}); data in {}", data.display()),
        Err(_) => eprintln!("no gnuplot (apt-get install gnuplot-nox); data in {}", data.display()),
    }
    Ok(())
}

/// CPU model, cores and kernel, for the record.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{cores} × {cpu}, Linux {}", kernel.trim())
}
