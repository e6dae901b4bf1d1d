//! Faults (issue 7): the server SIGKILLed at seeded random points of the host lifecycle and restarted
//! on its data directory (real binary, real SQLite) loses, duplicates and strands nothing, and cut
//! downloads resume byte-exact; a base image truncated or rewritten in place, or a downloaded one
//! damaged while the server is stopped, is never served; a disk that fills up while an OS image
//! downloads leaves no partial file and a clear error; a server killed mid-download leaves no partial
//! file behind once it has started again.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const NS: &str = "faults";

/// InfraEnv `ie-{i}` selecting NMStateConfig `nm-{i}`, both in one document stream.
fn infraenv_with_nmstate(i: usize) -> String {
    let selector = format!("  nmStateConfigLabelSelector:\n    matchLabels:\n      ie: ie-{i}\n");
    format!(
        "{}---\napiVersion: agent-install.openshift.io/v1beta1\nkind: NMStateConfig\nmetadata:\n  name: nm-{i}\n  namespace: {NS}\n  labels:\n    ie: ie-{i}\nspec:\n  config:\n    interfaces:\n      - name: eth0\n        type: ethernet\n        state: up\n        mac-address: 02:00:00:80:13:{i:02x}\n        ipv4:\n          enabled: true\n          address:\n            - ip: 192.168.126.{}\n              prefix-length: 24\n          dhcp: false\n  interfaces:\n    - name: eth0\n      macAddress: 02:00:00:80:13:{i:02x}\n",
        infraenv_yaml(NS, &format!("ie-{i}"), &selector),
        10 + i
    )
}

/// A small deterministic generator (splitmix64), seeded from FAULTS_SEED or the clock; the seed is
/// printed so that a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn from_env() -> Rng {
        let seed = std::env::var("FAULTS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("faults: seed {seed} (replay with FAULTS_SEED={seed})");
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo + 1))
    }
}

