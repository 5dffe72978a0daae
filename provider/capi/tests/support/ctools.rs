//! Compiling and running keepalloc's C and C++ tests with the system compiler.
//!
//! Shared by two crates, which include this file by path: the integration test
//! `provider/capi/tests/c_tests.rs` (`cargo test -p keepalloc`) and `cargo xtask c-test`.
//! Each uses a subset, hence the `dead_code` allowance.
//!
//! Every C test is one program in `provider/capi/tests/c/` (`*.c` or `*.cpp`, one `main`
//! each) and runs in its own process, because the provider it tests is process-wide. The
//! negative controls in `tests/c/controls/` are deliberately broken implementations of
//! `keepalloc.h`, linked instead of `libkeepalloc.a`; the tests named in [`CONTROLS`] must
//! FAIL against them.
#![allow(dead_code)]

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags for every C file: C11, warnings are errors.
pub const C_FLAGS: &[&str] = &[
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O1",
    "-g",
];

/// Flags for every C++ file: C++17, warnings are errors.
pub const CXX_FLAGS: &[&str] = &[
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pedantic",
    "-O1",
    "-g",
];

/// What a program linked against `libkeepalloc.a` needs besides it: the output of
/// `rustc --print native-static-libs` for this crate on Linux (glibc ≥ 2.34 folds most of
/// these into libc, older ones do not).
pub const STATIC_LIB_DEPS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

/// The languages and standards `keepalloc.h` must compile under, with extra warnings on top
/// of [`C_FLAGS`] / [`CXX_FLAGS`]: `(language, flags)`.
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

/// A negative control: a broken `keepalloc.h` implementation and the tests that must catch it.
#[derive(Clone, Copy, Debug)]
pub struct Control {
    /// Short name.
    pub name: &'static str,
    /// The `-D` that selects it in `controls/broken_provider.c`.
    pub define: &'static str,
    /// The C tests (file stems) that must fail against it.
    pub caught_by: &'static [&'static str],
}

/// Every negative control and the tests that must fail against it.
pub const CONTROLS: &[Control] = &[
    Control {
        name: "racy",
        define: "KEEPALLOC_CONTROL_RACY",
        caught_by: &["acquire_race"],
    },
    Control {
        name: "naive-retry",
        define: "KEEPALLOC_CONTROL_NAIVE_RETRY",
        caught_by: &["init_retry", "init_always_fails"],
    },
];

/// C or C++.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// C11.
    C,
    /// C++17.
    Cxx,
}

impl Lang {
    /// The language of a source file, by extension.
    pub fn of(path: &Path) -> Option<Lang> {
        match path.extension()?.to_str()? {
            "c" => Some(Lang::C),
            "cpp" | "cc" | "cxx" => Some(Lang::Cxx),
            _ => None,
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            Lang::C => C_FLAGS,
            Lang::Cxx => CXX_FLAGS,
        }
    }
}

/// The system C and C++ compilers (`$CC` / `$CXX`, else `cc` / `c++`).
#[derive(Clone, Debug)]
pub struct Toolchain {
    cc: OsString,
    cxx: OsString,
}

impl Toolchain {
    /// From the environment.
    pub fn from_env() -> Self {
        Toolchain {
            cc: std::env::var_os("CC").unwrap_or_else(|| "cc".into()),
            cxx: std::env::var_os("CXX").unwrap_or_else(|| "c++".into()),
        }
    }

    fn compiler(&self, lang: Lang) -> &OsString {
        match lang {
            Lang::C => &self.cc,
            Lang::Cxx => &self.cxx,
        }
    }
}

/// Where things are: `provider/include` and `provider/capi`.
#[derive(Clone, Debug)]
pub struct Dirs {
    /// `provider/include` (keepalloc.h).
    pub include: PathBuf,
    /// `provider/capi`.
    pub capi: PathBuf,
}

impl Dirs {
    /// From the `provider/capi` directory.
    pub fn from_capi(capi: &Path) -> Self {
        Dirs {
            include: capi.join("../include"),
            capi: capi.to_path_buf(),
        }
    }

