//! The integration tests, in one test binary: each module runs the real `bootstream` binary (or
//! the library's public API) the way a user or a peer does. One binary instead of one per file:
//! each of those linked kube, nmstate and SQLite again, most of a cold test build's time. Modules are
//! grouped by the layer they exercise (`formats`, `content`, `image`, `http`, `api`), then the host
//! lifecycle end to end, the deployment files and the command line; `kubectl` drives the embedded
//! Kubernetes API with the real kubectl, kube-rs and the Python client; `layers` checks `src/`'s layering.

mod common;

mod api;
mod cli;
mod content;
mod deploy;
mod formats;
mod http;
mod image;
mod kubectl;
mod layers;
mod lifecycle;
