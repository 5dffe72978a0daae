//! `cargo xtask bench`: builds and runs the kernels benchmark (`keepalloc-kernels-bench`, a
//! release binary) in one run: keepalloc-kernels against XNNPACK, OpenBLAS, matrixmultiply
//! and gemm on the shapes, single-threaded. Options are passed through (`--json
//! PATH`, `--svg PATH`, `--quick`, `--libs a,b`, `--shapes MxKxN,...`, and `--op
//! f32|bf16_f32|qd8_f32_qc8w|f32_qc8w|all`: the low-precision operators against current
//! XNNPACK, the executorch wheel's from `cargo xtask runtimes`); the benchmark's own
//! dependencies (plotters, the peers) stay out of xtask.
//!
//! `cargo xtask bench --threads T [--json PATH] [--quick] [--shapes ...]` is the
//! multi-threaded comparison: keepalloc-kernels on a `ThreadPool::new(T)` (and on a Debian
//! pthreadpool through the `Parallel` trait), with its own 1-thread figure measured in the
//! same rounds, against Debian's XNNPACK and current XNNPACK each on a T-thread pthreadpool
//! and OpenBLAS with T threads; the same shapes, interleaved, every output checked, JSON
//! with GFLOPS medians and the ratios (keepalloc over each peer and over its 1-thread run),
//! each the median of the rounds' own ratios.

use crate::util;

/// Runs the benchmark with `args`.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut cmd = util::cargo();
    cmd.args([
        "run",
        "--release",
        "--quiet",
        "--package",
        "keepalloc-kernels-bench",
        "--",
    ]);
    cmd.args(args);
    util::run(&mut cmd)
}
