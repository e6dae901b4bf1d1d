//! Real boots under qemu for integration tests.
//!
//! What a test can do with this module:
//! - [`boot_fixture_dir`]: the boot fixture (`vmlinuz`, `initrd.img`, `rootfs.img`, `boot.iso`,
//!   `kargs.default`) built by `fixtures/boot/build.sh` into `target/boot-fixture/`, once, shared by all
//!   test processes (the script serializes concurrent builds with a lock file).
//! - [`boot_iso`]: boot an ISO (as a CD, BIOS/isolinux, no network) and parse what the fixture's `/init`
//!   reported on the serial line.
//! - [`boot_ipxe`]: boot Debian's `ipxe.lkrn`, which runs `dhcp && chain SCRIPT_URL`, on qemu's user network
//!   contained as shared docs `boot-testing.md` requires: `restrict=on`, and one guestfwd per local port,
//!   relayed by `fixtures/boot/relay.py` to `127.0.0.1:PORT` only. Inside the guest the host is `10.0.2.2`,
//!   so the script and the URLs in it must use `http://10.0.2.2:PORT/...`.
//! - [`BootReport`]: command line, sha256 of `/config.ign`, sha256 of every file under `/etc/assisted` and
//!   `/etc/coreos-firstboot-network`, initramfs kernel messages, the raw serial log. Call
//!   [`BootReport::assert_ok`] before looking at it: it fails the test on an incomplete report or on
//!   `Initramfs unpacking failed` (e.g. an xz archive with a CRC64 check, which the kernel rejects).
//!
//! Missing prerequisites (qemu, iPXE, kernel, busybox, isolinux, xorriso, ...) make these functions panic
//! with a message pointing at `.ci/test`, which installs them; nothing is skipped silently.
//!
//! Boots use TCG (no KVM here) and take about 8 s (ISO) or 13 s (iPXE); each has a hard timeout
//! ([`DEFAULT_TIMEOUT`]) after which qemu is killed and the test fails with the tail of the serial log.
//!
//! Wiring (the module only needs `std` and the `tempfile` dev-dependency):
//! ```ignore
//! // tests/it/common/mod.rs
//! pub mod qemu;
//!
//! // tests/boot_fixture.rs
//! mod common;
//!
//! #[test]
//! fn boot_fixture_selftest() {
//!     common::qemu::selftest();
//! }
//! ```
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Hard limit for one boot; qemu is killed after it.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// The address of the host inside qemu's user network, as the guest must use it in URLs.
pub const GUEST_HOST_ADDR: &str = "10.0.2.2";

const QEMU: &str = "qemu-system-x86_64";
const IPXE_LKRN: &str = "/usr/lib/ipxe/ipxe.lkrn";
const SETUP_HINT: &str = "install the boot-test prerequisites as `.ci/test` does \
    (apt-get install of the packages it lists, then `fixtures/boot/build.sh`), or run `bash .ci/test`";

const REPORT_PREFIX: &str = "BOOTSTREAM-REPORT ";
const REPORT_BEGIN: &str = "BOOTSTREAM-REPORT-BEGIN";
const REPORT_END: &str = "BOOTSTREAM-REPORT-END";
const UNPACK_FAILED: &str = "Initramfs unpacking failed";

/// Root of the crate (where `fixtures/` and `target/` live).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Directory of the built boot fixture (`target/boot-fixture/`), building it first if it is missing or
/// stale. Runs `fixtures/boot/build.sh --if-needed` at most once per test process; the script holds
/// `target/boot-fixture.lock` (flock) while it checks and builds, so parallel test processes build once.
pub fn boot_fixture_dir() -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(build_fixture).clone().unwrap_or_else(|e| panic!("boot fixture unavailable: {e}"))
}

fn build_fixture() -> Result<PathBuf, String> {
    let root = repo_root();
    let out = root.join("target").join("boot-fixture");
    let script = root.join("fixtures/boot/build.sh");
    if !script.is_file() {
        return Err(format!("{} is missing", script.display()));
    }
    let started = Instant::now();
    let output = Command::new("bash")
        .arg(&script)
        .arg("--if-needed")
        .arg(&out)
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run bash {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "`{} --if-needed {}` failed ({}):\n{}{}\n{SETUP_HINT}",
            script.display(),
            out.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        ));
    }
    for f in ["vmlinuz", "initrd.img", "rootfs.img", "boot.iso", "kargs.default", ".complete"] {
        if !out.join(f).is_file() {
            return Err(format!("{} missing after build.sh; {SETUP_HINT}", out.join(f).display()));
        }
    }
    if started.elapsed() > Duration::from_secs(1) {
        eprintln!("boot fixture ready in {:.1?}", started.elapsed());
    }
    Ok(out)
}

