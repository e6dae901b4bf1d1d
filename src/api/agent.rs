//! The agent API: the part of assisted-service's v2 REST API a discovery agent talks to (swagger
//! `v2RegisterHost`, `v2GetNextSteps`, `v2PostStepReply`, `v2UpdateHostInstallProgress`, `v2GetHost`,
//! `v2ListHosts`), authenticated per InfraEnv with the `X-Secret-Key` token its image carries.
//!
//! Registration also creates the host's Agent resource (spec-controllers.md §3.11); everything after that
//! reaches the Agent through the agent controller, which watches the backend.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::route::AgentCall;
use crate::auth::{AGENT_AUTH_HEADER, AgentAuth};
use crate::hosts::instructions::{self, BootArtifactUrls};
use crate::hosts::{Host, HostKey};
use crate::http::Body;
use crate::image::Images;
use crate::pool::{ApiError, Backend};
use crate::resources::agent::{Agent, AgentSpec, ClusterDeploymentReference};
use crate::resources::{INFRAENV_NAME_LABEL, InfraEnv};
use crate::store::{Store, StoreError};

pub struct AgentApi<S: Store> {
    pub backend: Arc<Backend>,
    pub images: Arc<Images<S>>,
    pub auth: AgentAuth,
    pub logs: Arc<crate::pool::logs::HostLogs>,
    /// The fraction by which `next_instruction_seconds` varies at random (see
    /// [`instructions::jittered`]); 0 gives spec-controllers.md §1.4's intervals exactly.
    pub poll_jitter: f64,
}

#[derive(Deserialize)]
struct HostCreateParams {
    host_id: String,
    #[serde(default)]
    discovery_agent_version: Option<String>,
}

#[derive(Deserialize)]
struct StepReply {
    #[serde(default)]
    step_type: String,
    #[serde(default)]
    step_id: String,
    #[serde(default)]
    exit_code: i64,
    #[serde(default)]
    output: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct HostProgress {
    current_stage: String,
    #[serde(default)]
    progress_info: String,
}

/// The swagger `error` model.
pub(super) fn error(status: u16, reason: &str) -> Response<Body> {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    crate::http::json(
        code,
        &json!({"kind": "Error", "id": status, "code": status.to_string(), "href": "", "reason": reason}),
    )
}

/// The swagger `infra_error` model (401/403).
pub(super) fn infra_error(status: StatusCode, message: &str) -> Response<Body> {
    crate::http::json(status, &json!({"code": status.as_u16(), "message": message}))
}

fn not_in_infraenv(infra_env_id: &str, host_id: &str) -> Response<Body> {
    error(404, &format!("host {host_id} not found in infra-env {infra_env_id}"))
}

fn api_error(e: &ApiError) -> Response<Body> {
    error(e.status, &e.message)
}

#[allow(clippy::result_large_err)] // the error is the response itself, built once
fn parse<T: for<'de> Deserialize<'de>>(body: &Bytes, what: &str) -> Result<T, Response<Body>> {
    serde_json::from_slice(body).map_err(|e| error(400, &format!("invalid {what}: {e}")))
}

impl<S: Store> AgentApi<S> {
    /// Answers a call under `/api/assisted-install/v2/infra-envs/{infra_env_id}/hosts`.
    pub async fn handle(&self, req: &Request<Bytes>, infra_env_id: &str, call: AgentCall<'_>) -> Response<Body> {
        if let Some(refused) = self.token_refusal(req.headers(), infra_env_id) {
            return refused;
        }
        let agent_version =
            req.headers().get("discovery_agent_version").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        match (req.method(), call) {
            (&Method::POST, AgentCall::Hosts) => self.register(infra_env_id, req.body(), &agent_version).await,
            (&Method::GET, AgentCall::Hosts) => self.list(infra_env_id).await,
            (&Method::GET, AgentCall::Host(host_id)) => match self.own_host(infra_env_id, host_id).await {
                Ok(h) => crate::http::json(StatusCode::OK, &host_view(&h)),
                Err(r) => r,
            },
            (&Method::GET, AgentCall::Instructions(host_id)) => self.next_steps(infra_env_id, host_id).await,
            (&Method::POST, AgentCall::Instructions(host_id)) => {
                self.step_reply(infra_env_id, host_id, req.body()).await
            }
            (&Method::PUT, AgentCall::Progress(host_id)) => self.progress(infra_env_id, host_id, req.body()).await,
            (m, _) => error(405, &format!("method {m} is not allowed here")),
        }
    }

