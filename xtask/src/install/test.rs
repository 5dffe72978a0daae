//! `cargo xtask install-test`: the install as its users meet it, with the real CMake and
//! pkg-config.
//!
//! 1. Install into `target/install-test/prefix`; check the files, the links and the soname.
//! 2. A CMake project (`find_package(keepalloc 0.1 CONFIG REQUIRED)`) links
//!    `keepalloc::keepalloc` and `keepalloc::keepalloc_static`; pkg-config links the same
//!    program shared and `--static`; all four run, and `readelf` shows which libkeepalloc
//!    each needs.
//! 3. A packager's install (`--destdir`, `--prefix /usr`, `--libdir lib/x86_64-linux-gnu`):
//!    the files land in the stage, the package files name `/usr`, and the staged CMake
//!    package and pkg-config (with `PKG_CONFIG_SYSROOT_DIR`) build programs that run.
//! 4. Every `cmake` block of README.md and docs/ builds and runs against the install.
//! 5. Negative controls, each caught by its own message: CMake refuses a request for 1.0 and
//!    for 0.2, and a static link without `Libs.private` fails with undefined references.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Installed, Layout, Names};

/// The versions asked of CMake: this major.minor (accepted), the next minor and the next
/// major (refused: a 0.x minor may break the ABI).
fn requests(names: &Names) -> [String; 3] {
    let mut parts = names
        .version
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    [
        format!("{major}.{minor}"),
        format!("{major}.{}", minor + 1),
        format!("{}.0", major + 1),
    ]
}
use crate::util;

pub const LONG_ABOUT: &str = "\
Installs keepalloc into target/install-test/prefix and checks it as its users meet it: a
CMake project (find_package(keepalloc 0.1 CONFIG REQUIRED)) links keepalloc::keepalloc and
keepalloc::keepalloc_static, pkg-config links the same program shared and --static, all
run; then a packager's install (--destdir, --prefix /usr, --libdir lib/x86_64-linux-gnu) is
built against where it is staged, and every cmake block of README.md and docs/ is built and
run against the install. Negative controls: CMake refuses versions 1.0 and 0.2, and
a static link without Libs.private fails with undefined references.";

/// `cargo xtask install-test` (no options; `--help` describes it).
#[derive(clap::Args, Debug)]
pub struct Args {}

/// The program every link builds: two libraries on one owner, through the installed header.
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
  if (keepalloc_get_stats_ex(&s, sizeof s) != sizeof s) return 5;
  if (s.owners_constructed != 1 || s.live_bytes != 0) return 6;
  printf("ok: installed keepalloc %d.%d.%d, two libraries on one owner (%s)\n",
         KEEPALLOC_VERSION_MAJOR, KEEPALLOC_VERSION_MINOR, KEEPALLOC_VERSION_PATCH,
         keepalloc_status_string(KEEPALLOC_OK));
  return 0;
}
"#;

const CMAKE_LISTS: &str = r#"cmake_minimum_required(VERSION 3.16)
project(keepalloc_install_test C)
find_package(keepalloc ${KEEPALLOC_REQUEST} CONFIG REQUIRED)
add_executable(program_shared program.c)
target_link_libraries(program_shared PRIVATE keepalloc::keepalloc)
add_executable(program_static program.c)
target_link_libraries(program_static PRIVATE keepalloc::keepalloc_static)
"#;

/// Runs `cmd`; its stdout, or an error with everything it printed.
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

fn dynamic_section(file: &Path) -> Result<String, String> {
    output(Command::new("readelf").arg("-d").arg(file))
}

/// Runs a built program; fails unless it prints the program's `ok:` line.
fn run_program(label: &str, exe: &Path) -> Result<(), String> {
    let out = output(&mut Command::new(exe))?;
    if !out.starts_with("ok: installed keepalloc") {
        return Err(format!("{label}: {} printed {out:?}", exe.display()));
    }
    print!("install-test: {label}: {out}");
    Ok(())
}

/// Checks what libkeepalloc `exe` needs at run time: `Some(soname)` exactly, or none.
fn needs(exe: &Path, soname: Option<&str>) -> Result<(), String> {
    let d = dynamic_section(exe)?;
    let ok = match soname {
        Some(s) => d.contains(&format!("Shared library: [{s}]")),
        None => !d.contains("libkeepalloc"),
    };
    if !ok {
        return Err(format!(
            "{} should need {soname:?} of libkeepalloc:\n{d}",
            exe.display()
        ));
    }
    Ok(())
}