/// The fixture's default kernel arguments (also `kargs.json` "default" of `boot.iso`); they include
/// `console=ttyS0,115200n8` and `panic=-1`. An iPXE script for the fixture kernel must pass them, or the
/// report never reaches the serial line.
pub fn fixture_default_kargs() -> String {
    let p = boot_fixture_dir().join("kargs.default");
    fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())).trim().to_string()
}

/// Extra knobs for a boot.
#[derive(Clone, Debug)]
pub struct BootOptions {
    /// Kill qemu and fail after this long.
    pub timeout: Duration,
    /// Guest RAM in MiB.
    pub memory_mib: u32,
    /// qemu NIC model for iPXE boots (`virtio-net-pci` or `e1000` work with Debian's ipxe.lkrn).
    pub nic_model: String,
    /// Additional qemu arguments, appended last.
    pub extra_args: Vec<String>,
}

impl Default for BootOptions {
    fn default() -> Self {
        BootOptions {
            timeout: DEFAULT_TIMEOUT,
            memory_mib: 1024,
            nic_model: "virtio-net-pci".to_string(),
            extra_args: Vec::new(),
        }
    }
}

/// Boot `iso` as a CD (BIOS, isolinux) without any network, and parse the fixture's report.
pub fn boot_iso(iso: &Path) -> BootReport {
    boot_iso_with(iso, &BootOptions::default())
}

pub fn boot_iso_with(iso: &Path, opts: &BootOptions) -> BootReport {
    assert!(iso.is_file(), "boot_iso: {} is not a file", iso.display());
    let iso = fs::canonicalize(iso).unwrap_or_else(|e| panic!("{}: {e}", iso.display()));
    let drive = format!("file={},media=cdrom,readonly=on", qemu_escape(&iso.to_string_lossy()));
    let args: Vec<String> = vec!["-nic".into(), "none".into(), "-drive".into(), drive, "-boot".into(), "d".into()];
    run_qemu(&format!("ISO {}", iso.display()), &args, opts)
}

/// Boot Debian's iPXE (`ipxe.lkrn`, BIOS) running `dhcp && chain SCRIPT_URL`, with the guest's only way
/// out being `10.0.2.2:port` relayed to `127.0.0.1:port`. `script_url` must be
/// `http://10.0.2.2:PORT/...` (Debian's iPXE has no HTTPS).
pub fn boot_ipxe(port: u16, script_url: &str) -> BootReport {
    boot_ipxe_with(&[port], script_url, &BootOptions::default())
}

/// Like [`boot_ipxe`], with one guestfwd relay per entry of `ports` (when the script points at artifacts
/// served on other local ports).
pub fn boot_ipxe_with(ports: &[u16], script_url: &str, opts: &BootOptions) -> BootReport {
    assert!(!ports.is_empty(), "boot_ipxe: no ports");
    let prefix = format!("http://{GUEST_HOST_ADDR}:");
    let url_port: Option<u16> =
        script_url.strip_prefix(&prefix).and_then(|rest| rest.split(['/', '?']).next()).and_then(|p| p.parse().ok());
    match url_port {
        Some(p) if ports.contains(&p) => {}
        _ => panic!(
            "boot_ipxe: script URL {script_url:?} must be http://{GUEST_HOST_ADDR}:PORT/... with PORT \
             one of {ports:?} (the guest reaches the host only through the relayed ports)"
        ),
    }
    if script_url.contains('"') || script_url.contains(' ') {
        panic!("boot_ipxe: script URL {script_url:?} must not contain quotes or spaces");
    }
    need_file(Path::new(IPXE_LKRN), "Debian package ipxe");
    let relay = repo_root().join("fixtures/boot/relay.py");
    need_file(&relay, "fixtures/boot/relay.py");
    need_program("python3", "--version");

    let mut netdev = String::from("user,id=n0,net=10.0.2.0/24,host=10.0.2.254,restrict=on");
    for p in ports {
        assert!(*p != 0, "boot_ipxe: port 0");
        netdev.push_str(&format!(
            ",guestfwd=tcp:{GUEST_HOST_ADDR}:{p}-cmd:python3 {} 127.0.0.1 {p}",
            qemu_escape(&relay.to_string_lossy())
        ));
    }
    let args: Vec<String> = vec![
        "-netdev".into(),
        netdev,
        "-device".into(),
        // romfile= : no NIC option ROM; iPXE comes from -kernel.
        format!("{},netdev=n0,romfile=", opts.nic_model),
        "-kernel".into(),
        IPXE_LKRN.into(),
        "-append".into(),
        format!("dhcp && chain {script_url}"),
    ];
    run_qemu(&format!("iPXE {script_url}"), &args, opts)
}

