//! Controllers: reconcile functions over the [`Store`](crate::store::Store), and the small runtime that
//! runs them on changes (a de-duplicating work queue fed by the store's change feed, the catalog, and
//! requeue timers), in the manner of kube-rs's `Controller`.

pub mod infraenv;

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use tokio::sync::{Notify, broadcast};

use crate::image::Images;
use crate::resources::{InfraEnv, NMStateConfig};
use crate::store::{ChangeEvent, Store, resource_name};

type Key = (String, String);

/// Keys waiting to be reconciled, each at most once in the queue.
#[derive(Default)]
struct WorkQueue {
    inner: std::sync::Mutex<(VecDeque<Key>, BTreeSet<Key>)>,
    notify: Notify,
}

impl WorkQueue {
    fn push(&self, key: Key) {
        let mut g = self.inner.lock().unwrap();
        if g.1.insert(key.clone()) {
            g.0.push_back(key);
            self.notify.notify_one();
        }
    }
    async fn pop(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            {
                let mut g = self.inner.lock().unwrap();
                if let Some(k) = g.0.pop_front() {
                    g.1.remove(&k);
                    return k;
                }
            }
            notified.await;
        }
    }
}

/// Runs the InfraEnv controller until the task is dropped.
pub async fn run_infraenv_controller<S: Store>(images: Arc<Images<S>>) {
    let queue = Arc::new(WorkQueue::default());
    let mut events = images.store.subscribe();
    let mut catalog = images.catalog.subscribe();
    enqueue_all(&images, &queue).await;

    let feeder = {
        let images = images.clone();
        let queue = queue.clone();
        async move {
            loop {
                tokio::select! {
                    ev = events.recv() => match ev {
                        Ok(ChangeEvent { resource, namespace, name }) => {
                            for key in infraenvs_affected_by(&images.store, &resource, &namespace, &name).await {
                                queue.push(key);
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => enqueue_all(&images, &queue).await,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    changed = catalog.changed() => {
                        if changed.is_err() { return; }
                        enqueue_all(&images, &queue).await;
                    }
                }
            }
        }
    };
    let worker = async {
        loop {
            let (ns, name) = queue.pop().await;
            match infraenv::reconcile(&images, &ns, &name).await {
                Ok(infraenv::Action::Done) => {}
                Ok(infraenv::Action::RequeueAfter(d)) => requeue_later(&queue, (ns, name), d),
                Err(e) => {
                    tracing::warn!(namespace = %ns, name = %name, "reconcile failed: {e}");
                    requeue_later(&queue, (ns, name), Duration::from_secs(10));
                }
            }
        }
    };
    tokio::join!(feeder, worker);
}

fn requeue_later(queue: &Arc<WorkQueue>, key: Key, after: Duration) {
    let queue = queue.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        queue.push(key);
    });
}

async fn enqueue_all<S: Store>(images: &Images<S>, queue: &WorkQueue) {
    match images.store.list::<InfraEnv>(None).await {
        Ok(all) => {
            for ie in all {
                queue.push((ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default()));
            }
        }
        Err(e) => tracing::warn!("listing InfraEnvs: {e}"),
    }
}

/// The InfraEnvs whose image a change to `resource` `namespace/name` may change: the InfraEnv itself,
/// those using a Secret as pull secret, those with the ironic agent when the image-customization secret
/// changes, and those of the namespace selecting NMStateConfigs (a deleted
/// NMStateConfig has no labels left to match, so every selecting InfraEnv of its namespace is rechecked).
pub async fn infraenvs_affected_by<S: Store>(store: &S, resource: &str, namespace: &str, name: &str) -> Vec<Key> {
    if resource == resource_name::<InfraEnv>() {
        return vec![(namespace.to_string(), name.to_string())];
    }
    let key = |ie: InfraEnv| (ie.metadata.namespace.unwrap_or_default(), ie.metadata.name.unwrap_or_default());
    let mut keys = Vec::new();
    if resource == resource_name::<Secret>()
        && namespace == crate::ironic::ICC_SECRET_NAMESPACE
        && name == crate::ironic::ICC_SECRET_NAME
    {
        // The ironic configuration concerns every InfraEnv with the ironic agent, in any namespace.
        let all = store.list::<InfraEnv>(None).await.unwrap_or_default();
        keys.extend(all.into_iter().filter(crate::ironic::enabled).map(key));
    }
    let concerned: fn(&InfraEnv, &str) -> bool = if resource == resource_name::<Secret>() {
        |ie, name| ie.spec.pull_secret_ref.name == name
    } else if resource == resource_name::<NMStateConfig>() {
        |ie, _| ie.spec.nm_state_config_label_selector.as_ref().is_some_and(|s| !s.is_empty())
    } else {
        return keys;
    };
    match store.list::<InfraEnv>(Some(namespace)).await {
        Ok(list) => keys.extend(list.into_iter().filter(|ie| concerned(ie, name)).map(key)),
        Err(e) => tracing::warn!("listing InfraEnvs of {namespace}: {e}"),
    }
    keys.sort();
    keys.dedup();
    keys
}
