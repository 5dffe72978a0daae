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

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;

use keepalloc_allocators::System;
use keepalloc_kernels::{AllocatorTable, KernelError};

use crate::consumer::{self, PATH_ALLOCATIONS};
use crate::delay::{Point, delay};
use crate::failing::{AllocPlan, Failing};
use crate::init_plan::{self, CapturePoint, FailMode, InitPlan, PlannedPanic};
use crate::report::{self, Finding};
use crate::scribble::Scribble;
use crate::violation::{Violation, ViolationKind};
use crate::witness;

/// A scenario of the issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// The upstream regression: many sessions acquire at once from a cold start.
    ColdStart,
    /// The library captures the table, then init fails `RETRY_FAILURES` times.
    RetryAfterCapture,
    /// Many threads acquire while init fails at random (the first attempt after capture).
    RetryUnderRace,
    /// The first attempt panics after capture; the next succeeds; nothing is poisoned.
    PanicInInit,
    /// The backend's constructor fails the first [`BUILD_FAILURES`] times under a race.
    OwnerBuildFailure,
    /// Each allocation site of the library's path fails in turn.
    OutOfMemory,
}

impl Scenario {
    /// Every scenario, in the order of the issue.
    pub const ALL: [Scenario; 6] = [
        Scenario::ColdStart,
        Scenario::RetryAfterCapture,
        Scenario::RetryUnderRace,
        Scenario::PanicInInit,
        Scenario::OwnerBuildFailure,
        Scenario::OutOfMemory,
    ];

    /// The scenario's name (`cold-start`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::ColdStart => "cold-start",
            Scenario::RetryAfterCapture => "retry-after-capture",
            Scenario::RetryUnderRace => "retry-under-race",
            Scenario::PanicInInit => "panic-in-init",
            Scenario::OwnerBuildFailure => "owner-build-failure",
            Scenario::OutOfMemory => "out-of-memory",
        }
    }

    /// One line on what the scenario does.
    pub const fn summary(self) -> &'static str {
        match self {
            Scenario::ColdStart => {
                "threads acquire together from a cold start; all must get one owner, which \
                 the library captured and keeps using"
            }
            Scenario::RetryAfterCapture => {
                "the library captures the table, then init fails 3 times; the retries \
                 publish the captured owner"
            }
            Scenario::RetryUnderRace => {
                "threads race while init fails at random (the first attempt after capture), \
                 by error or panic; each retries"
            }
            Scenario::PanicInInit => {
                "the first attempt panics after capture; then threads race and all succeed \
                 with that owner"
            }
            Scenario::OwnerBuildFailure => {
                "the owner's constructor fails the first 3 times under the thread race; \
                 exactly one owner, built once"
            }
            Scenario::OutOfMemory => {
                "every allocation site of the library's path fails in turn, then budgets and \
                 seeded random failures; clean errors, nothing leaked, retries work"
            }
        }
    }

    /// The scenario with this name.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The init plan the scenario runs under (seeded with `seed`).
    pub fn init_plan(self, seed: u64) -> InitPlan {
        match self {
            Scenario::ColdStart | Scenario::OutOfMemory | Scenario::OwnerBuildFailure => {
                InitPlan::never()
            }
            Scenario::RetryAfterCapture => InitPlan::new(
                RETRY_FAILURES,
                0.0,
                CapturePoint::After,
                FailMode::Error,
                seed,
            ),
            // The first attempt always fails after the library captured the table (the case
            // a retry must survive); every later one fails with probability 1/2, before or
            // after capture, by error or by panic.
            Scenario::RetryUnderRace => {
                InitPlan::new(1, 0.5, CapturePoint::After, FailMode::Error, seed)
                    .then_random(CapturePoint::Either, FailMode::Either)
            }
            Scenario::PanicInInit => {
                InitPlan::new(1, 0.0, CapturePoint::After, FailMode::Panic, seed)
            }
        }
    }

    /// The owner constructions that fail (process-wide, counted by
    /// [`witness`]) before one succeeds.
    pub const fn build_failures(self) -> u64 {
        match self {
            Scenario::OwnerBuildFailure => BUILD_FAILURES,
            _ => 0,
        }
    }
}

/// How many attempts fail in `retry-after-capture`.
pub const RETRY_FAILURES: u64 = 3;

/// How many owner constructions fail in `owner-build-failure`.
pub const BUILD_FAILURES: u64 = 3;

