//! An installed ("spoke") cluster for the tests of the code that talks to one through kube-rs
//! (reclaim, node removal, draining): the product's one Kubernetes API
//! ([`crate::api::kube::KubeApi`]) over an in-memory store, served by the product's HTTP server on a
//! loopback port, as [`super::hub`] serves a hub. GET, server-side apply with managedFields, merge
//! PATCH, DELETE with owner-reference garbage collection, field-selected lists, 404 as a `Status`:
//! all of it is the product's API, so kubeconfig parsing, kube-rs's requests and our error handling
//! meet what users' clusters answer (bar what `KubeApi` documents it does not do).
//!
//! What this harness adds, as test options:
//! - the kinds a spoke holds besides bootstream's and the core kinds ([`spoke_collections`]: Nodes,
//!   Pods, DaemonSets, ServiceAccounts, ConfigMaps, RBAC and OpenShift roles, Machines and
//!   MachineSets), served as generic kinds (validated only structurally);
//! - the pods' `eviction` subresource, answered as an API server with no PodDisruptionBudgets answers
//!   it: the pod is deleted (inject a 429 with [`SpokeCluster::fail`] to play a budget that refuses);
//! - an [`Interceptor`] that logs every request ([`SpokeCluster::requests`]) and answers those a test
//!   chose with an error `Status` ([`SpokeCluster::fail`]);
//! - [`SpokeCluster::put`], [`SpokeCluster::get`] and [`SpokeCluster::paths`], which write and read
//!   the backing store by API path (`/api/v1/nodes/n1`, `/apis/apps/v1/namespaces/x/daemonsets/d`),
//!   for a test to set the cluster up and look at it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{Value, json};

use super::lock;
use crate::api::kube::served::{Served, generic};
use crate::api::kube::{Collection, Interceptor, KubeApi, NoHooks, Verb, status_error};
use crate::http::Body;
use crate::store::ApiPath;
use crate::store::sqlite::SqliteStore;

/// The kinds a spoke serves besides bootstream's own and the core kinds of [`crate::api::kube`]
/// (Namespaces and Secrets among them): what the spoke clean-up code reads and writes.
pub fn spoke_collections() -> Vec<Collection> {
    // The field labels the API server offers for Pods (`kubectl drain` lists a node's pods by `spec.nodeName`).
    const POD_FIELDS: &[&str] = &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ];
    let collection = |served: Served, has_generation: bool, field_labels: &'static [&'static str]| Collection {
        served,
        kind: None,
        has_generation,
        field_labels,
        columns: Vec::new(),
    };
    let rbac = "rbac.authorization.k8s.io";
    let openshift_rbac = "authorization.openshift.io";
    let machines = "machine.openshift.io";
    vec![
        collection(generic("", "v1", "Node", "nodes", false, &["status"]), false, &[]),
        collection(generic("", "v1", "Pod", "pods", true, &["status"]), false, POD_FIELDS),
        collection(generic("", "v1", "ServiceAccount", "serviceaccounts", true, &[]), false, &[]),
        collection(generic("", "v1", "ConfigMap", "configmaps", true, &[]), false, &[]),
        collection(generic("apps", "v1", "DaemonSet", "daemonsets", true, &["status"]), true, &[]),
        collection(generic(rbac, "v1", "ClusterRole", "clusterroles", false, &[]), false, &[]),
        collection(generic(rbac, "v1", "ClusterRoleBinding", "clusterrolebindings", false, &[]), false, &[]),
        collection(generic(rbac, "v1", "Role", "roles", true, &[]), false, &[]),
        collection(generic(rbac, "v1", "RoleBinding", "rolebindings", true, &[]), false, &[]),
        collection(generic(openshift_rbac, "v1", "Role", "roles", true, &[]), false, &[]),
        collection(generic(openshift_rbac, "v1", "RoleBinding", "rolebindings", true, &[]), false, &[]),
        collection(generic(machines, "v1beta1", "Machine", "machines", true, &["status"]), true, &[]),
        collection(generic(machines, "v1beta1", "MachineSet", "machinesets", true, &["status", "scale"]), true, &[]),
    ]
}

