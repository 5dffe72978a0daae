//! `cargo xtask miri`, `cargo xtask asan` and `cargo xtask tsan`: the provider and allocator
//! tests under Miri, the fault campaign under AddressSanitizer, and the provider's tests, the
//! kernels' pool tests and the fault harness under ThreadSanitizer, where the nightly
//! toolchain allows.
//!
//! All three need nightly, reached through rustup (`cargo +nightly`). Where rustup, nightly
//! or a needed component is missing, or the host has no such sanitizer, they print
//! `skipped: <why>` and succeed: a machine without nightly is not a failure of the code.
//! Under CI (`CI=true`) or with `--require`, every such reason is an error instead: CI must
//! not report a sanitizer as passed that never ran. Once everything is there, a failed build
//! is a failure, never a skip.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::fault_test;
use crate::util;

/// Whether a reason to skip is an error, and why.
#[derive(Clone, Copy, Debug)]
struct Require(Option<&'static str>);

impl Require {
    /// Takes `--require` out of `args`; required when it was there or when `CI=true`.
    fn take(args: &[String]) -> (Require, Vec<String>) {
        let flag = args.iter().any(|a| a == "--require");
        let rest = args.iter().filter(|a| *a != "--require").cloned().collect();
        let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
        let why = if flag {
            Some("--require")
        } else if ci {
            Some("CI=true")
        } else {
            None
        };
        (Require(why), rest)
    }

    /// Prints why `command` was skipped and succeeds, or fails with the reason when
    /// required.
    fn skipped(self, command: &str, why: &str) -> Result<(), String> {
        match self.0 {
            Some(because) => Err(format!(
                "{command}: cannot run, and skipping is an error ({because}): {why}"
            )),
            None => {
                println!("{command}: skipped: {why} (CI=true or --require make this an error)");
                Ok(())
            }
        }
    }
}

/// A `cargo +nightly` command at the workspace root, through the rustup proxy (the
/// `CARGO` that built xtask is a toolchain's own cargo and does not understand `+nightly`).
fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly").current_dir(util::root());
    // Set by the outer `cargo run`; they would pin the inner cargo to the outer toolchain.
    for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC"] {
        cmd.env_remove(var);
    }
    cmd
}

/// `Ok(version)` when `cmd` runs and succeeds, `Err(reason)` otherwise.
fn probe(mut cmd: Command) -> Result<String, String> {
    cmd.stdin(Stdio::null());
    match cmd.output() {
        Err(e) => Err(format!("could not run {cmd:?}: {e}")),
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed")
            .trim()
            .to_string()),
    }
}

fn nightly_available() -> Result<String, String> {
    let mut cmd = nightly_cargo();
    cmd.arg("--version");
    probe(cmd).map_err(|e| format!("no nightly toolchain through rustup ({e})"))
}

const MIRI_HELP: &str = "\
usage: cargo xtask miri [--full] [--require] [args for `cargo miri test`]

