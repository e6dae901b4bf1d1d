//! What each controller watches, declared: in the manner of kube-runtime's
//! `Controller::owns/watches(.., mapper)`, a trigger names the controller it feeds, the kind it
//! watches, whether status-only changes count, and how a changed object maps to the keys to queue.
//! Routing a store change is one pass over a table of triggers.
//!
//! Mappers find the objects concerned through the stores' reference index
//! ([`crate::resources::references`]), so routing an event reads the objects it concerns and no
//! others, whatever the size of the fleet.
//!
//! A mapper whose lookup fails does not count as "no objects": the failure is logged with its cause
//! and that event's failed triggers are routed again later ([`retry_later`]), with a growing delay.
//! Retrying the event (rather than requeueing every object of the controller) keeps the cost of a
//! failure that of the event, and a lookup that failed on a decoding or API error usually succeeds
//! once the store has the next version of the object.

use std::sync::Arc;
use std::time::Duration;

use crate::errors::chain;
use crate::keylocks::Locked as _;
use crate::resources::Kind;
use crate::resources::references::Ref;
use crate::resources::{Agent, AgentClusterInstall, BareMetalHost, ClusterDeployment, PreprovisioningImage};
use crate::store::{ChangeEvent, Object, Store, StoreError};

use super::agent::OwnWrites;
use super::key_of;
use super::metal3::bmac;
use super::runtime::{Key, WorkQueue};

/// The controller a trigger feeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Agents,
    ClusterDeployments,
    BareMetalHosts,
    PreprovisioningImages,
}

/// How a changed object (namespace/name) maps to keys of the target controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mapper {
    /// The object itself.
    Itself,
    /// The object itself, unless the change is the echo of the target controller's own write
    /// ([`OwnWrites::is_echo`]).
    ItselfUnlessOwnWrite,
    /// The objects of the target's kind that reference the changed object in this relation
    /// (`namespace/name` in any namespace for relations that carry a namespace, else `name` in the
    /// changed object's namespace).
    Referencing(Ref),
    /// The ClusterDeployment an AgentClusterInstall names; once the AgentClusterInstall is gone,
    /// the ClusterDeployments naming it ([`Ref::ClusterDeploymentInstall`]).
    ClusterDeploymentOfInstall,
    /// The BareMetalHosts of an Agent: by its BMH label, else by its interfaces' MACs
    /// ([`Ref::BmhBootMac`]).
    BareMetalHostsOfAgent,
}

/// One watch of one controller.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Trigger {
    pub target: Target,
    pub watches: Kind,
    /// Whether a change of the status alone triggers.
    pub status_changes: bool,
    pub map: Mapper,
}

const fn trigger(target: Target, watches: Kind, status_changes: bool, map: Mapper) -> Trigger {
    Trigger { target, watches, status_changes, map }
}

/// The Agent and ClusterDeployment controllers (besides the host feed).
pub(crate) const HOST_TRIGGERS: &[Trigger] = &[
    // The agent controller writes the status itself and needs no event for what it wrote; the
    // cluster controller hears of agents through their hosts (binding, approval, progress), not
    // through Agent events.
    trigger(Target::Agents, Kind::Agent, false, Mapper::ItselfUnlessOwnWrite),
    // Agents read their ignition endpoint token from a Secret (spec-controllers.md §2.4 watches).
    trigger(Target::Agents, Kind::Secret, true, Mapper::Referencing(Ref::AgentTokenSecret)),
    // Agents copy InfraEnv settings (auto-approval, labels).
    trigger(Target::Agents, Kind::InfraEnv, false, Mapper::Referencing(Ref::AgentInfraEnv)),
    trigger(Target::ClusterDeployments, Kind::ClusterDeployment, true, Mapper::Itself),
    trigger(Target::ClusterDeployments, Kind::AgentClusterInstall, true, Mapper::ClusterDeploymentOfInstall),
];

