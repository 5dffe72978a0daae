//! One consuming library's initialization: a retry-safe once of its own, on top of the
//! owner's once.
//!
//! A runtime hands one allocator owner to several C libraries (XNNPACK, oneDNN, its own
//! arena). The owner is built and its table published by the owner's [`KeepCell`]; each
//! library's init hook then runs inside a [`LibraryOnce`] of its own, so that
//!
//! * each library's hook succeeds at most once, and a failed (or panicking) hook leaves that
//!   library's once incomplete: the next caller retries it, with the same owner;
//! * libraries never wait on each other: a caller of library A waits only for the owner's
//!   construction and for another attempt of library A, never for library B's hook;
//! * every caller learns whether its own hook ran ([`HookRan`]).
//!
//! [`GlobalProvider`](crate::GlobalProvider) composes the two onces; this type is the part
//! that the loom model (`provider/tests/loom.rs`) checks with two libraries.

use crate::cell::{CellStats, KeepCell};

/// Whether the caller's own init hook ran in this call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookRan {
    /// This call ran the hook, and it succeeded: the library is now initialized.
    Ran,
    /// The library was already initialized (by an earlier call, on any thread): the hook
    /// passed to this call was NOT called.
    AlreadyInitialized,
}

/// The retry-safe once of one library's init hook (a [`KeepCell`] whose owner is `()`).
pub struct LibraryOnce {
    cell: KeepCell<()>,
}

impl core::fmt::Debug for LibraryOnce {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LibraryOnce")
            .field("initialized", &self.is_initialized())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for LibraryOnce {
    fn default() -> Self {
        Self::new()
    }
}

impl LibraryOnce {
    /// A library that has not been initialized.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        LibraryOnce {
            cell: KeepCell::new(),
        }
    }

    /// A library that has not been initialized (loom's primitives are not `const`).
    #[cfg(loom)]
    pub fn new() -> Self {
        LibraryOnce {
            cell: KeepCell::new(),
        }
    }

    /// True once a hook of this library has succeeded (one `Acquire` load).
    #[inline]
    pub fn is_initialized(&self) -> bool {
        self.cell.is_published()
    }

    /// Runs `init` unless the library is already initialized. Concurrent callers of the
    /// same library wait for the running attempt; after a failure (or a panic, which
    /// propagates to this caller) one of them retries with its own hook.
    #[inline]
    pub fn run<E>(&self, init: impl FnOnce() -> Result<(), E>) -> Result<HookRan, E> {
        if self.cell.is_published() {
            return Ok(HookRan::AlreadyInitialized);
        }
        let mut ran = false;
        self.cell.get_or_try_init(
            || Ok(()),
            |_| {
                ran = true;
                init()
            },
        )?;
        Ok(if ran {
            HookRan::Ran
        } else {
            HookRan::AlreadyInitialized
        })
    }

    /// True while a hook of this library is running (see
    /// [`KeepCell::is_attempt_running`]).
    pub fn is_running(&self) -> bool {
        self.cell.is_attempt_running()
    }

    /// The counters: `init_attempts` hooks called, `init_successes` (0 or 1).
    pub fn stats(&self) -> CellStats {
        self.cell.stats()
    }
}
