//! [`validate`]: assisted-service's `ValidateStaticConfigParamsYAML` rules, plus the checks
//! nmstate 2.2 does not make (it turns an unknown interface type into ethernet, copies a
//! malformed MAC through, accepts VLAN id 5000, invents ethernet profiles for bond ports
//! nobody defined, and copies any string into a keyfile as it is, line breaks included), plus
//! MACs shared between hosts.

use std::collections::{HashMap, HashSet};

use yaml_serde::Value;

use super::{
    HostStaticConfig, MacInterface, Problem, StaticNetError, YamlProblem, check_generated, generate_from, keyfile,
    parse,
};

use crate::keylocks::Locked as _;

/// Interface types nmstate 2.2 knows, as written in YAML, plus `802-3-ethernet`, which
/// assisted-service treats as ethernet (nmstate does the same by accident: it maps every type
/// it does not know to ethernet). Left out: `unknown` and `tun` (query-only).
const KNOWN_TYPES: &[&str] = &[
    "ethernet",
    "802-3-ethernet",
    "bond",
    "linux-bridge",
    "dummy",
    "hsr",
    "loopback",
    "mac-vlan",
    "mac-vtap",
    "ovs-bridge",
    "ovs-interface",
    "veth",
    "vlan",
    "vrf",
    "vxlan",
    "infiniband",
    "macsec",
    "ipsec",
    "xfrm",
    "ipvlan",
];

/// Interface fields that hold a MAC address.
const MAC_FIELDS: &[&str] = &["mac-address", "permanent-mac-address"];

/// Checks the static network configs of one InfraEnv. `host <i>` in messages is the index in
/// `hosts` as passed.
///
/// Per host, in this order:
/// 1. The MAC map: "at least one interface for host <i> must be provided"; "MACs and
///    Interfaces for host <i> must be unique" (MACs compared case-insensitively); each MAC
///    `xx:xx:xx:xx:xx:xx`; each name usable as an interface name.
/// 2. The YAML, each failure as "failed to validate network yaml for host <i>, <reason>":
///    a string (value or mapping key, in any field) that cannot go into a keyfile as it is (a
///    control character, a backslash, ...; see the `keyfile` submodule), each named by its path;
///    empty; rejected by nmstate; an interface without name or type, or with a type nmstate
///    does not know; a malformed `mac-address`/`permanent-mac-address` (6 octets, or 20 for
///    InfiniBand); a VLAN id outside 1..4094; a bond port defined neither in `interfaces` nor in
///    the MAC map; a route whose `next-hop-interface` is not in `interfaces`; nmstate's
///    `gen_conf` failing, producing no keyfile, or a keyfile that does not read back as groups
///    and keys. The first step that fails ends the host's YAML checks.
/// 3. Interface mapping (assisted-service's rule; skipped when the map is empty, which 1.
///    reports already): every ethernet interface, bond port and
///    (an addition) VLAN base interface not defined in `interfaces` must be in the MAC map,
///    carry `identifier: mac-address`, or have a predictable physical name (`^en[PsvxXbucaipod]`),
///    else "mac-interface mapping for interface <n> is missing and not a physical interface".
///
/// Then across hosts: a MAC in two hosts' maps is "MAC address <mac> is used by host <i> and
/// host <j>" (the boot script would apply both hosts' files on that machine).
///
/// All problems are collected; assisted-service stops at the first YAML failure.
pub fn validate(hosts: &[HostStaticConfig]) -> Result<(), StaticNetError> {
    validate_and_generate(&hosts.iter().collect::<Vec<_>>()).map(drop)
}

/// [`validate`], returning each host's keyfiles (generated on the way, and memoized) as the
/// ramdisk carries them when all is well.
pub(super) fn validate_and_generate(hosts: &[&HostStaticConfig]) -> Result<Vec<Keyfiles>, StaticNetError> {
    let mut problems = Vec::new();
    let mut generated = Vec::with_capacity(hosts.len());
    for (host, config) in hosts.iter().enumerate() {
        check_mac_map(host, &config.mac_interface_map, &mut problems);
        if let Some(keyfiles) = check_network_yaml(host, config, &mut problems) {
            generated.push(keyfiles);
        }
    }
    check_macs_across_hosts(hosts, &mut problems);
    if problems.is_empty() { Ok(generated) } else { Err(StaticNetError::Invalid(problems)) }
}

