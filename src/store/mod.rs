//! Where resources live. Controllers and the image server see the world only through [`Store`], which
//! has an embedded SQLite implementation ([`sqlite::SqliteStore`]) and, for clusters, a Kubernetes one.
//!
//! The semantics are the API server's, because the controllers are written against them:
//! - `resourceVersion` is checked on every write that carries one (optimistic concurrency);
//! - `generation` moves when anything but metadata and status changes;
//! - deleting an object with finalizers only sets `deletionTimestamp`; the object goes away when its
//!   last finalizer is removed;
//! - objects whose every owner (ownerReferences) is gone are deleted (background garbage collection).
//!
//! docs/design.md §7 compares the two stores.

mod cached;
pub mod json;
pub mod kube;
pub mod sqlite;
mod verbatim;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::keylocks::LockedRw as _;
use crate::resources::references::Ref;

/// What a Kubernetes API path addresses: `/apis/GROUP/VERSION[/namespaces/NS]/PLURAL[/NAME[/status]]`
/// or `/api/v1/...` for the core group.
#[derive(Debug, PartialEq, Eq)]
pub struct ApiPath<'a> {
    /// `/apis/GROUP/VERSION` or `/api/v1`.
    pub prefix: String,
    /// None: no namespace part (a list across namespaces, or a cluster-scoped kind, then with a name).
    /// Some(""): a name without a namespace part.
    pub namespace: Option<&'a str>,
    pub plural: &'a str,
    pub name: Option<&'a str>,
    pub status: bool,
}

impl<'a> ApiPath<'a> {
    /// Parses the path's segments (without the leading slash); None if it is not an API path.
    pub fn parse(segs: &[&'a str]) -> Option<ApiPath<'a>> {
        let (prefix, rest) = match segs {
            ["apis", group, version, rest @ ..] => (format!("/apis/{group}/{version}"), rest),
            ["api", "v1", rest @ ..] => ("/api/v1".to_string(), rest),
            _ => return None,
        };
        let (namespace, plural, name, status) = match rest {
            [plural] => (None, *plural, None, false),
            [plural, name] => (Some(""), *plural, Some(*name), false),
            [plural, name, "status"] => (Some(""), *plural, Some(*name), true),
            ["namespaces", ns, plural] => (Some(*ns), *plural, None, false),
            ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), false),
            ["namespaces", ns, plural, name, "status"] => (Some(*ns), *plural, Some(*name), true),
            _ => return None,
        };
        Some(ApiPath { prefix, namespace, plural, name, status })
    }
}

/// A resource type the store holds: any Kubernetes-shaped object.
pub trait Object:
    ::kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}
impl<T> Object for T where
    T: ::kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Send + Sync + 'static
{
}

/// The resource name Kubernetes uses in messages: `infraenvs.agent-install.openshift.io`, `secrets`.
pub fn resource_name<K: Object>() -> String {
    let group = K::group(&());
    let plural = K::plural(&());
    if group.is_empty() { plural.to_string() } else { format!("{plural}.{group}") }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Worded as the Kubernetes API server words it: `secrets "pull-secret" not found`.
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    /// The cluster's RBAC refused the request (worded as before this had a variant of its own, so
    /// logs read the same).
    #[error("store: 403 Forbidden: {0}")]
    Forbidden(String),
    /// Something below the store's semantics failed: the database, the connection to the API server,
    /// a document that does not decode. Its cause is kept as the error's source.
    #[error(transparent)]
    Backend(BackendError),
}

