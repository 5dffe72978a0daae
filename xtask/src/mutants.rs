//! `cargo xtask mutants`: mutation testing of the provider (`keepalloc-provider`), of the C
//! table (`allocators/src/table.rs`) and of the kernels' worker pool (`kernels/src/pool/`)
//! with cargo-mutants, scored against a 95% bar.
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
//! the documented equivalents below.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util;

/// The cargo-mutants version this command is written and scored against.
pub const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// How to install it.
const INSTALL: &str = "cargo install cargo-mutants --version 27.1.0 --locked";

/// The share of viable mutants that must be caught.
const REQUIRED_SCORE: f64 = 0.95;

/// `cargo xtask mutants --help`.
pub const LONG_ABOUT: &str = "\
Mutation-tests keepalloc-provider, the C table (allocators/src/table.rs) and the kernels'
worker pool (kernels/src/pool/) with cargo-mutants (--jobs 1). Stage 1: cargo-mutants with
the crates' tests (for the pool: keepalloc-kernels --lib --test pool). Stage 2, on the
provider's and the table's stage-1 survivors only: the loom models (mutants of
cell.rs/sync.rs) and a short keepalloc-only fault campaign
(`cargo xtask fault-test --variant keepalloc --runs 3`). Prints the survivors, the documented
equivalent mutants, and finally `mutants: caught C, missed M, timeout T, unviable U`; exits
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

/// One cargo-mutants run of stage 1: which mutants, and whose tests.
struct Part {
    name: &'static str,
    /// cargo-mutants' selection of mutants.
    select: &'static [&'static str],
    /// The packages whose tests make up stage 1's test command.
    test_packages: &'static [&'static str],
    /// Arguments for that `cargo test` (which of the packages' test targets run).
    test_args: &'static [&'static str],
    /// Whether stage 2 (loom, the campaign) sees this part's code at all: its survivors go
    /// there only if it does.
    stage2: bool,
}

/// `allocators/src/raw.rs` is not here: it is the malloc-style backends' shape
/// (`RawBackend`, the `Allocator` impl macro, `resize`), not the table. The table's own
/// block/header code (`block_layout`, `alloc_block`, `block_of`, the `table_*` functions) is
/// all in `table.rs`; cargo-mutants does not mutate the bodies of `unsafe fn`s, so of it
/// only `block_layout` and `no_unwind` get mutants.
const PARTS: [Part; 3] = [
    Part {
        name: "table",
        select: &[
            "--package",
            "keepalloc-allocators",
            "--file",
            "allocators/src/table.rs",
        ],
        test_packages: &["keepalloc-allocators", "keepalloc-provider"],
        test_args: &[],
        stage2: true,
    },
    Part {
        name: "provider",
        select: &["--package", "keepalloc-provider"],
        test_packages: &["keepalloc-provider"],
        test_args: &[],
        stage2: true,
    },
    // The kernels' worker pool, with its own tests (tests/pool.rs and the lib's, which include
    // the capped pool's; the operators' tests would add minutes per mutant and see the pool
    // only through `run`). Its tests carry a watchdog (testkit/src/watchdog.rs), so
    // a mutant that loses a wake-up or a task fails in 10 s instead of timing out. Neither
    // loom (the provider's cell only) nor the campaign (one thread) runs the pool.
    Part {
        name: "pool",
        select: &[
            "--package",
            "keepalloc-kernels",
            "--file",
            "kernels/src/pool/*.rs",
        ],
        test_packages: &["keepalloc-kernels"],
        test_args: &["--lib", "--test", "pool"],
        stage2: false,
    },
];

/// The files whose code the loom models see (under `--cfg loom` only the cell and its
/// primitives are compiled; `provider.rs` is not).
const LOOM_FILES: [&str; 2] = ["provider/src/cell.rs", "provider/src/sync.rs"];