/// Requests logged, and failures injected.
#[derive(Default)]
struct Log {
    /// `METHOD /path`, without the query.
    requests: Mutex<Vec<String>>,
    /// (method, path prefix, status): requests that match get that error.
    failures: Mutex<Vec<(String, String, u16)>>,
}

impl Log {
    /// Logs a request; an error response if a test asked for one.
    fn record(&self, method: &Method, path: &str) -> Option<Response<Body>> {
        lock(&self.requests).push(format!("{method} {path}"));
        let failures = lock(&self.failures);
        let (_, _, code) = failures.iter().find(|(m, p, _)| m == method.as_str() && path.starts_with(p.as_str()))?;
        let code = StatusCode::from_u16(*code).expect("an HTTP status code");
        let reason = match code {
            StatusCode::TOO_MANY_REQUESTS => "TooManyRequests",
            StatusCode::NOT_FOUND => "NotFound",
            StatusCode::CONFLICT => "Conflict",
            StatusCode::FORBIDDEN => "Forbidden",
            _ => "InternalError",
        };
        Some(status_error(code, reason, "injected failure"))
    }
}

impl Interceptor for Log {
    fn intercept(&self, head: &http::request::Parts, _verb: Verb, _c: Option<&Collection>) -> Option<Response<Body>> {
        self.record(&head.method, head.uri.path())
    }
}

/// `(namespace, pod)` of a pod's eviction subresource path.
fn eviction(path: &str) -> Option<(&str, &str)> {
    match path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice() {
        ["api", "v1", "namespaces", ns, "pods", name, "eviction"] => Some((ns, name)),
        _ => None,
    }
}

/// The API as an HTTP handler, with the eviction subresource.
struct SpokeHandler(Arc<KubeApi>, Arc<Log>);

impl crate::http::Handler for SpokeHandler {
    async fn handle(self: Arc<Self>, req: http::Request<Bytes>) -> Response<Body> {
        if req.method() == Method::POST
            && let Some((ns, name)) = eviction(req.uri().path())
        {
            if let Some(r) = self.1.record(req.method(), req.uri().path()) {
                return r;
            }
            // No disruption budgets here: the eviction deletes the pod, as the API server's does then.
            return match self.0.store().delete_raw("pods", ns, name).await {
                Ok(_) => crate::http::json(
                    StatusCode::CREATED,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ),
                Err(e) if e.is_not_found() => status_error(StatusCode::NOT_FOUND, "NotFound", &e.to_string()),
                Err(e) => status_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e.to_string()),
            };
        }
        self.0.handle(&req).await
    }
    fn admit(&self, _head: &http::request::Parts) -> crate::http::Admission {
        // kube-apiserver's own limit of a request body.
        crate::http::Admission::Body { max_bytes: 3 << 20 }
    }
}

/// An installed cluster's API server (see the module docs).
pub struct SpokeCluster {
    pub url: String,
    api: Arc<KubeApi>,
    log: Arc<Log>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SpokeCluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs a store call to completion from synchronous test code, inside a runtime or not: the store's
/// writer is a thread of its own, so nothing here waits for the runtime.
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    // Outside tokio's cooperative budget: a task that ran through its budget would otherwise be told
    // to yield, forever, since this loop never returns to the runtime.
    let mut fut = std::pin::pin!(tokio::task::unconstrained(fut));
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

impl SpokeCluster {
    /// An empty cluster on a free loopback port (needs a tokio runtime).
    pub async fn start() -> SpokeCluster {
        let store = SqliteStore::open_in_memory().expect("an in-memory store");
        let api = KubeApi::with_collections(store, Arc::new(NoHooks), spoke_collections());
        let log = Arc::new(Log::default());
        api.set_interceptor(log.clone());
        let (url, task) = super::serve_on_loopback(Arc::new(SpokeHandler(api.clone(), log.clone()))).await;
        SpokeCluster { url, api, log, task }
    }

