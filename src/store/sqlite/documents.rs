//! The store as the resource API and the host pool use it, besides [`Store`]: whole documents by
//! [`Kind`] (what `bootstream apply/get/delete` send), raw objects by resource name (kinds bootstream
//! has no type for), and records (the host pool's own rows).

use bytes::Bytes;
use rusqlite::params;
use serde_json::Value;

use super::semantics::{
    NewObject, Replacement, add_finalizer, applied_configuration, delete_object, doc_namespace, insert_object,
    replace_object, replacement, without_status,
};
use super::writer::get_row;
use super::{SqliteStore, backend, conflict};
use crate::resources::Kind;
use crate::store::json::{LAST_APPLIED_ANNOTATION, three_way};
use crate::store::{Deletion, StoreError};

/// The store-key of a kind used by the API: `infraenvs.agent-install.openshift.io`, `secrets`.
pub fn kind_resource(kind: Kind) -> String {
    kind.resource()
}

impl SqliteStore {
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

    pub fn get_raw(&self, resource: &str, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        self.read_cache().get(resource, namespace, name).map(|c| c.value()).transpose()
    }

    pub fn list_raw_texts(&self, resource: &str, namespace: Option<&str>) -> Vec<Bytes> {
        self.read_cache().list(resource, namespace).into_iter().map(|c| c.text.clone()).collect()
    }

    /// An object's stored JSON text, shared rather than parsed (a watch event carries it as it is).
    pub fn get_raw_text(&self, resource: &str, namespace: &str, name: &str) -> Option<Bytes> {
        self.read_cache().get(resource, namespace, name).map(|c| c.text.clone())
    }

    /// [`Self::list_raw_texts`] with each object's namespace and name (what a list's `continue`
    /// token names) and resourceVersion, in (namespace, name) order.
    pub fn list_raw_keyed(&self, resource: &str, namespace: Option<&str>) -> Vec<(String, String, Bytes, i64)> {
        self.read_cache().list_keyed(resource, namespace)
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
        self.create_raw_with_uid(resource, namespace, body, has_generation, None).await
    }

    /// [`Self::create_raw`] with the uid the caller reserved for the object (a new one when None).
    pub async fn create_raw_with_uid(
        &self,
        resource: &str,
        namespace: &str,
        body: Value,
        has_generation: bool,
        uid: Option<String>,
    ) -> Result<Value, StoreError> {
        let (res, ns) = (resource.to_string(), namespace.to_string());
        self.write(move |tx, changes| insert_object(tx, changes, &res, &ns, body, has_generation, uid)).await
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

#[cfg(test)]
mod tests {
    use super::super::tests::infraenv_doc;
    use super::*;
    use crate::resources::InfraEnv;
    use crate::store::Store;
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
}
