//! Loom models of `KeepCell`: every interleaving of 2 and 3 threads racing the first
//! acquire, an attempt that fails after the library captured the owner, and a panicking
//! attempt; and of two libraries on one owner (`LibraryOnce` on top of the owner's cell, one
//! library failing once after capture). Plus the negative controls: the owner built inside
//! the fallible closure (once_cell style), the check-then-act race, and one once shared by
//! both libraries must each FAIL.
//!
//! Run with `cargo xtask loom` (that is `RUSTFLAGS="--cfg loom" cargo test --release -p
//! keepalloc-provider --test loom`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::Mutex;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use keepalloc_provider::{KeepCell, LibraryOnce};

/// The owner: counts its drops so that a dropped owner is seen.
struct Owner {
    drops: Arc<AtomicUsize>,
}
impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// A stand-in for XNNPACK: captures the first context it is given (CAS), like
/// `xnn_initialize`.
#[derive(Default)]
struct Library {
    captured: AtomicUsize,
}
impl Library {
    fn capture(&self, owner: &Owner) {
        let _ = self
            .captured
            .compare_exchange(0, owner as *const Owner as usize, SeqCst, SeqCst);
    }
}

/// Takes one unit from a budget of planned failures: true while some were left.
fn take_one(budget: &AtomicUsize) -> bool {
    budget
        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// What every model checks once all threads are done.
fn check(cell: &KeepCell<Owner>, lib: &Library, drops: &AtomicUsize, results: &[usize]) {
    let s = cell.stats();
    assert_eq!(s.owners_constructed, 1, "owners constructed: {s:?}");
    assert_eq!(s.init_successes, 1, "publications: {s:?}");
    let owner = cell.get().expect("published") as *const Owner as usize;
    assert!(
        results.iter().all(|&r| r == owner),
        "callers saw different owners"
    );
    assert_eq!(
        lib.captured.load(SeqCst),
        owner,
        "the library captured another owner"
    );
    assert_eq!(
        drops.load(SeqCst),
        0,
        "an owner was dropped while the library holds it"
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
        let drops = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (cell, lib, drops) = (cell.clone(), lib.clone(), drops.clone());
                thread::spawn(move || {
                    let owner = cell
                        .get_or_try_init(
                            || Ok::<_, ()>(Owner { drops }),
                            |o| {
                                lib.capture(o);
                                Ok(())
                            },
                        )
                        .unwrap();
                    owner as *const Owner as usize
                })
            })
            .collect();
        let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check(&cell, &lib, &drops, &results);
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

/// The first attempt lets the library capture the owner, then fails; two threads keep
/// retrying until they succeed.
#[test]
fn failure_after_capture_then_retry() {
    loom::model(|| {
        let cell = Arc::new(KeepCell::new());
        let lib = Arc::new(Library::default());
        let drops = Arc::new(AtomicUsize::new(0));
        let failures_left = Arc::new(AtomicUsize::new(1));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (cell, lib, drops, failures_left) = (
                    cell.clone(),
                    lib.clone(),
                    drops.clone(),
                    failures_left.clone(),
                );
                thread::spawn(move || {
                    loop {
                        let r = cell.get_or_try_init(
                            || {
                                Ok(Owner {
                                    drops: drops.clone(),
                                })
                            },
                            |o| {
                                lib.capture(o);
                                if take_one(&failures_left) {
                                    Err(())
                                } else {
                                    Ok(())
                                }
                            },
                        );
                        if let Ok(o) = r {
                            return o as *const Owner as usize;
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check(&cell, &lib, &drops, &results);
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
        let drops = Arc::new(AtomicUsize::new(0));
        let panics_left = Arc::new(AtomicUsize::new(1));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (cell, lib, drops, panics_left) = (
                    cell.clone(),
                    lib.clone(),
                    drops.clone(),
                    panics_left.clone(),
                );
                thread::spawn(move || {
                    loop {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            cell.get_or_try_init(
                                || {
                                    Ok::<_, ()>(Owner {
                                        drops: drops.clone(),
                                    })
                                },
                                |o| {
                                    lib.capture(o);
                                    if take_one(&panics_left) {
                                        panic!("init panicked");
                                    }
                                    Ok(())
                                },
                            )
                            .map(|o| o as *const Owner as usize)
                        }));
                        if let Ok(Ok(o)) = r {
                            return o;
                        }
                    }
                })
            })
            .collect();
        let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        check(&cell, &lib, &drops, &results);
    });
}

/// The negative control: a correct once (a mutex), but the owner is built INSIDE the
/// fallible closure and dropped when it fails, as once_cell's `get_or_try_init` does.
struct NaiveCell {
    slot: Mutex<Option<Box<Owner>>>,
}
impl NaiveCell {
    fn get_or_try_init(
        &self,
        make: impl FnOnce() -> Owner,
        publish: impl FnOnce(&Owner) -> Result<(), ()>,
    ) -> Result<usize, ()> {
        let mut slot = self.slot.lock().unwrap();
        if let Some(o) = slot.as_ref() {
            return Ok(&**o as *const Owner as usize);
        }
        let owner = Box::new(make());
        publish(&owner)?; // on failure `owner` is dropped here: the bug
        let at = &*owner as *const Owner as usize;
        *slot = Some(owner);
        Ok(at)
    }
}

