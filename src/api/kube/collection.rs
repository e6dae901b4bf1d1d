//! The collections the API serves: bootstream's kinds from their CRDs and the core kinds, with
//! what each needs beyond discovery (field labels, printer columns), and the verbs of RBAC.

use serde_json::Value;

use super::served::{self, Served};
use crate::resources::Kind;

/// A request's verb, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// Discovery and OpenAPI documents.
    Discover,
    Other,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Discover => "get",
            Verb::Other => "unknown",
        }
    }
}

/// A collection the API serves.
#[derive(Clone, Debug)]
pub struct Collection {
    /// What discovery, OpenAPI and tables say of it.
    pub served: Served,
    /// bootstream's own kinds (validated by its admission rules); None for the others.
    pub kind: Option<Kind>,
    /// Custom resources have `metadata.generation`; Secrets, Namespaces and Leases not.
    pub has_generation: bool,
    /// Field labels its field selectors take besides `metadata.name` and `metadata.namespace`.
    pub field_labels: &'static [&'static str],
    /// The CRD's `additionalPrinterColumns` (none for the core kinds: they have built-in columns).
    pub columns: Vec<Value>,
}

impl Collection {
    pub fn group(&self) -> &str {
        &self.served.group
    }
    pub fn version(&self) -> &str {
        &self.served.version
    }
    pub fn plural(&self) -> &str {
        &self.served.plural
    }
    pub fn kind_name(&self) -> &str {
        &self.served.kind
    }
    pub fn namespaced(&self) -> bool {
        self.served.namespaced
    }
    pub fn has_status(&self) -> bool {
        self.served.has_subresource("status")
    }
    /// `/apis/GROUP/VERSION` or `/api/v1`.
    pub fn prefix(&self) -> String {
        self.served.api_prefix()
    }
    pub fn api_version(&self) -> String {
        self.served.group_version()
    }
    /// The store key: `plural.group`, or the plural alone for the core group.
    pub fn resource(&self) -> String {
        self.served.resource_name()
    }
    /// `plural.group` as the API server names it in messages.
    pub(super) fn qualified(&self) -> String {
        self.resource()
    }
    /// `Kind.group` (`Kind` for the core group), as the API server names a kind in its messages.
    pub(super) fn qualified_kind(&self) -> String {
        if self.group().is_empty() {
            self.kind_name().to_string()
        } else {
            format!("{}.{}", self.kind_name(), self.group())
        }
    }
}

/// Our CRDs as JSON, with the printing upstream's declare.
pub fn crd_documents() -> Vec<Value> {
    crate::resources::crds::all().iter().map(|crd| serde_json::to_value(crd).expect("CRDs serialize")).collect()
}

/// Every collection served: bootstream's kinds (from their CRDs), and the core kinds kubectl and
/// the controllers use.
pub fn collections(crds: &[Value]) -> Vec<Collection> {
    let mut all = Vec::new();
    for crd in crds {
        let served = served::from_crd(crd);
        let kind = Kind::ALL.into_iter().find(|k| k.resource() == served.resource_name());
        let columns = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == served.version.as_str()))
            .and_then(|v| v["additionalPrinterColumns"].as_array().cloned())
            .unwrap_or_default();
        all.push(Collection { served, kind, has_generation: true, field_labels: &[], columns });
    }
    const EVENT_FIELDS: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "source",
        "type",
    ];
    for served in served::core_kinds() {
        let (kind, field_labels): (Option<Kind>, &'static [&'static str]) = match served.kind.as_str() {
            "Secret" => (Some(Kind::Secret), &["type"]),
            "Event" => (None, EVENT_FIELDS),
            "Namespace" => (None, &["status.phase"]),
            _ => (None, &[]),
        };
        all.push(Collection { served, kind, has_generation: false, field_labels, columns: Vec::new() });
    }
    all
}
