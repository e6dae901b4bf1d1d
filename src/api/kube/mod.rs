//! The Kubernetes API of the embedded server: what `kubectl`, client-go, kube-rs and the Python client
//! talk to, over the objects of the SQLite store. It is the only Kubernetes-API server in the repo:
//! the embedded product serves users with it, and the Kubernetes-mode tests run the controllers
//! against it through kube-rs.
//!
//! # What it implements
//! - Discovery (`/version`, `/api`, `/apis`, `/apis/{group}[/{version}]`, aggregated discovery) and
//!   OpenAPI v2 and v3 (`/openapi/v2`, `/openapi/v3[/...]`) for the served kinds ([`served`]).
//! - For every served kind: get, list (label and field selectors, `limit`/`continue`), watch
//!   (from a resourceVersion, bookmarks, `sendInitialEvents`, `timeoutSeconds`, `410 Gone` for a
//!   version older than the window), create (`generateName` too), update, delete (a `Status` of
//!   success; the marked object while finalizers hold it), the status subresource, patches (JSON merge, JSON patch, strategic
//!   merge for the core kinds, server-side apply with `managedFields`), `dryRun=All`,
//!   `fieldValidation=Strict|Warn|Ignore` (Warn by default, as the API server), `Table` and
//!   `PartialObjectMetadata` responses, and errors as `Status` objects with the API server's reasons.
//! - Validation: bootstream's kinds are checked against their CRD's structural schema as the API
//!   server checks them ([`crate::resources::crds::schema_errors`]), then by the same admission
//!   rules a hub's webhook applies ([`crate::resources::validate_document`] and friends); other kinds
//!   only structurally.
//! - More kinds for a test harness that plays another cluster (`KubeApi::with_collections`, built
//!   with the `testkit` feature only): served like the others, validated only structurally.
//!
//! # What it does not
//! - Authorization beyond the server's one bearer token (there is one user: the admin); no
//!   impersonation, no TokenReview or SubjectAccessReview.
//! - `deletecollection`, `Foreground` and `Orphan` propagation (deletes cascade in the background, as
//!   with `Background`), graceful deletion periods, protobuf, CBOR, YAML bodies on anything but
//!   server-side apply, `resourceVersionMatch=Exact` lists, consistent `continue` snapshots (a page
//!   continues after the last name of the previous one, from the objects as they are then).
//! - Namespaces are served as objects but do not gate creation (an object may name a namespace that
//!   does not exist), and deleting one does not delete its contents.
//!
//! # Differences from kube-apiserver
//! The differential tests (`tests/it/kubectl/differential.rs`) run the same steps by kubectl,
//! kube-rs and the Python client against a real kube-apiserver with `deploy/crds` and against this
//! API, and compare the answers (errors, watches, apply, patches, dry runs, warnings, tables,
//! discovery, explain). What differs on purpose:
//! - Admission: bootstream's kinds are checked by the rules a hub runs in bootstream's webhook
//!   (`resources::admission`); a bare kube-apiserver without the webhook takes, say, an InfraEnv
//!   without a pull secret. The rules are the product's; the webhook makes a hub agree.
//! - Only bootstream's kinds, Secrets, Namespaces, Events and Leases are served, so discovery lists
//!   those alone (and no `namespaces/status` or `namespaces/finalize`); the core kinds' schemas
//!   (what `kubectl explain secret` prints) are bootstream's own, with shorter descriptions.
//! - A watch replays any version since the server started and answers `410 Gone` for older ones;
//!   kube-apiserver's window is its watch cache's (a few minutes of changes), so a version it has
//!   let go may still replay here. Clients list again on 410 either way.
//! - Namespaces have no `spec.finalizers` (no namespace controller empties them: a deletion is
//!   immediate, never `Terminating`).
//! - A JSON patch whose `test` operation fails is refused alike (422 Invalid), but the message says
//!   which test failed (kube-apiserver's says only "the server rejected our request due to an
//!   error in our request").
//! - The status subresource of bootstream's kinds is checked by its types, not by the CRD's
//!   schema (only bootstream's controllers write it).
//! - A label selector that does not parse is a BadRequest alike, in the words of bootstream's
//!   parser (kube-apiserver's lexer names the token it stopped at).
//! - What a request may cost is bounded more tightly (`limits.rs`, issue 41): an object over
//!   `--max-object-bytes` (1.5 MiB, etcd's default request limit, which kube-apiserver reaches only
//!   as an etcd error) is 413 with both sizes; a YAML body nested past 64 levels or using aliases is
//!   400; a JSON patch that would build, copy or shift past its budget is refused. kube-apiserver
//!   takes such bodies and spends what they ask.

mod apply;
mod discovery;
mod jsonpath;
pub mod limits;
mod names;
mod openapi;
mod patch;
mod protobuf;
pub mod selector;
pub mod served;
mod table;
pub mod watch;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::http::Body;
#[cfg(any(test, feature = "testkit"))]
use crate::keylocks::LockedRw as _;
use crate::resources::Kind;
use crate::store::sqlite::SqliteStore;
use crate::store::{Deletion, StoreError};
use selector::{FieldSelector, LabelSelector};
use served::Served;
use watch::{Start, WatchOptions, Watches};

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

/// A request's verb, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// Discovery and OpenAPI documents.
    Discover,
    Other,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Discover => "get",
            Verb::Other => "unknown",
        }
    }
}

/// A collection the API serves.
#[derive(Clone, Debug)]
pub struct Collection {
    /// What discovery, OpenAPI and tables say of it.
    pub served: Served,
    /// bootstream's own kinds (validated by its admission rules); None for the others.
    pub kind: Option<Kind>,
    /// Custom resources have `metadata.generation`; Secrets, Namespaces and Leases not.
    pub has_generation: bool,
    /// Field labels its field selectors take besides `metadata.name` and `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// The CRD's `additionalPrinterColumns` (none for the core kinds: they have built-in columns).
    pub columns: Vec<Value>,
}

impl Collection {
    pub fn group(&self) -> &str {
        &self.served.group
    }
    pub fn version(&self) -> &str {
        &self.served.version
    }
    pub fn plural(&self) -> &str {
        &self.served.plural
    }
    pub fn kind_name(&self) -> &str {
        &self.served.kind
    }
    pub fn namespaced(&self) -> bool {
        self.served.namespaced
    }
    pub fn has_status(&self) -> bool {
        self.served.has_subresource("status")
    }
    /// `/apis/GROUP/VERSION` or `/api/v1`.
    pub fn prefix(&self) -> String {
        self.served.api_prefix()
    }
    pub fn api_version(&self) -> String {
        self.served.group_version()
    }
    /// The store key: `plural.group`, or the plural alone for the core group.
    pub fn resource(&self) -> String {
        self.served.resource_name()
    }
    /// `plural.group` as the API server names it in messages.
    fn qualified(&self) -> String {
        self.resource()
    }
    /// `Kind.group` (`Kind` for the core group), as the API server names a kind in its messages.
    fn qualified_kind(&self) -> String {
        if self.group().is_empty() {
            self.kind_name().to_string()
        } else {
            format!("{}.{}", self.kind_name(), self.group())
        }
    }
}

/// Our CRDs as JSON, with the printing upstream's declare.
pub fn crd_documents() -> Vec<Value> {
    crate::resources::crds::all().iter().map(|crd| serde_json::to_value(crd).expect("CRDs serialize")).collect()
}

/// Every collection served: bootstream's kinds (from their CRDs), and the core kinds kubectl and
/// the controllers use.
pub fn collections(crds: &[Value]) -> Vec<Collection> {
    let mut all = Vec::new();
    for crd in crds {
        let served = served::from_crd(crd);
        let kind = Kind::ALL.into_iter().find(|k| k.resource() == served.resource_name());
        let columns = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == served.version.as_str()))
            .and_then(|v| v["additionalPrinterColumns"].as_array().cloned())
            .unwrap_or_default();
        all.push(Collection { served, kind, has_generation: true, field_labels: &[], columns });
    }
    const EVENT_FIELDS: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "source",
        "type",
    ];
    for served in served::core_kinds() {
        let (kind, field_labels): (Option<Kind>, &'static [&'static str]) = match served.kind.as_str() {
            "Secret" => (Some(Kind::Secret), &["type"]),
            "Event" => (None, EVENT_FIELDS),
            "Namespace" => (None, &["status.phase"]),
            _ => (None, &[]),
        };
        all.push(Collection { served, kind, has_generation: false, field_labels, columns: Vec::new() });
    }
    all
}

/// An error as the API answers it: a `Status` object.
#[derive(Debug)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None }
    }
    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }
    fn not_found(c: &Collection, name: &str) -> ApiError {
        ApiError {
            details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
            ..ApiError::new(StatusCode::NOT_FOUND, "NotFound", format!("{} \"{name}\" not found", c.qualified()))
        }
    }
    fn invalid(c: &Collection, name: &str, message: impl std::fmt::Display) -> ApiError {
        // kubectl prints an Invalid error as `The KIND "NAME" is invalid: FIELD: MESSAGE` from its
        // causes alone (without one it shows no reason at all): the field is the message's leading
        // path, else the spec (the admission webhooks' messages name no path).
        let text = message.to_string();
        let (field, cause) = match text.split_once(": ") {
            Some((path, rest))
                if path.starts_with(|c: char| c.is_ascii_lowercase())
                    && path.chars().all(|c| c.is_ascii_alphanumeric() || "._[]-".contains(c)) =>
            {
                (path, rest)
            }
            _ => ("spec", text.as_str()),
        };
        let causes = json!([{"reason": "FieldValueInvalid", "message": cause, "field": field}]);
        Self::invalid_with_causes(c, name, &text, causes)
    }
    /// The API server's Invalid error of `name`: `text` after the kind and name, `causes` in details.
    fn invalid_with_causes(c: &Collection, name: &str, text: &str, causes: Value) -> ApiError {
        ApiError {
            details: Some(json!({"name": name, "group": c.group(), "kind": c.kind_name(), "causes": causes})),
            ..ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!("{} \"{name}\" is invalid: {text}", c.qualified_kind()),
            )
        }
    }
    /// What a CRD's schema (or a core kind's validation) refuses, cause by cause, as the API server
    /// words it (one cause alone, several in brackets).
    fn invalid_fields(c: &Collection, name: &str, errors: &[crate::resources::crds::SchemaError]) -> ApiError {
        let causes: Vec<Value> =
            errors.iter().map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field})).collect();
        let listed: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        let text = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::invalid_with_causes(c, name, &text, Value::Array(causes))
    }
    fn from_store(c: &Collection, name: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(c, name),
            StoreError::AlreadyExists { .. } => ApiError {
                details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", c.qualified()),
                )
            },
            StoreError::Conflict(_) => ApiError {
                details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
                ..ApiError::new(
                    StatusCode::CONFLICT,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                        c.qualified()
                    ),
                )
            },
            StoreError::Invalid(m) => ApiError::invalid(c, name, m),
            StoreError::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, "Forbidden", m),
            StoreError::Backend(m) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", m),
        }
    }

    pub fn response(&self) -> Response<Body> {
        let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code.as_u16()});
        if let Some(d) = &self.details {
            status["details"] = d.clone();
        }
        crate::http::json(self.code, &status)
    }
}

