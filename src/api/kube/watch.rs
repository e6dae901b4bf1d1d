//! Watches: the store's change feed turned into the API's watch events, a bounded window of recent
//! events for watches that resume from a resourceVersion, and the last state of every object (what a
//! watch from "now" starts with, and what a DELETED event carries).
//!
//! Events hold the stored JSON texts themselves (shared with the store's cache), so a watch of
//! thousands of Agents copies nothing but the event envelope. A watch from a resourceVersion older
//! than the window gets the API server's `410 Gone` (as an ERROR event) and must list again.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::store::sqlite::SqliteStore;

/// Events kept for watches that resume; past it, the oldest go (and resuming before them is 410).
const WINDOW: usize = 20_000;
/// Longest a watch lasts; clients (reflectors, `kubectl get -w`) start a new one.
pub const MAX_WATCH: Duration = Duration::from_secs(30 * 60);
/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

type Key = (String, String, String);

/// One change as a watch reports it.
#[derive(Debug)]
pub struct Event {
    pub resource_version: i64,
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub type_: &'static str,
    /// The object's JSON text: as written, or its last state for DELETED.
    pub text: Bytes,
}

#[derive(Default)]
struct History {
    /// Per resource, its latest events (at most the window each): a busy kind's events never push a
    /// quiet kind's out.
    events: HashMap<String, VecDeque<Arc<Event>>>,
    /// Watches from before this resourceVersion cannot be served: nothing is known of the changes
    /// before it (the server started there, or lost track of the store's changes).
    oldest: i64,
    /// Per resource, the version a watch of it must resume from at least, given the events of it
    /// that left the window. Kept per resource, as the API server's watch cache is, so
    /// that a quiet kind (Secrets) is not told "410 Gone" because a busy one (Agents) filled the window
    /// since its last event.
    dropped: HashMap<String, i64>,
    /// The highest resourceVersion recorded: what a list is stamped with.
    resource_version: i64,
    /// The last state of each object.
    last: HashMap<Key, Bytes>,
}

pub struct Watches {
    history: Mutex<History>,
    feed: broadcast::Sender<Arc<Event>>,
    /// Moves when the history is dropped ([`Watches::compact`]): every open watch then ends.
    epoch: tokio::sync::watch::Sender<u64>,
    /// Events kept ([`WINDOW`]; smaller in tests).
    window: usize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn rv_of(text: &[u8]) -> i64 {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(rename = "resourceVersion", default)]
        resource_version: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Obj {
        metadata: Meta,
    }
    serde_json::from_slice::<Obj>(text)
        .ok()
        .and_then(|o| o.metadata.resource_version)
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

impl Watches {
    /// Follows `store`'s changes from now on; `resources` are the store keys whose current objects
    /// seed the last states (needs a tokio runtime).
    pub fn start(store: SqliteStore, resources: &[String]) -> Arc<Watches> {
        Watches::start_with_window(store, resources, WINDOW)
    }

    fn start_with_window(store: SqliteStore, resources: &[String], window: usize) -> Arc<Watches> {
        use crate::store::Store;
        // Subscribed before the seed is read: a change in between is recorded twice, harmlessly.
        let changes = store.subscribe();
        let mut history = History::default();
        for res in resources {
            for (ns, name, text, rv) in store.list_raw_keyed(res, None) {
                history.resource_version = history.resource_version.max(rv);
                history.last.insert((res.clone(), ns, name), text);
            }
        }
        history.oldest = history.resource_version;
        let watches = Arc::new(Watches {
            history: Mutex::new(history),
            feed: broadcast::channel(8192).0,
            epoch: tokio::sync::watch::channel(0).0,
            window,
        });
        tokio::spawn(record(Arc::downgrade(&watches), store, changes));
        watches
    }

