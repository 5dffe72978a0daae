//! The retry-safe once cell whose owner outlives failed attempts.
//!
//! # State machine
//!
//! ```text
//!              claim (under lock)             publish Ok (under lock, Release)
//! INCOMPLETE ─────────────────────▶ RUNNING ─────────────────────────────────▶ COMPLETE
//!      ▲                              │
//!      └──────────────────────────────┘
//!        make_owner Err / publish Err / panic: back to INCOMPLETE, wake ONE waiter
//! ```
//!
//! Only the thread that moved the state to `RUNNING` touches the owner slot, and it writes
//! the slot at most once in the cell's life (`has_owner` says whether it has been written).
//! Everything the runner wrote is handed to the next runner by the mutex (the state change
//! back to `INCOMPLETE` and the next claim both happen under it) and to every reader by the
//! `Release` store of `COMPLETE`, which readers pair with an `Acquire` load: that load is the
//! whole fast path.

use core::fmt;
use core::mem::MaybeUninit;

use crate::sync::{
    AtomicBool, AtomicU8, AtomicU64, Condvar, Mutex, MutexGuard, Ordering, UnsafeCell,
};

const INCOMPLETE: u8 = 0;
const RUNNING: u8 = 1;
const COMPLETE: u8 = 2;

/// A once cell that separates *constructing the owner* from *publishing it*, and keeps the
/// owner across failed publications.
///
/// [`get_or_try_init`](KeepCell::get_or_try_init) guarantees:
/// 1. at most one owner is ever constructed, and once constructed it is never dropped, moved
///    or replaced until the cell itself is dropped (a `static` cell: never), even when
///    publication fails or panics;
/// 2. at most one publication succeeds; every caller that returns `Ok` gets the same owner,
///    with the owner's construction and everything the successful `publish` did visible;
/// 3. a failed or panicking attempt leaves the cell incomplete and unpoisoned; the next caller
///    retries with the owner that already exists (a panic propagates to the caller that ran
///    the attempt);
/// 4. after success the fast path is a single `Acquire` load, with no lock.
///
/// While one attempt runs the other callers block on a condition variable (no spinning);
/// after a failure exactly one of them is woken to retry. Calling `get_or_try_init` on the
/// same cell from inside `make_owner` or `publish` waits for itself for ever (as with
/// `std::sync::OnceLock`); [`GlobalProvider`](crate::GlobalProvider) puts a thread-local
/// marker around its attempts and returns `ProviderError::Reentered` instead.
///
/// This is what `once_cell`'s `get_or_try_init` does not do: it builds the value inside the
/// fallible closure and drops it when the closure fails, which is exactly wrong when the
/// value's address has already been handed to a C library.
///
/// ```
/// use keepalloc_provider::KeepCell;
/// static CELL: KeepCell<Vec<u8>> = KeepCell::new();
/// let mut tries = 0;
/// for _ in 0..3 {
///     let r = CELL.get_or_try_init(
///         || Ok::<_, &str>(vec![1, 2, 3]),
///         |_owner| { tries += 1; if tries < 3 { Err("not yet") } else { Ok(()) } },
///     );
///     if let Ok(owner) = r { assert_eq!(owner, &[1, 2, 3]); }
/// }
/// assert_eq!(CELL.stats().owners_constructed, 1);
/// assert_eq!(CELL.stats().init_attempts, 3);
/// ```
// `repr(C)` with the owner first: the fast path's `&owner` is then the cell's own address.
#[repr(C)]
pub struct KeepCell<T> {
    owner: UnsafeCell<MaybeUninit<T>>,
    state: AtomicU8,
    lock: Mutex<()>,
    wake: Condvar,
    has_owner: AtomicBool,
    owners_constructed: AtomicU64,
    init_attempts: AtomicU64,
    init_successes: AtomicU64,
}

