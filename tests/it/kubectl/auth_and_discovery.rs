//! What kubectl learns before it touches an object: the server's version, its resources with their
//! short names, their schemas (`explain`), and that it must log in with the server's token.

use super::Kubectl;
use crate::common;

#[test]
fn kubectl_discovers_the_kinds_their_short_names_and_schemas() {
    let k = Kubectl::start();

    let version = k.ok(&["version"]);
    assert!(version.lines().any(|l| l == "Server Version: v1.32.0-bootstream"), "{version}");

    // Our kinds with upstream's short names, and the core kinds kubectl needs.
    let resources = k.ok(&["api-resources"]);
    let rows: Vec<Vec<&str>> = resources.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    for want in [
        vec!["namespaces", "ns", "v1", "false", "Namespace"],
        vec!["secrets", "v1", "true", "Secret"],
        vec!["agents", "agent-install.openshift.io/v1beta1", "true", "Agent"],
        vec!["infraenvs", "agent-install.openshift.io/v1beta1", "true", "InfraEnv"],
        vec!["nmstateconfigs", "agent-install.openshift.io/v1beta1", "true", "NMStateConfig"],
        vec!["agentclusterinstalls", "aci", "extensions.hive.openshift.io/v1beta1", "true", "AgentClusterInstall"],
        vec!["clusterdeployments", "cd", "hive.openshift.io/v1", "true", "ClusterDeployment"],
        vec!["clusterimagesets", "imgset", "hive.openshift.io/v1", "false", "ClusterImageSet"],
        vec!["baremetalhosts", "bmh,bmhost", "metal3.io/v1alpha1", "true", "BareMetalHost"],
        vec!["preprovisioningimages", "ppimg", "metal3.io/v1alpha1", "true", "PreprovisioningImage"],
    ] {
        assert!(rows.contains(&want), "api-resources lacks {want:?}:\n{resources}");
    }
    assert!(resources.starts_with("NAME "), "{resources}");
    // The short names resolve (each answers its empty list).
    let out = k.run(&["get", "aci,cd,bmh,imgset,ppimg", "-A"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "No resources found\n");
    let namespaced = k.ok(&["api-resources", "--namespaced=false", "-o", "name"]);
    assert_eq!(namespaced, "namespaces\nclusterimagesets.hive.openshift.io\n");

    // `explain` reads the OpenAPI documents made from our CRDs.
    let spec = k.ok(&["explain", "infraenv.spec"]);
    for line in [
        "GROUP:      agent-install.openshift.io",
        "KIND:       InfraEnv",
        "VERSION:    v1beta1",
        "FIELD: spec <Object>",
        "  pullSecretRef\t<Object> -required-",
        "  sshAuthorizedKey\t<string>",
        "  nmStateConfigLabelSelector\t<Object>",
        "  kernelArguments\t<[]Object>",
    ] {
        assert!(spec.lines().any(|l| l == line), "explain infraenv.spec lacks {line:?}:\n{spec}");
    }
    let agent = k.ok(&["explain", "agent.spec", "--recursive"]);
    for block in [
        "  approved\t<boolean>\n",
        "  clusterDeploymentName\t<Object>\n    name\t<string> -required-\n    namespace\t<string>\n",
        "  hostname\t<string>\n",
        "  role\t<string>\n",
    ] {
        assert!(agent.contains(block), "explain agent.spec --recursive lacks {block:?}:\n{agent}");
    }
    let missing = k.fails(&["explain", "infraenv.spec.nosuchfield"]);
    assert!(missing.contains("field \"nosuchfield\" does not exist"), "{missing}");
}

#[test]
fn kubectl_without_the_servers_token_must_log_in() {
    use std::os::unix::fs::PermissionsExt;
    let k = Kubectl::start();
    let path = k.kubeconfig();
    // The kubeconfig holds the API token: its owner's alone.
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let good = std::fs::read_to_string(&path).unwrap();
    assert!(good.contains(&format!("    token: {}\n", common::TEST_API_TOKEN)), "{good}");
    let server = good.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap();
    assert!(server.starts_with("https://127.0.0.1:"), "kubectl sends tokens only over TLS: {server}");
    k.ok(&["create", "namespace", "private"]);
    k.ok(&["create", "secret", "generic", "kept", "-n", "private", "--from-literal=password=hunter2"]);

    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, good.replace(common::TEST_API_TOKEN, "not-the-token")).unwrap();
    // (Without any token kubectl would prompt for a user name: that is kubectl's, not the server's.)
    for kubeconfig in [&wrong] {
        for args in [
            &["api-resources"][..],
            &["explain", "infraenv.spec"],
            &["get", "--raw", "/openapi/v2"],
            &["get", "--raw", "/openapi/v3"],
            &["get", "infraenvs", "-A"],
            &["get", "secret", "kept", "-n", "private", "-o", "yaml"],
            &["create", "namespace", "intruder"],
        ] {
            let out = k.run_with(kubeconfig, args, None);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "kubectl {args:?} with {}: {stderr}", kubeconfig.display());
            assert!(
                stderr.lines().any(|l| l.starts_with("error: You must be logged in to the server (")),
                "kubectl {args:?} with {}: {stderr}",
                kubeconfig.display()
            );
            assert!(!String::from_utf8_lossy(&out.stdout).contains("hunter2"));
        }
    }
    assert_eq!(
        k.ok(&["get", "namespaces", "-o", "name"]),
        "namespace/default\nnamespace/private\n",
        "the intruder created nothing"
    );
}
