//! What the upstream assisted-service, hive and metal3 CRDs declare for `kubectl get` (short names,
//! categories, printer columns), for our CRDs to declare the same: `oc get agents` on a hub shows
//! the same columns whichever CRDs are installed, and the embedded API prints its tables from them.

use serde_json::{Map, Value, json};

/// One `additionalPrinterColumns` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: &'static str,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: &'static str,
    pub json_path: &'static str,
    pub description: Option<&'static str>,
    /// 0 = shown by default, >0 = only with `-o wide`.
    pub priority: i32,
    pub format: Option<&'static str>,
}

impl PrinterColumn {
    /// As a CRD `additionalPrinterColumns` item (fields the CRD leaves out are
    /// left out).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(d) = self.description {
            m.insert("description".into(), d.into());
        }
        if let Some(f) = self.format {
            m.insert("format".into(), f.into());
        }
        m.insert("jsonPath".into(), self.json_path.into());
        m.insert("name".into(), self.name.into());
        if self.priority != 0 {
            m.insert("priority".into(), self.priority.into());
        }
        m.insert("type".into(), self.type_.into());
        Value::Object(m)
    }
}

/// What the upstream CRD declares for `kubectl get` and friends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Printing {
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub columns: &'static [PrinterColumn],
}

impl Printing {
    /// The `additionalPrinterColumns` array.
    pub fn columns_json(&self) -> Value {
        Value::Array(self.columns.iter().map(PrinterColumn::to_json).collect())
    }

