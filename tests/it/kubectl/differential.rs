//! Differential conformance: the same steps, by kubectl, kube-rs and Debian's Python client, against
//! the real Kubernetes hub (kube-apiserver 1.36 with `deploy/crds`, [`RealHub`]) and against
//! `bootstream serve`, in a namespace of the same name on both; what comes back is compared after
//! the values no two servers share are normalized (uids, resourceVersions, times, ages). A mismatch
//! prints both sides. Every comparison also checks the hub's answer is the one the step is about
//! (an AlreadyExists, a conflict...), so that two servers failing alike for another reason do not pass.
//!
//! The kinds compared are those no controller of `serve` writes (NMStateConfigs, Secrets): what
//! bootstream's controllers add (InfraEnv status) has no counterpart on the bare hub. The differences
//! kept on purpose are listed in the module docs of `bootstream::api::kube`.

use super::Kubectl;

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use bootstream::testkit::realhub::RealHub;
use serde_json::{Value, json};

/// One namespace on the hub and on `serve`, of the same name, and kubectl for both.
struct Sides {
    k: Kubectl,
    hub: Arc<RealHub>,
    ns: String,
}

/// What a kubectl step printed, normalized.
#[derive(Debug, PartialEq)]
struct Printed {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Sides {
    /// A `serve` of the test's own and the run's shared hub, with a fresh namespace named after
    /// `label` created on both by kubectl.
    fn start(label: &str) -> Sides {
        Sides::with_hub(RealHub::shared_blocking(), label)
    }

    /// [`Sides::start`] with the hub given (async tests get it by [`RealHub::shared`]: starting it
    /// runs a runtime of its own, which cannot run inside theirs).
    fn with_hub(hub: Arc<RealHub>, label: &str) -> Sides {
        let k = Kubectl::start();
        let ns = format!("{label}-{:08x}", fastrand::u32(..));
        let sides = Sides { k, hub, ns };
        let created = sides.both(&["create", "namespace", &sides.ns], None);
        assert_eq!(created.stdout, format!("namespace/{} created\n", sides.ns));
        sides
    }

    fn run(&self, kubeconfig: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Printed {
        let out: Output = self.k.run_with(kubeconfig, args, stdin);
        let text = |b: &[u8]| normalize_text(&String::from_utf8_lossy(b));
        Printed { success: out.status.success(), stdout: text(&out.stdout), stderr: text(&out.stderr) }
    }

    /// kubectl `args` on both sides; they must print the same. The hub's output.
    fn both(&self, args: &[&str], stdin: Option<&str>) -> Printed {
        let hub = self.run(&self.hub.kubeconfig, args, stdin);
        let serve = self.run(&self.k.kubeconfig(), args, stdin);
        assert!(
            hub == serve,
            "kubectl {args:?} differs:\n--- kube-apiserver (success: {}):\n{}{}\n--- serve (success: {}):\n{}{}",
            hub.success,
            hub.stdout,
            hub.stderr,
            serve.success,
            serve.stdout,
            serve.stderr
        );
        hub
    }

    /// [`Sides::both`] for a step that must succeed: its standard output.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.both(args, stdin);
        assert!(out.success, "kubectl {args:?} failed on both:\n{}", out.stderr);
        out.stdout
    }

    /// [`Sides::both`] for a step that must fail: its standard error.
    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.both(args, stdin);
        assert!(!out.success, "kubectl {args:?} succeeded on both:\n{}", out.stdout);
        out.stderr
    }

    /// `kubectl get ... -o json` on both sides, compared as JSON once normalized.
    fn json(&self, args: &[&str]) -> Value {
        let args = [args, &["-o", "json"]].concat();
        let read = |kubeconfig: &std::path::Path| {
            let out = self.k.run_with(kubeconfig, &args, None);
            assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            let mut v: Value = serde_json::from_slice(&out.stdout).unwrap();
            normalize(&mut v);
            v
        };
        let (hub, serve) = (read(&self.hub.kubeconfig), read(&self.k.kubeconfig()));
        assert_eq!(hub, serve, "kubectl {args:?}: kube-apiserver (left) and serve (right) differ");
        hub
    }
}

