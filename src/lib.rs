//! bootstream: a discovery-image server and late-binding host pool for bare-metal fleets.
//!
//! Module map (formats at the bottom, serving in the middle, control on top):
//! - [`iso9660`], [`liveiso`], [`kargs`], [`initrd`]: byte formats of CoreOS live images.
//! - [`ignition`]: the per-InfraEnv discovery Ignition config.
//! - [`sample`]: the small offline sample live ISO `serve` generates when no image is configured.
//! - [`catalog`]: base OS images per (version, arch), loaded, validated and fingerprinted.
//! - [`plan`], [`image`]: a response as an ordered list of byte segments, and how each artifact's plan is made.
//! - [`http`]: the HTTP server (zero-copy fast path for downloads, hyper for the rest) and HTTP semantics.
//! - [`resources`], [`store`], [`controllers`], [`api`]: the InfraEnv resource model, its SQLite store,
//!   the reconcilers and the REST API.
//! - [`cli`]: the `bootstream` command line; [`logwriter`]: its log, one line per event.

pub mod agentapi;
pub mod api;
pub mod auth;
pub mod backend;
pub mod catalog;
pub mod cli;
pub mod controllers;
pub mod fake_apiserver;
pub mod hostlogs;
pub mod hosts;
pub mod http;
pub mod ignition;
pub mod image;
pub mod initrd;
pub mod ironic;
pub mod iso9660;
pub mod kargs;
pub mod keylocks;
pub mod liveiso;
pub mod logwriter;
pub mod metrics;
pub mod miniso;
pub mod plan;
pub mod remaster;
pub mod resources;
pub mod sample;
pub mod simulate;
pub mod spoke;
pub mod staticnet;
pub mod store;
pub mod urlsign;

/// The compatibility corpus for unit tests (upstream fixture ISOs, the assisted CRDs and example
/// CRs): `$BOOTSTREAM_COMPAT_DIR`, by default `../shared` beside the repository, as the integration
/// tests find it (`tests/it/common`). Panics naming the setting when it is absent.
#[cfg(test)]
pub(crate) fn compat_path(rel: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("BOOTSTREAM_COMPAT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    assert!(
        dir.join("fixtures").is_dir(),
        "the compatibility corpus is not at {} (no fixtures/ there): set BOOTSTREAM_COMPAT_DIR to the folder that \
         holds its fixtures/ and docs/ (CI provides it as ../shared beside the repository)",
        dir.display()
    );
    dir.join(rel)
}
