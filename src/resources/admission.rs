//! Admission: whether a write of one of our kinds may happen. One decision, [`decide`], made in
//! two places: the embedded resource API asks it before it stores a document, and on a Kubernetes
//! hub the API server asks it through the validating admission webhook (`POST /admission/validate`,
//! which [`answer_review`] reads and answers). Both therefore refuse the same writes with the same
//! words (design.md §7.6).
//!
//! The rules are those of the resource model (`validate_document`: the kinds' types, unknown fields,
//! names, label selectors, kernel arguments, NMStateConfig interfaces, an Agent's installation disk,
//! an AgentClusterInstall's single-node networking, references to other namespaces), of updates
//! (`validate_update`: an InfraEnv's `clusterRef` and `cpuArchitecture`, an installing Agent's
//! cluster, an AgentClusterInstall's image set and its spec once it installs), and of creation (an
//! InfraEnv names a cluster or an OS image version, not both). Where they mirror assisted-service's
//! webhooks, the messages are theirs.
//!
//! Status writes (the status subresource) are checked against the status's type only: no rule on
//! the spec can block a controller reporting what it sees. An update that leaves everything but
//! metadata and status as it was is never refused for what the object already was (an object stored
//! before a rule existed, or while the webhook was off, can still get and lose finalizers).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{DocumentError, Kind, check_envelope, hive, validate_document, validate_status, validate_update};
use crate::errors::chain;

/// What a write does, as the API server names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn parse(s: &str) -> Option<Operation> {
        match s {
            "CREATE" => Some(Operation::Create),
            "UPDATE" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            "CONNECT" => Some(Operation::Connect),
            _ => None,
        }
    }
}

/// One write to decide on.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub operation: Operation,
    /// The kind of the collection written to.
    pub kind: Kind,
    /// `""` for the object itself, `"status"` for its status subresource.
    pub subresource: &'a str,
    /// The object as it is (updates and deletes).
    pub old: Option<&'a Value>,
    /// The object as the write would leave it (creates and updates).
    pub new: Option<&'a Value>,
}

/// A write that may go ahead.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allowed {
    /// Writes of the object: the document as the embedded store keeps it (normalized by its type,
    /// without status). Status writes: the status, normalized (None: no status). Deletes: None.
    pub normalized: Option<Value>,
    /// What the writer should know although the write is allowed (Kubernetes shows these to
    /// `kubectl` users as `Warning:` lines).
    pub warnings: Vec<String>,
}

/// A refused write: the HTTP status and reason the API server answers with, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Denied {
    fn bad_request(message: impl Into<String>) -> Denied {
        Denied { code: 400, reason: "BadRequest", message: message.into() }
    }

    fn of(e: &DocumentError) -> Denied {
        match e {
            // assisted-service answers this one with a conflict, the others with a bad request.
            DocumentError::AgentClusterInstall(hive::AciAdmissionError::SnoNeedsUserManagedNetworking) => {
                Denied { code: 409, reason: "Conflict", message: chain(e).to_string() }
            }
            _ => Denied::bad_request(chain(e).to_string()),
        }
    }
}

/// The decision on one write.
pub fn decide(req: &Request) -> Result<Allowed, Denied> {
    match (req.operation, req.subresource) {
        // No rule is about deleting or connecting.
        (Operation::Delete | Operation::Connect, _) => Ok(Allowed::default()),
        (_, "") => write(req),
        (_, "status") => {
            let new = req.new.ok_or_else(|| Denied::bad_request("a status write without the object"))?;
            let status = validate_status(req.kind, new).map_err(|e| Denied::of(&e))?;
            Ok(Allowed { normalized: status, warnings: vec![] })
        }
        // Other subresources have no rules here.
        _ => Ok(Allowed::default()),
    }
}