/// The Bare Metal Agent Controller and the PreprovisioningImage controller (spec-controllers.md
/// §5.1, §6 watches).
pub(crate) const METAL3_TRIGGERS: &[Trigger] = &[
    trigger(Target::BareMetalHosts, Kind::BareMetalHost, true, Mapper::Itself),
    // A PPI's reboot request and deletion depend on its BMH (of the same name).
    trigger(Target::PreprovisioningImages, Kind::BareMetalHost, true, Mapper::Itself),
    trigger(Target::BareMetalHosts, Kind::Agent, true, Mapper::BareMetalHostsOfAgent),
    trigger(Target::BareMetalHosts, Kind::InfraEnv, true, Mapper::Referencing(Ref::BmhInfraEnv)),
    trigger(Target::PreprovisioningImages, Kind::InfraEnv, true, Mapper::Referencing(Ref::PpiInfraEnv)),
    // The BMAC waits for the PPI of the same name in the converged flow.
    trigger(Target::BareMetalHosts, Kind::PreprovisioningImage, true, Mapper::Itself),
    trigger(Target::PreprovisioningImages, Kind::PreprovisioningImage, true, Mapper::Itself),
];

/// The queues of the controllers a table feeds (None: that controller does not run).
#[derive(Clone, Default)]
pub(crate) struct Queues {
    pub agents: Option<Arc<WorkQueue>>,
    pub clusters: Option<Arc<WorkQueue>>,
    pub bmhs: Option<Arc<WorkQueue>>,
    pub ppis: Option<Arc<WorkQueue>>,
    /// The (trigger, object) pairs a retry is pending for ([`retry_later`]).
    pub retrying: Arc<std::sync::Mutex<std::collections::HashSet<RetryKey>>>,
}

/// A trigger (by its place in its static table) and the object whose change it routes again.
type RetryKey = (usize, String, String, String);

fn retry_key(t: &'static Trigger, ev: &ChangeEvent) -> RetryKey {
    (t as *const Trigger as usize, ev.resource.to_string(), ev.namespace.clone(), ev.name.clone())
}

impl Queues {
    fn of(&self, target: Target) -> Option<&WorkQueue> {
        match target {
            Target::Agents => self.agents.as_deref(),
            Target::ClusterDeployments => self.clusters.as_deref(),
            Target::BareMetalHosts => self.bmhs.as_deref(),
            Target::PreprovisioningImages => self.ppis.as_deref(),
        }
    }
}

/// Queues the keys `ev` maps to through every trigger of `triggers` that watches its kind; returns
/// the triggers whose lookup failed (logged here), for the caller to route again ([`retry_later`]).
pub(crate) async fn route<S: Store>(
    store: &S,
    own_writes: Option<&OwnWrites>,
    triggers: &'static [Trigger],
    queues: &Queues,
    ev: &ChangeEvent,
) -> Vec<&'static Trigger> {
    let Some(kind) = Kind::from_resource(&ev.resource) else { return Vec::new() };
    let mut failed = Vec::new();
    for t in triggers.iter().filter(|t| t.watches == kind && (t.status_changes || !ev.status_only)) {
        let Some(queue) = queues.of(t.target) else { continue };
        match keys(store, own_writes, t.map, ev).await {
            Ok(keys) => keys.into_iter().for_each(|k| queue.push(k)),
            Err(e) => {
                tracing::warn!(
                    "routing the change of {} {}/{} to the {:?} controller ({:?}): {}",
                    ev.resource,
                    ev.namespace,
                    ev.name,
                    t.target,
                    t.map,
                    chain(&e)
                );
                failed.push(t);
            }
        }
    }
    failed
}

/// Routes `ev` through `failed` again after a delay, doubling up to a minute, until every lookup
/// succeeds (see the module docs for why the event, not the whole controller).
///
/// One retry at a time per trigger and object: a mapper reads the store when it runs, so a retry
/// pending for an object routes its later changes too, and the retries in flight stay bounded by
/// the objects concerned, however many events arrive while the store fails.
pub(crate) fn retry_later<S: Store>(store: S, queues: Queues, ev: ChangeEvent, failed: Vec<&'static Trigger>) {
    let failed: Vec<&'static Trigger> = {
        let mut retrying = queues.retrying.locked();
        failed.into_iter().filter(|t| retrying.insert(retry_key(t, &ev))).collect()
    };
    if failed.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut failed = failed;
        let mut delay = Duration::from_secs(1);
        while !failed.is_empty() {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(60));
            let mut still = Vec::new();
            for t in failed {
                // The mark is cleared before the lookup and set again only if it fails and no other
                // retry took it meanwhile: a failure after this lookup always has a retry of its own.
                let key = retry_key(t, &ev);
                queues.retrying.locked().remove(&key);
                // Own-write echoes are not looked up (ItselfUnlessOwnWrite never fails).
                let again = route(&store, None, std::slice::from_ref(t), &queues, &ev).await;
                if !again.is_empty() && queues.retrying.locked().insert(key) {
                    still.extend(again);
                }
            }
            failed = still;
        }
    });
}

