//! Kubeconfigs that come from tenants: the admin kubeconfig a cluster's bootstrap host uploads, and
//! whatever a ClusterDeployment's `<name>-admin-kubeconfig` Secret holds, however it got there.
//!
//! Credentials from tenants are data, never code or paths. A kubeconfig can name a program to run
//! (`exec`, `auth-provider`), files of the reader's machine to read (`tokenFile`,
//! `client-certificate`, `client-key`, `certificate-authority`), a proxy to connect through
//! (`proxy-url`) or another identity to act as (`as`, `as-uid`, `as-groups`, `as-user-extra`).
//! Read on the hub, each of those would run or read as the server's user. [`client_config`] takes a
//! kubeconfig only when every cluster and user entry in it holds nothing but inline data, and builds
//! the [`kube::Config`] field by field from that data; nothing here hands the tenant's kubeconfig
//! to kube-rs's own loaders (`Config::from_custom_kubeconfig`, `from_kubeconfig`, `infer`).
//!
//! The upload check and every spoke client go through [`client_config`], so what an upload is
//! refused for is what a Secret written past the upload (by an admin, or a tenant allowed to write
//! Secrets) fails with when a client is built from it.

use base64::Engine;
use kube::config::{AuthInfo, Cluster, Kubeconfig};

/// Why a tenant's kubeconfig was not taken. Display names the entry and the field.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error("kubeconfig is not UTF-8 text")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("kubeconfig does not parse")]
    Parse(#[source] kube::config::KubeconfigError),
    #[error(
        "kubeconfig user {user:?}: {field} is refused: credentials from tenants are data, never code or paths ({why})"
    )]
    RefusedUserField { user: String, field: String, why: &'static str },
    #[error(
        "kubeconfig cluster {cluster:?}: {field} is refused: credentials from tenants are data, never code or paths ({why})"
    )]
    RefusedClusterField { cluster: String, field: String, why: &'static str },
    #[error("kubeconfig has no current-context")]
    NoCurrentContext,
    #[error("kubeconfig current-context {0:?} names no context in it")]
    NoContext(String),
    #[error("kubeconfig context {context:?} names cluster {cluster:?}, which is not in it")]
    NoCluster { context: String, cluster: String },
    #[error("kubeconfig context {context:?} names user {user:?}, which is not in it")]
    NoUser { context: String, user: String },
    #[error("kubeconfig cluster {0:?} has no server")]
    NoServer(String),
    #[error("kubeconfig cluster {cluster:?}: server {server:?} is not an http:// or https:// URL")]
    BadServer { cluster: String, server: String },
    #[error("kubeconfig cluster {cluster:?}: tls-server-name {name:?} is not a DNS name or IP address")]
    BadServerName { cluster: String, name: String },
    #[error("kubeconfig {entry}: {field} is not base64")]
    Base64 {
        entry: String,
        field: &'static str,
        #[source]
        source: base64::DecodeError,
    },
    #[error("kubeconfig {entry}: {field} holds no PEM {what}")]
    NoPem { entry: String, field: &'static str, what: &'static str },
    #[error("kubeconfig user {user:?}: {given} is given without {missing}")]
    HalfIdentity { user: String, given: &'static str, missing: &'static str },
    #[error("kubeconfig user {0:?}: token must be printable ASCII without spaces")]
    BadToken(String),
    #[error("kubeconfig user {0:?}: username may not hold ':', nor username and password control characters")]
    BadBasicAuth(String),
}

const RUNS_A_PROGRAM: &str =
    "a credential plugin runs a program on the server; give token, or client-certificate-data and client-key-data";
const IMPERSONATES: &str = "impersonation is not taken; give the credentials of the user itself";

/// The refused fields a user entry sets, with why each is refused. Fields kube-rs does not know
/// are not looked at: they are dropped when a user entry is read, and nothing below uses them.
fn refused_user_fields(user: &AuthInfo) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut refuse = |set: bool, field: &str, why: &'static str| {
        if set {
            out.push((field.to_string(), why));
        }
    };
    refuse(user.exec.is_some(), "exec", RUNS_A_PROGRAM);
    refuse(user.auth_provider.is_some(), "auth-provider", RUNS_A_PROGRAM);
    refuse(user.token_file.is_some(), "tokenFile", "a path on the server; give the token itself as token");
    refuse(
        user.client_certificate.is_some(),
        "client-certificate",
        "a path on the server; give the certificate as client-certificate-data",
    );
    refuse(user.client_key.is_some(), "client-key", "a path on the server; give the key as client-key-data");
    refuse(user.impersonate.is_some(), "as", IMPERSONATES);
    refuse(user.impersonate_uid.is_some(), "as-uid", IMPERSONATES);
    refuse(user.impersonate_groups.is_some(), "as-groups", IMPERSONATES);
    refuse(user.impersonate_user_extra.is_some(), "as-user-extra", IMPERSONATES);
    out
}