/// `(file name, contents)` with [`with_autoconnect`](super::with_autoconnect) applied, sorted by
/// name; shared by every build that selects the same config.
pub(super) type Keyfiles = std::sync::Arc<[(String, String)]>;

fn check_mac_map(host: usize, map: &[MacInterface], problems: &mut Vec<Problem>) {
    if map.is_empty() {
        problems.push(Problem::NoInterfaces { host });
        return;
    }
    if !unique_names_and_macs(map) {
        problems.push(Problem::NotUnique { host });
    }
    for entry in map {
        if !is_mac(&entry.mac_address, &[6]) {
            problems.push(Problem::InvalidMapMac {
                host,
                interface: entry.logical_nic_name.clone(),
                mac: entry.mac_address.clone(),
            });
        }
        if !is_usable_nic_name(&entry.logical_nic_name) {
            problems.push(Problem::InvalidNicName {
                host,
                interface: entry.logical_nic_name.clone(),
                mac: entry.mac_address.clone(),
            });
        }
    }
}

/// Whether no two entries share a name, or a MAC (compared case-insensitively). A host has a
/// handful of NICs, and a build checks every host it carries: small maps are compared pair by
/// pair, without the sets.
fn unique_names_and_macs(map: &[MacInterface]) -> bool {
    if map.len() <= 16 {
        return map.iter().enumerate().all(|(i, e)| {
            map[..i].iter().all(|f| {
                f.logical_nic_name != e.logical_nic_name && !f.mac_address.eq_ignore_ascii_case(&e.mac_address)
            })
        });
    }
    let names: HashSet<&str> = map.iter().map(|e| e.logical_nic_name.as_str()).collect();
    let macs: HashSet<String> = map.iter().map(|e| e.mac_address.to_ascii_lowercase()).collect();
    names.len() == map.len() && macs.len() == map.len()
}

/// The YAML checks of one host; its keyfiles when nmstate could generate them.
fn check_network_yaml(host: usize, config: &HostStaticConfig, problems: &mut Vec<Problem>) -> Option<Keyfiles> {
    let outcome = yaml_outcome(config);
    problems.extend(outcome.problems.iter().map(|reason| Problem::NetworkYaml { host, reason: reason.clone() }));
    problems.extend(
        outcome.unmapped.iter().map(|interface| Problem::MissingMapping { host, interface: interface.clone() }),
    );
    outcome.keyfiles.clone()
}

/// What the YAML checks of one network YAML, with one set of mapped interface names, found.
#[derive(Debug)]
struct YamlOutcome {
    problems: Vec<YamlProblem>,
    /// Interfaces needing a MAC mapping that have none.
    unmapped: Vec<String>,
    keyfiles: Option<Keyfiles>,
}

/// Outcomes by digest of (YAML, mapped names). nmstate's parse and keyfile generation are most of
/// the cost of building a static-network ramdisk, and an NMStateConfig is selected by every build of
/// every InfraEnv that uses it: each spec change, pull-secret rotation or restart rebuilds them all.
static OUTCOMES: std::sync::Mutex<Option<std::collections::HashMap<[u8; 32], std::sync::Arc<YamlOutcome>>>> =
    std::sync::Mutex::new(None);
/// Outcomes kept at most (a few KiB each); past it the memo starts over.
const MAX_OUTCOMES: usize = 50_000;

/// Runs the YAML checks of `config` (nmstate parse, keyfile generation) ahead of any build that needs
/// them, so that a new InfraEnv selecting it only assembles its ramdisk.
pub fn prepare(config: &HostStaticConfig) {
    yaml_outcome(config);
}

