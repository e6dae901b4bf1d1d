//! The ironic agent's configuration (`bootstream::content::ironic`) read by its real consumer:
//! ironic-python-agent from PyPI, in a venv (`target/ipa-venv`, made by `.ci/test`; or the python that
//! `BOOTSTREAM_IPA_PYTHON` names). For each variant the discovery Ignition config is rendered with the
//! ironic fragment merged in, as a host receives it; `/etc/ironic-python-agent.conf` is taken from it
//! (its `data:` URL decoded by Python's own handler) and put where `ironic-agent.service` mounts it in
//! the agent's container; `ipa_conf_check.py` beside this file then loads it with the agent's own
//! option definitions (oslo.config) the way the agent image starts the agent (`--config-dir
//! /etc/ironic-python-agent`) and reports unknown options, bad values and what the agent makes of it:
//! the effective options, the API URLs it heartbeats to, the URLs it posts inspection data to and
//! where its HTTP client connects for each.
//!
//! Without the venv these tests fail, saying how to make it; they do not skip.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use bootstream::content::ignition::{DiscoveryInput, Proxy, decode_data_url, render_discovery_ignition};
use bootstream::content::ironic::{IronicConfig, ignition_fragment};
use serde_json::{Value, json};

const CONF_PATH: &str = "/etc/ironic-python-agent.conf";
/// The agent image's configuration folder: its entry point is
/// `ironic-python-agent --config-dir /etc/ironic-python-agent`, which reads the `*.conf` files there.
const AGENT_CONFIG_DIR: &str = "/etc/ironic-python-agent";

/// The venv's python, checked once: it must import the agent.
fn ipa_python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let (python, from) = match std::env::var_os("BOOTSTREAM_IPA_PYTHON") {
            Some(p) => (PathBuf::from(p), "BOOTSTREAM_IPA_PYTHON"),
            None => (common::repo().join("target/ipa-venv/bin/python"), "the default, target/ipa-venv"),
        };
        let how = "`bash .ci/test` makes it; by hand, from the repository: /usr/bin/python3 -m venv target/ipa-venv \
                   && target/ipa-venv/bin/pip install --only-binary=:all: -r .ci/ipa-requirements.txt \
                   (or set BOOTSTREAM_IPA_PYTHON to the python of a venv holding that)";
        let out = Command::new(&python)
            .args([
                "-c",
                "import ironic_python_agent, importlib.metadata as m; print(m.version('ironic-python-agent'))",
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!("ironic-python-agent's venv is missing: {} ({from}): {e}; {how}", python.display())
            });
        assert!(
            out.status.success(),
            "{} ({from}) cannot import ironic_python_agent: {}; {how}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        // The version .ci/ipa-requirements.txt pins, or the venv is an old one.
        let pins = std::fs::read_to_string(common::repo().join(".ci/ipa-requirements.txt")).unwrap();
        let pinned = pins.lines().find_map(|l| l.strip_prefix("ironic-python-agent==")).expect("the agent's pin");
        let found = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            found.trim(),
            pinned,
            "{} ({from}) has another ironic-python-agent than the pinned one; {how}",
            python.display()
        );
        python
    })
}

fn checker() -> PathBuf {
    common::repo().join("tests/it/content/ipa_conf_check.py")
}

/// What a host receives: the discovery config with the ironic fragment of `cfg` merged in.
fn host_config(cfg: &IronicConfig) -> Value {
    let mut input = DiscoveryInput::new(
        "0b8a7d4e-2f5c-4a49-9d3e-5c1f0e7a6b21",
        "http://10.0.2.2:8080",
        r#"{"auths":{"quay.io":{"auth":"dXNlcjpwYXNz"}}}"#,
    );
    if cfg.http_proxy.is_some() || cfg.https_proxy.is_some() || cfg.no_proxy.is_some() {
        input.proxy = Some(Proxy {
            http_proxy: cfg.http_proxy.clone(),
            https_proxy: cfg.https_proxy.clone(),
            no_proxy: cfg.no_proxy.clone(),
        });
    }
    input.internal_ignition_override = Some(ignition_fragment(cfg).expect("the ironic fragment"));
    serde_json::from_str(&render_discovery_ignition(&input).expect("the discovery config")).unwrap()
}

/// The conf's `data:` URL in `config`, and the name the agent finds it under in its container (from
/// the unit's `-v /etc/ironic-python-agent.conf:<dst>` mount, which must land in its config folder).
fn conf_as_mounted(config: &Value) -> (String, String) {
    let file = config["storage"]["files"]
        .as_array()
        .and_then(|fs| fs.iter().find(|f| f["path"] == CONF_PATH))
        .unwrap_or_else(|| panic!("no {CONF_PATH} in {config:#}"));
    let source = file["contents"]["source"].as_str().expect("contents.source").to_string();
    let unit = config["systemd"]["units"]
        .as_array()
        .and_then(|us| us.iter().find(|u| u["name"] == "ironic-agent.service"))
        .unwrap_or_else(|| panic!("no ironic-agent.service in {config:#}"));
    assert_eq!(unit["enabled"], true);
    let contents = unit["contents"].as_str().unwrap();
    let run = contents.lines().find(|l| l.starts_with("ExecStart=")).unwrap_or_else(|| panic!("{contents}"));
    let words: Vec<&str> = run.split_whitespace().collect();
    let dst = words
        .windows(2)
        .find_map(|w| (w[0] == "-v").then(|| w[1].strip_prefix(&format!("{CONF_PATH}:"))).flatten())
        .unwrap_or_else(|| panic!("{CONF_PATH} is not mounted into the container: {run}"));
    let dst = dst.split(':').next().unwrap();
    let (dir, name) = dst.rsplit_once('/').unwrap();
    assert_eq!(dir, AGENT_CONFIG_DIR, "the conf must be mounted where the agent reads its config: {run}");
    (source, name.to_string())
}

