//! `meta.k8s.io/v1` `Table` responses, as kube-apiserver renders them for
//! `kubectl get` (which asks with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,…,application/json`).
//!
//! * Custom resources: a `Name` column, then the CRD's
//!   `additionalPrinterColumns`; when the CRD declares none, a single `Age`
//!   column (`.metadata.creationTimestamp`, type `date`). `Age` is *not*
//!   added when the CRD has columns of its own (hence no AGE for `oc get
//!   agents`). Cells: `null` when the path selects nothing (kubectl prints
//!   blank); `string` columns print the first match as client-go's JSONPath
//!   printer does (an explicit JSON `null` prints `<no value>`); `integer`,
//!   `number`, `boolean` keep JSON types; `date` becomes a human duration
//!   (`5m10s`, `3d`), `<invalid>` if unparsable, `<unknown>` if empty.
//! * Core kinds (Secret, Namespace, Event, Lease): upstream's built-in
//!   columns. The server always fills every column (wide); kubectl hides
//!   `priority > 0` columns unless `-o wide`.
//! * Rows carry `object`: `PartialObjectMetadata` by default
//!   (`includeObject=Metadata`), the full object for `includeObject=Object`
//!   (kubectl sends it with `--sort-by`), `null` for `None`.
//!
//! Serve the result as `Content-Type: application/json`. On a watch, the
//! first event's Table carries the column definitions and later ones none
//! ([`strip_headers`]), as kube-apiserver does.
//!
//! Hand-written because the printing is the API server's own (its Go printers and apimachinery's
//! `HumanDuration` rounding) and no crate reproduces it; the calendar under the ages is jiff's.

use serde_json::{Map, Value, json};

use super::jsonpath::{JsonPath, print_value};
use super::served::Served;

/// An `includeObject` parameter the API server does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IncludeObjectError(pub String);

/// The `includeObject` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    #[default]
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the query parameter (absent or empty means `Metadata`);
    /// `Err` carries the message for a 400 Bad Request.
    pub fn from_query(v: Option<&str>) -> Result<IncludeObject, IncludeObjectError> {
        match v.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "Object" => Ok(IncludeObject::Object),
            "None" => Ok(IncludeObject::None),
            other => Err(IncludeObjectError(format!("unrecognized includeObject value: {other:?}"))),
        }
    }
}

