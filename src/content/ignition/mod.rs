//! The discovery Ignition config of an InfraEnv (spec-controllers.md §8.2).
//!
//! A host booted from a discovery image runs Ignition once, in the initramfs, with the config
//! this module renders: it starts the assisted discovery agent against bootstream's agent API,
//! and carries the InfraEnv's pull secret, SSH keys, proxy and CA bundles. Then the InfraEnv's
//! Ignition overrides are merged in (first the internal one, then the user's), with Ignition's
//! own merge semantics, so an override can change or replace anything the base config says.
//!
//! The config is built and parsed with ignition-config's typed structs. The working type is the
//! spec 3.2 [`Config`], which can represent every 3.1 config; its `ignition.version` records
//! the version the config declares. The base config declares 3.1.0, like assisted-service's,
//! because RHCOS 4.6 understands nothing newer. Overrides may declare 3.1.0 or 3.2.0 (what
//! assisted-service accepts); the merged config declares the higher of the two versions
//! (see [`merge`]). Output is compact JSON without the `null`s the typed structs emit for
//! unset fields, since every byte counts against the 256 KiB archive limit (spec-controllers.md §8.4).
//!
//! This module does not know the resource model: callers fill a [`DiscoveryInput`].

mod dataurl;
mod merge;
mod validate;

use std::fmt;

use minijinja::{AutoEscape, Environment, UndefinedBehavior, context};
use serde_json::{Map, Value};

pub use dataurl::{DataUrlError, data_url, decode_data_url};

use crate::formats::initrd::{self, InitrdError};

/// An Ignition config in the spec 3.2 structs; `ignition.version` says which spec (3.1.0 or
/// 3.2.0) it declares.
pub type Config = ignition_config::v3_2::Config;

/// Largest Ignition archive (gzip newc holding `config.ign`) bootstream serves: the embed area
/// of RHCOS live ISOs (assisted-service's `IgnitionImageSizePadding`).
pub const IGNITION_ARCHIVE_LIMIT: usize = 262_144;

/// Discovery agent image used when the deployment configures none (assisted-service's
/// `AGENT_DOCKER_IMAGE` default).
pub const DEFAULT_AGENT_IMAGE: &str = "quay.io/edge-infrastructure/assisted-installer-agent:latest";

/// How long systemd waits for `agent.service` to start, including the image pull
/// (assisted-service's `AGENT_TIMEOUT_START` default of 10 minutes).
pub const AGENT_TIMEOUT_START_SECS: u64 = 600;

/// Where the pull secret goes; podman on the host reads it for the agent image and the agent
/// reads it for release images.
pub const PULL_SECRET_PATH: &str = "/root/.docker/config.json";
/// Where the InfraEnv's additional trust bundle goes (RHCOS adds anchors to the trust store
/// at boot).
pub const ADDITIONAL_TRUST_BUNDLE_PATH: &str =
    "/etc/pki/ca-trust/source/anchors/assisted-infraenv-additional-trust-bundle.pem";
/// Where the CA of bootstream's agent API goes; the agent is pointed at it with `--cacert`.
pub const SERVICE_CA_CERT_PATH: &str = "/etc/assisted-service/service-ca-cert.crt";
/// Proxy variables for login shells.
pub const PROFILE_PROXY_PATH: &str = "/etc/profile.d/proxy.sh";
/// Message of the day telling an operator at the console what this host is doing.
pub const MOTD_PATH: &str = "/etc/motd";
/// Pull helper run before the agent starts.
pub const AGENT_PULL_SCRIPT_PATH: &str = "/usr/local/bin/bootstream-agent-pull";
/// SELinux module source compiled and loaded by `selinux.service`.
pub const SELINUX_MODULE_PATH: &str = "/root/bootstream-agent.te";

const AGENT_SERVICE_TEMPLATE: &str = include_str!("../../../templates/ignition/agent.service.j2");
const PROXY_PROFILE_TEMPLATE: &str = include_str!("../../../templates/ignition/proxy.sh.j2");
const SELINUX_SERVICE: &str = include_str!("../../../templates/ignition/selinux.service");
const SELINUX_MODULE: &str = include_str!("../../../templates/ignition/bootstream-agent.te");
const AGENT_PULL_SCRIPT: &str = include_str!("../../../templates/ignition/agent-pull.sh");
const MOTD: &str = include_str!("../../../templates/ignition/motd");

/// Proxy settings of an InfraEnv. Empty strings count as unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Proxy {
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    /// Comma-separated hosts, domains and CIDRs.
    pub no_proxy: Option<String>,
}