/// The checker's report on the conf `cfg` gives a host; asserts that the agent finds nothing wrong.
fn agent_reads(cfg: &IronicConfig) -> Value {
    let config = host_config(cfg);
    let (source, name) = conf_as_mounted(&config);
    let out = Command::new(ipa_python())
        .arg(checker())
        .args(["--as", &name, &source])
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", ipa_python().display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(matches!(out.status.code(), Some(0 | 1)), "ipa_conf_check.py failed ({}):\n{stderr}", out.status);
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("the report ({e}):\n{stdout}\nstderr:\n{stderr}"));
    let context =
        format!("ironic-python-agent {} on\n{}\nreport: {report:#}", report["ipa_version"], report["conf_text"]);
    assert!(report.get("parse_error").is_none(), "the agent cannot load the conf: {context}");
    for finding in ["unknown", "duplicates", "deprecated", "type_errors"] {
        assert_eq!(report[finding], json!([]), "{finding}: {context}");
    }
    assert!(out.status.success(), "{stderr}\n{context}");
    // Two decoders of the same data: URL (Python's and bootstream's) agree.
    let ours = String::from_utf8(decode_data_url(&source).unwrap()).unwrap();
    assert_eq!(report["conf_text"], ours.as_str());
    report
}

fn base() -> IronicConfig {
    IronicConfig {
        base_url: "https://10.0.0.5".into(),
        inspector_url: Some("https://10.0.0.5".into()),
        agent_image: "quay.io/x/ipa:1".into(),
        http_proxy: None,
        https_proxy: None,
        no_proxy: None,
        has_static_network: false,
    }
}

fn endpoint(scheme: &str, host: &str, port: u16, path: &str) -> Value {
    json!({"scheme": scheme, "host": host, "port": port, "path": path})
}

#[test]
fn ipa_reads_ironics_and_the_inspectors_default_ports() {
    let r = agent_reads(&base());
    assert_eq!(
        r["set"],
        json!({
            "DEFAULT.api_url": "https://10.0.0.5:6385",
            "DEFAULT.inspection_callback_url": "https://10.0.0.5:5050/v1/continue",
            "DEFAULT.insecure": true,
            "DEFAULT.enable_vlan_interfaces": "all",
        }),
        "every option we set, as the agent converts it: {r:#}"
    );
    assert_eq!(r["api_urls"], json!(["https://10.0.0.5:6385"]));
    assert_eq!(r["inspection_urls"], json!(["https://10.0.0.5:5050/v1/continue"]));
    assert_eq!(r["connects_to"]["https://10.0.0.5:6385"], endpoint("https", "10.0.0.5", 6385, ""));
    assert_eq!(
        r["connects_to"]["https://10.0.0.5:5050/v1/continue"],
        endpoint("https", "10.0.0.5", 5050, "/v1/continue")
    );
    // Not ours to set: the agent image's own defaults choose the inspection collectors.
    assert_eq!(r["effective"]["inspection_collectors"], Value::Null);
}

