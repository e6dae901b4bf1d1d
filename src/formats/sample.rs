//! The offline sample live ISO: a small generated image in the real RHCOS live ISO layout.
//!
//! `bootstream serve` needs a base image per (version, arch) before it can serve anything; on a
//! fresh machine with no network there is none, so it generates this one. It is not bootable
//! (the kernel is a placeholder), but every structure we and coreos-installer read is real:
//! the Ignition embed area, kargs.json with grub/isolinux karg areas followed by the
//! `COREOS_KARG_EMBED_AREA` marker, features.json, and PXE artifacts in their real formats
//! (a gzip newc initramfs carrying the live-initramfs stamp, a newc rootfs archive), so the
//! whole customize-and-serve path can be exercised end to end. Generation is deterministic.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::formats::iso9660::writer::IsoBuilder;
use crate::formats::kargs;

pub const SAMPLE_VERSION: &str = "4.20";
pub const SAMPLE_ARCH: &str = "x86_64";
/// Volume label; the live system finds its ISO by it (`coreos.liveiso=`).
pub const SAMPLE_VOLUME_ID: &str = "rhcos-420.sample.0";
/// The command line the sample boots with, as RHCOS live ISOs have it.
pub const SAMPLE_DEFAULT_KARGS: &str =
    "coreos.liveiso=rhcos-420.sample.0 ignition.firstboot ignition.platform.id=metal";
/// Karg area size, the value real x86_64 images use.
pub const SAMPLE_KARGS_AREA_SIZE: usize = 1139;
/// Ignition embed area size, the value real images use (256 KiB).
pub const SAMPLE_IGNITION_AREA_SIZE: usize = 256 * 1024;

const KARG_END: u8 = b'\n';
const KARG_PAD: u8 = b'#';
/// What follows every karg area in the boot loader configs, so the pad run reads as a comment.
const KARG_AREA_MARKER: &str = "# COREOS_KARG_EMBED_AREA\n";

const VMLINUZ_PLACEHOLDER: &str = "bootstream sample image: placeholder for the Linux kernel. \
This image is for trying bootstream offline; it is NOT bootable.\n";
const ROOTFS_PLACEHOLDER: &str = "bootstream sample image: placeholder for the root squashfs; \
this image is NOT bootable.\n";