/// A [`StoreError::Backend`]: shown as `store: CONTEXT`, its cause (if any) as its source, so that
/// [`crate::errors::chain`] shows `store: CONTEXT: CAUSE` (or `store: CAUSE` without a context).
#[derive(Debug, Clone)]
pub struct BackendError {
    context: String,
    /// Shared so that a store error can be cloned (a failed read handed to several waiters).
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl BackendError {
    /// What failed, with no cause under it.
    pub fn message(context: impl Into<String>) -> BackendError {
        BackendError { context: context.into(), source: None }
    }

    /// `source`, with what was being done when it failed (`""` when the cause says it all).
    pub fn caused(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> BackendError {
        BackendError { context: context.into(), source: Some(std::sync::Arc::new(source)) }
    }

    /// The text after `store: `: the context and each cause, as [`crate::errors::chain`] joins them.
    pub fn detail(&self) -> String {
        let causes = self.source.as_deref().map(|s| crate::errors::chain(s).to_string());
        match (self.context.is_empty(), causes) {
            (_, None) => self.context.clone(),
            (true, Some(causes)) => causes,
            (false, Some(causes)) if self.context.contains(&causes) => self.context.clone(),
            (false, Some(causes)) => format!("{}: {causes}", self.context),
        }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.context.is_empty() { f.write_str("store") } else { write!(f, "store: {}", self.context) }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// The message of an API error reporting a backend failure (the API server's `InternalError` body):
/// the detail without the `store: ` prefix, as it read when the variant held a string.
impl From<BackendError> for String {
    fn from(e: BackendError) -> String {
        e.detail()
    }
}

impl StoreError {
    pub fn not_found<K: Object>(name: &str) -> StoreError {
        StoreError::NotFound { resource: resource_name::<K>(), name: name.to_string() }
    }
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict(_))
    }
    /// A backend failure whose cause says it all (a database's error, a request's).
    pub fn backend(source: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError::Backend(BackendError::caused("", source))
    }
    /// A backend failure: `context` failed because of `source`.
    pub fn backend_in(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Backend(BackendError::caused(context, source))
    }
    /// A backend failure with no cause to keep (a thread gone, an index out of step).
    pub fn backend_message(message: impl Into<String>) -> StoreError {
        StoreError::Backend(BackendError::message(message))
    }
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// The object is gone.
    Deleted,
    /// The object has finalizers: it is marked (`deletionTimestamp`) and goes when they are removed.
    Pending,
}

/// A change to a stored object, for controllers to map to the keys they reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeEvent {
    /// [`resource_name`] of the object's kind.
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// Only the status changed (a write through the status subresource): controllers that do not read
    /// other objects' status skip these, as kube-rs's generation predicates do.
    pub status_only: bool,
    /// The resourceVersion the change produced (None for an object that is gone), as a watch event
    /// carries it: a controller recognizes the echo of its own write by it.
    pub resource_version: Option<String>,
}

pub trait Store: Clone + Send + Sync + 'static {
    fn get<K: Object>(&self, namespace: &str, name: &str)
    -> impl Future<Output = Result<Option<K>, StoreError>> + Send;
    fn list<K: Object>(&self, namespace: Option<&str>) -> impl Future<Output = Result<Vec<K>, StoreError>> + Send;
    /// [`Store::list`], each object lent to `f` as it is decoded, for callers that keep a little of
    /// each: a store that holds the objects encoded need not decode them all at once (30,000
    /// NMStateConfigs are 180 MB decoded, and the allocator handing that much back to the system stalls
    /// whatever allocates next), and one that keeps them decoded need not copy them.
    fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl FnMut(&K) -> T + Send,
    ) -> impl Future<Output = Result<Vec<T>, StoreError>> + Send {
        async move { Ok(self.list::<K>(namespace).await?.iter().map(f).collect()) }
    }
    /// The objects of kind K (in `namespace`) holding `value` in `relation` (whose kind must be K's),
    /// from the store's reference index ([`crate::resources::references`]): the work is proportional
    /// to the objects found, not to the objects of the kind. This default scans, for stores without
    /// an index (tests' wrappers forward to the store they wrap).
    fn list_referencing<K: Object>(
        &self,
        namespace: Option<&str>,
        relation: Ref,
        value: &str,
    ) -> impl Future<Output = Result<Vec<K>, StoreError>> + Send {
        async move {
            let mut out = Vec::new();
            for obj in self.list::<K>(namespace).await? {
                let json = serde_json::to_value(&obj).map_err(StoreError::backend)?;
                if relation.values(&json).iter().any(|v| v == value) {
                    out.push(obj);
                }
            }
            Ok(out)
        }
    }
    /// Whether any object of kind K exists (in `namespace`): lets a watch skip work for kinds a
    /// user does not use at all.
    fn any<K: Object>(&self, namespace: Option<&str>) -> impl Future<Output = Result<bool, StoreError>> + Send {
        async move { Ok(!self.list::<K>(namespace).await?.is_empty()) }
    }
    /// The object with this `metadata.uid` (InfraEnvs are addressed by uid in image URLs).
    fn get_by_uid<K: Object>(&self, uid: &str) -> impl Future<Output = Result<Option<K>, StoreError>> + Send;
    /// Creates the object; the store assigns uid, creationTimestamp, generation and resourceVersion.
    fn create<K: Object>(&self, obj: &K) -> impl Future<Output = Result<K, StoreError>> + Send;
    /// Replaces metadata (labels, annotations, finalizers, owners) and spec, keeping the status, if the
    /// object's resourceVersion is still current. Removing the last finalizer of an object being deleted
    /// deletes it.
    fn update<K: Object>(&self, obj: &K) -> impl Future<Output = Result<K, StoreError>> + Send;
    /// Replaces the object's status if its resourceVersion is still current; returns the stored object.
    fn update_status<K: Object>(&self, obj: &K) -> impl Future<Output = Result<K, StoreError>> + Send;
    /// [`Store::update`] then [`Store::update_status`] with the same object: what a controller does
    /// when it changed both. Kubernetes makes these two calls; a store that can write both at once
    /// (one write, one change event) does.
    fn update_with_status<K: Object>(&self, obj: &K) -> impl Future<Output = Result<K, StoreError>> + Send {
        async move {
            let stored = self.update(obj).await?;
            let mut with_status = obj.clone();
            *with_status.meta_mut() = stored.meta().clone();
            self.update_status(&with_status).await
        }
    }
    /// Whether [`Store::update_with_status`] is one write (one resourceVersion, one change event),
    /// rather than the two Kubernetes makes.
    fn writes_object_and_status_at_once(&self) -> bool {
        false
    }
    fn delete<K: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Deletion, StoreError>> + Send;
    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent>;
    /// How many changes of `resource` ([`resource_name`]) the store has announced, counted before each
    /// is sent to subscribers: whoever reacts to a change sees the count it moved to. A cache of
    /// objects of that kind stays valid while the count does not move. `None` when the store does not
    /// announce that kind's changes (nothing of it may be cached then).
    fn change_count(&self, resource: &str) -> Option<u64> {
        let _ = resource;
        None
    }
    /// The change count of `resource` now and the (namespace, name) of each object changed after
    /// change number `since` (a name may repeat), so that a cache of many objects can catch up by
    /// reading only those. `None` when the store cannot say (too far back, or it does not announce
    /// that kind): the cache reads everything again.
    fn changes_since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        let _ = (resource, since);
        None
    }
}