fn yaml_outcome(config: &HostStaticConfig) -> std::sync::Arc<YamlOutcome> {
    use sha2::Digest;
    let mut names: Vec<&str> = config.mac_interface_map.iter().map(|e| e.logical_nic_name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut h = sha2::Sha256::new();
    h.update(config.network_yaml.as_bytes());
    for name in &names {
        h.update([0u8]);
        h.update(name.as_bytes());
    }
    // Whether the map is empty changes the outcome (no "missing mapping" problems then).
    h.update([u8::from(config.mac_interface_map.is_empty())]);
    let key: [u8; 32] = h.finalize().into();
    if let Some(found) = OUTCOMES.locked().as_ref().and_then(|m| m.get(&key)) {
        return found.clone();
    }
    let outcome = std::sync::Arc::new(check_yaml(config, &names.into_iter().collect()));
    let mut memo = OUTCOMES.locked();
    let memo = memo.get_or_insert_with(Default::default);
    if memo.len() >= MAX_OUTCOMES {
        memo.clear();
    }
    memo.insert(key, outcome.clone());
    outcome
}

fn check_yaml(config: &HostStaticConfig, map_names: &HashSet<&str>) -> YamlOutcome {
    let mut outcome = YamlOutcome { problems: Vec::new(), unmapped: Vec::new(), keyfiles: None };
    // The document untyped, for what nmstate's types hide (unknown type strings) or do not check.
    let doc: Result<Value, _> = yaml_serde::from_str(&config.network_yaml);
    // First its strings, before nmstate sees them: it copies them into keyfiles as they are, and
    // its messages quote them as they are.
    if let Ok(doc) = &doc {
        let found = keyfile::unsafe_strings(doc);
        if !found.is_empty() {
            outcome.problems = found.into_iter().map(YamlProblem::UnsafeString).collect();
            return outcome;
        }
    }
    let state = match parse(&config.network_yaml) {
        Ok(state) => state,
        Err(e) => {
            outcome.problems.push(e);
            return outcome;
        }
    };
    let doc = match doc {
        Ok(doc) => doc,
        Err(e) => {
            outcome.problems.push(YamlProblem::Nmstate(e.to_string()));
            return outcome;
        }
    };
    let ifaces = match interfaces(&doc) {
        Ok(ifaces) => ifaces,
        Err(e) => {
            outcome.problems.push(e);
            return outcome;
        }
    };
    let found = gap_checks(&doc, &ifaces, map_names);
    if !found.is_empty() {
        outcome.problems = found;
        return outcome;
    }
    let keyfiles = generate_from(&state).and_then(|keyfiles| {
        keyfiles
            .into_iter()
            .map(|(name, contents)| {
                // What the ramdisk carries, checked again after the autoconnect keys went in.
                let contents = super::with_autoconnect(&contents);
                check_generated(&name, &contents).map(|()| (name, contents))
            })
            .collect::<Result<Vec<_>, _>>()
    });
    match keyfiles {
        Ok(keyfiles) => outcome.keyfiles = Some(keyfiles.into()),
        Err(e) => {
            outcome.problems.push(e);
            return outcome;
        }
    }
    // With an empty map, "at least one interface ..." says it already.
    if !config.mac_interface_map.is_empty() {
        outcome.unmapped = unmapped_interfaces(&ifaces, map_names);
    }
    outcome
}

/// One entry of `interfaces`.
struct Iface<'a> {
    name: &'a str,
    kind: Option<&'a str>,
    absent: bool,
    value: &'a Value,
}

impl Iface<'_> {
    fn is_ethernet(&self) -> bool {
        matches!(self.kind, Some("ethernet" | "802-3-ethernet"))
    }
}

fn interfaces(doc: &Value) -> Result<Vec<Iface<'_>>, YamlProblem> {
    let Some(list) = doc.get("interfaces").and_then(Value::as_sequence) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|value| {
            let name = value.get("name").and_then(Value::as_str).ok_or(YamlProblem::MissingName)?;
            Ok(Iface {
                name,
                kind: value.get("type").and_then(Value::as_str),
                absent: value.get("state").and_then(Value::as_str) == Some("absent"),
                value,
            })
        })
        .collect()
}

