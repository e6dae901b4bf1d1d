//! An InfraEnv's discovery content: its Ignition config packed as an initramfs archive, its
//! static-network ramdisk and its kernel-argument edits, built once per change of what it depends on
//! (the InfraEnv, its pull secret, the NMStateConfigs it selects, the ironic settings) and shared by
//! all its artifacts, cached in [`Images`] by content.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Weak};

use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

use super::{CONTENT_BUILDS, ImageError, Images, check_unsupported};
use crate::content::ironic;
use crate::formats::kargs::KargOp;
use crate::keylocks::Locked as _;
use crate::plan::Part;
use crate::resources::{
    DOCKER_CONFIG_JSON_KEY, ImageType, InfraEnv, KernelArgumentOperation, NMStateConfig, secret_value,
};
use crate::store::{Store, StoreError};

/// The per-host network files of a ramdisk, and their tar once someone downloads it: few do, and
/// laying out the tar at every build costed a new InfraEnv's first byte more than its gzip.
#[derive(Debug)]
pub struct StaticNetworkFiles {
    entries: Vec<crate::content::staticnet::RamdiskEntry>,
    tar: std::sync::OnceLock<Arc<Part>>,
}

impl StaticNetworkFiles {
    pub fn tar(&self) -> Arc<Part> {
        self.tar
            .get_or_init(|| Arc::new(Part::new(crate::content::staticnet::network_files_tar(&self.entries))))
            .clone()
    }
}

/// What the static-network half of a build gives.
struct StaticNetworkPart {
    ramdisk: Option<Arc<Part>>,
    files: Option<StaticNetworkFiles>,
    /// How many NMStateConfigs went into the ramdisk.
    hosts: usize,
}

/// The base-independent customization of one InfraEnv.
#[derive(Debug)]
pub struct DiscoveryContent {
    /// The discovery Ignition config, as served and embedded.
    pub ignition: Arc<str>,
    /// `config.ign` as a gzip newc archive, padded to 4 bytes; shared by content hash.
    pub archive: Arc<Part>,
    /// The static-network ramdisk (gzip newc, padded to 4 bytes), when there is static network config
    /// or a proxy; shared by content hash.
    pub ramdisk: Option<Arc<Part>>,
    /// How many NMStateConfigs went into the ramdisk.
    pub static_hosts: usize,
    /// The per-host network files (the `static-network-config` download), when there are any.
    pub static_network: Option<StaticNetworkFiles>,
    pub karg_ops: Vec<KargOp>,
    /// Kernel arguments the InfraEnv appends (PreprovisioningImage extra params carry these).
    pub karg_appends: Vec<String>,
    /// Digest of everything above.
    pub digest: [u8; 32],
    /// The (base image, ISO type) pairs this content was found to make a whole image with (see
    /// [`Images::verdict`]).
    pub(super) verified: std::sync::Mutex<Vec<([u8; 32], ImageType)>>,
}

/// NMStateConfig host entries kept at most; past it the map starts over.
const MAX_STATIC_HOSTS: usize = 100_000;

/// What selections and builds use of an NMStateConfig. A parsed NMStateConfig takes about 6 KB, most
/// of it the free-form `spec.config` tree, nine times its JSON; a namespace's list keeps every config,
/// and a hub may hold tens of thousands. The host entry is the one [`Images::static_host`] keeps.
pub struct SelectedConfig {
    pub name: String,
    pub resource_version: String,
    labels: BTreeMap<String, String>,
    pub host: Arc<crate::content::staticnet::HostStaticConfig>,
}

impl SelectedConfig {
    fn of(c: &NMStateConfig, host: Arc<crate::content::staticnet::HostStaticConfig>) -> SelectedConfig {
        SelectedConfig {
            name: c.metadata.name.clone().unwrap_or_default(),
            resource_version: c.metadata.resource_version.clone().unwrap_or_default(),
            labels: c.metadata.labels.clone().unwrap_or_default(),
            host,
        }
    }
}

/// A namespace's NMStateConfigs, as the store's NMStateConfig change count `changes` found them,
/// indexed by label so that an InfraEnv's selection costs what it selects, not what the namespace
/// holds (a hub may keep thousands of them in one namespace, and every image request selects). When
/// the count moves, the configs that changed are read again, not all of them.
pub(super) struct NamespaceConfigs {
    changes: u64,
    /// By name: the store's order.
    configs: BTreeMap<String, Arc<SelectedConfig>>,
    /// Names of the configs carrying each label.
    by_label: HashMap<(String, String), BTreeSet<String>>,
}

