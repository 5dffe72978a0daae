//! What keepalloc's tests share, so no test file carries its own copy.
//!
//! * [`ctools`]: compile and run keepalloc's C and C++ tests with the system compiler, and
//!   judge the negative controls they must catch (`capi/tests/c_tests.rs`, `cargo xtask
//!   c-test`, `cargo xtask install-test`).
//! * [`child`]: re-run this test binary as a fresh process for one test, and describe what
//!   it did when an assertion about it fails.
//! * [`not_run`](mod@not_run): a test that cannot run here (a runtime or a system library is missing) says
//!   so where a person sees it, and fails instead under `CI=true`.
//! * [`preload_env`]: the environment of a program run under `LD_PRELOAD` in the preload
//!   checks (no inherited preload, `LD_LIBRARY_PATH` or adoption settings).
//! * [`runtimes`]: the pinned ONNX Runtime and ExecuTorch wheels, fetched and unpacked on first
//!   use into `target/runtimes/` (the same code `cargo xtask runtimes` runs).
//! * [`together`](mod@together): threads released together by a barrier, each calling until
//!   it succeeds (the races of the registration tests).
//! * [`watchdog`](mod@watchdog): a per-test deadlock bound: a test that hangs is named on stderr
//!   and the process aborts, instead of hanging the run.
//!
//! A dev-dependency only (`publish = false`): nothing in the product imports it.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod child;
pub mod ctools;
pub mod not_run;
pub mod preload_env;
pub mod runtimes;
pub mod together;
pub mod watchdog;

pub use child::{describe, rerun};
pub use not_run::{in_ci, not_run};
pub use together::{calls_until, together};
