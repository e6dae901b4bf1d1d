//! `apply`, `get`, `delete` and `patch`: a kubectl-like client of a running server's resource API
//! (`/apis/...`, `/api/v1/...`), sending the same YAML users apply to Kubernetes. The API token
//! goes on every request as a bearer token. Where the API is, the CA that certifies it and the
//! token come from the kubeconfig `serve` writes (`DATA_DIR/kubeconfig`, by default the one in
//! `./bootstream-data`), unless `--server`, `--token` or `--token-file` say otherwise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use serde::Deserialize;
use serde_json::Value;

use crate::resources::Kind;

/// The kubeconfig `serve` writes with its default data directory.
pub(super) const DEFAULT_KUBECONFIG: &str = "./bootstream-data/kubeconfig";
/// The API token `serve` makes with its default data directory.
pub(super) const DEFAULT_TOKEN_FILE: &str = "./bootstream-data/api-token";
/// The largest kubeconfig read: ours is a few KiB.
const MAX_KUBECONFIG_BYTES: u64 = 1 << 20;

/// Where a client command finds the API.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// The server's API, e.g. https://127.0.0.1:6443. Default: the server of --kubeconfig.
    #[arg(long, env = "BOOTSTREAM_SERVER")]
    pub server: Option<String>,
    /// Kubeconfig naming the API's address, its CA and the token, as `serve` writes it in
    /// DATA_DIR/kubeconfig (inline data only: no exec, no file paths). Default:
    /// ./bootstream-data/kubeconfig, if there is one.
    #[arg(long, env = "BOOTSTREAM_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
}

/// The credentials the global options give.
pub(super) struct Credentials {
    /// `--token`.
    pub token: Option<String>,
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `--certificate-authority`.
    pub ca_file: Option<PathBuf>,
}

/// The API a client command talks to.
pub(super) struct Connection {
    pub server: String,
    /// Carries the token and trusts the kubeconfig's CA besides --certificate-authority.
    pub http: reqwest::Client,
    pub token: Option<String>,
}

/// What a kubeconfig says of the API: the current context's server, CA certificates (DER) and token.
#[derive(Debug, PartialEq)]
pub(super) struct KubeconfigApi {
    pub server: String,
    pub ca_der: Option<Vec<Vec<u8>>>,
    pub token: Option<String>,
}

