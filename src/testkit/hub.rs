//! A Kubernetes API server for the hub's resources, in memory on a loopback port: the cluster the
//! Kubernetes backend ([`super::kube::KubeStore`]) is tested against, so that one scenario suite runs
//! through both stores.
//!
//! Objects live in a [`SqliteStore`], which already has the API server's semantics (resourceVersion
//! checks, generation, finalizers and deletionTimestamp, owner-reference garbage collection, the
//! status subresource). This module puts the API's HTTP in front of it, as kube-rs speaks it: GET
//! (object, list, metadata-only list), WATCH from a resourceVersion, POST, PUT, PUT `/status` and
//! DELETE, with errors as `Status` objects. Selectors are refused rather than ignored, so a client
//! relying on them fails loudly. Every request is logged for tests to assert on.
//!
//! With [`ApiServer::enforce_rbac`], requests are authorized as the API server authorizes a service
//! account's: by bearer token, against the rules its (Cluster)RoleBindings grant in the RBAC manifests
//! users install (`deploy/rbac.yaml`), and refused with 403 otherwise. A controller that needs a
//! permission the manifests do not grant then fails its tests as it would fail in a cluster.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::resources::Kind;
use crate::store::sqlite::SqliteStore;
use crate::store::{Deletion, Store, StoreError};

/// A collection the server serves.
#[derive(Clone, Debug)]
struct Collection {
    /// `/apis/GROUP/VERSION` or `/api/v1`.
    prefix: String,
    plural: String,
    api_version: String,
    kind: String,
    /// The store key: `plural.group`, or the plural alone for the core group.
    resource: String,
    namespaced: bool,
    /// Custom resources have `metadata.generation`; Secrets and Leases do not.
    has_generation: bool,
}

fn collections() -> Vec<Collection> {
    let mut all: Vec<Collection> = Kind::ALL
        .into_iter()
        .map(|k| Collection {
            prefix: k.api_prefix().to_string(),
            plural: k.plural().to_string(),
            api_version: k.api_version().to_string(),
            kind: k.name().to_string(),
            resource: k.resource(),
            namespaced: k.namespaced(),
            has_generation: k != Kind::Secret,
        })
        .collect();
    // Leader election.
    all.push(Collection {
        prefix: "/apis/coordination.k8s.io/v1".into(),
        plural: "leases".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        resource: "leases.coordination.k8s.io".into(),
        namespaced: true,
        has_generation: false,
    });
    all
}

/// One change as a watch reports it.
#[derive(Clone, Debug)]
struct WatchEvent {
    resource_version: i64,
    resource: String,
    namespace: String,
    type_: &'static str,
    object: Value,
}

/// Every change since the server started, for watches to replay from the resourceVersion they name.
#[derive(Default)]
struct History {
    events: Vec<Arc<WatchEvent>>,
    /// The highest resourceVersion reported so far: what a list is stamped with.
    resource_version: i64,
    /// The last state of each object, to report it in its DELETED event.
    live: HashMap<(String, String, String), Value>,
}

/// A rule a role grants, where it applies.
#[derive(Clone, Debug)]
pub struct Grant {
    /// None for a ClusterRole bound cluster-wide; the RoleBinding's namespace otherwise.
    pub namespace: Option<String>,
    pub rule: k8s_openapi::api::rbac::v1::PolicyRule,
}

impl Grant {
    fn allows(&self, verb: &str, group: &str, resource: &str, namespace: &str, name: Option<&str>) -> bool {
        let any_or = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        let r = &self.rule;
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
            && any_or(&r.verbs, verb)
            && any_or(r.api_groups.as_deref().unwrap_or_default(), group)
            && any_or(r.resources.as_deref().unwrap_or_default(), resource)
            && r.resource_names
                .as_ref()
                .is_none_or(|names| names.is_empty() || name.is_some_and(|n| names.iter().any(|x| x == n)))
    }
}

