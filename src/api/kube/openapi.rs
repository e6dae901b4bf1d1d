//! OpenAPI documents for the served kinds.
//!
//! * v3 (what kubectl 1.32 uses): `/openapi/v3` is [`v3_index`] (one
//!   `serverRelativeURL` per group version, carrying a content hash), and
//!   `/openapi/v3/{api/v1 | apis/g/v}` is [`v3_group_version`]. Serve both as
//!   `application/json` (clients ask the GV documents with
//!   `Accept: application/json`; a `?hash=` that matches may be answered with
//!   `Cache-Control: public, immutable`).
//! * v2 (`/openapi/v2`, swagger 2.0): [`v2`]. kubectl only asks for it with
//!   `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`
//!   (and decodes protobuf); answer such requests 406 and serve the JSON only
//!   to clients that accept `application/json`.
//!
//! What kubectl relies on (checked against kubectl 1.32 sources):
//! * `kubectl explain`: finds the GV in the index, takes the
//!   `x-kubernetes-group-version-kind` of an operation on
//!   `/apis/g/v[/namespaces/{namespace}]/plural[/{name}]`, then the component
//!   schema whose `x-kubernetes-group-version-kind` list contains that GVK,
//!   following `$ref`/`allOf`/`items`/`additionalProperties`.
//! * Field validation (`kubectl apply|create|edit`, default `--validate=strict`):
//!   looks for a PATCH operation whose `x-kubernetes-group-version-kind` is
//!   the object's GVK and which lists a `fieldValidation` query parameter
//!   itself (path-level parameters are not looked at). When found, kubectl
//!   skips client-side validation and sends `?fieldValidation=Strict`.
//! * Client-side apply: strategic merge patch only when the PATCH request
//!   body lists `application/strategic-merge-patch+json` (core kinds here);
//!   CRs get JSON merge patches.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::discovery::DEFAULT_GIT_VERSION;
use super::served::Served;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";
const V3_REF: &str = "#/components/schemas/";
const V2_REF: &str = "#/definitions/";

fn r(name: &str) -> Value {
    json!({"$ref": format!("{V3_REF}{name}")})
}

/// A property referring to another schema, with its own description
/// (OpenAPI 3.0 ignores siblings of `$ref`, hence the `allOf` wrapper).
fn ref_prop(name: &str, description: &str) -> Value {
    json!({"allOf": [r(name)], "description": description})
}

fn ref_obj(name: &str, description: &str) -> Value {
    json!({"allOf": [r(name)], "default": {}, "description": description})
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn int(format: &str, description: &str) -> Value {
    json!({"type": "integer", "format": format, "description": description})
}

fn string_map(description: &str) -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description})
}

fn obj(description: &str, props: Value) -> Value {
    json!({"type": "object", "description": description, "properties": props})
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v.as_object_mut().unwrap().insert(key.into(), val);
    v
}

fn gvk_ext(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

const API_VERSION_DESC: &str =
    "Versioned schema of this representation of an object (group/version), e.g. `agent-install.openshift.io/v1beta1`.";
const KIND_DESC: &str = "Kind of the object, in CamelCase (e.g. `Agent`).";
const METADATA_DESC: &str = "Standard object metadata: name, namespace, labels, annotations, ...";
const LIST_METADATA_DESC: &str = "Standard list metadata (resourceVersion, continue token).";

fn type_meta_props() -> (Value, Value) {
    (string(API_VERSION_DESC), string(KIND_DESC))
}

/// Schemas of the metav1 types the kinds refer to.
fn meta_schemas() -> BTreeMap<String, Value> {
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

/// Standard resource schema: apiVersion, kind, metadata + `props`.
fn resource_schema(s: &Served, description: &str, props: Value, required: &[&str]) -> Value {
    let (api_version, kind) = type_meta_props();
    let mut p = props.as_object().cloned().unwrap_or_default();
    p.insert("apiVersion".into(), api_version);
    p.insert("kind".into(), kind);
    p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
    let mut v = json!({
        "type": "object",
        "description": description,
        "properties": p,
        "x-kubernetes-group-version-kind": [s.gvk_json()],
    });
    if !required.is_empty() {
        v["required"] = json!(required);
    }
    v
}

fn list_schema(s: &Served, item_schema: &str) -> Value {
    let (api_version, kind) = type_meta_props();
    json!({
        "type": "object",
        "description": format!("{} is a list of {}.", s.list_kind, s.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": api_version,
            "items": {"type": "array", "items": r(item_schema),
                      "description": format!("The {}.", s.plural)},
            "kind": kind,
            "metadata": ref_obj(&format!("{META}ListMeta"), LIST_METADATA_DESC),
        },
        "x-kubernetes-group-version-kind": [s.list_gvk_json()],
    })
}

/// Schema name the API server gives a kind: core `io.k8s.api.core.v1.Secret`,
/// `io.k8s.api.coordination.v1.Lease`, CRDs by reversed group
/// (`io.openshift.agent-install.v1beta1.InfraEnv`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() {
        return format!("io.k8s.api.core.{version}.{kind}");
    }
    if let Some(g) = group.strip_suffix(".k8s.io")
        && !g.contains('.')
    {
        return format!("io.k8s.api.{g}.{version}.{kind}");
    }
    let rev: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", rev.join("."))
}

