//! El Torito: how a CD image tells firmware what to boot.
//!
//! An El Torito image has a *boot record* volume descriptor (type 0, boot system identifier
//! `EL TORITO SPECIFICATION`) whose bytes 71..75 hold the block of the *boot catalog*. The
//! catalog is a list of 32-byte entries:
//!
//! 1. the validation entry: header id 1, platform id, a 24-byte id string, a checksum making the
//!    sixteen little-endian 16-bit words of the entry sum to zero, then `55 AA`;
//! 2. the initial/default entry (boot indicator `0x88` or `0x00`, media type, load segment,
//!    system type, sector count in 512-byte units, block of the boot image);
//! 3. optionally, sections: a header (`0x90`, or `0x91` for the last one; platform id; number of
//!    entries; 28-byte id string) followed by that many section entries, laid out like the
//!    default entry plus 20 bytes of selection criteria.
//!
//! CoreOS x86_64 images carry a BIOS default entry for `isolinux/isolinux.bin` (no emulation,
//! 4 sectors) and one UEFI (platform `0xEF`) section for `images/efiboot.img`.
//!
//! ISOLINUX also expects a *boot info table* in its own image (bytes 8..64), which mastering
//! tools patch in: block of the primary volume descriptor, block of the boot file, its length,
//! and the 32-bit sum of its little-endian words from byte 64 on, then 40 zero bytes. ISOLINUX
//! uses it to find itself on the disc and to verify it was loaded whole.
//!
//! This module parses catalogs read from images (images named by block) and encodes catalogs
//! for [`super::writer::IsoBuilder`] (images named by block once the layout is known).

use std::fmt;

use super::{Descriptor, IsoError, IsoFs, ReadAt, SECTOR};

/// Boot system identifier of an El Torito boot record (zero padded to 32 bytes on disk).
pub const BOOT_SYSTEM_ID: &str = "EL TORITO SPECIFICATION";
/// Size of every catalog entry.
pub const ENTRY_LEN: usize = 32;
/// Block of the primary volume descriptor (the first descriptor), as a boot info table states it.
pub const PVD_LBA: u32 = 16;
/// Catalogs are one block in practice; this bounds what we read and parse (512 entries).
const MAX_CATALOG_BLOCKS: u64 = 8;

const HEADER_VALIDATION: u8 = 0x01;
const HEADER_MORE: u8 = 0x90;
const HEADER_LAST: u8 = 0x91;
const EXTENSION: u8 = 0x44;
const BOOTABLE: u8 = 0x88;
const NOT_BOOTABLE: u8 = 0x00;
/// Media-type bit: a selection-criteria extension entry follows this entry.
const MEDIA_CONTINUATION: u8 = 0x20;
const KEY: [u8; 2] = [0x55, 0xAA];

/// Why a boot catalog read from an image could not be parsed. Entries are counted from 0 (the
/// validation entry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog continues past the {len} bytes read (entry {index}); corrupt catalog?")]
    Truncated { len: usize, index: usize },
    #[error("validation entry has header id {0:#04x}, expected 0x01")]
    ValidationHeader(u8),
    #[error("validation entry ends in {:02X} {:02X}, expected 55 AA", .0[0], .0[1])]
    ValidationKey([u8; 2]),
    #[error("validation entry checksum is wrong")]
    ValidationChecksum,
    #[error("entry {index} has header id {id:#04x}, expected a section header")]
    SectionHeader { index: usize, id: u8 },
    #[error("entry {index} is a selection-criteria extension, which is not supported")]
    Extension { index: usize },
    #[error("entry {index} has boot indicator {indicator:#04x}, expected 0x88 or 0x00")]
    BootIndicator { index: usize, indicator: u8 },
    #[error("entry {index} is followed by selection-criteria extensions, which are not supported")]
    Continuation { index: usize },
    #[error("entry {index} has unknown boot media type {media}")]
    MediaType { index: usize, media: u8 },
}

