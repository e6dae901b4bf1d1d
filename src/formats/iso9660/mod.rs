//! ISO 9660 reader for CoreOS live ISOs, plus a small deterministic [`writer`].
//!
//! We read only the primary volume descriptor's directory tree (ISO level-1 8.3 names such as
//! `COREOS/KARGS.JSO`), and we read it the way coreos-installer does: the byte offsets we patch
//! when customizing an image must be exactly the ones `coreos-installer iso ...` would patch, and
//! an image it rejects as "not a CoreOS ISO" should be rejected here too. Rock Ridge and Joliet
//! are ignored (System Use bytes are skipped by record length), as coreos-installer ignores them.
//!
//! Images are untrusted input (operators point us at arbitrary files), so every length and offset
//! read from disk is bounds-checked against the image before it is used; malformed or truncated
//! data yields an [`IsoError`], never a panic, an unbounded allocation or an endless walk.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

pub mod eltorito;
pub mod writer;

/// ISO 9660 logical block size. The standard allows others; CoreOS (and coreos-installer) use
/// only this one, and the primary descriptor's block-size field is not consulted.
pub const SECTOR: u64 = 2048;

/// The volume descriptor set starts after the 32 KiB system area.
const DESCRIPTOR_SET_LBA: u64 = 16;
/// Real images have 2-4 descriptors; a missing terminator must not make us scan a whole disk.
const MAX_DESCRIPTORS: usize = 64;
/// ISO 9660 allows 8 levels and Rock Ridge images rarely exceed a dozen; deeper means a
/// crafted or corrupt image, and bounding it bounds our recursion.
const MAX_DEPTH: usize = 64;
/// Bound on records returned by [`IsoFs::walk`], so overlapping directory extents in a crafted
/// image cannot make the walk quadratic in the image size.
const MAX_WALK_RECORDS: usize = 1 << 20;

/// Offset of the root directory record inside the primary volume descriptor.
const PVD_ROOT_RECORD: usize = 156;
/// Fixed part of a directory record, before the file identifier.
const RECORD_HEADER_LEN: usize = 33;
/// Directory-record flag bit: the record is a directory.
const FLAG_DIRECTORY: u8 = 0x02;

/// Why an image could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    /// The path, or one of its intermediate directories, does not exist. Callers treat this as
    /// "feature absent" (an older ISO), unlike every other variant, which means corruption.
    #[error("{0}")]
    NotFound(String),
    /// Reading the underlying file failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The image is not a well-formed ISO 9660 image (or not the subset we support).
    #[error("{0}")]
    Invalid(String),
    /// A volume descriptor (counted from 1) is malformed.
    #[error("volume descriptor #{number}")]
    Descriptor {
        number: usize,
        #[source]
        source: DescriptorError,
    },
    /// A record of a directory's data is malformed.
    #[error("directory {name}")]
    Directory {
        name: String,
        #[source]
        source: RecordError,
    },
    /// The El Torito boot catalog is malformed.
    #[error("El Torito boot catalog at block {lba}")]
    BootCatalog {
        lba: u32,
        #[source]
        source: eltorito::CatalogError,
    },
    /// The primary descriptor claims more blocks than the file holds: a partial download or copy.
    /// The wording is coreos-installer's, which its tests (and ours) match exactly.
    #[error("ISO image is incomplete")]
    Incomplete { volume_bytes: u64, image_len: u64 },
    /// A file read into memory (metadata such as JSON) is larger than the caller allows.
    #[error("{name} is {length} bytes, larger than the {limit}-byte limit for this file")]
    TooLarge { name: String, length: u64, limit: u64 },
}

