//! Late binding end to end, run the way a user runs it: `bootstream serve`, the CLI (`apply`, `patch`,
//! `delete`, `get`) and `bootstream simulate` playing the hosts' discovery agents over the real agent API.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_bootstream");
const NS: &str = "fleet";

fn simulate(s: &Server, infraenv: &str, hosts: usize, extra: &[&str]) -> KillOnDrop {
    let child = Command::new(BIN)
        .env("BOOTSTREAM_TOKEN", TEST_API_TOKEN)
        .args(["simulate", "--server", &s.url, "--kubeconfig", &s.kubeconfig, "--infraenv", infraenv])
        .args(["--hosts", &hosts.to_string()])
        .args(["--time-scale", "0.02"])
        .args(if extra.contains(&"--reboot-check-seconds") { vec![] } else { vec!["--reboot-check-seconds", "3"] })
        .args(if extra.contains(&"--seed") { vec![] } else { vec!["--seed", infraenv] })
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

fn agents(s: &Server) -> Vec<Value> {
    let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "agents", "-n", NS, "-o", "json"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

fn state(a: &Value) -> &str {
    a["status"]["debugInfo"]["state"].as_str().unwrap_or("")
}

fn name(a: &Value) -> String {
    a["metadata"]["name"].as_str().unwrap().to_string()
}

fn reason<'a>(a: &'a Value, t: &str) -> &'a str {
    condition(a, t).and_then(|c| c["reason"].as_str()).unwrap_or("")
}

fn wait_agents(s: &Server, what: &str, timeout: u64, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        let list = agents(s);
        if done(&list) {
            return list;
        }
        if Instant::now() > deadline {
            let states: Vec<_> =
                list.iter().map(|a| format!("{} {} {}", name(a), state(a), reason(a, "Bound"))).collect();
            panic!("agents never got {what}: {states:#?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn patch(s: &Server, kind: &str, name: &str, json: &str) -> std::process::Output {
    cli(&["patch", "--kubeconfig", &s.kubeconfig, kind, name, "-n", NS, "--type", "merge", "-p", json], None)
}

fn bind(s: &Server, agent: &str, cd: &str) {
    let out = patch(
        s,
        "agent",
        agent,
        &format!(r#"{{"spec":{{"approved":true,"clusterDeploymentName":{{"name":"{cd}","namespace":"{NS}"}}}}}}"#),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A loopback address no one listens on, for a server restarted on the same address (the agents keep
/// the URL they were given).
fn free_loopback_address() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

fn setup(s: &Server) {
    s.apply_ok(&format!("{}---\n{}---\n{IMAGE_SET}", pull_secret_yaml(NS), infraenv_yaml(NS, "pool", "")));
    s.wait_image_created(NS, "pool", "True");
}

#[test]
fn hosts_return_to_the_pool_after_their_cluster_is_deleted_and_are_bound_again() {
    let s = Server::start(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "first", 3));
    // The simulated person reboots waiting hosts every 10 s: long enough to see all three waiting.
    let _fleet = simulate(&s, &format!("{NS}/pool"), 4, &["--reboot-check-seconds", "10"]);

    // Registered as unbound agents.
    let list =
        wait_agents(&s, "4 known-unbound", 60, |l| l.len() == 4 && l.iter().all(|a| state(a) == "known-unbound"));
    for a in &list {
        assert!(a["spec"].get("clusterDeploymentName").is_none());
        assert_eq!(reason(a, "Bound"), "Unbound");
        assert_eq!(a["metadata"]["labels"]["infraenvs.agent-install.openshift.io"], "pool");
    }
    let names: Vec<String> = list.iter().map(name).collect();
    let cluster_hosts = &names[..3];

    // Bound and installed.
    for n in cluster_hosts {
        bind(&s, n, "first");
    }
    wait_agents(&s, "3 installed", 60, |l| {
        l.iter().filter(|a| state(a) == "installed" && reason(a, "Installed") == "InstallationCompleted").count() == 3
    });
    assert_eq!(s.get_json("clusterdeployment", NS, "first")["spec"]["installed"], true);

    // The installed cluster is running, its admin kubeconfig reachable (a SpokeCluster plays it).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spoke = rt.block_on(bootstream::testkit::spoke::SpokeCluster::start());
    let installed = agents(&s);
    let nodes: Vec<String> = installed
        .iter()
        .filter(|a| cluster_hosts.contains(&name(a)))
        .map(|a| a["status"]["inventory"]["hostname"].as_str().unwrap().to_string())
        .collect();
    for node in &nodes {
        spoke.put(
            &format!("/api/v1/nodes/{node}"),
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
        );
    }
    let kubeconfig: String = spoke.kubeconfig().lines().map(|l| format!("    {l}\n")).collect();
    s.apply_ok(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: first-admin-kubeconfig\n  namespace: {NS}\nstringData:\n  kubeconfig: |\n{kubeconfig}"
    ));

    // The ClusterDeployment goes: its agents stay, unbound, waiting for a reboot; the cluster it
    // installed is left as it is (no reclaim agent started there, no node removed).
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "clusterdeployment", "first", "-n", NS], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list = wait_agents(&s, "UnbindingPendingUserAction", 30, |l| {
        l.iter().filter(|a| reason(a, "Bound") == "UnbindingPendingUserAction").count() == 3
    });
    assert_eq!(list.len(), 4, "no agent was deleted");
    for a in list.iter().filter(|a| cluster_hosts.contains(&name(a))) {
        assert!(a["spec"].get("clusterDeploymentName").is_none(), "{a:#}");
        let bound = condition(a, "Bound").unwrap();
        assert_eq!(bound["status"], "False");
        assert_eq!(bound["message"], "The agent is currently unbinding; Pending host reboot from infraenv image");
    }

    // Rebooted into discovery (the simulated person does it): back in the pool.
    wait_agents(&s, "all known-unbound again", 60, |l| l.len() == 4 && l.iter().all(|a| state(a) == "known-unbound"));
    let requests = spoke.requests();
    assert!(requests.iter().all(|r| !r.contains("daemonsets") && !r.starts_with("DELETE")), "{requests:#?}");
    for node in &nodes {
        assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_some(), "{node} stays in the deleted cluster");
    }

    // And bound to a second cluster, installed again.
    s.apply_ok(&cluster_yaml(NS, "second", 3));
    for n in cluster_hosts {
        bind(&s, n, "second");
    }
    wait_agents(&s, "installed in the second cluster", 60, |l| {
        l.iter().filter(|a| state(a) == "installed" && a["spec"]["clusterDeploymentName"]["name"] == "second").count()
            == 3
    });

    // Unbinding one installed agent.
    let out = patch(&s, "agent", &cluster_hosts[0], r#"{"spec":{"clusterDeploymentName":null}}"#);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_agents(&s, "the unbound agent to wait for a reboot", 30, |l| {
        l.iter().any(|a| name(a) == cluster_hosts[0] && reason(a, "Bound") == "UnbindingPendingUserAction")
    });
    wait_agents(&s, "the unbound agent back in the pool", 60, |l| {
        l.iter().any(|a| name(a) == cluster_hosts[0] && state(a) == "known-unbound")
            && l.iter().filter(|a| state(a) == "installed").count() == 2
    });
}