/// The rules RBAC manifests (multi-document YAML) grant the service account `name` of `namespace`:
/// the rules of every ClusterRole or Role a binding naming it refers to. Bindings and Roles without a
/// namespace are taken to be in `namespace` (the manifests are applied there).
pub fn service_account_grants(manifests: &str, namespace: &str, name: &str) -> Result<Vec<Grant>, String> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for de in yaml_serde::Deserializer::from_str(manifests) {
        let v = Value::deserialize(de).map_err(|e| format!("RBAC manifests: {e}"))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    let role_rules = |kind: &str, role: &str| -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
        docs.iter()
            .filter(|d| d["kind"] == kind && d["metadata"]["name"] == role)
            .flat_map(|d| serde_json::from_value::<Vec<_>>(d["rules"].clone()).unwrap_or_default())
            .collect()
    };
    let mut grants = Vec::new();
    for binding in docs.iter().filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding") {
        let names_us = binding["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount"
                && s["name"] == name
                && s["namespace"].as_str().unwrap_or(namespace) == namespace
        });
        if !names_us {
            continue;
        }
        let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let scope = (binding["kind"] == "RoleBinding")
            .then(|| binding["metadata"]["namespace"].as_str().unwrap_or(namespace).to_string());
        let rules = role_rules(role_kind, role);
        if rules.is_empty() {
            return Err(format!(
                "{} {} refers to {role_kind} {role}, which grants nothing",
                binding["kind"], binding["metadata"]["name"]
            ));
        }
        grants.extend(rules.into_iter().map(|rule| Grant { namespace: scope.clone(), rule }));
    }
    Ok(grants)
}

struct Shared {
    store: SqliteStore,
    /// Bearer token → what it may do; None: everything (no authorization).
    rbac: Mutex<Option<HashMap<String, Vec<Grant>>>>,
    collections: Vec<Collection>,
    history: Mutex<History>,
    /// New history entries, for the watches being served.
    feed: broadcast::Sender<Arc<WatchEvent>>,
    requests: Mutex<Vec<String>>,
    /// Requests refused by RBAC, with the reason.
    refused: Mutex<Vec<String>>,
}

pub struct ApiServer {
    pub url: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn resource_version_of(obj: &Value) -> i64 {
    obj["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

impl ApiServer {
    /// Serves `store` on a free loopback port (needs a tokio runtime).
    pub async fn start(store: SqliteStore) -> ApiServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let shared = Arc::new(Shared {
            store: store.clone(),
            collections: collections(),
            history: Mutex::default(),
            feed: broadcast::channel(4096).0,
            requests: Mutex::default(),
            rbac: Mutex::default(),
            refused: Mutex::default(),
        });
        // The change feed is subscribed to before anything is served, so no change is missed.
        let changes = store.subscribe();
        let recorder = tokio::spawn(record_changes(shared.clone(), changes));
        let server_shared = shared.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                let shared = server_shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(&shared, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ApiServer { url, shared, tasks: vec![recorder, server] }
    }

    /// A kubeconfig for this server.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for("hub-admin-token")
    }

    /// A kubeconfig authenticating with `token` (see [`ApiServer::enforce_rbac`]).
    pub fn kubeconfig_for(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {}\n\
             contexts:\n- name: admin\n  context:\n    cluster: hub\n    user: admin\n\
             current-context: admin\nusers:\n- name: admin\n  user:\n    token: {token}\n",
            self.url
        )
    }

    /// A kube-rs client authenticating with `token`.
    pub async fn client_as(&self, token: &str) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_for(token)).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("a config");
        kube::Client::try_from(config).expect("a client of the loopback API server")
    }

    /// Requests refused by RBAC so far (each with the API server's message).
    pub fn refused(&self) -> Vec<String> {
        lock(&self.shared.refused).clone()
    }

    /// From now on, requests are allowed only with a token given here, and only what its grants
    /// allow. Call once per token.
    pub fn enforce_rbac(&self, token: &str, grants: Vec<Grant>) {
        lock(&self.shared.rbac).get_or_insert_default().insert(token.to_string(), grants);
    }

    /// A kube-rs client of this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("the server's URL"));
        kube::Client::try_from(config).expect("a client of the loopback API server")
    }

    /// Requests served so far, as `METHOD PATH?QUERY`.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.requests).clone()
    }
}

