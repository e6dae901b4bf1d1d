//! Writes that store a typed object's own JSON text, without going through `serde_json::Value`.
//!
//! A controller reads an object, changes some of it and writes it back naming the resourceVersion it
//! read. When that version is still the live one, what the store would compute through its general
//! path (server metadata from the live object, the status or the spec kept from it, generation bumped
//! when the spec moved) is, in the common case, just the object the controller sent with a new
//! resourceVersion. [`plan`] checks that case on the two texts (the live one and the object's
//! serialization), comparing top-level fields as raw JSON slices, and says where in the object's text
//! the resourceVersion is, so that the writer only splices the new one in. Whenever the texts do not
//! prove it (different server metadata, a spec that moved, a field spelled differently, an object
//! being deleted), [`plan`] answers `None` and the caller takes the general path: this is only a
//! shortcut, never a different result.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// What a write replaces in the live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Metadata and spec; the live status stays (an update).
    Object,
    /// The status only (an update of the status subresource).
    Status,
    /// Metadata, spec and status together.
    All,
}

/// A write [`plan`] proved to be the object's own text.
#[derive(Debug, PartialEq, Eq)]
pub enum Verbatim {
    /// The object is the live one: nothing to write.
    Unchanged,
    /// Store the object's text with its resourceVersion (the bytes at `rv_at`) replaced by the new one.
    Store { rv_at: std::ops::Range<usize>, owners_changed: bool },
}

/// The metadata fields the store owns, plus what decides the garbage collector's records.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerMetadata<'a> {
    #[serde(borrow)]
    uid: Option<&'a str>,
    #[serde(borrow)]
    creation_timestamp: Option<&'a str>,
    #[serde(borrow)]
    resource_version: Option<&'a str>,
    generation: Option<i64>,
    #[serde(borrow)]
    deletion_timestamp: Option<&'a str>,
    #[serde(borrow)]
    owner_references: Option<&'a RawValue>,
    #[serde(borrow)]
    labels: Option<&'a RawValue>,
    #[serde(borrow)]
    annotations: Option<&'a RawValue>,
    #[serde(borrow)]
    finalizers: Option<&'a RawValue>,
}

impl ServerMetadata<'_> {
    /// The store drops empty labels, annotations, finalizers and ownerReferences; an object carrying
    /// one is normalized by the general path.
    fn has_empty_collection(&self) -> bool {
        [self.owner_references, self.labels, self.annotations, self.finalizers]
            .into_iter()
            .flatten()
            .any(|raw| matches!(raw.get(), "{}" | "[]" | "null"))
    }
}

type TopLevel<'a> = BTreeMap<&'a str, &'a RawValue>;

/// Decides whether writing `part` of `obj_text` over `live_text` stores `obj_text` itself (with a new
/// resourceVersion). Both must name the same resourceVersion: the caller checked that the object was
/// read at the live version.
pub fn plan(live_text: &str, obj_text: &str, part: Part) -> Option<Verbatim> {
    let live: TopLevel = serde_json::from_str(live_text).ok()?;
    let obj: TopLevel = serde_json::from_str(obj_text).ok()?;
    let (live_meta_raw, obj_meta_raw) = (live.get("metadata")?, obj.get("metadata")?);
    let live_meta: ServerMetadata = serde_json::from_str(live_meta_raw.get()).ok()?;
    let obj_meta: ServerMetadata = serde_json::from_str(obj_meta_raw.get()).ok()?;
    let same_server_metadata = live_meta.uid == obj_meta.uid
        && live_meta.creation_timestamp == obj_meta.creation_timestamp
        && live_meta.resource_version == obj_meta.resource_version
        && live_meta.generation == obj_meta.generation;
    if !same_server_metadata
        || obj_meta.resource_version.is_none()
        || live_meta.deletion_timestamp.is_some()
        || obj_meta.deletion_timestamp.is_some()
        || obj_meta.has_empty_collection()
    {
        return None;
    }
    // Everything outside metadata and status (the spec, or a Secret's data) must be the live one's:
    // otherwise the generation moves, or (for a status write) the live spec would be kept.
    fn rest<'a>(m: &TopLevel<'a>) -> Vec<(&'a str, &'a str)> {
        m.iter().filter(|(k, _)| !matches!(**k, "metadata" | "status")).map(|(k, v)| (*k, v.get())).collect()
    }
    if rest(&live) != rest(&obj) {
        return None;
    }
    let same = |key: &str| live.get(key).map(|r| r.get()) == obj.get(key).map(|r| r.get());
    let kept_part_matches = match part {
        Part::Object => same("status"),
        Part::Status => same("metadata"),
        Part::All => true,
    };
    if !kept_part_matches {
        return None;
    }
    if same("metadata") && same("status") {
        return Some(Verbatim::Unchanged);
    }
    let rv_at = resource_version_at(obj_text, obj_meta_raw, obj_meta.resource_version?)?;
    let owners_changed = live_meta.owner_references.map(RawValue::get) != obj_meta.owner_references.map(RawValue::get);
    Some(Verbatim::Store { rv_at, owners_changed })
}