/// Mutants that no test can catch because they do not change what the code does, each with
/// the reason. Matched on the mutant's name without its line and column (`file: description`).
///
/// `<impl Drop for Attempt<'_, T>>::drop with ()` (a failed attempt leaves the cell
/// RUNNING, so the next caller waits for ever) hangs stage 1 and is caught by loom as a
/// deadlock, so it is not listed. (Most of the unviable mutants are replacements that do not
/// type-check, such as `Ok(NonNull::new())` or `Box::leak(Box::new(Owner::new()))`.)
///
/// The pool's entries marked *performance only* change when a thread
/// spins, sleeps or is notified, never which tasks run or what a run returns, so a test
/// could only tell them apart by a timing threshold, which the project's tests do not have.
/// The ones that would make an idle pool spin for ever are caught, by the kernel's view of
/// the worker thread (`an_idle_worker_goes_to_sleep` in kernels/tests/pool.rs).
pub const EQUIVALENT: &[(&str, &str)] = &[
    (
        "allocators/src/table.rs: replace | with ^ in tag",
        "the cookie's low byte is always 0 (`& !0xff`) and the alignment's log2 is < 64, so \
         `cookie | log2` and `cookie ^ log2` are the same number for every input",
    ),
    (
        "kernels/src/pool/state.rs: replace | with ^ in state_of",
        "`front << 16` and `back` are disjoint bit fields (both are at most 0xffff), so `|` \
         and `^` give the same state",
    ),
    (
        "kernels/src/pool/state.rs: replace | with ^ in tagged",
        "`tag << 32` and the low half (claim indices, a seat count, CLOSED: all below 2^32) \
         are disjoint bit fields, so `|` and `^` give the same word",
    ),
    (
        "kernels/src/pool/shared.rs: replace > with >= in Shared::publish",
        "performance only: with no sleeper the notify_all under the lock wakes nobody, so \
         notifying always costs a lock and changes nothing else",
    ),
    (
        "kernels/src/pool/work.rs: replace && with || in Shared::work",
        "performance only: a thread whose count is not the last notifies the caller's condvar \
         too; a notified caller re-checks done == tasks and waits again",
    ),
    (
        "kernels/src/pool/wait.rs: replace && with || in wait_until",
        "performance only: the spin gives up after 64 pauses instead of about 1 ms, and the \
         blocking wait that follows is woken by the same protocol",
    ),
    (
        "kernels/src/pool/wait.rs: replace > with < in wait_until",
        "performance only: the spin gives up at its first clock check (64 pauses) instead of \
         after 1 ms; the blocking wait that follows is woken by the same protocol",
    ),
    (
        "kernels/src/pool/wait.rs: replace > with >= in wait_until",
        "the spin ends when the elapsed time reaches 1 ms instead of passing it: the two differ \
         only at an elapsed time of exactly 1 ms, by one clock check",
    ),
];

