//! Host logs through the API: the download behind an Agent's logsURL, for whoever holds that URL
//! or the API token. (Uploads are the agent API's: `agent::AgentApi::upload_logs`.)

use bytes::Bytes;
use http::{Request, Response, StatusCode};

use super::{App, controller_only};
use crate::http::query::query_map;
use crate::http::{Body, text};
use crate::store::Store;

impl<S: Store> App<S> {
    /// A cluster's host logs are for whoever holds the Agent's logsURL (its `api_key` names the
    /// cluster) or the API token; where neither is configured (unsigned URLs on Kubernetes), anyone.
    pub(super) fn logs_refusal(&self, req: &Request<Bytes>, cluster_id: &str) -> Option<Response<Body>> {
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

    /// `GET /api/assisted-install/v2/clusters/{id}/logs?logs_type=host&host_id=...`: the logs the
    /// installer uploaded for a host (the Agent's logsURL).
    pub(super) async fn download_logs(&self, req: &Request<Bytes>, cluster_id: &str) -> Response<Body> {
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
}