fn kind_schema_name(s: &Served) -> String {
    schema_name(&s.group, &s.version, &s.kind)
}

fn list_schema_name(s: &Served) -> String {
    schema_name(&s.group, &s.version, &s.list_kind)
}

/// Hand-written schemas of the core kinds we serve (and their parts).
fn core_schemas(s: &Served) -> BTreeMap<String, Value> {
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

/// The served version's `openAPIV3Schema` of the CRD that defines `s`.
fn crd_schema<'a>(s: &Served, crds: &'a [Value]) -> Option<&'a Value> {
    crds.iter()
        .filter(|c| c["spec"]["group"] == s.group.as_str() && c["spec"]["names"]["kind"] == s.kind.as_str())
        .flat_map(|c| c["spec"]["versions"].as_array().into_iter().flatten())
        .find(|v| v["name"] == s.version.as_str())
        .and_then(|v| v.get("schema"))
        .and_then(|v| v.get("openAPIV3Schema"))
}

/// Walks a structural schema, applying `f` to every (sub)schema, children
/// first.
fn walk_schema(v: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Value::Object(m) = v else { return };
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        for p in props.values_mut() {
            walk_schema(p, f);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child @ Value::Object(_)) = m.get_mut(key) {
            walk_schema(child, f);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = m.get_mut(key) {
            for child in a {
                walk_schema(child, f);
            }
        }
    }
    f(m);
}

fn crd_kind_schema(s: &Served, crds: &[Value]) -> Value {
    let Some(schema) = crd_schema(s, crds) else {
        return json!({"type": "object", "x-kubernetes-group-version-kind": [s.gvk_json()]});
    };
    let mut v = schema.clone();
    // Unfold the structural shorthands as the API server does.
    walk_schema(&mut v, &mut |m| {
        if m.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !m.contains_key("anyOf") {
            m.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
        }
        if m.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
            let (api_version, kind) = type_meta_props();
            let props = m.entry("properties").or_insert_with(|| json!({}));
            if let Value::Object(p) = props {
                p.insert("apiVersion".into(), api_version);
                p.insert("kind".into(), kind);
                p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
            }
            let req = m.entry("required").or_insert_with(|| json!([]));
            if let Value::Array(a) = req {
                for k in ["kind", "apiVersion"] {
                    if !a.iter().any(|x| x == k) {
                        a.push(k.into());
                    }
                }
            }
        }
    });
    let m = v.as_object_mut().unwrap();
    let (api_version, kind) = type_meta_props();
    let props = m.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(p) = props {
        p.insert("apiVersion".into(), api_version);
        p.insert("kind".into(), kind);
        p.insert("metadata".into(), ref_obj(&format!("{META}ObjectMeta"), METADATA_DESC));
    }
    m.insert("x-kubernetes-group-version-kind".into(), json!([s.gvk_json()]));
    v
}

fn is_core(s: &Served) -> bool {
    s.group.is_empty() || s.group.ends_with(".k8s.io") && !s.group.trim_end_matches(".k8s.io").contains('.')
}

/// Every schema of one served kind (kind, list, parts).
fn kind_schemas(s: &Served, crds: &[Value]) -> BTreeMap<String, Value> {
    if crd_schema(s, crds).is_some() || !is_core(s) {
        let mut m = BTreeMap::new();
        m.insert(kind_schema_name(s), crd_kind_schema(s, crds));
        m.insert(list_schema_name(s), list_schema(s, &kind_schema_name(s)));
        m
    } else {
        core_schemas(s)
    }
}

// ---------------------------------------------------------------------------
// Operations

#[derive(Debug, Clone)]
struct Param {
    name: &'static str,
    in_: &'static str,
    ty: &'static str,
    description: &'static str,
}

const fn q(name: &'static str, ty: &'static str, description: &'static str) -> Param {
    Param { name, in_: "query", ty, description }
}

const PRETTY: Param = q("pretty", "string", "If 'true', the output is pretty-printed.");
const DRY_RUN: Param =
    q("dryRun", "string", "`All` to process the request (admission, validation) without persisting it.");
const FIELD_MANAGER: Param =
    q("fieldManager", "string", "Name of the actor making the change, recorded in managedFields.");
