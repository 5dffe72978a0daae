//! The publisher: a retry-safe once that hands a process-wide allocator to a C library and
//! never drops the owner the library may already point at.
//!
//! Inference runtimes give libraries such as XNNPACK a process-wide allocator table; the
//! library copies the table's raw `context` pointer once and uses it for the rest of the
//! process. ONNX Runtime once built that owner behind an unsynchronised null check, so two
//! sessions created together could each build one, the second replacing (and dropping) the
//! first while XNNPACK kept the first one's pointer. This crate puts owner creation, table
//! publication and the library's initialization inside ONE once ([`KeepCell`]); a failed
//! initialization can be retried, but never replaces an owner that was already built.
//!
//! * [`KeepCell`]: the once cell itself, generic, model-checked with loom.
//! * [`GlobalProvider`]: a `static`-constructible process-wide provider for a backend and a
//!   library init hook; [`DEFAULT_PROVIDER`] is the one for the feature-selected
//!   [`DefaultBackend`](keepalloc_allocators::DefaultBackend).
//! * Several libraries on one owner: [`GlobalProvider::acquire_library`] runs each named
//!   library's init hook in a [`LibraryOnce`] of its own on top of the owner's once (a
//!   bounded registry: [`MAX_LIBRARIES`], names up to [`MAX_LIBRARY_NAME`] bytes).
//! * [`Provider`]: the cheap per-session value whose
//!   [`preferred_allocator`](Provider::preferred_allocator) returns the shared
//!   [`AllocatorHandle`].
//!
//! It meets the consuming library (the `keepalloc-kernels` crate, XNNPACK, ...) only through
//! [`AllocatorTable`](keepalloc_allocators::AllocatorTable); the C face is the `keepalloc`
//! crate (`capi`) with the header `capi/include/keepalloc.h`.
//!
//! ```
//! use keepalloc_provider::Provider;
//! let session_a = Provider::new();
//! let session_b = Provider::new();
//! let a = session_a.preferred_allocator().unwrap();
//! let b = session_b.preferred_allocator().unwrap();
//! assert_eq!(a, b);
//! assert_eq!(a.table().context(), a.context());
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod cell;
mod library_once;
#[cfg(not(loom))]
mod provider;
#[cfg(not(loom))]
mod registry;
mod sync;

pub use cell::{CellStats, KeepCell};
pub use library_once::{HookRan, LibraryOnce};
#[cfg(not(loom))]
pub use provider::{
    AllocatorHandle, DEFAULT_PROVIDER, GlobalProvider, InitError, InitHook, Owner, Provider,
    ProviderError, ProviderStats,
};
#[cfg(not(loom))]
pub use registry::{
    DEFAULT_LIBRARY, LibraryError, MAX_LIBRARIES, MAX_LIBRARY_NAME, check_name, check_name_bytes,
};
