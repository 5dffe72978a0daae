//! Work sharing for `run`: the [`Parallel`] trait (any pool: ours, a runtime's, a
//! pthreadpool) and [`ThreadPool`], a persistent pool whose shared state comes from the
//! allocator table.
//!
//! See [`ThreadPool`] for the pool's memory, waking, concurrency, panic and drop rules.

use core::any::Any;
use core::cell::{Cell, UnsafeCell};
use core::ffi::c_void;
use core::ops::Range;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use keepalloc_allocators::AllocatorTable;

use crate::error::KernelError;
use crate::init;

/// Something that runs `tasks` independent tasks, possibly on several threads: the
/// keepalloc [`ThreadPool`], or a runtime's own pool (so an operator's work runs on the
/// runtime's threads; see `FullyConnected::run_in`).
///
/// Contract: `run(tasks, task)` calls `task(i)` once for every `i` in `0..tasks`, on any of
/// its threads (the caller's included), and returns only after every call has returned.
/// If a task panics, `run` must either panic too (after the other calls have returned) or
/// abort; it must not return normally. The operators call
/// [`run_ranges`](Parallel::run_ranges), whose default goes through `run` one task at a
/// time. They do not trust an implementation blindly: a task index delivered twice is
/// ignored the second time, indices past the job are ignored, and a run that returns with
/// tasks missing is reported as [`KernelError::ParallelIncomplete`], so a wrong
/// implementation cannot cause a data race, only an error.
pub trait Parallel: Sync {
    /// Threads that can run tasks at the same time (the caller's included); at least 1.
    fn threads(&self) -> usize;

    /// Runs `task(0) .. task(tasks - 1)` and returns when all have returned.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync));

    /// Runs the tasks `0..tasks` as ranges of consecutive indices: `task(a..b)` runs tasks
    /// `a` to `b - 1` on one thread, and the ranges a run delivers are non-empty and cover
    /// `0..tasks` once. A pool that hands out several tasks at a time (as [`ThreadPool`]
    /// does) delivers each such run as one range, so an operator can compute it in one
    /// kernel call. The same contract as [`run`](Parallel::run) otherwise (panics; the
    /// operators guard against a wrong implementation in the same way).
    ///
    /// The default delivers one task per range, through [`run`](Parallel::run).
    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        self.run(tasks, &|i| task(i..i + 1));
    }
}

/// Runs every task on the calling thread, in order: a pool of one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sequential;

impl Parallel for Sequential {
    fn threads(&self) -> usize {
        1
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        for i in 0..tasks {
            task(i);
        }
    }

    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        if tasks > 0 {
            task(0..tasks);
        }
    }
}

/// Most threads a [`ThreadPool`] may have.
pub const MAX_POOL_THREADS: usize = 1024;

/// How long an idle worker (or a caller waiting for workers) spins before it sleeps: long
/// enough that the workers of a model that runs layer after layer never sleep between two
/// runs (a sleeping worker wakes tens of microseconds late, and the caller takes its share
/// meanwhile), short enough that an idle pool soon stops using CPU. Debian's pthreadpool
/// spins far longer, about 25 ms on the Zen 4 VM (a million pauses; the process's CPU clock
/// after one job), and a 10 ms pause in the bench was too short for it; on that VM a woken
/// worker was also seen placed on the caller's core for up to a scheduler tick.
const SPIN: Duration = Duration::from_millis(1);

/// The ordering of a thread's count of the tasks it finished (`done`): a release (`SeqCst`),
/// which the caller's acquire read of `done == tasks` pairs with, so everything the tasks
/// wrote happens before `run` returns.
///
/// `--cfg keepalloc_pool_mutant="done_relaxed"` (never a default build; `cargo xtask tsan`
/// builds it) makes it `Relaxed`: the broken variant the ThreadSanitizer row of the pool
/// must catch. On x86 it still passes every test (a locked add orders the stores anyway),
/// and under ThreadSanitizer a worker's writes in a task race with the caller's reads after
/// `run`.
const DONE_ADD: Ordering = if cfg!(keepalloc_pool_mutant = "done_relaxed") {
    Ordering::Relaxed
} else {
    Ordering::SeqCst
};

/// The low half of [`Shared::state`] when it is closed (front = back = `0xffff`), before the
/// first job and after drop: no claim can succeed.
const CLOSED: u64 = u32::MAX as u64;

/// The low half of [`Shared::seats`] when every worker may join a job.
const ALL_SEATS: u64 = u32::MAX as u64;

/// Most tasks one `run` hands out at once (larger counts run in several rounds): the front
/// and back claim indices are 16 bits each, and `0xffff` is reserved for [`CLOSED`].
const MAX_ROUND: usize = 0xfffe;

/// The front and back claim indices of a state.
#[inline]
fn ends(state: u64) -> (usize, usize) {
    (((state >> 16) & 0xffff) as usize, (state & 0xffff) as usize)
}