/// Reads a kubeconfig that carries everything inline, by the rules kubeconfigs from tenants are
/// read by (`resources::kubeconfig`: anything that would run a program or read another file is
/// refused), and takes only what bootstream's API uses: a bearer token over verified TLS. Client
/// certificates, username and password, and skipping TLS verification are refused.
pub(super) fn read_kubeconfig(path: &Path) -> anyhow::Result<KubeconfigApi> {
    use anyhow::{Context, bail};
    use std::io::Read;
    let what = || format!("kubeconfig {}", path.display());
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .with_context(what)?
        .take(MAX_KUBECONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(what)?;
    anyhow::ensure!(bytes.len() as u64 <= MAX_KUBECONFIG_BYTES, "{}: larger than {MAX_KUBECONFIG_BYTES} bytes", what());
    let config = crate::resources::kubeconfig::client_config(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {}", what(), crate::errors::chain(&e)))?;
    if config.accept_invalid_certs {
        bail!("{}: insecure-skip-tls-verify is not honored", what());
    }
    let auth = &config.auth_info;
    if auth.client_certificate_data.is_some() {
        bail!("{}: client certificates are not supported; only an inline token is", what());
    }
    if auth.username.is_some() {
        bail!("{}: username/password is not supported; only an inline token is", what());
    }
    use secrecy::ExposeSecret;
    let token = auth.token.as_ref().map(|t| t.expose_secret().trim().to_string()).filter(|t| !t.is_empty());
    let server = config.cluster_url.to_string().trim_end_matches('/').to_string();
    Ok(KubeconfigApi { server, ca_der: config.root_cert.clone(), token })
}

/// The API for a client command: `--server` or the kubeconfig's server; `--token`, else
/// `--token-file`, else the kubeconfig's token, else ./bootstream-data/api-token; the kubeconfig's
/// CA trusted besides `--certificate-authority`.
pub(super) fn connect(target: &ServerArgs, creds: &Credentials) -> anyhow::Result<Connection> {
    let kubeconfig = match &target.kubeconfig {
        Some(path) => Some(read_kubeconfig(path)?),
        None if Path::new(DEFAULT_KUBECONFIG).exists() => Some(read_kubeconfig(Path::new(DEFAULT_KUBECONFIG))?),
        None => None,
    };
    let server = match (&target.server, &kubeconfig) {
        (Some(server), _) => server.clone(),
        (None, Some(k)) => k.server.clone(),
        (None, None) => anyhow::bail!(
            "no --server and no kubeconfig ({DEFAULT_KUBECONFIG} is not there): run next to `bootstream serve`'s \
             data directory, or name its DATA_DIR/kubeconfig with --kubeconfig"
        ),
    };
    let explicit = creds.token.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let token = match (explicit, &creds.token_file, &kubeconfig) {
        (Some(t), _, _) => Some(t.to_string()),
        (None, Some(file), _) => crate::auth::client_token(None, file),
        (None, None, Some(KubeconfigApi { token: Some(t), .. })) => Some(t.clone()),
        (None, None, _) => crate::auth::client_token(None, Path::new(DEFAULT_TOKEN_FILE)),
    };
    let ca_der = kubeconfig.and_then(|k| k.ca_der).unwrap_or_default();
    let http = http_client(token.as_deref(), creds.ca_file.as_deref(), &ca_der)?;
    Ok(Connection { server, http, token })
}

// The arguments of each command; what the command does is said in the doc comment of its variant
// of `Command`, which is its help.

#[derive(clap::Args, Debug)]
pub(super) struct ApplyArgs {
    #[command(flatten)]
    pub(super) target: ServerArgs,
    /// File(s) to apply.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(super) struct GetArgs {
    #[command(flatten)]
    pub(super) target: ServerArgs,
    /// Kind: infraenv, secret (singular, plural or Kind name).
    kind: String,
    name: Option<String>,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// List across all namespaces.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    #[arg(short = 'o', long, value_enum)]
    output: Option<Output>,
}

/// One object on a server: what `delete` takes, and `patch` besides its patch.
#[derive(clap::Args, Debug)]
pub(super) struct ObjectArgs {
    #[command(flatten)]
    pub(super) target: ServerArgs,
    kind: String,
    name: String,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
}

#[derive(clap::Args, Debug)]
pub(super) struct PatchArgs {
    #[command(flatten)]
    pub(super) object: ObjectArgs,
    /// Patch type: `merge` (JSON merge patch, RFC 7386) or `json` (JSON patch, RFC 6902).
    #[arg(long = "type", default_value = "merge")]
    patch_type: String,
    /// The patch, as JSON.
    #[arg(short = 'p', long = "patch")]
    patch: String,
    /// `status` patches the status subresource (what metal3 writes on a BareMetalHost).
    #[arg(long)]
    subresource: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Json,
    Yaml,
}

/// The HTTP client of the client commands: `token`, if any, on every request as a bearer token, and
/// the certificates of `ca_file` and `ca_der` (a kubeconfig's) trusted besides the system's.
pub(super) fn http_client(
    token: Option<&str>,
    ca_file: Option<&Path>,
    ca_der: &[Vec<u8>],
) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| anyhow::anyhow!("the API token has characters a header cannot carry"))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let mut builder = reqwest::Client::builder().default_headers(headers);
    if let Some(path) = ca_file {
        use anyhow::Context;
        let pem = std::fs::read(path).with_context(|| format!("reading --certificate-authority {}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("--certificate-authority {}: not a PEM bundle", path.display()))?;
        anyhow::ensure!(!certs.is_empty(), "--certificate-authority {}: no certificate in it", path.display());
        builder = builder.tls_certs_merge(certs);
    }
    if !ca_der.is_empty() {
        use anyhow::Context;
        let certs = ca_der
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()
            .context("the kubeconfig's certificate-authority-data")?;
        builder = builder.tls_certs_merge(certs);
    }
    Ok(builder.build()?)
}

/// `apply`: every document of every file created or updated. A document that fails is reported and
/// the others are still applied; the exit code says whether any failed.
pub(super) async fn apply(client: &reqwest::Client, server: &str, args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let ApplyArgs { target: _, files } = args;
    let mut failed = false;
    for file in &files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
        };
        let docs = match parse_documents(&text) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                failed = true;
                continue;
            }
        };
        for (i, doc) in docs.into_iter().enumerate() {
            let label = format!("{} (document {})", file.display(), i + 1);
            match apply_one(client, server, &doc).await {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("error: {label}: {e}");
                    failed = true;
                }
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `get`: one object, or the list of a namespace or of all, as a table, JSON or YAML.
pub(super) async fn get(client: &reqwest::Client, server: &str, args: GetArgs) -> anyhow::Result<ExitCode> {
    let GetArgs { target: _, kind, name, namespace, all_namespaces, output } = args;
    let kind = parse_kind(&kind)?;
    let url = match (&name, all_namespaces) {
        (Some(name), _) => object_url(server, kind, &namespace, name),
        (None, true) => format!("{}{}/{}", server.trim_end_matches('/'), kind.api_prefix(), kind.plural()),
        (None, false) => format!("{}/{}", namespace_url(server, kind, &namespace), kind.plural()),
    };
    let v = call(client.get(&url)).await?;
    match output {
        Some(Output::Json) => println!("{}", serde_json::to_string_pretty(&v)?),
        Some(Output::Yaml) => print!("{}", yaml_serde::to_string(&v)?),
        None => super::table::print_table(kind, &v, name.is_some()),
    }
    Ok(ExitCode::SUCCESS)
}

/// `delete`: one object.
pub(super) async fn delete(client: &reqwest::Client, server: &str, args: ObjectArgs) -> anyhow::Result<ExitCode> {
    let ObjectArgs { target: _, kind, name, namespace } = args;
    let kind = parse_kind(&kind)?;
    call(client.delete(object_url(server, kind, &namespace, &name))).await?;
    println!("{} \"{name}\" deleted", display_kind(kind));
    Ok(ExitCode::SUCCESS)
}

/// `patch`: a JSON merge patch of an object or of its status.
pub(super) async fn patch(client: &reqwest::Client, server: &str, args: PatchArgs) -> anyhow::Result<ExitCode> {
    let PatchArgs { object: ObjectArgs { target: _, kind, name, namespace }, patch_type, patch, subresource } = args;
    let kind = parse_kind(&kind)?;
    let content_type = match patch_type.as_str() {
        "merge" => "application/merge-patch+json",
        "json" => "application/json-patch+json",
        other => anyhow::bail!("--type {other} is not supported; use --type merge or --type json"),
    };
    let body: Value = serde_json::from_str(&patch).map_err(|e| anyhow::anyhow!("the patch is not JSON: {e}"))?;
    let url = match subresource.as_deref() {
        None => object_url(server, kind, &namespace, &name),
        Some("status") => format!("{}/status", object_url(server, kind, &namespace, &name)),
        Some(other) => anyhow::bail!("--subresource {other} is not supported; use --subresource status"),
    };
    call(client.patch(url).header("content-type", content_type).body(body.to_string())).await?;
    println!("{} \"{name}\" patched", display_kind(kind));
    Ok(ExitCode::SUCCESS)
}

fn parse_kind(name: &str) -> anyhow::Result<Kind> {
    Kind::from_cli(name).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown kind {name:?}; known: {}",
            Kind::ALL.iter().map(|k| k.name().to_ascii_lowercase()).collect::<Vec<_>>().join(", ")
        )
    })
}

