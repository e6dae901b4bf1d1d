//! The embedded default, run as a user would: `bootstream serve` with no configuration generates the
//! sample image; the assisted example YAML is applied unchanged; the status and the served ISO agree.

use crate::common;

use common::*;

fn example(name: &str) -> String {
    std::fs::read_to_string(shared(&format!("fixtures/assisted/examples/{name}"))).unwrap()
}

#[test]
fn sample_image_serves_the_late_binding_example() {
    let server = Server::start(&[]);
    let out = server.apply_ok(&example("infraEnvLateBinding.yaml"));
    assert_eq!(out.trim(), "infraenv.agent-install.openshift.io/myinfraenv created");
    // Without its pull secret the image cannot be made; the condition says why.
    let ie = server.wait_image_created("spoke-cluster", "myinfraenv", "False");
    let c = condition(&ie, "ImageCreated").unwrap();
    assert_eq!(c["reason"], "ImageCreationError");
    assert!(
        c["message"].as_str().unwrap().starts_with("Failed to create image: failed to find secret pull-secret"),
        "{c}"
    );
    assert!(ie["status"].get("isoDownloadURL").is_none());

    assert_eq!(server.apply_ok(&example("pullsecret.yaml")).trim(), "secret/pull-secret created");
    let ie = server.wait_image_created("spoke-cluster", "myinfraenv", "True");
    let c = condition(&ie, "ImageCreated").unwrap();
    assert_eq!(c["reason"], "InfraEnvAvailable");
    assert_eq!(c["message"], "InfraEnv is available: Image has been created");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let status = &ie["status"];
    let base = &server.url;
    assert_eq!(status["isoDownloadURL"], format!("{base}/byid/{id}/4.20/x86_64/full.iso"));
    assert_eq!(status["bootArtifacts"]["kernel"], format!("{base}/boot-artifacts/kernel?arch=x86_64&version=4.20"));
    assert_eq!(status["bootArtifacts"]["rootfs"], format!("{base}/boot-artifacts/rootfs?arch=x86_64&version=4.20"));
    assert_eq!(status["bootArtifacts"]["initrd"], format!("{base}/images/{id}/pxe-initrd?arch=x86_64&version=4.20"));
    assert_eq!(
        status["bootArtifacts"]["ipxeScript"],
        format!("{base}/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=ipxe-script")
    );
    assert!(status["createdTime"].is_string());
    assert_eq!(status["agentLabelSelector"]["matchLabels"]["infraenvs.agent-install.openshift.io"], "myinfraenv");

    // The served ISO carries the discovery Ignition, which carries the example's override and proxy.
    let iso = server.get(&server.path_of(status["isoDownloadURL"].as_str().unwrap()));
    assert_eq!(iso.status, 200);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("discovery.iso");
    std::fs::write(&path, &iso.body).unwrap();
    let shown = coreos_installer(&["iso", "ignition", "show", path.to_str().unwrap()]);
    let ign: serde_json::Value = serde_json::from_slice(&shown).unwrap();
    let files = ign["storage"]["files"].as_array().unwrap();
    assert!(files.iter().any(|f| f["path"] == "/etc/someconfig"), "override file present");
    assert!(files.iter().any(|f| f["path"] == "/root/.docker/config.json"), "pull secret present");
    assert_eq!(ign["ignition"]["proxy"]["httpProxy"], "http://11.11.11.33");
    let sample = std::fs::read_dir(server.data_dir.path().join("sample"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "iso"))
        .unwrap();
    let kargs = |p: &std::path::Path| coreos_installer(&["iso", "kargs", "show", p.to_str().unwrap()]);
    assert_eq!(kargs(&path), kargs(&sample));
    // Every byte outside the Ignition area is the sample's.
    let base = std::fs::read(&sample).unwrap();
    assert_eq!(iso.body.len(), base.len());
    let area: serde_json::Value =
        serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", sample.to_str().unwrap()]))
            .unwrap();
    let (off, len) = (area["offset"].as_u64().unwrap() as usize, area["length"].as_u64().unwrap() as usize);
    assert_eq!(&iso.body[..off], &base[..off]);
    assert_eq!(&iso.body[off + len..], &base[off + len..]);

    // The iPXE script points at our initrd, kernel and rootfs.
    let script = server.get(&server.path_of(status["bootArtifacts"]["ipxeScript"].as_str().unwrap()));
    assert_eq!(script.status, 200);
    let lines: Vec<String> = script.text().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0], "#!ipxe");
    assert_eq!(lines[1], format!("initrd --name initrd {}", status["bootArtifacts"]["initrd"].as_str().unwrap()));
    assert!(lines[2].starts_with(&format!(
        "kernel {} initrd=initrd coreos.live.rootfs_url={} random.trust_cpu=on",
        status["bootArtifacts"]["kernel"].as_str().unwrap(),
        status["bootArtifacts"]["rootfs"].as_str().unwrap()
    )));
    assert_eq!(lines[3], "boot");

    // Applying the same files again changes nothing, once the controller has labelled the pull secret it
    // follows (a label write it left to a later reconcile, after a conflict, would otherwise land between).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let secret = server.get_json("secret", "spoke-cluster", "pull-secret");
        if secret["metadata"]["labels"]["agent-install.openshift.io/watch"] == "true" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the pull secret was never labelled: {secret:#}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(server.apply_ok(&example("pullsecret.yaml")).trim(), "secret/pull-secret unchanged");
}

