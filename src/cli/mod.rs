//! The `bootstream` command line: `serve` runs everything in one process; `apply`, `get` and `delete`
//! talk to a running server's REST API with the same YAML users apply to Kubernetes.
//!
//! This file parses the command line, sets up logging and hands each command to its file, where
//! its flags are defined beside the code that reads them:
//! - `serve.rs`: `serve` (also `serve --kube`, the image server of a cluster) and `controller`,
//!   the services wired together from the flags;
//! - `client.rs`: `apply`, `get`, `delete` and `patch` against a running server's resource API;
//! - `table.rs`: the table `get` prints;
//! - [`simulate`]: `simulate`, a fleet of discovery agents driving the agent API;
//! - [`logwriter`]: the log's writer, one line per event whatever its values hold.

mod client;
pub mod logwriter;
mod serve;
pub mod simulate;
mod table;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "bootstream",
    version,
    about = "Discovery-image server and late-binding host pool for bare-metal fleets"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// API token for apply, get, patch and delete. Default: the contents of --token-file, else the
    /// kubeconfig's token (see --kubeconfig), else the contents of ./bootstream-data/api-token.
    #[arg(long, global = true, env = "BOOTSTREAM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File with the API token, as `serve` makes it in its data directory (DATA_DIR/api-token).
    #[arg(long, global = true, env = "BOOTSTREAM_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// PEM CA bundle to trust, besides the system's and the kubeconfig's, for an https --server.
    #[arg(long, global = true, env = "BOOTSTREAM_CA_FILE", value_name = "PATH")]
    certificate_authority: Option<PathBuf>,
    /// How the log (standard error) is written: `text`, a line per event, or `json`, an object per
    /// line for log collectors. Either way no value can start a line of its own.
    #[arg(long, global = true, env = "BOOTSTREAM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the image server, REST API and controllers in one process, with state in the data directory
    /// (or, with --kube, only the image server, for a Kubernetes cluster's InfraEnvs).
    Serve(serve::ServeCommand),
    /// Run the controllers and the agent API against a Kubernetes cluster (the hub), with host records
    /// in the data directory. One process leads at a time (a coordination.k8s.io Lease).
    Controller(serve::ControllerCommand),
    /// Create or update resources from YAML files (multi-document; `-` reads standard input).
    Apply(client::ApplyArgs),
    /// Show resources.
    Get(client::GetArgs),
    /// Delete a resource.
    Delete(client::ObjectArgs),
    /// Change fields of a resource with a JSON merge patch or a JSON patch, like `kubectl patch`.
    Patch(client::PatchArgs),
    /// Drive the agent API as a fleet of discovery agents would (for load tests and demos).
    Simulate(crate::cli::simulate::SimulateArgs),
    /// Print the CustomResourceDefinitions of all kinds as multi-document YAML, or write them to a
    /// directory, one `<plural>.<group>.yaml` per CRD.
    Crds {
        /// Directory to write the files into (created if missing).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Crds { out } = &cli.command {
        return crds(out.as_deref());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Each event is one line, whatever a value in it holds (see `logwriter`). No colors: they are
    // the same ESC sequences a value could carry, and the writer escapes every one it sees.
    let log = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(false);
    match cli.log_format {
        LogFormat::Text => log.with_writer(crate::cli::logwriter::EscapedLines::new(std::io::stderr)).init(),
        // The JSON formatter escapes ASCII controls itself; the writer escapes the line separators
        // and bidirectional controls it leaves, as JSON escapes.
        LogFormat::Json => log.json().with_writer(crate::cli::logwriter::EscapedLines::json(std::io::stderr)).init(),
    }
    let result = match cli.command {
        Command::Serve(cmd) => {
            serve::raise_open_files_limit();
            serve::private_umask();
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(serve::serve(cmd))
        }
        Command::Controller(cmd) => {
            serve::raise_open_files_limit();
            serve::private_umask();
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(serve::controller(cmd))
        }
        other => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
            let creds = client::Credentials {
                token: cli.token,
                token_file: cli.token_file,
                ca_file: cli.certificate_authority,
            };
            rt.block_on(client_command(other, creds))
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The commands that are clients of a server: on one thread, with an HTTP client that carries the
/// API token (made first, so that a bad token, CA file or kubeconfig fails every one of them alike).
async fn client_command(cmd: Command, creds: client::Credentials) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Apply(args) => {
            let api = client::connect(&args.target, &creds)?;
            client::apply(&api.http, &api.server, args).await
        }
        Command::Get(args) => {
            let api = client::connect(&args.target, &creds)?;
            client::get(&api.http, &api.server, args).await
        }
        Command::Delete(args) => {
            let api = client::connect(&args.target, &creds)?;
            client::delete(&api.http, &api.server, args).await
        }
        Command::Patch(args) => {
            let api = client::connect(&args.object.target, &creds)?;
            client::patch(&api.http, &api.server, args).await
        }
        Command::Simulate(args) => {
            // The InfraEnv is read from the API the kubeconfig names, if there is one; else from
            // --server, as a server without an API listener of its own serves it.
            let kubeconfig = args.kubeconfig.clone().or_else(|| {
                let default = PathBuf::from(client::DEFAULT_KUBECONFIG);
                default.exists().then_some(default)
            });
            let api = match kubeconfig {
                Some(path) => {
                    let target = client::ServerArgs { server: None, kubeconfig: Some(path) };
                    let api = client::connect(&target, &creds)?;
                    simulate::Api { server: api.server, http: api.http, token: api.token }
                }
                None => {
                    let token = crate::auth::client_token(
                        creds.token.as_deref(),
                        creds.token_file.as_deref().unwrap_or(Path::new(client::DEFAULT_TOKEN_FILE)),
                    );
                    let http = client::http_client(token.as_deref(), creds.ca_file.as_deref(), &[])?;
                    simulate::Api { server: args.server.clone(), http, token }
                }
            };
            simulate::run(args, api).await
        }
        Command::Serve(_) | Command::Controller(_) => unreachable!("servers run on their own runtime"),
        Command::Crds { .. } => unreachable!("crds runs before any runtime starts"),
    }
}

/// `bootstream crds`: no server, no runtime; a failure to write is reported like any other error.
fn crds(out: Option<&Path>) -> ExitCode {
    use std::io::Write;
    let result = match out {
        Some(dir) => crate::resources::crds::write_dir(dir).map(|names| {
            for name in names {
                eprintln!("wrote {}", dir.join(name).display());
            }
        }),
        None => std::io::stdout().write_all(crate::resources::crds::all_yaml().as_bytes()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a command line as `bootstream` would, without running it: for checking the arguments
/// the manifests in deploy/ give the containers.
pub fn check_args<I: IntoIterator<Item = String>>(args: I) -> Result<(), clap::Error> {
    Cli::try_parse_from(std::iter::once("bootstream".to_string()).chain(args)).map(|_| ())
}

/// The environment variables `bootstream SUBCOMMAND` reads its settings from.
pub fn env_settings(subcommand: &str) -> Vec<String> {
    use clap::CommandFactory;
    let cli = Cli::command();
    let Some(sub) = cli.get_subcommands().find(|s| s.get_name() == subcommand) else { return Vec::new() };
    sub.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()).collect()
}
