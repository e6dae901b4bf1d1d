//! The Agent resource (`agent-install.openshift.io/v1beta1`): one per discovered host. The spec is
//! what users (and the BMAC) ask for; the status mirrors the backend host (spec-controllers.md §2).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Condition;
use super::hive::ValidationResult;
use crate::hosts::{Host, Inventory};

pub const AGENT_FINALIZER: &str = "agent.agent-install.openshift.io/ai-deprovision";
pub const SKIP_SPOKE_CLEANUP_ANNOTATION: &str = "agent.agent-install.openshift.io/skip-spoke-cleanup";
pub const STATE_ANNOTATION: &str = "agent.agent-install.openshift.io/state";
pub const ROLE_ANNOTATION: &str = "agent.agent-install.openshift.io/role";
pub const INVENTORY_ANNOTATION: &str = "agent.agent-install.openshift.io/inventory";
pub const VALIDATIONS_INFO_ANNOTATION: &str = "agent.agent-install.openshift.io/validations-info";
pub const CURRENT_STAGE_ANNOTATION: &str = "agent.agent-install.openshift.io/current-stage";
pub const INVENTORY_VERSION_ANNOTATION: &str = "inventory.agent-install.openshift.io/version";
pub const CD_NAMESPACE_LABEL: &str = "agent-install.openshift.io/clusterdeployment-namespace";
pub const BMH_LABEL: &str = "agent-install.openshift.io/bmh";
/// The node labels an Agent took from its InfraEnv (comma-separated keys), so that they go when the
/// InfraEnv stops propagating them.
pub const INHERITED_NODE_LABELS_ANNOTATION: &str = "agent.agent-install.openshift.io/inherited-node-labels";
/// On an InfraEnv: the comma-separated keys of its labels that become its Agents' node labels.
pub const PROPAGATE_NODE_LABELS_ANNOTATION: &str = "infraenv.agent-install.openshift.io/propagate-node-labels";
/// The key of the ignition endpoint token in the secret `ignitionEndpointTokenReference` names.
pub const IGNITION_TOKEN_KEY: &str = "ignition-token";

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "agent-install.openshift.io",
    version = "v1beta1",
    kind = "Agent",
    doc = "One discovered host: what is asked of it (spec) and what it reports (status).",
    plural = "agents",
    namespaced,
    status = "AgentStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_deployment_name: Option<ClusterDeploymentReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_config_pool: Option<String>,
    #[serde(default)]
    pub approved: bool,
    #[serde(default, rename = "installation_disk_id", skip_serializing_if = "Option::is_none")]
    pub installation_disk_id: Option<String>,
    #[serde(default, rename = "installation_disk_path", skip_serializing_if = "Option::is_none")]
    pub installation_disk_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_args: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_config_overrides: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_endpoint_token_reference: Option<IgnitionEndpointTokenReference>,
    #[serde(default, rename = "ignitionEndpointHTTPHeaders", skip_serializing_if = "Option::is_none")]
    pub ignition_endpoint_http_headers: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The name of a secret in the Agent's namespace holding fencing credentials.
    pub fencing_credentials_secret_ref: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterDeploymentReference {
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IgnitionEndpointTokenReference {
    pub namespace: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bootstrap: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub role: String,
    #[serde(default)]
    pub inventory: AgentInventory,
    #[serde(default)]
    pub progress: AgentProgress,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_sources: Vec<NtpSource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub debug_info: AgentDebugInfo,
    /// Validation results by category (`hardware`, `network`, `operators`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validations_info: Option<BTreeMap<String, Vec<ValidationResult>>>,
    #[serde(default, rename = "installation_disk_id", skip_serializing_if = "String::is_empty")]
    pub installation_disk_id: String,
    #[serde(default, rename = "deprovision_info", skip_serializing_if = "Option::is_none")]
    pub deprovision_info: Option<DeprovisionInfo>,
    #[serde(default, skip_serializing_if = "CsrStatus::is_empty")]
    pub csr_status: CsrStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentDebugInfo {
    #[serde(default, rename = "eventsURL", skip_serializing_if = "String::is_empty")]
    pub events_url: String,
    #[serde(default, rename = "logsURL", skip_serializing_if = "String::is_empty")]
    pub logs_url: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state_info: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DeprovisionInfo {
    #[serde(default, rename = "cluster_name")]
    pub cluster_name: String,
    #[serde(default, rename = "cluster_namespace")]
    pub cluster_namespace: String,
    #[serde(default, rename = "node_name")]
    pub node_name: String,
    #[serde(default)]
    pub message: String,
}

/// One NTP source of the host and its state, as the agent reported them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NtpSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_state: Option<String>,
}

/// The certificate signing requests approved for the host when it joined its cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CsrStatus {
    #[serde(default, rename = "approvedCSRs", skip_serializing_if = "Option::is_none")]
    pub approved_csrs: Option<Vec<ApprovedCsr>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_approval_attempt: Option<String>,
}

impl CsrStatus {
    fn is_empty(&self) -> bool {
        *self == CsrStatus::default()
    }
}

/// An approved CSR: its name, kind (`client` or `serving`) and approval time.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovedCsr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentProgress {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_stage: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress_stages: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress_info: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub installation_percentage: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_update_time: Option<String>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl AgentProgress {
    /// Zeroed when the host has no stage (spec-controllers.md §2.2).
    pub fn from_host(h: &Host) -> AgentProgress {
        if h.progress.current_stage.is_empty() {
            return AgentProgress::default();
        }
        AgentProgress {
            current_stage: h.progress.current_stage.clone(),
            progress_stages: crate::hosts::machine::STAGES.iter().map(|s| s.to_string()).collect(),
            progress_info: h.progress.progress_info.clone(),
            installation_percentage: h.progress.installation_percentage,
            stage_start_time: h.progress.stage_started_at.map(|t| t.to_string()),
            stage_update_time: h.progress.stage_updated_at.map(|t| t.to_string()),
        }
    }
}

