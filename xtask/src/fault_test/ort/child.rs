//! One run of `keepalloc-ort-child`: building it, running it in a fresh process with a
//! deadline, and reading its outcome ([`Run`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use crate::process;
use crate::util;

/// One run, as written to the JSON file.
#[derive(Serialize, Clone)]
pub(super) struct Run {
    pub(super) runtime: &'static str,
    pub(super) model: String,
    pub(super) plan: String,
    pub(super) threads: usize,
    pub(super) control: bool,
    /// Whether an allocation was refused: the child's `injected` line ([`injected`]). The
    /// `count`, `refuse-registrations` and control runs never refuse one, and an `nth` or
    /// `probability` run whose plan refused nothing ran ONNX Runtime untouched: a crash
    /// there counts against keepalloc, not as a finding about ONNX Runtime.
    pub(super) faults_injected: bool,
    pub(super) outcome: String,
    /// With `keepalloc-violation`: the kind of each check the child found broken.
    pub(super) violations: Vec<String>,
    pub(super) detail: String,
    /// The last stage the child reported (where a crash or hang happened).
    pub(super) stage: String,
    /// What the child measured (allocation calls, refusals, live blocks after...).
    pub(super) figures: serde_json::Value,
    pub(super) replay: String,
}

/// Builds `keepalloc-ort-child` (release) and returns its path.
pub(super) fn build_child() -> Result<PathBuf, String> {
    eprintln!("fault-test: building keepalloc-ort-child (release)");
    let output = util::cargo()
        .args([
            "build",
            "--release",
            "-p",
            "keepalloc-fault-inject",
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
pub(super) fn run_child(
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
    let ended = match process::run_captured(cmd, timeout) {
        Ok(ended) => ended,
        Err(e) => {
            run.outcome = "setup-error".into();
            run.detail = format!("cannot start the child: {e}");
            return run;
        }
    };
    let out = ended.stdout;
    let status = (!ended.timed_out).then_some(ended.status);
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
            let signal = process::signal_of(&status).unwrap_or(0);
            run.outcome = "crash".into();
            run.detail = format!(
                "killed by signal {signal} ({})",
                process::signal_name(signal)
            );
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
pub(super) fn injected(stdout: &str, result: Option<&serde_json::Value>) -> Option<bool> {
    let marked = stdout.lines().any(|l| l == "injected");
    match result.and_then(|v| v["refused"].as_u64()) {
        Some(refused) if (refused > 0) != marked => None,
        _ => Some(marked),
    }
}
