//! `cargo xtask tsan`: the provider's tests, the kernels pool's tests and the fault harness
//! under ThreadSanitizer, each row with the verdict its expectation gives.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::nightly::{Require, host_triple, nightly_available, nightly_cargo, probe};
use super::pool::{POOL_SLOT_WITNESS_TEST, POOL_WITNESS_TEST, pool_mutant_config};
use super::reports::{Report, Signature, parse_reports};
use crate::fault_test;
use crate::process;
use crate::util;

/// `cargo xtask tsan --help`.
pub const TSAN_ABOUT: &str = "\
ThreadSanitizer, with the nightly toolchain (`-Zsanitizer=thread -Zbuild-std --target
<host>`, release profile, target dir target/tsan; needs the rust-src component). Runs

  1. keepalloc-provider's tests (lib and integration tests; the loom models need
     --cfg loom and are not run), each test binary --test-runs times: must be clean;
  2. keepalloc-harness (feature `controls`), each run a fresh process, --runs a row:
     keepalloc on cold-start, retry-after-capture and retry-under-race, race windows
     held: every run must be clean (exit 0, no ThreadSanitizer report);
     the `racy` negative control on cold-start, window held: ThreadSanitizer must
     report every run. It sees the control's atomic store of the shared table's context
     racing with the library's plain copy of the table, and the freed owner as plain
     races on a heap block (the scribbling allocator's fill on free against reads
     through the dangling pointer; the block stays in quarantine and never reaches
     free(), so TSan never says heap-use-after-free).
  3. keepalloc-kernels' pool tests (tests/pool.rs, and the lib's pool:: tests), each
     --test-runs times: must be clean. They hand work to the pool's workers and read
     what the tasks wrote, operators' outputs included;
     the pool's negative control, keepalloc-kernels built alone with --cfg
     keepalloc_pool_mutant=\"done_relaxed\" (a worker counts its finished tasks with a
     relaxed add, so nothing orders its writes before the caller's reads; x86 passes
     every test anyway): what_tasks_write_is_the_callers_after_run, --runs times, must be
     reported every run with a data race between the task's store (task_writes) and the
     caller's read after run (caller_reads);
     the job slot's negative control, keepalloc-kernels built alone with --cfg
     keepalloc_pool_mutant=\"job_before_claim\" (a worker reads the job slot as soon as
     it sees a new job, before it claims a task):
     a_worker_that_claims_nothing_leaves_the_job_alone, --runs times, must be reported
     every run with a data race between run_ranges_with's write of the slot and worker's
     read of it (kernels/src/pool/run.rs, kernels/src/pool/worker.rs).

A control run counts as reported only when a report shows its signature: for `racy`, an
access in the controls' own code (fault-inject/src/controls/); for the done_relaxed mutant,
the task_writes / caller_reads race in kernels/tests/pool.rs; for the job_before_claim
mutant, run_ranges_with's write racing with worker's read in kernels/src/pool/. A run
that times out, or dies without a ThreadSanitizer report, or in which ThreadSanitizer
itself fails, or a control run reported only elsewhere, is inconclusive and makes the
command fail. Exit 0 only when
everything that must be clean is clean and every control is reported in every run.
TSAN_OPTIONS gets atexit_sleep_ms=0:halt_on_error=0:exitcode=66 (yours are appended), and
KEEPALLOC_TEST_DEADLOCK_SECS half of --timeout (the pool tests' watchdog: a hung test is
named on stderr and aborts, which is inconclusive too).
Logs of every run that was not clean: target/tsan/logs/.
";

/// Exit code ThreadSanitizer is told to use when it reported something.
pub(super) const TSAN_EXIT: i32 = 66;

/// `cargo xtask tsan` options.
#[derive(clap::Args, Debug)]
pub struct TsanArgs {
    /// Fresh processes per harness row and of each pool mutant.
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = positive::<usize>)]
    pub(super) runs: usize,
    /// Runs of each provider and kernels test binary.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = positive::<usize>)]
    pub(super) test_runs: usize,
    /// Base seed of the harness runs; run i uses N+i [default: from the clock].
    #[arg(long, value_name = "N")]
    pub(super) seed: Option<u64>,
    /// A process that takes longer is killed: inconclusive.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = positive::<u64>)]
    pub(super) timeout: u64,
    /// Fail instead of printing `skipped` when nightly or rust-src is missing or the host
    /// has no ThreadSanitizer (implied by CI=true); a failed build always fails.
    #[arg(long)]
    pub(super) require: bool,
}

/// A positive number of runs or seconds.
fn positive<N: std::str::FromStr + PartialOrd + Default>(v: &str) -> Result<N, String> {
    match v.parse::<N>() {
        Ok(n) if n > N::default() => Ok(n),
        _ => Err(format!("expected a positive integer, not `{v}`")),
    }
}

/// The options `tsan` runs with.
#[derive(Debug)]
pub(super) struct TsanOptions {
    pub(super) runs: usize,
    pub(super) test_runs: usize,
    pub(super) seed: u64,
    pub(super) timeout: Duration,
}

impl TsanOptions {
    pub(super) fn from_args(args: &TsanArgs) -> TsanOptions {
        TsanOptions {
            runs: args.runs,
            test_runs: args.test_runs,
            seed: args.seed.unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_secs() % 1_000_000)
                    .unwrap_or(1)
            }),
            timeout: Duration::from_secs(args.timeout),
        }
    }
}

/// What one row must show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// Every run exits 0 without a report.
    Clean,
    /// ThreadSanitizer reports every run, with a report of this signature.
    Reported(Signature),
}

/// How one process ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Exit 0, no report.
    Clean,
    /// ThreadSanitizer reported.
    Reported(Vec<Report>),
    /// A non-zero exit without a report (for the harness: it found something itself).
    Failed(String),
    /// Timed out, died from a signal without a report, or ThreadSanitizer itself failed.
    Inconclusive(String),
}

impl Outcome {
    pub(super) fn describe(&self) -> String {
        match self {
            Outcome::Clean => "clean".into(),
            Outcome::Reported(reports) => {
                let mut labels: Vec<String> = reports.iter().map(Report::label).collect();
                labels.dedup();
                format!("ThreadSanitizer reported: {}", labels.join("; "))
            }
            Outcome::Failed(why) => format!("failed without a report: {why}"),
            Outcome::Inconclusive(why) => format!("inconclusive: {why}"),
        }
    }
}

/// One line of the table.
pub(super) struct Row {
    pub(super) what: String,
    pub(super) expect: Expect,
    pub(super) program: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) cwd: PathBuf,
    pub(super) runs: usize,
    /// Whether run i appends `--seed <base+i>`.
    pub(super) seeded: bool,
    pub(super) outcomes: Vec<Outcome>,
    pub(super) elapsed: Duration,
}

impl Row {
    pub(super) fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|o| f(o)).count()
    }

    pub(super) fn clean(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Clean))
    }

    pub(super) fn reported(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Reported(_)))
    }

    /// Runs with a report of the row's signature (none for a row that must be clean).
    pub(super) fn reported_by_signature(&self) -> usize {
        let Expect::Reported(signature) = self.expect else {
            return 0;
        };
        self.count(|o| matches!(o, Outcome::Reported(r) if r.iter().any(|r| signature.matches(r))))
    }

    pub(super) fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    pub(super) fn inconclusive(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Inconclusive(_)))
    }

    /// Each report label, the runs that showed it, and its first report.
    pub(super) fn labels(&self) -> Vec<(String, usize, Report)> {
        let mut labels: Vec<(String, usize, Report)> = Vec::new();
        for o in &self.outcomes {
            let Outcome::Reported(reports) = o else {
                continue;
            };
            let mut seen: Vec<String> = Vec::new();
            for r in reports {
                let label = r.label();
                if seen.contains(&label) {
                    continue;
                }
                match labels.iter_mut().find(|(l, _, _)| *l == label) {
                    Some((_, n, _)) => *n += 1,
                    None => labels.push((label.clone(), 1, r.clone())),
                }
                seen.push(label);
            }
        }
        labels
    }

    /// `Ok(())`, `Err("FAIL")` or `Err("INCONCLUSIVE")`.
    pub(super) fn verdict(&self) -> Result<(), &'static str> {
        // A control reported only off its signature is no catch, nor a miss.
        let off_signature = matches!(self.expect, Expect::Reported(_))
            && self.reported() != self.reported_by_signature();
        if self.inconclusive() > 0 || off_signature {
            return Err("INCONCLUSIVE");
        }
        let runs = self.outcomes.len();
        let ok = match self.expect {
            Expect::Clean => self.clean() == runs,
            Expect::Reported(_) => self.reported_by_signature() == runs,
        };
        if ok { Ok(()) } else { Err("FAIL") }
    }
}

/// Classifies one finished process from its status, stdout and stderr.
pub(super) fn classify(
    status: Option<ExitStatus>,
    stdout: &str,
    stderr: &str,
    timeout: Duration,
    root: &str,
) -> Outcome {
    let reports = parse_reports(stderr, root);
    if !reports.is_empty() {
        return Outcome::Reported(reports);
    }
    let Some(status) = status else {
        return Outcome::Inconclusive(format!("timed out after {} s", timeout.as_secs()));
    };
    if let Some(line) = stderr.lines().find(|l| {
        l.contains("ThreadSanitizer")
            && (l.contains("FATAL") || l.contains("ERROR") || l.contains("CHECK failed"))
    }) {
        return Outcome::Inconclusive(format!("ThreadSanitizer failed: {}", line.trim()));
    }
    match status.code() {
        Some(0) => Outcome::Clean,
        Some(TSAN_EXIT) => {
            Outcome::Inconclusive(format!("exit {TSAN_EXIT} without a report on stderr"))
        }
        Some(code) => {
            let result = stdout
                .lines()
                .find(|l| l.starts_with("RESULT "))
                .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
                .unwrap_or("")
                .trim();
            Outcome::Failed(format!("exit {code}: {result}"))
        }
        None => Outcome::Inconclusive(format!("died without a report: {status}")),
    }
}

/// The test executables among the artifacts of a `cargo test --no-run
/// --message-format=json...`, as (target name, path).
pub(super) fn test_executables(mut cmd: Command) -> Result<Vec<(String, PathBuf)>, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("building the tests failed: {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let found: Vec<(String, PathBuf)> = text
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains("\"test\":true"))
        .filter_map(|l| {
            let exe = json_string(l, "executable")?;
            let name = json_string(&l[l.find("\"target\":")?..], "name")?;
            Some((name, PathBuf::from(exe)))
        })
        .collect();
    if found.is_empty() {
        Err("cargo built no test executable".into())
    } else {
        Ok(found)
    }
}

