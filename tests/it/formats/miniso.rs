//! The minimal ISO built from `miniso.dat` as a plan, compared byte for byte with what the real
//! `coreos-installer iso extract minimal-iso` writes for every fixture that carries one.
//!
//! Needs `coreos-installer` (in `PATH` or `~/.cargo/bin`) and `xz`; fails, never skips, without them.

use crate::common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use bootstream::formats::iso9660::IsoFs;
use bootstream::formats::liveiso::LiveIso;
use bootstream::formats::miniso::{self, MinimalIso, MinisoData, MinisoError};
use bootstream::image::catalog::{BaseImage, DigestCache, sha256_file};
use bootstream::plan::BaseFile;
use proptest::prelude::*;

const ROOTFS_URL: &str = "https://example.com/rootfs";

fn fixture_dir() -> PathBuf {
    common::shared("fixtures/coreos-installer/iso")
}

fn coreos_installer_path() -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("coreos-installer"))
        .find(|p| p.is_file());
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/coreos-installer"));
    in_path.or(home.filter(|p| p.is_file())).expect("coreos-installer not found in PATH or ~/.cargo/bin: install it")
}

fn coreos_installer(args: &[&str]) -> Output {
    Command::new(coreos_installer_path()).args(args).output().expect("running coreos-installer")
}

/// Runs coreos-installer and returns stdout, failing the test if it fails.
fn coreos_installer_ok(args: &[&str]) -> Vec<u8> {
    let out = coreos_installer(args);
    assert!(out.status.success(), "coreos-installer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Runs coreos-installer and returns stderr, failing the test if it succeeds.
fn coreos_installer_err(args: &[&str]) -> String {
    let out = coreos_installer(args);
    assert!(!out.status.success(), "coreos-installer {args:?} unexpectedly succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Decompresses fixture `name` (e.g. `embed-areas-2023-07.x86_64.iso`) into `dir`.
fn decompress(name: &str, dir: &Path) -> PathBuf {
    let src = fixture_dir().join(format!("{name}.xz"));
    assert!(src.is_file(), "missing fixture {}", src.display());
    let dst = dir.join(name);
    let out = File::create(&dst).unwrap();
    let status = Command::new("xz").arg("-dc").arg(&src).stdout(out).status().expect("running xz (is it installed?)");
    assert!(status.success(), "xz -dc {}: {status}", src.display());
    dst
}

fn base_file(path: &Path) -> Arc<BaseFile> {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let sha256 = sha256_file(&File::open(path).unwrap()).unwrap();
    Arc::new(BaseFile { path: path.to_path_buf(), file, len, sha256 })
}

/// Fixtures (names without `.xz`) that carry `COREOS/MINISO.DAT`, decompressed into `dir`.
fn miniso_fixtures(dir: &Path) -> Vec<(String, PathBuf, LiveIso)> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".xz").map(str::to_string))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = decompress(&name, dir);
        let Ok(iso) = IsoFs::open(File::open(&path).unwrap()) else { continue };
        if iso.get_path("COREOS/MINISO.DAT").is_err() {
            continue;
        }
        let live = LiveIso::from_iso(&iso).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(live.miniso.is_some(), "{name}");
        out.push((name, path, live));
    }
    out
}

fn minimal(path: &Path, live: &LiveIso) -> Result<MinimalIso, MinisoError> {
    miniso::minimal_iso(&base_file(path), live.miniso.unwrap())
}

/// Panics with the first differing offset rather than dumping megabytes.
fn assert_same_bytes(ours: &[u8], theirs: &[u8], what: &str) {
    if ours != theirs {
        let first = ours.iter().zip(theirs).position(|(a, b)| a != b);
        panic!("{what}: {} bytes vs coreos-installer's {}, first difference at {first:?}", ours.len(), theirs.len());
    }
}

