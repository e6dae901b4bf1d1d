//! Shared helpers for integration tests: the real `bootstream` binary on a loopback port, a raw HTTP/1.1
//! client (so tests see exactly the bytes on the wire), fixtures and external tools.
#![allow(dead_code)]

pub mod controller;
pub mod qemu;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_bootstream");

/// The resource API token of every test server (written to its data directory before it starts);
/// `cli` and `Server::get`/`request` on the resource API send it.
pub const TEST_API_TOKEN: &str = "bootstream-test-api-token-3f6c1e0a9b";

/// Whether `path` is on the resource API (bearer token), not on the image or agent routes.
pub fn is_resource_api(path: &str) -> bool {
    path.starts_with("/apis")
        || path.starts_with("/api/v1")
        || path == "/api"
        || path == "/version"
        || path.starts_with("/openapi/")
        || path.starts_with("/api/assisted-install/v2/clusters/")
}

/// Whether a request needs the API token, and so goes to the server's HTTPS API listener when it
/// has one (serve without --tls-cert): the resource API, and host-log downloads and event reads
/// without a signed `api_key`.
pub fn takes_api_token(method: &str, path: &str) -> bool {
    if path.starts_with("/api/assisted-install/v2/events") {
        (method == "GET" || method == "HEAD") && !path.contains("api_key=")
    } else if path.starts_with("/api/assisted-install/v2/clusters/") {
        let route = path.split('?').next().unwrap_or(path);
        (method == "GET" || method == "HEAD") && route.ends_with("/logs") && !path.contains("api_key=")
    } else {
        is_resource_api(path)
    }
}

/// Repository root (tests run with the package root as working directory).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The compatibility corpus (upstream fixture ISOs, nmstate inputs, initrds, the assisted CRDs and
/// example CRs), read-only and never copied here: `$BOOTSTREAM_COMPAT_DIR`, by default `../shared`
/// beside the repository (where CI puts it). A test that needs it and does not find it fails with
/// this message, naming the setting.
pub fn compat_dir() -> PathBuf {
    let dir = std::env::var_os("BOOTSTREAM_COMPAT_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared"));
    assert!(
        dir.join("fixtures").is_dir(),
        "the compatibility corpus is not at {} (no fixtures/ there): set BOOTSTREAM_COMPAT_DIR to the folder that \
         holds its fixtures/ and docs/ (CI provides it as ../shared beside the repository)",
        dir.display()
    );
    dir
}

/// `rel` in the compatibility corpus (see [`compat_dir`]).
pub fn shared(rel: &str) -> PathBuf {
    compat_dir().join(rel)
}

/// A running `bootstream serve`.
pub struct Server {
    child: Child,
    pub url: String,
    pub addr: String,
    /// The HTTPS listener of the Kubernetes API (serve without --tls-cert), `host:port`.
    pub api_addr: Option<String>,
    /// DATA_DIR/kubeconfig: what the CLI and kubectl use to reach the API.
    pub kubeconfig: String,
    pub data_dir: tempfile::TempDir,
    /// Where the server's standard error goes, when the test reads it ([`Server::start_logged`]);
    /// otherwise it is the test's.
    log: Option<tempfile::NamedTempFile>,
    /// The CA (PEM) that verifies the main listener, for a server with `--tls-cert` ([`Server::start_tls`]).
    tls_ca: Option<Vec<u8>>,
}

