//! The publisher: a process-wide allocator owner, its C table, and the consuming library's
//! initialization, all inside one [`KeepCell`].

use core::alloc::Layout;
use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{AllocatorTable, Counting, CountingStats, DefaultBackend};

use crate::cell::{CellStats, KeepCell};
use crate::library_once::{HookRan, LibraryOnce};
use crate::registry::{DEFAULT_LIBRARY, LibraryError, Registry};

/// Why the consuming library's initialization failed (returned by an init hook).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InitError {
    message: String,
    code: Option<i32>,
}

impl InitError {
    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        InitError {
            message: message.into(),
            code: None,
        }
    }

    /// A failure reported by a C library as a non-zero status code.
    pub fn code(code: i32) -> Self {
        InitError {
            message: format!("the library's init returned status {code}"),
            code: Some(code),
        }
    }

    /// The C status code, when the failure came from one.
    pub fn status(&self) -> Option<i32> {
        self.code
    }
}

/// Why [`GlobalProvider::acquire`] failed. Either way nothing was published, an owner that
/// was already constructed is kept, and the call can be retried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The backend could not be constructed (it could not reserve its first memory).
    #[error("could not construct the allocator owner: out of memory")]
    OutOfMemory,
    /// The consuming library's init hook failed; the owner is kept for the next attempt.
    /// (Not boxed: [`InitError`], a `String` and an `Option<i32>`, is held inline, so
    /// `ProviderError` and `Result<AllocatorHandle, ProviderError>` are four words, 32 bytes
    /// on x86-64.)
    #[error("the library's initialization failed (the owner is kept; retry): {0}")]
    InitFailed(#[source] InitError),
    /// The library name was refused (empty, too long, not UTF-8, or the registry is full);
    /// nothing was registered and no hook ran.
    #[error("invalid library name: {0}")]
    Library(#[from] LibraryError),
    /// The call came from inside an attempt it would have to wait for: a library's own init
    /// hook acquiring the same library, or the backend constructor acquiring its provider.
    /// Without this check the call would wait for itself for ever.
    #[error("`{library}` re-entered its own initialization from inside it (it would deadlock)")]
    Reentered {
        /// The library (or `"owner construction"`).
        library: String,
    },
    /// This process is a `fork()` child and the attempt this call would wait for was running
    /// in another thread of the parent when it forked: no thread of the child can ever finish
    /// it (see [`GlobalProvider::after_fork_in_child`]).
    #[error(
        "`{library}`'s initialization was running in another thread when this process forked; it can never finish here"
    )]
    OrphanedByFork {
        /// The library (or `"owner construction"`).
        library: String,
    },
}

/// The provider's side of the cell mutants (never in a default build).
#[cfg(keepalloc_cell_mutant = "drop_on_failure")]
mod mutant {
    use crate::cell::KeepCell;

    /// Drops the owner when a library's hook fails or panics, unless disarmed.
    pub(super) struct DropOwnerOnFailure<'a, T> {
        pub(super) cell: &'a KeepCell<T>,
        pub(super) armed: bool,
    }

    impl<T> Drop for DropOwnerOnFailure<'_, T> {
        fn drop(&mut self) {
            if self.armed {
                self.cell.mutant_drop_owner();
            }
        }
    }
}

/// What this thread is inside of: `(provider address, library slot)` pairs, with
/// [`OWNER_SLOT`](active::OWNER_SLOT) for the owner's construction. Only the thread running an attempt pushes,
/// and it pops when the attempt ends (also when it unwinds).
mod active {
    use std::cell::RefCell;

    /// The "slot" of the owner's construction.
    pub(super) const OWNER_SLOT: usize = usize::MAX;

    thread_local! {
        static ACTIVE: RefCell<Vec<(usize, usize)>> = const { RefCell::new(Vec::new()) };
    }

    /// True when this thread is inside `(provider, slot)`'s attempt.
    pub(super) fn inside(provider: usize, slot: usize) -> bool {
        ACTIVE
            .try_with(|a| a.borrow().contains(&(provider, slot)))
            .unwrap_or(false)
    }

