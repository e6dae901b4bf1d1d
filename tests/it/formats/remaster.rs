//! Re-mastered minimal ISOs (base images without miniso.dat) and the El Torito support of the ISO
//! writer: checked with coreos-installer, xorriso and our own reader, and booted under qemu.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bootstream::formats::iso9660::eltorito::{self, BootCatalog, BootEntry, Platform};
use bootstream::formats::iso9660::writer::{BootSetup, IsoBuilder};
use bootstream::formats::iso9660::{IsoFs, SECTOR};
use bootstream::formats::remaster::{RemasterError, RemasterReport, remaster_minimal};
use common::qemu;
use common::*;
use serde_json::Value;

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs a tool that is expected to succeed; returns stdout.
fn run(tool_name: &str, args: &[&str]) -> String {
    let out = Command::new(tool(tool_name)).args(args).output().unwrap();
    assert!(out.status.success(), "{tool_name} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn records(iso: &Path) -> Vec<String> {
    let shown: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", s(iso)])).unwrap();
    shown["records"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect()
}

/// One `El Torito boot img` line of xorriso: (platform, emulation, load size, LBA, path, opts).
type XorrisoImage = (String, String, u32, u32, String, String);

/// `xorriso -report_el_torito plain`: the catalog path and the boot images.
fn xorriso_boot_images(iso: &Path) -> (Option<String>, Vec<XorrisoImage>) {
    let out = Command::new(tool("xorriso")).args(["-indev", s(iso), "-report_el_torito", "plain"]).output().unwrap();
    assert!(out.status.success(), "xorriso: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |line: &str| line.split_once(':').map(|x| x.1.trim().to_string()).unwrap_or_default();
    let cat_path = text.lines().find(|l| l.starts_with("El Torito cat path")).map(field);
    let mut images = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("El Torito boot img")) {
        let value = field(line);
        let f: Vec<&str> = value.split_whitespace().collect();
        // N Pltf B Emul Ld_seg Hdpt Ldsiz LBA
        let n = f[0];
        let path = text
            .lines()
            .filter(|l| l.starts_with("El Torito img path"))
            .map(field)
            .find_map(|v| v.strip_prefix(&format!("{n} ")).map(|p| p.trim().to_string()))
            .unwrap_or_default();
        let opts = text
            .lines()
            .filter(|l| l.starts_with("El Torito img opts"))
            .map(field)
            .find_map(|v| v.strip_prefix(&format!("{n} ")).map(|p| p.trim().to_string()))
            .unwrap_or_default();
        images.push((f[1].to_string(), f[3].to_string(), f[6].parse().unwrap(), f[7].parse().unwrap(), path, opts));
    }
    (cat_path, images)
}

/// Checks the boot info table of the file at `path` in `iso` independently of the writer.
fn assert_boot_info_table(iso_path: &Path, path: &str) {
    let iso = IsoFs::open(fs::File::open(iso_path).unwrap()).unwrap();
    let record = iso.get_path(path).unwrap();
    let data = iso.read_file(&record, 1 << 20).unwrap();
    let word = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
    let mut body = data[64..].to_vec();
    body.resize(body.len().next_multiple_of(4), 0);
    let sum = body.chunks(4).fold(0u32, |a, w| a.wrapping_add(u32::from_le_bytes(w.try_into().unwrap())));
    assert_eq!((word(8), word(12), word(16), word(20)), (16, record.lba, record.length, sum), "{path}");
    assert!(data[24..64].iter().all(|b| *b == 0), "{path}: reserved bytes");
}

fn remaster(full: &Path, out: &Path) -> RemasterReport {
    remaster_minimal(full, out).unwrap_or_else(|e| panic!("re-mastering {}: {e}", full.display()))
}

fn fixture_default_without_liveiso() -> (String, String) {
    let default = qemu::fixture_default_kargs();
    let without: Vec<&str> = default.split_whitespace().filter(|k| !k.starts_with("coreos.liveiso=")).collect();
    (default.clone(), without.join(" "))
}

/// The boot fixture (RHCOS layout, isolinux, no miniso.dat) re-mastered: what coreos-installer,
/// xorriso and our reader see.
#[test]
fn boot_fixture_remastered_structure() {
    let fixture = qemu::boot_fixture_dir().join("boot.iso");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("minimal.iso");
    let report = remaster(&fixture, &out);
    eprintln!("{report:#?}");
    let (default, without) = fixture_default_without_liveiso();

    // Every file and directory but the rootfs, same names.
    let full_records = records(&fixture);
    let expected: Vec<String> = full_records.iter().filter(|r| *r != "IMAGES/PXEBOOT/ROOTFS.IMG").cloned().collect();
    assert_eq!(full_records.len(), expected.len() + 1, "{full_records:?}");
    assert_eq!(records(&out), expected);
    assert_eq!(report.files + report.directories, expected.len());
    assert_eq!(report.output_len, fs::metadata(&out).unwrap().len());

    // Volume/system id and descriptors.
    let shown: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", s(&out)])).unwrap();
    let full_shown: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", s(&fixture)])).unwrap();
    let descriptors = shown["header"]["descriptors"].as_array().unwrap();
    assert_eq!(descriptors[0]["volume_id"], full_shown["header"]["descriptors"][0]["volume_id"]);
    assert_eq!(descriptors[0]["system_id"], full_shown["header"]["descriptors"][0]["system_id"]);
    assert_eq!(descriptors[1]["boot_system_id"], "EL TORITO SPECIFICATION");
    assert_eq!(descriptors.len(), 2, "no Joliet descriptor: {descriptors:?}");

    // Kernel arguments: kargs.json default without coreos.liveiso; areas as in the full ISO.
    assert_eq!(coreos_installer(&["iso", "kargs", "show", "--default", s(&out)]), format!("{without}\n").as_bytes());
    assert_eq!(coreos_installer(&["iso", "kargs", "show", s(&out)]), format!("{default}\n").as_bytes());
    assert_eq!(report.default_kargs, without);
    assert_eq!(report.removed_karg, "coreos.liveiso=BOOTSTREAM_FIXTURE");
    let kargs: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&out)])).unwrap();
    let offsets: Vec<u64> = kargs["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, report.karg_areas);
    let ignition: Value =
        serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", s(&out)])).unwrap();
    assert_eq!(ignition["offset"].as_u64(), Some(report.ignition_area.offset));
    assert_eq!(ignition["length"].as_u64(), Some(report.ignition_area.len));
    // kargs.json: same length as the full ISO's, pretty JSON then spaces.
    let iso = IsoFs::open(fs::File::open(&out).unwrap()).unwrap();
    let full_iso = IsoFs::open(fs::File::open(&fixture).unwrap()).unwrap();
    let kargs_json = iso.read_file(&iso.get_path("COREOS/KARGS.JSO").unwrap(), 1 << 16).unwrap();
    let full_kargs_json = full_iso.read_file(&full_iso.get_path("COREOS/KARGS.JSO").unwrap(), 1 << 16).unwrap();
    assert_eq!(kargs_json.len(), full_kargs_json.len());
    let text = String::from_utf8(kargs_json).unwrap();
    assert!(
        text.starts_with(&format!("{{\n  \"default\": \"{without}\",\n  \"files\": [\n    {{\n      \"path\"")),
        "{text}"
    );
    assert!(text.trim_end_matches(' ').ends_with("\n  \"size\": 1139\n}"), "{text}");

    // Every other file is byte-identical.
    for (path, record) in full_iso.walk().unwrap() {
        if record.is_dir
            || ["IMAGES/PXEBOOT/ROOTFS.IMG", "COREOS/KARGS.JSO", "ISOLINUX/BOOT.CAT"].contains(&path.as_str())
        {
            continue;
        }
        let ours = iso.get_path(&path).unwrap();
        let mut a = full_iso.read_file(&record, 1 << 26).unwrap();
        let b = iso.read_file(&ours, 1 << 26).unwrap();
        if path == "ISOLINUX/ISOLINUX.BIN" {
            a[8..64].copy_from_slice(&b[8..64]); // the boot info table names the new block
        }
        assert!(a == b, "{path} differs");
    }

    // El Torito as xorriso sees it: same entries as the full ISO, pointing at the new isolinux.bin.
    let (full_cat, full_images) = xorriso_boot_images(&fixture);
    let (cat, images) = xorriso_boot_images(&out);
    assert_eq!(full_cat.as_deref().map(str::to_uppercase), cat);
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images.len(), full_images.len());
    let bin = iso.get_path("ISOLINUX/ISOLINUX.BIN").unwrap();
    let (platform, emulation, load, lba, path, opts) = &images[0];
    assert_eq!((platform.as_str(), emulation.as_str(), *load, *lba), ("BIOS", "none", 4, bin.lba));
    assert_eq!(path, "/ISOLINUX/ISOLINUX.BIN");
    assert!(opts.contains("boot-info-table"), "xorriso found no boot info table: {opts}");
    assert_eq!(report.boot_entries.len(), 1);
    let entry = &report.boot_entries[0];
    assert_eq!((entry.path.as_str(), entry.lba, entry.boot_info_table), ("ISOLINUX/ISOLINUX.BIN", bin.lba, true));

    // Our reader, and the boot info table checked independently.
    let el_torito = eltorito::read_el_torito(&iso).unwrap().unwrap();
    assert_eq!(Some(el_torito.catalog_lba), iso.get_path("ISOLINUX/BOOT.CAT").ok().map(|r| r.lba));
    let full_el_torito = eltorito::read_el_torito(&full_iso).unwrap().unwrap();
    assert_eq!(
        el_torito.catalog.clone().map_images(|_| Ok::<u32, ()>(0)),
        full_el_torito.catalog.map_images(|_| Ok(0))
    );
    assert_eq!(el_torito.catalog.default.image, bin.lba);
    assert_boot_info_table(&out, "ISOLINUX/ISOLINUX.BIN");

    // A zero system area (no isohybrid MBR), and deterministic output.
    let bytes = fs::read(&out).unwrap();
    assert!(bytes[..32768].iter().all(|b| *b == 0));
    let again = dir.path().join("again.iso");
    remaster(&fixture, &again);
    assert!(fs::read(&again).unwrap() == bytes, "re-mastering twice gives different bytes");
    // No temporary files left behind.
    let left: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