impl NamespaceConfigs {
    fn new(changes: u64, configs: Vec<SelectedConfig>) -> NamespaceConfigs {
        let mut list = NamespaceConfigs { changes, configs: BTreeMap::new(), by_label: HashMap::new() };
        for c in configs {
            let name = c.name.clone();
            list.put(&name, Some(c));
        }
        list
    }

    /// Stores `config` as the config named `name`, or removes it when `None`.
    fn put(&mut self, name: &str, config: Option<SelectedConfig>) {
        if let Some(old) = self.configs.remove(name) {
            for (k, v) in &old.labels {
                let key = (k.clone(), v.clone());
                if let Some(names) = self.by_label.get_mut(&key) {
                    names.remove(name);
                    if names.is_empty() {
                        self.by_label.remove(&key);
                    }
                }
            }
        }
        if let Some(c) = config {
            for (k, v) in &c.labels {
                self.by_label.entry((k.clone(), v.clone())).or_default().insert(name.to_string());
            }
            self.configs.insert(name.to_string(), Arc::new(c));
        }
    }

    /// The configs `selector` matches, in the store's order. A selector with `matchLabels` only looks
    /// at the configs carrying its rarest pair; one with expressions only reads them all.
    fn select(&self, selector: &crate::resources::LabelSelector) -> Vec<Arc<SelectedConfig>> {
        let matches = |c: &SelectedConfig| selector.matches(&c.labels);
        let none = BTreeSet::new();
        let rarest = selector
            .match_labels
            .iter()
            .map(|(k, v)| self.by_label.get(&(k.clone(), v.clone())).unwrap_or(&none))
            .min_by_key(|candidates| candidates.len());
        match rarest {
            Some(candidates) => {
                candidates.iter().filter_map(|n| self.configs.get(n)).filter(|c| matches(c)).cloned().collect()
            }
            None => self.configs.values().filter(|c| matches(c)).cloned().collect(),
        }
    }
}

/// A content being built or built, shared by the callers that need it.
type ContentCell = Arc<tokio::sync::OnceCell<Arc<DiscoveryContent>>>;

/// An InfraEnv's content: the key it is built for (the versions of all it depends on), the content,
/// the InfraEnv's namespace and name, and the names of the NMStateConfigs it is built with.
pub(super) struct ContentEntry {
    key: String,
    cell: ContentCell,
    infraenv: (String, String),
    configs: HashSet<String>,
}

/// The static-network host entry of an NMStateConfig: its MAC map and its nmstate YAML.
pub fn host_static_config(c: &NMStateConfig) -> crate::content::staticnet::HostStaticConfig {
    // In the order builds want it, once (see `staticnet::normalize`).
    let mut host = crate::content::staticnet::HostStaticConfig {
        mac_interface_map: c
            .spec
            .interfaces
            .iter()
            .map(|i| crate::content::staticnet::MacInterface {
                mac_address: i.mac_address.clone(),
                logical_nic_name: i.name.clone(),
            })
            .collect(),
        network_yaml: yaml_serde::to_string(&c.spec.config).unwrap_or_default(),
    };
    host.sort_mac_map();
    host
}

