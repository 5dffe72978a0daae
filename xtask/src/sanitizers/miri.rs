//! `cargo xtask miri`: the allocator and provider tests under Miri, then the kernels pool and
//! its mutants under Miri's data-race detector, judged by the race Miri reports.

use std::process::{Command, Stdio};
use std::time::Instant;

use super::nightly::{Require, nightly_available, nightly_cargo, probe};
use super::pool::{
    POOL_SLOT_WITNESS_TEST, POOL_SOURCE, POOL_WITNESS_TEST, POOL_WORKER_SOURCE, pool_mutant_config,
};
use crate::util;

/// `cargo xtask miri --help`.
pub const MIRI_ABOUT: &str = "\
Runs keepalloc-allocators' and keepalloc-provider's tests, then three of the kernels
pool's, under Miri (nightly, components miri and rust-src: `rustup component add miri
rust-src --toolchain nightly`), with MIRIFLAGS=-Zmiri-disable-isolation unless MIRIFLAGS
is set. Miri runs on one core, so the allocators' tests but their conformance binary (target
dir target/miri-allocators, their output printed when they end) run beside the provider's,
the pool's, then the allocators' conformance binary (target/miri).

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
With the pool's runs below, the subset takes about 7 minutes on a 2-core Zen 3 from clean
target dirs (builds included; 9.5 with the packages one after the other) and 3.6 on a Zen 5
with the conformance binary on the provider's side, both sides ending at 190 s; everything
took 22 minutes.

Then, with or without --full, the kernels pool: its tests
what_tasks_write_is_the_callers_after_run and a_sleeping_worker_is_woken_by_the_next_job
and a_worker_that_claims_nothing_leaves_the_job_alone under Miri's data-race detector (the
other pool tests are too slow under Miri or reach inline assembly), then the pool's two
mutants: done_relaxed (a worker counts its finished tasks with a relaxed add) and
job_before_claim (a worker reads the job slot before it claims a task). The pool must pass;
each mutant must fail with Miri's data race between a pool worker and the test's thread in
kernels/src/pool/ (job_before_claim: at its early read, or that read copying a task
reference whose frame is freed). A mutant that passes, or fails any other way
(inconclusive), fails the command.";

/// `cargo xtask miri` options.
#[derive(clap::Args, Debug)]
pub struct MiriArgs {
    /// Run everything, the three slow tests included.
    #[arg(long)]
    full: bool,
    /// Fail instead of printing `skipped` when nightly, miri or rust-src is missing
    /// (implied by CI=true).
    #[arg(long)]
    require: bool,
    /// Passed to `cargo miri test` (after `--`: to the test binaries).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    cargo_args: Vec<String>,
}

/// Test-name filters (`--skip`) of the default subset: see [`MIRI_ABOUT`].
pub(super) const MIRI_SKIPPED: [&str; 3] = [
    "default_backend_is_the_feature_selected_one",
    "src/conformance.rs",
    "allocate_zeroed_zeroes_memory_that_was_dirty",
];

/// `cargo xtask miri [--full] [args for cargo miri test]`: the allocator and provider tests
/// under Miri (a stated subset unless `--full`).
pub fn miri(options: MiriArgs) -> Result<(), String> {
    let require = Require::new(options.require);
    let full = options.full;
    let mut args = options.cargo_args;
    if !options.full {
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
    // Miri interprets on one core: the allocators' tests (output held, printed when they
    // end) run beside the provider's, the pool's, then the allocators' conformance binary,
    // the longest one, which balances the two sides (each in a target dir of its own).
    let started = Instant::now();
    let (cargo_args, test_args) = split_test_args(&args);
    let rest = allocator_commands_but_conformance(&cargo_args, &test_args)?;
    let allocators = std::thread::spawn(move || (run_held(rest), started.elapsed()));
    let provider = util::run(&mut miri_package_command(
        "keepalloc-provider",
        "miri",
        &args,
    ));
    eprintln!(
        "miri: keepalloc-provider took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let pool = provider.and_then(|()| miri_pool());
    let conformance = pool.and_then(|()| {
        let mut cmd = miri_package_command("keepalloc-allocators", "miri", &cargo_args);
        cmd.args(["--test", CONFORMANCE, "--"]).args(&test_args);
        let result = util::run(&mut cmd);
        eprintln!(
            "miri: keepalloc-allocators' {CONFORMANCE} ended after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        result
    });
    let allocators = match allocators.join() {
        Ok((result, ended)) => {
            eprintln!(
                "miri: keepalloc-allocators' other tests ended after {:.0} s",
                ended.as_secs_f64()
            );
            result
        }
        Err(_) => Err("miri: the thread running keepalloc-allocators panicked".to_string()),
    };
    conformance.and(allocators)
}

/// The allocators' test binary that runs on the provider's side (see [`miri`]).
const CONFORMANCE: &str = "conformance";

/// `args` split at `--`: cargo's, then the test binaries'.
pub(super) fn split_test_args(args: &[String]) -> (Vec<String>, Vec<String>) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), Vec::new()),
    }
}

/// The allocators' tests but [`CONFORMANCE`]: the library and every other integration test
/// (named from `cargo metadata`), then the doc tests (cargo runs `--doc` on its own).
fn allocator_commands_but_conformance(
    cargo_args: &[String],
    test_args: &[String],
) -> Result<Vec<Command>, String> {
    let out = util::cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("miri: could not run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("miri: cargo metadata failed: {}", out.status));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("miri: reading cargo metadata: {e}"))?;
    let tests = allocator_tests(&meta);
    if !tests.iter().any(|t| t == CONFORMANCE) {
        return Err(format!(
            "miri: keepalloc-allocators has no `{CONFORMANCE}` test target (cargo metadata)"
        ));
    }
    let command = |selection: &[String]| {
        let mut cmd = miri_package_command("keepalloc-allocators", "miri-allocators", cargo_args);
        cmd.args(selection).arg("--").args(test_args);
        cmd
    };
    let mut selection = vec!["--lib".to_string()];
    for test in tests.iter().filter(|t| *t != CONFORMANCE) {
        selection.extend(["--test".to_string(), test.clone()]);
    }
    Ok(vec![command(&selection), command(&["--doc".to_string()])])
}

/// The integration test targets of keepalloc-allocators in `cargo metadata`'s output.
pub(super) fn allocator_tests(meta: &serde_json::Value) -> Vec<String> {
    let packages = meta["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    packages
        .iter()
        .filter(|p| p["name"] == "keepalloc-allocators")
        .flat_map(|p| p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]))
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// Runs `commands` one after the other, holding their output and printing it at the end;
/// the first failure stops the rest.
fn run_held(commands: Vec<Command>) -> Result<(), String> {
    for mut cmd in commands {
        let out = cmd
            .output()
            .map_err(|e| format!("miri: could not run {cmd:?}: {e}"))?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return Err(format!("miri: {cmd:?} failed: {}", out.status));
        }
    }
    Ok(())
}

/// `cargo miri test -p package` with `args`, in `target/<target_dir>`.
fn miri_package_command(package: &str, target_dir: &str, args: &[String]) -> Command {
    let mut cmd = nightly_cargo();
    cmd.args(["miri", "test", "-p", package])
        .args(args)
        .env(
            "CARGO_TARGET_DIR",
            util::root().join("target").join(target_dir),
        )
        .stdin(Stdio::null());
    // Miri checks the strict provenance model and many threads slowly; isolation off so
    // tests may read the clock.
    cmd.env(
        "MIRIFLAGS",
        std::env::var("MIRIFLAGS").unwrap_or_else(|_| "-Zmiri-disable-isolation".into()),
    );
    cmd
}

/// The kernels pool's tests that run under Miri: the one whose tasks write what the caller
/// reads after `run`, the one that hands a sleeping worker its next job, and the one whose
/// worker finds nothing to claim. The others do not fit:
/// `ranges_cover_every_task_exactly_once_and_our_pool_hands_out_runs` ran past 12 minutes,
/// and the operator tests reach inline assembly, which Miri cannot run.
pub(super) const MIRI_POOL_TESTS: [&str; 3] = [
    POOL_WITNESS_TEST,
    "a_sleeping_worker_is_woken_by_the_next_job",
    POOL_SLOT_WITNESS_TEST,
];

/// The pool's mutants under Miri, each with the test that must fail with its data race.
pub(super) const MIRI_POOL_MUTANTS: [(&str, &str); 2] = [
    ("done_relaxed", POOL_WITNESS_TEST),
    ("job_before_claim", POOL_SLOT_WITNESS_TEST),
];

/// How the `job_before_claim` mutant's early read of the job slot begins in
/// `kernels/src/pool/worker.rs` (the one line there that binds `early`).
pub(super) const SLOT_EARLY_READ: &str = "let early = ";

/// `cargo miri test` of `tests` in the pool's test file, as the pool is or as `mutant`.
pub(super) fn miri_pool_command(mutant: Option<&str>, tests: &[&str]) -> Command {
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
pub(super) struct MiriAccess {
    /// "non-atomic read", "retag read", "deallocation", ...
    pub(super) what: String,
    /// The thread's name (truncated to 15 bytes) or `unnamed-N`.
    pub(super) thread: String,
    /// `file:line` of the access, if Miri gave it.
    pub(super) at: Option<String>,
}

/// The first data race Miri reports in `stderr`: access (1), the earlier one, and (2).
pub(super) fn parse_miri_race(stderr: &str) -> Option<(MiriAccess, MiriAccess)> {
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

/// The `job_before_claim` mutant's bug as Miri's validity check sees it when the worker's
/// early read comes after `run`'s frame is gone (ordered after it, so no race): copying the
/// job slot at `early_read`, on a pool worker, builds a `Job` whose task reference dangles.
/// Seen in a CI run on 2026-12-07; the same read, the same freed frame as the race.
pub(super) fn miri_slot_dangling(stderr: &str, early_read: &str) -> Option<String> {
    const HEADER: &str = "Undefined Behavior: constructing invalid value of type ";
    const DANGLING: &str = "encountered a dangling reference (use-after-free)";
    let lines: Vec<&str> = stderr.lines().collect();
    let h = lines
        .iter()
        .position(|l| l.contains(HEADER) && l.contains(DANGLING))?;
    let what = lines[h][lines[h].find(HEADER)? + HEADER.len()..].to_string();
    // The slot's `Job`, at its task reference.
    if !(what.starts_with("keepalloc_kernels::pool::shared::Job:") && what.contains(" at .task.")) {
        return None;
    }
    let at = lines[h + 1..].iter().find_map(|l| {
        let path = l.trim().strip_prefix("--> ")?;
        let (file_line, _col) = path.rsplit_once(':')?;
        Some(file_line.to_string())
    })?;
    let thread = lines[h..]
        .iter()
        .find_map(|l| l.trim().strip_prefix("= note: this is on thread `"))?
        .trim_end_matches('`');
    (at == early_read && thread.starts_with("unnamed-"))
        .then(|| format!("a dangling Job::task copied on `{thread}` at {at}"))
}

