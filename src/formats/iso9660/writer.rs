//! A small, deterministic ISO 9660 writer: plain level-1 images (no Rock Ridge or Joliet),
//! optionally bootable through El Torito, built from a tree of files.
//!
//! It masters the offline sample live ISO, test images and re-mastered live ISOs
//! ([`crate::formats::remaster`]). A file's bytes are either held in memory ([`IsoBuilder::add_file`]) or
//! a byte range of another file that is streamed when the image is written
//! ([`IsoBuilder::add_file_range`]), so re-mastering a 1 GiB image does not load it. Output
//! depends only on the tree and the sources' bytes (fixed timestamps unless set, sorted records),
//! so an image is byte-for-byte reproducible, and [`IsoBuilder::layout`] tells callers where each
//! file's bytes will land before anything is written (embed areas are addressed by absolute
//! offset).
//!
//! Layout: system area (16 zero blocks), primary volume descriptor (block 16), the El Torito boot
//! record (block 17, only with [`IsoBuilder::set_boot`]), terminator, L then M path tables,
//! directory extents in path-table order, a hidden boot catalog (if it is not a file), then file
//! data in path-table order, every extent starting on a block boundary. Boot info tables
//! ([`super::eltorito`]) are patched into the requested boot files as they are written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::io::{self, Write};
use std::sync::Arc;

use super::eltorito::{self, BootCatalog};
use super::{ReadAt, Record, SECTOR};

/// Blocks 0-15: the system area, left zero.
const SYSTEM_AREA_BLOCKS: u32 = 16;
/// First block after the primary descriptor (block 16) and the terminator, without a boot record.
const PATH_TABLE_LBA: u32 = 18;
/// Boot files patched with a boot info table are read into memory whole; real ones
/// (isolinux.bin) are about 40 KiB, and a catalog entry loads at most 65535 512-byte sectors.
const MAX_BOOT_INFO_FILE: u64 = 64 << 20;
/// Chunk size when streaming file data from a source.
const COPY_CHUNK: usize = 1 << 20;
/// ISO 9660 limits directory nesting to 8 levels (including the root).
const MAX_LEVELS: usize = 8;
/// Recording time of every record: 2025-01-01 00:00:00 UTC, fixed for reproducible output.
const RECORD_TIME: [u8; 7] = [125, 1, 1, 0, 0, 0, 0];
/// The same instant in the descriptor's 17-byte format (digits, then the UTC offset byte).
const DESCRIPTOR_TIME: &[u8; 17] = b"2025010100000000\0";
/// "Not specified" in the descriptor's date format.
const NO_TIME: &[u8; 17] = b"0000000000000000\0";

/// Why an image could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("invalid ISO 9660 name {path:?}: {reason}")]
    InvalidName { path: String, reason: String },
    #[error("{0} already exists in the image")]
    Exists(String),
    #[error("{path} needs {parent} to be a directory, but it is a file")]
    NotADirectory { path: String, parent: String },
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidId { field: &'static str, value: String, reason: String },
    /// An identifier with characters ISO readers refuse.
    #[error("invalid {field} {value:?}")]
    IdCharacters {
        field: &'static str,
        value: String,
        #[source]
        source: super::InvalidName,
    },
    #[error("{0}")]
    TooLarge(String),
    /// The El Torito setup does not fit the tree (missing or empty boot image, ...).
    #[error("El Torito: {0}")]
    Boot(String),
    /// The boot catalog does not encode (too many entries, media flags out of range).
    #[error("El Torito")]
    Catalog(#[source] eltorito::EncodeError),
    /// A boot info table cannot be patched into this file.
    #[error("El Torito: {path}")]
    BootInfoTable {
        path: String,
        #[source]
        source: eltorito::EncodeError,
    },
    /// A file's source could not be read (or is shorter than the range given for it).
    #[error("reading the data of {path}")]
    Source {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("writing the image")]
    Io(#[from] io::Error),
}

/// Positional reads shared by the files that take their bytes from it.
pub type SharedSource = Arc<dyn ReadAt + Send + Sync>;

#[derive(Debug, Clone, Default)]
struct Dir {
    /// Keyed by identifier without version (`KARGS.JSO`, `PXEBOOT`).
    entries: BTreeMap<String, Node>,
}

#[derive(Debug, Clone)]
enum Node {
    Dir(Dir),
    File(FileData),
}

/// Where a file's bytes come from.
#[derive(Clone)]
enum FileData {
    Bytes(Vec<u8>),
    /// `len` bytes at `offset` of `source`, read when the image is written.
    Range {
        source: SharedSource,
        offset: u64,
        len: u32,
    },
    /// The El Torito boot catalog, encoded once the layout is known (`len` is whole blocks).
    Catalog {
        len: u32,
    },
}

impl FileData {
    fn len(&self) -> u32 {
        match self {
            FileData::Bytes(data) => data.len() as u32,
            FileData::Range { len, .. } | FileData::Catalog { len } => *len,
        }
    }
}

impl fmt::Debug for FileData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileData::Bytes(data) => write!(f, "Bytes({} bytes)", data.len()),
            FileData::Range { offset, len, .. } => write!(f, "Range {{ offset: {offset}, len: {len} }}"),
            FileData::Catalog { len } => write!(f, "Catalog {{ len: {len} }}"),
        }
    }
}

