//! The read cache: every committed object as its JSON text (and, for kinds read all the time and
//! rarely changed, decoded), in (resource, namespace, name) order with a uid index, so that reads
//! neither wait for the writer nor query SQLite.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use crate::resources::Kind;
use crate::resources::references::{self, Ref};
pub(super) use crate::store::cached::Cached;

/// (resource, namespace, name)
pub(super) type ObjKey = (String, String, String);

pub(super) fn obj_key(res: &str, ns: &str, name: &str) -> ObjKey {
    (res.to_string(), ns.to_string(), name.to_string())
}

/// The committed objects, in (resource, namespace, name) order, with a uid index and the reference
/// index ([`references`]).
#[derive(Default)]
pub(super) struct Cache {
    pub(super) objects: BTreeMap<ObjKey, Arc<Cached>>,
    pub(super) by_uid: HashMap<String, ObjKey>,
    /// (relation, value) → (namespace, name) of the objects holding it.
    references: HashMap<(Ref, String), BTreeSet<(String, String)>>,
    /// The (relation, value) pairs indexed for each object, to take them out when it changes.
    indexed: HashMap<ObjKey, Vec<(Ref, String)>>,
}

impl Cache {
    pub(super) fn get(&self, res: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        self.objects.get(&obj_key(res, ns, name)).cloned()
    }