// The API server's descriptions (ObjectMeta's and Secret's API documentation), as clients show them.
const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn coldef(name: &str, type_: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({
        "name": name,
        "type": type_,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

/// Which built-in printer a served kind uses, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Builtin {
    Secret,
    Namespace,
    Event,
    Lease,
}

fn builtin(served: &Served) -> Option<Builtin> {
    match (served.group.as_str(), served.kind.as_str()) {
        ("", "Secret") => Some(Builtin::Secret),
        ("", "Namespace") => Some(Builtin::Namespace),
        ("", "Event") => Some(Builtin::Event),
        ("coordination.k8s.io", "Lease") => Some(Builtin::Lease),
        _ => None,
    }
}

fn builtin_columns(b: Builtin) -> Vec<Value> {
    let name = coldef("Name", "string", "name", NAME_DESC, 0);
    let age = coldef("Age", "string", "", AGE_DESC, 0);
    match b {
        Builtin::Secret => vec![
            name,
            coldef(
                "Type",
                "string",
                "",
                "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
                0,
            ),
            coldef(
                "Data",
                "string",
                "",
                "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
                0,
            ),
            age,
        ],
        Builtin::Namespace => {
            vec![name, coldef("Status", "string", "", "Phase of the namespace (Active or Terminating).", 0), age]
        }
        Builtin::Lease => {
            vec![name, coldef("Holder", "string", "", "Identity of the current holder of the lease.", 0), age]
        }
        Builtin::Event => vec![
            coldef("Last Seen", "string", "", "Time since the event was last recorded.", 0),
            coldef("Type", "string", "", "Type of the event (Normal, Warning).", 0),
            coldef("Reason", "string", "", "Short machine-readable reason for the event.", 0),
            coldef("Object", "string", "", "The object the event is about (kind/name).", 0),
            coldef("Subobject", "string", "", "Field path within the object, if any.", 1),
            coldef("Source", "string", "", "Component (and host) that reported the event.", 1),
            coldef("Message", "string", "", "Human-readable description of the event.", 0),
            coldef("First Seen", "string", "", "Time since the event was first recorded.", 1),
            coldef("Count", "string", "", "How many times the event occurred.", 1),
            coldef("Name", "string", "name", NAME_DESC, 1),
        ],
    }
}

/// The column definitions of the table for `served` (see module docs).
pub fn column_definitions(served: &Served, columns: &[Value]) -> Vec<Value> {
    if columns.is_empty()
        && let Some(b) = builtin(served)
    {
        return builtin_columns(b);
    }
    let mut out = vec![coldef("Name", "string", "name", NAME_DESC, 0)];
    if columns.is_empty() {
        out.push(coldef("Age", "date", "", AGE_DESC, 0));
    }
    for c in columns {
        let path = c["jsonPath"].as_str().unwrap_or_default();
        let desc = c["description"]
            .as_str()
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("Custom resource definition column (in JSONPath format): {path}"));
        out.push(coldef(
            c["name"].as_str().unwrap_or_default(),
            c["type"].as_str().unwrap_or("string"),
            c["format"].as_str().unwrap_or_default(),
            &desc,
            c["priority"].as_i64().unwrap_or(0),
        ));
    }
    out
}

/// Parses an RFC 3339 timestamp (`2024-05-01T10:00:00Z`,
/// `2024-05-01T10:00:00.123+02:00`) into nanoseconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    // The shape (fixed positions, digits only) is checked here because jiff's own parser also
    // takes ISO 8601's and RFC 9557's forms (a space for the `T`, no seconds, bracketed zones),
    // which the API server refuses; the calendar (month lengths, leap years) is jiff's.
    let field = |r: std::ops::Range<usize>| num(r).and_then(|n| i8::try_from(n).ok());
    let year = num(0..4).and_then(|n| i16::try_from(n).ok())?;
    let (mo, d, h, mi, sec) = (field(5..7)?, field(8..10)?, field(11..13)?, field(14..16)?, field(17..19)?);
    let civil = jiff::civil::DateTime::new(year, mo, d, h, mi, sec, 0).ok()?;
    let mut i = 19;
    let mut nanos: i128 = 0;
    if b.get(i) == Some(&b'.') || b.get(i) == Some(&b',') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 9)];
        nanos = frac.parse::<i128>().ok()? * 10i128.pow(9 - frac.len() as u32);
    }
    let offset: i64 = match &s[i..] {
        "Z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) && &tz[3..4] == ":" => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if tz.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    let secs = civil.duration_since(jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0)).as_secs() - offset;
    Some(secs as i128 * 1_000_000_000 + nanos)
}

/// apimachinery's `duration.HumanDuration` of a duration in nanoseconds:
/// ~2–3 significant figures (`42s`, `5m10s`, `3h20m`, `2d3h`, `400d`, `2y30d`).
pub fn human_duration(nanos: i128) -> String {
    let seconds = nanos / 1_000_000_000; // truncates toward zero, like Go
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{}h", hours / 24, h) };
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{}d", hours / 24 / 365, dy) };
    }
    format!("{}y", hours / 24 / 365)
}

/// Age of a timestamp field as the printers show it: `<unknown>` when
/// missing/empty, `<invalid>` when unparsable.
pub fn age(ts: &Value, now_unix: i64) -> String {
    match ts.as_str() {
        None | Some("") | Some("null") => "<unknown>".into(),
        Some(s) => match parse_rfc3339(s) {
            Some(t) => human_duration(now_unix as i128 * 1_000_000_000 - t),
            None => "<invalid>".into(),
        },
    }
}

