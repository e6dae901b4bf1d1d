//! Signed image URLs (issue 7), run as a user would: `bootstream serve` with its default, signed
//! URLs. Each refusal is checked for its status and for carrying no image bytes.

use crate::common;

use std::time::{Duration, SystemTime};

use bootstream::auth::urlsign::UrlSigner;
use common::*;

const PULL_SECRET_AUTH: &str = "dXNlcjpwYXNzd29yZAo=";

fn infraenv(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
type: kubernetes.io/dockerconfigjson
metadata:
  name: ps-{name}
  namespace: tenants
stringData:
  .dockerconfigjson: '{{"auths":{{"quay.io":{{"auth":"{PULL_SECRET_AUTH}"}}}}}}'
---
apiVersion: agent-install.openshift.io/v1beta1
kind: InfraEnv
metadata:
  name: {name}
  namespace: tenants
spec:
  pullSecretRef:
    name: ps-{name}
"#
    )
}

struct Tenant {
    id: String,
    status: serde_json::Value,
}

fn tenant(server: &Server, name: &str) -> Tenant {
    server.apply_ok(&infraenv(name));
    let ie = server.wait_image_created("tenants", name, "True");
    Tenant { id: ie["metadata"]["uid"].as_str().unwrap().to_string(), status: ie["status"].clone() }
}

impl Tenant {
    fn url(&self, field: &str) -> String {
        let v = field.split('.').fold(&self.status, |v, k| &v[k]);
        v.as_str().unwrap_or_else(|| panic!("no {field} in {}", self.status)).to_string()
    }
}

/// A refusal: the status, a message naming why, and nothing of an image.
fn assert_refused(r: &Response, status: u16, why: &str) {
    assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
    let body = String::from_utf8_lossy(&r.body);
    assert!(body.contains(why), "{body:?} should say {why:?}");
    assert!(r.body.len() < 512, "a refusal of {} bytes", r.body.len());
    assert!(!body.contains(PULL_SECRET_AUTH));
}

fn token_of(url: &str) -> String {
    bootstream::auth::urlsign::token_of_url(url).unwrap().to_string()
}

fn signer_of(server: &Server) -> UrlSigner {
    UrlSigner::from_files(&server.data_dir.path().join("url-signing.pem"), &[]).unwrap()
}

#[test]
fn status_urls_are_signed_and_work() {
    let server = Server::start_signed(&[]);
    let a = tenant(&server, "a");
    let iso = a.url("isoDownloadURL");
    assert!(iso.contains("/byapikey/"), "{iso}");
    for field in ["bootArtifacts.initrd", "bootArtifacts.ipxeScript", "bootArtifacts.discoveryIgnitionURL"] {
        assert!(a.url(field).contains("api_key="), "{field}: {}", a.url(field));
    }
    // Kernel and rootfs are the same for everyone and stay unsigned, as upstream.
    for field in ["bootArtifacts.kernel", "bootArtifacts.rootfs"] {
        assert!(!a.url(field).contains("api_key"), "{field}");
        assert_eq!(server.request("HEAD", &server.path_of(&a.url(field)), &[]).status, 200, "{field}");
    }
    let r = server.get(&server.path_of(&iso));
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[0x8001..0x8006], b"CD001");
    let initrd = server.request("HEAD", &server.path_of(&a.url("bootArtifacts.initrd")), &[]);
    assert_eq!(initrd.status, 200);
    let ign = server.get(&server.path_of(&a.url("bootArtifacts.discoveryIgnitionURL")));
    assert_eq!(ign.status, 200);
    assert!(String::from_utf8_lossy(&ign.body).contains("ignition"));
    // The iPXE script's initrd URL is signed too, and works.
    let script = server.get(&server.path_of(&a.url("bootArtifacts.ipxeScript")));
    assert_eq!(script.status, 200);
    let script = String::from_utf8(script.body).unwrap();
    let initrd_url = script.split_whitespace().find(|w| w.contains("/pxe-initrd?")).expect("initrd line");
    assert!(initrd_url.contains("api_key="), "{script}");
    assert_eq!(server.request("HEAD", &server.path_of(initrd_url), &[]).status, 200);
    // The same token on /bytoken/, in the image_token parameter and in the Image-Token header.
    let token = token_of(&iso);
    let version_arch_file = iso.split(&format!("/byapikey/{token}/")).nth(1).unwrap();
    assert_eq!(server.request("HEAD", &format!("/bytoken/{token}/{version_arch_file}"), &[]).status, 200);
    let long = format!("/images/{}?type=full-iso&version=4.20&arch=x86_64", a.id);
    assert_eq!(server.request("HEAD", &format!("{long}&image_token={token}"), &[]).status, 200);
    assert_eq!(server.request("HEAD", &long, &[("Image-Token", &token)]).status, 200);
    assert_eq!(server.request("HEAD", &long, &[("Authorization", &format!("Bearer {token}"))]).status, 200);
}

