//! The embedded resource API requires the server's bearer token (issue 7): without it, or with
//! another, 401 and nothing of the resources; the CLI finds the API, its CA and the token next to a
//! default `serve` (DATA_DIR/kubeconfig). Beside the API's HTTPS listener, the plain main listener
//! serves nothing that takes the token (issue 41): the token never crosses the network in clear.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;

const SECRET_YAML: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: ps, namespace: t}\n\
                           stringData: {.dockerconfigjson: '{\"auths\":{\"quay.io\":{\"auth\":\"c2VjcmV0LXZhbHVl\"}}}'}\n";

#[test]
fn the_resource_api_needs_the_token() {
    let server = Server::start(&[]);
    server.apply_ok(SECRET_YAML);
    let path = "/api/v1/namespaces/t/secrets/ps";
    for (headers, why) in [
        (vec![], "needs the server's token"),
        (vec![("Authorization", "Bearer not-the-token")], "not this server's API token"),
        (vec![("Authorization", "Basic Ym9vdDpzdHJlYW0=")], "needs the server's token"),
    ] {
        for method in ["GET", "DELETE"] {
            let r = server.api_request(method, path, &headers, b"");
            assert_eq!(r.status, 401, "{method} {headers:?}");
            let body = String::from_utf8_lossy(&r.body);
            assert!(body.contains(why), "{body}");
            assert!(!body.contains("c2VjcmV0LXZhbHVl"), "no secret in a refusal");
            assert_eq!(r.headers.get("www-authenticate").map(String::as_str), Some("Bearer"));
        }
    }
    // Writes are refused too, and lose nothing.
    let put = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"ps","namespace":"t"},"stringData":{"x":"y"}}"#;
    assert_eq!(server.api_request("PUT", path, &[("Content-Type", "application/json")], put).status, 401);
    let r = server.get(path);
    assert_eq!(r.status, 200, "with the token");
    assert!(String::from_utf8_lossy(&r.body).contains(".dockerconfigjson"), "the secret is unchanged");
    // The list of everything, and the cluster log downloads, likewise.
    assert_eq!(server.api_request("GET", "/apis/agent-install.openshift.io/v1beta1/infraenvs", &[], b"").status, 401);
    let logs = "/api/assisted-install/v2/clusters/0e8a7d4c-0000-4000-8000-000000000000/logs";
    assert_eq!(server.api_request("GET", logs, &[], b"").status, 401);
    // Discovery and OpenAPI documents say which kinds this server holds: behind the token too.
    for path in [
        "/version",
        "/api",
        "/api/v1",
        "/apis",
        "/apis/agent-install.openshift.io",
        "/apis/agent-install.openshift.io/v1beta1",
        "/openapi/v2",
        "/openapi/v3",
        "/openapi/v3/apis/agent-install.openshift.io/v1beta1",
        "/apis/agent-install.openshift.io/v1beta1/infraenvs?watch=true",
    ] {
        let r = server.api_request("GET", path, &[], b"");
        assert_eq!(r.status, 401, "{path}");
        assert!(String::from_utf8_lossy(&r.body).contains("\"kind\": \"Status\""), "{path}: a Status body");
        let ok = server.api_request(
            "GET",
            path.split('?').next().unwrap(),
            &[("Authorization", &format!("Bearer {TEST_API_TOKEN}"))],
            b"",
        );
        assert_eq!(ok.status, 200, "{path} with the token");
    }
    // What stays open: health, and the image and agent routes (they have tokens of their own).
    assert_eq!(request(&server.addr, "GET", "/ready", &[], b"").status, 200);
    assert_eq!(request(&server.addr, "GET", "/live", &[], b"").status, 200);

    // The CLI with another token says why.
    let out = Command::new(BIN)
        .args(["get", "--kubeconfig", &server.kubeconfig, "secret", "ps", "-n", "t"])
        .env("BOOTSTREAM_TOKEN", "wrong-token-wrong-token")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not this server's API token"), "{out:?}");
    // ... and with the server's token file it works.
    let token_file = server.data_dir.path().join("api-token");
    let out = Command::new(BIN)
        .args(["get", "--server", &server.api_url(), "secret", "ps", "-n", "t"])
        .args(["--token-file", token_file.to_str().unwrap()])
        .args(["--certificate-authority", server.data_dir.path().join("api-tls/tls.crt").to_str().unwrap()])
        .env_remove("BOOTSTREAM_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// With the API on an HTTPS listener of its own, the main listener (plain HTTP, the one the
/// provisioning network and BMCs reach) answers 404 for everything that takes the API token, even
/// with the right token, and says where the API is: the token must not cross that network in clear.
#[test]
fn the_plain_listener_serves_nothing_that_takes_the_api_token() {
    let server = Server::start(&[]);
    server.apply_ok(SECRET_YAML);
    let bearer = format!("Bearer {TEST_API_TOKEN}");
    let api = server.api_addr.clone().expect("an HTTPS API listener");
    let logs = "/api/assisted-install/v2/clusters/0e8a7d4c-0000-4000-8000-000000000000/logs?logs_type=host";
    for (method, path) in [
        ("GET", "/api/v1/secrets"),
        ("GET", "/api/v1/namespaces/t/secrets/ps"),
        ("GET", "/api/v1/namespaces/t/secrets/ps?watch=true"),
        ("DELETE", "/api/v1/namespaces/t/secrets/ps"),
        ("GET", "/apis/agent-install.openshift.io/v1beta1/infraenvs"),
        ("POST", "/apis/agent-install.openshift.io/v1beta1/namespaces/t/infraenvs"),
        ("GET", "/version"),
        ("GET", "/api"),
        ("GET", "/apis"),
        ("GET", "/openapi/v2"),
        ("GET", "/openapi/v3"),
        ("GET", logs),
    ] {
        for headers in [vec![("Authorization", bearer.as_str())], vec![]] {
            let r = request(&server.addr, method, path, &headers, b"");
            assert_eq!(r.status, 404, "{method} {path} {headers:?}: {}", r.text());
            let text = r.text();
            assert!(text.contains("DATA_DIR/kubeconfig") && text.contains(&format!("https://{api}")), "{text}");
            assert!(!text.contains("c2VjcmV0LXZhbHVl"), "no secret in a refusal");
            assert!(r.header("www-authenticate").is_none(), "no token asked for: {method} {path}");
        }
    }
    // A body announced with a refused request is not waited for: the answer comes from the head.
    let started = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
    std::io::Write::write_all(
        &mut s,
        format!(
            "PUT /api/v1/namespaces/t/secrets/ps HTTP/1.1\r\nHost: x\r\nAuthorization: {bearer}\r\n\
             Content-Length: 1000000\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 404");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // The same requests over the API's HTTPS listener are served.
    assert_eq!(server.get("/api/v1/namespaces/t/secrets/ps").status, 200);
    // What the plain listener is for stays: health, the agent API (its own tokens), images.
    assert_eq!(request(&server.addr, "GET", "/ready", &[], b"").status, 200);
    let agent = request(&server.addr, "GET", "/api/assisted-install/v2/infra-envs/x/hosts", &[], b"");
    assert_ne!(agent.status, 404, "{}", agent.text());
}

/// The README's way: `bootstream serve` with its defaults, then `bootstream apply` and `get` from
/// the same directory, with no flag and no token given: the CLI reads `./bootstream-data/kubeconfig`
/// (the HTTPS API's address, its CA and the token).
#[test]
fn the_cli_next_to_a_default_serve_needs_no_flags() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().to_string();
    let token = std::fs::read_to_string(dir.path().join("bootstream-data/api-token")).unwrap();
    assert!(token.trim().len() >= 43, "a generated token: {token:?}");
    let mut apply = Command::new(BIN)
        .args(["apply", "-f", "-"])
        .current_dir(dir.path())
        .env_remove("BOOTSTREAM_TOKEN")
        .env_remove("BOOTSTREAM_SERVER")
        .env_remove("BOOTSTREAM_KUBECONFIG")
        .stdin(Stdio::piped())
        .output_with(SECRET_YAML);
    let get = Command::new(BIN)
        .args(["get", "secret", "ps", "-n", "t", "-o", "json"])
        .current_dir(dir.path())
        .env_remove("BOOTSTREAM_TOKEN")
        .env_remove("BOOTSTREAM_SERVER")
        .env_remove("BOOTSTREAM_KUBECONFIG")
        .output()
        .unwrap();
    // The main listener is plain HTTP and refuses the API: the CLI went to the HTTPS one.
    let plain = request(
        &addr,
        "GET",
        "/api/v1/namespaces/t/secrets/ps",
        &[("Authorization", &format!("Bearer {}", token.trim()))],
        b"",
    );
    let _ = child.kill();
    let _ = child.wait();
    assert!(apply.status.success(), "{}", String::from_utf8_lossy(&apply.stderr));
    assert_eq!(String::from_utf8(std::mem::take(&mut apply.stdout)).unwrap().trim(), "secret/ps created");
    assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
    assert!(String::from_utf8_lossy(&get.stdout).contains("\"name\": \"ps\""), "{get:?}");
    assert_eq!(plain.status, 404);
}

trait OutputWith {
    fn output_with(&mut self, stdin: &str) -> std::process::Output;
}

impl OutputWith for Command {
    fn output_with(&mut self, stdin: &str) -> std::process::Output {
        use std::io::Write;
        let mut child = self.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }
}
