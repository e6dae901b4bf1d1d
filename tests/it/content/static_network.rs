//! Static network configuration: nmstate → keyfiles, validation, the static-network ramdisk and
//! its boot script (run for real under `sh` and `bash` against a fake root and sysfs).

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

use bootstream::content::staticnet::{
    self, HostStaticConfig, MacInterface, ProxyEnv, RamdiskEntry, RamdiskInput, StaticNetError, keyfiles, normalize,
    ramdisk, ramdisk_files, validate,
};
use bootstream::formats::initrd::read_initrd;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Helpers

fn shared(rel: &str) -> PathBuf {
    common::shared(rel)
}

fn read_shared(rel: &str) -> String {
    std::fs::read_to_string(shared(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

type Ini = BTreeMap<String, BTreeMap<String, String>>;

/// A keyfile as sections of keys (comments and blank lines dropped).
fn ini(text: &str) -> Ini {
    let mut out = Ini::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            out.entry(section.clone()).or_default();
        } else if let Some((key, value)) = line.split_once('=') {
            out.entry(section.clone()).or_default().insert(key.trim().to_string(), value.trim().to_string());
        } else {
            panic!("not a keyfile line: {line:?}");
        }
    }
    out
}

fn get<'a>(ini: &'a Ini, section: &str, key: &str) -> Option<&'a str> {
    ini.get(section).and_then(|s| s.get(key)).map(String::as_str)
}

fn keyfile_map(yaml: &str) -> BTreeMap<String, Ini> {
    keyfiles(yaml).unwrap().into_iter().map(|(name, text)| (name, ini(&text))).collect()
}

fn map(entries: &[(&str, &str)]) -> Vec<MacInterface> {
    entries
        .iter()
        .map(|(mac, name)| MacInterface { mac_address: (*mac).into(), logical_nic_name: (*name).into() })
        .collect()
}

fn host(yaml: &str, entries: &[(&str, &str)]) -> HostStaticConfig {
    HostStaticConfig { mac_interface_map: map(entries), network_yaml: yaml.to_string() }
}

/// The shared NMStateConfig example as a host: `spec.config` re-serialized, `spec.interfaces`.
fn example_host() -> HostStaticConfig {
    let doc: yaml_serde::Value = yaml_serde::from_str(&read_shared("fixtures/assisted/examples/nmstate.yaml")).unwrap();
    let spec = &doc["spec"];
    let mac_interface_map = spec["interfaces"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| MacInterface {
            mac_address: i["macAddress"].as_str().unwrap().into(),
            logical_nic_name: i["name"].as_str().unwrap().into(),
        })
        .collect();
    HostStaticConfig { mac_interface_map, network_yaml: yaml_serde::to_string(&spec["config"]).unwrap() }
}

/// The example with MACs and addresses of host `k` (distinct for k < 40000).
fn example_variant(k: usize) -> HostStaticConfig {
    let (hi, lo) = (k / 200, k % 200 + 10);
    let mac = |nic: u8| format!("02:00:{:02x}:{:02x}:{nic:02x}:{:02x}", k >> 8, k & 0xff, (k * 7) & 0xff);
    let (mac0, mac1) = (mac(0x14), mac(0x15));
    let yaml = format!(
        "interfaces:
  - name: eth0
    type: ethernet
    state: up
    mac-address: {mac0}
    ipv4:
      enabled: true
      address:
        - ip: 10.126.{hi}.{lo}
          prefix-length: 16
      dhcp: false
  - name: eth1
    type: ethernet
    state: up
    mac-address: {mac1}
    ipv4:
      enabled: true
      address:
        - ip: 10.140.{hi}.{lo}
          prefix-length: 16
      dhcp: false
dns-resolver:
  config:
    server:
      - 10.126.0.1
routes:
  config:
    - destination: 0.0.0.0/0
      next-hop-address: 10.126.0.1
      next-hop-interface: eth0
      table-id: 254
    - destination: 0.0.0.0/0
      next-hop-address: 10.140.0.1
      next-hop-interface: eth1
      table-id: 254
      metric: 100
"
    );
    host(&yaml, &[(&mac0, "eth0"), (&mac1, "eth1")])
}

fn error_of(hosts: &[HostStaticConfig]) -> String {
    match validate(hosts) {
        Ok(()) => panic!("expected a validation error"),
        Err(e @ StaticNetError::Invalid(_)) => e.to_string(),
        Err(e) => panic!("expected StaticNetError::Invalid, got {e:?}"),
    }
}

fn one_host_error(yaml: &str, entries: &[(&str, &str)]) -> String {
    error_of(&[host(yaml, entries)])
}

const ETH0_STATIC: &str = "interfaces:
  - name: eth0
    type: ethernet
    state: up
    ipv4:
      enabled: true
      dhcp: false
      address:
        - ip: 192.0.2.10
          prefix-length: 24
";
const MAC_A: &str = "02:00:00:00:00:0a";
const MAC_B: &str = "02:00:00:00:00:0b";
const MAC_C: &str = "02:00:00:00:00:0c";

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data).read_to_end(&mut out).unwrap();
    out
}

/// `(path, mode, data)` of every member, read with the cpio crate.
fn members(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut reader: &[u8] = &gunzip(archive);
    let mut out = Vec::new();
    loop {
        let mut entry = cpio::newc::Reader::new(reader).unwrap();
        if entry.entry().is_trailer() {
            break;
        }
        let (name, mode) = (entry.entry().name().to_string(), entry.entry().mode());
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        out.push((name, mode, data));
        reader = entry.finish().unwrap();
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Keyfiles

/// coreos-installer's `--network-nmstate` fixtures: our keyfiles carry the settings of the
/// keyfiles beside them.
///
/// nmstate writes more than those minimal files: `uuid` (v5, derived from the name, so stable),
/// `interface-name` (binds the profile to the device), `autoconnect=true` and
/// `autoconnect-slaves=-1` (NM's defaults, explicit), DHCP tuning in `[ipv4]` (client id from
/// the MAC, send hostname, wait forever) and `[ipv6] method=disabled` because the input has no
/// `ipv6:` section. It writes `type=802-3-ethernet`, the long form of `ethernet`.
///
/// One fixture is inconsistent: `nmstate-js-eth1.nmconnection` says `id=nmstate-json-eth1` for
/// the interface `nmstate-js-eth1`. coreos-installer only uses these files for their names (a
/// keyfile given twice must be refused), never compares contents, so the typo never mattered.
#[test]
fn fixture_keyfiles_match_the_coreos_installer_expectations() {
    let dir = "fixtures/coreos-installer/customize";
    for (input, stems) in [
        ("installer-test-nmstate-yaml.yaml", ["nmstate-yl-eth1", "nmstate-yl-eth2"]),
        ("installer-test-nmstate-json.json", ["nmstate-js-eth1", "nmstate-js-eth2"]),
    ] {
        let ours = keyfile_map(&read_shared(&format!("{dir}/{input}")));
        let names: Vec<String> = stems.iter().map(|s| format!("{s}.nmconnection")).collect();
        assert_eq!(ours.keys().cloned().collect::<Vec<_>>(), names, "{input}");
        for (name, stem) in names.iter().zip(stems) {
            let expected = ini(&read_shared(&format!("{dir}/{name}")));
            let got = &ours[name];
            for (section, keys) in &expected {
                for (key, want) in keys {
                    let have = get(got, section, key).unwrap_or_else(|| panic!("{name}: no [{section}] {key}"));
                    let (want, have) = (canonical(key, want), canonical(key, have));
                    if name == "nmstate-js-eth1.nmconnection" && key == "id" {
                        assert_eq!(want, "nmstate-json-eth1", "the known fixture typo");
                        assert_eq!(have, stem);
                        continue;
                    }
                    assert_eq!(have, want, "{name} [{section}] {key}");
                }
            }
            // What nmstate adds.
            assert_eq!(get(got, "connection", "interface-name"), Some(stem));
            let uuid = get(got, "connection", "uuid").unwrap();
            assert_eq!(uuid.len(), 36);
            assert_eq!(&uuid[14..15], "5", "name-based (v5) uuid: {uuid}");
            assert_eq!(get(got, "ipv6", "method"), Some("disabled"), "no ipv6 section in the input");
        }
    }
    // Same input, same keyfiles (and uuids).
    let yaml = read_shared(&format!("{dir}/installer-test-nmstate-yaml.yaml"));
    assert_eq!(keyfiles(&yaml).unwrap(), keyfiles(&yaml).unwrap());
}

fn canonical<'a>(key: &str, value: &'a str) -> &'a str {
    match (key, value) {
        ("type", "802-3-ethernet") => "ethernet",
        _ => value,
    }
}

