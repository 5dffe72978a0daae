//! `cargo xtask fault-test --runtime onnxruntime`: the fault campaign pointed at the real
//! ONNX Runtime (the pinned PyPI wheel), with keepalloc's owner as its env allocator.
//!
//! For every model (the wheel's and the generated FC models in
//! `runtimes/onnxruntime/models/`), each run in a fresh `keepalloc-ort-child` process:
//!
//! 1. `count`: no failure, one thread; its allocation count is the number of sites;
//! 2. `nth:K` for every site K, one thread (each allocation site fails in turn);
//! 3. `probability:P@SEED` for P in {0.05, 0.25} and `--runs` seeds, `--threads` threads;
//! 4. `refuse-registrations:3`: ONNX Runtime's `RegisterAllocator` refuses its first three
//!    calls (interposed at the OrtApi boundary) while `--threads` threads register at once and
//!    retry: one owner, one face registered four times, every caller registered;
//! 5. the negative control `--control foreign-allocator` (another allocator replaces
//!    keepalloc's on the env), which keepalloc's accounting must catch in every run.
//!
//! Each run is classified `ok`, `clean-error`, `crash` (killed by a signal), `hang` (past
//! `--timeout`), `wrong-output`, `leak` or `keepalloc-violation` (the child names each broken
//! check). Under an injected allocation failure (an `nth` or `probability` run whose child
//! wrote its `injected` line: it refused an allocation, and wrote so before ONNX Runtime saw
//! the NULL) a crash, hang, leak or wrong output is a finding about ONNX Runtime and does not
//! fail the command. The command fails ([`judge`]) on a broken keepalloc invariant (checked in
//! the child: one owner, exact accounting, nothing Scribble detects, the sessions allocated
//! through the owner); on any run that refused no allocation (`count`,
//! `refuse-registrations`, and an `nth` or `probability` plan that refused nothing) ending
//! other than `ok`, a crash or hang included; on a model without its count run or without a control; on
//! a control not caught by its own signature (`owner-bypassed` alone, with the foreign
//! allocator called); and on any harness error (`setup-error`, a result line missing), which
//! is inconclusive, never a pass.
//!
//! Prints a table and writes JSON (`--json PATH`, default
//! `target/fault-test/onnxruntime.json`): runtime, model, plan, outcome, replay command.

mod child;
mod table;
#[cfg(test)]
mod tests;
mod verdict;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::options::Args;
use crate::util;
use child::{Run, build_child, run_child};
use table::print_table;
use verdict::judge;

/// The ONNX Runtime campaign's options.
struct Options {
    runs: u64,
    threads: usize,
    timeout: Duration,
    models: Vec<String>,
    json: PathBuf,
}

impl Options {
    /// The options from `fault-test`'s parser, with this campaign's defaults; an error for
    /// an option of the harness campaign.
    fn from_args(args: Args) -> Result<Options, String> {
        let refused = args.harness_only();
        if !refused.is_empty() {
            return Err(format!(
                "options of --runtime harness only: {}",
                refused.join(", ")
            ));
        }
        Ok(Options {
            runs: args.runs.unwrap_or(5) as u64,
            threads: args.threads.unwrap_or(4),
            timeout: Duration::from_secs(args.timeout as u64),
            models: args.models,
            json: args
                .json
                .unwrap_or_else(|| util::root().join("target/fault-test/onnxruntime.json")),
        })
    }
}

/// Runs the campaign.
pub fn run(args: Args) -> Result<(), String> {
    let opts = Options::from_args(args)?;
    // The runtimes: downloaded (or found complete) first; a failure is an error.
    let manifest = crate::runtimes::manifest()?;
    let ort = PathBuf::from(crate::runtimes::onnxruntime_library(&manifest)?);
    let mut models: BTreeMap<String, PathBuf> = BTreeMap::new();
    if let Some(m) = manifest["onnxruntime"]["models"].as_object() {
        for (name, p) in m {
            models.insert(name.clone(), PathBuf::from(p.as_str().unwrap_or_default()));
        }
    }
    let generated = util::root().join("runtimes/onnxruntime/models");
    for e in std::fs::read_dir(&generated)
        .map_err(|e| format!("cannot list {}: {e}", generated.display()))?
        .flatten()
    {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "onnx") {
            let name = p
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            models.insert(name, p);
        }
    }
    if !opts.models.is_empty() {
        models.retain(|name, _| opts.models.contains(name));
        if models.is_empty() {
            return Err(format!("no model named {:?}", opts.models));
        }
    }

    let child = build_child()?;
    let mut runs: Vec<Run> = Vec::new();
    let started = Instant::now();
    for (name, path) in &models {
        let run = |plan: &str, threads: usize, control: bool, refusals: u32| {
            run_child(
                &child,
                &ort,
                name,
                path,
                plan,
                threads,
                control,
                refusals,
                opts.timeout,
            )
        };
        let count = run("never", 1, false, 0);
        let sites = count.figures["allocation_calls"].as_u64();
        let count_ok = count.outcome == "ok";
        runs.push(Run {
            plan: "count".into(),
            ..count
        });
        // Without a count there are no sites to fail one by one; every other plan still
        // runs (the control above all), and the failed count run fails the campaign.
        let sites = match sites.filter(|_| count_ok) {
            Some(sites) => {
                eprintln!("fault-test: {name}: {sites} allocation sites");
                sites
            }
            None => {
                eprintln!(
                    "fault-test: {name}: the count run did not succeed; no nth plans (the \
                     campaign fails)"
                );
                0
            }
        };
        for k in 1..=sites {
            runs.push(run(&format!("nth:{k}"), 1, false, 0));
        }
        for p in ["0.05", "0.25"] {
            for seed in 1..=opts.runs {
                let plan = format!("probability:{p}@{seed}");
                runs.push(run(&plan, opts.threads, false, 0));
            }
        }
        runs.push(run("never", opts.threads, false, 3));
        runs.push(run("never", 1, true, 0));
    }
    let elapsed = started.elapsed();

    print_table(&runs);
    let names: Vec<String> = models.keys().cloned().collect();
    let verdict = judge(&names, &runs);
    if !verdict.findings.is_empty() {
        println!("\nfindings about ONNX Runtime (replay each in a fresh process):");
        for &i in &verdict.findings {
            let r = &runs[i];
            println!(
                "  {:<24} {:<20} {:<13} stage {:<9} {}\n      {}",
                r.model, r.plan, r.outcome, r.stage, r.detail, r.replay
            );
        }
    }
    if let Some(dir) = opts.json.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(&runs).map_err(|e| e.to_string())?;
    std::fs::write(&opts.json, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", opts.json.display()))?;
    println!(
        "\n{} runs in {:.1} s; JSON: {}",
        runs.len(),
        elapsed.as_secs_f64(),
        opts.json.display()
    );
    println!("{}", verdict.summary());
    if verdict.passed() {
        Ok(())
    } else {
        Err(format!(
            "ONNX Runtime campaign failed:\n{}",
            verdict.problems().join("\n")
        ))
    }
}
