//! HTTPS: `serve --tls-cert --tls-key` serves everything over TLS (image bytes read and encrypted
//! rather than sent with sendfile), byte for byte what plain HTTP serves; `--http-listen` adds a
//! plain-HTTP port for iPXE that serves nothing else; the certificate is reloaded when renewed.
//! Certificates are made by openssl, clients are reqwest (rustls) and curl-free raw sockets.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// `bootstream serve` with HTTPS and, optionally, the plain-HTTP iPXE port.
struct TlsServer {
    child: Child,
    https: String,
    plain: Option<String>,
    data_dir: tempfile::TempDir,
}

impl TlsServer {
    fn start(data_dir: tempfile::TempDir, certs: &Certs, plain_http: bool, extra: &[&str]) -> TlsServer {
        std::fs::write(data_dir.path().join("api-token"), TEST_API_TOKEN).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data_dir.path())
            .args(["--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&certs.cert)
            .arg("--tls-key")
            .arg(&certs.key)
            .arg("--service-ca-cert")
            .arg(&certs.ca)
            .args(extra);
        if plain_http {
            cmd.args(["--http-listen", "127.0.0.1:0"]);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let https = line.split_whitespace().nth(3).unwrap_or_else(|| panic!("first line: {line:?}")).to_string();
        assert!(https.starts_with("https://"), "{line}");
        let plain = plain_http.then(|| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            let url = line.split_whitespace().nth(3).unwrap_or_else(|| panic!("second line: {line:?}")).to_string();
            assert!(url.starts_with("http://") && line.contains("for iPXE"), "{line}");
            url.trim_start_matches("http://").to_string()
        });
        let server = TlsServer { child, https, plain, data_dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while https_get(&server.https, "/ready", &certs.ca).0 != 200 {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.data_dir, tempfile::tempdir().unwrap())
    }

    fn cli(&self, ca: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        let ca = ca.to_str().unwrap();
        cli(&[&["--certificate-authority", ca][..], args, &["--server", &self.https]].concat(), stdin)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET over HTTPS trusting only `ca`: (status, body). Connection errors panic.
fn https_get(base: &str, path: &str, ca: &Path) -> (u16, Vec<u8>) {
    try_https_get(base, path, ca).unwrap_or_else(|e| panic!("GET {base}{path}: {e}"))
}

fn try_https_get(base: &str, path: &str, ca: &Path) -> Result<(u16, Vec<u8>), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder().tls_certs_only([ca]).build().map_err(|e| e.to_string())?;
        let mut req = client.get(format!("{base}{path}"));
        if is_resource_api(path) {
            req = req.bearer_auth(TEST_API_TOKEN);
        }
        let resp = req.send().await.map_err(|e| format!("{e:?}"))?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, body.to_vec()))
    })
}

fn url_path(url: &str) -> String {
    let rest = url.split("://").nth(1).expect("absolute URL");
    format!("/{}", rest.split_once('/').map(|x| x.1).unwrap_or(""))
}