/// Where a mutant was in the source, as cargo-mutants reports it (1-based, end exclusive,
/// columns counted in chars).
#[derive(Clone, Copy, Debug)]
struct Span {
    start: (usize, usize),
    end: (usize, usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Caught,
    Missed,
    Timeout,
    Unviable,
}

#[derive(Debug)]
struct Mutant {
    /// `file:line:col: description`.
    name: String,
    file: String,
    span: Span,
    replacement: String,
    /// cargo-mutants' diff of this mutant, when it wrote one.
    diff: Option<PathBuf>,
    verdict: Verdict,
    /// Which command caught it (stage 1's tests, loom, the campaign).
    caught_by: Option<&'static str>,
    /// Whether stage 2 runs it if it survives stage 1 (its part's [`Part::stage2`]).
    stage2: bool,
}

impl Mutant {
    /// The name without line and column: stable while code above it moves.
    fn key(&self) -> String {
        strip_line_col(&self.name)
    }
}

fn strip_line_col(name: &str) -> String {
    // `path:line:col: description`.
    let mut parts = name.splitn(4, ':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(file), Some(line), Some(col), Some(rest))
            if line.parse::<usize>().is_ok() && col.parse::<usize>().is_ok() =>
        {
            format!("{file}:{rest}")
        }
        _ => name.to_owned(),
    }
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
    let tree = scratch_dir(&root);
    println!("xtask mutants: snapshot of the tree in {}", tree.display());
    snapshot(&root, &tree)?;

    // Stage 1.
    let mut mutants = Vec::new();
    for part in PARTS
        .iter()
        .filter(|p| only.is_empty() || only.contains(&p.name))
    {
        mutants.extend(run_part(part, &tree, &work)?);
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
        let mut stage = Extra::new(&tree, &work);
        let needs_loom = survivors
            .iter()
            .any(|&i| LOOM_FILES.contains(&mutants[i].file.as_str()));
        stage.baseline(needs_loom)?;
        for &i in &survivors {
            stage.test(&mut mutants[i])?;
        }
    }

    report(&mutants, started.elapsed())
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

/// The private copy of the tree that every stage works on (its path is fixed per checkout,
/// so builds in it stay incremental from one run to the next).
fn scratch_dir(root: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut h);
    std::env::temp_dir().join(format!("keepalloc-mutants-{:016x}", h.finish()))
}

/// Names never copied into the snapshot, at any depth.
const NOT_COPIED: [&str; 4] = [".git", "target", "mutants.out", "mutants.out.old"];

/// Makes `dest` an exact copy of the working tree's files (without build outputs), writing
/// only files whose content changed so that cargo's fingerprints of the rest stay fresh.
fn snapshot(root: &Path, dest: &Path) -> Result<(), String> {
    let mut files = BTreeSet::new();
    list_files(root, Path::new(""), &mut files)?;
    for rel in &files {
        let from = root.join(rel);
        let to = dest.join(rel);
        let content = fs::read(&from).map_err(|e| format!("read {}: {e}", from.display()))?;
        if fs::read(&to).ok().as_deref() != Some(&content[..]) {
            if let Some(dir) = to.parent() {
                fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            }
            fs::write(&to, &content).map_err(|e| format!("write {}: {e}", to.display()))?;
        }
    }
    // Files deleted from the tree since the last run go from the copy too.
    let mut stale = BTreeSet::new();
    if dest.exists() {
        list_files(dest, Path::new(""), &mut stale)?;
    }
    for rel in stale.difference(&files) {
        let path = dest.join(rel);
        fs::remove_file(&path).map_err(|e| format!("remove {}: {e}", path.display()))?;
    }
    Ok(())
}

fn list_files(base: &Path, rel: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), String> {
    let dir = base.join(rel);
    let entries = fs::read_dir(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        let name = entry.file_name();
        if NOT_COPIED.iter().any(|n| name == *n) {
            continue;
        }
        let kind = entry
            .file_type()
            .map_err(|e| format!("stat {}: {e}", entry.path().display()))?;
        let path = rel.join(&name);
        if kind.is_dir() {
            list_files(base, &path, out)?;
        } else if kind.is_file() {
            out.insert(path);
        }
    }
    Ok(())
}

/// Stage 1 for one part: cargo-mutants with the part's tests; returns every mutant's outcome.
fn run_part(part: &Part, tree: &Path, work: &Path) -> Result<Vec<Mutant>, String> {
    let out = work.join(part.name);
    fs::create_dir_all(&out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let mut cmd = util::cargo();
    cmd.arg("mutants")
        .arg("--dir")
        .arg(tree)
        .arg("--output")
        .arg(&out)
        .args(["--jobs", "1", "--colors", "never"])
        .args(part.select);
    for package in part.test_packages {
        cmd.args(["--test-package", package]);
    }
    if !part.test_args.is_empty() {
        cmd.arg("--").args(part.test_args);
    }
    // One target directory for every run: dependencies are built once.
    cmd.env("CARGO_TARGET_DIR", work.join("target"));
    println!(
        "xtask mutants: stage 1, {}: cargo-mutants with the tests of {}{}",
        part.name,
        part.test_packages.join(", "),
        if part.test_args.is_empty() {
            String::new()
        } else {
            format!(" ({})", part.test_args.join(" "))
        }
    );
    // cargo-mutants exits non-zero when a mutant survives: its outcomes say what happened.
    let status = cmd
        .status()
        .map_err(|e| format!("could not start cargo mutants: {e}"))?;
    let outcomes = out.join("mutants.out").join("outcomes.json");
    let text = fs::read_to_string(&outcomes).map_err(|e| {
        format!(
            "cargo mutants ({status}) wrote no {}: {e}",
            outcomes.display()
        )
    })?;
    let mut mutants = parse_outcomes(&text, &out.join("mutants.out"))?;
    for m in &mut mutants {
        m.stage2 = part.stage2;
    }
    Ok(mutants)
}

/// Reads cargo-mutants' `outcomes.json`: every mutant with its verdict. Fails when the
/// baseline (the unmutated tree) did not pass, since then no verdict means anything.
fn parse_outcomes(text: &str, dir: &Path) -> Result<Vec<Mutant>, String> {
    let json: Value =
        serde_json::from_str(text).map_err(|e| format!("outcomes.json is not JSON: {e}"))?;
    let outcomes = json["outcomes"]
        .as_array()
        .ok_or("outcomes.json has no `outcomes` list")?;
    let mut mutants = Vec::new();
    for outcome in outcomes {
        let summary = outcome["summary"].as_str().unwrap_or("");
        let scenario = &outcome["scenario"];
        if scenario.as_str() == Some("Baseline") {
            if summary != "Success" {
                return Err(format!(
                    "the unmutated tree failed its tests ({summary}); see {}",
                    dir.join("log").join("baseline.log").display()
                ));
            }
            continue;
        }
        let m = &scenario["Mutant"];
        let verdict = match summary {
            "CaughtMutant" => Verdict::Caught,
            "MissedMutant" => Verdict::Missed,
            "Timeout" => Verdict::Timeout,
            "Unviable" => Verdict::Unviable,
            other => return Err(format!("unexpected outcome `{other}` in outcomes.json")),
        };
        let pos = |v: &Value| -> Result<(usize, usize), String> {
            match (v["line"].as_u64(), v["column"].as_u64()) {
                (Some(l), Some(c)) => Ok((l as usize, c as usize)),
                _ => Err(format!("a mutant without a span: {m}")),
            }
        };
        mutants.push(Mutant {
            name: m["name"]
                .as_str()
                .ok_or("a mutant without a name")?
                .to_owned(),
            file: m["file"]
                .as_str()
                .ok_or("a mutant without a file")?
                .to_owned(),
            span: Span {
                start: pos(&m["span"]["start"])?,
                end: pos(&m["span"]["end"])?,
            },
            replacement: m["replacement"].as_str().unwrap_or("").to_owned(),
            diff: outcome["diff_path"].as_str().map(|p| dir.join(p)),
            verdict,
            caught_by: (verdict == Verdict::Caught).then_some("tests"),
            stage2: true,
        });
    }
    Ok(mutants)
}

/// The marker cargo-mutants puts after every replacement (kept so that the mutated file is
/// byte for byte the one cargo-mutants built).
const MARKER: &str = "/* ~ changed by cargo-mutants ~ */";

/// `code` with `span` replaced, as cargo-mutants' `Span::replace` does it.
fn mutate(code: &str, span: Span, replacement: &str) -> String {
    let replacement = format!("{replacement} {MARKER}");
    let mut out = String::with_capacity(code.len() + replacement.len());
    let (mut line, mut col) = (1, 1);
    for c in code.chars() {
        if (line, col) == span.start {
            out.push_str(&replacement);
        }
        if (line, col) < span.start || (line, col) >= span.end {
            out.push(c);
        }
        if c == '\n' {
            line += 1;
            col = 1;
        } else if c != '\r' {
            col += 1;
        }
    }
    if (line, col) == span.start {
        out.push_str(&replacement);
    }
    out
}

/// Stage 2: the loom models and the short campaign, on a private copy of the tree.
struct Extra<'a> {
    tree: &'a Path,
    work: PathBuf,
    logs: PathBuf,
    /// Each command's run timeout, from its baseline run.
    timeouts: BTreeMap<&'static str, Duration>,
}

/// What one command did.
enum Run {
    Passed,
    Failed,
    TimedOut,
}

/// A build that may take this long is still a build (a cold release build of the harness
/// with its kernels is the longest); only a hang gets here.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

impl<'a> Extra<'a> {
    fn new(tree: &'a Path, work: &Path) -> Self {
        Extra {
            tree,
            work: work.to_path_buf(),
            logs: work.join("extra"),
            timeouts: BTreeMap::new(),
        }
    }

