//! Patches: JSON merge, JSON patch, strategic merge (core kinds), and server-side apply; each
//! applied to the live object and written over it, retried when the object moved meanwhile
//! unless the patch names the version it applies to.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails;
use serde_json::Value;

use super::write::WriteContext;
use super::{ApiError, KubeApi, Target, apply, limits, patch, patch_error, query_flag};
use crate::resources::Kind;
use crate::store::StoreError;

impl KubeApi {
    pub(super) async fn patch(
        &self,
        t: &Target<'_>,
        req: &Request<Bytes>,
        q: &HashMap<String, String>,
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

    pub(super) async fn server_side_apply(
        &self,
        t: &Target<'_>,
        body: &Bytes,
        q: &HashMap<String, String>,
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
                    return Err(ApiError {
                        details: Some(Box::new(StatusDetails {
                            causes: Some(conflicts.causes()),
                            ..Default::default()
                        })),
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
                Err(e) if e.reason == "Conflict" && !e.has_causes() => {
                    continue;
                }
                other => return other.map(|o| (StatusCode::OK, o)),
            }
        }
        Err(ApiError::from_store(c, &name, StoreError::Conflict(String::new())))
    }
}

/// A server-side apply's configuration: JSON (what kubectl sends) or YAML, whose nesting is
/// checked by a scan before it is parsed (YAML parsing costs time quadratic in nesting).
pub(super) fn decode_applied(body: &[u8]) -> Result<Value, ApiError> {
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
