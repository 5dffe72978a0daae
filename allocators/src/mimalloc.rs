//! The real mimalloc, through its aligned entry points.

use core::alloc::Layout;
use core::ffi::c_void;

use libmimalloc_sys as ffi;

use crate::raw::{RawBackend, impl_allocator_for_raw};

/// mimalloc as an [`Allocator`](allocator_api2::alloc::Allocator).
///
/// Over-aligned requests use `mi_malloc_aligned`, `mi_zalloc_aligned` and `mi_realloc_aligned`
/// directly, so they cost what mimalloc charges and are never over-allocated and re-aligned by
/// hand. Requests that mimalloc's plain `mi_malloc` already satisfies (alignment ≤ 8, or ≤ 16
/// for blocks of 16 bytes or more: every mimalloc block is 8-aligned and every block of at
/// least `MI_MAX_ALIGN_SIZE` = 16 bytes is 16-aligned) go to `mi_malloc`/`mi_zalloc`/
/// `mi_realloc`: measured with callgrind, `mi_malloc_aligned(80, 16)` misses mimalloc's
/// aligned fast path and costs about twice the instructions of `mi_malloc(80)`.
/// Zero-sized and `Copy`; every instance shares mimalloc's heaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mimalloc;

impl Mimalloc {
    /// The mimalloc backend.
    pub const fn new() -> Self {
        Mimalloc
    }
}

/// True when plain `mi_malloc(size)` is already aligned to `align` (see the type's docs).
#[inline(always)]
fn natural(size: usize, align: usize) -> bool {
    align <= 8 || (align <= 16 && size >= 16)
}

// SAFETY: mimalloc's plain entry points return blocks aligned as `natural` says; its aligned
// entry points return NULL or a block of the requested size and
// alignment; `mi_realloc_aligned` leaves the old block valid when it fails; `mi_free`
// releases any mimalloc block.
unsafe impl RawBackend for Mimalloc {
    #[inline]
    fn raw_alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; any size/alignment is accepted (NULL on failure).
        unsafe {
            if natural(layout.size(), layout.align()) {
                ffi::mi_malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }
    #[inline]
    fn raw_alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain FFI calls; any size/alignment is accepted (NULL on failure).
        unsafe {
            if natural(layout.size(), layout.align()) {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }
    #[inline]
    unsafe fn raw_realloc(&self, ptr: *mut u8, old: Layout, new_size: usize) -> *mut u8 {
        // Caller promises `ptr` is a live mimalloc block allocated with `old.align()`;
        // `mi_realloc` of any mimalloc block keeps the alignment `natural` promises.
        // SAFETY: `ptr` is a live mimalloc block of `old.align()`.
        unsafe {
            if natural(new_size, old.align()) {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, old.align()).cast()
            }
        }
    }
    #[inline]
    unsafe fn raw_free(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: caller promises `ptr` is a live mimalloc block.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }
}

impl_allocator_for_raw!(Mimalloc);
