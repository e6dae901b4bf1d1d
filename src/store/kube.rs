//! The Kubernetes backend of [`Store`]: the resources live in a cluster, reached through kube-rs.
//!
//! Reads and writes are API calls (GET, LIST, POST, merge PATCH of the object or of `/status`,
//! DELETE), so a reconcile reads what the API server has, as it would through the SQLite store, and a
//! stale write is refused with a conflict the controllers already handle.
//!
//! Updates are JSON merge patches of what the controller changed, computed against the live object
//! as our types see it and locked to the resourceVersion the controller read: a field our types do not
//! know (a newer metal3 or assisted CRD than ours) is never in the patch, so it survives, where a PUT
//! of our typed object would drop it. Changes come from one metadata-only watch per kind (kube-rs's
//! `metadata_watcher`, which re-lists and backs off by itself): enough to know which object changed and
//! whether only its status did, without holding every object's body in memory.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use either::Either;
use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, ObjectList, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::broadcast;

use super::{ChangeEvent, Deletion, Object, Store, StoreError, resource_name};
use crate::resources::Kind;

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

type ObjKey = (String, String, String);

struct Inner {
    client: kube::Client,
    events: broadcast::Sender<ChangeEvent>,
    /// metadata.uid → (resource, namespace, name), from the watches: InfraEnvs are looked up by uid on
    /// every image request.
    uids: Arc<RwLock<HashMap<String, ObjKey>>>,
    watches: Vec<tokio::task::AbortHandle>,
    /// Resource names of the watched kinds: the only ones whose changes are announced.
    announced: Vec<String>,
    changes: Arc<super::ChangeCounts>,
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
            _ => StoreError::Backend(format!("{} {}: {}", status.code, status.reason, status.message)),
        },
        other => StoreError::Backend(other.to_string()),
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

