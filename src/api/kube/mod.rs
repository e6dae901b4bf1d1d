//! The Kubernetes API of the embedded server: what `kubectl`, client-go, kube-rs and the Python client
//! talk to, over the objects of the SQLite store. It is the only Kubernetes-API server in the repo:
//! the embedded product serves users with it, and the Kubernetes-mode tests run the controllers
//! against it through kube-rs.
//!
//! # Where things are
//! One job per file: this file routes a request (`KubeApi::handle`: path → collection, verb,
//! body format, write options) and holds the server's state. The rest:
//! - `collection`: what is served; `served`, `discovery`, `openapi`, `documents`: how it
//!   is described (discovery and OpenAPI documents).
//! - `read`: get, list, watch; `watch`: the watch window and feeds; `selector`, `table`,
//!   `jsonpath`: what reads filter and print.
//! - `admission`: what a write must pass; `names`, `limits`: names and bounds.
//! - `write`: create, update, status, delete; `patching`: the patch types and server-side apply,
//!   over `patch` (merge, JSON patch, strategic merge) and `apply` (field sets, managed fields).
//! - `status`: errors as `Status` objects; `hooks`: what the process around adds; `protobuf`:
//!   the bodies kubectl's generators send.
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
//!   (what `kubectl explain secret` prints) are k8s-openapi's, which lack the meaning of each enum
//!   value that kube-apiserver adds to a field's description (`kubectl explain namespace.status.phase`).
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

mod admission;
mod apply;
mod collection;
mod discovery;
mod documents;
mod hooks;
mod jsonpath;
pub mod limits;
mod names;
mod openapi;
mod patch;
mod patching;
mod protobuf;
mod read;
pub mod selector;
pub mod served;
mod status;
mod table;
pub mod watch;
mod write;

pub use collection::{Collection, Verb, collections, crd_documents};
#[cfg(any(test, feature = "testkit"))]
pub use hooks::Interceptor;
pub use hooks::{Creating, HookFuture, Hooks, NoHooks};
use status::patch_error;
pub use status::{ApiError, status_error};
use write::write_context;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::http::Body;
#[cfg(any(test, feature = "testkit"))]
use crate::keylocks::LockedRw as _;
use crate::store::StoreError;
use crate::store::sqlite::SqliteStore;
use watch::Watches;

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

#[cfg(test)]
mod tests;
