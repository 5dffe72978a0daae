//! `cargo xtask install` and `cargo xtask install-test`: keepalloc installed as a C library,
//! the way a distribution or a runtime's CMake build expects one.
//!
//! `install --prefix P [--libdir DIR] [--destdir D]` builds the `keepalloc-capi` package in
//! release mode ([`build`]) and writes, under `D` + `P`:
//!
//! * `include/keepalloc.h` and `include/keepalloc_xnnpack.h` (the two public headers);
//! * `LIBDIR/libkeepalloc.so.X.Y.Z` with soname `libkeepalloc.so.0.Y` (0.x: a minor release
//!   may break the ABI) and the links `libkeepalloc.so.0.Y` and `libkeepalloc.so`;
//! * `LIBDIR/libkeepalloc.a`;
//! * `LIBDIR/libkeepalloc_preload.so` (ExecuTorch's XNNPACK adopted by `LD_PRELOAD`,
//!   [`preload::install`]);
//! * `LIBDIR/pkgconfig/keepalloc.pc` and `LIBDIR/cmake/keepalloc/keepallocConfig.cmake` +
//!   `keepallocConfigVersion.cmake` ([`package_files`]), which name `P`, never `D`.
//!
//! This is what cargo-c's `cargo cinstall` does; cargo-c itself is not used: its latest
//! release needs a newer rustc than CI's, and the last one that builds here locks 419 crates
//! (docs/verification.md), while this needs nothing but cargo, `cc` and `readelf`.
//! `install-test` ([`test`](mod@test)) proves the result with the real CMake and pkg-config.

mod build;
mod package_files;
pub mod preload;
pub mod test;

use std::fs;
use std::path::{Path, PathBuf};

use crate::util;

pub const LONG_ABOUT: &str = "\
Builds keepalloc (release) and installs, under DESTDIR + PREFIX: include/keepalloc.h and
include/keepalloc_xnnpack.h; LIBDIR/libkeepalloc.so.X.Y.Z (soname libkeepalloc.so.0.Y, and
the links libkeepalloc.so.0.Y and libkeepalloc.so), LIBDIR/libkeepalloc.a,
LIBDIR/libkeepalloc_preload.so, LIBDIR/pkgconfig/keepalloc.pc and the CMake package
LIBDIR/cmake/keepalloc/ (targets keepalloc::keepalloc and keepalloc::keepalloc_static).
The pkg-config and CMake files name PREFIX, not DESTDIR; the CMake package finds its files
from its own directory, so a staged tree works where it lies.";

/// `cargo xtask install`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Installation prefix (made absolute; with --destdir it must be absolute already).
    #[arg(long, value_name = "P")]
    pub prefix: PathBuf,
    /// Library directory, relative to the prefix or absolute (e.g. lib/x86_64-linux-gnu).
    #[arg(long, value_name = "DIR", default_value = "lib")]
    pub libdir: PathBuf,
    /// Staging root prepended to every path written (packagers' DESTDIR); the installed
    /// files still name PREFIX.
    #[arg(long, value_name = "D")]
    pub destdir: Option<PathBuf>,
    /// Cargo features of keepalloc-capi (e.g. mimalloc).
    #[arg(long, value_name = "F")]
    pub features: Option<String>,
}

/// Where everything goes: the paths as installed (`prefix`, `libdir`, `includedir`, what
/// the package files name) and [`Layout::staged`] (where they are written now).
#[derive(Clone, Debug)]
pub struct Layout {
    pub prefix: PathBuf,
    pub libdir: PathBuf,
    pub includedir: PathBuf,
    pub destdir: Option<PathBuf>,
}

impl Layout {
    /// The layout `args` ask for, or why it cannot be.
    pub fn new(prefix: &Path, libdir: &Path, destdir: Option<&Path>) -> Result<Layout, String> {
        if destdir.is_some() && !prefix.is_absolute() {
            return Err(format!(
                "--prefix {} must be absolute with --destdir (it is the path the files will \
                 have once the staged tree is copied to /)",
                prefix.display()
            ));
        }
        let prefix = std::path::absolute(prefix)
            .map_err(|e| format!("--prefix {}: {e}", prefix.display()))?;
        let libdir = prefix.join(libdir);
        Ok(Layout {
            includedir: prefix.join("include"),
            prefix,
            libdir,
            destdir: destdir.map(Path::to_path_buf),
        })
    }

    /// Where an installed path is written: under the destdir when there is one.
    pub fn staged(&self, installed: &Path) -> PathBuf {
        match &self.destdir {
            Some(d) => d.join(installed.strip_prefix("/").unwrap_or(installed)),
            None => installed.to_path_buf(),
        }
    }
}