/// El Torito boot setup of an image (see [`super::eltorito`] for the format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootSetup {
    /// Level-1 path of the boot catalog as a file in the tree (`ISOLINUX/BOOT.CAT`, as CoreOS
    /// images have it), or `None` for a catalog in a block that no directory lists.
    pub catalog_path: Option<String>,
    /// The catalog, boot images named by level-1 path (`ISOLINUX/ISOLINUX.BIN`).
    pub catalog: BootCatalog<String>,
    /// Files (normally the BIOS boot image, `ISOLINUX/ISOLINUX.BIN`) whose bytes 8..64 are
    /// replaced by a boot info table, as `mkisofs -boot-info-table` does.
    pub boot_info_table: BTreeSet<String>,
}

/// Where every directory and file of a built image is. Paths are as given to the builder
/// (`COREOS/KARGS.JSO`); the root is `""`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Total size of the image in blocks (the image is exactly this many blocks long).
    pub volume_space_size: u32,
    pub records: BTreeMap<String, Record>,
    /// Block of the El Torito boot catalog (a file's extent or a hidden block), if bootable.
    pub boot_catalog_lba: Option<u32>,
}

impl Layout {
    /// Length of the image in bytes.
    pub fn image_len(&self) -> u64 {
        u64::from(self.volume_space_size) * SECTOR
    }

    pub fn get(&self, path: &str) -> Option<&Record> {
        self.records.get(path)
    }
}

/// Builds an ISO 9660 image from files added by 8.3 path.
#[derive(Debug, Clone)]
pub struct IsoBuilder {
    volume_id: String,
    system_id: String,
    root: Dir,
    boot: Option<BootSetup>,
    created: [u8; 17],
    modified: [u8; 17],
    /// Start of the system area; the rest of its 32 KiB is zero.
    system_area: Vec<u8>,
}

impl IsoBuilder {
    /// A builder for an empty volume. The volume ID is up to 32 printable ASCII characters; the
    /// usual lower-case labels (`rhcos-...`) are allowed because boot loaders look them up.
    pub fn new(volume_id: &str) -> Result<IsoBuilder, WriteError> {
        check_id("volume ID", volume_id)?;
        Ok(IsoBuilder {
            volume_id: volume_id.to_string(),
            system_id: "LINUX".to_string(),
            root: Dir::default(),
            boot: None,
            created: *DESCRIPTOR_TIME,
            modified: *DESCRIPTOR_TIME,
            system_area: Vec::new(),
        })
    }

    /// Sets the first bytes of the system area (blocks 0-15, ignored by ISO 9660 readers; zero by
    /// default). At most 32 KiB; the rest stays zero. Does not change the layout.
    pub fn system_area(&mut self, bytes: Vec<u8>) -> Result<(), WriteError> {
        let max = u64::from(SYSTEM_AREA_BLOCKS) * SECTOR;
        if bytes.len() as u64 > max {
            return Err(WriteError::TooLarge(format!("system area of {} bytes; it has {max}", bytes.len())));
        }
        self.system_area = bytes;
        Ok(())
    }

    /// Sets the volume creation and modification dates of the primary descriptor (17-byte
    /// format: 16 ASCII digits `YYYYMMDDhhmmsscc`, then the UTC offset in 15-minute units).
    /// Default: 2025-01-01 00:00:00 UTC. GRUB derives a volume's "UUID" from the modification
    /// date, so a re-mastered image keeps its source's to stay findable by `search --fs-uuid`.
    pub fn volume_dates(mut self, created: [u8; 17], modified: [u8; 17]) -> Result<IsoBuilder, WriteError> {
        for (field, value) in [("creation date", &created), ("modification date", &modified)] {
            if !value[..16].iter().all(u8::is_ascii_digit) {
                return Err(WriteError::InvalidId {
                    field,
                    value: String::from_utf8_lossy(&value[..16]).into_owned(),
                    reason: "the first 16 bytes must be ASCII digits".into(),
                });
            }
        }
        self.created = created;
        self.modified = modified;
        Ok(self)
    }

    /// Sets the system identifier (default `LINUX`, like x86 CoreOS images).
    pub fn system_id(mut self, system_id: &str) -> Result<IsoBuilder, WriteError> {
        check_id("system ID", system_id)?;
        self.system_id = system_id.to_string();
        Ok(self)
    }

    /// Adds an (empty) directory, creating missing parents. Adding an existing directory is a no-op.
    pub fn add_dir(&mut self, path: &str) -> Result<(), WriteError> {
        let components = split_path(path, false)?;
        self.dir_mut(path, &components)?;
        Ok(())
    }

    /// Adds a file at a level-1 path such as `IMAGES/PXEBOOT/INITRD.IMG`, creating missing
    /// parent directories. The `;1` version is added on disk.
    pub fn add_file(&mut self, path: &str, data: impl Into<Vec<u8>>) -> Result<(), WriteError> {
        let data = data.into();
        check_file_len(path, data.len() as u64)?;
        self.insert_file(path, FileData::Bytes(data))
    }

