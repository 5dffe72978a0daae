//! The negative controls on the REAL library: `tests/c/controls/wrapped_library.c` replaces
//! some of its entry points at link time (`-Wl,--wrap`), one behaviour broken each.

use std::ffi::OsString;
use std::path::Path;

use super::foundation::{foundation_tests, keepalloc_link};
use super::judge::{build_against, catch_all, judge_baseline, judge_control};
use super::outcome::SIGABRT;
use super::signature::{Catch, Control, Signature};
use super::toolchain::{Dirs, Program, Toolchain, companions, stem};

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
    let program = Program {
        sources: std::iter::once(source)
            .chain(companions(dirs, test))
            .chain(std::iter::once(dirs.controls().join(WRAPPED_LIBRARY)))
            .collect(),
        defines: vec![define.to_owned()],
        includes: vec![],
        link,
        out: out.to_path_buf(),
    };
    build_against(tc, dirs, &program, test, WRAPPED_LIBRARY, define)
}

/// As [`run_control`](super::run_control), for a control of [`WRAP_CONTROLS`] (built on the
/// real `staticlib`).
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
    judge_control(&out, control, catch)
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
    let build = format!("the pass-through build of {WRAPPED_LIBRARY}");
    judge_baseline(&out, test, &build)
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

/// Every catch of [`WRAP_CONTROLS`] on the real `staticlib`, each said through `say` as it
/// comes; returns the misses.
pub fn catch_wrap_controls(
    tc: &Toolchain,
    dirs: &Dirs,
    staticlib: &Path,
    out_dir: &Path,
    say: impl FnMut(&str),
) -> Vec<String> {
    catch_all(
        WRAP_CONTROLS,
        |control, catch| run_wrap_control(tc, dirs, staticlib, control, catch, out_dir),
        say,
    )
}

/// Every test of [`wrap_control_tests`] on the pass-through build, each pass said through
/// `say`; returns the failures.
pub fn pass_wrap_baselines(
    tc: &Toolchain,
    dirs: &Dirs,
    staticlib: &Path,
    out_dir: &Path,
    mut say: impl FnMut(&str),
) -> Vec<String> {
    let mut failures = Vec::new();
    for test in wrap_control_tests() {
        match run_wrap_baseline(tc, dirs, staticlib, test, out_dir) {
            Ok(line) => say(&format!("wrap baseline: {line}")),
            Err(e) => failures.push(e),
        }
    }
    failures
}