/// Writes the sample ISO to `path`, atomically: through a temporary file in the same directory,
/// renamed into place, so a crash never leaves a truncated image where a base image is expected.
pub fn write_sample_iso(path: &Path) -> Result<()> {
    let bytes = sample_iso_bytes()?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file_name = path.file_name().with_context(|| format!("{} has no file name", path.display()))?.to_string_lossy();
    let stem = file_name.strip_suffix(".iso").unwrap_or(&file_name);
    let temp = dir.join(format!("{stem}.{}.iso.tmp", std::process::id()));
    let result = (|| -> Result<()> {
        let mut file = fs::File::create(&temp).with_context(|| format!("creating {}", temp.display()))?;
        file.write_all(&bytes).and_then(|()| file.sync_all()).with_context(|| format!("writing {}", temp.display()))?;
        fs::rename(&temp, path).with_context(|| format!("renaming {} to {}", temp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// The sample ISO's bytes.
pub fn sample_iso_bytes() -> Result<Vec<u8>> {
    sample_iso_bytes_with(rootfs_archive()?, live_initramfs()?, false)
}

/// A sample ISO of realistic size for benchmarks: the same layout, with a root squashfs placeholder
/// of `rootfs_bytes` bytes that do not compress (seeded, so every run makes the same image).
pub fn large_sample_iso_bytes(rootfs_bytes: usize) -> Result<Vec<u8>> {
    large_sample_iso_bytes_seeded(rootfs_bytes, 0x6f0c)
}

/// [`large_sample_iso_bytes`] with the rootfs drawn from `seed`: different seeds, different images
/// (distinct base images for benchmarks that load several).
///
/// The initramfs is made as large as RHCOS's relative to its rootfs (about a tenth: 100 MB beside
/// 1 GB) with an uncompressed archive of incompressible bytes after the real one, so that PXE initrd
/// and minimal ISO downloads weigh what they do in the field.
pub fn large_sample_iso_bytes_seeded(rootfs_bytes: usize, seed: u64) -> Result<Vec<u8>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut random = |len: usize| {
        let mut payload = vec![0u8; len];
        for chunk in payload.chunks_mut(8) {
            let word = rng.u64(..).to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        payload
    };
    let rootfs = newc_archive(&[Member::File("root.squashfs", &random(rootfs_bytes))])?;
    let mut initrd = live_initramfs()?;
    initrd.extend(newc_archive(&[Member::File("usr/lib/bootstream-sample-padding", &random(rootfs_bytes / 10))])?);
    sample_iso_bytes_with(rootfs, initrd, true)
}

/// `bootable`: with an El Torito catalog (BIOS and UEFI entries over placeholder boot images, laid
/// out as in RHCOS), so that a minimal ISO can be re-mastered from it.
fn sample_iso_bytes_with(rootfs: Vec<u8>, initrd: Vec<u8>, bootable: bool) -> Result<Vec<u8>> {
    let area = kargs::render_area(SAMPLE_DEFAULT_KARGS, SAMPLE_KARGS_AREA_SIZE, KARG_END, KARG_PAD)
        .context("rendering the default karg area")?;
    let (grub_cfg, grub_offset) = grub_cfg(&area);
    let (isolinux_cfg, isolinux_offset) = isolinux_cfg(&area);

    let mut iso = IsoBuilder::new(SAMPLE_VOLUME_ID)?;
    iso.add_file("COREOS/FEATURES.JSO", features_json())?;
    iso.add_file("COREOS/IGNINFO.JSO", pretty(&json!({"file": "images/ignition.img"})))?;
    iso.add_file(
        "COREOS/KARGS.JSO",
        kargs_json(&[("EFI/redhat/grub.cfg", grub_offset), ("isolinux/isolinux.cfg", isolinux_offset)]),
    )?;
    iso.add_file("EFI/REDHAT/GRUB.CFG", grub_cfg)?;
    iso.add_file("IMAGES/IGNITION.IMG", vec![0u8; SAMPLE_IGNITION_AREA_SIZE])?;
    iso.add_file("IMAGES/PXEBOOT/INITRD.IMG", initrd)?;
    iso.add_file("IMAGES/PXEBOOT/ROOTFS.IMG", rootfs)?;
    iso.add_file("IMAGES/PXEBOOT/VMLINUZ", VMLINUZ_PLACEHOLDER)?;
    iso.add_file("ISOLINUX/ISOLINUX.CFG", isolinux_cfg)?;
    if bootable {
        use crate::formats::iso9660::eltorito::{BootCatalog, BootEntry, Platform};
        // Placeholders: the layout of a bootable image, not a boot loader.
        iso.add_file("ISOLINUX/ISOLINUX.BIN", vec![0u8; 4096])?;
        iso.add_file("IMAGES/EFIBOOT.IMG", vec![0u8; 8192])?;
        let mut catalog = BootCatalog::new(Platform::X86, BootEntry::no_emulation("ISOLINUX/ISOLINUX.BIN".into(), 4));
        catalog.push(Platform::EFI, BootEntry::no_emulation("IMAGES/EFIBOOT.IMG".into(), 16));
        iso.set_boot(crate::formats::iso9660::writer::BootSetup {
            catalog_path: Some("ISOLINUX/BOOT.CAT".into()),
            catalog,
            boot_info_table: ["ISOLINUX/ISOLINUX.BIN".to_string()].into(),
        })?;
    }
    Ok(iso.to_bytes()?)
}

/// GRUB config with the karg area right after the kernel path; returns it and the area offset.
fn grub_cfg(area: &[u8]) -> (Vec<u8>, u64) {
    let before = [
        "# bootstream offline sample image: GRUB menu in the RHCOS live ISO layout.",
        "# The kernel is a placeholder; this image is not bootable.",
        "",
        "set default=\"0\"",
        "set timeout=5",
        "",
        "menuentry 'RHCOS (Live) bootstream sample' --class rhcos --class gnu-linux --class os {",
        "\tlinux /images/pxeboot/vmlinuz ",
    ];
    let after = ["\tinitrd /images/pxeboot/initrd.img /images/ignition.img", "}", ""];
    config_with_area(&before, area, &after)
}

/// isolinux config with the karg area after the initrd list; returns it and the area offset.
fn isolinux_cfg(area: &[u8]) -> (Vec<u8>, u64) {
    let before = [
        "# bootstream offline sample image: isolinux menu in the RHCOS live ISO layout.",
        "# The kernel is a placeholder; this image is not bootable.",
        "serial 0",
        "default linux",
        "timeout 50",
        "",
        "label linux",
        "  menu label RHCOS (Live) bootstream sample",
        "  menu default",
        "  kernel /images/pxeboot/vmlinuz",
        "  append initrd=/images/pxeboot/initrd.img,/images/ignition.img ",
    ];
    config_with_area(&before, area, &[""])
}

/// Lines `before` (the last one left open), the area, the marker, then lines `after`.
fn config_with_area(before: &[&str], area: &[u8], after: &[&str]) -> (Vec<u8>, u64) {
    let mut cfg = before.join("\n").into_bytes();
    let offset = cfg.len() as u64;
    cfg.extend_from_slice(area);
    cfg.extend_from_slice(KARG_AREA_MARKER.as_bytes());
    cfg.extend_from_slice(after.join("\n").as_bytes());
    (cfg, offset)
}

/// kargs.json as cosa writes it: keys in alphabetical order, 2-space indent, trailing newline.
/// Keys are inserted in sorted order so the output is the same whether or not serde_json
/// preserves insertion order.
fn kargs_json(files: &[(&str, u64)]) -> Vec<u8> {
    let files: Vec<Value> = files
        .iter()
        .map(|(path, offset)| {
            let mut file = Map::new();
            file.insert("end".into(), char::from(KARG_END).to_string().into());
            file.insert("offset".into(), (*offset).into());
            file.insert("pad".into(), char::from(KARG_PAD).to_string().into());
            file.insert("path".into(), (*path).into());
            Value::Object(file)
        })
        .collect();
    let mut info = Map::new();
    info.insert("default".into(), SAMPLE_DEFAULT_KARGS.into());
    info.insert("files".into(), files.into());
    info.insert("size".into(), SAMPLE_KARGS_AREA_SIZE.into());
    pretty(&Value::Object(info))
}

fn features_json() -> Vec<u8> {
    let mut features = Map::new();
    features.insert("installer-config".into(), true.into());
    features.insert("live-initrd-network".into(), true.into());
    pretty(&Value::Object(features))
}

fn pretty(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(value).expect("serializing a JSON value cannot fail");
    out.push(b'\n');
    out
}

/// One member of a newc archive.
enum Member<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
}

/// A newc archive of `members` (parents listed before children), with fixed metadata so the
/// bytes are reproducible: inode numbers counted from 1, uid/gid 0, mtime 0.
fn newc_archive(members: &[Member<'_>]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (index, member) in members.iter().enumerate() {
        let (name, mode, nlink, data): (&str, u32, u32, &[u8]) = match member {
            Member::Dir(name) => (name, 0o040755, 2, &[]),
            Member::File(name, data) => (name, 0o100644, 1, data),
        };
        let size = u32::try_from(data.len()).context("archive member too large")?;
        let mut writer =
            cpio::newc::Builder::new(name).ino(index as u32 + 1).mode(mode).nlink(nlink).write(&mut out, size);
        writer.write_all(data)?;
        writer.finish()?;
    }
    cpio::newc::trailer(&mut out)?;
    Ok(out)
}

/// The live initramfs: gzip'd newc with the stamp file coreos-installer looks for
/// (`etc/coreos-live-initramfs`) and the OS features, zero-padded to 4 bytes so an archive
/// appended to it (the PXE Ignition archive) starts aligned, as the kernel requires.
fn live_initramfs() -> Result<Vec<u8>> {
    let features = features_json();
    let archive = newc_archive(&[
        Member::Dir("etc"),
        Member::File("etc/coreos-live-initramfs", b""),
        Member::Dir("etc/coreos"),
        Member::File("etc/coreos/features.json", &features),
    ])?;
    let mut gz = flate2::GzBuilder::new().mtime(0).operating_system(255).write(Vec::new(), flate2::Compression::best());
    gz.write_all(&archive)?;
    let mut out = gz.finish()?;
    out.resize(out.len().next_multiple_of(4), 0);
    if out.len() > 64 * 1024 {
        bail!("sample initramfs unexpectedly large ({} bytes)", out.len());
    }
    Ok(out)
}

/// The rootfs image: an uncompressed newc archive holding `root.squashfs` (a placeholder).
fn rootfs_archive() -> Result<Vec<u8>> {
    newc_archive(&[Member::File("root.squashfs", ROOTFS_PLACEHOLDER.as_bytes())])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::iso9660::IsoFs;
    use crate::formats::liveiso::LiveIso;

    #[test]
    fn sample_is_deterministic_and_small() {
        let a = sample_iso_bytes().unwrap();
        let b = sample_iso_bytes().unwrap();
        assert_eq!(a, b);
        assert!(a.len() < 2 * 1024 * 1024, "{} bytes", a.len());
    }

    #[test]
    fn inspect_accepts_sample() {
        let iso = IsoFs::from_source(sample_iso_bytes().unwrap()).unwrap();
        assert_eq!(iso.volume_id(), SAMPLE_VOLUME_ID);
        let live = LiveIso::from_iso(&iso).unwrap();
        assert_eq!(live.ignition_area.len, SAMPLE_IGNITION_AREA_SIZE as u64);
        assert!(live.ignition_area_pristine);
        let kargs = live.kargs.unwrap();
        assert_eq!(kargs.default, SAMPLE_DEFAULT_KARGS);
        assert_eq!(kargs.current, SAMPLE_DEFAULT_KARGS);
        assert_eq!(kargs.size, SAMPLE_KARGS_AREA_SIZE);
        assert_eq!(kargs.areas.len(), 2);
        assert!(live.features.installer_config && live.features.live_initrd_network);
        assert_eq!(live.miniso, None);
        for area in &kargs.areas {
            let mut after = vec![0u8; KARG_AREA_MARKER.len()];
            iso.read_at(area.offset + kargs.size as u64, &mut after, "marker").unwrap();
            assert_eq!(after, KARG_AREA_MARKER.as_bytes());
        }
    }

    #[test]
    fn kargs_json_shape() {
        let json = String::from_utf8(kargs_json(&[("EFI/redhat/grub.cfg", 7)])).unwrap();
        assert!(json.starts_with("{\n  \"default\": \"coreos.liveiso=rhcos-420.sample.0 "), "{json}");
        assert!(json.contains("\"end\": \"\\n\",\n      \"offset\": 7,\n      \"pad\": \"#\",\n      \"path\": \"EFI/redhat/grub.cfg\""), "{json}");
        assert!(json.ends_with("\"size\": 1139\n}\n"), "{json}");
    }

    #[test]
    fn write_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/sample.iso");
        write_sample_iso(&path).unwrap();
        write_sample_iso(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), sample_iso_bytes().unwrap());
        let names: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["sample.iso"], "no temporary files left behind");
    }
}
