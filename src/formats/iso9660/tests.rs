//! Reader tests against coreos-installer's `synthetic.iso` (spec-images.md §8.1 anchors) and against
//! hand-corrupted images.

use super::fixtures::fixture;
use super::*;
use crate::errors::chain;

fn synthetic() -> IsoFs {
    IsoFs::open(fixture("synthetic.iso")).expect("opening synthetic.iso")
}

fn synthetic_bytes() -> Vec<u8> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut fixture("synthetic.iso"), &mut bytes).unwrap();
    bytes
}

#[test]
fn primary_descriptor() {
    let iso = synthetic();
    assert_eq!(iso.system_id(), "system-ID-string");
    assert_eq!(iso.volume_id(), "volume-ID-string");
    assert_eq!(iso.volume_space_size(), 338);
    assert_eq!(iso.root().name, ".");
    assert!(iso.root().is_dir);
    assert_eq!(iso.image_len(), 692224);
    // synthetic.iso has only a PVD and the terminator
    assert!(matches!(iso.descriptors(), [Descriptor::Primary(p)] if p.volume_id == "volume-ID-string"));
}

#[test]
fn truncated_image_is_incomplete() {
    let file = fixture("synthetic.iso");
    file.set_len(file.metadata().unwrap().len() / 2).unwrap();
    let err = IsoFs::open(file).unwrap_err();
    assert_eq!(err.to_string(), "ISO image is incomplete");
    assert!(!err.is_not_found());
}

#[test]
fn get_path() {
    let iso = synthetic();
    assert_eq!(iso.get_path("/").unwrap().name, ".");
    assert_eq!(iso.get_path("").unwrap(), *iso.root());
    let content = iso.get_path("./CONTENT").unwrap();
    assert_eq!(content.name, "CONTENT");
    assert!(content.is_dir);
    let file = iso.get_path("CONTENT/FILE.TXT").unwrap();
    assert!(!file.is_dir);
    assert_eq!(iso.get_path("/CONTENT/../CONTENT/./FILE.TXT").unwrap(), file);
    assert_eq!(iso.get_path("../../CONTENT//FILE.TXT").unwrap(), file);
    // exact, case-sensitive matching: callers pass the upper-case 8.3 name
    assert!(iso.get_path("content/file.txt").unwrap_err().is_not_found());
}

#[test]
fn missing_paths_are_not_found() {
    let iso = synthetic();
    let err = iso.get_path("MISSING").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "no record for MISSING in directory ");
    let err = iso.get_path("MISSING/STUFF.TXT").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "intermediate directory MISSING does not exist");
    let err = iso.get_path("CONTENT/FILE.TXT/STUFF.TXT").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "component \"FILE.TXT\" in path CONTENT/FILE.TXT/STUFF.TXT is not a directory");
    let err = iso.get_path("CONTENT/DIR/NOPE").unwrap_err();
    assert_eq!(err.to_string(), "no record for NOPE in directory CONTENT/DIR");
}

#[test]
fn list_dir() {
    let iso = synthetic();
    let content = iso.get_path("CONTENT").unwrap();
    let names: Vec<String> = iso.list_dir(&content).unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["DIR", "FILE.TXT"]);
    let file = iso.get_path("CONTENT/FILE.TXT").unwrap();
    assert!(matches!(iso.list_dir(&file), Err(IsoError::Invalid(_))));
}

#[test]
fn read_deep_file() {
    let iso = synthetic();
    let file = iso.get_path("REALLY/VERY/DEEPLY/NESTED/FILE.TXT").unwrap();
    assert_eq!(iso.read_file(&file, 1024).unwrap(), b"foo\n");
    let err = iso.read_file(&file, 3).unwrap_err();
    assert!(matches!(err, IsoError::TooLarge { length: 4, limit: 3, .. }), "{err}");
    let dir = iso.get_path("REALLY").unwrap();
    assert!(matches!(iso.read_file(&dir, 1 << 20), Err(IsoError::Invalid(_))));
}