#[test]
fn unbinding_during_installation_is_refused() {
    let s = Server::start(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "slow", 1));
    // Installation stages take 3 s each, so the host is caught installing.
    let _fleet = simulate(&s, &format!("{NS}/pool"), 1, &["--stage-seconds", "3"]);
    let list = wait_agents(&s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    let n = name(&list[0]);
    bind(&s, &n, "slow");
    wait_agents(&s, "installing", 60, |l| state(&l[0]) == "installing-in-progress");
    let out = patch(&s, "agent", &n, r#"{"spec":{"clusterDeploymentName":null}}"#);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Attempted to change Spec.ClusterDeploymentName which is immutable during Agent installation."),
        "{err}"
    );
    let a = s.get_json("agent", NS, &n);
    assert_eq!(a["spec"]["clusterDeploymentName"]["name"], "slow", "nothing changed");
    wait_agents(&s, "installed", 60, |l| state(&l[0]) == "installed");
}

#[test]
fn agents_of_an_infraenv_made_for_the_cluster_are_deleted_with_it() {
    let s = Server::start(&[]);
    s.apply_ok(&format!("{}---\n{IMAGE_SET}", pull_secret_yaml(NS)));
    s.apply_ok(&cluster_yaml(NS, "owned", 2));
    s.apply_ok(&infraenv_yaml(NS, "for-owned", &format!("  clusterRef:\n    name: owned\n    namespace: {NS}\n")));
    s.wait_image_created(NS, "for-owned", "True");
    let _fleet = simulate(&s, &format!("{NS}/for-owned"), 2, &[]);
    let list = wait_agents(&s, "2 bound agents", 60, |l| l.len() == 2 && l.iter().all(|a| state(a) == "known"));
    for a in &list {
        assert_eq!(a["spec"]["clusterDeploymentName"]["name"], "owned");
        assert_eq!(reason(a, "Bound"), "Bound");
        let out = patch(&s, "agent", &name(a), r#"{"spec":{"approved":true}}"#);
        assert!(out.status.success());
    }
    wait_agents(&s, "installed", 60, |l| l.iter().all(|a| state(a) == "installed"));
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "clusterdeployment", "owned", "-n", NS], None);
    assert!(out.status.success());
    wait_agents(&s, "no agents", 30, |l| l.is_empty());
    let hosts = s.get(&format!(
        "/api/assisted-install/v2/infra-envs/{}/hosts",
        s.get_json("infraenv", NS, "for-owned")["metadata"]["uid"].as_str().unwrap()
    ));
    assert_eq!(hosts.status, 401, "the host list needs the agent token");
}