    /// Marks this thread as inside `(provider, slot)` until the guard drops.
    pub(super) struct Inside(usize, usize);

    impl Inside {
        pub(super) fn enter(provider: usize, slot: usize) -> Inside {
            let _ = ACTIVE.try_with(|a| a.borrow_mut().push((provider, slot)));
            Inside(provider, slot)
        }
    }

    impl Drop for Inside {
        fn drop(&mut self) {
            let _ = ACTIVE.try_with(|a| {
                let mut a = a.borrow_mut();
                if let Some(i) = a.iter().rposition(|&e| e == (self.0, self.1)) {
                    a.remove(i);
                }
            });
        }
    }
}

/// The consuming library's initialization: gets the published table (at its final,
/// process-lifetime address) and may copy it or keep the pointer.
pub type InitHook = fn(&'static AllocatorTable) -> Result<(), InitError>;

/// The process-wide allocator owner: the backend wrapped in a counter, and its C table.
///
/// Constructed at most once per [`GlobalProvider`], never dropped: its address is the
/// `context` of the published table. The counter is exact for a provider built with
/// [`GlobalProvider::new`] and switched off (stats read zero) for one built with
/// [`GlobalProvider::new_uncounted`]; [`Counting::is_counted`] on
/// [`allocator`](Self::allocator) says which.
pub struct Owner<B> {
    backend: Counting<B>,
    table: OnceLock<AllocatorTable>,
}

impl<B> fmt::Debug for Owner<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("at", &(self as *const Self))
            .field("stats", &self.backend.stats())
            .finish()
    }
}

impl<B: Allocator + Sync> Owner<B> {
    fn new(backend: B, counted: bool) -> Self {
        Owner {
            backend: if counted {
                Counting::new(backend)
            } else {
                Counting::uncounted(backend)
            },
            table: OnceLock::new(),
        }
    }

    /// The owner's C table. Its `context` is the owner's counting backend; for an uncounted
    /// owner ([`GlobalProvider::new_uncounted`]) it is the backend itself, inside the owner,
    /// so the table is exactly the bare backend's table and pays not even the flag test of
    /// [`Counting::uncounted`]. Either way the context lives as long as the owner.
    pub fn table(&'static self) -> &'static AllocatorTable {
        self.table.get_or_init(|| {
            if self.backend.is_counted() {
                AllocatorTable::for_allocator(&self.backend)
            } else {
                AllocatorTable::for_allocator(self.backend.inner())
            }
        })
    }

    /// The owner's backend, wrapped in its counter (an uncounted one for a provider built
    /// with [`GlobalProvider::new_uncounted`]).
    pub fn allocator(&self) -> &Counting<B> {
        &self.backend
    }

    /// The `context` pointer the owner's table carries: the counting backend, or for an
    /// uncounted owner the backend inside it.
    pub fn context(&self) -> *mut c_void {
        if self.backend.is_counted() {
            &self.backend as *const Counting<B> as *mut c_void
        } else {
            self.backend.inner() as *const B as *mut c_void
        }
    }
}

/// A process-wide provider: declare it as a `static`, give it the backend constructor and the
/// consuming library's init hook, and every session's [`Provider`] shares it.
///
/// ```
/// use keepalloc_allocators::{AllocatorTable, System};
/// use keepalloc_provider::{GlobalProvider, InitError, Provider};
///
/// fn library_init(table: &'static AllocatorTable) -> Result<(), InitError> {
///     // A real embedder calls e.g. `xnn_initialize(table)` here.
///     assert!(table.is_complete());
///     Ok(())
/// }
/// static ALLOCATOR: GlobalProvider<System> =
///     GlobalProvider::new(|| Ok(System), Some(library_init));
///
/// let a = Provider::with_global(&ALLOCATOR).preferred_allocator().unwrap();
/// let b = Provider::with_global(&ALLOCATOR).preferred_allocator().unwrap();
/// assert_eq!(a, b); // one owner for the life of the process
/// assert_eq!(ALLOCATOR.stats().owners_constructed, 1);
/// ```
pub struct GlobalProvider<B: 'static> {
    /// The owner's once: construction and table publication, nothing else.
    cell: KeepCell<Owner<B>>,
    /// Each consuming library's once, keyed by name; slot 0 is the default library.
    libraries: Registry,
    /// Set in a `fork()` child: bit 0 the owner's once, bit `1 + slot` a library's, for each
    /// attempt that another thread of the parent was running at the fork.
    orphaned: AtomicU32,
    make_backend: fn() -> Result<B, AllocError>,
    init: Option<InitHook>,
    /// False for [`GlobalProvider::new_uncounted`]: the owner's `Counting` is built uncounted.
    counted: bool,
}

