//! Work sharing for `run`: the [`Parallel`] trait (any pool: ours, a runtime's, a
//! pthreadpool) and [`ThreadPool`], a persistent pool whose shared state comes from the
//! allocator table.
//!
//! See [`ThreadPool`] for the pool's memory, waking, concurrency, panic and drop rules.
//!
//! The pool, one idea per file:
//!
//! * this file: the public surface ([`Parallel`], [`Sequential`], [`MAX_POOL_THREADS`]);
//! * [`state`]: the tagged words (the state with its claim indices, the seats), bit by bit;
//! * [`shared`]: the block every thread of one pool shares, and the protocol of a job on it;
//! * [`work`]: claiming and running tasks, the part the caller and the workers share;
//! * [`wait`]: spin for a while, then sleep;
//! * [`worker`]: a worker thread's loop;
//! * [`threads`]: starting and joining the worker threads;
//! * [`thread_pool`]: [`ThreadPool`] itself: its block, its start and its drop;
//! * [`run`]: a job from the caller's side;
//! * [`capped`]: a pool used with fewer threads than it has;
//! * [`process`]: [`process_pool`], the process-wide pool in a static.

mod capped;
mod process;
mod run;
mod shared;
mod state;
mod thread_pool;
mod threads;
mod wait;
mod work;
mod worker;

#[cfg(test)]
mod tests;

use core::ops::Range;

pub(crate) use capped::Capped;
pub use process::process_pool;
pub use thread_pool::ThreadPool;

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
/// tasks missing is reported as
/// [`KernelError::ParallelIncomplete`](crate::KernelError::ParallelIncomplete), so a wrong
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