#[test]
fn an_infraenv_with_bound_hosts_stays_until_they_are_released() {
    let s = Server::start(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "hold", 3));
    let _fleet = simulate(&s, &format!("{NS}/pool"), 2, &[]);
    let list =
        wait_agents(&s, "2 known-unbound", 60, |l| l.len() == 2 && l.iter().all(|a| state(a) == "known-unbound"));
    // One host bound to a cluster that cannot install (it wants 3): it holds the InfraEnv.
    let held = name(&list[0]);
    bind(&s, &held, "hold");
    wait_agents(&s, "bound", 30, |l| l.iter().any(|a| name(a) == held && state(a) == "known"));
    let pool = infraenv_as_agents_know_it(&s, NS, "pool");
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "infraenv", "pool", "-n", NS], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ie = s.get_json("infraenv", NS, "pool");
    assert!(ie["metadata"]["deletionTimestamp"].is_string());
    let c = condition(&ie, "DeletionBlocked").expect("a condition names the holding hosts");
    assert!(c["message"].as_str().unwrap().contains(&held), "{c:#}");
    // The free host does not wait for the held one: it goes at once.
    let free = name(&list[1]);
    assert!(!c["message"].as_str().unwrap().contains(&free), "{c:#}");
    wait_agents(&s, "the free host's agent gone", 30, |l| l.len() == 1 && name(&l[0]) == held);
    // And no host registers into the InfraEnv meanwhile (the deleted one would come back).
    let r = pool.register(&s, &free);
    assert_eq!((r.status, r.text().contains("is being deleted")), (409, true), "{}", r.text());
    assert_eq!(agents(&s).len(), 1);
    // Released: the InfraEnv and its agents go.
    let out = patch(&s, "agent", &held, r#"{"spec":{"clusterDeploymentName":null}}"#);
    assert!(out.status.success());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "infraenv", "pool", "-n", NS, "-o", "json"], None);
        if !out.status.success() && agents(&s).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the InfraEnv or its agents stayed");
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn agent_api_requires_the_infraenv_token() {
    let s = Server::start(&[]);
    setup(&s);
    let uid = s.get_json("infraenv", NS, "pool")["metadata"]["uid"].as_str().unwrap().to_string();
    let path = format!("/api/assisted-install/v2/infra-envs/{uid}/hosts");
    let body = br#"{"host_id":"6f1b1b7e-0f4e-4b6a-9d57-0b8a3c1f2e11"}"#;
    let r = request(&s.addr, "POST", &path, &[("content-type", "application/json")], body);
    assert_eq!(r.status, 401);
    let r = request(&s.addr, "POST", &path, &[("X-Secret-Key", "forged"), ("content-type", "application/json")], body);
    assert_eq!(r.status, 401);
    assert!(agents(&s).is_empty(), "nothing registered");
}