/// A `Status` error response.
pub fn status_error(code: StatusCode, reason: &'static str, message: &str) -> Response<Body> {
    ApiError::new(code, reason, message).response()
}

/// The query of a request, decoded.
fn query(uri: &http::Uri) -> std::collections::HashMap<String, String> {
    crate::http::query::query_map(uri)
}

/// What a resource request addresses.
struct Target<'a> {
    collection: &'a Collection,
    /// None: across namespaces (lists and watches only). Cluster-scoped objects have "".
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

/// How a request asks for its answer (`Accept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Representation {
    Object,
    Metadata,
    Table,
}

fn representation(headers: &http::HeaderMap) -> Representation {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if table::wants_table(accept) {
        return Representation::Table;
    }
    // The first acceptable type wins.
    for part in accept.split(',') {
        let part = part.trim();
        if part.contains("as=PartialObjectMetadata") {
            return Representation::Metadata;
        }
        if part.starts_with("application/json") || part.starts_with("*/*") || part.is_empty() {
            return Representation::Object;
        }
    }
    Representation::Object
}

/// Per request: who writes, how strictly, whether for real.
struct WriteContext {
    manager: String,
    dry_run: bool,
    validation: FieldValidation,
    warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

/// The Kubernetes API over a store.
pub struct KubeApi {
    store: SqliteStore,
    collections: Vec<Collection>,
    /// Our CRDs as JSON, for the OpenAPI documents.
    crds: Vec<Value>,
    /// The OpenAPI v3 documents by path (`apis/GROUP/VERSION`), with their hashes; made when first asked for.
    openapi_v3: std::sync::OnceLock<std::collections::BTreeMap<String, (Bytes, String)>>,
    openapi_v2: std::sync::OnceLock<Bytes>,
    watches: Arc<Watches>,
    hooks: Arc<dyn Hooks>,
    #[cfg(any(test, feature = "testkit"))]
    interceptor: std::sync::RwLock<Option<Arc<dyn Interceptor>>>,
    /// Serve as a hub whose CRDs are newer than ours (a test option): fields our schemas lack are
    /// kept, and the rest is validated without them.
    #[cfg(any(test, feature = "testkit"))]
    keep_unknown_fields: std::sync::atomic::AtomicBool,
    limits: limits::Limits,
    /// The OpenAPI v3 index, made when first asked for (it depends only on what is served).
    openapi_v3_index: std::sync::OnceLock<Bytes>,
}

/// Largest `limit` honoured for one page.
const MAX_PAGE: usize = 10_000;

impl KubeApi {
    /// Serves `store` (needs a tokio runtime: watches follow the store's changes from now on).
    pub fn new(store: SqliteStore, hooks: Arc<dyn Hooks>) -> Arc<KubeApi> {
        Self::build(store, hooks, Vec::new(), limits::Limits::default())
    }

    /// [`KubeApi::new`] under other [`limits::Limits`] than the defaults.
    pub fn with_limits(store: SqliteStore, hooks: Arc<dyn Hooks>, limits: limits::Limits) -> Arc<KubeApi> {
        Self::build(store, hooks, Vec::new(), limits)
    }

    /// [`KubeApi::new`], serving `extra` collections besides bootstream's kinds and the core kinds: a
    /// test harness playing another cluster (`testkit::spoke`) adds the kinds that cluster holds.
    /// With `kind: None` they are validated only structurally.
    ///
    /// # Panics
    /// If one of them is already served.
    #[cfg(any(test, feature = "testkit"))]
    pub fn with_collections(store: SqliteStore, hooks: Arc<dyn Hooks>, extra: Vec<Collection>) -> Arc<KubeApi> {
        Self::build(store, hooks, extra, limits::Limits::default())
    }

    fn build(
        store: SqliteStore,
        hooks: Arc<dyn Hooks>,
        extra: Vec<Collection>,
        limits: limits::Limits,
    ) -> Arc<KubeApi> {
        let crds = crd_documents();
        let mut collections = collections(&crds);
        for c in extra {
            assert!(
                !collections.iter().any(|s| s.prefix() == c.prefix() && s.plural() == c.plural()),
                "{} is already served",
                c.resource()
            );
            collections.push(c);
        }
        let resources: Vec<String> = collections.iter().map(Collection::resource).collect();
        let watches = Watches::start(store.clone(), &resources);
        Arc::new(KubeApi {
            store,
            collections,
            crds,
            openapi_v3: Default::default(),
            openapi_v2: Default::default(),
            watches,
            hooks,
            #[cfg(any(test, feature = "testkit"))]
            interceptor: Default::default(),
            #[cfg(any(test, feature = "testkit"))]
            keep_unknown_fields: Default::default(),
            limits,
            openapi_v3_index: Default::default(),
        })
    }

    /// Serves as a hub whose CRDs are newer than ours (a test option): fields our schemas lack are
    /// kept, and the rest is validated without them.
    #[cfg(any(test, feature = "testkit"))]
    pub fn keep_unknown_fields(&self, keep: bool) {
        self.keep_unknown_fields.store(keep, std::sync::atomic::Ordering::Relaxed);
    }

