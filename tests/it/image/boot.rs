//! Real boots: a Linux kernel under qemu boots what bootstream serves, and the fixture's init reports what
//! the booted initramfs holds. The ISO boots through its bootloader (isolinux) from the served full ISO;
//! iPXE fetches the served script, kernel and initrd over HTTP on a contained user network.

use crate::common;

use common::qemu::{self, GUEST_HOST_ADDR};
use common::*;

/// A server on a fixed free port whose base URL is the address the guest sees (10.0.2.2:PORT).
fn boot_server() -> (Server, u16) {
    let fixture = qemu::boot_fixture_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = Server::start_in(
        tempfile::tempdir().unwrap(),
        &format!("127.0.0.1:{port}"),
        &[
            "--os-image",
            &format!("4.20:x86_64:{}", fixture.join("boot.iso").display()),
            "--base-url",
            &format!("http://{GUEST_HOST_ADDR}:{port}"),
        ],
    );
    server.apply_ok(&pull_secret_yaml("boot"));
    server.apply_ok(
        &std::fs::read_to_string(shared("fixtures/assisted/examples/nmstate.yaml"))
            .unwrap()
            .replace("namespace: spoke-cluster", "namespace: boot"),
    );
    server.apply_ok(&infraenv_yaml(
        "boot",
        "pool",
        "  kernelArguments:\n  - operation: append\n    value: bootstream.test=yes\n  nmStateConfigLabelSelector:\n    matchLabels:\n      some-user-defined-label-name: some-user-defined-label-value\n",
    ));
    (server, port)
}

/// The static-network files we serve (path → sha256), read from the PXE initrd with our own reader.
fn served_static_network_files(server: &Server, ie: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let initrd = server.get(&server.path_of(ie["status"]["bootArtifacts"]["initrd"].as_str().unwrap()));
    let files = bootstream::formats::initrd::read_initrd(&initrd.body).unwrap();
    let net: std::collections::BTreeMap<String, String> = files
        .into_iter()
        .filter(|(p, _)| p.starts_with("etc/assisted/network/"))
        .map(|(p, data)| (format!("/{p}"), sha256_hex(&data)))
        .collect();
    for f in [
        "/etc/assisted/network/host0/eth0.nmconnection",
        "/etc/assisted/network/host0/eth1.nmconnection",
        "/etc/assisted/network/host0/mac_interface.ini",
    ] {
        assert!(net.contains_key(f), "{f} not served: {net:?}");
    }
    net
}

fn assert_static_network(report: &qemu::BootReport, expected: &std::collections::BTreeMap<String, String>) {
    for (path, sha) in expected {
        assert_eq!(
            report.file_sha256(path),
            Some(sha.as_str()),
            "{path} in the booted initramfs\n{}",
            report.log_tail(3000)
        );
    }
}

fn discovery_ignition(server: &Server, ie: &serde_json::Value) -> Vec<u8> {
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let r = server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(r.status, 200);
    r.body
}

#[test]
fn served_iso_boots_with_the_discovery_ignition() {
    let (server, _) = boot_server();
    let ie = server.wait_image_created("boot", "pool", "True");
    let iso = server.get(&server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap()));
    assert_eq!(iso.status, 200);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("discovery.iso");
    std::fs::write(&path, &iso.body).unwrap();

    let report = qemu::boot_iso(&path);
    report.assert_ok();
    let ignition = discovery_ignition(&server, &ie);
    assert_eq!(
        report.config_ign_sha256.as_deref(),
        Some(sha256_hex(&ignition).as_str()),
        "/config.ign in the booted initramfs\n{}",
        report.log_tail(3000)
    );
    // The kernel arguments written into the ISO's karg area reached the kernel.
    assert!(report.has_karg("bootstream.test=yes"), "cmdline: {}", report.cmdline);
    assert_static_network(&report, &served_static_network_files(&server, &ie));
}

#[test]
fn ipxe_boots_the_served_script_kernel_and_initrd() {
    let (server, port) = boot_server();
    let ie = server.wait_image_created("boot", "pool", "True");
    let script_url = ie["status"]["bootArtifacts"]["ipxeScript"].as_str().unwrap();
    assert!(script_url.starts_with(&format!("http://{GUEST_HOST_ADDR}:{port}/")), "{script_url}");

    let report = qemu::boot_ipxe(port, script_url);
    report.assert_ok();
    let ignition = discovery_ignition(&server, &ie);
    assert_eq!(
        report.config_ign_sha256.as_deref(),
        Some(sha256_hex(&ignition).as_str()),
        "/config.ign in the booted initramfs\n{}",
        report.log_tail(3000)
    );
    assert!(report.has_karg("initrd=initrd"), "cmdline: {}", report.cmdline);
    assert!(report.has_karg("bootstream.test=yes"), "cmdline: {}", report.cmdline);
    assert_static_network(&report, &served_static_network_files(&server, &ie));
}
