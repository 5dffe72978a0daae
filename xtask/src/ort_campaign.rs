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

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::util;

const USAGE: &str = "\
usage: cargo xtask fault-test --runtime onnxruntime [options]
  --runs N       seeds per probability plan (default 5)
  --threads N    threads (sessions at once) in the probability runs (default 4)
  --timeout S    seconds before a run is a hang (default 60)
  --model NAME   only this model (repeatable)
  --json PATH    where to write the runs (default target/fault-test/onnxruntime.json)
";

struct Options {
    runs: u64,
    threads: usize,
    timeout: Duration,
    models: Vec<String>,
    json: PathBuf,
}

fn parse(args: &[String]) -> Result<Option<Options>, String> {
    let mut o = Options {
        runs: 5,
        threads: 4,
        timeout: Duration::from_secs(60),
        models: Vec::new(),
        json: util::root().join("target/fault-test/onnxruntime.json"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        let number = |v: &String| {
            v.parse::<u64>()
                .map_err(|_| format!("{a}: not a number: {v}"))
        };
        match a.as_str() {
            "--runtime" => {
                let v = value()?;
                if v != "onnxruntime" {
                    return Err(format!("unknown runtime `{v}` (known: onnxruntime)"));
                }
            }
            "--runs" => o.runs = number(value()?)?,
            "--threads" => o.threads = number(value()?)?.max(1) as usize,
            "--timeout" => o.timeout = Duration::from_secs(number(value()?)?.max(1)),
            "--model" => o.models.push(value()?.clone()),
            "--json" => o.json = PathBuf::from(value()?),
            "--help" | "-h" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    Ok(Some(o))
}

/// The kind the child gives its check "sessions ran but never allocated through the owner"
/// (`runtimes/ort-fault/src/main.rs`): the negative control's signature, the only way a
/// control run counts as caught.
const OWNER_BYPASSED: &str = "owner-bypassed";

/// One run, as written to the JSON file.
#[derive(Serialize, Clone)]
struct Run {
    runtime: &'static str,
    model: String,
    plan: String,
    threads: usize,
    control: bool,
    /// Whether an allocation was refused: the child's `injected` line ([`injected`]). The
    /// `count`, `refuse-registrations` and control runs never refuse one, and an `nth` or
    /// `probability` run whose plan refused nothing ran ONNX Runtime untouched: a crash
    /// there counts against keepalloc, not as a finding about ONNX Runtime.
    faults_injected: bool,
    outcome: String,
    /// With `keepalloc-violation`: the kind of each check the child found broken.
    violations: Vec<String>,
    detail: String,
    /// The last stage the child reported (where a crash or hang happened).
    stage: String,
    /// What the child measured (allocation calls, refusals, live blocks after...).
    figures: serde_json::Value,
    replay: String,
}

/// Runs the campaign.
pub fn run(args: &[String]) -> Result<(), String> {
    let Some(opts) = parse(args)? else {
        return Ok(());
    };
    // The runtimes: downloaded (or found complete) first; a failure is an error.
    crate::runtimes::run(&[])?;
    let manifest_path = util::root().join("target/runtimes/runtimes.json");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&manifest_path)
            .map_err(|e| format!("cannot read {}: {e}", manifest_path.display()))?,
    )
    .map_err(|e| e.to_string())?;
    let ort = PathBuf::from(
        manifest["onnxruntime"]["library"]
            .as_str()
            .ok_or("runtimes.json names no ONNX Runtime library")?,
    );
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
        let count = run_child(&child, &ort, name, path, "never", 1, false, 0, opts.timeout);
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
            runs.push(run_child(
                &child,
                &ort,
                name,
                path,
                &format!("nth:{k}"),
                1,
                false,
                0,
                opts.timeout,
            ));
        }
        for p in ["0.05", "0.25"] {
            for seed in 1..=opts.runs {
                let plan = format!("probability:{p}@{seed}");
                runs.push(run_child(
                    &child,
                    &ort,
                    name,
                    path,
                    &plan,
                    opts.threads,
                    false,
                    0,
                    opts.timeout,
                ));
            }
        }
        runs.push(run_child(
            &child,
            &ort,
            name,
            path,
            "never",
            opts.threads,
            false,
            3,
            opts.timeout,
        ));
        runs.push(run_child(
            &child,
            &ort,
            name,
            path,
            "never",
            1,
            true,
            0,
            opts.timeout,
        ));
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

/// What the runs prove, decided from their records alone.
#[derive(Debug, Default)]
struct Verdict {
    /// Counted against keepalloc: a broken invariant, a run with no injected fault that did
    /// not end `ok`, a control that ran clean (keepalloc's checks missed the bypass).
    failures: Vec<String>,
    /// Neither a pass nor a catch: a harness error, a missing run, a control that ended other
    /// than by its signature.
    inconclusive: Vec<String>,
    /// ONNX Runtime's behaviour under an injected allocation failure (indices into the runs).
    findings: Vec<usize>,
    /// Runs that are not controls, and those of them that injected no fault.
    checked: usize,
    fault_free: usize,
    controls: usize,
    caught: usize,
}

impl Verdict {
    fn passed(&self) -> bool {
        self.failures.is_empty() && self.inconclusive.is_empty()
    }

    fn problems(&self) -> Vec<String> {
        let failures = self
            .failures
            .iter()
            .map(|p| format!("against keepalloc: {p}"));
        let inconclusive = self
            .inconclusive
            .iter()
            .map(|p| format!("inconclusive: {p}"));
        failures.chain(inconclusive).collect()
    }

    fn summary(&self) -> String {
        format!(
            "keepalloc: {} failures in {} runs ({} of them without an injected fault), {} \
             inconclusive; the control was caught by its signature ({OWNER_BYPASSED}) in {} \
             of {} runs",
            self.failures.len(),
            self.checked,
            self.fault_free,
            self.inconclusive.len(),
            self.caught,
            self.controls
        )
    }
}

/// ONNX Runtime's answers to an injected allocation failure that do not fail the campaign.
const ORT_FINDINGS: [&str; 4] = ["crash", "hang", "wrong-output", "leak"];

/// Decides the campaign over `models` from the runs.
///
/// - A run that injects no allocation fault (`count`, `refuse-registrations`) must end `ok`:
///   a crash, hang, wrong output, leak, clean error or broken invariant there counts against
///   keepalloc, since nothing was done to ONNX Runtime but to run it on the owner.
/// - A run that does inject faults (`nth`, `probability`) passes with `ok` or `clean-error`,
///   fails with `keepalloc-violation`, and a crash, hang, wrong output or leak is a finding
///   about ONNX Runtime (docs/findings-onnxruntime.md).
/// - Every model needs its `count` run (ok, with its allocation sites) and at least one
///   control; a control counts as caught only by its own signature: `keepalloc-violation`
///   with `owner-bypassed` as the only broken check, and the foreign allocator (the witness
///   outside keepalloc's counters) called. A control that ran clean is a miss; one that ended
///   in anything else is inconclusive.
/// - Any other outcome (`setup-error`, `unknown`, `usage`, none) is inconclusive.
fn judge(models: &[String], runs: &[Run]) -> Verdict {
    let mut v = Verdict::default();
    let what = |r: &Run| {
        let violations = if r.violations.is_empty() {
            String::new()
        } else {
            format!(" {:?}", r.violations)
        };
        format!(
            "{} {}: {}{violations} ({})\n  {}",
            r.model, r.plan, r.outcome, r.detail, r.replay
        )
    };
    for (i, r) in runs.iter().enumerate() {
        let known = ["ok", "clean-error", "keepalloc-violation"]
            .into_iter()
            .chain(ORT_FINDINGS)
            .any(|o| o == r.outcome);
        if r.control {
            v.controls += 1;
            let witnessed = r.figures["foreign_allocator_calls"]
                .as_u64()
                .is_some_and(|n| n > 0);
            if r.outcome == "keepalloc-violation" && r.violations == [OWNER_BYPASSED] && witnessed {
                v.caught += 1;
            } else if r.outcome == "ok" {
                v.failures
                    .push(format!("the control was missed: {}", what(r)));
            } else {
                v.inconclusive.push(format!(
                    "the control ended other than by its signature: {}",
                    what(r)
                ));
            }
            continue;
        }
        v.checked += 1;
        if !known {
            v.inconclusive.push(what(r));
        } else if !r.faults_injected {
            v.fault_free += 1;
            if r.outcome != "ok" {
                v.failures
                    .push(format!("with no fault injected: {}", what(r)));
            }
        } else if r.outcome == "keepalloc-violation" {
            v.failures.push(what(r));
        } else if ORT_FINDINGS.contains(&r.outcome.as_str()) {
            v.findings.push(i);
        }
    }
    for model in models {
        let of_model = |r: &&Run| r.model == *model;
        match runs.iter().filter(of_model).find(|r| r.plan == "count") {
            None => v.inconclusive.push(format!("{model}: no count run")),
            Some(r) if r.outcome == "ok" => {
                if r.figures["allocation_calls"].as_u64().unwrap_or(0) == 0 {
                    v.inconclusive.push(format!(
                        "{model}: the count run measured no allocation site"
                    ));
                }
            }
            // Judged above; its nth plans were not run.
            Some(_) => {}
        }
        if !runs.iter().filter(of_model).any(|r| r.control) {
            v.inconclusive.push(format!(
                "{model}: no control run (nothing shows the checks can fail)"
            ));
        }
    }
    v
}

/// Builds `keepalloc-ort-child` (release) and returns its path.
fn build_child() -> Result<PathBuf, String> {
    eprintln!("fault-test: building keepalloc-ort-child (release)");
    let output = util::cargo()
        .args([
            "build",
            "--release",
            "-p",
            "keepalloc-ort-fault",
            "--bin",
            "keepalloc-ort-child",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err("building keepalloc-ort-child failed".into());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .find(|p| p.file_name().is_some_and(|n| n == "keepalloc-ort-child"))
        .ok_or_else(|| "cargo built no keepalloc-ort-child executable".into())
}

#[allow(clippy::too_many_arguments)]
fn run_child(
    child: &Path,
    ort: &Path,
    model: &str,
    path: &Path,
    plan: &str,
    threads: usize,
    control: bool,
    refusals: u32,
    timeout: Duration,
) -> Run {
    let mut cmd = Command::new(child);
    cmd.arg("--ort").arg(ort).arg("--model").arg(path).args([
        "--plan",
        plan,
        "--threads",
        &threads.to_string(),
    ]);
    if control {
        cmd.args(["--control", "foreign-allocator"]);
    }
    if refusals > 0 {
        cmd.args(["--refuse-registrations", &refusals.to_string()]);
    }
    let replay = format!(
        "{} --ort {} --model {} --plan {plan} --threads {threads}{}{}",
        child.display(),
        ort.display(),
        path.display(),
        if control {
            " --control foreign-allocator"
        } else {
            ""
        },
        if refusals > 0 {
            format!(" --refuse-registrations {refusals}")
        } else {
            String::new()
        }
    );
    let mut run = Run {
        runtime: "onnxruntime",
        model: model.to_owned(),
        plan: if refusals > 0 {
            format!("refuse-registrations:{refusals}")
        } else {
            plan.to_owned()
        },
        threads,
        control,
        faults_injected: false,
        outcome: String::new(),
        violations: Vec::new(),
        detail: String::new(),
        stage: String::new(),
        figures: serde_json::Value::Null,
        replay,
    };
    let spawned = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn();
    let mut proc = match spawned {
        Ok(p) => p,
        Err(e) => {
            run.outcome = "setup-error".into();
            run.detail = format!("cannot start the child: {e}");
            return run;
        }
    };
    let deadline = Instant::now() + timeout;
    let status = loop {
        match proc.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                // Our own child, by its id.
                let _ = proc.kill();
                let _ = proc.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = proc.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    run.stage = out
        .lines()
        .filter_map(|l| l.strip_prefix("stage "))
        .next_back()
        .unwrap_or("")
        .to_owned();
    let result: Option<serde_json::Value> = out
        .lines()
        .next_back()
        .and_then(|l| serde_json::from_str(l).ok());
    let injected = injected(&out, result.as_ref());
    run.faults_injected = injected == Some(true);
    match (status, result) {
        _ if injected.is_none() => {
            run.outcome = "setup-error".into();
            run.detail = "the child's `injected` line and its `refused` count disagree".into();
        }
        (None, _) => {
            run.outcome = "hang".into();
            run.detail = format!("no exit after {} s", timeout.as_secs());
        }
        (Some(status), _) if status.code().is_none() => {
            use std::os::unix::process::ExitStatusExt;
            let signal = status.signal().unwrap_or(0);
            run.outcome = "crash".into();
            run.detail = format!("killed by signal {signal} ({})", signal_name(signal));
        }
        (Some(_), Some(v)) => {
            run.outcome = v["outcome"].as_str().unwrap_or("unknown").to_owned();
            run.detail = v["detail"].as_str().unwrap_or("").to_owned();
            run.violations = v["violations"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|k| k.as_str().unwrap_or("?").to_owned())
                        .collect()
                })
                .unwrap_or_default();
            run.figures = v;
        }
        (Some(status), None) => {
            run.outcome = "unknown".into();
            run.detail = format!("exit {status} without a result line");
        }
    }
    run
}

/// Whether the child refused an allocation, from its stdout: the `injected` line, which it
/// writes during its first refusal, before ONNX Runtime sees the NULL, so a run that crashed
/// after a refusal still shows it. With a result line, its `refused` count must agree; `None`
/// when they do not (a broken harness, inconclusive).
fn injected(stdout: &str, result: Option<&serde_json::Value>) -> Option<bool> {
    let marked = stdout.lines().any(|l| l == "injected");
    match result.and_then(|v| v["refused"].as_u64()) {
        Some(refused) if (refused > 0) != marked => None,
        _ => Some(marked),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        _ => "signal",
    }
}

const OUTCOMES: [&str; 7] = [
    "ok",
    "clean-error",
    "crash",
    "hang",
    "wrong-output",
    "leak",
    "keepalloc-violation",
];

fn print_table(runs: &[Run]) {
    let kind = |r: &Run| -> String {
        if r.control {
            "control".into()
        } else if r.plan.starts_with("nth:") {
            "nth:each".into()
        } else if let Some(rest) = r.plan.strip_prefix("probability:") {
            format!("p={}", rest.split('@').next().unwrap_or(""))
        } else if let Some(k) = r.plan.strip_prefix("refuse-registrations:") {
            format!("refuse:{k}")
        } else {
            r.plan.clone()
        }
    };
    let mut rows: BTreeMap<(String, String), [usize; 8]> = BTreeMap::new();
    for r in runs {
        let row = rows.entry((r.model.clone(), kind(r))).or_default();
        let i = OUTCOMES.iter().position(|o| *o == r.outcome).unwrap_or(7);
        row[i] += 1;
    }
    println!(
        "\n{:<24} {:<9} {:>4} {:>4} {:>11} {:>5} {:>4} {:>12} {:>4} {:>9} {:>5}",
        "model",
        "plan",
        "runs",
        "ok",
        "clean-error",
        "crash",
        "hang",
        "wrong-output",
        "leak",
        "keepalloc",
        "other"
    );
    for ((model, plan), c) in &rows {
        println!(
            "{:<24} {:<9} {:>4} {:>4} {:>11} {:>5} {:>4} {:>12} {:>4} {:>9} {:>5}",
            model,
            plan,
            c.iter().sum::<usize>(),
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            c[7]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODELS: [&str; 2] = ["a", "b"];

    /// A run; `nth` and `probability` plans refused an allocation.
    fn run(model: &str, plan: &str, outcome: &str) -> Run {
        let control = plan == "control";
        let faults_injected = plan.starts_with("nth:") || plan.starts_with("probability:");
        Run {
            runtime: "onnxruntime",
            model: model.into(),
            plan: if control { "never".into() } else { plan.into() },
            threads: 1,
            control,
            faults_injected,
            outcome: outcome.into(),
            violations: Vec::new(),
            detail: String::new(),
            stage: String::new(),
            figures: if plan == "count" && outcome == "ok" {
                serde_json::json!({ "allocation_calls": 2 })
            } else {
                serde_json::Value::Null
            },
            replay: String::new(),
        }
    }

    /// The control caught by its own signature: the bypass check alone, and the foreign
    /// allocator did receive the sessions' calls.
    fn caught_control(model: &str) -> Run {
        Run {
            violations: vec![OWNER_BYPASSED.into()],
            figures: serde_json::json!({ "foreign_allocator_calls": 2 }),
            ..run(model, "control", "keepalloc-violation")
        }
    }

    /// A full, passing campaign for one model.
    fn model_runs(model: &str) -> Vec<Run> {
        vec![
            run(model, "count", "ok"),
            run(model, "nth:1", "clean-error"),
            run(model, "nth:2", "crash"),
            run(model, "probability:0.25@1", "clean-error"),
            run(model, "refuse-registrations:3", "ok"),
            caught_control(model),
        ]
    }

    fn models() -> Vec<String> {
        MODELS.iter().map(|m| m.to_string()).collect()
    }

    fn all_runs() -> Vec<Run> {
        MODELS.iter().flat_map(|m| model_runs(m)).collect()
    }

    #[test]
    fn a_full_campaign_passes_and_an_ort_crash_under_a_fault_is_a_finding() {
        let runs = all_runs();
        let v = judge(&models(), &runs);
        assert!(v.passed(), "{:?}", v.problems());
        assert_eq!((v.caught, v.controls), (2, 2));
        let crashes: Vec<&str> = v.findings.iter().map(|&i| runs[i].plan.as_str()).collect();
        assert_eq!(crashes, ["nth:2", "nth:2"]);
    }

    #[test]
    fn the_control_with_its_signature_is_caught() {
        let v = judge(&models()[..1], &model_runs("a"));
        assert!(v.passed(), "{:?}", v.problems());
        assert_eq!((v.caught, v.controls), (1, 1));
    }

    #[test]
    fn count_runs_that_all_crashed_fail_the_campaign() {
        // What the old loop produced when every count run crashed: the count runs alone.
        for outcome in ["crash", "hang"] {
            let runs: Vec<Run> = MODELS.iter().map(|m| run(m, "count", outcome)).collect();
            let v = judge(&models(), &runs);
            assert!(!v.passed(), "{outcome}: {}", v.summary());
            // Even with every other plan run, a crashed count run fails the campaign.
            let mut runs = all_runs();
            runs[0] = run("a", "count", outcome);
            assert!(!judge(&models(), &runs).passed(), "{outcome}");
        }
    }

    #[test]
    fn a_crash_or_hang_without_an_injected_fault_counts_against_keepalloc() {
        for outcome in ["crash", "hang", "wrong-output", "leak", "clean-error"] {
            let mut runs = all_runs();
            runs[4] = run("a", "refuse-registrations:3", outcome);
            let v = judge(&models(), &runs);
            assert!(!v.passed(), "{outcome}");
            assert!(
                v.findings.iter().all(|&i| i != 4),
                "{outcome} became an ORT finding"
            );
        }
    }

    #[test]
    fn a_crash_under_a_plan_that_refused_nothing_counts_against_keepalloc() {
        for outcome in ["crash", "hang", "wrong-output", "leak", "clean-error"] {
            let mut runs = all_runs();
            runs[3] = Run {
                faults_injected: false,
                ..run("a", "probability:0.25@1", outcome)
            };
            let v = judge(&models(), &runs);
            assert!(!v.passed(), "{outcome}");
            assert!(
                v.findings.iter().all(|&i| i != 3),
                "{outcome} became an ORT finding"
            );
        }
        // The same run with a refusal seen is ONNX Runtime's.
        let mut runs = all_runs();
        runs[3] = run("a", "probability:0.25@1", "crash");
        let v = judge(&models(), &runs);
        assert!(v.passed(), "{:?}", v.problems());
        assert!(v.findings.contains(&3));
    }

    #[test]
    fn a_refusal_is_read_from_the_childs_line_and_checked_against_its_count() {
        let stages = "stage load\nstage armed\n";
        let marked = "stage load\nstage armed\ninjected\nstage run\n";
        // A crash leaves no result line: the marker alone decides.
        assert_eq!(injected(stages, None), Some(false));
        assert_eq!(injected(marked, None), Some(true));
        let refused = |n: u64| serde_json::json!({ "refused": n });
        assert_eq!(injected(marked, Some(&refused(3))), Some(true));
        assert_eq!(injected(stages, Some(&refused(0))), Some(false));
        // The two witnesses disagree: neither a pass nor a finding.
        assert_eq!(injected(stages, Some(&refused(1))), None);
        assert_eq!(injected(marked, Some(&refused(0))), None);
        // Only a whole line counts.
        assert_eq!(injected("stage injected\n", None), Some(false));
    }

    #[test]
    fn zero_control_runs_fail_the_campaign() {
        let runs: Vec<Run> = all_runs().into_iter().filter(|r| !r.control).collect();
        assert!(!judge(&models(), &runs).passed());
        // One model's control is not another's.
        let runs: Vec<Run> = all_runs()
            .into_iter()
            .filter(|r| !(r.control && r.model == "b"))
            .collect();
        assert!(!judge(&models(), &runs).passed());
    }

    #[test]
    fn a_control_ending_in_another_failure_is_not_caught() {
        let others = [
            // keepalloc's own registration failed: exit 20, but not the control's signature.
            Run {
                violations: vec!["registration-failed".into()],
                ..run("a", "control", "keepalloc-violation")
            },
            // Scribble found something besides the bypass.
            Run {
                violations: vec![OWNER_BYPASSED.into(), "scribble".into()],
                figures: serde_json::json!({ "foreign_allocator_calls": 2 }),
                ..run("a", "control", "keepalloc-violation")
            },
            // The signature without its witness: the other allocator was never called.
            Run {
                violations: vec![OWNER_BYPASSED.into()],
                figures: serde_json::json!({ "foreign_allocator_calls": 0 }),
                ..run("a", "control", "keepalloc-violation")
            },
            // An exit 20 from a child that names no check.
            run("a", "control", "keepalloc-violation"),
            run("a", "control", "setup-error"),
            run("a", "control", "crash"),
            run("a", "control", "hang"),
            run("a", "control", "clean-error"),
            run("a", "control", "ok"),
        ];
        for other in others {
            let mut runs = all_runs();
            runs[5] = other.clone();
            let v = judge(&models(), &runs);
            assert!(
                !v.passed(),
                "{} {:?} counted as caught",
                other.outcome,
                other.violations
            );
            assert_eq!((v.caught, v.controls), (1, 2), "{}", other.outcome);
        }
    }

    #[test]
    fn harness_errors_are_inconclusive_not_findings() {
        for outcome in ["setup-error", "unknown", "usage", ""] {
            let mut runs = all_runs();
            runs[2] = run("a", "nth:2", outcome);
            let v = judge(&models(), &runs);
            assert!(!v.passed(), "{outcome:?}");
            assert!(v.findings.is_empty() || v.findings == [8], "{outcome:?}");
        }
    }
}
