//! Discovery Ignition config (`bootstream::content::ignition`) and initrd archives
//! (`bootstream::formats::initrd`): rendering, overrides, merge semantics, size limits, and
//! interoperability with coreos-installer and GNU cpio.
//!
//! The interoperability tests need `coreos-installer` (`cargo install coreos-installer`) and
//! `cpio` (Debian package `cpio`); they fail, rather than skip, when those are missing.

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bootstream::content::ignition::{
    self, ConfigOrigin, DiscoveryInput, IGNITION_ARCHIVE_LIMIT, IgnitionError, Proxy, SpecVersion, check_archive_size,
    decode_data_url, merge_override, parse_config, render_discovery_config, render_discovery_ignition,
};
use bootstream::formats::initrd::{self, ArchiveBuilder, InitrdError, ReadLimits, ignition_archive, read_initrd};
use proptest::prelude::*;
use serde_json::{Value, json};

const ID: &str = "0b8a7d4e-2f5c-4a49-9d3e-5c1f0e7a6b21";
const PULL_SECRET: &str = r#"{"auths":{"quay.io":{"auth":"dXNlcjpwYXNz","email":"x@example.com"}}}"#;
const TRUST_BUNDLE: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

fn input() -> DiscoveryInput {
    DiscoveryInput::new(ID, "http://10.0.2.2:8080", PULL_SECRET)
}

fn full_input() -> DiscoveryInput {
    let mut i = input();
    i.ssh_authorized_key = Some("ssh-ed25519 AAAAC3 one@example\n\n  ssh-rsa AAAAB3 two@example  \n".into());
    i.proxy = Some(Proxy {
        http_proxy: Some("http://11.11.11.33".into()),
        https_proxy: Some("http://22.22.22.55".into()),
        no_proxy: Some("example.com, .cluster.local,,10.0.0.0/8".into()),
    });
    i.additional_trust_bundle = Some(TRUST_BUNDLE.into());
    i.ca_cert_pem = Some(TRUST_BUNDLE.into());
    i.agent_token = Some("eyJhbGciOi.eyJpbmZyYSI.sig".into());
    i
}

fn render(i: &DiscoveryInput) -> Value {
    let text = render_discovery_ignition(i).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The files of a rendered config, path → decoded contents.
fn files(config: &Value) -> BTreeMap<String, Vec<u8>> {
    config["storage"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let source = f["contents"]["source"].as_str().unwrap_or("data:,");
            (f["path"].as_str().unwrap().to_owned(), decode_data_url(source).unwrap())
        })
        .collect()
}

fn file_entry<'a>(config: &'a Value, path: &str) -> Option<&'a Value> {
    config["storage"]["files"].as_array()?.iter().find(|f| f["path"] == path)
}

fn unit<'a>(config: &'a Value, name: &str) -> Option<&'a Value> {
    config["systemd"]["units"].as_array()?.iter().find(|u| u["name"] == name)
}

fn shared_dir() -> PathBuf {
    common::compat_dir()
}