    /// Drops the events kept for resuming and ends every open watch with `410 Gone`, as an API
    /// server does when its watch cache starts over (a restart, or etcd compacted past a watcher):
    /// for tests of clients that must then list again.
    #[cfg(any(test, feature = "testkit"))]
    pub fn compact(&self) {
        let mut history = lock(&self.history);
        history.events.clear();
        history.oldest = history.resource_version + 1;
        drop(history);
        self.epoch.send_modify(|e| *e += 1);
    }

    /// The resourceVersion a list served now is stamped with.
    pub fn resource_version(&self) -> i64 {
        lock(&self.history).resource_version
    }

    /// Starts a watch of `resource` (in `namespace`, or all): the events `start` asks for, then new
    /// ones as they come, each passed through `filter` (None: not sent) and written as one line.
    pub fn watch(
        self: &Arc<Self>,
        resource: &str,
        namespace: Option<&str>,
        opts: WatchOptions,
    ) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel::<Bytes>(256);
        let matches = {
            let (resource, namespace) = (resource.to_string(), namespace.map(str::to_string));
            move |res: &str, ns: &str| res == resource && namespace.as_deref().is_none_or(|want| want == ns)
        };
        let (replay, mut feed, current_rv) = {
            let history = lock(&self.history);
            let replay: Result<Vec<(&'static str, Bytes)>, i64> = match opts.start {
                Start::Current => Ok(history
                    .last
                    .iter()
                    .filter(|((res, ns, _), _)| matches(res, ns))
                    .map(|(_, text)| ("ADDED", text.clone()))
                    .collect()),
                // The changes after `from`, as the API server sends them: a list stamped `from`
                // holds every object written at `from` (`kubectl get -w` would print it twice). A
                // deletion has no version of its own (it carries the last one recorded), so one at
                // `from` itself is replayed: the list may have been read before it.
                Start::After(from)
                    if from >= history.oldest && history.dropped.get(resource).is_none_or(|d| from >= *d) =>
                {
                    Ok(history
                        .events
                        .get(resource)
                        .into_iter()
                        .flatten()
                        .filter(|e| {
                            (e.resource_version > from || (e.resource_version == from && e.type_ == "DELETED"))
                                && matches(&e.resource, &e.namespace)
                        })
                        .map(|e| (e.type_, e.text.clone()))
                        .collect())
                }
                Start::After(_) => Err(history.oldest.max(history.dropped.get(resource).copied().unwrap_or(0))),
            };
            (replay, self.feed.subscribe(), history.resource_version)
        };
        let mut epoch = self.epoch.subscribe();
        let send_initial_end = opts.start == Start::Current && opts.initial_events_end;
        tokio::spawn(async move {
            let send = |type_: &'static str, text: &Bytes| -> Option<Bytes> {
                let object = (opts.filter)(text)?;
                let mut line = Vec::with_capacity(object.len() + 32);
                line.extend_from_slice(b"{\"type\":\"");
                line.extend_from_slice(type_.as_bytes());
                line.extend_from_slice(b"\",\"object\":");
                line.extend_from_slice(&object);
                line.extend_from_slice(b"}\n");
                Some(Bytes::from(line))
            };
            let replay = match replay {
                Ok(r) => r,
                Err(oldest) => {
                    let from = match opts.start {
                        Start::After(from) => from,
                        Start::Current => 0,
                    };
                    let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                        "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                        "message": format!("too old resource version: {from} ({oldest})")}});
                    let _ = tx.send(Bytes::from(format!("{gone}\n"))).await;
                    return;
                }
            };
            for (type_, text) in &replay {
                if let Some(line) = send(type_, text)
                    && tx.send(line).await.is_err()
                {
                    return;
                }
            }
            if send_initial_end {
                let line = bookmark(&opts.bookmark_type, current_rv, true);
                if tx.send(line).await.is_err() {
                    return;
                }
            }
            let deadline = tokio::time::sleep(opts.timeout);
            tokio::pin!(deadline);
            let mut bookmarks = tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
            let mut last_rv = current_rv;
            loop {
                tokio::select! {
                    _ = &mut deadline => return,
                    _ = tx.closed() => return,
                    _ = epoch.changed() => {
                        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                            "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                            "message": format!("too old resource version: {last_rv}")}});
                        let _ = tx.send(Bytes::from(format!("{gone}\n"))).await;
                        return;
                    }
                    _ = bookmarks.tick(), if opts.bookmarks => {
                        if tx.send(bookmark(&opts.bookmark_type, last_rv, false)).await.is_err() {
                            return;
                        }
                    }
                    event = feed.recv() => {
                        let event = match event {
                            Ok(e) => e,
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                // This watch fell behind the feed: it starts over from a list, as
                                // after the API server's "410 Gone".
                                let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
                                    "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
                                    "message": "the watch fell behind; list again"}});
                                let _ = tx.send(Bytes::from(format!("{gone}\n"))).await;
                                return;
                            }
                            Err(broadcast::error::RecvError::Closed) => return,
                        };
                        last_rv = last_rv.max(event.resource_version);
                        if !matches(&event.resource, &event.namespace) {
                            continue;
                        }
                        if let Some(line) = send(event.type_, &event.text)
                            && tx.send(line).await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
        rx
    }
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The current objects as ADDED, then changes (no resourceVersion, or "0").
    Current,
    /// The changes after a resourceVersion (and deletions recorded at it).
    After(i64),
}

