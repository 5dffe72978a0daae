//! `cargo xtask miri`, `cargo xtask asan` and `cargo xtask tsan`: the provider and allocator
//! tests under Miri, the fault campaign under AddressSanitizer, and the provider's tests, the
//! kernels' pool tests and the fault harness under ThreadSanitizer, where the nightly
//! toolchain allows.
//!
//! All three need nightly, reached through rustup (`cargo +nightly`). Where rustup, nightly
//! or a needed component is missing, or the host has no such sanitizer, they print
//! `skipped: <why>` and succeed: a machine without nightly is not a failure of the code.
//! Under CI (`CI=true`) or with `--require`, every such reason is an error instead: CI must
//! not report a sanitizer as passed that never ran. Once everything is there, a failed build
//! is a failure, never a skip.

mod asan;
mod miri;
mod nightly;
mod pool;
mod reports;
#[cfg(test)]
mod tests;
mod tsan;

pub use asan::{ASAN_ABOUT, AsanArgs, asan};
pub use miri::{MIRI_ABOUT, MiriArgs, miri};
pub use tsan::{TSAN_ABOUT, TsanArgs, tsan};