/// The version and the names derived from it.
#[derive(Clone, Debug)]
pub struct Names {
    /// `0.1.0`, the workspace version.
    pub version: String,
    /// `libkeepalloc.so.0.1`: major.minor before 1.0, the major from then on.
    pub soname: String,
    /// `libkeepalloc.so.0.1.0`, the real file.
    pub file: String,
}

impl Names {
    pub fn for_version(version: &str) -> Result<Names, String> {
        let parts: Vec<&str> = version.split('.').collect();
        let [major, minor, _patch] = parts[..] else {
            return Err(format!("version {version} is not MAJOR.MINOR.PATCH"));
        };
        let abi = if major == "0" {
            format!("{major}.{minor}")
        } else {
            major.to_owned()
        };
        Ok(Names {
            version: version.to_owned(),
            soname: format!("libkeepalloc.so.{abi}"),
            file: format!("libkeepalloc.so.{version}"),
        })
    }
}

/// What one install wrote, for the test to check.
pub struct Installed {
    pub layout: Layout,
    pub names: Names,
    pub files: Vec<PathBuf>,
}

pub fn run(args: Args) -> Result<(), String> {
    let layout = Layout::new(&args.prefix, &args.libdir, args.destdir.as_deref())?;
    let installed = install(&layout, args.features.as_deref())?;
    for f in &installed.files {
        println!("installed {}", f.display());
    }
    Ok(())
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

fn symlink(target: &str, link: &Path) -> Result<(), String> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link)
        .map_err(|e| format!("cannot link {} -> {target}: {e}", link.display()))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Builds and installs everything into `layout`.
pub fn install(layout: &Layout, features: Option<&str>) -> Result<Installed, String> {
    let names = Names::for_version(&version()?)?;
    let built = build::build(&names, features)?;
    let root = util::root();
    let (include, lib) = (
        layout.staged(&layout.includedir),
        layout.staged(&layout.libdir),
    );
    let mut files = Vec::new();

    for header in [
        root.join("capi/include/keepalloc.h"),
        root.join("runtimes/xnnpack/include/keepalloc_xnnpack.h"),
    ] {
        let to = include.join(header.file_name().expect("a header file name"));
        copy(&header, &to)?;
        files.push(to);
    }
    let shared = lib.join(&names.file);
    copy(&built.shared, &shared)?;
    files.push(shared);
    for (link, target) in [
        (&names.soname, &names.file),
        (&"libkeepalloc.so".into(), &names.soname),
    ] {
        symlink(target, &lib.join(link))?;
        files.push(lib.join(link));
    }
    let archive = lib.join("libkeepalloc.a");
    copy(&built.archive, &archive)?;
    files.push(archive);
    files.push(preload::install(&lib)?);

    for (path, text) in package_files::all(layout, &names, &built.native_static_libs) {
        let to = layout.staged(&path);
        write(&to, &text)?;
        files.push(to);
    }
    println!(
        "Libs.private (libkeepalloc.a needs): {}",
        built.native_static_libs.join(" ")
    );
    Ok(Installed {
        layout: layout.clone(),
        names,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soname_follows_the_0x_rule() {
        let n = Names::for_version("0.1.0").unwrap();
        assert_eq!(
            (n.soname.as_str(), n.file.as_str()),
            ("libkeepalloc.so.0.1", "libkeepalloc.so.0.1.0")
        );
        let n = Names::for_version("1.4.2").unwrap();
        assert_eq!(n.soname, "libkeepalloc.so.1");
        assert!(Names::for_version("1.4").is_err());
    }

    #[test]
    fn destdir_stages_and_needs_an_absolute_prefix() {
        let l = Layout::new(
            Path::new("/usr"),
            Path::new("lib/x86_64-linux-gnu"),
            Some(Path::new("/tmp/stage")),
        )
        .unwrap();
        assert_eq!(l.libdir, Path::new("/usr/lib/x86_64-linux-gnu"));
        assert_eq!(
            l.staged(&l.libdir),
            Path::new("/tmp/stage/usr/lib/x86_64-linux-gnu")
        );
        assert!(
            Layout::new(
                Path::new("usr"),
                Path::new("lib"),
                Some(Path::new("/tmp/s"))
            )
            .is_err()
        );
        let l = Layout::new(Path::new("/opt/k"), Path::new("/lib64"), None).unwrap();
        assert_eq!(
            (l.libdir.as_path(), l.staged(&l.libdir)),
            (Path::new("/lib64"), PathBuf::from("/lib64"))
        );
    }
}
