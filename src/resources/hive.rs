//! Hive's ClusterDeployment and ClusterImageSet and the AgentClusterInstall of assisted-service: the
//! resources a cluster creator applies to get a cluster from pool agents. Fields this product reads are
//! typed; large subtrees it passes through (networking, platform, compute...) are kept as JSON. Specs
//! refuse unknown top-level fields like every other kind, so typos are caught.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Condition;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hive.openshift.io",
    version = "v1",
    kind = "ClusterDeployment",
    plural = "clusterdeployments",
    namespaced,
    status = "ClusterDeploymentStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterDeploymentSpec {
    pub base_domain: String,
    pub cluster_name: String,
    pub platform: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_install_ref: Option<ClusterInstallRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_metadata: Option<ClusterMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_config: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub installed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_on_delete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_service_account_signing_key_secret_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_bundles: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_pool_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernate_after: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_attempts_limit: Option<Value>,
    #[serde(default, rename = "manageDNS", skip_serializing_if = "Option::is_none")]
    pub manage_dns: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterInstallRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMetadata {
    #[serde(default, rename = "clusterID")]
    pub cluster_id: String,
    #[serde(default, rename = "infraID")]
    pub infra_id: String,
    #[serde(default)]
    pub admin_kubeconfig_secret_ref: super::LocalObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_password_secret_ref: Option<super::LocalObjectReference>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDeploymentStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Value>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

impl ClusterDeployment {
    /// Whether the cluster is installed by the agent flow (`isSupportedPlatform`).
    pub fn is_agent_platform(&self) -> bool {
        self.spec
            .cluster_install_ref
            .as_ref()
            .is_some_and(|r| r.group == "extensions.hive.openshift.io" && r.kind == "AgentClusterInstall")
    }
    pub fn cluster_install_name(&self) -> Option<String> {
        self.spec.cluster_install_ref.as_ref().map(|r| r.name.clone()).filter(|n| !n.is_empty())
    }
    pub fn admin_kubeconfig_secret_name(&self) -> Option<String> {
        self.spec
            .cluster_metadata
            .as_ref()
            .map(|m| m.admin_kubeconfig_secret_ref.name.clone())
            .filter(|n| !n.is_empty())
    }
    pub fn set_cluster_metadata(&mut self, cluster_id: &str, kubeconfig_secret: &str) {
        let meta = self.spec.cluster_metadata.get_or_insert_default();
        if meta.cluster_id.is_empty() {
            meta.cluster_id = cluster_id.to_string();
        }
        if meta.infra_id.is_empty() {
            meta.infra_id = cluster_id.to_string();
        }
        if meta.admin_kubeconfig_secret_ref.name.is_empty() {
            meta.admin_kubeconfig_secret_ref.name = kubeconfig_secret.to_string();
        }
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.hive.openshift.io",
    version = "v1beta1",
    kind = "AgentClusterInstall",
    plural = "agentclusterinstalls",
    namespaced,
    status = "AgentClusterInstallStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentClusterInstallSpec {
    pub cluster_deployment_ref: super::LocalObjectReference,
    pub networking: Value,
    pub provision_requirements: ProvisionRequirements,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_set_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_installation: Option<bool>,
    #[serde(default, rename = "apiVIP", skip_serializing_if = "Option::is_none")]
    pub api_vip: Option<String>,
    #[serde(default, rename = "apiVIPs", skip_serializing_if = "Option::is_none")]
    pub api_vips: Option<Vec<String>>,
    #[serde(default, rename = "ingressVIP", skip_serializing_if = "Option::is_none")]
    pub ingress_vip: Option<String>,
    #[serde(default, rename = "ingressVIPs", skip_serializing_if = "Option::is_none")]
    pub ingress_vips: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arbiter: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_encryption: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_endpoint: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_config_map_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_config_map_refs: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masters_schedulable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_registry_ref: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp_sources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionRequirements {
    #[serde(default)]
    pub control_plane_agents: i64,
    #[serde(default)]
    pub worker_agents: i64,
    #[serde(default)]
    pub arbiter_agents: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentClusterInstallStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub debug_info: AciDebugInfo,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AciDebugInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state_info: String,
    #[serde(default, rename = "eventsURL", skip_serializing_if = "String::is_empty")]
    pub events_url: String,
    #[serde(default, rename = "logsURL", skip_serializing_if = "String::is_empty")]
    pub logs_url: String,
}

impl AgentClusterInstall {
    pub fn image_set_name(&self) -> Option<String> {
        self.spec.image_set_ref.as_ref().map(|r| r.name.clone()).filter(|n| !n.is_empty())
    }
    /// Agents the installation waits for.
    pub fn required_agents(&self) -> usize {
        let p = &self.spec.provision_requirements;
        (p.control_plane_agents.max(0) + p.worker_agents.max(0) + p.arbiter_agents.max(0)) as usize
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(group = "hive.openshift.io", version = "v1", kind = "ClusterImageSet", plural = "clusterimagesets")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterImageSetSpec {
    pub release_image: String,
}
