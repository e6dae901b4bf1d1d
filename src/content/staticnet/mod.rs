//! Static network configuration from NMStateConfigs: validation, NetworkManager keyfiles and the
//! static-network ramdisk appended to the live initrd (spec-controllers.md §3.5, §8.3; spec-images
//! §6.2).
//!
//! Each NMStateConfig selected by an InfraEnv contributes one [`HostStaticConfig`]: its nmstate
//! YAML and a map from MAC addresses to the logical interface names the YAML uses. The hosts
//! are [`normalize`]d the way assisted-service stores them, so host `N` of the ramdisk is stable
//! whatever order the configs were listed in. [`validate`] checks them (assisted-service's
//! rules and messages, plus what nmstate 2.2 lets through silently); [`keyfiles`] turns one YAML
//! into NetworkManager keyfiles with nmstate's `gen_conf`, in process; [`ramdisk_files`] and
//! [`ramdisk`] lay out the archive: one `hostN` directory per config under
//! `etc/assisted/network`, plus a script and an initrd unit that, at boot, pick the directory
//! whose MACs are on the machine, rename the logical interfaces to the real ones and hand the
//! keyfiles to the live system (`etc/coreos-firstboot-network`). Only this keyfile mode is
//! produced; assisted-service's nmstatectl mode (OpenShift ≥ 4.18) is not.

mod keyfile;
mod ramdisk;
mod validate;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::formats::initrd::InitrdError;

pub use keyfile::{TextFault, UnsafeString};
pub(crate) use ramdisk::ramdisk_files_of;
pub use ramdisk::{
    COMMON_SCRIPT_PATH, NETWORK_DIR, PROXY_DROPIN_PATH, ProxyEnv, RamdiskEntry, RamdiskInput, SCRIPT_PATH,
    SERVICE_PATH, SERVICE_WANTS_PATH, archive, is_network_file, network_files_tar, ramdisk, ramdisk_files,
    with_autoconnect,
};
pub use validate::{prepare, validate};

/// One NMStateConfig's contribution (assisted-service's `HostStaticNetworkConfig`; the serde
/// names are those of its stored JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStaticConfig {
    /// `spec.interfaces` of the NMStateConfig.
    pub mac_interface_map: Vec<MacInterface>,
    /// `spec.config` of the NMStateConfig: raw nmstate YAML.
    pub network_yaml: String,
}

impl HostStaticConfig {
    /// Sorts the MAC map as [`normalize`] does: by logical name, then MAC.
    pub fn sort_mac_map(&mut self) {
        self.mac_interface_map.sort_by(|a, b| map_key(a).cmp(&map_key(b)));
    }
}

