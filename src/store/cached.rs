//! An object as a store keeps it in memory: its JSON text, shared by every reader, and for the kinds
//! read all the time and rarely changed, the object decoded once.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::store::{Object, StoreError};

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend(e)
}

/// A committed object: its resourceVersion, uid and JSON text (shared by every reader).
pub(in crate::store) struct Cached {
    pub(in crate::store) rv: i64,
    pub(in crate::store) uid: String,
    pub(in crate::store) text: Bytes,
    /// The object decoded, kept for the kinds [`keeps_decoded`] names once a reader decoded it.
    decoded: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl Cached {
    pub(in crate::store) fn new(rv: i64, uid: String, text: Bytes) -> Cached {
        Cached { rv, uid, text, decoded: OnceLock::new() }
    }

    pub(in crate::store) fn value(&self) -> Result<Value, StoreError> {
        serde_json::from_slice(&self.text).map_err(backend)
    }

    /// The object as a K: a copy of the decoded one where it is kept, else decoded from the text
    /// (owned as decoded: not through [`Cached::with_object`], which would copy it once more).
    pub(in crate::store) fn object<K: Object>(&self) -> Result<K, StoreError> {
        if let Some(k) = self.decoded.get().and_then(|d| d.downcast_ref::<K>()) {
            return Ok(k.clone());
        }
        let k: K = serde_json::from_slice(&self.text).map_err(backend)?;
        if keeps_decoded::<K>() {
            let _ = self.decoded.set(Arc::new(k.clone()));
        }
        Ok(k)
    }

    /// `f` of the object as a K: the decoded one where it is kept (kept on first decoding for the
    /// kinds [`keeps_decoded`] names), else one decoded from the text for this call.
    pub(in crate::store) fn with_object<K: Object, T>(&self, f: impl FnOnce(&K) -> T) -> Result<T, StoreError> {
        if let Some(k) = self.decoded.get().and_then(|d| d.downcast_ref::<K>()) {
            return Ok(f(k));
        }
        let k: K = serde_json::from_slice(&self.text).map_err(backend)?;
        if !keeps_decoded::<K>() {
            return Ok(f(&k));
        }
        let kept = self.decoded.get_or_init(|| Arc::new(k));
        match kept.downcast_ref::<K>() {
            Some(k) => Ok(f(k)),
            // Another reader kept it first as another Rust type of the same kind: decode it again.
            None => Ok(f(&serde_json::from_slice::<K>(&self.text).map_err(backend)?)),
        }
    }
}

/// Whether the cache keeps decoded copies of K's objects. Controllers read an InfraEnv, a
/// ClusterDeployment or an AgentClusterInstall at nearly every host change (thousands of times a
/// second in a busy pool) and they change rarely: copying a decoded object costs a fraction of
/// parsing its text again. Kinds with one object per host (Agents, BareMetalHosts) are decoded at each
/// read instead: a second copy of each would double the memory the pool takes.
pub(in crate::store) fn keeps_decoded<K: Object>() -> bool {
    let group = K::group(&());
    let kind = K::kind(&());
    matches!(
        (&*group, &*kind),
        ("agent-install.openshift.io", "InfraEnv")
            | ("hive.openshift.io", "ClusterDeployment")
            | ("hive.openshift.io", "ClusterImageSet")
            | ("extensions.hive.openshift.io", "AgentClusterInstall")
    )
}