Runs keepalloc-allocators' and keepalloc-provider's tests, then two of the kernels
pool's, under Miri (nightly, components miri and rust-src: `rustup component add miri
rust-src --toolchain nightly`), with MIRIFLAGS=-Zmiri-disable-isolation unless MIRIFLAGS
is set. Target dir: target/miri.

By default (and in CI) it runs a stated subset: every test of both packages (lib,
integration tests, doc tests) except these three, which together take over 20 minutes
under Miri on 2 cores:
  - conformance::default_backend_is_the_feature_selected_one: the conformance suite with
    the heavier QUICK options on System, the default backend (`system` runs the suite on
    System and its table with Miri's options; ~180 s)
  - the doc test of allocators/src/conformance.rs: the suite with QUICK options on
    Counting<System> (`counting_system_balances` runs it with Miri's options; ~150 s)
  - observers::allocate_zeroed_zeroes_memory_that_was_dirty: dirties, frees and checks
    1 MiB blocks byte by byte, 4 rounds a size (~19 min; natively it runs in
    `cargo test`)
The subset takes about 5 minutes on a busy 2-core machine from a clean target dir (build
and `cargo miri setup` included); everything took 22 minutes.

Then, with or without --full, the kernels pool: its tests
what_tasks_write_is_the_callers_after_run and a_sleeping_worker_is_woken_by_the_next_job
under Miri's data-race detector (the other pool tests are too slow under Miri or reach
inline assembly), and the same two built as the pool's done_relaxed mutant (a worker
counts its finished tasks with a relaxed add). The pool must pass; the mutant must fail
with Miri's data race between a pool worker and the test's thread in kernels/src/pool.rs.
A mutant that passes, or fails any other way (inconclusive), fails the command.

  --full      run everything, the three above included
  --require   fail instead of printing `skipped` when nightly, miri or rust-src is
              missing (implied by CI=true)
";

/// Test-name filters (`--skip`) of the default subset: see [`MIRI_HELP`].
const MIRI_SKIPPED: [&str; 3] = [
    "default_backend_is_the_feature_selected_one",
    "src/conformance.rs",
    "allocate_zeroed_zeroes_memory_that_was_dirty",
];

/// `cargo xtask miri [--full] [args for cargo miri test]`: the allocator and provider tests
/// under Miri (a stated subset unless `--full`).
pub fn miri(args: &[String]) -> Result<(), String> {
    let (require, mut args) = Require::take(args);
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{MIRI_HELP}");
        return Ok(());
    }
    let full = args.iter().any(|a| a == "--full");
    args.retain(|a| a != "--full");
    if !full {
        if !args.iter().any(|a| a == "--") {
            args.push("--".into());
        }
        for name in MIRI_SKIPPED {
            args.extend(["--skip".to_string(), name.to_string()]);
        }
    }
    if let Err(why) = nightly_available() {
        return require.skipped("miri", &why);
    }
    let mut probe_cmd = nightly_cargo();
    probe_cmd.args(["miri", "--version"]);
    if let Err(why) = probe(probe_cmd) {
        return require.skipped(
            "miri",
            &format!(
                "the nightly toolchain has no miri component \
                 (`rustup component add miri rust-src --toolchain nightly`): {why}"
            ),
        );
    }
    let mut sysroot = nightly_cargo();
    sysroot.args(["miri", "setup"]);
    if let Err(why) = probe(sysroot) {
        return require.skipped(
            "miri",
            &format!("`cargo miri setup` failed (is rust-src installed?): {why}"),
        );
    }
    eprintln!(
        "miri: {}",
        if full {
            "everything (--full)".to_string()
        } else {
            format!("the subset: all but {MIRI_SKIPPED:?} (--full runs them too)")
        }
    );
    let mut cmd = nightly_cargo();
    cmd.args([
        "miri",
        "test",
        "-p",
        "keepalloc-allocators",
        "-p",
        "keepalloc-provider",
    ])
    .args(&args)
    .env("CARGO_TARGET_DIR", util::root().join("target").join("miri"));
    // Miri checks the strict provenance model and many threads slowly; isolation off so
    // tests may read the clock.
    cmd.env(
        "MIRIFLAGS",
        std::env::var("MIRIFLAGS").unwrap_or_else(|_| "-Zmiri-disable-isolation".into()),
    );
    let started = Instant::now();
    let result = util::run(&mut cmd);
    eprintln!("miri: took {:.0} s", started.elapsed().as_secs_f64());
    result?;
    miri_pool()
}

/// The kernels pool's tests that run under Miri: the one whose tasks write what the caller
/// reads after `run`, the one that hands a sleeping worker its next job, and the one whose
/// worker finds nothing to claim. The others do not fit:
/// `ranges_cover_every_task_exactly_once_and_our_pool_hands_out_runs` ran past 12 minutes,
/// and the operator tests reach inline assembly, which Miri cannot run.
const MIRI_POOL_TESTS: [&str; 3] = [
    POOL_WITNESS_TEST,
    "a_sleeping_worker_is_woken_by_the_next_job",
    POOL_SLOT_WITNESS_TEST,
];

/// The pool's mutants under Miri, each with the test that must fail with its data race.
const MIRI_POOL_MUTANTS: [(&str, &str); 2] = [
    ("done_relaxed", POOL_WITNESS_TEST),
    ("job_before_claim", POOL_SLOT_WITNESS_TEST),
];

/// How the `job_before_claim` mutant's early read of the job slot begins in
/// `kernels/src/pool.rs` (the one line there that binds `early`).
const SLOT_EARLY_READ: &str = "let early = ";

/// `cargo miri test` of `tests` in the pool's test file, as the pool is or as `mutant`.
fn miri_pool_command(mutant: Option<&str>, tests: &[&str]) -> Command {
    let mut cmd = nightly_cargo();
    cmd.args(["miri", "test", "-p", "keepalloc-kernels", "--test", "pool"]);
    if let Some(mutant) = mutant {
        // The `dev` profile is the one `cargo miri test` builds with.
        cmd.args(["-Zprofile-rustflags", "--config"])
            .arg(pool_mutant_config("dev", mutant));
    }
    cmd.arg("--")
        .args(tests)
        .args(["--exact", "--test-threads", "1"]);
    let flags = std::env::var("MIRIFLAGS").unwrap_or_else(|_| "-Zmiri-disable-isolation".into());
    cmd.env("CARGO_TARGET_DIR", util::root().join("target").join("miri"))
        // The tests' deadlock watchdog reads the real clock (isolation off), and Miri runs
        // the pool thousands of times slower than the machine: the watchdog is moved out of
        // the way. Forwarded explicitly too, for a MIRIFLAGS that keeps isolation on.
        .env(
            "MIRIFLAGS",
            format!("{flags} -Zmiri-env-forward=KEEPALLOC_TEST_DEADLOCK_SECS"),
        )
        .env("KEEPALLOC_TEST_DEADLOCK_SECS", "100000")
        .stdin(Stdio::null());
    cmd
}

/// One access of a data race as Miri reports it.
#[derive(Debug, PartialEq, Eq)]
struct MiriAccess {
    /// "non-atomic read", "retag read", "deallocation", ...
    what: String,
    /// The thread's name (truncated to 15 bytes) or `unnamed-N`.
    thread: String,
    /// `file:line` of the access, if Miri gave it.
    at: Option<String>,
}

/// The first data race Miri reports in `stderr`: access (1), the earlier one, and (2).
fn parse_miri_race(stderr: &str) -> Option<(MiriAccess, MiriAccess)> {
    const HEADER: &str = "Undefined Behavior: Data race detected between (1) ";
    let lines: Vec<&str> = stderr.lines().collect();
    let h = lines.iter().position(|l| l.contains(HEADER))?;
    // "(1) WHAT on thread `T1` and (2) WHAT on thread `T2` at allocN"
    let rest = &lines[h][lines[h].find(HEADER)? + HEADER.len()..];
    let access = |text: &str| -> Option<(String, String)> {
        let (what, thread) = text.split_once(" on thread `")?;
        Some((what.to_string(), thread.split('`').next()?.to_string()))
    };
    let (first, second) = rest.split_once("` and (2) ")?;
    let (what1, thread1) = access(&format!("{first}`"))?;
    let (what2, thread2) = access(second)?;
    // `file:line` of a ` --> file:line:col` line.
    let place = |line: &str| {
        let path = line.trim().strip_prefix("--> ")?;
        let mut parts = path.rsplitn(3, ':');
        let _col = parts.next()?;
        let line = parts.next()?;
        Some(format!("{}:{line}", parts.next()?))
    };
    // (2)'s place is the first after the header; (1)'s follows "and (1) occurred earlier".
    let at2 = lines[h + 1..].iter().find_map(|l| place(l));
    let earlier = lines[h..]
        .iter()
        .position(|l| l.contains("(1) occurred earlier here"))
        .map(|i| h + i);
    let at1 = earlier.and_then(|e| lines.get(e + 1).and_then(|l| place(l)));
    Some((
        MiriAccess {
            what: what1,
            thread: thread1,
            at: at1,
        },
        MiriAccess {
            what: what2,
            thread: thread2,
            at: at2,
        },
    ))
}