/// The number a metrics line `name value` reports, if the exposition has that line.
fn metric_value(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn metrics_show_the_store_writer_and_the_controllers_at_work() {
    let s = Server::start(&[]);
    setup(&s);
    let _fleet = simulate(&s, &format!("{NS}/pool"), 2, &[]);
    wait_agents(&s, "2 known-unbound", 60, |l| l.len() == 2 && l.iter().all(|a| state(a) == "known-unbound"));

    let r = request(&s.addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    let m = String::from_utf8_lossy(&r.body).into_owned();
    let value = |name: &str| metric_value(&m, name).unwrap_or_else(|| panic!("no {name} in:\n{m}"));
    // Registering two hosts wrote their Agents and host records, in at least one transaction.
    let (writes, transactions) = (value("bootstream_store_writes_total"), value("bootstream_store_transactions_total"));
    assert!(
        writes >= 4.0 && transactions >= 1.0 && transactions <= writes,
        "{writes} writes, {transactions} transactions"
    );
    assert!(value("bootstream_store_writer_busy_seconds_total") >= value("bootstream_store_commit_seconds_total"));
    // Every transaction is in the latency histogram, whose buckets add up. (The agents go on writing:
    // the histogram is read after the counters above, so it may have counted more.)
    let counted = value("bootstream_store_transaction_seconds_count");
    assert!(counted >= transactions, "{counted} transactions in the histogram, {transactions} counted");
    assert_eq!(value("bootstream_store_transaction_seconds_bucket{le=\"+Inf\"}"), counted);
    assert!(value("bootstream_store_transaction_seconds_bucket{le=\"0.064\"}") <= counted);
    assert!(value("bootstream_store_transaction_seconds_sum") >= value("bootstream_store_writer_busy_seconds_total"));
    assert!(value("bootstream_store_writes_waiting") >= 0.0);
    assert!(value("bootstream_controller_reconciles_total{controller=\"agent\"}") >= 2.0);
    assert!(value("bootstream_controller_reconciles_total{controller=\"infraenv\"}") >= 1.0);
    assert!(metric_value(&m, "bootstream_controller_queue_depth{controller=\"agent\"}").is_some(), "{m}");
    assert_eq!(value("bootstream_controller_feed_resyncs_total"), 0.0);
    assert_eq!(value("bootstream_hosts{status=\"known-unbound\"}"), 2.0);
    // The agent API's latency histogram resolves milliseconds (its calls take a few).
    assert!(
        m.lines().any(|l| l.starts_with("bootstream_http_request_duration_seconds_bucket{")
            && l.contains("handler=\"/v2/infra-envs/:id/hosts/:host/instructions\"")
            && l.contains("le=\"0.005\"")),
        "{m}"
    );
}

#[test]
fn restarts_at_random_points_lose_or_duplicate_no_agent() {
    let listen = free_loopback_address();
    let mut s = Server::start_in(tempfile::tempdir().unwrap(), &listen, &[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "churn", 5));
    let fleet = simulate(&s, &format!("{NS}/pool"), 8, &[]);
    // Kill the server at pseudo-random moments of the lifecycle; the agents keep retrying.
    let mut seed: u64 = std::process::id() as u64;
    let mut pause = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        Duration::from_millis(200 + (seed >> 33) % 1500)
    };
    let restart = |s: Server| -> Server {
        let dir = s.kill();
        Server::start_in(dir, &listen, &[])
    };
    std::thread::sleep(pause());
    s = restart(s);
    let list =
        wait_agents(&s, "8 known-unbound", 90, |l| l.len() == 8 && l.iter().all(|a| state(a) == "known-unbound"));
    let names: Vec<String> = list.iter().map(name).collect();
    for n in &names[..5] {
        bind(&s, n, "churn");
        if n == &names[2] {
            s = restart(s);
        }
    }
    std::thread::sleep(pause());
    s = restart(s);
    wait_agents(&s, "5 installed", 90, |l| l.len() == 8 && l.iter().filter(|a| state(a) == "installed").count() == 5);
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "clusterdeployment", "churn", "-n", NS], None);
    assert!(out.status.success());
    std::thread::sleep(pause());
    s = restart(s);
    let list = wait_agents(&s, "all back in the pool", 120, |l| {
        l.len() == 8
            && l.iter().all(|a| state(a) == "known-unbound" && a["spec"].get("clusterDeploymentName").is_none())
    });
    let mut after: Vec<String> = list.iter().map(name).collect();
    after.sort();
    let mut before = names.clone();
    before.sort();
    assert_eq!(after, before, "the same 8 agents, none lost or duplicated");
    drop(fleet);
}

