//! The admin credentials a cluster's installer reports (`PUT /api/assisted-install/v2/clusters/{id}/uploads/credentials`),
//! attacked: only the bootstrap host of that very cluster, with its own InfraEnv's token, while the
//! cluster installs, may write them, bounded and checked; whatever a request names, they end up only
//! in that cluster's ClusterDeployment's own `<name>-admin-kubeconfig` and `<name>-admin-password`.

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::*;
use serde_json::{Value, json};

impl Tenant {
    fn host(&self, s: &Server, host: &str) -> Value {
        let r = self.call(s, "GET", &self.id, &format!("/{host}"), None);
        assert_eq!(r.status, 200, "{}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }

    /// The host's agent boots: it registers and sends its inventory.
    fn boot(&self, s: &Server, host: &str, index: usize) {
        let r = self.register(s, host);
        assert_eq!(r.status, 201, "{}", r.text());
        let r = self.send_inventory(s, host, index);
        assert_eq!(r.status, 204, "{}", r.text());
    }

    /// Cluster `cluster` of this tenant, with `hosts` bound to it and its installation started.
    /// Returns the cluster's id.
    fn installing_cluster(&self, s: &Server, cluster: &str, hosts: &[(&str, usize)]) -> String {
        s.apply_ok(&cluster_yaml(&self.ns, cluster, hosts.len()));
        for &(host, index) in hosts {
            self.boot(s, host, index);
            wait_until("the Agent", || {
                cli(&["get", "--kubeconfig", &s.kubeconfig, "agent", host, "-n", &self.ns], None).status.success()
            });
            let patch = format!(
                r#"{{"spec":{{"approved":true,"clusterDeploymentName":{{"name":"{cluster}","namespace":"{}"}}}}}}"#,
                self.ns
            );
            let out = cli(
                &[
                    "patch",
                    "--kubeconfig",
                    &s.kubeconfig,
                    "agent",
                    host,
                    "-n",
                    &self.ns,
                    "--type",
                    "merge",
                    "-p",
                    &patch,
                ],
                None,
            );
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            wait_until("the host binding", || self.host(s, host)["status"] == "binding");
            // Told to exit, the agent starts again as a bound host.
            self.boot(s, host, index);
        }
        for &(host, _) in hosts {
            wait_until("the installation", || self.host(s, host)["status"] == "installing");
        }
        self.host(s, hosts[0].0)["cluster_id"].as_str().unwrap().to_string()
    }

    /// The installer reports every stage of `host` up to Done.
    fn install_done(&self, s: &Server, host: &str) {
        for stage in bootstream::cli::simulate::INSTALL_STAGES {
            let r = self.call(s, "PUT", &self.id, &format!("/{host}/progress"), Some(json!({"current_stage": stage})));
            assert_eq!(r.status, 200, "{stage}: {}", r.text());
        }
    }
}

/// A credentials upload: `token` in X-Secret-Key (none when None), the rest in the query.
fn upload(s: &Server, method: &str, token: Option<&str>, cluster: &str, query: &str, body: &[u8]) -> Response {
    let path = format!("/api/assisted-install/v2/clusters/{cluster}/uploads/credentials?{query}");
    let mut headers = vec![("Content-Type", "application/octet-stream")];
    if let Some(t) = token {
        headers.push(("X-Secret-Key", t));
    }
    request(&s.addr, method, &path, &headers, body)
}

fn secret_names(s: &Server, ns: &str) -> Vec<String> {
    let out = cli(&["get", "--kubeconfig", &s.kubeconfig, "secrets", "-n", ns, "-o", "json"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> =
        v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

fn secret_value(secret: &Value, key: &str) -> String {
    let b64 = secret["data"][key].as_str().unwrap_or_else(|| panic!("no {key} in {secret:#}"));
    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b64).unwrap()).unwrap()
}

#[test]
fn only_the_bootstrap_host_of_an_installing_cluster_reports_its_credentials() {
    let s = Server::start(&[]);
    s.apply_ok(IMAGE_SET);
    let a = tenant(&s, "tenant-a", "pool");
    let b = tenant(&s, "tenant-b", "pool");
    let a_host = "0a000000-0000-4000-8000-00000000000a";
    let (b_boot, b_other) = ("0b000000-0000-4000-8000-00000000000b", "0b000000-0000-4000-8000-0000000000bb");
    let a_cluster = a.installing_cluster(&s, "a-cluster", &[(a_host, 0)]);
    let b_cluster = b.installing_cluster(&s, "b-cluster", &[(b_boot, 1), (b_other, 2)]);
    assert_eq!(b.host(&s, b_boot)["bootstrap"], true);
    assert_eq!(b.host(&s, b_other)["bootstrap"], false);
    let kubeconfig = bootstream::cli::simulate::simulated_kubeconfig(&b_cluster);
    let password = bootstream::cli::simulate::simulated_password(&b_cluster);
    let q = |ie: &str, host: &str, file: &str| format!("file_name={file}&infra_env_id={ie}&host_id={host}");

    // Without a token, or with another InfraEnv's: refused before the body.
    let r = upload(&s, "PUT", None, &b_cluster, &q(&b.id, b_boot, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 401, "{}", r.text());
    let r = upload(&s, "PUT", Some(&a.token), &b_cluster, &q(&b.id, b_boot, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 401, "A's token for B's InfraEnv: {}", r.text());
    let r = upload(&s, "PUT", Some(&b.token), &b_cluster, &format!("file_name=kubeconfig&host_id={b_boot}"), b"x");
    assert_eq!(r.status, 401, "no InfraEnv named: {}", r.text());
    // A's bootstrap host, with its own token, for B's cluster: not a host of it.
    let r = upload(&s, "PUT", Some(&a.token), &b_cluster, &q(&a.id, a_host, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 404, "{}", r.text());
    // A's token, B's host id on A's InfraEnv: A has no such host.
    let r = upload(&s, "PUT", Some(&a.token), &b_cluster, &q(&a.id, b_boot, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 404, "{}", r.text());
    // B's other host: in the cluster, but not its bootstrap host.
    let r = upload(&s, "PUT", Some(&b.token), &b_cluster, &q(&b.id, b_other, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 403, "{}", r.text());

    // B's bootstrap host, with bad files or names.
    let bad: &[(&str, Vec<u8>, u16)] = &[
        ("kubeconfig", vec![b'a'; (64 << 10) + 1], 413),
        ("kubeconfig", b"not: [a kubeconfig".to_vec(), 400),
        ("kubeconfig", b"apiVersion: v1\nkind: Config\nclusters: []\nusers: []\n".to_vec(), 400),
        ("kubeconfig", vec![0xff, 0xfe, 0x00], 400),
        ("kubeconfig", Vec::new(), 400),
        ("kubeadmin-password", b"two words".to_vec(), 400),
        ("kubeadmin-password", b"line\nbreak".to_vec(), 400),
        ("kubeadmin-password", vec![b'p'; 257], 413),
        ("../../../namespaces/kube-system/secrets/x", kubeconfig.as_bytes().to_vec(), 400),
        ("metadata.json", kubeconfig.as_bytes().to_vec(), 400),
    ];
    for (file, body, status) in bad {
        let r = upload(&s, "PUT", Some(&b.token), &b_cluster, &q(&b.id, b_boot, file), body);
        assert_eq!(r.status, *status, "{file} ({} bytes): {}", body.len(), r.text());
    }
    let r = upload(&s, "GET", Some(&b.token), &b_cluster, &q(&b.id, b_boot, "kubeconfig"), b"");
    assert_eq!(r.status, 405);
    let r = upload(&s, "POST", Some(&b.token), &b_cluster, &q(&b.id, b_boot, "kubeconfig"), kubeconfig.as_bytes());
    assert_eq!(r.status, 405);
    // Nothing was kept for any cluster: both installing clusters wait for theirs.
    for h in [a_host, b_boot, b_other] {
        let t = if h == a_host { &a } else { &b };
        t.install_done(&s, h);
    }
    std::thread::sleep(Duration::from_millis(500));
    for (t, cd) in [(&a, "a-cluster"), (&b, "b-cluster")] {
        let aci = s.get_json("agentclusterinstall", &t.ns, cd);
        assert_eq!(aci["status"]["debugInfo"]["state"], "finalizing", "{aci:#}");
        assert_eq!(secret_names(&s, &t.ns), ["pull-secret"], "no credentials secret in {}", t.ns);
    }

    // The right host, the right files: B's cluster is installed with them, in B's namespace only.
    for (file, body) in [("kubeconfig", kubeconfig.clone()), ("kubeadmin-password", password.clone())] {
        let r = upload(&s, "PUT", Some(&b.token), &b_cluster, &q(&b.id, b_boot, file), body.as_bytes());
        assert_eq!(r.status, 201, "{file}: {}", r.text());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let aci = loop {
        let aci = s.get_json("agentclusterinstall", "tenant-b", "b-cluster");
        if condition(&aci, "Completed").is_some_and(|c| c["status"] == "True") {
            break aci;
        }
        assert!(Instant::now() < deadline, "never installed: {aci:#}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(aci["spec"]["clusterMetadata"]["adminKubeconfigSecretRef"]["name"], "b-cluster-admin-kubeconfig");
    assert_eq!(secret_names(&s, "tenant-b"), ["b-cluster-admin-kubeconfig", "b-cluster-admin-password", "pull-secret"]);
    assert_eq!(secret_names(&s, "tenant-a"), ["pull-secret"]);
    assert_eq!(secret_value(&s.get_json("secret", "tenant-b", "b-cluster-admin-kubeconfig"), "kubeconfig"), kubeconfig);
    assert_eq!(secret_value(&s.get_json("secret", "tenant-b", "b-cluster-admin-password"), "password"), password);
    assert_eq!(
        s.get_json("agentclusterinstall", "tenant-a", "a-cluster")["status"]["debugInfo"]["state"],
        "finalizing"
    );
    let _ = a_cluster;

    // Installed, the cluster's credentials are final.
    let other = bootstream::cli::simulate::simulated_kubeconfig("another");
    let r = upload(&s, "PUT", Some(&b.token), &b_cluster, &q(&b.id, b_boot, "kubeconfig"), other.as_bytes());
    assert_eq!(r.status, 409, "{}", r.text());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(secret_value(&s.get_json("secret", "tenant-b", "b-cluster-admin-kubeconfig"), "kubeconfig"), kubeconfig);
}

/// Issue 41: credentials from tenants are data, never code or paths. An admin kubeconfig that
/// names a program to run, a file of the hub to read, a proxy to connect through or a user to
/// impersonate is refused at upload with a 400 naming the field and its entry; the installer's
/// kubeconfig (certificate and CA data) and a token are taken.
#[test]
fn admin_kubeconfigs_that_name_programs_paths_proxies_or_other_users_are_refused() {
    let s = Server::start(&[]);
    s.apply_ok(IMAGE_SET);
    let t = tenant(&s, "tenant-a", "pool");
    let host = "0a000000-0000-4000-8000-00000000000a";
    let cluster = t.installing_cluster(&s, "a-cluster", &[(host, 0)]);
    let q = format!("file_name=kubeconfig&infra_env_id={}&host_id={host}", t.id);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // `cluster` and `user` are the lines of the one cluster entry (after its server) and the one
    // user entry.
    let kubeconfig = bootstream::testkit::tenant_kubeconfig;
    let exec =
        "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: /bin/sh\n  args: [-c, \"id > /tmp/pwned\"]";
    let refused = [
        ("", exec, "user \"admin\": exec"),
        (
            "",
            "auth-provider:\n  name: gcp\n  config:\n    cmd-path: /bin/id\n    cmd-args: -u",
            "user \"admin\": auth-provider",
        ),
        ("", "tokenFile: /etc/shadow", "user \"admin\": tokenFile"),
        ("", "client-certificate: /etc/pki/hub.crt\nclient-key-data: eA==", "user \"admin\": client-certificate"),
        ("", "client-certificate-data: eA==\nclient-key: /etc/pki/hub.key", "user \"admin\": client-key"),
        ("", "token: abc\nas: system:admin", "user \"admin\": as"),
        ("", "token: abc\nas-groups: [system:masters]", "user \"admin\": as-groups"),
        ("", "token: abc\nas-user-extra:\n  scopes: [all]", "user \"admin\": as-user-extra"),
        (
            "certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            "token: abc",
            "cluster \"spoke\": certificate-authority",
        ),
        ("proxy-url: http://169.254.169.254", "token: abc", "cluster \"spoke\": proxy-url"),
    ];
    for (cluster_lines, user_lines, named) in refused {
        let body = kubeconfig(cluster_lines, user_lines);
        let r = upload(&s, "PUT", Some(&t.token), &cluster, &q, body.as_bytes());
        assert_eq!(r.status, 400, "{named}: {}", r.text());
        let reason = serde_json::from_slice::<Value>(&r.body).unwrap()["reason"].as_str().unwrap().to_string();
        assert!(reason.starts_with(&format!("kubeconfig {named} is refused")), "{named}: {reason}");
        assert!(reason.contains("credentials from tenants are data, never code or paths"), "{reason}");
    }
    // An entry no context uses is checked too.
    let unused = kubeconfig("", "token: abc")
        .replace("users:\n", &format!("users:\n- name: spare\n  user:\n    {}\n", "tokenFile: /etc/shadow"));
    let r = upload(&s, "PUT", Some(&t.token), &cluster, &q, unused.as_bytes());
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("user \\\"spare\\\": tokenFile is refused"), "{}", r.text());
    // Nothing refused was kept.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(secret_names(&s, &t.ns), ["pull-secret"]);

    // The installer's admin kubeconfig: client certificate and key, and the CA, all inline.
    let ca = rcgen::generate_simple_self_signed(vec!["kube-apiserver-lb-signer".to_string()]).unwrap();
    let admin = rcgen::generate_simple_self_signed(vec!["system:admin".to_string()]).unwrap();
    let installer = kubeconfig(
        &format!("certificate-authority-data: {}", b64(&ca.cert.pem())),
        &format!(
            "client-certificate-data: {}\nclient-key-data: {}",
            b64(&admin.cert.pem()),
            b64(&admin.signing_key.serialize_pem())
        ),
    );
    let r = upload(&s, "PUT", Some(&t.token), &cluster, &q, installer.as_bytes());
    assert_eq!(r.status, 201, "{}", r.text());
    // A token, and basic authentication: data too.
    let r = upload(&s, "PUT", Some(&t.token), &cluster, &q, kubeconfig("", "token: sha256~abcdef").as_bytes());
    assert_eq!(r.status, 201, "{}", r.text());
    let basic = kubeconfig("insecure-skip-tls-verify: true", "username: kubeadmin\npassword: a-b-c-d");
    let r = upload(&s, "PUT", Some(&t.token), &cluster, &q, basic.as_bytes());
    assert_eq!(r.status, 201, "{}", r.text());
}
