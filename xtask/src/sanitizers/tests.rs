//! The sanitizer commands' parsers and verdicts on recorded output.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use super::miri::{
    MiriAccess, allocator_tests, miri_pool_race, parse_miri_race, slot_early_read, split_test_args,
};
use super::nightly::Require;
use super::pool::{
    POOL_SLOT_WITNESS_TEST, POOL_WITNESS_TEST, POOL_WORKER_SOURCE, pool_mutant_config,
};
use super::reports::{Signature, parse_reports};
use super::tsan::{Expect, Outcome, Row, TSAN_EXIT, classify, json_string};
use crate::util;

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

/// Condensed from a real report of the pool's done_relaxed mutant (its pool frames moved to
/// the pool's files since: `kernels/src/pool/`).
const POOL_RACE: &str = "\
WARNING: ThreadSanitizer: data race (pid=19811)
  Read of size 8 at 0x725000010188 by thread T1:
#2 core::iter::sum /r/core/src/iter.rs:1:1 (pool+0x1)
#3 pool::caller_reads /w/kernels/tests/pool.rs:77:16 (pool+0x2)
  Previous write of size 8 at 0x725000010188 by thread T2:
#2 pool::task_writes /w/kernels/tests/pool.rs:71:29 (pool+0x3)
#6 keepalloc_kernels::pool::worker::worker::{closure#2} /w/kernels/src/pool/worker.rs:71:17 (pool+0x4)
SUMMARY: ThreadSanitizer: data race x
==================
WARNING: ThreadSanitizer: data race (pid=19811)
  Write of size 8 at 0x7f6d933fc8c8 by thread T1:
#0 <keepalloc_kernels::pool::thread_pool::ThreadPool>::run_ranges_with /w/kernels/src/pool/run.rs:72:17 (pool+0x5)
  Previous read of size 8 at 0x7f6d933fc8c8 by thread T2:
#0 keepalloc_kernels::pool::worker::worker::{closure#2} /w/kernels/src/pool/worker.rs:69:33 (pool+0x6)
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

/// Condensed from a real report of the pool's job_before_claim mutant (its pool frames moved
/// to the pool's files since).
const SLOT_RACE: &str = "\
WARNING: ThreadSanitizer: data race (pid=10507)
  Write of size 8 at 0x72440000a148 by thread T1:
#0 <keepalloc_kernels::pool::thread_pool::ThreadPool>::run_ranges_with /w/kernels/src/pool/run.rs:72:17 (pool+0x1)
#1 <keepalloc_kernels::pool::thread_pool::ThreadPool as keepalloc_kernels::pool::Parallel>::run_ranges /w/kernels/src/pool/run.rs:30:14 (pool+0x2)
#3 pool::a_worker_that_claims_nothing_leaves_the_job_alone /w/kernels/tests/pool.rs:143:14 (pool+0x3)
  Previous read of size 8 at 0x72440000a148 by thread T3:
#0 __tsan_memcpy /rustc/llvm/compiler-rt/lib/tsan/rtl/tsan_interceptors_memintrinsics.cpp:27:3 (pool+0x4)
#1 keepalloc_kernels::pool::worker::worker /w/kernels/src/pool/worker.rs:58:30 (pool+0x5)
#2 keepalloc_kernels::pool::threads::worker_main /w/kernels/src/pool/threads.rs:35:5 (pool+0x5)
SUMMARY: ThreadSanitizer: data race x
==================
";