/// Whether Miri's report in `stderr` is the pool mutant `mutant`'s own bug, found with the
/// test `test`; `early_read` is the `file:line` of the `job_before_claim` mutant's read.
///
/// Both mutants leave something a worker did during a job unordered before the caller's
/// return from `run`, and the first race Miri meets is the same shape: (1) an access on a
/// pool worker (Miri names them `unnamed-N`) in the pool, racing with (2) the deallocation
/// of `run`'s frame on the test's own thread, in the pool. For `done_relaxed` (1) is the
/// worker's use of the task (the relaxed count of finished tasks orders nothing); for
/// `job_before_claim` it must be the early read of the job slot itself.
fn miri_pool_race(stderr: &str, mutant: &str, test: &str, early_read: &str) -> Option<String> {
    let (first, second) = parse_miri_race(stderr)?;
    let in_pool = |a: &MiriAccess| {
        a.at.as_deref()
            .is_some_and(|at| at.starts_with(POOL_SOURCE))
    };
    // Miri truncates a thread's name to 15 bytes, as Linux does.
    let on_test = !second.thread.is_empty() && test.starts_with(&second.thread);
    let shape = first.thread.starts_with("unnamed-")
        && in_pool(&first)
        && on_test
        && second.what == "deallocation"
        && in_pool(&second);
    let own = match mutant {
        "job_before_claim" => first.at.as_deref() == Some(early_read),
        _ => first.at.as_deref() != Some(early_read),
    };
    (shape && own).then(|| {
        format!(
            "(1) {} on `{}` at {}, (2) {} on `{}` at {}",
            first.what,
            first.thread,
            first.at.as_deref().unwrap_or("?"),
            second.what,
            second.thread,
            second.at.as_deref().unwrap_or("?")
        )
    })
}

/// The `file:line` of the `job_before_claim` mutant's early read, found in the source.
fn slot_early_read() -> Result<String, String> {
    let path = util::root().join("kernels/src/pool.rs");
    let source = std::fs::read_to_string(&path)
        .map_err(|e| format!("miri: reading {}: {e}", path.display()))?;
    let lines: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with(SLOT_EARLY_READ))
        .map(|(i, _)| i + 1)
        .collect();
    match lines[..] {
        [line] => Ok(format!("{POOL_SOURCE}{line}")),
        _ => Err(format!(
            "miri: kernels/src/pool.rs should have one line starting `{SLOT_EARLY_READ}`, has {}",
            lines.len()
        )),
    }
}

