//! Load (issue 7): 1,000 concurrent downloads plus 200 slowloris connections on loopback, bounded in
//! time; every complete download byte-exact, the server's anonymous RSS and open file descriptors
//! bounded, the API still answering within a bound, slowloris connections closed by the server's
//! header timeout, and the descriptors back to their idle level afterwards.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DOWNLOADS: usize = 1000;
const SLOWLORIS: usize = 200;
/// Rootfs bytes of the generated base image. The whole ISO (about 8.5 MiB) must be larger than what a
/// paused client's small receive buffer plus the server's send buffer hold (tcp_wmem max is 4 MiB),
/// so that every download is still being written by the server while all 1,000 are open.
const ROOTFS_BYTES: usize = 8 << 20;
/// Receive buffer of each downloading client: keeps the kernel from buffering whole responses, so the
/// server really holds 1,000 responses in flight at once.
const CLIENT_RCVBUF: u32 = 64 * 1024;
/// The server's header timeout (ServerConfig::default in src/http/server.rs).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
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

/// A slowloris client: sends a request head one byte a second and never finishes it. Returns how
/// long the server kept the connection (None if it was still open after `give_up`).
async fn slowloris(addr: std::net::SocketAddr, give_up: Duration) -> std::io::Result<Option<Duration>> {
    // Timed from before the connect: the server's header timeout cannot start earlier, so a close
    // seen before HEADER_TIMEOUT is the server's doing, not a late poll of this task.
    let started = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let head = format!("GET /ready HTTP/1.1\r\nHost: {addr}\r\nX-Padding: {}", "a".repeat(1000));
    let mut bytes = head.bytes();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut scratch = [0u8; 1024];
    loop {
        tokio::select! {
            r = s.read(&mut scratch) => match r {
                Ok(0) | Err(_) => return Ok(Some(started.elapsed())),
                // An answer (a 408, say) is fine; what counts is that the connection ends.
                Ok(_) => {}
            },
            _ = tick.tick() => {
                if started.elapsed() > give_up {
                    return Ok(None);
                }
                let b = bytes.next().unwrap_or(b'a');
                if s.write_all(&[b]).await.is_err() {
                    return Ok(Some(started.elapsed()));
                }
            }
        }
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
fn a_thousand_downloads_and_two_hundred_slowloris_connections() {
    let test_start = Instant::now();
    let nofile = raise_nofile_limit();
    assert!(nofile >= 4096, "RLIMIT_NOFILE hard limit {nofile} is too low for this test");

    let dir = tempfile::tempdir().unwrap();
    let iso = dir.path().join("base.iso");
    std::fs::write(&iso, bootstream::sample::large_sample_iso_bytes(ROOTFS_BYTES).unwrap()).unwrap();
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
    eprintln!("idle: pid {pid}, RssAnon {base_rss} KiB, {base_fds} fds; ISO {ref_len} bytes; RLIMIT_NOFILE {nofile}");

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
                let r = try_request(&addr, "GET", path, headers, b"");
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
    let (downloads, slow, gate) = rt.block_on(async {
        let slow: Vec<_> = (0..SLOWLORIS).map(|_| tokio::spawn(slowloris(addr, HEADER_TIMEOUT * 3))).collect();
        let arrived = Arc::new(AtomicUsize::new(0));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        // All at once: the server's listen queue must take the burst. With tokio's default backlog of
        // 1,024, the kernel dropped some 400 of these connects (TcpExtListenOverflows) and the clients
        // caught in it, an API call among them, waited 1-3 s for TCP to retry; the server now listens
        // with a backlog of 4,096 (`http::server::LISTEN_BACKLOG`), and the API bound below holds.
        let tasks: Vec<_> = (0..DOWNLOADS)
            .map(|_| tokio::spawn(download(addr, iso_path.clone(), arrived.clone(), go_rx.clone())))
            .collect();
        // Every client has its head and first bytes: 1,000 responses are open at once. What the
        // server holds at this moment is its peak.
        let deadline = Instant::now() + Duration::from_secs(45);
        while arrived.load(Ordering::SeqCst) < DOWNLOADS && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let all_open = load_start.elapsed();
        let a = server.addr.clone();
        let inflight = tokio::task::spawn_blocking(move || image_downloads_inflight(&a)).await.unwrap();
        let (rss, fds) = sample(pid);
        let gate = (arrived.load(Ordering::SeqCst), all_open, inflight, rss, fds);
        go_tx.send(true).unwrap();
        let mut downloads = Vec::new();
        for t in tasks {
            downloads.push(t.await.unwrap());
        }
        let downloads_done = load_start.elapsed();
        let mut slow_results = Vec::new();
        for t in slow {
            slow_results.push(t.await.unwrap());
        }
        ((downloads, downloads_done), slow_results, gate)
    });
    let load_time = load_start.elapsed();
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    sampler.join().unwrap();
    let (downloads, downloads_done) = downloads;
    let (arrived, all_open, inflight, gate_rss, gate_fds) = gate;
    let (peak_rss, peak_fds) = *peaks.lock().unwrap();
    let (peak_rss, peak_fds) = (peak_rss.max(gate_rss), peak_fds.max(gate_fds));

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

    let mut latency = latency.lock().unwrap();
    latency.all.sort();
    let pct =
        |q: f64| latency.all.get(((latency.all.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    let (p50, p99) = (pct(0.5), pct(0.99));
    let ok = downloads.iter().filter(|d| matches!(d, Ok(d) if d.status == 200)).count();
    let errors: Vec<String> = downloads.iter().filter_map(|d| d.as_ref().err().map(|e| e.to_string())).collect();
    let closed: Vec<Duration> = slow.iter().filter_map(|s| s.as_ref().ok().copied().flatten()).collect();
    let slow_errors: Vec<String> = slow.iter().filter_map(|s| s.as_ref().err().map(|e| e.to_string())).collect();
    let close_min = closed.iter().min().copied().unwrap_or_default();
    let close_max = closed.iter().max().copied().unwrap_or_default();
    eprintln!(
        "load: {DOWNLOADS} downloads of {ref_len} bytes + {SLOWLORIS} slowloris; all open after {all_open:.2?} \
         ({arrived} arrived, {inflight} image responses in flight on the server); downloads done after \
         {downloads_done:.2?} ({:.0} MiB/s); whole load {load_time:.2?}",
        (DOWNLOADS as f64 * ref_len as f64) / (1 << 20) as f64 / (downloads_done - all_open).as_secs_f64()
    );
    eprintln!(
        "server: RssAnon idle {base_rss} KiB, with all open {gate_rss} KiB, peak {peak_rss} KiB (growth {} KiB), \
         after {} KiB; fds idle {base_fds}, with all open {gate_fds}, peak {peak_fds}, after {} (settled in {:.2?})",
        peak_rss - base_rss,
        after.0,
        after.1,
        settle_start.elapsed()
    );
    eprintln!(
        "slowloris: {} of {SLOWLORIS} closed by the server after {close_min:.2?}..{close_max:.2?}; API: {} calls, \
         p50 {p50:.2?}, p99 {p99:.2?}, max {:.2?} ({}), {} failures; downloads ok {ok}, errors {}; test {:.2?}",
        closed.len(),
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
    for d in downloads.iter().map(|d| d.as_ref().unwrap()) {
        assert_eq!(d.status, 200, "{d:?}");
        assert_eq!((d.content_length, d.received), (ref_len, ref_len), "{d:?}");
        assert_eq!(d.sha256, ref_sha, "a download differs from the reference");
    }
    // They really were concurrent: all 1,000 open at once, the server writing every one of them.
    assert_eq!(arrived, DOWNLOADS);
    assert!(inflight >= DOWNLOADS as i64, "only {inflight} image responses were in flight at the peak");

    // Descriptors: one socket per connection (1,000 downloads, 200 slowloris, a prober connection and
    // the /metrics scrape), no descriptor per download besides it (the base image is opened once),
    // plus 32 of slack for anything transient (store, logs).
    let fd_bound = base_fds + DOWNLOADS + SLOWLORIS + 32;
    assert!(peak_fds <= fd_bound, "peak of {peak_fds} open fds over the bound {fd_bound}");
    assert!(after.1 <= base_fds + 4, "fds did not come back to idle ({base_fds}): {} after the load", after.1);
    // Memory: the fast path keeps no buffer per idle connection and sendfile keeps image bytes out of
    // user space, so a connection costs its task, its parsed request and a read buffer of a few KiB.
    // Bound: 64 KiB per connection (1,200: 75 MiB) plus 16 MiB of slack for the allocator's per-thread
    // caches and the response plans (their in-memory parts are shared, not copied per response).
    // Measured: about 29 MiB of growth (some 24 KiB per connection); a 64 KiB buffer kept per
    // connection on top of that would break the bound.
    let rss_bound = 64 * (DOWNLOADS + SLOWLORIS) as u64 + 16 * 1024;
    assert!(
        peak_rss - base_rss <= rss_bound,
        "RssAnon grew by {} KiB under load, over the bound {rss_bound} KiB",
        peak_rss - base_rss
    );

    // Slowloris: every connection closed by the server, at its header timeout (not held, not early).
    assert_eq!(
        closed.len(),
        SLOWLORIS,
        "{} slowloris connections were still open after 30 s",
        SLOWLORIS - closed.len()
    );
    assert!(close_max <= HEADER_TIMEOUT + Duration::from_secs(5), "a slowloris connection lasted {close_max:?}");
    assert!(
        close_min >= HEADER_TIMEOUT - Duration::from_secs(1),
        "a slowloris connection was closed after {close_min:?}"
    );

    // The API kept answering, within its bound.
    assert!(latency.failures.is_empty(), "API calls failed under load: {:?}", latency.failures);
    assert!(latency.calls >= 10, "only {} API calls were made during the load", latency.calls);
    assert!(latency.max <= API_BOUND, "an API call ({}) took {:?} under load", latency.max_what, latency.max);
    assert!(test_start.elapsed() < Duration::from_secs(100), "the test took {:?}", test_start.elapsed());
}