/// One `spec.interfaces` entry: the NIC with this MAC is called `logical_nic_name` in the YAML.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MacInterface {
    pub mac_address: String,
    pub logical_nic_name: String,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaticNetError {
    /// [`validate`] found problems (all of them, in host order, then across hosts).
    #[error("{}", Problems(.0))]
    Invalid(Vec<Problem>),
    /// [`keyfiles`] could not turn a YAML into keyfiles.
    #[error(transparent)]
    Yaml(#[from] YamlProblem),
    /// A proxy value that cannot be written into a systemd unit.
    #[error("invalid {name} {value:?} for the live rootfs download: {reason}")]
    InvalidProxy { name: &'static str, value: String, reason: &'static str },
    /// Building the archive failed.
    #[error("building the static network ramdisk")]
    Archive(#[from] InitrdError),
}

/// One validation problem. Messages quoted by spec-controllers.md §8.3 are assisted-service's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    #[error("at least one interface for host {host} must be provided")]
    NoInterfaces { host: usize },
    #[error("MACs and Interfaces for host {host} must be unique")]
    NotUnique { host: usize },
    /// A `spec.interfaces` MAC not of the form `xx:xx:xx:xx:xx:xx` (the NMStateConfig CRD's
    /// pattern).
    #[error("invalid MAC address {mac:?} for interface {interface:?} of host {host}")]
    InvalidMapMac { host: usize, interface: String, mac: String },
    /// A logical NIC name the boot script could not carry (empty, blanks, control characters, `/`).
    #[error("invalid interface name {interface:?} for MAC {} of host {host}", Escaped(.mac))]
    InvalidNicName { host: usize, interface: String, mac: String },
    /// The YAML is rejected by nmstate or by the checks nmstate does not make (assisted-service's
    /// wording quotes the reason, which is also the source).
    #[error("failed to validate network yaml for host {host}, {reason}")]
    NetworkYaml {
        host: usize,
        #[source]
        reason: YamlProblem,
    },
    /// An ethernet interface, bond port or VLAN base that the boot script cannot map to a NIC.
    #[error("mac-interface mapping for interface {} is missing and not a physical interface", Escaped(.interface))]
    MissingMapping { host: usize, interface: String },
    /// The same MAC in two configs: a machine with it would match both host directories.
    #[error("MAC address {} is used by host {first} and host {second}", Escaped(.mac))]
    DuplicateMac { mac: String, first: usize, second: usize },
}

/// What is wrong with one nmstate YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum YamlProblem {
    #[error("cannot generate configuration with an empty host YAML")]
    Empty,
    /// nmstate's own error, as it words it. Kept as text, not as the source: the text can quote
    /// the document, control characters included, and only this Display escapes them.
    #[error("{}", Escaped(.0))]
    Nmstate(String),
    /// A string nmstate would copy into a keyfile that cannot go there as it is (see
    /// [`UnsafeString`]).
    #[error("{0}")]
    UnsafeString(UnsafeString),
    /// A keyfile nmstate wrote that does not read back as the groups and keys it was generated
    /// from: a value got past the checks of the document. Nothing is built with it.
    /// The reason is quoted inside the sentence, and kept as the source.
    #[error("nmstate wrote {file} so that it does not read back as the keys it was generated from ({source})")]
    MalformedKeyfile {
        file: String,
        #[source]
        source: keyfile::KeyfileError,
    },
    #[error("nmstate generated an empty NetworkManager config file content")]
    NoKeyfiles,
    /// nmstate named a keyfile after an interface name that is no plain file name.
    #[error("interface name {name:?} cannot name a keyfile")]
    UnsafeFileName { name: String },
    #[error("interface name not found in networks configuration")]
    MissingName,
    #[error("interface {} has no type", Escaped(.interface))]
    MissingType { interface: String },
    /// A type nmstate does not know; it would silently configure an ethernet profile instead.
    #[error("interface {} has unknown type {kind:?}", Escaped(.interface))]
    UnknownType { interface: String, kind: String },
    #[error("interface {} has an invalid {field} {value:?}", Escaped(.interface))]
    InvalidMac { interface: String, field: &'static str, value: String },
    #[error("DNS server {} is not an IP address (nmstate would leave it out)", Escaped(.value))]
    InvalidDnsServer { value: String },
    #[error("VLAN {} has id {}, outside 1..4094", Escaped(.interface), Escaped(.id))]
    VlanIdOutOfRange { interface: String, id: String },
    #[error(
        "bond {} has port {}, which is neither defined in interfaces nor in the MAC map",
        Escaped(.bond),
        Escaped(.port)
    )]
    UndefinedBondPort { bond: String, port: String },
    #[error(
        "route to {} goes through interface {}, which is not defined in interfaces",
        Escaped(.destination),
        Escaped(.interface)
    )]
    UndefinedRouteInterface { destination: String, interface: String },
}

/// A value from input in a message, with its control characters and line separators escaped
/// (`\n`, `\u{1b}`), so that no message carries a line break or terminal escape it was given.
/// Everything else is shown as it is.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                write!(f, "{}", c.escape_debug())?;
            } else {
                fmt::Write::write_char(f, c)?;
            }
        }
        Ok(())
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// NetworkManager keyfiles for one nmstate YAML (or JSON), from nmstate's `gen_conf` in
/// process: `(file name, contents)` sorted by file name, as nmstate writes them (the ramdisk
/// adds `autoconnect-priority`, see [`with_autoconnect`]).
///
/// Only nmstate's own checks apply here, and the check that each keyfile reads back as groups and
/// keys (a value with a line break can make it read otherwise); [`validate`] adds the rest.
pub fn keyfiles(network_yaml: &str) -> Result<Vec<(String, String)>, StaticNetError> {
    Ok(generate(network_yaml)?)
}