/// Counters of a [`KeepCell`], touched only on the slow path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CellStats {
    /// Owners constructed (0 or 1, ever).
    pub owners_constructed: u64,
    /// Attempts run (each one called `make_owner` or `publish`).
    pub init_attempts: u64,
    /// Attempts that published (0 or 1, ever).
    pub init_successes: u64,
}

// SAFETY: the owner is shared as `&T` between threads (needs `T: Sync`) and may be dropped on
// another thread than the one that built it (needs `T: Send`); all other fields are
// synchronisation primitives.
unsafe impl<T: Send + Sync> Sync for KeepCell<T> {}
// SAFETY: moving the cell moves the owner with it (needs `T: Send`).
unsafe impl<T: Send> Send for KeepCell<T> {}

impl<T> Default for KeepCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for KeepCell<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeepCell")
            .field("published", &self.is_published())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Ends an attempt: on success marks the cell complete and wakes everyone; if dropped without
/// `succeed` (an `Err` or a panic unwinding through it) returns the cell to `INCOMPLETE` and
/// wakes one waiter to retry.
struct Attempt<'a, T> {
    cell: &'a KeepCell<T>,
}

impl<T> Attempt<'_, T> {
    fn succeed(self) {
        let cell = self.cell;
        core::mem::forget(self);
        cell.init_successes.fetch_add(1, Ordering::Relaxed);
        let guard = cell.locked();
        // Release: a reader that sees COMPLETE with Acquire sees the owner and the publication.
        cell.state.store(COMPLETE, Ordering::Release);
        drop(guard);
        cell.wake.notify_all();
    }
}

impl<T> Drop for Attempt<'_, T> {
    fn drop(&mut self) {
        let guard = self.cell.locked();
        self.cell.state.store(INCOMPLETE, Ordering::Relaxed);
        drop(guard);
        self.cell.wake.notify_one();
    }
}

/// The fields of an empty cell, shared by the `const` (std) and non-`const` (loom) `new`.
macro_rules! empty_cell {
    () => {
        KeepCell {
            owner: UnsafeCell::new(MaybeUninit::uninit()),
            state: AtomicU8::new(INCOMPLETE),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            has_owner: AtomicBool::new(false),
            owners_constructed: AtomicU64::new(0),
            init_attempts: AtomicU64::new(0),
            init_successes: AtomicU64::new(0),
        }
    };
}

