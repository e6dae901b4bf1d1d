//! Limits (issue 7): past the most concurrent downloads a client gets 503 with Retry-After, and a
//! client that goes away mid-download gives its place back.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

const INFRAENV: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: ps, namespace: t}\n\
    stringData: {.dockerconfigjson: '{\"auths\":{\"quay.io\":{\"auth\":\"dTpw\"}}}'}\n---\n\
    apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: pool, namespace: t}\n\
    spec: {pullSecretRef: {name: ps}}\n";

/// Sends a GET and reads only the status line: the download stays in flight while nothing is read
/// (the image is far larger than what the sockets buffer).
fn start_download(addr: &str, path: &str) -> (TcpStream, u16) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    let status = std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap();
    (s, status)
}

/// A server with `--max-downloads MAX` and an InfraEnv over a 64 MiB image (far more than the sockets
/// buffer), with its image created; the directory holds the image.
fn server_with_a_large_image(max: &str) -> (Server, serde_json::Value, tempfile::TempDir) {
    server_with_a_large_image_and(max, &[])
}

fn server_with_a_large_image_and(max: &str, extra: &[&str]) -> (Server, serde_json::Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let iso = dir.path().join("base.iso");
    std::fs::write(&iso, bootstream::formats::sample::large_sample_iso_bytes(64 << 20).unwrap()).unwrap();
    let image = format!("4.20:x86_64:{}", iso.display());
    let server = Server::start(&[&["--max-downloads", max, "--os-image", &image], extra].concat());
    server.apply_ok(INFRAENV);
    let ie = server.wait_image_created("t", "pool", "True");
    (server, ie, dir)
}

#[test]
fn past_the_download_limit_clients_are_told_to_retry_and_places_come_back() {
    let (server, ie, _dir) = server_with_a_large_image("2");
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let rootfs_path = server.path_of(ie["status"]["bootArtifacts"]["rootfs"].as_str().unwrap());

    let (first, status) = start_download(&server.addr, &iso_path);
    assert_eq!(status, 200);
    let (_second, status) = start_download(&server.addr, &rootfs_path);
    assert_eq!(status, 200, "kernel and rootfs downloads count too");

    let refused = server.get(&iso_path);
    assert_eq!(refused.status, 503);
    assert_eq!(refused.headers.get("retry-after").map(String::as_str), Some("10"));
    assert!(refused.text().contains("2 image downloads are in progress"), "{}", refused.text());
    // What does not stream an image is not limited.
    assert_eq!(server.request("HEAD", &iso_path, &[]).status, 200);
    assert_eq!(server.get("/ready").status, 200);
    assert_eq!(server.get("/apis/agent-install.openshift.io/v1beta1/namespaces/t/infraenvs/pool").status, 200);

    // The first client goes away mid-download: its place comes back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (_third, status) = loop {
        let (s, status) = start_download(&server.addr, &iso_path);
        if status == 200 {
            break (s, status);
        }
        assert!(Instant::now() < deadline, "the place of a client that left never came back");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 200);
}

/// A download served by hyper (the path for requests with `Expect`, a chunked body or an upgrade)
/// holds its place until its body is written, not just until its head is.
#[test]
fn a_download_through_hyper_keeps_its_place_until_its_body_is_written() {
    let (server, ie, _dir) = server_with_a_large_image("1");
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());

    // `Expect` sends the request to hyper; nothing is read past the status line.
    let mut s = TcpStream::connect(&server.addr).unwrap();
    write!(s, "GET {iso_path} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.get(&iso_path).status, 503, "the hyper download gave its place back before its body was written");

    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.get(&iso_path).status != 200 {
        assert!(Instant::now() < deadline, "the place never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Readers that stop reading give their places back at the write timeout, on either server path:
/// three stalled clients (one on the fast path, two through hyper with a chunked GET, one of them
/// on the rootfs, which needs no token) must not keep everyone else at 503.
#[test]
fn stalled_readers_give_their_places_back_at_the_write_timeout_on_both_paths() {
    let (server, ie, _dir) = server_with_a_large_image_and("3", &["--write-timeout", "2"]);
    let iso_path = server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap());
    let rootfs_path = server.path_of(ie["status"]["bootArtifacts"]["rootfs"].as_str().unwrap());

    let stall = |path: &str, chunked: bool| {
        let mut s = TcpStream::connect(&server.addr).unwrap();
        let framing = if chunked { "Transfer-Encoding: chunked\r\n\r\n0\r\n" } else { "" };
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{framing}\r\n").unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{path}");
        s
    };
    let _fast = stall(&iso_path, false);
    let _hyper = stall(&iso_path, true);
    let _anonymous = stall(&rootfs_path, true);
    let stalled_at = Instant::now();
    assert_eq!(server.get(&iso_path).status, 503, "three downloads are in flight");

    // The stalled clients keep their sockets open and read nothing; their places come back once
    // their writes have made no progress for 2 s.
    let deadline = stalled_at + Duration::from_secs(10);
    loop {
        let held: Vec<_> = (0..3).map(|_| start_download(&server.addr, &iso_path)).collect();
        let free = held.iter().filter(|(_, status)| *status == 200).count();
        if free == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "after {:?} only {free} of 3 places came back", stalled_at.elapsed());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(stalled_at.elapsed() >= Duration::from_millis(1500), "places came back before the write timeout");
}
