//! The embedded resource API requires the server's bearer token (issue 7): without it, or with
//! another, 401 and nothing of the resources; the CLI finds the token next to a default `serve`.

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
            let r = request(&server.addr, method, path, &headers, b"");
            assert_eq!(r.status, 401, "{method} {headers:?}");
            let body = String::from_utf8_lossy(&r.body);
            assert!(body.contains(why), "{body}");
            assert!(!body.contains("c2VjcmV0LXZhbHVl"), "no secret in a refusal");
            assert_eq!(r.headers.get("www-authenticate").map(String::as_str), Some("Bearer"));
        }
    }
    // Writes are refused too, and lose nothing.
    let put = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"ps","namespace":"t"},"stringData":{"x":"y"}}"#;
    assert_eq!(request(&server.addr, "PUT", path, &[("Content-Type", "application/json")], put).status, 401);
    let r = server.get(path);
    assert_eq!(r.status, 200, "with the token");
    assert!(String::from_utf8_lossy(&r.body).contains(".dockerconfigjson"), "the secret is unchanged");
    // The list of everything, and the cluster log downloads, likewise.
    assert_eq!(
        request(&server.addr, "GET", "/apis/agent-install.openshift.io/v1beta1/infraenvs", &[], b"").status,
        401
    );
    let logs = "/api/assisted-install/v2/clusters/0e8a7d4c-0000-4000-8000-000000000000/logs";
    assert_eq!(request(&server.addr, "GET", logs, &[], b"").status, 401);
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
        let r = request(&server.addr, "GET", path, &[], b"");
        assert_eq!(r.status, 401, "{path}");
        assert!(String::from_utf8_lossy(&r.body).contains("\"kind\": \"Status\""), "{path}: a Status body");
        let ok = request(
            &server.addr,
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
        .args(["get", "--server", &server.url, "secret", "ps", "-n", "t"])
        .env("BOOTSTREAM_TOKEN", "wrong-token-wrong-token")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not this server's API token"), "{out:?}");
    // ... and with the server's token file it works.
    let token_file = server.data_dir.path().join("api-token");
    let out = Command::new(BIN)
        .args(["get", "--server", &server.url, "secret", "ps", "-n", "t", "--token-file", token_file.to_str().unwrap()])
        .env_remove("BOOTSTREAM_TOKEN")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The README's way: `bootstream serve` with its defaults, then `bootstream apply` from the same
/// directory, with no token given: the CLI reads `./bootstream-data/api-token`.
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
        .args(["apply", "--server", &format!("http://{addr}"), "-f", "-"])
        .current_dir(dir.path())
        .env_remove("BOOTSTREAM_TOKEN")
        .stdin(Stdio::piped())
        .output_with(SECRET_YAML);
    let _ = child.kill();
    let _ = child.wait();
    assert!(apply.status.success(), "{}", String::from_utf8_lossy(&apply.stderr));
    assert_eq!(String::from_utf8(std::mem::take(&mut apply.stdout)).unwrap().trim(), "secret/ps created");
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