fn example_override() -> String {
    let path = shared_dir().join("fixtures/assisted/examples/infraEnv.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let doc: Value = yaml_serde::from_str(&text).unwrap();
    doc["spec"]["ignitionConfigOverride"].as_str().expect("ignitionConfigOverride").to_owned()
}

// ---------------------------------------------------------------------------------------------
// Rendering

#[test]
fn minimal_config_declares_3_1_and_parses_as_such() {
    let text = render_discovery_ignition(&input()).unwrap();
    let (parsed, warnings) = ignition_config::Config::parse_str(&text).unwrap();
    assert!(matches!(parsed, ignition_config::Config::V3_1(_)), "{parsed:?}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(!text.contains('\n'), "not compact");
}

#[test]
fn agent_and_selinux_units() {
    let config = render(&input());
    let agent = unit(&config, "agent.service").expect("agent.service");
    assert_eq!(agent["enabled"], true);
    let contents = agent["contents"].as_str().unwrap();
    assert!(contents.contains("Restart=always\n"), "{contents}");
    assert!(
        contents.contains(&format!(
            "ExecStart=/usr/local/bin/agent --url http://10.0.2.2:8080 --infra-env-id {ID} --agent-version {} --insecure=false\n",
            ignition::DEFAULT_AGENT_IMAGE
        )),
        "{contents}"
    );
    assert!(!contents.contains("Environment="), "no proxy, no token: {contents}");
    assert!(!contents.contains("--cacert"), "{contents}");
    assert_eq!(unit(&config, "selinux.service").unwrap()["enabled"], true);

    let files = files(&config);
    assert_eq!(files[ignition::PULL_SECRET_PATH], PULL_SECRET.as_bytes());
    assert_eq!(file_entry(&config, ignition::PULL_SECRET_PATH).unwrap()["mode"], 0o644);
    assert_eq!(file_entry(&config, ignition::AGENT_PULL_SCRIPT_PATH).unwrap()["mode"], 0o755);
    assert!(files[ignition::MOTD_PATH].starts_with(b"\nThis host was booted"));
    assert!(String::from_utf8_lossy(&files[ignition::SELINUX_MODULE_PATH]).contains("module bootstream_agent 1.0;"));
}

#[test]
fn optional_parts_absent_when_unset() {
    let config = render(&input());
    assert!(config["ignition"].get("proxy").is_none(), "{config}");
    assert!(config.get("passwd").is_none(), "{config}");
    let files = files(&config);
    for path in [ignition::ADDITIONAL_TRUST_BUNDLE_PATH, ignition::SERVICE_CA_CERT_PATH, ignition::PROFILE_PROXY_PATH] {
        assert!(!files.contains_key(path), "{path} present");
    }

    // Empty strings and keys made only of blank lines count as unset.
    let mut i = input();
    i.ssh_authorized_key = Some("\n  \n".into());
    i.additional_trust_bundle = Some(String::new());
    i.proxy = Some(Proxy { http_proxy: Some(String::new()), https_proxy: None, no_proxy: Some("a,b".into()) });
    i.ignition_config_override = Some("  ".into());
    assert_eq!(render(&i), config);
}

#[test]
fn optional_parts_present_when_set() {
    let config = render(&full_input());
    assert_eq!(
        config["ignition"]["proxy"],
        json!({"httpProxy": "http://11.11.11.33", "httpsProxy": "http://22.22.22.55",
               "noProxy": ["example.com", ".cluster.local", "10.0.0.0/8"]})
    );
    assert_eq!(
        config["passwd"]["users"],
        json!([{"name": "core", "passwordHash": "!", "groups": ["sudo"],
                "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3 one@example", "ssh-rsa AAAAB3 two@example"]}])
    );
    let files = files(&config);
    assert_eq!(files[ignition::ADDITIONAL_TRUST_BUNDLE_PATH], TRUST_BUNDLE.as_bytes());
    assert_eq!(files[ignition::SERVICE_CA_CERT_PATH], TRUST_BUNDLE.as_bytes());
    let profile = String::from_utf8(files[ignition::PROFILE_PROXY_PATH].clone()).unwrap();
    for line in [
        "export HTTP_PROXY='http://11.11.11.33'",
        "export http_proxy='http://11.11.11.33'",
        "export HTTPS_PROXY='http://22.22.22.55'",
        "export https_proxy='http://22.22.22.55'",
        "export NO_PROXY='example.com,.cluster.local,10.0.0.0/8'",
        "export no_proxy='example.com,.cluster.local,10.0.0.0/8'",
    ] {
        assert!(profile.lines().any(|l| l == line), "{line} missing from {profile}");
    }
    assert_eq!(file_entry(&config, ignition::PROFILE_PROXY_PATH).unwrap()["mode"], 0o644);

    let agent = unit(&config, "agent.service").unwrap()["contents"].as_str().unwrap().to_owned();
    for line in [
        "Environment=HTTP_PROXY=http://11.11.11.33",
        "Environment=https_proxy=http://22.22.22.55",
        "Environment=NO_PROXY=example.com,.cluster.local,10.0.0.0/8",
        "Environment=PULL_SECRET_TOKEN=eyJhbGciOi.eyJpbmZyYSI.sig",
    ] {
        assert!(agent.lines().any(|l| l == line), "{line} missing from {agent}");
    }
    assert!(agent.contains(&format!("--cacert {}", ignition::SERVICE_CA_CERT_PATH)), "{agent}");
}

#[test]
fn percent_signs_are_escaped_for_systemd() {
    let mut i = input();
    i.proxy = Some(Proxy { http_proxy: Some("http://user:p%40ss@proxy:3128".into()), ..Proxy::default() });
    let config = render(&i);
    let agent = unit(&config, "agent.service").unwrap()["contents"].as_str().unwrap();
    assert!(agent.contains("Environment=HTTP_PROXY=http://user:p%%40ss@proxy:3128\n"), "{agent}");
    // Ignition and the shell get the value as it is.
    assert_eq!(config["ignition"]["proxy"]["httpProxy"], "http://user:p%40ss@proxy:3128");
}

#[test]
fn no_nulls_anywhere() {
    let mut i = full_input();
    i.ignition_config_override = Some(
        json!({"ignition": {"version": "3.2.0"},
               "storage": {"files": [{"path": "/etc/x", "contents": {"source": "data:,x"}}]},
               "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 three"]}]}})
        .to_string(),
    );
    let text = render_discovery_ignition(&i).unwrap();
    assert!(!text.contains("null"), "{text}");
    assert!(!text.contains("{}"), "{text}");
}

#[test]
fn rendering_is_deterministic() {
    let mut i = full_input();
    i.ignition_config_override = Some(example_override());
    let first = render_discovery_ignition(&i).unwrap();
    for _ in 0..5 {
        assert_eq!(render_discovery_ignition(&i).unwrap(), first);
    }
    assert_eq!(ignition_archive(first.as_bytes()), ignition_archive(first.as_bytes()));
}

// ---------------------------------------------------------------------------------------------
// Overrides

#[test]
fn example_infraenv_override_merges() {
    let mut i = input();
    i.ignition_config_override = Some(example_override());
    let text = render_discovery_ignition(&i).unwrap();
    let config: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(config["ignition"]["version"], "3.1.0");
    assert_eq!(files(&config)["/etc/someconfig"], b"helpimtrappedinaswaggerspec");
    // The base config is intact.
    assert!(unit(&config, "agent.service").is_some());
    assert!(files(&config).contains_key(ignition::PULL_SECRET_PATH));
    let (parsed, warnings) = ignition_config::Config::parse_str(&text).unwrap();
    assert!(matches!(parsed, ignition_config::Config::V3_1(_)) && warnings.is_empty());
}

#[test]
fn override_3_2_makes_output_3_2() {
    let mut i = input();
    i.ignition_config_override = Some(
        json!({"ignition": {"version": "3.2.0"},
               "storage": {"luks": [{"name": "data", "device": "/dev/sdb"}]}})
        .to_string(),
    );
    let text = render_discovery_ignition(&i).unwrap();
    let (parsed, warnings) = ignition_config::Config::parse_str(&text).unwrap();
    let ignition_config::Config::V3_2(parsed) = parsed else { panic!("not 3.2: {text}") };
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(parsed.storage.unwrap().luks.unwrap()[0].name, "data");
}