    #[cfg(any(test, feature = "testkit"))]
    fn keeps_unknown_fields(&self) -> bool {
        self.keep_unknown_fields.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The product never keeps them: its CRDs are the ones it serves.
    #[cfg(not(any(test, feature = "testkit")))]
    fn keeps_unknown_fields(&self) -> bool {
        false
    }

    /// Puts a test harness's interceptor in front of every request.
    #[cfg(any(test, feature = "testkit"))]
    pub fn set_interceptor(&self, interceptor: Arc<dyn Interceptor>) {
        *self.interceptor.write_locked() = Some(interceptor);
    }

    /// What the test harness's interceptor answers instead of the API, if one is set; the head is
    /// copied only then.
    #[cfg(any(test, feature = "testkit"))]
    fn intercept(&self, req: &Request<Bytes>, verb: Verb, collection: Option<&Collection>) -> Option<Response<Body>> {
        let interceptor = self.interceptor.read_locked().clone()?;
        let (head, _) = clone_head(req);
        interceptor.intercept(&head, verb, collection)
    }

    /// The product has no interceptor: no lock, no copy of the head.
    #[cfg(not(any(test, feature = "testkit")))]
    fn intercept(&self, _: &Request<Bytes>, _: Verb, _: Option<&Collection>) -> Option<Response<Body>> {
        None
    }

    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// See [`Watches::compact`].
    #[cfg(any(test, feature = "testkit"))]
    pub fn compact_watches(&self) {
        self.watches.compact();
    }

    /// Creates the `default` namespace if it is missing, as a cluster has it from the start.
    pub async fn ensure_default_namespace(&self) -> Result<(), StoreError> {
        if self.store.get_raw("namespaces", "", "default")?.is_some() {
            return Ok(());
        }
        let doc = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "default", "labels": {"kubernetes.io/metadata.name": "default"}}});
        match self.store.create_raw("namespaces", "", doc, false).await {
            Ok(created) => {
                let rv = created["metadata"]["resourceVersion"].as_str().map(str::to_string);
                self.store
                    .replace_status_raw("namespaces", "", "default", Some(json!({"phase": "Active"})), rv)
                    .await?;
                Ok(())
            }
            Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub fn collections(&self) -> &[Collection] {
        &self.collections
    }

    /// Whether this API answers `path` (everything else is the rest of the server's).
    pub fn serves(path: &str) -> bool {
        path == "/version"
            || path == "/api"
            || path == "/apis"
            || path == "/openapi/v2"
            || path.starts_with("/openapi/v3")
            || path.starts_with("/apis/")
            || path.starts_with("/api/v1")
    }

    pub async fn handle(&self, req: &Request<Bytes>) -> Response<Body> {
        let path = req.uri().path();
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        if let Some(doc) = self.document(path, req.headers()) {
            if let Some(r) = self.intercept(req, Verb::Discover, None) {
                return r;
            }
            return doc;
        }
        let Some(t) = self.target(&segs) else {
            if let Some(r) = self.intercept(req, Verb::Other, None) {
                return r;
            }
            return status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the server could not find the requested resource ({path})"),
            );
        };
        let q = query(req.uri());
        let verb = verb_of(req.method(), &t, &q);
        if let Some(r) = self.intercept(req, verb, Some(t.collection)) {
            return r;
        }
        // kubectl's generators (`create namespace`, `create secret`) send protobuf: read as the
        // JSON it stands for.
        let converted;
        let req = if req
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(protobuf::CONTENT_TYPE.as_bytes()))
            && matches!(verb, Verb::Create | Verb::Update | Verb::Delete)
        {
            let body = req.body().clone();
            let json = match limits::cpu_bound(body.len(), move || protobuf::decode(&body)).await {
                Ok(v) => v,
                Err(e) => return ApiError::bad_request(format!("the protobuf body cannot be read: {e}")).response(),
            };
            let mut r = Request::new(Bytes::from(json.to_string()));
            *r.method_mut() = req.method().clone();
            *r.uri_mut() = req.uri().clone();
            *r.headers_mut() = req.headers().clone();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            converted = r;
            &converted
        } else {
            req
        };
        // JSON only besides (and YAML for server-side apply).
        if matches!(verb, Verb::Create | Verb::Update | Verb::Delete)
            && let Some(ct) = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
            && !ct.trim().is_empty()
            && !ct.starts_with("application/json")
            && !req.body().is_empty()
        {
            return ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                format!("the body of the request was in an unknown format - accepted media types include: application/json (not {ct})"),
            )
            .response();
        }
        let mut ctx = match write_context(req, &q) {
            Ok(ctx) => ctx,
            Err(e) => return e.response(),
        };
        // A read from a resourceVersion not recorded yet waits for it a moment, then is refused.
        if matches!(verb, Verb::Watch | Verb::List)
            && let Some(Ok(rv)) = q.get("resourceVersion").map(|v| v.parse::<i64>())
            && let Err(current) = self.watches.wait_for(rv, watch::FUTURE_WAIT).await
        {
            let mut resp = crate::http::json(StatusCode::GATEWAY_TIMEOUT, &watch::too_large(rv, current));
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
        let result = match verb {
            Verb::Watch => return self.watch(&t, &q, req.headers()),
            Verb::List => return self.list(&t, &q, req.headers()).unwrap_or_else(|e| e.response()),
            Verb::Get => self.get(&t).map(|o| (StatusCode::OK, o)),
            Verb::Create if !t.status => self.create(&t, req.body(), &mut ctx).await,
            Verb::Update => self.update(&t, req.body(), &mut ctx).await,
            Verb::Patch => self.patch(&t, req, &q, &mut ctx).await,
            Verb::Delete if !t.status => self.delete(&t, req.body(), &mut ctx).await,
            _ => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                format!("the server does not allow this method on the requested resource ({})", req.method()),
            )),
        };
        let mut resp = match result {
            // A Status (a deletion's) is a Status in any representation.
            Ok((code, object)) if object["kind"] == "Status" => crate::http::json(code, &object),
            Ok((code, object)) => match representation(req.headers()) {
                Representation::Metadata => crate::http::json(code, &watch::metadata_only(&object)),
                Representation::Table if verb == Verb::Get => {
                    let meta = json!({"resourceVersion": object["metadata"]["resourceVersion"]});
                    match self.table(t.collection, std::slice::from_ref(&object), meta, &q) {
                        Ok(table) => crate::http::json(code, &table),
                        Err(e) => e.response(),
                    }
                }
                _ => crate::http::json(code, &object),
            },
            Err(e) => e.response(),
        };
        for w in ctx.warnings.iter().take(10) {
            // `299 - "text"`, as the API server sends warnings (quotes and controls escaped away).
            let mut text = String::new();
            for c in w.chars().filter(|c| !c.is_control()).take(256) {
                if c == '"' || c == '\\' {
                    text.push('\\');
                }
                text.push(c);
            }
            if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{text}\"")) {
                resp.headers_mut().append(header::WARNING, v);
            }
        }
        resp
    }

    fn target<'a>(&'a self, segs: &[&'a str]) -> Option<Target<'a>> {
        let crate::store::ApiPath { prefix, namespace, plural, name, status } = crate::store::ApiPath::parse(segs)?;
        let collection = self.collections.iter().find(|c| c.prefix() == prefix && c.plural() == plural)?;
        let namespace = match (collection.namespaced(), namespace) {
            (true, Some("")) => return None,
            (false, Some(ns)) if !ns.is_empty() => return None,
            (false, _) => Some(String::new()),
            (true, ns) => ns.map(str::to_string),
        };
        if status && !collection.has_status() {
            return None;
        }
        Some(Target { collection, namespace, name: name.map(str::to_string), status })
    }

    fn get(&self, t: &Target<'_>) -> Result<Value, ApiError> {
        let c = t.collection;
        let name = t.name.as_deref().unwrap_or_default();
        let ns = t.namespace.as_deref().unwrap_or_default();
        match self.store.get_raw(&c.resource(), ns, name) {
            Ok(Some(o)) => Ok(o),
            Ok(None) => Err(ApiError::not_found(c, name)),
            Err(e) => Err(ApiError::from_store(c, name, e)),
        }
    }

    fn selectors(
        c: &Collection,
        q: &std::collections::HashMap<String, String>,
    ) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), c.field_labels)
            .map_err(ApiError::bad_request)?;
        Ok((labels, fields))
    }

    /// A list, in (namespace, name) order, in pages of `limit` (the `continue` token names where the
    /// next page starts).
    fn list(
        &self,
        t: &Target<'_>,
        q: &std::collections::HashMap<String, String>,
        headers: &http::HeaderMap,
    ) -> Result<Response<Body>, ApiError> {
        let c = t.collection;
        let (labels, fields) = Self::selectors(c, q)?;
        // What the watches have recorded, read before the objects: the list holds at least that.
        let recorded = self.watches.resource_version();
        let after = match q.get("continue").filter(|s| !s.is_empty()) {
            Some(token) => Some(decode_continue(token)?),
            None => None,
        };
        let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0).map(|l| l.min(MAX_PAGE));
        let entries = self.store.list_raw_keyed(&c.resource(), t.namespace.as_deref());
        // The list may hold changes the watches have not recorded yet: stamped with the newest of
        // them, a watch from the list's version starts after what the list holds (no duplicates),
        // and a deletion after the list is recorded at a version no older than that.
        let resource_version = entries.iter().map(|e| e.3).fold(recorded, i64::max);
        let filtering = !labels.is_empty() || !fields.is_empty();
        let mut items: Vec<Bytes> = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (ns, name, text, _) in entries {
            if let Some((after_ns, after_name)) = &after
                && (ns.as_str(), name.as_str()) <= (after_ns.as_str(), after_name.as_str())
            {
                continue;
            }
            if filtering {
                let Ok(object) = serde_json::from_slice::<Value>(&text) else { continue };
                if !labels.matches(&object) || !fields.matches(&object) {
                    continue;
                }
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last_key = Some((ns, name));
            items.push(text);
        }
        let continue_token = match (more, last_key) {
            (true, Some((ns, name))) => encode_continue(&ns, &name),
            _ => String::new(),
        };
        let mut list_meta = json!({"resourceVersion": resource_version.to_string()});
        if !continue_token.is_empty() {
            list_meta["continue"] = Value::String(continue_token);
        }
        match representation(headers) {
            Representation::Object => {
                // A list of custom resources (unstructured on the API server) always says
                // `continue`, empty on the last page; typed lists omit it then.
                if c.has_generation && list_meta.get("continue").is_none() {
                    list_meta["continue"] = json!("");
                }
                Ok(list_response(c, &items, &list_meta))
            }
            Representation::Metadata => {
                let items: Vec<Value> = items
                    .iter()
                    .filter_map(|t| serde_json::from_slice::<Value>(t).ok())
                    .map(|o| watch::metadata_only(&o))
                    .collect();
                Ok(crate::http::json(
                    StatusCode::OK,
                    &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": list_meta, "items": items}),
                ))
            }
            Representation::Table => {
                let objects: Vec<Value> = items.iter().filter_map(|t| serde_json::from_slice(t).ok()).collect();
                Ok(crate::http::json(StatusCode::OK, &self.table(c, &objects, list_meta, q)?))
            }
        }
    }

    fn table(
        &self,
        c: &Collection,
        objects: &[Value],
        list_meta: Value,
        q: &std::collections::HashMap<String, String>,
    ) -> Result<Value, ApiError> {
        let include = table::IncludeObject::from_query(q.get("includeObject").map(String::as_str))
            .map_err(ApiError::bad_request)?;
        Ok(table::table(&c.served, &c.columns, objects, include, now_unix(), list_meta))
    }

    fn served(&self) -> Vec<Served> {
        self.collections.iter().map(|c| c.served.clone()).collect()
    }

    /// Discovery and OpenAPI documents; None for other paths.
    fn document(&self, path: &str, headers: &http::HeaderMap) -> Option<Response<Body>> {
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let json_doc = |doc: &Value, content_type: &str| {
            let mut r = crate::http::json(StatusCode::OK, doc);
            if let Ok(v) = HeaderValue::from_str(content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
            r
        };
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            ["version"] => Some(crate::http::json(StatusCode::OK, &discovery::version_info(GIT_VERSION, "", ""))),
            ["api"] => {
                let format = discovery::negotiate(accept);
                let doc = match format {
                    discovery::DiscoveryFormat::Legacy => discovery::api_versions(""),
                    f => discovery::aggregated_core(&self.served(), f),
                };
                Some(json_doc(&doc, format.content_type()))
            }
            ["apis"] => {
                let format = discovery::negotiate(accept);
                let doc = match format {
                    discovery::DiscoveryFormat::Legacy => discovery::api_group_list(&self.served()),
                    f => discovery::aggregated_apis(&self.served(), f),
                };
                Some(json_doc(&doc, format.content_type()))
            }
            ["apis", group] => discovery::api_group(&self.served(), group).map(|d| json_doc(&d, "application/json")),
            ["api", version] => {
                discovery::api_resource_list(&self.served(), "", version).map(|d| json_doc(&d, "application/json"))
            }
            ["apis", group, version] => {
                discovery::api_resource_list(&self.served(), group, version).map(|d| json_doc(&d, "application/json"))
            }
            ["openapi", "v2"] => {
                // kubectl asks for v2 as protobuf only, and falls back quietly when refused.
                if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
                    return Some(status_error(
                        StatusCode::NOT_ACCEPTABLE,
                        "NotAcceptable",
                        "the OpenAPI v2 document is served as JSON only",
                    ));
                }
                let doc =
                    self.openapi_v2.get_or_init(|| Bytes::from(openapi::v2(&self.served(), &self.crds).to_string()));
                Some(bytes_response(doc.clone(), "application/json", None))
            }
            ["openapi", "v3"] => {
                let index = self
                    .openapi_v3_index
                    .get_or_init(|| Bytes::from(openapi::v3_index(&self.served(), &self.crds).to_string()));
                Some(bytes_response(index.clone(), "application/json", None))
            }
            ["openapi", "v3", rest @ ..] => {
                let docs = self.openapi_v3.get_or_init(|| {
                    openapi::v3_documents(&self.served(), &self.crds)
                        .into_iter()
                        .map(|(path, (doc, hash))| (path, (Bytes::from(doc.to_string()), hash)))
                        .collect()
                });
                let key = rest.join("/");
                let (doc, hash) = docs.get(&key)?;
                Some(bytes_response(doc.clone(), "application/json", Some(hash)))
            }
            _ => None,
        }
    }

    fn watch(
        &self,
        t: &Target<'_>,
        q: &std::collections::HashMap<String, String>,
        headers: &http::HeaderMap,
    ) -> Response<Body> {
        let c = t.collection;
        let (labels, fields) = match Self::selectors(c, q) {
            Ok(s) => s,
            Err(e) => return e.response(),
        };
        let start = match q.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => Start::Current,
            Some(rv) => match rv.parse::<i64>() {
                Ok(rv) => Start::After(rv),
                Err(_) => {
                    return ApiError::bad_request(format!("invalid resource version: {rv:?}")).response();
                }
            },
        };
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(watch::MAX_WATCH)
            .min(watch::MAX_WATCH);
        let representation = representation(headers);
        let include = match table::IncludeObject::from_query(q.get("includeObject").map(String::as_str)) {
            Ok(i) => i,
            Err(e) => return ApiError::bad_request(e).response(),
        };
        let collection = c.clone();
        let filtering = !labels.is_empty() || !fields.is_empty();
        // Only the first table event of a watch carries the column definitions.
        let headers_sent = std::sync::atomic::AtomicBool::new(false);
        let filter = move |text: &Bytes| -> Option<Bytes> {
            if !filtering && representation == Representation::Object {
                return Some(text.clone());
            }
            let object: Value = serde_json::from_slice(text).ok()?;
            if !labels.matches(&object) || !fields.matches(&object) {
                return None;
            }
            let out = match representation {
                Representation::Object => return Some(text.clone()),
                Representation::Metadata => watch::metadata_only(&object),
                Representation::Table => {
                    let mut t = table::table(
                        &collection.served,
                        &collection.columns,
                        std::slice::from_ref(&object),
                        include,
                        now_unix(),
                        json!({"resourceVersion": object["metadata"]["resourceVersion"]}),
                    );
                    if headers_sent.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        table::strip_headers(&mut t);
                    }
                    t
                }
            };
            Some(Bytes::from(out.to_string()))
        };
        let bookmark_type = match representation {
            Representation::Object => (c.api_version(), c.kind_name().to_string()),
            Representation::Metadata => ("meta.k8s.io/v1".to_string(), "PartialObjectMetadata".to_string()),
            Representation::Table => ("meta.k8s.io/v1".to_string(), "Table".to_string()),
        };
        let truthy = |k: &str| query_flag(q, k);
        let opts = WatchOptions {
            start,
            timeout,
            bookmarks: truthy("allowWatchBookmarks"),
            // As kube-apiserver 1.36: a watch with bookmarks that starts with the current objects
            // marks their end, whether or not it asked for them by `sendInitialEvents`.
            initial_events_end: truthy("allowWatchBookmarks")
                && q.get("sendInitialEvents").is_none_or(|v| query_flag(q, "sendInitialEvents") || v.is_empty()),
            bookmark_type,
            filter: Box::new(filter),
        };
        let feed = self.watches.watch(&c.resource(), t.namespace.as_deref(), opts);
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::Stream(feed))
            .expect("a response")
    }

    /// Checks a document a client sent for this collection: its type, and that the URL's namespace
    /// and name are its own.
    fn check_document(&self, t: &Target<'_>, doc: &mut Value) -> Result<(), ApiError> {
        let c = t.collection;
        if !doc.is_object() {
            return Err(ApiError::bad_request("the body is not a JSON object"));
        }
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        if api_version.is_empty() && kind.is_empty() {
            doc["apiVersion"] = Value::String(c.api_version());
            doc["kind"] = Value::String(c.kind_name().to_string());
        } else if api_version != c.api_version() || kind != c.kind_name() {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({}) or the kind ({kind}) is not {}",
                c.api_version(),
                c.kind_name()
            )));
        }
        if !doc["metadata"].is_object() {
            doc["metadata"] = json!({});
        }
        let ns = t.namespace.as_deref().unwrap_or_default();
        if c.namespaced() {
            match doc["metadata"]["namespace"].as_str() {
                Some(d) if !d.is_empty() && d != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => doc["metadata"]["namespace"] = Value::String(ns.to_string()),
            }
        } else if let Some(m) = doc["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if let Some(name) = &t.name {
            match doc["metadata"]["name"].as_str() {
                Some(n) if n == name => {}
                None | Some("") => doc["metadata"]["name"] = Value::String(name.clone()),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({other}) does not match the name on the URL ({name})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// What a write stores: the document checked by the collection's admission rules (bootstream's
    /// kinds) and field validation, with `live` being the object it replaces.
    fn admit(
        &self,
        c: &Collection,
        live: Option<&Value>,
        doc: Value,
        ctx: &mut WriteContext,
        status: bool,
    ) -> Result<Value, ApiError> {
        if live.is_none() {
            self.check_names(c, &doc)?;
        }
        if self.keeps_unknown_fields() {
            let mut ctx = WriteContext {
                manager: String::new(),
                dry_run: ctx.dry_run,
                validation: FieldValidation::Ignore,
                warnings: Vec::new(),
            };
            let live = live.map(|l| {
                let mut l = l.clone();
                unknown_fields(c, &mut l);
                l
            });
            self.admit_pruned(c, live.as_ref(), doc.clone(), &mut ctx, status)?;
            return Ok(doc);
        }
        self.admit_pruned(c, live, doc, ctx, status)
    }

    /// A new object's name (and `generateName`, and namespace) as the API server checks them.
    fn check_names(&self, c: &Collection, doc: &Value) -> Result<(), ApiError> {
        let meta = &doc["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let rule = names::NameRule::of_kind(c.kind_name());
        let invalid = |e: String| ApiError::invalid(c, name, e);
        if let Some(prefix) = meta["generateName"].as_str().filter(|p| !p.is_empty()) {
            names::check("metadata.generateName", rule, prefix, true).map_err(invalid)?;
        }
        if !name.is_empty() {
            names::check("metadata.name", rule, name, false).map_err(invalid)?;
        }
        if c.namespaced() {
            let ns = meta["namespace"].as_str().unwrap_or_default();
            names::check("metadata.namespace", names::NameRule::Label, ns, false).map_err(invalid)?;
        }
        Ok(())
    }

    /// Refuses an object larger than the limit (413, naming both sizes): what a patch or an apply
    /// builds may be far larger than its request. Checked on what would be stored, managed fields
    /// included, by every write path (create, update, each patch, apply, status), dry runs too.
    fn check_size(&self, c: &Collection, doc: &Value) -> Result<(), ApiError> {
        let max = self.limits.max_object_bytes;
        if limits::json_len_within(doc, max).is_some() {
            return Ok(());
        }
        let size = limits::json_len(doc);
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        Err(ApiError {
            details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
            ..ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                format!(
                    "{} \"{name}\" would be {size} bytes, over the {max} bytes an object may have (serve --max-object-bytes)",
                    c.qualified()
                ),
            )
        })
    }

    fn admit_pruned(
        &self,
        c: &Collection,
        live: Option<&Value>,
        mut doc: Value,
        ctx: &mut WriteContext,
        status: bool,
    ) -> Result<Value, ApiError> {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let unknown = unknown_fields(c, &mut doc);
        if !unknown.is_empty() {
            match ctx.validation {
                FieldValidation::Strict => {
                    let listed: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
                    return Err(ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
                        c.kind_name(),
                        c.version(),
                        c.kind_name(),
                        listed.join(", ")
                    )));
                }
                FieldValidation::Warn => {
                    ctx.warnings.extend(unknown.iter().map(|f| format!("unknown field \"{f}\"")));
                }
                FieldValidation::Ignore => {}
            }
        }
        if c.kind_name() == "Secret" && c.group().is_empty() && !status {
            // As the API server defaults it (kubectl's `create secret generic` sends none).
            if doc.get("type").is_none_or(|t| t.is_null() || t == "") {
                doc["type"] = json!("Opaque");
            }
            let errors = secret_errors(&doc, live);
            if !errors.is_empty() {
                return Err(ApiError::invalid_fields(c, &name, &errors));
            }
        }
        if c.kind.is_some() && !status {
            // The CRD's structural schema, as the API server checks it before any webhook. The
            // status is the stored one here (only its subresource writes it); with validation
            // ratcheting, what an update leaves as it was is not checked again.
            let mut errors = crate::resources::crds::schema_errors(&c.resource(), &doc);
            errors.retain(|e| !e.field.starts_with("status"));
            if let Some(old) = live {
                let before = crate::resources::crds::schema_errors(&c.resource(), old);
                errors.retain(|e| !before.contains(e));
            }
            if !errors.is_empty() {
                return Err(ApiError::invalid_fields(c, &name, &errors));
            }
        }
        let Some(kind) = c.kind else {
            if name.is_empty() {
                return Err(ApiError::invalid(
                    c,
                    &name,
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            if c.kind_name() == "Namespace" && !status {
                // As the API server's namespace strategy: a new namespace is Active (`kubectl get ns`
                // shows it, clients read `status.phase`), and every namespace is labelled with its name.
                if live.is_none() {
                    doc["status"] = json!({"phase": "Active"});
                }
                doc["metadata"]["labels"]["kubernetes.io/metadata.name"] = Value::String(name);
            }
            return Ok(doc);
        };
        // The admission rules a hub's webhook applies too (`resources::admission`).
        use crate::resources::admission::{self, Operation};
        let operation = if live.is_some() { Operation::Update } else { Operation::Create };
        let candidate = if status { doc.clone() } else { strip_server_fields(&doc) };
        let request = admission::Request {
            operation,
            kind,
            subresource: if status { "status" } else { "" },
            old: live,
            new: Some(&candidate),
        };
        let allowed = admission::decide(&request).map_err(|denied| {
            let code = StatusCode::from_u16(denied.code).unwrap_or(StatusCode::BAD_REQUEST);
            match code {
                // The document's own faults: the API server's "is invalid".
                StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                    ApiError::invalid(c, &name, denied.message)
                }
                _ => ApiError {
                    details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
                    ..ApiError::new(code, denied.reason, denied.message)
                },
            }
        })?;
        ctx.warnings.extend(allowed.warnings);
        if status {
            match allowed.normalized {
                Some(s) => doc["status"] = s,
                None => {
                    if let Some(o) = doc.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            return Ok(doc);
        }
        let mut validated = allowed.normalized.unwrap_or(candidate);
        validated["metadata"] = doc["metadata"].clone();
        if kind == Kind::Secret
            && let Some(o) = validated["metadata"].as_object_mut()
        {
            o.remove("generation");
        }
        if let Some(s) = doc.get("status") {
            validated["status"] = s.clone();
        }
        Ok(validated)
    }

    async fn create(
        &self,
        t: &Target<'_>,
        body: &Bytes,
        ctx: &mut WriteContext,
    ) -> Result<(StatusCode, Value), ApiError> {
        let c = t.collection;
        if t.name.is_some() {
            return Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "POST is for collections; PUT replaces an object",
            ));
        }
        let Some(ns) = t.namespace.clone() else {
            return Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "create in a namespace: /namespaces/NS/...",
            ));
        };
        let mut doc = parse_json(body).await?;
        self.check_document(
            &Target { collection: c, namespace: Some(ns.clone()), name: None, status: false },
            &mut doc,
        )?;
        if doc["metadata"]["name"].as_str().is_none_or(str::is_empty)
            && let Some(prefix) = doc["metadata"]["generateName"].as_str()
        {
            let suffix: String =
                (0..5).map(|_| fastrand::choice(b"bcdfghjklmnpqrstvwxz2456789").map_or('x', |b| *b as char)).collect();
            doc["metadata"]["name"] = Value::String(format!("{prefix}{suffix}"));
        }
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if let Some(o) = doc.as_object_mut() {
            o.remove("status");
        }
        let mut doc = self.admit(c, None, doc, ctx, false)?;
        record_manager(c, &mut doc, None, ctx, false);
        self.check_size(c, &doc)?;
        if ctx.dry_run {
            // A dry run answers as the write would: a name that is taken is refused.
            if let Ok(Some(_)) = self.store.get_raw(&c.resource(), &ns, &name) {
                return Err(ApiError::from_store(
                    c,
                    &name,
                    StoreError::AlreadyExists { resource: c.resource(), name: name.clone() },
                ));
            }
            let meta = &mut doc["metadata"];
            meta["uid"] = Value::String(uuid::Uuid::new_v4().to_string());
            meta["creationTimestamp"] = Value::String(crate::resources::now_seconds().to_string());
            if c.has_generation {
                meta["generation"] = Value::from(1);
            }
            return Ok((StatusCode::CREATED, doc));
        }
        let stored = self.store_new(c, &ns, doc).await.map_err(|e| ApiError::from_store(c, &name, e))?;
        Ok((StatusCode::CREATED, self.after_write(c, &ns, &name, stored).await))
    }

    /// Stores a new object, with what the hooks give it (a finalizer, a reserved uid, work beside
    /// the write).
    async fn store_new(&self, c: &Collection, ns: &str, mut doc: Value) -> Result<Value, StoreError> {
        let creating = match c.kind {
            Some(kind) => self.hooks.creating(kind, &doc),
            None => Creating::default(),
        };
        if let Some(f) = creating.finalizer {
            add_finalizer(&mut doc, f);
        }
        let resource = c.resource();
        let write = self.store.create_raw_with_uid(&resource, ns, doc, c.has_generation, creating.uid.clone());
        let written = match creating.beside {
            Some(beside) => tokio::join!(write, beside).0,
            None => write.await,
        };
        if let (Err(_), Some(uid)) = (&written, &creating.uid) {
            self.hooks.not_created(uid);
        }
        written
    }

    /// The answer to a write: the object once the hooks ran (an InfraEnv with its status).
    async fn after_write(&self, c: &Collection, ns: &str, name: &str, stored: Value) -> Value {
        if c.kind_name() == "Namespace" && stored.get("status").is_none() {
            // A namespace is Active from its creation (none is ever Terminating here: see the module
            // docs), whoever made it.
            let active = Some(json!({"phase": "Active"}));
            if let Ok(with_status) = self.store.replace_status_raw(&c.resource(), ns, name, active, None).await {
                return with_status;
            }
        }
        if let Some(kind) = c.kind {
            self.hooks.written(kind, ns, name).await;
            if let Ok(Some(current)) = self.store.get_raw(&c.resource(), ns, name) {
                return current;
            }
        }
        stored
    }

    async fn update(
        &self,
        t: &Target<'_>,
        body: &Bytes,
        ctx: &mut WriteContext,
    ) -> Result<(StatusCode, Value), ApiError> {
        let c = t.collection;
        let mut doc = parse_json(body).await?;
        self.check_document(t, &mut doc)?;
        let name = t.name.clone().unwrap_or_default();
        let Some(want_rv) = doc["metadata"]["resourceVersion"].as_str().map(str::to_string) else {
            return Err(ApiError::invalid(
                c,
                &name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            ));
        };
        let live = self.get(t)?;
        self.write_over(t, &live, doc, Some(want_rv), ctx).await.map(|o| (StatusCode::OK, o))
    }

    /// Writes `doc` over `live` (the object or, with `t.status`, its status), if `want_rv` is still
    /// current (any version when None).
    async fn write_over(
        &self,
        t: &Target<'_>,
        live: &Value,
        mut doc: Value,
        want_rv: Option<String>,
        ctx: &mut WriteContext,
    ) -> Result<Value, ApiError> {
        let c = t.collection;
        let name = t.name.clone().unwrap_or_default();
        let ns = t.namespace.clone().unwrap_or_default();
        if t.status {
            // Only the status changes through the status subresource.
            let status = doc.get("status").cloned();
            doc = live.clone();
            match status {
                Some(s) => doc["status"] = s,
                None => {
                    if let Some(o) = doc.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        } else {
            // Only the status subresource changes the status.
            match live.get("status") {
                Some(s) => doc["status"] = s.clone(),
                None => {
                    if let Some(o) = doc.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
        }
        let mut doc = self.admit(c, Some(live), doc, ctx, t.status)?;
        record_manager(c, &mut doc, Some(live), ctx, t.status);
        self.check_size(c, &doc)?;
        if ctx.dry_run {
            return Ok(doc);
        }
        let stored = if t.status {
            self.store.replace_status_raw(&c.resource(), &ns, &name, doc.get("status").cloned(), want_rv).await
        } else {
            doc["metadata"]["resourceVersion"] = want_rv.map_or(Value::Null, Value::String);
            self.store.replace_raw(&c.resource(), &ns, doc).await
        }
        .map_err(|e| ApiError::from_store(c, &name, e))?;
        Ok(self.after_write(c, &ns, &name, stored).await)
    }

    async fn patch(
        &self,
        t: &Target<'_>,
        req: &Request<Bytes>,
        q: &std::collections::HashMap<String, String>,
        ctx: &mut WriteContext,
    ) -> Result<(StatusCode, Value), ApiError> {
        let c = t.collection;
        let name = t.name.clone().unwrap_or_default();
        let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let patch_type = content_type.split(';').next().unwrap_or("").trim();
        if patch_type == "application/apply-patch+yaml" {
            return self.server_side_apply(t, req.body(), q, ctx).await;
        }
        let strategic = patch_type == "application/strategic-merge-patch+json";
        let json_patch = patch_type == "application/json-patch+json";
        match patch_type {
            "application/merge-patch+json" | "application/json-patch+json" => {}
            "application/strategic-merge-patch+json" if c.kind.is_none() || c.kind == Some(Kind::Secret) => {}
            "application/strategic-merge-patch+json" => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                ));
            }
            other => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format ({other}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
                    ),
                ));
            }
        }
        let body = req.body().clone();
        let body_bytes = body.len();
        let patch: Arc<Value> = Arc::new(
            limits::cpu_bound(body.len(), move || serde_json::from_slice(&body))
                .await
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?,
        );
        // A merge patch is an object (anything else would replace the whole object), as the API
        // server decodes it.
        if !patch.is_object() && patch_type == "application/merge-patch+json" {
            return Err(ApiError::bad_request(format!(
                "error decoding patch: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                patch::go_type_name(&patch)
            )));
        }
        // A patch that names a resourceVersion is a precondition; without one it applies to
        // whatever is current (retried when the object moves meanwhile).
        let names_version = match patch.as_ref() {
            Value::Array(ops) => ops.iter().any(|op| op["path"] == "/metadata/resourceVersion" || op["path"] == ""),
            other => other.pointer("/metadata/resourceVersion").is_some_and(|v| !v.is_null()),
        };
        let max_bytes = self.limits.max_object_bytes;
        let kind_name = c.kind_name().to_string();
        for _ in 0..8 {
            let live = self.get(t)?;
            let live_rv = live["metadata"]["resourceVersion"].as_str().map(str::to_string);
            let (patch, kind_name, base) = (patch.clone(), kind_name.clone(), live.clone());
            let patched = limits::cpu_bound(body_bytes, move || {
                let mut doc = base;
                if strategic {
                    patch::strategic_merge_patch(&mut doc, &patch, &kind_name)?;
                } else if json_patch {
                    patch::json_patch(&mut doc, &patch, max_bytes)?;
                } else {
                    crate::store::json::merge_patch(&mut doc, &patch);
                }
                Ok(doc)
            })
            .await;
            let mut doc = patched.map_err(patch_error)?;
            self.check_patched(t, &mut doc)?;
            // The patched object's version is the one it applies to: a patch that changed it
            // names another version than the current one.
            let want = match (doc["metadata"]["resourceVersion"].as_str(), &live_rv) {
                (None, _) => {
                    return Err(ApiError::invalid(
                        c,
                        &name,
                        "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                    ));
                }
                (Some(p), Some(l)) if p != l => {
                    return Err(ApiError::from_store(c, &name, StoreError::Conflict(String::new())));
                }
                _ => live_rv.clone(),
            };
            match self.write_over(t, &live, doc, want, ctx).await {
                Err(e) if e.reason == "Conflict" && !names_version && !ctx.dry_run => continue,
                other => return other.map(|o| (StatusCode::OK, o)),
            }
        }
        Err(ApiError::from_store(c, &name, StoreError::Conflict(String::new())))
    }

    /// What a patch made must still be this object: a JSON object, of this kind, with the name
    /// and namespace of the URL (as the API server checks a patched object).
    fn check_patched(&self, t: &Target<'_>, doc: &mut Value) -> Result<(), ApiError> {
        let c = t.collection;
        let name = t.name.clone().unwrap_or_default();
        if !doc.is_object() {
            return Err(ApiError::invalid(
                c,
                &name,
                format!(
                    "patch: Invalid value: the patched object is a JSON {}, not an object",
                    patch::go_type_name(doc)
                ),
            ));
        }
        let patched_name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        if patched_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({patched_name}) does not match the name on the URL ({name})"
            )));
        }
        self.check_document(t, doc)
    }

    async fn server_side_apply(
        &self,
        t: &Target<'_>,
        body: &Bytes,
        q: &std::collections::HashMap<String, String>,
        ctx: &mut WriteContext,
    ) -> Result<(StatusCode, Value), ApiError> {
        let c = t.collection;
        let name = t.name.clone().unwrap_or_default();
        if q.get("fieldManager").is_none_or(|m| m.is_empty()) {
            return Err(ApiError::bad_request(
                "PATCH, application/apply-patch+yaml requests require fieldManager to be set",
            ));
        }
        let force = query_flag(q, "force");
        let body = body.clone();
        let body_bytes = body.len();
        let mut config: Value = limits::cpu_bound(body_bytes, move || decode_applied(&body)).await?;
        self.check_document(t, &mut config)?;
        let config = Arc::new(config);
        for _ in 0..8 {
            let live = match self.get(t) {
                Ok(l) => Some(l),
                Err(e) if e.code == StatusCode::NOT_FOUND => None,
                Err(e) => return Err(e),
            };
            let now = crate::resources::now_seconds().to_string();
            let api_version = c.api_version();
            let applied = {
                let (manager, kind, status, has_status) =
                    (ctx.manager.clone(), c.kind_name().to_string(), t.status, c.has_status());
                let (live, config) = (live.clone(), config.clone());
                limits::cpu_bound(body_bytes, move || {
                    let mut request = apply::Request::new(&manager, &api_version, &kind, &now);
                    request.force = force;
                    request.subresource = status.then_some("status");
                    request.status_subresource = has_status;
                    apply::apply(live.as_ref(), &config, &request)
                })
                .await
            };
            let doc = match applied {
                Ok(doc) => doc,
                Err(apply::ApplyError::Conflicts(conflicts)) => {
                    let status = conflicts.status();
                    return Err(ApiError {
                        details: Some(status["details"].clone()),
                        ..ApiError::new(StatusCode::CONFLICT, "Conflict", conflicts.message())
                    });
                }
                Err(e) => {
                    let code = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
                    let reason = match code.as_u16() {
                        400 => "BadRequest",
                        422 => "Invalid",
                        _ => "InternalError",
                    };
                    return Err(ApiError::new(code, reason, e.to_string()));
                }
            };
            let Some(live) = live else {
                if t.status {
                    return Err(ApiError::not_found(c, &name));
                }
                // The apply creates the object (managed fields already recorded by the apply).
                let ns = t.namespace.clone().unwrap_or_default();
                let mut doc = self.admit(c, None, doc, ctx, false)?;
                self.check_size(c, &doc)?;
                if ctx.dry_run {
                    doc["metadata"]["uid"] = Value::String(uuid::Uuid::new_v4().to_string());
                    return Ok((StatusCode::CREATED, doc));
                }
                match self.store_new(c, &ns, doc).await {
                    Err(StoreError::AlreadyExists { .. }) => continue,
                    Err(e) => return Err(ApiError::from_store(c, &name, e)),
                    Ok(stored) => return Ok((StatusCode::CREATED, self.after_write(c, &ns, &name, stored).await)),
                }
            };
            let live_rv = live["metadata"]["resourceVersion"].as_str().map(str::to_string);
            // The apply already recorded the managers: no Update entry on top.
            let manager = std::mem::take(&mut ctx.manager);
            let written = self.write_over(t, &live, doc, live_rv, ctx).await;
            ctx.manager = manager;
            match written {
                Err(e) if e.reason == "Conflict" && e.details.as_ref().is_none_or(|d| d.get("causes").is_none()) => {
                    continue;
                }
                other => return other.map(|o| (StatusCode::OK, o)),
            }
        }
        Err(ApiError::from_store(c, &name, StoreError::Conflict(String::new())))
    }

    async fn delete(
        &self,
        t: &Target<'_>,
        body: &Bytes,
        ctx: &mut WriteContext,
    ) -> Result<(StatusCode, Value), ApiError> {
        let c = t.collection;
        let name = t.name.clone().unwrap_or_default();
        let ns = t.namespace.clone().unwrap_or_default();
        let options: Value = if body.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the DeleteOptions are not JSON: {e}")))?
        };
        if options["dryRun"].as_array().is_some_and(|a| a.iter().any(|v| v == "All")) {
            ctx.dry_run = true;
        }
        let live = self.get(t)?;
        if let Some(uid) = options["preconditions"]["uid"].as_str()
            && live["metadata"]["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    live["metadata"]["uid"].as_str().unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = options["preconditions"]["resourceVersion"].as_str()
            && live["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::from_store(c, &name, StoreError::Conflict(String::new())));
        }
        if ctx.dry_run {
            return Ok((StatusCode::OK, live));
        }
        let deletion =
            self.store.delete_raw(&c.resource(), &ns, &name).await.map_err(|e| ApiError::from_store(c, &name, e))?;
        if let Some(kind) = c.kind {
            self.hooks.written(kind, &ns, &name).await;
        }
        match (deletion, self.store.get_raw(&c.resource(), &ns, &name)) {
            // Held by finalizers: the object, marked (200, as the API server answers unless the
            // client asked for `orphanDependents: false`).
            (Deletion::Pending, Ok(Some(current))) => Ok((StatusCode::OK, current)),
            // Gone at once: a Status saying so, as the API server answers for every kind served here.
            _ => {
                let mut details = json!({"name": name, "kind": c.plural(), "uid": live["metadata"]["uid"]});
                if !c.group().is_empty() {
                    details["group"] = json!(c.group());
                }
                Ok((
                    StatusCode::OK,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
                ))
            }
        }
    }
}