    /// Adds a file whose bytes are `len` bytes at `offset` of `source`, read (in chunks) only
    /// when the image is written. The range must lie inside the source now; the source must not
    /// change before the image is written (the output would change with it).
    pub fn add_file_range(
        &mut self,
        path: &str,
        source: SharedSource,
        offset: u64,
        len: u64,
    ) -> Result<(), WriteError> {
        let len32 = check_file_len(path, len)?;
        let size = source.size().map_err(|e| WriteError::Source { path: path.to_string(), source: e })?;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(WriteError::Source {
                path: path.to_string(),
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("bytes {offset}..{} are not inside the {size}-byte source", offset.saturating_add(len)),
                ),
            });
        }
        self.insert_file(path, FileData::Range { source, offset, len: len32 })
    }

    /// Makes the image bootable through El Torito. Boot images and boot-info-table files are
    /// looked up when the layout is computed, so they may be added before or after this call.
    /// With `catalog_path`, the catalog becomes a file of the tree (which must not exist yet).
    pub fn set_boot(&mut self, setup: BootSetup) -> Result<(), WriteError> {
        if self.boot.is_some() {
            return Err(WriteError::Boot("the boot setup is already set".into()));
        }
        let normalize = |path: &String| -> Result<String, WriteError> { Ok(split_path(path, true)?.join("/")) };
        let catalog = setup.catalog.map_images(normalize)?;
        let boot_info_table = setup.boot_info_table.iter().map(normalize).collect::<Result<BTreeSet<_>, _>>()?;
        let catalog_path = setup.catalog_path.as_ref().map(normalize).transpose()?;
        // Check that it encodes (entry counts) before it becomes part of the tree.
        catalog.clone().map_images(|_| Ok::<u32, WriteError>(0))?.encode().map_err(WriteError::Catalog)?;
        if let Some(path) = &catalog_path {
            let len = catalog.encoded_len().next_multiple_of(SECTOR as usize) as u32;
            self.insert_file(path, FileData::Catalog { len })?;
        }
        self.boot = Some(BootSetup { catalog_path, catalog, boot_info_table });
        Ok(())
    }

    fn insert_file(&mut self, path: &str, data: FileData) -> Result<(), WriteError> {
        let mut components = split_path(path, true)?;
        let name = components.pop().expect("split_path returns at least one component");
        let dir = self.dir_mut(path, &components)?;
        if dir.entries.contains_key(&name) {
            return Err(WriteError::Exists(path.to_string()));
        }
        dir.entries.insert(name, Node::File(data));
        Ok(())
    }

    fn dir_mut(&mut self, path: &str, components: &[String]) -> Result<&mut Dir, WriteError> {
        let mut dir = &mut self.root;
        for (depth, component) in components.iter().enumerate() {
            let node = dir.entries.entry(component.clone()).or_insert_with(|| Node::Dir(Dir::default()));
            dir = match node {
                Node::Dir(d) => d,
                Node::File(_) => {
                    return Err(WriteError::NotADirectory {
                        path: path.to_string(),
                        parent: components[..=depth].join("/"),
                    });
                }
            };
        }
        Ok(dir)
    }

    /// Computes where everything will be, without writing.
    pub fn layout(&self) -> Result<Layout, WriteError> {
        Ok(self.plan()?.layout)
    }

    /// Writes the image and returns its layout. File ranges are streamed from their sources.
    pub fn write_to(&self, mut out: impl Write) -> Result<Layout, WriteError> {
        let plan = self.plan()?;
        let catalog = match &plan.boot {
            Some(boot) => Some(boot.catalog.encode().map_err(WriteError::Catalog)?),
            None => None,
        };
        let mut written = Blocks::new(&mut out);
        written.out.write_all(&self.system_area)?;
        written.offset += self.system_area.len() as u64;
        written.zeros(u64::from(SYSTEM_AREA_BLOCKS) * SECTOR - written.offset)?;
        written.block(&self.primary_descriptor(&plan))?;
        if let Some(boot) = &plan.boot {
            written.block(&eltorito::boot_record_descriptor(boot.catalog_lba))?;
        }
        written.block(&terminator())?;
        let (l_table, m_table) = path_tables(&plan);
        written.block(&l_table)?;
        written.block(&m_table)?;
        for index in 0..plan.dirs.len() {
            written.block(&directory_extent(&plan, index))?;
        }
        if let (Some(boot), Some(catalog)) = (&plan.boot, &catalog)
            && boot.hidden_catalog
        {
            written.block(catalog)?;
        }
        let mut buf = Vec::new();
        for (index, file) in plan.files.iter().enumerate() {
            debug_assert_eq!(written.offset, file.lba * SECTOR, "{}", file.path);
            let info_table = plan.boot.as_ref().is_some_and(|b| b.boot_info_table.contains(&index));
            match file.data {
                FileData::Catalog { .. } => written.block(catalog.as_deref().unwrap_or_default())?,
                FileData::Bytes(data) if !info_table => written.block(data)?,
                FileData::Range { source, offset, len } if !info_table => {
                    written.copy(&**source, *offset, u64::from(*len), &mut buf, &file.path)?;
                }
                data => {
                    let mut bytes = read_whole(data, &file.path)?;
                    let table = eltorito::boot_info_table(file.lba as u32, &bytes)
                        .map_err(|source| WriteError::BootInfoTable { path: file.path.clone(), source })?;
                    bytes[eltorito::BOOT_INFO_TABLE].copy_from_slice(&table);
                    written.block(&bytes)?;
                }
            }
        }
        debug_assert_eq!(written.offset, plan.layout.image_len());
        out.flush()?;
        Ok(plan.layout)
    }

    /// The whole image in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    fn plan(&self) -> Result<Plan<'_>, WriteError> {
        // Directories in path-table order: by level, then parent number, then identifier.
        // A breadth-first walk visiting children in ISO order yields exactly that.
        let mut dirs = vec![PlannedDir {
            path: String::new(),
            identifier: String::new(),
            parent: 0,
            children: Vec::new(),
            lba: 0,
            size: 0,
        }];
        let mut nodes: Vec<&Dir> = vec![&self.root];
        let mut files = Vec::new();
        let mut next = 0;
        while next < dirs.len() {
            let dir = nodes[next];
            let mut children: Vec<(&String, &Node)> = dir.entries.iter().collect();
            children.sort_by(|a, b| iso_order(&identifier(a.0, a.1), &identifier(b.0, b.1)));
            for (name, node) in children {
                let path = join(&dirs[next].path, name);
                match node {
                    Node::Dir(sub) => {
                        if level(&dirs[next].path) >= MAX_LEVELS {
                            return Err(WriteError::TooLarge(format!(
                                "{path} is nested deeper than the {MAX_LEVELS} levels ISO 9660 allows"
                            )));
                        }
                        let child = dirs.len();
                        dirs[next].children.push(Child::Dir(child));
                        dirs.push(PlannedDir {
                            path,
                            identifier: name.clone(),
                            parent: next,
                            children: Vec::new(),
                            lba: 0,
                            size: 0,
                        });
                        nodes.push(sub);
                    }
                    Node::File(data) => {
                        let child = files.len();
                        dirs[next].children.push(Child::File(child));
                        files.push(PlannedFile {
                            path,
                            identifier: identifier(name, node),
                            length: data.len(),
                            data,
                            lba: 0,
                        });
                    }
                }
            }
            next += 1;
        }

        let path_table_size: usize = dirs.iter().map(path_table_entry_len).sum();
        let path_table_blocks = blocks_for(path_table_size as u64);
        // The boot record takes the block after the primary descriptor.
        let path_table_lba = PATH_TABLE_LBA + u32::from(self.boot.is_some());
        let mut lba = u64::from(path_table_lba) + 2 * path_table_blocks;
        for index in 0..dirs.len() {
            let size = directory_size(&dirs, &files, index);
            dirs[index].lba = lba;
            dirs[index].size = size;
            lba += blocks_for(size);
        }
        let hidden_catalog_lba = match &self.boot {
            Some(boot) if boot.catalog_path.is_none() => {
                let at = lba;
                lba += blocks_for(boot.catalog.encoded_len() as u64);
                Some(at)
            }
            _ => None,
        };
        for file in &mut files {
            file.lba = lba;
            lba += blocks_for(file.length.into());
        }
        let volume_space_size =
            u32::try_from(lba).map_err(|_| WriteError::TooLarge("image larger than 2^32 blocks".into()))?;
        let boot = match &self.boot {
            Some(setup) => Some(plan_boot(setup, &files, hidden_catalog_lba)?),
            None => None,
        };

        let mut records = BTreeMap::new();
        for dir in &dirs {
            records.insert(
                dir.path.clone(),
                Record {
                    name: if dir.path.is_empty() { ".".into() } else { dir.identifier.clone() },
                    is_dir: true,
                    lba: dir.lba as u32,
                    length: dir.size as u32,
                },
            );
        }
        for file in &files {
            records.insert(
                file.path.clone(),
                Record {
                    name: file.path.rsplit('/').next().unwrap_or_default().to_string(),
                    is_dir: false,
                    lba: file.lba as u32,
                    length: file.length,
                },
            );
        }
        let boot_catalog_lba = boot.as_ref().map(|b| b.catalog_lba);
        Ok(Plan {
            dirs,
            files,
            path_table_lba,
            path_table_size,
            path_table_blocks,
            boot,
            layout: Layout { volume_space_size, records, boot_catalog_lba },
        })
    }

    fn primary_descriptor(&self, plan: &Plan<'_>) -> Vec<u8> {
        let mut d = vec![0u8; SECTOR as usize];
        d[0] = 1;
        d[1..6].copy_from_slice(b"CD001");
        d[6] = 1;
        put_padded(&mut d[8..40], &self.system_id);
        put_padded(&mut d[40..72], &self.volume_id);
        put_both_u32(&mut d[80..88], plan.layout.volume_space_size);
        put_both_u16(&mut d[120..124], 1); // volume set size
        put_both_u16(&mut d[124..128], 1); // volume sequence number
        put_both_u16(&mut d[128..132], SECTOR as u16);
        put_both_u32(&mut d[132..140], plan.path_table_size as u32);
        let l_table = plan.path_table_lba;
        let m_table = plan.path_table_lba + plan.path_table_blocks as u32;
        d[140..144].copy_from_slice(&l_table.to_le_bytes());
        d[148..152].copy_from_slice(&m_table.to_be_bytes());
        let root = &plan.dirs[0];
        let root_record = directory_record(root.lba as u32, root.size as u32, true, &[0]);
        d[156..156 + root_record.len()].copy_from_slice(&root_record);
        put_padded(&mut d[190..318], ""); // volume set ID
        put_padded(&mut d[318..446], ""); // publisher ID
        put_padded(&mut d[446..574], ""); // data preparer ID
        put_padded(&mut d[574..702], "BOOTSTREAM"); // application ID
        put_padded(&mut d[702..739], ""); // copyright file ID
        put_padded(&mut d[739..776], ""); // abstract file ID
        put_padded(&mut d[776..813], ""); // bibliographic file ID
        d[813..830].copy_from_slice(&self.created);
        d[830..847].copy_from_slice(&self.modified);
        d[847..864].copy_from_slice(NO_TIME); // expiration
        d[864..881].copy_from_slice(NO_TIME); // effective
        d[881] = 1; // file structure version
        d
    }
}

