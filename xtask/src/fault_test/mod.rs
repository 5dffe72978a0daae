//! `cargo xtask fault-test`: every fault scenario against keepalloc's provider and against
//! each negative control that applies, N fresh processes a row, then a strict verdict.
//!
//! The harness (`keepalloc-harness`, built in release with feature `controls`) is the one
//! source of truth: `--list` says which scenarios, variants and windows exist, which
//! (scenario, variant) pairs apply, what each control's signature is, which cell mutants
//! exist, and what its exit codes mean ([`catalog`]). This side plans the rows ([`plan`]),
//! runs each in fresh processes on a pool of workers ([`schedule`]), reads how each run
//! ended ([`classify`](mod@classify)), counts it by the verdict rules ([`verdict`]) and reports
//! ([`output`], with the Wilson intervals of [`stats`]).
//!
//! It passes only when keepalloc failed no run in any window AND every control with its
//! race window held was caught by its own signature in at least 95% of its runs.
//! `--cell-mutant NAME` turns the proof around: the provider's cell is broken on purpose,
//! and the command passes only when keepalloc's rows catch it.

mod catalog;
mod classify;
mod harness;
mod options;
pub mod ort;
mod output;
mod plan;
mod schedule;
mod stats;
#[cfg(all(test, unix))]
mod tests;
mod verdict;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

pub use classify::ASAN_EXIT;
pub use harness::{HARNESS_BUILD_ARGS, executable_from};
pub use options::{Args, LONG_ABOUT, Options, Runtime, harness_options};

use catalog::Catalog;
use classify::{Expected, classify};
use options::CellMutantChoice;
use output::Report;
use verdict::{Judge, Row};

/// Runs `cargo xtask fault-test`.
pub fn run(args: Args) -> Result<(), String> {
    if args.runtime == Runtime::Onnxruntime {
        return ort::run(args);
    }
    let o = harness_options(args, 100)?;
    match (&o.cell_mutant, &o.harness) {
        (Some(CellMutantChoice::All), Some(_)) => {
            Err("--cell-mutant all builds one harness per mutant; it cannot take --harness".into())
        }
        (Some(choice), None) => cell_mutants(choice, &o),
        (_, Some(harness)) => campaign(harness, &o),
        (None, None) => campaign(&harness::build(None)?, &o),
    }
}

/// Runs the campaign with `harness`, prints the table and the verdict, and writes the
/// JSON report when asked. `Err` when the campaign failed or could not run.
pub fn campaign(harness: &Path, o: &Options) -> Result<(), String> {
    let (rows, report) = execute(harness, o)?;
    if let Some(path) = &o.json {
        output::write_json(path, &report)?;
    }
    if report.passed {
        println!("fault-test: PASSED — {}", success_line(&rows, o));
        Ok(())
    } else if !rows.iter().any(|r| r.judged()) {
        // A measurement (e.g. the bare-window rates of the controls), not a verdict: say so
        // plainly instead of "0 of 0 rows failed".
        println!(
            "fault-test: MEASURED ONLY — none of the {} selected rows is judged (keepalloc \
             rows and controls with the window held are); the rates above are the result",
            rows.len()
        );
        Ok(())
    } else {
        let judged = rows.iter().filter(|r| r.judged()).count();
        let failed = rows.iter().filter(|r| r.judged() && !r.passed()).count();
        Err(format!(
            "fault-test FAILED: {failed} of {judged} judged rows did not meet their rule \
             (see the table)"
        ))
    }
}

fn success_line(rows: &[Row], o: &Options) -> String {
    if let Some(CellMutantChoice::Named(name)) = &o.cell_mutant {
        return mutant_line(name, rows);
    }
    let keepalloc = rows.iter().filter(|r| !r.judge.is_control()).count();
    let controls = rows
        .iter()
        .filter(|r| r.judge.is_control() && r.judged())
        .count();
    let unjudged = rows.iter().any(|r| !r.judged());
    format!(
        "{}; {}{}",
        match keepalloc {
            0 => "no keepalloc row ran".to_string(),
            1 => "keepalloc failed none of its runs".to_string(),
            n => format!("keepalloc failed none of its runs in {n} rows"),
        },
        match controls {
            0 => "no control row was judged (controls count only with the window held)".into(),
            n => format!(
                "each of the {n} control rows with the window held was caught by its \
                 signature in >= 95% of its runs"
            ),
        },
        if unjudged && controls > 0 {
            " (other windows reported, not judged)"
        } else {
            ""
        }
    )
}

