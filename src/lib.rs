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