struct PlannedDir {
    path: String,
    identifier: String,
    /// Index of the parent in path-table order (the root is its own parent).
    parent: usize,
    children: Vec<Child>,
    lba: u64,
    size: u64,
}

struct PlannedFile<'a> {
    path: String,
    data: &'a FileData,
    /// On-disk identifier, e.g. `VMLINUZ.;1`.
    identifier: String,
    length: u32,
    lba: u64,
}

enum Child {
    Dir(usize),
    File(usize),
}

struct Plan<'a> {
    dirs: Vec<PlannedDir>,
    files: Vec<PlannedFile<'a>>,
    path_table_lba: u32,
    path_table_size: usize,
    path_table_blocks: u64,
    boot: Option<PlannedBoot>,
    layout: Layout,
}

/// The boot setup resolved against the layout.
struct PlannedBoot {
    catalog: BootCatalog<u32>,
    catalog_lba: u32,
    /// The catalog is in its own block rather than a file's extent.
    hidden_catalog: bool,
    /// Indexes (into `Plan::files`) of files that get a boot info table.
    boot_info_table: BTreeSet<usize>,
}

fn plan_boot(
    setup: &BootSetup,
    files: &[PlannedFile<'_>],
    hidden_catalog_lba: Option<u64>,
) -> Result<PlannedBoot, WriteError> {
    let by_path: HashMap<&str, usize> = files.iter().enumerate().map(|(i, f)| (f.path.as_str(), i)).collect();
    let find = |path: &String, what: &str| -> Result<usize, WriteError> {
        by_path
            .get(path.as_str())
            .copied()
            .ok_or_else(|| WriteError::Boot(format!("{what} {path} is not a file of the image")))
    };
    let catalog = setup.catalog.clone().map_images(|path| {
        let file = &files[find(path, "boot image")?];
        if file.length == 0 {
            return Err(WriteError::Boot(format!("boot image {path} is empty")));
        }
        if matches!(file.data, FileData::Catalog { .. }) {
            return Err(WriteError::Boot(format!("boot image {path} is the boot catalog")));
        }
        Ok(file.lba as u32)
    })?;
    let mut boot_info_table = BTreeSet::new();
    for path in &setup.boot_info_table {
        let index = find(path, "boot info table file")?;
        let file = &files[index];
        if u64::from(file.length) < eltorito::BOOT_INFO_TABLE.end as u64 || u64::from(file.length) > MAX_BOOT_INFO_FILE
        {
            return Err(WriteError::Boot(format!(
                "{path} is {} bytes; a boot info table needs a file of 64 bytes to {MAX_BOOT_INFO_FILE} bytes",
                file.length
            )));
        }
        if matches!(file.data, FileData::Catalog { .. }) {
            return Err(WriteError::Boot(format!("{path} is the boot catalog")));
        }
        boot_info_table.insert(index);
    }
    let (catalog_lba, hidden_catalog) = match (&setup.catalog_path, hidden_catalog_lba) {
        (Some(path), _) => (files[find(path, "boot catalog")?].lba, false),
        (None, Some(lba)) => (lba, true),
        (None, None) => unreachable!("a hidden catalog always gets a block"),
    };
    Ok(PlannedBoot { catalog, catalog_lba: catalog_lba as u32, hidden_catalog, boot_info_table })
}

/// A file's whole content in memory (for patching a boot info table into it).
fn read_whole(data: &FileData, path: &str) -> Result<Vec<u8>, WriteError> {
    match data {
        FileData::Bytes(bytes) => Ok(bytes.clone()),
        FileData::Range { source, offset, len } => {
            let mut bytes = vec![0u8; *len as usize];
            source
                .read_exact_at(&mut bytes, *offset)
                .map_err(|source| WriteError::Source { path: path.to_string(), source })?;
            Ok(bytes)
        }
        FileData::Catalog { .. } => Err(WriteError::Boot(format!("{path} is the boot catalog"))),
    }
}

fn check_file_len(path: &str, len: u64) -> Result<u32, WriteError> {
    u32::try_from(len).map_err(|_| {
        WriteError::TooLarge(format!(
            "{path} is {len} bytes; files of 4 GiB or more need multi-extent records, which are not supported"
        ))
    })
}

/// Writes whole blocks, zero-padding each piece to the next block boundary.
struct Blocks<W: Write> {
    out: W,
    offset: u64,
}

impl<W: Write> Blocks<W> {
    fn new(out: W) -> Blocks<W> {
        Blocks { out, offset: 0 }
    }

    fn block(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(data)?;
        self.offset += data.len() as u64;
        let pad = blocks_for(data.len() as u64) * SECTOR - data.len() as u64;
        self.zeros(pad)
    }

    /// Streams `len` bytes at `offset` of `source`, then pads to the block boundary. `buf` is a
    /// reusable chunk buffer.
    fn copy(
        &mut self,
        source: &dyn ReadAt,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
        path: &str,
    ) -> Result<(), WriteError> {
        buf.resize(COPY_CHUNK, 0);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(COPY_CHUNK as u64) as usize;
            source
                .read_exact_at(&mut buf[..n], offset + done)
                .map_err(|source| WriteError::Source { path: path.to_string(), source })?;
            self.out.write_all(&buf[..n])?;
            done += n as u64;
        }
        self.offset += len;
        self.zeros(blocks_for(len) * SECTOR - len)?;
        Ok(())
    }

    fn zeros(&mut self, mut count: u64) -> io::Result<()> {
        const ZEROS: [u8; SECTOR as usize] = [0; SECTOR as usize];
        while count > 0 {
            let n = count.min(SECTOR) as usize;
            self.out.write_all(&ZEROS[..n])?;
            self.offset += n as u64;
            count -= n as u64;
        }
        Ok(())
    }
}

