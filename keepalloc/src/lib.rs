//! keepalloc: one process-wide allocator owner for the C libraries a runtime serves.
//!
//! Inference runtimes hand a process-wide allocator table to C libraries such as XNNPACK,
//! which copy the table's raw `context` pointer once and keep it for the life of the process.
//! keepalloc builds the owner behind that pointer exactly once, publishes its table and runs
//! the library's initialization inside one retry-safe once: a failed initialization is
//! retried later with the same owner, and the owner is never dropped, moved or replaced.
//!
//! This crate is the Rust entry point; it re-exports the pieces a runtime needs:
//!
//! * the publisher: [`GlobalProvider`] (declared as a `static`), [`Provider`] (one per
//!   session) and the [`AllocatorHandle`] they hand out; [`ProviderError`], [`InitError`] and
//!   [`HookRan`] say what happened;
//! * the C table [`AllocatorTable`] (the layout of XNNPACK's `struct xnn_allocator`), the
//!   backends ([`System`], [`Mimalloc`] with feature `mimalloc`, [`Arena`] with feature
//!   `bumpalo`) and the wrappers [`Counting`] and [`Limited`];
//! * with feature `onnxruntime`, [`onnxruntime`]: the owner as ONNX Runtime's env allocator;
//! * with feature `scribble`, [`scribble`]: a debugging allocator (scribbles, quarantine, red
//!   zones, guard pages, allocation and free stacks).
//!
//! C and C++ runtimes use the C library instead (package `keepalloc-capi`, `keepalloc.h`).
//!
//! ```
//! use keepalloc::{AllocatorTable, GlobalProvider, InitError, System};
//!
//! // The library's init hook: it receives the published table exactly once per success.
//! fn init_library(table: &'static AllocatorTable) -> Result<(), InitError> {
//!     assert!(!table.context().is_null());
//!     Ok(())
//! }
//!
//! static ALLOCATOR: GlobalProvider<System> = GlobalProvider::new(|| Ok(System), Some(init_library));
//!
//! let a = ALLOCATOR.acquire()?; // session A
//! let b = ALLOCATOR.acquire()?; // session B: the same owner, the hook did not run again
//! assert_eq!(a.context(), b.context());
//! # Ok::<(), keepalloc::ProviderError>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

#[cfg(feature = "bumpalo")]
pub use keepalloc_allocators::Arena;
#[cfg(feature = "mimalloc")]
pub use keepalloc_allocators::Mimalloc;
pub use keepalloc_allocators::{
    AllocatorTable, AsGlobal, Counting, CountingStats, DEFAULT_BACKEND_NAME, DefaultBackend,
    Limited, SizelessFree, System, TableAllocator, allocator_api2,
};
pub use keepalloc_provider::{
    AllocatorHandle, DEFAULT_PROVIDER, GlobalProvider, HookRan, InitError, InitHook, LibraryError,
    MAX_LIBRARIES, MAX_LIBRARY_NAME, Owner, Provider, ProviderError, ProviderStats,
};

/// The owner as ONNX Runtime's env allocator (`OrtAllocator`), registered inside keepalloc's
/// once. See the [`keepalloc_onnxruntime`] crate.
#[cfg(feature = "onnxruntime")]
pub mod onnxruntime {
    pub use keepalloc_onnxruntime::*;
}

/// Scribble, the debugging allocator. See the [`keepalloc_scribble`] crate.
#[cfg(feature = "scribble")]
pub mod scribble {
    pub use keepalloc_scribble::*;
}

// Every Rust block of the README and of docs/ is compiled (and run unless `no_run`) as a
// doctest of this crate, so that a quick start cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/embedding.md")]
struct EmbeddingDoctests;

#[cfg(all(doctest, feature = "onnxruntime"))]
#[doc = include_str!("../../docs/embedding-onnxruntime.md")]
struct EmbeddingOnnxruntimeDoctests;