/// Why a catalog or a boot info table cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("media flags {flags:#04x} of the entry for block {image} use bits other than 4, 6 and 7")]
    MediaFlags { flags: u8, image: u32 },
    /// A section (counted from 1) with more entries than its header can count.
    #[error("section {section} has {entries} entries; at most 65535 fit")]
    TooManyEntries { section: usize, entries: usize },
    #[error("a boot file needs at least 64 bytes for a boot info table, this one has {0}")]
    BootFileTooShort(usize),
    #[error("boot file of 4 GiB or more")]
    BootFileTooLarge,
}

/// Platform id of a validation entry or section header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform(pub u8);

impl Platform {
    /// 80x86 PC BIOS.
    pub const X86: Platform = Platform(0);
    pub const POWERPC: Platform = Platform(1);
    pub const MAC: Platform = Platform(2);
    /// UEFI.
    pub const EFI: Platform = Platform(0xEF);
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Platform::X86 => f.write_str("BIOS"),
            Platform::POWERPC => f.write_str("PowerPC"),
            Platform::MAC => f.write_str("Mac"),
            Platform::EFI => f.write_str("UEFI"),
            Platform(other) => write!(f, "platform {other:#04x}"),
        }
    }
}

/// Boot media type (low nibble of an entry's byte 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulation {
    /// The image is loaded as is (`sector_count` 512-byte sectors at the load segment).
    NoEmulation,
    Floppy1200,
    Floppy1440,
    Floppy2880,
    HardDisk,
}

impl Emulation {
    fn from_code(code: u8) -> Option<Emulation> {
        Some(match code {
            0 => Emulation::NoEmulation,
            1 => Emulation::Floppy1200,
            2 => Emulation::Floppy1440,
            3 => Emulation::Floppy2880,
            4 => Emulation::HardDisk,
            _ => return None,
        })
    }

    fn code(self) -> u8 {
        match self {
            Emulation::NoEmulation => 0,
            Emulation::Floppy1200 => 1,
            Emulation::Floppy1440 => 2,
            Emulation::Floppy2880 => 3,
            Emulation::HardDisk => 4,
        }
    }
}

impl fmt::Display for Emulation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Emulation::NoEmulation => "no emulation",
            Emulation::Floppy1200 => "1.2M floppy",
            Emulation::Floppy1440 => "1.44M floppy",
            Emulation::Floppy2880 => "2.88M floppy",
            Emulation::HardDisk => "hard disk",
        })
    }
}

/// One boot entry (the default entry or a section entry). `I` names the boot image: its block
/// (`u32`) in a catalog read from an image, its path in one given to the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEntry<I> {
    pub bootable: bool,
    pub emulation: Emulation,
    /// Bits 4, 6 and 7 of the media-type byte (reserved / ATAPI driver / SCSI drivers), kept as read.
    pub media_flags: u8,
    /// Real-mode segment to load to; 0 means the traditional 0x7C0.
    pub load_segment: u16,
    /// Partition type for hard-disk emulation.
    pub system_type: u8,
    /// Number of 512-byte sectors the BIOS loads (no emulation); 0 for many UEFI entries.
    pub sector_count: u16,
    pub image: I,
    /// Bytes 12..32 of a section entry: selection-criteria type and vendor criteria. Zero in the
    /// default entry, where those bytes are unused.
    pub selection_criteria: [u8; 20],
}

impl<I> BootEntry<I> {
    /// A bootable no-emulation entry loading `sector_count` 512-byte sectors.
    pub fn no_emulation(image: I, sector_count: u16) -> BootEntry<I> {
        BootEntry {
            bootable: true,
            emulation: Emulation::NoEmulation,
            media_flags: 0,
            load_segment: 0,
            system_type: 0,
            sector_count,
            image,
            selection_criteria: [0; 20],
        }
    }

    fn map<J, E>(self, f: &mut impl FnMut(&I) -> Result<J, E>) -> Result<BootEntry<J>, E> {
        Ok(BootEntry {
            image: f(&self.image)?,
            bootable: self.bootable,
            emulation: self.emulation,
            media_flags: self.media_flags,
            load_segment: self.load_segment,
            system_type: self.system_type,
            sector_count: self.sector_count,
            selection_criteria: self.selection_criteria,
        })
    }
}

/// A section: a header and its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootSection<I> {
    pub platform: Platform,
    /// Id string of the section header.
    pub id: [u8; 28],
    pub entries: Vec<BootEntry<I>>,
}