async fn keys<S: Store>(
    store: &S,
    own_writes: Option<&OwnWrites>,
    map: Mapper,
    ev: &ChangeEvent,
) -> Result<Vec<Key>, StoreError> {
    let (ns, name) = (&ev.namespace, &ev.name);
    let itself = || vec![(ns.clone(), name.clone())];
    Ok(match map {
        Mapper::Itself => itself(),
        Mapper::ItselfUnlessOwnWrite => {
            if own_writes.is_some_and(|o| o.is_echo(ns, name, ev.resource_version.as_deref())) {
                Vec::new()
            } else {
                itself()
            }
        }
        Mapper::Referencing(relation) => match relation.kind() {
            Kind::Agent => referencing::<S, Agent>(store, relation, ns, name).await?,
            Kind::BareMetalHost => referencing::<S, BareMetalHost>(store, relation, ns, name).await?,
            Kind::ClusterDeployment => referencing::<S, ClusterDeployment>(store, relation, ns, name).await?,
            Kind::PreprovisioningImage => referencing::<S, PreprovisioningImage>(store, relation, ns, name).await?,
            Kind::InfraEnv => referencing::<S, crate::resources::InfraEnv>(store, relation, ns, name).await?,
            other => return Err(StoreError::Invalid(format!("no reference index for {}", other.name()))),
        },
        Mapper::ClusterDeploymentOfInstall => match store.get::<AgentClusterInstall>(ns, name).await? {
            Some(aci) => vec![(ns.clone(), aci.spec.cluster_deployment_ref.name)],
            // Gone: its ClusterDeployment may be waiting for that.
            None => referencing::<S, ClusterDeployment>(store, Ref::ClusterDeploymentInstall, ns, name).await?,
        },
        Mapper::BareMetalHostsOfAgent => {
            // Agents change all the time in a large pool; most namespaces have no BMH to tell.
            if !store.any::<BareMetalHost>(Some(ns)).await? {
                return Ok(Vec::new());
            }
            match store.get::<Agent>(ns, name).await? {
                Some(agent) => {
                    bmac::bmhs_for_agent(store, &agent).await?.into_iter().map(|b| (ns.clone(), b)).collect()
                }
                None => Vec::new(),
            }
        }
    })
}

