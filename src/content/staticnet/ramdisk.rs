//! The static-network ramdisk (spec-images.md §6.2, keyfile mode of spec-controllers.md §8.3): host
//! directories, the boot script and its unit, and the proxy drop-in for the live rootfs
//! download.

use std::collections::HashSet;

use crate::formats::initrd::ArchiveBuilder;

use super::validate::validate_and_generate;
use super::{HostStaticConfig, StaticNetError, mac_interface_ini, normalized_order};

/// Where the host directories go.
pub const NETWORK_DIR: &str = "etc/assisted/network";
/// The boot script.
pub const SCRIPT_PATH: &str = "usr/local/bin/pre-network-manager-config.sh";
/// Its helper functions, sourced by it.
pub const COMMON_SCRIPT_PATH: &str = "usr/local/bin/common_network_script.sh";
/// The initrd unit that runs the script.
pub const SERVICE_PATH: &str = "etc/systemd/system/pre-network-manager-config.service";
/// The symlink that enables the unit in the initrd.
pub const SERVICE_WANTS_PATH: &str = "etc/systemd/system/initrd.target.wants/pre-network-manager-config.service";
/// The drop-in giving the live rootfs download the InfraEnv proxy.
pub const PROXY_DROPIN_PATH: &str = "etc/systemd/system/coreos-livepxe-rootfs.service.d/10-proxy.conf";

const SCRIPT: &str = include_str!("../../../templates/staticnet/pre-network-manager-config.sh");
const COMMON_SCRIPT: &str = include_str!("../../../templates/staticnet/common_network_script.sh");
const SERVICE: &str = include_str!("../../../templates/staticnet/pre-network-manager-config.service");

/// Proxy settings of the InfraEnv; `None`, empty or blank values count as unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyEnv<'a> {
    pub http_proxy: Option<&'a str>,
    pub https_proxy: Option<&'a str>,
    pub no_proxy: Option<&'a str>,
}

/// What goes into the ramdisk.
#[derive(Debug, Clone, Copy, Default)]
pub struct RamdiskInput<'a> {
    /// The InfraEnv's static network configs, in any order: they are put in
    /// [`normalize`](super::normalize)'s order here, so `hostN` follows that order (and validation
    /// messages count hosts in it).
    pub hosts: &'a [HostStaticConfig],
    pub proxy: Option<ProxyEnv<'a>>,
}

/// One member of the ramdisk. Paths are relative to the initramfs root (no leading `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RamdiskEntry {
    /// Mode 040755.
    Dir { path: String },
    /// `mode` holds the permission bits only (e.g. `0o600`).
    File { path: String, mode: u32, contents: Vec<u8> },
    /// Mode 0120777.
    Symlink { path: String, target: String },
}

impl RamdiskEntry {
    pub fn path(&self) -> &str {
        match self {
            Self::Dir { path } | Self::File { path, .. } | Self::Symlink { path, .. } => path,
        }
    }
}

/// Every member of the ramdisk, each directory once and before what it holds:
///
/// - with static configs (validated first with [`validate`](super::validate); an invalid one is an error):
///   `etc/assisted/network/host<N>/<keyfile>` (0600; nmstate's keyfiles with `autoconnect=true`
///   and `autoconnect-priority=1` in `[connection]`), `host<N>/mac_interface.ini` (0600), the
///   script and its helper in `usr/local/bin` (0755), the unit (0644) and its
///   `initrd.target.wants` symlink;
/// - with a proxy: the `coreos-livepxe-rootfs.service` drop-in (0664).
///
/// Empty when there is neither.
pub fn ramdisk_files(input: &RamdiskInput) -> Result<Vec<RamdiskEntry>, StaticNetError> {
    ramdisk_files_of(input.hosts, input.proxy)
}

/// [`ramdisk_files`] of hosts held elsewhere (a build's selected configs are shared, not copied).
pub(crate) fn ramdisk_files_of<'a>(
    hosts: impl IntoIterator<Item = &'a HostStaticConfig>,
    proxy: Option<ProxyEnv<'_>>,
) -> Result<Vec<RamdiskEntry>, StaticNetError> {
    let proxy_conf = proxy.map(|proxy| proxy_dropin(&proxy)).transpose()?.flatten();
    let mut layout = Layout::default();
    let hosts = normalized_order(hosts);
    if !hosts.is_empty() {
        let hosts: Vec<&HostStaticConfig> = hosts.iter().map(|h| h.as_ref()).collect();
        let generated = validate_and_generate(&hosts)?;
        for (index, (host, keyfiles)) in hosts.iter().zip(generated).enumerate() {
            let dir = format!("{NETWORK_DIR}/host{index}");
            for (name, contents) in keyfiles.iter() {
                layout.file(&format!("{dir}/{name}"), 0o600, contents.as_bytes().to_vec());
            }
            layout.file(&format!("{dir}/mac_interface.ini"), 0o600, mac_interface_ini(&host.mac_interface_map).into());
        }
        layout.file(SCRIPT_PATH, 0o755, SCRIPT.into());
        layout.file(COMMON_SCRIPT_PATH, 0o755, COMMON_SCRIPT.into());
        layout.file(SERVICE_PATH, 0o644, SERVICE.into());
        layout.symlink(SERVICE_WANTS_PATH, &format!("/{SERVICE_PATH}"));
    }
    if let Some(conf) = proxy_conf {
        layout.file(PROXY_DROPIN_PATH, 0o664, conf.into_bytes());
    }
    Ok(layout.entries)
}

