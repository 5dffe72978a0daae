//! Loom models of `KeepCell`: every interleaving of 2 and 3 threads racing the first
//! acquire, an attempt that fails after the library captured the owner, and a panicking
//! attempt; and of two libraries on one owner (`LibraryOnce` on top of the owner's cell, one
//! library failing once after capture). Plus the negative controls: the owner built inside
//! the fallible closure (once_cell style), the check-then-act race, and one once shared by
//! both libraries must each FAIL, and by the check its bug breaks (a loom limit or any other
//! panic is no catch).
//!
//! Every verdict comes from the test's own records ([`Witness`]: owners constructed, each
//! with a serial; publish hooks run and succeeded; owners dropped; what each caller and the
//! library saw), not from the cell's counters, which are checked after them and must agree.
//!
//! Run with `cargo xtask loom` (that is `RUSTFLAGS="--cfg loom" cargo test --release -p
//! keepalloc-provider --test loom`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::Mutex;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use std::sync::Arc as StdArc;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use keepalloc_provider::{KeepCell, LibraryOnce};

/// The owner: carries the serial number of its construction and counts its drops, so that a
/// second owner and a dropped one are both seen by the test, not by the cell's counters.
struct Owner {
    serial: usize,
    drops: Arc<AtomicUsize>,
}
impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// What the test itself records, independent of the cell it judges: owners constructed
/// (each gets the next serial), publish hooks run and succeeded, and owners dropped.
///
/// The counts are `std` atomics, which loom does not model: they are the test's notes, not
/// part of the synchronization under test, and as loom atomics every count would be one more
/// scheduling point in every thread (a run of the models went past 10 GB and 17 minutes).
/// Loom runs one thread at a time, so each note is exact in every interleaving. The drop
/// count stays a loom atomic, as before.
#[derive(Clone)]
struct Witness {
    constructed: StdArc<StdAtomicUsize>,
    attempts: StdArc<StdAtomicUsize>,
    published: StdArc<StdAtomicUsize>,
    drops: Arc<AtomicUsize>,
}
impl Witness {
    fn new() -> Self {
        Witness {
            constructed: StdArc::new(StdAtomicUsize::new(0)),
            attempts: StdArc::new(StdAtomicUsize::new(0)),
            published: StdArc::new(StdAtomicUsize::new(0)),
            drops: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A publish hook was called, counted here.
    fn attempt(&self) {
        self.attempts.fetch_add(1, SeqCst);
    }

    /// Builds an owner: the next serial, counted here.
    fn make(&self) -> Owner {
        Owner {
            serial: self.constructed.fetch_add(1, SeqCst) + 1,
            drops: self.drops.clone(),
        }
    }

    /// A publish hook's success, counted here.
    fn publish_ok(&self) -> Result<(), ()> {
        self.published.fetch_add(1, SeqCst);
        Ok(())
    }
}

/// A stand-in for XNNPACK: captures the first context it is given (CAS), like
/// `xnn_initialize`, and the serial of that owner.
#[derive(Default)]
struct Library {
    captured: AtomicUsize,
    /// A note of the test's, like [`Witness`]'s counts: written only by the CAS's winner.
    serial: StdAtomicUsize,
}
impl Library {
    fn capture(&self, owner: &Owner) {
        if self
            .captured
            .compare_exchange(0, owner as *const Owner as usize, SeqCst, SeqCst)
            .is_ok()
        {
            self.serial.store(owner.serial, SeqCst);
        }
    }
}

/// The publish hook of the retry models: counted, the library captures the owner, then it
/// fails while `failures_left` lasts (after the capture, as XNNPACK's caller can).
fn publish_hook(
    w: &Witness,
    lib: &Library,
    o: &Owner,
    failures_left: &AtomicUsize,
) -> Result<(), ()> {
    w.attempt();
    lib.capture(o);
    if take_one(failures_left) {
        Err(())
    } else {
        w.publish_ok()
    }
}

/// What a caller saw: the owner's address and serial, read while it held the owner.
type Seen = (usize, usize);

fn seen(owner: &Owner) -> Seen {
    (owner as *const Owner as usize, owner.serial)
}

/// Takes one unit from a budget of planned failures: true while some were left.
fn take_one(budget: &AtomicUsize) -> bool {
    budget
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// What every model checks once all threads are done, from the test's own records only:
/// one owner constructed, every caller and the library on it (by serial and address), none
/// dropped, and (with `publications`) that many successful publish hooks. The negative
/// controls run the same checks and must fail one of them.
fn check(w: &Witness, lib: &Library, results: &[Seen], publications: Option<usize>) {
    assert_eq!(
        w.constructed.load(SeqCst),
        1,
        "owners constructed (the test's count)"
    );
    let (owner, serial) = results[0];
    assert!(
        results.iter().all(|&r| r == (owner, serial)),
        "callers saw different owners: {results:?}"
    );
    assert_eq!(
        (lib.captured.load(SeqCst), lib.serial.load(SeqCst)),
        (owner, serial),
        "the library captured another owner"
    );
    assert_eq!(
        w.drops.load(SeqCst),
        0,
        "an owner was dropped while the library holds it"
    );
    if let Some(n) = publications {
        assert_eq!(w.published.load(SeqCst), n, "successful publications");
    }
}

/// The cell's own counters and slot, checked after [`check`]: they must agree with what the
/// test saw.
fn check_cell(cell: &KeepCell<Owner>, results: &[Seen]) {
    let s = cell.stats();
    assert_eq!(
        s.owners_constructed, 1,
        "the cell's owners constructed: {s:?}"
    );
    assert_eq!(s.init_successes, 1, "the cell's publications: {s:?}");
    let published = cell.get().expect("published");
    assert_eq!(seen(published), results[0], "the cell's published owner");
}

/// A negative control's model must fail, and by one of `signatures` (the messages of the
/// checks its bug breaks): any other panic (a loom limit, a deadlock report, a bug in the
/// model) is no catch.
fn must_fail_by(control: &str, signatures: &[&str], model: impl FnOnce() + std::panic::UnwindSafe) {
    let payload = match std::panic::catch_unwind(model) {
        Ok(()) => panic!("the {control} model passed: the loom check cannot tell it from KeepCell"),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("<a panic without a message>");
    assert!(
        signatures.iter().any(|s| message.contains(s)),
        "the {control} model failed, but not by its signature {signatures:?}: {message}"
    );
    println!(
        "control {control}: caught: {}",
        message.lines().next().unwrap_or("")
    );
}

/// `n` threads race the first acquire; every attempt succeeds. `bound` limits preemptions
/// (an unbounded 3-thread search runs for tens of minutes; 2 threads is exhaustive).
fn race(n: usize, bound: Option<usize>) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = bound;
    }
    builder.check(move || {
        let cell = Arc::new(KeepCell::new());
        let lib = Arc::new(Library::default());
        let w = Witness::new();
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (cell, lib, w) = (cell.clone(), lib.clone(), w.clone());
                thread::spawn(move || {
                    let owner = cell
                        .get_or_try_init(
                            || Ok::<_, ()>(w.make()),
                            |o| {
                                w.attempt();
                                lib.capture(o);
                                w.publish_ok()
                            },
                        )
                        .unwrap();
                    seen(owner)
                })
            })
            .collect();
        let results: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check(&w, &lib, &results, Some(1));
        check_cell(&cell, &results);
    });
}

