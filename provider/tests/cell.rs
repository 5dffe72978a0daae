//! The four guarantees of `KeepCell`, each with a test that fails without it.
//!
//! "One owner, built once, the same owner" is judged by the tests' own witnesses: each
//! `make_owner` closure counts its calls in a counter the test owns, and every owner carries a
//! serial number taken at construction (`support/witness.rs`), so a cell that rebuilt its
//! owner in place (same address, its own counter not bumped) is caught. The cell's own
//! `stats()` are checked as well, after them.
#![cfg(not(loom))] // under `--cfg loom` the cell uses loom primitives: see tests/loom.rs

mod common;
#[path = "support/witness.rs"]
mod witness;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use keepalloc_provider::KeepCell;
use witness::next_serial;

/// An owner that counts how many of its kind were dropped, and carries a serial number.
struct Owner {
    drops: Arc<AtomicUsize>,
    value: u64,
    serial: u64,
}

/// An owner that carries only a serial number and a value.
struct Numbered {
    serial: u64,
    value: u64,
}

/// `make_owner` for a `Numbered`: counts its call in the test's `constructed`.
fn numbered(constructed: &AtomicUsize, value: u64) -> Numbered {
    constructed.fetch_add(1, SeqCst);
    Numbered {
        serial: next_serial(),
        value,
    }
}
impl Drop for Owner {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
    }
}

/// Guarantee 1 and 3: a failed publication keeps the owner (same address, never dropped),
/// and the retry publishes that owner. once_cell's `get_or_try_init` would have dropped the
/// owner built by the failed attempt and built a second one.
#[test]
fn failed_publication_keeps_the_owner_and_retries_with_it() {
    common::without_deadlock(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let constructed = AtomicUsize::new(0);
        let cell = KeepCell::new();
        let mut seen = Vec::new();
        let mut seen_serials = Vec::new();
        for attempt in 0..4 {
            let r = cell.get_or_try_init(
                || {
                    constructed.fetch_add(1, SeqCst);
                    Ok::<_, String>(Owner {
                        drops: drops.clone(),
                        value: 42,
                        serial: next_serial(),
                    })
                },
                |owner: &Owner| {
                    seen.push(owner as *const Owner as usize);
                    seen_serials.push(owner.serial);
                    if attempt < 3 {
                        Err(format!("attempt {attempt} failed"))
                    } else {
                        Ok(())
                    }
                },
            );
            assert_eq!(r.is_ok(), attempt == 3, "{:?}", r.as_ref().err());
            assert_eq!(
                drops.load(SeqCst),
                0,
                "an owner was dropped by a failed attempt"
            );
        }
        // The test's witnesses: `make_owner` ran once, and every attempt published the owner
        // with the same serial.
        assert_eq!(
            constructed.load(SeqCst),
            1,
            "a retry constructed another owner"
        );
        assert_eq!(seen_serials.len(), 4);
        assert!(
            seen_serials.windows(2).all(|w| w[0] == w[1]),
            "a retry published another owner: serials {seen_serials:?}"
        );
        assert_eq!(seen.len(), 4);
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "owner moved: {seen:x?}"
        );
        let s = cell.stats();
        assert_eq!(
            (s.owners_constructed, s.init_attempts, s.init_successes),
            (1, 4, 1)
        );
        assert_eq!(
            cell.get().map(|o| (o.value, o.serial)),
            Some((42, seen_serials[0]))
        );
        assert_eq!(
            cell.owner().map(|o| o as *const Owner as usize),
            Some(seen[0])
        );
        drop(cell);
        assert_eq!(
            drops.load(SeqCst),
            1,
            "the owner is dropped with the cell, once"
        );
    });
}

/// A failing `make_owner` builds nothing; the next attempt builds the one owner.
#[test]
fn failed_owner_construction_is_retried() {
    common::without_deadlock(|| {
        let (tries, constructed) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let cell: KeepCell<Numbered> = KeepCell::new();
        let r = cell.get_or_try_init(
            || {
                tries.fetch_add(1, SeqCst);
                Err("oom")
            },
            |_| Ok(()),
        );
        assert_eq!(r.err(), Some("oom"));
        assert!(cell.owner().is_none());
        let owner = cell
            .get_or_try_init(
                || {
                    tries.fetch_add(1, SeqCst);
                    Ok(numbered(&constructed, 5))
                },
                |_| Ok::<_, &str>(()),
            )
            .unwrap();
        assert_eq!(owner.value, 5);
        assert_eq!(
            (tries.load(SeqCst), constructed.load(SeqCst)),
            (2, 1),
            "two make_owner calls, one owner built (counted by the test)"
        );
        assert_eq!(cell.get().map(|o| o.serial), Some(owner.serial));
        assert_eq!(cell.stats().owners_constructed, 1);
    });
}