fn parse(network_yaml: &str) -> Result<nmstate::NetworkState, YamlProblem> {
    if network_yaml.trim().is_empty() {
        return Err(YamlProblem::Empty);
    }
    nmstate::NetworkState::new_from_yaml(network_yaml).map_err(|e| YamlProblem::Nmstate(e.to_string()))
}

fn generate(network_yaml: &str) -> Result<Vec<(String, String)>, YamlProblem> {
    let state = parse(network_yaml)?;
    generate_from(&state)
}

fn generate_from(state: &nmstate::NetworkState) -> Result<Vec<(String, String)>, YamlProblem> {
    let mut generated = state.gen_conf().map_err(|e| YamlProblem::Nmstate(e.to_string()))?;
    let mut files = generated.remove("NetworkManager").unwrap_or_default();
    if files.is_empty() {
        return Err(YamlProblem::NoKeyfiles);
    }
    for (name, contents) in &files {
        if !is_plain_file_name(name) {
            return Err(YamlProblem::UnsafeFileName { name: name.clone() });
        }
        check_generated(name, contents)?;
    }
    files.sort();
    Ok(files)
}

/// [`keyfile::check_keyfile`] of a generated keyfile, as a problem.
fn check_generated(name: &str, contents: &str) -> Result<(), YamlProblem> {
    keyfile::check_keyfile(contents).map_err(|source| YamlProblem::MalformedKeyfile { file: name.to_string(), source })
}

/// A name that stays one file inside the host directory.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && !name.contains('/')
        && !name.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// The hosts sorted as assisted-service stores them (`FormatStaticNetworkConfigForDB`): each MAC
/// map by logical name then MAC; hosts by YAML, then by MAC map (shorter first, then entry by
/// entry). Strings compare bytewise, like Go's. Idempotent.
pub fn normalize(mut hosts: Vec<HostStaticConfig>) -> Vec<HostStaticConfig> {
    for host in &mut hosts {
        host.sort_mac_map();
    }
    hosts.sort_by(|a, b| host_order(a, &a.mac_interface_map, b, &b.mac_interface_map));
    hosts
}

/// The hosts as [`normalize`] gives them, copying only those whose MAC map it would reorder
/// (a build takes hundreds of hosts, whose maps are usually in order already).
pub(crate) fn normalized_order<'a>(
    hosts: impl IntoIterator<Item = &'a HostStaticConfig>,
) -> Vec<std::borrow::Cow<'a, HostStaticConfig>> {
    use std::borrow::Cow;
    let sorted_map = |h: &HostStaticConfig| h.mac_interface_map.is_sorted_by(|a, b| map_key(a) <= map_key(b));
    let mut hosts: Vec<Cow<'a, HostStaticConfig>> = hosts
        .into_iter()
        .map(|h| {
            if sorted_map(h) {
                Cow::Borrowed(h)
            } else {
                let mut h = h.clone();
                h.sort_mac_map();
                Cow::Owned(h)
            }
        })
        .collect();
    hosts.sort_by(|a, b| host_order(a, &a.mac_interface_map, b, &b.mac_interface_map));
    hosts
}

/// [`normalize`]'s order of two hosts, given their sorted MAC maps.
fn host_order<M: std::borrow::Borrow<MacInterface>>(
    a: &HostStaticConfig,
    a_map: &[M],
    b: &HostStaticConfig,
    b_map: &[M],
) -> std::cmp::Ordering {
    a.network_yaml.cmp(&b.network_yaml).then_with(|| {
        a_map
            .len()
            .cmp(&b_map.len())
            .then_with(|| a_map.iter().map(|e| map_key(e.borrow())).cmp(b_map.iter().map(|e| map_key(e.borrow()))))
    })
}

fn map_key(entry: &MacInterface) -> (&str, &str) {
    (&entry.logical_nic_name, &entry.mac_address)
}