/// Refuses a harness whose cell mutant is not the one asked for.
fn check_mutant(catalog: &Catalog, harness: &Path, o: &Options) -> Result<(), String> {
    let built = catalog.cell_mutant.as_ref().map(|m| m.name.as_str());
    match (built, &o.cell_mutant) {
        (None, None) => Ok(()),
        (Some(m), Some(CellMutantChoice::Named(n))) if m == n => Ok(()),
        (Some(m), None) => Err(format!(
            "{} was built with cell mutant `{m}`: run it with --cell-mutant {m}, or rebuild it \
             without the mutant",
            harness.display()
        )),
        (_, Some(CellMutantChoice::Named(n))) => Err(format!(
            "{} was not built with cell mutant `{n}` (its `--list` says {}): a stale or plain \
             build; refusing to judge it",
            harness.display(),
            built.map_or("none".into(), |m| format!("`{m}`"))
        )),
        (_, Some(CellMutantChoice::All)) => {
            Err("--cell-mutant all runs one build per mutant, not one harness".into())
        }
    }
}

/// Plans, runs and counts the campaign; prints the table and replays. Returns the rows
/// and the report (whose `passed` is the verdict).
fn execute(harness: &Path, o: &Options) -> Result<(Vec<Row>, Report), String> {
    // Absolute, so that the replay commands work from anywhere.
    let harness = &std::fs::canonicalize(harness)
        .map_err(|e| format!("no harness at {}: {e}", harness.display()))?;
    let catalog = catalog::read(harness, &o.env, o.timeout)?;
    check_mutant(&catalog, harness, o)?;
    let mut rows = plan::plan(&catalog, o)?;
    let mut windows: Vec<String> = Vec::new();
    for r in &rows {
        if !windows.contains(&r.window) {
            windows.push(r.window.clone());
        }
    }
    let total = rows.len() * o.runs;
    let mut label: Vec<String> = o.label.iter().cloned().collect();
    if let Some(m) = &catalog.cell_mutant {
        label.push(format!("cell mutant {}", m.name));
    }
    eprintln!(
        "fault-test{}: {} rows x {} runs = {total} fresh processes, {} threads, windows {}, \
         seed {} (replay with --seed {}), {} jobs, timeout {}s",
        if label.is_empty() {
            String::new()
        } else {
            format!(" [{}]", label.join(", "))
        },
        rows.len(),
        o.runs,
        o.threads,
        windows.join(","),
        o.seed,
        o.seed,
        o.jobs,
        o.timeout.as_secs()
    );

    // Interleave the rows (task t is run t / rows of row t % rows) so that a slow row does
    // not sit at the end.
    let row_count = rows.len();
    let seed_of = |task: usize| o.seed.wrapping_add((task / row_count) as u64);
    let planned: &[Row] = &rows;
    let command = |task: usize| {
        let row = &planned[task % row_count];
        let mut cmd = Command::new(harness);
        cmd.args(["--scenario", &row.scenario, "--variant", &row.variant])
            .args(["--seed", &seed_of(task).to_string()])
            .args(["--threads", &o.threads.to_string()])
            .args(["--window", &row.window])
            .envs(o.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    };
    let judge = |task: usize, end: crate::process::RunEnd| {
        let row = &planned[task % row_count];
        let expected = Expected {
            scenario: &row.scenario,
            variant: &row.variant,
            seed: seed_of(task),
            threads: o.threads,
            window: &row.window,
        };
        let outcome = classify(&end, &expected, |c| catalog.exit_name(c));
        let first_line: String = end
            .stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing on stderr)")
            .chars()
            .take(200)
            .collect();
        (outcome, first_line)
    };
    let started = Instant::now();
    let results = schedule::run_all(total, o.jobs, o.timeout, command, judge)?;
    let elapsed = started.elapsed();
    for (task, (outcome, first_line)) in results.iter().enumerate() {
        rows[task % row_count].record(seed_of(task), outcome, first_line);
    }

    let title = (!label.is_empty()).then(|| format!("fault-test [{}]", label.join(", ")));
    output::print_table(title.as_deref(), &rows, elapsed, total);
    output::print_replays(&rows, harness, &o.env, o.threads);
    let report = Report {
        passed: verdict::all_passed(&rows),
        label: o.label.clone(),
        cell_mutant: catalog.cell_mutant.as_ref().map(|m| m.name.clone()),
        harness: harness.display().to_string(),
        seed: o.seed,
        runs: o.runs,
        threads: o.threads,
        windows,
        jobs: o.jobs,
        timeout_seconds: o.timeout.as_secs(),
        elapsed_seconds: elapsed.as_secs_f64(),
        rows: rows
            .iter()
            .map(|r| output::row_report(r, harness, &o.env, o.threads))
            .collect(),
    };
    Ok((rows, report))
}