/// The keys of the K objects holding the changed object `ns/name` in `relation`.
async fn referencing<S: Store, K: Object>(
    store: &S,
    relation: Ref,
    ns: &str,
    name: &str,
) -> Result<Vec<Key>, StoreError> {
    let found = if relation.carries_namespace() {
        store.list_referencing::<K>(None, relation, &format!("{ns}/{name}")).await?
    } else {
        store.list_referencing::<K>(Some(ns), relation, name).await?
    };
    Ok(found.iter().map(|o| key_of(o.meta())).collect())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::keylocks::Locked as _;

    use serde_json::json;
    use tokio::sync::broadcast;

    use super::*;
    use crate::resources::INFRAENV_NAME_LABEL;
    use crate::store::Deletion;
    use crate::store::sqlite::SqliteStore;

    /// A store that counts the objects it hands out (decoded, or lent to a `list_map` closure),
    /// fails as many reference lookups as its third field says, and holds a reference lookup's
    /// answer (read already) while its fourth field is write-locked.
    #[derive(Clone)]
    struct Counting<S>(S, Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<tokio::sync::RwLock<()>>);

    impl<S> Counting<S> {
        fn read(&self, n: usize) {
            self.1.fetch_add(n, Ordering::Relaxed);
        }
    }

    impl<S: Store> Store for Counting<S> {
        async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
            let got = self.0.get::<K>(namespace, name).await?;
            self.read(got.is_some() as usize);
            Ok(got)
        }
        async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
            let got = self.0.list::<K>(namespace).await?;
            self.read(got.len());
            Ok(got)
        }
        async fn list_map<K: Object, T: Send>(
            &self,
            namespace: Option<&str>,
            mut f: impl FnMut(&K) -> T + Send,
        ) -> Result<Vec<T>, StoreError> {
            let got = self.0.list_map(namespace, |k: &K| f(k)).await?;
            self.read(got.len());
            Ok(got)
        }
        async fn list_referencing<K: Object>(
            &self,
            namespace: Option<&str>,
            relation: Ref,
            value: &str,
        ) -> Result<Vec<K>, StoreError> {
            if self.2.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
                return Err(StoreError::backend_message("the index is out to lunch"));
            }
            let got = self.0.list_referencing::<K>(namespace, relation, value).await?;
            self.read(got.len());
            drop(self.3.read().await);
            Ok(got)
        }
        async fn any<K: Object>(&self, namespace: Option<&str>) -> Result<bool, StoreError> {
            self.read(1);
            self.0.any::<K>(namespace).await
        }
        async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
            let got = self.0.get_by_uid::<K>(uid).await?;
            self.read(got.is_some() as usize);
            Ok(got)
        }
        async fn create<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
            self.0.create(obj).await
        }
        async fn update<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
            self.0.update(obj).await
        }
        async fn update_status<K: Object>(&self, obj: &K) -> Result<K, StoreError> {
            self.0.update_status(obj).await
        }
        async fn delete<K: Object>(&self, namespace: &str, name: &str) -> Result<Deletion, StoreError> {
            self.0.delete::<K>(namespace, name).await
        }
        fn subscribe(&self) -> broadcast::Receiver<ChangeEvent> {
            self.0.subscribe()
        }
    }

    fn change(kind: Kind, namespace: &str, name: &str) -> ChangeEvent {
        ChangeEvent {
            resource: kind.resource(),
            namespace: namespace.into(),
            name: name.into(),
            status_only: false,
            resource_version: Some("1".into()),
        }
    }

    /// A store with `fleet` Agents in namespace "ns", each with an InfraEnv and a token Secret of its
    /// own, and one BareMetalHost; Agent 0 and 1 share InfraEnv "ie0" and Secret "tok0".
    async fn fleet(fleet: usize) -> Counting<SqliteStore> {
        let store = SqliteStore::open_in_memory().unwrap();
        let creates = (0..fleet).map(|i| {
            let store = store.clone();
            let shared = if i == 1 { 0 } else { i };
            async move {
                let agent: Agent = serde_json::from_value(json!({
                    "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
                    "metadata": {"name": format!("a{i}"), "namespace": "ns",
                                 "labels": {INFRAENV_NAME_LABEL: format!("ie{shared}")}},
                    "spec": {"approved": false,
                             "ignitionEndpointTokenReference": {"namespace": "ns", "name": format!("tok{shared}")}}}))
                .unwrap();
                store.create(&agent).await.unwrap();
            }
        });
        futures_util::future::join_all(creates).await;
        let bmh: BareMetalHost = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "b0", "namespace": "ns", "labels": {INFRAENV_NAME_LABEL: "ie0"}},
            "spec": {"bootMACAddress": "00:00:00:00:00:01"}}))
        .unwrap();
        store.create(&bmh).await.unwrap();
        Counting(store, Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Default::default())
    }

    /// Objects read and keys queued to route `ev` through `triggers`.
    async fn cost(store: &Counting<SqliteStore>, triggers: &'static [Trigger], ev: ChangeEvent) -> (usize, usize) {
        let queues = Queues {
            agents: Some(Default::default()),
            clusters: Some(Default::default()),
            bmhs: Some(Default::default()),
            ppis: Some(Default::default()),
            ..Default::default()
        };
        store.1.store(0, Ordering::Relaxed);
        let failed = route(store, None, triggers, &queues, &ev).await;
        assert!(failed.is_empty());
        let queued = [&queues.agents, &queues.clusters, &queues.bmhs, &queues.ppis]
            .iter()
            .map(|q| q.as_ref().unwrap().pending())
            .sum();
        (store.1.load(Ordering::Relaxed), queued)
    }

    /// Routing a change reads the objects it concerns and no others: the same at 10 and 1,000 Agents.
    #[tokio::test]
    async fn routing_a_change_reads_what_it_concerns_whatever_the_fleet() {
        let (small, large) = (fleet(10).await, fleet(1000).await);
        let events: [(&'static [Trigger], ChangeEvent, usize); 6] = [
            // The two Agents reading "tok0".
            (HOST_TRIGGERS, change(Kind::Secret, "ns", "tok0"), 2),
            // The two Agents of "ie0".
            (HOST_TRIGGERS, change(Kind::InfraEnv, "ns", "ie0"), 2),
            // A gone AgentClusterInstall: no ClusterDeployment names it.
            (HOST_TRIGGERS, change(Kind::AgentClusterInstall, "ns", "aci"), 0),
            // The Agent, then the BMH of "ie0" (and no PPI).
            (HOST_TRIGGERS, change(Kind::Agent, "ns", "a5"), 1),
            (METAL3_TRIGGERS, change(Kind::InfraEnv, "ns", "ie0"), 1),
            // An Agent without MACs or BMH label: no BMH, after reading the Agent.
            (METAL3_TRIGGERS, change(Kind::Agent, "ns", "a5"), 0),
        ];
        for (triggers, ev, queued) in events {
            let (read_small, queued_small) = cost(&small, triggers, ev.clone()).await;
            let (read_large, queued_large) = cost(&large, triggers, ev.clone()).await;
            assert_eq!((queued_small, queued_large), (queued, queued), "{ev:?}");
            assert_eq!(read_small, read_large, "objects read for {ev:?} grew with the fleet");
            assert!(read_small <= queued + 2, "{ev:?}: {read_small} objects read for {queued} keys");
        }
    }

    /// A failed lookup is not "no Agents": the trigger is reported failed, and routed again later
    /// queues what the lookup finds then.
    #[tokio::test]
    async fn a_failed_lookup_is_routed_again_until_it_succeeds() {
        let store = fleet(3).await;
        store.2.store(2, Ordering::Relaxed);
        let queues =
            Queues { agents: Some(Default::default()), clusters: Some(Default::default()), ..Default::default() };
        let ev = change(Kind::Secret, "ns", "tok0");
        let failed = route(&store, None, HOST_TRIGGERS, &queues, &ev).await;
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].map, Mapper::Referencing(Ref::AgentTokenSecret));
        assert_eq!(queues.agents.as_ref().unwrap().pending(), 0);
        // Fails once more (after 1 s), then finds both Agents (after 2 s more).
        retry_later(store.clone(), queues.clone(), ev, failed);
        let agents = queues.agents.clone().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while agents.pending() < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut queued = agents.drain();
        queued.sort();
        assert_eq!(queued, [("ns".to_string(), "a0".to_string()), ("ns".into(), "a1".into())]);
        assert_eq!(store.2.load(Ordering::Relaxed), 0);
        assert!(queues.retrying.locked().is_empty(), "a retry that succeeded is no longer pending");
    }

    /// Events arriving while a lookup keeps failing add no retries for an object that has one pending.
    #[tokio::test]
    async fn retries_in_flight_are_one_per_trigger_and_object() {
        let store = fleet(3).await;
        store.2.store(usize::MAX, Ordering::Relaxed);
        let queues = Queues { agents: Some(Default::default()), ..Default::default() };
        for i in 0..100 {
            let mut ev = change(Kind::Secret, "ns", if i % 2 == 0 { "tok0" } else { "tok1" });
            ev.resource_version = Some(i.to_string());
            let failed = route(&store, None, HOST_TRIGGERS, &queues, &ev).await;
            assert_eq!(failed.len(), 1);
            retry_later(store.clone(), queues.clone(), ev, failed);
        }
        assert_eq!(queues.retrying.locked().len(), 2, "one per Secret");
        // A second later each pending retry has looked up once: two lookups, not a hundred.
        let before = store.2.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(before - store.2.load(Ordering::Relaxed), 2);
    }

    /// A lookup that fails while a retry for the same object is between its (successful) lookup
    /// and its end gets a retry of its own: it may see what the retry's lookup did not.
    #[tokio::test]
    async fn a_failure_while_a_retry_finishes_is_retried_too() {
        let store = fleet(3).await;
        let queues = Queues { agents: Some(Default::default()), ..Default::default() };
        let agents = queues.agents.clone().unwrap();
        store.2.store(1, Ordering::Relaxed);
        let first = change(Kind::Secret, "ns", "tok0");
        let failed = route(&store, None, HOST_TRIGGERS, &queues, &first).await;
        retry_later(store.clone(), queues.clone(), first, failed);
        // The retry looks up after a second and finds a0 and a1; its answer is held there.
        let held = store.3.write().await;
        let read_before = store.1.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.1.load(Ordering::Relaxed) == read_before && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(store.1.load(Ordering::Relaxed), read_before + 2, "the retry read a0 and a1");
        // Meanwhile a new Agent uses the Secret, and the lookup of that change fails.
        let late: Agent = serde_json::from_value(json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
            "metadata": {"name": "late", "namespace": "ns"},
            "spec": {"approved": false, "ignitionEndpointTokenReference": {"namespace": "ns", "name": "tok0"}}}))
        .unwrap();
        store.create(&late).await.unwrap();
        store.2.store(1, Ordering::Relaxed);
        let second = change(Kind::Secret, "ns", "tok0");
        let failed = route(&store, None, HOST_TRIGGERS, &queues, &second).await;
        assert_eq!(failed.len(), 1);
        retry_later(store.clone(), queues.clone(), second, failed);
        drop(held);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut queued = Vec::new();
        while !queued.iter().any(|(_, n): &(String, String)| n == "late") && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            queued.extend(agents.drain());
        }
        assert!(queued.iter().any(|(_, n)| n == "late"), "the second failure was retried: {queued:?}");
    }

    /// The metal3 triggers: an InfraEnv queues its BMHs and PPIs (by their label, in its namespace
    /// only), a BMH or PPI itself and its namesake.
    #[tokio::test]
    async fn an_infraenv_queues_exactly_its_bare_metal_hosts_and_images() {
        let store = fleet(3).await;
        for (ns, name, ie) in [("ns", "p0", "ie0"), ("ns", "p1", "ie2"), ("other", "p2", "ie0")] {
            let ppi: PreprovisioningImage = serde_json::from_value(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "PreprovisioningImage",
                "metadata": {"name": name, "namespace": ns, "labels": {INFRAENV_NAME_LABEL: ie}},
                "spec": {"acceptFormats": ["iso"]}}))
            .unwrap();
            store.create(&ppi).await.unwrap();
        }
        let queues = Queues { bmhs: Some(Default::default()), ppis: Some(Default::default()), ..Default::default() };
        let routed = |ev: ChangeEvent| {
            let (store, queues) = (&store, &queues);
            async move {
                assert!(route(store, None, METAL3_TRIGGERS, queues, &ev).await.is_empty());
                let names = |q: &Option<Arc<WorkQueue>>| {
                    let mut n: Vec<String> =
                        q.as_ref().unwrap().drain().into_iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
                    n.sort();
                    n
                };
                (names(&queues.bmhs), names(&queues.ppis))
            }
        };
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(routed(change(Kind::InfraEnv, "ns", "ie0")).await, (s(&["ns/b0"]), s(&["ns/p0"])));
        assert_eq!(routed(change(Kind::InfraEnv, "ns", "ie2")).await, (s(&[]), s(&["ns/p1"])));
        assert_eq!(routed(change(Kind::InfraEnv, "elsewhere", "ie0")).await, (s(&[]), s(&[])));
        assert_eq!(routed(change(Kind::BareMetalHost, "ns", "b0")).await, (s(&["ns/b0"]), s(&["ns/b0"])));
        assert_eq!(routed(change(Kind::PreprovisioningImage, "ns", "p1")).await, (s(&["ns/p1"]), s(&["ns/p1"])));
        // Without the PPI controller (not the converged flow), nothing is queued for it.
        let bmhs_only = Queues { bmhs: Some(Default::default()), ..Default::default() };
        assert!(
            route(&store, None, METAL3_TRIGGERS, &bmhs_only, &change(Kind::InfraEnv, "ns", "ie0")).await.is_empty()
        );
        assert_eq!(bmhs_only.bmhs.unwrap().pending(), 1);
    }

    /// The InfraEnv controller's routing: a Secret queues the InfraEnvs of its namespace using it as
    /// pull secret, by the index, and none elsewhere.
    #[tokio::test]
    async fn a_pull_secret_queues_exactly_the_infraenvs_using_it() {
        use crate::resources::InfraEnv;
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_in_memory().unwrap();
        let config = crate::image::ServiceConfig::new("http://hub.example", dir.path().into());
        let images =
            crate::image::Images::new(store.clone(), crate::image::catalog::Catalog::new(vec![]), Arc::new(config));
        for (ns, name, ps) in [("ns", "i1", "ps"), ("ns", "i2", "ps"), ("ns", "i3", "other"), ("elsewhere", "i4", "ps")]
        {
            let mut ie = InfraEnv::new(name, Default::default());
            ie.metadata.namespace = Some(ns.into());
            ie.spec.pull_secret_ref.name = ps.into();
            store.create(&ie).await.unwrap();
        }
        let secrets = Kind::Secret.resource();
        let affected = |ns: &'static str, name: &'static str| {
            let (images, secrets) = (&images, &secrets);
            async move {
                let keys = super::super::infraenvs_affected_by(images, secrets, ns, name).await.unwrap();
                keys.into_iter().map(|(ns, n)| format!("{ns}/{n}")).collect::<Vec<_>>()
            }
        };
        assert_eq!(affected("ns", "ps").await, ["ns/i1", "ns/i2"]);
        assert_eq!(affected("ns", "other").await, ["ns/i3"]);
        assert_eq!(affected("elsewhere", "ps").await, ["elsewhere/i4"]);
        assert!(affected("elsewhere", "other").await.is_empty());
    }

    /// The InfraEnv controller's router over a counting store, with no image built yet.
    fn infraenv_router(
        store: Counting<SqliteStore>,
    ) -> (Arc<crate::image::Images<Counting<SqliteStore>>>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::image::ServiceConfig::new("http://hub.example", dir.path().into());
        let catalog = crate::image::catalog::Catalog::new(vec![]);
        (crate::image::Images::new(store, catalog, Arc::new(config)), dir)
    }

    fn infraenv(ns: &str, name: &str, ironic: bool, selector: Option<serde_json::Value>) -> crate::resources::InfraEnv {
        let mut ie: crate::resources::InfraEnv = serde_json::from_value(json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"pullSecretRef": {"name": "ps"}, "nmStateConfigLabelSelector": selector}}))
        .unwrap();
        if ironic {
            let annotations = ie.metadata.annotations.get_or_insert_default();
            annotations.insert(crate::resources::ENABLE_IRONIC_AGENT_ANNOTATION.into(), "true".into());
        }
        ie
    }

    fn nmstate_config(ns: &str, name: &str, labels: serde_json::Value) -> crate::resources::NMStateConfig {
        serde_json::from_value(json!({
            "apiVersion": "agent-install.openshift.io/v1beta1", "kind": "NMStateConfig",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"config": {}, "interfaces": []}}))
        .unwrap()
    }

    /// `fleet` InfraEnvs in "ns", each selecting the NMStateConfigs of its own cluster label, two of
    /// them (and one in another namespace) with the ironic agent, and one selecting by expressions
    /// only; NMStateConfig "cfg0" of cluster c0.
    async fn infraenv_fleet(fleet: usize) -> Counting<SqliteStore> {
        let store = SqliteStore::open_in_memory().unwrap();
        let creates = (0..fleet).map(|i| {
            let store = store.clone();
            async move {
                let selector = json!({"matchLabels": {"cluster": format!("c{i}"), "site": "lab"}});
                store.create(&infraenv("ns", &format!("ie{i}"), i < 2, Some(selector))).await.unwrap();
            }
        });
        futures_util::future::join_all(creates).await;
        let exprs = json!({"matchExpressions": [{"key": "cluster", "operator": "In", "values": ["c0", "c9"]}]});
        store.create(&infraenv("ns", "by-expression", false, Some(exprs))).await.unwrap();
        store.create(&infraenv("other", "ironic", true, None)).await.unwrap();
        store.create(&nmstate_config("ns", "cfg0", json!({"cluster": "c0", "site": "lab"}))).await.unwrap();
        Counting(store, Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Default::default())
    }

    /// The ironic image-customization Secret and an NMStateConfig read the InfraEnvs they concern
    /// (by the index), not every InfraEnv of the hub or of the namespace: the same at 10 and 1,000.
    #[tokio::test]
    async fn the_ironic_secret_and_an_nmstate_config_read_what_they_concern_whatever_the_fleet() {
        use crate::content::ironic::{ICC_SECRET_NAME, ICC_SECRET_NAMESPACE};
        let (small, _d1) = infraenv_router(infraenv_fleet(10).await);
        let (large, _d2) = infraenv_router(infraenv_fleet(1000).await);
        let events = [
            (Kind::Secret, ICC_SECRET_NAMESPACE, ICC_SECRET_NAME, vec!["ns/ie0", "ns/ie1", "other/ironic"]),
            (Kind::NMStateConfig, "ns", "cfg0", vec!["ns/by-expression", "ns/ie0"]),
            // Gone (and in no image): none.
            (Kind::NMStateConfig, "ns", "gone", vec![]),
        ];
        for (kind, ns, name, want) in events {
            let mut read = Vec::new();
            for images in [&small, &large] {
                images.store.1.store(0, Ordering::Relaxed);
                let keys = super::super::infraenvs_affected_by(images, &kind.resource(), ns, name).await.unwrap();
                let keys: Vec<String> = keys.into_iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
                assert_eq!(keys, want, "{kind:?} {ns}/{name}");
                read.push(images.store.1.load(Ordering::Relaxed));
            }
            assert_eq!(read[0], read[1], "objects read for {kind:?} {ns}/{name} grew with the InfraEnvs");
            assert!(read[0] <= want.len() + 1, "{kind:?} {ns}/{name}: {} objects read for {want:?}", read[0]);
        }
    }

    /// Which InfraEnvs an NMStateConfig queues is what scanning its namespace and matching every
    /// selector finds, for each form of selector and each set of labels.
    #[tokio::test]
    async fn an_nmstate_config_queues_the_infraenvs_whose_selector_matches_it() {
        let selectors = [
            ("labels", Some(json!({"matchLabels": {"a": "1"}}))),
            ("two-labels", Some(json!({"matchLabels": {"a": "1", "b": "2"}}))),
            ("in", Some(json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}))),
            ("not-in", Some(json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}))),
            ("exists", Some(json!({"matchExpressions": [{"key": "b", "operator": "Exists"}]}))),
            ("does-not-exist", Some(json!({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}))),
            (
                "labels-and-expression",
                Some(json!({"matchLabels": {"a": "1"},
                            "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["3"]}]})),
            ),
            ("empty-value", Some(json!({"matchLabels": {"c": ""}}))),
            ("empty", Some(json!({}))),
            ("none", None),
        ];
        let store = SqliteStore::open_in_memory().unwrap();
        for (name, selector) in &selectors {
            store.create(&infraenv("ns", name, false, selector.clone())).await.unwrap();
            // The same selectors elsewhere: never queued for a config of "ns".
            store.create(&infraenv("elsewhere", name, false, selector.clone())).await.unwrap();
        }
        let label_sets = [
            json!({"a": "1"}),
            json!({"a": "1", "b": "2"}),
            json!({"a": "2"}),
            json!({"b": "3"}),
            json!({"a": "1", "b": "3"}),
            json!({"c": ""}),
            json!({}),
        ];
        let (images, _dir) =
            infraenv_router(Counting(store.clone(), Default::default(), Default::default(), Default::default()));
        let resource = Kind::NMStateConfig.resource();
        for (i, labels) in label_sets.iter().enumerate() {
            let config = nmstate_config("ns", &format!("cfg{i}"), labels.clone());
            store.create(&config).await.unwrap();
            // What the InfraEnv controller queued before the index: every InfraEnv of the namespace
            // whose non-empty selector matches the config's labels.
            let labels = config.metadata.labels.clone().unwrap_or_default();
            let mut scanned: Vec<String> = store
                .list::<crate::resources::InfraEnv>(Some("ns"))
                .await
                .unwrap()
                .into_iter()
                .filter(|ie| {
                    let selector = ie.spec.nm_state_config_label_selector.as_ref().filter(|s| !s.is_empty());
                    selector.is_some_and(|s| s.matches(&labels))
                })
                .map(|ie| format!("ns/{}", ie.metadata.name.unwrap()))
                .collect();
            scanned.sort();
            let keys = super::super::infraenvs_affected_by(&images, &resource, "ns", &format!("cfg{i}")).await.unwrap();
            let routed: Vec<String> = keys.into_iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
            assert_eq!(routed, scanned, "labels {labels:?}");
        }
        // The table reaches each form: a config with a=1,b=2 is selected by labels, both labels,
        // In, Exists and labels-and-expression; one with no labels by NotIn and DoesNotExist.
        let routed = |name: &'static str| {
            let images = &images;
            let resource = &resource;
            async move { super::super::infraenvs_affected_by(images, resource, "ns", name).await.unwrap().len() }
        };
        assert_eq!(routed("cfg1").await, 5);
        assert_eq!(routed("cfg6").await, 2);
    }
}