    /// Adds short names, categories and printer columns to a generated CRD
    /// (every version), leaving what it already declares alone.
    pub fn apply_to_crd(&self, crd: &mut Value) {
        let names = &mut crd["spec"]["names"];
        if !self.short_names.is_empty() && names.get("shortNames").is_none() {
            names["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() && names.get("categories").is_none() {
            names["categories"] = json!(self.categories);
        }
        if self.columns.is_empty() {
            return;
        }
        if let Some(versions) = crd["spec"]["versions"].as_array_mut() {
            for v in versions {
                if v.get("additionalPrinterColumns").is_none() {
                    v["additionalPrinterColumns"] = self.columns_json();
                }
            }
        }
    }
}

const fn col(
    name: &'static str,
    type_: &'static str,
    json_path: &'static str,
    description: Option<&'static str>,
    priority: i32,
) -> PrinterColumn {
    PrinterColumn { name, type_, json_path, description, priority, format: None }
}

// Data transcribed from the upstream CRDs (shared/fixtures/assisted/crds).
// None of them declares categories or a column format.

const AGENT_COLUMNS: &[PrinterColumn] = &[
    col(
        "Cluster",
        "string",
        ".spec.clusterDeploymentName.name",
        Some("The name of the cluster the Agent registered to."),
        0,
    ),
    col("Approved", "boolean", ".spec.approved", Some("The `Approve` state of the Agent."), 0),
    col("Role", "string", ".status.role", Some("The role (master/worker) of the Agent."), 0),
    col("Stage", "string", ".status.progress.currentStage", Some("The HostStage of the Agent."), 0),
    col("Hostname", "string", ".status.inventory.hostname", Some("The hostname of the Agent."), 1),
    col("Requested Hostname", "string", ".spec.hostname", Some("The requested hostname for the Agent."), 1),
];

const INFRAENV_COLUMNS: &[PrinterColumn] = &[
    col("ISO Created At", "string", ".status.createdTime", Some("The Discovery ISO creation time"), 0),
    col("ISO URL", "string", ".status.isoDownloadURL", Some("The Discovery ISO download URL"), 1),
];

const ACI_COLUMNS: &[PrinterColumn] = &[
    col("Cluster", "string", ".spec.clusterDeploymentRef.name", Some("The name of the cluster the ACI refers to."), 0),
    col("State", "string", ".status.debugInfo.state", Some("State of the ACI."), 0),
];

const CD_COLUMNS: &[PrinterColumn] = &[
    col("InfraID", "string", ".spec.clusterMetadata.infraID", None, 0),
    col("Platform", "string", ".metadata.labels.hive\\.openshift\\.io/cluster-platform", None, 0),
    col("Region", "string", ".metadata.labels.hive\\.openshift\\.io/cluster-region", None, 0),
    col("Version", "string", ".metadata.labels.hive\\.openshift\\.io/version-major-minor-patch", None, 0),
    col("ClusterType", "string", ".metadata.labels.hive\\.openshift\\.io/cluster-type", None, 0),
    col("ProvisionStatus", "string", ".status.conditions[?(@.type=='Provisioned')].reason", None, 0),
    col("PowerState", "string", ".status.powerState", None, 0),
    col("Age", "date", ".metadata.creationTimestamp", None, 0),
];

const CIS_COLUMNS: &[PrinterColumn] = &[col("Release", "string", ".spec.releaseImage", None, 0)];

const BMH_COLUMNS: &[PrinterColumn] = &[
    col("Status", "string", ".status.operationalStatus", Some("Operational status"), 1),
    col("State", "string", ".status.provisioning.state", Some("Provisioning status"), 0),
    col("Consumer", "string", ".spec.consumerRef.name", Some("Consumer using this host"), 0),
    col("BMC", "string", ".spec.bmc.address", Some("Address of management controller"), 1),
    col("Hardware_Profile", "string", ".status.hardwareProfile", Some("The type of hardware detected"), 1),
    col("Online", "string", ".spec.online", Some("Whether the host is online or not"), 0),
    col("Error", "string", ".status.errorType", Some("Type of the most recent error"), 0),
    col("Age", "date", ".metadata.creationTimestamp", Some("Time duration since creation of BaremetalHost"), 0),
];

const PPIMG_COLUMNS: &[PrinterColumn] = &[
    col("Ready", "string", ".status.conditions[?(@.type=='Ready')].status", Some("Whether the image is ready"), 0),
    col(
        "Reason",
        "string",
        ".status.conditions[?(@.type=='Ready')].reason",
        Some("The reason for the image readiness status"),
        0,
    ),
];

/// Short names, categories and printer columns of the upstream CRD named
/// `crd_name` (`plural.group`), for our 8 CRDs; `None` for anything else.
/// NMStateConfig declares none of them (the API server then shows `Age`).
pub fn upstream_printing(crd_name: &str) -> Option<Printing> {
    let p = |short_names, columns| Printing { short_names, categories: &[], columns };
    Some(match crd_name {
        "agents.agent-install.openshift.io" => p(&[], AGENT_COLUMNS),
        "infraenvs.agent-install.openshift.io" => p(&[], INFRAENV_COLUMNS),
        "nmstateconfigs.agent-install.openshift.io" => p(&[], &[]),
        "agentclusterinstalls.extensions.hive.openshift.io" => p(&["aci"], ACI_COLUMNS),
        "clusterdeployments.hive.openshift.io" => p(&["cd"], CD_COLUMNS),
        "clusterimagesets.hive.openshift.io" => p(&["imgset"], CIS_COLUMNS),
        "baremetalhosts.metal3.io" => p(&["bmh", "bmhost"], BMH_COLUMNS),
        "preprovisioningimages.metal3.io" => p(&["ppimg"], PPIMG_COLUMNS),
        _ => return None,
    })
}

/// The CRD names [`upstream_printing`] knows.
pub const UPSTREAM_CRDS: &[&str] = &[
    "agentclusterinstalls.extensions.hive.openshift.io",
    "agents.agent-install.openshift.io",
    "baremetalhosts.metal3.io",
    "clusterdeployments.hive.openshift.io",
    "clusterimagesets.hive.openshift.io",
    "infraenvs.agent-install.openshift.io",
    "nmstateconfigs.agent-install.openshift.io",
    "preprovisioningimages.metal3.io",
];