fn terminator() -> Vec<u8> {
    let mut d = vec![0u8; SECTOR as usize];
    d[0] = 255;
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    d
}

/// The L (little-endian) and M (big-endian) path tables.
fn path_tables(plan: &Plan<'_>) -> (Vec<u8>, Vec<u8>) {
    let mut l_table = Vec::with_capacity(plan.path_table_size);
    let mut m_table = Vec::with_capacity(plan.path_table_size);
    for dir in &plan.dirs {
        let id: &[u8] = if dir.path.is_empty() { &[0] } else { dir.identifier.as_bytes() };
        let parent_number = (dir.parent + 1) as u16;
        for (table, big_endian) in [(&mut l_table, false), (&mut m_table, true)] {
            table.push(id.len() as u8);
            table.push(0); // extended attribute record length
            let lba = dir.lba as u32;
            table.extend_from_slice(&if big_endian { lba.to_be_bytes() } else { lba.to_le_bytes() });
            table.extend_from_slice(&if big_endian {
                parent_number.to_be_bytes()
            } else {
                parent_number.to_le_bytes()
            });
            table.extend_from_slice(id);
            if id.len() % 2 == 1 {
                table.push(0);
            }
        }
    }
    (l_table, m_table)
}

fn path_table_entry_len(dir: &PlannedDir) -> usize {
    let id_len = if dir.path.is_empty() { 1 } else { dir.identifier.len() };
    8 + id_len + id_len % 2
}

