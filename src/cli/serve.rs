//! `serve` and `controller`: the services wired together from the flags. Three modes share one
//! image service (the OS image catalog, discovery content, the listeners) and differ in the rest:
//! - `serve`: everything in one process, resources and host records in the data directory's SQLite;
//! - `serve --kube`: an image server only, reading a cluster's InfraEnvs (stateless replicas);
//! - `controller`: the controllers, the agent API and the host records against a cluster, while
//!   this process holds the leader Lease.
//!
//! Servers hold a socket per client, so they raise the open-files limit and cap connections below it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::ValueEnum;

use crate::image::catalog::{Catalog, DigestCache, ImageSource, OsImageSpec};
use crate::keylocks::Locked as _;
use crate::resources::Kind;

const DEFAULT_AGENT_IMAGE: &str = "quay.io/edge-infrastructure/assisted-installer-agent:latest";

#[derive(clap::Args, Debug)]
pub(super) struct ServeCommand {
    #[command(flatten)]
    args: ServeArgs,
    /// Serve images only, for the InfraEnvs, NMStateConfigs and Secrets of a Kubernetes cluster
    /// (see --kubeconfig). Stateless: run any number of replicas behind one Service; the agent API
    /// is `bootstream controller`'s.
    #[arg(long)]
    kube: bool,
}

#[derive(clap::Args, Debug)]
pub(super) struct ControllerCommand {
    #[command(flatten)]
    args: ServeArgs,
    /// Namespace of the leader-election Lease (in a pod: its own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "bootstream")]
    lease_namespace: String,
    /// Name of the Lease: controllers sharing it elect one leader among them.
    #[arg(long, default_value = "bootstream-controller")]
    lease_name: String,
    /// This process in the Lease's holderIdentity; default: a random name. In a pod, its name.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Serve the validating admission webhook (POST /admission/validate) over HTTPS on this address,
    /// and nothing else there, from the moment the process starts, whether it leads or waits: the
    /// Kubernetes API server calls it for writes of InfraEnvs, NMStateConfigs, Agents and
    /// AgentClusterInstalls (deploy/webhook.yaml). Needs --webhook-tls-cert and --webhook-tls-key.
    #[arg(long, env = "BOOTSTREAM_WEBHOOK_LISTEN", value_name = "ADDRESS", requires = "webhook_tls_cert")]
    webhook_listen: Option<SocketAddr>,
    /// PEM certificate chain of --webhook-listen, for the name the API server calls (the webhook's
    /// Service). Reloaded when the file changes.
    #[arg(
        long,
        env = "BOOTSTREAM_WEBHOOK_TLS_CERT",
        value_name = "PATH",
        requires_all = ["webhook_tls_key", "webhook_listen"]
    )]
    webhook_tls_cert: Option<PathBuf>,
    /// PEM private key of --webhook-tls-cert.
    #[arg(long, env = "BOOTSTREAM_WEBHOOK_TLS_KEY", value_name = "PATH", requires = "webhook_tls_cert")]
    webhook_tls_key: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum IsoImageType {
    FullIso,
    MinimalIso,
}