/// What the fixture's `/init` reported, parsed from the serial log.
#[derive(Clone, Debug, Default)]
pub struct BootReport {
    /// `/proc/cmdline` as the guest saw it.
    pub cmdline: String,
    /// sha256 (lower-case hex) of `/config.ign`, `None` when it was absent.
    pub config_ign_sha256: Option<String>,
    /// Size of `/config.ign` in bytes.
    pub config_ign_size: Option<u64>,
    /// Absolute guest path -> sha256 of every regular file under `/etc/assisted` and
    /// `/etc/coreos-firstboot-network`.
    pub files: BTreeMap<String, String>,
    /// Which of those two directories existed.
    pub dirs_present: Vec<String>,
    /// Kernel log lines about the initramfs (`Trying to unpack rootfs image as initramfs...`, failures,
    /// `Freeing initrd memory`).
    pub kernel_log: Vec<String>,
    /// `ls -la /` lines.
    pub root_listing: Vec<String>,
    /// Guest kernel release.
    pub kernel_release: String,
    /// True when the report ran to its END marker.
    pub complete: bool,
    /// Whole serial log (bootloader, kernel console, report), lossily decoded.
    pub raw: String,
    /// How long qemu ran.
    pub elapsed: Duration,
}

impl BootReport {
    /// Parse a serial log. Only the last BEGIN..END block counts; `\r` and lines without the report prefix
    /// are ignored.
    pub fn parse(raw: &str) -> BootReport {
        let mut r = BootReport { raw: raw.to_string(), ..Default::default() };
        let lines: Vec<&str> = raw.split('\n').map(|l| l.trim_end_matches('\r')).collect();
        let Some(begin) = lines.iter().rposition(|l| l.ends_with(REPORT_BEGIN)) else {
            return r;
        };
        for line in &lines[begin + 1..] {
            if line.ends_with(REPORT_END) {
                r.complete = true;
                break;
            }
            let Some(item) = line.find(REPORT_PREFIX).map(|i| &line[i + REPORT_PREFIX.len()..]) else {
                continue;
            };
            let Some((key, value)) = item.split_once('=') else {
                continue;
            };
            match key {
                "cmdline" => r.cmdline = value.to_string(),
                "kernel" => r.kernel_release = value.to_string(),
                "ls" => r.root_listing.push(value.to_string()),
                "config_ign_sha256" => r.config_ign_sha256 = Some(value.to_string()),
                "config_ign_size" => r.config_ign_size = value.parse().ok(),
                "dir" => {
                    if let Some(d) = value.strip_prefix("present ") {
                        r.dirs_present.push(d.to_string());
                    }
                }
                "file" => {
                    if let Some((hash, path)) = value.split_once(' ') {
                        r.files.insert(path.to_string(), hash.to_string());
                    }
                }
                "kmsg" => r.kernel_log.push(value.to_string()),
                _ => {}
            }
        }
        r
    }

    /// Fails the test unless the report is complete and the kernel unpacked every initramfs member.
    pub fn assert_ok(&self) -> &Self {
        self.assert_complete();
        self.assert_initramfs_ok();
        self
    }

