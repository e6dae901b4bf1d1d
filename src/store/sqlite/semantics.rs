//! The Kubernetes object rules, as one transaction applies them: the store assigns uid,
//! creationTimestamp, generation and resourceVersion; a write with a stale resourceVersion is a
//! conflict; generation moves with the spec; finalizers hold a deletion; dependents go with their
//! last owner.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rusqlite::params;
use serde_json::Value;

use super::cache::{Cached, obj_key};
use super::writer::{Changes, Tx, get_row, next_resource_version};
use super::{SqliteStore, backend, conflict};
use crate::resources::Kind;
use crate::store::json::LAST_APPLIED_ANNOTATION;
use crate::store::verbatim::{Part, Verbatim};
use crate::store::{Deletion, Object, StoreError, resource_name, verbatim};

/// Metadata fields the store owns: never taken from a client's write.
pub(super) const SERVER_METADATA: [&str; 5] =
    ["uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp"];

pub(super) fn now_rfc3339() -> String {
    crate::resources::now_seconds().to_string()
}

/// Writes `body` (whose metadata the caller completed) with a fresh resourceVersion, and records its owners.
pub(super) fn store_body(
    tx: &Tx<'_>,
    res: &str,
    ns: &str,
    mut body: Value,
    owners_changed: bool,
) -> Result<Value, StoreError> {
    let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let uid = body["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    let rv = next_resource_version(tx)?;
    body["metadata"]["resourceVersion"] = Value::String(rv.to_string());
    let owners = owners_changed.then(|| owner_uids(&body));
    store_text(tx, res, ns, &name, uid, rv, body.to_string(), owners)?;
    Ok(body)
}

/// The uids of an object's owners.
pub(super) fn owner_uids(body: &Value) -> Vec<String> {
    let owners = body["metadata"]["ownerReferences"].as_array().into_iter().flatten();
    owners.filter_map(|o| o["uid"].as_str().map(str::to_string)).collect()
}

/// Writes an object's text, whose resourceVersion is `rv`, and records its owners when given.
#[allow(clippy::too_many_arguments)]
pub(super) fn store_text(
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
pub(super) fn store_owners(
    tx: &Tx<'_>,
    res: &str,
    ns: &str,
    name: &str,
    owner_uids: &[String],
) -> Result<(), StoreError> {
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
pub(super) fn add_finalizer(doc: &mut Value, finalizer: &str) {
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
pub(super) fn insert_object(
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
pub(super) enum Replacement {
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
pub(super) fn replacement(live: &Value, new: Value) -> Result<Replacement, StoreError> {
    replacement_of(live, new, false)
}

/// [`replacement`], with the status of `new` instead of the live one when `with_status`.
pub(super) fn replacement_of(live: &Value, new: Value, with_status: bool) -> Result<Replacement, StoreError> {
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
pub(super) fn store_replacement(
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
pub(super) fn replace_object(
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

pub(super) fn finalizers(body: &Value) -> Vec<String> {
    body["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Kubernetes omits empty label, annotation, finalizer and owner lists; so do we, so that an object
/// written back unchanged compares equal.
pub(super) fn drop_empty_metadata(body: &mut Value) {
    if let Some(meta) = body["metadata"].as_object_mut() {
        meta.retain(|k, v| {
            !matches!(k.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences")
                || !(v.is_null()
                    || v.as_object().is_some_and(|o| o.is_empty())
                    || v.as_array().is_some_and(|a| a.is_empty()))
        });
    }
}

pub(super) fn delete_object(
    tx: &Tx<'_>,
    changes: &mut Changes,
    res: &str,
    ns: &str,
    name: &str,
) -> Result<Deletion, StoreError> {
    let Some((mut body, _)) = get_row(tx, res, ns, name)? else {
        return Err(StoreError::NotFound { resource: res.to_string(), name: name.to_string() });
    };
    if !finalizers(&body).is_empty() {
        // Deleting an object already being deleted changes nothing, and announces nothing (a change
        // event without a resourceVersion says the object went).
        if body["metadata"].get("deletionTimestamp").is_none() {
            changes.touch(res, ns, name);
            body["metadata"]["deletionTimestamp"] = Value::String(now_rfc3339());
            store_body(tx, res, ns, body, false)?;
        }
        return Ok(Deletion::Pending);
    }
    changes.touch(res, ns, name);
    remove_object(tx, changes, res, ns, name, &body)?;
    Ok(Deletion::Deleted)
}

/// Removes an object and garbage-collects, in the same transaction, the objects it was the last
/// remaining owner of (background propagation: dependents with finalizers are only marked).
pub(super) fn remove_object(
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

pub(super) fn object_key<K: Object>(obj: &K) -> Result<(String, String), StoreError> {
    let meta = obj.meta();
    let name = meta.name.clone().ok_or_else(|| StoreError::Invalid("object without a name".into()))?;
    Ok((namespace_of::<K>(meta.namespace.as_deref()), name))
}

/// The namespace an object of kind K is stored under: "" for cluster-scoped kinds.
pub(super) fn namespace_of<K: Object>(ns: Option<&str>) -> String {
    if is_namespaced::<K>() { ns.unwrap_or("default").to_string() } else { String::new() }
}

pub(super) fn is_namespaced<K: Object>() -> bool {
    std::any::TypeId::of::<K::Scope>() == std::any::TypeId::of::<k8s_openapi::NamespaceResourceScope>()
}

pub(super) fn doc_namespace(kind: Kind, doc: &Value) -> String {
    if kind.namespaced() {
        doc["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
    } else {
        String::new()
    }
}

/// The part of a user document `kubectl apply` remembers: everything but server-owned metadata and status.
pub(super) fn applied_configuration(doc: &Value) -> Value {
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

pub(super) fn without_status(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    d
}

impl SqliteStore {
    /// Writes a change computed from the live object without holding up the writer thread: `compute`
    /// runs on the caller's thread over the committed object, and the writer only checks that the
    /// object did not move meanwhile before storing the result. A write naming a stale
    /// resourceVersion is refused, as the API server refuses it; one naming none is recomputed.
    pub(super) async fn write_over_live(
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
    pub(super) async fn write_verbatim<K: Object>(&self, obj: &K, part: Part) -> Option<Result<K, StoreError>> {
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::{infraenv_doc, owned_secret};
    use super::*;
    use crate::resources::InfraEnv;
    use crate::store::Store;
    use crate::store::sqlite::SqliteStore;
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
    async fn deleting_an_object_being_deleted_again_changes_and_announces_nothing() {
        let store = SqliteStore::open_in_memory().unwrap();
        store.apply_document(Kind::InfraEnv, infraenv_doc("a", "k1")).await.unwrap();
        let mut ie: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        ie.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        store.update(&ie).await.unwrap();
        let mut events = store.subscribe();
        assert_eq!(store.delete::<InfraEnv>("ns", "a").await.unwrap(), Deletion::Pending);
        let marked: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        let ev = events.try_recv().unwrap();
        assert_eq!(ev.resource_version, marked.metadata.resource_version);
        assert_eq!(store.delete::<InfraEnv>("ns", "a").await.unwrap(), Deletion::Pending);
        let again: InfraEnv = store.get("ns", "a").await.unwrap().unwrap();
        assert_eq!(again.metadata, marked.metadata);
        assert!(events.try_recv().is_err(), "a change event for a delete that changed nothing");
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
