//! The offline sample live ISO, read by our reader and inspection, by coreos-installer and by
//! xorriso. coreos-installer and xorriso are required: these tests fail (not skip) without them.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::common::{run, run_ok};

use bootstream::formats::iso9660::IsoFs;
use bootstream::formats::liveiso::LiveIso;
use bootstream::formats::sample::{
    SAMPLE_DEFAULT_KARGS, SAMPLE_IGNITION_AREA_SIZE, SAMPLE_KARGS_AREA_SIZE, SAMPLE_VOLUME_ID, sample_iso_bytes,
    write_sample_iso,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

const MARKER: &[u8] = b"# COREOS_KARG_EMBED_AREA\n";

fn coreos_installer(args: &[&str]) -> Vec<u8> {
    run_ok("coreos-installer", args)
}

fn sha256(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

/// Writes the sample into a fresh temporary directory.
fn sample() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sample.iso");
    write_sample_iso(&path).unwrap();
    (dir, path)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Names of the regular files in a newc archive.
fn cpio_files(mut archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    loop {
        let mut reader = cpio::newc::Reader::new(archive).unwrap();
        if reader.entry().is_trailer() {
            break;
        }
        let name = reader.entry().name().to_string();
        let is_file = reader.entry().mode() & 0o170000 == 0o100000;
        let mut data = Vec::new();
        reader.read_to_end(&mut data).unwrap();
        if is_file {
            files.push((name, data));
        }
        archive = reader.finish().unwrap();
    }
    files
}

#[test]
fn our_reader_and_inspection_accept_the_sample() {
    let (_dir, path) = sample();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, sample_iso_bytes().unwrap(), "deterministic");
    assert!(bytes.len() < 2 * 1024 * 1024, "{} bytes", bytes.len());

    let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
    assert_eq!(iso.volume_id(), SAMPLE_VOLUME_ID);
    let paths: Vec<String> = iso.walk().unwrap().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "COREOS",
            "COREOS/FEATURES.JSO",
            "COREOS/IGNINFO.JSO",
            "COREOS/KARGS.JSO",
            "EFI",
            "EFI/REDHAT",
            "EFI/REDHAT/GRUB.CFG",
            "IMAGES",
            "IMAGES/IGNITION.IMG",
            "IMAGES/PXEBOOT",
            "IMAGES/PXEBOOT/INITRD.IMG",
            "IMAGES/PXEBOOT/ROOTFS.IMG",
            "IMAGES/PXEBOOT/VMLINUZ",
            "ISOLINUX",
            "ISOLINUX/ISOLINUX.CFG",
        ]
    );
    let igninfo = iso.read_file(&iso.get_path("COREOS/IGNINFO.JSO").unwrap(), 4096).unwrap();
    let igninfo: Value = serde_json::from_slice(&igninfo).unwrap();
    assert_eq!(igninfo, serde_json::json!({"file": "images/ignition.img"}));

    let live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
    assert_eq!(live.volume_id, SAMPLE_VOLUME_ID);
    assert_eq!(live.len, bytes.len() as u64);
    let ignition = iso.get_path("IMAGES/IGNITION.IMG").unwrap();
    assert_eq!(live.ignition_area.offset, ignition.byte_offset());
    assert_eq!(live.ignition_area.len, SAMPLE_IGNITION_AREA_SIZE as u64);
    assert!(live.ignition_area_pristine);
    assert!(live.features.installer_config);
    assert!(live.features.live_initrd_network);
    assert_eq!((live.miniso, live.initrd_addrsize), (None, None));

    let kargs = live.kargs.as_ref().unwrap();
    assert_eq!(kargs.default, SAMPLE_DEFAULT_KARGS);
    assert_eq!(kargs.current, SAMPLE_DEFAULT_KARGS);
    assert!(SAMPLE_DEFAULT_KARGS.contains(&format!("coreos.liveiso={SAMPLE_VOLUME_ID} ")));
    assert_eq!(kargs.size, SAMPLE_KARGS_AREA_SIZE);
    // Areas sit right after the kernel path (grub) / initrd list (isolinux), are `<kargs>\n###...`
    // and are followed by the marker, as in real images.
    let grub = iso.get_path("EFI/REDHAT/GRUB.CFG").unwrap();
    let isolinux = iso.get_path("ISOLINUX/ISOLINUX.CFG").unwrap();
    let prefixes: [(&[u8], _); 2] = [
        (b"\tlinux /images/pxeboot/vmlinuz ", grub),
        (b"  append initrd=/images/pxeboot/initrd.img,/images/ignition.img ", isolinux),
    ];
    assert_eq!(kargs.areas.len(), 2);
    for (prefix, file) in prefixes {
        let area = kargs
            .areas
            .iter()
            .find(|a| a.offset > file.byte_offset() && a.offset < file.end_offset())
            .unwrap_or_else(|| panic!("no karg area in {}", file.name));
        assert_eq!((area.pad, area.end), (b'#', b'\n'));
        let at = area.offset as usize;
        assert_eq!(&bytes[at - prefix.len()..at], prefix);
        assert!(at + kargs.size + MARKER.len() <= file.end_offset() as usize);
        let content = &bytes[at..at + kargs.size];
        let mut expected = format!("{SAMPLE_DEFAULT_KARGS}\n").into_bytes();
        expected.resize(kargs.size, b'#');
        assert_eq!(content, expected);
        let after = at + kargs.size;
        assert_eq!(&bytes[after..after + MARKER.len()], MARKER);
    }

    let region = |a: bootstream::formats::liveiso::Area| &bytes[a.offset as usize..a.end() as usize];
    assert!(String::from_utf8_lossy(region(live.kernel)).contains("NOT bootable"));
    // The PXE initrd is a real initramfs: gzip'd newc with the live stamp and features.json,
    // zero-padded to 4 bytes.
    let initrd = region(live.initrd);
    assert_eq!(initrd.len() % 4, 0);
    let mut archive = Vec::new();
    flate2::read::GzDecoder::new(initrd).read_to_end(&mut archive).unwrap();
    let files = cpio_files(&archive);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["etc/coreos-live-initramfs", "etc/coreos/features.json"]);
    let features: Value = serde_json::from_slice(&files[1].1).unwrap();
    assert_eq!(features, serde_json::json!({"installer-config": true, "live-initrd-network": true}));
    let rootfs = cpio_files(region(live.rootfs.unwrap()));
    assert_eq!(rootfs.len(), 1);
    assert_eq!(rootfs[0].0, "root.squashfs");
}