#[test]
fn missing_expired_tampered_foreign_and_other_tenants_tokens_get_nothing() {
    let server = Server::start_signed(&[]);
    let (a, b) = (tenant(&server, "a"), tenant(&server, "b"));
    let a_token = token_of(&a.url("isoDownloadURL"));
    let b_token = token_of(&b.url("isoDownloadURL"));
    let long = |id: &str| format!("/images/{id}?type=full-iso&version=4.20&arch=x86_64");
    let files =
        |id: &str, name: &str| format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name={name}");

    // Missing: every per-InfraEnv route.
    for path in [
        format!("/byid/{}/4.20/x86_64/full.iso", a.id),
        long(&a.id),
        format!("/images/{}/pxe-initrd?version=4.20", a.id),
        files(&a.id, "discovery.ign"),
        files(&a.id, "ipxe-script"),
    ] {
        assert_refused(&server.get(&path), 401, "needs a signed URL");
    }
    // Another tenant's valid token: 403 on every route that names an InfraEnv.
    assert_refused(&server.get(&format!("{}&api_key={b_token}", long(&a.id))), 403, "another InfraEnv");
    assert_refused(
        &server.get(&format!("{}&api_key={b_token}", files(&a.id, "discovery.ign"))),
        403,
        "another InfraEnv",
    );
    assert_refused(
        &server.get(&format!("/images/{}/pxe-initrd?version=4.20&api_key={b_token}", a.id)),
        403,
        "another InfraEnv",
    );
    // B's token in a /byapikey/ URL serves B's image, never A's: the image is the token's.
    let r = server.get(&format!("/byapikey/{b_token}/4.20/x86_64/full.iso"));
    assert_eq!(r.status, 200);
    assert!(r.headers["content-disposition"].contains(&b.id));

    // Tampered: the payload of B's token under A's signature, and one changed signature character.
    let (a_parts, b_parts): (Vec<&str>, Vec<&str>) = (a_token.split('.').collect(), b_token.split('.').collect());
    let spliced = format!("{}.{}.{}", a_parts[0], b_parts[1], a_parts[2]);
    assert_refused(&server.get(&format!("/byapikey/{spliced}/4.20/x86_64/full.iso")), 401, "signature");
    let mut sig: Vec<char> = a_parts[2].chars().collect();
    sig[5] = if sig[5] == 'A' { 'B' } else { 'A' };
    let flipped = format!("{}.{}.{}", a_parts[0], a_parts[1], sig.into_iter().collect::<String>());
    assert_refused(&server.get(&format!("{}&api_key={flipped}", long(&a.id))), 401, "signature");
    assert_refused(&server.get("/byapikey/not-a-jwt/4.20/x86_64/full.iso"), 401, "not a valid JWT");

    // Expired: signed with the server's own key, 5 hours ago (tokens last 4).
    let expired = signer_of(&server).sign(&a.id, SystemTime::now() - Duration::from_secs(5 * 3600));
    assert_refused(&server.get(&format!("/byapikey/{expired}/4.20/x86_64/full.iso")), 401, "expired");
    assert_refused(&server.get(&format!("{}&api_key={expired}", files(&a.id, "discovery.ign"))), 401, "expired");

    // A key the server does not know.
    let stranger = UrlSigner::load_or_create(tempfile::tempdir().unwrap().path(), &[]).unwrap();
    let foreign = stranger.sign(&a.id, SystemTime::now());
    assert_refused(&server.get(&format!("/byapikey/{foreign}/4.20/x86_64/full.iso")), 401, "does not know");

    // Nothing of the pull secret in the metrics after all this.
    let metrics = server.get("/metrics");
    assert!(!String::from_utf8_lossy(&metrics.body).contains(PULL_SECRET_AUTH));
}