impl<B> fmt::Debug for GlobalProvider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalProvider")
            .field("cell", &self.cell)
            .finish_non_exhaustive()
    }
}

/// A provider's counters: the owner's construction, the default library's init hook, and
/// the owner's allocation counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProviderStats {
    /// Owners constructed (0 or 1, ever).
    pub owners_constructed: u64,
    /// Attempts of the owner's once (each one tried to construct or publish the owner).
    pub owner_attempts: u64,
    /// Init hooks of the default library called.
    pub init_attempts: u64,
    /// Init hooks of the default library that succeeded (0 or 1, ever).
    pub init_successes: u64,
    /// The owner's allocation counters (zero before an owner exists, and always zero for a
    /// provider built with [`GlobalProvider::new_uncounted`]).
    pub allocator: CountingStats,
}

impl<B: Allocator + Send + Sync + 'static> GlobalProvider<B> {
    /// A provider that will build its owner with `make_backend` and hand it to `init` (the
    /// default library's hook). The owner counts every allocation exactly
    /// ([`Counting::new`]): [`stats`](Self::stats) and [`AllocatorHandle::stats`] report
    /// allocations, frees, live and peak bytes.
    pub const fn new(make_backend: fn() -> Result<B, AllocError>, init: Option<InitHook>) -> Self {
        Self::build(make_backend, init, true)
    }

    /// As [`new`](Self::new), but the owner does not count ([`Counting::uncounted`]): its C
    /// table and its [`Allocator`] face go straight to the backend after one never-changing
    /// branch, so alloc + free through the table costs what the backend costs called directly,
    /// at any number of threads. Everything else is the same: one owner, ever, the same
    /// retry-safe onces, the same table address.
    ///
    /// What is lost: the owner's counters read zero for ever ([`ProviderStats::allocator`],
    /// [`AllocatorHandle::stats`], and what the C API's `keepalloc_get_stats` reports for such a
    /// provider), so there is no live-bytes or peak accounting, no failure count, and no leak
    /// check can be made through the provider's stats (a test that asserts live bytes return
    /// to zero needs a counted provider). [`Counting::is_counted`] on the owner's
    /// [`allocator`](Owner::allocator) is false. Choose it for a runtime that needs no
    /// per-owner statistics; [`new`](Self::new) stays the default everywhere.
    ///
    /// ```
    /// use keepalloc_allocators::System;
    /// use keepalloc_provider::{GlobalProvider, Provider};
    /// static ALLOCATOR: GlobalProvider<System> =
    ///     GlobalProvider::new_uncounted(|| Ok(System), None);
    ///
    /// let handle = Provider::with_global(&ALLOCATOR).preferred_allocator().unwrap();
    /// // SAFETY: the published table follows the C contract.
    /// unsafe {
    ///     let p = handle.table().aligned_alloc(64, 256);
    ///     assert!(!p.is_null());
    ///     handle.table().aligned_free(p);
    /// }
    /// assert!(!handle.owner().allocator().is_counted());
    /// assert_eq!(ALLOCATOR.stats().allocator.allocations, 0);
    /// assert_eq!(ALLOCATOR.stats().owners_constructed, 1);
    /// ```
    pub const fn new_uncounted(
        make_backend: fn() -> Result<B, AllocError>,
        init: Option<InitHook>,
    ) -> Self {
        Self::build(make_backend, init, false)
    }

    const fn build(
        make_backend: fn() -> Result<B, AllocError>,
        init: Option<InitHook>,
        counted: bool,
    ) -> Self {
        GlobalProvider {
            cell: KeepCell::new(),
            libraries: Registry::new(),
            orphaned: AtomicU32::new(0),
            make_backend,
            init,
            counted,
        }
    }

    /// False for a provider built with [`new_uncounted`](Self::new_uncounted): its owner's
    /// counters always read zero.
    pub const fn is_counted(&self) -> bool {
        self.counted
    }

    /// Returns the process-wide allocator, creating the owner and publishing its table (the
    /// owner's once), then running the provider's init hook as the default library (its own
    /// once) if that has not succeeded yet. A provider without a hook only publishes.
    ///
    /// After the first success this is one or two `Acquire` loads. To run a hook of the
    /// caller's own for the default library instead (a provider built without one), call
    /// [`acquire_library`](Self::acquire_library) with [`DEFAULT_LIBRARY`].
    #[inline]
    pub fn acquire(&'static self) -> Result<AllocatorHandle<B>, ProviderError> {
        let Some(init) = self.init else {
            return self.publish();
        };
        if self.libraries.default_library().is_initialized()
            && let Some(owner) = self.cell.get()
        {
            return Ok(AllocatorHandle { owner });
        }
        self.run_library(0, self.libraries.default_library(), DEFAULT_LIBRARY, init)
            .map(|(handle, _)| handle)
    }

    /// Builds the owner (once, ever) and publishes its table, and nothing else: no library's
    /// once is run or consumed. [`published`](Self::published) returns the same handle
    /// afterwards without running anything.
    #[inline]
    pub fn publish(&'static self) -> Result<AllocatorHandle<B>, ProviderError> {
        if let Some(owner) = self.cell.get() {
            return Ok(AllocatorHandle { owner });
        }
        self.publish_slow()
    }

    #[cold]
    fn publish_slow(&'static self) -> Result<AllocatorHandle<B>, ProviderError> {
        let me = self as *const Self as usize;
        if active::inside(me, active::OWNER_SLOT) {
            return Err(ProviderError::Reentered {
                library: "owner construction".into(),
            });
        }
        if self.orphaned.load(Ordering::Relaxed) & 1 != 0 {
            return Err(ProviderError::OrphanedByFork {
                library: "owner construction".into(),
            });
        }
        let (make_backend, counted) = (self.make_backend, self.counted);
        self.cell
            .get_or_try_init(
                || {
                    let _inside = active::Inside::enter(me, active::OWNER_SLOT);
                    make_backend()
                        .map(|b| Owner::new(b, counted))
                        .map_err(|_| ProviderError::OutOfMemory)
                },
                |owner: &'static Owner<B>| {
                    owner.table();
                    Ok(())
                },
            )
            .map(|owner| AllocatorHandle { owner })
    }

    /// The owner (built and published once, ever), with `library`'s init hook run inside
    /// that library's own retry-safe once: each library's hook succeeds at most once, a
    /// failed one is retried by the next caller with the same owner, and different libraries
    /// never wait for each other's hooks (only for the owner's construction). Every library
    /// gets the same table. [`HookRan`] says whether THIS call's hook ran.
    ///
    /// [`DEFAULT_LIBRARY`] is the library [`acquire`](Self::acquire) initializes with the
    /// provider's own hook: `acquire_library(DEFAULT_LIBRARY, hook)` runs `hook` in that same
    /// once instead (what the C ABI's `keepalloc_acquire` does), so whichever succeeds first
    /// is the default library's only successful hook.
    ///
    /// Errors: [`ProviderError::Library`] for a refused name (empty, longer than
    /// [`MAX_LIBRARY_NAME`](crate::MAX_LIBRARY_NAME), or a new name when
    /// [`MAX_LIBRARIES`](crate::MAX_LIBRARIES) are registered); [`ProviderError::Reentered`]
    /// when called from inside `library`'s own hook; [`ProviderError::OutOfMemory`] and
    /// [`ProviderError::InitFailed`] as for `acquire`.
    ///
    /// ```
    /// use keepalloc_allocators::System;
    /// use keepalloc_provider::{GlobalProvider, HookRan, InitError};
    /// static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
    ///
    /// let (a, ran) = ALLOCATOR.acquire_library("xnnpack", |_| Ok(())).unwrap();
    /// assert_eq!(ran, HookRan::Ran);
    /// // The second library still gets its own hook called, with the same owner.
    /// let (b, ran) = ALLOCATOR.acquire_library("onednn", |_| Ok(())).unwrap();
    /// assert_eq!(ran, HookRan::Ran);
    /// assert_eq!(a, b);
    /// let (_, ran) = ALLOCATOR.acquire_library("xnnpack", |_| Ok(())).unwrap();
    /// assert_eq!(ran, HookRan::AlreadyInitialized);
    /// ```
    pub fn acquire_library(
        &'static self,
        library: &str,
        init: impl FnOnce(&'static AllocatorTable) -> Result<(), InitError>,
    ) -> Result<(AllocatorHandle<B>, HookRan), ProviderError> {
        let (slot, once) = self.libraries.slot(library)?;
        self.run_library(slot, once, library, init)
    }

    fn run_library(
        &'static self,
        slot: usize,
        once: &LibraryOnce,
        library: &str,
        init: impl FnOnce(&'static AllocatorTable) -> Result<(), InitError>,
    ) -> Result<(AllocatorHandle<B>, HookRan), ProviderError> {
        let me = self as *const Self as usize;
        if active::inside(me, slot) {
            return Err(ProviderError::Reentered {
                library: library.to_owned(),
            });
        }
        let handle = self.publish()?;
        if !once.is_initialized() && self.orphaned.load(Ordering::Relaxed) & (2 << slot) != 0 {
            return Err(ProviderError::OrphanedByFork {
                library: library.to_owned(),
            });
        }
        // ... and under `drop_on_failure` a failed or panicking hook drops the owner
        // (once_cell's retry).
        #[cfg(keepalloc_cell_mutant = "drop_on_failure")]
        let mut mutant = mutant::DropOwnerOnFailure {
            cell: &self.cell,
            armed: true,
        };
        let ran = once.run(|| {
            let _inside = active::Inside::enter(me, slot);
            // The campaign's proof that its witnesses stand outside the provider: under
            // `--cfg keepalloc_cell_mutant="rebuild_in_place"` a retried hook first rebuilds
            // the owner in place (never in a default build).
            #[cfg(keepalloc_cell_mutant = "rebuild_in_place")]
            {
                let (make_backend, counted) = (self.make_backend, self.counted);
                self.cell.mutant_rebuild(once.stats().init_attempts, || {
                    make_backend().map(|b| Owner::new(b, counted))
                });
            }
            init(handle.table()).map_err(ProviderError::InitFailed)
        })?;
        #[cfg(keepalloc_cell_mutant = "drop_on_failure")]
        {
            mutant.armed = false;
        }
        Ok((handle, ran))
    }

    /// Call in the child right after `fork()` (a `pthread_atfork` child handler: the C
    /// library registers one for its provider). Every attempt that was running in another
    /// thread of the parent at the fork is orphaned: that thread does not exist in the child,
    /// so the attempt can never finish, and a call that would wait for it returns
    /// [`ProviderError::OrphanedByFork`] instead of waiting for ever. Attempts that were not
    /// running are unaffected: the child can publish, initialize other libraries and retry.
    /// An attempt the forking thread itself was running (a hook that forks) continues in the
    /// child. Only atomics and this thread's marker are read: nothing allocates or locks.
    pub fn after_fork_in_child(&self) {
        let me = self as *const Self as usize;
        let mut orphaned = 0u32;
        if self.cell.is_attempt_running() && !active::inside(me, active::OWNER_SLOT) {
            orphaned |= 1;
        }
        for slot in 0..crate::registry::MAX_LIBRARIES {
            if self.libraries.once(slot).is_running() && !active::inside(me, slot) {
                orphaned |= 2 << slot;
            }
        }
        self.orphaned.fetch_or(orphaned, Ordering::Relaxed);
    }

    /// True once `library`'s init hook has succeeded (no side effects, no registration).
    pub fn is_initialized(&self, library: &str) -> bool {
        self.libraries
            .lookup(library)
            .is_some_and(LibraryOnce::is_initialized)
    }

    /// `library`'s counters (hooks called, successes), if it was ever acquired.
    pub fn library_stats(&self, library: &str) -> Option<CellStats> {
        self.libraries.lookup(library).map(LibraryOnce::stats)
    }

    /// The handle [`publish`](Self::publish) would return without running anything: `Some`
    /// once the owner is built and its table published (the owner's once has completed),
    /// whether or not any library's hook has run or succeeded since. What
    /// `keepalloc_get_table` reads. No side effects.
    ///
    /// Compare [`acquired`](Self::acquired), which for a provider with an init hook also
    /// waits for the default library's hook to succeed, and
    /// [`constructed_owner`](Self::constructed_owner), which also sees an owner whose
    /// publication has not (yet) succeeded.
    ///
    /// ```
    /// use keepalloc_allocators::System;
    /// use keepalloc_provider::GlobalProvider;
    /// static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), None);
    ///
    /// assert!(ALLOCATOR.published().is_none());
    /// let handle = ALLOCATOR.publish().unwrap();
    /// assert_eq!(ALLOCATOR.published(), Some(handle));
    /// ```
    #[inline]
    pub fn published(&'static self) -> Option<AllocatorHandle<B>> {
        self.cell.get().map(|owner| AllocatorHandle { owner })
    }

    /// The handle [`acquire`](Self::acquire) would return without running anything: `Some`
    /// once the owner is published and, for a provider with an init hook, the default
    /// library ([`DEFAULT_LIBRARY`]) has been initialized. For a provider without a hook this
    /// is [`published`](Self::published). No side effects.
    ///
    /// ```
    /// use keepalloc_allocators::{AllocatorTable, System};
    /// use keepalloc_provider::{GlobalProvider, InitError};
    ///
    /// fn refuse(_: &'static AllocatorTable) -> Result<(), InitError> {
    ///     Err(InitError::new("not now"))
    /// }
    /// static ALLOCATOR: GlobalProvider<System> =
    ///     GlobalProvider::new(|| Ok(System), Some(refuse));
    ///
    /// assert!(ALLOCATOR.acquire().is_err());
    /// // The owner was built and published; its library's hook failed.
    /// assert!(ALLOCATOR.published().is_some());
    /// assert!(ALLOCATOR.acquired().is_none());
    /// ```
    #[inline]
    pub fn acquired(&'static self) -> Option<AllocatorHandle<B>> {
        if self.init.is_some() && !self.libraries.default_library().is_initialized() {
            return None;
        }
        self.published()
    }

    /// The owner as soon as it has been constructed, published or not (for diagnostics and
    /// tests: after a failed attempt this is the owner the library may already have
    /// captured, and the one every retry hands out). `None` until the backend constructor
    /// has succeeded. No side effects.
    pub fn constructed_owner(&'static self) -> Option<&'static Owner<B>> {
        self.cell.owner()
    }

    /// The counters: owners constructed, the default library's hooks, the allocations.
    pub fn stats(&self) -> ProviderStats {
        let CellStats {
            owners_constructed,
            init_attempts: owner_attempts,
            ..
        } = self.cell.stats();
        let CellStats {
            init_attempts,
            init_successes,
            ..
        } = self.libraries.default_library().stats();
        ProviderStats {
            owners_constructed,
            owner_attempts,
            init_attempts,
            init_successes,
            allocator: self
                .cell
                .owner()
                .map(|o| o.backend.stats())
                .unwrap_or_default(),
        }
    }
}

/// The process-wide default provider, for [`DefaultBackend`] (the backend the cargo features
/// select), with no init hook of its own: run one as the default library with
/// `DEFAULT_PROVIDER.acquire_library(DEFAULT_LIBRARY, hook)`
/// ([`GlobalProvider::acquire_library`], [`DEFAULT_LIBRARY`]), or declare your own `static`
/// [`GlobalProvider`] with a hook. [`Provider::new`] uses this one; the C ABI has providers
/// of its own (in the `keepalloc-capi` crate).
pub static DEFAULT_PROVIDER: GlobalProvider<DefaultBackend> =
    GlobalProvider::new(keepalloc_allocators::default_backend, None);

/// The per-session provider (ONNX Runtime's execution provider): cheap to create and copy;
/// every one that shares a [`GlobalProvider`] gets the same allocator.
///
/// A session provider owns nothing, so whether the owner counts is its global provider's
/// choice: [`Provider::with_global`] on a [`GlobalProvider::new_uncounted`] gives sessions an
/// uncounted owner (stats read zero); [`Provider::new`] uses [`DEFAULT_PROVIDER`], which
/// counts.
pub struct Provider<B: 'static = DefaultBackend> {
    global: &'static GlobalProvider<B>,
}

impl<B> Clone for Provider<B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B> Copy for Provider<B> {}

impl<B> fmt::Debug for Provider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("global", &(self.global as *const GlobalProvider<B>))
            .finish()
    }
}