/// `tag` in the high half of a word whose low half is `low` (a state's claim indices, or a
/// seat count).
#[inline]
fn tagged(tag: u64, low: u64) -> u64 {
    (tag << 32) | low
}

/// A state of `tag` with claim indices `front` and `back`.
#[inline]
fn state_of(tag: u64, front: usize, back: usize) -> u64 {
    tagged(tag, ((front as u64) << 16) | back as u64)
}

/// The tag after the one of `state`: tags count up by one per job round (and once more at
/// drop), modulo 2^32, so a worker's stale read of a job is told apart for 2^32 rounds.
#[inline]
fn next_tag(state: u64) -> u64 {
    ((state >> 32) + 1) & CLOSED
}

/// The block every thread of one pool shares, allocated through the table.
///
/// The protocol: `state` is `(tag << 32) | (front << 16) | back`; tasks `front .. back` are
/// unclaimed. A caller writes the job (`job`, `tasks`) while no claim can succeed (the state
/// is drained, `front == back`, after every task of the previous round is done, or closed,
/// low half [`CLOSED`], before the first job and after drop), then publishes `(tag + 1,
/// first, tasks)`: the store that publishes the job also claims the caller's first run,
/// tasks `0 .. first`. After that the caller claims
/// from the front and the workers from the back, each a run of tasks at a time with a
/// compare-and-swap, only while `front < back`; so with two threads the caller takes the
/// first tasks and the worker the last ones, the same split run after run (each thread
/// finds the weights of its share still in its own cache when an operator runs again),
/// and they meet wherever the faster one gets to. A worker reads the task count
/// seqlock-style (state, `tasks`, fence, state again) before it claims, and reads `job`
/// only after a successful claim: the claim proves the round it read is the current one and
/// still running (the caller waits until `done == tasks`, and a round whose tasks are all
/// done has none left to claim, before it writes another job). So the caller never waits
/// for a worker that took no task: a worker that is descheduled when a job starts simply
/// finds nothing left to claim when it wakes. `job` holds the caller's task itself (not its
/// address on the caller's stack), so a worker reaches the operator's closure one transfer
/// sooner: on the Zen 4 VM the hand-off of `examples/pool_handoff.rs` went from 341–351 ns
/// to 281 ns with it, and to 271 ns without a store closing the state after each round.
///
/// `state` and the job it publishes (`job`, `tasks`, `seats`) share the block's first cache
/// line, and nothing else is on it: a worker that sees a new state has the job with it, in
/// one transfer of the line instead of two. Cross-core transfers are what a small run's
/// hand-off is made of (publish, the worker's read and claim, its `done`, the caller's read
/// of it, and the operator's own shared data), and on the Zen 4 VM a round trip read 58 ns
/// in a C ping-pong, and once 356 ns when the host had placed the two vCPUs far apart.
#[repr(C, align(64))]
struct Shared {
    /// `(tag << 32) | (front << 16) | back`.
    state: AtomicU64,
    /// The current job's task and the index its round starts at, written by the caller
    /// before it publishes the round and read by a worker only after a successful claim of
    /// that round's tag (see `Shared`).
    job: UnsafeCell<Job>,
    /// The current round's task count.
    tasks: AtomicUsize,
    /// `(tag << 32) | seats`: how many more workers may join the job tagged `tag`, or
    /// [`ALL_SEATS`] when every worker may (then no worker touches it). Written with the
    /// job, before it is published.
    seats: AtomicU64,
    /// Tasks of the current job that have finished (or were skipped after a panic), on a
    /// cache line of its own (64-byte aligned: it starts the block's second line).
    done: Padded<AtomicUsize>,
    /// Set once, by drop.
    shutdown: AtomicBool,
    /// Workers asleep on `wake` (the caller notifies only when there are some).
    sleepers: AtomicUsize,
    /// The caller is asleep on `finished`.
    caller_waiting: AtomicBool,
    /// Worker threads (the pool has one more thread: the caller).
    workers: usize,
    /// Guards the two condition variables.
    lock: Mutex<()>,
    wake: Condvar,
    finished: Condvar,
    /// Serializes concurrent callers.
    run_lock: Mutex<()>,
    /// The first panic of the current job.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

#[repr(C, align(64))]
struct Padded<T>(T);

// `state` and the job it publishes fit in the block's first cache line: `done`, the first
// field after them, starts the second.
const _: () = assert!(core::mem::offset_of!(Shared, done) == 64);

// Every field but `job` is Sync; `job` is written by the one caller that holds `run_lock`,
// only while no claim can succeed, and read by a worker only after a successful claim,
// which the write happens before (see `Shared` and the two accesses).
// SAFETY: `job`'s accesses never race (above); the other fields are Sync.
unsafe impl Sync for Shared {}

/// A round of a job as the workers see it: the caller's task, its lifetime erased (it lives
/// on the caller's stack for the whole run, and a worker calls it only while the caller
/// waits for it), and the index of the round's first task.
#[derive(Clone, Copy)]
struct Job {
    task: Option<&'static (dyn Fn(Range<usize>) + Sync)>,
    start: usize,
}

impl Shared {
    const fn new(workers: usize) -> Shared {
        Shared {
            state: AtomicU64::new(CLOSED),
            job: UnsafeCell::new(Job {
                task: None,
                start: 0,
            }),
            tasks: AtomicUsize::new(0),
            seats: AtomicU64::new(0),
            done: Padded(AtomicUsize::new(0)),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            caller_waiting: AtomicBool::new(false),
            workers,
            lock: Mutex::new(()),
            wake: Condvar::new(),
            finished: Condvar::new(),
            run_lock: Mutex::new(()),
            panic: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a new state and wakes sleeping workers.
    fn publish(&self, state: u64) {
        self.state.store(state, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _l = self.lock();
            self.wake.notify_all();
        }
    }

    /// Takes one of the seats of the job tagged `tag` (always granted when every worker may
    /// join); false when the job has no seat left or is not the current one any more.
    fn take_seat(&self, tag: u64) -> bool {
        let mut v = self.seats.load(Ordering::Relaxed);
        loop {
            if v >> 32 != tag || v & ALL_SEATS == 0 {
                return false;
            }
            if v & ALL_SEATS == ALL_SEATS {
                return true;
            }
            match self
                .seats
                .compare_exchange_weak(v, v - 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// How many of `unclaimed` tasks one claim takes: the unclaimed count over twice the
    /// pool's thread count, at least one.
    fn run_length(&self, unclaimed: usize) -> usize {
        (unclaimed / (2 * (self.workers + 1))).max(1)
    }

    /// Claims and runs tasks of the job tagged `tag` until none is left, catching panics;
    /// from the front of the unclaimed range (the caller) or from its back (the workers).
    /// `task` and `tasks` are that job's (the caller's own, or read by the worker).
    ///
    /// Tasks are claimed in runs of consecutive indices that shrink as the job drains
    /// (guided scheduling: a run is the unclaimed count divided by twice the thread count,
    /// at least one), so a job of many small tasks costs a few compare-and-swaps per thread
    /// instead of one per task, while the last tasks are still handed out one at a time to
    /// whichever thread is free. Each run is one call of `task` (a range), and finished
    /// tasks are counted once per run. `claimed` is a run this thread already holds (the
    /// caller's first, claimed by the store that published the job), run before any other.
    fn work(
        &self,
        tag: u64,
        task: &(dyn Fn(Range<usize>) + Sync),
        tasks: usize,
        from_back: bool,
        mut claimed: Option<Range<usize>>,
    ) {
        let outer = IN_TASK.replace(self as *const Shared as usize);
        let _restore = Restore(outer);
        let mut st = self.state.load(Ordering::Relaxed);
        loop {
            let range = match claimed.take() {
                Some(range) => range,
                None => {
                    // A drained state has front = back, a closed one front = back = 0xffff:
                    // `front >= back` refuses both.
                    let (front, back) = ends(st);
                    if st >> 32 != tag || front >= back || back > tasks {
                        return;
                    }
                    let run = self.run_length(back - front);
                    let (first, new) = if from_back {
                        (back - run, state_of(tag, front, back - run))
                    } else {
                        (front, state_of(tag, front + run, back))
                    };
                    if let Err(now) = self.state.compare_exchange_weak(
                        st,
                        new,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    ) {
                        st = now;
                        continue;
                    }
                    first..first + run
                }
            };
            let mut finished = range.len();
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task(range))) {
                // The rest of this run is skipped, and so are the tasks nobody claimed (all
                // counted as done); keep the first payload.
                // The state still has this job's tag: the caller publishes another only once
                // every task is counted, and this thread has not counted its run yet.
                let mut cur = self.state.load(Ordering::Relaxed);
                loop {
                    debug_assert_eq!(cur >> 32, tag, "a job moved on with tasks uncounted");
                    let (f, b) = ends(cur);
                    if f >= b {
                        break;
                    }
                    match self.state.compare_exchange_weak(
                        cur,
                        state_of(tag, b, b),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            finished += b - f;
                            break;
                        }
                        Err(now) => cur = now,
                    }
                }
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                if slot.is_none() {
                    *slot = Some(payload);
                }
            }
            let done = self.done.0.fetch_add(finished, DONE_ADD) + finished;
            if done > tasks {
                // More tasks finished than the job has: two threads claimed the same task,
                // so the claim protocol is broken and the job's output is not to be trusted
                // (two threads wrote it). The caller, waiting for `done == tasks`, would
                // wait forever; stop the process with the reason instead.
                // Written to the stderr stream itself, which a test harness's capture of
                // `eprintln!` does not swallow before the abort.
                let _ = writeln!(
                    std::io::stderr(),
                    "keepalloc pool: {done} tasks finished of a job of {tasks}"
                );
                std::process::abort();
            }
            if done == tasks && self.caller_waiting.load(Ordering::SeqCst) {
                let _l = self.lock();
                self.finished.notify_one();
            }
            st = self.state.load(Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// The pool whose task this thread is running (its `Shared` address), or 0.
    static IN_TASK: Cell<usize> = const { Cell::new(0) };
}

/// A persistent pool of worker threads.
///
/// [`ThreadPool::new(threads)`](ThreadPool::new) starts `threads - 1` worker threads once;
/// the thread that calls [`Parallel::run`] is the remaining one and takes tasks too (as in
/// pthreadpool, whose `pthreadpool_create(T)` means T threads including the caller).
///
/// * **Memory.** The pool's shared state (job slot, counters, locks, worker ids) is one
///   64-byte aligned block from the allocator table (the captured one for
///   [`ThreadPool::new`]), freed through it on drop. On Unix the workers are started with
///   `pthread_create` directly, so neither creating the pool nor running on it touches the
///   Rust global allocator; each worker's stack and thread-local storage are the C
///   library's (mapped by libc when the thread starts, unmapped when it is joined), never
///   the table's. A `run` allocates nothing at all. (Elsewhere the workers are `std`
///   threads, whose creation allocates through the global allocator once.)
/// * **Waking.** A run publishes the job (the caller's closure and a task count) with one
///   atomic store; workers spin on it for about 1 ms after their last task and then sleep
///   on a condition variable (std's futex-based `Mutex`/`Condvar`, which allocate
///   nothing), so back-to-back runs wake them in well under a microsecond and an idle pool
///   costs no CPU. Tasks are claimed in runs of consecutive indices with a compare-and-swap
///   (guided: runs shrink to one task as the job drains; [`Parallel::run_ranges`] receives
///   each run as one range, so an operator computes it in one call), the caller from the
///   front of the job and the workers from its back (so each thread gets the same share run
///   after run, and finds its weights in its own cache), and the caller waits only for
///   tasks that were claimed, never for a worker that took none: a worker
///   descheduled before it claims (a busy machine) costs the run nothing, the caller takes
///   its tasks; one descheduled in the middle of its run of tasks delays the run by what is
///   left of that run (at most the unclaimed count over twice the thread count).
/// * **Concurrent callers** are serialized: a `run` from a second thread waits until the
///   first has finished (both complete; a pool is shared, never errors). A `run` from
///   inside one of this pool's own tasks (a nested parallel section) runs its tasks inline
///   on the calling thread instead of deadlocking. Only direct nesting is seen: a task of
///   pool A that runs on pool B, whose task runs on A again, waits for A's current run,
///   which waits for it (a deadlock; do not nest pools in a cycle).
/// * **A job may use fewer threads than the pool has**: the process pool behind
///   `FullyConnectedDesc::with_threads(t)` gives each job seats for `t - 1` workers, and
///   the others leave it alone (a job of every worker, the usual case, costs no extra
///   atomic operation).
/// * **Panics.** A task that panics is caught on whichever thread ran it; tasks not yet
///   started are skipped, the run waits for the tasks in flight, and then the first panic
///   is resumed on the thread that called `run` (so `run` panics with the task's own
///   payload). Workers survive and the pool stays usable; nothing deadlocks.
/// * **Drop** wakes every worker, tells it to exit and joins it before the shared block is
///   freed: no thread outlives the pool.
///
/// ```
/// use keepalloc_allocators::{AllocatorTable, System};
/// use keepalloc_kernels::{Parallel, ThreadPool};
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// static TABLE: AllocatorTable = AllocatorTable::for_allocator(&System);
/// let pool = ThreadPool::with_table(&TABLE, 2)?;
/// let sum = AtomicUsize::new(0);
/// pool.run(10, &|i| {
///     sum.fetch_add(i, Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), 45);
/// # Ok::<(), keepalloc_kernels::KernelError>(())
/// ```
pub struct ThreadPool {
    shared: NonNull<Shared>,
    /// The table the block came from; `None` for the process pool, whose block is a static.
    table: Option<AllocatorTable>,
    threads: Threads,
}

// SAFETY: `Shared` is only touched through atomics and locks (the state protocol); the table is callable from any thread.
unsafe impl Send for ThreadPool {}
// SAFETY: as above; `run` takes `&self` and serializes callers itself.
unsafe impl Sync for ThreadPool {}

impl core::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .finish()
    }
}

impl ThreadPool {
    /// A pool of `threads` threads (the caller of `run` and `threads - 1` workers), its
    /// state allocated through the table captured by [`initialize`](crate::initialize)
    /// ([`KernelError::Uninitialized`] before that).
    pub fn new(threads: usize) -> Result<ThreadPool, KernelError> {
        Self::with_table(init::captured()?, threads)
    }

    /// A pool of `threads` threads whose state is allocated through `table`.
    ///
    /// Errors: [`KernelError::InvalidThreads`] for 0 or more than [`MAX_POOL_THREADS`],
    /// [`KernelError::InvalidTable`] for a table with a NULL slot,
    /// [`KernelError::OutOfMemory`] when the table refuses the block and
    /// [`KernelError::ThreadSpawn`] when the OS refuses a thread (the workers already
    /// started are joined and the block is freed first).
    pub fn with_table(
        table: &'static AllocatorTable,
        threads: usize,
    ) -> Result<ThreadPool, KernelError> {
        if threads == 0 || threads > MAX_POOL_THREADS {
            return Err(KernelError::InvalidThreads);
        }
        if !table.is_complete() {
            return Err(KernelError::InvalidTable);
        }
        let workers = threads - 1;
        // The shared state, then one pthread id per worker.
        let bytes = size_of::<Shared>() + workers * size_of::<ThreadId>();
        // SAFETY: a complete table keeps the `xnn_allocator` contract; 64 is a power of two.
        let raw = unsafe { table.aligned_alloc(align_of::<Shared>(), bytes) };
        let shared =
            NonNull::new(raw.cast::<Shared>()).ok_or(KernelError::OutOfMemory { bytes })?;
        if !(raw as usize).is_multiple_of(align_of::<Shared>()) {
            // SAFETY: the block came from this table and is freed once.
            unsafe { table.aligned_free(raw) };
            return Err(KernelError::InvalidTable);
        }
        // SAFETY: the block is `bytes` writable bytes aligned for `Shared`, not yet shared.
        unsafe { shared.as_ptr().write(Shared::new(workers)) };
        // The ids follow `Shared` in the block (room for `workers` of them, aligned
        // since the size of `Shared` is a multiple of 64).
        // SAFETY: the offset stays inside the block.
        let ids = unsafe { raw.add(size_of::<Shared>()) }.cast::<ThreadId>();
        // SAFETY: an initialized block with room for `workers` ids, freed through `table`.
        unsafe { ThreadPool::start(shared, Some(*table), ids, workers) }
    }

    /// Starts `workers` workers on an initialized block.
    ///
    /// # Safety
    /// `shared` is initialized, not used by anything else, and stays valid until the pool is
    /// dropped (then it is dropped in place, and freed through `table` if there is one);
    /// `ids` has room for `workers` ids and lives as long.
    unsafe fn start(
        shared: NonNull<Shared>,
        table: Option<AllocatorTable>,
        ids: *mut ThreadId,
        workers: usize,
    ) -> Result<ThreadPool, KernelError> {
        let mut pool = ThreadPool {
            shared,
            table,
            threads: Threads::new(ids),
        };
        for _ in 0..workers {
            // On failure `pool` is dropped here: the started workers are joined, the
            // block dropped (and freed).
            pool.threads.spawn(shared)?;
        }
        Ok(pool)
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the block lives (initialized) until drop, which needs `&mut self`.
        unsafe { self.shared.as_ref() }
    }
}

impl Parallel for ThreadPool {
    fn threads(&self) -> usize {
        self.shared().workers + 1
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.run_ranges(tasks, &|r: Range<usize>| {
            for i in r {
                task(i);
            }
        });
    }

    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        self.run_ranges_with(self.shared().workers, tasks, task);
    }
}

impl ThreadPool {
    /// [`Parallel::run_ranges`] with at most `helpers` of the workers joining the caller.
    fn run_ranges_with(&self, helpers: usize, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        let s = self.shared();
        let me = self.shared.as_ptr() as usize;
        let helpers = helpers.min(s.workers);
        if tasks <= 1 || helpers == 0 || IN_TASK.get() == me {
            // One task, no workers, or a nested run from one of our own tasks: inline.
            let outer = IN_TASK.replace(me);
            let _restore = Restore(outer);
            if tasks > 0 {
                task(0..tasks);
            }
            return;
        }
        let guard = s.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut start = 0;
        while start < tasks {
            // Rounds of at most MAX_ROUND tasks (the claim indices are 16 bits).
            let round = (tasks - start).min(MAX_ROUND);
            let shifted = |r: Range<usize>| task(start + r.start..start + r.end);
            // The state is drained (every task of the previous round was claimed, and is
            // done) or closed (since creation), so no thread can claim a task while the job
            // is written; a worker reads it only after a claim of the tag published below
            // (see `Shared`).
            let tag = next_tag(s.state.load(Ordering::Relaxed));
            // No thread reads `job` now: every read follows a successful claim, no claim can
            // succeed on the drained or closed state, and the reads of the previous round
            // happened before the `done` count this thread waited for. The lifetime is erased
            // for the workers: they call `task` only through a claim of this round, while
            // this call waits for the round to finish, and `task` outlives the call.
            // SAFETY: the write races no read, and `task` outlives every use (above).
            unsafe {
                *s.job.get() = Job {
                    task: Some(core::mem::transmute::<
                        &(dyn Fn(Range<usize>) + Sync),
                        &'static (dyn Fn(Range<usize>) + Sync),
                    >(task)),
                    start,
                };
            }
            s.tasks.store(round, Ordering::Relaxed);
            let seats = if helpers == s.workers {
                ALL_SEATS
            } else {
                helpers as u64
            };
            s.seats.store(tagged(tag, seats), Ordering::Relaxed);
            s.done.0.store(0, Ordering::Relaxed);
            // The caller's first run is claimed by the store that publishes the job (so a
            // worker's first claim never races it, and costs no transfer of the line back
            // and forth). It leaves the workers the rest: at least one task when `round >=
            // 2`, none in a last round of one task (a job of `MAX_ROUND + 1` tasks).
            let first = s.run_length(round);
            s.publish(state_of(tag, first, round));
            s.work(tag, &shifted, round, false, Some(0..first));
            wait_until(
                || s.done.0.load(Ordering::Acquire) == round,
                || {
                    let mut l = s.lock();
                    s.caller_waiting.store(true, Ordering::SeqCst);
                    while s.done.0.load(Ordering::SeqCst) != round {
                        l = s.finished.wait(l).unwrap_or_else(|e| e.into_inner());
                    }
                    s.caller_waiting.store(false, Ordering::Relaxed);
                },
            );
            // Every task has returned, and the state is drained (every task was claimed):
            // no claim of this round can succeed any more, so no worker calls `task` after
            // this. The state stays as it is until the next publish (a store closing it
            // here cost the caller a transfer of the line, which the worker reads last).
            if s.panic.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                break;
            }
            start += round;
        }
        let panic = s.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop::<MutexGuard<'_, ()>>(guard);
        if let Some(payload) = panic {
            resume_unwind(payload);
        }
    }
}

/// A [`ThreadPool`] used with at most `threads` of its threads, the caller included: a job
/// gives seats to `threads - 1` workers, and the others leave it alone (the process pool
/// behind `FullyConnectedDesc::with_threads(t)` has one thread per CPU, and a run asked for
/// `t` must not spread over all of them).
pub(crate) struct Capped<'a> {
    pool: &'a ThreadPool,
    threads: usize,
}

impl<'a> Capped<'a> {
    /// `pool` with at most `threads` threads (at least 1, at most the pool's).
    pub(crate) fn new(pool: &'a ThreadPool, threads: usize) -> Capped<'a> {
        Capped {
            pool,
            threads: threads.clamp(1, pool.threads()),
        }
    }
}

impl Parallel for Capped<'_> {
    fn threads(&self) -> usize {
        self.threads
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.run_ranges(tasks, &|r: Range<usize>| {
            for i in r {
                task(i);
            }
        });
    }

