//! Changing objects with kubectl: `describe` to look, `edit`, `patch` of every type (and strategic
//! merge refused on our kinds as a real API server refuses it on custom resources), `label` and
//! `annotate`.

use super::{Kubectl, infraenv};

#[test]
fn kubectl_describes_edits_patches_labels_and_annotates() {
    let k = Kubectl::start();
    k.namespace_with_pull_secret("edit");
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("edit", "pool", "")));

    let described = k.ok(&["describe", "infraenv", "pool", "-n", "edit"]);
    for line in [
        "Name:         pool",
        "Namespace:    edit",
        "Labels:       <none>",
        "API Version:  agent-install.openshift.io/v1beta1",
        "Kind:         InfraEnv",
        "    Reason:                InfraEnvAvailable",
        "    Type:                  ImageCreated",
        // kubectl aligns the last section's keys with the section before it (Status, ending in the
        // debug info's events URL).
        "Events:              <none>",
    ] {
        assert!(described.lines().any(|l| l == line), "describe lacks {line:?}:\n{described}");
    }
    assert!(described.contains("  Ssh Authorized Key:  ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfake test@bootstream\n"));
    let secret = k.ok(&["describe", "secret", "pull-secret", "-n", "edit"]);
    assert!(
        secret.contains("Type:  kubernetes.io/dockerconfigjson\n\nData\n====\n.dockerconfigjson:  84 bytes\n"),
        "{secret}"
    );
    let ns = k.ok(&["describe", "namespace", "edit"]);
    assert!(ns.starts_with("Name:         edit\nLabels:       kubernetes.io/metadata.name=edit\n"), "{ns}");
    assert!(ns.contains("\nStatus:       Active\n"), "{ns}");

    // `edit` with a scripted editor.
    let edit = k
        .command(&k.kubeconfig())
        .args(["edit", "infraenv", "pool", "-n", "edit"])
        .env("EDITOR", "sed -i -e s/test@bootstream/edited@bootstream/")
        .output()
        .unwrap();
    assert!(edit.status.success(), "{}", String::from_utf8_lossy(&edit.stderr));
    assert_eq!(String::from_utf8_lossy(&edit.stdout), "infraenv.agent-install.openshift.io/pool edited\n");
    assert_eq!(
        k.jsonpath("infraenv", "edit", "pool", "{.spec.sshAuthorizedKey}"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfake edited@bootstream"
    );
    // An edit the admission refuses is reported, and the object stays.
    let refused = k
        .command(&k.kubeconfig())
        .args(["edit", "infraenv", "pool", "-n", "edit"])
        .env("EDITOR", "sed -i -e s/name:\\ pull-secret/name:\\ \\\"\\\"/")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.starts_with("error: infraenvs.agent-install.openshift.io \"pool\" is invalid\nA copy of your changes has been stored to \"")
            && stderr.ends_with("\"\nerror: Edit cancelled, no valid changes were saved.\n"),
        "{stderr}"
    );
    // kubectl puts the server's causes at the top of the copy it kept.
    let copy = stderr.split('"').nth(3).unwrap();
    let kept = std::fs::read_to_string(copy).unwrap();
    assert!(
        kept.contains("\n# infraenvs.agent-install.openshift.io \"pool\" was not valid:\n# * spec.pullSecretRef.name: a pull secret is required\n"),
        "{kept}"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.spec.pullSecretRef.name}"), "pull-secret");

    // Patches: JSON merge and JSON patch on our kinds.
    assert_eq!(
        k.ok(&[
            "patch",
            "infraenv",
            "pool",
            "-n",
            "edit",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"additionalNTPSources":["ntp1.example.com","ntp2.example.com"]}}"#
        ]),
        "infraenv.agent-install.openshift.io/pool patched\n"
    );
    assert_eq!(
        k.ok(&[
            "patch",
            "infraenv",
            "pool",
            "-n",
            "edit",
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/spec/additionalNTPSources/0"}]"#
        ]),
        "infraenv.agent-install.openshift.io/pool patched\n"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.spec.additionalNTPSources}"), r#"["ntp2.example.com"]"#);
    assert_eq!(
        k.ok(&[
            "patch",
            "infraenv",
            "pool",
            "-n",
            "edit",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"additionalNTPSources":["ntp2.example.com"]}}"#
        ]),
        "infraenv.agent-install.openshift.io/pool patched (no change)\n"
    );
    let failed = k.fails(&[
        "patch",
        "infraenv",
        "pool",
        "-n",
        "edit",
        "--type",
        "json",
        "-p",
        r#"[{"op":"test","path":"/spec/cpuArchitecture","value":"s390x"}]"#,
    ]);
    assert_eq!(failed, "The request is invalid: testing value /spec/cpuArchitecture failed: test failed\n");
    // kubectl's default patch type is strategic merge, which custom resources do not take: kubectl
    // says so, as against a real API server.
    assert_eq!(
        k.fails(&["patch", "infraenv", "pool", "-n", "edit", "-p", r#"{"spec":{"cpuArchitecture":"x86_64"}}"#]),
        "error: application/strategic-merge-patch+json is not supported by agent-install.openshift.io/v1beta1, Kind=InfraEnv: the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml\n"
    );
    // On a Secret, strategic merge works.
    assert_eq!(
        k.ok(&[
            "patch",
            "secret",
            "pull-secret",
            "-n",
            "edit",
            "-p",
            r#"{"metadata":{"labels":{"app":"hub"}},"stringData":{"extra":"v"}}"#
        ]),
        "secret/pull-secret patched\n"
    );
    assert_eq!(k.jsonpath("secret", "edit", "pull-secret", "{.metadata.labels.app} {.data.extra}"), "hub dg==");
    assert!(!k.jsonpath("secret", "edit", "pull-secret", "{.data.\\.dockerconfigjson}").is_empty());

    // Labels and annotations.
    assert_eq!(
        k.ok(&["label", "infraenv", "pool", "-n", "edit", "color=red"]),
        "infraenv.agent-install.openshift.io/pool labeled\n"
    );
    assert_eq!(
        k.fails(&["label", "infraenv", "pool", "-n", "edit", "color=blue"]),
        "error: 'color' already has a value (red), and --overwrite is false\n"
    );
    assert_eq!(
        k.ok(&["label", "infraenv", "pool", "-n", "edit", "color=blue", "--overwrite"]),
        "infraenv.agent-install.openshift.io/pool labeled\n"
    );
    assert_eq!(
        k.ok(&["label", "infraenv", "pool", "-n", "edit", "size=xl"]),
        "infraenv.agent-install.openshift.io/pool labeled\n"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.metadata.labels}"), r#"{"color":"blue","size":"xl"}"#);
    assert_eq!(
        k.ok(&["label", "infraenv", "pool", "-n", "edit", "color-"]),
        "infraenv.agent-install.openshift.io/pool unlabeled\n"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.metadata.labels}"), r#"{"size":"xl"}"#);
    assert_eq!(
        k.ok(&["annotate", "infraenv", "pool", "-n", "edit", "owner=team-a"]),
        "infraenv.agent-install.openshift.io/pool annotated\n"
    );
    assert_eq!(
        k.ok(&["annotate", "infraenv", "pool", "-n", "edit", "owner=team-b", "--overwrite"]),
        "infraenv.agent-install.openshift.io/pool annotated\n"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.metadata.annotations.owner}"), "team-b");
    assert_eq!(
        k.ok(&["annotate", "infraenv", "pool", "-n", "edit", "owner-"]),
        "infraenv.agent-install.openshift.io/pool annotated\n"
    );
    assert_eq!(k.jsonpath("infraenv", "edit", "pool", "{.metadata.annotations.owner}"), "");
    // Labels over several objects, and off a Secret (a strategic merge patch underneath).
    k.ok_in(&["apply", "-f", "-"], Some(&infraenv("edit", "second", "")));
    assert_eq!(
        k.ok(&["label", "infraenvs", "--all", "-n", "edit", "zone=z1"]),
        "infraenv.agent-install.openshift.io/pool labeled\ninfraenv.agent-install.openshift.io/second labeled\n"
    );
    assert_eq!(
        k.ok(&["get", "infraenvs", "-n", "edit", "-l", "zone=z1,size=xl", "-o", "name"]),
        "infraenv.agent-install.openshift.io/pool\n"
    );
    assert_eq!(k.ok(&["label", "secret", "pull-secret", "-n", "edit", "app-"]), "secret/pull-secret unlabeled\n");
}