/// Issue 32 item 5, as a user meets it: `serve` and `simulate` install a cluster, and it ends with
/// the admin kubeconfig and password Secrets the (simulated) installer reported, referenced from the
/// ClusterDeployment and the AgentClusterInstall, whose six conditions say it is done.
#[test]
fn an_installed_cluster_has_its_admin_secrets_referenced_and_six_conditions() {
    use base64::Engine;
    let s = Server::start(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "sno", 1));
    let _fleet = simulate(&s, &format!("{NS}/pool"), 1, &[]);
    let list = wait_agents(&s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    bind(&s, &name(&list[0]), "sno");
    let deadline = Instant::now() + Duration::from_secs(60);
    let aci = loop {
        let aci = s.get_json("agentclusterinstall", NS, "sno");
        if condition(&aci, "Completed").is_some_and(|c| c["status"] == "True") {
            break aci;
        }
        assert!(Instant::now() < deadline, "the cluster never completed: {aci:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let conditions: Vec<(&str, &str, &str)> = aci["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    for want in [
        ("SpecSynced", "True", "SyncOK"),
        ("Validated", "True", "ValidationsPassing"),
        ("Completed", "True", "InstallationCompleted"),
        ("Failed", "False", "InstallationNotFailed"),
        ("Stopped", "True", "InstallationCompleted"),
    ] {
        assert!(conditions.contains(&want), "{want:?} not in {conditions:?}");
    }
    assert!(conditions.iter().any(|c| c.0 == "RequirementsMet" && c.1 == "True"), "{conditions:?}");

    let cd = s.get_json("clusterdeployment", NS, "sno");
    assert_eq!(cd["spec"]["installed"], true);
    let meta = &cd["spec"]["clusterMetadata"];
    assert_eq!(meta["adminKubeconfigSecretRef"]["name"], "sno-admin-kubeconfig");
    assert_eq!(meta["adminPasswordSecretRef"]["name"], "sno-admin-password");
    assert_eq!(&aci["spec"]["clusterMetadata"], meta, "the ACI names the same");
    let cluster_id = meta["clusterID"].as_str().unwrap();
    let value = |secret: &str, key: &str| {
        let v = s.get_json("secret", NS, secret);
        let b64 = v["data"][key].as_str().unwrap_or_else(|| panic!("no {key} in {v:#}")).to_string();
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap()
    };
    assert_eq!(
        value("sno-admin-kubeconfig", "kubeconfig"),
        bootstream::cli::simulate::simulated_kubeconfig(cluster_id)
    );
    assert_eq!(value("sno-admin-password", "username"), "kubeadmin");
    assert_eq!(value("sno-admin-password", "password"), bootstream::cli::simulate::simulated_password(cluster_id));
    let secret = s.get_json("secret", NS, "sno-admin-kubeconfig");
    assert_eq!(secret["metadata"]["labels"]["cluster.open-cluster-management.io/backup"], "true");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["kind"], "ClusterDeployment");
}

/// Issue 32 item 5: installer arguments coreos-installer's allowed list lacks, or Ignition overrides
/// that are no Ignition config, are refused with the Agent's SpecSynced saying which; fixed, they sync.
#[test]
fn an_agents_bad_installer_args_or_ignition_overrides_are_named_in_its_condition() {
    let s = Server::start(&[]);
    setup(&s);
    let _fleet = simulate(&s, &format!("{NS}/pool"), 1, &[]);
    let list = wait_agents(&s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    let n = name(&list[0]);
    let synced = |what: &str, done: &dyn Fn(&Value) -> bool| {
        wait_agents(&s, what, 30, |l| condition(&l[0], "SpecSynced").is_some_and(done))[0].clone()
    };
    for (spec, message) in [
        (r#"{"spec":{"installerArgs":"[\"--console\", \"ttyS0\"]"}}"#, "found unexpected flag --console for installer"),
        (
            r#"{"spec":{"installerArgs":null,"ignitionConfigOverrides":"{\"ignition\":{\"version\":\"2.2.0\"}}"}}"#,
            "2.2.0",
        ),
    ] {
        let out = patch(&s, "agent", &n, spec);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let a =
            synced(message, &|c| c["status"] == "False" && c["message"].as_str().is_some_and(|m| m.contains(message)));
        assert_eq!(condition(&a, "SpecSynced").unwrap()["reason"], "InputError");
    }
    let out = patch(
        &s,
        "agent",
        &n,
        r#"{"spec":{"installerArgs":"[\"--append-karg\", \"ip=dhcp\"]","ignitionConfigOverrides":"{\"ignition\":{\"version\":\"3.2.0\"}}"}}"#,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    synced("synced again", &|c| c["status"] == "True");
}

/// One simulated host (`simulate` with `sim_args`) bound to ClusterDeployment `spoke` and installed, its
/// node in `spoke`, whose admin kubeconfig secret reaches it: the fleet, the Agent's name and the node's.
fn installed_on_spoke(
    s: &Server,
    spoke: &bootstream::testkit::spoke::SpokeCluster,
    sim_args: &[&str],
) -> (KillOnDrop, String, String) {
    setup(s);
    s.apply_ok(&cluster_yaml(NS, "spoke", 1));
    let fleet = simulate(s, &format!("{NS}/pool"), 1, sim_args);
    let list = wait_agents(s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    let n = name(&list[0]);
    bind(s, &n, "spoke");
    let list = wait_agents(s, "installed", 60, |l| state(&l[0]) == "installed");
    let node = list[0]["status"]["inventory"]["hostname"].as_str().unwrap().to_string();
    spoke.put(
        &format!("/api/v1/nodes/{node}"),
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    );
    let kubeconfig: String = spoke.kubeconfig().lines().map(|l| format!("    {l}\n")).collect();
    s.apply_ok(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: spoke-admin-kubeconfig\n  namespace: {NS}\nstringData:\n  kubeconfig: |\n{kubeconfig}"
    ));
    (fleet, n, node)
}

/// §7 end to end: an installed host whose cluster's admin kubeconfig reaches the installed cluster is
/// reclaimed when unbound. bootstream starts the reclaim agent there (a SpokeCluster plays the
/// cluster), the simulated node runs its steps and reboots into discovery, and its Node is removed.
#[test]
fn an_unbound_installed_host_is_reclaimed_through_its_cluster() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spoke = rt.block_on(bootstream::testkit::spoke::SpokeCluster::start());
    let s = Server::start(&[]);
    let (_fleet, n, node) = installed_on_spoke(&s, &spoke, &[]);

    let out = patch(&s, "agent", &n, r#"{"spec":{"clusterDeploymentName":null}}"#);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_agents(&s, "back in the pool", 90, |l| {
        state(&l[0]) == "known-unbound" && l[0]["status"].get("deprovisionInfo").is_none()
    });
    let requests = spoke.requests();
    let ds = format!("PATCH /apis/apps/v1/namespaces/assisted-installer/daemonsets/{node}-reclaim");
    let started =
        requests.iter().position(|r| *r == ds).unwrap_or_else(|| panic!("no reclaim DaemonSet: {requests:#?}"));
    let removed = requests.iter().position(|r| *r == format!("DELETE /api/v1/nodes/{node}"));
    assert!(removed.is_some_and(|i| i > started), "the node is removed after the reclaim: {requests:#?}");
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none());
}

/// Issue 43: reclaim from a hub whose HTTPS certificate a private CA signed (`serve --tls-cert
/// --service-ca-cert`). The reclaim agent on the node knows only what bootstream wrote to the spoke: the
/// test plays its pod from the DaemonSet's arguments, the CA ConfigMap and the token Secret, over TLS that
/// trusts that CA alone (without it the hub is not trusted), through the download and the reboot; the
/// machine then boots into discovery and is back in the pool, its node removed.
#[test]
fn a_host_is_reclaimed_from_a_hub_whose_certificate_a_private_ca_signed() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let spoke = rt.block_on(bootstream::testkit::spoke::SpokeCluster::start());
    let certs_dir = tempfile::tempdir().unwrap();
    let certs = make_certs(certs_dir.path(), "hub");
    let cacert = certs.ca.to_str().unwrap();
    let s = Server::start_tls(&certs, &[]);
    let (fleet, n, node) = installed_on_spoke(&s, &spoke, &["--cacert", cacert]);
    // The node runs its installed OS: no discovery agent any more.
    drop(fleet);

    let out = patch(&s, "agent", &n, r#"{"spec":{"clusterDeploymentName":null}}"#);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_agents(&s, "reclaiming", 60, |l| state(&l[0]) == "reclaiming");

    // The reclaim pod, from what the spoke holds.
    let ds = spoke
        .get(&format!("/apis/apps/v1/namespaces/assisted-installer/daemonsets/{}-reclaim", node.replace('.', "-")))
        .unwrap_or_else(|| panic!("no reclaim DaemonSet: {:#?}", spoke.paths()));
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let arg = |flag: &str| {
        args.iter().find_map(|a| a.strip_prefix(&format!("-{flag}="))).unwrap_or_else(|| panic!("-{flag} in {args:?}"))
    };
    assert_eq!(arg("insecure"), "false");
    assert_eq!(arg("cacert"), "/etc/assisted-service/service-ca-cert.crt");
    let url = arg("url");
    assert_eq!(url, s.url, "the hub's HTTPS URL");
    let addr = url.strip_prefix("https://").unwrap();
    let (ie_id, host_id) = (arg("infra-env-id"), arg("host-id"));
    let cm = spoke.get("/api/v1/namespaces/assisted-installer/configmaps/reclaim-config").expect("the CA ConfigMap");
    let ca = cm["data"]["service-ca-cert.crt"].as_str().expect("the service CA").as_bytes().to_vec();
    let secret = spoke
        .get(&format!("/api/v1/namespaces/assisted-installer/secrets/reclaim-{ie_id}-token"))
        .expect("the token Secret");
    let token = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        secret["data"]["auth-token"].as_str().expect("the agent token"),
    )
    .unwrap();
    let token = String::from_utf8(token).unwrap();
    let instructions = format!("/api/assisted-install/v2/infra-envs/{ie_id}/hosts/{host_id}/instructions");
    let pod = |method: &str, path: &str, body: &[u8]| {
        let headers = [("X-Secret-Key", token.as_str()), ("Content-Type", "application/json")];
        tls_request(addr, &ca, method, path, &headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    };
    // Without that CA the hub is not trusted: the CA is what makes the reclaim possible.
    let other = make_certs(certs_dir.path(), "other");
    assert!(tls_request(addr, &std::fs::read(&other.ca).unwrap(), "GET", &instructions, &[], b"").is_err());

    let steps: Value = serde_json::from_slice(&pod("GET", &instructions, b"").body).unwrap();
    let step = &steps["instructions"][0];
    assert_eq!(step["step_type"], "download-boot-artifacts", "{steps:#}");
    let download: Value = serde_json::from_str(step["args"][0].as_str().unwrap()).unwrap();
    for which in ["kernel_url", "initrd_url"] {
        let artifact = download[which].as_str().unwrap();
        assert!(artifact.starts_with(&s.url), "{which}: {artifact}");
        let r = pod("GET", &s.path_of(artifact), b"");
        assert_eq!(r.status, 200, "{which}: {}", r.text());
    }
    let reply = serde_json::json!({"step_type": "download-boot-artifacts", "step_id": step["step_id"],
                                   "exit_code": 0, "output": ""});
    let r = pod("POST", &instructions, reply.to_string().as_bytes());
    assert!(r.status < 300, "{} {}", r.status, r.text());
    let steps: Value = serde_json::from_slice(&pod("GET", &instructions, b"").body).unwrap();
    assert_eq!(steps["instructions"][0]["step_type"], "reboot-for-reclaim", "{steps:#}");

    // The node reboots into discovery: its agent registers, and the host is back in the pool.
    let _fleet = simulate(&s, &format!("{NS}/pool"), 1, &["--cacert", cacert]);
    wait_agents(&s, "back in the pool", 90, |l| {
        state(&l[0]) == "known-unbound" && l[0]["status"].get("deprovisionInfo").is_none()
    });
    assert!(spoke.get(&format!("/api/v1/nodes/{node}")).is_none(), "the node is removed");
}

/// Scenario 78: a PXE-booting host that is already installed gets a 404 for its MAC, so that iPXE
/// boots its disk; a host of the pool gets the discovery script.
#[test]
fn scenario_78_ipxe_skips_installed_hosts_by_mac() {
    let s = Server::start(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "pxe", 1));
    let _fleet = simulate(&s, &format!("{NS}/pool"), 2, &[]);
    let list =
        wait_agents(&s, "2 known-unbound", 60, |l| l.len() == 2 && l.iter().all(|a| state(a) == "known-unbound"));
    let (installed, pool) = (name(&list[0]), name(&list[1]));
    bind(&s, &installed, "pxe");
    let list = wait_agents(&s, "one installed", 60, |l| l.iter().any(|a| state(a) == "installed"));
    let mac_of = |n: &str| {
        let a = list.iter().find(|a| name(a) == n).unwrap();
        a["status"]["inventory"]["interfaces"][0]["macAddress"].as_str().unwrap().to_string()
    };
    let ie_id = s.get_json("infraenv", NS, "pool")["metadata"]["uid"].as_str().unwrap().to_string();
    let script = |mac: &str| {
        s.get(&format!("/api/assisted-install/v2/infra-envs/{ie_id}/downloads/files?file_name=ipxe-script&mac={mac}"))
    };
    // Upper case, as iPXE may send it.
    let mac = mac_of(&installed).to_uppercase();
    let r = script(&mac);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(
        r.text().trim(),
        format!("IPXE booting skipped. InfraEnv {ie_id}: host {installed} having mac {mac} is already installed")
    );
    let r = script(&mac_of(&pool));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("#!ipxe\ninitrd --name initrd "), "{}", r.text());
    let r = script("aa:bb:cc:dd:ee:ff");
    assert_eq!(r.status, 200);
}

