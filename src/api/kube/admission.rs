//! What a write must pass before it is stored: the document's type, namespace and name against the
//! URL; names; size; unknown fields (pruned, and refused or warned of by field validation); the
//! core kinds' validation; the CRD's structural schema; and bootstream's admission rules.

use http::StatusCode;
use serde_json::{Value, json};

use super::write::{FieldValidation, WriteContext};
use super::{ApiError, Collection, KubeApi, Target, limits, names, patch};
use crate::resources::Kind;

impl KubeApi {
    /// Checks a document a client sent for this collection: its type, and that the URL's namespace
    /// and name are its own.
    pub(super) fn check_document(&self, t: &Target<'_>, doc: &mut Value) -> Result<(), ApiError> {
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
    pub(super) fn admit(
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
    pub(super) fn check_names(&self, c: &Collection, doc: &Value) -> Result<(), ApiError> {
        let meta = &doc["metadata"];
        let name = meta["name"].as_str().unwrap_or_default();
        let rule = names::NameRule::of_kind(c.kind_name());
        let invalid = |e: names::NameError| ApiError::invalid(c, name, e);
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
    pub(super) fn check_size(&self, c: &Collection, doc: &Value) -> Result<(), ApiError> {
        let max = self.limits.max_object_bytes;
        if limits::json_len_within(doc, max).is_some() {
            return Ok(());
        }
        let size = limits::json_len(doc);
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        Err(ApiError::about(
            c,
            name,
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!(
                "{} \"{name}\" would be {size} bytes, over the {max} bytes an object may have (serve --max-object-bytes)",
                c.qualified()
            ),
        ))
    }

    pub(super) fn admit_pruned(
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
                _ => ApiError::about(c, &name, code, denied.reason, denied.message),
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

    /// What a patch made must still be this object: a JSON object, of this kind, with the name
    /// and namespace of the URL (as the API server checks a patched object).
    pub(super) fn check_patched(&self, t: &Target<'_>, doc: &mut Value) -> Result<(), ApiError> {
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
}

/// What the API server's Secret validation refuses: a changed type on update, the keys the type
/// needs; in its order, with its messages.
pub(super) fn secret_errors(doc: &Value, live: Option<&Value>) -> Vec<crate::resources::crds::SchemaError> {
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

/// A stored document as a client would send it back: without the metadata the server owns, which
/// document validation does not take from clients.
pub(super) fn strip_server_fields(doc: &Value) -> Value {
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
pub(super) fn unknown_fields(c: &Collection, doc: &mut Value) -> Vec<String> {
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
