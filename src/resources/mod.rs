//! The resource model: the same YAML users apply to Kubernetes (assisted-service's CRDs), as Rust types.
//!
//! Spec types reject unknown fields, so that a typo in a user's YAML is an error that names the field
//! instead of a setting that silently does nothing. Field names and JSON spellings follow the CRDs in
//! `../shared/fixtures/assisted/crds/` exactly.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod admission;
pub mod agent;
pub mod crds;
pub mod hive;
pub mod kubeconfig;
pub mod metal3;
pub mod printing;
pub mod references;

pub use agent::Agent;
pub use hive::{AgentClusterInstall, ClusterDeployment, ClusterImageSet};
pub use metal3::{BareMetalHost, PreprovisioningImage};

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

/// Label of the Secrets the controllers follow (pull secrets, ignition tokens, kubeconfigs): in a
/// cluster, the controller watches only Secrets carrying it (as assisted-service does).
pub const WATCH_LABEL: &str = "agent-install.openshift.io/watch";

/// Label put on Agents (and BMHs, PPIs) naming their InfraEnv.
pub const INFRAENV_NAME_LABEL: &str = "infraenvs.agent-install.openshift.io";
/// The InfraEnv annotation asking for the ironic agent in its image (set by the PreprovisioningImage
/// controller); `"true"` turns it on.
pub const ENABLE_IRONIC_AGENT_ANNOTATION: &str = "infraenv.agent-install.openshift.io/enable-ironic-agent";
/// The one condition an InfraEnv carries.
pub const IMAGE_CREATED_CONDITION: &str = "ImageCreated";
pub const REASON_INFRAENV_AVAILABLE: &str = "InfraEnvAvailable";
pub const REASON_IMAGE_CREATION_ERROR: &str = "ImageCreationError";
pub const REASON_MISSING_CLUSTER_DEPLOYMENT: &str = "MissingClusterDeployment";
pub const MESSAGE_IMAGE_AVAILABLE: &str = "InfraEnv is available: Image has been created";
pub const MESSAGE_FAILED_TO_CREATE: &str = "Failed to create image";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "agent-install.openshift.io",
    version = "v1beta1",
    kind = "InfraEnv",
    doc = "A discovery environment: the image hosts boot to join the pool, and how it is built.",
    plural = "infraenvs",
    namespaced,
    status = "InfraEnvStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InfraEnvSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Proxy>,
    #[serde(default, rename = "additionalNTPSources", skip_serializing_if = "Vec::is_empty")]
    pub additional_ntp_sources: Vec<String>,
    #[serde(default, rename = "ntpSources", skip_serializing_if = "Vec::is_empty")]
    pub ntp_sources: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_authorized_key: Option<String>,
    pub pull_secret_ref: LocalObjectReference,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub agent_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nm_state_config_label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<ClusterReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_config_override: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_architecture: Option<String>,
    #[serde(default, rename = "ipxeScriptType", skip_serializing_if = "Option::is_none")]
    pub ipxe_script_type: Option<IpxeScriptType>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_arguments: Vec<KernelArgument>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_trust_bundle: Option<String>,
    #[serde(default, rename = "osImageVersion", skip_serializing_if = "Option::is_none")]
    pub os_image_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_registry_ref: Option<NamespacedReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_type: Option<ImageType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_approval: Option<AgentApproval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_discovery_delay_seconds: Option<u32>,
}

/// Static network configuration for one host (or one group of hosts sharing MACs), selected by an
/// InfraEnv's `nmStateConfigLabelSelector`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "agent-install.openshift.io",
    version = "v1beta1",
    kind = "NMStateConfig",
    doc = "Static network configuration for the hosts whose NICs have the listed MAC addresses.",
    plural = "nmstateconfigs",
    namespaced
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NMStateConfigSpec {
    /// The nmstate document (free-form; validated by nmstate when the image is built).
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_object")]
    pub config: Value,
    /// Logical interface names of `config` and the MAC addresses of the NICs they stand for.
    pub interfaces: Vec<NMStateInterface>,
}

