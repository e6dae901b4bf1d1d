//! Load (issues 7 and 30): 10,000 connections open at once on loopback — 1,000 downloads, 2,000
//! slowloris heads, 1,000 request bodies that trickle in, 6,000 idle keep-alive connections — and
//! an API prober. Every download complete and byte-exact, the server's anonymous RSS and open file
//! descriptors bounded and reported, the API answering within a bound, every slow head and body cut
//! off at its timeout, every idle connection still served afterwards, and the descriptors back to
//! their idle level at the end.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DOWNLOADS: usize = 1000;
const SLOWLORIS: usize = 2000;
/// Authenticated resource API requests whose bodies arrive a byte a second (half chunked, through
/// hyper; half with a Content-Length, on the fast path).
const SLOW_BODIES: usize = 1000;
/// Connections that made one request and then sit idle, as agents between polls.
const IDLE: usize = 6000;
/// Connections opened at once at most, so that the bursts stay within the listen backlog.
const CONNECT_BATCH: usize = 500;
/// Rootfs bytes of the generated base image. The whole ISO (about 8.5 MiB) must be larger than what a
/// paused client's small receive buffer plus the server's send buffer hold (tcp_wmem max is 4 MiB),
/// so that every download is still being written by the server while all 1,000 are open.
const ROOTFS_BYTES: usize = 8 << 20;
/// Receive buffer of each downloading client: keeps the kernel from buffering whole responses, so the
/// server really holds 1,000 responses in flight at once.
const CLIENT_RCVBUF: u32 = 64 * 1024;
/// The server's header and body timeouts (ServerConfig::default in src/http/server.rs).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on any API call during the load. The API answers in milliseconds when idle; under load the
/// two cores are shared by 1,000 sendfile loops, 1,000 hashing clients and the prober. The server
/// writes at most 2 MiB per sendfile call before yielding (SENDFILE_CHUNK), so one round over all
/// runnable tasks is bounded; 2 s is far above what a fair scheduler needs and far below what an
/// agent or a BMC would treat as an outage (agents poll with a 30 s client timeout). Measured on 2
/// cores: p50 about 1 ms, p99 10-25 ms, max 35-240 ms.
const API_BOUND: Duration = Duration::from_secs(2);

const INFRAENV: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: ps, namespace: t}\n\
    stringData: {.dockerconfigjson: '{\"auths\":{\"quay.io\":{\"auth\":\"dTpw\"}}}'}\n---\n\
    apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: pool, namespace: t}\n\
    spec: {pullSecretRef: {name: ps}}\n";

/// Raises this process's open-file soft limit to its hard limit (the server child inherits it).
fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
    lim.rlim_cur
}

/// The pid of the `bootstream serve` child of this process whose command line names `data_dir`.
fn server_pid(data_dir: &Path) -> u32 {
    let me = std::process::id();
    let dir = data_dir.to_str().unwrap();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The fields after the command (which may contain spaces) in parentheses: state, ppid, ...
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid != Some(me) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a == "serve") && args.iter().any(|a| a == dir) {
            return pid;
        }
    }
    panic!("no `bootstream serve` child with data dir {dir}");
}

/// (RssAnon in KiB, open descriptors) of `pid`.
fn sample(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|v| v.trim().parse().unwrap())
        .expect("RssAnon in /proc/PID/status");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    (rss, fds)
}