/// Turns the store's change feed into watch events, in the order the store committed them.
async fn record_changes(shared: Arc<Shared>, mut changes: broadcast::Receiver<crate::store::ChangeEvent>) {
    loop {
        let change = match changes.recv().await {
            Ok(c) => c,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                // Watches would miss changes: better to fail the test that caused it than to hide it.
                tracing::error!(missed = n, "the API server's change feed lagged; watches are now incomplete");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let key = (change.resource.clone(), change.namespace.clone(), change.name.clone());
        let current = shared.store.get_raw(&change.resource, &change.namespace, &change.name).ok().flatten();
        let mut history = lock(&shared.history);
        let event = match current {
            Some(object) => {
                let rv = resource_version_of(&object);
                let type_ = if history.live.insert(key, object.clone()).is_some() { "MODIFIED" } else { "ADDED" };
                history.resource_version = history.resource_version.max(rv);
                WatchEvent {
                    resource_version: rv,
                    resource: change.resource,
                    namespace: change.namespace,
                    type_,
                    object,
                }
            }
            None => {
                let Some(object) = history.live.remove(&key) else { continue };
                WatchEvent {
                    resource_version: history.resource_version,
                    resource: change.resource,
                    namespace: change.namespace,
                    type_: "DELETED",
                    object,
                }
            }
        };
        let event = Arc::new(event);
        history.events.push(event.clone());
        let _ = shared.feed.send(event);
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn full(code: StatusCode, body: &Value) -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("a response")
}

fn status(code: StatusCode, reason: &str, message: &str) -> hyper::Response<Body> {
    full(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

fn store_error(e: &StoreError) -> hyper::Response<Body> {
    let (code, reason) = match e {
        StoreError::NotFound { .. } => (StatusCode::NOT_FOUND, "NotFound"),
        StoreError::AlreadyExists { .. } => (StatusCode::CONFLICT, "AlreadyExists"),
        StoreError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
        StoreError::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "Invalid"),
        StoreError::Backend(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    };
    status(code, reason, &e.to_string())
}

/// What a request addresses.
struct Target<'a> {
    collection: &'a Collection,
    /// None: across namespaces (lists and watches only). Cluster-scoped objects have "".
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

fn target<'a>(collections: &'a [Collection], path: &str) -> Option<Target<'a>> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let crate::store::ApiPath { prefix, namespace, plural, name, status } = crate::store::ApiPath::parse(&segs)?;
    let collection = collections.iter().find(|c| c.prefix == prefix && c.plural == plural)?;
    // Namespaced kinds are addressed in a namespace (or across all, for lists); cluster-scoped never.
    let namespace = match (collection.namespaced, namespace) {
        (true, Some("")) => return None,
        (false, Some(ns)) if !ns.is_empty() => return None,
        (false, _) => Some(String::new()),
        (true, ns) => ns.map(str::to_string),
    };
    Some(Target { collection, namespace, name: name.map(str::to_string), status })
}

fn query(uri: &http::Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned()))
        .collect()
}

