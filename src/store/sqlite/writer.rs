//! The writer thread that owns the SQLite connection: jobs waiting together run in one transaction
//! (group commit), each in a savepoint of its own; what committed is published to the read cache and
//! announced as change events. A checkpointer copies the WAL into the database file off this thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use rusqlite::{Connection, params};
use serde_json::Value;

use super::cache::{Cache, Cached, ObjKey, obj_key};
use super::{SqliteStore, backend};
use crate::keylocks::LockedRw as _;
use crate::store::{ChangeEvent, StoreError};

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

impl WriterStats {
    pub(super) fn record_transaction(&self, micros: u64) {
        let bucket = TRANSACTION_BUCKET_MICROS.iter().position(|&bound| micros <= bound);
        let bucket = bucket.unwrap_or(TRANSACTION_BUCKET_MICROS.len());
        self.transaction_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.busy_micros.fetch_add(micros, Ordering::Relaxed);
    }
}

/// Upper bounds of [`WriterStats::transaction_buckets`], in microseconds.
pub const TRANSACTION_BUCKET_MICROS: [u64; 9] = [250, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000];

/// Work for the thread that owns the connection. Jobs waiting together are run in one SQLite
/// transaction (group commit), each in a savepoint of its own so that a failing job takes back only
/// its own writes. A job returns what it wrote and what to do once the group's fate is known.
pub(super) type Job = Box<dyn FnOnce(&Group<'_>) -> Ran + Send>;

/// A job's outcome within its group.
pub(super) struct Ran {
    /// Whether its writes stay (otherwise they are rolled back to its savepoint).
    ok: bool,
    /// The objects it wrote, published to the cache when the group commits.
    pending: Vec<(ObjKey, Option<Arc<Cached>>)>,
    /// Answers the caller with the group's commit result.
    finish: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
}

/// At most this many jobs share a transaction: a bound on how long the first of them waits.
pub(super) const MAX_GROUP: usize = 256;

/// How often the checkpointer looks for committed writes to copy into the database file.
pub(super) const CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The transactions committed since the last checkpoint that make the checkpointer run one. Once a
/// checkpoint has copied the whole WAL, the next commit starts the WAL over, and SQLite fsyncs the
/// new WAL header inside that commit (0.3–0.5 ms here). Checkpointing whatever was written in the
/// last interval put that fsync into the first write after every pause: the create of an InfraEnv,
/// for one. Waiting for this many transactions pays it once per as many, and keeps the WAL at a few
/// MiB (an object is a few pages).
pub(super) const CHECKPOINT_AFTER_TRANSACTIONS: u64 = 512;

/// The WAL size (in pages) at which the writer checkpoints by itself, in case the checkpointer
/// cannot keep up (SQLite's default is 1000). The checkpointer runs after
/// [`CHECKPOINT_AFTER_TRANSACTIONS`], a few MiB of WAL, well under this 64 MiB.
pub(super) const WRITER_CHECKPOINT_PAGES: i64 = 16384;

/// The jobs of one SQLite transaction: the committed objects, what the group's earlier jobs wrote,
/// and the resourceVersion counter (kept here and written once per group).
pub(super) struct Group<'a> {
    sql: &'a Connection,
    committed: &'a Cache,
    written: RefCell<HashMap<ObjKey, Option<Arc<Cached>>>>,
    resource_version: std::cell::Cell<i64>,
}

/// One job's view of the store: SQL, plus the objects written so far, which its own reads must see
/// before they are committed (and published to the cache).
pub(super) struct Tx<'a> {
    group: &'a Group<'a>,
    pub(super) pending: RefCell<Vec<(ObjKey, Option<Arc<Cached>>)>>,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.group.sql
    }
}

impl Tx<'_> {
    pub(super) fn lookup(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
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

/// Copies committed pages from the WAL into the database file, off the writer thread. A checkpoint
/// reads and writes every page written since the last one and fsyncs the database file: on the
/// writer thread (SQLite's automatic checkpoint, run inside a COMMIT) that work and the wait for
/// the disk held up every write queued behind it. PASSIVE checkpoints never block the writer; the
/// WAL starts over from its beginning once a checkpoint has caught up with it. Ends when the store
/// is dropped.
pub(super) fn run_checkpointer(conn: Connection, stats: std::sync::Weak<WriterStats>) {
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
                tracing::warn!("checkpointing the store's write-ahead log: {}", crate::errors::chain(&e));
            }
            Err(_) => {}
        }
    }
}

