//! nmstate YAML to NetworkManager keyfiles: `staticnet::keyfiles` (what an NMStateConfig's
//! `spec.config` goes through), then `staticnet::validate` and the static-network ramdisk
//! (`staticnet::ramdisk`) for a host whose MAC map names eth0/eth1 (or the names listed on a
//! leading `# map: NAME NAME ...` comment line).
#![no_main]

use bootstream::content::staticnet::{self, HostStaticConfig, MacInterface, ProxyEnv, RamdiskInput};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(yaml) = std::str::from_utf8(data) else { return };
    if let Ok(files) = staticnet::keyfiles(yaml) {
        assert!(!files.is_empty());
        for (name, _) in &files {
            assert!(!name.is_empty() && !name.contains('/'), "{name:?}");
        }
    }
    let names: Vec<String> = match yaml.lines().next().and_then(|l| l.strip_prefix("# map:")) {
        Some(list) => list.split_whitespace().take(8).map(String::from).collect(),
        None => vec!["eth0".into(), "eth1".into()],
    };
    let host = HostStaticConfig {
        mac_interface_map: names
            .into_iter()
            .enumerate()
            .map(|(i, logical_nic_name)| MacInterface {
                mac_address: format!("52:54:00:00:00:{i:02x}"),
                logical_nic_name,
            })
            .collect(),
        network_yaml: yaml.to_string(),
    };
    let hosts = [host];
    if staticnet::validate(&hosts).is_ok() {
        let proxy = ProxyEnv { http_proxy: Some("http://proxy.example:3128"), https_proxy: None, no_proxy: None };
        let archive = staticnet::ramdisk(&RamdiskInput { hosts: &hosts, proxy: Some(proxy) })
            .expect("a validated config builds a ramdisk");
        let files =
            bootstream::formats::initrd::read_initrd(&archive.expect("hosts give a ramdisk")).expect("ramdisk reads back");
        assert!(files.keys().any(|p| p.starts_with(staticnet::NETWORK_DIR)));
    }
});
