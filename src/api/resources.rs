//! The Kubernetes-style REST API over the embedded store (what `bootstream apply/get/delete` talk
//! to): `/apis/<group>/<version>[/namespaces/NS]/<plural>[/NAME][/status]` and `/api/v1/...` for
//! Secrets, behind the server's bearer token.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use super::{App, not_found};
use crate::controllers::infraenv;
use crate::controllers::runtime::{Action, Outcome};
use crate::http::Body;
use crate::resources::admission::{self, Operation};
use crate::resources::{InfraEnv, Kind};
use crate::store::sqlite::{NewObject, SqliteStore};
use crate::store::{Store, StoreError};

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
                 DATA_DIR/api-token (the bootstream CLI reads ./bootstream-data/api-token, --token or $BOOTSTREAM_TOKEN)"
            }
        };
        let mut r = status_error(StatusCode::UNAUTHORIZED, "Unauthorized", message);
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        Some(r)
    }

    /// Kubernetes-style REST for the embedded store:
    /// `/apis/<group>/<version>[/namespaces/NS]/<plural>[/NAME]` and `/api/v1[...]/secrets[/NAME]`; cluster-scoped
    /// kinds (ClusterImageSet) without the namespace part. PATCH takes a JSON merge patch (RFC 7386).
    pub(super) async fn resource_api(&self, req: &Request<Bytes>, path: &str) -> Response<Body> {
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let Some(store) = &self.resources else {
            return status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                "resources live in the Kubernetes cluster this server works with: use kubectl",
            );
        };
        let Some(crate::store::ApiPath { prefix: api_prefix, namespace, plural, name, status }) =
            crate::store::ApiPath::parse(&segs)
        else {
            return not_found();
        };
        let Some(kind) = Kind::from_plural(plural).filter(|k| k.api_prefix() == api_prefix) else {
            return status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the server could not find the requested resource ({plural})"),
            );
        };
        // Namespaced kinds have item paths under a namespace; cluster-scoped kinds never do.
        let namespace = if kind.namespaced() {
            match namespace {
                Some("") => return not_found(),
                ns => ns,
            }
        } else {
            match namespace {
                Some(ns) if !ns.is_empty() => return not_found(),
                _ => Some(""),
            }
        };
        if status {
            let (Some(ns), Some(name)) = (namespace, name) else { return not_found() };
            return match self.status_api(store, kind, ns, name, req).await {
                Ok(r) => r,
                Err(e) => store_error(&e),
            };
        }
        let result = match (req.method().clone(), namespace, name) {
            (Method::GET, ns, None) => Ok(list_response(kind, &store.list_texts(kind, ns))),
            (Method::GET, Some(ns), Some(name)) => match store.get_document(kind, ns, name).await {
                Ok(Some(doc)) => Ok(crate::http::json(StatusCode::OK, &doc)),
                Ok(None) => Err(not_found_error(kind, name)),
                Err(e) => Err(e),
            },
            (Method::PUT, Some(ns), Some(name)) => self.apply(store, kind, req.body(), Some((ns, name))).await,
            (Method::POST, Some(ns), None) => self.apply(store, kind, req.body(), Some((ns, ""))).await,
            (Method::PATCH, Some(ns), Some(name)) => self.patch(store, kind, ns, name, req).await,
            (Method::DELETE, Some(ns), Some(name)) => match store.delete_document(kind, ns, name).await {
                Ok(deletion) => {
                    // An InfraEnv goes at once unless hosts hold it (then its condition says which).
                    let deletion = if kind == Kind::InfraEnv && deletion == crate::store::Deletion::Pending {
                        let _ = self.reconciled_infraenv(ns, name).await;
                        match store.get_document(kind, ns, name).await {
                            Ok(None) => crate::store::Deletion::Deleted,
                            _ => deletion,
                        }
                    } else {
                        deletion
                    };
                    let doc = store.get_document(kind, ns, name).await.ok().flatten();
                    Ok(match (deletion, doc) {
                        (crate::store::Deletion::Pending, Some(doc)) => crate::http::json(StatusCode::ACCEPTED, &doc),
                        _ => crate::http::json(
                            StatusCode::OK,
                            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
                                    "details": {"name": name, "kind": kind.plural()}}),
                        ),
                    })
                }
                Err(e) => Err(e),
            },
            (m, _, _) => {
                return status_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("method {m} not allowed here"),
                );
            }
        };
        match result {
            Ok(r) => r,
            Err(e) => store_error(&e),
        }
    }

    /// The status subresource, `.../NAME/status`: what a controller outside bootstream (metal3's bare
    /// metal operator reporting a BareMetalHost) writes. GET returns the object; PUT replaces the status
    /// with the document's (refused if its resourceVersion is stale); PATCH merges a patch into it.
    /// Nothing but the status changes either way.
    async fn status_api(
        &self,
        store: &SqliteStore,
        kind: Kind,
        ns: &str,
        name: &str,
        req: &Request<Bytes>,
    ) -> Result<Response<Body>, StoreError> {
        let Some(live) = store.get_document(kind, ns, name).await? else {
            return Err(not_found_error(kind, name));
        };
        let stored = match req.method().clone() {
            Method::GET => live,
            Method::PUT => {
                let doc: Value = serde_json::from_slice(req.body())
                    .map_err(|e| StoreError::Invalid(format!("the body is not JSON: {e}")))?;
                let status = admitted(kind, Operation::Update, "status", Some(&live), &doc)?.normalized;
                let want_rv = doc["metadata"]["resourceVersion"].as_str().map(str::to_string);
                store.replace_status_document(kind, ns, name, status, want_rv).await?
            }
            Method::PATCH => {
                let patch = match merge_patch_of(req)? {
                    Ok(patch) => patch,
                    Err(refused) => return Ok(refused),
                };
                // Retried on conflict against the object as it is then, as the API server does for patches.
                let mut live = live;
                let mut attempts = 0;
                loop {
                    let mut doc = live.clone();
                    crate::store::json::merge_patch(&mut doc, &patch);
                    let status = admitted(kind, Operation::Update, "status", Some(&live), &doc)?.normalized;
                    let want_rv = live["metadata"]["resourceVersion"].as_str().map(str::to_string);
                    match store.replace_status_document(kind, ns, name, status, want_rv).await {
                        Err(e) if e.is_conflict() && attempts < 5 => {
                            attempts += 1;
                            live =
                                store.get_document(kind, ns, name).await?.ok_or_else(|| not_found_error(kind, name))?;
                        }
                        other => break other?,
                    }
                }
            }
            m => {
                return Ok(status_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("method {m} not allowed here"),
                ));
            }
        };
        Ok(crate::http::json(StatusCode::OK, &stored))
    }

    /// `kubectl patch --type merge`: the merge patch is applied to the live object, the result validated
    /// as a whole like an applied document, and written if nobody changed the object meanwhile (retried
    /// on conflict, as the API server does for patches).
    async fn patch(
        &self,
        store: &SqliteStore,
        kind: Kind,
        ns: &str,
        name: &str,
        req: &Request<Bytes>,
    ) -> Result<Response<Body>, StoreError> {
        let patch = match merge_patch_of(req)? {
            Ok(patch) => patch,
            Err(refused) => return Ok(refused),
        };
        for _ in 0..5 {
            let Some(live) = store.get_document(kind, ns, name).await? else {
                return Err(not_found_error(kind, name));
            };
            let mut doc = live.clone();
            crate::store::json::merge_patch(&mut doc, &patch);
            if let Some(o) = doc.as_object_mut() {
                o.remove("status");
            }
            doc["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
            let new = strip_server_fields(&doc);
            let allowed = admitted(kind, Operation::Update, "", Some(&live), &new)?;
            let mut validated = allowed.normalized.unwrap_or(new);
            validated["metadata"] = doc["metadata"].clone();
            match store.replace_document(kind, validated).await {
                Ok(stored) => {
                    if kind == Kind::InfraEnv {
                        let _ = self.reconciled_infraenv(ns, name).await;
                    }
                    let current = store.get_document(kind, ns, name).await?.unwrap_or(stored);
                    return Ok(with_warnings(crate::http::json(StatusCode::OK, &current), &allowed.warnings));
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict(format!("{} \"{name}\" kept changing; try again", kind.resource())))
    }

    /// Creates or updates an object from a JSON document.
    async fn apply(
        &self,
        store: &SqliteStore,
        kind: Kind,
        body: &Bytes,
        target: Option<(&str, &str)>,
    ) -> Result<Response<Body>, StoreError> {
        let mut doc: Value =
            serde_json::from_slice(body).map_err(|e| StoreError::Invalid(format!("request body is not JSON: {e}")))?;
        if let Some((ns, name)) = target {
            let doc_ns = doc["metadata"]["namespace"].as_str().unwrap_or(ns).to_string();
            if doc_ns != ns {
                return Err(StoreError::Invalid(format!(
                    "metadata.namespace {doc_ns:?} does not match the namespace of the URL ({ns:?})"
                )));
            }
            // The decision reads the namespace (an Agent's references must stay in it).
            if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut)
                && !ns.is_empty()
            {
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
            if !name.is_empty() && doc["metadata"]["name"].as_str() != Some(name) {
                return Err(StoreError::Invalid(format!(
                    "metadata.name does not match the name of the URL ({name:?})"
                )));
            }
        }
        let ns = match target {
            Some((ns, _)) => ns,
            None => doc["metadata"]["namespace"].as_str().unwrap_or("default"),
        }
        .to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let live = store.get_document(kind, &ns, &name).await?;
        let operation = if live.is_some() { Operation::Update } else { Operation::Create };
        let allowed = admitted(kind, operation, "", live.as_ref(), &doc)?;
        let mut doc = allowed.normalized.unwrap_or(doc);
        if target.is_some() {
            doc["metadata"]["namespace"] = Value::String(ns.clone());
        }
        // The InfraEnv controller's finalizer comes with the create: added by the controller, it would
        // be one more write, and one more round of change events, before the status.
        let finalizer = (kind == Kind::InfraEnv && self.backend.is_some()).then_some(infraenv::INFRAENV_FINALIZER);
        // A new InfraEnv's discovery content is most of its create's time. Built beside the store's
        // write, under the uid reserved for the InfraEnv, it is ready sooner for the status below and
        // for the first downloads, which would otherwise wait for the write and then the build.
        let to_create = match (kind, &live) {
            (Kind::InfraEnv, None) => infraenv_to_create(&doc),
            _ => None,
        };
        let new = NewObject { finalizer, uid: to_create.as_ref().and_then(|ie| ie.metadata.uid.clone()) };
        let started = std::time::Instant::now();
        let write = async {
            let written = store.apply_document_with(kind, doc, new).await;
            (written, started.elapsed().as_micros() as u64)
        };
        let ((written, stored_micros), ()) = match &to_create {
            Some(ie) => tokio::join!(write, self.images.prebuild(ie)),
            None => (write.await, ()),
        };
        if let Some(uid) = to_create.as_ref().and_then(|ie| ie.metadata.uid.as_deref())
            && !matches!(written, Ok((_, true)))
        {
            // Not created (refused, or created by someone else meanwhile and updated here): nothing
            // has the reserved uid.
            self.images.forget_uid(uid);
        }
        let (stored, created) = written?;
        let ns = stored["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = stored["metadata"]["name"].as_str().unwrap_or_default().to_string();
        // An applied InfraEnv gets its status now, so `apply` then `get` shows it. Changes to what
        // InfraEnvs reference (secrets, NMStateConfigs) reach them through the controller's queue, which
        // folds a burst of changes into one reconcile per InfraEnv.
        let mut reconciles = 0;
        if kind == Kind::InfraEnv {
            // Someone else may write the InfraEnv meanwhile: then the reconcile's status write
            // conflicts and asks to run again at once. Without waiting for that one too, the answer
            // (and a `get` right after) could lack the status.
            for _ in 0..5 {
                reconciles += 1;
                match self.reconciled_infraenv(&ns, &name).await {
                    Some(Ok(Action::RequeueAfter(d))) if d.is_zero() => continue,
                    _ => break,
                }
            }
        }
        let current = store.get_document(kind, &ns, &name).await?.unwrap_or(stored);
        // Where an apply's time went, for a slow one (the store's write, waiting behind the writes
        // queued ahead included, then the status).
        tracing::debug!(
            kind = kind.name(),
            namespace = %ns,
            name = %name,
            uid = current["metadata"]["uid"].as_str().unwrap_or_default(),
            stored_micros,
            reconciles,
            micros = started.elapsed().as_micros() as u64,
            "applied"
        );
        let status = if created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(with_warnings(crate::http::json(status, &current), &allowed.warnings))
    }
}

/// The admission decision on a write ([`admission::decide`], the webhook's too); a refusal as the
/// resource API reports invalid documents.
fn admitted(
    kind: Kind,
    operation: Operation,
    subresource: &str,
    old: Option<&Value>,
    new: &Value,
) -> Result<admission::Allowed, StoreError> {
    admission::decide(&admission::Request { operation, kind, subresource, old, new: Some(new) })
        .map_err(|denied| StoreError::Invalid(denied.message))
}

/// The admission's warnings as the API server sends them: `Warning: 299 - "text"` headers (printable
/// ASCII; quotes and backslashes escaped).
fn with_warnings(mut resp: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let text: String = w
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                ' '..='~' => vec![c],
                _ => vec!['?'],
            })
            .collect();
        if let Ok(v) = header::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

impl<S: Store> App<S> {
    /// Has the InfraEnv controller reconcile `ns/name` and waits for that reconcile (one that starts
    /// after this call); None where no InfraEnv controller runs.
    async fn reconciled_infraenv(&self, ns: &str, name: &str) -> Option<Outcome> {
        self.infraenvs.as_ref()?.enqueue_and_wait((ns.to_string(), name.to_string())).await
    }
}

/// The InfraEnv a validated document creates, as the store will keep it, with the uid reserved for
/// it (the store gives a new object generation 1); None when the document does not read as one
/// (the store's write then reports what is wrong).
fn infraenv_to_create(doc: &Value) -> Option<InfraEnv> {
    let mut ie: InfraEnv = serde_json::from_value(doc.clone()).ok()?;
    ie.metadata.uid = Some(uuid::Uuid::new_v4().to_string());
    ie.metadata.generation = Some(1);
    ie.status = None;
    Some(ie)
}

/// A stored document as a client would send it back: without the metadata the server owns, which
/// document validation does not accept from clients.
fn strip_server_fields(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(meta) = d["metadata"].as_object_mut() {
        for key in ["uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp", "managedFields"] {
            meta.remove(key);
        }
    }
    d
}

fn not_found_error(kind: Kind, name: &str) -> StoreError {
    StoreError::NotFound { resource: crate::store::sqlite::kind_resource(kind), name: name.to_string() }
}

fn store_error(e: &StoreError) -> Response<Body> {
    match e {
        StoreError::NotFound { .. } => status_error(StatusCode::NOT_FOUND, "NotFound", &e.to_string()),
        StoreError::Conflict(_) => status_error(StatusCode::CONFLICT, "Conflict", &e.to_string()),
        StoreError::AlreadyExists { .. } => status_error(StatusCode::CONFLICT, "AlreadyExists", &e.to_string()),
        StoreError::Invalid(_) => status_error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e.to_string()),
        StoreError::Backend(_) => status_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e.to_string()),
    }
}

/// The JSON merge patch (RFC 7386) a PATCH request carries; a request of another patch type gets the
/// 415 response to send instead, and a body that is not JSON an Invalid error.
fn merge_patch_of(req: &Request<Bytes>) -> Result<Result<Value, Response<Body>>, StoreError> {
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.starts_with("application/merge-patch+json") {
        return Ok(Err(status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the patch type {content_type:?} is not supported; use application/merge-patch+json"),
        )));
    }
    serde_json::from_slice(req.body()).map(Ok).map_err(|e| StoreError::Invalid(format!("the patch is not JSON: {e}")))
}

/// A Kubernetes `Status` object, as the API server answers errors.
pub(super) fn status_error(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    crate::http::json(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

/// A list of stored objects, as the stored texts themselves between the list's punctuation (the
/// response of a list of thousands of Agents shares their texts instead of copying them).
fn list_response(kind: Kind, items: &[Bytes]) -> Response<Body> {
    let head = format!(r#"{{"apiVersion":"{}","kind":"{}List","items":["#, kind.api_version(), kind.name());
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
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(body)
        .expect("valid response")
}
