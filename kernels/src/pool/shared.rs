//! The block every thread of one pool shares ([`Shared`]): the state word and the job it
//! publishes on the first cache line, the count of finished tasks on the second, and the
//! locks a sleeping thread waits on. How a job is written, published and claimed on it is
//! the doc of [`Shared`].

use core::any::Any;
use core::cell::UnsafeCell;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::state::{ALL_SEATS, CLOSED};

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
pub(super) struct Shared {
    /// `(tag << 32) | (front << 16) | back`.
    pub(super) state: AtomicU64,
    /// The current job's task and the index its round starts at, written by the caller
    /// before it publishes the round and read by a worker only after a successful claim of
    /// that round's tag (see `Shared`).
    pub(super) job: UnsafeCell<Job>,
    /// The current round's task count.
    pub(super) tasks: AtomicUsize,
    /// `(tag << 32) | seats`: how many more workers may join the job tagged `tag`, or
    /// [`ALL_SEATS`] when every worker may (then no worker touches it). Written with the
    /// job, before it is published.
    pub(super) seats: AtomicU64,
    /// Tasks of the current job that have finished (or were skipped after a panic), on a
    /// cache line of its own (64-byte aligned: it starts the block's second line).
    pub(super) done: Padded<AtomicUsize>,
    /// Set once, by drop.
    pub(super) shutdown: AtomicBool,
    /// Workers asleep on `wake` (the caller notifies only when there are some).
    pub(super) sleepers: AtomicUsize,
    /// The caller is asleep on `finished`.
    pub(super) caller_waiting: AtomicBool,
    /// Worker threads (the pool has one more thread: the caller).
    pub(super) workers: usize,
    /// Guards the two condition variables.
    pub(super) lock: Mutex<()>,
    pub(super) wake: Condvar,
    pub(super) finished: Condvar,
    /// Serializes concurrent callers.
    pub(super) run_lock: Mutex<()>,
    /// The first panic of the current job.
    pub(super) panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// A value that starts a 64-byte cache line of its own.
#[repr(C, align(64))]
pub(super) struct Padded<T>(pub(super) T);

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
pub(super) struct Job {
    pub(super) task: Option<&'static (dyn Fn(Range<usize>) + Sync)>,
    pub(super) start: usize,
}

impl Shared {
    pub(super) const fn new(workers: usize) -> Shared {
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

    pub(super) fn lock(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes a new state and wakes sleeping workers.
    pub(super) fn publish(&self, state: u64) {
        self.state.store(state, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _l = self.lock();
            self.wake.notify_all();
        }
    }

    /// Takes one of the seats of the job tagged `tag` (always granted when every worker may
    /// join); false when the job has no seat left or is not the current one any more.
    pub(super) fn take_seat(&self, tag: u64) -> bool {
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
    pub(super) fn run_length(&self, unclaimed: usize) -> usize {
        (unclaimed / (2 * (self.workers + 1))).max(1)
    }
}
