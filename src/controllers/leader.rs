//! Leader election with a `coordination.k8s.io/v1` Lease, as controller-runtime and client-go do it:
//! whoever holds an unexpired Lease leads; the leader renews it every `renew_every`; a candidate takes
//! it over once `renewTime + leaseDurationSeconds` has passed. Writes carry the resourceVersion they
//! read, so two candidates can never both win a takeover. A leader that cannot renew in time steps
//! down (the process exits) before anyone else may take over: at most one set of controllers writes.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::errors::chain;
use crate::store::{Store, StoreError};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This process, as `holderIdentity` shows it (the pod name).
    pub identity: String,
    /// How long a Lease holds without renewal (client-go's default: 15 s).
    pub duration: Duration,
    /// How often the leader renews (client-go retries every 2 s; its deadline is 10 s).
    pub renew_every: Duration,
    /// How long the leader keeps trying to renew before it steps down; shorter than `duration`.
    pub renew_deadline: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(2),
            renew_deadline: Duration::from_secs(10),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn expired(spec: &LeaseSpec) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else { return true };
    let duration = SignedDuration::from_secs(spec.lease_duration_seconds.unwrap_or(0).into());
    renewed.checked_add(duration).map_or(true, |until| until < Timestamp::now())
}

/// What one attempt to take or keep the Lease found.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This process holds the Lease, renewed now.
    Held,
    /// Someone else holds an unexpired Lease.
    HeldBy(String),
}

/// Takes the Lease if it is free, expired or already ours, and renews it. A conflict (someone wrote
/// it meanwhile) is an error: the caller tries again after reading it anew.
pub async fn try_acquire<S: Store>(store: &S, config: &LeaseConfig) -> Result<Attempt, StoreError> {
    let seconds = i32::try_from(config.duration.as_secs()).unwrap_or(i32::MAX);
    let Some(mut lease) = store.get::<Lease>(&config.namespace, &config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match store.create(&lease).await {
            Ok(_) => Ok(Attempt::Held),
            // The Lease was just read as absent: a create that finds nothing means its namespace is
            // missing (the API server says `namespaces "x" not found`; the store words it after the
            // Lease, which would hide which name is missing).
            Err(e) if e.is_not_found() => {
                Err(StoreError::NotFound { resource: "namespaces".to_string(), name: config.namespace.clone() })
            }
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    if holder != config.identity {
        if !holder.is_empty() && !expired(spec) {
            return Ok(Attempt::HeldBy(holder));
        }
        spec.holder_identity = Some(config.identity.clone());
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.lease_duration_seconds = Some(seconds);
    spec.renew_time = Some(now());
    store.update(&lease).await?;
    Ok(Attempt::Held)
}

/// Why this process cannot lead at all (as opposed to not yet: another holder, a conflict, an API
/// server that does not answer, which [`acquire`] waits out).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "the Lease's namespace {namespace:?} does not exist, so Lease {name:?} cannot be created there: create the \
         namespace (kubectl create namespace {namespace}), or name the one bootstream is installed in with \
         --lease-namespace (POD_NAMESPACE; a pod gives its own)"
    )]
    NamespaceMissing { namespace: String, name: String },
    #[error(
        "may not take Lease {name:?} in namespace {namespace:?} ({message}): deploy/rbac.yaml grants it with the Role \
         and RoleBinding bootstream-leader-election of the namespace bootstream is installed in; name that namespace \
         with --lease-namespace (POD_NAMESPACE; a pod gives its own), check that it exists, and that the RoleBinding \
         names this ServiceAccount"
    )]
    Forbidden { namespace: String, name: String, message: String },
}

/// Waits until this process holds the Lease; an error when it never can.
pub async fn acquire<S: Store>(store: &S, config: &LeaseConfig) -> Result<(), LeaseError> {
    let mut said = String::new();
    loop {
        match try_acquire(store, config).await {
            Ok(Attempt::Held) => {
                tracing::info!(lease = %config.name, identity = %config.identity, "became the leader");
                return Ok(());
            }
            Ok(Attempt::HeldBy(holder)) => {
                if holder != said {
                    tracing::info!(lease = %config.name, %holder, "waiting for the leader's Lease to expire");
                    said = holder;
                }
            }
            Err(e) if e.is_conflict() => continue,
            // Nobody but an admin creates a namespace: retrying would wait for ever, saying only
            // that something was not found.
            // RBAC does not change by waiting either (and it is checked before the namespace's
            // existence: without rights there, a missing namespace is refused so).
            Err(StoreError::Forbidden(message)) => {
                return Err(LeaseError::Forbidden {
                    namespace: config.namespace.clone(),
                    name: config.name.clone(),
                    message,
                });
            }
            Err(StoreError::NotFound { resource, .. }) if resource == "namespaces" => {
                return Err(LeaseError::NamespaceMissing {
                    namespace: config.namespace.clone(),
                    name: config.name.clone(),
                });
            }
            Err(e) => tracing::warn!(lease = %config.name, error = %chain(&e), "could not take the Lease; retrying"),
        }
        tokio::time::sleep(config.renew_every).await;
    }
}