/// Guarantee 2: many threads released together; one owner, one publication, every caller
/// gets the same owner and sees what the publication wrote.
#[test]
fn racing_first_callers_share_one_owner_and_one_publication() {
    for _round in 0..20 {
        let cell: Arc<KeepCell<(u64, AtomicBool)>> = Arc::new(KeepCell::new());
        let publications = Arc::new(AtomicUsize::new(0));
        let constructed = Arc::new(AtomicUsize::new(0));
        let published = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Barrier::new(32));
        let threads: Vec<_> = (0..32)
            .map(|t| {
                let (cell, publications, gate) = (cell.clone(), publications.clone(), gate.clone());
                let (constructed, published) = (constructed.clone(), published.clone());
                thread::spawn(move || {
                    gate.wait();
                    let owner = cell
                        .get_or_try_init(
                            || {
                                constructed.fetch_add(1, SeqCst);
                                Ok::<_, ()>((t, AtomicBool::new(false)))
                            },
                            |owner| {
                                published.lock().unwrap().push(owner.0);
                                publications.fetch_add(1, SeqCst);
                                owner.1.store(true, std::sync::atomic::Ordering::Relaxed);
                                Ok(())
                            },
                        )
                        .unwrap();
                    // The publication's relaxed write is visible through the cell's
                    // Release/Acquire pair.
                    assert!(owner.1.load(std::sync::atomic::Ordering::Relaxed));
                    (owner as *const _ as usize, owner.0)
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        // The test's witnesses: one `make_owner` call, and every caller got the owner that
        // thread built (its index is the owner's serial), the one that was published.
        assert_eq!(
            constructed.load(SeqCst),
            1,
            "racing callers constructed more than one owner"
        );
        assert_eq!(
            *published.lock().unwrap(),
            [results[0].1],
            "the published owner is not the one callers got"
        );
        assert!(results.windows(2).all(|w| w == [w[0], w[0]]), "{results:?}");
        assert_eq!(publications.load(SeqCst), 1);
        let s = cell.stats();
        assert_eq!((s.owners_constructed, s.init_successes), (1, 1));
    }
}

/// While one attempt runs, the others block (they do not run attempts of their own at the
/// same time); after it fails, they retry one at a time, with the same owner.
#[test]
fn waiters_block_during_an_attempt_and_retry_one_at_a_time() {
    common::without_deadlock(|| {
        let cell: Arc<KeepCell<Numbered>> = Arc::new(KeepCell::new());
        let running = Arc::new(AtomicUsize::new(0));
        let max_running = Arc::new(AtomicUsize::new(0));
        let failures_left = Arc::new(AtomicUsize::new(5));
        let constructed = Arc::new(AtomicUsize::new(0));
        let attempted = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cell, running, max_running, failures_left, gate) = (
                    cell.clone(),
                    running.clone(),
                    max_running.clone(),
                    failures_left.clone(),
                    gate.clone(),
                );
                let (constructed, attempted) = (constructed.clone(), attempted.clone());
                thread::spawn(move || {
                    gate.wait();
                    loop {
                        let r = cell.get_or_try_init(
                            || Ok(numbered(&constructed, 7)),
                            |owner| {
                                attempted.lock().unwrap().push(owner.serial);
                                let now = running.fetch_add(1, SeqCst) + 1;
                                max_running.fetch_max(now, SeqCst);
                                thread::sleep(Duration::from_millis(2));
                                running.fetch_sub(1, SeqCst);
                                let fail = failures_left
                                    .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                                    .is_ok();
                                if fail { Err(()) } else { Ok(()) }
                            },
                        );
                        if let Ok(v) = r {
                            return (v.value, v.serial);
                        }
                    }
                })
            })
            .collect();
        let got: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert!(got.iter().all(|&(value, _)| value == 7));
        assert_eq!(max_running.load(SeqCst), 1, "two attempts ran at once");
        // The test's witnesses: one owner built, every one of the six attempts ran with it,
        // and every caller got it (by serial).
        assert_eq!(
            constructed.load(SeqCst),
            1,
            "a retry constructed another owner"
        );
        let serial = got[0].1;
        assert!(
            got.iter().all(|&(_, s)| s == serial),
            "callers got different owners: {got:?}"
        );
        assert_eq!(
            *attempted.lock().unwrap(),
            [serial; 6],
            "a retry ran with another owner"
        );
        let s = cell.stats();
        assert_eq!(
            (s.owners_constructed, s.init_attempts, s.init_successes),
            (1, 6, 1)
        );
    });
}