#[test]
fn two_threads_race_the_first_acquire() {
    race(2, None);
}

#[test]
fn three_threads_race_the_first_acquire() {
    race(3, Some(3));
}

/// A once that builds an owner and runs a fallible publish hook on it: the cell under test
/// and the naive control run the same retry model through it.
trait RetryCell: Send + Sync + 'static {
    fn get(
        &self,
        make: impl FnOnce() -> Owner,
        publish: impl FnOnce(&Owner) -> Result<(), ()>,
    ) -> Result<Seen, ()>;
}

impl RetryCell for KeepCell<Owner> {
    fn get(
        &self,
        make: impl FnOnce() -> Owner,
        publish: impl FnOnce(&Owner) -> Result<(), ()>,
    ) -> Result<Seen, ()> {
        self.get_or_try_init(|| Ok(make()), publish).map(seen)
    }
}

/// The retry model: the first attempt lets the library capture the owner, then fails; two
/// threads keep retrying until they succeed. Checked by [`check`] (one owner, one
/// successful publication); returns the cell and the witness for the caller's own checks.
fn retry_model<C: RetryCell>(cell: C) -> (Arc<C>, Witness, Vec<Seen>) {
    let cell = Arc::new(cell);
    let lib = Arc::new(Library::default());
    let w = Witness::new();
    let failures_left = Arc::new(AtomicUsize::new(1));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (cell, lib, w, failures_left) =
                (cell.clone(), lib.clone(), w.clone(), failures_left.clone());
            thread::spawn(move || {
                loop {
                    let r = cell.get(|| w.make(), |o| publish_hook(&w, &lib, o, &failures_left));
                    if let Ok(at) = r {
                        return at;
                    }
                    thread::yield_now();
                }
            })
        })
        .collect();
    let results: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    check(&w, &lib, &results, Some(1));
    (cell, w, results)
}

