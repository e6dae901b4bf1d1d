//! The Kubernetes store's copy of the cluster: every object of the watched kinds, as the watches and
//! this process's own writes last showed it, indexed by uid and by the references the controllers
//! follow ([`crate::resources::references`]). Reads are answered from here, so a reconcile costs no
//! API request until it writes.
//!
//! **Read-your-writes, with opaque resourceVersions.** A write's answer goes in at once: a reconcile
//! that follows its own write reads at least what it wrote, even while the watch is behind. Kubernetes
//! calls resourceVersions opaque, so no two are compared for order; what orders them is the watch
//! stream, which delivers each object's versions in the order they were made. Until the watch delivers
//! the version this process wrote, what it delivers of that object is older and is skipped; once it
//! delivers it, it is believed again. A watch can also be faster than the write's answer: the
//! versions it delivers while a write of the object is in flight are noted, and an answer whose
//! version the watch already delivered is not taken in (the cache has that or newer). During a
//! re-list (after a 410 Gone or a dropped connection) the list is taken as it comes, as in a plain
//! reflector: a write answered in the middle of a re-list may read older for the moment the watch
//! takes to bring it again. An object this process deleted stays out even if the watch still has an
//! older event of it to deliver.
//!
//! **Two ways out of a wait for a version that does not come.** On the fleet benchmark's Kubernetes
//! backend a few Agents' entries awaited a version the watch never delivered, and skipped every later
//! one for good: their reconciles conflicted forever, or found nothing to do while a user's binding
//! waited. So a version from the watch that is numerically newer than the one awaited, when both are
//! numbers (etcd's revisions and this project's API server's are), ends the wait; and a write refused
//! as a conflict reads the object from the API again ([`Source::Refresh`]), which ends it whatever the
//! versions look like. Numbers never make the cache skip a version, only stop waiting.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::resources::Kind;
use crate::resources::references::{self, Ref};
use crate::store::cached::Cached;

/// (resource, namespace, name)
pub(super) type ObjKey = (String, String, String);

/// Who showed the cache an object: the watch, or the answer to this process's own write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    Watch,
    OwnWrite,
    /// A read of the API after a write was refused as a conflict: the API's version now, which is
    /// at least as new as what the watch or an earlier answer showed.
    Refresh,
}

/// Whether resourceVersion `a` is newer than `b` when both are numbers, as etcd's revisions and this
/// project's API server's are. Kubernetes calls versions opaque, so the order of the watch stream is
/// the rule (module docs); this is the way out when the watch never delivers a version awaited, and
/// never the reason to skip a version.
fn numerically_newer(a: &str, b: &str) -> bool {
    matches!((a.parse::<u64>(), b.parse::<u64>()), (Ok(a), Ok(b)) if a > b)
}

/// An object held, and the resourceVersion it was held at (opaque: compared only for equality).
struct Held {
    cached: Arc<Cached>,
    rv: Box<str>,
}

/// How many versions of one object the watch may deliver during one write of it before the cache
/// stops noting them (and then does not take the write's answer in: the watch is well past it).
const SEEN_KEPT: usize = 64;

/// This process's writes of one object: in flight, or answered and not yet delivered by the watch.
#[derive(Default)]
struct OwnWrites {
    /// Writes sent whose answer has not been taken in.
    in_flight: u32,
    /// The versions the watch delivered while a write was in flight; `overflowed` past [`SEEN_KEPT`].
    seen: Vec<Box<str>>,
    overflowed: bool,
    /// The version of this process's last write, which the cache holds and the watch has not
    /// delivered yet: until it does, what the watch delivers of the object is older.
    awaited: Option<Box<str>>,
}

impl OwnWrites {
    fn idle(&self) -> bool {
        self.in_flight == 0 && self.awaited.is_none()
    }
}

#[derive(Default)]
pub(super) struct ObjectCache {
    objects: BTreeMap<ObjKey, Held>,
    by_uid: HashMap<String, ObjKey>,
    /// (resource, value of a reference field) → (namespace, name) of the objects holding it.
    /// (relation, value) → (namespace, name) of the objects holding it.
    references: HashMap<(Ref, String), BTreeSet<(String, String)>>,
    /// The (relation, value) pairs indexed for each object, to take them out when it changes.
    indexed: HashMap<ObjKey, Vec<(Ref, String)>>,
    /// uid → resource of the objects this process deleted whose deletion the watch has not delivered
    /// yet (a re-list of the resource settles them all).
    deleted: HashMap<String, String>,
    /// The objects this process is writing, or wrote and the watch has not shown again.
    own: HashMap<ObjKey, OwnWrites>,
    /// The resources whose watch is listing everything again.
    relisting: HashSet<String>,
}