/// `hostN/mac_interface.ini`: sorted `<mac>=<logical name>` lines joined by `\n` (no final newline).
pub fn mac_interface_ini(map: &[MacInterface]) -> String {
    let mut lines: Vec<String> =
        map.iter().map(|entry| format!("{}={}", entry.mac_address, entry.logical_nic_name)).collect();
    lines.sort();
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> Vec<MacInterface> {
        entries
            .iter()
            .map(|(mac, name)| MacInterface { mac_address: (*mac).into(), logical_nic_name: (*name).into() })
            .collect()
    }

    #[test]
    fn normalize_sorts_maps_then_hosts() {
        let hosts = vec![
            HostStaticConfig { mac_interface_map: map(&[("02:00:00:00:00:02", "eth1")]), network_yaml: "b".into() },
            HostStaticConfig {
                mac_interface_map: map(&[("02:00:00:00:00:09", "eth1"), ("02:00:00:00:00:08", "eth0")]),
                network_yaml: "a".into(),
            },
            HostStaticConfig {
                mac_interface_map: map(&[("02:00:00:00:00:05", "eth0"), ("02:00:00:00:00:04", "eth0")]),
                network_yaml: "a".into(),
            },
            HostStaticConfig { mac_interface_map: map(&[("02:00:00:00:00:07", "eth9")]), network_yaml: "a".into() },
        ];
        let original = hosts.clone();
        let sorted = normalize(hosts);
        let summary: Vec<(String, Vec<(String, String)>)> = sorted
            .iter()
            .map(|h| {
                let m = h.mac_interface_map.iter().map(|e| (e.logical_nic_name.clone(), e.mac_address.clone()));
                (h.network_yaml.clone(), m.collect())
            })
            .collect();
        let expect = |y: &str, m: &[(&str, &str)]| {
            (y.to_string(), m.iter().map(|(n, mac)| (n.to_string(), mac.to_string())).collect::<Vec<_>>())
        };
        assert_eq!(
            summary,
            vec![
                // Same YAML: the shorter map first, then entry by entry (name, then MAC).
                expect("a", &[("eth9", "02:00:00:00:00:07")]),
                expect("a", &[("eth0", "02:00:00:00:00:04"), ("eth0", "02:00:00:00:00:05")]),
                expect("a", &[("eth0", "02:00:00:00:00:08"), ("eth1", "02:00:00:00:00:09")]),
                expect("b", &[("eth1", "02:00:00:00:00:02")]),
            ]
        );
        assert_eq!(normalize(sorted.clone()), sorted, "idempotent");
        // What builds use: the same hosts in the same order, each map sorted, and only the hosts
        // whose map was out of order copied.
        let ordered = normalized_order(&original);
        let copied = ordered.iter().filter(|h| matches!(h, std::borrow::Cow::Owned(_))).count();
        assert_eq!(ordered.into_iter().map(|h| h.into_owned()).collect::<Vec<_>>(), sorted);
        assert_eq!(copied, 2);
    }

    #[test]
    fn mac_interface_ini_is_sorted_lines_without_final_newline() {
        let ini = mac_interface_ini(&map(&[("02:00:00:80:12:15", "eth1"), ("02:00:00:80:12:14", "eth0")]));
        assert_eq!(ini, "02:00:00:80:12:14=eth0\n02:00:00:80:12:15=eth1");
    }

    #[test]
    fn keyfiles_reject_empty_and_stateless_yaml() {
        assert!(matches!(keyfiles("  \n"), Err(StaticNetError::Yaml(YamlProblem::Empty))));
        assert!(matches!(keyfiles("---\n"), Err(StaticNetError::Yaml(YamlProblem::NoKeyfiles))));
        let err = keyfiles("interfaces: 3").unwrap_err().to_string();
        assert!(err.starts_with("InvalidArgument: Invalid YAML string"), "{err}");
    }

    #[test]
    fn plain_file_names() {
        assert!(is_plain_file_name("eth0.100.nmconnection"));
        for bad in ["", ".hidden", "a/b", "a b", "x\n"] {
            assert!(!is_plain_file_name(bad), "{bad:?}");
        }
    }
}
