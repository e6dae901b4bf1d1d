//! The HTTP API: routes compatible with assisted-image-service (spec-images.md §7) and with the
//! assisted-service downloads a host uses (spec-controllers.md §8.1), plus a Kubernetes-style REST
//! API for the resources of the embedded store (what `bootstream apply/get/delete` talk to).
//!
//! A request's path is parsed once into a [`route::Route`]; [`App`] admits its body by route, then
//! hands it to the area's handlers: `images` (downloads), [`agent`] (the agent API), `logs`
//! (host logs), [`events`] (the events behind the eventsURLs), `resources` (the resource API), and `/metrics` ([`metrics`]).

pub mod admission;
pub mod agent;
pub mod events;
mod images;
pub mod kube;
mod logs;
pub mod metrics;
mod resources;
pub use resources::EmbeddedHooks;
pub mod route;

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};

use crate::api::metrics::Metrics;
use crate::auth::AGENT_AUTH_HEADER;
use crate::http::query::query_map;
use crate::http::{Admission, Body, Completion, Handler, RouteLabel, text};
use crate::image::Images;
use crate::image::catalog::Catalog;
use crate::store::Store;
use route::Route;

/// The HTTP application over a [`Store`]. Embedded, it has everything. On Kubernetes, the controller
/// has the agent API and host records but no resource API (users use kubectl), and an image server
/// replica has only the image routes.
pub struct App<S: Store> {
    pub images: Arc<Images<S>>,
    /// The Kubernetes API over the embedded store; None where the resources live in a cluster.
    pub kube: Option<Arc<kube::KubeApi>>,
    pub catalog: Arc<Catalog>,
    pub metrics: Arc<Metrics>,
    /// The agent API and the host records, where this process keeps them.
    pub agent_api: Option<Arc<crate::api::agent::AgentApi<S>>>,
    pub backend: Option<Arc<crate::pool::Backend>>,
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
/// Largest credentials upload: the kubeconfig's own limit (the password's is far smaller).
const MAX_CREDENTIALS_BYTES: usize = crate::pool::MAX_KUBECONFIG_BYTES;
/// What a route that takes no body may be sent anyway (read and ignored): as much as a head.
const MAX_UNUSED_BODY_BYTES: usize = 16 << 10;

/// Held by a download's response until its last byte is written or the client goes away.
#[derive(Clone)]
struct DownloadPermit(#[allow(dead_code)] Arc<tokio::sync::OwnedSemaphorePermit>);

impl<S: Store> Handler for App<S> {
    async fn handle(self: Arc<Self>, req: Request<Bytes>) -> Response<Body> {
        let parsed = Route::parse(req.uri().path());
        let route = parsed.label();
        self.metrics.started(route);
        // Only GETs send bodies worth limiting; HEAD and validators stay cheap.
        let permit = if req.method() == Method::GET && parsed.is_download() {
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
        let parsed = Route::parse(head.uri.path());
        let route = parsed.label();
        let refuse = |mut resp: Response<Body>| {
            // Reported as answered like any other response (its completion ends this).
            self.metrics.started(route);
            resp.extensions_mut().insert(RouteLabel(route));
            Admission::Refuse(resp)
        };
        if parsed == Route::Admission {
            // Where the resources live in a cluster: the API server's reviews (no token: it calls).
            let max_bytes = if self.kube.is_none() { admission::MAX_REVIEW_BYTES } else { MAX_UNUSED_BODY_BYTES };
            return Admission::Body { max_bytes };
        }
        if parsed == Route::Resources {
            return match self.api_refusal(&head.headers) {
                Some(refused) => refuse(refused),
                // Where the resources live in a cluster there is no resource API to send them to.
                None if self.kube.is_none() => Admission::Body { max_bytes: MAX_UNUSED_BODY_BYTES },
                None => Admission::Body { max_bytes: MAX_DOCUMENT_BYTES },
            };
        }
        let Some(agent_api) = &self.agent_api else {
            return Admission::Body { max_bytes: MAX_UNUSED_BODY_BYTES };
        };
        match parsed {
            Route::Agent { infra_env_id, .. } => match agent_api.token_refusal(&head.headers, infra_env_id) {
                Some(refused) => refuse(refused),
                None => Admission::Body { max_bytes: MAX_AGENT_CALL_BYTES },
            },
            Route::ClusterLogs { .. } if head.method == Method::POST => {
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
            Route::ClusterCredentials { .. } if head.method == Method::PUT => {
                // Sent by a host's installer with its InfraEnv's token, the InfraEnv in the query.
                let infra_env_id = query_map(&head.uri).remove("infra_env_id").unwrap_or_default();
                match agent_api.token_refusal(&head.headers, &infra_env_id) {
                    Some(refused) => refuse(refused),
                    None => Admission::Body { max_bytes: MAX_CREDENTIALS_BYTES },
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
        let parsed = Route::parse(head.uri.path());
        let route = parsed.label();
        self.metrics.started(route);
        let cluster_id = match parsed {
            Route::ClusterLogs { cluster_id } => cluster_id,
            _ => "",
        };
        let mut resp = match &self.agent_api {
            Some(api) => api.upload_logs(&head, cluster_id, body).await,
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

/// The plain-HTTP listener's answer to anything else.
pub const PLAIN_HTTP_REFUSAL: &str =
    "404 page not found: this port serves only iPXE scripts, kernels, PXE initrds and rootfs images; use HTTPS";

/// The answer of an image server replica to what only the controller serves.
fn controller_only() -> Response<Body> {
    text(
        StatusCode::NOT_FOUND,
        "this image server has no host records: the agent API, host logs, events and per-host iPXE answers are served by `bootstream controller`",
    )
}

fn not_found() -> Response<Body> {
    text(StatusCode::NOT_FOUND, "404 page not found")
}

impl<S: Store> App<S> {
    async fn route(&self, req: Request<Bytes>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let route = Route::parse(&path);
        if let Route::Agent { infra_env_id, call } = route {
            return match &self.agent_api {
                Some(api) => api.handle(&req, infra_env_id, call).await,
                None => controller_only(),
            };
        }
        if let Route::ClusterLogs { cluster_id } = route
            && (req.method() == Method::GET || req.method() == Method::HEAD)
        {
            if let Some(refused) = self.logs_refusal(&req, cluster_id) {
                return refused;
            }
            return self.download_logs(&req, cluster_id).await;
        }
        if let Route::ClusterCredentials { cluster_id } = route {
            if req.method() != Method::PUT {
                let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("method {} not allowed", req.method()));
                r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("PUT"));
                return r;
            }
            return match &self.agent_api {
                Some(api) => api.upload_credentials(&req, cluster_id).await,
                None => controller_only(),
            };
        }
        if route.read_only() && req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, format!("method {} not allowed", req.method()));
            r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
            return r;
        }
        match route {
            Route::Live => text(StatusCode::OK, "ok"),
            Route::Health | Route::Ready => {
                // Ready once every OS image has finished loading, successfully or not; the body says
                // which images are served and why the others are not.
                let status = if self.catalog.is_settled() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                text(status, self.catalog.report())
            }
            Route::Metrics => {
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
            Route::Admission => match self.kube {
                None => admission::serve_review(&req),
                Some(_) => text(
                    StatusCode::NOT_FOUND,
                    "this server validates writes in its own resource API; the admission webhook is served by \
                     `bootstream controller` on a Kubernetes hub",
                ),
            },
            Route::Resources => {
                if let Some(refused) = self.api_refusal(req.headers()) {
                    return refused;
                }
                match &self.kube {
                    Some(api) => api.handle(&req).await,
                    None => kube::status_error(
                        StatusCode::NOT_FOUND,
                        "NotFound",
                        "resources live in the Kubernetes cluster this server works with: use kubectl",
                    ),
                }
            }
            Route::Events => self.list_events(&req).await,
            Route::Unmatched { .. }
            | Route::Agent { .. }
            | Route::ClusterLogs { .. }
            | Route::ClusterCredentials { .. } => not_found(),
            image_route => self.image_route(&req, image_route).await,
        }
    }
}