/// The metadata-only form of an object, for clients that ask for `PartialObjectMetadata`.
fn metadata_only(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

async fn handle(shared: &Shared, req: hyper::Request<hyper::body::Incoming>) -> hyper::Response<Body> {
    let (head, body) = req.into_parts();
    lock(&shared.requests).push(format!("{} {}", head.method, head.uri));
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "reading the request body failed");
    };
    let Some(t) = target(&shared.collections, head.uri.path()) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({})", head.uri.path()),
        );
    };
    let q = query(&head.uri);
    if let Some(refused) = authorize(shared, &head, &t, &q) {
        return refused;
    }
    for unsupported in ["labelSelector", "fieldSelector"] {
        if q.get(unsupported).is_some_and(|v| !v.is_empty()) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("this test server does not serve {unsupported}"),
            );
        }
    }
    let metadata = head
        .headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("as=PartialObjectMetadata"));
    let c = t.collection;
    let result = match (head.method.clone(), t.name.as_deref(), t.status) {
        (Method::GET, None, false) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => {
            return watch(shared, &t, q.get("resourceVersion").map(String::as_str), metadata);
        }
        (Method::GET, None, false) => return list(shared, &t, &q, metadata),
        (Method::GET, Some(name), _) => {
            shared.store.get_raw(&c.resource, t.namespace.as_deref().unwrap_or_default(), name).and_then(|o| {
                o.map(|o| (StatusCode::OK, o))
                    .ok_or_else(|| StoreError::NotFound { resource: c.resource.clone(), name: name.to_string() })
            })
        }
        (Method::POST, None, false) => match document(&body, c, t.namespace.as_deref(), None) {
            Ok(doc) => shared
                .store
                .create_raw(&c.resource, t.namespace.as_deref().unwrap_or_default(), doc, c.has_generation)
                .await
                .map(|o| (StatusCode::CREATED, o)),
            Err(e) => Err(e),
        },
        (Method::PUT, Some(name), false) => match document(&body, c, t.namespace.as_deref(), Some(name)) {
            Ok(doc) => shared
                .store
                .replace_raw(&c.resource, t.namespace.as_deref().unwrap_or_default(), doc)
                .await
                .map(|o| (StatusCode::OK, o)),
            Err(e) => Err(e),
        },
        (Method::PUT, Some(name), true) => match document(&body, c, t.namespace.as_deref(), Some(name)) {
            Ok(doc) => {
                let want_rv = doc["metadata"]["resourceVersion"].as_str().map(str::to_string);
                let ns = t.namespace.as_deref().unwrap_or_default();
                let written =
                    shared.store.replace_status_raw(&c.resource, ns, name, doc.get("status").cloned(), want_rv);
                written.await.map(|o| (StatusCode::OK, o))
            }
            Err(e) => Err(e),
        },
        (Method::PATCH, Some(name), status) => {
            let merge = head
                .headers
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v.as_bytes().starts_with(b"application/merge-patch+json"));
            if !merge {
                return self::status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "this test server takes JSON merge patches (application/merge-patch+json) only",
                );
            }
            let ns = t.namespace.as_deref().unwrap_or_default();
            match serde_json::from_slice::<Value>(&body) {
                Ok(patch) => merge_patch(shared, c, ns, name, &patch, status).await.map(|o| (StatusCode::OK, o)),
                Err(e) => Err(StoreError::Invalid(format!("the patch is not JSON: {e}"))),
            }
        }
        (Method::DELETE, Some(name), false) => {
            let ns = t.namespace.as_deref().unwrap_or_default();
            match shared.store.delete_raw(&c.resource, ns, name).await {
                // The object stays, marked, until its finalizers are removed.
                Ok(Deletion::Pending) => {
                    shared.store.get_raw(&c.resource, ns, name).map(|o| (StatusCode::OK, o.unwrap_or(Value::Null)))
                }
                Ok(Deletion::Deleted) => {
                    return full(
                        StatusCode::OK,
                        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                "details": {"name": name, "kind": c.plural}}),
                    );
                }
                Err(e) => Err(e),
            }
        }
        (m, _, _) => {
            return status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", &format!("{m} is not served here"));
        }
    };
    match result {
        Ok((code, object)) => full(code, &object),
        Err(e) => store_error(&e),
    }
}

/// A JSON merge patch of an object (its status with `status`; a patch of the object leaves the status
/// as it is, as with PUT). A resourceVersion in the patch must be current; without one the patch
/// applies to whatever is current, retried if the object moves meanwhile, as the API server does.
async fn merge_patch(
    shared: &Shared,
    c: &Collection,
    ns: &str,
    name: &str,
    patch: &Value,
    status: bool,
) -> Result<Value, StoreError> {
    let want_rv = patch["metadata"]["resourceVersion"].as_str().map(str::to_string);
    for _ in 0..5 {
        let live = shared
            .store
            .get_raw(&c.resource, ns, name)?
            .ok_or_else(|| StoreError::NotFound { resource: c.resource.clone(), name: name.to_string() })?;
        let mut merged = live.clone();
        crate::store::json::merge_patch(&mut merged, patch);
        let rv = want_rv.clone().or_else(|| live["metadata"]["resourceVersion"].as_str().map(str::to_string));
        merged["metadata"]["resourceVersion"] = rv.clone().map_or(Value::Null, Value::String);
        let written = if status {
            shared.store.replace_status_raw(&c.resource, ns, name, merged.get("status").cloned(), rv).await
        } else {
            shared.store.replace_raw(&c.resource, ns, merged).await
        };
        match written {
            Err(e) if e.is_conflict() && want_rv.is_none() => continue,
            other => return other,
        }
    }
    Err(StoreError::Conflict(format!("{} \"{name}\" kept changing", c.resource)))
}

