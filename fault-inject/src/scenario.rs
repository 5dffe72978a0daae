//! The scenarios, written once against [`Subject`] and run against every variant.
//!
//! Each scenario runs once per process (the library captures its table once per process)
//! and records what it finds with [`report::record`]; a memory violation ends the process at
//! once. Which variant runs which scenario:
//!
//! | scenario              | keepalloc | racy | naive-retry |
//! |-----------------------|-----------|------|-------------|
//! | `cold-start`          | yes       | yes  | —  (no failure: a correct once passes) |
//! | `retry-after-capture` | yes       | —  (one thread: no race) | yes |
//! | `retry-under-race`    | yes       | yes  | yes |
//! | `panic-in-init`       | yes       | —  (the first attempt runs alone) | yes |
//! | `out-of-memory`       | yes       | —    | —  (neither control touches the allocation path) |

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;

use keepalloc_kernels::AllocatorTable;

use crate::delay::{Point, delay};
use crate::init_plan::{self, CapturePoint, FailMode, InitPlan, PlannedPanic};
use crate::library;
use crate::report::{self, Finding};

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
    /// Each allocation site of the library's path fails in turn.
    OutOfMemory,
}

impl Scenario {
    /// Every scenario, in the order of the issue.
    pub const ALL: [Scenario; 5] = [
        Scenario::ColdStart,
        Scenario::RetryAfterCapture,
        Scenario::RetryUnderRace,
        Scenario::PanicInInit,
        Scenario::OutOfMemory,
    ];

    /// The scenario's name (`cold-start`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::ColdStart => "cold-start",
            Scenario::RetryAfterCapture => "retry-after-capture",
            Scenario::RetryUnderRace => "retry-under-race",
            Scenario::PanicInInit => "panic-in-init",
            Scenario::OutOfMemory => "out-of-memory",
        }
    }

    /// The scenario with this name.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The init plan the scenario runs under (seeded with `seed`).
    pub fn init_plan(self, seed: u64) -> InitPlan {
        match self {
            Scenario::ColdStart | Scenario::OutOfMemory => InitPlan::never(),
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
}

/// How many attempts fail in `retry-after-capture`.
pub const RETRY_FAILURES: u64 = 3;

/// Attempts one thread makes in `retry-under-race` before it gives up.
pub const MAX_ATTEMPTS: usize = 1000;

/// What is being tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// keepalloc's real provider (`GlobalProvider` over a scribbling backend).
    Keepalloc,
    /// Negative control: the original racy provider (feature `controls`).
    Racy,
    /// Negative control: a correct once that builds the owner inside the fallible closure
    /// (feature `controls`).
    NaiveRetry,
}

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 3] = [Variant::Keepalloc, Variant::Racy, Variant::NaiveRetry];

    /// The variant's name (`keepalloc`, `racy`, `naive-retry`).
    pub const fn name(self) -> &'static str {
        match self {
            Variant::Keepalloc => "keepalloc",
            Variant::Racy => "racy",
            Variant::NaiveRetry => "naive-retry",
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
        match self {
            Variant::Keepalloc => true,
            Variant::Racy => matches!(scenario, Scenario::ColdStart | Scenario::RetryUnderRace),
            Variant::NaiveRetry => matches!(
                scenario,
                Scenario::RetryAfterCapture | Scenario::RetryUnderRace | Scenario::PanicInInit
            ),
        }
    }
}

/// The allocator one caller got: enough to compare callers and the library's capture.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    /// Address of the owner.
    pub owner: usize,
    /// The `context` of the table the caller got.
    pub context: usize,
    /// The table the caller got.
    pub table: &'static AllocatorTable,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.owner == other.owner && self.context == other.context
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

    /// Owners constructed so far in this process.
    fn owners_constructed(&'static self) -> u64;

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
}

fn try_acquire<S: Subject>(subject: &'static S, session: &S::Session) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| subject.acquire(session))) {
        Ok(Ok(id)) => Outcome::Got(id),
        Ok(Err(e)) => Outcome::Failed(e),
        Err(p) if p.downcast_ref::<PlannedPanic>().is_some() => Outcome::PlannedPanic,
        Err(p) => Outcome::Panicked(panic_message(&*p)),
    }
}