/// A boot catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootCatalog<I> {
    /// Platform of the validation entry, which is also the default entry's platform.
    pub platform: Platform,
    /// Id string of the validation entry (manufacturer/developer).
    pub id: [u8; 24],
    pub default: BootEntry<I>,
    pub sections: Vec<BootSection<I>>,
}

impl<I> BootCatalog<I> {
    /// A catalog with only a default entry for `platform`.
    pub fn new(platform: Platform, default: BootEntry<I>) -> BootCatalog<I> {
        BootCatalog { platform, id: [0; 24], default, sections: Vec::new() }
    }

    /// Appends an entry for `platform`, in a new section (one section per platform, as mastering
    /// tools usually write them) or in the last one if it is for the same platform.
    pub fn push(&mut self, platform: Platform, entry: BootEntry<I>) {
        match self.sections.last_mut() {
            Some(section) if section.platform == platform => section.entries.push(entry),
            _ => self.sections.push(BootSection { platform, id: [0; 28], entries: vec![entry] }),
        }
    }

    /// Every entry with its platform: the default entry first, then section entries in order.
    pub fn entries(&self) -> impl Iterator<Item = (Platform, &BootEntry<I>)> {
        std::iter::once((self.platform, &self.default))
            .chain(self.sections.iter().flat_map(|s| s.entries.iter().map(move |e| (s.platform, e))))
    }

    /// Number of entries (default entry included).
    pub fn len(&self) -> usize {
        1 + self.sections.iter().map(|s| s.entries.len()).sum::<usize>()
    }

    /// Never true: a catalog always has its default entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Size of the encoded catalog in bytes (before padding to a block).
    pub fn encoded_len(&self) -> usize {
        ENTRY_LEN * (2 + self.sections.iter().map(|s| 1 + s.entries.len()).sum::<usize>())
    }

    /// The same catalog with every image renamed by `f`, in [`BootCatalog::entries`] order.
    pub fn map_images<J, E>(self, mut f: impl FnMut(&I) -> Result<J, E>) -> Result<BootCatalog<J>, E> {
        let default = self.default.map(&mut f)?;
        let mut sections = Vec::with_capacity(self.sections.len());
        for section in self.sections {
            let entries = section.entries.into_iter().map(|e| e.map(&mut f)).collect::<Result<Vec<_>, E>>()?;
            sections.push(BootSection { platform: section.platform, id: section.id, entries });
        }
        Ok(BootCatalog { platform: self.platform, id: self.id, default, sections })
    }
}

impl BootCatalog<u32> {
    /// The catalog's bytes, zero-padded to whole blocks.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(self.encoded_len().next_multiple_of(SECTOR as usize));
        let mut validation = [0u8; ENTRY_LEN];
        validation[0] = HEADER_VALIDATION;
        validation[1] = self.platform.0;
        validation[4..28].copy_from_slice(&self.id);
        validation[30..32].copy_from_slice(&KEY);
        let sum = word_sum(&validation);
        validation[28..30].copy_from_slice(&0u16.wrapping_sub(sum).to_le_bytes());
        out.extend_from_slice(&validation);
        out.extend_from_slice(&encode_entry(&self.default, false)?);
        for (index, section) in self.sections.iter().enumerate() {
            let count = u16::try_from(section.entries.len())
                .map_err(|_| EncodeError::TooManyEntries { section: index + 1, entries: section.entries.len() })?;
            let mut header = [0u8; ENTRY_LEN];
            header[0] = if index + 1 == self.sections.len() { HEADER_LAST } else { HEADER_MORE };
            header[1] = section.platform.0;
            header[2..4].copy_from_slice(&count.to_le_bytes());
            header[4..32].copy_from_slice(&section.id);
            out.extend_from_slice(&header);
            for entry in &section.entries {
                out.extend_from_slice(&encode_entry(entry, true)?);
            }
        }
        out.resize(out.len().next_multiple_of(SECTOR as usize), 0);
        Ok(out)
    }
}