/// Whether Miri's report in `stderr` is the pool mutant `mutant`'s own bug, found with the
/// test `test`; `early_read` is the `file:line` of the `job_before_claim` mutant's read.
///
/// Both mutants leave something a worker did during a job unordered before the caller's
/// return from `run`, and the first race Miri meets is the same shape: (1) an access on a
/// pool worker (Miri names them `unnamed-N`) in the pool, racing with (2) the deallocation
/// of `run`'s frame on the test's own thread, in the pool. For `done_relaxed` (1) is the
/// worker's use of the task (the relaxed count of finished tasks orders nothing); for
/// `job_before_claim` it must be the early read of the job slot itself, or that read
/// copying a task reference whose frame is already gone ([`miri_slot_dangling`]).
pub(super) fn miri_pool_race(
    stderr: &str,
    mutant: &str,
    test: &str,
    early_read: &str,
) -> Option<String> {
    if mutant == "job_before_claim"
        && let Some(report) = miri_slot_dangling(stderr, early_read)
    {
        return Some(report);
    }
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
pub(super) fn slot_early_read() -> Result<String, String> {
    let path = util::root().join(POOL_WORKER_SOURCE);
    let source = std::fs::read_to_string(&path)
        .map_err(|e| format!("miri: reading {}: {e}", path.display()))?;
    let lines: Vec<usize> = source
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with(SLOT_EARLY_READ))
        .map(|(i, _)| i + 1)
        .collect();
    match lines[..] {
        [line] => Ok(format!("{POOL_WORKER_SOURCE}:{line}")),
        _ => Err(format!(
            "miri: {POOL_WORKER_SOURCE} should have one line starting `{SLOT_EARLY_READ}`, has {}",
            lines.len()
        )),
    }
}

/// The pool under Miri: [`MIRI_POOL_TESTS`] pass as the pool is, and each of
/// [`MIRI_POOL_MUTANTS`] fails its test with its own data race (any other failure is
/// inconclusive and fails the command; so does a mutant that passes).
pub(super) fn miri_pool() -> Result<(), String> {
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
                "miri: the pool's {mutant} mutant: {test} caught by its signature ({:.0} s): {report}",
                started.elapsed().as_secs_f64()
            ),
            None => {
                return Err(format!(
                    "miri: the pool's {mutant} mutant failed {test} without its signature (a \
                     data race between a pool worker's access and the deallocation of run's \
                     frame on the test's thread, both in kernels/src/pool/; for \
                     job_before_claim the worker's access at {early_read}, or a dangling \
                     Job::task copied there): inconclusive \
                     ({})\n--- stdout\n{stdout}--- stderr\n{stderr}",
                    out.status
                ));
            }
        }
    }
    Ok(())
}
