//! The publisher: a process-wide allocator owner, its C table, and the consuming library's
//! initialization, all inside one [`KeepCell`].

use core::alloc::Layout;
use core::ffi::c_void;
use core::fmt;
use core::ptr::NonNull;
use std::sync::OnceLock;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{AllocatorTable, Counting, CountingStats, DefaultBackend};

use crate::cell::{CellStats, KeepCell};

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
pub enum ProviderError {
    /// The backend could not be constructed (it could not reserve its first memory).
    #[error("could not construct the allocator owner: out of memory")]
    OutOfMemory,
    /// The consuming library's init hook failed; the owner is kept for the next attempt.
    /// (Boxed so that `Result<AllocatorHandle, ProviderError>` is two words and the fast
    /// path returns in registers.)
    #[error("the library's initialization failed (the owner is kept; retry): {0}")]
    InitFailed(#[source] InitError),
}

/// The consuming library's initialization: gets the published table (at its final,
/// process-lifetime address) and may copy it or keep the pointer.
pub type InitHook = fn(&'static AllocatorTable) -> Result<(), InitError>;

/// The process-wide allocator owner: the backend wrapped in a counter, and its C table.
///
/// Constructed at most once per [`GlobalProvider`], never dropped: its address is the
/// `context` of the published table.
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
    fn new(backend: B) -> Self {
        Owner {
            backend: Counting::new(backend),
            table: OnceLock::new(),
        }
    }

    /// The owner's C table; its `context` is the owner's counting backend.
    pub fn table(&'static self) -> &'static AllocatorTable {
        self.table
            .get_or_init(|| AllocatorTable::for_allocator(&self.backend))
    }

    /// The owner's backend, wrapped in its counter.
    pub fn allocator(&self) -> &Counting<B> {
        &self.backend
    }

    /// The `context` pointer the owner's table carries.
    pub fn context(&self) -> *mut c_void {
        &self.backend as *const Counting<B> as *mut c_void
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
    cell: KeepCell<Owner<B>>,
    make_backend: fn() -> Result<B, AllocError>,
    init: Option<InitHook>,
}

impl<B> fmt::Debug for GlobalProvider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlobalProvider")
            .field("cell", &self.cell)
            .finish_non_exhaustive()
    }
}

/// A provider's counters: the once cell's and the owner's allocation counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProviderStats {
    /// Owners constructed (0 or 1, ever).
    pub owners_constructed: u64,
    /// Initialization attempts run.
    pub init_attempts: u64,
    /// Initialization attempts that published (0 or 1, ever).
    pub init_successes: u64,
    /// The owner's allocation counters (zero before an owner exists).
    pub allocator: CountingStats,
}

impl<B: Allocator + Send + Sync + 'static> GlobalProvider<B> {
    /// A provider that will build its owner with `make_backend` and publish it to `init`.
    pub const fn new(make_backend: fn() -> Result<B, AllocError>, init: Option<InitHook>) -> Self {
        GlobalProvider {
            cell: KeepCell::new(),
            make_backend,
            init,
        }
    }

    /// Returns the process-wide allocator, creating the owner, publishing its table and
    /// running the init hook (inside one once) if that has not happened yet.
    ///
    /// After the first success this is one `Acquire` load.
    #[inline]
    pub fn acquire(&'static self) -> Result<AllocatorHandle<B>, ProviderError> {
        if let Some(owner) = self.cell.get() {
            return Ok(AllocatorHandle { owner });
        }
        match self.init {
            Some(init) => self.acquire_with(init),
            None => self.acquire_with(|_| Ok(())),
        }
    }

    /// As [`acquire`](Self::acquire), but with this call's own init hook instead of the
    /// provider's. The hook runs only if this call is the one that runs the attempt.
    #[inline]
    pub fn acquire_with(
        &'static self,
        init: impl FnOnce(&'static AllocatorTable) -> Result<(), InitError>,
    ) -> Result<AllocatorHandle<B>, ProviderError> {
        if let Some(owner) = self.cell.get() {
            return Ok(AllocatorHandle { owner });
        }
        let make_backend = self.make_backend;
        self.cell
            .get_or_try_init(
                || {
                    make_backend()
                        .map(Owner::new)
                        .map_err(|_| ProviderError::OutOfMemory)
                },
                |owner: &'static Owner<B>| init(owner.table()).map_err(ProviderError::InitFailed),
            )
            .map(|owner| AllocatorHandle { owner })
    }

    /// The published allocator, if publication has succeeded (no side effects).
    #[inline]
    pub fn get(&'static self) -> Option<AllocatorHandle<B>> {
        self.cell.get().map(|owner| AllocatorHandle { owner })
    }

    /// The owner if one was constructed, published or not (for diagnostics and tests: after
    /// a failed attempt this is the owner the library may already have captured).
    pub fn owner(&'static self) -> Option<&'static Owner<B>> {
        self.cell.owner()
    }

    /// The counters.
    pub fn stats(&self) -> ProviderStats {
        let CellStats {
            owners_constructed,
            init_attempts,
            init_successes,
        } = self.cell.stats();
        ProviderStats {
            owners_constructed,
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
/// select), with no init hook of its own: pass one with
/// [`acquire_with`](GlobalProvider::acquire_with), or declare your own `static`
/// [`GlobalProvider`] with a hook. The C ABI (`keepalloc_acquire`) uses this one.
pub static DEFAULT_PROVIDER: GlobalProvider<DefaultBackend> =
    GlobalProvider::new(keepalloc_allocators::default_backend, None);

/// The per-session provider (ONNX Runtime's execution provider): cheap to create and copy;
/// every one that shares a [`GlobalProvider`] gets the same allocator.
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

    /// The owner's allocation counters.
    pub fn stats(&self) -> CountingStats {
        self.owner.backend.stats()
    }
}

// SAFETY: forwards to the owner's counting backend, which lives for the rest of the process.
unsafe impl<B: Allocator + Sync + 'static> Allocator for AllocatorHandle<B> {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.owner.backend.allocate(layout)
    }
    #[inline]
    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.owner.backend.allocate_zeroed(layout)
    }
    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise is forwarded unchanged.
        unsafe { self.owner.backend.deallocate(ptr, layout) }
    }
    #[inline]
    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        unsafe { self.owner.backend.grow(ptr, old, new) }
    }
    #[inline]
    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: the caller's promises are forwarded unchanged.
        unsafe { self.owner.backend.shrink(ptr, old, new) }
    }
}
