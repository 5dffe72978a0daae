//! The real mimalloc, through its aligned entry points.

use core::alloc::Layout;
use core::ffi::c_void;

use libmimalloc_sys as ffi;

use crate::raw::{RawBackend, impl_allocator_for_raw};

/// mimalloc as an [`Allocator`](allocator_api2::alloc::Allocator).
///
/// Uses `mi_malloc_aligned`, `mi_zalloc_aligned` and `mi_realloc_aligned` directly, so an
/// aligned request costs what mimalloc charges for it and is never over-allocated and
/// re-aligned by hand. Zero-sized and `Copy`; every instance shares mimalloc's heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mimalloc;

impl Mimalloc {
    /// The mimalloc backend.
    pub const fn new() -> Self {
        Mimalloc
    }
}

// SAFETY: mimalloc's aligned entry points return NULL or a block of the requested size and
// alignment; `mi_realloc_aligned` leaves the old block valid when it fails; `mi_free`
// releases any mimalloc block.
unsafe impl RawBackend for Mimalloc {
    #[inline]
    fn raw_alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI call; any size/alignment is accepted (NULL on failure).
        unsafe { ffi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
    }
    #[inline]
    fn raw_alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI call; any size/alignment is accepted (NULL on failure).
        unsafe { ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
    }
    #[inline]
    unsafe fn raw_realloc(&self, ptr: *mut u8, old: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: caller promises `ptr` is a live mimalloc block allocated with `old.align()`.
        unsafe { ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, old.align()).cast() }
    }
    #[inline]
    unsafe fn raw_free(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: caller promises `ptr` is a live mimalloc block.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }
}

impl_allocator_for_raw!(Mimalloc);
