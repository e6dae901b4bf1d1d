//! The embedded store: resources as JSON documents in one SQLite file (WAL mode), one transaction per
//! change, with Kubernetes metadata semantics: uid, creationTimestamp, generation (bumped when the spec
//! changes), resourceVersion (a store-wide counter; writes carrying a stale one are refused).

use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use bytes::Bytes;
use rusqlite::{Connection, params};
use serde_json::Value;
use tokio::sync::broadcast;

use super::json::{LAST_APPLIED_ANNOTATION, three_way};
use super::verbatim::{self, Part, Verbatim};
use super::{ChangeEvent, Deletion, Object, Store, StoreError, resource_name};
use crate::resources::Kind;

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

/// What the writer thread has done since the store opened (for `/metrics`): how far behind the
/// writes are, and where its time goes.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Writes handed to the writer thread.
    pub queued: AtomicU64,
    /// Writes it ran (committed or not).
    pub written: AtomicU64,
    /// Transactions it ran (each holds one or more writes).
    pub transactions: AtomicU64,
    /// Microseconds spent running transactions, commit included.
    pub busy_micros: AtomicU64,
    /// Microseconds spent in COMMIT alone (the WAL append, and the checkpoints SQLite runs there
    /// when the checkpointer falls behind).
    pub commit_micros: AtomicU64,
    /// Checkpoints the checkpointer thread ran, and the microseconds they took.
    pub checkpoints: AtomicU64,
    pub checkpoint_micros: AtomicU64,
    /// Transactions by how long they took, commit and cache publication included: the count in
    /// `transaction_buckets[i]` took at most `TRANSACTION_BUCKET_MICROS[i]` (and more than the
    /// bound before); the last entry counts the rest. A write's latency is its own transaction's
    /// plus the ones queued ahead of it, so a tail here is a tail of every write.
    pub transaction_buckets: [AtomicU64; TRANSACTION_BUCKET_MICROS.len() + 1],
}

/// Upper bounds of [`WriterStats::transaction_buckets`], in microseconds.
pub const TRANSACTION_BUCKET_MICROS: [u64; 9] = [250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000];

