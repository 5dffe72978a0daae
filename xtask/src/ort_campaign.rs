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
//! `--timeout`), `wrong-output`, `leak` or `keepalloc-violation`. A crash, hang, leak or wrong
//! output is a finding about ONNX Runtime and does not fail the command: the exit status is
//! decided by keepalloc's own invariants (checked in the child: one owner, exact accounting,
//! nothing Scribble detects) and by the control being caught.
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

/// One run, as written to the JSON file.
#[derive(Serialize, Clone)]
struct Run {
    runtime: &'static str,
    model: String,
    plan: String,
    threads: usize,
    control: bool,
    outcome: String,
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
        let Some(sites) = sites.filter(|_| count_ok) else {
            eprintln!("fault-test: {name}: the count run did not succeed; skipping its plans");
            continue;
        };
        eprintln!("fault-test: {name}: {sites} allocation sites");
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
    let findings: Vec<&Run> = runs
        .iter()
        .filter(|r| !r.control && !matches!(r.outcome.as_str(), "ok" | "clean-error"))
        .collect();
    if !findings.is_empty() {
        println!("\nfindings about ONNX Runtime (replay each in a fresh process):");
        for r in &findings {
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

    let keepalloc_failures: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            !r.control
                && matches!(
                    r.outcome.as_str(),
                    "keepalloc-violation" | "setup-error" | "unknown"
                )
        })
        .collect();
    let missed_controls: Vec<&Run> = runs
        .iter()
        .filter(|r| r.control && r.outcome != "keepalloc-violation")
        .collect();
    let mut problems = Vec::new();
    for r in &keepalloc_failures {
        problems.push(format!(
            "{} {}: {} ({})\n  {}",
            r.model, r.plan, r.outcome, r.detail, r.replay
        ));
    }
    for r in &missed_controls {
        problems.push(format!(
            "the control was not caught on {}: {} ({})\n  {}",
            r.model, r.outcome, r.detail, r.replay
        ));
    }
    if problems.is_empty() {
        println!(
            "keepalloc: 0 invariant violations in {} runs; the control was caught in {} of {} runs",
            runs.iter().filter(|r| !r.control).count(),
            runs.iter().filter(|r| r.control).count(),
            runs.iter().filter(|r| r.control).count()
        );
        Ok(())
    } else {
        Err(format!(
            "ONNX Runtime campaign failed:\n{}",
            problems.join("\n")
        ))
    }
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
        outcome: String::new(),
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
    match (status, result) {
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
            run.figures = v;
        }
        (Some(status), None) => {
            run.outcome = "unknown".into();
            run.detail = format!("exit {status} without a result line");
        }
    }
    run
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
