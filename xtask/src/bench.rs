//! `cargo xtask bench`: builds and runs the kernels benchmark (`keepalloc-kernels-bench`, a
//! release binary) in one run: keepalloc-kernels against oneDNN, XNNPACK, OpenBLAS,
//! matrixmultiply and gemm on the shapes, single-threaded. Options are passed
//! through (`--json PATH`, `--svg PATH`, `--quick`, `--libs a,b`, `--shapes MxKxN,...`, and
//! `--op f32|bf16_f32|qd8_f32_qc8w|f32_qc8w|all`: the low-precision operators against
//! current XNNPACK and oneDNN, from the wheels of `cargo xtask runtimes`); the benchmark's
//! own dependencies (plotters, the peers) stay out of xtask.
//!
//! `cargo xtask bench --threads T [--json PATH] [--quick] [--shapes ...]` is the
//! multi-threaded comparison: keepalloc-kernels on a `ThreadPool::new(T)` (and on a Debian
//! pthreadpool through the `Parallel` trait), with its own 1-thread figure measured in the
//! same rounds, against Debian's XNNPACK and current XNNPACK each on a T-thread pthreadpool,
//! OpenBLAS and oneDNN with T threads (with `--op`, the low-precision operators on the pool
//! against oneDNN with T threads); the same shapes, interleaved, every output checked, JSON
//! with GFLOPS medians and the ratios (keepalloc over each peer and over its 1-thread run),
//! each the median of the rounds' own ratios.

use crate::util;

/// `cargo xtask bench --help`.
pub const LONG_ABOUT: &str = "\
Builds and runs the kernels benchmark (keepalloc-kernels-bench, release) in one run:
keepalloc-kernels against oneDNN, XNNPACK, OpenBLAS, matrixmultiply and gemm,
single-threaded. Every argument goes to the benchmark as it is:
  --json PATH, --svg PATH, --quick, --libs a,b, --shapes MxKxN,...
  --op f32|bf16_f32|qd8_f32_qc8w|f32_qc8w|all   the low-precision operators against current
                                               XNNPACK and oneDNN (the executorch and
                                               onednn-cpu-gomp wheels, from
                                               `cargo xtask runtimes`), with the AMX peak
                                               probe and the memory roof
  --threads T   the multi-threaded comparison: keepalloc-kernels on a T-thread pool (and on a
                Debian pthreadpool) with its own 1-thread figure, against Debian's and current
                XNNPACK on a T-thread pthreadpool, OpenBLAS and oneDNN with T threads; with
                --op, the low-precision operators on the pool against oneDNN";

/// `cargo xtask bench` hands its arguments to the benchmark.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The benchmark's arguments (see above).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Runs the benchmark with `args`.
pub fn run(Args { args }: Args) -> Result<(), String> {
    // The peers from the pinned wheels (oneDNN, current XNNPACK): fetched first if missing.
    crate::runtimes::run(crate::runtimes::Args::default())?;
    let mut cmd = util::cargo();
    cmd.args([
        "run",
        "--release",
        "--quiet",
        "--package",
        "keepalloc-kernels-bench",
        "--",
    ]);
    cmd.args(&args);
    util::run(&mut cmd)
}
