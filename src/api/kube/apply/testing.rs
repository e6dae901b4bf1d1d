//! What the tests of the apply modules share: requests, objects and readers of managedFields.

pub(super) use serde_json::{Value, json};

pub(super) use super::conflict::Conflicts;
pub(super) use super::{ApplyError, Request, apply, record_update};

pub(super) const T0: &str = "2024-01-01T00:00:00Z";
pub(super) const T1: &str = "2024-01-01T00:01:00Z";
pub(super) const T2: &str = "2024-01-01T00:02:00Z";

pub(super) fn req<'a>(manager: &'a str, now: &'a str) -> Request<'a> {
    Request::new(manager, "v1", "ConfigMap", now)
}

pub(super) fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}, "data": data})
}

pub(super) fn entries(obj: &Value) -> Vec<Value> {
    obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default()
}

pub(super) fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|a| a.iter().find(|e| e["manager"] == manager && e["operation"] == operation))
        .unwrap_or_else(|| panic!("no {manager}/{operation} entry in {obj:#}"))
}

pub(super) fn fields_text(obj: &Value, manager: &str, operation: &str) -> String {
    serde_json::to_string(&entry(obj, manager, operation)["fieldsV1"]).unwrap()
}

pub(super) fn conflicts(r: Result<Value, ApplyError>) -> Conflicts {
    match r {
        Err(ApplyError::Conflicts(c)) => c,
        other => panic!("expected conflicts, got {other:?}"),
    }
}
