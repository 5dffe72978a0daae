//! The shared shape of a malloc-style backend: four raw entry points, turned into a full
//! [`Allocator`](allocator_api2::alloc::Allocator) by one macro so that zero-sized requests,
//! grow and shrink are handled the same way by every backend.

use core::alloc::Layout;
use core::ptr::NonNull;

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

/// Implements `allocator_api2::alloc::Allocator` for a type that implements [`RawBackend`].
macro_rules! impl_allocator_for_raw {
    ($ty:ty) => {
        // SAFETY: `RawBackend`'s contract gives blocks of the requested size and alignment
        // that stay valid until freed; zero-sized requests never reach the backend and get a
        // dangling aligned pointer that is never freed; grow/shrink keep contents.
        unsafe impl allocator_api2::alloc::Allocator for $ty {
            #[inline]
            fn allocate(
                &self,
                layout: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                if layout.size() == 0 {
                    return Ok($crate::raw::dangling(layout));
                }
                let p = $crate::raw::RawBackend::raw_alloc(self, layout);
                core::ptr::NonNull::new(p)
                    .map(|p| core::ptr::NonNull::slice_from_raw_parts(p, layout.size()))
                    .ok_or(allocator_api2::alloc::AllocError)
            }

            #[inline]
            fn allocate_zeroed(
                &self,
                layout: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                if layout.size() == 0 {
                    return Ok($crate::raw::dangling(layout));
                }
                let p = $crate::raw::RawBackend::raw_alloc_zeroed(self, layout);
                core::ptr::NonNull::new(p)
                    .map(|p| core::ptr::NonNull::slice_from_raw_parts(p, layout.size()))
                    .ok_or(allocator_api2::alloc::AllocError)
            }

            #[inline]
            unsafe fn deallocate(&self, ptr: core::ptr::NonNull<u8>, layout: core::alloc::Layout) {
                if layout.size() != 0 {
                    // The caller promises `ptr` came from this allocator with `layout`,
                    // and non-zero-sized blocks are exactly the ones the backend returned.
                    // SAFETY: `ptr` is a live, non-zero-sized block of this backend.
                    unsafe { $crate::raw::RawBackend::raw_free(self, ptr.as_ptr(), layout) }
                }
            }

            #[inline]
            unsafe fn grow(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                // SAFETY: the caller's promises for `grow` are exactly `resize`'s.
                unsafe { $crate::raw::resize(self, ptr, old, new, false) }
            }

            #[inline]
            unsafe fn grow_zeroed(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                // SAFETY: as for `grow`.
                unsafe { $crate::raw::resize(self, ptr, old, new, true) }
            }

            #[inline]
            unsafe fn shrink(
                &self,
                ptr: core::ptr::NonNull<u8>,
                old: core::alloc::Layout,
                new: core::alloc::Layout,
            ) -> Result<core::ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
                // SAFETY: as for `grow`.
                unsafe { $crate::raw::resize(self, ptr, old, new, false) }
            }
        }
    };
}
pub(crate) use impl_allocator_for_raw;

/// Grow or shrink `ptr` from `old` to `new`, through `realloc` when the alignment allows.
///
/// # Safety
/// `ptr` came from `backend` with layout `old` (a dangling pointer when `old.size() == 0`).
pub(crate) unsafe fn resize<B: RawBackend + allocator_api2::alloc::Allocator + ?Sized>(
    backend: &B,
    ptr: NonNull<u8>,
    old: Layout,
    new: Layout,
    zero_tail: bool,
) -> Result<NonNull<[u8]>, allocator_api2::alloc::AllocError> {
    use allocator_api2::alloc::AllocError;
    if new.size() == 0 {
        // SAFETY: caller's promise about `ptr`/`old`.
        unsafe { backend.deallocate(ptr, old) };
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
    let fresh = if zero_tail {
        backend.allocate_zeroed(new)?
    } else {
        backend.allocate(new)?
    };
    // SAFETY: both blocks are live and distinct; we copy the bytes both have.
    unsafe {
        core::ptr::copy_nonoverlapping(
            ptr.as_ptr(),
            fresh.as_ptr().cast::<u8>(),
            old.size().min(new.size()),
        );
        backend.deallocate(ptr, old);
    }
    Ok(fresh)
}
