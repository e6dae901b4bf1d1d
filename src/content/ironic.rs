//! The ironic agent of the converged flow (spec-controllers.md §6.2): an InfraEnv annotated
//! `infraenv.agent-install.openshift.io/enable-ironic-agent: "true"` boots into ironic-python-agent,
//! which metal3 drives; the discovery agent is started later by ironic's `start_assisted_install` deploy
//! step, so its unit is rendered disabled.
//!
//! This module produces the Ignition fragment (spec 3.2) merged into the discovery Ignition as the
//! *internal* override: `/etc/ironic-python-agent.conf` and an enabled `ironic-agent.service` running
//! the agent image with podman.

use serde_json::{Value, json};

pub use crate::resources::ENABLE_IRONIC_AGENT_ANNOTATION;
pub const IRONIC_AGENT_IMAGE_OVERRIDE_ANNOTATION: &str =
    "infraenv.agent-install.openshift.io/ironic-agent-image-override";
/// The image-customization secret metal3 reads; bootstream reads the same keys from it.
pub const ICC_SECRET_NAMESPACE: &str = "openshift-machine-api";
pub const ICC_SECRET_NAME: &str = "metal3-image-customization-config";

/// Whether the InfraEnv asks for the ironic agent (the annotation the PreprovisioningImage controller sets).
pub fn enabled(ie: &crate::resources::InfraEnv) -> bool {
    ie.metadata.annotations.as_ref().and_then(|a| a.get(ENABLE_IRONIC_AGENT_ANNOTATION)).is_some_and(|v| v == "true")
}

/// Default ironic agent images (assisted-service's `IRONIC_AGENT_IMAGE` / `IRONIC_AGENT_IMAGE_ARM`).
pub const DEFAULT_IRONIC_AGENT_IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:d3f1d4d3cd5fbcf1b9249dd71d01be4b901d337fdc5f8f66569eb71df4d9d446";
pub const DEFAULT_IRONIC_AGENT_IMAGE_ARM: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:cb0edf19fffc17f542a7efae76939b1e9757dc75782d4727fb0aa77ed5809b43";

const IRONIC_API_PORT: u16 = 6385;
const INSPECTOR_PORT: u16 = 5050;

/// Where ironic is, and the images to use when nothing more specific is configured.
#[derive(Clone, Debug, Default)]
pub struct IronicDefaults {
    pub base_url: Option<String>,
    pub inspector_url: Option<String>,
    pub agent_image: Option<String>,
    pub agent_image_arm: Option<String>,
}

/// Everything the fragment needs.
#[derive(Clone, Debug)]
pub struct IronicConfig {
    /// Ironic API URL(s), comma separated; the API port is added where a URL has none.
    pub base_url: String,
    pub inspector_url: Option<String>,
    pub agent_image: String,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    /// With static network config the agent must not bring up VLAN interfaces on its own.
    pub has_static_network: bool,
}