    fn run_ranges(&self, tasks: usize, task: &(dyn Fn(Range<usize>) + Sync)) {
        self.pool.run_ranges_with(self.threads - 1, tasks, task);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let s = self.shared();
            s.shutdown.store(true, Ordering::SeqCst);
            let tag = next_tag(s.state.load(Ordering::Relaxed));
            s.state.store(tagged(tag, CLOSED), Ordering::SeqCst);
            let _l = s.lock();
            s.wake.notify_all();
        }
        self.threads.join_all();
        // Every worker has exited, so nothing else refers to the block; it was initialized
        // by `start`'s caller and (with a table) came from that table.
        // SAFETY: the block is dropped (and freed) once, with no other user.
        unsafe {
            core::ptr::drop_in_place(self.shared.as_ptr());
            if let Some(table) = &self.table {
                table.aligned_free(self.shared.as_ptr().cast());
            }
        }
    }
}

/// Restores `IN_TASK` on scope exit (also when a task unwinds).
struct Restore(usize);

impl Drop for Restore {
    fn drop(&mut self) {
        IN_TASK.set(self.0);
    }
}

/// Spins on `ready` for up to [`SPIN`], then calls `block` (which must wait until it holds).
fn wait_until(ready: impl Fn() -> bool, block: impl FnOnce()) {
    let start = Instant::now();
    let mut i = 0u32;
    loop {
        if ready() {
            return;
        }
        core::hint::spin_loop();
        i = i.wrapping_add(1);
        if i.is_multiple_of(64) && start.elapsed() > SPIN {
            break;
        }
    }
    block();
}

