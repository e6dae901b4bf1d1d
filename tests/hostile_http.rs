//! Hostile HTTP clients against the real server (issue 30): label cardinality in `/metrics`, head
//! limits, bodies refused before they are read, and every timeout on both server paths (our own
//! HTTP/1.1 fast path, and hyper, which takes chunked bodies, `Expect` and anything the fast parser
//! does not). Each test sends what an attacker would and checks what the server holds afterwards.

mod common;

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