fn refused_cluster_fields(cluster: &Cluster) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    if cluster.certificate_authority.is_some() {
        out.push((
            "certificate-authority".to_string(),
            "a path on the server; give the CA certificates as certificate-authority-data",
        ));
    }
    if cluster.proxy_url.is_some() {
        out.push(("proxy-url".to_string(), "bootstream connects to the cluster's server directly"));
    }
    out
}

/// PEM blocks of certificates, as kube-rs and rustls read them.
fn certificate(tag: &str) -> bool {
    tag == "CERTIFICATE"
}

/// PEM blocks of private keys (PKCS#8, RSA or EC).
fn private_key(tag: &str) -> bool {
    tag.ends_with("PRIVATE KEY")
}

/// The DER contents of the PEM blocks whose tag `accept`s in base64 `b64` (field `field` of
/// `entry`); at least one.
fn pem_blocks(
    b64: &str,
    entry: &str,
    field: &'static str,
    what: &'static str,
    accept: fn(&str) -> bool,
) -> Result<Vec<Vec<u8>>, KubeconfigError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|source| KubeconfigError::Base64 { entry: entry.to_string(), field, source })?;
    let blocks: Vec<Vec<u8>> = pem::parse_many(&bytes)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| accept(p.tag()))
        .map(|p| p.into_contents())
        .collect();
    if blocks.is_empty() {
        return Err(KubeconfigError::NoPem { entry: entry.to_string(), field, what });
    }
    Ok(blocks)
}