    /// Fails the test when the serial log contains `Initramfs unpacking failed` (the kernel then boots on
    /// without the rest of the initrd, e.g. without `/config.ign`).
    pub fn assert_initramfs_ok(&self) -> &Self {
        if let Some(line) = self.raw.lines().find(|l| l.contains(UNPACK_FAILED)) {
            panic!(
                "the guest kernel rejected part of the initramfs: {}\ninitramfs kernel log:\n  {}",
                line.trim(),
                self.kernel_log.join("\n  ")
            );
        }
        self
    }

    /// Fails the test when `/init` did not finish its report.
    pub fn assert_complete(&self) -> &Self {
        if !self.complete {
            panic!("no complete boot report on the serial line; log tail:\n{}", self.log_tail(4000));
        }
        self
    }

    /// The kernel command line split on whitespace.
    pub fn kargs(&self) -> Vec<&str> {
        self.cmdline.split_whitespace().collect()
    }

    /// True when `karg` is one of the kernel arguments (exact match, e.g. `ip=dhcp`).
    pub fn has_karg(&self, karg: &str) -> bool {
        self.kargs().contains(&karg)
    }

    /// sha256 of a reported file (absolute guest path).
    pub fn file_sha256(&self, path: &str) -> Option<&str> {
        self.files.get(path).map(String::as_str)
    }

    /// The last `max` bytes of the serial log (on a char boundary).
    pub fn log_tail(&self, max: usize) -> &str {
        let mut start = self.raw.len().saturating_sub(max);
        while !self.raw.is_char_boundary(start) {
            start += 1;
        }
        &self.raw[start..]
    }
}

fn run_qemu(what: &str, specific: &[String], opts: &BootOptions) -> BootReport {
    need_program(QEMU, "--version");
    let dir = tempfile::Builder::new().prefix("bootstream-qemu-").tempdir().expect("create temp dir for the qemu run");
    let serial = dir.path().join("serial.log");
    let stdout = dir.path().join("qemu.out");
    let mut args: Vec<String> = vec![
        "-accel".into(),
        "tcg".into(),
        "-m".into(),
        opts.memory_mib.to_string(),
        "-nographic".into(),
        "-monitor".into(),
        "none".into(),
        "-serial".into(),
        format!("file:{}", serial.display()),
        "-no-reboot".into(),
        "-boot".into(),
        "reboot-timeout=0".into(),
    ];
    args.extend_from_slice(specific);
    args.extend(opts.extra_args.iter().cloned());

    let out = fs::File::create(&stdout).expect("create qemu output file");
    let err = out.try_clone().expect("clone qemu output file");
    let started = Instant::now();
    let mut child = Command::new(QEMU)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {QEMU}: {e}; {SETUP_HINT}"));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => panic!("waiting for {QEMU}: {e}"),
        }
        if started.elapsed() > opts.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed();
    let raw = fs::read(&serial).unwrap_or_default();
    let mut report = BootReport::parse(&String::from_utf8_lossy(&raw));
    report.elapsed = elapsed;
    let qemu_out = fs::read_to_string(&stdout).unwrap_or_default();
    match status {
        None => panic!(
            "{what}: qemu killed after {:?} (timeout); qemu output:\n{qemu_out}\nserial log tail:\n{}",
            opts.timeout,
            report.log_tail(4000)
        ),
        Some(s) if !s.success() => panic!(
            "{what}: qemu exited with {s} after {elapsed:.1?}; qemu output:\n{qemu_out}\nserial log tail:\n{}",
            report.log_tail(4000)
        ),
        Some(_) => {}
    }
    report
}

/// Escape a value for a qemu `-drive`/`-netdev` option list (commas are doubled).
fn qemu_escape(s: &str) -> String {
    s.replace(',', ",,")
}

fn need_program(program: &str, arg: &str) {
    let ok = Command::new(program)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        panic!("`{program}` is not available: {SETUP_HINT}");
    }
}

fn need_file(path: &Path, what: &str) {
    if !path.is_file() {
        panic!("{} ({what}) is missing: {SETUP_HINT}", path.display());
    }
}

// ------------------------------------------------------------------------------------------------------
// Small helpers for building boot inputs in tests (std only; gzip and sha256 come from coreutils/gzip).