/// The records of a directory: `.`, `..`, then children in ISO order.
fn directory_records(plan_dirs: &[PlannedDir], files: &[PlannedFile<'_>], index: usize) -> Vec<Vec<u8>> {
    let dir = &plan_dirs[index];
    let parent = &plan_dirs[dir.parent];
    let mut records = vec![
        directory_record(dir.lba as u32, dir.size as u32, true, &[0]),
        directory_record(parent.lba as u32, parent.size as u32, true, &[1]),
    ];
    for child in &dir.children {
        records.push(match *child {
            Child::Dir(i) => {
                let d = &plan_dirs[i];
                directory_record(d.lba as u32, d.size as u32, true, d.identifier.as_bytes())
            }
            Child::File(i) => {
                let f = &files[i];
                directory_record(f.lba as u32, f.length, false, f.identifier.as_bytes())
            }
        });
    }
    records
}

/// Size of a directory's extent: records packed into blocks, none straddling a block boundary.
fn directory_size(plan_dirs: &[PlannedDir], files: &[PlannedFile<'_>], index: usize) -> u64 {
    let records = directory_records(plan_dirs, files, index);
    let lengths = records.iter().map(|r| r.len() as u64);
    pack(lengths).1
}

/// Block-packs records of the given lengths; returns each record's offset and the padded total.
fn pack(lengths: impl Iterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut offsets = Vec::new();
    let mut pos = 0u64;
    for len in lengths {
        if pos % SECTOR + len > SECTOR {
            pos = pos.div_ceil(SECTOR) * SECTOR;
        }
        offsets.push(pos);
        pos += len;
    }
    (offsets, blocks_for(pos).max(1) * SECTOR)
}

fn directory_extent(plan: &Plan<'_>, index: usize) -> Vec<u8> {
    let records = directory_records(&plan.dirs, &plan.files, index);
    let (offsets, size) = pack(records.iter().map(|r| r.len() as u64));
    let mut extent = vec![0u8; size as usize];
    for (record, offset) in records.iter().zip(offsets) {
        extent[offset as usize..offset as usize + record.len()].copy_from_slice(record);
    }
    extent
}

fn directory_record(lba: u32, length: u32, is_dir: bool, id: &[u8]) -> Vec<u8> {
    let len = 33 + id.len() + (id.len() + 1) % 2;
    let mut r = vec![0u8; len];
    r[0] = len as u8;
    put_both_u32(&mut r[2..10], lba);
    put_both_u32(&mut r[10..18], length);
    r[18..25].copy_from_slice(&RECORD_TIME);
    r[25] = if is_dir { 0x02 } else { 0 };
    put_both_u16(&mut r[28..32], 1); // volume sequence number
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    r
}

/// On-disk identifier: directories as named, files as `NAME.EXT;1` (the `.` is mandatory).
fn identifier(name: &str, node: &Node) -> String {
    match node {
        Node::Dir(_) => name.to_string(),
        Node::File(_) if name.contains('.') => format!("{name};1"),
        Node::File(_) => format!("{name}.;1"),
    }
}

/// ISO 9660 §9.3 ordering of identifiers: name parts compared as if padded with spaces, then
/// extensions likewise, then versions (only `;1` is written, so they never differ here).
fn iso_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn parts(id: &str) -> (&[u8], &[u8]) {
        let id = id.split(';').next().unwrap_or(id);
        match id.split_once('.') {
            Some((name, ext)) => (name.as_bytes(), ext.as_bytes()),
            None => (id.as_bytes(), &[]),
        }
    }
    fn padded_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        let len = a.len().max(b.len());
        let pad = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(b' ');
        (0..len).map(|i| pad(a, i).cmp(&pad(b, i))).find(|o| o.is_ne()).unwrap_or(std::cmp::Ordering::Equal)
    }
    let (a_name, a_ext) = parts(a);
    let (b_name, b_ext) = parts(b);
    padded_cmp(a_name, b_name).then_with(|| padded_cmp(a_ext, b_ext))
}