/// The re-mastered boot fixture boots through isolinux; with an Ignition config embedded by
/// coreos-installer (and the karg areas set as the server does), the guest sees both.
#[test]
fn boot_fixture_remastered_boots() {
    let fixture = qemu::boot_fixture_dir().join("boot.iso");
    let dir = tempfile::tempdir().unwrap();
    let minimal = dir.path().join("minimal.iso");
    let started = std::time::Instant::now();
    let report = remaster(&fixture, &minimal);
    eprintln!("re-mastered in {:.1?} ({} -> {} bytes)", started.elapsed(), report.input_len, report.output_len);
    let (default, without) = fixture_default_without_liveiso();

    // What the server does per request: new kargs in the areas, Ignition in its area.
    let customized = dir.path().join("customized.iso");
    fs::copy(&minimal, &customized).unwrap();
    let config = br#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/remastered"}]}}"#;
    let config_path = dir.path().join("config.ign");
    fs::write(&config_path, config).unwrap();
    let rootfs_karg = "coreos.live.rootfs_url=http://10.0.2.2:8080/rootfs.img";
    coreos_installer(&["iso", "kargs", "reset", s(&customized)]);
    coreos_installer(&["iso", "kargs", "modify", "--append", rootfs_karg, s(&customized)]);
    coreos_installer(&["iso", "ignition", "embed", "-i", s(&config_path), s(&customized)]);
    assert_eq!(coreos_installer(&["iso", "ignition", "show", s(&customized)]), config);

    // Two boots in parallel cost no more wall time than one.
    let booting = {
        let minimal = minimal.clone();
        std::thread::spawn(move || qemu::boot_iso(&minimal))
    };
    let second = qemu::boot_iso(&customized);
    let first = booting.join().unwrap();

    first.assert_ok();
    eprintln!("minimal ISO booted in {:.1?}: {}", first.elapsed, first.cmdline);
    assert!(first.has_karg("BOOT_IMAGE=/images/pxeboot/vmlinuz"), "isolinux booted it: {}", first.cmdline);
    assert!(first.cmdline.ends_with(&default), "karg areas as in the full ISO: {}", first.cmdline);
    assert_eq!(first.config_ign_sha256, None);

    second.assert_ok();
    eprintln!("customized minimal ISO booted in {:.1?}: {}", second.elapsed, second.cmdline);
    assert_eq!(second.config_ign_sha256.as_deref(), Some(sha256_hex(config).as_str()), "{}", second.log_tail(3000));
    assert!(second.cmdline.ends_with(&format!("{without} {rootfs_karg}")), "cmdline: {}", second.cmdline);
    assert!(!second.cmdline.contains("coreos.liveiso="), "cmdline: {}", second.cmdline);
}

