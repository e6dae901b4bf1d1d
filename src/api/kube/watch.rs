//! Watches: the store's change feed turned into the API's watch events, a bounded window of recent
//! events for watches that resume from a resourceVersion, and the last state of every object (what a
//! watch from "now" starts with, and what a DELETED event carries).
//!
//! Events hold the stored JSON texts themselves (shared with the store's cache), and a watch sends
//! them as they are: each event line goes out as three pieces, a static envelope head, the stored
//! text, and a static tail, so a thousand watches of the same 1 MB object hold one copy of it. What a
//! watch has queued and not yet written is bounded by [`QUEUE_BUDGET`]; a client that leaves it full
//! for [`STALL`] has its watch closed, as the API server closes watchers that do not keep up. A watch
//! from a resourceVersion older than the window gets the API server's `410 Gone` (as an ERROR event)
//! and must list again; one from a version newer than any known waits up to [`FUTURE_WAIT`] for it,
//! then gets the API server's "Too large resource version" (504).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails, WatchEvent};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::http::feed::{self, Feed, FeedSender, SendError};
use crate::keylocks::Locked as _;

use crate::store::sqlite::SqliteStore;

/// Events kept for watches that resume; past it, the oldest go (and resuming before them is 410).
const WINDOW: usize = 20_000;
/// Longest a watch lasts; clients (reflectors, `kubectl get -w`) start a new one.
pub const MAX_WATCH: Duration = Duration::from_secs(30 * 60);
/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// The most a watch holds queued and not yet written. Its pieces are shared (the stored texts), but
/// a client that does not read keeps them alive after the store moved on: without a bound, each
/// stalled watch could pin a copy of every object written while it stalls. 16 MiB takes a whole
/// 1 MB object with room to spare, and a reflector's burst of small events, without waiting.
pub const QUEUE_BUDGET: u64 = 16 << 20;
/// How long a watch waits for its client to make room in a full queue before it is closed (the
/// client resumes from its last resourceVersion, or lists again). Shorter than the server's write
/// timeout: what the watch queued is dropped at once, not when the connection gives up.
pub const STALL: Duration = Duration::from_secs(15);
/// How long a watch from a resourceVersion newer than any known waits for it to be recorded before
/// it is refused, as the API server waits for its watch cache.
pub const FUTURE_WAIT: Duration = Duration::from_secs(3);

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
    /// The highest resourceVersion recorded, for watches from a version not recorded yet.
    recorded: tokio::sync::watch::Sender<i64>,
    /// Each watch's queue: at most `budget` bytes, closed after `stall` full ([`QUEUE_BUDGET`],
    /// [`STALL`]; smaller in tests).
    budget: u64,
    stall: Duration,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
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
        Watches::start_with(store, resources, window, QUEUE_BUDGET, STALL)
    }

    fn start_with(
        store: SqliteStore,
        resources: &[String],
        window: usize,
        budget: u64,
        stall: Duration,
    ) -> Arc<Watches> {
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
        let recorded = tokio::sync::watch::channel(history.resource_version).0;
        let watches = Arc::new(Watches {
            history: Mutex::new(history),
            feed: broadcast::channel(8192).0,
            epoch: tokio::sync::watch::channel(0).0,
            window,
            recorded,
            budget,
            stall,
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

    /// Waits up to `wait` for the store's changes up to `rv` to be recorded; Err(the newest
    /// recorded) if they were not, as the API server refuses a resourceVersion its watch cache has
    /// not reached ([`too_large`]).
    pub async fn wait_for(&self, rv: i64, wait: Duration) -> Result<(), i64> {
        let mut recorded = self.recorded.subscribe();
        let reached = recorded.wait_for(|&current| current >= rv);
        match tokio::time::timeout(wait, reached).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(*self.recorded.borrow()),
        }
    }

    /// Starts a watch of `resource` (in `namespace`, or all): the events `start` asks for, then new
    /// ones as they come, each passed through `filter` (None: not sent) and written as one line.
    pub fn watch(self: &Arc<Self>, resource: &str, namespace: Option<&str>, opts: WatchOptions) -> Feed {
        let (tx, feed) = feed::channel(self.budget, self.stall);
        self.watch_into(tx, resource, namespace, opts);
        feed
    }

    fn watch_into(self: &Arc<Self>, tx: FeedSender, resource: &str, namespace: Option<&str>, opts: WatchOptions) {
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
            // An event line is the envelope's head, the object's text (the stored one itself
            // unless the filter made another), and the envelope's tail: nothing is copied.
            let send = |type_: &'static str, text: &Bytes| -> Option<[Bytes; 3]> {
                let object = (opts.filter)(text)?;
                Some([envelope_head(type_), object, Bytes::from_static(b"}\n")])
            };
            let send_line = async |line: [Bytes; 3]| -> Result<(), SendError> {
                for piece in line {
                    tx.send(piece).await?;
                }
                Ok(())
            };
            let replay = match replay {
                Ok(r) => r,
                Err(oldest) => {
                    let from = match opts.start {
                        Start::After(from) => from,
                        Start::Current => 0,
                    };
                    let _ = tx.send(expired(format!("too old resource version: {from} ({oldest})"))).await;
                    return;
                }
            };
            for (type_, text) in &replay {
                if let Some(line) = send(type_, text)
                    && send_line(line).await.is_err()
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
                        let _ = tx.send(expired(format!("too old resource version: {last_rv}"))).await;
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
                                let _ = tx.send(expired("the watch fell behind; list again".into())).await;
                                return;
                            }
                            Err(broadcast::error::RecvError::Closed) => return,
                        };
                        last_rv = last_rv.max(event.resource_version);
                        if !matches(&event.resource, &event.namespace) {
                            continue;
                        }
                        if let Some(line) = send(event.type_, &event.text)
                            && send_line(line).await.is_err()
                        {
                            return;
                        }
                    }
                }
            }
        });
    }
}

