//! `cargo xtask preload-check`: ExecuTorch's XNNPACK adopted through the installed
//! `libkeepalloc_preload.so` (built by [`crate::install::preload`]), the check CI runs on the
//! installed files.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::install::preload::{FILE, output, text};
use crate::util;

use keepalloc_testkit::preload_env::with_preload;

/// `cargo xtask preload-check --help`.
pub const LONG_ABOUT: &str = "\
Installs keepalloc into PREFIX (cargo xtask install --prefix PREFIX, then
libkeepalloc_preload.so beside libkeepalloc, RUNPATH $ORIGIN), and runs ExecuTorch 1.5.1's
XNNPACK backend (cargo xtask runtimes) through the installed files: a C program
(runtimes/xnnpack/c/preload_check.c, linked against the installed libkeepalloc) and a Python
process through ctypes (runtimes/xnnpack/python/preload_check.py) dlopen the runtime, create,
run and delete FC operators and a subgraph, and read keepalloc_get_stats. With
LD_PRELOAD=PREFIX/lib/libkeepalloc_preload.so every allocation goes through the owner and
live bytes return to zero; without it the owner sees none. A missing runtime or python3 is an
error under CI=true, and NOT RUN otherwise.

environment: CC (default cc), PYTHON (default python3), CI.";

/// `cargo xtask preload-check` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Where to install (default target/preload-check/prefix).
    #[arg(long)]
    pub prefix: Option<PathBuf>,
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn executorch_xnnpack(root: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(root.join("target/runtimes/runtimes.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let p = PathBuf::from(v["executorch"]["xnnpack_backend"].as_str()?);
    p.is_file().then_some(p)
}

/// Runs one check, with `preload` in LD_PRELOAD or none; prints its output and time; fails
/// unless it exits 0.
fn check(label: &str, cmd: &mut Command, preload: Option<&Path>) -> Result<(), String> {
    let start = Instant::now();
    let out = output(with_preload(cmd, preload))?;
    let took = start.elapsed().as_secs_f64();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!("{label}: {}", text(&out)));
    }
    println!("preload-check: {label}: passed in {took:.3} s");
    Ok(())
}

/// Runs the command.
pub fn run(args: Args) -> Result<(), String> {
    let root = util::root();
    let prefix = args
        .prefix
        .unwrap_or_else(|| root.join("target/preload-check/prefix"));
    let Some(runtime) = executorch_xnnpack(&root) else {
        let why = "ExecuTorch's XNNPACK is not unpacked (run `cargo xtask runtimes`)";
        if ci() {
            return Err(format!("CI=true and {why}"));
        }
        eprintln!("preload-check: NOT RUN (passes only because CI is not true): {why}");
        return Ok(());
    };
    let layout = crate::install::Layout::new(&prefix, Path::new("lib"), None)?;
    crate::install::install(&layout, None)?;
    let libdir = layout.libdir.clone();
    // What `cargo xtask install` put there, not a copy built here.
    let preload = libdir.join(FILE);
    if !preload.is_file() {
        return Err(format!(
            "cargo xtask install did not install {}",
            preload.display()
        ));
    }
    let keepalloc = libdir.join("libkeepalloc.so");

    let exe = root.join("target/preload-check/preload_check");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = output(
        Command::new(&cc)
            .args(["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(prefix.join("include"))
            .arg(root.join("runtimes/xnnpack/c/preload_check.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&libdir)
            .arg("-lkeepalloc")
            .arg(format!("-Wl,-rpath,{}", libdir.display()))
            .args(["-ldl", "-lpthread", "-lm"]),
    )?;
    if !out.status.success() {
        return Err(format!("{cc} preload_check.c: {}", text(&out)));
    }
    check(
        "C program, LD_PRELOAD=the installed preload",
        Command::new(&exe).arg(&runtime).args(["ops", "adopted"]),
        Some(&preload),
    )?;
    check(
        "C program, no preload",
        Command::new(&exe).arg(&runtime).args(["ops", "none"]),
        None,
    )?;

    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if output(Command::new(&python).arg("--version")).is_err() {
        if ci() {
            return Err(format!("CI=true and {python} cannot be run"));
        }
        eprintln!(
            "preload-check: Python NOT RUN (passes only because CI is not true): no {python}"
        );
        return Ok(());
    }
    let script = root.join("runtimes/xnnpack/python/preload_check.py");
    for (expect, with) in [("adopted", Some(preload.as_path())), ("none", None)] {
        check(
            &format!(
                "Python ctypes, {}",
                if with.is_some() {
                    "LD_PRELOAD=the installed preload"
                } else {
                    "no preload"
                }
            ),
            Command::new(&python)
                .arg(&script)
                .arg(&runtime)
                .arg(&keepalloc)
                .arg(expect),
            with,
        )?;
    }
    println!("preload-check: 4 checks passed");
    Ok(())
}
