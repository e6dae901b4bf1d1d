//! Writing with kubectl: `create` (its protobuf generators and `-f`), client-side `apply` and its
//! three-way merge, server-side apply with field managers, server dry runs, and strict field
//! validation.

use super::{Kubectl, PULL_SECRET, infraenv, nmstateconfig};

#[test]
fn kubectl_create_writes_namespaces_secrets_and_documents() {
    let k = Kubectl::start();
    // `create namespace` and `create secret` send protobuf bodies.
    k.namespace_with_pull_secret("create");
    assert_eq!(k.ok(&["get", "namespace", "create", "-o", "jsonpath={.status.phase}"]), "Active");
    assert_eq!(
        k.ok(&["get", "namespace", "create", "-o", "jsonpath={.metadata.labels}"]),
        r#"{"kubernetes.io/metadata.name":"create"}"#
    );
    let secret = k.get_json("secret", "create", "pull-secret");
    assert_eq!(secret["type"], "kubernetes.io/dockerconfigjson");
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.decode(secret["data"][".dockerconfigjson"].as_str().unwrap());
    assert_eq!(data.unwrap(), PULL_SECRET.as_bytes());
    let again = k.fails(&["create", "namespace", "create"]);
    assert_eq!(again, "Error from server (AlreadyExists): namespaces \"create\" already exists\n");

    // `create -f` with several documents.
    let docs = format!(
        "{}---\n{}",
        infraenv("create", "first", "  nmStateConfigLabelSelector:\n    matchLabels:\n      rack: r1\n"),
        nmstateconfig("create", "host-0", "02:00:00:80:12:01")
    );
    assert_eq!(
        k.ok_in(&["create", "-f", "-"], Some(&docs)),
        "infraenv.agent-install.openshift.io/first created\nnmstateconfig.agent-install.openshift.io/host-0 created\n"
    );
    let again = k.fails_in(&["create", "-f", "-"], Some(&docs));
    assert!(
        again.contains(
            "Error from server (AlreadyExists): error when creating \"STDIN\": infraenvs.agent-install.openshift.io \"first\" already exists"
        ),
        "{again}"
    );
    // The created InfraEnv is reconciled before `create` returns.
    assert_eq!(k.jsonpath("infraenv", "create", "first", "{.status.conditions[0].reason}"), "InfraEnvAvailable");

    // Admission speaks as the hub's webhook would, and kubectl shows it.
    let bad = infraenv("create", "bad", "  ignitionConfigOverride: '{not json'\n");
    assert_eq!(
        k.fails_in(&["create", "-f", "-"], Some(&bad)),
        "The InfraEnv \"bad\" is invalid: spec.ignitionConfigOverride: not valid JSON: key must be a string at line 1 column 2\n"
    );
    let err = k.fails_in(&["apply", "-f", "-"], Some(&bad));
    assert!(err.starts_with("The InfraEnv \"bad\" is invalid: spec.ignitionConfigOverride: not valid JSON"), "{err}");
    k.fails(&["get", "infraenv", "bad", "-n", "create"]);
}

