//! A worker thread's loop ([`worker`]): wait for a new tag, read the job's task count
//! seqlock-style, take a seat, claim from the back, until the pool shuts down.

use core::ops::Range;
use core::sync::atomic::{Ordering, fence};

use super::shared::Shared;
use super::wait::wait_until;

/// A worker: waits for each new tag, joins its job while there are tasks to claim, until
/// shutdown.
pub(super) fn worker(s: &Shared) {
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