/// `{"type":"<type>","object":`: the head of a watch event line, shared by every event of its type.
fn envelope_head(type_: &'static str) -> Bytes {
    match type_ {
        "ADDED" => Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":"),
        "MODIFIED" => Bytes::from_static(b"{\"type\":\"MODIFIED\",\"object\":"),
        "DELETED" => Bytes::from_static(b"{\"type\":\"DELETED\",\"object\":"),
        other => Bytes::from(format!("{{\"type\":\"{other}\",\"object\":")),
    }
}

/// The API server's answer to a read from a resourceVersion it has not reached: 504 with reason
/// `Timeout` (the client may retry after a second), the cause `ResourceVersionTooLarge`.
pub fn too_large(asked: i64, current: i64) -> Status {
    Status {
        status: Some("Failure".into()),
        message: Some(format!("Timeout: Too large resource version: {asked}, current: {current}")),
        reason: Some("Timeout".into()),
        details: Some(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: None,
            }]),
            retry_after_seconds: Some(1),
            ..Default::default()
        }),
        code: Some(504),
        metadata: Default::default(),
    }
}

/// The event that ends a watch whose start (or whose place in the feed) is gone: `410 Expired`,
/// after which clients list again.
fn expired(message: String) -> Bytes {
    let gone: WatchEvent<Status> = WatchEvent::ErrorStatus(Status {
        status: Some("Failure".into()),
        message: Some(message),
        reason: Some("Expired".into()),
        code: Some(410),
        ..Default::default()
    });
    let mut line = serde_json::to_vec(&gone).expect("a watch event serializes");
    line.push(b'\n');
    Bytes::from(line)
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
                // Written again since: that write's change comes later in the feed (which is in
                // commit order) and records this text then, so that the window stays in
                // resourceVersion order and a watch resuming from a version misses nothing after it.
                // The version in between is not shown: one event for the two writes (kube-apiserver
                // shows both; a client that acts on the latest state, as a reflector does, ends the
                // same).
                if change.resource_version.as_deref().and_then(|v| v.parse::<i64>().ok()).is_some_and(|at| rv > at) {
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
        let newest = history.resource_version;
        drop(history);
        let _ = watches.feed.send(event);
        watches.recorded.send_if_modified(|rv| {
            let moved = newest > *rv;
            *rv = (*rv).max(newest);
            moved
        });
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

    /// A watch's body as its client reads it, a line at a time.
    struct Lines {
        rx: crate::http::feed::FeedReceiver,
        buf: Vec<u8>,
    }

    impl Lines {
        /// The next piece; None at the end of the body.
        async fn piece(&mut self) -> Option<Bytes> {
            let piece = tokio::time::timeout(Duration::from_secs(5), self.rx.recv()).await.expect("a piece in time")?;
            Some(piece.expect("a feed not cut").into_bytes())
        }
        async fn end(&mut self) -> bool {
            self.piece().await.is_none() && self.buf.is_empty()
        }
    }

    fn lines(feed: Feed) -> Lines {
        Lines { rx: feed.take().unwrap(), buf: Vec::new() }
    }

    async fn next(rx: &mut Lines) -> Value {
        while !rx.buf.contains(&b'\n') {
            let piece = rx.piece().await.expect("an event before the end");
            rx.buf.extend_from_slice(&piece);
        }
        let at = rx.buf.iter().position(|&b| b == b'\n').unwrap();
        let line: Vec<u8> = rx.buf.drain(..=at).collect();
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
        let mut rx = lines(w.watch(RES, Some("ns"), opts(Start::Current)));
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
        let mut rx = lines(w.watch(RES, None, opts(Start::After(rv(&a)))));
        assert_eq!(next(&mut rx).await["object"]["metadata"]["name"], "b");
        // A deletion carries the last version recorded: from that version, it is replayed.
        store.delete_raw(RES, "ns", "b").await.unwrap();
        assert_eq!(next(&mut rx).await["type"], "DELETED");
        let mut from_b = lines(w.watch(RES, None, opts(Start::After(rv(&b)))));
        let deleted = next(&mut from_b).await;
        assert_eq!(
            (deleted["type"].as_str(), deleted["object"]["metadata"]["name"].as_str()),
            (Some("DELETED"), Some("b"))
        );
        // From before the window (the seed): 410, as the API server answers.
        let mut rx = lines(w.watch(RES, None, opts(Start::After(rv(&old) - 1))));
        let gone = next(&mut rx).await;
        assert_eq!((gone["type"].as_str(), gone["object"]["code"].as_i64()), (Some("ERROR"), Some(410)));
        assert_eq!(gone["object"]["reason"], "Expired");
        assert!(rx.end().await, "the watch ends after 410");
    }

    #[tokio::test]
    async fn a_watch_ends_at_its_timeout_and_when_its_client_goes() {
        let store = SqliteStore::open_in_memory().unwrap();
        let w = Watches::start(store.clone(), &[RES.to_string()]);
        let mut o = opts(Start::Current);
        o.timeout = Duration::from_millis(50);
        o.initial_events_end = false;
        let mut rx = lines(w.watch(RES, None, o));
        assert!(rx.end().await, "the watch ends");
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
        let mut rx = lines(w.watch(quiet, None, opts(Start::After(rv(&s)))));
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
        let mut rx = lines(w.watch(RES, None, opts(Start::After(rv(&first)))));
        let gone = next(&mut rx).await;
        assert_eq!((gone["type"].as_str(), gone["object"]["code"].as_i64()), (Some("ERROR"), Some(410)));
    }

    /// A ConfigMap of about `size` bytes of JSON.
    fn big_cm(name: &str, size: usize) -> Value {
        cm(name, &"x".repeat(size))
    }

    #[tokio::test]
    async fn stalled_watches_share_the_stored_texts_hold_at_most_their_budget_and_are_closed() {
        const OBJECTS: usize = 20;
        const WATCHES: usize = 20;
        const BUDGET: u64 = 3 << 20;
        let stall = Duration::from_millis(300);
        let store = SqliteStore::open_in_memory().unwrap();
        for i in 0..OBJECTS {
            store.create_raw(RES, "ns", big_cm(&format!("big-{i}"), 1 << 20), false).await.unwrap();
        }
        let w = Watches::start_with(store.clone(), &[RES.to_string()], WINDOW, BUDGET, stall);
        let stored: Vec<usize> = lock(&w.history).last.values().map(|t| t.as_ptr() as usize).collect();
        assert_eq!(stored.len(), OBJECTS);
        let before = crate::http::feed::queued_total();
        let feeds: Vec<_> = (0..WATCHES).map(|_| w.watch(RES, None, opts(Start::Current)).take().unwrap()).collect();
        // Every watch fills its budget, and waits: nobody reads.
        for _ in 0..500 {
            if feeds.iter().all(|f| f.queued() + (2 << 20) > BUDGET) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut held = 0;
        for f in &feeds {
            let queued = f.queued();
            assert!(queued <= BUDGET, "a watch holds {queued} bytes, past its budget of {BUDGET}");
            assert!(queued + (2 << 20) > BUDGET, "a watch queued only {queued} bytes");
            held += queued;
            // The objects queued are the stored texts themselves, not copies.
            let objects: Vec<Bytes> = f.queued_pieces().into_iter().filter(|p| p.len() > 1000).collect();
            assert!(!objects.is_empty());
            for o in objects {
                assert!(stored.contains(&(o.as_ptr() as usize)), "a queued object is a copy of the stored one");
            }
        }
        assert!(held <= WATCHES as u64 * BUDGET);
        assert!(crate::http::feed::queued_total() - before <= WATCHES as u64 * BUDGET);
        // Past the stall time, each stalled watch is closed and what it queued dropped.
        tokio::time::sleep(stall * 2).await;
        for mut f in feeds {
            let next = tokio::time::timeout(Duration::from_secs(5), f.recv()).await.expect("the watch closed in time");
            assert!(matches!(next, Some(Err(crate::http::feed::Cut))), "a stalled watch is cut");
            assert_eq!(f.queued(), 0);
        }
        assert_eq!(crate::http::feed::queued_total(), before);
    }

    #[tokio::test]
    async fn a_watch_read_in_time_gets_everything_past_its_budget() {
        let store = SqliteStore::open_in_memory().unwrap();
        for i in 0..8 {
            store.create_raw(RES, "ns", big_cm(&format!("big-{i}"), 256 << 10), false).await.unwrap();
        }
        let w = Watches::start_with(store.clone(), &[RES.to_string()], WINDOW, 600 << 10, Duration::from_secs(5));
        let mut rx = lines(w.watch(RES, None, opts(Start::Current)));
        let mut names = Vec::new();
        for _ in 0..8 {
            let event = next(&mut rx).await;
            assert_eq!(event["type"], "ADDED");
            names.push(event["object"]["metadata"]["name"].as_str().unwrap().to_string());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        names.sort();
        assert_eq!(names, (0..8).map(|i| format!("big-{i}")).collect::<Vec<_>>());
        assert_eq!(next(&mut rx).await["type"], "BOOKMARK");
    }

    #[tokio::test]
    async fn a_watch_from_a_version_not_recorded_waits_for_it_then_is_refused() {
        let store = SqliteStore::open_in_memory().unwrap();
        let a = store.create_raw(RES, "ns", cm("a", "1"), false).await.unwrap();
        let w = Watches::start(store.clone(), &[RES.to_string()]);
        let current = rv(&a);
        assert_eq!(w.wait_for(current, Duration::ZERO).await, Ok(()));
        // A version the store reaches while the watch waits is served.
        let waiting = {
            let w = w.clone();
            tokio::spawn(async move { w.wait_for(current + 1, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.create_raw(RES, "ns", cm("b", "1"), false).await.unwrap();
        assert_eq!(waiting.await.unwrap(), Ok(()));
        // One it never reaches is refused after the wait, with the newest version known.
        let started = std::time::Instant::now();
        assert_eq!(w.wait_for(current + 1000, Duration::from_millis(200)).await, Err(current + 1));
        assert!(started.elapsed() >= Duration::from_millis(200));
        let status = serde_json::to_value(too_large(current + 1000, current + 1)).unwrap();
        assert_eq!((status["code"].as_i64(), status["reason"].as_str()), (Some(504), Some("Timeout")));
        assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(
            status["message"],
            format!("Timeout: Too large resource version: {}, current: {}", current + 1000, current + 1)
        );
    }

    /// Serves a watch of [`RES`] from now on every request, over a real server.
    struct WatchServer(Arc<Watches>);

    impl crate::http::Handler for WatchServer {
        async fn handle(self: Arc<Self>, _req: http::Request<Bytes>) -> http::Response<crate::http::Body> {
            http::Response::new(crate::http::Body::Stream(self.0.watch(RES, None, opts(Start::Current))))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn twenty_watchers_that_never_read_hold_at_most_their_budgets_over_tcp() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const BUDGET: u64 = 2 << 20;
        const WATCHERS: u64 = 20;
        let stall = Duration::from_secs(1);
        let store = SqliteStore::open_in_memory().unwrap();
        for i in 0..12 {
            store.create_raw(RES, "ns", big_cm(&format!("big-{i}"), 1 << 20), false).await.unwrap();
        }
        let w = Watches::start_with(store.clone(), &[RES.to_string()], WINDOW, BUDGET, stall);
        let listener = crate::http::server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = crate::http::server::ServerConfig::default();
        tokio::spawn(crate::http::server::serve(listener, Arc::new(WatchServer(w)), config, async {
            let _ = stopped.await;
        }));
        let mut clients = Vec::new();
        for i in 0..WATCHERS {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 << 10).unwrap();
            let mut s = socket.connect(addr).await.unwrap();
            // Half on the fast path, half through hyper (a chunked request body sends it there).
            let request = if i % 2 == 0 {
                "GET /watch HTTP/1.1\r\nhost: x\r\n\r\n".to_string()
            } else {
                "GET /watch HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_string()
            };
            s.write_all(request.as_bytes()).await.unwrap();
            clients.push(s);
        }
        // While they stall, the server never holds more than each watcher's budget.
        let mut most = 0;
        let sampling = std::time::Instant::now();
        while sampling.elapsed() < stall {
            most = most.max(crate::http::feed::queued_total());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(most <= WATCHERS * BUDGET, "{most} bytes queued for {WATCHERS} watchers of {BUDGET} each");
        assert!(most >= BUDGET, "the watchers never filled a budget ({most} bytes queued): the test shows nothing");
        // Past the stall time each watcher is closed, its queue dropped and its connection ended.
        let mut freed = false;
        for _ in 0..1000 {
            if crate::http::feed::queued_total() == 0 {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(freed, "{} bytes still queued after the stall time", crate::http::feed::queued_total());
        for mut s in clients {
            let mut sink = vec![0u8; 1 << 20];
            let ended = tokio::time::timeout(Duration::from_secs(20), async {
                loop {
                    match s.read(&mut sink).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            assert!(ended.is_ok(), "a stalled watcher's connection was not closed");
        }
        let _ = stop.send(());
    }
}
