//! Compiling and running keepalloc's C and C++ tests with the system compiler.
//!
//! Shared by two crates, which include this file by path: the integration test
//! `capi/tests/c_tests.rs` (`cargo test -p keepalloc`) and `cargo xtask c-test`.
//! Each uses a subset, hence the `dead_code` allowance.
//!
//! Every C test is one program in `capi/tests/c/` (`*.c` or `*.cpp`, one `main`
//! each) and runs in its own process, because the provider it tests is process-wide. The
//! negative controls in `tests/c/controls/` are deliberately broken implementations of
//! `keepalloc.h`, linked instead of `libkeepalloc.a`; the tests named in [`CONTROLS`] must
//! FAIL against them, and fail by the [`Signature`] of the control's bug (the check it
//! breaks, or the signal it causes in the step it is in). Any other failure is inconclusive
//! and an error, never a catch. The bug-free [`BASELINES`] of those files must PASS the same
//! tests, so a control fails by its one bug and by nothing else in its file.
#![allow(dead_code)]

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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

/// SIGSEGV (11 on Linux, the BSDs and macOS): what a store or load through NULL dies of.
pub const SIGSEGV: i32 = 11;

/// SIGABRT (6 on Linux): what `abort()` dies of (Rust's "cannot catch foreign exceptions").
pub const SIGABRT: i32 = 6;

/// What `CHECK` in `tests/c/check.h` prints before the condition.
const CHECK_FAILED: &str = "CHECK failed: ";

/// What `STEP` in `tests/c/check.h` prints before the step's name.
const STEP_PREFIX: &str = "step: ";

/// How long one control's test may run. The C tests finish in milliseconds; this only turns a
/// hang into an error (a control "caught" by a timeout is inconclusive, never a catch).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(120);

/// How a negative control must make a test fail: the signature of its bug.
#[derive(Clone, Copy, Debug)]
pub enum Signature {
    /// Exit status 1 from the `CHECK` whose condition reads exactly this: the first
    /// `CHECK failed: <condition>` line on stderr (for `CHECK_EQ_U64(a, b)` the condition is
    /// `a == b`, followed there by the two values in parentheses).
    Check(&'static str),
    /// Killed by `signal` in `step` (the last `step: <step>` line on stderr, see `STEP` in
    /// `check.h`), with no `CHECK` failed before it.
    Signal {
        /// The signal number, e.g. [`SIGSEGV`].
        signal: i32,
        /// The name given to `STEP` in the test.
        step: &'static str,
    },
}

impl Signature {
    /// Whether `outcome` is this failure.
    pub fn matches(&self, outcome: &Outcome) -> bool {
        if outcome.passed || outcome.timed_out {
            return false;
        }
        match *self {
            Signature::Check(condition) => {
                outcome.code == Some(1)
                    && outcome.failed_check().is_some_and(|failed| {
                        failed == condition
                            || failed
                                .strip_prefix(condition)
                                .is_some_and(|rest| rest.starts_with(" ("))
                    })
            }
            Signature::Signal { signal, step } => {
                outcome.signal == Some(signal)
                    && outcome.failed_check().is_none()
                    && outcome.last_step() == Some(step)
            }
        }
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signature::Check(condition) => write!(f, "`{CHECK_FAILED}{condition}`"),
            Signature::Signal { signal, step } => {
                write!(f, "{} in step `{step}`", signal_name(*signal))
            }
        }
    }
}

/// A test that must catch a control, and how.
#[derive(Clone, Copy, Debug)]
pub struct Catch {
    /// The C test (file stem in `tests/c/`).
    pub test: &'static str,
    /// The failure that is the signature of the control's bug in that test.
    pub by: Signature,
}

/// A negative control: a broken `keepalloc.h` implementation and the tests that must catch it.
#[derive(Clone, Copy, Debug)]
pub struct Control {
    /// Short name.
    pub name: &'static str,
    /// The file in `tests/c/controls/` it is a mode of.
    pub source: &'static str,
    /// The `-D` that selects it in [`source`](Self::source).
    pub define: &'static str,
    /// What it breaks.
    pub breaks: &'static str,
    /// The C tests that must fail against it, each by the signature of its bug.
    pub caught_by: &'static [Catch],
}

