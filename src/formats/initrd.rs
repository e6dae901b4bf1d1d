//! `newc` cpio archives as appended to a CoreOS live initramfs.
//!
//! The kernel unpacks an initramfs buffer that is a sequence of cpio archives, each either
//! uncompressed or compressed, separated by optional NUL padding; later copies of a path win
//! (spec-images.md §5.1). bootstream uses that to customize images without rewriting them: the
//! discovery Ignition config travels as a small gzip-compressed archive holding `config.ign`,
//! written into the ISO's Ignition embed area or appended to the PXE initrd (spec-images.md §2.8,
//! spec-images.md §5.3).
//!
//! - [`ArchiveBuilder`] writes such an archive: newc, mtime 0, gzip with a fixed header, padded
//!   with zeros to a multiple of 4 bytes so that whatever is appended after it stays 4-aligned.
//!   Identical input gives identical bytes, so archives can be cached and their length known
//!   before a response starts.
//! - [`ignition_archive`] is the one archive the ISO and PXE paths carry.
//! - [`read_initrd`] decodes a concatenated initrd the way coreos-installer does (spec-images
//!   spec-images.md §2.6), for tests and for validating what we serve. It is bounded against hostile input.
//!
//! xz and zstd members are recognized but not decoded: no decoder for them is among this
//! crate's dependencies, and nothing bootstream writes uses them. They produce
//! [`InitrdError::UnsupportedCompression`] rather than a misleading cpio error.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Read, Write};

use cpio::newc::{self, ModeFileType};
use flate2::{Compression, GzBuilder};

/// Name of the Ignition config inside the archive; Ignition's `dracut` module reads
/// `/config.ign` from the initramfs root.
pub const IGNITION_CONFIG_PATH: &str = "config.ign";

/// Longest member path accepted when building (Linux `PATH_MAX`, including the NUL).
const MAX_PATH_LEN: usize = 4095;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;

