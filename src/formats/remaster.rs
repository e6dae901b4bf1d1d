//! Minimal live ISOs by re-mastering, for base images that carry no `/coreos/miniso.dat`
//! (older RHCOS and our boot fixture).
//!
//! A minimal ISO is the live ISO without `images/pxeboot/rootfs.img`; the live initrd downloads
//! the rootfs from `coreos.live.rootfs_url=<URL>` instead of finding it on the ISO labelled by
//! `coreos.liveiso=<label>`. When the base image has no miniso.dat (spec-images.md §4.3-4.5) we
//! master a new image ourselves:
//!
//! - every file and directory of the primary (ISO level-1) tree except `IMAGES/PXEBOOT/ROOTFS.IMG`,
//!   under the same level-1 names, same volume id, system id and volume dates; no Rock Ridge,
//!   no Joliet, and a zero system area (no isohybrid MBR, no legacy `coreKarg`/`coreiso+`
//!   headers), like assisted-image-service's re-mastered template (spec-images.md §5.5);
//! - file contents byte for byte, streamed from the full ISO (the output is ~130 MB for a
//!   1.1 GiB RHCOS ISO, and nothing is held in memory), except:
//!   - `COREOS/KARGS.JSO`, whose `default` loses its `coreos.liveiso=` token the way
//!     coreos-installer's minimal-ISO post-processing rewrites it (spec-images.md §4.5 item 6: pretty JSON,
//!     right-padded with spaces to the original length);
//!   - the boot catalog, rewritten for the new layout, and the BIOS boot image's boot info
//!     table, re-applied if the full ISO's boot image had one;
//! - the same El Torito boot setup: each catalog entry's block is mapped back to the file that
//!   starts there in the full ISO, and the new catalog points at that file's new extent with
//!   the same platform, emulation, load segment, system type, sector count and selection
//!   criteria.
//!
//! The karg and Ignition embed areas are inside files whose bytes are copied unchanged, so they
//! stay at the same offsets inside their files, where kargs.json / igninfo.json say they are.
//! The karg areas keep the full ISO's (default) command line, `coreos.liveiso=` included: the
//! server overlays them per request with the new default plus `coreos.live.rootfs_url=`. So, like
//! after `coreos-installer iso kargs modify`, `iso kargs show` differs from `show --default` until
//! the areas are overlaid (or `iso kargs reset`).
//!
//! Boot loaders find their files without Rock Ridge/Joliet: ISOLINUX and GRUB both strip the
//! `;1` version and a trailing `.` and compare primary-tree names case-insensitively, so
//! `/isolinux/ldlinux.c32` and `/images/pxeboot/vmlinuz` in their configs resolve to
//! `ISOLINUX/LDLINUX.C32` and `IMAGES/PXEBOOT/VMLINUZ`. GRUB (UEFI) finds the volume by label
//! (`search --label`, same volume id) or by its "UUID", which GRUB derives from the volume
//! modification date (kept); its configs must name only files whose long names equal their
//! level-1 names (true of CoreOS images: every name there is 8.3).
//!
//! The output is written to a temporary file next to `out`, verified (tree, boot catalog, boot
//! info table, karg and Ignition areas read back), then renamed into place. It is deterministic:
//! the same full ISO always yields the same bytes.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::formats::iso9660::eltorito::{self, BootEntry, ElTorito, Emulation, Platform};
use crate::formats::iso9660::writer::{BootSetup, IsoBuilder, Layout, SharedSource, WriteError};
use crate::formats::iso9660::{IsoError, IsoFs, Record, SECTOR};
use crate::formats::kargs::{self, KargOp};
use crate::formats::liveiso::{Area, LiveIso, LiveIsoError};

const ROOTFS_PATH: &str = "IMAGES/PXEBOOT/ROOTFS.IMG";
/// Legacy system-area headers (spec-images.md §2.2, spec-images.md §3.1): `coreKarg` (72 bytes) then `coreiso+`
/// (24 bytes), ending at the end of the system area.
const LEGACY_HEADERS_OFFSET: u64 = 32768 - 24 - 72;
const LEGACY_KARGS_MAGIC: &[u8; 8] = b"coreKarg";
const LEGACY_IGNITION_MAGIC: &[u8; 8] = b"coreiso+";
const LEGACY_MAX_AREAS: usize = 6;
const KARGS_JSON_PATH: &str = "COREOS/KARGS.JSO";
const LIVEISO_KARG: &str = "coreos.liveiso=";
/// kargs.json is a few hundred bytes; anything near this is not a CoreOS kargs.json.
const KARGS_JSON_LIMIT: u64 = 64 * 1024;
/// Offsets of the volume creation and modification dates in the primary volume descriptor.
const PVD_DATES: std::ops::Range<usize> = 813..847;
/// Buffer between the writer and the output file.
const WRITE_BUFFER: usize = 1 << 20;

