//! The scenarios, written once against [`Subject`] and run against every variant.
//!
//! Each scenario runs once per process (the library captures its table once per process)
//! and records what it finds with [`report::record`]; a memory violation ends the process at
//! once. Which variant runs which scenario, and the findings that count as catching a
//! control there (its *signature*: [`Variant::signature`]); keepalloc runs all of them and
//! must show no finding at all:
//!
//! | scenario              | racy | naive-retry | poisoning-once | build-race | drop-on-oom |
//! |-----------------------|------|-------------|----------------|------------|-------------|
//! | `cold-start`          | S I U |            |                | S          |             |
//! | `retry-after-capture` |      | S U         | R              |            |             |
//! | `retry-under-race`    | S I U | S U        |                |            |             |
//! | `panic-in-init`       |      | S U         | R              |            |             |
//! | `owner-build-failure` | S I U |            | R              | S          |             |
//! | `out-of-memory`       |      |             |                |            | U S         |
//!
//! S `second-owner`, I `identity-mismatch`, U `use-after-free`, R `no-retry`. A blank is a
//! pair where the control's bug cannot show (a correct once passes `cold-start`; the racy
//! provider's first attempt runs alone in `panic-in-init`), so it is not run.
//!
//! The scenarios themselves are here; their parts are submodules: `list` (the scenarios as
//! data, with their plans), `variant` (what runs them, and the signatures), `subject` (the
//! trait every variant implements), `acquire` (one attempt, and the race of many), `checks`
//! (the judgements they share) and `oom` (`out-of-memory`'s judgement of one plan).

mod acquire;
mod checks;
mod list;
mod oom;
mod subject;
mod variant;

pub use list::{BUILD_FAILURES, MAX_ATTEMPTS, RETRY_FAILURES, Scenario};
pub use subject::{Identity, Subject};
pub use variant::{CELL_MUTANT, CELL_MUTANTS, Variant, kind};

use crate::consumer::{self, PATH_ALLOCATIONS};
use crate::failing::AllocPlan;
use crate::init_plan;
use crate::report::{self, Finding};
use crate::witness;
use acquire::{
    Outcome, library_uses_its_capture, panic_message, race, record_refused, refused_finding,
    try_acquire,
};
use checks::{check_after, check_all_equal, check_one_owner};
use oom::check_clean_oom;

/// The end of every scenario with a race: all callers got the same allocator (`what` names
/// the race in a finding), one owner was built, and the checks after a scenario pass with
/// the first caller's allocator.
fn check_race_end<S: Subject>(subject: &'static S, ids: &[Identity], what: &str) {
    check_all_equal(ids, what);
    check_one_owner();
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
}

/// `cold-start`: `threads` sessions acquire together from a gate; all must get the same
/// allocator; then every session and handle is dropped, the library allocates, computes
/// and frees through the context it captured, a new session gets the same allocator, and a
/// 64-byte allocation through it works.
pub fn cold_start<S: Subject>(subject: &'static S, threads: usize) {
    let ids = race(subject, threads, 1);
    check_race_end(subject, &ids, "cold start");
}

/// `retry-after-capture`: the library captures the table, then init fails
/// [`RETRY_FAILURES`] times; the retries succeed with one owner, which is the one the
/// library captured, and the library works.
pub fn retry_after_capture<S: Subject>(subject: &'static S) {
    let session = subject.session();
    let Some(id) = retries_after_capture(
        || try_acquire(subject, &session),
        library_uses_its_capture,
        &mut report::record,
    ) else {
        return;
    };
    check_one_owner();
    check_after(subject, &id);
    subject.final_checks();
}

