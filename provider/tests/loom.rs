//! Loom models of `KeepCell`: every interleaving of 2 and 3 threads racing the first
//! acquire, an attempt that fails after the library captured the owner, and a panicking
//! attempt. Plus the negative control: the same model with the owner built inside the
//! fallible closure (once_cell style) must FAIL.
//!
//! Run with `cargo xtask loom` (that is `RUSTFLAGS="--cfg loom" cargo test --release -p
//! keepalloc-provider --test loom`).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Mutex;
use loom::thread;

use keepalloc_provider::KeepCell;

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

/// What every model checks once all threads are done.
fn check(cell: &KeepCell<Owner>, lib: &Library, drops: &AtomicUsize, results: &[usize]) {
    let s = cell.stats();
    assert_eq!(s.owners_constructed, 1, "owners constructed: {s:?}");
    assert_eq!(s.init_successes, 1, "publications: {s:?}");
    let owner = cell.get().expect("published") as *const Owner as usize;
    assert!(results.iter().all(|&r| r == owner), "callers saw different owners");
    assert_eq!(lib.captured.load(SeqCst), owner, "the library captured another owner");
    assert_eq!(drops.load(SeqCst), 0, "an owner was dropped while the library holds it");
}

/// `n` threads race the first acquire; every attempt succeeds.
fn race(n: usize) {
    loom::model(move || {
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
    race(2);
}

#[test]
fn three_threads_race_the_first_acquire() {
    race(3);
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
                let (cell, lib, drops, failures_left) =
                    (cell.clone(), lib.clone(), drops.clone(), failures_left.clone());
                thread::spawn(move || {
                    loop {
                        let r = cell.get_or_try_init(
                            || Ok(Owner { drops: drops.clone() }),
                            |o| {
                                lib.capture(o);
                                if failures_left
                                    .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                                    .is_ok()
                                {
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
                let (cell, lib, drops, panics_left) =
                    (cell.clone(), lib.clone(), drops.clone(), panics_left.clone());
                thread::spawn(move || {
                    loop {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            cell.get_or_try_init(
                                || Ok::<_, ()>(Owner { drops: drops.clone() }),
                                |o| {
                                    lib.capture(o);
                                    if panics_left
                                        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                                        .is_ok()
                                    {
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
                    let (cell, lib, drops, failures_left) =
                        (cell.clone(), lib.clone(), drops.clone(), failures_left.clone());
                    thread::spawn(move || {
                        loop {
                            let r = cell.get_or_try_init(
                                || Owner { drops: drops.clone() },
                                |o| {
                                    lib.capture(o);
                                    if failures_left
                                        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                                        .is_ok()
                                    {
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
            assert_eq!(drops.load(SeqCst), 0, "naive retry dropped the captured owner");
            assert_eq!(lib.captured.load(SeqCst), owner, "library holds a dead owner");
        });
    });
    assert!(
        outcome.is_err(),
        "the naive (once_cell-style) model must fail: the loom check cannot tell otherwise"
    );
}
