//! metal3's BareMetalHost and PreprovisioningImage (`metal3.io/v1alpha1`), in the shapes of the CRDs in
//! `../shared/fixtures/assisted/crds/`. Every field of those CRDs is typed; the ones the controllers do
//! not use (RAID, firmware, metal3's status bookkeeping) are optional and kept as written, so that
//! nothing a user or the bare metal operator wrote is lost when a controller writes the object back.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as MetaCondition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The BMAC's finalizer on BareMetalHosts.
pub const BMH_FINALIZER: &str = "bmac.agent-install.openshift.io/deprovision";
/// The PreprovisioningImage controller's finalizer.
pub const PPI_FINALIZER: &str = "preprovisioningimage.agent-install.openshift.io/ai-deprovision";

/// BMH annotations the BMAC copies into the Agent spec (spec-controllers.md §5.3).
pub const ROLE_ANNOTATION: &str = "bmac.agent-install.openshift.io/role";
pub const HOSTNAME_ANNOTATION: &str = "bmac.agent-install.openshift.io/hostname";
pub const MCP_ANNOTATION: &str = "bmac.agent-install.openshift.io/machine-config-pool";
pub const INSTALLER_ARGS_ANNOTATION: &str = "bmac.agent-install.openshift.io/installer-args";
pub const IGNITION_OVERRIDES_ANNOTATION: &str = "bmac.agent-install.openshift.io/ignition-config-overrides";
pub const CLUSTER_REFERENCE_ANNOTATION: &str = "bmac.agent-install.openshift.io/cluster-reference";
pub const FENCING_SECRET_ANNOTATION: &str = "bmac.agent-install.openshift.io/fencing-credentials-secret-name";
/// bootstream writes the fencing credentials secret (`<agent>-fencing-credentials`) from the BMH's BMC.
pub const CREATE_FENCING_SECRET_ANNOTATION: &str = "bmac.agent-install.openshift.io/create-fencing-credentials-secret";
pub const NODE_LABEL_PREFIX: &str = "bmac.agent-install.openshift.io.node-label.";
pub const AGENT_LABEL_PREFIX: &str = "bmac.agent-install.openshift.io.agent-label.";
pub const REMOVE_AGENT_ON_DELETE_ANNOTATION: &str = "bmac.agent-install.openshift.io/remove-agent-and-node-on-delete";
pub const ALLOW_PROVISIONED_HOST_MANAGEMENT_ANNOTATION: &str =
    "bmac.agent-install.openshift.io/allow-provisioned-host-management";
/// Draining the spoke node of a BMH deleted in remove-agent mode (spec-controllers.md §5.6): when it started (RFC
/// 3339), how long to try (a duration such as `10m`; none: until it succeeds), and how it went.
pub const DRAIN_STARTED_AT_ANNOTATION: &str = "bmac.agent-install.openshift.io/drain-started-at";
pub const DRAIN_TIMEOUT_ANNOTATION: &str = "bmac.agent-install.openshift.io/drain-timeout";
pub const DRAIN_STATUS_ANNOTATION: &str = "bmac.agent-install.openshift.io/drain-status";
pub const DRAIN_SUCCEEDED: &str = "drain succeeded";
pub const DRAIN_IN_PROGRESS: &str = "draining in progress";
pub const DRAIN_TIMED_OUT: &str = "drain timed out";
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
    doc = "A physical host metal3 manages through its BMC.",
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
    pub consumer_ref: Option<k8s_openapi::api::core::v1::ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_deploy: Option<CustomDeploy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub externally_provisioned: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwareConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<BmhImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprovisioning_network_data_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid: Option<RaidConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<k8s_openapi::api::core::v1::Taint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<SecretReference>,
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

/// What the bare metal operator reports. The controllers read `provisioning.state`,
/// `operationalStatus` and `hardware.hostname`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operational_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<HardwareDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_credentials: Option<CredentialsStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_history: Option<OperationHistory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub powered_on: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_credentials: Option<CredentialsStatus>,
}

/// Where the host is in metal3's provisioning state machine, and what it was provisioned with.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionStatus {
    #[serde(default)]
    pub state: String,
    #[serde(default, rename = "ID", skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_deploy: Option<CustomDeploy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwareConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<BmhImage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid: Option<RaidConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,
}

/// BIOS settings metal3 applies to the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FirmwareConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simultaneous_multithreading_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualization_enabled: Option<bool>,
}

/// A secret by name and namespace (the namespace defaults to the object's).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A RAID volume built by the host's RAID controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HardwareRaidVolume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_of_physical_disks: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_disks: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_gibibytes: Option<i64>,
}

/// A software RAID volume and the disks it is made of.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SoftwareRaidVolume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_disks: Option<Vec<RootDeviceHints>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_gibibytes: Option<i64>,
}

/// The RAID volumes metal3 builds before provisioning.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RaidConfig {
    #[serde(default, rename = "hardwareRAIDVolumes", skip_serializing_if = "Option::is_none")]
    pub hardware_raid_volumes: Option<Vec<HardwareRaidVolume>>,
    #[serde(default, rename = "softwareRAIDVolumes", skip_serializing_if = "Option::is_none")]
    pub software_raid_volumes: Option<Vec<SoftwareRaidVolume>>,
}

/// A BMC credentials secret and the version of it that was used.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_version: Option<String>,
}

/// The host's processors, as inspection found them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareCpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_megahertz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The host's BIOS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareBios {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The host's firmware.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareFirmware {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<HardwareBios>,
}

/// A VLAN seen on a NIC.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareVlan {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A NIC of the host, one per address.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareNic {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_gbps: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_id: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlans: Option<Vec<HardwareVlan>>,
}

/// A disk of the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareStorage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_vendor_extension: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_with_extension: Option<String>,
}

/// Maker and model of the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSystemVendor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
}

/// What inspection found on the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareDetails {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<HardwareCpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<HardwareFirmware>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<Vec<HardwareNic>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_mebibytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Vec<HardwareStorage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_vendor: Option<HardwareSystemVendor>,
}

/// When an operation started and ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationMetric {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
}

/// Timing of the host's last operations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationHistory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprovision: Option<OperationMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspect: Option<OperationMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision: Option<OperationMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<OperationMetric>,
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
    doc = "The image a BareMetalHost boots before provisioning (here: the discovery image).",
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
    pub network_data: Option<NetworkDataStatus>,
}

/// The network data secret an image was built with, and its version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkDataStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}