impl WriterStats {
    fn record_transaction(&self, micros: u64) {
        let bucket = TRANSACTION_BUCKET_MICROS.iter().position(|&bound| micros <= bound);
        let bucket = bucket.unwrap_or(TRANSACTION_BUCKET_MICROS.len());
        self.transaction_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.busy_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// Work for the thread that owns the connection. Jobs waiting together are run in one SQLite
/// transaction (group commit), each in a savepoint of its own so that a failing job takes back only
/// its own writes. A job returns what it wrote and what to do once the group's fate is known.
type Job = Box<dyn FnOnce(&Group<'_>) -> Ran + Send>;

/// A job's outcome within its group.
struct Ran {
    /// Whether its writes stay (otherwise they are rolled back to its savepoint).
    ok: bool,
    /// The objects it wrote, published to the cache when the group commits.
    pending: Vec<(ObjKey, Option<Arc<Cached>>)>,
    /// Answers the caller with the group's commit result.
    finish: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
}

/// At most this many jobs share a transaction: a bound on how long the first of them waits.
const MAX_GROUP: usize = 256;

/// How often the checkpointer looks for committed writes to copy into the database file.
const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The transactions committed since the last checkpoint that make the checkpointer run one. Once a
/// checkpoint has copied the whole WAL, the next commit starts the WAL over, and SQLite fsyncs the
/// new WAL header inside that commit (0.3–0.5 ms here). Checkpointing whatever was written in the
/// last interval put that fsync into the first write after every pause: the create of an InfraEnv,
/// for one. Waiting for this many transactions pays it once per as many, and keeps the WAL at a few
/// MiB (an object is a few pages).
const CHECKPOINT_AFTER_TRANSACTIONS: u64 = 512;

/// The WAL size (in pages) at which the writer checkpoints by itself, in case the checkpointer
/// cannot keep up (SQLite's default is 1000). The checkpointer runs after
/// [`CHECKPOINT_AFTER_TRANSACTIONS`], a few MiB of WAL, well under this 64 MiB.
const WRITER_CHECKPOINT_PAGES: i64 = 16384;

/// (resource, namespace, name)
type ObjKey = (String, String, String);

fn obj_key(res: &str, ns: &str, name: &str) -> ObjKey {
    (res.to_string(), ns.to_string(), name.to_string())
}

/// A committed object: its resourceVersion, uid and JSON text (shared by every reader).
struct Cached {
    rv: i64,
    uid: String,
    text: Bytes,
    /// The object decoded, kept for the kinds [`keeps_decoded`] names once a reader decoded it.
    decoded: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl Cached {
    fn new(rv: i64, uid: String, text: Bytes) -> Cached {
        Cached { rv, uid, text, decoded: OnceLock::new() }
    }

    fn value(&self) -> Result<Value, StoreError> {
        serde_json::from_slice(&self.text).map_err(backend)
    }

    /// The object as a K: a copy of the decoded one where it is kept, else decoded from the text
    /// (owned as decoded: not through [`Cached::with_object`], which would copy it once more).
    fn object<K: Object>(&self) -> Result<K, StoreError> {
        if let Some(k) = self.decoded.get().and_then(|d| d.downcast_ref::<K>()) {
            return Ok(k.clone());
        }
        let k: K = serde_json::from_slice(&self.text).map_err(backend)?;
        if keeps_decoded::<K>() {
            let _ = self.decoded.set(Arc::new(k.clone()));
        }
        Ok(k)
    }

    /// `f` of the object as a K: the decoded one where it is kept (kept on first decoding for the
    /// kinds [`keeps_decoded`] names), else one decoded from the text for this call.
    fn with_object<K: Object, T>(&self, f: impl FnOnce(&K) -> T) -> Result<T, StoreError> {
        if let Some(k) = self.decoded.get().and_then(|d| d.downcast_ref::<K>()) {
            return Ok(f(k));
        }
        let k: K = serde_json::from_slice(&self.text).map_err(backend)?;
        if !keeps_decoded::<K>() {
            return Ok(f(&k));
        }
        let kept = self.decoded.get_or_init(|| Arc::new(k));
        match kept.downcast_ref::<K>() {
            Some(k) => Ok(f(k)),
            // Another reader kept it first as another Rust type of the same kind: decode it again.
            None => Ok(f(&serde_json::from_slice::<K>(&self.text).map_err(backend)?)),
        }
    }
}

/// Whether the cache keeps decoded copies of K's objects. Controllers read an InfraEnv, a
/// ClusterDeployment or an AgentClusterInstall at nearly every host change (thousands of times a
/// second in a busy pool) and they change rarely: copying a decoded object costs a fraction of
/// parsing its text again. Kinds with one object per host (Agents, BareMetalHosts) are decoded at each
/// read instead: a second copy of each would double the memory the pool takes.
fn keeps_decoded<K: Object>() -> bool {
    let group = K::group(&());
    let kind = K::kind(&());
    matches!(
        (&*group, &*kind),
        ("agent-install.openshift.io", "InfraEnv")
            | ("hive.openshift.io", "ClusterDeployment")
            | ("hive.openshift.io", "ClusterImageSet")
            | ("extensions.hive.openshift.io", "AgentClusterInstall")
    )
}

/// The committed objects, in (resource, namespace, name) order, with a uid index.
#[derive(Default)]
struct Cache {
    objects: BTreeMap<ObjKey, Arc<Cached>>,
    by_uid: HashMap<String, ObjKey>,
}

impl Cache {
    fn get(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        self.objects.get(&obj_key(res, ns, name)).cloned()
    }

    fn list(&self, res: &str, ns: Option<&str>) -> Vec<Arc<Cached>> {
        let start = obj_key(res, ns.unwrap_or_default(), "");
        self.objects
            .range(start..)
            .take_while(|((r, n, _), _)| r == res && ns.is_none_or(|ns| n == ns))
            .map(|(_, c)| c.clone())
            .collect()
    }

    fn put(&mut self, key: ObjKey, entry: Option<Arc<Cached>>) {
        let old = match entry {
            Some(c) => {
                self.by_uid.insert(c.uid.clone(), key.clone());
                self.objects.insert(key, c.clone()).filter(|old| old.uid != c.uid)
            }
            None => self.objects.remove(&key),
        };
        if let Some(old) = old {
            self.by_uid.remove(&old.uid);
        }
    }
}

/// The jobs of one SQLite transaction: the committed objects, what the group's earlier jobs wrote,
/// and the resourceVersion counter (kept here and written once per group).
struct Group<'a> {
    sql: &'a Connection,
    committed: &'a Cache,
    written: RefCell<HashMap<ObjKey, Option<Arc<Cached>>>>,
    resource_version: std::cell::Cell<i64>,
}

/// One job's view of the store: SQL, plus the objects written so far, which its own reads must see
/// before they are committed (and published to the cache).
struct Tx<'a> {
    group: &'a Group<'a>,
    pending: RefCell<Vec<(ObjKey, Option<Arc<Cached>>)>>,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.group.sql
    }
}

impl Tx<'_> {
    fn lookup(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        let pending = self.pending.borrow();
        if let Some((_, entry)) = pending.iter().rev().find(|((r, n, m), _)| r == res && n == ns && m == name) {
            return entry.clone();
        }
        let key = obj_key(res, ns, name);
        if let Some(entry) = self.group.written.borrow().get(&key) {
            return entry.clone();
        }
        self.group.committed.objects.get(&key).cloned()
    }
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

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The store-key of a kind used by the API: `infraenvs.agent-install.openshift.io`, `secrets`.
pub fn kind_resource(kind: Kind) -> String {
    kind.resource()
}

fn conflict(res: &str, name: &str) -> StoreError {
    StoreError::Conflict(format!(
        "Operation cannot be fulfilled on {res} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    ))
}

/// Metadata fields the store owns: never taken from a client's write.
const SERVER_METADATA: [&str; 5] = ["uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp"];

/// What a write did, for the caller to emit change events after the transaction commits.
#[derive(Default)]
struct Changes(Vec<ChangeEvent>);

impl Changes {
    fn touch(&mut self, res: &str, ns: &str, name: &str) {
        self.push(res, ns, name, false);
    }
    fn touch_status(&mut self, res: &str, ns: &str, name: &str) {
        self.push(res, ns, name, true);
    }
    fn push(&mut self, res: &str, ns: &str, name: &str, status_only: bool) {
        self.0.push(ChangeEvent {
            resource: res.to_string(),
            namespace: ns.to_string(),
            name: name.to_string(),
            status_only,
            resource_version: None,
        });
    }

    /// Gives each event the resourceVersion its object has after the job's writes (`pending`, in
    /// write order), or None where the job removed it.
    fn stamp(&mut self, pending: &[(ObjKey, Option<Arc<Cached>>)]) {
        for event in &mut self.0 {
            let written = pending
                .iter()
                .rev()
                .find(|((r, n, m), _)| *r == event.resource && *n == event.namespace && *m == event.name);
            if let Some((_, entry)) = written {
                event.resource_version = entry.as_ref().map(|c| c.rv.to_string());
            }
        }
    }
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(path).map_err(|e| backend(format!("opening {}: {e}", path.display())))?;
        // The writer leaves checkpoints to a thread of its own (see `run_checkpointer`) and only
        // checkpoints itself if that thread falls far behind.
        conn.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES).map_err(backend)?;
        let store = Self::init(conn)?;
        let checkpointer = Connection::open(path).map_err(|e| backend(format!("opening {}: {e}", path.display())))?;
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
        self.cache.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the writer thread, in a transaction (shared with the other writes waiting at the
    /// same time, in a savepoint of its own), and emits change events for what it touched once that
    /// transaction committed. An error from `f` rolls back its writes only.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Tx<'_>, &mut Changes) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |group| {
            let tx = Tx { group, pending: RefCell::default() };
            let mut changes = Changes::default();
            match f(&tx, &mut changes) {
                Ok(out) => Ran {
                    ok: true,
                    pending: {
                        let pending = tx.pending.into_inner();
                        changes.stamp(&pending);
                        pending
                    },
                    finish: Box::new(move |committed| {
                        let _ = done.send(committed.map(|()| (out, changes)));
                    }),
                },
                Err(e) => Ran {
                    ok: false,
                    pending: Vec::new(),
                    finish: Box::new(move |_| {
                        let _ = done.send(Err(e));
                    }),
                },
            }
        });
        // Counted before the writer can run it, so that queued - written is never negative.
        self.writer_stats.queued.fetch_add(1, Ordering::Relaxed);
        self.writer.send(job).map_err(|_| backend("the store's writer thread is gone"))?;
        let (out, changes) = result.await.map_err(|_| backend("the store's write failed"))??;
        for event in changes.0 {
            self.change_counts.bump(&event.resource, &event.namespace, &event.name);
            let _ = self.events.send(event);
        }
        Ok(out)
    }

    /// Writes a change computed from the live object without holding up the writer thread: `compute`
    /// runs on the caller's thread over the committed object, and the writer only checks that the
    /// object did not move meanwhile before storing the result. A write naming a stale
    /// resourceVersion is refused, as the API server refuses it; one naming none is recomputed.
    async fn write_over_live(
        &self,
        res: String,
        ns: String,
        name: String,
        want_rv: Option<String>,
        status_only: bool,
        compute: impl Fn(&Value) -> Result<Replacement, StoreError>,
    ) -> Result<Value, StoreError> {
        loop {
            let live = self.read_cache().get(&res, &ns, &name);
            let Some(live) = live else {
                return Err(StoreError::NotFound { resource: res, name });
            };
            if want_rv.as_ref().is_some_and(|want| *want != live.rv.to_string()) {
                return Err(conflict(&res, &name));
            }
            let replacement = match compute(&live.value()?)? {
                Replacement::Unchanged(body) => return Ok(body),
                r => r,
            };
            let (r, n, m, base) = (res.clone(), ns.clone(), name.clone(), live.rv);
            let written = self
                .write(move |tx, changes| {
                    match tx.lookup(&r, &n, &m) {
                        Some(now) if now.rv == base => {}
                        Some(_) => return Err(conflict(&r, &m)),
                        None => return Err(StoreError::NotFound { resource: r, name: m }),
                    }
                    store_replacement(tx, changes, &r, &n, &m, replacement, status_only)
                })
                .await;
            match written {
                Err(StoreError::Conflict(_)) if want_rv.is_none() => continue,
                other => return other,
            }
        }
    }