/// The inventory as the Agent status shows it (camelCase; interfaces and disks are `[]`, never null).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInventory {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bmc_address: String,
    #[serde(default, rename = "bmcV6Address", skip_serializing_if = "String::is_empty")]
    pub bmc_v6_address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<InventoryMemory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<InventoryCpu>,
    #[serde(default)]
    pub interfaces: Vec<InventoryInterface>,
    #[serde(default)]
    pub disks: Vec<InventoryDisk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<InventoryBoot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_vendor: Option<InventorySystemVendor>,
    /// Left out when empty, as upstream does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<InventoryGpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_time: Option<String>,
}

/// Memory sizes in bytes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryMemory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usable_bytes: Option<i64>,
}

/// The host's processors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryCpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_megahertz: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
}

/// A network interface of the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryInterface {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_dev_name: Option<String>,
    #[serde(default, rename = "clientID", skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_carrier: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_v4_addresses: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_v6_addresses: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
}

/// A disk of the host and whether it can be installed to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryDisk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootable: Option<bool>,
    #[serde(default, rename = "byID", skip_serializing_if = "Option::is_none")]
    pub by_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installation_eligibility: Option<InstallationEligibility>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_perf: Option<IoPerf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smart: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
}

impl InventoryDisk {
    /// Whether assisted-service found the disk fit for installation.
    pub fn eligible(&self) -> bool {
        self.installation_eligibility.as_ref().and_then(|e| e.eligible).unwrap_or(false)
    }
}

/// Whether a disk can be installed to, and why not.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstallationEligibility {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_eligible_reasons: Option<Vec<String>>,
}

/// A disk's measured write latency.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IoPerf {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_duration_milliseconds: Option<i64>,
}

/// How the host booted the discovery image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryBoot {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_boot_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pxe_interface: Option<String>,
}

/// Maker and model of the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventorySystemVendor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,
    #[serde(default, rename = "virtual", skip_serializing_if = "Option::is_none")]
    pub virtual_: Option<bool>,
}

/// A GPU of the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryGpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(default, rename = "deviceID", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, rename = "vendorID", skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<String>,
}