#[cfg(any(test, feature = "testkit"))]
fn clone_head(req: &Request<Bytes>) -> (http::request::Parts, ()) {
    let mut b = Request::builder().method(req.method().clone()).uri(req.uri().clone()).version(req.version());
    if let Some(h) = b.headers_mut() {
        *h = req.headers().clone();
    }
    b.body(()).expect("a copy of a valid head").into_parts()
}

/// A boolean query parameter, read as the API server reads one (apimachinery's
/// `Convert_Slice_string_To_bool`): present and neither "0" nor "false" in any case is true. The
/// Python client sends `watch=True`.
fn query_flag(q: &std::collections::HashMap<String, String>, key: &str) -> bool {
    q.get(key).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

fn verb_of(method: &Method, t: &Target<'_>, q: &std::collections::HashMap<String, String>) -> Verb {
    let watching = query_flag(q, "watch");
    match (method.as_str(), t.name.is_some()) {
        ("GET", false) if watching => Verb::Watch,
        ("GET", false) => Verb::List,
        ("GET", true) => Verb::Get,
        ("POST", false) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", false) => Verb::DeleteCollection,
        ("DELETE", true) => Verb::Delete,
        _ => Verb::Other,
    }
}

fn write_context(
    req: &Request<Bytes>,
    q: &std::collections::HashMap<String, String>,
) -> Result<WriteContext, ApiError> {
    let validation = match q.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
            )));
        }
    };
    let dry_run = match q.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            )));
        }
    };
    // The manager a write is recorded under: the one named, or the client's name from its User-Agent.
    let manager = match q.get("fieldManager").filter(|m| !m.is_empty()) {
        Some(m) => {
            if m.len() > 128 || m.chars().any(|c| c.is_control()) {
                return Err(ApiError::bad_request(
                    "fieldManager: Invalid value: must be at most 128 printable characters",
                ));
            }
            m.clone()
        }
        None => {
            let agent = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("unknown");
            agent.split('/').next().unwrap_or("unknown").chars().filter(|c| !c.is_control()).take(128).collect()
        }
    };
    Ok(WriteContext { manager, dry_run, validation, warnings: Vec::new() })
}

