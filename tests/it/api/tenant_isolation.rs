//! Tenant isolation on the agent API (issue 30): an agent of one InfraEnv, holding only that
//! InfraEnv's token (the `PULL_SECRET_TOKEN` every copy of its discovery image carries), tries every
//! agent-API verb on a host of another tenant's InfraEnv, one bound to that tenant's cluster. Host
//! records are keyed by (InfraEnv, host id): whatever it sends, the other tenant's record and Agent
//! stay as they were.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn agent(s: &Server, ns: &str, name: &str) -> Value {
    s.get_json("agent", ns, name)
}

/// What the victim tenant sees of its host: the record through its own agent API, and its Agent.
fn victim_view(s: &Server, b: &Tenant, host: &str) -> (Value, Value) {
    let r = b.call(s, "GET", &b.id, &format!("/{host}"), None);
    assert_eq!(r.status, 200, "the victim's own agent lost its host: {}", r.text());
    let record: Value = serde_json::from_slice(&r.body).unwrap();
    let a = agent(s, &b.ns, host);
    (record, a)
}

fn assert_victim_unchanged(s: &Server, b: &Tenant, host: &str, before: &(Value, Value), after_what: &str) {
    let (record, a) = victim_view(s, b, host);
    for field in ["infra_env_id", "cluster_id", "status", "inventory", "progress", "role"] {
        assert_eq!(record[field], before.0[field], "after {after_what}: the victim's host {field} changed");
    }
    assert_eq!(a["spec"], before.1["spec"], "after {after_what}: the victim's Agent spec changed");
    assert_eq!(a["metadata"]["labels"], before.1["metadata"]["labels"], "after {after_what}: its labels changed");
    assert_eq!(a["metadata"]["ownerReferences"], before.1["metadata"]["ownerReferences"], "after {after_what}");
}

#[test]
fn an_agent_of_one_infraenv_cannot_touch_another_tenants_host() {
    let s = Server::start(&[]);
    let a = tenant(&s, "tenant-a", "pool");
    let b = tenant(&s, "tenant-b", "pool");
    s.apply_ok(&format!("{IMAGE_SET}---\n{}", cluster_yaml("tenant-b", "b-cluster", 3)));

    // The victim: a host of tenant B, in B's pool, then bound to B's cluster.
    let host = "6f1b1b7e-0f4e-4b6a-9d57-0b8a3c1f2e11";
    assert_eq!(b.register(&s, host).status, 201);
    assert_eq!(b.send_inventory(&s, host, 0).status, 204);
    wait_until("the victim's Agent", || {
        cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", "tenant-b"], None).status.success()
    });
    let patch = r#"{"spec":{"approved":true,"clusterDeploymentName":{"name":"b-cluster","namespace":"tenant-b"}}}"#;
    let out = cli(
        &["patch", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", "tenant-b", "--type", "merge", "-p", patch],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_until("the victim bound to its cluster", || {
        let r = b.call(&s, "GET", &b.id, &format!("/{host}"), None);
        serde_json::from_slice::<Value>(&r.body).is_ok_and(|h| h["cluster_id"].is_string())
    });
    // Let the victim's controllers settle, then take what it sees.
    std::thread::sleep(Duration::from_millis(500));
    let before = victim_view(&s, &b, host);
    let cluster_id = before.0["cluster_id"].as_str().unwrap().to_string();

    // Every verb with A's token on A's path, before A has any such host: 404, nothing of B's.
    for (verb, method, rest, body) in [
        ("get", "GET", format!("/{host}"), None),
        ("instructions", "GET", format!("/{host}/instructions"), None),
        (
            "step reply",
            "POST",
            format!("/{host}/instructions"),
            Some(json!({"step_type": "free-network-addresses", "exit_code": 0})),
        ),
        (
            "inventory",
            "POST",
            format!("/{host}/instructions"),
            Some(json!({"step_type": "inventory", "exit_code": 0, "output": "{}"})),
        ),
        ("progress", "PUT", format!("/{host}/progress"), Some(json!({"current_stage": "Done"}))),
    ] {
        let r = a.call(&s, method, &a.id, &rest, body);
        assert_eq!(r.status, 404, "{verb} on A's path reached a host: {}", r.text());
        assert!(!r.text().contains(&b.id), "{verb}: the answer names B's InfraEnv");
        assert_victim_unchanged(&s, &b, host, &before, verb);
    }
    // The same verbs with A's token on B's path: the token is not B's.
    for (verb, method, rest) in [
        ("register", "POST", String::new()),
        ("list", "GET", String::new()),
        ("get", "GET", format!("/{host}")),
        ("instructions", "GET", format!("/{host}/instructions")),
        ("progress", "PUT", format!("/{host}/progress")),
    ] {
        let r = a.call(&s, method, &b.id, &rest, Some(json!({"host_id": host, "current_stage": "Done"})));
        assert_eq!(r.status, 401, "{verb} on B's path with A's token: {}", r.text());
    }
    // Logs for B's cluster, claiming the host through A's InfraEnv, then through B's.
    let upload = |infra_env: &str| {
        let boundary = "x0x0x0";
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"upfile\"; filename=\"l.tar.gz\"\r\n\r\nfake\r\n--{boundary}--\r\n"
        );
        request(
            &s.addr,
            "POST",
            &format!(
                "/api/assisted-install/v2/clusters/{cluster_id}/logs?logs_type=host&infra_env_id={infra_env}&host_id={host}"
            ),
            &[("X-Secret-Key", &a.token), ("Content-Type", &format!("multipart/form-data; boundary={boundary}"))],
            body.as_bytes(),
        )
    };
    assert_eq!(upload(&a.id).status, 404, "logs through A's InfraEnv for a host A does not have");
    assert_eq!(upload(&b.id).status, 401, "logs through B's InfraEnv with A's token");
    assert_victim_unchanged(&s, &b, host, &before, "log uploads");

    // The attack itself: A registers B's host id. It gets a host of its own, in its own namespace.
    let r = a.register(&s, host);
    assert_eq!(r.status, 201, "{}", r.text());
    let mine: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(mine["infra_env_id"], a.id.as_str());
    assert!(mine["cluster_id"].is_null(), "A's host is not in B's cluster");
    assert_victim_unchanged(&s, &b, host, &before, "register");
    // Every verb again, now on A's own record; B's stays as it was.
    assert_eq!(a.send_inventory(&s, host, 1).status, 204);
    assert_eq!(a.call(&s, "GET", &a.id, &format!("/{host}/instructions"), None).status, 200);
    let r = a.call(&s, "PUT", &a.id, &format!("/{host}/progress"), Some(json!({"current_stage": "Done"})));
    assert!(r.status == 200 || r.status == 400, "{}", r.text());
    let r = a.call(&s, "GET", &a.id, &format!("/{host}"), None);
    assert_eq!(serde_json::from_slice::<Value>(&r.body).unwrap()["infra_env_id"], a.id.as_str());
    let listed: Value = serde_json::from_slice(&a.call(&s, "GET", &a.id, "", None).body).unwrap();
    assert!(listed.as_array().unwrap().iter().all(|h| h["infra_env_id"] == a.id.as_str()), "{listed}");
    assert_eq!(upload(&a.id).status, 404, "A's host is not a host of B's cluster");
    wait_until("A's own Agent", || {
        cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", "tenant-a"], None).status.success()
    });
    let theirs = agent(&s, "tenant-a", host);
    assert!(theirs["spec"].get("clusterDeploymentName").is_none_or(Value::is_null), "{theirs}");

    // Nothing flips afterwards: the two Agents reconcile on their own records.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(300));
        assert_victim_unchanged(&s, &b, host, &before, "the controllers ran");
    }
}