#[test]
fn static_dual_stack_keyfile() {
    let yaml = "interfaces:
  - name: eth0
    type: ethernet
    state: up
    ipv4:
      enabled: true
      dhcp: false
      address:
        - ip: 192.0.2.10
          prefix-length: 24
    ipv6:
      enabled: true
      dhcp: false
      autoconf: false
      address:
        - ip: 2001:db8::10
          prefix-length: 64
dns-resolver:
  config:
    server:
      - 192.0.2.53
      - 2001:db8::53
routes:
  config:
    - destination: 0.0.0.0/0
      next-hop-address: 192.0.2.1
      next-hop-interface: eth0
    - destination: ::/0
      next-hop-address: 2001:db8::1
      next-hop-interface: eth0
      metric: 50
";
    let files = keyfile_map(yaml);
    assert_eq!(files.keys().collect::<Vec<_>>(), ["eth0.nmconnection"]);
    let eth0 = &files["eth0.nmconnection"];
    assert_eq!(get(eth0, "connection", "interface-name"), Some("eth0"));
    assert_eq!(get(eth0, "ipv4", "method"), Some("manual"));
    assert_eq!(get(eth0, "ipv4", "address0"), Some("192.0.2.10/24"));
    // No metric in the input: nmstate writes 0.
    assert_eq!(get(eth0, "ipv4", "route0"), Some("0.0.0.0/0,192.0.2.1,0"));
    assert_eq!(get(eth0, "ipv4", "route0_options"), Some("table=254"));
    assert_eq!(get(eth0, "ipv4", "dns"), Some("192.0.2.53"));
    assert_eq!(get(eth0, "ipv6", "method"), Some("manual"));
    assert_eq!(get(eth0, "ipv6", "address0"), Some("2001:db8::10/64"));
    assert_eq!(get(eth0, "ipv6", "route0"), Some("::/0,2001:db8::1,50"));
    assert_eq!(get(eth0, "ipv6", "dns"), Some("2001:db8::53"));
    validate(&[host(yaml, &[(MAC_A, "eth0")])]).unwrap();
}

#[test]
fn bond_with_two_ports() {
    let yaml = "interfaces:
  - name: bond0
    type: bond
    state: up
    ipv4:
      enabled: true
      dhcp: true
    link-aggregation:
      mode: 802.3ad
      options:
        miimon: 100
        lacp_rate: fast
      port:
        - eth0
        - eth1
  - name: eth0
    type: ethernet
    state: up
  - name: eth1
    type: ethernet
    state: up
";
    let files = keyfile_map(yaml);
    assert_eq!(files.keys().collect::<Vec<_>>(), ["bond0.nmconnection", "eth0.nmconnection", "eth1.nmconnection"]);
    let bond = &files["bond0.nmconnection"];
    assert_eq!(get(bond, "connection", "type"), Some("bond"));
    assert_eq!(get(bond, "connection", "interface-name"), Some("bond0"));
    assert_eq!(get(bond, "bond", "mode"), Some("802.3ad"));
    assert_eq!(get(bond, "bond", "miimon"), Some("100"));
    assert_eq!(get(bond, "bond", "lacp_rate"), Some("fast"));
    assert_eq!(get(bond, "ipv4", "method"), Some("auto"));
    for port in ["eth0", "eth1"] {
        let file = &files[&format!("{port}.nmconnection")];
        assert_eq!(get(file, "connection", "interface-name"), Some(port));
        assert_eq!(get(file, "connection", "master"), Some("bond0"));
        assert_eq!(get(file, "connection", "slave-type"), Some("bond"));
        assert!(!file.contains_key("ipv4"), "a port has no IP settings of its own");
    }
    validate(&[host(yaml, &[(MAC_A, "eth0"), (MAC_B, "eth1")])]).unwrap();
}

const VLAN_YAML: &str = "interfaces:
  - name: eth0
    type: ethernet
    state: up
  - name: eth0.100
    type: vlan
    state: up
    vlan:
      base-iface: eth0
      id: 100
    ipv4:
      enabled: true
      dhcp: false
      address:
        - ip: 198.51.100.7
          prefix-length: 25
";

#[test]
fn vlan_on_ethernet() {
    let files = keyfile_map(VLAN_YAML);
    assert_eq!(files.keys().collect::<Vec<_>>(), ["eth0.100.nmconnection", "eth0.nmconnection"]);
    let vlan = &files["eth0.100.nmconnection"];
    assert_eq!(get(vlan, "connection", "type"), Some("vlan"));
    assert_eq!(get(vlan, "connection", "interface-name"), Some("eth0.100"));
    assert_eq!(get(vlan, "vlan", "id"), Some("100"));
    assert_eq!(get(vlan, "vlan", "parent"), Some("eth0"));
    assert_eq!(get(vlan, "ipv4", "address0"), Some("198.51.100.7/25"));
    assert_eq!(get(&files["eth0.nmconnection"], "ipv4", "method"), Some("disabled"));
    validate(&[host(VLAN_YAML, &[(MAC_A, "eth0")])]).unwrap();
}

/// nmstate quirks the brief warned about, pinned so an nmstate upgrade that changes them shows.
#[test]
fn nmstate_quirks() {
    // `mac-address:` alone spoofs the MAC; `identifier: mac-address` matches by it instead.
    let eth0 = &keyfile_map(&read_shared_example_config())["eth0.nmconnection"];
    assert_eq!(get(eth0, "ethernet", "cloned-mac-address"), Some("02:00:00:80:12:14"));
    let by_mac = keyfile_map(
        "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  identifier: mac-address\n  mac-address: 02:00:00:aa:bb:cc\n",
    );
    let eth0 = &by_mac["eth0.nmconnection"];
    assert_eq!(get(eth0, "ethernet", "mac-address"), Some("02:00:00:AA:BB:CC"));
    assert_eq!(get(eth0, "connection", "interface-name"), None);
    // What keyfiles() alone lets through (validate() rejects it, below).
    assert!(keyfiles("interfaces:\n- name: x\n  type: foo\n  state: up\n").is_ok());
    assert!(keyfiles("interfaces:\n- {name: v, type: vlan, state: up, vlan: {base-iface: eth0, id: 5000}}\n").is_ok());
    // Routes to undefined interfaces are one thing nmstate does refuse.
    let err = keyfiles(&format!(
        "{ETH0_STATIC}routes:\n  config:\n  - {{destination: 0.0.0.0/0, next-hop-address: 192.0.2.1, next-hop-interface: eth9}}\n"
    ))
    .unwrap_err();
    assert!(err.to_string().contains("next hop interface eth9 not found"), "{err}");
}

fn read_shared_example_config() -> String {
    example_host().network_yaml
}

// ---------------------------------------------------------------------------------------------
// The shared example

#[test]
fn shared_example_gives_host0_with_eth0_eth1_and_the_mac_map() {
    let example = example_host();
    validate(std::slice::from_ref(&example)).unwrap();
    let entries = ramdisk_files(&RamdiskInput { hosts: std::slice::from_ref(&example), proxy: None }).unwrap();
    let files: BTreeMap<&str, (u32, &[u8])> = entries
        .iter()
        .filter_map(|e| match e {
            RamdiskEntry::File { path, mode, contents } => Some((path.as_str(), (*mode, contents.as_slice()))),
            _ => None,
        })
        .collect();
    let host0: Vec<&str> = files.keys().filter_map(|p| p.strip_prefix("etc/assisted/network/host0/")).collect();
    assert_eq!(host0, ["eth0.nmconnection", "eth1.nmconnection", "mac_interface.ini"]);
    assert!(!files.keys().any(|p| p.contains("/host1/")));
    let (mode, ini_bytes) = files["etc/assisted/network/host0/mac_interface.ini"];
    assert_eq!(mode, 0o600);
    assert_eq!(ini_bytes, b"02:00:00:80:12:14=eth0\n02:00:00:80:12:15=eth1");
    for (nic, ip, route) in [
        ("eth0", "192.168.126.30/24", "0.0.0.0/0,192.168.126.1,0"),
        ("eth1", "192.168.140.30/24", "0.0.0.0/0,192.168.140.1,100"),
    ] {
        let (mode, text) = files[format!("etc/assisted/network/host0/{nic}.nmconnection").as_str()];
        assert_eq!(mode, 0o600);
        let keyfile = ini(std::str::from_utf8(text).unwrap());
        assert_eq!(get(&keyfile, "connection", "autoconnect"), Some("true"));
        assert_eq!(get(&keyfile, "connection", "autoconnect-priority"), Some("1"));
        assert_eq!(get(&keyfile, "connection", "interface-name"), Some(nic));
        assert_eq!(get(&keyfile, "ipv4", "address0"), Some(ip));
        assert_eq!(get(&keyfile, "ipv4", "route0"), Some(route));
        assert_eq!(get(&keyfile, "ipv4", "route0_options"), Some("table=254"));
    }
    let eth0 = ini(std::str::from_utf8(files["etc/assisted/network/host0/eth0.nmconnection"].1).unwrap());
    assert_eq!(get(&eth0, "ipv4", "dns"), Some("192.168.126.1"));
    // Apart from the two [connection] keys the ramdisk keyfile is nmstate's.
    let mut raw = ini(&keyfiles(&example.network_yaml).unwrap()[0].1);
    raw.get_mut("connection").unwrap().insert("autoconnect-priority".into(), "1".into());
    assert_eq!(eth0, raw);
}