/// The pool under Miri: [`MIRI_POOL_TESTS`] pass as the pool is, and each of
/// [`MIRI_POOL_MUTANTS`] fails its test with its own data race (any other failure is
/// inconclusive and fails the command; so does a mutant that passes).
fn miri_pool() -> Result<(), String> {
    let early_read = slot_early_read()?;
    let started = Instant::now();
    eprintln!("miri: the kernels pool: {MIRI_POOL_TESTS:?}");
    let out = miri_pool_command(None, &MIRI_POOL_TESTS)
        .output()
        .map_err(|e| format!("miri: could not run cargo miri for the pool: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!("test result: ok. {} passed", MIRI_POOL_TESTS.len());
    if !out.status.success() || !stdout.contains(&expected) {
        return Err(format!(
            "miri: the kernels pool failed ({}; expected `{expected}`)\n--- stdout\n{stdout}--- stderr\n{stderr}",
            out.status
        ));
    }
    eprintln!(
        "miri: the kernels pool: {expected} ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    for (mutant, test) in MIRI_POOL_MUTANTS {
        let started = Instant::now();
        let out = miri_pool_command(Some(mutant), &[test])
            .output()
            .map_err(|e| format!("miri: could not run cargo miri for the {mutant} mutant: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            return Err(format!(
                "miri: the pool's {mutant} mutant was not caught: {test} passed\n--- stdout\n{stdout}"
            ));
        }
        match miri_pool_race(&stderr, mutant, test, &early_read) {
            Some(report) => eprintln!(
                "miri: the pool's {mutant} mutant: {test} caught by its data race ({:.0} s): {report}",
                started.elapsed().as_secs_f64()
            ),
            None => {
                return Err(format!(
                    "miri: the pool's {mutant} mutant failed {test} without its signature (a \
                     data race between a pool worker's access and the deallocation of run's \
                     frame on the test's thread, both in kernels/src/pool.rs; for \
                     job_before_claim the worker's access at {early_read}): inconclusive \
                     ({})\n--- stdout\n{stdout}--- stderr\n{stderr}",
                    out.status
                ));
            }
        }
    }
    Ok(())
}

/// The host target triple of the nightly toolchain.
fn host_triple() -> Result<String, String> {
    let mut cmd = Command::new("rustc");
    cmd.args(["+nightly", "-vV"]).env_remove("RUSTUP_TOOLCHAIN");
    let info = probe_all(cmd)?;
    info.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV printed no host".into())
}

fn probe_all(mut cmd: Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("could not run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `cargo xtask asan [fault-test options]`: builds the harness with
/// `-Zsanitizer=address` (no `-Zbuild-std` needed: std itself is not instrumented, which
/// is enough to catch the harness's and the libraries' own accesses) and runs the fault
/// campaign against it. Defaults to 20 runs per row (an ASan run costs ~5x a plain one).
pub fn asan(args: &[String]) -> Result<(), String> {
    let (require, args) = Require::take(args);
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!(
            "usage: cargo xtask asan [--require] [fault-test options]\n\n\
             Builds keepalloc-harness with -Zsanitizer=address (nightly; target dir\n\
             target/asan) and runs the fault-test campaign against it, 20 runs a row unless\n\
             --runs says otherwise (see `cargo xtask fault-test --help` for the options).\n\
             --require fails instead of printing `skipped` when nightly is missing or\n\
             the host has no AddressSanitizer (implied by CI=true); a failed build\n\
             always fails.\n"
        );
        return Ok(());
    }
    if let Err(why) = nightly_available() {
        return require.skipped("asan", &why);
    }
    let host = match host_triple() {
        Ok(h) => h,
        Err(why) => {
            return require.skipped("asan", &format!("could not ask nightly rustc: {why}"));
        }
    };
    if !host.contains("linux") && !host.contains("apple") {
        return require.skipped(
            "asan",
            &format!("AddressSanitizer is not supported on {host}"),
        );
    }
    let mut cmd = nightly_cargo();
    cmd.args(crate::fault_test::HARNESS_BUILD_ARGS)
        .args(["--target", &host])
        .env("RUSTFLAGS", "-Zsanitizer=address")
        .env("CARGO_TARGET_DIR", util::root().join("target").join("asan"));
    eprintln!("asan: building keepalloc-harness with -Zsanitizer=address for {host}");
    let built = Instant::now();
    // Nightly is there and the host supported: a failed build is a failure (of our code
    // or of nightly's sanitizer support), never a skip.
    let harness = fault_test::executable_from(cmd, "keepalloc-harness")
        .map_err(|why| format!("asan: building with AddressSanitizer failed: {why}"))?;
    eprintln!("asan: build took {:.0} s", built.elapsed().as_secs_f64());
    let mut argv: Vec<String> = args.to_vec();
    if !argv.iter().any(|a| a.starts_with("--runs")) {
        argv.extend(["--runs".to_string(), "20".to_string()]);
    }
    let mut options = fault_test::Options::parse(&argv)?;
    options.env.push((
        "ASAN_OPTIONS".into(),
        format!(
            "exitcode={}:detect_leaks=0:abort_on_error=0",
            fault_test::ASAN_EXIT
        ),
    ));
    options.label = Some("AddressSanitizer".into());
    let ran = Instant::now();
    let result = fault_test::campaign(&harness, &options);
    eprintln!("asan: campaign took {:.0} s", ran.elapsed().as_secs_f64());
    result
}

// ---------------------------------------------------------------------------------------
// ThreadSanitizer
// ---------------------------------------------------------------------------------------

const TSAN_HELP: &str = "\
usage: cargo xtask tsan [options]

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
     read of it (kernels/src/pool.rs).

A control run counts as reported only when a report shows its signature: for `racy`, an
access in the controls' own code (fault-inject/src/controls/); for the done_relaxed mutant,
the task_writes / caller_reads race in kernels/tests/pool.rs; for the job_before_claim
mutant, run_ranges_with's write racing with worker's read in kernels/src/pool.rs. A run
that times out, or dies without a ThreadSanitizer report, or in which ThreadSanitizer
itself fails, or a control run reported only elsewhere, is inconclusive and makes the
command fail. Exit 0 only when
everything that must be clean is clean and every control is reported in every run.
TSAN_OPTIONS gets atexit_sleep_ms=0:halt_on_error=0:exitcode=66 (yours are appended), and
KEEPALLOC_TEST_DEADLOCK_SECS half of --timeout (the pool tests' watchdog: a hung test is
named on stderr and aborts, which is inconclusive too).
Logs of every run that was not clean: target/tsan/logs/.

options:
  --runs N          fresh processes per harness row and of each pool mutant (default 20)
  --test-runs N     runs of each provider and kernels test binary (default 3)
  --seed N          base seed of the harness runs; run i uses N+i (default: from the clock)
  --timeout SECS    a process that takes longer is killed: inconclusive (default 300)
  --require         fail instead of printing `skipped` when nightly or rust-src is
                    missing or the host has no ThreadSanitizer (implied by CI=true); a
                    failed build always fails
";

/// Exit code ThreadSanitizer is told to use when it reported something.
const TSAN_EXIT: i32 = 66;

/// The marker of a ThreadSanitizer report on stderr.
const TSAN_WARNING: &str = "WARNING: ThreadSanitizer: ";

#[derive(Debug)]
struct TsanOptions {
    runs: usize,
    test_runs: usize,
    seed: u64,
    timeout: Duration,
}

impl TsanOptions {
    /// `Ok(None)` for `--help`.
    fn parse(args: &[String]) -> Result<Option<TsanOptions>, String> {
        let mut o = TsanOptions {
            runs: 20,
            test_runs: 3,
            seed: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs() % 1_000_000)
                .unwrap_or(1),
            timeout: Duration::from_secs(300),
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
            let number = |v: String| -> Result<u64, String> {
                v.parse()
                    .map_err(|_| format!("{flag} takes a number, not `{v}`"))
            };
            match flag {
                "--runs" => o.runs = number(value()?)? as usize,
                "--test-runs" => o.test_runs = number(value()?)? as usize,
                "--seed" => o.seed = number(value()?)?,
                "--timeout" => o.timeout = Duration::from_secs(number(value()?)?),
                "--help" | "-h" => return Ok(None),
                other => return Err(format!("unknown option `{other}`\n{TSAN_HELP}")),
            }
        }
        if o.runs == 0 || o.test_runs == 0 || o.timeout.is_zero() {
            return Err("--runs, --test-runs and --timeout must be positive".into());
        }
        Ok(Some(o))
    }
}

/// One ThreadSanitizer report, condensed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Report {
    /// "data race", "thread leak", "heap-use-after-free", ...
    kind: String,
    /// Each access: its header ("Atomic write of size 8 at 0x.. by thread T3") and its first
    /// frame in the workspace ("fault-inject/src/controls/racy.rs:73 (acquire)").
    accesses: Vec<(String, Option<String>)>,
    /// "heap block", "global", ... (what the `Location is` line says), if any.
    location: Option<String>,
}

/// The negative controls' own code: a report with an access there is the `racy` control's
/// signature (its atomic store of the shared table racing with the library's copy, its owner
/// code against the reads of a freed owner). A report elsewhere is no catch.
const CONTROL_CODE: &str = "fault-inject/src/controls/";

impl Report {
    /// One of the accesses is in the controls' own code ([`CONTROL_CODE`]).
    fn in_control(&self) -> bool {
        self.accesses.iter().any(|(_, frame)| {
            frame
                .as_deref()
                .is_some_and(|f| f.starts_with(CONTROL_CODE))
        })
    }

