//! The private copy of the working tree that every stage works on.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The private copy of the tree that every stage works on (its path is fixed per checkout,
/// so builds in it stay incremental from one run to the next).
pub(super) fn scratch_dir(root: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut h);
    std::env::temp_dir().join(format!("keepalloc-mutants-{:016x}", h.finish()))
}

/// Names never copied into the snapshot, at any depth.
const NOT_COPIED: [&str; 4] = [".git", "target", "mutants.out", "mutants.out.old"];

/// Makes `dest` an exact copy of the working tree's files (without build outputs), writing
/// only files whose content changed so that cargo's fingerprints of the rest stay fresh.
pub(super) fn snapshot(root: &Path, dest: &Path) -> Result<(), String> {
    let mut files = BTreeSet::new();
    list_files(root, Path::new(""), &mut files)?;
    for rel in &files {
        let from = root.join(rel);
        let to = dest.join(rel);
        let content = fs::read(&from).map_err(|e| format!("read {}: {e}", from.display()))?;
        if fs::read(&to).ok().as_deref() != Some(&content[..]) {
            if let Some(dir) = to.parent() {
                fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            }
            fs::write(&to, &content).map_err(|e| format!("write {}: {e}", to.display()))?;
        }
    }
    // Files deleted from the tree since the last run go from the copy too.
    let mut stale = BTreeSet::new();
    if dest.exists() {
        list_files(dest, Path::new(""), &mut stale)?;
    }
    for rel in stale.difference(&files) {
        let path = dest.join(rel);
        fs::remove_file(&path).map_err(|e| format!("remove {}: {e}", path.display()))?;
    }
    Ok(())
}

fn list_files(base: &Path, rel: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), String> {
    let dir = base.join(rel);
    let entries = fs::read_dir(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        let name = entry.file_name();
        if NOT_COPIED.iter().any(|n| name == *n) {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|e| format!("stat {}: {e}", entry.path().display()))?;
        let path = rel.join(&name);
        if kind.is_dir() {
            list_files(base, &path, out)?;
        } else if kind.is_file() {
            out.insert(path);
        }
    }
    Ok(())
}