/// Objects the stores handed to their callers (decoded, or lent to a `list_map` closure), both
/// stores, the whole process: what the controllers read per change (`/metrics`
/// `store_objects_read`, the fleet benchmark's reads per change). Process-wide, as a server runs one
/// store; a test that counts uses a store of its own (`controllers/triggers.rs`).
pub static OBJECTS_READ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Changes the stores fed to their subscribers (`/metrics` `store_changes_fed`).
pub static CHANGES_FED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts `n` objects read ([`OBJECTS_READ`]).
pub(crate) fn count_read(n: usize) {
    OBJECTS_READ.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Changes announced per resource (see [`Store::change_count`]), with the names of the last
/// [`CHANGE_LOG_LEN`] of each (see [`Store::changes_since`]).
#[derive(Debug, Default)]
pub struct ChangeCounts(std::sync::RwLock<std::collections::HashMap<String, ChangeLog>>);

/// How many of a resource's latest changes [`ChangeCounts`] remembers by name.
pub const CHANGE_LOG_LEN: usize = 4096;

#[derive(Debug, Default)]
pub struct ChangeLog {
    count: u64,
    /// (namespace, name) of changes `count - recent.len() + 1 ..= count`, oldest first.
    recent: std::collections::VecDeque<(String, String)>,
}

impl ChangeCounts {
    pub fn count(&self, resource: &str) -> u64 {
        self.0.read_locked().get(resource).map_or(0, |log| log.count)
    }

    pub fn bump(&self, resource: &str, namespace: &str, name: &str) {
        let mut logs = self.0.write_locked();
        let log = match logs.get_mut(resource) {
            Some(log) => log,
            None => logs.entry(resource.to_string()).or_default(),
        };
        log.count += 1;
        if log.recent.len() == CHANGE_LOG_LEN {
            log.recent.pop_front();
        }
        log.recent.push_back((namespace.to_string(), name.to_string()));
    }

    /// The count now and the objects changed after change number `since`, or `None` when that is
    /// further back than the log reaches.
    pub fn since(&self, resource: &str, since: u64) -> Option<(u64, Vec<(String, String)>)> {
        let logs = self.0.read_locked();
        let Some(log) = logs.get(resource) else {
            return (since == 0).then(|| (0, Vec::new()));
        };
        let newer = log.count.checked_sub(since)?;
        if newer > log.recent.len() as u64 {
            return None;
        }
        let skip = log.recent.len() - newer as usize;
        Some((log.count, log.recent.iter().skip(skip).cloned().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_change_log_names_what_changed_as_far_back_as_it_reaches() {
        let counts = ChangeCounts::default();
        assert_eq!(counts.since("things", 0), Some((0, vec![])));
        counts.bump("things", "ns", "a");
        counts.bump("things", "ns", "b");
        counts.bump("others", "ns", "z");
        let named = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert_eq!(counts.since("things", 0), Some((2, named(&[("ns", "a"), ("ns", "b")]))));
        assert_eq!(counts.since("things", 1), Some((2, named(&[("ns", "b")]))));
        assert_eq!(counts.since("things", 2), Some((2, vec![])));
        // A count from the future (another store's) is not answered.
        assert_eq!(counts.since("things", 3), None);
        for i in 0..CHANGE_LOG_LEN {
            counts.bump("things", "ns", &format!("n{i}"));
        }
        let total = 2 + CHANGE_LOG_LEN as u64;
        assert_eq!(counts.count("things"), total);
        // The two first changes fell out of the log.
        assert_eq!(counts.since("things", 1), None);
        let (now, changed) = counts.since("things", 2).unwrap();
        assert_eq!((now, changed.len()), (total, CHANGE_LOG_LEN));
        assert_eq!(changed[0].1, "n0");
    }

    #[test]
    fn a_backend_error_keeps_its_cause() {
        use std::error::Error as _;
        let io = || std::io::Error::other("disk I/O error");
        let e = StoreError::backend(io());
        assert_eq!(crate::errors::chain(&e).to_string(), "store: disk I/O error");
        assert_eq!(e.source().map(|s| s.to_string()).as_deref(), Some("disk I/O error"));
        let e = StoreError::backend_in("opening /var/lib/db", io());
        assert_eq!(crate::errors::chain(&e).to_string(), "store: opening /var/lib/db: disk I/O error");
        // A clone (a failed read handed to several waiters) keeps the cause too.
        assert_eq!(crate::errors::chain(&e.clone()).to_string(), "store: opening /var/lib/db: disk I/O error");
        let StoreError::Backend(b) = e else { panic!("{e:?}") };
        // The API server's InternalError body: as it read when the variant held a string.
        assert_eq!(String::from(b), "opening /var/lib/db: disk I/O error");
        let e = StoreError::backend_message("the store's writer thread is gone");
        assert_eq!(crate::errors::chain(&e).to_string(), "store: the store's writer thread is gone");
        assert!(e.source().is_none());
    }
}
