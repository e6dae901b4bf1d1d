//! The documents that describe the API rather than objects: `/version`, discovery (legacy and
//! aggregated) and OpenAPI v2 and v3, routed here and made by [`super::discovery`] and
//! [`super::openapi`] (the OpenAPI ones once, when first asked for).

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::Value;

use super::served::Served;
use super::{KubeApi, discovery, openapi, status_error};
use crate::http::Body;

impl KubeApi {
    pub(super) fn served(&self) -> Vec<Served> {
        self.collections.iter().map(|c| c.served.clone()).collect()
    }

    /// Discovery and OpenAPI documents; None for other paths.
    pub(super) fn document(&self, path: &str, headers: &http::HeaderMap) -> Option<Response<Body>> {
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
        let json_doc = |doc: &Value, content_type: &str| {
            let mut r = crate::http::json(StatusCode::OK, doc);
            if let Ok(v) = HeaderValue::from_str(content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
            r
        };
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            ["version"] => Some(crate::http::json(StatusCode::OK, &discovery::version_info(GIT_VERSION, "", ""))),
            ["api"] => {
                let format = discovery::negotiate(accept);
                let doc = match format {
                    discovery::DiscoveryFormat::Legacy => discovery::api_versions(""),
                    f => discovery::aggregated_core(&self.served(), f),
                };
                Some(json_doc(&doc, format.content_type()))
            }
            ["apis"] => {
                let format = discovery::negotiate(accept);
                let doc = match format {
                    discovery::DiscoveryFormat::Legacy => discovery::api_group_list(&self.served()),
                    f => discovery::aggregated_apis(&self.served(), f),
                };
                Some(json_doc(&doc, format.content_type()))
            }
            ["apis", group] => discovery::api_group(&self.served(), group).map(|d| json_doc(&d, "application/json")),
            ["api", version] => {
                discovery::api_resource_list(&self.served(), "", version).map(|d| json_doc(&d, "application/json"))
            }
            ["apis", group, version] => {
                discovery::api_resource_list(&self.served(), group, version).map(|d| json_doc(&d, "application/json"))
            }
            ["openapi", "v2"] => {
                // kubectl asks for v2 as protobuf only, and falls back quietly when refused.
                if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
                    return Some(status_error(
                        StatusCode::NOT_ACCEPTABLE,
                        "NotAcceptable",
                        "the OpenAPI v2 document is served as JSON only",
                    ));
                }
                let doc =
                    self.openapi_v2.get_or_init(|| Bytes::from(openapi::v2(&self.served(), &self.crds).to_string()));
                Some(bytes_response(doc.clone(), "application/json", None))
            }
            ["openapi", "v3"] => {
                let index = self
                    .openapi_v3_index
                    .get_or_init(|| Bytes::from(openapi::v3_index(&self.served(), &self.crds).to_string()));
                Some(bytes_response(index.clone(), "application/json", None))
            }
            ["openapi", "v3", rest @ ..] => {
                let docs = self.openapi_v3.get_or_init(|| {
                    openapi::v3_documents(&self.served(), &self.crds)
                        .into_iter()
                        .map(|(path, (doc, hash))| (path, (Bytes::from(doc.to_string()), hash)))
                        .collect()
                });
                let key = rest.join("/");
                let (doc, hash) = docs.get(&key)?;
                Some(bytes_response(doc.clone(), "application/json", Some(hash)))
            }
            _ => None,
        }
    }
}

/// The version `/version` reports: kubectl of this minor version talks to it without a skew warning.
pub(super) const GIT_VERSION: &str = "v1.32.0-bootstream";

pub(super) fn bytes_response(body: Bytes, content_type: &'static str, etag: Option<&str>) -> Response<Body> {
    let mut b = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, body.len());
    if let Some(etag) = etag {
        b = b.header(header::ETAG, format!("\"{etag}\"")).header(header::CACHE_CONTROL, "public, immutable");
    }
    b.body(Body::Bytes(body)).expect("valid response")
}