#[test]
fn user_override_changes_base_entries() {
    let mut i = full_input();
    i.ignition_config_override = Some(
        json!({"ignition": {"version": "3.1.0", "proxy": {"noProxy": ["extra.example"]}},
               "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3 one@example", "ssh-ed25519 three"]}]},
               "systemd": {"units": [{"name": "agent.service",
                                      "dropins": [{"name": "10-debug.conf", "contents": "[Service]\nEnvironment=DEBUG=1\n"}]},
                                     {"name": "selinux.service", "enabled": false}]},
               "storage": {"files": [{"path": "/etc/motd", "contents": {"source": "data:,custom"}},
                                     {"path": "/usr/local/bin/bootstream-agent-pull", "mode": 448}],
                           "links": [{"path": "/root/.docker/config.json", "target": "/etc/pull-secret.json"}]}})
        .to_string(),
    );
    let config = render(&i);
    assert_eq!(
        config["ignition"]["proxy"]["noProxy"],
        json!(["example.com", ".cluster.local", "10.0.0.0/8", "extra.example"])
    );
    assert_eq!(
        config["passwd"]["users"][0]["sshAuthorizedKeys"],
        json!(["ssh-ed25519 AAAAC3 one@example", "ssh-rsa AAAAB3 two@example", "ssh-ed25519 three"])
    );
    assert_eq!(config["passwd"]["users"][0]["passwordHash"], "!");
    let agent = unit(&config, "agent.service").unwrap();
    assert!(agent["contents"].as_str().unwrap().contains("ExecStart="));
    assert_eq!(agent["dropins"][0]["name"], "10-debug.conf");
    assert_eq!(unit(&config, "selinux.service").unwrap()["enabled"], false);
    let files = files(&config);
    assert_eq!(files["/etc/motd"], b"custom");
    let pull = file_entry(&config, ignition::AGENT_PULL_SCRIPT_PATH).unwrap();
    assert_eq!(pull["mode"], 448);
    assert_eq!(pull["overwrite"], true, "unset fields keep the base value");
    // A link at the pull secret's path replaces the file (one key space for all nodes).
    assert!(!files.contains_key(ignition::PULL_SECRET_PATH));
    assert_eq!(config["storage"]["links"][0]["target"], "/etc/pull-secret.json");
}

#[test]
fn internal_override_disables_agent_and_is_merged_first() {
    let mut i = input();
    i.internal_ignition_override = Some(
        json!({"ignition": {"version": "3.1.0"},
               "storage": {"files": [{"path": "/etc/ironic", "contents": {"source": "data:,internal"}},
                                     {"path": "/etc/both", "contents": {"source": "data:,internal"}}]},
               "systemd": {"units": [{"name": "ironic-agent.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n"}]}})
        .to_string(),
    );
    i.ignition_config_override = Some(
        json!({"ignition": {"version": "3.1.0"},
               "storage": {"files": [{"path": "/etc/both", "contents": {"source": "data:,user"}}]}})
        .to_string(),
    );
    let config = render(&i);
    assert_eq!(unit(&config, "agent.service").unwrap()["enabled"], false);
    assert!(unit(&config, "ironic-agent.service").is_some());
    let files = files(&config);
    assert_eq!(files["/etc/ironic"], b"internal");
    assert_eq!(files["/etc/both"], b"user");
}

#[test]
fn merge_override_on_a_typed_base() {
    let base = render_discovery_config(&input()).unwrap();
    assert_eq!(SpecVersion::of(&base), Some(SpecVersion::V3_1));
    let merged = merge_override(&base, &example_override()).unwrap();
    let files = merged.storage.as_ref().unwrap().files.as_ref().unwrap();
    assert_eq!(files.last().unwrap().path, "/etc/someconfig");
    assert_eq!(files.len(), base.storage.as_ref().unwrap().files.as_ref().unwrap().len() + 1);
    // Merging the same override twice changes nothing more.
    let again = merge_override(&merged, &example_override()).unwrap();
    assert_eq!(again, merged);
    assert_eq!(ignition::to_compact_json(&again).unwrap(), ignition::to_compact_json(&merged).unwrap());
}

fn override_error(json: &str) -> IgnitionError {
    let mut i = input();
    i.ignition_config_override = Some(json.to_owned());
    match render_discovery_ignition(&i) {
        Ok(text) => panic!("override accepted: {json}\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn bad_overrides_are_refused_with_the_reason() {
    let e = override_error("{not json");
    assert!(matches!(e, IgnitionError::NotJson { origin: ConfigOrigin::UserOverride, .. }), "{e:?}");
    assert!(e.to_string().starts_with("ignition config override (ignitionConfigOverride) is not valid JSON"), "{e}");

    for version in ["2.2.0", "3.0.0", "3.3.0", "3.4.0", "3.1", "3.1.0-experimental"] {
        let e = override_error(&json!({"ignition": {"version": version}}).to_string());
        assert!(matches!(&e, IgnitionError::UnsupportedVersion { version: v, .. } if v == version), "{e:?}");
        assert!(e.to_string().contains("supported versions are 3.1.0 and 3.2.0"), "{e}");
    }
    for missing in [json!({}), json!({"ignition": {}}), json!({"ignition": {"version": 3}}), json!([])] {
        let e = override_error(&missing.to_string());
        assert!(
            matches!(e, IgnitionError::MissingVersion { .. } | IgnitionError::NotAnObject { .. }),
            "{missing}: {e:?}"
        );
    }

    let e = override_error(
        r#"{"ignition": {"version": "3.1.0"}, "storage": {"files": [{"path": "/etc/x", "mode": "0644"}]}}"#,
    );
    let IgnitionError::InvalidStructure { path, .. } = &e else { panic!("{e:?}") };
    assert_eq!(path, "storage.files[0].mode", "{e}");

    let e = override_error(r#"{"ignition": {"version": "3.1.0"}, "storage": {"files": [{"mode": 420}]}}"#);
    assert!(e.to_string().contains("storage.files[0]"), "{e}");

    let cases = [
        (json!({"storage": {"files": [{"path": "etc/x"}]}}), "storage.files[0].path", "not absolute"),
        (json!({"storage": {"files": [{"path": "/etc/../x"}]}}), "storage.files[0].path", "not clean"),
        (
            json!({"storage": {"files": [{"path": "/etc/x", "mode": 4096}]}}),
            "storage.files[0].mode",
            "not a valid mode",
        ),
        (
            json!({"storage": {"directories": [{"path": "/d", "mode": -1}]}}),
            "storage.directories[0].mode",
            "not a valid mode",
        ),
        (
            json!({"storage": {"files": [{"path": "/x", "contents": {"source": "ftp://h/x"}}]}}),
            "storage.files[0].contents.source",
            "not supported",
        ),
        (
            json!({"storage": {"files": [{"path": "/x", "contents": {"source": "data:,a b"}}]}}),
            "storage.files[0].contents.source",
            "invalid data URL",
        ),
        (
            json!({"storage": {"files": [{"path": "/x", "contents": {"source": "data:,x", "compression": "xz"}}]}}),
            "storage.files[0].contents.compression",
            "not supported",
        ),
        (json!({"storage": {"files": [{"path": "/x", "overwrite": true}]}}), "storage.files[0].overwrite", "source"),
        (
            json!({"storage": {"files": [{"path": "/x"}], "links": [{"path": "/x", "target": "/y"}]}}),
            "storage.links[0].path",
            "duplicate path",
        ),
        (json!({"systemd": {"units": [{"name": "agent"}]}}), "systemd.units[0].name", "unit type"),
        (
            json!({"systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.txt"}]}]}}),
            "systemd.units[0].dropins[0].name",
            ".conf",
        ),
        (json!({"ignition": {"proxy": {"httpsProxy": "socks5://p:1"}}}), "ignition.proxy.httpsProxy", "http or https"),
        (json!({"passwd": {"users": [{"name": "core"}, {"name": "core"}]}}), "passwd.users[1].name", "duplicate user"),
    ];
    for (mut doc, path, reason) in cases {
        doc.as_object_mut().unwrap().entry("ignition").or_insert(json!({}))["version"] = json!("3.1.0");
        let e = override_error(&doc.to_string());
        let IgnitionError::Invalid { origin, problems } = &e else { panic!("{doc}: {e:?}") };
        assert_eq!(*origin, ConfigOrigin::UserOverride, "{e}");
        assert!(
            problems.iter().any(|p| p.path == path && p.reason.contains(reason)),
            "{doc}: wanted {path}: …{reason}…, got {e}"
        );
        assert!(e.to_string().contains(path), "{e}");
    }
}

