//! The Kubernetes store's copy of the cluster: every object of the watched kinds, as the watches and
//! this process's own writes last showed it, indexed by uid and by the references the controllers
//! follow ([`crate::resources::references`]). Reads are answered from here, so a reconcile costs no
//! API request until it writes.
//!
//! **Read-your-writes.** A write's answer goes in at once: a reconcile that follows its own write
//! reads at least what it wrote, even while the watch is behind. A watch event older than what is held
//! is then skipped: resourceVersions are compared as numbers, as etcd's revisions (and this project's
//! API server's) are. Kubernetes calls them opaque; where one does not parse as a number, arrival
//! order decides, as in a plain reflector. An object this process deleted stays out even if the watch
//! still has an older event of it to deliver.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::resources::{Kind, references};
use crate::store::cached::Cached;

/// (resource, namespace, name)
pub(super) type ObjKey = (String, String, String);

/// Who showed the cache an object: the watch, or the answer to this process's own write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Watch,
    OwnWrite,
}

/// A resourceVersion as a number, or -1 where it is not one (then not compared).
pub(super) fn version_number(rv: Option<&str>) -> i64 {
    rv.and_then(|v| v.parse().ok()).unwrap_or(-1)
}

#[derive(Default)]
pub(super) struct ObjectCache {
    objects: BTreeMap<ObjKey, Arc<Cached>>,
    by_uid: HashMap<String, ObjKey>,
    /// (resource, value of a reference field) → (namespace, name) of the objects holding it.
    references: HashMap<(String, String), BTreeSet<(String, String)>>,
    /// The reference values indexed for each object, to take them out when it changes.
    indexed: HashMap<ObjKey, Vec<String>>,
    /// uid → resource of the objects this process deleted whose deletion the watch has not delivered
    /// yet (a re-list of the resource settles them all).
    deleted: HashMap<String, String>,
}

impl ObjectCache {
    /// Puts `obj` (a `kind` object as the API sent it, unknown fields already pruned) unless the cache
    /// holds a newer version of it, or (from the watch) this process deleted it. Returns whether it
    /// went in.
    pub(super) fn put(&mut self, kind: Kind, obj: &Value, source: Source) -> bool {
        let meta = &obj["metadata"];
        let (ns, name) = (meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default());
        let uid = meta["uid"].as_str().unwrap_or_default().to_string();
        if source == Source::Watch && self.deleted.contains_key(&uid) {
            return false;
        }
        let rv = version_number(meta["resourceVersion"].as_str());
        let key = (kind.resource(), ns.to_string(), name.to_string());
        if let Some(held) = self.objects.get(&key)
            && rv >= 0
            && held.rv >= 0
            && rv < held.rv
        {
            return false;
        }
        let Ok(text) = serde_json::to_vec(obj) else { return false };
        self.unindex(&key);
        let values = references::values(kind, obj);
        for v in &values {
            self.references.entry((key.0.clone(), v.clone())).or_default().insert((key.1.clone(), key.2.clone()));
        }
        if !values.is_empty() {
            self.indexed.insert(key.clone(), values);
        }
        self.by_uid.insert(uid.clone(), key.clone());
        if let Some(old) = self.objects.insert(key, Arc::new(Cached::new(rv, uid.clone(), Bytes::from(text))))
            && old.uid != uid
        {
            self.by_uid.remove(&old.uid);
        }
        true
    }

    /// Takes the object out (gone from the cluster, or out of the watch's selection).
    pub(super) fn remove(&mut self, resource: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        self.unindex(&key);
        let old = self.objects.remove(&key)?;
        if self.by_uid.get(&old.uid) == Some(&key) {
            self.by_uid.remove(&old.uid);
        }
        Some(old)
    }

    /// This process deleted the object: out now, and kept out until the watch says it is gone.
    pub(super) fn deleted_here(&mut self, resource: &str, ns: &str, name: &str) {
        if let Some(old) = self.remove(resource, ns, name) {
            self.deleted.insert(old.uid.clone(), resource.to_string());
        }
    }

    /// The watch says the object with `uid` is gone.
    pub(super) fn deletion_seen(&mut self, resource: &str, ns: &str, name: &str, uid: &str) {
        self.deleted.remove(uid);
        let held = self.get(resource, ns, name);
        // A newer object of the same name (created after this one was deleted) stays.
        if held.is_some_and(|h| h.uid == uid || uid.is_empty()) {
            self.remove(resource, ns, name);
        }
    }