/// Keeps the Lease while this process leads; returns when it lost it (another holder, or no renewal
/// within the deadline). Callers must stop acting as the leader when it returns.
pub async fn hold<S: Store>(store: &S, config: &LeaseConfig) -> String {
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(config.renew_every).await;
        match try_acquire(store, config).await {
            Ok(Attempt::Held) => renewed = tokio::time::Instant::now(),
            Ok(Attempt::HeldBy(holder)) => return format!("the Lease is now held by {holder}"),
            Err(e) => {
                tracing::warn!(lease = %config.name, error = %chain(&e), "renewing the Lease failed");
                if renewed.elapsed() >= config.renew_deadline {
                    return format!("the Lease could not be renewed for {:?}: {}", config.renew_deadline, chain(&e));
                }
            }
        }
    }
}

/// Gives the Lease up (on shutdown), so that the next leader need not wait for it to expire.
pub async fn release<S: Store>(store: &S, config: &LeaseConfig) -> Result<(), StoreError> {
    let Some(mut lease) = store.get::<Lease>(&config.namespace, &config.name).await? else { return Ok(()) };
    let spec = lease.spec.get_or_insert_default();
    if spec.holder_identity.as_deref() != Some(&config.identity) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.renew_time = None;
    spec.acquire_time = None;
    store.update(&lease).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;

    fn config(identity: &str, seconds: u64) -> LeaseConfig {
        LeaseConfig {
            duration: Duration::from_secs(seconds),
            renew_every: Duration::from_millis(50),
            renew_deadline: Duration::from_millis(500),
            ..LeaseConfig::new("bootstream", "bootstream-controller", identity)
        }
    }

    async fn holder(store: &SqliteStore) -> Option<String> {
        let lease = store.get::<Lease>("bootstream", "bootstream-controller").await.unwrap().unwrap();
        lease.spec.unwrap().holder_identity
    }

    #[tokio::test]
    async fn one_leader_at_a_time_and_takeover_after_expiry_or_release() {
        let store = SqliteStore::open_in_memory().unwrap();
        let (a, b) = (config("pod-a", 1), config("pod-b", 1));
        assert_eq!(try_acquire(&store, &a).await.unwrap(), Attempt::Held);
        assert_eq!(try_acquire(&store, &b).await.unwrap(), Attempt::HeldBy("pod-a".into()));
        assert_eq!(try_acquire(&store, &a).await.unwrap(), Attempt::Held, "the holder renews");

        // pod-a stops renewing: pod-b takes over once the Lease expired, and pod-a learns it lost.
        let took_over = tokio::time::timeout(Duration::from_secs(5), acquire(&store, &b)).await;
        assert!(matches!(took_over, Ok(Ok(()))), "pod-b became the leader after expiry");
        assert_eq!(holder(&store).await.as_deref(), Some("pod-b"));
        let lease = store.get::<Lease>("bootstream", "bootstream-controller").await.unwrap().unwrap();
        assert_eq!(lease.spec.unwrap().lease_transitions, Some(1));
        let lost = tokio::time::timeout(Duration::from_secs(5), hold(&store, &a)).await.unwrap();
        assert_eq!(lost, "the Lease is now held by pod-b");

        // A release hands over at once.
        release(&store, &b).await.unwrap();
        assert_eq!(holder(&store).await, None);
        let c = config("pod-c", 60);
        assert_eq!(try_acquire(&store, &c).await.unwrap(), Attempt::Held);
    }

    #[tokio::test]
    async fn a_leader_that_cannot_renew_steps_down_before_the_lease_expires() {
        use crate::testkit::hub::{ApiServer, Grant};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let server = ApiServer::start(SqliteStore::open_in_memory().unwrap()).await;
        let grant = |verbs: &[&str]| Grant {
            namespace: Some("bootstream".into()),
            rule: serde_json::from_value(serde_json::json!(
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs}))
            .unwrap(),
        };
        server.enforce_rbac("ctl", vec![grant(&["get", "create", "update", "patch"])]);
        let store = crate::store::kube::KubeStore::start(server.client_as("ctl").await, &[]).await;
        let config = config("pod-a", 15);
        acquire(&store, &config).await.unwrap();
        // The API server stops accepting its renewals.
        server.enforce_rbac("ctl", vec![grant(&["get"])]);
        let started = std::time::Instant::now();
        let why = tokio::time::timeout(Duration::from_secs(5), hold(&store, &config)).await.unwrap();
        assert!(why.starts_with("the Lease could not be renewed for 500ms"), "{why}");
        assert!(started.elapsed() < config.duration, "stepped down before anyone could take over");
    }

    #[tokio::test]
    async fn a_takeover_naming_a_stale_version_loses() {
        let store = SqliteStore::open_in_memory().unwrap();
        try_acquire(&store, &config("pod-a", 1)).await.unwrap();
        let stale = store.get::<Lease>("bootstream", "bootstream-controller").await.unwrap().unwrap();
        try_acquire(&store, &config("pod-a", 1)).await.unwrap();
        let mut late = stale.clone();
        late.spec.as_mut().unwrap().holder_identity = Some("pod-b".into());
        assert!(store.update(&late).await.unwrap_err().is_conflict());
        assert_eq!(holder(&store).await.as_deref(), Some("pod-a"));
    }
}
