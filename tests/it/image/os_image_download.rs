//! OS images given as URLs: downloaded from a real local HTTP server, verified against their SHA-256,
//! renamed into the data directory; a bad one is reported and not served while the others are.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::*;

struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(dir: &std::path::Path) -> HttpServer {
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "0", "--bind", "127.0.0.1"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.split(" port ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap();
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn url_images_are_downloaded_verified_and_kept() {
    let web = tempfile::tempdir().unwrap();
    let iso = fixture_iso("embed-areas-2023-07.x86_64", web.path());
    let good_sha = sha256_hex(&std::fs::read(&iso).unwrap());
    let wrong_sha = "0".repeat(64);
    let http = HttpServer::start(web.path());
    let url = format!("http://127.0.0.1:{}/{}", http.port, iso.file_name().unwrap().to_str().unwrap());
    let missing = format!("http://127.0.0.1:{}/missing.iso", http.port);
    let data = tempfile::tempdir().unwrap();
    let data_path = data.path().to_path_buf();
    let args = [
        "--os-image".to_string(),
        format!("4.19:x86_64:{url}:{good_sha}"),
        "--os-image".to_string(),
        format!("4.18:x86_64:{url}:{wrong_sha}"),
        "--os-image".to_string(),
        format!("4.17:x86_64:{missing}:{}", "1".repeat(64)),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Server::start_in(data, "127.0.0.1:0", &args);

    let metrics = server.get("/metrics").text();
    assert!(metrics.contains("bootstream_os_images{version=\"4.19\",arch=\"x86_64\",state=\"ready\"} 1"), "{metrics}");
    assert!(metrics.contains("bootstream_os_images{version=\"4.18\",arch=\"x86_64\",state=\"failed\"} 1"), "{metrics}");
    assert!(metrics.contains("bootstream_os_images{version=\"4.17\",arch=\"x86_64\",state=\"failed\"} 1"), "{metrics}");

    // The verified image is in the data directory under its digest; nothing partial or wrong is left.
    let names: Vec<String> = std::fs::read_dir(data_path.join("os-images"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![format!("{good_sha}.iso")]);

    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml("n", "ie", "  osImageVersion: \"4.19\"\n"));
    let ie = server.wait_image_created("n", "ie", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    assert_eq!(server.get(&format!("/byid/{id}/4.19/x86_64/full.iso")).status, 200);
    let r = server.get(&format!("/byid/{id}/4.18/x86_64/full.iso"));
    assert_eq!(r.status, 404, "an image that failed verification is not served");
    assert!(r.text().contains("available: 4.19 (x86_64)"), "{}", r.text());

    // An InfraEnv asking for the failed version says so in its condition.
    server.apply_ok(&infraenv_yaml("n", "old", "  osImageVersion: \"4.18\"\n"));
    let old = server.wait_image_created("n", "old", "False");
    let msg = condition(&old, "ImageCreated").unwrap()["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("Failed to create image: The requested OS image for version (4.18)"), "{msg}");

    // A restart uses the downloaded copy (the web server is gone).
    drop(http);
    // Keep the data directory past the first server (dropping a Server removes its TempDir).
    let kept = std::mem::replace(&mut server.data_dir, tempfile::tempdir().unwrap());
    let data_dir = kept.path().to_path_buf();
    drop(server);
    let again = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--unsigned-image-urls", "--data-dir", data_dir.to_str().unwrap()])
        .args(&args[..2])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut again = KillOnDrop(again);
    let mut line = String::new();
    BufReader::new(again.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.split("http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = try_request(&addr, "GET", &format!("/byid/{id}/4.19/x86_64/full.iso"), &[], b"");
        if let Ok(r) = r
            && r.status == 200
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "restarted server never served the cached image");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