impl Server {
    /// Starts `bootstream serve` on a free loopback port with a fresh data directory.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_in(tempfile::tempdir().unwrap(), "127.0.0.1:0", extra)
    }

    /// Starts `bootstream serve` as a user would, with signed image URLs (the default). Tests of
    /// anything but URL signing use [`Server::start`], which turns signing off so that they can name
    /// `/byid/` paths.
    pub fn start_signed(extra: &[&str]) -> Server {
        Self::spawn(tempfile::tempdir().unwrap(), "127.0.0.1:0", extra)
    }

    /// [`Server::start_signed`] on an existing data directory (a restart).
    pub fn spawn_signed_in(data_dir: tempfile::TempDir, extra: &[&str]) -> Server {
        Self::spawn(data_dir, "127.0.0.1:0", extra)
    }

    pub fn start_in(data_dir: tempfile::TempDir, listen: &str, extra: &[&str]) -> Server {
        Self::spawn(data_dir, listen, &[&["--unsigned-image-urls"], extra].concat())
    }

    /// [`Server::start`] with the server's standard error (its log) written to a file that
    /// [`Server::log`] reads.
    pub fn start_logged(extra: &[&str]) -> Server {
        let log = tempfile::NamedTempFile::new().unwrap();
        Self::spawn_with_log(
            tempfile::tempdir().unwrap(),
            "127.0.0.1:0",
            &[&["--unsigned-image-urls"], extra].concat(),
            Some(log),
        )
    }

    /// [`Server::start_signed`] on an existing data directory, its log read by [`Server::log`].
    pub fn start_logged_in(data_dir: tempfile::TempDir, extra: &[&str]) -> Server {
        let log = tempfile::NamedTempFile::new().unwrap();
        Self::spawn_with_log(data_dir, "127.0.0.1:0", extra, Some(log))
    }

    /// Everything the server has logged so far (only for servers started with a log).
    pub fn log(&self) -> String {
        let log = self.log.as_ref().expect("a server started with Server::start_logged");
        String::from_utf8_lossy(&std::fs::read(log.path()).unwrap()).into_owned()
    }

    /// `bootstream serve` over HTTPS, signed URLs on: `--tls-cert` (a chain ending in the CA, so that the
    /// kubeconfig serve writes trusts that CA), `--tls-key` and `--service-ca-cert` from `certs`.
    pub fn start_tls(certs: &Certs, extra: &[&str]) -> Server {
        let data_dir = tempfile::tempdir().unwrap();
        let chain = data_dir.path().join("tls-chain.pem");
        let mut pem = std::fs::read(&certs.cert).unwrap();
        pem.extend(std::fs::read(&certs.ca).unwrap());
        std::fs::write(&chain, pem).unwrap();
        let (chain, key, ca) = (chain.to_str().unwrap(), certs.key.to_str().unwrap(), certs.ca.to_str().unwrap());
        let args = [&["--tls-cert", chain, "--tls-key", key, "--service-ca-cert", ca][..], extra].concat();
        let mut server = Self::spawn_full(data_dir, "127.0.0.1:0", &args, None, &[]);
        server.tls_ca = Some(std::fs::read(&certs.ca).unwrap());
        server.wait_ready();
        server
    }

    /// [`Server::start`] with `env` set in the server's environment (settings a deployment gives
    /// as environment variables).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::spawn_full(
            tempfile::tempdir().unwrap(),
            "127.0.0.1:0",
            &[&["--unsigned-image-urls"], extra].concat(),
            None,
            env,
        )
    }

    fn spawn(data_dir: tempfile::TempDir, listen: &str, extra: &[&str]) -> Server {
        Self::spawn_with_log(data_dir, listen, extra, None)
    }

    fn spawn_with_log(
        data_dir: tempfile::TempDir,
        listen: &str,
        extra: &[&str],
        log: Option<tempfile::NamedTempFile>,
    ) -> Server {
        Self::spawn_full(data_dir, listen, extra, log, &[])
    }

    fn spawn_full(
        data_dir: tempfile::TempDir,
        listen: &str,
        extra: &[&str],
        log: Option<tempfile::NamedTempFile>,
        env: &[(&str, &str)],
    ) -> Server {
        let token = data_dir.path().join("api-token");
        if !token.exists() {
            std::fs::write(&token, TEST_API_TOKEN).unwrap();
        }
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir.path())
            .arg("--listen")
            .arg(listen)
            .args(extra)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(match &log {
                Some(file) => Stdio::from(file.reopen().unwrap()),
                None => Stdio::inherit(),
            })
            .spawn()
            .expect("spawning bootstream serve");
        let stdout = child.stdout.take().unwrap();
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reading the listening line");
        let addr = line
            .split("http://")
            .nth(1)
            .or_else(|| line.split("https://").nth(1))
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line from serve: {line:?}"))
            .to_string();
        // Without --tls-cert, the API has an HTTPS listener of its own, announced on a later line.
        let mut api_addr = None;
        if !extra.contains(&"--tls-cert") {
            loop {
                let mut line = String::new();
                let n = stdout.read_line(&mut line).expect("reading the API's listening line");
                assert!(n > 0, "serve never said where the Kubernetes API listens");
                if line.contains("for the Kubernetes API") {
                    api_addr =
                        line.split("https://").nth(1).and_then(|s| s.split_whitespace().next()).map(str::to_string);
                    break;
                }
            }
        }
        let kubeconfig = data_dir.path().join("kubeconfig").to_string_lossy().into_owned();
        let tls = extra.contains(&"--tls-cert");
        let url = format!("{}://{addr}", if tls { "https" } else { "http" });
        let server = Server { child, url, addr, api_addr, kubeconfig, data_dir, log, tls_ca: None };
        // An HTTPS server is waited for once its CA is known (Server::start_tls).
        if !tls {
            server.wait_ready();
        }
        server
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with SIGKILL (no chance to clean up) and hands back its data directory.
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap())
    }

    /// Waits until `/ready` answers 200 (all OS images settled).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = match &self.tls_ca {
                Some(ca) => tls_request(&self.addr, ca, "GET", "/ready", &[], b""),
                None => try_request(&self.addr, "GET", "/ready", &[], b""),
            };
            if let Ok(r) = ready
                && r.status == 200
            {
                return;
            }
            assert!(Instant::now() < deadline, "server at {} never became ready", self.addr);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `bootstream apply -f -` with `yaml` on standard input.
    pub fn apply(&self, yaml: &str) -> std::process::Output {
        cli(&["apply", "--kubeconfig", &self.kubeconfig, "-f", "-"], Some(yaml))
    }

    /// `apply` that must succeed.
    pub fn apply_ok(&self, yaml: &str) -> String {
        let out = self.apply(yaml);
        assert!(out.status.success(), "apply failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// `bootstream get KIND NAME -n NS -o json`.
    pub fn get_json(&self, kind: &str, ns: &str, name: &str) -> Value {
        let out = cli(&["get", "--kubeconfig", &self.kubeconfig, kind, name, "-n", ns, "-o", "json"], None);
        assert!(out.status.success(), "get failed: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Waits until the InfraEnv's ImageCreated condition has `status`, and returns the InfraEnv.
    pub fn wait_image_created(&self, ns: &str, name: &str, status: &str) -> Value {
        self.wait_infraenv(ns, name, &format!("ImageCreated={status}"), |ie| {
            condition(ie, "ImageCreated").map(|c| c["status"] == status).unwrap_or(false)
        })
    }

    /// Waits until the InfraEnv satisfies `done` (status changes arrive through the controller).
    pub fn wait_infraenv(&self, ns: &str, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ie = self.get_json("infraenv", ns, name);
            if done(&ie) {
                return ie;
            }
            assert!(Instant::now() < deadline, "InfraEnv {ns}/{name} never got {what}: {ie:#}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn get(&self, path: &str) -> Response {
        self.request("GET", path, &[])
    }

    /// A request; on the resource API with the test token, through the API's HTTPS listener when
    /// the server has one.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        let bearer = format!("Bearer {TEST_API_TOKEN}");
        let mut headers = headers.to_vec();
        if takes_api_token(method, path) {
            headers.push(("Authorization", &bearer));
            if self.api_addr.is_some() {
                return self.api_request(method, path, &headers, b"");
            }
        }
        if let Some(ca) = &self.tls_ca {
            return tls_request(&self.addr, ca, method, path, &headers, b"")
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        }
        request(&self.addr, method, path, &headers, b"")
    }

    /// A request to the API's HTTPS listener (trusting its certificate), headers as given.
    pub fn api_request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        let addr = self.api_addr.as_deref().expect("a server with an HTTPS API listener");
        let ca = std::fs::read(self.data_dir.path().join("api-tls/tls.crt")).unwrap();
        tls_request(addr, &ca, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// A raw connection to the API's HTTPS listener.
    pub fn api_stream(&self) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
        let addr = self.api_addr.as_deref().expect("a server with an HTTPS API listener");
        let ca = std::fs::read(self.data_dir.path().join("api-tls/tls.crt")).unwrap();
        tls_connect(addr, &ca).unwrap()
    }

    /// The API's base URL: its HTTPS listener, or the main one (with --tls-cert).
    pub fn api_url(&self) -> String {
        match &self.api_addr {
            Some(addr) => format!("https://{addr}"),
            None => self.url.clone(),
        }
    }

    /// Path and query of an absolute URL the server handed out (status URLs are built on the base URL).
    pub fn path_of(&self, url: &str) -> String {
        let rest = url.split("://").nth(1).expect("absolute URL");
        format!("/{}", rest.split_once('/').map(|x| x.1).unwrap_or(""))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// Runs the bootstream CLI.
pub fn cli(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env("BOOTSTREAM_TOKEN", TEST_API_TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

/// A response as read off the wire.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    try_request(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// One request on a fresh connection (`Connection: close`), body read to EOF and checked against
/// Content-Length so a truncated response fails the test.
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    exchange(&mut s, addr, method, path, headers, body)
}

/// A TLS connection to `addr`, trusting the certificates of `ca_pem` only.
pub fn tls_connect(
    addr: &str,
    ca_pem: &[u8],
) -> std::io::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in pem::parse_many(ca_pem).map_err(std::io::Error::other)? {
        roots.add(rustls::pki_types::CertificateDer::from(cert.into_contents())).map_err(std::io::Error::other)?;
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let host = addr.rsplit_once(':').map(|(h, _)| h.trim_matches(|c| c == '[' || c == ']')).unwrap_or(addr);
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(std::io::Error::other)?;
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(std::io::Error::other)?;
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(120)))?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

/// [`try_request`] over TLS, trusting the certificates of `ca_pem` only.
pub fn tls_request(
    addr: &str,
    ca_pem: &[u8],
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = tls_connect(addr, ca_pem)?;
    exchange(&mut s, addr, method, path, headers, body)
}

/// Writes one request and reads its response to EOF.
fn exchange<S: Read + Write>(
    s: &mut S,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        // A TLS peer that closed without close_notify: what was read is checked below.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e),
    }
    let mut hdrs = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut hdrs);
    let n = match resp.parse(&raw) {
        Ok(httparse::Status::Complete(n)) => n,
        other => return Err(std::io::Error::other(format!("bad response head: {other:?}"))),
    };
    let headers: BTreeMap<String, String> = resp
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
        .collect();
    let status = resp.code.unwrap();
    let body = raw[n..].to_vec();
    if method != "HEAD"
        && let Some(len) = headers.get("content-length")
    {
        let len: usize = len.parse().unwrap();
        if body.len() != len {
            return Err(std::io::Error::other(format!("body is {} bytes, Content-Length says {len}", body.len())));
        }
    }
    Ok(Response { status, headers, body })
}

/// A CA and a server certificate for 127.0.0.1 and localhost that it signed, made by openssl.
pub struct Certs {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new(tool("openssl")).args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn make_certs(dir: &Path, name: &str) -> Certs {
    let p = |s: &str| format!("{name}-{s}");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", &p("ca.key"), "-out", &p("ca.pem"), "-days", "2", "-subj", "/CN=bootstream test CA"],
        ]
        .concat(),
        dir,
    );
    openssl(
        &[&["req"][..], &ec, &["-keyout", &p("key.pem"), "-out", &p("srv.csr"), "-subj", "/CN=localhost"]].concat(),
        dir,
    );
    std::fs::write(
        dir.join(p("ext.cnf")),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &p("srv.csr"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-out",
            &p("cert.pem"),
            "-days",
            "1",
            "-extfile",
            &p("ext.cnf"),
        ],
        dir,
    );
    Certs { ca: dir.join(p("ca.pem")), cert: dir.join(p("cert.pem")), key: dir.join(p("key.pem")) }
}

/// Decompresses the corpus's `fixtures/coreos-installer/iso/NAME.iso.xz` into `dir` and returns the path.
pub fn fixture_iso(name: &str, dir: &Path) -> PathBuf {
    let src = shared(&format!("fixtures/coreos-installer/iso/{name}.iso.xz"));
    let out = dir.join(format!("{name}.iso"));
    let data = Command::new("xz").arg("-dc").arg(&src).output().expect("running xz (install xz-utils)");
    assert!(data.status.success(), "xz -dc {}", src.display());
    std::fs::write(&out, data.stdout).unwrap();
    out
}

/// Every ISO fixture except `synthetic`.
pub fn fixture_iso_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(shared("fixtures/coreos-installer/iso"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".iso.xz").map(str::to_string)
        })
        .filter(|n| n != "synthetic")
        .collect();
    names.sort();
    names
}

