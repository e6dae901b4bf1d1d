//! `/coreos/igninfo.json`, `/coreos/kargs.json`, `/coreos/features.json`, the karg areas they
//! point at and the legacy `coreKarg` header, read by `LiveIso::from_iso`; then karg editing
//! (`kargs::apply_ops`, `render_area`, `parse_area`) on what was read.
//!
//! Input: parts separated by `\0--\0`:
//!   0. igninfo.json, 1. kargs.json, 2. features.json (an empty part leaves the file out),
//!   3. the end of the system area (right-aligned before block 16: the legacy header lives there),
//!   4. karg edits, one per line: `a ARG`, `d ARG`, `r KEY=OLD=NEW`,
//!   5... further files, each `PATH\nCONTENTS` (e.g. `EFI/REDHAT/GRUB.CFG\n...`).
//! A small image is built from them with the crate's own ISO writer, so that fuzzing goes into
//! the JSON and the areas rather than into the directory structure (the iso9660 target's job).
#![no_main]

use bootstream::formats::iso9660::IsoFs;
use bootstream::formats::iso9660::writer::IsoBuilder;
use bootstream::formats::kargs::{self, KargOp};
use bootstream::formats::liveiso::LiveIso;
use libfuzzer_sys::fuzz_target;

const SEP: &[u8] = b"\0--\0";
const SYSTEM_AREA: usize = 32 * 1024;

fn split<'a>(mut data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    while let Some(at) = data.windows(sep.len()).position(|w| w == sep) {
        parts.push(&data[..at]);
        data = &data[at + sep.len()..];
    }
    parts.push(data);
    parts
}

fuzz_target!(|data: &[u8]| {
    let parts = split(data, SEP);
    let part = |i: usize| parts.get(i).copied().unwrap_or_default();
    let Ok(mut iso) = IsoBuilder::new("fedora-coreos-fuzz") else { return };

    let tail = part(3);
    let tail = &tail[tail.len().saturating_sub(SYSTEM_AREA)..];
    let mut system_area = vec![0u8; SYSTEM_AREA - tail.len()];
    system_area.extend_from_slice(tail);
    if iso.system_area(system_area).is_err() {
        return;
    }

    let mut have = std::collections::HashSet::new();
    for (i, path) in [(0, "COREOS/IGNINFO.JSO"), (1, "COREOS/KARGS.JSO"), (2, "COREOS/FEATURES.JSO")] {
        if !part(i).is_empty() && iso.add_file(path, part(i)).is_ok() {
            have.insert(path.to_string());
        }
    }
    for file in parts.iter().skip(5) {
        let (path, contents) = match file.iter().position(|b| *b == b'\n') {
            Some(nl) => (&file[..nl], &file[nl + 1..]),
            None => (&file[..], &[][..]),
        };
        let Ok(path) = std::str::from_utf8(path) else { continue };
        let path = path.trim_matches('/').to_uppercase();
        if have.contains(&path) || have.len() > 16 {
            continue;
        }
        if iso.add_file(&path, contents).is_ok() {
            have.insert(path);
        }
    }
    // The rest of a live ISO, unless the input provided them.
    for (path, len) in [
        ("IMAGES/IGNITION.IMG", 4096),
        ("IMAGES/PXEBOOT/VMLINUZ", 8),
        ("IMAGES/PXEBOOT/INITRD.IMG", 8),
        ("IMAGES/PXEBOOT/ROOTFS.IMG", 8),
    ] {
        if !have.contains(path) {
            let _ = iso.add_file(path, vec![0u8; len]);
        }
    }
    let Ok(bytes) = iso.to_bytes() else { return };
    let Ok(fs) = IsoFs::from_source(bytes) else { return };
    let Ok(live) = LiveIso::from_iso(&fs) else { return };

    assert!(live.ignition_area.end() <= live.len);
    let Some(areas) = live.kargs else { return };
    assert!(areas.size <= 2048);
    for area in &areas.areas {
        assert!(area.offset + areas.size as u64 <= live.len);
    }

    let ops: Vec<KargOp> = String::from_utf8_lossy(part(4))
        .lines()
        .take(32)
        .filter_map(|line| {
            let (op, arg) = line.split_at_checked(2)?;
            Some(match op {
                "a " => KargOp::Append(arg.into()),
                "d " => KargOp::Delete(arg.into()),
                "r " => KargOp::Replace(arg.into()),
                _ => return None,
            })
        })
        .collect();
    let Ok(edited) = kargs::apply_ops(&areas.current, &ops) else { return };
    for area in &areas.areas {
        let Ok(rendered) = kargs::render_area(&edited, areas.size, area.end, area.pad) else { continue };
        assert_eq!(rendered.len(), areas.size);
        let back = kargs::parse_area(&rendered, area.end, area.pad).expect("a rendered area parses");
        // Reading an area back gives what was written, unless the command line itself ends
        // with the fill characters (which coreos-installer cannot tell apart either).
        let ends_with_fill = edited.ends_with(char::from(area.pad)) || edited.ends_with(char::from(area.end));
        if area.end != area.pad && !ends_with_fill {
            assert_eq!(back, edited.trim());
        }
    }
});