impl ObjectCache {
    /// Puts `obj` (a `kind` object as the API sent it, unknown fields already pruned) unless it is
    /// older than what the cache holds (see the module docs), or (from the watch) this process
    /// deleted it. Returns whether it went in.
    pub(super) fn put(&mut self, kind: Kind, obj: &Value, source: Source) -> bool {
        let meta = &obj["metadata"];
        let (ns, name) = (meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default());
        let uid = meta["uid"].as_str().unwrap_or_default().to_string();
        if source == Source::Watch && self.deleted.contains_key(&uid) {
            return false;
        }
        let rv = meta["resourceVersion"].as_str().unwrap_or_default();
        let key = (kind.resource(), ns.to_string(), name.to_string());
        if !self.ordered(&key, rv, source) {
            return false;
        }
        let Ok(text) = serde_json::to_vec(obj) else { return false };
        self.unindex(&key);
        let values = references::values(kind, obj);
        for v in &values {
            self.references.entry(v.clone()).or_default().insert((key.1.clone(), key.2.clone()));
        }
        if !values.is_empty() {
            self.indexed.insert(key.clone(), values);
        }
        self.by_uid.insert(uid.clone(), key.clone());
        let held = Held { cached: Arc::new(Cached::new(-1, uid.clone(), Bytes::from(text))), rv: rv.into() };
        if let Some(old) = self.objects.insert(key, held)
            && old.cached.uid != uid
        {
            self.by_uid.remove(&old.cached.uid);
        }
        true
    }

    /// Whether version `rv` of the object `key`, shown by `source`, is at least as new as what the
    /// cache holds, by the order of the watch stream (module docs); notes what it must remember.
    fn ordered(&mut self, key: &ObjKey, rv: &str, source: Source) -> bool {
        let relisting = self.relisting.contains(&key.0);
        // Borrowed, not copied: this runs for every event of every watched object.
        let held = self.objects.get(key).map(|h| &*h.rv);
        let own = match source {
            Source::OwnWrite => self.own.entry(key.clone()).or_default(),
            Source::Watch | Source::Refresh => match self.own.get_mut(key) {
                Some(own) => own,
                None => return true,
            },
        };
        let fresh = match source {
            // A write in flight answers with its version (or fails); otherwise nothing this process
            // wrote is newer than what the API answers now.
            Source::Refresh if own.in_flight > 0 => false,
            Source::Refresh => {
                own.awaited = None;
                true
            }
            Source::Watch => {
                if own.in_flight > 0 {
                    if own.seen.len() < SEEN_KEPT {
                        own.seen.push(rv.into());
                    } else {
                        own.overflowed = true;
                    }
                }
                match own.awaited.as_deref() {
                    // Past the awaited version: the watch did not show that one (a server that
                    // merged it into a later event), and waiting for it would skip every later one.
                    Some(w) if w != rv && !relisting && !numerically_newer(rv, w) => false,
                    _ => {
                        own.awaited = None;
                        true
                    }
                }
            }
            Source::OwnWrite => {
                // The watch already delivered this version (and maybe newer): the cache has it.
                let delivered = own.overflowed
                    || own.seen.iter().any(|s| &**s == rv)
                    || held.is_some_and(|h| numerically_newer(h, rv));
                if !delivered && !rv.is_empty() {
                    own.awaited = Some(rv.into());
                }
                !delivered
            }
        };
        if own.idle() {
            self.own.remove(key);
        }
        fresh
    }

    /// A write of the object is sent: until [`ObjectCache::write_ends`], the versions the watch
    /// delivers of it are noted.
    pub(super) fn write_begins(&mut self, resource: &str, ns: &str, name: &str) {
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        let held = self.objects.get(&key).map(|h| h.rv.clone());
        let own = self.own.entry(key).or_default();
        own.in_flight += 1;
        // A write that changes nothing is answered with the version held, which the watch will not
        // deliver again: it must not be awaited.
        if let Some(rv) = held
            && !own.seen.contains(&rv)
        {
            own.seen.push(rv);
        }
    }

