//! The persistent pool and the `Parallel` trait: every task exactly once, panics propagated
//! without deadlock, concurrent and nested callers, workers joined on drop, and multi-thread
//! runs (our pool, the process pool, a runtime's own pool, hostile pools) bit-identical to
//! one thread over many shapes, narrow and tall.

mod common;

use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{Case, Rng, RuntimePool};
use keepalloc_allocators::{AllocatorTable, Counting, System};
use keepalloc_kernels::{
    FullyConnected, Isa, KernelError, MAX_POOL_THREADS, Parallel, Sequential, ThreadPool,
    process_pool,
};
use keepalloc_testkit::watchdog::watchdog;

static BACKEND: Counting<System> = Counting::new(System);
static TABLE: AllocatorTable = AllocatorTable::for_allocator(&BACKEND);

fn counts(pool: &dyn Parallel, tasks: usize) -> Vec<usize> {
    let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
    pool.run(tasks, &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
    });
    hits.into_iter().map(AtomicUsize::into_inner).collect()
}

#[test]
fn every_task_runs_exactly_once() {
    let _bound = watchdog("every_task_runs_exactly_once");
    for threads in [1, 2, 3, 8] {
        let pool = ThreadPool::with_table(&TABLE, threads).unwrap();
        assert_eq!(pool.threads(), threads);
        for tasks in [0, 1, 2, 3, 7, 64, 1000] {
            for _ in 0..20 {
                assert!(
                    counts(&pool, tasks).iter().all(|&c| c == 1),
                    "{threads} threads, {tasks} tasks"
                );
            }
        }
    }
    assert!(counts(&Sequential, 5).iter().all(|&c| c == 1));
    assert_eq!(Sequential.threads(), 1);
    // More tasks than one round hands out (65,534): several rounds, each task once; and a
    // last round of a single task, which the caller's pre-claimed first run takes whole.
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    for tasks in [200_000, 65_535, 65_536] {
        assert!(
            counts(&pool, tasks).iter().all(|&c| c == 1),
            "{tasks} tasks"
        );
    }
}

/// Slots that tasks write with plain stores, one slot per task.
struct Slots(*mut u64);

// Task `i` writes slot `i` only, and the caller reads the slots after `run` has returned
// (if the pool keeps its contract, which is what the test below and its ThreadSanitizer
// row check).
// SAFETY: no two threads touch one slot at the same time (above).
unsafe impl Sync for Slots {}

/// Task `i`'s plain store of `value` into its slot; out of line, so that ThreadSanitizer
/// names it in a report.
#[inline(never)]
fn task_writes(slots: &Slots, i: usize, value: u64) {
    // The buffer is live and has more than `i` slots (see the caller).
    // SAFETY: slot `i` is in that buffer and belongs to task `i` alone.
    unsafe { slots.0.add(i).write(value) }
}

/// The caller's plain reads of the slots after `run`; out of line, for the same reason.
#[inline(never)]
fn caller_reads(out: &[u64]) -> u64 {
    out.iter().sum()
}

