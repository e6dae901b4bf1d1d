//! What the process around the API adds to it: [`Hooks`] the product uses (the InfraEnv controller
//! reconciles before a write is answered), and the [`Interceptor`] test harnesses put in front of
//! every request (test builds only).

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

#[cfg(any(test, feature = "testkit"))]
use super::{Collection, Verb};
#[cfg(any(test, feature = "testkit"))]
use crate::http::Body;
use crate::resources::Kind;
#[cfg(any(test, feature = "testkit"))]
use http::Response;

/// A boxed future borrowing from its hook.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What the process around the API does with writes: the embedded server has the InfraEnv
/// controller reconcile an InfraEnv before the write is answered, so that `kubectl apply` then
/// `kubectl get` shows its status.
pub trait Hooks: Send + Sync + 'static {
    /// An object of `kind` is about to be created from `doc`: what it gets beside the document.
    fn creating(&self, _kind: Kind, _doc: &Value) -> Creating {
        Creating::default()
    }
    /// A create prepared by [`Hooks::creating`] did not happen.
    fn not_created(&self, _uid: &str) {}
    /// An object was written or deleted: the answer waits for this.
    fn written<'a>(&'a self, _kind: Kind, _namespace: &'a str, _name: &'a str) -> HookFuture<'a> {
        Box::pin(async {})
    }
}

/// No hooks (the Kubernetes-mode tests' hub).
pub struct NoHooks;

impl Hooks for NoHooks {}

/// See [`Hooks::creating`].
#[derive(Default)]
pub struct Creating {
    /// A controller's finalizer the object is created with (one write fewer than the controller's own).
    pub finalizer: Option<&'static str>,
    /// The uid reserved for it.
    pub uid: Option<String>,
    /// Work to run beside the store's write (building an InfraEnv's discovery content).
    pub beside: Option<HookFuture<'static>>,
}

/// What test harnesses may add to the API (request logs, injected failures, authorization by
/// service-account token): asked first, for every request. Test builds only (`testkit`): asking
/// costs a read lock and a copy of the request's head, which the product never needs.
#[cfg(any(test, feature = "testkit"))]
pub trait Interceptor: Send + Sync + 'static {
    /// None lets the request through; a response answers it instead.
    fn intercept(
        &self,
        head: &http::request::Parts,
        verb: Verb,
        collection: Option<&Collection>,
    ) -> Option<Response<Body>>;
}
