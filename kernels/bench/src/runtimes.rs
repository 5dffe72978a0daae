//! Where the pinned runtime libraries are: `target/runtimes/runtimes.json`, written by
//! `cargo xtask runtimes` (which `cargo xtask bench` runs first), or `$KEEPALLOC_RUNTIMES`.
//! The bench reads the manifest and never fetches: it is a binary, not a test, and does not
//! link the test kit.

use std::path::PathBuf;

fn manifest() -> Result<serde_json::Value, String> {
    let path = std::env::var_os("KEEPALLOC_RUNTIMES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/runtimes/runtimes.json")
        });
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e} (run `cargo xtask runtimes`, or the bench through `cargo xtask bench`)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn file(section: &str, key: &str) -> Result<PathBuf, String> {
    let m = manifest()?;
    let p = m[section][key]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| format!("runtimes.json has no {section}.{key}"))?;
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} does not exist", p.display()))
    }
}

/// oneDNN's `libdnnl.so.3.2`.
pub fn onednn() -> Result<PathBuf, String> {
    file("onednn", "library")
}

/// ExecuTorch's XNNPACK backend (current XNNPACK): `$KEEPALLOC_XNNPACK_CURRENT` if set.
pub fn executorch_xnnpack() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KEEPALLOC_XNNPACK_CURRENT") {
        return Some(PathBuf::from(p));
    }
    file("executorch", "xnnpack_backend").ok()
}
