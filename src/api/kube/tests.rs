use super::*;

fn api() -> Arc<KubeApi> {
    KubeApi::new(SqliteStore::open_in_memory().unwrap(), Arc::new(NoHooks))
}

async fn call(api: &KubeApi, method: &str, uri: &str, content_type: &str, body: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::USER_AGENT, "kubectl/v1.32.4 (linux/amd64)")
        .body(Bytes::from(body.to_string()))
        .unwrap();
    let resp = api.handle(&req).await;
    let status = resp.status();
    let body = match resp.body() {
        Body::Bytes(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
        Body::Chunks(c) => serde_json::from_slice(&c.concat()).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, body)
}

const SECRETS: &str = "/api/v1/namespaces/ns/secrets";
const IES: &str = "/apis/agent-install.openshift.io/v1beta1/namespaces/ns/infraenvs";

fn secret(name: &str, env: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"env": env}},
           "stringData": {"k": "v"}})
    .to_string()
}

fn infraenv(extra: Value) -> String {
    let mut doc = json!({"apiVersion": "agent-install.openshift.io/v1beta1", "kind": "InfraEnv",
        "metadata": {"name": "ie"}, "spec": {"pullSecretRef": {"name": "ps"}}});
    crate::store::json::merge_patch(&mut doc, &extra);
    doc.to_string()
}