    pub(super) fn list(&self, res: &str, ns: Option<&str>) -> Vec<Arc<Cached>> {
        let start = obj_key(res, ns.unwrap_or_default(), "");
        self.objects
            .range(start..)
            .take_while(|((r, n, _), _)| r == res && ns.is_none_or(|ns| n == ns))
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// [`Cache::list`] with each object's namespace and name.
    pub(super) fn list_keyed(&self, res: &str, ns: Option<&str>) -> Vec<(String, String, Bytes, i64)> {
        let start = obj_key(res, ns.unwrap_or_default(), "");
        self.objects
            .range(start..)
            .take_while(|((r, n, _), _)| r == res && ns.is_none_or(|ns| n == ns))
            .map(|((_, n, name), c)| (n.clone(), name.clone(), c.text.clone(), c.rv))
            .collect()
    }

    /// The objects holding `value` in `relation` (in `ns`), by the index.
    pub(super) fn referencing(&self, relation: Ref, ns: Option<&str>, value: &str) -> Vec<Arc<Cached>> {
        let Some(keys) = self.references.get(&(relation, value.to_string())) else { return Vec::new() };
        let res = relation.kind().resource();
        keys.iter()
            .filter(|(n, _)| ns.is_none_or(|ns| ns == n))
            .filter_map(|(n, name)| self.get(&res, n, name))
            .collect()
    }

    /// Takes `key` out of the reference index and puts `refs` (what it references now, from
    /// [`references_of`]): work proportional to the object's references, whatever the number of
    /// objects.
    fn reindex(&mut self, key: &ObjKey, refs: Vec<(Ref, String)>) {
        for rv in self.indexed.remove(key).unwrap_or_default() {
            if let Some(set) = self.references.get_mut(&rv) {
                set.remove(&(key.1.clone(), key.2.clone()));
                if set.is_empty() {
                    self.references.remove(&rv);
                }
            }
        }
        for rv in &refs {
            self.references.entry(rv.clone()).or_default().insert((key.1.clone(), key.2.clone()));
        }
        if !refs.is_empty() {
            self.indexed.insert(key.clone(), refs);
        }
    }

    /// [`Cache::put_indexed`] with the references read from `entry` here.
    pub(super) fn put(&mut self, key: ObjKey, entry: Option<Arc<Cached>>) {
        let refs = references_of(&key, entry.as_deref());
        self.put_indexed(key, entry, refs)
    }

    /// Puts (None: removes) the object `key`, which references `refs` ([`references_of`], read
    /// before the cache is locked: the writer holds the lock while it publishes a group).
    pub(super) fn put_indexed(&mut self, key: ObjKey, entry: Option<Arc<Cached>>, refs: Vec<(Ref, String)>) {
        self.reindex(&key, refs);
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

/// The (relation, value) pairs the object `key` holds ([`references`]); none for a removal or a kind
/// without references.
pub(super) fn references_of(key: &ObjKey, entry: Option<&Cached>) -> Vec<(Ref, String)> {
    let Some(entry) = entry else { return Vec::new() };
    let Some(kind) = Kind::from_resource(&key.0).filter(|k| references::relations(*k).next().is_some()) else {
        return Vec::new();
    };
    match entry.value() {
        Ok(value) => references::values(kind, &value),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{infraenv_doc, owned_secret};
    use crate::resources::InfraEnv;
    use crate::resources::Kind;
    use crate::resources::references::Ref;
    use crate::store::Store;
    use crate::store::sqlite::SqliteStore;
    use serde_json::Value;
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
        let referencing = |store: SqliteStore| async move {
            let found = store.list_referencing::<InfraEnv>(None, Ref::InfraEnvPullSecret, "ps").await.unwrap();
            found.iter().map(|i| i.metadata.name.clone().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(referencing(store.clone()).await, ["a", "b"]);
        assert!(store.list_referencing::<InfraEnv>(None, Ref::InfraEnvPullSecret, "k2").await.unwrap().is_empty());
        let uid = a.metadata.uid.clone().unwrap();
        assert_eq!(store.get_by_uid::<InfraEnv>(&uid).await.unwrap().unwrap().metadata.name.as_deref(), Some("a"));
        assert!(store.get_by_uid::<Secret>(&uid).await.unwrap().is_none(), "a uid names one kind's object");
        store.delete::<InfraEnv>("ns", "b").await.unwrap();
        assert_eq!(referencing(store.clone()).await, ["a"], "a deleted object leaves the index");
        // What a fresh process loads from the file is what this one serves from memory.
        let reopened = SqliteStore::open(&path).unwrap();
        for kind in [Kind::InfraEnv, Kind::Secret] {
            assert_eq!(reopened.list_texts(kind, None), store.list_texts(kind, None));
        }
        assert!(reopened.get_by_uid::<InfraEnv>(&uid).await.unwrap().is_some());
        assert_eq!(referencing(reopened).await, ["a"], "the index is built at load");
    }

    /// The InfraEnv relations worked out from the object (the ironic agent, the NMStateConfig
    /// selector's label) follow its updates and its deletion, and are rebuilt at load.
    #[tokio::test]
    async fn worked_out_relations_follow_updates_and_deletion() {
        use crate::resources::ENABLE_IRONIC_AGENT_ANNOTATION;
        use crate::resources::references::{ANY_SELECTOR, IRONIC_AGENT};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = SqliteStore::open(&path).unwrap();
        let mut doc = infraenv_doc("a", "k");
        doc["metadata"]["annotations"] = serde_json::json!({ENABLE_IRONIC_AGENT_ANNOTATION: "true"});
        doc["spec"]["nmStateConfigLabelSelector"] = serde_json::json!({"matchLabels": {"cluster": "c1"}});
        store.apply_document(Kind::InfraEnv, doc).await.unwrap();
        let found = |store: SqliteStore, relation: Ref, value: &'static str| async move {
            let found = store.list_referencing::<InfraEnv>(None, relation, value).await.unwrap();
            found.iter().map(|i| i.metadata.name.clone().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(found(store.clone(), Ref::InfraEnvIronicAgent, IRONIC_AGENT).await, ["a"]);
        assert_eq!(found(store.clone(), Ref::InfraEnvNmStateSelector, "cluster=c1").await, ["a"]);
        let reopened = SqliteStore::open(&path).unwrap();
        assert_eq!(found(reopened, Ref::InfraEnvNmStateSelector, "cluster=c1").await, ["a"], "rebuilt at load");
        let mut ie = store.get::<InfraEnv>("ns", "a").await.unwrap().unwrap();
        ie.metadata.annotations = None;
        ie.spec.nm_state_config_label_selector = Some(
            serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "k", "operator": "Exists"}]}))
                .unwrap(),
        );
        store.update(&ie).await.unwrap();
        assert!(found(store.clone(), Ref::InfraEnvIronicAgent, IRONIC_AGENT).await.is_empty());
        assert!(found(store.clone(), Ref::InfraEnvNmStateSelector, "cluster=c1").await.is_empty());
        assert_eq!(found(store.clone(), Ref::InfraEnvNmStateSelector, ANY_SELECTOR).await, ["a"]);
        store.delete::<InfraEnv>("ns", "a").await.unwrap();
        assert!(found(store.clone(), Ref::InfraEnvNmStateSelector, ANY_SELECTOR).await.is_empty());
    }
}