fn display_kind(kind: Kind) -> String {
    match kind.api_version().split_once('/') {
        Some((group, _)) => format!("{}.{group}", kind.name().to_ascii_lowercase()),
        None => kind.name().to_ascii_lowercase(),
    }
}

fn namespace_url(server: &str, kind: Kind, namespace: &str) -> String {
    if kind.namespaced() {
        format!("{}{}/namespaces/{namespace}", server.trim_end_matches('/'), kind.api_prefix())
    } else {
        format!("{}{}", server.trim_end_matches('/'), kind.api_prefix())
    }
}

fn object_url(server: &str, kind: Kind, namespace: &str, name: &str) -> String {
    format!("{}/{}/{name}", namespace_url(server, kind, namespace), kind.plural())
}

/// Sends a request and returns its JSON body, or the server's error message.
async fn call(req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let resp = req.send().await.map_err(|e| {
        // reqwest's message alone ("error sending request") hides why: a refused connection, an
        // untrusted certificate.
        let mut why = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            why.push_str(": ");
            why.push_str(&s.to_string());
            source = s.source();
        }
        anyhow::anyhow!("cannot reach the bootstream server: {why}")
    })?;
    // The admission's warnings, as kubectl shows them.
    for w in resp.headers().get_all(reqwest::header::WARNING) {
        let text = w.to_str().unwrap_or_default();
        let text = text.strip_prefix("299 - ").unwrap_or(text).trim_matches('"').replace("\\\"", "\"");
        eprintln!("Warning: {text}");
    }
    let status = resp.status();
    let body = resp.bytes().await?;
    let value: Value =
        serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    if status.is_success() {
        Ok(value)
    } else {
        let msg = value.get("message").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| value.to_string());
        anyhow::bail!("{msg}")
    }
}