#[test]
fn every_fixture_matches_coreos_installer() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = miniso_fixtures(tmp.path());
    let names: Vec<&str> = fixtures.iter().map(|f| f.0.as_str()).collect();
    assert!(fixtures.len() >= 5, "expected the 2021-12..2023-07 fixtures to carry miniso.dat, found {names:?}");
    for (name, path, live) in &fixtures {
        let full = path.to_str().unwrap();
        let mini = minimal(path, live).unwrap_or_else(|e| panic!("{name}: {e}"));

        // --rootfs-url, the form we serve
        let ours = mini.with_rootfs_url(ROOTFS_URL).unwrap().read_all().unwrap();
        let theirs_path = tmp.path().join(format!("{name}.min-url"));
        coreos_installer_ok(&[
            "iso",
            "extract",
            "minimal-iso",
            "--rootfs-url",
            ROOTFS_URL,
            full,
            theirs_path.to_str().unwrap(),
        ]);
        assert_same_bytes(&ours, &std::fs::read(&theirs_path).unwrap(), &format!("{name} with --rootfs-url"));

        // without --rootfs-url: karg areas = the default without coreos.liveiso
        let ours_plain = mini.with_kargs(&mini.kargs_without_liveiso).unwrap().read_all().unwrap();
        let theirs_plain = tmp.path().join(format!("{name}.min"));
        coreos_installer_ok(&["iso", "extract", "minimal-iso", full, theirs_plain.to_str().unwrap()]);
        assert_same_bytes(&ours_plain, &std::fs::read(&theirs_plain).unwrap(), &format!("{name} without URL"));

        // coreos-installer reads ours back as intended
        let ours_path = tmp.path().join(format!("{name}.ours"));
        std::fs::write(&ours_path, &ours).unwrap();
        let ours_arg = ours_path.to_str().unwrap();
        let kargs = String::from_utf8(coreos_installer_ok(&["iso", "kargs", "show", ours_arg])).unwrap();
        assert!(kargs.contains(&format!("coreos.live.rootfs_url={ROOTFS_URL}")), "{name}: {kargs}");
        assert!(!kargs.contains("coreos.liveiso"), "{name}: {kargs}");
        assert_eq!(kargs, format!("{} coreos.live.rootfs_url={ROOTFS_URL}\n", mini.kargs_without_liveiso), "{name}");
        let default = String::from_utf8(coreos_installer_ok(&["iso", "kargs", "show", "--default", ours_arg])).unwrap();
        assert_eq!(default.trim_end(), mini.kargs_without_liveiso, "{name}");
        let no_config = coreos_installer_err(&["iso", "ignition", "show", ours_arg]);
        assert!(no_config.contains("No embedded Ignition config."), "{name}: {no_config}");

        // our view of the minimal ISO's areas is coreos-installer's
        let ignition: serde_json::Value =
            serde_json::from_slice(&coreos_installer_ok(&["dev", "show", "iso", "--ignition", ours_arg])).unwrap();
        assert_eq!(ignition["offset"], mini.live.ignition_area.offset, "{name}");
        assert_eq!(ignition["length"], mini.live.ignition_area.len, "{name}");
        assert!(mini.live.ignition_area_pristine, "{name}");
        let shown: serde_json::Value =
            serde_json::from_slice(&coreos_installer_ok(&["dev", "show", "iso", "--kargs", ours_arg])).unwrap();
        let kargs_areas = mini.live.kargs.as_ref().unwrap();
        assert_eq!(shown["length"], kargs_areas.size, "{name}");
        assert_eq!(shown["default"], mini.kargs_without_liveiso.as_str(), "{name}");
        assert_eq!(kargs_areas.default, mini.kargs_without_liveiso, "{name}");
        let offsets: Vec<u64> =
            shown["kargs"].as_array().unwrap().iter().map(|k| k["offset"].as_u64().unwrap()).collect();
        assert_eq!(offsets, kargs_areas.areas.iter().map(|a| a.offset).collect::<Vec<_>>(), "{name}");
        assert_eq!(kargs_areas.current, live.kargs.as_ref().unwrap().default, "{name}: areas untouched in `plan`");
        assert_eq!(mini.live.len, ours.len() as u64, "{name}");
        assert_eq!(mini.live.volume_id, live.volume_id, "{name}");
        assert_eq!(mini.live.rootfs, None, "{name}");

        // the base image path gives the same result
        let image = BaseImage::load("test", "x86_64", path, &DigestCache::in_memory()).unwrap();
        let again = miniso::minimal_iso_of(&image.file, &image.live).unwrap();
        assert_eq!(again.with_rootfs_url(ROOTFS_URL).unwrap().read_all().unwrap(), ours, "{name}");

        let s = &mini.stats;
        eprintln!(
            "{name}: miniso.dat by coreos-installer {}: {} entries, xz {} B -> stream {} B, part kept in memory {} B, \
             shared {} B, minimal ISO {} B, plan {} segments",
            s.app_version,
            s.entries,
            s.xz_len,
            s.unpacked_len,
            s.part_len,
            s.shared_len,
            mini.plan.len(),
            mini.plan.segments().len()
        );
        assert_eq!(s.unpacked_len + s.shared_len, mini.plan.len(), "{name}");
    }
}