/// Why a minimal ISO could not be re-mastered. Messages say what is wrong with the input (or
/// the output path), without the input path, which callers add.
#[derive(Debug, thiserror::Error)]
pub enum RemasterError {
    #[error("{}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Iso(#[from] IsoError),
    #[error(transparent)]
    LiveIso(#[from] LiveIsoError),
    #[error("the ISO has no IMAGES/PXEBOOT/ROOTFS.IMG: it is already a minimal ISO, or not a live ISO")]
    NoRootfs,
    #[error("the ISO has no El Torito boot record: a re-mastered image could not boot, so none is made")]
    NotBootable,
    #[error(
        "the ISO has no kernel-argument embed areas (an image from before 2021): a minimal ISO made from it \
         could never be given coreos.live.rootfs_url=, so it could not boot"
    )]
    NoKargAreas,
    #[error(
        "Cannot operate on ISO with embedded customizations ({0}). \
         Reset it with `coreos-installer iso reset` and try again."
    )]
    Customized(String),
    #[error("kargs.json")]
    KargsJson(#[source] KargsJsonError),
    /// A name or structure of the full ISO that the level-1 writer cannot reproduce.
    #[error("{path} cannot be reproduced in the re-mastered image")]
    Unrepresentable {
        path: String,
        #[source]
        source: WriteError,
    },
    #[error("El Torito: {0}")]
    Boot(String),
    #[error("inconsistent ISO: {0}")]
    Inconsistent(String),
    /// The default kernel arguments of the legacy header cannot lose their `coreos.liveiso=`.
    #[error("inconsistent ISO")]
    InconsistentKargs(#[source] LiveIsoKargError),
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: WriteError,
    },
    #[error("the re-mastered image failed verification")]
    Verify(#[source] VerifyError),
}

/// Why kargs.json cannot be rewritten for the minimal ISO.
#[derive(Debug, thiserror::Error)]
pub enum KargsJsonError {
    #[error("decoding")]
    Decode(#[source] serde_json::Error),
    #[error(transparent)]
    LiveIsoKarg(LiveIsoKargError),
    #[error("encoding")]
    Encode(#[source] serde_json::Error),
    #[error("the rewritten file ({len} bytes) does not fit in the original's {original_len} bytes")]
    TooLong { len: usize, original_len: usize },
}

/// Why `coreos.liveiso=` cannot be removed from a command line.
#[derive(Debug, thiserror::Error)]
pub enum LiveIsoKargError {
    #[error("the default kernel arguments have no {LIVEISO_KARG} karg: '{0}'")]
    Missing(String),
    #[error(transparent)]
    Kargs(#[from] kargs::KargsError),
}

/// How the re-mastered image differs from what was planned.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// It cannot be read back.
    #[error(transparent)]
    Iso(#[from] IsoError),
    #[error("kargs.json")]
    KargsJson(#[source] serde_json::Error),
    /// What differs, for a human.
    #[error("{0}")]
    Differs(String),
}

/// What [`remaster_minimal`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemasterReport {
    pub volume_id: String,
    pub system_id: String,
    /// Size of the full ISO in bytes.
    pub input_len: u64,
    /// Size of the minimal ISO written, in bytes.
    pub output_len: u64,
    /// Size of the rootfs left out.
    pub rootfs_len: u64,
    /// Files written (the boot catalog included) and directories (the root excluded).
    pub files: usize,
    pub directories: usize,
    /// Path of the boot catalog in the tree, `None` if it is in a block no directory lists.
    pub boot_catalog: Option<String>,
    pub boot_catalog_lba: u32,
    /// Default entry first, then section entries, in catalog order.
    pub boot_entries: Vec<RemasteredBootEntry>,
    /// The token removed from the default kernel arguments (`coreos.liveiso=<label>`).
    pub removed_karg: String,
    /// The minimal ISO's default kernel arguments: the full ISO's without `removed_karg`, as
    /// written into kargs.json. (An image whose karg areas are known only from the legacy
    /// `coreKarg` header keeps its old default in `/.cmdline`, which is not rewritten.)
    pub default_kargs: String,
    /// Where the Ignition embed area is in the minimal ISO (absolute bytes).
    pub ignition_area: Area,
    /// Absolute offsets of the karg areas in the minimal ISO, sorted.
    pub karg_areas: Vec<u64>,
    pub karg_area_size: usize,
    /// Whether translated legacy `coreKarg`/`coreiso+` headers were written into the system area
    /// (only for images whose karg areas have no kargs.json).
    pub legacy_headers: bool,
    /// Things worth knowing that did not prevent re-mastering (dropped hybrid MBR, ambiguous boot
    /// entries, ...), one sentence each.
    pub notes: Vec<String>,
    pub elapsed: Duration,
}

/// A boot entry of the minimal ISO and where its image was in the full ISO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemasteredBootEntry {
    pub platform: Platform,
    pub bootable: bool,
    pub emulation: Emulation,
    pub sector_count: u16,
    /// Level-1 path of the boot image, e.g. `ISOLINUX/ISOLINUX.BIN`.
    pub path: String,
    /// Block of the image in the full ISO and in the minimal ISO.
    pub full_lba: u32,
    pub lba: u32,
    /// Whether a boot info table was (re-)applied to the image.
    pub boot_info_table: bool,
}

/// Writes the minimal ISO for `full_iso` to `out` (through a temporary file in `out`'s directory,
/// renamed into place, replacing `out`). See the module documentation for what it holds.
pub fn remaster_minimal(full_iso: &Path, out: &Path) -> Result<RemasterReport, RemasterError> {
    let started = Instant::now();
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RemasterError::Io { path, source }
    };
    let file = File::open(full_iso).map_err(io_err(full_iso))?;
    refuse_same_file(&file, full_iso, out)?;
    let source: SharedSource = Arc::new(file.try_clone().map_err(io_err(full_iso))?);
    let iso = IsoFs::open(file)?;
    let plan = plan(&iso, source)?;

    let dir = match out.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let (temp_path, temp) = create_temp(dir, out)?;
    let result = (|| -> Result<RemasterReport, RemasterError> {
        let mut writer = BufWriter::with_capacity(WRITE_BUFFER, &temp);
        let write_err = |source| RemasterError::Write { path: temp_path.clone(), source };
        let layout = plan.builder.write_to(&mut writer).map_err(write_err)?;
        writer.flush().map_err(|e| write_err(WriteError::Io(e)))?;
        drop(writer);
        temp.sync_all().map_err(io_err(&temp_path))?;
        let report = verify(&plan, &layout, &temp_path)?;
        fs::rename(&temp_path, out).map_err(io_err(out))?;
        // Make the rename durable; failing to sync a directory is not worth failing for.
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(report)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp_path);
    }
    let mut report = result?;
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Everything decided before writing.
struct Plan {
    builder: IsoBuilder,
    volume_id: String,
    system_id: String,
    input_len: u64,
    rootfs_len: u64,
    /// Expected tree of the output: (path, is_dir, length), in walk order; the catalog's length
    /// is not compared (`None`).
    tree: Vec<(String, bool, Option<u32>)>,
    catalog_path: Option<String>,
    full_catalog: ElTorito,
    /// Per catalog entry (in `entries()` order): image path and whether it gets a boot info table.
    entry_images: Vec<(String, bool)>,
    new_default: String,
    removed_karg: String,
    /// Bytes of each karg area in the full ISO, located by file.
    karg_areas: Vec<(String, u64, Vec<u8>)>,
    karg_area_size: usize,
    /// The Ignition area: file, offset inside it, length.
    ignition: (String, u64, u64),
    /// Translated legacy headers written at `LEGACY_HEADERS_OFFSET`, if any.
    legacy_headers: Option<Vec<u8>>,
    notes: Vec<String>,
}

fn plan(iso: &IsoFs, source: SharedSource) -> Result<Plan, RemasterError> {
    let rootfs = match iso.get_path(ROOTFS_PATH) {
        Ok(record) if !record.is_dir => record,
        Ok(_) => return Err(RemasterError::Inconsistent(format!("{ROOTFS_PATH} is a directory"))),
        Err(e) if e.is_not_found() => return Err(RemasterError::NoRootfs),
        Err(e) => return Err(e.into()),
    };
    let live = LiveIso::from_iso(iso)?;
    if !live.ignition_area_pristine {
        return Err(RemasterError::Customized("an Ignition config or network settings are embedded".into()));
    }
    let kargs = live.kargs.as_ref().ok_or(RemasterError::NoKargAreas)?;
    if kargs.current != kargs.default {
        return Err(RemasterError::Customized(format!(
            "the kernel arguments are '{}', not the default '{}'",
            kargs.current, kargs.default
        )));
    }
    let mut notes = Vec::new();
    let (new_kargs_json, new_default, removed_karg) = match iso.get_path(KARGS_JSON_PATH) {
        Ok(record) => {
            let (json, default, token) = rewrite_kargs_json(&iso.read_file(&record, KARGS_JSON_LIMIT)?)?;
            (Some(json), default, token)
        }
        // Karg areas known only from the legacy header (RHCOS 4.7/4.8 era).
        Err(e) if e.is_not_found() => {
            let (default, token) = remove_liveiso(&kargs.default).map_err(RemasterError::InconsistentKargs)?;
            (None, default, token)
        }
        Err(e) => return Err(e.into()),
    };
    let el_torito = eltorito::read_el_torito(iso)?.ok_or(RemasterError::NotBootable)?;
    let mut system_area = vec![0u8; 32768];
    iso.read_at(0, &mut system_area, "system area")?;
    let legacy = &system_area[LEGACY_HEADERS_OFFSET as usize..];
    let (has_legacy_kargs, has_legacy_ignition) =
        (legacy.starts_with(LEGACY_KARGS_MAGIC), legacy[72..].starts_with(LEGACY_IGNITION_MAGIC));
    if system_area[..LEGACY_HEADERS_OFFSET as usize].iter().any(|b| *b != 0) {
        notes.push(
            "the full ISO's system area (isohybrid MBR/GPT) is not carried over: the minimal ISO boots as a CD \
             (El Torito), not from a disk it is copied to"
                .into(),
        );
    }
    let write_legacy = new_kargs_json.is_none();
    if write_legacy {
        notes.push(
            "the karg areas are described only by the legacy coreKarg header: translated coreKarg/coreiso+ headers \
             are written at the end of the system area; /.cmdline keeps the full ISO's default kernel arguments"
                .into(),
        );
    } else if has_legacy_kargs || has_legacy_ignition {
        notes.push(
            "the legacy coreKarg/coreiso+ system-area headers are not carried over (kargs.json and \
             IMAGES/IGNITION.IMG describe the same areas)"
                .into(),
        );
    }

    let walk = iso.walk()?;
    let files: Vec<&(String, Record)> = walk.iter().filter(|(_, r)| !r.is_dir).collect();
    let starting_at = |lba: u32| -> Vec<&(String, Record)> {
        files.iter().copied().filter(|(_, r)| r.lba == lba && r.length > 0).collect()
    };

    // The catalog: a file of the tree (ISOLINUX/BOOT.CAT) or a block no directory lists.
    let catalog_path = match starting_at(el_torito.catalog_lba)[..] {
        [] => None,
        [(path, _)] => Some(path.clone()),
        ref several => {
            return Err(RemasterError::Inconsistent(format!(
                "several files start at the boot catalog's block {}: {}",
                el_torito.catalog_lba,
                names(several)
            )));
        }
    };

    // Boot images: the file whose data starts at each entry's block.
    let mut by_lba: HashMap<u32, String> = HashMap::new();
    let mut boot_info_table = BTreeSet::new();
    let mut entry_images = Vec::new();
    for (number, (platform, entry)) in (1..).zip(el_torito.catalog.entries()) {
        let describe = || format!("boot entry {number} ({platform}, block {})", entry.image);
        let path = match starting_at(entry.image)[..] {
            [] => {
                let empty: Vec<&(String, Record)> =
                    files.iter().copied().filter(|(_, r)| r.lba == entry.image).collect();
                return Err(RemasterError::Boot(if empty.is_empty() {
                    format!("{}: no file starts there, so its image cannot be carried over", describe())
                } else {
                    format!(
                        "{}: only empty files start there ({}), so its image cannot be carried over",
                        describe(),
                        names(&empty)
                    )
                }));
            }
            [(path, _)] => {
                let empty: Vec<&(String, Record)> =
                    files.iter().copied().filter(|(_, r)| r.lba == entry.image && r.length == 0).collect();
                if !empty.is_empty() {
                    notes.push(format!(
                        "{}: the empty {} also start(s) there; the entry now points at {path}, whose bytes are \
                         what firmware loads from the full ISO",
                        describe(),
                        names(&empty)
                    ));
                }
                path.clone()
            }
            // Identical extents (deduplicated copies or hard links) hold the same bytes.
            [(path, first), ref rest @ ..] if rest.iter().all(|(_, r)| r == first) => path.clone(),
            ref several => {
                return Err(RemasterError::Boot(format!(
                    "{}: several different files start there: {}",
                    describe(),
                    names(several)
                )));
            }
        };
        if path == ROOTFS_PATH || Some(&path) == catalog_path.as_ref() {
            return Err(RemasterError::Boot(format!("{}: the image is {path}", describe())));
        }
        // ISOLINUX-style BIOS images carry a boot info table that names their own block.
        let mut info_table = false;
        if platform == Platform::X86 && entry.emulation == Emulation::NoEmulation {
            let record = iso.get_path(&path)?;
            if record.length >= 64 {
                let mut head = [0u8; 12];
                iso.read_at(record.byte_offset(), &mut head, &format!("file {path}"))?;
                info_table = eltorito::has_boot_info_table(&head);
            }
        }
        if info_table {
            boot_info_table.insert(path.clone());
        }
        by_lba.insert(entry.image, path.clone());
        entry_images.push((path, info_table));
    }
    let catalog = el_torito.catalog.clone().map_images(|lba| Ok::<String, RemasterError>(by_lba[lba].clone()))?;

    // Where the embed areas are, by file, so they can be found in the new layout.
    let locate = |area: Area, what: &str| -> Result<(String, u64), RemasterError> {
        let (path, record) = files
            .iter()
            .find(|(_, r)| r.length > 0 && r.byte_offset() <= area.offset && area.end() <= r.end_offset())
            .ok_or_else(|| {
                RemasterError::Inconsistent(format!(
                    "the {what} (bytes {}..{}) is not inside any file",
                    area.offset,
                    area.end()
                ))
            })?;
        if path == ROOTFS_PATH {
            return Err(RemasterError::Inconsistent(format!("the {what} is inside {ROOTFS_PATH}")));
        }
        Ok((path.clone(), area.offset - record.byte_offset()))
    };
    let mut karg_areas = Vec::new();
    for area in &kargs.areas {
        let span = Area { offset: area.offset, len: kargs.size as u64 };
        let (path, offset) = locate(span, "karg area")?;
        let mut bytes = vec![0u8; kargs.size];
        iso.read_at(area.offset, &mut bytes, "karg area")?;
        karg_areas.push((path, offset, bytes));
    }
    let (ignition_path, ignition_offset) = locate(live.ignition_area, "Ignition area")?;

    // The new tree.
    let mut builder = IsoBuilder::new(iso.volume_id())
        .and_then(|b| b.system_id(iso.system_id()))
        .map_err(|source| RemasterError::Unrepresentable { path: "the volume or system id".into(), source })?;
    let mut dates = [0u8; PVD_DATES.end - PVD_DATES.start];
    iso.read_at(16 * SECTOR + PVD_DATES.start as u64, &mut dates, "volume dates")?;
    let (created, modified) = (dates[..17].try_into().unwrap(), dates[17..].try_into().unwrap());
    // Images without valid dates keep the writer's fixed ones.
    builder = builder.clone().volume_dates(created, modified).unwrap_or(builder);
    let mut tree = Vec::new();
    let (mut file_count, mut dir_count) = (0, 0);
    for (path, record) in &walk {
        let unrepresentable = |source| RemasterError::Unrepresentable { path: path.clone(), source };
        if record.is_dir {
            builder.add_dir(path).map_err(unrepresentable)?;
            dir_count += 1;
            tree.push((path.clone(), true, None));
            continue;
        }
        if path == ROOTFS_PATH {
            continue;
        }
        file_count += 1;
        if Some(path) == catalog_path.as_ref() {
            tree.push((path.clone(), false, None));
            continue; // written by the builder from the new catalog
        }
        if let (KARGS_JSON_PATH, Some(json)) = (path.as_str(), &new_kargs_json) {
            builder.add_file(path, json.clone()).map_err(unrepresentable)?;
        } else if record.length == 0 {
            // Empty files' extents are meaningless (often the next file's block, or past the end).
            builder.add_file(path, Vec::new()).map_err(unrepresentable)?;
        } else {
            builder
                .add_file_range(path, source.clone(), record.byte_offset(), record.length.into())
                .map_err(unrepresentable)?;
        }
        tree.push((path.clone(), false, Some(record.length)));
    }
    builder
        .set_boot(BootSetup { catalog_path: catalog_path.clone(), catalog, boot_info_table })
        .map_err(|source| RemasterError::Unrepresentable { path: "the El Torito boot setup".into(), source })?;
    // Surface layout problems (names, depth, boot setup) as such, before creating any file.
    let layout = builder
        .layout()
        .map_err(|source| RemasterError::Unrepresentable { path: "the image layout".into(), source })?;
    debug_assert_eq!(file_count + dir_count, tree.len());

    let legacy_headers = if write_legacy {
        let new_offset = |offset: u64, len: u64, what: &str| -> Result<u64, RemasterError> {
            let (path, inside) = locate(Area { offset, len }, what)?;
            Ok(layout.get(&path).expect("every copied file is in the layout").byte_offset() + inside)
        };
        let field = |i: usize| u64::from_le_bytes(legacy[8 * i..8 * i + 8].try_into().unwrap());
        let size = field(1);
        let mut header = legacy[..96].to_vec();
        header[16..24].copy_from_slice(&new_offset(field(2), size, "legacy default kargs copy")?.to_le_bytes());
        for i in (3..3 + LEGACY_MAX_AREAS).take_while(|i| field(*i) != 0) {
            header[8 * i..8 * i + 8].copy_from_slice(&new_offset(field(i), size, "karg area")?.to_le_bytes());
        }
        if has_legacy_ignition {
            let (offset, len) = (field(10), field(11));
            header[80..88].copy_from_slice(&new_offset(offset, len, "legacy Ignition area")?.to_le_bytes());
        }
        let mut area = vec![0u8; LEGACY_HEADERS_OFFSET as usize];
        area.extend_from_slice(&header);
        builder
            .system_area(area.clone())
            .map_err(|source| RemasterError::Unrepresentable { path: "the legacy headers".into(), source })?;
        Some(header)
    } else {
        None
    };

    Ok(Plan {
        builder,
        volume_id: iso.volume_id().to_string(),
        system_id: iso.system_id().to_string(),
        input_len: iso.image_len(),
        rootfs_len: rootfs.length.into(),
        tree,
        catalog_path,
        full_catalog: el_torito,
        entry_images,
        new_default,
        removed_karg,
        karg_areas,
        karg_area_size: kargs.size,
        ignition: (ignition_path, ignition_offset, live.ignition_area.len),
        legacy_headers,
        notes,
    })
}

fn names(records: &[&(String, Record)]) -> String {
    records.iter().map(|(path, r)| format!("{path} ({} bytes)", r.length)).collect::<Vec<_>>().join(", ")
}

/// `/coreos/kargs.json` as coreos-installer reads and writes it (unknown keys are dropped).
#[derive(Deserialize, Serialize)]
struct KargsJson {
    default: String,
    files: Vec<KargsJsonFile>,
    size: usize,
}

#[derive(Deserialize, Serialize)]
struct KargsJsonFile {
    path: String,
    offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pad: Option<char>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    end: Option<char>,
}

/// kargs.json with `coreos.liveiso=` removed from `default`, as coreos-installer rewrites it for
/// a minimal ISO: pretty-printed, right-padded with spaces to the original length. Returns the
/// new bytes, the new default and the removed token.
fn rewrite_kargs_json(original: &[u8]) -> Result<(Vec<u8>, String, String), RemasterError> {
    let mut info: KargsJson =
        serde_json::from_slice(original).map_err(|e| RemasterError::KargsJson(KargsJsonError::Decode(e)))?;
    let (default, token) =
        remove_liveiso(&info.default).map_err(|e| RemasterError::KargsJson(KargsJsonError::LiveIsoKarg(e)))?;
    info.default = default;
    let json = serde_json::to_string_pretty(&info).map_err(|e| RemasterError::KargsJson(KargsJsonError::Encode(e)))?;
    if json.len() > original.len() {
        return Err(RemasterError::KargsJson(KargsJsonError::TooLong {
            len: json.len(),
            original_len: original.len(),
        }));
    }
    let mut bytes = json.into_bytes();
    bytes.resize(original.len(), b' ');
    Ok((bytes, info.default, token))
}

/// `kargs` without its `coreos.liveiso=` token (coreos-installer's karg deletion), and the token.
fn remove_liveiso(kargs: &str) -> Result<(String, String), LiveIsoKargError> {
    let token = kargs
        .split_ascii_whitespace()
        .find(|karg| karg.starts_with(LIVEISO_KARG))
        .ok_or_else(|| LiveIsoKargError::Missing(kargs.to_string()))?
        .to_string();
    let without = kargs::apply_ops(kargs, &[KargOp::Delete(token.clone())])?;
    Ok((without, token))
}

/// Reads the output back and checks it against the plan; builds the report.
fn verify(plan: &Plan, layout: &Layout, path: &Path) -> Result<RemasterReport, RemasterError> {
    let fail = |what: String| RemasterError::Verify(VerifyError::Differs(what));
    let unreadable = |e: IsoError| RemasterError::Verify(VerifyError::Iso(e));
    let file = File::open(path).map_err(|source| RemasterError::Io { path: path.to_path_buf(), source })?;
    let iso = IsoFs::open(file).map_err(unreadable)?;
    if iso.volume_id() != plan.volume_id || iso.system_id() != plan.system_id {
        return Err(fail(format!("volume/system id {:?}/{:?}", iso.volume_id(), iso.system_id())));
    }

    let walk = iso.walk().map_err(unreadable)?;
    let found: Vec<(String, bool, Option<u32>)> = walk
        .iter()
        .map(|(p, r)| (p.clone(), r.is_dir, (!r.is_dir && Some(p) != plan.catalog_path.as_ref()).then_some(r.length)))
        .collect();
    if found != plan.tree {
        return Err(fail("the directory tree differs from the full ISO's (minus the rootfs)".into()));
    }
    let record = |path: &str| layout.get(path).ok_or_else(|| fail(format!("{path} is not in the layout")));

    let el_torito =
        eltorito::read_el_torito(&iso).map_err(unreadable)?.ok_or_else(|| fail("no El Torito boot record".into()))?;
    if Some(el_torito.catalog_lba) != layout.boot_catalog_lba {
        return Err(fail(format!("the boot record points at block {}", el_torito.catalog_lba)));
    }
    let full_entries: Vec<_> = plan.full_catalog.catalog.entries().collect();
    let new_entries: Vec<_> = el_torito.catalog.entries().collect();
    if full_entries.len() != new_entries.len() || new_entries.len() != plan.entry_images.len() {
        return Err(fail(format!("{} boot entries, expected {}", new_entries.len(), full_entries.len())));
    }
    let mut boot_entries = Vec::new();
    for (((full_platform, full), (platform, entry)), (image, info_table)) in
        full_entries.iter().zip(&new_entries).zip(&plan.entry_images)
    {
        let image_record = record(image)?;
        let same_fields = BootEntry { image: 0, ..(*full).clone() } == BootEntry { image: 0, ..(*entry).clone() };
        if full_platform != platform || !same_fields || entry.image != image_record.lba {
            return Err(fail(format!(
                "the boot entry for {image} is {entry:?}, expected {full:?} at block {}",
                image_record.lba
            )));
        }
        if *info_table {
            let mut table = [0u8; 12];
            iso.read_at(image_record.byte_offset() + 8, &mut table, image).map_err(unreadable)?;
            let expected = [eltorito::PVD_LBA, image_record.lba, image_record.length];
            if table.chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).ne(expected) {
                return Err(fail(format!("the boot info table of {image} is wrong")));
            }
        }
        boot_entries.push(RemasteredBootEntry {
            platform: *platform,
            bootable: entry.bootable,
            emulation: entry.emulation,
            sector_count: entry.sector_count,
            path: image.clone(),
            full_lba: full.image,
            lba: entry.image,
            boot_info_table: *info_table,
        });
    }

    let mut karg_areas = Vec::new();
    for (file, offset, expected) in &plan.karg_areas {
        let at = record(file)?.byte_offset() + offset;
        let mut bytes = vec![0u8; expected.len()];
        iso.read_at(at, &mut bytes, "karg area").map_err(unreadable)?;
        if &bytes != expected {
            return Err(fail(format!("the karg area in {file} at offset {offset} differs from the full ISO's")));
        }
        karg_areas.push(at);
    }
    karg_areas.sort_unstable();
    let (file, offset, len) = &plan.ignition;
    let ignition_area = Area { offset: record(file)?.byte_offset() + offset, len: *len };
    let mut zeros = vec![0u8; *len as usize];
    iso.read_at(ignition_area.offset, &mut zeros, "Ignition area").map_err(unreadable)?;
    if zeros.iter().any(|b| *b != 0) {
        return Err(fail("the Ignition area is not empty".into()));
    }
    let kargs_json = match &plan.legacy_headers {
        None => {
            iso.read_file(&iso.get_path(KARGS_JSON_PATH).map_err(unreadable)?, KARGS_JSON_LIMIT).map_err(unreadable)?
        }
        Some(_) => Vec::new(),
    };
    match &plan.legacy_headers {
        None => {
            let info: KargsJson =
                serde_json::from_slice(&kargs_json).map_err(|e| RemasterError::Verify(VerifyError::KargsJson(e)))?;
            if info.default != plan.new_default {
                return Err(fail(format!("kargs.json default is '{}'", info.default)));
            }
        }
        Some(expected) => {
            let mut header = vec![0u8; expected.len()];
            iso.read_at(LEGACY_HEADERS_OFFSET, &mut header, "legacy headers").map_err(unreadable)?;
            let areas: Vec<u64> = (3..3 + LEGACY_MAX_AREAS)
                .map(|i| u64::from_le_bytes(header[8 * i..8 * i + 8].try_into().unwrap()))
                .take_while(|offset| *offset != 0)
                .collect();
            let mut sorted = areas.clone();
            sorted.sort_unstable();
            if &header != expected || sorted != karg_areas {
                return Err(fail("the legacy coreKarg header does not point at the karg areas".into()));
            }
        }
    }

    let (files, directories) =
        plan.tree.iter().fold((0, 0), |(f, d), (_, is_dir, _)| if *is_dir { (f, d + 1) } else { (f + 1, d) });
    Ok(RemasterReport {
        volume_id: plan.volume_id.clone(),
        system_id: plan.system_id.clone(),
        input_len: plan.input_len,
        output_len: layout.image_len(),
        rootfs_len: plan.rootfs_len,
        files,
        directories,
        boot_catalog: plan.catalog_path.clone(),
        boot_catalog_lba: el_torito.catalog_lba,
        boot_entries,
        removed_karg: plan.removed_karg.clone(),
        default_kargs: plan.new_default.clone(),
        ignition_area,
        karg_areas,
        karg_area_size: plan.karg_area_size,
        legacy_headers: plan.legacy_headers.is_some(),
        notes: plan.notes.clone(),
        elapsed: Duration::ZERO,
    })
}

/// Refuses to write over the input itself (the rename would replace it before anyone noticed).
fn refuse_same_file(input: &File, input_path: &Path, out: &Path) -> Result<(), RemasterError> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (input.metadata(), fs::metadata(out)) else {
        return Ok(());
    };
    if a.dev() == b.dev() && a.ino() == b.ino() {
        return Err(RemasterError::Io {
            path: out.to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("is the full ISO {} itself; choose another output path", input_path.display()),
            ),
        });
    }
    Ok(())
}

