//! NMStateConfigs selected by an InfraEnv travel as the static-network ramdisk: in the ISO's Ignition
//! embed area after the Ignition archive, and appended to the PXE initrd. Adding, changing and deleting
//! one changes the served image and the InfraEnv's status; bad input gives a clear condition and HTTP error.

use crate::common;

use common::*;
use serde_json::Value;

const SELECTOR: &str = "  nmStateConfigLabelSelector:\n    matchLabels:\n      fleet: rack1\n";

fn nmstate(ns: &str, name: &str, mac_suffix: u8, ip: &str) -> String {
    format!(
        "apiVersion: agent-install.openshift.io/v1beta1
kind: NMStateConfig
metadata:
  name: {name}
  namespace: {ns}
  labels:
    fleet: rack1
spec:
  config:
    interfaces:
      - name: eth0
        type: ethernet
        state: up
        mac-address: 02:00:00:80:12:{mac_suffix:02x}
        ipv4:
          enabled: true
          address:
            - ip: {ip}
              prefix-length: 24
          dhcp: false
    dns-resolver:
      config:
        server:
          - 192.168.126.1
    routes:
      config:
        - destination: 0.0.0.0/0
          next-hop-address: 192.168.126.1
          next-hop-interface: eth0
  interfaces:
    - name: eth0
      macAddress: 02:00:00:80:12:{mac_suffix:02x}
"
    )
}

struct Env {
    server: Server,
    dir: tempfile::TempDir,
    base: std::path::PathBuf,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let base = fixture_iso("embed-areas-2023-07.x86_64", dir.path());
    let server = Server::start(&["--os-image", &format!("4.19:x86_64:{}", base.display())]);
    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml("n", "ie", SELECTOR));
    server.wait_image_created("n", "ie", "True");
    Env { server, dir, base }
}

