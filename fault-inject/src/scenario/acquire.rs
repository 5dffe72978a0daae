//! How the scenarios acquire: one caller's attempt and what came of it, the race of many
//! from a gate, and the library using its capture between attempts.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Barrier;

use super::{Identity, Subject, kind};
use crate::delay::{Point, delay};
use crate::init_plan::PlannedPanic;
use crate::report::{self, Finding};
use crate::witness;

pub(super) fn panic_message(payload: &(dyn Any + Send)) -> String {
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
pub(super) enum Outcome {
    Got(Identity),
    Failed(String),
    PlannedPanic,
    Panicked(String),
    /// Failed (by error or panic) without any attempt run for this caller: the once would
    /// not retry.
    Refused(String),
}

pub(super) fn try_acquire<S: Subject>(subject: &'static S, session: &S::Session) -> Outcome {
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
pub(super) fn library_uses_its_capture() {
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

/// Releases `threads` threads together from a gate; each makes `attempts` tries at most
/// until one succeeds. Returns each thread's identity, recording what went wrong.
pub(super) fn race<S: Subject>(
    subject: &'static S,
    threads: usize,
    attempts: usize,
) -> Vec<Identity> {
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

/// Records that `what` was refused without an attempt made for it.
pub(super) fn record_refused(what: &str, why: String) {
    report::record(refused_finding(what, why));
}

/// The finding for a caller refused without an attempt made for it.
pub(super) fn refused_finding(what: &str, why: String) -> Finding {
    Finding::invariant(
        kind::NO_RETRY,
        format!("{what}: a caller failed without any attempt being made for it: {why}"),
    )
}
