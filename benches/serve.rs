//! The image path side by side: bootstream serving an InfraEnv's customized discovery ISO (Ignition and
//! static-network ramdisk spliced in as it streams) and nginx (`sendfile on`) serving a pre-built copy of
//! exactly the same bytes, under the same loopback load; and what `coreos-installer iso ignition embed`
//! costs to build such a copy, per InfraEnv.
//!
//! `cargo bench --bench serve -- [ROOTFS_MIB] [SECONDS] [ROUNDS]` (defaults 1024, 5, 3). Needs nginx
//! (`apt-get install nginx-light`) and coreos-installer on PATH. The generated base ISO is kept in
//! `target/bench-serve/` between runs. For each concurrency (1, 8, 64 clients, each downloading the
//! whole ISO over and over on a keep-alive connection), the two servers take turns, ROUNDS times; the
//! figures are medians: aggregate throughput, and server CPU seconds (user + system, all of the
//! server's processes) per GB delivered.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "bench";

struct Server {
    name: &'static str,
    child: Child,
    addr: String,
    path: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first: nginx's master then stops its workers (SIGKILL would leave them running).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
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
}

/// The fields of /proc/PID/stat after the command name.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One request on a fresh connection; returns the status and body.
async fn http(addr: &str, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>)> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body.as_bytes()).await?;
    let mut all = Vec::new();
    s.read_to_end(&mut all).await?;
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").context("no header end")?;
    let status = std::str::from_utf8(&all[9..12])?.parse()?;
    Ok((status, all[end + 4..].to_vec()))
}

/// `clients` connections downloading `path` over and over until `seconds` pass; bytes received.
async fn load(addr: &str, path: &str, clients: usize, seconds: f64) -> Result<u64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (addr, path) = (addr.to_string(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            let mut buf = vec![0u8; 256 * 1024];
            let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            'requests: while tokio::time::Instant::now() < deadline {
                s.write_all(request.as_bytes()).await?;
                // Headers (small; read byte-exact up to the blank line).
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut byte).await? == 0 {
                        bail!("connection closed in the headers");
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if !head.starts_with("http/1.1 200") {
                    bail!("unexpected response: {head}");
                }
                let length: u64 = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .context("no content-length")?;
                let mut left = length;
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

fn start_bootstream(work: &Path, base: &Path) -> Result<Server> {
    let data = work.join("data");
    let _ = std::fs::remove_dir_all(&data);
    let bin = std::env::var("BOOTSTREAM_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_bootstream").to_string());
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--os-image"])
        .arg(format!("4.20:x86_64:{}", base.display()))
        .arg("--data-dir")
        .arg(&data)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting bootstream")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line)?;
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).context("listening line")?;
    Ok(Server { name: "bootstream", child, addr: addr.to_string(), path: String::new() })
}

fn start_nginx(work: &Path, iso: &Path) -> Result<Server> {
    let www = work.join("www");
    std::fs::create_dir_all(&www)?;
    let served = www.join("discovery.iso");
    let _ = std::fs::remove_file(&served);
    std::fs::hard_link(iso, &served).or_else(|_| std::fs::copy(iso, &served).map(|_| ()))?;
    let port = free_port();
    let w = work.display();
    let conf = format!(
        "worker_processes auto;\ndaemon off;\npid {w}/nginx.pid;\nerror_log {w}/nginx-error.log;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  sendfile on;\n  tcp_nopush on;\n  access_log off;\n  keepalive_requests 1000000;\n\
           default_type application/octet-stream;\n\
           client_body_temp_path {w}/tmp-body;\n  proxy_temp_path {w}/tmp-proxy;\n  fastcgi_temp_path {w}/tmp-fcgi;\n\
           uwsgi_temp_path {w}/tmp-uwsgi;\n  scgi_temp_path {w}/tmp-scgi;\n\
           server {{ listen 127.0.0.1:{port}; root {}; }}\n}}\n",
        www.display()
    );
    let conf_path = work.join("nginx.conf");
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
            bail!("nginx did not start; see {}/nginx-error.log", work.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Server { name: "nginx", child, addr, path: "/discovery.iso".into() })
}