/// [`ramdisk_files`] as a gzip-compressed newc archive (mtime 0, padded to 4 bytes; the same
/// input gives the same bytes), or `None` when there is nothing to add, which assisted-service
/// answers with 204.
pub fn ramdisk(input: &RamdiskInput) -> Result<Option<Vec<u8>>, StaticNetError> {
    let entries = ramdisk_files(input)?;
    if entries.is_empty() {
        return Ok(None);
    }
    Ok(Some(archive(&entries)?))
}

/// The entries as a gzip newc archive (the ramdisk).
pub fn archive(entries: &[RamdiskEntry]) -> Result<Vec<u8>, StaticNetError> {
    let mut builder = ArchiveBuilder::new();
    for entry in entries {
        match entry {
            RamdiskEntry::Dir { path } => builder.add_dir(path)?,
            RamdiskEntry::File { path, mode, contents } => builder.add_file(path, *mode, contents)?,
            RamdiskEntry::Symlink { path, target } => builder.add_symlink(path, target)?,
        };
    }
    Ok(builder.finish_gzip()?)
}

/// The per-host network files (`etc/assisted/network/...`) as an uncompressed tar, mode 0600: the
/// InfraEnv's `static-network-config` download, for inspecting what hosts will get.
pub fn network_files_tar(entries: &[RamdiskEntry]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    for entry in entries.iter().filter(|e| is_network_file(e)) {
        if let RamdiskEntry::File { path, contents, .. } = entry {
            let mut header = tar::Header::new_gnu();
            header.set_size(contents.len() as u64);
            header.set_mode(0o600);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            // Paths are ours (host index and nmstate's keyfile names), so they always fit a tar header.
            tar.append_data(&mut header, path, contents.as_slice()).expect("writing a tar into memory");
        }
    }
    tar.into_inner().expect("writing a tar into memory")
}

/// Whether `entry` is one of the per-host network files (what [`network_files_tar`] takes).
pub fn is_network_file(entry: &RamdiskEntry) -> bool {
    matches!(entry, RamdiskEntry::File { path, .. } if path.starts_with(NETWORK_DIR))
}

/// Members in order, with every parent directory emitted once, before its first child.
#[derive(Default)]
struct Layout {
    entries: Vec<RamdiskEntry>,
    dirs: HashSet<String>,
}

impl Layout {
    fn parents(&mut self, path: &str) {
        let Some((parent, _)) = path.rsplit_once('/') else { return };
        // A directory is only recorded after its own parents: when the nearest one is there,
        // so are all the others (a build adds hundreds of files to a few directories).
        if self.dirs.contains(parent) {
            return;
        }
        self.parents(parent);
        self.dirs.insert(parent.to_string());
        self.entries.push(RamdiskEntry::Dir { path: parent.to_string() });
    }

    fn file(&mut self, path: &str, mode: u32, contents: Vec<u8>) {
        self.parents(path);
        self.entries.push(RamdiskEntry::File { path: path.to_string(), mode, contents });
    }

    fn symlink(&mut self, path: &str, target: &str) {
        self.parents(path);
        self.entries.push(RamdiskEntry::Symlink { path: path.to_string(), target: target.to_string() });
    }
}

