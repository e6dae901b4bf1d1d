//! Hosts as the agent API knows them: the backend host record, its state machine
//! ([`machine`], spec-controllers.md §1), the steps an agent is told to run ([`instructions`], spec-controllers.md
//! §1.4) and the hardware validations that decide whether a pool host is ready to be bound ([`validations`]).
//!
//! Everything here is pure: no I/O, no clock (time comes in through [`machine::Context`]).
//!
//! How hosts change state and who changes them: docs/design.md §4.

pub mod instructions;
pub mod machine;
pub mod simulated;
pub mod validations;

use std::sync::{Arc, OnceLock};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

macro_rules! host_statuses {
    ($($variant:ident => $text:literal,)*) => {
        /// Every host state string of assisted-service (`models/host.go`); the strings are API.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum HostStatus {
            $(#[serde(rename = $text)] $variant,)*
        }

        impl HostStatus {
            pub const ALL: &[HostStatus] = &[$(HostStatus::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self { $(HostStatus::$variant => $text,)* }
            }
        }

        impl std::str::FromStr for HostStatus {
            type Err = UnknownHostStatus;
            fn from_str(s: &str) -> Result<HostStatus, UnknownHostStatus> {
                match s { $($text => Ok(HostStatus::$variant),)* other => Err(UnknownHostStatus(other.to_string())) }
            }
        }
    };
}

host_statuses! {
    Discovering => "discovering",
    Known => "known",
    Insufficient => "insufficient",
    Disconnected => "disconnected",
    PendingForInput => "pending-for-input",
    PreparingForInstallation => "preparing-for-installation",
    PreparingSuccessful => "preparing-successful",
    PreparingFailed => "preparing-failed",
    Installing => "installing",
    InstallingInProgress => "installing-in-progress",
    InstallingPendingUserAction => "installing-pending-user-action",
    Installed => "installed",
    AddedToExistingCluster => "added-to-existing-cluster",
    Error => "error",
    Cancelled => "cancelled",
    Resetting => "resetting",
    ResettingPendingUserAction => "resetting-pending-user-action",
    Binding => "binding",
    Unbinding => "unbinding",
    UnbindingPendingUserAction => "unbinding-pending-user-action",
    Reclaiming => "reclaiming",
    ReclaimingRebooting => "reclaiming-rebooting",
    DiscoveringUnbound => "discovering-unbound",
    InsufficientUnbound => "insufficient-unbound",
    KnownUnbound => "known-unbound",
    DisconnectedUnbound => "disconnected-unbound",
    DisabledUnbound => "disabled-unbound",
}

/// A host status string that is none of [`HostStatus`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown host status {0:?}")]
pub struct UnknownHostStatus(pub String);

impl std::fmt::Display for HostStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl HostStatus {
    /// The agent controller's "installing statuses" (spec-controllers.md §2.4 step 6).
    pub fn is_installing(self) -> bool {
        use HostStatus::*;
        matches!(
            self,
            PreparingForInstallation
                | PreparingFailed
                | PreparingSuccessful
                | Installing
                | InstallingInProgress
                | InstallingPendingUserAction
        )
    }

    /// States in which host parameters from the Agent spec are applied (spec-controllers.md §2.1).
    pub fn accepts_host_parameters(self) -> bool {
        use HostStatus::*;
        matches!(
            self,
            Discovering
                | Known
                | Disconnected
                | Insufficient
                | PendingForInput
                | DiscoveringUnbound
                | KnownUnbound
                | DisconnectedUnbound
                | InsufficientUnbound
                | Binding
        )
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostKind {
    #[default]
    Host,
    AddToExistingClusterHost,
}

impl HostKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HostKind::Host => "Host",
            HostKind::AddToExistingClusterHost => "AddToExistingClusterHost",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default)]
    pub current_stage: String,
    #[serde(default)]
    pub progress_info: String,
    #[serde(default)]
    pub installation_percentage: i64,
    #[serde(default)]
    pub stage_started_at: Option<Timestamp>,
    #[serde(default)]
    pub stage_updated_at: Option<Timestamp>,
}

