//! Semantic checks of an Ignition config.
//!
//! The ignition-config crate only checks shapes and types. Ignition itself refuses configs
//! with relative or unclean paths, modes beyond `0o7777`, unknown URL schemes, undecodable
//! data URLs, duplicate entries, unit names without a unit suffix and files that collide with
//! units — and on a discovery host such a refusal means the host never boots into discovery,
//! with the reason visible only on its console. The checks here mirror Ignition's
//! (coreos/ignition `config/v3_*/types/*.go`) for the fields overrides realistically touch,
//! so the mistake is reported to whoever wrote the override instead.

use std::collections::{HashMap, HashSet};

use ignition_config::v3_2::{Config, NodeGroup, NodeUser, Resource};

use super::FieldProblem;
use super::dataurl::decode_data_url;

/// Unit suffixes Ignition accepts (`validateName` in Ignition's unit.go).
const UNIT_SUFFIXES: [&str; 12] = [
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".snapshot",
    ".slice",
    ".scope",
];

/// Where Ignition writes units and drop-ins (paths that files may not also claim).
const SYSTEMD_DIR: &str = "/etc/systemd/system/";

#[derive(Default)]
struct Problems(Vec<FieldProblem>);

impl Problems {
    fn add(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.0.push(FieldProblem { path: path.into(), reason: reason.into() });
    }
}

/// All problems found in `config`, in document order; empty if it is valid.
pub(super) fn validate(config: &Config) -> Vec<FieldProblem> {
    let mut p = Problems::default();
    check_ignition(config, &mut p);
    check_passwd(config, &mut p);
    check_storage(config, &mut p);
    check_systemd(config, &mut p);
    p.0
}

fn check_ignition(config: &Config, p: &mut Problems) {
    let ign = &config.ignition;
    if let Some(cfg) = &ign.config {
        for (i, res) in cfg.merge.iter().flatten().enumerate() {
            let at = format!("ignition.config.merge[{i}]");
            check_required_source(res, &at, p);
            check_resource(res, &at, p);
        }
        if let Some(res) = &cfg.replace {
            check_resource(res, "ignition.config.replace", p);
        }
    }
    if let Some(proxy) = &ign.proxy {
        for (name, value) in [("httpProxy", &proxy.http_proxy), ("httpsProxy", &proxy.https_proxy)] {
            if let Some(url) = value {
                let scheme = url_scheme(url).map(|s| s.to_ascii_lowercase());
                if !matches!(scheme.as_deref(), Some("http" | "https")) || has_control(url) {
                    p.add(format!("ignition.proxy.{name}"), format!("{url:?} is not an http or https URL"));
                }
            }
        }
        for (i, item) in proxy.no_proxy.iter().flatten().enumerate() {
            if item.is_none() {
                p.add(format!("ignition.proxy.noProxy[{i}]"), "must be a string, not null");
            }
        }
    }
    if let Some(tls) = ign.security.as_ref().and_then(|s| s.tls.as_ref()) {
        for (i, res) in tls.certificate_authorities.iter().flatten().enumerate() {
            let at = format!("ignition.security.tls.certificateAuthorities[{i}]");
            check_required_source(res, &at, p);
            check_resource(res, &at, p);
        }
    }
    if let Some(t) = &ign.timeouts {
        for (name, value) in [("httpResponseHeaders", t.http_response_headers), ("httpTotal", t.http_total)] {
            if value.is_some_and(|v| v < 0) {
                p.add(format!("ignition.timeouts.{name}"), "must not be negative");
            }
        }
    }
}

fn check_passwd(config: &Config, p: &mut Problems) {
    let Some(passwd) = &config.passwd else { return };
    let mut seen = HashMap::new();
    for (i, user) in passwd.users.iter().flatten().enumerate() {
        let at = format!("passwd.users[{i}]");
        if user.name.is_empty() {
            p.add(format!("{at}.name"), "must not be empty");
        } else if let Some(first) = seen.insert(user.name.as_str(), i) {
            p.add(format!("{at}.name"), format!("duplicate user {:?} (also passwd.users[{first}])", user.name));
        }
        if let Some(home) = &user.home_dir
            && let Err(reason) = check_path(home)
        {
            p.add(format!("{at}.homeDir"), reason.0);
        }
    }
    let mut seen = HashMap::new();
    for (i, group) in passwd.groups.iter().flatten().enumerate() {
        let at = format!("passwd.groups[{i}].name");
        if group.name.is_empty() {
            p.add(at, "must not be empty");
        } else if let Some(first) = seen.insert(group.name.as_str(), i) {
            p.add(at, format!("duplicate group {:?} (also passwd.groups[{first}])", group.name));
        }
    }
}

