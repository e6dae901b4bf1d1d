//! The embedded store: resources as JSON documents in one SQLite file (WAL mode), one transaction per
//! change, with Kubernetes metadata semantics: uid, creationTimestamp, generation (bumped when the spec
//! changes), resourceVersion (a store-wide counter; writes carrying a stale one are refused).
//!
//! [`SqliteStore`] and its [`Store`] implementation are here; the writer thread and group commit in
//! `writer`, the read cache in `cache`, the Kubernetes object rules a transaction applies in
//! `semantics`, and the document, raw-object and record APIs (the resource API's and the host
//! pool's) in `documents`.

mod cache;
mod documents;
mod events;
mod semantics;
mod writer;

pub use documents::kind_resource;
pub use events::{EventPage, EventQuery, EventRow, Keep};
pub use semantics::NewObject;
pub use writer::{TRANSACTION_BUCKET_MICROS, WriterStats};

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use bytes::Bytes;
use rusqlite::Connection;
use tokio::sync::broadcast;

use super::verbatim::Part;
use super::{ChangeEvent, Deletion, Object, Store, StoreError, resource_name};
use crate::keylocks::LockedRw as _;
use crate::resources::references::Ref;
use cache::{Cache, Cached, obj_key};
use semantics::{delete_object, insert_object, namespace_of, object_key, replacement, replacement_of};
use writer::{Job, MAX_GROUP, WRITER_CHECKPOINT_PAGES, run_checkpointer, run_group};

/// SQLite is the durable copy; every committed object is also kept in memory as its JSON text, so
/// reads (the controllers' gets and lists, API lists) neither wait for the writer's connection nor
/// query SQLite, and lists can be answered by concatenating stored texts.
#[derive(Clone)]
pub struct SqliteStore {
    writer: std::sync::mpsc::Sender<Job>,
    cache: Arc<RwLock<Cache>>,
    events: broadcast::Sender<ChangeEvent>,
    change_counts: Arc<super::ChangeCounts>,
    /// Writes stored as the object's own text (see [`SqliteStore::write_verbatim`]), for tests and
    /// profiles.
    verbatim_writes: Arc<AtomicU64>,
    writer_stats: Arc<WriterStats>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS objects (
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    uid TEXT NOT NULL UNIQUE,
    resource_version INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (resource, namespace, name)
);
CREATE TABLE IF NOT EXISTS owner_refs (
    owner_uid TEXT NOT NULL,
    resource TEXT NOT NULL,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (owner_uid, resource, namespace, name)
);
CREATE INDEX IF NOT EXISTS owner_refs_by_dependent ON owner_refs (resource, namespace, name);
CREATE TABLE IF NOT EXISTS records (
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('resource_version', 0);
";

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn =
            Connection::open(path).map_err(|e| StoreError::backend_in(format!("opening {}", path.display()), e))?;
        // The writer leaves checkpoints to a thread of its own (see `run_checkpointer`) and only
        // checkpoints itself if that thread falls far behind.
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES).map_err(backend)?;
        let store = Self::init(conn)?;
        let checkpointer =
            Connection::open(path).map_err(|e| StoreError::backend_in(format!("opening {}", path.display()), e))?;
        let stats = Arc::downgrade(&store.writer_stats);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || run_checkpointer(checkpointer, stats))
            .map_err(backend)?;
        Ok(store)
    }

    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Self::init(Connection::open_in_memory().map_err(backend)?)
    }

    fn init(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(backend)?;
        conn.pragma_update(None, "busy_timeout", 5000).map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        conn.execute_batch(events::SCHEMA).map_err(backend)?;
        let mut cache = Cache::default();
        {
            let mut stmt = conn
                .prepare("SELECT resource, namespace, name, uid, resource_version, body FROM objects")
                .map_err(backend)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        obj_key(&r.get::<_, String>(0)?, &r.get::<_, String>(1)?, &r.get::<_, String>(2)?),
                        Cached::new(r.get(4)?, r.get(3)?, Bytes::from(r.get::<_, String>(5)?)),
                    ))
                })
                .map_err(backend)?;
            for row in rows {
                let (key, entry) = row.map_err(backend)?;
                cache.put(key, Some(Arc::new(entry)));
            }
        }
        // One thread owns the connection and runs every write in turn: writes are serialized by
        // SQLite anyway, and a pool of blocking threads waiting on a lock only costs memory.
        let resource_version: i64 = conn
            .query_row("SELECT value FROM counters WHERE name='resource_version'", [], |r| r.get(0))
            .map_err(backend)?;
        let (writer, jobs) = std::sync::mpsc::channel::<Job>();
        let cache = Arc::new(RwLock::new(cache));
        let writer_cache = cache.clone();
        let writer_stats = Arc::new(WriterStats::default());
        let stats = writer_stats.clone();
        let mut conn = conn;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || {
                let mut resource_version = resource_version;
                while let Ok(first) = jobs.recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_GROUP
                        && let Ok(job) = jobs.try_recv()
                    {
                        batch.push(job);
                    }
                    let (started, jobs) = (Instant::now(), batch.len() as u64);
                    run_group(&mut conn, &writer_cache, &mut resource_version, batch, &stats);
                    stats.record_transaction(started.elapsed().as_micros() as u64);
                    stats.written.fetch_add(jobs, Ordering::Relaxed);
                    stats.transactions.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(backend)?;
        Ok(SqliteStore {
            writer,
            cache,
            events: broadcast::channel(65536).0,
            change_counts: Arc::default(),
            verbatim_writes: Default::default(),
            writer_stats,
        })
    }

    /// How many writes were stored as the object's own text.
    pub fn verbatim_writes(&self) -> u64 {
        self.verbatim_writes.load(Ordering::Relaxed)
    }

    /// The writer thread's counters.
    pub fn writer_stats(&self) -> Arc<WriterStats> {
        self.writer_stats.clone()
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read_locked()
    }

    // Objects addressed by their store key (`plural.group`, or the plural alone for the core group)
    // instead of by `Kind`: what a Kubernetes API server in front of this store serves, which includes
    // kinds bootstream's own API does not take (Leases). Cluster-scoped objects have the namespace "".
}

