//! Initrd reading: `initrd::read_initrd` (concatenated gzip / uncompressed newc members, NUL
//! padding, default limits), and the Ignition archive round trip
//! (`try_ignition_archive` then `read_initrd` gives the config back).
#![no_main]

use bootstream::formats::initrd;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(files) = initrd::read_initrd(data) {
        for (path, contents) in &files {
            assert!(contents.len() <= 128 << 20, "{path}");
        }
    }
    // Small inputs double as Ignition configs to pack.
    if data.len() <= 64 * 1024 {
        if let Ok(archive) = initrd::try_ignition_archive(data) {
            let files = initrd::read_initrd(&archive).expect("our own archive reads back");
            // An empty config gives an archive without members (as assisted-image-service's).
            let expected = if data.is_empty() { None } else { Some(data) };
            assert_eq!(files.get(initrd::IGNITION_CONFIG_PATH).map(Vec::as_slice), expected);
        }
    }
});