impl Env {
    fn infraenv(&self) -> Value {
        self.server.get_json("infraenv", "n", "ie")
    }
    fn iso(&self) -> Response {
        let ie = self.infraenv();
        self.server.get(&self.server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap()))
    }
    /// The files of the ISO's Ignition embed area, as coreos-installer lists them.
    fn area_files(&self, iso: &[u8]) -> Vec<String> {
        let area: Value = serde_json::from_slice(&coreos_installer(&[
            "dev",
            "show",
            "iso",
            "--ignition",
            self.base.to_str().unwrap(),
        ]))
        .unwrap();
        let (off, len) = (area["offset"].as_u64().unwrap() as usize, area["length"].as_u64().unwrap() as usize);
        let path = self.dir.path().join("area.img");
        std::fs::write(&path, &iso[off..off + len]).unwrap();
        String::from_utf8(coreos_installer(&["dev", "show", "initrd", path.to_str().unwrap()]))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn adding_changing_and_deleting_nmstateconfigs_changes_the_image() {
    let e = env();
    let before = e.infraenv();
    let iso0 = e.iso();
    let etag0 = iso0.header("etag").unwrap().to_string();
    assert_eq!(e.area_files(&iso0.body), vec!["config.ign"]);

    std::thread::sleep(std::time::Duration::from_millis(1100));
    e.server.apply_ok(&nmstate("n", "host-a", 0x14, "192.168.126.30"));
    let added = e.server.wait_infraenv("n", "ie", "a new createdTime", |ie| {
        ie["status"]["createdTime"] != before["status"]["createdTime"]
    });
    assert_eq!(condition(&added, "ImageCreated").unwrap()["status"], "True");
    let iso1 = e.iso();
    let etag1 = iso1.header("etag").unwrap().to_string();
    assert_ne!(etag1, etag0);
    let files = e.area_files(&iso1.body);
    for f in [
        "config.ign",
        "etc/assisted/network/host0/eth0.nmconnection",
        "etc/assisted/network/host0/mac_interface.ini",
        "usr/local/bin/pre-network-manager-config.sh",
        "etc/systemd/system/pre-network-manager-config.service",
    ] {
        assert!(files.iter().any(|l| l == f), "{f} not in the ISO's embed area: {files:?}");
    }
    // coreos-installer still reads the Ignition config from the area.
    let served = e.dir.path().join("served.iso");
    std::fs::write(&served, &iso1.body).unwrap();
    let id = added["metadata"]["uid"].as_str().unwrap();
    let ign =
        e.server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(coreos_installer(&["iso", "ignition", "show", served.to_str().unwrap()]), ign.body);

    // The PXE initrd carries the same ramdisk after the Ignition archive.
    // (This fixture's own initrd is a placeholder coreos-installer cannot decode; list what we appended.)
    let initrd = e.server.get(&e.server.path_of(added["status"]["bootArtifacts"]["initrd"].as_str().unwrap()));
    let pxe = e.dir.path().join("pxe");
    std::fs::create_dir_all(&pxe).unwrap();
    coreos_installer(&["iso", "extract", "pxe", "-o", pxe.to_str().unwrap(), e.base.to_str().unwrap()]);
    let base_initrd = std::fs::read(pxe.join("embed-areas-2023-07.x86_64-initrd.img")).unwrap();
    assert!(initrd.body.starts_with(&base_initrd));
    let path = e.dir.path().join("appended.img");
    std::fs::write(&path, &initrd.body[base_initrd.len()..]).unwrap();
    let listing = String::from_utf8(coreos_installer(&["dev", "show", "initrd", path.to_str().unwrap()])).unwrap();
    assert!(listing.lines().any(|l| l == "etc/assisted/network/host0/eth0.nmconnection"), "{listing}");

    // The status points at the static network files, which download as a tar.
    let tar_url = added["status"]["debugInfo"]["staticNetworkDownloadURL"].as_str().unwrap();
    assert!(tar_url.ends_with("file_name=static-network-config"), "{tar_url}");
    let tar = e.server.get(&e.server.path_of(tar_url));
    assert_eq!(tar.status, 200);
    let listing = std::process::Command::new("tar")
        .arg("-tv")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&tar.body)?;
            c.wait_with_output()
        })
        .unwrap();
    let listing = String::from_utf8(listing.stdout).unwrap();
    assert!(
        listing.contains("-rw------- ") && listing.contains("etc/assisted/network/host0/eth0.nmconnection"),
        "{listing}"
    );
    assert!(
        before["status"]["debugInfo"].get("staticNetworkDownloadURL").is_none(),
        "no static network URL without static network"
    );

    // Changing it changes the image again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    e.server.apply_ok(&nmstate("n", "host-a", 0x14, "192.168.126.31"));
    let changed = e.server.wait_infraenv("n", "ie", "a new createdTime", |ie| {
        ie["status"]["createdTime"] != added["status"]["createdTime"]
    });
    let etag2 = e.iso().header("etag").unwrap().to_string();
    assert_ne!(etag2, etag1);

    // A config with other labels, or in another namespace, is not selected.
    e.server.apply_ok(&nmstate("n", "other", 0x20, "192.168.126.40").replace("fleet: rack1", "fleet: rack2"));
    e.server.apply_ok(&pull_secret_yaml("m"));
    e.server.apply_ok(&nmstate("m", "elsewhere", 0x21, "192.168.126.41"));
    assert_eq!(e.iso().header("etag").unwrap(), etag2);

    // Relabelled away from the InfraEnv's selector, it leaves the image; labelled back, it returns.
    let digest = changed["status"]["imageDigest"].clone();
    e.server.apply_ok(&nmstate("n", "host-a", 0x14, "192.168.126.31").replace("fleet: rack1", "fleet: rack2"));
    let away = e.server.wait_infraenv("n", "ie", "a new imageDigest", |ie| ie["status"]["imageDigest"] != digest);
    assert_eq!(e.iso().header("etag").unwrap(), etag0);
    let digest = away["status"]["imageDigest"].clone();
    e.server.apply_ok(&nmstate("n", "host-a", 0x14, "192.168.126.31"));
    let back = e.server.wait_infraenv("n", "ie", "a new imageDigest", |ie| ie["status"]["imageDigest"] != digest);
    assert_eq!(e.iso().header("etag").unwrap(), etag2);

    // Deleting it gives back the first image, byte for byte (content-derived ETag).
    let digest = back["status"]["imageDigest"].clone();
    let out = cli(&["delete", "--kubeconfig", &e.server.kubeconfig, "nmstateconfig", "host-a", "-n", "n"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    e.server.wait_infraenv("n", "ie", "a new imageDigest", |ie| ie["status"]["imageDigest"] != digest);
    let after = e.iso();
    assert_eq!(after.header("etag").unwrap(), etag0);
    assert!(after.body == iso0.body);
}

/// Every invalid or over-size case gives ImageCreated=False with the reason, and the downloads answer
/// 4xx with the same message; never a truncated image.
#[test]
fn invalid_and_oversize_inputs_give_a_condition_and_an_http_error() {
    let e = env();
    let check = |what: &str, expect: &str| {
        let ie = e.server.wait_image_created("n", "ie", "False");
        let c = condition(&ie, "ImageCreated").unwrap();
        assert_eq!(c["reason"], "ImageCreationError", "{what}");
        let msg = c["message"].as_str().unwrap().to_string();
        assert!(msg.starts_with("Failed to create image: "), "{what}: {msg}");
        assert!(msg.contains(expect), "{what}: expected {expect:?} in {msg:?}");
        assert!(ie["status"].get("isoDownloadURL").is_none(), "{what}: no URL without an image");
        let id = ie["metadata"]["uid"].as_str().unwrap();
        for path in [format!("/byid/{id}/4.19/x86_64/full.iso"), format!("/images/{id}/pxe-initrd?version=4.19")] {
            let r = e.server.get(&path);
            if what.contains("kernel") && path.contains("pxe-initrd") {
                continue; // kernel arguments do not concern the PXE initrd
            }
            assert_eq!(r.status, 409, "{what}: {path}: {}", r.text());
            assert!(r.text().contains(expect), "{what}: {path}: {}", r.text());
        }
    };

    // Bad nmstate YAML (an address nmstate refuses).
    e.server.apply_ok(&nmstate("n", "bad", 0x30, "300.1.1.1"));
    check("bad nmstate", "static network config");
    cli(&["delete", "--kubeconfig", &e.server.kubeconfig, "nmstateconfig", "bad", "-n", "n"], None);
    e.server.wait_image_created("n", "ie", "True");

    // The same MAC in two NMStateConfigs.
    e.server.apply_ok(&nmstate("n", "one", 0x40, "192.168.126.50"));
    e.server.apply_ok(&nmstate("n", "two", 0x40, "192.168.126.51"));
    check("duplicate MAC", "02:00:00:80:12:40");
    cli(&["delete", "--kubeconfig", &e.server.kubeconfig, "nmstateconfig", "two", "-n", "n"], None);
    e.server.wait_image_created("n", "ie", "True");

    // Kernel arguments too long for the karg area (1139 bytes in this image).
    let long = format!("  kernelArguments:\n  - operation: append\n    value: x={}\n", "y".repeat(1200));
    e.server.apply_ok(&infraenv_yaml("n", "ie", &format!("{SELECTOR}{long}")));
    check("kernel arguments", "kargs too large for area");
    e.server.apply_ok(&infraenv_yaml("n", "ie", SELECTOR));
    e.server.wait_image_created("n", "ie", "True");

    // An Ignition override over 256 KiB (incompressible, so the archive is over the limit).
    // xorshift64 letters: ~4.7 bits each after gzip, so 600k of them are ~350 KiB compressed.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let noise: String = (0..600_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let over = format!(
        "  ignitionConfigOverride: '{{\"ignition\": {{\"version\": \"3.1.0\"}}, \"storage\": {{\"files\": [{{\"path\": \"/etc/big\", \"contents\": {{\"source\": \"data:,{noise}\"}}}}]}}}}'\n"
    );
    e.server.apply_ok(&infraenv_yaml("n", "ie", &format!("{SELECTOR}{over}")));
    check("ignition over 256 KiB", "is over the maximum allowable size (256 KiB)");
}

