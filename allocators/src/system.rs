//! The operating system's allocator (`std::alloc::System`: glibc malloc on Linux).

use core::alloc::{GlobalAlloc, Layout};

use crate::raw::RawBackend;

/// The system allocator as an [`Allocator`](allocator_api2::alloc::Allocator).
///
/// Zero-sized, `Copy`, always available. Blocks come from `std::alloc::System`, so over-aligned
/// requests use `posix_memalign` and everything else plain `malloc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct System;

impl System {
    /// The system allocator (for symmetry with the other backends' constructors).
    pub const fn new() -> Self {
        System
    }
}

// SAFETY: each method forwards to `std::alloc::System`, whose `GlobalAlloc` contract is the
// one `RawBackend` asks for (sizes are non-zero here; realloc keeps the old block on failure).
unsafe impl RawBackend for System {
    #[inline]
    fn raw_alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `layout.size() > 0` by `RawBackend`'s contract.
        unsafe { std::alloc::System.alloc(layout) }
    }
    #[inline]
    fn raw_alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `layout.size() > 0` by `RawBackend`'s contract.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    #[inline]
    unsafe fn raw_realloc(&self, ptr: *mut u8, old: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: caller promises `ptr` came from `System` with `old`; `new_size > 0`.
        unsafe { std::alloc::System.realloc(ptr, old, new_size) }
    }
    #[inline]
    unsafe fn raw_free(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: caller promises `ptr` came from `System` with `layout`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

crate::allocator_from_requests!(System);
