//! Hostile HTTP clients against the real server (issue 30): label cardinality in `/metrics`, head
//! limits, bodies refused before they are read, and every timeout on both server paths (our own
//! HTTP/1.1 fast path, and hyper, which takes chunked bodies, `Expect` and anything the fast parser
//! does not). Each test sends what an attacker would and checks what the server holds afterwards.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// A method of `len` letters that no other request of the test uses.
fn junk_method(i: usize, len: usize) -> String {
    let mut m = format!("JUNK{i}X");
    while m.len() < len {
        m.push((b'A' + (m.len() % 26) as u8) as char);
    }
    m
}

#[test]
fn ten_thousand_junk_methods_and_paths_make_no_new_series() {
    let server = Server::start(&[]);
    let pid = server.pid();
    // Warm up every route family once, so that the series those create exist before the baseline.
    for path in ["/metrics", "/health", "/nothing", "/apis/x", "/images/x"] {
        server.get(path);
    }
    let (rss_before, _) = rss_anon_and_fds(pid);
    let metrics_before = server.get("/metrics").body.len();

    // 10,000 requests, each with a method and a path no other request has; methods of 8,000 bytes
    // (what grew /metrics to 256 MB before), half of them through hyper (a chunked body takes a
    // connection there), on four keep-alive connections at once.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut conn = Conn::open(&addr);
                let mut answered = 0;
                for k in 0..2500 {
                    let i = t * 2500 + k;
                    let method = junk_method(i, if i % 2 == 0 { 8000 } else { 16 });
                    let path = format!("/junk/{i}/{}", "p".repeat(i % 200));
                    let raw = if k % 2 == 0 {
                        format!("{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n")
                    } else {
                        format!("{method} {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
                    };
                    match conn.exchange(raw.as_bytes()) {
                        Ok(r) => {
                            assert!((400..500).contains(&r.status), "{method:.20}… {path}: {}", r.status);
                            answered += 1;
                        }
                        // The server may end a connection after an error answer: open another.
                        Err(_) => conn = Conn::open(&addr),
                    }
                }
                answered
            })
        })
        .collect();
    let answered: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(answered >= 9_900, "only {answered} of 10,000 requests were answered");

    let metrics = server.get("/metrics");
    let text = metrics.text();
    assert!(metrics.body.len() < 200 * 1024, "/metrics grew from {metrics_before} to {} bytes", metrics.body.len());
    assert!(!text.contains("JUNK"), "a request's method became a label");
    assert!(!text.contains("/junk/"), "a request's path became a label");
    assert!(
        text.lines().any(|l| l.starts_with("bootstream_http_request_duration_seconds_count{") && l.contains("method=\"other\"")),
        "junk methods are counted as `other`"
    );
    let (rss_after, _) = rss_anon_and_fds(pid);
    let grown = rss_after.saturating_sub(rss_before);
    assert!(grown < 20 * 1024, "RssAnon grew by {grown} KiB ({rss_before} → {rss_after})");
}

/// Writes `head`, then reads the answer until the server closes the connection; how long that took.
fn answer_to_head_only(addr: &str, head: &str) -> (String, Duration) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer and close before all of a head it refuses is written.
    let _ = s.write_all(head.as_bytes());
    let started = Instant::now();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), started.elapsed())
}

