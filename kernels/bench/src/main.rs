//! `cargo xtask bench`: keepalloc-kernels against XNNPACK, OpenBLAS, matrixmultiply and gemm
//! on the fully-connected shapes, single-threaded, in one run.
//!
//! For each shape (M, K, N) every library computes `x[M][K] · W` (the FC operators also add
//! the bias), its output is checked against an f64 reference (a wrong fast kernel is
//! worthless: any mismatch fails the run), and its time is the median of many timed runs,
//! reported as GFLOPS (`2·M·K·N / t`). The same run measures the core's FMA peak and, for
//! batch 1, the read bandwidth of a weights-sized buffer (the memory roof: 2 flops per
//! 4-byte weight, so GFLOPS ≤ GB/s ÷ 2).
//!
//! oneDNN (the pinned `onednn-cpu-gomp` wheel, `onednn/`) is a peer of every operator:
//! f32, bf16, and int8 both on a pre-quantized input and quantizing in the run.
//!
//! Options: `--op` (f32, bf16_f32, qd8_f32_qc8w, f32_qc8w, all), `--threads T`, `--json
//! PATH` (every operator run, the low-precision ones under `low_precision`), `--svg PATH`
//! (default `target/bench/fully_connected.svg`), `--quick` (shorter timing), `--libs a,b`
//! and `--shapes MxKxN,...` to narrow the run.

mod chart;
mod cli;
mod f32_run;
mod lowp;
mod lowp_data;
mod lowp_kind;
mod onednn;
mod output;
mod peak;
mod peers;
mod probe;
mod runtimes;
mod stats;
mod table;
mod threads;
mod timing;
mod verify;

use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Options, SHAPES};
use f32_run::run_f32;

/// How long (as a power of two of cycles) OpenBLAS's idle threads spin before they sleep,
/// in the multi-thread comparison: 2^18 cycles, about 0.1 ms. Its default, 2^28 (about
/// 0.1 s), keeps a spinning OpenBLAS thread on the second core while the next library is
/// timed: measured here, keepalloc's two-thread figure then equalled its one-thread one.
/// Inside one sample OpenBLAS's calls are back to back, so the shorter spin costs it
/// nothing.
pub(crate) const OPENBLAS_THREAD_TIMEOUT: &str = "18";

/// Runs this bench again with OpenBLAS's environment fixed when it needs to be (OpenBLAS
/// reads it once, when it is loaded, so the process has to start again): `OPENBLAS_CORETYPE`
/// when OpenBLAS picked kernels below this CPU's vector width, and, with `--threads`,
/// `OPENBLAS_THREAD_TIMEOUT`. A variable the user set is kept. Returns only when nothing
/// needs changing or the exec failed.
pub(crate) fn fix_openblas_env(threads: bool) {
    use std::os::unix::process::CommandExt;
    let mut set: Vec<(&str, &str)> = Vec::new();
    if let Some(core) = peers::openblas::better_core() {
        eprintln!(
            "OpenBLAS detected this CPU as {:?}: running again with OPENBLAS_CORETYPE={core}",
            peers::openblas::core_name()
        );
        set.push(("OPENBLAS_CORETYPE", core));
    }
    if threads && std::env::var_os("OPENBLAS_THREAD_TIMEOUT").is_none() {
        set.push(("OPENBLAS_THREAD_TIMEOUT", OPENBLAS_THREAD_TIMEOUT));
    }
    if set.is_empty() {
        return;
    }
    let err = std::process::Command::new("/proc/self/exe")
        .args(std::env::args_os().skip(1))
        .envs(set.iter().copied())
        .exec();
    eprintln!("could not run again with {set:?}: {err}; OpenBLAS's environment stays as it is");
}

fn main() -> ExitCode {
    // A bad option prints the usage and exits with 2, as before.
    let cli = Cli::parse();
    // The process's CPUs, read before anything pins a thread (see `probe::allowed_cpus`).
    probe::allowed_cpus();
    fix_openblas_env(cli.threads.is_some());
    println!(
        "OpenBLAS kernels: {}{}",
        peers::openblas::core_name(),
        std::env::var("OPENBLAS_THREAD_TIMEOUT")
            .map(|t| format!(", idle threads spin 2^{t} cycles"))
            .unwrap_or_default()
    );
    let threads = cli.threads.map_or(1, usize::from);
    let o = Options::from(cli);
    let mut code = ExitCode::SUCCESS;
    let mut json = serde_json::Value::Object(Default::default());
    if o.f32 {
        let (c, j) = if threads > 1 {
            let shapes = o.shapes_given.clone().unwrap_or_else(|| SHAPES.to_vec());
            threads::run(threads, &shapes, o.budget)
        } else {
            run_f32(&o)
        };
        code = c;
        json = j;
    }
    if !o.lowp.is_empty() {
        let shapes = o.shapes_given.clone().unwrap_or_else(|| {
            let mut s = SHAPES.to_vec();
            s.push((128, 4096, 4096));
            s
        });
        let (ok, j) = lowp::run(&o.lowp, &shapes, o.budget, threads);
        if !ok {
            eprintln!("WRONG RESULTS in the low-precision operators");
            code = ExitCode::FAILURE;
        }
        if let serde_json::Value::Object(map) = &mut json {
            map.insert("low_precision".into(), j);
        }
    }
    if std::env::var("CI").is_ok_and(|v| v == "true")
        && let Err(why) = onednn::OneDnn::get()
    {
        eprintln!("CI=true: oneDNN is required: {why}");
        code = ExitCode::FAILURE;
    }
    if let Some(path) = &o.json {
        if let Some(dir) = std::path::Path::new(path).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match std::fs::write(path, output::to_pretty(&json)) {
            Ok(()) => println!("JSON: {path}"),
            Err(e) => {
                eprintln!("could not write {path}: {e}");
                code = ExitCode::FAILURE;
            }
        }
    }
    code
}
