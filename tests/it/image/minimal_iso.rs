//! Minimal discovery ISOs: from miniso.dat, bit-identical to `coreos-installer iso extract minimal-iso`
//! outside the Ignition area; without miniso.dat, re-mastered (and booted under qemu).

use crate::common;

use common::*;
use serde_json::Value;

#[test]
fn minimal_isos_equal_coreos_installer_extract_outside_the_ignition_area() {
    let dir = tempfile::tempdir().unwrap();
    let mut with_miniso = Vec::new();
    let mut args = Vec::new();
    for (i, name) in fixture_iso_names().iter().enumerate() {
        let path = fixture_iso(name, dir.path());
        let records = String::from_utf8(coreos_installer(&["dev", "show", "iso", path.to_str().unwrap()])).unwrap();
        if records.contains("COREOS/MINISO.DAT") {
            let version = format!("4.{}", 10 + i);
            args.push("--os-image".to_string());
            args.push(format!("{version}:x86_64:{}", path.display()));
            with_miniso.push((name.clone(), version, path));
        }
    }
    assert!(with_miniso.len() >= 4, "fixtures with miniso.dat: {with_miniso:?}");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml("n", "ie", "  imageType: minimal-iso\n"));
    let ie = server.wait_image_created("n", "ie", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(ie["status"]["isoDownloadURL"].as_str().unwrap().ends_with("/minimal.iso"));
    let ignition =
        server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign")).body;

    for (name, version, full) in &with_miniso {
        let resp = server.get(&format!("/byid/{id}/{version}/x86_64/minimal.iso"));
        assert_eq!(resp.status, 200, "{name}: {}", resp.text());
        let ours = dir.path().join(format!("{name}.minimal.iso"));
        std::fs::write(&ours, &resp.body).unwrap();

        let rootfs_url = format!("{}/boot-artifacts/{version}/x86_64/rootfs.img", server.url);
        let theirs = dir.path().join(format!("{name}.ci-minimal.iso"));
        coreos_installer(&[
            "iso",
            "extract",
            "minimal-iso",
            "--rootfs-url",
            &rootfs_url,
            full.to_str().unwrap(),
            theirs.to_str().unwrap(),
        ]);
        let theirs_bytes = std::fs::read(&theirs).unwrap();
        assert_eq!(resp.body.len(), theirs_bytes.len(), "{name}: length");
        let area: Value =
            serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", theirs.to_str().unwrap()]))
                .unwrap();
        let (off, len) = (area["offset"].as_u64().unwrap() as usize, area["length"].as_u64().unwrap() as usize);
        assert!(resp.body[..off] == theirs_bytes[..off], "{name}: bytes before the Ignition area differ");
        assert!(resp.body[off + len..] == theirs_bytes[off + len..], "{name}: bytes after the Ignition area differ");

        // coreos-installer reads our Ignition and kernel arguments back.
        assert_eq!(coreos_installer(&["iso", "ignition", "show", ours.to_str().unwrap()]), ignition, "{name}");
        let kargs = String::from_utf8(coreos_installer(&["iso", "kargs", "show", ours.to_str().unwrap()])).unwrap();
        assert!(kargs.contains(&format!("coreos.live.rootfs_url={rootfs_url}")), "{name}: {kargs}");
        assert!(!kargs.contains("coreos.liveiso"), "{name}: {kargs}");

        // The rootfs URL the minimal ISO boots with serves the full ISO's rootfs.
        let rootfs = server.get(&server.path_of(&rootfs_url));
        assert_eq!(rootfs.status, 200);
        let via_query = server.get(&format!("/boot-artifacts/rootfs?version={version}&arch=x86_64"));
        assert!(rootfs.body == via_query.body);
    }
}

#[test]
fn minimal_iso_of_an_image_without_miniso_is_remastered_and_boots() {
    let fixture = common::qemu::boot_fixture_dir();
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_in(
        data,
        "127.0.0.1:0",
        &["--os-image", &format!("4.20:x86_64:{}", fixture.join("boot.iso").display())],
    );
    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml(
        "n",
        "ie",
        "  imageType: minimal-iso\n  kernelArguments:\n  - operation: append\n    value: bootstream.minimal=yes\n",
    ));
    let ie = server.wait_image_created("n", "ie", "True");
    let iso = server.get(&server.path_of(ie["status"]["isoDownloadURL"].as_str().unwrap()));
    assert_eq!(iso.status, 200, "{}", iso.text());
    let full_len = std::fs::metadata(fixture.join("boot.iso")).unwrap().len();
    assert!((iso.body.len() as u64) < full_len, "minimal ISO is smaller than the full ISO");
    // Re-mastered once into the data directory.
    let remastered: Vec<_> = std::fs::read_dir(server.data_dir.path().join("minimal")).unwrap().collect();
    assert_eq!(remastered.len(), 1);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("minimal.iso");
    std::fs::write(&path, &iso.body).unwrap();
    let records = String::from_utf8(coreos_installer(&["dev", "show", "iso", path.to_str().unwrap()])).unwrap();
    assert!(!records.contains("ROOTFS.IMG"), "{records}");

    let report = common::qemu::boot_iso(&path);
    report.assert_ok();
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let ignition =
        server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(report.config_ign_sha256.as_deref(), Some(sha256_hex(&ignition.body).as_str()));
    let rootfs_url = format!("{}/boot-artifacts/4.20/x86_64/rootfs.img", server.url);
    assert!(report.has_karg(&format!("coreos.live.rootfs_url={rootfs_url}")), "cmdline: {}", report.cmdline);
    assert!(report.has_karg("bootstream.minimal=yes"), "cmdline: {}", report.cmdline);
    assert!(!report.cmdline.contains("coreos.liveiso"), "cmdline: {}", report.cmdline);
}