/// What the API server's Secret validation refuses: a changed type on update, the keys the type
/// needs; in its order, with its messages.
fn secret_errors(doc: &Value, live: Option<&Value>) -> Vec<crate::resources::crds::SchemaError> {
    use crate::resources::crds::SchemaError;
    let type_ = doc["type"].as_str().unwrap_or_default();
    let has = |key: &str| doc["data"].get(key).is_some() || doc["stringData"].get(key).is_some();
    let required =
        |field: String| SchemaError { field, reason: "FieldValueRequired", message: "Required value".into() };
    let mut errors = Vec::new();
    if let Some(old) = live.and_then(|l| l["type"].as_str())
        && old != type_
    {
        errors.push(SchemaError {
            field: "type".into(),
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {type_:?}: field is immutable"),
        });
    }
    let needed: &[&str] = match type_ {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        // Either may be empty, but one must be there.
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => &["username", "password"],
        _ => &[],
    };
    errors.extend(needed.iter().filter(|k| !has(k)).map(|k| required(format!("data[{k}]"))));
    if type_ == "kubernetes.io/service-account-token"
        && doc["metadata"]["annotations"]["kubernetes.io/service-account.name"].as_str().is_none_or(str::is_empty)
    {
        errors.push(required("metadata.annotations[kubernetes.io/service-account.name]".into()));
    }
    errors
}