/// Path of an external tool, or a panic naming the setup script (tests never skip silently).
pub fn tool(name: &str) -> PathBuf {
    let home_bin = std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo/bin").join(name)).ok();
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(home_bin)
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("{name} is not installed; `bash .ci/test` installs the test prerequisites"))
}

/// Runs the external tool `name` (see [`tool`]).
pub fn run(name: &str, args: &[&str]) -> std::process::Output {
    Command::new(tool(name))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"))
}

/// Runs a tool that must succeed and returns its stdout.
pub fn run_ok(name: &str, args: &[&str]) -> Vec<u8> {
    let out = run(name, args);
    assert!(out.status.success(), "{name} {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Runs coreos-installer and returns stdout (panics with stderr on failure).
pub fn coreos_installer(args: &[&str]) -> Vec<u8> {
    let out = Command::new(tool("coreos-installer")).args(args).output().unwrap();
    assert!(out.status.success(), "coreos-installer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

/// The pull secret Secret YAML of the assisted examples.
pub fn pull_secret_yaml(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\nmetadata:\n  name: pull-secret\n  namespace: {ns}\nstringData:\n  .dockerconfigjson: '{{\"auths\":{{\"cloud.openshift.com\":{{\"auth\":\"dXNlcjpwYXNzd29yZAo=\",\"email\":\"r@rr.com\"}}}}}}'\n"
    )
}

/// A minimal late-binding InfraEnv.
pub fn infraenv_yaml(ns: &str, name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  pullSecretRef:\n    name: pull-secret\n  sshAuthorizedKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfake test@bootstream\n{extra_spec}"
    )
}

/// An InfraEnv as its agents know it: its id and the token its discovery image carries.
pub struct Tenant {
    pub ns: String,
    pub id: String,
    pub token: String,
}

/// A new InfraEnv `ns/name` with its pull secret, as its agents know it.
pub fn tenant(s: &Server, ns: &str, name: &str) -> Tenant {
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(ns), infraenv_yaml(ns, name, "")));
    infraenv_as_agents_know_it(s, ns, name)
}