/// A worker: waits for each new tag, joins its job while there are tasks to claim, until
/// shutdown.
fn worker(s: &Shared) {
    // The tag the block was created with, not the current one: a worker that starts late
    // (after jobs, or after drop's shutdown tag) must still see that the tag moved.
    let mut seen = 0;
    loop {
        wait_until(
            || s.state.load(Ordering::Acquire) >> 32 != seen,
            || {
                let mut l = s.lock();
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                while s.state.load(Ordering::SeqCst) >> 32 == seen {
                    l = s.wake.wait(l).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
            },
        );
        // Seqlock read of the task count: valid only if the state still has the same tag
        // after it was read. (A drained or closed state needs no check here: its front >=
        // back leaves `work` nothing to claim, so it never touches the job.)
        let first = s.state.load(Ordering::SeqCst);
        seen = first >> 32;
        // Drop sets the flag before it publishes its tag: checked after reading the tag, so
        // a worker that has seen the shutdown tag (and will wait for a newer one) exits.
        if s.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let tasks = s.tasks.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let again = s.state.load(Ordering::Relaxed);
        if again >> 32 != seen {
            continue;
        }
        // A job that may use fewer threads than the pool has: the workers past its seats
        // leave it to the others (it is complete without them: the caller claims whatever
        // nobody else takes).
        if !s.take_seat(seen) {
            continue;
        }
        // `--cfg keepalloc_pool_mutant="job_before_claim"` (never a default build; `cargo
        // xtask tsan` builds it): the worker reads the job as soon as it has seen the new
        // tag, before it claims anything. Then a worker that ends up claiming nothing (the
        // caller took every task) has read the slot with no `done` count after the read, and
        // the caller's write of the next job races with it: the broken variant the
        // ThreadSanitizer row of the slot must catch. x86 and these tests never show it.
        #[cfg(keepalloc_pool_mutant = "job_before_claim")]
        // SAFETY: NOT sound, on purpose: the read the job slot's protocol forbids.
        let early = unsafe { *s.job.get() };
        // `work` calls this only after a successful claim of a task of tag `seen`, which
        // proves the caller is inside `run` waiting for that task (see `Shared`).
        let task = |r: Range<usize>| {
            #[cfg(keepalloc_pool_mutant = "job_before_claim")]
            let job = early;
            // Reached only through a successful claim of tag `seen`: the caller wrote `job`
            // before it published the tag, and writes it again only after this claim's
            // tasks are counted done.
            #[cfg(not(keepalloc_pool_mutant = "job_before_claim"))]
            // SAFETY: the read is ordered between those two writes (above).
            let job = unsafe { *s.job.get() };
            if let Some(f) = job.task {
                f(job.start + r.start..job.start + r.end);
            }
        };
        s.work(seen, &task, tasks, true, None);
    }
}

/// The worker threads of one pool.
#[cfg(unix)]
struct Threads {
    /// The pthread ids, in the pool's block after `Shared`.
    ids: *mut ThreadId,
    len: usize,
}

/// What the pool's block keeps per worker: the `pthread_t` (an integer or a pointer, at most
/// pointer-sized and pointer-aligned on every Unix target that std supports with pthreads).
#[cfg(unix)]
type ThreadId = libc::pthread_t;
#[cfg(not(unix))]
type ThreadId = usize;
const _: () = assert!(
    size_of::<ThreadId>() <= size_of::<usize>() && align_of::<ThreadId>() <= align_of::<Shared>()
);

#[cfg(unix)]
extern "C" fn worker_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the pool's `Shared`, which lives until this thread has been joined.
    let s = unsafe { &*arg.cast::<Shared>() };
    worker(s);
    core::ptr::null_mut()
}