/// Why a volume descriptor could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescriptorError {
    #[error("boot record")]
    BootHeader(#[source] HeaderError),
    #[error("boot record: boot system ID")]
    BootSystemId(#[source] InvalidName),
    #[error("boot record: boot ID")]
    BootId(#[source] InvalidName),
    #[error("primary descriptor")]
    PrimaryHeader(#[source] HeaderError),
    #[error("system ID")]
    SystemId(#[source] InvalidName),
    #[error("volume ID")]
    VolumeId(#[source] InvalidName),
    #[error("root directory record is not a directory")]
    RootNotADirectory,
    #[error("root directory record")]
    Root(#[source] RecordError),
}

/// The `CD001` identifier or version 1 every descriptor carries is not there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The identifier as found (lossy UTF-8).
    #[error("unknown descriptor ID {0:?}")]
    UnknownId(String),
    #[error("unknown descriptor version {0}")]
    UnknownVersion(u8),
}

/// A name or identifier with characters ISO 9660 does not allow; the raw bytes as lossy UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid string name {0:?}")]
pub struct InvalidName(pub String);

/// Why a directory record could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("incomplete directory record at byte {at}; corrupt ISO?")]
    Incomplete { at: u64 },
    #[error("directory record of {len} bytes at byte {at} is shorter than the {RECORD_HEADER_LEN}-byte header")]
    Short { len: usize, at: u64 },
    #[error("directory record at byte {at} has invalid length {len}")]
    InvalidLength { len: usize, at: u64 },
    #[error("file identifier of {name_len} bytes overruns the {record_len}-byte record at byte {at}")]
    IdentifierOverrun { name_len: usize, record_len: usize, at: u64 },
    #[error("empty file identifier in record at byte {at}")]
    EmptyIdentifier { at: u64 },
    #[error(transparent)]
    Name(#[from] InvalidName),
}

impl IsoError {
    /// True if the error only says that a path does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, IsoError::NotFound(_))
    }
}

/// Positional reads from an image: a [`File`] in production, a byte buffer in tests and fuzzers.
pub trait ReadAt {
    /// Current size of the underlying data in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error if fewer bytes are available.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for Vec<u8> {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.as_slice().read_exact_at(buf, offset)
    }
}

impl ReadAt for &[u8] {
    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).ok().filter(|s| *s <= self.len());
        match start.and_then(|s| self.get(s..s.checked_add(buf.len())?)) {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

/// A directory record of the primary tree: a file or a directory and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Normalized identifier (`;1` and a trailing `.` removed), e.g. `IGNITION.IMG`; `.` for the root.
    pub name: String,
    pub is_dir: bool,
    /// First logical block of the extent.
    pub lba: u32,
    /// Data length in bytes (for a directory, the size of its record area).
    pub length: u32,
}

impl Record {
    /// Absolute byte offset of the extent in the image.
    pub fn byte_offset(&self) -> u64 {
        u64::from(self.lba) * SECTOR
    }

    /// Absolute byte offset just past the extent's data.
    pub fn end_offset(&self) -> u64 {
        self.byte_offset() + u64::from(self.length)
    }
}

/// The fields of the primary volume descriptor that we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryDescriptor {
    pub system_id: String,
    pub volume_id: String,
    pub volume_space_size: u32,
    pub root: Record,
}

/// One entry of the volume descriptor set, in on-disk order (the terminator is not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    Primary(PrimaryDescriptor),
    /// El Torito boot record; the boot catalog itself is not parsed.
    Boot {
        boot_system_id: String,
        boot_id: String,
    },
    /// Joliet and other supplementary descriptors are recorded, not parsed.
    Supplementary,
    Unknown {
        type_id: u8,
    },
}

/// An opened ISO 9660 image: its descriptor set and access to its primary directory tree.
#[derive(Debug)]
pub struct IsoFs<S = File> {
    source: S,
    image_len: u64,
    descriptors: Vec<Descriptor>,
    primary: PrimaryDescriptor,
}

impl IsoFs<File> {
    /// Opens an image file; see [`IsoFs::from_source`].
    pub fn open(file: File) -> Result<IsoFs<File>, IsoError> {
        IsoFs::from_source(file)
    }

    /// The underlying file, e.g. for serving byte ranges of it.
    pub fn file(&self) -> &File {
        &self.source
    }
}

impl<S: ReadAt> IsoFs<S> {
    /// Reads the volume descriptor set and checks that the image holds the whole volume.
    pub fn from_source(source: S) -> Result<IsoFs<S>, IsoError> {
        let image_len =
            source.size().map_err(|source| IsoError::Io { what: "getting the image size".into(), source })?;
        let descriptors = read_descriptors(&source, image_len)?;
        let primary = descriptors
            .iter()
            .find_map(|d| match d {
                Descriptor::Primary(p) => Some(p.clone()),
                _ => None,
            })
            .ok_or_else(|| IsoError::Invalid("no primary volume descriptor found in ISO".into()))?;
        let volume_bytes = u64::from(primary.volume_space_size) * SECTOR;
        if volume_bytes > image_len {
            return Err(IsoError::Incomplete { volume_bytes, image_len });
        }
        Ok(IsoFs { source, image_len, descriptors, primary })
    }

    pub fn volume_id(&self) -> &str {
        &self.primary.volume_id
    }

    pub fn system_id(&self) -> &str {
        &self.primary.system_id
    }

    /// Size of the volume in 2048-byte blocks, as the primary descriptor states it.
    pub fn volume_space_size(&self) -> u32 {
        self.primary.volume_space_size
    }

    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descriptors
    }

    /// The root directory record (named `.`).
    pub fn root(&self) -> &Record {
        &self.primary.root
    }

    /// Length in bytes of the image as it was when opened.
    pub fn image_len(&self) -> u64 {
        self.image_len
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Looks a path up in the primary tree: `/`-separated, exact (upper-case 8.3) names, empty
    /// and `.` components ignored, `..` going up (never above the root); `""` and `/` are the root.
    /// A missing component is [`IsoError::NotFound`], with coreos-installer's messages.
    pub fn get_path(&self, path: &str) -> Result<Record, IsoError> {
        let mut components = path_components(path);
        let Some(last) = components.pop() else {
            return Ok(self.primary.root.clone());
        };
        let mut dir = self.primary.root.clone();
        for component in &components {
            let record = self
                .find_in_dir(&dir, component)?
                .ok_or_else(|| IsoError::NotFound(format!("intermediate directory {component} does not exist")))?;
            if !record.is_dir {
                return Err(IsoError::NotFound(format!("component {component:?} in path {path} is not a directory")));
            }
            dir = record;
        }
        self.find_in_dir(&dir, last)?
            .ok_or_else(|| IsoError::NotFound(format!("no record for {last} in directory {}", components.join("/"))))
    }

    /// The records of a directory in on-disk order, without `.` and `..`.
    pub fn list_dir(&self, dir: &Record) -> Result<Vec<Record>, IsoError> {
        let data = self.read_dir_bytes(dir)?;
        RecordIter::new(&data, dir).collect()
    }

    /// Every record of the primary tree, depth-first pre-order, records in on-disk order, with
    /// `/`-joined paths relative to the root (`COREOS`, `COREOS/FEATURES.JSO`, ...).
    pub fn walk(&self) -> Result<Vec<(String, Record)>, IsoError> {
        let mut out = Vec::new();
        let mut visited = HashSet::from([self.primary.root.lba]);
        self.walk_dir(&self.primary.root, "", 0, &mut visited, &mut out)?;
        Ok(out)
    }

    /// Reads a whole file into memory, refusing files longer than `limit` bytes. Meant for small
    /// metadata files (JSON); large artifacts are served or streamed by offset instead.
    pub fn read_file(&self, record: &Record, limit: u64) -> Result<Vec<u8>, IsoError> {
        if record.is_dir {
            return Err(IsoError::Invalid(format!("{} is a directory, not a file", record.name)));
        }
        if u64::from(record.length) > limit {
            return Err(IsoError::TooLarge { name: record.name.clone(), length: record.length.into(), limit });
        }
        let mut buf = vec![0; record.length as usize];
        self.read_at(record.byte_offset(), &mut buf, &format!("file {}", record.name))?;
        Ok(buf)
    }

    /// Fills `buf` from absolute byte `offset`, failing (without reading) if the range is not
    /// entirely inside the image. `what` names the data for the error message.
    pub fn read_at(&self, offset: u64, buf: &mut [u8], what: &str) -> Result<(), IsoError> {
        read_checked(&self.source, self.image_len, offset, buf, what)
    }

    fn read_dir_bytes(&self, dir: &Record) -> Result<Vec<u8>, IsoError> {
        if !dir.is_dir {
            return Err(IsoError::Invalid(format!("{} is a file, not a directory", dir.name)));
        }
        // Checked before allocating: the length field is untrusted and may claim up to 4 GiB.
        check_range(self.image_len, dir.byte_offset(), dir.length.into(), || format!("directory {}", dir.name))?;
        let mut buf = vec![0; dir.length as usize];
        self.read_at(dir.byte_offset(), &mut buf, &format!("directory {}", dir.name))?;
        Ok(buf)
    }

    /// First record named `name` in `dir`. Stops at the match, like coreos-installer, so a
    /// corrupt record after it does not hide it.
    fn find_in_dir(&self, dir: &Record, name: &str) -> Result<Option<Record>, IsoError> {
        let data = self.read_dir_bytes(dir)?;
        for record in RecordIter::new(&data, dir) {
            let record = record?;
            if record.name == name {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    fn walk_dir(
        &self,
        dir: &Record,
        prefix: &str,
        depth: usize,
        visited: &mut HashSet<u32>,
        out: &mut Vec<(String, Record)>,
    ) -> Result<(), IsoError> {
        if depth > MAX_DEPTH {
            return Err(IsoError::Invalid(format!(
                "directory {prefix} is nested more than {MAX_DEPTH} levels deep; corrupt ISO?"
            )));
        }
        let data = self.read_dir_bytes(dir)?;
        for record in RecordIter::new(&data, dir) {
            let record = record?;
            let path = if prefix.is_empty() { record.name.clone() } else { format!("{prefix}/{}", record.name) };
            if out.len() >= MAX_WALK_RECORDS {
                return Err(IsoError::Invalid(format!(
                    "more than {MAX_WALK_RECORDS} records in the directory tree; corrupt ISO?"
                )));
            }
            out.push((path.clone(), record.clone()));
            // An empty directory has no records to revisit, so only extents with data count.
            if record.is_dir && record.length > 0 {
                if !visited.insert(record.lba) {
                    return Err(IsoError::Invalid(format!(
                        "directory {path} points at the extent of another directory (block {}); corrupt ISO?",
                        record.lba
                    )));
                }
                self.walk_dir(&record, &path, depth + 1, visited, out)?;
            }
        }
        Ok(())
    }
}

/// Fails unless `offset..offset+len` lies inside an image of `image_len` bytes.
fn check_range(image_len: u64, offset: u64, len: u64, what: impl FnOnce() -> String) -> Result<(), IsoError> {
    match offset.checked_add(len) {
        Some(end) if end <= image_len => Ok(()),
        _ => Err(IsoError::Invalid(format!(
            "{} (bytes {offset}..{}) extends past the end of the image ({image_len} bytes); truncated or corrupt ISO?",
            what(),
            offset.saturating_add(len),
        ))),
    }
}

fn read_checked<S: ReadAt>(
    source: &S,
    image_len: u64,
    offset: u64,
    buf: &mut [u8],
    what: &str,
) -> Result<(), IsoError> {
    check_range(image_len, offset, buf.len() as u64, || what.to_string())?;
    source
        .read_exact_at(buf, offset)
        .map_err(|source| IsoError::Io { what: format!("reading {what} at byte {offset}"), source })
}

/// Reads descriptors from LBA 16 up to (not including) the terminator.
fn read_descriptors<S: ReadAt>(source: &S, image_len: u64) -> Result<Vec<Descriptor>, IsoError> {
    const TYPE_BOOT: u8 = 0;
    const TYPE_PRIMARY: u8 = 1;
    const TYPE_SUPPLEMENTARY: u8 = 2;
    const TYPE_TERMINATOR: u8 = 255;

    let mut descriptors = Vec::new();
    let mut sector = [0u8; SECTOR as usize];
    for index in 0..MAX_DESCRIPTORS {
        let number = index + 1;
        let offset = (DESCRIPTOR_SET_LBA + index as u64) * SECTOR;
        read_checked(source, image_len, offset, &mut sector, &format!("volume descriptor #{number}"))?;
        let descriptor = match sector[0] {
            TYPE_TERMINATOR => return Ok(descriptors),
            TYPE_BOOT => parse_boot_descriptor(&sector),
            TYPE_PRIMARY => parse_primary_descriptor(&sector).map(Descriptor::Primary),
            TYPE_SUPPLEMENTARY => Ok(Descriptor::Supplementary),
            type_id => Ok(Descriptor::Unknown { type_id }),
        }
        .map_err(|source| IsoError::Descriptor { number, source })?;
        descriptors.push(descriptor);
    }
    Err(IsoError::Invalid(format!(
        "no volume descriptor set terminator within the first {MAX_DESCRIPTORS} descriptors"
    )))
}

/// Checks the `CD001` identifier and version 1 that every descriptor carries.
fn verify_descriptor_header(sector: &[u8]) -> Result<(), HeaderError> {
    let id = &sector[1..6];
    if id != b"CD001" {
        return Err(HeaderError::UnknownId(String::from_utf8_lossy(id).into_owned()));
    }
    if sector[6] != 1 {
        return Err(HeaderError::UnknownVersion(sector[6]));
    }
    Ok(())
}

fn parse_boot_descriptor(sector: &[u8]) -> Result<Descriptor, DescriptorError> {
    verify_descriptor_header(sector).map_err(DescriptorError::BootHeader)?;
    Ok(Descriptor::Boot {
        boot_system_id: parse_a_string(&sector[7..39]).map_err(DescriptorError::BootSystemId)?,
        boot_id: parse_a_string(&sector[39..71]).map_err(DescriptorError::BootId)?,
    })
}

fn parse_primary_descriptor(sector: &[u8]) -> Result<PrimaryDescriptor, DescriptorError> {
    verify_descriptor_header(sector).map_err(DescriptorError::PrimaryHeader)?;
    let system_id = parse_a_string(&sector[8..40]).map_err(DescriptorError::SystemId)?;
    // Strictly d-characters, but lower case and `-` are common (`fedora-coreos-...`), so the
    // lenient a-character set is used, as coreos-installer does.
    let volume_id = parse_a_string(&sector[40..72]).map_err(DescriptorError::VolumeId)?;
    // Both-endian field; the little-endian half is authoritative for us.
    let volume_space_size = le_u32(&sector[80..84]);
    // The root record is 34 bytes in practice; its own length byte is what bounds it.
    let at = DESCRIPTOR_SET_LBA * SECTOR + PVD_ROOT_RECORD as u64;
    let root = match parse_record(&sector[PVD_ROOT_RECORD..], at, true) {
        Ok(Some(record)) if record.is_dir => record,
        Ok(_) => return Err(DescriptorError::RootNotADirectory),
        Err(e) => return Err(DescriptorError::Root(e)),
    };
    Ok(PrimaryDescriptor { system_id, volume_id, volume_space_size, root })
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut le = [0u8; 4];
    le.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(le)
}

/// Iterates over the records of a directory's data, skipping `.` and `..`.
struct RecordIter<'a> {
    data: &'a [u8],
    pos: usize,
    dir: &'a Record,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    fn new(data: &'a [u8], dir: &'a Record) -> RecordIter<'a> {
        RecordIter { data, pos: 0, dir, failed: false }
    }

    fn next_record(&mut self) -> Result<Option<Record>, RecordError> {
        while self.pos < self.data.len() {
            let len = usize::from(self.data[self.pos]);
            if len == 0 {
                // Records never straddle blocks: a zero length byte pads to the next block.
                let next = (self.pos / SECTOR as usize + 1) * SECTOR as usize;
                if next >= self.data.len() {
                    break;
                }
                self.pos = next;
                continue;
            }
            if len > self.data.len() - self.pos {
                return Err(RecordError::Incomplete { at: self.dir.byte_offset() + self.pos as u64 });
            }
            let start = self.pos;
            self.pos += len;
            let at = self.dir.byte_offset() + start as u64;
            if let Some(record) = parse_record(&self.data[start..start + len], at, false)? {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }
}

impl Iterator for RecordIter<'_> {
    type Item = Result<Record, IsoError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let result = self.next_record().map_err(|source| {
            self.failed = true;
            IsoError::Directory { name: self.dir.name.clone(), source }
        });
        result.transpose()
    }
}

/// Parses one directory record (`raw` is exactly the record's bytes). Returns `None` for the
/// `.`/`..` entries, except that the PVD's root record (`is_root`) is reported as `.`.
fn parse_record(raw: &[u8], at: u64, is_root: bool) -> Result<Option<Record>, RecordError> {
    if raw.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Short { len: raw.len(), at });
    }
    let record_len = usize::from(raw[0]);
    if record_len < RECORD_HEADER_LEN || record_len > raw.len() {
        return Err(RecordError::InvalidLength { len: record_len, at });
    }
    let lba = le_u32(&raw[2..6]);
    let length = le_u32(&raw[10..14]);
    let flags = raw[25];
    let name_len = usize::from(raw[32]);
    let Some(identifier) = raw[RECORD_HEADER_LEN..record_len].get(..name_len) else {
        return Err(RecordError::IdentifierOverrun { name_len, record_len, at });
    };
    let name = match identifier {
        [0] if is_root => ".".to_string(),
        [0] | [1] => return Ok(None),
        [] => return Err(RecordError::EmptyIdentifier { at }),
        _ => parse_file_identifier(identifier)?,
    };
    Ok(Some(Record { name, is_dir: flags & FLAG_DIRECTORY != 0, lba, length }))
}

/// Characters of the ISO 9660 "file" set beyond letters, digits, `_` and space. Accepted in any
/// name because mastering tools put them there (coreos-installer accepts the same set).
const FILE_CHARS: &[u8] = b"!\"%&'()*+,-.:<=>?";

/// Normalizes a file identifier the way coreos-installer (and Linux's isofs) does: drop a `;1`
/// version, then one trailing `.` (the mandatory separator of extension-less names); a remaining
/// `;` or `/` becomes `.`; a NUL ends the name. Case is kept.
fn parse_file_identifier(raw: &[u8]) -> Result<String, InvalidName> {
    let mut bytes = raw;
    if let Some(stripped) = bytes.strip_suffix(b";1") {
        bytes = stripped;
    }
    if let Some(stripped) = bytes.strip_suffix(b".") {
        bytes = stripped;
    }
    let mut name = String::with_capacity(bytes.len());
    for &byte in bytes {
        match byte {
            0 => break,
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b' ' || FILE_CHARS.contains(&b) => {
                name.push(char::from(b))
            }
            b';' | b'/' => name.push('.'),
            _ => {
                return Err(InvalidName(String::from_utf8_lossy(raw).into_owned()));
            }
        }
    }
    Ok(name)
}

/// Parses a space-padded a-character field (system/volume/boot IDs); a NUL ends it.
fn parse_a_string(raw: &[u8]) -> Result<String, InvalidName> {
    let mut s = String::with_capacity(raw.len());
    for &byte in raw {
        match byte {
            0 => break,
            b if b.is_ascii_alphanumeric()
                || b == b'_'
                || b == b' '
                || b == b';'
                || b == b'/'
                || FILE_CHARS.contains(&b) =>
            {
                s.push(char::from(b))
            }
            _ => {
                return Err(InvalidName(String::from_utf8_lossy(raw).into_owned()));
            }
        }
    }
    s.truncate(s.trim_end_matches(' ').len());
    Ok(s)
}

/// Splits a lookup path into components, resolving `.` and `..` (never above the root).
fn path_components(path: &str) -> Vec<&str> {
    let mut components = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                components.pop();
            }
            name => components.push(name),
        }
    }
    components
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