/// What tasks write with plain stores is the caller's once `run` returns: the pool's count
/// of finished tasks orders a worker's writes before the caller's reads. On x86 the
/// hardware orders them anyway, so this test passes even with that ordering broken, and its
/// witness is ThreadSanitizer: `cargo xtask tsan` runs it on our pool, where it must be
/// clean, and on the broken variant (`--cfg keepalloc_pool_mutant="done_relaxed"`), where
/// ThreadSanitizer must report `task_writes` racing with `caller_reads`.
#[test]
fn what_tasks_write_is_the_callers_after_run() {
    let _bound = watchdog("what_tasks_write_is_the_callers_after_run");
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let mut out = vec![0u64; 64];
    let slots = Slots(out.as_mut_ptr());
    let mut worker_took = 0;
    for job in 1..=200u64 {
        let caller = std::thread::current().id();
        let elsewhere = AtomicUsize::new(0);
        pool.run(64, &|i| {
            if std::thread::current().id() != caller {
                elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            // Long enough (a job takes about 130 us) that the worker, woken by the first
            // job and spinning between the next ones, takes tasks; 64 bare stores finish on
            // the caller before a sleeping worker wakes.
            let started = std::time::Instant::now();
            while started.elapsed() < std::time::Duration::from_micros(2) {
                std::hint::spin_loop();
            }
            task_writes(&slots, i, job * 1000 + i as u64);
        });
        worker_took += usize::from(elsewhere.into_inner() > 0);
        // SAFETY: `run` has returned, so no task is writing the slots any more.
        let read = caller_reads(unsafe { std::slice::from_raw_parts(slots.0, 64) });
        assert_eq!(read, job * 64_000 + 63 * 64 / 2, "job {job}");
    }
    // Otherwise the test would not have checked a hand-off between threads at all.
    assert!(worker_took > 0, "the worker took no task in 200 jobs");
    drop(out);
}

/// A worker that finds nothing to claim must leave the job slot alone: no `done` count
/// orders anything it did before the caller's write of the next job. Each job of two tiny
/// tasks is published after the pool was idle far longer than a worker spins (1 ms), so the
/// worker is asleep, and the caller has run both tasks before the woken worker looks (it
/// then finds the job drained and claims nothing). Natively this checks that every task ran
/// once; its witness for the slot is ThreadSanitizer: `cargo xtask tsan` runs it on our
/// pool, where it must be clean, and on the broken variant (`--cfg
/// keepalloc_pool_mutant="job_before_claim"`, a worker that reads the slot as soon as it sees
/// a job), where ThreadSanitizer must report `run`'s write of the slot racing with
/// `worker`'s read.
#[test]
fn a_worker_that_claims_nothing_leaves_the_job_alone() {
    let _bound = watchdog("a_worker_that_claims_nothing_leaves_the_job_alone");
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let caller = std::thread::current().id();
    let mut caller_took_both = 0;
    for job in 0..30 {
        std::thread::sleep(Duration::from_millis(3));
        let ran = [AtomicUsize::new(0), AtomicUsize::new(0)];
        let elsewhere = AtomicUsize::new(0);
        pool.run(2, &|i| {
            if std::thread::current().id() != caller {
                elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            ran[i].fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ran.map(AtomicUsize::into_inner), [1, 1], "job {job}");
        caller_took_both += usize::from(elsewhere.into_inner() == 0);
    }
    // Otherwise no job had a worker that claimed nothing, and the test checked nothing.
    assert!(
        caller_took_both > 0,
        "the worker took a task in each of 30 jobs"
    );
}

/// Runs `tasks` tasks through `run_ranges`: how often each index was delivered, and the
/// longest range (every range is checked to be non-empty and inside the job).
fn range_counts(pool: &dyn Parallel, tasks: usize) -> (Vec<usize>, usize) {
    let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
    let longest = AtomicUsize::new(0);
    pool.run_ranges(tasks, &|r: Range<usize>| {
        assert!(r.start < r.end && r.end <= tasks, "{r:?} of {tasks}");
        longest.fetch_max(r.len(), Ordering::Relaxed);
        for i in r {
            hits[i].fetch_add(1, Ordering::Relaxed);
        }
    });
    (
        hits.into_iter().map(AtomicUsize::into_inner).collect(),
        longest.into_inner(),
    )
}

/// A runtime's pool that implements only `run` (one task at a time on the caller).
struct RunOnly;

impl Parallel for RunOnly {
    fn threads(&self) -> usize {
        2
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }
}

#[test]
fn ranges_cover_every_task_exactly_once_and_our_pool_hands_out_runs() {
    let _bound = watchdog("ranges_cover_every_task_exactly_once_and_our_pool_hands_out_runs");
    for threads in [1, 2, 3, 8] {
        let pool = ThreadPool::with_table(&TABLE, threads).unwrap();
        for tasks in [0, 1, 2, 3, 7, 24, 64, 1000] {
            for _ in 0..20 {
                let (hits, longest) = range_counts(&pool, tasks);
                assert!(
                    hits.iter().all(|&c| c == 1),
                    "{threads} threads, {tasks} tasks"
                );
                // The first claim of a job takes tasks / (2 · threads) of them at once (or
                // the whole job runs inline on the caller).
                if tasks >= 4 * threads {
                    assert!(
                        longest > 1,
                        "{threads} threads, {tasks} tasks: single tasks"
                    );
                }
            }
        }
    }
    // More tasks than one round hands out: several rounds, each task once.
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    assert!(range_counts(&pool, 200_000).0.iter().all(|&c| c == 1));
    // Sequential: the whole job in one range; the trait's default: one task per range.
    assert_eq!(range_counts(&Sequential, 9), (vec![1; 9], 9));
    assert_eq!(range_counts(&RunOnly, 9), (vec![1; 9], 1));
    assert_eq!(range_counts(&Sequential, 0), (vec![], 0));
}

#[test]
fn a_panicking_range_propagates_and_the_pool_survives() {
    let _bound = watchdog("a_panicking_range_propagates_and_the_pool_survives");
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    for _ in 0..50 {
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run_ranges(64, &|r: Range<usize>| {
                if r.contains(&40) {
                    panic!("range {r:?}");
                }
            })
        }));
        let msg = r.expect_err("the panic is resumed on the caller");
        assert!(msg.downcast_ref::<String>().unwrap().starts_with("range "));
        assert!(range_counts(&pool, 64).0.iter().all(|&c| c == 1));
    }
}

