//! The eventsURLs (issue 43, item 4): what a user gets with `curl "$(kubectl get agent X -o
//! jsonpath='{.status.debugInfo.eventsURL}')"`, run against `bootstream serve` with signed URLs and
//! hosts driven through the agent API; and what the route refuses: another tenant's host or
//! InfraEnv, another cluster, forged, expired and foreign tokens, an events token used for images
//! or logs, malformed parameters, pages past the cap.

use crate::common;

use std::time::{Duration, SystemTime};

use common::*;
use serde_json::Value;

const A: &str = "tenant-a";
const B: &str = "tenant-b";

/// The InfraEnv `ns/pool` (made with its pull secret), as its agents know it: the agent token
/// comes from its discovery Ignition, fetched through the signed URL of its status.
fn signed_tenant(s: &Server, ns: &str) -> Tenant {
    s.apply_ok(&format!("{}---\n{}", pull_secret_yaml(ns), infraenv_yaml(ns, "pool", "")));
    let ie = s.wait_image_created(ns, "pool", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
    let url = ie["status"]["bootArtifacts"]["discoveryIgnitionURL"].as_str().unwrap();
    let ign = request(&s.addr, "GET", path_of(url), &[], b"");
    assert_eq!(ign.status, 200, "{}", ign.text());
    let token =
        bootstream::cli::simulate::agent_token(&serde_json::from_slice(&ign.body).unwrap()).expect("agent token");
    Tenant { ns: ns.to_string(), id, token }
}

fn path_of(url: &str) -> &str {
    &url[url.find("/api/").or_else(|| url.find("/byapikey/")).unwrap()..]
}

fn api_key(url: &str) -> String {
    url.split_once("&api_key=").unwrap_or_else(|| panic!("an unsigned URL: {url}")).1.to_string()
}

/// The eventsURL of the Agent `host` of `ns`, once it has one.
fn agent_events_url(s: &Server, ns: &str, host: &str) -> String {
    let mut url = String::new();
    wait_until(&format!("the eventsURL of Agent {ns}/{host}"), || {
        let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", ns, "-o", "json"], None);
        url = serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|a| a["status"]["debugInfo"]["eventsURL"].as_str().map(str::to_string))
            .unwrap_or_default();
        !url.is_empty()
    });
    url
}

/// GET `path` on the main listener, with no other credential: the events and the answer's headers.
fn get_events(s: &Server, path: &str) -> (Vec<Value>, Response) {
    let r = request(&s.addr, "GET", path, &[], b"");
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let events: Vec<Value> = serde_json::from_slice(&r.body).unwrap();
    (events, r)
}

fn names(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["name"].as_str().unwrap()).collect()
}

fn wait_agent_state(s: &Server, ns: &str, host: &str, state: &str) {
    wait_until(&format!("Agent {ns}/{host} {state}"), || {
        let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", ns, "-o", "json"], None);
        serde_json::from_slice::<Value>(&out.stdout).is_ok_and(|a| a["status"]["debugInfo"]["state"] == state)
    });
}

const HOST: &str = "6f1b1b7e-0f4e-4b6a-9d57-0b8a3c1f2e11";

