//! HTTP semantics a BMC, iPXE, curl or a browser relies on, checked on the wire against the real server.

use crate::common;

use std::io::{Read, Write};

use common::*;
use proptest::prelude::*;

struct Env {
    server: Server,
    id: String,
    iso_path: String,
    /// The whole served ISO.
    whole: Vec<u8>,
    /// Absolute offset of the Ignition embed area in the base ISO.
    area: (usize, usize),
    _dir: tempfile::TempDir,
    base_path: std::path::PathBuf,
}

/// A server with the 2023-07 x86_64 fixture as 4.19 and the InfraEnv n/ie, its image created.
fn server_with_infraenv() -> (tempfile::TempDir, std::path::PathBuf, Server, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let base_path = fixture_iso("embed-areas-2023-07.x86_64", dir.path());
    let server = Server::start(&["--os-image", &format!("4.19:x86_64:{}", base_path.display())]);
    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml("n", "ie", ""));
    let ie = server.wait_image_created("n", "ie", "True");
    (dir, base_path, server, ie)
}

fn env() -> Env {
    let (dir, base_path, server, ie) = server_with_infraenv();
    let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let whole = server.get(&iso_path).body;
    // spec-images §8.1: 2023-07 x86_64 has its Ignition area at 139264, 262144 bytes.
    Env { server, id, iso_path, whole, area: (139264, 262144), _dir: dir, base_path }
}