/// Everything the discovery config depends on. Optional strings that are empty (or, for the
/// overrides, only whitespace) count as unset.
///
/// `Debug` leaves out the pull secret, the agent token and the overrides (which may embed
/// credentials), so the input can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct DiscoveryInput {
    /// The InfraEnv's UUID, passed to the agent.
    pub infra_env_id: String,
    /// Where the agent reaches bootstream's agent API, e.g. `http://10.0.2.2:8080`.
    pub service_base_url: String,
    /// The `.dockerconfigjson` contents (JSON text).
    pub pull_secret: String,
    /// SSH public keys for user `core`, one per line.
    pub ssh_authorized_key: Option<String>,
    pub proxy: Option<Proxy>,
    /// PEM bundle added to the host's trust store.
    pub additional_trust_bundle: Option<String>,
    /// The user's Ignition config, merged last.
    pub ignition_config_override: Option<String>,
    /// An Ignition config bootstream itself adds (the ironic agent), merged before the user's;
    /// when set, `agent.service` is rendered disabled.
    pub internal_ignition_override: Option<String>,
    /// Container image of the discovery agent.
    pub agent_image: String,
    /// `PULL_SECRET_TOKEN` for the agent, when the agent API requires one.
    pub agent_token: Option<String>,
    /// Passed to the agent as `--insecure`: skip TLS verification of the agent API.
    pub insecure_skip_verify: bool,
    /// CA of the agent API, written to [`SERVICE_CA_CERT_PATH`] and passed as `--cacert`.
    pub ca_cert_pem: Option<String>,
}

impl DiscoveryInput {
    /// An input with the required fields, the default agent image and nothing optional.
    pub fn new(
        infra_env_id: impl Into<String>,
        service_base_url: impl Into<String>,
        pull_secret: impl Into<String>,
    ) -> Self {
        Self {
            infra_env_id: infra_env_id.into(),
            service_base_url: service_base_url.into(),
            pull_secret: pull_secret.into(),
            ssh_authorized_key: None,
            proxy: None,
            additional_trust_bundle: None,
            ignition_config_override: None,
            internal_ignition_override: None,
            agent_image: DEFAULT_AGENT_IMAGE.to_owned(),
            agent_token: None,
            insecure_skip_verify: false,
            ca_cert_pem: None,
        }
    }
}

impl fmt::Debug for DiscoveryInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        /// Shows that a secret is there, and how long it is, but not what it is.
        struct Redacted(Option<usize>);
        impl fmt::Debug for Redacted {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.0 {
                    Some(len) => write!(f, "<redacted, {len} bytes>"),
                    None => f.write_str("None"),
                }
            }
        }
        let redact = |s: &Option<String>| Redacted(s.as_ref().map(String::len));
        f.debug_struct("DiscoveryInput")
            .field("infra_env_id", &self.infra_env_id)
            .field("service_base_url", &self.service_base_url)
            .field("pull_secret", &Redacted(Some(self.pull_secret.len())))
            .field("ssh_authorized_key", &self.ssh_authorized_key)
            .field("proxy", &self.proxy)
            .field("additional_trust_bundle", &self.additional_trust_bundle)
            .field("ignition_config_override", &redact(&self.ignition_config_override))
            .field("internal_ignition_override", &redact(&self.internal_ignition_override))
            .field("agent_image", &self.agent_image)
            .field("agent_token", &redact(&self.agent_token))
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("ca_cert_pem", &self.ca_cert_pem)
            .finish()
    }
}

/// Ignition spec versions bootstream reads and writes.
///
/// ignition-config parses 3.0 to 3.6 but translates none of them, and assisted-service accepts
/// exactly 3.1 and 3.2 (3.0 is obsolete; newer versions would not boot RHCOS 4.6–4.13, whose
/// Ignition stops at 3.2). A 3.1 config is a 3.2 config with a different version string, so
/// both fit the 3.2 structs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    V3_1,
    V3_2,
}

impl SpecVersion {
    pub const fn as_str(self) -> &'static str {
        match self {
            SpecVersion::V3_1 => "3.1.0",
            SpecVersion::V3_2 => "3.2.0",
        }
    }

    /// Exactly `3.1.0` or `3.2.0`, as Ignition compares versions.
    pub fn parse(version: &str) -> Option<Self> {
        match version {
            "3.1.0" => Some(SpecVersion::V3_1),
            "3.2.0" => Some(SpecVersion::V3_2),
            _ => None,
        }
    }

    /// The version `config` declares, if it is one of ours.
    pub fn of(config: &Config) -> Option<Self> {
        config.ignition.version.as_deref().and_then(Self::parse)
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which config an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigOrigin {
    /// An override passed to [`merge_override`] or [`parse_config`].
    Override,
    /// The InfraEnv's `ignitionConfigOverride`.
    UserOverride,
    /// The internal (ironic) override.
    InternalOverride,
    /// The base config rendered from a [`DiscoveryInput`].
    Rendered,
    /// The parent config passed to [`merge`].
    Base,
    /// The result of a merge.
    Merged,
    /// A config passed to [`to_compact_json`].
    Serialized,
}

impl fmt::Display for ConfigOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigOrigin::Override => "ignition config override",
            ConfigOrigin::UserOverride => "ignition config override (ignitionConfigOverride)",
            ConfigOrigin::InternalOverride => "internal ignition config override",
            ConfigOrigin::Rendered => "rendered discovery ignition config",
            ConfigOrigin::Base => "base ignition config",
            ConfigOrigin::Merged => "merged ignition config",
            ConfigOrigin::Serialized => "ignition config",
        })
    }
}