/// The checks nmstate 2.2 does not make.
fn gap_checks(doc: &Value, ifaces: &[Iface<'_>], map_names: &HashSet<&str>) -> Vec<YamlProblem> {
    let mut found = Vec::new();
    let defined: HashSet<&str> = ifaces.iter().filter(|i| !i.absent).map(|i| i.name).collect();
    for iface in ifaces {
        let interface = iface.name.to_string();
        match iface.kind {
            None if iface.absent => {}
            None => found.push(YamlProblem::MissingType { interface: interface.clone() }),
            Some(kind) if !KNOWN_TYPES.contains(&kind) => {
                found.push(YamlProblem::UnknownType { interface: interface.clone(), kind: kind.to_string() });
            }
            Some(_) => {}
        }
        for &field in MAC_FIELDS {
            if let Some(value) = iface.value.get(field)
                && !value.as_str().is_some_and(|mac| is_mac(mac, &[6, 20]))
            {
                found.push(YamlProblem::InvalidMac { interface: interface.clone(), field, value: scalar_text(value) });
            }
        }
        if iface.kind == Some("vlan")
            && let Some(id) = iface.value.get("vlan").and_then(|vlan| vlan.get("id"))
            && !integer(id).is_some_and(|id| (1..=4094).contains(&id))
        {
            found.push(YamlProblem::VlanIdOutOfRange { interface: interface.clone(), id: scalar_text(id) });
        }
        if iface.kind == Some("bond") {
            for port in bond_ports(iface.value) {
                if !defined.contains(port) && !map_names.contains(port) {
                    found.push(YamlProblem::UndefinedBondPort { bond: interface.clone(), port: port.to_string() });
                }
            }
        }
    }
    let routes = doc.get("routes").and_then(|r| r.get("config")).and_then(Value::as_sequence);
    for route in routes.into_iter().flatten() {
        if route.get("state").and_then(Value::as_str) == Some("absent") {
            continue;
        }
        if let Some(interface) = route.get("next-hop-interface").and_then(Value::as_str)
            && !defined.contains(interface)
        {
            found.push(YamlProblem::UndefinedRouteInterface {
                destination: route.get("destination").map_or_else(|| "?".into(), scalar_text),
                interface: interface.to_string(),
            });
        }
    }
    // nmstate leaves a DNS server it cannot read as an address out of the keyfiles, without a
    // word: the host would boot without the resolver its config names.
    let servers = doc.get("dns-resolver").and_then(|d| d.get("config")).and_then(|c| c.get("server"));
    for server in servers.and_then(Value::as_sequence).into_iter().flatten() {
        if !server.as_str().is_some_and(is_dns_server_address) {
            found.push(YamlProblem::InvalidDnsServer { value: scalar_text(server) });
        }
    }
    found
}

/// An IPv4 or IPv6 address, or an IPv6 link-local address with its interface (`fe80::1%eth0`).
fn is_dns_server_address(s: &str) -> bool {
    match s.split_once('%') {
        None => s.parse::<std::net::IpAddr>().is_ok(),
        Some((ip, interface)) => {
            ip.parse::<std::net::Ipv6Addr>().is_ok_and(|ip| ip.is_unicast_link_local())
                && !interface.is_empty()
                && interface.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        }
    }
}

/// Port names of a bond: `link-aggregation` (or its alias `bond`), `port` (or `ports`) and the
/// names in `ports-config`.
fn bond_ports(iface: &Value) -> Vec<&str> {
    let Some(bond) = iface.get("link-aggregation").or_else(|| iface.get("bond")) else {
        return Vec::new();
    };
    let listed = bond.get("port").or_else(|| bond.get("ports")).and_then(Value::as_sequence);
    let configured = bond.get("ports-config").and_then(Value::as_sequence);
    let mut ports: Vec<&str> = listed.into_iter().flatten().filter_map(Value::as_str).collect();
    for port in configured.into_iter().flatten().filter_map(|c| c.get("name").and_then(Value::as_str)) {
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// assisted-service's mapping rule (`validateInterfaceNamesExistenceYAML`), extended to VLAN
/// base interfaces that `interfaces` does not define. Each name once, in document order.
///
/// assisted-service names the bond rather than the port when a port lacks a mapping; the port is
/// what needs the mapping, so it is named here.
fn unmapped_interfaces(ifaces: &[Iface<'_>], map_names: &HashSet<&str>) -> Vec<String> {
    let mac_identified: HashSet<&str> = ifaces
        .iter()
        .filter(|i| i.value.get("identifier").and_then(Value::as_str) == Some("mac-address"))
        .map(|i| i.name)
        .collect();
    let defined: HashSet<&str> = ifaces.iter().filter(|i| !i.absent).map(|i| i.name).collect();
    let mapped =
        |name: &str| map_names.contains(name) || mac_identified.contains(name) || is_predictable_physical(name);
    let mut missing: Vec<String> = Vec::new();
    let mut note = |name: &str| {
        if !mapped(name) && !missing.iter().any(|m| m == name) {
            missing.push(name.to_string());
        }
    };
    for iface in ifaces {
        match iface.kind {
            _ if iface.is_ethernet() => note(iface.name),
            Some("bond") => bond_ports(iface.value).into_iter().for_each(&mut note),
            Some("vlan") => {
                let base = iface.value.get("vlan").and_then(|v| v.get("base-iface")).and_then(Value::as_str);
                if let Some(base) = base.filter(|b| !defined.contains(b)) {
                    note(base);
                }
            }
            _ => {}
        }
    }
    missing
}

fn check_macs_across_hosts(hosts: &[&HostStaticConfig], problems: &mut Vec<Problem>) {
    let mut first_host: HashMap<String, usize> = HashMap::new();
    for (host, config) in hosts.iter().enumerate() {
        // A malformed MAC is reported as such already; it matches no machine.
        for entry in config.mac_interface_map.iter().filter(|e| is_mac(&e.mac_address, &[6])) {
            let key = entry.mac_address.to_ascii_lowercase();
            match first_host.get(&key) {
                Some(&first) if first != host => {
                    problems.push(Problem::DuplicateMac { mac: entry.mac_address.clone(), first, second: host })
                }
                Some(_) => {} // twice in one host: NotUnique already
                None => {
                    first_host.insert(key, host);
                }
            }
        }
    }
}

/// `octets` colon-separated pairs of hex digits.
fn is_mac(text: &str, octets: &[usize]) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    octets.contains(&parts.len()) && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// systemd's predictable names for physical NICs (`man systemd.net-naming-scheme`), as
/// assisted-service matches them: `^en[PsvxXbucaipod]`.
fn is_predictable_physical(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() > 2 && bytes.starts_with(b"en") && b"PsvxXbucaipod".contains(&bytes[2])
}

/// A name the boot script can read back from `mac_interface.ini` and use as a file name.
fn is_usable_nic_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// An integer, also written as a string (nmstate accepts `id: "100"`).
fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        other => yaml_serde::to_string(other).map(|s| s.trim_end().to_string()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memo of YAML outcomes gives what the checks give, per map: the same YAML with and without
    /// a mapping for eth1, in either order, and for another host index.
    #[test]
    fn memoized_outcomes_depend_on_the_yaml_and_the_mapped_names() {
        let yaml =
            "interfaces:\n- name: eth0\n  type: ethernet\n  state: up\n- name: eth1\n  type: ethernet\n  state: up\n";
        let host = |names: &[&str]| HostStaticConfig {
            mac_interface_map: names
                .iter()
                .enumerate()
                .map(|(i, n)| MacInterface {
                    mac_address: format!("02:00:00:00:00:{i:02x}"),
                    logical_nic_name: n.to_string(),
                })
                .collect(),
            network_yaml: yaml.to_string(),
        };
        let problems = |hosts: &[HostStaticConfig]| match validate(hosts) {
            Ok(()) => vec![],
            Err(StaticNetError::Invalid(p)) => p,
            Err(e) => panic!("{e}"),
        };
        let missing = vec![Problem::MissingMapping { host: 0, interface: "eth1".into() }];
        for _ in 0..2 {
            assert_eq!(problems(&[host(&["eth0"])]), missing);
            assert_eq!(problems(&[host(&["eth0", "eth1"])]), vec![]);
            assert_eq!(problems(&[host(&["eth1", "eth0"])]), vec![]);
        }
        let mut other = HostStaticConfig { network_yaml: yaml.replace("eth1", "eth2"), ..host(&["eth0", "eth1"]) };
        for entry in &mut other.mac_interface_map {
            entry.mac_address = entry.mac_address.replace("02:00:00:00:00", "02:00:00:00:01");
        }
        assert_eq!(
            problems(&[host(&["eth0", "eth1"]), other]),
            vec![Problem::MissingMapping { host: 1, interface: "eth2".into() }]
        );
    }

    #[test]
    fn names_and_macs_must_be_unique_in_small_and_large_maps() {
        let entry = |mac: String, name: String| MacInterface { mac_address: mac, logical_nic_name: name };
        for size in [1, 2, 16, 17, 40] {
            let map: Vec<MacInterface> =
                (0..size).map(|i| entry(format!("02:00:00:00:00:{i:02x}"), format!("eth{i}"))).collect();
            assert!(unique_names_and_macs(&map), "{size} distinct entries");
            if size < 2 {
                continue;
            }
            let mut same_name = map.clone();
            same_name[size - 1].logical_nic_name = "eth0".into();
            assert!(!unique_names_and_macs(&same_name), "{size} entries, a name twice");
            // MACs compare without case.
            let mut same_mac = map.clone();
            same_mac[0].mac_address = "02:00:00:00:00:AA".into();
            same_mac[size - 1].mac_address = "02:00:00:00:00:aa".into();
            assert!(!unique_names_and_macs(&same_mac), "{size} entries, a MAC twice");
        }
    }

    #[test]
    fn macs() {
        assert!(is_mac("02:00:00:80:12:14", &[6]));
        assert!(is_mac("02:00:00:AB:cd:EF", &[6]));
        for bad in
            ["02:00:00:80:12", "02:00:00:80:12:14:15", "02-00-00-80-12-14", "0:00:00:80:12:14", "zz:00:00:80:12:14"]
        {
            assert!(!is_mac(bad, &[6]), "{bad}");
        }
        let ib = vec!["80"; 20].join(":");
        assert!(is_mac(&ib, &[6, 20]) && !is_mac(&ib, &[6]));
    }

    #[test]
    fn predictable_names() {
        for name in ["enp1s0", "ens3", "eno1", "enP2p1s0", "enx0200008012aa", "enc600", "enib0", "ena0"] {
            assert!(is_predictable_physical(name), "{name}");
        }
        for name in ["eth0", "en", "enq1", "bond0", "wlp2s0"] {
            assert!(!is_predictable_physical(name), "{name}");
        }
    }

    #[test]
    fn integers_also_from_strings() {
        let v: Value = yaml_serde::from_str("[5, '17', x, 1.5]").unwrap();
        let got: Vec<Option<i64>> = v.as_sequence().unwrap().iter().map(integer).collect();
        assert_eq!(got, [Some(5), Some(17), None, None]);
    }

    #[test]
    fn bond_ports_from_all_spellings() {
        let v: Value = yaml_serde::from_str(
            "{bond: {ports: [a, b], ports-config: [{name: b}, {name: c}]}, link-aggregation: {port: [x]}}",
        )
        .unwrap();
        // link-aggregation wins over its alias, as in nmstate (it only reads one of them).
        assert_eq!(bond_ports(&v), ["x"]);
        let v: Value = yaml_serde::from_str("{bond: {ports: [a, b], ports-config: [{name: b}, {name: c}]}}").unwrap();
        assert_eq!(bond_ports(&v), ["a", "b", "c"]);
    }
}