fn infraenv(server: &TlsServer, ca: &Path) -> Value {
    let yaml = format!("{}---\n{}", pull_secret_yaml("tls"), infraenv_yaml("tls", "ie", ""));
    let out = server.cli(ca, &["apply", "-f", "-"], Some(&yaml));
    assert!(out.status.success(), "apply over HTTPS: {}", String::from_utf8_lossy(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = server.cli(ca, &["get", "infraenv", "ie", "-n", "tls", "-o", "json"], None);
        assert!(out.status.success(), "get over HTTPS: {}", String::from_utf8_lossy(&out.stderr));
        let ie: Value = serde_json::from_slice(&out.stdout).unwrap();
        if ie["status"]["isoDownloadURL"].as_str().is_some_and(|u| !u.is_empty()) {
            return ie;
        }
        assert!(Instant::now() < deadline, "no image URL: {ie:#}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn https_serves_the_bytes_plain_http_serves_and_the_agent_trusts_the_service_ca() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "a");
    // A 24 MiB base image, so that the ISO crosses many of the TLS path's file reads; one base URL
    // for both servers, so that both build the same discovery content.
    let iso = dir.path().join("base.iso");
    std::fs::write(&iso, bootstream::formats::sample::large_sample_iso_bytes(24 << 20).unwrap()).unwrap();
    let os_image = format!("4.20:x86_64:{}", iso.display());
    let base = ["--base-url", "https://bootstream.example:8443", "--os-image", &os_image];
    let server = TlsServer::start(tempfile::tempdir().unwrap(), &certs, false, &base);

    // The CLI refuses a server it cannot verify, and says why.
    let out = cli(&["get", "infraenv", "-A", "--server", &server.https], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate"), "{err}");

    let ie = infraenv(&server, &certs.ca);
    let iso_url = ie["status"]["isoDownloadURL"].as_str().unwrap();
    assert!(iso_url.starts_with("https://bootstream.example:8443/byapikey/"), "{iso_url}");
    let iso_path = url_path(iso_url);
    let initrd_path = url_path(ie["status"]["bootArtifacts"]["initrd"].as_str().unwrap());
    let ign_path = url_path(ie["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().unwrap());

    let (status, iso_tls) = https_get(&server.https, &iso_path, &certs.ca);
    assert_eq!(status, 200);
    assert!(iso_tls.len() > 24 << 20, "{} bytes", iso_tls.len());
    let (status, initrd_tls) = https_get(&server.https, &initrd_path, &certs.ca);
    assert_eq!(status, 200);
    let (status, ign) = https_get(&server.https, &ign_path, &certs.ca);
    assert_eq!(status, 200);

    // The agent is told to trust the CA that signed this server's certificate.
    let ign: Value = serde_json::from_slice(&ign).unwrap();
    let ca_file = ign["storage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/assisted-service/service-ca-cert.crt")
        .unwrap_or_else(|| panic!("no service CA file in {ign:#}"));
    let ca_pem = std::fs::read_to_string(&certs.ca).unwrap();
    let source = ca_file["contents"]["source"].as_str().unwrap();
    let encoded = source.split_once(',').unwrap().1;
    let decoded = if source.contains(";base64") {
        use base64::Engine;
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap()
    } else {
        percent_encoding::percent_decode_str(encoded).decode_utf8().unwrap().into_owned()
    };
    assert_eq!(decoded, ca_pem);
    let units = ign["systemd"]["units"].to_string();
    assert!(units.contains("--cacert /etc/assisted-service/service-ca-cert.crt"), "{units}");

    // A range over TLS is the same slice.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap();
    let ranged = rt.block_on(async {
        let client = reqwest::Client::builder().tls_certs_only([ca]).build().unwrap();
        let resp = client
            .get(format!("{}{iso_path}", server.https))
            .header("Range", "bytes=32000-20000000")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 206);
        resp.bytes().await.unwrap()
    });
    assert_eq!(&ranged[..], &iso_tls[32000..=20000000]);

    // The same data directory served over plain HTTP: same key, same InfraEnv, same content.
    let data_dir = server.kill();
    let ca = certs.ca.to_str().unwrap();
    let plain = Server::spawn_signed_in(data_dir, &[&base[..], &["--service-ca-cert", ca]].concat());
    let iso_plain = plain.get(&iso_path);
    assert_eq!(iso_plain.status, 200);
    assert_eq!(sha256_hex(&iso_tls), sha256_hex(&iso_plain.body), "the ISO differs between HTTPS and HTTP");
    let initrd_plain = plain.get(&initrd_path);
    assert_eq!(sha256_hex(&initrd_tls), sha256_hex(&initrd_plain.body), "the initrd differs between HTTPS and HTTP");
}

#[test]
fn the_plain_http_port_serves_only_what_ipxe_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "a");
    let server = TlsServer::start(tempfile::tempdir().unwrap(), &certs, true, &[]);
    let plain = server.plain.clone().unwrap();
    let ie = infraenv(&server, &certs.ca);
    let st = &ie["status"];
    let ba = &st["bootArtifacts"];

    // iPXE's URLs are on the plain port; the ISO and Ignition stay on HTTPS.
    for key in ["kernel", "rootfs", "initrd", "ipxeScript"] {
        let url = ba[key].as_str().unwrap();
        assert!(url.starts_with(&format!("http://{plain}/")), "{key}: {url}");
    }
    for url in [&st["isoDownloadURL"], &ba["discoveryIgnitionURL"]] {
        let url = url.as_str().unwrap();
        assert!(url.starts_with(&server.https), "{url}");
    }

    // iPXE's chain: the script over plain HTTP names the kernel and initrd on the plain port, and both answer.
    let script = request(&plain, "GET", &url_path(ba["ipxeScript"].as_str().unwrap()), &[], b"");
    assert_eq!(script.status, 200, "{}", script.text());
    let script = script.text();
    assert!(script.starts_with("#!ipxe"), "{script}");
    assert!(script.contains(&format!("initrd --name initrd http://{plain}/images/")), "{script}");
    assert!(script.contains(&format!("kernel http://{plain}/boot-artifacts/kernel?")), "{script}");
    assert!(script.contains(&format!("coreos.live.rootfs_url=http://{plain}/boot-artifacts/rootfs?")), "{script}");
    let initrd_path = url_path(ba["initrd"].as_str().unwrap());
    let initrd = request(&plain, "GET", &initrd_path, &[], b"");
    assert_eq!(initrd.status, 200);
    let (status, initrd_tls) = https_get(&server.https, &initrd_path, &certs.ca);
    assert_eq!(status, 200);
    assert_eq!(sha256_hex(&initrd.body), sha256_hex(&initrd_tls));
    for key in ["kernel", "rootfs"] {
        let r = request(&plain, "HEAD", &url_path(ba[key].as_str().unwrap()), &[], b"");
        assert_eq!(r.status, 200, "{key}");
    }

    // Nothing else: the ISO (pull secret), the Ignition, the resource API, the agent API.
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let refused = [
        url_path(st["isoDownloadURL"].as_str().unwrap()),
        url_path(ba["discoveryIgnitionURL"].as_str().unwrap()),
        "/apis/agent-install.openshift.io/v1beta1/infraenvs".to_string(),
        format!("/api/assisted-install/v2/infra-envs/{id}/hosts"),
        "/metrics".to_string(),
    ];
    for path in &refused {
        let r = request(&plain, "GET", path, &[("Authorization", &format!("Bearer {TEST_API_TOKEN}"))], b"");
        assert_eq!(r.status, 404, "{path} over plain HTTP: {}", r.text());
        assert!(r.text().contains("use HTTPS"), "{}", r.text());
    }
    // A POST too (an agent registering).
    let r = request(&plain, "POST", &format!("/api/assisted-install/v2/infra-envs/{id}/hosts"), &[], b"{}");
    assert_eq!(r.status, 404);
    // The HTTPS port serves them.
    let (status, _) = https_get(&server.https, &refused[0], &certs.ca);
    assert_eq!(status, 200);
    let (status, _) = https_get(&server.https, &refused[2], &certs.ca);
    assert_eq!(status, 200);
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = make_certs(dir.path(), "first");
    let second = make_certs(dir.path(), "second");
    // The server reads the files at these paths; a renewal rewrites them.
    let live = Certs { ca: first.ca.clone(), cert: dir.path().join("tls.crt"), key: dir.path().join("tls.key") };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let server = TlsServer::start(tempfile::tempdir().unwrap(), &live, false, &[]);
    assert!(try_https_get(&server.https, "/ready", &second.ca).is_err(), "trusted a certificate of another CA");

    // A half-done renewal (new certificate, old key) keeps the old pair in service.
    std::fs::copy(&second.cert, &live.cert).unwrap();
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(https_get(&server.https, "/ready", &first.ca).0, 200);

    std::fs::copy(&second.key, &live.key).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while try_https_get(&server.https, "/ready", &second.ca).is_err() {
        assert!(Instant::now() < deadline, "the renewed certificate was never served");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(try_https_get(&server.https, "/ready", &first.ca).is_err(), "still serving the old certificate");
}

#[test]
fn bad_certificate_files_stop_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_certs(dir.path(), "a");
    let b = make_certs(dir.path(), "b");
    let missing = dir.path().join("missing.pem");
    let cases: [(&Path, &Path, &str); 3] = [
        (&a.cert, &b.key, "does not belong to certificate"),
        (&missing, &a.key, "reading TLS certificate"),
        (&a.key, &a.key, "no CERTIFICATE block"),
    ];
    for (cert, key, want) in cases {
        let data = tempfile::tempdir().unwrap();
        let out = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(data.path())
            .args(["--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "want {want:?} in: {err}");
    }
    // --http-listen is the plain port beside HTTPS; alone it is refused.
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--data-dir")
        .arg(data.path())
        .args(["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// iPXE, which here cannot do TLS, boots an InfraEnv of a server that serves HTTPS: the guest reaches
/// only the plain-HTTP port (the HTTPS port is not relayed into it), and the booted initramfs holds
/// the discovery Ignition the HTTPS port serves.
#[test]
fn ipxe_boots_through_the_plain_http_port_of_an_https_server() {
    use common::qemu::{self, GUEST_HOST_ADDR};
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path(), "a");
    let free_port = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (https_port, http_port) = (free_port(), free_port());
    let boot_iso = qemu::boot_fixture_dir().join("boot.iso");
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("api-token"), TEST_API_TOKEN).unwrap();
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--data-dir")
        .arg(data.path())
        .args(["--listen", &format!("127.0.0.1:{https_port}"), "--http-listen", &format!("127.0.0.1:{http_port}")])
        .args(["--base-url", &format!("https://{GUEST_HOST_ADDR}:{https_port}")])
        .args(["--os-image", &format!("4.20:x86_64:{}", boot_iso.display())])
        .arg("--tls-cert")
        .arg(&certs.cert)
        .arg("--tls-key")
        .arg(&certs.key)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kill = Kill(&mut child);
    let https = format!("https://127.0.0.1:{https_port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while try_https_get(&https, "/ready", &certs.ca).map(|r| r.0) != Ok(200) {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ca = certs.ca.to_str().unwrap();
    let yaml = format!("{}---\n{}", pull_secret_yaml("tls"), infraenv_yaml("tls", "ie", ""));
    let out = cli(&["--certificate-authority", ca, "apply", "--server", &https, "-f", "-"], Some(&yaml));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ie = loop {
        let out = cli(
            &["--certificate-authority", ca, "get", "--server", &https, "infraenv", "ie", "-n", "tls", "-o", "json"],
            None,
        );
        let ie: Value = serde_json::from_slice(&out.stdout).unwrap();
        if ie["status"]["bootArtifacts"]["ipxeScript"].as_str().is_some_and(|u| !u.is_empty()) {
            break ie;
        }
        assert!(Instant::now() < deadline, "no iPXE script URL: {ie:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let script_url = ie["status"]["bootArtifacts"]["ipxeScript"].as_str().unwrap();
    assert!(script_url.starts_with(&format!("http://{GUEST_HOST_ADDR}:{http_port}/")), "{script_url}");

    let report = qemu::boot_ipxe_with(&[http_port], script_url, &qemu::BootOptions::default());
    report.assert_ok();
    let (status, ignition) = https_get(
        &https,
        &url_path(ie["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().unwrap()),
        &certs.ca,
    );
    assert_eq!(status, 200);
    assert_eq!(
        report.config_ign_sha256.as_deref(),
        Some(sha256_hex(&ignition).as_str()),
        "/config.ign in the booted initramfs\n{}",
        report.log_tail(3000)
    );
}
