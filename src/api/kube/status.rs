//! Errors as the API answers them: `Status` objects (the k8s-openapi meta/v1 type) with the API
//! server's reasons, messages and details.

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::Collection;
use super::patch;
use crate::http::Body;
use crate::store::StoreError;

/// An error as the API answers it: a `Status` object.
#[derive(Debug)]
pub struct ApiError {
    pub code: StatusCode,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub(super) fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None }
    }
    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }
    pub(super) fn not_found(c: &Collection, name: &str) -> ApiError {
        ApiError {
            details: Some(json!({"name": name, "group": c.group(), "kind": c.plural()})),
            ..ApiError::new(StatusCode::NOT_FOUND, "NotFound", format!("{} \"{name}\" not found", c.qualified()))
        }
    }
    pub(super) fn invalid(c: &Collection, name: &str, message: impl std::fmt::Display) -> ApiError {
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
    pub(super) fn invalid_with_causes(c: &Collection, name: &str, text: &str, causes: Value) -> ApiError {
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
    pub(super) fn invalid_fields(
        c: &Collection,
        name: &str,
        errors: &[crate::resources::crds::SchemaError],
    ) -> ApiError {
        let causes: Vec<Value> =
            errors.iter().map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field})).collect();
        let listed: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        let text = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::invalid_with_causes(c, name, &text, Value::Array(causes))
    }
    pub(super) fn from_store(c: &Collection, name: &str, e: StoreError) -> ApiError {
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

pub(super) fn patch_error(e: patch::PatchError) -> ApiError {
    let code = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::UNPROCESSABLE_ENTITY);
    let reason = match code.as_u16() {
        400 => "BadRequest",
        413 => "RequestEntityTooLarge",
        _ => "Invalid",
    };
    ApiError::new(code, reason, e.message().to_string())
}
