//! Test-only Kubernetes clusters, each the product's one Kubernetes API ([`crate::api::kube::KubeApi`])
//! over an in-memory store, served by the product's HTTP server on a loopback port: [`hub`] holds a
//! hub cluster's objects for the Kubernetes-mode tests, [`spoke`] plays an installed cluster for
//! reclaim and node cleanup. What each adds is a test option (request logs, RBAC, injected failures,
//! the spoke's kinds and pod eviction); the API semantics are the product's. Built only for tests (the
//! `testkit` feature), never into the release binary.

pub mod hub;
pub mod realhub;
pub mod spoke;

/// A kubeconfig whose one cluster (`spoke`, at https://api.spoke.example:6443) has the YAML lines
/// `cluster` besides its server and whose one user (`admin`) has the lines `user`: what the tests of
/// kubeconfigs from tenants vary.
pub fn tenant_kubeconfig(cluster: &str, user: &str) -> String {
    let indent = |s: &str| s.lines().map(|l| format!("    {l}\n")).collect::<String>();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: spoke\n  cluster:\n    server: https://api.spoke.example:6443\n{}\
         users:\n- name: admin\n  user:\n{}contexts:\n- name: admin\n  context:\n    cluster: spoke\n    user: admin\n\
         current-context: admin\n",
        indent(cluster),
        indent(user)
    )
}

use std::sync::Arc;

use crate::keylocks::Locked as _;

/// The product's HTTP server with `handler` on a free loopback port (needs a tokio runtime): the
/// server's URL, and its task.
async fn serve_on_loopback<H: crate::http::Handler>(handler: Arc<H>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    // kube-apiserver's own limit of a request body.
    let config = crate::http::server::ServerConfig { max_body_bytes: 3 << 20, ..Default::default() };
    let task = tokio::spawn(crate::http::server::serve(listener, handler, config, std::future::pending::<()>()));
    (url, task)
}

/// A kubeconfig for the cluster `cluster` at `url`, authenticating with `token`.
fn kubeconfig(cluster: &str, url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {cluster}\n  cluster:\n    server: {url}\n\
         contexts:\n- name: admin\n  context:\n    cluster: {cluster}\n    user: admin\n\
         current-context: admin\nusers:\n- name: admin\n  user:\n    token: {token}\n"
    )
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
}