/// The shared coreos-installer fixtures without miniso.dat.
#[test]
fn fixtures_without_miniso() {
    let dir = tempfile::tempdir().unwrap();

    // 2020-09 (RHCOS 4.6): no karg areas, so no rootfs URL could ever be set; refused.
    let full = fixture_iso("embed-areas-2020-09", dir.path());
    let out = dir.path().join("2020-09.minimal.iso");
    let err = remaster_minimal(&full, &out).unwrap_err();
    assert!(matches!(err, RemasterError::NoKargAreas), "{err}");
    assert!(err.to_string().contains("no kernel-argument embed areas"), "{err}");
    assert!(!out.exists());

    // 2021-09 (kargs.json and legacy headers; empty isolinux.bin and efiboot.img).
    let full = fixture_iso("embed-areas-2021-09", dir.path());
    let out = dir.path().join("2021-09.minimal.iso");
    let report = remaster(&full, &out);
    eprintln!("{report:#?}");
    let expected: Vec<String> = records(&full).into_iter().filter(|r| r != "IMAGES/PXEBOOT/ROOTFS.IMG").collect();
    assert_eq!(records(&out), expected);
    let default = "mitigations=auto,nosmt ignition.firstboot ignition.platform.id=metal";
    assert_eq!(coreos_installer(&["iso", "kargs", "show", "--default", s(&out)]), format!("{default}\n").as_bytes());
    let kargs: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&out)])).unwrap();
    assert_eq!(kargs["length"], 1139);
    let offsets: Vec<u64> = kargs["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, report.karg_areas);
    let ignition: Value =
        serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", s(&out)])).unwrap();
    assert_eq!(ignition["offset"].as_u64(), Some(report.ignition_area.offset));
    assert_eq!(ignition["length"], 262144);
    // The legacy system-area headers are dropped: kargs.json and IMAGES/IGNITION.IMG suffice.
    assert!(fs::read(&out).unwrap()[..32768].iter().all(|b| *b == 0));
    assert!(report.notes.iter().any(|n| n.contains("legacy coreKarg/coreiso+")), "{:?}", report.notes);
    // Both boot images are empty in this fixture: the entries carry what firmware loads from
    // the full ISO (the file whose data starts at the entry's block), as xorriso reports it.
    let (_, full_images) = xorriso_boot_images(&full);
    let (_, images) = xorriso_boot_images(&out);
    let paths = |v: &[XorrisoImage]| v.iter().map(|i| (i.0.clone(), i.2, i.4.to_uppercase())).collect::<Vec<_>>();
    assert_eq!(paths(&images), paths(&full_images));
    assert_eq!(report.notes.iter().filter(|n| n.contains("also start(s) there")).count(), 2, "{:?}", report.notes);

    // coreos-installer customizes the result and reads it back.
    let config_path = dir.path().join("config.ign");
    fs::write(&config_path, b"{\"ignition\": {\"version\": \"3.0.0\"}\n").unwrap();
    coreos_installer(&["iso", "ignition", "embed", "-i", s(&config_path), s(&out)]);
    assert_eq!(coreos_installer(&["iso", "ignition", "show", s(&out)]), fs::read(&config_path).unwrap());
    // The areas hold the full ISO's kargs until reset (the server overlays them per request).
    let full_default = "mitigations=auto,nosmt coreos.liveiso=fedora-coreos-34.20210921.dev.0 ignition.firstboot \
                        ignition.platform.id=metal";
    assert_eq!(coreos_installer(&["iso", "kargs", "show", s(&out)]), format!("{full_default}\n").as_bytes());
    coreos_installer(&["iso", "kargs", "reset", s(&out)]);
    coreos_installer(&["iso", "kargs", "modify", "-a", "coreos.live.rootfs_url=http://x/r", s(&out)]);
    assert_eq!(
        coreos_installer(&["iso", "kargs", "show", s(&out)]),
        format!("{default} coreos.live.rootfs_url=http://x/r\n").as_bytes()
    );
    // ... and a customized image is not re-mastered again (neither is a minimal one).
    let err = remaster_minimal(&out, &dir.path().join("again.iso")).unwrap_err();
    assert!(matches!(err, RemasterError::NoRootfs), "{err}");
}

