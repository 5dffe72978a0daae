//! The C tests of the C ABI, run by `cargo test -p keepalloc`.
//!
//! Each test compiles one program from `tests/c/` with the system C compiler (`$CC`, else
//! `cc`) against `keepalloc.h` and the static library cargo built for THIS test run, runs it
//! in its own process (the provider is process-wide) and checks its exit status.
//!
//! Which static library: cargo compiles this package's library once, with all its crate
//! types (`staticlib`, `cdylib`, `rlib`), before it links this test, and writes
//! `libkeepalloc.a` next to the rlib in `target/<profile>/deps/` — the directory this test
//! executable runs from. So the archive is always the one built from the current sources with
//! the current features and profile, with no nested cargo (which would wait on cargo's
//! build-directory lock). `cargo xtask c-test` runs the same programs against the release
//! build, plus the XNNPACK and C++ examples.

#[path = "support/ctools.rs"]
mod ctools;

use std::path::PathBuf;

use ctools::{CONTROLS, Dirs, Toolchain};

/// The foundation tests, by file stem; `every_c_test_is_listed` keeps this in step with
/// the directory.
const TESTS: &[&str] = &[
    "acquire_race",
    "header_cxx17",
    "init_always_fails",
    "init_retry",
    "invalid_argument",
    "table_contract",
];

fn dirs() -> Dirs {
    Dirs::from_capi(&PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `libkeepalloc.a` from this build (see the module docs).
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable's directory");
    let lib = deps.join("libkeepalloc.a");
    assert!(
        lib.is_file(),
        "{} not found: cargo should have built the staticlib next to this test",
        lib.display()
    );
    lib
}

fn out_dir(what: &str) -> PathBuf {
    let profile = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let p = exe.parent()?.parent()?.file_name()?.to_owned();
            Some(p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("keepalloc-c-tests/{profile}/{what}"))
}

fn run_c_test(name: &str) {
    let dirs = dirs();
    let source = ctools::foundation_tests(&dirs)
        .unwrap()
        .into_iter()
        .find(|p| ctools::stem(p) == name)
        .unwrap_or_else(|| panic!("no C test named {name} in {}", dirs.tests().display()));
    let outcome = ctools::build_and_run(
        &Toolchain::from_env(),
        &dirs,
        &source,
        &staticlib(),
        &out_dir(name),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    print!("{}", outcome.stdout);
    assert!(outcome.passed, "{}", outcome.describe(name));
}

#[test]
fn acquire_race() {
    run_c_test("acquire_race");
}

#[test]
fn init_retry() {
    run_c_test("init_retry");
}

#[test]
fn invalid_argument() {
    run_c_test("invalid_argument");
}

#[test]
fn init_always_fails() {
    run_c_test("init_always_fails");
}

#[test]
fn table_contract() {
    run_c_test("table_contract");
}

#[test]
fn header_cxx17() {
    run_c_test("header_cxx17");
}

#[test]
fn header_compiles_alone_as_c_and_cxx() {
    let lines = ctools::check_header(&Toolchain::from_env(), &dirs(), &out_dir("header"))
        .unwrap_or_else(|e| panic!("{e}"));
    for line in lines {
        println!("{line}");
    }
}

/// The tests can fail: each negative control (a broken `keepalloc.h` implementation) is
/// caught by the tests that exist for its bug.
#[test]
fn negative_controls_are_caught() {
    let (tc, dirs) = (Toolchain::from_env(), dirs());
    for control in CONTROLS {
        for test in control.caught_by {
            let reason = ctools::run_control(&tc, &dirs, control, test, &out_dir("controls"))
                .unwrap_or_else(|e| panic!("{e}"));
            println!(
                "control {}: {test} failed as it must: {reason}",
                control.name
            );
        }
    }
}

#[test]
fn every_c_test_is_listed() {
    let found: Vec<String> = ctools::foundation_tests(&dirs())
        .unwrap()
        .iter()
        .map(|p| ctools::stem(p))
        .collect();
    assert_eq!(found, TESTS, "tests/c and TESTS in c_tests.rs disagree");
}