#[test]
fn images_without_miniso_dat_are_unsupported() {
    let tmp = tempfile::tempdir().unwrap();
    let path = decompress("embed-areas-2021-09.iso", tmp.path());
    let image = BaseImage::load("test", "x86_64", &path, &DigestCache::in_memory()).unwrap();
    let err = miniso::minimal_iso_of(&image.file, &image.live).unwrap_err();
    assert_eq!(err.to_string(), "This ISO image does not support extracting a minimal ISO.");
    let their = coreos_installer_err(&["iso", "extract", "minimal-iso", path.to_str().unwrap(), "-"]);
    assert!(their.contains("does not support extracting a minimal ISO"), "{their}");
}

/// Like coreos-installer's test: `sed 's/coreos.liveiso/codeos.liveiso/'` (first match on each line).
fn sed_liveiso(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let mut line = line.to_vec();
        if let Some(at) = line.windows(14).position(|w| w == b"coreos.liveiso") {
            line[at + 3] = b'd';
        }
        out.extend_from_slice(&line);
    }
    out
}

#[test]
fn corrupted_full_iso_fails_the_digest() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["embed-areas-2021-12.iso", "embed-areas-2023-07.x86_64.iso"] {
        let path = decompress(name, tmp.path());
        let corrupt = tmp.path().join(format!("{name}.corrupt"));
        let bytes = std::fs::read(&path).unwrap();
        let sedded = sed_liveiso(&bytes);
        assert_ne!(sedded, bytes);
        std::fs::write(&corrupt, &sedded).unwrap();
        let live = LiveIso::inspect(File::open(&corrupt).unwrap()).unwrap();
        let err = minimal(&corrupt, &live).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, MinisoError::WrongDigest { .. }), "{name}: {message}");
        assert!(message.starts_with("wrong final digest: expected "), "{name}: {message}");
        let their = coreos_installer_err(&["iso", "extract", "minimal-iso", corrupt.to_str().unwrap(), "-"]);
        assert!(their.contains("wrong final digest"), "{their}");
        // coreos-installer names the same two digests
        assert!(their.contains(message.trim_start_matches("wrong final digest: ")), "{their} vs {message}");

        // one flipped byte inside a shared file (the initrd) is caught too
        let full_live = LiveIso::inspect(File::open(&path).unwrap()).unwrap();
        let mini = minimal(&path, &full_live).unwrap();
        let initrd = full_live.initrd;
        assert!(
            mini.plan.segments().iter().any(|s| matches!(s, bootstream::plan::Segment::File { offset, len, .. }
                if *offset <= initrd.offset && initrd.end() <= offset + len)),
            "{name}: the initrd is shared"
        );
        let mut flipped = bytes.clone();
        flipped[initrd.offset as usize] ^= 0x80;
        let flipped_path = tmp.path().join(format!("{name}.flipped"));
        std::fs::write(&flipped_path, &flipped).unwrap();
        let live = LiveIso::inspect(File::open(&flipped_path).unwrap()).unwrap();
        assert!(matches!(minimal(&flipped_path, &live), Err(MinisoError::WrongDigest { .. })), "{name}");
    }
}

#[test]
fn customized_full_iso_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = decompress("embed-areas-2023-07.x86_64.iso", tmp.path());
    let full = path.to_str().unwrap();
    let config = tmp.path().join("config.ign");
    std::fs::write(&config, "{\"ignition\": {\"version\": \"3.3.0\"}}\n").unwrap();
    let expected = "Cannot operate on ISO with embedded customizations.\nReset it with `coreos-installer iso reset` and try again.";

    let with_ignition = tmp.path().join("ignition.iso");
    let out = with_ignition.to_str().unwrap();
    coreos_installer_ok(&["iso", "ignition", "embed", "-i", config.to_str().unwrap(), "-o", out, full]);
    let live = LiveIso::inspect(File::open(&with_ignition).unwrap()).unwrap();
    assert_eq!(minimal(&with_ignition, &live).unwrap_err().to_string(), expected);
    assert!(coreos_installer_err(&["iso", "extract", "minimal-iso", out, "-"]).contains(expected));

    let with_kargs = tmp.path().join("kargs.iso");
    let out = with_kargs.to_str().unwrap();
    coreos_installer_ok(&["iso", "kargs", "modify", "-a", "foo=bar", "-o", out, full]);
    let live = LiveIso::inspect(File::open(&with_kargs).unwrap()).unwrap();
    assert_eq!(minimal(&with_kargs, &live).unwrap_err().to_string(), expected);

    // after `iso reset`, extraction works again
    coreos_installer_ok(&["iso", "reset", out]);
    let live = LiveIso::inspect(File::open(&with_kargs).unwrap()).unwrap();
    minimal(&with_kargs, &live).unwrap();
}

