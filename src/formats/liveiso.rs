//! What a CoreOS/RHCOS live ISO offers us: where its Ignition embed area and kernel-argument
//! areas are, where the PXE artifacts are, and which OS features it declares.
//!
//! Everything is located the way coreos-installer locates it (spec-images.md §2.4, spec-images.md §3.1-3.4,
//! spec-images.md §4), so that the bytes we overlay when serving a customized image are the bytes
//! `coreos-installer iso ignition|kargs ...` would rewrite, and an image we serve reads back
//! correctly with coreos-installer. Inspection happens once per base image at load time;
//! the result is a handful of absolute byte ranges that serving then uses without re-parsing.

use std::fs::File;

use serde::Deserialize;

use crate::formats::iso9660::{IsoError, IsoFs, ReadAt, Record};
use crate::formats::kargs;

/// Upper bound for the JSON files under `/coreos/` (real ones are well under 1 KiB).
const METADATA_LIMIT: u64 = 64 * 1024;
/// coreos-installer's sanity limit on the size of a karg area.
const KARG_AREA_MAX_SIZE: usize = 2048;

const IGNINFO_PATH: &str = "COREOS/IGNINFO.JSO";
const DEFAULT_IGNITION_PATH: &str = "IMAGES/IGNITION.IMG";
const KARGS_JSON_PATH: &str = "COREOS/KARGS.JSO";
const FEATURES_PATH: &str = "COREOS/FEATURES.JSO";
const MINISO_PATH: &str = "COREOS/MINISO.DAT";
const KERNEL_PATH: &str = "IMAGES/PXEBOOT/VMLINUZ";
/// s390x images name the kernel `kernel.img`.
const KERNEL_FALLBACK_PATH: &str = "IMAGES/PXEBOOT/KERNEL.IMG";
const INITRD_PATH: &str = "IMAGES/PXEBOOT/INITRD.IMG";
pub const ROOTFS_PATH: &str = "IMAGES/PXEBOOT/ROOTFS.IMG";
const INITRD_ADDRSIZE_PATH: &str = "IMAGES/INITRD.ADD";

/// Legacy `coreKarg` header: 72 bytes ending where the legacy `coreiso+` header (the last 24
/// bytes of the system area) begins.
const LEGACY_KARGS_HEADER_OFFSET: u64 = 32768 - 24 - 72;
const LEGACY_KARGS_MAGIC: &[u8; 8] = b"coreKarg";
const LEGACY_KARGS_MAX_AREAS: usize = 6;

/// A byte range of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    /// Absolute byte offset in the image.
    pub offset: u64,
    pub len: u64,
}

impl Area {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// The kernel-argument embed areas of an image (all the same size, all holding the same string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KargsAreas {
    /// The command line the image was built with.
    pub default: String,
    /// Size in bytes of every area.
    pub size: usize,
    /// The command line the areas hold now (equal to `default` in a pristine image).
    pub current: String,
    /// Sorted by offset.
    pub areas: Vec<KargArea>,
}

/// One kernel-argument area: `size` bytes at `offset` holding `<kargs><end><pad...>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KargArea {
    /// Absolute byte offset in the image.
    pub offset: u64,
    pub pad: u8,
    pub end: u8,
}

/// OS feature flags from `/coreos/features.json` (all false when the file is absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Features {
    /// The installer reads `/etc/coreos/installer.d/*.yaml`.
    pub installer_config: bool,
    pub installer_config_directives: InstallerConfigDirectives,
    /// The live initrd applies NetworkManager keyfiles from `/etc/coreos-firstboot-network`.
    pub live_initrd_network: bool,
}

/// The installer-config directives an image supports; only the one we act on is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct InstallerConfigDirectives {
    pub console: bool,
}

/// What a CoreOS live ISO offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveIso {
    pub volume_id: String,
    /// Length of the image file in bytes.
    pub len: u64,
    /// Where an Ignition config (as an initrd archive) can be written.
    pub ignition_area: Area,
    /// `None` when the image has no karg areas at all (old images): not an error.
    pub kargs: Option<KargsAreas>,
    pub kernel: Area,
    pub initrd: Area,
    /// `IMAGES/PXEBOOT/ROOTFS.IMG`; a base image must have it, a minimal ISO has none.
    pub rootfs: Option<Area>,
    /// s390x: the 16-byte initrd address/size file.
    pub initrd_addrsize: Option<Area>,
    /// Packed minimal ISO (`miniso.dat`).
    pub miniso: Option<Area>,
    pub features: Features,
    /// True if the Ignition area is all zeros (nothing embedded yet).
    pub ignition_area_pristine: bool,
}