/// The NMStateConfig: a DNS search domain and an interface description whose line breaks
/// would add `[ipv4] method=disabled` and `[connection] autoconnect=false` to the keyfile. The
/// InfraEnv gets ImageCreated=False naming both fields, with the line break shown escaped, and its
/// downloads answer 409; nothing is served with the injected keys.
#[test]
fn an_nmstateconfig_whose_strings_would_add_keyfile_lines_is_refused() {
    let e = env();
    let injected = nmstate("n", "injected", 0x50, "192.168.126.60")
        .replace(
            "        state: up\n",
            "        state: up\n        description: \"uplink\\n[connection]\\nautoconnect=false\"\n",
        )
        .replace(
            "    dns-resolver:\n      config:\n",
            "    dns-resolver:\n      config:\n        search:\n          - \"example.com\\n[ipv4]\\nmethod=disabled\"\n",
        );
    assert!(injected.contains("search:") && injected.contains("description:"), "{injected}");
    e.server.apply_ok(&injected);
    let ie = e.server.wait_image_created("n", "ie", "False");
    let message = condition(&ie, "ImageCreated").unwrap()["message"].as_str().unwrap().to_string();
    let prefix = "failed to validate network yaml for host 0, ";
    let expect = ["interfaces[0].description", "dns-resolver.config.search[0]"]
        .map(|field| format!("{prefix}{field} contains the control character '\\n' (U+000A)"))
        .join("; ");
    assert_eq!(message, format!("Failed to create image: static network config: {expect}"));
    assert!(!message.chars().any(char::is_control), "{message:?}");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    for path in [format!("/byid/{id}/4.19/x86_64/full.iso"), format!("/images/{id}/pxe-initrd?version=4.19")] {
        let r = e.server.get(&path);
        assert_eq!(r.status, 409, "{path}: {}", r.text());
        assert!(r.text().contains("dns-resolver.config.search[0]"), "{path}: {}", r.text());
    }
}