fn encode_entry(entry: &BootEntry<u32>, with_criteria: bool) -> Result<[u8; ENTRY_LEN], EncodeError> {
    if entry.media_flags & !0xD0 != 0 {
        return Err(EncodeError::MediaFlags { flags: entry.media_flags, image: entry.image });
    }
    let mut raw = [0u8; ENTRY_LEN];
    raw[0] = if entry.bootable { BOOTABLE } else { NOT_BOOTABLE };
    raw[1] = entry.emulation.code() | entry.media_flags;
    raw[2..4].copy_from_slice(&entry.load_segment.to_le_bytes());
    raw[4] = entry.system_type;
    raw[6..8].copy_from_slice(&entry.sector_count.to_le_bytes());
    raw[8..12].copy_from_slice(&entry.image.to_le_bytes());
    if with_criteria {
        raw[12..32].copy_from_slice(&entry.selection_criteria);
    }
    Ok(raw)
}

/// Sum of the little-endian 16-bit words of `bytes`, modulo 2^16.
fn word_sum(bytes: &[u8]) -> u16 {
    bytes.chunks(2).fold(0u16, |sum, w| sum.wrapping_add(u16::from_le_bytes([w[0], *w.get(1).unwrap_or(&0)])))
}

/// Parses a catalog; `bytes` holds its blocks (at least one entry's worth past its end is not
/// needed: parsing stops after the last section).
pub fn parse_catalog(bytes: &[u8]) -> Result<BootCatalog<u32>, CatalogError> {
    let entry = |index: usize| -> Result<&[u8], CatalogError> {
        bytes.get(index * ENTRY_LEN..(index + 1) * ENTRY_LEN).ok_or(CatalogError::Truncated { len: bytes.len(), index })
    };
    let validation = entry(0)?;
    if validation[0] != HEADER_VALIDATION {
        return Err(CatalogError::ValidationHeader(validation[0]));
    }
    if validation[30..32] != KEY {
        return Err(CatalogError::ValidationKey([validation[30], validation[31]]));
    }
    if word_sum(validation) != 0 {
        return Err(CatalogError::ValidationChecksum);
    }
    let platform = Platform(validation[1]);
    let mut id = [0u8; 24];
    id.copy_from_slice(&validation[4..28]);
    let default = parse_entry(entry(1)?, 1, false)?;
    let mut catalog = BootCatalog { platform, id, default, sections: Vec::new() };
    let mut index = 2;
    loop {
        // A catalog that fills its blocks exactly ends without a terminating zero entry.
        if index * ENTRY_LEN >= bytes.len() {
            break;
        }
        let header = entry(index)?;
        index += 1;
        let last = match header[0] {
            HEADER_MORE => false,
            HEADER_LAST => true,
            // No (more) sections: the rest of the block is zero.
            0 => break,
            id => return Err(CatalogError::SectionHeader { index: index - 1, id }),
        };
        let count = usize::from(u16::from_le_bytes([header[2], header[3]]));
        let mut section_id = [0u8; 28];
        section_id.copy_from_slice(&header[4..32]);
        let mut section =
            BootSection { platform: Platform(header[1]), id: section_id, entries: Vec::with_capacity(count) };
        for _ in 0..count {
            section.entries.push(parse_entry(entry(index)?, index, true)?);
            index += 1;
        }
        catalog.sections.push(section);
        if last {
            break;
        }
    }
    Ok(catalog)
}

fn parse_entry(raw: &[u8], index: usize, section: bool) -> Result<BootEntry<u32>, CatalogError> {
    let bootable = match raw[0] {
        BOOTABLE => true,
        NOT_BOOTABLE => false,
        EXTENSION => return Err(CatalogError::Extension { index }),
        indicator => return Err(CatalogError::BootIndicator { index, indicator }),
    };
    let media = raw[1];
    if section && media & MEDIA_CONTINUATION != 0 {
        return Err(CatalogError::Continuation { index });
    }
    let emulation = Emulation::from_code(media & 0x0F).ok_or(CatalogError::MediaType { index, media: media & 0x0F })?;
    let mut selection_criteria = [0u8; 20];
    if section {
        selection_criteria.copy_from_slice(&raw[12..32]);
    }
    Ok(BootEntry {
        bootable,
        emulation,
        media_flags: media & 0xD0,
        load_segment: u16::from_le_bytes([raw[2], raw[3]]),
        system_type: raw[4],
        sector_count: u16::from_le_bytes([raw[6], raw[7]]),
        image: u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]),
        selection_criteria,
    })
}