/// The installed files, the links, and the shared library's soname.
fn check_files(installed: &Installed) -> Result<(), String> {
    let Installed { layout, names, .. } = installed;
    let (lib, include) = (
        layout.staged(&layout.libdir),
        layout.staged(&layout.includedir),
    );
    for f in [
        include.join("keepalloc.h"),
        include.join("keepalloc_xnnpack.h"),
        lib.join(&names.file),
        lib.join("libkeepalloc.a"),
        lib.join("libkeepalloc_preload.so"),
        lib.join("pkgconfig/keepalloc.pc"),
        lib.join("cmake/keepalloc/keepallocConfig.cmake"),
        lib.join("cmake/keepalloc/keepallocConfigVersion.cmake"),
    ] {
        if !f.is_file() {
            return Err(format!("{} was not installed", f.display()));
        }
    }
    for (link, target) in [
        (&names.soname, &names.file),
        (&"libkeepalloc.so".to_owned(), &names.soname),
    ] {
        let read = fs::read_link(lib.join(link)).map_err(|e| format!("{link}: {e}"))?;
        if read != Path::new(target) {
            return Err(format!("{link} points to {}, not {target}", read.display()));
        }
    }
    let d = dynamic_section(&lib.join(&names.file))?;
    if !d.contains(&format!("Library soname: [{}]", names.soname)) {
        return Err(format!(
            "{} has no soname {}:\n{d}",
            names.file, names.soname
        ));
    }
    println!(
        "install-test: files, links and soname {} in {}",
        names.soname,
        lib.display()
    );
    Ok(())
}

/// Configures and builds the CMake project against `prefix_path`, asking for `request`.
fn cmake_configure(dir: &Path, prefix_path: &Path, request: &str) -> Result<Command, String> {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    fs::write(dir.join("CMakeLists.txt"), CMAKE_LISTS).map_err(|e| e.to_string())?;
    fs::write(dir.join("program.c"), PROGRAM).map_err(|e| e.to_string())?;
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(dir)
        .arg("-B")
        .arg(dir.join("build"))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix_path.display()))
        .arg(format!("-DKEEPALLOC_REQUEST={request}"))
        // Only the prefix given: a keepalloc installed system-wide must not be found instead.
        .arg("-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF")
        .arg("-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF")
        .arg("-DCMAKE_BUILD_TYPE=Release");
    Ok(configure)
}

/// The CMake project against `prefix_path`: both targets build and run.
fn cmake_build_and_run(
    label: &str,
    dir: &Path,
    prefix_path: &Path,
    names: &Names,
) -> Result<(), String> {
    output(&mut cmake_configure(dir, prefix_path, &requests(names)[0])?)?;
    let soname = names.soname.as_str();
    output(Command::new("cmake").arg("--build").arg(dir.join("build")))?;
    let shared = dir.join("build/program_shared");
    let stat = dir.join("build/program_static");
    needs(&shared, Some(soname))?;
    needs(&stat, None)?;
    run_program(&format!("{label}: CMake keepalloc::keepalloc"), &shared)?;
    run_program(
        &format!("{label}: CMake keepalloc::keepalloc_static"),
        &stat,
    )
}

/// Every `cmake` block of README.md and docs/ as the body of a project whose one program
/// (the target it links) is [`PROGRAM`]: configured against `prefix_path`, built and run.
fn doc_cmake_blocks(dir: &Path, prefix_path: &Path) -> Result<(), String> {
    let blocks = crate::snippets::cmake_blocks()?;
    if blocks.is_empty() {
        return Err("no cmake block in README.md and docs/*.md".into());
    }
    for (i, (origin, block)) in blocks.iter().enumerate() {
        let target = block
            .split("target_link_libraries(")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .ok_or_else(|| format!("{origin}: a cmake block without target_link_libraries"))?;
        let project = dir.join(format!("block{i}"));
        let _ = fs::remove_dir_all(&project);
        fs::create_dir_all(&project).map_err(|e| e.to_string())?;
        let lists = format!(
            "cmake_minimum_required(VERSION 3.16)\nproject(doc_block C)\n\
             add_executable({target} program.c)\n{block}"
        );
        fs::write(project.join("CMakeLists.txt"), lists).map_err(|e| e.to_string())?;
        fs::write(project.join("program.c"), PROGRAM).map_err(|e| e.to_string())?;
        let configure = output(
            Command::new("cmake")
                .arg("-S")
                .arg(&project)
                .arg("-B")
                .arg(project.join("build"))
                .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix_path.display()))
                .arg("-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF")
                .arg("-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"),
        );
        configure.map_err(|e| format!("{origin}: {e}"))?;
        output(
            Command::new("cmake")
                .arg("--build")
                .arg(project.join("build")),
        )
        .map_err(|e| format!("{origin}: {e}"))?;
        run_program(
            &format!("doc block {origin}"),
            &project.join("build").join(target),
        )?;
    }
    Ok(())
}