/// Drops the empty lists and maps of `metadata`, as the API server's ObjectMeta (omitempty) does:
/// a finalizer patched away leaves no `finalizers: []`, and no manager keeps owning the list.
fn omit_empty_metadata(doc: &mut Value) {
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["labels", "annotations", "finalizers", "ownerReferences"] {
            let empty = match meta.get(key) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                meta.remove(key);
            }
        }
    }
}

/// Records the write in `managedFields` under the context's manager (an Update).
fn record_manager(c: &Collection, doc: &mut Value, live: Option<&Value>, ctx: &WriteContext, status: bool) {
    omit_empty_metadata(doc);
    if ctx.manager.is_empty() {
        return;
    }
    let api_version = c.api_version();
    let now = crate::resources::now_seconds().to_string();
    let mut request = apply::Request::new(&ctx.manager, &api_version, c.kind_name(), &now);
    request.subresource = status.then_some("status");
    request.status_subresource = c.has_status();
    apply::record_update(live, doc, &request);
}

fn patch_error(e: patch::PatchError) -> ApiError {
    let code = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    let reason = match code.as_u16() {
        400 => "BadRequest",
        413 => "RequestEntityTooLarge",
        _ => "Invalid",
    };
    ApiError::new(code, reason, e.message().to_string())
}

/// The version `/version` reports: kubectl of this minor version talks to it without a skew warning.
const GIT_VERSION: &str = "v1.32.0-bootstream";

fn now_unix() -> i64 {
    crate::resources::now_seconds().as_second()
}

fn bytes_response(body: Bytes, content_type: &'static str, etag: Option<&str>) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, body.len());
    if let Some(etag) = etag {
        b = b.header(header::ETAG, format!("\"{etag}\"")).header(header::CACHE_CONTROL, "public, immutable");
    }
    b.body(Body::Bytes(body)).expect("valid response")
}

/// A server-side apply's configuration: JSON (what kubectl sends) or YAML, whose nesting is
/// checked by a scan before it is parsed (YAML parsing costs time quadratic in nesting).
fn decode_applied(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the applied configuration is not UTF-8"))?;
    limits::check_yaml_depth(text, limits::MAX_YAML_DEPTH)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    use serde::Deserialize;
    let de = yaml_serde::Deserializer::from_str(text);
    Value::deserialize(de).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// A JSON body, parsed off the async workers ([`limits::cpu_bound`]).
async fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    let body = body.clone();
    limits::cpu_bound(body.len(), move || serde_json::from_slice(&body))
        .await
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON object: {e}")))
}

