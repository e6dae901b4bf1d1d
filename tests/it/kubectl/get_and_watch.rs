//! Reading with kubectl: `get` in every output a user or a script reads, with label and field
//! selectors and across namespaces, the Agents' printer columns as upstream's, and `get -w`.

use super::{Kubectl, infraenv, nmstateconfig, wait_for};
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A table as kubectl prints it (Go's tabwriter: each cell but the last padded to its column's
/// width plus 3 spaces).
fn table(rows: &[Vec<&str>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..columns).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        for (c, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if c + 1 < row.len() {
                out.push_str(&" ".repeat(widths[c] - cell.len() + 3));
            }
        }
        out.push('\n');
    }
    out
}

#[test]
fn kubectl_get_prints_every_output_with_selectors() {
    let k = Kubectl::start();
    for ns in ["get-a", "get-b"] {
        k.namespace_with_pull_secret(ns);
    }
    let mut docs = String::new();
    for (ns, name, tier) in [("get-a", "alpha", "gold"), ("get-a", "beta", "silver"), ("get-b", "gamma", "gold")] {
        docs.push_str(
            &infraenv(ns, name, "")
                .replace(&format!("  namespace: {ns}\n"), &format!("  namespace: {ns}\n  labels:\n    tier: {tier}\n")),
        );
        docs.push_str("---\n");
    }
    docs.push_str(&infraenv("get-a", "plain", ""));
    k.ok_in(&["apply", "-f", "-"], Some(&docs));
    let created = |ns: &str, name: &str| k.jsonpath("infraenv", ns, name, "{.status.createdTime}");
    let iso = |ns: &str, name: &str| k.jsonpath("infraenv", ns, name, "{.status.isoDownloadURL}");
    let (alpha, beta, plain, gamma) =
        (created("get-a", "alpha"), created("get-a", "beta"), created("get-a", "plain"), created("get-b", "gamma"));
    assert!(!alpha.is_empty());

    // Tables: upstream's printer columns (ISO URL only in the wide output).
    assert_eq!(
        k.ok(&["get", "infraenvs", "-n", "get-a"]),
        table(&[vec!["NAME", "ISO CREATED AT"], vec!["alpha", &alpha], vec!["beta", &beta], vec!["plain", &plain]])
    );
    let (alpha_iso, gamma_iso) = (iso("get-a", "alpha"), iso("get-b", "gamma"));
    assert!(alpha_iso.starts_with(&k.server.url), "{alpha_iso}");
    assert_eq!(
        k.ok(&["get", "infraenv", "alpha", "-n", "get-a", "-o", "wide"]),
        table(&[vec!["NAME", "ISO CREATED AT", "ISO URL"], vec!["alpha", &alpha, &alpha_iso]])
    );
    assert_eq!(
        k.ok(&["get", "infraenvs", "-A", "-l", "tier=gold"]),
        table(&[
            vec!["NAMESPACE", "NAME", "ISO CREATED AT"],
            vec!["get-a", "alpha", &alpha],
            vec!["get-b", "gamma", &gamma]
        ])
    );
    assert_eq!(
        k.ok(&["get", "infraenvs", "-A", "-o", "wide", "--field-selector", "metadata.namespace=get-b"]),
        table(&[vec!["NAMESPACE", "NAME", "ISO CREATED AT", "ISO URL"], vec!["get-b", "gamma", &gamma, &gamma_iso]])
    );
    assert_eq!(
        k.ok(&["get", "infraenvs", "-n", "get-a", "--show-labels"]),
        table(&[
            vec!["NAME", "ISO CREATED AT", "LABELS"],
            vec!["alpha", &alpha, "tier=gold"],
            vec!["beta", &beta, "tier=silver"],
            vec!["plain", &plain, "<none>"]
        ])
    );
    assert_eq!(
        k.ok(&["get", "infraenvs", "-n", "get-a", "-L", "tier", "--no-headers"]),
        table(&[vec!["alpha", &alpha, "gold"], vec!["beta", &beta, "silver"], vec!["plain", &plain, ""]])
    );

    // Names, with every kind of selector.
    let names = |args: &[&str]| k.ok(&[&["get", "infraenvs", "-o", "name"], args].concat());
    let ie =
        |names: &[&str]| names.iter().map(|n| format!("infraenv.agent-install.openshift.io/{n}\n")).collect::<String>();
    assert_eq!(names(&["-n", "get-a"]), ie(&["alpha", "beta", "plain"]));
    assert_eq!(names(&["-A"]), ie(&["alpha", "beta", "plain", "gamma"]));
    assert_eq!(names(&["-A", "-l", "tier=gold"]), ie(&["alpha", "gamma"]));
    assert_eq!(names(&["-A", "-l", "tier in (gold,silver)"]), ie(&["alpha", "beta", "gamma"]));
    assert_eq!(names(&["-A", "-l", "tier!=gold"]), ie(&["beta", "plain"]));
    assert_eq!(names(&["-A", "-l", "!tier"]), ie(&["plain"]));
    assert_eq!(names(&["-A", "-l", "tier"]), ie(&["alpha", "beta", "gamma"]));
    assert_eq!(names(&["-A", "--field-selector", "metadata.name=beta"]), ie(&["beta"]));
    assert_eq!(names(&["-A", "--field-selector", "metadata.name!=beta", "-l", "tier"]), ie(&["alpha", "gamma"]));
    // Pages: kubectl's --chunk-size follows the continue tokens.
    assert_eq!(names(&["-A", "--chunk-size=1"]), ie(&["alpha", "beta", "plain", "gamma"]));
    let none = k.run(&["get", "infraenvs", "-n", "get-a", "-l", "tier=bronze"]);
    assert!(none.status.success());
    assert_eq!(String::from_utf8_lossy(&none.stdout), "");
    assert_eq!(String::from_utf8_lossy(&none.stderr), "No resources found in get-a namespace.\n");
    let bad = k.fails(&["get", "infraenvs", "-A", "--field-selector", "spec.cpuArchitecture=x86_64"]);
    assert!(bad.contains("field label not supported: spec.cpuArchitecture"), "{bad}");
    assert_eq!(
        k.fails(&["get", "infraenv", "nosuch", "-n", "get-a"]),
        "Error from server (NotFound): infraenvs.agent-install.openshift.io \"nosuch\" not found\n"
    );

    // JSON, YAML, jsonpath and custom columns.
    let one: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "infraenv", "alpha", "-n", "get-a", "-o", "json"])).unwrap();
    assert_eq!((one["kind"].as_str(), one["metadata"]["name"].as_str()), (Some("InfraEnv"), Some("alpha")));
    assert_eq!(one["status"]["isoDownloadURL"], alpha_iso.as_str());
    let list: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "infraenvs", "-n", "get-a", "-o", "json"])).unwrap();
    assert_eq!(list["kind"], "List");
    let listed: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["alpha", "beta", "plain"]);
    let yaml = k.ok(&["get", "infraenv", "alpha", "-n", "get-a", "-o", "yaml"]);
    assert!(yaml.starts_with("apiVersion: agent-install.openshift.io/v1beta1\nkind: InfraEnv\nmetadata:\n"), "{yaml}");
    let from_yaml: serde_json::Value = {
        use serde::Deserialize;
        serde_json::Value::deserialize(yaml_serde::Deserializer::from_str(&yaml)).unwrap()
    };
    assert_eq!(from_yaml, one, "-o yaml and -o json show the same object");
    assert_eq!(
        k.ok(&[
            "get",
            "infraenvs",
            "-A",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}={.metadata.labels.tier}{"\n"}{end}"#
        ]),
        "get-a/alpha=gold\nget-a/beta=silver\nget-a/plain=\nget-b/gamma=gold\n"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "infraenv",
            "alpha",
            "-n",
            "get-a",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"ImageCreated\")].status}"
        ]),
        "True"
    );
    assert_eq!(
        k.ok(&[
            "get",
            "infraenvs",
            "-n",
            "get-a",
            "-o",
            "custom-columns=NAME:.metadata.name,SECRET:.spec.pullSecretRef.name"
        ]),
        table(&[
            vec!["NAME", "SECRET"],
            vec!["alpha", "pull-secret"],
            vec!["beta", "pull-secret"],
            vec!["plain", "pull-secret"]
        ])
    );
    // Core kinds print their built-in columns.
    let secrets = k.ok(&["get", "secrets", "-n", "get-a"]);
    let rows: Vec<Vec<&str>> = secrets.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "TYPE", "DATA", "AGE"]);
    assert_eq!(rows[1][..3], ["pull-secret", "kubernetes.io/dockerconfigjson", "1"]);
    let namespaces = k.ok(&["get", "namespaces"]);
    let rows: Vec<Vec<&str>> = namespaces.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "AGE"]);
    let listed: Vec<&[&str]> = rows[1..].iter().map(|r| &r[..2]).collect();
    assert_eq!(listed, [["default", "Active"], ["get-a", "Active"], ["get-b", "Active"]]);
}