/// [`retry_model`] on `KeepCell`: it passes, with exactly two publish attempts.
#[test]
fn failure_after_capture_then_retry() {
    loom::model(|| {
        let (cell, w, results) = retry_model(KeepCell::new());
        assert_eq!(
            w.attempts.load(SeqCst),
            2,
            "publish attempts (the test's count)"
        );
        check_cell(&cell, &results);
        assert_eq!(cell.stats().init_attempts, 2);
    });
}

/// The first attempt panics after capture; the panic reaches that caller, the other thread
/// (and then the first, retrying) succeed with the same owner; nothing is poisoned.
#[test]
fn panicking_attempt_then_retry() {
    loom::model(|| {
        let cell = Arc::new(KeepCell::new());
        let lib = Arc::new(Library::default());
        let w = Witness::new();
        let panics_left = Arc::new(AtomicUsize::new(1));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (cell, lib, w, panics_left) =
                    (cell.clone(), lib.clone(), w.clone(), panics_left.clone());
                thread::spawn(move || {
                    loop {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            cell.get_or_try_init(
                                || Ok::<_, ()>(w.make()),
                                |o| {
                                    w.attempt();
                                    lib.capture(o);
                                    if take_one(&panics_left) {
                                        panic!("init panicked");
                                    }
                                    w.publish_ok()
                                },
                            )
                            .map(seen)
                        }));
                        if let Ok(Ok(o)) = r {
                            return o;
                        }
                    }
                })
            })
            .collect();
        let results: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check(&w, &lib, &results, Some(1));
        assert_eq!(
            w.attempts.load(SeqCst),
            2,
            "publish attempts (the test's count)"
        );
        check_cell(&cell, &results);
    });
}

/// The negative control: a correct once (a mutex), but the owner is built INSIDE the
/// fallible closure and dropped when it fails, as once_cell's `get_or_try_init` does.
struct NaiveCell {
    slot: Mutex<Option<Box<Owner>>>,
}
impl RetryCell for NaiveCell {
    fn get(
        &self,
        make: impl FnOnce() -> Owner,
        publish: impl FnOnce(&Owner) -> Result<(), ()>,
    ) -> Result<Seen, ()> {
        let mut slot = self.slot.lock().unwrap();
        if let Some(o) = slot.as_ref() {
            return Ok(seen(o));
        }
        let owner = Box::new(make());
        publish(&owner)?; // on failure `owner` is dropped here: the bug
        let at = seen(&owner);
        *slot = Some(owner);
        Ok(at)
    }
}

/// The naive cell under [`retry_model`] (and so [`check`]): it must fail by a second owner, a
/// dropped one, or the library left on a dead one.
#[test]
fn naive_retry_model_fails() {
    must_fail_by(
        "naive-retry",
        &[
            "owners constructed",
            "the library captured another owner",
            "an owner was dropped",
        ],
        || {
            loom::model(|| {
                retry_model(NaiveCell {
                    slot: Mutex::new(None),
                });
            });
        },
    );
}

