//! The ISO 9660 reader, the live-ISO inspection and the karg renderer against coreos-installer's
//! CoreOS fixtures, cross-checked with coreos-installer itself; and the ISO writer's output
//! cross-checked with coreos-installer and xorriso.
//!
//! coreos-installer and xorriso are required: these tests fail (not skip) without them.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::common::{self, run, run_ok};

use bootstream::formats::iso9660::writer::IsoBuilder;
use bootstream::formats::iso9660::{Descriptor, IsoFs};
use bootstream::formats::kargs::{KargOp, apply_ops, render_area};
use bootstream::formats::liveiso::LiveIso;
use serde_json::Value;

/// CoreOS fixtures (everything but `synthetic`), sorted.
fn coreos_fixture_names() -> Vec<String> {
    let names = common::fixture_iso_names();
    assert!(names.len() >= 7, "expected the coreos-installer fixtures, found {names:?}");
    names
}

/// Decompresses fixture `name` into `dir` and returns its path.
fn fixture(name: &str, dir: &Path) -> PathBuf {
    common::fixture_iso(name, dir)
}

fn show_iso_json(args: &[&str], iso: &Path) -> Value {
    let mut all = vec!["dev", "show", "iso"];
    all.extend_from_slice(args);
    all.push(iso.to_str().unwrap());
    serde_json::from_slice(&run_ok("coreos-installer", &all)).unwrap()
}

/// Our descriptors in the shape of `coreos-installer dev show iso`.
fn descriptors_json(iso: &IsoFs) -> Value {
    let descriptors: Vec<Value> = iso
        .descriptors()
        .iter()
        .map(|d| match d {
            Descriptor::Primary(p) => serde_json::json!({
                "type": "primary",
                "system_id": p.system_id,
                "volume_id": p.volume_id,
                "volume_space_size": p.volume_space_size,
                "root": {"name": p.root.name, "address": p.root.lba, "length": p.root.length},
            }),
            Descriptor::Boot { boot_system_id, boot_id } => serde_json::json!({
                "type": "boot", "boot_system_id": boot_system_id, "boot_id": boot_id,
            }),
            Descriptor::Supplementary => serde_json::json!({"type": "supplementary"}),
            Descriptor::Unknown { type_id } => {
                serde_json::json!({"type": "unknown", "type_id": type_id})
            }
        })
        .collect();
    serde_json::json!({ "descriptors": descriptors })
}

/// Descriptors and the walk of every fixture equal what coreos-installer reports.
#[test]
fn reader_agrees_with_coreos_installer_on_every_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let mut names = coreos_fixture_names();
    names.push("synthetic".into());
    for name in &names {
        let path = fixture(name, dir.path());
        let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
        let shown = show_iso_json(&[], &path);
        assert_eq!(descriptors_json(&iso), shown["header"], "{name}: descriptors");
        let walked = iso.walk().unwrap();
        let paths: Vec<&str> = walked.iter().map(|(p, _)| p.as_str()).collect();
        let expected: Vec<&str> = shown["records"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(paths, expected, "{name}: walk");
        for (path, record) in &walked {
            assert_eq!(&iso.get_path(path).unwrap(), record, "{name}: {path}");
            if !record.is_dir && record.length > 0 {
                assert!(record.end_offset() <= iso.image_len(), "{name}: {path}");
            }
        }
        if name != "synthetic" {
            assert!(
                matches!(iso.descriptors(), [Descriptor::Primary(p), Descriptor::Boot { boot_system_id, .. }, Descriptor::Supplementary]
                    if p.system_id == "LINUX" && boot_system_id == "EL TORITO SPECIFICATION"),
                "{name}: {:?}",
                iso.descriptors()
            );
            for required in ["EFI", "IMAGES/PXEBOOT", "IMAGES/PXEBOOT/ROOTFS.IMG"] {
                assert!(paths.contains(&required), "{name}: {required}");
            }
        }
    }
}