    /// What kind of report this is, independent of addresses and threads: the kind, the
    /// two access kinds (sorted) and the kind of memory, e.g. `data race: atomic write +
    /// read` or `data race: read + write, heap block`.
    fn label(&self) -> String {
        let mut kinds: Vec<String> = self
            .accesses
            .iter()
            .map(|(header, _)| {
                let what = header.split(" of size").next().unwrap_or(header).trim();
                what.strip_prefix("Previous ")
                    .unwrap_or(what)
                    .to_ascii_lowercase()
            })
            .collect();
        kinds.sort();
        let mut label = self.kind.clone();
        if !kinds.is_empty() {
            label = format!("{label}: {}", kinds.join(" + "));
        }
        if let Some(location) = &self.location {
            label = format!("{label}, {location}");
        }
        label
    }
}

/// The ThreadSanitizer reports in `stderr`; frames are shown relative to `root` and only
/// the first one inside it is kept per access.
fn parse_reports(stderr: &str, root: &str) -> Vec<Report> {
    let mut reports: Vec<Report> = Vec::new();
    let mut want_frame = false;
    for line in stderr.lines() {
        if let Some(rest) = line.split(TSAN_WARNING).nth(1) {
            reports.push(Report {
                kind: rest.split(" (").next().unwrap_or(rest).trim().to_string(),
                accesses: Vec::new(),
                location: None,
            });
            want_frame = false;
            continue;
        }
        let Some(report) = reports.last_mut() else {
            continue;
        };
        if line.starts_with("SUMMARY:") || line.starts_with("==================") {
            want_frame = false;
            continue;
        }
        let trimmed = line.trim();
        if let Some(location) = trimmed.strip_prefix("Location is ") {
            if report.location.is_none() {
                let what = location.split(" of size").next().unwrap_or(location);
                let what = what.split(" '").next().unwrap_or(what);
                report.location = Some(what.trim().to_string());
            }
            want_frame = false;
        } else if line.starts_with("  ")
            && !line.starts_with("   ")
            && trimmed.contains(" of size ")
            && trimmed.contains(" by ")
        {
            let header = trimmed.trim_end_matches(':');
            report.accesses.push((header.to_string(), None));
            want_frame = true;
        } else if want_frame && trimmed.starts_with('#') {
            if let Some(frame) = workspace_frame(trimmed, root)
                && let Some(access) = report.accesses.last_mut()
            {
                access.1 = Some(frame);
                want_frame = false;
            }
        } else if !trimmed.starts_with('#') {
            want_frame = false;
        }
    }
    reports
}

/// `path:line (function)` of a stack frame line (`#3 func /root/path.rs:12:5 (bin+0x..)`)
/// when its file is under `root`, the path shown relative to it.
fn workspace_frame(frame: &str, root: &str) -> Option<String> {
    let at = frame.find(root)?;
    let location = frame[at + root.len()..]
        .trim_start_matches('/')
        .split_whitespace()
        .next()?;
    // path:line:column -> path:line
    let location = match location.rsplit_once(':') {
        Some((head, col)) if col.chars().all(|c| c.is_ascii_digit()) && head.contains(':') => head,
        _ => location,
    };
    let function = frame[..at]
        .trim()
        .split_once(' ')
        .map_or("", |(_, f)| f.trim());
    // The last path segment outside generic arguments: `<A as B>::acquire` -> `acquire`.
    let mut depth = 0usize;
    let mut plain = String::new();
    for c in function.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let name = plain.rsplit("::").find(|s| !s.is_empty()).unwrap_or("");
    Some(format!("{location} ({name})"))
}

/// What a report must show to count as the catch of one broken variant: the signature of
/// its own bug, not any report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signature {
    /// The harness's `racy` control: an access in the controls' own code
    /// ([`Report::in_control`]).
    RacyControl,
    /// The kernels pool's `done_relaxed` mutant: a data race between a worker's plain store
    /// in a task (`task_writes`) and the caller's read of it after `run` returned
    /// (`caller_reads`), both in [`POOL_TEST`]: the tasks' results not published to the
    /// caller.
    PoolResultsUnpublished,
    /// The kernels pool's `job_before_claim` mutant: a data race between the caller's write
    /// of the job slot in `run_ranges_with` and a worker's read of it in `worker`, both in the pool
    /// (`kernels/src/pool.rs`): a worker that read the slot before claiming, and then
    /// claimed nothing, is not ordered before the caller's next job.
    PoolSlotReadBeforeClaim,
}

impl Signature {
    fn matches(self, report: &Report) -> bool {
        match self {
            Signature::RacyControl => report.in_control(),
            Signature::PoolResultsUnpublished => {
                let has = |name: &str| {
                    report.accesses.iter().any(|(_, frame)| {
                        frame.as_deref().is_some_and(|f| {
                            f.starts_with(POOL_TEST) && f.ends_with(&format!(" ({name})"))
                        })
                    })
                };
                report.kind == "data race" && has("task_writes") && has("caller_reads")
            }
            Signature::PoolSlotReadBeforeClaim => {
                // A plain access of that kind ("Write", "Previous read"; the header goes on
                // "of size 8 at ... by thread T1").
                let has = |access: &str, name: &str| {
                    report.accesses.iter().any(|(header, frame)| {
                        let kind = header.split(" of size").next().unwrap_or("");
                        let kind = kind.to_ascii_lowercase();
                        kind.ends_with(access)
                            && !kind.contains("atomic")
                            && frame.as_deref().is_some_and(|f| {
                                f.starts_with(POOL_SOURCE) && f.ends_with(&format!(" ({name})"))
                            })
                    })
                };
                report.kind == "data race"
                    && has("write", "run_ranges_with")
                    && has("read", "worker")
            }
        }
    }

    /// For the summary line: "the racy control reported in its own code".
    fn describe(self) -> &'static str {
        match self {
            Signature::RacyControl => "the racy control reported in its own code",
            Signature::PoolResultsUnpublished => {
                "the pool's done_relaxed mutant reported as task_writes racing with caller_reads"
            }
            Signature::PoolSlotReadBeforeClaim => {
                "the pool's job_before_claim mutant reported as run_ranges_with's write of the \
                 job slot racing with worker's read"
            }
        }
    }
}