#[test]
fn requests_without_their_token_are_refused_before_any_body_byte() {
    let server = Server::start(&[]);
    let agent_path = "/api/assisted-install/v2/infra-envs/2b4f5fd6-1111-4c5e-9a4e-000000000001/hosts";
    let logs_path = "/api/assisted-install/v2/clusters/2b4f5fd6-1111-4c5e-9a4e-000000000002/logs?logs_type=host\
                     &infra_env_id=2b4f5fd6-1111-4c5e-9a4e-000000000001&host_id=2b4f5fd6-1111-4c5e-9a4e-000000000003";
    let right_token = format!("Authorization: Bearer {TEST_API_TOKEN}\r\n");
    // The plain listener refuses the resource API from the head (404, the API has its own HTTPS
    // listener), whatever the token: the token is not even compared.
    for (what, path, auth, refusal) in [
        ("resource API", "/apis/x", "", "HTTP/1.1 404"),
        ("resource API, wrong token", "/api/v1/namespaces/n/secrets", "Authorization: Bearer nope\r\n", "HTTP/1.1 404"),
        ("resource API, right token", "/api/v1/namespaces/n/secrets", right_token.as_str(), "HTTP/1.1 404"),
        ("agent API", agent_path, "", "HTTP/1.1 401"),
        ("agent API, wrong token", agent_path, "X-Secret-Key: nope\r\n", "HTTP/1.1 401"),
        ("log upload", logs_path, "", "HTTP/1.1 401"),
        ("log upload, wrong token", logs_path, "X-Secret-Key: nope\r\n", "HTTP/1.1 401"),
    ] {
        // A body is announced (on the fast path, then chunked through hyper, then with Expect) and
        // never sent: the refusal must come at once, not after the body (or its timeout).
        for framing in [
            "Content-Length: 200000\r\n",
            "Transfer-Encoding: chunked\r\n",
            "Content-Length: 7900000\r\nExpect: 100-continue\r\n",
        ] {
            let head =
                format!("POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n{framing}\r\n");
            let (answer, took) = answer_to_head_only(&server.addr, &head);
            assert!(answer.starts_with(refusal), "{what} ({framing:?}): {answer:.300}");
            assert!(took < Duration::from_secs(2), "{what} ({framing:?}): answered after {took:?}");
            assert!(!answer.contains("100 Continue"), "{what}: the server asked for the body of a refused request");
        }
    }
}

#[test]
fn hundreds_of_trickling_bodies_are_cut_off_at_the_body_timeout() {
    // The default body timeout, 10 s: every body must be whole by then, however it trickles in.
    let server = Server::start(&[]);
    let pid = server.pid();
    let (_, fds_before) = rss_anon_and_fds(pid);
    let started = Instant::now();
    let clients: Vec<_> = (0..200)
        .map(|i| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                // A route whose body is read (up to 16 KiB) with no token: the resource API is not on
                // this (plain) listener.
                let framing = if i % 2 == 0 { "Transfer-Encoding: chunked" } else { "Content-Length: 10000" };
                let head = format!(
                    "PUT /nothing/s{i} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
                );
                s.write_all(head.as_bytes()).unwrap();
                let piece: &[u8] = if i % 2 == 0 { b"1\r\n{\r\n" } else { b"{" };
                let mut answer = Vec::new();
                // A piece every 500 ms until the server answers or closes (or 30 s pass).
                while started.elapsed() < Duration::from_secs(30) {
                    if s.write_all(piece).is_err() {
                        break;
                    }
                    let mut buf = [0u8; 4096];
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => answer.extend_from_slice(&buf[..n]),
                        Err(e)
                            if e.kind() == std::io::ErrorKind::WouldBlock
                                || e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(_) => break,
                    }
                    std::thread::sleep(Duration::from_millis(450));
                }
                (String::from_utf8_lossy(&answer).into_owned(), started.elapsed())
            })
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (answer, at) = c.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "client {i}: {answer:.200}");
        assert!(at < Duration::from_secs(14), "client {i} was cut off only after {at:?}");
    }
    // Everything they held is released.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, fds) = rss_anon_and_fds(pid);
        if fds <= fds_before + 5 {
            break;
        }
        assert!(Instant::now() < deadline, "{fds} descriptors open, {fds_before} before");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn heads_past_64_headers_or_16_kib_get_431_whichever_path_reads_them() {
    let server = Server::start(&[]);
    let many: String = (0..70).map(|i| format!("X-H{i}: v\r\n")).collect();
    let long = format!("X-Long: {}\r\n", "v".repeat(380_000));
    for (what, extra) in [("70 headers", &many), ("a 380 KB head", &long)] {
        let (answer, _) = answer_to_head_only(&server.addr, &format!("GET /health HTTP/1.1\r\nHost: x\r\n{extra}\r\n"));
        assert!(answer.starts_with("HTTP/1.1 431"), "{what}, first request: {answer:.200}");
        // After a chunked request the connection is hyper's: the same limits hold there.
        let head = format!(
            "POST /nothing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n{extra}\r\n"
        );
        let (answer, _) = answer_to_head_only(&server.addr, &head);
        assert!(answer.starts_with("HTTP/1.1 404"), "{what}: {answer:.200}");
        assert!(answer.contains("HTTP/1.1 431"), "{what}, through hyper: {answer:.400}");
    }
}