/// The schema of a free-form object that an API server must keep as written instead of pruning it.
fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NMStateInterface {
    pub name: String,
    pub mac_address: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Proxy {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub http_proxy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub https_proxy: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub no_proxy: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalObjectReference {
    #[serde(default)]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterReference {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NamespacedReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentApproval {
    #[serde(default)]
    pub auto_approve: bool,
}

/// A Kubernetes label selector (`matchLabels` AND `matchExpressions`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// True when the selector selects nothing in assisted-service's reading (an empty selector selects
    /// no NMStateConfigs, not all of them).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Kubernetes label-selector semantics: every matchLabels pair and every expression must hold.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }

    fn validate(&self, field: &str) -> Result<(), DocumentError> {
        for (i, e) in self.match_expressions.iter().enumerate() {
            let ok = match e.operator.as_str() {
                "In" | "NotIn" => !e.values.is_empty(),
                "Exists" | "DoesNotExist" => e.values.is_empty(),
                _ => false,
            };
            if !ok {
                return Err(DocumentError::Invalid(format!(
                    "{field}.matchExpressions[{i}]: operator {:?} with {} values is not valid (In/NotIn need values, Exists/DoesNotExist take none)",
                    e.operator,
                    e.values.len()
                )));
            }
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IpxeScriptType {
    #[serde(rename = "")]
    Unset,
    DiscoveryImageAlways,
    BootOrderControl,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ImageType {
    #[serde(rename = "full-iso")]
    FullIso,
    #[serde(rename = "minimal-iso")]
    MinimalIso,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelArgument {
    pub operation: KernelArgumentOperation,
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KernelArgumentOperation {
    Append,
    Replace,
    Delete,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InfraEnvStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_label_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "BootArtifacts::is_empty")]
    pub boot_artifacts: BootArtifacts,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_info: Option<DebugInfo>,
    #[serde(default, rename = "isoDownloadURL", skip_serializing_if = "String::is_empty")]
    pub iso_download_url: String,
    /// bootstream extension: the strong ETag of the discovery ISO the status describes. `createdTime`
    /// moves when this changes, so a new image (new pull secret, new static network...) is visible even
    /// where the download URL stays the same.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_digest: String,
    /// bootstream extension: the image the status describes starts the ironic agent (the InfraEnv has
    /// the enable-ironic-agent annotation). A PreprovisioningImage waits for it after turning the agent
    /// on, so that it never hands metal3 the image from before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ironic_agent: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct BootArtifacts {
    #[serde(default, rename = "discoveryIgnitionURL", skip_serializing_if = "String::is_empty")]
    pub discovery_ignition_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub initrd: String,
    #[serde(default, rename = "ipxeScript", skip_serializing_if = "String::is_empty")]
    pub ipxe_script: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rootfs: String,
}

impl BootArtifacts {
    pub fn is_empty(&self) -> bool {
        *self == BootArtifacts::default()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DebugInfo {
    #[serde(default, rename = "eventsURL", skip_serializing_if = "String::is_empty")]
    pub events_url: String,
    #[serde(default, rename = "staticNetworkDownloadURL", skip_serializing_if = "String::is_empty")]
    pub static_network_download_url: String,
}

/// An OpenShift-style status condition (the shape assisted-service's CRDs use, with heartbeat time).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Hive's conditions (ClusterDeployment, AgentClusterInstall) carry this instead of a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
}

/// Sets a condition the way OpenShift's `SetStatusConditionNoHeartbeat` does: the transition time moves
/// only when the status changes. Returns true if anything changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition, now: Time) -> bool {
    if let Some(old) = conditions.iter_mut().find(|c| c.type_ == new.type_) {
        if old.status == new.status && old.reason == new.reason && old.message == new.message {
            return false;
        }
        new.last_transition_time = if old.status == new.status { old.last_transition_time.clone() } else { Some(now) };
        new.last_heartbeat_time = old.last_heartbeat_time.clone();
        new.last_probe_time = old.last_probe_time.clone();
        *old = new;
    } else {
        new.last_transition_time = Some(now);
        conditions.push(new);
    }
    true
}

/// Now, truncated to whole seconds (the resolution of Kubernetes timestamps and HTTP dates; rounding up
/// would put times a moment into the future).
pub fn now_seconds() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second()).unwrap_or(now)
}

pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

impl InfraEnvSpec {
    /// The first setting this bootstream version does not build into images, if the spec has one: an
    /// InfraEnv using it gets no image (`ImageCreated=False`), and admission warns when it is written.
    pub fn unsupported_field(&self) -> Option<&'static str> {
        [
            (self.mirror_registry_ref.is_some(), "spec.mirrorRegistryRef"),
            (!self.ntp_sources.is_empty(), "spec.ntpSources"),
            (!self.additional_ntp_sources.is_empty(), "spec.additionalNTPSources"),
        ]
        .into_iter()
        .find_map(|(set, field)| set.then_some(field))
    }
}

impl InfraEnv {
    /// Architecture as assisted-service normalizes it (empty ⇒ x86_64, amd64 ⇒ x86_64, aarch64 ⇒ arm64).
    pub fn cpu_architecture(&self) -> String {
        normalize_arch(self.spec.cpu_architecture.as_deref().unwrap_or(""))
    }
}

pub fn normalize_arch(arch: &str) -> String {
    match arch {
        "" | "amd64" | "x86-64" => "x86_64".to_string(),
        "aarch64" => "arm64".to_string(),
        other => other.to_string(),
    }
}

/// The `.dockerconfigjson` key of a pull secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// Reads a string value from a Secret's `data` (or `stringData`, which the store folds into `data`).
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone()).ok();
    }
    secret.string_data.as_ref().and_then(|d| d.get(key)).cloned()
}

