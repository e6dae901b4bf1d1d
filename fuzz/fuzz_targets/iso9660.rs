//! ISO 9660 reading: descriptor set, path lookup, directory listing and walk, file reads,
//! El Torito catalog, and `LiveIso::from_iso` (what `bootstream` runs on every base image).
//!
//! Input: the image from block 16 on (the volume descriptor set); the 32 KiB system area in
//! front of it is zero, so mutations are not spent on bytes the reader never looks at.
#![no_main]

use bootstream::formats::iso9660::{IsoFs, SECTOR, eltorito};
use bootstream::formats::liveiso::LiveIso;
use libfuzzer_sys::fuzz_target;

const SYSTEM_AREA: usize = 16 * SECTOR as usize;

const PATHS: &[&str] = &[
    "",
    "/",
    "COREOS",
    "COREOS/KARGS.JSO",
    "COREOS/IGNINFO.JSO",
    "COREOS/FEATURES.JSO",
    "COREOS/MINISO.DAT",
    "IMAGES/IGNITION.IMG",
    "IMAGES/PXEBOOT/VMLINUZ",
    "IMAGES/PXEBOOT/INITRD.IMG",
    "IMAGES/PXEBOOT/ROOTFS.IMG",
    "./IMAGES/../IMAGES//PXEBOOT/./INITRD.IMG",
    "../../ISOLINUX/ISOLINUX.CFG",
    "EFI/REDHAT/GRUB.CFG",
];

fuzz_target!(|data: &[u8]| {
    let mut image = vec![0u8; SYSTEM_AREA];
    image.extend_from_slice(data);
    let Ok(iso) = IsoFs::from_source(image.as_slice()) else {
        return;
    };
    let _ = (iso.volume_id(), iso.system_id(), iso.descriptors(), iso.volume_space_size());

    for path in PATHS {
        if let Ok(record) = iso.get_path(path) {
            assert!(record.end_offset() >= record.byte_offset());
            if record.is_dir {
                let _ = iso.list_dir(&record);
            } else if let Ok(bytes) = iso.read_file(&record, 64 * 1024) {
                assert_eq!(bytes.len(), record.length as usize);
            }
        }
    }
    let _ = iso.list_dir(iso.root());
    if let Ok(records) = iso.walk() {
        // (Names are not checked: an identifier such as `.;1` normalizes to an empty name, as
        // in coreos-installer; such a record is listed but cannot be looked up.)
        for (_, record) in records.iter().take(256) {
            if !record.is_dir {
                let _ = iso.read_file(record, 4096);
            }
        }
    }
    let _ = eltorito::read_el_torito(&iso);
    let _ = LiveIso::from_iso(&iso);
});
