//! The other clients of a hub, over the same kubeconfig: kube-rs (typed and dynamic, raw watches
//! and kube-runtime's watcher, which lists and watches as every controller does) and Debian's Python
//! client.

use super::{Kubectl, infraenv};
use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use bootstream::resources::InfraEnv;
use futures_util::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;

pub(super) async fn client(k: &Kubectl) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(k.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// kubectl from async code.
fn kubectl(k: &Kubectl, args: &[&str], stdin: Option<&str>) -> String {
    tokio::task::block_in_place(|| k.ok_in(args, stdin))
}

fn name<K: kube::Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

/// The next item of a stream, within 30 seconds.
async fn next<T>(stream: &mut (impl futures_util::Stream<Item = T> + Unpin), what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .unwrap_or_else(|_| panic!("no {what} within 30 s"))
        .unwrap_or_else(|| panic!("the stream ended before {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_lists_and_watches_through_the_kubeconfig() {
    let k = tokio::task::block_in_place(Kubectl::start);
    tokio::task::block_in_place(|| k.namespace_with_pull_secret("kube-rs"));
    kubectl(&k, &["apply", "-f", "-"], Some(&infraenv("kube-rs", "first", "")));
    let client = client(&k).await;

    // The typed InfraEnv of bootstream's own resources, listed with its status.
    let infraenvs: Api<InfraEnv> = Api::namespaced(client.clone(), "kube-rs");
    let list = infraenvs.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.iter().map(name).collect::<Vec<_>>(), ["first"]);
    let status = serde_json::to_value(&list.items[0]).unwrap()["status"].clone();
    assert_eq!(status["conditions"][0]["reason"], "InfraEnvAvailable", "{status:#}");
    let rv = list.metadata.resource_version.clone().unwrap();

    // A watch from the list's resourceVersion sees what is created after, and nothing before.
    let mut events = infraenvs.watch(&WatchParams::default().timeout(60), &rv).await.unwrap().boxed();
    kubectl(&k, &["apply", "-f", "-"], Some(&infraenv("kube-rs", "second", "")));
    match next(&mut events, "the ADDED event").await.unwrap() {
        WatchEvent::Added(ie) => assert_eq!(name(&ie), "second"),
        other => panic!("expected the new InfraEnv first, got {other:?}"),
    }
    kubectl(&k, &["label", "infraenv", "first", "-n", "kube-rs", "color=red"], None);
    loop {
        match next(&mut events, "the label").await.unwrap() {
            WatchEvent::Modified(ie) if name(&ie) == "first" => {
                assert_eq!(ie.metadata.labels.unwrap()["color"], "red");
                break;
            }
            // The controller finishing "second" (its status) may come first.
            WatchEvent::Modified(ie) if name(&ie) == "second" => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    drop(events);

    // Dynamic objects across namespaces, with a label selector.
    let gvk = GroupVersionKind::gvk("agent-install.openshift.io", "v1beta1", "InfraEnv");
    let dynamic: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, "infraenvs"));
    let red = dynamic.list(&ListParams::default().labels("color=red")).await.unwrap();
    assert_eq!(red.items.iter().map(name).collect::<Vec<_>>(), ["first"]);
    assert_eq!(red.items[0].types.as_ref().unwrap().kind, "InfraEnv");

    // kube-runtime's watcher, listing then watching (and with streaming lists, as newer controllers
    // do): the initial objects, then the changes.
    for (streaming, config) in
        [(false, watcher::Config::default()), (true, watcher::Config::default().streaming_lists())]
    {
        let mut stream = watcher(infraenvs.clone(), config).boxed();
        assert!(matches!(next(&mut stream, "Init").await.unwrap(), watcher::Event::Init));
        let mut initial = Vec::new();
        loop {
            match next(&mut stream, "the initial objects").await.unwrap() {
                watcher::Event::InitApply(ie) => initial.push(name(&ie)),
                watcher::Event::InitDone => break,
                other => panic!("unexpected {other:?} (streaming lists: {streaming})"),
            }
        }
        initial.sort();
        assert_eq!(initial, ["first", "second"], "streaming lists: {streaming}");
        let color = if streaming { "blue" } else { "green" };
        kubectl(&k, &["label", "infraenv", "second", "-n", "kube-rs", &format!("color={color}"), "--overwrite"], None);
        loop {
            match next(&mut stream, "the change").await.unwrap() {
                watcher::Event::Apply(ie)
                    if ie.metadata.labels.as_ref().and_then(|l| l.get("color")) == Some(&color.to_string()) =>
                {
                    assert_eq!(name(&ie), "second");
                    break;
                }
                watcher::Event::Apply(_) => {}
                other => panic!("unexpected {other:?} (streaming lists: {streaming})"),
            }
        }
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "kube-rs");
    let secret = secrets.get("pull-secret").await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    assert_eq!(secret.data.unwrap()[".dockerconfigjson"].0, super::PULL_SECRET.as_bytes());
    drop(client);

    // After a restart the server remembers no events from before it: a watch from an older
    // resourceVersion is told "410 Gone", and the watcher lists again by itself.
    let k = tokio::task::block_in_place(|| k.restart());
    let client = self::client(&k).await;
    let infraenvs: Api<InfraEnv> = Api::namespaced(client.clone(), "kube-rs");
    let mut events = infraenvs.watch(&WatchParams::default().timeout(10), "1").await.unwrap().boxed();
    match next(&mut events, "410 Gone").await.unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"), "{status:?}");
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    let objects: Vec<InfraEnv> = tokio::time::timeout(
        Duration::from_secs(30),
        kube::runtime::WatchStreamExt::applied_objects(watcher(infraenvs, watcher::Config::default()))
            .take(2)
            .try_collect(),
    )
    .await
    .expect("the watcher lists within 30 s")
    .unwrap();
    let mut names: Vec<String> = objects.iter().map(name).collect();
    names.sort();
    assert_eq!(names, ["first", "second"]);
}

/// Debian's Python interpreter with its `kubernetes` package, or a failure saying how to install it.
pub(super) fn debian_python() -> &'static str {
    const PYTHON: &str = "/usr/bin/python3";
    let check = Command::new(PYTHON).args(["-c", "import kubernetes"]).output();
    match check {
        Ok(out) if out.status.success() => PYTHON,
        Ok(out) => panic!(
            "Debian's Python Kubernetes client is not installed ({}): apt-get install python3-kubernetes \
             (bash .ci/test installs it)",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("{PYTHON}: {e}: apt-get install python3 python3-kubernetes (bash .ci/test installs them)"),
    }
}

#[test]
fn the_debian_python_client_lists_and_watches() {
    let python = debian_python();
    let k = Kubectl::start();
    k.namespace_with_pull_secret("python");
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("python", "pool", "")));

    let script = common::repo().join("tests/it/kubectl/python_client.py");
    let mut child = common::KillOnDrop(
        Command::new(python)
            .arg(&script)
            .arg(k.kubeconfig())
            .arg("python")
            .env("HOME", k.server.data_dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    loop {
        let line = lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            let mut stderr = String::new();
            let _ = std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr);
            panic!("the Python client stopped before it was ready; printed {seen:?}; stderr:\n{stderr}")
        });
        seen.push(line);
        if seen.last().unwrap() == "ready" {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "listed pool ImageCreated InfraEnvAvailable",
            "got pool True",
            "secret pull-secret kubernetes.io/dockerconfigjson .dockerconfigjson",
            "namespace Active",
            "ready",
        ]
    );
    k.ok(&["label", "infraenv", "pool", "-n", "python", "color=red"]);
    let status = child.0.wait().unwrap();
    let rest: Vec<String> = lines.iter().collect();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "the Python client failed after {rest:?}:\n{stderr}");
    assert_eq!(rest, ["event MODIFIED pool red"], "the watch from the list sees the change, and only it");
}