/// The backend record of a host (assisted's `hosts` table, the fields this product uses).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub id: String,
    pub infra_env_id: String,
    /// The namespace of the host's InfraEnv, where its Agent lives (assisted-service's
    /// `kube_key_namespace`); empty in records written before it was kept, until the start fills
    /// it in.
    #[serde(default)]
    pub namespace: String,
    pub cluster_id: Option<String>,
    pub status: HostStatus,
    pub status_info: String,
    pub status_updated_at: Timestamp,
    #[serde(default)]
    pub kind: HostKind,
    pub role: String,
    #[serde(default)]
    pub suggested_role: String,
    #[serde(default)]
    pub bootstrap: bool,
    /// The inventory JSON as the agent sent it.
    #[serde(default)]
    pub inventory: Option<InventoryText>,
    /// `{"hardware": [{"id", "status", "message"}, ...]}` as JSON text.
    #[serde(default)]
    pub validations_info: Option<String>,
    #[serde(default)]
    pub progress: Progress,
    #[serde(default)]
    pub checked_in_at: Option<Timestamp>,
    pub registered_at: Timestamp,
    #[serde(default)]
    pub discovery_agent_version: String,
    #[serde(default)]
    pub approved: bool,
    #[serde(default)]
    pub requested_hostname: String,
    #[serde(default)]
    pub installation_disk_id: String,
    #[serde(default)]
    pub installation_disk_path: String,
    #[serde(default)]
    pub installer_args: String,
    #[serde(default)]
    pub ignition_config_overrides: String,
    #[serde(default)]
    pub machine_config_pool_name: String,
    /// JSON object text; empty for none.
    #[serde(default)]
    pub node_labels: String,
    /// The token the installer presents to the machine config server (Agent
    /// `ignitionEndpointTokenReference`); empty for none.
    #[serde(default)]
    pub ignition_endpoint_token: String,
    /// JSON `[{"key","value"}]` of extra headers for that endpoint; empty for none.
    #[serde(default)]
    pub ignition_endpoint_http_headers: String,
    #[serde(default)]
    pub images_status: String,
    #[serde(default)]
    pub logs_info: String,
    /// When the host's logs were uploaded (they are kept under the data directory); none since it
    /// last registered or left its cluster.
    #[serde(default)]
    pub logs_collected_at: Option<Timestamp>,
    /// SHA-256 (hex) of the uploaded logs: their ETag.
    #[serde(default)]
    pub logs_sha256: String,
    #[serde(default)]
    pub connectivity: String,
    #[serde(default)]
    pub domain_name_resolutions: String,
    #[serde(default)]
    pub free_addresses: String,
    #[serde(default)]
    pub api_vip_connectivity: String,
    #[serde(default)]
    pub ntp_sources: String,
    /// Why this installed host, unbound from its running cluster, was not reclaimed but waits for a
    /// reboot (the Bound condition says it): set with the unbind, cleared by the next unbind, bind
    /// or registration. Empty when reclaim was not possible for an ordinary reason (no kubeconfig, no
    /// node), as upstream's condition does not say those either.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub not_reclaimed: String,
}

/// A host record's identity: the InfraEnv it registered with and the id its agent gave (the
/// machine's). As in assisted-service, the same machine registering with another InfraEnv is
/// another host: nothing an agent of one InfraEnv says can reach the record of another's.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostKey {
    pub infra_env_id: String,
    pub host_id: String,
}

impl HostKey {
    pub fn new(infra_env_id: &str, host_id: &str) -> HostKey {
        HostKey { infra_env_id: infra_env_id.to_string(), host_id: host_id.to_string() }
    }
}

impl std::fmt::Display for HostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of infra-env {}", self.host_id, self.infra_env_id)
    }
}

impl Host {
    /// A host record before its first transition (status is overwritten by RegisterHost).
    pub fn new_registered(
        id: &str,
        infra_env_id: &str,
        cluster_id: Option<String>,
        agent_version: &str,
        now: Timestamp,
    ) -> Host {
        Host {
            id: id.to_string(),
            infra_env_id: infra_env_id.to_string(),
            namespace: String::new(),
            cluster_id,
            status: HostStatus::DiscoveringUnbound,
            status_info: String::new(),
            status_updated_at: now,
            kind: HostKind::Host,
            role: "auto-assign".into(),
            suggested_role: String::new(),
            bootstrap: false,
            inventory: None,
            validations_info: None,
            progress: Progress::default(),
            checked_in_at: None,
            registered_at: now,
            discovery_agent_version: agent_version.to_string(),
            approved: false,
            requested_hostname: String::new(),
            installation_disk_id: String::new(),
            installation_disk_path: String::new(),
            installer_args: String::new(),
            ignition_config_overrides: String::new(),
            machine_config_pool_name: String::new(),
            node_labels: String::new(),
            ignition_endpoint_token: String::new(),
            ignition_endpoint_http_headers: String::new(),
            images_status: String::new(),
            logs_info: String::new(),
            logs_collected_at: None,
            logs_sha256: String::new(),
            connectivity: String::new(),
            domain_name_resolutions: String::new(),
            free_addresses: String::new(),
            api_vip_connectivity: String::new(),
            ntp_sources: String::new(),
            not_reclaimed: String::new(),
        }
    }

