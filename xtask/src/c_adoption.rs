//! `cargo xtask c-adoption`: the C adoption check (`runtimes/xnnpack/include/keepalloc_xnnpack.h`)
//! against the real XNNPACKs, from C.
//!
//! Builds `libkeepalloc.a` (release), compiles `runtimes/xnnpack/c/adoption.c` against
//! `keepalloc.h` and `keepalloc_xnnpack.h`, and runs it, each case in its own process:
//! Debian's freshly loaded `libXNNPACK.so.0` must adopt keepalloc's table; the same library
//! after `xnn_initialize(NULL)` (the negative control of the check) and ExecuTorch's XNNPACK
//! (`cargo xtask runtimes`) must be reported "not adopted" by `keepalloc_acquire`.
//! A missing library is an error under `CI=true`, and "NOT RUN" otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

const DEBIAN: &str = "/usr/lib/x86_64-linux-gnu/libXNNPACK.so.0";

/// `cargo xtask c-adoption --help`.
pub const LONG_ABOUT: &str = "\
Builds libkeepalloc.a (release), compiles runtimes/xnnpack/c/adoption.c against keepalloc.h
and keepalloc_xnnpack.h, and runs it, each case in its own process: Debian's freshly loaded
libXNNPACK.so.0 must adopt keepalloc's table; the same library after xnn_initialize(NULL)
(the negative control) and ExecuTorch's XNNPACK (`cargo xtask runtimes`) must be reported
\"not adopted\" by keepalloc_acquire. A missing library is an error under CI=true, and
\"NOT RUN\" otherwise.

environment: CC (default cc), CI.";

/// `cargo xtask c-adoption` takes no options.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs the command.
pub fn run(_: Args) -> Result<(), String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let root = util::root();
    util::run(util::cargo().args(["build", "--release", "-p", "keepalloc-capi"]))?;
    let out = root.join("target/c-adoption");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let exe = out.join("adoption");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    util::run(
        Command::new(cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE"])
            .arg("-I")
            .arg(root.join("capi/include"))
            .arg("-I")
            .arg(root.join("runtimes/xnnpack/include"))
            .arg(root.join("runtimes/xnnpack/c/adoption.c"))
            .arg(root.join("target/release/libkeepalloc_capi.a"))
            // libkeepalloc.a's C++ hook trampoline needs the C++ runtime.
            .args(["-lpthread", "-ldl", "-lm", "-lstdc++", "-o"])
            .arg(&exe),
    )?;
    let mut cases: Vec<Vec<String>> = Vec::new();
    let mut missing = Vec::new();
    if Path::new(DEBIAN).is_file() {
        cases.push(vec!["debian".into(), DEBIAN.into(), "fresh".into()]);
        cases.push(vec![
            "debian".into(),
            DEBIAN.into(),
            "preinitialized".into(),
        ]);
    } else {
        missing.push(format!("{DEBIAN} (libxnnpack-dev)"));
    }
    match executorch_xnnpack(&root) {
        Some(p) => cases.push(vec!["current".into(), p.display().to_string()]),
        None => missing.push("ExecuTorch's XNNPACK (run `cargo xtask runtimes`)".into()),
    }
    if !missing.is_empty() {
        let what = missing.join(", ");
        if ci {
            return Err(format!("CI=true and missing: {what}"));
        }
        eprintln!("c-adoption: NOT RUN for {what} (passes only because CI is not true)");
    }
    for case in &cases {
        util::run(Command::new(&exe).args(case))?;
    }
    println!("c-adoption: {} cases passed", cases.len());
    Ok(())
}

fn executorch_xnnpack(root: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(root.join("target/runtimes/runtimes.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let p = PathBuf::from(v["executorch"]["xnnpack_backend"].as_str()?);
    p.is_file().then_some(p)
}