/// Values that differ between any two servers, or two runs, replaced by their key's name.
pub fn normalize(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let table_ages: Option<usize> = (m.get("kind") == Some(&json!("Table")))
                .then(|| m["columnDefinitions"].as_array()?.iter().position(|c| c["name"] == "Age"))
                .flatten();
            for (k, x) in m.iter_mut() {
                match k.as_str() {
                    "uid" | "resourceVersion" | "creationTimestamp" | "deletionTimestamp" | "time" if x.is_string() => {
                        *x = Value::String(format!("<{k}>"));
                    }
                    _ => normalize(x),
                }
            }
            // kube-apiserver lists the causes of an apply's conflict in no set order (a Go map's).
            if m.get("reason") == Some(&json!("Conflict"))
                && let Some(causes) =
                    m.get_mut("details").and_then(|d| d.get_mut("causes")).and_then(Value::as_array_mut)
            {
                causes.sort_by_key(|c| c.to_string());
            }
            if let (Some(i), Some(rows)) = (table_ages, m.get_mut("rows").and_then(Value::as_array_mut)) {
                for row in rows {
                    if let Some(cell) = row["cells"].get_mut(i) {
                        *cell = json!("<age>");
                    }
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// kubectl's text: ages (`5s`, `2m3s`) replaced, and the spaces that pad table columns (whose
/// widths follow the ages) collapsed.
fn normalize_text(text: &str) -> String {
    let is_age = |w: &str| {
        !w.is_empty()
            && w.starts_with(|c: char| c.is_ascii_digit())
            && w.ends_with(['s', 'm', 'h', 'd'])
            && w.chars().all(|c| c.is_ascii_digit() || "smhd".contains(c))
    };
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().map(|w| if is_age(w) { "<age>" } else { w }).collect();
        let indent = line.len() - line.trim_start().len();
        out.push_str(&line[..indent]);
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

fn nmstateconfig(ns: &str, name: &str) -> String {
    super::nmstateconfig(ns, name, "52:54:00:00:00:01")
}

#[test]
fn kubectl_gets_the_same_answers_from_serve_as_from_kube_apiserver() {
    let s = Sides::start("diff-kubectl");
    let ns = s.ns.as_str();
    let n1 = nmstateconfig(ns, "n1");

    // Create, AlreadyExists, NotFound.
    assert_eq!(s.ok(&["create", "-f", "-"], Some(&n1)), "nmstateconfig.agent-install.openshift.io/n1 created\n");
    assert!(s.fails(&["create", "-f", "-"], Some(&n1)).contains("(AlreadyExists)"));
    assert!(s.fails(&["get", "nmstateconfig", "nope", "-n", ns], None).contains("(NotFound)"));
    s.json(&["get", "nmstateconfig", "n1", "-n", ns, "--show-managed-fields"]);
    // Table output: the CRD's columns (none but the name and age here).
    assert_eq!(s.ok(&["get", "nmstateconfigs", "-n", ns], None), "NAME AGE\nn1 <age>\n");
    s.ok(&["get", "nmstateconfigs", "-n", ns, "-o", "wide", "--show-labels"], None);

    // Invalid: the schema's type, a required field, a name.
    let typed = nmstateconfig(ns, "n2")
        .replace("  - name: eth0\n    macAddress: 52:54:00:00:00:01\n", "  - name: eth0\n    macAddress: 7\n");
    assert!(s.fails(&["create", "-f", "-"], Some(&typed)).contains("is invalid"));
    let named = nmstateconfig(ns, "Bad_Name");
    assert!(s.fails(&["create", "-f", "-"], Some(&named)).contains("is invalid"));
    let required = s.fails(
        &["patch", "nmstateconfig", "n1", "-n", ns, "--type=merge", "-p", r#"{"spec":{"interfaces":null}}"#],
        None,
    );
    assert!(required.contains("Required value"), "{required}");

    // Field validation: kubectl's --validate is the server's fieldValidation.
    let unknown = nmstateconfig(ns, "n3").replace("spec:\n", "spec:\n  bogus: 1\n");
    assert!(
        s.fails(&["create", "-f", "-", "--validate=strict"], Some(&unknown)).contains("unknown field \"spec.bogus\"")
    );
    assert!(
        s.both(&["create", "-f", "-", "--validate=warn"], Some(&unknown)).stderr.contains("Warning: unknown field")
    );
    s.json(&["get", "nmstateconfig", "n3", "-n", ns]);

    // dryRun: answers as the write would, stores nothing, and an existing name is still refused.
    let n4 = nmstateconfig(ns, "n4");
    s.ok(&["create", "-f", "-", "--dry-run=server", "-o", "name"], Some(&n4));
    assert!(s.fails(&["get", "nmstateconfig", "n4", "-n", ns], None).contains("(NotFound)"));
    assert!(s.fails(&["create", "-f", "-", "--dry-run=server"], Some(&n1)).contains("(AlreadyExists)"));
    s.ok(&["label", "nmstateconfig", "n1", "-n", ns, "rack=r9", "--overwrite", "--dry-run=server"], None);
    assert_eq!(
        s.ok(&["get", "nmstateconfig", "n1", "-n", ns, "-o", "jsonpath={.metadata.labels}"], None),
        "{\"rack\":\"r1\"}\n"
    );

    // Conflict: a replace from a stale resourceVersion.
    let mut stale = s.json(&["get", "nmstateconfig", "n1", "-n", ns]);
    // Without what normalizing put in (and the update keeps from the stored object anyway).
    for key in ["uid", "creationTimestamp", "managedFields"] {
        stale["metadata"].as_object_mut().unwrap().remove(key);
    }
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["metadata"]["labels"]["x"] = json!("y");
    assert!(s.fails(&["replace", "-f", "-"], Some(&stale.to_string())).contains("(Conflict)"));

    // Server-side apply: a conflict with another manager, then forced; managedFields after.
    s.ok(&["apply", "--server-side", "--field-manager=first", "-f", "-"], Some(&n1));
    let other = n1.replace("dhcp: true", "dhcp: false");
    let conflict = s.fails(&["apply", "--server-side", "--field-manager=second", "-f", "-"], Some(&other));
    assert!(conflict.contains("Apply failed with"), "{conflict}");
    s.ok(&["apply", "--server-side", "--field-manager=second", "--force-conflicts", "-f", "-"], Some(&other));
    s.json(&["get", "nmstateconfig", "n1", "-n", ns, "--show-managed-fields"]);
    // Client-side apply over it, and a strategic merge patch refused on a custom resource.
    s.ok(&["apply", "-f", "-"], Some(&n1));
    s.json(&["get", "nmstateconfig", "n1", "-n", ns, "--show-managed-fields"]);
    assert!(
        s.fails(&["patch", "nmstateconfig", "n1", "-n", ns, "-p", r#"{"metadata":{"labels":{"a":"b"}}}"#], None)
            .contains("strategic-merge-patch")
    );

    // Secrets: the generator's defaults, strategic merge of labels and finalizers, managedFields.
    assert_eq!(
        s.ok(&["create", "secret", "generic", "s1", "-n", ns, "--from-literal=a=b"], None),
        "secret/s1 created\n"
    );
    s.json(&["get", "secret", "s1", "-n", ns, "--show-managed-fields"]);
    s.ok(&["get", "secrets", "-n", ns], None);
    s.ok(
        &[
            "patch",
            "secret",
            "s1",
            "-n",
            ns,
            "-p",
            r#"{"metadata":{"labels":{"l":"v"},"finalizers":["example.com/f"]},"stringData":{"c":"d"}}"#,
        ],
        None,
    );
    s.json(&["get", "secret", "s1", "-n", ns, "--show-managed-fields"]);
    s.ok(
        &[
            "patch",
            "secret",
            "s1",
            "-n",
            ns,
            "-p",
            r#"{"metadata":{"labels":{"l":null},"$deleteFromPrimitiveList/finalizers":["example.com/f"]}}"#,
        ],
        None,
    );
    s.json(&["get", "secret", "s1", "-n", ns, "--show-managed-fields"]);

    // A Secret's type: the keys it needs, and no changing it.
    let tls = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tls\n  namespace: {ns}\ntype: kubernetes.io/tls\nstringData:\n  other: x\n"
    );
    let refused = s.fails(&["create", "-f", "-"], Some(&tls));
    assert!(refused.contains("data[tls.crt]: Required value"), "{refused}");
    let changed =
        s.fails(&["patch", "secret", "s1", "-n", ns, "--type=merge", "-p", r#"{"type":"example.com/other"}"#], None);
    assert!(changed.contains("field is immutable"), "{changed}");

    // Discovery and explain of bootstream's kinds.
    s.ok(&["api-resources", "--api-group=agent-install.openshift.io", "-o", "wide"], None);
    s.ok(&["explain", "nmstateconfig.spec.interfaces"], None);
    s.ok(&["explain", "nmstateconfig", "--recursive"], None);
    s.ok(&["explain", "infraenv.spec", "--recursive"], None);
    // The core kinds' schemas, and ObjectMeta's: generated from k8s-openapi's types, with
    // upstream's descriptions.
    for what in ["secret", "secret.metadata", "secret.metadata.ownerReferences", "lease", "lease.spec", "namespace"] {
        s.ok(&["explain", what], None);
    }
    for kind in ["secret", "namespace", "event", "lease"] {
        s.ok(&["explain", kind, "--recursive"], None);
    }

    // Delete, and the object is gone.
    assert_eq!(
        s.ok(&["delete", "nmstateconfig", "n1", "-n", ns], None),
        "nmstateconfig.agent-install.openshift.io \"n1\" deleted\n"
    );
    assert!(s.fails(&["delete", "nmstateconfig", "n1", "-n", ns], None).contains("(NotFound)"));

    // Three of the differences kept on purpose (listed in the module docs of bootstream::api::kube),
    // checked so that the list stays true.
    let hub = |args: &[&str], stdin: Option<&str>| s.run(&s.hub.kubeconfig, args, stdin);
    let serve = |args: &[&str], stdin: Option<&str>| s.run(&s.k.kubeconfig(), args, stdin);
    // bootstream's admission rules, which a bare kube-apiserver runs only with bootstream's webhook.
    let no_pull_secret = super::infraenv(ns, "ie", "").replace("name: pull-secret", "name: \"\"");
    let (on_hub, on_serve) =
        (hub(&["create", "-f", "-"], Some(&no_pull_secret)), serve(&["create", "-f", "-"], Some(&no_pull_secret)));
    assert!(on_hub.success, "{on_hub:?}");
    assert!(!on_serve.success && on_serve.stderr.contains("a pull secret is required"), "{on_serve:?}");
    // A failed JSON patch test: refused alike, serve saying which test failed.
    s.ok(&["create", "-f", "-"], Some(&n1));
    let test = ["patch", "nmstateconfig", "n1", "-n", ns, "--type=json", "-p"];
    let test = [&test[..], &[r#"[{"op":"test","path":"/metadata/labels/rack","value":"r2"}]"#]].concat();
    let (on_hub, on_serve) = (hub(&test, None), serve(&test, None));
    assert_eq!(
        on_hub.stderr,
        "The request is invalid: the server rejected our request due to an error in our request\n"
    );
    assert_eq!(on_serve.stderr, "The request is invalid: testing value /metadata/labels/rack failed: test failed\n");
    // An enum's values: listed alike, but only kube-apiserver's description says what each means
    // (k8s-openapi's types do not carry it).
    let phase = ["explain", "namespace.status.phase"];
    let (on_hub, on_serve) = (hub(&phase, None), serve(&phase, None));
    let values = "ENUM:\n    Active\n    Terminating\n";
    assert!(on_hub.stdout.contains(values) && on_hub.stdout.contains("Possible enum values"), "{on_hub:?}");
    assert!(on_serve.stdout.contains(values), "{on_serve:?}");
    assert!(!on_serve.stdout.contains("Possible enum values"), "the difference is gone: {on_serve:?}");
}

/// An answer as a raw client sees it: the status code, the `Warning` headers, the body (JSON
/// normalized, or the lines of a watch).
#[derive(Debug, PartialEq)]
struct Answer {
    code: u16,
    warnings: Vec<String>,
    body: Value,
}

/// A raw request by kube-rs.
async fn send(client: &kube::Client, method: &str, path: &str, content_type: &str, body: &str) -> Answer {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .header("accept", "application/json")
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    send_request(client, req).await
}

async fn send_request(client: &kube::Client, req: http::Request<kube::client::Body>) -> Answer {
    let what = format!("{} {}", req.method(), req.uri());
    let resp = tokio::time::timeout(Duration::from_secs(30), client.send(req))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in 30 s"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let code = resp.status().as_u16();
    let warnings =
        resp.headers().get_all("warning").iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
    let bytes = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect_bytes())
        .await
        .unwrap_or_else(|_| panic!("{what}: the body did not end in 30 s"))
        .unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let mut body = if what.contains("watch=1") {
        // A watch: one event a line. The bookmarks that only say how far the server got come when
        // the server's timer says (kube-apiserver's also shortly before the timeout): left out.
        let events =
            text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")));
        Value::Array(
            events
                .filter(|e| {
                    e["type"] != "BOOKMARK"
                        || e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
                })
                .collect(),
        )
    } else {
        serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}"))
    };
    normalize(&mut body);
    Answer { code, warnings, body }
}

/// Where two JSON documents differ: the lines of each (pretty-printed) around the first difference.
fn json_diff(hub: &Value, serve: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    let (h, s) = (format!("{:#}", sorted(hub)), format!("{:#}", sorted(serve)));
    let (h, s): (Vec<&str>, Vec<&str>) = (h.lines().collect(), s.lines().collect());
    let first = h.iter().zip(&s).position(|(a, b)| a != b).unwrap_or(h.len().min(s.len()));
    let around = |lines: &[&str]| lines[first.saturating_sub(8)..(first + 12).min(lines.len())].join("\n");
    format!("--- kube-apiserver, from line {first}:\n{}\n--- serve:\n{}", around(&h), around(&s))
}

/// kube-rs clients of both sides, compared request by request.
struct RawSides {
    hub: kube::Client,
    serve: kube::Client,
}

impl RawSides {
    /// The same request to both; the answers must be equal. The hub's.
    async fn both(&self, method: &str, path: &str, content_type: &str, body: &str) -> Answer {
        let hub = send(&self.hub, method, path, content_type, body).await;
        let serve = send(&self.serve, method, path, content_type, body).await;
        assert!(
            hub == serve,
            "{method} {path} differs: kube-apiserver {} {:?}, serve {} {:?}\n{}",
            hub.code,
            hub.warnings,
            serve.code,
            serve.warnings,
            json_diff(&hub.body, &serve.body)
        );
        hub
    }

    /// [`RawSides::both`] for an error: the hub must answer `code` and `reason`.
    async fn error(&self, method: &str, path: &str, content_type: &str, body: &str, code: u16, reason: &str) -> Answer {
        let answer = self.both(method, path, content_type, body).await;
        assert_eq!((answer.code, answer.body["reason"].as_str()), (code, Some(reason)), "{:#}", answer.body);
        answer
    }
}

/// Discovery lists only what both serve: bootstream serves a few core kinds, the hub all of them.
fn only_resources(mut list: Value, names: &[&str]) -> Value {
    if let Some(rs) = list["resources"].as_array_mut() {
        rs.retain(|r| names.contains(&r["name"].as_str().unwrap_or_default()));
    }
    list
}

/// An APIResourceList with its resources in name order.
fn by_name(mut list: Value) -> Value {
    if let Some(rs) = list["resources"].as_array_mut() {
        rs.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    }
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_gets_the_same_answers_from_serve_as_from_kube_apiserver() {
    let hub = RealHub::shared().await;
    let s = tokio::task::block_in_place(|| Sides::with_hub(hub, "diff-kube-rs"));
    let ns = s.ns.clone();
    let sides = RawSides { hub: s.hub.admin().await, serve: super::clients::client(&s.k).await };
    let nmstateconfigs = format!("/apis/agent-install.openshift.io/v1beta1/namespaces/{ns}/nmstateconfigs");
    let n1: Value = yaml_serde::from_str(&nmstateconfig(&ns, "n1")).unwrap();
    let json_type = "application/json";

    // Discovery of bootstream's groups, and of the core kinds it serves (kube-apiserver lists the
    // resources of a CRD group in no set order).
    for group in [
        "/apis/agent-install.openshift.io",
        "/apis/hive.openshift.io",
        "/apis/extensions.hive.openshift.io",
        "/apis/metal3.io",
    ] {
        sides.both("GET", group, json_type, "").await;
        let version = send(&sides.hub, "GET", group, json_type, "").await.body["preferredVersion"]["version"].clone();
        let path = format!("{group}/{}", version.as_str().unwrap());
        let hub_list = by_name(send(&sides.hub, "GET", &path, json_type, "").await.body);
        let serve_list = by_name(send(&sides.serve, "GET", &path, json_type, "").await.body);
        assert!(hub_list == serve_list, "{path}:\n{}", json_diff(&hub_list, &serve_list));
    }
    // The unaggregated `/apis` and `/api`: bootstream's groups as the hub lists them (the hub has
    // more groups, and its own address in `/api`).
    let ours = ["agent-install.openshift.io", "hive.openshift.io", "extensions.hive.openshift.io", "metal3.io"];
    let groups_of = |mut list: Value| {
        list["groups"].as_array_mut().unwrap().retain(|g| ours.contains(&g["name"].as_str().unwrap()));
        list["groups"].as_array_mut().unwrap().sort_by_key(|g| g["name"].to_string());
        list
    };
    let hub_apis = groups_of(send(&sides.hub, "GET", "/apis", json_type, "").await.body);
    let serve_apis = groups_of(send(&sides.serve, "GET", "/apis", json_type, "").await.body);
    assert!(hub_apis == serve_apis, "/apis:\n{}", json_diff(&hub_apis, &serve_apis));
    let without_address = |mut doc: Value| {
        doc.as_object_mut().unwrap().remove("serverAddressByClientCIDRs");
        doc
    };
    let hub_api = without_address(send(&sides.hub, "GET", "/api", json_type, "").await.body);
    let serve_api = without_address(send(&sides.serve, "GET", "/api", json_type, "").await.body);
    assert!(hub_api == serve_api, "/api:\n{}", json_diff(&hub_api, &serve_api));
    let hub_v1 = send(&sides.hub, "GET", "/api/v1", json_type, "").await;
    let serve_v1 = send(&sides.serve, "GET", "/api/v1", json_type, "").await;
    let (hub_v1, serve_v1) = (
        only_resources(hub_v1.body, &["secrets", "namespaces"]),
        only_resources(serve_v1.body, &["secrets", "namespaces"]),
    );
    assert!(hub_v1 == serve_v1, "/api/v1:\n{}", json_diff(&hub_v1, &serve_v1));

    // A list's resourceVersion, for the watch below.
    let raw_rv = |client: &kube::Client| {
        let client = client.clone();
        let path = nmstateconfigs.clone();
        async move {
            let list: Value = client.request(http::Request::get(path).body(Vec::new()).unwrap()).await.unwrap();
            list["metadata"]["resourceVersion"].as_str().unwrap().to_string()
        }
    };
    let (hub_from, serve_from) = (raw_rv(&sides.hub).await, raw_rv(&sides.serve).await);

    // Create; AlreadyExists, NotFound, Invalid, Conflict as Status objects, details and causes.
    let created = sides.both("POST", &nmstateconfigs, json_type, &n1.to_string()).await;
    assert_eq!(created.code, 201);
    sides.error("POST", &nmstateconfigs, json_type, &n1.to_string(), 409, "AlreadyExists").await;
    sides.error("GET", &format!("{nmstateconfigs}/nope"), json_type, "", 404, "NotFound").await;
    sides.error("DELETE", &format!("{nmstateconfigs}/nope"), json_type, "", 404, "NotFound").await;
    // A core kind's error names no group (the API server's field is omitempty).
    let secrets = format!("/api/v1/namespaces/{ns}/secrets");
    sides.error("GET", &format!("{secrets}/nope"), json_type, "", 404, "NotFound").await;
    sides.error("DELETE", &format!("{secrets}/nope"), json_type, "", 404, "NotFound").await;
    let mut typed = n1.clone();
    typed["metadata"]["name"] = json!("n2");
    typed["spec"]["interfaces"][0]["macAddress"] = json!(7);
    sides.error("POST", &nmstateconfigs, json_type, &typed.to_string(), 422, "Invalid").await;
    let mut required = n1.clone();
    required["metadata"]["name"] = json!("n2");
    required["spec"].as_object_mut().unwrap().remove("interfaces");
    sides.error("POST", &nmstateconfigs, json_type, &required.to_string(), 422, "Invalid").await;
    let mut named = n1.clone();
    named["metadata"]["name"] = json!("Bad_Name");
    sides.error("POST", &nmstateconfigs, json_type, &named.to_string(), 422, "Invalid").await;
    let mut stale = n1.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    sides.error("PUT", &format!("{nmstateconfigs}/n1"), json_type, &stale.to_string(), 409, "Conflict").await;
    sides
        .error(
            "PATCH",
            &format!("{nmstateconfigs}/n1"),
            "application/merge-patch+json",
            r#"{"spec":{"interfaces":null}}"#,
            422,
            "Invalid",
        )
        .await;

    // fieldValidation: Warn (the default) warns in a header, Strict refuses, Ignore says nothing.
    let mut unknown = n1.clone();
    unknown["metadata"]["name"] = json!("n3");
    unknown["spec"]["bogus"] = json!(1);
    let warned = sides.both("POST", &format!("{nmstateconfigs}?dryRun=All"), json_type, &unknown.to_string()).await;
    assert_eq!(warned.warnings, ["299 - \"unknown field \\\"spec.bogus\\\"\""]);
    sides
        .error(
            "POST",
            &format!("{nmstateconfigs}?fieldValidation=Strict"),
            json_type,
            &unknown.to_string(),
            400,
            "BadRequest",
        )
        .await;
    let ignored = sides
        .both("POST", &format!("{nmstateconfigs}?fieldValidation=Ignore&dryRun=All"), json_type, &unknown.to_string())
        .await;
    assert!(ignored.warnings.is_empty());

    // dryRun: the object as it would be, nothing stored, an existing name refused.
    let mut n4 = n1.clone();
    n4["metadata"]["name"] = json!("n4");
    assert_eq!(sides.both("POST", &format!("{nmstateconfigs}?dryRun=All"), json_type, &n4.to_string()).await.code, 201);
    sides.error("GET", &format!("{nmstateconfigs}/n4"), json_type, "", 404, "NotFound").await;
    sides
        .error("POST", &format!("{nmstateconfigs}?dryRun=All"), json_type, &n1.to_string(), 409, "AlreadyExists")
        .await;

    // Server-side apply: a conflict with another manager (409 with its causes), then forced.
    let apply = "application/apply-patch+yaml";
    let mut other = n1.clone();
    other["spec"]["config"]["interfaces"][0]["ipv4"]["dhcp"] = json!(false);
    sides.both("PATCH", &format!("{nmstateconfigs}/n1?fieldManager=first"), apply, &n1.to_string()).await;
    sides
        .error("PATCH", &format!("{nmstateconfigs}/n1?fieldManager=second"), apply, &other.to_string(), 409, "Conflict")
        .await;
    let forced = sides
        .both("PATCH", &format!("{nmstateconfigs}/n1?fieldManager=second&force=true"), apply, &other.to_string())
        .await;
    assert_eq!(forced.body["metadata"]["managedFields"].as_array().map(Vec::len), Some(3), "{:#}", forced.body);

    // Table output, as kubectl asks for it.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let req = |c: &kube::Client| {
        let c = c.clone();
        let path = nmstateconfigs.clone();
        async move {
            let req = http::Request::get(path).header("accept", table).body(kube::client::Body::empty()).unwrap();
            send_request(&c, req).await
        }
    };
    let (hub_table, serve_table) = (req(&sides.hub).await, req(&sides.serve).await);
    assert_eq!(hub_table.body["kind"], "Table");
    assert!(hub_table == serve_table, "Tables differ:\n{}", json_diff(&hub_table.body, &serve_table.body));

    // Watch: the events since the list, then (with bookmarks, from the current state) the
    // objects and the bookmark that ends them.
    sides.both("DELETE", &format!("{nmstateconfigs}/n1"), json_type, "").await;
    let watch = |from: String| format!("{nmstateconfigs}?watch=1&resourceVersion={from}&timeoutSeconds=2");
    let hub_events = send(&sides.hub, "GET", &watch(hub_from), json_type, "").await;
    let serve_events = send(&sides.serve, "GET", &watch(serve_from), json_type, "").await;
    let types: Vec<&str> = hub_events.body.as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"], "{:#}", hub_events.body);
    assert!(hub_events == serve_events, "watch events differ:\n{}", json_diff(&hub_events.body, &serve_events.body));
    let mut n5 = n1.clone();
    n5["metadata"]["name"] = json!("n5");
    sides.both("POST", &nmstateconfigs, json_type, &n5.to_string()).await;
    for query in [
        "allowWatchBookmarks=true",
        "allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
    ] {
        let events =
            sides.both("GET", &format!("{nmstateconfigs}?watch=1&timeoutSeconds=2&{query}"), json_type, "").await;
        let types: Vec<&str> = events.body.as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["ADDED", "BOOKMARK"], "{query}");
    }

    // 410 Gone: a watch from a resourceVersion the server no longer has (serve keeps its events
    // from its start: restarted, it has none of before).
    let k = tokio::task::block_in_place(|| s.k.restart());
    let sides = RawSides { hub: sides.hub, serve: super::clients::client(&k).await };
    let gone = |a: Answer| {
        let mut a = a;
        // "too old resource version: 1 (OLDEST)": the oldest each server has differs.
        if let Some(m) = a.body[0]["object"]["message"].as_str() {
            a.body[0]["object"]["message"] = json!(m.split(" (").next().unwrap());
        }
        a
    };
    let path = format!("{nmstateconfigs}?watch=1&resourceVersion=1&timeoutSeconds=2");
    let hub_gone = gone(send(&sides.hub, "GET", &path, json_type, "").await);
    let serve_gone = gone(send(&sides.serve, "GET", &path, json_type, "").await);
    assert_eq!(hub_gone.body[0]["object"]["code"], 410, "{:#}", hub_gone.body);
    assert_eq!(hub_gone, serve_gone);
    drop(k);
}

#[test]
fn the_python_client_gets_the_same_answers_from_serve_as_from_kube_apiserver() {
    let python = super::clients::debian_python();
    let s = Sides::start("diff-python");
    let script = crate::common::repo().join("tests/it/kubectl/python_differential.py");
    let run = |kubeconfig: &std::path::Path| {
        let out = std::process::Command::new(python)
            .arg(&script)
            .arg(kubeconfig)
            .arg(&s.ns)
            .env("HOME", s.k.server.data_dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "the Python client failed against {}:\n{stdout}\n{}",
            kubeconfig.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let (hub, serve) = (run(&s.hub.kubeconfig), run(&s.k.kubeconfig()));
    // Which steps failed on the hub: the comparison is about them.
    let steps: Vec<&str> = hub.lines().map(|l| l.split(" {").next().unwrap()).collect();
    assert_eq!(
        steps,
        [
            "create",
            "create again error",
            "get missing error",
            "create invalid error",
            "dry run",
            "patch",
            "replace stale error",
            "list",
            "delete",
            "delete again error",
            "create secret",
            "patch secret",
            "read secret",
            "event ADDED",
            "event MODIFIED",
            "event DELETED",
            "done",
        ],
        "{hub}"
    );
    for (h, v) in hub.lines().zip(serve.lines()) {
        assert_eq!(h, v, "the Python client's step differs: kube-apiserver (left), serve (right)");
    }
    assert_eq!(hub.lines().count(), serve.lines().count(), "kube-apiserver:\n{hub}\nserve:\n{serve}");
}