/// A create or update of the object itself.
fn write(req: &Request) -> Result<Allowed, Denied> {
    let new = req.new.ok_or_else(|| Denied::bad_request("a write without the object"))?;
    let old = match req.operation {
        Operation::Update => Some(req.old.ok_or_else(|| Denied::bad_request("an update without the old object"))?),
        _ => None,
    };
    let mut warnings = Vec::new();
    let normalized = match validate_document(new) {
        Ok((doc_kind, normalized)) => {
            if doc_kind != req.kind {
                return Err(Denied::bad_request(format!(
                    "a {} cannot be written to the {} collection",
                    doc_kind.name(),
                    req.kind.plural()
                )));
            }
            if let Some(old) = old {
                validate_update(req.kind, old, &normalized).map_err(|e| Denied::of(&e))?;
            }
            normalized
        }
        // The object already failed before this write, which leaves all but its metadata and status
        // as they were: let it through, or its finalizers could never be removed.
        Err(e) if old.is_some_and(|old| same_but_metadata_and_status(old, new) && validate_document(old).is_err()) => {
            if check_envelope(new).map_err(|e| Denied::of(&e))? != req.kind {
                return Err(Denied::of(&e));
            }
            warnings.push(format!(
                "this {} does not pass validation ({}); it is let through because this write changes only its metadata",
                req.kind.name(),
                chain(&e)
            ));
            let mut doc = new.clone();
            if let Some(o) = doc.as_object_mut() {
                o.remove("status");
            }
            doc
        }
        Err(e) => return Err(Denied::of(&e)),
    };
    if req.operation == Operation::Create {
        create_rules(req.kind, &normalized)?;
    }
    if req.kind == Kind::InfraEnv
        && let Some(field) = serde_json::from_value::<super::InfraEnv>(normalized.clone())
            .ok()
            .and_then(|ie| ie.spec.unsupported_field())
    {
        warnings.push(format!(
            "{field} is not supported by this bootstream version: this InfraEnv gets no image (ImageCreated=False)"
        ));
    }
    Ok(Allowed { normalized: Some(normalized), warnings })
}

/// The rules on creation only.
fn create_rules(kind: Kind, doc: &Value) -> Result<(), Denied> {
    if kind == Kind::InfraEnv
        && doc["spec"].get("clusterRef").is_some_and(|r| !r.is_null())
        && doc["spec"]["osImageVersion"].as_str().is_some_and(|v| !v.is_empty())
    {
        return Err(Denied::bad_request(
            "Either Spec.ClusterRef or Spec.OSImageVersion should be specified (not both).",
        ));
    }
    Ok(())
}

/// Whether two versions of an object differ in nothing but metadata and status.
fn same_but_metadata_and_status(a: &Value, b: &Value) -> bool {
    let rest = |v: &Value| -> Option<serde_json::Map<String, Value>> {
        let mut o = v.as_object()?.clone();
        o.remove("metadata");
        o.remove("status");
        Some(o)
    };
    matches!((rest(a), rest(b)), (Some(x), Some(y)) if x == y)
}

