//! keepalloc's XNNPACK integration, with adoption checked rather than assumed.
//!
//! XNNPACK keeps the first allocator `xnn_initialize` is given (NULL means its own) and
//! returns success to every later call, whatever allocator that call passes. A library that
//! someone else loaded and initialized first — ExecuTorch's XNNPACK backend calls
//! `xnn_initialize(NULL)` when it is loaded — therefore reports success to keepalloc and
//! never calls keepalloc's table. [`initialize_checked`] calls `xnn_initialize(table)` and then
//! makes XNNPACK allocate (a 1×1 fully-connected operator, created and deleted): if the
//! owner's allocation counter did not move, it returns [`XnnpackError::NotAdopted`] instead of
//! success. [`adopt`] runs that as keepalloc's init hook, inside the provider's once: a
//! not-adopted library leaves the once incomplete and keeps the owner, like any failed init.
//!
//! A runtime nobody can rebuild (ExecuTorch's XNNPACK backend) is adopted by interposition
//! instead: `libkeepalloc_preload.so` (`preload/keepalloc_preload.c`, installed by
//! `cargo xtask install`) in `LD_PRELOAD` takes the runtime's own `xnn_initialize(NULL)` and
//! runs it with keepalloc's table inside the once of the library `xnnpack@<file name>`.
//! [`interposition`] says from a library's ELF file whether a preload can reach its XNNPACK
//! at all ("not adoptable (hidden)" for LiteRT's).
//!
//! XNNPACK is loaded at run time ([`Xnnpack::load`]), with the function signatures of the
//! header it was built from ([`Generation`]): Debian's 2022 snapshot and the current
//! (2025-06 onwards) API differ in `xnn_create_fully_connected_nc_f32` and in the
//! reshape/setup split, and calling one with the other's signature is undefined behaviour.
//!
//! XNNPACK's C API is declared here once, for this crate and for the workspace's tests and
//! benchmark: [`ffi`] (the loader calls, constants and each header's function types),
//! [`Debian2022Api`] (Debian's library as raw entry points, for tests that drive XNNPACK
//! themselves) and [`current`] (the current library's f32, bf16 and int8 fully-connected
//! operators and subgraph path, which keepalloc's kernels are measured against).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod current;
mod debian2022;
mod elf;
pub mod ffi;
mod library;
mod open;

use std::path::PathBuf;

use allocator_api2::alloc::Allocator;
use keepalloc_allocators::AllocatorTable;
use keepalloc_provider::{AllocatorHandle, GlobalProvider, InitError, ProviderError};

pub use debian2022::Debian2022Api;
pub use elf::{Interposition, interposition};
pub use ffi::{
    Namespace, XNN_EXTRA_FLOATS, XNN_STATUS_SUCCESS, XNN_STATUS_UNINITIALIZED, XnnStatus,
};
pub use library::Xnnpack;
pub use open::Generation;

/// What can go wrong loading or initializing XNNPACK.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum XnnpackError {
    /// The library could not be loaded.
    #[error("cannot load XNNPACK from {0}: {1}")]
    Load(PathBuf, String),
    /// A function this crate calls is not exported.
    #[error("XNNPACK does not export {0}")]
    Missing(String),
    /// The library's API is not the generation it was loaded as.
    #[error("{path} is not a {expected:?} XNNPACK (its exports do not match that header)")]
    Generation {
        /// The library.
        path: PathBuf,
        /// The generation asked for.
        expected: Generation,
    },
    /// `xnn_initialize` (or the probe operator) returned an error status.
    #[error("XNNPACK returned status {0}")]
    Status(XnnStatus),
    /// `xnn_initialize` returned success but XNNPACK does not allocate through the table.
    #[error(
        "XNNPACK does not allocate through keepalloc's table: the library was initialized \
         earlier with another allocator (xnn_initialize keeps the first one and reports \
         success to later calls)"
    )]
    NotAdopted,
    /// The library's ELF file could not be read ([`interposition`]).
    #[error("cannot read the ELF file {0}: {1}")]
    Elf(PathBuf, String),
}

/// Calls `xnn_initialize(table)` and verifies adoption: a 1×1 fully-connected operator is
/// created and deleted, and `allocations()` (the owner's allocation counter) must have moved.
///
/// Returns [`XnnpackError::NotAdopted`] when it did not: XNNPACK was initialized earlier with
/// another allocator and will never use `table`.
///
/// # Safety
/// `table` must stay valid, and its `context` alive, for the life of the process (XNNPACK
/// may keep it).
pub unsafe fn initialize_checked(
    xnn: &Xnnpack,
    table: &AllocatorTable,
    allocations: impl Fn() -> u64,
) -> Result<(), XnnpackError> {
    // SAFETY: the caller's promise.
    let status = unsafe { xnn.initialize(Some(table)) };
    if status != XNN_STATUS_SUCCESS {
        return Err(XnnpackError::Status(status));
    }
    let before = allocations();
    xnn.fully_connected(
        1,
        1,
        1,
        &[1.0],
        &[1.0],
        &[0.0],
        f32::NEG_INFINITY,
        f32::INFINITY,
    )
    .map_err(XnnpackError::Status)?;
    if allocations() == before {
        Err(XnnpackError::NotAdopted)
    } else {
        Ok(())
    }
}

/// The library name XNNPACK's init runs under on a shared owner
/// ([`GlobalProvider::acquire_library`]): other libraries on the same owner keep their own
/// once.
pub const LIBRARY: &str = "xnnpack";

/// Builds `provider`'s owner (once, ever), publishes its table and initializes `xnn` with it,
/// inside the once of the library named [`LIBRARY`], checking adoption ([`initialize_checked`]). A library that
/// was initialized earlier with another allocator fails with
/// [`ProviderError::InitFailed`] carrying [`XnnpackError::NotAdopted`]'s message; the owner
/// is kept and the `xnnpack` library stays uninitialized (its once retries).
pub fn adopt<B>(
    provider: &'static GlobalProvider<B>,
    xnn: &'static Xnnpack,
) -> Result<AllocatorHandle<B>, ProviderError>
where
    B: Allocator + Send + Sync + 'static,
{
    provider
        .acquire_library(LIBRARY, |table| {
            let allocations = || {
                provider
                    .constructed_owner()
                    .map_or(0, |owner| owner.allocator().stats().allocations)
            };
            // SAFETY: the table is the owner's, published at its final address, and the owner is never dropped (keepalloc's guarantee).
            unsafe { initialize_checked(xnn, table, allocations) }
                .map_err(|e| InitError::new(e.to_string()))
        })
        .map(|(handle, _)| handle)
}
