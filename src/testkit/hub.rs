//! A hub cluster for the Kubernetes-mode tests: the product's one Kubernetes API
//! ([`crate::api::kube::KubeApi`]) over an in-memory store, served by the product's HTTP server on a
//! loopback port, so that the controllers' kube-rs clients meet the same API users' kubectl does.
//!
//! What tests add to it is an [`Interceptor`]: every request is logged for tests to assert on, and
//! with [`ApiServer::enforce_rbac`] requests are authorized as the API server authorizes a service
//! account's: by bearer token, against the rules its (Cluster)RoleBindings grant in the RBAC manifests
//! users install (`deploy/rbac.yaml`), and refused with 403 otherwise. A controller that needs a
//! permission the manifests do not grant then fails its tests as it would fail in a cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::Value;

use super::lock;
use crate::api::kube::{Collection, Interceptor, KubeApi, NoHooks, Verb, status_error};
use crate::http::Body;
use crate::store::sqlite::SqliteStore;

/// Why RBAC manifests cannot be read as grants.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RbacError(pub String);

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
pub fn service_account_grants(manifests: &str, namespace: &str, name: &str) -> Result<Vec<Grant>, RbacError> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for de in yaml_serde::Deserializer::from_str(manifests) {
        let v = Value::deserialize(de).map_err(|e| RbacError(format!("RBAC manifests: {e}")))?;
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
            return Err(RbacError(format!(
                "{} {} refers to {role_kind} {role}, which grants nothing",
                binding["kind"], binding["metadata"]["name"]
            )));
        }
        grants.extend(rules.into_iter().map(|rule| Grant { namespace: scope.clone(), rule }));
    }
    Ok(grants)
}

/// Requests served, counted by who sent them (bearer token), verb and resource.
pub type RequestCountKey = (String, &'static str, String);

/// Requests logged, and the grants tokens have once RBAC is enforced.
#[derive(Default)]
struct Log {
    /// Bearer token → what it may do; None: everything (no authorization).
    rbac: Mutex<Option<HashMap<String, Vec<Grant>>>>,
    requests: Mutex<Vec<String>>,
    /// Set by [`ApiServer::count_requests_only`]: `requests` stops growing (a benchmark's run of
    /// millions of requests would otherwise keep every line), `counts` goes on.
    lines_off: std::sync::atomic::AtomicBool,
    /// A handful of entries (clients × verbs × kinds), however long the server runs.
    counts: Mutex<HashMap<RequestCountKey, u64>>,
    /// Requests refused by RBAC, with the reason.
    refused: Mutex<Vec<String>>,
    /// Every request answered 503 (an API server that cannot be reached or is overloaded).
    down: std::sync::atomic::AtomicBool,
}

impl Interceptor for Log {
    fn intercept(&self, head: &http::request::Parts, verb: Verb, c: Option<&Collection>) -> Option<Response<Body>> {
        let token = head
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Discovery documents are "get" to RBAC; counted apart, they are not reads of objects.
        let verb_name = if verb == Verb::Discover { "discover" } else { verb.as_str() };
        let resource = c.map(|c| c.plural()).unwrap_or_default();
        *lock(&self.counts).entry((token.to_string(), verb_name, resource.to_string())).or_default() += 1;
        if !self.lines_off.load(std::sync::atomic::Ordering::Relaxed) {
            lock(&self.requests).push(format!("{} {}", head.method, head.uri));
        }
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return Some(status_error(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "the server is down"));
        }
        let rbac = lock(&self.rbac);
        let rbac = rbac.as_ref()?;
        let Some(grants) = rbac.get(token) else {
            lock(&self.refused).push(format!("{} {}: unknown token {token:?}", head.method, head.uri));
            return Some(status_error(StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized"));
        };
        // Discovery is open to every authenticated client, as with the API server's defaults.
        let c = c?;
        let segs: Vec<&str> = head.uri.path().trim_matches('/').split('/').collect();
        let path = crate::store::ApiPath::parse(&segs)?;
        let resource = if path.status { format!("{}/status", c.plural()) } else { c.plural().to_string() };
        let namespace = if c.namespaced() { path.namespace.unwrap_or_default() } else { "" };
        let verb = verb.as_str();
        if grants.iter().any(|g| g.allows(verb, c.group(), &resource, namespace, path.name)) {
            return None;
        }
        let scope = if namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{namespace}\"")
        };
        let message = format!(
            "{resource} is forbidden: token {token:?} cannot {verb} resource \"{resource}\" in API group \"{}\" {scope}",
            c.group()
        );
        lock(&self.refused).push(message.clone());
        Some(status_error(StatusCode::FORBIDDEN, "Forbidden", &message))
    }
}