/// An image whose karg areas are known only from the legacy coreKarg header (RHCOS 4.7/4.8 era;
/// made from 2021-09 by breaking its kargs.json record, as coreos-installer's unit test does):
/// the header is translated into the new layout.
#[test]
fn legacy_karg_header_is_translated() {
    let dir = tempfile::tempdir().unwrap();
    let full = fixture_iso("embed-areas-2021-09", dir.path());
    let mut bytes = fs::read(&full).unwrap();
    assert_eq!(&bytes[63725..63734], b"KARGS.JSO");
    bytes[63725] = b'Z';
    fs::write(&full, &bytes).unwrap();
    let default = "mitigations=auto,nosmt coreos.liveiso=fedora-coreos-34.20210921.dev.0 ignition.firstboot \
                   ignition.platform.id=metal";
    assert_eq!(coreos_installer(&["iso", "kargs", "show", "--default", s(&full)]), format!("{default}\n").as_bytes());

    let out = dir.path().join("minimal.iso");
    let report = remaster(&full, &out);
    assert!(report.legacy_headers, "{report:#?}");
    assert_eq!(report.default_kargs, "mitigations=auto,nosmt ignition.firstboot ignition.platform.id=metal");
    let kargs: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&out)])).unwrap();
    let offsets: Vec<u64> = kargs["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, report.karg_areas);
    assert_ne!(offsets, [98126, 371658], "the areas moved with their files");
    // The legacy default copy (/.cmdline) is a file and is not rewritten.
    assert_eq!(kargs["default"], default);
    coreos_installer(&["iso", "kargs", "modify", "-a", "x=1", s(&out)]);
    assert_eq!(coreos_installer(&["iso", "kargs", "show", s(&out)]), format!("{default} x=1\n").as_bytes());
    let out_bytes = fs::read(&out).unwrap();
    assert!(out_bytes[..32672].iter().all(|b| *b == 0), "only the legacy headers are in the system area");
    assert_eq!(&out_bytes[32672..32680], b"coreKarg");
    assert_eq!(&out_bytes[32744..32752], b"coreiso+");
    let legacy_ignition = u64::from_le_bytes(out_bytes[32752..32760].try_into().unwrap());
    assert_eq!(legacy_ignition, report.ignition_area.offset);
}

/// For fixtures that do have miniso.dat, coreos-installer's own minimal ISO has the kargs.json we
/// write (§4.5 item 6), byte for byte, and the same files.
#[test]
fn kargs_json_matches_coreos_installer_minimal_iso() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["embed-areas-2021-12", "embed-areas-2023-07.x86_64"] {
        let full = fixture_iso(name, dir.path());
        let ours = dir.path().join(format!("{name}.ours.iso"));
        let theirs = dir.path().join(format!("{name}.theirs.iso"));
        remaster(&full, &ours);
        coreos_installer(&["iso", "extract", "minimal-iso", s(&full), s(&theirs)]);
        let read = |path: &Path, file: &str| {
            let iso = IsoFs::open(fs::File::open(path).unwrap()).unwrap();
            iso.read_file(&iso.get_path(file).unwrap(), 1 << 20).unwrap()
        };
        assert_eq!(
            String::from_utf8(read(&ours, "COREOS/KARGS.JSO")).unwrap(),
            String::from_utf8(read(&theirs, "COREOS/KARGS.JSO")).unwrap(),
            "{name}"
        );
        let ours_kargs: Value =
            serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&ours)])).unwrap();
        let theirs_kargs: Value =
            serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&theirs)])).unwrap();
        assert_eq!(ours_kargs["default"], theirs_kargs["default"], "{name}");
        // Same files (their minimal ISO drops miniso.dat; ours keeps every file but the rootfs).
        let mut ours_records = records(&ours);
        ours_records.retain(|r| r != "COREOS/MINISO.DAT");
        assert_eq!(ours_records, records(&theirs), "{name}");
    }
}