impl Provider<DefaultBackend> {
    /// A session provider on [`DEFAULT_PROVIDER`].
    pub fn new() -> Self {
        Provider {
            global: &DEFAULT_PROVIDER,
        }
    }
}

impl Default for Provider<DefaultBackend> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Allocator + Send + Sync + 'static> Provider<B> {
    /// A session provider on `global`.
    pub const fn with_global(global: &'static GlobalProvider<B>) -> Self {
        Provider { global }
    }

    /// The process-wide allocator: owner creation, table publication and the library's init
    /// run inside one once; the same handle for every provider for the life of the process.
    #[inline]
    pub fn preferred_allocator(&self) -> Result<AllocatorHandle<B>, ProviderError> {
        self.global.acquire()
    }

    /// The global provider this session shares.
    pub fn global(&self) -> &'static GlobalProvider<B> {
        self.global
    }
}

/// A handle to the published process-wide allocator. `Copy`; compares equal when two handles
/// are the same owner. Usable as an [`Allocator`] (through the counting backend).
pub struct AllocatorHandle<B: 'static> {
    owner: &'static Owner<B>,
}

impl<B> Clone for AllocatorHandle<B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B> Copy for AllocatorHandle<B> {}

impl<B> PartialEq for AllocatorHandle<B> {
    fn eq(&self, other: &Self) -> bool {
        core::ptr::eq(self.owner, other.owner)
    }
}
impl<B> Eq for AllocatorHandle<B> {}