#[derive(clap::Args, Debug)]
#[command(after_help = concat!(
    "With no --os-image, serve generates a small sample live ISO (not bootable; it has the real RHCOS layout) ",
    "and serves it as OpenShift version 4.20, architecture x86_64, so everything works offline."
))]
struct ServeArgs {
    /// Directory for state (SQLite), downloaded OS images and the sample image.
    #[arg(long, env = "BOOTSTREAM_DATA_DIR", default_value = "./bootstream-data")]
    data_dir: PathBuf,
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "BOOTSTREAM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// URL hosts and BMCs use to reach this server; every URL in a status or iPXE script is built on it.
    /// Defaults to http://LISTEN-ADDRESS, or https:// with --tls-cert.
    #[arg(long, env = "BOOTSTREAM_BASE_URL")]
    base_url: Option<String>,
    /// PEM certificate chain (leaf first) of the HTTPS listener: with --tls-key, --listen serves HTTPS
    /// only. Reloaded when the file changes.
    #[arg(long, env = "BOOTSTREAM_TLS_CERT", value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, RSA or EC).
    #[arg(long, env = "BOOTSTREAM_TLS_KEY", value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Beside HTTPS, a plain-HTTP listener for what iPXE fetches (iPXE usually cannot do TLS): iPXE
    /// scripts, kernels, PXE initrds and rootfs images, whose status URLs then use it. Nothing else
    /// is served there. A PXE initrd holds its InfraEnv's pull secret: only on a trusted network.
    #[arg(long, env = "BOOTSTREAM_HTTP_LISTEN", value_name = "ADDRESS", requires = "tls_cert")]
    http_listen: Option<SocketAddr>,
    /// Embedded, without --tls-cert: the HTTPS listener of the Kubernetes API (kubectl sends its token
    /// only over TLS), with a certificate generated once in DATA_DIR/api-tls/. DATA_DIR/kubeconfig
    /// points at it. Defaults to a free loopback port. With --tls-cert the main listener serves the API.
    #[arg(long, env = "BOOTSTREAM_API_LISTEN", value_name = "ADDRESS", conflicts_with = "tls_cert")]
    api_listen: Option<SocketAddr>,
    /// URL iPXE uses to reach --http-listen. Defaults to the base URL's host with scheme http and
    /// the port of --http-listen.
    #[arg(long, env = "BOOTSTREAM_HTTP_BASE_URL", requires = "http_listen")]
    http_base_url: Option<String>,
    /// PEM CA bundle that verifies this server's HTTPS certificate, written into discovery images
    /// for the agent (`--cacert`). Needed when that certificate is not signed by a public CA.
    #[arg(long, env = "BOOTSTREAM_SERVICE_CA_CERT", value_name = "PATH")]
    service_ca_cert: Option<PathBuf>,
    /// Base live ISO: VERSION:ARCH:PATH, or VERSION:ARCH:URL:SHA256 to download it (repeatable).
    #[arg(long = "os-image", value_name = "VERSION:ARCH:PATH_OR_URL[:SHA256]")]
    os_images: Vec<OsImageSpec>,
    /// Container image of the discovery agent the discovery Ignition starts.
    #[arg(long, env = "AGENT_DOCKER_IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    agent_image: String,
    /// ISO type for InfraEnvs that do not set spec.imageType.
    #[arg(long, env = "ISO_IMAGE_TYPE", value_enum, default_value = "full-iso")]
    iso_image_type: IsoImageType,
    /// Ironic API URL for InfraEnvs with the enable-ironic-agent annotation, unless the secret
    /// openshift-machine-api/metal3-image-customization-config sets IRONIC_BASE_URL.
    #[arg(long, env = "IRONIC_BASE_URL")]
    ironic_base_url: Option<String>,
    /// Ironic inspector URL (likewise IRONIC_INSPECTOR_BASE_URL in that secret).
    #[arg(long, env = "IRONIC_INSPECTOR_BASE_URL")]
    ironic_inspector_url: Option<String>,
    /// Default ironic agent image for x86_64 (and other non-ARM architectures).
    #[arg(long, env = "IRONIC_AGENT_IMAGE")]
    ironic_agent_image: Option<String>,
    /// Default ironic agent image for arm64.
    #[arg(long, env = "IRONIC_AGENT_IMAGE_ARM")]
    ironic_agent_image_arm: Option<String>,
    /// The converged flow (on unless given `false`): BareMetalHosts boot the ironic agent from their
    /// PreprovisioningImage and metal3 starts the discovery agent (custom deploy
    /// `start_assisted_install`); needs metal3 4.12+. `--converged-flow=false` boots BareMetalHosts
    /// from the InfraEnv's ISO instead (`live-iso`).
    #[arg(
        long,
        env = "ALLOW_CONVERGED_FLOW",
        default_value_t = crate::controllers::metal3::CONVERGED_FLOW_DEFAULT,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
    )]
    converged_flow: bool,
    /// Do not pause BareMetalHosts metal3 reports detached.
    #[arg(long = "no-pause-provisioned-bmhs")]
    no_pause_provisioned_bmhs: bool,
    /// Seconds an InfraEnv's new image waits before BareMetalHosts and PreprovisioningImages get it
    /// (edits in a row then cost one reprovisioning, not one each).
    #[arg(long, env = "BOOTSTREAM_IMAGE_COOLDOWN_SECONDS", default_value_t = 60)]
    image_cooldown_seconds: u64,
    /// How much the polling interval given to agents (`next_instruction_seconds`) varies at random,
    /// as a fraction of it (0.2: 60 s becomes 48–72 s), so that agents that polled together do not
    /// keep doing so; 0 gives the exact intervals of assisted-service.
    #[arg(long, env = "BOOTSTREAM_POLL_JITTER", default_value_t = 0.2)]
    poll_jitter: f64,
    /// Kubeconfig of the cluster (`serve --kube`, `controller`); default: the in-cluster configuration,
    /// else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// File holding the 32-byte key that signs agents' tokens. Default: DATA_DIR/agent-auth.key,
    /// created on first start. Required on Kubernetes, where all processes share one (a Secret).
    #[arg(long, env = "BOOTSTREAM_AGENT_AUTH_KEY", value_name = "PATH")]
    agent_auth_key: Option<PathBuf>,
    /// PEM file with the PKCS#8 P-256 private key that signs image URLs (`openssl genpkey -algorithm
    /// EC -pkeyopt ec_paramgen_curve:P-256`). Default: DATA_DIR/url-signing.pem, created on first
    /// start. Required on Kubernetes, where the controller and every image server share one (a Secret).
    #[arg(long, env = "BOOTSTREAM_URL_SIGNING_KEY", value_name = "PATH")]
    url_signing_key: Option<PathBuf>,
    /// Previous URL-signing keys (PEM, private or public), still accepted for the URLs they signed:
    /// rotate by making the old key a previous key and drop it 4 hours later, when its URLs expired.
    #[arg(long = "url-previous-key", env = "BOOTSTREAM_URL_PREVIOUS_KEYS", value_delimiter = ',', value_name = "PATH")]
    url_previous_keys: Vec<PathBuf>,
    /// Serve images at unsigned `/byid/` URLs that never expire, as assisted-service with
    /// AUTH_TYPE=none: anyone who learns an InfraEnv's id can then download its image, pull secret
    /// included.
    #[arg(long, env = "BOOTSTREAM_UNSIGNED_IMAGE_URLS")]
    unsigned_image_urls: bool,
    /// File with the bearer token of the embedded resource API (`/apis/...`, `/api/v1/...`).
    /// Default: DATA_DIR/api-token, made on first start.
    #[arg(long, env = "BOOTSTREAM_API_TOKEN_FILE", value_name = "PATH")]
    api_token_file: Option<PathBuf>,
    /// Image downloads (GETs of ISOs, initrds, kernels, rootfs) in flight at most; past it, 503 with
    /// Retry-After. Each holds kernel socket buffers, about 2 MB on a busy link.
    #[arg(long, env = "BOOTSTREAM_MAX_DOWNLOADS", default_value_t = 4096)]
    max_downloads: usize,
    /// Largest object the Kubernetes API stores, in bytes of JSON (etcd's limit on a hub); a write
    /// whose object would be larger (a patch or an apply can build more than its body) gets 413.
    #[arg(long, env = "BOOTSTREAM_MAX_OBJECT_BYTES", value_name = "BYTES",
          default_value_t = crate::api::kube::limits::DEFAULT_MAX_OBJECT_BYTES)]
    max_object_bytes: usize,
    /// Seconds a client has to send a whole request head once it started (and, on connections
    /// served by hyper, to start the next one); then the connection is closed.
    #[arg(long, env = "BOOTSTREAM_HEADER_TIMEOUT", value_name = "SECONDS", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a client has to send a whole request body after its head (408 after); for a streamed
    /// upload (host logs), the longest pause between two of its pieces.
    #[arg(long, env = "BOOTSTREAM_BODY_TIMEOUT", value_name = "SECONDS", default_value_t = 10)]
    body_timeout: u64,
    /// Seconds an idle keep-alive connection is kept open.
    #[arg(long, env = "BOOTSTREAM_IDLE_TIMEOUT", value_name = "SECONDS", default_value_t = 75)]
    idle_timeout: u64,
    /// Seconds a response may wait for its client to read before the connection is closed (a
    /// stalled reader frees its download's place then).
    #[arg(long, env = "BOOTSTREAM_WRITE_TIMEOUT", value_name = "SECONDS", default_value_t = 60)]
    write_timeout: u64,
}