// ---------------------------------------------------------------------------------------------
// Validation

#[test]
fn mac_map_errors() {
    assert_eq!(one_host_error(ETH0_STATIC, &[]), "at least one interface for host 0 must be provided");
    assert_eq!(
        one_host_error(ETH0_STATIC, &[(MAC_A, "eth0"), (MAC_B, "eth0")]),
        "MACs and Interfaces for host 0 must be unique"
    );
    // The boot script compares MACs case-insensitively, so must we.
    assert_eq!(
        one_host_error(ETH0_STATIC, &[(MAC_A, "eth0"), ("02:00:00:00:00:0A", "eth1")]),
        "MACs and Interfaces for host 0 must be unique"
    );
    assert_eq!(
        one_host_error(ETH0_STATIC, &[("02:00:00:00:0a", "eth0")]),
        "invalid MAC address \"02:00:00:00:0a\" for interface \"eth0\" of host 0"
    );
    assert_eq!(
        one_host_error(ETH0_STATIC, &[(MAC_A, "eth0"), (MAC_B, "my nic")]),
        "invalid interface name \"my nic\" for MAC 02:00:00:00:00:0b of host 0"
    );
    // The index is the position in the slice passed.
    let ok = host(ETH0_STATIC, &[(MAC_A, "eth0")]);
    assert_eq!(error_of(&[ok, host(ETH0_STATIC, &[])]), "at least one interface for host 1 must be provided");
}

#[test]
fn yaml_rejected_by_nmstate() {
    let bad_ip = ETH0_STATIC.replace("192.0.2.10", "192.0.2.300");
    let err = one_host_error(&bad_ip, &[(MAC_A, "eth0")]);
    assert!(
        err.starts_with("failed to validate network yaml for host 0, InvalidArgument: Invalid YAML string: "),
        "{err}"
    );
    assert!(err.contains("invalid IP address syntax"), "{err}");
    let err = one_host_error(&format!("{ETH0_STATIC}    speed: fast\n"), &[(MAC_A, "eth0")]);
    assert!(err.contains("unknown field `speed`"), "{err}");
    assert_eq!(
        one_host_error("", &[(MAC_A, "eth0")]),
        "failed to validate network yaml for host 0, cannot generate configuration with an empty host YAML"
    );
    assert_eq!(
        one_host_error("interfaces: []\n", &[(MAC_A, "eth0")]),
        "failed to validate network yaml for host 0, nmstate generated an empty NetworkManager config file content"
    );
    // gen_conf's own checks.
    let err = one_host_error("dns-resolver:\n  config:\n    server: [192.0.2.53]\n", &[(MAC_A, "eth0")]);
    assert!(
        err.starts_with("failed to validate network yaml for host 0, InvalidArgument: Failed to find suitable"),
        "{err}"
    );
}

#[test]
fn what_nmstate_lets_through_is_rejected() {
    let m = &[(MAC_A, "eth0"), (MAC_B, "eth1")];
    let prefix = "failed to validate network yaml for host 0, ";
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth0, type: etherent, state: up}\n", m),
        format!("{prefix}interface eth0 has unknown type \"etherent\"")
    );
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth0, type: unknown, state: up}\n", m),
        format!("{prefix}interface eth0 has unknown type \"unknown\"")
    );
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth0, state: up}\n", m),
        format!("{prefix}interface eth0 has no type")
    );
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth0, type: ethernet, state: up, mac-address: 'zz:11'}\n", m),
        format!("{prefix}interface eth0 has an invalid mac-address \"zz:11\"")
    );
    assert_eq!(
        one_host_error(&VLAN_YAML.replace("id: 100", "id: 5000"), m),
        format!("{prefix}VLAN eth0.100 has id 5000, outside 1..4094")
    );
    assert_eq!(
        one_host_error(&VLAN_YAML.replace("id: 100", "id: 0"), m),
        format!("{prefix}VLAN eth0.100 has id 0, outside 1..4094")
    );
    assert_eq!(
        one_host_error(&VLAN_YAML.replace("id: 100", "id: \"4095\""), m),
        format!("{prefix}VLAN eth0.100 has id 4095, outside 1..4094")
    );
    validate(&[host(&VLAN_YAML.replace("id: 100", "id: \"4094\""), m)]).unwrap();
    assert_eq!(
        one_host_error(
            "interfaces:\n- name: bond0\n  type: bond\n  state: up\n  link-aggregation: {mode: active-backup, port: [eth0, eth7]}\n",
            m
        ),
        format!("{prefix}bond bond0 has port eth7, which is neither defined in interfaces nor in the MAC map")
    );
    assert_eq!(
        one_host_error(
            &format!(
                "{ETH0_STATIC}routes:\n  config:\n  - {{destination: 0.0.0.0/0, next-hop-address: 192.0.2.1, next-hop-interface: eth9}}\n"
            ),
            m
        ),
        format!("{prefix}route to 0.0.0.0/0 goes through interface eth9, which is not defined in interfaces")
    );
    // A route being removed needs no interface.
    validate(&[host(&format!("{ETH0_STATIC}routes:\n  config:\n  - {{destination: 10.0.0.0/8, state: absent}}\n"), m)])
        .unwrap();
    // Several problems of one YAML are all reported.
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth0, type: foo, state: up, mac-address: '1:2'}\n", m),
        format!(
            "{prefix}interface eth0 has unknown type \"foo\"; {prefix}interface eth0 has an invalid mac-address \"1:2\""
        )
    );
}

#[test]
fn interface_mapping_rules() {
    let missing = |n: &str| format!("mac-interface mapping for interface {n} is missing and not a physical interface");
    let two_nics =
        "interfaces:\n- {name: eth0, type: ethernet, state: up}\n- {name: eth1, type: ethernet, state: up}\n";
    assert_eq!(one_host_error(two_nics, &[(MAC_A, "eth0")]), missing("eth1"));
    // 802-3-ethernet counts as ethernet.
    assert_eq!(
        one_host_error("interfaces:\n- {name: eth1, type: 802-3-ethernet, state: up}\n", &[(MAC_A, "eth0")]),
        missing("eth1")
    );
    // Predictable physical names and MAC-identified interfaces need no mapping.
    validate(&[host("interfaces:\n- {name: enp1s0, type: ethernet, state: up}\n", &[(MAC_A, "eth0")])]).unwrap();
    validate(&[host(
        "interfaces:\n- {name: lan, type: ethernet, state: up, identifier: mac-address, mac-address: '02:00:00:00:00:0b'}\n",
        &[(MAC_A, "eth0")],
    )])
    .unwrap();
    // A bond port that only the MAC map defines is fine; one that is defined but unmapped is not.
    let bond = "interfaces:\n- name: bond0\n  type: bond\n  state: up\n  link-aggregation: {mode: active-backup, port: [eth0, eth1]}\n";
    validate(&[host(bond, &[(MAC_A, "eth0"), (MAC_B, "eth1")])]).unwrap();
    let bond_over_dummy = format!("{bond}- {{name: eth1, type: dummy, state: up}}\n");
    assert_eq!(one_host_error(&bond_over_dummy, &[(MAC_A, "eth0")]), missing("eth1"));
    // Each interface once, even when both the ethernet and the bond rule hit it.
    assert_eq!(
        one_host_error(&format!("{bond}- {{name: eth1, type: ethernet, state: up}}\n"), &[(MAC_A, "eth0")]),
        missing("eth1")
    );
    // A VLAN on an interface nobody defines must be on a mapped or physical one.
    let vlan = "interfaces:\n- {name: vlan10, type: vlan, state: up, vlan: {base-iface: eth3, id: 10}}\n";
    assert_eq!(one_host_error(vlan, &[(MAC_A, "eth0")]), missing("eth3"));
    validate(&[host(vlan, &[(MAC_A, "eth3")])]).unwrap();
    validate(&[host(&vlan.replace("eth3", "ens3"), &[(MAC_A, "eth0")])]).unwrap();
}

