//! The HTTP API: routes compatible with assisted-image-service (spec-images §7) and with the
//! assisted-service downloads a host uses (spec-controllers §8.1), plus a Kubernetes-style REST API for
//! the resources of the embedded store (what `bootstream apply/get/delete` talk to).

pub mod agent;
pub mod metrics;

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::api::metrics::Metrics;
use crate::auth::AGENT_AUTH_HEADER;
use crate::controllers::infraenv;
use crate::controllers::runtime::{Action, Outcome, WorkQueue};
use crate::http::query::query_map;
use crate::http::respond::respond;
use crate::http::{Admission, Body, Completion, Handler, RouteLabel, text};
use crate::image::catalog::Catalog;
use crate::image::{BootArtifact, ImageError, Images};
use crate::plan::Representation;
use crate::resources::{ImageType, InfraEnv, Kind, validate_document};
use crate::store::sqlite::{NewObject, SqliteStore};
use crate::store::{Store, StoreError};

/// The HTTP application over a [`Store`]. Embedded, it has everything. On Kubernetes, the controller
/// has the agent API and host records but no resource API (users use kubectl), and an image server
/// replica has only the image routes.
pub struct App<S: Store> {
    pub images: Arc<Images<S>>,
    /// The store behind the Kubernetes-style resource API; None where the resources live in a cluster.
    pub resources: Option<SqliteStore>,
    pub catalog: Arc<Catalog>,
    pub metrics: Arc<Metrics>,
    /// The agent API and the host records, where this process keeps them.
    pub agent_api: Option<Arc<crate::api::agent::AgentApi<S>>>,
    pub backend: Option<Arc<crate::pool::Backend>>,
    /// The InfraEnv controller's queue, where it runs in this process: the resource API queues the
    /// InfraEnvs it writes and answers once the controller reconciled them.
    pub infraenvs: Option<Arc<WorkQueue>>,
    /// The bearer token the resource API and the cluster-log downloads require; None: no such check
    /// (the resources live in a cluster, whose RBAC applies).
    pub api_token: Option<Arc<str>>,
    /// Image downloads in flight at most; past it, 503 with `Retry-After`.
    pub downloads: DownloadLimit,
}

/// How many image downloads may be in flight at once. Each holds kernel socket buffers (about 2 MB on
/// a busy link) and a file's page cache: past a limit the machine is better off telling clients to
/// come back (BMCs and iPXE retry) than slowing every download down.
#[derive(Clone)]
pub struct DownloadLimit {
    permits: Arc<tokio::sync::Semaphore>,
    max: usize,
}

impl DownloadLimit {
    /// Seconds a refused client is asked to wait.
    pub const RETRY_AFTER_SECONDS: u32 = 10;

    pub fn new(max: usize) -> DownloadLimit {
        DownloadLimit { permits: Arc::new(tokio::sync::Semaphore::new(max)), max }
    }
}

/// Largest resource API document (a request body), kube-apiserver's own limit.
const MAX_DOCUMENT_BYTES: usize = 3 << 20;
/// Largest agent API call: an inventory step reply of a host with hundreds of disks and NICs is a
/// few hundred KiB.
const MAX_AGENT_CALL_BYTES: usize = 2 << 20;
/// What a route that takes no body may be sent anyway (read and ignored): as much as a head.
const MAX_UNUSED_BODY_BYTES: usize = 16 << 10;

/// Held by a download's response until its last byte is written or the client goes away.
#[derive(Clone)]
struct DownloadPermit(#[allow(dead_code)] Arc<tokio::sync::OwnedSemaphorePermit>);

/// Whether `route` (a route label) serves image bytes: what the download limit counts.
fn is_download_route(route: &str) -> bool {
    route.starts_with("/images/") || route.starts_with("/by") || route.starts_with("/boot-artifacts/")
}

/// The answer of an image server replica to what only the controller serves.
fn controller_only() -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        "this image server has no host records: the agent API, host logs and per-host iPXE answers are served by `bootstream controller`",
    )
}

