//! `libkeepalloc_preload.so`, built into an installed libdir ([`install`]) by `cargo xtask
//! install`.
//!
//! The preload is one C file (`runtimes/xnnpack/preload/keepalloc_preload.c`), compiled with
//! `$CC` rather than built by cargo: it must link the *shared* libkeepalloc (one owner per
//! process, shared with every caller of keepalloc's C API), which a cargo dependency on
//! keepalloc-capi would copy in statically instead, and it runs inside a static constructor
//! during `dlopen`, where C's lack of unwinding and of a global allocator is the point.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util;

/// The preload's file name.
pub const FILE: &str = "libkeepalloc_preload.so";

pub(crate) fn output(cmd: &mut Command) -> Result<Output, String> {
    cmd.output()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `readelf -d FILE`.
fn dynamic_section(file: &Path) -> Result<String, String> {
    let out = output(Command::new("readelf").arg("-dW").arg(file))?;
    if !out.status.success() {
        return Err(format!("readelf -d {}: {}", file.display(), text(&out)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Builds `libkeepalloc_preload.so` into `libdir`, beside an installed libkeepalloc
/// (`libdir/libkeepalloc.so`, the link to its soname'd file), and returns its path.
///
/// It is linked with `-L libdir -lkeepalloc`, so it needs libkeepalloc by its soname (whatever
/// that is), with RUNPATH `$ORIGIN`: it finds the libkeepalloc next to it wherever the libdir
/// is moved. Checked after the build with `readelf`: the soname needed, the RUNPATH, and
/// `xnn_initialize` exported.
pub fn install(libdir: &Path) -> Result<PathBuf, String> {
    let root = util::root();
    let keepalloc = libdir.join("libkeepalloc.so");
    if !keepalloc.exists() {
        return Err(format!(
            "{} is not installed: install libkeepalloc first",
            keepalloc.display()
        ));
    }
    let soname = dynamic_section(&keepalloc)?
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("Library soname: [")?;
            Some(rest.trim_end_matches(']').to_owned())
        })
        .ok_or_else(|| format!("{} has no soname", keepalloc.display()))?;
    let preload = libdir.join(FILE);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = output(
        Command::new(&cc)
            .args(["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
            .args(["-fPIC", "-shared", "-fvisibility=hidden"])
            .arg("-I")
            .arg(root.join("capi/include"))
            .arg(root.join("runtimes/xnnpack/preload/keepalloc_preload.c"))
            .arg("-o")
            .arg(&preload)
            .arg("-L")
            .arg(libdir)
            .arg("-lkeepalloc")
            .arg(format!("-Wl,-soname,{FILE}"))
            .args(["-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN"]),
    )?;
    if !out.status.success() {
        return Err(format!("{cc} keepalloc_preload.c: {}", text(&out)));
    }
    let dynamic = dynamic_section(&preload)?;
    if !dynamic.contains(&format!("Shared library: [{soname}]")) {
        return Err(format!(
            "{} does not need {soname}:\n{dynamic}",
            preload.display()
        ));
    }
    if !dynamic.contains("(RUNPATH)") || !dynamic.contains("[$ORIGIN]") {
        return Err(format!(
            "{} has no RUNPATH $ORIGIN:\n{dynamic}",
            preload.display()
        ));
    }
    let symbols = output(
        Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&preload),
    )?;
    if !String::from_utf8_lossy(&symbols.stdout)
        .lines()
        .any(|l| l.ends_with(" T xnn_initialize"))
    {
        return Err(format!(
            "{} does not export xnn_initialize",
            preload.display()
        ));
    }
    println!(
        "installed {} (needs {soname}, RUNPATH $ORIGIN)",
        preload.display()
    );
    Ok(preload)
}