/// A `newc` cpio archive (the initramfs format) of regular files, with their parent directories emitted
/// first (mode 0755), uid/gid 0, mtime 0, ending with the trailer. Paths are relative (`config.ign`,
/// `etc/assisted/x`). The result's length is a multiple of 4.
pub fn newc_cpio(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut entries: BTreeMap<String, Option<&[u8]>> = BTreeMap::new();
    for (path, data) in files {
        let path = path.trim_start_matches('/');
        let mut parent = String::new();
        for comp in path.split('/').collect::<Vec<_>>().split_last().map(|(_, dirs)| dirs).unwrap_or(&[]) {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(comp);
            entries.entry(parent.clone()).or_insert(None);
        }
        entries.insert(path.to_string(), Some(*data));
    }
    let mut out = Vec::new();
    let push = |out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8], ino: u32| {
        let header = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            0,
            0,
            if mode & 0o040000 != 0 { 2 } else { 1 },
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(data);
        out.resize(out.len().next_multiple_of(4), 0);
    };
    // BTreeMap order puts "etc" before "etc/x": parents come first.
    for (ino, (name, data)) in (1u32..).zip(&entries) {
        match data {
            Some(d) => push(&mut out, name, 0o100644, d, ino),
            None => push(&mut out, name, 0o040755, &[], ino),
        }
    }
    push(&mut out, "TRAILER!!!", 0, &[], 0);
    out
}

/// gzip (`gzip -n -c`) of `data`.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    pipe_through("gzip", &["-n", "-c"], data)
}

/// Lower-case hex sha256 of `data` (`sha256sum`).
pub fn sha256_hex(data: &[u8]) -> String {
    let out = pipe_through("sha256sum", &[], data);
    String::from_utf8_lossy(&out).split_whitespace().next().unwrap_or_default().to_string()
}

fn pipe_through(program: &str, args: &[&str], data: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = data.to_vec();
    let writer = thread::spawn(move || stdin.write_all(&input));
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).expect("read child output");
    writer.join().unwrap().unwrap_or_else(|e| panic!("write to {program}: {e}"));
    let status = child.wait().expect("wait for child");
    assert!(status.success(), "{program} failed: {status}");
    out
}

/// A minimal HTTP/1.1 file server on `127.0.0.1:0` for boot tests that do not need bootstream itself
/// (GET/HEAD of fixed paths, `Connection: close`). Stops when dropped.
pub struct StaticHttp {
    pub port: u16,
    files: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
    /// Request lines seen, in order (`GET /x HTTP/1.1`).
    pub requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl StaticHttp {
    pub fn serve(files: BTreeMap<String, Vec<u8>>) -> StaticHttp {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let port = listener.local_addr().unwrap().port();
        let files = Arc::new(Mutex::new(files));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (reqs, stop2, files2) = (requests.clone(), stop.clone(), files.clone());
        thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (files, reqs) = (files2.clone(), reqs.clone());
                        thread::spawn(move || {
                            let _ = serve_one(stream, &files, &reqs);
                        });
                    }
                    Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => break,
                }
            }
        });
        StaticHttp { port, files, requests, stop }
    }

    /// Serve `body` at `/path` from now on.
    pub fn insert(&self, path: &str, body: Vec<u8>) {
        self.files.lock().unwrap().insert(path.trim_start_matches('/').to_string(), body);
    }

    /// The URL of `path` as the qemu guest sees it.
    pub fn guest_url(&self, path: &str) -> String {
        format!("http://{GUEST_HOST_ADDR}:{}/{}", self.port, path.trim_start_matches('/'))
    }
}