impl<S: Store> Handler for App<S> {
    async fn handle(self: Arc<Self>, req: Request<Bytes>) -> Response<Body> {
        let route = route_label(req.uri().path());
        self.metrics.started(route);
        // Only GETs send bodies worth limiting; HEAD and validators stay cheap.
        let permit = if req.method() == Method::GET && is_download_route(route) {
            match self.downloads.permits.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let mut r = text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!(
                            "{} image downloads are in progress, the most this server takes; retry in {} s",
                            self.downloads.max,
                            DownloadLimit::RETRY_AFTER_SECONDS
                        ),
                    );
                    r.headers_mut().insert(header::RETRY_AFTER, DownloadLimit::RETRY_AFTER_SECONDS.into());
                    r.extensions_mut().insert(RouteLabel(route));
                    return r;
                }
            }
        } else {
            None
        };
        let mut resp = self.route(req).await;
        resp.extensions_mut().insert(RouteLabel(route));
        // The permit goes with a response that streams an image, and is released when it is written.
        if let Some(p) = permit
            && matches!(resp.body(), Body::Plan(_))
        {
            resp.extensions_mut().insert(DownloadPermit(Arc::new(p)));
        }
        resp
    }

    /// Authenticates the routes that take bodies from the head, and bounds each route's body: a
    /// client without the token a route needs is answered before it sends a byte of body.
    fn admit(&self, head: &http::request::Parts) -> Admission {
        let path = head.uri.path();
        let route = route_label(path);
        let refuse = |mut resp: Response<Body>| {
            // Reported as answered like any other response (its completion ends this).
            self.metrics.started(route);
            resp.extensions_mut().insert(RouteLabel(route));
            Admission::Refuse(resp)
        };
        if route == "/apis" {
            return match self.api_refusal(&head.headers) {
                Some(refused) => refuse(refused),
                // Where the resources live in a cluster there is no resource API to send them to.
                None if self.resources.is_none() => Admission::Body { max_bytes: MAX_UNUSED_BODY_BYTES },
                None => Admission::Body { max_bytes: MAX_DOCUMENT_BYTES },
            };
        }
        let Some(agent_api) = &self.agent_api else {
            return Admission::Body { max_bytes: MAX_UNUSED_BODY_BYTES };
        };
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segs.as_slice() {
            ["api", "assisted-install", "v2", "infra-envs", infra_env_id, "hosts", ..] => {
                match agent_api.token_refusal(&head.headers, infra_env_id) {
                    Some(refused) => refuse(refused),
                    None => Admission::Body { max_bytes: MAX_AGENT_CALL_BYTES },
                }
            }
            ["api", "assisted-install", "v2", "clusters", _, "logs"] if head.method == Method::POST => {
                // The InfraEnv the logs are sent for is in the query. Without one the handler
                // answers 400, reading nothing; with one, the token must be that InfraEnv's.
                let infra_env_id = query_map(&head.uri).remove("infra_env_id").unwrap_or_default();
                if infra_env_id.is_empty() && head.headers.contains_key(AGENT_AUTH_HEADER) {
                    return Admission::Upload;
                }
                match agent_api.token_refusal(&head.headers, &infra_env_id) {
                    Some(refused) => refuse(refused),
                    None => Admission::Upload,
                }
            }
            _ => Admission::Body { max_bytes: MAX_UNUSED_BODY_BYTES },
        }
    }

    async fn handle_upload(
        self: Arc<Self>,
        head: http::request::Parts,
        body: crate::http::UploadBody,
    ) -> Response<Body> {
        let route = route_label(head.uri.path());
        self.metrics.started(route);
        let cluster_id = logs_cluster(head.uri.path()).unwrap_or_default();
        let mut resp = match &self.agent_api {
            Some(api) => api.upload_logs(&head, &cluster_id, body).await,
            None => controller_only(),
        };
        resp.extensions_mut().insert(RouteLabel(route));
        resp
    }

    fn completed(&self, c: Completion) {
        if !c.complete {
            tracing::info!(route = c.route, status = %c.status, sent = c.body_bytes, "response not completed");
        }
        self.metrics.completed(&c);
    }
}

/// The cluster id of a `/api/assisted-install/v2/clusters/{cluster_id}/logs` path.
fn logs_cluster(path: &str) -> Option<String> {
    match path.trim_start_matches('/').split('/').collect::<Vec<_>>().as_slice() {
        ["api", "assisted-install", "v2", "clusters", id, "logs"] => Some(id.to_string()),
        _ => None,
    }
}

/// Bounded route names for metrics (never the raw path: ids would explode label cardinality).
fn route_label(path: &str) -> &'static str {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["health"] => "/health",
        ["live"] => "/live",
        ["ready"] => "/ready",
        ["metrics"] => "/metrics",
        ["api", "assisted-install", "v2", "infra-envs", _, "hosts"] => "/v2/infra-envs/:id/hosts",
        ["api", "assisted-install", "v2", "infra-envs", _, "hosts", _] => "/v2/infra-envs/:id/hosts/:host",
        ["api", "assisted-install", "v2", "infra-envs", _, "hosts", _, "instructions"] => {
            "/v2/infra-envs/:id/hosts/:host/instructions"
        }
        ["api", "assisted-install", "v2", "infra-envs", _, "hosts", _, "progress"] => {
            "/v2/infra-envs/:id/hosts/:host/progress"
        }
        ["api", "assisted-install", "v2", "clusters", _, "logs"] => "/v2/clusters/:id/logs",
        ["images", _] => "/images/:imageID",
        ["images", _, "pxe-initrd"] => "/images/:imageID/pxe-initrd",
        ["images", _, "s390x-initrd-addrsize"] => "/images/:imageID/s390x-initrd-addrsize",
        ["boot-artifacts", _, _, "rootfs.img"] => "/boot-artifacts/rootfs",
        ["byid", ..] => "/byid/:token",
        ["byapikey", ..] => "/byapikey/:token",
        ["bytoken", ..] => "/bytoken/:token",
        ["boot-artifacts", "kernel"] => "/boot-artifacts/kernel",
        ["boot-artifacts", "rootfs"] => "/boot-artifacts/rootfs",
        ["api", "assisted-install", "v2", "infra-envs", _, "downloads", "files"] => {
            "/v2/infra-envs/:id/downloads/files"
        }
        ["apis", ..] | ["api", "v1", ..] => "/apis",
        _ => "other",
    }
}

/// What the plain-HTTP listener beside HTTPS serves: what iPXE fetches (its script, the kernel, the
/// PXE initrd) and the rootfs the booted initramfs fetches, as assisted-image-service's HTTP port
/// serves only `/pxe-initrd` (spec-images §7.1); plus health checks. ISOs, Ignition, the agent API
/// and the resource API carry secrets or take writes and are served over HTTPS only.
pub fn served_over_plain_http(uri: &http::Uri) -> bool {
    match route_label(uri.path()) {
        "/health" | "/live" | "/ready" => true,
        "/images/:imageID/pxe-initrd" | "/boot-artifacts/kernel" | "/boot-artifacts/rootfs" => true,
        "/v2/infra-envs/:id/downloads/files" => query_map(uri).get("file_name").is_some_and(|f| f == "ipxe-script"),
        _ => false,
    }
}

/// The plain-HTTP listener's answer to anything else.
pub const PLAIN_HTTP_REFUSAL: &str =
    "404 page not found: this port serves only iPXE scripts, kernels, PXE initrds and rootfs images; use HTTPS";

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found")
}

