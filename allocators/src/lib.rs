//! Allocator backends and the C allocator table that every other keepalloc crate shares.
//!
//! This is the bottom layer of keepalloc. It knows nothing about once cells, providers or
//! kernels; it gives them a common vocabulary:
//!
//! * **Backends**: [`System`] (always), [`Mimalloc`] (feature `mimalloc`, the real mimalloc
//!   through its aligned entry points) and [`Arena`] (feature `bumpalo`, a bumpalo arena that
//!   many threads can share). [`DefaultBackend`] is the one the feature flags select.
//! * **Wrappers**: [`Counting`] (allocations, frees, live and peak bytes, on per-thread shards)
//!   and [`Limited`] (refuses an allocation that would pass a byte cap).
//! * **Adapters**: every backend and wrapper implements [`allocator_api2::alloc::Allocator`],
//!   the same trait version bumpalo and hashbrown implement, so they work with allocator-api2
//!   and hashbrown collections unchanged; [`AsGlobal`] turns any of them into a
//!   `#[global_allocator]`. Each writes what it does once, as a [`RequestAllocator`] (one
//!   function for every [`Request`] that returns a block, one that frees), and
//!   [`allocator_from_requests!`] writes its `Allocator` impl; wrappers in other crates do
//!   the same.
//! * **The C table**: [`AllocatorTable`] is `#[repr(C)]` with exactly the layout of XNNPACK's
//!   `struct xnn_allocator` (and of `keepalloc_table` in `keepalloc.h`). A C library copies it
//!   once and calls through it for the rest of the process; [`AllocatorTable::for_allocator`]
//!   builds one for any `&'static` allocator and [`TableAllocator`] goes the other way, using
//!   any table (ours or a foreign one) as an [`Allocator`](allocator_api2::alloc::Allocator).
//!   For a backend that frees without a size ([`SizelessFree`]: glibc, mimalloc, `Counting`
//!   of either) the table is headerless: the C library gets the backend's own blocks.
//! * **The contract, as code**: [`conformance`] is the one generic test suite every backend,
//!   wrapper and table in the workspace is run against.
//!
//! ```
//! use keepalloc_allocators::{AllocatorTable, Counting, System};
//!
//! static BACKEND: Counting<System> = Counting::new(System);
//! let table = AllocatorTable::for_allocator(&BACKEND);
//! // SAFETY: the table's functions are filled and follow the xnn_allocator contract.
//! unsafe {
//!     let p = table.aligned_allocate().unwrap()(table.context(), 64, 1000);
//!     assert!(!p.is_null() && p as usize % 64 == 0);
//!     table.aligned_deallocate().unwrap()(table.context(), p);
//! }
//! assert_eq!(BACKEND.stats().live_bytes, 0);
//! ```
// Without its feature a gated item is not in the crate: the links above go to its docs.rs page.
#![cfg_attr(
    not(feature = "mimalloc"),
    doc = "[`Mimalloc`]: https://docs.rs/keepalloc-allocators/latest/keepalloc_allocators/struct.Mimalloc.html"
)]
#![cfg_attr(
    not(feature = "bumpalo"),
    doc = "[`Arena`]: https://docs.rs/keepalloc-allocators/latest/keepalloc_allocators/struct.Arena.html"
)]
#![cfg_attr(
    not(feature = "conformance"),
    doc = "[`conformance`]: https://docs.rs/keepalloc-allocators/latest/keepalloc_allocators/conformance/index.html"
)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "bumpalo")]
mod arena;
#[cfg(feature = "conformance")]
pub mod conformance;
mod counting;
mod global;
mod headerless;
mod limited;
#[cfg(feature = "mimalloc")]
mod mimalloc;
mod no_unwind;
mod raw;
mod request;
mod sizeless;
mod system;
mod table;
mod table_allocator;

pub use allocator_api2;
#[cfg(feature = "bumpalo")]
pub use arena::Arena;
pub use counting::{Counting, CountingStats};
pub use global::AsGlobal;
pub use limited::Limited;
#[cfg(feature = "mimalloc")]
pub use mimalloc::Mimalloc;
pub use request::{Request, RequestAllocator};
pub use sizeless::SizelessFree;
pub use system::System;
pub use table::{
    AlignedAllocateFn, AllocateFn, AllocatorTable, DeallocateFn, RawTableParts, ReallocateFn,
    TABLE_MIN_ALIGN,
};
pub use table_allocator::TableAllocator;

/// The backend the default provider uses, chosen by cargo features.
///
/// The rule when several are on: `mimalloc` wins over `bumpalo`, and [`System`] is used when
/// neither is on. (A general-purpose allocator is the safer default for a process-wide owner:
/// an arena never gives memory back until it is dropped, and a process-wide owner never is.)
#[cfg(feature = "mimalloc")]
pub type DefaultBackend = Mimalloc;
/// The backend the default provider uses, chosen by cargo features.
///
/// The rule when several are on: `mimalloc` wins over `bumpalo`, and [`System`] is used when
/// neither is on.
#[cfg(all(feature = "bumpalo", not(feature = "mimalloc")))]
pub type DefaultBackend = Arena;
/// The backend the default provider uses, chosen by cargo features.
///
/// The rule when several are on: `mimalloc` wins over `bumpalo`, and [`System`] is used when
/// neither is on.
#[cfg(not(any(feature = "mimalloc", feature = "bumpalo")))]
pub type DefaultBackend = System;

/// The name of [`DefaultBackend`] (`"system"`, `"mimalloc"` or `"bumpalo"`), for reports.
pub const DEFAULT_BACKEND_NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else if cfg!(feature = "bumpalo") {
    "bumpalo"
} else {
    "system"
};

/// Builds a fresh [`DefaultBackend`]. `Err` only where the backend must reserve memory up
/// front and cannot (the arena's first chunk).
pub fn default_backend() -> Result<DefaultBackend, allocator_api2::alloc::AllocError> {
    #[cfg(feature = "mimalloc")]
    {
        Ok(Mimalloc)
    }
    #[cfg(all(feature = "bumpalo", not(feature = "mimalloc")))]
    {
        Arena::try_new()
    }
    #[cfg(not(any(feature = "mimalloc", feature = "bumpalo")))]
    {
        Ok(System)
    }
}