/// A `bootstream simulate` process kept running: `simulate` gives up when the server cannot be reached
/// as it starts (it looks the InfraEnv up once), so a kill at that moment ends it; like the agent's
/// systemd unit, it is started again.
struct Fleet {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `bootstream simulate`: `hosts` discovery agents booting from `infraenv`, host ids from `seed`.
fn simulate(s: &Server, infraenv: &str, hosts: usize, seed: &str) -> Fleet {
    let spawn = {
        let (server, kubeconfig) = (s.url.clone(), s.kubeconfig.clone());
        let (infraenv, seed) = (infraenv.to_string(), seed.to_string());
        move || -> Child {
            Command::new(BIN)
                .env("BOOTSTREAM_TOKEN", TEST_API_TOKEN)
                .args(["simulate", "--server", &server, "--kubeconfig", &kubeconfig, "--infraenv", &infraenv])
                .args(["--hosts", &hosts.to_string()])
                .args(["--time-scale", "0.02", "--reboot-check-seconds", "1", "--seed", &seed])
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut child = spawn();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(Some(_)) = child.try_wait() {
                    std::thread::sleep(Duration::from_millis(100));
                    child = spawn();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        })
    };
    Fleet { stop, thread: Some(thread) }
}

fn free_loopback_address() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn list(s: &Server, kind: &str) -> Vec<Value> {
    let out = cli(&["get", "--kubeconfig", &s.kubeconfig, kind, "-A", "-o", "json"], None);
    assert!(out.status.success(), "get {kind}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap().to_string()
}

fn state(a: &Value) -> &str {
    a["status"]["debugInfo"]["state"].as_str().unwrap_or("")
}

/// Asserts that no two objects of the list share a namespace and name or a uid.
fn assert_unique(kind: &str, items: &[Value]) {
    let mut keys: Vec<String> =
        items.iter().map(|o| format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap_or(""), name(o))).collect();
    let mut uids: Vec<String> = items.iter().map(|o| o["metadata"]["uid"].as_str().unwrap_or("").to_string()).collect();
    keys.sort();
    uids.sort();
    let n = keys.len();
    keys.dedup();
    uids.dedup();
    assert_eq!(keys.len(), n, "duplicate {kind} names: {keys:?}");
    assert_eq!(uids.len(), n, "duplicate {kind} uids");
}

fn wait_for<T>(what: &str, timeout: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "never got {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (polling every millisecond) until `counter` reaches `n`: a kill point in a sequence.
fn wait_count(counter: impl Fn() -> usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter() < n {
        assert!(Instant::now() < deadline, "the sequence never reached step {n}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_agents(s: &Server, what: &str, timeout: u64, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        let l = list(s, "agents");
        if done(&l) {
            return l;
        }
        if Instant::now() > deadline {
            let states: Vec<_> = l
                .iter()
                .map(|a| {
                    let installed = condition(a, "Installed").and_then(|c| c["message"].as_str()).unwrap_or("");
                    format!("{} {} ({installed})", name(a), state(a))
                })
                .collect();
            panic!("agents never got {what}: {states:#?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn patch(s: &Server, kind: &str, name: &str, json: &str) -> std::process::Output {
    cli(&["patch", "--kubeconfig", &s.kubeconfig, kind, name, "-n", NS, "--type", "merge", "-p", json], None)
}

fn bind_patch(cd: &str) -> String {
    format!(r#"{{"spec":{{"approved":true,"clusterDeploymentName":{{"name":"{cd}","namespace":"{NS}"}}}}}}"#)
}

/// Kills the server (SIGKILL) and starts it again on the same data directory and address.
fn restart(s: Server, listen: &str, args: &[&str], kills: &mut Vec<String>, phase: &str) -> Server {
    let started = Instant::now();
    let dir = s.kill();
    let s = Server::start_in(dir, listen, args);
    let line = format!("{phase}: restarted in {:.2?}", started.elapsed());
    eprintln!("faults: {line}");
    kills.push(line);
    s
}

/// A download that survives the server going away: on a cut it reconnects and resumes with Range and
/// If-Range (the ETag it got), as curl -C or a BMC's HTTP client does; a 200 instead of a 206 starts
/// over. Reads slowly so that it is in flight when the server is killed.
fn resilient_download(addr: &str, path: &str, deadline: Instant) -> Result<Resilient, String> {
    let mut have: Vec<u8> = Vec::new();
    let mut etag: Option<String> = None;
    let (mut cuts, mut cuts_mid_body, mut resumed) = (0, 0, 0);
    loop {
        if Instant::now() > deadline {
            return Err(format!("gave up after {cuts} cuts with {} bytes", have.len()));
        }
        let Ok(mut s) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if let (false, Some(tag)) = (have.is_empty(), &etag) {
            req.push_str(&format!("Range: bytes={}-\r\nIf-Range: {tag}\r\n", have.len()));
        }
        req.push_str("\r\n");
        if s.write_all(req.as_bytes()).is_err() {
            cuts += 1;
            continue;
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut filled = 0;
        let head = loop {
            match s.read(&mut buf[filled..]) {
                Ok(0) | Err(_) => break None,
                Ok(n) => filled += n,
            }
            let mut hdrs = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut hdrs);
            if let Ok(httparse::Status::Complete(len)) = resp.parse(&buf[..filled]) {
                let h = |n: &str| {
                    resp.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(n))
                        .map(|h| String::from_utf8_lossy(h.value).into_owned())
                };
                break Some((resp.code.unwrap(), h("content-length"), h("etag"), len));
            }
        };
        let Some((status, content_length, tag, head_len)) = head else {
            cuts += 1;
            continue;
        };
        match status {
            200 => have.clear(),
            206 => resumed += 1,
            // The server is up but the image is not ready yet.
            503 => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            other => return Err(format!("HTTP {other}: {}", String::from_utf8_lossy(&buf[head_len..filled]))),
        }
        if tag.is_some() {
            etag = tag;
        }
        let expected: usize = content_length.and_then(|c| c.parse().ok()).ok_or("no Content-Length")?;
        let start = have.len();
        have.extend_from_slice(&buf[head_len..filled]);
        let began = Instant::now();
        loop {
            if have.len() - start >= expected {
                break;
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => have.extend_from_slice(&buf[..n]),
            }
            // At most 4 MiB/s: a whole image takes about 4 s.
            let due = Duration::from_secs_f64((have.len() - start) as f64 / (4 << 20) as f64);
            std::thread::sleep(due.saturating_sub(began.elapsed()));
        }
        if have.len() - start == expected {
            return Ok(Resilient { bytes: have, cuts, cuts_mid_body, resumed });
        }
        if have.len() - start > expected {
            return Err(format!("{} bytes for a body of {expected}", have.len() - start));
        }
        cuts += 1;
        if !have.is_empty() && etag.is_some() {
            cuts_mid_body += 1;
        }
    }
}

struct Resilient {
    bytes: Vec<u8>,
    /// Times the connection broke.
    cuts: usize,
    /// Of those, times it broke with part of the body received (a resume can follow).
    cuts_mid_body: usize,
    /// Times a resumed request got a 206 (the rest), not a 200 (everything again).
    resumed: usize,
}

/// Rounds of the lifecycle, each on a fresh data directory with its own five kills.
const ROUNDS: u64 = 3;
/// Hosts booting from ie-0 (three of them are bound to a cluster) and from ie-1 (deleted with it).
const POOL: usize = 12;
const OTHERS: usize = 8;

#[test]
fn sigkill_at_random_points_of_the_lifecycle_loses_duplicates_and_strands_nothing() {
    let test_start = Instant::now();
    let mut rng = Rng::from_env();
    for round in 0..ROUNDS {
        eprintln!("faults: round {round}");
        lifecycle_with_kills(&mut rng);
    }
    eprintln!("faults: {ROUNDS} rounds of 5 kills passed in {:.2?}", test_start.elapsed());
}

/// One lifecycle killed five times: during creation, during registration with downloads in flight,
/// during binding, during installation and during deletion.
fn lifecycle_with_kills(rng: &mut Rng) {
    let test_start = Instant::now();
    let mut kills: Vec<String> = Vec::new();
    let images = tempfile::tempdir().unwrap();
    let iso = images.path().join("base.iso");
    // About 16.5 MiB: a download read slowly takes seconds, so it is in flight when the server dies.
    std::fs::write(&iso, bootstream::formats::sample::large_sample_iso_bytes(16 << 20).unwrap()).unwrap();
    let image = format!("4.20:x86_64:{}", iso.display());
    let args = ["--os-image", image.as_str()];
    let listen = free_loopback_address();
    let mut s = Server::start_in(tempfile::tempdir().unwrap(), &listen, &args);
    s.apply_ok(&format!("{}---\n{IMAGE_SET}", pull_secret_yaml(NS)));
    const INFRAENVS: usize = 6;

    // 1. Killed while InfraEnvs and NMStateConfigs are being created.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let creator = {
        let (kubeconfig, acked) = (s.kubeconfig.clone(), acked.clone());
        std::thread::spawn(move || {
            for i in 0..INFRAENVS {
                let out = cli(&["apply", "--kubeconfig", &kubeconfig, "-f", "-"], Some(&infraenv_with_nmstate(i)));
                if out.status.success() {
                    acked.lock().unwrap().push(i);
                }
            }
        })
    };
    // After a random number of acknowledged applies, at a random moment of the next one.
    let k = (rng.next() % INFRAENVS as u64) as usize;
    wait_count(|| acked.lock().unwrap().len(), k);
    // An apply takes some 5-10 ms (a CLI process and one request).
    let delay = rng.millis(0, 8);
    std::thread::sleep(delay);
    let before_kill = acked.lock().unwrap().len();
    s = restart(s, &listen, &args, &mut kills, &format!("kill 1 during creation, {delay:?} after apply #{k}"));
    creator.join().unwrap();
    // Applies that ran into the restarted server count as acknowledged too: all must be there.
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "faults:   {before_kill} of {INFRAENVS} InfraEnv applies acknowledged at the kill, {} once the creator finished",
        acked.len()
    );
    let ies = list(&s, "infraenvs");
    assert_unique("InfraEnv", &ies);
    let nms = list(&s, "nmstateconfigs");
    assert_unique("NMStateConfig", &nms);
    let uid_of = |items: &[Value], n: &str| -> Option<String> {
        items.iter().find(|o| name(o) == n).map(|o| o["metadata"]["uid"].as_str().unwrap().to_string())
    };
    let mut uids_after_kill = Vec::new();
    for &i in &acked {
        let uid = uid_of(&ies, &format!("ie-{i}"));
        assert!(uid.is_some(), "InfraEnv ie-{i} was acknowledged before the kill but is gone");
        assert!(uid_of(&nms, &format!("nm-{i}")).is_some(), "NMStateConfig nm-{i} acknowledged but gone");
        uids_after_kill.push((i, uid.unwrap()));
    }
    // What was not acknowledged is applied again (as a user or GitOps would): every one exactly once,
    // each with its image.
    for i in 0..INFRAENVS {
        s.apply_ok(&infraenv_with_nmstate(i));
    }
    let ies = list(&s, "infraenvs");
    assert_unique("InfraEnv", &ies);
    assert_eq!(ies.len(), INFRAENVS);
    for (i, uid) in &uids_after_kill {
        assert_eq!(uid_of(&ies, &format!("ie-{i}")).as_ref(), Some(uid), "re-applying ie-{i} replaced it");
    }
    let mut iso_paths = Vec::new();
    for i in 0..INFRAENVS {
        let ie = s.wait_image_created(NS, &format!("ie-{i}"), "True");
        let url = ie["status"]["isoDownloadURL"].as_str().unwrap_or_else(|| panic!("ie-{i} has no isoDownloadURL"));
        iso_paths.push(s.path_of(url));
    }

    // 2. Killed while hosts register and images download.
    let references: Vec<String> = iso_paths[..3]
        .iter()
        .map(|p| {
            let r = s.get(p);
            assert_eq!(r.status, 200);
            sha256_hex(&r.body)
        })
        .collect();
    let fleet0 = simulate(&s, &format!("{NS}/ie-0"), POOL, "zero");
    let fleet1 = simulate(&s, &format!("{NS}/ie-1"), OTHERS, "one");
    let downloads: Vec<_> = (0..3)
        .map(|k| {
            let (addr, path) = (s.addr.clone(), iso_paths[k].clone());
            std::thread::spawn(move || resilient_download(&addr, &path, Instant::now() + Duration::from_secs(90)))
        })
        .collect();
    // The fleets register within some 100 ms of their start (spread the kill over that and the
    // polling after it); the slow downloads take about 4 s.
    let delay = rng.millis(0, 150);
    std::thread::sleep(delay);
    s = restart(s, &listen, &args, &mut kills, &format!("kill 2 during registration and downloads after {delay:?}"));
    let (mut total_cuts, mut total_mid_body, mut total_resumed) = (0, 0, 0);
    for (k, d) in downloads.into_iter().enumerate() {
        let d = d.join().unwrap().unwrap_or_else(|e| panic!("download of ie-{k}: {e}"));
        assert_eq!(sha256_hex(&d.bytes), references[k], "download of ie-{k} resumed across the restart differs");
        total_cuts += d.cuts;
        total_mid_body += d.cuts_mid_body;
        total_resumed += d.resumed;
    }
    eprintln!(
        "faults:   3 downloads in flight completed byte-exact after {total_cuts} cuts, {total_resumed} resumed with 206"
    );
    assert!(total_cuts >= 1, "no download was in flight when the server was killed");
    // The ETag survives the restart (same image, same content): the cut downloads resume, not restart.
    assert_eq!(total_resumed, total_mid_body, "a download cut by the kill could not resume with Range/If-Range");
    // After the restart the image is the same bytes as before it.
    assert_eq!(sha256_hex(&s.get(&iso_paths[0]).body), references[0]);
    let expected_hosts = |seed: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| bootstream::cli::simulate::host_id(seed, i)).collect::<Vec<_>>()
    };
    let mut all_hosts = [expected_hosts("zero", POOL), expected_hosts("one", OTHERS)].concat();
    all_hosts.sort();
    let registered = |l: &[Value]| {
        let mut names: Vec<String> = l.iter().map(name).collect();
        names.sort();
        names
    };
    let agents = wait_agents(&s, "every host a known-unbound agent", 90, |l| {
        l.len() >= POOL + OTHERS && l.iter().all(|a| state(a) == "known-unbound")
    });
    assert_unique("Agent", &agents);
    assert_eq!(registered(&agents), all_hosts, "every registered host has exactly one Agent");
    for a in &agents {
        let ie = a["metadata"]["labels"]["infraenvs.agent-install.openshift.io"].as_str().unwrap_or("");
        let want = if expected_hosts("zero", POOL).contains(&name(a)) { "ie-0" } else { "ie-1" };
        assert_eq!(ie, want, "agent {} is labeled with the wrong InfraEnv", name(a));
    }

    // 3. Killed while agents are being bound to a ClusterDeployment.
    s.apply_ok(&cluster_yaml(NS, "c1", 3));
    let to_bind = expected_hosts("zero", 3);
    let bound = Arc::new(AtomicUsize::new(0));
    let binder = {
        let (kubeconfig, to_bind, bound) = (s.kubeconfig.clone(), to_bind.clone(), bound.clone());
        std::thread::spawn(move || {
            for n in &to_bind {
                let _ = cli(
                    &[
                        "patch",
                        "--kubeconfig",
                        &kubeconfig,
                        "agent",
                        n,
                        "-n",
                        NS,
                        "--type",
                        "merge",
                        "-p",
                        &bind_patch("c1"),
                    ],
                    None,
                );
                bound.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let k = (rng.next() % to_bind.len() as u64) as usize;
    wait_count(|| bound.load(Ordering::SeqCst), k);
    let delay = rng.millis(0, 40);
    std::thread::sleep(delay);
    s = restart(s, &listen, &args, &mut kills, &format!("kill 3 during binding, {delay:?} after bind #{k}"));
    binder.join().unwrap();
    // The user retries the binds that may not have been taken.
    for n in &to_bind {
        let out = patch(&s, "agent", n, &bind_patch("c1"));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    // 4. Killed while they install.
    let delay = rng.millis(0, 1500);
    std::thread::sleep(delay);
    let states: Vec<String> = list(&s, "agents")
        .iter()
        .filter(|a| a["spec"]["clusterDeploymentName"]["name"] == "c1")
        .map(|a| state(a).to_string())
        .collect();
    s = restart(s, &listen, &args, &mut kills, &format!("kill 4 during installation after {delay:?} ({states:?})"));
    let agents = wait_agents(&s, "3 installed", 120, |l| {
        l.iter().filter(|a| state(a) == "installed" && a["spec"]["clusterDeploymentName"]["name"] == "c1").count() == 3
    });
    assert_unique("Agent", &agents);
    assert_eq!(registered(&agents), all_hosts);

    // 5. Killed while InfraEnvs are being deleted: one with no hosts, one whose unbound hosts go
    // with it (their fleet keeps running, as booted machines would), and the ClusterDeployment,
    // whose hosts go back to the pool.
    for (kind, n) in [("infraenv", "ie-5"), ("infraenv", "ie-1"), ("clusterdeployment", "c1")] {
        let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, kind, n, "-n", NS], None);
        assert!(out.status.success(), "delete {kind} {n}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let delay = rng.millis(0, 150);
    std::thread::sleep(delay);
    s = restart(s, &listen, &args, &mut kills, &format!("kill 5 during deletion after {delay:?}"));
    let gone = |kind: &str, n: &str| {
        !cli(&["get", "--kubeconfig", &s.kubeconfig, kind, n, "-n", NS, "-o", "json"], None).status.success()
    };
    wait_for("ie-5, ie-1 and c1 gone", 90, || {
        (gone("infraenv", "ie-5") && gone("infraenv", "ie-1") && gone("clusterdeployment", "c1")).then_some(())
    });
    let mut pool = expected_hosts("zero", POOL);
    pool.sort();
    let agents = wait_agents(&s, "ie-0's agents back in the pool, ie-1's gone", 120, |l| {
        registered(l) == pool
            && l.iter().all(|a| state(a) == "known-unbound" && a["spec"].get("clusterDeploymentName").is_none())
    });
    assert_unique("Agent", &agents);
    // Nothing stuck deleting.
    let ies = list(&s, "infraenvs");
    assert_unique("InfraEnv", &ies);
    let mut names: Vec<String> = ies.iter().map(name).collect();
    names.sort();
    assert_eq!(names, ["ie-0", "ie-2", "ie-3", "ie-4"]);
    for o in ies.iter().chain(agents.iter()) {
        assert!(o["metadata"]["deletionTimestamp"].is_null(), "{} stuck deleting: {o:#}", name(o));
    }
    // The surviving InfraEnvs still serve their images.
    for (k, p) in iso_paths.iter().enumerate().take(5).filter(|(k, _)| *k != 1) {
        assert_eq!(s.get(p).status, 200, "ie-{k}'s image after the restarts");
    }
    assert_eq!(sha256_hex(&s.get(&iso_paths[0]).body), references[0]);
    drop((fleet0, fleet1));
    assert_eq!(kills.len(), 5);
    eprintln!("faults: round with 5 kills passed in {:.2?}", test_start.elapsed());
}

/// The existing test `a_base_image_changed_or_gone_on_disk_is_503_never_wrong_bytes`
/// (tests/it/http/semantics.rs) covers a base image replaced by rename and one removed. This one covers
/// the same file changed in place: truncated while a download is in flight (the response is cut
/// short, never padded or filled with other bytes), then every new request refused with 503; and a
/// file rewritten in place with the same size (its mtime changes) refused as well.
#[test]
fn a_base_image_truncated_or_rewritten_in_place_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.iso");
    let original = bootstream::formats::sample::large_sample_iso_bytes(32 << 20).unwrap();
    std::fs::write(&base, &original).unwrap();
    let server = Server::start(&["--os-image", &format!("4.20:x86_64:{}", base.display())]);
    server.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "ie", "")));
    let ie = server.wait_image_created(NS, "ie", "True");
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let reference = server.get(&iso_path).body;

    // A download in flight (the client reads nothing yet: the server is blocked in sendfile).
    let mut s = TcpStream::connect(&server.addr).unwrap();
    write!(s, "GET {iso_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Truncated in place: same inode, a quarter of the size.
    let f = std::fs::OpenOptions::new().write(true).open(&base).unwrap();
    f.set_len(original.len() as u64 / 4).unwrap();
    drop(f);
    let mut raw = Vec::new();
    // Well within the server's 60 s write timeout: the cut comes from the file's end, not from a
    // wait for room in the socket that no longer comes.
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    if let Err(e) = s.read_to_end(&mut raw)
        && matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    {
        panic!("the response was neither completed nor cut within 20 s ({} bytes received)", raw.len());
    }
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head") + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = &raw[head_end..];
    eprintln!(
        "truncated in place mid-download: {} of {} bytes received before the response was cut",
        body.len(),
        reference.len()
    );
    assert!(body.len() < reference.len(), "a truncated base image produced a complete response");
    assert!(body == &reference[..body.len()], "the bytes before the cut differ from the image");

    let r = server.get(&iso_path);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("changed on disk"), "{}", r.text());
    assert_eq!(server.get("/boot-artifacts/kernel?version=4.20").status, 503);

    // Rewritten in place with the original content and size: still not the file that was validated
    // (mtime changed), so still refused until a restart loads it again.
    std::thread::sleep(Duration::from_millis(20));
    let mut f = std::fs::OpenOptions::new().write(true).open(&base).unwrap();
    f.write_all(&original).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(&base).unwrap().len(), original.len() as u64);
    let r = server.get(&iso_path);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("changed on disk"), "{}", r.text());
}

/// The other way a base image changes on disk: the verified copy of a URL image in the data directory,
/// damaged while the server is stopped, first with a flipped byte (same size: only its checksum tells),
/// then truncated. At the next start it is reported and not served, never served as it is.
#[test]
fn a_downloaded_os_image_damaged_while_stopped_is_not_served_after_a_restart() {
    let big = bootstream::formats::sample::large_sample_iso_bytes(1 << 20).unwrap();
    let sha = sha256_hex(&big);
    let http = TinyHttp::start(big.clone());
    let image = format!("4.19:x86_64:http://127.0.0.1:{}/x.iso:{sha}", http.port);
    let args = ["--os-image", image.as_str()];
    let mut server = Server::start_in(tempfile::tempdir().unwrap(), "127.0.0.1:0", &args);
    assert!(server.get("/ready").text().starts_with("4.19 x86_64 ready"));
    server.apply_ok(&format!("{}---\n{}", pull_secret_yaml(NS), infraenv_yaml(NS, "ie", "")));
    let ie = server.wait_image_created(NS, "ie", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
    let iso_path = format!("/byid/{id}/4.19/x86_64/full.iso");
    assert_eq!(server.get(&iso_path).status, 200);

    type Damage<'a> = &'a dyn Fn(&Path);
    let damages: [(&str, Damage, &str); 2] = [
        (
            "a byte flipped in the rootfs",
            &|p: &Path| {
                let mut bytes = std::fs::read(p).unwrap();
                let at = bytes.len() - 4096;
                bytes[at] ^= 0xff;
                std::fs::OpenOptions::new().write(true).open(p).unwrap().write_all(&bytes).unwrap();
            },
            "does not match the expected",
        ),
        (
            "truncated to half",
            &|p: &Path| std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(big.len() as u64 / 2).unwrap(),
            "incomplete",
        ),
    ];
    for (what, damage, reason) in damages {
        let data = server.kill();
        let cached = data.path().join("os-images").join(format!("{sha}.iso"));
        damage(&cached);
        let gets_before = http.gets.load(Ordering::SeqCst);
        server = Server::start_in(data, "127.0.0.1:0", &args);
        let report = server.get("/ready").text();
        let r = server.get(&iso_path);
        let refetched = http.gets.load(Ordering::SeqCst) > gets_before;
        eprintln!("cached image {what}: GET {}, downloaded again: {refetched}, /ready: {}", r.status, report.trim());
        assert!(report.starts_with("4.19 x86_64 failed:"), "{report}");
        assert!(report.contains(reason), "the failure says why ({reason}): {report}");
        assert_ne!(r.status, 200, "a damaged image was served");
    }
}

/// A tmpfs mounted for the length of a test; unmounted on drop, also when the test fails.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).status();
        assert!(st.is_ok_and(|s| s.success()), "mount -t tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Serves `body` at any path until dropped, counting GETs.
struct TinyHttp {
    port: u16,
    stop: Arc<AtomicBool>,
    gets: Arc<AtomicUsize>,
}

impl TinyHttp {
    fn start(body: Vec<u8>) -> TinyHttp {
        Self::start_throttled(body, None)
    }

    /// With `pause`, the body goes out 64 KiB at a time with that pause between pieces.
    fn start_throttled(body: Vec<u8>, pause: Option<Duration>) -> TinyHttp {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let gets = Arc::new(AtomicUsize::new(0));
        let body = Arc::new(body);
        {
            let (stop, gets) = (stop.clone(), gets.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok((mut c, _)) = l.accept() else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let (body, gets) = (body.clone(), gets.clone());
                    std::thread::spawn(move || {
                        let _ = c.set_nonblocking(false);
                        let mut head = Vec::new();
                        let mut b = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n") {
                            match c.read(&mut b) {
                                Ok(1) => head.push(b[0]),
                                _ => return,
                            }
                        }
                        gets.fetch_add(1, Ordering::SeqCst);
                        let _ = write!(
                            c,
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        // The client may stop reading when its disk is full: that ends the write.
                        for piece in body.chunks(if pause.is_some() { 64 * 1024 } else { body.len().max(1) }) {
                            if c.write_all(piece).is_err() {
                                return;
                            }
                            if let Some(p) = pause {
                                std::thread::sleep(p);
                            }
                        }
                    });
                }
            });
        }
        TinyHttp { port, stop, gets }
    }
}

impl Drop for TinyHttp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_disk_that_fills_up_while_an_os_image_downloads_leaves_no_partial_file() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "SKIP a_disk_that_fills_up_while_an_os_image_downloads_leaves_no_partial_file: needs root to mount a tmpfs"
        );
        return;
    }
    let images = tempfile::tempdir().unwrap();
    // 4.19 comes from a URL and does not fit on the 1 MiB os-images filesystem; 4.18 is a local image
    // that must not be served in its place.
    let big = bootstream::formats::sample::large_sample_iso_bytes(3 << 20).unwrap();
    let sha = sha256_hex(&big);
    let local = images.path().join("other.iso");
    let other = bootstream::formats::sample::large_sample_iso_bytes_seeded(1 << 20, 7).unwrap();
    std::fs::write(&local, &other).unwrap();
    let http = TinyHttp::start(big.clone());

    let data = tempfile::tempdir().unwrap();
    let os_images = data.path().join("os-images");
    let mount = Tmpfs::mount(&os_images, "1m");
    let url_image = format!("4.19:x86_64:http://127.0.0.1:{}/x.iso:{sha}", http.port);
    let local_image = format!("4.18:x86_64:{}", local.display());
    let server = Server::start_in(data, "127.0.0.1:0", &["--os-image", &url_image, "--os-image", &local_image]);
    // Declared after the server, so dropped (unmounted) first, even when an assertion fails.
    let _mount = mount;
    assert!(http.gets.load(Ordering::SeqCst) >= 1, "the server never asked for the image");

    let ready = server.get("/ready");
    assert_eq!(ready.status, 200, "the server runs and has settled: {}", ready.text());
    let report = ready.text();
    eprintln!("/ready with a full disk:\n{report}");
    let line = report.lines().find(|l| l.starts_with("4.19 x86_64")).unwrap_or_else(|| panic!("{report}"));
    assert!(line.starts_with("4.19 x86_64 failed:"), "{report}");
    assert!(line.contains("No space left on device"), "the failure names the full disk: {line}");
    assert!(report.lines().any(|l| l.starts_with("4.18 x86_64 ready")), "{report}");
    let metrics = server.get("/metrics").text();
    assert!(metrics.contains("bootstream_os_images{version=\"4.19\",arch=\"x86_64\",state=\"failed\"} 1"), "{metrics}");

    // Nothing named like the image or its temporary file is left on the full filesystem.
    let left: Vec<String> =
        std::fs::read_dir(&os_images).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(left.is_empty(), "left in os-images: {left:?}");

    // An InfraEnv asking for 4.19 gets a clear error, not the 4.18 image.
    server.apply_ok(&pull_secret_yaml(NS));
    server.apply_ok(&infraenv_yaml(NS, "ie", "  osImageVersion: \"4.19\"\n"));
    let ie = server.wait_image_created(NS, "ie", "False");
    let msg = condition(&ie, "ImageCreated").unwrap()["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("The requested OS image for version (4.19) and CPU architecture (x86_64) isn't specified"),
        "{msg}"
    );
    assert!(msg.contains("available: 4.18 (x86_64)"), "{msg}");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let r = server.get(&format!("/byid/{id}/4.19/x86_64/full.iso"));
    assert_eq!(r.status, 404, "{}", r.text());
    // The server still serves what it has.
    assert_eq!(server.get(&format!("/byid/{id}/4.18/x86_64/full.iso")).status, 200);
}