    /// A kubeconfig for this cluster, as a ClusterDeployment's admin kubeconfig secret holds one.
    pub fn kubeconfig(&self) -> String {
        super::kubeconfig("spoke", &self.url, "spoke-admin-token")
    }

    /// The collection, namespace ("" for cluster-scoped kinds) and name an object's API path names.
    ///
    /// # Panics
    /// If the path is not one of an object of a served kind.
    fn locate(&self, path: &str) -> (&Collection, String, String) {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let p = ApiPath::parse(&segs).filter(|p| !p.status).unwrap_or_else(|| panic!("{path} is not an object's path"));
        let c = self
            .api
            .collections()
            .iter()
            .find(|c| c.prefix() == p.prefix && c.plural() == p.plural)
            .unwrap_or_else(|| panic!("{path}: the spoke does not serve {} (see spoke_collections)", p.plural));
        let ns = p.namespace.unwrap_or_default();
        assert_eq!(c.namespaced(), !ns.is_empty(), "{path}: namespaced as its kind is");
        let name = p.name.unwrap_or_else(|| panic!("{path} names no object"));
        (c, ns.to_string(), name.to_string())
    }

    /// Stores `obj` at `path` as it is (created, or replacing what is there; its status too), as
    /// another client of the cluster would have written it. The store gives it a uid (unless it has
    /// one), creationTimestamp and resourceVersion.
    pub fn put(&self, path: &str, mut obj: Value) {
        let (c, ns, name) = self.locate(path);
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        obj["metadata"]["name"] = Value::String(name.clone());
        if c.namespaced() {
            obj["metadata"]["namespace"] = Value::String(ns.clone());
        }
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let (resource, store) = (c.resource(), self.api.store());
        let status = obj.get("status").cloned();
        block_on(async {
            let uid = obj["metadata"]["uid"].as_str().map(str::to_string);
            match store.get_raw(&resource, &ns, &name).expect("reading the spoke's store") {
                None => store.create_raw_with_uid(&resource, &ns, obj, c.has_generation, uid).await,
                Some(_) => store.replace_raw(&resource, &ns, obj).await,
            }
            .unwrap_or_else(|e| panic!("putting {path}: {e}"));
            if status.is_some() {
                store.replace_status_raw(&resource, &ns, &name, status, None).await.expect("writing the status");
            }
        });
    }

    /// The object at `path`, if there is one.
    pub fn get(&self, path: &str) -> Option<Value> {
        let (c, ns, name) = self.locate(path);
        self.api.store().get_raw(&c.resource(), &ns, &name).expect("reading the spoke's store")
    }

    /// The API paths of every stored object, sorted.
    pub fn paths(&self) -> Vec<String> {
        let mut paths = Vec::new();
        for c in self.api.collections() {
            for (ns, name, _, _) in self.api.store().list_raw_keyed(&c.resource(), None) {
                paths.push(match ns.as_str() {
                    "" => format!("{}/{}/{name}", c.prefix(), c.plural()),
                    ns => format!("{}/namespaces/{ns}/{}/{name}", c.prefix(), c.plural()),
                });
            }
        }
        paths.sort();
        paths
    }

    /// Every request so far, as `METHOD /path` (without the query).
    pub fn requests(&self) -> Vec<String> {
        lock(&self.log.requests).clone()
    }

    /// Requests whose method is `method` and whose path starts with `path_prefix` get `status`, as a
    /// `Status` saying "injected failure".
    pub fn fail(&self, method: &str, path_prefix: &str, status: u16) {
        lock(&self.log.failures).push((method.to_string(), path_prefix.to_string(), status));
    }
}