fn add_finalizer(doc: &mut Value, finalizer: &str) {
    let list = &mut doc["metadata"]["finalizers"];
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Some(list) = list.as_array_mut()
        && !list.iter().any(|f| f.as_str() == Some(finalizer))
    {
        list.push(Value::String(finalizer.to_string()));
    }
}

/// A stored document as a client would send it back: without the metadata the server owns, which
/// document validation does not take from clients.
fn strip_server_fields(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(meta) = d["metadata"].as_object_mut() {
        for key in ["uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp", "managedFields"] {
            meta.remove(key);
        }
    }
    if let Some(o) = d.as_object_mut() {
        o.remove("status");
    }
    d
}

/// Removes from `doc` the fields its kind does not have and returns their paths (`spec.foo`), as the
/// API server prunes them (and reports them, with field validation).
fn unknown_fields(c: &Collection, doc: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    use crate::resources::{METADATA_FIELDS as METADATA, SECRET_TOP_LEVEL_FIELDS as SECRET};
    if let Some(meta) = doc["metadata"].as_object_mut() {
        let extra: Vec<String> = meta.keys().filter(|k| !METADATA.contains(&k.as_str())).cloned().collect();
        for k in extra {
            meta.remove(&k);
            unknown.push(format!("metadata.{k}"));
        }
    }
    match c.kind {
        Some(Kind::Secret) => {
            if let Some(o) = doc.as_object_mut() {
                let extra: Vec<String> = o.keys().filter(|k| !SECRET.contains(&k.as_str())).cloned().collect();
                for k in extra {
                    o.remove(&k);
                    unknown.push(k);
                }
            }
        }
        Some(_) => unknown.extend(crate::resources::crds::prune_unknown_fields_reporting(&c.resource(), doc)),
        None => {}
    }
    unknown
}

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"ns": ns, "name": name}).to_string())
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let invalid = || ApiError::bad_request("continue key is not valid: list again without it");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    match (v["ns"].as_str(), v["name"].as_str()) {
        (Some(ns), Some(name)) => Ok((ns.to_string(), name.to_string())),
        _ => Err(invalid()),
    }
}

