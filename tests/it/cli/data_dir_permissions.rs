//! Issue 41: the data directory holds every tenant's pull secret, the keys and the admin
//! credentials clusters uploaded. Other local users may read none of it, also when it was made by
//! an earlier version or with a loose umask.

use crate::common::*;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every entry under `dir` (not following symbolic links), with its mode and whether it is a link.
fn entries(dir: &Path, out: &mut Vec<(std::path::PathBuf, u32, bool)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        out.push((entry.path(), mode(&entry.path()), kind.is_symlink()));
        if kind.is_dir() {
            entries(&entry.path(), out);
        }
    }
}

#[test]
fn a_world_readable_data_directory_is_made_private_at_start_and_the_log_says_so() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = data.path();
    // As an earlier version under umask 022 left it.
    set_mode(root, 0o755);
    std::fs::write(root.join("api-token"), TEST_API_TOKEN).unwrap();
    set_mode(&root.join("api-token"), 0o644);
    std::fs::write(root.join("notes.txt"), "left by an operator").unwrap();
    set_mode(&root.join("notes.txt"), 0o644);
    std::fs::create_dir(root.join("logs")).unwrap();
    set_mode(&root.join("logs"), 0o755);
    std::fs::write(root.join("logs/host.log"), "a host's log").unwrap();
    set_mode(&root.join("logs/host.log"), 0o644);
    // A link to a file outside: neither followed nor changed.
    let target = outside.path().join("shared.txt");
    std::fs::write(&target, "not the server's to change").unwrap();
    set_mode(&target, 0o644);
    std::os::unix::fs::symlink(&target, root.join("link")).unwrap();

    let s = Server::start_logged_in(data, &[]);
    let root = s.data_dir.path();
    for name in
        ["state.db", "state.db-wal", "state.db-shm", "api-token", "kubeconfig", "url-signing.pem", "agent-auth.key"]
    {
        assert!(
            root.join(name).exists(),
            "no {name}; the data directory has {:?}",
            std::fs::read_dir(root).unwrap().collect::<Vec<_>>()
        );
        assert_eq!(mode(&root.join(name)), 0o600, "{name}");
    }
    assert_eq!(mode(root), 0o700, "the data directory");
    let mut all = Vec::new();
    entries(root, &mut all);
    for (path, mode, link) in &all {
        if *link {
            continue;
        }
        let want = if path.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(*mode, want, "{}", path.display());
    }
    assert_eq!(mode(&target), 0o644, "the link's target outside the data directory was changed");

    let log = s.log();
    let line = log.lines().find(|l| l.contains("tightened")).unwrap_or_else(|| panic!("nothing logged:\n{log}"));
    assert!(line.contains("WARN"), "{line}");
    for said in
        [". (was 0755)", "api-token (was 0644)", "notes.txt (was 0644)", "logs (was 0755)", "logs/host.log (was 0644)"]
    {
        assert!(line.contains(said), "{said} not in {line}");
    }
    assert!(!line.contains("link"), "{line}");
    let _ = s.kill();
}