/// Splits multi-document YAML; empty documents are skipped, as kubectl does.
fn parse_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for de in yaml_serde::Deserializer::from_str(text) {
        let v = Value::deserialize(de)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

async fn apply_one(client: &reqwest::Client, server: &str, doc: &Value) -> anyhow::Result<String> {
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind_name = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let kind = Kind::from_type_meta(api_version, kind_name)?;
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow::anyhow!("metadata.name is required"))?;
    let namespace = doc.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default");
    let before =
        client.get(object_url(server, kind, namespace, name)).send().await.ok().filter(|r| r.status().is_success());
    let before_rv = match before {
        Some(r) => r.json::<Value>().await.ok().and_then(|v| v.pointer("/metadata/resourceVersion").cloned()),
        None => None,
    };
    // Server-side apply under the manager `bootstream`, taking over fields other managers set (as
    // `kubectl apply --server-side --force-conflicts`): the file is what the user wants.
    let url = format!(
        "{}?fieldManager=bootstream&fieldValidation=Strict&force=true",
        object_url(server, kind, namespace, name)
    );
    let stored =
        call(client.patch(url).header("content-type", "application/apply-patch+yaml").body(doc.to_string())).await?;
    let verb = match before_rv {
        None => "created",
        Some(rv) if Some(&rv) == stored.pointer("/metadata/resourceVersion") => "unchanged",
        Some(_) => "configured",
    };
    Ok(format!("{}/{name} {verb}", display_kind(kind)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_serve_writes_names_the_api_its_ca_and_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let ca = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap().cert;
        crate::cli::serve::write_kubeconfig(&path, "https://127.0.0.1:6443", Some(&ca.pem()), "the-token").unwrap();
        let api = read_kubeconfig(&path).unwrap();
        assert_eq!(
            api,
            KubeconfigApi {
                server: "https://127.0.0.1:6443".into(),
                ca_der: Some(vec![ca.der().to_vec()]),
                token: Some("the-token".into())
            }
        );
    }

    #[test]
    fn a_kubeconfig_that_would_run_a_program_or_read_another_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let head = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n";
        for (cluster, user, why) in [
            (
                "{server: 'https://x'}",
                "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}}",
                "exec",
            ),
            ("{server: 'https://x'}", "{tokenFile: /etc/shadow}", "tokenFile"),
            ("{server: 'https://x'}", "{auth-provider: {name: oidc}}", "auth-provider"),
            ("{server: 'https://x'}", "{client-certificate: /c.pem, client-key: /k.pem}", "client-certificate"),
            ("{server: 'https://x'}", "{username: a, password: b}", "username/password"),
            ("{server: 'https://x', certificate-authority: /ca.pem}", "{token: t}", "certificate-authority"),
            ("{server: 'https://x', insecure-skip-tls-verify: true}", "{token: t}", "insecure-skip-tls-verify"),
        ] {
            let path = dir.path().join("kc");
            let text = format!("{head}clusters:\n- name: k\n  cluster: {cluster}\nusers:\n- name: u\n  user: {user}\n");
            std::fs::write(&path, text).unwrap();
            let e = read_kubeconfig(&path).expect_err(why).to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }
}
