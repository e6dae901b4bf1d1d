//! The schemas of the metav1 types and of the core kinds served, written by hand.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::schema::*;
use crate::api::kube::served::Served;

/// Schemas of the metav1 types the kinds refer to.
pub(super) fn meta_schemas() -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let mut put = |name: &str, v: Value| {
        m.insert(format!("{META}{name}"), v);
    };
    put(
        "Time",
        json!({"type": "string", "format": "date-time",
               "description": "A timestamp in RFC 3339 form, with second precision (`2024-05-01T10:00:00Z`)."}),
    );
    put(
        "MicroTime",
        json!({"type": "string", "format": "date-time",
               "description": "A timestamp in RFC 3339 form, with microsecond precision."}),
    );
    put(
        "FieldsV1",
        json!({"type": "object", "description": "A set of fields, in the trie form server-side apply uses."}),
    );
    put(
        "Patch",
        json!({"type": "object", "description": "The body of a PATCH request (JSON patch, merge patch, or apply configuration)."}),
    );
    put(
        "ManagedFieldsEntry",
        obj(
            "Which fields a manager owns, and through which operation.",
            json!({
                "apiVersion": string("Version of the schema the fields are expressed in."),
                "fieldsType": string("Format of fieldsV1; only `FieldsV1` exists."),
                "fieldsV1": ref_prop(&format!("{META}FieldsV1"), "The set of fields owned."),
                "manager": string("Name of the manager (field manager) owning the fields."),
                "operation": string("`Apply` or `Update`."),
                "subresource": string("Subresource the fields were set through, empty for the main resource."),
                "time": ref_prop(&format!("{META}Time"), "When the fields were last changed."),
            }),
        ),
    );
    put(
        "OwnerReference",
        with(
            with(
                obj(
                    "Identifies an owning object; when it is deleted, this one is garbage collected.",
                    json!({
                        "apiVersion": with(string("API version of the owner."), "default", json!("")),
                        "blockOwnerDeletion": boolean("If true, the owner cannot be deleted (foreground) before this object is."),
                        "controller": boolean("If true, the owner is the managing controller."),
                        "kind": with(string("Kind of the owner."), "default", json!("")),
                        "name": with(string("Name of the owner."), "default", json!("")),
                        "uid": with(string("UID of the owner."), "default", json!("")),
                    }),
                ),
                "required",
                json!(["apiVersion", "kind", "name", "uid"]),
            ),
            "x-kubernetes-map-type",
            json!("atomic"),
        ),
    );
    put(
        "ObjectMeta",
        obj(
            "Metadata every persisted object has.",
            json!({
                "annotations": string_map("Unstructured key/value data stored with the object."),
                "creationTimestamp": ref_prop(&format!("{META}Time"), "When the object was created (set by the server, read-only)."),
                "deletionGracePeriodSeconds": int("int64", "Seconds the object is given to terminate gracefully once deleted (read-only)."),
                "deletionTimestamp": ref_prop(&format!("{META}Time"), "When the object will be deleted; set when deletion is requested (read-only)."),
                "finalizers": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "description": "Conditions to satisfy before the object is removed from storage.",
                    "x-kubernetes-list-type": "set",
                    "x-kubernetes-patch-strategy": "merge"
                },
                "generateName": string("Prefix from which the server generates a unique name when name is empty."),
                "generation": int("int64", "Sequence number of the desired state (spec) generation (read-only)."),
                "labels": string_map("Key/value pairs used to organize and select objects."),
                "managedFields": {
                    "type": "array",
                    "items": r(&format!("{META}ManagedFieldsEntry")),
                    "description": "Field ownership, maintained by server-side apply.",
                    "x-kubernetes-list-type": "atomic"
                },
                "name": string("Name of the object, unique within its namespace (or cluster, for cluster-scoped kinds). Cannot be updated."),
                "namespace": string("Namespace of the object; empty for cluster-scoped kinds. Cannot be updated."),
                "ownerReferences": {
                    "type": "array",
                    "items": r(&format!("{META}OwnerReference")),
                    "description": "Objects this object depends on (garbage collection).",
                    "x-kubernetes-list-map-keys": ["uid"],
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-patch-merge-key": "uid",
                    "x-kubernetes-patch-strategy": "merge"
                },
                "resourceVersion": string("Opaque version of the object, for optimistic concurrency and watches (read-only)."),
                "selfLink": string("Deprecated, always empty."),
                "uid": string("Unique identifier of this object over time (read-only)."),
            }),
        ),
    );
    put(
        "ListMeta",
        obj(
            "Metadata of a list response.",
            json!({
                "continue": string("Token to fetch the next page, if the list was truncated by `limit`."),
                "remainingItemCount": int("int64", "Number of items after this page, when known."),
                "resourceVersion": string("Version of the collection the list was read at."),
                "selfLink": string("Deprecated, always empty."),
            }),
        ),
    );
    put(
        "StatusCause",
        obj(
            "One cause of an error.",
            json!({
                "field": string("Path of the field at fault, if any (`spec.hostname`)."),
                "message": string("Human-readable description of the cause."),
                "reason": string("Machine-readable cause (`FieldValueInvalid`, ...)."),
            }),
        ),
    );
    put(
        "StatusDetails",
        obj(
            "Details of an error response.",
            json!({
                "causes": {"type": "array", "items": r(&format!("{META}StatusCause")),
                           "description": "Individual causes of the error.", "x-kubernetes-list-type": "atomic"},
                "group": string("Group of the resource the error is about."),
                "kind": string("Kind (resource) the error is about."),
                "name": string("Name of the object the error is about."),
                "retryAfterSeconds": int("int32", "Seconds to wait before retrying, if the operation may succeed later."),
                "uid": string("UID of the object the error is about."),
            }),
        ),
    );
    let (api_version, kind) = type_meta_props();
    put(
        "Status",
        with(
            obj(
                "Result of an operation that returns no object (errors, deletions).",
                json!({
                    "apiVersion": api_version,
                    "code": int("int32", "HTTP status code."),
                    "details": ref_prop(&format!("{META}StatusDetails"), "Extra data about the error."),
                    "kind": kind,
                    "message": string("Human-readable description of the result."),
                    "metadata": ref_obj(&format!("{META}ListMeta"), LIST_METADATA_DESC),
                    "reason": string("Machine-readable reason (`NotFound`, `AlreadyExists`, `Invalid`, ...)."),
                    "status": string("`Success` or `Failure`."),
                }),
            ),
            "x-kubernetes-group-version-kind",
            gvk_ext("", "v1", "Status"),
        ),
    );
    put(
        "Preconditions",
        obj(
            "Conditions the object must meet for a deletion to proceed.",
            json!({
                "resourceVersion": string("Required resourceVersion."),
                "uid": string("Required UID."),
            }),
        ),
    );
    let (api_version, kind) = type_meta_props();
    put(
        "DeleteOptions",
        with(
            obj(
                "Options of a DELETE request.",
                json!({
                    "apiVersion": api_version,
                    "dryRun": {"type": "array", "items": {"type": "string", "default": ""},
                               "description": "`All` to validate without persisting.", "x-kubernetes-list-type": "atomic"},
                    "gracePeriodSeconds": int("int64", "Seconds before the object is deleted."),
                    "ignoreStoreReadErrorWithClusterBreakingPotential": boolean("Delete even if the stored object cannot be read."),
                    "kind": kind,
                    "orphanDependents": boolean("Deprecated: use propagationPolicy."),
                    "preconditions": ref_prop(&format!("{META}Preconditions"), "Must be fulfilled before the deletion proceeds."),
                    "propagationPolicy": string("`Orphan`, `Background` or `Foreground` garbage collection of dependents."),
                }),
            ),
            "x-kubernetes-group-version-kind",
            gvk_ext("", "v1", "DeleteOptions"),
        ),
    );
    m
}