/// Errors in a user's resource document, with the path of the offending field.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{0}")]
    Invalid(String),
    /// A field does not decode into its type.
    #[error("{path}")]
    Field {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The document as a whole does not decode into its kind's type.
    #[error(transparent)]
    Decode(serde_json::Error),
    #[error("status")]
    Status(#[source] Box<DocumentError>),
    #[error("spec.ignitionConfigOverride: not valid JSON")]
    IgnitionConfigOverride(#[source] serde_json::Error),
    #[error(transparent)]
    Agent(#[from] agent::AgentAdmissionError),
    #[error(transparent)]
    AgentClusterInstall(#[from] hive::AciAdmissionError),
    #[error("kind {kind} (apiVersion {api_version}) is not supported; supported kinds: {supported}")]
    UnsupportedKind { kind: String, api_version: String, supported: String },
}

/// Kinds the embedded store accepts, with their API coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    InfraEnv,
    NMStateConfig,
    Secret,
    Agent,
    ClusterDeployment,
    AgentClusterInstall,
    ClusterImageSet,
    BareMetalHost,
    PreprovisioningImage,
}

impl Kind {
    /// The store key of the kind: `plural.group`, or the plural alone for the core group.
    pub fn resource(self) -> String {
        match self.api_version().split_once('/') {
            Some((group, _)) => format!("{}.{group}", self.plural()),
            None => self.plural().to_string(),
        }
    }
    /// The kind whose [`Kind::resource`] is `resource`.
    pub fn from_resource(resource: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.resource() == resource)
    }
    /// Cluster-scoped kinds are stored with the namespace "".
    pub fn namespaced(self) -> bool {
        self != Kind::ClusterImageSet
    }

    pub const ALL: [Kind; 9] = [
        Kind::InfraEnv,
        Kind::NMStateConfig,
        Kind::Secret,
        Kind::Agent,
        Kind::ClusterDeployment,
        Kind::AgentClusterInstall,
        Kind::ClusterImageSet,
        Kind::BareMetalHost,
        Kind::PreprovisioningImage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::InfraEnv => "InfraEnv",
            Kind::NMStateConfig => "NMStateConfig",
            Kind::Secret => "Secret",
            Kind::Agent => "Agent",
            Kind::ClusterDeployment => "ClusterDeployment",
            Kind::AgentClusterInstall => "AgentClusterInstall",
            Kind::ClusterImageSet => "ClusterImageSet",
            Kind::BareMetalHost => "BareMetalHost",
            Kind::PreprovisioningImage => "PreprovisioningImage",
        }
    }
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::InfraEnv | Kind::NMStateConfig | Kind::Agent => "agent-install.openshift.io/v1beta1",
            Kind::Secret => "v1",
            Kind::ClusterDeployment | Kind::ClusterImageSet => "hive.openshift.io/v1",
            Kind::AgentClusterInstall => "extensions.hive.openshift.io/v1beta1",
            Kind::BareMetalHost | Kind::PreprovisioningImage => "metal3.io/v1alpha1",
        }
    }
    pub fn plural(self) -> &'static str {
        match self {
            Kind::InfraEnv => "infraenvs",
            Kind::NMStateConfig => "nmstateconfigs",
            Kind::Secret => "secrets",
            Kind::Agent => "agents",
            Kind::ClusterDeployment => "clusterdeployments",
            Kind::AgentClusterInstall => "agentclusterinstalls",
            Kind::ClusterImageSet => "clusterimagesets",
            Kind::BareMetalHost => "baremetalhosts",
            Kind::PreprovisioningImage => "preprovisioningimages",
        }
    }
    /// REST path prefix of the kind's collection, Kubernetes style (`/apis/<group>/<version>` or `/api/v1`).
    pub fn api_prefix(self) -> &'static str {
        match self {
            Kind::InfraEnv | Kind::NMStateConfig | Kind::Agent => "/apis/agent-install.openshift.io/v1beta1",
            Kind::Secret => "/api/v1",
            Kind::ClusterDeployment | Kind::ClusterImageSet => "/apis/hive.openshift.io/v1",
            Kind::AgentClusterInstall => "/apis/extensions.hive.openshift.io/v1beta1",
            Kind::BareMetalHost | Kind::PreprovisioningImage => "/apis/metal3.io/v1alpha1",
        }
    }
    /// Accepts the names users type on the command line: `infraenv`, `infraenvs`, `InfraEnv`, `secret`...
    pub fn from_cli(name: &str) -> Option<Kind> {
        let lower = name.to_ascii_lowercase();
        Kind::ALL.into_iter().find(|k| {
            let singular = k.name().to_ascii_lowercase();
            let short = match k {
                Kind::ClusterDeployment => "cd",
                Kind::AgentClusterInstall => "aci",
                Kind::BareMetalHost => "bmh",
                Kind::PreprovisioningImage => "ppi",
                _ => "",
            };
            lower == singular || lower == k.plural() || lower == short || lower.split('.').next() == Some(k.plural())
        })
    }
    pub fn from_plural(plural: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.plural() == plural)
    }
    pub fn from_type_meta(api_version: &str, kind: &str) -> Result<Kind, DocumentError> {
        Kind::ALL.into_iter().find(|k| k.name() == kind && k.api_version() == api_version).ok_or_else(|| {
            DocumentError::UnsupportedKind {
                kind: kind.to_string(),
                api_version: api_version.to_string(),
                supported: Kind::ALL
                    .iter()
                    .map(|k| format!("{} ({})", k.name(), k.api_version()))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })
    }
}