/// Rotation without downtime: URLs signed with the old key keep working while it is a previous key,
/// new URLs are signed with the new one, and once the old key is dropped its URLs stop working.
#[test]
fn keys_rotate_without_breaking_urls_in_use() {
    let server = Server::start_signed(&[]);
    let a = tenant(&server, "a");
    let old_url = server.path_of(&a.url("isoDownloadURL"));
    let data = server.kill();
    let old_key = data.path().join("old.pem");
    std::fs::rename(data.path().join("url-signing.pem"), &old_key).unwrap();
    let new_dir = tempfile::tempdir().unwrap();
    UrlSigner::load_or_create(new_dir.path(), &[]).unwrap();
    let new_key = new_dir.path().join("url-signing.pem");
    let (old_s, new_s) = (old_key.to_str().unwrap(), new_key.to_str().unwrap());

    // Restarted with the new key and the old one as previous.
    let server = Server::spawn_signed_in(data, &["--url-signing-key", new_s, "--url-previous-key", old_s]);
    assert_eq!(server.request("HEAD", &old_url, &[]).status, 200, "a URL of the old key still works");
    let fresh = signer_of_key(&new_key).sign(&a.id, SystemTime::now());
    assert_eq!(server.request("HEAD", &format!("/byapikey/{fresh}/4.20/x86_64/full.iso"), &[]).status, 200);

    // The grace period over: the old key is dropped.
    let data = server.kill();
    let server = Server::spawn_signed_in(data, &["--url-signing-key", new_s]);
    assert_refused(&server.request("GET", &old_url, &[]), 401, "does not know");
    assert_eq!(server.request("HEAD", &format!("/byapikey/{fresh}/4.20/x86_64/full.iso"), &[]).status, 200);
    // The controller re-signed the status with the new key at start (the old token is unknown).
    let ie = server.wait_infraenv("tenants", "a", "status signed with the new key", |ie| {
        ie["status"]["isoDownloadURL"].as_str().is_some_and(|u| {
            let t = token_of(u);
            signer_of_key(&new_key).verify(&t, SystemTime::now()).is_ok()
        })
    });
    let url = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    assert_eq!(server.request("HEAD", &url, &[]).status, 200);
}

fn signer_of_key(path: &std::path::Path) -> UrlSigner {
    UrlSigner::from_files(path, &[]).unwrap()
}

#[test]
fn unsigned_mode_serves_byid_and_refuses_signed_routes() {
    let server = Server::start(&[]);
    let a = tenant(&server, "a");
    let iso = a.url("isoDownloadURL");
    assert!(iso.contains(&format!("/byid/{}/", a.id)), "{iso}");
    assert_eq!(server.request("HEAD", &server.path_of(&iso), &[]).status, 200);
    assert_refused(&server.get("/byapikey/x.y.z/4.20/x86_64/full.iso"), 404, "unsigned");
}

