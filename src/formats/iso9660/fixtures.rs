//! Test helper: the coreos-installer ISO fixtures shared read-only next to the repository.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Directory of the `*.iso.xz` fixtures (never copied into this repository).
pub(crate) fn fixture_dir() -> PathBuf {
    crate::compat_path("fixtures/coreos-installer/iso")
}

/// Decompresses fixture `name` (without `.xz`) into an anonymous temporary file.
pub(crate) fn fixture(name: &str) -> File {
    let path = fixture_dir().join(format!("{name}.xz"));
    assert!(path.exists(), "missing fixture {}", path.display());
    let out = tempfile::tempfile().expect("creating temporary file");
    let status = Command::new("xz")
        .arg("-dc")
        .arg(&path)
        .stdout(Stdio::from(out.try_clone().expect("cloning temporary file")))
        .status()
        .expect("running xz (is it installed?)");
    assert!(status.success(), "xz -dc {} failed: {status}", path.display());
    // xz wrote through a duplicate of our descriptor, which shares its file position.
    let mut out = out;
    std::io::Seek::rewind(&mut out).expect("rewinding temporary file");
    out
}