/// The verb of a request, as RBAC names it.
fn verb(method: &Method, t: &Target<'_>, q: &HashMap<String, String>) -> &'static str {
    match (method.as_str(), t.name.is_some()) {
        ("GET", false) if q.get("watch").is_some_and(|w| w == "true" || w == "1") => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "deletecollection",
        ("DELETE", true) => "delete",
        _ => "unknown",
    }
}

/// None if the request is allowed; the 403 the API server would answer otherwise.
fn authorize(
    shared: &Shared,
    head: &http::request::Parts,
    t: &Target<'_>,
    q: &HashMap<String, String>,
) -> Option<hyper::Response<Body>> {
    let rbac = lock(&shared.rbac);
    let rbac = rbac.as_ref()?;
    let token = head
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let Some(grants) = rbac.get(token) else {
        lock(&shared.refused).push(format!("{} {}: unknown token {token:?}", head.method, head.uri));
        return Some(status(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"));
    };
    let c = t.collection;
    let group = c.api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let resource = if t.status { format!("{}/status", c.plural) } else { c.plural.clone() };
    let verb = verb(&head.method, t, q);
    let namespace = t.namespace.as_deref().unwrap_or_default();
    if grants.iter().any(|g| g.allows(verb, group, &resource, namespace, t.name.as_deref())) {
        return None;
    }
    let scope = if namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{namespace}\"")
    };
    let message = format!(
        "{resource} is forbidden: token {token:?} cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
    );
    lock(&shared.refused).push(message.clone());
    Some(status(StatusCode::FORBIDDEN, "Forbidden", &message))
}

/// The request body as an object of the collection, at the URL's namespace and name.
fn document(body: &[u8], c: &Collection, namespace: Option<&str>, name: Option<&str>) -> Result<Value, StoreError> {
    let doc: Value =
        serde_json::from_slice(body).map_err(|e| StoreError::Invalid(format!("the body is not a JSON object: {e}")))?;
    if doc["apiVersion"] != c.api_version.as_str() || doc["kind"] != c.kind.as_str() {
        return Err(StoreError::Invalid(format!(
            "the body is a {}/{}, not a {} ({})",
            doc["apiVersion"].as_str().unwrap_or("?"),
            doc["kind"].as_str().unwrap_or("?"),
            c.kind,
            c.api_version
        )));
    }
    let ns = namespace.unwrap_or_default();
    if c.namespaced && doc["metadata"]["namespace"].as_str().is_some_and(|d| d != ns) {
        return Err(StoreError::Invalid("the namespace of the object does not match the namespace of the URL".into()));
    }
    if let Some(name) = name
        && doc["metadata"]["name"].as_str() != Some(name)
    {
        return Err(StoreError::Invalid("the name of the object does not match the name of the URL".into()));
    }
    if doc["metadata"]["name"].as_str().is_none_or(str::is_empty) {
        return Err(StoreError::Invalid("metadata.name: Required value".into()));
    }
    Ok(doc)
}

/// A list, in name order, in pages when the client gives a `limit` (the `continue` token is where the
/// next page starts).
fn list(shared: &Shared, t: &Target<'_>, q: &HashMap<String, String>, metadata: bool) -> hyper::Response<Body> {
    let c = t.collection;
    // Stamped before reading: a watch from this version replays anything the list may have missed.
    let resource_version = lock(&shared.history).resource_version;
    let texts = shared.store.list_raw_texts(&c.resource, t.namespace.as_deref());
    let start: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut items = Vec::new();
    for text in texts.iter().skip(start).take(limit) {
        let Ok(object) = serde_json::from_slice::<Value>(text) else { continue };
        items.push(if metadata { metadata_only(&object) } else { object });
    }
    let next = start.saturating_add(limit);
    let continue_token = if next < texts.len() { next.to_string() } else { String::new() };
    let (api_version, kind) = if metadata {
        ("meta.k8s.io/v1".to_string(), "PartialObjectMetadataList".to_string())
    } else {
        (c.api_version.clone(), format!("{}List", c.kind))
    };
    full(
        StatusCode::OK,
        &json!({"apiVersion": api_version, "kind": kind,
                "metadata": {"resourceVersion": resource_version.to_string(), "continue": continue_token},
                "items": items}),
    )
}

/// A watch: the changes after `from` (all objects as ADDED when none is named), then new ones as they
/// come, one JSON event per line, until the client goes.
fn watch(shared: &Shared, t: &Target<'_>, from: Option<&str>, metadata: bool) -> hyper::Response<Body> {
    let c = t.collection.clone();
    let namespace = t.namespace.clone();
    let matches =
        move |e: &WatchEvent| e.resource == c.resource && namespace.as_ref().is_none_or(|ns| *ns == e.namespace);
    let from: Option<i64> = from.filter(|v| !v.is_empty() && *v != "0").and_then(|v| v.parse().ok());
    let (replay, mut feed) = {
        let history = lock(&shared.history);
        let replay: Vec<Value> = match from {
            // Events at `from` itself are replayed too: a list stamped `from` may not hold them yet.
            Some(from) => history
                .events
                .iter()
                .filter(|e| e.resource_version >= from && matches(e))
                .map(|e| event_json(e, metadata))
                .collect(),
            None => history
                .live
                .iter()
                .filter(|((res, ns, _), _)| {
                    *res == t.collection.resource && t.namespace.as_ref().is_none_or(|want| want == ns)
                })
                .map(|(_, o)| json!({"type": "ADDED", "object": if metadata { metadata_only(o) } else { o.clone() }}))
                .collect(),
        };
        (replay, shared.feed.subscribe())
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        for event in replay {
            if tx.send(Bytes::from(format!("{event}\n"))).await.is_err() {
                return;
            }
        }
        loop {
            let event = match feed.recv().await {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // The client has to start over from a list, as after a real server's "410 Gone".
                    let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "Expired", "code": 410, "message": "too old resource version"}});
                    let _ = tx.send(Bytes::from(format!("{gone}\n"))).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if matches(&event) && tx.send(Bytes::from(format!("{}\n", event_json(&event, metadata)))).await.is_err() {
                return;
            }
        }
    });
    let stream = tokio_stream_of(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    hyper::Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("a response")
}

