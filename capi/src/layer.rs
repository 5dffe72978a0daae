//! A base backend, or a debugging wrapper over it, chosen once at run time: Scribble
//! (`KEEPALLOC_SCRIBBLE`) and site failing (`KEEPALLOC_FAIL`) are each one of these.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator};
use keepalloc_allocators::{Request, RequestAllocator};

/// `B` alone, or the wrapper `W` (over a `B`).
#[derive(Debug)]
// One value per process, inside the owner that is never moved or dropped: its size is
// irrelevant, and boxing would add a pointer chase to every allocation.
#[allow(clippy::large_enum_variant)]
pub enum Layered<B, W> {
    /// The base backend alone.
    Plain(B),
    /// The wrapper over it.
    Wrapped(W),
}

impl<B, W> Layered<B, W> {
    /// The wrapper, when that is the backend.
    pub fn wrapper(&self) -> Option<&W> {
        match self {
            Layered::Plain(_) => None,
            Layered::Wrapped(w) => Some(w),
        }
    }
}

// SAFETY: every call forwards to the one allocator the value holds, which never changes, so
// blocks are always freed and resized by the allocator that made them.
unsafe impl<B: Allocator, W: Allocator> RequestAllocator for Layered<B, W> {
    #[inline]
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        match self {
            // SAFETY: the caller's promises, forwarded to the allocator that made the block.
            Layered::Plain(a) => unsafe { request.forward_to(a) },
            // SAFETY: as above.
            Layered::Wrapped(a) => unsafe { request.forward_to(a) },
        }
    }

    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        match self {
            // SAFETY: the caller's promise, forwarded to the allocator that made the block.
            Layered::Plain(a) => unsafe { a.deallocate(ptr, layout) },
            // SAFETY: as above.
            Layered::Wrapped(a) => unsafe { a.deallocate(ptr, layout) },
        }
    }
}
keepalloc_allocators::allocator_from_requests!([B: Allocator, W: Allocator] Layered<B, W>);
