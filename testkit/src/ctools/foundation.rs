//! The foundation tests: every program directly in `capi/tests/c`, built on `libkeepalloc.a`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::outcome::Outcome;
use super::run::run;
use super::toolchain::{Dirs, Lang, Program, Toolchain, companions, compile, stem};

/// What a program linked against `libkeepalloc.a` needs besides it: the output of
/// `rustc --print native-static-libs` for this crate on Linux (glibc ≥ 2.34 folds most of
/// these into libc, older ones do not), plus `-lstdc++` for the C++ hook trampoline.
pub const STATIC_LIB_DEPS: &[&str] = &[
    "-lstdc++",
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
];

/// The foundation tests: every `*.c` / `*.cpp` directly in `tests/c`, sorted.
pub fn foundation_tests(dirs: &Dirs) -> Result<Vec<PathBuf>, String> {
    let dir = dirs.tests();
    let mut tests: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && Lang::of(p).is_some())
        .collect();
    tests.sort();
    Ok(tests)
}

/// The link line for a program on `libkeepalloc.a`.
pub fn keepalloc_link(staticlib: &Path) -> Vec<OsString> {
    let mut link = vec![staticlib.as_os_str().to_owned()];
    link.extend(STATIC_LIB_DEPS.iter().map(OsString::from));
    link
}

/// Builds the foundation test `source` against `staticlib` into `out_dir` and runs it.
pub fn build_and_run(
    tc: &Toolchain,
    dirs: &Dirs,
    source: &Path,
    staticlib: &Path,
    out_dir: &Path,
) -> Result<Outcome, String> {
    let out = out_dir.join(stem(source));
    compile(
        tc,
        dirs,
        &Program {
            sources: std::iter::once(source.to_path_buf())
                .chain(companions(dirs, &stem(source)))
                .collect(),
            defines: vec![],
            includes: vec![],
            link: keepalloc_link(staticlib),
            out: out.clone(),
        },
    )?;
    run(&out, &[])
}
