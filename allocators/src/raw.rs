//! The shared shape of a malloc-style backend: four raw entry points, served as
//! [`Request`]s by one blanket impl so that zero-sized requests, grow and shrink are handled
//! the same way by every backend.

use core::alloc::Layout;
use core::ptr::NonNull;

use allocator_api2::alloc::AllocError;

use crate::{Request, RequestAllocator};

/// A malloc-style backend: raw entry points that never see a zero size.
///
/// # Safety
/// `alloc`/`alloc_zeroed` return NULL or a block of at least `layout.size()` bytes aligned to
/// `layout.align()`; `realloc` keeps the first `min(old, new)` bytes, returns NULL and leaves
/// the old block untouched on failure; `free` releases a block returned by this backend.
pub(crate) unsafe trait RawBackend {
    /// Allocates; `layout.size() > 0`.
    fn raw_alloc(&self, layout: Layout) -> *mut u8;
    /// Allocates zeroed memory; `layout.size() > 0`.
    fn raw_alloc_zeroed(&self, layout: Layout) -> *mut u8;
    /// Resizes a block of `old` to `new_size > 0` bytes, same alignment.
    ///
    /// # Safety
    /// `ptr` was returned by this backend with layout `old`.
    unsafe fn raw_realloc(&self, ptr: *mut u8, old: Layout, new_size: usize) -> *mut u8;
    /// Frees a block.
    ///
    /// # Safety
    /// `ptr` was returned by this backend with layout `layout`.
    unsafe fn raw_free(&self, ptr: *mut u8, layout: Layout);
}

/// A dangling, well-aligned pointer for a zero-sized block (never dereferenced, never freed).
pub(crate) fn dangling(layout: Layout) -> NonNull<[u8]> {
    // `align` is a non-zero power of two: a non-null, well-aligned address with no provenance
    // (never dereferenced; zero-sized accesses need none).
    let ptr = NonNull::new(core::ptr::without_provenance_mut(layout.align()))
        .unwrap_or(NonNull::dangling());
    NonNull::slice_from_raw_parts(ptr, 0)
}

/// A C-style result as a block of `size` bytes: NULL is a failure.
#[inline]
pub(crate) fn block(p: *mut u8, size: usize) -> Result<NonNull<[u8]>, AllocError> {
    NonNull::new(p)
        .map(|p| NonNull::slice_from_raw_parts(p, size))
        .ok_or(AllocError)
}

// SAFETY: `RawBackend`'s contract gives blocks of the requested size and alignment that stay
// valid until freed; zero-sized requests never reach the backend and get a dangling aligned
// pointer that is never freed; `resize` keeps contents.
unsafe impl<B: RawBackend> RequestAllocator for B {
    #[inline]
    unsafe fn serve(&self, request: Request) -> Result<NonNull<[u8]>, AllocError> {
        let Some((ptr, old)) = request.resized() else {
            let layout = request.layout();
            if layout.size() == 0 {
                return Ok(dangling(layout));
            }
            let p = if request.zeroed() {
                self.raw_alloc_zeroed(layout)
            } else {
                self.raw_alloc(layout)
            };
            return block(p, layout.size());
        };
        // SAFETY: the caller's promises for a resize are `resize`'s.
        unsafe { resize(self, ptr, old, request.layout(), request.zeroed()) }
    }

    #[inline]
    unsafe fn free_block(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // The caller promises `ptr` came from this allocator with `layout`, and
            // non-zero-sized blocks are exactly the ones the backend returned.
            // SAFETY: `ptr` is a live, non-zero-sized block of this backend.
            unsafe { self.raw_free(ptr.as_ptr(), layout) }
        }
    }
}

/// Grow or shrink `ptr` from `old` to `new`, through `realloc` when the alignment allows.
///
/// # Safety
/// `ptr` came from `backend` with layout `old` (a dangling pointer when `old.size() == 0`).
unsafe fn resize<B: RawBackend>(
    backend: &B,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zero_tail: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    if new.size() == 0 {
        // SAFETY: caller's promise about `ptr`/`old`.
        unsafe { backend.free_block(ptr, old) };
        return Ok(dangling(new));
    }
    if old.size() != 0 && old.align() == new.align() {
        // SAFETY: `ptr` is a live, non-zero-sized block of `old` from this backend.
        let p = unsafe { backend.raw_realloc(ptr.as_ptr(), old, new.size()) };
        let p = NonNull::new(p).ok_or(AllocError)?;
        if zero_tail && new.size() > old.size() {
            // SAFETY: the block is `new.size()` bytes long; we zero the grown tail.
            unsafe {
                p.as_ptr()
                    .add(old.size())
                    .write_bytes(0, new.size() - old.size())
            };
        }
        return Ok(NonNull::slice_from_raw_parts(p, new.size()));
    }
    // SAFETY: `ptr` is a live block of `backend` with `old` (the caller's promise).
    unsafe { move_block(backend, ptr, old, new, zero_tail) }
}

/// A resize by moving: a new block of `new` (zeroed when asked), the bytes both blocks hold
/// copied over, the old block freed.
///
/// # Safety
/// `ptr` is a live block of `allocator` with `old`.
pub(crate) unsafe fn move_block<A: RequestAllocator + ?Sized>(
    allocator: &A,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zeroed: bool,
) -> Result<NonNull<[u8]>, AllocError> {
    // SAFETY: an allocation has no precondition.
    let fresh = unsafe {
        allocator.serve(Request::Allocate {
            layout: new,
            zeroed,
        })
    }?;
    // SAFETY: both blocks are live and distinct; copy what both hold, then free the old.
    unsafe {
        core::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            fresh.as_ptr().cast::<u8>(),
            old.size().min(new.size()),
        );
        allocator.free_block(ptr, old);
    }
    Ok(fresh)
}