/// The second negative control: ONNX Runtime's original check-then-act. Two threads both see
/// "no owner", both build one, the second store replaces (and drops) the first, and the
/// library keeps whichever it captured first. The race model must find that interleaving.
#[test]
fn racy_check_then_act_model_fails() {
    use loom::sync::atomic::AtomicPtr;
    must_fail_by(
        "racy",
        &[
            "owners constructed",
            "racy provider dropped an owner",
            "callers saw two owners",
        ],
        || {
            loom::model(|| {
                let stored: Arc<AtomicPtr<Owner>> = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
                let lib = Arc::new(Library::default());
                let w = Witness::new();
                let threads: Vec<_> = (0..2)
                    .map(|_| {
                        let (stored, lib, w) = (stored.clone(), lib.clone(), w.clone());
                        thread::spawn(move || {
                            if stored.load(SeqCst).is_null() {
                                let owner = Box::into_raw(Box::new(w.make()));
                                let old = stored.swap(owner, SeqCst);
                                if !old.is_null() {
                                    // SAFETY: `old` came from `Box::into_raw` and was replaced.
                                    drop(unsafe { Box::from_raw(old) });
                                }
                            }
                            // Only the address: the other thread may free this owner at any
                            // time (reported below), so nothing is read through it.
                            let owner = stored.load(SeqCst) as usize;
                            let _ = lib.captured.compare_exchange(0, owner, SeqCst, SeqCst);
                            owner
                        })
                    })
                    .collect();
                let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
                let last = stored.load(SeqCst);
                let dropped = w.drops.load(SeqCst);
                // SAFETY: `last` is the live, stored owner.
                drop(unsafe { Box::from_raw(last) });
                assert_eq!(
                    w.constructed.load(SeqCst),
                    1,
                    "owners constructed (the test's count)"
                );
                assert_eq!(dropped, 0, "racy provider dropped an owner");
                assert!(
                    results.iter().all(|&r| r == last as usize),
                    "callers saw two owners"
                );
            });
        },
    );
}

/// One library's init hook in the two-library models: counts its successful calls and
/// captures the owner it was given.
#[derive(Default)]
struct Consumer {
    lib: Library,
    successes: AtomicUsize,
}

/// What `GlobalProvider::acquire_library` does: the owner's once (construct + publish), then
/// the library's own once around its hook. The caller picks the library's once: the real
/// provider gives each library its own; the negative control below shares one.
fn acquire_library(
    cell: &KeepCell<Owner>,
    once: &LibraryOnce,
    consumer: &Consumer,
    w: &Witness,
    failures_left: &AtomicUsize,
) -> Result<Seen, ()> {
    let owner = cell.get_or_try_init(
        || Ok(w.make()),
        |_| {
            w.attempt();
            w.publish_ok()
        },
    )?;
    once.run(|| {
        consumer.lib.capture(owner);
        if take_one(failures_left) {
            return Err(());
        }
        consumer.successes.fetch_add(1, SeqCst);
        Ok(())
    })?;
    Ok(seen(owner))
}

/// Two libraries on one owner: thread A initializes library A (whose first hook fails after
/// capturing the owner, then retries), thread B library B. `shared` makes both libraries use
/// ONE once (the negative control).
fn two_libraries(shared: bool) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(move || {
        let cell = Arc::new(KeepCell::new());
        let onces = Arc::new([LibraryOnce::new(), LibraryOnce::new()]);
        let consumers = Arc::new([Consumer::default(), Consumer::default()]);
        let w = Witness::new();
        let failures_left = Arc::new([AtomicUsize::new(1), AtomicUsize::new(0)]);
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (cell, onces, consumers, w, failures_left) = (
                    cell.clone(),
                    onces.clone(),
                    consumers.clone(),
                    w.clone(),
                    failures_left.clone(),
                );
                thread::spawn(move || {
                    let once = if shared { &onces[0] } else { &onces[i] };
                    loop {
                        if let Ok(at) =
                            acquire_library(&cell, once, &consumers[i], &w, &failures_left[i])
                        {
                            return at;
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        let results: Vec<Seen> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // The test's own records first: each library's hook count and capture.
        for (i, c) in consumers.iter().enumerate() {
            assert_eq!(
                c.successes.load(SeqCst),
                1,
                "library {i} was not initialized exactly once"
            );
        }
        check(&w, &consumers[0].lib, &results, Some(1));
        check(&w, &consumers[1].lib, &results, Some(1));
        check_cell(&cell, &results);
    });
}

/// Every interleaving (preemption bound 3) of two libraries initialized on one owner, one of
/// them failing once after capturing the owner.
#[test]
fn two_libraries_on_one_owner() {
    two_libraries(false);
}

/// Negative control: one once shared by both libraries (the first version of the C API: the
/// first library's success made every later hook a silent no-op). Must fail.
#[test]
fn shared_library_once_model_fails() {
    // A once shared by two libraries skips the second library's hook.
    must_fail_by(
        "shared-library-once",
        &["was not initialized exactly once"],
        || two_libraries(true),
    );
}