fn image_error(e: &ImageError) -> Response<Body> {
    text(e.http_status(), e.to_string())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

impl<S: Store> App<S> {
    async fn route(&self, req: Request<Bytes>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        if let Some(api) = &self.agent_api {
            if let Some(resp) = api.handle(&req, &segs).await {
                return resp;
            }
        } else if segs.starts_with(&["api", "assisted-install", "v2", "infra-envs"]) && segs.get(5) == Some(&"hosts") {
            return controller_only();
        }
        if let ["api", "assisted-install", "v2", "clusters", cluster_id, "logs"] = segs.as_slice()
            && (req.method() == Method::GET || req.method() == Method::HEAD)
        {
            if let Some(refused) = self.logs_refusal(&req, cluster_id) {
                return refused;
            }
            return self.download_logs(&req, cluster_id).await;
        }
        let image_route =
            matches!(segs.first(), Some(&("images" | "byid" | "byapikey" | "bytoken" | "boot-artifacts")))
                || segs.starts_with(&["api", "assisted-install"]);
        if image_route && req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("method {} not allowed", req.method()));
            r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        match segs.as_slice() {
            ["live"] => text(StatusCode::OK, "ok"),
            ["health"] | ["ready"] => {
                // Ready once every OS image has finished loading, successfully or not; the body says
                // which images are served and why the others are not.
                let status = if self.catalog.is_settled() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                text(status, self.catalog.report())
            }
            ["metrics"] => {
                let hosts = match &self.backend {
                    Some(backend) => backend.count_by_status().await,
                    None => Vec::new(),
                };
                let body = self.metrics.render(&self.catalog, &hosts);
                let mut r = text(StatusCode::OK, body);
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                );
                r
            }
            ["images", id] => {
                if let Some(refused) = self.image_refusal(&req, id) {
                    return refused;
                }
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "'version' parameter required");
                };
                let arch = q.get("arch").filter(|a| !a.is_empty()).map(String::as_str).unwrap_or("x86_64");
                match q.get("type").map(String::as_str) {
                    Some("full-iso") => self.iso(&req, id, version, arch, ImageType::FullIso).await,
                    Some("minimal-iso") => self.iso(&req, id, version, arch, ImageType::MinimalIso).await,
                    Some(t @ "disconnected-iso") => text(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "type '{t}' is not supported by this bootstream version (supported: full-iso, minimal-iso)"
                        ),
                    ),
                    Some(t) => text(StatusCode::BAD_REQUEST, format!("invalid value '{t}' for parameter 'type'")),
                    None => text(StatusCode::BAD_REQUEST, "'type' parameter required"),
                }
            }
            ["byid", id, version, arch, file] => {
                if let Some(refused) = self.image_refusal(&req, id) {
                    return refused;
                }
                self.iso_file(&req, id, version, arch, file).await
            }
            [route @ ("byapikey" | "bytoken"), token, version, arch, file] => {
                let Some(signer) = &self.images.config.url_signer else {
                    return text(
                        StatusCode::NOT_FOUND,
                        format!("/{route}/ URLs are not served: this server's image URLs are unsigned (/byid/)"),
                    );
                };
                let token = percent_encoding::percent_decode_str(token).decode_utf8_lossy();
                match signer.verify(&token, std::time::SystemTime::now()) {
                    Ok(claims) => self.iso_file(&req, &claims.infra_env_id, version, arch, file).await,
                    Err(e) => text(e.http_status(), e.to_string()),
                }
            }
            ["images", id, "pxe-initrd"] => {
                if let Some(refused) = self.image_refusal(&req, id) {
                    return refused;
                }
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "'version' parameter required for initrd download");
                };
                let arch = q.get("arch").filter(|a| !a.is_empty()).map(String::as_str).unwrap_or("x86_64");
                self.pxe_initrd(&req, id, version, arch).await
            }
            ["images", id, "s390x-initrd-addrsize"] => {
                if let Some(refused) = self.image_refusal(&req, id) {
                    return refused;
                }
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "'version' parameter required for initrd download");
                };
                let result = async {
                    let base = self.catalog.lookup(version, "s390x")?;
                    let (ie, content, base) = self.image_of(id, Some(base)).await?;
                    self.images.initrd_addrsize(&ie, &base, &content)
                }
                .await;
                self.represent(&req, result)
            }
            // The rootfs URL minimal ISOs carry (no query string: see Images::minimal_rootfs_url).
            ["boot-artifacts", version, arch, "rootfs.img"] => match self.catalog.lookup(version, arch) {
                Ok(base) => self.represent(&req, self.images.boot_artifact(&base, BootArtifact::Rootfs)),
                Err(e) => text(e.http_status(), e.to_string()),
            },
            ["boot-artifacts", artifact] => {
                let which = match *artifact {
                    "kernel" => BootArtifact::Kernel,
                    "rootfs" => BootArtifact::Rootfs,
                    other => {
                        return text(
                            StatusCode::NOT_FOUND,
                            format!("Failed to parse artifact: unknown artifact {other:?} (kernel, rootfs)"),
                        );
                    }
                };
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "Failed to parse query parameters: 'version' is required");
                };
                let arch = q.get("arch").filter(|a| !a.is_empty()).map(String::as_str).unwrap_or("x86_64");
                let base = match self.catalog.lookup(version, arch) {
                    Ok(b) => b,
                    Err(e) => return text(e.http_status(), e.to_string()),
                };
                match self.images.boot_artifact(&base, which) {
                    Ok(rep) => respond(req.method(), req.headers(), &rep),
                    Err(e) => image_error(&e),
                }
            }
            ["api", "assisted-install", "v2", "infra-envs", id, "downloads", "files"] => {
                // The Ignition carries the pull secret, the iPXE script a signed initrd URL.
                let token = match self.image_token(&req, id) {
                    Ok(token) => token,
                    Err(refused) => return refused,
                };
                self.infraenv_file(&req, id, token.as_deref()).await
            }
            _ => {
                let resource_path = matches!(segs.as_slice(), ["apis", ..] | ["api", "v1", ..]);
                if resource_path && let Some(refused) = self.api_refusal(req.headers()) {
                    return refused;
                }
                self.resource_api(&req, &segs).await
            }
        }
    }

    /// A cluster's host logs are for whoever holds the Agent's logsURL (its `api_key` names the
    /// cluster) or the API token; where neither is configured (unsigned URLs on Kubernetes), anyone.
    fn logs_refusal(&self, req: &Request<Bytes>, cluster_id: &str) -> Option<Response<Body>> {
        let signer = self.images.config.url_signer.as_ref();
        if let (Some(signer), Some(token)) = (signer, query_map(req.uri()).get("api_key")) {
            return match signer.verify_cluster(token, cluster_id, std::time::SystemTime::now()) {
                Ok(_) => None,
                Err(e) => Some(text(e.http_status(), e.to_string())),
            };
        }
        if self.api_token.is_some() {
            return self.api_refusal(req.headers());
        }
        signer.map(|_| {
            text(StatusCode::UNAUTHORIZED, "host logs need the signed URL in the Agent's status.debugInfo.logsURL")
        })
    }

    /// The resource API holds every tenant's pull secrets and the fleet's state: without the API's
    /// bearer token, this 401 is the answer.
    fn api_refusal(&self, headers: &http::HeaderMap) -> Option<Response<Body>> {
        let expected = self.api_token.as_ref()?;
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let message = match presented {
            Some(t) if crate::auth::same_token(t, expected) => return None,
            Some(_) => "the bearer token is not this server's API token",
            None => {
                "this API needs the server's token: `Authorization: Bearer <token>`, the token being in \
                 DATA_DIR/api-token (the bootstream CLI reads ./bootstream-data/api-token, --token or $BOOTSTREAM_TOKEN)"
            }
        };
        let mut r = status_error(StatusCode::UNAUTHORIZED, "Unauthorized", message);
        r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        Some(r)
    }

    /// Where image URLs are signed, a request for InfraEnv `id`'s image or files must carry a token
    /// for it, else this is the answer: `api_key` or `image_token` in the query, else an
    /// `Image-Token` header, else `Authorization: Bearer`. The refusal (401, or 403 for another
    /// InfraEnv's token) carries no image bytes.
    fn image_refusal(&self, req: &Request<Bytes>, id: &str) -> Option<Response<Body>> {
        self.image_token(req, id).err()
    }

    /// The token a request for InfraEnv `id`'s image or files presented, verified (see
    /// [`Self::image_refusal`]); None where URLs are not signed. URLs an answer hands out carry this
    /// same token, never a new one: a URL must not outlive the one it was found through.
    #[allow(clippy::result_large_err)] // the error is the response itself
    fn image_token(&self, req: &Request<Bytes>, id: &str) -> Result<Option<String>, Response<Body>> {
        let Some(signer) = self.images.config.url_signer.as_ref() else { return Ok(None) };
        let q = query_map(req.uri());
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        let token = q
            .get("api_key")
            .or_else(|| q.get("image_token"))
            .map(String::as_str)
            .or_else(|| header("image-token"))
            .or_else(|| header("authorization").and_then(|v| v.strip_prefix("Bearer ")))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let result = match token {
            None => Err(crate::auth::urlsign::TokenError::Missing),
            Some(t) => signer.verify_for(t, id, std::time::SystemTime::now()).map(|_| Some(t.to_string())),
        };
        result.map_err(|e| text(e.http_status(), e.to_string()))
    }

    async fn iso_file(&self, req: &Request<Bytes>, id: &str, version: &str, arch: &str, file: &str) -> Response<Body> {
        match file {
            "full.iso" => self.iso(req, id, version, arch, ImageType::FullIso).await,
            "minimal.iso" => self.iso(req, id, version, arch, ImageType::MinimalIso).await,
            "disconnected.iso" => text(
                StatusCode::NOT_FOUND,
                format!("{file} is not supported by this bootstream version (supported: full.iso, minimal.iso)"),
            ),
            other => text(StatusCode::NOT_FOUND, format!("unrecognized file name {other}")),
        }
    }

    async fn infraenv(&self, id: &str) -> Result<(InfraEnv, Arc<crate::image::DiscoveryContent>), ImageError> {
        if !is_uuid(id) {
            return Err(ImageError::UnknownInfraEnv(id.to_string()));
        }
        let ie = self.images.infraenv_by_id(id).await?;
        let content = self.images.content(&ie).await?;
        Ok((ie, content))
    }

    /// InfraEnv `id`, its content, and the base image a download is over (`base`, else the one the
    /// InfraEnv selects), once [`Images::verdict`] says that image can be made whole: an InfraEnv
    /// whose image failed answers every download of its files with that failure.
    async fn image_of(
        &self,
        id: &str,
        base: Option<Arc<crate::image::catalog::BaseImage>>,
    ) -> Result<(InfraEnv, Arc<crate::image::DiscoveryContent>, Arc<crate::image::catalog::BaseImage>), ImageError>
    {
        let (ie, content) = self.infraenv(id).await?;
        let base = match base {
            Some(base) => base,
            None => self.images.selected_base(&ie)?,
        };
        self.images.verdict(&ie, &content, &base).await?;
        Ok((ie, content, base))
    }

    async fn iso(&self, req: &Request<Bytes>, id: &str, version: &str, arch: &str, kind: ImageType) -> Response<Body> {
        let result = async {
            let (ie, content) = self.infraenv(id).await?;
            let base = self.catalog.lookup(version, arch)?;
            self.images.verdict(&ie, &content, &base).await?;
            self.images.iso(&ie, &base, &content, kind).await
        }
        .await;
        self.represent(req, result)
    }

    async fn pxe_initrd(&self, req: &Request<Bytes>, id: &str, version: &str, arch: &str) -> Response<Body> {
        // assisted-image-service answers an unknown version here with 400 (not 404 as for ISOs).
        let base = match self.catalog.lookup(version, arch) {
            Ok(b) => b,
            Err(e @ crate::image::catalog::LookupError::Loading { .. }) => return text(e.http_status(), e.to_string()),
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("version for {version} {arch}, not found: {e}")),
        };
        let result = async {
            let (ie, content, base) = self.image_of(id, Some(base)).await?;
            self.images.pxe_initrd(&ie, &base, &content)
        }
        .await;
        self.represent(req, result)
    }

    fn represent(&self, req: &Request<Bytes>, result: Result<Representation, ImageError>) -> Response<Body> {
        match result {
            Ok(rep) => respond(req.method(), req.headers(), &rep),
            Err(e) => image_error(&e),
        }
    }

    /// §8.1: a host that PXE-boots with this MAC and is already installed (or far into its installation)
    /// gets a 404, so that iPXE falls through to the disk instead of booting discovery again.
    async fn ipxe_skip(&self, infra_env_id: &str, mac: &str) -> Option<Response<Body>> {
        let Some(backend) = &self.backend else { return Some(controller_only()) };
        let (lower, upper) = (mac.to_lowercase(), mac.to_uppercase());
        let hosts = backend
            .hosts(|h| {
                h.infra_env_id == infra_env_id
                    && h.inventory.as_deref().is_some_and(|i| i.contains(&lower) || i.contains(&upper))
            })
            .await;
        let host = match hosts.as_slice() {
            [] => return None,
            [host] => host,
            many => {
                return Some(text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("IPXE booting skipped. Unexpected number of hosts {} with mac {mac}", many.len()),
                ));
            }
        };
        let prefix = format!("IPXE booting skipped. InfraEnv {infra_env_id}: host {} having mac {mac}", host.id);
        let stage = host.progress.current_stage.as_str();
        match host.status {
            crate::hosts::HostStatus::Installed => {
                Some(text(StatusCode::NOT_FOUND, format!("{prefix} is already installed")))
            }
            crate::hosts::HostStatus::InstallingInProgress
                if matches!(stage, "Done" | "Configuring" | "Joined" | "Rebooting" | "Waiting for ignition") =>
            {
                Some(text(StatusCode::NOT_FOUND, format!("{prefix} is in stage {stage}")))
            }
            _ => None,
        }
    }

    /// `GET /api/assisted-install/v2/clusters/{id}/logs?logs_type=host&host_id=...`: the logs the
    /// installer uploaded for a host (the Agent's logsURL).
    async fn download_logs(&self, req: &Request<Bytes>, cluster_id: &str) -> Response<Body> {
        let q = query_map(req.uri());
        match q.get("logs_type").map(String::as_str).unwrap_or("host") {
            "host" => {}
            other => {
                return text(StatusCode::BAD_REQUEST, format!("logs_type {other}: only host logs are kept"));
            }
        }
        let Some(host_id) = q.get("host_id").filter(|h| !h.is_empty()) else {
            return text(StatusCode::BAD_REQUEST, "host_id is required for host logs");
        };
        let not_found = || text(StatusCode::NOT_FOUND, format!("no logs of host {host_id} in cluster {cluster_id}"));
        let (Some(backend), Some(agent_api)) = (&self.backend, &self.agent_api) else { return controller_only() };
        // A cluster has one host of each id (`Backend::bind_host`): the logs URL names the cluster,
        // which its token is for, and the host in it.
        let hosts = backend.cluster_hosts(cluster_id).await;
        let Some(host) = hosts.iter().find(|h| h.id == *host_id) else { return not_found() };
        if host.logs_collected_at.is_none() {
            return not_found();
        }
        let cluster_name = backend.cluster(cluster_id).await.map(|c| c.name).unwrap_or_default();
        let filename = format!("{cluster_name}_{}_{}.tar.gz", host.role, host.hostname());
        match agent_api.logs.representation(cluster_id, host_id, &host.logs_sha256, filename) {
            Ok(Some(rep)) => crate::http::respond::respond(req.method(), req.headers(), &rep),
            Ok(None) => not_found(),
            Err(e) => text(StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), e.message),
        }
    }

    /// `GET /api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=...`
    async fn infraenv_file(&self, req: &Request<Bytes>, id: &str, token: Option<&str>) -> Response<Body> {
        let q = query_map(req.uri());
        let file_name = q.get("file_name").map(String::as_str).unwrap_or("");
        let script_type = q.get("ipxe_script_type").map(String::as_str);
        if script_type.is_some() && file_name != "ipxe-script" {
            return text(StatusCode::BAD_REQUEST, "ipxe_script_type is only valid with file_name=ipxe-script");
        }
        let (ie, content, base) = match self.image_of(id, None).await {
            Ok(x) => x,
            Err(e) => return image_error(&e),
        };
        match file_name {
            "discovery.ign" => respond(req.method(), req.headers(), &self.images.discovery_ignition(&ie, &content)),
            "static-network-config" => self.represent(req, self.images.static_network_config(&ie, &content)),
            "ipxe-script" => {
                let order_control = match script_type {
                    None | Some("discovery-image-always") => false,
                    Some("boot-order-control") => true,
                    Some(other) => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            format!("invalid value '{other}' for parameter 'ipxe_script_type'"),
                        );
                    }
                };
                let mac = q.get("mac").filter(|m| !m.is_empty());
                if let Some(mac) = mac
                    && let Some(skip) = self.ipxe_skip(id, mac).await
                {
                    return skip;
                }
                let script = if order_control && mac.is_none() {
                    // Redirect script: iPXE fills in the MAC; the answer for that MAC decides whether the
                    // host boots discovery or falls through to its disk.
                    let api_key = token.map(|t| format!("&api_key={}", crate::image::enc(t))).unwrap_or_default();
                    Ok(format!(
                        "#!ipxe\nchain {}/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=ipxe-script{api_key}&mac=${{net0/mac}}\n",
                        self.images.config.ipxe_base_url()
                    ))
                } else {
                    self.images.ipxe_script(&ie, &base, &content, token)
                };
                match script {
                    Ok(s) => {
                        let plan = crate::plan::Plan::from_part(Arc::new(crate::plan::Part::new(s.into_bytes())));
                        let rep = Representation {
                            etag: hex::encode(plan.digest()),
                            plan,
                            last_modified: std::time::SystemTime::now(),
                            content_type: "text/plain; charset=utf-8",
                            filename: Some(format!("{id}-ipxe-script")),
                        };
                        respond(req.method(), req.headers(), &rep)
                    }
                    Err(e) => image_error(&e),
                }
            }
            "" => text(StatusCode::BAD_REQUEST, "'file_name' parameter required"),
            other => text(
                StatusCode::BAD_REQUEST,
                format!(
                    "invalid value '{other}' for parameter 'file_name' (discovery.ign, ipxe-script, static-network-config)"
                ),
            ),
        }
    }

    /// Kubernetes-style REST for the embedded store:
    /// `/apis/<group>/<version>[/namespaces/NS]/<plural>[/NAME]` and `/api/v1[...]/secrets[/NAME]`; cluster-scoped
    /// kinds (ClusterImageSet) without the namespace part. PATCH takes a JSON merge patch (RFC 7386).
    async fn resource_api(&self, req: &Request<Bytes>, segs: &[&str]) -> Response<Body> {
        let Some(store) = &self.resources else {
            return status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                "resources live in the Kubernetes cluster this server works with: use kubectl",
            );
        };
        let Some(crate::store::ApiPath { prefix: api_prefix, namespace, plural, name, status }) =
            crate::store::ApiPath::parse(segs)
        else {
            return not_found();
        };
        let Some(kind) = Kind::from_plural(plural).filter(|k| k.api_prefix() == api_prefix) else {
            return status_error(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the server could not find the requested resource ({plural})"),
            );
        };
        // Namespaced kinds have item paths under a namespace; cluster-scoped kinds never do.
        let namespace = if kind.namespaced() {
            match namespace {
                Some("") => return not_found(),
                ns => ns,
            }
        } else {
            match namespace {
                Some(ns) if !ns.is_empty() => return not_found(),
                _ => Some(""),
            }
        };
        if status {
            let (Some(ns), Some(name)) = (namespace, name) else { return not_found() };
            return match self.status_api(store, kind, ns, name, req).await {
                Ok(r) => r,
                Err(e) => store_error(&e),
            };
        }
        let result = match (req.method().clone(), namespace, name) {
            (Method::GET, ns, None) => Ok(list_response(kind, &store.list_texts(kind, ns))),
            (Method::GET, Some(ns), Some(name)) => match store.get_document(kind, ns, name).await {
                Ok(Some(doc)) => Ok(crate::http::json(StatusCode::OK, &doc)),
                Ok(None) => Err(not_found_error(kind, name)),
                Err(e) => Err(e),
            },
            (Method::PUT, Some(ns), Some(name)) => self.apply(store, kind, req.body(), Some((ns, name))).await,
            (Method::POST, Some(ns), None) => self.apply(store, kind, req.body(), Some((ns, ""))).await,
            (Method::PATCH, Some(ns), Some(name)) => self.patch(store, kind, ns, name, req).await,
            (Method::DELETE, Some(ns), Some(name)) => match store.delete_document(kind, ns, name).await {
                Ok(deletion) => {
                    // An InfraEnv goes at once unless hosts hold it (then its condition says which).
                    let deletion = if kind == Kind::InfraEnv && deletion == crate::store::Deletion::Pending {
                        let _ = self.reconciled_infraenv(ns, name).await;
                        match store.get_document(kind, ns, name).await {
                            Ok(None) => crate::store::Deletion::Deleted,
                            _ => deletion,
                        }
                    } else {
                        deletion
                    };
                    let doc = store.get_document(kind, ns, name).await.ok().flatten();
                    Ok(match (deletion, doc) {
                        (crate::store::Deletion::Pending, Some(doc)) => crate::http::json(StatusCode::ACCEPTED, &doc),
                        _ => crate::http::json(
                            StatusCode::OK,
                            &json!({"kind": "Status", "apiVersion": "v1", "status": "Success",
                                    "details": {"name": name, "kind": kind.plural()}}),
                        ),
                    })
                }
                Err(e) => Err(e),
            },
            (m, _, _) => {
                return status_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("method {m} not allowed here"),
                );
            }
        };
        match result {
            Ok(r) => r,
            Err(e) => store_error(&e),
        }
    }

    /// The status subresource, `.../NAME/status`: what a controller outside bootstream (metal3's bare
    /// metal operator reporting a BareMetalHost) writes. GET returns the object; PUT replaces the status
    /// with the document's (refused if its resourceVersion is stale); PATCH merges a patch into it.
    /// Nothing but the status changes either way.
    async fn status_api(
        &self,
        store: &SqliteStore,
        kind: Kind,
        ns: &str,
        name: &str,
        req: &Request<Bytes>,
    ) -> Result<Response<Body>, StoreError> {
        let invalid = |e: crate::resources::DocumentError| StoreError::Invalid(e.to_string());
        let Some(live) = store.get_document(kind, ns, name).await? else {
            return Err(not_found_error(kind, name));
        };
        let stored = match req.method().clone() {
            Method::GET => live,
            Method::PUT => {
                let doc: Value = serde_json::from_slice(req.body())
                    .map_err(|e| StoreError::Invalid(format!("the body is not JSON: {e}")))?;
                let status = crate::resources::validate_status(kind, &doc).map_err(invalid)?;
                let want_rv = doc["metadata"]["resourceVersion"].as_str().map(str::to_string);
                store.replace_status_document(kind, ns, name, status, want_rv).await?
            }
            Method::PATCH => {
                let patch = match merge_patch_of(req)? {
                    Ok(patch) => patch,
                    Err(refused) => return Ok(refused),
                };
                // Retried on conflict against the object as it is then, as the API server does for patches.
                let mut live = live;
                let mut attempts = 0;
                loop {
                    let mut doc = live.clone();
                    crate::store::json::merge_patch(&mut doc, &patch);
                    let status = crate::resources::validate_status(kind, &doc).map_err(invalid)?;
                    let want_rv = live["metadata"]["resourceVersion"].as_str().map(str::to_string);
                    match store.replace_status_document(kind, ns, name, status, want_rv).await {
                        Err(e) if e.is_conflict() && attempts < 5 => {
                            attempts += 1;
                            live =
                                store.get_document(kind, ns, name).await?.ok_or_else(|| not_found_error(kind, name))?;
                        }
                        other => break other?,
                    }
                }
            }
            m => {
                return Ok(status_error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    &format!("method {m} not allowed here"),
                ));
            }
        };
        Ok(crate::http::json(StatusCode::OK, &stored))
    }

    /// `kubectl patch --type merge`: the merge patch is applied to the live object, the result validated
    /// as a whole like an applied document, and written if nobody changed the object meanwhile (retried
    /// on conflict, as the API server does for patches).
    async fn patch(
        &self,
        store: &SqliteStore,
        kind: Kind,
        ns: &str,
        name: &str,
        req: &Request<Bytes>,
    ) -> Result<Response<Body>, StoreError> {
        let patch = match merge_patch_of(req)? {
            Ok(patch) => patch,
            Err(refused) => return Ok(refused),
        };
        for _ in 0..5 {
            let Some(live) = store.get_document(kind, ns, name).await? else {
                return Err(not_found_error(kind, name));
            };
            let mut doc = live.clone();
            crate::store::json::merge_patch(&mut doc, &patch);
            if let Some(o) = doc.as_object_mut() {
                o.remove("status");
            }
            doc["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"].clone();
            let (_, validated) =
                validate_document(&strip_server_fields(&doc)).map_err(|e| StoreError::Invalid(e.to_string()))?;
            crate::resources::validate_update(kind, &live, &validated)
                .map_err(|e| StoreError::Invalid(e.to_string()))?;
            let mut validated = validated;
            validated["metadata"] = doc["metadata"].clone();
            match store.replace_document(kind, validated).await {
                Ok(stored) => {
                    if kind == Kind::InfraEnv {
                        let _ = self.reconciled_infraenv(ns, name).await;
                    }
                    let current = store.get_document(kind, ns, name).await?.unwrap_or(stored);
                    return Ok(crate::http::json(StatusCode::OK, &current));
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict(format!("{} \"{name}\" kept changing; try again", kind.resource())))
    }

    /// Creates or updates an object from a JSON document.
    async fn apply(
        &self,
        store: &SqliteStore,
        kind: Kind,
        body: &Bytes,
        target: Option<(&str, &str)>,
    ) -> Result<Response<Body>, StoreError> {
        let doc: Value =
            serde_json::from_slice(body).map_err(|e| StoreError::Invalid(format!("request body is not JSON: {e}")))?;
        let (doc_kind, mut doc) = validate_document(&doc).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if doc_kind != kind {
            return Err(StoreError::Invalid(format!(
                "a {} cannot be written to the {} collection",
                doc_kind.name(),
                kind.plural()
            )));
        }
        if let Some((ns, name)) = target {
            let doc_ns = doc["metadata"]["namespace"].as_str().unwrap_or(ns).to_string();
            if doc_ns != ns {
                return Err(StoreError::Invalid(format!(
                    "metadata.namespace {doc_ns:?} does not match the namespace of the URL ({ns:?})"
                )));
            }
            doc["metadata"]["namespace"] = Value::String(ns.to_string());
            if !name.is_empty() && doc["metadata"]["name"].as_str() != Some(name) {
                return Err(StoreError::Invalid(format!(
                    "metadata.name does not match the name of the URL ({name:?})"
                )));
            }
        }
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let live = store.get_document(kind, &ns, &name).await?;
        if let Some(live) = &live {
            crate::resources::validate_update(kind, live, &doc).map_err(|e| StoreError::Invalid(e.to_string()))?;
        }
        // The InfraEnv controller's finalizer comes with the create: added by the controller, it would
        // be one more write, and one more round of change events, before the status.
        let finalizer = (kind == Kind::InfraEnv && self.backend.is_some()).then_some(infraenv::INFRAENV_FINALIZER);
        // A new InfraEnv's discovery content is most of its create's time. Built beside the store's
        // write, under the uid reserved for the InfraEnv, it is ready sooner for the status below and
        // for the first downloads, which would otherwise wait for the write and then the build.
        let to_create = match (kind, &live) {
            (Kind::InfraEnv, None) => infraenv_to_create(&doc),
            _ => None,
        };
        let new = NewObject { finalizer, uid: to_create.as_ref().and_then(|ie| ie.metadata.uid.clone()) };
        let started = std::time::Instant::now();
        let write = async {
            let written = store.apply_document_with(kind, doc, new).await;
            (written, started.elapsed().as_micros() as u64)
        };
        let ((written, stored_micros), ()) = match &to_create {
            Some(ie) => tokio::join!(write, self.images.prebuild(ie)),
            None => (write.await, ()),
        };
        if let Some(uid) = to_create.as_ref().and_then(|ie| ie.metadata.uid.as_deref())
            && !matches!(written, Ok((_, true)))
        {
            // Not created (refused, or created by someone else meanwhile and updated here): nothing
            // has the reserved uid.
            self.images.forget_uid(uid);
        }
        let (stored, created) = written?;
        let ns = stored["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let name = stored["metadata"]["name"].as_str().unwrap_or_default().to_string();
        // An applied InfraEnv gets its status now, so `apply` then `get` shows it. Changes to what
        // InfraEnvs reference (secrets, NMStateConfigs) reach them through the controller's queue, which
        // folds a burst of changes into one reconcile per InfraEnv.
        let mut reconciles = 0;
        if kind == Kind::InfraEnv {
            // Someone else may write the InfraEnv meanwhile: then the reconcile's status write
            // conflicts and asks to run again at once. Without waiting for that one too, the answer
            // (and a `get` right after) could lack the status.
            for _ in 0..5 {
                reconciles += 1;
                match self.reconciled_infraenv(&ns, &name).await {
                    Some(Ok(Action::RequeueAfter(d))) if d.is_zero() => continue,
                    _ => break,
                }
            }
        }
        let current = store.get_document(kind, &ns, &name).await?.unwrap_or(stored);
        // Where an apply's time went, for a slow one (the store's write, waiting behind the writes
        // queued ahead included, then the status).
        tracing::debug!(
            kind = kind.name(),
            namespace = %ns,
            name = %name,
            uid = current["metadata"]["uid"].as_str().unwrap_or_default(),
            stored_micros,
            reconciles,
            micros = started.elapsed().as_micros() as u64,
            "applied"
        );
        Ok(crate::http::json(if created { StatusCode::CREATED } else { StatusCode::OK }, &current))
    }
}

impl<S: Store> App<S> {
    /// Has the InfraEnv controller reconcile `ns/name` and waits for that reconcile (one that starts
    /// after this call); None where no InfraEnv controller runs.
    async fn reconciled_infraenv(&self, ns: &str, name: &str) -> Option<Outcome> {
        self.infraenvs.as_ref()?.enqueue_and_wait((ns.to_string(), name.to_string())).await
    }
}

/// The InfraEnv a validated document creates, as the store will keep it, with the uid reserved for
/// it (the store gives a new object generation 1); None when the document does not read as one
/// (the store's write then reports what is wrong).
fn infraenv_to_create(doc: &Value) -> Option<InfraEnv> {
    let mut ie: InfraEnv = serde_json::from_value(doc.clone()).ok()?;
    ie.metadata.uid = Some(uuid::Uuid::new_v4().to_string());
    ie.metadata.generation = Some(1);
    ie.status = None;
    Some(ie)
}

/// A stored document as a client would send it back: without the metadata the server owns, which
/// document validation does not accept from clients.
fn strip_server_fields(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(meta) = d["metadata"].as_object_mut() {
        for key in ["uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp", "managedFields"] {
            meta.remove(key);
        }
    }
    d
}

fn not_found_error(kind: Kind, name: &str) -> StoreError {
    StoreError::NotFound { resource: crate::store::sqlite::kind_resource(kind), name: name.to_string() }
}

fn store_error(e: &StoreError) -> Response<Body> {
    match e {
        StoreError::NotFound { .. } => status_error(StatusCode::NOT_FOUND, "NotFound", &e.to_string()),
        StoreError::Conflict(_) => status_error(StatusCode::CONFLICT, "Conflict", &e.to_string()),
        StoreError::AlreadyExists { .. } => status_error(StatusCode::CONFLICT, "AlreadyExists", &e.to_string()),
        StoreError::Invalid(_) => status_error(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &e.to_string()),
        StoreError::Backend(_) => status_error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e.to_string()),
    }
}

/// A Kubernetes `Status` object, as the API server answers errors.
/// The JSON merge patch (RFC 7386) a PATCH request carries; a request of another patch type gets the
/// 415 response to send instead, and a body that is not JSON an Invalid error.
fn merge_patch_of(req: &Request<Bytes>) -> Result<Result<Value, Response<Body>>, StoreError> {
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !content_type.starts_with("application/merge-patch+json") {
        return Ok(Err(status_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!("the patch type {content_type:?} is not supported; use application/merge-patch+json"),
        )));
    }
    serde_json::from_slice(req.body()).map(Ok).map_err(|e| StoreError::Invalid(format!("the patch is not JSON: {e}")))
}

fn status_error(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    crate::http::json(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

/// A `<Kind>List` made of the stored object texts as they are: a list of ten thousand Agents costs
/// one copy, not a parse and a re-serialization of each.
/// A list of stored objects, as the stored texts themselves between the list's punctuation (the
/// response of a list of thousands of Agents shares their texts instead of copying them).
fn list_response(kind: Kind, items: &[Bytes]) -> Response<Body> {
    let head = format!(r#"{{"apiVersion":"{}","kind":"{}List","items":["#, kind.api_version(), kind.name());
    let comma = Bytes::from_static(b",");
    let mut chunks = Vec::with_capacity(items.len() * 2 + 1);
    chunks.push(Bytes::from(head));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            chunks.push(comma.clone());
        }
        chunks.push(item.clone());
    }
    chunks.push(Bytes::from_static(b"]}\n"));
    let body = Body::Chunks(chunks.into());
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .body(body)
        .expect("valid response")
}
