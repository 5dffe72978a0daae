//! Claiming and running tasks ([`Shared::work`]), the part of a job the caller and the
//! workers share: the guided schedule, a panicking task, the count of finished tasks, and
//! which pool's task this thread is running (a nested `run` runs inline).

use core::cell::Cell;
use core::ops::Range;
use core::sync::atomic::Ordering;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};

use super::shared::Shared;
use super::state::{ends, state_of};

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

thread_local! {
    /// The pool whose task this thread is running (its `Shared` address), or 0.
    pub(super) static IN_TASK: Cell<usize> = const { Cell::new(0) };
}

/// Restores `IN_TASK` on scope exit (also when a task unwinds).
pub(super) struct Restore(pub(super) usize);

impl Drop for Restore {
    fn drop(&mut self) {
        IN_TASK.set(self.0);
    }
}

impl Shared {
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
    pub(super) fn work(
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