#[test]
fn ranges_validators_and_head() {
    let e = env();
    let full = e.server.get(&e.iso_path);
    assert_eq!(full.status, 200);
    assert_eq!(full.header("content-length").unwrap(), e.whole.len().to_string());
    assert_eq!(full.header("accept-ranges"), Some("bytes"));
    assert_eq!(full.header("content-disposition").unwrap(), format!("attachment; filename={}-discovery.iso", e.id));
    let etag = full.header("etag").unwrap().to_string();
    assert!(etag.starts_with('"') && etag.len() == 66, "strong ETag from a SHA-256: {etag}");
    let last_modified = full.header("last-modified").unwrap().to_string();
    let date = httpdate::parse_http_date(full.header("date").unwrap()).unwrap();
    assert!(httpdate::parse_http_date(&last_modified).unwrap() <= date, "Last-Modified after Date");

    // HEAD: same headers, no body.
    let head = e.server.request("HEAD", &e.iso_path, &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for h in ["content-length", "etag", "last-modified", "content-type", "content-disposition", "accept-ranges"] {
        assert_eq!(head.header(h), full.header(h), "{h}");
    }

    // A single range across the start of the Ignition area.
    let (a, _) = e.area;
    let r = e.server.request("GET", &e.iso_path, &[("Range", &format!("bytes={}-{}", a - 10, a + 9))]);
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range").unwrap(), format!("bytes {}-{}/{}", a - 10, a + 9, e.whole.len()));
    assert_eq!(r.body, &e.whole[a - 10..a + 10]);

    // Multiple ranges: multipart/byteranges.
    let r = e.server.request("GET", &e.iso_path, &[("Range", "bytes=0-9,-5")]);
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect(ct);
    let n = e.whole.len();
    let mut expected =
        format!("--{boundary}\r\nContent-Type: application/x-iso9660-image\r\nContent-Range: bytes 0-9/{n}\r\n\r\n")
            .into_bytes();
    expected.extend_from_slice(&e.whole[..10]);
    expected.extend_from_slice(
        format!(
            "\r\n--{boundary}\r\nContent-Type: application/x-iso9660-image\r\nContent-Range: bytes {}-{}/{n}\r\n\r\n",
            n - 5,
            n - 1
        )
        .as_bytes(),
    );
    expected.extend_from_slice(&e.whole[n - 5..]);
    expected.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    assert_eq!(r.body, expected);

    // Unsatisfiable and malformed ranges: 416 with the length.
    for bad in [format!("bytes={n}-"), "bytes=9-1".to_string(), "bytes=x".to_string()] {
        let r = e.server.request("GET", &e.iso_path, &[("Range", &bad)]);
        assert_eq!(r.status, 416, "{bad}");
        assert_eq!(r.header("content-range").unwrap(), format!("bytes */{n}"));
    }

    // If-Range: current validator → range; stale → whole.
    let r = e.server.request("GET", &e.iso_path, &[("Range", "bytes=0-0"), ("If-Range", &etag)]);
    assert_eq!(r.status, 206);
    let r = e.server.request("GET", &e.iso_path, &[("Range", "bytes=0-0"), ("If-Range", "\"stale\"")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), n);

    // Conditional GET.
    assert_eq!(e.server.request("GET", &e.iso_path, &[("If-None-Match", &etag)]).status, 304);
    assert_eq!(e.server.request("GET", &e.iso_path, &[("If-Match", "\"other\"")]).status, 412);
    // ETag is stable across requests.
    assert_eq!(e.server.get(&e.iso_path).header("etag").unwrap(), etag);
}

#[test]
fn a_new_pull_secret_gives_a_new_image_and_etag() {
    let e = env();
    let etag = e.server.get(&e.iso_path).header("etag").unwrap().to_string();
    let before = e.server.get_json("infraenv", "n", "ie");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    e.server.apply_ok(&pull_secret_yaml("n").replace("r@rr.com", "ops@example.com"));
    // The InfraEnv controller rebuilds the image after the apply returned: wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let after = loop {
        let after = e.server.get_json("infraenv", "n", "ie");
        if after["status"]["createdTime"] != before["status"]["createdTime"] || std::time::Instant::now() > deadline {
            break after;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_ne!(before["status"]["createdTime"], after["status"]["createdTime"]);
    assert_ne!(before["status"]["imageDigest"], after["status"]["imageDigest"]);
    let resp = e.server.get(&e.iso_path);
    assert_ne!(resp.header("etag").unwrap(), etag);
    let range = e.server.request("GET", &e.iso_path, &[("Range", "bytes=0-0"), ("If-Range", &etag)]);
    assert_eq!(range.status, 200, "a stale If-Range gets the whole new image");
}

#[test]
fn keep_alive_and_the_hyper_path_serve_the_same_bytes() {
    let e = env();
    // Two requests on one connection (the zero-copy path).
    let mut s = std::net::TcpStream::connect(&e.server.addr).unwrap();
    let req = format!("GET {} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-99\r\n\r\n", e.iso_path);
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(
        format!("GET {} HTTP/1.1\r\nHost: x\r\nRange: bytes=100-199\r\nConnection: close\r\n\r\n", e.iso_path)
            .as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert_eq!(text.matches("HTTP/1.1 206 Partial Content").count(), 2, "{text}");
    let tail = &raw[raw.len() - 100..];
    assert_eq!(tail, &e.whole[100..200]);

    // `Expect: 100-continue` makes the connection go through hyper; same bytes.
    let via_hyper = e.server.request("GET", &e.iso_path, &[("Expect", "100-continue")]);
    assert_eq!(via_hyper.status, 200);
    assert!(via_hyper.body == e.whole, "hyper path differs from the fast path");
    let range = e.server.request("GET", &e.iso_path, &[("Expect", "100-continue"), ("Range", "bytes=139000-140000")]);
    assert_eq!(range.body, &e.whole[139000..140001]);
}

#[test]
fn request_bodies_are_read_whole_on_a_keep_alive_connection() {
    let e = env();
    let secret = |name: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Secret","metadata":{{"name":"{name}","namespace":"n"}},"stringData":{{"k":"v-{name}"}}}}"#
        )
    };
    let put = |name: &str| {
        let doc = secret(name);
        format!(
            "POST /api/v1/namespaces/n/secrets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Authorization: Bearer {TEST_API_TOKEN}\r\nContent-Length: {}\r\n\r\n{doc}",
            doc.len()
        )
    };
    // On the API's own (HTTPS) listener: the plain one does not serve the API.
    let mut s = e.server.api_stream();
    // A body that arrives in pieces, after its head.
    let first = put("s1");
    let split = first.find("\r\n\r\n").unwrap() + 10;
    s.write_all(&first.as_bytes()[..split]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    s.write_all(&first.as_bytes()[split..]).unwrap();
    // Then two requests with bodies and a GET in one write (pipelined).
    let rest = format!(
        "{}{}GET /api/v1/namespaces/n/secrets/s3 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TEST_API_TOKEN}\r\nConnection: close\r\n\r\n",
        put("s2"),
        put("s3")
    );
    s.write_all(rest.as_bytes()).unwrap();
    let mut raw = Vec::new();
    match s.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("{e}"),
    }
    let text = String::from_utf8_lossy(&raw);
    let statuses: Vec<&str> = text.lines().filter(|l| l.starts_with("HTTP/1.1 ")).collect();
    assert_eq!(statuses.len(), 4, "{text}");
    assert!(statuses.iter().all(|l| l.starts_with("HTTP/1.1 20")), "{text}");
    for name in ["s1", "s2", "s3"] {
        let got = e.server.get(&format!("/api/v1/namespaces/n/secrets/{name}"));
        assert_eq!(got.status, 200, "{name}: {}", got.text());
        assert!(got.text().contains(&format!("\"name\": \"{name}\"")), "{}", got.text());
    }
    // The list of them (written from the stored texts) reads the same on both paths.
    let list = e.server.get("/api/v1/namespaces/n/secrets");
    let via_hyper = e.server.request("GET", "/api/v1/namespaces/n/secrets", &[("Expect", "100-continue")]);
    assert_eq!(list.status, 200);
    assert_eq!(list.body, via_hyper.body);
    let doc: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    let names: Vec<&str> =
        doc["items"].as_array().unwrap().iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    for name in ["s1", "s2", "s3"] {
        assert!(names.contains(&name), "{names:?}");
    }
}

#[test]
fn bad_requests_get_clear_errors() {
    let e = env();
    let missing = "0b0e0f7e-1111-4222-8333-944445555666";
    let r = e.server.get(&format!("/byid/{missing}/4.19/x86_64/full.iso"));
    assert_eq!(r.status, 404);
    assert!(r.text().contains("not found"), "{}", r.text());
    let r = e.server.get(&format!("/byid/{}/4.99/x86_64/full.iso", e.id));
    assert_eq!(r.status, 404);
    assert!(r.text().contains("4.99") && r.text().contains("available: 4.19 (x86_64)"), "{}", r.text());
    let r = e.server.get(&format!("/byid/{}/4.19/s390x/full.iso", e.id));
    assert_eq!(r.status, 404);
    assert!(r.text().contains("s390x"), "{}", r.text());
    let r = e.server.get(&format!("/images/{}?type=full-iso&arch=x86_64", e.id));
    assert_eq!((r.status, r.text().trim()), (400, "'version' parameter required"));
    let r = e.server.get(&format!("/images/{}?type=bogus&version=4.19", e.id));
    assert_eq!(r.status, 400);
    let r = e.server.get(&format!("/byid/{}/4.19/x86_64/other.iso", e.id));
    assert_eq!((r.status, r.text().trim()), (404, "unrecognized file name other.iso"));
    let r = e.server.get(&format!("/images/{}/pxe-initrd?version=4.99&arch=x86_64", e.id));
    assert_eq!(r.status, 400);
    assert!(r.text().starts_with("version for 4.99 x86_64, not found"), "{}", r.text());
    let r = e.server.get(&format!("/images/{}/pxe-initrd?arch=x86_64", e.id));
    assert_eq!((r.status, r.text().trim()), (400, "'version' parameter required for initrd download"));
    let r = e.server.get(&format!("/images/{missing}/pxe-initrd?version=4.19"));
    assert_eq!(r.status, 404);
    let r = e.server.get("/boot-artifacts/initramfs?version=4.19");
    assert_eq!(r.status, 404);
    let r = e.server.request("POST", &e.iso_path, &[]);
    assert_eq!(r.status, 405);
    assert_eq!(e.server.get("/nowhere").status, 404);
    assert_eq!(e.server.get("/live").status, 200);
    assert_eq!(e.server.get("/health").status, 200);
    let metrics = e.server.get("/metrics").text();
    assert!(metrics.contains("bootstream_http_request_duration_seconds"), "{metrics}");
    assert!(metrics.contains("bootstream_os_images{version=\"4.19\",arch=\"x86_64\",state=\"ready\"} 1"), "{metrics}");
}

#[test]
fn a_base_image_changed_or_gone_on_disk_is_503_never_wrong_bytes() {
    let e = env();
    // Replaced by rename with different content of the same size.
    let mut other = e.whole.clone();
    other[40000] ^= 0xff;
    let tmp = e.base_path.with_extension("new");
    std::fs::write(&tmp, &other).unwrap();
    std::fs::rename(&tmp, &e.base_path).unwrap();
    let r = e.server.get(&e.iso_path);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("changed on disk"), "{}", r.text());
    assert_eq!(e.server.get("/boot-artifacts/kernel?version=4.19").status, 503);
    // Gone.
    std::fs::remove_file(&e.base_path).unwrap();
    let r = e.server.get(&e.iso_path);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("is gone"), "{}", r.text());
}

