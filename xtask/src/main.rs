//! `cargo xtask <command>`: keepalloc's developer commands, one binary, few dependencies.
//!
//! Every command calls cargo through `env!("CARGO")` so it uses the same toolchain that
//! built it, and runs from the workspace root wherever it was invoked. Every command's
//! arguments are parsed by clap, so each has a `--help` ([`Cli`]).

mod alloc_bench;
mod bench;
mod c_adoption;
mod ctest;
mod fault_explore;
mod fault_test;
#[cfg(test)]
mod house;
mod install;
mod loom;
mod mutants;
mod preload;
mod process;
mod runtimes;
mod sanitizers;
mod snippets;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// keepalloc's developer commands.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The main job: every fault scenario against keepalloc and each negative control, each
    /// run in a fresh process (`--runtime onnxruntime`: the campaign against ONNX Runtime).
    #[command(long_about = fault_test::LONG_ABOUT)]
    FaultTest(fault_test::Args),
    /// Fails every allocation site of a library, one fresh process per site.
    #[command(long_about = fault_explore::LONG_ABOUT)]
    FaultExplore(fault_explore::Args),
    /// Build libkeepalloc and run the C/C++ tests against keepalloc.h.
    #[command(long_about = ctest::LONG_ABOUT)]
    CTest(ctest::Args),
    /// Install keepalloc as a C library: headers, libkeepalloc.so (soname libkeepalloc.so.0.1)
    /// and .a, the preload, pkg-config and CMake files (--prefix, --libdir, --destdir).
    #[command(long_about = install::LONG_ABOUT)]
    Install(install::Args),
    /// Install into a temp prefix (and a staged one) and build, link and run a C program
    /// with the real CMake and pkg-config, shared and static.
    #[command(long_about = install::test::LONG_ABOUT)]
    InstallTest(install::test::Args),
    /// The C XNNPACK adoption check against Debian's and ExecuTorch's XNNPACK.
    #[command(long_about = c_adoption::LONG_ABOUT)]
    CAdoption(c_adoption::Args),
    /// Model-check the provider's once cell under loom (all interleavings).
    #[command(long_about = loom::LONG_ABOUT)]
    Loom(loom::Args),
    /// The allocator and provider tests, then the kernels pool, under Miri (nightly + miri;
    /// else skipped).
    #[command(long_about = sanitizers::MIRI_ABOUT)]
    Miri(sanitizers::MiriArgs),
    /// The fault-test campaign under AddressSanitizer (nightly; else skipped).
    #[command(long_about = sanitizers::ASAN_ABOUT)]
    Asan(sanitizers::AsanArgs),
    /// Provider tests, the kernels pool and the fault harness under ThreadSanitizer
    /// (nightly + rust-src; else skipped; CI=true or --require: an error).
    #[command(long_about = sanitizers::TSAN_ABOUT)]
    Tsan(sanitizers::TsanArgs),
    /// Kernels vs XNNPACK, OpenBLAS, matrixmultiply, gemm (options go to the benchmark).
    #[command(long_about = bench::LONG_ABOUT)]
    Bench(bench::Args),
    /// table_overhead and contended over several link layouts (rust-lld
    /// --shuffle-sections): each ratio's median over them, with the lowest and highest.
    AllocBench(alloc_bench::Args),
    /// Download + unpack the pinned onnxruntime and executorch wheels (target/runtimes).
    #[command(long_about = runtimes::LONG_ABOUT)]
    Runtimes(runtimes::Args),
    /// libkeepalloc_preload.so on ExecuTorch's XNNPACK through the installed files, from C
    /// and Python ctypes, with and without LD_PRELOAD.
    #[command(long_about = preload::LONG_ABOUT)]
    PreloadCheck(preload::Args),
    /// cargo-mutants on the provider, the C table and the kernels pool; >= 95% caught
    /// (cargo-mutants 27.1.0).
    #[command(long_about = mutants::LONG_ABOUT)]
    Mutants(mutants::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::FaultTest(args) => fault_test::run(args),
        Command::FaultExplore(args) => fault_explore::run(args),
        Command::CTest(args) => ctest::run(args),
        Command::Install(args) => install::run(args),
        Command::InstallTest(args) => install::test::run(args),
        Command::CAdoption(args) => c_adoption::run(args),
        Command::Loom(args) => loom::run(args),
        Command::Miri(args) => sanitizers::miri(args),
        Command::Asan(args) => sanitizers::asan(args),
        Command::Tsan(args) => sanitizers::tsan(args),
        Command::Bench(args) => bench::run(args),
        Command::AllocBench(args) => alloc_bench::run(args),
        Command::Runtimes(args) => runtimes::run(args),
        Command::Mutants(args) => mutants::run(args),
        Command::PreloadCheck(args) => preload::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    /// Every command answers `--help` with its help (clap's DisplayHelp), so a command
    /// added without one fails here.
    #[test]
    fn every_command_has_help() {
        let cli = Cli::command();
        cli.clone().debug_assert();
        let mut checked = 0;
        for sub in cli.get_subcommands() {
            let name = sub.get_name();
            let err = Cli::try_parse_from(["cargo xtask", name, "--help"])
                .expect_err("--help ends parsing");
            assert_eq!(err.kind(), ErrorKind::DisplayHelp, "{name} --help");
            checked += 1;
        }
        assert_eq!(checked, 15);
        let top = Cli::try_parse_from(["cargo xtask", "--help"]).unwrap_err();
        assert_eq!(top.kind(), ErrorKind::DisplayHelp);
    }

    /// The command lines .ci/run and the README use still parse.
    #[test]
    fn ci_command_lines_parse() {
        for line in [
            "fault-test --runs 30 --json target/fault-test/ci.json",
            "fault-test --cell-mutant all --runs 20",
            "fault-test --runtime onnxruntime",
            "fault-test --runtime onnxruntime --model m --runs 2 --threads 2",
            "bench --quick --op all --shapes 1x256x256,33x96x130,64x256x96 --svg target/bench/ci.svg",
            "bench --quick --threads 2 --shapes 1x256x256,33x96x130,64x256x96",
            "fault-explore --json target/fault-explore/ci.json",
            "fault-explore --target xnnpack-subgraph --site 00ff --hits all",
            "miri",
            "miri --full -- --test-threads 1",
            "asan --runs 5 --scenario cold-start",
            "tsan --runs 3 --test-runs 1 --timeout 100",
            "loom",
            "c-test --xnnpack-runs 3",
            "c-adoption",
            "install --prefix /tmp/x",
            "install --prefix /usr --libdir lib/x86_64-linux-gnu --destdir /tmp/stage",
            "install-test",
            "mutants --no-extra --part pool",
            "runtimes --force",
            "alloc-bench --layouts 3",
            "preload-check",
        ] {
            let argv = std::iter::once("cargo xtask").chain(line.split(' '));
            if let Err(e) = Cli::try_parse_from(argv) {
                panic!("{line}: {e}");
            }
        }
        let Command::Bench(b) = Cli::try_parse_from(["x", "bench", "--quick", "--op", "all"])
            .unwrap()
            .command
        else {
            panic!("bench");
        };
        assert_eq!(b.args, ["--quick", "--op", "all"]);
    }
}