/// Why an image is not a usable CoreOS live ISO. Messages name what is wrong, without the image
/// path (callers add it).
#[derive(Debug, thiserror::Error)]
pub enum LiveIsoError {
    /// Not an ISO 9660 image, or a corrupt one.
    #[error(transparent)]
    Iso(#[from] IsoError),
    /// A file or an area extends past the end of the image: a corrupt one.
    #[error(transparent)]
    Outside(#[from] OutsideImage),
    /// No usable Ignition embed area. coreos-installer's top-level wording, with the reason inside
    /// its parentheses (so the reason is quoted here as well as being the source).
    #[error("Unrecognized CoreOS ISO image. (no ignition embed area: {})", crate::errors::chain(.0))]
    Unrecognized(#[source] IgnitionAreaError),
    /// `/coreos/kargs.json` exists but is unusable.
    #[error("kargs.json")]
    KargsJson(#[source] KargsJsonError),
    /// The legacy `coreKarg` system-area header is present but unusable.
    #[error("coreKarg header")]
    LegacyKargs(#[source] LegacyKargsError),
    #[error("No karg embed areas found; corrupted CoreOS ISO image.")]
    NoKargAreas,
    #[error("kargs don't match at all offsets! (expected '{expected}', but offset {offset} has: '{found}')")]
    KargsMismatch { expected: String, offset: u64, found: String },
    #[error("karg area at offset {offset}")]
    KargArea {
        offset: u64,
        #[source]
        source: kargs::KargsError,
    },
    #[error("missing {0}")]
    Missing(&'static str),
    #[error("{path} is a directory, not a file")]
    NotAFile { path: String },
    #[error("features.json")]
    Features(#[source] FeaturesError),
}

/// Why an image has no usable Ignition embed area.
#[derive(Debug, thiserror::Error)]
pub enum IgnitionAreaError {
    /// igninfo.json or the Ignition image cannot be found or read from the ISO 9660 tree.
    #[error(transparent)]
    Iso(IsoError),
    #[error("decoding igninfo.json")]
    IgnInfo(#[source] serde_json::Error),
    #[error("{path} is a directory")]
    Directory { path: String },
    #[error("igninfo.json offset {offset} is past the end of {path} ({len} bytes)")]
    OffsetPastFile { offset: u64, path: String, len: u32 },
    #[error("igninfo.json offset {offset} is past the end of the image")]
    OffsetPastImage { offset: u64 },
    #[error(transparent)]
    Outside(OutsideImage),
}

/// Why `/coreos/kargs.json` is unusable.
#[derive(Debug, thiserror::Error)]
pub enum KargsJsonError {
    /// It cannot be read from the ISO 9660 tree.
    #[error(transparent)]
    Iso(IsoError),
    #[error("decoding")]
    Decode(#[source] serde_json::Error),
    #[error("karg embed area size larger than {KARG_AREA_MAX_SIZE} (found {0})")]
    AreaTooLarge(usize),
    #[error("default kargs size {default} larger than embed areas ({size})")]
    DefaultTooLarge { default: usize, size: usize },
    /// A file it names is not in the tree.
    #[error("looking up '{path}'")]
    Lookup {
        path: String,
        #[source]
        source: IsoError,
    },
    #[error("{path} is a directory")]
    Directory { path: String },
    /// The pad or end character of a file's area.
    #[error("{what} character {character:?} for {path} is not ASCII")]
    NotAscii { what: &'static str, character: char, path: String },
    #[error("offset {offset} in {path} is past the end of the image")]
    OffsetPastImage { offset: u64, path: String },
}

/// Why the legacy `coreKarg` header is unusable.
#[derive(Debug, thiserror::Error)]
pub enum LegacyKargsError {
    #[error("karg embed area length larger than {KARG_AREA_MAX_SIZE} (found {0})")]
    AreaTooLarge(u64),
    /// The area holding the default kernel arguments cannot be read.
    #[error("default kargs")]
    Default(#[source] Box<LiveIsoError>),
}

/// Why `/coreos/features.json` is unusable.
#[derive(Debug, thiserror::Error)]
pub enum FeaturesError {
    /// It cannot be read from the ISO 9660 tree.
    #[error(transparent)]
    Iso(IsoError),
    #[error("decoding")]
    Decode(#[source] serde_json::Error),
}

/// A file or an area of an image that extends past its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} (bytes {offset}..{end}) extends past the end of the image ({image_len} bytes)")]
pub struct OutsideImage {
    pub what: String,
    pub offset: u64,
    pub end: u64,
    pub image_len: u64,
}

impl LiveIso {
    /// Inspects an image file.
    pub fn inspect(file: File) -> Result<LiveIso, LiveIsoError> {
        LiveIso::from_iso(&IsoFs::open(file)?)
    }

    /// Inspects an opened image.
    pub fn from_iso<S: ReadAt>(iso: &IsoFs<S>) -> Result<LiveIso, LiveIsoError> {
        let ignition_area = ignition_area(iso)?;
        let ignition_area_pristine = is_all_zero(iso, ignition_area)?;
        let kargs = kargs_areas(iso)?;
        let kernel = match optional_file(iso, KERNEL_PATH)? {
            Some(area) => area,
            None => optional_file(iso, KERNEL_FALLBACK_PATH)?.ok_or(LiveIsoError::Missing(KERNEL_PATH))?,
        };
        let initrd = optional_file(iso, INITRD_PATH)?.ok_or(LiveIsoError::Missing(INITRD_PATH))?;
        let rootfs = optional_file(iso, ROOTFS_PATH)?;
        Ok(LiveIso {
            volume_id: iso.volume_id().to_string(),
            len: iso.image_len(),
            ignition_area,
            kargs,
            kernel,
            initrd,
            rootfs,
            initrd_addrsize: optional_file(iso, INITRD_ADDRSIZE_PATH)?,
            miniso: optional_file(iso, MINISO_PATH)?,
            features: features(iso)?,
            ignition_area_pristine,
        })
    }
}

/// `/coreos/igninfo.json`.
#[derive(Deserialize)]
struct IgnInfo {
    file: String,
    offset: Option<u64>,
    length: Option<u64>,
}

/// Finds the Ignition area (spec-images.md §2.4): igninfo.json if present, else all of `IMAGES/IGNITION.IMG`.
/// Any failure other than an I/O error means "not a CoreOS live ISO".
fn ignition_area<S: ReadAt>(iso: &IsoFs<S>) -> Result<Area, LiveIsoError> {
    let unrecognized = |e: IsoError| match e {
        IsoError::Io { .. } => LiveIsoError::Iso(e),
        e => LiveIsoError::Unrecognized(IgnitionAreaError::Iso(e)),
    };
    let info = match iso.get_path(IGNINFO_PATH) {
        Ok(record) => {
            let json = read_metadata(iso, &record).map_err(unrecognized)?;
            serde_json::from_slice(&json).map_err(|e| LiveIsoError::Unrecognized(IgnitionAreaError::IgnInfo(e)))?
        }
        Err(e) if e.is_not_found() => IgnInfo { file: DEFAULT_IGNITION_PATH.to_string(), offset: None, length: None },
        Err(e) => return Err(unrecognized(e)),
    };
    let path = info.file.to_uppercase();
    let record = iso.get_path(&path).map_err(unrecognized)?;
    if record.is_dir {
        return Err(LiveIsoError::Unrecognized(IgnitionAreaError::Directory { path }));
    }
    let offset_in_file = info.offset.unwrap_or(0);
    let len = match info.length {
        Some(len) => len,
        None => u64::from(record.length).checked_sub(offset_in_file).ok_or_else(|| {
            LiveIsoError::Unrecognized(IgnitionAreaError::OffsetPastFile {
                offset: offset_in_file,
                path: path.clone(),
                len: record.length,
            })
        })?,
    };
    // The offset comes from the JSON (any u64): added unchecked, a huge one would wrap around.
    let offset = record
        .byte_offset()
        .checked_add(offset_in_file)
        .ok_or(LiveIsoError::Unrecognized(IgnitionAreaError::OffsetPastImage { offset: offset_in_file }))?;
    let area = Area { offset, len };
    check_inside(iso, area, &format!("the Ignition area in {path}"))
        .map_err(|e| LiveIsoError::Unrecognized(IgnitionAreaError::Outside(e)))?;
    Ok(area)
}

fn is_all_zero<S: ReadAt>(iso: &IsoFs<S>, area: Area) -> Result<bool, LiveIsoError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = area.offset;
    while offset < area.end() {
        let n = (area.end() - offset).min(buf.len() as u64) as usize;
        iso.read_at(offset, &mut buf[..n], "Ignition area")?;
        if buf[..n].iter().any(|b| *b != 0) {
            return Ok(false);
        }
        offset += n as u64;
    }
    Ok(true)
}

/// `/coreos/kargs.json`.
#[derive(Deserialize)]
struct KargsInfo {
    default: String,
    files: Vec<KargsFile>,
    size: usize,
}

#[derive(Deserialize)]
struct KargsFile {
    path: String,
    offset: u64,
    pad: Option<char>,
    end: Option<char>,
}

/// Finds the karg areas (spec-images.md §3.2, spec-images.md §3.1): kargs.json, else the legacy header, else none.
fn kargs_areas<S: ReadAt>(iso: &IsoFs<S>) -> Result<Option<KargsAreas>, LiveIsoError> {
    let record = match iso.get_path(KARGS_JSON_PATH) {
        Ok(record) => record,
        Err(e) if e.is_not_found() => return legacy_kargs_areas(iso),
        Err(e) => return Err(e.into()),
    };
    let json = read_metadata(iso, &record).map_err(|e| match e {
        IsoError::Io { .. } => LiveIsoError::Iso(e),
        e => LiveIsoError::KargsJson(KargsJsonError::Iso(e)),
    })?;
    let info: KargsInfo =
        serde_json::from_slice(&json).map_err(|e| LiveIsoError::KargsJson(KargsJsonError::Decode(e)))?;
    if info.size > KARG_AREA_MAX_SIZE {
        return Err(LiveIsoError::KargsJson(KargsJsonError::AreaTooLarge(info.size)));
    }
    if info.default.len() > info.size {
        return Err(LiveIsoError::KargsJson(KargsJsonError::DefaultTooLarge {
            default: info.default.len(),
            size: info.size,
        }));
    }
    let mut areas = Vec::with_capacity(info.files.len());
    for file in &info.files {
        let path = file.path.to_uppercase();
        let record = iso.get_path(&path).map_err(|e| match e {
            IsoError::Io { .. } => LiveIsoError::Iso(e),
            source => LiveIsoError::KargsJson(KargsJsonError::Lookup { path: file.path.clone(), source }),
        })?;
        if record.is_dir {
            return Err(LiveIsoError::KargsJson(KargsJsonError::Directory { path: file.path.clone() }));
        }
        let fill = |c: Option<char>, default: u8, what: &'static str| match c {
            None => Ok(default),
            Some(c) if c.is_ascii() => Ok(c as u8),
            Some(character) => {
                Err(LiveIsoError::KargsJson(KargsJsonError::NotAscii { what, character, path: file.path.clone() }))
            }
        };
        // As for igninfo.json: a huge offset must not wrap around to a small one.
        let offset = record.byte_offset().checked_add(file.offset).ok_or_else(|| {
            LiveIsoError::KargsJson(KargsJsonError::OffsetPastImage { offset: file.offset, path: file.path.clone() })
        })?;
        areas.push(KargArea { offset, pad: fill(file.pad, b'#', "pad")?, end: fill(file.end, b'\n', "end")? });
    }
    build_kargs_areas(iso, info.default, info.size, areas).map(Some)
}

/// The `coreKarg` header of 2021-era images; absent magic means no karg support.
fn legacy_kargs_areas<S: ReadAt>(iso: &IsoFs<S>) -> Result<Option<KargsAreas>, LiveIsoError> {
    let mut header = [0u8; 72];
    iso.read_at(LEGACY_KARGS_HEADER_OFFSET, &mut header, "karg embed header")?;
    if &header[..8] != LEGACY_KARGS_MAGIC {
        return Ok(None);
    }
    let field = |i: usize| {
        let mut le = [0u8; 8];
        le.copy_from_slice(&header[8 * i..8 * i + 8]);
        u64::from_le_bytes(le)
    };
    let size = field(1);
    if size > KARG_AREA_MAX_SIZE as u64 {
        return Err(LiveIsoError::LegacyKargs(LegacyKargsError::AreaTooLarge(size)));
    }
    let size = size as usize;
    let default_area = KargArea { offset: field(2), pad: b'#', end: b'\n' };
    let default = read_karg_area(iso, default_area, size)
        .map_err(|e| LiveIsoError::LegacyKargs(LegacyKargsError::Default(Box::new(e))))?;
    let areas = (3..3 + LEGACY_KARGS_MAX_AREAS)
        .map(field)
        .take_while(|offset| *offset != 0)
        .map(|offset| KargArea { offset, pad: b'#', end: b'\n' })
        .collect();
    build_kargs_areas(iso, default, size, areas).map(Some)
}

/// Reads every area and checks that they all hold the same command line.
fn build_kargs_areas<S: ReadAt>(
    iso: &IsoFs<S>,
    default: String,
    size: usize,
    mut areas: Vec<KargArea>,
) -> Result<KargsAreas, LiveIsoError> {
    areas.sort_by_key(|a| a.offset);
    let Some(first) = areas.first() else {
        return Err(LiveIsoError::NoKargAreas);
    };
    let current = read_karg_area(iso, *first, size)?;
    for area in &areas[1..] {
        let found = read_karg_area(iso, *area, size)?;
        if found != current {
            return Err(LiveIsoError::KargsMismatch { expected: current, offset: area.offset, found });
        }
    }
    Ok(KargsAreas { default, size, current, areas })
}

fn read_karg_area<S: ReadAt>(iso: &IsoFs<S>, area: KargArea, size: usize) -> Result<String, LiveIsoError> {
    let mut bytes = vec![0u8; size];
    iso.read_at(area.offset, &mut bytes, &format!("karg area at offset {}", area.offset))?;
    kargs::parse_area(&bytes, area.end, area.pad)
        .map_err(|source| LiveIsoError::KargArea { offset: area.offset, source })
}

fn features<S: ReadAt>(iso: &IsoFs<S>) -> Result<Features, LiveIsoError> {
    let record = match iso.get_path(FEATURES_PATH) {
        Ok(record) => record,
        Err(e) if e.is_not_found() => return Ok(Features::default()),
        Err(e) => return Err(e.into()),
    };
    let json = read_metadata(iso, &record).map_err(|e| match e {
        IsoError::Io { .. } => LiveIsoError::Iso(e),
        e => LiveIsoError::Features(FeaturesError::Iso(e)),
    })?;
    serde_json::from_slice(&json).map_err(|e| LiveIsoError::Features(FeaturesError::Decode(e)))
}

/// The byte range of a regular file, `None` if the path does not exist.
fn optional_file<S: ReadAt>(iso: &IsoFs<S>, path: &'static str) -> Result<Option<Area>, LiveIsoError> {
    let record = match iso.get_path(path) {
        Ok(record) => record,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if record.is_dir {
        return Err(LiveIsoError::NotAFile { path: path.into() });
    }
    let area = Area { offset: record.byte_offset(), len: record.length.into() };
    check_inside(iso, area, path)?;
    Ok(Some(area))
}

fn read_metadata<S: ReadAt>(iso: &IsoFs<S>, record: &Record) -> Result<Vec<u8>, IsoError> {
    iso.read_file(record, METADATA_LIMIT)
}

fn check_inside<S: ReadAt>(iso: &IsoFs<S>, area: Area, what: &str) -> Result<(), OutsideImage> {
    match area.offset.checked_add(area.len) {
        Some(end) if end <= iso.image_len() => Ok(()),
        _ => Err(OutsideImage {
            what: what.to_string(),
            offset: area.offset,
            end: area.offset.saturating_add(area.len),
            image_len: iso.image_len(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::chain;
    use crate::formats::iso9660::fixtures::fixture;

    fn inspect(name: &str) -> Result<LiveIso, LiveIsoError> {
        LiveIso::inspect(fixture(name))
    }

    fn fcos_default(volume_id: &str) -> String {
        format!("mitigations=auto,nosmt coreos.liveiso={volume_id} ignition.firstboot ignition.platform.id=metal")
    }

    struct Expected {
        name: &'static str,
        len: u64,
        volume_id: &'static str,
        ignition: (u64, u64),
        /// (size, offsets)
        kargs: Option<(usize, [u64; 2])>,
        features: Features,
        miniso: bool,
    }

    fn table() -> Vec<Expected> {
        let all_features = Features {
            installer_config: true,
            installer_config_directives: InstallerConfigDirectives { console: false },
            live_initrd_network: true,
        };
        let with_console = Features {
            installer_config_directives: InstallerConfigDirectives { console: true },
            ..all_features.clone()
        };
        vec![
            Expected {
                name: "embed-areas-2020-09.iso",
                len: 669696,
                volume_id: "rhcos-46.82.202112161843-0",
                ignition: (92160, 262144),
                kargs: None,
                features: Features::default(),
                miniso: false,
            },
            Expected {
                name: "embed-areas-2021-09.iso",
                len: 681984,
                volume_id: "fedora-coreos-34.20210921.dev.0",
                ignition: (102400, 262144),
                kargs: Some((1139, [98126, 371658])),
                features: Features::default(),
                miniso: false,
            },
            Expected {
                name: "embed-areas-2021-12.iso",
                len: 741376,
                volume_id: "fedora-coreos-35.20211216.dev.0",
                ignition: (161792, 262144),
                kargs: Some((1139, [139086, 431050])),
                features: all_features.clone(),
                miniso: true,
            },
            Expected {
                name: "embed-areas-2022-02.iso",
                len: 1048576,
                volume_id: "fedora-coreos-35.20220217.dev.0",
                ignition: (159744, 262144),
                kargs: Some((1139, [137038, 429002])),
                features: all_features,
                miniso: true,
            },
            Expected {
                name: "embed-areas-2022-09.iso",
                len: 1048576,
                volume_id: "fedora-coreos-36.20220909.dev.0",
                ignition: (159744, 262144),
                kargs: Some((1139, [137038, 429002])),
                features: with_console.clone(),
                miniso: true,
            },
            Expected {
                name: "embed-areas-2023-03.x86_64.iso",
                len: 1048576,
                volume_id: "fedora-coreos-37.20230306.dev.0",
                ignition: (157696, 262144),
                kargs: Some((1139, [427853, 431050])),
                features: with_console.clone(),
                miniso: true,
            },
            Expected {
                name: "embed-areas-2023-07.x86_64.iso",
                len: 1048576,
                volume_id: "fedora-coreos-38.20230718.dev.0",
                ignition: (139264, 262144),
                kargs: Some((1139, [137037, 408522])),
                features: with_console,
                miniso: true,
            },
        ]
    }

    #[test]
    fn fixtures_match_spec_table() {
        for expected in table() {
            let name = expected.name;
            let live = inspect(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(live.len, expected.len, "{name}");
            assert_eq!(live.volume_id, expected.volume_id, "{name}");
            assert_eq!((live.ignition_area.offset, live.ignition_area.len), expected.ignition, "{name}");
            assert!(live.ignition_area_pristine, "{name}");
            assert_eq!(live.features, expected.features, "{name}");
            assert_eq!(live.miniso.is_some(), expected.miniso, "{name}");
            if let Some(miniso) = live.miniso {
                assert_eq!(miniso.len, 16384, "{name}");
            }
            assert_eq!(live.initrd_addrsize, None, "{name}");
            match (&live.kargs, expected.kargs) {
                (None, None) => {}
                (Some(kargs), Some((size, offsets))) => {
                    assert_eq!(kargs.size, size, "{name}");
                    let found: Vec<u64> = kargs.areas.iter().map(|a| a.offset).collect();
                    assert_eq!(found, offsets, "{name}");
                    assert_eq!(kargs.default, fcos_default(expected.volume_id), "{name}");
                    assert_eq!(kargs.current, kargs.default, "{name}");
                    for area in &kargs.areas {
                        assert_eq!((area.pad, area.end), (b'#', b'\n'), "{name}");
                    }
                }
                (found, expected) => panic!("{name}: kargs {found:?}, expected {expected:?}"),
            }
            // PXE artifacts are tiny placeholders inside the image
            for area in [live.kernel, live.initrd, live.rootfs.unwrap()] {
                assert!(area.len > 0 && area.len < 16 && area.end() <= live.len, "{name}: {area:?}");
            }
        }
    }

    #[test]
    fn pxe_artifacts_are_the_iso_files() {
        let file = fixture("embed-areas-2023-07.x86_64.iso");
        let iso = IsoFs::open(file.try_clone().unwrap()).unwrap();
        let live = LiveIso::from_iso(&iso).unwrap();
        for (path, area) in
            [(KERNEL_PATH, live.kernel), (INITRD_PATH, live.initrd), (ROOTFS_PATH, live.rootfs.unwrap())]
        {
            let record = iso.get_path(path).unwrap();
            assert_eq!(area, Area { offset: record.byte_offset(), len: record.length.into() });
        }
    }

    #[test]
    fn synthetic_is_unrecognized() {
        let message = chain(&inspect("synthetic.iso").unwrap_err()).to_string();
        assert!(message.starts_with("Unrecognized CoreOS ISO image."), "{message}");
        assert!(message.contains("no ignition embed area: intermediate directory IMAGES does not exist"), "{message}");
    }

    /// A fixture decompressed into memory, for corruption tests.
    fn fixture_bytes(name: &str) -> Vec<u8> {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut fixture(name), &mut bytes).unwrap();
        bytes
    }

    fn inspect_bytes(bytes: Vec<u8>) -> Result<LiveIso, LiveIsoError> {
        LiveIso::from_iso(&IsoFs::from_source(bytes)?)
    }

    /// embed.rs anchors on 2021-09: breaking `IGNITION.IMG;1` makes the image unrecognized.
    #[test]
    fn broken_ignition_record_is_unrecognized() {
        let mut bytes = fixture_bytes("embed-areas-2021-09.iso");
        assert_eq!(&bytes[65903..65915], b"IGNITION.IMG");
        bytes[65903] = b'Z';
        let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
        assert!(err.starts_with("Unrecognized CoreOS ISO image."), "{err}");
    }

    /// embed.rs anchors on 2021-09: kargs.json and the legacy header each suffice; with both
    /// broken the image has no kargs support (not an error).
    #[test]
    fn kargs_json_and_legacy_header_fallbacks() {
        let pristine = fixture_bytes("embed-areas-2021-09.iso");
        let expected = inspect_bytes(pristine.clone()).unwrap().kargs.unwrap();

        let mut no_header = pristine.clone();
        no_header[32672..32680].fill(0);
        assert_eq!(inspect_bytes(no_header.clone()).unwrap().kargs.unwrap(), expected);

        let mut no_json = pristine.clone();
        assert_eq!(&no_json[63725..63734], b"KARGS.JSO");
        no_json[63725] = b'Z';
        let legacy = inspect_bytes(no_json).unwrap().kargs.unwrap();
        assert_eq!(legacy, expected, "legacy header describes the same areas");

        let mut neither = no_header;
        neither[63725] = b'Z';
        let live = inspect_bytes(neither).unwrap();
        assert_eq!(live.kargs, None);
    }

    #[test]
    fn modified_kargs_are_current() {
        let mut bytes = fixture_bytes("embed-areas-2023-07.x86_64.iso");
        let kargs = inspect_bytes(bytes.clone()).unwrap().kargs.unwrap();
        let new = format!("{} foobar=val", kargs.default);
        for area in &kargs.areas {
            let rendered = kargs::render_area(&new, kargs.size, area.end, area.pad).unwrap();
            let at = area.offset as usize;
            bytes[at..at + kargs.size].copy_from_slice(&rendered);
        }
        let live = inspect_bytes(bytes.clone()).unwrap();
        assert_eq!(live.kargs.as_ref().unwrap().current, new);
        assert_eq!(live.kargs.unwrap().default, kargs.default);

        // one area differing from the others
        let second = kargs.areas[1].offset as usize;
        bytes[second] = b'X';
        let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
        assert!(
            err.starts_with(&format!(
                "kargs don't match at all offsets! (expected '{new}', but offset {second} has: 'Xitigations"
            )),
            "{err}"
        );
    }

    #[test]
    fn embedded_ignition_is_not_pristine() {
        let mut bytes = fixture_bytes("embed-areas-2022-02.iso");
        bytes[159744 + 262143] = 1;
        assert!(!inspect_bytes(bytes).unwrap().ignition_area_pristine);
    }

    /// Overwrites the content of a JSON file in the image, space-padded to the file's length.
    /// Longer content grows the file into the rest of its last block, by rewriting the length
    /// in its directory record.
    fn replace_file(bytes: &mut [u8], path: &str, content: &str) {
        let iso = IsoFs::from_source(bytes.to_vec()).unwrap();
        let record = iso.get_path(path).unwrap();
        let start = record.byte_offset() as usize;
        let mut length = record.length as usize;
        if content.len() > length {
            assert!(content.len() <= 2048, "{content}");
            let (parent, name) = path.rsplit_once('/').unwrap();
            let parent = iso.get_path(parent).unwrap();
            let dir = parent.byte_offset() as usize..parent.end_offset() as usize;
            let identifier = format!("{name};1");
            let at =
                dir.start + bytes[dir].windows(identifier.len()).position(|w| w == identifier.as_bytes()).unwrap() - 33;
            length = content.len();
            bytes[at + 10..at + 14].copy_from_slice(&(length as u32).to_le_bytes());
            bytes[at + 14..at + 18].copy_from_slice(&(length as u32).to_be_bytes());
        }
        let area = &mut bytes[start..start + length];
        area.fill(b' ');
        area[..content.len()].copy_from_slice(content.as_bytes());
    }

    #[test]
    fn invalid_kargs_json_is_an_error() {
        let pristine = fixture_bytes("embed-areas-2023-07.x86_64.iso");
        let cases = [
            ("{", "kargs.json: decoding: "),
            (
                r#"{"default": "a", "files": [{"path": "EFI/fedora/grub.cfg", "offset": 970}], "size": 4096}"#,
                "kargs.json: karg embed area size larger than 2048 (found 4096)",
            ),
            (
                r#"{"default": "abcdef", "files": [{"path": "EFI/fedora/grub.cfg", "offset": 970}], "size": 4}"#,
                "kargs.json: default kargs size 6 larger than embed areas (4)",
            ),
            (r#"{"default": "a", "files": [], "size": 100}"#, "No karg embed areas found; corrupted CoreOS ISO image."),
            (
                r#"{"default": "a", "files": [{"path": "EFI/fedora/nope.cfg", "offset": 970}], "size": 100}"#,
                "kargs.json: looking up 'EFI/fedora/nope.cfg': no record for NOPE.CFG in directory EFI/FEDORA",
            ),
            (
                r#"{"default": "a", "files": [{"path": "EFI/fedora/grub.cfg", "offset": 99999999}], "size": 100}"#,
                "karg area at offset ",
            ),
            (
                r#"{"default": "a", "files": [{"path": "EFI/fedora/grub.cfg", "offset": 970, "pad": "é"}], "size": 100}"#,
                "kargs.json: pad character 'é' for EFI/fedora/grub.cfg is not ASCII",
            ),
        ];
        for (json, message) in cases {
            let mut bytes = pristine.clone();
            replace_file(&mut bytes, KARGS_JSON_PATH, json);
            let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
            assert!(err.starts_with(message), "{json}: {err}");
        }
    }

    #[test]
    fn igninfo_variants() {
        let pristine = fixture_bytes("embed-areas-2023-07.x86_64.iso");
        let ignition = 139264;
        let mut bytes = pristine.clone();
        replace_file(&mut bytes, IGNINFO_PATH, r#"{"file": "images/ignition.img", "offset": 4096}"#);
        let live = inspect_bytes(bytes).unwrap();
        assert_eq!(live.ignition_area, Area { offset: ignition + 4096, len: 262144 - 4096 });

        let mut bytes = pristine.clone();
        replace_file(&mut bytes, IGNINFO_PATH, r#"{"file":"images/ignition.img","offset":16,"length":32}"#);
        assert_eq!(inspect_bytes(bytes).unwrap().ignition_area, Area { offset: ignition + 16, len: 32 });

        for (json, message) in [
            ("[", "Unrecognized CoreOS ISO image. (no ignition embed area: decoding igninfo.json: "),
            (
                r#"{"file": "images/nope.img"}"#,
                "Unrecognized CoreOS ISO image. (no ignition embed area: no record for NOPE.IMG in directory IMAGES)",
            ),
            (r#"{"file": "images"}"#, "Unrecognized CoreOS ISO image. (no ignition embed area: IMAGES is a directory)"),
            (
                r#"{"file": "images/ignition.img", "offset": 999999}"#,
                "Unrecognized CoreOS ISO image. (no ignition embed area: igninfo.json offset 999999 is past the end of IMAGES/IGNITION.IMG",
            ),
            (
                r#"{"file": "images/ignition.img", "length": 99999999}"#,
                "Unrecognized CoreOS ISO image. (no ignition embed area: the Ignition area in IMAGES/IGNITION.IMG (bytes 139264..100139263) extends past the end of the image (1048576 bytes))",
            ),
        ] {
            let mut bytes = pristine.clone();
            replace_file(&mut bytes, IGNINFO_PATH, json);
            let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
            assert!(err.starts_with(message), "{json}: {err}");
        }
    }

    /// Offsets from kargs.json and igninfo.json near `u64::MAX` overflowed when added to the
    /// file's position (a panic in debug builds, a wrapped-around offset in release builds).
    /// Seen while writing the kargs_igninfo fuzz target, whose pre-fix build panics on both.
    #[test]
    fn huge_json_offsets_are_errors() {
        let pristine = fixture_bytes("embed-areas-2023-07.x86_64.iso");
        let mut bytes = pristine.clone();
        replace_file(
            &mut bytes,
            KARGS_JSON_PATH,
            r#"{"default": "a", "files": [{"path": "EFI/fedora/grub.cfg", "offset": 18446744073709551615}], "size": 100}"#,
        );
        let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
        assert_eq!(err, "kargs.json: offset 18446744073709551615 in EFI/fedora/grub.cfg is past the end of the image");

        let mut bytes = pristine;
        replace_file(
            &mut bytes,
            IGNINFO_PATH,
            r#"{"file": "images/ignition.img", "offset": 18446744073709551615, "length": 1}"#,
        );
        let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
        assert_eq!(
            err,
            "Unrecognized CoreOS ISO image. (no ignition embed area: igninfo.json offset 18446744073709551615 is past the end of the image)"
        );
    }

    #[test]
    fn invalid_features_json_is_an_error() {
        let mut bytes = fixture_bytes("embed-areas-2022-02.iso");
        replace_file(&mut bytes, FEATURES_PATH, r#"{"live-initrd-network": "yes"}"#);
        let err = chain(&inspect_bytes(bytes).unwrap_err()).to_string();
        assert!(err.starts_with("features.json: decoding: "), "{err}");
    }

    #[test]
    fn missing_pxe_artifacts() {
        let pristine = fixture_bytes("embed-areas-2022-02.iso");
        let iso = IsoFs::from_source(pristine.clone()).unwrap();
        let pxeboot = iso.get_path("IMAGES/PXEBOOT").unwrap();
        let pos = |bytes: &[u8], name: &[u8]| {
            let start = pxeboot.byte_offset() as usize;
            start + bytes[start..start + 2048].windows(name.len()).position(|w| w == name).unwrap()
        };
        let mut bytes = pristine.clone();
        let at = pos(&bytes, b"ROOTFS.IMG");
        bytes[at] = b'Z';
        // A minimal ISO has no rootfs: not an error here (the catalog requires one of base images).
        assert_eq!(inspect_bytes(bytes).unwrap().rootfs, None);
        let mut bytes = pristine;
        let at = pos(&bytes, b"VMLINUZ");
        bytes[at] = b'Z';
        assert_eq!(chain(&inspect_bytes(bytes).unwrap_err()).to_string(), "missing IMAGES/PXEBOOT/VMLINUZ");
    }
}