/// pkg-config's flags for keepalloc, reading `pc_dir` only (and `sysroot`, for a stage).
fn pkg_config(pc_dir: &Path, sysroot: Option<&Path>, args: &[&str]) -> Result<Vec<String>, String> {
    let mut cmd = Command::new("pkg-config");
    cmd.args(args)
        .arg("keepalloc")
        .env("PKG_CONFIG_LIBDIR", pc_dir)
        .env_remove("PKG_CONFIG_PATH");
    match sysroot {
        Some(s) => cmd.env("PKG_CONFIG_SYSROOT_DIR", s),
        None => cmd.env_remove("PKG_CONFIG_SYSROOT_DIR"),
    };
    Ok(output(&mut cmd)?
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

/// `-lkeepalloc` as the archive, for a static link with the shared library beside it.
fn static_archive(flags: Vec<String>) -> Vec<String> {
    flags
        .into_iter()
        .map(|f| {
            if f == "-lkeepalloc" {
                "-l:libkeepalloc.a".into()
            } else {
                f
            }
        })
        .collect()
}

fn cc(source: &Path, flags: &[String], out: &Path) -> Command {
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(source)
        .args(flags)
        .arg("-o")
        .arg(out);
    cmd
}

/// pkg-config links the program shared (with an rpath to `lib`) and static; both run.
fn pkg_config_build_and_run(
    label: &str,
    dir: &Path,
    pc_dir: &Path,
    sysroot: Option<&Path>,
    lib: &Path,
    soname: &str,
) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let source = dir.join("program.c");
    fs::write(&source, PROGRAM).map_err(|e| e.to_string())?;
    let flags = pkg_config(pc_dir, sysroot, &["--cflags", "--libs"])?;
    println!(
        "install-test: {label}: pkg-config --cflags --libs keepalloc: {}",
        flags.join(" ")
    );
    let shared = dir.join("program-shared");
    let mut link = cc(&source, &flags, &shared);
    output(link.arg(format!("-Wl,-rpath,{}", lib.display())))?;
    needs(&shared, Some(soname))?;
    run_program(&format!("{label}: pkg-config shared"), &shared)?;
    let flags = static_archive(pkg_config(
        pc_dir,
        sysroot,
        &["--static", "--cflags", "--libs"],
    )?);
    println!(
        "install-test: {label}: pkg-config --static (-lkeepalloc as the archive): {}",
        flags.join(" ")
    );
    let stat = dir.join("program-static");
    output(&mut cc(&source, &flags, &stat))?;
    needs(&stat, None)?;
    run_program(&format!("{label}: pkg-config static"), &stat)
}

/// `KEEPALLOC_FAIL` on the installed shared library: a C program (capi's
/// `tests/c/explore/fail_sites.c`) linked through pkg-config lists its sites at exit, and
/// failing one site by its hash fails exactly that site's calls.
fn fail_env_on_installed(dir: &Path, pc_dir: &Path, lib: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let source = util::root().join("capi/tests/c/explore/fail_sites.c");
    let exe = dir.join("fail-sites");
    let flags = pkg_config(pc_dir, None, &["--cflags", "--libs"])?;
    output(cc(&source, &flags, &exe).arg(format!("-Wl,-rpath,{}", lib.display())))?;
    let run = |spec: &str| {
        Command::new(&exe)
            .env("KEEPALLOC_FAIL", spec)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))
    };
    let list = run("list")?;
    let stderr = String::from_utf8_lossy(&list.stderr);
    let site = keepalloc_testkit::ctools::site_in(&stderr, "make_workspace", 3)
        .ok_or_else(|| format!("KEEPALLOC_FAIL=list named no make_workspace site:\n{stderr}"))?;
    let failed = run(&format!("site:{site},hits:all"))?;
    let stdout = String::from_utf8_lossy(&failed.stdout);
    let nulls = stdout
        .lines()
        .filter(|l| l.contains("workspace: NULL"))
        .count();
    if !list.status.success() || nulls != 3 || stdout.contains("weights: NULL") {
        return Err(format!(
            "KEEPALLOC_FAIL=site:{site},hits:all on the installed library: {nulls} NULL \
             workspaces (want 3, and no NULL weights):\n{stdout}"
        ));
    }
    println!("install-test: KEEPALLOC_FAIL=list and site:{site},hits:all on the installed library");
    Ok(())
}