/// Runs two tasks that each wait for the other at `barrier` (of 2): the job finishes only
/// when two threads of `pool` run it at once (otherwise it hangs, and the test's watchdog
/// reports it).
fn run_on_two_threads(pool: &ThreadPool, barrier: &Barrier) {
    pool.run(2, &|_| {
        barrier.wait();
    });
}

#[test]
fn work_really_runs_on_several_threads() {
    let _bound = watchdog("work_really_runs_on_several_threads");
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    run_on_two_threads(&pool, &Barrier::new(2));
}

#[test]
fn a_sleeping_worker_is_woken_by_the_next_job() {
    let _bound = watchdog("a_sleeping_worker_is_woken_by_the_next_job");
    // Two tasks that each wait for the other, after the pool has been idle far longer than
    // a worker spins (1 ms): the worker is asleep on its condition variable, and only a
    // job that wakes it finishes (one that does not hangs, and the watchdog reports it).
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let barrier = Barrier::new(2);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(30));
        run_on_two_threads(&pool, &barrier);
    }
}

#[test]
fn bad_thread_counts_and_tables_are_errors() {
    let _bound = watchdog("bad_thread_counts_and_tables_are_errors");
    assert_eq!(
        ThreadPool::with_table(&TABLE, 0).unwrap_err(),
        KernelError::InvalidThreads
    );
    assert_eq!(
        ThreadPool::with_table(&TABLE, MAX_POOL_THREADS + 1).unwrap_err(),
        KernelError::InvalidThreads
    );
    let p = TABLE.raw_parts();
    // SAFETY: the System table's own functions, one slot emptied.
    let holed = unsafe { AllocatorTable::from_raw_parts(p.0, p.1, p.2, p.3, None, p.5) };
    let holed: &'static AllocatorTable = Box::leak(Box::new(holed));
    assert_eq!(
        ThreadPool::with_table(holed, 2).unwrap_err(),
        KernelError::InvalidTable
    );
}

#[test]
fn a_pool_debugs_as_its_thread_count() {
    let _bound = watchdog("a_pool_debugs_as_its_thread_count");
    let pool = ThreadPool::with_table(&TABLE, 3).unwrap();
    assert_eq!(format!("{pool:?}"), "ThreadPool { threads: 3 }");
}

#[test]
fn the_state_is_one_table_block_given_back_on_drop() {
    let _bound = watchdog("the_state_is_one_table_block_given_back_on_drop");
    // Other tests share BACKEND, so compare a private counting table.
    static OWN: Counting<System> = Counting::new(System);
    static OWN_TABLE: AllocatorTable = AllocatorTable::for_allocator(&OWN);
    let pool = ThreadPool::with_table(&OWN_TABLE, 3).unwrap();
    assert_eq!(OWN.stats().allocations, 1);
    for _ in 0..10 {
        counts(&pool, 9);
    }
    assert_eq!(OWN.stats().allocations, 1, "run allocates nothing");
    drop(pool);
    assert_eq!(OWN.stats().live_bytes, 0);
}