/// One problem at one place of a config, e.g. `storage.files[0].path: path "etc/x" is not
/// absolute`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Location in the config, like `storage.files[0].mode`.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Errors of rendering, parsing, merging and sizing discovery configs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IgnitionError {
    /// A [`DiscoveryInput`] field that cannot go into the config.
    #[error("invalid discovery input {field}: {reason}")]
    InvalidInput { field: &'static str, reason: String },
    /// An override that is not JSON at all.
    #[error("{origin} is not valid JSON")]
    NotJson {
        origin: ConfigOrigin,
        #[source]
        source: serde_json::Error,
    },
    /// JSON, but not an object.
    #[error("{origin} is not a JSON object, as an Ignition config must be")]
    NotAnObject { origin: ConfigOrigin },
    /// No `ignition.version` string.
    #[error("{origin} has no ignition.version string; it must declare 3.1.0 or 3.2.0")]
    MissingVersion { origin: ConfigOrigin },
    /// A version other than 3.1.0 and 3.2.0.
    #[error("{origin} declares Ignition config version {version:?}; supported versions are 3.1.0 and 3.2.0")]
    UnsupportedVersion { origin: ConfigOrigin, version: String },
    /// Valid JSON with a field of the wrong type or a missing required field.
    #[error("{origin} is not a valid Ignition {version} config: {path}: {reason}")]
    InvalidStructure { origin: ConfigOrigin, version: SpecVersion, path: String, reason: String },
    /// Fields the declared spec version does not have (typos, or 3.2 fields in a 3.1 config);
    /// Ignition would ignore them silently.
    #[error("{origin} has fields that Ignition spec {version} does not define: {}", .paths.join(", "))]
    UnknownFields { origin: ConfigOrigin, version: SpecVersion, paths: Vec<String> },
    /// Semantic errors Ignition would refuse the config for.
    #[error("{origin} is invalid: {}", format_problems(.problems))]
    Invalid { origin: ConfigOrigin, problems: Vec<FieldProblem> },
    /// A bug in a bundled template.
    #[error("rendering template {template}")]
    Template {
        template: &'static str,
        #[source]
        source: minijinja::Error,
    },
    /// Serializing a config failed.
    #[error("serializing the ignition config")]
    Serialize(#[source] serde_json::Error),
    /// Over the 256 KiB limit (assisted-service's message, verbatim).
    #[error(
        "The ignition archive size ({} KiB) is over the maximum allowable size (256 KiB)",
        .archive_len / 1024
    )]
    ArchiveTooLarge { archive_len: usize },
    /// Larger than the Ignition embed area of the base image it is meant for.
    #[error(
        "The ignition archive size ({} KiB, {archive_len} bytes) is over the maximum allowable size for this image \
         ({} KiB, {area_len} bytes: the size of its Ignition embed area)",
        .archive_len / 1024,
        .area_len / 1024
    )]
    ArchiveExceedsEmbedArea { archive_len: usize, area_len: u64 },
    /// Building the archive failed.
    #[error("building the ignition archive")]
    Archive(#[from] InitrdError),
}

fn format_problems(problems: &[FieldProblem]) -> String {
    const SHOWN: usize = 10;
    let mut out = problems.iter().take(SHOWN).map(ToString::to_string).collect::<Vec<_>>().join("; ");
    if problems.len() > SHOWN {
        out.push_str(&format!("; and {} more", problems.len() - SHOWN));
    }
    out
}

/// Renders the discovery config of an InfraEnv, overrides merged, as compact JSON.
pub fn render_discovery_ignition(input: &DiscoveryInput) -> Result<String, IgnitionError> {
    to_compact_json(&render_discovery_config(input)?)
}