/// CMake must refuse `request`, saying that no compatible version was found.
fn control_cmake_refuses(
    dir: &Path,
    prefix_path: &Path,
    names: &Names,
    request: &str,
) -> Result<(), String> {
    let out = cmake_configure(dir, prefix_path, request)?
        .output()
        .map_err(|e| format!("cannot run cmake: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let installed = format!("version: {}", names.version);
    let refused = text.contains("compatible with requested version") && text.contains(&installed);
    if out.status.success() || !refused {
        return Err(format!(
            "control: find_package(keepalloc {request}) must be refused as incompatible with \
             {}; got {}:\n{text}",
            names.version, out.status
        ));
    }
    println!(
        "install-test: control: find_package(keepalloc {request}) refused (installed {}), as it must",
        names.version
    );
    Ok(())
}

/// A static link without `Libs.private` must fail with undefined references: the libraries
/// rustc printed are needed, so the static links above test the package files.
fn control_without_private(dir: &Path, pc_dir: &Path) -> Result<(), String> {
    let flags = static_archive(pkg_config(pc_dir, None, &["--cflags", "--libs"])?);
    let out = cc(
        &dir.join("program.c"),
        &flags,
        &dir.join("program-without-private"),
    )
    .output()
    .map_err(|e| format!("cannot run cc: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let first = stderr.lines().find(|l| l.contains("undefined reference"));
    match first {
        Some(line) if !out.status.success() => {
            println!(
                "install-test: control: a static link without Libs.private fails, as it must: {line}"
            );
            Ok(())
        }
        _ => Err(format!(
            "control: a static link without Libs.private ({}) must fail with undefined \
             references, got {}:\n{stderr}",
            flags.join(" "),
            out.status
        )),
    }
}

pub fn run(_: Args) -> Result<(), String> {
    let dir = util::root().join("target/install-test");
    let _ = fs::remove_dir_all(&dir);

    let prefix = dir.join("prefix");
    let plain = super::install(&Layout::new(&prefix, Path::new("lib"), None)?, None)?;
    check_files(&plain)?;
    let names = plain.names.clone();
    let lib = prefix.join("lib");
    cmake_build_and_run("prefix", &dir.join("cmake"), &prefix, &names)?;
    pkg_config_build_and_run(
        "prefix",
        &dir.join("pkg-config"),
        &lib.join("pkgconfig"),
        None,
        &lib,
        &names.soname,
    )?;

    // A packager's install: staged under DESTDIR, naming /usr and a multiarch libdir.
    let stage = dir.join("stage");
    let usr = PathBuf::from("/usr");
    let packaged = Layout::new(&usr, Path::new("lib/x86_64-linux-gnu"), Some(&stage))?;
    let outside = packaged.libdir.join(&names.file);
    let there_before = outside.exists();
    let staged = super::install(&packaged, None)?;
    check_files(&staged)?;
    if !there_before && outside.exists() {
        return Err(format!("the --destdir install wrote {}", outside.display()));
    }
    let staged_lib = packaged.staged(&packaged.libdir);
    let pc =
        fs::read_to_string(staged_lib.join("pkgconfig/keepalloc.pc")).map_err(|e| e.to_string())?;
    if !pc.starts_with("prefix=/usr\nlibdir=${prefix}/lib/x86_64-linux-gnu\n")
        || pc.contains(&*stage.to_string_lossy())
    {
        return Err(format!(
            "the staged keepalloc.pc must name /usr, not the stage:\n{pc}"
        ));
    }
    println!(
        "install-test: --destdir: every file under {}, keepalloc.pc names prefix=/usr",
        stage.display()
    );
    cmake_build_and_run(
        "staged",
        &dir.join("cmake-staged"),
        &packaged.staged(&usr),
        &names,
    )?;
    pkg_config_build_and_run(
        "staged",
        &dir.join("pkg-config-staged"),
        &staged_lib.join("pkgconfig"),
        Some(&stage),
        &staged_lib,
        &names.soname,
    )?;

    doc_cmake_blocks(&dir.join("doc-blocks"), &prefix)?;
    fail_env_on_installed(&dir.join("fail-env"), &lib.join("pkgconfig"), &lib)?;

    let [_, next_minor, next_major] = requests(&names);
    control_cmake_refuses(&dir.join("cmake-next-major"), &prefix, &names, &next_major)?;
    control_cmake_refuses(&dir.join("cmake-next-minor"), &prefix, &names, &next_minor)?;
    control_without_private(&dir.join("pkg-config"), &lib.join("pkgconfig"))?;
    println!("install-test: ok");
    Ok(())
}