/// An object of kind K from the API's JSON, without the fields our types do not know (see
/// [`crate::resources::crds::prune_unknown_fields`]).
fn decode<K: Object>(mut v: Value) -> Result<K, StoreError> {
    crate::resources::crds::prune_unknown_fields(&resource_name::<K>(), &mut v);
    serde_json::from_value(v).map_err(|e| StoreError::Backend(format!("reading a {}: {e}", resource_name::<K>())))
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

impl KubeStore {
    /// Writes `obj` (its status with `status`, everything else without) as a merge patch of what
    /// differs from the live object, locked to `obj`'s resourceVersion (or, without one, to the live
    /// object's, retried if someone wrote in between).
    async fn patch_over_live<K: Object>(&self, obj: &K, status: bool) -> Result<K, StoreError> {
        let (ns, name) = object_namespace(obj)?;
        let backend = |e: kube::core::request::Error| StoreError::Backend(e.to_string());
        let new = serde_json::to_value(obj).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let want_rv = obj.meta().resource_version.clone();
        for _ in 0..5 {
            let get = collection::<K>(Some(&ns)).get(&name, &Default::default()).map_err(backend)?;
            let live: Value = self.inner.client.request(get).await.map_err(|e| store_error::<K>(&name, e))?;
            let live_rv = live["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
            if want_rv.as_ref().is_some_and(|want| *want != live_rv) {
                return Err(conflict::<K>(&name));
            }
            let typed: K = decode(live)?;
            let known = serde_json::to_value(&typed).map_err(|e| StoreError::Backend(e.to_string()))?;
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
            .map_err(backend)?;
            match self.inner.client.request::<Value>(req).await.map_err(|e| store_error::<K>(&name, e)) {
                Err(e) if e.is_conflict() && want_rv.is_none() => continue,
                other => return decode(other?),
            }
        }
        Err(conflict::<K>(&name))
    }

    /// A store over the cluster `client` reaches, with change events for `kinds` (the kinds whose
    /// controllers run here). Returns once every watch has listed its kind, so that a controller
    /// starting now and listing what exists misses nothing that follows.
    pub async fn start(client: kube::Client, kinds: &[Kind]) -> KubeStore {
        let events = broadcast::channel(65536).0;
        let changes: Arc<super::ChangeCounts> = Arc::default();
        let uids: Arc<RwLock<HashMap<String, ObjKey>>> = Arc::default();
        let mut watches = Vec::new();
        let mut listed = Vec::new();
        for &kind in kinds {
            let (ready, ready_rx) = tokio::sync::oneshot::channel();
            listed.push(ready_rx);
            let task = tokio::spawn(watch_kind(
                client.clone(),
                kind,
                events.clone(),
                changes.clone(),
                Arc::downgrade(&uids),
                ready,
            ));
            watches.push(task.abort_handle());
        }
        for ready in listed {
            let _ = ready.await;
        }
        let announced = kinds.iter().map(|k| k.resource()).collect();
        KubeStore { inner: Arc::new(Inner { client, events, uids, watches, announced, changes }) }
    }

    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }
}

/// Watches one kind's metadata and announces each change; `ready` fires after the first full list.
/// A re-list (after the watch expired or the connection dropped) announces what changed meanwhile,
/// including objects deleted while nobody watched.
async fn watch_kind(
    client: kube::Client,
    kind: Kind,
    events: broadcast::Sender<ChangeEvent>,
    changes: Arc<super::ChangeCounts>,
    uids: std::sync::Weak<RwLock<HashMap<String, ObjKey>>>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let resource = kind.resource();
    // Kinds without a generation (Secrets) have no status: every change counts.
    let has_status = kind != Kind::Secret;
    let api: kube::Api<PartialObjectMeta<DynamicObject>> = kube::Api::all_with(client, &api_resource(kind));
    let mut stream = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut known: HashMap<(String, String), (Seen, String)> = HashMap::new();
    let mut relisted: Option<HashSet<(String, String)>> = None;
    let mut ready = Some(ready);
    let announce = |ns: &str, name: &str, status_only: bool, resource_version: Option<String>| {
        changes.bump(&resource, ns, name);
        let _ = events.send(ChangeEvent {
            resource: resource.clone(),
            namespace: ns.to_string(),
            name: name.to_string(),
            status_only,
            resource_version,
        });
    };
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(kind = kind.name(), error = %crate::errors::chain(&e), "watch failed; retrying");
                continue;
            }
        };
        match event {
            watcher::Event::Init => relisted = Some(HashSet::new()),
            watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
                let meta = &obj.metadata;
                let key = (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default());
                let uid = meta.uid.clone().unwrap_or_default();
                let now = seen(meta);
                if let Some(set) = relisted.as_mut() {
                    set.insert(key.clone());
                }
                let before = known.insert(key.clone(), (now.clone(), uid.clone()));
                if let Some(uids) = uids.upgrade() {
                    uids.write()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(uid, (resource.clone(), key.0.clone(), key.1.clone()));
                }
                match before {
                    Some((b, _)) if b == now => {}
                    Some((b, _)) => {
                        let status_only = has_status && b.fingerprint == now.fingerprint;
                        announce(&key.0, &key.1, status_only, now.resource_version);
                    }
                    None => announce(&key.0, &key.1, false, now.resource_version),
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = relisted.take() {
                    let gone: Vec<_> = known.keys().filter(|k| !listed.contains(*k)).cloned().collect();
                    for key in gone {
                        forget(&mut known, &uids, &key);
                        announce(&key.0, &key.1, false, None);
                    }
                }
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            watcher::Event::Delete(obj) => {
                let key =
                    (obj.metadata.namespace.clone().unwrap_or_default(), obj.metadata.name.clone().unwrap_or_default());
                forget(&mut known, &uids, &key);
                announce(&key.0, &key.1, false, None);
            }
        }
    }
}