impl ServeArgs {
    /// The limits every connection of the listeners gets. Connections are capped below the
    /// process's open-files limit: past it `accept` fails (EMFILE) and the server can no longer open
    /// its database or base images either.
    fn server_config(&self) -> crate::http::server::ServerConfig {
        let secs = |s: u64| std::time::Duration::from_secs(s.max(1));
        let defaults = crate::http::server::ServerConfig::default();
        let max_connections = match open_files_limit() {
            Some(limit) => defaults.max_connections.min(limit.saturating_sub(RESERVED_DESCRIPTORS).max(64) as usize),
            None => defaults.max_connections,
        };
        crate::http::server::ServerConfig {
            header_timeout: secs(self.header_timeout),
            body_timeout: secs(self.body_timeout),
            idle_timeout: secs(self.idle_timeout),
            write_timeout: secs(self.write_timeout),
            max_connections,
            ..defaults
        }
    }
}

/// Descriptors kept for what is not a client connection: the database and its WAL, base images,
/// log uploads being written, connections to a Kubernetes API server and to spoke clusters.
const RESERVED_DESCRIPTORS: u64 = 512;

/// The soft open-files limit of this process.
fn open_files_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the rlimit it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then_some(lim.rlim_cur)
}

/// Raises the soft open-files limit to the hard limit, as a server holding one socket per client
/// needs (the default soft limit, often 1,024, is a few hundred BMCs and agents). Logs what the
/// limit is and how many connections it allows, so that an operator sees why a fleet is refused.
pub(super) fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    let before = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let before = lim.rlim_cur;
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                lim.rlim_cur = before;
            }
        }
        before
    };
    let connections = crate::http::server::ServerConfig::default()
        .max_connections
        .min(lim.rlim_cur.saturating_sub(RESERVED_DESCRIPTORS).max(64) as usize);
    tracing::info!(limit = lim.rlim_cur, before, hard = lim.rlim_max, connections, "open files limit");
    if connections < crate::http::server::ServerConfig::default().max_connections {
        tracing::warn!(
            "the open-files limit ({}) allows {connections} client connections at once; raise the hard limit \
             (LimitNOFILE= in a systemd unit, ulimit -Hn) for larger fleets",
            lim.rlim_cur
        );
    }
}

/// The image service every mode has: the OS image catalog, the discovery content built from the
/// store's InfraEnvs, and the listening socket.
struct ImageService<S: crate::store::Store> {
    images: Arc<crate::image::Images<S>>,
    catalog: Arc<Catalog>,
    agent_auth: crate::auth::AgentAuth,
    data_dir: PathBuf,
    base_url: String,
    listener: tokio::net::TcpListener,
    /// The HTTPS configuration of `listener`; None: plain HTTP.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The plain-HTTP listener for iPXE beside HTTPS, and its base URL.
    plain_http: Option<(tokio::net::TcpListener, String)>,
    /// Timeouts and limits of both listeners' connections.
    http: crate::http::server::ServerConfig,
}