    /// The command `what` (`loom` or `campaign`) in the copy: `(build, run)`. The build step
    /// is there so that a mutant that does not compile here is not counted as caught.
    fn command(&self, what: &str) -> (Command, Command) {
        let cargo = |args: &[&str]| {
            let mut cmd = Command::new(env!("CARGO"));
            cmd.current_dir(self.tree).args(args);
            if what == "loom" {
                // As `cargo xtask loom` (xtask/src/loom.rs), with its own target directory.
                cmd.env("RUSTFLAGS", "--cfg loom")
                    .env("CARGO_TARGET_DIR", self.work.join("loom"));
            } else {
                cmd.env("CARGO_TARGET_DIR", self.work.join("campaign"));
            }
            cmd
        };
        const LOOM: [&str; 6] = [
            "test",
            "--release",
            "-p",
            "keepalloc-provider",
            "--test",
            "loom",
        ];
        if what == "loom" {
            let mut build = LOOM.to_vec();
            build.push("--no-run");
            (cargo(&build), cargo(&LOOM))
        } else {
            // The harness as `cargo xtask fault-test` builds it (release, feature `controls`),
            // so that the campaign's own build of it is then a no-op.
            let build = [
                "build",
                "--release",
                "-p",
                "keepalloc-fault-inject",
                "--features",
                "controls",
                "--bin",
                "keepalloc-harness",
            ];
            let json = self.campaign_json();
            let mut campaign = cargo(&[
                "xtask",
                "fault-test",
                "--variant",
                "keepalloc",
                "--runs",
                "3",
                "--json",
            ]);
            campaign.arg(json);
            (cargo(&build), campaign)
        }
    }