    /// The write [`ObjectCache::write_begins`] announced is over (its answer taken in, or failed).
    pub(super) fn write_ends(&mut self, resource: &str, ns: &str, name: &str) {
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        if let Some(own) = self.own.get_mut(&key) {
            own.in_flight = own.in_flight.saturating_sub(1);
            if own.in_flight == 0 {
                own.seen.clear();
                own.overflowed = false;
            }
            if own.idle() {
                self.own.remove(&key);
            }
        }
    }

    /// The watch of `resource` lists everything again: until [`ObjectCache::relisted`], what it
    /// shows is taken as it comes.
    pub(super) fn relist_begins(&mut self, resource: &str) {
        self.relisting.insert(resource.to_string());
    }

    /// Takes the object out (gone from the cluster, or out of the watch's selection).
    pub(super) fn remove(&mut self, resource: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        // Nothing held: no version of it is awaited any more (a write in flight is still noted).
        if let Some(own) = self.own.get_mut(&key) {
            own.awaited = None;
            if own.idle() {
                self.own.remove(&key);
            }
        }
        self.unindex(&key);
        let old = self.objects.remove(&key)?.cached;
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
        self.relisting.remove(resource);
        self.deleted.retain(|_, r| r != resource);
    }

    fn unindex(&mut self, key: &ObjKey) {
        for slot in self.indexed.remove(key).into_iter().flatten() {
            if let Some(set) = self.references.get_mut(&slot) {
                set.remove(&(key.1.clone(), key.2.clone()));
                if set.is_empty() {
                    self.references.remove(&slot);
                }
            }
        }
    }

    pub(super) fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Arc<Cached>> {
        self.objects.get(&(resource.to_string(), ns.to_string(), name.to_string())).map(|h| h.cached.clone())
    }

    /// The object held and its resourceVersion.
    pub(super) fn get_with_version(&self, resource: &str, ns: &str, name: &str) -> Option<(Arc<Cached>, String)> {
        self.objects
            .get(&(resource.to_string(), ns.to_string(), name.to_string()))
            .map(|h| (h.cached.clone(), h.rv.to_string()))
    }

    fn range<'a>(
        &'a self,
        resource: &'a str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Held)> + 'a {
        let start = (resource.to_string(), ns.unwrap_or_default().to_string(), String::new());
        self.objects.range(start..).take_while(move |((r, n, _), _)| r == resource && ns.is_none_or(|ns| n == ns))
    }

    pub(super) fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Arc<Cached>> {
        self.range(resource, ns).map(|(_, h)| h.cached.clone()).collect()
    }

    pub(super) fn any(&self, resource: &str, ns: Option<&str>) -> bool {
        self.range(resource, ns).next().is_some()
    }

    pub(super) fn len(&self, resource: &str) -> usize {
        self.range(resource, None).count()
    }

    /// The objects holding `value` in one of their reference fields, by the index.
    pub(super) fn referencing(&self, relation: Ref, ns: Option<&str>, value: &str) -> Vec<Arc<Cached>> {
        let Some(keys) = self.references.get(&(relation, value.to_string())) else { return Vec::new() };
        let resource = relation.kind().resource();
        keys.iter()
            .filter(|(n, _)| ns.is_none_or(|ns| ns == n))
            .filter_map(|(n, name)| self.get(&resource, n, name))
            .collect()
    }

    pub(super) fn by_uid(&self, resource: &str, uid: &str) -> Option<Arc<Cached>> {
        let key = self.by_uid.get(uid).filter(|k| k.0 == resource)?;
        self.objects.get(key).map(|h| h.cached.clone())
    }