#[tokio::test]
async fn lists_take_selectors_and_come_in_pages() {
    let api = api();
    for (i, env) in ["prod", "dev", "prod", "prod", "dev"].iter().enumerate() {
        let (code, _) = call(&api, "POST", SECRETS, "application/json", &secret(&format!("s{i}"), env)).await;
        assert_eq!(code, StatusCode::CREATED);
    }
    let (_, list) = call(&api, "GET", &format!("{SECRETS}?labelSelector=env%3Dprod"), "", "").await;
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["s0", "s2", "s3"]);
    let (_, one) = call(&api, "GET", &format!("{SECRETS}?fieldSelector=metadata.name%3Ds4"), "", "").await;
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    let (code, refused) = call(&api, "GET", &format!("{SECRETS}?fieldSelector=spec.x%3D1"), "", "").await;
    assert_eq!(
        (code, refused["message"].as_str()),
        (StatusCode::BAD_REQUEST, Some("field label not supported: spec.x"))
    );
    // Pages of two, each continuing after the last name of the one before.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let uri = format!("{SECRETS}?limit=2&continue={token}");
        let (_, page) = call(&api, "GET", &uri, "", "").await;
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => break,
        }
    }
    assert_eq!(seen, ["s0", "s1", "s2", "s3", "s4"]);
    let (code, _) = call(&api, "GET", &format!("{SECRETS}?limit=2&continue=garbage!"), "", "").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn writes_are_validated_and_dry_runs_store_nothing() {
    let api = api();
    // Strict: an unknown field is refused, naming it; Warn (the default) drops it with a warning.
    let doc = infraenv(json!({"spec": {"bogus": 1}}));
    let (code, err) = call(&api, "POST", &format!("{IES}?fieldValidation=Strict"), "application/json", &doc).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(err["message"].as_str().unwrap().ends_with("strict decoding error: unknown field \"spec.bogus\""), "{err}");
    let (code, _) = call(&api, "POST", &format!("{IES}?dryRun=All"), "application/json", &infraenv(json!({}))).await;
    assert_eq!(code, StatusCode::CREATED);
    assert!(api.store().get_raw("infraenvs.agent-install.openshift.io", "ns", "ie").unwrap().is_none());
    let (code, stored) = call(&api, "POST", IES, "application/json", &doc).await;
    assert_eq!(code, StatusCode::CREATED);
    assert!(stored["spec"].get("bogus").is_none());
    // The admission rules: clusterRef is immutable.
    let mut update = stored.clone();
    update["spec"]["clusterRef"] = json!({"name": "c", "namespace": "ns"});
    let (code, err) = call(&api, "PUT", &format!("{IES}/ie"), "application/json", &update.to_string()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(err["message"].as_str().unwrap().contains("Spec.ClusterRef which is immutable"), "{err}");
    // An update must name the version it replaces.
    let mut unversioned = stored.clone();
    unversioned["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let (code, _) = call(&api, "PUT", &format!("{IES}/ie"), "application/json", &unversioned.to_string()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn patches_of_every_type_and_their_refusals() {
    let api = api();
    call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
    let (code, patched) = call(
        &api,
        "PATCH",
        &format!("{IES}/ie"),
        "application/json-patch+json",
        r#"[{"op":"add","path":"/spec/sshAuthorizedKey","value":"ssh-ed25519 AAAA"}]"#,
    )
    .await;
    assert_eq!((code, patched["spec"]["sshAuthorizedKey"].as_str()), (StatusCode::OK, Some("ssh-ed25519 AAAA")));
    let (code, _) = call(
        &api,
        "PATCH",
        &format!("{IES}/ie"),
        "application/json-patch+json",
        r#"[{"op":"test","path":"/spec/sshAuthorizedKey","value":"other"}]"#,
    )
    .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    // Custom resources take no strategic merge patch, as on a real API server.
    let (code, _) = call(&api, "PATCH", &format!("{IES}/ie"), "application/strategic-merge-patch+json", "{}").await;
    assert_eq!(code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A patch naming an old version is refused; the managers are recorded.
    let (code, _) = call(
        &api,
        "PATCH",
        &format!("{IES}/ie"),
        "application/merge-patch+json",
        r#"{"metadata":{"resourceVersion":"1","labels":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT);
    let (_, ie) = call(&api, "GET", &format!("{IES}/ie"), "", "").await;
    let managers: Vec<&str> =
        ie["metadata"]["managedFields"].as_array().unwrap().iter().map(|m| m["manager"].as_str().unwrap()).collect();
    assert_eq!(managers, ["kubectl"]);
}

#[tokio::test]
async fn server_side_apply_owns_fields_and_reports_conflicts() {
    let api = api();
    let applied = "apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata: {name: ie}\n\
                   spec:\n  pullSecretRef: {name: ps}\n  sshAuthorizedKey: one\n";
    let uri = |manager: &str, force: bool| format!("{IES}/ie?fieldManager={manager}&force={force}");
    let (code, _) = call(&api, "PATCH", &uri("alice", false), "application/apply-patch+yaml", applied).await;
    assert_eq!(code, StatusCode::CREATED);
    let other = applied.replace("one", "two");
    let (code, err) = call(&api, "PATCH", &uri("bob", false), "application/apply-patch+yaml", &other).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!(
        err["message"],
        // An Apply manager is named without a version (an Update one with it, as upstream).
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.sshAuthorizedKey"
    );
    assert_eq!(err["details"]["causes"][0]["field"], ".spec.sshAuthorizedKey");
    let (code, taken) = call(&api, "PATCH", &uri("bob", true), "application/apply-patch+yaml", &other).await;
    assert_eq!((code, taken["spec"]["sshAuthorizedKey"].as_str()), (StatusCode::OK, Some("two")));
    let (code, _) = call(&api, "PATCH", &format!("{IES}/ie"), "application/apply-patch+yaml", applied).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "an apply needs a field manager");
}

#[tokio::test]
async fn kubectl_protobuf_bodies_and_deletes() {
    let api = api();
    let body = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kubectl-protobuf/namespace.pb")).unwrap();
    let req = Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces")
        .header(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")
        .body(Bytes::from(body))
        .unwrap();
    let resp = api.handle(&req).await;
    assert_eq!(resp.status(), StatusCode::CREATED);
    let ns = api.store().get_raw("namespaces", "", "demo").unwrap().expect("the namespace");
    assert_eq!(ns["status"]["phase"], "Active");
    // A deletion held by a finalizer is 200 with the marked object; then gone, 404.
    let doc = infraenv(json!({"metadata": {"finalizers": ["x/y"]}}));
    call(&api, "POST", IES, "application/json", &doc).await;
    let (code, held) = call(&api, "DELETE", &format!("{IES}/ie"), "", "").await;
    assert_eq!(code, StatusCode::OK);
    assert!(held["metadata"]["deletionTimestamp"].is_string());
    call(&api, "PATCH", &format!("{IES}/ie"), "application/merge-patch+json", r#"{"metadata":{"finalizers":null}}"#)
        .await;
    let (code, gone) = call(&api, "GET", &format!("{IES}/ie"), "", "").await;
    assert_eq!((code, gone["reason"].as_str()), (StatusCode::NOT_FOUND, Some("NotFound")));
}
const EVENTS: &str = "/api/v1/namespaces/ns/events";

fn event(name: &str, note: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
           "involvedObject": {"name": "x", "namespace": "ns"}, "note": note})
    .to_string()
}

#[tokio::test]
async fn no_write_stores_or_answers_an_object_over_the_limit() {
    let api = KubeApi::with_limits(
        SqliteStore::open_in_memory().unwrap(),
        Arc::new(NoHooks),
        limits::Limits { max_object_bytes: 64 << 10 },
    );
    let (code, _) = call(&api, "POST", EVENTS, "application/json", &event("e", &"x".repeat(1000))).await;
    assert_eq!(code, StatusCode::CREATED);
    // 18 copies of a value into itself: 280 MB on a 1 KB object before (with dryRun, in the
    // answer); now refused while it runs, whatever else the request says.
    let copies: Vec<Value> = (0..18).map(|_| json!({"op": "copy", "from": "/note", "path": "/note2"})).collect();
    let mut doubling = vec![json!({"op": "add", "path": "/note2", "value": []})];
    doubling.extend((0..18).map(|_| json!({"op": "copy", "from": "/note2", "path": "/note2/-"})));
    doubling[1] = json!({"op": "copy", "from": "/note", "path": "/note2/-"});
    for query in ["?dryRun=All", ""] {
        let uri = format!("{EVENTS}/e{query}");
        let (code, err) =
            call(&api, "PATCH", &uri, "application/json-patch+json", &Value::Array(doubling.clone()).to_string()).await;
        assert_eq!((code, err["reason"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("RequestEntityTooLarge")));
    }
    let (code, _) =
        call(&api, "PATCH", &format!("{EVENTS}/e"), "application/json-patch+json", &Value::Array(copies).to_string())
            .await;
    assert_eq!(code, StatusCode::OK, "copies that fit are fine");
    // Every write path checks the object it would store, naming both sizes.
    let big = "y".repeat(70 << 10);
    let (code, err) = call(&api, "POST", EVENTS, "application/json", &event("f", &big)).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let message = err["message"].as_str().unwrap();
    assert!(message.contains("over the 65536 bytes an object may have"), "{message}");
    let merge = json!({"note": big}).to_string();
    for (ct, body) in [
        ("application/merge-patch+json", merge.clone()),
        ("application/strategic-merge-patch+json", merge.clone()),
        ("application/json-patch+json", json!([{"op": "replace", "path": "/note", "value": big}]).to_string()),
    ] {
        let (code, _) = call(&api, "PATCH", &format!("{EVENTS}/e"), ct, &body).await;
        assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{ct}");
    }
    let apply = format!("apiVersion: v1\nkind: Event\nmetadata: {{name: e}}\nnote: {big}\n");
    let (code, _) =
        call(&api, "PATCH", &format!("{EVENTS}/e?fieldManager=m&force=true"), "application/apply-patch+yaml", &apply)
            .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let (_, live) = call(&api, "GET", &format!("{EVENTS}/e"), "", "").await;
    let mut update = live.clone();
    update["note"] = json!(big);
    let (code, _) = call(&api, "PUT", &format!("{EVENTS}/e"), "application/json", &update.to_string()).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    // The status subresource too.
    call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
    let status = json!({"status": {"debugInfo": {"eventsURL": big}}}).to_string();
    let (code, _) = call(&api, "PATCH", &format!("{IES}/ie/status"), "application/merge-patch+json", &status).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let (_, unchanged) = call(&api, "GET", &format!("{EVENTS}/e"), "", "").await;
    assert_eq!(unchanged["metadata"]["resourceVersion"], live["metadata"]["resourceVersion"]);
}

#[tokio::test]
async fn a_patch_must_leave_the_same_object() {
    let api = api();
    call(&api, "POST", IES, "application/json", &infraenv(json!({}))).await;
    let at = format!("{IES}/ie");
    // Not an object: refused (a worker panicked on these before), nothing changed.
    let (code, _) =
        call(&api, "PATCH", &at, "application/json-patch+json", r#"[{"op":"replace","path":"","value":[1,2]}]"#).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let (code, err) = call(&api, "PATCH", &at, "application/merge-patch+json", "[1,2]").await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(
        err["message"],
        "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    let (code, _) =
        call(&api, "PATCH", &at, "application/json-patch+json", r#"[{"op":"replace","path":"","value":"x"}]"#).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    // Another name: the API server's 400 naming both (not a 404 naming the other object).
    let (code, err) = call(
        &api,
        "PATCH",
        &at,
        "application/json-patch+json",
        r#"[{"op":"replace","path":"/metadata/name","value":"other"}]"#,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert_eq!(err["message"], "the name of the object (other) does not match the name on the URL (ie)");
    // The root replaced on the status without a version: refused as an update without one
    // (as kube-apiserver does), not a status wiped.
    call(
        &api,
        "PATCH",
        &format!("{at}/status"),
        "application/merge-patch+json",
        r#"{"status":{"isoDownloadURL":"http://x"}}"#,
    )
    .await;
    let root = json!([{"op": "replace", "path": "", "value": {"apiVersion": "agent-install.openshift.io/v1beta1",
        "kind": "InfraEnv", "metadata": {"name": "ie", "namespace": "ns"}, "spec": {"pullSecretRef": {"name": "ps"}}}}]);
    let (code, err) =
        call(&api, "PATCH", &format!("{at}/status"), "application/json-patch+json", &root.to_string()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert!(err["message"].as_str().unwrap().contains("metadata.resourceVersion"), "{err}");
    let (_, ie) = call(&api, "GET", &at, "", "").await;
    assert_eq!(ie["status"]["isoDownloadURL"], "http://x");
}

#[tokio::test]
async fn names_are_checked_per_kind_as_the_api_server_does() {
    let api = api();
    let ns = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).to_string();
    for bad in ["x.y", "..", "UPPER", &"a".repeat(64), "a\nb", "a\u{1b}[31m"] {
        let (code, err) = call(&api, "POST", "/api/v1/namespaces", "application/json", &ns(bad)).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {err}");
        assert_eq!(err["details"]["causes"][0]["field"], "metadata.name", "{err}");
    }
    let (code, _) = call(&api, "POST", "/api/v1/namespaces", "application/json", &ns("team-a")).await;
    assert_eq!(code, StatusCode::CREATED);
    // Leases, Secrets and custom resources: subdomains.
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": ".."}});
    let (code, _) =
        call(&api, "POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "application/json", &lease.to_string())
            .await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let (code, _) = call(&api, "POST", SECRETS, "application/json", &secret("UP", "x")).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    let (code, err) =
        call(&api, "POST", IES, "application/json", &infraenv(json!({"metadata": {"name": "UP_x"}}))).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(err["message"].as_str().unwrap().contains("a lowercase RFC 1123 subdomain"), "{err}");
    // Events: only a path segment, as upstream (their names come from other objects').
    for bad in ["..", "a%b"] {
        let (code, _) = call(&api, "POST", EVENTS, "application/json", &event(bad, "")).await;
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    }
    let (code, _) = call(&api, "POST", EVENTS, "application/json", &event("Pod.17a2b3", "")).await;
    assert_eq!(code, StatusCode::CREATED);
    // A namespace in a path is a label.
    let (code, _) = call(&api, "POST", "/api/v1/namespaces/UP/secrets", "application/json", &secret("s", "x")).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
    // generateName: the prefix, then the name made from it.
    let generated = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"generateName": "UP-"}});
    let (code, _) = call(&api, "POST", SECRETS, "application/json", &generated.to_string()).await;
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn deeply_nested_yaml_is_refused_before_it_is_parsed() {
    let api = api();
    let uri = format!("{EVENTS}/e?fieldManager=m");
    let nested = format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: e}}\nnote: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (code, err) = call(&api, "PATCH", &uri, "application/apply-patch+yaml", &nested).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(err["message"].as_str().unwrap().contains("nests deeper than 64 levels"), "{err}");
    // JSON sent as the apply (what kubectl sends) is read as JSON.
    let json_config = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
        "involvedObject": {"name": "x", "namespace": "ns"}});
    let (code, _) = call(&api, "PATCH", &uri, "application/apply-patch+yaml", &json_config.to_string()).await;
    assert_eq!(code, StatusCode::CREATED);
}
#[tokio::test]
async fn the_openapi_v3_index_is_made_once() {
    // It cost about 10 ms of CPU per request, made anew each time.
    let api = api();
    let req = Request::builder().uri("/openapi/v3").body(Bytes::new()).unwrap();
    let (first, second) = (api.handle(&req).await, api.handle(&req).await);
    let (Body::Bytes(a), Body::Bytes(b)) = (first.body(), second.body()) else { panic!("whole documents") };
    assert_eq!(a.as_ptr(), b.as_ptr(), "the same bytes, not a new document");
    let index: Value = serde_json::from_slice(a).unwrap();
    assert!(index["paths"]["apis/agent-install.openshift.io/v1beta1"]["serverRelativeURL"].is_string(), "{index}");
}