/// The existing InfraEnv `ns/name` as its agents know it (once its image exists): the token is the
/// one in its discovery Ignition.
pub fn infraenv_as_agents_know_it(s: &Server, ns: &str, name: &str) -> Tenant {
    let ie = s.wait_image_created(ns, name, "True");
    let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
    let ign = s.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(ign.status, 200);
    let token =
        bootstream::cli::simulate::agent_token(&serde_json::from_slice(&ign.body).unwrap()).expect("agent token");
    Tenant { ns: ns.to_string(), id, token }
}

impl Tenant {
    /// An agent-API call with this tenant's token, on `infra_env`'s path (its own unless told).
    pub fn call(&self, s: &Server, method: &str, infra_env: &str, rest: &str, body: Option<Value>) -> Response {
        let path = format!("/api/assisted-install/v2/infra-envs/{infra_env}/hosts{rest}");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        request(
            &s.addr,
            method,
            &path,
            &[("X-Secret-Key", &self.token), ("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    /// The agent of `host` registers with this tenant's InfraEnv.
    pub fn register(&self, s: &Server, host: &str) -> Response {
        let body = serde_json::json!({"host_id": host, "discovery_agent_version": "v1"});
        self.call(s, "POST", &self.id, "", Some(body))
    }

    /// The agent of `host` sends the inventory of simulated host `index`.
    pub fn send_inventory(&self, s: &Server, host: &str, index: usize) -> Response {
        let reply = serde_json::json!({"step_type": "inventory", "step_id": "inventory-1", "exit_code": 0,
                           "output": bootstream::hosts::simulated::inventory(index).to_string()});
        self.call(s, "POST", &self.id, &format!("/{host}/instructions"), Some(reply))
    }
}

/// Waits up to a minute for `done`, failing with `what` otherwise.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One HTTP/1.1 connection kept alive across requests, for tests that send exact bytes (odd methods,
/// chunked bodies, pipelining) and read the answers one at a time.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn { stream, buf: Vec::new() }
    }

    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    pub fn send(&mut self, raw: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(raw)
    }

    /// `send`, then `read_response`.
    pub fn exchange(&mut self, raw: &[u8]) -> std::io::Result<Response> {
        self.send(raw)?;
        self.read_response()
    }

    fn fill(&mut self) -> std::io::Result<()> {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// Reads one response (not to a HEAD): its body by Content-Length, chunked framing, or to EOF.
    pub fn read_response(&mut self) -> std::io::Result<Response> {
        let (status, headers, head_len) = loop {
            let mut hdrs = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut hdrs);
            match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let headers: BTreeMap<String, String> = resp
                        .headers
                        .iter()
                        .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
                        .collect();
                    break (resp.code.unwrap(), headers, n);
                }
                Ok(httparse::Status::Partial) => self.fill()?,
                Err(e) => return Err(std::io::Error::other(format!("bad response head: {e}"))),
            }
        };
        self.buf.drain(..head_len);
        let body = if let Some(len) = headers.get("content-length") {
            let len: usize = len.parse().map_err(std::io::Error::other)?;
            while self.buf.len() < len {
                self.fill()?;
            }
            self.buf.drain(..len).collect()
        } else if headers.get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        break i;
                    }
                    self.fill()?;
                };
                let size_text = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
                    .map_err(std::io::Error::other)?;
                self.buf.drain(..line_end + 2);
                while self.buf.len() < size + 2 {
                    self.fill()?;
                }
                body.extend(self.buf.drain(..size));
                self.buf.drain(..2);
                if size == 0 {
                    break body;
                }
            }
        } else {
            loop {
                match self.fill() {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break std::mem::take(&mut self.buf),
                    Err(e) => return Err(e),
                }
            }
        };
        Ok(Response { status, headers, body })
    }
}