/// A new, uniquely named temporary file next to `out`.
fn create_temp(dir: &Path, out: &Path) -> Result<(PathBuf, File), RemasterError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "minimal.iso".into());
    let path = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|source| RemasterError::Io { path: path.clone(), source })?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::chain;

    #[test]
    fn kargs_json_rewrite_matches_coreos_installer() {
        // 2023-07 fixture shape: pad/end present; keys in the original are sorted differently.
        let original = br##"{
  "default": "mitigations=auto,nosmt coreos.liveiso=fedora-coreos-38.20230718.dev.0 ignition.firstboot ignition.platform.id=metal",
  "files": [
    {
      "end": "\n",
      "offset": 970,
      "pad": "#",
      "path": "EFI/fedora/grub.cfg"
    },
    {
      "path": "isolinux/isolinux.cfg",
      "offset": 1869
    }
  ],
  "size": 1139,
  "unknown": true
}
"##;
        let (bytes, default, token) = rewrite_kargs_json(original).unwrap();
        assert_eq!(token, "coreos.liveiso=fedora-coreos-38.20230718.dev.0");
        assert_eq!(default, "mitigations=auto,nosmt ignition.firstboot ignition.platform.id=metal");
        assert_eq!(bytes.len(), original.len());
        let text = String::from_utf8(bytes).unwrap();
        let expected = "{\n  \"default\": \"mitigations=auto,nosmt ignition.firstboot ignition.platform.id=metal\",\n  \
                        \"files\": [\n    {\n      \"path\": \"EFI/fedora/grub.cfg\",\n      \"offset\": 970,\n      \
                        \"pad\": \"#\",\n      \"end\": \"\\n\"\n    },\n    {\n      \"path\": \"isolinux/isolinux.cfg\",\n      \
                        \"offset\": 1869\n    }\n  ],\n  \"size\": 1139\n}";
        assert_eq!(text.trim_end_matches(' '), expected);
    }

    #[test]
    fn kargs_json_without_liveiso_is_refused() {
        let err =
            chain(&rewrite_kargs_json(br#"{"default": "a b", "files": [], "size": 10}"#).unwrap_err()).to_string();
        assert!(err.contains("no coreos.liveiso= karg"), "{err}");
        let err = chain(&rewrite_kargs_json(b"{").unwrap_err()).to_string();
        assert!(err.starts_with("kargs.json: decoding"), "{err}");
        // Pretty-printing a compact file can make it longer than the original.
        let err =
            rewrite_kargs_json(br#"{"default":"coreos.liveiso=x a","files":[{"path":"p","offset":1}],"size":99}"#)
                .unwrap_err();
        let err = chain(&err).to_string();
        assert!(err.contains("does not fit"), "{err}");
    }
}