/// See [`WatchOptions::filter`].
pub type EventFilter = Box<dyn Fn(&Bytes) -> Option<Bytes> + Send + Sync>;

pub struct WatchOptions {
    pub start: Start,
    pub timeout: Duration,
    pub bookmarks: bool,
    /// After the current objects, a bookmark marking the end of the initial events
    /// (`sendInitialEvents=true`).
    pub initial_events_end: bool,
    /// `(apiVersion, kind)` of bookmark objects.
    pub bookmark_type: (String, String),
    /// The object as the client asked for it (filtered by selectors, converted to metadata or a
    /// table row); None: not for this watch.
    pub filter: EventFilter,
}

fn bookmark((api_version, kind): &(String, String), rv: i64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let event = json!({"type": "BOOKMARK", "object": {"apiVersion": api_version, "kind": kind, "metadata": metadata}});
    Bytes::from(format!("{event}\n"))
}

/// Records the store's changes as events, in the order the store committed them.
async fn record(
    watches: std::sync::Weak<Watches>,
    store: SqliteStore,
    mut changes: broadcast::Receiver<crate::store::ChangeEvent>,
) {
    loop {
        let change = match changes.recv().await {
            Ok(c) => c,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                // Some changes were not seen: no watch can resume from before now.
                tracing::warn!(missed = n, "the watch feed lagged behind the store; resuming watches must list again");
                if let Some(w) = watches.upgrade() {
                    let mut h = lock(&w.history);
                    h.oldest = h.resource_version + 1;
                    h.events.clear();
                }
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(watches) = watches.upgrade() else { return };
        let key = (change.resource.clone(), change.namespace.clone(), change.name.clone());
        let current = store.get_raw_text(&change.resource, &change.namespace, &change.name);
        let mut history = lock(&watches.history);
        let event = match current {
            Some(text) => {
                let rv = rv_of(&text);
                if history.last.get(&key).is_some_and(|old| rv_of(old) >= rv) {
                    // Already recorded (a change seen twice, or one the seed held).
                    continue;
                }
                let type_ = if history.last.insert(key, text.clone()).is_some() { "MODIFIED" } else { "ADDED" };
                history.resource_version = history.resource_version.max(rv);
                Event {
                    resource_version: rv,
                    resource: change.resource,
                    namespace: change.namespace,
                    name: change.name,
                    type_,
                    text,
                }
            }
            None => {
                let Some(text) = history.last.remove(&key) else { continue };
                Event {
                    resource_version: history.resource_version,
                    resource: change.resource,
                    namespace: change.namespace,
                    name: change.name,
                    type_: "DELETED",
                    text,
                }
            }
        };
        let event = Arc::new(event);
        let History { events, dropped, .. } = &mut *history;
        let kept = match events.get_mut(&event.resource) {
            Some(kept) => kept,
            None => events.entry(event.resource.clone()).or_default(),
        };
        kept.push_back(event.clone());
        while kept.len() > watches.window {
            if let Some(old) = kept.pop_front() {
                // A resume from a version replays the deletions recorded at it (see `watch`): past
                // a dropped deletion's own version, then.
                let after = old.resource_version + i64::from(old.type_ == "DELETED");
                let newest = dropped.entry(old.resource.clone()).or_insert(after);
                *newest = (*newest).max(after);
            }
        }
        drop(history);
        let _ = watches.feed.send(event);
    }
}

/// The metadata-only form of an object (`PartialObjectMetadata`), for clients that ask for it.
pub fn metadata_only(object: &Value) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": object["metadata"]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;

    const RES: &str = "configmaps";

    fn cm(name: &str, v: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": {"v": v}})
    }

    fn opts(start: Start) -> WatchOptions {
        WatchOptions {
            start,
            timeout: Duration::from_secs(30),
            bookmarks: false,
            initial_events_end: start == Start::Current,
            bookmark_type: ("v1".into(), "ConfigMap".into()),
            filter: Box::new(|t| Some(t.clone())),
        }
    }

    async fn next(rx: &mut mpsc::Receiver<Bytes>) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("an event in time").unwrap();
        serde_json::from_slice(&line).unwrap()
    }

    /// Waits until the recorder has seen the store at `rv`.
    async fn settled(w: &Watches, rv: i64) {
        for _ in 0..500 {
            if w.resource_version() >= rv {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the watch feed never reached {rv}");
    }

    fn rv(v: &Value) -> i64 {
        v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
    }

    #[tokio::test]
    async fn a_watch_starts_with_what_is_there_then_follows_every_change() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.create_raw(RES, "ns", cm("a", "1"), false).await.unwrap();
        let w = Watches::start(store.clone(), &[RES.to_string()]);
        let mut rx = w.watch(RES, Some("ns"), opts(Start::Current));
        let first = next(&mut rx).await;
        assert_eq!((first["type"].as_str(), first["object"]["data"]["v"].as_str()), (Some("ADDED"), Some("1")));
        let end = next(&mut rx).await;
        assert_eq!(end["type"], "BOOKMARK");
        assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
        let mut doc = store.get_raw(RES, "ns", "a").unwrap().unwrap();
        doc["data"]["v"] = json!("2");
        store.replace_raw(RES, "ns", doc).await.unwrap();
        let modified = next(&mut rx).await;
        assert_eq!(
            (modified["type"].as_str(), modified["object"]["data"]["v"].as_str()),
            (Some("MODIFIED"), Some("2"))
        );
        store.delete_raw(RES, "ns", "a").await.unwrap();
        let deleted = next(&mut rx).await;
        assert_eq!((deleted["type"].as_str(), deleted["object"]["data"]["v"].as_str()), (Some("DELETED"), Some("2")));
        // Another namespace is not this watch's business.
        store.create_raw(RES, "other", cm("b", "1"), false).await.unwrap();
        store.create_raw(RES, "ns", cm("c", "1"), false).await.unwrap();
        assert_eq!(next(&mut rx).await["object"]["metadata"]["name"], "c");
    }

    #[tokio::test]
    async fn a_watch_resumes_after_a_version_and_one_too_old_is_gone() {
        let store = SqliteStore::open_in_memory().unwrap();
        let old = store.create_raw(RES, "ns", cm("before", "1"), false).await.unwrap();
        let w = Watches::start(store.clone(), &[RES.to_string()]);
        let a = store.create_raw(RES, "ns", cm("a", "1"), false).await.unwrap();
        let b = store.create_raw(RES, "ns", cm("b", "1"), false).await.unwrap();
        settled(&w, rv(&b)).await;
        // From a's version: what came after it (b), as the API server sends; not a itself, which a
        // list stamped with that version holds (`kubectl get -w` would print it twice).
        let mut rx = w.watch(RES, None, opts(Start::After(rv(&a))));
        assert_eq!(next(&mut rx).await["object"]["metadata"]["name"], "b");
        // A deletion carries the last version recorded: from that version, it is replayed.
        store.delete_raw(RES, "ns", "b").await.unwrap();
        assert_eq!(next(&mut rx).await["type"], "DELETED");
        let mut from_b = w.watch(RES, None, opts(Start::After(rv(&b))));
        let deleted = next(&mut from_b).await;
        assert_eq!(
            (deleted["type"].as_str(), deleted["object"]["metadata"]["name"].as_str()),
            (Some("DELETED"), Some("b"))
        );
        // From before the window (the seed): 410, as the API server answers.
        let mut rx = w.watch(RES, None, opts(Start::After(rv(&old) - 1)));
        let gone = next(&mut rx).await;
        assert_eq!((gone["type"].as_str(), gone["object"]["code"].as_i64()), (Some("ERROR"), Some(410)));
        assert_eq!(gone["object"]["reason"], "Expired");
        assert!(rx.recv().await.is_none(), "the watch ends after 410");
    }

    #[tokio::test]
    async fn a_watch_ends_at_its_timeout_and_when_its_client_goes() {
        let store = SqliteStore::open_in_memory().unwrap();
        let w = Watches::start(store.clone(), &[RES.to_string()]);
        let mut o = opts(Start::Current);
        o.timeout = Duration::from_millis(50);
        o.initial_events_end = false;
        let mut rx = w.watch(RES, None, o);
        let ended = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("the watch ends");
        assert!(ended.is_none());
        // A dropped receiver ends the task (the feed loses its subscriber).
        let rx = w.watch(RES, None, opts(Start::Current));
        let before = w.feed.receiver_count();
        drop(rx);
        store.create_raw(RES, "ns", cm("x", "1"), false).await.unwrap();
        for _ in 0..500 {
            if w.feed.receiver_count() < before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("the watch task outlived its client");
    }

    #[tokio::test]
    async fn a_quiet_resource_resumes_after_a_busy_one_filled_the_window() {
        let store = SqliteStore::open_in_memory().unwrap();
        let quiet = "secrets";
        let w = Watches::start_with_window(store.clone(), &[RES.to_string(), quiet.to_string()], 4);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}});
        let s = store.create_raw(quiet, "ns", secret, false).await.unwrap();
        let first = store.create_raw(RES, "ns", cm("busy-0", "1"), false).await.unwrap();
        let mut last = first.clone();
        for i in 1..10 {
            last = store.create_raw(RES, "ns", cm(&format!("busy-{i}"), "1"), false).await.unwrap();
        }
        settled(&w, rv(&last)).await;
        // Nothing of the quiet resource changed after its version: its watch resumes.
        let mut rx = w.watch(quiet, None, opts(Start::After(rv(&s))));
        let t = store
            .create_raw(
                quiet,
                "ns",
                json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "t", "namespace": "ns"}}),
                false,
            )
            .await
            .unwrap();
        let added = next(&mut rx).await;
        assert_eq!((added["type"].as_str(), added["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("t")));
        assert_eq!(rv(&added["object"]), rv(&t));
        // The busy resource's own events from then are gone: 410.
        let mut rx = w.watch(RES, None, opts(Start::After(rv(&first))));
        let gone = next(&mut rx).await;
        assert_eq!((gone["type"].as_str(), gone["object"]["code"].as_i64()), (Some("ERROR"), Some(410)));
    }
}
