//! The Kubernetes backend of [`Store`]: the resources live in a cluster, reached through kube-rs.
//!
//! **Reads come from memory.** One watch per kind the controllers use keeps a copy of every object
//! of that kind ([`cache`]), indexed by uid and by the references the controllers follow, so a
//! reconcile reads without an API request, and a hub of 10,000 Agents costs the API server no LIST
//! after the first. Secrets are the exception: only those carrying `agent-install.openshift.io/watch`
//! are watched (as assisted-service caches them), which the controllers put on the Secrets they
//! follow; another is read with a GET. Kinds not watched by this store are read through the API.
//!
//! **Writes** are JSON merge patches of what the controller changed, computed against the object as
//! the cache holds it and locked to the resourceVersion the controller read, so a stale write is
//! refused with a conflict the controllers already handle. A field our types do not know (a newer
//! metal3 or assisted CRD than ours) is never in the patch, so it survives, where a PUT of our typed
//! object would drop it. Each write's answer goes into the cache at once (read-your-writes).
//!
//! **Changes** are announced from the same watches, after the cache has them: enough to know which
//! object changed and whether only its status did. [`usage`] counts what all this costs the API
//! server, for `/metrics`.

mod cache;
mod raw;
pub mod usage;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use either::Either;
use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, ObjectList};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::broadcast;

use super::{ChangeEvent, Deletion, Object, Store, StoreError, resource_name};
use crate::keylocks::LockedRw as _;
use crate::resources::Kind;
use crate::resources::references::Ref;
use cache::{ObjectCache, Source};
pub use usage::ClusterUsage;

pub use crate::resources::WATCH_LABEL;

/// What the watches learned about an object: enough to tell a status-only change from another.
#[derive(Clone, PartialEq)]
struct Seen {
    resource_version: Option<String>,
    /// Everything but the resourceVersion that moves when more than the status changes.
    fingerprint: String,
}

fn seen(meta: &ObjectMeta) -> Seen {
    let owners: Vec<&str> = meta.owner_references.iter().flatten().map(|o| o.uid.as_str()).collect();
    let fingerprint = serde_json::json!([
        meta.generation,
        meta.labels,
        meta.annotations,
        meta.finalizers,
        owners,
        meta.deletion_timestamp.is_some()
    ])
    .to_string();
    Seen { resource_version: meta.resource_version.clone(), fingerprint }
}

/// How much of a kind the cache holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Coverage {
    /// Every object: what the cache lacks does not exist (once the first list is done).
    All,
    /// Only the Secrets labelled [`WATCH_LABEL`]: what it lacks is read through the API.
    Labelled,
}

fn coverage(kind: Kind) -> Coverage {
    if kind == Kind::Secret { Coverage::Labelled } else { Coverage::All }
}

/// Whether the cache of a kind with `coverage` may hold `obj`: a labelled-only cache takes only what
/// its watch would deliver, since nothing would tell it of later changes to the rest.
fn belongs(coverage: Coverage, obj: &Value) -> bool {
    coverage == Coverage::All || obj["metadata"]["labels"][WATCH_LABEL].as_str() == Some("true")
}

struct Inner {
    client: kube::Client,
    events: broadcast::Sender<ChangeEvent>,
    cache: Arc<RwLock<ObjectCache>>,
    /// Resource name → (kind, coverage) of the watched kinds: the ones cached and announced.
    watched: HashMap<String, (Kind, Coverage)>,
    watches: Vec<tokio::task::AbortHandle>,
    changes: Arc<super::ChangeCounts>,
    usage: Arc<ClusterUsage>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for w in &self.watches {
            w.abort();
        }
    }
}

#[derive(Clone)]
pub struct KubeStore {
    inner: Arc<Inner>,
}

/// The API's description of a kind, for the dynamic watch API.
fn api_resource(kind: Kind) -> ApiResource {
    let api_version = kind.api_version();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: api_version.to_string(),
        kind: kind.name().to_string(),
        plural: kind.plural().to_string(),
    }
}

fn store_error<K: Object>(name: &str, e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(status) => match status.code {
            404 => StoreError::NotFound { resource: resource_name::<K>(), name: name.to_string() },
            409 if status.is_already_exists() => {
                StoreError::AlreadyExists { resource: resource_name::<K>(), name: name.to_string() }
            }
            409 => StoreError::Conflict(status.message),
            400 | 422 => StoreError::Invalid(status.message),
            403 => StoreError::Forbidden(status.message),
            // The status's code, reason and message are all it says (it has no cause of its own).
            _ => StoreError::backend_message(format!("{} {}: {}", status.code, status.reason, status.message)),
        },
        other => StoreError::backend(other),
    }
}

/// The collection URL of K in `namespace` ("" for cluster-scoped kinds, None for all namespaces).
fn collection<K: Object>(namespace: Option<&str>) -> kube::core::Request {
    kube::core::Request::new(K::url_path(&(), namespace.filter(|ns| !ns.is_empty())))
}

fn object_namespace<K: Object>(obj: &K) -> Result<(String, String), StoreError> {
    let meta = obj.meta();
    let name = meta.name.clone().ok_or_else(|| StoreError::Invalid("metadata.name is required".into()))?;
    Ok((meta.namespace.clone().unwrap_or_default(), name))
}

/// The API's JSON of an object of `resource` without the fields our types do not know (see
/// [`crate::resources::crds::prune_unknown_fields`]): what is decoded and cached.
fn pruned(resource: &str, mut v: Value) -> Value {
    crate::resources::crds::prune_unknown_fields(resource, &mut v);
    v
}

fn decode<K: Object>(v: Value) -> Result<K, StoreError> {
    let v = pruned(&resource_name::<K>(), v);
    serde_json::from_value(v).map_err(|e| StoreError::backend_in(format!("reading a {}", resource_name::<K>()), e))
}

