//! Writes of whole objects: create (`generateName` too), update, the status subresource, delete
//! (preconditions, finalizers), dry runs, and the `managedFields` entry each records.

use std::collections::HashMap;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use serde_json::{Value, json};

use super::{ApiError, Collection, Creating, KubeApi, Target, apply, limits, status};
use crate::store::{Deletion, StoreError};

/// Per request: who writes, how strictly, whether for real.
pub(super) struct WriteContext {
    pub(super) manager: String,
    pub(super) dry_run: bool,
    pub(super) validation: FieldValidation,
    pub(super) warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldValidation {
    Strict,
    Warn,
    Ignore,
}

impl KubeApi {
    pub(super) async fn create(
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
    pub(super) async fn store_new(&self, c: &Collection, ns: &str, mut doc: Value) -> Result<Value, StoreError> {
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
    pub(super) async fn after_write(&self, c: &Collection, ns: &str, name: &str, stored: Value) -> Value {
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

    pub(super) async fn update(
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
    pub(super) async fn write_over(
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

    pub(super) async fn delete(
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
                let status = status::deleted(c, &name, live["metadata"]["uid"].as_str());
                Ok((StatusCode::OK, serde_json::to_value(status).expect("a Status serializes")))
            }
        }
    }
}

pub(super) fn write_context(req: &Request<Bytes>, q: &HashMap<String, String>) -> Result<WriteContext, ApiError> {
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

/// Drops the empty lists and maps of `metadata`, as the API server's ObjectMeta (omitempty) does:
/// a finalizer patched away leaves no `finalizers: []`, and no manager keeps owning the list.
pub(super) fn omit_empty_metadata(doc: &mut Value) {
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
pub(super) fn record_manager(c: &Collection, doc: &mut Value, live: Option<&Value>, ctx: &WriteContext, status: bool) {
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

/// A JSON body, parsed off the async workers ([`limits::cpu_bound`]).
pub(super) async fn parse_json(body: &Bytes) -> Result<Value, ApiError> {
    let body = body.clone();
    limits::cpu_bound(body.len(), move || serde_json::from_slice(&body))
        .await
        .map_err(|e| ApiError::bad_request(format!("the body is not a JSON object: {e}")))
}

pub(super) fn add_finalizer(doc: &mut Value, finalizer: &str) {
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