const FIELD_VALIDATION: Param = q(
    "fieldValidation",
    "string",
    "What to do with unknown or duplicate fields in the request body: `Ignore` (drop them silently), `Warn` (drop them and return a warning; the default), or `Strict` (reject the request).",
);
const FORCE: Param = q("force", "boolean", "Server-side apply only: take over fields owned by other managers.");
const LIST_PARAMS: &[Param] = &[
    q("allowWatchBookmarks", "boolean", "Watch only: ask for BOOKMARK events."),
    q("continue", "string", "Continue token from a previous page."),
    q("fieldSelector", "string", "Restrict the returned objects by their fields (`metadata.name=x`)."),
    q("labelSelector", "string", "Restrict the returned objects by their labels (`app=x,tier!=y`)."),
    q("limit", "integer", "Maximum number of items per page."),
    q("resourceVersion", "string", "Resource version to read at (list) or to watch from (watch)."),
    q("resourceVersionMatch", "string", "How resourceVersion applies to a list: `Exact` or `NotOlderThan`."),
    q("sendInitialEvents", "boolean", "Watch only: start with synthetic ADDED events for the current state."),
    q("timeoutSeconds", "integer", "Timeout of the list/watch call."),
    q("watch", "boolean", "Watch for changes instead of listing."),
];
const DELETE_PARAMS: &[Param] = &[
    DRY_RUN,
    q("gracePeriodSeconds", "integer", "Seconds before the object is deleted; 0 deletes immediately."),
    q(
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        "boolean",
        "Delete an object whose stored form cannot be read.",
    ),
    q("orphanDependents", "boolean", "Deprecated: use propagationPolicy."),
    q("propagationPolicy", "string", "Garbage collection of dependents: `Orphan`, `Background` or `Foreground`."),
];

#[derive(Debug, Clone)]
struct Op {
    method: &'static str,
    action: &'static str,
    id: String,
    description: String,
    gvk: Value,
    params: Vec<Param>,
    /// (schema name, content types, required)
    body: Option<(String, Vec<&'static str>, bool)>,
    /// (code, description, schema name)
    responses: Vec<(&'static str, &'static str, Option<String>)>,
    list: bool,
}

/// Operation-id fragment of a group version: `CoreV1`,
/// `AgentInstallOpenshiftIoV1beta1`, `CoordinationV1`.
fn gv_id(s: &Served) -> (String, String) {
    let g = if s.group.is_empty() {
        "core"
    } else {
        s.group.strip_suffix(".k8s.io").filter(|g| !g.contains('.')).unwrap_or(&s.group)
    };
    let mut camel = String::new();
    let mut tag = String::new();
    for (i, part) in g.split(['.', '-']).filter(|p| !p.is_empty()).enumerate() {
        let mut c = part.chars();
        let first = c.next().unwrap();
        let up: String = first.to_uppercase().chain(c.clone()).collect();
        camel.push_str(&up);
        if i == 0 {
            tag.push_str(part);
        } else {
            tag.push_str(&up);
        }
    }
    let mut v = s.version.chars();
    let vf = v.next().map(|c| c.to_uppercase().collect::<String>()).unwrap_or_default();
    (format!("{camel}{vf}{}", v.as_str()), format!("{tag}_{}", s.version))
}

fn article(kind: &str) -> &'static str {
    if kind.starts_with(['A', 'E', 'I', 'O', 'U']) { "an" } else { "a" }
}

