//! [`Capped`]: a [`ThreadPool`] used with fewer threads than it has (the process pool, one
//! thread per CPU, run with the thread count an operator asked for).

use core::ops::Range;

use super::{Parallel, ThreadPool};

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