const TOP_LEVEL_FIELDS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
/// The fields a Secret has.
pub const SECRET_TOP_LEVEL_FIELDS: &[&str] =
    &["apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable"];
/// The fields of ObjectMeta a client may send.
pub const METADATA_FIELDS: &[&str] = &[
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "generateName",
    "selfLink",
];

/// The envelope of a document: `apiVersion` and `kind` of a supported kind, no unknown top-level or
/// metadata fields, valid names. Returns the kind.
fn check_envelope(doc: &Value) -> Result<Kind, DocumentError> {
    let obj = doc.as_object().ok_or_else(|| DocumentError::Invalid("a resource must be a mapping".into()))?;
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind_name = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version.is_empty() || kind_name.is_empty() {
        return Err(DocumentError::Invalid("apiVersion and kind are required".into()));
    }
    let kind = Kind::from_type_meta(api_version, kind_name)?;
    let allowed = if kind == Kind::Secret { SECRET_TOP_LEVEL_FIELDS } else { TOP_LEVEL_FIELDS };
    check_known_fields("", obj, allowed)?;
    let metadata = obj
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| DocumentError::Invalid("metadata: a mapping with at least a name is required".into()))?;
    check_known_fields("metadata.", metadata, METADATA_FIELDS)?;
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default();
    check_dns_name("metadata.name", name)?;
    if let Some(ns) = metadata.get("namespace") {
        check_dns_name("metadata.namespace", ns.as_str().unwrap_or_default())?;
    }
    Ok(kind)
}

