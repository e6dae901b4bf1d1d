//! The Agent resource (`agent-install.openshift.io/v1beta1`): one per discovered host. The spec is
//! what users (and the BMAC) ask for; the status mirrors the backend host (spec-controllers §2).

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Condition;
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
    #[serde(default)]
    pub bootstrap: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub role: String,
    #[serde(default)]
    pub inventory: AgentInventory,
    #[serde(default)]
    pub progress: AgentProgress,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp_sources: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub debug_info: AgentDebugInfo,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validations_info: Option<Value>,
    #[serde(default, rename = "installation_disk_id", skip_serializing_if = "String::is_empty")]
    pub installation_disk_id: String,
    #[serde(default, rename = "deprovision_info", skip_serializing_if = "Option::is_none")]
    pub deprovision_info: Option<DeprovisionInfo>,
    #[serde(default)]
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

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CsrStatus {
    #[serde(default, rename = "approvedCSRs", skip_serializing_if = "Option::is_none")]
    pub approved_csrs: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_approval_attempt: Option<String>,
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
    /// Zeroed when the host has no stage (§2.2).
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

/// The inventory as the Agent status shows it (camelCase; lists are `[]`, never null).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentInventory {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bmc_address: String,
    #[serde(default, rename = "bmcV6Address", skip_serializing_if = "String::is_empty")]
    pub bmc_v6_address: String,
    #[serde(default)]
    pub memory: Value,
    #[serde(default)]
    pub cpu: Value,
    #[serde(default)]
    pub interfaces: Vec<Value>,
    #[serde(default)]
    pub disks: Vec<Value>,
    #[serde(default)]
    pub boot: Value,
    #[serde(default)]
    pub system_vendor: Value,
    #[serde(default)]
    pub gpus: Vec<Value>,
}

impl AgentInventory {
    pub fn from_host(inv: &Inventory, _host: &Host) -> AgentInventory {
        use serde_json::json;
        AgentInventory {
            hostname: inv.hostname.clone(),
            bmc_address: inv.bmc_address.clone(),
            bmc_v6_address: inv.bmc_v6address.clone(),
            memory: json!({"physicalBytes": inv.memory.physical_bytes, "usableBytes": inv.memory.usable_bytes}),
            cpu: json!({"count": inv.cpu.count, "clockMegahertz": inv.cpu.frequency as i64, "flags": inv.cpu.flags,
                        "modelName": inv.cpu.model_name, "architecture": inv.cpu.architecture}),
            interfaces: inv
                .interfaces
                .iter()
                .map(|i| {
                    json!({"name": i.name, "macAddress": i.mac_address, "ipV4Addresses": i.ipv4_addresses,
                           "ipV6Addresses": i.ipv6_addresses, "speedMbps": i.speed_mbps, "vendor": i.vendor,
                           "product": i.product})
                })
                .collect(),
            disks: inv
                .disks
                .iter()
                .map(|d| {
                    json!({"id": d.id, "name": d.name, "path": d.path, "byPath": d.by_path, "driveType": d.drive_type,
                           "sizeBytes": d.size_bytes, "serial": d.serial, "model": d.model, "vendor": d.vendor,
                           "wwn": d.wwn, "hctl": d.hctl, "bootable": d.bootable,
                           "installationEligibility": d.installation_eligibility.as_ref().map(|e| json!({
                               "eligible": e.eligible, "notEligibleReasons": e.not_eligible_reasons}))})
                })
                .collect(),
            boot: json!({"currentBootMode": inv.boot.current_boot_mode}),
            system_vendor: json!({"manufacturer": inv.system_vendor.manufacturer,
                                  "productName": inv.system_vendor.product_name,
                                  "serialNumber": inv.system_vendor.serial_number,
                                  "virtual": inv.system_vendor.virtual_}),
            gpus: inv.gpus.clone(),
        }
    }
}

/// §2.10 admission on create and update.
pub fn validate_agent(agent: &Agent) -> Result<(), String> {
    if agent.spec.installation_disk_id.as_deref().is_some_and(|s| !s.is_empty())
        && agent.spec.installation_disk_path.as_deref().is_some_and(|s| !s.is_empty())
    {
        return Err("Either InstallationDiskID or InstallationDiskPath can be set, not both.".into());
    }
    Ok(())
}

/// §2.10 update rule: the cluster of an Agent cannot change while it installs (day-2 hosts may be
/// released).
pub fn validate_agent_update(old: &Agent, new: &Agent) -> Result<(), String> {
    validate_agent(new)?;
    if old.spec.cluster_deployment_name == new.spec.cluster_deployment_name {
        return Ok(());
    }
    let state = old.status.as_ref().map(|s| s.debug_info.state.as_str()).unwrap_or("");
    let installing = state.parse::<crate::hosts::HostStatus>().is_ok_and(|s| s.is_installing());
    let day2_release = old.status.as_ref().is_some_and(|s| s.kind == "AddToExistingClusterHost")
        && new.spec.cluster_deployment_name.is_none();
    if installing && !day2_release {
        return Err(
            "Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation.".into()
        );
    }
    Ok(())
}