/// Checks a kubeconfig from a tenant and gives the configuration of a client of the cluster its
/// current context names: server, CA certificates, `insecure-skip-tls-verify`, `tls-server-name`,
/// and a token, a client certificate and key, or a user name and password (basic authentication:
/// plain data too). Every cluster and user entry is checked, used or not, so that what is refused
/// is refused whichever context a reader would pick.
///
/// The [`kube::Config`] made here cannot make kube-rs run a program or open a file when a
/// [`kube::Client`] is built from it or sends a request (checked against kube-client 5.0's
/// `client/config_ext.rs`, `client/auth/mod.rs`, `client/builder.rs` and
/// `config/file_config.rs`):
/// - `Auth::try_from(&AuthInfo)` spawns a process only for `exec` or `auth-provider` (gcp's
///   `cmd-path`), and opens a file only for `token_file`; the `AuthInfo` here starts from
///   `AuthInfo::default()` and gets nothing but `token`, `username`/`password` and the two
///   `*_data` fields, so it yields `Bearer`, `Basic`, `None` or (for exec only) `Certificate`;
/// - the TLS identity comes from `AuthInfo::identity_pem`, which reads `client_certificate` and
///   `client_key` files only when the matching `*_data` field is absent: both paths stay `None`;
/// - the CA is `root_cert` (DER bytes decoded here); `root_cert_file`, the only CA path kube reads
///   (and re-reads), stays `None` as `Config::new` leaves it;
/// - `proxy_url` stays `None`, and the `HTTPS_PROXY`/`NO_PROXY` environment is read only by the
///   kubeconfig loaders, not used here; no `headers`, so no impersonation headers either.
pub fn client_config(kubeconfig: &[u8]) -> Result<kube::Config, KubeconfigError> {
    let text = std::str::from_utf8(kubeconfig).map_err(KubeconfigError::NotUtf8)?;
    let config = Kubeconfig::from_yaml(text).map_err(KubeconfigError::Parse)?;
    for named in &config.auth_infos {
        if let Some(user) = &named.auth_info
            && let Some((field, why)) = refused_user_fields(user).into_iter().next()
        {
            return Err(KubeconfigError::RefusedUserField { user: named.name.clone(), field, why });
        }
    }
    for named in &config.clusters {
        if let Some(cluster) = &named.cluster
            && let Some((field, why)) = refused_cluster_fields(cluster).into_iter().next()
        {
            return Err(KubeconfigError::RefusedClusterField { cluster: named.name.clone(), field, why });
        }
    }

    let context_name =
        config.current_context.clone().filter(|c| !c.is_empty()).ok_or(KubeconfigError::NoCurrentContext)?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| KubeconfigError::NoContext(context_name.clone()))?;
    let cluster_name = context.cluster.clone();
    let cluster =
        config.clusters.iter().find(|c| c.name == cluster_name).and_then(|c| c.cluster.clone()).ok_or_else(|| {
            KubeconfigError::NoCluster { context: context_name.clone(), cluster: cluster_name.clone() }
        })?;
    let user_name = context.user.clone().unwrap_or_default();
    let user = config
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .ok_or_else(|| KubeconfigError::NoUser { context: context_name.clone(), user: user_name.clone() })?;

    let server = cluster
        .server
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| KubeconfigError::NoServer(cluster_name.clone()))?;
    let url = server
        .parse::<http::Uri>()
        .ok()
        .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some())
        .ok_or_else(|| KubeconfigError::BadServer { cluster: cluster_name.clone(), server: server.clone() })?;
    let mut out = kube::Config::new(url);
    out.accept_invalid_certs = cluster.insecure_skip_tls_verify.unwrap_or(false);
    let cluster_entry = format!("cluster {cluster_name:?}");
    if let Some(ca) = &cluster.certificate_authority_data {
        out.root_cert = Some(pem_blocks(ca, &cluster_entry, "certificate-authority-data", "certificate", certificate)?);
    }
    if let Some(name) = &cluster.tls_server_name {
        if rustls::pki_types::ServerName::try_from(name.as_str()).is_err() {
            return Err(KubeconfigError::BadServerName { cluster: cluster_name.clone(), name: name.clone() });
        }
        out.tls_server_name = Some(name.clone());
    }
    if let Some(ns) = context.namespace.filter(|n| !n.is_empty()) {
        out.default_namespace = ns;
    }

    let user_entry = format!("user {user_name:?}");
    let mut auth = AuthInfo::default();
    let printable = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    if let Some(token) = &user.token {
        use secrecy::ExposeSecret;
        if !printable(token.expose_secret()) {
            return Err(KubeconfigError::BadToken(user_name.clone()));
        }
        auth.token = Some(token.clone());
    }
    if let (Some(name), Some(password)) = (&user.username, &user.password) {
        use secrecy::ExposeSecret;
        // Basic authentication is sent base64-encoded: any text is a valid header; only a ':' in
        // the user name would change what the server reads.
        if name.contains(':') || name.chars().chain(password.expose_secret().chars()).any(char::is_control) {
            return Err(KubeconfigError::BadBasicAuth(user_name.clone()));
        }
        auth.username = Some(name.clone());
        auth.password = Some(password.clone());
    }
    match (&user.client_certificate_data, &user.client_key_data) {
        (None, None) => {}
        (Some(_), None) => {
            return Err(KubeconfigError::HalfIdentity {
                user: user_name,
                given: "client-certificate-data",
                missing: "client-key-data",
            });
        }
        (None, Some(_)) => {
            return Err(KubeconfigError::HalfIdentity {
                user: user_name,
                given: "client-key-data",
                missing: "client-certificate-data",
            });
        }
        (Some(cert), Some(key)) => {
            use secrecy::ExposeSecret;
            pem_blocks(cert, &user_entry, "client-certificate-data", "certificate", certificate)?;
            pem_blocks(key.expose_secret(), &user_entry, "client-key-data", "private key", private_key)?;
            auth.client_certificate_data = Some(cert.trim().to_string());
            auth.client_key_data = Some(key.expose_secret().trim().to_string().into());
        }
    }
    out.auth_info = auth;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    use crate::testkit::tenant_kubeconfig as kubeconfig;

    /// A CA certificate, and a client certificate and key, in PEM, as the installer writes them.
    fn installer_material() -> (String, String, String) {
        let ca = rcgen::generate_simple_self_signed(vec!["kube-apiserver".to_string()]).unwrap();
        let client = rcgen::generate_simple_self_signed(vec!["system:admin".to_string()]).unwrap();
        (ca.cert.pem(), client.cert.pem(), client.signing_key.serialize_pem())
    }

    #[test]
    fn code_paths_proxies_and_impersonation_are_refused_naming_the_entry_and_field() {
        let cases = [
            ("", "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: /bin/sh\n  args: [-c, id]", "exec"),
            ("", "auth-provider:\n  name: gcp\n  config:\n    cmd-path: /bin/id", "auth-provider"),
            ("", "tokenFile: /etc/shadow", "tokenFile"),
            ("", "client-certificate: /etc/pki/tls/cert.pem\nclient-key-data: eA==", "client-certificate"),
            ("", "client-key: /etc/ssh/ssh_host_ed25519_key", "client-key"),
            ("", "token: abc\nas: system:admin", "as"),
            ("", "token: abc\nas-uid: '0'", "as-uid"),
            ("", "token: abc\nas-groups: [system:masters]", "as-groups"),
            ("", "token: abc\nas-user-extra:\n  scopes: [all]", "as-user-extra"),
        ];
        for (cluster, user, field) in cases {
            let err = client_config(kubeconfig(cluster, user).as_bytes()).unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with(&format!("kubeconfig user \"admin\": {field} is refused")), "{field}: {text}");
            assert!(text.contains("credentials from tenants are data, never code or paths"), "{text}");
        }
        let cases = [
            ("certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "certificate-authority"),
            ("proxy-url: http://169.254.169.254:80", "proxy-url"),
        ];
        for (cluster, field) in cases {
            let err = client_config(kubeconfig(cluster, "token: abc").as_bytes()).unwrap_err();
            assert!(err.to_string().starts_with(&format!("kubeconfig cluster \"spoke\": {field} is refused")), "{err}");
        }
    }

    #[test]
    fn an_unused_entry_is_checked_too() {
        let text = kubeconfig("", "token: abc")
            .replace("users:\n", "users:\n- name: other\n  user:\n    exec:\n      command: /bin/true\n");
        let err = client_config(text.as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("kubeconfig user \"other\": exec is refused"), "{err}");
    }

    #[tokio::test]
    async fn installer_kubeconfigs_become_configs_of_inline_data_only() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (ca, cert, key) = installer_material();
        let text = kubeconfig(
            &format!("certificate-authority-data: {}", b64(ca.as_bytes())),
            &format!("client-certificate-data: {}\nclient-key-data: {}", b64(cert.as_bytes()), b64(key.as_bytes())),
        );
        let config = client_config(text.as_bytes()).unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://api.spoke.example:6443/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(config.root_cert_file.is_none() && config.proxy_url.is_none() && config.headers.is_empty());
        assert!(!config.accept_invalid_certs);
        let auth = &config.auth_info;
        assert!(auth.client_certificate_data.is_some() && auth.client_key_data.is_some());
        assert!(auth.exec.is_none() && auth.token_file.is_none() && auth.client_certificate.is_none());
        kube::Client::try_from(config).expect("a client from inline certificate data");

        let text =
            kubeconfig("insecure-skip-tls-verify: true\ntls-server-name: api.spoke.example", "token: sha256~abc");
        let config = client_config(text.as_bytes()).unwrap();
        assert!(config.accept_invalid_certs);
        assert_eq!(config.tls_server_name.as_deref(), Some("api.spoke.example"));
        assert!(config.auth_info.token.is_some());
        kube::Client::try_from(config).expect("a client from a token");
    }

    #[test]
    fn bad_data_is_refused_saying_what_is_wrong() {
        let cases = [
            (kubeconfig("certificate-authority-data: '%%%'", "token: abc"), "certificate-authority-data is not base64"),
            (
                kubeconfig(&format!("certificate-authority-data: {}", b64(b"not pem")), "token: abc"),
                "certificate-authority-data holds no PEM certificate",
            ),
            (
                kubeconfig("", "client-certificate-data: eA=="),
                "client-certificate-data is given without client-key-data",
            ),
            (kubeconfig("", "token: \"a b\""), "token must be printable ASCII"),
            (
                kubeconfig("", "token: abc").replace("https://api.spoke.example:6443", "file:///etc/passwd"),
                "is not an http",
            ),
            (kubeconfig("", "token: abc").replace("current-context: admin\n", ""), "no current-context"),
            (kubeconfig("", "token: abc").replace("user: admin\n", "user: nobody\n"), "names user \"nobody\""),
        ];
        for (text, expected) in cases {
            let err = client_config(text.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(expected), "{expected}: {err}");
        }
    }
}