/// What re-mastering refuses, with messages that say why.
#[test]
fn refusals() {
    let dir = tempfile::tempdir().unwrap();
    let full = fixture_iso("embed-areas-2022-02", dir.path());
    let out = dir.path().join("out.iso");

    // Customized input (the areas are shared with the output).
    let customized = dir.path().join("customized.iso");
    fs::copy(&full, &customized).unwrap();
    coreos_installer(&["iso", "kargs", "modify", "-a", "foo=bar", s(&customized)]);
    let err = remaster_minimal(&customized, &out).unwrap_err();
    assert!(err.to_string().starts_with("Cannot operate on ISO with embedded customizations"), "{err}");
    assert!(err.to_string().contains("foo=bar"), "{err}");
    coreos_installer(&["iso", "reset", s(&customized)]);
    let config_path = dir.path().join("config.ign");
    fs::write(&config_path, b"{}").unwrap();
    coreos_installer(&["iso", "ignition", "embed", "-i", s(&config_path), s(&customized)]);
    let err = remaster_minimal(&customized, &out).unwrap_err();
    assert!(matches!(err, RemasterError::Customized(_)), "{err}");

    // Output over the input.
    let err = remaster_minimal(&full, &full).unwrap_err();
    let err = bootstream::errors::chain(&err).to_string();
    assert!(err.contains("is the full ISO"), "{err}");

    // Not a live ISO.
    let synthetic = fixture_iso("synthetic", dir.path());
    let err = remaster_minimal(&synthetic, &out).unwrap_err();
    assert!(err.to_string().contains("no IMAGES/PXEBOOT/ROOTFS.IMG"), "{err}");

    // No El Torito: the sample ISO (a live ISO layout without boot record).
    let sample = dir.path().join("sample.iso");
    fs::write(&sample, bootstream::formats::sample::sample_iso_bytes().unwrap()).unwrap();
    let err = remaster_minimal(&sample, &out).unwrap_err();
    assert!(matches!(err, RemasterError::NotBootable), "{err}");
    assert!(err.to_string().contains("no El Torito boot record"), "{err}");

    // A name the level-1 writer cannot reproduce (lower case): `ZIPL.PRM` renamed `zipl.prm`.
    let mut bytes = fs::read(&full).unwrap();
    let at = bytes.windows(10).position(|w| w == b"ZIPL.PRM;1").unwrap();
    bytes[at..at + 8].copy_from_slice(b"zipl.prm");
    let odd = dir.path().join("odd.iso");
    fs::write(&odd, &bytes).unwrap();
    let err = remaster_minimal(&odd, &out).unwrap_err();
    assert!(matches!(err, RemasterError::Unrepresentable { .. }), "{err}");
    assert!(err.to_string().starts_with("zipl.prm cannot be reproduced"), "{err}");

    // Unusable output directory.
    let err = remaster_minimal(&full, &dir.path().join("missing/out.iso")).unwrap_err();
    assert!(matches!(err, RemasterError::Io { .. }), "{err}");
    assert!(!out.exists());
}

/// Boot images for writer tests: a BIOS image with room for a boot info table, an EFI image.
fn boot_tree(builder: &mut IsoBuilder) -> Vec<u8> {
    let bios: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    builder.add_file("ISOLINUX/ISOLINUX.BIN", bios.clone()).unwrap();
    builder.add_file("ISOLINUX/ISOLINUX.CFG", b"default linux\n".to_vec()).unwrap();
    builder.add_file("IMAGES/EFIBOOT.IMG", vec![0xEB; 3 * 2048 + 100]).unwrap();
    builder.add_file("README.TXT", b"hello\n".to_vec()).unwrap();
    bios
}

fn two_platform_catalog() -> BootCatalog<String> {
    let mut catalog = BootCatalog::new(Platform::X86, BootEntry::no_emulation("ISOLINUX/ISOLINUX.BIN".into(), 4));
    catalog.push(Platform::EFI, BootEntry::no_emulation("IMAGES/EFIBOOT.IMG".into(), 14));
    catalog
}