#[test]
fn unknown_fields_are_refused() {
    let e =
        override_error(r#"{"ignition": {"version": "3.1.0"}, "storage": {"files": [{"path": "/x", "contnets": {}}]}}"#);
    let IgnitionError::UnknownFields { paths, version, .. } = &e else { panic!("{e:?}") };
    assert_eq!(*version, SpecVersion::V3_1);
    assert_eq!(paths, &["storage.files[0].contnets"]);

    // LUKS exists from spec 3.2 on.
    let e = override_error(r#"{"ignition": {"version": "3.1.0"}, "storage": {"luks": [{"name": "x"}]}}"#);
    assert!(matches!(e, IgnitionError::UnknownFields { .. }), "{e:?}");
    assert!(e.to_string().contains("storage.luks"), "{e}");
}

#[test]
fn merged_config_is_validated() {
    // Valid on its own, but the file collides with the base config's agent.service unit.
    let e = override_error(
        r#"{"ignition": {"version": "3.1.0"}, "storage": {"files": [{"path": "/etc/systemd/system/agent.service", "contents": {"source": "data:,x"}}]}}"#,
    );
    let IgnitionError::Invalid { origin, problems } = &e else { panic!("{e:?}") };
    assert_eq!(*origin, ConfigOrigin::Merged);
    assert!(problems[0].reason.contains("systemd unit"), "{e}");
}

#[test]
fn parse_config_accepts_3_1_and_3_2_only() {
    assert_eq!(SpecVersion::of(&parse_config(r#"{"ignition":{"version":"3.1.0"}}"#).unwrap()), Some(SpecVersion::V3_1));
    assert_eq!(SpecVersion::of(&parse_config(r#"{"ignition":{"version":"3.2.0"}}"#).unwrap()), Some(SpecVersion::V3_2));
    assert!(parse_config(r#"{"ignition":{"version":"3.0.0"}}"#).is_err());
}

// ---------------------------------------------------------------------------------------------
// Size limits

/// Deterministic, incompressible bytes.
fn noise(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

#[test]
fn huge_override_exceeds_the_archive_limit() {
    use base64::Engine as _;
    let blob = base64::engine::general_purpose::STANDARD.encode(noise(300 * 1024));
    let mut i = input();
    i.ignition_config_override = Some(
        json!({"ignition": {"version": "3.1.0"},
               "storage": {"files": [{"path": "/var/blob", "contents": {"source": format!("data:;base64,{blob}")}}]}})
        .to_string(),
    );
    let text = render_discovery_ignition(&i).unwrap();
    let archive = ignition_archive(text.as_bytes());
    assert!(archive.len() > IGNITION_ARCHIVE_LIMIT, "{}", archive.len());
    let e = check_archive_size(archive.len(), 262_144).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "The ignition archive size ({} KiB) is over the maximum allowable size (256 KiB)",
            archive.len() / 1024
        )
    );
    assert!(matches!(ignition::sized_ignition_archive(&text, 262_144), Err(IgnitionError::ArchiveTooLarge { .. })));

    // A normal config fits.
    let small = render_discovery_ignition(&full_input()).unwrap();
    let archive = ignition::sized_ignition_archive(&small, 262_144).unwrap();
    assert_eq!(archive, ignition_archive(small.as_bytes()));
}

#[test]
fn archive_size_is_checked_against_the_embed_area() {
    assert!(check_archive_size(IGNITION_ARCHIVE_LIMIT, 262_144).is_ok());
    assert!(check_archive_size(100_000, 100_000).is_ok());
    let e = check_archive_size(100_001, 100_000).unwrap_err();
    assert!(matches!(e, IgnitionError::ArchiveExceedsEmbedArea { archive_len: 100_001, area_len: 100_000 }));
    let text = e.to_string();
    assert!(text.contains("(97 KiB, 100001 bytes)") && text.contains("(97 KiB, 100000 bytes"), "{text}");
    // The 256 KiB limit wins when both apply.
    assert!(matches!(check_archive_size(IGNITION_ARCHIVE_LIMIT + 1, 1024), Err(IgnitionError::ArchiveTooLarge { .. })));
}

// ---------------------------------------------------------------------------------------------
// initrd archives

#[test]
fn ignition_archive_gzip_header_and_padding() {
    let archive = ignition_archive(br#"{"ignition":{"version":"3.1.0"}}"#);
    // ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL OS=255 (spec-images §2.8). XFL is 4, "fastest":
    // a small archive is compressed at level 1, where assisted's Go default level writes 0.
    // Decoders do not read it (RFC 1952 §2.3.1).
    assert_eq!(archive[..10], [0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x04, 0xff]);
    assert_eq!(archive.len() % 4, 0);
    let files = read_initrd(&archive).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files["config.ign"], br#"{"ignition":{"version":"3.1.0"}}"#);

    let mut cpio = Vec::new();
    flate2::read::GzDecoder::new(&archive[..]).read_to_end(&mut cpio).unwrap();
    // newc header of the single member: ino 1, mode 0100644, uid/gid 0, nlink 1, mtime 0.
    assert!(
        cpio.starts_with(b"07070100000001000081a4000000000000000000000001"),
        "{}",
        String::from_utf8_lossy(&cpio[..110])
    );

    // No config, no member (like assisted-image-service).
    assert!(read_initrd(&ignition_archive(b"")).unwrap().is_empty());
}

#[test]
fn archive_round_trip() {
    let mut b = ArchiveBuilder::new();
    b.add_dir("etc").unwrap();
    b.add_dir("etc/coreos-firstboot-network").unwrap();
    b.add_file("etc/coreos-firstboot-network/eth0.nmconnection", 0o600, b"[connection]\n").unwrap();
    b.add_symlink("etc/link", "coreos-firstboot-network").unwrap();
    b.add_file("config.ign", 0o644, b"{}").unwrap();
    b.add_file("empty", 0o644, b"").unwrap();
    let archive = b.finish_gzip().unwrap();
    assert_eq!(archive, b.finish_gzip().unwrap(), "deterministic");
    let files = read_initrd(&archive).unwrap();
    assert_eq!(
        files.into_iter().collect::<Vec<_>>(),
        [
            ("config.ign".to_owned(), b"{}".to_vec()),
            ("empty".to_owned(), vec![]),
            ("etc/coreos-firstboot-network/eth0.nmconnection".to_owned(), b"[connection]\n".to_vec()),
        ]
    );
    let raw = b.finish_uncompressed().unwrap();
    assert_eq!(read_initrd(&raw).unwrap().len(), 3);
}

#[test]
fn concatenated_members_last_copy_wins() {
    let mut first = ArchiveBuilder::new();
    first.add_file("config.ign", 0o644, b"old").unwrap();
    first.add_file("other", 0o644, b"kept").unwrap();
    let mut second = ArchiveBuilder::new();
    second.add_file("config.ign", 0o644, b"new").unwrap();

    // uncompressed, NUL padding, gzip, more padding, uncompressed (4-aligned), gzip.
    let mut data = first.finish_uncompressed().unwrap();
    data.extend([0; 512]);
    data.extend(ignition_archive(b"gz1"));
    data.extend([0; 4]);
    data.extend(second.finish_uncompressed().unwrap());
    data.extend(ignition_archive(b"gz2"));
    let files = read_initrd(&data).unwrap();
    assert_eq!(files["config.ign"], b"gz2");
    assert_eq!(files["other"], b"kept");

    data.extend(second.finish_uncompressed().unwrap());
    assert_eq!(read_initrd(&data).unwrap()["config.ign"], b"new");
}

#[test]
fn reader_errors() {
    let raw = {
        let mut b = ArchiveBuilder::new();
        b.add_file("a", 0o644, b"data").unwrap();
        b.finish_uncompressed().unwrap()
    };
    // An uncompressed archive must start 4-aligned.
    let mut misaligned = vec![0u8; 2];
    misaligned.insert(0, 0); // 3 NULs
    misaligned.extend(&raw);
    assert!(matches!(read_initrd(&misaligned), Err(InitrdError::Misaligned { offset: 3 })));

    // Garbage after an archive is read as another archive: bad magic.
    let mut garbage = raw.clone();
    garbage.extend(b"junk");
    assert!(matches!(read_initrd(&garbage), Err(InitrdError::Cpio { .. })), "{:?}", read_initrd(&garbage));

    // Truncated data and a declared size beyond the input.
    assert!(read_initrd(&raw[..raw.len() - 130]).is_err());
    let mut lying = raw.clone();
    lying[54..62].copy_from_slice(b"7fffffff");
    assert!(matches!(read_initrd(&lying), Err(InitrdError::Truncated { .. })), "{:?}", read_initrd(&lying));

    // Zeros after the trailer inside a compressed member are padding; anything else is not.
    let gz = |payload: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(payload).unwrap();
        e.finish().unwrap()
    };
    let mut padded = raw.clone();
    padded.extend([0; 100]);
    assert_eq!(read_initrd(&gz(&padded)).unwrap()["a"], b"data");
    let mut trailing = raw.clone();
    trailing.extend(b"\0\0\0\0junk");
    assert!(matches!(read_initrd(&gz(&trailing)), Err(InitrdError::TrailingGarbage { offset: 0 })));

    // Corrupt gzip.
    let mut corrupt = gz(&raw);
    let n = corrupt.len();
    corrupt[n - 6] ^= 0xff; // CRC
    assert!(matches!(read_initrd(&corrupt), Err(InitrdError::Gzip { .. })), "{:?}", read_initrd(&corrupt));

    // xz and zstd are recognized, not decoded.
    assert!(matches!(
        read_initrd(&[0xfd, b'7', b'z', b'X', b'Z', 0, 0, 1]),
        Err(InitrdError::UnsupportedCompression { format: "xz", offset: 0 })
    ));
    assert!(matches!(
        read_initrd(&[0x28, 0xb5, 0x2f, 0xfd, 0]),
        Err(InitrdError::UnsupportedCompression { format: "zstd", .. })
    ));

    // Members over the limit are refused before reading them.
    let limits = ReadLimits { max_member_size: 3, ..ReadLimits::default() };
    assert!(matches!(initrd::read_initrd_with_limits(&raw, limits), Err(InitrdError::MemberOverLimit { .. })));
    assert!(read_initrd(&[]).unwrap().is_empty());
    assert!(read_initrd(&[0; 64]).unwrap().is_empty());
}

fn unxz_fixture(name: &str) -> Vec<u8> {
    let path = shared_dir().join("fixtures/coreos-installer/initrd").join(name);
    let out = Command::new("xz")
        .arg("-dc")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("running xz to decompress {} (install xz-utils): {e}", path.display()));
    assert!(out.status.success(), "xz -dc {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn coreos_installer_fixtures() {
    // Three uncompressed archives at 512-byte offsets, each with data/file; the last wins.
    let files = read_initrd(&unxz_fixture("redundant.img.xz")).unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), ["data/file"]);
    // dracut-cpio pads names to the next block.
    let files = read_initrd(&unxz_fixture("padded-names.img.xz")).unwrap();
    assert_eq!(files["dir/world"].len(), 4500);
    assert_eq!(files["dir/hello"].len(), 5000);
    // uncompressed + gzip + xz + zstd + uncompressed: stops at the xz member.
    assert!(matches!(
        read_initrd(&unxz_fixture("compressed.img.xz")),
        Err(InitrdError::UnsupportedCompression { format: "xz", .. })
    ));
}

/// A tool the interoperability tests need; missing means failure, with the way to get it.
fn tool(name: &str, hint: &str) -> PathBuf {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect()).unwrap_or_default();
    if let Some(cargo_home) = std::env::var_os("CARGO_HOME") {
        candidates.push(Path::new(&cargo_home).join("bin").join(name));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cargo/bin").join(name));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{name}` not found in PATH, $CARGO_HOME/bin or ~/.cargo/bin; {hint}"))
}

fn coreos_installer_unwrap(data: &[u8]) -> Vec<u8> {
    let bin = tool("coreos-installer", "install it with `cargo install coreos-installer`");
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(data).unwrap();
    let out = Command::new(&bin).args(["pxe", "ignition", "unwrap"]).arg(file.path()).output().unwrap();
    assert!(out.status.success(), "coreos-installer pxe ignition unwrap: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[test]
fn coreos_installer_unwraps_ignition_archive() {
    let config = render_discovery_ignition(&full_input()).unwrap();
    let archive = ignition_archive(config.as_bytes());
    assert_eq!(coreos_installer_unwrap(&archive), config.as_bytes());

    // As appended to a PXE initrd: an existing initrd, then two Ignition archives (last wins).
    let mut base = ArchiveBuilder::new();
    base.add_dir("etc").unwrap();
    base.add_file("etc/initrd-release", 0o644, b"NAME=test\n").unwrap();
    let mut initrd = base.finish_uncompressed().unwrap();
    initrd.extend(ignition_archive(b"first"));
    initrd.extend(&archive);
    assert_eq!(coreos_installer_unwrap(&initrd), config.as_bytes());
}

#[test]
fn cpio_lists_members() {
    let bin = tool("cpio", "install the `cpio` package (apt-get install cpio)");
    let list = |gz: &[u8]| -> Vec<String> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz).read_to_end(&mut raw).unwrap();
        let mut child = Command::new(&bin)
            .args(["-it", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&raw).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "cpio -it: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
    };
    assert_eq!(list(&ignition_archive(b"{}")), ["config.ign"]);

    let mut b = ArchiveBuilder::new();
    b.add_dir("etc").unwrap();
    b.add_file("etc/a", 0o600, b"a").unwrap();
    b.add_symlink("etc/b", "a").unwrap();
    assert_eq!(list(&b.finish_gzip().unwrap()), ["etc", "etc/a", "etc/b"]);
}

// ---------------------------------------------------------------------------------------------
// Robustness (the fuzz targets' properties, in small)

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn read_initrd_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = read_initrd(&data);
    }

    #[test]
    fn read_initrd_never_panics_on_mangled_archives(
        cut in 0usize..400,
        flips in proptest::collection::vec((0usize..400, any::<u8>()), 0..4),
    ) {
        let mut b = ArchiveBuilder::new();
        b.add_dir("etc").unwrap();
        b.add_file("etc/x", 0o644, b"some contents").unwrap();
        for mut data in [b.finish_uncompressed().unwrap(), b.finish_gzip().unwrap()] {
            for (at, byte) in &flips {
                let n = data.len();
                data[at % n] ^= byte;
            }
            data.truncate(cut.min(data.len()));
            let _ = read_initrd(&data);
        }
    }

    #[test]
    fn builder_round_trips(
        members in proptest::collection::btree_map("[a-z]{1,8}(/[a-z0-9_-][a-z0-9._-]{0,7}){0,2}", proptest::collection::vec(any::<u8>(), 0..300), 0..6),
    ) {
        let mut b = ArchiveBuilder::new();
        for (path, data) in &members {
            b.add_file(path, 0o644, data).unwrap();
        }
        let archive = b.finish_gzip().unwrap();
        prop_assert_eq!(archive.len() % 4, 0);
        prop_assert_eq!(read_initrd(&archive).unwrap(), members);
    }

    #[test]
    fn data_urls_never_panic(meta in r"\PC{0,12}", data in r"\PC{0,12}") {
        let _ = decode_data_url(&format!("data:{meta},{data}"));
        let _ = decode_data_url(&format!("data:{meta}"));
    }

    #[test]
    fn overrides_never_panic(text in ".{0,200}") {
        let mut i = input();
        i.ignition_config_override = Some(text);
        let _ = render_discovery_ignition(&i);
    }

    #[test]
    fn structured_overrides_never_panic(
        path in "[/a-z.é]{0,12}",
        mode in any::<i64>(),
        source in r"(data:|data:text/|data:;|https://|ftp:|)\PC{0,20}",
        unit in "[a-z.]{0,12}",
        version in prop_oneof![Just("3.1.0"), Just("3.2.0"), Just("3.0.0")],
    ) {
        let doc = json!({"ignition": {"version": version},
                         "storage": {"files": [{"path": path, "mode": mode, "contents": {"source": source}}],
                                     "links": [{"path": path, "target": "/x"}]},
                         "systemd": {"units": [{"name": unit, "dropins": [{"name": unit}]}]}});
        let mut i = input();
        i.ignition_config_override = Some(doc.to_string());
        if let Ok(text) = render_discovery_ignition(&i) {
            prop_assert!(!text.contains("null"));
            prop_assert!(ignition_config::Config::parse_str(&text).is_ok());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Proxy values (and the ironic agent's image) in units and scripts

/// A unit file as systemd reads it (systemd.syntax(7)): a line ending in `\` continues on the next
/// (the backslash becoming a blank), blanks trimmed, `#` and `;` lines are comments, `[Section]`
/// headers, `Key=Value` split at the first `=`. `(section, key, value)` in order; `Err` for a line
/// systemd would not read.
fn unit_lines(text: &str) -> Result<Vec<(String, String, String)>, String> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for raw in text.split('\n') {
        if let Some(continued) = raw.strip_suffix('\\') {
            pending.push_str(continued);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + raw;
        let line = line.trim_matches(|c: char| " \t\r".contains(c));
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            section = name.strip_suffix(']').ok_or(format!("bad section header {line:?}"))?.to_string();
        } else if let Some((key, value)) = line.split_once('=') {
            out.push((section.clone(), key.trim().to_string(), value.trim().to_string()));
        } else {
            return Err(format!("not a unit file line: {line:?}"));
        }
    }
    Ok(out)
}

/// The words of an `Environment=` or `Exec*=` value as systemd splits them: at blanks outside
/// quotes, `"…"` and `'…'` unquoted, backslash escapes resolved. `Err` for unbalanced quotes or a
/// trailing backslash (systemd ignores such a line).
fn unit_words(value: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('\\', _) => {
                let escaped = chars.next().ok_or("trailing backslash")?;
                word.get_or_insert_default().push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    's' => ' ',
                    other => other,
                });
            }
            ('"' | '\'', None) => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (c, Some(q)) if c == q => quote = None,
            (' ' | '\t', None) => words.extend(word.take()),
            (c, _) => word.get_or_insert_default().push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("unbalanced quote in {value:?}"));
    }
    words.extend(word);
    Ok(words)
}

/// A word after systemd's specifier expansion (`%%` is `%`); `Err` for a specifier, which would
/// put something else in the value. On `Exec*=` lines (`exec`), also `$$` is `$` and `$NAME` or
/// `${NAME}` an expansion.
fn unit_expanded(word: &str, exec: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => out.push('%'),
                other => return Err(format!("specifier %{} in {word:?}", other.map(String::from).unwrap_or_default())),
            },
            '$' if exec => match chars.peek() {
                Some('$') => {
                    chars.next();
                    out.push('$');
                }
                Some(&n) if n == '{' || n == '_' || n.is_ascii_alphabetic() => {
                    return Err(format!("variable expansion in {word:?}"));
                }
                _ => out.push('$'),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The `NAME=value` assignments of a unit's `Environment=` lines, as systemd reads them.
fn unit_environment(unit: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (_, key, value) in unit_lines(unit)? {
        if key != "Environment" {
            continue;
        }
        for word in unit_words(&value)? {
            let word = unit_expanded(&word, false)?;
            let (name, value) = word.split_once('=').ok_or(format!("not an assignment: {word:?}"))?;
            out.push((name.to_string(), value.to_string()));
        }
    }
    Ok(out)
}

/// The keys of a unit but `Environment=`, in order, with the number of words of each.
fn unit_shape(unit: &str) -> Vec<(String, String, usize)> {
    unit_lines(unit)
        .unwrap()
        .into_iter()
        .filter(|(_, key, _)| key != "Environment")
        .map(|(section, key, value)| (section, key, unit_words(&value).map_or(0, |w| w.len())))
        .collect()
}

/// What a login shell gets from `/etc/profile.d/proxy.sh`: the script sourced by a real `sh` in an
/// empty environment, and its environment read back (without what the shell sets itself).
fn sourced_environment(script: &[u8]) -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.sh");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("/bin/sh")
        .args(["-c", ". \"$1\" && exec /usr/bin/env -0", "sh"])
        .arg(&path)
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "sourcing proxy.sh: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let entry = String::from_utf8(entry.to_vec()).unwrap();
            let (name, value) = entry.split_once('=').unwrap();
            (name.to_string(), value.to_string())
        })
        .filter(|(name, _)| !matches!(name.as_str(), "PWD" | "OLDPWD" | "SHLVL" | "_"))
        .collect()
}

/// `lower`/`UPPER` pairs of each set value, in the order `names` lists them.
fn proxy_pairs(values: &[(&str, Option<String>)], upper_first: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, value) in values {
        if let Some(value) = value {
            let (first, second) = if upper_first {
                (name.to_ascii_uppercase(), name.to_string())
            } else {
                (name.to_string(), name.to_ascii_uppercase())
            };
            out.push((first, value.clone()));
            out.push((second, value.clone()));
        }
    }
    out
}