#[cfg(unix)]
impl Threads {
    fn new(ids: *mut ThreadId) -> Threads {
        Threads { ids, len: 0 }
    }

    fn spawn(&mut self, shared: NonNull<Shared>) -> Result<(), KernelError> {
        let mut id = core::mem::MaybeUninit::<ThreadId>::uninit();
        // The start routine only reads the shared block, which outlives the thread
        // (joined in drop before it is freed); default attributes (the C library's stack).
        // SAFETY: valid out pointer, NULL attributes, a matching start routine.
        let rc = unsafe {
            libc::pthread_create(
                id.as_mut_ptr(),
                core::ptr::null(),
                worker_main,
                shared.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(KernelError::ThreadSpawn { code: rc });
        }
        // pthread_create succeeded, so it wrote the id; the block has room for one id per
        // worker, and at most that many are started.
        // SAFETY: an initialized id, written in bounds.
        unsafe { self.ids.add(self.len).write(id.assume_init()) };
        self.len += 1;
        Ok(())
    }

    fn join_all(&mut self) {
        for i in 0..self.len {
            // SAFETY: id `i` was written by `spawn`; that thread is joined once.
            let rc = unsafe { libc::pthread_join(self.ids.add(i).read(), core::ptr::null_mut()) };
            debug_assert_eq!(rc, 0, "pthread_join");
        }
        self.len = 0;
    }
}

/// The worker threads of one pool (std threads where there are no pthreads). A name of its
/// own: cargo-mutants' configuration (`.cargo/mutants.toml`) leaves it out, since no test
/// on a Unix machine compiles it.
#[cfg(not(unix))]
struct StdThreads(Vec<std::thread::JoinHandle<()>>);
#[cfg(not(unix))]
type Threads = StdThreads;

#[cfg(not(unix))]
impl StdThreads {
    fn new(_ids: *mut ThreadId) -> StdThreads {
        StdThreads(Vec::new())
    }