#[test]
fn an_agents_and_its_clusters_event_urls_list_what_happened_to_them() {
    let s = Server::start_signed(&[]);
    let a = signed_tenant(&s, A);
    s.apply_ok(&format!("{IMAGE_SET}---\n{}", cluster_yaml(A, "c1", 1)));

    // Registered, then its inventory makes it known.
    assert_eq!(a.register(&s, HOST).status, 201);
    assert_eq!(a.send_inventory(&s, HOST, 0).status, 204);
    wait_agent_state(&s, A, HOST, "known-unbound");
    let url = agent_events_url(&s, A, HOST);
    assert!(
        url.starts_with(&format!("{}/api/assisted-install/v2/events?host_id={HOST}&infra_env_id={}", s.url, a.id)),
        "{url}"
    );
    let (events, r) = get_events(&s, path_of(&url));
    assert_eq!(names(&events)[0], "host_registration_succeeded", "{events:#?}");
    assert_eq!(events[0]["message"], format!("Host {HOST}: Successfully registered"), "no inventory yet");
    let known = events.iter().find(|e| e["name"] == "host_status_updated").unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(
        known["message"],
        "Host sim-0: updated status from discovering-unbound to known-unbound (Host is ready to be bound to a cluster)"
    );
    assert_eq!(known["severity"], "info");
    for e in &events {
        assert_eq!((e["host_id"].as_str(), e["infra_env_id"].as_str()), (Some(HOST), Some(a.id.as_str())), "{e}");
        assert_eq!(e["category"], "user");
        assert!(e["severity"].is_string() && e["message"].is_string());
        let time = e["event_time"].as_str().unwrap();
        assert!(time.parse::<jiff::Timestamp>().is_ok() && time.ends_with('Z'), "{time}");
        assert!(e.get("cluster_id").is_none(), "an unbound host's event names no cluster: {e}");
    }
    assert_eq!(r.header("event-count"), Some(events.len().to_string().as_str()));
    let counted: usize = ["info", "warning", "error", "critical"]
        .iter()
        .map(|s| r.header(&format!("severity-count-{s}")).unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(counted, events.len());

    // Bound to c1: the agent restarts and registers again, and is known in its cluster.
    let patch = r#"{"spec":{"approved":true,"clusterDeploymentName":{"name":"c1","namespace":"tenant-a"}}}"#;
    let out =
        cli(&["patch", "--kubeconfig", &s.kubeconfig, "agent", HOST, "-n", A, "--type", "merge", "-p", patch], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_agent_state(&s, A, HOST, "binding");
    assert_eq!(a.register(&s, HOST).status, 201);
    assert_eq!(a.send_inventory(&s, HOST, 0).status, 204);
    let (events, _) = get_events(&s, path_of(&url));
    let bound =
        names(&events).iter().position(|n| *n == "host_bind_succeeded").unwrap_or_else(|| panic!("{events:#?}"));
    let messages: Vec<&str> = events[bound..].iter().map(|e| e["message"].as_str().unwrap()).collect();
    // Binding clears the inventory: until it comes again, the host is named by its id.
    for change in ["known-unbound to binding", "binding to discovering"] {
        assert!(messages.iter().any(|m| m.contains(&format!("updated status from {change} ("))), "{messages:#?}");
    }
    let cluster_id = events[bound]["cluster_id"].as_str().unwrap().to_string();

    // The AgentClusterInstall's URL: the cluster's own events and its host's since it was bound.
    let aci = s.get_json("agentclusterinstall", A, "c1");
    let aci_url = aci["status"]["debugInfo"]["eventsURL"].as_str().expect("the ACI's eventsURL");
    assert!(
        aci_url.starts_with(&format!("{}/api/assisted-install/v2/events?cluster_id={cluster_id}&api_key=", s.url)),
        "{aci_url}"
    );
    let (events, _) = get_events(&s, path_of(aci_url));
    assert_eq!(names(&events)[..2], ["cluster_registration_succeeded", "cluster_status_updated"], "{events:#?}");
    assert!(events.iter().all(|e| e["cluster_id"] == cluster_id.as_str()), "{events:#?}");
    assert!(events.iter().any(|e| e["name"] == "host_bind_succeeded" && e["host_id"] == HOST));

    // The InfraEnv's: its hosts' events.
    let ie = s.get_json("infraenv", A, "pool");
    let ie_url = ie["status"]["debugInfo"]["eventsURL"].as_str().expect("the InfraEnv's eventsURL");
    assert!(ie_url.starts_with(&format!("{}/api/assisted-install/v2/events?infra_env_id={}&api_key=", s.url, a.id)));
    let (events, _) = get_events(&s, path_of(ie_url));
    assert!(events.len() >= 6 && events.iter().all(|e| e["infra_env_id"] == a.id.as_str()), "{events:#?}");

    // Narrowed and paged as v2ListEvents does; the headers count every page.
    let (newest, r) = get_events(&s, &format!("{}&order=descending&limit=1", path_of(&url)));
    assert_eq!(newest.len(), 1);
    assert!(r.header("event-count").unwrap().parse::<usize>().unwrap() > 1);
    let (warnings, _) = get_events(&s, &format!("{}&severities=error,critical", path_of(&url)));
    assert!(warnings.is_empty(), "{warnings:#?}");
    let (found, _) = get_events(&s, &format!("{}&message=successfully+BOUND", path_of(&url)));
    assert_eq!(names(&found), ["host_bind_succeeded"]);

    // A deregistered host's events go with it: the Agent deleted, its URL reads nothing.
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "agent", HOST, "-n", A], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until("the host's events gone", || request(&s.addr, "GET", path_of(&url), &[], b"").status == 404);
    let (events, _) = get_events(&s, path_of(ie_url));
    assert!(events.is_empty(), "{events:#?}");
}

#[test]
fn event_urls_read_only_what_they_name() {
    let s = Server::start_signed(&[]);
    let a = signed_tenant(&s, A);
    let b = signed_tenant(&s, B);
    s.apply_ok(&format!("{IMAGE_SET}---\n{}", cluster_yaml(B, "cb", 3)));
    // The same machine in both tenants, and a host of B's only.
    let b_only = "0a3e5c2d-7b7e-4c61-8f0e-2d9b6a1c4e77";
    for (t, host) in [(&a, HOST), (&b, HOST), (&b, b_only)] {
        assert_eq!(t.register(&s, host).status, 201);
        assert_eq!(t.send_inventory(&s, host, 1).status, 204);
    }
    let a_url = agent_events_url(&s, A, HOST);
    let token_a = api_key(&a_url);
    let events_path = "/api/assisted-install/v2/events";

    // A's URL reads A's host only, though B has a host of that id.
    let (events, _) = get_events(&s, path_of(&a_url));
    assert!(!events.is_empty() && events.iter().all(|e| e["infra_env_id"] == a.id.as_str()), "{events:#?}");
    let (events, _) = get_events(&s, &format!("{events_path}?host_id={HOST}&api_key={token_a}"));
    assert!(events.iter().all(|e| e["infra_env_id"] == a.id.as_str()), "{events:#?}");

    // B's host, B's InfraEnv, a host that exists nowhere: the same 404, which tells nothing.
    let nowhere = "11111111-2222-4333-8444-555555555555";
    let refused: Vec<Response> = [
        format!("host_id={b_only}"),
        format!("host_ids={HOST},{b_only}"),
        format!("infra_env_id={}", b.id),
        format!("host_id={HOST}&infra_env_id={}", b.id),
        format!("host_id={nowhere}"),
    ]
    .iter()
    .map(|q| request(&s.addr, "GET", &format!("{events_path}?{q}&api_key={token_a}"), &[], b""))
    .collect();
    for r in &refused {
        assert_eq!(r.status, 404, "{}", r.text());
        assert_eq!(r.body, refused[4].body);
        assert!(!r.text().contains(b_only) && !r.text().contains(&b.id), "{}", r.text());
    }

    // A cluster's token: that cluster only; narrowing to another tenant's InfraEnv finds nothing.
    let aci_url = {
        let mut url = String::new();
        wait_until("the ACI's eventsURL", || {
            url = s.get_json("agentclusterinstall", B, "cb")["status"]["debugInfo"]["eventsURL"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            !url.is_empty()
        });
        url
    };
    let token_c = api_key(&aci_url);
    let r = request(&s.addr, "GET", &format!("{events_path}?cluster_id={nowhere}&api_key={token_c}"), &[], b"");
    assert_eq!(r.status, 404, "{}", r.text());
    let (events, _) = get_events(&s, &format!("{events_path}?infra_env_id={}&api_key={token_c}", a.id));
    assert!(events.is_empty(), "{events:#?}");
    let (events, _) = get_events(&s, &format!("{events_path}?api_key={token_c}"));
    assert!(!events.is_empty() && events.iter().all(|e| e["cluster_id"].as_str().is_some()), "{events:#?}");

    // An events token opens no image (it carries the pull secret) and no logs.
    let ie = s.get_json("infraenv", A, "pool");
    let iso = ie["status"]["isoDownloadURL"].as_str().unwrap();
    let image_token = iso.split("/byapikey/").nth(1).unwrap().split('/').next().unwrap();
    let with_events_token = path_of(iso).replace(image_token, &token_a);
    assert_eq!(request(&s.addr, "HEAD", &with_events_token, &[], b"").status, 403);
    let ign = format!(
        "/api/assisted-install/v2/infra-envs/{}/downloads/files?file_name=discovery.ign&api_key={token_a}",
        a.id
    );
    assert_eq!(request(&s.addr, "GET", &ign, &[], b"").status, 403);
    let logs =
        format!("/api/assisted-install/v2/clusters/{nowhere}/logs?host_id={HOST}&logs_type=host&api_key={token_c}");
    assert_eq!(request(&s.addr, "GET", &logs, &[], b"").status, 403);
    // The InfraEnv's image token reads its events (it opens more already).
    let (events, _) = get_events(&s, &format!("{events_path}?infra_env_id={}&api_key={image_token}", a.id));
    assert!(!events.is_empty());

    // Forged, foreign and expired tokens.
    let last = if token_a.ends_with('A') { 'B' } else { 'A' };
    let forged = format!("{}{last}", &token_a[..token_a.len() - 1]);
    let foreign_key = tempfile::tempdir().unwrap();
    let foreign = bootstream::auth::urlsign::UrlSigner::load_or_create(foreign_key.path(), &[]).unwrap();
    let ours = bootstream::auth::urlsign::UrlSigner::load_or_create(s.data_dir.path(), &[]).unwrap();
    let expired = ours.sign(&a.id, SystemTime::now() - Duration::from_secs(5 * 3600));
    for token in [forged, foreign.sign_infra_env_events(&a.id), expired, "garbage".to_string()] {
        let r = request(&s.addr, "GET", &format!("{events_path}?infra_env_id={}&api_key={token}", a.id), &[], b"");
        assert_eq!(r.status, 401, "{token}: {}", r.text());
        assert!(!r.text().contains("host_"), "{}", r.text());
    }

    // Without a key: the API token, only on the API's listener; the plain one does not look.
    let bare = format!("{events_path}?infra_env_id={}", a.id);
    assert_eq!(request(&s.addr, "GET", &bare, &[], b"").status, 404);
    assert_eq!(s.api_request("GET", &bare, &[], b"").status, 401);
    let (events, _) = get_events_via_api(&s, &bare);
    assert!(!events.is_empty());
    let r = request(&s.addr, "POST", &format!("{events_path}?api_key={token_a}"), &[], b"{}");
    assert_eq!(r.status, 405, "{}", r.text());

    // Malformed, unknown, repeated and oversized parameters: 400 naming them.
    for (q, says) in [
        ("host_id=not-a-uuid".to_string(), "host_id must be a UUID"),
        ("hostid=1".to_string(), "unknown query parameter"),
        (format!("host_id={HOST}&host_id={HOST}"), "given twice"),
        ("limit=lots".to_string(), "limit must be an integer"),
        ("order=sideways".to_string(), "order must be"),
        ("severities=fatal".to_string(), "is not one of"),
        (format!("message={}", "x".repeat(9000)), "query string is"),
    ] {
        let r = request(&s.addr, "GET", &format!("{events_path}?{q}&api_key={token_a}"), &[], b"");
        assert_eq!(r.status, 400, "{q}: {}", r.text());
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert!(body["reason"].as_str().unwrap().contains(says), "{q}: {body}");
    }

    // A page never holds more than the cap, whatever limit asks: 5 hosts of A re-register until
    // their InfraEnv has more events than a page takes.
    let hosts: Vec<String> = (0..5).map(|i| format!("{i:08}-aaaa-4bbb-8ccc-dddddddddddd")).collect();
    for host in &hosts {
        for _ in 0..220 {
            assert_eq!(a.register(&s, host).status, 201);
        }
    }
    let cap = bootstream::api::events::MAX_LIMIT as usize;
    let (page, r) = get_events(&s, &format!("{events_path}?infra_env_id={}&limit=100000000&api_key={token_a}", a.id));
    assert_eq!(page.len(), cap);
    assert!(r.header("event-count").unwrap().parse::<usize>().unwrap() > cap);
    let (page, _) = get_events(&s, &format!("{events_path}?infra_env_id={}&limit=-1&api_key={token_a}", a.id));
    assert_eq!(page.len(), cap);
    assert!(r.body.len() < 4 << 20, "{} bytes", r.body.len());
}

fn get_events_via_api(s: &Server, path: &str) -> (Vec<Value>, Response) {
    let bearer = format!("Bearer {TEST_API_TOKEN}");
    let r = s.api_request("GET", path, &[("Authorization", &bearer)], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    (serde_json::from_slice(&r.body).unwrap(), r)
}
