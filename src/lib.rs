//! bootstream: a discovery-image server and late-binding host pool for bare-metal fleets.
//!
//! Layers, lowest first; a module uses only the layers below it (checked by `tests/it/layers.rs`):
//! - [`keylocks`]: per-key async locks, and the crate's one policy for poisoned `std::sync` locks
//!   ([`keylocks::Locked`]), which every layer above follows.
//! - [`errors`], [`plan`], [`auth`]: the bottom. How errors are shown (each with its
//!   chain of causes, [`errors::chain`]). A plan is a response or a file as an ordered list
//!   of byte segments (ranges of immutable base files, small in-memory parts); the formats read and
//!   write images through plans, so it sits below them. The keys that sign agent
//!   tokens and image URLs.
//! - [`formats`]: byte formats of CoreOS live images (ISO 9660, embed areas, initrds, minimal ISO).
//! - [`hosts`]: the host record, its state machine as a table, agent steps and validations. Pure.
//! - [`resources`]: the Kubernetes kinds (InfraEnv, Agent, ClusterDeployment, BareMetalHost, ...).
//! - [`content`]: what goes into an InfraEnv's image: discovery Ignition, static-network ramdisk,
//!   ironic agent config.
//! - [`store`]: where resources live, behind the [`store::Store`] trait (SQLite or Kubernetes).
//! - [`image`]: base images ([`image::catalog`]) and each artifact's plan for an InfraEnv, cached
//!   by content hash.
//! - [`http`]: the HTTP server (zero-copy fast path for downloads, hyper for the rest) and HTTP semantics.
//! - [`pool`]: the host pool: host records in the store, changed by what agents report.
//! - [`controllers`]: the reconcilers (InfraEnv, Agent, cluster, BareMetalHost, PreprovisioningImage).
//! - [`api`]: the HTTP routes: image downloads, the agent API, the resource API, logs, metrics.
//! - [`cli`]: the `bootstream` command line, the agent simulator, the log writer.
//! - `testkit` (tests only): Kubernetes API servers playing a hub and an installed cluster.
//!
//! docs/design.md explains the design: the layers (§1), where each byte of an image comes from (§2), serving (§3),
//! where a host's state changes (§4), binding, deletion and reclaim (§5), metal3 (§6), stores and the controller
//! runtime (§7).

pub mod api;
pub mod auth;
pub mod cli;
pub mod content;
pub mod controllers;
pub mod errors;
pub mod formats;
pub mod hosts;
pub mod http;
pub mod image;
pub mod keylocks;
pub mod plan;
pub mod pool;
pub mod resources;
pub mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

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