/// Guarantee 3 for panics: a panic in `publish` propagates to the caller that ran it, leaves
/// the cell retryable and unpoisoned, and keeps the owner.
#[test]
fn panicking_publication_propagates_and_leaves_the_cell_retryable() {
    common::without_deadlock(|| {
        let drops = Arc::new(AtomicUsize::new(0));
        let constructed = AtomicUsize::new(0);
        let cell = KeepCell::new();
        let first = Mutex::new(None);
        let r = catch_unwind(AssertUnwindSafe(|| {
            cell.get_or_try_init(
                || {
                    constructed.fetch_add(1, SeqCst);
                    Ok::<_, ()>(Owner {
                        drops: drops.clone(),
                        value: 1,
                        serial: next_serial(),
                    })
                },
                |o: &Owner| -> Result<(), ()> {
                    *first.lock().unwrap() = Some((o as *const Owner as usize, o.serial));
                    panic!("library init exploded")
                },
            )
            .map(|_| ())
        }));
        let payload = r.expect_err("the panic must reach the caller");
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"library init exploded")
        );
        assert!(!cell.is_published());
        assert_eq!(drops.load(SeqCst), 0);
        let retried = Mutex::new(None);
        let owner = cell
            .get_or_try_init(
                || unreachable!("the owner exists already"),
                |o| {
                    *retried.lock().unwrap() = Some(o.serial);
                    Ok::<_, ()>(())
                },
            )
            .unwrap();
        let (first_at, first_serial) = first.lock().unwrap().expect("the first attempt ran");
        assert_eq!(
            constructed.load(SeqCst),
            1,
            "the retry constructed another owner"
        );
        assert_eq!(
            (owner.serial, *retried.lock().unwrap()),
            (first_serial, Some(first_serial)),
            "the retry published another owner than the one the panicking attempt saw"
        );
        assert_eq!(owner as *const Owner as usize, first_at);
        assert_eq!(owner.value, 1);
        let s = cell.stats();
        assert_eq!(
            (s.owners_constructed, s.init_attempts, s.init_successes),
            (1, 2, 1)
        );
    });
}

/// A panic while constructing the owner: nothing constructed, retryable.
#[test]
fn panicking_owner_construction_is_retryable() {
    common::without_deadlock(|| {
        let cell: KeepCell<u8> = KeepCell::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _ = cell.get_or_try_init(|| -> Result<u8, ()> { panic!("ctor") }, |_| Ok(()));
        }));
        assert!(r.is_err());
        assert!(cell.owner().is_none());
        assert_eq!(cell.get_or_try_init(|| Ok::<_, ()>(3), |_| Ok(())), Ok(&3));
    });
}

/// Guarantee 4 (behaviour part; the cost is in `benches/fast_path.rs`): once published, the
/// closures are never called again and `get` answers without them.
#[test]
fn after_success_nothing_runs_again() {
    let cell: KeepCell<u8> = KeepCell::new();
    assert_eq!(cell.get(), None);
    cell.get_or_try_init(|| Ok::<_, ()>(9), |_| Ok(())).unwrap();
    for _ in 0..1000 {
        let v = cell
            .get_or_try_init(
                || -> Result<u8, ()> { panic!("constructed twice") },
                |_| panic!("published twice"),
            )
            .unwrap();
        assert_eq!(*v, 9);
    }
    assert_eq!(cell.get(), Some(&9));
    assert_eq!(cell.stats().init_attempts, 1);
}
