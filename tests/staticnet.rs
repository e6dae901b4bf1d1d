//! Static network configuration: nmstate → keyfiles, validation, the static-network ramdisk and
//! its boot script (run for real under `sh` and `bash` against a fake root and sysfs).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bootstream::initrd::read_initrd;
use bootstream::staticnet::{
    self, HostStaticConfig, MacInterface, ProxyEnv, RamdiskEntry, RamdiskInput, StaticNetError, keyfiles, normalize,
    ramdisk, ramdisk_files, validate,
};

// ---------------------------------------------------------------------------------------------
// Helpers

fn shared(rel: &str) -> PathBuf {
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    let base = if beside.is_dir() { beside } else { PathBuf::from("/work/shared") };
    base.join(rel)
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