    /// `POST /api/assisted-install/v2/clusters/{cluster_id}/logs` (`V2UploadLogs`): a host's logs,
    /// sent by the installer with the agent token of the host's InfraEnv.
    pub async fn upload_logs(
        &self,
        head: &http::request::Parts,
        cluster_id: &str,
        body: crate::http::UploadBody,
    ) -> Response<Body> {
        let q = crate::http::query::query_map(&head.uri);
        let param = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
        match param("logs_type") {
            "host" => {}
            "controller" => return error(400, "controller logs are not kept: only logs_type=host is accepted"),
            "" => return error(400, "logs_type is required"),
            other => return error(400, &format!("logs_type {other:?} is not one of host, controller")),
        }
        let (infra_env_id, host_id) = (param("infra_env_id"), param("host_id"));
        if infra_env_id.is_empty() || host_id.is_empty() {
            return error(400, "host logs need infra_env_id and host_id");
        }
        if let Some(refused) = self.token_refusal(&head.headers, infra_env_id) {
            return refused;
        }
        let host = match self.own_host(infra_env_id, host_id).await {
            Ok(h) => h,
            Err(r) => return r,
        };
        if host.cluster_id.as_deref() != Some(cluster_id) {
            return error(404, &format!("host {host_id} is not a host of cluster {cluster_id}"));
        }
        let content_type = head.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let sha256 = match self.logs.store(cluster_id, host_id, content_type, body).await {
            Ok(sha) => sha,
            Err(e) => return error(e.status, &e.message),
        };
        match self.backend.logs_uploaded(&host.key(), sha256).await {
            Ok(_) => Response::builder().status(StatusCode::NO_CONTENT).body(Body::Empty).expect("valid response"),
            Err(e) => api_error(&e),
        }
    }

    /// `PUT /api/assisted-install/v2/clusters/{cluster_id}/uploads/credentials?file_name=&infra_env_id=&host_id=`:
    /// one of the cluster's admin credentials (`kubeconfig`, `kubeadmin-password`), the body the file.
    ///
    /// assisted-service makes these files itself, when it generates the cluster's Ignition configs;
    /// bootstream does not run the OpenShift installer, so the bootstrap host's installer, which
    /// has them, reports them here (the files `V2DownloadClusterCredentials` names). Only that
    /// host, with its InfraEnv's token, of a cluster still being installed, may: no other host and
    /// no other cluster's agent can write them, and once the cluster is installed they are final.
    /// What the request names never becomes a Secret's name or namespace; the cluster controller
    /// puts them in the ClusterDeployment's own `<name>-admin-kubeconfig` and `<name>-admin-password`.
    pub async fn upload_credentials(&self, req: &Request<Bytes>, cluster_id: &str) -> Response<Body> {
        let q = crate::http::query::query_map(req.uri());
        let param = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
        let (infra_env_id, host_id) = (param("infra_env_id"), param("host_id"));
        if let Some(refused) = self.token_refusal(req.headers(), infra_env_id) {
            return refused;
        }
        let Some(file) = crate::pool::CredentialFile::from_name(param("file_name")) else {
            return error(400, "file_name must be one of kubeconfig, kubeadmin-password");
        };
        let host = match self.own_host(infra_env_id, host_id).await {
            Ok(h) => h,
            Err(r) => return r,
        };
        if host.cluster_id.as_deref() != Some(cluster_id) {
            return error(404, &format!("host {host_id} is not a host of cluster {cluster_id}"));
        }
        if !host.bootstrap {
            return error(403, &format!("host {host_id} is not the bootstrap host of cluster {cluster_id}"));
        }
        let Some(cluster) = self.backend.cluster(cluster_id).await else {
            return error(404, &format!("cluster {cluster_id} not found"));
        };
        if cluster.is_day2()
            || !matches!(cluster.status.as_str(), "preparing-for-installation" | "installing" | "finalizing")
        {
            return error(
                409,
                &format!(
                    "cluster {cluster_id} is {}: its credentials are taken only while it installs",
                    cluster.status
                ),
            );
        }
        let value = match file.check(req.body()) {
            Ok(v) => v,
            Err(e) => return api_error(&e),
        };
        match self.backend.put_credential(cluster_id, file, value).await {
            Ok(()) => {
                tracing::info!(cluster = %cluster_id, host = %host_id, file = file.name(), "cluster credentials uploaded");
                Response::builder().status(StatusCode::CREATED).body(Body::Empty).expect("valid response")
            }
            Err(e) => api_error(&e),
        }
    }