/// The kernels test file whose `what_tasks_write_is_the_callers_after_run` carries the
/// pool's signature (its `task_writes` and `caller_reads`).
const POOL_TEST: &str = "kernels/tests/pool.rs:";

/// The pool's own source, where the `job_before_claim` mutant's race is.
const POOL_SOURCE: &str = "kernels/src/pool.rs:";

/// The pool test that the `done_relaxed` mutant must fail under ThreadSanitizer.
const POOL_WITNESS_TEST: &str = "what_tasks_write_is_the_callers_after_run";

/// The pool test that the `job_before_claim` mutant must fail under ThreadSanitizer.
const POOL_SLOT_WITNESS_TEST: &str = "a_worker_that_claims_nothing_leaves_the_job_alone";

/// Cargo `--config` (with `-Zprofile-rustflags`) that builds keepalloc-kernels alone as the
/// pool mutant `mutant` (`done_relaxed`, `job_before_claim`) in `profile`: the standard
/// library and every other crate keep the build they already have, and the mutant's
/// artifacts get their own hashes.
fn pool_mutant_config(profile: &str, mutant: &str) -> String {
    format!(
        r#"profile.{profile}.package.keepalloc-kernels.rustflags=["--cfg", "keepalloc_pool_mutant=\"{mutant}\""]"#
    )
}

/// What one row must show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Every run exits 0 without a report.
    Clean,
    /// ThreadSanitizer reports every run, with a report of this signature.
    Reported(Signature),
}

/// How one process ended.
#[derive(Debug)]
enum Outcome {
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
    fn describe(&self) -> String {
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
struct Row {
    what: String,
    expect: Expect,
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    runs: usize,
    /// Whether run i appends `--seed <base+i>`.
    seeded: bool,
    outcomes: Vec<Outcome>,
    elapsed: Duration,
}

impl Row {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|o| f(o)).count()
    }

