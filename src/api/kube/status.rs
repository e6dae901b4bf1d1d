//! Errors as the API answers them: `Status` objects (the k8s-openapi meta/v1 type) with the API
//! server's reasons, messages and details.

use http::{Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status, StatusCause, StatusDetails};

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
    /// Boxed: most errors have none, and an `Err` should be small.
    pub details: Option<Box<StatusDetails>>,
}

/// The details that name the object an error is about: its name, its group (none for the core
/// group: the API server's field is `omitempty`) and `kind` (the API server puts the resource's
/// plural there for most errors, the kind for Invalid).
fn about(c: &Collection, name: &str, kind: &str) -> StatusDetails {
    StatusDetails {
        name: Some(name.to_string()),
        group: Some(c.group().to_string()).filter(|g| !g.is_empty()),
        kind: Some(kind.to_string()),
        ..Default::default()
    }
}

/// One cause of a `Status`.
pub(super) fn cause(reason: &str, message: impl Into<String>, field: impl Into<String>) -> StatusCause {
    StatusCause { reason: Some(reason.to_string()), message: Some(message.into()), field: Some(field.into()) }
}

impl ApiError {
    pub(super) fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { code, reason, message: message.into(), details: None }
    }
    pub(super) fn bad_request(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message.to_string())
    }
    /// An error about the object `name` of `c` (details naming it).
    pub(super) fn about(
        c: &Collection,
        name: &str,
        code: StatusCode,
        reason: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError { details: Some(Box::new(about(c, name, c.plural()))), ..ApiError::new(code, reason, message) }
    }
    pub(super) fn not_found(c: &Collection, name: &str) -> ApiError {
        ApiError::about(c, name, StatusCode::NOT_FOUND, "NotFound", format!("{} \"{name}\" not found", c.qualified()))
    }
    pub(super) fn invalid(c: &Collection, name: &str, message: impl std::fmt::Display) -> ApiError {
        // kubectl prints an Invalid error as `The KIND "NAME" is invalid: FIELD: MESSAGE` from its
        // causes alone (without one it shows no reason at all): the field is the message's leading
        // path, else the spec (the admission webhooks' messages name no path).
        let text = message.to_string();
        let (field, message) = match text.split_once(": ") {
            Some((path, rest))
                if path.starts_with(|c: char| c.is_ascii_lowercase())
                    && path.chars().all(|c| c.is_ascii_alphanumeric() || "._[]-".contains(c)) =>
            {
                (path, rest)
            }
            _ => ("spec", text.as_str()),
        };
        Self::invalid_with_causes(c, name, &text, vec![cause("FieldValueInvalid", message, field)])
    }
    /// The API server's Invalid error of `name`: `text` after the kind and name, `causes` in details.
    pub(super) fn invalid_with_causes(c: &Collection, name: &str, text: &str, causes: Vec<StatusCause>) -> ApiError {
        ApiError {
            details: Some(Box::new(StatusDetails { causes: Some(causes), ..about(c, name, c.kind_name()) })),
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
        let causes = errors.iter().map(|e| cause(e.reason, e.message.clone(), e.field.clone())).collect();
        let listed: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
        let text = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Self::invalid_with_causes(c, name, &text, causes)
    }
    pub(super) fn from_store(c: &Collection, name: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(c, name),
            StoreError::AlreadyExists { .. } => ApiError::about(
                c,
                name,
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", c.qualified()),
            ),
            StoreError::Conflict(_) => ApiError::about(
                c,
                name,
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    c.qualified()
                ),
            ),
            StoreError::Invalid(m) => ApiError::invalid(c, name, m),
            StoreError::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, "Forbidden", m),
            StoreError::Backend(m) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", m),
        }
    }

    /// Whether the error lists causes (an apply's conflicts do; a write's lost race does not).
    pub(super) fn has_causes(&self) -> bool {
        self.details.as_ref().is_some_and(|d| d.causes.is_some())
    }

    /// The `Status` object the API answers with.
    pub fn status(&self) -> Status {
        Status {
            status: Some("Failure".to_string()),
            message: Some(self.message.clone()),
            reason: Some(self.reason.to_string()),
            details: self.details.as_deref().cloned(),
            code: Some(i32::from(self.code.as_u16())),
            metadata: ListMeta::default(),
        }
    }

    pub fn response(&self) -> Response<Body> {
        crate::http::json(self.code, &self.status())
    }
}

/// The `Status` of a deletion done at once (the API server's answer for every kind served here).
pub(super) fn deleted(c: &Collection, name: &str, uid: Option<&str>) -> Status {
    Status {
        status: Some("Success".to_string()),
        details: Some(StatusDetails { uid: uid.map(str::to_string), ..about(c, name, c.plural()) }),
        ..Default::default()
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