impl Store for SqliteStore {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let entry = self.read_cache().get(&resource_name::<K>(), &namespace_of::<K>(Some(namespace)), name);
        super::count_read(entry.is_some() as usize);
        entry.map(|c| c.object()).transpose()
    }

    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let entries = self.read_cache().list(&resource_name::<K>(), namespace);
        super::count_read(entries.len());
        entries.iter().map(|c| c.object()).collect()
    }

    async fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        mut f: impl FnMut(&K) -> T + Send,
    ) -> Result<Vec<T>, StoreError> {
        let entries = self.read_cache().list(&resource_name::<K>(), namespace);
        super::count_read(entries.len());
        entries.iter().map(|c| c.with_object(&mut f)).collect()
    }

    async fn list_referencing<K: Object>(
        &self,
        namespace: Option<&str>,
        relation: Ref,
        value: &str,
    ) -> Result<Vec<K>, StoreError> {
        debug_assert_eq!(relation.kind().resource(), resource_name::<K>());
        let entries = self.read_cache().referencing(relation, namespace, value);
        super::count_read(entries.len());
        entries.iter().map(|c| c.object()).collect()
    }

    async fn any<K: Object>(&self, namespace: Option<&str>) -> Result<bool, StoreError> {
        let res = resource_name::<K>();
        let start = obj_key(&res, namespace.unwrap_or_default(), "");
        let cache = self.read_cache();
        let first = cache.objects.range(start..).next();
        Ok(first.is_some_and(|((r, n, _), _)| *r == res && namespace.is_none_or(|ns| n == ns)))
    }

    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        let res = resource_name::<K>();
        let entry = {
            let cache = self.read_cache();
            cache.by_uid.get(uid).filter(|k| k.0 == res).and_then(|k| cache.objects.get(k).cloned())
        };
        super::count_read(entry.is_some() as usize);
        entry.map(|c| c.object()).transpose()
    }

    async fn create<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let res = resource_name::<K>();
        let (ns, _) = object_key(obj)?;
        let body = serde_json::to_value(obj).map_err(backend)?;
        // Secrets and ConfigMaps have no generation; custom resources do.
        let has_generation = !K::group(&()).is_empty();
        let stored =
            self.write(move |tx, changes| insert_object(tx, changes, &res, &ns, body, has_generation, None)).await?;
        serde_json::from_value(stored).map_err(backend)
    }

    async fn update<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        if let Some(written) = self.write_verbatim(obj, Part::Object).await {
            return written;
        }
        let res = resource_name::<K>();
        let (ns, name) = object_key(obj)?;
        let want_rv = obj.meta().resource_version.clone();
        let body = serde_json::to_value(obj).map_err(backend)?;
        let stored =
            self.write_over_live(res, ns, name, want_rv, false, move |live| replacement(live, body.clone())).await?;
        serde_json::from_value(stored).map_err(backend)
    }

    async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        if let Some(written) = self.write_verbatim(obj, Part::Status).await {
            return written;
        }
        let res = resource_name::<K>();
        let (ns, name) = object_key(obj)?;
        let want_rv = obj.meta().resource_version.clone();
        let status = serde_json::to_value(obj).map_err(backend)?.get("status").cloned();
        let stored = self.replace_status_raw(&res, &ns, &name, status, want_rv).await?;
        serde_json::from_value(stored).map_err(backend)
    }

    fn writes_object_and_status_at_once(&self) -> bool {
        true
    }

    async fn update_with_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        if let Some(written) = self.write_verbatim(obj, Part::All).await {
            return written;
        }
        let res = resource_name::<K>();
        let (ns, name) = object_key(obj)?;
        let want_rv = obj.meta().resource_version.clone();
        let body = serde_json::to_value(obj).map_err(backend)?;
        let stored = self
            .write_over_live(res, ns, name, want_rv, false, move |live| replacement_of(live, body.clone(), true))
            .await?;
        serde_json::from_value(stored).map_err(backend)
    }

    async fn delete<K: Object>(&self, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        let (res, ns, nm) = (resource_name::<K>(), namespace_of::<K>(Some(namespace)), name.to_string());
        self.write(move |tx, changes| delete_object(tx, changes, &res, &ns, &nm)).await
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.events.subscribe()
    }

    fn change_count(&self, resource: &str) -> Option<u64> {
        Some(self.change_counts.count(resource))
    }

    fn changes_since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        self.change_counts.since(resource, since)
    }
}