/// The string value of the first `"key":"..."` in `line` (cargo's JSON: paths escape only
/// `\\` and `\"`).
pub(super) fn json_string(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    None
}

/// The harness arguments that hold the race windows open: `--window held` once the harness
/// has `--window`, `--hold-window` before.
pub(super) fn held_window_args(harness: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(harness)
        .arg("--help")
        .env("TSAN_OPTIONS", "report_bugs=0")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {} --help: {e}", harness.display()))?;
    let help = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if help.contains("--window") {
        Ok(vec!["--window".into(), "held".into()])
    } else if help.contains("--hold-window") {
        Ok(vec!["--hold-window".into()])
    } else {
        Err(format!(
            "{} --help mentions neither --window nor --hold-window",
            harness.display()
        ))
    }
}

/// `cargo xtask tsan [options]`: see [`TSAN_ABOUT`].
pub fn tsan(args: TsanArgs) -> Result<(), String> {
    let require = Require::new(args.require);
    let options = TsanOptions::from_args(&args);
    if let Err(why) = nightly_available() {
        return require.skipped("tsan", &why);
    }
    let host = match host_triple() {
        Ok(h) => h,
        Err(why) => {
            return require.skipped("tsan", &format!("could not ask nightly rustc: {why}"));
        }
    };
    let supported = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]
        .contains(&host.as_str())
        || host.ends_with("-apple-darwin");
    if !supported {
        return require.skipped(
            "tsan",
            &format!("ThreadSanitizer is not supported on {host}"),
        );
    }
    let mut sysroot = Command::new("rustc");
    sysroot
        .args(["+nightly", "--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN");
    let rust_src = probe(sysroot)
        .map(|s| PathBuf::from(s.trim()).join("lib/rustlib/src/rust/library/Cargo.toml"));
    if !rust_src.as_deref().is_ok_and(Path::exists) {
        return require.skipped(
            "tsan",
            "-Zbuild-std needs the nightly rust-src component \
             (`rustup component add rust-src --toolchain nightly`)",
        );
    }

    // Build: the provider's tests and the harness, both in release so that -Zbuild-std
    // compiles the instrumented standard library once.
    let target_dir = util::root().join("target").join("tsan");
    let tsan_cargo = |args: &[&str]| {
        let mut cmd = nightly_cargo();
        cmd.args(args)
            .args(["-Zbuild-std", "--target", &host])
            .env("RUSTFLAGS", "-Zsanitizer=thread")
            .env("CARGO_TARGET_DIR", &target_dir);
        cmd
    };
    eprintln!(
        "tsan: building keepalloc-provider's tests, keepalloc-kernels' pool tests (as they are \
         and as the done_relaxed and job_before_claim mutants) and keepalloc-harness (-Zsanitizer=thread \
         -Zbuild-std --target {host})"
    );
    let build_started = Instant::now();
    let tests = tsan_cargo(&[
        "test",
        "--release",
        "-p",
        "keepalloc-provider",
        "--lib",
        "--tests",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    // Nightly and rust-src are there and the host supported: a failed build is a failure
    // (of our code or of nightly's sanitizer support), never a skip.
    let cannot_build = |why: String| format!("tsan: building with ThreadSanitizer failed: {why}");
    let tests = test_executables(tests).map_err(cannot_build)?;
    let kernels = test_executables(tsan_cargo(&[
        "test",
        "--release",
        "-p",
        "keepalloc-kernels",
        "--lib",
        "--test",
        "pool",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]))
    .map_err(cannot_build)?;
    let pool_mutant_build = |mutant: &str| -> Result<PathBuf, String> {
        let config = pool_mutant_config("release", mutant);
        let exe = test_executables(tsan_cargo(&[
            "test",
            "--release",
            "-p",
            "keepalloc-kernels",
            "--test",
            "pool",
            "--no-run",
            "--message-format=json-render-diagnostics",
            "-Zprofile-rustflags",
            "--config",
            &config,
        ]))
        .map_err(cannot_build)?
        .into_iter()
        .find(|(name, _)| name == "pool")
        .map(|(_, exe)| exe)
        .ok_or_else(|| cannot_build(format!("the {mutant} build made no `pool` test")))?;
        if kernels.iter().any(|(_, clean)| *clean == exe) {
            return Err(cannot_build(format!(
                "the {mutant} mutant and the pool tests share one executable"
            )));
        }
        Ok(exe)
    };
    let pool_mutant = pool_mutant_build("done_relaxed")?;
    let slot_mutant = pool_mutant_build("job_before_claim")?;
    if slot_mutant == pool_mutant {
        return Err(cannot_build(
            "the two pool mutants share one executable".into(),
        ));
    }
    let harness = fault_test::executable_from(
        tsan_cargo(&fault_test::HARNESS_BUILD_ARGS),
        "keepalloc-harness",
    )
    .map_err(cannot_build)?;
    let build_time = build_started.elapsed();
    let window = held_window_args(&harness)?;

    let root = util::root();
    let root_text = root.display().to_string();
    let mut rows: Vec<Row> = Vec::new();
    for (name, exe) in tests {
        // Without --cfg loom the loom models compile to an empty binary: nothing to run.
        if name == "loom" {
            continue;
        }
        rows.push(Row {
            what: format!("provider tests: {name}"),
            expect: Expect::Clean,
            program: exe,
            args: Vec::new(),
            cwd: root.join("provider"),
            runs: options.test_runs,
            seeded: false,
            outcomes: Vec::new(),
            elapsed: Duration::ZERO,
        });
    }
    let harness_row = |variant: &str, scenario: &str, expect: Expect| {
        let mut args: Vec<String> = ["--scenario", scenario, "--variant", variant]
            .map(String::from)
            .to_vec();
        args.extend(window.iter().cloned());
        Row {
            what: format!("harness: {variant} {scenario}, window held"),
            expect,
            program: harness.clone(),
            args,
            cwd: root.clone(),
            runs: options.runs,
            seeded: true,
            outcomes: Vec::new(),
            elapsed: Duration::ZERO,
        }
    };
    for scenario in ["cold-start", "retry-after-capture", "retry-under-race"] {
        rows.push(harness_row("keepalloc", scenario, Expect::Clean));
    }
    rows.push(harness_row(
        "racy",
        "cold-start",
        Expect::Reported(Signature::RacyControl),
    ));
    for (name, exe) in kernels {
        let (what, args) = if name == "pool" {
            ("kernels tests: pool".to_string(), Vec::new())
        } else {
            (
                "kernels lib tests: pool::".to_string(),
                vec!["pool::".to_string()],
            )
        };
        rows.push(Row {
            what,
            expect: Expect::Clean,
            program: exe,
            args,
            cwd: root.join("kernels"),
            runs: options.test_runs,
            seeded: false,
            outcomes: Vec::new(),
            elapsed: Duration::ZERO,
        });
    }
    rows.push(Row {
        what: format!("kernels pool, done_relaxed mutant: {POOL_WITNESS_TEST}"),
        expect: Expect::Reported(Signature::PoolResultsUnpublished),
        program: pool_mutant,
        args: vec!["--exact".into(), POOL_WITNESS_TEST.into()],
        cwd: root.join("kernels"),
        runs: options.runs,
        seeded: false,
        outcomes: Vec::new(),
        elapsed: Duration::ZERO,
    });
    rows.push(Row {
        what: format!("kernels pool, job_before_claim mutant: {POOL_SLOT_WITNESS_TEST}"),
        expect: Expect::Reported(Signature::PoolSlotReadBeforeClaim),
        program: slot_mutant,
        args: vec!["--exact".into(), POOL_SLOT_WITNESS_TEST.into()],
        cwd: root.join("kernels"),
        runs: options.runs,
        seeded: false,
        outcomes: Vec::new(),
        elapsed: Duration::ZERO,
    });

    let mut tsan_options = format!("atexit_sleep_ms=0:halt_on_error=0:exitcode={TSAN_EXIT}");
    if let Ok(extra) = std::env::var("TSAN_OPTIONS") {
        tsan_options = format!("{tsan_options}:{extra}");
    }
    let logs = target_dir.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).map_err(|e| format!("creating {}: {e}", logs.display()))?;
    eprintln!(
        "tsan: build took {:.0} s; {} rows, seed {} (replay with --seed {}), \
         TSAN_OPTIONS={tsan_options}",
        build_time.as_secs_f64(),
        rows.len(),
        options.seed,
        options.seed
    );
    let run_started = Instant::now();
    for row in &mut rows {
        let started = Instant::now();
        for i in 0..row.runs {
            let mut argv = row.args.clone();
            if row.seeded {
                argv.extend(["--seed".to_string(), (options.seed + i as u64).to_string()]);
            }
            let mut cmd = Command::new(&row.program);
            // The pool tests' watchdog (testkit/src/watchdog.rs) at half the
            // process timeout: a hung test is named by it, well before the kill.
            cmd.args(&argv)
                .current_dir(&row.cwd)
                .env("TSAN_OPTIONS", &tsan_options)
                .env(
                    "KEEPALLOC_TEST_DEADLOCK_SECS",
                    (options.timeout.as_secs() / 2).max(1).to_string(),
                );
            let ended = process::run_captured(cmd, options.timeout)?;
            let status = (!ended.timed_out).then_some(ended.status);
            let (stdout, stderr) = (ended.stdout, ended.stderr);
            let outcome = classify(status, &stdout, &stderr, options.timeout, &root_text);
            if !matches!(outcome, Outcome::Clean) {
                let slug: String = row
                    .what
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                let log = logs.join(format!("{slug}-{i}.log"));
                let text = format!(
                    "$ {} {}\n{}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                    row.program.display(),
                    argv.join(" "),
                    outcome.describe()
                );
                let _ = std::fs::write(&log, text);
                let expected = matches!(
                    (&outcome, row.expect),
                    (Outcome::Reported(r), Expect::Reported(sig)) if r.iter().any(|r| sig.matches(r))
                );
                if !expected {
                    eprintln!(
                        "tsan: {} run {i}: {} (log: {})",
                        row.what,
                        outcome.describe(),
                        log.display()
                    );
                }
            }
            row.outcomes.push(outcome);
        }
        row.elapsed = started.elapsed();
    }
    let run_time = run_started.elapsed();
    print_table(&rows);
    println!(
        "\nbuild {:.0} s, runs {:.0} s; logs of the runs that were not clean: {}",
        build_time.as_secs_f64(),
        run_time.as_secs_f64(),
        logs.display()
    );

    let clean: usize = rows
        .iter()
        .filter(|r| r.expect == Expect::Clean)
        .map(Row::clean)
        .sum();
    let must_be_clean: usize = rows
        .iter()
        .filter(|r| r.expect == Expect::Clean)
        .map(|r| r.outcomes.len())
        .sum();
    let control = rows
        .iter()
        .filter_map(|r| match r.expect {
            Expect::Reported(signature) => Some(format!(
                "{} in {}/{} runs",
                signature.describe(),
                r.reported_by_signature(),
                r.outcomes.len()
            )),
            Expect::Clean => None,
        })
        .collect::<Vec<_>>()
        .join(", ");
    let line = format!(
        "keepalloc, the provider tests and the kernels pool clean in {clean}/{must_be_clean} runs, \
         {control}"
    );
    if rows.iter().any(|r| r.verdict() == Err("INCONCLUSIVE")) {
        Err(format!(
            "tsan: INCONCLUSIVE (a run timed out, died without a report, or TSan failed): {line}"
        ))
    } else if rows.iter().any(|r| r.verdict().is_err()) {
        Err(format!("tsan: FAIL: {line}"))
    } else {
        println!("tsan: PASS: {line}");
        Ok(())
    }
}

/// The table, then each kind of report with the runs that showed it and one example.
pub(super) fn print_table(rows: &[Row]) {
    let w = rows.iter().map(|r| r.what.len()).max().unwrap_or(4);
    println!();
    println!(
        "{:<w$} {:>8} {:>4} {:>5} {:>8} {:>6} {:>6} {:>7}  verdict",
        "what", "expect", "runs", "clean", "reported", "failed", "incon.", "time"
    );
    for row in rows {
        println!(
            "{:<w$} {:>8} {:>4} {:>5} {:>8} {:>6} {:>6} {:>6.1}s  {}",
            row.what,
            match row.expect {
                Expect::Clean => "clean",
                Expect::Reported(_) => "reported",
            },
            row.outcomes.len(),
            row.clean(),
            row.reported(),
            row.failed(),
            row.inconclusive(),
            row.elapsed.as_secs_f64(),
            match row.verdict() {
                Ok(()) => "ok",
                Err(v) => v,
            },
        );
    }
    for row in rows {
        let labels = row.labels();
        if labels.is_empty() {
            continue;
        }
        println!(
            "\nThreadSanitizer reports in {} (runs showing each kind, first example):",
            row.what
        );
        for (label, runs, example) in labels {
            println!("  {runs:>3}/{:<3} {label}", row.outcomes.len());
            for (header, frame) in &example.accesses {
                let what = header.split(" at 0x").next().unwrap_or(header);
                let by = header
                    .split_once(" by ")
                    .map_or(String::new(), |(_, b)| format!(" by {b}"));
                println!(
                    "            {what}{by}: {}",
                    frame.as_deref().unwrap_or("(no frame in the workspace)")
                );
            }
        }
    }
}