/// A list of stored objects: the stored texts themselves between the list's punctuation.
fn list_response(c: &Collection, items: &[Bytes], list_meta: &Value) -> Response<Body> {
    let head = format!(
        r#"{{"apiVersion":"{}","kind":"{}List","metadata":{},"items":["#,
        c.api_version(),
        c.kind_name(),
        list_meta
    );
    let comma = Bytes::from_static(b",");
    let mut chunks = Vec::with_capacity(items.len() * 2 + 1);
    chunks.push(Bytes::from(head));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            chunks.push(comma.clone());
        }
        chunks.push(item.clone());
    }
    chunks.push(Bytes::from_static(b"]}\n"));
    let body = Body::Chunks(chunks.into());
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len())
        .body(body)
        .expect("valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> Arc<KubeApi> {
        KubeApi::new(SqliteStore::open_in_memory().unwrap(), Arc::new(NoHooks))
    }

    async fn call(api: &KubeApi, method: &str, uri: &str, content_type: &str, body: &str) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::USER_AGENT, "kubectl/v1.32.4 (linux/amd64)")
            .body(Bytes::from(body.to_string()))
            .unwrap();
        let resp = api.handle(&req).await;
        let status = resp.status();
        let body = match resp.body() {
            Body::Bytes(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
            Body::Chunks(c) => serde_json::from_slice(&c.concat()).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        (status, body)
    }

    const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
    const IES: &str = "/apis/agent-install.openshift.io/v1beta1/namespaces/ns/infraenvs";

    fn secret(name: &str, env: &str) -> String {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"env": env}},
               "stringData": {"k": "v"}})
        .to_string()
    }

    fn infraenv(extra: Value) -> String {
        let mut doc = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
            "metadata": {"name": "ie"}, "spec": {"pullSecretRef": {"name": "ps"}}});
        crate::store::json::merge_patch(&mut doc, &extra);
        doc.to_string()
    }

    #[tokio::test]
    async fn lists_take_selectors_and_come_in_pages() {
        let api = api();
        for (i, env) in ["prod", "dev", "prod", "prod", "dev"].iter().enumerate() {
            let (code, _) = call(&api, "POST", SECRETS, "application/json", &secret(&format!("s{i}"), env)).await;
            assert_eq!(code, StatusCode::CREATED);
        }
        let (_, list) = call(&api, "GET", &format!("{SECRETS}?labelSelector=env%3Dprod"), "", "").await;
        let names: Vec<&str> =
            list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["s0", "s2", "s3"]);
        let (_, one) = call(&api, "GET", &format!("{SECRETS}?fieldSelector=metadata.name%3Ds4"), "", "").await;
        assert_eq!(one["items"].as_array().unwrap().len(), 1);
        let (code, refused) = call(&api, "GET", &format!("{SECRETS}?fieldSelector=spec.x%3D1"), "", "").await;
        assert_eq!(
            (code, refused["message"].as_str()),
            (StatusCode::BAD_REQUEST, Some("field label not supported: spec.x"))
        );
        // Pages of two, each continuing after the last name of the one before.
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let uri = format!("{SECRETS}?limit=2&continue={token}");
            let (_, page) = call(&api, "GET", &uri, "", "").await;
            let items = page["items"].as_array().unwrap();
            assert!(items.len() <= 2);
            seen.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
            match page["metadata"]["continue"].as_str() {
                Some(t) if !t.is_empty() => token = t.to_string(),
                _ => break,
            }
        }
        assert_eq!(seen, ["s0", "s1", "s2", "s3", "s4"]);
        let (code, _) = call(&api, "GET", &format!("{SECRETS}?limit=2&continue=garbage!"), "", "").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn writes_are_validated_and_dry_runs_store_nothing() {
        let api = api();
        // Strict: an unknown field is refused, naming it; Warn (the default) drops it with a warning.
        let doc = infraenv(json!({"spec": {"bogus": 1}}));
        let (code, err) = call(&api, "POST", &format!("{IES}?fieldValidation=Strict"), "application/json", &doc).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(
            err["message"].as_str().unwrap().ends_with("strict decoding error: unknown field \"spec.bogus\""),
            "{err}"
        );
        let (code, _) =
            call(&api, "POST", &format!("{IES}?dryRun=All"), "application/json", &infraenv(json!({}))).await;
        assert_eq!(code, StatusCode::CREATED);
        assert!(api.store().get_raw("infraenvs.agent-install.openshift.io", "ns", "ie").unwrap().is_none());
        let (code, stored) = call(&api, "POST", IES, "application/json", &doc).await;
        assert_eq!(code, StatusCode::CREATED);
        assert!(stored["spec"].get("bogus").is_none());
        // The admission rules: clusterRef is immutable.
        let mut update = stored.clone();
        update["spec"]["clusterRef"] = json!({"name": "c", "namespace": "ns"});
        let (code, err) = call(&api, "PUT", &format!("{IES}/ie"), "application/json", &update.to_string()).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err["message"].as_str().unwrap().contains("Spec.ClusterRef which is immutable"), "{err}");
        // An update must name the version it replaces.
        let mut unversioned = stored.clone();
        unversioned["metadata"].as_object_mut().unwrap().remove("resourceVersion");
        let (code, _) = call(&api, "PUT", &format!("{IES}/ie"), "application/json", &unversioned.to_string()).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[tokio::test]
    async fn patches_of_every_type_and_their_refusals() {
        let api = api();
        call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
        let (code, patched) = call(
            &api,
            "PATCH",
            &format!("{IES}/ie"),
            "application/json-patch+json",
            r#"[{"op":"add","path":"/spec/sshAuthorizedKey","value":"ssh-ed25519 AAAA"}]"#,
        )
        .await;
        assert_eq!((code, patched["spec"]["sshAuthorizedKey"].as_str()), (StatusCode::OK, Some("ssh-ed25519 AAAA")));
        let (code, _) = call(
            &api,
            "PATCH",
            &format!("{IES}/ie"),
            "application/json-patch+json",
            r#"[{"op":"test","path":"/spec/sshAuthorizedKey","value":"other"}]"#,
        )
        .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        // Custom resources take no strategic merge patch, as on a real API server.
        let (code, _) = call(&api, "PATCH", &format!("{IES}/ie"), "application/strategic-merge-patch+json", "{}").await;
        assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        // A patch naming an old version is refused; the managers are recorded.
        let (code, _) = call(
            &api,
            "PATCH",
            &format!("{IES}/ie"),
            "application/merge-patch+json",
            r#"{"metadata":{"resourceVersion":"1","labels":{"a":"b"}}}"#,
        )
        .await;
        assert_eq!(code, StatusCode::CONFLICT);
        let (_, ie) = call(&api, "GET", &format!("{IES}/ie"), "", "").await;
        let managers: Vec<&str> = ie["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["kubectl"]);
    }

    #[tokio::test]
    async fn server_side_apply_owns_fields_and_reports_conflicts() {
        let api = api();
        let applied = "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: ie}\n\
                       spec:\n  pullSecretRef: {name: ps}\n  sshAuthorizedKey: one\n";
        let uri = |manager: &str, force: bool| format!("{IES}/ie?fieldManager={manager}&force={force}");
        let (code, _) = call(&api, "PATCH", &uri("alice", false), "application/apply-patch+yaml", applied).await;
        assert_eq!(code, StatusCode::CREATED);
        let other = applied.replace("one", "two");
        let (code, err) = call(&api, "PATCH", &uri("bob", false), "application/apply-patch+yaml", &other).await;
        assert_eq!(code, StatusCode::CONFLICT);
        assert_eq!(
            err["message"],
            // An Apply manager is named without a version (an Update one with it, as upstream).
            "Apply failed with 1 conflict: conflict with \"alice\": .spec.sshAuthorizedKey"
        );
        assert_eq!(err["details"]["causes"][0]["field"], ".spec.sshAuthorizedKey");
        let (code, taken) = call(&api, "PATCH", &uri("bob", true), "application/apply-patch+yaml", &other).await;
        assert_eq!((code, taken["spec"]["sshAuthorizedKey"].as_str()), (StatusCode::OK, Some("two")));
        let (code, _) = call(&api, "PATCH", &format!("{IES}/ie"), "application/apply-patch+yaml", applied).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "an apply needs a field manager");
    }

    #[tokio::test]
    async fn kubectl_protobuf_bodies_and_deletes() {
        let api = api();
        let body =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kubectl-protobuf/namespace.pb")).unwrap();
        let req = Request::builder()
            .method("POST")
            .uri("/api/v1/namespaces")
            .header(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")
            .body(Bytes::from(body))
            .unwrap();
        let resp = api.handle(&req).await;
        assert_eq!(resp.status(), StatusCode::CREATED);
        let ns = api.store().get_raw("namespaces", "", "demo").unwrap().expect("the namespace");
        assert_eq!(ns["status"]["phase"], "Active");
        // A deletion held by a finalizer is 200 with the marked object; then gone, 404.
        let doc = infraenv(json!({"metadata": {"finalizers": ["x/y"]}}));
        call(&api, "POST", IES, "application/json", &doc).await;
        let (code, held) = call(&api, "DELETE", &format!("{IES}/ie"), "", "").await;
        assert_eq!(code, StatusCode::OK);
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        call(
            &api,
            "PATCH",
            &format!("{IES}/ie"),
            "application/merge-patch+json",
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
        let (code, gone) = call(&api, "GET", &format!("{IES}/ie"), "", "").await;
        assert_eq!((code, gone["reason"].as_str()), (StatusCode::NOT_FOUND, Some("NotFound")));
    }
    const EVENTS: &str = "/api/v1/namespaces/ns/events";

    fn event(name: &str, note: &str) -> String {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
               "involvedObject": {"name": "x", "namespace": "ns"}, "note": note})
        .to_string()
    }

    #[tokio::test]
    async fn no_write_stores_or_answers_an_object_over_the_limit() {
        let api = KubeApi::with_limits(
            SqliteStore::open_in_memory().unwrap(),
            Arc::new(NoHooks),
            limits::Limits { max_object_bytes: 64 << 10 },
        );
        let (code, _) = call(&api, "POST", EVENTS, "application/json", &event("e", &"x".repeat(1000))).await;
        assert_eq!(code, StatusCode::CREATED);
        // 18 copies of a value into itself: 280 MB on a 1 KB object before (with dryRun, in the
        // answer); now refused while it runs, whatever else the request says.
        let copies: Vec<Value> = (0..18).map(|_| json!({"op": "copy", "from": "/note", "path": "/note2"})).collect();
        let mut doubling = vec![json!({"op": "add", "path": "/note2", "value": []})];
        doubling.extend((0..18).map(|_| json!({"op": "copy", "from": "/note2", "path": "/note2/-"})));
        doubling[1] = json!({"op": "copy", "from": "/note", "path": "/note2/-"});
        for query in ["?dryRun=All", ""] {
            let uri = format!("{EVENTS}/e{query}");
            let (code, err) =
                call(&api, "PATCH", &uri, "application/json-patch+json", &Value::Array(doubling.clone()).to_string())
                    .await;
            assert_eq!((code, err["reason"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("RequestEntityTooLarge")));
        }
        let (code, _) = call(
            &api,
            "PATCH",
            &format!("{EVENTS}/e"),
            "application/json-patch+json",
            &Value::Array(copies).to_string(),
        )
        .await;
        assert_eq!(code, StatusCode::OK, "copies that fit are fine");
        // Every write path checks the object it would store, naming both sizes.
        let big = "y".repeat(70 << 10);
        let (code, err) = call(&api, "POST", EVENTS, "application/json", &event("f", &big)).await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        let message = err["message"].as_str().unwrap();
        assert!(message.contains("over the 65536 bytes an object may have"), "{message}");
        let merge = json!({"note": big}).to_string();
        for (ct, body) in [
            ("application/merge-patch+json", merge.clone()),
            ("application/strategic-merge-patch+json", merge.clone()),
            ("application/json-patch+json", json!([{"op": "replace", "path": "/note", "value": big}]).to_string()),
        ] {
            let (code, _) = call(&api, "PATCH", &format!("{EVENTS}/e"), ct, &body).await;
            assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{ct}");
        }
        let apply = format!("apiVersion: v1\nkind: Event\nmetadata: {{name: e}}\nnote: {big}\n");
        let (code, _) = call(
            &api,
            "PATCH",
            &format!("{EVENTS}/e?fieldManager=m&force=true"),
            "application/apply-patch+yaml",
            &apply,
        )
        .await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        let (_, live) = call(&api, "GET", &format!("{EVENTS}/e"), "", "").await;
        let mut update = live.clone();
        update["note"] = json!(big);
        let (code, _) = call(&api, "PUT", &format!("{EVENTS}/e"), "application/json", &update.to_string()).await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        // The status subresource too.
        call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
        let status = json!({"status": {"debugInfo": {"eventsURL": big}}}).to_string();
        let (code, _) = call(&api, "PATCH", &format!("{IES}/ie/status"), "application/merge-patch+json", &status).await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
        let (_, unchanged) = call(&api, "GET", &format!("{EVENTS}/e"), "", "").await;
        assert_eq!(unchanged["metadata"]["resourceVersion"], live["metadata"]["resourceVersion"]);
    }

    #[tokio::test]
    async fn a_patch_must_leave_the_same_object() {
        let api = api();
        call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
        let at = format!("{IES}/ie");
        // Not an object: refused (a worker panicked on these before), nothing changed.
        let (code, _) =
            call(&api, "PATCH", &at, "application/json-patch+json", r#"[{"op":"replace","path":"","value":[1,2]}]"#)
                .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        let (code, err) = call(&api, "PATCH", &at, "application/merge-patch+json", "[1,2]").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert_eq!(
            err["message"],
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"
        );
        let (code, _) =
            call(&api, "PATCH", &at, "application/json-patch+json", r#"[{"op":"replace","path":"","value":"x"}]"#)
                .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        // Another name: the API server's 400 naming both (not a 404 naming the other object).
        let (code, err) = call(
            &api,
            "PATCH",
            &at,
            "application/json-patch+json",
            r#"[{"op":"replace","path":"/metadata/name","value":"other"}]"#,
        )
        .await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert_eq!(err["message"], "the name of the object (other) does not match the name on the URL (ie)");
        // The root replaced on the status without a version: refused as an update without one
        // (as kube-apiserver does), not a status wiped.
        call(
            &api,
            "PATCH",
            &format!("{at}/status"),
            "application/merge-patch+json",
            r#"{"status":{"isoDownloadURL":"http://x"}}"#,
        )
        .await;
        let root = json!([{"op": "replace", "path": "", "value": {"apiVersion": "agent-install.openshift.io/v1beta1",
            "kind": "InfraEnv", "metadata": {"name": "ie", "namespace": "ns"}, "spec": {"pullSecretRef": {"name": "ps"}}}}]);
        let (code, err) =
            call(&api, "PATCH", &format!("{at}/status"), "application/json-patch+json", &root.to_string()).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
        assert!(err["message"].as_str().unwrap().contains("metadata.resourceVersion"), "{err}");
        let (_, ie) = call(&api, "GET", &at, "", "").await;
        assert_eq!(ie["status"]["isoDownloadURL"], "http://x");
    }

    #[tokio::test]
    async fn names_are_checked_per_kind_as_the_api_server_does() {
        let api = api();
        let ns = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).to_string();
        for bad in ["x.y", "..", "UPPER", &"a".repeat(64), "a\nb", "a\u{1b}[31m"] {
            let (code, err) = call(&api, "POST", "/api/v1/namespaces", "application/json", &ns(bad)).await;
            assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {err}");
            assert_eq!(err["details"]["causes"][0]["field"], "metadata.name", "{err}");
        }
        let (code, _) = call(&api, "POST", "/api/v1/namespaces", "application/json", &ns("team-a")).await;
        assert_eq!(code, StatusCode::CREATED);
        // Leases, Secrets and custom resources: subdomains.
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": ".."}});
        let (code, _) = call(
            &api,
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
            "application/json",
            &lease.to_string(),
        )
        .await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        let (code, _) = call(&api, "POST", SECRETS, "application/json", &secret("UP", "x")).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        let (code, err) =
            call(&api, "POST", IES, "application/json", &infraenv(json!({"metadata": {"name": "UP_x"}}))).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(err["message"].as_str().unwrap().contains("a lowercase RFC 1123 subdomain"), "{err}");
        // Events: only a path segment, as upstream (their names come from other objects').
        for bad in ["..", "a%b"] {
            let (code, _) = call(&api, "POST", EVENTS, "application/json", &event(bad, "")).await;
            assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        }
        let (code, _) = call(&api, "POST", EVENTS, "application/json", &event("Pod.17a2b3", "")).await;
        assert_eq!(code, StatusCode::CREATED);
        // A namespace in a path is a label.
        let (code, _) =
            call(&api, "POST", "/api/v1/namespaces/UP/secrets", "application/json", &secret("s", "x")).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
        // generateName: the prefix, then the name made from it.
        let generated = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"generateName": "UP-"}});
        let (code, _) = call(&api, "POST", SECRETS, "application/json", &generated.to_string()).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[tokio::test]
    async fn deeply_nested_yaml_is_refused_before_it_is_parsed() {
        let api = api();
        let uri = format!("{EVENTS}/e?fieldManager=m");
        let nested = format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: e}}\nnote: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let (code, err) = call(&api, "PATCH", &uri, "application/apply-patch+yaml", &nested).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(err["message"].as_str().unwrap().contains("nests deeper than 64 levels"), "{err}");
        // JSON sent as the apply (what kubectl sends) is read as JSON.
        let json_config = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"name": "x", "namespace": "ns"}});
        let (code, _) = call(&api, "PATCH", &uri, "application/apply-patch+yaml", &json_config.to_string()).await;
        assert_eq!(code, StatusCode::CREATED);
    }
    #[tokio::test]
    async fn the_openapi_v3_index_is_made_once() {
        // It cost about 10 ms of CPU per request, made anew each time.
        let api = api();
        let req = Request::builder().uri("/openapi/v3").body(Bytes::new()).unwrap();
        let (first, second) = (api.handle(&req).await, api.handle(&req).await);
        let (Body::Bytes(a), Body::Bytes(b)) = (first.body(), second.body()) else { panic!("whole documents") };
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes, not a new document");
        let index: Value = serde_json::from_slice(a).unwrap();
        assert!(index["paths"]["apis/agent-install.openshift.io/v1beta1"]["serverRelativeURL"].is_string(), "{index}");
    }
}