/// `broken_provider.c`: the broken ONCE.
const BROKEN_PROVIDER: &str = "broken_provider.c";
/// `broken_contract.c`: a correct once with one clause of the table's or the arguments'
/// contract broken.
const BROKEN_CONTRACT: &str = "broken_contract.c";

/// Every negative control and the tests that must fail against it.
pub const CONTROLS: &[Control] = &[
    Control {
        name: "racy",
        source: BROKEN_PROVIDER,
        define: "KEEPALLOC_CONTROL_RACY",
        breaks: "owner creation is an unsynchronised check-then-store (ORT #32461)",
        caught_by: &[Catch {
            test: "acquire_race",
            by: Signature::Check("atomic_load(&hook_calls) == 1"),
        }],
    },
    Control {
        name: "naive-retry",
        source: BROKEN_PROVIDER,
        define: "KEEPALLOC_CONTROL_NAIVE_RETRY",
        breaks: "a failed init drops the owner and the retry builds another",
        caught_by: &[
            // The hooks' own records of the context they were handed, not the control's
            // `owners_constructed`: a check must not read its verdict from the counters of
            // the code it judges.
            Catch {
                test: "init_retry",
                by: Signature::Check("log.contexts[attempt] == log.contexts[0]"),
            },
            Catch {
                test: "init_always_fails",
                by: Signature::Check("atomic_load(&last_context) == atomic_load(&first_context)"),
            },
        ],
    },
    Control {
        name: "size-overflow",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_SIZE_OVERFLOW",
        breaks: "NULL on failure: size + header wraps, allocate(SIZE_MAX) returns a tiny block",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("t->allocate(ctx, SIZE_MAX) == NULL"),
        }],
    },
    Control {
        name: "realloc-no-copy",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_REALLOC_NO_COPY",
        breaks: "reallocate keeps contents: a block that moves loses them",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("filled(a, 100, 1)"),
        }],
    },
    Control {
        name: "realloc-frees-on-failure",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_REALLOC_FREES_ON_FAILURE",
        breaks: "a failed reallocate keeps the old block: it frees it",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("filled(kept, 40, 2)"),
        }],
    },
    Control {
        name: "free-null-crashes",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_FREE_NULL_CRASHES",
        breaks: "freeing NULL is a no-op: deallocate(NULL) reads the header at NULL - 16",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "deallocate(ctx, NULL)",
            },
        }],
    },
    Control {
        name: "ignores-alignment",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_IGNORES_ALIGNMENT",
        breaks: "aligned_allocate honours the alignment: it returns allocate's 16-aligned block",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("aligned(blocks[i], alignments[i])"),
        }],
    },
    Control {
        name: "bad-alignment-accepted",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_BAD_ALIGNMENT_ACCEPTED",
        breaks: "the alignment must be a power of two: 0 and 3 are raised to 16 before the check",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("t->aligned_allocate(ctx, bad[i], 64) == NULL"),
        }],
    },
    Control {
        name: "zero-size-null",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_ZERO_SIZE_NULL",
        breaks: "size 0 returns a unique block: allocate(0) returns NULL",
        caught_by: &[Catch {
            test: "table_contract",
            by: Signature::Check("z1 != NULL && z2 != NULL && z3 != NULL"),
        }],
    },
    Control {
        name: "null-out-written",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_WRITTEN",
        breaks: "a NULL out_table is refused: acquire stores the table through it",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_acquire(..., NULL) before publication",
            },
        }],
    },
    Control {
        name: "null-out-ok",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_OK",
        breaks: "a NULL out_table is refused: acquire does the work and returns KEEPALLOC_OK",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Check(
                "keepalloc_acquire(counting_hook, NULL, NULL) == KEEPALLOC_INVALID_ARGUMENT",
            ),
        }],
    },
    Control {
        name: "null-out-checked-late",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_NULL_OUT_CHECKED_LATE",
        breaks: "a NULL out_table changes nothing: it is refused only after the hook ran",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Check("hook_calls == 0"),
        }],
    },
    Control {
        name: "fast-path-unchecked",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_FAST_PATH_UNCHECKED",
        breaks: "a NULL out_table is refused after publication: the fast path stores through it",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_acquire(..., NULL) after publication",
            },
        }],
    },
    Control {
        name: "stats-ex-overrun",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_STATS_EX_OVERRUN",
        breaks: "keepalloc_get_stats_ex fills at most `size` bytes: it writes its whole struct",
        caught_by: &[Catch {
            test: "status_and_stats",
            by: Signature::Check("older.canary[i] == 0xAB"),
        }],
    },
    Control {
        name: "stats-null-written",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_STATS_NULL_WRITTEN",
        breaks: "keepalloc_get_stats(NULL) is a no-op: it stores through NULL",
        caught_by: &[Catch {
            test: "invalid_argument",
            by: Signature::Signal {
                signal: SIGSEGV,
                step: "keepalloc_get_stats(NULL)",
            },
        }],
    },
    Control {
        name: "out-written-on-failure",
        source: BROKEN_CONTRACT,
        define: "KEEPALLOC_CONTROL_OUT_WRITTEN_ON_FAILURE",
        breaks: "on failure *out_table is untouched: it is stored before the hook ran",
        caught_by: &[
            Catch {
                test: "init_always_fails",
                by: Signature::Check("out == sentinel"),
            },
            Catch {
                test: "init_retry",
                by: Signature::Check("out == sentinel"),
            },
        ],
    },
];

