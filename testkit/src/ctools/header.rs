//! `keepalloc.h` alone, in every C and C++ standard it promises, warnings as errors.

use std::path::Path;
use std::process::Command;

use super::toolchain::{Dirs, FLAGS, Lang, Toolchain, checked_output};

/// The languages and standards `keepalloc.h` must compile under, with extra warnings on top
/// of [`FLAGS`] (each entry names its own standard): `(language, flags)`.
pub const HEADER_CHECKS: &[(Lang, &[&str])] = &[
    (
        Lang::C,
        &[
            "-std=c11",
            "-Wstrict-prototypes",
            "-Wmissing-prototypes",
            "-Wconversion",
            "-Wshadow",
            "-Wcast-qual",
        ],
    ),
    (
        Lang::C,
        &["-std=c17", "-Wstrict-prototypes", "-Wconversion"],
    ),
    (
        Lang::C,
        &["-std=c99", "-Wstrict-prototypes", "-Wconversion"],
    ),
    (
        Lang::Cxx,
        &[
            "-std=c++17",
            "-Wold-style-cast",
            "-Wzero-as-null-pointer-constant",
            "-Wconversion",
            "-Wshadow",
        ],
    ),
    (Lang::Cxx, &["-std=c++20", "-Wold-style-cast"]),
    (Lang::Cxx, &["-std=c++11", "-Wold-style-cast"]),
];

/// Compiles `keepalloc.h` alone under every entry of [`HEADER_CHECKS`] (syntax only).
/// Returns one line per check.
pub fn check_header(tc: &Toolchain, dirs: &Dirs, out_dir: &Path) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let mut lines = Vec::new();
    for (lang, extra) in HEADER_CHECKS {
        let (file, x) = match lang {
            Lang::C => ("header_only.c", "c"),
            Lang::Cxx => ("header_only.cpp", "c++"),
        };
        let tu = out_dir.join(file);
        std::fs::write(&tu, "#include \"keepalloc.h\"\n")
            .map_err(|e| format!("cannot write {}: {e}", tu.display()))?;
        let mut cmd = Command::new(tc.compiler(*lang));
        cmd.args(["-fsyntax-only", "-x", x])
            .args(FLAGS)
            .args(*extra)
            .arg("-I")
            .arg(&dirs.include)
            .arg(&tu);
        checked_output(&mut cmd)?;
        lines.push(format!(
            "ok: keepalloc.h compiles alone with {}",
            extra.join(" ")
        ));
    }
    Ok(lines)
}
