//! `apply`, `get`, `delete` and `patch`: a kubectl-like client of a running server's resource API
//! (`/apis/...`, `/api/v1/...`), sending the same YAML users apply to Kubernetes. The API token
//! goes on every request as a bearer token.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;
use serde::Deserialize;
use serde_json::Value;

use crate::resources::Kind;

const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

// The arguments of each command; what the command does is said in the doc comment of its variant
// of `Command`, which is its help.

#[derive(clap::Args, Debug)]
pub(super) struct ApplyArgs {
    #[arg(long, env = "BOOTSTREAM_SERVER", default_value = DEFAULT_SERVER)]
    server: String,
    /// File(s) to apply.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(super) struct GetArgs {
    #[arg(long, env = "BOOTSTREAM_SERVER", default_value = DEFAULT_SERVER)]
    server: String,
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
    #[arg(long, env = "BOOTSTREAM_SERVER", default_value = DEFAULT_SERVER)]
    server: String,
    kind: String,
    name: String,
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
}

#[derive(clap::Args, Debug)]
pub(super) struct PatchArgs {
    #[command(flatten)]
    object: ObjectArgs,
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
/// the certificates of `ca_file` trusted besides the system's.
pub(super) fn http_client(token: Option<&str>, ca_file: Option<&Path>) -> anyhow::Result<reqwest::Client> {
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
    Ok(builder.build()?)
}

/// `apply`: every document of every file created or updated. A document that fails is reported and
/// the others are still applied; the exit code says whether any failed.
pub(super) async fn apply(client: &reqwest::Client, args: ApplyArgs) -> anyhow::Result<ExitCode> {
    let ApplyArgs { server, files } = args;
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
            match apply_one(client, &server, &doc).await {
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
pub(super) async fn get(client: &reqwest::Client, args: GetArgs) -> anyhow::Result<ExitCode> {
    let GetArgs { server, kind, name, namespace, all_namespaces, output } = args;
    let kind = parse_kind(&kind)?;
    let url = match (&name, all_namespaces) {
        (Some(name), _) => object_url(&server, kind, &namespace, name),
        (None, true) => format!("{}{}/{}", server.trim_end_matches('/'), kind.api_prefix(), kind.plural()),
        (None, false) => format!("{}/{}", namespace_url(&server, kind, &namespace), kind.plural()),
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
pub(super) async fn delete(client: &reqwest::Client, args: ObjectArgs) -> anyhow::Result<ExitCode> {
    let ObjectArgs { server, kind, name, namespace } = args;
    let kind = parse_kind(&kind)?;
    call(client.delete(object_url(&server, kind, &namespace, &name))).await?;
    println!("{} \"{name}\" deleted", display_kind(kind));
    Ok(ExitCode::SUCCESS)
}

/// `patch`: a JSON merge patch of an object or of its status.
pub(super) async fn patch(client: &reqwest::Client, args: PatchArgs) -> anyhow::Result<ExitCode> {
    let PatchArgs { object: ObjectArgs { server, kind, name, namespace }, patch_type, patch, subresource } = args;
    let kind = parse_kind(&kind)?;
    let content_type = match patch_type.as_str() {
        "merge" => "application/merge-patch+json",
        "json" => "application/json-patch+json",
        other => anyhow::bail!("--type {other} is not supported; use --type merge or --type json"),
    };
    let body: Value = serde_json::from_str(&patch).map_err(|e| anyhow::anyhow!("the patch is not JSON: {e}"))?;
    let url = match subresource.as_deref() {
        None => object_url(&server, kind, &namespace, &name),
        Some("status") => format!("{}/status", object_url(&server, kind, &namespace, &name)),
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
