//! Why an apply is refused: the [`Conflicts`] with other managers, worded as the API server words
//! them, and [`ApplyError`].

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusCause;

use super::fieldset::FieldSet;
use super::managed::{ManagedEntry, ManagedFieldsError};
use super::path::path_to_string;
use super::walk::ListError;
use crate::errors::chain;

/// A field an apply would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub manager: String,
    /// The other manager's operation, `Apply` or `Update`.
    pub operation: String,
    /// The other manager's API version (named in the message for updaters).
    pub api_version: String,
    pub subresource: Option<String>,
    /// The field, as the API server prints it: `.spec.x`.
    pub field: String,
    identifier: String,
}

impl Conflict {
    /// How the API server names the manager: `"kubectl"`, `"kubectl-edit" using v1`,
    /// `"m" with subresource "status" using v1`.
    pub fn manager_description(&self) -> String {
        let mut s = serde_json::to_string(&self.manager).expect("strings serialize");
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {}", serde_json::to_string(sub).expect("strings serialize")));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The conflicts of a refused apply: answer 409 (reason `Conflict`) with [`Conflicts::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// `Status.message`, worded as the API server words it.
    pub fn message(&self) -> String {
        let c = &self.0;
        if c.len() == 1 {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                c[0].manager_description(),
                c[0].field
            );
        }
        let mut lines = Vec::new();
        let mut last: Option<&str> = None;
        for conflict in c {
            if last != Some(conflict.identifier.as_str()) {
                lines.push(format!("conflicts with {}:", conflict.manager_description()));
                last = Some(&conflict.identifier);
            }
            lines.push(format!("- {}", conflict.field));
        }
        format!("Apply failed with {} conflicts: {}", c.len(), lines.join("\n"))
    }

    /// `Status.details.causes`: one `FieldManagerConflict` per field.
    pub fn causes(&self) -> Vec<StatusCause> {
        self.0
            .iter()
            .map(|c| StatusCause {
                reason: Some("FieldManagerConflict".to_string()),
                message: Some(format!("conflict with {}", c.manager_description())),
                field: Some(c.field.clone()),
            })
            .collect()
    }
}

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Why an apply failed. Its text is the whole `Status.message` the API server answers with (the
/// router sends `to_string()`): a variant that wraps a cause words it into its own text, as the API
/// server does, and keeps it as its source too (see `crate::errors`).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409.
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The applied configuration is not an object: 400.
    #[error("error decoding YAML: the applied configuration must be an object")]
    NotAnObject,
    /// The configuration's type is not the resource's: 400.
    #[error("invalid object type: {group}/{version}, Kind={kind}")]
    ObjectType { group: String, version: String, kind: String },
    /// The configuration sets managedFields: 400.
    #[error("metadata.managedFields must be nil")]
    ManagedFieldsSet,
    /// The configuration does not fit the object's structure (list items without their keys,
    /// duplicates): 422.
    #[error("{}", chain(.0))]
    Invalid(#[source] ListError),
    /// The stored managedFields cannot be read: 500.
    #[error("failed to decode managed fields: {}", chain(.0))]
    ManagedFields(#[source] ManagedFieldsError),
}

impl ApplyError {
    pub fn http_status(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::NotAnObject | ApplyError::ObjectType { .. } | ApplyError::ManagedFieldsSet => 400,
            ApplyError::Invalid(_) => 422,
            ApplyError::ManagedFields(_) => 500,
        }
    }
}

pub(super) fn to_conflicts(raw: &[(ManagedEntry, FieldSet)]) -> Conflicts {
    let mut out: Vec<Conflict> = Vec::new();
    for (e, set) in raw {
        let identifier = e.identifier();
        for p in set.paths() {
            out.push(Conflict {
                manager: e.manager.clone(),
                operation: e.operation.clone(),
                api_version: e.api_version.clone(),
                subresource: e.subresource.clone(),
                field: path_to_string(&p),
                identifier: identifier.clone(),
            });
        }
    }
    // Grouped by manager identity (sorted), fields in path order within a manager.
    out.sort_by(|a, b| a.identifier.cmp(&b.identifier));
    Conflicts(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn conflict_message_and_causes_exact() {
        let first = apply(None, &cm(json!({"a": "1"})), &req("alice", T0)).unwrap();
        let c = conflicts(apply(Some(&first), &cm(json!({"a": "2"})), &req("bob", T1)));
        assert_eq!(c.message(), "Apply failed with 1 conflict: conflict with \"alice\": .data.a");
        assert_eq!(
            serde_json::to_value(c.causes()).unwrap(),
            json!([{"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.a"}])
        );
    }

    #[test]
    fn conflicts_with_several_managers() {
        let o = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("zed", T0)).unwrap();
        let mut o2 = o.clone();
        o2["data"]["c"] = json!("1");
        record_update(Some(&o), &mut o2, &req("kubectl-edit", T1));
        let c = conflicts(apply(Some(&o2), &cm(json!({"a": "2", "b": "2", "c": "2"})), &req("kubectl", T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 3 conflicts: conflicts with \"kubectl-edit\" using v1:\n- .data.c\nconflicts with \"zed\":\n- .data.a\n- .data.b"
        );
        assert_eq!(c.causes().len(), 3);
        assert_eq!(c.causes()[0].message.as_deref(), Some("conflict with \"kubectl-edit\" using v1"));
    }

    /// The texts the router puts in `Status.message`, with their causes worded in.
    #[test]
    fn apply_errors_word_their_causes_in() {
        let mut live = cm(json!({"a": "1"}));
        live["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {"x": {}}}]);
        let e = apply(Some(&live), &cm(json!({"a": "2"})), &req("kubectl", T0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"failed to decode managed fields: error decoding set: parsing key "x": path element must have a type prefix"#
        );
        assert_eq!(e.http_status(), 500);
        assert_eq!(crate::errors::chain(&e).to_string(), e.to_string(), "each cause once");
        live["metadata"]["managedFields"][0]["fieldsType"] = json!("FieldsV2");
        let e = apply(Some(&live), &cm(json!({"a": "2"})), &req("kubectl", T0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"failed to decode managed fields: invalid fieldsType "FieldsV2" in managed fields entry 0"#
        );

        let owners = |refs: Value| {
            let mut c = cm(json!({}));
            c["metadata"]["ownerReferences"] = refs;
            c
        };
        let e = apply(None, &owners(json!([{"name": "x"}])), &req("kubectl", T0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#".metadata.ownerReferences: element 0: associative list with keys has an element that omits key field "uid" (and doesn't have default value)"#
        );
        assert_eq!(e.http_status(), 422);
        let e = apply(None, &owners(json!([{"uid": "u"}, {"uid": "u"}])), &req("kubectl", T0)).unwrap_err();
        assert_eq!(e.to_string(), r#".metadata.ownerReferences: duplicate entries for key [uid="u"]"#);
        let e = apply(None, &json!([1]), &req("kubectl", T0)).unwrap_err();
        assert_eq!(e.to_string(), "error decoding YAML: the applied configuration must be an object");
        assert_eq!(e.http_status(), 400);
    }
}