/// Sum of `bootstream_http_requests_inflight` for the `/byid/` image route.
fn image_downloads_inflight(addr: &str) -> i64 {
    let m = request(addr, "GET", "/metrics", &[], b"").text();
    m.lines()
        .filter(|l| l.starts_with("bootstream_http_requests_inflight{") && l.contains("/byid/"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

#[derive(Debug)]
struct Download {
    status: u16,
    content_length: u64,
    received: u64,
    sha256: String,
}

/// One download over a fresh connection with a small receive buffer: reads the head and the first
/// 64 KiB, counts itself as arrived, waits for `go`, then reads and hashes the rest to EOF.
async fn download(
    addr: std::net::SocketAddr,
    path: String,
    arrived: Arc<AtomicUsize>,
    mut go: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<Download> {
    let mut arrived_once = Some(arrived);
    let result = async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.set_recv_buffer_size(CLIENT_RCVBUF)?;
        let mut s = sock.connect(addr).await?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
        let mut buf = vec![0u8; 64 * 1024];
        let mut filled = 0;
        let (status, content_length, head_len) = loop {
            let n = s.read(&mut buf[filled..]).await?;
            if n == 0 {
                return Err(std::io::Error::other("closed before the response head"));
            }
            filled += n;
            let mut hdrs = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut hdrs);
            if let httparse::Status::Complete(len) = resp.parse(&buf[..filled]).map_err(std::io::Error::other)? {
                let cl = resp
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                    .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<u64>().ok())
                    .unwrap_or(0);
                break (resp.code.unwrap(), cl, len);
            }
        };
        let mut hasher = sha2::Sha256::new();
        hasher.update(&buf[head_len..filled]);
        let mut received = (filled - head_len) as u64;
        while received < 64 * 1024 {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            received += n as u64;
        }
        if let Some(a) = arrived_once.take() {
            a.fetch_add(1, Ordering::SeqCst);
        }
        let _ = go.wait_for(|g| *g).await;
        loop {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            received += n as u64;
        }
        Ok(Download { status, content_length, received, sha256: hex::encode(hasher.finalize()) })
    }
    .await;
    // A client that failed early still counts as arrived, so the others are not kept waiting.
    if let Some(a) = arrived_once {
        a.fetch_add(1, Ordering::SeqCst);
    }
    result
}

/// A slowloris client: sends a request head one byte a second and never finishes it. Counts itself
/// in `connected` once its first byte is sent. Returns how long the server kept the connection (None
/// if it was still open after `give_up`).
async fn slowloris(
    addr: std::net::SocketAddr,
    connected: Arc<AtomicUsize>,
    give_up: Duration,
) -> std::io::Result<Option<Duration>> {
    let head = format!("GET /ready HTTP/1.1\r\nHost: {addr}\r\nX-Padding: {}", "a".repeat(1000));
    trickle(addr, connected, head.into_bytes(), Vec::new(), give_up).await.map(|(closed, _)| closed)
}

/// A client whose request body trickles in, announced chunked (`chunked`, which hyper reads) or
/// with a Content-Length (the fast path), then a byte a second, to a route that reads a body
/// without a token (up to 16 KiB; the resource API is not on this plain listener).
/// Returns how long the server kept the connection and the start of its answer.
async fn slow_body(
    addr: std::net::SocketAddr,
    i: usize,
    chunked: bool,
    connected: Arc<AtomicUsize>,
    give_up: Duration,
) -> std::io::Result<(Option<Duration>, String)> {
    let framing = if chunked { "Transfer-Encoding: chunked" } else { "Content-Length: 10000" };
    let head =
        format!("PUT /slow/body-{i} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n");
    let piece = if chunked { b"1\r\n{\r\n".to_vec() } else { b"{".to_vec() };
    trickle(addr, connected, head.into_bytes(), piece, give_up).await
}

/// Sends `first` (the head) one byte a second, then `piece` once a second, until the server closes
/// the connection or `give_up` passes. Returns how long the server kept the connection (from before
/// the connect: its timeout cannot start earlier) and the start of what it answered.
async fn trickle(
    addr: std::net::SocketAddr,
    connected: Arc<AtomicUsize>,
    first: Vec<u8>,
    piece: Vec<u8>,
    give_up: Duration,
) -> std::io::Result<(Option<Duration>, String)> {
    let started = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await;
    let mut announced = Some(connected);
    // A head sent whole when it is a request head with a body to trickle; byte by byte otherwise.
    let mut pending: std::collections::VecDeque<Vec<u8>> =
        if piece.is_empty() { first.into_iter().map(|b| vec![b]).collect() } else { std::iter::once(first).collect() };
    let result = async {
        let s = s.as_mut().map_err(|e| std::io::Error::new(e.kind(), e.to_string()))?;
        let mut answer = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut scratch = [0u8; 1024];
        loop {
            tokio::select! {
                r = s.read(&mut scratch) => match r {
                    Ok(0) => return Ok((Some(started.elapsed()), String::from_utf8_lossy(&answer).into_owned())),
                    Err(e) => return Ok((Some(started.elapsed()), format!("{}[read: {e}]", String::from_utf8_lossy(&answer)))),
                    Ok(n) => answer.extend_from_slice(&scratch[..n.min(64)]),
                },
                _ = tick.tick() => {
                    if started.elapsed() > give_up {
                        return Ok((None, String::from_utf8_lossy(&answer).into_owned()));
                    }
                    let next = pending.pop_front().unwrap_or_else(|| if piece.is_empty() { b"a".to_vec() } else { piece.clone() });
                    if let Err(e) = s.write_all(&next).await {
                        // The server ended the connection. Its answer may already be here, unread:
                        // on a loaded machine this task can wake after the server's answer, its
                        // FIN and the end of its lingering drain, and write before it reads. The
                        // kernel keeps what arrived before the reset readable: read it.
                        let at = started.elapsed();
                        let _ = tokio::time::timeout(Duration::from_secs(2), async {
                            while let Ok(n) = s.read(&mut scratch).await {
                                if n == 0 {
                                    break;
                                }
                                answer.extend_from_slice(&scratch[..n.min(64)]);
                            }
                        })
                        .await;
                        return Ok((Some(at), format!("{}[write: {e}]", String::from_utf8_lossy(&answer))));
                    }
                    if let Some(c) = announced.take() {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    }
    .await;
    // A client that failed still counts as connected, so that nobody waits for it.
    if let Some(c) = announced {
        c.fetch_add(1, Ordering::SeqCst);
    }
    result
}

/// Reads one small response (head and Content-Length body) from `s`.
async fn read_small_response(s: &mut tokio::net::TcpStream) -> std::io::Result<u16> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before the response"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut hdrs = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut hdrs);
        if let httparse::Status::Complete(len) = resp.parse(&buf).map_err(std::io::Error::other)? {
            let body = resp
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= len + body {
                return Ok(resp.code.unwrap());
            }
        }
    }
}

/// An agent between polls: a connection that made one request and keeps the connection open.
async fn idle_connection(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /live HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    match read_small_response(&mut s).await? {
        200 => Ok(s),
        other => Err(std::io::Error::other(format!("GET /live answered {other}"))),
    }
}

#[derive(Default, Debug)]
struct ApiLatency {
    calls: usize,
    max: Duration,
    max_what: String,
    failures: Vec<String>,
    /// Every call's latency, for percentiles.
    all: Vec<Duration>,
    /// Calls over 250 ms: (seconds since the prober started, latency, call).
    slow: Vec<(f64, Duration, String)>,
}

#[test]
fn ten_thousand_connections_of_every_kind_at_once() {
    let test_start = Instant::now();
    let nofile = raise_nofile_limit();
    let connections = DOWNLOADS + SLOWLORIS + SLOW_BODIES + IDLE;
    assert!(nofile as usize >= connections + 1024, "RLIMIT_NOFILE hard limit {nofile} is too low for this test");

    let dir = tempfile::tempdir().unwrap();
    let iso = dir.path().join("base.iso");
    std::fs::write(&iso, bootstream::formats::sample::large_sample_iso_bytes(ROOTFS_BYTES).unwrap()).unwrap();
    let image = format!("4.20:x86_64:{}", iso.display());
    let server = Server::start(&["--os-image", &image]);
    server.apply_ok(INFRAENV);
    let ie = server.wait_image_created("t", "pool", "True");
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let ie_path = "/apis/agent-install.openshift.io/v1beta1/namespaces/t/infraenvs/pool";

    let reference = server.get(&iso_path);
    assert_eq!(reference.status, 200);
    let ref_len = reference.body.len() as u64;
    let ref_sha = sha256_hex(&reference.body);
    drop(reference);

    let pid = server_pid(server.data_dir.path());
    std::thread::sleep(Duration::from_millis(300));
    let (base_rss, base_fds) = sample(pid);
    let server_nofile = std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .unwrap();
    eprintln!(
        "idle: pid {pid}, RssAnon {base_rss} KiB, {base_fds} fds; ISO {ref_len} bytes; RLIMIT_NOFILE {nofile}, \
         the server's {server_nofile}"
    );
    assert!(server_nofile as usize > connections, "the server's open-files limit is {server_nofile}");

    // Sampler: RssAnon and descriptors of the server every 50 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let peaks = Arc::new(Mutex::new((base_rss, base_fds)));
    let sampler = {
        let (stop, peaks) = (stop.clone(), peaks.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (rss, fds) = sample(pid);
                let mut p = peaks.lock().unwrap();
                p.0 = p.0.max(rss);
                p.1 = p.1.max(fds);
                drop(p);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Prober: the resource API, /ready and /metrics in turn, each on a fresh connection, timed.
    let latency = Arc::new(Mutex::new(ApiLatency::default()));
    let prober = {
        let (stop, latency, addr) = (stop.clone(), latency.clone(), server.addr.clone());
        // The resource API is on its own HTTPS listener.
        let api_addr = server.api_addr.clone().expect("an HTTPS API listener");
        let api_ca = std::fs::read(server.data_dir.path().join("api-tls/tls.crt")).unwrap();
        let bearer = format!("Bearer {TEST_API_TOKEN}");
        std::thread::spawn(move || {
            let calls = [
                ("InfraEnv", ie_path, vec![("Authorization", bearer.as_str())]),
                ("/ready", "/ready", Vec::new()),
                ("/metrics", "/metrics", Vec::new()),
            ];
            let mut i = 0;
            let prober_start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let (what, path, headers) = &calls[i % calls.len()];
                i += 1;
                let started = Instant::now();
                let r = if *what == "InfraEnv" {
                    tls_request(&api_addr, &api_ca, "GET", path, headers, b"")
                } else {
                    try_request(&addr, "GET", path, headers, b"")
                };
                let took = started.elapsed();
                let mut l = latency.lock().unwrap();
                l.calls += 1;
                l.all.push(took);
                if took > Duration::from_millis(250) {
                    l.slow.push((prober_start.elapsed().as_secs_f64(), took, what.to_string()));
                }
                if took > l.max {
                    l.max = took;
                    l.max_what = what.to_string();
                }
                match r {
                    Ok(r) if r.status == 200 && !r.body.is_empty() => {}
                    Ok(r) => l.failures.push(format!("{what}: {} {}", r.status, r.text())),
                    Err(e) => l.failures.push(format!("{what}: {e}")),
                }
                drop(l);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let addr: std::net::SocketAddr = server.addr.parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let load_start = Instant::now();
    let outcome = rt.block_on(async {
        // 1. Idle keep-alive connections, in batches that stay within the listen backlog.
        let mut idle = Vec::with_capacity(IDLE);
        let mut idle_errors = Vec::new();
        for batch in 0..IDLE.div_ceil(CONNECT_BATCH) {
            let n = CONNECT_BATCH.min(IDLE - batch * CONNECT_BATCH);
            let opened: Vec<_> = (0..n).map(|_| tokio::spawn(idle_connection(addr))).collect();
            for o in opened {
                match o.await.unwrap() {
                    Ok(s) => idle.push(s),
                    Err(e) => idle_errors.push(e.to_string()),
                }
            }
        }
        let idle_open = load_start.elapsed();

        // 2. Downloads, each paused after its first 64 KiB until every other connection is open.
        let arrived = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let mut downloads = Vec::with_capacity(DOWNLOADS);
        for batch in 0..DOWNLOADS.div_ceil(CONNECT_BATCH) {
            let n = CONNECT_BATCH.min(DOWNLOADS - batch * CONNECT_BATCH);
            downloads
                .extend((0..n).map(|_| tokio::spawn(download(addr, iso_path.clone(), arrived.clone(), go_rx.clone()))));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(45);
        while arrived.load(Ordering::SeqCst) < DOWNLOADS && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // 3. Slow heads and slow bodies; the peak is once every one of them has sent something.
        let connected = Arc::new(AtomicUsize::new(0));
        let slow_started = Instant::now();
        let mut heads = Vec::with_capacity(SLOWLORIS);
        let mut bodies = Vec::with_capacity(SLOW_BODIES);
        for batch in 0..(SLOWLORIS + SLOW_BODIES).div_ceil(CONNECT_BATCH) {
            for k in batch * CONNECT_BATCH..((batch + 1) * CONNECT_BATCH).min(SLOWLORIS + SLOW_BODIES) {
                if k < SLOWLORIS {
                    heads.push(tokio::spawn(slowloris(addr, connected.clone(), HEADER_TIMEOUT * 3)));
                } else {
                    let i = k - SLOWLORIS;
                    bodies.push(tokio::spawn(slow_body(addr, i, i % 2 == 0, connected.clone(), BODY_TIMEOUT * 3)));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(8);
        while connected.load(Ordering::SeqCst) < SLOWLORIS + SLOW_BODIES && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let all_open = load_start.elapsed();
        let a = server.addr.clone();
        let inflight = tokio::task::spawn_blocking(move || image_downloads_inflight(&a)).await.unwrap();
        let (rss, fds) = sample(pid);
        let gate = Gate {
            arrived: arrived.load(Ordering::SeqCst),
            connected: connected.load(Ordering::SeqCst),
            idle_open,
            all_open,
            slow_open_after: slow_started.elapsed(),
            inflight,
            rss,
            fds,
        };

        // 4. The downloads go on to their end; the slow clients are cut off at their timeouts.
        go_tx.send(true).unwrap();
        let mut finished = Vec::new();
        for t in downloads {
            finished.push(t.await.unwrap());
        }
        let downloads_done = load_start.elapsed();
        let mut heads_closed = Vec::new();
        for t in heads {
            heads_closed.push(t.await.unwrap());
        }
        let mut bodies_closed = Vec::new();
        for t in bodies {
            bodies_closed.push(t.await.unwrap());
        }

        // 5. Every idle connection is still there and served (its idle timeout is 75 s).
        let still: Vec<_> = idle
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    s.write_all(format!("GET /live HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
                        .await?;
                    read_small_response(&mut s).await
                })
            })
            .collect();
        let mut idle_served = 0;
        for t in still {
            match t.await.unwrap() {
                Ok(200) => idle_served += 1,
                Ok(other) => idle_errors.push(format!("a second request answered {other}")),
                Err(e) => idle_errors.push(format!("a second request: {e}")),
            }
        }
        Outcome { gate, finished, downloads_done, heads_closed, bodies_closed, idle_served, idle_errors }
    });
    let load_time = load_start.elapsed();
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    sampler.join().unwrap();
    let Outcome { gate, finished, downloads_done, heads_closed, bodies_closed, idle_served, idle_errors } = outcome;
    let (peak_rss, peak_fds) = *peaks.lock().unwrap();
    let (peak_rss, peak_fds) = (peak_rss.max(gate.rss), peak_fds.max(gate.fds));

    // After the load, the descriptors come back to their idle level (nothing leaked).
    let settle_start = Instant::now();
    let after = loop {
        let (rss, fds) = sample(pid);
        if fds <= base_fds + 4 || settle_start.elapsed() > Duration::from_secs(15) {
            break (rss, fds);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let r = server.get(ie_path);
    assert_eq!(r.status, 200, "the API answers after the load: {}", r.text());
    assert_eq!(server.get("/ready").status, 200);
    // What the connections held is free again: the allocator keeps the pages (RssAnon stays near
    // its peak), but a second wave of idle connections fits in them instead of growing the heap.
    let second_wave = rt.block_on(async {
        let opened: Vec<_> = (0..IDLE).map(|_| tokio::spawn(idle_connection(addr))).collect();
        let mut held = Vec::new();
        for o in opened {
            held.push(o.await.unwrap().expect("a second-wave idle connection"));
        }
        let (rss, _) = sample(pid);
        drop(held);
        rss
    });

    let mut latency = latency.lock().unwrap();
    latency.all.sort();
    let pct =
        |q: f64| latency.all.get(((latency.all.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    let (p50, p99) = (pct(0.5), pct(0.99));
    let ok = finished.iter().filter(|d| matches!(d, Ok(d) if d.status == 200)).count();
    let errors: Vec<String> = finished.iter().filter_map(|d| d.as_ref().err().map(|e| e.to_string())).collect();
    let closed: Vec<Duration> = heads_closed.iter().filter_map(|s| s.as_ref().ok().copied().flatten()).collect();
    let slow_errors: Vec<String> =
        heads_closed.iter().filter_map(|s| s.as_ref().err().map(|e| e.to_string())).collect();
    let (close_min, close_max) =
        (closed.iter().min().copied().unwrap_or_default(), closed.iter().max().copied().unwrap_or_default());
    let bodies_ok: Vec<Duration> = bodies_closed
        .iter()
        .filter_map(|b| match b {
            Ok((Some(at), answer)) if answer.starts_with("HTTP/1.1 408") => Some(*at),
            _ => None,
        })
        .collect();
    let body_failures: Vec<String> = bodies_closed
        .iter()
        .filter_map(|b| match b {
            Ok((Some(_), answer)) if answer.starts_with("HTTP/1.1 408") => None,
            other => Some(format!("{other:?}")),
        })
        .collect();
    // Answers this client read only after its own write had failed (it woke after the server's
    // lingering drain): the 408 was there all along.
    let read_late = bodies_closed
        .iter()
        .filter(
            |b| matches!(b, Ok((Some(_), answer)) if answer.starts_with("HTTP/1.1 408") && answer.contains("[write:")),
        )
        .count();
    let body_max = bodies_ok.iter().max().copied().unwrap_or_default();
    let body_min = bodies_ok.iter().min().copied().unwrap_or_default();
    eprintln!(
        "load: {connections} connections: {IDLE} idle keep-alive (open after {:.2?}), {DOWNLOADS} downloads of \
         {ref_len} bytes, {SLOWLORIS} slow heads and {SLOW_BODIES} slow bodies (all sending after {:.2?}); all open \
         after {:.2?} ({} downloads arrived, {} slow clients sending, {} image responses in flight on the server); \
         downloads done after {downloads_done:.2?} ({:.0} MiB/s); whole load {load_time:.2?}",
        gate.idle_open,
        gate.slow_open_after,
        gate.all_open,
        gate.arrived,
        gate.connected,
        gate.inflight,
        (DOWNLOADS as f64 * ref_len as f64) / (1 << 20) as f64 / (downloads_done - gate.all_open).as_secs_f64()
    );
    eprintln!(
        "server: RssAnon idle {base_rss} KiB, with all open {} KiB, peak {peak_rss} KiB (growth {} KiB, {:.1} KiB \
         per connection), after {} KiB, with a second wave of {IDLE} idle connections {second_wave} KiB; fds idle \
         {base_fds}, with all open {}, peak {peak_fds}, after {} (settled in {:.2?})",
        gate.rss,
        peak_rss - base_rss,
        (peak_rss - base_rss) as f64 / connections as f64,
        after.0,
        gate.fds,
        after.1,
        settle_start.elapsed()
    );
    eprintln!(
        "slow heads: {} of {SLOWLORIS} closed after {close_min:.2?}..{close_max:.2?}; slow bodies: {} of \
         {SLOW_BODIES} answered 408 after {body_min:.2?}..{body_max:.2?} ({read_late} read after the client's write \
         had failed); idle: {idle_served} of {IDLE} served \
         again; API: {} calls, p50 {p50:.2?}, p99 {p99:.2?}, max {:.2?} ({}), {} failures; downloads ok {ok}, \
         errors {}; test {:.2?}",
        closed.len(),
        bodies_ok.len(),
        latency.calls,
        latency.max,
        latency.max_what,
        latency.failures.len(),
        errors.len(),
        test_start.elapsed()
    );
    let slow_calls: Vec<String> =
        latency.slow.iter().map(|(at, took, what)| format!("{what} {took:.2?} at {at:.1}s")).collect();
    eprintln!("API calls over 250 ms: {slow_calls:?}");

    // Every download complete and byte-exact.
    assert!(errors.is_empty(), "{} downloads failed, first: {:?}", errors.len(), errors.first());
    assert!(slow_errors.is_empty(), "slowloris clients failed to connect: {:?}", slow_errors.first());
    for d in finished.iter().map(|d| d.as_ref().unwrap()) {
        assert_eq!(d.status, 200, "{d:?}");
        assert_eq!((d.content_length, d.received), (ref_len, ref_len), "{d:?}");
        assert_eq!(d.sha256, ref_sha, "a download differs from the reference");
    }
    // They really were concurrent: every connection open at once, the server writing every download.
    assert_eq!(gate.arrived, DOWNLOADS);
    assert_eq!(gate.connected, SLOWLORIS + SLOW_BODIES, "slow clients were not all sending at the peak");
    assert!(gate.slow_open_after < HEADER_TIMEOUT, "the slow clients took {:?} to connect", gate.slow_open_after);
    assert!(gate.inflight >= DOWNLOADS as i64, "only {} image responses were in flight at the peak", gate.inflight);
    assert!(gate.fds >= base_fds + connections, "only {} descriptors at the peak, {base_fds} idle", gate.fds);

    // Descriptors: one socket per connection and no descriptor per download besides it (the base
    // image is opened once), plus 32 of slack for anything transient (store, the prober, logs).
    let fd_bound = base_fds + connections + 32;
    assert!(peak_fds <= fd_bound, "peak of {peak_fds} open fds over the bound {fd_bound}");
    assert!(after.1 <= base_fds + 4, "fds did not come back to idle ({base_fds}): {} after the load", after.1);
    // Memory: the fast path keeps no buffer per idle connection and sendfile keeps image bytes out of
    // user space. A download costs its task, its parsed request and a read buffer of a few KiB
    // (measured at 1,000 downloads: about 24 KiB each); a slow head or body holds what it sent so
    // far (the buffer read into grows 4 KiB at a time); an idle connection its task and socket.
    // Bound: 64 KiB per download and slow client, 8 KiB per idle connection, plus 32 MiB for the
    // allocator's per-thread caches and the response plans.
    // Measured: about 14 KiB per connection on average (test build); a buffer or handler state kept
    // per idle connection would break the bound (`http::server::tests::a_connections_task_is_small`).
    let rss_bound = 64 * DOWNLOADS as u64 + 32 * (SLOWLORIS + SLOW_BODIES) as u64 + 16 * IDLE as u64 + 32 * 1024;
    assert!(
        peak_rss - base_rss <= rss_bound,
        "RssAnon grew by {} KiB under load, over the bound {rss_bound} KiB",
        peak_rss - base_rss
    );
    assert!(
        second_wave <= peak_rss + 8 * 1024,
        "a second wave of {IDLE} idle connections grew RssAnon to {second_wave} KiB, over the first peak {peak_rss} KiB"
    );

    // Slow heads: every connection closed by the server, at its header timeout (not held, not early).
    assert_eq!(closed.len(), SLOWLORIS, "{} slow heads were still open after 30 s", SLOWLORIS - closed.len());
    assert!(close_max <= HEADER_TIMEOUT + Duration::from_secs(5), "a slowloris connection lasted {close_max:?}");
    assert!(
        close_min >= HEADER_TIMEOUT - Duration::from_secs(1),
        "a slowloris connection was closed after {close_min:?}"
    );
    // Slow bodies: answered 408 at the body timeout, on both paths.
    assert!(
        body_failures.is_empty(),
        "{} slow bodies were not answered 408: {:?}",
        body_failures.len(),
        body_failures.first()
    );
    assert!(body_max <= BODY_TIMEOUT + Duration::from_secs(5), "a slow body lasted {body_max:?}");
    assert!(body_min >= BODY_TIMEOUT - Duration::from_secs(1), "a slow body was cut off after {body_min:?}");
    // Idle keep-alive connections: all kept, all served again.
    assert!(idle_errors.is_empty(), "{} idle connections failed: {:?}", idle_errors.len(), idle_errors.first());
    assert_eq!(idle_served, IDLE);

    // The API kept answering, within its bound.
    assert!(latency.failures.is_empty(), "API calls failed under load: {:?}", latency.failures);
    assert!(latency.calls >= 10, "only {} API calls were made during the load", latency.calls);
    assert!(latency.max <= API_BOUND, "an API call ({}) took {:?} under load", latency.max_what, latency.max);
    assert!(test_start.elapsed() < Duration::from_secs(120), "the test took {:?}", test_start.elapsed());
}

/// The moment every connection is open.
struct Gate {
    arrived: usize,
    connected: usize,
    idle_open: Duration,
    all_open: Duration,
    slow_open_after: Duration,
    inflight: i64,
    rss: u64,
    fds: usize,
}

struct Outcome {
    gate: Gate,
    finished: Vec<std::io::Result<Download>>,
    downloads_done: Duration,
    heads_closed: Vec<std::io::Result<Option<Duration>>>,
    bodies_closed: Vec<std::io::Result<(Option<Duration>, String)>>,
    idle_served: usize,
    idle_errors: Vec<String>,
}