#[test]
fn a_panicking_task_propagates_and_the_pool_survives() {
    let _bound = watchdog("a_panicking_task_propagates_and_the_pool_survives");
    let pool = ThreadPool::with_table(&TABLE, 3).unwrap();
    for round in 0..20 {
        let ran = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run(16, &|i| {
                ran.fetch_add(1, Ordering::Relaxed);
                if i == round % 16 {
                    panic!("task {i} failed");
                }
            })
        }));
        let payload = caught.expect_err("the panic reaches the caller");
        let msg = payload
            .downcast_ref::<String>()
            .expect("the task's own payload");
        assert_eq!(msg, &format!("task {} failed", round % 16));
        assert!(ran.into_inner() >= 1);
        // Still usable, every task once.
        assert!(counts(&pool, 10).iter().all(|&c| c == 1));
    }
}

#[test]
fn after_a_panic_the_unclaimed_tasks_are_skipped() {
    let _bound = watchdog("after_a_panic_the_unclaimed_tasks_are_skipped");
    // Task 0 is the first of the caller's first run (claimed when the job is published) and
    // panics; the worker's tasks wait for that panic, then take a millisecond each. The
    // caller must take no task after its panic: what nobody had claimed is skipped, and only
    // the worker's run in flight (at most the 75 unclaimed tasks over four) completes.
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let caller = std::thread::current().id();
    let panicking = std::sync::atomic::AtomicBool::new(false);
    let on_caller = AtomicUsize::new(0);
    let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        pool.run(100, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            if i == 0 {
                panicking.store(true, Ordering::SeqCst);
                panic!("task 0 failed");
            }
            if std::thread::current().id() == caller {
                on_caller.fetch_add(1, Ordering::Relaxed);
            }
            while !panicking.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(1));
        })
    }));
    let payload = caught.expect_err("the panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"task 0 failed"));
    assert_eq!(
        on_caller.into_inner(),
        0,
        "the caller ran tasks after its panic"
    );
    let hits: Vec<usize> = hits.into_iter().map(AtomicUsize::into_inner).collect();
    assert_eq!(hits[0], 1);
    assert!(hits.iter().all(|&h| h <= 1));
    let ran = hits.iter().sum::<usize>();
    assert!(
        ran <= 1 + 75 / 4,
        "{ran} tasks ran after a panic at the first"
    );
    // Still usable.
    assert!(counts(&pool, 10).iter().all(|&c| c == 1));
}

/// The kernel's id of the calling thread.
#[cfg(target_os = "linux")]
fn tid() -> usize {
    unsafe extern "C" {
        fn gettid() -> i32;
    }
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { gettid() as usize }
}

/// The state letter of thread `tid` of this process in `/proc` (`R` running, `S` asleep).
#[cfg(target_os = "linux")]
fn thread_state(tid: usize) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // `tid (comm) S ...`: the name may hold spaces and parentheses, the state follows the
    // last `)`.
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.trim_start().chars().next().unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn an_idle_worker_goes_to_sleep() {
    let _bound = watchdog("an_idle_worker_goes_to_sleep");
    // The pool promises that an idle pool costs no CPU: a worker spins about 1 ms after its
    // last task and then sleeps. The witness is the kernel's view of the worker thread,
    // not the pool's own counters: it must reach `S` (a worker that never stops spinning
    // stays `R`, and the watchdog reports the test).
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let me = tid();
    let worker = AtomicUsize::new(0);
    let barrier = Barrier::new(2);
    pool.run(2, &|_| {
        let tid = tid();
        if tid != me {
            worker.store(tid, Ordering::Relaxed);
        }
        barrier.wait(); // two distinct threads
    });
    let worker = worker.into_inner();
    assert_ne!(worker, 0);
    while thread_state(worker) != 'S' {
        std::thread::sleep(Duration::from_millis(1));
    }
    // And the next job still runs on both threads.
    run_on_two_threads(&pool, &barrier);
}

#[test]
fn a_pool_of_max_pool_threads_starts_and_stops() {
    let _bound = watchdog("a_pool_of_max_pool_threads_starts_and_stops");
    let pool = ThreadPool::with_table(&TABLE, MAX_POOL_THREADS).unwrap();
    assert_eq!(pool.threads(), MAX_POOL_THREADS);
    assert!(counts(&pool, 3000).iter().all(|&c| c == 1));
}