/// The version of AdmissionReview bootstream reads and writes.
pub const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// Why a body is not an AdmissionReview bootstream can answer (the webhook answers 400 with it).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("not an {REVIEW_API_VERSION} AdmissionReview request: {0}")]
    Malformed(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<ReviewRequest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest {
    uid: String,
    operation: String,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    old_object: Option<Value>,
}

#[derive(Deserialize)]
struct GroupVersionResource {
    #[serde(default)]
    group: String,
    version: String,
    resource: String,
}

/// The answer to an admission review: the response AdmissionReview, and the decision for logs.
#[derive(Debug)]
pub struct ReviewAnswer {
    pub review: Value,
    /// The kind judged; None for a resource bootstream does not model (allowed without judging).
    pub kind: Option<Kind>,
    pub operation: Operation,
    /// The object's namespace and name as the request gives them (for logs).
    pub namespace: String,
    pub name: String,
    pub denied: Option<Denied>,
}

/// Reads an `admission.k8s.io/v1` AdmissionReview request and decides on its write.
///
/// The objects are pruned to bootstream's schema first, as the Kubernetes store prunes what it
/// reads: the API server already removed what the installed CRD does not have, and what remains
/// beyond bootstream's types belongs to newer CRDs, not to a typo. A resource that is not one of
/// bootstream's kinds is allowed without judgment: bootstream has no rule for it, and the webhook
/// configuration does not send it unless it was edited to.
pub fn answer_review(body: &[u8]) -> Result<ReviewAnswer, ReviewError> {
    let review: Review = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    if review.api_version != REVIEW_API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::Malformed(format!(
            "apiVersion {:?} and kind {:?}; the webhook configuration must list admissionReviewVersions: [v1]",
            review.api_version, review.kind
        )));
    }
    let r = review.request.ok_or_else(|| ReviewError::Malformed("it has no request".into()))?;
    if r.uid.is_empty() {
        return Err(ReviewError::Malformed("request.uid is empty".into()));
    }
    let operation = Operation::parse(&r.operation)
        .ok_or_else(|| ReviewError::Malformed(format!("request.operation {:?} is not an operation", r.operation)))?;
    let group_version = match r.resource.group.as_str() {
        "" => r.resource.version.clone(),
        group => format!("{group}/{}", r.resource.version),
    };
    let kind = Kind::ALL.into_iter().find(|k| k.plural() == r.resource.resource && k.api_version() == group_version);
    let decision = match kind {
        None => Ok(Allowed::default()),
        Some(kind) => {
            let pruned = |v: Option<Value>| {
                v.filter(|v| !v.is_null()).map(|mut v| {
                    super::crds::prune_unknown_fields(&kind.resource(), &mut v);
                    v
                })
            };
            let (old, new) = (pruned(r.old_object), pruned(r.object));
            decide(&Request {
                operation,
                kind,
                subresource: r.sub_resource.as_deref().unwrap_or(""),
                old: old.as_ref(),
                new: new.as_ref(),
            })
        }
    };
    let mut response = json!({"uid": r.uid, "allowed": decision.is_ok()});
    let denied = match decision {
        Ok(allowed) => {
            if !allowed.warnings.is_empty() {
                response["warnings"] = json!(allowed.warnings);
            }
            None
        }
        Err(d) => {
            response["status"] = json!({"status": "Failure", "code": d.code, "reason": d.reason, "message": d.message});
            Some(d)
        }
    };
    let review = json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response});
    Ok(ReviewAnswer {
        review,
        kind,
        operation,
        namespace: r.namespace.unwrap_or_default(),
        name: r.name.unwrap_or_default(),
        denied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infraenv(spec: Value) -> Value {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
               "metadata": {"name": "ie", "namespace": "ns"}, "spec": spec})
    }

    fn agent(spec: Value, state: &str) -> Value {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
               "metadata": {"name": "a", "namespace": "ns"}, "spec": spec,
               "status": {"debugInfo": {"state": state}}})
    }

    fn aci(spec_extra: Value, completed_reason: Option<&str>) -> Value {
        let mut spec = json!({"clusterDeploymentRef": {"name": "c"}, "imageSetRef": {"name": "4.20"},
                              "networking": {}, "provisionRequirements": {"controlPlaneAgents": 3}});
        crate::store::json::merge_patch(&mut spec, &spec_extra);
        let mut doc = json!({"apiVersion": "extensions.hive.openshift.io/v1beta1", "kind": "AgentClusterInstall",
                             "metadata": {"name": "c", "namespace": "ns"}, "spec": spec});
        if let Some(reason) = completed_reason {
            doc["status"] = json!({"conditions": [{"type": "Completed", "status": "False", "reason": reason}]});
        }
        doc
    }

    fn create(kind: Kind, new: &Value) -> Result<Allowed, Denied> {
        decide(&Request { operation: Operation::Create, kind, subresource: "", old: None, new: Some(new) })
    }

    fn update(kind: Kind, old: &Value, new: &Value) -> Result<Allowed, Denied> {
        decide(&Request { operation: Operation::Update, kind, subresource: "", old: Some(old), new: Some(new) })
    }

    fn message(r: Result<Allowed, Denied>) -> String {
        r.expect_err("denied").message
    }

    #[test]
    fn a_valid_create_is_allowed_with_the_normalized_document() {
        let allowed = create(Kind::InfraEnv, &infraenv(json!({"pullSecretRef": {"name": "ps"}}))).unwrap();
        assert_eq!(allowed.normalized.unwrap()["spec"]["pullSecretRef"]["name"], "ps");
        assert!(allowed.warnings.is_empty());
    }

    #[test]
    fn document_errors_are_denied_naming_the_field() {
        let m = message(create(
            Kind::InfraEnv,
            &infraenv(json!({"pullSecretRef": {"name": "ps"}, "sshAuthorisedKey": "x"})),
        ));
        assert!(m.contains("sshAuthorisedKey"), "{m}");
        let m = message(create(Kind::Agent, &infraenv(json!({"pullSecretRef": {"name": "ps"}}))));
        assert_eq!(m, "a InfraEnv cannot be written to the agents collection");
    }

    #[test]
    fn infraenv_rules_have_upstreams_words() {
        let ie = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "c", "namespace": "ns"}}));
        let moved = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "d", "namespace": "ns"}}));
        assert_eq!(
            message(update(Kind::InfraEnv, &ie, &moved)),
            "Attempted to change Spec.ClusterRef which is immutable after InfraEnv creation."
        );
        let arm = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "c", "namespace": "ns"},
                                  "cpuArchitecture": "arm64"}));
        assert_eq!(
            message(update(Kind::InfraEnv, &ie, &arm)),
            "Attempted to change Spec.CpuArchitecture which is immutable after InfraEnv creation."
        );
        let amd64 = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "c", "namespace": "ns"},
                                    "cpuArchitecture": "amd64"}));
        update(Kind::InfraEnv, &ie, &amd64).expect("x86_64 by another name");
        let both = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "c", "namespace": "ns"},
                                   "osImageVersion": "4.19"}));
        assert_eq!(
            message(create(Kind::InfraEnv, &both)),
            "Either Spec.ClusterRef or Spec.OSImageVersion should be specified (not both)."
        );
    }

    #[test]
    fn an_installing_agents_cluster_is_immutable_unless_a_day2_host_is_released() {
        let bound = |state: &str| agent(json!({"clusterDeploymentName": {"name": "c", "namespace": "ns"}}), state);
        let unbound = agent(json!({}), "installing");
        assert_eq!(
            message(update(Kind::Agent, &bound("installing-in-progress"), &unbound)),
            "Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation."
        );
        update(Kind::Agent, &bound("known"), &unbound).expect("not installing");
        let mut day2 = bound("installing");
        day2["status"]["kind"] = json!("AddToExistingClusterHost");
        update(Kind::Agent, &day2, &unbound).expect("a day-2 host may be released");
        // Only the cluster is frozen: approving, labelling, renaming the host go through.
        let approved = agent(json!({"clusterDeploymentName": {"name": "c", "namespace": "ns"}, "approved": true}), "");
        update(Kind::Agent, &bound("installing"), &approved).expect("other fields change");
    }

    #[test]
    fn agent_rules_on_any_write() {
        let both = agent(json!({"installation_disk_id": "a", "installation_disk_path": "/dev/sda"}), "");
        assert_eq!(
            message(create(Kind::Agent, &both)),
            "Either InstallationDiskID or InstallationDiskPath can be set, not both."
        );
        let elsewhere = agent(json!({"clusterDeploymentName": {"name": "c", "namespace": "other"}}), "");
        assert_eq!(
            message(create(Kind::Agent, &elsewhere)),
            "Spec.ClusterDeploymentName.Namespace must match the Agent namespace"
        );
        let token = agent(json!({"ignitionEndpointTokenReference": {"name": "t", "namespace": "other"}}), "");
        assert_eq!(
            message(create(Kind::Agent, &token)),
            "Spec.IgnitionEndpointTokenReference.Namespace must match the Agent namespace"
        );
    }

    #[test]
    fn an_agentclusterinstall_freezes_once_it_installs() {
        let sno = aci(
            json!({"provisionRequirements": {"controlPlaneAgents": 1}, "networking": {"userManagedNetworking": false}}),
            None,
        );
        let d = create(Kind::AgentClusterInstall, &sno).unwrap_err();
        assert_eq!((d.code, d.message.as_str()), (409, "UserManagedNetworking must be set to true with SNO"));
        let before = aci(json!({}), None);
        assert_eq!(
            message(update(Kind::AgentClusterInstall, &before, &aci(json!({"imageSetRef": {"name": "4.21"}}), None))),
            "Attempted to change AgentClusterInstall.ImageSetRef which is immutable"
        );
        let more_workers = aci(json!({"provisionRequirements": {"workerAgents": 2}}), None);
        update(Kind::AgentClusterInstall, &before, &more_workers).expect("before the installation");
        let installing = aci(json!({}), Some("InstallationInProgress"));
        let m = message(update(Kind::AgentClusterInstall, &installing, &more_workers));
        assert_eq!(
            m,
            "Attempted to change AgentClusterInstall.Spec which is immutable after install started, except for \
             ClusterMetadata,IgnitionEndpoint fields. Unsupported change: \n\tspec.provisionRequirements.workerAgents: (null => 2)"
        );
        let metadata = aci(
            json!({"clusterMetadata": {"clusterID": "x", "infraID": "y",
                                                      "adminKubeconfigSecretRef": {"name": "k"}}}),
            None,
        );
        update(Kind::AgentClusterInstall, &installing, &metadata).expect("cluster metadata stays mutable");
        let installed = aci(json!({}), Some("InstallationCompleted"));
        update(Kind::AgentClusterInstall, &installed, &more_workers).expect("provision requirements, once it ended");
        let m = message(update(Kind::AgentClusterInstall, &installed, &aci(json!({"holdInstallation": true}), None)));
        assert!(m.ends_with("\tspec.holdInstallation: (null => true)"), "{m}");
    }

    #[test]
    fn status_writes_see_only_the_status_type() {
        // An installing Agent moved to another cluster: refused as a write of the object, but the
        // same document through the status subresource is a controller reporting, and passes.
        let old = agent(json!({"clusterDeploymentName": {"name": "c", "namespace": "ns"}}), "installing");
        let new = agent(json!({}), "installed");
        let status = Request {
            operation: Operation::Update,
            kind: Kind::Agent,
            subresource: "status",
            old: Some(&old),
            new: Some(&new),
        };
        assert_eq!(decide(&status).unwrap().normalized.unwrap()["debugInfo"]["state"], "installed");
        let bad = json!({"status": {"debugInfo": {"state": 7}}});
        let status = Request { new: Some(&bad), ..status };
        assert!(decide(&status).unwrap_err().message.starts_with("status"));
    }

    #[test]
    fn a_metadata_only_update_of_an_object_that_was_already_invalid_goes_through_with_a_warning() {
        let bad = infraenv(json!({"pullSecretRef": {"name": ""}}));
        let mut finalized = bad.clone();
        finalized["metadata"]["finalizers"] = json!(["x"]);
        let allowed = update(Kind::InfraEnv, &bad, &finalized).unwrap();
        assert!(allowed.warnings[0].contains("pull secret is required"), "{:?}", allowed.warnings);
        // A spec change must make it valid, and an object valid before cannot be made invalid.
        let still_bad = infraenv(json!({"pullSecretRef": {"name": ""}, "sshAuthorizedKey": "k"}));
        assert!(message(update(Kind::InfraEnv, &bad, &still_bad)).contains("pull secret is required"));
        let good = infraenv(json!({"pullSecretRef": {"name": "ps"}}));
        let mut typo = good.clone();
        typo["metadata"]["lables"] = json!({});
        assert!(message(update(Kind::InfraEnv, &good, &typo)).contains("lables"));
    }

    #[test]
    fn unsupported_infraenv_settings_are_warned_about() {
        let ie = infraenv(json!({"pullSecretRef": {"name": "ps"}, "ntpSources": ["ntp.example.com"]}));
        let allowed = create(Kind::InfraEnv, &ie).unwrap();
        assert_eq!(
            allowed.warnings,
            [
                "spec.ntpSources is not supported by this bootstream version: this InfraEnv gets no image (ImageCreated=False)"
            ]
        );
    }

    #[test]
    fn deletes_are_allowed() {
        let old = infraenv(json!({"pullSecretRef": {"name": "ps"}}));
        let delete =
            Request { operation: Operation::Delete, kind: Kind::InfraEnv, subresource: "", old: Some(&old), new: None };
        assert_eq!(decide(&delete), Ok(Allowed::default()));
    }

    fn review(resource: Value, operation: &str, object: Value, old: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": operation,
                           "kind": {"group": "agent-install.openshift.io", "version": "v1beta1", "kind": "InfraEnv"},
                           "resource": resource, "namespace": "ns", "name": "ie",
                           "userInfo": {"username": "admin"}, "object": object, "oldObject": old, "dryRun": false}})
    }

    fn infraenvs() -> Value {
        json!({"group": "agent-install.openshift.io", "version": "v1beta1", "resource": "infraenvs"})
    }

    #[test]
    fn a_review_is_answered_with_its_uid() {
        let ie = infraenv(json!({"pullSecretRef": {"name": "ps"}, "clusterRef": {"name": "c", "namespace": "ns"}}));
        let body = review(infraenvs(), "CREATE", ie.clone(), Value::Null).to_string();
        let a = answer_review(body.as_bytes()).unwrap();
        assert_eq!(
            a.review,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": true}})
        );
        let mut moved = ie.clone();
        moved["spec"]["clusterRef"]["name"] = json!("d");
        let body = review(infraenvs(), "UPDATE", moved, ie).to_string();
        let a = answer_review(body.as_bytes()).unwrap();
        assert_eq!(
            a.review["response"],
            json!({"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": false,
                   "status": {"status": "Failure", "code": 400, "reason": "BadRequest",
                              "message": "Attempted to change Spec.ClusterRef which is immutable after InfraEnv creation."}})
        );
    }

    #[test]
    fn fields_of_newer_crds_are_pruned_not_refused() {
        let mut ie = infraenv(json!({"pullSecretRef": {"name": "ps"}, "someFutureField": {"a": 1}}));
        ie["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        ie["status"] = json!({"conditions": [], "futureStatus": true});
        let body = review(infraenvs(), "CREATE", ie, Value::Null).to_string();
        assert_eq!(answer_review(body.as_bytes()).unwrap().review["response"]["allowed"], true);
    }

    #[test]
    fn a_resource_bootstream_does_not_model_is_allowed_unjudged() {
        let body = review(
            json!({"group": "", "version": "v1", "resource": "configmaps"}),
            "CREATE",
            json!({"data": 1}),
            Value::Null,
        )
        .to_string();
        let a = answer_review(body.as_bytes()).unwrap();
        assert_eq!((a.kind, a.review["response"]["allowed"].clone()), (None, json!(true)));
    }

    #[test]
    fn what_is_not_a_v1_review_is_an_error() {
        assert!(matches!(answer_review(b"{"), Err(ReviewError::NotJson(_))));
        let mut v1beta1 = review(infraenvs(), "CREATE", json!({}), Value::Null);
        v1beta1["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let e = answer_review(v1beta1.to_string().as_bytes()).unwrap_err().to_string();
        assert!(e.contains("admission.k8s.io/v1beta1") && e.contains("admissionReviewVersions"), "{e}");
        let e = answer_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).unwrap_err();
        assert!(e.to_string().contains("no request"), "{e}");
        let mut no_uid = review(infraenvs(), "CREATE", json!({}), Value::Null);
        no_uid["request"]["uid"] = json!("");
        assert!(answer_review(no_uid.to_string().as_bytes()).is_err());
        let mut patch = review(infraenvs(), "PATCH", json!({}), Value::Null);
        patch["request"]["uid"] = json!("u");
        assert!(answer_review(patch.to_string().as_bytes()).unwrap_err().to_string().contains("\"PATCH\""));
    }
}
