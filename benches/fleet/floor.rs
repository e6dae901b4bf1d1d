//! The floor the server's CPU per agent-API call is read against, measured in the same run: nginx
//! answering a small JSON body over keep-alive to the client the simulated agents use, at the same
//! concurrency. Whatever a server does per call on this machine, it cannot do with less than
//! accepting a request and writing an answer, which is what nginx does here.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::procs::cpu_seconds;

/// About the size of an instructions answer with nothing to do.
const BODY: &str = r#"{"instructions":[{"step_type":"inventory","step_id":"inventory-0a1b2c3d","command":"","args":[]},{"step_type":"ntp-synchronizer","step_id":"ntp-synchronizer-4e5f","args":[]}],"next_instruction_seconds":60,"post_step_action":"continue"}"#;

pub struct Floor {
    pub clients: usize,
    pub requests: u64,
    pub seconds: f64,
    /// CPU seconds of nginx's workers and of this process (the clients) over the requests.
    pub nginx_cpu: f64,
    pub client_cpu: f64,
}

impl Floor {
    pub fn nginx_us_per_request(&self) -> f64 {
        self.nginx_cpu / self.requests.max(1) as f64 * 1e6
    }
    pub fn client_us_per_request(&self) -> f64 {
        self.client_cpu / self.requests.max(1) as f64 * 1e6
    }
}

/// nginx's master, stopped with SIGTERM (its workers end with it; SIGKILL would leave them).
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// The pids whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(parent)
        })
        .collect()
}

/// Runs `clients` clients (each a task asking again as soon as it has its answer) against nginx for
/// `seconds`.
pub async fn measure(clients: usize, seconds: f64) -> anyhow::Result<Floor> {
    let work = tempfile::tempdir()?;
    let w = work.path().display();
    let port = crate::procs::free_port()?;
    let conf = format!(
        "worker_processes auto;\ndaemon off;\npid {w}/nginx.pid;\nerror_log {w}/error.log;\n\
         worker_rlimit_nofile 20000;\nevents {{ worker_connections 8192; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 75s;\n\
           client_body_temp_path {w}/tmp-body;\n  proxy_temp_path {w}/tmp-proxy;\n  fastcgi_temp_path {w}/tmp-fcgi;\n\
           uwsgi_temp_path {w}/tmp-uwsgi;\n  scgi_temp_path {w}/tmp-scgi;\n\
           server {{ listen 127.0.0.1:{port}; location / {{ default_type application/json; return 200 '{BODY}'; }} }}\n}}\n"
    );
    let conf_path = work.path().join("nginx.conf");
    std::fs::write(&conf_path, conf)?;
    let nginx = Nginx(
        Command::new(std::env::var("NGINX").unwrap_or_else(|_| "/usr/sbin/nginx".into()))
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(work.path())
            .stderr(Stdio::inherit())
            .spawn()?,
    );
    let url = format!("http://127.0.0.1:{port}/v2/instructions");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "nginx did not start; see {w}/error.log");
        std::thread::sleep(Duration::from_millis(5));
    }
    let client = bootstream::cli::simulate::client();
    // Connections are opened once (keep-alive), as the agents' are; only then is CPU counted.
    let warm: Vec<_> = (0..clients).map(|_| client.get(&url).send()).collect();
    for r in futures_util::future::join_all(warm).await {
        r?.bytes().await?;
    }
    let workers = children(nginx.0.id());
    let nginx_cpu = || workers.iter().map(|p| cpu_seconds(&p.to_string())).sum::<f64>();
    let (nginx_before, client_before) = (nginx_cpu(), cpu_seconds("self"));
    let requests = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, url, requests) = (client.clone(), url.clone(), requests.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    let Ok(r) = client.get(&url).send().await else { continue };
                    if r.bytes().await.is_ok() {
                        requests.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let floor = Floor {
        clients,
        requests: requests.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
        nginx_cpu: nginx_cpu() - nginx_before,
        client_cpu: cpu_seconds("self") - client_before,
    };
    drop(nginx);
    Ok(floor)
}