/// Why a pull secret is not a Docker config JSON with auths.
#[derive(Debug, thiserror::Error)]
pub enum PullSecretError {
    #[error("not JSON")]
    NotJson(#[source] serde_json::Error),
    #[error("no \"auths\" object")]
    NoAuths,
    #[error("auths.{registry}: no \"auth\" string")]
    NoAuth { registry: String },
}

/// A pull secret must be a Docker config JSON with an `auths` map (assisted-service checks the same).
fn validate_pull_secret(text: &str) -> Result<(), PullSecretError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(PullSecretError::NotJson)?;
    let auths = v.get("auths").and_then(|a| a.as_object()).ok_or(PullSecretError::NoAuths)?;
    for (registry, entry) in auths {
        if entry.get("auth").and_then(|a| a.as_str()).is_none() {
            return Err(PullSecretError::NoAuth { registry: registry.clone() });
        }
    }
    Ok(())
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

pub(super) fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

impl<S: Store> Images<S> {
    /// The NMStateConfigs `ie` selects: those of its namespace matching its non-empty label selector
    /// (an empty selector selects none), by name.
    pub async fn selected_nmstate_configs(&self, ie: &InfraEnv) -> Result<Vec<Arc<SelectedConfig>>, ImageError> {
        let Some(selector) = ie.spec.nm_state_config_label_selector.as_ref().filter(|s| !s.is_empty()) else {
            return Ok(vec![]);
        };
        let ns = ie.metadata.namespace.as_deref().unwrap_or("default");
        let resource = crate::store::resource_name::<NMStateConfig>();
        // Read before anything else: a change that lands meanwhile moves the count past it.
        let Some(changes) = self.store.change_count(&resource) else {
            // The store does not announce NMStateConfig changes: nothing of them can be kept.
            return Ok(NamespaceConfigs::new(0, self.selected_configs(ns).await?).select(selector));
        };
        let list = {
            let mut lists = self.nmstate_lists.locked();
            match lists.get(ns) {
                Some(list) => list.clone(),
                None => {
                    let list = Arc::new(tokio::sync::Mutex::new(NamespaceConfigs {
                        changes: u64::MAX,
                        configs: BTreeMap::new(),
                        by_label: HashMap::new(),
                    }));
                    lists.insert(ns.to_string(), list.clone());
                    list
                }
            }
        };
        // Every image request selects, and a namespace may hold thousands of configs: the list is
        // kept, and brought up to date with the configs that changed since it was read (all of them
        // again only when the store no longer knows which).
        let mut list = list.lock().await;
        if list.changes != changes {
            let changed =
                (list.changes != u64::MAX).then(|| self.store.changes_since(&resource, list.changes)).flatten();
            match changed {
                Some((now, changed)) => {
                    let mut seen = HashSet::new();
                    for (_, name) in changed.into_iter().filter(|(n, _)| n == ns) {
                        if seen.insert(name.clone()) {
                            let config: Option<NMStateConfig> = self.store.get(ns, &name).await?;
                            list.put(&name, config.map(|c| SelectedConfig::of(&c, self.static_host(&c))));
                        }
                    }
                    list.changes = now;
                }
                None => *list = NamespaceConfigs::new(changes, self.selected_configs(ns).await?),
            }
        }
        Ok(list.select(selector))
    }

    /// What selections keep of every NMStateConfig of `ns`, each taken as the store decodes it.
    async fn selected_configs(&self, ns: &str) -> Result<Vec<SelectedConfig>, StoreError> {
        self.store.list_map(Some(ns), |c: &NMStateConfig| SelectedConfig::of(c, self.static_host(c))).await
    }

    /// Drops the content of the InfraEnv `namespace/name`, which is gone. The cache holds one content
    /// per InfraEnv; without this, every InfraEnv ever deleted would keep its Ignition and ramdisk.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.contents.locked().retain(|_, e| e.infraenv.0 != namespace || e.infraenv.1 != name);
    }

    /// Drops the content kept for the InfraEnv of uid `uid`: one [`Images::prebuild`] built for an
    /// InfraEnv whose create did not happen.
    pub fn forget_uid(&self, uid: &str) {
        self.contents.locked().remove(uid);
    }

    /// Builds the discovery content of `ie`, an InfraEnv being created, as it will be stored (with
    /// the uid reserved for it): its status and first downloads then find it built, or being built,
    /// under the same key. What fails is left to the status, which reports it.
    pub async fn prebuild(&self, ie: &InfraEnv) {
        if let Err(e) = self.content(ie).await {
            tracing::debug!(
                infraenv = ie.metadata.uid.as_deref().unwrap_or_default(),
                "no content ahead of the create: {}",
                crate::errors::chain(&e)
            );
        }
    }

    /// How many InfraEnvs' contents the cache holds.
    pub fn cached_contents(&self) -> usize {
        self.contents.locked().len()
    }

    /// The InfraEnvs of `namespace` (namespace, name) whose content was last built, or tried, with
    /// the NMStateConfig `config` among its hosts.
    pub fn infraenvs_built_with(&self, namespace: &str, config: &str) -> Vec<(String, String)> {
        let contents = self.contents.locked();
        contents
            .values()
            .filter(|e| e.infraenv.0 == namespace && e.configs.contains(config))
            .map(|e| e.infraenv.clone())
            .collect()
    }

