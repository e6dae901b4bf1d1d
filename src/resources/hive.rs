//! Hive's ClusterDeployment and ClusterImageSet and the AgentClusterInstall of assisted-service: the
//! resources a cluster creator applies to get a cluster from pool agents. Every field of the upstream
//! CRDs is typed (so that `bootstream crds` describes them), mostly as optional values this product
//! passes through. Specs refuse unknown fields like every other kind, so typos are caught.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hive.openshift.io",
    version = "v1",
    kind = "ClusterDeployment",
    doc = "A cluster to be installed (or installed): its name, domain, platform and install reference.",
    plural = "clusterdeployments",
    namespaced,
    status = "ClusterDeploymentStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterDeploymentSpec {
    pub base_domain: String,
    pub cluster_name: String,
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_install_ref: Option<ClusterInstallRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_metadata: Option<ClusterMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_config: Option<ControlPlaneConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub installed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_on_delete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_service_account_signing_key_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_bundles: Option<Vec<CertificateBundle>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_pool_ref: Option<ClusterPoolReference>,
    /// A duration (`8h`) after which Hive hibernates the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernate_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Vec<ClusterIngress>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_attempts_limit: Option<i32>,
    #[serde(default, rename = "manageDNS", skip_serializing_if = "Option::is_none")]
    pub manage_dns: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<Provisioning>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterInstallRef {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub version: String,
}

/// Identity of an installed cluster and the secrets that give access to it (on a ClusterDeployment and
/// an AgentClusterInstall).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterMetadata {
    #[serde(default, rename = "clusterID")]
    pub cluster_id: String,
    #[serde(default, rename = "infraID")]
    pub infra_id: String,
    #[serde(default)]
    pub admin_kubeconfig_secret_ref: super::LocalObjectReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_password_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, rename = "metadataJSONSecretRef", skip_serializing_if = "Option::is_none")]
    pub metadata_json_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<ClusterMetadataPlatform>,
}

/// Platform details the installer recorded about a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterMetadataPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsClusterMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureClusterMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpClusterMetadata>,
}

/// AWS details of an installed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsClusterMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_zone_role: Option<String>,
}

/// Azure details of an installed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AzureClusterMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_group_name: Option<String>,
}

/// GCP details of an installed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcpClusterMetadata {
    #[serde(default, rename = "networkProjectID", skip_serializing_if = "Option::is_none")]
    pub network_project_id: Option<String>,
}

/// What Hive reports about a ClusterDeployment; the agent flow writes `conditions` and reads nothing
/// else, the rest is kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDeploymentStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, rename = "apiURL", skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_bundles: Option<Vec<CertificateBundleStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_restarts: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_started_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_status: Option<PlatformStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_ref: Option<super::LocalObjectReference>,
    #[serde(default, rename = "webConsoleURL", skip_serializing_if = "Option::is_none")]
    pub web_console_url: Option<String>,
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
}

/// The agent platform: which Agents may join the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentBareMetalPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_selector: Option<super::LabelSelector>,
}

/// An AWS role to assume for the cluster's credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsAssumeRole {
    #[serde(default, rename = "externalID", skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, rename = "roleARN", skip_serializing_if = "Option::is_none")]
    pub role_arn: Option<String>,
}

/// Whether the AWS cluster is reached over PrivateLink.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsPrivateLinkAccess {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// AWS settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AwsPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_assume_role: Option<AwsAssumeRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_link: Option<AwsPrivateLinkAccess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_tags: Option<BTreeMap<String, String>>,
}

/// Azure settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AzurePlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_domain_resource_group_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// Installer-provisioned bare metal settings (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BareMetalPlatform {
    #[serde(default, rename = "libvirtSSHPrivateKeySecretRef", skip_serializing_if = "Option::is_none")]
    pub libvirt_ssh_private_key_secret_ref: Option<super::LocalObjectReference>,
}

/// GCP settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GcpPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// IBM Cloud settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IbmCloudPlatform {
    #[serde(default, rename = "accountID", skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    #[serde(default, rename = "cisInstanceCRN", skip_serializing_if = "Option::is_none")]
    pub cis_instance_crn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// OpenStack settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenStackPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trunk_support: Option<bool>,
}

/// oVirt settings of a ClusterDeployment (passed through; its keys are snake_case upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OvirtPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, rename = "ovirt_cluster_id", skip_serializing_if = "Option::is_none")]
    pub ovirt_cluster_id: Option<String>,
    #[serde(default, rename = "ovirt_network_name", skip_serializing_if = "Option::is_none")]
    pub ovirt_network_name: Option<String>,
    #[serde(default, rename = "storage_domain_id", skip_serializing_if = "Option::is_none")]
    pub storage_domain_id: Option<String>,
}

/// vSphere settings of a ClusterDeployment (passed through).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VSpherePlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datacenter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_datastore: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v_center: Option<String>,
}