fn conflict<K: Object>(name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
        resource_name::<K>()
    ))
}

/// The object without its status (what an update of the object itself changes).
fn without_status(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

/// A write of one cached object under way ([`KubeStore::writing`]); its end is told on drop, whether
/// the write succeeded or not.
struct WriteInFlight {
    cache: std::sync::Weak<RwLock<ObjectCache>>,
    key: cache::ObjKey,
}

impl Drop for WriteInFlight {
    fn drop(&mut self) {
        if let Some(cache) = self.cache.upgrade() {
            cache.write_locked().write_ends(&self.key.0, &self.key.1, &self.key.2);
        }
    }
}

fn request_error(e: kube::core::request::Error) -> StoreError {
    StoreError::backend(e)
}

impl KubeStore {
    /// A store over the cluster `client` reaches, caching and announcing changes of `kinds` (the kinds
    /// whose controllers run here). Returns once every watch has listed its kind, so that a controller
    /// starting now reads everything that exists and misses nothing that follows.
    pub async fn start(client: kube::Client, kinds: &[Kind]) -> KubeStore {
        KubeStore::start_in(client, kinds, None).await
    }

    /// [`KubeStore::start`] with the namespaced kinds watched in `namespace` only (None: in every
    /// namespace). The cache then answers for that namespace alone: a read of a cached kind in another
    /// namespace finds nothing. For tests that share a cluster, a namespace each.
    pub async fn start_in(client: kube::Client, kinds: &[Kind], namespace: Option<&str>) -> KubeStore {
        let usage = Arc::new(ClusterUsage::default());
        let client = usage::counting(client, usage.clone());
        let events = broadcast::channel(65536).0;
        let changes: Arc<super::ChangeCounts> = Arc::default();
        let cache: Arc<RwLock<ObjectCache>> = Arc::default();
        usage.observe_cache(&cache, kinds);
        let mut watches = Vec::new();
        let mut listed = Vec::new();
        for &kind in kinds {
            let (ready, ready_rx) = tokio::sync::oneshot::channel();
            listed.push(ready_rx);
            let watch = Watch {
                kind,
                namespace: namespace.filter(|_| kind.namespaced()).map(str::to_string),
                events: events.clone(),
                changes: changes.clone(),
                cache: Arc::downgrade(&cache),
                usage: usage.clone(),
            };
            let task = tokio::spawn(watch.run(client.clone(), ready));
            watches.push(task.abort_handle());
        }
        for ready in listed {
            let _ = ready.await;
        }
        let watched = kinds.iter().map(|&k| (k.resource(), (k, coverage(k)))).collect();
        KubeStore { inner: Arc::new(Inner { client, events, cache, watched, watches, changes, usage }) }
    }

    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// What this store has cost the API server, and what it holds.
    pub fn usage(&self) -> Arc<ClusterUsage> {
        self.inner.usage.clone()
    }

    fn coverage_of<K: Object>(&self) -> Option<(Kind, Coverage)> {
        self.inner.watched.get(&resource_name::<K>()).copied()
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, ObjectCache> {
        self.inner.cache.read_locked()
    }

    fn write_cache(&self) -> std::sync::RwLockWriteGuard<'_, ObjectCache> {
        self.inner.cache.write_locked()
    }

    /// Decodes the API's answer to a write of K and, where K is cached, puts it in the cache first
    /// (read-your-writes).
    fn written<K: Object>(&self, answer: Value) -> Result<K, StoreError> {
        let value = pruned(&resource_name::<K>(), answer);
        if let Some((kind, coverage)) = self.coverage_of::<K>() {
            let meta = &value["metadata"];
            // Marked for deletion with no finalizer left: the API server deleted it.
            let gone =
                meta["deletionTimestamp"].is_string() && meta["finalizers"].as_array().is_none_or(|f| f.is_empty());
            let mut cache = self.write_cache();
            if gone {
                let (ns, name) =
                    (meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default());
                cache.deleted_here(&kind.resource(), ns, name);
            } else if belongs(coverage, &value) {
                cache.put(kind, &value, Source::OwnWrite);
            } else {
                // Out of the watch's selection now (a label removed): read through the API from now on.
                let (ns, name) =
                    (meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default());
                cache.remove(&kind.resource(), ns, name);
            }
        }
        serde_json::from_value(value)
            .map_err(|e| StoreError::backend_in(format!("reading a {}", resource_name::<K>()), e))
    }

    /// Reads a cached object from the API into the cache after a write of it was refused as a
    /// conflict: the copy the write started from is older than the API's, and the watch may not be
    /// about to bring the newer one (module docs of [`cache`]), so the caller's retry starts from what
    /// the API has. A failed read is left to the watch.
    async fn refresh<K: Object>(&self, ns: &str, name: &str) {
        let Some((kind, coverage)) = self.coverage_of::<K>() else { return };
        match self.get_from_api::<K>(ns, name).await {
            Ok(Some(live)) => {
                let value = pruned(&resource_name::<K>(), live);
                if belongs(coverage, &value) {
                    self.write_cache().put(kind, &value, Source::Refresh);
                }
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(
                "reading {} {ns}/{name} again after a conflict: {}",
                resource_name::<K>(),
                crate::errors::chain(&e)
            ),
        }
    }

    /// Announces a write of a cached object to the cache for as long as the guard lives (module docs
    /// of [`cache`]: the watch may deliver the written version before the answer arrives).
    fn writing<K: Object>(&self, ns: &str, name: &str) -> Option<WriteInFlight> {
        self.coverage_of::<K>()?;
        let key = (resource_name::<K>(), ns.to_string(), name.to_string());
        self.write_cache().write_begins(&key.0, &key.1, &key.2);
        Some(WriteInFlight { cache: Arc::downgrade(&self.inner.cache), key })
    }

    async fn get_from_api<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        let ns = (!namespace.is_empty()).then_some(namespace);
        let req = collection::<K>(ns).get(name, &Default::default()).map_err(request_error)?;
        match self.inner.client.request::<Value>(req).await {
            Ok(obj) => Ok(Some(obj)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(store_error::<K>(name, e)),
        }
    }

    async fn list_from_api<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let req = collection::<K>(namespace).list(&ListParams::default()).map_err(request_error)?;
        let list: ObjectList<Value> = self.inner.client.request(req).await.map_err(|e| store_error::<K>("", e))?;
        super::count_read(list.items.len());
        list.items.into_iter().map(decode).collect()
    }

    /// Writes `obj` (its status with `status`, everything else without) as a merge patch of what
    /// differs from the object as the cache holds it (or as the API has it, when the cache does not
    /// hold the version the caller read), locked to `obj`'s resourceVersion (or, without one, to the
    /// latest known, retried if someone wrote in between).
    async fn patch_over_live<K: Object>(&self, obj: &K, status: bool) -> Result<K, StoreError> {
        let (ns, name) = object_namespace(obj)?;
        let new = serde_json::to_value(obj).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let want_rv = obj.meta().resource_version.clone();
        let mut use_cache = true;
        for _ in 0..5 {
            let held = if use_cache && self.coverage_of::<K>().is_some() {
                self.read_cache().get_with_version(&resource_name::<K>(), &ns, &name)
            } else {
                None
            };
            let (typed, live_rv): (K, String) = match held {
                Some((h, rv)) if !rv.is_empty() && want_rv.as_ref().is_none_or(|want| *want == rv) => (h.object()?, rv),
                // Not cached, or the caller read another version than the cache holds (older or
                // newer: versions are opaque, so the API says which): ask the API.
                _ => {
                    let live =
                        self.get_from_api::<K>(&ns, &name).await?.ok_or_else(|| StoreError::not_found::<K>(&name))?;
                    let live_rv = live["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
                    if want_rv.as_ref().is_some_and(|want| *want != live_rv) {
                        return Err(conflict::<K>(&name));
                    }
                    (decode(live)?, live_rv)
                }
            };
            let known = serde_json::to_value(&typed).map_err(StoreError::backend)?;
            let mut patch = if status {
                let changed = crate::store::json::diff(&known["status"], &new["status"]);
                serde_json::json!({ "status": changed })
            } else {
                crate::store::json::diff(&without_status(known.clone()), &without_status(new.clone()))
            };
            let unchanged = patch.as_object().is_some_and(|p| p.is_empty())
                || (status && patch["status"].as_object().is_some_and(|p| p.is_empty()));
            if unchanged {
                return Ok(typed);
            }
            // What the server owns is never ours to patch (an object built from scratch lacks it).
            if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                for key in ["uid", "creationTimestamp", "generation", "deletionTimestamp", "managedFields", "selfLink"]
                {
                    meta.remove(key);
                }
            }
            patch["metadata"]["resourceVersion"] = Value::String(live_rv);
            let pp = PatchParams::default();
            let req = if status {
                collection::<K>(Some(&ns)).patch_subresource("status", &name, &pp, &Patch::Merge(&patch))
            } else {
                collection::<K>(Some(&ns)).patch(&name, &pp, &Patch::Merge(&patch))
            }
            .map_err(request_error)?;
            let writing = self.writing::<K>(&ns, &name);
            match self.inner.client.request::<Value>(req).await.map_err(|e| store_error::<K>(&name, e)) {
                Err(e) if e.is_conflict() && want_rv.is_none() => use_cache = false,
                Err(e) if e.is_conflict() => {
                    drop(writing);
                    self.refresh::<K>(&ns, &name).await;
                    return Err(e);
                }
                other => return self.written(other?),
            }
        }
        Err(conflict::<K>(&name))
    }
}

#[cfg(any(test, feature = "testkit"))]
impl KubeStore {
    /// Waits until the cache holds what `backing` (the store behind a test's API server) holds, in
    /// every watched kind: for a test that writes behind the controllers' back and then reconciles,
    /// as a controller does once the watch has brought it the change. Panics after 10 s.
    pub async fn caught_up_with(&self, backing: &crate::store::sqlite::SqliteStore) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let behind = self.inner.watched.iter().find(|(res, (_, coverage))| {
                let mut want: HashMap<(String, String), String> = HashMap::new();
                for (ns, name, text, rv) in backing.list_raw_keyed(res, None) {
                    let in_scope = *coverage == Coverage::All
                        || serde_json::from_slice::<Value>(&text).is_ok_and(|v| belongs(*coverage, &v));
                    if in_scope {
                        want.insert((ns, name), rv.to_string());
                    }
                }
                self.read_cache().versions(res) != want
            });
            let Some((res, _)) = behind else { return };
            assert!(std::time::Instant::now() < deadline, "the cache of {res} did not catch up within 10 s");
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}

#[cfg(any(test, feature = "testkit"))]
impl KubeStore {
    /// Waits until the cache holds what the cluster `admin` reaches holds (namespaced kinds in
    /// `namespace`, as [`KubeStore::start_in`] watches them), in every watched kind, read with a LIST
    /// per kind: [`KubeStore::caught_up_with`] for a real API server, whose storage a test cannot
    /// read. Panics after 20 s.
    pub async fn caught_up_with_cluster(&self, admin: &kube::Client, namespace: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let mut behind = None;
            for (res, (kind, coverage)) in &self.inner.watched {
                let api: kube::Api<raw::RawObject> = if kind.namespaced() {
                    kube::Api::namespaced_with(admin.clone(), namespace, &api_resource(*kind))
                } else {
                    kube::Api::all_with(admin.clone(), &api_resource(*kind))
                };
                let listed = api.list(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing {res}: {e}"));
                let want: HashMap<(String, String), String> = listed
                    .items
                    .into_iter()
                    .filter(|o| *coverage == Coverage::All || belongs(*coverage, &o.value))
                    .map(|o| {
                        let m = o.metadata;
                        let rv = m.resource_version.unwrap_or_default();
                        ((m.namespace.unwrap_or_default(), m.name.unwrap_or_default()), rv)
                    })
                    .collect();
                if self.read_cache().versions(res) != want {
                    behind = Some(res.clone());
                    break;
                }
            }
            let Some(res) = behind else { return };
            assert!(std::time::Instant::now() < deadline, "the cache of {res} did not catch up within 20 s");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

/// A re-list under way: the versions the cache held when it began, and the objects it has shown.
type Relist = (HashMap<(String, String), String>, HashSet<(String, String)>);

/// One kind's watch: keeps the cache of that kind and announces each change.
struct Watch {
    kind: Kind,
    /// The one namespace watched (None: all of them).
    namespace: Option<String>,
    events: broadcast::Sender<ChangeEvent>,
    changes: Arc<super::ChangeCounts>,
    cache: std::sync::Weak<RwLock<ObjectCache>>,
    usage: Arc<ClusterUsage>,
}

impl Watch {
    fn announce(&self, ns: &str, name: &str, status_only: bool, resource_version: Option<String>) {
        let resource = self.kind.resource();
        self.changes.bump(&resource, ns, name);
        super::CHANGES_FED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.events.send(ChangeEvent {
            resource,
            namespace: ns.to_string(),
            name: name.to_string(),
            status_only,
            resource_version,
        });
    }

    /// Watches the kind (kube-rs's `watcher`: it lists, then watches from there, and lists again
    /// after a 410 Gone or a dropped connection, backing off); `ready` fires after the first full
    /// list. A re-list announces what changed meanwhile, including objects deleted while nobody
    /// watched.
    async fn run(self, client: kube::Client, ready: tokio::sync::oneshot::Sender<()>) {
        let kind = self.kind;
        let resource = kind.resource();
        // Kinds without a generation (Secrets) have no status: every change counts.
        let has_status = kind != Kind::Secret;
        let api: kube::Api<raw::RawObject> = match &self.namespace {
            Some(ns) => kube::Api::namespaced_with(client, ns, &api_resource(kind)),
            None => kube::Api::all_with(client, &api_resource(kind)),
        };
        let mut config = watcher::Config::default();
        if coverage(kind) == Coverage::Labelled {
            config = config.labels(&format!("{WATCH_LABEL}=true"));
        }
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        // What was announced of each object; a (namespace, name) key.
        let mut known: HashMap<(String, String), Seen> = HashMap::new();
        // During a re-list: the versions held when it began, and the objects it has shown.
        let mut relist: Option<Relist> = None;
        let mut ready = Some(ready);
        let mut lists = 0u64;
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(kind = kind.name(), error = %crate::errors::chain(&e), "watch failed; retrying");
                    continue;
                }
            };
            let Some(cache) = self.cache.upgrade() else { return };
            match event {
                watcher::Event::Init => {
                    lists += 1;
                    if lists > 1 {
                        self.usage.watch_restarted(kind);
                    }
                    let mut c = cache.write_locked();
                    c.relist_begins(&resource);
                    relist = Some((c.versions(&resource), HashSet::new()));
                }
                watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                    let raw::RawObject { metadata: meta, value } = obj;
                    let key = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
                    let value = pruned(&resource, value);
                    cache.write_locked().put(kind, &value, Source::Watch);
                    if let Some((_, shown)) = relist.as_mut() {
                        shown.insert(key.clone());
                    }
                    let now = seen(&meta);
                    match known.insert(key.clone(), now.clone()) {
                        Some(b) if b == now => {}
                        Some(b) => {
                            let status_only = has_status && b.fingerprint == now.fingerprint;
                            self.announce(&key.0, &key.1, status_only, now.resource_version);
                        }
                        None => self.announce(&key.0, &key.1, false, now.resource_version),
                    }
                }
                watcher::Event::InitDone => {
                    if let Some((held, shown)) = relist.take() {
                        let mut cache = cache.write_locked();
                        // Gone while nobody watched, unless this process wrote it since the list began.
                        for (key, rv) in held {
                            if !shown.contains(&key)
                                && cache.get_with_version(&resource, &key.0, &key.1).is_some_and(|(_, v)| v == rv)
                            {
                                cache.remove(&resource, &key.0, &key.1);
                            }
                        }
                        cache.relisted(&resource);
                        drop(cache);
                        let gone: Vec<_> = known.keys().filter(|k| !shown.contains(*k)).cloned().collect();
                        for key in gone {
                            known.remove(&key);
                            self.announce(&key.0, &key.1, false, None);
                        }
                    }
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                }
                watcher::Event::Delete(obj) => {
                    let meta = &obj.metadata;
                    let key = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
                    let uid = meta.uid.clone().unwrap_or_default();
                    cache.write_locked().deletion_seen(&resource, &key.0, &key.1, &uid);
                    known.remove(&key);
                    self.announce(&key.0, &key.1, false, None);
                }
            }
        }
    }
}