#[test]
fn ipa_reads_the_conf_of_an_infraenv_with_a_proxy_as_without_one() {
    // The proxy reaches the agent through its unit's environment, never through its conf.
    let mut cfg = base();
    cfg.http_proxy = Some("http://proxy.example:3128".into());
    cfg.https_proxy = Some("http://proxy.example:3129".into());
    cfg.no_proxy = Some("10.0.0.0/8,.cluster.local".into());
    let r = agent_reads(&cfg);
    assert_eq!(r["conf_text"], agent_reads(&base())["conf_text"]);
    let unit = host_config(&cfg)["systemd"]["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "ironic-agent.service")
        .unwrap()["contents"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(unit.contains("Environment=HTTPS_PROXY=http://proxy.example:3129\n"), "{unit}");
}

#[test]
fn ipa_brings_up_no_vlan_interface_of_its_own_with_static_network_config() {
    let mut cfg = base();
    cfg.has_static_network = true;
    let r = agent_reads(&cfg);
    // An empty string, the agent's own default: no VLAN interfaces (with `all`, every one LLDP reports).
    assert_eq!(r["set"]["DEFAULT.enable_vlan_interfaces"], "");
    assert_eq!(r["effective"]["api_url"], "https://10.0.0.5:6385");
}

#[test]
fn ipa_reads_bracketed_ipv6_urls() {
    let mut cfg = base();
    cfg.base_url = "https://[fd00::5]".into();
    cfg.inspector_url = Some("https://[fd00::5]".into());
    let r = agent_reads(&cfg);
    assert_eq!(r["effective"]["api_url"], "https://[fd00::5]:6385");
    assert_eq!(r["effective"]["inspection_callback_url"], "https://[fd00::5]:5050/v1/continue");
    assert_eq!(r["connects_to"]["https://[fd00::5]:6385"], endpoint("https", "fd00::5", 6385, ""));
    assert_eq!(
        r["connects_to"]["https://[fd00::5]:5050/v1/continue"],
        endpoint("https", "fd00::5", 5050, "/v1/continue")
    );
}

#[test]
fn ipa_tries_each_of_several_urls() {
    // The agent splits on commas and keeps blanks, so none may reach the conf.
    let mut cfg = base();
    cfg.base_url = "https://10.0.0.5, https://[fd00::5]:8443".into();
    cfg.inspector_url = Some("https://10.0.0.5 ,https://[fd00::5]".into());
    let r = agent_reads(&cfg);
    assert_eq!(r["effective"]["api_url"], "https://10.0.0.5:6385,https://[fd00::5]:8443");
    assert_eq!(r["api_urls"], json!(["https://10.0.0.5:6385", "https://[fd00::5]:8443"]));
    assert_eq!(
        r["inspection_urls"],
        json!(["https://10.0.0.5:5050/v1/continue", "https://[fd00::5]:5050/v1/continue"])
    );
    assert_eq!(r["connects_to"]["https://[fd00::5]:8443"], endpoint("https", "fd00::5", 8443, ""));
}

#[test]
fn ipa_connects_to_the_port_a_url_names_even_the_schemes_default() {
    let mut cfg = base();
    cfg.base_url = "https://ironic.example:443,http://host:80/ironic".into();
    cfg.inspector_url = Some("https://inspector.example:8443/v1/continue".into());
    let r = agent_reads(&cfg);
    // The default port is left out of the text (the URL means it all the same), never replaced by 6385.
    assert_eq!(r["api_urls"], json!(["https://ironic.example", "http://host/ironic"]));
    assert_eq!(r["connects_to"]["https://ironic.example"], endpoint("https", "ironic.example", 443, ""));
    assert_eq!(r["connects_to"]["http://host/ironic"], endpoint("http", "host", 80, "/ironic"));
    // An inspector URL that already ends in /v1/continue gets it once.
    assert_eq!(r["inspection_urls"], json!(["https://inspector.example:8443/v1/continue"]));
    assert_eq!(
        r["connects_to"]["https://inspector.example:8443/v1/continue"],
        endpoint("https", "inspector.example", 8443, "/v1/continue")
    );

    cfg.inspector_url = Some("http://host:80/inspector".into());
    let r = agent_reads(&cfg);
    assert_eq!(r["inspection_urls"], json!(["http://host/inspector/v1/continue"]));
    assert_eq!(
        r["connects_to"]["http://host/inspector/v1/continue"],
        endpoint("http", "host", 80, "/inspector/v1/continue")
    );
}

#[test]
fn without_an_inspector_ipa_sends_inspection_data_to_ironic_itself() {
    // No inspector URL: no inspection_callback_url in the conf, so the agent's is unset (None: the
    // host's kernel command line has no ipa-inspection-callback-url either), and when inspection runs
    // (the agent image's defaults set inspection_collectors) the agent posts to each API URL +
    // /v1/continue_inspection, ironic's own inspection endpoint.
    for inspector in [None, Some(""), Some("  ")] {
        let mut cfg = base();
        cfg.base_url = "https://10.0.0.5,https://[fd00::5]".into();
        cfg.inspector_url = inspector.map(str::to_string);
        let r = agent_reads(&cfg);
        assert!(r["sections"]["DEFAULT"].get("inspection_callback_url").is_none(), "{inspector:?}: {r:#}");
        assert_eq!(r["effective"]["inspection_callback_url"], Value::Null, "{inspector:?}");
        assert_eq!(r["effective"]["api_url"], "https://10.0.0.5:6385,https://[fd00::5]:6385");
        assert_eq!(
            r["inspection_urls"],
            json!(["https://10.0.0.5:6385/v1/continue_inspection", "https://[fd00::5]:6385/v1/continue_inspection"]),
            "{inspector:?}"
        );
    }
}

#[test]
fn ipa_reads_a_dollar_in_a_url_as_a_dollar() {
    // oslo.config substitutes `$name` in values with other options' values (`$$` is a `$`): left
    // alone, `$b` stopped the agent at start (no option b) and `$insecure` became `True`.
    let mut cfg = base();
    cfg.base_url = "https://ipa:pa$word@ironic.example/a$b".into();
    cfg.inspector_url = Some("https://inspector.example/x$insecure".into());
    let r = agent_reads(&cfg);
    assert_eq!(r["api_urls"], json!(["https://ipa:pa$word@ironic.example:6385/a$b"]));
    assert_eq!(r["inspection_urls"], json!(["https://inspector.example:5050/x$insecure/v1/continue"]));
}