#[test]
fn a_mac_in_two_hosts_is_an_error_naming_both() {
    let hosts = [
        host(ETH0_STATIC, &[(MAC_A, "eth0")]),
        host(ETH0_STATIC, &[(MAC_B, "eth0")]),
        host(ETH0_STATIC, &[("02:00:00:00:00:0A", "eth0")]),
    ];
    assert_eq!(error_of(&hosts), "MAC address 02:00:00:00:00:0A is used by host 0 and host 2");
    // Two identical NMStateConfigs are the usual way to get there.
    let example = example_host();
    let err = error_of(&[example.clone(), example]);
    assert_eq!(
        err,
        "MAC address 02:00:00:80:12:14 is used by host 0 and host 1; MAC address 02:00:00:80:12:15 is used by host 0 and host 1"
    );
}

#[test]
fn problems_of_all_hosts_are_collected() {
    let hosts = [host(ETH0_STATIC, &[]), host("", &[(MAC_A, "eth0")]), host(ETH0_STATIC, &[(MAC_B, "eth0")])];
    let Err(StaticNetError::Invalid(problems)) = validate(&hosts) else { panic!("expected problems") };
    let messages: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            "at least one interface for host 0 must be provided",
            "failed to validate network yaml for host 1, cannot generate configuration with an empty host YAML",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Strings nmstate copies into keyfiles

/// nmstate writes string values into keyfiles as they are. A line break in one ends its line, and
/// the rest becomes keys and groups of its own: the issue's `dns-resolver.config.search` adding an
/// `[ipv4] method=disabled` and `description` adding `[connection] autoconnect=false`, and the same
/// through every other string field (DHCP client ids, 802.1x identities, bond options, OVS
/// external ids and their keys...). Any such string is refused, naming where it is and showing the
/// character escaped; so are the other strings that would change what NetworkManager reads.
#[test]
fn strings_that_would_change_a_keyfile_are_refused_naming_the_field() {
    let m = &[(MAC_A, "eth0"), (MAC_B, "eth1")];
    let prefix = "failed to validate network yaml for host 0, ";
    let with_search = |search: &str| format!("{ETH0_STATIC}dns-resolver:\n  config:\n    search: [{search}]\n");
    let with_eth0 = |field: &str| ETH0_STATIC.replace("    state: up\n", &format!("    state: up\n    {field}\n"));
    let bond = |options: &str| {
        format!(
            "interfaces:\n- name: bond0\n  type: bond\n  state: up\n  link-aggregation: {{mode: active-backup, port: [eth0], options: {options}}}\n"
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (
            with_search(r#""example.com\n[ipv4]\nmethod=disabled""#),
            r"dns-resolver.config.search[0] contains the control character '\n' (U+000A)",
        ),
        (
            with_eth0(r#"description: "uplink\n[connection]\nautoconnect=false""#),
            r"interfaces[0].description contains the control character '\n' (U+000A)",
        ),
        (
            ETH0_STATIC.replace("      dhcp: false\n", "      dhcp: true\n      dhcp-client-id: \"id\\r\\n[x]\"\n"),
            r"interfaces[0].ipv4.dhcp-client-id contains the control character '\r' (U+000D)",
        ),
        (
            with_eth0(r#"802.1x: {identity: "me\u001b[2J", eap-methods: [tls]}"#),
            r"interfaces[0].802.1x.identity contains the control character '\u{1b}' (U+001B)",
        ),
        (bond(r#"{primary: "eth0\u0085"}"#), r"interfaces[0].link-aggregation.options.primary contains the control character '\u{85}' (U+0085)"),
        (
            with_eth0(r#"description: "nul\u0000""#),
            r"interfaces[0].description contains the control character '\0' (U+0000)",
        ),
        // nmstate refuses this address, but its message would quote the line break as it is.
        (
            format!("{ETH0_STATIC}routes:\n  config:\n  - {{destination: \"0.0.0.0/0\\n[x]\", next-hop-address: 192.0.2.1, next-hop-interface: eth0}}\n"),
            r"routes.config[0].destination contains the control character '\n' (U+000A)",
        ),
        // GKeyFile reads `\n` in a value as a line break, and `\;` as a ';' inside an item.
        (with_search(r#""a\\;b""#), r"dns-resolver.config.search[0] contains a backslash, which NetworkManager would read as an escape"),
        // nmstate joins list items with ';'.
        (with_search(r#"ok.example, "a;b""#), "dns-resolver.config.search[1] contains ';', which separates list items in a keyfile"),
        (with_search(r#"" lead.example""#), "dns-resolver.config.search[0] starts with a blank, which NetworkManager would drop"),
        // Keys of OVS maps become keyfile keys (`data.<key>`).
        (
            "interfaces:\n- name: br0\n  type: ovs-bridge\n  state: up\n  bridge: {port: [{name: ovs0}]}\n  ovs-db: {external_ids: {\"a=b\": v}}\n- {name: ovs0, type: ovs-interface, state: up}\n".to_string(),
            r#"interfaces[0].ovs-db.external_ids has a key "a=b" that contains '=', which a keyfile key cannot carry"#,
        ),
        (
            "interfaces:\n- name: \"e\\tth0\"\n  type: ethernet\n  state: up\n".to_string(),
            r"interfaces[0].name contains the control character '\t' (U+0009)",
        ),
    ];
    for (yaml, expect) in &cases {
        let err = one_host_error(yaml, m);
        assert_eq!(err, format!("{prefix}{expect}"), "{yaml}");
    }
    // Every string of a document is reported, in document order.
    let two =
        with_search(r#""a\nb", "c\rd""#).replace("    state: up\n", "    state: up\n    description: \"x\\u007f\"\n");
    assert_eq!(
        one_host_error(&two, m),
        format!(
            "{prefix}interfaces[0].description contains the control character '\\u{{7f}}' (U+007F); \
             {prefix}dns-resolver.config.search[0] contains the control character '\\n' (U+000A); \
             {prefix}dns-resolver.config.search[1] contains the control character '\\r' (U+000D)"
        )
    );
}

/// What can stay: `=`, `#`, `[`, `]`, ';' outside lists and blanks inside or at the end of a
/// value are nothing special after `key=`, and Unicode is UTF-8 like any value. The keyfile carries
/// them as they are.
#[test]
fn strings_a_keyfile_carries_as_they_are_are_accepted() {
    let description = "rack 3; port=7 #2 [uplink] ünï\u{2028}\u{202e}名 ";
    let yaml = ETH0_STATIC.replace(
        "    state: up\n",
        &format!("    state: up\n    description: {}\n", serde_json::to_string(description).unwrap()),
    );
    validate(&[host(&yaml, &[(MAC_A, "eth0")])]).unwrap();
    let files = keyfiles(&yaml).unwrap();
    assert!(files[0].1.contains(&format!("\nnmstate.interface.description={description}\n")), "{}", files[0].1);
}

/// Messages show MAC map values escaped too, also where they are not the value at fault.
#[test]
fn mac_map_values_are_shown_escaped() {
    let bad_mac = "02:00:00:00:00:0a\n[x]";
    let err = one_host_error(ETH0_STATIC, &[(bad_mac, "my\nnic")]);
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert_eq!(
        err,
        "invalid MAC address \"02:00:00:00:00:0a\\n[x]\" for interface \"my\\nnic\" of host 0; \
         invalid interface name \"my\\nnic\" for MAC 02:00:00:00:00:0a\\n[x] of host 0; \
         mac-interface mapping for interface eth0 is missing and not a physical interface"
    );
    // The same bad MAC in two hosts is reported where it is invalid, not again as shared.
    let err = error_of(&[host(ETH0_STATIC, &[(bad_mac, "eth0")]), host(ETH0_STATIC, &[(bad_mac, "eth0")])]);
    assert!(!err.chars().any(char::is_control), "{err:?}");
}

/// Behind the check of the document: each keyfile nmstate writes must read back, line by line, as
/// groups and keys, none twice. `keyfiles` (which applies only nmstate's checks) shows it.
#[test]
fn keyfiles_that_do_not_read_back_are_refused() {
    let description = ETH0_STATIC
        .replace("    state: up\n", "    state: up\n    description: \"x\\n[connection]\\nautoconnect=false\"\n");
    let err = keyfiles(&description).unwrap_err().to_string();
    assert_eq!(
        err,
        "nmstate wrote eth0.nmconnection so that it does not read back as the keys it was generated from \
         (line 20 repeats a group: \"[connection]\")"
    );
    let client_id = ETH0_STATIC.replace("      dhcp: false\n", "      dhcp: true\n      dhcp-client-id: \"a\\nb\"\n");
    let err = keyfiles(&client_id).unwrap_err().to_string();
    assert!(err.contains("is neither a group, a key nor a comment: \"b\""), "{err}");
}

/// A field of an nmstate document that the property below fills with generated strings.
struct Slot {
    /// The document, `{V}` standing for the field's value (a YAML double-quoted string).
    yaml: &'static str,
    /// Its path, as problems name it.
    path: &'static str,
    /// A value nmstate accepts and writes as it is.
    placeholder: &'static str,
    /// How the value reaches the keyfiles.
    kind: SlotKind,
    /// Whether the MAC map names the interface after the value (the interface name).
    map_named: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum SlotKind {
    /// Copied into one value (or, `list`, one list item) as it is.
    Verbatim { list: bool },
    /// Parsed by nmstate (addresses, routes): only the groups and keys are compared.
    Typed,
}

const SLOTS: &[Slot] = &[
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}\ndns-resolver: {config: {search: [{V}], server: [192.0.2.53]}}\n",
        path: "dns-resolver.config.search[0]",
        placeholder: "placeholder.example",
        kind: SlotKind::Verbatim { list: true },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}\ndns-resolver: {config: {server: [{V}]}}\n",
        path: "dns-resolver.config.server[0]",
        placeholder: "192.0.2.53",
        kind: SlotKind::Typed,
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  description: {V}\n",
        path: "interfaces[0].description",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: {V}\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}\n",
        path: "interfaces[0].name",
        placeholder: "ifplaceholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: true,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: true, dhcp-client-id: {V}}\n",
        path: "interfaces[0].ipv4.dhcp-client-id",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  802.1x: {identity: {V}, eap-methods: [tls]}\n",
        path: "interfaces[0].802.1x.identity",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: bond0\n  type: bond\n  state: up\n  link-aggregation: {mode: active-backup, port: [eth0], options: {primary: {V}}}\n",
        path: "interfaces[0].link-aggregation.options.primary",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: br0\n  type: ovs-bridge\n  state: up\n  bridge: {port: [{name: ovs0}]}\n  ovs-db: {external_ids: {id: {V}}}\n- {name: ovs0, type: ovs-interface, state: up}\n",
        path: "interfaces[0].ovs-db.external_ids.id",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        // The value is a key of the map (`data.<key>` in the keyfile).
        yaml: "interfaces:\n- name: br0\n  type: ovs-bridge\n  state: up\n  bridge: {port: [{name: ovs0}]}\n  ovs-db: {external_ids: {{V}: x}}\n- {name: ovs0, type: ovs-interface, state: up}\n",
        path: "interfaces[0].ovs-db.external_ids",
        placeholder: "placeholder",
        kind: SlotKind::Verbatim { list: false },
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: {V}, prefix-length: 24}]}\n",
        path: "interfaces[0].ipv4.address[0].ip",
        placeholder: "192.0.2.10",
        kind: SlotKind::Typed,
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}\nroutes: {config: [{destination: {V}, next-hop-address: 192.0.2.1, next-hop-interface: eth0}]}\n",
        path: "routes.config[0].destination",
        placeholder: "198.51.100.0/24",
        kind: SlotKind::Typed,
        map_named: false,
    },
    Slot {
        yaml: "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n  ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}\nroutes: {config: [{destination: 0.0.0.0/0, next-hop-address: {V}, next-hop-interface: eth0}]}\n",
        path: "routes.config[0].next-hop-address",
        placeholder: "192.0.2.1",
        kind: SlotKind::Typed,
        map_named: false,
    },
];

/// `value` as a YAML double-quoted scalar: everything but printable ASCII escaped, so that the
/// document's parser sees exactly `value` (YAML 1.1 parsers break lines at U+2028 and U+0085).
fn yaml_quoted(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// A keyfile as GLib's GKeyFile (NetworkManager's reader) reads it: lines split at `\n` (a `\r`
/// before it dropped), leading blanks skipped, `#` comments, `[group]` headers (a group named again
/// continues), `key=value` split at the first `=` with blanks trimmed after the key and before the
/// value; a later value of a key replaces the earlier one. Values stay escaped. `Err` for a line
/// GKeyFile refuses, which makes NetworkManager ignore the whole file.
fn gkeyfile(text: &str) -> Result<BTreeMap<(String, String), String>, String> {
    let mut out = BTreeMap::new();
    let mut group: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line).trim_start_matches(|c: char| c.is_ascii_whitespace());
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            let name = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')).ok_or(format!("bad group {line:?}"))?;
            group = Some(name.to_string());
        } else if let Some((key, value)) = line.split_once('=') {
            let group = group.clone().ok_or(format!("key before any group: {line:?}"))?;
            let key = key.trim_end_matches(|c: char| c.is_ascii_whitespace()).to_string();
            let value = value.trim_start_matches(|c: char| c.is_ascii_whitespace()).to_string();
            out.insert((group, key), value);
        } else {
            return Err(format!("not a key file line: {line:?}"));
        }
    }
    Ok(out)
}

/// A value as NetworkManager reads it with GKeyFile's string getters: `\s`, `\n`, `\t`, `\r`, `\\`
/// un-escaped; as a list, split at the `;` not escaped (`\;` un-escaped), a final empty item dropped.
fn gkeyfile_value(raw: &str, list: bool) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('s') => items.last_mut().unwrap().push(' '),
                Some('n') => items.last_mut().unwrap().push('\n'),
                Some('t') => items.last_mut().unwrap().push('\t'),
                Some('r') => items.last_mut().unwrap().push('\r'),
                Some(';') if list => items.last_mut().unwrap().push(';'),
                Some(other) => items.last_mut().unwrap().push(other),
                None => {}
            },
            ';' if list => items.push(String::new()),
            c => items.last_mut().unwrap().push(c),
        }
    }
    if list && items.last().is_some_and(String::is_empty) {
        items.pop();
    }
    items
}

/// The keyfiles the ramdisk carries for one host, by file name.
fn shipped_keyfiles(config: &HostStaticConfig) -> BTreeMap<String, String> {
    let entries = ramdisk_files(&RamdiskInput { hosts: std::slice::from_ref(config), proxy: None }).unwrap();
    entries
        .into_iter()
        .filter_map(|e| match e {
            RamdiskEntry::File { path, contents, .. } if path.ends_with(".nmconnection") => {
                Some((path.rsplit('/').next().unwrap().to_string(), String::from_utf8(contents).unwrap()))
            }
            _ => None,
        })
        .collect()
}

/// Pieces with a meaning somewhere between YAML, nmstate, GKeyFile, NetworkManager and the boot
/// script, and ordinary ones.
const PIECES: &[&str] = &[
    "\n",
    "\r",
    "\t",
    "\0",
    "\x1b",
    "\x7f",
    "\u{85}",
    "\u{9b}",
    "\u{2028}",
    "\u{202e}",
    "\u{feff}",
    "\n[ipv4]\nmethod=disabled",
    "\n[connection]\nautoconnect=false",
    "\nextra=1",
    "[x]",
    "=",
    ";",
    "#",
    "\"",
    "'",
    "`",
    "\\",
    "\\n",
    "\\s",
    "\\;",
    " ",
    ",",
    "%",
    "$",
    "/",
    ".",
    ":",
    "é",
    "名",
    "a",
    "eth",
    "0",
    "1",
    "example.com",
    "192.0.2.9",
    "::1",
    "/24",
];

/// Pieces a keyfile carries as they are, so that a good part of the values get through the checks
/// and their keyfiles are compared; with a blank or `;` inside and maybe a blank at the end.
const CARRIED_PIECES: &[&str] = &[
    "a",
    "eth",
    "0",
    "1",
    "-",
    "_",
    ".",
    ":",
    "/",
    "example.com",
    "192.0.2.9",
    "::1",
    "/24",
    "=",
    "#",
    "[x]",
    "]",
    "\"",
    "'",
    "`",
    ",",
    "%",
    "$",
    "é",
    "名",
    "\u{2028}",
    "\u{202e}",
    "\u{feff}",
    "\u{a0}",
];

fn field_value() -> impl Strategy<Value = String> {
    let any = prop::collection::vec(prop::sample::select(PIECES), 1..6).prop_map(|pieces| pieces.concat());
    let carried = (
        prop::collection::vec(prop::sample::select(CARRIED_PIECES), 1..5),
        prop::sample::select(&[" ", ";", ""][..]),
        prop::sample::select(&[" ", ""][..]),
    )
        .prop_map(|(mut pieces, inner, last)| {
            pieces.insert(pieces.len() / 2 + 1, inner);
            pieces.push(last);
            pieces.concat()
        });
    prop_oneof![any, carried]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whatever string a field holds, the document is refused with a problem (naming the field when
    /// the string has a control character, and quoting nothing raw), or its keyfiles read back, as
    /// NetworkManager reads them, as the same groups and keys as with a plain value in that field,
    /// and, for fields nmstate copies, the same values with the string in place of the plain one.
    #[test]
    fn any_string_field_is_refused_or_gives_the_intended_keys(slot in 0..SLOTS.len(), value in field_value()) {
        let slot = &SLOTS[slot];
        let config = |value: &str| {
            let name = if slot.map_named { value } else { "eth0" };
            host(&slot.yaml.replace("{V}", &yaml_quoted(value)), &[(MAC_A, name)])
        };
        let intended = shipped_keyfiles(&config(slot.placeholder));
        match validate(&[config(&value)]) {
            Err(StaticNetError::Invalid(problems)) => {
                let message = StaticNetError::Invalid(problems).to_string();
                prop_assert!(!message.chars().any(char::is_control), "a raw control character in {message:?}");
                if value.chars().any(char::is_control) {
                    prop_assert!(
                        message.contains(&format!("{} contains the control character", slot.path))
                            || message.contains(&format!("{} has a key", slot.path))
                            || (slot.map_named && message.contains("invalid interface name")),
                        "{value:?} refused, but not for its control character: {message}"
                    );
                }
            }
            Err(e) => prop_assert!(false, "{e:?}"),
            Ok(()) => {
                let got = shipped_keyfiles(&config(&value));
                let rename = |name: &str| if slot.map_named { name.replace(slot.placeholder, &value) } else { name.to_string() };
                let intended_names: Vec<String> = intended.keys().map(|n| rename(n)).collect();
                prop_assert_eq!(got.keys().cloned().collect::<Vec<_>>(), intended_names);
                for (name, text) in &intended {
                    // Keys named after the value (`data.<key>` of OVS maps) are expected under its name.
                    let want: BTreeMap<(String, String), String> = gkeyfile(text)
                        .unwrap()
                        .into_iter()
                        .map(|((group, key), raw)| ((group, key.replace(slot.placeholder, &value)), raw))
                        .collect();
                    let have = gkeyfile(&got[&rename(name)]);
                    prop_assert!(have.is_ok(), "{value:?} gives a keyfile NetworkManager refuses: {:?}", have);
                    let have = have.unwrap();
                    prop_assert_eq!(have.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "{:?}", value);
                    let SlotKind::Verbatim { list } = slot.kind else { continue };
                    for (key, raw) in &want {
                        if key.1 == "uuid" {
                            continue; // derived from the interface name
                        }
                        let wanted: Vec<String> = gkeyfile_value(raw, list)
                            .into_iter()
                            .map(|v| v.replace(slot.placeholder, &value))
                            .collect();
                        let read = gkeyfile_value(&have[key], list);
                        prop_assert_eq!(&read, &wanted, "{:?} in {} [{}] {}", value, name, key.0, key.1);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ramdisk

const NETWORK_DIR_ENTRIES: [&str; 4] = ["etc", "etc/assisted", "etc/assisted/network", "etc/assisted/network/host0"];

#[test]
fn ramdisk_layout_modes_and_symlink() {
    let hosts = [host(VLAN_YAML, &[(MAC_C, "eth0")]), example_host()];
    let proxy = ProxyEnv {
        http_proxy: Some("http://proxy.example.com:3128"),
        https_proxy: None,
        no_proxy: Some(".cluster.local"),
    };
    let input = RamdiskInput { hosts: &hosts, proxy: Some(proxy) };
    let archive = ramdisk(&input).unwrap().unwrap();
    assert_eq!(archive.len() % 4, 0, "padded to 4 bytes");

    // Members, in order, with their modes (directories once each, before their contents).
    let found: Vec<(String, u32)> = members(&archive).into_iter().map(|(p, m, _)| (p, m)).collect();
    // normalize() orders the hosts by YAML text: VLAN_YAML indents its list ("interfaces:\n  -"),
    // the re-serialized example does not ("interfaces:\n-"), and ' ' < '-': VLAN_YAML is host0.
    assert_eq!(normalize(hosts.to_vec()), hosts);
    let expected: Vec<(&str, u32)> = vec![
        (NETWORK_DIR_ENTRIES[0], 0o40755),
        (NETWORK_DIR_ENTRIES[1], 0o40755),
        (NETWORK_DIR_ENTRIES[2], 0o40755),
        (NETWORK_DIR_ENTRIES[3], 0o40755),
        ("etc/assisted/network/host0/eth0.100.nmconnection", 0o100600),
        ("etc/assisted/network/host0/eth0.nmconnection", 0o100600),
        ("etc/assisted/network/host0/mac_interface.ini", 0o100600),
        ("etc/assisted/network/host1", 0o40755),
        ("etc/assisted/network/host1/eth0.nmconnection", 0o100600),
        ("etc/assisted/network/host1/eth1.nmconnection", 0o100600),
        ("etc/assisted/network/host1/mac_interface.ini", 0o100600),
        ("usr", 0o40755),
        ("usr/local", 0o40755),
        ("usr/local/bin", 0o40755),
        ("usr/local/bin/pre-network-manager-config.sh", 0o100755),
        ("usr/local/bin/common_network_script.sh", 0o100755),
        ("etc/systemd", 0o40755),
        ("etc/systemd/system", 0o40755),
        ("etc/systemd/system/pre-network-manager-config.service", 0o100644),
        ("etc/systemd/system/initrd.target.wants", 0o40755),
        ("etc/systemd/system/initrd.target.wants/pre-network-manager-config.service", 0o120777),
        ("etc/systemd/system/coreos-livepxe-rootfs.service.d", 0o40755),
        ("etc/systemd/system/coreos-livepxe-rootfs.service.d/10-proxy.conf", 0o100664),
    ];
    let found_ref: Vec<(&str, u32)> = found.iter().map(|(p, m)| (p.as_str(), *m)).collect();
    assert_eq!(found_ref, expected);

    // The symlink's target.
    let link = members(&archive).into_iter().find(|(_, m, _)| *m == 0o120777).unwrap();
    assert_eq!(link.2, b"/etc/systemd/system/pre-network-manager-config.service");

    // The crate's reader sees the regular files with their contents.
    let files = read_initrd(&archive).unwrap();
    let regular: Vec<&str> = expected.iter().filter(|(_, m)| m & 0o170000 == 0o100000).map(|(p, _)| *p).collect();
    assert_eq!(files.keys().map(String::as_str).collect::<Vec<_>>(), {
        let mut sorted = regular.clone();
        sorted.sort_unstable();
        sorted
    });
    assert_eq!(files["etc/assisted/network/host0/mac_interface.ini"], b"02:00:00:00:00:0c=eth0");
    let unit = String::from_utf8(files["etc/systemd/system/pre-network-manager-config.service"].clone()).unwrap();
    let unit_keys = ini(&unit);
    assert_eq!(get(&unit_keys, "Service", "Type"), Some("oneshot"));
    assert_eq!(get(&unit_keys, "Service", "ExecStart"), Some("/usr/local/bin/pre-network-manager-config.sh"));
    assert_eq!(get(&unit_keys, "Unit", "After"), Some("systemd-udev-settle.service"));
    assert_eq!(get(&unit_keys, "Unit", "Before"), Some("coreos-copy-firstboot-network.service"));
    assert_eq!(get(&unit_keys, "Unit", "DefaultDependencies"), Some("no"));
    let proxy_conf =
        String::from_utf8(files["etc/systemd/system/coreos-livepxe-rootfs.service.d/10-proxy.conf"].clone()).unwrap();
    assert!(proxy_conf.contains("[Service]\n"), "{proxy_conf}");
    for line in [
        "Environment=http_proxy=http://proxy.example.com:3128",
        "Environment=HTTP_PROXY=http://proxy.example.com:3128",
        "Environment=no_proxy=.cluster.local",
        "Environment=NO_PROXY=.cluster.local",
    ] {
        assert!(proxy_conf.lines().any(|l| l == line), "{line} missing from {proxy_conf}");
    }
    assert!(!proxy_conf.contains("https_proxy"), "unset values are left out");
    assert!(files["usr/local/bin/pre-network-manager-config.sh"].starts_with(b"#!/bin/sh\n"));

    // `cpio -itv` agrees on modes and the link.
    let listing = cpio_list(&archive);
    let by_name: BTreeMap<&str, (&str, Option<&str>)> = listing
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() == 9 || fields.len() == 11, "unexpected cpio line {line:?}");
            (fields[8], (fields[0], fields.get(10).copied()))
        })
        .collect();
    assert_eq!(by_name.len(), expected.len());
    for (path, mode) in &expected {
        let want = match mode {
            0o40755 => "drwxr-xr-x",
            0o100600 => "-rw-------",
            0o100755 => "-rwxr-xr-x",
            0o100644 => "-rw-r--r--",
            0o100664 => "-rw-rw-r--",
            0o120777 => "lrwxrwxrwx",
            other => panic!("{other:o}"),
        };
        assert_eq!(by_name[path].0, want, "{path}");
    }
    assert_eq!(
        by_name["etc/systemd/system/initrd.target.wants/pre-network-manager-config.service"].1,
        Some("/etc/systemd/system/pre-network-manager-config.service")
    );
}

fn cpio_list(archive: &[u8]) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("cpio")
        .args(["-itv", "--quiet"])
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cpio is installed");
    child.stdin.take().unwrap().write_all(&gunzip(archive)).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "cpio: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn ramdisk_is_deterministic_and_independent_of_host_order() {
    let hosts = [example_variant(1), example_variant(2), host(VLAN_YAML, &[(MAC_C, "eth0")])];
    let a = ramdisk(&RamdiskInput { hosts: &hosts, proxy: None }).unwrap().unwrap();
    let b = ramdisk(&RamdiskInput { hosts: &hosts, proxy: None }).unwrap().unwrap();
    assert_eq!(a, b);
    let mut shuffled = hosts.to_vec();
    shuffled.rotate_left(1);
    shuffled[0].mac_interface_map.reverse();
    let c = ramdisk(&RamdiskInput { hosts: &shuffled, proxy: None }).unwrap().unwrap();
    assert_eq!(a, c, "hosts are normalized before numbering");
    assert_eq!(normalize(shuffled), normalize(hosts.to_vec()));
}

#[test]
fn nothing_to_add_gives_none() {
    assert_eq!(ramdisk(&RamdiskInput { hosts: &[], proxy: None }).unwrap(), None);
    let blank = ProxyEnv { http_proxy: Some(""), https_proxy: Some("  "), no_proxy: None };
    assert_eq!(ramdisk(&RamdiskInput { hosts: &[], proxy: Some(blank) }).unwrap(), None);
    assert!(ramdisk_files(&RamdiskInput { hosts: &[], proxy: None }).unwrap().is_empty());
}

#[test]
fn proxy_only_ramdisk_has_just_the_dropin() {
    let proxy = ProxyEnv { https_proxy: Some("http://p:3128/%7Euser"), ..Default::default() };
    let archive = ramdisk(&RamdiskInput { hosts: &[], proxy: Some(proxy) }).unwrap().unwrap();
    let files = read_initrd(&archive).unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), [staticnet::PROXY_DROPIN_PATH]);
    let conf = String::from_utf8(files[staticnet::PROXY_DROPIN_PATH].clone()).unwrap();
    assert!(conf.contains("Environment=https_proxy=http://p:3128/%%7Euser\n"), "{conf}");
    assert!(conf.contains("Environment=HTTPS_PROXY=http://p:3128/%%7Euser\n"), "{conf}");
    let bad = ProxyEnv { http_proxy: Some("http://p:3128\nExecStartPre=/bin/true"), ..Default::default() };
    let err = ramdisk(&RamdiskInput { hosts: &[], proxy: Some(bad) }).unwrap_err();
    assert!(matches!(err, StaticNetError::InvalidProxy { name: "http_proxy", .. }), "{err}");
}

#[test]
fn invalid_config_gives_no_ramdisk() {
    let hosts = [host(ETH0_STATIC, &[])];
    let err = ramdisk(&RamdiskInput { hosts: &hosts, proxy: None }).unwrap_err();
    assert_eq!(err.to_string(), "at least one interface for host 0 must be provided");
}

/// The table asked for in the brief: ramdisk size for N copies of the example NMStateConfig,
/// each with its own MACs and addresses. Run with `--no-capture` to see it.
#[test]
fn ramdisk_size_by_host_count() {
    let mut previous = 0;
    println!("{:>5} {:>12} {:>12} {:>8} {:>10}", "hosts", "gzip bytes", "cpio bytes", "B/host", "ms");
    for n in [1usize, 10, 50, 100, 200, 400] {
        let hosts: Vec<HostStaticConfig> = (0..n).map(example_variant).collect();
        let started = std::time::Instant::now();
        let archive = ramdisk(&RamdiskInput { hosts: &hosts, proxy: None }).unwrap().unwrap();
        let ms = started.elapsed().as_millis();
        let cpio_len = gunzip(&archive).len();
        println!("{n:>5} {:>12} {cpio_len:>12} {:>8} {ms:>10}", archive.len(), archive.len() / n);
        assert!(archive.len() > previous);
        previous = archive.len();
        let files = read_initrd(&archive).unwrap();
        assert_eq!(files.keys().filter(|p| p.ends_with("/mac_interface.ini")).count(), n);
    }
}

// ---------------------------------------------------------------------------------------------
// The boot script, run for real

struct FakeMachine {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    sys: PathBuf,
}

impl FakeMachine {
    /// The ramdisk unpacked into a fake root marked as an initrd, and a fake /sys/class/net with
    /// `nics` (`(name, MAC as the kernel shows it)`) plus `lo`.
    fn new(hosts: &[HostStaticConfig], nics: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let sys = tmp.path().join("sys/class/net");
        let archive = ramdisk(&RamdiskInput { hosts, proxy: None }).unwrap().unwrap();
        for (path, data) in read_initrd(&archive).unwrap() {
            let dest = root.join(&path);
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::write(&dest, data).unwrap();
        }
        std::fs::write(root.join("etc/initrd-release"), "NAME=test\n").unwrap();
        for (name, mac) in nics.iter().chain(&[("lo", "00:00:00:00:00:00")]) {
            std::fs::create_dir_all(sys.join(name)).unwrap();
            std::fs::write(sys.join(name).join("address"), format!("{mac}\n")).unwrap();
        }
        // Leftovers the script must clear: an embedded keyfile and nm-initrd-generator's default.
        let firstboot = root.join("etc/coreos-firstboot-network");
        std::fs::create_dir_all(&firstboot).unwrap();
        std::fs::write(firstboot.join("old.nmconnection"), "[connection]\nid=old\n").unwrap();
        let run_nm = root.join("run/NetworkManager/system-connections");
        std::fs::create_dir_all(&run_nm).unwrap();
        std::fs::write(run_nm.join("default_connection.nmconnection"), "[connection]\nid=Wired Connection\n").unwrap();
        Self { _tmp: tmp, root, sys }
    }

    fn run(&self, shell: &str, settle_stable: u32) -> String {
        let out = Command::new(shell)
            .arg(self.root.join("usr/local/bin/pre-network-manager-config.sh"))
            .env("STATICNET_ROOT", &self.root)
            .env("STATICNET_SYS_CLASS_NET", &self.sys)
            .env("STATICNET_SETTLE_STABLE", settle_stable.to_string())
            .env("STATICNET_SETTLE_MAX", "5")
            .env_remove("STATICNET_TARGET_DIR")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{shell} failed:\n{log}");
        log
    }

    /// The keyfiles in /etc/coreos-firstboot-network (each checked to be mode 0600, except the
    /// leftover the script had no reason to touch).
    fn target(&self) -> BTreeMap<String, Ini> {
        let dir = self.root.join("etc/coreos-firstboot-network");
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != "old.nmconnection" {
                assert_eq!(entry.metadata().unwrap().permissions().mode() & 0o777, 0o600, "{:?}", entry.path());
            }
            let text = std::fs::read_to_string(entry.path()).unwrap();
            out.insert(entry.file_name().into_string().unwrap(), ini(&text));
        }
        out
    }

    fn default_connection_exists(&self) -> bool {
        self.root.join("run/NetworkManager/system-connections/default_connection.nmconnection").exists()
    }
}

const SHELLS: [&str; 2] = ["sh", "bash"];

#[test]
fn script_installs_the_matching_host_with_real_nic_names() {
    let hosts = [example_host(), example_variant(7)];
    for shell in SHELLS {
        // The kernel shows MACs in lower case, the example has them so too; use upper case to
        // check that matching ignores case.
        let machine = FakeMachine::new(
            &hosts,
            &[("ens3", "02:00:00:80:12:14"), ("ens4", "02:00:00:80:12:15".to_uppercase().as_str())],
        );
        let log = machine.run(shell, 0);
        let target = machine.target();
        assert_eq!(target.keys().collect::<Vec<_>>(), ["ens3.nmconnection", "ens4.nmconnection"], "{shell}:\n{log}");
        let ens3 = &target["ens3.nmconnection"];
        assert_eq!(get(ens3, "connection", "interface-name"), Some("ens3"));
        assert_eq!(get(ens3, "connection", "id"), Some("ens3"));
        assert_eq!(get(ens3, "connection", "autoconnect-priority"), Some("1"));
        assert_eq!(get(ens3, "ipv4", "address0"), Some("192.168.126.30/24"));
        assert_eq!(get(ens3, "ipv4", "route0"), Some("0.0.0.0/0,192.168.126.1,0"));
        let ens4 = &target["ens4.nmconnection"];
        assert_eq!(get(ens4, "connection", "interface-name"), Some("ens4"));
        assert_eq!(get(ens4, "ipv4", "address0"), Some("192.168.140.30/24"));
        assert!(!machine.default_connection_exists(), "{shell}: nm-initrd-generator's profile is removed");
        // example_variant's YAML sorts first (indented list), so the example is host1.
        assert!(log.contains("host1: logical interface eth0 is ens3 here"), "{log}");
    }
}

#[test]
fn script_handles_swapped_names_vlans_and_long_names() {
    // Logical eth0 is the kernel's eth1 and logical eth1 a NIC with a long name carrying VLAN 100.
    let yaml = "interfaces:
  - name: eth0
    type: ethernet
    state: up
    ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}
  - name: eth1
    type: ethernet
    state: up
    ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.11, prefix-length: 24}]}
  - name: eth1.100
    type: vlan
    state: up
    vlan: {base-iface: eth1, id: 100}
    ipv4: {enabled: true, dhcp: false, address: [{ip: 198.51.100.7, prefix-length: 25}]}