/// Errors of building or reading initrd archives.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitrdError {
    /// A member path the kernel would not unpack where intended.
    #[error("invalid archive member path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// A symlink target that cannot be stored.
    #[error("invalid symlink target {target:?} for {path:?}: {reason}")]
    InvalidSymlinkTarget { path: String, target: String, reason: &'static str },
    /// Permission bits outside `0o7777` (the file type is chosen by the builder method).
    #[error("invalid permission bits {mode:#o} for {path:?}: only 0o7777 may be set")]
    InvalidMode { path: String, mode: u32 },
    /// A member larger than the 32-bit size field of a newc header.
    #[error("{path:?} is {size} bytes; a newc archive member holds at most 4294967295 bytes")]
    MemberTooLarge { path: String, size: usize },
    /// The same path added twice; the kernel would keep the last one silently.
    #[error("archive member {path:?} was added twice")]
    DuplicatePath { path: String },
    /// An I/O error while writing or compressing an archive.
    #[error("writing archive")]
    Write(#[source] io::Error),
    /// A compressed member in a format this reader does not decode.
    #[error("{format}-compressed archive at offset {offset} is not supported by this reader")]
    UnsupportedCompression { format: &'static str, offset: usize },
    /// An uncompressed archive must start 4-aligned, or the kernel treats it as compressed data.
    #[error("uncompressed archive at offset {offset} is not 4-byte aligned")]
    Misaligned { offset: usize },
    /// A malformed newc header or a truncated archive.
    #[error("reading cpio archive starting at offset {offset}")]
    Cpio {
        offset: usize,
        #[source]
        source: io::Error,
    },
    /// A member whose declared size exceeds the remaining input.
    #[error("member {path:?} of the archive at offset {offset} declares {declared} bytes but only {available} remain")]
    Truncated { offset: usize, path: String, declared: u64, available: u64 },
    /// A member whose declared size exceeds [`ReadLimits::max_member_size`].
    #[error("member {path:?} of the archive at offset {offset} declares {declared} bytes, over the limit of {limit}")]
    MemberOverLimit { offset: usize, path: String, declared: u64, limit: u64 },
    /// More decompressed data than [`ReadLimits::max_decompressed`].
    #[error("compressed archive at offset {offset} expands beyond the limit of {limit} bytes")]
    DecompressedOverLimit { offset: usize, limit: u64 },
    /// Non-zero data after the cpio trailer inside a compressed member (the kernel refuses it).
    #[error("found trailing garbage inside compressed archive at offset {offset}")]
    TrailingGarbage { offset: usize },
    /// A corrupt gzip member.
    #[error("decompressing gzip member at offset {offset}")]
    Gzip {
        offset: usize,
        #[source]
        source: io::Error,
    },
}

/// Builds a gzip-compressed newc archive for appending to an initramfs.
///
/// Members are written in the order they were added; the kernel needs a directory to exist
/// before files in it, so add parents first unless they exist in the image already (for
/// example `etc`). Paths are relative to the initramfs root, like `etc/motd`.
///
/// Each member is written out as it is added, so a ramdisk of a few hundred members copies each
/// file once. (The cpio crate's writer formats every header field into a `String` of its own:
/// a third of a 100-host ramdisk's build. Its reader checks what this writes, in the tests.)
#[derive(Debug, Clone, Default)]
pub struct ArchiveBuilder {
    /// The members so far, without the trailer.
    members: Vec<u8>,
    count: u32,
    paths: HashSet<String>,
}

impl ArchiveBuilder {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a regular file with permission bits `mode_perm` (e.g. `0o644`).
    pub fn add_file(&mut self, path: &str, mode_perm: u32, bytes: &[u8]) -> Result<&mut Self, InitrdError> {
        check_member_path(path)?;
        if mode_perm & !0o7777 != 0 {
            return Err(InitrdError::InvalidMode { path: path.to_owned(), mode: mode_perm });
        }
        if u32::try_from(bytes.len()).is_err() {
            return Err(InitrdError::MemberTooLarge { path: path.to_owned(), size: bytes.len() });
        }
        self.push(path, u32::from(ModeFileType::Regular) | mode_perm, bytes)
    }

    /// Adds a directory, mode `040755`.
    pub fn add_dir(&mut self, path: &str) -> Result<&mut Self, InitrdError> {
        check_member_path(path)?;
        self.push(path, u32::from(ModeFileType::Directory) | 0o755, &[])
    }

    /// Adds a symbolic link `path` → `target` (mode `0120777`; the target is the member's data).
    pub fn add_symlink(&mut self, path: &str, target: &str) -> Result<&mut Self, InitrdError> {
        check_member_path(path)?;
        let bad =
            |reason| InitrdError::InvalidSymlinkTarget { path: path.to_owned(), target: target.to_owned(), reason };
        if target.is_empty() {
            return Err(bad("empty"));
        }
        if target.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        if target.len() > MAX_PATH_LEN {
            return Err(bad("longer than 4095 bytes"));
        }
        self.push(path, u32::from(ModeFileType::Symlink) | 0o777, target.as_bytes())
    }

    /// Fields as assisted-image-service writes them: ino is a 1-based counter, nlink 1,
    /// uid/gid/mtime/devices 0, check 0.
    fn push(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<&mut Self, InitrdError> {
        if !self.paths.insert(path.to_owned()) {
            return Err(InitrdError::DuplicatePath { path: path.to_owned() });
        }
        // At most u32::MAX members can be told apart; later ones share an ino, which is harmless
        // with nlink 1 (the kernel only links members with nlink >= 2).
        self.count = self.count.saturating_add(1);
        write_member(&mut self.members, path, self.count, mode, data);
        Ok(self)
    }

    /// The uncompressed newc archive (members, then the `TRAILER!!!` entry).
    pub fn finish_uncompressed(&self) -> Result<Vec<u8>, InitrdError> {
        let mut out = Vec::with_capacity(self.members.len() + TRAILER_LEN);
        out.extend_from_slice(&self.members);
        write_member(&mut out, TRAILER_NAME, 0, 0, &[]);
        Ok(out)
    }

    /// The archive compressed with gzip (header mtime 0, OS 255), then padded with zeros to a
    /// multiple of 4 bytes. Byte-for-byte deterministic.
    ///
    /// Archives of up to [`FAST_GZIP_MAX_INPUT`] are compressed at level 1, larger ones at the
    /// default level 6. These archives are built when an InfraEnv or one of its NMStateConfigs
    /// changes, before its image's status is written: for the 100-host ramdisk, level 1 takes 38%
    /// of level 6's time and its output is 3 KB larger. Only large archives come near the size
    /// limits, and those keep level 6's ratio.
    pub fn finish_gzip(&self) -> Result<Vec<u8>, InitrdError> {
        let mut trailer = Vec::with_capacity(TRAILER_LEN);
        write_member(&mut trailer, TRAILER_NAME, 0, 0, &[]);
        let level = if self.members.len() + trailer.len() <= FAST_GZIP_MAX_INPUT {
            Compression::fast()
        } else {
            Compression::default()
        };
        let mut encoder = GzBuilder::new()
            .mtime(0)
            .operating_system(255)
            .write(Vec::with_capacity(self.members.len() / 2 + 64), level);
        encoder.write_all(&self.members).map_err(InitrdError::Write)?;
        encoder.write_all(&trailer).map_err(InitrdError::Write)?;
        let mut out = encoder.finish().map_err(InitrdError::Write)?;
        out.resize(out.len().next_multiple_of(4), 0);
        Ok(out)
    }
}

/// Largest uncompressed archive [`ArchiveBuilder::finish_gzip`] compresses at level 1: half of
/// the 256 KiB that an Ignition archive, and a live ISO's Ignition embed area, may hold. Compressed
/// at any level, an archive that small fits, so the faster level never decides whether it does.
pub const FAST_GZIP_MAX_INPUT: usize = 128 << 10;

/// A newc (`070701`) header: the magic and thirteen 8-digit hex fields.
const HEADER_LEN: usize = 110;
/// The name of the member that ends an archive (ino and mode 0, nlink 1).
const TRAILER_NAME: &str = "TRAILER!!!";
const TRAILER_LEN: usize = (HEADER_LEN + TRAILER_NAME.len() + 1).next_multiple_of(4);

/// Appends one member (nlink 1) to `out`, which ends 4-aligned: header, name and NUL, zeros to
/// a multiple of 4, data, zeros to a multiple of 4. The callers checked that `path` and `data`
/// fit the header's 32-bit fields.
fn write_member(out: &mut Vec<u8>, path: &str, ino: u32, mode: u32, data: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let name_size = path.len() + 1;
    out.reserve((HEADER_LEN + name_size).next_multiple_of(4) + data.len().next_multiple_of(4));
    out.extend_from_slice(b"070701");
    // ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
    // namesize, check.
    for value in [ino, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, 0, 0, name_size as u32, 0] {
        out.extend((0..8).rev().map(|digit| HEX[(value >> (4 * digit)) as usize & 0xf]));
    }
    out.extend_from_slice(path.as_bytes());
    out.push(0);
    out.resize(out.len().next_multiple_of(4), 0);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// Rejects member paths that the kernel would place somewhere unexpected, or that a newc
/// header cannot carry.
fn check_member_path(path: &str) -> Result<(), InitrdError> {
    let bad = |reason| Err(InitrdError::InvalidPath { path: path.to_owned(), reason });
    if path.is_empty() {
        return bad("empty");
    }
    if path.contains('\0') {
        return bad("contains a NUL byte");
    }
    if path.len() > MAX_PATH_LEN {
        return bad("longer than 4095 bytes");
    }
    if path.starts_with('/') {
        return bad("must be relative to the initramfs root (no leading '/')");
    }
    if path == "TRAILER!!!" {
        return bad("is the cpio end-of-archive marker");
    }
    if path.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return bad("has an empty, '.' or '..' component");
    }
    Ok(())
}

/// The Ignition archive the ISO embed area and the PXE initrd carry: a single member
/// `config.ign`, mode `0100644`, gzip-compressed and 4-padded (spec-images.md §2.8).
///
/// An empty config yields an archive without members, like assisted-image-service.
///
/// # Panics
///
/// If `config` is 4 GiB or larger, which a newc header cannot describe. Rendered configs are
/// bounded long before that (the archive must fit 256 KiB); [`try_ignition_archive`] reports
/// it as an error instead.
pub fn ignition_archive(config: &[u8]) -> Vec<u8> {
    match try_ignition_archive(config) {
        Ok(archive) => archive,
        Err(e) => panic!("cannot build the Ignition archive: {e}"),
    }
}

/// [`ignition_archive`], with every failure (only an impossible-to-store config, in practice)
/// as an error.
pub fn try_ignition_archive(config: &[u8]) -> Result<Vec<u8>, InitrdError> {
    let mut builder = ArchiveBuilder::new();
    if !config.is_empty() {
        builder.add_file(IGNITION_CONFIG_PATH, 0o644, config)?;
    }
    builder.finish_gzip()
}

/// Bounds for [`read_initrd_with_limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Largest declared size of a single member.
    pub max_member_size: u64,
    /// Most bytes decompressed from all compressed members together, padding included.
    pub max_decompressed: u64,
}

impl Default for ReadLimits {
    /// 128 MiB per member and 512 MiB decompressed: far above any archive bootstream appends
    /// (Ignition configs, keyfiles, an nmstatectl binary) while keeping a hostile input from
    /// exhausting memory.
    fn default() -> Self {
        Self { max_member_size: 128 << 20, max_decompressed: 512 << 20 }
    }
}

/// Reads the regular files of a (possibly concatenated) initrd, with default [`ReadLimits`].
///
/// Follows coreos-installer's reader (spec-images.md §2.6): NUL runs between members are
/// skipped; gzip members and uncompressed newc archives (which must start 4-aligned) are
/// decoded; a later copy of a path replaces an earlier one; directories and symlinks are
/// ignored; non-zero data after the trailer inside a compressed member is an error. Paths are
/// returned exactly as stored.
pub fn read_initrd(data: &[u8]) -> Result<BTreeMap<String, Vec<u8>>, InitrdError> {
    read_initrd_with_limits(data, ReadLimits::default())
}

/// [`read_initrd`] with explicit bounds.
pub fn read_initrd_with_limits(data: &[u8], limits: ReadLimits) -> Result<BTreeMap<String, Vec<u8>>, InitrdError> {
    let mut files = BTreeMap::new();
    let mut decompressed_budget = limits.max_decompressed;
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let zeros = rest.iter().take_while(|&&b| b == 0).count();
        if zeros > 0 {
            pos += zeros;
            continue;
        }
        if rest.starts_with(GZIP_MAGIC) {
            pos += read_gzip_member(rest, pos, &limits, &mut decompressed_budget, &mut files)?;
        } else if rest.starts_with(XZ_MAGIC) {
            return Err(InitrdError::UnsupportedCompression { format: "xz", offset: pos });
        } else if rest.starts_with(ZSTD_MAGIC) || is_zstd_skippable(rest) {
            return Err(InitrdError::UnsupportedCompression { format: "zstd", offset: pos });
        } else {
            if pos % 4 != 0 {
                return Err(InitrdError::Misaligned { offset: pos });
            }
            pos += read_uncompressed(rest, pos, &limits, &mut files)?;
        }
    }
    Ok(files)
}

fn is_zstd_skippable(data: &[u8]) -> bool {
    data.len() >= 5
        && data
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .is_some_and(|b| u32::from_le_bytes(b) & 0xffff_fff0 == 0x184d_2a50)
}

/// Decodes one uncompressed archive at the start of `data`; returns the bytes it used.
fn read_uncompressed(
    data: &[u8],
    offset: usize,
    limits: &ReadLimits,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Result<usize, InitrdError> {
    let mut counting = Counting { inner: data, count: 0 };
    read_cpio_entries(&mut counting, offset, limits, Some(data.len() as u64), files)?;
    // The reader never reads past the trailer's padding, so this is where the next member
    // (or NUL padding) begins.
    Ok(usize::try_from(counting.count).unwrap_or(data.len()).min(data.len()))
}

/// Decodes one gzip member at the start of `data`; returns the compressed bytes it used.
fn read_gzip_member(
    data: &[u8],
    offset: usize,
    limits: &ReadLimits,
    budget: &mut u64,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Result<usize, InitrdError> {
    // bufread::GzDecoder consumes exactly one member from the slice, so what remains of it
    // tells where the next member starts.
    let mut decoder =
        Budgeted { inner: flate2::bufread::GzDecoder::new(data), budget: *budget, exceeded: false, failure: None };
    let result =
        read_cpio_entries(&mut decoder, offset, limits, None, files).and_then(|()| expect_zeros(&mut decoder, offset));
    if decoder.exceeded {
        return Err(InitrdError::DecompressedOverLimit { offset, limit: limits.max_decompressed });
    }
    if let Some(source) = decoder.failure.take() {
        return Err(InitrdError::Gzip { offset, source });
    }
    result?;
    *budget = decoder.budget;
    let rest = decoder.inner.into_inner();
    Ok(data.len() - rest.len())
}

/// Reads a decompressed stream to its end, refusing anything but zero padding.
fn expect_zeros<R: Read>(reader: &mut R, offset: usize) -> Result<(), InitrdError> {
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).map_err(|source| InitrdError::Cpio { offset, source })?;
        if n == 0 {
            return Ok(());
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Err(InitrdError::TrailingGarbage { offset });
        }
    }
}

/// A decompressor wrapper that fails once more than `budget` bytes were produced and keeps
/// the decompressor's own error, which the cpio reader would otherwise blur.
struct Budgeted<R> {
    inner: R,
    budget: u64,
    exceeded: bool,
    failure: Option<io::Error>,
}

impl<R: Read> Read for Budgeted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) => {
                let kind = e.kind();
                self.failure = Some(e);
                return Err(io::Error::new(kind, "gzip decompression failed"));
            }
        };
        match self.budget.checked_sub(n as u64) {
            Some(left) => {
                self.budget = left;
                Ok(n)
            }
            None => {
                self.exceeded = true;
                Err(io::Error::other("decompressed size limit exceeded"))
            }
        }
    }
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}