#[test]
fn rootfs_urls_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let path = decompress("embed-areas-2023-07.x86_64.iso", tmp.path());
    let mini = minimal(&path, &LiveIso::inspect(File::open(&path).unwrap()).unwrap()).unwrap();
    for url in ["https://example.com/a b", "https://example.com/a\tb", " https://example.com/", "https://x/\n"] {
        assert_eq!(
            mini.with_rootfs_url(url).unwrap_err().to_string(),
            format!("forbidden whitespace found in '{url}'")
        );
    }
    assert_eq!(mini.with_rootfs_url("").unwrap_err().to_string(), "empty rootfs URL");
    // the area holds 1138 characters; the kargs without coreos.liveiso leave room for the rest
    let size = mini.live.kargs.as_ref().unwrap().size;
    let room = size - 1 - mini.kargs_without_liveiso.len() - " coreos.live.rootfs_url=".len();
    let fits = format!("https://example.com/{}", "a".repeat(room - "https://example.com/".len()));
    let plan = mini.with_rootfs_url(&fits).unwrap();
    assert_eq!(plan.len(), mini.plan.len());
    let too_long = format!("{fits}a");
    assert_eq!(
        mini.with_rootfs_url(&too_long).unwrap_err().to_string(),
        format!("kargs too large for area: {} vs {size}", size + 1)
    );
    // and coreos-installer agrees on the limit
    let ours = tmp.path().join("ours.iso");
    std::fs::write(&ours, plan.read_all().unwrap()).unwrap();
    let theirs = tmp.path().join("theirs.iso");
    coreos_installer_ok(&[
        "iso",
        "extract",
        "minimal-iso",
        "--rootfs-url",
        &fits,
        path.to_str().unwrap(),
        theirs.to_str().unwrap(),
    ]);
    assert_same_bytes(&std::fs::read(&ours).unwrap(), &std::fs::read(&theirs).unwrap(), "longest URL");
    let err = coreos_installer_err(&[
        "iso",
        "extract",
        "minimal-iso",
        "--rootfs-url",
        &too_long,
        path.to_str().unwrap(),
        "-",
    ]);
    assert!(err.contains("kargs too large for area"), "{err}");
}

/// The real `miniso.dat` of a fixture, its full ISO, and the parsed data.
fn real_data() -> (tempfile::TempDir, Arc<BaseFile>, Vec<u8>) {
    let tmp = tempfile::tempdir().unwrap();
    let path = decompress("embed-areas-2023-07.x86_64.iso", tmp.path());
    let iso = IsoFs::open(File::open(&path).unwrap()).unwrap();
    let record = iso.get_path("COREOS/MINISO.DAT").unwrap();
    let bytes = iso.read_file(&record, 1 << 20).unwrap();
    (tmp, base_file(&path), bytes)
}

#[test]
fn real_miniso_dat_truncated_anywhere_is_an_error() {
    let (_tmp, _, bytes) = real_data();
    let data = MinisoData::parse(&bytes).unwrap();
    assert_eq!(data.app_version, "0.17.0");
    assert_eq!(data.entries.len(), 12);
    assert_eq!((data.entries[0].minimal, data.entries[0].full, data.entries[0].length), (44, 44, 2048));
    assert_eq!(data.xzpacked.len(), 2560);
    let end = 2664; // the structure ends here; the rest of the 16 KiB file is padding
    MinisoData::parse(&bytes[..end]).unwrap();
    for n in 0..end {
        let err = MinisoData::parse(&bytes[..n]).unwrap_err().to_string();
        assert!(err.starts_with("failed to deserialize "), "{n}: {err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random edits of a real miniso.dat, parsed and (when they still parse) unpacked against
    /// the real full ISO: an error or a plan, never a panic.
    #[test]
    fn mutated_real_miniso_dat_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let (_tmp, full, mut bytes) = real_data();
        bytes.truncate(2664);
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Ok(data) = MinisoData::parse(&bytes)
            && let Ok((plan, _)) = miniso::unpack(&data, &full)
        {
            // a digest mismatch is the expected outcome of most surviving edits
            let _ = miniso::verify(&plan, &data.digest);
        }
    }
}
