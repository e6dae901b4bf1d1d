//! An in-memory Kubernetes API server on a loopback port, for tests of the code that talks to a spoke
//! cluster through kube-rs (reclaim, node removal). It speaks the parts of the API that code uses —
//! GET, server-side apply and merge PATCH, DELETE with owner-reference garbage collection, 404 as a
//! `Status` — over real HTTP, so the kubeconfig parsing, kube-rs's requests and our error handling are
//! exercised as they are against a real cluster. Every request is logged, and failures can be injected.
//!
//! Objects are keyed by their API path (`/api/v1/nodes/n1`, `/apis/apps/v1/namespaces/x/daemonsets/d`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{Value, json};

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    requests: Vec<String>,
    /// (method, path prefix, status): requests that match get that error.
    failures: Vec<(String, String, u16)>,
    next_version: u64,
}

pub struct FakeApiServer {
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApiServer {
    /// Listens on a free loopback port (needs a tokio runtime).
    pub async fn start() -> FakeApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeApiServer { url, state, task }
    }

    /// A kubeconfig for this server, as a ClusterDeployment's admin kubeconfig secret holds one.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: spoke\n  cluster:\n    server: {}\n\
             contexts:\n- name: admin\n  context:\n    cluster: spoke\n    user: admin\n\
             current-context: admin\nusers:\n- name: admin\n  user:\n    token: fake-admin-token\n",
            self.url
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores an object at `path`, giving it a uid and resourceVersion when it has none.
    pub fn put(&self, path: &str, mut obj: Value) {
        let mut st = self.lock();
        complete_metadata(&mut st, &mut obj, None);
        st.objects.insert(path.to_string(), obj);
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.lock().objects.get(path).cloned()
    }

    /// Paths of the stored objects.
    pub fn paths(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// Every request so far, as `METHOD /path`.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    /// Requests whose method is `method` and whose path starts with `path_prefix` get `status`.
    pub fn fail(&self, method: &str, path_prefix: &str, status: u16) {
        self.lock().failures.push((method.to_string(), path_prefix.to_string(), status));
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    respond(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

fn respond(code: u16, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("valid response")
}

fn complete_metadata(st: &mut State, obj: &mut Value, live: Option<&Value>) {
    st.next_version += 1;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let uid = live
        .and_then(|l| l["metadata"]["uid"].as_str())
        .or(obj["metadata"]["uid"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    obj["metadata"]["uid"] = Value::String(uid);
    obj["metadata"]["resourceVersion"] = Value::String(st.next_version.to_string());
}

fn not_found(path: &str) -> Response<Full<Bytes>> {
    let name = path.rsplit('/').next().unwrap_or_default();
    status(404, "NotFound", &format!("\"{name}\" not found"))
}

/// `GET /api/v1/pods`, with the `spec.nodeName=` field selector `kubectl drain` uses.
fn pod_list(st: &State, query: &str) -> Value {
    let selector = query.split('&').find_map(|kv| kv.strip_prefix("fieldSelector="));
    let selector = selector.map(|v| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned());
    let node = selector.as_deref().and_then(|s| s.strip_prefix("spec.nodeName="));
    let items: Vec<Value> = st
        .objects
        .iter()
        .filter(|(p, _)| {
            p.starts_with("/api/v1/namespaces/") && p.split('/').nth(5) == Some("pods") && p.split('/').count() == 7
        })
        .filter(|(_, o)| node.is_none_or(|n| o["spec"]["nodeName"] == n))
        .map(|(_, o)| o.clone())
        .collect();
    json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
}

async fn handle(state: &Mutex<State>, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.requests.push(format!("{method} {path}"));
    if let Some((_, _, code)) = st.failures.iter().find(|(m, p, _)| *m == method && path.starts_with(p.as_str())) {
        return status(*code, "InternalError", "injected failure");
    }
    match method.as_str() {
        "GET" => match st.objects.get(&path) {
            Some(obj) => respond(200, obj),
            None if path == "/api/v1/pods" => respond(200, &pod_list(&st, &query)),
            None => not_found(&path),
        },
        // The eviction subresource: the pod goes (no disruption budgets here; inject a 429 to play one).
        "POST" if path.ends_with("/eviction") => {
            let pod = path.trim_end_matches("/eviction").to_string();
            match st.objects.remove(&pod) {
                Some(_) => {
                    respond(201, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}))
                }
                None => not_found(&pod),
            }
        }
        "PATCH" => {
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "the patch is not JSON");
            };
            let live = st.objects.get(&path).cloned();
            let mut obj = match (&live, content_type.starts_with("application/apply-patch")) {
                (Some(l), _) => l.clone(),
                (None, true) => json!({}),
                (None, false) => return not_found(&path),
            };
            // A merge patch (RFC 7386): what both merge PATCH and, for the fields a single manager
            // owns, server-side apply amount to in these tests.
            crate::store::json::merge_patch(&mut obj, &patch);
            complete_metadata(&mut st, &mut obj, live.as_ref());
            st.objects.insert(path, obj.clone());
            respond(if live.is_some() { 200 } else { 201 }, &obj)
        }
        "DELETE" => match st.objects.remove(&path) {
            Some(obj) => {
                // Garbage collection: dependents whose owner this was go with it.
                if let Some(uid) = obj["metadata"]["uid"].as_str() {
                    st.objects.retain(|_, o| {
                        !o["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
                    });
                }
                respond(200, &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}))
            }
            None => not_found(&path),
        },
        _ => status(405, "MethodNotAllowed", &format!("{method} is not supported here")),
    }
}