#[test]
fn walk() {
    let mut expected: Vec<String> = [
        "CONTENT",
        "CONTENT/DIR",
        "CONTENT/DIR/SUBFILE.TXT",
        "CONTENT/FILE.TXT",
        "LARGEDIR",
        "NAMES",
        r#"NAMES/!"%&'()*.+,-"#,
        "NAMES/:<=>?",
        "NAMES/ABC",
        "NAMES/ABC.D",
        "NAMES/ABC.DE",
        "NAMES/ABC.DEF",
        "NAMES/ABCDE000",
        "NAMES/ABCDEFGH",
        "NAMES/ABCDEFGH.I",
        "NAMES/ABCDEFGH.IJ",
        "NAMES/ABCDEFGH.IJK",
        "NAMES/ABCDEFGH.M",
        "NAMES/ABCDEFGH.MN",
        "NAMES/ABCDEFGH.MNO",
        "REALLY",
        "REALLY/VERY",
        "REALLY/VERY/DEEPLY",
        "REALLY/VERY/DEEPLY/NESTED",
        "REALLY/VERY/DEEPLY/NESTED/FILE.TXT",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(expected.len(), 25);
    expected.extend((1..=150).map(|i| format!("LARGEDIR/{i}.DAT")));
    // On-disk (ISO-sorted) order happens to equal byte order for these names.
    expected.sort_unstable();

    let iso = synthetic();
    let walked = iso.walk().unwrap();
    let paths: Vec<&str> = walked.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, expected);
    // LARGEDIR's 150 records span several blocks, exercising the zero-padding skip.
    let largedir = iso.get_path("LARGEDIR").unwrap();
    assert!(u64::from(largedir.length) > SECTOR);
    assert_eq!(iso.list_dir(&largedir).unwrap().len(), 150);
    for (path, record) in &walked {
        assert_eq!(iso.get_path(path).unwrap(), *record, "{path}");
        if path.starts_with("LARGEDIR/") {
            assert_eq!(iso.read_file(record, 16).unwrap().len(), 4);
        }
    }
}

#[test]
fn in_memory_source_matches_file() {
    let bytes = synthetic_bytes();
    let from_memory = IsoFs::from_source(bytes).unwrap();
    assert_eq!(from_memory.walk().unwrap(), synthetic().walk().unwrap());
}

#[test]
fn path_components_resolution() {
    assert_eq!(path_components("z"), ["z"]);
    assert_eq!(path_components("/a/./../b"), ["b"]);
    assert_eq!(path_components("./a/../../b"), ["b"]);
    assert!(path_components("/").is_empty());
    assert!(path_components("").is_empty());
}

#[test]
fn identifier_normalization() {
    assert_eq!(parse_file_identifier(b"VMLINUZ.;1").unwrap(), "VMLINUZ");
    assert_eq!(parse_file_identifier(b"KARGS.JSO;1").unwrap(), "KARGS.JSO");
    assert_eq!(parse_file_identifier(b"A;B").unwrap(), "A.B");
    assert_eq!(parse_file_identifier(b"AB\0CD").unwrap(), "AB");
    assert_eq!(parse_file_identifier(b"lower").unwrap(), "lower");
    let err = parse_file_identifier(b"A\xffB").unwrap_err();
    assert!(err.to_string().starts_with("invalid string name"), "{err}");
    assert_eq!(parse_a_string(b"LINUX   \0junk").unwrap(), "LINUX");
    assert_eq!(parse_a_string(b"a;b/c  ").unwrap(), "a;b/c");
}

/// Byte offset in synthetic.iso of `record`'s own directory record inside `dir`.
fn record_position(bytes: &[u8], dir: &Record, name: &[u8]) -> usize {
    let start = dir.byte_offset() as usize;
    let area = &bytes[start..start + dir.length as usize];
    area.windows(name.len()).position(|w| w == name).map(|p| start + p - RECORD_HEADER_LEN).expect("record not found")
}

#[test]
fn record_past_end_of_image_is_an_error() {
    let mut bytes = synthetic_bytes();
    let iso = IsoFs::from_source(bytes.clone()).unwrap();
    let content = iso.get_path("CONTENT").unwrap();
    let root = iso.root().clone();
    let pos = record_position(&bytes, &root, b"CONTENT");
    // point CONTENT at a block far beyond the end of the image
    bytes[pos + 2..pos + 6].copy_from_slice(&0x00ff_ffffu32.to_le_bytes());
    let iso = IsoFs::from_source(bytes.clone()).unwrap();
    let err = iso.get_path("CONTENT/FILE.TXT").unwrap_err();
    assert!(!err.is_not_found());
    assert!(err.to_string().contains("extends past the end of the image"), "{err}");
    assert!(iso.walk().is_err());
    // a huge length must be rejected before allocating
    bytes[pos + 2..pos + 6].copy_from_slice(&content.lba.to_le_bytes());
    bytes[pos + 10..pos + 14].copy_from_slice(&u32::MAX.to_le_bytes());
    let iso = IsoFs::from_source(bytes).unwrap();
    assert!(iso.list_dir(&iso.get_path("CONTENT").unwrap()).is_err());
}