/// More static network config than the embed area holds is refused with the sizes. (Hosts with eight
/// NICs each, so that a few thousand NMStateConfigs overflow it; see the capacity test below.)
#[test]
fn too_many_nmstateconfigs_for_the_embed_area_are_refused_with_the_sizes() {
    let e = env();
    let mut docs = String::new();
    let n = 2500u32;
    for i in 0..n {
        let mac =
            |nic: u32| format!("02:{nic:02x}:00:{:02x}:{:02x}:{:02x}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
        let mut config = String::from("    interfaces:\n");
        let mut map = String::new();
        for nic in 0..8u32 {
            config.push_str(&format!(
                "      - name: eth{nic}\n        type: ethernet\n        state: up\n        mac-address: {m}\n        ipv4:\n          enabled: true\n          dhcp: false\n          address:\n            - ip: 10.{nic}.{}.{}\n              prefix-length: 16\n",
                (i >> 8) & 0xff,
                i & 0xff,
                m = mac(nic)
            ));
            map.push_str(&format!("    - name: eth{nic}\n      macAddress: {}\n", mac(nic)));
        }
        docs.push_str(&format!(
            "apiVersion: agent-install.openshift.io/v1beta1\nkind: NMStateConfig\nmetadata:\n  name: h{i}\n  namespace: n\n  labels:\n    fleet: rack1\nspec:\n  config:\n{config}  interfaces:\n{map}---\n"
        ));
    }
    e.server.apply_ok(&docs);
    // The controller may report the overflow before the last documents arrive; wait for all of them.
    let ie = e.server.wait_infraenv("n", "ie", "the overflow with every host", |ie| {
        condition(ie, "ImageCreated")
            .and_then(|c| c["message"].as_str())
            .is_some_and(|m| m.contains(&format!("{n} NMStateConfigs")))
    });
    assert_eq!(condition(&ie, "ImageCreated").unwrap()["status"], "False");
    let msg = condition(&ie, "ImageCreated").unwrap()["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains(&format!("{n} NMStateConfigs"))
            && msg.contains("over the size of the ISO's Ignition embed area (256 KiB)"),
        "{msg}"
    );
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let r = e.server.get(&format!("/byid/{id}/4.19/x86_64/full.iso"));
    assert_eq!(r.status, 409);
    assert!(r.text().contains("over the size of the ISO's Ignition embed area"), "{}", r.text());
    // The InfraEnv has no image (its condition says so, its status has no URLs): its PXE initrd,
    // which would fit, is refused with the same message, as every other download of its files.
    let r = e.server.get(&format!("/images/{id}/pxe-initrd?version=4.19"));
    assert_eq!(r.status, 409);
    assert!(r.text().contains("over the size of the ISO's Ignition embed area"), "{}", r.text());
}

/// How many NMStateConfigs like the assisted example (two NICs with static IPv4, DNS, two default
/// routes; distinct MACs and addresses) fit in a 256 KiB Ignition embed area beside a typical discovery
/// Ignition. Measured with the library's own builders; the figure is quoted in the README.
#[test]
fn embed_area_capacity_for_nmstateconfigs_like_the_example() {
    use bootstream::content::staticnet::{HostStaticConfig, MacInterface, RamdiskInput, ramdisk};
    let example: serde_json::Value =
        yaml_serde::from_str(&std::fs::read_to_string(shared("fixtures/assisted/examples/nmstate.yaml")).unwrap())
            .unwrap();
    let yaml = yaml_serde::to_string(&example["spec"]["config"]).unwrap();
    let host = |i: u32| {
        let m = |nic: u32| {
            format!(
                "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                nic,
                (i >> 24) & 0xff,
                (i >> 16) & 0xff,
                (i >> 8) & 0xff,
                i & 0xff
            )
        };
        let y = yaml
            .replace("02:00:00:80:12:14", &m(1))
            .replace("02:00:00:80:12:15", &m(2))
            .replace("192.168.126.30", &format!("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff))
            .replace("192.168.140.30", &format!("11.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff));
        HostStaticConfig {
            mac_interface_map: vec![
                MacInterface { mac_address: m(1), logical_nic_name: "eth0".into() },
                MacInterface { mac_address: m(2), logical_nic_name: "eth1".into() },
            ],
            network_yaml: y,
        }
    };
    // A discovery Ignition of the usual size: render one through a real server-independent path is
    // not needed; its gzip archive is ~6 KiB (measured in tests/it/content/ignition.rs territory), reserve 8 KiB.
    let budget = 262_144usize - 8 * 1024;
    let size = |n: u32| {
        let hosts: Vec<HostStaticConfig> = (0..n).map(host).collect();
        ramdisk(&RamdiskInput { hosts: &hosts, proxy: None }).unwrap().map(|r| r.len()).unwrap_or(0)
    };
    // Binary search for the largest count that fits.
    let (mut lo, mut hi) = (1u32, 8192u32);
    assert!(size(lo) <= budget);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if size(mid) <= budget { lo = mid } else { hi = mid }
    }
    println!("NMStateConfigs like the example that fit beside an 8 KiB Ignition archive in 256 KiB: {lo}");
    assert!(lo >= 1000, "capacity regressed: only {lo} NMStateConfigs fit");
}