fn event_json(e: &WatchEvent, metadata: bool) -> Value {
    json!({"type": e.type_, "object": if metadata { metadata_only(&e.object) } else { e.object.clone() }})
}

fn tokio_stream_of(mut rx: tokio::sync::mpsc::Receiver<Bytes>) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::InfraEnv;
    use crate::store::kube::KubeStore;

    const MANIFESTS: &str = "
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
- {apiGroups: [agent-install.openshift.io], resources: [infraenvs], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: ServiceAccount, name: app, namespace: tools}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: writer}
rules:
- {apiGroups: [agent-install.openshift.io], resources: [infraenvs], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: writer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: writer}
subjects: [{kind: ServiceAccount, name: app, namespace: tools}]
";

    fn infraenv(ns: &str) -> InfraEnv {
        serde_json::from_value(json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": "ie", "namespace": ns}, "spec": {"pullSecretRef": {"name": "ps"}}}))
        .unwrap()
    }

    #[tokio::test]
    async fn rbac_allows_what_the_bindings_grant_and_refuses_the_rest() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let grants = service_account_grants(MANIFESTS, "tools", "app").unwrap();
        assert_eq!(grants.len(), 2);
        assert!(service_account_grants(MANIFESTS, "tools", "someone-else").unwrap().is_empty());

        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        server.enforce_rbac("app", grants);
        let app = KubeStore::start(server.client_as("app").await, &[]).await;
        // The Role allows creating in its own namespace only; the ClusterRole reading everywhere.
        app.create(&infraenv("tools")).await.unwrap();
        let elsewhere = app.create(&infraenv("other")).await.unwrap_err();
        assert!(elsewhere.to_string().contains("403 Forbidden"), "{elsewhere}");
        assert!(app.get::<InfraEnv>("tools", "ie").await.unwrap().is_some());
        let listed = app.list::<InfraEnv>(Some("tools")).await.unwrap_err();
        assert!(listed.to_string().contains("cannot list resource \"infraenvs\""), "{listed}");
        assert_eq!(server.refused().len(), 2);

        let stranger = KubeStore::start(server.client_as("nobody").await, &[]).await;
        assert!(stranger.get::<InfraEnv>("tools", "ie").await.is_err());
        assert_eq!(server.refused().len(), 3);
    }
}