async fn image_service<S: crate::store::Store>(
    args: &ServeArgs,
    store: S,
    shared_key: bool,
) -> anyhow::Result<ImageService<S>> {
    use anyhow::Context;
    anyhow::ensure!(
        (0.0..=0.5).contains(&args.poll_jitter),
        "--poll-jitter must be a fraction between 0 and 0.5, not {}",
        args.poll_jitter
    );
    create_data_dir(args)?;
    let data_dir = std::fs::canonicalize(&args.data_dir)?;
    let agent_auth = match &args.agent_auth_key {
        Some(path) => crate::auth::AgentAuth::load(path)?,
        None if shared_key => anyhow::bail!(
            "--agent-auth-key (BOOTSTREAM_AGENT_AUTH_KEY) is required on Kubernetes: the controller and every image \
             server must sign agents' tokens with the same key, mounted from one Secret"
        ),
        None => crate::auth::AgentAuth::load_or_create(&data_dir).context("agent authentication key")?,
    };
    let url_signer = if args.unsigned_image_urls {
        None
    } else {
        let signer = match &args.url_signing_key {
            Some(path) => crate::auth::urlsign::UrlSigner::from_files(path, &args.url_previous_keys)?,
            None if shared_key => anyhow::bail!(
                "--url-signing-key (BOOTSTREAM_URL_SIGNING_KEY) is required on Kubernetes: the controller and every \
                 image server must sign and check image URLs with the same key, mounted from one Secret (or pass \
                 --unsigned-image-urls to serve unsigned /byid/ URLs)"
            ),
            None => crate::auth::urlsign::UrlSigner::load_or_create(&data_dir, &args.url_previous_keys)?,
        };
        Some(Arc::new(signer))
    };
    let specs = if args.os_images.is_empty() {
        let path = ensure_sample_image(&data_dir)?;
        vec![OsImageSpec {
            version: crate::formats::sample::SAMPLE_VERSION.to_string(),
            arch: crate::formats::sample::SAMPLE_ARCH.to_string(),
            source: ImageSource::Path(path),
        }]
    } else {
        args.os_images.clone()
    };
    let catalog = Catalog::new(specs);
    let digests = Arc::new(DigestCache::open(data_dir.join("image-digests.json")));
    tokio::spawn(crate::image::catalog::load_all(catalog.clone(), data_dir.join("os-images"), digests));

    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            let cert = crate::http::tls::ReloadingCert::load(cert, key)?;
            let config = cert.server_config();
            cert.watch();
            Some(config)
        }
        _ => None,
    };
    let service_ca_cert_pem = match &args.service_ca_cert {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading --service-ca-cert {}", path.display()))?;
            anyhow::ensure!(
                pem.contains("-----BEGIN CERTIFICATE-----"),
                "--service-ca-cert {}: no PEM certificate in it",
                path.display()
            );
            Some(pem)
        }
        None => None,
    };
    let listener = crate::http::server::bind(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let base_url = args.base_url.clone().unwrap_or_else(|| format!("{scheme}://{addr}"));
    let base_url = base_url.trim_end_matches('/').to_string();
    let plain_http = match args.http_listen {
        Some(http_addr) => {
            let l = crate::http::server::bind(http_addr)
                .with_context(|| format!("listening on {http_addr} (--http-listen)"))?;
            let port = l.local_addr()?.port();
            let url = match &args.http_base_url {
                Some(u) => u.trim_end_matches('/').to_string(),
                None => plain_http_base_url(&base_url, port)?,
            };
            Some((l, url))
        }
        None => None,
    };
    let mut config = crate::image::ServiceConfig::new(&base_url, data_dir.clone());
    config.plain_http_base_url = plain_http.as_ref().map(|(_, url)| url.clone());
    config.service_ca_cert_pem = service_ca_cert_pem;
    config.agent_image = args.agent_image.clone();
    config.default_image_type = match args.iso_image_type {
        IsoImageType::FullIso => crate::resources::ImageType::FullIso,
        IsoImageType::MinimalIso => crate::resources::ImageType::MinimalIso,
    };
    config.ironic = crate::content::ironic::IronicDefaults {
        base_url: args.ironic_base_url.clone(),
        inspector_url: args.ironic_inspector_url.clone(),
        agent_image: args.ironic_agent_image.clone(),
        agent_image_arm: args.ironic_agent_image_arm.clone(),
    };
    config.agent_auth = Some(agent_auth.clone());
    config.url_signer = url_signer;
    let images = crate::image::Images::new(store, catalog.clone(), Arc::new(config));
    tokio::spawn(images.clone().follow_store_changes());
    let http = args.server_config();
    Ok(ImageService { images, catalog, agent_auth, data_dir, base_url, listener, tls, plain_http, http })
}

/// The plain-HTTP listener's URL for iPXE: the base URL's host, scheme http, the listener's port.
fn plain_http_base_url(base_url: &str, port: u16) -> anyhow::Result<String> {
    let uri: http::Uri = base_url.parse().map_err(|e| anyhow::anyhow!("--base-url {base_url:?}: {e}"))?;
    let host = uri.host().ok_or_else(|| anyhow::anyhow!("--base-url {base_url:?} has no host"))?;
    let path = uri.path().trim_end_matches('/');
    Ok(format!("http://{host}:{port}{path}"))
}

/// The host records, the agent API over them, and every controller: what `serve` runs embedded and
/// `controller` runs against a cluster. Returns the application to serve.
async fn hub<S: crate::store::Store>(
    args: &ServeArgs,
    svc: &ImageService<S>,
    records: crate::store::sqlite::SqliteStore,
    resources: Option<crate::store::sqlite::SqliteStore>,
    cluster: Option<Arc<crate::store::kube::ClusterUsage>>,
) -> anyhow::Result<Arc<crate::api::App<S>>> {
    use anyhow::Context;
    let store = svc.images.store.clone();
    // The controllers' counters, which `/metrics` reads.
    let controllers = Arc::new(crate::controllers::runtime::ControllerMetrics::default());
    let metrics = crate::api::metrics::Metrics::with_cluster(records.writer_stats(), controllers.clone(), cluster);
    let host_logs = Arc::new(crate::pool::logs::HostLogs::new(&svc.data_dir));
    let backend = crate::pool::Backend::load(
        records,
        Arc::new(crate::pool::SystemClock),
        crate::pool::BackendConfig { host_logs: Some(host_logs.clone()), ..Default::default() },
    )
    .await
    .context("loading host records")?;
    let agent_api = Arc::new(crate::api::agent::AgentApi {
        backend: backend.clone(),
        images: svc.images.clone(),
        auth: svc.agent_auth.clone(),
        logs: host_logs,
        poll_jitter: args.poll_jitter,
    });
    agent_api.restore_missing_agents().await.context("restoring the Agents of registered hosts")?;
    let hub = Arc::new(crate::controllers::Hub {
        agents: crate::controllers::agent::AgentContext {
            store: store.clone(),
            backend: backend.clone(),
            auth: svc.agent_auth.clone(),
            service_base_url: svc.base_url.clone(),
            service_ca_cert_pem: svc.images.config.service_ca_cert_pem.clone(),
            agent_image: args.agent_image.clone(),
            metal3: true,
            own_writes: Default::default(),
            url_signer: svc.images.config.url_signer.clone(),
        },
        clusters: crate::controllers::cluster::ClusterContext {
            store: store.clone(),
            backend: backend.clone(),
            service_base_url: svc.base_url.clone(),
            url_signer: svc.images.config.url_signer.clone(),
        },
    });
    let infraenvs = Arc::new(crate::controllers::runtime::WorkQueue::default());
    tokio::spawn(crate::controllers::run_infraenv_controller_with(
        svc.images.clone(),
        Some(backend.clone()),
        infraenvs.clone(),
        controllers.clone(),
    ));
    tokio::spawn(crate::controllers::run_host_controllers(
        hub,
        4,
        std::time::Duration::from_secs(10),
        controllers.clone(),
    ));
    let clock: Arc<dyn crate::pool::Clock> = Arc::new(crate::pool::SystemClock);
    tokio::spawn(crate::controllers::run_metal3_controllers(
        Arc::new(crate::controllers::metal3::bmac::BmacContext {
            store: store.clone(),
            clock: clock.clone(),
            converged: args.converged_flow,
            pause_provisioned: !args.no_pause_provisioned_bmhs,
            image_cooldown: std::time::Duration::from_secs(args.image_cooldown_seconds),
            url_signer: svc.images.config.url_signer.clone(),
        }),
        Arc::new(crate::controllers::metal3::ppi::PpiContext {
            store,
            clock,
            image_cooldown: std::time::Duration::from_secs(args.image_cooldown_seconds),
            url_signer: svc.images.config.url_signer.clone(),
        }),
        controllers,
    ));
    // The embedded resource API takes a bearer token; on Kubernetes the cluster's RBAC guards the
    // resources, and the controller's cluster-log downloads are not yet guarded (issue 7).
    let api_token = match &resources {
        Some(_) => {
            let path = args.api_token_file.clone().unwrap_or_else(|| svc.data_dir.join("api-token"));
            Some(Arc::from(crate::auth::load_or_create_api_token(&path).context("API token")?))
        }
        None => None,
    };
    let limits = crate::api::kube::limits::Limits { max_object_bytes: args.max_object_bytes };
    let kube = resources.map(|store| {
        crate::api::kube::KubeApi::with_limits(
            store,
            Arc::new(crate::api::EmbeddedHooks {
                images: svc.images.clone(),
                infraenvs: infraenvs.clone(),
                finalize_infraenvs: true,
            }),
            limits,
        )
    });
    Ok(Arc::new(crate::api::App {
        images: svc.images.clone(),
        kube,
        catalog: svc.catalog.clone(),
        metrics,
        agent_api: Some(agent_api),
        backend: Some(backend),
        api_token,
        downloads: crate::api::DownloadLimit::new(args.max_downloads),
    }))
}