    /// Where the campaign writes its report (read by [`campaign_found`]).
    fn campaign_json(&self) -> PathBuf {
        self.work.join("campaign.json")
    }

    /// Both commands must pass on the unmutated copy, or a failure says nothing about a
    /// mutant. Their run times (without the builds) set the mutants' timeouts.
    fn baseline(&mut self, needs_loom: bool) -> Result<(), String> {
        // This run's logs only.
        if self.logs.exists() {
            fs::remove_dir_all(&self.logs)
                .map_err(|e| format!("remove {}: {e}", self.logs.display()))?;
        }
        fs::create_dir_all(&self.logs)
            .map_err(|e| format!("create {}: {e}", self.logs.display()))?;
        let commands: &[&'static str] = if needs_loom {
            &["loom", "campaign"]
        } else {
            &["campaign"]
        };
        for &what in commands {
            println!("xtask mutants: stage 2 baseline: {what} on the unmutated tree");
            let (mut build, mut run) = self.command(what);
            let log = self.logs.join(format!("baseline.{what}.build.log"));
            if !matches!(run_logged(&mut build, &log, BUILD_TIMEOUT)?, Run::Passed) {
                return Err(format!(
                    "the {what} build fails on the unmutated tree: see {}",
                    log.display()
                ));
            }
            let log = self.logs.join(format!("baseline.{what}.log"));
            let t = Instant::now();
            if !matches!(run_logged(&mut run, &log, BUILD_TIMEOUT)?, Run::Passed) {
                return Err(format!(
                    "{what} fails on the unmutated tree: see {}",
                    log.display()
                ));
            }
            self.timeouts.insert(what, timeout_after(t.elapsed()));
        }
        Ok(())
    }

    /// Applies `m` to the copy, runs loom (when it sees the file) then the campaign, restores
    /// the file, and updates the verdict.
    fn test(&self, m: &mut Mutant) -> Result<(), String> {
        let path = self.tree.join(&m.file);
        let original =
            fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let mutated = mutate(&original, m.span, &m.replacement);
        check_against_diff(m, &mutated)?;
        fs::write(&path, &mutated).map_err(|e| format!("write {}: {e}", path.display()))?;
        let result = self.test_applied(m);
        fs::write(&path, &original).map_err(|e| format!("restore {}: {e}", path.display()))?;
        result
    }