/// Writer: a BIOS + UEFI catalog as a file, read back by xorriso and by our reader; boot info
/// table values; a hidden catalog; file ranges streamed from another file.
#[test]
fn writer_el_torito_round_trip() {
    let dir = tempfile::tempdir().unwrap();

    // Catalog as ISOLINUX/BOOT.CAT, boot info table in isolinux.bin, EFI image from a range.
    let source_path = dir.path().join("source.bin");
    let mut source = vec![7u8; 100];
    source.extend_from_slice(b"streamed from a range");
    fs::write(&source_path, &source).unwrap();
    let mut builder = IsoBuilder::new("BOOT-TEST").unwrap();
    let bios = boot_tree(&mut builder);
    builder.add_file_range("DATA/RANGE.BIN", Arc::new(fs::File::open(&source_path).unwrap()), 100, 21).unwrap();
    builder
        .set_boot(BootSetup {
            catalog_path: Some("ISOLINUX/BOOT.CAT".into()),
            catalog: two_platform_catalog(),
            boot_info_table: BTreeSet::from(["ISOLINUX/ISOLINUX.BIN".to_string()]),
        })
        .unwrap();
    let path = dir.path().join("boot.iso");
    let layout = builder.write_to(fs::File::create(&path).unwrap()).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), layout.image_len());

    let (cat, images) = xorriso_boot_images(&path);
    assert_eq!(cat.as_deref(), Some("/ISOLINUX/BOOT.CAT"));
    let bin = layout.get("ISOLINUX/ISOLINUX.BIN").unwrap();
    let efi = layout.get("IMAGES/EFIBOOT.IMG").unwrap();
    assert_eq!(images.len(), 2, "{images:?}");
    assert_eq!(
        (images[0].0.as_str(), images[0].1.as_str(), images[0].2, images[0].3, images[0].4.as_str()),
        ("BIOS", "none", 4, bin.lba, "/ISOLINUX/ISOLINUX.BIN")
    );
    assert!(images[0].5.contains("boot-info-table"), "{:?}", images[0]);
    assert_eq!(
        (images[1].0.as_str(), images[1].1.as_str(), images[1].2, images[1].3, images[1].4.as_str()),
        ("UEFI", "none", 14, efi.lba, "/IMAGES/EFIBOOT.IMG")
    );

    let iso = IsoFs::open(fs::File::open(&path).unwrap()).unwrap();
    let el_torito = eltorito::read_el_torito(&iso).unwrap().unwrap();
    assert_eq!(Some(el_torito.catalog_lba), layout.boot_catalog_lba);
    assert_eq!(el_torito.catalog_lba, layout.get("ISOLINUX/BOOT.CAT").unwrap().lba);
    assert_eq!(layout.get("ISOLINUX/BOOT.CAT").unwrap().length, SECTOR as u32);
    let expected = two_platform_catalog().map_images(|p| Ok::<u32, ()>(layout.get(p).unwrap().lba)).unwrap();
    assert_eq!(el_torito.catalog, expected);
    assert_boot_info_table(&path, "ISOLINUX/ISOLINUX.BIN");
    let written = iso.read_file(&iso.get_path("ISOLINUX/ISOLINUX.BIN").unwrap(), 1 << 20).unwrap();
    assert_eq!((&written[..8], &written[64..]), (&bios[..8], &bios[64..]), "only bytes 8..64 are patched");
    assert_eq!(iso.read_file(&iso.get_path("DATA/RANGE.BIN").unwrap(), 100).unwrap(), b"streamed from a range");
    assert!(matches!(&iso.descriptors()[1], bootstream::formats::iso9660::Descriptor::Boot { .. }));
    // isoinfo-style check: xorriso can also list the files.
    let listing = run("xorriso", &["-indev", s(&path), "-find", "/", "-type", "f"]);
    assert!(listing.contains("'/DATA/RANGE.BIN'"), "{listing}");

    // Hidden catalog, no boot info table, BIOS only.
    let mut builder = IsoBuilder::new("HIDDEN").unwrap();
    boot_tree(&mut builder);
    let catalog = BootCatalog::new(Platform::X86, BootEntry::no_emulation("ISOLINUX/ISOLINUX.BIN".to_string(), 4));
    builder.set_boot(BootSetup { catalog_path: None, catalog, boot_info_table: BTreeSet::new() }).unwrap();
    let hidden = dir.path().join("hidden.iso");
    let layout = builder.write_to(fs::File::create(&hidden).unwrap()).unwrap();
    let (cat, images) = xorriso_boot_images(&hidden);
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].3, layout.get("ISOLINUX/ISOLINUX.BIN").unwrap().lba);
    assert!(!images[0].5.contains("boot-info-table"), "{:?}", images[0]);
    let iso = IsoFs::open(fs::File::open(&hidden).unwrap()).unwrap();
    let catalog_lba = eltorito::read_el_torito(&iso).unwrap().unwrap().catalog_lba;
    assert_eq!(Some(catalog_lba), layout.boot_catalog_lba);
    assert!(iso.walk().unwrap().iter().all(|(_, r)| r.lba != catalog_lba), "the catalog is in no directory");
    assert!(cat.as_ref().is_none_or(|c| !c.contains("BOOT.CAT")), "{cat:?}");

    // Deterministic.
    let again = builder.to_bytes().unwrap();
    assert!(again == fs::read(&hidden).unwrap());

    // Bad setups are errors, not broken images.
    for (setup, message) in [
        (
            BootSetup {
                catalog_path: None,
                catalog: BootCatalog::new(Platform::X86, BootEntry::no_emulation("NOPE.BIN".into(), 4)),
                boot_info_table: BTreeSet::new(),
            },
            "boot image NOPE.BIN is not a file of the image",
        ),
        (
            BootSetup {
                catalog_path: None,
                catalog: BootCatalog::new(Platform::X86, BootEntry::no_emulation("EMPTY.BIN".into(), 4)),
                boot_info_table: BTreeSet::new(),
            },
            "boot image EMPTY.BIN is empty",
        ),
        (
            BootSetup {
                catalog_path: None,
                catalog: BootCatalog::new(Platform::X86, BootEntry::no_emulation("TINY.BIN".into(), 4)),
                boot_info_table: BTreeSet::from(["TINY.BIN".to_string()]),
            },
            "TINY.BIN is 10 bytes; a boot info table needs",
        ),
    ] {
        let mut builder = IsoBuilder::new("BAD").unwrap();
        builder.add_file("EMPTY.BIN", Vec::new()).unwrap();
        builder.add_file("TINY.BIN", vec![1; 10]).unwrap();
        builder.set_boot(setup).unwrap();
        let err = builder.layout().unwrap_err().to_string();
        assert!(err.contains(message), "{err}");
    }
    let mut builder = IsoBuilder::new("BAD").unwrap();
    builder.add_file("ISOLINUX/BOOT.CAT", Vec::new()).unwrap();
    let err = builder
        .set_boot(BootSetup {
            catalog_path: Some("ISOLINUX/BOOT.CAT".into()),
            catalog: BootCatalog::new(Platform::X86, BootEntry::no_emulation("X".into(), 4)),
            boot_info_table: BTreeSet::new(),
        })
        .unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
}

