//! `cargo xtask fault-test`: every fault scenario against keepalloc's provider and against
//! each negative control that applies, N fresh processes each, then the verdict.
//!
//! The checks all run in the child (`keepalloc-harness`, built in release with feature
//! `controls`); this side only schedules runs, classifies how each one ended (its result
//! line, its exit code, or the signal that killed it), and prints the table. It passes only
//! when keepalloc failed no run AND every control, with its race window held, was caught in
//! at least 95% of its runs. The controls are also run with the window *not* held, and that
//! rate is reported but not judged: a bare race on two cores shows up in ~1 run in 100.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::util;

const HELP: &str = "\
usage: cargo xtask fault-test [options]

Builds keepalloc-harness (release, feature `controls`) and runs every scenario against
keepalloc's provider and each negative control that applies, each run in a fresh process,
with the race windows held open by delays and without. Exit 0 only when keepalloc failed 0
runs (both ways) and every control, window held, was caught in >= 95% of its runs (the
bare-window rate of a control is reported, not judged).

options:
  --runs N            runs per (scenario, variant, window) row (default 100)
  --threads N         threads of the racing scenarios (default 32)
  --seed N            base seed; run i uses seed N+i (default: from the clock, printed)
  --scenario NAME     only this scenario (repeatable): cold-start, retry-after-capture,
                      retry-under-race, panic-in-init, out-of-memory
  --variant NAME      only this variant (repeatable): keepalloc, racy, naive-retry
  --window MODE       held | bare | both (default both)
  --hold DELAY        the delay that holds the windows: `default` (gather:500us in the
                      check-to-store window, sleep:500us after capture), or one delay for
                      both: sleep:Nus, gather:Nus, yield:N, spin:N
  --jobs N            runs in parallel (default: available cores)
  --timeout SECS      a run that takes longer is killed and counted as a hang (default 60)
  --json PATH         also write the results as JSON
  --harness PATH      use this harness binary instead of building one
";

const SCENARIOS: [&str; 5] = [
    "cold-start",
    "retry-after-capture",
    "retry-under-race",
    "panic-in-init",
    "out-of-memory",
];
const VARIANTS: [&str; 3] = ["keepalloc", "racy", "naive-retry"];

/// Which controls apply to which scenario (the harness says "not applicable" otherwise; the
/// table is documented in `keepalloc_fault_inject::scenario`).
fn applies(scenario: &str, variant: &str) -> bool {
    match variant {
        "keepalloc" => true,
        "racy" => matches!(scenario, "cold-start" | "retry-under-race"),
        "naive-retry" => matches!(
            scenario,
            "retry-after-capture" | "retry-under-race" | "panic-in-init"
        ),
        _ => false,
    }
}

/// Harness exit codes (`keepalloc_fault_inject::report::exit`).
const EXIT_HARNESS_ERROR: i32 = 1;
const EXIT_USAGE: i32 = 2;
const EXIT_NOT_BUILT: i32 = 3;
const EXIT_NOT_APPLICABLE: i32 = 4;

/// Exit code AddressSanitizer is told to use (`ASAN_OPTIONS=exitcode=`).
pub const ASAN_EXIT: i32 = 30;

/// The detection rate every held-window control must reach.
const REQUIRED_RATE: f64 = 0.95;

/// Campaign options.
#[derive(Clone, Debug)]
pub struct Options {
    runs: usize,
    threads: usize,
    seed: u64,
    scenarios: Vec<String>,
    variants: Vec<String>,
    window: Window,
    hold: String,
    jobs: usize,
    timeout: Duration,
    json: Option<PathBuf>,
    harness: Option<PathBuf>,
    /// Extra environment for every run (the ASan options).
    pub env: Vec<(String, String)>,
    /// A label printed in the header (e.g. "AddressSanitizer").
    pub label: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    Held,
    Bare,
    Both,
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag} takes a number, not `{v}`"))
}