/// Where the cluster runs; the agent flow uses `agentBareMetal`, the others are kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Platform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_bare_metal: Option<AgentBareMetalPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzurePlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baremetal: Option<BareMetalPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcp: Option<GcpPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ibmcloud: Option<IbmCloudPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openstack: Option<OpenStackPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ovirt: Option<OvirtPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vsphere: Option<VSpherePlatform>,
}

/// A certificate bundle served for one more API domain.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdditionalServingCertificate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Which certificate bundles the API server serves.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServingCertificates {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional: Option<Vec<AdditionalServingCertificate>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// How the hub reaches the cluster's API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlPlaneConfig {
    #[serde(default, rename = "apiURLOverride", skip_serializing_if = "Option::is_none")]
    pub api_url_override: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_certificates: Option<ServingCertificates>,
}

/// A named certificate bundle, from a secret or generated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateBundle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The Hive ClusterPool a cluster came from and its claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterPoolReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_name: Option<String>,
}

/// One ingress controller of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterIngress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<super::LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_selector: Option<super::LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_certificate: Option<String>,
}

/// Hive's own installer settings (unused by the agent flow, kept as written).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provisioning {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_set_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_config_secret_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_env: Option<Vec<k8s_openapi::api::core::v1::EnvVar>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_image_override: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_config_map_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_known_hosts: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_private_key_secret_ref: Option<super::LocalObjectReference>,
}

/// Whether a certificate bundle was generated.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateBundleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An AWS VPC endpoint service.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VpcEndpointService {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The AWS PrivateLink resources of a cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsPrivateLinkStatus {
    #[serde(default, rename = "hostedZoneID", skip_serializing_if = "Option::is_none")]
    pub hosted_zone_id: Option<String>,
    #[serde(default, rename = "vpcEndpointID", skip_serializing_if = "Option::is_none")]
    pub vpc_endpoint_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_endpoint_service: Option<VpcEndpointService>,
}

/// What Hive observed on AWS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwsPlatformStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_link: Option<AwsPrivateLinkStatus>,
}

/// What Hive observed on the cluster's platform.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlatformStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsPlatformStatus>,
}

/// A pod network CIDR and the prefix each node gets from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterNetworkEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_prefix: Option<i32>,
}

/// A CIDR the hosts have addresses in.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineNetworkEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
}

/// The cluster's networks.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Networking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_network: Option<Vec<ClusterNetworkEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_network: Option<Vec<MachineNetworkEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_network: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_managed_networking: Option<bool>,
}

/// A machine pool of the install config: its name and SMT setting.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachinePool {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyperthreading: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Disk encryption of the installed hosts (TPM or Tang).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskEncryption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tang_servers: Option<String>,
}

/// Settings of the `External` platform type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalPlatform {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_controller_manager: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_name: Option<String>,
}

/// A reference to an object by name and namespace (both optional here).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacedName {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// Where hosts fetch their pointer Ignition, and the CA to trust there.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnitionEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificate_reference: Option<NamespacedName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Who runs the API and ingress load balancer (`ClusterManaged` or `UserManaged`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancer {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// Proxy settings for the installed cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterProxy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<String>,
}

/// How far the installation is.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_percentage: Option<i64>,
}

/// One validation of the cluster or host, as assisted-service reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.hive.openshift.io",
    version = "v1beta1",
    kind = "AgentClusterInstall",
    doc = "How a cluster is installed from Agents: networks, host counts, release image.",
    plural = "agentclusterinstalls",
    namespaced,
    status = "AgentClusterInstallStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentClusterInstallSpec {
    pub cluster_deployment_ref: super::LocalObjectReference,
    pub networking: Networking,
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
    pub arbiter: Option<MachinePool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_metadata: Option<ClusterMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<Vec<MachinePool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<MachinePool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_encryption: Option<DiskEncryption>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external: Option<ExternalPlatform>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignition_endpoint: Option<IgnitionEndpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_config_map_ref: Option<super::LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests_config_map_refs: Option<Vec<super::LocalObjectReference>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masters_schedulable: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_registry_ref: Option<NamespacedName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ntp_sources: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ClusterProxy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProvisionRequirements {
    #[serde(default)]
    pub control_plane_agents: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub worker_agents: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub arbiter_agents: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// What assisted-service reports about a cluster installation; the agent flow writes `conditions` and
/// `debugInfo`, the rest is kept as written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentClusterInstallStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub debug_info: AciDebugInfo,
    #[serde(default, rename = "apiVIP", skip_serializing_if = "Option::is_none")]
    pub api_vip: Option<String>,
    #[serde(default, rename = "apiVIPs", skip_serializing_if = "Option::is_none")]
    pub api_vips: Option<Vec<String>>,
    /// JSON text: the hosts grouped by the networks they reach each other on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connectivity_majority_groups: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_agents_discovered: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_agents_ready: Option<i64>,
    #[serde(default, rename = "ingressVIP", skip_serializing_if = "Option::is_none")]
    pub ingress_vip: Option<String>,
    #[serde(default, rename = "ingressVIPs", skip_serializing_if = "Option::is_none")]
    pub ingress_vips: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_network: Option<Vec<MachineNetworkEntry>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ClusterProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_managed_networking: Option<bool>,
    /// Validation results by category (`network`, `hosts-data`...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validations_info: Option<BTreeMap<String, Vec<ValidationResult>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_agents_discovered: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_agents_ready: Option<i64>,
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

/// Why an AgentClusterInstall is refused: assisted-service's validating webhook for it, in its words
/// (`pkg/webhooks/hiveextension/v1beta1/agentclusterinstall_validation_hook.go`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AciAdmissionError {
    #[error("UserManagedNetworking must be set to true with SNO")]
    SnoNeedsUserManagedNetworking,
    #[error("Attempted to change AgentClusterInstall.ImageSetRef which is immutable")]
    ImageSetRefImmutable,
    /// The spec changed after the installation started; the changes, one per line.
    #[error(
        "Attempted to change AgentClusterInstall.Spec which is immutable after install started, except for ClusterMetadata,IgnitionEndpoint fields. Unsupported change: \n{0}"
    )]
    SpecImmutable(String),
}