/// [`render_discovery_ignition`] without the serialization, for callers that add more.
pub fn render_discovery_config(input: &DiscoveryInput) -> Result<Config, IgnitionError> {
    let clean = CleanInput::new(input)?;
    let mut config = base_config(&clean)?;
    check(&config, ConfigOrigin::Rendered)?;
    if let Some(json) = non_blank(&input.internal_ignition_override) {
        config = merge_override_from(&config, json, ConfigOrigin::InternalOverride)?;
    }
    if let Some(json) = non_blank(&input.ignition_config_override) {
        config = merge_override_from(&config, json, ConfigOrigin::UserOverride)?;
    }
    Ok(config)
}

/// Parses `override_json` and merges it into `base` (see [`merge`]).
pub fn merge_override(base: &Config, override_json: &str) -> Result<Config, IgnitionError> {
    merge_override_from(base, override_json, ConfigOrigin::Override)
}

fn merge_override_from(base: &Config, json: &str, origin: ConfigOrigin) -> Result<Config, IgnitionError> {
    let child = parse_config_from(json, origin)?;
    merge(base, &child)
}

/// Merges `child` into `parent` with Ignition's parent/child semantics, then validates the
/// result.
///
/// Objects merge recursively and the child's scalars win; `storage.files`, `directories` and
/// `links` merge by path (sharing one key space), `systemd.units` and their `dropins`,
/// `passwd.users` and `groups` by name, disks and filesystems by device, CA and merge
/// resources by source, partitions by number or label; a file's `append` list and filesystem
/// options concatenate, string lists (`sshAuthorizedKeys`, `noProxy`, …) are unions, and a
/// child HTTP header without a value deletes the parent's. Details: the `merge` submodule.
///
/// The result declares the higher of the two versions. (Ignition's merge takes the child's
/// version, which lets a 3.1 user override relabel a config holding 3.2 fields from the
/// internal override as 3.1, whose parser would then drop them.)
pub fn merge(parent: &Config, child: &Config) -> Result<Config, IgnitionError> {
    let version = match (SpecVersion::of(parent), SpecVersion::of(child)) {
        (Some(p), Some(c)) => p.max(c),
        (None, _) => return Err(unsupported(parent, ConfigOrigin::Base)),
        (_, None) => return Err(unsupported(child, ConfigOrigin::Override)),
    };
    let mut merged = merge::merge_configs(&to_clean_map(parent)?, &to_clean_map(child)?);
    if let Some(Value::Object(ignition)) = merged.get_mut("ignition") {
        ignition.insert("version".into(), Value::String(version.as_str().into()));
    }
    let config: Config = serde_json::from_value(Value::Object(merged)).map_err(IgnitionError::Serialize)?;
    check(&config, ConfigOrigin::Merged)?;
    Ok(config)
}

fn unsupported(config: &Config, origin: ConfigOrigin) -> IgnitionError {
    match &config.ignition.version {
        Some(v) => IgnitionError::UnsupportedVersion { origin, version: v.clone() },
        None => IgnitionError::MissingVersion { origin },
    }
}

/// Parses and validates an Ignition config declaring spec 3.1.0 or 3.2.0.
///
/// Unknown fields are errors rather than the warnings Ignition makes of them: in an override
/// they are almost always a typo (or a 3.2 field in a 3.1 config) whose effect would silently
/// be lost on the host.
pub fn parse_config(json: &str) -> Result<Config, IgnitionError> {
    parse_config_from(json, ConfigOrigin::Override)
}

fn parse_config_from(json: &str, origin: ConfigOrigin) -> Result<Config, IgnitionError> {
    let value: Value = serde_json::from_str(json).map_err(|source| IgnitionError::NotJson { origin, source })?;
    let Some(object) = value.as_object() else {
        return Err(IgnitionError::NotAnObject { origin });
    };
    let version = match object.get("ignition").and_then(|i| i.get("version")) {
        Some(Value::String(v)) => match SpecVersion::parse(v) {
            Some(version) => version,
            None => {
                return Err(IgnitionError::UnsupportedVersion { origin, version: v.clone() });
            }
        },
        _ => return Err(IgnitionError::MissingVersion { origin }),
    };
    let config = match ignition_config::Config::parse_str(json) {
        Ok((parsed, warnings)) => {
            if !warnings.is_empty() {
                let paths = warnings.iter().map(|w| warning_path(&w.to_string())).collect();
                return Err(IgnitionError::UnknownFields { origin, version, paths });
            }
            match parsed {
                ignition_config::Config::V3_2(config) => config,
                ignition_config::Config::V3_1(config) => upgrade_3_1(&config)?,
                // parse_str dispatches on the version checked above.
                _ => {
                    return Err(IgnitionError::UnsupportedVersion { origin, version: version.to_string() });
                }
            }
        }
        Err(error) => return Err(structure_error(json, version, origin, &error)),
    };
    check(&config, origin)?;
    Ok(config)
}

