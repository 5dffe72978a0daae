//! `cargo xtask mutants`: mutation testing of the provider (`keepalloc-provider`), of the C
//! table (`allocators/src/table.rs` and the files split from it) and of the
//! kernels' worker pool (`kernels/src/pool/`) with cargo-mutants, scored against a 95% bar.
//!
//! # The test command, and how it is run
//!
//! The test command of a mutant is, in order: the crates' own tests (the provider's, plus the
//! allocators' for the table), the loom models (`RUSTFLAGS="--cfg loom" cargo test --release
//! -p keepalloc-provider --test loom`, exactly as `cargo xtask loom`), and a short
//! keepalloc-only fault campaign (`cargo xtask fault-test --variant keepalloc --runs 3`). A
//! mutant is caught when any of them fails.
//!
//! cargo-mutants (27.1) can only run `cargo test` or `cargo nextest` as its test command, with
//! extra arguments; it cannot run an arbitrary command. Neither extra command fits into one
//! `cargo test`: the loom models need the whole crate built with `--cfg loom` (under which the
//! ordinary tests and the provider module do not exist), and the campaign needs a release
//! harness with the `controls` feature, built by `cargo xtask fault-test` itself (a test that
//! spawned cargo would nest cargo inside cargo's build and fight over its target directory).
//! The other way in, `--test-package keepalloc-fault-inject` (its harness tests run the real
//! provider in fresh processes), would run fault-inject's whole suite (XNNPACK FFI, scribble
//! tests) on every mutant, rebuild the kernels for every mutant of the table, and still
//! cover only two of the campaign's scenarios. So the command runs in two stages over one
//! snapshot of the tree:
//!
//! * **stage 1 — cargo-mutants** with the crates' own tests, once per part (the table, with the
//!   allocators' and the provider's tests; the provider, with its tests; the pool, with the
//!   pool tests of keepalloc-kernels): this catches nearly everything, in seconds per mutant;
//! * **stage 2 — the expensive commands, on stage 1's survivors only** (missed or timed out):
//!   this command applies each survivor of the table and the provider (the pool's code runs in
//!   neither command) itself, exactly as cargo-mutants did (its span and
//!   replacement from `outcomes.json`, checked against cargo-mutants' own diff), to a private
//!   copy of the tree, and runs the loom models (for mutants of `cell.rs` and `sync.rs`, the
//!   only code loom sees) and then the campaign; both run first on the unmutated copy, and
//!   must pass there.
//!
//! Running the cheap command first and the expensive ones only when it passed is the same as
//! running `tests && loom && campaign` on every mutant, since a mutant is caught as soon as one
//! of them fails. A mutant that hung under stage 1 (a lost wake-up, say) is caught if loom or
//! the campaign then fails on it (loom reports a deadlock as a failure), and stays a timeout
//! otherwise.
//!
//! Everything runs from a snapshot of the working tree taken at the start (other people may be
//! editing it), with persistent target directories under `target/mutants/` so that a second
//! run rebuilds only what changed. The command ends with exactly one line
//! `mutants: caught C, missed M, timeout T, unviable U` and fails when fewer than 95% of the
//! viable mutants (caught + missed + timeout) were caught, unless every missed mutant is one of
//! the documented equivalents (`xtask/src/mutants/equivalent.rs`).

mod equivalent;
mod mutant;
mod parts;
mod report;
mod snapshot;
mod stage1;
mod stage2;

use std::process::Stdio;
use std::time::Instant;

use crate::util;
use mutant::Verdict;
use parts::{LOOM_FILES, PARTS};

/// The cargo-mutants version this command is written and scored against.
pub const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// How to install it.
const INSTALL: &str = "cargo install cargo-mutants --version 27.1.0 --locked";