impl Options {
    /// Parses the command line.
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut o = Options {
            runs: 100,
            threads: 32,
            seed: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs() % 1_000_000)
                .unwrap_or(1),
            scenarios: Vec::new(),
            variants: Vec::new(),
            window: Window::Both,
            hold: "default".to_string(),
            jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
            timeout: Duration::from_secs(60),
            json: None,
            harness: None,
            env: Vec::new(),
            label: None,
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| it.next().cloned())
                    .ok_or(format!("{flag} needs a value"))
            };
            match flag {
                "--runs" => o.runs = parse_num(flag, &value()?)?,
                "--threads" => o.threads = parse_num(flag, &value()?)?,
                "--seed" => o.seed = parse_num(flag, &value()?)?,
                "--jobs" => o.jobs = parse_num::<usize>(flag, &value()?)?.max(1),
                "--timeout" => o.timeout = Duration::from_secs(parse_num(flag, &value()?)?),
                "--scenario" => {
                    let v = value()?;
                    for s in v.split(',') {
                        if !SCENARIOS.contains(&s) {
                            return Err(format!("no scenario `{s}` (one of {SCENARIOS:?})"));
                        }
                        o.scenarios.push(s.to_string());
                    }
                }
                "--variant" => {
                    let v = value()?;
                    for s in v.split(',') {
                        if !VARIANTS.contains(&s) {
                            return Err(format!("no variant `{s}` (one of {VARIANTS:?})"));
                        }
                        o.variants.push(s.to_string());
                    }
                }
                "--window" => {
                    o.window = match value()?.as_str() {
                        "held" => Window::Held,
                        "bare" => Window::Bare,
                        "both" => Window::Both,
                        other => return Err(format!("--window held|bare|both, not `{other}`")),
                    }
                }
                "--hold" => o.hold = value()?,
                "--json" => o.json = Some(PathBuf::from(value()?)),
                "--harness" => o.harness = Some(PathBuf::from(value()?)),
                "--help" | "-h" => return Err(String::new()),
                other => return Err(format!("unknown option `{other}`\n{HELP}")),
            }
        }
        if o.runs == 0 || o.threads == 0 {
            return Err("--runs and --threads must be positive".into());
        }
        Ok(o)
    }
}

/// One row of the table: a scenario, a variant, with or without the window held.
#[derive(Clone, Debug)]
struct Row {
    scenario: &'static str,
    variant: &'static str,
    window_held: bool,
    runs: usize,
    failures: usize,
    /// Runs that failed for a reason that counts as catching a control (not a harness
    /// error).
    detected: usize,
    /// Detection kind → runs that showed it.
    detections: BTreeMap<String, usize>,
    failing_seeds: Vec<u64>,
    /// Harness errors, with their first lines (shown when something is off).
    errors: Vec<String>,
}

impl Row {
    fn is_control(&self) -> bool {
        self.variant != "keepalloc"
    }

    fn rate(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.detected as f64 / self.runs as f64
        }
    }

    /// `Some(true/false)` for rows that count toward the verdict, `None` for reported-only.
    fn passed(&self) -> Option<bool> {
        if !self.is_control() {
            Some(self.failures == 0)
        } else if self.window_held {
            Some(self.rate() >= REQUIRED_RATE)
        } else {
            None
        }
    }

    fn verdict(&self) -> String {
        match (self.is_control(), self.passed()) {
            (false, Some(true)) => "PASS".into(),
            (false, _) => "FAIL".into(),
            (true, Some(true)) => format!("caught {:.0}%", self.rate() * 100.0),
            (true, Some(false)) => format!("MISSED ({:.0}% < 95%)", self.rate() * 100.0),
            (true, None) => format!("info: caught {:.0}%", self.rate() * 100.0),
        }
    }
}

/// How one run ended.
#[derive(Debug)]
struct RunOutcome {
    passed: bool,
    /// Detection kinds (empty when passed).
    kinds: Vec<String>,
    /// A harness error (not a detection).
    error: Option<String>,
}

/// Runs `cargo xtask fault-test`.
pub fn run(args: &[String]) -> Result<(), String> {
    let options = match Options::parse(args) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            print!("{HELP}");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let harness = match &options.harness {
        Some(p) => p.clone(),
        None => build_harness()?,
    };
    campaign(&harness, &options)
}

