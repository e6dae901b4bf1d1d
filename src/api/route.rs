//! Every route of the HTTP API, parsed once from a request's path. What a route is for (its metrics
//! label, whether it streams an image, whether the plain-HTTP port serves it, which token it needs)
//! is a property of the route, answered here and nowhere else.

use crate::http::query::query_map;

/// Where a request goes, from its path alone (the method is the handler's business).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    Live,
    Health,
    Ready,
    Metrics,
    /// `/api/assisted-install/v2/infra-envs/{id}/hosts[/...]`: the agent API, authenticated by the
    /// InfraEnv's agent token.
    Agent {
        infra_env_id: &'a str,
        call: AgentCall<'a>,
    },
    /// `/api/assisted-install/v2/clusters/{id}/logs`: host logs, uploaded by the installer (POST) and
    /// downloaded through the Agent's logsURL.
    ClusterLogs {
        cluster_id: &'a str,
    },
    /// `/api/assisted-install/v2/events`: the events of hosts, InfraEnvs and clusters (the
    /// eventsURLs of their statuses).
    Events,
    /// `/api/assisted-install/v2/clusters/{id}/uploads/credentials?file_name=`: the admin kubeconfig
    /// and kubeadmin password of a cluster, uploaded (PUT) by its bootstrap host's installer.
    ClusterCredentials {
        cluster_id: &'a str,
    },
    /// `/images/{id}?version=&arch=&type=`: an InfraEnv's ISO (assisted-image-service).
    Image {
        id: &'a str,
    },
    /// `/images/{id}/pxe-initrd`.
    PxeInitrd {
        id: &'a str,
    },
    /// `/images/{id}/s390x-initrd-addrsize`.
    InitrdAddrsize {
        id: &'a str,
    },
    /// `/byid/{id}/{version}/{arch}/{file}`, `/byapikey/{token}/...`, `/bytoken/{token}/...`, `/s/{short token}/...`.
    IsoFile {
        by: IsoUrl,
        key: &'a str,
        version: &'a str,
        arch: &'a str,
        file: &'a str,
    },
    /// `/boot-artifacts/{version}/{arch}/rootfs.img`: the rootfs URL minimal ISOs carry.
    VersionedRootfs {
        version: &'a str,
        arch: &'a str,
    },
    /// `/boot-artifacts/{artifact}?version=&arch=`.
    BootArtifact {
        artifact: &'a str,
    },
    /// `/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=`.
    InfraEnvFiles {
        id: &'a str,
    },
    /// `/apis/...` and `/api/v1/...`: the Kubernetes-style resource API.
    Resources,
    /// `/admission/validate`: the validating admission webhook (AdmissionReviews from a Kubernetes
    /// API server).
    Admission,
    /// Anything else. `image_family` paths (under the image and assisted prefixes) take only GET and
    /// HEAD; `label` keeps a malformed `/byid/...` path counted as such.
    Unmatched {
        label: &'static str,
        image_family: bool,
    },
}