/// `cargo xtask mutants --help`.
pub const LONG_ABOUT: &str = "\
Mutation-tests keepalloc-provider, the C table (allocators/src/table.rs, headerless.rs,
table_allocator.rs, no_unwind.rs) and the kernels' worker pool (kernels/src/pool/) with
cargo-mutants (--jobs 1). Stage 1: cargo-mutants with the crates' tests (for the pool:
keepalloc-kernels --lib --test pool). Stage 2, on the provider's and the table's stage-1
survivors only: the loom models (mutants of cell.rs/sync.rs) and a short keepalloc-only
fault campaign (`cargo xtask fault-test --variant keepalloc --runs 3`). Prints the survivors,
the documented equivalent mutants, and finally `mutants: caught C, missed M, timeout T, unviable U`; exits
non-zero when fewer than 95% of the viable mutants were caught, unless every missed mutant is a
documented equivalent. Reports go to target/mutants/.";

/// `cargo xtask mutants` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Stage 1 only (no loom, no campaign): quicker, and a lower score.
    #[arg(long)]
    no_extra: bool,
    /// Only this part (repeatable) [default: all three]; the score is over the parts that
    /// ran, and the equivalents of the others are 'not generated'.
    #[arg(long = "part", value_name = "NAME", value_parser = ["table", "provider", "pool"])]
    parts: Vec<String>,
}

/// Runs both stages and reports.
pub fn run(args: Args) -> Result<(), String> {
    let extra = !args.no_extra;
    let only: Vec<&'static str> = PARTS
        .iter()
        .filter(|p| args.parts.iter().any(|n| n == p.name))
        .map(|p| p.name)
        .collect();
    let started = Instant::now();
    if !cargo_mutants_present()? {
        return Ok(());
    }

    let root = util::root();
    let work = root.join("target").join("mutants");
    let tree = snapshot::scratch_dir(&root);
    println!("xtask mutants: snapshot of the tree in {}", tree.display());
    snapshot::snapshot(&root, &tree)?;

    // Stage 1.
    let mut mutants = Vec::new();
    for part in PARTS
        .iter()
        .filter(|p| only.is_empty() || only.contains(&p.name))
    {
        mutants.extend(stage1::run_part(part, &tree, &work)?);
    }

    // Stage 2.
    let survivors: Vec<usize> = (0..mutants.len())
        .filter(|&i| {
            mutants[i].stage2 && matches!(mutants[i].verdict, Verdict::Missed | Verdict::Timeout)
        })
        .collect();
    if !extra {
        println!("xtask mutants: --no-extra: the loom models and the campaign were not run");
    } else if survivors.is_empty() {
        println!(
            "xtask mutants: stage 1 left no survivor: loom and the campaign have nothing to do"
        );
    } else {
        let mut stage = stage2::Extra::new(&tree, &work);
        let needs_loom = survivors
            .iter()
            .any(|&i| LOOM_FILES.contains(&mutants[i].file.as_str()));
        stage.baseline(needs_loom)?;
        for &i in &survivors {
            stage.test(&mut mutants[i])?;
        }
    }

    report::report(&mutants, started.elapsed())
}

/// Checks that cargo-mutants is installed. Missing: an error under CI, else a skip (`false`).
fn cargo_mutants_present() -> Result<bool, String> {
    let out = util::cargo()
        .args(["mutants", "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .trim()
        .strip_prefix("cargo-mutants ")
        .map(str::to_owned);
    match version {
        Some(v) if out.status.success() => {
            if v != CARGO_MUTANTS_VERSION {
                println!(
                    "xtask mutants: warning: cargo-mutants {v} is installed; this command is \
                     written for {CARGO_MUTANTS_VERSION} (its mutant names may differ): {INSTALL}"
                );
            }
            Ok(true)
        }
        _ => {
            let message = format!(
                "cargo-mutants {CARGO_MUTANTS_VERSION} is not installed; install it with `{INSTALL}`"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                Err(message)
            } else {
                println!("xtask mutants: skipped: {message}");
                Ok(false)
            }
        }
    }
}