impl Drop for StaticHttp {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn serve_one(
    stream: TcpStream,
    files: &Mutex<BTreeMap<String, Vec<u8>>>,
    reqs: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let request_line = request_line.trim_end().to_string();
    reqs.lock().unwrap().push(request_line.clone());
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("").trim_start_matches('/');
    let body = files.lock().unwrap().get(path).cloned();
    let mut w = stream;
    match body {
        Some(body) if method == "GET" || method == "HEAD" => {
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\
                 Connection: close\r\n\r\n",
                body.len()
            )?;
            if method == "GET" {
                w.write_all(&body)?;
            }
        }
        _ => write!(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?,
    }
    w.flush()?;
    let _ = w.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Self-test of the fixture and of this module (three real boots, about 40 s on 2 cores under TCG):
/// 1. the pristine `boot.iso`: no `/config.ign`, default kargs, `console=ttyS0` on the command line;
/// 2. a copy with a config embedded by `coreos-installer iso ignition embed` (xz, CRC32 check) and an
///    appended karg: the guest sees the same sha256 as `coreos-installer iso ignition show`;
/// 3. iPXE over the contained user network from a local [`StaticHttp`], initrd = fixture initrd + an
///    appended gzip newc cpio holding `config.ign` and a file under `/etc/assisted`.
pub fn selftest() {
    let fx = boot_fixture_dir();
    let default_kargs = fixture_default_kargs();

    // 1. pristine ISO
    let r = boot_iso(&fx.join("boot.iso"));
    r.assert_ok();
    assert!(r.has_karg("console=ttyS0,115200n8"), "cmdline: {}", r.cmdline);
    assert!(r.cmdline.ends_with(&default_kargs), "cmdline: {}", r.cmdline);
    assert_eq!(r.config_ign_sha256, None);
    assert!(r.files.is_empty(), "{:?}", r.files);
    assert!(
        r.kernel_log.iter().any(|l| l.contains("Trying to unpack rootfs image as initramfs")),
        "{:?}",
        r.kernel_log
    );
    eprintln!("selftest: pristine ISO boot OK in {:.1?}", r.elapsed);

    // 2. coreos-installer embed (requires coreos-installer from .ci/test)
    let tmp = tempfile::tempdir().unwrap();
    let iso = tmp.path().join("embedded.iso");
    fs::copy(fx.join("boot.iso"), &iso).unwrap();
    let config = br#"{"ignition":{"version":"3.2.0"}}"#.to_vec();
    let config_path = tmp.path().join("config.ign");
    fs::write(&config_path, &config).unwrap();
    let ci = |args: &[&str]| {
        let out = Command::new("coreos-installer")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("coreos-installer not runnable ({e}): {SETUP_HINT}"));
        assert!(out.status.success(), "coreos-installer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let iso_s = iso.to_str().unwrap();
    ci(&["iso", "ignition", "embed", "-i", config_path.to_str().unwrap(), iso_s]);
    ci(&["iso", "kargs", "modify", "--append", "bootstream.selftest=1", iso_s]);
    let shown = ci(&["iso", "ignition", "show", iso_s]);
    let r = boot_iso(&iso);
    r.assert_ok();
    assert_eq!(r.config_ign_sha256.as_deref(), Some(sha256_hex(&shown).as_str()));
    assert_eq!(r.config_ign_sha256.as_deref(), Some(sha256_hex(&config).as_str()));
    assert!(r.has_karg("bootstream.selftest=1"), "cmdline: {}", r.cmdline);
    eprintln!("selftest: embedded ISO boot OK in {:.1?}", r.elapsed);

    // 3. iPXE
    let assisted = b"selftest file\n".to_vec();
    let mut initrd = fs::read(fx.join("initrd.img")).unwrap();
    initrd.extend(gzip(&newc_cpio(&[("config.ign", &config), ("etc/assisted/selftest.txt", &assisted)])));
    let http = StaticHttp::serve(BTreeMap::new());
    http.insert("vmlinuz", fs::read(fx.join("vmlinuz")).unwrap());
    http.insert("initrd", initrd);
    let script = format!(
        "#!ipxe\ninitrd --name initrd {}\nkernel {} initrd=initrd {default_kargs} bootstream.pxe=1\nboot\n",
        http.guest_url("initrd"),
        http.guest_url("vmlinuz"),
    );
    http.insert("boot.ipxe", script.into_bytes());
    let r = boot_ipxe(http.port, &http.guest_url("boot.ipxe"));
    r.assert_ok();
    assert!(r.has_karg("bootstream.pxe=1"), "cmdline: {}", r.cmdline);
    assert!(r.has_karg("initrd=initrd"), "cmdline: {}", r.cmdline);
    assert_eq!(r.config_ign_sha256.as_deref(), Some(sha256_hex(&config).as_str()));
    assert_eq!(r.file_sha256("/etc/assisted/selftest.txt"), Some(sha256_hex(&assisted).as_str()), "{:?}", r.files);
    let seen = http.requests.lock().unwrap().clone();
    assert!(seen.iter().any(|l| l.starts_with("GET /vmlinuz")), "{seen:?}");
    eprintln!("selftest: iPXE boot OK in {:.1?}", r.elapsed);
}
