//! Server-side apply and `metadata.managedFields`, after the API server's field manager
//! (structured-merge-diff): pure functions over `serde_json::Value`.
//!
//! * [`apply`]: a server-side apply (`PATCH` with `application/apply-patch+yaml`).
//! * [`record_update`]: every other write (create, update, any other patch) records what its
//!   manager changed.
//!
//! Ownership is tracked as sets of field paths, stored in each `managedFields` entry in the
//! FieldsV1 format (`f:<field>`, `k:<keys as JSON>`, `v:<value as JSON>`, `i:<index>`, and
//! `.` for the node itself when its children are listed too).
//!
//! How values are walked depends on a [`Schema`]: lists are atomic unless declared a set or a
//! map keyed by some fields; maps are structs (named fields) unless declared maps (arbitrary
//! keys, like labels) or atomic. [`BuiltinSchema`](schema::BuiltinSchema) knows ObjectMeta and the core kinds served;
//! a custom schema (e.g. from a CRD's `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`, `additionalProperties`) answers first and falls back to it.
//!
//! Hand-written because no Rust crate does the server's side of apply: kube-rs sends apply patches
//! and leaves the merge, the field sets and the conflicts to the API server, whose implementation
//! (structured-merge-diff) is Go only.

mod conflict;
mod fieldset;
mod last_applied;
mod managed;
mod path;
mod schema;
#[cfg(test)]
mod testing;
mod tracked;
mod walk;

use serde_json::{Map, Value, json};

use super::patch::json_eq;
pub use conflict::ApplyError;
use conflict::to_conflicts;
use fieldset::FieldSet;
pub use last_applied::LAST_APPLIED_ANNOTATION;
use last_applied::{last_applied_allowed, last_applied_text};
pub use managed::decode_managed_fields;
use managed::{ManagedEntry, cap_update_managers, decode_entries, encode_managed_fields, without_managed_fields};
use schema::BUILTIN;
pub use schema::Schema;
use tracked::{Track, filter_comparison, filter_set};
use walk::{Cursor, ListError, Walker};

/// Who writes, and how. Build with [`Request::new`] and adjust the public fields.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The field manager (`?fieldManager=`, or what the API server derives from the user agent).
    pub manager: &'a str,
    /// The resource's `group/version` (`v1`, `coordination.k8s.io/v1`).
    pub api_version: &'a str,
    /// The resource's kind (`ConfigMap`).
    pub kind: &'a str,
    /// The time of the write, RFC 3339 (`2024-01-02T03:04:05Z`).
    pub now: &'a str,
    /// `Some("status")` for a write to the status subresource.
    pub subresource: Option<&'a str>,
    /// Apply only: take conflicting fields from their other managers (`?force=true`).
    pub force: bool,
    /// The resource has a status subresource: writes to the main resource neither change nor
    /// own `status`, and writes to `/status` own only `status`.
    pub status_subresource: bool,
    /// Declares list and map types beyond the built-in ones.
    pub schema: &'a dyn Schema,
}

impl<'a> Request<'a> {
    pub fn new(manager: &'a str, api_version: &'a str, kind: &'a str, now: &'a str) -> Request<'a> {
        Request {
            manager,
            api_version,
            kind,
            now,
            subresource: None,
            force: false,
            status_subresource: false,
            schema: &BUILTIN,
        }
    }

    fn track(&self) -> Track {
        match self.subresource {
            Some("status") => Track::StatusOnly,
            Some(_) => Track::All,
            None if self.status_subresource => Track::NoStatus,
            None => Track::All,
        }
    }

    fn walker(&self) -> Walker<'a> {
        Walker { kind: self.kind, schema: self.schema }
    }
}