    /// `provider/capi/tests/c`.
    pub fn tests(&self) -> PathBuf {
        self.capi.join("tests/c")
    }

    /// `provider/capi/examples`.
    pub fn examples(&self) -> PathBuf {
        self.capi.join("examples")
    }
}

/// One program to build.
#[derive(Clone, Debug)]
pub struct Program {
    /// The first source decides the language.
    pub sources: Vec<PathBuf>,
    /// `-D` definitions.
    pub defines: Vec<String>,
    /// Extra include directories (keepalloc's include dir and `tests/c` are always added).
    pub includes: Vec<PathBuf>,
    /// What to link after the sources: archives, `-l` flags.
    pub link: Vec<OsString>,
    /// The executable to write.
    pub out: PathBuf,
}

/// Compiles and links `program`; the compiler's output is in the error.
pub fn compile(tc: &Toolchain, dirs: &Dirs, program: &Program) -> Result<(), String> {
    let lang = program
        .sources
        .first()
        .and_then(|s| Lang::of(s))
        .ok_or_else(|| format!("no C or C++ source in {:?}", program.sources))?;
    if let Some(parent) = program.out.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mut cmd = Command::new(tc.compiler(lang));
    cmd.args(lang.flags())
        .arg("-I")
        .arg(&dirs.include)
        .arg("-I")
        .arg(dirs.tests());
    for dir in &program.includes {
        cmd.arg("-I").arg(dir);
    }
    for define in &program.defines {
        cmd.arg(format!("-D{define}"));
    }
    cmd.args(&program.sources)
        .args(&program.link)
        .arg("-o")
        .arg(&program.out);
    checked_output(&mut cmd).map(drop)
}

/// Runs `cmd` and returns its stdout, or an error with the command, status and both streams.
pub fn checked_output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{cmd:?} failed: {}\n--- stdout\n{stdout}--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// How a test program ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Exit status 0.
    pub passed: bool,
    /// The status as text (`exit status: 1`, `signal: 11`...).
    pub status: String,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
}

impl Outcome {
    /// The first line of stderr (the failed CHECK), or the status.
    pub fn reason(&self) -> String {
        self.stderr
            .lines()
            .next()
            .map(str::to_owned)
            .unwrap_or_else(|| self.status.clone())
    }

    /// Everything, for an error message.
    pub fn describe(&self, what: &str) -> String {
        let mut s = format!("{what}: {}\n", self.status);
        let _ = write!(s, "--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr);
        s
    }
}

/// Runs `bin` in a fresh process with extra environment variables.
pub fn run(bin: &Path, env: &[(&str, &str)]) -> Result<Outcome, String> {
    let mut cmd = Command::new(bin);
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    Ok(Outcome {
        passed: out.status.success(),
        status: out.status.to_string(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

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

/// A test's name: its file stem.
pub fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
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
            sources: vec![source.to_path_buf()],
            defines: vec![],
            includes: vec![],
            link: keepalloc_link(staticlib),
            out: out.clone(),
        },
    )?;
    run(&out, &[])
}

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
            .args(lang.flags().iter().filter(|f| !f.starts_with("-std=")))
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

/// Builds the foundation test `test` against the negative control and runs it. `Ok` holds
/// the failure it reported (what catching the bug looks like); `Err` when it did not fail.
pub fn run_control(
    tc: &Toolchain,
    dirs: &Dirs,
    control: &Control,
    test: &str,
    out_dir: &Path,
) -> Result<String, String> {
    let out = out_dir.join(format!("{test}-control-{}", control.name));
    compile(
        tc,
        dirs,
        &Program {
            sources: vec![
                dirs.tests().join(format!("{test}.c")),
                dirs.tests().join("controls/broken_provider.c"),
            ],
            defines: vec![control.define.to_owned()],
            includes: vec![],
            link: vec!["-lpthread".into()],
            out: out.clone(),
        },
    )?;
    let outcome = run(&out, &[])?;
    if outcome.passed {
        Err(format!(
            "{test} PASSED against the broken `{}` control: it cannot catch the bug it is for\n{}",
            control.name,
            outcome.describe(test)
        ))
    } else {
        Ok(outcome.reason())
    }
}