/// Writes all-zero blocks as holes, so a test can make a 1 GiB image of mostly zeros without
/// needing a GiB of free disk (CI machines may have little).
struct SparseFile {
    file: fs::File,
    len: u64,
}

impl std::io::Write for SparseFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        if buf.iter().any(|&b| b != 0) {
            self.file.write_all_at(buf, self.len)?;
        }
        self.len += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // A trailing hole only exists once the length says so.
        self.file.set_len(self.len)
    }
}

/// Not a test of behavior but of cost: a ~1.1 GiB image with a 1 GiB rootfs is re-mastered by
/// streaming (the rootfs is never read), in about the time it takes to copy what remains.
/// Both the source and the full image are sparse, so the test needs about 40 MiB of disk.
#[test]
fn large_image_is_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = qemu::boot_fixture_dir().join("boot.iso");
    // Build a big variant of the fixture: same tree, a sparse 1 GiB rootfs, a 32 MiB initrd.
    let full_iso = IsoFs::open(fs::File::open(&fixture).unwrap()).unwrap();
    let source: bootstream::formats::iso9660::writer::SharedSource = Arc::new(fs::File::open(&fixture).unwrap());
    let mut builder = IsoBuilder::new(full_iso.volume_id()).unwrap();
    let big = dir.path().join("big.bin");
    let big_file = fs::File::create(&big).unwrap();
    big_file.set_len(1 << 30).unwrap();
    let big_source: bootstream::formats::iso9660::writer::SharedSource = Arc::new(fs::File::open(&big).unwrap());
    let el_torito = eltorito::read_el_torito(&full_iso).unwrap().unwrap();
    let mut bin_path = String::new();
    for (path, record) in full_iso.walk().unwrap() {
        match path.as_str() {
            _ if record.is_dir => builder.add_dir(&path).unwrap(),
            "ISOLINUX/BOOT.CAT" => {}
            "IMAGES/PXEBOOT/ROOTFS.IMG" => builder.add_file_range(&path, big_source.clone(), 0, 1 << 30).unwrap(),
            "IMAGES/PXEBOOT/INITRD.IMG" => builder.add_file_range(&path, big_source.clone(), 0, 32 << 20).unwrap(),
            _ => {
                if record.lba == el_torito.catalog.default.image {
                    bin_path = path.clone();
                }
                builder.add_file_range(&path, source.clone(), record.byte_offset(), record.length.into()).unwrap()
            }
        }
    }
    builder
        .set_boot(BootSetup {
            catalog_path: Some("ISOLINUX/BOOT.CAT".into()),
            catalog: BootCatalog::new(Platform::X86, BootEntry::no_emulation(bin_path.clone(), 4)),
            boot_info_table: BTreeSet::from([bin_path]),
        })
        .unwrap();
    let full = dir.path().join("full.iso");
    let mut sparse = SparseFile { file: fs::File::create(&full).unwrap(), len: 0 };
    // Blocks of 64 KiB: zero runs in the image become holes, whatever sizes write_to writes in.
    builder.write_to(std::io::BufWriter::with_capacity(64 << 10, &mut sparse)).unwrap();
    std::io::Write::flush(&mut sparse).unwrap();
    let used = std::os::unix::fs::MetadataExt::blocks(&fs::metadata(&full).unwrap()) * 512;
    assert!(used < 64 << 20, "the full image should be sparse, but uses {used} bytes");
    drop(big_file);
    fs::remove_file(&big).unwrap();

    let out = dir.path().join("minimal.iso");
    let started = std::time::Instant::now();
    let report = remaster(&full, &out);
    let elapsed = started.elapsed();
    eprintln!(
        "re-mastered {} MiB -> {} MiB in {elapsed:.2?} (rootfs {} MiB skipped)",
        report.input_len >> 20,
        report.output_len >> 20,
        report.rootfs_len >> 20
    );
    assert_eq!(report.rootfs_len, 1 << 30);
    assert!(report.output_len < 48 << 20, "{}", report.output_len);
    assert!(elapsed.as_secs() < 60, "{elapsed:?}");
    assert_boot_info_table(&out, "ISOLINUX/ISOLINUX.BIN");
}

