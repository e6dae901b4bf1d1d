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
//! - PXE initrd: the base initrd, then the Ignition archive, then the ramdisk (spec-images.md §5.3);
//! - kernel, rootfs: byte ranges of the base ISO as they are.
//!
//! The controller and the download handlers call the same functions, so an image the status calls
//! created is exactly the image served, and an error in one is the error in the other.
//!
//! [`Images`] is defined here with its settings and errors; the base images are in [`catalog`], the
//! discovery content and its cache in `content`, each artifact's plan in `artifacts`, the iPXE script
//! in `ipxe`, and the URLs a status hands out in `urls`.
//!
//! The whole picture, byte by byte: docs/design.md §2.

mod artifacts;
pub mod catalog;
mod content;
mod ipxe;
pub mod minimal;
mod urls;

pub use artifacts::BootArtifact;
pub use content::{DiscoveryContent, PullSecretError, SelectedConfig, StaticNetworkFiles, host_static_config};
pub use ipxe::{
    IpxeScriptError, KERNEL_COMMAND_LINE_MAX, check_ipxe_script, ipxe_kernel_arguments, render_ipxe_script,
};
pub use urls::{ArtifactUrls, enc};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use crate::content::ironic::IronicDefaults;
use crate::image::catalog::{BaseImage, Catalog, LookupError};
use crate::plan::Part;
use crate::resources::{ImageType, InfraEnv, NMStateConfig};
use crate::store::{Store, StoreError};
use content::{ContentEntry, NamespaceConfigs};

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
    /// iPXE fetches ("insecure iPXE URLs", spec-controllers.md §3.8): the iPXE script, kernel, rootfs
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
/// download handlers into an HTTP status with the same message. Both show the error with its causes
/// ([`crate::errors::chain`]): a variant's Display says what failed, its source why.
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
    /// The pull secret `spec.pullSecretRef` names does not exist.
    #[error("failed to find secret {secret}")]
    NoPullSecret {
        secret: String,
        #[source]
        source: StoreError,
    },
    /// The pull secret is not a Docker config JSON with auths.
    #[error("invalid pull secret data in secret {secret}")]
    PullSecret {
        secret: String,
        #[source]
        source: content::PullSecretError,
    },
    /// A kernel argument (`index` of `spec.kernelArguments`, or the edits as a whole) that cannot be
    /// written or applied.
    #[error("spec.kernelArguments{}", .index.map(|i| format!("[{i}]")).unwrap_or_default())]
    KernelArguments {
        index: Option<usize>,
        #[source]
        source: crate::formats::kargs::KargsError,
    },
    /// The selected NMStateConfigs.
    #[error("static network config")]
    StaticNetwork(#[source] crate::content::staticnet::StaticNetError),
    #[error("Could not add ironic agent to image")]
    Ironic(#[source] crate::content::ironic::IronicError),
    #[error("discovery ignition")]
    Ignition(#[source] crate::content::ignition::IgnitionError),
    /// The Ignition archive is over a size limit.
    #[error(transparent)]
    IgnitionArchive(crate::content::ignition::IgnitionError),
    /// The base image cannot give a minimal ISO.
    #[error("OS image {version} ({arch}) cannot provide a minimal ISO")]
    NoMinimalIso {
        version: String,
        arch: String,
        #[source]
        source: Box<minimal::Unavailable>,
    },
    /// No base image for the requested version or architecture.
    #[error(transparent)]
    OsImage(#[from] LookupError),
    /// The request asks for something this base image does not have (an s390x file on x86_64...).
    #[error("{0}")]
    NotAvailable(String),
    /// The base image changed on disk; not served until reloaded.
    #[error(transparent)]
    BaseChanged(#[from] catalog::BaseImageChanged),
    #[error("{0}")]
    Internal(String),
    /// Reading the resources the image is made of.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file of ours (`what` says which, and what was done with it).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A build on the blocking pool (`what` says which) did not finish.
    #[error("{what}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("static network ramdisk")]
    StaticNetworkRamdisk(#[source] crate::content::staticnet::StaticNetError),
    /// A plan of the image does not fit together.
    #[error(transparent)]
    Plan(#[from] crate::plan::OverlayError),
    #[error("iPXE template")]
    IpxeTemplate(#[source] Arc<minijinja::Error>),
    #[error("iPXE script")]
    IpxeScript(#[source] ipxe::IpxeScriptError),
    /// A re-mastered minimal ISO of the data directory that does not inspect.
    #[error("{}", .path.display())]
    RemasteredIso {
        path: PathBuf,
        #[source]
        source: crate::formats::liveiso::LiveIsoError,
    },
}

impl ImageError {
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            ImageError::UnknownInfraEnv(_) | ImageError::NotAvailable(_) => S::NOT_FOUND,
            ImageError::MissingClusterDeployment(_)
            | ImageError::Invalid(_)
            | ImageError::NoPullSecret { .. }
            | ImageError::PullSecret { .. }
            | ImageError::KernelArguments { .. }
            | ImageError::StaticNetwork(_)
            | ImageError::Ironic(_)
            | ImageError::Ignition(_)
            | ImageError::IgnitionArchive(_)
            | ImageError::NoMinimalIso { .. } => S::CONFLICT,
            ImageError::OsImage(e) => e.http_status(),
            ImageError::BaseChanged(_) => S::SERVICE_UNAVAILABLE,
            ImageError::Internal(_)
            | ImageError::Store(_)
            | ImageError::Io { .. }
            | ImageError::Task { .. }
            | ImageError::StaticNetworkRamdisk(_)
            | ImageError::Plan(_)
            | ImageError::IpxeTemplate(_)
            | ImageError::IpxeScript(_)
            | ImageError::RemasteredIso { .. } => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// Not the InfraEnv's fault and may pass: an internal error, a base image changed on disk or still
    /// loading (503). The controller tries again later.
    pub fn is_internal(&self) -> bool {
        matches!(self.http_status(), http::StatusCode::INTERNAL_SERVER_ERROR | http::StatusCode::SERVICE_UNAVAILABLE)
    }
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
}

/// Rejects InfraEnv settings bootstream does not build into images yet, rather than serving an image
/// that silently lacks them.
fn check_unsupported(ie: &InfraEnv) -> Result<(), ImageError> {
    match ie.spec.unsupported_field() {
        Some(what) => Err(ImageError::Invalid(format!("{what} is not supported by this bootstream version"))),
        None => Ok(()),
    }
}