/// Locates a type error with serde_path_to_error (ignition-config reports only line and column).
fn structure_error(
    json: &str,
    version: SpecVersion,
    origin: ConfigOrigin,
    error: &ignition_config::Error,
) -> IgnitionError {
    fn locate<T: serde::de::DeserializeOwned>(json: &str) -> Option<(String, String)> {
        let mut de = serde_json::Deserializer::from_str(json);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(_) => None,
            Err(e) => Some((e.path().to_string(), e.inner().to_string())),
        }
    }
    let located = match version {
        SpecVersion::V3_1 => locate::<ignition_config::v3_1::Config>(json),
        SpecVersion::V3_2 => locate::<ignition_config::v3_2::Config>(json),
    };
    let (path, reason) = located.unwrap_or_else(|| ("$".into(), error.to_string()));
    IgnitionError::InvalidStructure { origin, version, path, reason }
}

/// `unused key: $.storage.files.0.foo` → `storage.files[0].foo`.
fn warning_path(warning: &str) -> String {
    let raw = warning.strip_prefix("unused key: ").unwrap_or(warning);
    let mut out = String::new();
    for segment in raw.strip_prefix("$.").unwrap_or(raw).split('.') {
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(segment);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// A 3.1 config in the 3.2 structs (3.2 only added fields), still declaring 3.1.0.
fn upgrade_3_1(config: &ignition_config::v3_1::Config) -> Result<Config, IgnitionError> {
    let value = serde_json::to_value(config).map_err(IgnitionError::Serialize)?;
    serde_json::from_value(strip_nulls(value)).map_err(IgnitionError::Serialize)
}

fn check(config: &Config, origin: ConfigOrigin) -> Result<(), IgnitionError> {
    let problems = validate::validate(config);
    if problems.is_empty() { Ok(()) } else { Err(IgnitionError::Invalid { origin, problems }) }
}

/// Serializes `config` as compact JSON without `null`s or empty objects, after checking that
/// it is valid and parses back as the spec version it declares.
pub fn to_compact_json(config: &Config) -> Result<String, IgnitionError> {
    let Some(version) = SpecVersion::of(config) else {
        return Err(unsupported(config, ConfigOrigin::Serialized));
    };
    check(config, ConfigOrigin::Serialized)?;
    let json = serde_json::to_string(&Value::Object(to_clean_map(config)?)).map_err(IgnitionError::Serialize)?;
    // A 3.1-declared config must not carry 3.2-only fields: Ignition 3.1 would drop them.
    match ignition_config::Config::parse_str(&json) {
        Ok((_, warnings)) if warnings.is_empty() => Ok(json),
        Ok((_, warnings)) => Err(IgnitionError::UnknownFields {
            origin: ConfigOrigin::Serialized,
            version,
            paths: warnings.iter().map(|w| warning_path(&w.to_string())).collect(),
        }),
        Err(error) => Err(structure_error(&json, version, ConfigOrigin::Serialized, &error)),
    }
}

/// `config` as a JSON object without `null`s and empty objects.
fn to_clean_map(config: &Config) -> Result<Map<String, Value>, IgnitionError> {
    match strip_nulls(serde_json::to_value(config).map_err(IgnitionError::Serialize)?) {
        Value::Object(map) => Ok(map),
        _ => Ok(Map::new()),
    }
}

/// Drops `null` members and members that are empty objects, recursively. For Ignition both
/// mean "unset" (Go's zero values), so the config means the same, only shorter.
fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter_map(|(k, v)| match strip_nulls(v) {
                    Value::Null => None,
                    Value::Object(m) if m.is_empty() => None,
                    v => Some((k, v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// Refuses archives over [`IGNITION_ARCHIVE_LIMIT`] (spec-controllers.md §8.4, same message) or
/// over the embed area of the image they are meant for (`area_len`, from the image catalog),
/// which would otherwise fail only when the ISO is streamed.
pub fn check_archive_size(archive_len: usize, area_len: u64) -> Result<(), IgnitionError> {
    if archive_len > IGNITION_ARCHIVE_LIMIT {
        return Err(IgnitionError::ArchiveTooLarge { archive_len });
    }
    if archive_len as u64 > area_len {
        return Err(IgnitionError::ArchiveExceedsEmbedArea { archive_len, area_len });
    }
    Ok(())
}

/// [`initrd::ignition_archive`] of `config`, checked with [`check_archive_size`], for callers
/// that want a single fallible step.
pub fn sized_ignition_archive(config: &str, area_len: u64) -> Result<Vec<u8>, IgnitionError> {
    let archive = initrd::try_ignition_archive(config.as_bytes())?;
    check_archive_size(archive.len(), area_len)?;
    Ok(archive)
}

fn non_blank(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.trim().is_empty())
}

/// [`DiscoveryInput`] checked and normalized for embedding into units and scripts.
struct CleanInput<'a> {
    infra_env_id: &'a str,
    service_base_url: &'a str,
    pull_secret: &'a str,
    ssh_keys: Vec<String>,
    http_proxy: Option<&'a str>,
    https_proxy: Option<&'a str>,
    /// Normalized (items trimmed, empties dropped); only set when a proxy is.
    no_proxy: Vec<String>,
    trust_bundle: Option<&'a str>,
    agent_image: &'a str,
    agent_token: Option<&'a str>,
    insecure: bool,
    ca_cert: Option<&'a str>,
    agent_enabled: bool,
}

impl<'a> CleanInput<'a> {
    fn new(input: &'a DiscoveryInput) -> Result<Self, IgnitionError> {
        let invalid = |field, reason: String| IgnitionError::InvalidInput { field, reason };

        let infra_env_id = input.infra_env_id.trim();
        if !is_uuid(infra_env_id) {
            return Err(invalid("infra_env_id", format!("{:?} is not a UUID", input.infra_env_id)));
        }
        let service_base_url = input.service_base_url.trim();
        check_url("service_base_url", service_base_url)?;
        let pull_secret = input.pull_secret.as_str();
        if !serde_json::from_str::<Value>(pull_secret).is_ok_and(|v| v.is_object()) {
            return Err(invalid("pull_secret", "must be a JSON object (.dockerconfigjson contents)".into()));
        }
        let ssh_keys = input
            .ssh_authorized_key
            .iter()
            .flat_map(|keys| keys.split('\n'))
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect();

        let proxy = input.proxy.as_ref();
        let pick = |get: fn(&Proxy) -> &Option<String>| {
            proxy.and_then(|p| get(p).as_deref()).map(str::trim).filter(|s| !s.is_empty())
        };
        let http_proxy = pick(|p| &p.http_proxy);
        let https_proxy = pick(|p| &p.https_proxy);
        if let Some(url) = http_proxy {
            check_url("proxy.http_proxy", url)?;
        }
        if let Some(url) = https_proxy {
            check_url("proxy.https_proxy", url)?;
        }
        let mut no_proxy = Vec::new();
        if http_proxy.is_some() || https_proxy.is_some() {
            for item in pick(|p| &p.no_proxy).into_iter().flat_map(|s| s.split(',')) {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                if !is_plain_token(item) {
                    return Err(invalid(
                        "proxy.no_proxy",
                        format!("entry {item:?} contains whitespace, quotes, backslashes or control characters"),
                    ));
                }
                no_proxy.push(item.to_owned());
            }
        }

        let agent_image = input.agent_image.trim();
        if agent_image.is_empty()
            || !agent_image.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !agent_image.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
        {
            return Err(invalid("agent_image", format!("{:?} is not a container image reference", input.agent_image)));
        }
        let agent_token = input.agent_token.as_deref().map(str::trim).filter(|t| !t.is_empty());
        if agent_token.is_some_and(|t| !is_plain_token(t)) {
            return Err(invalid(
                "agent_token",
                "contains whitespace, quotes, backslashes or control characters".into(),
            ));
        }
        Ok(Self {
            infra_env_id,
            service_base_url,
            pull_secret,
            ssh_keys,
            http_proxy,
            https_proxy,
            no_proxy,
            trust_bundle: non_blank(&input.additional_trust_bundle),
            agent_image,
            agent_token,
            insecure: input.insecure_skip_verify,
            ca_cert: non_blank(&input.ca_cert_pem),
            agent_enabled: non_blank(&input.internal_ignition_override).is_none(),
        })
    }

    fn proxied(&self) -> bool {
        self.http_proxy.is_some() || self.https_proxy.is_some()
    }
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Printable ASCII without whitespace, quotes, backticks or backslashes: safe as one word in a
/// unit file and inside single quotes in a shell script.
fn is_plain_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'`' | b'\\'))
}

fn check_url(field: &'static str, url: &str) -> Result<(), IgnitionError> {
    let lower = url.to_ascii_lowercase();
    let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
    let host_ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'));
    if !host_ok || !is_plain_token(url) {
        return Err(IgnitionError::InvalidInput {
            field,
            reason: format!("{url:?} is not an http(s) URL without whitespace, quotes or backslashes"),
        });
    }
    Ok(())
}

/// A value for `Environment=`: systemd expands `%` specifiers there.
fn unit_env(value: &str) -> String {
    value.replace('%', "%%")
}

/// A word of an `Exec*=` line: systemd expands `%` specifiers and `$` variables there.
fn unit_exec(value: &str) -> String {
    value.replace('%', "%%").replace('$', "$$")
}

fn template_env() -> Result<Environment<'static>, IgnitionError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .map_err(|source| IgnitionError::Template { template: "(syntax)", source })?;
    env.set_syntax(syntax);
    Ok(env)
}

fn render(template: &'static str, source: &'static str, ctx: minijinja::Value) -> Result<String, IgnitionError> {
    let fail = |source| IgnitionError::Template { template, source };
    let env = template_env()?;
    env.template_from_named_str(template, source).map_err(fail)?.render(ctx).map_err(fail)
}

fn agent_service(input: &CleanInput<'_>) -> Result<String, IgnitionError> {
    let mut environment = Vec::new();
    let mut set = |name: &str, value: &str| environment.push(format!("{name}={}", unit_env(value)));
    if let Some(p) = input.http_proxy {
        set("HTTP_PROXY", p);
        set("http_proxy", p);
    }
    if let Some(p) = input.https_proxy {
        set("HTTPS_PROXY", p);
        set("https_proxy", p);
    }
    if !input.no_proxy.is_empty() {
        let joined = input.no_proxy.join(",");
        set("NO_PROXY", &joined);
        set("no_proxy", &joined);
    }
    if let Some(token) = input.agent_token {
        set("PULL_SECRET_TOKEN", token);
    }
    render(
        "agent.service",
        AGENT_SERVICE_TEMPLATE,
        context! {
            timeout_start_sec => AGENT_TIMEOUT_START_SECS,
            environment => environment,
            agent_image => unit_exec(input.agent_image),
            service_base_url => unit_exec(input.service_base_url),
            infra_env_id => input.infra_env_id,
            insecure => input.insecure.to_string(),
            cacert_path => if input.ca_cert.is_some() { SERVICE_CA_CERT_PATH } else { "" },
        },
    )
}

fn proxy_profile(input: &CleanInput<'_>) -> Result<String, IgnitionError> {
    render(
        "proxy.sh",
        PROXY_PROFILE_TEMPLATE,
        context! {
            http_proxy => input.http_proxy.unwrap_or(""),
            https_proxy => input.https_proxy.unwrap_or(""),
            no_proxy => input.no_proxy.join(","),
        },
    )
}

fn file(path: &str, mode: i64, contents: &[u8]) -> ignition_config::v3_2::File {
    use ignition_config::v3_2::{File, Resource};
    let mut file = File::new(path.to_owned());
    file.mode = Some(mode);
    file.overwrite = Some(true);
    file.contents = Some(Resource { source: Some(data_url(contents)), ..Resource::default() });
    file
}

fn unit(name: &str, enabled: bool, contents: String) -> ignition_config::v3_2::Unit {
    let mut unit = ignition_config::v3_2::Unit::new(name.to_owned());
    unit.enabled = Some(enabled);
    unit.contents = Some(contents);
    unit
}

/// The discovery config before overrides, declaring spec 3.1.0.
fn base_config(input: &CleanInput<'_>) -> Result<Config, IgnitionError> {
    use ignition_config::v3_2::{Passwd, Storage, Systemd, User};

    let mut config = Config::default();
    config.ignition.version = Some(SpecVersion::V3_1.as_str().to_owned());
    if input.proxied() {
        // Ignition itself fetches remote resources of overrides through the proxy.
        config.ignition.proxy = Some(ignition_config::v3_2::Proxy {
            http_proxy: input.http_proxy.map(str::to_owned),
            https_proxy: input.https_proxy.map(str::to_owned),
            no_proxy: (!input.no_proxy.is_empty()).then(|| input.no_proxy.iter().cloned().map(Some).collect()),
        });
    }
    if !input.ssh_keys.is_empty() {
        let mut core = User::new("core".to_owned());
        // Key-only logins: "!" locks the password.
        core.password_hash = Some("!".to_owned());
        core.groups = Some(vec!["sudo".to_owned()]);
        core.ssh_authorized_keys = Some(input.ssh_keys.clone());
        config.passwd = Some(Passwd { users: Some(vec![core]), groups: None });
    }

    config.systemd = Some(Systemd {
        units: Some(vec![
            unit("agent.service", input.agent_enabled, agent_service(input)?),
            // The agent's NTP check runs chronyc in a privileged container; without this
            // module SELinux blocks chronyd's replies and the host fails its NTP validation.
            unit("selinux.service", true, SELINUX_SERVICE.to_owned()),
        ]),
    });

    let mut files = vec![
        file(AGENT_PULL_SCRIPT_PATH, 0o755, AGENT_PULL_SCRIPT.as_bytes()),
        file(MOTD_PATH, 0o644, MOTD.as_bytes()),
        // 0644 as assisted-service writes it; the live system has no other users.
        file(PULL_SECRET_PATH, 0o644, input.pull_secret.as_bytes()),
        file(SELINUX_MODULE_PATH, 0o644, SELINUX_MODULE.as_bytes()),
    ];
    if let Some(bundle) = input.trust_bundle {
        files.push(file(ADDITIONAL_TRUST_BUNDLE_PATH, 0o644, bundle.as_bytes()));
    }
    if let Some(ca) = input.ca_cert {
        files.push(file(SERVICE_CA_CERT_PATH, 0o644, ca.as_bytes()));
    }
    if input.proxied() {
        // assisted-service writes mode 644 *decimal* here (a typo for 0o644); this is 0o644.
        files.push(file(PROFILE_PROXY_PATH, 0o644, proxy_profile(input)?.as_bytes()));
    }
    config.storage = Some(Storage { files: Some(files), ..Storage::default() });
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6b2a5b39-53d3-4a6e-8c47-2d1a4f6b8b11";

    fn input() -> DiscoveryInput {
        DiscoveryInput::new(ID, "http://10.0.2.2:8080", r#"{"auths":{}}"#)
    }

    #[test]
    fn agent_unit_text() {
        let mut i = input();
        i.proxy = Some(Proxy {
            http_proxy: Some("http://user:p%40ss@proxy:3128".into()),
            https_proxy: None,
            no_proxy: Some(" .cluster.local, ,10.0.0.0/8".into()),
        });
        i.agent_token = Some("tok".into());
        i.ca_cert_pem = Some("PEM".into());
        let clean = CleanInput::new(&i).unwrap();
        let text = agent_service(&clean).unwrap();
        assert!(text.starts_with("[Unit]\n"), "{text}");
        assert!(text.contains("\nEnvironment=HTTP_PROXY=http://user:p%%40ss@proxy:3128\n"), "{text}");
        assert!(text.contains("\nEnvironment=no_proxy=.cluster.local,10.0.0.0/8\n"), "{text}");
        assert!(text.contains("\nEnvironment=PULL_SECRET_TOKEN=tok\n"), "{text}");
        assert!(!text.contains("HTTPS_PROXY"), "{text}");
        assert!(
            text.contains(&format!(
                "\nExecStart=/usr/local/bin/agent --url http://10.0.2.2:8080 --infra-env-id {ID} \
                 --agent-version {DEFAULT_AGENT_IMAGE} --insecure=false --cacert {SERVICE_CA_CERT_PATH}\n\n[Install]\n"
            )),
            "{text}"
        );
        assert!(text.ends_with("WantedBy=multi-user.target\n"), "{text}");
    }

    #[test]
    fn profile_text() {
        let mut i = input();
        i.proxy =
            Some(Proxy { http_proxy: None, https_proxy: Some("https://p:1".into()), no_proxy: Some("a,b".into()) });
        let text = proxy_profile(&CleanInput::new(&i).unwrap()).unwrap();
        assert!(!text.contains("HTTP_PROXY"), "{text}");
        assert!(
            text.ends_with("export HTTPS_PROXY='https://p:1'\nexport https_proxy='https://p:1'\nexport NO_PROXY='a,b'\nexport no_proxy='a,b'\n"),
            "{text}"
        );
    }

    #[test]
    fn bad_inputs() {
        type Mutation = fn(&mut DiscoveryInput);
        let cases: [(Mutation, &str); 7] = [
            (|i| i.infra_env_id = "nope".into(), "infra_env_id"),
            (|i| i.service_base_url = "10.0.0.1:8080".into(), "service_base_url"),
            (|i| i.service_base_url = "http://a\nExecStart=/bin/evil".into(), "service_base_url"),
            (|i| i.pull_secret = "not json".into(), "pull_secret"),
            (|i| i.agent_image = "img; rm -rf /".into(), "agent_image"),
            (
                |i| i.proxy = Some(Proxy { http_proxy: Some("socks5://p".into()), ..Proxy::default() }),
                "proxy.http_proxy",
            ),
            (|i| i.agent_token = Some("a b".into()), "agent_token"),
        ];
        for (mutate, field) in cases {
            let mut i = input();
            mutate(&mut i);
            match render_discovery_ignition(&i) {
                Err(IgnitionError::InvalidInput { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let mut i = input();
        i.agent_token = Some("sekrit-token".into());
        i.ignition_config_override = Some(r#"{"password":"hunter2"}"#.into());
        let shown = format!("{i:?}");
        assert!(!shown.contains("auths") && !shown.contains("sekrit") && !shown.contains("hunter2"), "{shown}");
        assert!(shown.contains(ID) && shown.contains("<redacted, 12 bytes>"), "{shown}");
    }

    #[test]
    fn warning_paths() {
        assert_eq!(warning_path("unused key: $.storage.files.0.foo"), "storage.files[0].foo");
        assert_eq!(warning_path("unused key: $.bogus"), "bogus");
    }
}