/// A keyfile with `autoconnect=true` and `autoconnect-priority=1` in `[connection]`: values of
/// keys already there are replaced in place, missing keys are appended to the section (which is
/// created first when missing). Everything else is kept byte for byte.
///
/// The priority makes these profiles win over any other profile for the same device (default
/// priority 0), such as one generated from kernel arguments.
pub fn with_autoconnect(keyfile: &str) -> String {
    const KEYS: [(&str, &str); 2] = [("autoconnect", "true"), ("autoconnect-priority", "1")];
    let mut lines: Vec<String> = keyfile.lines().map(str::to_string).collect();
    let Some(start) = lines.iter().position(|l| l.trim() == "[connection]") else {
        let mut out = String::from("[connection]\n");
        for (key, value) in KEYS {
            out.push_str(&format!("{key}={value}\n"));
        }
        if !keyfile.is_empty() {
            out.push('\n');
            out.push_str(keyfile);
        }
        return out;
    };
    let end =
        lines[start + 1..].iter().position(|l| l.trim_start().starts_with('[')).map_or(lines.len(), |p| start + 1 + p);
    let mut insert_at =
        lines[start + 1..end].iter().rposition(|l| !l.trim().is_empty()).map_or(start + 1, |p| start + 2 + p);
    for (key, value) in KEYS {
        let existing = lines[start + 1..end]
            .iter()
            .position(|l| l.split_once('=').is_some_and(|(k, _)| k.trim() == key))
            .map(|p| start + 1 + p);
        match existing {
            Some(at) => lines[at] = format!("{key}={value}"),
            None => {
                lines.insert(insert_at, format!("{key}={value}"));
                insert_at += 1;
            }
        }
    }
    let mut out = lines.join("\n");
    if keyfile.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The `coreos-livepxe-rootfs.service` drop-in, or `None` when no value is set. `%` is doubled
/// (systemd would expand specifiers); values that a plain `Environment=` line cannot carry
/// (blanks, quotes, backslashes, control characters) are errors.
fn proxy_dropin(proxy: &ProxyEnv) -> Result<Option<String>, StaticNetError> {
    let values = [("http_proxy", proxy.http_proxy), ("https_proxy", proxy.https_proxy), ("no_proxy", proxy.no_proxy)];
    let mut lines = Vec::new();
    for (name, value) in values {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            continue;
        };
        if let Some(reason) = unsafe_environment_value(value) {
            return Err(StaticNetError::InvalidProxy { name, value: value.to_string(), reason });
        }
        let value = value.replace('%', "%%");
        lines.push(format!("Environment={name}={value}"));
        lines.push(format!("Environment={}={value}", name.to_ascii_uppercase()));
    }
    if lines.is_empty() {
        return Ok(None);
    }
    Ok(Some(format!(
        "# The InfraEnv proxy, for downloading the live rootfs (written by bootstream).\n[Service]\n{}\n",
        lines.join("\n")
    )))
}

fn unsafe_environment_value(value: &str) -> Option<&'static str> {
    if value.chars().any(char::is_control) {
        Some("contains a control character")
    } else if value.chars().any(char::is_whitespace) {
        Some("contains whitespace")
    } else if value.contains(['"', '\'', '\\']) {
        Some("contains a quote or backslash")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn autoconnect_keys_replace_or_append_in_connection() {
        let nm = "[connection]\nautoconnect=false\nid=eth0\ntype=802-3-ethernet\n\n[ipv4]\nmethod=auto\n";
        assert_eq!(
            with_autoconnect(nm),
            "[connection]\nautoconnect=true\nid=eth0\ntype=802-3-ethernet\nautoconnect-priority=1\n\n[ipv4]\nmethod=auto\n"
        );
        // Only [connection] is touched, even when another section has the same key.
        let nm = "[ipv4]\nmethod=auto\n\n[connection]\nid=x\n\n[other]\nautoconnect-priority=5";
        assert_eq!(
            with_autoconnect(nm),
            "[ipv4]\nmethod=auto\n\n[connection]\nid=x\nautoconnect=true\nautoconnect-priority=1\n\n[other]\nautoconnect-priority=5"
        );
        assert_eq!(
            with_autoconnect("[ipv4]\nmethod=auto\n"),
            "[connection]\nautoconnect=true\nautoconnect-priority=1\n\n[ipv4]\nmethod=auto\n"
        );
        assert_eq!(with_autoconnect("[connection]"), "[connection]\nautoconnect=true\nautoconnect-priority=1");
    }

    #[test]
    fn layout_emits_each_parent_once_in_order() {
        let mut layout = Layout::default();
        layout.file("a/b/c", 0o600, vec![]);
        layout.file("a/b/d", 0o600, vec![]);
        layout.symlink("a/e/f", "/a/b/c");
        let paths: Vec<&str> = layout.entries.iter().map(RamdiskEntry::path).collect();
        assert_eq!(paths, ["a", "a/b", "a/b/c", "a/b/d", "a/e", "a/e/f"]);
    }

    #[test]
    fn proxy_dropin_doubles_percent_and_skips_unset() {
        let conf = proxy_dropin(&ProxyEnv {
            http_proxy: Some("http://u:p%40ss@proxy:3128"),
            https_proxy: Some("  "),
            no_proxy: Some(".example.com,10.0.0.0/8"),
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            conf,
            "# The InfraEnv proxy, for downloading the live rootfs (written by bootstream).\n[Service]\n\
             Environment=http_proxy=http://u:p%%40ss@proxy:3128\nEnvironment=HTTP_PROXY=http://u:p%%40ss@proxy:3128\n\
             Environment=no_proxy=.example.com,10.0.0.0/8\nEnvironment=NO_PROXY=.example.com,10.0.0.0/8\n"
        );
        assert_eq!(proxy_dropin(&ProxyEnv::default()).unwrap(), None);
        let err = proxy_dropin(&ProxyEnv { http_proxy: Some("http://a\nExecStart=/bin/evil"), ..Default::default() })
            .unwrap_err();
        assert!(err.to_string().contains("control character"), "{err}");
        assert!(proxy_dropin(&ProxyEnv { https_proxy: Some("http://a b"), ..Default::default() }).is_err());
    }
}
