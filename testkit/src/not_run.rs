//! A test that cannot run here says so where a person sees it.
//!
//! libtest captures `println!` and `eprintln!` of a passing test, so a skip printed that way
//! is never seen. [`not_run`] writes to the process's standard error stream itself, which
//! libtest does not capture; under `CI=true` it panics instead: CI installs everything.

use std::io::Write;

/// True when the environment says this is CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Reports that `test` did not run because of `why`: a line on the real standard error, or,
/// under `CI=true`, a panic with the same words.
pub fn not_run(test: &str, why: &str) {
    let line = format!("NOT RUN {test}: {why}");
    if in_ci() {
        panic!("{line} (CI=true: everything a test needs must be installed)");
    }
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