/// Serves `app` on the service's socket until `stop` completes.
async fn run<S: crate::store::Store>(
    svc: ImageService<S>,
    app: Arc<crate::api::App<S>>,
    stop: impl Future<Output = ()> + Send + 'static,
    also_listening: Option<String>,
    api_elsewhere: Option<String>,
) {
    let addr = svc.listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let scheme = if svc.tls.is_some() { "https" } else { "http" };
    // Scripts and tests read these lines to learn the addresses (useful with --listen ...:0).
    println!(
        "bootstream listening on {scheme}://{addr} (base URL {}, data dir {})",
        svc.base_url,
        svc.data_dir.display()
    );
    let stop = futures_util::FutureExt::shared(Box::pin(stop));
    let plain = svc.plain_http.map(|(listener, url)| {
        let http_addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        println!("bootstream listening on http://{http_addr} for iPXE (base URL {url})");
        let gate = Arc::new(crate::http::Restricted {
            inner: app.clone(),
            allow: crate::api::route::served_over_plain_http,
            refusal: crate::api::PLAIN_HTTP_REFUSAL.into(),
        });
        tokio::spawn(crate::http::server::serve(listener, gate, svc.http.clone(), stop.clone()))
    });
    use std::io::Write;
    if let Some(line) = also_listening {
        // Not `println!`: a reader that took the first line and closed the pipe must not stop the server.
        let _ = writeln!(std::io::stdout(), "{line}");
    }
    let _ = std::io::stdout().flush();
    let config = crate::http::server::ServerConfig { tls: svc.tls, ..svc.http };
    // The accept loop runs on a runtime worker, not on this thread (`block_on`): a connection spawned
    // from a worker runs next on that worker, where one spawned from here waits for a worker to be
    // woken. That hand-off was on every new connection's time to first byte.
    let main = match api_elsewhere {
        // The API has its own HTTPS listener: this plain one refuses what takes the API token,
        // with `api_elsewhere` saying where to go.
        Some(refusal) => {
            let gate = Arc::new(crate::http::Restricted {
                inner: app,
                allow: crate::api::route::served_beside_the_api_listener,
                refusal: refusal.into(),
            });
            tokio::spawn(crate::http::server::serve(svc.listener, gate, config, stop))
        }
        None => tokio::spawn(crate::http::server::serve(svc.listener, app, config, stop)),
    };
    // A panic there ends the process as it did on this thread.
    if let Err(e) = main.await
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
    if let Some(plain) = plain {
        let _ = plain.await;
    }
    tracing::info!("shutting down");
}

