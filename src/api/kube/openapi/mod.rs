//! OpenAPI documents for the served kinds.
//!
//! * v3 (what kubectl 1.32 uses): `/openapi/v3` is [`v3_index`] (one
//!   `serverRelativeURL` per group version, carrying a content hash), and
//!   `/openapi/v3/{api/v1 | apis/g/v}` is [`v3_group_version`](v3::v3_group_version). Serve both as
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
mod builtin;
mod components;
mod crd;
mod hash;
mod operations;
mod schema;
mod v2;
mod v3;

pub use v2::v2;
pub use v3::{v3_documents, v3_index};

#[cfg(test)]
use super::served::{self, Served, testdata::our_crds};

/// The served kinds of the tests: the core ones and those of our CRDs, with the CRDs.
#[cfg(test)]
fn setup() -> (Vec<Served>, Vec<serde_json::Value>) {
    let crds = our_crds();
    let mut s = served::core_kinds();
    s.extend(crds.iter().map(served::from_crd));
    (s, crds)
}