#[test]
fn concurrent_callers_are_serialized_and_all_complete() {
    let _bound = watchdog("concurrent_callers_are_serialized_and_all_complete");
    let pool = Arc::new(ThreadPool::with_table(&TABLE, 2).unwrap());
    let callers: Vec<_> = (0..4)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for r in 0..200 {
                    let tasks = 1 + (t * 7 + r) % 20;
                    assert!(counts(&*pool, tasks).iter().all(|&c| c == 1));
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
}

#[test]
fn a_nested_run_runs_inline_instead_of_deadlocking() {
    let _bound = watchdog("a_nested_run_runs_inline_instead_of_deadlocking");
    let pool = ThreadPool::with_table(&TABLE, 2).unwrap();
    let inner = AtomicUsize::new(0);
    pool.run(4, &|_| {
        pool.run(3, &|_| {
            inner.fetch_add(1, Ordering::Relaxed);
        });
    });
    assert_eq!(inner.into_inner(), 12);
}

#[test]
fn a_pool_dropped_before_its_workers_start_does_not_hang() {
    let _bound = watchdog("a_pool_dropped_before_its_workers_start_does_not_hang");
    // Drop can publish the shutdown before a worker has run its first instruction; that
    // worker must still see it (a worker that read the current tag at start slept for ever).
    for i in 0..300 {
        let pool = ThreadPool::with_table(&TABLE, 2 + i % 3).unwrap();
        if i % 2 == 0 {
            counts(&pool, 5);
        }
        drop(pool);
    }
}

/// Worker threads whose thread-local [`SlowExit`] has run its destructor.
static EXITED: AtomicUsize = AtomicUsize::new(0);

/// Set in each worker's thread-local storage: its destructor runs when the thread exits,
/// slowly, and counts the exit. `pthread_join` returns only after the thread's destructors
/// have run, so right after a pool that joins its workers is dropped every one has counted;
/// a drop that only told them to stop would return while they are still in here.
struct SlowExit;

impl Drop for SlowExit {
    fn drop(&mut self) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        EXITED.fetch_add(1, Ordering::SeqCst);
    }
}

std::thread_local! {
    static EXIT_WITNESS: core::cell::RefCell<Option<SlowExit>> = const { core::cell::RefCell::new(None) };
}

#[cfg(target_os = "linux")]
#[test]
fn drop_joins_every_worker() {
    let _bound = watchdog("drop_joins_every_worker");
    let pool = ThreadPool::with_table(&TABLE, 4).unwrap();
    let tids: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
    let barrier = Barrier::new(4);
    let me = tid();
    pool.run(4, &|i| {
        let tid = tid();
        tids[i].store(tid, Ordering::Relaxed);
        if tid != me {
            EXIT_WITNESS.with(|w| *w.borrow_mut() = Some(SlowExit));
        }
        barrier.wait(); // four distinct threads
    });
    let workers: Vec<usize> = tids
        .iter()
        .map(|t| t.load(Ordering::Relaxed))
        .filter(|&t| t != me)
        .collect();
    assert_eq!(workers.len(), 3);
    assert_eq!(EXITED.load(Ordering::SeqCst), 0, "no worker has exited yet");
    drop(pool);
    // No waiting here: the joins already waited for each worker's exit.
    assert_eq!(
        EXITED.load(Ordering::SeqCst),
        3,
        "drop returned before every worker had exited"
    );
}

/// Delivers every task twice, from two threads at once.
struct Twice;

impl Parallel for Twice {
    fn threads(&self) -> usize {
        2
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        std::thread::scope(|s| {
            s.spawn(|| (0..tasks).for_each(task));
            (0..tasks).for_each(task);
        });
    }
}

/// Hands out overlapping, repeated, empty, reversed and out-of-range ranges, from two
/// threads at once: the whole job and past it on one, every pair of neighbours on the other.
struct Overlaps;

impl Parallel for Overlaps {
    fn threads(&self) -> usize {
        2
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }

    #[allow(clippy::reversed_empty_ranges)]
    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        std::thread::scope(|s| {
            s.spawn(|| {
                task(0..tasks + 3);
                task(tasks..tasks + 5);
            });
            for i in 0..tasks {
                task(i..i + 2);
                task(i + 1..i);
            }
        });
    }
}

/// Forgets the last task of its ranges (one range per task but the last).
struct SkipsRanges;

impl Parallel for SkipsRanges {
    fn threads(&self) -> usize {
        4
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }

    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        for i in 0..tasks.saturating_sub(1) {
            task(i..i + 1);
        }
    }
}

/// Forgets the last task.
struct Skips;