fn forget(
    known: &mut HashMap<(String, String), (Seen, String)>,
    uids: &std::sync::Weak<RwLock<HashMap<String, ObjKey>>>,
    key: &(String, String),
) {
    if let Some((_, uid)) = known.remove(key)
        && let Some(uids) = uids.upgrade()
    {
        uids.write().unwrap_or_else(|p| p.into_inner()).remove(&uid);
    }
}

impl Store for KubeStore {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let ns = (!namespace.is_empty()).then_some(namespace);
        let req = collection::<K>(ns).get(name, &Default::default()).map_err(|e| StoreError::Backend(e.to_string()))?;
        match self.inner.client.request::<Value>(req).await {
            Ok(obj) => decode(obj).map(Some),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(store_error::<K>(name, e)),
        }
    }

    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let req =
            collection::<K>(namespace).list(&ListParams::default()).map_err(|e| StoreError::Backend(e.to_string()))?;
        let list: ObjectList<Value> = self.inner.client.request(req).await.map_err(|e| store_error::<K>("", e))?;
        list.items.into_iter().map(decode).collect()
    }

    async fn any<K: Object>(&self, namespace: Option<&str>) -> Result<bool, StoreError> {
        // One item is enough to know: the API server stops there.
        let req = collection::<K>(namespace)
            .list(&ListParams::default().limit(1))
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let list: ObjectList<Value> = self.inner.client.request(req).await.map_err(|e| store_error::<K>("", e))?;
        Ok(!list.items.is_empty())
    }

    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        let known = self.inner.uids.read().unwrap_or_else(|p| p.into_inner()).get(uid).cloned();
        if let Some((res, ns, name)) = known
            && res == resource_name::<K>()
            && let Some(obj) = self.get::<K>(&ns, &name).await?
            && obj.meta().uid.as_deref() == Some(uid)
        {
            return Ok(Some(obj));
        }
        // Not seen by a watch (yet): look through all of them.
        Ok(self.list::<K>(None).await?.into_iter().find(|o| o.meta().uid.as_deref() == Some(uid)))
    }

    async fn create<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let (ns, name) = object_namespace(obj)?;
        let body = serde_json::to_vec(obj).map_err(|e| StoreError::Invalid(e.to_string()))?;
        let req = collection::<K>(Some(&ns))
            .create(&PostParams::default(), body)
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        decode(self.inner.client.request::<Value>(req).await.map_err(|e| store_error::<K>(&name, e))?)
    }

    async fn update<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        self.patch_over_live(obj, false).await
    }

    async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        self.patch_over_live(obj, true).await
    }

    async fn delete<K: Object>(&self, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        let ns = (!namespace.is_empty()).then_some(namespace);
        let req = collection::<K>(ns)
            .delete(name, &DeleteParams::default())
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        match self.inner.client.request_status::<Value>(req).await.map_err(|e| store_error::<K>(name, e))? {
            // Some servers answer an immediate deletion with the object as it was; only an object still
            // marked and holding finalizers is pending.
            Either::Left(obj)
                if obj["metadata"]["deletionTimestamp"].is_string()
                    && obj["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty()) =>
            {
                Ok(Deletion::Pending)
            }
            _ => Ok(Deletion::Deleted),
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.inner.events.subscribe()
    }

    fn change_count(&self, resource: &str) -> Option<u64> {
        self.inner.announced.iter().any(|r| r == resource).then(|| self.inner.changes.count(resource))
    }

    fn changes_since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        if !self.inner.announced.iter().any(|r| r == resource) {
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

        assert!(store.any::<InfraEnv>(Some("ns")).await.unwrap());
        assert!(!store.any::<InfraEnv>(Some("other")).await.unwrap());
        assert!(server.requests().iter().any(|r| r.contains("/namespaces/ns/infraenvs?") && r.contains("limit=1")));

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
        assert_eq!(store.inner.uids.read().unwrap().len(), 520, "the first list read every page");
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
        assert!(store.inner.uids.read().unwrap().contains_key(&uid), "the first list filled the uid index");
        assert!(store.get_by_uid::<InfraEnv>(&uid).await.unwrap().is_some());
    }
}