/// Where, in `text`, the metadata's own `"resourceVersion":"…"` member is. `meta` is the metadata
/// slice of `text`. ObjectMeta serializes its fields in alphabetical order, and only `selfLink` and
/// `uid` (strings, whose quotes inside are escaped) come after `resourceVersion`: the member's last
/// occurrence in the metadata text is the member itself.
fn resource_version_at(text: &str, meta: &RawValue, rv: &str) -> Option<std::ops::Range<usize>> {
    let meta = meta.get();
    let start = (meta.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let member = format!("\"resourceVersion\":\"{rv}\"");
    let at = start + meta.rfind(&member)?;
    Some(at..at + member.len())
}

/// `text` with the resourceVersion member at `rv_at` naming `rv` instead.
pub fn with_resource_version(text: &str, rv_at: &std::ops::Range<usize>, rv: i64) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..rv_at.start]);
    out.push_str(&format!("\"resourceVersion\":\"{rv}\""));
    out.push_str(&text[rv_at.end..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Thing",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 2,
                         "annotations": {"note": "\"resourceVersion\":\"7\""}},
            "spec": {"x": 1},
            "status": {"phase": "A"}
        })
    }

    fn plan_of(live: &serde_json::Value, obj: &serde_json::Value, part: Part) -> Option<Verbatim> {
        plan(&live.to_string(), &obj.to_string(), part)
    }

    #[test]
    fn a_status_change_stores_the_object_text() {
        let mut obj = live();
        obj["status"]["phase"] = json!("B");
        for part in [Part::Status, Part::All] {
            let Some(Verbatim::Store { rv_at, owners_changed: false }) = plan_of(&live(), &obj, part) else {
                panic!("{part:?}: not verbatim");
            };
            let text = with_resource_version(&obj.to_string(), &rv_at, 8);
            let stored: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut expected = obj.clone();
            expected["metadata"]["resourceVersion"] = json!("8");
            assert_eq!(stored, expected, "{part:?}");
        }
        // An update keeps the live status: the general path decides.
        assert_eq!(plan_of(&live(), &obj, Part::Object), None);
    }

    #[test]
    fn the_same_object_is_unchanged() {
        for part in [Part::Object, Part::Status, Part::All] {
            assert_eq!(plan_of(&live(), &live(), part), Some(Verbatim::Unchanged));
        }
    }

    #[test]
    fn a_spec_change_or_other_server_metadata_takes_the_general_path() {
        let mut spec = live();
        spec["spec"]["x"] = json!(2);
        let mut generation = live();
        generation["metadata"]["generation"] = json!(3);
        let mut uid = live();
        uid["metadata"]["uid"] = json!("u2");
        let mut deleting = live();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
        let mut empty_labels = live();
        empty_labels["metadata"]["labels"] = json!({});
        for obj in [spec, generation, uid, deleting, empty_labels] {
            assert_eq!(plan_of(&live(), &obj, Part::All), None, "{obj}");
        }
        // A status write whose metadata differs would keep the live metadata.
        let mut labelled = live();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert_eq!(plan_of(&live(), &labelled, Part::Status), None);
        assert!(matches!(plan_of(&live(), &labelled, Part::All), Some(Verbatim::Store { owners_changed: false, .. })));
    }

    #[test]
    fn new_owners_are_reported() {
        let mut obj = live();
        obj["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "O", "name": "o", "uid": "o1"}]);
        assert!(matches!(plan_of(&live(), &obj, Part::Object), Some(Verbatim::Store { owners_changed: true, .. })));
    }

    #[test]
    fn the_resource_version_member_is_found_in_typed_metadata() {
        // k8s-openapi's ObjectMeta, with an annotation and a managed field spelling the same member.
        let mut meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("a".into()),
            resource_version: Some("7".into()),
            uid: Some("u".into()),
            self_link: Some("/x".into()),
            ..Default::default()
        };
        meta.annotations = Some([("k".to_string(), "\"resourceVersion\":\"7\"".to_string())].into());
        let secret = k8s_openapi::api::core::v1::Secret { metadata: meta, ..Default::default() };
        let text = serde_json::to_string(&secret).unwrap();
        let top: TopLevel = serde_json::from_str(&text).unwrap();
        let at = resource_version_at(&text, top["metadata"], "7").unwrap();
        let changed: serde_json::Value = serde_json::from_str(&with_resource_version(&text, &at, 9)).unwrap();
        assert_eq!(changed["metadata"]["resourceVersion"], "9");
        assert_eq!(changed["metadata"]["annotations"]["k"], "\"resourceVersion\":\"7\"");
    }
}
