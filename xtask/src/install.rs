//! `cargo xtask install --prefix DIR` and `cargo xtask install-test`: keepalloc installed as a
//! C library.
//!
//! `install` builds the `keepalloc` package in release mode, in its own target directory
//! (`target/install`, so the flags below never invalidate the normal build), twice with
//! `cargo rustc`:
//!
//! * `--crate-type cdylib -C link-arg=-Wl,-soname,libkeepalloc.so.<major>`: the shared
//!   library, with its soname;
//! * `--crate-type staticlib --print native-static-libs`: the static library, and the list of
//!   system libraries it needs, which becomes `Libs.private` of the pkg-config file;
//!
//! then installs `DIR/include/keepalloc.h`, `DIR/lib/libkeepalloc.so.<major>` with the
//! `libkeepalloc.so` symlink, `DIR/lib/libkeepalloc.a` and `DIR/lib/pkgconfig/keepalloc.pc`.
//! This is what cargo-c's `cargo cinstall` does; cargo-c itself is not used: its latest release
//! (0.10.26) needs rustc 1.97 (this toolchain is 1.95), and the last one that supports 1.95
//! (0.10.24, built on cargo 0.98) locks 419 crates — measured here, `cargo install cargo-c
//! --version 0.10.24 --locked` had compiled 143 of them after 21 minutes (nice -j1 beside the
//! other builds on this 2-core machine) — while this file needs nothing but cargo, `cc` and
//! `readelf`.
//!
//! `install-test` installs into `target/install-test/prefix`, then builds a C program with
//! `pkg-config --cflags --libs keepalloc` (shared) and with `pkg-config --static --cflags
//! --libs keepalloc` (static: `-lkeepalloc` taken as `libkeepalloc.a`), runs both, and checks
//! with `readelf` the shared library's soname, that the shared program needs
//! `libkeepalloc.so.<major>` and that the static one needs no libkeepalloc at all.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

const HELP: &str = "\
usage: cargo xtask install --prefix DIR [--features F]
       cargo xtask install-test

install       builds keepalloc (release) and installs DIR/include/keepalloc.h,
              DIR/lib/libkeepalloc.so.0 (soname libkeepalloc.so.0) + libkeepalloc.so,
              DIR/lib/libkeepalloc.a and DIR/lib/pkgconfig/keepalloc.pc
install-test  installs into target/install-test/prefix and builds, links and runs a C
              program through pkg-config, shared and static
";

/// What `install` produced.
struct Installed {
    shared: PathBuf,
    major: String,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let mut prefix = None;
    let mut features = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--prefix" => prefix = Some(PathBuf::from(it.next().ok_or("--prefix needs a DIR")?)),
            "--features" => features = Some(it.next().ok_or("--features needs a list")?.clone()),
            "-h" | "--help" => {
                print!("{HELP}");
                return Ok(());
            }
            other => return Err(format!("unknown option `{other}`\n{HELP}")),
        }
    }
    let prefix = prefix.ok_or_else(|| format!("--prefix DIR is required\n{HELP}"))?;
    install(&prefix, features.as_deref()).map(drop)
}

/// The workspace version (`[workspace.package] version`).
fn version() -> Result<String, String> {
    let manifest = fs::read_to_string(util::root().join("Cargo.toml"))
        .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    let section = manifest
        .split("[workspace.package]")
        .nth(1)
        .ok_or("no [workspace.package] in Cargo.toml")?;
    section
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("version")
                .and_then(|r| r.trim_start().strip_prefix('='))
                .map(|v| v.trim().trim_matches('"').to_owned())
        })
        .ok_or_else(|| "no version in [workspace.package]".into())
}