/// Ignition and karg areas equal `coreos-installer dev show iso --ignition/--kargs`.
#[test]
fn embed_areas_agree_with_coreos_installer() {
    let dir = tempfile::tempdir().unwrap();
    for name in coreos_fixture_names() {
        let path = fixture(&name, dir.path());
        let live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
        let ignition = show_iso_json(&["--ignition"], &path);
        assert_eq!(ignition["offset"], live.ignition_area.offset, "{name}");
        assert_eq!(ignition["length"], live.ignition_area.len, "{name}");
        let kargs = show_iso_json(&["--kargs"], &path);
        match &live.kargs {
            None => assert_eq!(kargs, Value::Null, "{name}"),
            Some(ours) => {
                assert_eq!(kargs["length"], ours.size, "{name}");
                assert_eq!(kargs["default"], ours.default.as_str(), "{name}");
                let theirs: Vec<u64> =
                    kargs["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
                let offsets: Vec<u64> = ours.areas.iter().map(|a| a.offset).collect();
                assert_eq!(offsets, theirs, "{name}");
                let shown = run_ok("coreos-installer", &["iso", "kargs", "show", path.to_str().unwrap()]);
                assert_eq!(String::from_utf8(shown).unwrap(), format!("{}\n", ours.current));
            }
        }
    }
}

/// spec-images §8.3 item 5, with coreos-installer as the oracle: after `iso kargs modify -a
/// foobar=val`, the image differs from the original exactly by our rendered areas.
#[test]
fn rendered_karg_areas_match_coreos_installer_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for name in coreos_fixture_names() {
        let path = fixture(&name, dir.path());
        let live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
        let Some(kargs) = live.kargs else {
            let out = run("coreos-installer", &["iso", "kargs", "show", path.to_str().unwrap()]);
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("No karg embed areas found"));
            continue;
        };
        let modified = dir.path().join(format!("{name}.kargs.iso"));
        run_ok(
            "coreos-installer",
            &["iso", "kargs", "modify", "-a", "foobar=val", "-o", modified.to_str().unwrap(), path.to_str().unwrap()],
        );
        let new = apply_ops(&kargs.current, &[KargOp::Append("foobar=val".into())]).unwrap();
        let mut expected = std::fs::read(&path).unwrap();
        for area in &kargs.areas {
            let bytes = render_area(&new, kargs.size, area.end, area.pad).unwrap();
            let at = area.offset as usize;
            expected[at..at + kargs.size].copy_from_slice(&bytes);
        }
        assert!(expected == std::fs::read(&modified).unwrap(), "{name}: bytes differ");
        checked += 1;
    }
    assert!(checked >= 6);
}

/// A tree exercising the writer: nested directories, a directory spanning several blocks,
/// extension-less names, an empty file and an empty directory.
fn writer_tree() -> IsoBuilder {
    let mut builder = IsoBuilder::new("writer-test.0").unwrap();
    builder.add_file("README", "top level, no extension\n").unwrap();
    builder.add_file("A/B/C/D/E/F/DEEP.TXT", "deep\n").unwrap();
    builder.add_file("EMPTY.DAT", Vec::new()).unwrap();
    builder.add_dir("NOTHING").unwrap();
    builder.add_file("BIG/DATA.BIN", (0..100_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>()).unwrap();
    for i in 1..=150 {
        builder.add_file(&format!("LARGEDIR/{i}.DAT"), format!("{i}\n")).unwrap();
    }
    builder
}

#[test]
fn writer_output_is_read_identically_by_coreos_installer_and_xorriso() {
    let dir = tempfile::tempdir().unwrap();
    let builder = writer_tree();
    let path = dir.path().join("written.iso");
    let layout = builder.write_to(File::create(&path).unwrap()).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), layout.image_len());

    let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
    let walked = iso.walk().unwrap();
    let shown = show_iso_json(&[], &path);
    assert_eq!(descriptors_json(&iso), shown["header"]);
    let paths: Vec<&str> = walked.iter().map(|(p, _)| p.as_str()).collect();
    let theirs: Vec<&str> = shown["records"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(paths, theirs);
    for (path, record) in &walked {
        assert_eq!(layout.get(path), Some(record), "{path}");
    }

    // xorriso: every file listed with its size, and extracted with the same bytes.
    let listing = run_ok(
        "xorriso",
        &["-abort_on", "WARNING", "-indev", path.to_str().unwrap(), "-find", "/", "-type", "f", "-exec", "lsdl"],
    );
    let listing = String::from_utf8(listing).unwrap();
    let extract_dir = dir.path().join("extracted");
    run_ok(
        "xorriso",
        &[
            "-abort_on",
            "WARNING",
            "-osirrox",
            "on",
            "-indev",
            path.to_str().unwrap(),
            "-extract",
            "/",
            extract_dir.to_str().unwrap(),
        ],
    );
    let mut files = 0;
    for (path, record) in walked.iter().filter(|(_, r)| !r.is_dir) {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" '/{path}'")))
            .unwrap_or_else(|| panic!("xorriso does not list /{path}:\n{listing}"));
        let size: u64 = line.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert_eq!(size, u64::from(record.length), "{line}");
        let extracted = std::fs::read(extract_dir.join(path)).unwrap();
        assert_eq!(extracted, iso.read_file(record, 1 << 20).unwrap(), "{path}");
        files += 1;
    }
    assert_eq!(files, 154);
    assert!(extract_dir.join("NOTHING").is_dir());
}

mod robustness {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn pristine() -> &'static [u8] {
        static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
        BYTES.get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::read(fixture("embed-areas-2023-07.x86_64", dir.path())).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Corrupting descriptors, directories and the JSON files (the first ~70 KiB of the
        /// image) gives an error or a different answer, never a panic.
        #[test]
        fn corrupted_live_iso_never_panics(
            edits in proptest::collection::vec((32768usize..72_000, any::<u8>()), 1..16)
        ) {
            let mut bytes = pristine().to_vec();
            for (pos, value) in edits {
                bytes[pos] = value;
            }
            if let Ok(iso) = IsoFs::from_source(bytes) {
                let _ = iso.walk();
                let _ = LiveIso::from_iso(&iso);
            }
        }
    }
}