/// A static network config for host `i`.
fn nmstate(i: usize) -> Value {
    let mac = format!("02:00:00:{:02x}:{:02x}:{:02x}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
    json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "NMStateConfig",
           "metadata": {"name": format!("host-{i}"), "namespace": NS, "labels": {"rack": "r1"}},
           "spec": {"config": {"interfaces": [{"name": "eth0", "type": "ethernet", "state": "up", "mac-address": mac,
                        "ipv4": {"enabled": true, "dhcp": false,
                                 "address": [{"ip": format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff), "prefix-length": 8}]}}]},
                    "interfaces": [{"name": "eth0", "macAddress": mac}]}})
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let rootfs_mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let seconds: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5.0);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    let work = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-serve");
    let began = Instant::now();
    let phase = |what: &str| eprintln!("[{:6.1} s] {what}", began.elapsed().as_secs_f64());
    std::fs::create_dir_all(&work)?;

    let base = work.join(format!("base-{rootfs_mib}m.iso"));
    if !base.exists() {
        eprintln!("generating a live ISO with a {rootfs_mib} MiB incompressible rootfs...");
        let bytes = bootstream::sample::large_sample_iso_bytes(rootfs_mib << 20)?;
        let tmp = work.join("base.tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &base)?;
    }
    let base_len = std::fs::metadata(&base)?.len();

    // bootstream with one InfraEnv (pull secret, SSH key, 8 static network configs).
    phase("base ISO ready");
    let mut bootstream = start_bootstream(&work, &base)?;
    let addr = bootstream.addr.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    while http(&addr, "GET", "/ready", None).await.map(|r| r.0).unwrap_or(0) != 200 {
        if Instant::now() > deadline {
            bail!("bootstream never became ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ps", "namespace": NS},
                        "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"dXNlcjpwYXNz\"}}}"}});
    http(&addr, "POST", &format!("/api/v1/namespaces/{NS}/secrets"), Some(&secret)).await?;
    for i in 0..8 {
        let (status, body) = http(
            &addr,
            "POST",
            &format!("/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/nmstateconfigs"),
            Some(&nmstate(i)),
        )
        .await?;
        if status >= 300 {
            bail!("NMStateConfig: {status} {}", String::from_utf8_lossy(&body));
        }
    }
    let ie = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                    "metadata": {"name": "pool", "namespace": NS},
                    "spec": {"pullSecretRef": {"name": "ps"}, "sshAuthorizedKey": "ssh-ed25519 AAAA bench",
                             "nmStateConfigLabelSelector": {"matchLabels": {"rack": "r1"}}}});
    let ie_path = format!("/apis/agent-install.openshift.io/v1beta1/namespaces/{NS}/infraenvs");
    http(&addr, "POST", &ie_path, Some(&ie)).await?;
    let (iso_url, uid) = loop {
        let (_, body) = http(&addr, "GET", &format!("{ie_path}/pool"), None).await?;
        let v: Value = serde_json::from_slice(&body)?;
        if let Some(url) = v["status"]["isoDownloadURL"].as_str().filter(|u| !u.is_empty()) {
            break (url.to_string(), v["metadata"]["uid"].as_str().unwrap_or_default().to_string());
        }
        if Instant::now() > deadline {
            bail!("the InfraEnv got no image: {v}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    bootstream.path = format!("/{}", iso_url.split("://").nth(1).unwrap().split_once('/').unwrap().1);

    phase("bootstream ready, InfraEnv has its image");
    // The customized copy nginx serves: exactly the bytes bootstream serves.
    let custom = work.join("custom.iso");
    {
        let (status, body) = http(&addr, "GET", &bootstream.path, None).await?;
        if status != 200 {
            bail!("downloading the ISO: {status}");
        }
        std::fs::File::create(&custom)?.write_all(&body)?;
    }
    let custom_len = std::fs::metadata(&custom)?.len();

    // What coreos-installer costs to make a copy with the same Ignition (per InfraEnv).
    let (_, ign) = http(
        &addr,
        "GET",
        &format!("/api/assisted-install/v2/infra-envs/{uid}/downloads/files?file_name=discovery.ign"),
        None,
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

    phase("copy for nginx downloaded, coreos-installer measured");
    let nginx = start_nginx(&work, &custom)?;
    let servers = [&nginx, &bootstream];
    println!(
        "base ISO {:.2} GiB; served ISO {:.2} GiB; {seconds} s per measurement, {rounds} rounds, servers alternating",
        base_len as f64 / (1u64 << 30) as f64,
        custom_len as f64 / (1u64 << 30) as f64
    );
    println!("| clients | nginx GB/s | bootstream GB/s | ratio | nginx CPU-s/GB | bootstream CPU-s/GB | ratio |");
    println!("|---|---|---|---|---|---|---|");
    for clients in [1usize, 8, 64] {
        let mut gbps = [Vec::new(), Vec::new()];
        let mut cpu = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for turn in 0..2 {
                let i = (turn + round) % 2;
                let s = servers[i];
                let before = s.cpu_seconds();
                let started = Instant::now();
                let bytes = load(&s.addr, &s.path, clients, seconds).await.with_context(|| s.name)?;
                let took = started.elapsed().as_secs_f64();
                let used = s.cpu_seconds() - before;
                let gb = bytes as f64 / 1e9;
                gbps[i].push(gb / took);
                cpu[i].push(used / gb);
            }
        }
        let (n_g, b_g) = (median(&mut gbps[0]), median(&mut gbps[1]));
        let (n_c, b_c) = (median(&mut cpu[0]), median(&mut cpu[1]));
        println!("| {clients} | {n_g:.2} | {b_g:.2} | {:.2} | {n_c:.3} | {b_c:.3} | {:.2} |", b_g / n_g, b_c / n_c);
        phase(&format!("{clients} clients measured"));
    }
    let embed = median(&mut embed_seconds);
    println!(
        "coreos-installer iso ignition embed: {embed:.2} s (median of {rounds}) and {:.2} GiB of disk per InfraEnv",
        copy_len as f64 / (1u64 << 30) as f64
    );
    Ok(())
}
