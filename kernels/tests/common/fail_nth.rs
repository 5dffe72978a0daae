//! An allocator that fails one chosen allocation: the tests that fail each allocation site
//! in turn share it (each test binary has its own statics).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use keepalloc_allocators::System;
use keepalloc_allocators::allocator_api2::alloc::{AllocError, Allocator};

/// Fails the allocation whose 0-based index equals `FAIL_AT` (usize::MAX: none).
pub struct FailNth;
/// The index of the allocation to fail, counted in [`CALLS`].
pub static FAIL_AT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Allocations asked of [`FailNth`] so far.
pub static CALLS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System`, or refuses.
unsafe impl Allocator for FailNth {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if CALLS.fetch_add(1, Ordering::SeqCst) == FAIL_AT.load(Ordering::SeqCst) {
            return Err(AllocError);
        }
        System.allocate(layout)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the block came from `System.allocate` above.
        unsafe { System.deallocate(ptr, layout) }
    }
}