/// Pieces a unit or a script cannot carry as they are (the checks refuse them); with
/// [`CARRIED_PROXY_PIECES`], what proxy values are made of.
const REFUSED_PROXY_PIECES: &[&str] = &[
    "\n",
    "\r",
    "\t",
    "\0",
    "\x1b",
    "\u{85}",
    "\u{2028}",
    "\u{202e}",
    "\nExecStart=/bin/evil",
    "\n[Service]",
    " ",
    "'",
    "\"",
    "`",
    "\\",
    "\\n",
];

/// The pieces no unit or script check should refuse (systemd and the shell take them as they are,
/// once `%` is doubled), so that many values get through and their units and scripts are compared.
const CARRIED_PROXY_PIECES: &[&str] = &[
    "$",
    "$HOME",
    "${PATH}",
    "$(id)",
    "%",
    "%n",
    "%%",
    ";",
    "#",
    "=",
    "&",
    "|",
    ",",
    "é",
    "user:p@ss@",
    "proxy.example",
    ":3128",
    "/",
    "10.0.0.0/8",
    ".cluster.local",
    "[Service]",
];

fn proxy_value(prefix: &'static str) -> impl Strategy<Value = Option<String>> {
    let all: Vec<&str> = REFUSED_PROXY_PIECES.iter().chain(CARRIED_PROXY_PIECES).copied().collect();
    let any = prop::collection::vec(prop::sample::select(all), 0..5).prop_map(|p| p.concat());
    let carried = prop::collection::vec(prop::sample::select(CARRIED_PROXY_PIECES), 1..5).prop_map(|p| p.concat());
    let pieces = prop_oneof![1 => any, 2 => carried];
    prop::option::weighted(
        0.8,
        (prop::bool::weighted(0.7), pieces).prop_map(
            move |(prefixed, rest)| {
                if prefixed { format!("{prefix}{rest}") } else { rest }
            },
        ),
    )
}