/// Runs a batch of jobs in one transaction and, once it committed, publishes what they wrote to the
/// cache and answers their callers.
pub(super) fn run_group(
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
        let committed = cache.read_locked();
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
        // The references each object holds, read before readers are locked out.
        let written: Vec<_> = written
            .into_iter()
            .map(|(key, entry)| {
                let refs = super::cache::references_of(&key, entry.as_deref());
                (key, entry, refs)
            })
            .collect();
        // Still on the writer thread: the cache sees commits in commit order.
        let mut cache = cache.write_locked();
        for (key, entry, refs) in written {
            cache.put_indexed(key, entry, refs);
        }
    }
    for finish in finishes {
        finish(committed.clone());
    }
}

pub(super) fn next_resource_version(tx: &Tx<'_>) -> Result<i64, StoreError> {
    let rv = tx.group.resource_version.get() + 1;
    tx.group.resource_version.set(rv);
    Ok(rv)
}

/// The object as this transaction sees it, with its resourceVersion.
pub(super) fn get_row(tx: &Tx<'_>, res: &str, ns: &str, name: &str) -> Result<Option<(Value, i64)>, StoreError> {
    tx.lookup(res, ns, name).map(|c| Ok((c.value()?, c.rv))).transpose()
}

impl SqliteStore {
    /// Runs `f` on the writer thread, in a transaction (shared with the other writes waiting at the
    /// same time, in a savepoint of its own), and emits change events for what it touched once that
    /// transaction committed. An error from `f` rolls back its writes only.
    ///
    /// The events go out from the writer thread, in commit order: subscribers (the API's watches
    /// among them) see changes in resourceVersion order. Sent by each caller once it resumed, two
    /// writes of one group could go out in either order, and a watch that resumed from the later
    /// one's version never showed the earlier one.
    pub(super) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Tx<'_>, &mut Changes) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (done, result) = tokio::sync::oneshot::channel();
        let (events, change_counts) = (self.events.clone(), self.change_counts.clone());
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
                        if committed.is_ok() {
                            for event in changes.0 {
                                change_counts.bump(&event.resource, &event.namespace, &event.name);
                                crate::store::CHANGES_FED.fetch_add(1, Ordering::Relaxed);
                                let _ = events.send(event);
                            }
                        }
                        let _ = done.send(committed.map(|()| out));
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
        self.writer.send(job).map_err(|_| StoreError::backend_message("the store's writer thread is gone"))?;
        result.await.map_err(|e| StoreError::backend_in("the store's write failed", e))?
    }
}

/// What a write did, for the caller to emit change events after the transaction commits.
#[derive(Default)]
pub(super) struct Changes(pub(super) Vec<ChangeEvent>);

impl Changes {
    pub(super) fn touch(&mut self, res: &str, ns: &str, name: &str) {
        self.push(res, ns, name, false);
    }
    pub(super) fn touch_status(&mut self, res: &str, ns: &str, name: &str) {
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
    pub(super) fn stamp(&mut self, pending: &[(ObjKey, Option<Arc<Cached>>)]) {
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

#[cfg(test)]
mod tests {
    use super::super::tests::infraenv_doc;
    use super::*;
    use crate::resources::InfraEnv;
    use crate::resources::Kind;
    use crate::store::Store;
    use crate::store::sqlite::insert_object;
    /// Writes that share a group commit resume their callers in any order; their changes must still
    /// reach subscribers in resourceVersion order (a watch resuming from a version would otherwise
    /// miss an earlier one delivered after it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_go_out_in_commit_order() {
        let store = SqliteStore::open_in_memory().unwrap();
        let mut changes = store.subscribe();
        let writes: Vec<_> = (0..400)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store.apply_document(Kind::InfraEnv, infraenv_doc(&format!("ie-{i}"), "k")).await.unwrap()
                })
            })
            .collect();
        for w in writes {
            w.await.unwrap();
        }
        let (mut last, mut seen) = (0i64, 0);
        while let Ok(change) = changes.try_recv() {
            let rv: i64 = change.resource_version.as_deref().unwrap().parse().unwrap();
            assert!(rv > last, "change at {rv} after one at {last}");
            (last, seen) = (rv, seen + 1);
        }
        assert!(seen >= 400, "{seen} changes");
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
}