fn check_storage(config: &Config, p: &mut Problems) {
    let Some(storage) = &config.storage else {
        return;
    };
    // Files, directories and links share one namespace.
    let mut nodes: HashMap<&str, String> = HashMap::new();
    for (i, f) in storage.files.iter().flatten().enumerate() {
        let at = format!("storage.files[{i}]");
        check_node(&f.path, &at, &f.user, &f.group, &mut nodes, p);
        check_mode(f.mode, &at, p);
        if let Some(res) = &f.contents {
            check_resource(res, &format!("{at}.contents"), p);
        }
        if f.overwrite == Some(true) && f.contents.as_ref().and_then(|c| c.source.as_ref()).is_none() {
            p.add(format!("{at}.overwrite"), "overwrite is true but contents.source is not set");
        }
        for (j, res) in f.append.iter().flatten().enumerate() {
            check_resource(res, &format!("{at}.append[{j}]"), p);
        }
    }
    for (i, d) in storage.directories.iter().flatten().enumerate() {
        let at = format!("storage.directories[{i}]");
        check_node(&d.path, &at, &d.user, &d.group, &mut nodes, p);
        check_mode(d.mode, &at, p);
    }
    for (i, l) in storage.links.iter().flatten().enumerate() {
        let at = format!("storage.links[{i}]");
        check_node(&l.path, &at, &l.user, &l.group, &mut nodes, p);
        if l.target.is_empty() {
            p.add(format!("{at}.target"), "must not be empty");
        }
    }

    let mut devices = HashSet::new();
    for (i, d) in storage.disks.iter().flatten().enumerate() {
        if d.device.is_empty() {
            p.add(format!("storage.disks[{i}].device"), "must not be empty");
        } else if !devices.insert(d.device.as_str()) {
            p.add(format!("storage.disks[{i}].device"), format!("duplicate disk {:?}", d.device));
        }
    }
    let mut devices = HashSet::new();
    for (i, fs) in storage.filesystems.iter().flatten().enumerate() {
        let at = format!("storage.filesystems[{i}]");
        if fs.device.is_empty() {
            p.add(format!("{at}.device"), "must not be empty");
        } else if !devices.insert(fs.device.as_str()) {
            p.add(format!("{at}.device"), format!("duplicate filesystem {:?}", fs.device));
        }
        if let Some(path) = fs.path.as_deref().filter(|s| !s.is_empty())
            && let Err(reason) = check_path(path)
        {
            p.add(format!("{at}.path"), reason.0);
        }
    }
    let mut names = HashSet::new();
    for (i, r) in storage.raid.iter().flatten().enumerate() {
        if r.name.is_empty() || !names.insert(r.name.as_str()) {
            p.add(format!("storage.raid[{i}].name"), format!("empty or duplicate name {:?}", r.name));
        }
    }
    let mut names = HashSet::new();
    for (i, l) in storage.luks.iter().flatten().enumerate() {
        if l.name.is_empty() || !names.insert(l.name.as_str()) {
            p.add(format!("storage.luks[{i}].name"), format!("empty or duplicate name {:?}", l.name));
        }
        if let Some(res) = &l.key_file {
            check_resource(res, &format!("storage.luks[{i}].keyFile"), p);
        }
    }

    // Paths that Ignition writes for units with contents (Ignition's config.go Validate).
    let mut unit_paths = HashSet::new();
    for unit in config.systemd.iter().flat_map(|s| s.units.iter().flatten()) {
        if unit.contents.as_deref().is_some_and(|c| !c.is_empty()) {
            unit_paths.insert(format!("{SYSTEMD_DIR}{}", unit.name));
        }
        for dropin in unit.dropins.iter().flatten() {
            if dropin.contents.as_deref().is_some_and(|c| !c.is_empty()) {
                unit_paths.insert(format!("{SYSTEMD_DIR}{}.d/{}", unit.name, dropin.name));
            }
        }
    }
    for (path, at) in storage
        .files
        .iter()
        .flatten()
        .map(|f| f.path.as_str())
        .zip((0..).map(|i| format!("storage.files[{i}]")))
        .chain(
            storage
                .directories
                .iter()
                .flatten()
                .map(|d| d.path.as_str())
                .zip((0..).map(|i| format!("storage.directories[{i}]"))),
        )
        .chain(
            storage.links.iter().flatten().map(|l| l.path.as_str()).zip((0..).map(|i| format!("storage.links[{i}]"))),
        )
    {
        if unit_paths.contains(path) {
            p.add(
                format!("{at}.path"),
                format!("{path:?} is also written by a systemd unit or drop-in of this config"),
            );
        }
    }
}