/// An image's El Torito boot record and the catalog it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElTorito {
    /// Block of the boot catalog.
    pub catalog_lba: u32,
    pub catalog: BootCatalog<u32>,
}

/// Reads the El Torito boot record and catalog of an image; `None` if the image has no boot
/// record, or one for another boot system.
pub fn read_el_torito<S: ReadAt>(iso: &IsoFs<S>) -> Result<Option<ElTorito>, IsoError> {
    // Descriptors are kept in on-disk order from block 16, so the position gives the block.
    let Some(index) = iso
        .descriptors()
        .iter()
        .position(|d| matches!(d, Descriptor::Boot { boot_system_id, .. } if boot_system_id == BOOT_SYSTEM_ID))
    else {
        return Ok(None);
    };
    let mut record = [0u8; SECTOR as usize];
    iso.read_at((u64::from(PVD_LBA) + index as u64) * SECTOR, &mut record, "El Torito boot record")?;
    let catalog_lba = u32::from_le_bytes([record[71], record[72], record[73], record[74]]);
    let start = u64::from(catalog_lba) * SECTOR;
    let available = iso.image_len().saturating_sub(start);
    if available < SECTOR {
        return Err(IsoError::Invalid(format!(
            "El Torito boot catalog at block {catalog_lba} is past the end of the image ({} bytes)",
            iso.image_len()
        )));
    }
    let mut bytes = vec![0u8; available.min(MAX_CATALOG_BLOCKS * SECTOR) as usize];
    iso.read_at(start, &mut bytes, "El Torito boot catalog")?;
    let catalog = parse_catalog(&bytes).map_err(|source| IsoError::BootCatalog { lba: catalog_lba, source })?;
    Ok(Some(ElTorito { catalog_lba, catalog }))
}

/// The boot record volume descriptor pointing at a catalog at `catalog_lba`.
pub fn boot_record_descriptor(catalog_lba: u32) -> Vec<u8> {
    let mut d = vec![0u8; SECTOR as usize];
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    d[7..7 + BOOT_SYSTEM_ID.len()].copy_from_slice(BOOT_SYSTEM_ID.as_bytes());
    d[71..75].copy_from_slice(&catalog_lba.to_le_bytes());
    d
}

/// Bytes 8..64 of a boot file carrying a boot info table.
pub const BOOT_INFO_TABLE: std::ops::Range<usize> = 8..64;

/// The boot info table of a boot file stored at `file_lba` whose whole content is `data`.
pub fn boot_info_table(file_lba: u32, data: &[u8]) -> Result<[u8; 56], EncodeError> {
    if data.len() < BOOT_INFO_TABLE.end {
        return Err(EncodeError::BootFileTooShort(data.len()));
    }
    let length = u32::try_from(data.len()).map_err(|_| EncodeError::BootFileTooLarge)?;
    let mut table = [0u8; 56];
    table[0..4].copy_from_slice(&PVD_LBA.to_le_bytes());
    table[4..8].copy_from_slice(&file_lba.to_le_bytes());
    table[8..12].copy_from_slice(&length.to_le_bytes());
    table[12..16].copy_from_slice(&boot_info_checksum(data).to_le_bytes());
    Ok(table)
}

/// Sum of the little-endian 32-bit words of `data` from byte 64 on (a final partial word is
/// zero-padded), modulo 2^32.
pub fn boot_info_checksum(data: &[u8]) -> u32 {
    data.get(BOOT_INFO_TABLE.end..).unwrap_or_default().chunks(4).fold(0u32, |sum, word| {
        let mut le = [0u8; 4];
        le[..word.len()].copy_from_slice(word);
        sum.wrapping_add(u32::from_le_bytes(le))
    })
}