/// The bug-free build of a control file. Every test that catches one of its controls must
/// PASS against it: the control then fails by its one bug, not by the rest of the file.
#[derive(Clone, Copy, Debug)]
pub struct Baseline {
    /// The file in `tests/c/controls/`.
    pub source: &'static str,
    /// The `-D` that breaks nothing.
    pub define: &'static str,
}

/// The control files that have a bug-free build (`broken_provider.c` has none: its once IS
/// the bug).
pub const BASELINES: &[Baseline] = &[Baseline {
    source: BROKEN_CONTRACT,
    define: "KEEPALLOC_CONTROL_BASELINE",
}];

impl Baseline {
    /// The tests it must pass: those that catch a control of the same file, sorted.
    pub fn tests(&self) -> Vec<&'static str> {
        let mut tests: Vec<&'static str> = CONTROLS
            .iter()
            .filter(|c| c.source == self.source)
            .flat_map(|c| c.caught_by.iter().map(|catch| catch.test))
            .collect();
        tests.sort_unstable();
        tests.dedup();
        tests
    }
}

/// A signal's name, for messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        SIGSEGV => "SIGSEGV",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("{name} (signal {signal})")
}

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

/// How a test program ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Exit status 0.
    pub passed: bool,
    /// The status as text (`exit status: 1`, `signal: 11 (SIGSEGV)`...).
    pub status: String,
    /// The exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// Killed by the runner after its time limit (then `passed` is false).
    pub timed_out: bool,
    /// Captured stdout.
    pub stdout: String,
    /// Captured stderr.
    pub stderr: String,
}

