//! Every real live-ISO fixture made by the CoreOS build tool, loaded as a base image and served as an
//! InfraEnv's discovery ISO, read back with the real coreos-installer.

use crate::common;

use common::*;

/// Serves all fixtures at once (version = fixture name) and checks each served ISO.
#[test]
fn served_full_isos_carry_the_discovery_ignition_and_nothing_else_changes() {
    let dir = tempfile::tempdir().unwrap();
    let names = fixture_iso_names();
    assert!(names.len() >= 7, "expected the coreos-installer fixtures, found {names:?}");
    let mut args = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let path = fixture_iso(name, dir.path());
        args.push("--os-image".to_string());
        args.push(format!("4.{}:x86_64:{}", 10 + i, path.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&args);
    server.apply_ok(&pull_secret_yaml("fleet"));
    server.apply_ok(&infraenv_yaml("fleet", "pool", ""));
    let ie = server.wait_image_created("fleet", "pool", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();

    let ignition =
        server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(ignition.status, 200);
    assert!(ignition.body.starts_with(b"{"), "discovery.ign: {}", ignition.text());

    for (i, name) in names.iter().enumerate() {
        let version = format!("4.{}", 10 + i);
        let base_path = dir.path().join(format!("{name}.iso"));
        let base = std::fs::read(&base_path).unwrap();
        let resp = server.get(&format!("/byid/{id}/{version}/x86_64/full.iso"));
        assert_eq!(resp.status, 200, "{name}: {}", resp.text());
        assert_eq!(resp.body.len(), base.len(), "{name}: served ISO has the base ISO's length");
        let served = dir.path().join(format!("{name}.served.iso"));
        std::fs::write(&served, &resp.body).unwrap();

        // coreos-installer reads back exactly the InfraEnv's discovery Ignition.
        let shown = coreos_installer(&["iso", "ignition", "show", served.to_str().unwrap()]);
        assert_eq!(shown, ignition.body, "{name}: iso ignition show");

        // Every byte outside the Ignition area equals the base ISO.
        let area: serde_json::Value = serde_json::from_slice(&coreos_installer(&[
            "dev",
            "show",
            "iso",
            "--ignition",
            base_path.to_str().unwrap(),
        ]))
        .unwrap();
        let (off, len) = (area["offset"].as_u64().unwrap() as usize, area["length"].as_u64().unwrap() as usize);
        assert_eq!(&resp.body[..off], &base[..off], "{name}: bytes before the area");
        assert_eq!(&resp.body[off + len..], &base[off + len..], "{name}: bytes after the area");

        // Kernel arguments unchanged (where the image has karg areas at all).
        let kargs = |p: &std::path::Path| {
            std::process::Command::new(tool("coreos-installer"))
                .args(["iso", "kargs", "show", p.to_str().unwrap()])
                .output()
                .unwrap()
        };
        let (before, after) = (kargs(&base_path), kargs(&served));
        assert_eq!(before.status.success(), after.status.success(), "{name}");
        assert_eq!(before.stdout, after.stdout, "{name}: kargs");

        // The legacy long URL serves the same bytes.
        let long = server.get(&format!("/images/{id}?type=full-iso&version={version}&arch=x86_64"));
        assert_eq!(long.status, 200);
        assert!(long.body == resp.body, "{name}: /images/ and /byid/ differ");
    }
}

/// The PXE initrd starts with the base initrd and its appended part unwraps to the same Ignition.
#[test]
fn pxe_initrd_is_the_base_initrd_plus_the_ignition_archive() {
    let dir = tempfile::tempdir().unwrap();
    let name = "embed-areas-2023-07.x86_64";
    let base_path = fixture_iso(name, dir.path());
    let server = Server::start(&["--os-image", &format!("4.19:x86_64:{}", base_path.display())]);
    server.apply_ok(&pull_secret_yaml("fleet"));
    server.apply_ok(&infraenv_yaml("fleet", "pool", ""));
    let ie = server.wait_image_created("fleet", "pool", "True");
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let initrd_url = ie["status"]["bootArtifacts"]["initrd"].as_str().unwrap();
    let resp = server.get(&server.path_of(initrd_url));
    assert_eq!(resp.status, 200, "{}", resp.text());

    // The base initrd, as coreos-installer extracts it.
    let out = dir.path().join("pxe");
    std::fs::create_dir_all(&out).unwrap();
    coreos_installer(&["iso", "extract", "pxe", "-o", out.to_str().unwrap(), base_path.to_str().unwrap()]);
    let base_initrd = std::fs::read(out.join(format!("{name}-initrd.img"))).unwrap();
    assert!(resp.body.starts_with(&base_initrd), "served initrd starts with the base initrd");

    let appended = dir.path().join("appended.img");
    std::fs::write(&appended, &resp.body[base_initrd.len()..]).unwrap();
    let unwrapped = coreos_installer(&["pxe", "ignition", "unwrap", appended.to_str().unwrap()]);
    let ignition =
        server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(unwrapped, ignition.body);
    // The kernel and rootfs boot artifacts are the ISO's files as they are.
    let kernel = server.get(&server.path_of(ie["status"]["bootArtifacts"]["kernel"].as_str().unwrap()));
    assert_eq!(kernel.body, std::fs::read(out.join(format!("{name}-vmlinuz"))).unwrap());
    let rootfs = server.get(&server.path_of(ie["status"]["bootArtifacts"]["rootfs"].as_str().unwrap()));
    assert_eq!(rootfs.body, std::fs::read(out.join(format!("{name}-rootfs.img"))).unwrap());
}

/// A base image that is not a CoreOS live ISO is reported with its path and reason and not served; the
/// others are.
#[test]
fn a_bad_base_image_is_reported_and_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("synthetic.iso");
    let out = std::process::Command::new("xz")
        .arg("-dc")
        .arg(shared("fixtures/coreos-installer/iso/synthetic.iso.xz"))
        .output()
        .unwrap();
    std::fs::write(&bad, out.stdout).unwrap();
    let good = fixture_iso("embed-areas-2022-09", dir.path());
    let missing = dir.path().join("missing.iso");
    let server = Server::start(&[
        "--os-image",
        &format!("4.11:x86_64:{}", bad.display()),
        "--os-image",
        &format!("4.12:x86_64:{}", good.display()),
        "--os-image",
        &format!("4.13:x86_64:{}", missing.display()),
    ]);
    let ready = server.get("/ready");
    assert_eq!(ready.status, 200);
    let report = ready.text();
    assert!(
        report.contains(&format!("4.11 x86_64 failed: {}: Unrecognized CoreOS ISO image", bad.display())),
        "{report}"
    );
    assert!(report.contains(&format!("4.12 x86_64 ready {}", good.display())), "{report}");
    assert!(report.contains(&format!("4.13 x86_64 failed: {}: cannot open", missing.display())), "{report}");

    server.apply_ok(&pull_secret_yaml("n"));
    server.apply_ok(&infraenv_yaml("n", "ie", ""));
    let ie = server.wait_image_created("n", "ie", "True");
    // The latest usable image is chosen; the bad ones are not offered.
    assert!(ie["status"]["isoDownloadURL"].as_str().unwrap().ends_with("/4.12/x86_64/full.iso"));
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let r = server.get(&format!("/byid/{id}/4.11/x86_64/full.iso"));
    assert_eq!(r.status, 404);
    assert!(r.text().contains("available: 4.12 (x86_64)"), "{}", r.text());
}

/// The s390x form of the Ignition area: igninfo.json names a region inside `images/cdboot.img` by offset
/// and length (spec-images §2.3). Built with our ISO writer, served, and read back by coreos-installer.
#[test]
fn ignition_area_inside_another_file_s390x_form() {
    use bootstream::formats::iso9660::writer::IsoBuilder;
    let dir = tempfile::tempdir().unwrap();
    let mut b = IsoBuilder::new("fedora-coreos-38.20230718.dev.0").unwrap();
    b.add_file("COREOS/IGNINFO.JSO", r#"{"file": "images/cdboot.img", "length": 262144, "offset": 132096}"#).unwrap();
    // A cdboot.img of 394240 bytes with non-zero bytes around the zeroed area, as in real s390x images.
    let mut cdboot = vec![0xA5u8; 394240];
    cdboot[132096..132096 + 262144].fill(0);
    b.add_file("IMAGES/CDBOOT.IMG", cdboot).unwrap();
    b.add_file("IMAGES/PXEBOOT/KERNEL.IMG", b"s390x kernel placeholder".to_vec()).unwrap();
    b.add_file("IMAGES/PXEBOOT/INITRD.IMG", b"s390x initrd placeholder".to_vec()).unwrap();
    b.add_file("IMAGES/PXEBOOT/ROOTFS.IMG", b"s390x rootfs placeholder".to_vec()).unwrap();
    let iso_path = dir.path().join("s390x.iso");
    b.write_to(std::fs::File::create(&iso_path).unwrap()).unwrap();

    let server = Server::start(&["--os-image", &format!("4.19:s390x:{}", iso_path.display())]);
    server.apply_ok(&pull_secret_yaml("z"));
    server.apply_ok(&infraenv_yaml("z", "ie", "  cpuArchitecture: s390x\n"));
    let ie = server.wait_image_created("z", "ie", "True");
    let url = ie["status"]["isoDownloadURL"].as_str().unwrap();
    assert!(url.ends_with("/4.19/s390x/full.iso"), "{url}");
    let served = server.get(&server.path_of(url));
    assert_eq!(served.status, 200, "{}", served.text());
    let out = dir.path().join("served.iso");
    std::fs::write(&out, &served.body).unwrap();
    let id = ie["metadata"]["uid"].as_str().unwrap();
    let ignition =
        server.get(&format!("/api/assisted-install/v2/infra-envs/{id}/downloads/files?file_name=discovery.ign"));
    assert_eq!(coreos_installer(&["iso", "ignition", "show", out.to_str().unwrap()]), ignition.body);

    let area: serde_json::Value =
        serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", iso_path.to_str().unwrap()]))
            .unwrap();
    let (off, len) = (area["offset"].as_u64().unwrap() as usize, area["length"].as_u64().unwrap() as usize);
    assert_eq!(len, 262144);
    let base = std::fs::read(&iso_path).unwrap();
    assert_eq!(&served.body[..off], &base[..off]);
    assert_eq!(&served.body[off + len..], &base[off + len..], "the rest of cdboot.img is untouched");
    // The kernel falls back to KERNEL.IMG on s390x.
    let kernel = server.get("/boot-artifacts/kernel?version=4.19&arch=s390x");
    assert_eq!(kernel.body, b"s390x kernel placeholder");
}
