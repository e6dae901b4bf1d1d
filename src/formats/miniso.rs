//! The minimal ISO packed inside a full CoreOS live ISO (`/coreos/miniso.dat`), as a plan.
//!
//! A full live ISO carries, in `COREOS/MINISO.DAT`, everything needed to rebuild the matching
//! *minimal* ISO (the same image without the rootfs, which the live system then fetches from
//! `coreos.live.rootfs_url=`): a table mapping files of the minimal ISO to files of the full ISO,
//! the SHA-256 of the minimal ISO, and one xz stream holding every byte of the minimal ISO that
//! is not one of those shared files (ISO metadata, the gaps after each file, the tail)
//! (spec-images.md §4.3, spec-images.md §4.4).
//!
//! `coreos-installer iso extract minimal-iso` unpacks that into a new file. We never write the
//! minimal ISO anywhere: [`minimal_iso`] decompresses the xz stream once into a small shared
//! [`Part`] (long zero runs, which are most of it, become [`Segment::Zeros`] instead) and builds a
//! [`Plan`] that interleaves slices of that part with byte ranges of the full ISO, then checks the
//! recorded digest by hashing that plan. Post-processing is coreos-installer's (spec-images.md §4.5): the full
//! ISO must be pristine, and the minimal ISO's `kargs.json` gets its `default` rewritten without
//! `coreos.liveiso=`. The per-request kernel arguments (`coreos.live.rootfs_url=` and user edits)
//! and Ignition config are overlays the caller adds; [`MinimalIso::with_rootfs_url`] is the
//! overlay coreos-installer's `--rootfs-url` produces, byte for byte.
//!
//! `miniso.dat` comes from an operator-supplied image, so the parser is bounded and total: at
//! most [`DATA_MAX_SIZE`] bytes are considered, lengths are checked against the input before
//! anything is allocated, the xz stream's declared sizes are checked against
//! [`MAX_UNPACKED_LEN`] before it is decompressed, and every table entry must lie inside the full
//! ISO. Malformed input is an error, never a panic.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::formats::iso9660::{IsoError, IsoFs, ReadAt, SECTOR};
use crate::formats::kargs::{self, KargOp, KargsError};
use crate::formats::liveiso::{Area, LiveIso, LiveIsoError};
use crate::plan::{BaseFile, FileReadError, Part, Plan, PlanBuilder, Segment, ZEROS};

/// coreos-installer reads at most this much of `miniso.dat`; a structure that needs more is an
/// error (the file itself may be longer: trailing bytes are ignored).
pub const DATA_MAX_SIZE: usize = 1024 * 1024;
/// `MINISO\0\0`.
pub const MAGIC: [u8; 8] = *b"MINISO\0\0";
/// The only format version there is.
pub const VERSION: u32 = 1;
/// Largest table we accept. Real minimal ISOs share a dozen files; the bound keeps a crafted
/// file from turning into a plan of hundreds of thousands of segments.
pub const MAX_TABLE_ENTRIES: usize = 65_536;
/// Largest decompressed packed stream we accept. In the fixtures it is about 740 KiB, of which
/// about 6 KiB are not zeros; the bound is on memory (the decoder holds the whole stream).
pub const MAX_UNPACKED_LEN: u64 = 64 * 1024 * 1024;
/// Zero runs at least this long in the packed stream are kept as [`Segment::Zeros`], not in the part.
const ZERO_RUN_MIN: usize = 2048;
/// Limit on the minimal ISO's `/coreos/*.json` files read into memory.
const METADATA_LIMIT: u64 = 64 * 1024;

const KARGS_JSON_PATH: &str = "COREOS/KARGS.JSO";
const LIVEISO_KARG_PREFIX: &str = "coreos.liveiso=";
const ROOTFS_URL_KARG_PREFIX: &str = "coreos.live.rootfs_url=";