    fn test_applied(&self, m: &mut Mutant) -> Result<(), String> {
        let slug: String = m
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(120)
            .collect();
        let mut commands = Vec::new();
        if LOOM_FILES.contains(&m.file.as_str()) {
            commands.push("loom");
        }
        commands.push("campaign");
        let mut timed_out = false;
        for what in commands {
            let (mut build, mut run) = self.command(what);
            let log = self.logs.join(format!("{slug}.{what}.build.log"));
            match run_logged(&mut build, &log, BUILD_TIMEOUT)? {
                Run::Passed => {}
                Run::Failed => {
                    println!("unviable {} under {what}: it does not build", m.name);
                    continue;
                }
                Run::TimedOut => {
                    println!("TIMEOUT  {} building for {what}", m.name);
                    timed_out = true;
                    continue;
                }
            }
            let log = self.logs.join(format!("{slug}.{what}.log"));
            let t = Instant::now();
            let timeout = self.timeouts[what];
            if what == "campaign" {
                // A report left by an earlier mutant must not speak for this one.
                let _ = fs::remove_file(self.campaign_json());
            }
            let outcome = run_logged(&mut run, &log, timeout)?;
            let secs = t.elapsed().as_secs();
            match outcome {
                // The campaign also fails on runs that prove nothing (a hung run, a harness
                // error): only a finding in a keepalloc row catches a mutant.
                Run::Failed if what == "campaign" && !campaign_found(&self.campaign_json()) => {
                    println!(
                        "TIMEOUT  {} under the campaign after {secs}s: it failed on \
                         inconclusive runs only (no finding; see {})",
                        m.name,
                        log.display()
                    );
                    timed_out = true;
                }
                Run::Failed => {
                    println!("CAUGHT   {} by {what} in {secs}s", m.name);
                    m.verdict = Verdict::Caught;
                    m.caught_by = Some(what);
                    return Ok(());
                }
                Run::TimedOut => {
                    println!("TIMEOUT  {} under {what} after {secs}s", m.name);
                    timed_out = true;
                }
                Run::Passed => println!("passed   {} under {what} in {secs}s", m.name),
            }
        }
        if timed_out {
            m.verdict = Verdict::Timeout;
        }
        Ok(())
    }
}

/// Whether the campaign report at `path` holds a finding in a keepalloc (non-control) row:
/// a detection its witnesses named, not only inconclusive runs (timeouts, harness errors,
/// which the campaign also counts against keepalloc). No report, or one that cannot be read,
/// is no finding.
fn campaign_found(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        return false;
    };
    let Ok(report) = serde_json::from_str::<Value>(&text) else {
        return false;
    };
    report["rows"].as_array().is_some_and(|rows| {
        rows.iter().any(|r| {
            r["control"] == Value::Bool(false)
                && r["detections"]
                    .as_object()
                    .is_some_and(|d| d.values().any(|n| n.as_u64().is_some_and(|n| n > 0)))
        })
    })
}

/// A mutant's run timeout from the baseline's run time: generous, since it only stops a hang
/// (the campaign's harness kills a hung run itself after 60 s).
fn timeout_after(baseline: Duration) -> Duration {
    (baseline * 5).max(Duration::from_secs(120))
}

/// Guards against applying a mutant to a file that is not the one cargo-mutants mutated:
/// every line cargo-mutants' diff adds must be in our mutated text.
fn check_against_diff(m: &Mutant, mutated: &str) -> Result<(), String> {
    let Some(diff) = &m.diff else {
        return Ok(());
    };
    let text = fs::read_to_string(diff).map_err(|e| format!("read {}: {e}", diff.display()))?;
    let lines: BTreeSet<&str> = mutated.lines().collect();
    for added in text
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
    {
        if !lines.contains(&added[1..]) {
            return Err(format!(
                "could not reproduce {} (its diff adds `{}`)",
                m.name,
                &added[1..]
            ));
        }
    }
    Ok(())
}