/// Reads newc entries up to and including the trailer, keeping regular files (last copy
/// wins). `available` is the input length when known (uncompressed input), which bounds
/// declared sizes before anything is read.
fn read_cpio_entries<R: Read>(
    reader: &mut R,
    offset: usize,
    limits: &ReadLimits,
    available: Option<u64>,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Result<(), InitrdError> {
    let cpio_err = |source| InitrdError::Cpio { offset, source };
    let mut reader = Counting { inner: reader, count: 0 };
    loop {
        let start = reader.count;
        let mut entry_reader = newc::Reader::new(&mut reader).map_err(cpio_err)?;
        let entry = entry_reader.entry().clone();
        let declared = u64::from(entry.file_size());
        if let Some(total) = available {
            // Header and name as stored; dracut's extra name padding only makes this smaller
            // than what was actually read, which keeps the bound conservative.
            let header = (110 + entry.name().len() as u64 + 1).next_multiple_of(4);
            let left = total.saturating_sub(start + header);
            if declared > left {
                return Err(InitrdError::Truncated {
                    offset,
                    path: entry.name().to_owned(),
                    declared,
                    available: left,
                });
            }
        }
        if declared > limits.max_member_size {
            return Err(InitrdError::MemberOverLimit {
                offset,
                path: entry.name().to_owned(),
                declared,
                limit: limits.max_member_size,
            });
        }
        if entry.is_trailer() {
            entry_reader.finish().map_err(cpio_err)?;
            return Ok(());
        }
        if entry.mode() & S_IFMT == S_IFREG {
            let mut contents = Vec::new();
            (&mut entry_reader).take(declared).read_to_end(&mut contents).map_err(cpio_err)?;
            if contents.len() as u64 != declared {
                return Err(InitrdError::Truncated {
                    offset,
                    path: entry.name().to_owned(),
                    declared,
                    available: contents.len() as u64,
                });
            }
            entry_reader.finish().map_err(cpio_err)?;
            files.insert(entry.name().to_owned(), contents);
        } else {
            entry_reader.finish().map_err(cpio_err)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        let mut b = ArchiveBuilder::new();
        for bad in ["", "/etc/x", "a//b", "a/./b", "../x", "a/..", "a\0b", "TRAILER!!!"] {
            assert!(matches!(b.add_file(bad, 0o644, b""), Err(InitrdError::InvalidPath { .. })), "{bad:?} accepted");
        }
        assert!(matches!(b.add_file("x", 0o10644, b""), Err(InitrdError::InvalidMode { .. })));
        b.add_file("x", 0o644, b"1").unwrap();
        assert!(matches!(b.add_dir("x"), Err(InitrdError::DuplicatePath { .. })));
        assert!(matches!(b.add_symlink("y", ""), Err(InitrdError::InvalidSymlinkTarget { .. })));
    }

    #[test]
    fn header_fields() {
        let mut b = ArchiveBuilder::new();
        b.add_dir("etc").unwrap();
        b.add_file("etc/a", 0o600, b"hello").unwrap();
        b.add_symlink("etc/l", "a").unwrap();
        let raw = b.finish_uncompressed().unwrap();
        let mut cursor = io::Cursor::new(&raw[..]);
        let mut seen = Vec::new();
        loop {
            let r = newc::Reader::new(&mut cursor).unwrap();
            let e = r.entry().clone();
            r.finish().unwrap();
            if e.is_trailer() {
                break;
            }
            assert_eq!((e.uid(), e.gid(), e.mtime(), e.nlink()), (0, 0, 0, 1));
            seen.push((e.name().to_owned(), e.mode(), e.ino(), e.file_size()));
        }
        assert_eq!(
            seen,
            [
                ("etc".to_owned(), 0o40755, 1, 0),
                ("etc/a".to_owned(), 0o100600, 2, 5),
                ("etc/l".to_owned(), 0o120777, 3, 1),
            ]
        );
        assert_eq!(cursor.position() as usize, raw.len());
        assert_eq!(raw.len() % 4, 0);
    }

    /// The cpio crate's writer is the oracle: every name and data length modulo 4, each kind.
    #[test]
    fn members_are_byte_for_byte_what_the_cpio_crate_writes() {
        let mut ours = ArchiveBuilder::new();
        let mut theirs = Vec::new();
        let mut ino = 0;
        let mut expect = |path: &str, mode: u32, data: &[u8]| {
            ino += 1;
            let b = newc::Builder::new(path).ino(ino).mode(mode).uid(0).gid(0).nlink(1).mtime(0);
            let mut w = b.write(std::mem::take(&mut theirs), data.len() as u32);
            w.write_all(data).unwrap();
            theirs = w.finish().unwrap();
        };
        for name_len in 1..=8 {
            let dir = "d".repeat(name_len);
            ours.add_dir(&dir).unwrap();
            expect(&dir, 0o40755, b"");
            for data_len in [0, 1, 2, 3, 4, 5, 70_001] {
                let path = format!("{dir}/{data_len}");
                let data: Vec<u8> = (0..data_len).map(|i| (i * 7) as u8).collect();
                ours.add_file(&path, 0o600, &data).unwrap();
                expect(&path, 0o100600, &data);
            }
            let link = format!("{dir}/link");
            ours.add_symlink(&link, &dir).unwrap();
            expect(&link, 0o120777, dir.as_bytes());
        }
        theirs = newc::trailer(theirs).unwrap();
        assert_eq!(ours.finish_uncompressed().unwrap(), theirs);
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&ours.finish_gzip().unwrap()[..]).read_to_end(&mut unzipped).unwrap();
        assert_eq!(unzipped, theirs);
        assert_eq!(ArchiveBuilder::new().finish_uncompressed().unwrap(), newc::trailer(Vec::new()).unwrap());
    }

    #[test]
    fn gzip_is_padded_and_deterministic() {
        for len in 0..16 {
            let config = vec![b'x'; len * 37];
            let a = ignition_archive(&config);
            assert_eq!(a.len() % 4, 0);
            assert_eq!(a, try_ignition_archive(&config).unwrap());
        }
    }

    /// Level 1 up to [`FAST_GZIP_MAX_INPUT`] uncompressed bytes, the default level beyond, as the
    /// gzip header's XFL byte records it (4: fastest, 0: other levels); both decode to the archive.
    #[test]
    fn gzip_level_follows_the_archive_size() {
        let archive_of = |len: usize| {
            let mut b = ArchiveBuilder::new();
            b.add_file("f", 0o644, &(0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>()).unwrap();
            b
        };
        // Header, name "f" and its NUL, padded: 112 bytes; then the data; then the trailer.
        let at_limit = FAST_GZIP_MAX_INPUT - 112 - TRAILER_LEN;
        for (len, xfl) in [(0, 4), (1000, 4), (at_limit, 4), (at_limit + 4, 0), (1 << 20, 0)] {
            let b = archive_of(len);
            let plain = b.finish_uncompressed().unwrap();
            assert_eq!(plain.len() <= FAST_GZIP_MAX_INPUT, xfl == 4, "{len}");
            let gz = b.finish_gzip().unwrap();
            assert_eq!(gz[..10], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255], "header for {len} bytes of data");
            let mut unzipped = Vec::new();
            flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut unzipped).unwrap();
            assert_eq!(unzipped, plain);
        }
    }

    #[test]
    fn budget_applies_to_gzip() {
        let mut b = ArchiveBuilder::new();
        b.add_file("big", 0o644, &vec![0u8; 1 << 20]).unwrap();
        let archive = b.finish_gzip().unwrap();
        let limits = ReadLimits { max_member_size: u64::MAX, max_decompressed: 4096 };
        assert!(matches!(read_initrd_with_limits(&archive, limits), Err(InitrdError::DecompressedOverLimit { .. })));
        let limits = ReadLimits { max_member_size: 1000, max_decompressed: u64::MAX };
        assert!(matches!(read_initrd_with_limits(&archive, limits), Err(InitrdError::MemberOverLimit { .. })));
    }
}
