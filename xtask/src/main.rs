//! `cargo xtask <command>`: keepalloc's developer commands, one binary, few dependencies.
//!
//! Every command calls cargo through `env!("CARGO")` so it uses the same toolchain that
//! built it, and runs from the workspace root wherever it was invoked.

mod alloc_bench;
mod bench;
mod c_adoption;
mod ctest;
mod fault_test;
mod install;
mod loom;
mod mutants;
mod ort_campaign;
mod process;
mod runtimes;
mod sanitizers;
mod snippets;
mod util;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  fault-test   the main job: every fault scenario against keepalloc and each negative
               control, each run in a fresh process (see `cargo xtask fault-test --help`)
  fault-test --runtime onnxruntime
               the fault campaign pointed at the real ONNX Runtime (see its --help)
  c-test       build libkeepalloc and run the C/C++ tests against keepalloc.h
  install      install keepalloc as a C library: --prefix DIR (header, libkeepalloc.so.0
               with its soname, libkeepalloc.a, pkgconfig/keepalloc.pc)
  install-test install into a temp prefix and build, link and run a C program through
               pkg-config, shared and static
  c-adoption   the C XNNPACK adoption check against Debian's and ExecuTorch's XNNPACK
  loom         model-check the provider's once cell under loom (all interleavings)
  miri         the allocator and provider tests under Miri (nightly + miri; else skipped)
  asan         the fault-test campaign under AddressSanitizer (nightly; else skipped)
  tsan         provider tests and the fault harness under ThreadSanitizer (nightly +
               rust-src; else skipped; CI=true or --require: an error)
  bench        kernels vs XNNPACK, OpenBLAS, matrixmultiply, gemm (--json PATH, --svg PATH)
  alloc-bench  table_overhead and contended (the C table over the backend called directly)
               in several link layouts: each ratio's median over them (--layouts N)
  runtimes     download + unpack the pinned onnxruntime and executorch wheels (target/runtimes)
  mutants      cargo-mutants on the provider and the C table; >= 95% caught (cargo-mutants
               27.1.0; see `cargo xtask mutants --help`)
  help         this text
";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(command) = args.next() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest: Vec<String> = args.collect();
    let result = match command.as_str() {
        "bench" => bench::run(&rest),
        "alloc-bench" => alloc_bench::run(&rest),
        "fault-test" if rest.iter().any(|a| a == "--runtime") => ort_campaign::run(&rest),
        "fault-test" => fault_test::run(&rest),
        "miri" => sanitizers::miri(&rest),
        "asan" => sanitizers::asan(&rest),
        "tsan" => sanitizers::tsan(&rest),
        "c-test" => ctest::run(&rest),
        "c-adoption" => c_adoption::run(&rest),
        "install" => install::run(&rest),
        "install-test" => install::test(&rest),
        "loom" => loom::run(&rest),
        "mutants" => mutants::run(&rest),
        "runtimes" => runtimes::run(&rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}