fn check_systemd(config: &Config, p: &mut Problems) {
    let Some(systemd) = &config.systemd else {
        return;
    };
    let mut seen = HashMap::new();
    for (i, unit) in systemd.units.iter().flatten().enumerate() {
        let at = format!("systemd.units[{i}]");
        if !UNIT_SUFFIXES.iter().any(|s| unit.name.len() > s.len() && unit.name.ends_with(s)) {
            p.add(
                format!("{at}.name"),
                format!("{:?} does not end in a systemd unit type such as .service", unit.name),
            );
        } else if unit.name.contains('/') {
            p.add(format!("{at}.name"), format!("{:?} must not contain '/'", unit.name));
        } else if let Some(first) = seen.insert(unit.name.as_str(), i) {
            p.add(format!("{at}.name"), format!("duplicate unit {:?} (also systemd.units[{first}])", unit.name));
        }
        let mut dropins = HashSet::new();
        for (j, dropin) in unit.dropins.iter().flatten().enumerate() {
            let at = format!("{at}.dropins[{j}].name");
            if dropin.name.len() <= ".conf".len() || !dropin.name.ends_with(".conf") || dropin.name.contains('/') {
                p.add(at, format!("{:?} must be a file name ending in .conf", dropin.name));
            } else if !dropins.insert(dropin.name.as_str()) {
                p.add(at, format!("duplicate drop-in {:?}", dropin.name));
            }
        }
    }
}

/// Path, uniqueness and owner checks shared by files, directories and links.
fn check_node<'a>(
    path: &'a str,
    at: &str,
    user: &Option<NodeUser>,
    group: &Option<NodeGroup>,
    nodes: &mut HashMap<&'a str, String>,
    p: &mut Problems,
) {
    if let Err(reason) = check_path(path) {
        p.add(format!("{at}.path"), reason.0);
    } else if let Some(first) = nodes.get(path) {
        p.add(format!("{at}.path"), format!("duplicate path {path:?} (also {first})"));
    } else {
        nodes.insert(path, at.to_owned());
    }
    let both = |id: Option<i64>, name: Option<&str>| id.is_some() && name.is_some_and(|n| !n.is_empty());
    if user.as_ref().is_some_and(|u| both(u.id, u.name.as_deref())) {
        p.add(format!("{at}.user"), "set either id or name, not both");
    }
    if group.as_ref().is_some_and(|g| both(g.id, g.name.as_deref())) {
        p.add(format!("{at}.group"), "set either id or name, not both");
    }
}

/// Why a path or a source URL is refused: the reason of a [`FieldProblem`], a message for a person
/// (the data URL's own error quoted in it), which nothing reads beyond its text.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct FieldReason(String);