#[test]
fn kubectl_apply_merges_three_ways_and_server_side() {
    let k = Kubectl::start();
    k.namespace_with_pull_secret("apply");
    let v1 = infraenv(
        "apply",
        "pool",
        "  additionalNTPSources:\n  - ntp1.example.com\n  kernelArguments:\n  - operation: append\n    value: console=ttyS0\n",
    );
    assert_eq!(k.ok_in(&["apply", "-f", "-"], Some(&v1)), "infraenv.agent-install.openshift.io/pool created\n");
    assert_eq!(k.ok_in(&["apply", "-f", "-"], Some(&v1)), "infraenv.agent-install.openshift.io/pool unchanged\n");
    // A second apply changes a field...
    let v2 = v1.replace("console=ttyS0", "console=ttyS1");
    assert_eq!(k.ok_in(&["apply", "-f", "-"], Some(&v2)), "infraenv.agent-install.openshift.io/pool configured\n");
    assert_eq!(
        k.jsonpath("infraenv", "apply", "pool", "{.spec.kernelArguments}"),
        r#"[{"operation":"append","value":"console=ttyS1"}]"#
    );
    // ...a field someone else set survives an apply that never named it...
    k.ok(&[
        "patch",
        "infraenv",
        "pool",
        "-n",
        "apply",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"cpuArchitecture":"x86_64"}}"#,
    ]);
    // ...and one the last apply named and this one does not is removed.
    let v3 = v2.replace("  kernelArguments:\n  - operation: append\n    value: console=ttyS1\n", "");
    assert_eq!(k.ok_in(&["apply", "-f", "-"], Some(&v3)), "infraenv.agent-install.openshift.io/pool configured\n");
    let spec = k.get_json("infraenv", "apply", "pool")["spec"].clone();
    assert!(spec.get("kernelArguments").is_none(), "removed from the file, removed from the object: {spec:#}");
    assert_eq!(spec["additionalNTPSources"], serde_json::json!(["ntp1.example.com"]));
    assert_eq!(spec["cpuArchitecture"], "x86_64");
    // `diff` is a server dry run of the apply.
    let diff = k.run_with(&k.kubeconfig(), &["diff", "-f", "-"], Some(&v2));
    assert_eq!(diff.status.code(), Some(1), "{}", String::from_utf8_lossy(&diff.stderr));
    let diff = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert!(diff.contains("+  kernelArguments:\n+  - operation: append\n+    value: console=ttyS1\n"), "{diff}");

    // Server-side apply: a field manager owns what it applied.
    let ssa = infraenv("apply", "ssa", "");
    assert_eq!(
        k.ok_in(&["apply", "--server-side", "-f", "-"], Some(&ssa)),
        "infraenv.agent-install.openshift.io/ssa serverside-applied\n"
    );
    let other = ssa.replace("test@bootstream", "other@bootstream");
    let conflict = k.fails_in(&["apply", "--server-side", "--field-manager=other", "-f", "-"], Some(&other));
    assert!(
        conflict.starts_with(
            "error: Apply failed with 1 conflict: conflict with \"kubectl\": .spec.sshAuthorizedKey\nPlease review the fields above--they currently have other managers."
        ),
        "{conflict}"
    );
    assert_eq!(
        k.jsonpath("infraenv", "apply", "ssa", "{.spec.sshAuthorizedKey}"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfake test@bootstream"
    );
    assert_eq!(
        k.ok_in(&["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-"], Some(&other)),
        "infraenv.agent-install.openshift.io/ssa serverside-applied\n"
    );
    let ie: serde_json::Value =
        serde_json::from_str(&k.ok(&["get", "infraenv", "ssa", "-n", "apply", "-o", "json", "--show-managed-fields"]))
            .unwrap();
    assert_eq!(ie["spec"]["sshAuthorizedKey"], "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfake other@bootstream");
    let managers: Vec<(&str, &str)> = ie["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["manager"].as_str().unwrap(), m["operation"].as_str().unwrap()))
        .collect();
    assert!(managers.contains(&("kubectl", "Apply")) && managers.contains(&("other", "Apply")), "{managers:?}");
    // `get` hides managed fields unless asked.
    assert!(!k.ok(&["get", "infraenv", "ssa", "-n", "apply", "-o", "yaml"]).contains("managedFields"));
    assert!(
        k.ok(&["get", "infraenv", "ssa", "-n", "apply", "-o", "yaml", "--show-managed-fields"])
            .contains("managedFields")
    );

    // A server dry run stores nothing.
    let dry = infraenv("apply", "dry", "");
    assert_eq!(
        k.ok_in(&["apply", "--dry-run=server", "-f", "-"], Some(&dry)),
        "infraenv.agent-install.openshift.io/dry created (server dry run)\n"
    );
    assert_eq!(
        k.ok_in(&["apply", "--server-side", "--dry-run=server", "-f", "-"], Some(&dry)),
        "infraenv.agent-install.openshift.io/dry serverside-applied (server dry run)\n"
    );
    assert_eq!(
        k.fails(&["get", "infraenv", "dry", "-n", "apply"]),
        "Error from server (NotFound): infraenvs.agent-install.openshift.io \"dry\" not found\n"
    );
    assert_eq!(
        k.ok_in(&["apply", "--dry-run=server", "-f", "-"], Some(&v2)),
        "infraenv.agent-install.openshift.io/pool configured (server dry run)\n"
    );
    assert!(k.get_json("infraenv", "apply", "pool")["spec"].get("kernelArguments").is_none());
}

#[test]
fn kubectl_validates_fields_strictly_and_warns_when_told() {
    let k = Kubectl::start();
    k.namespace_with_pull_secret("strict");
    let unknown = infraenv("strict", "typo", "  bogusField: 1\n");
    // kubectl asks for strict validation by default, and shows the server's refusal.
    let err = k.fails_in(&["create", "-f", "-"], Some(&unknown));
    assert_eq!(
        err,
        "Error from server (BadRequest): error when creating \"STDIN\": InfraEnv in version \"v1beta1\" cannot be handled as a InfraEnv: strict decoding error: unknown field \"spec.bogusField\"\n"
    );
    let err = k.fails_in(&["apply", "-f", "-"], Some(&unknown));
    assert!(err.contains("strict decoding error: unknown field \"spec.bogusField\""), "{err}");
    k.fails(&["get", "infraenv", "typo", "-n", "strict"]);
    // --validate=warn creates it with a warning, the unknown field dropped.
    let out = k.run_with(&k.kubeconfig(), &["create", "--validate=warn", "-f", "-"], Some(&unknown));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "infraenv.agent-install.openshift.io/typo created\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "Warning: unknown field \"spec.bogusField\"\n");
    let spec = k.get_json("infraenv", "strict", "typo")["spec"].clone();
    assert!(spec.get("bogusField").is_none(), "{spec:#}");
    // --validate=false: neither refused nor warned.
    let quiet = unknown.replace("name: typo", "name: quiet");
    let out = k.run_with(&k.kubeconfig(), &["create", "--validate=false", "-f", "-"], Some(&quiet));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