/// `retry-after-capture`'s attempts: up to `RETRY_FAILURES + 2` calls of `attempt` until one
/// gets an allocator, with `after_failure` after each failed one; records (through `record`,
/// as they happen) a caller refused without an attempt, a panic, a failure count other than
/// the plan's, and `retry-failed` when no attempt succeeded. `None` ends the scenario.
fn retries_after_capture(
    mut attempt: impl FnMut() -> Outcome,
    mut after_failure: impl FnMut(),
    record: &mut impl FnMut(Finding),
) -> Option<Identity> {
    let mut failures = 0;
    let mut got = None;
    for _ in 0..=RETRY_FAILURES + 2 {
        match attempt() {
            Outcome::Got(id) => {
                got = Some(id);
                break;
            }
            Outcome::Failed(_) | Outcome::PlannedPanic => {
                failures += 1;
                after_failure();
            }
            Outcome::Refused(e) => {
                record(refused_finding("retry after capture", e));
                return None;
            }
            Outcome::Panicked(m) => {
                record(Finding::invariant("acquire-panicked", m));
                break;
            }
        }
    }
    if failures != RETRY_FAILURES {
        record(Finding::invariant(
            "plan-not-followed",
            format!("{failures} attempts failed, {RETRY_FAILURES} were planned"),
        ));
    }
    if got.is_none() {
        record(Finding::invariant(
            "retry-failed",
            "no attempt succeeded after the planned failures",
        ));
    }
    got
}

/// `retry-under-race`: `threads` threads acquire together while init fails at random (the
/// first attempt always after the library captured the table); each retries until it
/// succeeds; all end with the same allocator, one owner, the one the library captured.
pub fn retry_under_race<S: Subject>(subject: &'static S, threads: usize) {
    let ids = race(subject, threads, MAX_ATTEMPTS);
    if init_plan::plan().failures() == 0 {
        report::record(Finding::invariant("plan-not-followed", "no attempt failed"));
    }
    check_race_end(subject, &ids, "retry under race");
}

/// `panic-in-init`: the first attempt panics after capture (on a thread of its own); then
/// `threads` threads acquire together and all succeed with one owner: nothing is poisoned.
pub fn panic_in_init<S: Subject>(subject: &'static S, threads: usize) {
    let first = std::thread::scope(|s| {
        s.spawn(|| try_acquire(subject, &subject.session()))
            .join()
            .unwrap_or_else(|p| Outcome::Panicked(panic_message(&*p)))
    });
    match first {
        Outcome::PlannedPanic => library_uses_its_capture(),
        Outcome::Got(_) | Outcome::Failed(_) | Outcome::Refused(_) => report::record(
            Finding::invariant("plan-not-followed", "the first attempt did not panic"),
        ),
        Outcome::Panicked(m) => report::record(Finding::invariant("acquire-panicked", m)),
    }
    let ids = race(subject, threads, 1);
    check_race_end(subject, &ids, "after a panic");
}

/// `owner-build-failure`: the owner's constructor fails the first [`BUILD_FAILURES`] times
/// (process-wide) while `threads` threads race from a gate, each retrying until it
/// succeeds; exactly one owner is built, every caller gets it, the library captured it,
/// and nothing leaks.
pub fn owner_build_failure<S: Subject>(subject: &'static S, threads: usize) {
    let ids = race(subject, threads, MAX_ATTEMPTS);
    let refused = witness::build_refusals();
    if refused != BUILD_FAILURES {
        report::record(Finding::invariant(
            "plan-not-followed",
            format!("{refused} owner constructions failed, {BUILD_FAILURES} were planned"),
        ));
    }
    check_race_end(subject, &ids, "after failed constructions");
}