/// Hand-written schemas of the core kinds we serve (and their parts).
pub(super) fn core_schemas(s: &Served) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    let core = |k: &str| schema_name("", "v1", k);
    let coord = |k: &str| schema_name("coordination.k8s.io", "v1", k);
    let time = format!("{META}Time");
    let micro = format!("{META}MicroTime");
    match (s.group.as_str(), s.kind.as_str()) {
        ("", "Secret") => {
            m.insert(
                core("Secret"),
                resource_schema(
                    s,
                    "Holds secret data (credentials, pull secrets, keys).",
                    json!({
                        "data": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                                 "description": "Secret data; values are base64-encoded."},
                        "immutable": boolean("If true, data cannot be changed once set."),
                        "stringData": string_map("Write-only convenience: plain-text values merged into data on write."),
                        "type": string("Type of the secret, used for programmatic handling (`Opaque`, `kubernetes.io/dockerconfigjson`, ...)."),
                    }),
                    &[],
                ),
            );
        }
        ("", "Namespace") => {
            m.insert(
                core("Namespace"),
                resource_schema(
                    s,
                    "A scope for names of namespaced objects.",
                    json!({
                        "spec": ref_obj(&core("NamespaceSpec"), "Desired state of the namespace."),
                        "status": ref_obj(&core("NamespaceStatus"), "Observed state of the namespace."),
                    }),
                    &[],
                ),
            );
            m.insert(
                core("NamespaceSpec"),
                obj(
                    "Desired state of a namespace.",
                    json!({"finalizers": {"type": "array", "items": {"type": "string", "default": ""},
                                          "description": "Must be empty before the namespace is removed.",
                                          "x-kubernetes-list-type": "atomic"}}),
                ),
            );
            m.insert(
                core("NamespaceStatus"),
                obj(
                    "Observed state of a namespace.",
                    json!({
                        "conditions": {"type": "array", "items": r(&core("NamespaceCondition")),
                                       "description": "Latest observations of the namespace's state.",
                                       "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map",
                                       "x-kubernetes-patch-merge-key": "type", "x-kubernetes-patch-strategy": "merge"},
                        "phase": {"type": "string", "enum": ["Active", "Terminating"],
                                  "description": "Lifecycle phase of the namespace."},
                    }),
                ),
            );
            m.insert(
                core("NamespaceCondition"),
                with(
                    obj(
                        "One observation of a namespace's state.",
                        json!({
                            "lastTransitionTime": ref_prop(&time, "When the condition last changed status."),
                            "message": string("Human-readable details."),
                            "reason": string("Machine-readable reason of the last transition."),
                            "status": with(string("`True`, `False` or `Unknown`."), "default", json!("")),
                            "type": with(string("Type of the condition."), "default", json!("")),
                        }),
                    ),
                    "required",
                    json!(["type", "status"]),
                ),
            );
        }
        ("", "Event") => {
            m.insert(
                core("Event"),
                resource_schema(
                    s,
                    "A report of something that happened to an object.",
                    json!({
                        "action": string("What was done (or failed) about the object."),
                        "count": int("int32", "How many times the event occurred."),
                        "eventTime": ref_prop(&micro, "When the event was first observed."),
                        "firstTimestamp": ref_prop(&time, "When the event was first recorded."),
                        "involvedObject": ref_obj(&core("ObjectReference"), "The object the event is about."),
                        "lastTimestamp": ref_prop(&time, "When the event was last recorded."),
                        "message": string("Human-readable description of the event."),
                        "reason": string("Short, machine-readable reason for the event."),
                        "related": ref_prop(&core("ObjectReference"), "Secondary object, if any."),
                        "reportingComponent": with(string("Controller that emitted the event."), "default", json!("")),
                        "reportingInstance": with(string("Instance (host) of the reporting controller."), "default", json!("")),
                        "series": ref_prop(&core("EventSeries"), "Data about a series of repeated events."),
                        "source": ref_obj(&core("EventSource"), "Component reporting the event (deprecated in favour of reportingComponent)."),
                        "type": string("`Normal` or `Warning`."),
                    }),
                    &["metadata", "involvedObject"],
                ),
            );
            m.insert(
                core("EventSeries"),
                obj(
                    "A series of repeated events.",
                    json!({
                        "count": int("int32", "Occurrences in the series so far."),
                        "lastObservedTime": ref_prop(&micro, "When the last occurrence was observed."),
                    }),
                ),
            );
            m.insert(
                core("EventSource"),
                obj(
                    "Where an event comes from.",
                    json!({
                        "component": string("Component that generated the event."),
                        "host": string("Host (node) the event was generated on."),
                    }),
                ),
            );
            m.insert(
                core("ObjectReference"),
                with(
                    obj(
                        "Reference to an object.",
                        json!({
                            "apiVersion": string("API version of the referent."),
                            "fieldPath": string("Part of the object the reference points at, if any (`spec.containers{name}`)."),
                            "kind": string("Kind of the referent."),
                            "name": string("Name of the referent."),
                            "namespace": string("Namespace of the referent."),
                            "resourceVersion": string("Version of the referent the reference was made at."),
                            "uid": string("UID of the referent."),
                        }),
                    ),
                    "x-kubernetes-map-type",
                    json!("atomic"),
                ),
            );
        }
        ("coordination.k8s.io", "Lease") => {
            m.insert(
                coord("Lease"),
                resource_schema(
                    s,
                    "A lease, used for leader election.",
                    json!({"spec": ref_obj(&coord("LeaseSpec"), "The lease's holder and timing.")}),
                    &[],
                ),
            );
            m.insert(
                coord("LeaseSpec"),
                obj(
                    "The holder and timing of a lease.",
                    json!({
                        "acquireTime": ref_prop(&micro, "When the current holder acquired the lease."),
                        "holderIdentity": string("Identity of the current holder."),
                        "leaseDurationSeconds": int("int32", "Seconds candidates wait before forcibly acquiring the lease (since renewTime)."),
                        "leaseTransitions": int("int32", "How many times the lease changed holders."),
                        "preferredHolder": string("Holder the coordinated strategy wants to hand the lease to."),
                        "renewTime": ref_prop(&micro, "When the holder last renewed the lease."),
                        "strategy": string("Strategy for picking the leader in coordinated leader election."),
                    }),
                ),
            );
        }
        _ => {
            m.insert(
                kind_schema_name(s),
                resource_schema(s, &format!("{} (schema not published).", s.kind), json!({}), &[]),
            );
        }
    }
    m.insert(list_schema_name(s), list_schema(s, &kind_schema_name(s)));
    m
}