#[test]
fn a_host_moves_between_infraenvs_of_one_namespace_only_when_unbound() {
    let s = Server::start(&[]);
    let first = tenant(&s, "fleet", "first");
    let second = {
        s.apply_ok(&infraenv_yaml("fleet", "second", ""));
        let ie = s.wait_image_created("fleet", "second", "True");
        let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
        let ign = s.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
        let token = bootstream::cli::simulate::agent_token(&serde_json::from_slice(&ign.body).unwrap()).unwrap();
        Tenant { ns: "fleet".into(), id, token }
    };
    s.apply_ok(&format!("{IMAGE_SET}---\n{}", cluster_yaml("fleet", "c", 3)));
    let host = "0c0ffee0-1111-4c5e-9a4e-000000000001";
    assert_eq!(first.register(&s, host).status, 201);
    assert_eq!(first.send_inventory(&s, host, 0).status, 204);
    wait_until("the Agent", || {
        cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", "fleet"], None).status.success()
    });
    let patch = r#"{"spec":{"approved":true,"clusterDeploymentName":{"name":"c","namespace":"fleet"}}}"#;
    assert!(
        cli(
            &["patch", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", "fleet", "--type", "merge", "-p", patch],
            None
        )
        .status
        .success()
    );
    wait_until("bound", || {
        let r = first.call(&s, "GET", &first.id, &format!("/{host}"), None);
        serde_json::from_slice::<Value>(&r.body).is_ok_and(|h| h["cluster_id"].is_string())
    });
    // Binding makes the agent start again: it registers (still through the first InfraEnv) and
    // sends its inventory.
    assert_eq!(first.register(&s, host).status, 201);
    assert_eq!(first.send_inventory(&s, host, 0).status, 204);

    // Booted from the second InfraEnv's image while bound through the first: refused, nothing moves.
    let r = second.register(&s, host);
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("unbind its Agent first"), "{}", r.text());
    assert_eq!(first.call(&s, "GET", &first.id, &format!("/{host}"), None).status, 200);
    assert_eq!(agent(&s, "fleet", host)["metadata"]["labels"]["infraenvs.agent-install.openshift.io"], "first");

    // Unbound, it moves: its Agent now names the second InfraEnv, and the first has no such host.
    let out = cli(
        &[
            "patch",
            "--kubeconfig",
            &s.kubeconfig,
            "agent",
            host,
            "-n",
            "fleet",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"clusterDeploymentName":null}}"#,
        ],
        None,
    );
    assert!(out.status.success());
    wait_until("unbound", || {
        let r = first.call(&s, "GET", &first.id, &format!("/{host}"), None);
        serde_json::from_slice::<Value>(&r.body).is_ok_and(|h| h["cluster_id"].is_null())
    });
    assert_eq!(second.register(&s, host).status, 201);
    assert_eq!(first.call(&s, "GET", &first.id, &format!("/{host}"), None).status, 404);
    wait_until("the Agent to follow its host", || {
        agent(&s, "fleet", host)["metadata"]["labels"]["infraenvs.agent-install.openshift.io"] == "second"
    });
}