    pub fn is_unbound(&self) -> bool {
        self.cluster_id.is_none()
    }

    /// This record's identity.
    pub fn key(&self) -> HostKey {
        HostKey::new(&self.infra_env_id, &self.id)
    }

    /// The inventory, if the host sent one that parses.
    pub fn parsed_inventory(&self) -> Option<&Inventory> {
        self.inventory.as_ref().and_then(InventoryText::parsed)
    }

    /// The requested hostname, else the one the inventory reports.
    pub fn hostname(&self) -> String {
        if !self.requested_hostname.is_empty() {
            return self.requested_hostname.clone();
        }
        self.parsed_inventory().map(|i| i.hostname.clone()).unwrap_or_default()
    }
}

/// An inventory as the agent sent it (JSON text), parsed at most once.
///
/// Copies of a host record share it: every check-in refreshes the host, whose guards read the
/// inventory, and the agent sends the same inventory at every poll (spec-controllers.md §1.4), so parsing it once per
/// text and not copying it are what keep a large pool cheap to serve.
#[derive(Clone)]
pub struct InventoryText(Arc<InventoryTextInner>);

struct InventoryTextInner {
    text: String,
    parsed: OnceLock<Option<Inventory>>,
}

impl InventoryText {
    pub fn new(text: String) -> InventoryText {
        InventoryText(Arc::new(InventoryTextInner { text, parsed: OnceLock::new() }))
    }

    /// An inventory that must parse.
    pub fn parse(text: String) -> Result<InventoryText, serde_json::Error> {
        let inventory: Inventory = serde_json::from_str(&text)?;
        Ok(InventoryText(Arc::new(InventoryTextInner { text, parsed: OnceLock::from(Some(inventory)) })))
    }

    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The parsed inventory; None when the text is not an inventory.
    pub fn parsed(&self) -> Option<&Inventory> {
        self.0.parsed.get_or_init(|| serde_json::from_str(&self.0.text).ok()).as_ref()
    }
}

impl From<String> for InventoryText {
    fn from(text: String) -> InventoryText {
        InventoryText::new(text)
    }
}

impl std::ops::Deref for InventoryText {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for InventoryText {
    fn eq(&self, other: &InventoryText) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.text == other.0.text
    }
}

impl std::fmt::Debug for InventoryText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for InventoryText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for InventoryText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InventoryText, D::Error> {
        String::deserialize(d).map(InventoryText::new)
    }
}

/// The agent's inventory (swagger `inventory`), the parts this product reads. Unknown fields are
/// ignored so that inventories of any agent version parse.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Inventory {
    pub hostname: String,
    pub bmc_address: String,
    pub bmc_v6address: String,
    pub memory: Memory,
    pub cpu: Cpu,
    pub interfaces: Vec<Interface>,
    pub disks: Vec<Disk>,
    pub boot: Boot,
    pub system_vendor: SystemVendor,
    pub gpus: Vec<serde_json::Value>,
    pub timestamp: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Memory {
    pub physical_bytes: i64,
    pub usable_bytes: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    pub count: i64,
    pub frequency: f64,
    pub flags: Vec<String>,
    pub model_name: String,
    pub architecture: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Interface {
    pub name: String,
    pub mac_address: String,
    pub ipv4_addresses: Vec<String>,
    pub ipv6_addresses: Vec<String>,
    pub speed_mbps: i64,
    pub vendor: String,
    pub product: String,
    #[serde(rename = "type")]
    pub type_: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disk {
    pub id: String,
    pub name: String,
    pub path: String,
    pub by_path: String,
    pub by_id: String,
    pub drive_type: String,
    pub size_bytes: i64,
    pub serial: String,
    pub model: String,
    pub vendor: String,
    pub wwn: String,
    pub hctl: String,
    pub bootable: bool,
    pub installation_eligibility: Option<Eligibility>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Eligibility {
    pub eligible: bool,
    pub not_eligible_reasons: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Boot {
    pub current_boot_mode: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SystemVendor {
    pub manufacturer: String,
    pub product_name: String,
    pub serial_number: String,
    #[serde(rename = "virtual")]
    pub virtual_: bool,
}

#[cfg(test)]
mod tests;
