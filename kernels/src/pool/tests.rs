//! The pool's unit tests: what only the crate can see (a capped pool, the state word, the
//! claim schedule). Each runs under the deadlock watchdog of `keepalloc-testkit`.

use keepalloc_allocators::{AllocatorTable, System};
use keepalloc_testkit::watchdog::watchdog;
use std::collections::HashSet;
use std::sync::Barrier;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::state::{ALL_SEATS, CLOSED, ends, next_tag, state_of, tagged};
use super::{Capped, Parallel, ThreadPool};

static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);

/// The distinct threads that ran the 48 tasks of one run on `pool`, each task asleep for
/// a millisecond (sleeping, so every thread gets a core on a small machine).
fn threads_used(pool: &dyn Parallel) -> usize {
    let seen = Mutex::new(HashSet::new());
    pool.run_ranges(48, &|r| {
        for _ in r {
            seen.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    seen.into_inner().unwrap().len()
}

#[test]
fn a_capped_pool_runs_a_job_on_at_most_its_threads() {
    let _bound = watchdog("a_capped_pool_runs_a_job_on_at_most_its_threads");
    let pool = ThreadPool::with_table(&TABLE, 4).unwrap();
    // The whole pool: more than two threads take part (the control for the cap).
    assert!(threads_used(&pool) > 2);
    for cap in [1, 2, 3] {
        let capped = Capped::new(&pool, cap);
        assert_eq!(capped.threads(), cap);
        for _ in 0..3 {
            let used = threads_used(&capped);
            assert!(used <= cap, "cap {cap}: {used} threads ran tasks");
        }
    }
    // And the pool is whole again afterwards.
    assert!(threads_used(&pool) > 2);
    assert_eq!(Capped::new(&pool, 0).threads(), 1);
    assert_eq!(Capped::new(&pool, 64).threads(), 4);
}

#[test]
fn tags_count_up_one_per_round_and_a_full_job_leaves_the_seats_alone() {
    let _bound = watchdog("tags_count_up_one_per_round_and_a_full_job_leaves_the_seats_alone");
    // The tag is what tells a worker's stale read of a job from the current one: it
    // must be new for every round, for as long as possible (2^32 rounds).
    assert_eq!(next_tag(state_of(7, 3, 9)), 8);
    assert_eq!(next_tag(tagged(u64::from(u32::MAX), CLOSED)), 0);
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let s = pool.shared();
    let before = s.state.load(Ordering::SeqCst) >> 32;
    let barrier = Barrier::new(2);
    for _ in 0..3 {
        // Two tasks that wait for each other: the worker took one (and its seat).
        pool.run(2, &|_| {
            barrier.wait();
        });
        // Every worker may join a job of the whole pool: no seat was counted off.
        assert_eq!(s.seats.load(Ordering::SeqCst) & ALL_SEATS, ALL_SEATS);
    }
    let state = s.state.load(Ordering::SeqCst);
    assert_eq!(state >> 32, before + 3, "one new tag per round");
    let (front, back) = ends(state);
    assert_eq!(front, back, "drained between jobs");
}

#[test]
fn claims_follow_the_guided_schedule() {
    let _bound = watchdog("claims_follow_the_guided_schedule");
    // Three threads, capped to two: one worker joins, so the order of claims is fixed.
    // The caller's first run (claimed by the publish) holds it until the worker has
    // claimed and run every other task from the back, in runs of the unclaimed count
    // over twice the pool's thread count (at least one), which is what the pool
    // documents.
    let pool = ThreadPool::with_table(&TABLE, 3).unwrap();
    let capped = Capped::new(&pool, 2);
    let tasks = 100;
    let first = tasks / 6;
    let caller = std::thread::current().id();
    let others = AtomicUsize::new(0);
    let runs = std::sync::Mutex::new(Vec::new());
    capped.run_ranges(tasks, &|r| {
        if std::thread::current().id() == caller {
            assert_eq!(r, 0..first, "the caller's first run");
            while others.load(Ordering::Acquire) < tasks - first {
                std::thread::yield_now();
            }
        } else {
            others.fetch_add(r.len(), Ordering::Release);
            runs.lock().unwrap().push(r);
        }
    });
    let mut expected = Vec::new();
    let mut back = tasks;
    while back > first {
        let run = ((back - first) / 6).max(1);
        expected.push(back - run..back);
        back -= run;
    }
    assert_eq!(runs.into_inner().unwrap(), expected);
}

#[test]
fn a_capped_pool_of_one_runs_a_job_as_one_range_on_the_caller() {
    let _bound = watchdog("a_capped_pool_of_one_runs_a_job_as_one_range_on_the_caller");
    let pool = ThreadPool::with_table(&TABLE, 3).unwrap();
    let one = Capped::new(&pool, 1);
    let caller = std::thread::current().id();
    let ranges = std::sync::Mutex::new(Vec::new());
    one.run_ranges(50, &|r| {
        assert_eq!(std::thread::current().id(), caller);
        ranges.lock().unwrap().push(r);
    });
    assert_eq!(ranges.into_inner().unwrap(), vec![0..50]);
    // `run`, one index at a time, through a capped pool: every task once.
    let hits: Vec<AtomicUsize> = (0..40).map(|_| AtomicUsize::new(0)).collect();
    Capped::new(&pool, 2).run(40, &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
    });
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
}