/// Paths and their operations for one served kind (no deprecated watch
/// paths: watches are `?watch=true` on the list paths).
fn kind_paths(s: &Served) -> Vec<(String, Vec<Op>)> {
    let (gv, _) = gv_id(s);
    let prefix = s.api_prefix();
    let ns = if s.namespaced { "Namespaced" } else { "" };
    let kind = &s.kind;
    let kind_ref = kind_schema_name(s);
    let list_ref = list_schema_name(s);
    let status = format!("{META}Status");
    let mut out = Vec::new();

    let mut patch_types =
        vec!["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];
    if is_builtin_kind(s) {
        patch_types.push("application/strategic-merge-patch+json");
    }

    let op = |method, action, id: String, description: String| Op {
        method,
        action,
        id,
        description,
        gvk: s.gvk_json(),
        params: vec![],
        body: None,
        responses: vec![],
        list: false,
    };
    let ok = |schema: &str| ("200", "OK", Some(schema.to_owned()));

    if s.namespaced && s.has_verb("list") {
        let mut o = op(
            "get",
            "list",
            format!("list{gv}{kind}ForAllNamespaces"),
            format!("list or watch objects of kind {kind}"),
        );
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![ok(&list_ref)];
        o.list = true;
        out.push((format!("{prefix}/{}", s.plural), vec![o]));
    }

    let collection = if s.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", s.plural)
    } else {
        format!("{prefix}/{}", s.plural)
    };
    let mut ops = Vec::new();
    if s.has_verb("list") {
        let mut o = op("get", "list", format!("list{gv}{ns}{kind}"), format!("list or watch objects of kind {kind}"));
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![ok(&list_ref)];
        o.list = true;
        ops.push(o);
    }
    if s.has_verb("create") {
        let mut o = op("post", "post", format!("create{gv}{ns}{kind}"), format!("create {} {kind}", article(kind)));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        o.body = Some((kind_ref.clone(), vec!["*/*"], true));
        o.responses = vec![
            ok(&kind_ref),
            ("201", "Created", Some(kind_ref.clone())),
            ("202", "Accepted", Some(kind_ref.clone())),
        ];
        ops.push(o);
    }
    if s.has_verb("deletecollection") {
        let mut o = op(
            "delete",
            "deletecollection",
            format!("delete{gv}Collection{ns}{kind}"),
            format!("delete collection of {kind}"),
        );
        o.params = DELETE_PARAMS.iter().chain(LIST_PARAMS.iter()).cloned().collect();
        o.params.dedup_by(|a, b| a.name == b.name);
        o.body = Some((format!("{META}DeleteOptions"), vec!["*/*"], false));
        o.responses = vec![ok(&status)];
        ops.push(o);
    }
    if !ops.is_empty() {
        out.push((collection.clone(), ops));
    }

    let item = format!("{collection}/{{name}}");
    let mut ops = Vec::new();
    if s.has_verb("get") {
        let mut o = op("get", "get", format!("read{gv}{ns}{kind}"), format!("read the specified {kind}"));
        o.responses = vec![ok(&kind_ref)];
        ops.push(o);
    }
    if s.has_verb("update") {
        let mut o = op("put", "put", format!("replace{gv}{ns}{kind}"), format!("replace the specified {kind}"));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
        o.body = Some((kind_ref.clone(), vec!["*/*"], true));
        o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
        ops.push(o);
    }
    if s.has_verb("delete") {
        let mut o = op("delete", "delete", format!("delete{gv}{ns}{kind}"), format!("delete {} {kind}", article(kind)));
        o.params = DELETE_PARAMS.to_vec();
        o.body = Some((format!("{META}DeleteOptions"), vec!["*/*"], false));
        o.responses = vec![ok(&status), ("202", "Accepted", Some(status.clone()))];
        ops.push(o);
    }
    if s.has_verb("patch") {
        let mut o =
            op("patch", "patch", format!("patch{gv}{ns}{kind}"), format!("partially update the specified {kind}"));
        o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
        o.body = Some((format!("{META}Patch"), patch_types.clone(), true));
        o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
        ops.push(o);
    }
    if !ops.is_empty() {
        out.push((item.clone(), ops));
    }

    for sub in &s.subresources {
        if sub == "scale" {
            continue; // no Scale schema published
        }
        let verbs = s.subresource_verbs(sub);
        let title: String = sub[..1].to_uppercase() + &sub[1..];
        let mut ops = Vec::new();
        if verbs.iter().any(|v| v == "get") {
            let mut o =
                op("get", "get", format!("read{gv}{ns}{kind}{title}"), format!("read {sub} of the specified {kind}"));
            o.responses = vec![ok(&kind_ref)];
            ops.push(o);
        }
        if verbs.iter().any(|v| v == "update") {
            let mut o = op(
                "put",
                "put",
                format!("replace{gv}{ns}{kind}{title}"),
                format!("replace {sub} of the specified {kind}"),
            );
            o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION];
            o.body = Some((kind_ref.clone(), vec!["*/*"], true));
            o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
            ops.push(o);
        }
        if verbs.iter().any(|v| v == "patch") {
            let mut o = op(
                "patch",
                "patch",
                format!("patch{gv}{ns}{kind}{title}"),
                format!("partially update {sub} of the specified {kind}"),
            );
            o.params = vec![DRY_RUN, FIELD_MANAGER, FIELD_VALIDATION, FORCE];
            o.body = Some((format!("{META}Patch"), patch_types.clone(), true));
            o.responses = vec![ok(&kind_ref), ("201", "Created", Some(kind_ref.clone()))];
            ops.push(o);
        }
        if !ops.is_empty() {
            out.push((format!("{item}/{sub}"), ops));
        }
    }
    out
}

/// Built-in kinds get strategic merge patch; CRs never do.
fn is_builtin_kind(s: &Served) -> bool {
    matches!(
        (s.group.as_str(), s.kind.as_str()),
        ("", "Secret") | ("", "Namespace") | ("", "Event") | ("coordination.k8s.io", "Lease")
    )
}

fn path_params(path: &str, kind: &str) -> Vec<Value> {
    let mut v = Vec::new();
    if path.contains("{name}") {
        v.push(json!({"name": "name", "in": "path", "required": true,
                      "description": format!("name of the {kind}"),
                      "schema": {"type": "string", "uniqueItems": true}}));
    }
    if path.contains("{namespace}") {
        v.push(json!({"name": "namespace", "in": "path", "required": true,
                      "description": "object name and auth scope, such as for teams and projects",
                      "schema": {"type": "string", "uniqueItems": true}}));
    }
    v
}

fn v3_param(p: &Param) -> Value {
    json!({"name": p.name, "in": p.in_, "description": p.description,
           "schema": {"type": p.ty, "uniqueItems": true}})
}

