//! Hosts through their whole lifecycle, run as users run it: late binding, bare metal, faults, Kubernetes.

mod bare_metal;
mod faults;
mod kubernetes;
mod kubernetes_real_hub;
mod late_binding;
mod lease;

use std::time::{Duration, Instant};

/// `f` on tokio's blocking pool: the tests' HTTP client and process waits block.
fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> tokio::task::JoinHandle<T> {
    tokio::task::spawn_blocking(f)
}

/// What `check` returns once it returns something, within 60 s (the test fails naming `what`).
async fn wait_for(what: &str, mut check: impl AsyncFnMut() -> Option<serde_json::Value>) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