    /// The discovery content of `ie`, built or taken from the cache.
    pub async fn content(&self, ie: &InfraEnv) -> Result<Arc<DiscoveryContent>, ImageError> {
        let uid = ie.metadata.uid.clone().unwrap_or_default();
        let ns = ie.metadata.namespace.as_deref().unwrap_or("default");
        check_unsupported(ie)?;
        if let Some(cd) = &ie.spec.cluster_ref {
            let found: Option<crate::resources::ClusterDeployment> = self.store.get(&cd.namespace, &cd.name).await?;
            if found.is_none() {
                return Err(ImageError::MissingClusterDeployment(format!(
                    "clusterdeployments.hive.openshift.io \"{}\" not found",
                    cd.name
                )));
            }
        }
        let secret_name = &ie.spec.pull_secret_ref.name;
        let secret: Option<Secret> = self.store.get(ns, secret_name).await?;
        let secret = secret.ok_or_else(|| ImageError::NoPullSecret {
            secret: secret_name.clone(),
            source: StoreError::not_found::<Secret>(secret_name),
        })?;
        let nmstate = self.selected_nmstate_configs(ie).await?;
        let ironic_enabled = ironic::enabled(ie);
        let icc: Option<Secret> = if ironic_enabled {
            self.store.get(ironic::ICC_SECRET_NAMESPACE, ironic::ICC_SECRET_NAME).await?
        } else {
            None
        };

        // Everything the content depends on, by resource version. Of the InfraEnv only its spec
        // (generation) and annotations count: its resourceVersion also moves with every status write,
        // and keying on it would make the first download after the controller's own status update
        // build everything again. Of the annotations, the one `apply` keeps of the user's document
        // does not count: the generation already follows what it records, and leaving it out gives
        // an InfraEnv about to be created the key it will have once stored (see [`Images::prebuild`]).
        let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.resource_version.clone().unwrap_or_default()
        };
        let ie_version = match ie.metadata.generation {
            Some(g) => {
                let mut annotations = ie.metadata.annotations.clone().unwrap_or_default();
                annotations.remove(crate::store::json::LAST_APPLIED_ANNOTATION);
                format!("g{g}:{}", serde_json::to_string(&annotations).unwrap_or_default())
            }
            None => rv(&ie.metadata),
        };
        // Of the pull secret, its data: the controllers label it (for backup, and so that a cluster's
        // controller watches it), which moves its resourceVersion and changes nothing of the image.
        let secret_version = {
            use sha2::Digest;
            let data = serde_json::to_vec(&(&secret.data, &secret.string_data)).unwrap_or_default();
            hex::encode(&sha2::Sha256::digest(&data)[..16])
        };
        let mut key = format!("{ie_version}/{secret_version}");
        for c in &nmstate {
            key.push_str(&format!("/{}={}", c.name, c.resource_version));
        }
        if ironic_enabled {
            key.push_str(&format!("/icc={}", icc.as_ref().map(|s| rv(&s.metadata)).unwrap_or_default()));
        }
        // One build per key: callers that arrive while it runs (the controller and the first downloads
        // of a new InfraEnv) wait for it instead of building the same content again.
        let cell = {
            let mut contents = self.contents.locked();
            match contents.get(&uid) {
                Some(entry) if entry.key == key => entry.cell.clone(),
                _ => {
                    let cell = ContentCell::default();
                    let infraenv = (ns.to_string(), ie.metadata.name.clone().unwrap_or_default());
                    let configs = nmstate.iter().map(|c| c.name.clone()).collect();
                    contents
                        .insert(uid.clone(), ContentEntry { key: key.clone(), cell: cell.clone(), infraenv, configs });
                    cell
                }
            }
        };
        cell.get_or_try_init(|| async {
            let this = self.this.upgrade().expect("Images is alive while one of its methods runs");
            let started = std::time::Instant::now();
            let static_hosts = nmstate.len();
            let built = this.build_content(ie.clone(), uid.clone(), secret, nmstate, icc).await.map(Arc::new);
            tracing::debug!(
                infraenv = %uid,
                static_hosts,
                micros = started.elapsed().as_micros() as u64,
                ok = built.is_ok(),
                "built discovery content"
            );
            built
        })
        .await
        .cloned()
    }

    /// Builds the discovery content of `ie` from what it references.
    ///
    /// A build is milliseconds of CPU per hundred hosts (ramdisk files, gzip, the Ignition): on a
    /// runtime worker it would hold up the tasks queued behind it there, the accept loop among them,
    /// so it runs on blocking threads. Its two halves, the static-network ramdisk and the Ignition,
    /// need nothing of each other and run side by side: a new InfraEnv's first byte waits for the
    /// longer one only.
    async fn build_content(
        self: Arc<Self>,
        ie: InfraEnv,
        uid: String,
        secret: Secret,
        nmstate: Vec<Arc<SelectedConfig>>,
        icc: Option<Secret>,
    ) -> Result<DiscoveryContent, ImageError> {
        CONTENT_BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let secret_name = &ie.spec.pull_secret_ref.name;
        let pull_secret = secret_value(&secret, DOCKER_CONFIG_JSON_KEY).ok_or_else(|| {
            ImageError::Invalid(format!("secret {secret_name} did not contain key {DOCKER_CONFIG_JSON_KEY}"))
        })?;
        validate_pull_secret(&pull_secret)
            .map_err(|source| ImageError::PullSecret { secret: secret_name.clone(), source })?;
        let proxy = ie.spec.proxy.as_ref().and_then(|p| {
            let proxy = crate::content::ignition::Proxy {
                http_proxy: non_empty(&p.http_proxy),
                https_proxy: non_empty(&p.https_proxy),
                no_proxy: non_empty(&p.no_proxy),
            };
            (proxy.http_proxy.is_some() || proxy.https_proxy.is_some()).then_some(proxy)
        });
        let mut karg_ops = Vec::new();
        let mut karg_appends = Vec::new();
        for (i, k) in ie.spec.kernel_arguments.iter().enumerate() {
            let op = match k.operation {
                KernelArgumentOperation::Append => KargOp::Append(k.value.clone()),
                KernelArgumentOperation::Replace => KargOp::Replace(k.value.clone()),
                KernelArgumentOperation::Delete => KargOp::Delete(k.value.clone()),
            };
            // Checked before anything is built: an argument that would read differently to iPXE,
            // GRUB or the kernel refuses the whole image (every artifact carries the arguments).
            crate::formats::kargs::check_op(&op)
                .map_err(|source| ImageError::KernelArguments { index: Some(i), source })?;
            if let KargOp::Append(arg) = &op {
                karg_appends.push(arg.clone());
            }
            karg_ops.push(op);
        }
        let has_static_network = !nmstate.is_empty();
        let network = {
            let (this, proxy) = (self.clone(), proxy.clone());
            tokio::task::spawn_blocking(move || this.static_network_part(&nmstate, proxy.as_ref()))
        };
        let ignition = tokio::task::spawn_blocking(move || {
            self.ignition_part(&ie, &uid, pull_secret, proxy, icc.as_ref(), has_static_network)
        });
        let (network, ignition) = tokio::join!(network, ignition);
        let joined = |source| ImageError::Task { what: "building the discovery content", source };
        // The static network's errors first: they are the user's to fix, and the likelier.
        let network = network.map_err(joined)??;
        let (ignition, archive) = ignition.map_err(joined)??;
        let mut h = Sha256::new();
        h.update(archive.sha256);
        if let Some(r) = &network.ramdisk {
            h.update(r.sha256);
        }
        for op in &karg_ops {
            h.update(format!("{op:?}\n").as_bytes());
        }
        Ok(DiscoveryContent {
            ignition,
            archive,
            ramdisk: network.ramdisk,
            static_hosts: network.hosts,
            static_network: network.files,
            karg_ops,
            karg_appends,
            digest: h.finalize().into(),
            verified: Default::default(),
        })
    }

    /// The static-network half of a content: every selected NMStateConfig is one host entry of the
    /// ramdisk (validated, and its keyfiles generated once, by `ramdisk_files`).
    fn static_network_part(
        &self,
        nmstate: &[Arc<SelectedConfig>],
        proxy: Option<&crate::content::ignition::Proxy>,
    ) -> Result<StaticNetworkPart, ImageError> {
        let entries = crate::content::staticnet::ramdisk_files_of(
            nmstate.iter().map(|c| c.host.as_ref()),
            proxy.map(|p| crate::content::staticnet::ProxyEnv {
                http_proxy: p.http_proxy.as_deref(),
                https_proxy: p.https_proxy.as_deref(),
                no_proxy: p.no_proxy.as_deref(),
            }),
        )
        .map_err(ImageError::StaticNetwork)?;
        let ramdisk = if entries.is_empty() {
            None
        } else {
            let bytes = crate::content::staticnet::archive(&entries).map_err(ImageError::StaticNetworkRamdisk)?;
            Some(self.shared_part(bytes))
        };
        let files = (!nmstate.is_empty()).then(|| StaticNetworkFiles {
            entries: entries.into_iter().filter(crate::content::staticnet::is_network_file).collect(),
            tar: Default::default(),
        });
        Ok(StaticNetworkPart { ramdisk, files, hosts: nmstate.len() })
    }

    /// The Ignition half of a content: the discovery Ignition (with the ironic agent's, when the
    /// InfraEnv has it) and its `config.ign` archive.
    fn ignition_part(
        &self,
        ie: &InfraEnv,
        uid: &str,
        pull_secret: String,
        proxy: Option<crate::content::ignition::Proxy>,
        icc: Option<&Secret>,
        has_static_network: bool,
    ) -> Result<(Arc<str>, Arc<Part>), ImageError> {
        let internal_ignition_override = if ironic::enabled(ie) {
            let icc_value = |k: &str| icc.and_then(|s| secret_value(s, k)).filter(|v| !v.trim().is_empty());
            let defaults = &self.config.ironic;
            let base_url = icc_value("IRONIC_BASE_URL").or_else(|| defaults.base_url.clone()).ok_or_else(|| {
                ImageError::Invalid(format!(
                    "Could not add ironic agent to image: Failed to determine ironic config: no ironic URL (set IRONIC_BASE_URL in secret {}/{} or --ironic-base-url)",
                    ironic::ICC_SECRET_NAMESPACE,
                    ironic::ICC_SECRET_NAME
                ))
            })?;
            let override_image = ie
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ironic::IRONIC_AGENT_IMAGE_OVERRIDE_ANNOTATION))
                .cloned();
            let cfg = ironic::IronicConfig {
                base_url,
                inspector_url: icc_value("IRONIC_INSPECTOR_BASE_URL").or_else(|| defaults.inspector_url.clone()),
                agent_image: ironic::agent_image(
                    override_image.as_deref(),
                    icc_value("IRONIC_AGENT_IMAGE").as_deref(),
                    &ie.cpu_architecture(),
                    defaults,
                ),
                http_proxy: proxy.as_ref().and_then(|p| p.http_proxy.clone()),
                https_proxy: proxy.as_ref().and_then(|p| p.https_proxy.clone()),
                no_proxy: proxy.as_ref().and_then(|p| p.no_proxy.clone()),
                has_static_network,
            };
            Some(ironic::ignition_fragment(&cfg).map_err(ImageError::Ironic)?)
        } else {
            None
        };

        let input = crate::content::ignition::DiscoveryInput {
            infra_env_id: uid.to_string(),
            service_base_url: self.config.base_url.clone(),
            pull_secret,
            ssh_authorized_key: ie.spec.ssh_authorized_key.clone().filter(|k| !k.trim().is_empty()),
            proxy,
            additional_trust_bundle: ie
                .spec
                .additional_trust_bundle
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            ignition_config_override: ie.spec.ignition_config_override.clone().filter(|s| !s.trim().is_empty()),
            internal_ignition_override,
            agent_image: self.config.agent_image.clone(),
            agent_token: self.config.agent_auth.as_ref().map(|a| a.token(uid)),
            insecure_skip_verify: false,
            ca_cert_pem: self.config.service_ca_cert_pem.clone(),
        };
        let ignition = crate::content::ignition::render_discovery_ignition(&input).map_err(ImageError::Ignition)?;
        let archive = self.shared_part(crate::formats::initrd::ignition_archive(ignition.as_bytes()));
        Ok((ignition.into(), archive))
    }

    /// [`host_static_config`] of `c`, kept per NMStateConfig while its resourceVersion stays (its
    /// YAML is written out once, not at every build of every InfraEnv that selects it).
    pub(super) fn static_host(&self, c: &NMStateConfig) -> Arc<crate::content::staticnet::HostStaticConfig> {
        let (Some(uid), Some(rv)) = (c.metadata.uid.as_deref(), c.metadata.resource_version.as_deref()) else {
            return Arc::new(host_static_config(c));
        };
        if let Some((seen, host)) = self.static_hosts.locked().get(uid)
            && seen == rv
        {
            return host.clone();
        }
        let host = Arc::new(host_static_config(c));
        let mut hosts = self.static_hosts.locked();
        if hosts.len() >= MAX_STATIC_HOSTS {
            hosts.clear();
        }
        hosts.insert(uid.to_string(), (rv.to_string(), host.clone()));
        host
    }

    /// One copy of each distinct part in memory, however many InfraEnvs share it.
    pub(super) fn shared_part(&self, bytes: Vec<u8>) -> Arc<Part> {
        let sha: [u8; 32] = Sha256::digest(&bytes).into();
        let mut parts = self.parts.locked();
        if let Some(p) = parts.get(&sha).and_then(Weak::upgrade) {
            return p;
        }
        if parts.len() > 1024 {
            parts.retain(|_, w| w.strong_count() > 0);
        }
        let part = Arc::new(Part { bytes: bytes.into(), sha256: sha });
        parts.insert(sha, Arc::downgrade(&part));
        part
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::ServiceConfig;
    use crate::resources::{LabelSelector, LabelSelectorRequirement, NMStateConfigSpec};
    fn config(name: &str, labels: &[(&str, &str)]) -> NMStateConfig {
        let mut c = NMStateConfig::new(name, NMStateConfigSpec::default());
        if !labels.is_empty() {
            c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        }
        c
    }

    fn names(configs: &[Arc<SelectedConfig>]) -> Vec<String> {
        configs.iter().map(|c| c.name.clone()).collect()
    }

    /// Selections follow creates, relabels and deletes of NMStateConfigs, whether the list catches up
    /// by the store's change log or, when the log no longer reaches back, by reading it all again.
    #[tokio::test]
    async fn selections_follow_nmstateconfig_changes() {
        use crate::store::Store;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite::SqliteStore::open_in_memory().unwrap();
        let config_in = ServiceConfig::new("http://hub.example", dir.path().into());
        let images = Images::new(store.clone(), crate::image::catalog::Catalog::new(vec![]), Arc::new(config_in));
        let in_ns = |name: &str, labels: &[(&str, &str)]| {
            let mut c = config(name, labels);
            c.metadata.namespace = Some("ns".into());
            c
        };
        let infraenv = |env: &str| {
            let mut ie = InfraEnv::new("pool", Default::default());
            ie.metadata.namespace = Some("ns".into());
            ie.spec.nm_state_config_label_selector = Some(LabelSelector {
                match_labels: [("env".to_string(), env.to_string())].into_iter().collect(),
                match_expressions: vec![],
            });
            ie
        };
        let selected = async |env: &str| names(&images.selected_nmstate_configs(&infraenv(env)).await.unwrap());
        for (name, env) in [("a", "pool"), ("b", "pool"), ("c", "lab")] {
            store.create(&in_ns(name, &[("env", env)])).await.unwrap();
        }
        let mut elsewhere = config("x", &[("env", "pool")]);
        elsewhere.metadata.namespace = Some("other".into());
        store.create(&elsewhere).await.unwrap();
        assert_eq!(selected("pool").await, ["a", "b"]);

        let mut b: NMStateConfig = store.get("ns", "b").await.unwrap().unwrap();
        b.metadata.labels = Some([("env".to_string(), "lab".to_string())].into_iter().collect());
        store.update(&b).await.unwrap();
        store.create(&in_ns("d", &[("env", "pool")])).await.unwrap();
        store.delete::<NMStateConfig>("ns", "a").await.unwrap();
        assert_eq!(selected("pool").await, ["d"]);
        assert_eq!(selected("lab").await, ["b", "c"]);

        // More changes than the log keeps: read again in full.
        for i in 0..crate::store::CHANGE_LOG_LEN {
            let mut c = config(&format!("y{i}"), &[("env", "pool")]);
            c.metadata.namespace = Some("other".into());
            store.create(&c).await.unwrap();
        }
        store.create(&in_ns("e", &[("env", "pool")])).await.unwrap();
        store.delete::<NMStateConfig>("ns", "c").await.unwrap();
        assert_eq!(selected("pool").await, ["d", "e"]);
        assert_eq!(selected("lab").await, ["b"]);
    }

    /// The content cache forgets an InfraEnv once it is gone (reconciled after its deletion).
    #[tokio::test]
    async fn a_deleted_infraenvs_content_is_dropped() {
        use crate::store::Store;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::sqlite::SqliteStore::open_in_memory().unwrap();
        let config = Arc::new(ServiceConfig::new("http://hub.example", dir.path().into()));
        let images = Images::new(store.clone(), crate::image::catalog::Catalog::new(vec![]), config);
        let apply = async |doc: serde_json::Value| {
            let (kind, doc) = crate::resources::validate_document(&doc).unwrap();
            store.apply_document(kind, doc).await.unwrap();
        };
        apply(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ps", "namespace": "ns"},
                                 "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}))
        .await;
        for name in ["a", "b"] {
            apply(serde_json::json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
                                     "metadata": {"name": name, "namespace": "ns"},
                                     "spec": {"pullSecretRef": {"name": "ps"}}}))
            .await;
            let ie: InfraEnv = store.get("ns", name).await.unwrap().unwrap();
            images.content(&ie).await.unwrap();
        }
        assert_eq!(images.cached_contents(), 2);
        // A reconcile of a live InfraEnv keeps it.
        crate::controllers::infraenv::reconcile_with(&images, None, "ns", "a").await.unwrap();
        assert_eq!(images.cached_contents(), 2);
        store.delete::<InfraEnv>("ns", "a").await.unwrap();
        crate::controllers::infraenv::reconcile_with(&images, None, "ns", "a").await.unwrap();
        assert_eq!(images.cached_contents(), 1);
        assert_eq!(images.infraenvs_built_with("ns", "anything"), Vec::<(String, String)>::new());

        // Without a controller (an image server replica), the change feed does it.
        tokio::spawn(images.clone().follow_store_changes());
        tokio::task::yield_now().await;
        store.delete::<InfraEnv>("ns", "b").await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while images.cached_contents() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(images.cached_contents(), 0);
    }

    /// The label index selects exactly what reading every config would, in the store's order.
    #[test]
    fn indexed_selection_matches_a_full_scan() {
        let mut configs = Vec::new();
        for i in 0..60 {
            let env = ["pool", "edge", "lab"][i % 3];
            let rack = format!("r{}", i % 4);
            let mut labels = vec![("env", env), ("rack", rack.as_str())];
            if i % 5 == 0 {
                labels.push(("gpu", "yes"));
            }
            if i % 7 == 0 {
                labels.clear();
            }
            configs.push(config(&format!("c{i:02}"), &labels));
        }
        let index = NamespaceConfigs::new(
            1,
            configs.iter().map(|c| SelectedConfig::of(c, Arc::new(host_static_config(c)))).collect(),
        );
        let expr = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let selectors = [
            LabelSelector { match_labels: labels(&[("env", "pool")]), match_expressions: vec![] },
            LabelSelector { match_labels: labels(&[("env", "edge"), ("rack", "r1")]), match_expressions: vec![] },
            LabelSelector { match_labels: labels(&[("env", "lab"), ("gpu", "yes")]), match_expressions: vec![] },
            LabelSelector { match_labels: labels(&[("env", "nowhere")]), match_expressions: vec![] },
            LabelSelector { match_labels: labels(&[("env", "pool"), ("missing", "x")]), match_expressions: vec![] },
            LabelSelector { match_labels: labels(&[]), match_expressions: vec![expr("rack", "In", &["r0", "r2"])] },
            LabelSelector {
                match_labels: labels(&[("env", "pool")]),
                match_expressions: vec![expr("gpu", "DoesNotExist", &[]), expr("rack", "NotIn", &["r3"])],
            },
            LabelSelector { match_labels: labels(&[]), match_expressions: vec![expr("gpu", "Exists", &[])] },
        ];
        let empty = BTreeMap::new();
        for selector in &selectors {
            let scanned: Vec<String> = configs
                .iter()
                .filter(|c| selector.matches(c.metadata.labels.as_ref().unwrap_or(&empty)))
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect();
            assert_eq!(names(&index.select(selector)), scanned, "{selector:?}");
        }
        // The selections are not trivially empty or full.
        assert_eq!(index.select(&selectors[0]).len(), 17);
        assert!(index.select(&selectors[3]).is_empty());
    }
}