/// Records a write that is not an apply (create, update/PUT, JSON/merge/strategic patch) by
/// `req.manager`: `new` is the object about to be stored, `old` the stored one (`None` for a
/// create). Sets `new`'s `metadata.managedFields`:
///
/// * the fields the write added or changed become owned by the manager (one `Update` entry per
///   manager, API version and subresource; its time is `req.now` when it gained fields) and
///   leave every other manager's set; fields it removed leave every set;
/// * the managedFields the request itself carries are the starting point when they are
///   non-empty and valid (that is how clients such as kubectl's client-side-apply upgrade
///   rewrite them); an empty list, or a list of one empty entry, resets them; otherwise (absent
///   or invalid) the stored ones are. Writes to a subresource always start from the stored ones.
///
/// The router must still reimpose server-owned metadata (uid, resourceVersion...) itself.
pub fn record_update(old: Option<&Value>, new: &mut Value, req: &Request) {
    let track = req.track();
    let w = req.walker();
    let stored = || old.map(decode_managed_fields).transpose().ok().flatten().unwrap_or_default();
    let mut entries = if req.subresource.is_some() {
        stored()
    } else {
        match new.pointer("/metadata/managedFields") {
            Some(Value::Array(items)) if is_reset(items) => Vec::new(),
            Some(Value::Array(items)) => match decode_entries(items) {
                Ok(e) if !e.is_empty() => e,
                _ => stored(),
            },
            _ => stored(),
        }
    };
    // Compared in place: the walk passes over managedFields (copies of two whole Agents, inventory
    // and all, were a tenth of the API server's CPU at every write).
    let empty = w.empty_object();
    let cmp = filter_comparison(w.compare(old.unwrap_or(&empty), new), track);
    let changed = cmp.added.union(&cmp.modified);
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    if !changed.is_empty() {
        let pos = entries.iter().position(|e| e.same_identity(req.manager, false, req.api_version, req.subresource));
        let previous = pos.map(|i| entries.remove(i).fields).unwrap_or_default();
        entries.push(ManagedEntry {
            manager: req.manager.to_string(),
            operation: "Update".to_string(),
            api_version: req.api_version.to_string(),
            time: Some(req.now.to_string()),
            subresource: req.subresource.map(str::to_string),
            fields: changed.union(&previous),
        });
    }
    entries.retain(|e| !e.fields.is_empty());
    cap_update_managers(&mut entries);
    encode_managed_fields(new, entries);
}

/// `[]` or `[{}]`: the client asks for managedFields to be cleared.
fn is_reset(items: &[Value]) -> bool {
    match items {
        [] => true,
        [only] => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// Server-side apply of `config` (the applied configuration, parsed from YAML or JSON) by
/// `req.manager` onto `live` (`None`: the apply creates the object). Returns the new object
/// with its managedFields, or why not.
///
/// * The applier owns exactly the fields of its configuration afterwards (entry `Apply`).
/// * A field whose value would change and that another manager owns is a conflict, unless
///   `req.force` (then the other manager loses it). Setting the value another manager already
///   set shares the field.
/// * Fields the applier owned before, left out now and owned by no one else, are removed from
///   the object (with the maps and lists this empties); owned by others, they stay.
/// * `apiVersion`, `kind` and server-set metadata are never tracked. With
///   `req.status_subresource`, `status` is ignored (main resource); for the `status`
///   subresource only `status` is applied.
/// * For manager `kubectl` (kubectl apply --server-side), as upstream: conflicts on fields
///   recorded with the same value in the client-side `last-applied-configuration` annotation
///   are forced, and an existing annotation is rewritten to the new configuration.
///
/// The entry's time moves to `req.now` only when the object or the entry changed.
pub fn apply(live: Option<&Value>, config: &Value, req: &Request) -> Result<Value, ApplyError> {
    let Value::Object(cfg_map) = config else {
        return Err(ApplyError::NotAnObject);
    };
    let cfg_version = cfg_map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let cfg_kind = cfg_map.get("kind").and_then(Value::as_str).unwrap_or("");
    if cfg_version != req.api_version || cfg_kind != req.kind {
        let (group, version) = cfg_version.rsplit_once('/').unwrap_or(("", cfg_version));
        return Err(ApplyError::ObjectType {
            group: group.to_string(),
            version: version.to_string(),
            kind: cfg_kind.to_string(),
        });
    }
    if config.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApplyError::ManagedFieldsSet);
    }
    let entries = match live {
        Some(l) => decode_managed_fields(l).map_err(ApplyError::ManagedFields)?,
        None => Vec::new(),
    };
    let live_obj = live.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let track = req.track();
    let mut cfg = cfg_map.clone();
    match track {
        Track::All => {}
        Track::NoStatus => {
            cfg.shift_remove("status");
        }
        Track::StatusOnly => cfg.retain(|k, _| k == "status"),
    }
    let cfg = Value::Object(cfg);

    let first = apply_core(&live_obj, &cfg, entries.clone(), req, req.force, track);
    let (mut obj, entries) = match first {
        Err(CoreError::Conflicts(conflicts)) if req.manager == "kubectl" && !req.force => {
            match last_applied_allowed(&live_obj, req) {
                None => return Err(ApplyError::Conflicts(to_conflicts(&conflicts))),
                Some(allowed) => {
                    let left: Vec<(ManagedEntry, FieldSet)> = conflicts
                        .into_iter()
                        .map(|(e, s)| {
                            let rest = s.difference(&allowed);
                            (e, rest)
                        })
                        .filter(|(_, s)| !s.is_empty())
                        .collect();
                    if !left.is_empty() {
                        return Err(ApplyError::Conflicts(to_conflicts(&left)));
                    }
                    apply_core(&live_obj, &cfg, entries, req, true, track).map_err(CoreError::into_apply)?
                }
            }
        }
        other => other.map_err(CoreError::into_apply)?,
    };

    if req.manager == "kubectl" {
        let has = obj
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(LAST_APPLIED_ANNOTATION))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if has {
            let text = last_applied_text(config);
            if let Some(Value::Object(ann)) = obj.pointer_mut("/metadata/annotations") {
                ann.insert(LAST_APPLIED_ANNOTATION.to_string(), Value::String(text));
            }
        }
    }
    encode_managed_fields(&mut obj, entries);
    Ok(obj)
}