/// Ignition's `validatePath`: absolute and already clean.
fn check_path(path: &str) -> Result<(), FieldReason> {
    if path.is_empty() {
        return Err(FieldReason("path must not be empty".into()));
    }
    if !path.starts_with('/') {
        return Err(FieldReason(format!("path {path:?} is not absolute")));
    }
    if path.contains('\0') {
        return Err(FieldReason(format!("path {path:?} contains a NUL byte")));
    }
    if path != "/" && (path.ends_with('/') || path[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..")) {
        return Err(FieldReason(format!("path {path:?} is not clean (no '//', '.', '..' or trailing '/')")));
    }
    Ok(())
}

fn check_mode(mode: Option<i64>, at: &str, p: &mut Problems) {
    if let Some(m) = mode
        && !(0..=0o7777).contains(&m)
    {
        p.add(
            format!("{at}.mode"),
            format!("{m} is not a valid mode (0 to 4095, i.e. 0o7777; modes are decimal in JSON, 0o644 is 420)"),
        );
    }
}

fn check_required_source(res: &Resource, at: &str, p: &mut Problems) {
    if res.source.as_deref().is_none_or(str::is_empty) {
        p.add(format!("{at}.source"), "a source is required here");
    }
}

/// Ignition's `Resource.Validate`.
fn check_resource(res: &Resource, at: &str, p: &mut Problems) {
    if let Some(c) = res.compression.as_deref()
        && !matches!(c, "" | "gzip")
    {
        p.add(format!("{at}.compression"), format!("{c:?} is not supported (only \"gzip\")"));
    }
    let source = res.source.as_deref().filter(|s| !s.is_empty());
    if res.verification.as_ref().and_then(|v| v.hash.as_ref()).is_some() && source.is_none() {
        p.add(format!("{at}.verification.hash"), "a hash needs a source");
    }
    if let Some(src) = source
        && let Err(reason) = check_source(src)
    {
        p.add(format!("{at}.source"), reason.0);
    }
    if res.http_headers.as_ref().is_some_and(|h| !h.is_empty()) {
        let scheme = source.and_then(url_scheme).map(|s| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            p.add(format!("{at}.httpHeaders"), "HTTP headers need an http or https source");
        }
        let mut names = HashSet::new();
        for (i, h) in res.http_headers.iter().flatten().enumerate() {
            if h.name.is_empty() || !names.insert(h.name.as_str()) {
                p.add(format!("{at}.httpHeaders[{i}].name"), format!("empty or duplicate header {:?}", h.name));
            }
        }
    }
}

/// Ignition's `validateURL`: a scheme Ignition can fetch from, and data URLs that decode.
fn check_source(src: &str) -> Result<(), FieldReason> {
    let shown = shorten(src);
    if has_control(src) {
        return Err(FieldReason(format!("{shown:?} contains control characters")));
    }
    match url_scheme(src).map(|s| s.to_ascii_lowercase()).as_deref() {
        Some("data") => match decode_data_url(src) {
            Ok(_) => Ok(()),
            Err(e) => Err(FieldReason(format!("{shown:?}: {e}"))),
        },
        Some("http" | "https" | "tftp" | "gs" | "s3") => Ok(()),
        Some(other) => {
            Err(FieldReason(format!("URL scheme {other:?} is not supported (use data, http, https, tftp, s3 or gs)")))
        }
        None => Err(FieldReason(format!("{shown:?} is not an absolute URL"))),
    }
}

/// The scheme of an absolute URL (RFC 3986 `scheme ":"`), if any.
fn url_scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))).then_some(scheme)
}

fn has_control(s: &str) -> bool {
    s.chars().any(|c| c.is_ascii_control())
}

/// Long data URLs would drown an error message.
fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for good in ["/", "/etc", "/etc/motd", "/a.b/c..d/.e"] {
            assert!(check_path(good).is_ok(), "{good}");
        }
        for bad in ["", "etc/motd", "/etc/", "/etc//motd", "/etc/./motd", "/etc/../motd", "/.."] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sources() {
        for good in [
            "data:,x",
            "https://h/x",
            "HTTP://h",
            "s3://b/k",
            "gs://b/o",
            "tftp://h/f",
            "data:;base64,YQ==",
            "data:text/plain;charset=utf-8,%41",
        ] {
            assert!(check_source(good).is_ok(), "{good}");
        }
        for bad in
            ["ftp://h/x", "/etc/x", "data:;base64,***", "data:,a b", "DATA:,x", "http://a\nb", "file:///etc/passwd"]
        {
            assert!(check_source(bad).is_err(), "{bad}");
        }
    }
}