    fn spawn(&mut self, shared: NonNull<Shared>) -> Result<(), KernelError> {
        struct Ptr(NonNull<Shared>);
        // SAFETY: the block outlives the thread (joined in drop before it is freed).
        unsafe impl Send for Ptr {}
        let p = Ptr(shared);
        let handle = std::thread::Builder::new()
            .spawn(move || {
                let p = p;
                // SAFETY: see above.
                worker(unsafe { p.0.as_ref() })
            })
            .map_err(|e| KernelError::ThreadSpawn {
                code: e.raw_os_error().unwrap_or(-1),
            })?;
        self.0.push(handle);
        Ok(())
    }

    fn join_all(&mut self) {
        for h in self.0.drain(..) {
            let _ = h.join();
        }
    }
}

/// The process pool's state: a static, since the pool lives as long as the process.
struct ProcessBlock {
    shared: UnsafeCell<core::mem::MaybeUninit<Shared>>,
    ids: UnsafeCell<[core::mem::MaybeUninit<ThreadId>; MAX_POOL_THREADS]>,
}

// SAFETY: written only under `PROCESS_INIT` before the pool exists, then used through the pool.
unsafe impl Sync for ProcessBlock {}

static PROCESS_BLOCK: ProcessBlock = ProcessBlock {
    shared: UnsafeCell::new(core::mem::MaybeUninit::uninit()),
    ids: UnsafeCell::new([const { core::mem::MaybeUninit::uninit() }; MAX_POOL_THREADS]),
};

/// The process-wide pool behind `FullyConnectedDesc::with_threads`.
static PROCESS: OnceLock<ThreadPool> = OnceLock::new();
/// Serializes the start of [`PROCESS`] (starting can fail, and must not run twice).
static PROCESS_INIT: Mutex<()> = Mutex::new(());

/// The process-wide pool that operators created with `with_threads(t)`, `t > 1`, run on:
/// started once, on first use, with one thread per CPU this process may use
/// (`std::thread::available_parallelism`), and never stopped. It lives as long as the
/// process, so its state is a `static`: it allocates nothing, neither through the table nor
/// through the global allocator (the workers' stacks are the C library's). Pools of your
/// own ([`ThreadPool::new`]) allocate their state through the table instead.
///
/// The first operator created with `threads > 1` starts it, so `run` never starts threads;
/// call this to start it at a moment of your choosing (asking the OS for the CPU count reads
/// `/proc`, which allocates through the global allocator, once).
pub fn process_pool() -> Result<&'static ThreadPool, KernelError> {
    if let Some(pool) = PROCESS.get() {
        return Ok(pool);
    }
    let _g = PROCESS_INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = PROCESS.get() {
        return Ok(pool);
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_POOL_THREADS);
    let shared = PROCESS_BLOCK.shared.get().cast::<Shared>();
    // Under `PROCESS_INIT` with no process pool yet, nothing else uses the static block (a
    // failed earlier start dropped its `Shared` in place after joining its workers).
    // SAFETY: exclusive access to the static block, which lives for ever.
    let pool = unsafe {
        shared.write(Shared::new(threads - 1));
        ThreadPool::start(
            NonNull::new_unchecked(shared),
            None,
            PROCESS_BLOCK.ids.get().cast(),
            threads - 1,
        )?
    };
    Ok(PROCESS.get_or_init(|| pool))
}

