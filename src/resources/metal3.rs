//! metal3's BareMetalHost and PreprovisioningImage (`metal3.io/v1alpha1`), in the shapes of the CRDs in
//! `../shared/fixtures/assisted/crds/`. The fields the Bare Metal Agent Controller and the
//! PreprovisioningImage controller read or write are typed; the rest (BMC details, RAID, firmware,
//! metal3's status bookkeeping) pass through as JSON, so that nothing a user or the bare metal operator
//! wrote is lost when a controller writes the object back.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as MetaCondition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The BMAC's finalizer on BareMetalHosts.
pub const BMH_FINALIZER: &str = "bmac.agent-install.openshift.io/deprovision";
/// The PreprovisioningImage controller's finalizer.
pub const PPI_FINALIZER: &str = "preprovisioningimage.agent-install.openshift.io/ai-deprovision";

/// BMH annotations the BMAC copies into the Agent spec (spec-controllers §5.3).
pub const ROLE_ANNOTATION: &str = "bmac.agent-install.openshift.io/role";
pub const HOSTNAME_ANNOTATION: &str = "bmac.agent-install.openshift.io/hostname";
pub const MCP_ANNOTATION: &str = "bmac.agent-install.openshift.io/machine-config-pool";
pub const INSTALLER_ARGS_ANNOTATION: &str = "bmac.agent-install.openshift.io/installer-args";
pub const IGNITION_OVERRIDES_ANNOTATION: &str = "bmac.agent-install.openshift.io/ignition-config-overrides";
pub const CLUSTER_REFERENCE_ANNOTATION: &str = "bmac.agent-install.openshift.io/cluster-reference";
pub const FENCING_SECRET_ANNOTATION: &str = "bmac.agent-install.openshift.io/fencing-credentials-secret-name";
pub const NODE_LABEL_PREFIX: &str = "bmac.agent-install.openshift.io.node-label.";
pub const AGENT_LABEL_PREFIX: &str = "bmac.agent-install.openshift.io.agent-label.";
pub const REMOVE_AGENT_ON_DELETE_ANNOTATION: &str = "bmac.agent-install.openshift.io/remove-agent-and-node-on-delete";
pub const ALLOW_PROVISIONED_HOST_MANAGEMENT_ANNOTATION: &str =
    "bmac.agent-install.openshift.io/allow-provisioned-host-management";
pub const SPOKE_BMH_MACHINE_CREATED_ANNOTATION: &str = "bmac.agent-install.openshift.io/spoke-bmh-machine-created";
/// metal3's own annotations.
pub const DETACHED_ANNOTATION: &str = "baremetalhost.metal3.io/detached";
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
pub const STATUS_ANNOTATION: &str = "baremetalhost.metal3.io/status";
pub const INSPECT_ANNOTATION: &str = "inspect.metal3.io";
pub const HARDWARE_DETAILS_ANNOTATION: &str = "inspect.metal3.io/hardwaredetails";
pub const REBOOT_ANNOTATION: &str = "reboot.metal3.io";
/// Labels the BMAC puts on BMHs of an InfraEnv, for the hub's backup.
pub const BACKUP_LABEL: &str = "cluster.open-cluster-management.io/backup";
/// The value the BMAC writes into the annotations it owns on a BMH.
pub const BMAC_ANNOTATION_VALUE: &str = "assisted-service-controller";
/// The custom deploy method of the converged flow: ironic starts the discovery agent.
pub const ASSISTED_DEPLOY_METHOD: &str = "start_assisted_install";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metal3.io",
    version = "v1alpha1",
    kind = "BareMetalHost",
    plural = "baremetalhosts",
    namespaced,
    status = "BareMetalHostStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BareMetalHostSpec {
    /// Whether the host should be powered on (required by the CRD).
    #[serde(default)]
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automated_cleaning_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<Bmc>,
    #[serde(default, rename = "bootMACAddress", skip_serializing_if = "Option::is_none")]
    pub boot_mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_deploy: Option<CustomDeploy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub externally_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<BmhImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprovisioning_network_data_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Bmc {
    pub address: String,
    pub credentials_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_certificate_verification: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomDeploy {
    pub method: String,
}

/// The image metal3 writes to the host; `format` is `live-iso` for a discovery ISO.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BmhImage {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// Which disk to install to (metal3's root device hints; every hint given must match).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootDeviceHints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_gigabytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_vendor_extension: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_with_extension: Option<String>,
}

/// What the bare metal operator reports. Only the fields the controllers read are typed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operational_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<Value>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionStatus {
    #[serde(default)]
    pub state: String,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

impl BareMetalHost {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
    }
    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref().and_then(|a| a.get(key)).map(String::as_str)
    }
    /// metal3's provisioning state (`ready`, `available`, `provisioned`, `deprovisioning`...), "" before
    /// the operator reported one.
    pub fn provisioning_state(&self) -> &str {
        self.status.as_ref().and_then(|s| s.provisioning.as_ref()).map(|p| p.state.as_str()).unwrap_or("")
    }
    pub fn operational_status(&self) -> &str {
        self.status.as_ref().and_then(|s| s.operational_status.as_deref()).unwrap_or("")
    }
    pub fn annotations_mut(&mut self) -> &mut BTreeMap<String, String> {
        self.metadata.annotations.get_or_insert_default()
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metal3.io",
    version = "v1alpha1",
    kind = "PreprovisioningImage",
    plural = "preprovisioningimages",
    namespaced,
    status = "PreprovisioningImageStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreprovisioningImageSpec {
    /// Formats the consumer can boot, in order of preference: `iso`, `initrd`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept_formats: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreprovisioningImageStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<MetaCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub extra_kernel_params: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub format: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<Value>,
}
