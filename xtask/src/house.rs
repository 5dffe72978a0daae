//! Two rules of ARCHITECTURE.md that a reviewer cannot see in a diff, checked over the whole
//! tree: no `#[path]` attribute reaches into another crate (shared test code lives in
//! `testkit/`), and no Rust source file grows past [`MAX_LINES`] lines.

use std::path::{Path, PathBuf};

/// A file longer than this holds more than one idea; split it (or list it in [`LONG`] with
/// the reason it is one idea).
const MAX_LINES: usize = 800;

/// Files allowed past [`MAX_LINES`], each with the reason it is one idea. None today.
const LONG: &[(&str, &str)] = &[];

/// Every `.rs` file under `root`, outside `target/` and hidden folders.
fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The folder of the crate a path belongs to: its nearest ancestor with a `Cargo.toml`.
fn crate_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|dir| dir.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// The `#[path = "..."]` attributes of `file` that resolve outside its crate, as
/// `file:line -> target`.
fn escaping_paths(file: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return vec![format!("{}: unreadable", file.display())];
    };
    let (Some(dir), Some(home)) = (file.parent(), crate_of(file)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("#[path = \"") else {
            continue;
        };
        let Some((target, _)) = rest.split_once('"') else {
            continue;
        };
        // A missing target does not compile; canonicalize only to resolve `..`.
        let resolved = dir.join(target);
        let resolved = resolved.canonicalize().unwrap_or(resolved);
        let home = home.canonicalize().unwrap_or(home.clone());
        if crate_of(&resolved).as_deref() != Some(home.as_path()) {
            out.push(format!("{}:{} -> {target}", file.display(), i + 1));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util;

    #[test]
    fn no_path_attribute_leaves_its_crate() {
        let files = rust_files(&util::root());
        assert!(files.len() > 100, "found only {} .rs files", files.len());
        let escapes: Vec<String> = files.iter().flat_map(|f| escaping_paths(f)).collect();
        assert!(
            escapes.is_empty(),
            "#[path] reaching into another crate (share the code through testkit/ or a \
             crate's API instead):\n{}",
            escapes.join("\n")
        );
    }

    /// The control: a tree of two crates, one including the other's file.
    #[test]
    fn an_escaping_path_is_seen_and_a_local_one_is_not() {
        let root = std::env::temp_dir().join(format!("keepalloc-house-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (file, text) in [
            ("a/Cargo.toml", ""),
            ("b/Cargo.toml", ""),
            ("b/src/shared.rs", ""),
            ("a/tests/common/local.rs", ""),
            (
                "a/tests/t.rs",
                "#[path = \"../../b/src/shared.rs\"]\nmod shared;\n#[path = \"common/local.rs\"]\nmod local;\n",
            ),
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let escapes: Vec<String> = rust_files(&root)
            .iter()
            .flat_map(|f| escaping_paths(f))
            .collect();
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(escapes.len(), 1, "{escapes:?}");
        assert!(
            escapes[0].ends_with("t.rs:1 -> ../../b/src/shared.rs"),
            "{escapes:?}"
        );
    }

    #[test]
    fn no_source_file_is_over_the_limit() {
        let root = util::root();
        let long: Vec<String> = rust_files(&root)
            .iter()
            .filter_map(|f| {
                let rel = f
                    .strip_prefix(&root)
                    .unwrap_or(f)
                    .to_string_lossy()
                    .into_owned();
                let lines = std::fs::read_to_string(f).ok()?.lines().count();
                (lines > MAX_LINES && !LONG.iter().any(|(p, _)| *p == rel))
                    .then(|| format!("{rel}: {lines} lines"))
            })
            .collect();
        assert!(
            long.is_empty(),
            "over {MAX_LINES} lines (split by idea, or list in LONG with why it is one):\n{}",
            long.join("\n")
        );
    }
}
