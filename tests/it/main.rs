//! The integration tests, in one test binary: each module runs the real `bootstream` binary (or
//! the library's public API) the way a user or a peer does. One binary instead of one per file:
//! each of those linked kube, nmstate and SQLite again, most of a cold test build's time.

mod common;

mod api_auth;
mod bare_metal;
mod boot;
mod crds;
mod deploy;
mod faults;
mod fixture_isos;
mod hostile_http;
mod hostile_inputs;
mod http_semantics;
mod ignition;
mod image_auth;
mod image_variants;
mod iso9660_fixtures;
mod kubernetes;
mod late_binding;
mod layers;
mod limits;
mod load;
mod log_lines;
mod minimal_iso;
mod miniso;
mod os_image_download;
mod remaster;
mod sample_iso;
mod serve_sample;
mod static_network;
mod staticnet;
mod tenant_isolation;
mod tls;