/// Splits and validates a level-1 path; the last component of a file path may have an extension.
fn split_path(path: &str, is_file: bool) -> Result<Vec<String>, WriteError> {
    let invalid = |reason: String| WriteError::InvalidName { path: path.to_string(), reason };
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    if components.is_empty() {
        return Err(invalid("empty path".into()));
    }
    let last = components.len() - 1;
    for (i, component) in components.iter().enumerate() {
        let (name, ext) = match component.split_once('.') {
            Some((name, ext)) if is_file && i == last => (name, Some(ext)),
            Some(_) => {
                return Err(invalid(format!("directory name {component:?} contains '.'")));
            }
            None => (*component, None),
        };
        if name.is_empty() || name.len() > 8 {
            return Err(invalid(format!("{component:?}: name must be 1 to 8 characters")));
        }
        if ext.is_some_and(|e| e.len() > 3) {
            return Err(invalid(format!("{component:?}: extension must be at most 3 characters")));
        }
        let d_chars = |s: &str| s.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !d_chars(name) || !ext.is_none_or(d_chars) {
            return Err(invalid(format!("{component:?}: only A-Z, 0-9 and _ are allowed (ISO 9660 d-characters)")));
        }
    }
    Ok(components.into_iter().map(String::from).collect())
}

fn check_id(field: &'static str, value: &str) -> Result<(), WriteError> {
    let invalid = |reason: &str| WriteError::InvalidId { field, value: value.to_string(), reason: reason.to_string() };
    if value.len() > 32 {
        return Err(invalid("longer than 32 bytes"));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(invalid("only printable ASCII is allowed"));
    }
    // Keep to what ISO readers (ours, coreos-installer's) accept in identifiers.
    if let Err(source) = super::parse_a_string(value.as_bytes()) {
        return Err(WriteError::IdCharacters { field, value: value.to_string(), source });
    }
    Ok(())
}

/// ISO 9660 level of a directory path: the root is level 1.
fn level(path: &str) -> usize {
    if path.is_empty() { 1 } else { path.split('/').count() + 1 }
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() { name.to_string() } else { format!("{parent}/{name}") }
}

fn blocks_for(bytes: u64) -> u64 {
    bytes.div_ceil(SECTOR)
}

fn put_padded(field: &mut [u8], value: &str) {
    field.fill(b' ');
    field[..value.len()].copy_from_slice(value.as_bytes());
}

fn put_both_u32(field: &mut [u8], value: u32) {
    field[..4].copy_from_slice(&value.to_le_bytes());
    field[4..8].copy_from_slice(&value.to_be_bytes());
}

