//! The system C and C++ compilers, where keepalloc's C sources are, and how one program is
//! compiled and linked.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags for every C and C++ file after its standard ([`Lang::std`]): warnings are errors.
pub const FLAGS: &[&str] = &["-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-g"];

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

    /// The standard every file of the language is compiled under.
    pub fn std(self) -> &'static str {
        match self {
            Lang::C => "-std=c11",
            Lang::Cxx => "-std=c++17",
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

    pub(super) fn compiler(&self, lang: Lang) -> &OsString {
        match lang {
            Lang::C => &self.cc,
            Lang::Cxx => &self.cxx,
        }
    }
}

/// Where things are: `capi/include` and `capi`.
#[derive(Clone, Debug)]
pub struct Dirs {
    /// `capi/include` (keepalloc.h).
    pub include: PathBuf,
    /// `capi`.
    pub capi: PathBuf,
}

impl Dirs {
    /// From the `capi` directory.
    pub fn from_capi(capi: &Path) -> Self {
        Dirs {
            include: capi.join("include"),
            capi: capi.to_path_buf(),
        }
    }

    /// `capi/tests/c`.
    pub fn tests(&self) -> PathBuf {
        self.capi.join("tests/c")
    }

    /// `capi/tests/c/controls`.
    pub fn controls(&self) -> PathBuf {
        self.tests().join("controls")
    }

    /// `capi/examples`.
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
    let compiler = |lang: Lang| {
        let mut cmd = Command::new(tc.compiler(lang));
        cmd.arg(lang.std())
            .args(FLAGS)
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
        cmd
    };
    // Sources in the other language (a C++ companion of a C test) become objects first.
    let mut inputs = Vec::new();
    for source in &program.sources {
        match Lang::of(source) {
            Some(other) if other != lang => {
                let object = program.out.with_file_name(format!(
                    "{}-{}.o",
                    stem(&program.out),
                    stem(source)
                ));
                let mut cmd = compiler(other);
                cmd.arg("-c").arg(source).arg("-o").arg(&object);
                checked_output(&mut cmd)?;
                inputs.push(object);
            }
            _ => inputs.push(source.clone()),
        }
    }
    let mut cmd = compiler(lang);
    cmd.args(&inputs)
        .args(&program.link)
        .arg("-o")
        .arg(&program.out);
    checked_output(&mut cmd).map(drop)
}

/// The companions of a test: `tests/c/companions/<stem>.*` (a C++ hook for a C test, ...),
/// linked into it.
pub fn companions(dirs: &Dirs, test: &str) -> Vec<PathBuf> {
    let dir = dirs.tests().join("companions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| Lang::of(p).is_some() && stem(p) == test)
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
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

/// A test's name: its file stem.
pub fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