    fn clean(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Clean))
    }

    fn reported(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Reported(_)))
    }

    /// Runs with a report of the row's signature (none for a row that must be clean).
    fn reported_by_signature(&self) -> usize {
        let Expect::Reported(signature) = self.expect else {
            return 0;
        };
        self.count(|o| matches!(o, Outcome::Reported(r) if r.iter().any(|r| signature.matches(r))))
    }

    fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    fn inconclusive(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Inconclusive(_)))
    }

    /// Each report label, the runs that showed it, and its first report.
    fn labels(&self) -> Vec<(String, usize, Report)> {
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
    fn verdict(&self) -> Result<(), &'static str> {
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

/// Reads `pipe` to its end on a thread of its own (so a chatty child never blocks on a
/// full pipe while we wait for it).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs `cmd` with a time limit, collecting stdout and stderr: `(status, stdout, stderr)`,
/// status `None` when it was killed for taking longer than `timeout`.
fn run_limited(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(Option<ExitStatus>, String, String), String> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for {cmd:?}: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    Ok((status, out, err))
}

/// Classifies one finished process from its status, stdout and stderr.
fn classify(
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
fn test_executables(mut cmd: Command) -> Result<Vec<(String, PathBuf)>, String> {
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
fn json_string(line: &str, key: &str) -> Option<String> {
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
fn held_window_args(harness: &Path) -> Result<Vec<String>, String> {
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

/// `cargo xtask tsan [options]`: see [`TSAN_HELP`].
pub fn tsan(args: &[String]) -> Result<(), String> {
    let (require, args) = Require::take(args);
    let Some(options) = TsanOptions::parse(&args)? else {
        print!("{TSAN_HELP}");
        return Ok(());
    };
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
            // The pool tests' watchdog (kernels/tests/common/watchdog.rs) at half the
            // process timeout: a hung test is named by it, well before the kill.
            cmd.args(&argv)
                .current_dir(&row.cwd)
                .env("TSAN_OPTIONS", &tsan_options)
                .env(
                    "KEEPALLOC_TEST_DEADLOCK_SECS",
                    (options.timeout.as_secs() / 2).max(1).to_string(),
                );
            let (status, stdout, stderr) = run_limited(cmd, options.timeout)?;
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
fn print_table(rows: &[Row]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn exit(code: i32) -> Option<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        Some(ExitStatus::from_raw(code << 8))
    }

    const RACE: &str = "\
==================
WARNING: ThreadSanitizer: data race (pid=7)
  Atomic write of size 8 at 0x55e56c703098 by thread T16:
    #0 core::sync::atomic::atomic_store /rustc/library/core/src/sync/atomic.rs:3890:24 (h+0x1)
    #1 <k::controls::racy::Racy as k::scenario::Subject>::acquire /w/fault-inject/src/controls/racy.rs:73:13 (h+0x2)

  Previous read of size 8 at 0x55e56c703098 by thread T19:
    #0 k::init::initialize /w/kernels/src/init.rs:44:29 (h+0x3)

  Thread T16 (tid=1, running) created by main thread at:
    #0 pthread_create /rustc/x.cpp:1:1 (h+0x4)

SUMMARY: ThreadSanitizer: data race /rustc/library/core/src/sync/atomic.rs:3890:24
==================
==================
WARNING: ThreadSanitizer: data race (pid=7)
  Write of size 8 at 0x7218 by thread T23:
    #0 __tsan_memset x.cpp:35:3 (h+0x5)
    #1 k::scribble::Scribble::deallocate /w/fault-inject/src/scribble.rs:451:49 (h+0x6)
  Previous read of size 8 at 0x7218 by thread T19:
    #0 k::witness::judge /w/fault-inject/src/witness.rs:139:47 (h+0x7)
  Location is heap block of size 96 at 0x7218 allocated by thread T19:
    #0 malloc x.cpp:670:5 (h+0x8)
SUMMARY: ThreadSanitizer: data race x
==================
";

    #[cfg(unix)]
    #[test]
    fn classifies_runs() {
        let t = Duration::from_secs(1);
        assert!(matches!(classify(exit(0), "", "", t, "/w"), Outcome::Clean));
        match classify(exit(TSAN_EXIT), "", RACE, t, "/w") {
            Outcome::Reported(r) => assert_eq!(r.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(None, "", "", t, "/w"),
            Outcome::Inconclusive(_)
        ));
        assert!(matches!(
            classify(exit(10), "RESULT status=fail exit=10", "", t, "/w"),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            classify(exit(TSAN_EXIT), "", "", t, "/w"),
            Outcome::Inconclusive(_)
        ));
        assert!(matches!(
            classify(
                exit(1),
                "",
                "FATAL: ThreadSanitizer: unexpected memory mapping",
                t,
                "/w"
            ),
            Outcome::Inconclusive(_)
        ));
    }

    #[test]
    fn condenses_reports() {
        let reports = parse_reports(RACE, "/w");
        assert_eq!(reports[0].label(), "data race: atomic write + read");
        assert_eq!(
            reports[0].accesses[0].1.as_deref(),
            Some("fault-inject/src/controls/racy.rs:73 (acquire)")
        );
        assert_eq!(
            reports[0].accesses[1].1.as_deref(),
            Some("kernels/src/init.rs:44 (initialize)")
        );
        assert_eq!(reports[1].label(), "data race: read + write, heap block");
        assert_eq!(
            reports[1].accesses[0].1.as_deref(),
            Some("fault-inject/src/scribble.rs:451 (deallocate)")
        );
        let leak = parse_reports("WARNING: ThreadSanitizer: thread leak (pid=3)\n", "/w");
        assert_eq!(leak[0].label(), "thread leak");
        // The control's signature: an access in its own code; the scribble/witness race of
        // the second report alone is not one, nor a thread leak.
        assert!(reports[0].in_control());
        assert!(!reports[1].in_control());
        assert!(!leak[0].in_control());
    }

    /// Condensed from a real report of the pool's done_relaxed mutant.
    const POOL_RACE: &str = "\
WARNING: ThreadSanitizer: data race (pid=19811)
  Read of size 8 at 0x725000010188 by thread T1:
    #2 core::iter::sum /r/core/src/iter.rs:1:1 (pool+0x1)
    #3 pool::caller_reads /w/kernels/tests/pool.rs:77:16 (pool+0x2)
  Previous write of size 8 at 0x725000010188 by thread T2:
    #2 pool::task_writes /w/kernels/tests/pool.rs:71:29 (pool+0x3)
    #6 keepalloc_kernels::pool::worker::{closure#2} /w/kernels/src/pool.rs:728:13 (pool+0x4)
SUMMARY: ThreadSanitizer: data race x
==================
WARNING: ThreadSanitizer: data race (pid=19811)
  Write of size 8 at 0x7f6d933fc8c8 by thread T1:
    #0 <keepalloc_kernels::pool::ThreadPool>::run_ranges_with /w/kernels/src/pool.rs:586:13 (pool+0x5)
  Previous read of size 8 at 0x7f6d933fc8c8 by thread T2:
    #0 keepalloc_kernels::pool::worker::{closure#2} /w/kernels/src/pool.rs:727:30 (pool+0x6)
SUMMARY: ThreadSanitizer: data race x
==================
";

    #[test]
    fn the_pool_mutants_signature_is_its_task_writes_racing_with_caller_reads() {
        let reports = parse_reports(POOL_RACE, "/w");
        assert_eq!(reports.len(), 2);
        assert_eq!(
            reports[0].accesses[0].1.as_deref(),
            Some("kernels/tests/pool.rs:77 (caller_reads)")
        );
        assert!(Signature::PoolResultsUnpublished.matches(&reports[0]));
        // A race inside the pool's own hand-off is a real consequence of the mutant, but not
        // its signature; nor is the racy control's, nor the pool's for the racy control.
        assert!(!Signature::PoolResultsUnpublished.matches(&reports[1]));
        let racy = parse_reports(RACE, "/w");
        assert!(!Signature::PoolResultsUnpublished.matches(&racy[0]));
        assert!(!Signature::RacyControl.matches(&reports[0]));
        // The mutant's config quotes the cfg value for TOML.
        assert!(
            pool_mutant_config("release", "done_relaxed")
                .contains(r#""keepalloc_pool_mutant=\"done_relaxed\"""#)
        );
    }

    /// Condensed from a real report of the pool's job_before_claim mutant.
    const SLOT_RACE: &str = "\
WARNING: ThreadSanitizer: data race (pid=10507)
  Write of size 8 at 0x72440000a148 by thread T1:
    #0 <keepalloc_kernels::pool::ThreadPool>::run_ranges_with /w/kernels/src/pool.rs:607:17 (pool+0x1)
    #1 <keepalloc_kernels::pool::ThreadPool as keepalloc_kernels::pool::Parallel>::run_ranges /w/kernels/src/pool.rs:570:14 (pool+0x2)
    #3 pool::a_worker_that_claims_nothing_leaves_the_job_alone /w/kernels/tests/pool.rs:143:14 (pool+0x3)
  Previous read of size 8 at 0x72440000a148 by thread T3:
    #0 __tsan_memcpy /rustc/llvm/compiler-rt/lib/tsan/rtl/tsan_interceptors_memintrinsics.cpp:27:3 (pool+0x4)
    #1 keepalloc_kernels::pool::worker /w/kernels/src/pool.rs:792:30 (pool+0x5)
    #2 keepalloc_kernels::pool::worker_main /w/kernels/src/pool.rs:834:5 (pool+0x5)
SUMMARY: ThreadSanitizer: data race x
==================
";

    #[test]
    fn the_slot_mutants_signature_is_run_ranges_with_writing_what_worker_read() {
        let reports = parse_reports(SLOT_RACE, "/w");
        assert_eq!(reports.len(), 1);
        assert_eq!(
            reports[0].accesses[1].1.as_deref(),
            Some("kernels/src/pool.rs:792 (worker)")
        );
        assert!(Signature::PoolSlotReadBeforeClaim.matches(&reports[0]));
        // Not the other controls' signatures, and theirs are not this one.
        assert!(!Signature::PoolResultsUnpublished.matches(&reports[0]));
        assert!(!Signature::RacyControl.matches(&reports[0]));
        let pool = parse_reports(POOL_RACE, "/w");
        assert!(!Signature::PoolSlotReadBeforeClaim.matches(&pool[0]));
        let racy = parse_reports(RACE, "/w");
        assert!(!Signature::PoolSlotReadBeforeClaim.matches(&racy[0]));
        // The accesses the wrong way round (the worker writing, the caller reading) are not
        // the slot's race.
        let swapped = SLOT_RACE
            .replace("  Write of size", "  Read of size")
            .replace("Previous read", "Previous write");
        assert!(!Signature::PoolSlotReadBeforeClaim.matches(&parse_reports(&swapped, "/w")[0]));
        assert!(
            pool_mutant_config("dev", "job_before_claim")
                .starts_with(r#"profile.dev.package.keepalloc-kernels.rustflags=["#)
        );
    }

    /// Miri's reports of the two pool mutants, from real runs (the notes cut short).
    const MIRI_DONE_RELAXED: &str = "\
test what_tasks_write_is_the_callers_after_run ... error: Undefined Behavior: Data race detected between (1) non-atomic read on thread `unnamed-3` and (2) deallocation on thread `what_tasks_writ` at alloc46879
 --> kernels/src/pool.rs:566:10
  |
  = note: (2) just happened here
help: and (1) occurred earlier here
 --> kernels/src/pool.rs:564:16
  = help: this indicates a bug in the program: it performed an invalid operation, and caused Undefined Behavior
  = note: this is on thread `what_tasks_writ`
";
    const MIRI_SLOT: &str = "\
test a_worker_that_claims_nothing_leaves_the_job_alone ... error: Undefined Behavior: Data race detected between (1) retag read on thread `unnamed-3` and (2) deallocation on thread `a_worker_that_c` at alloc46757
 --> kernels/src/pool.rs:566:10
  |
  = note: (2) just happened here
help: and (1) occurred earlier here
 --> kernels/src/pool.rs:792:29
  = help: retags occur on all (re)borrows and as well as when references are copied or moved
  = note: this is on thread `a_worker_that_c`
";

    #[test]
    fn miri_races_parse_and_each_pool_mutant_is_judged_by_its_own() {
        let (first, second) = parse_miri_race(MIRI_SLOT).unwrap();
        assert_eq!(
            first,
            MiriAccess {
                what: "retag read".into(),
                thread: "unnamed-3".into(),
                at: Some("kernels/src/pool.rs:792".into()),
            }
        );
        assert_eq!(
            second,
            MiriAccess {
                what: "deallocation".into(),
                thread: "a_worker_that_c".into(),
                at: Some("kernels/src/pool.rs:566".into()),
            }
        );
        let early = "kernels/src/pool.rs:792";
        let slot = ("job_before_claim", POOL_SLOT_WITNESS_TEST);
        let done = ("done_relaxed", POOL_WITNESS_TEST);
        assert!(miri_pool_race(MIRI_SLOT, slot.0, slot.1, early).is_some());
        assert!(miri_pool_race(MIRI_DONE_RELAXED, done.0, done.1, early).is_some());
        // The slot mutant's race elsewhere than at its read is not its signature, nor is the
        // done_relaxed race at the slot's read, nor a race on another test's thread.
        assert!(miri_pool_race(MIRI_SLOT, slot.0, slot.1, "kernels/src/pool.rs:791").is_none());
        assert!(miri_pool_race(MIRI_DONE_RELAXED, slot.0, slot.1, early).is_none());
        assert!(miri_pool_race(MIRI_SLOT, done.0, done.1, early).is_none());
        assert!(miri_pool_race(MIRI_DONE_RELAXED, done.0, slot.1, early).is_none());
        // Nothing but a data race counts.
        let other = MIRI_SLOT.replace("Data race detected", "Memory leak detected");
        assert!(miri_pool_race(&other, slot.0, slot.1, early).is_none());
        // The real source has the slot mutant's read, once.
        let read = slot_early_read().unwrap();
        let line: usize = read.strip_prefix(POOL_SOURCE).unwrap().parse().unwrap();
        let source = std::fs::read_to_string(util::root().join("kernels/src/pool.rs")).unwrap();
        let text = source.lines().nth(line - 1).unwrap();
        assert!(text.contains("*s.job.get()"), "{read}: {text}");
    }

    #[test]
    fn a_control_reported_only_outside_its_code_is_inconclusive() {
        let row = |outcomes: Vec<Outcome>| Row {
            what: "racy".into(),
            expect: Expect::Reported(Signature::RacyControl),
            program: PathBuf::new(),
            args: Vec::new(),
            cwd: PathBuf::new(),
            runs: outcomes.len(),
            seeded: false,
            outcomes,
            elapsed: Duration::ZERO,
        };
        let all = parse_reports(RACE, "/w");
        let caught = || Outcome::Reported(all.clone());
        let elsewhere = || Outcome::Reported(vec![all[1].clone()]);
        assert_eq!(row(vec![caught(), caught()]).verdict(), Ok(()));
        assert_eq!(
            row(vec![caught(), elsewhere()]).verdict(),
            Err("INCONCLUSIVE")
        );
        assert_eq!(row(vec![caught(), Outcome::Clean]).verdict(), Err("FAIL"));
    }

    #[test]
    fn require_flag_and_ci() {
        let (r, rest) = Require::take(&["--require".to_string(), "--full".to_string()]);
        assert_eq!(r.0, Some("--require"));
        assert_eq!(rest, ["--full"]);
        assert!(r.skipped("miri", "no nightly").is_err());
        assert!(Require(None).skipped("miri", "no nightly").is_ok());
    }

    #[test]
    fn finds_test_executables_json() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"cell"},"profile":{"test":true},"executable":"/t/cell-1"}"#;
        assert_eq!(
            json_string(line, "executable").as_deref(),
            Some("/t/cell-1")
        );
        assert_eq!(
            json_string(&line[line.find("\"target\":").unwrap()..], "name").as_deref(),
            Some("cell")
        );
    }
}