/// Why a minimal ISO could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum MinisoError {
    /// The image has no `COREOS/MINISO.DAT`. coreos-installer's wording.
    #[error("This ISO image does not support extracting a minimal ISO.")]
    Unsupported,
    /// The full ISO could not be inspected.
    #[error(transparent)]
    FullIso(#[from] LiveIsoError),
    /// The full ISO has no karg areas, so coreos-installer cannot tell whether it is pristine.
    #[error("No karg embed areas found; old or corrupted CoreOS ISO image.")]
    NoKargs,
    /// Something is embedded in the full ISO, or its kargs differ from the default: the shared
    /// files would carry the customization into the minimal ISO (and fail the digest).
    #[error(
        "Cannot operate on ISO with embedded customizations.\nReset it with `coreos-installer iso reset` and try again."
    )]
    Customized,
    #[error("reading miniso data file")]
    Data(#[from] DataError),
    /// The packed stream or the table does not fit what it is applied to.
    #[error("unpacking miniso")]
    Unpack(#[source] UnpackError),
    /// The rebuilt minimal ISO is not the one that was packed (the full ISO was modified or
    /// corrupted). coreos-installer's wording; digests in lower-case hex.
    #[error("wrong final digest: expected {expected}, found {found}")]
    WrongDigest { expected: String, found: String },
    /// The rebuilt minimal ISO is not a CoreOS live ISO we can customize.
    #[error("minimal ISO")]
    MinimalIso(#[source] MinimalIsoError),
    #[error("minimal ISO does not have coreos.liveiso= karg")]
    NoLiveIsoKarg,
    /// A rootfs URL would become several kernel arguments. coreos-installer's wording.
    #[error("forbidden whitespace found in '{0}'")]
    ForbiddenWhitespace(String),
    #[error("empty rootfs URL")]
    EmptyRootfsUrl,
    #[error(transparent)]
    Kargs(#[from] KargsError),
    #[error("reading {what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

/// Why the packed minimal ISO does not unpack.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("miniso.dat (bytes {offset}..{end}) is past the end of the full ISO ({full_len} bytes)")]
    DataPastTheEnd { offset: u64, end: u64, full_len: u64 },
    #[error("malformed packed stream")]
    MalformedStream(#[source] XzError),
    #[error("decompressing packed stream")]
    Decompress(#[source] lzma_rs::error::Error),
    #[error("packed stream decompressed to {len} bytes, but its chunks declare {declared}")]
    DeclaredLength { len: usize, declared: u64 },
    #[error("copying {gap} packed bytes at offset {at}: the packed stream ends after {stream_len} bytes")]
    StreamEnds { gap: u64, at: u64, stream_len: u64 },
    #[error(
        "copying full ISO file at offset {offset}: {length} bytes reach past the end of the full ISO ({full_len} bytes)"
    )]
    SharedPastTheEnd { offset: u64, length: u64, full_len: u64 },
    #[error("the table shares {shared_len} bytes, more than the full ISO's {full_len}")]
    SharedTooMuch { shared_len: u64, full_len: u64 },
}

/// Why the structure of the packed xz stream is not one this reader accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XzError {
    #[error("too short for an xz stream header")]
    NoHeader,
    #[error("not an xz stream")]
    NotXz,
    #[error("unsupported stream flags {0:02x} {1:02x}")]
    StreamFlags(u8, u8),
    #[error("unexpected end")]
    UnexpectedEnd,
    #[error("invalid variable-length integer")]
    Multibyte,
    #[error("non-zero padding")]
    Padding,
    #[error("block with a filter chain (only a single LZMA2 filter is supported)")]
    FilterChain,
    #[error("invalid LZMA2 chunk control byte {0:#04x}")]
    ChunkControl(u8),
    #[error("it expands to more than {0} bytes")]
    TooLarge(u64),
    #[error("invalid stream footer")]
    Footer,
    #[error("{0} bytes after the end of the stream")]
    Trailing(usize),
}

/// Why the unpacked minimal ISO is not one we can customize.
#[derive(Debug, thiserror::Error)]
pub enum MinimalIsoError {
    #[error(transparent)]
    Iso(IsoError),
    #[error(transparent)]
    LiveIso(LiveIsoError),
    #[error("{KARGS_JSON_PATH} is a directory")]
    KargsJsonIsADirectory,
    #[error("does not have kargs.json")]
    NoKargsJson,
    #[error("kargs.json")]
    ReadKargsJson(#[source] IsoError),
    #[error("decoding kargs embed area info")]
    DecodeKargsJson(#[source] serde_json::Error),
    #[error("serializing kargs.json")]
    SerializeKargsJson(#[source] serde_json::Error),
    #[error("New version of {KARGS_JSON_PATH} does not fit in space ({len} vs {file_len})")]
    KargsJsonTooLong { len: usize, file_len: usize },
    #[error(transparent)]
    Overlay(#[from] crate::plan::OverlayError),
}

/// Why `miniso.dat` could not be decoded. The wording follows coreos-installer's error chain
/// (`failed to deserialize header: ...`, `validating header: not a miniso file!`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    #[error("failed to deserialize header")]
    Header(#[source] Malformed),
    #[error("validating header: not a miniso file!")]
    Magic,
    #[error("validating header: incompatible miniso file version: {VERSION} vs {found} (created by {app_version})")]
    Version { found: u32, app_version: String },
    #[error("failed to deserialize data")]
    Data(#[source] Malformed),
    #[error("validating table: table is empty; ISOs have no files in common?")]
    EmptyTable,
    #[error("validating table: table has {count} entries, more than the {MAX_TABLE_ENTRIES} supported")]
    TooManyEntries { count: u64 },
    /// `minimal * 2048 + length` of an entry reaches past the next entry's start.
    #[error("validating table: Files at offsets {first} and {second} overlap")]
    Overlap { first: u64, second: u64 },
}

/// A bincode-level decoding failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("unexpected end of data reading {what} at byte {at}")]
    Truncated { what: &'static str, at: usize },
    /// The structure continues past [`DATA_MAX_SIZE`] (coreos-installer's limit reader wording).
    #[error("collision with data size limit at offset {DATA_MAX_SIZE}")]
    SizeLimit,
    #[error("invalid integer encoding (tag byte {tag:#04x}) for {what} at byte {at}")]
    Varint { what: &'static str, at: usize, tag: u8 },
    #[error("{what} at byte {at} is {value}, which does not fit in 32 bits")]
    TooLarge { what: &'static str, at: usize, value: u64 },
    #[error("invalid UTF-8 in {what}")]
    Utf8 { what: &'static str },
}

/// One file shared between the two ISOs: `length` bytes at block `minimal` of the minimal ISO
/// are the bytes at block `full` of the full ISO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableEntry {
    pub minimal: u32,
    pub full: u32,
    pub length: u32,
}

impl TableEntry {
    /// Byte offset in the minimal ISO.
    pub fn minimal_offset(&self) -> u64 {
        u64::from(self.minimal) * SECTOR
    }
    /// Byte offset in the full ISO.
    pub fn full_offset(&self) -> u64 {
        u64::from(self.full) * SECTOR
    }
}

/// A decoded `miniso.dat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinisoData {
    /// coreos-installer version that packed it (informational).
    pub app_version: String,
    /// Sorted by `minimal`, non-overlapping, not empty.
    pub entries: Vec<TableEntry>,
    /// SHA-256 of the whole minimal ISO.
    pub digest: [u8; 32],
    /// One xz stream: the minimal ISO with the shared files' bytes left out.
    pub xzpacked: Vec<u8>,
}

/// Reads bincode 1.x (little-endian, varint integers) from a bounded buffer.
struct Decoder<'a> {
    data: &'a [u8],
    pos: usize,
    /// The input was cut at [`DATA_MAX_SIZE`]: running out means "too large", not "truncated".
    limited: bool,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        match self.pos.checked_add(n).filter(|end| *end <= self.data.len()) {
            Some(end) => {
                let bytes = &self.data[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None if self.limited => Err(Malformed::SizeLimit),
            None => Err(Malformed::Truncated { what, at: self.pos }),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Malformed> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// bincode's varint: one byte below 251, else a tag (251/252/253) and a 2/4/8-byte LE
    /// integer. Like bincode, a wider encoding than needed is accepted.
    fn varint(&mut self, what: &'static str) -> Result<u64, Malformed> {
        let at = self.pos;
        let tag = self.take(1, what)?[0];
        Ok(match tag {
            0..=250 => u64::from(tag),
            251 => u64::from(u16::from_le_bytes(self.array(what)?)),
            252 => u64::from(u32::from_le_bytes(self.array(what)?)),
            253 => u64::from_le_bytes(self.array(what)?),
            _ => return Err(Malformed::Varint { what, at, tag }),
        })
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let at = self.pos;
        let value = self.varint(what)?;
        u32::try_from(value).map_err(|_| Malformed::TooLarge { what, at, value })
    }

    /// A `Vec<u8>`: varint length, then the bytes (checked against the input before copying).
    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], Malformed> {
        let len = self.varint(what)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        self.take(len, what)
    }
}

impl MinisoData {
    /// Decodes `miniso.dat` (the file's bytes; only the first [`DATA_MAX_SIZE`] are looked at,
    /// bytes after the structure are ignored) and validates header and table the way
    /// coreos-installer does.
    pub fn parse(data: &[u8]) -> Result<MinisoData, DataError> {
        let limited = data.len() > DATA_MAX_SIZE;
        let mut d = Decoder { data: &data[..data.len().min(DATA_MAX_SIZE)], pos: 0, limited };

        // Header: decoded entirely, then validated.
        let (magic, version, app_version) = (|| {
            let magic: [u8; 8] = d.array("magic")?;
            let version = d.u32("version")?;
            let app_version = d.bytes("app_version")?;
            let app_version = std::str::from_utf8(app_version).map_err(|_| Malformed::Utf8 { what: "app_version" })?;
            Ok((magic, version, app_version.to_string()))
        })()
        .map_err(DataError::Header)?;
        if magic != MAGIC {
            return Err(DataError::Magic);
        }
        if version != VERSION {
            return Err(DataError::Version { found: version, app_version });
        }

        let count = d.varint("table length").map_err(DataError::Data)?;
        if count > MAX_TABLE_ENTRIES as u64 {
            return Err(DataError::TooManyEntries { count });
        }
        let count = count as usize;
        // Each entry takes at least 3 bytes: never reserve more than the input could hold.
        let mut entries = Vec::with_capacity(count.min((d.data.len() - d.pos) / 3));
        let (digest, xzpacked) = (|| {
            for _ in 0..count {
                let minimal = d.u32("table entry")?;
                let full = d.u32("table entry")?;
                let length = d.u32("table entry")?;
                entries.push(TableEntry { minimal, full, length });
            }
            let digest: [u8; 32] = d.array("digest")?;
            let xzpacked = d.bytes("xzpacked")?.to_vec();
            Ok((digest, xzpacked))
        })()
        .map_err(DataError::Data)?;

        validate_table(&entries)?;
        Ok(MinisoData { app_version, entries, digest, xzpacked })
    }
}

/// Non-empty, and each entry ends before the next begins (which also means sorted).
fn validate_table(entries: &[TableEntry]) -> Result<(), DataError> {
    if entries.is_empty() {
        return Err(DataError::EmptyTable);
    }
    for pair in entries.windows(2) {
        let (e, next) = (pair[0], pair[1]);
        if e.minimal_offset() + u64::from(e.length) > next.minimal_offset() {
            return Err(DataError::Overlap { first: e.minimal_offset(), second: next.minimal_offset() });
        }
    }
    Ok(())
}

/// Sizes of an unpacked minimal ISO, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpackStats {
    /// coreos-installer version that packed `miniso.dat`.
    pub app_version: String,
    pub entries: usize,
    /// Length of the xz stream.
    pub xz_len: usize,
    /// Length of the decompressed stream (the minimal ISO's own bytes).
    pub unpacked_len: u64,
    /// Bytes of the decompressed stream kept in memory (long zero runs are not).
    pub part_len: usize,
    /// Bytes of the minimal ISO read from the full ISO.
    pub shared_len: u64,
}

/// The minimal ISO of a full live ISO, ready to be customized per request.
#[derive(Debug, Clone)]
pub struct MinimalIso {
    /// The minimal ISO with its `kargs.json` default rewritten (no `coreos.liveiso=`); the karg
    /// areas still hold the full ISO's kargs, the Ignition area is empty.
    pub plan: Plan,
    /// The minimal ISO's Ignition area and karg areas (absolute offsets in `plan`). `kargs` is
    /// always `Some`, with `default` = `kargs_without_liveiso` and `current` = what the areas in
    /// `plan` hold. The minimal ISO has no rootfs: `rootfs` is an empty area at offset 0, and
    /// `miniso` is `None`.
    pub live: LiveIso,
    /// The karg areas' command line with the `coreos.liveiso=` argument removed.
    pub kargs_without_liveiso: String,
    pub stats: UnpackStats,
}

impl MinimalIso {
    /// The command line coreos-installer's `--rootfs-url URL` writes: the kargs without
    /// `coreos.liveiso=`, then `coreos.live.rootfs_url=URL` (unquoted).
    pub fn rootfs_url_kargs(&self, url: &str) -> Result<String, MinisoError> {
        if url.is_empty() {
            return Err(MinisoError::EmptyRootfsUrl);
        }
        if url.chars().any(char::is_whitespace) {
            return Err(MinisoError::ForbiddenWhitespace(url.to_string()));
        }
        Ok(kargs::apply_ops(&self.kargs_without_liveiso, &[KargOp::Append(format!("{ROOTFS_URL_KARG_PREFIX}{url}"))])?)
    }

    /// Overlays for the karg areas holding `kargs`.
    pub fn karg_overlays(&self, kargs: &str) -> Result<Vec<(u64, Vec<Segment>)>, MinisoError> {
        let areas = self.live.kargs.as_ref().ok_or(MinisoError::NoKargs)?;
        let mut overlays = Vec::with_capacity(areas.areas.len());
        for area in &areas.areas {
            let part = Arc::new(Part::new(kargs::render_area(kargs, areas.size, area.end, area.pad)?));
            let len = part.bytes.len();
            overlays.push((area.offset, vec![Segment::Part { part, offset: 0, len }]));
        }
        Ok(overlays)
    }

    /// The minimal ISO with `kargs` in every karg area.
    pub fn with_kargs(&self, kargs: &str) -> Result<Plan, MinisoError> {
        let mut overlays = self.karg_overlays(kargs)?;
        self.plan.overlay(&mut overlays).map_err(|e| MinisoError::MinimalIso(e.into()))
    }

    /// Exactly what `coreos-installer iso extract minimal-iso --rootfs-url URL` writes.
    pub fn with_rootfs_url(&self, url: &str) -> Result<Plan, MinisoError> {
        self.with_kargs(&self.rootfs_url_kargs(url)?)
    }
}

/// The minimal ISO of a full live ISO already inspected; [`MinisoError::Unsupported`] if it has no `miniso.dat`.
/// Reads the shared extents of the full ISO once (to verify the digest): run it on a blocking
/// thread and cache the result.
pub fn minimal_iso_of(full: &Arc<BaseFile>, full_live: &LiveIso) -> Result<MinimalIso, MinisoError> {
    let area = full_live.miniso.ok_or(MinisoError::Unsupported)?;
    build(full, full_live, area)
}

/// The minimal ISO packed in `full` (whose `miniso.dat` is at `miniso_area`), verified against
/// its recorded digest, with coreos-installer's post-processing. Inspects the full ISO first
/// (it must be pristine). Reads the shared extents of the full ISO once: run it on a blocking
/// thread and cache the result.
pub fn minimal_iso(full: &Arc<BaseFile>, miniso_area: Area) -> Result<MinimalIso, MinisoError> {
    let mut whole = PlanBuilder::default();
    whole.file(full, 0, full.len);
    let full_live = LiveIso::from_iso(&IsoFs::from_source(whole.build()).map_err(LiveIsoError::from)?)?;
    build(full, &full_live, miniso_area)
}

fn build(full: &Arc<BaseFile>, full_live: &LiveIso, miniso_area: Area) -> Result<MinimalIso, MinisoError> {
    // Same order as coreos-installer: pristine check, then the data file, unpack, kargs.
    let full_kargs = full_live.kargs.as_ref().ok_or(MinisoError::NoKargs)?;
    if !full_live.ignition_area_pristine || full_kargs.current != full_kargs.default {
        return Err(MinisoError::Customized);
    }
    let data = read_data(full, miniso_area)?;
    let (unpacked, mut stats) = unpack(&data, full)?;
    verify(&unpacked, &data.digest)?;
    stats.app_version = data.app_version;

    let iso = IsoFs::from_source(unpacked.clone()).map_err(|e| MinisoError::MinimalIso(MinimalIsoError::Iso(e)))?;
    let mut live = LiveIso::from_iso(&iso).map_err(|e| MinisoError::MinimalIso(MinimalIsoError::LiveIso(e)))?;
    // coreos-installer rewrites kargs.json's default, so the minimal ISO must have one.
    let kargs_json_record = match iso.get_path(KARGS_JSON_PATH) {
        Ok(record) if !record.is_dir => record,
        Ok(_) => return Err(MinisoError::MinimalIso(MinimalIsoError::KargsJsonIsADirectory)),
        Err(e) if e.is_not_found() => return Err(MinisoError::MinimalIso(MinimalIsoError::NoKargsJson)),
        Err(e) => return Err(MinisoError::MinimalIso(MinimalIsoError::Iso(e))),
    };
    let kargs_json: KargsJson = serde_json::from_slice(
        &iso.read_file(&kargs_json_record, METADATA_LIMIT)
            .map_err(|e| MinisoError::MinimalIso(MinimalIsoError::ReadKargsJson(e)))?,
    )
    .map_err(|e| MinisoError::MinimalIso(MinimalIsoError::DecodeKargsJson(e)))?;
    let kargs = live.kargs.as_mut().ok_or(MinisoError::NoKargs)?;
    let liveiso_karg = kargs
        .current
        .split_ascii_whitespace()
        .find(|karg| karg.starts_with(LIVEISO_KARG_PREFIX))
        .ok_or(MinisoError::NoLiveIsoKarg)?
        .to_string();
    let kargs_without_liveiso = kargs::apply_ops(&kargs.current, &[KargOp::Delete(liveiso_karg)])?;

    // kargs.json default rewritten, so that resetting the kargs does not bring coreos.liveiso back.
    let json = KargsJson { default: kargs_without_liveiso.clone(), ..kargs_json };
    let json = serde_json::to_string_pretty(&json)
        .map_err(|e| MinisoError::MinimalIso(MinimalIsoError::SerializeKargsJson(e)))?;
    let file_len = kargs_json_record.length as usize;
    if json.len() > file_len {
        return Err(MinisoError::MinimalIso(MinimalIsoError::KargsJsonTooLong { len: json.len(), file_len }));
    }
    let mut bytes = json.into_bytes();
    bytes.resize(file_len, b' ');
    let part = Arc::new(Part::new(bytes));
    let plan = unpacked
        .overlay(&mut [(kargs_json_record.byte_offset(), vec![Segment::Part { part, offset: 0, len: file_len }])])
        .map_err(|e| MinisoError::MinimalIso(e.into()))?;
    kargs.default = kargs_without_liveiso.clone();
    Ok(MinimalIso { plan, live, kargs_without_liveiso, stats })
}

/// Reads `miniso.dat` (at most [`DATA_MAX_SIZE`] + 1 bytes, to tell "too large" from "truncated").
fn read_data(full: &BaseFile, area: Area) -> Result<MinisoData, MinisoError> {
    let len = area.len.min(DATA_MAX_SIZE as u64 + 1);
    if area.offset.checked_add(len).is_none_or(|end| end > full.len) {
        return Err(MinisoError::Unpack(UnpackError::DataPastTheEnd {
            offset: area.offset,
            end: area.offset.saturating_add(len),
            full_len: full.len,
        }));
    }
    let mut bytes = vec![0u8; len as usize];
    FileExt::read_exact_at(&full.file, &mut bytes, area.offset)
        .map_err(|source| MinisoError::Io { what: format!("miniso.dat in {}", full.path.display()), source })?;
    Ok(MinisoData::parse(&bytes)?)
}

/// The minimal ISO as a plan, per the table: stretches of the packed stream, then the shared
/// file, for each entry; the rest of the stream at the end. Not verified.
pub fn unpack(data: &MinisoData, full: &Arc<BaseFile>) -> Result<(Plan, UnpackStats), MinisoError> {
    // `parse` checked this already, but the fields are public.
    validate_table(&data.entries)?;
    let stream = decompress(&data.xzpacked)?;
    let unpacked_len = stream.len() as u64;
    let (stream, part_len) = compact(&stream);

    let mut b = PlanBuilder::default();
    let mut used = 0u64; // bytes of the stream consumed
    let mut shared_len = 0u64;
    for e in &data.entries {
        let start = e.minimal_offset();
        // validate_table guarantees start >= b.len()
        let gap = start - b.len();
        if used + gap > stream.len() {
            return Err(MinisoError::Unpack(UnpackError::StreamEnds { gap, at: b.len(), stream_len: stream.len() }));
        }
        for seg in stream.slice(used, used + gap).segments() {
            b.push(seg.clone());
        }
        used += gap;
        let length = u64::from(e.length);
        if e.full_offset() + length > full.len {
            return Err(MinisoError::Unpack(UnpackError::SharedPastTheEnd {
                offset: e.full_offset(),
                length,
                full_len: full.len,
            }));
        }
        shared_len += length;
        if shared_len > full.len {
            return Err(MinisoError::Unpack(UnpackError::SharedTooMuch { shared_len, full_len: full.len }));
        }
        b.file(full, e.full_offset(), length);
    }
    for seg in stream.slice(used, stream.len()).segments() {
        b.push(seg.clone());
    }
    let stats = UnpackStats {
        app_version: data.app_version.clone(),
        entries: data.entries.len(),
        xz_len: data.xzpacked.len(),
        unpacked_len,
        part_len,
        shared_len,
    };
    Ok((b.build(), stats))
}

/// Fails with coreos-installer's message unless the plan's bytes hash to `expected`.
pub fn verify(plan: &Plan, expected: &[u8; 32]) -> Result<(), MinisoError> {
    let found = plan_sha256(plan).map_err(|source| MinisoError::Io { what: "the full ISO".into(), source })?;
    if &found != expected {
        return Err(MinisoError::WrongDigest { expected: hex::encode(expected), found: hex::encode(found) });
    }
    Ok(())
}

/// SHA-256 of a plan's bytes: each file range read once, in 1 MiB chunks.
pub fn plan_sha256(plan: &Plan) -> io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    let mut buf = Vec::new();
    for seg in plan.segments() {
        match seg {
            Segment::File { file, offset, len } => {
                buf.resize((*len).min(1 << 20) as usize, 0);
                let mut done = 0u64;
                while done < *len {
                    let n = (*len - done).min(buf.len() as u64) as usize;
                    FileExt::read_exact_at(&file.file, &mut buf[..n], offset + done)
                        .map_err(|e| FileReadError::io(&file.path, e))?;
                    h.update(&buf[..n]);
                    done += n as u64;
                }
            }
            Segment::Part { part, offset, len } => h.update(&part.bytes[*offset..*offset + *len]),
            Segment::Zeros(n) => {
                let mut left = *n;
                while left > 0 {
                    let k = left.min(ZEROS.len() as u64) as usize;
                    h.update(&ZEROS[..k]);
                    left -= k as u64;
                }
            }
        }
    }
    Ok(h.finalize().into())
}

/// Decompresses the packed stream after checking its structure and declared sizes.
fn decompress(xz: &[u8]) -> Result<Vec<u8>, MinisoError> {
    let declared =
        xz_unpacked_len(xz, MAX_UNPACKED_LEN).map_err(|e| MinisoError::Unpack(UnpackError::MalformedStream(e)))?;
    let mut out = Vec::with_capacity(declared as usize);
    lzma_rs::xz_decompress(&mut &xz[..], &mut out).map_err(|e| MinisoError::Unpack(UnpackError::Decompress(e)))?;
    if out.len() as u64 != declared {
        return Err(MinisoError::Unpack(UnpackError::DeclaredLength { len: out.len(), declared }));
    }
    Ok(out)
}

/// Walks an xz stream's structure without decompressing it and returns the total size its
/// LZMA2 chunks declare, failing past `limit`. The decoder (lzma-rs) holds a whole block in
/// memory and stops each chunk at its declared size, so this bounds its memory. Only what
/// coreos-installer writes is accepted: one stream, blocks with a single (LZMA2) filter.
fn xz_unpacked_len(xz: &[u8], limit: u64) -> Result<u64, XzError> {
    struct Cursor<'a>(&'a [u8], usize);
    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> Result<&[u8], XzError> {
            let end = self.1.checked_add(n).filter(|e| *e <= self.0.len()).ok_or(XzError::UnexpectedEnd)?;
            let s = &self.0[self.1..end];
            self.1 = end;
            Ok(s)
        }
        fn u8(&mut self) -> Result<u8, XzError> {
            Ok(self.take(1)?[0])
        }
        fn be16(&mut self) -> Result<u64, XzError> {
            let b = self.take(2)?;
            Ok(u64::from(u16::from_be_bytes([b[0], b[1]])))
        }
        fn multibyte(&mut self) -> Result<u64, XzError> {
            let mut value = 0u64;
            for i in 0..9 {
                let byte = self.u8()?;
                value |= u64::from(byte & 0x7f) << (7 * i);
                if byte & 0x80 == 0 {
                    return Ok(value);
                }
            }
            Err(XzError::Multibyte)
        }
        fn pad4(&mut self, since: usize) -> Result<(), XzError> {
            while (self.1 - since) % 4 != 0 {
                if self.u8()? != 0 {
                    return Err(XzError::Padding);
                }
            }
            Ok(())
        }
    }

    let mut c = Cursor(xz, 0);
    let header = c.take(12).map_err(|_| XzError::NoHeader)?;
    if header[..6] != [0xfd, b'7', b'z', b'X', b'Z', 0] {
        return Err(XzError::NotXz);
    }
    let check_len = match (header[6], header[7]) {
        (0, 0x00) => 0,
        (0, 0x01) => 4,
        (0, 0x04) => 8,
        (0, 0x0a) => 32,
        (a, b) => return Err(XzError::StreamFlags(a, b)),
    };
    let mut total = 0u64;
    let index_start = loop {
        let block_start = c.1;
        let size = c.u8()?;
        if size == 0 {
            break block_start;
        }
        // (size + 1) * 4 bytes in all, with the size byte and a CRC32 at the end
        let header = c.take(usize::from(size) * 4 + 3)?;
        if header[0] & 0x03 != 0 {
            return Err(XzError::FilterChain);
        }
        loop {
            let control = c.u8()?;
            let unpacked = match control {
                0 => break,
                1 | 2 => {
                    let n = c.be16()? + 1;
                    c.take(n as usize)?;
                    n
                }
                0x80..=0xff => {
                    let n = ((u64::from(control & 0x1f) << 16) | c.be16()?) + 1;
                    let packed = c.be16()? + 1;
                    if control >= 0xc0 {
                        c.u8()?; // properties
                    }
                    c.take(packed as usize)?;
                    n
                }
                _ => return Err(XzError::ChunkControl(control)),
            };
            total += unpacked;
            if total > limit {
                return Err(XzError::TooLarge(limit));
            }
        }
        c.pad4(block_start)?;
        c.take(check_len)?;
    };
    let records = c.multibyte()?;
    for _ in 0..records {
        c.multibyte()?;
        c.multibyte()?;
    }
    c.pad4(index_start)?;
    c.take(4)?; // index CRC32
    let index_len = (c.1 - index_start) as u64;
    let footer = c.take(12)?;
    let backward = u64::from(u32::from_le_bytes([footer[4], footer[5], footer[6], footer[7]]));
    if (backward + 1) * 4 != index_len || footer[10..] != *b"YZ" {
        return Err(XzError::Footer);
    }
    if c.1 != xz.len() {
        return Err(XzError::Trailing(xz.len() - c.1));
    }
    Ok(total)
}

/// The decompressed stream as a plan over one part holding everything but its long zero runs;
/// returns the part's size too.
fn compact(stream: &[u8]) -> (Plan, usize) {
    // (start, end, is_zero_run) pieces of the stream
    let mut pieces = Vec::new();
    let (mut data_start, mut i) = (0, 0);
    while let Some(z) = stream[i..].iter().position(|b| *b == 0) {
        let run_start = i + z;
        let run_end = stream[run_start..].iter().position(|b| *b != 0).map_or(stream.len(), |n| run_start + n);
        if run_end - run_start >= ZERO_RUN_MIN {
            pieces.push((data_start, run_start, false));
            pieces.push((run_start, run_end, true));
            data_start = run_end;
        }
        i = run_end;
    }
    pieces.push((data_start, stream.len(), false));

    let mut kept = Vec::new();
    for &(start, end, zero) in &pieces {
        if !zero {
            kept.extend_from_slice(&stream[start..end]);
        }
    }
    let part_len = kept.len();
    let part = Arc::new(Part::new(kept));
    let mut b = PlanBuilder::default();
    let mut at = 0;
    for (start, end, zero) in pieces {
        if zero {
            b.zeros((end - start) as u64);
        } else {
            b.push(Segment::Part { part: part.clone(), offset: at, len: end - start });
            at += end - start;
        }
    }
    (b.build(), part_len)
}

/// Positional reads from a plan, so that [`IsoFs`] can parse an image that exists only as a plan.
impl ReadAt for Plan {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|end| *end <= self.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        let mut seg_start = 0u64;
        for seg in self.segments() {
            if seg_start >= end {
                break;
            }
            let seg_end = seg_start + seg.len();
            if seg_end > offset {
                let from = offset.max(seg_start);
                let to = end.min(seg_end);
                let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
                let within = from - seg_start;
                match seg {
                    Segment::File { file, offset: file_offset, .. } => {
                        FileExt::read_exact_at(&file.file, dst, file_offset + within)?
                    }
                    Segment::Part { part, offset: part_offset, .. } => {
                        let start = part_offset + within as usize;
                        dst.copy_from_slice(&part.bytes[start..start + dst.len()]);
                    }
                    Segment::Zeros(_) => dst.fill(0),
                }
            }
            seg_start = seg_end;
        }
        Ok(())
    }
}

/// `/coreos/kargs.json`, with coreos-installer's field order so that re-serializing it gives
/// the bytes coreos-installer writes.
#[derive(Debug, Deserialize, Serialize)]
struct KargsJson {
    default: String,
    files: Vec<KargsJsonFile>,
    size: usize,
}

#[derive(Debug, Deserialize, Serialize)]
struct KargsJsonFile {
    path: String,
    offset: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pad: Option<char>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end: Option<char>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::chain;
    use proptest::prelude::*;
    use std::io::Write;

    /// bincode 1.x varint, shortest form.
    fn varint(out: &mut Vec<u8>, v: u64) {
        if v < 251 {
            out.push(v as u8);
        } else if v <= u64::from(u16::MAX) {
            out.push(251);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if v <= u64::from(u32::MAX) {
            out.push(252);
            out.extend_from_slice(&(v as u32).to_le_bytes());
        } else {
            out.push(253);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn encode(version: u32, app: &str, entries: &[TableEntry], digest: [u8; 32], xz: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        varint(&mut out, version.into());
        varint(&mut out, app.len() as u64);
        out.extend_from_slice(app.as_bytes());
        varint(&mut out, entries.len() as u64);
        for e in entries {
            varint(&mut out, e.minimal.into());
            varint(&mut out, e.full.into());
            varint(&mut out, e.length.into());
        }
        out.extend_from_slice(&digest);
        varint(&mut out, xz.len() as u64);
        out.extend_from_slice(xz);
        out
    }

    fn entry(minimal: u32, full: u32, length: u32) -> TableEntry {
        TableEntry { minimal, full, length }
    }

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        lzma_rs::xz_compress(&mut &data[..], &mut out).unwrap();
        out
    }

    fn sample() -> Vec<u8> {
        encode(1, "0.17.0", &[entry(1, 3, 2048), entry(2, 5, 300)], [7; 32], &xz(b"hello"))
    }

    #[test]
    fn parses_what_it_encodes() {
        let data = MinisoData::parse(&sample()).unwrap();
        assert_eq!(data.app_version, "0.17.0");
        assert_eq!(data.entries, vec![entry(1, 3, 2048), entry(2, 5, 300)]);
        assert_eq!(data.digest, [7; 32]);
        assert_eq!(data.xzpacked, xz(b"hello"));
        // trailing bytes are ignored
        let mut padded = sample();
        padded.extend_from_slice(&[0xff; 100]);
        assert_eq!(MinisoData::parse(&padded).unwrap(), data);
    }

    #[test]
    fn varints_accept_wide_encodings_and_reject_bad_tags() {
        // version 1 written as a u64
        let mut bytes = MAGIC.to_vec();
        bytes.push(253);
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&sample()[9..]);
        assert_eq!(MinisoData::parse(&bytes).unwrap().entries.len(), 2);

        for tag in [254u8, 255] {
            let mut bytes = MAGIC.to_vec();
            bytes.push(tag);
            bytes.extend_from_slice(&[0; 16]);
            assert_eq!(
                chain(&MinisoData::parse(&bytes).unwrap_err()).to_string(),
                format!(
                    "failed to deserialize header: invalid integer encoding (tag byte {tag:#04x}) for version at byte 8"
                )
            );
        }
        // a u32 field holding more than 32 bits
        let mut bytes = MAGIC.to_vec();
        bytes.push(253);
        bytes.extend_from_slice(&(1u64 << 32).to_le_bytes());
        assert_eq!(
            MinisoData::parse(&bytes).unwrap_err(),
            DataError::Header(Malformed::TooLarge { what: "version", at: 8, value: 1 << 32 })
        );
    }

    #[test]
    fn header_validation_messages() {
        let mut bad_magic = sample();
        bad_magic[0] = b'X';
        assert_eq!(
            chain(&MinisoData::parse(&bad_magic).unwrap_err()).to_string(),
            "validating header: not a miniso file!"
        );
        let v2 = encode(2, "9.9.9", &[entry(1, 3, 2048)], [0; 32], b"");
        assert_eq!(
            chain(&MinisoData::parse(&v2).unwrap_err()).to_string(),
            "validating header: incompatible miniso file version: 1 vs 2 (created by 9.9.9)"
        );
        // The header is decoded whole before it is validated, as bincode does.
        assert!(matches!(MinisoData::parse(&bad_magic[..12]).unwrap_err(), DataError::Header(_)));
        let mut bad_utf8 = MAGIC.to_vec();
        bad_utf8.extend_from_slice(&[1, 2, 0xff, 0xfe]);
        assert_eq!(
            chain(&MinisoData::parse(&bad_utf8).unwrap_err()).to_string(),
            "failed to deserialize header: invalid UTF-8 in app_version"
        );
    }

    #[test]
    fn table_validation_messages() {
        let empty = encode(1, "x", &[], [0; 32], b"");
        assert_eq!(
            chain(&MinisoData::parse(&empty).unwrap_err()).to_string(),
            "validating table: table is empty; ISOs have no files in common?"
        );
        let overlap = encode(1, "x", &[entry(10, 0, 2049), entry(11, 0, 1)], [0; 32], b"");
        assert_eq!(
            chain(&MinisoData::parse(&overlap).unwrap_err()).to_string(),
            "validating table: Files at offsets 20480 and 22528 overlap"
        );
        let unsorted = encode(1, "x", &[entry(11, 0, 1), entry(10, 0, 1)], [0; 32], b"");
        assert_eq!(MinisoData::parse(&unsorted).unwrap_err(), DataError::Overlap { first: 22528, second: 20480 });
        // touching is fine, and so are zero-length entries at the same block
        let touching = encode(1, "x", &[entry(10, 0, 2048), entry(11, 0, 0), entry(11, 0, 5)], [0; 32], b"");
        assert_eq!(MinisoData::parse(&touching).unwrap().entries.len(), 3);
        // a length that cannot be: checked before anything is reserved
        let mut huge = encode(1, "x", &[], [0; 32], b"");
        huge.truncate(8 + 1 + 2);
        varint(&mut huge, MAX_TABLE_ENTRIES as u64 + 1);
        assert_eq!(
            chain(&MinisoData::parse(&huge).unwrap_err()).to_string(),
            "validating table: table has 65537 entries, more than the 65536 supported"
        );
    }

    #[test]
    fn truncation_and_size_limit() {
        let full = sample();
        for n in 0..full.len() {
            let err = MinisoData::parse(&full[..n]).unwrap_err();
            assert!(
                matches!(
                    err,
                    DataError::Header(Malformed::Truncated { .. }) | DataError::Data(Malformed::Truncated { .. })
                ),
                "{n}: {err}"
            );
        }
        // an xzpacked length pointing past the 1 MiB limit, in a longer file
        let mut big = encode(1, "x", &[entry(1, 1, 1)], [0; 32], &[]);
        big.pop();
        varint(&mut big, DATA_MAX_SIZE as u64);
        big.resize(DATA_MAX_SIZE + 100, 0);
        assert_eq!(
            chain(&MinisoData::parse(&big).unwrap_err()).to_string(),
            "failed to deserialize data: collision with data size limit at offset 1048576"
        );
        // the same, in a file that simply ends: truncated
        big.truncate(DATA_MAX_SIZE);
        assert!(matches!(MinisoData::parse(&big).unwrap_err(), DataError::Data(Malformed::Truncated { .. })));
        // a structure of exactly 1 MiB is fine
        let mut exact = encode(1, "x", &[entry(1, 1, 1)], [0; 32], &[]);
        exact.pop();
        let payload = DATA_MAX_SIZE - exact.len() - 5;
        varint(&mut exact, payload as u64);
        exact.resize(DATA_MAX_SIZE, 0);
        exact.extend_from_slice(&[1; 10]);
        assert_eq!(MinisoData::parse(&exact).unwrap().xzpacked.len(), payload);
    }

    fn base_file(content: &[u8]) -> Arc<BaseFile> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(content).unwrap();
        Arc::new(BaseFile {
            path: "full.iso".into(),
            file: f,
            len: content.len() as u64,
            sha256: Sha256::digest(content).into(),
        })
    }

    /// A fake "full ISO" and a minimal image made of its blocks 2 and 5 plus own bytes.
    fn fake() -> (Arc<BaseFile>, Vec<u8>, MinisoData) {
        let full: Vec<u8> = (0..8 * 2048u32).map(|i| (i % 251) as u8 + 1).collect();
        let mut minimal = vec![0u8; 9000];
        minimal[..5].copy_from_slice(b"start");
        minimal[2048..4096].copy_from_slice(&full[2 * 2048..3 * 2048]); // entry(1, 2, 2048)
        minimal[4096..4096 + 100].copy_from_slice(&full[5 * 2048..5 * 2048 + 100]); // entry(2, 5, 100)
        minimal[8990..].copy_from_slice(b"0123456789");
        let mut stream = minimal[..2048].to_vec();
        stream.extend_from_slice(&minimal[4196..]);
        let data = MinisoData {
            app_version: "test".into(),
            entries: vec![entry(1, 2, 2048), entry(2, 5, 100)],
            digest: Sha256::digest(&minimal).into(),
            xzpacked: xz(&stream),
        };
        (base_file(&full), minimal, data)
    }

    #[test]
    fn unpack_interleaves_stream_and_shared_files() {
        let (full, minimal, data) = fake();
        let (plan, stats) = unpack(&data, &full).unwrap();
        assert_eq!(plan.read_all().unwrap(), minimal);
        verify(&plan, &data.digest).unwrap();
        assert_eq!(stats.shared_len, 2148);
        assert_eq!(stats.unpacked_len, 9000 - 2148);
        // The stream is "start", 6837 zeros, "0123456789": only 15 bytes are kept in memory,
        // the zeros are split by the table into the two runs around the shared files.
        assert_eq!(stats.part_len, 15);
        let zeros: Vec<u64> =
            plan.segments().iter().filter_map(|s| if let Segment::Zeros(n) = s { Some(*n) } else { None }).collect();
        assert_eq!(zeros, [2043, 4794]);
        // reads through ReadAt agree with the bytes, across segment boundaries
        for (start, len) in [(0, 9000), (2040, 20), (4090, 4000), (8999, 1), (9000, 0)] {
            let mut buf = vec![0u8; len];
            ReadAt::read_exact_at(&plan, &mut buf, start as u64).unwrap();
            assert_eq!(buf, &minimal[start..start + len]);
        }
        let mut buf = [0u8; 2];
        assert!(ReadAt::read_exact_at(&plan, &mut buf, 8999).is_err());
        assert!(ReadAt::read_exact_at(&plan, &mut buf, u64::MAX).is_err());
    }

    #[test]
    fn unpack_and_verify_failures() {
        let (full, _, data) = fake();
        let (plan, _) = unpack(&data, &full).unwrap();
        let err = chain(&verify(&plan, &[0; 32]).unwrap_err()).to_string();
        assert!(err.starts_with(&format!("wrong final digest: expected {}, found ", "00".repeat(32))), "{err}");

        // a shared file past the end of the full ISO
        let mut past = data.clone();
        past.entries[1] = entry(2, 7, 4096);
        let err = chain(&unpack(&past, &full).unwrap_err()).to_string();
        assert_eq!(
            err,
            "unpacking miniso: copying full ISO file at offset 14336: 4096 bytes reach past the end of the full ISO (16384 bytes)"
        );
        // a stream too short for the table's gaps
        let mut short = data.clone();
        short.entries = vec![entry(10, 2, 1)];
        let err = chain(&unpack(&short, &full).unwrap_err()).to_string();
        assert_eq!(
            err,
            "unpacking miniso: copying 20480 packed bytes at offset 0: the packed stream ends after 6852 bytes"
        );
        // a hand-built table that `parse` would have refused
        let mut unsorted = data.clone();
        unsorted.entries.reverse();
        let err = chain(&unpack(&unsorted, &full).unwrap_err()).to_string();
        assert_eq!(err, "reading miniso data file: validating table: Files at offsets 4096 and 2048 overlap");
        // garbage instead of xz
        let mut garbage = data.clone();
        garbage.xzpacked = b"not xz at all".to_vec();
        let err = chain(&unpack(&garbage, &full).unwrap_err()).to_string();
        assert_eq!(err, "unpacking miniso: malformed packed stream: not an xz stream");
        // a broken check
        let mut corrupt = data;
        let n = corrupt.xzpacked.len();
        corrupt.xzpacked[n - 20] ^= 1;
        assert!(unpack(&corrupt, &full).is_err());
    }

    /// An xz stream whose one LZMA2 chunk declares 2 MiB (an uncompressed chunk header is
    /// limited to 64 KiB, so use a compressed-chunk header) is refused before decoding if the
    /// total would pass the limit.
    #[test]
    fn declared_sizes_are_bounded_before_decoding() {
        let stream = xz(&vec![b'a'; 200_000]);
        assert_eq!(xz_unpacked_len(&stream, u64::MAX).unwrap(), 200_000);
        assert_eq!(xz_unpacked_len(&stream, 199_999).unwrap_err(), XzError::TooLarge(199_999));
        let mut trailing = stream.clone();
        trailing.extend_from_slice(&[0; 4]);
        assert_eq!(xz_unpacked_len(&trailing, u64::MAX).unwrap_err(), XzError::Trailing(4));
        for n in 0..stream.len() {
            assert!(xz_unpacked_len(&stream[..n], u64::MAX).is_err(), "{n}");
        }
    }

    #[test]
    fn overlay_on_a_plan() {
        let (full, minimal, data) = fake();
        let (plan, _) = unpack(&data, &full).unwrap();
        let part = Arc::new(Part::new(b"XYZ".to_vec()));
        let seg = |len| vec![Segment::Part { part: part.clone(), offset: 0, len }];
        let out = plan.overlay(&mut [(4095, seg(3)), (0, seg(2)), (8997, seg(3))]).unwrap();
        let mut expect = minimal.clone();
        expect[4095..4098].copy_from_slice(b"XYZ");
        expect[0..2].copy_from_slice(b"XY");
        expect[8997..9000].copy_from_slice(b"XYZ");
        assert_eq!(out.read_all().unwrap(), expect);
        assert!(plan.overlay(&mut [(8998, seg(3))]).is_err());
        assert!(plan.overlay(&mut [(10, seg(3)), (12, seg(1))]).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = MinisoData::parse(&bytes);
        }

        #[test]
        fn parse_of_mutated_data_never_panics(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = sample();
            for (at, value) in edits {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let n = cut.index(bytes.len() + 1);
            if let Ok(data) = MinisoData::parse(&bytes[..n]) {
                prop_assert!(validate_table(&data.entries).is_ok());
            }
        }

        /// Whatever the mutations, unpacking errors or yields a plan of consistent length.
        #[test]
        fn unpack_of_mutated_stream_never_panics(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let (full, _, mut data) = fake();
            for (at, value) in edits {
                let i = at.index(data.xzpacked.len());
                data.xzpacked[i] = value;
            }
            if let Ok((plan, stats)) = unpack(&data, &full) {
                prop_assert_eq!(plan.len(), stats.unpacked_len + stats.shared_len);
            }
        }
    }
}