/// True if the first bytes of a boot file look like a boot info table was patched in (it names
/// the primary volume descriptor's block, 16, at byte 8). `head` is at least 12 bytes of the file.
pub fn has_boot_info_table(head: &[u8]) -> bool {
    head.get(8..12) == Some(&PVD_LBA.to_le_bytes()[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> BootCatalog<u32> {
        let mut catalog = BootCatalog::new(Platform::X86, BootEntry::no_emulation(45, 4));
        let mut efi = BootEntry::no_emulation(64, 12);
        efi.selection_criteria[0] = 1;
        efi.selection_criteria[19] = 0x7F;
        catalog.push(Platform::EFI, efi);
        catalog.sections[0].id[..4].copy_from_slice(b"UEFI");
        catalog.id[..6].copy_from_slice(b"COREOS");
        catalog
    }

    #[test]
    fn round_trip() {
        let catalog = sample();
        let bytes = catalog.encode().unwrap();
        assert_eq!(bytes.len(), SECTOR as usize);
        assert_eq!(catalog.encoded_len(), 4 * ENTRY_LEN);
        assert_eq!(&bytes[30..32], &[0x55, 0xAA]);
        assert_eq!(word_sum(&bytes[..32]), 0);
        assert_eq!(bytes[64], HEADER_LAST);
        assert_eq!(bytes[65], 0xEF);
        assert_eq!(parse_catalog(&bytes).unwrap(), catalog);
        let entries: Vec<(Platform, u32)> = catalog.entries().map(|(p, e)| (p, e.image)).collect();
        assert_eq!(entries, [(Platform::X86, 45), (Platform::EFI, 64)]);
        assert_eq!(catalog.len(), 2);
    }

    #[test]
    fn several_sections() {
        let mut catalog = sample();
        catalog.sections.push(BootSection { platform: Platform::MAC, id: [0; 28], entries: vec![] });
        catalog.push(Platform::POWERPC, BootEntry::no_emulation(99, 1));
        catalog.push(Platform::POWERPC, BootEntry::no_emulation(100, 1));
        let bytes = catalog.encode().unwrap();
        assert_eq!(bytes[64], HEADER_MORE);
        assert_eq!(parse_catalog(&bytes).unwrap(), catalog);
        assert_eq!(catalog.len(), 4);
    }

    #[test]
    fn corrupt_catalogs() {
        let good = sample().encode().unwrap();
        let cases: [(usize, u8, &str); 6] = [
            (0, 2, "header id 0x02"),
            (31, 0, "expected 55 AA"),
            (4, b'X', "checksum is wrong"),
            (32, 0x77, "boot indicator 0x77"),
            (33, 9, "unknown boot media type 9"),
            (64, 0x55, "expected a section header"),
        ];
        for (at, byte, message) in cases {
            let mut bytes = good.clone();
            bytes[at] = byte;
            let err = parse_catalog(&bytes).unwrap_err();
            assert!(err.to_string().contains(message), "{at}: {err}");
        }
        let mut bytes = good.clone();
        bytes[97] |= MEDIA_CONTINUATION;
        assert!(parse_catalog(&bytes).unwrap_err().to_string().contains("extensions"));
        // more entries than bytes
        let mut bytes = good[..128].to_vec();
        bytes[66] = 5;
        assert!(parse_catalog(&bytes).unwrap_err().to_string().contains("continues past"));
    }

    #[test]
    fn info_table() {
        let mut data = vec![0u8; 101];
        data[64] = 1;
        data[68] = 2;
        data[99] = 1; // the word at 96..100 is 0x01000000
        data[100] = 5; // a partial final word, zero-padded
        let table = boot_info_table(37, &data).unwrap();
        assert_eq!(&table[0..4], &16u32.to_le_bytes());
        assert_eq!(&table[4..8], &37u32.to_le_bytes());
        assert_eq!(&table[8..12], &101u32.to_le_bytes());
        assert_eq!(u32::from_le_bytes(table[12..16].try_into().unwrap()), 1 + 2 + 0x0100_0000 + 5);
        assert!(table[16..].iter().all(|b| *b == 0));
        assert!(boot_info_table(1, &[0; 63]).is_err());
        let mut head = [0u8; 12];
        assert!(!has_boot_info_table(&head));
        head[8] = 16;
        assert!(has_boot_info_table(&head));
    }
}
