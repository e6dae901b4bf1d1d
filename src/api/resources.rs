//! The Kubernetes API as the embedded server runs it ([`super::kube`]): behind the server's bearer
//! token, with the InfraEnv controller reconciling an InfraEnv before its write is answered.

use std::sync::Arc;

use http::{Response, StatusCode, header};
use serde_json::Value;

use super::App;
use super::kube::{Creating, HookFuture, Hooks, status_error};
use crate::controllers::infraenv;
use crate::controllers::runtime::{Action, WorkQueue};
use crate::http::Body;
use crate::image::Images;
use crate::resources::{InfraEnv, Kind};
use crate::store::Store;

impl<S: Store> App<S> {
    /// The resource API holds every tenant's pull secrets and the fleet's state: without the API's
    /// bearer token, this 401 is the answer.
    pub(super) fn api_refusal(&self, headers: &http::HeaderMap) -> Option<Response<Body>> {
        let expected = self.api_token.as_ref()?;
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let message = match presented {
            Some(t) if crate::auth::same_token(t, expected) => return None,
            Some(_) => "the bearer token is not this server's API token",
            None => {
                "this API needs the server's token: `Authorization: Bearer <token>`, the token being in \
                 DATA_DIR/api-token (or use DATA_DIR/kubeconfig with kubectl)"
            }
        };
        let mut r = status_error(StatusCode::UNAUTHORIZED, "Unauthorized", message);
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        Some(r)
    }
}

/// What the embedded server does around writes of the API.
pub struct EmbeddedHooks<S: Store> {
    pub images: Arc<Images<S>>,
    /// The InfraEnv controller's queue: the API queues the InfraEnvs it writes and answers once the
    /// controller reconciled them.
    pub infraenvs: Arc<WorkQueue>,
    /// Whether InfraEnvs are created with the controller's finalizer (where the controller runs).
    pub finalize_infraenvs: bool,
}

impl<S: Store> Hooks for EmbeddedHooks<S> {
    fn creating(&self, kind: Kind, doc: &Value) -> Creating {
        if kind != Kind::InfraEnv {
            return Creating::default();
        }
        // The InfraEnv controller's finalizer comes with the create: added by the controller, it
        // would be one more write, and one more round of change events, before the status.
        let finalizer = self.finalize_infraenvs.then_some(infraenv::INFRAENV_FINALIZER);
        // A new InfraEnv's discovery content is most of its create's time. Built beside the store's
        // write, under the uid reserved for the InfraEnv, it is ready sooner for the status and for
        // the first downloads, which would otherwise wait for the write and then the build.
        let Some(ie) = infraenv_to_create(doc) else { return Creating { finalizer, ..Default::default() } };
        let uid = ie.metadata.uid.clone();
        let images = self.images.clone();
        Creating { finalizer, uid, beside: Some(Box::pin(async move { images.prebuild(&ie).await })) }
    }

    fn not_created(&self, uid: &str) {
        // Refused, or created by someone else meanwhile: nothing has the reserved uid.
        self.images.forget_uid(uid);
    }

    fn written<'a>(&'a self, kind: Kind, namespace: &'a str, name: &'a str) -> HookFuture<'a> {
        Box::pin(async move {
            if kind != Kind::InfraEnv {
                return;
            }
            // Someone else may write the InfraEnv meanwhile: then the reconcile's status write
            // conflicts and asks to run again at once. Without waiting for that one too, the answer
            // (and a `get` right after) could lack the status.
            for _ in 0..5 {
                match self.infraenvs.enqueue_and_wait((namespace.to_string(), name.to_string())).await {
                    Some(Ok(Action::RequeueAfter(d))) if d.is_zero() => continue,
                    _ => break,
                }
            }
        })
    }
}

/// The InfraEnv a validated document creates, as the store will keep it, with the uid reserved for
/// it (the store gives a new object generation 1); None when the document does not read as one.
fn infraenv_to_create(doc: &Value) -> Option<InfraEnv> {
    let mut ie: InfraEnv = serde_json::from_value(doc.clone()).ok()?;
    ie.metadata.uid = Some(uuid::Uuid::new_v4().to_string());
    ie.metadata.generation = Some(1);
    ie.status = None;
    Some(ie)
}