/// §8.1: two hosts of one InfraEnv reporting the same MAC are an error, not a guess.
#[test]
fn ipxe_refuses_a_mac_two_hosts_report() {
    let s = Server::start(&[]);
    setup(&s);
    // Two fleets with different seeds: different host ids, the same MAC for their first machine.
    let _first = simulate(&s, &format!("{NS}/pool"), 1, &["--seed", "one"]);
    let _second = simulate(&s, &format!("{NS}/pool"), 1, &["--seed", "two"]);
    let list =
        wait_agents(&s, "2 known-unbound", 60, |l| l.len() == 2 && l.iter().all(|a| state(a) == "known-unbound"));
    let macs: Vec<&str> =
        list.iter().map(|a| a["status"]["inventory"]["interfaces"][0]["macAddress"].as_str().unwrap()).collect();
    assert_eq!(macs[0], macs[1]);
    let ie_id = s.get_json("infraenv", NS, "pool")["metadata"]["uid"].as_str().unwrap().to_string();
    let r = s.get(&format!(
        "/api/assisted-install/v2/infra-envs/{ie_id}/downloads/files?file_name=ipxe-script&mac={}",
        macs[0]
    ));
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(r.text().trim(), format!("IPXE booting skipped. Unexpected number of hosts 2 with mac {}", macs[0]));
}