/// A typed cell (non-`string` column) from the first JSONPath match.
fn typed_cell(type_: &str, v: &Value, now_unix: i64) -> Value {
    match (type_, v) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().map(|f| Value::from(f as i64)).unwrap_or(Value::Null),
        },
        ("number", Value::Number(n)) => n.as_f64().map(Value::from).unwrap_or(Value::Null),
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(_)) => age(v, now_unix).into(),
        _ => Value::Null,
    }
}

fn crd_cells(columns: &[(Option<JsonPath>, String)], obj: &Value, now_unix: i64) -> Vec<Value> {
    let mut cells = vec![obj["metadata"]["name"].as_str().unwrap_or_default().into()];
    for (path, type_) in columns {
        let first = path.as_ref().and_then(|p| p.find(obj).ok()).and_then(|r| r.into_iter().next());
        cells.push(match first {
            None => Value::Null,
            Some(v) if type_ == "string" => print_value(&v).into(),
            Some(v) => typed_cell(type_, &v, now_unix),
        });
    }
    cells
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or_default()
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

fn builtin_cells(b: Builtin, obj: &Value, now_unix: i64) -> Vec<Value> {
    let name: Value = s(obj, &["metadata", "name"]).into();
    let created = age(&obj["metadata"]["creationTimestamp"], now_unix);
    match b {
        Builtin::Secret => {
            let mut keys: Vec<&String> = obj["data"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
            // stringData is merged into data on write; count it if it was not.
            if let Some(sd) = obj["stringData"].as_object() {
                for k in sd.keys() {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            vec![name, s(obj, &["type"]).into(), (keys.len() as i64).into(), created.into()]
        }
        Builtin::Namespace => vec![name, s(obj, &["status", "phase"]).into(), created.into()],
        Builtin::Lease => vec![name, s(obj, &["spec", "holderIdentity"]).into(), created.into()],
        Builtin::Event => {
            let ts = |field: &str| {
                let v = &obj[field];
                if v.as_str().is_some_and(|x| !x.is_empty()) { Some(age(v, now_unix)) } else { None }
            };
            let first = ts("firstTimestamp").unwrap_or_else(|| age(&obj["eventTime"], now_unix));
            let mut last = ts("lastTimestamp").unwrap_or_else(|| first.clone());
            let mut count = obj["count"].as_i64().unwrap_or(0);
            if obj["series"].is_object() {
                last = age(&obj["series"]["lastObservedTime"], now_unix);
                count = obj["series"]["count"].as_i64().unwrap_or(0);
            } else if count == 0 {
                count = 1;
            }
            let kind = s(obj, &["involvedObject", "kind"]).to_lowercase();
            let target_name = s(obj, &["involvedObject", "name"]);
            let target = if target_name.is_empty() { kind } else { format!("{kind}/{target_name}") };
            let component = first_non_empty(s(obj, &["source", "component"]), s(obj, &["reportingComponent"]));
            let instance = first_non_empty(s(obj, &["source", "host"]), s(obj, &["reportingInstance"]));
            let source = if instance.is_empty() { component.to_owned() } else { format!("{component}, {instance}") };
            vec![
                last.into(),
                s(obj, &["type"]).into(),
                s(obj, &["reason"]).into(),
                target.into(),
                s(obj, &["involvedObject", "fieldPath"]).into(),
                source.into(),
                s(obj, &["message"]).trim().into(),
                first.into(),
                count.into(),
                name,
            ]
        }
    }
}

fn row_object(obj: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => obj.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// A `meta.k8s.io/v1` Table of `objects` (one object for a GET or a watch
/// event, all items for a LIST). `columns` are the CRD version's
/// `additionalPrinterColumns` (empty for core kinds → built-in columns, or
/// for a CRD without columns → `Age`). `list_meta` becomes `metadata`
/// (`resourceVersion`, `continue`, …; for a single object pass its
/// `resourceVersion`).
pub fn table(
    served: &Served,
    columns: &[Value],
    objects: &[Value],
    include_object: IncludeObject,
    now_unix: i64,
    list_meta: Value,
) -> Value {
    let defs = column_definitions(served, columns);
    let b = if columns.is_empty() { builtin(served) } else { None };
    let crd_cols: Vec<(Option<JsonPath>, String)> = if b.is_some() {
        Vec::new()
    } else {
        defs[1..]
            .iter()
            .zip(columns.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(def, col)| {
                let path = match col {
                    Some(c) => c["jsonPath"].as_str().unwrap_or_default(),
                    None => ".metadata.creationTimestamp",
                };
                (JsonPath::parse(path).ok(), def["type"].as_str().unwrap_or("string").to_owned())
            })
            .collect()
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells = match b {
                Some(b) => builtin_cells(b, obj, now_unix),
                None => crd_cells(&crd_cols, obj, now_unix),
            };
            json!({"cells": cells, "object": row_object(obj, include_object)})
        })
        .collect();
    let metadata = match list_meta {
        Value::Object(m) => Value::Object(m),
        _ => Value::Object(Map::new()),
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// Drops the column definitions (`"columnDefinitions": null`), as the API
/// server does for every watch event after the first one.
pub fn strip_headers(table: &mut Value) {
    if let Some(m) = table.as_object_mut() {
        m.insert("columnDefinitions".into(), Value::Null);
    }
}

/// Whether an `Accept` header asks for a Table (`as=Table;g=meta.k8s.io`,
/// `v=v1` or `v1beta1`) ahead of plain JSON.
pub fn wants_table(accept: &str) -> bool {
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim();
        let mut as_ = None;
        let mut g = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_ = Some(v.trim().to_owned()),
                    "g" => g = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        if media == "application/json" && as_.as_deref() == Some("Table") && g.as_deref() == Some("meta.k8s.io") {
            return true;
        }
        if as_.is_none() {
            return false;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::served::{self, testdata::our_crds, upstream_printing};
    use super::*;

    const NOW: i64 = 1_700_000_000; // 2023-11-14T22:13:20Z

    fn agent_served() -> Served {
        let crd = our_crds().into_iter().find(|c| c["spec"]["names"]["kind"] == "Agent").unwrap();
        served::from_crd(&crd)
    }

    fn agent(name: &str) -> Value {
        json!({
            "apiVersion": "agent-install.openshift.io/v1beta1",
            "kind": "Agent",
            "metadata": {"name": name, "namespace": "ns1", "creationTimestamp": "2023-11-14T22:08:10Z",
                         "labels": {"a": "b"}, "resourceVersion": "7"},
            "spec": {"approved": true, "clusterDeploymentName": {"name": "c1", "namespace": "ns1"},
                     "hostname": null},
            "status": {"role": "master", "progress": {"currentStage": "Done"},
                       "inventory": {"hostname": "host-1"}}
        })
    }

    #[test]
    fn durations() {
        let sec = 1_000_000_000i128;
        assert_eq!(human_duration(-3 * sec), "<invalid>");
        assert_eq!(human_duration(-sec), "0s");
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(119 * sec), "119s");
        assert_eq!(human_duration(310 * sec), "5m10s");
        assert_eq!(human_duration(300 * sec), "5m");
        assert_eq!(human_duration(179 * 60 * sec), "179m");
        assert_eq!(human_duration((3 * 3600 + 20 * 60) * sec), "3h20m");
        assert_eq!(human_duration(30 * 3600 * sec), "30h");
        assert_eq!(human_duration(51 * 3600 * sec), "2d3h");
        assert_eq!(human_duration(3 * 86400 * sec), "3d");
        assert_eq!(human_duration(400 * 86400 * sec), "400d");
        assert_eq!(human_duration((3 * 365 + 30) * 86400 * sec), "3y30d");
        assert_eq!(human_duration(10 * 365 * 86400 * sec), "10y");
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(NOW as i128 * 1_000_000_000));
        assert_eq!(parse_rfc3339("2023-11-14T23:13:20+01:00"), Some(NOW as i128 * 1_000_000_000));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.5Z"), Some(NOW as i128 * 1_000_000_000 + 500_000_000));
        assert!(parse_rfc3339("2024-02-29T00:00:00Z").is_some());
        assert_eq!(parse_rfc3339("2023-02-29T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("2023-11-14 22:13:20Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(age(&json!("2023-11-14T22:08:10Z"), NOW), "5m10s");
        assert_eq!(age(&Value::Null, NOW), "<unknown>");
        assert_eq!(age(&json!("nope"), NOW), "<invalid>");
    }

    #[test]
    fn agent_table_with_upstream_columns() {
        let s = agent_served();
        let cols = upstream_printing("agents.agent-install.openshift.io").unwrap().columns_json();
        let cols = cols.as_array().unwrap();
        let mut bare = agent("b");
        bare["spec"] = json!({});
        bare["status"] = json!({});
        let t = table(&s, cols, &[agent("a"), bare], IncludeObject::Metadata, NOW, json!({"resourceVersion": "9"}));
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(t["metadata"]["resourceVersion"], "9");
        let names: Vec<&str> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["Name", "Cluster", "Approved", "Role", "Stage", "Hostname", "Requested Hostname"]);
        let defs = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(defs[2]["type"], "boolean");
        assert_eq!(defs[5]["priority"], 1);
        assert_eq!(defs[1]["priority"], 0);
        assert_eq!(t["rows"][0]["cells"], json!(["a", "c1", true, "master", "Done", "host-1", "<no value>"]));
        assert_eq!(t["rows"][1]["cells"], json!(["b", null, null, null, null, null, null]));
        assert_eq!(
            t["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": agent("a")["metadata"]})
        );
        let full = table(&s, cols, &[agent("a")], IncludeObject::Object, NOW, json!({}));
        assert_eq!(full["rows"][0]["object"], agent("a"));
        let none = table(&s, cols, &[agent("a")], IncludeObject::None, NOW, json!({}));
        assert_eq!(none["rows"][0]["object"], Value::Null);
    }

    #[test]
    fn crd_without_columns_gets_age() {
        let s = agent_served();
        let t = table(&s, &[], &[agent("a")], IncludeObject::Metadata, NOW, json!({}));
        let defs = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs.len(), 2);
        assert_eq!(defs[1]["name"], "Age");
        assert_eq!(defs[1]["type"], "date");
        assert_eq!(t["rows"][0]["cells"], json!(["a", "5m10s"]));
    }

    #[test]
    fn typed_and_filtered_columns() {
        let s = agent_served();
        let cols = vec![
            json!({"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"}),
            json!({"name": "N", "type": "integer", "jsonPath": ".spec.n"}),
            json!({"name": "F", "type": "number", "jsonPath": ".spec.f"}),
            json!({"name": "NS", "type": "string", "jsonPath": ".spec.n"}),
            json!({"name": "Obj", "type": "string", "jsonPath": ".spec.m"}),
            json!({"name": "Bad", "type": "boolean", "jsonPath": ".spec.n"}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
            json!({"name": "Platform", "type": "string",
                   "jsonPath": ".metadata.labels.hive\\.openshift\\.io/cluster-platform"}),
        ];
        let obj = json!({
            "metadata": {"name": "x", "creationTimestamp": "2023-11-11T22:13:20Z",
                         "labels": {"hive.openshift.io/cluster-platform": "agent-baremetal"}},
            "spec": {"n": 4.0, "f": 2, "m": {"k": "v"}},
            "status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}
        });
        let t = table(&s, &cols, &[obj], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["x", "True", 4, 2.0, "4", "{\"k\":\"v\"}", null, "3d", "agent-baremetal"])
        );
        assert_eq!(
            t["columnDefinitions"][1]["description"],
            "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type=='Ready')].status"
        );
    }

    #[test]
    fn core_tables() {
        let secret = json!({"metadata": {"name": "pull", "creationTimestamp": "2023-11-14T21:13:20Z"},
                            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}});
        let t = table(&served::secret(), &[], &[secret], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(t["rows"][0]["cells"], json!(["pull", "kubernetes.io/dockerconfigjson", 1, "60m"]));
        let names: Vec<&str> =
            t["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec!["Name", "Type", "Data", "Age"]);

        let ns = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
        let t = table(&served::namespace(), &[], &[ns], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(t["rows"][0]["cells"], json!(["default", "Active", "<unknown>"]));

        let lease = json!({"metadata": {"name": "leader", "creationTimestamp": "2023-11-14T22:13:00Z"},
                           "spec": {"holderIdentity": "pod-1"}});
        let t = table(&served::lease(), &[], &[lease], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(t["rows"][0]["cells"], json!(["leader", "pod-1", "20s"]));

        let ev = json!({"metadata": {"name": "a.17", "namespace": "ns1"},
                        "involvedObject": {"kind": "Agent", "name": "a", "namespace": "ns1"},
                        "reason": "Approved", "message": "approved by user\n", "type": "Normal",
                        "source": {"component": "bootstream"},
                        "firstTimestamp": "2023-11-14T22:03:20Z", "lastTimestamp": "2023-11-14T22:12:20Z",
                        "count": 3});
        let t = table(&served::event(), &[], &[ev], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(
            t["rows"][0]["cells"],
            json!(["60s", "Normal", "Approved", "agent/a", "", "bootstream", "approved by user", "10m", 3, "a.17"])
        );
        let defs = t["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs.len(), 10);
        assert_eq!(defs[9]["priority"], 1);
        let ev2 = json!({"metadata": {"name": "b"}, "involvedObject": {"kind": "Agent"},
                         "eventTime": "2023-11-14T22:13:00.000000Z", "reportingComponent": "ctl",
                         "reportingInstance": "h1"});
        let t = table(&served::event(), &[], &[ev2], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(t["rows"][0]["cells"], json!(["20s", "", "", "agent", "", "ctl, h1", "", "20s", 1, "b"]));
    }

    #[test]
    fn every_upstream_column_set_renders() {
        for crd in our_crds() {
            let s = served::from_crd(&crd);
            let p = upstream_printing(&s.resource_name()).unwrap();
            let cols = p.columns_json();
            let cols = cols.as_array().unwrap();
            let obj = json!({"metadata": {"name": "o", "creationTimestamp": "2023-11-14T22:13:20Z"}});
            let t = table(&s, cols, &[obj], IncludeObject::Metadata, NOW, json!({}));
            let n = t["columnDefinitions"].as_array().unwrap().len();
            assert_eq!(t["rows"][0]["cells"].as_array().unwrap().len(), n, "{}", s.kind);
            assert_eq!(n, if cols.is_empty() { 2 } else { cols.len() + 1 });
        }
    }

    #[test]
    fn include_object_and_accept() {
        assert_eq!(IncludeObject::from_query(None), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::from_query(Some("Object")), Ok(IncludeObject::Object));
        assert!(IncludeObject::from_query(Some("x")).is_err());
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        let mut t = table(&served::secret(), &[], &[], IncludeObject::Metadata, NOW, json!({}));
        assert_eq!(t["rows"], json!([]));
        strip_headers(&mut t);
        assert_eq!(t["columnDefinitions"], Value::Null);
        assert!(!wants_table("application/json, application/json;as=Table;v=v1;g=meta.k8s.io"));
    }
}
