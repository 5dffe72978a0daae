//! `Plain`: an allocator that is not `SizelessFree` (it forwards the Rust face only), so the
//! table of an owner over it is a header table, as for the arena, `Limited`, or a runtime's
//! own allocator. Shared by the header-table tests.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};

/// Forwards `allocate` and `deallocate` (the rest are the trait's defaults).
pub struct Plain<A>(pub A);

// SAFETY: every call is forwarded unchanged to the wrapped allocator.
unsafe impl<A: Allocator> Allocator for Plain<A> {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        self.0.allocate(layout)
    }
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's promise, forwarded.
        unsafe { self.0.deallocate(ptr, layout) }
    }
}