pub(super) async fn serve(cmd: ServeCommand) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let args = &cmd.args;
    if cmd.kube {
        return serve_from_cluster(args).await;
    }
    create_data_dir(args)?;
    let store = crate::store::sqlite::SqliteStore::open(&args.data_dir.join("state.db"))?;
    let svc = image_service(args, store.clone(), false).await?;
    let app = hub(args, &svc, store.clone(), Some(store), None).await?;
    if let Some(api) = &app.kube {
        api.ensure_default_namespace().await.context("creating the default namespace")?;
    }
    let stop = futures_util::FutureExt::shared(Box::pin(shutdown_signal()));
    let token = app.api_token.clone().unwrap_or_default();
    let kubeconfig = svc.data_dir.join("kubeconfig");
    let mut api_line = None;
    let mut api_elsewhere = None;
    if args.tls_cert.is_some() {
        let ca = match &args.tls_cert {
            Some(cert) => last_certificate(cert)?,
            None => None,
        };
        write_kubeconfig(&kubeconfig, &svc.base_url, ca.as_deref(), &token)?;
    } else {
        // kubectl sends its token only over TLS: the API gets an HTTPS listener of its own.
        let (cert, key) = ensure_api_certificate(&svc.data_dir.join("api-tls"), args)?;
        let tls = crate::http::tls::ReloadingCert::load(&cert, &key)?.server_config();
        let addr = args.api_listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener =
            crate::http::server::bind(addr).with_context(|| format!("listening on {addr} (--api-listen)"))?;
        let local = listener.local_addr()?;
        let server = format!("https://{local}");
        write_kubeconfig(&kubeconfig, &server, last_certificate(&cert)?.as_deref(), &token)?;
        api_line = Some(format!(
            "bootstream listening on {server} for the Kubernetes API (KUBECONFIG={})",
            kubeconfig.display()
        ));
        // What takes the API token is served here only; the main (plain) listener refuses it from
        // the head, before any token is compared.
        let gate = Arc::new(crate::http::Restricted {
            inner: app.clone(),
            allow: crate::api::route::takes_api_token,
            refusal: "404 page not found: this port serves only the Kubernetes API".into(),
        });
        let config = crate::http::server::ServerConfig { tls: Some(tls), ..svc.http.clone() };
        tokio::spawn(crate::http::server::serve(listener, gate, config, stop.clone()));
        api_elsewhere = Some(format!(
            "404 page not found: the Kubernetes API (and all that takes the API token) is not served over plain \
             HTTP; it is at {server}: use the kubeconfig `bootstream serve` writes, DATA_DIR/kubeconfig \
             (KUBECONFIG=DATA_DIR/kubeconfig kubectl ..., or bootstream get/apply --kubeconfig DATA_DIR/kubeconfig)"
        ));
    }
    run(svc, app, stop, api_line, api_elsewhere).await;
    Ok(ExitCode::SUCCESS)
}

/// Writes a kubeconfig for this server's Kubernetes API (`KUBECONFIG=DATA_DIR/kubeconfig kubectl get
/// infraenvs -A`), readable by its owner only: it holds the API token. Rewritten at every start, so
/// that it follows the address and the certificate.
pub(super) fn write_kubeconfig(
    path: &std::path::Path,
    server: &str,
    ca_pem: Option<&str>,
    token: &str,
) -> anyhow::Result<()> {
    use anyhow::Context;
    use base64::Engine;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let ca = match ca_pem {
        Some(pem) => {
            format!("    certificate-authority-data: {}\n", base64::engine::general_purpose::STANDARD.encode(pem))
        }
        None => String::new(),
    };
    let text = format!(
        "# Written by `bootstream serve` at every start: KUBECONFIG={} kubectl get infraenvs -A\n\
         apiVersion: v1\nkind: Config\nclusters:\n- name: bootstream\n  cluster:\n    server: {server}\n{ca}\
         users:\n- name: bootstream-admin\n  user:\n    token: {token}\n\
         contexts:\n- name: bootstream\n  context:\n    cluster: bootstream\n    user: bootstream-admin\n    namespace: default\n\
         current-context: bootstream\n",
        path.display()
    );
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    f.write_all(text.as_bytes()).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The last certificate of a PEM chain: the one kubectl is told to trust (a self-signed leaf itself,
/// or the root the chain ends with).
fn last_certificate(path: &std::path::Path) -> anyhow::Result<Option<String>> {
    use anyhow::Context;
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(pem::parse_many(&pem)
        .ok()
        .and_then(|certs| certs.into_iter().rfind(|p| p.tag() == "CERTIFICATE"))
        .map(|p| pem::encode(&p)))
}

/// The self-signed certificate and key of the Kubernetes API's listener in `dir`, made on first
/// start for the loopback names, the --api-listen address and the --base-url host.
fn ensure_api_certificate(dir: &std::path::Path, args: &ServeArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    if cert_path.exists() && key_path.exists() {
        return Ok((cert_path, key_path));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string(), "::1".to_string()];
    if let Some(addr) = args.api_listen
        && !addr.ip().is_unspecified()
    {
        names.push(addr.ip().to_string());
    }
    if let Some(host) =
        args.base_url.as_deref().and_then(|u| u.parse::<http::Uri>().ok()).and_then(|u| u.host().map(str::to_string))
    {
        names.push(host.trim_matches(|c| c == '[' || c == ']').to_string());
    }
    names.sort();
    names.dedup();
    let certified = rcgen::generate_simple_self_signed(names).context("generating the API's certificate")?;
    let key = certified.signing_key.serialize_pem();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key_path)
        .with_context(|| format!("writing {}", key_path.display()))?;
    f.write_all(key.as_bytes()).with_context(|| format!("writing {}", key_path.display()))?;
    std::fs::write(&cert_path, certified.cert.pem()).with_context(|| format!("writing {}", cert_path.display()))?;
    Ok((cert_path, key_path))
}

/// Creates the data directory, or tightens the one there is. It holds every tenant's pull secret
/// (`state.db`), the signing keys, the API token and the admin credentials clusters uploaded: it is
/// 0700 and everything in it 0600 (directories 0700), whatever umask or earlier version made it.
/// What was looser is tightened and said in one log line.
fn create_data_dir(args: &ServeArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::os::unix::fs::DirBuilderExt;
    let root = &args.data_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .with_context(|| format!("creating data directory {}", root.display()))?;
    let walk = tighten_data_dir(root);
    let name = |p: &Path| match p.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => p.display().to_string(),
    };
    if !walk.tightened.is_empty() {
        const SHOWN: usize = 8;
        let mut list: Vec<String> =
            walk.tightened.iter().take(SHOWN).map(|(p, was)| format!("{} (was {was:04o})", name(p))).collect();
        if walk.tightened.len() > SHOWN {
            list.push(format!("and {} more", walk.tightened.len() - SHOWN));
        }
        tracing::warn!(
            data_dir = %root.display(),
            "other local users could read the data directory: tightened {} entries to 0700 (directories) and 0600 \
             (files): {}",
            walk.tightened.len(),
            list.join(", ")
        );
    }
    if !walk.failed.is_empty() {
        let list: Vec<String> = walk.failed.iter().take(8).map(|(p, e)| format!("{}: {e}", name(p))).collect();
        tracing::warn!(
            data_dir = %root.display(),
            "could not tighten the permissions of {} entries of the data directory (not this user's?): {}",
            walk.failed.len(),
            list.join(", ")
        );
    }
    if walk.stopped_early {
        tracing::warn!(
            data_dir = %root.display(),
            "the data directory holds more than {DATA_DIR_MAX_ENTRIES} entries; permissions were checked on the first ones only"
        );
    }
    Ok(())
}

