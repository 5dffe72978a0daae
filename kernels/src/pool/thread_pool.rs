//! [`ThreadPool`] itself: what it promises (its doc), its block from the allocator table,
//! starting its workers, and drop, which joins them before the block is freed. A job on it
//! is the caller's side, in [`run`](super::run).

use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use keepalloc_allocators::AllocatorTable;

use super::shared::Shared;
use super::state::{CLOSED, next_tag, tagged};
use super::threads::{ThreadId, Threads};
use super::{MAX_POOL_THREADS, Parallel};
use crate::error::KernelError;
use crate::init;

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
    /// The block every thread of the pool shares (see [`Shared`]).
    pub(super) shared: NonNull<Shared>,
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
    pub(super) unsafe fn start(
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

    pub(super) fn shared(&self) -> &Shared {
        // SAFETY: the block lives (initialized) until drop, which needs `&mut self`.
        unsafe { self.shared.as_ref() }
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