impl Outcome {
    /// From a finished [`Command::output`].
    pub fn from_output(out: &std::process::Output) -> Outcome {
        Outcome::new(
            out.status,
            false,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn new(status: ExitStatus, timed_out: bool, stdout: String, stderr: String) -> Outcome {
        #[cfg(unix)]
        let signal = std::os::unix::process::ExitStatusExt::signal(&status);
        #[cfg(not(unix))]
        let signal = None;
        Outcome {
            passed: status.success() && !timed_out,
            status: status.to_string(),
            code: status.code(),
            signal,
            timed_out,
            stdout,
            stderr,
        }
    }

    /// The condition of the first failed `CHECK` on stderr (what follows `CHECK failed: `).
    pub fn failed_check(&self) -> Option<&str> {
        self.stderr.lines().find_map(|line| {
            line.split_once(CHECK_FAILED)
                .map(|(_, condition)| condition)
        })
    }

    /// The last `STEP` the test announced on stderr.
    pub fn last_step(&self) -> Option<&str> {
        self.stderr
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix(STEP_PREFIX))
    }

    /// Why it failed, in one line: the timeout, the signal (and the step it came in), the
    /// failed CHECK, else the first line of stderr, else the status.
    pub fn reason(&self) -> String {
        let step = self
            .last_step()
            .map(|step| format!(" in step `{step}`"))
            .unwrap_or_default();
        if self.timed_out {
            return format!("timed out{step}, killed");
        }
        if let Some(signal) = self.signal {
            return format!("killed by {}{step}", signal_name(signal));
        }
        self.stderr
            .lines()
            .find(|line| line.contains(CHECK_FAILED))
            .or_else(|| {
                self.stderr
                    .lines()
                    .find(|line| !line.starts_with(STEP_PREFIX))
            })
            .map(str::to_owned)
            .unwrap_or_else(|| self.status.clone())
    }

    /// Everything, for an error message.
    pub fn describe(&self, what: &str) -> String {
        let timed_out = if self.timed_out { " (timed out)" } else { "" };
        let mut s = format!("{what}: {}{timed_out}\n", self.status);
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
    Ok(Outcome::from_output(&out))
}

/// Runs `bin` like [`run`], in its own process group, and kills the group (the program and
/// any child it forked) when it has not finished within `limit`: then the outcome says
/// `timed_out`.
pub fn run_with_timeout(
    bin: &Path,
    env: &[(&str, &str)],
    limit: Duration,
) -> Result<Outcome, String> {
    let mut cmd = Command::new(bin);
    cmd.envs(env.iter().copied());
    run_command_with_timeout(cmd, limit)
}

/// Runs `cmd` (its program, arguments and environment as given) like [`run_with_timeout`].
pub fn run_command_with_timeout(mut cmd: Command, limit: Duration) -> Result<Outcome, String> {
    let bin = PathBuf::from(cmd.get_program());
    let bin = bin.as_path();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    let collect = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = collect(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = collect(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let wait_error = |e: std::io::Error| format!("waiting for {}: {e}", bin.display());
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().map_err(wait_error)? {
            break (status, false);
        }
        if Instant::now() >= deadline {
            // The whole group: a forked child would keep the pipes open.
            #[cfg(unix)]
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            break (child.wait().map_err(wait_error)?, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(Outcome::new(status, timed_out, stdout, stderr))
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

/// Builds the C test `test` on the control file `source` (in `tests/c/controls/`) with
/// `-D<define>`, instead of `libkeepalloc.a`, into `out`.
fn build_on_control(
    tc: &Toolchain,
    dirs: &Dirs,
    test: &str,
    source: &str,
    define: &str,
    out: &Path,
) -> Result<(), String> {
    compile(
        tc,
        dirs,
        &Program {
            sources: vec![
                dirs.tests().join(format!("{test}.c")),
                dirs.controls().join(source),
            ],
            defines: vec![define.to_owned()],
            includes: vec![],
            link: vec!["-lpthread".into()],
            out: out.to_path_buf(),
        },
    )
    .map_err(|e| {
        format!("cannot build {test} on {source} -D{define} (a build error is never a catch)\n{e}")
    })
}

/// Builds the C test `catch.test` against the negative control and runs it. `Ok` holds the
/// failure it reported when that failure is the signature of the control's bug
/// (`catch.by`); `Err` when the test passed, or failed some other way: another check,
/// another signal, a timeout or a build error is inconclusive, never a catch.
pub fn run_control(
    tc: &Toolchain,
    dirs: &Dirs,
    control: &Control,
    catch: &Catch,
    out_dir: &Path,
) -> Result<String, String> {
    let test = catch.test;
    let out = out_dir.join(format!("{test}-control-{}", control.name));
    build_on_control(tc, dirs, test, control.source, control.define, &out)?;
    let outcome = run_with_timeout(&out, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Err(format!(
            "{test} PASSED against the broken `{}` control ({}): it cannot catch the bug it \
             is for\n{}",
            control.name,
            control.breaks,
            outcome.describe(test)
        ))
    } else if catch.by.matches(&outcome) {
        Ok(outcome.reason())
    } else {
        Err(format!(
            "{test} failed against the `{}` control ({}), but not by the signature of its bug: \
             expected {}, got {}. Inconclusive: that is no catch.\n{}",
            control.name,
            control.breaks,
            catch.by,
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// Builds the C test `test` against the bug-free `baseline` and runs it: `Ok` with its
/// `ok:` line when it passed, `Err` when it did not (then the controls of that file fail
/// for more than their one bug, and their catches prove nothing).
pub fn run_baseline(
    tc: &Toolchain,
    dirs: &Dirs,
    baseline: &Baseline,
    test: &str,
    out_dir: &Path,
) -> Result<String, String> {
    let out = out_dir.join(format!(
        "{test}-baseline-{}",
        stem(Path::new(baseline.source))
    ));
    build_on_control(tc, dirs, test, baseline.source, baseline.define, &out)?;
    let outcome = run_with_timeout(&out, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Ok(outcome
            .stdout
            .lines()
            .find(|line| line.starts_with("ok:"))
            .unwrap_or("ok")
            .to_owned())
    } else {
        Err(format!(
            "{test} FAILED against the bug-free baseline of {} (-D{}): {}. Its controls \
             would fail for more than their one bug.\n{}",
            baseline.source,
            baseline.define,
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// `wrapped_library.c`: the REAL `libkeepalloc.a`, with some of its entry points (or the
/// functions it calls) replaced at link time by `-Wl,--wrap=SYMBOL` shims that break one
/// behaviour each. Every program built on it is linked with all of [`WRAPPED`] wrapped; each
/// shim passes through to `__real_SYMBOL` unless its control's define is on.
const WRAPPED_LIBRARY: &str = "wrapped_library.c";

/// The symbols `wrapped_library.c` wraps.
pub const WRAPPED: &[&str] = &[
    "keepalloc_acquire_ex",
    "keepalloc_acquire_library",
    "keepalloc_internal_call_hook",
    "keepalloc_set_backend",
    "pthread_atfork",
];

/// The define of the wrapped library's bug-free build (every shim passes through).
pub const WRAPPED_BASELINE: &str = "KEEPALLOC_WRAP_BASELINE";

/// The negative controls on the real library, each with the tests that must catch it.
pub const WRAP_CONTROLS: &[Control] = &[
    Control {
        name: "shared-library-once",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_SHARED_ONCE",
        breaks: "each library has its own once: every name is mapped to the default library, so \
                 the first library's success makes every other library's hook a silent no-op",
        caught_by: &[Catch {
            test: "libraries_race",
            by: Signature::Check("atomic_load(&libs[i].successes) == 1"),
        }],
    },
    Control {
        name: "exception-escapes",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_NO_CATCH",
        breaks: "a C++ exception escaping a hook is caught: the hook is called without the C++ \
                 trampoline, so the exception reaches Rust's catch_unwind, which aborts",
        caught_by: &[
            Catch {
                test: "libraries_race",
                by: Signature::Signal {
                    signal: SIGABRT,
                    step: "the C++ hook throws",
                },
            },
            Catch {
                test: "hook_throws",
                by: Signature::Signal {
                    signal: SIGABRT,
                    step: "hook throws std::runtime_error",
                },
            },
        ],
    },
    Control {
        name: "long-name-truncated",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_TRUNCATE",
        breaks: "an over-long library name is refused: it is truncated to the limit and used",
        caught_by: &[Catch {
            test: "bad_input",
            by: Signature::Check(
                "keepalloc_acquire_library(too_long, must_not_run, NULL, &out) == KEEPALLOC_INVALID_LIBRARY_NAME",
            ),
        }],
    },
    Control {
        name: "reentry-reports-ok",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_REENTRY_OK",
        breaks: "re-entering a library from its own hook is an error: the nested call returns \
                 KEEPALLOC_OK with the published table although the hook it was given never runs",
        caught_by: &[Catch {
            test: "bad_input",
            by: Signature::Check("nested == KEEPALLOC_REENTERED"),
        }],
    },
    Control {
        name: "backend-ignored",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_BACKEND_IGNORED",
        breaks: "a plugged backend is used: keepalloc_set_backend returns OK and registers nothing",
        caught_by: &[Catch {
            test: "plugged_backend",
            by: Signature::Check("atomic_load(&backend_allocations) > 0"),
        }],
    },
    Control {
        name: "fork-unhandled",
        source: WRAPPED_LIBRARY,
        define: "KEEPALLOC_WRAP_NO_ATFORK",
        breaks: "fork during an attempt returns a status in the child: the atfork handler is \
                 never registered, so the child waits for an attempt no thread of it runs",
        caught_by: &[Catch {
            test: "fork_states",
            by: Signature::Check("child_passed(during)"),
        }],
    },
];

/// Builds `test` (with its companions) on the real `staticlib` with every symbol of
/// [`WRAPPED`] wrapped by `wrapped_library.c -D<define>`.
fn build_wrapped(
    tc: &Toolchain,
    dirs: &Dirs,
    staticlib: &Path,
    test: &str,
    define: &str,
    out: &Path,
) -> Result<(), String> {
    let source = foundation_tests(dirs)?
        .into_iter()
        .find(|p| stem(p) == test)
        .ok_or_else(|| format!("no C test named {test}"))?;
    let mut link: Vec<OsString> = WRAPPED
        .iter()
        .map(|s| OsString::from(format!("-Wl,--wrap={s}")))
        .collect();
    link.extend(keepalloc_link(staticlib));
    compile(
        tc,
        dirs,
        &Program {
            sources: std::iter::once(source)
                .chain(companions(dirs, test))
                .chain(std::iter::once(dirs.controls().join(WRAPPED_LIBRARY)))
                .collect(),
            defines: vec![define.to_owned()],
            includes: vec![],
            link,
            out: out.to_path_buf(),
        },
    )
    .map_err(|e| format!("cannot build {test} on {WRAPPED_LIBRARY} -D{define} (a build error is never a catch)\n{e}"))
}

/// As [`run_control`], for a control of [`WRAP_CONTROLS`] (built on the real `staticlib`).
pub fn run_wrap_control(
    tc: &Toolchain,
    dirs: &Dirs,
    staticlib: &Path,
    control: &Control,
    catch: &Catch,
    out_dir: &Path,
) -> Result<String, String> {
    let test = catch.test;
    let out = out_dir.join(format!("{test}-wrap-{}", control.name));
    build_wrapped(tc, dirs, staticlib, test, control.define, &out)?;
    let outcome = run_with_timeout(&out, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Err(format!(
            "{test} PASSED against the `{}` control ({}): it cannot catch the bug it is for\n{}",
            control.name,
            control.breaks,
            outcome.describe(test)
        ))
    } else if catch.by.matches(&outcome) {
        Ok(outcome.reason())
    } else {
        Err(format!(
            "{test} failed against the `{}` control ({}), but not by the signature of its bug: \
             expected {}, got {}. Inconclusive: that is no catch.\n{}",
            control.name,
            control.breaks,
            catch.by,
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// The tests of [`WRAP_CONTROLS`], built on the pass-through shims: each must PASS, so that
/// a control fails by its one bug and not by the wrapping.
pub fn run_wrap_baseline(
    tc: &Toolchain,
    dirs: &Dirs,
    staticlib: &Path,
    test: &str,
    out_dir: &Path,
) -> Result<String, String> {
    let out = out_dir.join(format!("{test}-wrap-baseline"));
    build_wrapped(tc, dirs, staticlib, test, WRAPPED_BASELINE, &out)?;
    let outcome = run_with_timeout(&out, &[], CONTROL_TIMEOUT)?;
    if outcome.passed {
        Ok(outcome
            .stdout
            .lines()
            .find(|line| line.starts_with("ok:"))
            .unwrap_or("ok")
            .to_owned())
    } else {
        Err(format!(
            "{test} FAILED on the pass-through build of {WRAPPED_LIBRARY}: {}\n{}",
            outcome.reason(),
            outcome.describe(test)
        ))
    }
}

/// The tests [`WRAP_CONTROLS`] must be caught by, sorted, once each.
pub fn wrap_control_tests() -> Vec<&'static str> {
    let mut tests: Vec<&'static str> = WRAP_CONTROLS
        .iter()
        .flat_map(|c| c.caught_by.iter().map(|catch| catch.test))
        .collect();
    tests.sort_unstable();
    tests.dedup();
    tests
}

/// From a `KEEPALLOC_FAIL` exit report: the hash of the site with `hits` hits whose stack
/// starts in `function` (`None` when there is none).
pub fn site_in(report: &str, function: &str, hits: u64) -> Option<String> {
    let mut site = None;
    for line in report.lines() {
        if let Some(rest) = line.trim().strip_prefix("site ") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            site = (words.get(2) == Some(&hits.to_string().as_str())).then(|| words[0].to_owned());
        } else if line.trim().starts_with("#0 ")
            && line.contains(function)
            && let Some(site) = site.take()
        {
            return Some(site);
        }
    }
    None
}