/// Picks the agent image by spec-controllers.md §6.2 priority: the InfraEnv's override annotation, the
/// image-customization secret's image, then the configured default for the architecture. (The hub
/// release and ClusterImageSet steps need a Kubernetes hub and apply in that mode only.)
pub fn agent_image(
    override_annotation: Option<&str>,
    icc_image: Option<&str>,
    arch: &str,
    defaults: &IronicDefaults,
) -> String {
    if let Some(img) = override_annotation.filter(|s| !s.trim().is_empty()) {
        return img.trim().to_string();
    }
    if let Some(img) = icc_image.filter(|s| !s.trim().is_empty()) {
        return img.trim().to_string();
    }
    if arch == "arm64" || arch == "aarch64" {
        defaults.agent_image_arm.clone().unwrap_or_else(|| DEFAULT_IRONIC_AGENT_IMAGE_ARM.to_string())
    } else {
        defaults.agent_image.clone().unwrap_or_else(|| DEFAULT_IRONIC_AGENT_IMAGE.to_string())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IronicError {
    #[error("{0}")]
    Invalid(String),
    /// An ironic or inspector URL that does not parse.
    #[error("ironic URL {url:?}")]
    Url {
        url: String,
        #[source]
        source: url::ParseError,
    },
}

/// Adds `port` to each comma-separated URL that names none, and appends `path` where the URL's path
/// does not already end in it. A port the URL names is kept, the scheme's default included
/// (`https://ironic.example:443` behind a route stays on 443: the url crate leaves a default port
/// out of `port()` and of its text, so whether one was written is read from the URL's authority).
fn with_port(urls: &str, port: u16, path: &str) -> Result<String, IronicError> {
    let mut out = Vec::new();
    for u in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        let parsed = reqwest::Url::parse(u).map_err(|source| IronicError::Url { url: u.to_string(), source })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(IronicError::Invalid(format!("ironic URL {u:?}: must be http(s)://host[:port]")));
        }
        // The agent appends its API paths to the URL's text (and we append /v1/continue): after a query
        // or a fragment they would land in it, and the agent would call another URL than intended.
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(IronicError::Invalid(format!(
                "ironic URL {u:?}: a query or fragment is not allowed (the agent appends paths to the URL)"
            )));
        }
        let mut parsed = parsed;
        if parsed.port().is_none() && !names_a_port(u) {
            let _ = parsed.set_port(Some(port));
        }
        // Always the parsed URL's own text, never the input's (which may hold what the parser drops,
        // such as a newline, and would reach the configuration file).
        let base = parsed.as_str().trim_end_matches('/').to_string();
        let has_path = !path.is_empty() && parsed.path().trim_end_matches('/').ends_with(path);
        out.push(if has_path { base } else { format!("{base}{path}") });
    }
    if out.is_empty() {
        return Err(IronicError::Invalid("no ironic URL".into()));
    }
    Ok(out.join(","))
}

/// Whether the authority of `url` (scheme://[userinfo@]host[:port]/...) writes a port.
fn names_a_port(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').is_some_and(|(_, after)| after.starts_with(':')),
        None => host_port.contains(':'),
    }
}

/// A value for a systemd `Environment=` line: refuse what systemd would split, unquote or
/// un-escape there (blanks, either quote, backslashes) and control characters; `%` doubled
/// (specifiers).
fn unit_safe(what: &str, v: &str) -> Result<String, IronicError> {
    if v.chars().any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '\\' || c.is_control()) {
        return Err(IronicError::Invalid(format!(
            "{what} {v:?} contains whitespace, quotes, backslashes or control characters"
        )));
    }
    Ok(v.replace('%', "%%"))
}

/// A word of an `Exec*=` line: as [`unit_safe`], and neither empty (the word would vanish) nor with
/// `$` (systemd expands `$NAME` and `${NAME}` there; no image reference has one).
fn exec_word_safe(what: &str, v: &str) -> Result<String, IronicError> {
    if v.is_empty() || v.contains('$') {
        return Err(IronicError::Invalid(format!("{what} {v:?} is empty or contains '$'")));
    }
    unit_safe(what, v)
}

/// A value for the agent's configuration file: oslo.config reads `$name` and `${name}` in a value
/// as the value of option `name` (and fails on a name it has no option for), `$$` as `$`. The URL
/// parser leaves `$` as it is in a path, query or password, so it is doubled here. (The file's other
/// specials cannot occur in a parsed URL's text: a line break, or quotes around the whole value.)
fn conf_value(v: &str) -> String {
    v.replace('$', "$$")
}