    /// Writes `part` of `obj` as its own text when [`verbatim::plan`] proves that this is what the
    /// general path would store (the common case of a controller writing back what it read, changed):
    /// no JSON value is built, parsed or compared, and the writer thread only splices in the new
    /// resourceVersion. `None` when the shortcut does not apply; the caller then takes the general path.
    async fn write_verbatim<K: Object>(&self, obj: &K, part: Part) -> Option<Result<K, StoreError>> {
        let want_rv = obj.meta().resource_version.as_deref()?;
        let (ns, name) = object_key(obj).ok()?;
        let res = resource_name::<K>();
        let live = self.read_cache().get(&res, &ns, &name)?;
        if want_rv != live.rv.to_string() {
            return None;
        }
        let text = serde_json::to_string(obj).ok()?;
        let (rv_at, owners_changed) = match verbatim::plan(std::str::from_utf8(&live.text).ok()?, &text, part)? {
            Verbatim::Unchanged => return Some(Ok(obj.clone())),
            Verbatim::Store { rv_at, owners_changed } => (rv_at, owners_changed),
        };
        let owners = owners_changed
            .then(|| obj.meta().owner_references.iter().flatten().map(|o| o.uid.clone()).collect::<Vec<_>>());
        let (base, uid) = (live.rv, live.uid.clone());
        let written = self
            .write(move |tx, changes| {
                match tx.lookup(&res, &ns, &name) {
                    Some(now) if now.rv == base => {}
                    Some(_) => return Err(conflict(&res, &name)),
                    None => return Err(StoreError::NotFound { resource: res, name }),
                }
                let rv = next_resource_version(tx)?;
                if part == Part::Status {
                    changes.touch_status(&res, &ns, &name);
                } else {
                    changes.touch(&res, &ns, &name);
                }
                store_text(tx, &res, &ns, &name, uid, rv, verbatim::with_resource_version(&text, &rv_at, rv), owners)?;
                Ok(rv)
            })
            .await;
        Some(written.map(|rv| {
            self.verbatim_writes.fetch_add(1, Ordering::Relaxed);
            let mut stored = obj.clone();
            stored.meta_mut().resource_version = Some(rv.to_string());
            stored
        }))
    }

    /// Creates or updates an object from a validated user document, the way `kubectl apply` does: the
    /// changes between the configuration applied last (kept in an annotation) and this document are
    /// merged into the live object, so fields controllers set (finalizers, labels, spec fields) survive
    /// unless the document itself changes them. A document carrying a stale resourceVersion is refused.
    /// Returns the stored object and whether it was created.
    pub async fn apply_document(&self, kind: Kind, doc: Value) -> Result<(Value, bool), StoreError> {
        self.apply_document_with(kind, doc, NewObject::default()).await
    }