enum CoreError {
    Conflicts(Vec<(ManagedEntry, FieldSet)>),
    Invalid(ListError),
}

impl CoreError {
    fn into_apply(self) -> ApplyError {
        match self {
            CoreError::Conflicts(c) => ApplyError::Conflicts(to_conflicts(&c)),
            CoreError::Invalid(m) => ApplyError::Invalid(m),
        }
    }
}

/// The apply proper: merge, own, prune, then take the changed fields from the other managers.
fn apply_core(
    live: &Value,
    cfg: &Value,
    mut entries: Vec<ManagedEntry>,
    req: &Request,
    force: bool,
    track: Track,
) -> Result<(Value, Vec<ManagedEntry>), CoreError> {
    let w = req.walker();
    let mut merged =
        w.merge(Some(live), cfg, &mut Cursor::default()).map_err(CoreError::Invalid)?.unwrap_or_else(|| json!({}));
    let new_set = filter_set(w.field_set(cfg, true).map_err(CoreError::Invalid)?, track);

    let me = entries.iter().position(|e| e.same_identity(req.manager, true, req.api_version, req.subresource));
    let previous = me.map(|i| entries.remove(i));
    let last_set = previous.as_ref().map(|e| e.fields.clone()).unwrap_or_default();

    let mut owned = new_set.clone();
    for e in &entries {
        owned.union_with(&e.fields);
    }
    let gone = last_set.difference(&owned);
    if !gone.is_empty() {
        w.prune(&mut merged, &gone, &owned, &mut Cursor::default());
    }

    let cmp = filter_comparison(w.compare(live, &merged), track);
    let changed = cmp.added.union(&cmp.modified);
    let mut conflicts = Vec::new();
    for e in &entries {
        let c = e.fields.intersection(&changed);
        if !c.is_empty() {
            conflicts.push((e.clone(), c));
        }
    }
    if !force && !conflicts.is_empty() {
        return Err(CoreError::Conflicts(conflicts));
    }
    for e in &mut entries {
        e.fields = e.fields.difference(&changed).difference(&cmp.removed);
    }
    entries.retain(|e| !e.fields.is_empty());

    // As the API server's field manager: an apply that leaves the object as it was keeps the
    // entry's time (a new entry has none).
    let object_changed = !json_eq(live, &merged);
    let time = match &previous {
        _ if object_changed => Some(req.now.to_string()),
        Some(p) => p.time.clone(),
        None => None,
    };
    entries.push(ManagedEntry {
        manager: req.manager.to_string(),
        operation: "Apply".to_string(),
        api_version: req.api_version.to_string(),
        time,
        subresource: req.subresource.map(str::to_string),
        fields: new_set,
    });
    Ok((merged, entries))
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn fields_v1_docs_example_exact() {
        // The ConfigMap of the Kubernetes "Server-Side Apply" page, created by an apply.
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "test-cm", "namespace": "default", "labels": {"test-label": "test"}},
            "data": {"key": "some value"},
        });
        let obj = apply(None, &config, &req("kubectl", "2010-10-10T00:00:00Z")).unwrap();
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2010-10-10T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:key": {}}, "f:metadata": {"f:labels": {"f:test-label": {}}}},
            }])
        );
        assert_eq!(
            serde_json::to_string(&obj["metadata"]["managedFields"][0]).unwrap(),
            r#"{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2010-10-10T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:key":{}},"f:metadata":{"f:labels":{"f:test-label":{}}}}}"#
        );
        assert_eq!(obj["data"], json!({"key": "some value"}));
        assert_eq!(obj["metadata"]["labels"], json!({"test-label": "test"}));
    }

    #[test]
    fn reapply_unchanged_changes_nothing() {
        let config = cm(json!({"a": "1"}));
        let first = apply(None, &config, &req("kubectl", T0)).unwrap();
        let second = apply(Some(&first), &config, &req("kubectl", T1)).unwrap();
        assert_eq!(second, first);
        assert_eq!(entry(&second, "kubectl", "Apply")["time"], T0);
    }

    #[test]
    fn apply_changing_a_value_bumps_time() {
        let first = apply(None, &cm(json!({"a": "1"})), &req("kubectl", T0)).unwrap();
        let second = apply(Some(&first), &cm(json!({"a": "2"})), &req("kubectl", T1)).unwrap();
        assert_eq!(second["data"], json!({"a": "2"}));
        assert_eq!(entry(&second, "kubectl", "Apply")["time"], T1);
        assert_eq!(entries(&second).len(), 1);
    }

    #[test]
    fn two_managers_share_a_field() {
        let first = apply(None, &cm(json!({"a": "1", "b": "2"})), &req("alice", T0)).unwrap();
        let second = apply(Some(&first), &cm(json!({"a": "1"})), &req("bob", T1)).unwrap();
        assert_eq!(second["data"], first["data"]);
        assert_eq!(fields_text(&second, "alice", "Apply"), r#"{"f:data":{"f:a":{},"f:b":{}}}"#);
        assert_eq!(fields_text(&second, "bob", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        // Alice gives a up: Bob still owns it, it stays.
        let third = apply(Some(&second), &cm(json!({"b": "2"})), &req("alice", T2)).unwrap();
        assert_eq!(third["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(fields_text(&third, "alice", "Apply"), r#"{"f:data":{"f:b":{}}}"#);
        // Bob changing the shared value now would not conflict (he alone owns it).
        let fourth = apply(Some(&third), &cm(json!({"a": "9"})), &req("bob", T2)).unwrap();
        assert_eq!(fourth["data"], json!({"a": "9", "b": "2"}));
    }

    #[test]
    fn force_takes_ownership() {
        let first = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("alice", T0)).unwrap();
        let mut r = req("bob", T1);
        r.force = true;
        let second = apply(Some(&first), &cm(json!({"a": "2"})), &r).unwrap();
        assert_eq!(second["data"], json!({"a": "2", "b": "1"}));
        assert_eq!(fields_text(&second, "alice", "Apply"), r#"{"f:data":{"f:b":{}}}"#);
        assert_eq!(fields_text(&second, "bob", "Apply"), r#"{"f:data":{"f:a":{}}}"#);
        // Alice re-applying her old value now conflicts with Bob.
        let c = conflicts(apply(Some(&second), &cm(json!({"a": "1", "b": "1"})), &req("alice", T2)));
        assert_eq!(c.message(), "Apply failed with 1 conflict: conflict with \"bob\": .data.a");
    }

    #[test]
    fn update_then_apply_conflict() {
        let spec = |x: i64| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"x": x, "y": 1}});
        let r = |m: &'static str, now: &'static str| Request::new(m, "example.com/v1", "Widget", now);
        let created = apply(None, &spec(1), &r("kubectl", T0)).unwrap();
        let mut edited = created.clone();
        edited["spec"]["x"] = json!(5);
        record_update(Some(&created), &mut edited, &r("kubectl-edit", T1));
        assert_eq!(fields_text(&edited, "kubectl-edit", "Update"), r#"{"f:spec":{"f:x":{}}}"#);
        assert_eq!(fields_text(&edited, "kubectl", "Apply"), r#"{"f:spec":{"f:y":{}}}"#);
        let c = conflicts(apply(Some(&edited), &spec(2), &r("kubectl", T2)));
        assert_eq!(
            c.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using example.com/v1: .spec.x"
        );
        assert_eq!(c.causes()[0].message.as_deref(), Some("conflict with \"kubectl-edit\" using example.com/v1"));
        // Applying the edited value shares it instead.
        let shared = apply(Some(&edited), &spec(5), &r("kubectl", T2)).unwrap();
        assert_eq!(fields_text(&shared, "kubectl", "Apply"), r#"{"f:spec":{"f:x":{},"f:y":{}}}"#);
        assert_eq!(fields_text(&shared, "kubectl-edit", "Update"), r#"{"f:spec":{"f:x":{}}}"#);
    }

    #[test]
    fn record_update_moves_and_drops_ownership() {
        let created = apply(None, &cm(json!({"a": "1", "b": "1"})), &req("kubectl", T0)).unwrap();
        let mut edited = created.clone();
        edited["data"] = json!({"a": "2"});
        record_update(Some(&created), &mut edited, &req("kubectl-edit", T1));
        assert_eq!(entries(&edited).len(), 1, "kubectl lost a (changed) and b (removed): {edited:#}");
        assert_eq!(fields_text(&edited, "kubectl-edit", "Update"), r#"{"f:data":{"f:a":{}}}"#);
        // A further update by the same manager merges into its entry and moves its time.
        let mut again = edited.clone();
        again["data"]["c"] = json!("3");
        record_update(Some(&edited), &mut again, &req("kubectl-edit", T2));
        let e = entry(&again, "kubectl-edit", "Update");
        assert_eq!(serde_json::to_string(&e["fieldsV1"]).unwrap(), r#"{"f:data":{"f:a":{},"f:c":{}}}"#);
        assert_eq!(e["time"], T2);
        // A no-op update changes nothing.
        let mut same = again.clone();
        record_update(Some(&again), &mut same, &req("someone", T2));
        assert_eq!(same, again);
    }

    #[test]
    fn record_update_honours_and_resets_request_managed_fields() {
        let created = apply(None, &cm(json!({"a": "1"})), &req("kubectl", T0)).unwrap();
        // Cleared with an empty list.
        let mut cleared = created.clone();
        cleared["metadata"]["managedFields"] = json!([]);
        record_update(Some(&created), &mut cleared, &req("kubectl-patch", T1));
        assert!(cleared["metadata"].get("managedFields").is_none(), "{cleared:#}");
        // Cleared with one empty entry.
        let mut cleared = created.clone();
        cleared["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&created), &mut cleared, &req("kubectl-patch", T1));
        assert!(cleared["metadata"].get("managedFields").is_none());
        // Rewritten (what kubectl's client-side-apply upgrade sends as a JSON patch).
        let mut rewritten = created.clone();
        rewritten["metadata"]["managedFields"] = json!([{
            "manager": "someone", "operation": "Update", "apiVersion": "v1", "time": T0,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}},
        }]);
        record_update(Some(&created), &mut rewritten, &req("kubectl", T1));
        assert_eq!(rewritten["metadata"]["managedFields"].as_array().unwrap().len(), 1);
        assert_eq!(entry(&rewritten, "someone", "Update")["time"], T0);
        // Invalid ones are ignored: the stored ones stay.
        let mut bad = created.clone();
        bad["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Frob"}]);
        record_update(Some(&created), &mut bad, &req("kubectl", T1));
        assert_eq!(bad, created);
        // Ignored for subresources.
        let mut sub = created.clone();
        sub["metadata"]["managedFields"] = json!([]);
        let mut r = req("kubectl", T1);
        r.subresource = Some("status");
        record_update(Some(&created), &mut sub, &r);
        assert_eq!(sub, created);
    }

    #[test]
    fn apply_refusals() {
        let mut wrong = cm(json!({"a": "1"}));
        wrong["kind"] = json!("Secret");
        let e = apply(None, &wrong, &req("kubectl", T0)).unwrap_err();
        assert!(matches!(&e, ApplyError::ObjectType { group, .. } if group.is_empty()), "{e:?}");
        assert_eq!(e.to_string(), "invalid object type: /v1, Kind=Secret");
        let e = apply(None, &json!({"apiVersion": "apps/v1", "kind": "ConfigMap"}), &req("kubectl", T0)).unwrap_err();
        assert_eq!(e.to_string(), "invalid object type: apps/v1, Kind=ConfigMap");
        let mut with_mf = cm(json!({}));
        with_mf["metadata"]["managedFields"] = json!([]);
        let e = apply(None, &with_mf, &req("kubectl", T0)).unwrap_err();
        assert_eq!(e.to_string(), "metadata.managedFields must be nil");
        assert_eq!(e.http_status(), 400);
    }
}