#[test]
fn any_byte_range_equals_the_same_slice_of_the_whole_response() {
    let e = env();
    let n = e.whole.len() as u64;
    let (a, len) = (e.area.0 as u64, e.area.1 as u64);
    // Points of interest: segment boundaries (area start/end, end of the archive) and the file ends.
    let edges = [0, a, a + 1, a + 200, a + len - 1, a + len, n - 1];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 96, ..Default::default() });
    runner
        .run(&(0usize..edges.len(), -3000i64..3000, 0u64..70000), |(edge, delta, span)| {
            let start = (edges[edge] as i64 + delta).clamp(0, n as i64 - 1) as u64;
            let end = (start + span).min(n - 1);
            let r = e.server.request("GET", &e.iso_path, &[("Range", &format!("bytes={start}-{end}"))]);
            prop_assert_eq!(r.status, 206);
            prop_assert!(r.body == e.whole[start as usize..=end as usize]);
            Ok(())
        })
        .unwrap();
}

/// Discovery contents the server has built, from `/metrics`.
fn content_builds(server: &Server) -> u64 {
    let text = String::from_utf8(server.get("/metrics").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("bootstream_discovery_content_builds_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no discovery_content_builds in /metrics:\n{text}"))
}

#[test]
fn downloads_reuse_the_content_the_controller_built_until_the_spec_changes() {
    let (_dir, _, server, ie) = server_with_infraenv();
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let initrd_path = server.path_of(ie["status"]["bootArtifacts"]["initrd"].as_str().unwrap());
    // The controller built the content, then wrote the InfraEnv's status (a new resourceVersion): the
    // downloads that follow are served from that build, however often the status moves.
    let built = content_builds(&server);
    assert_eq!(built, 1, "the controller's own status write made it build the content again");
    let whole = server.get(&iso_path).body;
    assert_eq!(server.get(&initrd_path).status, 200);
    assert_eq!(content_builds(&server), built, "a download rebuilt the content the controller had built");

    // A spec change is a new content, built once, whoever asks for it first (the controller, or a
    // download that comes before the controller got to it).
    server.apply_ok(&infraenv_yaml("n", "ie", "  kernelArguments:\n  - operation: append\n    value: audit=0\n"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let changed = loop {
        let body = server.get(&iso_path).body;
        if body != whole {
            break body;
        }
        assert!(std::time::Instant::now() < deadline, "the ISO never changed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let after = content_builds(&server);
    assert_eq!(after, 2, "the new spec's content was built more than once");
    assert_eq!(server.get(&iso_path).body, changed);
    assert_eq!(content_builds(&server), after);
}