impl Store for KubeStore {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let coverage = self.coverage_of::<K>().map(|(_, c)| c);
        if coverage.is_some() {
            let held = self.read_cache().get(&resource_name::<K>(), namespace, name);
            match (held, coverage) {
                (Some(h), _) => {
                    super::count_read(1);
                    return h.object().map(Some);
                }
                (None, Some(Coverage::All)) => return Ok(None),
                _ => {}
            }
        }
        self.get_from_api::<K>(namespace, name).await?.map(decode).transpose()
    }

    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        if let Some((_, Coverage::All)) = self.coverage_of::<K>() {
            let held = self.read_cache().list(&resource_name::<K>(), namespace);
            super::count_read(held.len());
            return held.iter().map(|c| c.object()).collect();
        }
        self.list_from_api(namespace).await
    }

    async fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        mut f: impl FnMut(&K) -> T + Send,
    ) -> Result<Vec<T>, StoreError> {
        if let Some((_, Coverage::All)) = self.coverage_of::<K>() {
            let held = self.read_cache().list(&resource_name::<K>(), namespace);
            super::count_read(held.len());
            return held.iter().map(|c| c.with_object(&mut f)).collect();
        }
        Ok(self.list_from_api::<K>(namespace).await?.iter().map(f).collect())
    }

    /// From the reference index when the cache holds every object of the kind; else listed from the
    /// API and filtered.
    async fn list_referencing<K: Object>(
        &self,
        namespace: Option<&str>,
        relation: Ref,
        value: &str,
    ) -> Result<Vec<K>, StoreError> {
        debug_assert_eq!(relation.kind().resource(), resource_name::<K>());
        let Some((_, Coverage::All)) = self.coverage_of::<K>() else {
            let mut out = Vec::new();
            for obj in self.list_from_api::<K>(namespace).await? {
                let json = serde_json::to_value(&obj).map_err(StoreError::backend)?;
                if relation.values(&json).iter().any(|v| v == value) {
                    out.push(obj);
                }
            }
            return Ok(out);
        };
        let held = self.read_cache().referencing(relation, namespace, value);
        super::count_read(held.len());
        held.iter().map(|c| c.object()).collect()
    }

    async fn any<K: Object>(&self, namespace: Option<&str>) -> Result<bool, StoreError> {
        if let Some((_, Coverage::All)) = self.coverage_of::<K>() {
            return Ok(self.read_cache().any(&resource_name::<K>(), namespace));
        }
        // One item is enough to know: the API server stops there.
        let req = collection::<K>(namespace).list(&ListParams::default().limit(1)).map_err(request_error)?;
        let list: ObjectList<Value> = self.inner.client.request(req).await.map_err(|e| store_error::<K>("", e))?;
        Ok(!list.items.is_empty())
    }

    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        if let Some((_, coverage)) = self.coverage_of::<K>() {
            let held = self.read_cache().by_uid(&resource_name::<K>(), uid);
            match (held, coverage) {
                (Some(h), _) => {
                    super::count_read(1);
                    return h.object().map(Some);
                }
                (None, Coverage::All) => return Ok(None),
                _ => {}
            }
        }
        // Not watched here: look through all of them.
        Ok(self.list_from_api::<K>(None).await?.into_iter().find(|o| o.meta().uid.as_deref() == Some(uid)))
    }

    async fn create<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let (ns, name) = object_namespace(obj)?;
        let body = serde_json::to_vec(obj).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let req = collection::<K>(Some(&ns)).create(&PostParams::default(), body).map_err(request_error)?;
        let _writing = self.writing::<K>(&ns, &name);
        let answer = self.inner.client.request::<Value>(req).await.map_err(|e| store_error::<K>(&name, e))?;
        self.written(answer)
    }

    async fn update<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        self.patch_over_live(obj, false).await
    }

    async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        self.patch_over_live(obj, true).await
    }

    async fn delete<K: Object>(&self, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        let ns = (!namespace.is_empty()).then_some(namespace);
        let req = collection::<K>(ns).delete(name, &DeleteParams::default()).map_err(request_error)?;
        let _writing = self.writing::<K>(namespace, name);
        let answer = self.inner.client.request_status::<Value>(req).await.map_err(|e| store_error::<K>(name, e))?;
        match answer {
            // Some servers answer an immediate deletion with the object as it was; only an object still
            // marked and holding finalizers is pending.
            Either::Left(obj)
                if obj["metadata"]["deletionTimestamp"].is_string()
                    && obj["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) =>
            {
                self.written::<K>(obj)?;
                Ok(Deletion::Pending)
            }
            _ => {
                if self.coverage_of::<K>().is_some() {
                    self.write_cache().deleted_here(&resource_name::<K>(), namespace, name);
                }
                Ok(Deletion::Deleted)
            }
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.inner.events.subscribe()
    }

    fn change_count(&self, resource: &str) -> Option<u64> {
        self.inner.watched.contains_key(resource).then(|| self.inner.changes.count(resource))
    }

    fn changes_since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        if !self.inner.watched.contains_key(resource) {
            return None;
        }
        self.inner.changes.since(resource, since)
    }
}