/// Runs `cmd` with its output in `log`, killing its whole process group after `timeout`.
fn run_logged(cmd: &mut Command, log: &Path, timeout: Duration) -> Result<Run, String> {
    let file = fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("clone {}: {e}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(file).stderr(err);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            return Ok(if status.success() {
                Run::Passed
            } else {
                Run::Failed
            });
        }
        if Instant::now() >= deadline {
            // The process group we created for this child: cargo, the test binaries, harnesses.
            #[cfg(unix)]
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let _ = writeln!(
                fs::OpenOptions::new()
                    .append(true)
                    .open(log)
                    .map_err(|e| e.to_string())?,
                "xtask mutants: killed after {}s",
                timeout.as_secs()
            );
            return Ok(Run::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Prints survivors, the documented equivalents, the score and the final line; fails below
/// the bar unless every missed mutant is a documented equivalent.
fn report(mutants: &[Mutant], elapsed: Duration) -> Result<(), String> {
    let mut counts: BTreeMap<Verdict, usize> = BTreeMap::new();
    for m in mutants {
        *counts.entry(m.verdict).or_default() += 1;
    }
    let count = |v| counts.get(&v).copied().unwrap_or(0);
    let (caught, missed, timeout, unviable) = (
        count(Verdict::Caught),
        count(Verdict::Missed),
        count(Verdict::Timeout),
        count(Verdict::Unviable),
    );
    let equivalent: BTreeMap<&str, &str> = EQUIVALENT.iter().copied().collect();

    let late: Vec<&Mutant> = mutants
        .iter()
        .filter(|m| matches!(m.caught_by, Some("loom" | "campaign")))
        .collect();
    if !late.is_empty() {
        println!("\ncaught only by stage 2:");
        for m in late {
            println!("  {} (by {})", m.name, m.caught_by.unwrap_or("?"));
        }
    }

    let mut undocumented = 0;
    let survivors: Vec<&Mutant> = mutants
        .iter()
        .filter(|m| matches!(m.verdict, Verdict::Missed | Verdict::Timeout))
        .collect();
    println!("\nsurvivors ({}):", survivors.len());
    for m in &survivors {
        let label = if m.verdict == Verdict::Missed {
            "MISSED "
        } else {
            "TIMEOUT"
        };
        match equivalent.get(m.key().as_str()) {
            Some(reason) => println!("  {label} {}\n          equivalent: {reason}", m.name),
            None => {
                if m.verdict == Verdict::Missed {
                    undocumented += 1;
                }
                println!("  {label} {}", m.name);
            }
        }
    }

    println!("\ndocumented equivalent mutants ({}):", EQUIVALENT.len());
    for (key, reason) in EQUIVALENT {
        let seen = mutants.iter().find(|m| m.key() == *key);
        let state = match seen.map(|m| m.verdict) {
            None => "not generated this run",
            Some(Verdict::Missed) => "survived, as expected",
            Some(Verdict::Caught) => "CAUGHT this run: remove it from the list",
            Some(Verdict::Timeout) => "timed out",
            Some(Verdict::Unviable) => "unviable",
        };
        println!("  {key}\n      {reason} [{state}]");
    }

    let viable = caught + missed + timeout;
    let score = if viable == 0 {
        1.0
    } else {
        caught as f64 / viable as f64
    };
    let ok = score >= REQUIRED_SCORE || undocumented == 0;
    println!(
        "\nscore: {caught} of {viable} viable mutants caught ({:.1}%; required {:.0}%{}); \
         {undocumented} missed mutant(s) not documented as equivalent; wall time {}m{:02}s; \
         reports in target/mutants/",
        score * 100.0,
        REQUIRED_SCORE * 100.0,
        if score < REQUIRED_SCORE && ok {
            ", met because every missed mutant is a documented equivalent"
        } else {
            ""
        },
        elapsed.as_secs() / 60,
        elapsed.as_secs() % 60
    );
    println!("mutants: caught {caught}, missed {missed}, timeout {timeout}, unviable {unviable}");
    let _ = std::io::stdout().flush();
    if ok {
        Ok(())
    } else {
        // The summary line above is the command's last word; fail without another line.
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_finding_in_a_keepalloc_row_catches_a_mutant() {
        let dir = std::env::temp_dir().join(format!("keepalloc-mutants-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let report = |rows: Value| {
            let path = dir.join("campaign.json");
            fs::write(
                &path,
                serde_json::json!({ "passed": false, "rows": rows }).to_string(),
            )
            .unwrap();
            campaign_found(&path)
        };
        let row = |control: bool, detections: Value| {
            serde_json::json!({ "control": control, "detections": detections,
                                "inconclusive_reasons": { "timeout": 3 } })
        };
        // A keepalloc row that found something: caught.
        assert!(report(serde_json::json!([row(
            false,
            serde_json::json!({ "second-owner": 1 })
        )])));
        // Only hung runs (inconclusive) in keepalloc's rows: the campaign failed, no catch.
        assert!(!report(serde_json::json!([row(
            false,
            serde_json::json!({})
        )])));
        // A control's detections are the control's, not the mutant's.
        assert!(!report(serde_json::json!([row(
            true,
            serde_json::json!({ "use-after-free": 3 })
        )])));
        // No report at all (the campaign died before writing it): no catch.
        assert!(!campaign_found(&dir.join("missing.json")));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mutate_replaces_the_span_like_cargo_mutants() {
        let code = "fn f() -> u8 {\n    1 + 2\n}\n";
        let span = Span {
            start: (2, 5),
            end: (2, 10),
        };
        assert_eq!(
            mutate(code, span, "0"),
            format!("fn f() -> u8 {{\n    0 {MARKER}\n}}\n")
        );
        // A multi-line span, and a deletion (empty replacement).
        let span = Span {
            start: (1, 14),
            end: (3, 2),
        };
        assert_eq!(mutate(code, span, ""), format!("fn f() -> u8  {MARKER}\n"));
        // Columns count chars, not bytes.
        let code = "// ─ é\nlet x = a == b;\n";
        let span = Span {
            start: (2, 11),
            end: (2, 13),
        };
        assert_eq!(
            mutate(code, span, "!="),
            format!("// ─ é\nlet x = a != {MARKER} b;\n")
        );
    }

    #[test]
    fn names_are_matched_without_line_and_column() {
        assert_eq!(
            strip_line_col("provider/src/cell.rs:107:9: replace f -> bool with true"),
            "provider/src/cell.rs: replace f -> bool with true"
        );
        assert_eq!(strip_line_col("no location"), "no location");
    }

    #[test]
    fn equivalents_are_unique_and_explained() {
        let mut seen = BTreeSet::new();
        for (key, reason) in EQUIVALENT {
            assert!(seen.insert(*key), "listed twice: {key}");
            assert!(reason.len() > 20, "explain why {key} is equivalent");
            assert_eq!(strip_line_col(key), *key, "list {key} without line:col");
        }
    }

    #[test]
    fn outcomes_are_parsed_and_a_failed_baseline_is_an_error() {
        let ok = r#"{"outcomes":[
            {"scenario":"Baseline","summary":"Success","diff_path":null},
            {"scenario":{"Mutant":{"name":"a.rs:1:2: replace f with ()","file":"a.rs",
              "span":{"start":{"line":1,"column":2},"end":{"line":1,"column":5}},
              "replacement":"()"}},"summary":"MissedMutant","diff_path":"diff/a.diff"},
            {"scenario":{"Mutant":{"name":"a.rs:3:1: x","file":"a.rs",
              "span":{"start":{"line":3,"column":1},"end":{"line":3,"column":2}},
              "replacement":"y"}},"summary":"CaughtMutant","diff_path":null}]}"#;
        let ms = parse_outcomes(ok, Path::new("/o")).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].verdict, Verdict::Missed);
        assert_eq!(ms[0].span.start, (1, 2));
        assert_eq!(ms[0].diff.as_deref(), Some(Path::new("/o/diff/a.diff")));
        assert_eq!(ms[1].verdict, Verdict::Caught);
        let failed = ok.replacen("\"Success\"", "\"Failure\"", 1);
        assert!(parse_outcomes(&failed, Path::new("/o")).is_err());
    }
}