/// Attempts one thread makes in `retry-under-race` before it gives up.
pub const MAX_ATTEMPTS: usize = 1000;

/// What is being tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// keepalloc's real provider (`GlobalProvider` over a witnessed, scribbling backend).
    Keepalloc,
    /// Negative control: the original racy provider (feature `controls`).
    Racy,
    /// Negative control: a correct once that builds the owner inside the fallible closure
    /// (feature `controls`).
    NaiveRetry,
    /// Negative control: the hand-off inside a `std::sync::Once`, which never retries
    /// (feature `controls`).
    PoisoningOnce,
    /// Negative control: every racer builds an owner, one wins a compare-and-swap
    /// (feature `controls`).
    BuildRace,
    /// Negative control: a provider that replaces (and frees) its owner when the backend
    /// runs out of memory (feature `controls`).
    DropOnOom,
}

/// Finding kinds, as they appear in result lines.
pub mod kind {
    /// More owners were constructed than one (counted by the constructor).
    pub const SECOND_OWNER: &str = "second-owner";
    /// Callers got different owners, or the library captured another one.
    pub const IDENTITY_MISMATCH: &str = "identity-mismatch";
    /// The library's owner was dropped or freed: its witness reads as the free fill.
    pub const USE_AFTER_FREE: &str = "use-after-free";
    /// The same, seen first by guard-page mode (`KEEPALLOC_SCRIBBLE=guard:1/N`): the read
    /// of the freed owner's witness faulted on its `PROT_NONE` page.
    pub const GUARD_USE_AFTER_FREE: &str = "guard-use-after-free";
    /// The library's context holds a live owner that is not the one it captured.
    pub const OWNER_REBUILT: &str = "owner-rebuilt";
    /// A caller failed without any attempt being made for it: the once will not retry.
    pub const NO_RETRY: &str = "no-retry";
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 6] = [
        Variant::Keepalloc,
        Variant::Racy,
        Variant::NaiveRetry,
        Variant::PoisoningOnce,
        Variant::BuildRace,
        Variant::DropOnOom,
    ];

    /// The variant's name (`keepalloc`, `racy`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Keepalloc => "keepalloc",
            Variant::Racy => "racy",
            Variant::NaiveRetry => "naive-retry",
            Variant::PoisoningOnce => "poisoning-once",
            Variant::BuildRace => "build-race",
            Variant::DropOnOom => "drop-on-oom",
        }
    }

    /// One line on what the variant is.
    pub const fn summary(self) -> &'static str {
        match self {
            Variant::Keepalloc => "keepalloc's GlobalProvider, the subject",
            Variant::Racy => {
                "ONNX Runtime's original provider: unsynchronised check-then-act, every \
                 caller rewrites the shared table"
            }
            Variant::NaiveRetry => {
                "a correct once whose owner is built inside the fallible closure and dropped \
                 when init fails (once_cell's get_or_try_init)"
            }
            Variant::PoisoningOnce => {
                "the hand-off inside std::sync::Once: a failure is final, a panic poisons"
            }
            Variant::BuildRace => {
                "every racer builds an owner, a compare-and-swap installs one, losers drop \
                 theirs (once_cell::race::OnceBox)"
            }
            Variant::DropOnOom => {
                "a correct once, but the owner is replaced and freed when the backend runs \
                 out of memory"
            }
        }
    }

    /// The variant with this name.
    pub fn parse(name: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name)
    }

    /// True for the negative controls.
    pub const fn is_control(self) -> bool {
        !matches!(self, Variant::Keepalloc)
    }

    /// True when this build contains the variant (the controls need feature `controls`).
    pub const fn is_built(self) -> bool {
        !self.is_control() || cfg!(feature = "controls")
    }

    /// True when the variant applies to `scenario` (see the table in the module docs).
    pub const fn applies_to(self, scenario: Scenario) -> bool {
        !self.signature(scenario).is_empty() || matches!(self, Variant::Keepalloc)
    }

    /// The finding kinds that are the signature of this control's bug in `scenario`: a run
    /// catches the control only if it shows one of them. Empty for keepalloc (any finding
    /// fails it) and for pairs that do not apply.
    pub const fn signature(self, scenario: Scenario) -> &'static [&'static str] {
        use Scenario as S;
        use kind::*;
        match (self, scenario) {
            (Variant::Racy, S::ColdStart | S::RetryUnderRace | S::OwnerBuildFailure) => &[
                SECOND_OWNER,
                IDENTITY_MISMATCH,
                USE_AFTER_FREE,
                GUARD_USE_AFTER_FREE,
            ],
            (Variant::NaiveRetry, S::RetryAfterCapture | S::RetryUnderRace | S::PanicInInit) => {
                &[SECOND_OWNER, USE_AFTER_FREE, GUARD_USE_AFTER_FREE]
            }
            (
                Variant::PoisoningOnce,
                S::RetryAfterCapture | S::PanicInInit | S::OwnerBuildFailure,
            ) => &[NO_RETRY],
            (Variant::BuildRace, S::ColdStart | S::OwnerBuildFailure) => &[SECOND_OWNER],
            (Variant::DropOnOom, S::OutOfMemory) => {
                &[USE_AFTER_FREE, GUARD_USE_AFTER_FREE, SECOND_OWNER]
            }
            _ => &[],
        }
    }
}