";
    let hosts = [host(yaml, &[(MAC_A, "eth0"), (MAC_B, "eth1")])];
    for shell in SHELLS {
        let machine = FakeMachine::new(&hosts, &[("eth1", MAC_A), ("enp0s20f0u1u2", MAC_B)]);
        let log = machine.run(shell, 0);
        let target = machine.target();
        assert_eq!(
            target.keys().collect::<Vec<_>>(),
            ["enp0s20f0u1.100.nmconnection", "enp0s20f0u1u2.nmconnection", "eth1.nmconnection"],
            "{shell}:\n{log}"
        );
        let eth1 = &target["eth1.nmconnection"];
        assert_eq!(get(eth1, "connection", "interface-name"), Some("eth1"));
        assert_eq!(get(eth1, "ipv4", "address0"), Some("192.0.2.10/24"), "logical eth0's settings");
        let long = &target["enp0s20f0u1u2.nmconnection"];
        assert_eq!(get(long, "connection", "interface-name"), Some("enp0s20f0u1u2"));
        assert_eq!(get(long, "ipv4", "address0"), Some("192.0.2.11/24"));
        let vlan = &target["enp0s20f0u1.100.nmconnection"];
        // "enp0s20f0u1u2.100" is 17 bytes: the NIC part is cut so that the name fits in 15.
        assert_eq!(get(vlan, "connection", "interface-name"), Some("enp0s20f0u1.100"));
        assert_eq!(get(vlan, "connection", "id"), Some("enp0s20f0u1.100"));
        assert_eq!(get(vlan, "vlan", "parent"), Some("enp0s20f0u1u2"), "the parent keeps its real name");
        assert_eq!(get(vlan, "vlan", "id"), Some("100"));
    }

    // A plain swap: each profile must end up on the other name, not be renamed twice.
    let two = "interfaces:
  - {name: eth0, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.10, prefix-length: 24}]}}
  - {name: eth1, type: ethernet, state: up, ipv4: {enabled: true, dhcp: false, address: [{ip: 192.0.2.11, prefix-length: 24}]}}