fn v3_op(op: &Op, tag: &str) -> Value {
    let mut m = Map::new();
    m.insert("tags".into(), json!([tag]));
    m.insert("description".into(), op.description.clone().into());
    m.insert("operationId".into(), op.id.clone().into());
    if !op.params.is_empty() {
        m.insert("parameters".into(), op.params.iter().map(v3_param).collect());
    }
    if let Some((schema, types, required)) = &op.body {
        let content: Map<String, Value> =
            types.iter().map(|t| ((*t).to_owned(), json!({"schema": r(schema)}))).collect();
        let mut b = json!({"content": content});
        if *required {
            b["required"] = true.into();
        }
        m.insert("requestBody".into(), b);
    }
    let mut responses = Map::new();
    for (code, desc, schema) in &op.responses {
        let mut resp = json!({"description": desc});
        if let Some(sch) = schema {
            let mut types = vec!["application/json", "application/yaml"];
            if op.list {
                types.push("application/json;stream=watch");
            }
            let content: Map<String, Value> =
                types.into_iter().map(|t| (t.to_owned(), json!({"schema": r(sch)}))).collect();
            resp["content"] = Value::Object(content);
        }
        responses.insert((*code).into(), resp);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), op.action.into());
    m.insert("x-kubernetes-group-version-kind".into(), op.gvk.clone());
    Value::Object(m)
}

/// Adds `name` and everything it refers to (transitively) to `out`.
fn collect_refs(name: &str, all: &BTreeMap<String, Value>, out: &mut BTreeMap<String, Value>) {
    if out.contains_key(name) {
        return;
    }
    let Some(schema) = all.get(name) else { return };
    out.insert(name.to_owned(), schema.clone());
    let mut refs = BTreeSet::new();
    find_refs(schema, &mut refs);
    for r in refs {
        collect_refs(&r, all, out);
    }
}

fn find_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "$ref" {
                    if let Some(name) = x.as_str().and_then(|s| s.strip_prefix(V3_REF)) {
                        out.insert(name.to_owned());
                    }
                } else {
                    find_refs(x, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| find_refs(x, out)),
        _ => {}
    }
}

fn all_schemas(served: &[Served], crds: &[Value]) -> BTreeMap<String, Value> {
    let mut all = meta_schemas();
    for s in served {
        all.extend(kind_schemas(s, crds));
    }
    all
}

fn normalize_gv_path(path: &str) -> &str {
    let p = path.trim_start_matches('/');
    let p = p.strip_prefix("openapi/v3/").unwrap_or(p);
    p.split('?').next().unwrap_or(p).trim_end_matches('/')
}

/// The OpenAPI v3 document of one group version (`api/v1`,
/// `apis/agent-install.openshift.io/v1beta1`; a leading `/` or
/// `/openapi/v3/` and a `?hash=` are tolerated), or `None` if nothing is
/// served there.
pub fn v3_group_version(served: &[Served], crds: &[Value], path: &str) -> Option<Value> {
    let path = normalize_gv_path(path);
    let in_gv: Vec<&Served> = served.iter().filter(|s| s.openapi_v3_path() == path).collect();
    if in_gv.is_empty() {
        return None;
    }
    let all = all_schemas(served, crds);
    let mut paths = Map::new();
    let mut schemas = BTreeMap::new();
    for s in &in_gv {
        let (_, tag) = gv_id(s);
        for (p, ops) in kind_paths(s) {
            let mut item = Map::new();
            for op in &ops {
                item.insert(op.method.into(), v3_op(op, &tag));
            }
            let params = path_params(&p, &s.kind);
            let mut params = params;
            params.push(v3_param(&PRETTY));
            item.insert("parameters".into(), Value::Array(params));
            paths.insert(p, Value::Object(item));
        }
        collect_refs(&kind_schema_name(s), &all, &mut schemas);
        collect_refs(&list_schema_name(s), &all, &mut schemas);
    }
    let mut refs = BTreeSet::new();
    find_refs(&Value::Object(paths.clone()), &mut refs);
    for r in refs {
        collect_refs(&r, &all, &mut schemas);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": DEFAULT_GIT_VERSION.split('-').next().unwrap_or(DEFAULT_GIT_VERSION)},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        },
    }))
}

/// Every served group version's v3 document, keyed by its index path
/// (`api/v1`, `apis/g/v`), with its hash — for caching.
pub fn v3_documents(served: &[Served], crds: &[Value]) -> BTreeMap<String, (Value, String)> {
    let mut out = BTreeMap::new();
    for s in served {
        let p = s.openapi_v3_path();
        if out.contains_key(&p) {
            continue;
        }
        if let Some(doc) = v3_group_version(served, crds, &p) {
            let h = content_hash(&doc);
            out.insert(p, (doc, h));
        }
    }
    out
}