#[test]
fn coreos_installer_dev_show_iso() {
    let (_dir, path) = sample();
    let shown: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", s(&path)])).unwrap();
    let primary = &shown["header"]["descriptors"][0];
    assert_eq!(primary["type"], "primary");
    assert_eq!(primary["volume_id"], SAMPLE_VOLUME_ID);
    let records: Vec<&str> = shown["records"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
    let ours: Vec<String> = iso.walk().unwrap().into_iter().map(|(p, _)| p).collect();
    assert_eq!(records, ours);

    let live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
    let ignition: Value =
        serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--ignition", s(&path)])).unwrap();
    assert_eq!(ignition, serde_json::json!({"offset": live.ignition_area.offset, "length": live.ignition_area.len}));
    let kargs: Value = serde_json::from_slice(&coreos_installer(&["dev", "show", "iso", "--kargs", s(&path)])).unwrap();
    let ours = live.kargs.unwrap();
    assert_eq!(kargs["length"], ours.size);
    assert_eq!(kargs["default"], SAMPLE_DEFAULT_KARGS);
    let offsets: Vec<u64> = kargs["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, ours.areas.iter().map(|a| a.offset).collect::<Vec<_>>());
}

#[test]
fn coreos_installer_kargs_show_modify_reset() {
    let (dir, path) = sample();
    let expected = format!("{SAMPLE_DEFAULT_KARGS}\n");
    assert_eq!(String::from_utf8(coreos_installer(&["iso", "kargs", "show", s(&path)])).unwrap(), expected);
    assert_eq!(
        String::from_utf8(coreos_installer(&["iso", "kargs", "show", "--default", s(&path)])).unwrap(),
        expected
    );

    let modified = dir.path().join("modified.iso");
    coreos_installer(&["iso", "kargs", "modify", "-a", "foobar=val", "-o", s(&modified), s(&path)]);
    let live = LiveIso::inspect(File::open(&modified).unwrap()).unwrap();
    assert_eq!(live.kargs.unwrap().current, format!("{SAMPLE_DEFAULT_KARGS} foobar=val"));

    let reset = dir.path().join("reset.iso");
    coreos_installer(&["iso", "kargs", "reset", "-o", s(&reset), s(&modified)]);
    assert_eq!(sha256(&reset), sha256(&path), "reset restores the image bit for bit");
}

#[test]
fn coreos_installer_ignition_show_embed_remove() {
    let (dir, path) = sample();
    let out = run("coreos-installer", &["iso", "ignition", "show", s(&path)]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("No embedded Ignition config"), "{stderr}");

    let config = dir.path().join("config.ign");
    let config_bytes = b"{\"ignition\": {\"version\": \"3.4.0\"}}\n";
    std::fs::write(&config, config_bytes).unwrap();
    let embedded = dir.path().join("embedded.iso");
    coreos_installer(&["iso", "ignition", "embed", "-i", s(&config), "-o", s(&embedded), s(&path)]);
    assert_eq!(coreos_installer(&["iso", "ignition", "show", s(&embedded)]), config_bytes);

    let before = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
    let after = LiveIso::inspect(File::open(&embedded).unwrap()).unwrap();
    assert!(!after.ignition_area_pristine);
    assert_eq!(LiveIso { ignition_area_pristine: true, ..after }, before, "only the Ignition area changed");

    let removed = dir.path().join("removed.iso");
    coreos_installer(&["iso", "ignition", "remove", "-o", s(&removed), s(&embedded)]);
    assert_eq!(sha256(&removed), sha256(&path), "remove restores the image bit for bit");
}

#[test]
fn coreos_installer_extracts_a_valid_live_initramfs() {
    let (dir, path) = sample();
    let out_dir = dir.path().join("pxe");
    std::fs::create_dir(&out_dir).unwrap();
    coreos_installer(&["iso", "extract", "pxe", "-o", s(&out_dir), s(&path)]);
    let live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    for (name, area) in [("vmlinuz", live.kernel), ("initrd.img", live.initrd), ("rootfs.img", live.rootfs.unwrap())] {
        let extracted = std::fs::read(out_dir.join(format!("sample-{name}"))).unwrap();
        assert_eq!(extracted, &bytes[area.offset as usize..area.end() as usize], "{name}");
    }
    let initrd = out_dir.join("sample-initrd.img");
    let listing = String::from_utf8(coreos_installer(&["dev", "show", "initrd", s(&initrd)])).unwrap();
    assert_eq!(listing, "etc/coreos-live-initramfs\netc/coreos/features.json\n");
    // `pxe customize` insists on the live-initramfs stamp and reads features.json.
    let config = dir.path().join("config.ign");
    std::fs::write(&config, b"{\"ignition\": {\"version\": \"3.4.0\"}}").unwrap();
    let customized = dir.path().join("customized.img");
    coreos_installer(&["pxe", "customize", "--live-ignition", s(&config), "-o", s(&customized), s(&initrd)]);
    assert!(std::fs::metadata(&customized).unwrap().len() > std::fs::metadata(&initrd).unwrap().len());
}

#[test]
fn xorriso_reads_the_sample() {
    let (dir, path) = sample();
    let listing = String::from_utf8(run_ok(
        "xorriso",
        &["-abort_on", "WARNING", "-indev", s(&path), "-find", "/", "-exec", "lsdl"],
    ))
    .unwrap();
    let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
    for (path, record) in iso.walk().unwrap() {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" '/{path}'")))
            .unwrap_or_else(|| panic!("xorriso does not list /{path}:\n{listing}"));
        assert_eq!(line.starts_with('d'), record.is_dir, "{line}");
    }
    let extracted = dir.path().join("extracted");
    run_ok("xorriso", &["-abort_on", "WARNING", "-osirrox", "on", "-indev", s(&path), "-extract", "/", s(&extracted)]);
    let kargs_json = std::fs::read(extracted.join("COREOS/KARGS.JSO")).unwrap();
    let kargs_json: Value = serde_json::from_slice(&kargs_json).unwrap();
    assert_eq!(kargs_json["default"], SAMPLE_DEFAULT_KARGS);
    assert_eq!(kargs_json["size"], SAMPLE_KARGS_AREA_SIZE);
    let paths: Vec<&str> =
        kargs_json["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["EFI/redhat/grub.cfg", "isolinux/isolinux.cfg"]);
    for file in kargs_json["files"].as_array().unwrap() {
        let cfg = std::fs::read(extracted.join(file["path"].as_str().unwrap().to_uppercase())).unwrap();
        let offset = file["offset"].as_u64().unwrap() as usize;
        let area = &cfg[offset..offset + SAMPLE_KARGS_AREA_SIZE];
        assert!(area.starts_with(format!("{SAMPLE_DEFAULT_KARGS}\n#").as_bytes()));
        assert!(cfg[offset + SAMPLE_KARGS_AREA_SIZE..].starts_with(MARKER));
    }
}
