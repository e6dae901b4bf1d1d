//! The path a user takes end to end with kubectl: apply an InfraEnv, `wait` for its image, download
//! the ISO from the URL in its status, delete it (`wait --for=delete`, `delete --wait`) once the
//! controller has released its finalizer.

use super::{Kubectl, infraenv};

use std::process::Stdio;

#[test]
fn an_infraenv_applied_with_kubectl_gets_an_iso_that_downloads_and_deletes_cleanly() {
    let k = Kubectl::start_as_user();
    let s = &k.server;

    // Applied before its pull secret: the image cannot be made, and the condition says so.
    assert_eq!(k.ok(&["create", "namespace", "life"]), "namespace/life created\n");
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("life", "pool", "")));
    assert_eq!(
        k.ok(&["wait", "--for=condition=ImageCreated=False", "infraenv/pool", "-n", "life", "--timeout=60s"]),
        "infraenv.agent-install.openshift.io/pool condition met\n"
    );
    assert_eq!(k.jsonpath("infraenv", "life", "pool", "{.status.conditions[0].reason}"), "ImageCreationError");
    assert_eq!(k.jsonpath("infraenv", "life", "pool", "{.status.isoDownloadURL}"), "");
    let timed_out = k.fails(&["wait", "--for=condition=ImageCreated", "infraenv/pool", "-n", "life", "--timeout=1s"]);
    assert_eq!(timed_out, "error: timed out waiting for the condition on infraenvs/pool\n");

    // The secret arrives: the controller builds the image.
    k.ok(&[
        "create",
        "secret",
        "generic",
        "pull-secret",
        "-n",
        "life",
        &format!("--from-literal=.dockerconfigjson={}", super::PULL_SECRET),
        "--type=kubernetes.io/dockerconfigjson",
    ]);
    assert_eq!(
        k.ok(&["wait", "--for=condition=ImageCreated", "infraenv/pool", "-n", "life", "--timeout=60s"]),
        "infraenv.agent-install.openshift.io/pool condition met\n"
    );
    assert_eq!(
        k.ok(&["wait", "--for=jsonpath={.status.isoDownloadURL}", "infraenv/pool", "-n", "life", "--timeout=60s"]),
        "infraenv.agent-install.openshift.io/pool condition met\n"
    );
    assert_eq!(
        k.ok(&[
            "wait",
            "--for=jsonpath={.status.conditions[0].reason}=InfraEnvAvailable",
            "infraenv/pool",
            "-n",
            "life"
        ]),
        "infraenv.agent-install.openshift.io/pool condition met\n"
    );

    // The ISO URL in the status downloads (signed, as served to a user).
    let url = k.jsonpath("infraenv", "life", "pool", "{.status.isoDownloadURL}");
    assert!(url.starts_with(&format!("{}/byapikey/", s.url)) && url.ends_with("/4.20/x86_64/full.iso"), "{url}");
    let head = s.request("HEAD", &s.path_of(&url), &[]);
    assert_eq!(head.status, 200, "{head:?}");
    let length: u64 = head.header("content-length").unwrap().parse().unwrap();
    assert!(length > 64 * 1024, "{length}");
    // The ISO 9660 primary volume descriptor, fetched as a range.
    let pvd = s.request("GET", &s.path_of(&url), &[("Range", "bytes=32768-32773")]);
    assert_eq!(pvd.status, 206);
    assert_eq!(pvd.body, b"\x01CD001");
    let unsigned = url.split("/byapikey/").next().unwrap().to_string() + "/byapikey/not-a-token/4.20/x86_64/full.iso";
    assert_eq!(s.request("HEAD", &s.path_of(&unsigned), &[]).status, 401);

    // Delete: the InfraEnv's finalizer holds it until the controller has released it.
    assert_eq!(
        k.jsonpath("infraenv", "life", "pool", "{.metadata.finalizers}"),
        r#"["infraenv.agent-install.openshift.io/ai-deprovision"]"#
    );
    let waiter = k
        .command(&k.kubeconfig())
        .args(["wait", "--for=delete", "infraenv/pool", "-n", "life", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        k.ok(&["delete", "infraenv", "pool", "-n", "life", "--wait"]),
        "infraenv.agent-install.openshift.io \"pool\" deleted\n"
    );
    let waited = waiter.wait_with_output().unwrap();
    assert!(waited.status.success(), "{}", String::from_utf8_lossy(&waited.stderr));
    // kubectl wait prints "condition met" when it saw the deletion, nothing when the object was
    // already gone as it looked.
    let said = String::from_utf8_lossy(&waited.stdout);
    assert!(said.is_empty() || said == "infraenv.agent-install.openshift.io/pool condition met\n", "{said}");
    assert_eq!(
        k.fails(&["get", "infraenv", "pool", "-n", "life"]),
        "Error from server (NotFound): infraenvs.agent-install.openshift.io \"pool\" not found\n"
    );
    assert_ne!(s.request("HEAD", &s.path_of(&url), &[]).status, 200, "a deleted InfraEnv's ISO is gone");
    // Waiting for the deletion of what is gone returns at once.
    let gone = k.run(&["wait", "--for=delete", "infraenv/pool", "-n", "life", "--timeout=5s"]);
    assert!(gone.status.success(), "{}", String::from_utf8_lossy(&gone.stderr));

    // `delete -f` of what `apply -f` made, and of what is not there.
    let doc = infraenv("life", "again", "");
    k.ok_in(&["apply", "-f", "-"], Some(&doc));
    assert_eq!(k.ok_in(&["delete", "-f", "-"], Some(&doc)), "infraenv.agent-install.openshift.io \"again\" deleted\n");
    let missing = k.fails_in(&["delete", "-f", "-"], Some(&doc));
    assert_eq!(
        missing,
        "Error from server (NotFound): error when deleting \"STDIN\": infraenvs.agent-install.openshift.io \"again\" not found\n"
    );
    assert_eq!(k.ok_in(&["delete", "--ignore-not-found", "-f", "-"], Some(&doc)), "");
    assert_eq!(k.ok(&["delete", "secret", "pull-secret", "-n", "life"]), "secret \"pull-secret\" deleted\n");
    assert_eq!(k.ok(&["get", "infraenvs,secrets", "-n", "life", "-o", "name"]), "");
}