impl AgentInventory {
    pub fn from_host(inv: &Inventory, _host: &Host) -> AgentInventory {
        // The agent reports GPUs as it found them (snake_case keys); the status names them in camelCase.
        let gpu_text = |g: &Value, k: &str| g.get(k).and_then(Value::as_str).map(str::to_string);
        AgentInventory {
            hostname: inv.hostname.clone(),
            bmc_address: inv.bmc_address.clone(),
            bmc_v6_address: inv.bmc_v6address.clone(),
            memory: Some(InventoryMemory {
                physical_bytes: Some(inv.memory.physical_bytes),
                usable_bytes: Some(inv.memory.usable_bytes),
            }),
            cpu: Some(InventoryCpu {
                count: Some(inv.cpu.count),
                clock_megahertz: Some(inv.cpu.frequency as i64),
                flags: Some(inv.cpu.flags.clone()),
                model_name: Some(inv.cpu.model_name.clone()),
                architecture: Some(inv.cpu.architecture.clone()),
            }),
            interfaces: inv
                .interfaces
                .iter()
                .map(|i| InventoryInterface {
                    name: Some(i.name.clone()),
                    mac_address: Some(i.mac_address.clone()),
                    ip_v4_addresses: Some(i.ipv4_addresses.clone()),
                    ip_v6_addresses: Some(i.ipv6_addresses.clone()),
                    speed_mbps: Some(i.speed_mbps),
                    vendor: Some(i.vendor.clone()),
                    product: Some(i.product.clone()),
                    ..Default::default()
                })
                .collect(),
            disks: inv
                .disks
                .iter()
                .map(|d| InventoryDisk {
                    id: Some(d.id.clone()),
                    name: Some(d.name.clone()),
                    path: Some(d.path.clone()),
                    by_path: Some(d.by_path.clone()),
                    drive_type: Some(d.drive_type.clone()),
                    size_bytes: Some(d.size_bytes),
                    serial: Some(d.serial.clone()),
                    model: Some(d.model.clone()),
                    vendor: Some(d.vendor.clone()),
                    wwn: Some(d.wwn.clone()),
                    hctl: Some(d.hctl.clone()),
                    bootable: Some(d.bootable),
                    installation_eligibility: d.installation_eligibility.as_ref().map(|e| InstallationEligibility {
                        eligible: Some(e.eligible),
                        not_eligible_reasons: Some(e.not_eligible_reasons.clone()),
                    }),
                    ..Default::default()
                })
                .collect(),
            boot: Some(InventoryBoot {
                current_boot_mode: Some(inv.boot.current_boot_mode.clone()),
                ..Default::default()
            }),
            system_vendor: Some(InventorySystemVendor {
                manufacturer: Some(inv.system_vendor.manufacturer.clone()),
                product_name: Some(inv.system_vendor.product_name.clone()),
                serial_number: Some(inv.system_vendor.serial_number.clone()),
                virtual_: Some(inv.system_vendor.virtual_),
            }),
            gpus: inv
                .gpus
                .iter()
                .map(|g| InventoryGpu {
                    address: gpu_text(g, "address"),
                    device_id: gpu_text(g, "device_id"),
                    name: gpu_text(g, "name"),
                    vendor: gpu_text(g, "vendor"),
                    vendor_id: gpu_text(g, "vendor_id"),
                })
                .collect(),
            report_time: None,
        }
    }
}

/// Why an Agent is refused (spec-controllers.md §2.10); assisted-service's webhook wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentAdmissionError {
    #[error("Either InstallationDiskID or InstallationDiskPath can be set, not both.")]
    BothInstallationDisks,
    #[error("Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation.")]
    ClusterDeploymentImmutable,
    #[error("Spec.ClusterDeploymentName.Namespace must match the Agent namespace")]
    ClusterDeploymentNamespace,
    #[error("Spec.IgnitionEndpointTokenReference.Namespace must match the Agent namespace")]
    IgnitionEndpointTokenNamespace,
}

/// spec-controllers.md §2.10 admission on create and update; and, as assisted-service's webhook now
/// does, references to other namespaces are refused (a tenant's Agent cannot join another
/// namespace's cluster or read another namespace's token Secret).
pub fn validate_agent(agent: &Agent) -> Result<(), AgentAdmissionError> {
    if agent.spec.installation_disk_id.as_deref().is_some_and(|s| !s.is_empty())
        && agent.spec.installation_disk_path.as_deref().is_some_and(|s| !s.is_empty())
    {
        return Err(AgentAdmissionError::BothInstallationDisks);
    }
    let namespace = agent.metadata.namespace.as_deref().unwrap_or("");
    let elsewhere = |ns: &str| !ns.is_empty() && !namespace.is_empty() && ns != namespace;
    if agent.spec.cluster_deployment_name.as_ref().is_some_and(|r| elsewhere(&r.namespace)) {
        return Err(AgentAdmissionError::ClusterDeploymentNamespace);
    }
    if agent.spec.ignition_endpoint_token_reference.as_ref().is_some_and(|r| elsewhere(&r.namespace)) {
        return Err(AgentAdmissionError::IgnitionEndpointTokenNamespace);
    }
    Ok(())
}

/// spec-controllers.md §2.10 update rule: the cluster of an Agent cannot change while it installs (day-2 hosts may be
/// released).
pub fn validate_agent_update(old: &Agent, new: &Agent) -> Result<(), AgentAdmissionError> {
    validate_agent(new)?;
    if old.spec.cluster_deployment_name == new.spec.cluster_deployment_name {
        return Ok(());
    }
    let state = old.status.as_ref().map(|s| s.debug_info.state.as_str()).unwrap_or("");
    let installing = state.parse::<crate::hosts::HostStatus>().is_ok_and(|s| s.is_installing());
    let day2_release = old.status.as_ref().is_some_and(|s| s.kind == "AddToExistingClusterHost")
        && new.spec.cluster_deployment_name.is_none();
    if installing && !day2_release {
        return Err(AgentAdmissionError::ClusterDeploymentImmutable);
    }
    Ok(())
}