/// Records one finding per distinct allocator beyond the first among `ids`.
fn check_all_equal(ids: &[Identity], what: &str) {
    let Some(first) = ids.first() else { return };
    let mut distinct: Vec<Identity> = vec![*first];
    for id in ids {
        if !distinct.contains(id) {
            distinct.push(*id);
        }
    }
    if distinct.len() > 1 {
        report::record(Finding::IdentityMismatch(format!(
            "{what}: {} callers got {} different allocators (owners {})",
            ids.len(),
            distinct.len(),
            distinct
                .iter()
                .map(|d| format!("{:#x}", d.owner))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
}

fn check_one_owner<S: Subject>(subject: &'static S) {
    let owners = subject.owners_constructed();
    if owners != 1 {
        report::record(Finding::invariant(
            "owner-count",
            format!("{owners} owners were constructed; exactly 1 must be"),
        ));
    }
}

/// The library's captured context must be `id`'s.
fn check_captured(id: &Identity) {
    match keepalloc_kernels::captured_table() {
        None => report::record(Finding::invariant(
            "not-captured",
            "the library never captured a table",
        )),
        Some(t) if t.context as usize != id.context => {
            report::record(Finding::IdentityMismatch(format!(
                "the library captured context {:p}, but the published owner's is {:#x}",
                t.context, id.context
            )))
        }
        Some(_) => {}
    }
}

fn check_library() {
    if let Err(e) = library::library_works() {
        report::record(Finding::invariant("library-broken", e));
    }
}

/// A 64-byte allocation through `id`'s C table: written, read back, freed.
fn check_alloc_64(id: &Identity) {
    let t = id.table;
    let (Some(allocate), Some(deallocate)) = (t.allocate, t.deallocate) else {
        report::record(Finding::invariant("table-incomplete", "a NULL slot"));
        return;
    };
    // The table follows the xnn_allocator contract (built by `for_allocator` or by a
    // control's canary functions); the 64 bytes are used inside the block and freed once.
    // SAFETY: the table keeps the xnn_allocator contract; the block is used in bounds and freed once.
    unsafe {
        let p = allocate(t.context, 64).cast::<u8>();
        if p.is_null() {
            report::record(Finding::invariant("alloc-64", "allocate(64) returned NULL"));
            return;
        }
        for i in 0..64 {
            p.add(i).write(i as u8 ^ 0x5A);
        }
        let intact = (0..64).all(|i| p.add(i).read() == i as u8 ^ 0x5A);
        deallocate(t.context, p.cast());
        if !intact {
            report::record(Finding::invariant(
                "alloc-64",
                "the block lost its contents",
            ));
        }
    }
}

/// After a scenario: a new session gets `expected`, the library captured it, the library
/// works through it, and a 64-byte allocation through it works.
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
        Outcome::Got(again) => report::record(Finding::IdentityMismatch(format!(
            "a new session got owner {:#x}, earlier callers {:#x}",
            again.owner, expected.owner
        ))),
        Outcome::Failed(e) => report::record(Finding::invariant("acquire-failed", e)),
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
    let sessions: Vec<S::Session> = (0..threads).map(|_| subject.session()).collect();
    let gate = Barrier::new(threads);
    let results: Vec<Result<Identity, String>> = std::thread::scope(|scope| {
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
                            Outcome::Got(id) => return Ok(id),
                            Outcome::Failed(e) => last = e,
                            Outcome::PlannedPanic => last = "planned panic".into(),
                            Outcome::Panicked(m) => return Err(format!("panicked: {m}")),
                        }
                    }
                    Err(format!("no success in {attempts} attempts; last: {last}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|p| Err(format!("thread panicked: {}", panic_message(&*p))))
            })
            .collect()
    });
    // "Drop every provider and handle": the sessions go here; the identities are addresses.
    drop(sessions);
    let mut ids = Vec::with_capacity(threads);
    for r in results {
        match r {
            Ok(id) => ids.push(id),
            Err(e) => report::record(Finding::invariant("acquire-failed", e)),
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
    check_one_owner(subject);
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
    let mut failures = 0;
    let mut got = None;
    for _ in 0..=RETRY_FAILURES + 2 {
        match try_acquire(subject, &session) {
            Outcome::Got(id) => {
                got = Some(id);
                break;
            }
            Outcome::Failed(_) | Outcome::PlannedPanic => failures += 1,
            Outcome::Panicked(m) => {
                report::record(Finding::invariant("acquire-panicked", m));
                break;
            }
        }
    }
    if failures != RETRY_FAILURES {
        report::record(Finding::invariant(
            "plan-not-followed",
            format!("{failures} attempts failed, {RETRY_FAILURES} were planned"),
        ));
    }
    let Some(id) = got else {
        report::record(Finding::invariant(
            "retry-failed",
            "no attempt succeeded after the planned failures",
        ));
        return;
    };
    check_one_owner(subject);
    check_after(subject, &id);
    subject.final_checks();
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
    check_one_owner(subject);
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
        Outcome::PlannedPanic => {}
        Outcome::Got(_) | Outcome::Failed(_) => report::record(Finding::invariant(
            "plan-not-followed",
            "the first attempt did not panic",
        )),
        Outcome::Panicked(m) => report::record(Finding::invariant("acquire-panicked", m)),
    }
    let ids = race(subject, threads, 1);
    check_all_equal(&ids, "after a panic");
    check_one_owner(subject);
    if let Some(first) = ids.first() {
        check_after(subject, first);
    }
    subject.final_checks();
}