/// Most entries of the data directory whose permissions are checked at start. It holds a few dozen
/// (the databases, keys, OS images, a directory of host logs per cluster); each check is one open
/// and fstat, never a read of the file.
const DATA_DIR_MAX_ENTRIES: usize = 100_000;

/// What [`tighten_data_dir`] did.
#[derive(Default)]
struct Tightened {
    /// Each entry whose mode was changed, with the permission bits it had.
    tightened: Vec<(PathBuf, u32)>,
    failed: Vec<(PathBuf, std::io::Error)>,
    /// [`DATA_DIR_MAX_ENTRIES`] were reached.
    stopped_early: bool,
}

/// Sets `root` and every directory under it to 0700 and every regular file to 0600. Symbolic links
/// are neither followed nor changed (chmod would change what they point to, which may be outside
/// the data directory); sockets and FIFOs are left alone. Each entry is opened with `O_NOFOLLOW`
/// and changed through its descriptor, so a link put in an entry's place is refused, not followed.
fn tighten_data_dir(root: &Path) -> Tightened {
    let mut out = Tightened::default();
    let mut dirs = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = dirs.pop() {
        match tighten(&dir, 0o700) {
            Ok(Some(was)) => out.tightened.push((dir.clone(), was)),
            Ok(None) => {}
            Err(e) => {
                out.failed.push((dir, e));
                continue;
            }
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                out.failed.push((dir, e));
                continue;
            }
        };
        for entry in entries {
            seen += 1;
            if seen > DATA_DIR_MAX_ENTRIES {
                out.stopped_early = true;
                return out;
            }
            let Ok(entry) = entry else { continue };
            // The type of the entry itself: a symbolic link is a link here, not its target.
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                match tighten(&entry.path(), 0o600) {
                    Ok(Some(was)) => out.tightened.push((entry.path(), was)),
                    Ok(None) => {}
                    Err(e) => out.failed.push((entry.path(), e)),
                }
            }
        }
    }
    out
}

/// Sets the permission bits of `path` (not a symbolic link) to `mode`; the bits it had when it
/// changed them, None when they were already `mode`.
fn tighten(path: &Path, mode: u32) -> std::io::Result<Option<u32>> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    // Opening for reading neither changes nor reads the file (O_NONBLOCK: a FIFO put in its place
    // does not wait for a writer).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let was = file.metadata()?.permissions().mode() & 0o7777;
    if was == mode {
        return Ok(None);
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(Some(was))
}

/// Makes every file and directory this process creates its user's only (umask 077): SQLite makes
/// `state.db-wal` and `-shm` itself, and they hold what the database holds.
pub(super) fn private_umask() {
    // SAFETY: umask only sets this process's file mode creation mask; it cannot fail.
    unsafe { libc::umask(0o077) };
}