/// Checks a user document (already parsed from YAML or JSON) and returns it normalized, as the typed
/// value serializes it. Errors name the field: `spec.proxy.httpProxy: invalid type: integer...`.
pub fn validate_document(doc: &Value) -> Result<(Kind, Value), DocumentError> {
    let kind = check_envelope(doc)?;
    let normalized = match kind {
        Kind::InfraEnv => {
            let mut typed: InfraEnv = typed_from(doc)?;
            typed.status = None;
            validate_infraenv(&typed)?;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::NMStateConfig => {
            let typed: NMStateConfig = typed_from(doc)?;
            validate_nmstateconfig(&typed)?;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::Agent => {
            let mut typed: Agent = typed_from(doc)?;
            typed.status = None;
            agent::validate_agent(&typed)?;
            if let Some(r) = &typed.spec.cluster_deployment_name
                && (r.name.is_empty() || r.namespace.is_empty())
            {
                return Err(DocumentError::Invalid(
                    "spec.clusterDeploymentName: both name and namespace are required".into(),
                ));
            }
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::ClusterDeployment => {
            let mut typed: ClusterDeployment = typed_from(doc)?;
            typed.status = None;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::AgentClusterInstall => {
            let mut typed: AgentClusterInstall = typed_from(doc)?;
            typed.status = None;
            hive::validate_aci(&typed)?;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::ClusterImageSet => {
            let mut typed: ClusterImageSet = typed_from(doc)?;
            typed.status = None;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::BareMetalHost => {
            let mut typed: BareMetalHost = typed_from(doc)?;
            typed.status = None;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::PreprovisioningImage => {
            let mut typed: PreprovisioningImage = typed_from(doc)?;
            typed.status = None;
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
        Kind::Secret => {
            let mut typed: Secret = typed_from(doc)?;
            fold_string_data(&mut typed);
            serde_json::to_value(&typed).expect("typed resources serialize")
        }
    };
    Ok((kind, normalized))
}

/// The admission rules that compare an update with the object it replaces (assisted-service's
/// validating webhooks): fields that are immutable after creation, or once an Agent or a cluster
/// installs. [`admission::decide`] applies them with the rest.
pub fn validate_update(kind: Kind, live: &Value, new: &Value) -> Result<(), DocumentError> {
    match kind {
        Kind::InfraEnv => {
            if live["spec"].get("clusterRef") != new["spec"].get("clusterRef") {
                return Err(DocumentError::Invalid(
                    "Attempted to change Spec.ClusterRef which is immutable after InfraEnv creation.".into(),
                ));
            }
            let arch = |v: &Value| normalize_arch(v["spec"]["cpuArchitecture"].as_str().unwrap_or(""));
            if arch(live) != arch(new) {
                return Err(DocumentError::Invalid(
                    "Attempted to change Spec.CpuArchitecture which is immutable after InfraEnv creation.".into(),
                ));
            }
            Ok(())
        }
        Kind::Agent => {
            let old: Agent = serde_json::from_value(live.clone()).map_err(DocumentError::Decode)?;
            let mut new_doc = new.clone();
            if let Some(o) = new_doc.as_object_mut() {
                o.remove("status");
            }
            let new: Agent = serde_json::from_value(new_doc).map_err(DocumentError::Decode)?;
            Ok(agent::validate_agent_update(&old, &new)?)
        }
        Kind::AgentClusterInstall => {
            let old: AgentClusterInstall = serde_json::from_value(live.clone()).map_err(DocumentError::Decode)?;
            let mut new_doc = new.clone();
            if let Some(o) = new_doc.as_object_mut() {
                o.remove("status");
            }
            let new: AgentClusterInstall = serde_json::from_value(new_doc).map_err(DocumentError::Decode)?;
            Ok(hive::validate_aci_update(&old, &new)?)
        }
        _ => Ok(()),
    }
}

/// Checks the status of a document written through the status subresource and returns it
/// normalized. Kinds without a status (Secret, NMStateConfig, ClusterImageSet) have no such subresource.
pub fn validate_status(kind: Kind, doc: &Value) -> Result<Option<Value>, DocumentError> {
    fn check<St: serde::de::DeserializeOwned + Serialize>(doc: &Value) -> Result<Option<Value>, DocumentError> {
        match doc.get("status") {
            None | Some(Value::Null) => Ok(None),
            Some(s) => {
                let typed: St = typed_from(s).map_err(|e| DocumentError::Status(Box::new(e)))?;
                Ok(Some(serde_json::to_value(typed).expect("typed resources serialize")))
            }
        }
    }
    match kind {
        Kind::InfraEnv => check::<InfraEnvStatus>(doc),
        Kind::Agent => check::<agent::AgentStatus>(doc),
        Kind::ClusterDeployment => check::<hive::ClusterDeploymentStatus>(doc),
        Kind::AgentClusterInstall => check::<hive::AgentClusterInstallStatus>(doc),
        Kind::BareMetalHost => check::<metal3::BareMetalHostStatus>(doc),
        Kind::PreprovisioningImage => check::<metal3::PreprovisioningImageStatus>(doc),
        Kind::Secret | Kind::NMStateConfig | Kind::ClusterImageSet => {
            Err(DocumentError::Invalid(format!("{} has no status subresource", kind.name())))
        }
    }
}

fn typed_from<T: serde::de::DeserializeOwned>(doc: &Value) -> Result<T, DocumentError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        if path == "." || path.is_empty() {
            DocumentError::Decode(e.into_inner())
        } else {
            DocumentError::Field { path, source: e.into_inner() }
        }
    })
}

fn check_known_fields(
    prefix: &str,
    obj: &serde_json::Map<String, Value>,
    allowed: &[&str],
) -> Result<(), DocumentError> {
    for key in obj.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(DocumentError::Invalid(format!(
                "{prefix}{key}: unknown field `{key}`, expected one of {}",
                allowed.iter().map(|a| format!("`{a}`")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(())
}

/// Whether `name` is an object name Kubernetes accepts (RFC 1123 subdomain), which also keeps it
/// safe in URLs.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// Object names as Kubernetes accepts them ([`is_dns_subdomain`]).
fn check_dns_name(field: &str, name: &str) -> Result<(), DocumentError> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(DocumentError::Invalid(format!(
            "{field}: {name:?} is not a valid name (lower-case letters, digits, '-' and '.', starting and ending alphanumeric)"
        )))
    }
}

fn validate_infraenv(ie: &InfraEnv) -> Result<(), DocumentError> {
    if ie.spec.pull_secret_ref.name.is_empty() {
        return Err(DocumentError::Invalid("spec.pullSecretRef.name: a pull secret is required".into()));
    }
    if let Some(sel) = &ie.spec.nm_state_config_label_selector {
        sel.validate("spec.nmStateConfigLabelSelector")?;
    }
    for (i, karg) in ie.spec.kernel_arguments.iter().enumerate() {
        if !valid_karg_value(&karg.value) {
            return Err(DocumentError::Invalid(format!(
                "spec.kernelArguments[{i}].value: {:?} is not a kernel argument (no spaces outside double quotes)",
                karg.value
            )));
        }
    }
    if let Some(over) = ie.spec.ignition_config_override.as_deref().filter(|s| !s.trim().is_empty()) {
        serde_json::from_str::<Value>(over).map_err(DocumentError::IgnitionConfigOverride)?;
    }
    Ok(())
}

fn validate_nmstateconfig(nm: &NMStateConfig) -> Result<(), DocumentError> {
    if !nm.spec.config.is_object() {
        return Err(DocumentError::Invalid("spec.config: an nmstate document (a mapping) is required".into()));
    }
    if nm.spec.interfaces.is_empty() {
        return Err(DocumentError::Invalid("spec.interfaces: at least one interface is required".into()));
    }
    for (i, iface) in nm.spec.interfaces.iter().enumerate() {
        if iface.name.is_empty() {
            return Err(DocumentError::Invalid(format!("spec.interfaces[{i}].name: required")));
        }
        if !valid_mac(&iface.mac_address) {
            return Err(DocumentError::Invalid(format!(
                "spec.interfaces[{i}].macAddress: {:?} is not a MAC address (xx:xx:xx:xx:xx:xx)",
                iface.mac_address
            )));
        }
    }
    Ok(())
}

/// The CRD's pattern `^([0-9A-Fa-f]{2}[:]){5}([0-9A-Fa-f]{2})$`.
fn valid_mac(mac: &str) -> bool {
    let parts: Vec<&str> = mac.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The CRD's pattern `^(?:(?:[^ \t\n\r"]+)|(?:"[^"]*"))+$`, without a regex engine.
fn valid_karg_value(v: &str) -> bool {
    if v.is_empty() {
        return false;
    }
    let mut in_quotes = false;
    for c in v.chars() {
        match c {
            '"' => in_quotes = !in_quotes,
            ' ' | '\t' | '\n' | '\r' if !in_quotes => return false,
            _ => {}
        }
    }
    !in_quotes
}

/// The API server turns `stringData` into base64 `data`; we do the same so reads are uniform.
fn fold_string_data(secret: &mut Secret) {
    if let Some(string_data) = secret.string_data.take() {
        let data = secret.data.get_or_insert_with(BTreeMap::new);
        for (k, v) in string_data {
            data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::chain;

    fn yaml(s: &str) -> Value {
        yaml_serde::from_str(s).unwrap()
    }

    #[test]
    fn accepts_the_assisted_examples_unchanged() {
        for f in ["infraEnv.yaml", "infraEnvLateBinding.yaml", "pullsecret.yaml"] {
            let text = std::fs::read_to_string(crate::compat_path(&format!("fixtures/assisted/examples/{f}"))).unwrap();
            let (kind, _) = validate_document(&yaml(&text)).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(matches!(kind, Kind::InfraEnv | Kind::Secret));
        }
    }

    #[test]
    fn unknown_spec_field_is_named() {
        let doc = yaml(
            "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: a, namespace: b}\nspec:\n  pullSecretRef: {name: ps}\n  sshAuthorisedKey: x\n",
        );
        let err = chain(&validate_document(&doc).unwrap_err()).to_string();
        assert!(err.contains("sshAuthorisedKey"), "{err}");
        assert!(err.starts_with("spec"), "{err}");
    }

    #[test]
    fn wrong_type_is_named_with_its_path() {
        let doc = yaml(
            "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: a, namespace: b}\nspec:\n  pullSecretRef: {name: ps}\n  proxy: {httpProxy: [1]}\n",
        );
        let err = chain(&validate_document(&doc).unwrap_err()).to_string();
        assert!(err.starts_with("spec.proxy.httpProxy: invalid type"), "{err}");
    }

    #[test]
    fn unknown_metadata_and_top_level_fields_are_errors() {
        let doc = yaml(
            "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: a, lables: {}}\nspec: {pullSecretRef: {name: ps}}\n",
        );
        assert!(chain(&validate_document(&doc).unwrap_err()).to_string().contains("metadata.lables"));
        let doc =
            yaml("apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: a}\nspecs: {}\n");
        assert!(chain(&validate_document(&doc).unwrap_err()).to_string().contains("specs"));
    }

    #[test]
    fn unsupported_kind_lists_supported_ones() {
        let doc = yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n");
        let err = chain(&validate_document(&doc).unwrap_err()).to_string();
        assert!(err.contains("ConfigMap") && err.contains("InfraEnv"), "{err}");
    }

    #[test]
    fn secret_string_data_is_folded_into_data() {
        let doc = yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: b}\nstringData: {k: v}\n");
        let (_, v) = validate_document(&doc).unwrap();
        assert_eq!(v["data"]["k"], "dg==");
        assert!(v.get("stringData").is_none());
    }

    #[test]
    fn nmstateconfig_example_is_accepted_and_bad_macs_are_not() {
        let text = std::fs::read_to_string(crate::compat_path("fixtures/assisted/examples/nmstate.yaml")).unwrap();
        let (kind, v) = validate_document(&yaml(&text)).unwrap();
        assert_eq!(kind, Kind::NMStateConfig);
        assert_eq!(v["spec"]["interfaces"][1]["macAddress"], "02:00:00:80:12:15");
        let bad = text.replace("02:00:00:80:12:15\"", "02:00:00:80:12\"");
        let err = chain(&validate_document(&yaml(&bad)).unwrap_err()).to_string();
        assert!(err.starts_with("spec.interfaces[1].macAddress"), "{err}");
    }

    #[test]
    fn label_selectors() {
        let labels: BTreeMap<String, String> = [("a".to_string(), "1".to_string()), ("b".into(), "2".into())].into();
        let sel = |ml: &[(&str, &str)], ex: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: ml.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            match_expressions: ex,
        };
        let req = |k: &str, op: &str, vs: &[&str]| LabelSelectorRequirement {
            key: k.into(),
            operator: op.into(),
            values: vs.iter().map(|v| v.to_string()).collect(),
        };
        assert!(sel(&[("a", "1")], vec![]).matches(&labels));
        assert!(!sel(&[("a", "2")], vec![]).matches(&labels));
        assert!(sel(&[], vec![req("b", "In", &["2", "3"])]).matches(&labels));
        assert!(!sel(&[], vec![req("b", "NotIn", &["2"])]).matches(&labels));
        assert!(sel(&[], vec![req("c", "DoesNotExist", &[])]).matches(&labels));
        assert!(!sel(&[("a", "1")], vec![req("c", "Exists", &[])]).matches(&labels));
        assert!(sel(&[], vec![]).is_empty());
        assert!(sel(&[], vec![req("b", "In", &[])]).validate("s").is_err());
    }

    #[test]
    fn karg_pattern() {
        assert!(valid_karg_value("rd.net.timeout.carrier=60"));
        assert!(valid_karg_value("a=\"b c\""));
        assert!(!valid_karg_value("a b"));
        assert!(!valid_karg_value(""));
        assert!(!valid_karg_value("a=\"b"));
    }

    #[test]
    fn conditions_keep_transition_time_when_status_is_unchanged() {
        let t0 = Time(jiff::Timestamp::from_second(1).unwrap());
        let t1 = Time(jiff::Timestamp::from_second(2).unwrap());
        let mut cs = vec![];
        let c = |status: &str, msg: &str| Condition {
            type_: "ImageCreated".into(),
            status: status.into(),
            reason: "R".into(),
            message: msg.into(),
            last_transition_time: None,
            last_heartbeat_time: None,
            last_probe_time: None,
        };
        assert!(set_condition(&mut cs, c("True", "a"), t0.clone()));
        assert!(!set_condition(&mut cs, c("True", "a"), t1.clone()));
        assert!(set_condition(&mut cs, c("True", "b"), t1.clone()));
        assert_eq!(cs[0].last_transition_time, Some(t0));
        assert!(set_condition(&mut cs, c("False", "b"), t1.clone()));
        assert_eq!(cs[0].last_transition_time, Some(t1));
    }
}