/// Keys made the way the README says (`openssl genpkey`), and a previous key given as a public key.
#[test]
fn openssl_keys_sign_and_public_keys_verify() {
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).current_dir(dir.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "old.pem"]);
    openssl(&["pkey", "-in", "old.pem", "-pubout", "-out", "old.pub"]);
    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "new.pem"]);
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let old = UrlSigner::from_files(std::path::Path::new(&path("old.pem")), &[]).unwrap();
    let server = Server::start_signed(&["--url-signing-key", &path("new.pem"), "--url-previous-key", &path("old.pub")]);
    let a = tenant(&server, "a");
    let by_old = old.sign(&a.id, SystemTime::now());
    assert_eq!(server.request("HEAD", &format!("/byapikey/{by_old}/4.20/x86_64/full.iso"), &[]).status, 200);
    assert_eq!(server.request("HEAD", &server.path_of(&a.url("isoDownloadURL")), &[]).status, 200);
    // A public key only verifies: it cannot be the signing key.
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--url-signing-key", &path("old.pub"), "--data-dir", &path("d")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("a public key cannot sign"), "{out:?}");
}

/// The pull secret never reaches the server's log (at debug level) or its metrics, through a
/// lifecycle with downloads, refusals, a bad pull secret and a deletion.
#[test]
fn the_pull_secret_never_appears_in_logs_or_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let data = dir.path().join("data");
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", data.to_str().unwrap()])
        .env("RUST_LOG", "debug")
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().to_string();
    let kubeconfig = data.join("kubeconfig");
    let cli = |args: &[&str], stdin: &str| {
        let mut c = std::process::Command::new(BIN);
        c.args(args).args(["--kubeconfig", kubeconfig.to_str().unwrap()]).env_remove("BOOTSTREAM_TOKEN");
        let mut child = c
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    assert!(cli(&["apply", "-f", "-"], &infraenv("a")).status.success());
    // A pull secret that is not valid JSON: its error must not quote it.
    let bad = "apiVersion: v1\nkind: Secret\nmetadata: {name: ps-bad, namespace: tenants}\n\
               stringData: {.dockerconfigjson: 'not json dXNlcjpwYXNzd29yZAo='}\n---\n\
               apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\n\
               metadata: {name: bad, namespace: tenants}\nspec: {pullSecretRef: {name: ps-bad}}\n";
    assert!(cli(&["apply", "-f", "-"], bad).status.success());
    let mut ie = serde_json::Value::Null;
    for _ in 0..100 {
        let out = cli(&["get", "infraenv", "a", "-n", "tenants", "-o", "json"], "");
        ie = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if ie["status"]["isoDownloadURL"].as_str().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let iso = ie["status"]["isoDownloadURL"].as_str().expect("an ISO URL").to_string();
    let path = format!("/{}", iso.split("://").nth(1).unwrap().split_once('/').unwrap().1);
    assert_eq!(request(&addr, "GET", &path, &[], b"").status, 200);
    let ign = ie["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().unwrap();
    let ign_path = format!("/{}", ign.split("://").nth(1).unwrap().split_once('/').unwrap().1);
    let ign = request(&addr, "GET", &ign_path, &[], b"");
    assert!(String::from_utf8_lossy(&ign.body).contains("ignition"), "the Ignition was served");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    assert_eq!(request(&addr, "GET", &format!("/byid/{id}/4.20/x86_64/full.iso"), &[], b"").status, 401);
    let metrics = request(&addr, "GET", "/metrics", &[], b"");
    assert!(cli(&["delete", "infraenv", "a", "-n", "tenants"], "").status.success());
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("DEBUG"), "the log was written at debug level: {} bytes", log.len());
    // The secret as stored (base64 auth), decoded, and as it sits in the Ignition (JSON-escaped).
    for needle in [PULL_SECRET_AUTH, "user:password", "dXNlcjpwYXNzd29yZAo"] {
        assert!(!log.contains(needle), "the server log holds {needle:?}");
        assert!(!String::from_utf8_lossy(&metrics.body).contains(needle), "the metrics hold {needle:?}");
    }
}