/// A server SIGKILLed while it downloads an OS image leaves the download's `.partial-` file behind
/// (nothing can clean up after SIGKILL); the next start must not keep it forever next to the image it
/// downloads again (each kill would leak up to an image's size of disk).
#[test]
fn an_os_image_download_killed_midway_leaves_no_partial_file_after_the_restart() {
    let big = bootstream::formats::sample::large_sample_iso_bytes(4 << 20).unwrap();
    let sha = sha256_hex(&big);
    // About 5 MiB at 64 KiB every 10 ms: some 0.8 s.
    let http = TinyHttp::start_throttled(big.clone(), Some(Duration::from_millis(10)));
    let image = format!("4.19:x86_64:http://127.0.0.1:{}/x.iso:{sha}", http.port);
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("api-token"), TEST_API_TOKEN).unwrap();
    let os_images = data.path().join("os-images");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--unsigned-image-urls", "--os-image", &image, "--data-dir"])
        .arg(data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let partials = || -> Vec<(String, u64)> {
        std::fs::read_dir(&os_images)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().contains(".partial-"))
                    .map(|e| (e.file_name().into_string().unwrap(), e.metadata().map(|m| m.len()).unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !partials().iter().any(|(_, len)| *len > 0) {
        assert!(Instant::now() < deadline, "the download never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    let left = partials();
    eprintln!("left by the SIGKILL: {left:?}");
    assert_eq!(left.len(), 1, "a SIGKILL mid-download leaves its partial file: {left:?}");

    let server = Server::start_in(data, "127.0.0.1:0", &["--os-image", &image]);
    assert!(server.get("/ready").text().starts_with("4.19 x86_64 ready"), "{}", server.get("/ready").text());
    let names: Vec<String> = std::fs::read_dir(server.data_dir.path().join("os-images"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![format!("{sha}.iso")], "the partial file of the killed run is still there");
    assert_eq!(std::fs::read(server.data_dir.path().join("os-images").join(format!("{sha}.iso"))).unwrap(), big);
}