#[test]
fn infraenv_with_a_missing_cluster_deployment_reports_it() {
    let server = Server::start(&[]);
    server.apply_ok(&example("pullsecret.yaml"));
    server.apply_ok(&example("infraEnv.yaml"));
    let ie = server.wait_image_created("spoke-cluster", "myinfraenv", "Unknown");
    let c = condition(&ie, "ImageCreated").unwrap();
    assert_eq!(c["reason"], "MissingClusterDeployment");
    assert_eq!(
        c["message"],
        "ClusterDeployment is missing: clusterdeployments.hive.openshift.io \"single-node\" not found"
    );
}

#[test]
fn get_and_delete_round_trip() {
    let server = Server::start(&[]);
    server.apply_ok(&format!("{}---\n{}", pull_secret_yaml("a"), infraenv_yaml("a", "one", "")));
    let out = cli(&["get", "--kubeconfig", &server.kubeconfig, "infraenvs", "-n", "a"], None);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("one") && table.contains("True InfraEnvAvailable"), "{table}");
    let yaml = cli(&["get", "--kubeconfig", &server.kubeconfig, "infraenv", "one", "-n", "a", "-o", "yaml"], None);
    assert!(String::from_utf8(yaml.stdout).unwrap().contains("isoDownloadURL:"));
    let id = server.get_json("infraenv", "a", "one")["metadata"]["uid"].as_str().unwrap().to_string();

    let out = cli(&["delete", "--kubeconfig", &server.kubeconfig, "infraenv", "one", "-n", "a"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "infraenv.agent-install.openshift.io \"one\" deleted");
    let out = cli(&["get", "--kubeconfig", &server.kubeconfig, "infraenv", "one", "-n", "a"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("infraenvs.agent-install.openshift.io \"one\" not found"));
    // Its image is gone with it.
    assert_eq!(server.get(&format!("/byid/{id}/4.20/x86_64/full.iso")).status, 404);
}

#[test]
fn bad_documents_are_refused_with_the_field_named() {
    let server = Server::start(&[]);
    let cases = [
        (
            infraenv_yaml("a", "x", "  sshAuthorisedKey: k\n"),
            "strict decoding error: unknown field \"spec.sshAuthorisedKey\"",
        ),
        (
            infraenv_yaml("a", "x", "  proxy:\n    httpProxy: [1]\n"),
            // The CRD's schema, as kube-apiserver words what it refuses.
            "spec.proxy.httpProxy: Invalid value: \"array\": spec.proxy.httpProxy in body must be of type string: \"array\"",
        ),
        (
            infraenv_yaml("a", "x", "  kernelArguments:\n  - operation: prepend\n    value: a\n"),
            "spec.kernelArguments[0].operation: Unsupported value: \"prepend\": supported values: \"append\", \"replace\", \"delete\"",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n".to_string(),
            "kind ConfigMap (apiVersion v1) is not supported",
        ),
        ("apiVersion: v1\nkind: Secret\nmetadata: {name: c\n".to_string(), "did not find expected"),
    ];
    for (doc, expect) in cases {
        let out = server.apply(&doc);
        assert!(!out.status.success(), "accepted: {doc}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "expected {expect:?} in {err:?}");
    }
    // Nothing was stored.
    let out = cli(&["get", "--kubeconfig", &server.kubeconfig, "infraenvs", "-A", "-o", "json"], None);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 0);
}

/// What admission allows but the user should know is shown as kubectl shows it.
#[test]
fn admission_warnings_are_shown() {
    let server = Server::start(&[]);
    let out = server.apply(&infraenv_yaml("a", "x", "  ntpSources: [ntp.example.com]\n"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "Warning: spec.ntpSources is not supported by this bootstream version: this InfraEnv gets no image"
        ),
        "{err}"
    );
}

#[test]
fn serve_help_names_the_sample_image() {
    let out = cli(&["serve", "--help"], None);
    let help = String::from_utf8(out.stdout).unwrap();
    let expect = format!(
        "version {}, architecture {}",
        bootstream::formats::sample::SAMPLE_VERSION,
        bootstream::formats::sample::SAMPLE_ARCH
    );
    assert!(help.contains(&expect), "{help}");
    for flag in ["--data-dir", "--listen", "--base-url", "--os-image"] {
        assert!(help.contains(flag), "{flag}");
    }
}

/// The server keeps its heap off transparent huge pages (src/main.rs says why).
#[test]
fn the_server_runs_without_transparent_huge_pages() {
    let server = Server::start(&[]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let thp = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")).map(str::trim);
    assert_eq!(thp, Some("0"), "THP_enabled of the server's /proc status:\n{status}");
}