/// The integration tests' watchdog, for the unit tests below.
#[cfg(test)]
#[path = "../tests/common/watchdog.rs"]
mod test_watchdog;

#[cfg(test)]
mod tests {
    use super::{ALL_SEATS, CLOSED, Capped, Parallel, ThreadPool, next_tag, state_of, tagged};
    use keepalloc_allocators::{AllocatorTable, System};
    use std::collections::HashSet;
    use std::sync::Barrier;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
        let _bound =
            super::test_watchdog::watchdog("a_capped_pool_runs_a_job_on_at_most_its_threads");
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
        let _bound = super::test_watchdog::watchdog(
            "tags_count_up_one_per_round_and_a_full_job_leaves_the_seats_alone",
        );
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
        let (front, back) = super::ends(state);
        assert_eq!(front, back, "drained between jobs");
    }

    #[test]
    fn claims_follow_the_guided_schedule() {
        let _bound = super::test_watchdog::watchdog("claims_follow_the_guided_schedule");
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
        let _bound = super::test_watchdog::watchdog(
            "a_capped_pool_of_one_runs_a_job_as_one_range_on_the_caller",
        );
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

    #[test]
    fn a_pool_debugs_as_its_thread_count() {
        let pool = ThreadPool::with_table(&TABLE, 3).unwrap();
        assert_eq!(format!("{pool:?}"), "ThreadPool { threads: 3 }");
    }
}