impl<B> fmt::Debug for AllocatorHandle<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AllocatorHandle")
            .field(&(self.owner as *const Owner<B>))
            .finish()
    }
}

impl<B: Allocator + Sync + 'static> AllocatorHandle<B> {
    /// The published table (the same address for every caller, for the life of the process).
    pub fn table(&self) -> &'static AllocatorTable {
        self.owner.table()
    }

    /// The owner.
    pub fn owner(&self) -> &'static Owner<B> {
        self.owner
    }

    /// The context pointer the library captured (the owner's backend).
    pub fn context(&self) -> *mut c_void {
        self.owner.context()
    }

    /// The owner's allocation counters (all zeros for an owner of
    /// [`GlobalProvider::new_uncounted`]).
    pub fn stats(&self) -> CountingStats {
        self.owner.backend.stats()
    }
}

// SAFETY: forwards to the owner's counting backend, which lives for the rest of the process.
unsafe impl<B: Allocator + Sync + 'static> keepalloc_allocators::RequestAllocator
    for AllocatorHandle<B>
{
    #[inline]
    unsafe fn serve(
        &self,
        request: keepalloc_allocators::Request,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        unsafe { request.forward_to(&self.owner.backend) }
    }
    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.owner.backend.deallocate(ptr, layout) }
    }
}
keepalloc_allocators::allocator_from_requests!(
    [B: Allocator + Sync + 'static] AllocatorHandle<B>
);