pub(super) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend(e)
}

pub(super) fn conflict(res: &str, name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "Operation cannot be fulfilled on {res} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::resources::Kind;
    use crate::resources::{InfraEnv, validate_document};

    pub(super) fn infraenv_doc(name: &str, key: &str) -> Value {
        let doc: Value = serde_json::json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": name, "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"pullSecretRef": {"name": "ps"}, "sshAuthorizedKey": key}
        });
        validate_document(&doc).unwrap().1
    }

    #[tokio::test]
    async fn list_map_hands_over_what_list_returns_in_its_order() {
        let store = SqliteStore::open_in_memory().unwrap();
        for name in ["c", "a", "b"] {
            store.apply_document(Kind::InfraEnv, infraenv_doc(name, &format!("key-{name}"))).await.unwrap();
        }
        let listed: Vec<InfraEnv> = store.list(Some("ns")).await.unwrap();
        let key = |ie: &InfraEnv| (ie.metadata.name.clone().unwrap(), ie.spec.ssh_authorized_key.clone().unwrap());
        let mapped = store.list_map(Some("ns"), key).await.unwrap();
        assert_eq!(mapped, listed.iter().map(key).collect::<Vec<_>>());
        assert_eq!(mapped.len(), 3);
        assert!(store.list_map(Some("other"), key).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn metadata_and_status_written_together_are_one_change() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        let before: i64 = ie.metadata.resource_version.as_deref().unwrap().parse().unwrap();
        let mut events = store.subscribe();
        ie.metadata.labels.get_or_insert_default().insert("l".into(), "v".into());
        ie.status.get_or_insert_default().iso_download_url = "http://x".into();
        let stored = store.update_with_status(&ie).await.unwrap();
        assert_eq!(stored.metadata.labels.as_ref().unwrap()["l"], "v");
        assert_eq!(stored.status.as_ref().unwrap().iso_download_url, "http://x");
        assert_eq!(stored.metadata.resource_version.as_deref(), Some((before + 1).to_string().as_str()));
        assert_eq!(stored.metadata.generation, Some(1), "neither metadata nor status moves the generation");
        let event = events.try_recv().unwrap();
        assert!(!event.status_only);
        assert!(events.try_recv().is_err(), "one write, one event");
        // The old resourceVersion is refused, and nothing of that write is kept.
        ie.status.get_or_insert_default().iso_download_url = "http://y".into();
        assert!(matches!(store.update_with_status(&ie).await, Err(StoreError::Conflict(_))));
        let now: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(now.status.unwrap().iso_download_url, "http://x");
    }

    #[tokio::test]
    async fn status_updates_need_the_current_resource_version() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.status = Some(Default::default());
        ie.status.as_mut().unwrap().iso_download_url = "http://x".into();
        let stored = store.update_status(&ie).await.unwrap();
        assert_eq!(stored.status.unwrap().iso_download_url, "http://x");
        // `ie` still carries the old resourceVersion.
        ie.status.as_mut().unwrap().iso_download_url = "http://y".into();
        assert!(matches!(store.update_status(&ie).await, Err(StoreError::Conflict(_))));
        // Applying the spec again keeps the status.
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k3")).await.unwrap();
        let ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(ie.status.unwrap().iso_download_url, "http://x");
    }

    #[tokio::test]
    async fn change_events_carry_the_resource_version_written() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut events = store.subscribe();
        let (created, _) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let event = events.recv().await.unwrap();
        assert_eq!(event.resource_version.as_deref(), created["metadata"]["resourceVersion"].as_str());

        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.status.get_or_insert_default().iso_download_url = "http://x".into();
        let stored = store.update_status(&ie).await.unwrap();
        let event = events.recv().await.unwrap();
        assert!(event.status_only);
        assert_eq!(event.resource_version, stored.metadata.resource_version);
        assert_ne!(event.resource_version.as_deref(), created["metadata"]["resourceVersion"].as_str());

        // An object that is gone has no resourceVersion to report.
        assert_eq!(store.delete_document(Kind::InfraEnv, "ns", "a").await.unwrap(), Deletion::Deleted);
        let event = events.recv().await.unwrap();
        assert_eq!(event.name, "a");
        assert_eq!(event.resource_version, None);
    }

    #[tokio::test]
    async fn state_survives_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let store = SqliteStore::open(&path).unwrap();
            store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let all: Vec<InfraEnv> = store.list(None).await.unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(store.delete_document(Kind::InfraEnv, "ns", "a").await.unwrap(), Deletion::Deleted);
        assert!(store.delete_document(Kind::InfraEnv, "ns", "a").await.unwrap_err().is_not_found());
    }

    pub(super) fn owned_secret(name: &str, owner_uid: &str) -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "finalizers": [],
                         "ownerReferences": [{"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                                              "name": "a", "uid": owner_uid}]}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn any_sees_only_its_kind_and_namespace() {
        let store = SqliteStore::open_in_memory().unwrap();
        assert!(!store.any::<InfraEnv>(None).await.unwrap());
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        // Kinds stored next to InfraEnvs (in key order) do not count for it, nor it for them.
        store.create(&owned_secret("s", "x")).await.unwrap();
        assert!(store.any::<InfraEnv>(None).await.unwrap());
        assert!(store.any::<InfraEnv>(Some("ns")).await.unwrap());
        assert!(!store.any::<InfraEnv>(Some("other")).await.unwrap());
        assert!(!store.any::<crate::resources::Agent>(Some("ns")).await.unwrap());
        assert!(!store.any::<crate::resources::BareMetalHost>(None).await.unwrap());
        store.delete::<InfraEnv>("ns", "a").await.unwrap();
        assert!(!store.any::<InfraEnv>(Some("ns")).await.unwrap());
    }
}
