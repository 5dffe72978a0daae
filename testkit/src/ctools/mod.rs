//! Compiling and running keepalloc's C and C++ tests with the system compiler.
//!
//! Shared by the integration test `capi/tests/c_tests.rs` (`cargo test -p keepalloc-capi`)
//! and `cargo xtask c-test`, which runs the same programs against the release build.
//!
//! Every C test is one program in `capi/tests/c/` (`*.c` or `*.cpp`, one `main` each) and
//! runs in its own process, because the provider it tests is process-wide. The negative
//! controls in `tests/c/controls/` are deliberately broken implementations of `keepalloc.h`,
//! linked instead of `libkeepalloc.a`; the tests named in [`CONTROLS`] must FAIL against them,
//! and fail by the [`Signature`] of the control's bug (the check it breaks, or the signal it
//! causes in the step it is in). Any other failure is inconclusive and an error, never a
//! catch. The bug-free [`BASELINES`] of those files must PASS the same tests, so a control
//! fails by its one bug and by nothing else in its file. [`WRAP_CONTROLS`] break the REAL
//! library at link time (`-Wl,--wrap`), one behaviour each.
//!
//! One idea per file: the compiler ([`Toolchain`], [`compile`]), the header check, the
//! foundation tests, a program's [`Outcome`] and how it is run, the signatures, the two
//! control tables, how a control's run is judged, and the `KEEPALLOC_FAIL` report.

mod controls;
mod fail_report;
mod foundation;
mod header;
mod judge;
mod outcome;
mod run;
mod signature;
mod toolchain;
mod wrapped;

pub use controls::{
    BASELINES, Baseline, CONTROLS, catch_controls, pass_baselines, run_baseline, run_control,
};
pub use fail_report::site_in;
pub use foundation::{STATIC_LIB_DEPS, build_and_run, foundation_tests, keepalloc_link};
pub use header::{HEADER_CHECKS, check_header};
pub use judge::CONTROL_TIMEOUT;
pub use outcome::{Outcome, SIGABRT, SIGSEGV, signal_name};
pub use run::{run, run_command_with_timeout, run_with_timeout};
pub use signature::{Catch, Control, Signature};
pub use toolchain::{
    Dirs, FLAGS, Lang, Program, Toolchain, checked_output, companions, compile, stem,
};
pub use wrapped::{
    WRAP_CONTROLS, WRAPPED, WRAPPED_BASELINE, catch_wrap_controls, pass_wrap_baselines,
    run_wrap_baseline, run_wrap_control, wrap_control_tests,
};