/// A server killed between writing a host and creating its Agent (registration does both) gets the
/// Agent back when it starts: the host is neither lost nor invisible.
#[test]
fn a_host_registered_without_its_agent_gets_it_at_start() {
    let listen = free_loopback_address();
    let s = Server::start_in(tempfile::tempdir().unwrap(), &listen, &[]);
    setup(&s);
    let fleet = simulate(&s, &format!("{NS}/pool"), 1, &[]);
    let list = wait_agents(&s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    let host = name(&list[0]);
    drop(fleet);
    let dir = s.kill();
    // The state a kill between the two writes leaves: the host record, no Agent.
    let db = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
    let removed = db.execute("DELETE FROM objects WHERE resource = 'agents.agent-install.openshift.io'", []).unwrap();
    assert_eq!(removed, 1);
    drop(db);
    let s = Server::start_in(dir, &listen, &[]);
    let list = wait_agents(&s, "the Agent back", 30, |l| l.len() == 1);
    assert_eq!(name(&list[0]), host);
    assert_eq!(list[0]["metadata"]["labels"]["infraenvs.agent-install.openshift.io"], "pool");
}

/// §2.2 logsURL: the installer uploads a host's logs when it is done, the Agent links them, and the
/// link serves what was uploaded. Bad uploads are refused and leave the stored logs as they were.
/// The link is signed for its cluster (with signed URLs, the default): it needs no API token, and
/// another cluster's token or none opens nothing.
#[test]
fn installed_hosts_logs_are_linked_from_their_agent() {
    let s = Server::start_signed(&[]);
    setup(&s);
    s.apply_ok(&cluster_yaml(NS, "logs", 1));
    let _fleet = simulate(&s, &format!("{NS}/pool"), 1, &[]);
    let list = wait_agents(&s, "a known-unbound agent", 60, |l| l.len() == 1 && state(&l[0]) == "known-unbound");
    let n = name(&list[0]);
    bind(&s, &n, "logs");
    let list = wait_agents(&s, "a logsURL", 60, |l| l[0]["status"]["debugInfo"]["logsURL"].is_string());
    assert_eq!(state(&list[0]), "installed");
    let url = list[0]["status"]["debugInfo"]["logsURL"].as_str().unwrap();
    let path = &url[url.find("/api/").unwrap()..];
    let (unsigned, api_key) = path.split_once("&api_key=").unwrap_or_else(|| panic!("unsigned logsURL {url}"));
    let cluster_id = unsigned
        .strip_prefix("/api/assisted-install/v2/clusters/")
        .and_then(|p| p.strip_suffix(&format!("/logs?host_id={n}&logs_type=host")))
        .unwrap_or_else(|| panic!("unexpected logsURL {url}"));
    let uploaded = bootstream::cli::simulate::simulated_logs(&n);
    // The signed link alone, no API token.
    let download = |s: &Server| {
        let r = request(&s.addr, "GET", path, &[], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert!(r.header("content-disposition").unwrap().starts_with("attachment; filename=logs_"));
        r.body
    };
    assert_eq!(download(&s), uploaded);
    let without_key = s.api_request("GET", unsigned, &[], b"");
    assert_eq!(without_key.status, 401, "{}", without_key.text());
    // Without the signed key the link takes the API token: not on the plain listener.
    assert_eq!(request(&s.addr, "GET", unsigned, &[], b"").status, 404);
    assert_eq!(s.get(unsigned).status, 200, "the API token opens the logs too");
    let other_cluster = path.replace(cluster_id, "00000000-0000-0000-0000-000000000000");
    let r = request(&s.addr, "GET", &other_cluster, &[], b"");
    assert_eq!(r.status, 403, "another cluster's logs with this cluster's token: {}", r.text());
    let last = if api_key.ends_with('A') { 'B' } else { 'A' };
    let tampered = format!("{unsigned}&api_key={}{last}", &api_key[..api_key.len() - 1]);
    assert_eq!(request(&s.addr, "GET", &tampered, &[], b"").status, 401);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api_ca = std::fs::read(s.data_dir.path().join("api-tls/tls.crt")).unwrap();
    let api_client = reqwest::Client::builder()
        .tls_certs_merge(reqwest::Certificate::from_pem_bundle(&api_ca).unwrap())
        .build()
        .unwrap();
    let target = rt
        .block_on(bootstream::cli::simulate::Target::discover_through(
            &api_client,
            &bootstream::cli::simulate::client(),
            &s.api_url(),
            &s.url,
            &format!("{NS}/pool"),
            Some(TEST_API_TOKEN),
        ))
        .unwrap();
    let upload = |cluster: &str, token: &str, content_type: &str, body: &[u8]| {
        let path = format!(
            "/api/assisted-install/v2/clusters/{cluster}/logs?logs_type=host&infra_env_id={}&host_id={n}",
            target.infra_env_id
        );
        let mut headers = vec![("content-type", content_type)];
        if !token.is_empty() {
            headers.push(("x-secret-key", token));
        }
        try_request(&s.addr, "POST", &path, &headers, body).unwrap()
    };
    let multipart = "multipart/form-data; boundary=b";
    let replacement =
        b"--b\r\nContent-Disposition: form-data; name=\"upfile\"; filename=\"x\"\r\n\r\nother\r\n--b--\r\n";
    assert_eq!(upload(cluster_id, "", multipart, replacement).status, 401, "no token");
    assert_eq!(upload(cluster_id, "not-the-token", multipart, replacement).status, 401, "a wrong token");
    let elsewhere = upload("00000000-0000-0000-0000-000000000000", &target.token, multipart, replacement);
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.text());
    let not_multipart = upload(cluster_id, &target.token, "application/gzip", b"other");
    assert_eq!(not_multipart.status, 400, "{}", not_multipart.text());
    let no_file = upload(
        cluster_id,
        &target.token,
        multipart,
        b"--b\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--b--\r\n",
    );
    assert_eq!(no_file.status, 400, "{}", no_file.text());
    let truncated = upload(
        cluster_id,
        &target.token,
        multipart,
        b"--b\r\nContent-Disposition: form-data; name=\"upfile\"\r\n\r\nhalf of it",
    );
    assert_eq!(truncated.status, 400, "{}", truncated.text());
    assert_eq!(download(&s), uploaded, "refused uploads change nothing");

    // A new upload replaces the logs.
    assert_eq!(upload(cluster_id, &target.token, multipart, replacement).status, 204);
    assert_eq!(download(&s), b"other");

    // The logs go with their cluster.
    let logs_dir = s.data_dir.path().join("logs").join(cluster_id);
    assert!(logs_dir.is_dir());
    let out = cli(&["delete", "--kubeconfig", &s.kubeconfig, "clusterdeployment", "logs", "-n", NS], None);
    assert!(out.status.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while logs_dir.exists() {
        assert!(Instant::now() < deadline, "the logs of a deleted cluster are still in {}", logs_dir.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(s.get(path).status, 404);
}