/// `cargo` arguments that build the harness in release with the controls (shared with the
/// AddressSanitizer build, which adds its target).
pub const HARNESS_BUILD_ARGS: [&str; 9] = [
    "build",
    "--release",
    "-p",
    "keepalloc-fault-inject",
    "--features",
    "controls",
    "--bin",
    "keepalloc-harness",
    "--message-format=json-render-diagnostics",
];

/// Builds the harness in release with the controls and returns the executable's path.
fn build_harness() -> Result<PathBuf, String> {
    eprintln!("fault-test: building keepalloc-harness (release, feature `controls`)");
    let mut cmd = util::cargo();
    cmd.args(HARNESS_BUILD_ARGS);
    executable_from(cmd, "keepalloc-harness")
}

/// Runs a `cargo build --message-format=json...` command and finds the executable named
/// `name` among its artifacts (so any target directory works).
pub fn executable_from(mut cmd: Command, name: &str) -> Result<PathBuf, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("building {name} failed: {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|l| json_string_field(l, "executable"))
        .map(PathBuf::from)
        .find(|p| p.file_stem().is_some_and(|s| s == name))
        .ok_or_else(|| format!("cargo built no executable named {name}"))
}

/// The string value of `"key":"..."` in one line of JSON (cargo's messages; no escapes in
/// a path other than `\\` and `\"`).
fn json_string_field(line: &str, key: &str) -> Option<String> {
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

/// Plans the rows.
fn plan_rows(o: &Options) -> Vec<Row> {
    let mut rows = Vec::new();
    for scenario in SCENARIOS {
        if !o.scenarios.is_empty() && !o.scenarios.iter().any(|s| s == scenario) {
            continue;
        }
        for variant in VARIANTS {
            if (!o.variants.is_empty() && !o.variants.iter().any(|v| v == variant))
                || !applies(scenario, variant)
            {
                continue;
            }
            // keepalloc must pass both ways; a control counts only with its window held.
            let windows: &[bool] = match o.window {
                Window::Both => &[true, false],
                Window::Held => &[true],
                Window::Bare => &[false],
            };
            for &window_held in windows {
                rows.push(Row {
                    scenario,
                    variant,
                    window_held,
                    runs: 0,
                    failures: 0,
                    detected: 0,
                    detections: BTreeMap::new(),
                    failing_seeds: Vec::new(),
                    errors: Vec::new(),
                });
            }
        }
    }
    rows
}

/// Runs the campaign with `harness` and prints/returns the verdict.
pub fn campaign(harness: &Path, o: &Options) -> Result<(), String> {
    if !harness.exists() {
        return Err(format!("no harness at {}", harness.display()));
    }
    let rows = plan_rows(o);
    if rows.is_empty() {
        return Err("no (scenario, variant) pair selected applies".into());
    }
    let total = rows.len() * o.runs;
    eprintln!(
        "fault-test{}: {} rows x {} runs = {total} fresh processes, {} threads, seed {} \
         (replay with --seed {}), {} jobs",
        o.label
            .as_deref()
            .map_or(String::new(), |l| format!(" [{l}]")),
        rows.len(),
        o.runs,
        o.threads,
        o.seed,
        o.seed,
        o.jobs
    );
    let started = Instant::now();
    let rows = Arc::new(Mutex::new(rows));
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let row_count = rows.lock().expect("rows").len();

    std::thread::scope(|scope| -> Result<(), String> {
        let mut workers = Vec::new();
        for _ in 0..o.jobs.min(total) {
            let (rows, next, done) = (rows.clone(), next.clone(), done.clone());
            workers.push(scope.spawn(move || -> Result<(), String> {
                loop {
                    let task = next.fetch_add(1, Ordering::Relaxed);
                    if task >= total {
                        return Ok(());
                    }
                    // Interleave rows so that a slow row does not sit at the end.
                    let (row_index, run_index) = (task % row_count, task / row_count);
                    let (scenario, variant, window_held) = {
                        let r = &rows.lock().expect("rows")[row_index];
                        (r.scenario, r.variant, r.window_held)
                    };
                    let seed = o.seed.wrapping_add(run_index as u64);
                    let outcome = run_once(harness, o, scenario, variant, window_held, seed)?;
                    let mut all = rows.lock().expect("rows");
                    let row = &mut all[row_index];
                    row.runs += 1;
                    if !outcome.passed {
                        row.failures += 1;
                        if row.failing_seeds.len() < 5 {
                            row.failing_seeds.push(seed);
                        }
                        if let Some(e) = outcome.error {
                            if row.errors.len() < 3 {
                                row.errors.push(format!("seed {seed}: {e}"));
                            }
                        } else {
                            row.detected += 1;
                        }
                        for k in outcome.kinds {
                            *row.detections.entry(k).or_default() += 1;
                        }
                    }
                    drop(all);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let progress = scope.spawn(|| progress_bar(&done, total, &finished, started));
        let mut result = Ok(());
        for w in workers {
            let r = w.join().unwrap_or_else(|_| Err("a worker panicked".into()));
            if result.is_ok() {
                result = r;
            }
        }
        finished.store(true, Ordering::Relaxed);
        let _ = progress.join();
        result
    })?;

    let elapsed = started.elapsed();
    let rows = Arc::try_unwrap(rows)
        .map_err(|_| "rows still shared")?
        .into_inner()
        .map_err(|_| "rows poisoned")?;
    let passed = rows.iter().all(|r| r.passed() != Some(false));
    print_table(&rows, elapsed, total);
    for r in rows
        .iter()
        .filter(|r| r.passed() == Some(false) && r.failures > 0)
    {
        for seed in r
            .failing_seeds
            .iter()
            .take(if r.is_control() { 0 } else { 3 })
        {
            eprintln!(
                "replay: {} --scenario {} --variant {} --seed {seed} --threads {}{}",
                harness.display(),
                r.scenario,
                r.variant,
                o.threads,
                if r.window_held { " --hold-window" } else { "" }
            );
        }
    }
    for r in rows.iter().filter(|r| !r.errors.is_empty()) {
        eprintln!(
            "harness errors in {} / {}: {}",
            r.scenario,
            r.variant,
            r.errors.join(" | ")
        );
    }
    if let Some(path) = &o.json {
        let json = to_json(&rows, passed, o, elapsed);
        std::fs::write(path, json)
            .map_err(|e| format!("could not write {}: {e}", path.display()))?;
        println!("results written to {}", path.display());
    }
    if passed {
        println!(
            "fault-test: PASSED — keepalloc failed 0 of its runs; every control (window held) \
             was caught in >= 95% of its runs"
        );
        Ok(())
    } else {
        Err("fault-test FAILED (see the table)".into())
    }
}

/// A `\r` progress bar on a terminal; in a log (CI), one line per tenth of the runs.
fn progress_bar(done: &AtomicUsize, total: usize, finished: &AtomicBool, started: Instant) {
    const WIDTH: usize = 30;
    let mut err = std::io::stderr();
    if !std::io::IsTerminal::is_terminal(&err) {
        let mut next_tenth = 1;
        loop {
            let n = done.load(Ordering::Relaxed);
            let end = finished.load(Ordering::Relaxed);
            if end || n * 10 >= next_tenth * total.max(1) {
                let _ = writeln!(
                    err,
                    "fault-test: {n}/{total} runs  {:.1}s",
                    started.elapsed().as_secs_f64()
                );
                next_tenth = n * 10 / total.max(1) + 1;
            }
            if end {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    loop {
        let n = done.load(Ordering::Relaxed);
        let filled = n * WIDTH / total.max(1);
        let _ = write!(
            err,
            "\r[{}{}] {n}/{total} runs  {:.1}s ",
            "#".repeat(filled),
            " ".repeat(WIDTH - filled),
            started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
        if finished.load(Ordering::Relaxed) {
            let _ = writeln!(err);
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Spawns one harness run and classifies how it ended.
fn run_once(
    harness: &Path,
    o: &Options,
    scenario: &str,
    variant: &str,
    window_held: bool,
    seed: u64,
) -> Result<RunOutcome, String> {
    let mut cmd = Command::new(harness);
    cmd.args(["--scenario", scenario, "--variant", variant])
        .args(["--seed", &seed.to_string()])
        .args(["--threads", &o.threads.to_string()]);
    if window_held {
        if o.hold == "default" {
            cmd.arg("--hold-window");
        } else {
            cmd.arg(format!("--hold-window={}", o.hold));
        }
    }
    cmd.envs(o.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", harness.display()))?;
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    let (status, hung) = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break (status, false);
        }
        if started.elapsed() > o.timeout {
            let _ = child.kill();
            break (child.wait().map_err(|e| e.to_string())?, true);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(classify(status, hung, &stdout, &stderr))
}

fn signal_name(signal: i32) -> String {
    match signal {
        4 => "SIGILL".into(),
        6 => "SIGABRT".into(),
        7 => "SIGBUS".into(),
        8 => "SIGFPE".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(unix)]
fn signal_of(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_: &ExitStatus) -> Option<i32> {
    None
}

fn classify(status: ExitStatus, hung: bool, stdout: &str, stderr: &str) -> RunOutcome {
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        });
    let first_error_line = || {
        stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(no output)")
            .to_string()
    };
    if hung {
        return RunOutcome {
            passed: false,
            kinds: vec!["hang".into()],
            error: None,
        };
    }
    if let Some(signal) = signal_of(&status) {
        return RunOutcome {
            passed: false,
            kinds: vec![format!("signal:{}", signal_name(signal))],
            error: None,
        };
    }
    let code = status.code().unwrap_or(-1);
    if code == ASAN_EXIT || stderr.contains("ERROR: AddressSanitizer") {
        let what = stderr
            .lines()
            .find_map(|l| l.split("ERROR: AddressSanitizer: ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or("error");
        return RunOutcome {
            passed: false,
            kinds: vec![format!("asan:{what}")],
            error: None,
        };
    }
    let error = |what: String| RunOutcome {
        passed: false,
        kinds: vec!["harness-error".into()],
        error: Some(what),
    };
    match code {
        EXIT_HARNESS_ERROR | EXIT_USAGE | EXIT_NOT_BUILT | EXIT_NOT_APPLICABLE => {
            return error(format!("exit {code}: {}", first_error_line()));
        }
        _ => {}
    }
    let Some(result) = result else {
        return if code == 0 {
            error("exit 0 without a result line".into())
        } else {
            RunOutcome {
                passed: false,
                kinds: vec![format!("exit:{code}")],
                error: None,
            }
        };
    };
    let kinds: Vec<String> = result
        .get("detections")
        .filter(|d| d.as_str() != "none")
        .map(|d| d.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let status_ok = result.get("status").is_some_and(|s| s == "pass");
    if code == 0 && status_ok && kinds.is_empty() {
        RunOutcome {
            passed: true,
            kinds,
            error: None,
        }
    } else if kinds.is_empty() {
        error(format!(
            "exit {code} with no detection: {}",
            first_error_line()
        ))
    } else {
        RunOutcome {
            passed: false,
            kinds,
            error: None,
        }
    }
}

fn print_table(rows: &[Row], elapsed: Duration, total: usize) {
    let header = [
        "scenario",
        "variant",
        "window",
        "runs",
        "failures",
        "detected by (runs)",
        "verdict",
    ];
    let body: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            let by = if r.detections.is_empty() {
                "-".to_string()
            } else {
                r.detections
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            [
                r.scenario.to_string(),
                r.variant.to_string(),
                if r.window_held { "held" } else { "bare" }.to_string(),
                r.runs.to_string(),
                r.failures.to_string(),
                by,
                r.verdict(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::from("|");
        for (cell, w) in cells.iter().zip(widths) {
            s.push_str(&format!(" {cell:<w$} |"));
        }
        s
    };
    println!();
    println!("{}", line(header.to_vec()));
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in &body {
        println!("{}", line(row.iter().map(String::as_str).collect()));
    }
    println!(
        "\n{total} runs in {:.1}s ({:.1} ms per run wall clock)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / total.max(1) as f64
    );
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn to_json(rows: &[Row], passed: bool, o: &Options, elapsed: Duration) -> String {
    let results: Vec<String> = rows
        .iter()
        .map(|r| {
            let detections = r
                .detections
                .iter()
                .map(|(k, n)| format!("{}: {n}", json_escape(k)))
                .collect::<Vec<_>>()
                .join(", ");
            let seeds = r
                .failing_seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "    {{\"scenario\": {}, \"variant\": {}, \"runs\": {}, \"failures\": {}, \
                 \"detections\": {{{detections}}}, \"seed\": {}, \"window_held\": {}, \
                 \"detected\": {}, \"counts_for_verdict\": {}, \"passed\": {}, \
                 \"failing_seeds\": [{seeds}]}}",
                json_escape(r.scenario),
                json_escape(r.variant),
                r.runs,
                r.failures,
                o.seed,
                r.window_held,
                r.detected,
                r.passed().is_some(),
                r.passed().unwrap_or(true),
            )
        })
        .collect();
    format!(
        "{{\n  \"passed\": {passed},\n  \"seed\": {},\n  \"runs\": {},\n  \"threads\": {},\n  \
         \"hold\": {},\n  \"elapsed_seconds\": {:.3},\n  \"results\": [\n{}\n  ]\n}}\n",
        o.seed,
        o.runs,
        o.threads,
        json_escape(&o.hold),
        elapsed.as_secs_f64(),
        results.join(",\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn exit(code: i32) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus::from_raw(code << 8)
    }

    #[cfg(unix)]
    #[test]
    fn classifies_results_signals_and_errors() {
        let pass = classify(
            exit(0),
            false,
            "RESULT scenario=x variant=y status=pass exit=0 detections=none\n",
            "",
        );
        assert!(pass.passed);
        let uaf = classify(
            exit(10),
            false,
            "RESULT status=fail exit=10 detections=owner-count,use-after-free\n",
            "",
        );
        assert!(!uaf.passed && uaf.error.is_none());
        assert_eq!(uaf.kinds, ["owner-count", "use-after-free"]);
        use std::os::unix::process::ExitStatusExt;
        let segv = classify(ExitStatus::from_raw(11), false, "", "");
        assert_eq!(segv.kinds, ["signal:SIGSEGV"]);
        let usage = classify(exit(2), false, "", "bad\n");
        assert!(usage.error.is_some());
        let silent = classify(exit(0), false, "", "");
        assert!(!silent.passed && silent.error.is_some());
        let asan = classify(
            exit(ASAN_EXIT),
            false,
            "",
            "==1==ERROR: AddressSanitizer: heap-use-after-free on address\n",
        );
        assert_eq!(asan.kinds, ["asan:heap-use-after-free"]);
    }

    #[test]
    fn finds_the_executable_in_cargo_messages() {
        let line =
            r#"{"reason":"compiler-artifact","executable":"/t/release/keepalloc-harness","x":1}"#;
        assert_eq!(
            json_string_field(line, "executable").as_deref(),
            Some("/t/release/keepalloc-harness")
        );
        assert_eq!(json_escape("a\"b\\c"), r#""a\"b\\c""#);
    }

    #[test]
    fn verdicts() {
        let mut r = plan_rows(&Options::parse(&[]).unwrap())
            .into_iter()
            .find(|r| r.variant == "racy" && r.window_held)
            .unwrap();
        r.runs = 100;
        r.detected = 94;
        assert_eq!(r.passed(), Some(false));
        r.detected = 95;
        assert_eq!(r.passed(), Some(true));
        r.window_held = false;
        assert_eq!(r.passed(), None);
        let mut k = plan_rows(&Options::parse(&[]).unwrap())
            .into_iter()
            .find(|r| r.variant == "keepalloc" && !r.window_held)
            .expect("keepalloc runs bare too");
        k.runs = 100;
        assert_eq!(k.passed(), Some(true));
        k.failures = 1;
        assert_eq!(k.passed(), Some(false));
    }
}
