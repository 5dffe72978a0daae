//! A job from the caller's side: [`Parallel`] for [`ThreadPool`]. The caller writes the job
//! while no claim can succeed, publishes it with its own first run already claimed, works
//! from the front, waits for the tasks the workers claimed, and resumes the first panic.

use core::ops::Range;
use core::sync::atomic::Ordering;
use std::panic::resume_unwind;
use std::sync::MutexGuard;

use super::shared::Job;
use super::state::{ALL_SEATS, MAX_ROUND, next_tag, state_of, tagged};
use super::wait::wait_until;
use super::work::{IN_TASK, Restore};
use super::{Parallel, ThreadPool};

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
    pub(super) fn run_ranges_with(
        &self,
        helpers: usize,
        tasks: usize,
        task: &(dyn Fn(Range<usize>) + Sync),
    ) {
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