fn build(crate_type: &str, features: Option<&str>, rustc_args: &[&str]) -> Result<String, String> {
    let mut cmd = util::cargo();
    cmd.args([
        "rustc",
        "--release",
        "-p",
        "keepalloc-capi",
        "--lib",
        "--crate-type",
        crate_type,
    ])
    .env("CARGO_TARGET_DIR", util::root().join("target/install"));
    if let Some(f) = features {
        cmd.args(["--features", f]);
    }
    cmd.arg("--").args(rustc_args);
    println!(
        "xtask install: cargo rustc --crate-type {crate_type} {}",
        rustc_args.join(" ")
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

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // Replace, never write through: the old file may be mapped by a running program.
    let _ = fs::remove_file(to);
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

fn install(prefix: &Path, features: Option<&str>) -> Result<Installed, String> {
    let version = version()?;
    let major = version.split('.').next().unwrap_or("0").to_owned();
    let soname = format!("libkeepalloc.so.{major}");
    build(
        "cdylib",
        features,
        &[&format!("-Clink-arg=-Wl,-soname,{soname}")],
    )?;
    let notes = build("staticlib", features, &["--print", "native-static-libs"])?;
    let native = notes
        .lines()
        .find_map(|l| l.split("native-static-libs:").nth(1))
        .map(|s| s.trim().to_owned())
        .ok_or("rustc printed no native-static-libs")?;
    // The list repeats libraries (one entry per dependency that asked); keep the first of each.
    let mut libs_private: Vec<&str> = Vec::new();
    for lib in native.split_whitespace() {
        if !libs_private.contains(&lib) {
            libs_private.push(lib);
        }
    }

    let built = util::root().join("target/install/release");
    let (include, lib) = (prefix.join("include"), prefix.join("lib"));
    copy(
        &util::root().join("capi/include/keepalloc.h"),
        &include.join("keepalloc.h"),
    )?;
    let shared = lib.join(&soname);
    copy(&built.join("libkeepalloc_capi.so"), &shared)?;
    let link = lib.join("libkeepalloc.so");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&soname, &link)
        .map_err(|e| format!("cannot link {}: {e}", link.display()))?;
    copy(
        &built.join("libkeepalloc_capi.a"),
        &lib.join("libkeepalloc.a"),
    )?;
    let prefix_abs = fs::canonicalize(prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    let pc = format!(
        "prefix={}\n\
         exec_prefix=${{prefix}}\n\
         libdir=${{exec_prefix}}/lib\n\
         includedir=${{prefix}}/include\n\
         \n\
         Name: keepalloc\n\
         Description: One process-wide allocator owner for several C libraries (XNNPACK's xnn_allocator layout), built once and never freed\n\
         Version: {version}\n\
         Libs: -L${{libdir}} -lkeepalloc\n\
         Libs.private: {}\n\
         Cflags: -I${{includedir}}\n",
        prefix_abs.display(),
        libs_private.join(" ")
    );
    let pc_path = lib.join("pkgconfig/keepalloc.pc");
    fs::create_dir_all(pc_path.parent().unwrap()).map_err(|e| e.to_string())?;
    fs::write(&pc_path, pc).map_err(|e| format!("cannot write {}: {e}", pc_path.display()))?;
    for path in [
        include.join("keepalloc.h"),
        shared.clone(),
        link,
        lib.join("libkeepalloc.a"),
        pc_path,
    ] {
        println!("installed {}", path.display());
    }
    println!("Libs.private: {}", libs_private.join(" "));
    Ok(Installed { shared, major })
}

fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The program both links build: two libraries on one owner, through the installed header.
const PROGRAM: &str = r#"
#include <keepalloc.h>
#include <stdio.h>
#include <string.h>

static int hook(const keepalloc_table* table, void* calls) {
  void* p = table->allocate(table->context, 64);
  if (p == NULL) return 1;
  memset(p, 1, 64);
  table->deallocate(table->context, p);
  ++*(int*)calls;
  return 0;
}

int main(void) {
  if (keepalloc_version() != KEEPALLOC_VERSION) {
    fprintf(stderr, "header %u, library %u\n", (unsigned)KEEPALLOC_VERSION, keepalloc_version());
    return 1;
  }
  int calls = 0;
  const keepalloc_table* a = NULL;
  const keepalloc_table* b = NULL;
  if (keepalloc_acquire_library("xnnpack", hook, &calls, &a) != KEEPALLOC_OK) return 2;
  if (keepalloc_acquire_library("onednn", hook, &calls, &b) != KEEPALLOC_OK) return 3;
  if (a != b || calls != 2) return 4;
  keepalloc_stats s;
  keepalloc_get_stats(&s);
  if (s.owners_constructed != 1 || s.live_bytes != 0) return 5;
  printf("ok: installed keepalloc %d.%d.%d, two libraries on one owner\n",
         KEEPALLOC_VERSION_MAJOR, KEEPALLOC_VERSION_MINOR, KEEPALLOC_VERSION_PATCH);
  return 0;
}
"#;

pub fn test(args: &[String]) -> Result<(), String> {
    if let Some(arg) = args.first() {
        return Err(format!(
            "install-test takes no arguments (got `{arg}`)\n{HELP}"
        ));
    }
    let dir = util::root().join("target/install-test");
    let _ = fs::remove_dir_all(&dir);
    let prefix = dir.join("prefix");
    fs::create_dir_all(&prefix).map_err(|e| e.to_string())?;
    let installed = install(&prefix, None)?;
    let pc_path = prefix.join("lib/pkgconfig");
    let pkg_config = |args: &[&str]| -> Result<Vec<String>, String> {
        let out = output(
            Command::new("pkg-config")
                .args(args)
                .arg("keepalloc")
                .env("PKG_CONFIG_PATH", &pc_path),
        )?;
        Ok(out.split_whitespace().map(str::to_owned).collect())
    };
    let source = dir.join("program.c");
    fs::write(&source, PROGRAM).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());

    // The soname.
    let dynamic = output(Command::new("readelf").arg("-d").arg(&installed.shared))?;
    let soname = format!("libkeepalloc.so.{}", installed.major);
    if !dynamic.contains(&format!("Library soname: [{soname}]")) {
        return Err(format!(
            "{} has no soname {soname}:\n{dynamic}",
            installed.shared.display()
        ));
    }
    println!(
        "install-test: {} has soname {soname}",
        installed.shared.display()
    );

    // Shared: exactly what pkg-config says, plus an rpath to find the library at run time.
    let flags = pkg_config(&["--cflags", "--libs"])?;
    println!(
        "install-test: pkg-config --cflags --libs keepalloc: {}",
        flags.join(" ")
    );
    let shared_bin = dir.join("program-shared");
    output(
        Command::new(&cc)
            .arg("-std=c11")
            .args(["-Wall", "-Wextra", "-Werror"])
            .arg(&source)
            .args(&flags)
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-o")
            .arg(&shared_bin),
    )?;
    let needed = output(Command::new("readelf").arg("-d").arg(&shared_bin))?;
    if !needed.contains(&format!("Shared library: [{soname}]")) {
        return Err(format!(
            "the shared program does not need {soname}:\n{needed}"
        ));
    }
    print!(
        "install-test: shared: {}",
        output(&mut Command::new(&shared_bin))?
    );

    // Static: pkg-config --static, with -lkeepalloc taken from libkeepalloc.a.
    let flags: Vec<String> = pkg_config(&["--static", "--cflags", "--libs"])?
        .into_iter()
        .map(|f| {
            if f == "-lkeepalloc" {
                "-l:libkeepalloc.a".into()
            } else {
                f
            }
        })
        .collect();
    println!(
        "install-test: pkg-config --static --cflags --libs keepalloc (-lkeepalloc as libkeepalloc.a): {}",
        flags.join(" ")
    );
    let static_bin = dir.join("program-static");
    output(
        Command::new(&cc)
            .arg("-std=c11")
            .args(["-Wall", "-Wextra", "-Werror"])
            .arg(&source)
            .args(&flags)
            .arg("-o")
            .arg(&static_bin),
    )?;
    let needed = output(Command::new("readelf").arg("-d").arg(&static_bin))?;
    if needed.contains("libkeepalloc") {
        return Err(format!(
            "the static program still needs a shared libkeepalloc:\n{needed}"
        ));
    }
    print!(
        "install-test: static: {}",
        output(&mut Command::new(&static_bin))?
    );

    // Negative control: the same static link without Libs.private (what a .pc file that forgot
    // them would give) must fail, with undefined references: the libraries rustc printed are
    // really needed, so the static check above tests the .pc file and not a lucky link.
    let without_private: Vec<String> = pkg_config(&["--cflags", "--libs"])?
        .into_iter()
        .map(|f| {
            if f == "-lkeepalloc" {
                "-l:libkeepalloc.a".into()
            } else {
                f
            }
        })
        .collect();
    let control = Command::new(&cc)
        .arg("-std=c11")
        .arg(&source)
        .args(&without_private)
        .arg("-o")
        .arg(dir.join("program-static-without-private"))
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    let stderr = String::from_utf8_lossy(&control.stderr);
    if control.status.success() || !stderr.contains("undefined reference") {
        return Err(format!(
            "control: a static link without Libs.private ({}) must fail with undefined \
             references, got {}:\n{stderr}",
            without_private.join(" "),
            control.status
        ));
    }
    let first = stderr
        .lines()
        .find(|l| l.contains("undefined reference"))
        .unwrap_or_default();
    println!("install-test: control: static link without Libs.private fails, as it must: {first}");
    println!("install-test: ok");
    Ok(())
}