/// The spec fields that may change after an installation started (upstream's `ClusterMetadata` and
/// `IgnitionEndpoint`).
const ACI_MUTABLE_AFTER_START: [&str; 2] = ["clusterMetadata", "ignitionEndpoint"];

/// Reasons of the `Completed` condition once an installation started (assisted-service also lists
/// `ClusterAlreadyInstalling`, a `RequirementsMet` reason, here).
const ACI_STARTED_REASONS: [&str; 4] =
    ["InstallationFailed", "InstallationCompleted", "InstallationInProgress", "ClusterAlreadyInstalling"];
/// Reasons of the `Completed` condition once an installation ended.
const ACI_ENDED_REASONS: [&str; 2] = ["InstallationFailed", "InstallationCompleted"];

/// The rule on any AgentClusterInstall written: a single-node cluster (one control-plane agent, no
/// workers) cannot turn user-managed networking off.
pub fn validate_aci(aci: &AgentClusterInstall) -> Result<(), AciAdmissionError> {
    let p = &aci.spec.provision_requirements;
    if p.control_plane_agents == 1 && p.worker_agents == 0 && aci.spec.networking.user_managed_networking == Some(false)
    {
        return Err(AciAdmissionError::SnoNeedsUserManagedNetworking);
    }
    Ok(())
}

/// The rules on an update: the image set never changes, and once the installation started (the
/// `Completed` condition of the object as it was says so) nothing of the spec but the cluster metadata
/// and the Ignition endpoint does; once it ended, the provision requirements may change too (GitOps
/// flows reapply them).
pub fn validate_aci_update(old: &AgentClusterInstall, new: &AgentClusterInstall) -> Result<(), AciAdmissionError> {
    let image_set = |a: &AgentClusterInstall| a.spec.image_set_ref.as_ref().map(|r| r.name.clone());
    if image_set(old) != image_set(new) {
        return Err(AciAdmissionError::ImageSetRefImmutable);
    }
    validate_aci(new)?;
    let reason = old
        .status
        .as_ref()
        .and_then(|s| super::find_condition(&s.conditions, "Completed"))
        .map(|c| c.reason.as_str())
        .unwrap_or("");
    if !ACI_STARTED_REASONS.contains(&reason) {
        return Ok(());
    }
    let spec = |a: &AgentClusterInstall| {
        let mut v = serde_json::to_value(&a.spec).expect("specs serialize");
        if let Some(o) = v.as_object_mut() {
            for field in ACI_MUTABLE_AFTER_START {
                o.remove(field);
            }
            if ACI_ENDED_REASONS.contains(&reason) {
                o.remove("provisionRequirements");
            }
        }
        v
    };
    let mut changes = Vec::new();
    json_changes("spec", &spec(old), &spec(new), &mut changes);
    if changes.is_empty() { Ok(()) } else { Err(AciAdmissionError::SpecImmutable(changes.join("\n"))) }
}

/// The leaves that differ between two JSON values, as `\tPATH: (OLD => NEW)` lines. Absent, null,
/// empty lists and empty objects count as the same (no value).
fn json_changes(path: &str, old: &serde_json::Value, new: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (a.get(k).unwrap_or(&Value::Null), b.get(k).unwrap_or(&Value::Null));
                json_changes(&format!("{path}.{k}"), x, y, out);
            }
        }
        _ if empty(old) && empty(new) => {}
        _ if old == new => {}
        _ => out.push(format!("\t{path}: ({old} => {new})")),
    }
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "hive.openshift.io",
    version = "v1",
    kind = "ClusterImageSet",
    doc = "An OpenShift release image clusters can be installed with.",
    plural = "clusterimagesets",
    status = "ClusterImageSetStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterImageSetSpec {
    pub release_image: String,
}

/// A ClusterImageSet has no status fields; the type exists for the (empty) status of the CRD.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterImageSetStatus {}