    /// (namespace, name) → resourceVersion of every `resource` object held: what a re-list starts
    /// from, to tell at its end which objects it did not see again.
    pub(super) fn versions(&self, resource: &str) -> HashMap<(String, String), String> {
        self.range(resource, None).map(|((_, n, name), h)| ((n.clone(), name.clone()), h.rv.to_string())).collect()
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

    /// An Agent at an opaque resourceVersion `rv`.
    fn at(rv: &str, cd: Option<&str>) -> Value {
        let mut a = agent("a", 0, cd, "ie", &[]);
        a["metadata"]["resourceVersion"] = rv.into();
        a
    }

    const AGENTS: &str = "agents.agent-install.openshift.io";

    fn held_rv(cache: &ObjectCache) -> String {
        cache.get_with_version(AGENTS, "ns", "a").unwrap().1
    }

    #[test]
    fn until_the_watch_delivers_this_processs_write_what_it_delivers_is_older() {
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("k", None), Source::Watch));
        assert!(cache.put(Kind::Agent, &at("m", None), Source::OwnWrite));
        // Versions are opaque: "z" sorts after "m" and that does not count (numbers do, see below).
        assert!(!cache.put(Kind::Agent, &at("z", Some("cd")), Source::Watch), "older than the write");
        assert_eq!(held_rv(&cache), "m");
        assert!(cache.referencing(Ref::AgentClusterDeployment, None, "ns/cd").is_empty());
        assert!(cache.put(Kind::Agent, &at("m", None), Source::Watch), "its own echo");
        assert!(cache.put(Kind::Agent, &at("b", Some("cd")), Source::Watch), "after the echo, the watch leads");
        assert_eq!(names(&cache.referencing(Ref::AgentClusterDeployment, None, "ns/cd")), ["a"]);
        assert!(cache.own.is_empty(), "nothing is remembered once the watch caught up");
    }

    /// Seen in the fleet benchmark on the Kubernetes backend: a few Agents whose cache entry awaited a
    /// version the watch never delivered skipped every later version (a user's binding among them),
    /// and their reconciles conflicted, or found nothing to do, for good.
    #[test]
    fn a_version_awaited_that_the_watch_never_delivers_does_not_hold_back_later_ones() {
        // Numbered versions (etcd's, this project's API server's): past the awaited one, the watch
        // is ahead of this process's write.
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("9", None), Source::OwnWrite));
        assert!(!cache.put(Kind::Agent, &at("8", Some("cd")), Source::Watch), "older than the write");
        assert!(cache.put(Kind::Agent, &at("10", Some("cd")), Source::Watch), "newer: 9 is not coming");
        assert_eq!(held_rv(&cache), "10");
        assert!(cache.own.is_empty());
        // An answer older than what is held is not taken in.
        assert!(!cache.put(Kind::Agent, &at("7", None), Source::OwnWrite));
        assert_eq!(held_rv(&cache), "10");
        assert_eq!(names(&cache.referencing(Ref::AgentClusterDeployment, None, "ns/cd")), ["a"]);

        // Opaque versions: the watch's order is the only one, and a wait for a version it does not
        // deliver ends when a conflict makes the store read the object again.
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("m", None), Source::OwnWrite));
        assert!(!cache.put(Kind::Agent, &at("z", Some("cd")), Source::Watch));
        cache.write_begins(AGENTS, "ns", "a");
        assert!(!cache.put(Kind::Agent, &at("z", Some("cd")), Source::Refresh), "a write in flight answers newer");
        cache.write_ends(AGENTS, "ns", "a");
        assert!(cache.put(Kind::Agent, &at("z", Some("cd")), Source::Refresh));
        assert_eq!(held_rv(&cache), "z");
        assert!(cache.own.is_empty());
        assert!(cache.put(Kind::Agent, &at("q", None), Source::Watch), "the watch leads again");

        // Without a write of this process awaited, the watch's order is the only one.
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("10", None), Source::Watch));
        assert!(cache.put(Kind::Agent, &at("9", None), Source::Watch));
        assert_eq!(held_rv(&cache), "9");
    }

    #[test]
    fn a_write_the_watch_delivered_before_its_answer_is_not_taken_in() {
        let mut cache = ObjectCache::default();
        cache.write_begins(AGENTS, "ns", "a");
        // The watch brings the write, then someone else's change, before the answer arrives.
        assert!(cache.put(Kind::Agent, &at("w1", None), Source::Watch));
        assert!(cache.put(Kind::Agent, &at("w2", Some("cd")), Source::Watch));
        assert!(!cache.put(Kind::Agent, &at("w1", None), Source::OwnWrite), "the cache has newer");
        cache.write_ends(AGENTS, "ns", "a");
        assert_eq!(held_rv(&cache), "w2");
        assert!(cache.put(Kind::Agent, &at("w3", None), Source::Watch), "nothing awaited");
        assert!(cache.own.is_empty());
        // A write that changes nothing is answered with the version held: nothing to await.
        cache.write_begins(AGENTS, "ns", "a");
        assert!(!cache.put(Kind::Agent, &at("w3", None), Source::OwnWrite));
        cache.write_ends(AGENTS, "ns", "a");
        assert!(cache.own.is_empty());
        assert!(cache.put(Kind::Agent, &at("w4", None), Source::Watch));
        // A failed write leaves nothing behind either.
        cache.write_begins(AGENTS, "ns", "a");
        cache.write_ends(AGENTS, "ns", "a");
        assert!(cache.own.is_empty());
    }

    #[test]
    fn an_object_gone_awaits_nothing_and_one_made_again_is_taken() {
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("w1", None), Source::OwnWrite));
        // Deleted by someone else; the watch's events before the deletion were lost with a reconnect.
        cache.deletion_seen(AGENTS, "ns", "a", "uid-a");
        assert!(cache.own.is_empty(), "nothing awaited for an object no longer held");
        let mut again = at("x1", None);
        again["metadata"]["uid"] = "uid-a2".into();
        assert!(cache.put(Kind::Agent, &again, Source::Watch), "the new object of that name comes in");
    }

    #[test]
    fn a_relist_is_taken_as_it_comes() {
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::Agent, &at("w5", None), Source::OwnWrite));
        cache.relist_begins(AGENTS);
        // The list is a consistent read made after the write: what it shows is the object now.
        assert!(cache.put(Kind::Agent, &at("w7", Some("cd")), Source::Watch));
        cache.relisted(AGENTS);
        assert_eq!(held_rv(&cache), "w7");
        assert!(cache.put(Kind::Agent, &at("w8", None), Source::Watch), "the write is no longer awaited");
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
            let mut values: Vec<(Ref, String)> = (0..3).map(|c| (Ref::AgentClusterDeployment, format!("ns/cd{c}"))).collect();
            values.extend((0..3).map(|i| (Ref::AgentInfraEnv, format!("ie{i}"))));
            values.extend((0..4).map(|m| (Ref::AgentMac, format!("00:00:00:00:00:0{m}"))));
            for (r, v) in values {
                for ns in [None, Some("ns"), Some("other")] {
                    let scanned: Vec<Arc<Cached>> = cache
                        .list(res, ns)
                        .into_iter()
                        .filter(|c| r.values(&c.value().unwrap()).contains(&v))
                        .collect();
                    prop_assert_eq!(names(&cache.referencing(r, ns, &v)), names(&scanned));
                }
            }
        }
    }

    /// The InfraEnv relations worked out from the object follow what the watch delivers, and leave
    /// with the object.
    #[test]
    fn worked_out_relations_follow_the_watch() {
        use crate::resources::ENABLE_IRONIC_AGENT_ANNOTATION;
        use crate::resources::references::{ANY_SELECTOR, IRONIC_AGENT};
        use serde_json::json;
        const INFRAENVS: &str = "infraenvs.agent-install.openshift.io";
        let ie = |rv: &str, ironic: bool, selector: Value| {
            let annotations = if ironic { json!({ENABLE_IRONIC_AGENT_ANNOTATION: "true"}) } else { json!({}) };
            json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                   "metadata": {"name": "ie", "namespace": "ns", "uid": "u1", "resourceVersion": rv,
                                "annotations": annotations},
                   "spec": {"pullSecretRef": {"name": "ps"}, "nmStateConfigLabelSelector": selector}})
        };
        let found =
            |cache: &ObjectCache, relation: Ref, value: &str| cache.referencing(relation, Some("ns"), value).len();
        let mut cache = ObjectCache::default();
        assert!(cache.put(Kind::InfraEnv, &ie("1", true, json!({"matchLabels": {"cluster": "c1"}})), Source::Watch));
        assert_eq!(found(&cache, Ref::InfraEnvIronicAgent, IRONIC_AGENT), 1);
        assert_eq!(found(&cache, Ref::InfraEnvNmStateSelector, "cluster=c1"), 1);
        let exprs = json!({"matchExpressions": [{"key": "k", "operator": "Exists"}]});
        assert!(cache.put(Kind::InfraEnv, &ie("2", false, exprs), Source::Watch));
        assert_eq!(found(&cache, Ref::InfraEnvIronicAgent, IRONIC_AGENT), 0);
        assert_eq!(found(&cache, Ref::InfraEnvNmStateSelector, "cluster=c1"), 0);
        assert_eq!(found(&cache, Ref::InfraEnvNmStateSelector, ANY_SELECTOR), 1);
        cache.remove(INFRAENVS, "ns", "ie");
        assert_eq!(found(&cache, Ref::InfraEnvNmStateSelector, ANY_SELECTOR), 0);
    }
}
