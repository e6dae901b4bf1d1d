//! What the Kubernetes store costs the API server: its requests counted by verb and resource, its
//! watches' restarts, and how many objects it holds per kind. `/metrics` shows these, so that an
//! operator of a hub sees the controller's load on the API server the way the fleet benchmark does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};

use http::{Method, Request};
use kube::client::Body;

use super::cache::ObjectCache;
use crate::keylocks::{Locked as _, LockedRw as _};
use crate::resources::Kind;
use crate::store::ApiPath;

/// The verbs of the Kubernetes API (its audit log's names), from a request's method and path.
pub fn verb(method: &Method, path: &str, query: &str) -> &'static str {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let collection = ApiPath::parse(&segs).is_some_and(|p| p.name.is_none());
    let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        Method::GET if watch => "watch",
        Method::GET if collection => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// The resource a request addresses, as a metric label: one of a fixed set, so that no path can make
/// a new series.
pub fn resource_label(path: &str) -> &'static str {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let Some(p) = ApiPath::parse(&segs) else { return "other" };
    if let Some(kind) = Kind::ALL.into_iter().find(|k| k.plural() == p.plural) {
        return kind.plural();
    }
    match p.plural {
        "leases" => "leases",
        "events" => "events",
        "namespaces" => "namespaces",
        _ => "other",
    }
}

/// Counters of one store (shared by its clones).
#[derive(Default)]
pub struct ClusterUsage {
    /// (verb, resource) → requests sent.
    requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// resource plural → times its watch listed everything again after the first time (a 410 Gone, a
    /// dropped connection).
    watch_restarts: Mutex<BTreeMap<&'static str, u64>>,
    cache: RwLock<Option<CacheView>>,
    /// The first [`REFUSALS_KEPT`] requests the API server refused as unauthenticated or forbidden
    /// (`METHOD PATH: STATUS`), and how many there were: a permission the manifests lack shows here.
    refused: Mutex<(Vec<String>, u64)>,
}

/// How many refused requests [`ClusterUsage`] keeps the lines of.
const REFUSALS_KEPT: usize = 32;

/// The cache whose sizes are reported, and its kinds.
type CacheView = (Weak<RwLock<ObjectCache>>, Vec<Kind>);

impl ClusterUsage {
    pub(super) fn count(&self, verb: &'static str, resource: &'static str) {
        *self.requests.locked().entry((verb, resource)).or_default() += 1;
    }

    pub(super) fn watch_restarted(&self, kind: Kind) {
        *self.watch_restarts.locked().entry(kind.plural()).or_default() += 1;
    }

    pub(super) fn observe_cache(&self, cache: &Arc<RwLock<ObjectCache>>, kinds: &[Kind]) {
        *self.cache.write_locked() = Some((Arc::downgrade(cache), kinds.to_vec()));
    }

    fn refusal(&self, line: String) {
        let mut r = self.refused.locked();
        if r.0.len() < REFUSALS_KEPT {
            r.0.push(line);
        }
        r.1 += 1;
    }

    /// Requests the API server answered 401 or 403 (the first lines kept), and how many in all.
    pub fn refused(&self) -> (Vec<String>, u64) {
        self.refused.locked().clone()
    }

    /// ((verb, resource), requests), in order.
    pub fn requests(&self) -> Vec<((&'static str, &'static str), u64)> {
        self.requests.locked().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Requests of one verb, over every resource.
    pub fn requests_of(&self, verb: &str) -> u64 {
        self.requests().into_iter().filter(|((v, _), _)| *v == verb).map(|(_, n)| n).sum()
    }

    pub fn watch_restarts(&self) -> Vec<(&'static str, u64)> {
        self.watch_restarts.locked().iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// (resource plural, objects held) for every cached kind.
    pub fn cached_objects(&self) -> Vec<(&'static str, usize)> {
        let guard = self.cache.read_locked();
        let Some((cache, kinds)) = guard.as_ref() else { return Vec::new() };
        let Some(cache) = cache.upgrade() else { return Vec::new() };
        let cache = cache.read_locked();
        kinds.iter().map(|k| (k.plural(), cache.len(&k.resource()))).collect()
    }
}

/// `client`, with every request it sends counted into `usage`.
pub(super) fn counting(client: kube::Client, usage: Arc<ClusterUsage>) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |req: Request<Body>| {
        let uri = req.uri();
        usage.count(verb(req.method(), uri.path(), uri.query().unwrap_or_default()), resource_label(uri.path()));
        // Kept for the line of a refusal, made only then (reference-counted copies, no formatting
        // on every request).
        let (method, uri) = (req.method().clone(), uri.clone());
        let (client, usage) = (client.clone(), usage.clone());
        async move {
            let answer = client.send(req).await;
            if let Ok(resp) = &answer
                && matches!(resp.status(), http::StatusCode::UNAUTHORIZED | http::StatusCode::FORBIDDEN)
            {
                // Bounded: a path's length is the client's own (object names).
                let path: String = uri.path().chars().take(256).collect();
                usage.refusal(format!("{method} {path}: {}", resp.status()));
            }
            answer
        }
    });
    kube::Client::new(service, namespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_by_the_apis_verbs() {
        let ie = "/apis/agent-install.openshift.io/v1beta1/namespaces/ns/infraenvs";
        assert_eq!(verb(&Method::GET, ie, ""), "list");
        assert_eq!(verb(&Method::GET, ie, "watch=true&resourceVersion=5"), "watch");
        assert_eq!(verb(&Method::GET, "/api/v1/secrets", "labelSelector=a&watch=1"), "watch");
        assert_eq!(verb(&Method::GET, &format!("{ie}/x"), ""), "get");
        assert_eq!(verb(&Method::PATCH, &format!("{ie}/x/status"), ""), "patch");
        assert_eq!(verb(&Method::POST, ie, ""), "create");
        assert_eq!(verb(&Method::DELETE, &format!("{ie}/x"), ""), "delete");
        assert_eq!(resource_label(ie), "infraenvs");
        assert_eq!(resource_label("/apis/coordination.k8s.io/v1/namespaces/b/leases/l"), "leases");
        assert_eq!(resource_label("/apis/evil.example/v1/namespaces/b/a\"b"), "other");
        assert_eq!(resource_label("/version"), "other");
    }
}