#[test]
fn kubectl_get_agents_shows_upstreams_printer_columns() {
    let k = Kubectl::start();
    k.namespace_with_pull_secret("fleet");
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("fleet", "pool", "")));
    // A host boots the image and its agent registers and reports its inventory.
    let tenant = common::infraenv_as_agents_know_it(&k.server, "fleet", "pool");
    let host = "4f0b4d9c-0e7a-4a34-9a38-1c1d5f9d0001";
    assert_eq!(tenant.register(&k.server, host).status, 201);
    assert!(tenant.send_inventory(&k.server, host, 0).status < 300);
    let hostname = wait_for("the Agent's inventory", || {
        let h = k.jsonpath("agent", "fleet", host, "{.status.inventory.hostname}");
        (!h.is_empty()).then_some(h)
    });
    let role = k.jsonpath("agent", "fleet", host, "{.status.role}");
    assert_eq!(role, "auto-assign");
    assert_eq!(
        k.ok(&["get", "agents", "-n", "fleet"]),
        table(&[vec!["NAME", "CLUSTER", "APPROVED", "ROLE", "STAGE"], vec![host, "", "false", "auto-assign", ""]])
    );
    // The user approves it and names it; wide adds the hostnames.
    k.ok(&[
        "patch",
        "agent",
        host,
        "-n",
        "fleet",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"approved":true,"hostname":"worker-0"}}"#,
    ]);
    assert_eq!(
        k.ok(&["get", "agents", "-n", "fleet", "-o", "wide"]),
        table(&[
            vec!["NAME", "CLUSTER", "APPROVED", "ROLE", "STAGE", "HOSTNAME", "REQUESTED HOSTNAME"],
            vec![host, "", "true", "auto-assign", "", &hostname, "worker-0"]
        ])
    );
    assert_eq!(
        k.ok(&["get", "agents", "-A", "-l", "infraenvs.agent-install.openshift.io=pool", "-o", "name"]),
        format!("agent.agent-install.openshift.io/{host}\n")
    );
}

