//! What each artifact of an InfraEnv is, as a plan over a base image.
//!
//! An InfraEnv's *discovery content* — its Ignition config packed as an initramfs archive, its
//! static-network ramdisk, its kernel-argument edits — does not depend on the base image; it is built
//! once per change of the InfraEnv or of what it references (pull secret, selected NMStateConfigs, the
//! ironic configuration) and shared. Each artifact is then a plan:
//! - full ISO: the base ISO with the Ignition embed area holding the Ignition archive, then the ramdisk,
//!   then zeros (the area is an initrd fragment the bootloader loads, exactly where `coreos-installer
//!   iso network embed` puts keyfiles), and the karg embed areas rewritten when kernel arguments change;
//! - minimal ISO: the same over the minimal template of the base (see [`minimal`]), whose kernel arguments
//!   always drop `coreos.liveiso` and point `coreos.live.rootfs_url` at our rootfs;
//! - PXE initrd: the base initrd, then the Ignition archive, then the ramdisk (spec-images §5.3);
//! - kernel, rootfs: byte ranges of the base ISO as they are.
//!
//! The controller and the download handlers call the same functions, so an image the status calls
//! created is exactly the image served, and an error in one is the error in the other.

pub mod catalog;
pub mod minimal;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use k8s_openapi::api::core::v1::Secret;
use sha2::{Digest, Sha256};

use crate::content::ironic::{self, IronicDefaults};
use crate::formats::kargs::KargOp;
use crate::formats::liveiso::{Area, LiveIso};
use crate::image::catalog::{BaseImage, Catalog, LookupError};
use crate::plan::Representation;
use crate::plan::{Part, Plan, PlanBuilder, Segment};
use crate::resources::{
    DOCKER_CONFIG_JSON_KEY, ImageType, InfraEnv, IpxeScriptType, KernelArgumentOperation, NMStateConfig, secret_value,
};
use crate::store::{Store, StoreError};

/// Settings of the service that shape images and URLs.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Where hosts and BMCs reach bootstream (image and agent API); no trailing slash.
    pub base_url: String,
    /// Container image of the discovery agent started by the discovery Ignition.
    pub agent_image: String,
    /// Where derived per-base-image files (re-mastered minimal ISOs) are kept.
    pub data_dir: PathBuf,
    /// ISO type of InfraEnvs that do not set `spec.imageType` (assisted's `ISO_IMAGE_TYPE`).
    pub default_image_type: ImageType,
    pub ironic: IronicDefaults,
    /// Per-InfraEnv agent tokens; None serves images whose agent sends no token (tests of images alone).
    pub agent_auth: Option<crate::auth::AgentAuth>,
    /// Signs image URLs and checks the tokens of image requests; None serves unsigned `/byid/` URLs
    /// (assisted-service's AUTH_TYPE=none).
    pub url_signer: Option<Arc<crate::auth::urlsign::UrlSigner>>,
    /// Where iPXE reaches bootstream when `base_url` is HTTPS and a plain-HTTP listener serves what
    /// iPXE fetches ("insecure iPXE URLs", spec-controllers §3.8): the iPXE script, kernel, rootfs
    /// and PXE initrd URLs are built on it. No trailing slash.
    pub plain_http_base_url: Option<String>,
    /// The CA of bootstream's HTTPS certificate, given to the discovery agent (`--cacert`).
    pub service_ca_cert_pem: Option<String>,
}

impl ServiceConfig {
    pub fn new(base_url: &str, data_dir: PathBuf) -> ServiceConfig {
        ServiceConfig {
            base_url: base_url.trim_end_matches('/').to_string(),
            agent_image: crate::content::ignition::DEFAULT_AGENT_IMAGE.to_string(),
            data_dir,
            default_image_type: ImageType::FullIso,
            ironic: IronicDefaults::default(),
            agent_auth: None,
            url_signer: None,
            plain_http_base_url: None,
            service_ca_cert_pem: None,
        }
    }

    /// The base of the URLs iPXE fetches: the plain-HTTP listener's when there is one.
    pub fn ipxe_base_url(&self) -> &str {
        self.plain_http_base_url.as_deref().unwrap_or(&self.base_url)
    }
}

/// Why an InfraEnv has no image. The controller turns these into the `ImageCreated` condition; the
/// download handlers into an HTTP status with the same message.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("InfraEnv {0} not found")]
    UnknownInfraEnv(String),
    /// `clusterRef` names a ClusterDeployment that does not exist.
    #[error("ClusterDeployment is missing: {0}")]
    MissingClusterDeployment(String),
    /// Something about the InfraEnv or its inputs that the user must fix.
    #[error("{0}")]
    Invalid(String),
    /// No base image for the requested version or architecture.
    #[error("{0}")]
    OsImage(#[from] LookupError),
    /// The request asks for something this base image does not have (an s390x file on x86_64...).
    #[error("{0}")]
    NotAvailable(String),
    /// The base image changed on disk; not served until reloaded.
    #[error("{0}")]
    BaseChanged(String),
    #[error("{0}")]
    Internal(String),
}