/// The API as an HTTP handler.
struct Served(Arc<KubeApi>);

impl crate::http::Handler for Served {
    async fn handle(self: Arc<Self>, req: http::Request<Bytes>) -> Response<Body> {
        self.0.handle(&req).await
    }
    fn admit(&self, _head: &http::request::Parts) -> crate::http::Admission {
        // kube-apiserver's own limit of a request body.
        crate::http::Admission::Body { max_bytes: 3 << 20 }
    }
}

pub struct ApiServer {
    pub url: String,
    api: Arc<KubeApi>,
    log: Arc<Log>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServer {
    /// Serves `store` on a free loopback port (needs a tokio runtime).
    pub async fn start(store: SqliteStore) -> ApiServer {
        let api = KubeApi::new(store, Arc::new(NoHooks));
        let log = Arc::new(Log::default());
        api.set_interceptor(log.clone());
        let (url, task) = super::serve_on_loopback(Arc::new(Served(api.clone()))).await;
        ApiServer { url, api, log, task }
    }

    /// The API this server serves.
    pub fn api(&self) -> &Arc<KubeApi> {
        &self.api
    }

    /// A kubeconfig for this server.
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for("hub-admin-token")
    }

    /// A kubeconfig authenticating with `token` (see [`ApiServer::enforce_rbac`]).
    pub fn kubeconfig_for(&self, token: &str) -> String {
        super::kubeconfig("hub", &self.url, token)
    }

    /// A kube-rs client authenticating with `token`.
    pub async fn client_as(&self, token: &str) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_for(token)).expect("a kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("a config");
        kube::Client::try_from(config).expect("a client of the loopback API server")
    }

    /// Requests refused by RBAC so far (each with the API server's message).
    pub fn refused(&self) -> Vec<String> {
        lock(&self.log.refused).clone()
    }

    /// From now on, requests are allowed only with a token given here, and only what its grants
    /// allow. Call once per token.
    pub fn enforce_rbac(&self, token: &str, grants: Vec<Grant>) {
        lock(&self.log.rbac).get_or_insert_default().insert(token.to_string(), grants);
    }

    /// While `down`, every request is answered 503.
    pub fn set_down(&self, down: bool) {
        self.log.down.store(down, std::sync::atomic::Ordering::Relaxed);
    }

    /// A kube-rs client of this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("the server's URL"));
        kube::Client::try_from(config).expect("a client of the loopback API server")
    }

    /// Requests served so far, as `METHOD PATH?QUERY` (none after [`ApiServer::count_requests_only`]).
    pub fn requests(&self) -> Vec<String> {
        lock(&self.log.requests).clone()
    }

    /// From now on requests are only counted ([`ApiServer::request_counts`]), not logged line by
    /// line: for long runs, whose log would grow without bound.
    pub fn count_requests_only(&self) {
        self.log.lines_off.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Requests served so far by (bearer token, "" without one; verb as RBAC names it, "discover"
    /// for discovery and OpenAPI documents; resource, "" when none): a GET of a collection is a
    /// "list", with `watch` a "watch".
    pub fn request_counts(&self) -> Vec<(RequestCountKey, u64)> {
        lock(&self.log.counts).iter().map(|(k, n)| (k.clone(), *n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::InfraEnv;
    use crate::store::Store;
    use crate::store::kube::KubeStore;
    use serde_json::json;

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

    #[tokio::test]
    async fn requests_are_counted_by_client_verb_and_resource_and_lines_can_stop() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        let store = KubeStore::start(server.client_as("ctl").await, &[]).await;
        store.create(&infraenv("ns")).await.unwrap();
        assert!(store.get::<InfraEnv>("ns", "ie").await.unwrap().is_some());
        store.list::<InfraEnv>(Some("ns")).await.unwrap();
        let count = |token: &str, verb: &str, resource: &str| {
            server
                .request_counts()
                .into_iter()
                .find(|((t, v, r), _)| t == token && *v == verb && r == resource)
                .map_or(0, |(_, n)| n)
        };
        assert_eq!(count("ctl", "create", "infraenvs"), 1);
        assert_eq!(count("ctl", "get", "infraenvs"), 1);
        assert_eq!(count("ctl", "list", "infraenvs"), 1);
        let lines = server.requests().len();
        server.count_requests_only();
        store.get::<InfraEnv>("ns", "ie").await.unwrap();
        assert_eq!(count("ctl", "get", "infraenvs"), 2, "still counted");
        assert_eq!(server.requests().len(), lines, "no line kept");
    }
}