#[test]
fn directory_cycle_is_an_error() {
    let mut bytes = synthetic_bytes();
    let iso = IsoFs::from_source(bytes.clone()).unwrap();
    let dir = iso.get_path("CONTENT/DIR").unwrap();
    let content = iso.get_path("CONTENT").unwrap();
    // make CONTENT/DIR point back at CONTENT
    let pos = record_position(&bytes, &content, b"DIR");
    bytes[pos + 2..pos + 6].copy_from_slice(&content.lba.to_le_bytes());
    bytes[pos + 10..pos + 14].copy_from_slice(&content.length.to_le_bytes());
    assert_ne!(dir.lba, content.lba);
    let iso = IsoFs::from_source(bytes).unwrap();
    let err = iso.walk().unwrap_err();
    assert!(err.to_string().contains("points at the extent of another directory"), "{err}");
    // lookups are bounded by the path, so they still work
    assert_eq!(iso.get_path("CONTENT/DIR/DIR/DIR/FILE.TXT").unwrap().name, "FILE.TXT");
}

#[test]
fn overlong_record_is_an_error() {
    let mut bytes = synthetic_bytes();
    let iso = IsoFs::from_source(bytes.clone()).unwrap();
    let content = iso.get_path("CONTENT").unwrap();
    let pos = record_position(&bytes, &content, b"FILE.TXT");
    // identifier length running past the record
    bytes[pos + 32] = 200;
    let iso = IsoFs::from_source(bytes).unwrap();
    let err = iso.list_dir(&content).unwrap_err();
    assert!(chain(&err).to_string().contains("overruns"), "{}", chain(&err));
    // the record before the corrupt one is still found, as in coreos-installer
    assert_eq!(iso.get_path("CONTENT/DIR").unwrap().name, "DIR");
}

#[test]
fn bad_descriptors_are_errors() {
    let bytes = synthetic_bytes();
    let pvd = (DESCRIPTOR_SET_LBA * SECTOR) as usize;

    let mut wrong_id = bytes.clone();
    wrong_id[pvd + 1..pvd + 6].copy_from_slice(b"CD002");
    let err = IsoFs::from_source(wrong_id).unwrap_err();
    assert!(chain(&err).to_string().contains("unknown descriptor ID"), "{}", chain(&err));

    let mut wrong_version = bytes.clone();
    wrong_version[pvd + 6] = 2;
    let err = IsoFs::from_source(wrong_version).unwrap_err();
    assert!(chain(&err).to_string().contains("unknown descriptor version 2"), "{}", chain(&err));

    // terminator replaced by an unknown type, and so on up to the end of the image
    let mut no_terminator = bytes.clone();
    for lba in 17..338 {
        no_terminator[lba * SECTOR as usize] = 7;
    }
    assert!(IsoFs::from_source(no_terminator).is_err());

    let empty: &[u8] = &[];
    let err = IsoFs::from_source(empty).unwrap_err();
    assert!(err.to_string().contains("past the end of the image"), "{err}");

    let mut no_primary = bytes;
    no_primary[pvd] = 2;
    let err = IsoFs::from_source(no_primary).unwrap_err();
    assert_eq!(err.to_string(), "no primary volume descriptor found in ISO");
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn pristine() -> &'static [u8] {
        static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
        BYTES.get_or_init(synthetic_bytes)
    }

    fn exercise(iso: &IsoFs<Vec<u8>>) {
        let _ = iso.walk();
        let _ = iso.get_path("REALLY/VERY/DEEPLY/NESTED/FILE.TXT");
        if let Ok(record) = iso.get_path("CONTENT/FILE.TXT") {
            let _ = iso.read_file(&record, 1 << 20);
        }
    }

    proptest! {
        // Failures print their input; no regression files are written into the source tree.
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Corrupting metadata bytes (descriptors and directories live in the first ~60 KiB)
        /// yields errors or different trees, never panics or hangs.
        #[test]
        fn corrupted_metadata_never_panics(
            edits in proptest::collection::vec((32768usize..120_000, any::<u8>()), 1..32)
        ) {
            let mut bytes = pristine().to_vec();
            for (pos, value) in edits {
                bytes[pos] = value;
            }
            if let Ok(iso) = IsoFs::from_source(bytes) {
                exercise(&iso);
            }
        }

        #[test]
        fn truncated_images_never_panic(len in 0usize..120_000) {
            let bytes = pristine()[..len].to_vec();
            if let Ok(iso) = IsoFs::from_source(bytes) {
                exercise(&iso);
            }
        }
    }
}