/// UEFI: a full ISO in the RHCOS layout mastered by xorriso with Rock Ridge and Joliet, BIOS and
/// UEFI El Torito entries (`images/efiboot.img`: a FAT image with a standalone GRUB that finds the
/// volume by label and loads `/EFI/redhat/grub.cfg`), re-mastered without Rock Ridge/Joliet, boots
/// under OVMF: GRUB finds its config, the kernel and both initrds through the level-1 names.
#[test]
fn uefi_grub_boots_the_remastered_image() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ovmf_code = Path::new("/usr/share/OVMF/OVMF_CODE_4M.fd");
    let ovmf_vars = Path::new("/usr/share/OVMF/OVMF_VARS_4M.fd");
    assert!(ovmf_code.is_file() && ovmf_vars.is_file(), "OVMF is not installed; `bash .ci/test` installs it");
    let fixture = qemu::boot_fixture_dir().join("boot.iso");

    // The fixture's tree, plus EFI/redhat/grub.cfg and images/efiboot.img.
    let tree = d.join("tree");
    run("xorriso", &["-osirrox", "on", "-indev", s(&fixture), "-extract", "/", s(&tree)]);
    assert!(Command::new("chmod").args(["-R", "u+w", s(&tree)]).status().unwrap().success());
    fs::remove_file(tree.join("isolinux/boot.cat")).unwrap();
    fs::create_dir_all(tree.join("EFI/redhat")).unwrap();
    fs::write(
        tree.join("EFI/redhat/grub.cfg"),
        "set timeout=0\nmenuentry 'live' {\n\tlinux /images/pxeboot/vmlinuz console=ttyS0,115200n8 panic=-1 \
         bootstream.uefi=1\n\tinitrd /images/pxeboot/initrd.img /images/ignition.img\n}\n",
    )
    .unwrap();
    let stub = d.join("stub.cfg");
    fs::write(
        &stub,
        "search --no-floppy --label BOOTSTREAM_FIXTURE --set root\nset prefix=($root)/EFI/redhat\n\
         configfile $prefix/grub.cfg\n",
    )
    .unwrap();
    let grub = d.join("BOOTX64.EFI");
    run(
        "grub-mkstandalone",
        &[
            "-O",
            "x86_64-efi",
            "-o",
            s(&grub),
            "--install-modules=linux normal iso9660 search search_label configfile echo gzio part_gpt part_msdos fat",
            "--modules=iso9660 search search_label linux configfile normal",
            "--locales=",
            "--fonts=",
            "--themes=",
            &format!("boot/grub/grub.cfg={}", s(&stub)),
        ],
    );
    let efiboot = tree.join("images/efiboot.img");
    fs::write(&efiboot, vec![0u8; 4 << 20]).unwrap();
    run("mformat", &["-i", s(&efiboot), "-v", "EFIBOOT", "::"]);
    run("mmd", &["-i", s(&efiboot), "::/EFI", "::/EFI/BOOT"]);
    run("mcopy", &["-i", s(&efiboot), s(&grub), "::/EFI/BOOT/BOOTX64.EFI"]);
    let full = d.join("full.iso");
    run(
        "xorriso",
        &[
            "-as",
            "mkisofs",
            "-quiet",
            "-iso-level",
            "1",
            "-R",
            "-J",
            "-V",
            "BOOTSTREAM_FIXTURE",
            "-o",
            s(&full),
            "-b",
            "isolinux/isolinux.bin",
            "-c",
            "isolinux/boot.cat",
            "-no-emul-boot",
            "-boot-load-size",
            "4",
            "-eltorito-alt-boot",
            "-e",
            "images/efiboot.img",
            "-no-emul-boot",
            s(&tree),
        ],
    );

    let minimal = d.join("minimal.iso");
    let report = remaster(&full, &minimal);
    let platforms: Vec<(String, &str)> =
        report.boot_entries.iter().map(|e| (e.platform.to_string(), e.path.as_str())).collect();
    assert_eq!(platforms, [("BIOS".to_string(), "ISOLINUX/ISOLINUX.BIN"), ("UEFI".to_string(), "IMAGES/EFIBOOT.IMG")]);
    let (_, images) = xorriso_boot_images(&minimal);
    assert_eq!((images[1].0.as_str(), images[1].2), ("UEFI", 8192), "{images:?}");
    let config = br#"{"ignition":{"version":"3.2.0"}}"#;
    let config_path = d.join("config.ign");
    fs::write(&config_path, config).unwrap();
    coreos_installer(&["iso", "ignition", "embed", "-i", s(&config_path), s(&minimal)]);

    let vars = d.join("vars.fd");
    fs::copy(ovmf_vars, &vars).unwrap();
    let opts = qemu::BootOptions {
        extra_args: vec![
            "-drive".into(),
            format!("if=pflash,format=raw,readonly=on,file={}", s(ovmf_code)),
            "-drive".into(),
            format!("if=pflash,format=raw,file={}", s(&vars)),
        ],
        ..Default::default()
    };
    let booted = qemu::boot_iso_with(&minimal, &opts);
    booted.assert_ok();
    eprintln!("UEFI boot of the minimal ISO in {:.1?}: {}", booted.elapsed, booted.cmdline);
    assert!(booted.has_karg("bootstream.uefi=1"), "GRUB read EFI/REDHAT/GRUB.CFG: {}", booted.cmdline);
    assert_eq!(booted.config_ign_sha256.as_deref(), Some(sha256_hex(config).as_str()), "{}", booted.log_tail(3000));
}
