//! Reads: get, list (selectors, pages, `continue` tokens; objects, metadata or tables) and watch.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use serde_json::{Value, json};

use super::selector::{FieldSelector, LabelSelector};
use super::watch::{self, Start, WatchOptions};
use super::{ApiError, Collection, KubeApi, Representation, Target, query_flag, representation, table};
use crate::http::Body;

/// Largest `limit` honoured for one page.
pub(super) const MAX_PAGE: usize = 10_000;

impl KubeApi {
    pub(super) fn get(&self, t: &Target<'_>) -> Result<Value, ApiError> {
        let c = t.collection;
        let name = t.name.as_deref().unwrap_or_default();
        let ns = t.namespace.as_deref().unwrap_or_default();
        match self.store.get_raw(&c.resource(), ns, name) {
            Ok(Some(o)) => Ok(o),
            Ok(None) => Err(ApiError::not_found(c, name)),
            Err(e) => Err(ApiError::from_store(c, name, e)),
        }
    }

    pub(super) fn selectors(
        c: &Collection,
        q: &HashMap<String, String>,
    ) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), c.field_labels)
            .map_err(ApiError::bad_request)?;
        Ok((labels, fields))
    }

    /// A list, in (namespace, name) order, in pages of `limit` (the `continue` token names where the
    /// next page starts).
    pub(super) fn list(
        &self,
        t: &Target<'_>,
        q: &HashMap<String, String>,
        headers: &http::HeaderMap,
    ) -> Result<Response<Body>, ApiError> {
        let c = t.collection;
        let (labels, fields) = Self::selectors(c, q)?;
        // What the watches have recorded, read before the objects: the list holds at least that.
        let recorded = self.watches.resource_version();
        let after = match q.get("continue").filter(|s| !s.is_empty()) {
            Some(token) => Some(decode_continue(token)?),
            None => None,
        };
        let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0).map(|l| l.min(MAX_PAGE));
        let entries = self.store.list_raw_keyed(&c.resource(), t.namespace.as_deref());
        // The list may hold changes the watches have not recorded yet: stamped with the newest of
        // them, a watch from the list's version starts after what the list holds (no duplicates),
        // and a deletion after the list is recorded at a version no older than that.
        let resource_version = entries.iter().map(|e| e.3).fold(recorded, i64::max);
        let filtering = !labels.is_empty() || !fields.is_empty();
        let mut items: Vec<Bytes> = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (ns, name, text, _) in entries {
            if let Some((after_ns, after_name)) = &after
                && (ns.as_str(), name.as_str()) <= (after_ns.as_str(), after_name.as_str())
            {
                continue;
            }
            if filtering {
                let Ok(object) = serde_json::from_slice::<Value>(&text) else { continue };
                if !labels.matches(&object) || !fields.matches(&object) {
                    continue;
                }
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last_key = Some((ns, name));
            items.push(text);
        }
        let continue_token = match (more, last_key) {
            (true, Some((ns, name))) => encode_continue(&ns, &name),
            _ => String::new(),
        };
        let mut list_meta = json!({"resourceVersion": resource_version.to_string()});
        if !continue_token.is_empty() {
            list_meta["continue"] = Value::String(continue_token);
        }
        match representation(headers) {
            Representation::Object => {
                // A list of custom resources (unstructured on the API server) always says
                // `continue`, empty on the last page; typed lists omit it then.
                if c.has_generation && list_meta.get("continue").is_none() {
                    list_meta["continue"] = json!("");
                }
                Ok(list_response(c, &items, &list_meta))
            }
            Representation::Metadata => {
                let items: Vec<Value> = items
                    .iter()
                    .filter_map(|t| serde_json::from_slice::<Value>(t).ok())
                    .map(|o| watch::metadata_only(&o))
                    .collect();
                Ok(crate::http::json(
                    StatusCode::OK,
                    &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": list_meta, "items": items}),
                ))
            }
            Representation::Table => {
                let objects: Vec<Value> = items.iter().filter_map(|t| serde_json::from_slice(t).ok()).collect();
                Ok(crate::http::json(StatusCode::OK, &self.table(c, &objects, list_meta, q)?))
            }
        }
    }

    pub(super) fn table(
        &self,
        c: &Collection,
        objects: &[Value],
        list_meta: Value,
        q: &HashMap<String, String>,
    ) -> Result<Value, ApiError> {
        let include = table::IncludeObject::from_query(q.get("includeObject").map(String::as_str))
            .map_err(ApiError::bad_request)?;
        Ok(table::table(&c.served, &c.columns, objects, include, now_unix(), list_meta))
    }

    pub(super) fn watch(
        &self,
        t: &Target<'_>,
        q: &HashMap<String, String>,
        headers: &http::HeaderMap,
    ) -> Response<Body> {
        let c = t.collection;
        let (labels, fields) = match Self::selectors(c, q) {
            Ok(s) => s,
            Err(e) => return e.response(),
        };
        let start = match q.get("resourceVersion").map(String::as_str) {
            None | Some("") | Some("0") => Start::Current,
            Some(rv) => match rv.parse::<i64>() {
                Ok(rv) => Start::After(rv),
                Err(_) => {
                    return ApiError::bad_request(format!("invalid resource version: {rv:?}")).response();
                }
            },
        };
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(watch::MAX_WATCH)
            .min(watch::MAX_WATCH);
        let representation = representation(headers);
        let include = match table::IncludeObject::from_query(q.get("includeObject").map(String::as_str)) {
            Ok(i) => i,
            Err(e) => return ApiError::bad_request(e).response(),
        };
        let collection = c.clone();
        let filtering = !labels.is_empty() || !fields.is_empty();
        // Only the first table event of a watch carries the column definitions.
        let headers_sent = std::sync::atomic::AtomicBool::new(false);
        let filter = move |text: &Bytes| -> Option<Bytes> {
            if !filtering && representation == Representation::Object {
                return Some(text.clone());
            }
            let object: Value = serde_json::from_slice(text).ok()?;
            if !labels.matches(&object) || !fields.matches(&object) {
                return None;
            }
            let out = match representation {
                Representation::Object => return Some(text.clone()),
                Representation::Metadata => watch::metadata_only(&object),
                Representation::Table => {
                    let mut t = table::table(
                        &collection.served,
                        &collection.columns,
                        std::slice::from_ref(&object),
                        include,
                        now_unix(),
                        json!({"resourceVersion": object["metadata"]["resourceVersion"]}),
                    );
                    if headers_sent.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        table::strip_headers(&mut t);
                    }
                    t
                }
            };
            Some(Bytes::from(out.to_string()))
        };
        let bookmark_type = match representation {
            Representation::Object => (c.api_version(), c.kind_name().to_string()),
            Representation::Metadata => ("meta.k8s.io/v1".to_string(), "PartialObjectMetadata".to_string()),
            Representation::Table => ("meta.k8s.io/v1".to_string(), "Table".to_string()),
        };
        let truthy = |k: &str| query_flag(q, k);
        let opts = WatchOptions {
            start,
            timeout,
            bookmarks: truthy("allowWatchBookmarks"),
            // As kube-apiserver 1.36: a watch with bookmarks that starts with the current objects
            // marks their end, whether or not it asked for them by `sendInitialEvents`.
            initial_events_end: truthy("allowWatchBookmarks")
                && q.get("sendInitialEvents").is_none_or(|v| query_flag(q, "sendInitialEvents") || v.is_empty()),
            bookmark_type,
            filter: Box::new(filter),
        };
        let feed = self.watches.watch(&c.resource(), t.namespace.as_deref(), opts);
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::Stream(feed))
            .expect("a response")
    }
}

pub(super) fn now_unix() -> i64 {
    crate::resources::now_seconds().as_second()
}

pub(super) fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"ns": ns, "name": name}).to_string())
}

pub(super) fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    use base64::Engine;
    let invalid = || ApiError::bad_request("continue key is not valid: list again without it");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    match (v["ns"].as_str(), v["name"].as_str()) {
        (Some(ns), Some(name)) => Ok((ns.to_string(), name.to_string())),
        _ => Err(invalid()),
    }
}

/// A list of stored objects: the stored texts themselves between the list's punctuation.
pub(super) fn list_response(c: &Collection, items: &[Bytes], list_meta: &Value) -> Response<Body> {
    let head = format!(
        r#"{{"apiVersion":"{}","kind":"{}List","metadata":{},"items":["#,
        c.api_version(),
        c.kind_name(),
        list_meta
    );
    let comma = Bytes::from_static(b",");
    let mut chunks = Vec::with_capacity(items.len() * 2 + 1);
    chunks.push(Bytes::from(head));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            chunks.push(comma.clone());
        }
        chunks.push(item.clone());
    }
    chunks.push(Bytes::from_static(b"]}\n"));
    let body = Body::Chunks(chunks.into());
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, body.len())
        .body(body)
        .expect("valid response")
}
