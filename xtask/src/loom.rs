//! `cargo xtask loom`: model-checks the provider's once cell with loom.
//!
//! Runs `provider/tests/loom.rs` with `--cfg loom` in release mode in its own target
//! directory (so the normal build is not invalidated). The models: 2 threads racing the first
//! acquire (exhaustive), 3 threads (preemption bound 3 unless `LOOM_MAX_PREEMPTIONS` says
//! otherwise), a failure after the library captured the owner then a retry, a panicking
//! attempt, two libraries on one owner (each with its own `LibraryOnce`, preemption bound 3),
//! and the negative controls: the once_cell-style naive retry, the check-then-act race and a
//! once shared by two libraries, which must fail.

use crate::util;

/// `cargo xtask loom --help`.
pub const LONG_ABOUT: &str = "\
Model-checks the provider's once cell (KeepCell) with loom: provider/tests/loom.rs with
--cfg loom, release, target dir target/loom. The models: 2 threads racing the first acquire
(exhaustive), 3 threads (preemption bound 3), a failure after the library captured the owner
then a retry, a panicking attempt, two libraries on one owner, and the negative controls
(the once_cell-style naive retry, the check-then-act race, a once shared by two libraries),
which must fail.

environment: LOOM_MAX_PREEMPTIONS (the bound of the 3-thread models), LOOM_LOG.";

/// `cargo xtask loom` takes no options: the bound is set through the environment.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// The `cargo` arguments that run the loom models (shared with `cargo xtask mutants`).
pub const TEST_ARGS: [&str; 6] = [
    "test",
    "--release",
    "-p",
    "keepalloc-provider",
    "--test",
    "loom",
];

/// The `RUSTFLAGS` the models are built with: the whole crate under `--cfg loom`.
pub const RUSTFLAGS: &str = "--cfg loom";

/// Runs the loom models.
pub fn run(_: Args) -> Result<(), String> {
    let target = util::root().join("target").join("loom");
    let mut cmd = util::cargo();
    cmd.args(TEST_ARGS)
        .env("RUSTFLAGS", RUSTFLAGS)
        .env("CARGO_TARGET_DIR", &target)
        .env("LOOM_LOG", std::env::var("LOOM_LOG").unwrap_or_default());
    println!("xtask loom: model-checking KeepCell (provider/tests/loom.rs)");
    util::run(&mut cmd)
}
