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
use crate::resources::InfraEnv;
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
            let infraenvs = resource_name::<InfraEnv>();
            let secrets = resource_name::<Secret>();
            loop {
                tokio::select! {
                    ev = events.recv() => match ev {
                        Ok(ChangeEvent { resource, namespace, name }) => {
                            if resource == infraenvs {
                                queue.push((namespace, name));
                            } else if resource == secrets {
                                enqueue_users_of_secret(&images, &queue, &namespace, &name).await;
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

/// A Secret change concerns the InfraEnvs of its namespace that use it as pull secret.
async fn enqueue_users_of_secret<S: Store>(images: &Images<S>, queue: &WorkQueue, namespace: &str, name: &str) {
    if let Ok(list) = images.store.list::<InfraEnv>(Some(namespace)).await {
        for ie in list.into_iter().filter(|ie| ie.spec.pull_secret_ref.name == name) {
            queue.push((namespace.to_string(), ie.metadata.name.unwrap_or_default()));
        }
    }
}
