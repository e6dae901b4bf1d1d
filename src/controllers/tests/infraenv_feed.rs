//! The InfraEnv controller's host feed: a deleted InfraEnv waits for its hosts and is looked at again
//! when one changes, also when looking it up failed at first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::hosts::HostKey;
use crate::pool::{Backend, BackendConfig, SystemClock};
use crate::resources::InfraEnv;
use crate::store::sqlite::SqliteStore;
use crate::store::{ChangeEvent, Deletion, Object, Store, StoreError};

/// A store that fails as many lookups by uid as its counter says.
#[derive(Clone)]
struct FailingUidLookups<S>(S, Arc<AtomicUsize>);

impl<S: Store> Store for FailingUidLookups<S> {
    async fn get<K: Object>(&self, namespace: &str, name: &str) -> Result<Option<K>, StoreError> {
        self.0.get(namespace, name).await
    }
    async fn list<K: Object>(&self, namespace: Option<&str>) -> Result<Vec<K>, StoreError> {
        self.0.list(namespace).await
    }
    async fn list_map<K: Object, T: Send>(
        &self,
        namespace: Option<&str>,
        f: impl FnMut(&K) -> T + Send,
    ) -> Result<Vec<T>, StoreError> {
        self.0.list_map(namespace, f).await
    }
    async fn list_referencing<K: Object>(
        &self,
        namespace: Option<&str>,
        relation: crate::resources::references::Ref,
        value: &str,
    ) -> Result<Vec<K>, StoreError> {
        self.0.list_referencing(namespace, relation, value).await
    }
    async fn get_by_uid<K: Object>(&self, uid: &str) -> Result<Option<K>, StoreError> {
        if self.1.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
            return Err(StoreError::backend(std::io::Error::other("connection reset by peer")));
        }
        self.0.get_by_uid(uid).await
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

async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A host change whose InfraEnv lookup fails is not "no InfraEnv": the lookup is retried, and the
/// deleted InfraEnv its host no longer holds goes (well before its one-minute requeue).
#[tokio::test]
async fn a_failed_lookup_of_the_infraenv_of_a_changed_host_is_retried() {
    let sqlite = SqliteStore::open_in_memory().unwrap();
    let fails = Arc::new(AtomicUsize::new(0));
    let store = FailingUidLookups(sqlite.clone(), fails.clone());
    let dir = tempfile::tempdir().unwrap();
    let config = crate::image::ServiceConfig::new("http://hub.example", dir.path().into());
    let images =
        crate::image::Images::new(store.clone(), crate::image::catalog::Catalog::new(vec![]), Arc::new(config));
    let records = SqliteStore::open_in_memory().unwrap();
    let backend = Backend::load(records, Arc::new(SystemClock), BackendConfig::default()).await.unwrap();

    let mut ie = InfraEnv::new("ie", Default::default());
    ie.metadata.namespace = Some("ns".into());
    ie.spec.pull_secret_ref.name = "ps".into();
    let uid = store.create(&ie).await.unwrap().metadata.uid.unwrap();
    let queue = Arc::new(crate::controllers::runtime::WorkQueue::default());
    let controller = tokio::spawn(super::super::run_infraenv_controller_with(
        images,
        Some(backend.clone()),
        queue,
        Default::default(),
    ));
    let finalized = async || {
        let ie = sqlite.get::<InfraEnv>("ns", "ie").await.unwrap().unwrap();
        ie.metadata.finalizers.is_some_and(|f| f.contains(&super::super::infraenv::INFRAENV_FINALIZER.to_string()))
    };
    eventually("the InfraEnv's finalizer", finalized).await;

    // A host bound to a cluster and not installed holds the InfraEnv once it is deleted.
    backend.register_host(&uid, "ns", "h1", "v1", Some("c1".into())).await.unwrap();
    assert_eq!(store.delete::<InfraEnv>("ns", "ie").await.unwrap(), Deletion::Pending);
    let blocked = async || {
        let ie = sqlite.get::<InfraEnv>("ns", "ie").await.unwrap().unwrap();
        ie.status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "DeletionBlocked"))
    };
    eventually("the InfraEnv's deletion to be blocked by its host", blocked).await;

    // The host is released; looking its InfraEnv up fails once.
    fails.store(1, Ordering::Relaxed);
    backend
        .update_host(&HostKey::new(&uid, "h1"), |h| {
            h.cluster_id = None;
            Ok(())
        })
        .await
        .unwrap();
    let gone = async || sqlite.get::<InfraEnv>("ns", "ie").await.unwrap().is_none();
    eventually("the InfraEnv to go once its host was released", gone).await;
    assert_eq!(fails.load(Ordering::Relaxed), 0, "the failure was met");
    controller.abort();
}