/// The agent API's calls under `/infra-envs/{id}/hosts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCall<'a> {
    /// `hosts`: register (POST), list (GET).
    Hosts,
    /// `hosts/{host_id}`.
    Host(&'a str),
    /// `hosts/{host_id}/instructions`: next steps (GET), step reply (POST).
    Instructions(&'a str),
    /// `hosts/{host_id}/progress`.
    Progress(&'a str),
    /// Any other path under `hosts/`.
    Unknown,
}

/// How an ISO file URL names its InfraEnv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsoUrl {
    /// By id; the token (where URLs are signed) is in the query or a header.
    ById,
    /// By a signed token in the path (assisted-image-service's two spellings).
    ByApiKey,
    ByToken,
    /// By a short signed token in the path, for BMCs that take short URLs only.
    Short,
}

impl<'a> Route<'a> {
    pub fn parse(path: &'a str) -> Route<'a> {
        let segs: Vec<&'a str> = path.trim_start_matches('/').split('/').collect();
        match segs.as_slice() {
            ["live"] => Route::Live,
            ["health"] => Route::Health,
            ["ready"] => Route::Ready,
            ["metrics"] => Route::Metrics,
            ["api", "assisted-install", "v2", "infra-envs", infra_env_id, "hosts", rest @ ..] => {
                let call = match rest {
                    [] => AgentCall::Hosts,
                    [host] => AgentCall::Host(host),
                    [host, "instructions"] => AgentCall::Instructions(host),
                    [host, "progress"] => AgentCall::Progress(host),
                    _ => AgentCall::Unknown,
                };
                Route::Agent { infra_env_id, call }
            }
            ["api", "assisted-install", "v2", "clusters", cluster_id, "logs"] => Route::ClusterLogs { cluster_id },
            ["api", "assisted-install", "v2", "events"] => Route::Events,
            ["api", "assisted-install", "v2", "clusters", cluster_id, "uploads", "credentials"] => {
                Route::ClusterCredentials { cluster_id }
            }
            ["api", "assisted-install", "v2", "infra-envs", id, "downloads", "files"] => Route::InfraEnvFiles { id },
            ["images", id] => Route::Image { id },
            ["images", id, "pxe-initrd"] => Route::PxeInitrd { id },
            ["images", id, "s390x-initrd-addrsize"] => Route::InitrdAddrsize { id },
            [prefix @ ("byid" | "byapikey" | "bytoken" | "s"), key, version, arch, file] => {
                let by = match *prefix {
                    "byid" => IsoUrl::ById,
                    "byapikey" => IsoUrl::ByApiKey,
                    "s" => IsoUrl::Short,
                    _ => IsoUrl::ByToken,
                };
                Route::IsoFile { by, key, version, arch, file }
            }
            ["boot-artifacts", version, arch, "rootfs.img"] => Route::VersionedRootfs { version, arch },
            ["boot-artifacts", artifact] => Route::BootArtifact { artifact },
            ["apis", ..] | ["api", "v1", ..] | ["api"] | ["version"] | ["openapi", ..] => Route::Resources,
            ["admission", "validate"] => Route::Admission,
            [first, ..] => {
                let label = match *first {
                    "byid" => "/byid/:token",
                    "byapikey" => "/byapikey/:token",
                    "bytoken" => "/bytoken/:token",
                    "s" => "/s/:token",
                    _ => "other",
                };
                let image_family =
                    matches!(*first, "images" | "byid" | "byapikey" | "bytoken" | "s" | "boot-artifacts")
                        || segs.starts_with(&["api", "assisted-install"]);
                Route::Unmatched { label, image_family }
            }
            [] => Route::Unmatched { label: "other", image_family: false },
        }
    }

    /// The route's name in metrics and logs: bounded (never an id from the path, which would let
    /// clients grow the label set without end).
    pub fn label(&self) -> &'static str {
        match self {
            Route::Live => "/live",
            Route::Health => "/health",
            Route::Ready => "/ready",
            Route::Metrics => "/metrics",
            Route::Agent { call, .. } => match call {
                AgentCall::Hosts => "/v2/infra-envs/:id/hosts",
                AgentCall::Host(_) => "/v2/infra-envs/:id/hosts/:host",
                AgentCall::Instructions(_) => "/v2/infra-envs/:id/hosts/:host/instructions",
                AgentCall::Progress(_) => "/v2/infra-envs/:id/hosts/:host/progress",
                AgentCall::Unknown => "other",
            },
            Route::ClusterLogs { .. } => "/v2/clusters/:id/logs",
            Route::Events => "/v2/events",
            Route::ClusterCredentials { .. } => "/v2/clusters/:id/uploads/credentials",
            Route::Image { .. } => "/images/:imageID",
            Route::PxeInitrd { .. } => "/images/:imageID/pxe-initrd",
            Route::InitrdAddrsize { .. } => "/images/:imageID/s390x-initrd-addrsize",
            Route::IsoFile { by: IsoUrl::ById, .. } => "/byid/:token",
            Route::IsoFile { by: IsoUrl::ByApiKey, .. } => "/byapikey/:token",
            Route::IsoFile { by: IsoUrl::ByToken, .. } => "/bytoken/:token",
            Route::IsoFile { by: IsoUrl::Short, .. } => "/s/:token",
            Route::VersionedRootfs { .. } => "/boot-artifacts/rootfs",
            Route::BootArtifact { artifact: "kernel" } => "/boot-artifacts/kernel",
            Route::BootArtifact { artifact: "rootfs" } => "/boot-artifacts/rootfs",
            Route::BootArtifact { .. } => "other",
            Route::InfraEnvFiles { .. } => "/v2/infra-envs/:id/downloads/files",
            Route::Resources => "/apis",
            Route::Admission => "/admission/validate",
            Route::Unmatched { label, .. } => label,
        }
    }

    /// Whether the route streams image bytes: what the download limit counts.
    pub fn is_download(&self) -> bool {
        matches!(
            self,
            Route::Image { .. }
                | Route::PxeInitrd { .. }
                | Route::InitrdAddrsize { .. }
                | Route::IsoFile { .. }
                | Route::VersionedRootfs { .. }
                | Route::BootArtifact { artifact: "kernel" | "rootfs" }
        ) || matches!(self, Route::Unmatched { label, .. } if label.starts_with("/by"))
    }

    /// Whether the route takes only GET and HEAD: everything that serves images and files, and the
    /// assisted paths other than the agent API's.
    pub fn read_only(&self) -> bool {
        match self {
            Route::Image { .. }
            | Route::PxeInitrd { .. }
            | Route::InitrdAddrsize { .. }
            | Route::IsoFile { .. }
            | Route::VersionedRootfs { .. }
            | Route::BootArtifact { .. }
            | Route::InfraEnvFiles { .. }
            | Route::ClusterLogs { .. }
            | Route::Events => true,
            Route::Unmatched { image_family, .. } => *image_family,
            _ => false,
        }
    }

    /// What the plain-HTTP listener beside HTTPS serves: what iPXE fetches (its script, the kernel,
    /// the PXE initrd) and the rootfs the booted initramfs fetches, as assisted-image-service's HTTP
    /// port serves only `/pxe-initrd` (spec-images.md §7.1); plus health checks. ISOs, Ignition, the
    /// agent API and the resource API carry secrets or take writes and are served over HTTPS only.
    pub fn plain_http_ok(&self, uri: &http::Uri) -> bool {
        match self {
            Route::Live | Route::Health | Route::Ready => true,
            Route::PxeInitrd { .. } | Route::VersionedRootfs { .. } => true,
            Route::BootArtifact { artifact } => matches!(*artifact, "kernel" | "rootfs"),
            Route::InfraEnvFiles { .. } => query_map(uri).get("file_name").is_some_and(|f| f == "ipxe-script"),
            _ => false,
        }
    }
}

/// [`Route::plain_http_ok`] of a request's URI, as the plain-HTTP listener asks it.
pub fn served_over_plain_http(_method: &http::Method, uri: &http::Uri, _headers: &http::HeaderMap) -> bool {
    Route::parse(uri.path()).plain_http_ok(uri)
}

/// Whether a request is one for the server's API token (the bearer token of
/// `DATA_DIR/api-token`): the Kubernetes API, discovery and OpenAPI included, and host-log and
/// event reads that do not come with the signed URL of a status's logsURL or eventsURL (or that
/// carry an `Authorization` header, which would be compared with the token). Decided from the head
/// alone.
pub fn takes_api_token(method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
    match Route::parse(uri.path()) {
        Route::Resources => true,
        Route::ClusterLogs { .. } | Route::Events if method == http::Method::GET || method == http::Method::HEAD => {
            headers.contains_key(http::header::AUTHORIZATION) || !query_map(uri).contains_key("api_key")
        }
        _ => false,
    }
}

/// What the main listener serves when the API has an HTTPS listener of its own and the main one is
/// plain HTTP: everything but what takes the API token, which must not cross the provisioning
/// network in clear.
pub fn served_beside_the_api_listener(method: &http::Method, uri: &http::Uri, headers: &http::HeaderMap) -> bool {
    !takes_api_token(method, uri, headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_parses_to_its_route_and_label() {
        let cases: &[(&str, &str)] = &[
            ("/live", "/live"),
            ("/health", "/health"),
            ("/ready", "/ready"),
            ("/metrics", "/metrics"),
            ("/api/assisted-install/v2/infra-envs/E/hosts", "/v2/infra-envs/:id/hosts"),
            ("/api/assisted-install/v2/infra-envs/E/hosts/H", "/v2/infra-envs/:id/hosts/:host"),
            (
                "/api/assisted-install/v2/infra-envs/E/hosts/H/instructions",
                "/v2/infra-envs/:id/hosts/:host/instructions",
            ),
            ("/api/assisted-install/v2/infra-envs/E/hosts/H/progress", "/v2/infra-envs/:id/hosts/:host/progress"),
            ("/api/assisted-install/v2/infra-envs/E/hosts/H/x/y", "other"),
            ("/api/assisted-install/v2/clusters/C/logs", "/v2/clusters/:id/logs"),
            ("/api/assisted-install/v2/clusters/C/uploads/credentials", "/v2/clusters/:id/uploads/credentials"),
            ("/api/assisted-install/v2/events", "/v2/events"),
            ("/api/assisted-install/v2/events/x", "other"),
            ("/api/assisted-install/v2/clusters/C/uploads/other", "other"),
            ("/images/E", "/images/:imageID"),
            ("/images/E/pxe-initrd", "/images/:imageID/pxe-initrd"),
            ("/images/E/s390x-initrd-addrsize", "/images/:imageID/s390x-initrd-addrsize"),
            ("/images/E/other", "other"),
            ("/byid/E/4.19/x86_64/full.iso", "/byid/:token"),
            ("/byid/E", "/byid/:token"),
            ("/byapikey/T/4.19/x86_64/full.iso", "/byapikey/:token"),
            ("/bytoken/T/4.19/x86_64/minimal.iso", "/bytoken/:token"),
            ("/s/T/4.19/x86_64/full.iso", "/s/:token"),
            ("/s/T", "/s/:token"),
            ("/boot-artifacts/4.19/x86_64/rootfs.img", "/boot-artifacts/rootfs"),
            ("/boot-artifacts/kernel", "/boot-artifacts/kernel"),
            ("/boot-artifacts/rootfs", "/boot-artifacts/rootfs"),
            ("/boot-artifacts/initrd", "other"),
            ("/api/assisted-install/v2/infra-envs/E/downloads/files", "/v2/infra-envs/:id/downloads/files"),
            ("/apis/agent-install.openshift.io/v1beta1/namespaces/n/infraenvs", "/apis"),
            ("/api/v1/namespaces/n/secrets", "/apis"),
            ("/admission/validate", "/admission/validate"),
            ("/admission/validate/x", "other"),
            ("/admission", "other"),
            ("/", "other"),
            ("/%00/../etc", "other"),
        ];
        for (path, label) in cases {
            assert_eq!(Route::parse(path).label(), *label, "{path}");
        }
    }

    #[test]
    fn what_takes_the_api_token_is_not_served_beside_the_api_listener() {
        let bearer = {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("Bearer t"));
            h
        };
        let none = http::HeaderMap::new();
        let ok =
            |m: http::Method, p: &str, h: &http::HeaderMap| served_beside_the_api_listener(&m, &p.parse().unwrap(), h);
        for p in [
            "/api",
            "/api/v1",
            "/api/v1/secrets",
            "/api/v1/namespaces/n/secrets/s",
            "/apis",
            "/apis/agent-install.openshift.io/v1beta1/infraenvs",
            "/version",
            "/openapi/v2",
            "/openapi/v3/apis/agent-install.openshift.io/v1beta1",
        ] {
            assert!(!ok(http::Method::GET, p, &bearer), "{p}");
            assert!(!ok(http::Method::POST, p, &none), "{p}");
            // Everything the Kubernetes API answers is refused (what it does not answer too).
            if crate::api::kube::KubeApi::serves(p) {
                assert!(takes_api_token(&http::Method::GET, &p.parse().unwrap(), &none), "{p}");
            }
        }
        let logs = "/api/assisted-install/v2/clusters/C/logs?logs_type=host&host_id=H";
        assert!(!ok(http::Method::GET, logs, &bearer));
        assert!(!ok(http::Method::GET, logs, &none));
        // The Agent's signed logsURL takes no token; with a token besides, it is refused.
        let signed = "/api/assisted-install/v2/clusters/C/logs?logs_type=host&host_id=H&api_key=jwt";
        assert!(ok(http::Method::GET, signed, &none));
        assert!(!ok(http::Method::GET, signed, &bearer));
        // Events likewise: the eventsURL's api_key, or the API token (never beside its listener).
        let events = "/api/assisted-install/v2/events?host_id=H";
        assert!(!ok(http::Method::GET, events, &none));
        assert!(!ok(http::Method::HEAD, events, &bearer));
        assert!(ok(http::Method::GET, "/api/assisted-install/v2/events?host_id=H&api_key=jwt", &none));
        assert!(!ok(http::Method::GET, "/api/assisted-install/v2/events?host_id=H&api_key=jwt", &bearer));
        // The installer's uploads, the agent API, images and health stay.
        assert!(ok(http::Method::POST, "/api/assisted-install/v2/clusters/C/logs?infra_env_id=E", &none));
        assert!(ok(http::Method::GET, "/api/assisted-install/v2/infra-envs/E/hosts", &none));
        assert!(ok(http::Method::GET, "/images/E/pxe-initrd", &none));
        assert!(ok(http::Method::GET, "/ready", &none));
        assert!(ok(http::Method::GET, "/metrics", &none));
    }

    #[test]
    fn the_plain_http_port_serves_what_ipxe_and_the_initramfs_fetch() {
        let ok = |p: &str| served_over_plain_http(&http::Method::GET, &p.parse().unwrap(), &http::HeaderMap::new());
        assert!(ok("/images/E/pxe-initrd?version=4.19"));
        assert!(ok("/boot-artifacts/kernel?version=4.19"));
        assert!(ok("/boot-artifacts/4.19/x86_64/rootfs.img"));
        assert!(ok("/api/assisted-install/v2/infra-envs/E/downloads/files?file_name=ipxe-script"));
        assert!(ok("/ready"));
        assert!(!ok("/api/assisted-install/v2/infra-envs/E/downloads/files?file_name=discovery.ign"));
        assert!(!ok("/images/E?version=4.19&type=full-iso"));
        assert!(!ok("/byid/E/4.19/x86_64/full.iso"));
        assert!(!ok("/s/T/4.19/x86_64/full.iso"));
        assert!(!ok("/boot-artifacts/initrd"));
        assert!(!ok("/api/assisted-install/v2/infra-envs/E/hosts"));
        assert!(!ok("/apis/agent-install.openshift.io/v1beta1/infraenvs"));
        assert!(!ok("/metrics"));
        assert!(!ok("/admission/validate"));
    }

    #[test]
    fn downloads_and_read_only_routes() {
        assert!(Route::parse("/images/E").is_download());
        assert!(Route::parse("/boot-artifacts/kernel").is_download());
        assert!(!Route::parse("/api/assisted-install/v2/infra-envs/E/downloads/files").is_download());
        assert!(Route::parse("/api/assisted-install/v2/infra-envs/E/downloads/files").read_only());
        assert!(Route::parse("/api/assisted-install/v2/other").read_only());
        assert!(!Route::parse("/api/assisted-install/v2/infra-envs/E/hosts").read_only());
        assert!(!Route::parse("/apis/x").read_only());
    }
}
