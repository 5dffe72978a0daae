//! The two release builds an install copies: the shared library with its soname, and the
//! static library with the system libraries it needs.
//!
//! Each is a `cargo rustc --crate-type ...` of `keepalloc-capi` in its own target directory
//! (`target/install`), so the soname flag never invalidates the normal build.

use std::path::PathBuf;

use super::Names;
use crate::util;

/// What the builds produced.
pub struct Built {
    pub shared: PathBuf,
    pub archive: PathBuf,
    /// `stdc++`, `pthread`, ...: what rustc's `--print native-static-libs` says
    /// `libkeepalloc.a` needs, each once, in rustc's order.
    pub native_static_libs: Vec<String>,
}

fn cargo_rustc(crate_type: &str, features: Option<&str>, rustc: &[&str]) -> Result<String, String> {
    let mut cmd = util::cargo();
    cmd.args(["rustc", "--release", "-p", "keepalloc-capi", "--lib"])
        .args(["--crate-type", crate_type])
        .env("CARGO_TARGET_DIR", util::root().join("target/install"));
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    cmd.arg("--").args(rustc);
    println!(
        "xtask install: cargo rustc --crate-type {crate_type} {}",
        rustc.join(" ")
    );
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "cargo rustc --crate-type {crate_type} failed:\n{stderr}"
        ));
    }
    Ok(stderr)
}

pub fn build(names: &Names, features: Option<&str>) -> Result<Built, String> {
    cargo_rustc(
        "cdylib",
        features,
        &[&format!("-Clink-arg=-Wl,-soname,{}", names.soname)],
    )?;
    let notes = cargo_rustc("staticlib", features, &["--print", "native-static-libs"])?;
    let printed = notes
        .lines()
        .find_map(|l| l.split("native-static-libs:").nth(1))
        .ok_or("rustc printed no native-static-libs")?;
    // rustc repeats a library once per dependency that asked for it; keep the first.
    let mut native_static_libs: Vec<String> = Vec::new();
    for flag in printed.split_whitespace() {
        let lib = flag
            .strip_prefix("-l")
            .ok_or_else(|| format!("native-static-libs: `{flag}` is not -lNAME"))?;
        if !native_static_libs.iter().any(|l| l == lib) {
            native_static_libs.push(lib.to_owned());
        }
    }
    let dir = util::root().join("target/install/release");
    Ok(Built {
        shared: dir.join("libkeepalloc_capi.so"),
        archive: dir.join("libkeepalloc_capi.a"),
        native_static_libs,
    })
}