impl Parallel for Skips {
    fn threads(&self) -> usize {
        4
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks.saturating_sub(1)).for_each(task);
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Shapes that cut by panels (wide), by rows (tall and narrow) and by both, with M and N
/// edges, batch 1, and K past one K block.
const SHAPES: [(usize, usize, usize); 16] = [
    (1, 300, 333),
    (1, 64, 2000),
    (2, 100, 20),
    (7, 50, 700),
    (9, 300, 70),
    (16, 1024, 64),
    (17, 33, 16),
    (37, 300, 333),
    (64, 96, 8),
    (100, 64, 1000),
    (130, 257, 40),
    (256, 64, 32),
    (300, 40, 17),
    (512, 16, 8),
    (1000, 1100, 33),
    (33, 1300, 520),
];

#[test]
fn threads_are_bit_identical_to_one_thread_over_shapes() {
    let _bound = watchdog("threads_are_bit_identical_to_one_thread_over_shapes");
    let pools: Vec<(String, Box<dyn Parallel>)> = vec![
        (
            "pool(2)".into(),
            Box::new(ThreadPool::with_table(&TABLE, 2).unwrap()),
        ),
        (
            "pool(3)".into(),
            Box::new(ThreadPool::with_table(&TABLE, 3).unwrap()),
        ),
        (
            "pool(8)".into(),
            Box::new(ThreadPool::with_table(&TABLE, 8).unwrap()),
        ),
        ("runtime(3)".into(), Box::new(RuntimePool(3))),
        ("twice".into(), Box::new(Twice)),
        ("overlaps".into(), Box::new(Overlaps)),
        ("run only".into(), Box::new(RunOnly)),
        ("sequential".into(), Box::new(Sequential)),
    ];
    let mut rng = Rng::new(11);
    for (m, k, n) in SHAPES {
        let case = Case::random(&mut rng, m, k, n);
        for isa in Isa::available() {
            let one = case.run_and_check(&TABLE, isa, &format!("{isa} {m}x{k}x{n}"));
            let op = FullyConnected::create_with_table(&TABLE, &case.desc().with_isa(isa)).unwrap();
            for (name, pool) in &pools {
                let mut out = case.output();
                op.run_in(&**pool, m, &case.input, &mut out).unwrap();
                assert_eq!(bits(&one), bits(&out), "{isa} {name} at {m}x{k}x{n}");
            }
            for threads in [2, 4, 64] {
                let mut out = case.output();
                op.run_with_threads(m, &case.input, &mut out, threads)
                    .unwrap();
                assert_eq!(
                    bits(&one),
                    bits(&out),
                    "{isa} process pool {threads} at {m}x{k}x{n}"
                );
            }
        }
    }
}

#[test]
fn a_pool_that_skips_tasks_is_an_error_not_a_wrong_answer() {
    let _bound = watchdog("a_pool_that_skips_tasks_is_an_error_not_a_wrong_answer");
    let mut rng = Rng::new(12);
    let (m, k, n) = (64, 256, 512);
    let case = Case::random(&mut rng, m, k, n);
    let op = FullyConnected::create_with_table(&TABLE, &case.desc()).unwrap();
    for pool in [&Skips as &dyn Parallel, &SkipsRanges] {
        let mut out = case.output();
        match op.run_in(pool, m, &case.input, &mut out) {
            Err(KernelError::ParallelIncomplete { ran, tasks }) => assert_eq!(ran + 1, tasks),
            other => panic!("expected ParallelIncomplete, got {other:?}"),
        }
    }
}

#[test]
fn the_process_pool_is_one_per_cpu_and_shared() {
    let _bound = watchdog("the_process_pool_is_one_per_cpu_and_shared");
    let a = process_pool().unwrap();
    let b = process_pool().unwrap();
    assert!(std::ptr::eq(a, b));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(a.threads(), cpus);
    assert!(counts(a, 33).iter().all(|&c| c == 1));
    // And no more threads than that run its tasks (a process pool that started more
    // workers than it counts would spread a job over them): tasks that sleep, so every
    // thread there is gets to take some.
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    a.run(48, &|_| {
        seen.lock().unwrap().insert(std::thread::current().id());
        std::thread::sleep(Duration::from_millis(2));
    });
    let used = seen.into_inner().unwrap().len();
    assert!(used <= cpus, "{used} threads ran tasks of a pool of {cpus}");
}