    /// A re-list of `resource` is done: what this process deleted is absent from it, and no deletion
    /// event of those objects will come (without this their uids would be kept for ever).
    pub(super) fn relisted(&mut self, resource: &str) {
        self.deleted.retain(|_, r| r != resource);
    }

    fn unindex(&mut self, key: &ObjKey) {
        for v in self.indexed.remove(key).into_iter().flatten() {
            let slot = (key.0.clone(), v);
            if let Some(set) = self.references.get_mut(&slot) {
                set.remove(&(key.1.clone(), key.2.clone()));
                if set.is_empty() {
                    self.references.remove(&slot);
                }
            }
        }
    }

    pub(super) fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        self.objects.get(&(resource.to_string(), ns.to_string(), name.to_string())).cloned()
    }

    fn range<'a>(
        &'a self,
        resource: &'a str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Arc<Cached>)> + 'a {
        let start = (resource.to_string(), ns.unwrap_or_default().to_string(), String::new());
        self.objects.range(start..).take_while(move |((r, n, _), _)| r == resource && ns.is_none_or(|ns| n == ns))
    }

    pub(super) fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Arc<Cached>> {
        self.range(resource, ns).map(|(_, c)| c.clone()).collect()
    }

    pub(super) fn any(&self, resource: &str, ns: Option<&str>) -> bool {
        self.range(resource, ns).next().is_some()
    }

    pub(super) fn len(&self, resource: &str) -> usize {
        self.range(resource, None).count()
    }

    /// The objects holding `value` in one of their reference fields, by the index.
    pub(super) fn referencing(&self, resource: &str, ns: Option<&str>, value: &str) -> Vec<Arc<Cached>> {
        let Some(keys) = self.references.get(&(resource.to_string(), value.to_string())) else { return Vec::new() };
        keys.iter()
            .filter(|(n, _)| ns.is_none_or(|ns| ns == n))
            .filter_map(|(n, name)| self.get(resource, n, name))
            .collect()
    }

    pub(super) fn by_uid(&self, resource: &str, uid: &str) -> Option<Arc<Cached>> {
        let key = self.by_uid.get(uid).filter(|k| k.0 == resource)?;
        self.objects.get(key).cloned()
    }

    /// (namespace, name) → resourceVersion number of every `resource` object held: what a re-list
    /// starts from, to tell at its end which objects it did not see again.
    pub(super) fn versions(&self, resource: &str) -> HashMap<(String, String), i64> {
        self.range(resource, None).map(|((_, n, name), c)| ((n.clone(), name.clone()), c.rv)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::INFRAENV_NAME_LABEL;
    use crate::resources::agent::Agent;
    use kube::Resource;
    use proptest::prelude::*;

    fn agent(name: &str, rv: u64, cd: Option<&str>, ie: &str, macs: &[&str]) -> Value {
        let interfaces: Vec<Value> = macs.iter().map(|m| serde_json::json!({"macAddress": m})).collect();
        let mut spec = serde_json::json!({"approved": false});
        if let Some(cd) = cd {
            spec["clusterDeploymentName"] = serde_json::json!({"name": cd, "namespace": "ns"});
        }
        serde_json::json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "resourceVersion": rv.to_string(), "labels": {INFRAENV_NAME_LABEL: ie}},
            "spec": spec, "status": {"inventory": {"interfaces": interfaces}}})
    }

    fn names(found: &[Arc<Cached>]) -> Vec<String> {
        let mut v: Vec<String> =
            found.iter().map(|c| c.object::<Agent>().unwrap().meta().name.clone().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn an_older_version_does_not_replace_a_newer_one() {
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &agent("a", 10, None, "ie", &[]), Source::OwnWrite));
        assert!(!cache.put(Kind::Agent, &agent("a", 8, Some("cd"), "ie", &[]), Source::Watch), "stale event");
        assert_eq!(cache.get("agents.agent-install.openshift.io", "ns", "a").unwrap().rv, 10);
        assert!(cache.referencing("agents.agent-install.openshift.io", None, "cd").is_empty());
        assert!(cache.put(Kind::Agent, &agent("a", 10, None, "ie", &[]), Source::Watch), "its own echo");
        assert!(cache.put(Kind::Agent, &agent("a", 12, Some("cd"), "ie", &[]), Source::Watch));
        assert_eq!(names(&cache.referencing("agents.agent-install.openshift.io", None, "cd")), ["a"]);
    }

    #[test]
    fn what_this_process_deleted_stays_out_until_the_watch_agrees() {
        let res = "agents.agent-install.openshift.io";
        let mut cache = ObjectCache::default();
        cache.put(Kind::Agent, &agent("a", 5, None, "ie", &[]), Source::Watch);
        cache.deleted_here(res, "ns", "a");
        assert!(cache.get(res, "ns", "a").is_none());
        // The watch still delivers a change made before the deletion.
        assert!(!cache.put(Kind::Agent, &agent("a", 6, None, "ie", &[]), Source::Watch));
        assert!(cache.get(res, "ns", "a").is_none() && cache.by_uid(res, "uid-a").is_none());
        cache.deletion_seen(res, "ns", "a", "uid-a");
        // A new object of the same name (another uid) comes in.
        let mut again = agent("a", 9, None, "ie", &[]);
        again["metadata"]["uid"] = "uid-a2".into();
        assert!(cache.put(Kind::Agent, &again, Source::Watch));
        assert!(cache.by_uid(res, "uid-a2").is_some());
        // The late deletion event of the first one does not take out the second.
        cache.deletion_seen(res, "ns", "a", "uid-a");
        assert!(cache.get(res, "ns", "a").is_some());
        // A deletion the watch never delivers (it listed again instead) is settled by the re-list.
        cache.deleted_here(res, "ns", "a");
        assert_eq!(cache.deleted.len(), 1);
        cache.relisted("other.resource");
        assert_eq!(cache.deleted.len(), 1);
        cache.relisted(res);
        assert!(cache.deleted.is_empty());
    }

    #[test]
    fn versions_that_are_not_numbers_go_by_arrival() {
        let mut cache = ObjectCache::default();
        let mut a = agent("a", 10, None, "ie", &[]);
        cache.put(Kind::Agent, &a, Source::Watch);
        a["metadata"]["resourceVersion"] = "opaque".into();
        assert!(cache.put(Kind::Agent, &a, Source::Watch));
    }

    /// One step of a random history of Agents: (name, cluster, InfraEnv, MACs), or a deletion.
    fn step() -> impl Strategy<Value = (usize, Option<usize>, usize, Vec<usize>, bool)> {
        (
            0..6usize,
            proptest::option::of(0..3usize),
            0..3usize,
            proptest::collection::vec(0..4usize, 0..3),
            any::<bool>(),
        )
    }

    proptest! {
        /// After any history of puts and deletions, the index finds exactly the objects a scan of
        /// every held object's reference fields finds, for every value, in every namespace filter.
        #[test]
        fn the_index_agrees_with_a_scan(steps in proptest::collection::vec(step(), 1..60)) {
            let res = "agents.agent-install.openshift.io";
            let mut cache = ObjectCache::default();
            for (rv, (n, cd, ie, macs, delete)) in steps.into_iter().enumerate() {
                let name = format!("a{n}");
                if delete {
                    cache.remove(res, "ns", &name);
                    continue;
                }
                let cd = cd.map(|c| format!("cd{c}"));
                let macs: Vec<String> = macs.iter().map(|m| format!("00:00:00:00:00:0{m}")).collect();
                let macs: Vec<&str> = macs.iter().map(String::as_str).collect();
                cache.put(Kind::Agent, &agent(&name, rv as u64 + 1, cd.as_deref(), &format!("ie{ie}"), &macs), Source::Watch);
            }
            let mut values: Vec<String> = (0..3).map(|c| format!("cd{c}")).chain((0..3).map(|i| format!("ie{i}"))).collect();
            values.extend((0..4).map(|m| format!("00:00:00:00:00:0{m}")));
            for v in values {
                for ns in [None, Some("ns"), Some("other")] {
                    let scanned: Vec<Arc<Cached>> = cache
                        .list(res, ns)
                        .into_iter()
                        .filter(|c| references::values(Kind::Agent, &c.value().unwrap()).contains(&v))
                        .collect();
                    prop_assert_eq!(names(&cache.referencing(res, ns, &v)), names(&scanned));
                }
            }
        }
    }
}
