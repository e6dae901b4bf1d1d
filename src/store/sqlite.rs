//! The embedded store: resources as JSON documents in one SQLite file (WAL mode), one transaction per
//! change, with Kubernetes metadata semantics: uid, creationTimestamp, generation (bumped when the spec
//! changes), resourceVersion (a store-wide counter; writes carrying a stale one are refused).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;
use tokio::sync::broadcast;

use super::{ChangeEvent, Object, Store, StoreError, resource_name};
use crate::resources::Kind;

#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    events: broadcast::Sender<ChangeEvent>,
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
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('resource_version', 0);
";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The store-key of a kind used by the API: `infraenvs.agent-install.openshift.io`, `secrets`.
pub fn kind_resource(kind: Kind) -> String {
    match kind {
        Kind::InfraEnv => resource_name::<crate::resources::InfraEnv>(),
        Kind::NMStateConfig => resource_name::<crate::resources::NMStateConfig>(),
        Kind::Secret => resource_name::<k8s_openapi::api::core::v1::Secret>(),
    }
}

impl SqliteStore {
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(path).map_err(|e| backend(format!("opening {}: {e}", path.display())))?;
        Self::init(conn)
    }

    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        Self::init(Connection::open_in_memory().map_err(backend)?)
    }

    fn init(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(backend)?;
        conn.pragma_update(None, "busy_timeout", 5000).map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        Ok(SqliteStore { conn: Arc::new(Mutex::new(conn)), events: broadcast::channel(4096).0 })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(backend)?
    }

    fn emit(&self, resource: String, namespace: String, name: String) {
        let _ = self.events.send(ChangeEvent { resource, namespace, name });
    }

    /// Creates or updates an object from a validated user document (`bootstream apply`). Metadata the
    /// store owns (uid, creationTimestamp, generation, resourceVersion) and the status are kept; labels,
    /// annotations and the spec (or a Secret's data) come from the document. Returns the stored object
    /// and whether it was created.
    pub async fn apply_document(&self, kind: Kind, doc: Value) -> Result<(Value, bool), StoreError> {
        let resource = kind_resource(kind);
        let namespace = doc["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = doc["metadata"]["name"]
            .as_str()
            .ok_or_else(|| StoreError::Invalid("metadata.name is required".into()))?
            .to_string();
        let (res, ns, nm) = (resource.clone(), namespace.clone(), name.clone());
        let (stored, created, changed) = self
            .with_conn(move |conn| {
                let tx = conn.transaction().map_err(backend)?;
                let existing: Option<(String, i64)> = tx
                    .query_row(
                        "SELECT body, resource_version FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3",
                        params![res, ns, nm],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(backend)?;
                let now = now_rfc3339();
                let (mut body, previous) = match existing {
                    Some((text, rv)) => {
                        if let Some(want) = doc["metadata"]["resourceVersion"].as_str()
                            && want != rv.to_string()
                        {
                            return Err(StoreError::Conflict(format!(
                                "Operation cannot be fulfilled on {res} \"{nm}\": the object has been modified (resourceVersion {want} is not the current {rv})"
                            )));
                        }
                        let old: Value = serde_json::from_str(&text).map_err(backend)?;
                        (merge_user_document(kind, &old, &doc), Some(old))
                    }
                    None => {
                        let mut body = doc.clone();
                        let meta = body["metadata"].as_object_mut().expect("validated metadata");
                        meta.insert("namespace".into(), Value::String(ns.clone()));
                        meta.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
                        meta.insert("creationTimestamp".into(), Value::String(now.clone()));
                        meta.remove("resourceVersion");
                        meta.remove("deletionTimestamp");
                        if kind != Kind::Secret {
                            meta.insert("generation".into(), Value::from(1));
                        }
                        if let Some(obj) = body.as_object_mut() {
                            obj.remove("status");
                        }
                        (body, None)
                    }
                };
                let created = previous.is_none();
                if previous.as_ref() == Some(&body) {
                    return Ok((body, false, false));
                }
                let rv = next_resource_version(&tx)?;
                body["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                let uid = body["metadata"]["uid"].as_str().unwrap_or_default().to_string();
                tx.execute(
                    "INSERT INTO objects (resource, namespace, name, uid, resource_version, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (resource, namespace, name) DO UPDATE SET resource_version=excluded.resource_version, body=excluded.body",
                    params![res, ns, nm, uid, rv, body.to_string()],
                )
                .map_err(backend)?;
                tx.commit().map_err(backend)?;
                Ok((body, created, true))
            })
            .await?;
        if changed {
            self.emit(resource, namespace, name);
        }
        Ok((stored, created))
    }

    pub async fn get_document(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        let (res, ns, nm) = (kind_resource(kind), namespace.to_string(), name.to_string());
        self.with_conn(move |conn| get_body(conn, &res, &ns, &nm)).await
    }

    pub async fn list_documents(&self, kind: Kind, namespace: Option<&str>) -> Result<Vec<Value>, StoreError> {
        let (res, ns) = (kind_resource(kind), namespace.map(str::to_string));
        self.with_conn(move |conn| list_bodies(conn, &res, ns.as_deref())).await
    }

    /// Deletes an object; returns it, or None if it did not exist.
    pub async fn delete_document(&self, kind: Kind, namespace: &str, name: &str) -> Result<Option<Value>, StoreError> {
        let (res, ns, nm) = (kind_resource(kind), namespace.to_string(), name.to_string());
        let deleted = self
            .with_conn(move |conn| {
                let tx = conn.transaction().map_err(backend)?;
                let text: Option<String> = tx
                    .query_row(
                        "DELETE FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3 RETURNING body",
                        params![res, ns, nm],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(backend)?;
                if text.is_some() {
                    next_resource_version(&tx)?;
                }
                tx.commit().map_err(backend)?;
                text.map(|t| serde_json::from_str::<Value>(&t).map_err(backend)).transpose()
            })
            .await?;
        if deleted.is_some() {
            self.emit(kind_resource(kind), namespace.to_string(), name.to_string());
        }
        Ok(deleted)
    }
}

fn get_body(conn: &Connection, res: &str, ns: &str, name: &str) -> Result<Option<Value>, StoreError> {
    let text: Option<String> = conn
        .query_row(
            "SELECT body FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3",
            params![res, ns, name],
            |r| r.get(0),
        )
        .optional()
        .map_err(backend)?;
    text.map(|t| serde_json::from_str(&t).map_err(backend)).transpose()
}

fn list_bodies(conn: &Connection, res: &str, ns: Option<&str>) -> Result<Vec<Value>, StoreError> {
    let mut out = Vec::new();
    let mut push = |text: String| -> Result<(), StoreError> {
        out.push(serde_json::from_str(&text).map_err(backend)?);
        Ok(())
    };
    match ns {
        Some(ns) => {
            let mut stmt = conn
                .prepare_cached("SELECT body FROM objects WHERE resource=?1 AND namespace=?2 ORDER BY name")
                .map_err(backend)?;
            for row in stmt.query_map(params![res, ns], |r| r.get::<_, String>(0)).map_err(backend)? {
                push(row.map_err(backend)?)?;
            }
        }
        None => {
            let mut stmt = conn
                .prepare_cached("SELECT body FROM objects WHERE resource=?1 ORDER BY namespace, name")
                .map_err(backend)?;
            for row in stmt.query_map(params![res], |r| r.get::<_, String>(0)).map_err(backend)? {
                push(row.map_err(backend)?)?;
            }
        }
    }
    Ok(out)
}

fn next_resource_version(tx: &rusqlite::Transaction<'_>) -> Result<i64, StoreError> {
    tx.query_row("UPDATE counters SET value = value + 1 WHERE name='resource_version' RETURNING value", [], |r| {
        r.get(0)
    })
    .map_err(backend)
}

fn now_rfc3339() -> String {
    crate::resources::now_seconds().to_string()
}

/// The new stored body for a user document applied over an existing object.
fn merge_user_document(kind: Kind, old: &Value, doc: &Value) -> Value {
    let mut body = old.clone();
    for key in ["labels", "annotations"] {
        match doc["metadata"].get(key) {
            Some(v) => body["metadata"][key] = v.clone(),
            None => {
                if let Some(m) = body["metadata"].as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    match kind {
        Kind::Secret => {
            for key in ["data", "type", "immutable"] {
                match doc.get(key) {
                    Some(v) => body[key] = v.clone(),
                    None => {
                        if let Some(m) = body.as_object_mut() {
                            m.remove(key);
                        }
                    }
                }
            }
        }
        Kind::InfraEnv | Kind::NMStateConfig => {
            let new_spec = doc.get("spec").cloned().unwrap_or(Value::Null);
            if body.get("spec") != Some(&new_spec) {
                let generation = body["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
                body["metadata"]["generation"] = Value::from(generation);
                body["spec"] = new_spec;
            }
        }
    }
    body
}

impl Store for SqliteStore {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        let (res, ns, nm) = (resource_name::<K>(), namespace.to_string(), name.to_string());
        let body = self.with_conn(move |conn| get_body(conn, &res, &ns, &nm)).await?;
        body.map(|b| serde_json::from_value(b).map_err(backend)).transpose()
    }

    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        let (res, ns) = (resource_name::<K>(), namespace.map(str::to_string));
        let bodies = self.with_conn(move |conn| list_bodies(conn, &res, ns.as_deref())).await?;
        bodies.into_iter().map(|b| serde_json::from_value(b).map_err(backend)).collect()
    }

    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        let (res, uid) = (resource_name::<K>(), uid.to_string());
        self.with_conn(move |conn| {
            let text: Option<String> = conn
                .query_row("SELECT body FROM objects WHERE uid=?1 AND resource=?2", params![uid, res], |r| r.get(0))
                .optional()
                .map_err(backend)?;
            text.map(|t| serde_json::from_str(&t).map_err(backend)).transpose()
        })
        .await
    }

    async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
        let res = resource_name::<K>();
        let meta = obj.meta();
        let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().ok_or_else(|| StoreError::Invalid("object without a name".into()))?;
        let want_rv = meta.resource_version.clone();
        let status = serde_json::to_value(obj).map_err(backend)?.get("status").cloned();
        let (r, n, m) = (res.clone(), ns.clone(), name.clone());
        let (stored, changed) = self
            .with_conn(move |conn| {
                let tx = conn.transaction().map_err(backend)?;
                let row: Option<(String, i64)> = tx
                    .query_row(
                        "SELECT body, resource_version FROM objects WHERE resource=?1 AND namespace=?2 AND name=?3",
                        params![r, n, m],
                        |row| Ok((row.get(0)?, row.get(1)?)),
                    )
                    .optional()
                    .map_err(backend)?;
                let Some((text, rv)) = row else {
                    return Err(StoreError::NotFound { resource: r, name: m });
                };
                if let Some(want) = &want_rv
                    && *want != rv.to_string()
                {
                    return Err(StoreError::Conflict(format!(
                        "Operation cannot be fulfilled on {r} \"{m}\": the object has been modified; please apply your changes to the latest version and try again"
                    )));
                }
                let mut body: Value = serde_json::from_str(&text).map_err(backend)?;
                if body.get("status") == status.as_ref() {
                    return Ok((body, false));
                }
                match &status {
                    Some(s) => body["status"] = s.clone(),
                    None => {
                        if let Some(o) = body.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
                let rv = next_resource_version(&tx)?;
                body["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                tx.execute(
                    "UPDATE objects SET resource_version=?4, body=?5 WHERE resource=?1 AND namespace=?2 AND name=?3",
                    params![r, n, m, rv, body.to_string()],
                )
                .map_err(backend)?;
                tx.commit().map_err(backend)?;
                Ok((body, true))
            })
            .await?;
        if changed {
            self.emit(res, ns, name);
        }
        serde_json::from_value(stored).map_err(backend)
    }

    fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
        self.events.subscribe()
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
        assert!(store.delete_document(Kind::InfraEnv, "ns", "a").await.unwrap().is_some());
        assert!(store.delete_document(Kind::InfraEnv, "ns", "a").await.unwrap().is_none());
    }
}