/// `kubectl get -w`: its lines as they come.
struct Watching {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Watching {
    fn start(k: &Kubectl, args: &[&str]) -> Watching {
        let mut child =
            k.command(&k.kubeconfig()).args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Watching { child, lines }
    }

    fn next(&self, what: &str) -> String {
        self.lines.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("kubectl -w never printed {what}"))
    }

    /// The next line, split into its cells.
    fn next_cells(&self, what: &str) -> Vec<String> {
        self.next(what).split_whitespace().map(str::to_string).collect()
    }

    /// Nothing more within `quiet`.
    fn silent(&self, quiet: Duration) {
        if let Ok(line) = self.lines.recv_timeout(quiet) {
            panic!("kubectl -w printed an unexpected line: {line:?}");
        }
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn kubectl_get_watch_sees_the_changes_made_meanwhile() {
    let k = Kubectl::start();
    k.namespace_with_pull_secret("watch");
    let nmstate = |name: &str, n: u8| nmstateconfig("watch", name, &format!("02:00:00:80:12:{n:02x}"));
    k.ok_in(&["apply", "-f", "-"], Some(&format!("{}---\n{}", nmstate("one", 1), nmstate("two", 2))));

    // The list, then each change once: none replayed from before the list.
    let w = Watching::start(&k, &["get", "nmstateconfigs", "-n", "watch", "-w", "--output-watch-events"]);
    assert_eq!(w.next_cells("the header"), ["EVENT", "NAME", "AGE"]);
    assert_eq!(w.next_cells("one")[..2], ["ADDED", "one"]);
    assert_eq!(w.next_cells("two")[..2], ["ADDED", "two"]);
    w.silent(Duration::from_millis(500));
    k.ok(&["label", "nmstateconfig", "two", "-n", "watch", "color=red"]);
    assert_eq!(w.next_cells("the label")[..2], ["MODIFIED", "two"]);
    k.ok_in(&["apply", "-f", "-"], Some(&nmstate("three", 3)));
    assert_eq!(w.next_cells("the new one")[..2], ["ADDED", "three"]);
    k.ok(&["delete", "nmstateconfig", "one", "-n", "watch"]);
    assert_eq!(w.next_cells("the deletion")[..2], ["DELETED", "one"]);
    w.silent(Duration::from_millis(500));
    drop(w);

    // An InfraEnv watched across namespaces, printed by a template, sees the label it gets.
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("watch", "pool", "")));
    let w = Watching::start(
        &k,
        &["get", "infraenvs", "-A", "-w", "-o", r#"jsonpath={.metadata.name} color={.metadata.labels.color}{"\n"}"#],
    );
    assert_eq!(w.next("the InfraEnv"), "pool color=");
    k.ok(&["label", "infraenv", "pool", "-n", "watch", "color=red"]);
    loop {
        // The controller may write the status meanwhile: each is one more line.
        let line = w.next("the labelled InfraEnv");
        if line == "pool color=red" {
            break;
        }
        assert_eq!(line, "pool color=");
    }
    drop(w);

    // A watch bounded by --request-timeout ends by itself.
    let started = std::time::Instant::now();
    let out = k.run(&["get", "nmstateconfigs", "-n", "watch", "-w", "-o", "name", "--request-timeout=2s"]);
    assert!(started.elapsed() < Duration::from_secs(20), "the watch outlived its timeout");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "nmstateconfig.agent-install.openshift.io/three\nnmstateconfig.agent-install.openshift.io/two\n"
    );
}

