//! The image routes: an InfraEnv's ISOs, PXE initrd, Ignition, iPXE script and static-network
//! config, and the boot artifacts every InfraEnv shares (assisted-image-service's API,
//! spec-images.md §7, and the assisted-service downloads a host uses, spec-controllers.md §8.1).

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::route::{IsoUrl, Route};
use super::{App, controller_only};
use crate::errors::chain;
use crate::http::query::query_map;
use crate::http::respond::respond;
use crate::http::{Body, text};
use crate::image::{BootArtifact, ImageError};
use crate::plan::Representation;
use crate::resources::{ImageType, InfraEnv};
use crate::store::Store;

fn image_error(e: &ImageError) -> Response<Body> {
    text(e.http_status(), chain(e).to_string())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

impl<S: Store> App<S> {
    /// Answers a GET or HEAD of an image route.
    pub(super) async fn image_route(&self, req: &Request<Bytes>, route: Route<'_>) -> Response<Body> {
        match route {
            Route::Image { id } => {
                if let Some(refused) = self.image_refusal(req, id) {
                    return refused;
                }
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "'version' parameter required");
                };
                let arch = q.get("arch").filter(|a| !a.is_empty()).map(String::as_str).unwrap_or("x86_64");
                match q.get("type").map(String::as_str) {
                    Some("full-iso") => self.iso(req, id, version, arch, ImageType::FullIso).await,
                    Some("minimal-iso") => self.iso(req, id, version, arch, ImageType::MinimalIso).await,
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
            Route::IsoFile { by: IsoUrl::ById, key: id, version, arch, file } => {
                if let Some(refused) = self.image_refusal(req, id) {
                    return refused;
                }
                self.iso_file(req, id, version, arch, file).await
            }
            Route::IsoFile { by, key: token, version, arch, file } => {
                let Some(signer) = &self.images.config.url_signer else {
                    let route = match by {
                        IsoUrl::ByApiKey => "byapikey",
                        IsoUrl::Short => "s",
                        _ => "bytoken",
                    };
                    return text(
                        StatusCode::NOT_FOUND,
                        format!("/{route}/ URLs are not served: this server's image URLs are unsigned (/byid/)"),
                    );
                };
                let token = percent_encoding::percent_decode_str(token).decode_utf8_lossy();
                let now = std::time::SystemTime::now();
                let verified =
                    if by == IsoUrl::Short { signer.verify_short(&token, now) } else { signer.verify(&token, now) };
                match verified {
                    Ok(claims) => self.iso_file(req, &claims.infra_env_id, version, arch, file).await,
                    Err(e) => text(e.http_status(), e.to_string()),
                }
            }
            Route::PxeInitrd { id } => {
                if let Some(refused) = self.image_refusal(req, id) {
                    return refused;
                }
                let q = query_map(req.uri());
                let Some(version) = q.get("version").filter(|v| !v.is_empty()) else {
                    return text(StatusCode::BAD_REQUEST, "'version' parameter required for initrd download");
                };
                let arch = q.get("arch").filter(|a| !a.is_empty()).map(String::as_str).unwrap_or("x86_64");
                self.pxe_initrd(req, id, version, arch).await
            }
            Route::InitrdAddrsize { id } => {
                if let Some(refused) = self.image_refusal(req, id) {
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
                self.represent(req, result)
            }
            // The rootfs URL minimal ISOs carry (no query string: see Images::minimal_rootfs_url).
            Route::VersionedRootfs { version, arch } => match self.catalog.lookup(version, arch) {
                Ok(base) => self.represent(req, self.images.boot_artifact(&base, BootArtifact::Rootfs)),
                Err(e) => text(e.http_status(), e.to_string()),
            },
            Route::BootArtifact { artifact } => {
                let which = match artifact {
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
            Route::InfraEnvFiles { id } => {
                // The Ignition carries the pull secret, the iPXE script a signed initrd URL.
                let token = match self.image_token(req, id) {
                    Ok(token) => token,
                    Err(refused) => return refused,
                };
                self.infraenv_file(req, id, token.as_deref()).await
            }
            other => unreachable!("{other:?} is not an image route"),
        }
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

    /// spec-controllers.md §8.1: a host that PXE-boots with this MAC and is already installed (or far into its
    /// installation) gets a 404, so that iPXE falls through to the disk instead of booting discovery again.
    async fn ipxe_skip(&self, infra_env_id: &str, mac: &str) -> Option<Response<Body>> {
        let Some(backend) = &self.backend else { return Some(controller_only()) };
        let (lower, upper) = (mac.to_lowercase(), mac.to_uppercase());
        let hosts = backend
            .infra_env_hosts(infra_env_id, |h| {
                h.inventory.as_deref().is_some_and(|i| i.contains(&lower) || i.contains(&upper))
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
}
