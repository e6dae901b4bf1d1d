//! Client-side `kubectl apply`'s annotation: what an apply by `kubectl` may take over through it,
//! and the annotation rewritten after such an apply.

use serde_json::{Map, Value};

use super::Request;
use super::fieldset::FieldSet;

/// The annotation client-side `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The fields the client-side apply annotation of `live` recorded with the value they still
/// have: an apply by `kubectl` may take them over without conflict (upstream's
/// lastAppliedManager). `None` when there is no usable annotation.
pub(super) fn last_applied_allowed(live: &Value, req: &Request) -> Option<FieldSet> {
    let text =
        live.pointer("/metadata/annotations")?.get(LAST_APPLIED_ANNOTATION)?.as_str().filter(|s| !s.is_empty())?;
    let last: Value = serde_json::from_str(text).ok()?;
    if !last.is_object() || last.get("apiVersion").and_then(Value::as_str) != Some(req.api_version) {
        return None;
    }
    let w = req.walker();
    let set = w.field_set(&last, false).ok()?;
    let cmp = w.compare(&last, live);
    Some(set.difference(&cmp.modified).difference(&cmp.added).difference(&cmp.removed))
}

/// The applied configuration as the annotation holds it: compact JSON, keys sorted, HTML
/// characters escaped and a final newline (Go's encoder), without the annotation itself.
pub(super) fn last_applied_text(config: &Value) -> String {
    let mut c = config.clone();
    if let Some(Value::Object(ann)) = c.pointer_mut("/metadata/annotations") {
        ann.shift_remove(LAST_APPLIED_ANNOTATION);
    }
    let mut s = sorted(&c).to_string();
    s = s.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026");
    s = s.replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029");
    s.push('\n');
    s
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sorted(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    #[test]
    fn client_side_apply_then_server_side_apply() {
        // kubectl apply (client side): created by kubectl-client-side-apply with the annotation.
        let mut config = cm(json!({"a": "1"}));
        let mut stored = config.clone();
        stored["metadata"]["annotations"] = json!({LAST_APPLIED_ANNOTATION: last_applied_text(&config)});
        record_update(None, &mut stored, &req("kubectl-client-side-apply", T0));
        assert_eq!(
            fields_text(&stored, "kubectl-client-side-apply", "Update"),
            r#"{"f:data":{".":{},"f:a":{}},"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}}}}"#
        );
        // kubectl apply --server-side changing a: allowed through the annotation, which is
        // rewritten to the new configuration.
        config["data"]["a"] = json!("2");
        let obj = apply(Some(&stored), &config, &req("kubectl", T1)).unwrap();
        assert_eq!(obj["data"], json!({"a": "2"}));
        assert_eq!(fields_text(&obj, "kubectl", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        let text = obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION].as_str().unwrap();
        assert_eq!(
            text,
            "{\"apiVersion\":\"v1\",\"data\":{\"a\":\"2\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm\",\"namespace\":\"default\"}}\n"
        );
        // Another manager gets no such allowance.
        let c = conflicts(apply(Some(&stored), &config, &req("other", T1)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
        );
        // A field changed since the last client-side apply still conflicts.
        let mut drifted = stored.clone();
        drifted["data"]["a"] = json!("5");
        record_update(Some(&stored), &mut drifted, &req("kubectl-client-side-apply", T1));
        let c = conflicts(apply(Some(&drifted), &config, &req("kubectl", T2)));
        assert_eq!(c.0.len(), 1);
    }
}