/// A watch (or a list) from a resourceVersion newer than any the server has recorded is answered as
/// kube-apiserver answers it, once it waited for the version a moment: 504, reason `Timeout`, cause
/// `ResourceVersionTooLarge` (client-go's reflector then waits and lists again). It used to wait
/// silently for a version that might never come.
#[test]
fn a_watch_from_a_future_resource_version_is_too_large() {
    let k = Kubectl::start();
    let s = &k.server;
    let list = s.get("/api/v1/namespaces/default/secrets");
    assert_eq!(list.status, 200, "{}", list.text());
    let list: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    let current: i64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let future = current + 1_000_000;
    for path in [
        format!("/api/v1/namespaces/default/secrets?watch=true&resourceVersion={future}"),
        format!("/api/v1/namespaces/default/secrets?resourceVersion={future}"),
    ] {
        let started = std::time::Instant::now();
        let r = s.get(&path);
        let waited = started.elapsed();
        assert_eq!(r.status, 504, "{path}: {}", r.text());
        assert!(waited >= Duration::from_secs(2), "{path}: answered after {waited:?}, without waiting");
        assert_eq!(r.header("retry-after"), Some("1"));
        let status: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("Timeout")));
        assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        let message = status["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("Timeout: Too large resource version: {future}, current: ")), "{message}");
    }
    // The current version itself is served at once.
    let r = s.get(&format!("/api/v1/namespaces/default/secrets?resourceVersion={current}"));
    assert_eq!(r.status, 200, "{}", r.text());
}