#[test]
fn naive_retry_model_fails() {
    let outcome = std::panic::catch_unwind(|| {
        loom::model(|| {
            let cell = Arc::new(NaiveCell {
                slot: Mutex::new(None),
            });
            let lib = Arc::new(Library::default());
            let drops = Arc::new(AtomicUsize::new(0));
            let failures_left = Arc::new(AtomicUsize::new(1));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (cell, lib, drops, failures_left) = (
                        cell.clone(),
                        lib.clone(),
                        drops.clone(),
                        failures_left.clone(),
                    );
                    thread::spawn(move || {
                        loop {
                            let r = cell.get_or_try_init(
                                || Owner {
                                    drops: drops.clone(),
                                },
                                |o| {
                                    lib.capture(o);
                                    if take_one(&failures_left) {
                                        Err(())
                                    } else {
                                        Ok(())
                                    }
                                },
                            );
                            if let Ok(at) = r {
                                return at;
                            }
                            thread::yield_now();
                        }
                    })
                })
                .collect();
            let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            let owner = results[0];
            assert!(results.iter().all(|&r| r == owner));
            assert_eq!(
                drops.load(SeqCst),
                0,
                "naive retry dropped the captured owner"
            );
            assert_eq!(
                lib.captured.load(SeqCst),
                owner,
                "library holds a dead owner"
            );
        });
    });
    assert!(
        outcome.is_err(),
        "the naive (once_cell-style) model must fail: the loom check cannot tell otherwise"
    );
}

/// The second negative control: ONNX Runtime's original check-then-act. Two threads both see
/// "no owner", both build one, the second store replaces (and drops) the first, and the
/// library keeps whichever it captured first. The race model must find that interleaving.
#[test]
fn racy_check_then_act_model_fails() {
    use loom::sync::atomic::AtomicPtr;
    let outcome = std::panic::catch_unwind(|| {
        loom::model(|| {
            let stored: Arc<AtomicPtr<Owner>> = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
            let lib = Arc::new(Library::default());
            let drops = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (stored, lib, drops) = (stored.clone(), lib.clone(), drops.clone());
                    thread::spawn(move || {
                        if stored.load(SeqCst).is_null() {
                            let owner = Box::into_raw(Box::new(Owner { drops }));
                            let old = stored.swap(owner, SeqCst);
                            if !old.is_null() {
                                // SAFETY: `old` came from `Box::into_raw` and was replaced.
                                drop(unsafe { Box::from_raw(old) });
                            }
                        }
                        let owner = stored.load(SeqCst);
                        // In this model an owner is only freed after being replaced,
                        // and the assertion below reports that case; we read only its address.
                        // SAFETY: only the owner's address is used.
                        lib.capture(unsafe { &*owner });
                        owner as usize
                    })
                })
                .collect();
            let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            let last = stored.load(SeqCst);
            let dropped = drops.load(SeqCst);
            // SAFETY: `last` is the live, stored owner.
            drop(unsafe { Box::from_raw(last) });
            assert_eq!(dropped, 0, "racy provider dropped an owner");
            assert!(
                results.iter().all(|&r| r == last as usize),
                "callers saw two owners"
            );
        });
    });
    assert!(outcome.is_err(), "the racy model must fail under loom");
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
    drops: &Arc<AtomicUsize>,
    failures_left: &AtomicUsize,
) -> Result<usize, ()> {
    let owner = cell.get_or_try_init(
        || {
            Ok(Owner {
                drops: drops.clone(),
            })
        },
        |_| Ok(()),
    )?;
    once.run(|| {
        consumer.lib.capture(owner);
        if take_one(failures_left) {
            return Err(());
        }
        consumer.successes.fetch_add(1, SeqCst);
        Ok(())
    })?;
    Ok(owner as *const Owner as usize)
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
        let drops = Arc::new(AtomicUsize::new(0));
        let failures_left = Arc::new([AtomicUsize::new(1), AtomicUsize::new(0)]);
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (cell, onces, consumers, drops, failures_left) = (
                    cell.clone(),
                    onces.clone(),
                    consumers.clone(),
                    drops.clone(),
                    failures_left.clone(),
                );
                thread::spawn(move || {
                    let once = if shared { &onces[0] } else { &onces[i] };
                    loop {
                        if let Ok(at) =
                            acquire_library(&cell, once, &consumers[i], &drops, &failures_left[i])
                        {
                            return at;
                        }
                        thread::yield_now();
                    }
                })
            })
            .collect();
        let results: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let s = cell.stats();
        assert_eq!(s.owners_constructed, 1, "owners constructed: {s:?}");
        let owner = cell.get().expect("published") as *const Owner as usize;
        assert!(results.iter().all(|&r| r == owner), "one table for both");
        for (i, c) in consumers.iter().enumerate() {
            assert_eq!(
                c.successes.load(SeqCst),
                1,
                "library {i} was not initialized exactly once"
            );
            assert_eq!(c.lib.captured.load(SeqCst), owner, "library {i}'s owner");
        }
        assert_eq!(drops.load(SeqCst), 0, "an owner was dropped");
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
    let outcome = std::panic::catch_unwind(|| two_libraries(true));
    assert!(
        outcome.is_err(),
        "a once shared by two libraries skips the second library's hook: the model must fail"
    );
}
