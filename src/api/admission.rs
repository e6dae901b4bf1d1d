//! The validating admission webhook of a Kubernetes hub: `POST /admission/validate` takes an
//! `admission.k8s.io/v1` AdmissionReview from the API server and answers with the decision of
//! [`crate::resources::admission`], the same the embedded resource API makes before it stores a
//! document.
//!
//! `bootstream controller` serves it on its listener and, with `--webhook-listen`, on a listener of
//! its own that serves nothing else over HTTPS ([`Webhook`]) from the moment the process starts,
//! whether or not it leads: the decision needs no state, and the controller's own writes go through
//! the webhook too, so it must answer before the controller writes anything.
//!
//! The endpoint takes no token: the API server calls it, and its answer depends on nothing but the
//! body sent (SECURITY.md).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};

use super::metrics::Metrics;
use super::route::Route;
use crate::http::{Admission, Body, Completion, Handler, RouteLabel, text};
use crate::resources::admission::{ReviewError, answer_review};

/// Largest AdmissionReview: an update carries the object written and the object it replaces, each
/// up to kube-apiserver's 3 MiB request limit, and the review's own fields.
pub const MAX_REVIEW_BYTES: usize = (6 << 20) + (64 << 10);

/// Answers one request to `/admission/validate`: 200 with the response AdmissionReview whether the
/// write is allowed or not; 405, 415 or 400 (with what is wrong) for what is not a review.
pub fn serve_review(req: &Request<Bytes>) -> Response<Body> {
    if req.method() != Method::POST {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("method {} not allowed: POST an AdmissionReview", req.method()),
        );
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return r;
    }
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "an AdmissionReview is sent as application/json, not {:?}",
                content_type.chars().take(64).collect::<String>()
            ),
        );
    }
    match answer_review(req.body()) {
        Ok(answer) => {
            match (&answer.denied, answer.kind) {
                (Some(denied), kind) => tracing::info!(
                    kind = kind.map(|k| k.name()).unwrap_or(""),
                    operation = ?answer.operation,
                    namespace = %answer.namespace,
                    name = %answer.name,
                    code = denied.code,
                    why = %denied.message,
                    "admission denied"
                ),
                (None, None) => tracing::debug!("admission review of a resource bootstream does not model: allowed"),
                (None, Some(_)) => {}
            }
            crate::http::json(StatusCode::OK, &answer.review)
        }
        Err(e @ ReviewError::NotJson(_)) | Err(e @ ReviewError::Malformed(_)) => {
            text(StatusCode::BAD_REQUEST, crate::errors::chain(&e).to_string())
        }
    }
}

/// The webhook's own listener: admission reviews and `/live`, nothing else. Requests are counted
/// in the controller's metrics once it has them ([`Webhook::count_into`]); until then (the webhook
/// answers before the controller leads) they are not.
#[derive(Default)]
pub struct Webhook {
    metrics: OnceLock<Arc<Metrics>>,
}

/// What the webhook listener answers to everything else.
const WEBHOOK_ONLY: &str = "404 page not found: this port serves only admission reviews (POST /admission/validate)";

impl Webhook {
    pub fn new() -> Arc<Webhook> {
        Arc::new(Webhook::default())
    }

    /// Counts the webhook's requests in `metrics` from now on.
    pub fn count_into(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }
}

impl Handler for Webhook {
    async fn handle(self: Arc<Self>, req: Request<Bytes>) -> Response<Body> {
        let route = Route::parse(req.uri().path());
        let metrics = self.metrics.get().cloned();
        if let Some(m) = &metrics {
            m.started(route.label());
        }
        let mut resp = match route {
            Route::Admission => serve_review(&req),
            Route::Live => text(StatusCode::OK, "ok"),
            _ => text(StatusCode::NOT_FOUND, WEBHOOK_ONLY),
        };
        // Reported as completed only if it was counted as started.
        if metrics.is_some() {
            resp.extensions_mut().insert(RouteLabel(route.label()));
        }
        resp
    }

    fn admit(&self, head: &http::request::Parts) -> Admission {
        match Route::parse(head.uri.path()) {
            Route::Admission => Admission::Body { max_bytes: MAX_REVIEW_BYTES },
            Route::Live => Admission::Body { max_bytes: super::MAX_UNUSED_BODY_BYTES },
            _ => Admission::Refuse(text(StatusCode::NOT_FOUND, WEBHOOK_ONLY)),
        }
    }

