//! Why an apply is refused: the [`Conflicts`] with other managers, worded as the API server words
//! them, and [`ApplyError`].

use std::fmt;

use serde_json::{Value, json};

use super::fieldset::FieldSet;
use super::managed::ManagedEntry;
use super::path::path_to_string;

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
    pub fn causes(&self) -> Vec<Value> {
        self.0
            .iter()
            .map(|c| {
                json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager_description()),
                    "field": c.field,
                })
            })
            .collect()
    }

    /// The whole `Status` object the API server answers with (HTTP 409).
    pub fn status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "reason": "Conflict",
            "details": {"causes": self.causes()},
            "code": 409,
        })
    }
}

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields owned by other managers would change: 409.
    #[error("{0}")]
    Conflicts(Conflicts),
    /// The applied configuration is not acceptable (wrong type, managedFields set): 400.
    #[error("{0}")]
    BadRequest(String),
    /// The configuration does not fit the object's structure (list items without their keys,
    /// duplicates): 422.
    #[error("{0}")]
    Invalid(String),
    /// The stored managedFields cannot be read: 500.
    #[error("{0}")]
    Internal(String),
}

impl ApplyError {
    pub fn http_status(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::BadRequest(_) => 400,
            ApplyError::Invalid(_) => 422,
            ApplyError::Internal(_) => 500,
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
            c.causes(),
            vec![json!({"reason": "FieldManagerConflict", "message": "conflict with \"alice\"", "field": ".data.a"})]
        );
        assert_eq!(c.status()["code"], 409);
        assert_eq!(c.status()["reason"], "Conflict");
        assert_eq!(c.status()["details"]["causes"][0]["field"], ".data.a");
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
        assert_eq!(c.causes()[0]["message"], "conflict with \"kubectl-edit\" using v1");
    }
}