";
    let hosts = [host(two, &[(MAC_A, "eth0"), (MAC_B, "eth1")])];
    let machine = FakeMachine::new(&hosts, &[("eth0", MAC_B), ("eth1", MAC_A)]);
    machine.run("sh", 0);
    let target = machine.target();
    assert_eq!(get(&target["eth1.nmconnection"], "ipv4", "address0"), Some("192.0.2.10/24"));
    assert_eq!(get(&target["eth1.nmconnection"], "connection", "interface-name"), Some("eth1"));
    assert_eq!(get(&target["eth0.nmconnection"], "ipv4", "address0"), Some("192.0.2.11/24"));
    assert_eq!(get(&target["eth0.nmconnection"], "connection", "interface-name"), Some("eth0"));
}

#[test]
fn script_bond_ports_follow_their_nics() {
    let yaml = "interfaces:
  - name: bond0
    type: bond
    state: up
    ipv4: {enabled: true, dhcp: true}
    link-aggregation: {mode: active-backup, port: [eth0, eth1]}
  - {name: eth0, type: ethernet, state: up}
  - {name: eth1, type: ethernet, state: up}
";
    let hosts = [host(yaml, &[(MAC_A, "eth0"), (MAC_B, "eth1")])];
    let machine = FakeMachine::new(&hosts, &[("ens1f0", MAC_A), ("ens1f1", MAC_B)]);
    machine.run("bash", 0);
    let target = machine.target();
    assert_eq!(target.keys().collect::<Vec<_>>(), ["bond0.nmconnection", "ens1f0.nmconnection", "ens1f1.nmconnection"]);
    assert_eq!(get(&target["bond0.nmconnection"], "connection", "interface-name"), Some("bond0"));
    for nic in ["ens1f0", "ens1f1"] {
        let port = &target[&format!("{nic}.nmconnection")];
        assert_eq!(get(port, "connection", "interface-name"), Some(nic));
        assert_eq!(get(port, "connection", "master"), Some("bond0"));
    }
}