    fn completed(&self, c: Completion) {
        if let Some(m) = self.metrics.get() {
            m.completed(&c);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The embedded resource API and the webhook give the same verdict, with the same words and
    //! warnings, for the same writes: each case is written through the embedded API over its store,
    //! and sent as the API server would send it (the object as stored before, the object as the
    //! write leaves it, with the server's metadata and the old status) to the webhook.

    use std::sync::Arc;

    use bytes::Bytes;
    use http::{Method, Request, StatusCode};
    use serde_json::{Value, json};

    use crate::api::{App, DownloadLimit};
    use crate::http::{Body, Handler};
    use crate::resources::Kind;
    use crate::store::sqlite::SqliteStore;

    fn app(resources: Option<SqliteStore>, dir: &std::path::Path) -> Arc<App<SqliteStore>> {
        let store = resources.clone().unwrap_or_else(|| SqliteStore::open_in_memory().unwrap());
        let catalog = crate::image::catalog::Catalog::new(vec![]);
        let config = crate::image::ServiceConfig::new("http://bootstream.test", dir.to_path_buf());
        Arc::new(App {
            images: crate::image::Images::new(store, catalog.clone(), Arc::new(config)),
            kube: resources.map(|s| crate::api::kube::KubeApi::new(s, Arc::new(crate::api::kube::NoHooks))),
            catalog,
            metrics: crate::api::metrics::Metrics::new(Default::default(), Default::default()),
            agent_api: None,
            backend: None,
            api_token: None,
            downloads: DownloadLimit::new(1),
        })
    }

    /// (status, JSON body, Warning header texts)
    async fn call(
        app: &Arc<App<SqliteStore>>,
        method: Method,
        path: &str,
        body: &Value,
    ) -> (StatusCode, Value, Vec<String>) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Bytes::from(body.to_string()))
            .unwrap();
        let resp = app.clone().handle(req).await;
        let warnings = resp
            .headers()
            .get_all(http::header::WARNING)
            .iter()
            .map(|v| v.to_str().unwrap().trim_start_matches("299 - \"").trim_end_matches('"').replace("\\\"", "\""))
            .collect();
        let body = match resp.body() {
            Body::Bytes(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
            _ => Value::Null,
        };
        (resp.status(), body, warnings)
    }

    fn path(kind: Kind, doc: &Value) -> String {
        format!("{}/{}", collection(kind), doc["metadata"]["name"].as_str().unwrap())
    }

    fn collection(kind: Kind) -> String {
        format!("{}/namespaces/ns/{}", kind.api_prefix(), kind.plural())
    }

    struct Case {
        what: &'static str,
        kind: Kind,
        /// The object before (created through the embedded API), and the status it then has.
        old: Option<(Value, Value)>,
        new: Value,
        allowed: bool,
    }

    fn infraenv(spec: Value) -> Value {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
               "metadata": {"name": "ie", "namespace": "ns"}, "spec": spec})
    }
    fn agent(spec: Value) -> Value {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "Agent",
               "metadata": {"name": "a", "namespace": "ns"}, "spec": spec})
    }
    fn nmstate(mac: &str) -> Value {
        json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "NMStateConfig",
               "metadata": {"name": "nm", "namespace": "ns", "labels": {"a": "b"}},
               "spec": {"config": {"interfaces": []}, "interfaces": [{"name": "eth0", "macAddress": mac}]}})
    }
    fn aci(image_set: &str, extra: Value) -> Value {
        let mut doc = json!({"apiVersion": "extensions.hive.openshift.io/v1beta1", "kind": "AgentClusterInstall",
                             "metadata": {"name": "c", "namespace": "ns"},
                             "spec": {"clusterDeploymentRef": {"name": "c"}, "imageSetRef": {"name": image_set},
                                      "networking": {}, "provisionRequirements": {"controlPlaneAgents": 3}}});
        crate::store::json::merge_patch(&mut doc["spec"], &extra);
        doc
    }
    fn completed(reason: &str) -> Value {
        json!({"conditions": [{"type": "Completed", "status": "False", "reason": reason, "message": ""}]})
    }

    fn cases() -> Vec<Case> {
        let ps = json!({"name": "ps"});
        let cluster = json!({"name": "c", "namespace": "ns"});
        let bound = json!({"clusterDeploymentName": cluster});
        let installing = json!({"debugInfo": {"state": "installing-in-progress"}});
        let c = |what, kind, old: Option<(Value, Value)>, new, allowed| Case { what, kind, old, new, allowed };
        vec![
            c("a valid InfraEnv", Kind::InfraEnv, None, infraenv(json!({"pullSecretRef": ps})), true),
            c(
                "an InfraEnv without a pull secret",
                Kind::InfraEnv,
                None,
                infraenv(json!({"pullSecretRef": {"name": ""}})),
                false,
            ),
            c(
                "an InfraEnv with a cluster and an OS image version",
                Kind::InfraEnv,
                None,
                infraenv(json!({"pullSecretRef": ps, "clusterRef": cluster, "osImageVersion": "4.19"})),
                false,
            ),
            c(
                "a kernel argument with a space",
                Kind::InfraEnv,
                None,
                infraenv(json!({"pullSecretRef": ps, "kernelArguments": [{"operation": "append", "value": "a b"}]})),
                false,
            ),
            c(
                "NTP sources (warned about)",
                Kind::InfraEnv,
                None,
                infraenv(json!({"pullSecretRef": ps, "ntpSources": ["ntp.example.com"]})),
                true,
            ),
            c(
                "an InfraEnv's cluster changed",
                Kind::InfraEnv,
                Some((infraenv(json!({"pullSecretRef": ps, "clusterRef": cluster})), Value::Null)),
                infraenv(json!({"pullSecretRef": ps, "clusterRef": {"name": "d", "namespace": "ns"}})),
                false,
            ),
            c(
                "an InfraEnv's architecture changed",
                Kind::InfraEnv,
                Some((infraenv(json!({"pullSecretRef": ps})), Value::Null)),
                infraenv(json!({"pullSecretRef": ps, "cpuArchitecture": "arm64"})),
                false,
            ),
            c(
                "an InfraEnv's SSH key changed",
                Kind::InfraEnv,
                Some((infraenv(json!({"pullSecretRef": ps, "cpuArchitecture": "x86_64"})), Value::Null)),
                infraenv(json!({"pullSecretRef": ps, "sshAuthorizedKey": "ssh-ed25519 AAAA"})),
                true,
            ),
            c("a MAC address of five bytes", Kind::NMStateConfig, None, nmstate("02:00:00:00:00"), false),
            c("an NMStateConfig", Kind::NMStateConfig, None, nmstate("02:00:00:00:00:01"), true),
            c(
                "both installation disks",
                Kind::Agent,
                None,
                agent(json!({"installation_disk_id": "d", "installation_disk_path": "/dev/sda"})),
                false,
            ),
            c(
                "a cluster of another namespace",
                Kind::Agent,
                None,
                agent(json!({"clusterDeploymentName": {"name": "c", "namespace": "other"}})),
                false,
            ),
            c(
                "an installing Agent unbound",
                Kind::Agent,
                Some((agent(bound.clone()), installing.clone())),
                agent(json!({"approved": true})),
                false,
            ),
            c(
                "an installing Agent approved",
                Kind::Agent,
                Some((agent(bound.clone()), installing.clone())),
                agent(json!({"approved": true, "clusterDeploymentName": cluster})),
                true,
            ),
            c(
                "a known Agent unbound",
                Kind::Agent,
                Some((agent(bound.clone()), json!({"debugInfo": {"state": "known"}}))),
                agent(json!({})),
                true,
            ),
            c(
                "a single-node cluster without user-managed networking",
                Kind::AgentClusterInstall,
                None,
                aci(
                    "4.20",
                    json!({"provisionRequirements": {"controlPlaneAgents": 1},
                                   "networking": {"userManagedNetworking": false}}),
                ),
                false,
            ),
            c(
                "an image set changed",
                Kind::AgentClusterInstall,
                Some((aci("4.20", json!({})), Value::Null)),
                aci("4.21", json!({})),
                false,
            ),
            c(
                "a cluster's hosts changed while it installs",
                Kind::AgentClusterInstall,
                Some((aci("4.20", json!({})), completed("InstallationInProgress"))),
                aci("4.20", json!({"provisionRequirements": {"workerAgents": 2}})),
                false,
            ),
            c(
                "a cluster's hosts changed once installed",
                Kind::AgentClusterInstall,
                Some((aci("4.20", json!({})), completed("InstallationCompleted"))),
                aci("4.20", json!({"provisionRequirements": {"workerAgents": 2}})),
                true,
            ),
        ]
    }

    /// The object the API server hands the webhook: what the client sent, with the metadata the
    /// server keeps and (on an update of the object itself) the status as it was.
    fn as_stored(new: &Value, old: Option<&Value>) -> Value {
        let mut obj = new.clone();
        let meta = obj["metadata"].as_object_mut().unwrap();
        match old {
            Some(old) => {
                for key in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
                    if let Some(v) = old["metadata"].get(key) {
                        meta.insert(key.into(), v.clone());
                    }
                }
                if let Some(status) = old.get("status") {
                    obj["status"] = status.clone();
                }
            }
            None => {
                meta.insert("uid".into(), json!("6b2b3c8e-8f55-4d3e-a0b1-1f6a0c0e0001"));
                meta.insert("creationTimestamp".into(), json!("2026-01-01T00:00:00Z"));
            }
        }
        obj
    }

    #[tokio::test]
    async fn the_embedded_api_and_the_webhook_give_the_same_verdicts() {
        let dir = tempfile::tempdir().unwrap();
        let webhook = app(None, dir.path());
        for case in cases() {
            let store = SqliteStore::open_in_memory().unwrap();
            let embedded = app(Some(store.clone()), dir.path());
            let old = match &case.old {
                Some((doc, status)) => {
                    let (code, stored, _) = call(&embedded, Method::POST, &collection(case.kind), doc).await;
                    assert!(code.is_success(), "{}: setting up: {stored}", case.what);
                    if !status.is_null() {
                        let mut with_status = stored.clone();
                        with_status["status"] = status.clone();
                        let status_path = format!("{}/status", path(case.kind, doc));
                        let (code, stored, _) = call(&embedded, Method::PUT, &status_path, &with_status).await;
                        assert!(code.is_success(), "{}: setting up its status: {stored}", case.what);
                    }
                    store.get_document(case.kind, "ns", doc["metadata"]["name"].as_str().unwrap()).await.unwrap()
                }
                None => None,
            };
            // An update names the version it replaces, as kubectl's does.
            let (code, body, embedded_warnings) = match &old {
                Some(old) => {
                    let mut doc = case.new.clone();
                    doc["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                    call(&embedded, Method::PUT, &path(case.kind, &case.new), &doc).await
                }
                None => call(&embedded, Method::POST, &collection(case.kind), &case.new).await,
            };
            let embedded_verdict = (
                code.is_success(),
                if code.is_success() {
                    String::new()
                } else {
                    assert!(
                        code == StatusCode::UNPROCESSABLE_ENTITY || code == StatusCode::CONFLICT,
                        "{}: {body}",
                        case.what
                    );
                    // The API server's "<Kind>.<group> "<name>" is invalid: " before the rule's message.
                    let message = body["message"].as_str().unwrap();
                    let qualified = match case.kind.api_version().rsplit_once('/') {
                        Some((group, _)) => format!("{}.{group}", case.kind.name()),
                        None => case.kind.name().to_string(),
                    };
                    let prefix = format!("{qualified} {} is invalid: ", case.new["metadata"]["name"]);
                    message.strip_prefix(&prefix).unwrap_or(message).to_string()
                },
            );

            let review = json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "e911857d-c318-11e8-bbad-025000000001",
                    "kind": {"group": "", "version": case.kind.api_version(), "kind": case.kind.name()},
                    "resource": {
                        "group": case.kind.api_version().split_once('/').map(|(g, _)| g).unwrap_or(""),
                        "version": case.kind.api_version().rsplit('/').next().unwrap(),
                        "resource": case.kind.plural(),
                    },
                    "namespace": "ns", "name": case.new["metadata"]["name"],
                    "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
                    "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters"]},
                    "object": as_stored(&case.new, old.as_ref()),
                    "oldObject": old.clone().unwrap_or(Value::Null),
                    "dryRun": false,
                }
            });
            let (code, answer, _) = call(&webhook, Method::POST, "/admission/validate?timeout=10s", &review).await;
            assert_eq!(code, StatusCode::OK, "{}: {answer}", case.what);
            let response = &answer["response"];
            assert_eq!(response["uid"], "e911857d-c318-11e8-bbad-025000000001");
            let webhook_verdict = (
                response["allowed"].as_bool().unwrap(),
                response["status"]["message"].as_str().unwrap_or_default().to_string(),
            );
            let webhook_warnings: Vec<String> =
                serde_json::from_value(response.get("warnings").cloned().unwrap_or(json!([]))).unwrap();

            assert_eq!(embedded_verdict.0, case.allowed, "{}: embedded API: {}", case.what, embedded_verdict.1);
            assert_eq!(embedded_verdict, webhook_verdict, "{}: the embedded API and the webhook disagree", case.what);
            assert_eq!(embedded_warnings, webhook_warnings, "{}: warnings", case.what);
        }
    }

    #[tokio::test]
    async fn the_embedded_server_does_not_serve_the_webhook() {
        let dir = tempfile::tempdir().unwrap();
        let embedded = app(Some(SqliteStore::open_in_memory().unwrap()), dir.path());
        let (code, _, _) = call(&embedded, Method::POST, "/admission/validate", &json!({})).await;
        assert_eq!(code, StatusCode::NOT_FOUND);
    }
}