/// A deliberately broken `KeepCell` this build was compiled with
/// (`--cfg keepalloc_cell_mutant="..."`), if any: the keepalloc variant must then FAIL.
pub const CELL_MUTANT: Option<&str> = if cfg!(keepalloc_cell_mutant = "rebuild_in_place") {
    Some("rebuild_in_place")
} else if cfg!(keepalloc_cell_mutant = "drop_on_failure") {
    Some("drop_on_failure")
} else {
    None
};

/// The scenarios where an attempt fails after the owner exists: where a cell mutant's bug
/// can show (in the others the first attempt succeeds, and both mutants behave).
const AFTER_FAILED_ATTEMPTS: &[&str] =
    &["retry-after-capture", "retry-under-race", "panic-in-init"];

/// Every cell mutant, the finding kinds that must catch it in the keepalloc variant, and
/// the scenarios where it can show.
pub const CELL_MUTANTS: [(&str, &[&str], &[&str]); 2] = [
    // Each attempt writes a new owner over the old one, counted once by the cell.
    (
        "rebuild_in_place",
        &[kind::OWNER_REBUILT],
        AFTER_FAILED_ATTEMPTS,
    ),
    // A failed attempt drops the owner in place; the next builds another in the same slot.
    // When the library uses its capture between the two it is a use after free (one thread:
    // retry-after-capture, panic-in-init); under a race another thread often rebuilds the
    // slot first, and the library then finds a stranger where its owner was.
    (
        "drop_on_failure",
        &[kind::USE_AFTER_FREE, kind::OWNER_REBUILT],
        AFTER_FAILED_ATTEMPTS,
    ),
];

/// The allocator one caller got: enough to compare callers and the library's capture.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    /// Address of the owner.
    pub owner: usize,
    /// The `context` of the table the caller got.
    pub context: usize,
    /// The table the caller got.
    pub table: &'static AllocatorTable,
    /// The owner's serial, from its [`Witness`](crate::witness::Witness) (written at
    /// construction, not by the provider).
    pub serial: u64,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.context == other.context && self.serial == other.serial
    }
}
impl Eq for Identity {}