impl<T> KeepCell<T> {
    /// An empty cell.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        empty_cell!()
    }

    /// An empty cell (loom's primitives are not `const`).
    #[cfg(loom)]
    pub fn new() -> Self {
        empty_cell!()
    }

    /// The owner, once published: a single `Acquire` load, no lock.
    #[inline]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == COMPLETE {
            // COMPLETE is stored (Release) only after the owner was written, and the
            // owner is never written again; our Acquire load makes the write visible.
            // SAFETY: the owner is initialised and never written again.
            Some(unsafe { self.owner_unchecked() })
        } else {
            None
        }
    }

    /// True once a publication has succeeded.
    #[inline]
    pub fn is_published(&self) -> bool {
        self.state.load(Ordering::Acquire) == COMPLETE
    }

    /// True while an attempt is running (some thread is inside `make_owner` or `publish`).
    /// A snapshot: meant for diagnostics and for a `fork()` child handler, where a running
    /// attempt belongs to a thread the child does not have.
    pub fn is_attempt_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// The owner if one has been constructed, published or not. An owner whose publication
    /// failed is still here (that is the point), and is the one the next attempt publishes.
    pub fn owner(&self) -> Option<&T> {
        if self.has_owner.load(Ordering::Acquire) {
            // `has_owner` is stored (Release) right after the owner is written, and
            // the owner is never written, moved or dropped again while `&self` lives.
            // SAFETY: the owner is initialised and never written again.
            Some(unsafe { self.owner_unchecked() })
        } else {
            None
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CellStats {
        CellStats {
            owners_constructed: self.owners_constructed.load(Ordering::Relaxed),
            init_attempts: self.init_attempts.load(Ordering::Relaxed),
            init_successes: self.init_successes.load(Ordering::Relaxed),
        }
    }

    /// Returns the published owner, or runs one attempt: construct the owner with
    /// `make_owner` if none exists yet, then `publish` it. See the type's docs for the
    /// guarantees.
    ///
    /// `make_owner` runs at most once successfully in the cell's life; if it fails (or
    /// panics) no owner exists and a later attempt calls its own `make_owner`. `publish` gets
    /// the owner at its final address; if it fails or panics the owner stays and a later
    /// attempt publishes it again. The error (or panic) goes to this caller only; callers
    /// that were waiting retry.
    #[inline]
    pub fn get_or_try_init<'a, E>(
        &'a self,
        make_owner: impl FnOnce() -> Result<T, E>,
        publish: impl FnOnce(&'a T) -> Result<(), E>,
    ) -> Result<&'a T, E> {
        if let Some(owner) = self.get() {
            return Ok(owner);
        }
        self.slow_path(make_owner, publish)
    }

    #[cold]
    fn slow_path<'a, E>(
        &'a self,
        make_owner: impl FnOnce() -> Result<T, E>,
        publish: impl FnOnce(&'a T) -> Result<(), E>,
    ) -> Result<&'a T, E> {
        let Some(attempt) = self.claim() else {
            // SAFETY: `claim` returns None only after seeing COMPLETE (Acquire).
            return Ok(unsafe { self.owner_unchecked() });
        };
        self.init_attempts.fetch_add(1, Ordering::Relaxed);
        // Only the RUNNING thread reads or writes `has_owner` without the lock's help; the
        // previous runner's store is visible through the mutex.
        // The campaign's proof that its witnesses are independent of this cell: builds with
        // `--cfg keepalloc_cell_mutant="..."` (never a default build) break the cell on
        // purpose, and `cargo xtask fault-test --cell-mutant NAME` must then fail.
        #[cfg(keepalloc_cell_mutant = "drop_on_failure")]
        let attempt = mutant::DropOnFailure {
            cell: self,
            attempt: Some(attempt),
        };
        #[cfg(keepalloc_cell_mutant = "rebuild_in_place")]
        let rebuild = self.has_owner.load(Ordering::Relaxed);
        #[cfg(not(keepalloc_cell_mutant = "rebuild_in_place"))]
        let rebuild = false;
        if !self.has_owner.load(Ordering::Relaxed) || rebuild {
            let owner = make_owner()?;
            // We are the only RUNNING thread, no owner has been written (so nobody
            // holds a reference into the slot), and the slot is written exactly once.
            // SAFETY: this thread alone may write the slot, and writes it once.
            self.owner.with_mut(|slot| unsafe { (*slot).write(owner) });
            self.has_owner.store(true, Ordering::Release);
            if !rebuild {
                self.owners_constructed.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The owner was written (now or by an earlier runner) and is never written
        // again, so shared references to it are sound for as long as `&'a self`.
        // SAFETY: the owner is initialised and never written again.
        let owner = unsafe { self.owner_unchecked() };
        publish(owner)?;
        attempt.succeed();
        Ok(owner)
    }

    /// Waits until the cell is complete (returns None) or this thread may run an attempt.
    fn claim(&self) -> Option<Attempt<'_, T>> {
        let mut guard = self.locked();
        loop {
            match self.state.load(Ordering::Acquire) {
                COMPLETE => return None,
                RUNNING => {
                    guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                _ => {
                    self.state.store(RUNNING, Ordering::Relaxed);
                    return Some(Attempt { cell: self });
                }
            }
        }
    }

    fn locked(&self) -> MutexGuard<'_, ()> {
        // Nothing panics while the lock is held, but a poisoned `()` is harmless anyway.
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// # Safety
    /// The owner has been written (`has_owner` or `COMPLETE` observed with Acquire, or we are
    /// the runner that wrote it).
    #[inline(always)]
    unsafe fn owner_unchecked(&self) -> &T {
        let ptr: *const T = self.owner.with(|slot| slot.cast::<T>());
        // The caller guarantees the slot is initialised; it is never written again
        // while `&self` lives, so the reference stays valid.
        // SAFETY: the slot is initialised (caller's promise) and never written again.
        unsafe { &*ptr }
    }
}

impl<T> Drop for KeepCell<T> {
    fn drop(&mut self) {
        if self.has_owner.load(Ordering::Acquire) {
            let drop_owner = |slot: *mut MaybeUninit<T>| {
                // SAFETY: the owner was written and `&mut self` proves nobody borrows it.
                unsafe { (*slot).assume_init_drop() }
            };
            self.owner.with_mut(drop_owner);
        }
    }
}

/// The same two mutants, reached from a provider's library onces: since the owner's once
/// completes before any library hook runs, a hook failure never fails the owner's attempt, so
/// the provider calls these when a library's hook fails (`drop_on_failure`) or is retried
/// (`rebuild_in_place`). Compiled only under `--cfg keepalloc_cell_mutant`, never in a default
/// build; NOT sound, on purpose.
#[cfg(keepalloc_cell_mutant = "drop_on_failure")]
impl<T> KeepCell<T> {
    /// Drops the owner in place and forgets it: the next attempt builds another.
    #[doc(hidden)]
    pub fn mutant_drop_owner(&self) {
        let guard = self.locked();
        if self.has_owner.swap(false, Ordering::AcqRel) {
            let drop_owner = |slot: *mut MaybeUninit<T>| {
                // SAFETY: NOT sound, on purpose: the library may still hold the owner.
                unsafe { (*slot).assume_init_drop() }
            };
            self.owner.with_mut(drop_owner);
            self.state.store(INCOMPLETE, Ordering::Relaxed);
        }
        drop(guard);
    }
}

#[cfg(keepalloc_cell_mutant = "rebuild_in_place")]
impl<T> KeepCell<T> {
    /// Builds a new owner over the existing one, at the same address, when `attempts` says
    /// this is a retry.
    #[doc(hidden)]
    pub fn mutant_rebuild<E>(&self, attempts: u64, make_owner: impl FnOnce() -> Result<T, E>) {
        if attempts <= 1 || !self.has_owner.load(Ordering::Acquire) {
            return;
        }
        if let Ok(owner) = make_owner() {
            // SAFETY: NOT sound, on purpose: readers may hold references into the slot.
            self.owner.with_mut(|slot| unsafe { (*slot).write(owner) });
        }
    }
}

/// Deliberately broken variants of the cell, compiled only under
/// `--cfg keepalloc_cell_mutant="..."`: the negative controls of the campaign's witnesses.
#[cfg(keepalloc_cell_mutant = "drop_on_failure")]
mod mutant {
    use super::{Attempt, KeepCell, Ordering};

    /// `drop_on_failure`: a failed or panicking attempt drops the owner in place and forgets
    /// it, so the next attempt builds another one (once_cell's `get_or_try_init` behaviour,
    /// counted once, as a careless port would).
    pub(super) struct DropOnFailure<'a, T> {
        pub(super) cell: &'a KeepCell<T>,
        pub(super) attempt: Option<Attempt<'a, T>>,
    }

    impl<T> DropOnFailure<'_, T> {
        pub(super) fn succeed(mut self) {
            if let Some(a) = self.attempt.take() {
                a.succeed();
            }
        }
    }

    impl<T> Drop for DropOnFailure<'_, T> {
        fn drop(&mut self) {
            if self.attempt.is_some() && self.cell.has_owner.swap(false, Ordering::AcqRel) {
                let drop_owner = |slot: *mut core::mem::MaybeUninit<T>| {
                    // SAFETY: NOT sound, on purpose: the library may still hold the owner.
                    unsafe { (*slot).assume_init_drop() }
                };
                self.cell.owner.with_mut(drop_owner);
            }
        }
    }
}