/// `/openapi/v3`: `{"paths": {"apis/g/v": {"serverRelativeURL": "/openapi/v3/apis/g/v?hash=…"}}}`.
pub fn v3_index(served: &[Served], crds: &[Value]) -> Value {
    let paths: Map<String, Value> = v3_documents(served, crds)
        .into_iter()
        .map(|(p, (_, h))| {
            let url = format!("/openapi/v3/{p}?hash={h}");
            (p, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

// ---------------------------------------------------------------------------
// v2

fn to_v2_schema(v: &Value, strip_crd: bool) -> Value {
    match v {
        Value::Object(m) => {
            // {allOf: [{$ref}], ...} → {$ref, description}
            if let Some(Value::Array(all)) = m.get("allOf")
                && all.len() == 1
                && all[0].get("$ref").is_some()
            {
                let mut out = Map::new();
                let target = all[0]["$ref"].as_str().unwrap_or_default().replacen(V3_REF, V2_REF, 1);
                out.insert("$ref".into(), target.into());
                if let Some(d) = m.get("description") {
                    out.insert("description".into(), d.clone());
                }
                return Value::Object(out);
            }
            let mut out = Map::new();
            for (k, x) in m {
                if strip_crd
                    && matches!(
                        k.as_str(),
                        "nullable" | "anyOf" | "oneOf" | "allOf" | "not" | "x-kubernetes-validations"
                    )
                {
                    continue;
                }
                let conv = if k == "properties" {
                    Value::Object(
                        x.as_object()
                            .map(|p| p.iter().map(|(n, s)| (n.clone(), to_v2_schema(s, strip_crd))).collect())
                            .unwrap_or_default(),
                    )
                } else if k == "$ref" {
                    x.as_str().map(|s| s.replacen(V3_REF, V2_REF, 1).into()).unwrap_or(x.clone())
                } else {
                    to_v2_schema(x, strip_crd)
                };
                out.insert(k.clone(), conv);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| to_v2_schema(x, strip_crd)).collect()),
        other => other.clone(),
    }
}

fn v2_op(op: &Op, tag: &str) -> Value {
    let mut m = Map::new();
    m.insert("tags".into(), json!([tag]));
    m.insert("description".into(), op.description.clone().into());
    m.insert("operationId".into(), op.id.clone().into());
    let consumes: Vec<&str> = match &op.body {
        Some((_, types, _)) if op.method == "patch" => types.clone(),
        _ => vec!["*/*"],
    };
    m.insert("consumes".into(), json!(consumes));
    let mut produces = vec!["application/json", "application/yaml"];
    if op.list {
        produces.push("application/json;stream=watch");
    }
    m.insert("produces".into(), json!(produces));
    m.insert("schemes".into(), json!(["https"]));
    let mut params: Vec<Value> = Vec::new();
    if let Some((schema, _, required)) = &op.body {
        params.push(json!({"name": "body", "in": "body", "required": required,
                           "schema": {"$ref": format!("{V2_REF}{schema}")}}));
    }
    for p in &op.params {
        params.push(
            json!({"name": p.name, "in": p.in_, "type": p.ty, "uniqueItems": true, "description": p.description}),
        );
    }
    if !params.is_empty() {
        m.insert("parameters".into(), Value::Array(params));
    }
    let mut responses = Map::new();
    for (code, desc, schema) in &op.responses {
        let mut resp = json!({"description": desc});
        if let Some(sch) = schema {
            resp["schema"] = json!({"$ref": format!("{V2_REF}{sch}")});
        }
        responses.insert((*code).into(), resp);
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    m.insert("responses".into(), Value::Object(responses));
    m.insert("x-kubernetes-action".into(), op.action.into());
    m.insert("x-kubernetes-group-version-kind".into(), op.gvk.clone());
    Value::Object(m)
}

/// `/openapi/v2` (swagger 2.0) covering every served kind.
pub fn v2(served: &[Served], crds: &[Value]) -> Value {
    let all = all_schemas(served, crds);
    let crd_names: BTreeSet<String> =
        served.iter().filter(|s| crd_schema(s, crds).is_some()).map(kind_schema_name).collect();
    let mut paths = Map::new();
    let mut used = BTreeMap::new();
    for s in served {
        let (_, tag) = gv_id(s);
        for (p, ops) in kind_paths(s) {
            let mut item = Map::new();
            for op in &ops {
                item.insert(op.method.into(), v2_op(op, &tag));
            }
            let mut params: Vec<Value> = path_params(&p, &s.kind)
                .into_iter()
                .map(|mut v| {
                    let m = v.as_object_mut().unwrap();
                    m.remove("schema");
                    m.insert("type".into(), "string".into());
                    m.insert("uniqueItems".into(), true.into());
                    v
                })
                .collect();
            params.push(json!({"name": "pretty", "in": "query", "type": "string", "uniqueItems": true,
                               "description": PRETTY.description}));
            item.insert("parameters".into(), Value::Array(params));
            paths.insert(p, Value::Object(item));
        }
        collect_refs(&kind_schema_name(s), &all, &mut used);
        collect_refs(&list_schema_name(s), &all, &mut used);
    }
    for name in [format!("{META}Status"), format!("{META}DeleteOptions"), format!("{META}Patch")] {
        collect_refs(&name, &all, &mut used);
    }
    let definitions: Map<String, Value> = used
        .into_iter()
        .map(|(k, v)| {
            let strip = crd_names.contains(&k);
            (k, to_v2_schema(&v, strip))
        })
        .collect();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": DEFAULT_GIT_VERSION.split('-').next().unwrap_or(DEFAULT_GIT_VERSION)},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    })
}

// ---------------------------------------------------------------------------
// Hash

/// Uppercase hex SHA-256 of the compact JSON serialization: the `hash` of
/// the v3 index URLs, also usable as an ETag.
pub fn content_hash(v: &Value) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    sha256(&bytes).iter().map(|b| format!("{b:02X}")).collect()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for chunk in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([chunk[4 * i], chunk[4 * i + 1], chunk[4 * i + 2], chunk[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::served::{self, testdata::our_crds};
    use super::*;

    fn setup() -> (Vec<Served>, Vec<Value>) {
        let crds = our_crds();
        let mut s = served::core_kinds();
        s.extend(crds.iter().map(served::from_crd));
        (s, crds)
    }

    #[test]
    fn sha() {
        let hex = |b: [u8; 32]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex(sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let long = vec![b'a'; 1000];
        assert_eq!(hex(sha256(&long)), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }

    #[test]
    fn names() {
        assert_eq!(
            schema_name("agent-install.openshift.io", "v1beta1", "InfraEnv"),
            "io.openshift.agent-install.v1beta1.InfraEnv"
        );
        assert_eq!(schema_name("", "v1", "Secret"), "io.k8s.api.core.v1.Secret");
        assert_eq!(schema_name("coordination.k8s.io", "v1", "Lease"), "io.k8s.api.coordination.v1.Lease");
        assert_eq!(schema_name("metal3.io", "v1alpha1", "BareMetalHost"), "io.metal3.v1alpha1.BareMetalHost");
        let (id, tag) = gv_id(&served::from_crd(&our_crds()[1]));
        assert_eq!(id, "AgentInstallOpenshiftIoV1beta1");
        assert_eq!(tag, "agentInstallOpenshiftIo_v1beta1");
        assert_eq!(gv_id(&served::secret()).0, "CoreV1");
        assert_eq!(gv_id(&served::lease()).0, "CoordinationV1");
    }

    #[test]
    fn index_lists_every_group_version() {
        let (s, crds) = setup();
        let idx = v3_index(&s, &crds);
        let paths = idx["paths"].as_object().unwrap();
        let mut want: Vec<String> = s.iter().map(|x| x.openapi_v3_path()).collect();
        want.sort();
        want.dedup();
        assert_eq!(paths.keys().cloned().collect::<Vec<_>>(), want);
        for (p, v) in paths {
            let url = v["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{p}?hash=")), "{url}");
            let doc = v3_group_version(&s, &crds, url).unwrap();
            assert_eq!(url.split("hash=").nth(1).unwrap(), content_hash(&doc));
        }
        // Stable.
        assert_eq!(v3_index(&s, &crds), idx);
        assert!(v3_group_version(&s, &crds, "apis/apps/v1").is_none());
    }

    fn resolve<'a>(doc: &'a Value, r: &str) -> &'a Value {
        &doc["components"]["schemas"][r.strip_prefix(V3_REF).unwrap()]
    }

    /// Every `$ref` of every document resolves inside it; every served kind
    /// has a schema with its GVK, and a PATCH operation that kubectl's
    /// field-validation check accepts.
    #[test]
    fn documents_are_self_contained_and_kubectl_ready() {
        let (s, crds) = setup();
        for (path, (doc, _)) in v3_documents(&s, &crds) {
            let mut refs = BTreeSet::new();
            find_refs(&doc, &mut refs);
            for r in &refs {
                assert!(doc["components"]["schemas"].get(r).is_some(), "{path}: dangling {r}");
            }
            for k in s.iter().filter(|k| k.openapi_v3_path() == path) {
                let gvk = k.gvk_json();
                let schemas = doc["components"]["schemas"].as_object().unwrap();
                let found: Vec<&String> = schemas
                    .iter()
                    .filter(|(_, v)| v["x-kubernetes-group-version-kind"].as_array().is_some_and(|a| a.contains(&gvk)))
                    .map(|(n, _)| n)
                    .collect();
                assert_eq!(found, vec![&kind_schema_name(k)], "{path} {}", k.kind);
                let sch = &schemas[&kind_schema_name(k)];
                assert_eq!(
                    resolve(&doc, sch["properties"]["metadata"]["allOf"][0]["$ref"].as_str().unwrap())["type"],
                    "object"
                );
                let list = &schemas[&list_schema_name(k)];
                assert_eq!(list["x-kubernetes-group-version-kind"][0]["kind"], k.list_kind.as_str());

                // kubectl's QueryParamVerifierV3: a PATCH op for the GVK listing fieldValidation.
                let patch_ops: Vec<&Value> = doc["paths"]
                    .as_object()
                    .unwrap()
                    .values()
                    .filter_map(|p| p.get("patch"))
                    .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
                    .collect();
                if k.has_verb("patch") {
                    assert!(!patch_ops.is_empty(), "{}", k.kind);
                    for op in patch_ops {
                        assert!(
                            op["parameters"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                            "{}",
                            k.kind
                        );
                        let content = op["requestBody"]["content"].as_object().unwrap();
                        assert!(content.contains_key("application/apply-patch+yaml"));
                        assert!(content.contains_key("application/merge-patch+json"));
                        assert!(content.contains_key("application/json-patch+json"));
                        assert_eq!(
                            content.contains_key("application/strategic-merge-patch+json"),
                            k.group.is_empty() || k.kind == "Lease"
                        );
                    }
                }
                // kubectl explain finds the GVK on one of these paths.
                let prefix = k.api_prefix();
                let candidates = [
                    format!("{prefix}/{}", k.plural),
                    format!("{prefix}/{}/{{name}}", k.plural),
                    format!("{prefix}/namespaces/{{namespace}}/{}", k.plural),
                    format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.plural),
                ];
                assert!(candidates.iter().any(|c| doc["paths"].get(c).is_some()), "{}", k.kind);
            }
        }
    }

    #[test]
    fn infraenv_document() {
        let (s, crds) = setup();
        let doc = v3_group_version(&s, &crds, "/openapi/v3/apis/agent-install.openshift.io/v1beta1?hash=x").unwrap();
        let ie = &doc["components"]["schemas"]["io.openshift.agent-install.v1beta1.InfraEnv"];
        assert_eq!(
            ie["x-kubernetes-group-version-kind"],
            json!([{"group": "agent-install.openshift.io", "kind": "InfraEnv", "version": "v1beta1"}])
        );
        assert!(ie["properties"]["spec"]["properties"].get("pullSecretRef").is_some());
        let paths = doc["paths"].as_object().unwrap();
        let item = &paths["/apis/agent-install.openshift.io/v1beta1/namespaces/{namespace}/infraenvs/{name}"];
        for m in ["get", "put", "patch", "delete"] {
            assert!(item.get(m).is_some(), "{m}");
        }
        assert!(
            paths.contains_key(
                "/apis/agent-install.openshift.io/v1beta1/namespaces/{namespace}/infraenvs/{name}/status"
            )
        );
        assert!(paths.contains_key("/apis/agent-install.openshift.io/v1beta1/infraenvs"));
        assert_eq!(item["patch"]["operationId"], "patchAgentInstallOpenshiftIoV1beta1NamespacedInfraEnv");
        let names: Vec<&str> =
            item["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["name", "namespace", "pretty"]);
        // Cluster-scoped kind: no namespace segment.
        let hive = v3_group_version(&s, &crds, "apis/hive.openshift.io/v1").unwrap();
        assert!(hive["paths"].get("/apis/hive.openshift.io/v1/clusterimagesets/{name}").is_some());
        // int-or-string unfolded.
        let txt = serde_json::to_string(&hive).unwrap();
        assert!(txt.contains(r#""anyOf":[{"type":"integer"},{"type":"string"}]"#));
    }

    #[test]
    fn core_document() {
        let (s, crds) = setup();
        let doc = v3_group_version(&s, &crds, "api/v1").unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.contains_key("/api/v1/namespaces/{namespace}/secrets/{name}"));
        assert!(paths.contains_key("/api/v1/namespaces/{name}"));
        assert!(paths.contains_key("/api/v1/namespaces"));
        let ev = &paths["/api/v1/namespaces/{namespace}/events/{name}"];
        assert!(ev.get("get").is_some() && ev.get("patch").is_none());
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for n in [
            "io.k8s.api.core.v1.Secret",
            "io.k8s.api.core.v1.SecretList",
            "io.k8s.api.core.v1.Namespace",
            "io.k8s.api.core.v1.Event",
            "io.k8s.api.core.v1.ObjectReference",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
        ] {
            assert!(schemas.contains_key(n), "{n}");
        }
        assert!(!schemas.contains_key("io.k8s.api.coordination.v1.Lease"));
        let lease = v3_group_version(&s, &crds, "apis/coordination.k8s.io/v1").unwrap();
        assert!(lease["components"]["schemas"].get("io.k8s.api.coordination.v1.LeaseSpec").is_some());
    }

    #[test]
    fn swagger_v2() {
        let (s, crds) = setup();
        let doc = v2(&s, &crds);
        assert_eq!(doc["swagger"], "2.0");
        let defs = doc["definitions"].as_object().unwrap();
        let agent = &defs["io.openshift.agent-install.v1beta1.Agent"];
        assert_eq!(agent["x-kubernetes-group-version-kind"][0]["kind"], "Agent");
        assert_eq!(
            agent["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        let txt = serde_json::to_string(&doc).unwrap();
        assert!(!txt.contains("#/components/"));
        assert!(!txt.contains("\"nullable\""));
        let mut refs = BTreeSet::new();
        fn walk(v: &Value, out: &mut BTreeSet<String>) {
            match v {
                Value::Object(m) => m.iter().for_each(|(k, x)| {
                    if k == "$ref" {
                        out.insert(x.as_str().unwrap().trim_start_matches(V2_REF).to_owned());
                    } else {
                        walk(x, out)
                    }
                }),
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        walk(&doc, &mut refs);
        for r in refs {
            assert!(defs.contains_key(&r), "dangling {r}");
        }
        let patch = &doc["paths"]["/apis/metal3.io/v1alpha1/namespaces/{namespace}/baremetalhosts/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    }
}