/// A provider under test: keepalloc's or a negative control.
pub trait Subject: Sync + 'static {
    /// A per-session provider value (ONNX Runtime's execution provider).
    type Session: Send + Sync;

    /// Builds a session.
    fn session(&'static self) -> Self::Session;

    /// The session asks for the process-wide allocator (creating the owner, publishing it
    /// and initializing the library if that has not happened yet). `Err` is a failed
    /// initialization; a planned panic unwinds out of this call.
    fn acquire(&'static self, session: &Self::Session) -> Result<Identity, String>;

    /// The allocation-failure gate under the owner's memory (for `out-of-memory`), once an
    /// owner exists; `None` for a subject that does not run that scenario.
    fn faults(&'static self) -> Option<&'static Failing<Scribble<System>>> {
        None
    }

    /// Checks of the subject's own bookkeeping at the end of a scenario (leaks, quarantine);
    /// records findings.
    fn final_checks(&'static self) {}
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(p) = payload.downcast_ref::<PlannedPanic>() {
        format!("planned panic (attempt {})", p.attempt)
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// What one acquire did.
enum Outcome {
    Got(Identity),
    Failed(String),
    PlannedPanic,
    Panicked(String),
    /// Failed (by error or panic) without any attempt run for this caller: the once would
    /// not retry.
    Refused(String),
}

fn try_acquire<S: Subject>(subject: &'static S, session: &S::Session) -> Outcome {
    let before = witness::attempts_here();
    let outcome = match catch_unwind(AssertUnwindSafe(|| subject.acquire(session))) {
        Ok(Ok(id)) => return Outcome::Got(id),
        Ok(Err(e)) => Outcome::Failed(e),
        Err(p) if p.downcast_ref::<PlannedPanic>().is_some() => Outcome::PlannedPanic,
        Err(p) => Outcome::Panicked(panic_message(&*p)),
    };
    // Every failure keepalloc (or any retry-safe once) returns comes from an attempt run on
    // the failing caller's own thread: an init the plan decided, or an owner construction.
    // A failure with none is a once that refused to try again.
    if witness::attempts_here() == before {
        let what = match outcome {
            Outcome::Failed(e) => e,
            Outcome::Panicked(m) => format!("panicked: {m}"),
            _ => "a planned panic without an attempt".into(),
        };
        return Outcome::Refused(what);
    }
    outcome
}

/// After a failed attempt: the library may already hold the table (it captured it before
/// the attempt failed), and nothing stops it from allocating through it before the retry.
/// It does so here: one small block through its captured copy, whose callback checks the
/// owner's witness (a dropped owner ends the run as a use after free).
fn library_uses_its_capture() {
    let Some(t) = keepalloc_kernels::captured_table() else {
        return;
    };
    let (Some(allocate), Some(deallocate)) = (t.allocate(), t.deallocate()) else {
        return;
    };
    // The captured table keeps the xnn_allocator contract; the block is freed at once and
    // never touched.
    // SAFETY: a contract-keeping table; one block, freed once.
    unsafe {
        let p = allocate(t.context(), 16);
        if !p.is_null() {
            deallocate(t.context(), p);
        }
    }
}

fn record_refused(what: &str, why: String) {
    report::record(refused_finding(what, why));
}

fn refused_finding(what: &str, why: String) -> Finding {
    Finding::invariant(
        kind::NO_RETRY,
        format!("{what}: a caller failed without any attempt being made for it: {why}"),
    )
}

/// Records one finding per distinct allocator beyond the first among `ids`: a different
/// owner is an identity mismatch, the same owner with another serial was rebuilt in place.
fn check_all_equal(ids: &[Identity], what: &str) {
    let Some(first) = ids.first() else { return };
    let mut distinct: Vec<Identity> = vec![*first];
    for id in ids {
        if !distinct.contains(id) {
            distinct.push(*id);
        }
    }
    let freed = u64::from_ne_bytes([witness::DROPPED_FILL; 8]);
    for other in &distinct[1..] {
        if other.owner == first.owner && other.context == first.context {
            // The same owner read with two serials: rebuilt in place, unless one of the
            // reads found the free fill (the owner was freed under that caller).
            let kind = if other.serial == freed || first.serial == freed {
                ViolationKind::UseAfterFree { found: freed }
            } else {
                ViolationKind::OwnerRebuilt {
                    captured: first.serial,
                    found: other.serial,
                }
            };
            report::record(Finding::Violation(Violation {
                kind,
                address: first.owner,
                size: 0,
            }));
        }
    }
    if distinct
        .iter()
        .any(|d| d.owner != first.owner || d.context != first.context)
    {
        report::record(Finding::IdentityMismatch(format!(
            "{what}: {} callers got {} different allocators (owners {})",
            ids.len(),
            distinct.len(),
            distinct
                .iter()
                .map(|d| format!("{:#x} #{}", d.owner, d.serial))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}

/// Exactly one owner was constructed: counted by the owner's constructor
/// ([`witness::constructed`]), not by the provider.
fn check_one_owner() {
    if let Some(finding) = owner_count_finding(witness::constructed()) {
        report::record(finding);
    }
}

/// The finding for `constructed` owner constructions, if it is not exactly one.
fn owner_count_finding(constructed: u64) -> Option<Finding> {
    match constructed {
        1 => None,
        0 => Some(Finding::invariant(
            "no-owner",
            "no owner was constructed, yet callers succeeded",
        )),
        n => Some(Finding::invariant(
            kind::SECOND_OWNER,
            format!("{n} owners were constructed; exactly 1 must be"),
        )),
    }
}

/// The library's captured context must be `id`'s.
fn check_captured(id: &Identity) {
    match keepalloc_kernels::captured_table() {
        None => report::record(Finding::invariant(
            "not-captured",
            "the library never captured a table",
        )),
        Some(t) if t.context() as usize != id.context => {
            report::record(Finding::IdentityMismatch(format!(
                "the library captured context {:p}, but the published owner's is {:#x}",
                t.context(),
                id.context
            )))
        }
        Some(_) if witness::captured_serial() != id.serial => {
            report::record(Finding::Violation(Violation {
                kind: ViolationKind::OwnerRebuilt {
                    captured: witness::captured_serial(),
                    found: id.serial,
                },
                address: id.owner,
                size: 0,
            }))
        }
        Some(_) => {}
    }
}

fn check_library() {
    if let Err(e) = consumer::library_works() {
        report::record(Finding::invariant("library-broken", e));
    }
}

/// A 64-byte allocation through `id`'s C table: written, read back, freed.
fn check_alloc_64(id: &Identity) {
    let t = id.table;
    let (Some(allocate), Some(deallocate)) = (t.allocate(), t.deallocate()) else {
        report::record(Finding::invariant("table-incomplete", "a NULL slot"));
        return;
    };
    // The table follows the xnn_allocator contract (built by `for_allocator` or by a
    // control's canary functions); the 64 bytes are used inside the block and freed once.
    // SAFETY: the table keeps the xnn_allocator contract; the block is used in bounds and freed once.
    unsafe {
        let p = allocate(t.context(), 64).cast::<u8>();
        if p.is_null() {
            report::record(Finding::invariant("alloc-64", "allocate(64) returned NULL"));
            return;
        }
        for i in 0..64 {
            p.add(i).write(i as u8 ^ 0x5A);
        }
        let intact = (0..64).all(|i| p.add(i).read() == i as u8 ^ 0x5A);
        deallocate(t.context(), p.cast());
        if !intact {
            report::record(Finding::invariant(
                "alloc-64",
                "the block lost its contents",
            ));
        }
    }
}

/// After a scenario: the library works through the context it captured, which is the
/// published owner's, a new session gets `expected`, and a 64-byte allocation through it
/// works.
fn check_after<S: Subject>(subject: &'static S, expected: &Identity) {
    check_library();
    check_captured(expected);
    let session = subject.session();
    let mut again = try_acquire(subject, &session);
    for _ in 1..MAX_ATTEMPTS {
        // A provider that runs the library's init on every call may hit a planned failure;
        // a session retries it, as in the race.
        if !matches!(again, Outcome::Failed(_) | Outcome::PlannedPanic) {
            break;
        }
        again = try_acquire(subject, &session);
    }
    match again {
        Outcome::Got(again) if again == *expected => {}
        Outcome::Got(again) => check_all_equal(&[*expected, again], "a new session"),
        Outcome::Failed(e) => report::record(Finding::invariant("acquire-failed", e)),
        Outcome::Refused(e) => record_refused("a new session", e),
        Outcome::PlannedPanic => report::record(Finding::invariant(
            "acquire-panicked",
            "a planned panic after the cell was published",
        )),
        Outcome::Panicked(m) => report::record(Finding::invariant("acquire-panicked", m)),
    }
    check_alloc_64(expected);
}

/// Releases `threads` threads together from a gate; each makes `attempts` tries at most
/// until one succeeds. Returns each thread's identity, recording what went wrong.
fn race<S: Subject>(subject: &'static S, threads: usize, attempts: usize) -> Vec<Identity> {
    enum End {
        Got(Identity),
        Refused(String),
        Failed(String),
    }
    let sessions: Vec<S::Session> = (0..threads).map(|_| subject.session()).collect();
    let gate = Barrier::new(threads);
    let results: Vec<End> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .map(|session| {
                let gate = &gate;
                scope.spawn(move || {
                    gate.wait();
                    delay(Point::AfterGate);
                    let mut last = String::from("no attempt");
                    for _ in 0..attempts {
                        match try_acquire(subject, session) {
                            Outcome::Got(id) => return End::Got(id),
                            Outcome::Failed(e) => {
                                library_uses_its_capture();
                                last = e;
                            }
                            Outcome::PlannedPanic => {
                                library_uses_its_capture();
                                last = "planned panic".into();
                            }
                            Outcome::Refused(e) => return End::Refused(e),
                            Outcome::Panicked(m) => return End::Failed(format!("panicked: {m}")),
                        }
                    }
                    End::Failed(format!("no success in {attempts} attempts; last: {last}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|p| {
                    End::Failed(format!("thread panicked: {}", panic_message(&*p)))
                })
            })
            .collect()
    });
    // "Drop every provider and handle": the sessions go here; the identities are addresses.
    drop(sessions);
    let mut ids = Vec::with_capacity(threads);
    let mut refused = 0;
    for r in results {
        match r {
            End::Got(id) => ids.push(id),
            End::Refused(e) => {
                refused += 1;
                if refused == 1 {
                    record_refused("the race", e);
                }
            }
            End::Failed(e) => report::record(Finding::invariant("acquire-failed", e)),
        }
    }
    ids
}

/// `cold-start`: `threads` sessions acquire together from a gate; all must get the same
/// allocator; then every session and handle is dropped, the library allocates, computes
/// and frees through the context it captured, a new session gets the same allocator, and a
/// 64-byte allocation through it works.
pub fn cold_start<S: Subject>(subject: &'static S, threads: usize) {
    let ids = race(subject, threads, 1);
    check_all_equal(&ids, "cold start");
    check_one_owner();
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
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
    check_all_equal(&ids, "retry under race");
    check_one_owner();
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
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
    check_all_equal(&ids, "after a panic");
    check_one_owner();
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
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
    check_all_equal(&ids, "after failed constructions");
    check_one_owner();
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
}

/// One plan of `out-of-memory`: runs `path` under `plan` armed on `failing`, then without
/// failures, and records (through `record`, as they happen) a path that succeeded although
/// `must_fail` (`oom-ignored`), any other outcome than a clean `OutOfMemory` after a refusal
/// or the right answer (`oom-not-clean`), live blocks other than `baseline` after it
/// (`leak`), and a retry without failures that does not give `expected` (`retry-failed`).
fn check_clean_oom(
    failing: &Failing<Scribble<System>>,
    mut path: impl FnMut() -> Result<Vec<f32>, KernelError>,
    expected: &[f32],
    baseline: usize,
    plan: AllocPlan,
    must_fail: bool,
    record: &mut impl FnMut(Finding),
) {
    failing.arm(plan);
    let result = path();
    let refused = failing.failures();
    failing.disarm();
    match result {
        Err(KernelError::OutOfMemory { .. }) if refused > 0 => {}
        Ok(y) if !must_fail && consumer::close(&y, expected) => {}
        Ok(_) if must_fail => record(Finding::invariant(
            "oom-ignored",
            format!("plan {plan}: {refused} refusals, yet the path succeeded"),
        )),
        other => record(Finding::invariant(
            "oom-not-clean",
            format!("plan {plan}: {other:?} after {refused} refusals"),
        )),
    }
    let now = failing.inner().stats().live_blocks;
    if now != baseline {
        record(Finding::invariant(
            "leak",
            format!("plan {plan}: {now} live blocks, {baseline} before"),
        ));
    }
    match path() {
        Ok(y) if consumer::close(&y, expected) => {}
        other => record(Finding::invariant(
            "retry-failed",
            format!("plan {plan}: the retry gave {other:?}"),
        )),
    }
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
    use core::alloc::Layout;
    use core::ptr::NonNull;

    use allocator_api2::alloc::Allocator;

    use super::*;
    use crate::scribble::ScribbleConfig;

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

    #[test]
    fn owner_count_names_none_one_and_many() {
        let kind = |n| owner_count_finding(n).map(|f| f.kind());
        assert_eq!(kind(0), Some("no-owner"));
        assert_eq!(kind(1), None);
        assert_eq!(kind(2), Some(kind::SECOND_OWNER));
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

    const BLOCK: Layout = match Layout::from_size_align(64, 8) {
        Ok(l) => l,
        Err(_) => panic!(),
    };
    const SITES: usize = 3;

    /// A bug of the fake library's out-of-memory path.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Bug {
        None,
        /// Goes on without a refused block and succeeds.
        IgnoresOom,
        /// Frees what it took and returns another error than `OutOfMemory`.
        WrongError,
        /// Says `OutOfMemory` on its first run without asking for memory.
        SpuriousOom,
        /// Returns `OutOfMemory` without freeing the blocks it took.
        LeaksOnOom,
        /// Returns `OutOfMemory` cleanly, then fails every later run.
        StaysBroken,
    }

    /// A library path of `SITES` allocations through `heap` that answers `[1, 2]`.
    struct FakeLibrary<'a> {
        heap: &'a Failing<Scribble<System>>,
        bug: Bug,
        runs: u32,
        broken: bool,
        leaked: Vec<NonNull<u8>>,
    }

    const ANSWER: [f32; 2] = [1.0, 2.0];
    const OOM: KernelError = KernelError::OutOfMemory {
        bytes: BLOCK.size(),
    };

    impl FakeLibrary<'_> {
        fn run(&mut self) -> Result<Vec<f32>, KernelError> {
            self.runs += 1;
            if self.broken || (self.bug == Bug::SpuriousOom && self.runs == 1) {
                return Err(OOM);
            }
            let mut taken = Vec::new();
            let mut refused = false;
            for _ in 0..SITES {
                match self.heap.allocate(BLOCK) {
                    Ok(b) => taken.push(b.cast::<u8>()),
                    Err(_) if self.bug == Bug::IgnoresOom => refused = true,
                    Err(_) => {
                        refused = true;
                        break;
                    }
                }
            }
            if refused && self.bug == Bug::LeaksOnOom {
                self.leaked.append(&mut taken);
            }
            for b in taken {
                // SAFETY: `b` was allocated by `heap` with `BLOCK` and is freed once.
                unsafe { self.heap.deallocate(b, BLOCK) };
            }
            match (refused, self.bug) {
                (false, _) | (true, Bug::IgnoresOom) => Ok(ANSWER.to_vec()),
                (true, Bug::WrongError) => Err(KernelError::Uninitialized),
                (true, Bug::StaysBroken) => {
                    self.broken = true;
                    Err(OOM)
                }
                (true, _) => Err(OOM),
            }
        }
    }

    /// The kinds `check_clean_oom` records for one plan over a fake library with `bug`.
    fn oom_kinds(bug: Bug, plan: AllocPlan, must_fail: bool) -> Vec<&'static str> {
        let heap = Failing::new(Scribble::new(System, ScribbleConfig::DEFAULT));
        let baseline = heap.inner().stats().live_blocks;
        let mut lib = FakeLibrary {
            heap: &heap,
            bug,
            runs: 0,
            broken: false,
            leaked: Vec::new(),
        };
        let mut kinds = Vec::new();
        check_clean_oom(
            &heap,
            || lib.run(),
            &ANSWER,
            baseline,
            plan,
            must_fail,
            &mut |f: Finding| kinds.push(f.kind()),
        );
        for b in lib.leaked.drain(..) {
            // SAFETY: a block the fake library took with `BLOCK` and never freed.
            unsafe { heap.deallocate(b, BLOCK) };
        }
        kinds
    }

    #[test]
    fn a_correct_oom_path_passes_every_plan() {
        for n in 1..=SITES as u64 {
            assert_eq!(
                oom_kinds(Bug::None, AllocPlan::Nth(n), true),
                Vec::<&str>::new()
            );
        }
        assert_eq!(
            oom_kinds(Bug::None, AllocPlan::From(2), true),
            Vec::<&str>::new()
        );
        assert_eq!(
            oom_kinds(Bug::None, AllocPlan::Never, false),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn oom_ignored_fires_on_a_path_that_succeeds_past_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::IgnoresOom, AllocPlan::Nth(2), true),
            ["oom-ignored"]
        );
    }

    #[test]
    fn oom_not_clean_fires_on_a_wrong_error_or_an_oom_without_refusal() {
        assert_eq!(
            oom_kinds(Bug::WrongError, AllocPlan::Nth(2), true),
            ["oom-not-clean"]
        );
        assert_eq!(
            oom_kinds(Bug::SpuriousOom, AllocPlan::Never, false),
            ["oom-not-clean"]
        );
    }

    #[test]
    fn leak_fires_on_blocks_kept_after_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::LeaksOnOom, AllocPlan::Nth(2), true),
            ["leak"]
        );
    }

    #[test]
    fn retry_failed_fires_on_a_path_broken_by_a_refusal() {
        assert_eq!(
            oom_kinds(Bug::StaysBroken, AllocPlan::Nth(2), true),
            ["retry-failed"]
        );
    }
}