#[test]
fn script_leaves_a_machine_without_matching_macs_alone() {
    let hosts = [example_host()];
    for shell in SHELLS {
        let machine = FakeMachine::new(&hosts, &[("ens3", MAC_C)]);
        let log = machine.run(shell, 0);
        assert!(log.contains("nothing to do"), "{log}");
        assert_eq!(machine.target().keys().collect::<Vec<_>>(), ["old.nmconnection"]);
        assert!(machine.default_connection_exists());
    }
}

#[test]
fn script_waits_for_the_nic_list_to_settle() {
    let hosts = [example_host()];
    let machine = FakeMachine::new(&hosts, &[("ens3", "02:00:00:80:12:14")]);
    let started = std::time::Instant::now();
    let log = machine.run("sh", 1);
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "waited one stable second");
    assert!(log.contains("network devices: ens3"), "{log}");
    // Logical eth1's MAC is not on this machine: its keyfile is left out rather than bound to
    // whatever device might be called "eth1".
    assert_eq!(machine.target().keys().collect::<Vec<_>>(), ["ens3.nmconnection"], "{log}");
    assert!(log.contains("host0/eth1.nmconnection not used: its interface is not on this machine"), "{log}");
}

#[test]
fn scripts_are_shellcheck_clean() {
    if Command::new("shellcheck").arg("--version").output().is_err() {
        eprintln!("shellcheck not installed; skipped");
        return;
    }
    let machine = FakeMachine::new(&[example_host()], &[]);
    let bin = machine.root.join("usr/local/bin");
    for dialect in ["sh", "bash", "dash"] {
        let out = Command::new("shellcheck")
            .current_dir(&bin)
            .args(["-x", "-s", dialect, "pre-network-manager-config.sh", "common_network_script.sh"])
            .output()
            .unwrap();
        assert!(out.status.success(), "shellcheck -s {dialect}:\n{}", String::from_utf8_lossy(&out.stdout));
    }
}