/// `out-of-memory`: every allocation site of the library's path fails in turn (then every
/// call from the second on, a byte budget one byte short, and seeded random failures); each
/// time the library returns a clean `OutOfMemory`, the blocks live in the owner's memory are
/// back where they were (counted by the scribbling allocator under it, not by the
/// provider), and a retry without failures succeeds with the right answer, through the
/// owner the library captured.
pub fn out_of_memory<S: Subject>(subject: &'static S, seed: u64) {
    let id = match try_acquire(subject, &subject.session()) {
        Outcome::Got(id) => id,
        Outcome::Refused(e) => return record_refused("out of memory", e),
        Outcome::Failed(e) | Outcome::Panicked(e) => {
            return report::record(Finding::invariant("acquire-failed", e));
        }
        Outcome::PlannedPanic => {
            return report::record(Finding::invariant("acquire-panicked", "planned panic"));
        }
    };
    let Some(failing) = subject.faults() else {
        return report::record(Finding::invariant(
            "harness",
            "the subject has no allocation-failure gate",
        ));
    };
    let baseline = failing.inner().stats().live_blocks;
    let expected = consumer::expected_path();

    let check_clean = |plan: AllocPlan, must_fail: bool| {
        check_clean_oom(
            failing,
            consumer::run_path,
            &expected,
            baseline,
            plan,
            must_fail,
            &mut report::record,
        );
    };

    // Count the sites and the bytes of a clean run.
    failing.arm(AllocPlan::Never);
    let clean = consumer::run_path();
    let (sites, bytes) = (failing.calls(), failing.granted_bytes());
    failing.disarm();
    if !matches!(&clean, Ok(y) if consumer::close(y, &expected)) {
        report::record(Finding::invariant(
            "library-broken",
            format!("clean run: {clean:?}"),
        ));
    }
    if sites != PATH_ALLOCATIONS as u64 {
        report::record(Finding::invariant(
            "site-count",
            format!("{sites} allocation calls, {PATH_ALLOCATIONS} expected"),
        ));
    }
    for n in 1..=sites {
        check_clean(AllocPlan::Nth(n), true);
    }
    check_clean(AllocPlan::From(2), true);
    check_clean(AllocPlan::Budget(bytes - 1), true);
    check_clean(AllocPlan::Budget(bytes), false);
    for i in 0..8 {
        let p = AllocPlan::Probability {
            p: 0.5,
            seed: crate::seeds::derive(seed, i),
        };
        check_clean(p, false);
    }
    check_one_owner();
    check_after(subject, &id);
    subject.final_checks();
}

#[cfg(test)]
mod tests {
    use keepalloc_allocators::System;
    use keepalloc_kernels::AllocatorTable;

    use super::*;

    static BACKEND: System = System;
    static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

    fn identity() -> Identity {
        Identity {
            owner: 0x1000,
            context: 0x1000,
            table: &TABLE,
            serial: 7,
        }
    }

    /// `retry-after-capture`'s loop over scripted outcomes (`script(n)` for the nth attempt):
    /// what it got, the findings' kinds, and how often the library used its capture.
    fn retries(script: impl Fn(u64) -> Outcome) -> (Option<Identity>, Vec<&'static str>, u64) {
        let (mut n, mut used, mut kinds) = (0, 0, Vec::new());
        let got = retries_after_capture(
            || {
                n += 1;
                script(n)
            },
            || used += 1,
            &mut |f: Finding| kinds.push(f.kind()),
        );
        (got, kinds, used)
    }

    #[test]
    fn retry_failed_fires_when_no_retry_succeeds() {
        let planned = |n| {
            if n <= RETRY_FAILURES {
                Outcome::Failed(format!("planned failure {n}"))
            } else {
                Outcome::Got(identity())
            }
        };
        assert_eq!(
            retries(planned),
            (Some(identity()), vec![], RETRY_FAILURES),
            "the planned failures, then success"
        );
        // A once that keeps failing after the library captured the table: every retry fails.
        let (got, kinds, _) = retries(|_| Outcome::Failed("init failed again".into()));
        assert_eq!(got, None);
        assert_eq!(kinds, ["plan-not-followed", "retry-failed"]);
        // The same after the planned failures: a panic ends the retries.
        let (got, kinds, _) = retries(|n| {
            if n <= RETRY_FAILURES {
                Outcome::PlannedPanic
            } else {
                Outcome::Panicked("poisoned".into())
            }
        });
        assert_eq!(got, None);
        assert_eq!(kinds, ["acquire-panicked", "retry-failed"]);
    }
}