#[cfg(test)]
mod tests {
    //! The store's contract through the Kubernetes API, against the loopback API server.
    use std::time::Duration;

    use super::*;
    use crate::resources::InfraEnv;
    use crate::store::sqlite::SqliteStore;
    use crate::testkit::hub::ApiServer;

    async fn cluster() -> (ApiServer, KubeStore) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        let store = KubeStore::start(server.client(), &Kind::ALL).await;
        (server, store)
    }

    fn infraenv(name: &str) -> InfraEnv {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"pullSecretRef": {"name": "ps"}}}))
        .unwrap()
    }

    async fn next_event(rx: &mut broadcast::Receiver<ChangeEvent>) -> ChangeEvent {
        tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("a change event in time").unwrap()
    }

    #[tokio::test]
    async fn writes_go_through_the_api_with_its_semantics() {
        let (server, store) = cluster().await;
        let created = store.create(&infraenv("a")).await.unwrap();
        assert_eq!(created.metadata.generation, Some(1));
        let again = store.create(&infraenv("a")).await.unwrap_err();
        assert!(matches!(again, StoreError::AlreadyExists { .. }), "{again:?}");

        // A spec change moves the generation; a write naming an old resourceVersion is refused.
        let mut changed = created.clone();
        changed.spec.ssh_authorized_key = Some("ssh-ed25519 AAAA".into());
        let updated = store.update(&changed).await.unwrap();
        assert_eq!(updated.metadata.generation, Some(2));
        let stale = store.update(&changed).await.unwrap_err();
        assert!(stale.is_conflict(), "{stale:?}");

        // The status goes through the status subresource only.
        let mut with_status = updated.clone();
        with_status.status.get_or_insert_default().iso_download_url = "http://x/iso".into();
        let stored = store.update_status(&with_status).await.unwrap();
        assert_eq!(stored.metadata.generation, Some(2));
        let read: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(read.status.as_ref().unwrap().iso_download_url, "http://x/iso");
        assert!(
            server
                .requests()
                .iter()
                .any(|r| r
                    .starts_with("PATCH /apis/agent-install.openshift.io/v1beta1/namespaces/ns/infraenvs/a/status"))
        );

        let requests = server.requests().len();
        assert!(store.any::<InfraEnv>(Some("ns")).await.unwrap());
        assert!(!store.any::<InfraEnv>(Some("other")).await.unwrap());
        assert_eq!(server.requests().len(), requests, "answered from the cache");

        let uid = read.metadata.uid.clone().unwrap();
        let by_uid: InfraEnv = store.get_by_uid(&uid).await.unwrap().unwrap();
        assert_eq!(by_uid.metadata.name.as_deref(), Some("a"));

        // Finalizers hold a deletion until they are removed.
        let mut held = read.clone();
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        let held = store.update(&held).await.unwrap();
        assert_eq!(store.delete::<InfraEnv>("ns", "a").await.unwrap(), Deletion::Pending);
        let mut marked: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert!(marked.metadata.deletion_timestamp.is_some());
        assert!(marked.metadata.resource_version != held.metadata.resource_version);
        marked.metadata.finalizers = None;
        let _ = store.update(&marked).await;
        assert!(store.get::<InfraEnv>("ns", "a").await.unwrap().is_none());
        let missing = store.delete::<InfraEnv>("ns", "a").await.unwrap_err();
        assert!(missing.is_not_found(), "{missing:?}");
        assert_eq!(missing.to_string(), "infraenvs.agent-install.openshift.io \"a\" not found");
    }

    #[tokio::test]
    async fn updates_keep_the_fields_our_types_do_not_know() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster = SqliteStore::open_in_memory().unwrap();
        let server = ApiServer::start(cluster.clone()).await;
        // A hub whose CRDs are newer than ours: it keeps fields our schema lacks.
        server.api().keep_unknown_fields(true);
        let store = KubeStore::start(server.client(), &[]).await;
        // Written by a newer version of the CRD's owner: fields our InfraEnv type does not have.
        let res = "infraenvs.agent-install.openshift.io";
        let doc = serde_json::json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": "n", "namespace": "ns"},
            "spec": {"pullSecretRef": {"name": "ps"}, "futureField": {"a": 1}}});
        cluster.create_raw(res, "ns", doc, true).await.unwrap();
        let live = cluster.get_raw(res, "ns", "n").unwrap().unwrap();
        let rv = live["metadata"]["resourceVersion"].as_str().map(str::to_string);
        cluster.replace_status_raw(res, "ns", "n", Some(serde_json::json!({"futureStatus": "x"})), rv).await.unwrap();

        let mut ie: InfraEnv = store.get("ns", "n").await.unwrap().unwrap();
        ie.spec.ssh_authorized_key = Some("ssh-ed25519 AAAA".into());
        let ie = store.update(&ie).await.unwrap();
        let mut ie = ie.clone();
        ie.status.get_or_insert_default().iso_download_url = "http://x/iso".into();
        store.update_status(&ie).await.unwrap();

        let raw = cluster.get_raw(res, "ns", "n").unwrap().unwrap();
        assert_eq!(raw["spec"]["sshAuthorizedKey"], "ssh-ed25519 AAAA");
        assert_eq!(raw["spec"]["futureField"], serde_json::json!({"a": 1}));
        assert_eq!(raw["status"]["isoDownloadURL"], "http://x/iso");
        assert_eq!(raw["status"]["futureStatus"], "x");
        assert!(server.requests().iter().all(|r| !r.starts_with("PUT")), "{:?}", server.requests());
    }

    #[tokio::test]
    async fn watches_announce_changes_and_whether_only_the_status_moved() {
        let (_server, store) = cluster().await;
        let mut rx = store.subscribe();
        let created = store.create(&infraenv("w")).await.unwrap();
        let e = next_event(&mut rx).await;
        assert_eq!(
            (e.resource.as_str(), e.namespace.as_str(), e.name.as_str()),
            ("infraenvs.agent-install.openshift.io", "ns", "w")
        );
        assert!(!e.status_only);
        assert_eq!(e.resource_version, created.metadata.resource_version);

        let mut s = created.clone();
        s.status.get_or_insert_default().iso_download_url = "http://x/iso".into();
        let written = store.update_status(&s).await.unwrap();
        let e = next_event(&mut rx).await;
        assert!(e.status_only, "{e:?}");
        assert_eq!(e.resource_version, written.metadata.resource_version);

        let mut labelled = written.clone();
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        store.update(&labelled).await.unwrap();
        assert!(!next_event(&mut rx).await.status_only);

        store.delete::<InfraEnv>("ns", "w").await.unwrap();
        let e = next_event(&mut rx).await;
        assert_eq!((e.name.as_str(), e.resource_version), ("w", None));
    }

    #[tokio::test]
    async fn watches_list_in_pages() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        let writer = KubeStore::start(server.client(), &[]).await;
        // More than a page of kube-rs's watcher (500).
        for i in 0..520 {
            writer.create(&infraenv(&format!("ie-{i:04}"))).await.unwrap();
        }
        let store = KubeStore::start(server.client(), &[Kind::InfraEnv]).await;
        assert_eq!(store.usage().cached_objects(), [("infraenvs", 520)], "the first list read every page");
        assert!(server.requests().iter().any(|r| r.contains("continue=")), "{:?}", server.requests());
        assert_eq!(store.list::<InfraEnv>(None).await.unwrap().len(), 520);
    }

    #[tokio::test]
    async fn objects_that_existed_before_the_store_started_are_known_by_uid() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        let first = KubeStore::start(server.client(), &[]).await;
        let created = first.create(&infraenv("early")).await.unwrap();
        let store = KubeStore::start(server.client(), &[Kind::InfraEnv]).await;
        let uid = created.metadata.uid.unwrap();
        let requests = server.requests().len();
        assert!(store.get_by_uid::<InfraEnv>(&uid).await.unwrap().is_some(), "the first list filled the uid index");
        assert_eq!(server.requests().len(), requests, "read from the cache");
    }

    fn agent(name: &str, cd: Option<&str>, mac: &str) -> crate::resources::Agent {
        let mut spec = serde_json::json!({"approved": false});
        if let Some(cd) = cd {
            spec["clusterDeploymentName"] = serde_json::json!({"name": cd, "namespace": "ns"});
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "ns", "labels": {crate::resources::INFRAENV_NAME_LABEL: "ie"}},
            "spec": spec, "status": {"inventory": {"interfaces": [{"macAddress": mac}]}}}))
        .unwrap()
    }

    /// Requests of the server's log that read (GET, LIST), after the first `skip`.
    fn reads_after(server: &ApiServer, skip: usize) -> Vec<String> {
        server.requests().into_iter().skip(skip).filter(|r| r.starts_with("GET") && !r.contains("watch=")).collect()
    }

    #[tokio::test]
    async fn reads_come_from_the_cache_and_a_reconcile_reads_its_own_writes() {
        let (server, store) = cluster().await;
        let before = server.requests().len();
        let created = store.create(&infraenv("a")).await.unwrap();
        // No watch event is needed for this process to read what it wrote: stop the watches.
        for w in &store.inner.watches {
            w.abort();
        }
        let read: InfraEnv = store.get("ns", "a").await.unwrap().expect("its own create, read back");
        assert_eq!(read.metadata.resource_version, created.metadata.resource_version);
        let mut changed = read.clone();
        changed.spec.ssh_authorized_key = Some("ssh-ed25519 AAAA".into());
        let updated = store.update(&changed).await.unwrap();
        let read: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(read.metadata.resource_version, updated.metadata.resource_version);
        assert_eq!(read.spec.ssh_authorized_key.as_deref(), Some("ssh-ed25519 AAAA"));
        // A write from the version read is locked to it: the next write from the older one is refused.
        // Versions are opaque, so the cache cannot tell the older from a newer one it has not seen:
        // the API server's object decides, read once, and nothing is written.
        let requests = server.requests().len();
        assert!(store.update(&changed).await.unwrap_err().is_conflict());
        let asked: Vec<String> = server.requests().into_iter().skip(requests).collect();
        assert_eq!(asked.len(), 1, "one read of the live object: {asked:?}");
        assert!(asked[0].starts_with("GET "), "{asked:?}");
        let mut status = read.clone();
        status.status.get_or_insert_default().iso_download_url = "http://x/iso".into();
        store.update_status(&status).await.unwrap();
        let read: InfraEnv = store.get_by_uid(created.metadata.uid.as_deref().unwrap()).await.unwrap().unwrap();
        assert_eq!(read.status.unwrap().iso_download_url, "http://x/iso");
        // Deleted here: gone for this process at once.
        store.delete::<InfraEnv>("ns", "a").await.unwrap();
        assert!(store.get::<InfraEnv>("ns", "a").await.unwrap().is_none());
        assert!(store.list::<InfraEnv>(None).await.unwrap().is_empty());
        // Every read came from memory but the one of the refused write: the API server saw writes.
        assert_eq!(reads_after(&server, before).len(), 1, "{:?}", reads_after(&server, before));
        // Someone else's write is seen through the watch only (none runs now): the cache is what
        // this store reads.
        let mut other = infraenv("b");
        other.metadata.namespace = Some("ns".into());
        let res = "infraenvs.agent-install.openshift.io";
        server.api().store().create_raw(res, "ns", serde_json::to_value(&other).unwrap(), true).await.unwrap();
        assert!(store.get::<InfraEnv>("ns", "b").await.unwrap().is_none());
    }

    /// A write refused as a conflict proves the cache's copy older than the API's: it is read again,
    /// so that the retry starts from the API's version even if the watch never brings it (no watch
    /// runs here).
    #[tokio::test]
    async fn a_write_refused_as_a_conflict_reads_the_object_again() {
        let (server, store) = cluster().await;
        let created = store.create(&infraenv("a")).await.unwrap();
        for w in &store.inner.watches {
            w.abort();
        }
        let backing = server.api().store();
        let mut theirs: InfraEnv = backing.get("ns", "a").await.unwrap().unwrap();
        theirs.spec.ssh_authorized_key = Some("ssh-ed25519 THEIRS".into());
        let theirs = backing.update(&theirs).await.unwrap();

        let mut ours = created.clone();
        ours.metadata.labels = Some([("ours".to_string(), "1".to_string())].into());
        assert!(store.update(&ours).await.unwrap_err().is_conflict());
        let read: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(read.metadata.resource_version, theirs.metadata.resource_version, "read again after the conflict");
        assert_eq!(read.spec.ssh_authorized_key.as_deref(), Some("ssh-ed25519 THEIRS"));
        let mut again = read.clone();
        again.metadata.labels = ours.metadata.labels.clone();
        let written = store.update(&again).await.unwrap();
        assert_eq!(written.spec.ssh_authorized_key.as_deref(), Some("ssh-ed25519 THEIRS"));
    }

    #[tokio::test]
    async fn references_are_looked_up_in_the_index() {
        let (server, store) = cluster().await;
        let mut a3 = None;
        for (name, cd, mac) in [
            ("a1", Some("cd1"), "aa:bb:cc:00:00:01"),
            ("a2", Some("cd1"), "aa:bb:cc:00:00:02"),
            ("a3", None, "aa:bb:cc:00:00:03"),
        ] {
            let a = agent(name, cd, mac);
            // A create leaves the status out (the status subresource writes it).
            let mut created = store.create(&a).await.unwrap();
            created.status = a.status.clone();
            a3 = Some(store.update_status(&created).await.unwrap());
        }
        let a3 = a3.unwrap();
        let names = |v: Vec<crate::resources::Agent>| {
            let mut n: Vec<String> = v.into_iter().filter_map(|a| a.metadata.name).collect();
            n.sort();
            n
        };
        let before = server.requests().len();
        let cd1 = |ns| store.list_referencing(ns, Ref::AgentClusterDeployment, "ns/cd1");
        assert_eq!(names(cd1(None).await.unwrap()), ["a1", "a2"]);
        assert_eq!(
            names(store.list_referencing(Some("ns"), Ref::AgentMac, "aa:bb:cc:00:00:03").await.unwrap()),
            ["a3"]
        );
        assert_eq!(names(cd1(Some("other")).await.unwrap()), Vec::<String>::new());
        assert_eq!(names(store.list_referencing(None, Ref::AgentInfraEnv, "ie").await.unwrap()), ["a1", "a2", "a3"]);
        // One relation's value is not another's.
        assert!(
            store
                .list_referencing::<crate::resources::Agent>(None, Ref::AgentInfraEnv, "cd1")
                .await
                .unwrap()
                .is_empty()
        );
        // Bound elsewhere: the index follows.
        let mut moved = a3.clone();
        moved.spec.cluster_deployment_name =
            serde_json::from_value(serde_json::json!({"name": "cd1", "namespace": "ns"})).unwrap();
        store.update(&moved).await.unwrap();
        assert_eq!(names(cd1(None).await.unwrap()), ["a1", "a2", "a3"]);
        assert_eq!(reads_after(&server, before), Vec::<String>::new());
    }

    #[tokio::test]
    async fn an_expired_watch_lists_again_and_catches_up_with_what_it_missed() {
        let (server, store) = cluster().await;
        store.create(&infraenv("kept")).await.unwrap();
        store.create(&infraenv("removed")).await.unwrap();
        let mut rx = store.subscribe();
        // The API server's watch cache starts over (410 Gone for every watch), and it cannot be
        // reached for a while: meanwhile objects change behind the store's back.
        server.set_down(true);
        server.api().compact_watches();
        let res = "infraenvs.agent-install.openshift.io";
        let backing = server.api().store();
        backing.delete_raw(res, "ns", "removed").await.unwrap();
        let added = serde_json::to_value(infraenv("added")).unwrap();
        backing.create_raw(res, "ns", added, true).await.unwrap();
        // Reads go on from memory while the server is down.
        assert!(store.get::<InfraEnv>("ns", "removed").await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.set_down(false);
        let mut seen = HashSet::new();
        while !(seen.contains("removed") && seen.contains("added")) {
            let e = next_event(&mut rx).await;
            seen.insert(e.name);
        }
        let mut names: Vec<String> =
            store.list::<InfraEnv>(None).await.unwrap().into_iter().filter_map(|i| i.metadata.name).collect();
        names.sort();
        assert_eq!(names, ["added", "kept"]);
        assert!(store.usage().watch_restarts().contains(&("infraenvs", 1)), "{:?}", store.usage().watch_restarts());
        assert!(
            server.requests().iter().any(|r| r.starts_with("GET") && !r.contains("watch=") && r.contains("/infraenvs"))
        );
    }

    #[tokio::test]
    async fn only_labelled_secrets_are_watched_and_others_are_read_through_the_api() {
        use k8s_openapi::api::core::v1::Secret;
        let (server, store) = cluster().await;
        let secret = |name: &str, labelled: bool| -> Secret {
            let mut s: Secret = serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "ns"}, "stringData": {"k": "v"}}))
            .unwrap();
            if labelled {
                s.metadata.labels = Some([(WATCH_LABEL.to_string(), "true".to_string())].into());
            }
            s
        };
        store.create(&secret("plain", false)).await.unwrap();
        store.create(&secret("watched", true)).await.unwrap();
        assert!(
            server
                .requests()
                .iter()
                .any(|r| r.contains("/secrets?")
                    && r.contains("labelSelector=agent-install.openshift.io%2Fwatch%3Dtrue")),
            "{:?}",
            server.requests()
        );
        let before = server.requests().len();
        assert!(store.get::<Secret>("ns", "watched").await.unwrap().is_some());
        assert_eq!(reads_after(&server, before), Vec::<String>::new(), "a watched Secret is read from memory");
        assert!(store.get::<Secret>("ns", "plain").await.unwrap().is_some());
        assert!(store.get::<Secret>("ns", "missing").await.unwrap().is_none());
        assert_eq!(reads_after(&server, before).len(), 2, "the others with a GET each");
        assert_eq!(store.usage().requests_of("get"), 2);
    }
}