/// `(RssAnon in KiB, open descriptors)` of process `pid`.
pub fn rss_anon_and_fds(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("RssAnon in /proc/PID/status");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    (rss, fds)
}

/// The ClusterImageSet the clusters of [`cluster_yaml`] install.
pub const IMAGE_SET: &str = "apiVersion: hive.openshift.io/v1\nkind: ClusterImageSet\nmetadata:\n  name: openshift-v4.20.0\nspec:\n  releaseImage: quay.io/openshift-release-dev/ocp-release:4.20.0-x86_64\n";

/// A late-binding cluster: its ClusterDeployment and AgentClusterInstall in `ns`, asking for
/// `masters` control-plane agents.
pub fn cluster_yaml(ns: &str, name: &str, masters: usize) -> String {
    format!(
        "apiVersion: hive.openshift.io/v1\nkind: ClusterDeployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  baseDomain: example.com\n  clusterName: {name}\n  clusterInstallRef:\n    group: extensions.hive.openshift.io\n    kind: AgentClusterInstall\n    name: {name}\n    version: v1beta1\n  platform:\n    agentBareMetal:\n      agentSelector: {{}}\n  pullSecretRef:\n    name: pull-secret\n---\napiVersion: extensions.hive.openshift.io/v1beta1\nkind: AgentClusterInstall\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  clusterDeploymentRef:\n    name: {name}\n  imageSetRef:\n    name: openshift-v4.20.0\n  networking:\n    clusterNetwork:\n    - cidr: 10.128.0.0/14\n      hostPrefix: 23\n    serviceNetwork:\n    - 172.30.0.0/16\n  provisionRequirements:\n    controlPlaneAgents: {masters}\n"
    )
}

/// A child process (`bootstream simulate`, say) killed however the test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