#[test]
fn the_slot_mutants_signature_is_run_ranges_with_writing_what_worker_read() {
    let reports = parse_reports(SLOT_RACE, "/w");
    assert_eq!(reports.len(), 1);
    assert_eq!(
        reports[0].accesses[1].1.as_deref(),
        Some("kernels/src/pool/worker.rs:58 (worker)")
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

/// Miri's reports of the two pool mutants, from real runs (the notes cut short; the places
/// moved to the pool's files since).
const MIRI_DONE_RELAXED: &str = "\
test what_tasks_write_is_the_callers_after_run ... error: Undefined Behavior: Data race detected between (1) non-atomic read on thread `unnamed-3` and (2) deallocation on thread `what_tasks_writ` at alloc46879
 --> kernels/src/pool/run.rs:26:10
  |
  = note: (2) just happened here
help: and (1) occurred earlier here
 --> kernels/src/pool/run.rs:24:16
  = help: this indicates a bug in the program: it performed an invalid operation, and caused Undefined Behavior
  = note: this is on thread `what_tasks_writ`
";
const MIRI_SLOT: &str = "\
test a_worker_that_claims_nothing_leaves_the_job_alone ... error: Undefined Behavior: Data race detected between (1) retag read on thread `unnamed-3` and (2) deallocation on thread `a_worker_that_c` at alloc46757
 --> kernels/src/pool/run.rs:26:10
  |
  = note: (2) just happened here
help: and (1) occurred earlier here
 --> kernels/src/pool/worker.rs:58:29
  = help: retags occur on all (re)borrows and as well as when references are copied or moved
  = note: this is on thread `a_worker_that_c`
";

/// Miri's report of the job_before_claim mutant in a CI run of 2026-12-07 (its notes cut
/// short): the early read copying a task reference whose frame was already freed.
const MIRI_SLOT_DANGLING: &str = "\
error: Undefined Behavior: constructing invalid value of type keepalloc_kernels::pool::shared::Job: at .task.<enum-variant(Some)>.0, encountered a dangling reference (use-after-free)
 --> kernels/src/pool/worker.rs:58:29
  |
  = note: Undefined Behavior occurred here
  |
  = help: this indicates a bug in the program: it performed an invalid operation, and caused Undefined Behavior
  = note: this is on thread `unnamed-3`
";

#[test]
fn the_slot_mutants_dangling_task_is_its_signature_only_at_its_read_on_a_worker() {
    let early = "kernels/src/pool/worker.rs:58";
    let slot = ("job_before_claim", POOL_SLOT_WITNESS_TEST);
    let done = ("done_relaxed", POOL_WITNESS_TEST);
    assert!(miri_pool_race(MIRI_SLOT_DANGLING, slot.0, slot.1, early).is_some());
    // Not the done_relaxed mutant's, not at another line, not on the test's thread, not
    // another type or field, not another kind of invalid value.
    assert!(miri_pool_race(MIRI_SLOT_DANGLING, done.0, done.1, early).is_none());
    let elsewhere = "kernels/src/pool/worker.rs:57";
    assert!(miri_pool_race(MIRI_SLOT_DANGLING, slot.0, slot.1, elsewhere).is_none());
    for (from, to) in [
        ("thread `unnamed-3`", "thread `a_worker_that_c`"),
        ("shared::Job:", "shared::Shared:"),
        (" at .task.", " at .start."),
        (
            "a dangling reference (use-after-free)",
            "an unaligned reference",
        ),
    ] {
        let other = MIRI_SLOT_DANGLING.replace(from, to);
        assert!(
            miri_pool_race(&other, slot.0, slot.1, early).is_none(),
            "{to}"
        );
    }
}

#[test]
fn miri_races_parse_and_each_pool_mutant_is_judged_by_its_own() {
    let (first, second) = parse_miri_race(MIRI_SLOT).unwrap();
    assert_eq!(
        first,
        MiriAccess {
            what: "retag read".into(),
            thread: "unnamed-3".into(),
            at: Some("kernels/src/pool/worker.rs:58".into()),
        }
    );
    assert_eq!(
        second,
        MiriAccess {
            what: "deallocation".into(),
            thread: "a_worker_that_c".into(),
            at: Some("kernels/src/pool/run.rs:26".into()),
        }
    );
    let early = "kernels/src/pool/worker.rs:58";
    let slot = ("job_before_claim", POOL_SLOT_WITNESS_TEST);
    let done = ("done_relaxed", POOL_WITNESS_TEST);
    assert!(miri_pool_race(MIRI_SLOT, slot.0, slot.1, early).is_some());
    assert!(miri_pool_race(MIRI_DONE_RELAXED, done.0, done.1, early).is_some());
    // The slot mutant's race elsewhere than at its read is not its signature, nor is the
    // done_relaxed race at the slot's read, nor a race on another test's thread.
    assert!(miri_pool_race(MIRI_SLOT, slot.0, slot.1, "kernels/src/pool/worker.rs:57").is_none());
    assert!(miri_pool_race(MIRI_DONE_RELAXED, slot.0, slot.1, early).is_none());
    assert!(miri_pool_race(MIRI_SLOT, done.0, done.1, early).is_none());
    assert!(miri_pool_race(MIRI_DONE_RELAXED, done.0, slot.1, early).is_none());
    // Nothing but a data race counts.
    let other = MIRI_SLOT.replace("Data race detected", "Memory leak detected");
    assert!(miri_pool_race(&other, slot.0, slot.1, early).is_none());
    // The real source has the slot mutant's read, once.
    let read = slot_early_read().unwrap();
    let (file, line) = read.rsplit_once(':').unwrap();
    assert_eq!(file, POOL_WORKER_SOURCE);
    let line: usize = line.parse().unwrap();
    let source = std::fs::read_to_string(util::root().join(POOL_WORKER_SOURCE)).unwrap();
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
    let r = Require::new(true);
    assert_eq!(r.0, Some("--require"));
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

#[test]
fn miri_splits_cargo_args_from_the_test_binaries_args() {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    assert_eq!(
        split_test_args(&s(&["--release", "--", "--skip", "x"])),
        (s(&["--release"]), s(&["--skip", "x"]))
    );
    assert_eq!(split_test_args(&s(&["-v"])), (s(&["-v"]), s(&[])));
}

#[test]
fn miri_names_the_allocators_integration_tests_only() {
    // Other packages' tests, the library and the benches are not test targets to select.
    let meta = serde_json::json!({"packages": [
        {"name": "keepalloc-provider", "targets": [{"name": "cell", "kind": ["test"]}]},
        {"name": "keepalloc-allocators", "targets": [
            {"name": "keepalloc_allocators", "kind": ["lib"]},
            {"name": "conformance", "kind": ["test"]},
            {"name": "sizeless", "kind": ["test"]},
            {"name": "table", "kind": ["bench"]}
        ]}
    ]});
    assert_eq!(allocator_tests(&meta), ["conformance", "sizeless"]);
}

#[test]
fn miri_finds_the_conformance_binary_among_the_workspaces_allocator_tests() {
    // The split runs it on the provider's side and every other one beside: if it moved or
    // was renamed, `cargo xtask miri` must notice.
    let out = util::cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tests = allocator_tests(&meta);
    assert!(tests.iter().any(|t| t == "conformance"), "{tests:?}");
    assert!(tests.len() > 1, "{tests:?}");
}