impl ImageError {
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ImageError::UnknownInfraEnv(_) | ImageError::NotAvailable(_) => S::NOT_FOUND,
            ImageError::MissingClusterDeployment(_) | ImageError::Invalid(_) => S::CONFLICT,
            ImageError::OsImage(e) => e.http_status(),
            ImageError::BaseChanged(_) => S::SERVICE_UNAVAILABLE,
            ImageError::Internal(_) => S::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<StoreError> for ImageError {
    fn from(e: StoreError) -> Self {
        ImageError::Internal(e.to_string())
    }
}

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
    verified: std::sync::Mutex<Vec<([u8; 32], ImageType)>>,
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
struct NamespaceConfigs {
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
struct ContentEntry {
    key: String,
    cell: ContentCell,
    infraenv: (String, String),
    configs: HashSet<String>,
}

/// Discovery contents built since start (cache misses of [`Images::content`]), for `/metrics`.
pub static CONTENT_BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Builds and caches discovery content; resolves artifacts for download and status.
pub struct Images<S: Store> {
    pub store: S,
    pub catalog: Arc<Catalog>,
    pub config: Arc<ServiceConfig>,
    /// The content of each InfraEnv (by uid) for the key it was built from.
    contents: Mutex<HashMap<String, ContentEntry>>,
    /// Parsed NMStateConfigs by namespace, with the store's NMStateConfig change count they were read at.
    nmstate_lists: Mutex<HashMap<String, Arc<tokio::sync::Mutex<NamespaceConfigs>>>>,
    /// Each NMStateConfig's ramdisk host entry by uid, with the resourceVersion it was made from.
    static_hosts: Mutex<HashMap<String, (String, Arc<crate::content::staticnet::HostStaticConfig>)>>,
    parts: Mutex<HashMap<[u8; 32], Weak<Part>>>,
    minimal: minimal::Templates,
    /// This service itself, for builds that run on the blocking pool.
    this: Weak<Images<S>>,
}

/// One of the files served under `/boot-artifacts/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootArtifact {
    Kernel,
    Rootfs,
}

/// Fixed kernel arguments of the iPXE boot script (spec-controllers §8.1).
const IPXE_KARGS: &str = "random.trust_cpu=on rd.luks.options=discard ignition.firstboot ignition.platform.id=metal console=tty1 console=ttyS1,115200n8 coreos.inst.persistent-kargs=\"console=tty1 console=ttyS1,115200n8\"";

/// The longest kernel command line the kernel reads whole (`COMMAND_LINE_SIZE` of x86 and arm64,
/// the terminating NUL included); a longer one is cut short without a word.
pub const KERNEL_COMMAND_LINE_MAX: usize = 2048;

/// The kernel command line of the iPXE script: the fixed arguments with the rootfs URL, then the
/// InfraEnv's `spec.kernelArguments` edits, which fail here when they cannot apply or the line would
/// be longer than the kernel reads.
pub fn ipxe_kernel_arguments(rootfs_url: &str, content: &DiscoveryContent) -> Result<String, ImageError> {
    let kargs = format!("initrd=initrd coreos.live.rootfs_url={rootfs_url} {IPXE_KARGS}");
    let kargs = if content.karg_ops.is_empty() {
        kargs
    } else {
        crate::formats::kargs::apply_ops(&kargs, &content.karg_ops)
            .map_err(|e| ImageError::Invalid(format!("spec.kernelArguments: {e}")))?
    };
    if kargs.len() >= KERNEL_COMMAND_LINE_MAX {
        return Err(ImageError::Invalid(format!(
            "spec.kernelArguments: the iPXE kernel command line would be {} bytes, and the kernel reads at most {}",
            kargs.len(),
            KERNEL_COMMAND_LINE_MAX - 1
        )));
    }
    Ok(kargs)
}

/// The iPXE script that boots `kernel_url` with `kargs` and `initrd_url`, checked to read back as
/// exactly those four commands (see [`check_ipxe_script`]).
pub fn render_ipxe_script(initrd_url: &str, kernel_url: &str, kargs: &str) -> Result<String, ImageError> {
    static TEMPLATE: std::sync::LazyLock<Result<minijinja::Environment<'static>, minijinja::Error>> =
        std::sync::LazyLock::new(|| {
            let mut env = minijinja::Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env.add_template("boot.ipxe", include_str!("../../templates/ipxe/boot.ipxe"))?;
            Ok(env)
        });
    let template = TEMPLATE
        .as_ref()
        .map_err(|e| ImageError::Internal(format!("iPXE template: {e}")))?
        .get_template("boot.ipxe")
        .map_err(|e| ImageError::Internal(format!("iPXE template: {e}")))?;
    let mut script = template
        .render(minijinja::context! { initrd_url => initrd_url, kernel_url => kernel_url, kargs => kargs })
        .map_err(|e| ImageError::Internal(format!("iPXE template: {e}")))?;
    // The template engine drops the file's final newline; iPXE wants complete lines.
    script.push('\n');
    check_ipxe_script(&script).map_err(|e| ImageError::Internal(format!("iPXE script: {e}")))?;
    Ok(script)
}

/// Checks that an iPXE boot script reads, as iPXE reads it, as exactly `#!ipxe`, one `initrd`, one
/// `kernel` and `boot`: each line one command (no `;`, `&&` or `||` token chaining another, no
/// comment token cutting one short, no `${...}` expansion). The inputs are checked where they come
/// in (kernel arguments, URLs); this is the last word before a script leaves.
pub fn check_ipxe_script(script: &str) -> Result<(), String> {
    let lines: Vec<&str> = script.split('\n').collect();
    let commands = ["#!ipxe", "initrd", "kernel", "boot"];
    if lines.len() != commands.len() + 1 || lines.last() != Some(&"") {
        return Err(format!("{} lines, expected {}", lines.len().saturating_sub(1), commands.len()));
    }
    for (line, command) in lines.iter().zip(commands) {
        if line.bytes().any(|b| b.is_ascii_control()) {
            return Err(format!("a control character in the {command} line"));
        }
        let mut tokens = line.split_ascii_whitespace();
        if tokens.next() != Some(command) {
            return Err(format!("the {command} line does not start with {command}"));
        }
        if command == "#!ipxe" {
            continue;
        }
        if let Some(t) = tokens.find(|t| matches!(*t, ";" | "&&" | "||") || t.starts_with('#') || t.contains('$')) {
            return Err(format!("the {command} line holds {t:?}, which iPXE would not pass to {command}"));
        }
    }
    Ok(())
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

impl<S: Store> Images<S> {
    /// Follows the store's changes until its feed ends:
    /// - checks each NMStateConfig and generates its keyfiles as it is created or changed
    ///   ([`crate::content::staticnet::prepare`]), so that the first build of an InfraEnv selecting it (which
    ///   a host's first download may wait for) only assembles the ramdisk;
    /// - forgets the content of each InfraEnv deleted (the InfraEnv controller does too; an image
    ///   server replica on Kubernetes runs no controller).
    pub async fn follow_store_changes(self: Arc<Self>) {
        use tokio::sync::broadcast::error::RecvError;
        let mut events = self.store.subscribe();
        let nmstate = crate::store::resource_name::<NMStateConfig>();
        let infraenv = crate::store::resource_name::<InfraEnv>();
        loop {
            match events.recv().await {
                Ok(e) if e.resource == nmstate && e.resource_version.is_some() => {
                    if let Ok(Some(c)) = self.store.get::<NMStateConfig>(&e.namespace, &e.name).await {
                        crate::content::staticnet::prepare(&self.static_host(&c));
                    }
                }
                Ok(e) if e.resource == infraenv && e.resource_version.is_none() => self.forget(&e.namespace, &e.name),
                // Missed changes are only missed preparation: builds check what they use anyway.
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            }
        }
    }

    pub fn new(store: S, catalog: Arc<Catalog>, config: Arc<ServiceConfig>) -> Arc<Images<S>> {
        Arc::new_cyclic(|this| Images {
            store,
            catalog,
            config,
            contents: Mutex::new(HashMap::new()),
            nmstate_lists: Mutex::new(HashMap::new()),
            static_hosts: Mutex::new(HashMap::new()),
            parts: Mutex::new(HashMap::new()),
            minimal: minimal::Templates::default(),
            this: this.clone(),
        })
    }

    pub async fn infraenv_by_id(&self, id: &str) -> Result<InfraEnv, ImageError> {
        self.store.get_by_uid::<InfraEnv>(id).await?.ok_or_else(|| ImageError::UnknownInfraEnv(id.to_string()))
    }

    /// The base image an InfraEnv's own URLs point at: its `osImageVersion`, else the latest for its
    /// architecture.
    pub fn selected_base(&self, ie: &InfraEnv) -> Result<Arc<BaseImage>, ImageError> {
        let version = ie.spec.os_image_version.as_deref().unwrap_or("");
        Ok(self.catalog.lookup(version, &ie.cpu_architecture())?)
    }

    /// The ISO type of `ie`: `spec.imageType`, else the service default; s390x has full ISOs only.
    pub fn image_type(&self, ie: &InfraEnv) -> ImageType {
        match ie.spec.image_type {
            Some(t) => t,
            None if ie.cpu_architecture() == "s390x" => ImageType::FullIso,
            None => self.config.default_image_type,
        }
    }

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
            let mut lists = self.nmstate_lists.lock().unwrap();
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
        self.contents.lock().unwrap().retain(|_, e| e.infraenv.0 != namespace || e.infraenv.1 != name);
    }

    /// Drops the content kept for the InfraEnv of uid `uid`: one [`Images::prebuild`] built for an
    /// InfraEnv whose create did not happen.
    pub fn forget_uid(&self, uid: &str) {
        self.contents.lock().unwrap().remove(uid);
    }

    /// Builds the discovery content of `ie`, an InfraEnv being created, as it will be stored (with
    /// the uid reserved for it): its status and first downloads then find it built, or being built,
    /// under the same key. What fails is left to the status, which reports it.
    pub async fn prebuild(&self, ie: &InfraEnv) {
        if let Err(e) = self.content(ie).await {
            tracing::debug!(
                infraenv = ie.metadata.uid.as_deref().unwrap_or_default(),
                "no content ahead of the create: {e}"
            );
        }
    }

    /// How many InfraEnvs' contents the cache holds.
    pub fn cached_contents(&self) -> usize {
        self.contents.lock().unwrap().len()
    }

    /// The InfraEnvs of `namespace` (namespace, name) whose content was last built, or tried, with
    /// the NMStateConfig `config` among its hosts.
    pub fn infraenvs_built_with(&self, namespace: &str, config: &str) -> Vec<(String, String)> {
        let contents = self.contents.lock().unwrap();
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
        let secret = secret.ok_or_else(|| {
            ImageError::Invalid(format!(
                "failed to find secret {secret_name}: {}",
                StoreError::not_found::<Secret>(secret_name)
            ))
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
        let mut key = format!("{ie_version}/{}", rv(&secret.metadata));
        for c in &nmstate {
            key.push_str(&format!("/{}={}", c.name, c.resource_version));
        }
        if ironic_enabled {
            key.push_str(&format!("/icc={}", icc.as_ref().map(|s| rv(&s.metadata)).unwrap_or_default()));
        }
        // One build per key: callers that arrive while it runs (the controller and the first downloads
        // of a new InfraEnv) wait for it instead of building the same content again.
        let cell = {
            let mut contents = self.contents.lock().unwrap();
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
            .map_err(|e| ImageError::Invalid(format!("invalid pull secret data in secret {secret_name}: {e}")))?;
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
                .map_err(|e| ImageError::Invalid(format!("spec.kernelArguments[{i}]: {e}")))?;
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
        let joined = |e: tokio::task::JoinError| ImageError::Internal(format!("building the discovery content: {e}"));
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
        .map_err(|e| ImageError::Invalid(format!("static network config: {e}")))?;
        let ramdisk = if entries.is_empty() {
            None
        } else {
            let bytes = crate::content::staticnet::archive(&entries)
                .map_err(|e| ImageError::Internal(format!("static network ramdisk: {e}")))?;
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
            Some(
                ironic::ignition_fragment(&cfg)
                    .map_err(|e| ImageError::Invalid(format!("Could not add ironic agent to image: {e}")))?,
            )
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
        let ignition = crate::content::ignition::render_discovery_ignition(&input)
            .map_err(|e| ImageError::Invalid(format!("discovery ignition: {e}")))?;
        let archive = self.shared_part(crate::formats::initrd::ignition_archive(ignition.as_bytes()));
        Ok((ignition.into(), archive))
    }

    /// [`host_static_config`] of `c`, kept per NMStateConfig while its resourceVersion stays (its
    /// YAML is written out once, not at every build of every InfraEnv that selects it).
    fn static_host(&self, c: &NMStateConfig) -> Arc<crate::content::staticnet::HostStaticConfig> {
        let (Some(uid), Some(rv)) = (c.metadata.uid.as_deref(), c.metadata.resource_version.as_deref()) else {
            return Arc::new(host_static_config(c));
        };
        if let Some((seen, host)) = self.static_hosts.lock().unwrap().get(uid)
            && seen == rv
        {
            return host.clone();
        }
        let host = Arc::new(host_static_config(c));
        let mut hosts = self.static_hosts.lock().unwrap();
        if hosts.len() >= MAX_STATIC_HOSTS {
            hosts.clear();
        }
        hosts.insert(uid.to_string(), (rv.to_string(), host.clone()));
        host
    }

    /// One copy of each distinct part in memory, however many InfraEnvs share it.
    fn shared_part(&self, bytes: Vec<u8>) -> Arc<Part> {
        let sha: [u8; 32] = Sha256::digest(&bytes).into();
        let mut parts = self.parts.lock().unwrap();
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

    /// The digest the InfraEnv status records (`imageDigest`): the discovery content, the base image and
    /// the ISO type.
    pub fn image_digest(content: &DiscoveryContent, base: &BaseImage, image_type: ImageType) -> String {
        let mut h = Sha256::new();
        h.update(content.digest);
        h.update(base.file.sha256);
        h.update(format!("{image_type:?}").as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// When the content of `ie`'s images last changed: `createdTime` if the status describes this very
    /// content, else now (the controller has not caught up; a later Last-Modified is the safe answer).
    fn content_modified(&self, ie: &InfraEnv, content: &DiscoveryContent, base: &BaseImage) -> SystemTime {
        let status = ie.status.as_ref();
        let digest = Self::image_digest(content, base, self.image_type(ie));
        match status.and_then(|s| s.created_time.as_ref()) {
            Some(t) if status.map(|s| s.image_digest.as_str()) == Some(digest.as_str()) => {
                SystemTime::from(t.0).max(base.modified)
            }
            _ => SystemTime::now(),
        }
    }

    /// The Ignition embed area's new bytes: the Ignition archive, the static-network ramdisk, zeros.
    fn embed_area(&self, area: Area, content: &DiscoveryContent) -> Result<Vec<Segment>, ImageError> {
        let ign = content.archive.bytes.len();
        crate::content::ignition::check_archive_size(ign, area.len).map_err(|e| ImageError::Invalid(e.to_string()))?;
        let ram = content.ramdisk.as_ref().map(|r| r.bytes.len()).unwrap_or(0);
        if (ign + ram) as u64 > area.len {
            return Err(ImageError::Invalid(format!(
                "The ignition archive ({} KiB) and the static network ramdisk ({} KiB, {} NMStateConfigs) add up to {} KiB, over the size of the ISO's Ignition embed area ({} KiB)",
                kib(ign as u64),
                kib(ram as u64),
                content.static_hosts,
                kib((ign + ram) as u64),
                kib(area.len)
            )));
        }
        let mut segs = vec![Segment::Part { part: content.archive.clone(), offset: 0, len: ign }];
        if let Some(r) = &content.ramdisk {
            segs.push(Segment::Part { part: r.clone(), offset: 0, len: ram });
        }
        segs.push(Segment::Zeros(area.len - (ign + ram) as u64));
        Ok(segs)
    }

    /// The discovery ISO (full or minimal) of `ie` over `base`.
    pub async fn iso(
        &self,
        ie: &InfraEnv,
        base: &Arc<BaseImage>,
        content: &DiscoveryContent,
        kind: ImageType,
    ) -> Result<Representation, ImageError> {
        base.check_unchanged().map_err(ImageError::BaseChanged)?;
        let template;
        let (plan, live, kargs): (Plan, &LiveIso, Option<String>) = match kind {
            ImageType::FullIso => (Plan::from_file(&base.file), &base.live, None),
            ImageType::MinimalIso => {
                template = self.minimal.get(base, &self.config.data_dir).await?;
                let rootfs = format!("coreos.live.rootfs_url={}", self.minimal_rootfs_url(base));
                let kargs = format!("{} {rootfs}", template.kargs_without_liveiso).trim().to_string();
                (template.plan.clone(), &template.live, Some(kargs))
            }
        };
        let mut overlays: Vec<(u64, Vec<Segment>)> =
            vec![(live.ignition_area.offset, self.embed_area(live.ignition_area, content)?)];
        if kargs.is_some() || !content.karg_ops.is_empty() {
            let Some(areas) = &live.kargs else {
                return Err(ImageError::Invalid(format!(
                    "OS image {} ({}) has no kernel argument embed areas, so kernel arguments cannot be set",
                    base.version, base.arch
                )));
            };
            let current = kargs.unwrap_or_else(|| areas.current.clone());
            let new = crate::formats::kargs::apply_ops(&current, &content.karg_ops)
                .map_err(|e| ImageError::Invalid(format!("spec.kernelArguments: {e}")))?;
            for a in &areas.areas {
                let bytes = crate::formats::kargs::render_area(&new, areas.size, a.end, a.pad)
                    .map_err(|e| ImageError::Invalid(format!("spec.kernelArguments: {e}")))?;
                let part = self.shared_part(bytes);
                let len = part.bytes.len();
                overlays.push((a.offset, vec![Segment::Part { part, offset: 0, len }]));
            }
        }
        let plan = plan.overlay(&mut overlays).map_err(ImageError::Internal)?;
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: self.content_modified(ie, content, base),
            content_type: "application/x-iso9660-image",
            filename: Some(format!("{}-discovery.iso", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// Whether `ie`'s image over `base` can be made whole: the checks the InfraEnv controller makes
    /// before it reports `ImageCreated=True` (the ISO of the InfraEnv's type, with its embed area
    /// and karg area sizes; the PXE initrd; the iPXE kernel command line). Every download of an
    /// InfraEnv's files asks this first (over the base it is for, else the InfraEnv's), so that an
    /// InfraEnv whose image failed answers all of them with the error its condition shows, never
    /// some of them with bytes. Remembered per content and base once it holds.
    pub async fn verdict(
        &self,
        ie: &InfraEnv,
        content: &DiscoveryContent,
        base: &Arc<BaseImage>,
    ) -> Result<(), ImageError> {
        let kind = self.image_type(ie);
        let key = (base.file.sha256, kind);
        if content.verified.lock().unwrap_or_else(|p| p.into_inner()).contains(&key) {
            return Ok(());
        }
        self.iso(ie, base, content, kind).await?;
        self.pxe_initrd(ie, base, content)?;
        ipxe_kernel_arguments(&self.urls_with_token(ie, base, None).rootfs, content)?;
        let mut verified = content.verified.lock().unwrap_or_else(|p| p.into_inner());
        if !verified.contains(&key) {
            verified.push(key);
        }
        Ok(())
    }

    /// The PXE initrd: the base initrd, the Ignition archive, the static-network ramdisk.
    pub fn pxe_initrd(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        base.check_unchanged().map_err(ImageError::BaseChanged)?;
        crate::content::ignition::check_archive_size(
            content.archive.bytes.len(),
            crate::content::ignition::IGNITION_ARCHIVE_LIMIT as u64,
        )
        .map_err(|e| ImageError::Invalid(e.to_string()))?;
        let initrd = base.live.initrd;
        let mut b = PlanBuilder::default();
        b.file(&base.file, initrd.offset, initrd.len);
        b.part(content.archive.clone());
        if let Some(r) = &content.ramdisk {
            b.part(r.clone());
        }
        let plan = b.build();
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: self.content_modified(ie, content, base),
            content_type: "application/octet-stream",
            filename: Some(format!("{}-initrd.img", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// s390x `initrd.addrsize` (spec-images §5.4): the image's 8-byte load address, then the big-endian
    /// length of the PXE initrd served for the same request.
    pub fn initrd_addrsize(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        let Some(area) = base.live.initrd_addrsize.filter(|a| a.len >= 8) else {
            return Err(ImageError::NotAvailable(format!(
                "OS image {} ({}) has no images/initrd.addrsize",
                base.version, base.arch
            )));
        };
        let initrd = self.pxe_initrd(ie, base, content)?;
        let mut bytes = vec![0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&base.file.file, &mut bytes, area.offset)
            .map_err(|e| ImageError::Internal(format!("reading initrd.addrsize: {e}")))?;
        bytes.extend_from_slice(&initrd.plan.len().to_be_bytes());
        let plan = Plan::from_part(Arc::new(Part::new(bytes)));
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: initrd.last_modified,
            content_type: "application/octet-stream",
            filename: Some(format!("{}-initrd.addrsize", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// Kernel or rootfs of a base image, as they are.
    pub fn boot_artifact(&self, base: &BaseImage, which: BootArtifact) -> Result<Representation, ImageError> {
        base.check_unchanged().map_err(ImageError::BaseChanged)?;
        let (area, name) = match which {
            BootArtifact::Kernel => (base.live.kernel, "vmlinuz"),
            // The catalog only loads images with a rootfs.
            BootArtifact::Rootfs => (
                base.live.rootfs.ok_or_else(|| ImageError::Internal("base image without rootfs".into()))?,
                "rootfs.img",
            ),
        };
        let mut b = PlanBuilder::default();
        b.file(&base.file, area.offset, area.len);
        let plan = b.build();
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: base.modified,
            content_type: "application/octet-stream",
            filename: Some(name.to_string()),
        })
    }

    /// The `static-network-config` download: the per-host network files as a tar.
    pub fn static_network_config(
        &self,
        ie: &InfraEnv,
        content: &DiscoveryContent,
    ) -> Result<Representation, ImageError> {
        let tar = content.static_network.as_ref().map(StaticNetworkFiles::tar).ok_or_else(|| {
            ImageError::NotAvailable("this InfraEnv has no static network config (no NMStateConfig selected)".into())
        })?;
        let plan = Plan::from_part(tar);
        Ok(Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: ie
                .status
                .as_ref()
                .and_then(|s| s.created_time.as_ref())
                .map(|t| SystemTime::from(t.0))
                .unwrap_or_else(SystemTime::now),
            content_type: "application/x-tar",
            filename: Some(format!("{}-static-network-config.tar", ie.metadata.uid.as_deref().unwrap_or("infraenv"))),
        })
    }

    /// The discovery Ignition config as a download.
    pub fn discovery_ignition(&self, ie: &InfraEnv, content: &DiscoveryContent) -> Representation {
        let part = Arc::new(Part::new(content.ignition.as_bytes().to_vec()));
        let plan = Plan::from_part(part);
        Representation {
            etag: hex::encode(plan.digest()),
            plan,
            last_modified: ie
                .status
                .as_ref()
                .and_then(|s| s.created_time.as_ref())
                .map(|t| SystemTime::from(t.0))
                .unwrap_or_else(SystemTime::now),
            content_type: "application/vnd.coreos.ignition+json",
            filename: Some("discovery.ign".to_string()),
        }
    }

    /// The iPXE boot script (spec-controllers §8.1): initrd, kernel with the fixed arguments and the
    /// InfraEnv's edits, boot. Its initrd URL carries `token`: the token of the request being
    /// answered, so that a script never holds a URL that outlives the URL it was fetched with.
    pub fn ipxe_script(
        &self,
        ie: &InfraEnv,
        base: &BaseImage,
        content: &DiscoveryContent,
        token: Option<&str>,
    ) -> Result<String, ImageError> {
        let urls = self.urls_with_token(ie, base, token);
        let kargs = ipxe_kernel_arguments(&urls.rootfs, content)?;
        render_ipxe_script(&urls.initrd, &urls.kernel, &kargs)
    }

    /// The rootfs URL minimal ISOs boot with: a path without `?` or `&`, because GRUB's script syntax
    /// treats `&` as a metacharacter on the unquoted kernel command line.
    pub fn minimal_rootfs_url(&self, base: &BaseImage) -> String {
        format!("{}/boot-artifacts/{}/{}/rootfs.img", self.config.base_url, enc(&base.version), enc(&base.arch))
    }

    /// The URLs of `ie`'s artifacts over `base` (spec-controllers §3.8), signed with a new token when
    /// URLs are signed.
    pub fn urls(&self, ie: &InfraEnv, base: &BaseImage) -> ArtifactUrls {
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let token = self.config.url_signer.as_ref().map(|s| s.sign(id, SystemTime::now()));
        self.urls_with_token(ie, base, token.as_deref())
    }

    /// The token `ie`'s status URLs should carry, and how long until it must be replaced: the one
    /// the status has while more than [`crate::auth::urlsign::REFRESH_BEFORE`] of it is left (so that a
    /// status write does not change every URL, and BareMetalHosts do not see a new image), else a
    /// new one. None when URLs are not signed.
    pub fn status_token(&self, ie: &InfraEnv, now: SystemTime) -> Option<(String, std::time::Duration)> {
        let signer = self.config.url_signer.as_ref()?;
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let current = ie.status.as_ref().and_then(|s| crate::auth::urlsign::token_of_url(&s.iso_download_url));
        let kept = current.and_then(|t| {
            let left = signer.verify_for(t, id, now).ok()?.expires_at()?.duration_since(now).ok()?;
            (left > crate::auth::urlsign::REFRESH_BEFORE)
                .then(|| (t.to_string(), left - crate::auth::urlsign::REFRESH_BEFORE))
        });
        Some(kept.unwrap_or_else(|| {
            (signer.sign(id, now), crate::auth::urlsign::TOKEN_LIFETIME - crate::auth::urlsign::REFRESH_BEFORE)
        }))
    }

    /// The URLs of `ie`'s artifacts: signed with `token` (`/byapikey/` ISO path, `api_key` on the
    /// initrd and the downloads) when there is one; kernel and rootfs are never signed.
    pub fn urls_with_token(&self, ie: &InfraEnv, base: &BaseImage, token: Option<&str>) -> ArtifactUrls {
        let b = &self.config.base_url;
        let ipxe = self.config.ipxe_base_url();
        let id = ie.metadata.uid.as_deref().unwrap_or_default();
        let q = format!("arch={}&version={}", enc(&base.arch), enc(&base.version));
        let files = format!("{b}/api/assisted-install/v2/infra-envs/{id}/downloads/files");
        let ipxe_files = format!("{ipxe}/api/assisted-install/v2/infra-envs/{id}/downloads/files");
        let api_key = token.map(|t| format!("&api_key={}", enc(t))).unwrap_or_default();
        let ipxe_type = if ie.spec.ipxe_script_type == Some(IpxeScriptType::BootOrderControl) {
            "&ipxe_script_type=boot-order-control"
        } else {
            ""
        };
        let iso_file = match self.image_type(ie) {
            ImageType::FullIso => "full.iso",
            ImageType::MinimalIso => "minimal.iso",
        };
        let iso_path = match token {
            Some(t) => format!("byapikey/{}", enc(t)),
            None => format!("byid/{id}"),
        };
        ArtifactUrls {
            iso: format!("{b}/{iso_path}/{}/{}/{iso_file}", enc(&base.version), enc(&base.arch)),
            kernel: format!("{ipxe}/boot-artifacts/kernel?{q}"),
            rootfs: format!("{ipxe}/boot-artifacts/rootfs?{q}"),
            initrd: format!("{ipxe}/images/{id}/pxe-initrd?{q}{api_key}"),
            ipxe_script: format!("{ipxe_files}?file_name=ipxe-script{ipxe_type}{api_key}"),
            discovery_ignition: format!("{files}?file_name=discovery.ign{api_key}"),
            static_network_config: format!("{files}?file_name=static-network-config{api_key}"),
        }
    }
}

/// Rejects InfraEnv settings bootstream does not build into images yet, rather than serving an image
/// that silently lacks them.
fn check_unsupported(ie: &InfraEnv) -> Result<(), ImageError> {
    let s = &ie.spec;
    let unsupported = [
        (s.mirror_registry_ref.is_some(), "spec.mirrorRegistryRef"),
        (!s.ntp_sources.is_empty(), "spec.ntpSources"),
        (!s.additional_ntp_sources.is_empty(), "spec.additionalNTPSources"),
    ];
    match unsupported.iter().find(|(set, _)| *set) {
        Some((_, what)) => Err(ImageError::Invalid(format!("{what} is not supported by this bootstream version"))),
        None => Ok(()),
    }
}

fn kib(bytes: u64) -> u64 {
    bytes.div_ceil(1024)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactUrls {
    pub iso: String,
    pub kernel: String,
    pub rootfs: String,
    pub initrd: String,
    pub ipxe_script: String,
    pub discovery_ignition: String,
    pub static_network_config: String,
}

/// RFC 3986 unreserved characters stay as they are (`4.18`, `x86_64`); everything else is escaped.
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, URL_COMPONENT).to_string()
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// A pull secret must be a Docker config JSON with an `auths` map (assisted-service checks the same).
fn validate_pull_secret(text: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let auths = v.get("auths").and_then(|a| a.as_object()).ok_or("no \"auths\" object")?;
    for (registry, entry) in auths {
        if entry.get("auth").and_then(|a| a.as_str()).is_none() {
            return Err(format!("auths.{registry}: no \"auth\" string"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{LabelSelector, LabelSelectorRequirement, NMStateConfigSpec};

    fn config(name: &str, labels: &[(&str, &str)]) -> NMStateConfig {
        let mut c = NMStateConfig::new(name, NMStateConfigSpec::default());
        if !labels.is_empty() {
            c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        }
        c
    }

    /// Splits a kernel command line as the kernel does (`next_arg`): at spaces outside double quotes.
    fn kernel_arguments_of(cmdline: &str) -> Vec<String> {
        let mut args = vec![String::new()];
        let mut quoted = false;
        for c in cmdline.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    args.last_mut().unwrap().push(c);
                }
                ' ' if !quoted => {
                    if !args.last().unwrap().is_empty() {
                        args.push(String::new());
                    }
                }
                c => args.last_mut().unwrap().push(c),
            }
        }
        args.retain(|a| !a.is_empty());
        args
    }

    fn content_with(karg_ops: Vec<KargOp>) -> DiscoveryContent {
        DiscoveryContent {
            ignition: Arc::from("{}"),
            archive: Arc::new(Part::new(vec![])),
            ramdisk: None,
            static_hosts: 0,
            static_network: None,
            karg_appends: vec![],
            karg_ops,
            digest: [0; 32],
            verified: Default::default(),
        }
    }

    const ROOTFS: &str = "http://hub.example:8080/boot-artifacts/rootfs?arch=x86_64&version=4.20";

    /// Words that make kernel arguments, and the characters iPXE, GRUB, the kernel and text formats
    /// treat specially.
    fn arbitrary_argument() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            4 => "[a-z0-9._-]{1,6}",
            2 => Just("=".to_string()),
            2 => Just("\"".to_string()),
            2 => Just(" ".to_string()),
            1 => Just(",".to_string()),
            1 => prop::sample::select(vec![";", "&&", "||", "#", "$", "${net0/mac}", "\\", "'", "`", "{", "}", "<", ">", "|", "&"])
                .prop_map(str::to_string),
            1 => prop::sample::select(vec!["\n", "\r", "\t", "\u{0}", "\u{1b}", "\u{7f}", "\u{85}", "\u{2028}", "é"])
                .prop_map(str::to_string),
            1 => Just(" chain http://127.0.0.1:9/pwned.ipxe ".to_string()),
        ];
        proptest::collection::vec(piece, 1..8).prop_map(|p| p.concat())
    }

    proptest::proptest! {
        /// Any kernel argument is either refused, or reads back as itself, one argument, wherever it
        /// goes: the iPXE script (line by line, as iPXE splits it), the kernel command line, and the
        /// ISO's karg areas (GRUB and ISOLINUX lines).
        #[test]
        fn a_kernel_argument_is_refused_or_reads_back_as_itself(arg in arbitrary_argument()) {
            let op = KargOp::Append(arg.clone());
            if crate::formats::kargs::check_op(&op).is_err() {
                return Ok(());
            }
            let wanted = arg.trim().to_string();
            let fixed = ipxe_kernel_arguments(ROOTFS, &content_with(vec![])).unwrap();
            let kargs = ipxe_kernel_arguments(ROOTFS, &content_with(vec![op.clone()])).unwrap();
            let script = render_ipxe_script("http://hub.example:8080/initrd?api_key=t", "http://hub.example:8080/kernel", &kargs).unwrap();
            let lines: Vec<&str> = script.lines().collect();
            proptest::prop_assert_eq!(lines.len(), 4, "{}", script);
            let cmdline = lines[2].strip_prefix("kernel http://hub.example:8080/kernel ").unwrap();
            let mut expected = kernel_arguments_of(&fixed);
            expected.push(wanted.clone());
            proptest::prop_assert_eq!(kernel_arguments_of(cmdline), expected.clone());
            // The ISO's areas: one line, the same arguments, nothing for GRUB to expand or run.
            let base = "coreos.liveiso=rhcos-420 ignition.firstboot ignition.platform.id=metal";
            let line = crate::formats::kargs::apply_ops(base, &[op]).unwrap();
            let area = crate::formats::kargs::render_area(&line, 1024, b'\n', b'#').unwrap();
            let text = std::str::from_utf8(&area).unwrap();
            proptest::prop_assert_eq!(text.matches('\n').count(), 1);
            let read_back = kernel_arguments_of(&crate::formats::kargs::parse_area(&area, b'\n', b'#').unwrap());
            proptest::prop_assert_eq!(read_back.last(), Some(&wanted));
        }
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

    /// Status URLs keep their token while more than an hour of it is left, then get a new one; the
    /// controller is told when to come back.

    #[test]
    fn status_tokens_are_kept_until_an_hour_before_expiry() {
        use crate::auth::urlsign::{REFRESH_BEFORE, TOKEN_LIFETIME, UrlSigner};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let signer = Arc::new(UrlSigner::load_or_create(dir.path(), &[]).unwrap());
        let mut config = ServiceConfig::new("http://hub.example", dir.path().into());
        config.url_signer = Some(signer.clone());
        let store = crate::store::sqlite::SqliteStore::open_in_memory().unwrap();
        let images = Images::new(store, crate::image::catalog::Catalog::new(vec![]), Arc::new(config));
        let mut ie = InfraEnv::new("pool", Default::default());
        ie.metadata.uid = Some("2b4f5fd6-1111-4c5e-9a4e-000000000001".into());
        let t0 = SystemTime::now();

        // No status yet: a new token, to be replaced in 3 hours.
        let (first, refresh_in) = images.status_token(&ie, t0).unwrap();
        assert_eq!(refresh_in, TOKEN_LIFETIME - REFRESH_BEFORE);
        let status = ie.status.get_or_insert_default();
        status.iso_download_url = format!("http://hub.example/byapikey/{first}/4.20/x86_64/full.iso");

        // Two hours on: kept, with an hour to go before its refresh.
        let (kept, refresh_in) = images.status_token(&ie, t0 + Duration::from_secs(2 * 3600)).unwrap();
        assert_eq!(kept, first);
        assert!(refresh_in <= Duration::from_secs(3600) && refresh_in > Duration::from_secs(3590), "{refresh_in:?}");

        // Three hours and a minute on: less than an hour left, a new token valid for 4 more hours.
        let later = t0 + Duration::from_secs(3 * 3600 + 60);
        let (renewed, _) = images.status_token(&ie, later).unwrap();
        assert_ne!(renewed, first);
        let claims = signer.verify(&renewed, later).unwrap();
        assert!(claims.expires_at().unwrap() >= later + TOKEN_LIFETIME - Duration::from_secs(1));

        // A status token for another InfraEnv is never reused.
        let other = signer.sign("2b4f5fd6-1111-4c5e-9a4e-000000000002", t0);
        ie.status.as_mut().unwrap().iso_download_url =
            format!("http://hub.example/byapikey/{other}/4.20/x86_64/full.iso");
        assert_ne!(images.status_token(&ie, t0).unwrap().0, other);
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