fn set(value: &Option<String>) -> Option<String> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_string)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever the proxy settings hold, the discovery Ignition is refused (with a message quoting
    /// nothing raw), or `agent.service` reads back, as systemd reads it, with exactly the intended
    /// `Environment=` assignments and otherwise the lines of a plain proxy, and `proxy.sh`, sourced
    /// by a real shell, exports exactly the intended variables and nothing else happens in it.
    #[test]
    fn proxy_values_reach_the_agent_unit_and_the_profile_as_they_are_or_not_at_all(
        http in proxy_value("http://"),
        https in proxy_value("https://"),
        no_proxy in proxy_value(""),
    ) {
        let mut i = input();
        i.proxy = Some(Proxy { http_proxy: http.clone(), https_proxy: https.clone(), no_proxy: no_proxy.clone() });
        let config = match render_discovery_ignition(&i) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.chars().any(char::is_control), "{message:?}");
                return Ok(());
            }
            Ok(text) => serde_json::from_str::<Value>(&text).unwrap(),
        };
        let (http, https) = (set(&http), set(&https));
        let proxied = http.is_some() || https.is_some();
        let no_proxy = no_proxy
            .as_deref()
            .map(|n| n.split(',').map(str::trim).filter(|s| !s.is_empty()).collect::<Vec<_>>().join(","))
            .filter(|n| proxied && !n.is_empty());
        let intended = proxy_pairs(&[("http_proxy", http.clone()), ("https_proxy", https.clone()), ("no_proxy", no_proxy.clone())], true);

        let agent = unit(&config, "agent.service").unwrap()["contents"].as_str().unwrap();
        prop_assert_eq!(unit_environment(agent), Ok(intended.clone()), "{}", agent);
        let mut plain = input();
        plain.proxy = Some(Proxy { http_proxy: Some("http://proxy.example:3128".into()), ..Proxy::default() });
        let plain = render(&plain);
        let plain_agent = unit(&plain, "agent.service").unwrap()["contents"].as_str().unwrap();
        prop_assert_eq!(unit_shape(agent), unit_shape(plain_agent));

        let files = files(&config);
        match files.get(ignition::PROFILE_PROXY_PATH) {
            None => prop_assert!(!proxied),
            Some(script) => {
                prop_assert_eq!(sourced_environment(script), intended.iter().cloned().collect::<BTreeMap<_, _>>());
                // And nothing but comments and `export NAME='value'` lines, so nothing else runs.
                for line in String::from_utf8(script.clone()).unwrap().lines() {
                    let export = line
                        .strip_prefix("export ")
                        .and_then(|l| l.split_once("='"))
                        .and_then(|(name, rest)| Some((name, rest.strip_suffix('\'')?)));
                    prop_assert!(
                        line.is_empty() || line.starts_with('#') || export.is_some_and(|(name, value)| {
                            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !value.contains('\'')
                        }),
                        "{:?}", line
                    );
                }
            }
        }
    }

    /// The same for the live rootfs download's drop-in in the static-network ramdisk, and for the
    /// ironic agent's unit (whose image, from an InfraEnv annotation, is also on its command lines).
    #[test]
    fn proxy_values_reach_the_ramdisk_dropin_and_the_ironic_unit_as_they_are_or_not_at_all(
        http in proxy_value("http://"),
        https in proxy_value("https://"),
        no_proxy in proxy_value(""),
        image in proxy_value("quay.io/x/ipa:"),
    ) {
        use bootstream::content::staticnet::{PROXY_DROPIN_PATH, ProxyEnv, RamdiskEntry, RamdiskInput, ramdisk_files};
        let proxy = ProxyEnv { http_proxy: http.as_deref(), https_proxy: https.as_deref(), no_proxy: no_proxy.as_deref() };
        match ramdisk_files(&RamdiskInput { hosts: &[], proxy: Some(proxy) }) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.chars().any(char::is_control), "{message:?}");
            }
            Ok(entries) => {
                let dropin = entries.iter().find_map(|e| match e {
                    RamdiskEntry::File { path, contents, .. } if path == PROXY_DROPIN_PATH => Some(String::from_utf8(contents.clone()).unwrap()),
                    _ => None,
                });
                let intended = proxy_pairs(&[("http_proxy", set(&http)), ("https_proxy", set(&https)), ("no_proxy", set(&no_proxy))], false);
                match dropin {
                    None => prop_assert!(intended.is_empty()),
                    Some(dropin) => {
                        prop_assert_eq!(unit_environment(&dropin), Ok(intended), "{}", dropin);
                        let keys: Vec<(String, String)> = unit_lines(&dropin).unwrap().into_iter().map(|(s, k, _)| (s, k)).collect();
                        prop_assert!(keys.iter().all(|(s, k)| s == "Service" && k == "Environment"), "{:?}", keys);
                    }
                }
            }
        }

        let config = |image: &str| bootstream::content::ironic::IronicConfig {
            base_url: "https://10.0.0.5".into(),
            inspector_url: None,
            agent_image: image.to_string(),
            http_proxy: http.clone(),
            https_proxy: https.clone(),
            no_proxy: no_proxy.clone(),
            has_static_network: false,
        };
        let image = image.unwrap_or_default();
        match bootstream::content::ironic::ignition_fragment(&config(&image)) {
            Err(e) => {
                let message = e.to_string();
                prop_assert!(!message.chars().any(char::is_control), "{message:?}");
            }
            Ok(fragment) => {
                let unit_of = |fragment: &str| {
                    let v: Value = serde_json::from_str(fragment).unwrap();
                    v["systemd"]["units"][0]["contents"].as_str().unwrap().to_string()
                };
                let ironic = unit_of(&fragment);
                let given = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
                let intended = proxy_pairs(&[("http_proxy", given(&http)), ("https_proxy", given(&https)), ("no_proxy", given(&no_proxy))], true);
                prop_assert_eq!(unit_environment(&ironic), Ok(intended), "{}", ironic);
                let plain = unit_of(&bootstream::content::ironic::ignition_fragment(&config("quay.io/x/ipa:1")).unwrap());
                prop_assert_eq!(unit_shape(&ironic), unit_shape(&plain), "{}", ironic);
                for (_, key, value) in unit_lines(&ironic).unwrap() {
                    if key.starts_with("ExecStart") {
                        let words = unit_words(&value).unwrap();
                        prop_assert_eq!(unit_expanded(words.last().unwrap(), true), Ok(image.trim().to_string()), "{}", value);
                    }
                }
            }
        }
    }
}