/// How long the first list of every watched kind may take before starting is given up.
const CLUSTER_SYNC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The cluster store, once its watches have listed `kinds`; an error (and the process exits, so that
/// Kubernetes restarts it and shows why) rather than waiting forever when the API server cannot be
/// reached or the service account may not list them.
async fn watch_cluster(client: kube::Client, kinds: &[Kind]) -> anyhow::Result<crate::store::kube::KubeStore> {
    tokio::time::timeout(CLUSTER_SYNC_TIMEOUT, crate::store::kube::KubeStore::start(client, kinds)).await.map_err(|_| {
        anyhow::anyhow!(
            "could not list {} from the cluster within {} s; the warnings above say why (API server unreachable, or the \
             service account lacks list/watch: see deploy/rbac.yaml)",
            kinds.iter().map(|k| k.plural()).collect::<Vec<_>>().join(", "),
            CLUSTER_SYNC_TIMEOUT.as_secs()
        )
    })
}

async fn kube_client(args: &ServeArgs) -> anyhow::Result<kube::Client> {
    use anyhow::Context;
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None => {
            kube::Config::infer().await.context("no --kubeconfig, no in-cluster configuration, no ~/.kube/config")?
        }
    };
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

/// `serve --kube`: an image server replica. InfraEnvs, NMStateConfigs and the watched Secrets are
/// read from the watches' cache (other Secrets with a GET); nothing is written anywhere but the OS
/// image cache, so any number of replicas can run behind one Service.
async fn serve_from_cluster(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let client = kube_client(args).await?;
    // NMStateConfigs too: the image cache keeps each namespace's parsed list until one changes. And
    // the Secrets the controller labelled for watching (pull secrets): read at every image request.
    let store = watch_cluster(client, &[Kind::InfraEnv, Kind::NMStateConfig, Kind::Secret]).await?;
    let svc = image_service(args, store, true).await?;
    let app = Arc::new(crate::api::App {
        images: svc.images.clone(),
        kube: None,
        catalog: svc.catalog.clone(),
        // No controllers here: their counters stay empty.
        metrics: crate::api::metrics::Metrics::with_cluster(
            Default::default(),
            Default::default(),
            Some(svc.images.store.usage()),
        ),
        agent_api: None,
        backend: None,
        api_token: None,
        downloads: crate::api::DownloadLimit::new(args.max_downloads),
    });
    run(svc, app, shutdown_signal(), None, None).await;
    Ok(ExitCode::SUCCESS)
}

/// `controller`: the controllers, the agent API and the host records, against a cluster, while this
/// process holds the Lease.
pub(super) async fn controller(cmd: ControllerCommand) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let args = &cmd.args;
    // Before anything else: the controller's own writes (and every user's) wait for the webhook.
    let webhook = start_webhook(&cmd)?;
    let client = kube_client(args).await?;
    let store = watch_cluster(client, &Kind::ALL).await?;
    // The configuration is checked before the Lease is taken (keys, certificates, the data folder, the
    // listen address, which is bound here but served only by the leader): a controller that cannot
    // start must not hold the Lease, or the next one waits for it to expire. Nothing here writes to
    // the cluster; a standby starts downloading the base OS images into its own data folder, which
    // it would do first anyway once it leads.
    let svc = image_service(args, store.clone(), true).await?;
    let identity = cmd.identity.clone().unwrap_or_else(|| format!("bootstream-{}", uuid::Uuid::new_v4()));
    let lease = crate::controllers::leader::LeaseConfig::new(&cmd.lease_namespace, &cmd.lease_name, &identity);
    // Nothing is served or written until this process leads: the host records are one leader's.
    tokio::select! {
        taken = crate::controllers::leader::acquire(&store, &lease) => taken?,
        _ = shutdown_signal() => return Ok(ExitCode::SUCCESS),
    }
    // What can still fail (the host records, restoring Agents) gives the Lease back before the
    // process exits.
    let started = async {
        let path = args.data_dir.join("hosts.db");
        let records = crate::store::sqlite::SqliteStore::open(&path)
            .with_context(|| format!("opening the host records {}", path.display()))?;
        hub(args, &svc, records, None, Some(store.usage())).await
    };
    let app = match started.await {
        Ok(app) => app,
        Err(e) => {
            release_lease(&store, &lease).await;
            return Err(e);
        }
    };
    if let Some(webhook) = &webhook {
        webhook.count_into(app.metrics.clone());
    }
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<String>();
    let holder = store.clone();
    let held = lease.clone();
    tokio::spawn(async move {
        let why = crate::controllers::leader::hold(&holder, &held).await;
        let _ = lost_tx.send(why);
    });
    let lost = Arc::new(std::sync::Mutex::new(None));
    let lost_reason = lost.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown_signal() => {}
            why = lost_rx => {
                *lost_reason.locked() = why.ok();
            }
        }
    };
    run(svc, app, stop, None, None).await;
    if let Some(why) = lost.locked().take() {
        anyhow::bail!("lost the leadership ({why}); stopping so that only the leader writes");
    }
    release_lease(&store, &lease).await;
    Ok(ExitCode::SUCCESS)
}

/// Gives the Lease up as this process stops, so that the next leader need not wait for it to expire.
async fn release_lease(store: &crate::store::kube::KubeStore, lease: &crate::controllers::leader::LeaseConfig) {
    if let Err(e) = crate::controllers::leader::release(store, lease).await {
        tracing::warn!(error = %e, "could not release the Lease; the next leader waits for it to expire");
    }
}

/// The webhook's own HTTPS listener (`--webhook-listen`), serving admission reviews until the
/// process ends. It needs nothing the controller builds, so it answers from the start, and in a
/// standby as in the leader: the decision is a function of the review alone.
fn start_webhook(cmd: &ControllerCommand) -> anyhow::Result<Option<Arc<crate::api::admission::Webhook>>> {
    use anyhow::Context;
    let (Some(addr), Some(cert), Some(key)) = (cmd.webhook_listen, &cmd.webhook_tls_cert, &cmd.webhook_tls_key) else {
        return Ok(None);
    };
    let cert = crate::http::tls::ReloadingCert::load(cert, key).context("--webhook-tls-cert, --webhook-tls-key")?;
    let tls = cert.server_config();
    cert.watch();
    let listener =
        crate::http::server::bind(addr).with_context(|| format!("listening on {addr} (--webhook-listen)"))?;
    println!("bootstream listening on https://{} for admission reviews", listener.local_addr()?);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let webhook = crate::api::admission::Webhook::new();
    let config = crate::http::server::ServerConfig { tls: Some(tls), ..cmd.args.server_config() };
    tokio::spawn(crate::http::server::serve(listener, webhook.clone(), config, std::future::pending::<()>()));
    Ok(Some(webhook))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("signal handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Writes the sample image into the data directory unless an identical one is there (rewriting an
/// unchanged file would only invalidate its cached checksum).
fn ensure_sample_image(data_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = data_dir.join("sample");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!(
        "rhcos-sample-{}-{}.iso",
        crate::formats::sample::SAMPLE_VERSION,
        crate::formats::sample::SAMPLE_ARCH
    ));
    let fresh = dir.join(".sample.iso.new");
    crate::formats::sample::write_sample_iso(&fresh)?;
    let same = std::fs::read(&path).ok() == Some(std::fs::read(&fresh)?);
    if same {
        std::fs::remove_file(&fresh)?;
    } else {
        std::fs::rename(&fresh, &path)?;
        tracing::info!(path = %path.display(), "generated the sample OS image");
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: super::ServeArgs,
    }

    fn converged(flags: &[&str]) -> bool {
        Serve::try_parse_from([&["serve"][..], flags].concat()).expect("flags parse").args.converged_flow
    }

    /// The converged flow is on by default (assisted-service's `ALLOW_CONVERGED_FLOW` default);
    /// `--converged-flow=false` turns it off, and the bare flag, as before, keeps it on.
    #[test]
    fn the_converged_flow_is_on_unless_turned_off() {
        assert!(converged(&[]));
        assert!(converged(&["--converged-flow"]));
        assert!(converged(&["--converged-flow=true"]));
        assert!(!converged(&["--converged-flow=false"]));
        assert!(Serve::try_parse_from(["serve", "--converged-flow=maybe"]).is_err());
    }
}