/// The Ignition 3.2 fragment as JSON text.
pub fn ignition_fragment(cfg: &IronicConfig) -> Result<String, IronicError> {
    let api_url = with_port(&cfg.base_url, IRONIC_API_PORT, "")?;
    let mut conf = format!("[DEFAULT]\napi_url = {}\n", conf_value(&api_url));
    if let Some(inspector) = cfg.inspector_url.as_deref().filter(|s| !s.trim().is_empty()) {
        conf.push_str(&format!(
            "inspection_callback_url = {}\n",
            conf_value(&with_port(inspector, INSPECTOR_PORT, "/v1/continue")?)
        ));
    }
    conf.push_str("insecure = True\n");
    conf.push_str(if cfg.has_static_network {
        "enable_vlan_interfaces = \n"
    } else {
        "enable_vlan_interfaces = all\n"
    });

    let image = exec_word_safe("ironic agent image", &cfg.agent_image)?;
    let mut env = String::new();
    for (names, value) in [
        (["HTTP_PROXY", "http_proxy"], &cfg.http_proxy),
        (["HTTPS_PROXY", "https_proxy"], &cfg.https_proxy),
        (["NO_PROXY", "no_proxy"], &cfg.no_proxy),
    ] {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
            let v = unit_safe("proxy setting", v)?;
            for n in names {
                env.push_str(&format!("Environment={n}={v}\n"));
            }
        }
    }
    let unit = format!(include_str!("../../templates/ironic/ironic-agent.service"), environment = env, image = image);
    let fragment = json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": [{
            "path": "/etc/ironic-python-agent.conf",
            "mode": 0o644,
            "overwrite": true,
            "contents": {"source": crate::content::ignition::data_url(conf.as_bytes())}
        }]},
        "systemd": {"units": [{"name": "ironic-agent.service", "enabled": true, "contents": unit}]}
    });
    Ok(Value::to_string(&fragment))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> IronicConfig {
        IronicConfig {
            base_url: "https://10.0.0.5".into(),
            inspector_url: Some("https://10.0.0.5".into()),
            agent_image: "quay.io/x/ipa:1".into(),
            http_proxy: Some("http://p:3128".into()),
            https_proxy: None,
            no_proxy: None,
            has_static_network: false,
        }
    }

    #[test]
    fn fragment_has_conf_and_enabled_unit() {
        let v: Value = serde_json::from_str(&ignition_fragment(&cfg()).unwrap()).unwrap();
        let src = v["storage"]["files"][0]["contents"]["source"].as_str().unwrap();
        let conf = String::from_utf8(crate::content::ignition::decode_data_url(src).unwrap()).unwrap();
        assert!(conf.contains("api_url = https://10.0.0.5:6385\n"), "{conf}");
        assert!(conf.contains("inspection_callback_url = https://10.0.0.5:5050/v1/continue\n"), "{conf}");
        assert!(conf.contains("enable_vlan_interfaces = all\n"));
        let unit = v["systemd"]["units"][0]["contents"].as_str().unwrap();
        assert!(unit.contains("quay.io/x/ipa:1") && unit.contains("Environment=HTTP_PROXY=http://p:3128"), "{unit}");
        assert_eq!(v["systemd"]["units"][0]["enabled"], true);
    }

    #[test]
    fn static_network_empties_vlan_interfaces_and_ipv6_urls_work() {
        let mut c = cfg();
        c.has_static_network = true;
        c.base_url = "https://[fd00::5]".into();
        let v: Value = serde_json::from_str(&ignition_fragment(&c).unwrap()).unwrap();
        let src = v["storage"]["files"][0]["contents"]["source"].as_str().unwrap();
        let conf = String::from_utf8(crate::content::ignition::decode_data_url(src).unwrap()).unwrap();
        assert!(conf.contains("enable_vlan_interfaces = \n"));
        assert!(conf.contains("api_url = https://[fd00::5]:6385\n"), "{conf}");
    }

    /// The conf's `api_url` and `inspection_callback_url` for these URLs.
    fn conf_urls(base: &str, inspector: Option<&str>) -> (String, Option<String>) {
        let mut c = cfg();
        c.base_url = base.into();
        c.inspector_url = inspector.map(str::to_string);
        let v: Value = serde_json::from_str(&ignition_fragment(&c).unwrap()).unwrap();
        let src = v["storage"]["files"][0]["contents"]["source"].as_str().unwrap();
        let conf = String::from_utf8(crate::content::ignition::decode_data_url(src).unwrap()).unwrap();
        let value = |key: &str| conf.lines().find_map(|l| l.strip_prefix(key)).map(str::to_string);
        (value("api_url = ").unwrap(), value("inspection_callback_url = "))
    }

    #[test]
    fn a_port_the_url_names_is_kept_even_the_schemes_default() {
        // The scheme's default port is the port: written or not, the URL means that one.
        assert_eq!(conf_urls("https://ironic.example:443", None).0, "https://ironic.example");
        assert_eq!(conf_urls("http://host:80/ironic", None).0, "http://host/ironic");
        assert_eq!(conf_urls("https://[fd00::5]:443", None).0, "https://[fd00::5]");
        assert_eq!(conf_urls("https://user:pw@ironic.example:8443", None).0, "https://user:pw@ironic.example:8443");
        // No port written: ironic's.
        assert_eq!(conf_urls("https://user:pw@ironic.example", None).0, "https://user:pw@ironic.example:6385");
        assert_eq!(conf_urls("https://[fd00::5]/x", None).0, "https://[fd00::5]:6385/x");
        assert_eq!(
            conf_urls("https://a.example:443, https://b.example", None).0,
            "https://a.example,https://b.example:6385"
        );
    }

    #[test]
    fn an_inspector_url_that_ends_in_v1_continue_gets_it_once() {
        let callback = |u: &str| conf_urls("https://10.0.0.5", Some(u)).1.unwrap();
        assert_eq!(callback("https://10.0.0.5:5050/v1/continue"), "https://10.0.0.5:5050/v1/continue");
        assert_eq!(callback("https://10.0.0.5:5050/v1/continue/"), "https://10.0.0.5:5050/v1/continue");
        assert_eq!(callback("https://insp.example/v1/continue"), "https://insp.example:5050/v1/continue");
        assert_eq!(callback("https://insp.example:443/inspector"), "https://insp.example/inspector/v1/continue");
        assert_eq!(conf_urls("https://10.0.0.5", None).1, None);
    }

    #[test]
    fn a_dollar_in_a_url_is_doubled_for_oslo_config() {
        // The agent's config parser substitutes `$name`; `$$` is its literal `$`.
        let (api, callback) = conf_urls("https://ipa:pa$word@ironic.example/a$b", Some("https://insp.example/$x"));
        assert_eq!(api, "https://ipa:pa$$word@ironic.example:6385/a$$b");
        assert_eq!(callback.unwrap(), "https://insp.example:5050/$$x/v1/continue");
    }

    #[test]
    fn the_agent_container_shares_the_hosts_ipc_and_uts_namespaces() {
        // partprobe on multipath hosts waits on udev over semaphores a private IPC namespace hides.
        let v: Value = serde_json::from_str(&ignition_fragment(&cfg()).unwrap()).unwrap();
        let unit = v["systemd"]["units"][0]["contents"].as_str().unwrap();
        let run = unit.lines().find(|l| l.starts_with("ExecStart=/bin/podman run ")).unwrap();
        for flag in ["--ipc=host", "--uts=host", "--network host", "--privileged"] {
            assert!(run.contains(flag), "{flag} in {run}");
        }
    }

    #[test]
    fn image_priority() {
        let d = IronicDefaults::default();
        assert_eq!(agent_image(Some("a"), Some("b"), "x86_64", &d), "a");
        assert_eq!(agent_image(None, Some("b"), "x86_64", &d), "b");
        assert_eq!(agent_image(None, None, "x86_64", &d), DEFAULT_IRONIC_AGENT_IMAGE);
        assert_eq!(agent_image(None, None, "arm64", &d), DEFAULT_IRONIC_AGENT_IMAGE_ARM);
        let d = IronicDefaults { agent_image: Some("env".into()), ..Default::default() };
        assert_eq!(agent_image(None, None, "x86_64", &d), "env");
    }

    #[test]
    fn bad_values_are_refused() {
        let mut c = cfg();
        c.agent_image = "img\nExecStart=evil".into();
        assert!(ignition_fragment(&c).is_err());
        let mut c = cfg();
        c.base_url = "ftp://x".into();
        assert!(ignition_fragment(&c).is_err());
        // The agent would call https://insp:5050/x?a=b/v1/continue.
        for (base, inspector) in [("https://ironic?a=b", None), ("https://ironic", Some("https://insp/x#f"))] {
            let mut c = cfg();
            c.base_url = base.into();
            c.inspector_url = inspector.map(str::to_string);
            let e = ignition_fragment(&c).unwrap_err().to_string();
            assert!(e.contains("a query or fragment is not allowed"), "{e}");
        }
    }
}