fn put_both_u16(field: &mut [u8], value: u16) {
    field[..2].copy_from_slice(&value.to_le_bytes());
    field[2..4].copy_from_slice(&value.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::IsoFs;
    use super::*;

    fn sample_tree() -> IsoBuilder {
        let mut b = IsoBuilder::new("test-volume.0").unwrap();
        b.add_file("COREOS/KARGS.JSO", b"{}".to_vec()).unwrap();
        b.add_file("IMAGES/PXEBOOT/VMLINUZ", b"kernel".to_vec()).unwrap();
        b.add_file("IMAGES/IGNITION.IMG", vec![0u8; 5000]).unwrap();
        b.add_file("A.B", b"x".to_vec()).unwrap();
        b.add_dir("EMPTY").unwrap();
        for i in 1..=120 {
            b.add_file(&format!("MANY/{i}.DAT"), format!("{i}\n")).unwrap();
        }
        b
    }

    #[test]
    fn reader_sees_what_was_written() {
        let builder = sample_tree();
        let layout = builder.layout().unwrap();
        let bytes = builder.to_bytes().unwrap();
        assert_eq!(bytes.len() as u64, layout.image_len());
        let iso = IsoFs::from_source(bytes.clone()).unwrap();
        assert_eq!(iso.volume_id(), "test-volume.0");
        assert_eq!(iso.system_id(), "LINUX");
        assert_eq!(iso.volume_space_size(), layout.volume_space_size);
        let walked = iso.walk().unwrap();
        for (path, record) in &walked {
            assert_eq!(layout.get(path), Some(record), "{path}");
        }
        assert_eq!(walked.len() + 1, layout.records.len());
        let vmlinuz = iso.get_path("IMAGES/PXEBOOT/VMLINUZ").unwrap();
        assert_eq!(iso.read_file(&vmlinuz, 100).unwrap(), b"kernel");
        let start = layout.get("IMAGES/PXEBOOT/VMLINUZ").unwrap().byte_offset() as usize;
        assert_eq!(&bytes[start..start + 6], b"kernel");
        let many = iso.get_path("MANY").unwrap();
        assert!(u64::from(many.length) > SECTOR, "MANY spans blocks");
        assert_eq!(iso.list_dir(&many).unwrap().len(), 120);
        assert_eq!(iso.read_file(&iso.get_path("MANY/77.DAT").unwrap(), 10).unwrap(), b"77\n");
        assert!(iso.list_dir(&iso.get_path("EMPTY").unwrap()).unwrap().is_empty());
        // records in ISO order
        let root: Vec<String> = iso.list_dir(iso.root()).unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(root, ["A.B", "COREOS", "EMPTY", "IMAGES", "MANY"]);
    }

    #[test]
    fn el_torito_and_ranges() {
        use super::super::eltorito::{BootEntry, Platform, read_el_torito};
        let source: SharedSource = Arc::new((0..=255u8).cycle().take(10_000).collect::<Vec<u8>>());
        let mut b = sample_tree();
        b.add_file_range("BOOT/LOADER.BIN", source.clone(), 1000, 3000).unwrap();
        b.add_file_range("BOOT/EFI.IMG", source.clone(), 0, 2049).unwrap();
        assert!(matches!(b.add_file_range("BOOT/PAST.END", source, 9000, 1001), Err(WriteError::Source { .. })));
        let mut catalog = BootCatalog::new(Platform::X86, BootEntry::no_emulation("BOOT/LOADER.BIN".to_string(), 4));
        catalog.push(Platform::EFI, BootEntry::no_emulation("/BOOT/EFI.IMG".to_string(), 5));
        let info = BTreeSet::from(["BOOT/LOADER.BIN".to_string()]);
        for catalog_path in [Some("BOOT/BOOT.CAT".to_string()), None] {
            let mut b = b.clone();
            let setup = BootSetup {
                catalog_path: catalog_path.clone(),
                catalog: catalog.clone(),
                boot_info_table: info.clone(),
            };
            b.set_boot(setup.clone()).unwrap();
            assert!(matches!(b.set_boot(setup), Err(WriteError::Boot(_))));
            let layout = b.layout().unwrap();
            let bytes = b.to_bytes().unwrap();
            assert_eq!(bytes.len() as u64, layout.image_len());
            let iso = IsoFs::from_source(bytes.clone()).unwrap();
            let el_torito = read_el_torito(&iso).unwrap().unwrap();
            assert_eq!(Some(el_torito.catalog_lba), layout.boot_catalog_lba);
            let loader = layout.get("BOOT/LOADER.BIN").unwrap();
            let efi = layout.get("BOOT/EFI.IMG").unwrap();
            let images: Vec<u32> = el_torito.catalog.entries().map(|(_, e)| e.image).collect();
            assert_eq!(images, [loader.lba, efi.lba]);
            // the catalog is the file, or in no directory
            let cat_file = iso.get_path("BOOT/BOOT.CAT").ok().map(|r| r.lba);
            assert_eq!(cat_file.is_some(), catalog_path.is_some());
            if catalog_path.is_none() {
                assert!(iso.walk().unwrap().iter().all(|(_, r)| r.lba != el_torito.catalog_lba));
            }
            // data streamed from the range, bytes 8..64 patched in the loader only
            let data = iso.read_file(&iso.get_path("BOOT/LOADER.BIN").unwrap(), 1 << 20).unwrap();
            let expected: Vec<u8> = (0..=255u8).cycle().skip(1000).take(3000).collect();
            assert_eq!((&data[..8], &data[64..]), (&expected[..8], &expected[64..]));
            let table = eltorito::boot_info_table(loader.lba, &expected).unwrap();
            assert_eq!(&data[8..64], &table);
            let efi_data = iso.read_file(&iso.get_path("BOOT/EFI.IMG").unwrap(), 1 << 20).unwrap();
            assert_eq!(efi_data, (0..=255u8).cycle().take(2049).collect::<Vec<u8>>());
        }
    }

    #[test]
    fn output_is_deterministic() {
        assert_eq!(sample_tree().to_bytes().unwrap(), sample_tree().to_bytes().unwrap());
    }

    #[test]
    fn iso_ordering() {
        use std::cmp::Ordering::*;
        assert_eq!(iso_order("1.DAT;1", "10.DAT;1"), Less);
        assert_eq!(iso_order("AB;1", "A.B;1"), Greater);
        assert_eq!(iso_order("A.B;1", "A.BC;1"), Less);
        assert_eq!(iso_order("IGNITION.IMG;1", "IMAGES"), Less);
        assert_eq!(iso_order("ROOTFS.IMG;1", "INITRD.IMG;1"), Greater);
    }

    #[test]
    fn rejects_bad_names_and_conflicts() {
        let mut b = IsoBuilder::new("v").unwrap();
        for bad in ["lower.txt", "TOOLONGNAME.TXT", "A.TOOL", "", "DIR.X/FILE", "A B", "A.B.C"] {
            assert!(matches!(b.add_file(bad, Vec::new()), Err(WriteError::InvalidName { .. })), "{bad}");
        }
        b.add_file("FILE", b"x".to_vec()).unwrap();
        assert!(matches!(b.add_file("FILE", Vec::new()), Err(WriteError::Exists(_))));
        assert!(matches!(b.add_file("FILE/SUB", Vec::new()), Err(WriteError::NotADirectory { .. })));
        assert!(IsoBuilder::new(&"x".repeat(33)).is_err());
        assert!(IsoBuilder::new("bad\u{7f}").is_err());
        let mut deep = IsoBuilder::new("v").unwrap();
        deep.add_file("A/B/C/D/E/F/G/H/FILE", Vec::new()).unwrap();
        assert!(matches!(deep.layout(), Err(WriteError::TooLarge(_))));
    }
}