/// The verdict on one cell mutant.
#[derive(serde::Serialize)]
struct MutantVerdict {
    name: String,
    caught: bool,
    /// Why it could not be checked (a build or a campaign that did not run).
    error: Option<String>,
    report: Option<Report>,
    /// The one-line verdict.
    #[serde(skip)]
    line: String,
}

/// `--cell-mutant NAME|all`: builds the harness with each mutant and requires keepalloc's
/// rows to catch it.
fn cell_mutants(choice: &CellMutantChoice, o: &Options) -> Result<(), String> {
    let plain = harness::build(None)?;
    let catalog = catalog::read(&plain, &o.env, o.timeout)?;
    let listed: Vec<&str> = catalog
        .cell_mutants
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let names: Vec<String> = match choice {
        CellMutantChoice::All if listed.is_empty() => {
            return Err("the harness lists no cell mutants".into());
        }
        CellMutantChoice::All => listed.iter().map(|s| s.to_string()).collect(),
        CellMutantChoice::Named(n) if listed.contains(&n.as_str()) => vec![n.clone()],
        CellMutantChoice::Named(n) => {
            return Err(format!(
                "--cell-mutant: the harness has no `{n}` (it has: {})",
                Catalog::names(listed)
            ));
        }
    };
    let mut verdicts = Vec::new();
    for name in &names {
        let mut mo = o.clone();
        mo.cell_mutant = Some(CellMutantChoice::Named(name.clone()));
        let ran = harness::build(Some(name)).and_then(|h| execute(&h, &mo));
        verdicts.push(match ran {
            Ok((rows, report)) => MutantVerdict {
                name: name.clone(),
                caught: report.passed,
                error: None,
                line: mutant_line(name, &rows),
                report: Some(report),
            },
            Err(e) => {
                eprintln!("fault-test: cell mutant `{name}` could not be checked: {e}");
                MutantVerdict {
                    name: name.clone(),
                    caught: false,
                    line: format!("cell mutant `{name}`: NOT CHECKED ({e})"),
                    error: Some(e),
                    report: None,
                }
            }
        });
    }
    if let Some(path) = &o.json {
        match (choice, verdicts.as_slice()) {
            (
                CellMutantChoice::Named(_),
                [
                    MutantVerdict {
                        report: Some(report),
                        ..
                    },
                ],
            ) => output::write_json(path, report)?,
            _ => output::write_json(
                path,
                &serde_json::json!({
                    "passed": verdicts.iter().all(|v| v.caught),
                    "cell_mutants": verdicts,
                }),
            )?,
        }
    }
    println!();
    for v in &verdicts {
        println!("{}", v.line);
    }
    let missed = verdicts.iter().filter(|v| !v.caught).count();
    if missed == 0 {
        println!(
            "fault-test: PASSED — every cell mutant checked ({}) was caught by its signature",
            names.join(", ")
        );
        Ok(())
    } else {
        Err(format!(
            "fault-test FAILED: {missed} of {} cell mutants not caught",
            verdicts.len()
        ))
    }
}

/// `cell mutant NAME: CAUGHT ...` or `... NOT CAUGHT ...`, one line, from the rows that
/// judge the mutant.
fn mutant_line(name: &str, rows: &[Row]) -> String {
    let judged: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            matches!(
                r.judge,
                Judge::Catch {
                    every_window: true,
                    ..
                }
            )
        })
        .collect();
    let weakest = judged
        .iter()
        .min_by(|a, b| {
            a.detection_rate()
                .value
                .total_cmp(&b.detection_rate().value)
        })
        .map_or("-".to_string(), |r| {
            format!(
                "{} in {}/{}/{}",
                r.detection_rate(),
                r.scenario,
                r.variant,
                r.window
            )
        });
    let signature = judged
        .first()
        .map_or(String::new(), |r| r.judge.signature().join(", "));
    let failed = judged.iter().filter(|r| !r.passed()).count();
    if failed == 0 && !judged.is_empty() {
        format!(
            "cell mutant `{name}`: CAUGHT by its signature ({signature}) in >= 95% of the runs \
             of all {} rows; weakest {weakest}",
            judged.len()
        )
    } else {
        format!(
            "cell mutant `{name}`: NOT CAUGHT: {failed} of {} rows caught it in < 95% of their \
             runs; weakest {weakest}",
            judged.len()
        )
    }
}