    /// [`Self::apply_document`], and an object it creates gets what `new` gives it.
    pub async fn apply_document_with(
        &self,
        kind: Kind,
        doc: Value,
        new: NewObject,
    ) -> Result<(Value, bool), StoreError> {
        let resource = kind.resource();
        let namespace = doc_namespace(kind, &doc);
        let name = doc["metadata"]["name"]
            .as_str()
            .ok_or_else(|| StoreError::Invalid("metadata.name is required".into()))?
            .to_string();
        self.write(move |tx, changes| {
            let applied = applied_configuration(&doc);
            match get_row(tx, &resource, &namespace, &name)? {
                None => {
                    let mut body = doc.clone();
                    body["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = Value::String(applied.to_string());
                    if let Some(f) = new.finalizer {
                        add_finalizer(&mut body, f);
                    }
                    let stored =
                        insert_object(tx, changes, &resource, &namespace, body, kind != Kind::Secret, new.uid.clone())?;
                    Ok((stored, true))
                }
                Some((live, rv)) => {
                    if let Some(want) = doc["metadata"]["resourceVersion"].as_str()
                        && want != rv.to_string()
                    {
                        return Err(conflict(&resource, &name));
                    }
                    let last: Option<Value> = live["metadata"]["annotations"][LAST_APPLIED_ANNOTATION]
                        .as_str()
                        .and_then(|s| serde_json::from_str(s).ok());
                    let mut merged = three_way(&without_status(&live), last.as_ref(), &applied);
                    merged["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = Value::String(applied.to_string());
                    let stored = replace_object(tx, changes, &resource, &live, merged)?;
                    Ok((stored, false))
                }
            }
        })
        .await
    }

    /// Replaces an object's metadata and spec with a client's full document (a PUT, or the result of a
    /// merge patch the API applied), if the document's resourceVersion is current. Status is kept.
    pub async fn replace_document(&self, kind: Kind, doc: Value) -> Result<Value, StoreError> {
        let namespace = doc_namespace(kind, &doc);
        self.replace_raw(&kind.resource(), &namespace, doc).await
    }

    /// Replaces an object's status (the status subresource): everything else stays as stored. With a
    /// resourceVersion, the write is refused if the object moved since.
    pub async fn replace_status_document(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        status: Option<Value>,
        want_rv: Option<String>,
    ) -> Result<Value, StoreError> {
        self.replace_status_raw(&kind.resource(), namespace, name, status, want_rv).await
    }

    pub async fn get_document(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        self.get_raw(&kind.resource(), namespace, name)
    }

    pub async fn list_documents(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<Value>, StoreError> {
        let entries = self.read_cache().list(&kind.resource(), namespace);
        entries.iter().map(|c| c.value()).collect()
    }

    /// The stored JSON texts of a kind's objects, in name order: what an API list is made of, without
    /// parsing or copying them.
    pub fn list_texts(&self, kind: Kind, namespace: Option<&str>) -> Vec<Bytes> {
        self.list_raw_texts(&kind.resource(), namespace)
    }

    /// Deletes an object the way the API server does: marked with a deletionTimestamp while it has
    /// finalizers, removed (and its dependents garbage-collected) otherwise.
    pub async fn delete_document(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        self.delete_raw(&kind.resource(), namespace, name).await
    }

    // Objects addressed by their store key (`plural.group`, or the plural alone for the core group)
    // instead of by `Kind`: what a Kubernetes API server in front of this store serves, which includes
    // kinds bootstream's own API does not take (Leases). Cluster-scoped objects have the namespace "".

    pub fn get_raw(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        self.read_cache().get(resource, namespace, name).map(|c| c.value()).transpose()
    }

    pub fn list_raw_texts(&self, resource: &str, namespace: Option<&str>) -> Vec<Bytes> {
        self.read_cache().list(resource, namespace).into_iter().map(|c| c.text.clone()).collect()
    }

    /// Creates an object from a client's document (a POST): refused if one of that name exists.
    /// `has_generation`: custom resources have `metadata.generation`; Secrets, ConfigMaps and Leases not.
    pub async fn create_raw(
        &self,
        resource: &str,
        namespace: &str,
        body: Value,
        has_generation: bool,
    ) -> Result<Value, StoreError> {
        let (res, ns) = (resource.to_string(), namespace.to_string());
        self.write(move |tx, changes| insert_object(tx, changes, &res, &ns, body, has_generation, None)).await
    }

    /// [`SqliteStore::replace_document`] by store key.
    pub async fn replace_raw(&self, resource: &str, namespace: &str, doc: Value) -> Result<Value, StoreError> {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let want_rv = doc["metadata"]["resourceVersion"].as_str().map(str::to_string);
        self.write_over_live(resource.to_string(), namespace.to_string(), name, want_rv, false, move |live| {
            replacement(live, doc.clone())
        })
        .await
    }

    /// [`SqliteStore::replace_status_document`] by store key.
    pub async fn replace_status_raw(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        status: Option<Value>,
        want_rv: Option<String>,
    ) -> Result<Value, StoreError> {
        let (res, ns, name) = (resource.to_string(), namespace.to_string(), name.to_string());
        self.write_over_live(res, ns, name, want_rv, true, move |live| {
            let mut body = live.clone();
            if body.get("status") == status.as_ref() {
                return Ok(Replacement::Unchanged(body));
            }
            match (&status, body.as_object_mut()) {
                (Some(s), _) => body["status"] = s.clone(),
                (None, Some(o)) => {
                    o.remove("status");
                }
                (None, None) => {}
            }
            Ok(Replacement::Store { body, owners_changed: false })
        })
        .await
    }

    /// [`SqliteStore::delete_document`] by store key.
    pub async fn delete_raw(&self, resource: &str, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
        let (res, ns, nm) = (resource.to_string(), namespace.to_string(), name.to_string());
        self.write(move |tx, changes| delete_object(tx, changes, &res, &ns, &nm)).await
    }

    /// Internal records that are not API objects (host and cluster records of the agent API), kept in
    /// the same file so that one transaction can never see half of a change.
    pub async fn put_record(&self, collection: &'static str, id: String, body: String) -> Result<(), StoreError> {
        self.write(move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO records (collection, id, body) VALUES (?1, ?2, ?3)
                 ON CONFLICT (collection, id) DO UPDATE SET body=excluded.body",
            )
            .and_then(|mut s| s.execute(params![collection, id, body]))
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    pub async fn delete_record(&self, collection: &'static str, id: String) -> Result<(), StoreError> {
        self.write(move |conn, _| {
            conn.prepare_cached("DELETE FROM records WHERE collection=?1 AND id=?2")
                .and_then(|mut s| s.execute(params![collection, id]))
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    pub async fn list_records(&self, collection: &'static str) -> Result<Vec<(String, String)>, StoreError> {
        self.write(move |conn, _| {
            let mut stmt = conn.prepare_cached("SELECT id, body FROM records WHERE collection=?1").map_err(backend)?;
            let rows = stmt
                .query_map(params![collection], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(backend)?
                .collect::<Result<Vec<(String, String)>, _>>()
                .map_err(backend)?;
            Ok(rows)
        })
        .await
    }
}

fn doc_namespace(kind: Kind, doc: &Value) -> String {
    if kind.namespaced() {
        doc["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
    } else {
        String::new()
    }
}

/// The part of a user document `kubectl apply` remembers: everything but server-owned metadata and status.
fn applied_configuration(doc: &Value) -> Value {
    let mut applied = without_status(doc);
    if let Some(meta) = applied["metadata"].as_object_mut() {
        for key in SERVER_METADATA {
            meta.remove(key);
        }
        if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            ann.remove(LAST_APPLIED_ANNOTATION);
            if ann.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    applied
}

fn without_status(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    d
}

/// The object as this transaction sees it, with its resourceVersion.
fn get_row(tx: &Tx<'_>, res: &str, ns: &str, name: &str) -> Result<Option<(Value, i64)>, StoreError> {
    tx.lookup(res, ns, name).map(|c| Ok((c.value()?, c.rv))).transpose()
}

fn next_resource_version(tx: &Tx<'_>) -> Result<i64, StoreError> {
    let rv = tx.group.resource_version.get() + 1;
    tx.group.resource_version.set(rv);
    Ok(rv)
}

/// Copies committed pages from the WAL into the database file, off the writer thread. A checkpoint
/// reads and writes every page written since the last one and fsyncs the database file: on the
/// writer thread (SQLite's automatic checkpoint, run inside a COMMIT) that work and the wait for
/// the disk held up every write queued behind it. PASSIVE checkpoints never block the writer; the
/// WAL starts over from its beginning once a checkpoint has caught up with it. Ends when the store
/// is dropped.
fn run_checkpointer(conn: Connection, stats: std::sync::Weak<WriterStats>) {
    let (mut checkpointed, mut failing) = (0, false);
    loop {
        std::thread::sleep(CHECKPOINT_INTERVAL);
        let Some(stats) = stats.upgrade() else { return };
        let committed = stats.transactions.load(Ordering::Relaxed);
        if committed - checkpointed < CHECKPOINT_AFTER_TRANSACTIONS {
            continue;
        }
        let started = Instant::now();
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) => {
                failing = false;
                checkpointed = committed;
                stats.checkpoints.fetch_add(1, Ordering::Relaxed);
                stats.checkpoint_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            // Retried at the next interval; said once until a checkpoint succeeds again.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!("checkpointing the store's write-ahead log: {e}");
            }
            Err(_) => {}
        }
    }
}

/// Runs a batch of jobs in one transaction and, once it committed, publishes what they wrote to the
/// cache and answers their callers.
fn run_group(
    conn: &mut Connection,
    cache: &RwLock<Cache>,
    resource_version: &mut i64,
    batch: Vec<Job>,
    stats: &WriterStats,
) {
    let sql = match conn.transaction() {
        Ok(sql) => sql,
        // The jobs are dropped unrun: their callers get an error.
        Err(_) => return,
    };
    let mut finishes = Vec::with_capacity(batch.len());
    // A savepoint that could not be closed leaves the transaction in doubt: nothing of it commits.
    let mut in_doubt: Option<StoreError> = None;
    let (written, next_version) = {
        let committed = cache.read().unwrap_or_else(|p| p.into_inner());
        let group = Group {
            sql: &sql,
            committed: &committed,
            written: RefCell::default(),
            resource_version: std::cell::Cell::new(*resource_version),
        };
        let savepoint = |verb: &str| sql.prepare_cached(verb).and_then(|mut s| s.execute([])).map_err(backend);
        for job in batch {
            if savepoint("SAVEPOINT job").is_err() {
                continue;
            }
            // A panicking job fails its caller only (its reply channel is dropped); the group goes on.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&group)));
            let keep = matches!(&ran, Ok(r) if r.ok);
            let closed = if keep {
                savepoint("RELEASE job")
            } else {
                savepoint("ROLLBACK TO job").and_then(|_| savepoint("RELEASE job"))
            };
            if let Err(e) = &closed {
                in_doubt.get_or_insert(e.clone());
            }
            let Ok(ran) = ran else { continue };
            match closed {
                Err(_) => finishes.push(ran.finish),
                Ok(_) if keep => {
                    let mut written = group.written.borrow_mut();
                    for (key, entry) in ran.pending {
                        written.insert(key, entry);
                    }
                    finishes.push(ran.finish);
                }
                Ok(_) => finishes.push(ran.finish),
            }
        }
        (group.written.into_inner(), group.resource_version.get())
    };
    let committed = (|| {
        if let Some(e) = in_doubt {
            return Err(e);
        }
        if next_version != *resource_version {
            sql.prepare_cached("UPDATE counters SET value=?1 WHERE name='resource_version'")
                .and_then(|mut s| s.execute(params![next_version]))
                .map_err(backend)?;
        }
        let started = Instant::now();
        let committed = sql.commit().map_err(backend);
        stats.commit_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        committed
    })();
    if committed.is_ok() {
        *resource_version = next_version;
        // Still on the writer thread: the cache sees commits in commit order.
        let mut cache = cache.write().unwrap_or_else(|p| p.into_inner());
        for (key, entry) in written {
            cache.put(key, entry);
        }
    }
    for finish in finishes {
        finish(committed.clone());
    }
}

fn now_rfc3339() -> String {
    crate::resources::now_seconds().to_string()
}

/// Writes `body` (whose metadata the caller completed) with a fresh resourceVersion, and records its owners.
fn store_body(tx: &Tx<'_>, res: &str, ns: &str, mut body: Value, owners_changed: bool) -> Result<Value, StoreError> {
    let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let uid = body["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let rv = next_resource_version(tx)?;
    body["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    let owners = owners_changed.then(|| owner_uids(&body));
    store_text(tx, res, ns, &name, uid, rv, body.to_string(), owners)?;
    Ok(body)
}

/// The uids of an object's owners.
fn owner_uids(body: &Value) -> Vec<String> {
    let owners = body["metadata"]["ownerReferences"].as_array().into_iter().flatten();
    owners.filter_map(|o| o["uid"].as_str().map(str::to_string)).collect()
}

/// Writes an object's text, whose resourceVersion is `rv`, and records its owners when given.
#[allow(clippy::too_many_arguments)]
fn store_text(
    tx: &Tx<'_>,
    res: &str,
    ns: &str,
    name: &str,
    uid: String,
    rv: i64,
    text: String,
    owners: Option<Vec<String>>,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO objects (resource, namespace, name, uid, resource_version, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (resource, namespace, name) DO UPDATE SET resource_version=excluded.resource_version, body=excluded.body",
    )
    .and_then(|mut s| s.execute(params![res, ns, name, uid, rv, text]))
    .map_err(|e| if e.to_string().contains("UNIQUE constraint failed: objects.uid") { StoreError::Invalid(format!("uid {uid} is taken")) } else { backend(e) })?;
    if let Some(owners) = owners {
        store_owners(tx, res, ns, name, &owners)?;
    }
    tx.pending.borrow_mut().push((obj_key(res, ns, name), Some(Arc::new(Cached::new(rv, uid, Bytes::from(text))))));
    Ok(())
}

/// Records an object's owners, for garbage collection.
fn store_owners(tx: &Tx<'_>, res: &str, ns: &str, name: &str, owner_uids: &[String]) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM owner_refs WHERE resource=?1 AND namespace=?2 AND name=?3")
        .and_then(|mut s| s.execute(params![res, ns, name]))
        .map_err(backend)?;
    if !owner_uids.is_empty() {
        let mut insert = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO owner_refs (owner_uid, resource, namespace, name) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(backend)?;
        for owner_uid in owner_uids {
            insert.execute(params![owner_uid, res, ns, name]).map_err(backend)?;
        }
    }
    Ok(())
}

/// Adds `finalizer` to a document's `metadata.finalizers` unless it is there.
fn add_finalizer(doc: &mut Value, finalizer: &str) {
    let list = &mut doc["metadata"]["finalizers"];
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    let list = list.as_array_mut().expect("made an array above");
    if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
        list.push(Value::String(finalizer.to_string()));
    }
}

/// What an object created by [`SqliteStore::apply_document_with`] gets besides the document.
#[derive(Debug, Clone, Default)]
pub struct NewObject {
    /// A controller's finalizer, which the controller would otherwise add with a write of its own
    /// right after the create. It is not part of the applied configuration: a later apply that does
    /// not name it leaves it in place.
    pub finalizer: Option<&'static str>,
    /// The uid, reserved by the caller so that work keyed by it can start before the create lands;
    /// a new one when None.
    pub uid: Option<String>,
}

impl NewObject {
    pub fn finalized_by(finalizer: &'static str) -> NewObject {
        NewObject { finalizer: Some(finalizer), uid: None }
    }
}

/// Creates an object: the store assigns uid (`uid` when the caller reserved one), creationTimestamp,
/// generation and resourceVersion; a status in the document is dropped (it is written through the
/// status subresource).
fn insert_object(
    tx: &Tx<'_>,
    changes: &mut Changes,
    res: &str,
    ns: &str,
    mut body: Value,
    has_generation: bool,
    uid: Option<String>,
) -> Result<Value, StoreError> {
    let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if get_row(tx, res, ns, &name)?.is_some() {
        return Err(StoreError::AlreadyExists { resource: res.to_string(), name });
    }
    let meta = body["metadata"].as_object_mut().ok_or_else(|| StoreError::Invalid("metadata is required".into()))?;
    for key in SERVER_METADATA {
        meta.remove(key);
    }
    if ns.is_empty() {
        meta.remove("namespace");
    } else {
        meta.insert("namespace".into(), Value::String(ns.to_string()));
    }
    meta.insert("uid".into(), Value::String(uid.unwrap_or_else(|| uuid::Uuid::new_v4().to_string())));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    if has_generation {
        meta.insert("generation".into(), Value::from(1));
    }
    drop_empty_metadata(&mut body);
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    changes.touch(res, ns, &name);
    store_body(tx, res, ns, body, true)
}

/// What replacing an object's metadata and spec amounts to.
enum Replacement {
    /// Nothing changes: the live object, as it is.
    Unchanged(Value),
    /// The new object to store, and whether its owner references differ from the live one's.
    Store { body: Value, owners_changed: bool },
    /// The object was being deleted and its last finalizer went: it is removed.
    Remove(Value),
}

/// Replaces metadata and spec of `live` with those of `new`, keeping the store's metadata and the status.
/// `generation` moves when anything outside metadata and status changes. An object being deleted whose
/// last finalizer goes is removed. Pure: callers run it off the writer thread where they can.
fn replacement(live: &Value, new: Value) -> Result<Replacement, StoreError> {
    replacement_of(live, new, false)
}

/// [`replacement`], with the status of `new` instead of the live one when `with_status`.
fn replacement_of(live: &Value, new: Value, with_status: bool) -> Result<Replacement, StoreError> {
    let ns = live["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = live["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let mut body = new;
    let new_status = match body.as_object_mut() {
        Some(o) => o.remove("status"),
        None => None,
    };
    let Some(meta) = body["metadata"].as_object_mut() else {
        return Err(StoreError::Invalid("metadata is required".into()));
    };
    for key in SERVER_METADATA {
        match live["metadata"].get(key) {
            Some(v) => meta.insert(key.to_string(), v.clone()),
            None => meta.remove(key),
        };
    }
    meta.insert("name".into(), Value::String(name));
    if !ns.is_empty() {
        meta.insert("namespace".into(), Value::String(ns));
    }
    drop_empty_metadata(&mut body);
    let status = if with_status { new_status.as_ref() } else { live.get("status") };
    if let Some(status) = status {
        body["status"] = status.clone();
    }
    if body == *live {
        return Ok(Replacement::Unchanged(body));
    }
    let outside_metadata_and_status_differ = {
        let rest =
            |o: &Value| o.as_object().map(|m| m.iter().filter(|(k, _)| *k != "metadata" && *k != "status").count());
        let a = body.as_object();
        rest(&body) != rest(live)
            || a.into_iter().flatten().any(|(k, v)| k != "metadata" && k != "status" && live.get(k) != Some(v))
    };
    if outside_metadata_and_status_differ && let Some(g) = body["metadata"]["generation"].as_i64() {
        body["metadata"]["generation"] = Value::from(g + 1);
    }
    if body["metadata"].get("deletionTimestamp").is_some() && finalizers(&body).is_empty() {
        return Ok(Replacement::Remove(body));
    }
    let owners_changed = body["metadata"].get("ownerReferences") != live["metadata"].get("ownerReferences");
    Ok(Replacement::Store { body, owners_changed })
}

/// Writes a [`Replacement`] of the object at `res/ns/name`.
fn store_replacement(
    tx: &Tx<'_>,
    changes: &mut Changes,
    res: &str,
    ns: &str,
    name: &str,
    replacement: Replacement,
    status_only: bool,
) -> Result<Value, StoreError> {
    match replacement {
        Replacement::Unchanged(body) => Ok(body),
        Replacement::Store { body, owners_changed } => {
            if status_only {
                changes.touch_status(res, ns, name);
            } else {
                changes.touch(res, ns, name);
            }
            store_body(tx, res, ns, body, owners_changed)
        }
        Replacement::Remove(body) => {
            changes.touch(res, ns, name);
            remove_object(tx, changes, res, ns, name, &body)?;
            Ok(body)
        }
    }
}

/// [`replacement`] and [`store_replacement`] in one, for writes that read the live object in the writer.
fn replace_object(
    tx: &Tx<'_>,
    changes: &mut Changes,
    res: &str,
    live: &Value,
    new: Value,
) -> Result<Value, StoreError> {
    let ns = live["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let name = live["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let replacement = replacement(live, new)?;
    store_replacement(tx, changes, res, &ns, &name, replacement, false)
}

fn finalizers(body: &Value) -> Vec<String> {
    body["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Kubernetes omits empty label, annotation, finalizer and owner lists; so do we, so that an object
/// written back unchanged compares equal.
fn drop_empty_metadata(body: &mut Value) {
    if let Some(meta) = body["metadata"].as_object_mut() {
        meta.retain(|k, v| {
            !matches!(k.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences")
                || !(v.is_null()
                    || v.as_object().is_some_and(|o| o.is_empty())
                    || v.as_array().is_some_and(|a| a.is_empty()))
        });
    }
}

fn delete_object(tx: &Tx<'_>, changes: &mut Changes, res: &str, ns: &str, name: &str) -> Result<Deletion, StoreError> {
    let Some((mut body, _)) = get_row(tx, res, ns, name)? else {
        return Err(StoreError::NotFound { resource: res.to_string(), name: name.to_string() });
    };
    changes.touch(res, ns, name);
    if !finalizers(&body).is_empty() {
        if body["metadata"].get("deletionTimestamp").is_none() {
            body["metadata"]["deletionTimestamp"] = Value::String(now_rfc3339());
            store_body(tx, res, ns, body, false)?;
        }
        return Ok(Deletion::Pending);
    }
    remove_object(tx, changes, res, ns, name, &body)?;
    Ok(Deletion::Deleted)
}

/// Removes an object and garbage-collects, in the same transaction, the objects it was the last
/// remaining owner of (background propagation: dependents with finalizers are only marked).
fn remove_object(
    tx: &Tx<'_>,
    changes: &mut Changes,
    res: &str,
    ns: &str,
    name: &str,
    body: &Value,
) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3")
        .and_then(|mut s| s.execute(params![res, ns, name]))
        .map_err(backend)?;
    tx.pending.borrow_mut().push((obj_key(res, ns, name), None));
    tx.prepare_cached("DELETE FROM owner_refs WHERE resource=?1 AND namespace=?2 AND name=?3")
        .and_then(|mut s| s.execute(params![res, ns, name]))
        .map_err(backend)?;
    next_resource_version(tx)?;
    let Some(uid) = body["metadata"]["uid"].as_str() else { return Ok(()) };
    let dependents: Vec<(String, String, String)> = tx
        .prepare_cached("SELECT resource, namespace, name FROM owner_refs WHERE owner_uid=?1")
        .and_then(|mut s| {
            s.query_map(params![uid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<Vec<_>, _>>()
        })
        .map_err(backend)?;
    tx.prepare_cached("DELETE FROM owner_refs WHERE owner_uid=?1")
        .and_then(|mut s| s.execute(params![uid]))
        .map_err(backend)?;
    for (dres, dns, dname) in dependents {
        let remaining: i64 = tx
            .prepare_cached(
                "SELECT COUNT(*) FROM owner_refs o JOIN objects x ON x.uid = o.owner_uid
                 WHERE o.resource=?1 AND o.namespace=?2 AND o.name=?3",
            )
            .and_then(|mut s| s.query_row(params![dres, dns, dname], |r| r.get(0)))
            .map_err(backend)?;
        if remaining == 0 && get_row(tx, &dres, &dns, &dname)?.is_some() {
            delete_object(tx, changes, &dres, &dns, &dname)?;
        }
    }
    Ok(())
}

fn object_key<K: Object>(obj: &K) -> Result<(String, String), StoreError> {
    let meta = obj.meta();
    let name = meta.name.clone().ok_or_else(|| StoreError::Invalid("object without a name".into()))?;
    Ok((namespace_of::<K>(meta.namespace.as_deref()), name))
}

/// The namespace an object of kind K is stored under: "" for cluster-scoped kinds.
fn namespace_of<K: Object>(ns: Option<&str>) -> String {
    if is_namespaced::<K>() { ns.unwrap_or("default").to_string() } else { String::new() }
}

fn is_namespaced<K: Object>() -> bool {
    std::any::TypeId::of::<K::Scope>() == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>()
}

impl Store for SqliteStore {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let entry = self.read_cache().get(&resource_name::<K>(), &namespace_of::<K>(Some(namespace)), name);
        entry.map(|c| c.object()).transpose()
    }

    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let entries = self.read_cache().list(&resource_name::<K>(), namespace);
        entries.iter().map(|c| c.object()).collect()
    }

    async fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        mut f: impl FnMut(&K) -> T + Send,
    ) -> Result<Vec<T>, StoreError> {
        let entries = self.read_cache().list(&resource_name::<K>(), namespace);
        entries.iter().map(|c| c.with_object(&mut f)).collect()
    }

    async fn list_mentioning<K: Object>(&self, namespace: Option<&str>, needle: &str) -> Result<Vec<K>, StoreError> {
        let entries = self.read_cache().list(&resource_name::<K>(), namespace);
        let finder = memchr::memmem::Finder::new(needle.as_bytes());
        entries.iter().filter(|c| finder.find(&c.text).is_some()).map(|c| c.object()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{InfraEnv, validate_document};

    fn infraenv_doc(name: &str, key: &str) -> Value {
        let doc: Value = serde_json::json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": name, "namespace": "ns", "labels": {"a": "b"}},
            "spec": {"pullSecretRef": {"name": "ps"}, "sshAuthorizedKey": key}
        });
        validate_document(&doc).unwrap().1
    }

    #[tokio::test]
    async fn apply_creates_then_updates_with_kubernetes_metadata() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut events = store.subscribe();
        let (v, created) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        assert!(created);
        assert_eq!(v["metadata"]["generation"], 1);
        let uid = v["metadata"]["uid"].as_str().unwrap().to_string();
        assert_eq!(events.recv().await.unwrap().name, "a");

        // Same document again: nothing changes, no event.
        let (v2, created) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        assert!(!created);
        assert_eq!(v2["metadata"]["resourceVersion"], v["metadata"]["resourceVersion"]);

        let (v3, _) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k2")).await.unwrap();
        assert_eq!(v3["metadata"]["uid"], uid.as_str());
        assert_eq!(v3["metadata"]["generation"], 2);
        assert_ne!(v3["metadata"]["resourceVersion"], v["metadata"]["resourceVersion"]);

        let typed: InfraEnv = store.get_by_uid(&uid).await.unwrap().unwrap();
        assert_eq!(typed.spec.ssh_authorized_key.as_deref(), Some("k2"));
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
    async fn the_checkpointer_copies_the_log_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path).unwrap();
        let empty = std::fs::metadata(&path).unwrap().len();
        let stats = store.writer_stats();
        // A few writes stay in the WAL: a checkpoint now would make the next write start the WAL over
        // and wait for an fsync.
        for i in 0..10 {
            store.apply_document(Kind::InfraEnv, infraenv_doc(&format!("ie-{i}"), &"k".repeat(2000))).await.unwrap();
        }
        tokio::time::sleep(CHECKPOINT_INTERVAL * 3).await;
        assert_eq!(stats.checkpoints.load(Ordering::Relaxed), 0, "checkpointed after 10 writes");
        // Each of these writes is a transaction of its own: the caller waits for it.
        let n = CHECKPOINT_AFTER_TRANSACTIONS as usize + 10;
        for i in 10..n {
            store.apply_document(Kind::InfraEnv, infraenv_doc(&format!("ie-{i}"), &"k".repeat(2000))).await.unwrap();
        }
        // The writer leaves checkpoints to the checkpointer thread, which looks every 100 ms.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while stats.checkpoints.load(Ordering::Relaxed) == 0 && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(stats.checkpoints.load(Ordering::Relaxed) > 0, "no checkpoint ran");
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size > empty + 500 * 2000, "the database file holds the objects: {empty} -> {size} bytes");
        drop(store);
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(reopened.list::<InfraEnv>(None).await.unwrap().len(), n);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_waiting_together_commit_together_and_fail_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let resource = Kind::InfraEnv.resource();
        {
            let store = SqliteStore::open(&path).unwrap();
            // Hold the writer, so that the writes below queue up and run as one group.
            let (release, held) = std::sync::mpsc::channel::<()>();
            store
                .writer
                .send(Box::new(move |_| {
                    let _ = held.recv();
                    Ran { ok: true, pending: Vec::new(), finish: Box::new(|_| {}) }
                }))
                .unwrap();
            let mut writes = Vec::new();
            for i in 0..20 {
                let store = store.clone();
                let doc = infraenv_doc(&format!("ie-{i}"), "k");
                writes.push(tokio::spawn(async move { store.apply_document(Kind::InfraEnv, doc).await }));
            }
            // A write that stores an object and then fails: its object must not survive.
            let doomed = {
                let (store, resource) = (store.clone(), resource.clone());
                let doc = infraenv_doc("doomed", "k");
                tokio::spawn(async move {
                    store
                        .write(move |tx, changes| {
                            insert_object(tx, changes, &resource, "ns", doc, true, None)?;
                            Err::<(), _>(StoreError::Invalid("changed its mind".into()))
                        })
                        .await
                })
            };
            // A second create of ie-0 in the same group sees the first one.
            let twice = {
                let store = store.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    store.create(&serde_json::from_value::<InfraEnv>(infraenv_doc("ie-0", "k")).unwrap()).await
                })
            };
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            release.send(()).unwrap();
            let mut versions = Vec::new();
            for w in writes {
                let (stored, created) = w.await.unwrap().unwrap();
                assert!(created);
                versions.push(stored["metadata"]["resourceVersion"].as_str().unwrap().parse::<i64>().unwrap());
            }
            versions.sort();
            versions.dedup();
            assert_eq!(versions.len(), 20, "every write has its own resourceVersion");
            assert!(matches!(doomed.await.unwrap(), Err(StoreError::Invalid(_))));
            assert!(matches!(twice.await.unwrap(), Err(StoreError::AlreadyExists { .. })));
            assert!(store.get_document(Kind::InfraEnv, "ns", "doomed").await.unwrap().is_none());
        }
        let store = SqliteStore::open(&path).unwrap();
        let all: Vec<InfraEnv> = store.list(None).await.unwrap();
        assert_eq!(all.len(), 20);
        assert!(all.iter().all(|ie| ie.metadata.name.as_deref() != Some("doomed")));
        let newest = all.iter().filter_map(|ie| ie.metadata.resource_version.as_ref()?.parse::<i64>().ok()).max();
        let (next, _) = store.apply_document(Kind::InfraEnv, infraenv_doc("later", "k")).await.unwrap();
        let next: i64 = next["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(Some(next) > newest, "the resourceVersion counter survives reopening");
    }

    #[tokio::test]
    async fn written_back_objects_are_stored_as_the_general_path_would() {
        let store = SqliteStore::open_in_memory().unwrap();
        let (owner, _) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let owner_uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
        store.apply_document(Kind::InfraEnv, infraenv_doc("b", "k2")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "b").await.unwrap().unwrap();
        let generation = ie.metadata.generation;

        // A status write, then metadata (a new owner) and status together, each from what was read.
        ie.status.get_or_insert_default().iso_download_url = "http://example.com/a.iso".into();
        let after_status = store.update_status(&ie).await.unwrap();
        // The stored text came from a user's document, in its order: the first write back is general.
        assert_eq!(store.verbatim_writes(), 0);
        assert_ne!(after_status.metadata.resource_version, ie.metadata.resource_version);
        let mut ie = after_status;
        ie.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "agent-install.openshift.io/v1beta1".into(),
            kind: "InfraEnv".into(),
            name: "a".into(),
            uid: owner_uid,
            ..Default::default()
        }]);
        ie.status.get_or_insert_default().iso_download_url = "http://example.com/b.iso".into();
        let written = store.update_with_status(&ie).await.unwrap();
        assert_eq!(store.verbatim_writes(), 1, "the second is stored as the object's text");

        let json = |ie: &InfraEnv| serde_json::to_value(ie).unwrap();
        let stored: InfraEnv = store.get("ns", "b").await.unwrap().unwrap();
        assert_eq!(json(&stored), json(&written), "what the write returned is what is stored");
        assert_eq!(stored.metadata.generation, generation, "the spec did not move");
        assert_eq!(stored.status.unwrap().iso_download_url, "http://example.com/b.iso");
        // The same write again changes nothing.
        assert_eq!(json(&store.update_with_status(&written).await.unwrap()), json(&written));
        assert_eq!(
            store.get::<InfraEnv>("ns", "b").await.unwrap().unwrap().metadata.resource_version,
            written.metadata.resource_version
        );
        // A stale write is refused.
        assert!(store.update_status(&ie).await.unwrap_err().is_conflict());
        // The file agrees with memory, and the new owner reference counts for garbage collection.
        let row = store.get_document(Kind::InfraEnv, "ns", "b").await.unwrap().unwrap();
        assert_eq!(row, json(&written));
        store.delete::<InfraEnv>("ns", "a").await.unwrap();
        assert!(store.get::<InfraEnv>("ns", "b").await.unwrap().is_none(), "collected with its owner");
    }

    fn owned_secret(name: &str, owner_uid: &str) -> k8s_openapi::api::core::v1::Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "finalizers": [],
                         "ownerReferences": [{"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                                              "name": "a", "uid": owner_uid}]}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn finalizers_hold_deletion_until_removed() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        let ie = store.update(&ie).await.unwrap();
        assert_eq!(ie.metadata.generation, Some(1), "metadata changes do not move the generation");
        assert_eq!(store.delete::<InfraEnv>("ns", "a").await.unwrap(), Deletion::Pending);
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert!(ie.metadata.deletion_timestamp.is_some());
        ie.metadata.finalizers = None;
        store.update(&ie).await.unwrap();
        assert!(store.get::<InfraEnv>("ns", "a").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn reads_come_from_memory_and_agree_with_the_file() {
        use k8s_openapi::api::core::v1::Secret;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path).unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("b", "k2")).await.unwrap();
        store.create(&owned_secret("s", "some-owner")).await.unwrap();
        // A refused write leaves what readers see as it was.
        let mut stale = store.get::<InfraEnv>("ns", "a").await.unwrap().unwrap();
        stale.metadata.resource_version = Some("0".into());
        stale.spec.ssh_authorized_key = Some("changed".into());
        assert!(store.update(&stale).await.unwrap_err().is_conflict());
        let a = store.get::<InfraEnv>("ns", "a").await.unwrap().unwrap();
        assert_ne!(a.spec.ssh_authorized_key.as_deref(), Some("changed"));
        // Lists: typed, as stored texts, and the first cut by mention.
        assert_eq!(store.list::<InfraEnv>(Some("ns")).await.unwrap().len(), 2);
        assert_eq!(store.list::<InfraEnv>(Some("other")).await.unwrap().len(), 0);
        let texts = store.list_texts(Kind::InfraEnv, None);
        assert_eq!(texts.len(), 2);
        assert_eq!(serde_json::from_slice::<Value>(&texts[0]).unwrap()["metadata"]["name"], "a");
        let mentioning = store.list_mentioning::<InfraEnv>(None, "\"k2\"").await.unwrap();
        assert_eq!(mentioning.iter().map(|i| i.metadata.name.clone().unwrap()).collect::<Vec<_>>(), ["b"]);
        let uid = a.metadata.uid.clone().unwrap();
        assert_eq!(store.get_by_uid::<InfraEnv>(&uid).await.unwrap().unwrap().metadata.name.as_deref(), Some("a"));
        assert!(store.get_by_uid::<Secret>(&uid).await.unwrap().is_none(), "a uid names one kind's object");
        store.delete::<InfraEnv>("ns", "b").await.unwrap();
        // What a fresh process loads from the file is what this one serves from memory.
        let reopened = SqliteStore::open(&path).unwrap();
        for kind in [Kind::InfraEnv, Kind::Secret] {
            assert_eq!(reopened.list_texts(kind, None), store.list_texts(kind, None));
        }
        assert!(reopened.get_by_uid::<InfraEnv>(&uid).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn dependents_are_collected_with_their_last_owner() {
        let store = SqliteStore::open_in_memory().unwrap();
        let (ie, _) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let uid = ie["metadata"]["uid"].as_str().unwrap();
        store.create(&owned_secret("plain", uid)).await.unwrap();
        let mut held = owned_secret("held", uid);
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        store.create(&held).await.unwrap();
        store.create(&owned_secret("other", "no-such-owner-left")).await.unwrap();
        assert_eq!(store.delete::<InfraEnv>("ns", "a").await.unwrap(), Deletion::Deleted);
        use k8s_openapi::api::core::v1::Secret;
        assert!(store.get::<Secret>("ns", "plain").await.unwrap().is_none());
        let held: Secret = store.get("ns", "held").await.unwrap().unwrap();
        assert!(held.metadata.deletion_timestamp.is_some(), "dependents with finalizers are only marked");
        assert!(store.get::<Secret>("ns", "other").await.unwrap().is_some());
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

    #[tokio::test]
    async fn apply_keeps_what_controllers_added() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        ie.metadata.labels.get_or_insert_default().insert("added-by".into(), "controller".into());
        store.update(&ie).await.unwrap();
        // Re-applying with a changed key keeps the controller's finalizer and label; a label the
        // document dropped goes.
        let mut doc = infraenv_doc("a", "k2");
        doc["metadata"]["labels"] = serde_json::json!({});
        store.apply_document(Kind::InfraEnv, doc).await.unwrap();
        let ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(ie.spec.ssh_authorized_key.as_deref(), Some("k2"));
        assert_eq!(ie.metadata.finalizers, Some(vec!["example.com/hold".to_string()]));
        let labels = ie.metadata.labels.unwrap();
        assert_eq!(labels.get("added-by").map(String::as_str), Some("controller"));
        assert!(!labels.contains_key("a"));
    }

    #[tokio::test]
    async fn a_finalizer_added_at_create_outlives_later_applies() {
        let store = SqliteStore::open_in_memory().unwrap();
        let (created, is_new) = store
            .apply_document_with(Kind::InfraEnv, infraenv_doc("a", "k1"), NewObject::finalized_by("example.com/hold"))
            .await
            .unwrap();
        assert!(is_new);
        assert_eq!(created["metadata"]["finalizers"], serde_json::json!(["example.com/hold"]));
        // Not part of what was applied, so an apply that does not name it keeps it.
        let (updated, is_new) = store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k2")).await.unwrap();
        assert!(!is_new);
        assert_eq!(updated["spec"]["sshAuthorizedKey"], "k2");
        assert_eq!(updated["metadata"]["finalizers"], serde_json::json!(["example.com/hold"]));
        // Only a create adds it.
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.metadata.finalizers = None;
        store.update(&ie).await.unwrap();
        let (updated, _) = store
            .apply_document_with(Kind::InfraEnv, infraenv_doc("a", "k3"), NewObject::finalized_by("example.com/hold"))
            .await
            .unwrap();
        assert_eq!(updated["metadata"]["finalizers"], Value::Null);
    }

    #[tokio::test]
    async fn a_create_takes_the_uid_reserved_for_it_and_an_update_keeps_the_stored_one() {
        let store = SqliteStore::open_in_memory().unwrap();
        let reserved = NewObject { uid: Some("5e1ec7ed-0000-4000-8000-000000000001".into()), ..NewObject::default() };
        let (created, is_new) =
            store.apply_document_with(Kind::InfraEnv, infraenv_doc("a", "k1"), reserved.clone()).await.unwrap();
        assert!(is_new);
        assert_eq!(created["metadata"]["uid"], "5e1ec7ed-0000-4000-8000-000000000001");
        // A client cannot choose one: a uid in the document is the store's to replace.
        let mut doc = infraenv_doc("b", "k1");
        doc["metadata"]["uid"] = Value::String("chosen-by-the-client".into());
        let (other, _) = store.apply_document(Kind::InfraEnv, doc).await.unwrap();
        assert_ne!(other["metadata"]["uid"], "chosen-by-the-client");
        // An apply that turns out to update does not touch the uid.
        let reserved = NewObject { uid: Some("5e1ec7ed-0000-4000-8000-000000000002".into()), ..NewObject::default() };
        let (updated, is_new) =
            store.apply_document_with(Kind::InfraEnv, infraenv_doc("a", "k2"), reserved).await.unwrap();
        assert!(!is_new);
        assert_eq!(updated["metadata"]["uid"], "5e1ec7ed-0000-4000-8000-000000000001");
    }

    #[tokio::test]
    async fn create_refuses_duplicates_and_update_refuses_stale_versions() {
        let store = SqliteStore::open_in_memory().unwrap();
        let s = owned_secret("s", "x");
        let created = store.create(&s).await.unwrap();
        assert!(matches!(store.create(&s).await, Err(StoreError::AlreadyExists { .. })));
        let mut a = created.clone();
        a.metadata.labels = Some([("k".to_string(), "1".to_string())].into());
        store.update(&a).await.unwrap();
        let mut b = created;
        b.metadata.labels = Some([("k".to_string(), "2".to_string())].into());
        assert!(store.update(&b).await.unwrap_err().is_conflict());
    }
}