    /// The answer to a request whose `X-Secret-Key` is missing or not InfraEnv `infra_env_id`'s;
    /// None when it is. Checked from the head, before any body is read (`App::admit`), and again
    /// by every handler.
    pub fn token_refusal(&self, headers: &http::HeaderMap, infra_env_id: &str) -> Option<Response<Body>> {
        let token = headers.get(AGENT_AUTH_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
        if token.is_empty() {
            return Some(infra_error(StatusCode::UNAUTHORIZED, "missing X-Secret-Key"));
        }
        if !self.auth.verify(infra_env_id, token) {
            return Some(infra_error(StatusCode::UNAUTHORIZED, "the token is not valid for this infra-env"));
        }
        None
    }

    /// The record of host `host_id` of InfraEnv `infra_env_id`: the InfraEnv of the path, which the
    /// request's token was checked for. Records are keyed by both, so no id a request names can
    /// reach another InfraEnv's host.
    async fn own_host(&self, infra_env_id: &str, host_id: &str) -> Result<Host, Response<Body>> {
        self.backend
            .host(&HostKey::new(infra_env_id, host_id))
            .await
            .ok_or_else(|| not_in_infraenv(infra_env_id, host_id))
    }

    /// Like [`Self::own_host`], for requests that do not need the record.
    async fn check_own_host(&self, infra_env_id: &str, host_id: &str) -> Result<HostKey, Response<Body>> {
        let key = HostKey::new(infra_env_id, host_id);
        if self.backend.has_host(&key).await { Ok(key) } else { Err(not_in_infraenv(infra_env_id, host_id)) }
    }

    async fn infraenv(&self, infra_env_id: &str) -> Result<InfraEnv, Response<Body>> {
        match self.images.store.get_by_uid::<InfraEnv>(infra_env_id).await {
            Ok(Some(ie)) => Ok(ie),
            Ok(None) => Err(error(404, &format!("infra-env {infra_env_id} not found"))),
            Err(e) => Err(error(500, &crate::errors::chain(&e).to_string())),
        }
    }

    async fn register(&self, infra_env_id: &str, body: &Bytes, header_version: &str) -> Response<Body> {
        let params: HostCreateParams = match parse(body, "host-create-params") {
            Ok(p) => p,
            Err(r) => return r,
        };
        let Ok(host_id) = uuid::Uuid::parse_str(&params.host_id) else {
            return error(400, &format!("host_id {:?} is not a UUID", params.host_id));
        };
        let host_id = host_id.to_string();
        let agent_version = params.discovery_agent_version.unwrap_or_else(|| header_version.to_string());
        let ie = match self.infraenv(infra_env_id).await {
            Ok(ie) => ie,
            Err(r) => return r,
        };
        // A host its InfraEnv's teardown has deleted must not come back while the InfraEnv waits for
        // the hosts that hold it.
        if ie.metadata.deletion_timestamp.is_some() {
            return error(409, &format!("infra-env {infra_env_id} is being deleted"));
        }
        // Hosts of an InfraEnv with a clusterRef belong to that cluster from the start.
        let bound_cluster = match &ie.spec.cluster_ref {
            Some(r) => match self.backend.cluster_by_kube_key(&r.namespace, &r.name).await {
                Some(c) => Some(c.id),
                None => {
                    return error(
                        404,
                        &format!(
                            "cluster of ClusterDeployment {}/{} not found for infra-env {infra_env_id}",
                            r.namespace, r.name
                        ),
                    );
                }
            },
            None => None,
        };
        let ns = ie.metadata.namespace.clone().unwrap_or_default();
        let (host, replaced) =
            match self.backend.register_host(infra_env_id, &ns, &host_id, &agent_version, bound_cluster).await {
                Ok(x) => x,
                Err(e) => return api_error(&e),
            };
        if let Some(old) = &replaced {
            tracing::info!(host = %host_id, from = %old.infra_env_id, to = %infra_env_id, namespace = %ns, "host moved to another infra-env of its namespace");
        }
        if let Err(e) = self.ensure_agent(&ie, &host, replaced.is_some()).await {
            return error(500, &format!("failed to create the Agent of host {host_id}: {}", crate::errors::chain(&e)));
        }
        let mut view = host_view(&host);
        view["next_step_runner_command"] = json!({
            "command": "next_step_runner",
            "args": ["--url", self.images.config.base_url, "--infra-env-id", infra_env_id, "--host-id", host_id,
                     "--agent-version", agent_version],
            "retry_seconds": 30,
        });
        crate::http::json(StatusCode::CREATED, &view)
    }

    /// Gives every host record its Agent. Registration writes the host, then creates the Agent: a
    /// process killed in between leaves a host that no controller sees and whose agent, still running,
    /// never registers again. Also records the namespace of host records written before it was
    /// kept. Run at start, before serving. Returns how many Agents were created.
    pub async fn restore_missing_agents(&self) -> Result<usize, StoreError> {
        let mut created = 0;
        let mut infraenvs: std::collections::HashMap<String, Option<InfraEnv>> = Default::default();
        for host in self.backend.hosts(|_| true).await {
            if !infraenvs.contains_key(&host.infra_env_id) {
                let ie = self.images.store.get_by_uid::<InfraEnv>(&host.infra_env_id).await?;
                infraenvs.insert(host.infra_env_id.clone(), ie);
            }
            let Some(ie) = &infraenvs[&host.infra_env_id] else { continue };
            let ns = ie.metadata.namespace.clone().unwrap_or_default();
            let mut host = host;
            if host.namespace.is_empty() {
                if let Err(e) = self.backend.set_namespace(&host.key(), &ns).await {
                    let error = crate::errors::chain(&e);
                    tracing::warn!(host = %host.id, namespace = %ns, "host record without its namespace: {error}");
                    continue;
                }
                host.namespace = ns.clone();
            }
            if self.images.store.get::<Agent>(&ns, &host.id).await?.is_none() {
                tracing::info!(host = %host.id, namespace = %ns, "creating the Agent of a host registered before a crash");
                self.ensure_agent(ie, &host, false).await?;
                created += 1;
            }
        }
        Ok(created)
    }

    /// Creates the host's Agent (spec-controllers.md §3.11), or resets the spec of the Agent of its name when the host
    /// moved here from another InfraEnv of the namespace (`moved`: its record there is gone), or
    /// when that Agent names another InfraEnv by both its label and its owner.
    async fn ensure_agent(&self, ie: &InfraEnv, host: &Host, moved: bool) -> Result<(), StoreError> {
        let store = &self.images.store;
        let ns = ie.metadata.namespace.clone().unwrap_or_default();
        let ie_name = ie.metadata.name.clone().unwrap_or_default();
        let ie_uid = ie.metadata.uid.clone().unwrap_or_default();
        let mut labels: BTreeMap<String, String> = ie.spec.agent_labels.clone();
        labels.insert(INFRAENV_NAME_LABEL.to_string(), ie_name.clone());
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "agent-install.openshift.io/v1beta1".into(),
            kind: "InfraEnv".into(),
            name: ie_name,
            uid: ie_uid.clone(),
            ..Default::default()
        };
        let cluster_ref = ie
            .spec
            .cluster_ref
            .as_ref()
            .map(|r| ClusterDeploymentReference { name: r.name.clone(), namespace: r.namespace.clone() });
        let of_this_infraenv = |agent: &Agent| {
            agent
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|o| o.iter().any(|o| o.kind == "InfraEnv" && o.uid == ie_uid))
                || agent.metadata.labels.as_ref().and_then(|l| l.get(INFRAENV_NAME_LABEL)) == Some(&owner.name)
        };
        // The agent controller may write the Agent meanwhile (its host just left the other
        // InfraEnv): a conflicting update is made again on the Agent as it is then.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let result = match store.get::<Agent>(&ns, &host.id).await? {
                Some(agent) if !moved && of_this_infraenv(&agent) => Ok(()),
                Some(mut agent) => {
                    agent.metadata.labels = Some(labels.clone());
                    agent.metadata.owner_references = Some(vec![owner.clone()]);
                    agent.spec = AgentSpec { cluster_deployment_name: cluster_ref.clone(), ..Default::default() };
                    store.update(&agent).await.map(|_| ())
                }
                None => self.create_agent(host, &ns, &labels, &owner, &cluster_ref).await,
            };
            match result {
                Err(e) if e.is_conflict() && attempts < 5 => continue,
                other => return other,
            }
        }
    }

    async fn create_agent(
        &self,
        host: &Host,
        ns: &str,
        labels: &BTreeMap<String, String>,
        owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
        cluster_ref: &Option<ClusterDeploymentReference>,
    ) -> Result<(), StoreError> {
        let store = &self.images.store;
        let mut agent =
            Agent::new(&host.id, AgentSpec { cluster_deployment_name: cluster_ref.clone(), ..Default::default() });
        agent.metadata.namespace = Some(ns.to_string());
        agent.metadata.labels = Some(labels.clone());
        agent.metadata.owner_references = Some(vec![owner.clone()]);
        match store.create(&agent).await {
            Ok(_) => Ok(()),
            // A retried registration raced with the first one.
            Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn list(&self, infra_env_id: &str) -> Response<Body> {
        let hosts = self.backend.infra_env_hosts(infra_env_id, |_| true).await;
        crate::http::json(StatusCode::OK, &Value::Array(hosts.iter().map(host_view).collect()))
    }

    async fn next_steps(&self, infra_env_id: &str, host_id: &str) -> Response<Body> {
        let key = match self.check_own_host(infra_env_id, host_id).await {
            Ok(key) => key,
            Err(r) => return r,
        };
        let host = match self.backend.check_in(&key).await {
            Ok(h) => h,
            Err(e) => return api_error(&e),
        };
        let urls = if host.status == crate::hosts::HostStatus::Reclaiming {
            match self.boot_artifact_urls(infra_env_id).await {
                Ok(u) => Some(u),
                Err(r) => return r,
            }
        } else {
            None
        };
        let cluster = match &host.cluster_id {
            Some(c) => self.backend.cluster(c).await,
            None => None,
        };
        let mut steps =
            instructions::next_steps(&host, urls.as_ref(), cluster.as_ref().map(|c| c.openshift_version.as_str()));
        steps.next_instruction_seconds = instructions::jittered(steps.next_instruction_seconds, self.poll_jitter);
        crate::http::json(StatusCode::OK, &steps)
    }

    /// The URLs a reclaimed node downloads (spec-controllers.md §7.3): the InfraEnv's kernel, initrd and rootfs.
    async fn boot_artifact_urls(&self, infra_env_id: &str) -> Result<BootArtifactUrls, Response<Body>> {
        let ie = self.infraenv(infra_env_id).await?;
        let base = self.images.selected_base(&ie).map_err(|e| error(500, &crate::errors::chain(&e).to_string()))?;
        let urls = self.images.urls(&ie, &base);
        Ok(BootArtifactUrls { kernel_url: urls.kernel, initrd_url: urls.initrd, rootfs_url: urls.rootfs })
    }

    async fn step_reply(&self, infra_env_id: &str, host_id: &str, body: &Bytes) -> Response<Body> {
        let key = match self.check_own_host(infra_env_id, host_id).await {
            Ok(key) => key,
            Err(r) => return r,
        };
        let reply: StepReply = match parse(body, "step-reply") {
            Ok(r) => r,
            Err(r) => return r,
        };
        let result = match reply.step_type.as_str() {
            "inventory" if reply.exit_code == 0 => self.backend.update_inventory(&key, reply.output).await,
            "download-boot-artifacts" => {
                if reply.exit_code != 0 {
                    tracing::warn!(host = host_id, step = %reply.step_id, "reclaim download failed: {}", reply.error);
                }
                self.backend.reclaim_download_done(&key, reply.exit_code == 0).await.map(|_| ())
            }
            _ => self.backend.touch(&key).await,
        };
        match result {
            Ok(_) => Response::builder().status(StatusCode::NO_CONTENT).body(Body::Empty).expect("valid response"),
            Err(e) => api_error(&e),
        }
    }

    async fn progress(&self, infra_env_id: &str, host_id: &str, body: &Bytes) -> Response<Body> {
        let key = match self.check_own_host(infra_env_id, host_id).await {
            Ok(key) => key,
            Err(r) => return r,
        };
        let p: HostProgress = match parse(body, "host-progress") {
            Ok(p) => p,
            Err(r) => return r,
        };
        match self.backend.update_progress(&key, &p.current_stage, &p.progress_info).await {
            Ok(_) => Response::builder().status(StatusCode::OK).body(Body::Empty).expect("valid response"),
            Err(e) => api_error(&e),
        }
    }
}

fn ts(t: &Option<jiff::Timestamp>) -> Value {
    t.map(|t| Value::String(t.to_string())).unwrap_or(Value::Null)
}

/// A host as the swagger `host` model shows it.
pub fn host_view(h: &Host) -> Value {
    json!({
        "kind": "Host",
        "id": h.id,
        "href": format!("/api/assisted-install/v2/infra-envs/{}/hosts/{}", h.infra_env_id, h.id),
        "infra_env_id": h.infra_env_id,
        "cluster_id": h.cluster_id,
        "status": h.status.as_str(),
        "status_info": h.status_info,
        "status_updated_at": h.status_updated_at.to_string(),
        "role": h.role,
        "suggested_role": h.suggested_role,
        "bootstrap": h.bootstrap,
        "inventory": h.inventory.as_deref().unwrap_or_default(),
        "validations_info": h.validations_info.clone().unwrap_or_default(),
        "progress": {
            "current_stage": h.progress.current_stage,
            "progress_info": h.progress.progress_info,
            "installation_percentage": h.progress.installation_percentage,
            "stage_started_at": ts(&h.progress.stage_started_at),
            "stage_updated_at": ts(&h.progress.stage_updated_at),
        },
        "checked_in_at": ts(&h.checked_in_at),
        "registered_at": h.registered_at.to_string(),
        "created_at": h.registered_at.to_string(),
        "discovery_agent_version": h.discovery_agent_version,
        "requested_hostname": h.requested_hostname,
        "installation_disk_id": h.installation_disk_id,
        "installation_disk_path": h.installation_disk_path,
        "installer_args": h.installer_args,
        "ignition_config_overrides": h.ignition_config_overrides,
        "machine_config_pool_name": h.machine_config_pool_name,
        "approved": h.approved,
    })
}
